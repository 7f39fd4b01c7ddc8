//! Specs of the network around the endpoints: network sets, IP pools, IPAM blocks and their
//! affinities, nodes, and the cluster's information.

use serde::{Deserialize, Serialize};

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

/// IPAMBlock spec.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct IpamBlockSpec {
    /// CIDR.
    pub cidr: String,
    /// `host:<node>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub affinity: Option<String>,
    /// One entry per address: the attribute index when allocated.
    pub allocations: Vec<Option<u32>>,
    /// Being deleted.
    pub deleted: bool,
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
    /// AS number.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub as_number: Option<u32>,
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

/// Node spec.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct NodeSpec {
    /// BGP settings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bgp: Option<NodeBgpSpec>,
    /// VXLAN tunnel address.
    #[serde(rename = "ipv4VXLANTunnelAddr")]
    pub ipv4_vxlan_tunnel_addr: String,
    /// VXLAN tunnel MAC.
    #[serde(rename = "vxlanTunnelMACAddr")]
    pub vxlan_tunnel_mac_addr: String,
    /// Node addresses.
    pub addresses: Vec<NodeAddressSpec>,
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
