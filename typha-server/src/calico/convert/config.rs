//! Felix's configuration: FelixConfiguration (global and per-node config keys) and
//! ClusterInformation, with the Felix names and string forms of their values.

use typha_protocol::model::{GlobalConfigKey, HostConfigKey, Key, ResourceKind, Value};

use super::context::{ConvertError, Cx};
use super::raw;
use crate::calico::v3::{ClusterInformationSpec, GoDuration, ObjectMeta};

/// A FelixConfiguration value that has no Felix string form.
#[derive(Debug, thiserror::Error)]
enum ConfigValueError {
    /// Lists hold strings, numbers, booleans or failsafe ports (objects).
    #[error("unsupported list item {0}")]
    UnsupportedListItem(serde_json::Value),
}

/// The annotations whose values override a FelixConfiguration's parameters: this prefix and the
/// parameter's name.
const OVERRIDE_PREFIX: &str = "config.projectcalico.org/";

/// FelixConfiguration `default` (global keys) or `node.<name>` (that host's keys). Any other
/// name is a selector-scoped configuration (Calico v3.32), which Calico's felix syncer passes
/// through whole for Felix to match against its node: it is carried as the raw resource.
///
/// As Calico reads it: a field of a JSON type its Go field cannot take makes the whole
/// resource unreadable (all its keys are deleted); a field Calico v3.32 does not have is
/// dropped, as Go's decoder drops it; and each `config.projectcalico.org/<Name>` annotation
/// sets parameter `<Name>` to its value, over the spec's (Calico's felix syncer honours them,
/// unchecked).
pub(super) fn felix_configuration(
    cx: &Cx<'_>,
    meta: &ObjectMeta,
    fields: &serde_json::Map<String, serde_json::Value>,
) -> Result<Vec<(Key, Value)>, ConvertError> {
    let fields = &known_fields(cx, fields)?;
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
        super::raw_check::meta(cx, meta)?;
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
    let overrides: Vec<(&str, &String)> = meta
        .annotations
        .iter()
        .filter_map(|(k, v)| Some((k.strip_prefix(OVERRIDE_PREFIX)?, v)))
        .collect();
    let key = |param: String| match &host {
        None => Key::GlobalConfig(GlobalConfigKey { name: param }),
        Some(h) => Key::HostConfig(HostConfigKey {
            hostname: h.clone(),
            name: param,
        }),
    };
    let mut out = Vec::new();
    for (field, v) in fields {
        let Some(param) = felix_param_name(field) else {
            continue;
        };
        if overrides.iter().any(|(o, _)| *o == param) {
            continue;
        }
        let Some(value) = config_value(v, param.ends_with("Millis"))
            .map_err(|e| cx.at(&format!("spec.{field}")).err(e.to_string()))?
        else {
            continue;
        };
        out.push((key(param), Value::Config(value)));
    }
    for (param, value) in overrides {
        // A name that could not be a config key's last segment, or an empty value (which our
        // config keys cannot hold; Calico sends it as an empty string), is left out.
        if param.is_empty() || param.contains('/') || value.is_empty() {
            cx.at(&format!("metadata.annotations[{OVERRIDE_PREFIX}{param}]"))
                .skip(format!(
                    "{value:?} cannot be a config value under this name"
                ));
            continue;
        }
        out.push((key(param.to_owned()), Value::Config(value.clone())));
    }
    Ok(out)
}

/// The fields Calico v3.32's FelixConfiguration has, each checked against the JSON type its
/// Go field takes; one that Go could not decode makes the resource invalid, one Go does not
/// know is dropped (noted).
fn known_fields(
    cx: &Cx<'_>,
    fields: &serde_json::Map<String, serde_json::Value>,
) -> Result<serde_json::Map<String, serde_json::Value>, ConvertError> {
    let mut out = serde_json::Map::new();
    for (field, v) in fields {
        let c = cx.at(&format!("spec.{field}"));
        let Ok(i) = FIELDS.binary_search_by(|(f, _)| (*f).cmp(field.as_str())) else {
            c.skip("not a field of Calico v3.32's FelixConfiguration; dropped, as Calico drops it");
            continue;
        };
        let Some((_, j)) = FIELDS.get(i) else {
            continue;
        };
        if !j.decodes(v) {
            return Err(c.err(format!(
                "{v} is not {}; Calico cannot read the resource",
                j.what()
            )));
        }
        out.insert(field.clone(), v.clone());
    }
    Ok(out)
}

