//! Framing: how messages become bytes on a stream, and back.
//!
//! ```text
//! +----------------+----------+----------+------------------------------+
//! | length: u32 BE | type: u8 | flags: u8| payload: `length` bytes      |
//! +----------------+----------+----------+------------------------------+
//! ```
//!
//! `length` counts the payload only. `type` is a [`MessageType`]. `flags` bit 0 means the
//! payload is one zstd frame (with its content size recorded) wrapping the postcard payload;
//! the other bits are reserved and must be zero. Each frame is compressed on its own, with no
//! context shared between frames, so one encoded frame ([`Bytes`]) can be written to any
//! number of connections, spliced into any stream, and decoded alone.
//!
//! The decoder checks the length against its limit before reserving anything, the type and
//! flags before reading the payload, and the recorded decompressed size before decompressing.
//! A partial frame is `Ok(None)`; anything malformed is an error; nothing panics.

use std::io::Cursor;

use bytes::{Buf, Bytes, BytesMut};

use crate::message::{Message, MessageType, PayloadError};

/// Bytes before the payload: length (4), type (1), flags (1).
pub const HEADER_LEN: usize = 6;

/// Flag bit: the payload is zstd-compressed.
pub const FLAG_ZSTD: u8 = 1 << 0;

/// Payloads smaller than this are sent uncompressed: zstd cannot win much on them and the
/// per-frame cost would dominate.
pub const DEFAULT_MIN_COMPRESS_LEN: usize = 256;

/// zstd level 1: the fastest level; on realistic workload-endpoint batches it compresses
/// 5.5x (100 KVs per frame) to 9x (1,000 per frame); see BENCHMARKS.md.
pub const DEFAULT_ZSTD_LEVEL: i32 = 1;

/// How much room the decoder reserves ahead for a frame that is still arriving.
const RESERVE_AHEAD: usize = 64 << 10;

/// Size limits a decoder enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest payload accepted as it is on the wire.
    pub max_frame_len: usize,
    /// Largest payload accepted after decompression.
    pub max_decoded_len: usize,
}

impl Limits {
    /// What a server accepts from clients: hellos (~8 KiB with a digest), pongs, acks.
    /// Matches Calico Typha's 1 MiB inbound cap.
    pub const SERVER_INBOUND: Limits = Limits {
        max_frame_len: 1 << 20,
        max_decoded_len: 1 << 20,
    };

    /// What a client accepts from servers: snapshot chunks and catch-up batches.
    pub const CLIENT_INBOUND: Limits = Limits {
        max_frame_len: 16 << 20,
        max_decoded_len: 64 << 20,
    };
}

/// A frame split off the stream, payload not yet decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Message type from the header.
    pub message_type: MessageType,
    /// Whether the payload is zstd-compressed.
    pub compressed: bool,
    /// The payload as received.
    pub payload: Bytes,
}

impl Frame {
    /// Length of the whole frame on the wire.
    pub fn wire_len(&self) -> usize {
        HEADER_LEN + self.payload.len()
    }
}

/// Why bytes could not be read as a frame or message. Every variant ends the connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The header announces a payload over the limit.
    #[error("frame of {len} bytes exceeds the limit of {max}")]
    TooLarge {
        /// Announced payload length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The header's type byte is not a known message type.
    #[error("unknown message type {0}")]
    UnknownType(u8),
    /// Reserved flag bits are set.
    #[error("reserved frame flags set: {0:#04x}")]
    ReservedFlags(u8),
    /// The compressed payload does not record its decompressed size.
    #[error("compressed {0} frame does not record its decompressed size")]
    UnknownDecodedLen(MessageType),
    /// Decompressing would exceed the limit.
    #[error("{message_type} frame decompresses to {len} bytes, over the limit of {max}")]
    DecodedTooLarge {
        /// Message type.
        message_type: MessageType,
        /// Recorded decompressed length.
        len: u64,
        /// The limit.
        max: usize,
    },
    /// zstd rejected the payload.
    #[error("{message_type} frame does not decompress: {reason}")]
    Decompress {
        /// Message type.
        message_type: MessageType,
        /// zstd's error.
        reason: String,
    },
    /// The payload does not decode as its type.
    #[error(transparent)]
    Payload(#[from] PayloadError),
}

/// Why a message could not be encoded. Not caused by the network: a bug or a resource limit.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// postcard failed (should not happen for protocol types).
    #[error("serializing {message_type}: {source}")]
    Serialize {
        /// Message type.
        message_type: MessageType,
        /// postcard's error.
        source: postcard::Error,
    },
    /// zstd failed.
    #[error("compressing {message_type}: {source}")]
    Compress {
        /// Message type.
        message_type: MessageType,
        /// zstd's error.
        source: std::io::Error,
    },
    /// The payload does not fit a frame.
    #[error("{message_type} payload of {len} bytes does not fit a frame")]
    TooLarge {
        /// Message type.
        message_type: MessageType,
        /// Payload length.
        len: usize,
    },
}

