//! Client-side mutual TLS: the client's certificate and key, the CA that signs servers, and the
//! server identity check. As in Felix: when a server CN or URI SAN is configured, the server's
//! certificate must carry that CN or URI SAN (the chain is verified either way); otherwise the
//! usual host name check applies.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;

use crate::metrics::ClientMetrics;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::{CertificateError, DigitallySignedStruct, Error, RootCertStore, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use typha_tls::{Change, Watched, earliest_expiry};

/// TLS settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientTls {
    /// CA that signs server certificates (FELIX_TYPHACAFILE).
    pub ca_file: PathBuf,
    /// This client's certificate (FELIX_TYPHACERTFILE).
    pub cert_file: PathBuf,
    /// This client's key (FELIX_TYPHAKEYFILE).
    pub key_file: PathBuf,
    /// Required server certificate CN (FELIX_TYPHACN).
    pub server_cn: Option<String>,
    /// Required server URI SAN (FELIX_TYPHAURISAN).
    pub server_uri_san: Option<String>,
}

/// TLS material that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{setting}: {path}: {source}")]
pub struct TlsError {
    /// The setting that names the file.
    pub setting: &'static str,
    /// The file.
    pub path: String,
    /// Why.
    pub source: TlsFileError,
}

/// Why a TLS file cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsFileError {
    /// The file cannot be read, or is not PEM.
    #[error("{0}")]
    Read(#[from] rustls_pki_types::pem::Error),
    /// The CA file holds no certificate.
    #[error("no certificate in the file")]
    NoCertificate,
    /// rustls refused what the file holds (a CA certificate, the client certificate or key).
    #[error("{0}")]
    Rejected(#[from] Error),
    /// No server certificate verifier can be built from the CA certificates.
    #[error("{0}")]
    Verifier(#[from] rustls::client::VerifierBuilderError),
}

/// ring's algorithms, asking for AES-128-GCM before AES-256-GCM, as Go's `crypto/tls` does
/// (Felix, Calico's own client of Typha, asks for it first): encrypting and decrypting the
/// initial sync is the bulk of a connection's CPU on both sides, and AES-128 has 10 rounds to
/// AES-256's 14. The server takes the client's order.
fn provider() -> rustls::crypto::CryptoProvider {
    use rustls::CipherSuite as S;
    let mut p = rustls::crypto::ring::default_provider();
    // Stable: everything else keeps ring's order.
    p.cipher_suites.sort_by_key(|s| {
        !matches!(
            s.suite(),
            S::TLS13_AES_128_GCM_SHA256
                | S::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
                | S::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256
        )
    });
    p
}

/// Builds the rustls client configuration.
///
/// # Errors
///
/// [`TlsError`] naming the setting and the file that cannot be used: not readable or not PEM,
/// a CA file without a certificate, or a certificate or key that rustls refuses.
pub fn client_config(t: &ClientTls) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let err = |setting: &'static str, path: &Path, source: TlsFileError| TlsError {
        setting,
        path: path.display().to_string(),
        source,
    };
    let ca = |source| err("FELIX_TYPHACAFILE", &t.ca_file, source);
    let cert = |source| err("FELIX_TYPHACERTFILE", &t.cert_file, source);
    let key = |source| err("FELIX_TYPHAKEYFILE", &t.key_file, source);
    let provider = Arc::new(provider());
    let mut roots = RootCertStore::empty();
    let cas = CertificateDer::pem_file_iter(&t.ca_file)
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .map_err(|e| ca(e.into()))?;
    if cas.is_empty() {
        return Err(ca(TlsFileError::NoCertificate));
    }
    for c in cas {
        roots.add(c).map_err(|e| ca(e.into()))?;
    }
    let certs = CertificateDer::pem_file_iter(&t.cert_file)
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .map_err(|e| cert(e.into()))?;
    let private_key = PrivateKeyDer::from_pem_file(&t.key_file).map_err(|e| key(e.into()))?;
    let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| ca(e.into()))?;
    let verifier = Arc::new(IdentityVerifier {
        inner: webpki,
        cn: t.server_cn.clone(),
        uri_san: t.server_uri_san.clone(),
    });
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| cert(e.into()))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_client_auth_cert(certs, private_key)
        .map_err(|e| key(e.into()))?;
    Ok(Arc::new(cfg))
}

/// The client's TLS material, re-read when its files change (a rotated Secret, cert-manager
/// renewing a certificate): each dial checks the files and uses what they hold now. A new
/// version that cannot be used is logged once and the last good one stays in use. Sessions
/// already established are not touched.
#[derive(Debug)]
pub struct TlsSource {
    settings: ClientTls,
    current: Arc<rustls::ClientConfig>,
    files: Watched,
    reloads: u64,
    failures: u64,
}

