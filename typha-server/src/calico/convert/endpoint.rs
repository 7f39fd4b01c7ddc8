//! Workload endpoints (pods and other workload interfaces) and host endpoints.

use std::net::IpAddr;

use ipnet::IpNet;
use typha_protocol::model::{
    EndpointPort, HostEndpoint, HostEndpointKey, IpNat, Key, Labels, Value, WorkloadEndpoint,
    WorkloadEndpointKey,
};
use typha_protocol::selector::NAMESPACE_LABEL;

use super::context::{
    ConvertError, Cx, ORCHESTRATOR_LABEL, SERVICE_ACCOUNT_LABEL, given_as_number, opt,
};
use crate::calico::v3::{EndpointPortSpec, HostEndpointSpec, ObjectMeta, WorkloadEndpointSpec};

pub(super) fn workload_endpoint(
    cx: &Cx<'_>,
    meta: &ObjectMeta,
    ns: &str,
    s: &WorkloadEndpointSpec,
) -> Result<Vec<(Key, Value)>, ConvertError> {
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
        // Calico's processor skips a NAT whose addresses do not parse.
        let c = cx.at(&format!("spec.ipNATs[{i}]"));
        let (int_ip, ext_ip) = match (c.ip(&nat.internal_ip), c.ip(&nat.external_ip)) {
            (Ok(a), Ok(b)) => (a, b),
            (Err(e), _) | (_, Err(e)) => {
                c.skip(format!("{}; skipped", e.reason));
                continue;
            }
        };
        let m = IpNat { int_ip, ext_ip };
        if int_ip.is_ipv4() {
            ipv4_nat.push(m)
        } else {
            ipv6_nat.push(m)
        }
    }
    let mut labels: Labels = meta
        .labels
        .iter()
        .filter(|(k, _)| !k.starts_with("pcns.") && !k.starts_with("pcsa."))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    labels.insert(NAMESPACE_LABEL.into(), ns.to_owned());
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
        ipv4_gateway: match gateway(&cx.at("spec.ipv4Gateway"), &s.ipv4_gateway)? {
            Some(IpAddr::V4(a)) => Some(a),
            _ => None,
        },
        ipv6_gateway: match gateway(&cx.at("spec.ipv6Gateway"), &s.ipv6_gateway)? {
            Some(IpAddr::V6(a)) => Some(a),
            _ => None,
        },
        ports: endpoint_ports(cx, &s.ports, true)?,
        generate_name: meta.generate_name.clone(),
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

pub(super) fn host_endpoint(
    cx: &Cx<'_>,
    meta: &ObjectMeta,
    s: &HostEndpointSpec,
) -> Result<Vec<(Key, Value)>, ConvertError> {
    cx.require("spec.node", &s.node)?;
    let mut v4 = Vec::new();
    let mut v6 = Vec::new();
    // Calico's processor skips an expected IP that does not parse.
    for (i, a) in s.expected_ips.iter().enumerate() {
        let c = cx.at(&format!("spec.expectedIPs[{i}]"));
        match c.ip(a) {
            Ok(IpAddr::V4(a)) => v4.push(a),
            Ok(IpAddr::V6(a)) => v6.push(a),
            Err(e) => c.skip(format!("{}; skipped", e.reason)),
        }
    }
    // Calico's API refuses a host endpoint with neither; its syncers pass it on (it matches
    // no interface and no address).
    if s.interface_name.is_empty() && s.expected_ips.is_empty() {
        cx.at("spec")
            .pass("needs interfaceName or expectedIPs; passed on as Calico does");
    }
    // What Calico's validator checks on the host endpoint it sends: an interface name Linux
    // could have, or `*`, and profile names.
    if !(s.interface_name.is_empty()
        || s.interface_name == "*"
        || interface_name(&s.interface_name))
    {
        return Err(cx.at("spec.interfaceName").err(format!(
            "{:?} is not an interface name (1-15 of A-Z, a-z, 0-9, '_', '.', '-') or '*'",
            s.interface_name
        )));
    }
    for (i, p) in s.profiles.iter().enumerate() {
        if !calico_name(p) {
            return Err(cx.at(&format!("spec.profiles[{i}]")).err(format!(
                "{p:?} is not a name (1-128 of A-Z, a-z, 0-9, '_', '.', '-')"
            )));
        }
    }
    Ok(vec![(
        Key::HostEndpoint(HostEndpointKey {
            hostname: s.node.clone(),
            endpoint: meta.name.clone(),
        }),
        Value::HostEndpoint(HostEndpoint {
            name: s.interface_name.clone(),
            expected_ipv4_addrs: v4,
            expected_ipv6_addrs: v6,
            labels: meta.labels.to_btree(),
            profile_ids: s.profiles.clone(),
            ports: endpoint_ports(cx, &s.ports, false)?,
        }),
    )])
}

/// A gateway as Calico's processor reads it: an address, or a CIDR whose address is taken. One
/// of the other family (which Calico carries) has no place in our model: it is left out.
fn gateway(cx: &Cx<'_>, g: &str) -> Result<Option<IpAddr>, ConvertError> {
    let Some(g) = opt(g) else {
        return Ok(None);
    };
    let addr = match g.parse::<IpNet>() {
        Ok(n) => n.addr(),
        Err(_) => cx.ip(g)?,
    };
    let v4_field = cx.field().ends_with("ipv4Gateway");
    if addr.is_ipv4() != v4_field {
        cx.skip(format!(
            "{g:?} is of the other family; Calico carries it, our model has no place for it: left out"
        ));
    }
    Ok(Some(addr))
}

/// `named_only` for workload endpoints, whose unnamed ports Calico's processor drops
/// (`docs/calico-conversion.md`). What is left must pass Calico's validator: a name of
/// `[A-Za-z0-9_.-]` (so a host endpoint's port needs one), a port number, and protocol TCP, UDP
/// or SCTP given by name.
fn endpoint_ports(
    cx: &Cx<'_>,
    ps: &[EndpointPortSpec],
    named_only: bool,
) -> Result<Vec<EndpointPort>, ConvertError> {
    let mut out = Vec::new();
    for (i, p) in ps.iter().enumerate() {
        let c = cx.at(&format!("spec.ports[{i}]"));
        if p.name.is_empty() && named_only {
            continue;
        }
        if !calico_name(&p.name) {
            return Err(c.err(format!(
                "name {:?} is not 1-128 of A-Z, a-z, 0-9, '_', '.', '-'",
                p.name
            )));
        }
        if p.port == 0 {
            return Err(c.err("port must be 1-65535"));
        }
        let protocol = c.protocol(&p.protocol)?;
        if given_as_number(Some(&p.protocol)) || !protocol.has_ports() {
            return Err(c.err("protocol must be TCP, UDP or SCTP, by name"));
        }
        out.push(EndpointPort {
            name: p.name.clone(),
            protocol,
            port: p.port,
        });
    }
    Ok(out)
}

/// Calico's `name` rule (profile ids, endpoint port names).
fn calico_name(s: &str) -> bool {
    (1..=128).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// Calico's `interface` rule.
fn interface_name(s: &str) -> bool {
    (1..=15).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}