/// The JSON a FelixConfiguration field's Go type decodes (`null` for any of them: they are
/// pointers, or Go leaves the zero value).
#[derive(Debug, Clone, Copy)]
enum J {
    /// A string (also Go's named string types).
    Str,
    Bool,
    /// Go's `int`: an integer.
    Int,
    U32,
    /// A `metav1.Duration`: a string Go's `time.ParseDuration` reads.
    Duration,
    StrList,
    /// A `numorstring.Port`: a number 0-65535, or a string of one, a range or a name.
    Port,
    Ports,
    /// `[]ProtoPort`: objects with a string `protocol` and `net` and a port number.
    ProtoPorts,
    /// `[]HealthTimeoutOverride`: objects with a string `name` and a duration `timeout`.
    HealthTimeouts,
    /// A `numorstring.DSCP`: a number 0-255 or a string.
    Dscp,
    /// An object of strings (also `BPFConntrackTimeouts`).
    StrMap,
    /// `{min, max}` integers.
    RouteTableRange,
    RouteTableRanges,
}

impl J {
    fn decodes(self, v: &serde_json::Value) -> bool {
        use serde_json::Value as V;
        let int = |v: &V| v.as_i64().is_some();
        let str_or_null = |v: &V| v.is_string() || v.is_null();
        let duration = |v: &V| v.as_str().is_some_and(|s| GoDuration::parse(s).is_some());
        let port = |v: &V| match v {
            V::Number(n) => n.as_u64().is_some_and(|n| n <= 65535),
            V::String(s) => port_string(s),
            _ => false,
        };
        let object_with = |v: &V, ok: &dyn Fn(&str, &V) -> bool| match v {
            V::Object(m) => m.iter().all(|(k, v)| ok(k, v)),
            _ => false,
        };
        let list_of = |v: &V, ok: &dyn Fn(&V) -> bool| match v {
            V::Array(items) => items.iter().all(|i| i.is_null() || ok(i)),
            _ => false,
        };
        let range = |v: &V| {
            object_with(v, &|k, v| {
                !matches!(k, "min" | "max") || int(v) || v.is_null()
            })
        };
        if v.is_null() {
            return true;
        }
        match self {
            J::Str => v.is_string(),
            J::Bool => v.is_boolean(),
            J::Int => int(v),
            J::U32 => v.as_u64().is_some_and(|n| u32::try_from(n).is_ok()),
            J::Duration => duration(v),
            J::StrList => list_of(v, &|i| i.is_string()),
            J::Port => port(v),
            J::Ports => list_of(v, &port),
            J::ProtoPorts => list_of(v, &|i| {
                object_with(i, &|k, v| match k {
                    "protocol" | "net" => str_or_null(v),
                    "port" => v.is_null() || v.as_u64().is_some_and(|n| n <= 65535),
                    _ => true,
                })
            }),
            J::HealthTimeouts => list_of(v, &|i| {
                object_with(i, &|k, v| match k {
                    "name" => str_or_null(v),
                    "timeout" => duration(v),
                    _ => true,
                })
            }),
            J::Dscp => v.is_string() || v.as_u64().is_some_and(|n| n <= 255),
            J::StrMap => object_with(v, &|_, v| str_or_null(v)),
            J::RouteTableRange => range(v),
            J::RouteTableRanges => list_of(v, &range),
        }
    }

    fn what(self) -> &'static str {
        match self {
            J::Str => "a string",
            J::Bool => "a boolean",
            J::Int => "an integer",
            J::U32 => "an integer 0-4294967295",
            J::Duration => "a duration",
            J::StrList => "a list of strings",
            J::Port => "a port",
            J::Ports => "a list of ports",
            J::ProtoPorts => "a list of {protocol, port, net}",
            J::HealthTimeouts => "a list of {name, timeout}",
            J::Dscp => "a DSCP value",
            J::StrMap => "an object of strings",
            J::RouteTableRange => "a {min, max} range",
            J::RouteTableRanges => "a list of {min, max} ranges",
        }
    }
}

