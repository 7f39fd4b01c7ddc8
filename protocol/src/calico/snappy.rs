//! The snappy framing format, as `github.com/golang/snappy` v1.0.0 writes and reads it (what
//! Calico uses after a `MsgDecoderRestart` with `"snappy"`).
//!
//! A stream opens with the stream identifier chunk [`STREAM_IDENTIFIER`]. Then chunks, each
//! `[type][3-byte little-endian length][masked CRC-32C of the uncompressed bytes][data]`:
//! `0x00` compressed with snappy's block format, `0x01` stored. A block holds at most 64 KiB.
//!
//! Every chunk is compressed on its own, with no history, so a chunk can be spliced into any
//! snappy stream after its identifier. A server therefore writes, per stream, the identifier
//! (and the gob preamble's chunk: both constant), and then chunks it encoded once and
//! shares between all its streams: [`ChunkEncoder::encode`] makes them.
//!
//! The `snap` crate provides the block format (`snap::raw`); its framing (`snap::read`,
//! `snap::write`) works on `std::io` readers and writers and buffers chunks of its own, so the
//! framing here is ours: sans-IO, chunk by chunk, limits checked before allocating. Its
//! output is byte for byte golang/snappy's (the golden session files check it).

use bytes::{Buf, BytesMut};

/// The stream identifier chunk that opens every snappy stream.
pub const STREAM_IDENTIFIER: &[u8] = b"\xff\x06\x00\x00sNaPpY";

/// The most uncompressed bytes one chunk carries.
pub const MAX_BLOCK_LEN: usize = 65_536;

/// The longest chunk body (after the 4-byte header) golang/snappy's reader accepts: the
/// longest compressed block of 64 KiB (76,490 bytes), plus the checksum.
pub const MAX_CHUNK_LEN: usize = 76_490 + 4;

const CHUNK_COMPRESSED: u8 = 0x00;
const CHUNK_STORED: u8 = 0x01;
const CHUNK_IDENTIFIER: u8 = 0xff;

/// Why bytes could not be read as a snappy stream. Every variant ends the stream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SnappyError {
    /// The stream does not start with the identifier chunk.
    #[error("snappy stream starts with chunk type {0:#04x}, not the stream identifier")]
    NoStreamIdentifier(u8),
    /// An identifier chunk with the wrong length or contents.
    #[error("bad snappy stream identifier")]
    BadIdentifier,
    /// A chunk longer than any reader accepts.
    #[error("snappy chunk of {len} bytes exceeds the limit of {MAX_CHUNK_LEN}")]
    ChunkTooLarge {
        /// The chunk's length.
        len: usize,
    },
    /// A chunk type the format reserves and readers must refuse (0x02-0x7f).
    #[error("reserved unskippable snappy chunk type {0:#04x}")]
    ReservedChunk(u8),
    /// A data chunk too short to hold its checksum.
    #[error("snappy data chunk of {0} bytes has no room for its checksum")]
    ShortChunk(usize),
    /// A chunk that decodes to more than a block.
    #[error("snappy chunk decodes to {0} bytes, more than a block")]
    BlockTooLarge(usize),
    /// The block format could not be decoded.
    #[error("corrupt snappy block: {0}")]
    Corrupt(String),
    /// The checksum does not match the data.
    #[error("snappy checksum mismatch: chunk says {expected:#010x}, data gives {actual:#010x}")]
    Checksum {
        /// The chunk's checksum.
        expected: u32,
        /// The data's.
        actual: u32,
    },
}

/// The masked CRC-32C (Castagnoli) of `data`, as the framing format stores it.
pub fn masked_crc(data: &[u8]) -> u32 {
    let c = crc32c::crc32c(data);
    (c.rotate_right(15)).wrapping_add(0xa282_ead8)
}

/// Compresses data into chunks, each 64 KiB block on its own, as golang/snappy's writer does
/// for one flushed write: compressed unless that saves less than an eighth, then stored.
/// Reuses its hash table and scratch space between calls.
#[derive(Debug, Default)]
pub struct ChunkEncoder {
    raw: Option<snap::raw::Encoder>,
    scratch: Vec<u8>,
}

impl ChunkEncoder {
    /// A new encoder.
    pub fn new() -> Self {
        ChunkEncoder::default()
    }

