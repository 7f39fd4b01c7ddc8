//! Where `peers/build` puts the programs, and what goes wrong with them: the vocabulary the
//! rest of the control plane shares.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where `peers/build` puts its programs, unless `TYPHA_PEERS_DIR` says otherwise.
pub const PEERS_DIR_ENV: &str = "TYPHA_PEERS_DIR";

/// How long etcd or kube-apiserver may take to become ready.
pub(super) const STARTUP: Duration = Duration::from_secs(60);

/// What went wrong starting or driving the control plane.
#[derive(Debug, thiserror::Error)]
pub enum ControlPlaneError {
    /// A program `peers/build` makes is not there.
    #[error("{name} is not built ({} is missing): run peers/build, which builds etcd, kube-apiserver and helm from peers/ (about 7 minutes cold)", path.display())]
    PeerMissing {
        /// The program.
        name: &'static str,
        /// Where it was looked for.
        path: PathBuf,
    },
    /// A file or process operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// A program exited before it was ready.
    #[error("{name} exited before it was ready ({status}); the end of its log:\n{tail}")]
    Exited {
        /// The program.
        name: &'static str,
        /// How it exited.
        status: std::process::ExitStatus,
        /// The last lines of its log (the folder may be gone by the time this is read).
        tail: String,
    },
    /// A program did not become ready in time.
    #[error("{name} was not ready within {} s; the end of its log:\n{tail}", STARTUP.as_secs())]
    NotReady {
        /// The program.
        name: &'static str,
        /// The last lines of its log.
        tail: String,
    },
    /// Certificates or keys could not be made.
    #[error(transparent)]
    Pki(#[from] typha_server::pki::PkiError),
    /// A request to the API server failed.
    #[error("kubernetes API, {what}: {source}")]
    Kube {
        /// What was being done.
        what: String,
        /// Why it failed.
        #[source]
        source: kube::Error,
    },
    /// A request to etcd failed.
    #[error("etcd: {0}")]
    Etcd(#[from] etcd_client::Error),
    /// Calico's CRDs could not be found or read.
    #[error("Calico's CRDs: {0}")]
    Crds(String),
}

impl ControlPlaneError {
    pub(super) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let what = what.into();
        move |source| Self::Io { what, source }
    }

    pub(super) fn kube(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Self {
        let what = what.into();
        move |source| Self::Kube { what, source }
    }
}

/// The folder `peers/build` writes into: `$TYPHA_PEERS_DIR`, else the repository's
/// `target/peers`.
pub fn peers_dir() -> PathBuf {
    std::env::var_os(PEERS_DIR_ENV).map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/peers"),
        PathBuf::from,
    )
}

/// The path of a program `peers/build` makes (`etcd`, `kube-apiserver`, `helm`), if built.
pub fn peer(name: &'static str) -> Result<PathBuf, ControlPlaneError> {
    let path = peers_dir().join("bin").join(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(ControlPlaneError::PeerMissing { name, path })
    }
}
