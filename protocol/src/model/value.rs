//! Typed values, one per key type, mirroring Calico's felix-syncer model.
//!
//! Values are serialized once, where they enter the server (postcard), and travel as opaque
//! [`EncodedValue`](super::EncodedValue) bytes; a consumer decodes only the ones it uses.
//! The encoding is deterministic (maps are ordered), so equal values are equal bytes and
//! hash to the same digest entry on every node.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use serde::{Deserialize, Serialize};

use super::key::KeyType;
use super::rule::{Protocol, Rule};

/// Labels, ordered so encoding is deterministic.
pub type Labels = BTreeMap<String, String>;

/// A typed value. Each variant belongs to one [`KeyType`]; see [`Value::key_type`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Value {
    /// For [`KeyType::WorkloadEndpoint`].
    WorkloadEndpoint(WorkloadEndpoint),
    /// For [`KeyType::HostEndpoint`].
    HostEndpoint(HostEndpoint),
    /// For [`KeyType::Policy`].
    Policy(Policy),
    /// For [`KeyType::ProfileRules`].
    ProfileRules(ProfileRules),
    /// For [`KeyType::ProfileLabels`].
    ProfileLabels(ProfileLabels),
    /// For [`KeyType::NetworkSet`].
    NetworkSet(NetworkSet),
    /// For [`KeyType::IpPool`].
    IpPool(IpPool),
    /// For [`KeyType::Block`].
    Block(Block),
    /// For [`KeyType::HostIp`]: the host's address.
    HostIp(IpAddr),
    /// For [`KeyType::HostConfig`] and [`KeyType::GlobalConfig`]: Calico config values are
    /// strings, parsed by the consumer per parameter.
    Config(String),
    /// For [`KeyType::ReadyFlag`].
    ReadyFlag(bool),
    /// For [`KeyType::Resource`] with kind Node.
    Node(Node),
    /// For [`KeyType::Resource`] of other kinds: labels and the v3 spec as JSON text.
    Resource(Resource),
}

impl Value {
    /// The key type this value belongs to.
    pub fn key_type(&self) -> KeyType {
        match self {
            Value::WorkloadEndpoint(_) => KeyType::WorkloadEndpoint,
            Value::HostEndpoint(_) => KeyType::HostEndpoint,
            Value::Policy(_) => KeyType::Policy,
            Value::ProfileRules(_) => KeyType::ProfileRules,
            Value::ProfileLabels(_) => KeyType::ProfileLabels,
            Value::NetworkSet(_) => KeyType::NetworkSet,
            Value::IpPool(_) => KeyType::IpPool,
            Value::Block(_) => KeyType::Block,
            Value::HostIp(_) => KeyType::HostIp,
            Value::Config(_) => KeyType::GlobalConfig,
            Value::ReadyFlag(_) => KeyType::ReadyFlag,
            Value::Node(_) | Value::Resource(_) => KeyType::Resource,
        }
    }

    /// Whether this value may be stored under a key of type `key`.
    pub fn fits(&self, key: KeyType) -> bool {
        match self {
            Value::Config(_) => matches!(key, KeyType::GlobalConfig | KeyType::HostConfig),
            _ => self.key_type() == key,
        }
    }
}

/// A MAC address.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Mac(pub [u8; 6]);

impl fmt::Display for Mac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c, d, e, g] = self.0;
        write!(f, "{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{g:02x}")
    }
}

impl fmt::Debug for Mac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Mac({self})")
    }
}

/// A MAC address that did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid MAC address {0:?}: expected six hex pairs separated by ':'")]
pub struct MacParseError(pub String);

impl FromStr for Mac {
    type Err = MacParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || MacParseError(s.chars().take(64).collect());
        let mut out = [0u8; 6];
        let mut parts = s.split([':', '-']);
        for byte in &mut out {
            let p = parts.next().ok_or_else(err)?;
            if p.len() != 2 {
                return Err(err());
            }
            *byte = u8::from_str_radix(p, 16).map_err(|_| err())?;
        }
        if parts.next().is_some() {
            return Err(err());
        }
        Ok(Mac(out))
    }
}

/// A 1:1 NAT mapping of a workload address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpNat {
    /// Address inside the workload.
    pub int_ip: IpAddr,
    /// Address outside.
    pub ext_ip: IpAddr,
}

/// A named port on an endpoint, for rules that match ports by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointPort {
    /// Port name (`http`).
    pub name: String,
    /// Protocol.
    pub protocol: Protocol,
    /// Port number, non-zero.
    pub port: u16,
}

