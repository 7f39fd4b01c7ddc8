//! typha-server: a fan-out caching proxy for Calico-style networking.
//!
//! Data moves through these parts, in this order:
//! - [`datastore`]: one list + watch on the datastore (the embedded store by default),
//!   resources in Calico's v3 form, converted once to the felix syncer's KV model.
//! - [`cache`]: the pipeline (validation, no-op suppression, key ownership) and the
//!   single-writer snapshot cache of breadcrumbs over `imbl::OrdMap` versions.
//! - [`fanout`]: frames encoded once per breadcrumb, span and snapshot, shared as `Bytes`.
//! - [`conn`]: one task per client: handshake, resume (deltas, digest buckets or snapshot),
//!   streaming, ping/pong, timeouts.
//! - [`server`]: listeners, TLS ([`tls`]), the connection limit and graceful shutdown;
//!   [`http`] serves health and [`metrics`].
//!
//! [`config::Config`] holds every setting with its default; [`cli`] parses flags and
//! `TYPHA_*` environment variables into it and is the whole `typha-server` program.

pub mod cache;
pub mod cli;
pub mod config;
pub mod conn;
pub mod datastore;
pub mod fanout;
pub mod http;
pub mod metrics;
pub mod pki;
pub mod sample;
pub mod server;
pub mod tls;
