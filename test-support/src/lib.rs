//! typha-test-support: what the tests, benchmarks, loadtest and the fuzz targets share, kept
//! out of typha-server so that the server's own build never compiles it.
//!
//! - [`sample`]: realistic clusters as Calico v3 resources, generated deterministically from a
//!   few parameters (typha-server's tests and benchmarks, loadtest's manifests).
//! - [`control_plane`]: a real etcd 3.6 and kube-apiserver (built by `peers/build`) on free
//!   loopback ports, with Calico's CRDs applied: the datastore for the server's, the agent's
//!   and loadtest's Kubernetes and etcd runs.
//! - `fuzzing` (with the `fuzzing` feature): the entry points of typha-server's fuzz targets
//!   (`typha-server/fuzz/`), each a decoder followed by the server's pipeline, and the checks
//!   that the corpus replay test (`typha-server/tests/fuzz_corpus.rs`) shares with them.
//!
//! Only dev-dependencies, loadtest and the fuzz crate depend on it; `.ci/check-structure`
//! checks that typha-server's normal build does not pull it.

#![deny(missing_docs)]

pub mod control_plane;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod sample;