impl TlsSource {
    /// Loads the material now: files that cannot be used at start are an error.
    ///
    /// # Errors
    ///
    /// As [`client_config`].
    pub fn load(settings: ClientTls) -> Result<Self, TlsError> {
        let files = Watched::new([
            settings.ca_file.clone(),
            settings.cert_file.clone(),
            settings.key_file.clone(),
        ]);
        let current = client_config(&settings)?;
        Ok(Self {
            settings,
            current,
            files,
            reloads: 0,
            failures: 0,
        })
    }

    /// The configuration to dial with: re-read first if the files changed since (recorded in
    /// `m`: reloads, and the certificates' expiry).
    pub fn current(&mut self, m: &ClientMetrics) -> Arc<rustls::ClientConfig> {
        let before = (self.reloads, self.failures);
        let cfg = self.check();
        let [ok, failed] = &m.tls_reloads;
        ok.inc_by(self.reloads - before.0);
        failed.inc_by(self.failures - before.1);
        let [client, ca] = &m.tls_expiry;
        let s = &self.settings;
        client.set(earliest_expiry(&s.cert_file, true).unwrap_or(0) as f64);
        ca.set(earliest_expiry(&s.ca_file, false).unwrap_or(0) as f64);
        cfg
    }

    fn check(&mut self) -> Arc<rustls::ClientConfig> {
        let s = &self.settings;
        match self.files.check(|| client_config(s)) {
            Change::Unchanged => {}
            Change::Reloaded(cfg) => {
                self.current = cfg;
                self.reloads += 1;
            }
            Change::Failed(_) => self.failures += 1,
        }
        self.current.clone()
    }

    /// Reloads that took, and changed versions that could not be used.
    pub fn reload_counts(&self) -> (u64, u64) {
        (self.reloads, self.failures)
    }
}

#[derive(Debug)]
struct IdentityVerifier {
    inner: Arc<WebPkiServerVerifier>,
    cn: Option<String>,
    uri_san: Option<String>,
}

impl IdentityVerifier {
    fn check_identity(&self, cert: &CertificateDer<'_>) -> Result<(), Error> {
        use x509_parser::prelude::*;
        let (_, x) = X509Certificate::from_der(cert.as_ref())
            .map_err(|_| Error::InvalidCertificate(CertificateError::BadEncoding))?;
        let cn_ok = self.cn.as_ref().is_some_and(|want| {
            x.subject()
                .iter_common_name()
                .any(|cn| cn.as_str().ok() == Some(want.as_str()))
        });
        let san_ok = self.uri_san.as_ref().is_some_and(|want| {
            matches!(x.subject_alternative_name(), Ok(Some(san)) if san.value.general_names.iter().any(|n| matches!(n, GeneralName::URI(u) if *u == want.as_str())))
        });
        if cn_ok || san_ok {
            Ok(())
        } else {
            Err(Error::General(format!(
                "server certificate has neither the required CN {:?} nor the URI SAN {:?} (FELIX_TYPHACN / FELIX_TYPHAURISAN)",
                self.cn.as_deref().unwrap_or(""),
                self.uri_san.as_deref().unwrap_or("")
            )))
        }
    }
}

impl ServerCertVerifier for IdentityVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        let by_name = self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        );
        if self.cn.is_none() && self.uri_san.is_none() {
            return by_name;
        }
        match by_name {
            // The chain is valid (webpki checks it before the name); identity decides.
            Ok(_)
            | Err(Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => self
                .check_identity(end_entity)
                .map(|()| ServerCertVerified::assertion()),
            Err(e) => Err(e),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use rustls::CipherSuite;

    #[test]
    fn asks_for_aes_128_gcm_first_and_keeps_every_suite() {
        let ours = super::provider();
        let ring = rustls::crypto::ring::default_provider();
        let suites = |p: &rustls::crypto::CryptoProvider| {
            let mut v: Vec<_> = p.cipher_suites.iter().map(|s| s.suite()).collect();
            v.sort_by_key(|s| u16::from(*s));
            v
        };
        assert_eq!(suites(&ours), suites(&ring));
        let tls13: Vec<_> = ours
            .cipher_suites
            .iter()
            .filter(|s| s.tls13().is_some())
            .map(|s| s.suite())
            .collect();
        assert_eq!(
            tls13,
            [
                CipherSuite::TLS13_AES_128_GCM_SHA256,
                CipherSuite::TLS13_AES_256_GCM_SHA384,
                CipherSuite::TLS13_CHACHA20_POLY1305_SHA256,
            ]
        );
    }
}
