//! What belongs to a host or the cluster: the v3 Node (libcalico-go's `internalapi.Node`),
//! its WireGuard key (`model.Wireguard`, node.go), the host IP (`bird_ip`), and Felix's
//! configuration and ready flag, which libcalico-go sends as raw strings rather than JSON
//! (`rawString`, `rawBool`, `rawIP` in keys.go).

use std::net::IpAddr;

use ipnet::IpNet;
use typha_protocol::model::{Node, ResourceDetail};

use super::json::{Escape, Json};
use super::path::{go_cidr, go_ip};
use super::resource::v3_object_with;

/// The annotation in which Calico's Kubernetes driver gives a v3 Node its Kubernetes labels.
pub const KUBE_LABELS: &str = "projectcalico.org/kube-labels";

/// A `map[string]string` as libcalico-go's `json.Marshal` writes it (json-iterator: keys
/// sorted, `<`, `>` and `&` escaped), `null` for a nil map (`None`): the text of a node's
/// [`KUBE_LABELS`] annotation.
pub fn go_string_map(m: Option<&typha_protocol::model::Labels>) -> String {
    let mut j = Json::new();
    match m {
        Some(m) => j.string_map(m, Escape::Jsoniter),
        None => j.null(),
    }
    String::from_utf8(j.into_bytes()).unwrap_or_default()
}

/// `internalapi.Node` from our Node value, fields in Go's order: metadata (name, labels),
/// `spec` (`bgp` {asNumber, ipv4Address, ipv6Address, ipv4IPIPTunnelAddr,
/// routeReflectorClusterID}, ipv4VXLANTunnelAddr, vxlanTunnelMACAddr, ipv6VXLANTunnelAddr,
/// vxlanTunnelMACAddrV6, orchRefs, wireguard, addresses, interfaces), `status`
/// (wireguardPublicKey, wireguardPublicKeyV6, podCIDRs). Every field is `omitempty`; Go writes
/// `status` as `{}` when empty (a struct is never left out), and leaves `bgp` and `wireguard`
/// out when nil. The metadata: uid, creation time, labels and annotations, with
/// `projectcalico.org/kube-labels` where the node has it ([`NodeMeta::kube_labels`]).
pub(super) fn v3_node(name: &str, n: &Node) -> Vec<u8> {
    let d = &n.detail;
    let mut meta = ResourceDetail {
        generation: 0,
        uid: d.meta.uid.clone(),
        creation_timestamp: d.meta.creation_timestamp.clone(),
        annotations: d.meta.annotations.clone(),
    };
    if d.meta.kube_labels {
        let labels = (!n.labels.is_empty()).then_some(&n.labels);
        meta.annotations
            .insert(KUBE_LABELS.to_owned(), go_string_map(labels));
    }
    v3_object_with("Node", name, None, &n.labels, &meta, |o| {
        o.field("spec").object(|s| {
            let has_bgp = n.as_number.is_some()
                || n.ipv4_address.is_some()
                || n.ipv6_address.is_some()
                || n.ipv4_ipip_tunnel_addr.is_some()
                || !d.route_reflector_cluster_id.is_empty();
            if has_bgp {
                s.field("bgp").object(|b| {
                    if let Some(asn) = n.as_number {
                        b.field("asNumber").uint(u64::from(asn));
                    }
                    if let Some(a) = n.ipv4_address {
                        b.str("ipv4Address", &go_cidr(&IpNet::V4(a)));
                    }
                    if let Some(a) = n.ipv6_address {
                        b.str("ipv6Address", &go_cidr(&IpNet::V6(a)));
                    }
                    if let Some(a) = n.ipv4_ipip_tunnel_addr {
                        b.str("ipv4IPIPTunnelAddr", &go_ip(IpAddr::V4(a)));
                    }
                    b.str_ne("routeReflectorClusterID", &d.route_reflector_cluster_id);
                });
            }
            if let Some(a) = n.ipv4_vxlan_tunnel_addr {
                s.str("ipv4VXLANTunnelAddr", &go_ip(IpAddr::V4(a)));
            }
            if let Some(m) = n.vxlan_tunnel_mac {
                s.str("vxlanTunnelMACAddr", &m.to_string());
            }
            s.str_ne("ipv6VXLANTunnelAddr", &d.ipv6_vxlan_tunnel_addr);
            s.str_ne("vxlanTunnelMACAddrV6", &d.vxlan_tunnel_mac_v6);
            if !d.orch_refs.is_empty() {
                s.field("orchRefs").array(&d.orch_refs, |j, r| {
                    j.object(|r_o| {
                        r_o.str_ne("nodeName", &r.node_name);
                        r_o.str("orchestrator", &r.orchestrator);
                    });
                });
            }
            if let Some((v4, v6)) = &d.wireguard {
                s.field("wireguard").object(|w| {
                    w.str_ne("interfaceIPv4Address", v4);
                    w.str_ne("interfaceIPv6Address", v6);
                });
            }
            if !d.addresses.is_empty() {
                s.field("addresses").array(&d.addresses, |j, a| {
                    j.object(|a_o| {
                        a_o.str("address", &a.address);
                        a_o.str_ne("type", &a.kind);
                    });
                });
            }
            if !d.interfaces.is_empty() {
                s.field("interfaces").array(&d.interfaces, |j, i| {
                    j.object(|i_o| {
                        i_o.str_ne("name", &i.name);
                        i_o.strings_ne("addresses", &i.addresses);
                    });
                });
            }
        });
        o.field("status").object(|s| {
            s.str_ne("wireguardPublicKey", &n.wireguard_public_key);
            s.str_ne("wireguardPublicKeyV6", &d.wireguard_public_key_v6);
            s.strings_ne("podCIDRs", &d.pod_cidrs);
        });
    })
}