/// A workload endpoint (a pod's interface), Calico's `model.WorkloadEndpoint`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkloadEndpoint {
    /// `active` or `inactive`.
    pub state: String,
    /// Host-side interface name (`cali` + 11 hex characters for Kubernetes pods).
    pub name: String,
    /// Container id, when known.
    pub active_instance_id: String,
    /// The workload's MAC address.
    pub mac: Option<Mac>,
    /// Profiles, in order (`kns.<namespace>`, `ksa.<namespace>.<serviceaccount>`).
    pub profile_ids: Vec<String>,
    /// IPv4 addresses (normally /32).
    pub ipv4_nets: Vec<Ipv4Net>,
    /// IPv6 addresses (normally /128).
    pub ipv6_nets: Vec<Ipv6Net>,
    /// IPv4 1:1 NAT mappings.
    pub ipv4_nat: Vec<IpNat>,
    /// IPv6 1:1 NAT mappings.
    pub ipv6_nat: Vec<IpNat>,
    /// Labels, including Calico's `projectcalico.org/namespace` and friends.
    pub labels: Labels,
    /// IPv4 gateway the workload uses.
    pub ipv4_gateway: Option<Ipv4Addr>,
    /// IPv6 gateway the workload uses.
    pub ipv6_gateway: Option<Ipv6Addr>,
    /// Named ports.
    pub ports: Vec<EndpointPort>,
    /// The pod's `generateName`.
    pub generate_name: String,
    /// Source prefixes the workload may spoof.
    pub allow_spoofed_source_prefixes: Vec<IpNet>,
}

/// A host endpoint, Calico's `model.HostEndpoint`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostEndpoint {
    /// Interface name; empty when the endpoint is identified by address, `*` for all.
    pub name: String,
    /// Addresses the interface is expected to have.
    pub expected_ipv4_addrs: Vec<Ipv4Addr>,
    /// Addresses the interface is expected to have.
    pub expected_ipv6_addrs: Vec<Ipv6Addr>,
    /// Labels.
    pub labels: Labels,
    /// Profiles.
    pub profile_ids: Vec<String>,
    /// Named ports.
    pub ports: Vec<EndpointPort>,
}

/// Which traffic directions a policy applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum PolicyType {
    /// Traffic to the endpoint.
    Ingress,
    /// Traffic from the endpoint.
    Egress,
}

/// A policy, Calico's `model.Policy`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Policy {
    /// Namespace (empty for cluster-wide policies).
    pub namespace: String,
    /// Tier (`default` unless set).
    pub tier: String,
    /// Order: lower applies first; `None` applies last. Never NaN.
    pub order: Option<f64>,
    /// Endpoints the policy applies to.
    pub selector: String,
    /// Directions.
    pub types: Vec<PolicyType>,
    /// Ingress rules.
    pub inbound_rules: Vec<Rule>,
    /// Egress rules.
    pub outbound_rules: Vec<Rule>,
    /// Applies in the raw table without connection tracking.
    pub untracked: bool,
    /// Applies before DNAT.
    pub pre_dnat: bool,
    /// Applies to forwarded traffic too (host endpoints).
    pub apply_on_forward: bool,
    /// Hints such as `AssumeNeededOnEveryNode`.
    pub performance_hints: Vec<String>,
    /// For staged policies: the action it would take.
    pub staged_action: Option<String>,
}

/// The rules of a profile.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileRules {
    /// Ingress rules.
    pub inbound_rules: Vec<Rule>,
    /// Egress rules.
    pub outbound_rules: Vec<Rule>,
}

/// The labels a profile gives its endpoints (`labelsToApply`), and what Calico's syncers send of
/// the v3 Profile beyond them ([`ProfileDetail`], the value's tail as for [`Block::table`]).
/// Without its tail it encodes as the labels map alone, as in protocol version 1.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ProfileLabels {
    /// The labels.
    pub labels: Labels,
    /// The rest of the v3 Profile.
    #[serde(skip)]
    pub detail: ProfileDetail,
}

impl From<Labels> for ProfileLabels {
    fn from(labels: Labels) -> Self {
        Self {
            labels,
            detail: ProfileDetail::default(),
        }
    }
}

