//! The typha wire protocol, sans-IO: no sockets, no async runtime, no clock.
//!
//! Data moves through it in this order:
//! - [`model`]: what is synced. Keys are Calico default key paths ([`model::KeyPath`], typed
//!   as [`model::Key`]); values are typed ([`model::Value`]) but travel as opaque, once-encoded
//!   bytes ([`model::EncodedValue`]). An [`model::Update`] is one change; [`model::SyncStatus`]
//!   is where the syncer stands.
//! - [`digest`]: a bucketed XOR digest of a whole state, so peers can find which parts differ.
//! - [`message`]: the messages (hellos, snapshot, deltas, ping/pong, ack, goodbye) and their
//!   postcard payloads.
//! - [`frame`]: length-prefixed frames, each optionally zstd-compressed on its own, so one
//!   encoded frame can be written to any number of connections; a streaming decoder that
//!   enforces size limits before allocating.
//! - [`handshake`]: version and feature negotiation as pure state machines, time passed in.
//! - [`selector`]: Calico's label selector language (server validation, agent policy).
//! - [`calico`]: Calico's own Typha protocol (gob and snappy), for serving unmodified
//!   calico-node beside our protocol (`docs/calico-protocol.md`).
//!
//! The wire format of protocol v1 is pinned by golden files (`tests/golden/v1`) and described
//! in `docs/protocol.md`.

// The public API is the contract: every public item says what it is (every build checks),
// and every fallible one how it fails (clippy checks, in .ci/test's first tier).
#![deny(missing_docs, clippy::missing_errors_doc, clippy::missing_panics_doc)]

pub mod calico;
pub mod digest;
pub mod frame;
pub mod handshake;
pub mod message;
pub mod model;
#[cfg(feature = "sample")]
pub mod sample;
pub mod selector;

pub use digest::{BucketId, BucketSet, StateDigest};
pub use frame::{FrameDecoder, FrameEncoder, FrameError, Limits};
pub use message::{Epoch, Message, MessageType, ProtocolVersion, Seq};
pub use model::{EncodedValue, Key, KeyPath, Revision, SyncStatus, Update, UpdateKind, Value};
