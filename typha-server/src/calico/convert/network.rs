//! The network around the endpoints: network sets, IP pools, IPAM blocks and their affinities,
//! and nodes (their host IPs and tunnel addresses).

use std::net::IpAddr;

use ipnet::IpNet;
use typha_protocol::model::{
    AllocationAttribute, AllocationTable, Block, BlockKey, EncapMode, HostConfigKey, HostIpKey,
    IpPool, IpPoolKey, Key, Mac, NetworkSet, NetworkSetKey, Node, NodeAddress, NodeDetail,
    NodeInterface, NodeMeta, OrchRef, Resource as ResourceValue, ResourceKey, ResourceKind, Value,
};
use typha_protocol::selector::NAMESPACE_LABEL;

use super::context::{ConvertError, Cx, opt};
use super::v3check::{self, Problem};
use crate::calico::libcalico::{KUBE_LABELS, go_string_map};
use crate::calico::v3::{
    BlockAffinitySpec, IpPoolSpec, IpamBlockSpec, NetworkSetSpec, NodeBgpSpec, NodeSpec, ObjectMeta,
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
            nets: cx.nets("spec.nets", &s.nets),
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
            nets: cx.nets("spec.nets", &s.nets),
            labels: meta.labels.to_btree(),
            profile_ids: vec![],
        }),
    )])
}