    /// Appends the chunks of `data` (no stream identifier) to `out`. Empty data makes no
    /// chunk.
    pub fn encode(&mut self, data: &[u8], out: &mut Vec<u8>) {
        let raw = self.raw.get_or_insert_with(snap::raw::Encoder::new);
        for block in data.chunks(MAX_BLOCK_LEN) {
            let crc = masked_crc(block);
            self.scratch
                .resize(snap::raw::max_compress_len(block.len()), 0);
            // A block of at most 64 KiB always compresses; should it not, it is stored.
            let compressed = raw.compress(block, &mut self.scratch).ok();
            let (kind, body) = match compressed.and_then(|n| self.scratch.get(..n)) {
                Some(c) if c.len() < block.len() - block.len() / 8 => (CHUNK_COMPRESSED, c),
                _ => (CHUNK_STORED, block),
            };
            let len = (body.len() + 4) as u32;
            out.push(kind);
            out.extend_from_slice(len.to_le_bytes().get(..3).unwrap_or_default());
            out.extend_from_slice(&crc.to_le_bytes());
            out.extend_from_slice(body);
        }
    }
}

/// The chunks of `data`, as [`ChunkEncoder::encode`] makes them.
pub fn encode_chunks(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + 16);
    ChunkEncoder::new().encode(data, &mut out);
    out
}

/// Reads one snappy stream, chunk by chunk, sans-IO.
#[derive(Debug, Default)]
pub struct Decoder {
    seen_identifier: bool,
    raw: snap::raw::Decoder,
}

impl Decoder {
    /// A decoder for a new stream: it must open with the identifier chunk.
    pub fn new() -> Self {
        Decoder::default()
    }

    /// Takes the next chunk from `src` and appends its data (none for the identifier and
    /// skippable chunks) to `dst`. `Ok(false)`: `src` holds no complete chunk. The chunk's
    /// length is checked before anything is reserved for it, the decoded length before
    /// decompressing, the checksum after.
    ///
    /// # Errors
    ///
    /// [`SnappyError`] when the stream does not open with the identifier chunk, for a chunk longer
    /// than any reader accepts, a reserved chunk type, a data chunk that is corrupt, decodes to more
    /// than a block or fails its checksum. The stream cannot go on after one.
    pub fn decode_chunk(
        &mut self,
        src: &mut BytesMut,
        dst: &mut BytesMut,
    ) -> Result<bool, SnappyError> {
        let Some(header) = src.get(..4) else {
            return Ok(false);
        };
        let kind = header.first().copied().unwrap_or_default();
        let len = header
            .iter()
            .skip(1)
            .rev()
            .fold(0usize, |n, &b| (n << 8) | usize::from(b));
        if !self.seen_identifier && kind != CHUNK_IDENTIFIER {
            return Err(SnappyError::NoStreamIdentifier(kind));
        }
        if len > MAX_CHUNK_LEN {
            return Err(SnappyError::ChunkTooLarge { len });
        }
        if (0x02..=0x7f).contains(&kind) {
            return Err(SnappyError::ReservedChunk(kind));
        }
        let Some(body) = src.get(4..4 + len) else {
            src.reserve(4 + len - src.len());
            return Ok(false);
        };
        match kind {
            CHUNK_IDENTIFIER => {
                if body != STREAM_IDENTIFIER.get(4..).unwrap_or_default() {
                    return Err(SnappyError::BadIdentifier);
                }
                self.seen_identifier = true;
            }
            CHUNK_COMPRESSED | CHUNK_STORED => {
                let (Some(crc), Some(data)) = (body.get(..4), body.get(4..)) else {
                    return Err(SnappyError::ShortChunk(len));
                };
                let expected = u32::from_le_bytes([
                    crc.first().copied().unwrap_or_default(),
                    crc.get(1).copied().unwrap_or_default(),
                    crc.get(2).copied().unwrap_or_default(),
                    crc.get(3).copied().unwrap_or_default(),
                ]);
                let start = dst.len();
                if kind == CHUNK_STORED {
                    if data.len() > MAX_BLOCK_LEN {
                        return Err(SnappyError::BlockTooLarge(data.len()));
                    }
                    dst.extend_from_slice(data);
                } else {
                    let n = snap::raw::decompress_len(data)
                        .map_err(|e| SnappyError::Corrupt(e.to_string()))?;
                    if n > MAX_BLOCK_LEN {
                        return Err(SnappyError::BlockTooLarge(n));
                    }
                    dst.resize(start + n, 0);
                    let out = dst.get_mut(start..).unwrap_or_default();
                    if let Err(e) = self.raw.decompress(data, out) {
                        dst.truncate(start);
                        return Err(SnappyError::Corrupt(e.to_string()));
                    }
                }
                let actual = masked_crc(dst.get(start..).unwrap_or_default());
                if actual != expected {
                    dst.truncate(start);
                    return Err(SnappyError::Checksum { expected, actual });
                }
            }
            // 0x80-0xfe: skippable (0xfe is padding).
            _ => {}
        }
        src.advance(4 + len);
        Ok(true)
    }
}

#[cfg(test)]
mod tests;
