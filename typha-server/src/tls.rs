//! Mutual TLS (rustls): the server's certificate and key, the CA that signs client
//! certificates, and the allow-lists of client identities (certificate CN, or a URI SAN;
//! either matching admits, as in Typha).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use typha_tls::{Change, Watched, earliest_expiry};

/// TLS settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsConfig {
    /// Server certificate chain (PEM). TYPHA_SERVERCERTFILE.
    pub cert_file: PathBuf,
    /// Server private key (PEM). TYPHA_SERVERKEYFILE.
    pub key_file: PathBuf,
    /// CA that signs client certificates (PEM). TYPHA_CAFILE.
    pub ca_file: PathBuf,
    /// Allowed client common names. TYPHA_CLIENTCN.
    pub client_cns: Vec<String>,
    /// Allowed client URI SANs. TYPHA_CLIENTURISAN.
    pub client_uri_sans: Vec<String>,
}

/// A TLS setting that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or holds no usable PEM object.
    #[error("{setting}: {}: {source}", path.display())]
    File {
        /// The setting that names it.
        setting: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// rustls refused the certificate and key.
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
    /// rustls refused the CA for verifying clients.
    #[error("TLS configuration: {0}")]
    ClientVerifier(#[from] rustls::server::VerifierBuilderError),
}

fn file_err(
    setting: &'static str,
    path: &Path,
    source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
) -> TlsError {
    TlsError::File {
        setting,
        path: path.to_owned(),
        source: source.into(),
    }
}

/// A client certificate that cannot be parsed.
#[derive(Debug, thiserror::Error)]
#[error("client certificate cannot be parsed: {0}")]
pub struct BadCertificate(#[source] x509_parser::nom::Err<x509_parser::error::X509Error>);

/// Loads PEM certificates.
pub fn load_certs(
    setting: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_err(setting, path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_err(setting, path, e))?;
    if certs.is_empty() {
        return Err(file_err(setting, path, "no certificate in the file"));
    }
    Ok(certs)
}

/// Loads a PEM private key.
pub fn load_key(setting: &'static str, path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| file_err(setting, path, e))
}

/// The server's rustls configuration: client certificates required and verified against the
/// CA.
pub fn server_config(cfg: &TlsConfig) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs = load_certs("TYPHA_SERVERCERTFILE", &cfg.cert_file)?;
    let key = load_key("TYPHA_SERVERKEYFILE", &cfg.key_file)?;
    let mut roots = RootCertStore::empty();
    for ca in load_certs("TYPHA_CAFILE", &cfg.ca_file)? {
        roots
            .add(ca)
            .map_err(|e| file_err("TYPHA_CAFILE", &cfg.ca_file, e))?;
    }
    let verifier =
        WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone()).build()?;
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)?;
    Ok(Arc::new(config))
}

/// The server's TLS material, re-read when its files change (a rotated Secret: kubelet swaps
/// the volume's `..data` symlink; cert-manager renewing a certificate). [`ServerTls::reload`]
/// runs every second; each handshake uses what was current when it began, so new handshakes
/// get new material within a second and established sessions are untouched. A new version
/// that cannot be used is logged once, and the last good one stays in use.
#[derive(Debug)]
pub struct ServerTls {
    cfg: TlsConfig,
    current: arc_swap::ArcSwap<rustls::ServerConfig>,
    files: std::sync::Mutex<Watched>,
}

/// What one [`ServerTls::reload`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Reloaded {
    /// The files are as they were.
    Unchanged,
    /// New material is in use.
    Reloaded,
    /// The files changed but cannot be used; the previous material stays.
    Failed,
}

impl ServerTls {
    /// Loads the material now: files that cannot be used at start are an error.
    pub fn load(cfg: TlsConfig) -> Result<Self, TlsError> {
        let files = Watched::new([
            cfg.cert_file.clone(),
            cfg.key_file.clone(),
            cfg.ca_file.clone(),
        ]);
        let current = server_config(&cfg)?;
        Ok(Self {
            cfg,
            current: arc_swap::ArcSwap::new(current),
            files: std::sync::Mutex::new(files),
        })
    }

    /// The settings (allowed client identities among them).
    pub fn config(&self) -> &TlsConfig {
        &self.cfg
    }

    /// The configuration for a handshake starting now.
    pub fn current(&self) -> Arc<rustls::ServerConfig> {
        self.current.load_full()
    }

    /// When the server certificate and the CA in use expire (Unix seconds; the earliest of a
    /// CA bundle), as far as the files on disk can be read.
    pub fn expiry(&self) -> (Option<i64>, Option<i64>) {
        (
            earliest_expiry(&self.cfg.cert_file, true),
            earliest_expiry(&self.cfg.ca_file, false),
        )
    }

    /// Re-reads the files if they changed.
    pub fn reload(&self) -> Reloaded {
        let mut files = self.files.lock().unwrap_or_else(|p| p.into_inner());
        match files.check(|| server_config(&self.cfg)) {
            Change::Unchanged => Reloaded::Unchanged,
            Change::Reloaded(c) => {
                self.current.store(c);
                Reloaded::Reloaded
            }
            Change::Failed(_) => Reloaded::Failed,
        }
    }
}

/// A certificate's identity: its subject CN and URI SANs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeerIdentity {
    /// Subject common names.
    pub common_names: Vec<String>,
    /// URI subject alternative names.
    pub uri_sans: Vec<String>,
}

/// Reads the identity of a DER certificate.
pub fn peer_identity(cert: &CertificateDer<'_>) -> Result<PeerIdentity, BadCertificate> {
    use x509_parser::prelude::*;
    let (_, x) = X509Certificate::from_der(cert.as_ref()).map_err(BadCertificate)?;
    let common_names = x
        .subject()
        .iter_common_name()
        .filter_map(|cn| cn.as_str().ok().map(str::to_owned))
        .collect();
    let mut uri_sans = Vec::new();
    if let Ok(Some(san)) = x.subject_alternative_name() {
        for name in &san.value.general_names {
            if let GeneralName::URI(u) = name {
                uri_sans.push((*u).to_owned());
            }
        }
    }
    Ok(PeerIdentity {
        common_names,
        uri_sans,
    })
}

impl TlsConfig {
    /// Whether a verified client with `id` is allowed in: its CN is on the CN list, or one of
    /// its URI SANs is on the URI SAN list.
    pub fn admits(&self, id: &PeerIdentity) -> bool {
        id.common_names
            .iter()
            .any(|cn| self.client_cns.contains(cn))
            || id.uri_sans.iter().any(|u| self.client_uri_sans.contains(u))
    }
}
