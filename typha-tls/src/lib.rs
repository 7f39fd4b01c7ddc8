//! typha-tls: TLS files as both ends of the workspace read and re-read them. The server
//! (`typha_server::tls`) and the client library (`typha_client::tls`) each build their own
//! rustls configuration from their own settings; what they share is here, below both, so
//! neither has to import the other:
//!
//! - [`Watched`]: which version of a set of files (certificate, key, CA) is in use, so that a
//!   rotated Secret or a renewed certificate is picked up once, and a version that cannot be
//!   used is reported once and not retried until the files change again.
//! - [`fingerprint`]: the files' contents hashed, read through symlinks (a kubelet Secret
//!   volume swaps its `..data` link).
//! - [`earliest_expiry`]: when a certificate file's material expires, for the metrics.
//!
//! No rustls configuration here: each end builds its own, and [`Watched`] logs what became of
//! a new version (one line each way, the same on both ends).

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};

use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

/// The `notAfter` of the first certificate in a PEM file (`first_only`: a leaf with its chain)
/// or the earliest of them all (a CA bundle), in Unix seconds. `None` when the file cannot be
/// read or holds no certificate that parses.
pub fn earliest_expiry(path: &Path, first_only: bool) -> Option<i64> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .ok()?
        .filter_map(Result::ok)
        .collect();
    let take = if first_only { 1 } else { certs.len() };
    certs
        .iter()
        .take(take)
        .filter_map(|c| {
            x509_parser::parse_x509_certificate(c.as_ref())
                .ok()
                .map(|(_, x)| x.validity().not_after.timestamp())
        })
        .min()
}

/// Fingerprint of files' contents, in order, read through symlinks: equal fingerprints, same
/// material. An unreadable file counts as its error's kind, so a file that disappears is a
/// change too. Not cryptographic, and only comparable within one build of one process.
pub fn fingerprint<P: AsRef<Path>>(paths: &[P]) -> u64 {
    let mut h = DefaultHasher::new();
    for p in paths {
        match std::fs::read(p) {
            Ok(bytes) => bytes.hash(&mut h),
            Err(e) => e.kind().hash(&mut h),
        }
    }
    h.finish()
}

/// Which version of a set of files is in use. Created when the material is first built from
/// them; [`Watched::check`] then rebuilds when the files change.
#[derive(Debug, Clone)]
pub struct Watched {
    paths: Vec<PathBuf>,
    /// The files' fingerprint when the material in use was built.
    loaded: u64,
    /// The fingerprint of the last version that could not be used.
    failed: Option<u64>,
}

/// What one [`Watched::check`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Change<T, E> {
    /// The files are as they were when the material in use was built, or they are the version
    /// that already failed: nothing was built.
    Unchanged,
    /// The files changed and the material was built from them: use it from now on.
    Reloaded(T),
    /// The files changed but the material could not be built: keep the previous one. This
    /// version is not tried again (nor reported again) until the files change once more.
    Failed(E),
}

impl Watched {
    /// The files as they are now (their fingerprint is taken here): call it just before
    /// building the material from them, so a change made during the build shows at the next
    /// check.
    pub fn new(paths: impl IntoIterator<Item = PathBuf>) -> Self {
        let paths: Vec<PathBuf> = paths.into_iter().collect();
        Self {
            loaded: fingerprint(&paths),
            paths,
            failed: None,
        }
    }

    /// Reads the files, and if they changed since the material in use was built (and are not
    /// the version that failed last), builds it again with `build`. Logs the outcome of a
    /// build: info when the new material is in use, a warning with the error when it cannot
    /// be (once per version).
    pub fn check<T, E>(&mut self, build: impl FnOnce() -> Result<T, E>) -> Change<T, E>
    where
        E: std::fmt::Display,
    {
        let now = fingerprint(&self.paths);
        if now == self.loaded || self.failed == Some(now) {
            return Change::Unchanged;
        }
        match build() {
            Ok(t) => {
                self.loaded = now;
                self.failed = None;
                tracing::info!(files = ?self.paths, "TLS files changed: new connections use them");
                Change::Reloaded(t)
            }
            Err(e) => {
                self.failed = Some(now);
                tracing::warn!(files = ?self.paths, error = %e, "TLS files changed but cannot be used; keeping the previous ones");
                Change::Failed(e)
            }
        }
    }

    /// The files watched, in order.
    pub fn paths(&self) -> &[PathBuf] {
        &self.paths
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn a_change_is_built_once_and_a_failed_version_is_not_retried() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("cert.pem");
        std::fs::write(&f, "one").unwrap();
        let mut w = Watched::new([f.clone()]);
        let mut builds = 0;
        let mut build = |ok: bool| {
            builds += 1;
            if ok { Ok(builds) } else { Err("bad") }
        };
        assert_eq!(w.check(|| build(true)), Change::Unchanged);

        std::fs::write(&f, "two").unwrap();
        assert_eq!(w.check(|| build(false)), Change::Failed("bad"));
        // The same bad version: neither built nor reported again.
        assert_eq!(w.check(|| build(true)), Change::Unchanged);

        std::fs::write(&f, "three").unwrap();
        assert_eq!(w.check(|| build(true)), Change::Reloaded(2));
        assert_eq!(w.check(|| build(true)), Change::Unchanged);

        // A file that disappears is a change; its return is the version in use again.
        std::fs::remove_file(&f).unwrap();
        assert_eq!(w.check(|| build(false)), Change::Failed("bad"));
        std::fs::write(&f, "three").unwrap();
        assert_eq!(w.check(|| build(true)), Change::Unchanged);
        assert_eq!(builds, 3);
    }

    #[test]
    fn expiry_is_the_leafs_or_the_earliest_of_a_bundle() {
        let cert = |year: i32| {
            let mut params = rcgen::CertificateParams::new(vec!["x".to_owned()]).unwrap();
            params.not_after = rcgen::date_time_ymd(year, 1, 1);
            let key = rcgen::KeyPair::generate().unwrap();
            params.self_signed(&key).unwrap().pem()
        };
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("bundle.pem");
        std::fs::write(&f, cert(2031) + &cert(2029)).unwrap();
        let y2031 = 1_924_992_000; // 2031-01-01T00:00:00Z
        let y2029 = 1_861_920_000; // 2029-01-01T00:00:00Z
        assert_eq!(earliest_expiry(&f, true), Some(y2031));
        assert_eq!(earliest_expiry(&f, false), Some(y2029));
        assert_eq!(earliest_expiry(&dir.path().join("none"), false), None);
    }
}