/// What Calico's felix syncer sends of a v3 Profile beyond the labels it applies: its
/// metadata, and its rules in the v3 form (Felix takes the rules from the v1 `ProfileRules`;
/// the v3 object carries them too).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileDetail {
    /// `metadata.uid`; empty when none.
    pub uid: String,
    /// `metadata.creationTimestamp` as Go writes it; empty for none.
    pub creation_timestamp: String,
    /// `metadata.labels`: the profile's own (not those it applies).
    pub labels: Labels,
    /// `metadata.annotations`.
    pub annotations: Labels,
    /// `spec.ingress` as Calico's v3 JSON (an array); empty for none.
    pub ingress_json: String,
    /// `spec.egress`, the same.
    pub egress_json: String,
}

impl ProfileDetail {
    /// Whether nothing is set.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// A network set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkSet {
    /// The networks.
    pub nets: Vec<IpNet>,
    /// Labels, for selectors.
    pub labels: Labels,
    /// Profiles.
    pub profile_ids: Vec<String>,
}

/// IP-in-IP or VXLAN encapsulation mode of a pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EncapMode {
    /// No encapsulation.
    Never,
    /// Always encapsulate.
    Always,
    /// Encapsulate only across subnets.
    CrossSubnet,
}

/// An IP pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpPool {
    /// The pool's CIDR.
    pub cidr: IpNet,
    /// IP-in-IP mode.
    pub ipip_mode: EncapMode,
    /// VXLAN mode.
    pub vxlan_mode: EncapMode,
    /// Masquerade outgoing traffic from the pool.
    pub masquerade: bool,
    /// Used by Calico IPAM.
    pub ipam: bool,
    /// No new allocations.
    pub disabled: bool,
    /// Not exported over BGP.
    pub disable_bgp_export: bool,
}

/// An IPAM allocation block, with what Felix needs from it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Block {
    /// The block's CIDR.
    pub cidr: IpNet,
    /// Calico's affinity string: `host:<node>` or `virtual:<name>`.
    pub affinity: Option<String>,
    /// Number of addresses allocated.
    pub allocated: u32,
    /// Being deleted.
    pub deleted: bool,
    /// The per-address table, as Calico's IPAM stores it. Encoded as the value's tail
    /// ([`EncodedValue`](super::EncodedValue)): a decoder that predates it ignores it, and a
    /// value from a server that predates it decodes with an empty table.
    #[serde(skip)]
    pub table: AllocationTable,
}

/// A block's per-address table (libcalico-go's `AllocationBlock` fields after `affinity`).
/// `None` where Calico's stored value had `null`, so it is sent back as it was.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocationTable {
    /// When the affinity was claimed (RFC 3339 text as stored).
    pub affinity_claim_time: Option<String>,
    /// One entry per address of the block: the index into `attributes` when allocated.
    pub allocations: Option<Vec<Option<u32>>>,
    /// The free ordinals, in the order IPAM hands them out.
    pub unallocated: Option<Vec<u32>>,
    /// Who holds each allocation.
    pub attributes: Option<Vec<AllocationAttribute>>,
    /// Bumped on every change of the block.
    pub sequence_number: u64,
    /// The sequence number at each ordinal's allocation (ordinals as decimal strings).
    pub sequence_number_for_allocation: Option<BTreeMap<String, u64>>,
}

impl AllocationTable {
    /// Whether the table says nothing (a block read without one).
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// The node an allocated ordinal belongs to, from its attribute's `node` entry (how
    /// Felix finds the host of an address borrowed from another host's block).
    pub fn node_of(&self, ordinal: usize) -> Option<&str> {
        let index = (*self.allocations.as_ref()?.get(ordinal)?)?;
        let attr = self
            .attributes
            .as_ref()?
            .get(usize::try_from(index).ok()?)?;
        attr.secondary.get("node").map(String::as_str)
    }
}

/// One allocation's owner (libcalico-go's `AllocationAttribute`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocationAttribute {
    /// The IPAM handle (`k8s-pod-network.<container id>` for pods).
    pub handle_id: Option<String>,
    /// The active owner's attributes (`namespace`, `node`, `pod`, `timestamp`, ...).
    pub secondary: BTreeMap<String, String>,
    /// A previous or coming owner's attributes (live migration).
    pub alternate: BTreeMap<String, String>,
}

impl Block {
    /// The node this block is affine to, if it is host-affine.
    pub fn affine_host(&self) -> Option<&str> {
        self.affinity.as_deref()?.strip_prefix("host:")
    }
}

