//! Flags and `TYPHA_*` environment variables (Calico Typha's names where the meaning is the
//! same), parsed into a [`Config`] by a pure, tested function; and [`main`], the whole
//! `typha-server` program (the binary is one call to it, so loadtest can run the very same
//! program in a child process of its own).

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use crate::cache::CacheConfig;
use crate::config::{Config, DatastoreConfig};
use crate::conn::ConnConfig;
use crate::datastore::Datastore;
use crate::datastore::embedded::{DirSource, Embedded, api};
use crate::datastore::etcd::{self, ClientCert, Etcd, EtcdError, EtcdTls};
use crate::tls::TlsConfig;
use clap::builder::BoolishValueParser;
use clap::{ArgAction, Parser};
use std::process::ExitCode;
use std::sync::Arc;
use tracing::{error, info};
use tracing_subscriber::EnvFilter;
use typha_service::signal::wait_for_signal;

/// sysexits.h EX_USAGE: the configuration is wrong.
pub const EX_CONFIG: u8 = 64;

/// The fan-out caching proxy for Calico-style networking.
#[derive(Debug, Parser)]
#[command(name = "typha-server", version, about)]
pub struct Cli {
    /// Datastore: `embedded` (the in-process store fed from --embedded-dir), `etcdv3`
    /// (Calico's etcd v3 layout, at --etcd-endpoints) or `typha` (another typha server, at
    /// --upstream: tiered fan-out).
    #[arg(
        long,
        alias = "datastore",
        env = "TYPHA_DATASTORETYPE",
        default_value = "embedded"
    )]
    pub datastore_type: String,
    /// etcd client URLs (comma-separated): all `http://`, or all `https://` with
    /// --etcd-ca-file.
    #[arg(
        long,
        env = "TYPHA_ETCDENDPOINTS",
        value_delimiter = ',',
        default_value = "http://127.0.0.1:2379"
    )]
    pub etcd_endpoints: Vec<String>,
    /// CA certificate that signs etcd's server certificate (PEM); needed for https endpoints.
    #[arg(long, env = "TYPHA_ETCDCAFILE")]
    pub etcd_ca_file: Option<PathBuf>,
    /// Client certificate for etcd (PEM), for etcd's --client-cert-auth.
    #[arg(long, env = "TYPHA_ETCDCERTFILE")]
    pub etcd_cert_file: Option<PathBuf>,
    /// Private key of the etcd client certificate (PEM).
    #[arg(long, env = "TYPHA_ETCDKEYFILE")]
    pub etcd_key_file: Option<PathBuf>,
    /// Kubernetes API server URL for `TYPHA_DATASTORETYPE=kubernetes` (default: the in-cluster
    /// service account, else `$KUBECONFIG` / `~/.kube/config`).
    #[arg(long, env = "TYPHA_K8SAPIENDPOINT")]
    pub k8s_api_endpoint: Option<String>,
    /// Upstream typha servers (`host:port`, comma-separated) for `TYPHA_DATASTORETYPE=typha`:
    /// this server is fed by them instead of a datastore (tiered fan-out).
    #[arg(long, env = "TYPHA_UPSTREAMADDR", value_delimiter = ',')]
    pub upstream: Vec<String>,
    /// CA that signs the upstream's certificate (PEM): mutual TLS to the upstream.
    #[arg(long, env = "TYPHA_UPSTREAMCAFILE")]
    pub upstream_ca_file: Option<PathBuf>,
    /// This server's client certificate for the upstream (PEM).
    #[arg(long, env = "TYPHA_UPSTREAMCERTFILE")]
    pub upstream_cert_file: Option<PathBuf>,
    /// The key of that certificate (PEM).
    #[arg(long, env = "TYPHA_UPSTREAMKEYFILE")]
    pub upstream_key_file: Option<PathBuf>,
    /// Required CN of the upstream's certificate.
    #[arg(long, env = "TYPHA_UPSTREAMCN")]
    pub upstream_cn: Option<String>,
    /// Required URI SAN of the upstream's certificate.
    #[arg(long, env = "TYPHA_UPSTREAMURISAN")]
    pub upstream_uri_san: Option<String>,
    /// Manifest directory for the embedded datastore (Calico v3 YAML/JSON), watched for changes.
    #[arg(long, env = "TYPHA_EMBEDDEDDIR")]
    pub embedded_dir: Option<PathBuf>,
    /// Address (`host:port`) of the embedded datastore's write API (`POST /apply`, `POST
    /// /delete`, manifests in the body). Empty: off. It has no authentication: bind it to the
    /// loopback.
    #[arg(long, env = "TYPHA_EMBEDDEDAPIADDR", default_value = "")]
    pub embedded_api_addr: String,
    /// Address to listen on for agents (empty: all interfaces).
    #[arg(long, env = "TYPHA_SERVERHOST", default_value = "")]
    pub server_host: String,
    /// Port to listen on for agents.
    #[arg(long, env = "TYPHA_SERVERPORT", default_value_t = 5473)]
    pub server_port: u16,
    /// Server private key (PEM).
    #[arg(long, env = "TYPHA_SERVERKEYFILE")]
    pub server_key_file: Option<PathBuf>,
    /// Server certificate (PEM).
    #[arg(long, env = "TYPHA_SERVERCERTFILE")]
    pub server_cert_file: Option<PathBuf>,
    /// CA certificate that signs client certificates (PEM).
    #[arg(long, env = "TYPHA_CAFILE")]
    pub ca_file: Option<PathBuf>,
    /// Allowed client certificate common names (comma-separated).
    #[arg(long, env = "TYPHA_CLIENTCN", value_delimiter = ',')]
    pub client_cn: Vec<String>,
    /// Allowed client certificate URI SANs (comma-separated).
    #[arg(long, env = "TYPHA_CLIENTURISAN", value_delimiter = ',')]
    pub client_uri_san: Vec<String>,
    /// Serve /liveness and /readiness.
    #[arg(long, env = "TYPHA_HEALTHENABLED", default_value = "true", action = ArgAction::Set, value_parser = BoolishValueParser::new())]
    pub health_enabled: bool,
    /// Health listener address (empty: all interfaces).
    #[arg(long, env = "TYPHA_HEALTHHOST", default_value = "")]
    pub health_host: String,
    /// Health listener port.
    #[arg(long, env = "TYPHA_HEALTHPORT", default_value_t = 9098)]
    pub health_port: u16,
    /// Serve /metrics.
    #[arg(long, env = "TYPHA_PROMETHEUSMETRICSENABLED", default_value = "true", action = ArgAction::Set, value_parser = BoolishValueParser::new())]
    pub prometheus_metrics_enabled: bool,
    /// Metrics listener address (empty: all interfaces).
    #[arg(long, env = "TYPHA_PROMETHEUSMETRICSHOST", default_value = "")]
    pub prometheus_metrics_host: String,
    /// Metrics listener port.
    #[arg(long, env = "TYPHA_PROMETHEUSMETRICSPORT", default_value_t = 9093)]
    pub prometheus_metrics_port: u16,
    /// Seconds between pings to each client (±10 % jitter).
    #[arg(long, env = "TYPHA_SERVERPINGINTERVALSECS", default_value_t = 10.0)]
    pub server_ping_interval_secs: f64,
    /// Seconds without a pong before a client is dropped (at least 2× the ping interval,
    /// else 6× is used).
    #[arg(long, env = "TYPHA_SERVERPONGTIMEOUTSECS", default_value_t = 60.0)]
    pub server_pong_timeout_secs: f64,
    /// Seconds for TLS and the hello to complete.
    #[arg(long, env = "TYPHA_SERVERHANDSHAKETIMEOUTSECS", default_value_t = 10.0)]
    pub server_handshake_timeout_secs: f64,
    /// Seconds a client may fall behind before it is dropped.
    #[arg(long, env = "TYPHA_SERVERMAXFALLBEHINDSECS", default_value_t = 300.0)]
    pub server_max_fall_behind_secs: f64,
    /// Most initial syncs written at once; the others wait their turn (0: no limit).
    #[arg(long, env = "TYPHA_MAXCONCURRENTSYNCS", default_value_t = 64)]
    pub max_concurrent_syncs: usize,
    /// Extra seconds of fall-behind allowed right after a client's initial sync.
    #[arg(
        long,
        env = "TYPHA_SERVERNEWCLIENTFALLBEHINDGRACEPERIOD",
        default_value_t = 300.0
    )]
    pub server_new_client_fall_behind_grace_period: f64,
    /// Seconds a write to a client may stall before the client is dropped.
    #[arg(long, env = "TYPHA_SERVERWRITETIMEOUTSECS", default_value_t = 120.0)]
    pub server_write_timeout_secs: f64,
    /// Most updates per breadcrumb.
    #[arg(long, env = "TYPHA_SNAPSHOTCACHEMAXBATCHSIZE", default_value_t = 100)]
    pub snapshot_cache_max_batch_size: usize,
    /// Least milliseconds between breadcrumbs under load (updates within it share one).
    #[arg(long, env = "TYPHA_BATCHWINDOWMS", default_value_t = 20)]
    pub batch_window_ms: u64,
    /// Delta frames per second to all clients together that the batch window grows to keep
    /// to, up to TYPHA_MAXBATCHWINDOWMS (0: a fixed window).
    #[arg(long, env = "TYPHA_FANOUTFRAMESPERSEC", default_value_t = 100_000)]
    pub fanout_frames_per_sec: u64,
    /// Largest batch window the fan-out budget may ask for, milliseconds.
    #[arg(long, env = "TYPHA_MAXBATCHWINDOWMS", default_value_t = 200)]
    pub max_batch_window_ms: u64,
    /// Breadcrumbs kept for catch-up and resume.
    #[arg(long, env = "TYPHA_HISTORYMAXBREADCRUMBS", default_value_t = 1024)]
    pub history_max_breadcrumbs: usize,
    /// Seconds of breadcrumbs kept for catch-up and resume.
    #[arg(long, env = "TYPHA_HISTORYMAXAGESECS", default_value_t = 120.0)]
    pub history_max_age_secs: f64,
    /// Most connections; more are turned away with a Goodbye.
    #[arg(long, env = "TYPHA_MAXCONNECTIONSUPPERLIMIT", default_value_t = 10_000)]
    pub max_connections_upper_limit: usize,
    /// Seconds SIGTERM may take to move clients away.
    #[arg(long, env = "TYPHA_SHUTDOWNTIMEOUTSECS", default_value_t = 300.0)]
    pub shutdown_timeout_secs: f64,
    /// Other servers (host:port, comma-separated) to suggest to clients this one turns away.
    #[arg(long, env = "TYPHA_REDIRECTADDRS", value_delimiter = ',')]
    pub redirect_addrs: Vec<String>,
    /// Log level: Debug, Info, Warning, Error, Fatal (or a tracing filter).
    #[arg(long, env = "TYPHA_LOGSEVERITYSCREEN", default_value = "Info")]
    pub log_severity_screen: String,
    /// Log as JSON lines.
    #[arg(long, env = "TYPHA_LOGFORMATJSON", default_value = "false", action = ArgAction::Set, value_parser = BoolishValueParser::new())]
    pub log_json: bool,
}

