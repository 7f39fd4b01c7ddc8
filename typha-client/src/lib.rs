//! typha-client: how node agents consume a typha server.
//!
//! Data moves: [`discovery`] finds servers → [`conn`] dials one (TLS, handshake, frames,
//! pongs, acks, read/write timeouts) → [`store`] dedupes, marks and sweeps, checks sequence and
//! digest → the consumer's [`SyncerCallbacks`]. [`client::SyncClient`] ties them together and
//! keeps going across disconnects: the consumer keeps its state, hears ResyncInProgress, and the
//! next server resumes it (by deltas, by digest buckets, or by snapshot as a last resort).
//! [`position`] publishes the store's digest and position after each frame, for callers that
//! watch a running client from outside its callbacks.
//! [`config`] holds the settings (and reads Felix's `FELIX_TYPHA*` variables), [`tls`] the
//! mutual TLS, [`metrics`] the `typha_client_*` metrics.
//!
//! [`calico`] is a client of Calico's own Typha protocol, for testing and measuring
//! Calico-protocol servers (ours and Calico's).
//!
//! Features: `kubernetes` (default) finds servers through a Service's EndpointSlices; `cli`
//! adds [`cli::ConnectArgs`] (the flags the bundled programs share) and [`tail`], the
//! `typha-tail` program. The node agent is its own crate, `typha-agent`.

// The public API is the contract: every public item says what it is (every build checks),
// and every fallible one how it fails (clippy checks, in .ci/test's first tier).
#![deny(missing_docs, clippy::missing_errors_doc, clippy::missing_panics_doc)]

pub mod calico;
#[cfg(feature = "cli")]
pub mod cli;
pub mod client;
pub mod config;
pub mod conn;
pub mod discovery;
pub mod metrics;
pub mod position;
pub mod store;
#[cfg(feature = "cli")]
pub mod tail;
pub mod tls;

pub use client::SyncClient;
pub use config::{ClientConfig, ConfigError};
pub use discovery::Discovery;
pub use position::Position;
pub use store::{ResumeKind, Store, StoreError, SyncerCallbacks};
pub use typha_protocol::message::Staleness;
