//! `typha-server gen-certs`: the CA, server and client certificates for mutual TLS, for
//! clusters without cert-manager. Into files (`--out`), into a manifest of two Secrets in the
//! layout cert-manager writes (`tls.crt`, `tls.key`, `ca.crt`: the chart reads either the same
//! way), or both. With `--ca-cert`/`--ca-key` it signs with an existing CA, so leaf
//! certificates can be renewed without changing what every node trusts.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use clap::Args;

use crate::pki::{Ca, Issued, PkiError};

/// Flags of `gen-certs`.
#[derive(Debug, Clone, Args)]
pub struct GenCertsArgs {
    /// Folder to write `ca.crt` (and `ca.key` when a new CA is made), `server.crt`,
    /// `server.key`, `client.crt`, `client.key` into. Existing files are never overwritten.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// File to write two `kubernetes.io/tls` Secrets into (`-`: standard output), for `kubectl
    /// apply -f`: the server's and the agents'. The CA's key is never put in a Secret.
    #[arg(long)]
    pub secret_manifest: Option<PathBuf>,
    /// Namespace of the Secrets.
    #[arg(long, default_value = "kube-system")]
    pub namespace: String,
    /// Name of the server's Secret (the chart's `tls.existingSecret.server`).
    #[arg(long, default_value = "calico-typha-server-tls")]
    pub server_secret: String,
    /// Name of the agents' Secret (the chart's `tls.existingSecret.agent`).
    #[arg(long, default_value = "calico-typha-agent-tls")]
    pub agent_secret: String,
    /// CN of the server certificate: what clients require (`FELIX_TYPHACN`).
    #[arg(long, default_value = "typha-server")]
    pub server_cn: String,
    /// CN of the client certificate: what the server requires (`TYPHA_CLIENTCN`).
    #[arg(long, default_value = "typha-client")]
    pub client_cn: String,
    /// URI SAN to add to the client certificate (for `TYPHA_CLIENTURISAN`).
    #[arg(long)]
    pub client_uri_san: Option<String>,
    /// DNS names or IP addresses to add to the server certificate (repeatable). Clients check
    /// the CN, not the address they dialled, so none are needed.
    #[arg(long = "server-name")]
    pub server_names: Vec<String>,
    /// Days the server and client certificates are valid.
    #[arg(long, default_value_t = 365, value_parser = clap::value_parser!(u32).range(1..=3650))]
    pub days: u32,
    /// Days a new CA is valid.
    #[arg(long, default_value_t = 3650, value_parser = clap::value_parser!(u32).range(1..=36500))]
    pub ca_days: u32,
    /// Sign with this existing CA certificate (PEM) instead of making a new CA; needs --ca-key.
    #[arg(long, requires = "ca_key")]
    pub ca_cert: Option<PathBuf>,
    /// The existing CA's private key (PEM).
    #[arg(long, requires = "ca_cert")]
    pub ca_key: Option<PathBuf>,
}