/// A setting that cannot be used; names the setting.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("{setting}: {reason}")]
pub struct ConfigError {
    /// The environment name of the setting.
    pub setting: &'static str,
    /// What is wrong.
    pub reason: String,
}

fn bad(setting: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError {
        setting,
        reason: reason.into(),
    }
}

fn secs(setting: &'static str, v: f64) -> Result<Duration, ConfigError> {
    Duration::try_from_secs_f64(v)
        .map_err(|_| bad(setting, format!("{v} is not a number of seconds")))
}

fn addr(setting: &'static str, host: &str, port: u16) -> Result<SocketAddr, ConfigError> {
    if host.is_empty() {
        return Ok(SocketAddr::from(([0, 0, 0, 0], port)));
    }
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    (host, port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| bad(setting, format!("cannot resolve {host:?}")))
}

fn resolve(setting: &'static str, hostport: &str) -> Result<SocketAddr, ConfigError> {
    hostport
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| bad(setting, format!("{hostport:?} is not a host:port")))
}

impl Cli {
    /// Checks and converts the settings.
    pub fn into_config(self) -> Result<Config, ConfigError> {
        let datastore = match self.datastore_type.as_str() {
            "embedded" => DatastoreConfig::Embedded {
                dir: Some(
                    self.embedded_dir
                        .clone()
                        .unwrap_or_else(default_embedded_dir),
                ),
                scan_interval: Duration::from_millis(250),
                api: match self.embedded_api_addr.as_str() {
                    "" => None,
                    a => Some(resolve("TYPHA_EMBEDDEDAPIADDR", a)?),
                },
            },
            "etcdv3" => self.etcd()?,
            "typha" => self.upstream_config()?,
            "kubernetes" => DatastoreConfig::Kubernetes {
                api_endpoint: match self.k8s_api_endpoint.as_deref().map(str::trim) {
                    None | Some("") => None,
                    Some(url) => {
                        url.parse::<axum::http::Uri>().map_err(|e| {
                            bad("TYPHA_K8SAPIENDPOINT", format!("{url:?} is not a URL: {e}"))
                        })?;
                        Some(url.to_owned())
                    }
                },
            },
            other => {
                return Err(bad(
                    "TYPHA_DATASTORETYPE",
                    format!(
                        "{other:?} is not supported (supported: embedded, etcdv3, kubernetes, typha)"
                    ),
                ));
            }
        };
        let tls = self.tls()?;
        let conn = ConnConfig {
            handshake_timeout: secs(
                "TYPHA_SERVERHANDSHAKETIMEOUTSECS",
                self.server_handshake_timeout_secs,
            )?,
            ping_interval: secs(
                "TYPHA_SERVERPINGINTERVALSECS",
                self.server_ping_interval_secs,
            )?,
            pong_timeout: secs("TYPHA_SERVERPONGTIMEOUTSECS", self.server_pong_timeout_secs)?,
            write_timeout: secs(
                "TYPHA_SERVERWRITETIMEOUTSECS",
                self.server_write_timeout_secs,
            )?,
            max_fall_behind: secs(
                "TYPHA_SERVERMAXFALLBEHINDSECS",
                self.server_max_fall_behind_secs,
            )?,
            new_client_grace: secs(
                "TYPHA_SERVERNEWCLIENTFALLBEHINDGRACEPERIOD",
                self.server_new_client_fall_behind_grace_period,
            )?,
            max_concurrent_syncs: self.max_concurrent_syncs,
            ..ConnConfig::default()
        };
        if conn.ping_interval.is_zero() {
            return Err(bad("TYPHA_SERVERPINGINTERVALSECS", "must be more than 0"));
        }
        if self.snapshot_cache_max_batch_size == 0 {
            return Err(bad("TYPHA_SNAPSHOTCACHEMAXBATCHSIZE", "must be at least 1"));
        }
        Ok(Config {
            datastore,
            listen: addr("TYPHA_SERVERHOST", &self.server_host, self.server_port)?,
            tls,
            health: if self.health_enabled {
                Some(addr(
                    "TYPHA_HEALTHHOST",
                    &self.health_host,
                    self.health_port,
                )?)
            } else {
                None
            },
            metrics: if self.prometheus_metrics_enabled {
                Some(addr(
                    "TYPHA_PROMETHEUSMETRICSHOST",
                    &self.prometheus_metrics_host,
                    self.prometheus_metrics_port,
                )?)
            } else {
                None
            },
            conn,
            cache: CacheConfig {
                max_batch: self.snapshot_cache_max_batch_size,
                history_max: self.history_max_breadcrumbs.max(1),
                history_max_age: secs("TYPHA_HISTORYMAXAGESECS", self.history_max_age_secs)?,
                min_interval: Duration::from_millis(self.batch_window_ms),
                fanout_frames_per_sec: self.fanout_frames_per_sec,
                max_interval: Duration::from_millis(self.max_batch_window_ms),
                ..CacheConfig::default()
            },
            max_connections: self.max_connections_upper_limit,
            shutdown_timeout: secs("TYPHA_SHUTDOWNTIMEOUTSECS", self.shutdown_timeout_secs)?,
            redirect: self
                .redirect_addrs
                .iter()
                .filter(|a| !a.is_empty())
                .cloned()
                .collect(),
        })
    }