/// Turns messages into frames. Holds a reusable zstd context and scratch buffer; one per
/// thread or task that encodes.
pub struct FrameEncoder {
    compressor: Option<zstd::bulk::Compressor<'static>>,
    min_compress_len: usize,
    max_frame_len: usize,
    scratch: Vec<u8>,
}

impl std::fmt::Debug for FrameEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameEncoder")
            .field("zstd", &self.compressor.is_some())
            .field("min_compress_len", &self.min_compress_len)
            .finish()
    }
}

impl FrameEncoder {
    /// An encoder that never compresses.
    pub fn uncompressed() -> Self {
        Self {
            compressor: None,
            min_compress_len: usize::MAX,
            max_frame_len: Limits::CLIENT_INBOUND.max_frame_len,
            scratch: Vec::new(),
        }
    }

    /// An encoder that compresses payloads of at least [`DEFAULT_MIN_COMPRESS_LEN`] bytes with
    /// zstd at `level`, when that makes them smaller.
    ///
    /// # Errors
    ///
    /// zstd's error when it refuses `level` (outside its range) or the context cannot be made.
    pub fn zstd(level: i32) -> std::io::Result<Self> {
        let mut c = zstd::bulk::Compressor::new(level)?;
        // The decoder relies on the recorded size; make sure it is always written.
        c.include_contentsize(true)?;
        c.include_checksum(false)?;
        Ok(Self {
            compressor: Some(c),
            min_compress_len: DEFAULT_MIN_COMPRESS_LEN,
            max_frame_len: Limits::CLIENT_INBOUND.max_frame_len,
            scratch: Vec::new(),
        })
    }

    /// Sets the smallest payload that gets compressed.
    pub fn with_min_compress_len(mut self, len: usize) -> Self {
        self.min_compress_len = len;
        self
    }

    /// Sets the largest frame this encoder produces (default: [`Limits::CLIENT_INBOUND`]).
    pub fn with_max_frame_len(mut self, len: usize) -> Self {
        self.max_frame_len = len;
        self
    }

    /// Encodes `msg` as one complete frame.
    ///
    /// # Errors
    ///
    /// [`EncodeError::TooLarge`] when the payload, compressed or not, is longer than the encoder's
    /// largest frame ([`with_max_frame_len`](Self::with_max_frame_len)); [`EncodeError::Compress`]
    /// when zstd fails; [`EncodeError::Serialize`] if postcard fails (it does not for protocol types).
    pub fn encode(&mut self, msg: &Message) -> Result<Bytes, EncodeError> {
        let message_type = msg.message_type();
        self.scratch.clear();
        msg.encode_payload(&mut self.scratch)
            .map_err(|source| EncodeError::Serialize {
                message_type,
                source,
            })?;
        let raw_len = self.scratch.len();

        if let Some(c) = self
            .compressor
            .as_mut()
            .filter(|_| raw_len >= self.min_compress_len)
        {
            let bound = zstd::zstd_safe::compress_bound(raw_len);
            let mut out = Vec::with_capacity(HEADER_LEN + bound);
            out.extend_from_slice(&[0; HEADER_LEN]);
            let mut cursor = Cursor::new(&mut out);
            cursor.set_position(HEADER_LEN as u64);
            c.compress_to_buffer(&self.scratch, &mut cursor)
                .map_err(|source| EncodeError::Compress {
                    message_type,
                    source,
                })?;
            let compressed_len = out.len() - HEADER_LEN;
            if compressed_len < raw_len {
                return self.finish(out, message_type, FLAG_ZSTD);
            }
        }

        let mut out = Vec::with_capacity(HEADER_LEN + raw_len);
        out.extend_from_slice(&[0; HEADER_LEN]);
        out.extend_from_slice(&self.scratch);
        self.finish(out, message_type, 0)
    }

    fn finish(
        &self,
        mut out: Vec<u8>,
        message_type: MessageType,
        flags: u8,
    ) -> Result<Bytes, EncodeError> {
        let len = out.len() - HEADER_LEN;
        let len32 = u32::try_from(len)
            .ok()
            .filter(|_| len <= self.max_frame_len)
            .ok_or(EncodeError::TooLarge { message_type, len })?;
        if let Some([a, b, c, d, ty, fl]) = out.get_mut(..HEADER_LEN) {
            [*a, *b, *c, *d] = len32.to_be_bytes();
            *ty = message_type as u8;
            *fl = flags;
        }
        // A compressed frame was written into room for the worst case (about the raw size);
        // frames live on in the cache's history and snapshots, and `Bytes` keeps a `Vec`'s
        // whole capacity, so give the unused room back.
        out.shrink_to_fit();
        Ok(Bytes::from(out))
    }
}

/// Splits frames off a byte stream and decodes them. Holds a reusable zstd context.
pub struct FrameDecoder {
    limits: Limits,
    decompressor: Option<zstd::bulk::Decompressor<'static>>,
}

impl std::fmt::Debug for FrameDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameDecoder")
            .field("limits", &self.limits)
            .finish()
    }
}

