//! The network around the endpoints: network sets, IP pools, IPAM blocks and their affinities,
//! and nodes (their host IPs and tunnel addresses).

use std::net::{IpAddr, Ipv4Addr};

use ipnet::IpNet;
use typha_protocol::model::{
    AllocationAttribute, AllocationTable, Block, BlockKey, EncapMode, HostConfigKey, HostIpKey,
    IpPool, IpPoolKey, Key, NetworkSet, NetworkSetKey, Node, NodeAddress, NodeDetail,
    NodeInterface, NodeMeta, OrchRef, Resource as ResourceValue, ResourceKey, ResourceKind, Value,
};
use typha_protocol::selector::NAMESPACE_LABEL;

use super::context::{ConvertError, Cx, opt};
use crate::calico::libcalico::{KUBE_LABELS, go_string_map};
use crate::calico::v3::{
    BlockAffinitySpec, IpPoolSpec, IpamBlockSpec, NetworkSetSpec, NodeSpec, ObjectMeta,
};

/// A namespaced network set: selectable by its namespace label, and a member of the
/// namespace's profile, like the namespace's workloads.
pub(super) fn network_set(
    cx: &Cx<'_>,
    meta: &ObjectMeta,
    ns: &str,
    s: &NetworkSetSpec,
) -> Result<Vec<(Key, Value)>, ConvertError> {
    let mut labels = meta.labels.to_btree();
    labels.insert(NAMESPACE_LABEL.into(), ns.to_owned());
    Ok(vec![(
        Key::NetworkSet(NetworkSetKey {
            name: format!("{ns}/{}", meta.name),
        }),
        Value::NetworkSet(NetworkSet {
            nets: cx.nets("spec.nets", &s.nets)?,
            labels,
            profile_ids: vec![format!("kns.{ns}")],
        }),
    )])
}

pub(super) fn global_network_set(
    cx: &Cx<'_>,
    meta: &ObjectMeta,
    s: &NetworkSetSpec,
) -> Result<Vec<(Key, Value)>, ConvertError> {
    Ok(vec![(
        Key::NetworkSet(NetworkSetKey {
            name: meta.name.clone(),
        }),
        Value::NetworkSet(NetworkSet {
            nets: cx.nets("spec.nets", &s.nets)?,
            labels: meta.labels.to_btree(),
            profile_ids: vec![],
        }),
    )])
}

