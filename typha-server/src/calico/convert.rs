//! The one conversion layer from Calico v3 resources to the felix syncer's KV model, used by
//! every backend. Follows Calico's update processors (see `docs/calico-conversion.md`).
//!
//! A resource converts to zero or more KVs, or fails with an error naming the resource, the
//! field and the reason. The caller (the pipeline) remembers which keys each resource produced,
//! so a deletion, or an update that produces fewer keys, removes exactly the right ones.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};

use ipnet::IpNet;
use typha_protocol::model::{
    Action, Block, BlockKey, EncapMode, EndpointPort, EntityRule, GlobalConfigKey, HostConfigKey,
    HostEndpoint, HostEndpointKey, HostIpKey, HttpMatch, Icmp, IpNat, IpPool, IpPoolKey, Key,
    Labels, Mac, NetworkSet, NetworkSetKey, Node, Policy, PolicyKey, PolicyKind, PolicyType, Port,
    ProfileKey, ProfileRules, Protocol, Resource as ResourceValue, ResourceKey, ResourceKind, Rule,
    ServiceMatch, Value, WorkloadEndpoint, WorkloadEndpointKey,
};
use typha_protocol::selector::{NAMESPACE_LABEL, Selector};

use super::v3::{
    ActionSpec, EndpointPortSpec, EntityRuleSpec, IcmpSpec, PolicySpec, PortSpec, ProtocolSpec,
    Resource, ResourceId, RuleSpec, Spec,
};

/// Calico's label for the orchestrator of a workload.
pub const ORCHESTRATOR_LABEL: &str = "projectcalico.org/orchestrator";
/// Calico's label for the service account of a workload.
pub const SERVICE_ACCOUNT_LABEL: &str = "projectcalico.org/serviceaccount";

/// A resource that cannot be converted: which one, which field, why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{id}: {field}: {reason}")]
pub struct ConvertError {
    /// The resource.
    pub id: ResourceId,
    /// The offending field (`spec.ingress[0].destination.ports[1]`).
    pub field: String,
    /// What is wrong.
    pub reason: String,
}

