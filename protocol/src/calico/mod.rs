//! Calico's Typha protocol (gob + snappy, as Calico v3.32 speaks it), sans-IO: what
//! `typha-server` needs to serve an unmodified calico-node. `docs/calico-protocol.md`
//! describes the protocol; the golden files in `tests/golden/calico` pin it.
//!
//! Bytes move through it in this order:
//! - [`mod@detect`]: the first bytes of a connection tell ours (`0x00`) from Calico's (a gob
//!   message defining `Envelope`).
//! - [`snappy`]: after a decoder restart into snappy, the framing format's chunks. Each chunk
//!   is compressed on its own, so one can be encoded once and written into every stream.
//! - [`gob`]: our own subset of Go's `encoding/gob`: an incremental decoder that learns each
//!   stream's type ids from its definitions, and an encoder that writes a fixed preamble of
//!   definitions and then plain values.
//! - [`messages`]: `Envelope` and its messages as Rust types, to and from gob.
//! - [`stream`]: one direction of a connection: gob streams one after another, plain or
//!   snappy, restarted on `MsgDecoderRestart`.
//!
//! ## Encode once
//!
//! Every stream our server writes starts with the same preamble
//! ([`messages::Side::preamble`]), and every message after it is a value that refers to the
//! preamble's ids only, so [`messages::encode`] gives bytes that are valid on every
//! connection. With snappy, a stream is [`snappy::STREAM_IDENTIFIER`], the preamble's
//! chunks, then each message's chunks ([`snappy::ChunkEncoder`]), each encoded once.

pub mod detect;
pub mod gob;
pub mod messages;
pub mod snappy;
pub mod stream;

pub use detect::{Protocol, detect};
pub use stream::{Compression, StreamDecoder, StreamError};
