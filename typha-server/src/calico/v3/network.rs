//! Specs of the network around the endpoints: network sets, IP pools, IPAM blocks and their
//! affinities, nodes, and the cluster's information.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::bgp::AsNumber;
use super::strmap::StrMap;

/// NetworkSet / GlobalNetworkSet spec.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct NetworkSetSpec {
    /// CIDRs.
    pub nets: Vec<String>,
}

/// IPPool spec. An unset mode is left out when written, as Calico's API omits it (Calico
/// v3.32's CRD refuses an empty one).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct IpPoolSpec {
    /// CIDR.
    pub cidr: String,
    /// `Always`, `CrossSubnet` or `Never` (default).
    #[serde(rename = "ipipMode", skip_serializing_if = "String::is_empty")]
    pub ipip_mode: String,
    /// `Always`, `CrossSubnet` or `Never` (default).
    #[serde(rename = "vxlanMode", skip_serializing_if = "String::is_empty")]
    pub vxlan_mode: String,
    /// Masquerade outgoing traffic.
    pub nat_outgoing: bool,
    /// No new allocations.
    pub disabled: bool,
    /// Not exported over BGP.
    #[serde(rename = "disableBGPExport")]
    pub disable_bgp_export: bool,
    /// Block size.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub block_size: Option<u8>,
}

/// IPAMBlock spec: libcalico-go's `AllocationBlock` as the CRD holds it. `None` where the
/// stored value had `null`, so it is sent on as it was.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct IpamBlockSpec {
    /// CIDR.
    pub cidr: String,
    /// `host:<node>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub affinity: Option<String>,
    /// When the affinity was claimed (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub affinity_claim_time: Option<String>,
    /// One entry per address: the attribute index when allocated.
    pub allocations: Option<Vec<Option<u32>>>,
    /// Free ordinals, in the order they are handed out.
    pub unallocated: Option<Vec<u32>>,
    /// Who holds each allocation.
    pub attributes: Option<Vec<AllocationAttributeSpec>>,
    /// Bumped on every change.
    pub sequence_number: u64,
    /// Sequence number at each ordinal's allocation.
    pub sequence_number_for_allocation: Option<BTreeMap<String, u64>>,
    /// Being deleted.
    pub deleted: bool,
}

impl IpamBlockSpec {
    /// The block as Calico's IPAM would have written it: what a manifest leaves out beside
    /// the allocations (the free ordinals, an attribute for each index used, the per-ordinal
    /// sequence numbers) filled in. Both datastore writers store this.
    pub fn as_written(&self) -> IpamBlockSpec {
        let allocations = self.allocations.clone().unwrap_or_default();
        let unallocated = self.unallocated.clone().unwrap_or_else(|| {
            (0u32..)
                .zip(&allocations)
                .filter(|(_, a)| a.is_none())
                .map(|(i, _)| i)
                .collect()
        });
        let attributes = self.attributes.clone().unwrap_or_else(|| {
            let used = allocations.iter().flatten().max().map_or(0, |m| m + 1);
            (0..used)
                .map(|_| AllocationAttributeSpec::default())
                .collect()
        });
        IpamBlockSpec {
            allocations: Some(allocations),
            unallocated: Some(unallocated),
            attributes: Some(attributes),
            sequence_number_for_allocation: Some(
                self.sequence_number_for_allocation
                    .clone()
                    .unwrap_or_default(),
            ),
            ..self.clone()
        }
    }
}

/// One allocation's owner (`AllocationAttribute`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct AllocationAttributeSpec {
    /// The IPAM handle.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handle_id: Option<String>,
    /// The active owner's attributes.
    #[serde(skip_serializing_if = "StrMap::is_empty")]
    pub secondary: StrMap,
    /// A previous or coming owner's attributes.
    #[serde(
        rename = "alternateOwnerAttrs",
        skip_serializing_if = "StrMap::is_empty"
    )]
    pub alternate_owner_attrs: StrMap,
}

/// BlockAffinity spec.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct BlockAffinitySpec {
    /// `confirmed`, `pending`, `pendingDeletion`.
    pub state: String,
    /// Node.
    pub node: String,
    /// Block CIDR.
    pub cidr: String,
    /// Being deleted (`"true"`/`"false"` in Calico's CRD, or a bool).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deleted: Option<serde_json::Value>,
}