/// Why nothing (or not everything) was written.
#[derive(Debug, thiserror::Error)]
pub enum GenCertsError {
    /// Neither output was asked for.
    #[error("say where to write: --out DIR, --secret-manifest FILE (or -), or both")]
    NoOutput,
    /// A file to read could not be read.
    #[error("reading {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Making or loading a certificate failed.
    #[error(transparent)]
    Pki(#[from] PkiError),
    /// A file exists already: keys are never overwritten.
    #[error("{} exists already: not overwriting it (move it away, or choose another --out)", .0.display())]
    Exists(PathBuf),
    /// A file could not be written.
    #[error("writing {}: {source}", path.display())]
    Write {
        /// The file or folder.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

impl GenCertsError {
    /// Whether the arguments are at fault (exit 64), rather than the machine (a file that
    /// cannot be read or written: exit 1).
    pub fn is_usage(&self) -> bool {
        matches!(self, Self::NoOutput | Self::Pki(_) | Self::Exists(_))
    }
}

/// What was made, ready to write.
#[derive(Debug)]
pub struct Bundle {
    /// The CA certificate (PEM).
    pub ca_cert: String,
    /// The CA's key (PEM), when a new CA was made.
    pub ca_key: Option<String>,
    /// The server certificate and key.
    pub server: Issued,
    /// The client certificate and key.
    pub client: Issued,
}

fn read(path: &Path) -> Result<String, GenCertsError> {
    std::fs::read_to_string(path).map_err(|source| GenCertsError::Read {
        path: path.to_owned(),
        source,
    })
}

const DAY: u64 = 24 * 3600;

/// Makes the certificates `args` ask for.
pub fn make(args: &GenCertsArgs) -> Result<Bundle, GenCertsError> {
    let ca = match (&args.ca_cert, &args.ca_key) {
        (Some(c), Some(k)) => Ca::from_pem(&read(c)?, &read(k)?)?,
        _ => Ca::with_validity(
            "typha-ca",
            Duration::from_secs(u64::from(args.ca_days) * DAY),
        )?,
    };
    let valid = Duration::from_secs(u64::from(args.days) * DAY);
    let names: Vec<&str> = args.server_names.iter().map(String::as_str).collect();
    let server = ca.server_valid_for(&args.server_cn, &names, valid)?;
    let client = ca.client_valid_for(&args.client_cn, args.client_uri_san.as_deref(), valid)?;
    Ok(Bundle {
        ca_cert: ca.cert_pem.clone(),
        ca_key: ca.key_pem.clone(),
        server,
        client,
    })
}

/// Writes `body` to a new file (never over an existing one), private if `secret`.
fn create(path: &Path, body: &str, secret: bool) -> Result<(), GenCertsError> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(if secret { 0o600 } else { 0o644 })
        .open(path)
        .map_err(|source| {
            if source.kind() == std::io::ErrorKind::AlreadyExists {
                GenCertsError::Exists(path.to_owned())
            } else {
                GenCertsError::Write {
                    path: path.to_owned(),
                    source,
                }
            }
        })?;
    f.write_all(body.as_bytes())
        .map_err(|source| GenCertsError::Write {
            path: path.to_owned(),
            source,
        })
}

/// The files `--out` gets, in order: name, body, whether it is a key.
fn files(b: &Bundle) -> Vec<(&'static str, &str, bool)> {
    let mut v = vec![("ca.crt", b.ca_cert.as_str(), false)];
    if let Some(k) = &b.ca_key {
        v.push(("ca.key", k.as_str(), true));
    }
    v.extend([
        ("server.crt", b.server.cert_pem.as_str(), false),
        ("server.key", b.server.key_pem.as_str(), true),
        ("client.crt", b.client.cert_pem.as_str(), false),
        ("client.key", b.client.key_pem.as_str(), true),
    ]);
    v
}

/// Writes the bundle's files into `dir` (created if missing). Checks first that none exists,
/// so a refusal leaves nothing half-written.
pub fn write_files(dir: &Path, b: &Bundle) -> Result<Vec<PathBuf>, GenCertsError> {
    std::fs::create_dir_all(dir).map_err(|source| GenCertsError::Write {
        path: dir.to_owned(),
        source,
    })?;
    let files = files(b);
    if let Some((name, _, _)) = files.iter().find(|(n, _, _)| dir.join(n).exists()) {
        return Err(GenCertsError::Exists(dir.join(name)));
    }
    let mut written = Vec::new();
    for (name, body, secret) in files {
        let path = dir.join(name);
        create(&path, body, secret)?;
        written.push(path);
    }
    Ok(written)
}

/// Two `kubernetes.io/tls` Secrets (server, agents) in YAML, each with `tls.crt`, `tls.key`
/// and `ca.crt`.
pub fn secret_manifest(args: &GenCertsArgs, b: &Bundle) -> String {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let mut out = String::from(
        "# Made by `typha-server gen-certs`: the server's and the agents' TLS Secrets.\n\
         # The CA's private key is not here: keep it (or the --out folder) somewhere safe to\n\
         # renew these with --ca-cert/--ca-key.\n",
    );
    for (name, issued, role) in [
        (&args.server_secret, &b.server, "server"),
        (&args.agent_secret, &b.client, "agent"),
    ] {
        let _ = write!(
            out,
            "---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\n  namespace: {ns}\n  labels:\n    app.kubernetes.io/name: typha\n    app.kubernetes.io/component: {role}\ntype: kubernetes.io/tls\ndata:\n  tls.crt: {crt}\n  tls.key: {key}\n  ca.crt: {ca}\n",
            ns = args.namespace,
            crt = b64(&issued.cert_pem),
            key = b64(&issued.key_pem),
            ca = b64(&b.ca_cert),
        );
    }
    out
}

/// The whole command: makes the certificates and writes what was asked for. Returns what it
/// wrote, for the one line the program prints.
pub fn run(args: &GenCertsArgs) -> Result<Vec<String>, GenCertsError> {
    if args.out.is_none() && args.secret_manifest.is_none() {
        return Err(GenCertsError::NoOutput);
    }
    // Refuse before making anything if the manifest file exists.
    if let Some(p) = &args.secret_manifest
        && p.as_os_str() != "-"
        && p.exists()
    {
        return Err(GenCertsError::Exists(p.clone()));
    }
    let bundle = make(args)?;
    let mut wrote = Vec::new();
    if let Some(dir) = &args.out {
        for p in write_files(dir, &bundle)? {
            wrote.push(p.display().to_string());
        }
    }
    if let Some(p) = &args.secret_manifest {
        let manifest = secret_manifest(args, &bundle);
        if p.as_os_str() == "-" {
            print!("{manifest}");
            wrote.push("standard output".into());
        } else {
            create(p, &manifest, true)?;
            wrote.push(p.display().to_string());
        }
    }
    Ok(wrote)
}