/// Converts a resource to its KVs.
pub fn convert(r: &Resource) -> Result<Vec<(Key, Value)>, ConvertError> {
    let id = r.id();
    let mut cx = Cx {
        id: &id,
        field: String::from("spec"),
    };
    let ns = id.namespace.clone().unwrap_or_default();
    // Namespaces end up inside selectors the agents parse; the selector language has no
    // escapes, so a quote here could change what a selector means.
    if ns.contains(['\'', '"']) {
        return Err(cx.at("metadata.namespace").err("must not contain quotes"));
    }
    let name = &r.metadata.name;
    match &r.spec {
        Spec::WorkloadEndpoint(s) => {
            let wl = if s.pod.is_empty() {
                &s.workload
            } else {
                &s.pod
            };
            cx.require("spec.node", &s.node)?;
            cx.require("spec.orchestrator", &s.orchestrator)?;
            cx.require("spec.pod or spec.workload", wl)?;
            cx.require("spec.endpoint", &s.endpoint)?;
            if s.node.contains('/') {
                return Err(cx.at("spec.node").err("must not contain '/'"));
            }
            let key = Key::WorkloadEndpoint(WorkloadEndpointKey {
                hostname: s.node.clone(),
                orchestrator: s.orchestrator.clone(),
                workload: format!("{ns}/{wl}"),
                endpoint: s.endpoint.clone(),
            });
            // As in Calico: an endpoint without addresses is not programmed (a deletion).
            if s.ip_networks.is_empty() {
                return Ok(vec![]);
            }
            let mut ipv4_nets = Vec::new();
            let mut ipv6_nets = Vec::new();
            for (i, n) in s.ip_networks.iter().enumerate() {
                match cx.at(&format!("spec.ipNetworks[{i}]")).net(n)? {
                    IpNet::V4(n) => ipv4_nets.push(n),
                    IpNet::V6(n) => ipv6_nets.push(n),
                }
            }
            let mut ipv4_nat = Vec::new();
            let mut ipv6_nat = Vec::new();
            for (i, nat) in s.ip_nats.iter().enumerate() {
                let c = cx.at(&format!("spec.ipNATs[{i}]"));
                let int_ip = c.ip(&nat.internal_ip)?;
                let ext_ip = c.ip(&nat.external_ip)?;
                let m = IpNat { int_ip, ext_ip };
                if int_ip.is_ipv4() {
                    ipv4_nat.push(m)
                } else {
                    ipv6_nat.push(m)
                }
            }
            let mut labels: Labels = r
                .metadata
                .labels
                .iter()
                .filter(|(k, _)| !k.starts_with("pcns.") && !k.starts_with("pcsa."))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            labels.insert(NAMESPACE_LABEL.into(), ns.clone());
            labels.insert(ORCHESTRATOR_LABEL.into(), s.orchestrator.clone());
            if !s.service_account_name.is_empty() {
                labels.insert(SERVICE_ACCOUNT_LABEL.into(), s.service_account_name.clone());
            }
            let value = Value::WorkloadEndpoint(WorkloadEndpoint {
                state: "active".into(),
                name: s.interface_name.clone(),
                active_instance_id: String::new(),
                mac: opt(&s.mac).map(|m| cx.at("spec.mac").mac(m)).transpose()?,
                profile_ids: s.profiles.clone(),
                ipv4_nets,
                ipv6_nets,
                ipv4_nat,
                ipv6_nat,
                labels,
                ipv4_gateway: match opt(&s.ipv4_gateway) {
                    Some(g) => match cx.at("spec.ipv4Gateway").ip(g)? {
                        IpAddr::V4(a) => Some(a),
                        IpAddr::V6(_) => return Err(cx.at("spec.ipv4Gateway").err("not IPv4")),
                    },
                    None => None,
                },
                ipv6_gateway: match opt(&s.ipv6_gateway) {
                    Some(g) => match cx.at("spec.ipv6Gateway").ip(g)? {
                        IpAddr::V6(a) => Some(a),
                        IpAddr::V4(_) => return Err(cx.at("spec.ipv6Gateway").err("not IPv6")),
                    },
                    None => None,
                },
                ports: cx.endpoint_ports(&s.ports, true)?,
                generate_name: r.metadata.generate_name.clone(),
                allow_spoofed_source_prefixes: s
                    .allow_spoofed_source_prefixes
                    .iter()
                    .enumerate()
                    .map(|(i, n)| {
                        cx.at(&format!("spec.allowSpoofedSourcePrefixes[{i}]"))
                            .net(n)
                    })
                    .collect::<Result<_, _>>()?,
            });
            Ok(vec![(key, value)])
        }
        Spec::NetworkPolicy(s) => cx.policy(PolicyKind::NetworkPolicy, Some(&ns), name, s),
        Spec::KubernetesNetworkPolicy(s) => {
            cx.policy(PolicyKind::KubernetesNetworkPolicy, Some(&ns), name, s)
        }
        Spec::GlobalNetworkPolicy(s) => cx.policy(PolicyKind::GlobalNetworkPolicy, None, name, s),
        Spec::Profile(s) => {
            let key = ProfileKey { name: name.clone() };
            let mut out = vec![(
                Key::ProfileRules(key.clone()),
                Value::ProfileRules(ProfileRules {
                    inbound_rules: cx.rules("spec.ingress", &s.ingress, None)?,
                    outbound_rules: cx.rules("spec.egress", &s.egress, None)?,
                }),
            )];
            if !s.labels_to_apply.is_empty() {
                out.push((
                    Key::ProfileLabels(key),
                    Value::ProfileLabels(s.labels_to_apply.clone()),
                ));
            }
            Ok(out)
        }
        Spec::NetworkSet(s) => {
            let mut labels = r.metadata.labels.clone();
            labels.insert(NAMESPACE_LABEL.into(), ns.clone());
            Ok(vec![(
                Key::NetworkSet(NetworkSetKey {
                    name: format!("{ns}/{name}"),
                }),
                Value::NetworkSet(NetworkSet {
                    nets: cx.nets("spec.nets", &s.nets)?,
                    labels,
                    profile_ids: vec![format!("kns.{ns}")],
                }),
            )])
        }
        Spec::GlobalNetworkSet(s) => Ok(vec![(
            Key::NetworkSet(NetworkSetKey { name: name.clone() }),
            Value::NetworkSet(NetworkSet {
                nets: cx.nets("spec.nets", &s.nets)?,
                labels: r.metadata.labels.clone(),
                profile_ids: vec![],
            }),
        )]),
        Spec::HostEndpoint(s) => {
            cx.require("spec.node", &s.node)?;
            let mut v4 = Vec::new();
            let mut v6 = Vec::new();
            for (i, a) in s.expected_ips.iter().enumerate() {
                match cx.at(&format!("spec.expectedIPs[{i}]")).ip(a)? {
                    IpAddr::V4(a) => v4.push(a),
                    IpAddr::V6(a) => v6.push(a),
                }
            }
            if s.interface_name.is_empty() && v4.is_empty() && v6.is_empty() {
                return Err(cx.at("spec").err("needs interfaceName or expectedIPs"));
            }
            Ok(vec![(
                Key::HostEndpoint(HostEndpointKey {
                    hostname: s.node.clone(),
                    endpoint: name.clone(),
                }),
                Value::HostEndpoint(HostEndpoint {
                    name: s.interface_name.clone(),
                    expected_ipv4_addrs: v4,
                    expected_ipv6_addrs: v6,
                    labels: r.metadata.labels.clone(),
                    profile_ids: s.profiles.clone(),
                    ports: cx.endpoint_ports(&s.ports, false)?,
                }),
            )])
        }
        Spec::IpPool(s) => {
            let cidr = cx.at("spec.cidr").net(&s.cidr)?;
            let mode = |field: &str, m: &str| match m {
                "" | "Never" => Ok(EncapMode::Never),
                "Always" => Ok(EncapMode::Always),
                "CrossSubnet" => Ok(EncapMode::CrossSubnet),
                other => Err(cx.at(field).err(format!(
                    "{other:?} is not one of Always, CrossSubnet, Never"
                ))),
            };
            Ok(vec![(
                Key::IpPool(IpPoolKey { cidr }),
                Value::IpPool(IpPool {
                    cidr,
                    ipip_mode: mode("spec.ipipMode", &s.ipip_mode)?,
                    vxlan_mode: mode("spec.vxlanMode", &s.vxlan_mode)?,
                    masquerade: s.nat_outgoing,
                    ipam: !s.disabled,
                    disabled: s.disabled,
                    disable_bgp_export: s.disable_bgp_export,
                }),
            )])
        }
        Spec::IpamBlock(s) => {
            let cidr = cx.at("spec.cidr").net(&s.cidr)?;
            let allocated = s.allocations.iter().filter(|a| a.is_some()).count();
            Ok(vec![(
                Key::Block(BlockKey { cidr }),
                Value::Block(Block {
                    cidr,
                    affinity: s.affinity.clone().filter(|a| !a.is_empty()),
                    allocated: u32::try_from(allocated).unwrap_or(u32::MAX),
                    deleted: s.deleted,
                }),
            )])
        }
        Spec::BlockAffinity(s) => Ok(vec![(
            Key::Resource(ResourceKey {
                kind: ResourceKind::BlockAffinity,
                namespace: None,
                name: name.clone(),
            }),
            Value::Resource(ResourceValue {
                labels: r.metadata.labels.clone(),
                spec_json: serde_json::to_string(s).unwrap_or_default(),
            }),
        )]),
        Spec::Node(s) => {
            let bgp = s.bgp.clone().unwrap_or_default();
            let ipv4_address = opt(&bgp.ipv4_address)
                .map(|a| cx.at("spec.bgp.ipv4Address").iface_net(a))
                .transpose()?
                .map(|n| match n {
                    IpNet::V4(n) => Ok(n),
                    IpNet::V6(_) => Err(cx.at("spec.bgp.ipv4Address").err("not IPv4")),
                })
                .transpose()?;
            let ipv6_address = opt(&bgp.ipv6_address)
                .map(|a| cx.at("spec.bgp.ipv6Address").iface_net(a))
                .transpose()?
                .map(|n| match n {
                    IpNet::V6(n) => Ok(n),
                    IpNet::V4(_) => Err(cx.at("spec.bgp.ipv6Address").err("not IPv6")),
                })
                .transpose()?;
            let v4 = |field: &str, a: &str| -> Result<Option<Ipv4Addr>, ConvertError> {
                match opt(a) {
                    None => Ok(None),
                    Some(a) => match cx.at(field).ip(a)? {
                        IpAddr::V4(a) => Ok(Some(a)),
                        IpAddr::V6(_) => Err(cx.at(field).err("not IPv4")),
                    },
                }
            };
            let ipip = v4("spec.bgp.ipv4IPIPTunnelAddr", &bgp.ipv4_ipip_tunnel_addr)?;
            let vxlan = v4("spec.ipv4VXLANTunnelAddr", &s.ipv4_vxlan_tunnel_addr)?;
            let vxlan_mac = opt(&s.vxlan_tunnel_mac_addr)
                .map(|m| cx.at("spec.vxlanTunnelMACAddr").mac(m))
                .transpose()?;
            // The host IP agents route to: the BGP address, else the first internal, then
            // external, IPv4 address (as older Calico releases did).
            let host_ip = ipv4_address.map(|n| IpAddr::V4(n.addr())).or_else(|| {
                ["InternalIP", "ExternalIP"].iter().find_map(|t| {
                    s.addresses
                        .iter()
                        .filter(|a| a.address_type == *t)
                        .find_map(|a| {
                            cx.iface_net(&a.address)
                                .ok()
                                .map(|n| n.addr())
                                .filter(IpAddr::is_ipv4)
                        })
                })
            });
            let mut out = Vec::new();
            if let Some(ip) = host_ip {
                out.push((
                    Key::HostIp(HostIpKey {
                        hostname: name.clone(),
                    }),
                    Value::HostIp(ip),
                ));
            }
            let host_config = |param: &str, v: String| {
                (
                    Key::HostConfig(HostConfigKey {
                        hostname: name.clone(),
                        name: param.into(),
                    }),
                    Value::Config(v),
                )
            };
            if let Some(a) = ipip {
                out.push(host_config("IpInIpTunnelAddr", a.to_string()));
            }
            if let Some(a) = vxlan {
                out.push(host_config("IPv4VXLANTunnelAddr", a.to_string()));
            }
            if let Some(m) = vxlan_mac {
                out.push(host_config("VXLANTunnelMACAddr", m.to_string()));
            }
            out.push((
                Key::Resource(ResourceKey {
                    kind: ResourceKind::Node,
                    namespace: None,
                    name: name.clone(),
                }),
                Value::Node(Node {
                    ipv4_address,
                    ipv6_address,
                    ipv4_ipip_tunnel_addr: ipip,
                    ipv4_vxlan_tunnel_addr: vxlan,
                    vxlan_tunnel_mac: vxlan_mac,
                    wireguard_public_key: String::new(),
                    as_number: bgp.as_number,
                    labels: r.metadata.labels.clone(),
                }),
            ));
            Ok(out)
        }
        Spec::FelixConfiguration(fields) => {
            let host = if name == "default" {
                None
            } else if let Some(h) = name.strip_prefix("node.").filter(|h| !h.is_empty()) {
                Some(h.to_owned())
            } else {
                return Err(cx
                    .at("metadata.name")
                    .err("must be \"default\" or \"node.<nodename>\""));
            };
            let mut out = Vec::new();
            for (field, v) in fields {
                let param = felix_param_name(field);
                let Some(value) = config_value(v, param.ends_with("Millis"))
                    .map_err(|e| cx.at(&format!("spec.{field}")).err(e))?
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
        Spec::ClusterInformation(s) => {
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
            Ok(out)
        }
    }
}

fn opt(s: &str) -> Option<&str> {
    (!s.is_empty()).then_some(s)
}

/// Felix's name for a FelixConfiguration field: the field with its first letter upper-cased,
/// except for the fields Calico renames.
fn felix_param_name(field: &str) -> String {
    const RENAMES: &[(&str, &str)] = &[
        ("reportingInterval", "ReportingIntervalSecs"),
        ("reportingTTL", "ReportingTTLSecs"),
        ("ipipEnabled", "IpInIpEnabled"),
        ("ipipMTU", "IpInIpMtu"),
        ("ipv6Support", "Ipv6Support"),
        ("netlinkTimeout", "NetlinkTimeoutSecs"),
        (
            "iptablesLockProbeInterval",
            "IptablesLockProbeIntervalMillis",
        ),
        ("iptablesLockTimeout", "IptablesLockTimeoutSecs"),
        ("metadataAddr", "MetadataAddr"),
        ("interfacePrefix", "InterfacePrefix"),
    ];
    if let Some((_, v1)) = RENAMES.iter().find(|(v3, _)| *v3 == field) {
        return (*v1).to_owned();
    }
    let mut c = field.chars();
    match c.next() {
        Some(first) => first.to_ascii_uppercase().to_string() + c.as_str(),
        None => String::new(),
    }
}

/// Felix's string form of a config value: `None` for null/empty (not set).
fn config_value(v: &serde_json::Value, millis: bool) -> Result<Option<String>, String> {
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
                    other => Err(format!("unsupported list item {other}")),
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
fn go_duration_secs(s: &str) -> Option<f64> {
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

/// Conversion context: the resource and the field being converted, for error messages.
struct Cx<'a> {
    id: &'a ResourceId,
    field: String,
}

impl Cx<'_> {
    fn at(&self, field: &str) -> Cx<'_> {
        Cx {
            id: self.id,
            field: field.to_owned(),
        }
    }

    fn err(&self, reason: impl Into<String>) -> ConvertError {
        ConvertError {
            id: self.id.clone(),
            field: self.field.clone(),
            reason: reason.into(),
        }
    }

    fn require(&self, field: &str, v: &str) -> Result<(), ConvertError> {
        if v.is_empty() {
            Err(self.at(field).err("required"))
        } else {
            Ok(())
        }
    }

    fn ip(&self, s: &str) -> Result<IpAddr, ConvertError> {
        s.parse()
            .map_err(|_| self.err(format!("{s:?} is not an IP address")))
    }

    /// A CIDR or bare address, masked to its network (Calico masks).
    fn net(&self, s: &str) -> Result<IpNet, ConvertError> {
        Ok(self.iface_net(s)?.trunc())
    }

    /// A CIDR or bare address, host bits kept (node addresses).
    fn iface_net(&self, s: &str) -> Result<IpNet, ConvertError> {
        if let Ok(n) = s.parse::<IpNet>() {
            return Ok(n);
        }
        match s.parse::<IpAddr>() {
            Ok(a) => Ok(IpNet::from(a)),
            Err(_) => Err(self.err(format!("{s:?} is not a CIDR or IP address"))),
        }
    }

    fn nets(&self, field: &str, v: &[String]) -> Result<Vec<IpNet>, ConvertError> {
        v.iter()
            .enumerate()
            .map(|(i, n)| self.at(&format!("{field}[{i}]")).net(n))
            .collect()
    }

    fn mac(&self, s: &str) -> Result<Mac, ConvertError> {
        s.parse()
            .map_err(|e: typha_protocol::model::MacParseError| self.err(e.to_string()))
    }

    fn selector(&self, s: &str) -> Result<Selector, ConvertError> {
        Selector::parse(s).map_err(|e| self.err(e.to_string()))
    }

    fn protocol(&self, p: &ProtocolSpec) -> Result<Protocol, ConvertError> {
        let by_number = |n: u8| match n {
            6 => Protocol::Tcp,
            17 => Protocol::Udp,
            1 => Protocol::Icmp,
            58 => Protocol::IcmpV6,
            132 => Protocol::Sctp,
            136 => Protocol::UdpLite,
            n => Protocol::Number(n),
        };
        match p {
            ProtocolSpec::Number(n) => Ok(by_number(*n)),
            ProtocolSpec::Name(s) => match s.to_ascii_lowercase().as_str() {
                "tcp" => Ok(Protocol::Tcp),
                "udp" => Ok(Protocol::Udp),
                "icmp" => Ok(Protocol::Icmp),
                "icmpv6" => Ok(Protocol::IcmpV6),
                "sctp" => Ok(Protocol::Sctp),
                "udplite" => Ok(Protocol::UdpLite),
                other => other
                    .parse::<u8>()
                    .map(by_number)
                    .map_err(|_| self.err(format!("unknown protocol {s:?}"))),
            },
        }
    }

    fn port(&self, p: &PortSpec) -> Result<Port, ConvertError> {
        let text = match p {
            PortSpec::Number(n) => {
                return Ok(Port::Range {
                    first: *n,
                    last: *n,
                });
            }
            PortSpec::Text(t) => t.as_str(),
        };
        let num = |s: &str| {
            s.parse::<u16>()
                .map_err(|_| self.err(format!("bad port {text:?}")))
        };
        if text.bytes().all(|b| b.is_ascii_digit()) && !text.is_empty() {
            let n = num(text)?;
            return Ok(Port::Range { first: n, last: n });
        }
        if let Some((a, b)) = text.split_once(':') {
            let (first, last) = (num(a)?, num(b)?);
            if first > last {
                return Err(self.err(format!("port range {text:?} has first > last")));
            }
            return Ok(Port::Range { first, last });
        }
        let named_ok = !text.is_empty()
            && text.len() <= 128
            && text
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
        if named_ok {
            Ok(Port::Named(text.to_owned()))
        } else {
            Err(self.err(format!(
                "{text:?} is not a port, a range a:b or a port name"
            )))
        }
    }

    fn ports(&self, field: &str, ps: &[PortSpec]) -> Result<Vec<Port>, ConvertError> {
        ps.iter()
            .enumerate()
            .map(|(i, p)| self.at(&format!("{field}[{i}]")).port(p))
            .collect()
    }

    fn icmp(&self, i: &IcmpSpec) -> Result<Icmp, ConvertError> {
        let Some(t) = i.icmp_type else {
            return Err(self.err("code given without type"));
        };
        let icmp_type = u8::try_from(t)
            .ok()
            .filter(|t| *t <= 254)
            .ok_or_else(|| self.err("type must be 0-254"))?;
        let code = i
            .code
            .map(|c| u8::try_from(c).map_err(|_| self.err("code must be 0-255")))
            .transpose()?;
        Ok(Icmp { icmp_type, code })
    }

    fn endpoint_ports(
        &self,
        ps: &[EndpointPortSpec],
        named_only: bool,
    ) -> Result<Vec<EndpointPort>, ConvertError> {
        let mut out = Vec::new();
        for (i, p) in ps.iter().enumerate() {
            let c = self.at(&format!("spec.ports[{i}]"));
            if p.name.is_empty() && named_only {
                continue;
            }
            if p.port == 0 {
                return Err(c.err("port must be 1-65535"));
            }
            out.push(EndpointPort {
                name: p.name.clone(),
                protocol: c.protocol(&p.protocol)?,
                port: p.port,
            });
        }
        Ok(out)
    }

    fn policy(
        &mut self,
        kind: PolicyKind,
        ns: Option<&str>,
        name: &str,
        s: &PolicySpec,
    ) -> Result<Vec<(Key, Value)>, ConvertError> {
        let mut sel = self.at("spec.selector").selector(&s.selector)?;
        if let Some(ns) = ns {
            sel = Selector::and([sel, Selector::Eq(NAMESPACE_LABEL.into(), ns.into())]);
        } else if !s.namespace_selector.is_empty() {
            let has_ns = Selector::Has(NAMESPACE_LABEL.into());
            let nssel = self
                .at("spec.namespaceSelector")
                .selector(&s.namespace_selector)?
                .map_labels(&|k| format!("pcns.{k}"));
            sel = Selector::and([sel, nssel])
                .replace_all_and_global(&has_ns, &Selector::Not(Box::new(has_ns.clone())));
            if sel == Selector::All {
                sel = has_ns;
            }
        }
        if !s.service_account_selector.is_empty() {
            let sasel = self
                .at("spec.serviceAccountSelector")
                .selector(&s.service_account_selector)?
                .map_labels(&|k| format!("pcsa.{k}"));
            sel = Selector::and([sel, sasel]);
        }
        let mut types = Vec::new();
        for (i, t) in s.types.iter().enumerate() {
            types.push(match t.to_ascii_lowercase().as_str() {
                "ingress" => PolicyType::Ingress,
                "egress" => PolicyType::Egress,
                _ => {
                    return Err(self
                        .at(&format!("spec.types[{i}]"))
                        .err(format!("{t:?} is not Ingress or Egress")));
                }
            });
        }
        if types.is_empty() {
            // What Calico's API server fills in when a policy is written without types.
            types.push(PolicyType::Ingress);
            if !s.egress.is_empty() {
                if s.ingress.is_empty() {
                    types.clear();
                }
                types.push(PolicyType::Egress);
            }
        }
        types.sort();
        types.dedup();
        if s.order.is_some_and(|o| !o.is_finite()) {
            return Err(self.at("spec.order").err("must be a finite number"));
        }
        let key = Key::Policy(PolicyKey {
            kind,
            namespace: ns.map(str::to_owned),
            name: if kind == PolicyKind::KubernetesNetworkPolicy
                && !name.starts_with("knp.default.")
            {
                format!("knp.default.{name}")
            } else {
                name.to_owned()
            },
        });
        let global = ns.is_none();
        Ok(vec![(
            key,
            Value::Policy(Policy {
                namespace: ns.unwrap_or_default().to_owned(),
                tier: if s.tier.is_empty() {
                    "default".into()
                } else {
                    s.tier.clone()
                },
                order: s.order,
                selector: sel.to_string(),
                types,
                inbound_rules: self.rules("spec.ingress", &s.ingress, ns)?,
                outbound_rules: self.rules("spec.egress", &s.egress, ns)?,
                untracked: global && s.do_not_track,
                pre_dnat: global && s.pre_dnat,
                apply_on_forward: global && (s.apply_on_forward || s.do_not_track || s.pre_dnat),
                performance_hints: s.performance_hints.clone(),
                staged_action: None,
            }),
        )])
    }

    fn rules(
        &self,
        field: &str,
        rules: &[RuleSpec],
        ns: Option<&str>,
    ) -> Result<Vec<Rule>, ConvertError> {
        rules
            .iter()
            .enumerate()
            .map(|(i, r)| self.at(&format!("{field}[{i}]")).rule(r, ns))
            .collect()
    }

    fn rule(&self, r: &RuleSpec, ns: Option<&str>) -> Result<Rule, ConvertError> {
        let f = |sub: &str| format!("{}.{sub}", self.field);
        let protocol = r
            .protocol
            .as_ref()
            .map(|p| self.at(&f("protocol")).protocol(p))
            .transpose()?;
        let ip_version = match r.ip_version {
            None | Some(4) | Some(6) => r.ip_version,
            Some(v) => return Err(self.at(&f("ipVersion")).err(format!("{v} is not 4 or 6"))),
        };
        let src = self.entity(&f("source"), &r.source, ns)?;
        let dst = self.entity(&f("destination"), &r.destination, ns)?;
        let has_ports = !(src.ports.is_empty()
            && src.not_ports.is_empty()
            && dst.ports.is_empty()
            && dst.not_ports.is_empty());
        if has_ports && !protocol.is_some_and(Protocol::has_ports) {
            return Err(self.err("ports need protocol TCP, UDP, SCTP or UDPLite"));
        }
        let icmp = r
            .icmp
            .as_ref()
            .map(|i| self.at(&f("icmp")).icmp(i))
            .transpose()?;
        let not_icmp = r
            .not_icmp
            .as_ref()
            .map(|i| self.at(&f("notICMP")).icmp(i))
            .transpose()?;
        if (icmp.is_some() || not_icmp.is_some())
            && !matches!(protocol, Some(Protocol::Icmp | Protocol::IcmpV6))
        {
            return Err(self.err("icmp needs protocol ICMP or ICMPv6"));
        }
        Ok(Rule {
            action: match r.action {
                ActionSpec::Allow => Action::Allow,
                ActionSpec::Deny => Action::Deny,
                ActionSpec::Log => Action::Log,
                ActionSpec::Pass => Action::Pass,
            },
            ip_version,
            protocol,
            not_protocol: r
                .not_protocol
                .as_ref()
                .map(|p| self.at(&f("notProtocol")).protocol(p))
                .transpose()?,
            icmp,
            not_icmp,
            src,
            dst,
            http: r.http.as_ref().map(|h| HttpMatch {
                methods: h.methods.clone(),
                paths: h
                    .paths
                    .iter()
                    .filter_map(|p| p.exact.clone().or_else(|| p.prefix.clone()))
                    .collect(),
            }),
        })
    }

    fn entity(
        &self,
        field: &str,
        e: &EntityRuleSpec,
        ns: Option<&str>,
    ) -> Result<EntityRule, ConvertError> {
        let c = |sub: &str| self.at(&format!("{field}.{sub}"));
        let has_ns = Selector::Has(NAMESPACE_LABEL.into());
        let ns_sel = if !e.namespace_selector.is_empty() {
            Some(
                c("namespaceSelector")
                    .selector(&e.namespace_selector)?
                    .map_labels(&|k| format!("pcns.{k}"))
                    .replace_all_and_global(&has_ns, &Selector::Not(Box::new(has_ns.clone()))),
            )
        } else {
            ns.map(|ns| Selector::Eq(NAMESPACE_LABEL.into(), ns.into()))
        };
        let mut parts = Vec::new();
        if let Some(sa) = &e.service_accounts {
            if sa.names.iter().any(|n| n.contains(['\'', '"'])) {
                return Err(c("serviceAccounts.names").err("must not contain quotes"));
            }
            if !sa.selector.is_empty() {
                parts.push(
                    c("serviceAccounts.selector")
                        .selector(&sa.selector)?
                        .map_labels(&|k| format!("pcsa.{k}")),
                );
            }
            if !sa.names.is_empty() {
                parts.push(Selector::In(
                    SERVICE_ACCOUNT_LABEL.into(),
                    sa.names.iter().cloned().collect::<BTreeSet<_>>(),
                ));
            }
        }
        if !e.selector.is_empty() {
            parts.push(c("selector").selector(&e.selector)?);
        }
        let combined = Selector::and(parts);
        let scoped = !e.selector.is_empty()
            || !e.not_selector.is_empty()
            || !e.namespace_selector.is_empty()
            || e.service_accounts
                .as_ref()
                .is_some_and(|s| !s.selector.is_empty() || !s.names.is_empty());
        let selector = match ns_sel {
            Some(nss) if scoped => Selector::and([nss, combined]).to_string(),
            _ if combined == Selector::All => String::new(),
            _ => combined.to_string(),
        };
        let not_selector = if e.not_selector.is_empty() {
            String::new()
        } else {
            c("notSelector").selector(&e.not_selector)?.to_string()
        };
        Ok(EntityRule {
            nets: self.nets(&format!("{field}.nets"), &e.nets)?,
            selector,
            namespace_selector: e.namespace_selector.clone(),
            ports: c("ports").ports(&format!("{field}.ports"), &e.ports)?,
            service_account_names: e
                .service_accounts
                .as_ref()
                .map(|s| s.names.clone())
                .unwrap_or_default(),
            service_account_selector: e
                .service_accounts
                .as_ref()
                .map(|s| s.selector.clone())
                .unwrap_or_default(),
            service: e
                .services
                .as_ref()
                .filter(|s| !s.name.is_empty())
                .map(|s| ServiceMatch {
                    name: s.name.clone(),
                    namespace: s.namespace.clone(),
                }),
            not_nets: self.nets(&format!("{field}.notNets"), &e.not_nets)?,
            not_selector,
            not_ports: c("notPorts").ports(&format!("{field}.notPorts"), &e.not_ports)?,
        })
    }
}

#[cfg(test)]
mod tests;
