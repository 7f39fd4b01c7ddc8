//! typha-client: how node agents consume a typha server.
//!
//! Data moves: [`discovery`] finds servers → [`conn`] dials one (TLS, handshake, frames,
//! pongs, acks, read/write timeouts) → [`store`] dedupes, marks and sweeps, checks sequence and
//! digest → the consumer's [`SyncerCallbacks`]. [`client::SyncClient`] ties them together and
//! keeps going across disconnects: the consumer keeps its state, hears ResyncInProgress, and the
//! next server resumes it (by deltas, by digest buckets, or by snapshot as a last resort).

pub mod agent;
pub mod cli;
pub mod client;
pub mod config;
pub mod conn;
pub mod discovery;
pub mod metrics;
pub mod service;
pub mod store;
pub mod tls;

pub use client::SyncClient;
pub use config::ClientConfig;
pub use discovery::Discovery;
pub use store::{ResumeKind, Store, StoreError, SyncerCallbacks};