    /// All of key, certificate, CA and a client CN or URI SAN, or none of them.
    fn tls(&self) -> Result<Option<TlsConfig>, ConfigError> {
        let any = self.server_key_file.is_some()
            || self.server_cert_file.is_some()
            || self.ca_file.is_some()
            || !self.client_cn.is_empty()
            || !self.client_uri_san.is_empty();
        if !any {
            return Ok(None);
        }
        let missing = |s: &'static str| {
            bad(
                s,
                "required when any TLS setting is given (key, certificate, CA, and a client CN or URI SAN)",
            )
        };
        let key_file = self
            .server_key_file
            .clone()
            .ok_or_else(|| missing("TYPHA_SERVERKEYFILE"))?;
        let cert_file = self
            .server_cert_file
            .clone()
            .ok_or_else(|| missing("TYPHA_SERVERCERTFILE"))?;
        let ca_file = self
            .ca_file
            .clone()
            .ok_or_else(|| missing("TYPHA_CAFILE"))?;
        let client_cns: Vec<String> = self
            .client_cn
            .iter()
            .filter(|s| !s.is_empty())
            .cloned()
            .collect();
        let client_uri_sans: Vec<String> = self
            .client_uri_san
            .iter()
            .filter(|s| !s.is_empty())
            .cloned()
            .collect();
        if client_cns.is_empty() && client_uri_sans.is_empty() {
            return Err(bad(
                "TYPHA_CLIENTCN",
                "set TYPHA_CLIENTCN or TYPHA_CLIENTURISAN: without one, any certificate from the CA would be admitted",
            ));
        }
        for (setting, path) in [
            ("TYPHA_SERVERKEYFILE", &key_file),
            ("TYPHA_SERVERCERTFILE", &cert_file),
            ("TYPHA_CAFILE", &ca_file),
        ] {
            if !path.is_file() {
                return Err(bad(
                    setting,
                    format!("{} is not a readable file", path.display()),
                ));
            }
        }
        Ok(Some(TlsConfig {
            cert_file,
            key_file,
            ca_file,
            client_cns,
            client_uri_sans,
        }))
    }

    /// The upstream servers and the TLS files to reach them, checked.
    fn upstream_config(&self) -> Result<DatastoreConfig, ConfigError> {
        let addrs: Vec<String> = self
            .upstream
            .iter()
            .map(|a| a.trim().to_owned())
            .filter(|a| !a.is_empty())
            .collect();
        if addrs.is_empty() {
            return Err(bad(
                "TYPHA_UPSTREAMADDR",
                "required with TYPHA_DATASTORETYPE=typha (host:port of the upstream servers)",
            ));
        }
        let files = [
            ("TYPHA_UPSTREAMCAFILE", &self.upstream_ca_file),
            ("TYPHA_UPSTREAMCERTFILE", &self.upstream_cert_file),
            ("TYPHA_UPSTREAMKEYFILE", &self.upstream_key_file),
        ];
        let given = files.iter().filter(|(_, f)| f.is_some()).count();
        let tls = match given {
            0 => None,
            3 => {
                for (setting, f) in files {
                    if let Some(f) = f
                        && !f.is_file()
                    {
                        return Err(bad(
                            setting,
                            format!("{} is not a readable file", f.display()),
                        ));
                    }
                }
                Some(typha_client::tls::ClientTls {
                    ca_file: self.upstream_ca_file.clone().unwrap_or_default(),
                    cert_file: self.upstream_cert_file.clone().unwrap_or_default(),
                    key_file: self.upstream_key_file.clone().unwrap_or_default(),
                    server_cn: self.upstream_cn.clone().filter(|s| !s.is_empty()),
                    server_uri_san: self.upstream_uri_san.clone().filter(|s| !s.is_empty()),
                })
            }
            _ => {
                let missing = files
                    .iter()
                    .find(|(_, f)| f.is_none())
                    .map_or("TYPHA_UPSTREAMCAFILE", |(s, _)| *s);
                return Err(bad(
                    missing,
                    "mutual TLS to the upstream needs the CA, certificate and key together",
                ));
            }
        };
        Ok(DatastoreConfig::Upstream(
            crate::datastore::upstream::UpstreamConfig {
                addrs,
                tls,
                hostname: hostname(),
            },
        ))
    }

    /// The etcd endpoints and TLS files, checked: every file readable and of the right kind,
    /// https endpoints with a CA, client certificate and key together.
    fn etcd(&self) -> Result<DatastoreConfig, ConfigError> {
        let endpoints: Vec<String> = self
            .etcd_endpoints
            .iter()
            .map(|e| e.trim())
            .filter(|e| !e.is_empty())
            .map(str::to_owned)
            .collect();
        let given = |p: &Option<PathBuf>| p.clone().filter(|p| !p.as_os_str().is_empty());
        let (ca, cert, key) = (
            given(&self.etcd_ca_file),
            given(&self.etcd_cert_file),
            given(&self.etcd_key_file),
        );
        let client = match (cert, key) {
            (Some(cert_file), Some(key_file)) => Some(ClientCert {
                cert_file,
                key_file,
            }),
            (None, None) => None,
            (Some(_), None) => {
                return Err(bad("TYPHA_ETCDKEYFILE", "required with TYPHA_ETCDCERTFILE"));
            }
            (None, Some(_)) => {
                return Err(bad("TYPHA_ETCDCERTFILE", "required with TYPHA_ETCDKEYFILE"));
            }
        };
        let tls = match (ca, client) {
            (Some(ca_file), client) => Some(EtcdTls { ca_file, client }),
            (None, None) => None,
            (None, Some(_)) => {
                return Err(bad(
                    "TYPHA_ETCDCAFILE",
                    "required with a client certificate (TLS to etcd needs https:// endpoints and the CA)",
                ));
            }
        };
        if tls.is_none() && endpoints.iter().any(|e| e.starts_with("https://")) {
            return Err(bad("TYPHA_ETCDCAFILE", "required for https:// endpoints"));
        }
        if let Some(t) = &tls {
            etcd::read_certificates(&t.ca_file)
                .map_err(|e| bad("TYPHA_ETCDCAFILE", e.to_string()))?;
            if let Some(c) = &t.client {
                etcd::read_certificates(&c.cert_file)
                    .map_err(|e| bad("TYPHA_ETCDCERTFILE", e.to_string()))?;
                etcd::read_private_key(&c.key_file)
                    .map_err(|e| bad("TYPHA_ETCDKEYFILE", e.to_string()))?;
            }
        }
        etcd::check_endpoints(&endpoints, tls.is_some())
            .map_err(|e| bad("TYPHA_ETCDENDPOINTS", e.to_string()))?;
        Ok(DatastoreConfig::Etcd { endpoints, tls })
    }

    /// The tracing filter for the log severity (Typha's level names, or a filter string).
    pub fn log_filter(&self) -> String {
        match self.log_severity_screen.to_ascii_lowercase().as_str() {
            "debug" => "debug".into(),
            "info" => "info".into(),
            "warning" | "warn" => "warn".into(),
            "error" | "fatal" | "panic" => "error".into(),
            _ => self.log_severity_screen.clone(),
        }
    }
}

