//! From flags to a [`Config`]: a pure function, unit-tested, that checks every setting and
//! names the one that is wrong.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use typha_service::exit::SettingError;

use super::flags::Cli;
use crate::cache::CacheConfig;
use crate::cache::snapshot::{MAX_CHUNK_BYTES, SnapshotConfig};
use crate::config::{Config, DatastoreConfig};
use crate::conn::ConnConfig;
use crate::datastore::etcd::{self, ClientCert, EtcdTls};
use crate::datastore::kubernetes::{
    CALICO_API_GROUP, CalicoGroup, FELIX_INTERFACEPREFIX, InterfacePrefix,
};
use crate::governor::GovernorConfig;
use crate::tls::TlsConfig;

/// Where the embedded datastore reads manifests when `TYPHA_EMBEDDEDDIR` is not set: the
/// sample cluster, relative to the working directory (the repository's root).
pub const DEFAULT_EMBEDDED_DIR: &str = "examples/cluster";

fn bad(setting: &'static str, reason: impl Into<String>) -> SettingError {
    SettingError::new(setting, reason)
}

fn secs(setting: &'static str, v: f64) -> Result<Duration, SettingError> {
    Duration::try_from_secs_f64(v)
        .map_err(|_| bad(setting, format!("{v} is not a number of seconds")))
}

/// `host:port`; an empty host is all interfaces, IPv6 and IPv4 ([`crate::listen::ALL`]).
fn addr(setting: &'static str, host: &str, port: u16) -> Result<SocketAddr, SettingError> {
    if host.is_empty() {
        return Ok(SocketAddr::from((crate::listen::ALL, port)));
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

fn resolve(setting: &'static str, hostport: &str) -> Result<SocketAddr, SettingError> {
    hostport
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| bad(setting, format!("{hostport:?} is not a host:port")))
}

/// This server's name, as told to an upstream server: `HOSTNAME`, else the kernel's.
fn server_hostname() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(typha_service::hostname)
        .unwrap_or_else(|| "typha-server".into())
}

impl Cli {
    /// Checks and converts the settings.
    pub fn into_config(self) -> Result<Config, SettingError> {
        // Typha's oneof settings take any case.
        let datastore = match self.datastore_type.to_ascii_lowercase().as_str() {
            "embedded" => DatastoreConfig::Embedded {
                // Relative to the working directory: the release binary must not carry a path of
                // the machine that built it.
                dir: Some(
                    self.embedded_dir
                        .clone()
                        .unwrap_or_else(|| PathBuf::from(DEFAULT_EMBEDDED_DIR)),
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
                use_pod_cidr: self.use_pod_cidr,
                calico_api_group: CalicoGroup::from_setting(
                    self.calico_api_group.as_deref().unwrap_or_default(),
                )
                .map_err(|e| bad(CALICO_API_GROUP, e))?,
                interface_prefix: InterfacePrefix::from_setting(
                    self.interface_prefix.as_deref().unwrap_or_default(),
                )
                .map_err(|e| bad(FELIX_INTERFACEPREFIX, e))?,
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
            snapshot: self.snapshot()?,
            resume_floor_wait: if matches!(datastore, DatastoreConfig::Embedded { .. }) {
                Duration::ZERO
            } else {
                secs(
                    "TYPHA_RESUMEREVISIONWAITSECS",
                    self.resume_revision_wait_secs,
                )?
            },
            ..ConnConfig::default()
        };
        let pinned_max_age = conn.max_fall_behind + conn.new_client_grace;
        if conn.ping_interval.is_zero() {
            return Err(bad("TYPHA_SERVERPINGINTERVALSECS", "must be more than 0"));
        }
        let stale_threshold = secs("TYPHA_STALETHRESHOLDSECS", self.stale_threshold_secs)?;
        if stale_threshold.is_zero() {
            return Err(bad("TYPHA_STALETHRESHOLDSECS", "must be more than 0"));
        }
        self.log_filter()?;
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
                // As far back as a Calico client may lag before Typha's rule drops it.
                pinned_max_age,
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
            stale_threshold,
            readiness_fails_when_stale: self.fail_readiness_when_stale,
            governor: self.governor()?,
        })
    }