/// A Calico Node resource: the parts agents route by.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    /// BGP IPv4 address with subnet.
    pub ipv4_address: Option<Ipv4Net>,
    /// BGP IPv6 address with subnet.
    pub ipv6_address: Option<Ipv6Net>,
    /// IP-in-IP tunnel address.
    pub ipv4_ipip_tunnel_addr: Option<Ipv4Addr>,
    /// VXLAN tunnel address.
    pub ipv4_vxlan_tunnel_addr: Option<Ipv4Addr>,
    /// VXLAN tunnel MAC.
    pub vxlan_tunnel_mac: Option<Mac>,
    /// WireGuard public key.
    pub wireguard_public_key: String,
    /// AS number, when set per node.
    pub as_number: Option<u32>,
    /// Node labels.
    pub labels: Labels,
    /// The rest of the node's spec and status, encoded as the value's tail as for
    /// [`Block::table`].
    #[serde(skip)]
    pub detail: NodeDetail,
}

/// What a Calico Node holds beyond the fields agents route by: its addresses (Felix's route
/// resolver takes them as the node's host addresses), route reflector cluster, IPv6 VXLAN,
/// WireGuard and interface addresses, orchestrator references and pod CIDRs, and its
/// metadata beyond name and labels. Strings as stored; empty means unset, as in Calico's
/// API.
///
/// On the wire it is two tails (docs/protocol.md, "Compatibility rules" 4): first the spec and
/// status fields, then [`NodeMeta`] (uid, creation time, annotations, the kube-labels flag,
/// whether it is invalid as a v3 Node), written only when one of those is set; so a node
/// without them encodes exactly as before they existed, and a decoder that knows only the
/// first reads it and ignores the second.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeDetail {
    /// `spec.addresses`: (address, type) in order.
    pub addresses: Vec<NodeAddress>,
    /// `spec.bgp.routeReflectorClusterID`.
    pub route_reflector_cluster_id: String,
    /// `spec.ipv6VXLANTunnelAddr`.
    pub ipv6_vxlan_tunnel_addr: String,
    /// `spec.vxlanTunnelMACAddrV6`.
    pub vxlan_tunnel_mac_v6: String,
    /// `spec.orchRefs`.
    pub orch_refs: Vec<OrchRef>,
    /// `spec.wireguard`, when present: (interfaceIPv4Address, interfaceIPv6Address).
    pub wireguard: Option<(String, String)>,
    /// `spec.interfaces`.
    pub interfaces: Vec<NodeInterface>,
    /// `status.wireguardPublicKeyV6`.
    pub wireguard_public_key_v6: String,
    /// `status.podCIDRs`.
    pub pod_cidrs: Vec<String>,
    /// The node's metadata beyond name and labels: the second tail.
    #[serde(skip)]
    pub meta: NodeMeta,
}

/// A Calico Node's metadata beyond its name and labels, as Calico's syncers send it (the
/// second tail of a [`Node`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeMeta {
    /// `metadata.uid`; empty when none.
    pub uid: String,
    /// `metadata.creationTimestamp` as Go writes it (RFC 3339, UTC, whole seconds); empty
    /// for none.
    pub creation_timestamp: String,
    /// `metadata.annotations`, but `projectcalico.org/kube-labels` when `kube_labels` says
    /// what it is.
    pub annotations: Labels,
    /// The node has the annotation `projectcalico.org/kube-labels` and it is its labels as
    /// libcalico-go's `json.Marshal` writes them (`null` for none): what Calico's
    /// Kubernetes driver adds to every node (its Kubernetes labels, which are the node's
    /// labels unless calico-node's `projectcalico.org/labels` adds others). Kept as a flag,
    /// not as a second copy of the labels.
    pub kube_labels: bool,
    /// Calico's validator refuses this node as a v3 Node (a bad address, MAC or key, or a bad
    /// name), so Calico's Typha sends its v3 Node as a deletion, while its host IP, tunnel
    /// addresses and WireGuard key are sent.
    pub invalid_as_v3: bool,
}

impl NodeMeta {
    /// Whether nothing is set.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

impl NodeDetail {
    /// Whether nothing is set.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// Appends the tails to `out` (nothing when empty): the detail, then its metadata when set.
    pub(super) fn encode_tail(&self, out: Vec<u8>) -> Result<Vec<u8>, postcard::Error> {
        if self.is_empty() {
            return Ok(out);
        }
        let out = postcard::to_extend(self, out)?;
        if self.meta.is_empty() {
            return Ok(out);
        }
        postcard::to_extend(&self.meta, out)
    }

