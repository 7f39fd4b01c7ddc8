//! Client configuration, with Felix's environment names where the meaning matches.

use std::path::PathBuf;
use std::time::Duration;

use typha_protocol::message::SyncerType;

use crate::discovery::Discovery;
use crate::tls::ClientTls;

/// Everything a client needs.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Where to find servers.
    pub discovery: Discovery,
    /// Mutual TLS; `None` connects in plaintext.
    pub tls: Option<ClientTls>,
    /// This node's name (sent in the hello).
    pub hostname: String,
    /// Free-form description of this client (program/version).
    pub info: String,
    /// Which syncer to ask for.
    pub syncer_type: SyncerType,
    /// No message from the server for this long means it is gone (FELIX_TYPHAREADTIMEOUT,
    /// 30 s: three missed pings).
    pub read_timeout: Duration,
    /// A write taking longer fails the connection (FELIX_TYPHAWRITETIMEOUT, 10 s).
    pub write_timeout: Duration,
    /// TCP connect, TLS and hello must complete within this (10 s).
    pub dial_timeout: Duration,
    /// First delay between rounds of failed attempts; doubles up to `backoff_max`.
    pub backoff_min: Duration,
    /// Longest delay between rounds.
    pub backoff_max: Duration,
    /// How often to acknowledge the applied position (at most).
    pub ack_interval: Duration,
    /// Keep no values ([`crate::Store::light`]) and skip decoding snapshot chunks: only for
    /// simulating many nodes in one process.
    pub light_store: bool,
    /// Also deliver keys of kinds this build does not know ([`typha_protocol::model::Key::Opaque`])
    /// to the callbacks, as they are: for a relay (a tier of typha-server) that passes
    /// everything on to clients that may know them. Consumers that read values leave it off.
    pub relay_unknown_kinds: bool,
}

impl ClientConfig {
    /// Defaults for `hostname` and the servers `discovery` finds.
    pub fn new(hostname: impl Into<String>, discovery: Discovery) -> Self {
        Self {
            discovery,
            tls: None,
            hostname: hostname.into(),
            info: format!("typha-client/{}", env!("CARGO_PKG_VERSION")),
            syncer_type: SyncerType::Felix,
            read_timeout: Duration::from_secs(30),
            write_timeout: Duration::from_secs(10),
            dial_timeout: Duration::from_secs(10),
            backoff_min: Duration::from_millis(200),
            backoff_max: Duration::from_secs(10),
            ack_interval: Duration::from_secs(1),
            light_store: false,
            relay_unknown_kinds: false,
        }
    }
}

/// A setting that cannot be used; names the setting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{setting}: {reason}")]
pub struct ConfigError {
    /// The environment name.
    pub setting: &'static str,
    /// What is wrong.
    pub reason: String,
}

impl ConfigError {
    /// `setting` is wrong because of `reason`.
    pub fn new(setting: &'static str, reason: impl Into<String>) -> Self {
        Self {
            setting,
            reason: reason.into(),
        }
    }
}

fn secs(setting: &'static str, v: &str) -> Result<Duration, ConfigError> {
    v.trim()
        .parse::<f64>()
        .ok()
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .filter(|d| !d.is_zero())
        .ok_or_else(|| ConfigError {
            setting,
            reason: format!("{v:?} is not a positive number of seconds"),
        })
}