/// Node BGP settings.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct NodeBgpSpec {
    /// IPv4 address with prefix (`10.0.0.5/24`).
    #[serde(rename = "ipv4Address")]
    pub ipv4_address: String,
    /// IPv6 address with prefix.
    #[serde(rename = "ipv6Address")]
    pub ipv6_address: String,
    /// IP-in-IP tunnel address.
    #[serde(rename = "ipv4IPIPTunnelAddr")]
    pub ipv4_ipip_tunnel_addr: String,
    /// AS number (a number, or a string Calico's `numorstring.ASNumber` reads: `"64512"`,
    /// `"1.10"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub as_number: Option<AsNumber>,
    /// Route reflector cluster ID (an IPv4 address), when the node is a route reflector.
    #[serde(
        rename = "routeReflectorClusterID",
        skip_serializing_if = "String::is_empty"
    )]
    pub route_reflector_cluster_id: String,
}

/// A node address.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeAddressSpec {
    /// Address (may carry a prefix).
    pub address: String,
    /// `InternalIP`, `ExternalIP`, `CalicoNodeIP`.
    #[serde(rename = "type")]
    pub address_type: String,
}

/// Node spec, and (not part of the spec in Calico's API, but carried with it here) the
/// node's status, which [`Resource`](super::Resource) reads from and writes to `status`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct NodeSpec {
    /// BGP settings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bgp: Option<NodeBgpSpec>,
    /// VXLAN tunnel address.
    #[serde(
        rename = "ipv4VXLANTunnelAddr",
        skip_serializing_if = "String::is_empty"
    )]
    pub ipv4_vxlan_tunnel_addr: String,
    /// VXLAN tunnel MAC.
    #[serde(
        rename = "vxlanTunnelMACAddr",
        skip_serializing_if = "String::is_empty"
    )]
    pub vxlan_tunnel_mac_addr: String,
    /// IPv6 VXLAN tunnel address.
    #[serde(
        rename = "ipv6VXLANTunnelAddr",
        skip_serializing_if = "String::is_empty"
    )]
    pub ipv6_vxlan_tunnel_addr: String,
    /// IPv6 VXLAN tunnel MAC.
    #[serde(
        rename = "vxlanTunnelMACAddrV6",
        skip_serializing_if = "String::is_empty"
    )]
    pub vxlan_tunnel_mac_addr_v6: String,
    /// Orchestrator references.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub orch_refs: Vec<OrchRefSpec>,
    /// WireGuard interface addresses.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wireguard: Option<NodeWireguardSpec>,
    /// Node addresses.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<NodeAddressSpec>,
    /// Host interfaces and their addresses.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<NodeInterfaceSpec>,
    /// The resource's `status` (not part of `spec`).
    #[serde(skip)]
    pub status: NodeStatusSpec,
}

/// An orchestrator reference.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct OrchRefSpec {
    /// The node's name in the orchestrator.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub node_name: String,
    /// The orchestrator (`k8s`).
    pub orchestrator: String,
}

/// WireGuard interface addresses.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeWireguardSpec {
    /// IPv4 interface address.
    #[serde(
        rename = "interfaceIPv4Address",
        skip_serializing_if = "String::is_empty"
    )]
    pub interface_ipv4_address: String,
    /// IPv6 interface address.
    #[serde(
        rename = "interfaceIPv6Address",
        skip_serializing_if = "String::is_empty"
    )]
    pub interface_ipv6_address: String,
}

/// A host interface.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeInterfaceSpec {
    /// Interface name.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Its addresses.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<String>,
}

/// Node status.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct NodeStatusSpec {
    /// WireGuard public key (IPv4).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub wireguard_public_key: String,
    /// WireGuard public key (IPv6).
    #[serde(
        rename = "wireguardPublicKeyV6",
        skip_serializing_if = "String::is_empty"
    )]
    pub wireguard_public_key_v6: String,
    /// The Kubernetes node's pod CIDRs (Kubernetes datastore).
    #[serde(rename = "podCIDRs", skip_serializing_if = "Vec::is_empty")]
    pub pod_cidrs: Vec<String>,
    /// Not part of the resource: set by the Kubernetes datastore with `USE_POD_CIDR` (host-local
    /// IPAM), where the pod CIDRs are this node's IPAM blocks, as Calico's felix syncer then
    /// makes them.
    #[serde(skip)]
    pub pod_cidr_blocks: bool,
}

/// ClusterInformation spec.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ClusterInformationSpec {
    /// Cluster GUID.
    #[serde(rename = "clusterGUID")]
    pub cluster_guid: String,
    /// Cluster type.
    pub cluster_type: String,
    /// Calico version.
    pub calico_version: String,
    /// Whether the datastore is ready for use.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub datastore_ready: Option<bool>,
}