    /// Reads the tails from `bytes`: the first, then the second when there is more. Bytes
    /// after the tails this version knows are ignored.
    pub(super) fn decode_tail(bytes: &[u8]) -> Result<Self, postcard::Error> {
        let (mut detail, rest) = postcard::take_from_bytes::<NodeDetail>(bytes)?;
        if !rest.is_empty() {
            detail.meta = postcard::take_from_bytes::<NodeMeta>(rest)?.0;
        }
        Ok(detail)
    }
}

/// One of a node's addresses.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeAddress {
    /// An address or CIDR.
    pub address: String,
    /// `InternalIP`, `ExternalIP`, `CalicoNodeIP` or empty.
    pub kind: String,
}

/// The orchestrator a node belongs to, and its name there.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrchRef {
    /// The node's name in the orchestrator (may be empty).
    pub node_name: String,
    /// `k8s`, ...
    pub orchestrator: String,
}

/// A named host interface and its addresses.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInterface {
    /// Interface name.
    pub name: String,
    /// Its addresses.
    pub addresses: Vec<String>,
}

/// Any other v3 resource, carried for consumers that want it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resource {
    /// Labels.
    pub labels: Labels,
    /// The resource's `spec`, as JSON text.
    pub spec_json: String,
    /// Metadata beyond name and labels, encoded as the value's tail as for [`Block::table`].
    #[serde(skip)]
    pub detail: ResourceDetail,
}

/// Metadata of a v3 resource that some consumers compare or read, beyond its name and labels.
///
/// On the wire it is two tails, each a postcard struct after the one before (docs/protocol.md,
/// "Compatibility rules" 4): first `generation`, then `uid`, `creation_timestamp` and
/// `annotations`, the second written only when one of those is set. So a value without them
/// encodes exactly as before they existed, and a decoder that knows only the generation reads
/// it and ignores the rest.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceDetail {
    /// `metadata.generation`, which the Kubernetes API server raises on every change of the
    /// spec (Calico's node status reporter tells a changed CalicoNodeStatus request from its
    /// own status write by it). Zero where the datastore keeps none (etcd).
    pub generation: i64,
    /// `metadata.uid`; empty when not carried. Carried for the kinds Calico's clients get as
    /// v3 objects (BGP settings, peers and filters, node status requests, selector-scoped
    /// Felix configurations, live migrations, Services, EndpointSlices): Felix gives a
    /// migration's uid to the dataplane, and Calico's node status reporter writes back the
    /// object it was sent, uid included.
    pub uid: String,
    /// `metadata.creationTimestamp` as Go writes it (RFC 3339, UTC, whole seconds); empty for
    /// none (Go's `null`). Carried as the uid is.
    pub creation_timestamp: String,
    /// `metadata.annotations`. Carried as the uid is (not for Services and EndpointSlices).
    pub annotations: Labels,
}

/// The first tail of a [`Resource`]: what protocol version 1's servers added first.
#[derive(Serialize, Deserialize)]
struct GenerationTail {
    generation: i64,
}

/// The second tail of a [`Resource`] (see [`ResourceDetail`]).
#[derive(Serialize, Deserialize)]
struct ObjectTail {
    uid: String,
    creation_timestamp: String,
    annotations: Labels,
}

impl ResourceDetail {
    /// Whether nothing is set.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// Whether the second tail has anything to carry.
    fn has_object_tail(&self) -> bool {
        !(self.uid.is_empty() && self.creation_timestamp.is_empty() && self.annotations.is_empty())
    }

    /// Appends the tails to `out` (nothing when empty).
    pub(super) fn encode_tail(&self, out: Vec<u8>) -> Result<Vec<u8>, postcard::Error> {
        if self.is_empty() {
            return Ok(out);
        }
        let out = postcard::to_extend(
            &GenerationTail {
                generation: self.generation,
            },
            out,
        )?;
        if !self.has_object_tail() {
            return Ok(out);
        }
        postcard::to_extend(
            &ObjectTail {
                uid: self.uid.clone(),
                creation_timestamp: self.creation_timestamp.clone(),
                annotations: self.annotations.clone(),
            },
            out,
        )
    }

    /// Reads the tails from `bytes` (what follows the version 1 value): the generation, then
    /// the second tail when there is more. Bytes after the tails this version knows are
    /// ignored.
    pub(super) fn decode_tail(bytes: &[u8]) -> Result<Self, postcard::Error> {
        let (g, rest) = postcard::take_from_bytes::<GenerationTail>(bytes)?;
        let mut detail = ResourceDetail {
            generation: g.generation,
            ..Default::default()
        };
        if !rest.is_empty() {
            let (o, _) = postcard::take_from_bytes::<ObjectTail>(rest)?;
            detail.uid = o.uid;
            detail.creation_timestamp = o.creation_timestamp;
            detail.annotations = o.annotations;
        }
        Ok(detail)
    }
}
