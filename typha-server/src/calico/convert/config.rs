//! Felix's configuration: FelixConfiguration (global and per-node config keys) and
//! ClusterInformation, with the Felix names and string forms of their values.

use typha_protocol::model::{GlobalConfigKey, HostConfigKey, Key, ResourceKind, Value};

use super::context::{ConvertError, Cx};
use super::raw;
use crate::calico::v3::{ClusterInformationSpec, ObjectMeta};

/// A FelixConfiguration value that has no Felix string form.
#[derive(Debug, thiserror::Error)]
enum ConfigValueError {
    /// Lists hold strings, numbers, booleans or failsafe ports (objects).
    #[error("unsupported list item {0}")]
    UnsupportedListItem(serde_json::Value),
}

/// FelixConfiguration `default` (global keys) or `node.<name>` (that host's keys). Any other
/// name is a selector-scoped configuration (Calico v3.32), which Calico's felix syncer passes
/// through whole for Felix to match against its node: it is carried as the raw resource.
pub(super) fn felix_configuration(
    cx: &Cx<'_>,
    meta: &ObjectMeta,
    fields: &serde_json::Map<String, serde_json::Value>,
) -> Result<Vec<(Key, Value)>, ConvertError> {
    let name = meta.name.as_str();
    let host = if name == "default" {
        None
    } else if let Some(h) = name.strip_prefix("node.") {
        if h.is_empty() {
            return Err(cx
                .at("metadata.name")
                .err("\"node.\" must be followed by a node name"));
        }
        Some(h.to_owned())
    } else {
        // Go's FelixConfigurationSpec writes `bpfLogLevel` even when empty (no `omitempty` on
        // it), so Calico's Typha always sends it.
        let mut fields = fields.clone();
        fields
            .entry("bpfLogLevel")
            .or_insert_with(|| serde_json::Value::String(String::new()));
        return Ok(raw::raw(
            ResourceKind::FelixConfiguration,
            meta,
            None,
            &fields,
        ));
    };
    let mut out = Vec::new();
    for (field, v) in fields {
        let Some(param) = felix_param_name(field) else {
            continue;
        };
        let Some(value) = config_value(v, param.ends_with("Millis"))
            .map_err(|e| cx.at(&format!("spec.{field}")).err(e.to_string()))?
        else {
            continue;
        };
        let key = match &host {
            None => Key::GlobalConfig(GlobalConfigKey { name: param }),
            Some(h) => Key::HostConfig(HostConfigKey {
                hostname: h.clone(),
                name: param,
            }),
        };
        out.push((key, Value::Config(value)));
    }
    Ok(out)
}

/// The ready flag and the cluster's identity as global config keys.
pub(super) fn cluster_information(s: &ClusterInformationSpec) -> Vec<(Key, Value)> {
    let mut out = Vec::new();
    if let Some(ready) = s.datastore_ready {
        out.push((Key::ReadyFlag, Value::ReadyFlag(ready)));
    }
    for (param, v) in [
        ("ClusterGUID", &s.cluster_guid),
        ("ClusterType", &s.cluster_type),
        ("CalicoVersion", &s.calico_version),
    ] {
        if !v.is_empty() {
            out.push((
                Key::GlobalConfig(GlobalConfigKey { name: param.into() }),
                Value::Config(v.clone()),
            ));
        }
    }
    out
}

