//! The flags and `TYPHA_*` settings (Calico Typha's names where the meaning is the same), as
//! clap parses them. Each setting's environment name is its `env`; `cli::sources` reads the
//! environment and the config file (case-insensitive names, as Typha) and hands clap what it
//! found as flags.

use std::path::PathBuf;

use clap::builder::BoolishValueParser;
use clap::{ArgAction, Parser, Subcommand};

use super::gen_certs::GenCertsArgs;

/// The fan-out caching proxy for Calico-style networking.
#[derive(Debug, Parser)]
#[command(
    name = "typha-server",
    version = crate::build_info::SHORT_VERSION,
    long_version = crate::build_info::LONG_VERSION,
    about
)]
pub struct Cli {
    /// An operator command instead of serving (the server's flags and variables are then
    /// ignored, except by `check-config`).
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Config file of settings, as Calico's Typha reads it (INI: `Name = value` lines, any
    /// section, names as the variables' without `TYPHA_`, in any case). Absent: ignored. The
    /// environment overrides it, flags override both.
    #[arg(
        short = 'c',
        long,
        global = true,
        default_value = "/etc/calico/typha.cfg"
    )]
    pub config_file: PathBuf,
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
    /// --etcd-ca-file. Default: --etcd-scheme://--etcd-addr, `http://127.0.0.1:2379`.
    #[arg(long, env = "TYPHA_ETCDENDPOINTS", value_delimiter = ',')]
    pub etcd_endpoints: Vec<String>,
    /// Typha's older way to name one etcd endpoint, with --etcd-scheme, when --etcd-endpoints
    /// is not given (`host:port`).
    #[arg(long, env = "TYPHA_ETCDADDR", default_value = "127.0.0.1:2379")]
    pub etcd_addr: String,
    /// `http` or `https`: the scheme of --etcd-addr.
    #[arg(long, env = "TYPHA_ETCDSCHEME", default_value = "http")]
    pub etcd_scheme: String,
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
    /// Host-local IPAM from the nodes' pod CIDRs (Calico's `USE_POD_CIDR`, the same variable
    /// Calico's Typha reads), with `TYPHA_DATASTORETYPE=kubernetes`: IPAM blocks and block
    /// affinities are not read; each node's pod CIDRs are sent as its blocks, and its IPIP
    /// tunnel address is its pod CIDR's first address.
    #[arg(long, env = "USE_POD_CIDR", default_value = "false", action = ArgAction::Set, value_parser = BoolishValueParser::new())]
    pub use_pod_cidr: bool,
    /// The API group of Calico's kinds with `TYPHA_DATASTORETYPE=kubernetes` (Calico's
    /// `CALICO_API_GROUP`, the variable Calico's Typha reads): `projectcalico.org/v3` (Calico
    /// 3.32's v3 CRDs) or `crd.projectcalico.org/v1`. Unset: as Calico discovers it (v3 when the
    /// API server serves `projectcalico.org` and not `crd.projectcalico.org`).
    #[arg(long, env = "CALICO_API_GROUP")]
    pub calico_api_group: Option<String>,
    /// The prefix of pods' host-side interface names with `TYPHA_DATASTORETYPE=kubernetes`
    /// (Felix's `FELIX_INTERFACEPREFIX`, which Calico's Typha reads too; the first of its
    /// comma-separated prefixes). Unset: `cali`.
    #[arg(long, env = "FELIX_INTERFACEPREFIX")]
    pub interface_prefix: Option<String>,
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
    /// Longest a resuming client that has seen a newer datastore revision than the cache is
    /// held, waiting for the cache to reach it, before it is served what the cache has (0:
    /// never held; the embedded datastore never holds, its revisions being each server's own).
    #[arg(long, env = "TYPHA_RESUMEREVISIONWAITSECS", default_value_t = 10.0)]
    pub resume_revision_wait_secs: f64,
    /// Most KVs per snapshot chunk (chunks are encoded once for every joining client).
    #[arg(long, env = "TYPHA_SNAPSHOTCHUNKKVS", default_value_t = crate::cache::snapshot::CHUNK_KVS)]
    pub snapshot_chunk_kvs: usize,
    /// Most key and value KiB per snapshot chunk before compression (at most 16384).
    #[arg(long, env = "TYPHA_SNAPSHOTCHUNKKIB", default_value_t = crate::cache::snapshot::CHUNK_BYTES >> 10)]
    pub snapshot_chunk_kib: usize,
    /// zstd level of snapshot chunks (1 to 19; delta frames stay at level 1).
    #[arg(long, env = "TYPHA_SNAPSHOTZSTDLEVEL", default_value_t = crate::cache::snapshot::ZSTD_LEVEL)]
    pub snapshot_zstd_level: i32,
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
    /// to, up to TYPHA_MAXBATCHWINDOWMS (0: a fixed window): the latency budget that bounds
    /// fan-out CPU under load (1,000 clients: 67 ms).
    #[arg(long, env = "TYPHA_FANOUTFRAMESPERSEC", default_value_t = 15_000)]
    pub fanout_frames_per_sec: u64,
    /// Largest batch window the fan-out budget may ask for, milliseconds.
    #[arg(long, env = "TYPHA_MAXBATCHWINDOWMS", default_value_t = 100)]
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
    /// With connection balancing, the limit is never set below this (Typha's lower limit).
    #[arg(long, env = "TYPHA_MAXCONNECTIONSLOWERLIMIT", default_value_t = 400)]
    pub max_connections_lower_limit: usize,
    /// `none`, or `kubernetes`: balance connections across the Service's ready replicas
    /// (their EndpointSlices), moving clients to less loaded ones (they resume by digest).
    #[arg(long, env = "TYPHA_CONNECTIONREBALANCINGMODE", default_value = "none")]
    pub connection_rebalancing_mode: String,
    /// The namespace of this server's Service (for balancing).
    #[arg(long, env = "TYPHA_K8SNAMESPACE", default_value = "kube-system")]
    pub k8s_namespace: String,
    /// This server's Service (for balancing).
    #[arg(long, env = "TYPHA_K8SSERVICENAME", default_value = "calico-typha")]
    pub k8s_service_name: String,
    /// The name of the sync port in the Service (for balancing).
    #[arg(long, env = "TYPHA_K8SPORTNAME", default_value = "calico-typha")]
    pub k8s_port_name: String,
    /// Seconds between readings of the replicas and their loads (balancing).
    #[arg(long, env = "TYPHA_REBALANCEPOLLSECS", default_value_t = 10.0)]
    pub rebalance_poll_secs: f64,
    /// Most connections moved to other replicas per second (balancing).
    #[arg(long, env = "TYPHA_REBALANCEMOVESPERSEC", default_value_t = 20)]
    pub rebalance_moves_per_sec: u32,
    /// Seconds SIGTERM may take to move clients away.
    #[arg(long, env = "TYPHA_SHUTDOWNTIMEOUTSECS", default_value_t = 300.0)]
    pub shutdown_timeout_secs: f64,
    /// Other servers (host:port, comma-separated) to suggest to clients this one turns away.
    #[arg(long, env = "TYPHA_REDIRECTADDRS", value_delimiter = ',')]
    pub redirect_addrs: Vec<String>,
    /// Seconds the datastore view may go unconfirmed (no event, bookmark, listing or
    /// successful probe) before it is stale: said on /status, /readiness, in metrics and to
    /// clients.
    #[arg(long, env = "TYPHA_STALETHRESHOLDSECS", default_value_t = 10.0)]
    pub stale_threshold_secs: f64,
    /// Fail /readiness while the datastore view is stale (off: if every replica went unready,
    /// the Service would empty and agents would lose even the stale view).
    #[arg(long, env = "TYPHA_FAILREADINESSWHENSTALE", default_value = "false", action = ArgAction::Set, value_parser = BoolishValueParser::new())]
    pub fail_readiness_when_stale: bool,
    /// Log level: Debug, Info, Warning, Error, Critical (Typha's, in any case; also Trace,
    /// Fatal, Panic), None (nothing), or a tracing filter of `target=level` directives
    /// (`info,typha_server::governor=debug`).
    #[arg(long, env = "TYPHA_LOGSEVERITYSCREEN", default_value = "Info")]
    pub log_severity_screen: String,
    /// Log as JSON lines.
    #[arg(long, env = "TYPHA_LOGFORMATJSON", default_value = "false", action = ArgAction::Set, value_parser = BoolishValueParser::new())]
    pub log_json: bool,
}