/// What Calico's `numorstring.Port` reads from a string: a number, `first:last` (first <= last)
/// of numbers 0-65535, or a name of 1-128 of A-Z, a-z, 0-9, `_`, `.`, `-`.
fn port_string(s: &str) -> bool {
    let digits = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    if digits(s) {
        return s.parse::<u16>().is_ok();
    }
    if let Some((a, b)) = s.split_once(':')
        && digits(a)
        && digits(b)
    {
        return matches!((a.parse::<u16>(), b.parse::<u16>()), (Ok(a), Ok(b)) if a <= b);
    }
    (1..=128).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// Every field of Calico v3.32's `FelixConfigurationSpec` and the JSON it takes, sorted (it
/// is binary-searched).
const FIELDS: &[(&str, J)] = &[
    ("allowIPIPPacketsFromWorkloads", J::Bool),
    ("allowVXLANPacketsFromWorkloads", J::Bool),
    ("awsSrcDstCheck", J::Str),
    ("bpfAttachType", J::Str),
    ("bpfCTLBLogFilter", J::Str),
    ("bpfConnectTimeLoadBalancing", J::Str),
    ("bpfConnectTimeLoadBalancingEnabled", J::Bool),
    ("bpfConntrackLogLevel", J::Str),
    ("bpfConntrackMode", J::Str),
    ("bpfConntrackTimeouts", J::StrMap),
    ("bpfDSROptoutCIDRs", J::StrList),
    ("bpfDataIfacePattern", J::Str),
    ("bpfDisableGROForIfaces", J::Str),
    ("bpfDisableUnprivileged", J::Bool),
    ("bpfEnabled", J::Bool),
    ("bpfEnforceRPF", J::Str),
    ("bpfExcludeCIDRsFromNAT", J::StrList),
    ("bpfExportBufferSizeMB", J::Int),
    ("bpfExtToServiceConnmark", J::Int),
    ("bpfExternalServiceMode", J::Str),
    ("bpfForceTrackPacketsFromIfaces", J::StrList),
    ("bpfHostConntrackBypass", J::Bool),
    ("bpfHostNetworkedNATWithoutCTLB", J::Str),
    ("bpfJITHardening", J::Str),
    ("bpfKubeProxyHealthzPort", J::Int),
    ("bpfKubeProxyIptablesCleanupEnabled", J::Bool),
    ("bpfKubeProxyMinSyncPeriod", J::Duration),
    ("bpfL3IfacePattern", J::Str),
    ("bpfLogFilters", J::StrMap),
    ("bpfLogLevel", J::Str),
    ("bpfMaglevMaxEndpointsPerService", J::Int),
    ("bpfMaglevMaxServices", J::Int),
    ("bpfMapSizeConntrack", J::Int),
    ("bpfMapSizeConntrackCleanupQueue", J::Int),
    ("bpfMapSizeConntrackScaling", J::Str),
    ("bpfMapSizeIPSets", J::Int),
    ("bpfMapSizeIfState", J::Int),
    ("bpfMapSizeNATAffinity", J::Int),
    ("bpfMapSizeNATBackend", J::Int),
    ("bpfMapSizeNATFrontend", J::Int),
    ("bpfMapSizePerCpuConntrack", J::Int),
    ("bpfMapSizeRoute", J::Int),
    ("bpfPSNATPorts", J::Port),
    ("bpfPolicyDebugEnabled", J::Bool),
    ("bpfProfiling", J::Str),
    ("bpfRedirectToPeer", J::Str),
    ("cgroupV2Path", J::Str),
    ("chainInsertMode", J::Str),
    ("dataplaneDriver", J::Str),
    ("dataplaneWatchdogTimeout", J::Duration),
    ("debugDisableLogDropping", J::Bool),
    ("debugHost", J::Str),
    ("debugMemoryProfilePath", J::Str),
    ("debugPort", J::Int),
    ("debugSimulateCalcGraphHangAfter", J::Duration),
    ("debugSimulateDataplaneApplyDelay", J::Duration),
    ("debugSimulateDataplaneHangAfter", J::Duration),
    ("defaultEndpointToHostAction", J::Str),
    ("deviceRouteProtocol", J::Int),
    ("deviceRouteSourceAddress", J::Str),
    ("deviceRouteSourceAddressIPv6", J::Str),
    ("disableConntrackInvalidCheck", J::Bool),
    ("endpointReportingDelay", J::Duration),
    ("endpointReportingEnabled", J::Bool),
    ("endpointStatusPathPrefix", J::Str),
    ("externalNodesList", J::StrList),
    ("failsafeInboundHostPorts", J::ProtoPorts),
    ("failsafeOutboundHostPorts", J::ProtoPorts),
    ("featureDetectOverride", J::Str),
    ("featureGates", J::Str),
    ("floatingIPs", J::Str),
    ("flowLogsCollectorDebugTrace", J::Bool),
    ("flowLogsFlushInterval", J::Duration),
    ("flowLogsGoldmaneServer", J::Str),
    ("flowLogsLocalReporter", J::Str),
    ("flowLogsPolicyEvaluationMode", J::Str),
    ("genericXDPEnabled", J::Bool),
    ("goGCThreshold", J::Int),
    ("goMaxProcs", J::Int),
    ("goMemoryLimitMB", J::Int),
    ("healthEnabled", J::Bool),
    ("healthHost", J::Str),
    ("healthPort", J::Int),
    ("healthTimeoutOverrides", J::HealthTimeouts),
    ("interfaceExclude", J::Str),
    ("interfacePrefix", J::Str),
    ("interfaceRefreshInterval", J::Duration),
    ("ipForwarding", J::Str),
    ("ipipEnabled", J::Bool),
    ("ipipMTU", J::Int),
    ("ipsetsRefreshInterval", J::Duration),
    ("iptablesBackend", J::Str),
    ("iptablesFilterAllowAction", J::Str),
    ("iptablesFilterDenyAction", J::Str),
    ("iptablesLockProbeInterval", J::Duration),
    ("iptablesMangleAllowAction", J::Str),
    ("iptablesMarkMask", J::U32),
    ("iptablesNATOutgoingInterfaceFilter", J::Str),
    ("iptablesPostWriteCheckInterval", J::Duration),
    ("iptablesRefreshInterval", J::Duration),
    ("ipv4ElevatedRoutePriority", J::Int),
    ("ipv4NormalRoutePriority", J::Int),
    ("ipv6ElevatedRoutePriority", J::Int),
    ("ipv6NormalRoutePriority", J::Int),
    ("ipv6Support", J::Bool),
    ("istioAmbientMode", J::Str),
    ("istioDSCPMark", J::Dscp),
    ("kubeNodePortRanges", J::Ports),
    ("liveMigrationRouteConvergenceTime", J::Duration),
    ("logActionRateLimit", J::Str),
    ("logActionRateLimitBurst", J::Int),
    ("logDebugFilenameRegex", J::Str),
    ("logFilePath", J::Str),
    ("logPrefix", J::Str),
    ("logSeverityFile", J::Str),
    ("logSeverityScreen", J::Str),
    ("logSeveritySys", J::Str),
    ("maxIpsetSize", J::Int),
    ("metadataAddr", J::Str),
    ("metadataPort", J::Int),
    ("mtuIfacePattern", J::Str),
    ("natOutgoingAddress", J::Str),
    ("natOutgoingExclusions", J::Str),
    ("natPortRange", J::Port),
    ("netlinkTimeout", J::Duration),
    ("nftablesFilterAllowAction", J::Str),
    ("nftablesFilterDenyAction", J::Str),
    ("nftablesMangleAllowAction", J::Str),
    ("nftablesMarkMask", J::U32),
    ("nftablesMode", J::Str),
    ("nftablesRefreshInterval", J::Duration),
    ("nodeSelector", J::Str),
    ("openstackRegion", J::Str),
    ("policySyncPathPrefix", J::Str),
    ("programClusterRoutes", J::Str),
    ("prometheusGoMetricsEnabled", J::Bool),
    ("prometheusMetricsCAFile", J::Str),
    ("prometheusMetricsCertFile", J::Str),
    ("prometheusMetricsClientAuth", J::Str),
    ("prometheusMetricsEnabled", J::Bool),
    ("prometheusMetricsHost", J::Str),
    ("prometheusMetricsKeyFile", J::Str),
    ("prometheusMetricsPort", J::Int),
    ("prometheusProcessMetricsEnabled", J::Bool),
    ("prometheusWireGuardMetricsEnabled", J::Bool),
    ("removeExternalRoutes", J::Bool),
    ("reportingInterval", J::Duration),
    ("reportingTTL", J::Duration),
    ("requireMTUFile", J::Bool),
    ("routeRefreshInterval", J::Duration),
    ("routeSource", J::Str),
    ("routeSyncDisabled", J::Bool),
    ("routeTableRange", J::RouteTableRange),
    ("routeTableRanges", J::RouteTableRanges),
    ("serviceLoopPrevention", J::Str),
    ("sidecarAccelerationEnabled", J::Bool),
    ("usageReportingEnabled", J::Bool),
    ("usageReportingInitialDelay", J::Duration),
    ("usageReportingInterval", J::Duration),
    ("useInternalDataplaneDriver", J::Bool),
    ("vxlanEnabled", J::Bool),
    ("vxlanMTU", J::Int),
    ("vxlanMTUV6", J::Int),
    ("vxlanPort", J::Int),
    ("vxlanVNI", J::Int),
    ("windowsManageFirewallRules", J::Str),
    ("wireguardEnabled", J::Bool),
    ("wireguardEnabledV6", J::Bool),
    ("wireguardHostEncryptionEnabled", J::Bool),
    ("wireguardInterfaceName", J::Str),
    ("wireguardInterfaceNameV6", J::Str),
    ("wireguardKeepAlive", J::Duration),
    ("wireguardListeningPort", J::Int),
    ("wireguardListeningPortV6", J::Int),
    ("wireguardMTU", J::Int),
    ("wireguardMTUV6", J::Int),
    ("wireguardRoutingRulePriority", J::Int),
    ("wireguardThreadingEnabled", J::Bool),
    ("workloadSourceSpoofing", J::Str),
    ("xdpEnabled", J::Bool),
    ("xdpRefreshInterval", J::Duration),
];

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
    let fields: Vec<&str> = FIELDS.iter().map(|(f, _)| *f).collect();
    assert!(
        fields.windows(2).all(|w| w[0] < w[1]),
        "FIELDS is not sorted"
    );
    felix_param_name(field)
}