    /// How snapshot chunks are cut and compressed.
    fn snapshot(&self) -> Result<SnapshotConfig, SettingError> {
        if self.snapshot_chunk_kvs == 0 {
            return Err(bad("TYPHA_SNAPSHOTCHUNKKVS", "must be at least 1"));
        }
        let max_kib = MAX_CHUNK_BYTES >> 10;
        if !(1..=max_kib).contains(&self.snapshot_chunk_kib) {
            return Err(bad(
                "TYPHA_SNAPSHOTCHUNKKIB",
                format!(
                    "{} is not between 1 and {max_kib} (clients decode at most 64 MiB a frame)",
                    self.snapshot_chunk_kib
                ),
            ));
        }
        if !(1..=19).contains(&self.snapshot_zstd_level) {
            return Err(bad(
                "TYPHA_SNAPSHOTZSTDLEVEL",
                format!(
                    "{} is not a zstd level from 1 to 19",
                    self.snapshot_zstd_level
                ),
            ));
        }
        Ok(SnapshotConfig {
            chunk_kvs: self.snapshot_chunk_kvs,
            chunk_bytes: self.snapshot_chunk_kib << 10,
            zstd_level: self.snapshot_zstd_level,
        })
    }

    /// Connection balancing, when `TYPHA_CONNECTIONREBALANCINGMODE=kubernetes`.
    fn governor(&self) -> Result<Option<GovernorConfig>, SettingError> {
        match self
            .connection_rebalancing_mode
            .to_ascii_lowercase()
            .as_str()
        {
            "" | "none" => return Ok(None),
            "kubernetes" => {}
            other => {
                return Err(bad(
                    "TYPHA_CONNECTIONREBALANCINGMODE",
                    format!("{other:?} is not supported (none, kubernetes)"),
                ));
            }
        }
        let poll = secs("TYPHA_REBALANCEPOLLSECS", self.rebalance_poll_secs)?;
        if poll.is_zero() {
            return Err(bad("TYPHA_REBALANCEPOLLSECS", "must be more than 0"));
        }
        if self.rebalance_moves_per_sec == 0 {
            return Err(bad("TYPHA_REBALANCEMOVESPERSEC", "must be at least 1"));
        }
        if self.max_connections_lower_limit > self.max_connections_upper_limit {
            return Err(bad(
                "TYPHA_MAXCONNECTIONSLOWERLIMIT",
                "must not be above TYPHA_MAXCONNECTIONSUPPERLIMIT",
            ));
        }
        Ok(Some(GovernorConfig {
            namespace: self.k8s_namespace.clone(),
            service: self.k8s_service_name.clone(),
            port_name: self.k8s_port_name.clone(),
            lower: self.max_connections_lower_limit,
            upper: self.max_connections_upper_limit,
            poll,
            moves_per_sec: self.rebalance_moves_per_sec,
            tolerance: 0.1,
            health_port: self.health_port,
            api_endpoint: self
                .k8s_api_endpoint
                .as_deref()
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned),
        }))
    }

    /// All of key, certificate, CA and a client CN or URI SAN, or none of them.
    fn tls(&self) -> Result<Option<TlsConfig>, SettingError> {
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
    fn upstream_config(&self) -> Result<DatastoreConfig, SettingError> {
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
                Some(crate::syncer::upstream::UpstreamTls {
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
            crate::syncer::upstream::UpstreamConfig {
                addrs,
                tls,
                hostname: server_hostname(),
            },
        ))
    }

    /// The etcd endpoints and TLS files, checked: every file readable and of the right kind,
    /// https endpoints with a CA, client certificate and key together.
    fn etcd(&self) -> Result<DatastoreConfig, SettingError> {
        let mut endpoints: Vec<String> = self
            .etcd_endpoints
            .iter()
            .map(|e| e.trim())
            .filter(|e| !e.is_empty())
            .map(str::to_owned)
            .collect();
        if endpoints.is_empty() {
            // Typha's older pair, defaults included: http://127.0.0.1:2379.
            let scheme = self.etcd_scheme.trim().to_ascii_lowercase();
            if scheme != "http" && scheme != "https" {
                return Err(bad(
                    "TYPHA_ETCDSCHEME",
                    format!("{scheme:?} is not http or https"),
                ));
            }
            endpoints.push(format!("{scheme}://{}", self.etcd_addr.trim()));
        }
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
}