pub(super) fn ip_pool(cx: &Cx<'_>, s: &IpPoolSpec) -> Result<Vec<(Key, Value)>, ConvertError> {
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

pub(super) fn ipam_block(
    cx: &Cx<'_>,
    s: &IpamBlockSpec,
) -> Result<Vec<(Key, Value)>, ConvertError> {
    let cidr = cx.at("spec.cidr").net(&s.cidr)?;
    let allocated = s
        .allocations
        .iter()
        .flatten()
        .filter(|a| a.is_some())
        .count();
    let table = AllocationTable {
        affinity_claim_time: s.affinity_claim_time.clone(),
        allocations: s.allocations.clone(),
        unallocated: s.unallocated.clone(),
        attributes: s.attributes.as_ref().map(|list| {
            list.iter()
                .map(|a| AllocationAttribute {
                    handle_id: a.handle_id.clone(),
                    secondary: a.secondary.to_btree(),
                    alternate: a.alternate_owner_attrs.to_btree(),
                })
                .collect()
        }),
        sequence_number: s.sequence_number,
        sequence_number_for_allocation: s.sequence_number_for_allocation.clone(),
    };
    Ok(vec![(
        Key::Block(BlockKey { cidr }),
        Value::Block(Block {
            cidr,
            affinity: s.affinity.clone().filter(|a| !a.is_empty()),
            allocated: u32::try_from(allocated).unwrap_or(u32::MAX),
            deleted: s.deleted,
            table,
        }),
    )])
}

/// Passed through as a raw resource: the spec as JSON, uninterpreted.
pub(super) fn block_affinity(meta: &ObjectMeta, s: &BlockAffinitySpec) -> Vec<(Key, Value)> {
    vec![(
        Key::Resource(ResourceKey {
            kind: ResourceKind::BlockAffinity,
            namespace: None,
            name: meta.name.clone(),
        }),
        Value::Resource(ResourceValue {
            labels: meta.labels.to_btree(),
            spec_json: serde_json::to_string(s).unwrap_or_default(),
            detail: super::raw::detail(meta),
        }),
    )]
}

/// A node's host IP, its tunnel addresses as host config, and the node itself.
pub(super) fn node(
    cx: &Cx<'_>,
    meta: &ObjectMeta,
    s: &NodeSpec,
) -> Result<Vec<(Key, Value)>, ConvertError> {
    let name = &meta.name;
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
    if let Some(a) = opt(&s.ipv6_vxlan_tunnel_addr) {
        match cx.at("spec.ipv6VXLANTunnelAddr").ip(a)? {
            IpAddr::V6(a) => out.push(host_config("IPv6VXLANTunnelAddr", a.to_string())),
            IpAddr::V4(_) => return Err(cx.at("spec.ipv6VXLANTunnelAddr").err("not IPv6")),
        }
    }
    if let Some(m) = opt(&s.vxlan_tunnel_mac_addr_v6) {
        let m = cx.at("spec.vxlanTunnelMACAddrV6").mac(m)?;
        out.push(host_config("VXLANTunnelMACAddrV6", m.to_string()));
    }
    let detail = NodeDetail {
        addresses: s
            .addresses
            .iter()
            .map(|a| NodeAddress {
                address: a.address.clone(),
                kind: a.address_type.clone(),
            })
            .collect(),
        route_reflector_cluster_id: bgp.route_reflector_cluster_id.clone(),
        ipv6_vxlan_tunnel_addr: s.ipv6_vxlan_tunnel_addr.clone(),
        vxlan_tunnel_mac_v6: s.vxlan_tunnel_mac_addr_v6.clone(),
        orch_refs: s
            .orch_refs
            .iter()
            .map(|r| OrchRef {
                node_name: r.node_name.clone(),
                orchestrator: r.orchestrator.clone(),
            })
            .collect(),
        wireguard: s.wireguard.as_ref().map(|w| {
            (
                w.interface_ipv4_address.clone(),
                w.interface_ipv6_address.clone(),
            )
        }),
        interfaces: s
            .interfaces
            .iter()
            .map(|i| NodeInterface {
                name: i.name.clone(),
                addresses: i.addresses.clone(),
            })
            .collect(),
        wireguard_public_key_v6: s.status.wireguard_public_key_v6.clone(),
        pod_cidrs: s.status.pod_cidrs.clone(),
        meta: node_meta(meta),
    };
    if s.status.pod_cidr_blocks {
        // Host-local IPAM: each pod CIDR is a block affine to this node, with no allocations
        // (Calico's felix node processor with K8sUsePodCIDR). One that does not parse is
        // skipped, as Calico skips it.
        for cidr in &s.status.pod_cidrs {
            if let Ok(net) = cidr.parse::<IpNet>() {
                let net = net.trunc();
                out.push((
                    Key::Block(BlockKey { cidr: net }),
                    Value::Block(Block {
                        cidr: net,
                        affinity: Some(format!("host:{name}")),
                        allocated: 0,
                        deleted: false,
                        table: AllocationTable::default(),
                    }),
                ));
            }
        }
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
            wireguard_public_key: s.status.wireguard_public_key.clone(),
            as_number: bgp.as_number,
            labels: meta.labels.to_btree(),
            detail,
        }),
    ));
    Ok(out)
}

/// A node's metadata beyond name and labels, as Calico's syncers send it: uid, creation time
/// and annotations as the backend read them. A `projectcalico.org/kube-labels` annotation that
/// holds the node's own labels, as Calico's Kubernetes driver writes it on every node, is kept
/// as a flag rather than as a second copy of the labels.
fn node_meta(meta: &ObjectMeta) -> NodeMeta {
    let labels = meta.labels.to_btree();
    let mut annotations = meta.annotations.to_btree();
    let own = go_string_map((!labels.is_empty()).then_some(&labels));
    let kube_labels = annotations.get(KUBE_LABELS) == Some(&own);
    if kube_labels {
        annotations.remove(KUBE_LABELS);
    }
    NodeMeta {
        uid: meta.uid.clone(),
        creation_timestamp: meta.creation_timestamp.clone().unwrap_or_default(),
        annotations,
        kube_labels,
    }
}
