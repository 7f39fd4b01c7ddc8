//! Server configuration, with documented defaults (Calico Typha's where the meaning is the
//! same). Parsing from flags and `TYPHA_*` environment variables lives in the binary.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::cache::CacheConfig;
use crate::conn::ConnConfig;
use crate::datastore::etcd::EtcdTls;
use crate::datastore::kubernetes::{CalicoGroup, InterfacePrefix};
use crate::tls::TlsConfig;

/// Where the state comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DatastoreConfig {
    /// The embedded store, seeded from and kept in step with a manifest directory
    /// (`None`: empty, driven through the API).
    Embedded {
        /// Manifest directory.
        dir: Option<PathBuf>,
        /// How often the directory is rescanned.
        scan_interval: Duration,
        /// Where the write API listens (`TYPHA_EMBEDDEDAPIADDR`); `None`: off.
        api: Option<SocketAddr>,
    },
    /// etcd v3, in Calico's layout (`TYPHA_DATASTORETYPE=etcdv3`).
    Etcd {
        /// Client URLs (`TYPHA_ETCDENDPOINTS`): all `http://`, or all `https://` with `tls`.
        endpoints: Vec<String>,
        /// CA and optional client certificate (`TYPHA_ETCDCAFILE`, `TYPHA_ETCDCERTFILE`,
        /// `TYPHA_ETCDKEYFILE`); `None`: plaintext.
        tls: Option<EtcdTls>,
    },
    /// The Kubernetes API (`TYPHA_DATASTORETYPE=kubernetes`): Calico's CRDs and Kubernetes'
    /// own objects.
    Kubernetes {
        /// API server URL (`TYPHA_K8SAPIENDPOINT`); `None`: the in-cluster service account, else
        /// `$KUBECONFIG` / `~/.kube/config`.
        api_endpoint: Option<String>,
        /// Host-local IPAM from the nodes' pod CIDRs (`USE_POD_CIDR`): see
        /// [`crate::datastore::kubernetes::Kubernetes::with_pod_cidr`].
        use_pod_cidr: bool,
        /// The API group of Calico's kinds (`CALICO_API_GROUP`); `None`: as Calico discovers
        /// it ([`crate::datastore::kubernetes::CalicoGroup::discover`]).
        calico_api_group: Option<CalicoGroup>,
        /// The prefix of pods' interface names (`FELIX_INTERFACEPREFIX`, its first prefix;
        /// default `cali`).
        interface_prefix: InterfacePrefix,
    },
    /// Another typha server (`TYPHA_DATASTORETYPE=typha`, `TYPHA_UPSTREAMADDR`): tiered fan-out.
    Upstream(crate::syncer::upstream::UpstreamConfig),
}