/// One line for a flag or variable clap could not parse, naming the environment variable too.
pub fn describe_clap_error(e: &clap::Error) -> String {
    use clap::CommandFactory;
    use clap::error::ContextKind;
    let first = e
        .to_string()
        .lines()
        .next()
        .unwrap_or_default()
        .trim_start_matches("error: ")
        .to_owned();
    let arg = e
        .get(ContextKind::InvalidArg)
        .map(|v| v.to_string())
        .unwrap_or_default();
    let cmd = Cli::command();
    let env = cmd.get_arguments().find_map(|a| {
        let long = a.get_long()?;
        (arg.starts_with(&format!("--{long} ")) || arg == format!("--{long}"))
            .then(|| a.get_env())?
            .map(|e| e.to_string_lossy().into_owned())
    });
    match env {
        Some(env) => format!("{env}: {first}"),
        None => first,
    }
}

/// `examples/cluster` in the working directory, else the one in this source tree (so
/// `cargo run -p typha-server` works from anywhere in the repository).
fn default_embedded_dir() -> PathBuf {
    let local = PathBuf::from("examples/cluster");
    if local.is_dir() {
        return local;
    }
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/cluster"))
}

/// The `typha-server` program: parses flags and `TYPHA_*` variables from the process, starts
/// the server, and shuts it down gracefully on SIGTERM or Ctrl-C. Bad configuration: one line
/// naming the setting, exit code 64.
pub fn main() -> ExitCode {
    main_from(std::env::args_os())
}