/// An IP pool. Calico reads its CIDR as a CIDR only (a bare address is refused), and an
/// encapsulation mode it does not know as Never.
pub(super) fn ip_pool(cx: &Cx<'_>, s: &IpPoolSpec) -> Result<Vec<(Key, Value)>, ConvertError> {
    let cidr = s
        .cidr
        .parse::<IpNet>()
        .map_err(|_| {
            cx.at("spec.cidr")
                .err(format!("{:?} is not a CIDR", s.cidr))
        })?
        .trunc();
    let mode = |field: &str, m: &str| match m {
        "" | "Never" => EncapMode::Never,
        "Always" => EncapMode::Always,
        "CrossSubnet" => EncapMode::CrossSubnet,
        other => {
            cx.at(field).skip(format!(
                "{other:?} is not one of Always, CrossSubnet, Never; read as Never, as Calico reads it"
            ));
            EncapMode::Never
        }
    };
    Ok(vec![(
        Key::IpPool(IpPoolKey { cidr }),
        Value::IpPool(IpPool {
            cidr,
            ipip_mode: mode("spec.ipipMode", &s.ipip_mode),
            vxlan_mode: mode("spec.vxlanMode", &s.vxlan_mode),
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

/// A node's host IP, its tunnel addresses as host config, and the node itself. As in Calico's
/// felix node processor, each field is read on its own: one that does not parse leaves out
/// only what derives from it (its config key; the host IP falls back to the node's first
/// internal, then external, IPv4 address), and the MACs are passed on as written. A node that
/// fails Calico's v3 validator is still sent, marked so that Calico's clients are sent its v3
/// Node as a deletion, as Calico's Typha sends it (`NodeDetail::invalid_as_v3`).
pub(super) fn node(
    cx: &Cx<'_>,
    meta: &ObjectMeta,
    s: &NodeSpec,
) -> Result<Vec<(Key, Value)>, ConvertError> {
    let name = &meta.name;
    let bgp = s.bgp.clone().unwrap_or_default();
    let v3_problems = v3_node_problems(meta, s);
    // Where a value Calico's validator refuses is read leniently, it is noted: Calico's API
    // refuses the node when it is written.
    let note = |field: &str, reason: &str| cx.at(field).skip(reason.to_owned());
    for (field, reason) in &v3_problems {
        note(
            field,
            &format!("{reason}; Calico's clients are sent no v3 Node"),
        );
    }
    // The BGP address: any family for the host IP (Calico's processor takes what parses), the
    // node's IPv4 and IPv6 addresses only of their family.
    let bgp_v4 = opt(&bgp.ipv4_address).and_then(|a| {
        a.parse::<IpNet>()
            .ok()
            .or_else(|| a.parse::<IpAddr>().ok().map(IpNet::from))
    });
    let ipv4_address = match bgp_v4 {
        Some(IpNet::V4(n)) => Some(n),
        _ => None,
    };
    let ipv6_address = match opt(&bgp.ipv6_address).and_then(|a| cx.iface_net(a).ok()) {
        Some(IpNet::V6(n)) => Some(n),
        _ => None,
    };
    // Tunnel addresses: Calico sends what parses as an address, of either family, as the
    // config value; our node carries the IPv4 ones.
    let tunnel = |a: &str| opt(a).and_then(|a| a.parse::<IpAddr>().ok());
    let ipip = tunnel(&bgp.ipv4_ipip_tunnel_addr);
    let vxlan = tunnel(&s.ipv4_vxlan_tunnel_addr);
    let vxlan_v6 = tunnel(&s.ipv6_vxlan_tunnel_addr);
    let v4_of = |a: Option<IpAddr>| match a {
        Some(IpAddr::V4(a)) => Some(a),
        _ => None,
    };
    let vxlan_mac = opt(&s.vxlan_tunnel_mac_addr).and_then(|m| m.parse::<Mac>().ok());
    // The host IP agents route to: the BGP address, else the first internal, then
    // external, IPv4 address.
    let host_ip = bgp_v4.map(|n| n.addr()).or_else(|| {
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
    if let Some(m) = opt(&s.vxlan_tunnel_mac_addr) {
        out.push(host_config("VXLANTunnelMACAddr", m.to_owned()));
    }
    if let Some(a) = vxlan_v6 {
        out.push(host_config("IPv6VXLANTunnelAddr", a.to_string()));
    }
    if let Some(m) = opt(&s.vxlan_tunnel_mac_addr_v6) {
        out.push(host_config("VXLANTunnelMACAddrV6", m.to_owned()));
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
        meta: NodeMeta {
            invalid_as_v3: !v3_problems.is_empty(),
            ..node_meta(meta)
        },
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
            ipv4_ipip_tunnel_addr: v4_of(ipip),
            ipv4_vxlan_tunnel_addr: v4_of(vxlan),
            vxlan_tunnel_mac: vxlan_mac,
            wireguard_public_key: s.status.wireguard_public_key.clone(),
            as_number: bgp.as_number.map(|a| a.0),
            labels: meta.labels.to_btree(),
            detail,
        }),
    ));
    Ok(out)
}

/// What Calico's v3 validator refuses in a node (so Calico's Typha sends no v3 Node for it):
/// its metadata, an empty `bgp`, addresses not of their family, tunnel and route reflector
/// addresses that are not IPv4 / IPv6 addresses, MACs, WireGuard addresses and keys.
fn v3_node_problems(meta: &ObjectMeta, s: &NodeSpec) -> Vec<Problem> {
    let mut out: Vec<Problem> = v3check::object_meta(meta).into_iter().collect();
    let mut check = |field: &str, v: &str, ok: fn(&str) -> bool, what: &str| {
        if !v.is_empty() && !ok(v) {
            out.push((field.to_owned(), format!("{v:?} is not {what}")));
        }
    };
    let v4_cidr = |v: &str| v3check::cidr_or_ip(v).is_some_and(|a| a.is_ipv4());
    let v6_cidr = |v: &str| v3check::cidr_or_ip(v).is_some_and(|a| a.is_ipv6());
    if let Some(b) = &s.bgp {
        check(
            "spec.bgp.ipv4Address",
            &b.ipv4_address,
            v4_cidr,
            "an IPv4 CIDR or address",
        );
        check(
            "spec.bgp.ipv6Address",
            &b.ipv6_address,
            v6_cidr,
            "an IPv6 CIDR or address",
        );
        check(
            "spec.bgp.ipv4IPIPTunnelAddr",
            &b.ipv4_ipip_tunnel_addr,
            v3check::ipv4,
            "an IPv4 address",
        );
        check(
            "spec.bgp.routeReflectorClusterID",
            &b.route_reflector_cluster_id,
            v3check::ipv4,
            "an IPv4 address",
        );
    }
    check(
        "spec.ipv4VXLANTunnelAddr",
        &s.ipv4_vxlan_tunnel_addr,
        v3check::ipv4,
        "an IPv4 address",
    );
    check(
        "spec.ipv6VXLANTunnelAddr",
        &s.ipv6_vxlan_tunnel_addr,
        v3check::ipv6,
        "an IPv6 address",
    );
    check(
        "spec.vxlanTunnelMACAddr",
        &s.vxlan_tunnel_mac_addr,
        v3check::mac,
        "a MAC address",
    );
    check(
        "spec.vxlanTunnelMACAddrV6",
        &s.vxlan_tunnel_mac_addr_v6,
        v3check::mac,
        "a MAC address",
    );
    if let Some(w) = &s.wireguard {
        check(
            "spec.wireguard.interfaceIPv4Address",
            &w.interface_ipv4_address,
            v3check::ipv4,
            "an IPv4 address",
        );
        check(
            "spec.wireguard.interfaceIPv6Address",
            &w.interface_ipv6_address,
            v3check::ipv6,
            "an IPv6 address",
        );
    }
    check(
        "status.wireguardPublicKey",
        &s.status.wireguard_public_key,
        v3check::wireguard_key,
        "a WireGuard key",
    );
    check(
        "status.wireguardPublicKeyV6",
        &s.status.wireguard_public_key_v6,
        v3check::wireguard_key,
        "a WireGuard key",
    );
    if s.bgp.as_ref().is_some_and(|b| *b == NodeBgpSpec::default()) {
        out.push(("spec.bgp".into(), "present but empty".into()));
    }
    out
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
        invalid_as_v3: false,
    }
}
