//! A real Kubernetes control plane for tests and loadtest: etcd 3.6 and kube-apiserver, the
//! programs built by `peers/build` from published Go modules, on free loopback ports.
//!
//! [`ControlPlane::start`] starts etcd, then kube-apiserver with RBAC, an admin token (group
//! `system:masters`) for setup, ServiceAccount token signing, and a serving certificate from a
//! CA of its own (so clients verify TLS instead of turning verification off); then it applies
//! Calico's CRDs (from the module cache). Tests get a kube `Client` as the admin, a way to mint a
//! ServiceAccount's token (TokenRequest) and a kubeconfig for it, and the faults only real
//! processes have: kill and restart kube-apiserver or etcd, compact etcd.
//!
//! Test support only (typha-test-support): it never ships.

mod cluster;
mod crds;
mod peers;
mod process;

pub use cluster::{ControlPlane, Options};
pub use crds::{CALICO_MODULE, crd_dir, crd_object, crd_object_in, installed_kinds};
pub use peers::{ControlPlaneError, PEERS_DIR_ENV, peer, peers_dir};
pub use process::free_port;