/// The FelixConfiguration fields whose Felix names are not the field capitalised, sorted.
const RENAMES: &[(&str, &str)] = &[
    ("awsSrcDstCheck", "AWSSrcDstCheck"),
    ("bpfAttachType", "BPFAttachType"),
    ("bpfCTLBLogFilter", "BPFCTLBLogFilter"),
    ("bpfConnectTimeLoadBalancing", "BPFConnectTimeLoadBalancing"),
    (
        "bpfConnectTimeLoadBalancingEnabled",
        "BPFConnectTimeLoadBalancingEnabled",
    ),
    ("bpfConntrackLogLevel", "BPFConntrackLogLevel"),
    ("bpfConntrackMode", "BPFConntrackCleanupMode"),
    ("bpfConntrackTimeouts", "BPFConntrackTimeouts"),
    ("bpfDSROptoutCIDRs", "BPFDSROptoutCIDRs"),
    ("bpfDataIfacePattern", "BPFDataIfacePattern"),
    ("bpfDisableGROForIfaces", "BPFDisableGROForIfaces"),
    ("bpfDisableUnprivileged", "BPFDisableUnprivileged"),
    ("bpfEnabled", "BPFEnabled"),
    ("bpfEnforceRPF", "BPFEnforceRPF"),
    ("bpfExcludeCIDRsFromNAT", "BPFExcludeCIDRsFromNAT"),
    ("bpfExportBufferSizeMB", "BPFExportBufferSizeMB"),
    ("bpfExtToServiceConnmark", "BPFExtToServiceConnmark"),
    ("bpfExternalServiceMode", "BPFExternalServiceMode"),
    (
        "bpfForceTrackPacketsFromIfaces",
        "BPFForceTrackPacketsFromIfaces",
    ),
    ("bpfHostConntrackBypass", "BPFHostConntrackBypass"),
    (
        "bpfHostNetworkedNATWithoutCTLB",
        "BPFHostNetworkedNATWithoutCTLB",
    ),
    ("bpfJITHardening", "BPFJITHardening"),
    ("bpfKubeProxyHealthzPort", "BPFKubeProxyHealthzPort"),
    (
        "bpfKubeProxyIptablesCleanupEnabled",
        "BPFKubeProxyIptablesCleanupEnabled",
    ),
    ("bpfKubeProxyMinSyncPeriod", "BPFKubeProxyMinSyncPeriod"),
    ("bpfL3IfacePattern", "BPFL3IfacePattern"),
    ("bpfLogFilters", "BPFLogFilters"),
    ("bpfLogLevel", "BPFLogLevel"),
    (
        "bpfMaglevMaxEndpointsPerService",
        "BPFMaglevMaxEndpointsPerService",
    ),
    ("bpfMaglevMaxServices", "BPFMaglevMaxServices"),
    ("bpfMapSizeConntrack", "BPFMapSizeConntrack"),
    (
        "bpfMapSizeConntrackCleanupQueue",
        "BPFMapSizeConntrackCleanupQueue",
    ),
    ("bpfMapSizeConntrackScaling", "BPFMapSizeConntrackScaling"),
    ("bpfMapSizeIPSets", "BPFMapSizeIPSets"),
    ("bpfMapSizeIfState", "BPFMapSizeIfState"),
    ("bpfMapSizeNATAffinity", "BPFMapSizeNATAffinity"),
    ("bpfMapSizeNATBackend", "BPFMapSizeNATBackend"),
    ("bpfMapSizeNATFrontend", "BPFMapSizeNATFrontend"),
    ("bpfMapSizePerCpuConntrack", "BPFMapSizePerCPUConntrack"),
    ("bpfMapSizeRoute", "BPFMapSizeRoute"),
    ("bpfPSNATPorts", "BPFPSNATPorts"),
    ("bpfPolicyDebugEnabled", "BPFPolicyDebugEnabled"),
    ("bpfProfiling", "BPFProfiling"),
    ("bpfRedirectToPeer", "BPFRedirectToPeer"),
    ("endpointReportingDelay", "EndpointReportingDelaySecs"),
    ("externalNodesList", "ExternalNodesCIDRList"),
    ("ipForwarding", "IPForwarding"),
    ("ipipEnabled", "IpInIpEnabled"),
    ("ipipMTU", "IpInIpMtu"),
    (
        "iptablesLockProbeInterval",
        "IptablesLockProbeIntervalMillis",
    ),
    (
        "iptablesPostWriteCheckInterval",
        "IptablesPostWriteCheckIntervalSecs",
    ),
    ("ipv4ElevatedRoutePriority", "IPv4ElevatedRoutePriority"),
    ("ipv4NormalRoutePriority", "IPv4NormalRoutePriority"),
    ("ipv6ElevatedRoutePriority", "IPv6ElevatedRoutePriority"),
    ("ipv6NormalRoutePriority", "IPv6NormalRoutePriority"),
    ("mtuIfacePattern", "MTUIfacePattern"),
    ("natOutgoingAddress", "NATOutgoingAddress"),
    ("natOutgoingExclusions", "NATOutgoingExclusions"),
    ("natPortRange", "NATPortRange"),
    ("netlinkTimeout", "NetlinkTimeoutSecs"),
    ("nftablesMode", "NFTablesMode"),
    ("reportingInterval", "ReportingIntervalSecs"),
    ("reportingTTL", "ReportingTTLSecs"),
    (
        "usageReportingInitialDelay",
        "UsageReportingInitialDelaySecs",
    ),
    ("usageReportingInterval", "UsageReportingIntervalSecs"),
    ("vxlanEnabled", "VXLANEnabled"),
    ("vxlanMTU", "VXLANMTU"),
    ("vxlanMTUV6", "VXLANMTUV6"),
    ("vxlanPort", "VXLANPort"),
    ("vxlanVNI", "VXLANVNI"),
    ("wireguardKeepAlive", "WireguardPersistentKeepAlive"),
    ("xdpEnabled", "XDPEnabled"),
    ("xdpRefreshInterval", "XDPRefreshInterval"),
];

