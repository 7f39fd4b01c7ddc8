//! Calico's Typha messages (`syncproto`, Calico v3.32) and their gob encoding.
//!
//! - [`model`]: the messages as Rust types ([`Message`] and its parts), with Go's
//!   `time.Time` encoding ([`GoTime`]).
//! - [`schema`]: our type ids and definitions, and the two preambles ([`Side::preamble`]).
//! - [`encode()`]: a message to one gob value message, the same bytes on every stream that
//!   started with the preamble.
//! - [`from_gob`]: a decoded gob value to a message, fields matched by name as Go does.

mod decode;
mod encode;
pub mod model;
pub mod schema;

#[cfg(test)]
mod tests;

pub use decode::{MessageError, from_gob};
pub use encode::{EncodeError, encode, encode_body};
pub use model::{
    COMPRESSION_SNAPPY, ClientHello, DecoderRestart, GoTime, Message, MessageKind, Ping, Pong,
    REGISTERED_PREFIX, RESTART_ENABLE_SNAPPY, RESTART_END_OF_SNAPSHOT, Revision, SerializedUpdate,
    ServerHello, SyncStatus, TimeError, UpdateType,
};
pub use schema::Side;