/// [`main`] with these arguments (the first is the program name), for programs that embed it.
pub fn main_from<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => match e.kind() {
            clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
                e.exit()
            }
            _ => {
                eprintln!(
                    "typha-server: invalid configuration: {}",
                    describe_clap_error(&e)
                );
                return ExitCode::from(EX_CONFIG);
            }
        },
    };
    let filter = EnvFilter::try_new(cli.log_filter()).unwrap_or_else(|_| EnvFilter::new("info"));
    if cli.log_json {
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .json()
            .init();
    } else {
        tracing_subscriber::fmt().with_env_filter(filter).init();
    }
    let cfg = match cli.into_config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("typha-server: invalid configuration: {e}");
            return ExitCode::from(EX_CONFIG);
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("typha-server: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    rt.block_on(run(cfg))
}

/// This machine's name (what an upstream server is told).
fn hostname() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "typha-server".into())
}

async fn run(cfg: Config) -> ExitCode {
    let mut api_server = None;
    if let DatastoreConfig::Upstream(u) = &cfg.datastore {
        info!(upstream = ?u.addrs, tls = u.tls.is_some(), "fed by upstream typha servers");
        if let Some(t) = &u.tls
            && let Err(e) = crate::datastore::upstream::check_tls(t)
        {
            eprintln!("typha-server: invalid configuration: TYPHA_UPSTREAMCERTFILE: {e}");
            return ExitCode::from(EX_CONFIG);
        }
        let u = u.clone();
        return match crate::server::start_with(cfg, move |tx, registry| {
            let metrics = typha_client::metrics::ClientMetrics::new(registry);
            Box::pin(crate::datastore::upstream::run(u, metrics, tx))
        })
        .await
        {
            Ok(server) => {
                wait_for_signal().await;
                info!("shutdown signal received");
                server.shutdown().await;
                ExitCode::SUCCESS
            }
            Err(e) => {
                error!("cannot start: {e}");
                eprintln!("typha-server: cannot start: {e}");
                ExitCode::from(EX_CONFIG)
            }
        };
    }
    let datastore: Arc<dyn Datastore> = match &cfg.datastore {
        DatastoreConfig::Embedded {
            dir,
            scan_interval,
            api: api_addr,
        } => {
            let store = Embedded::new();
            if let Some(dir) = dir {
                if !dir.is_dir() {
                    eprintln!(
                        "typha-server: invalid configuration: TYPHA_EMBEDDEDDIR: {} is not a directory",
                        dir.display()
                    );
                    return ExitCode::from(EX_CONFIG);
                }
                let mut src = DirSource::new(dir.clone(), store.clone());
                let report = src.scan();
                info!(dir = %dir.display(), resources = store.resources().len(), warnings = report.new_warnings.len(), "embedded datastore loaded");
                tokio::spawn(src.run(scan_interval.to_owned()));
            }
            if let Some(a) = api_addr {
                match api::serve(*a, store.clone()).await {
                    Ok((bound, task)) => {
                        info!(addr = %bound, "embedded datastore write API listening");
                        api_server = Some(task);
                    }
                    Err(e) => {
                        eprintln!("typha-server: cannot start: TYPHA_EMBEDDEDAPIADDR: {e}");
                        return ExitCode::from(EX_CONFIG);
                    }
                }
            }
            Arc::new(store)
        }
        DatastoreConfig::Etcd { endpoints, tls } => {
            match Etcd::connect(endpoints, tls.as_ref()).await {
                Ok(e) => {
                    info!(?endpoints, tls = tls.is_some(), "etcd datastore");
                    Arc::new(e)
                }
                Err(e) => {
                    eprintln!(
                        "typha-server: invalid configuration: {}: {e}",
                        etcd_setting(&e, tls.as_ref())
                    );
                    return ExitCode::from(EX_CONFIG);
                }
            }
        }
        DatastoreConfig::Kubernetes { api_endpoint } => {
            let config = match api_endpoint {
                Some(url) => url
                    .parse::<axum::http::Uri>()
                    .map(kube::Config::new)
                    .map_err(|e| e.to_string()),
                None => kube::Config::infer().await.map_err(|e| e.to_string()),
            };
            // kube retries 429/503/504 on its own, up to 15 times: an API server that is down
            // would stall the syncer for minutes instead of being reported and retried by it.
            let client = config.and_then(|mut c| {
                c.default_retry = false;
                kube::Client::try_from(c).map_err(|e| e.to_string())
            });
            match client {
                Ok(c) => {
                    info!(api = ?api_endpoint, "kubernetes datastore");
                    Arc::new(crate::datastore::kubernetes::Kubernetes::new(c).await)
                }
                Err(e) => {
                    eprintln!(
                        "typha-server: invalid configuration: TYPHA_K8SAPIENDPOINT: no usable Kubernetes client configuration (in-cluster or kubeconfig): {e}"
                    );
                    return ExitCode::from(EX_CONFIG);
                }
            }
        }
        // Handled above: it feeds the cache without a datastore.
        DatastoreConfig::Upstream(_) => return ExitCode::FAILURE,
    };
    let server = match crate::server::start(cfg, datastore).await {
        Ok(s) => s,
        Err(e) => {
            error!("cannot start: {e}");
            eprintln!("typha-server: cannot start: {e}");
            return ExitCode::from(EX_CONFIG);
        }
    };
    wait_for_signal().await;
    info!("shutdown signal received");
    if let Some(t) = api_server {
        t.abort();
    }
    server.shutdown().await;
    ExitCode::SUCCESS
}