/// Operator commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Makes a CA, a server certificate and a client certificate (ECDSA P-256) into files
    /// and/or a manifest of two Secrets, for clusters without cert-manager.
    GenCerts(Box<GenCertsArgs>),
    /// Reads the flags, the `TYPHA_*` variables and the config file as the server would and
    /// exits: 0 if the server would start with them (with one line for each Calico Typha
    /// setting given that this program does not implement, saying what it does instead), 64
    /// naming the first wrong setting, or any `TYPHA_*` name that is a setting neither of this
    /// program nor of Calico's Typha (a typo: the server ignores those).
    CheckConfig,
}

impl Cli {
    /// The tracing filter for the log severity (Typha's level names, or a filter string).
    /// `TYPHA_LOGSEVERITYSCREEN` that is neither a level nor a filter (`verbose`, which as a
    /// filter would enable only a target of that name: a server that logs nothing) is an
    /// error naming the setting.
    pub fn log_filter(&self) -> Result<String, typha_service::exit::SettingError> {
        let s = self.log_severity_screen.trim();
        Ok(match s.to_ascii_lowercase().as_str() {
            "trace" => "trace".into(),
            "debug" => "debug".into(),
            "info" => "info".into(),
            "warning" | "warn" => "warn".into(),
            "error" | "critical" | "fatal" | "panic" => "error".into(),
            // Typha's `none`: no log lines.
            "none" | "off" => "off".into(),
            _ => typha_service::logging::check_filter(s)
                .map(|()| s.to_owned())
                .map_err(|e| {
                    typha_service::exit::SettingError::new(
                        "TYPHA_LOGSEVERITYSCREEN",
                        format!(
                            "{s:?} is not a level (Debug, Info, Warning, Error, Critical, None) nor a filter of target=level directives: {e}"
                        ),
                    )
                })?,
        })
    }
}
