//! typha-server: a fan-out caching proxy for Calico-style networking.
//!
//! Data moves through these parts, in this order:
//! - [`datastore`]: the backends (the embedded store by default, etcd v3, Kubernetes): a
//!   consistent listing and a watch of Calico v3 resources ([`calico::v3`]).
//! - [`syncer`]: one list + watch, kept correct across compaction, restarts and errors, for
//!   every backend; or the [`syncer::upstream`] feed from another server (tiered fan-out).
//! - [`cache`]: the pipeline (conversion to KVs by [`calico::convert`], validation, no-op
//!   suppression, key ownership) and the single-writer snapshot cache of breadcrumbs over
//!   `imbl::OrdMap` versions, with their frames and shared snapshots.
//! - [`fanout`]: encoding once per protocol variant, and the catch-up plan.
//! - [`conn`]: one task per client: handshake, resume (deltas, digest buckets or snapshot),
//!   streaming, ping/pong, timeouts.
//! - [`server`]: listeners (bound by [`listen`]: all interfaces is IPv6 and IPv4), TLS
//!   ([`tls`]), the connection limits ([`conn::limit`]) and graceful shutdown;
//!   [`governor`] balances connections across replicas;
//!   [`http`] serves health (with the loops' [`liveness`] heartbeats) and [`metrics`].
//!
//! [`config::Config`] holds every setting with its default; [`cli`] parses flags and
//! `TYPHA_*` environment variables into it and is the whole `typha-server` program, with the
//! operator command `gen-certs` ([`pki`], a small certificate authority); [`build_info`] is
//! what the binary was built from (`--version`, the start-up log line, `typha_build_info`).
//!
//! Test support (generated clusters, a real etcd 3.6 and kube-apiserver, the fuzz targets'
//! entry points) lives in its own crate, `typha-test-support`, which this crate's build never
//! compiles; the `fuzzing` feature only exposes the two hooks into private decoders that its
//! fuzz entry points call (`datastore::etcd::fuzz_item`, `datastore::kubernetes::fuzz_convert`).

pub mod build_info;
pub mod cache;
pub mod calico;
pub mod cli;
pub mod config;
pub mod conn;
pub mod datastore;
pub mod fanout;
pub mod governor;
pub mod http;
pub mod listen;
pub mod liveness;
pub mod metrics;
pub mod pki;
pub mod server;
pub mod syncer;
#[cfg(test)]
mod testing;
pub mod tls;
pub mod zdict;
