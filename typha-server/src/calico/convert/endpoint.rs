//! Workload endpoints (pods and other workload interfaces) and host endpoints.

use std::net::IpAddr;

use ipnet::IpNet;
use typha_protocol::model::{
    EndpointPort, HostEndpoint, HostEndpointKey, IpNat, Key, Labels, Value, WorkloadEndpoint,
    WorkloadEndpointKey,
};
use typha_protocol::selector::NAMESPACE_LABEL;

use super::context::{ConvertError, Cx, ORCHESTRATOR_LABEL, SERVICE_ACCOUNT_LABEL, opt};
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

/// `named_only` for workload endpoints, whose unnamed ports Calico's processor drops
/// (`docs/calico-conversion.md`).
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
