//! One direction of a Calico connection as a sequence of gob streams: plain at first, then,
//! after each `MsgDecoderRestart`, a new gob stream, plain or in snappy framing.
//!
//! The reader of a stream calls [`StreamDecoder::restart`] when it has read a
//! `MsgDecoderRestart` (a client does so before it sends its `MsgACK`). The bytes after the
//! restart message belong to the new stream; decoded bytes of the old snappy stream left
//! after it are an error, since no writer puts anything there.

use bytes::BytesMut;

use super::gob::{self, GobError, Limits};
use super::messages::{COMPRESSION_SNAPPY, Message, MessageError, from_gob};
use super::snappy::{self, SnappyError};

/// How a gob stream is carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Compression {
    /// Plain gob.
    None,
    /// The snappy framing format.
    Snappy,
}

impl Compression {
    /// The compression a `MsgDecoderRestart` names (`""` or `"snappy"`), if we know it.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "" => Some(Compression::None),
            COMPRESSION_SNAPPY => Some(Compression::Snappy),
            _ => None,
        }
    }
}

/// Why a stream could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StreamError {
    /// The gob layer failed: the stream is lost.
    #[error(transparent)]
    Gob(#[from] GobError),
    /// The snappy framing failed: the stream is lost.
    #[error(transparent)]
    Snappy(#[from] SnappyError),
    /// A value that is not one of Calico's messages. The stream itself is intact.
    #[error(transparent)]
    Message(#[from] MessageError),
    /// Decoded bytes were left after the message that restarted the stream.
    #[error("{0} bytes of the old stream follow its decoder restart")]
    DataAfterRestart(usize),
}

/// Decodes the messages of one direction of a connection.
#[derive(Debug)]
pub struct StreamDecoder {
    limits: Limits,
    gob: gob::Decoder,
    /// With snappy: the framing decoder and the decoded bytes not yet read by gob.
    snappy: Option<(snappy::Decoder, BytesMut)>,
}

impl StreamDecoder {
    /// A decoder at the start of a connection: plain gob.
    pub fn new(limits: Limits) -> Self {
        StreamDecoder {
            limits,
            gob: gob::Decoder::new(limits),
            snappy: None,
        }
    }

    /// How the current stream is carried.
    pub fn compression(&self) -> Compression {
        if self.snappy.is_some() {
            Compression::Snappy
        } else {
            Compression::None
        }
    }

    /// The next message from `src` (bytes as they came off the connection). `Ok(None)`: more
    /// bytes are needed. With snappy, chunks are decoded only as gob needs them, so at most
    /// one message and one chunk are held decoded.
    ///
    /// # Errors
    ///
    /// [`StreamError::Gob`] or [`StreamError::Snappy`] when the stream is lost (the connection
    /// must close); [`StreamError::Message`] for a value that is not one of Calico's messages,
    /// after which the stream can go on.
    pub fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Message>, StreamError> {
        match self.decode_gob(src)? {
            None => Ok(None),
            Some(d) => Ok(Some(from_gob(&d)?)),
        }
    }

    /// The next gob value from `src`, as [`decode`](Self::decode) reads it but not yet made a
    /// [`Message`]: for a reader that looks into some messages itself (a simulated node
    /// hashing `MsgKVs` updates where they lie) and passes the others to
    /// [`from_gob`].
    ///
    /// # Errors
    ///
    /// [`StreamError::Gob`] or [`StreamError::Snappy`]: the stream is lost.
    pub fn decode_gob(&mut self, src: &mut BytesMut) -> Result<Option<gob::Decoded>, StreamError> {
        let decoded = match &mut self.snappy {
            None => self.gob.decode(src)?,
            Some((framing, plain)) => loop {
                if let Some(d) = self.gob.decode(plain)? {
                    break Some(d);
                }
                if !framing.decode_chunk(src, plain)? {
                    break None;
                }
            },
        };
        Ok(decoded)
    }

    /// As [`decode_gob`](Self::decode_gob), streaming the slice field `field` of the
    /// interface registered as `name` ([`gob::Decoder::decode_streaming`]): its elements go
    /// to `each` as they arrive, and neither buffer need hold a whole message. With snappy, a
    /// chunk is decoded only once what came before it has been read, so at most one chunk is
    /// held decoded.
    ///
    /// # Errors
    ///
    /// As [`decode_gob`](Self::decode_gob).
    pub fn decode_gob_streaming(
        &mut self,
        src: &mut BytesMut,
        name: &[u8],
        field: &[u8],
        each: &mut dyn FnMut(&gob::Value),
    ) -> Result<Option<gob::Decoded>, StreamError> {
        let decoded = match &mut self.snappy {
            None => self.gob.decode_streaming(src, name, field, each)?,
            Some((framing, plain)) => loop {
                if let Some(d) = self.gob.decode_streaming(plain, name, field, each)? {
                    break Some(d);
                }
                if !framing.decode_chunk(src, plain)? {
                    break None;
                }
            },
        };
        Ok(decoded)
    }

    /// Decoded bytes (with snappy) that gob has not read yet.
    pub fn decoded_held(&self) -> usize {
        self.snappy.as_ref().map_or(0, |(_, plain)| plain.len())
    }

    /// Gives back the decompressed-bytes buffer when it is empty and has grown past `keep`
    /// bytes (a large message grew it): an idle stream then holds little memory.
    pub fn release_idle(&mut self, keep: usize) {
        if let Some((_, plain)) = &mut self.snappy
            && plain.is_empty()
            && plain.capacity() > keep
        {
            *plain = BytesMut::new();
        }
    }

    /// Starts a new gob stream (after a `MsgDecoderRestart`): no types defined, carried as
    /// `compression` says. The bytes in `src` that follow the restart message are the new
    /// stream's.
    ///
    /// # Errors
    ///
    /// [`StreamError::DataAfterRestart`] when decompressed bytes of the old stream follow the
    /// restart message: the peer sent more on the old stream after restarting it.
    pub fn restart(&mut self, compression: Compression) -> Result<(), StreamError> {
        if let Some((_, plain)) = &self.snappy
            && !plain.is_empty()
        {
            return Err(StreamError::DataAfterRestart(plain.len()));
        }
        self.gob = gob::Decoder::new(self.limits);
        self.snappy = match compression {
            Compression::None => None,
            Compression::Snappy => Some((snappy::Decoder::new(), BytesMut::new())),
        };
        Ok(())
    }
}