/// Reads Felix's settings through `get` (for example `|k| std::env::var(k).ok()`):
/// FELIX_TYPHAADDR, FELIX_TYPHAK8SSERVICENAME, FELIX_TYPHAK8SNAMESPACE, FELIX_TYPHACAFILE,
/// FELIX_TYPHACERTFILE, FELIX_TYPHAKEYFILE, FELIX_TYPHACN, FELIX_TYPHAURISAN,
/// FELIX_TYPHAREADTIMEOUT, FELIX_TYPHAWRITETIMEOUT. Returns `Ok(None)` when no server is
/// configured (Felix then talks to the datastore itself).
///
/// # Errors
///
/// [`ConfigError`] naming the setting: a CA, certificate or key file missing when any TLS
/// setting is given, or a timeout that is not a positive number of seconds.
pub fn from_felix_env(
    hostname: &str,
    get: impl Fn(&str) -> Option<String>,
) -> Result<Option<ClientConfig>, ConfigError> {
    let get = |k: &str| get(k).filter(|v| !v.trim().is_empty());
    let discovery = if let Some(addrs) = get("FELIX_TYPHAADDR") {
        Discovery::addresses(
            addrs
                .split(',')
                .map(str::trim)
                .filter(|a| !a.is_empty())
                .map(str::to_owned)
                .collect(),
        )
    } else if let Some(service) = get("FELIX_TYPHAK8SSERVICENAME") {
        Discovery::kubernetes(
            service,
            get("FELIX_TYPHAK8SNAMESPACE").unwrap_or_else(|| "kube-system".into()),
        )
    } else {
        return Ok(None);
    };
    let mut cfg = ClientConfig::new(hostname, discovery);
    let tls_any = [
        "FELIX_TYPHACAFILE",
        "FELIX_TYPHACERTFILE",
        "FELIX_TYPHAKEYFILE",
        "FELIX_TYPHACN",
        "FELIX_TYPHAURISAN",
    ]
    .iter()
    .any(|k| get(k).is_some());
    if tls_any {
        let need = |k: &'static str| {
            get(k).map(PathBuf::from).ok_or_else(|| ConfigError {
                setting: k,
                reason: "required when any Typha TLS setting is given (CA, certificate, key)"
                    .into(),
            })
        };
        cfg.tls = Some(ClientTls {
            ca_file: need("FELIX_TYPHACAFILE")?,
            cert_file: need("FELIX_TYPHACERTFILE")?,
            key_file: need("FELIX_TYPHAKEYFILE")?,
            server_cn: get("FELIX_TYPHACN"),
            server_uri_san: get("FELIX_TYPHAURISAN"),
        });
    }
    if let Some(v) = get("FELIX_TYPHAREADTIMEOUT") {
        cfg.read_timeout = secs("FELIX_TYPHAREADTIMEOUT", &v)?;
    }
    if let Some(v) = get("FELIX_TYPHAWRITETIMEOUT") {
        cfg.write_timeout = secs("FELIX_TYPHAWRITETIMEOUT", &v)?;
    }
    Ok(Some(cfg))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn felix_names_map_to_settings() {
        assert!(from_felix_env("n", env(&[])).unwrap().is_none());
        let c = from_felix_env(
            "n",
            env(&[
                ("FELIX_TYPHAADDR", "10.0.0.1:5473, typha:5473"),
                ("FELIX_TYPHAREADTIMEOUT", "45"),
            ]),
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            c.discovery,
            Discovery::addresses(vec!["10.0.0.1:5473".into(), "typha:5473".into()])
        );
        assert_eq!(c.read_timeout, Duration::from_secs(45));
        assert_eq!(c.write_timeout, Duration::from_secs(10));
        let c = from_felix_env("n", env(&[("FELIX_TYPHAK8SSERVICENAME", "calico-typha")]))
            .unwrap()
            .unwrap();
        assert!(
            matches!(c.discovery, Discovery::Kubernetes { ref namespace, .. } if namespace == "kube-system")
        );
    }

    #[test]
    fn partial_tls_and_bad_timeouts_name_the_setting() {
        let e = from_felix_env(
            "n",
            env(&[
                ("FELIX_TYPHAADDR", "x:1"),
                ("FELIX_TYPHACN", "typha-server"),
            ]),
        )
        .unwrap_err();
        assert_eq!(e.setting, "FELIX_TYPHACAFILE");
        let e = from_felix_env(
            "n",
            env(&[
                ("FELIX_TYPHAADDR", "x:1"),
                ("FELIX_TYPHAWRITETIMEOUT", "soon"),
            ]),
        )
        .unwrap_err();
        assert_eq!(e.setting, "FELIX_TYPHAWRITETIMEOUT");
        let c = from_felix_env(
            "n",
            env(&[
                ("FELIX_TYPHAADDR", "x:1"),
                ("FELIX_TYPHACAFILE", "/ca"),
                ("FELIX_TYPHACERTFILE", "/c"),
                ("FELIX_TYPHAKEYFILE", "/k"),
                ("FELIX_TYPHAURISAN", "spiffe://typha"),
            ]),
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            c.tls.unwrap().server_uri_san.as_deref(),
            Some("spiffe://typha")
        );
    }
}