/// The setting an etcd set-up error is about.
fn etcd_setting(e: &EtcdError, tls: Option<&EtcdTls>) -> &'static str {
    let EtcdError::File { path, .. } = e else {
        return "TYPHA_ETCDENDPOINTS";
    };
    let client = tls.and_then(|t| t.client.as_ref());
    if client.is_some_and(|c| &c.key_file == path) {
        "TYPHA_ETCDKEYFILE"
    } else if client.is_some_and(|c| &c.cert_file == path) {
        "TYPHA_ETCDCERTFILE"
    } else {
        "TYPHA_ETCDCAFILE"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Config, ConfigError> {
        Cli::try_parse_from(std::iter::once("typha-server").chain(args.iter().copied()))
            .expect("flags parse")
            .into_config()
    }

    #[test]
    fn upstream_settings() {
        let e = parse(&["--datastore", "typha"]).unwrap_err();
        assert_eq!(e.setting, "TYPHA_UPSTREAMADDR");
        let c = parse(&[
            "--datastore-type",
            "typha",
            "--upstream",
            "typha-a:5473, typha-b:5473",
        ])
        .unwrap();
        let DatastoreConfig::Upstream(u) = c.datastore else {
            panic!("not upstream")
        };
        assert_eq!(u.addrs, ["typha-a:5473", "typha-b:5473"]);
        assert!(u.tls.is_none());
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("x.pem");
        std::fs::write(&f, "x").unwrap();
        let f = f.to_str().unwrap();
        let e = parse(&[
            "--datastore",
            "typha",
            "--upstream",
            "a:1",
            "--upstream-ca-file",
            f,
        ])
        .unwrap_err();
        assert_eq!(e.setting, "TYPHA_UPSTREAMCERTFILE");
        let c = parse(&[
            "--datastore",
            "typha",
            "--upstream",
            "a:1",
            "--upstream-ca-file",
            f,
            "--upstream-cert-file",
            f,
            "--upstream-key-file",
            f,
            "--upstream-cn",
            "typha-server",
        ])
        .unwrap();
        let DatastoreConfig::Upstream(u) = c.datastore else {
            panic!("not upstream")
        };
        assert_eq!(u.tls.unwrap().server_cn.as_deref(), Some("typha-server"));
    }

    #[test]
    fn defaults_match_typha() {
        let c = parse(&[]).unwrap();
        assert_eq!(c.listen, SocketAddr::from(([0, 0, 0, 0], 5473)));
        assert_eq!(c.health.unwrap().port(), 9098);
        assert_eq!(c.metrics.unwrap().port(), 9093);
        assert_eq!(c.conn.ping_interval, Duration::from_secs(10));
        assert_eq!(c.conn.pong_timeout, Duration::from_secs(60));
        assert_eq!(c.conn.handshake_timeout, Duration::from_secs(10));
        assert_eq!(c.conn.max_fall_behind, Duration::from_secs(300));
        assert_eq!(c.conn.write_timeout, Duration::from_secs(120));
        assert_eq!(c.cache.max_batch, 100);
        assert_eq!(c.max_connections, 10_000);
        assert_eq!(c.shutdown_timeout, Duration::from_secs(300));
        assert!(c.tls.is_none());
    }

    #[test]
    fn half_a_tls_configuration_names_the_missing_setting() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("x.pem");
        std::fs::write(&f, "x").unwrap();
        let f = f.to_str().unwrap();
        assert_eq!(
            parse(&["--server-cert-file", f]).unwrap_err().setting,
            "TYPHA_SERVERKEYFILE"
        );
        assert_eq!(
            parse(&["--server-cert-file", f, "--server-key-file", f])
                .unwrap_err()
                .setting,
            "TYPHA_CAFILE"
        );
        let e = parse(&[
            "--server-cert-file",
            f,
            "--server-key-file",
            f,
            "--ca-file",
            f,
        ])
        .unwrap_err();
        assert_eq!(e.setting, "TYPHA_CLIENTCN");
        let c = parse(&[
            "--server-cert-file",
            f,
            "--server-key-file",
            f,
            "--ca-file",
            f,
            "--client-cn",
            "typha-client",
        ])
        .unwrap();
        assert_eq!(c.tls.unwrap().client_cns, vec!["typha-client".to_owned()]);
        let e = parse(&[
            "--server-cert-file",
            "/nonexistent",
            "--server-key-file",
            f,
            "--ca-file",
            f,
            "--client-uri-san",
            "spiffe://x",
        ])
        .unwrap_err();
        assert_eq!(e.setting, "TYPHA_SERVERCERTFILE");
    }

    #[test]
    fn bad_values_name_the_setting() {
        let e = parse(&["--datastore-type", "consul"]).unwrap_err();
        assert_eq!(e.setting, "TYPHA_DATASTORETYPE");
        assert!(e.reason.contains("embedded, etcdv3"), "{e}");
        assert_eq!(
            parse(&["--server-ping-interval-secs=-1"])
                .unwrap_err()
                .setting,
            "TYPHA_SERVERPINGINTERVALSECS"
        );
        assert_eq!(
            parse(&["--snapshot-cache-max-batch-size", "0"])
                .unwrap_err()
                .setting,
            "TYPHA_SNAPSHOTCACHEMAXBATCHSIZE"
        );
        assert_eq!(
            parse(&["--health-host", "no.such.host.invalid"])
                .unwrap_err()
                .setting,
            "TYPHA_HEALTHHOST"
        );
    }

    #[test]
    fn etcd_settings() {
        let c = parse(&["--datastore-type", "etcdv3"]).unwrap();
        assert_eq!(
            c.datastore,
            DatastoreConfig::Etcd {
                endpoints: vec!["http://127.0.0.1:2379".into()],
                tls: None
            }
        );
        let c = parse(&[
            "--datastore-type",
            "etcdv3",
            "--etcd-endpoints",
            "http://10.0.0.1:2379, http://10.0.0.2:2379,",
        ])
        .unwrap();
        assert!(
            matches!(c.datastore, DatastoreConfig::Etcd { endpoints, .. }
            if endpoints == ["http://10.0.0.1:2379", "http://10.0.0.2:2379"])
        );
        // Calico's names, for the environment.
        use clap::CommandFactory;
        let cmd = Cli::command();
        for (long, env) in [
            ("etcd-endpoints", "TYPHA_ETCDENDPOINTS"),
            ("etcd-ca-file", "TYPHA_ETCDCAFILE"),
            ("etcd-cert-file", "TYPHA_ETCDCERTFILE"),
            ("etcd-key-file", "TYPHA_ETCDKEYFILE"),
        ] {
            let arg = cmd
                .get_arguments()
                .find(|a| a.get_long() == Some(long))
                .unwrap();
            assert_eq!(arg.get_env().unwrap(), env);
        }
        // The etcd settings do not matter to the embedded datastore.
        assert!(matches!(
            parse(&["--etcd-endpoints", "nonsense"]).unwrap().datastore,
            DatastoreConfig::Embedded { .. }
        ));
    }

    #[test]
    fn etcd_tls_settings_are_checked_and_name_the_setting() {
        let dir = tempfile::tempdir().unwrap();
        crate::pki::write_bundle(dir.path(), &["localhost"], "typha").unwrap();
        let f = |n: &str| dir.path().join(n).to_str().unwrap().to_owned();
        let (ca, cert, key) = (f("ca.crt"), f("client.crt"), f("client.key"));
        let junk = f("junk");
        std::fs::write(&junk, "not pem").unwrap();
        let etcd = |extra: &[&str]| {
            let mut args = vec![
                "--datastore-type",
                "etcdv3",
                "--etcd-endpoints",
                "https://127.0.0.1:2379",
            ];
            args.extend_from_slice(extra);
            parse(&args)
        };
        let c = etcd(&[
            "--etcd-ca-file",
            &ca,
            "--etcd-cert-file",
            &cert,
            "--etcd-key-file",
            &key,
        ])
        .unwrap();
        let DatastoreConfig::Etcd { tls: Some(tls), .. } = c.datastore else {
            panic!("{:?}", c.datastore)
        };
        assert_eq!(tls.ca_file, PathBuf::from(&ca));
        assert_eq!(tls.client.unwrap().key_file, PathBuf::from(&key));
        // Server authentication only.
        let c = etcd(&["--etcd-ca-file", &ca]).unwrap();
        assert!(matches!(
            c.datastore,
            DatastoreConfig::Etcd {
                tls: Some(EtcdTls { client: None, .. }),
                ..
            }
        ));

        let setting = |r: Result<Config, ConfigError>| r.unwrap_err().setting;
        assert_eq!(setting(etcd(&[])), "TYPHA_ETCDCAFILE", "https needs the CA");
        assert_eq!(
            setting(etcd(&["--etcd-ca-file", &ca, "--etcd-cert-file", &cert])),
            "TYPHA_ETCDKEYFILE"
        );
        assert_eq!(
            setting(etcd(&["--etcd-ca-file", &ca, "--etcd-key-file", &key])),
            "TYPHA_ETCDCERTFILE"
        );
        assert_eq!(
            setting(etcd(&["--etcd-cert-file", &cert, "--etcd-key-file", &key])),
            "TYPHA_ETCDCAFILE"
        );
        assert_eq!(
            setting(etcd(&["--etcd-ca-file", &junk])),
            "TYPHA_ETCDCAFILE"
        );
        assert_eq!(
            setting(etcd(&["--etcd-ca-file", "/nonexistent/ca.crt"])),
            "TYPHA_ETCDCAFILE"
        );
        assert_eq!(
            setting(etcd(&[
                "--etcd-ca-file",
                &ca,
                "--etcd-cert-file",
                &junk,
                "--etcd-key-file",
                &key
            ])),
            "TYPHA_ETCDCERTFILE"
        );
        assert_eq!(
            setting(etcd(&[
                "--etcd-ca-file",
                &ca,
                "--etcd-cert-file",
                &cert,
                "--etcd-key-file",
                &cert
            ])),
            "TYPHA_ETCDKEYFILE",
            "a certificate is not a key"
        );
        for endpoints in [
            "http://127.0.0.1:2379",                        // TLS files, plain endpoint
            "https://127.0.0.1:2379,http://127.0.0.1:2380", // mixed
            "ftp://127.0.0.1:2379",
            "127.0.0.1:2379",
            "",
        ] {
            let r = parse(&[
                "--datastore-type",
                "etcdv3",
                "--etcd-endpoints",
                endpoints,
                "--etcd-ca-file",
                &ca,
            ]);
            assert_eq!(setting(r), "TYPHA_ETCDENDPOINTS", "{endpoints:?}");
        }
    }

    #[test]
    fn booleans_accept_typha_spellings() {
        let c = parse(&[
            "--health-enabled",
            "false",
            "--prometheus-metrics-enabled",
            "no",
        ])
        .unwrap();
        assert!(c.health.is_none() && c.metrics.is_none());
    }

    #[test]
    fn tight_pong_timeouts_are_widened_as_typha_does() {
        let c = parse(&[
            "--server-ping-interval-secs",
            "5",
            "--server-pong-timeout-secs",
            "8",
        ])
        .unwrap();
        assert_eq!(c.conn.normalized().pong_timeout, Duration::from_secs(30));
    }
}
