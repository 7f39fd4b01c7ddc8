//! What belongs to a host or the cluster: the v3 Node (libcalico-go's `internalapi.Node`),
//! its WireGuard key (`model.Wireguard`, node.go), the host IP (`bird_ip`), and Felix's
//! configuration and ready flag, which libcalico-go sends as raw strings rather than JSON
//! (`rawString`, `rawBool`, `rawIP` in keys.go).

use std::net::IpAddr;

use ipnet::IpNet;
use typha_protocol::model::Node;

use super::json::Json;
use super::path::{go_cidr, go_ip};
use super::resource::v3_object;

/// `internalapi.Node` from our Node value: metadata (name, labels), `spec.bgp` (asNumber,
/// ipv4Address, ipv6Address, ipv4IPIPTunnelAddr), `spec.ipv4VXLANTunnelAddr`,
/// `spec.vxlanTunnelMACAddr`, `status.wireguardPublicKey`. Our model does not keep the rest
/// of the Node (addresses, orchRefs, routeReflectorClusterID, IPv6 VXLAN, WireGuard interface
/// addresses, podCIDRs), so it is absent here. Go writes `status` as `{}` when empty (a
/// struct is never left out), and leaves `bgp` out when nil.
pub(super) fn v3_node(name: &str, n: &Node) -> Vec<u8> {
    v3_object("Node", name, None, &n.labels, |o| {
        o.field("spec").object(|s| {
            let has_bgp = n.as_number.is_some()
                || n.ipv4_address.is_some()
                || n.ipv6_address.is_some()
                || n.ipv4_ipip_tunnel_addr.is_some();
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
                });
            }
            if let Some(a) = n.ipv4_vxlan_tunnel_addr {
                s.str("ipv4VXLANTunnelAddr", &go_ip(IpAddr::V4(a)));
            }
            if let Some(m) = n.vxlan_tunnel_mac {
                s.str("vxlanTunnelMACAddr", &m.to_string());
            }
        });
        o.field("status").object(|s| {
            s.str_ne("wireguardPublicKey", &n.wireguard_public_key);
        });
    })
}

/// `model.Wireguard` for a node with a public key: `{"publicKey"}` (every field `omitempty`;
/// our model has no WireGuard interface addresses). `None` when the node has no key, where
/// Calico sends the key as a deletion.
pub(super) fn wireguard(n: &Node) -> Option<Vec<u8>> {
    if n.wireguard_public_key.is_empty() {
        return None;
    }
    let mut j = Json::new();
    j.object(|o| o.str("publicKey", &n.wireguard_public_key));
    Some(j.into_bytes())
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