/// `model.Wireguard` (interfaceIPv4Addr, publicKey, interfaceIPv6Addr, publicKeyV6, all
/// `omitempty`) for a node with any of them, as Calico's node processor builds it: interface
/// addresses that do not parse as IPs are left out. `None` when the node has none, where
/// Calico sends the key as a deletion.
pub(super) fn wireguard(n: &Node) -> Option<Vec<u8>> {
    let (v4, v6) = n
        .detail
        .wireguard
        .as_ref()
        .map(|(v4, v6)| (ip_text(v4), ip_text(v6)))
        .unwrap_or_default();
    let v6_key = &n.detail.wireguard_public_key_v6;
    if v4.is_none() && n.wireguard_public_key.is_empty() && v6.is_none() && v6_key.is_empty() {
        return None;
    }
    let mut j = Json::new();
    j.object(|o| {
        if let Some(a) = &v4 {
            o.str("interfaceIPv4Addr", a);
        }
        o.str_ne("publicKey", &n.wireguard_public_key);
        if let Some(a) = &v6 {
            o.str("interfaceIPv6Addr", a);
        }
        o.str_ne("publicKeyV6", v6_key);
    });
    Some(j.into_bytes())
}

/// An address as Go's `net.IP` writes it, `None` when it is empty or not an address.
fn ip_text(s: &str) -> Option<String> {
    s.parse::<IpAddr>().ok().map(go_ip)
}

/// `bird_ip`: the address as text (`fmt.Append` of a `*cnet.IP`).
pub(super) fn host_ip(ip: IpAddr) -> Vec<u8> {
    go_ip(ip).into_bytes()
}

/// A config value: the string itself.
pub(super) fn config(v: &str) -> Vec<u8> {
    v.as_bytes().to_vec()
}

/// The ready flag: `true` or `false`.
pub(super) fn ready(v: bool) -> Vec<u8> {
    let mut j = Json::new();
    j.bool(v);
    j.into_bytes()
}
