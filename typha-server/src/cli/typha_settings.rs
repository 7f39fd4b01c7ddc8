//! Calico Typha's settings (v3.32's `typha/pkg/config/config_params.go`, and the one the Tigera
//! operator adds) that this program does not implement: each is accepted with one line saying
//! what the server does instead, so Calico's own manifests run unchanged, except where going
//! on without it would quietly give less than was asked (TLS on `/metrics`, FIPS mode): those
//! are refused, naming the setting. A `TYPHA_*` name in neither this table nor the flags is
//! unknown: a typo, refused by `check-config` and logged by the server.

/// A Typha setting this program does not implement.
#[derive(Debug)]
pub struct Unimplemented {
    /// Its environment name.
    pub name: &'static str,
    /// What this program does instead (one sentence, no final stop).
    pub instead: &'static str,
    /// Whether a value is refused (`Some(why)`) rather than accepted with the note.
    refuse: fn(&str) -> Option<&'static str>,
}

fn never(_: &str) -> Option<&'static str> {
    None
}

/// Off: empty, `none`, `false` (or `0`, `no`, `off`) in any case.
fn off(v: &str) -> bool {
    matches!(
        v.trim().to_ascii_lowercase().as_str(),
        "" | "none" | "false" | "0" | "no" | "off" | "f"
    )
}

fn metrics_tls(v: &str) -> Option<&'static str> {
    (!off(v)).then_some(
        "/metrics over TLS is not implemented: it is served over plain HTTP (protect it with a network policy, or a TLS sidecar)",
    )
}

fn fips(v: &str) -> Option<&'static str> {
    (!off(v)).then_some(
        "FIPS mode is not available: this program's TLS is rustls over ring, not a FIPS 140-validated module",
    )
}

/// Every Typha setting this program does not implement.
pub const UNIMPLEMENTED: &[Unimplemented] = &[
    Unimplemented {
        name: "TYPHA_LOGFILEPATH",
        instead: "no log file is written: typha-server logs to standard output only (the container's log)",
        refuse: never,
    },
    Unimplemented {
        name: "TYPHA_LOGSEVERITYFILE",
        instead: "no log file is written: TYPHA_LOGSEVERITYSCREEN sets the level of standard output",
        refuse: never,
    },
    Unimplemented {
        name: "TYPHA_LOGSEVERITYSYS",
        instead: "nothing is sent to syslog: typha-server logs to standard output only",
        refuse: never,
    },
    Unimplemented {
        name: "TYPHA_PROMETHEUSGOMETRICSENABLED",
        instead: "there are no go_* metrics (not a Go program); the process_* metrics are served",
        refuse: never,
    },
    Unimplemented {
        name: "TYPHA_PROMETHEUSPROCESSMETRICSENABLED",
        instead: "the process_* metrics are always served",
        refuse: never,
    },
    Unimplemented {
        name: "TYPHA_PROMETHEUSMETRICSCERTFILE",
        instead: "/metrics is served over plain HTTP",
        refuse: metrics_tls,
    },
    Unimplemented {
        name: "TYPHA_PROMETHEUSMETRICSKEYFILE",
        instead: "/metrics is served over plain HTTP",
        refuse: metrics_tls,
    },
    Unimplemented {
        name: "TYPHA_PROMETHEUSMETRICSCAFILE",
        instead: "/metrics is served over plain HTTP",
        refuse: metrics_tls,
    },
    Unimplemented {
        name: "TYPHA_PROMETHEUSMETRICSCLIENTAUTH",
        instead: "/metrics is served over plain HTTP, without client certificates",
        refuse: never,
    },
    Unimplemented {
        name: "TYPHA_SERVERMAXMESSAGESIZE",
        instead: "a breadcrumb's changes go to a Calico client in one message of at most TYPHA_SNAPSHOTCACHEMAXBATCHSIZE KVs, a snapshot in messages of 1,000 KVs (100 without compression); our protocol cuts frames by size",
        refuse: never,
    },
    Unimplemented {
        name: "TYPHA_SERVERMINBATCHINGAGETHRESHOLDSECS",
        instead: "changes are batched by TYPHA_BATCHWINDOWMS and TYPHA_FANOUTFRAMESPERSEC",
        refuse: never,
    },
    Unimplemented {
        name: "TYPHA_CONNECTIONDROPINTERVALSECS",
        instead: "with balancing, connections are moved at TYPHA_REBALANCEMOVESPERSEC, and connections over the limit are turned away when they connect",
        refuse: never,
    },
    Unimplemented {
        name: "TYPHA_SHUTDOWNCONNECTIONDROPINTERVALMAXSECS",
        instead: "a shutdown closes connections at most 1 s apart (Typha's default)",
        refuse: never,
    },
    Unimplemented {
        name: "TYPHA_K8SSERVICEPOLLINTERVALSECS",
        instead: "the replicas are read every TYPHA_REBALANCEPOLLSECS (10 s)",
        refuse: never,
    },
    Unimplemented {
        name: "TYPHA_DEBUGMEMORYPROFILEPATH",
        instead: "no memory profile is written (process_resident_memory_bytes and BENCHMARKS.md's methods measure memory)",
        refuse: never,
    },
    Unimplemented {
        name: "TYPHA_DEBUGDISABLELOGDROPPING",
        instead: "log lines are never dropped: a blocked output blocks the logging thread",
        refuse: never,
    },
    Unimplemented {
        name: "TYPHA_DEBUGHOST",
        instead: "there is no pprof debug server",
        refuse: never,
    },
    Unimplemented {
        name: "TYPHA_DEBUGPORT",
        instead: "there is no pprof debug server",
        refuse: never,
    },
    // Not a setting of Typha v3.32 itself (it logs the name as unknown), but the Tigera
    // operator sets it on every calico-typha Deployment.
    Unimplemented {
        name: "TYPHA_FIPSMODEENABLED",
        instead: "there is no FIPS mode (accepted while off)",
        refuse: fips,
    },
];

/// The entry for `name` (an environment name, in upper case), if it is one.
pub fn find(name: &str) -> Option<&'static Unimplemented> {
    UNIMPLEMENTED.iter().find(|u| u.name == name)
}

impl Unimplemented {
    /// The line for `value`: `Ok(note)` to log and go on, `Err(why)` to refuse.
    pub fn judge(&self, value: &str) -> Result<String, String> {
        match (self.refuse)(value) {
            Some(why) => Err(format!("{value:?}: {why}")),
            None => Ok(format!(
                "{}={value:?} is a setting of Calico's Typha that typha-server does not implement: {}",
                self.name, self.instead
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calicos_deployment_is_accepted_and_what_would_weaken_it_refused() {
        for (name, value) in [
            ("TYPHA_LOGFILEPATH", "none"),
            ("TYPHA_LOGSEVERITYSYS", "none"),
            ("TYPHA_FIPSMODEENABLED", "false"),
            ("TYPHA_PROMETHEUSMETRICSCERTFILE", ""),
        ] {
            let note = find(name).unwrap().judge(value).unwrap();
            assert!(note.starts_with(&format!("{name}=")), "{note}");
        }
        for (name, value) in [
            ("TYPHA_FIPSMODEENABLED", "true"),
            ("TYPHA_PROMETHEUSMETRICSCERTFILE", "/etc/tls/tls.crt"),
        ] {
            assert!(find(name).unwrap().judge(value).is_err(), "{name}");
        }
        assert!(find("TYPHA_SERVERPORT").is_none(), "implemented");
        let mut names: Vec<_> = UNIMPLEMENTED.iter().map(|u| u.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), UNIMPLEMENTED.len(), "each once");
    }
}