/// Felix's name for a FelixConfiguration field (the v1 config key), or `None` for a field that
/// is not a Felix parameter (`nodeSelector`). Calico names each parameter after its Go field
/// (or a v1 name it gives the field); that is the field with its first letter upper-cased,
/// except for the fields below, whose names keep acronyms upper-case (`BPFEnabled`) or carry a
/// unit (`ReportingIntervalSecs`). The list is every such field of Calico v3.32's
/// FelixConfiguration; a field missing from it would reach Felix under a name it ignores,
/// which the side-by-side with Calico's Typha found for `bpfEnabled`
/// (docs/replacing-calico-typha.md).
fn felix_param_name(field: &str) -> Option<String> {
    // Felix's parameters are Go identifiers; a field that is not one (empty, or holding a
    // `/` that would cut the config key) is no parameter, and Go's decoder would drop it as
    // an unknown field.
    let identifier = field.starts_with(|c: char| c.is_ascii_alphabetic())
        && field.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if field == "nodeSelector" || !identifier {
        return None;
    }
    if let Ok(i) = RENAMES.binary_search_by(|(v3, _)| (*v3).cmp(field)) {
        return RENAMES.get(i).map(|(_, v1)| (*v1).to_owned());
    }
    let mut c = field.chars();
    Some(match c.next() {
        Some(first) => first.to_ascii_uppercase().to_string() + c.as_str(),
        None => String::new(),
    })
}

/// Felix's string form of a config value: `None` for null/empty (not set).
fn config_value(v: &serde_json::Value, millis: bool) -> Result<Option<String>, ConfigValueError> {
    use serde_json::Value as J;
    Ok(match v {
        J::Null => None,
        J::Bool(b) => Some(b.to_string()),
        J::Number(n) => Some(n.to_string()),
        J::String(s) if s.is_empty() => None,
        J::String(s) => Some(match go_duration_secs(s) {
            Some(secs) if millis => format_float(secs * 1000.0),
            Some(secs) => format_float(secs),
            None => s.clone(),
        }),
        J::Array(items) => {
            let parts: Vec<String> = items
                .iter()
                .map(|i| match i {
                    J::String(s) => Ok(s.clone()),
                    J::Number(n) => Ok(n.to_string()),
                    J::Bool(b) => Ok(b.to_string()),
                    J::Object(m) => Ok(failsafe_port(m)),
                    other => Err(ConfigValueError::UnsupportedListItem(other.clone())),
                })
                .collect::<Result<_, _>>()?;
            Some(if parts.is_empty() {
                "none".into()
            } else {
                parts.join(",")
            })
        }
        J::Object(m) => Some(m.iter().fold(String::new(), |mut acc, (k, v)| {
            acc.push_str(k);
            acc.push('=');
            acc.push_str(
                &v.as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| v.to_string()),
            );
            acc.push(',');
            acc
        })),
    })
}

/// `{protocol: tcp, port: 22, net: ...}` → `tcp:22` or `tcp:net:22`.
fn failsafe_port(m: &serde_json::Map<String, serde_json::Value>) -> String {
    let s = |k: &str| {
        m.get(k).map(|v| {
            v.as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| v.to_string())
        })
    };
    let proto = s("protocol").unwrap_or_else(|| "tcp".into()).to_lowercase();
    let port = s("port").unwrap_or_default();
    match s("net").filter(|n| !n.is_empty()) {
        Some(net) if net.contains(':') => format!("{proto}:[{net}]:{port}"),
        Some(net) => format!("{proto}:{net}:{port}"),
        None => format!("{proto}:{port}"),
    }
}

/// Seconds in a Go duration (`90s`, `1m30s`, `100ms`, `1.5h`); `None` if not one.
pub(super) fn go_duration_secs(s: &str) -> Option<f64> {
    let mut total = 0.0;
    let mut rest = s;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let num_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        if num_len == 0 {
            return None;
        }
        let n: f64 = rest.get(..num_len)?.parse().ok()?;
        rest = rest.get(num_len..)?;
        let (mult, unit_len) = [
            ("ns", 1e-9),
            ("us", 1e-6),
            ("µs", 1e-6),
            ("ms", 1e-3),
            ("s", 1.0),
            ("m", 60.0),
            ("h", 3600.0),
        ]
        .iter()
        .find(|(u, _)| rest.starts_with(u) && !(*u == "m" && rest.starts_with("ms")))
        .map(|(u, m)| (*m, u.len()))?;
        total += n * mult;
        rest = rest.get(unit_len..)?;
    }
    Some(total)
}

fn format_float(f: f64) -> String {
    if f.fract() == 0.0 && f.abs() < 1e15 {
        format!("{}", f as i64)
    } else {
        format!("{f}")
    }
}

/// [`felix_param_name`] for the tests, which also check that its list is sorted (it is
/// binary-searched).
#[cfg(test)]
pub(super) fn felix_param_name_for_tests(field: &str) -> Option<String> {
    let names: Vec<&str> = RENAMES.iter().map(|(v3, _)| *v3).collect();
    assert!(
        names.windows(2).all(|w| w[0] < w[1]),
        "RENAMES is not sorted"
    );
    felix_param_name(field)
}