/// Everything the server needs to run.
#[derive(Debug, Clone)]
pub struct Config {
    /// Datastore.
    pub datastore: DatastoreConfig,
    /// Sync listener (TYPHA_SERVERHOST:TYPHA_SERVERPORT, default all interfaces, IPv6 and IPv4
    /// ([`crate::listen::ALL`]), port 5473).
    pub listen: SocketAddr,
    /// Mutual TLS; `None` serves plaintext (with a warning).
    pub tls: Option<TlsConfig>,
    /// Health endpoint (`/liveness`, `/readiness`); default port 9098, `None` disables.
    pub health: Option<SocketAddr>,
    /// Prometheus endpoint (`/metrics`); default port 9093, `None` disables.
    pub metrics: Option<SocketAddr>,
    /// Per-connection settings.
    pub conn: ConnConfig,
    /// Cache settings.
    pub cache: CacheConfig,
    /// Connection limit (TYPHA_MAXCONNECTIONSUPPERLIMIT, 10,000): a client over it gets a
    /// Goodbye naming the reason.
    pub max_connections: usize,
    /// How long SIGTERM may take to move clients away (TYPHA_SHUTDOWNTIMEOUTSECS, 300 s).
    pub shutdown_timeout: Duration,
    /// Other servers (`host:port`) to suggest in the Goodbye to a client this one turns away
    /// (connection limit, shutdown). Empty: clients rediscover on their own.
    pub redirect: Vec<String>,
    /// How long the datastore view may go unconfirmed before it is stale
    /// (TYPHA_STALETHRESHOLDSECS, 10 s: past the syncer's longest back-off of 5 s and a probe
    /// every 2.5 s, so a transient error does not flap it).
    pub stale_threshold: Duration,
    /// Whether `/readiness` fails while stale (TYPHA_FAILREADINESSWHENSTALE, off). Off by
    /// default: if every replica went unready at once, the Service would empty and agents
    /// would lose even the stale view.
    pub readiness_fails_when_stale: bool,
    /// Connection balancing across the Service's replicas
    /// (`TYPHA_CONNECTIONREBALANCINGMODE=kubernetes`); `None`: off (Typha's default).
    pub governor: Option<crate::governor::GovernorConfig>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            datastore: DatastoreConfig::Embedded {
                dir: None,
                scan_interval: Duration::from_millis(250),
                api: None,
            },
            listen: SocketAddr::from((crate::listen::ALL, 5473)),
            tls: None,
            health: Some(SocketAddr::from((crate::listen::ALL, 9098))),
            metrics: Some(SocketAddr::from((crate::listen::ALL, 9093))),
            conn: ConnConfig::default(),
            cache: CacheConfig::default(),
            max_connections: 10_000,
            shutdown_timeout: Duration::from_secs(300),
            redirect: Vec::new(),
            stale_threshold: Duration::from_secs(10),
            readiness_fails_when_stale: false,
            governor: None,
        }
    }
}

impl Config {
    /// One line of what this configuration does, for `typha-server check-config`.
    pub fn summary(&self) -> String {
        let datastore = match &self.datastore {
            DatastoreConfig::Embedded { dir, .. } => match dir {
                Some(d) => format!("embedded ({})", d.display()),
                None => "embedded (empty)".to_owned(),
            },
            DatastoreConfig::Etcd { endpoints, tls } => format!(
                "etcdv3 ({}{})",
                endpoints.join(","),
                if tls.is_some() { ", TLS" } else { "" }
            ),
            DatastoreConfig::Kubernetes {
                api_endpoint,
                use_pod_cidr,
                calico_api_group,
                interface_prefix,
            } => format!(
                "kubernetes ({}{}; Calico's kinds in {}; interfaces {}*)",
                api_endpoint
                    .as_deref()
                    .unwrap_or("in-cluster or $KUBECONFIG"),
                if *use_pod_cidr {
                    ", IPAM blocks from pod CIDRs"
                } else {
                    ""
                },
                calico_api_group.map_or("the group discovered", |g| g.api_version()),
                interface_prefix,
            ),
            DatastoreConfig::Upstream(u) => format!("typha ({})", u.addrs.join(",")),
        };
        let addr = |a: Option<SocketAddr>| a.map_or_else(|| "off".to_owned(), |a| a.to_string());
        format!(
            "datastore {datastore}; agents on {} ({}); health {}; metrics {}; rebalancing {}; shutdown within {}s",
            self.listen,
            if self.tls.is_some() {
                "mutual TLS"
            } else {
                "plaintext"
            },
            addr(self.health),
            addr(self.metrics),
            if self.governor.is_some() {
                "kubernetes"
            } else {
                "none"
            },
            self.shutdown_timeout.as_secs(),
        )
    }

    /// A configuration for tests: loopback, ephemeral ports, no health/metrics listeners.
    pub fn for_tests() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            health: None,
            metrics: None,
            shutdown_timeout: Duration::from_secs(1),
            // Tests count breadcrumbs per write; no rate limit unless a test asks.
            cache: CacheConfig {
                min_interval: Duration::ZERO,
                fanout_frames_per_sec: 0,
                ..CacheConfig::default()
            },
            ..Self::default()
        }
    }
}