impl FrameDecoder {
    /// A decoder enforcing `limits`.
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            decompressor: None,
        }
    }

    /// The limits in force.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Splits one frame off the front of `buf`: `Ok(None)` until a whole frame is there.
    /// Reserves room for the rest of an announced frame only once its header checked out.
    ///
    /// # Errors
    ///
    /// [`FrameError::TooLarge`] when the header announces a payload over the limits,
    /// [`FrameError::UnknownType`] for a type byte that names no message (0 included),
    /// [`FrameError::ReservedFlags`] when reserved flag bits are set. Nothing is taken from `buf`
    /// then; the connection should close, since what follows cannot be framed.
    pub fn decode_frame(&self, buf: &mut BytesMut) -> Result<Option<Frame>, FrameError> {
        let Some(header) = buf.get(..HEADER_LEN) else {
            return Ok(None);
        };
        let (message_type, flags, len) = parse_header(header, self.limits)?;
        let total = HEADER_LEN + len;
        if buf.len() < total {
            // Grow towards the announced size only in steps: a peer must send bytes to make us
            // hold memory, not merely announce them.
            buf.reserve((total - buf.len()).min(RESERVE_AHEAD));
            return Ok(None);
        }
        buf.advance(HEADER_LEN);
        let payload = buf.split_to(len).freeze();
        Ok(Some(Frame {
            message_type,
            compressed: flags & FLAG_ZSTD != 0,
            payload,
        }))
    }

    /// Decodes a frame's payload into a message.
    ///
    /// # Errors
    ///
    /// [`FrameError::DecodedTooLarge`] when the payload, decompressed, would exceed the limits (read
    /// from zstd's frame header, before decompressing), [`FrameError::UnknownDecodedLen`] for a
    /// zstd frame that does not record its size, [`FrameError::Decompress`] when zstd refuses it,
    /// [`FrameError::Payload`] when the payload does not decode as its type.
    pub fn decode_message(&mut self, frame: &Frame) -> Result<Message, FrameError> {
        if !frame.compressed {
            if frame.payload.len() > self.limits.max_decoded_len {
                return Err(FrameError::DecodedTooLarge {
                    message_type: frame.message_type,
                    len: frame.payload.len() as u64,
                    max: self.limits.max_decoded_len,
                });
            }
            return Ok(Message::decode_payload(frame.message_type, &frame.payload)?);
        }
        let raw = self.decompress(frame.message_type, &frame.payload)?;
        Ok(Message::decode_payload(frame.message_type, &raw)?)
    }

    /// [`decode_frame`](Self::decode_frame) then [`decode_message`](Self::decode_message).
    ///
    /// # Errors
    ///
    /// As [`decode_frame`](Self::decode_frame) and [`decode_message`](Self::decode_message); the
    /// frame is consumed when the second fails.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Message>, FrameError> {
        match self.decode_frame(buf)? {
            Some(frame) => self.decode_message(&frame).map(Some),
            None => Ok(None),
        }
    }

    fn decompress(
        &mut self,
        message_type: MessageType,
        data: &[u8],
    ) -> Result<Vec<u8>, FrameError> {
        let max = self.limits.max_decoded_len;
        let len = match zstd::zstd_safe::get_frame_content_size(data) {
            Ok(Some(len)) => len,
            Ok(None) => return Err(FrameError::UnknownDecodedLen(message_type)),
            Err(_) => {
                return Err(FrameError::Decompress {
                    message_type,
                    reason: "not a zstd frame".into(),
                });
            }
        };
        if len > max as u64 {
            return Err(FrameError::DecodedTooLarge {
                message_type,
                len,
                max,
            });
        }
        let err = |e: std::io::Error| FrameError::Decompress {
            message_type,
            reason: e.to_string(),
        };
        if self.decompressor.is_none() {
            self.decompressor = Some(zstd::bulk::Decompressor::new().map_err(err)?);
        }
        let Some(d) = self.decompressor.as_mut() else {
            return Err(FrameError::Decompress {
                message_type,
                reason: "no zstd context".into(),
            });
        };
        // `len` <= max, so this allocation is bounded by the limit; zstd refuses to write past
        // it (for example when more frames follow the first).
        let out = d.decompress(data, len as usize).map_err(err)?;
        if out.len() as u64 != len {
            return Err(FrameError::Decompress {
                message_type,
                reason: format!("recorded size {len}, got {}", out.len()),
            });
        }
        Ok(out)
    }
}

/// Checks a header; returns (type, flags, payload length).
fn parse_header(header: &[u8], limits: Limits) -> Result<(MessageType, u8, usize), FrameError> {
    let &[a, b, c, d, ty, flags] = header else {
        // Callers pass exactly HEADER_LEN bytes.
        return Err(FrameError::UnknownType(0));
    };
    let len = u32::from_be_bytes([a, b, c, d]) as usize;
    if len > limits.max_frame_len {
        return Err(FrameError::TooLarge {
            len,
            max: limits.max_frame_len,
        });
    }
    let message_type = MessageType::from_u8(ty).ok_or(FrameError::UnknownType(ty))?;
    if flags & !FLAG_ZSTD != 0 {
        return Err(FrameError::ReservedFlags(flags));
    }
    Ok((message_type, flags, len))
}

#[cfg(test)]
mod tests;
