//! Typed keys and Calico's default key paths.
//!
//! Every key formats to exactly one path and every accepted path parses to exactly one key, so
//! `parse(format(k)) == k` and `format(parse(p)) == p`. Paths follow Calico's libcalico-go
//! model: names that may contain `/` are escaped (`%` → `%25`, then `/` → `%2f`), host names
//! are written as they are, and CIDRs replace their `/` with `-`. The parser is strict where
//! Calico's is lenient (a leading `/` is required, no empty segments, no escapes other than
//! `%25` and `%2f`, canonical CIDRs), because a lenient parse could not round-trip exactly.
//!
//! Policies: Calico 3.3x no longer stores policies under a tier path; its PolicyKey is
//! (kind, namespace, name). Ours is written `/calico/v1/policy/<Kind>/<namespace>/<name>` for
//! namespaced kinds and `/calico/v1/policy/<Kind>/<name>` for cluster-wide ones.

use std::fmt;

use ipnet::IpNet;

/// A key in the felix-syncer model. See the module documentation for the paths.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Key {
    /// A pod, VM or other workload interface.
    WorkloadEndpoint(WorkloadEndpointKey),
    /// A host interface under policy.
    HostEndpoint(HostEndpointKey),
    /// A network policy of any kind.
    Policy(PolicyKey),
    /// The rules of a profile.
    ProfileRules(ProfileKey),
    /// The labels a profile gives to the endpoints that use it.
    ProfileLabels(ProfileKey),
    /// A named set of networks.
    NetworkSet(NetworkSetKey),
    /// An IP pool.
    IpPool(IpPoolKey),
    /// An IPAM allocation block; its value says which host it is affine to.
    Block(BlockKey),
    /// The IP address of a host (Calico's `bird_ip`).
    HostIp(HostIpKey),
    /// A per-host configuration parameter.
    HostConfig(HostConfigKey),
    /// A cluster-wide configuration parameter.
    GlobalConfig(GlobalConfigKey),
    /// The datastore's ready flag.
    ReadyFlag,
    /// A v3 resource stored whole, such as a Node.
    Resource(ResourceKey),
    /// A well-formed path of a kind this build does not know (a newer peer's), carried as it
    /// is: it counts in the digest and is relayed, but nothing reads it (docs/protocol.md,
    /// "Adding a kind"). Only decoding from the wire makes one; [`Key::parse`] refuses it.
    Opaque(OpaqueKey),
}

/// The type of a [`Key`], without its fields: for counting, logging and checking that a value
/// matches its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum KeyType {
    /// [`Key::WorkloadEndpoint`]
    WorkloadEndpoint,
    /// [`Key::HostEndpoint`]
    HostEndpoint,
    /// [`Key::Policy`]
    Policy,
    /// [`Key::ProfileRules`]
    ProfileRules,
    /// [`Key::ProfileLabels`]
    ProfileLabels,
    /// [`Key::NetworkSet`]
    NetworkSet,
    /// [`Key::IpPool`]
    IpPool,
    /// [`Key::Block`]
    Block,
    /// [`Key::HostIp`]
    HostIp,
    /// [`Key::HostConfig`]
    HostConfig,
    /// [`Key::GlobalConfig`]
    GlobalConfig,
    /// [`Key::ReadyFlag`]
    ReadyFlag,
    /// [`Key::Resource`]
    Resource,
    /// [`Key::Opaque`]
    Opaque,
}

impl KeyType {
    /// Every key type, for tables and tests.
    pub const ALL: [KeyType; 14] = [
        KeyType::WorkloadEndpoint,
        KeyType::HostEndpoint,
        KeyType::Policy,
        KeyType::ProfileRules,
        KeyType::ProfileLabels,
        KeyType::NetworkSet,
        KeyType::IpPool,
        KeyType::Block,
        KeyType::HostIp,
        KeyType::HostConfig,
        KeyType::GlobalConfig,
        KeyType::ReadyFlag,
        KeyType::Resource,
        KeyType::Opaque,
    ];

    /// A stable, readable name (`workload-endpoint`, ...), for logs, metrics labels and tools.
    pub fn as_str(self) -> &'static str {
        match self {
            KeyType::WorkloadEndpoint => "workload-endpoint",
            KeyType::HostEndpoint => "host-endpoint",
            KeyType::Policy => "policy",
            KeyType::ProfileRules => "profile-rules",
            KeyType::ProfileLabels => "profile-labels",
            KeyType::NetworkSet => "network-set",
            KeyType::IpPool => "ip-pool",
            KeyType::Block => "ipam-block",
            KeyType::HostIp => "host-ip",
            KeyType::HostConfig => "host-config",
            KeyType::GlobalConfig => "global-config",
            KeyType::ReadyFlag => "ready-flag",
            KeyType::Resource => "resource",
            KeyType::Opaque => "opaque",
        }
    }
}

impl fmt::Display for KeyType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `/calico/v1/host/<hostname>/workload/<orchestrator>/<workload>/endpoint/<endpoint>`
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WorkloadEndpointKey {
    /// Node the workload runs on.
    pub hostname: String,
    /// Orchestrator, `k8s` for Kubernetes pods.
    pub orchestrator: String,
    /// Workload id; for Kubernetes `<namespace>/<pod>`.
    pub workload: String,
    /// Endpoint id within the workload, usually `eth0`.
    pub endpoint: String,
}

/// `/calico/v1/host/<hostname>/endpoint/<endpoint>`
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HostEndpointKey {
    /// Node the interface belongs to.
    pub hostname: String,
    /// Host endpoint name.
    pub endpoint: String,
}

/// The v3 kind a policy came from. Its name is the path segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum PolicyKind {
    /// `projectcalico.org/v3` NetworkPolicy (namespaced).
    NetworkPolicy,
    /// `projectcalico.org/v3` GlobalNetworkPolicy (cluster-wide).
    GlobalNetworkPolicy,
    /// `projectcalico.org/v3` StagedNetworkPolicy (namespaced).
    StagedNetworkPolicy,
    /// `projectcalico.org/v3` StagedGlobalNetworkPolicy (cluster-wide).
    StagedGlobalNetworkPolicy,
    /// `networking.k8s.io/v1` NetworkPolicy, converted (namespaced).
    KubernetesNetworkPolicy,
    /// `projectcalico.org/v3` StagedKubernetesNetworkPolicy, converted (namespaced): a kind
    /// added after protocol version 1 ([`PolicyKind::in_v1`]).
    StagedKubernetesNetworkPolicy,
    /// `policy.networking.k8s.io/v1alpha2` ClusterNetworkPolicy, converted (cluster-wide; its
    /// tier `kube-admin` or `kube-baseline` in the value): a kind added after protocol
    /// version 1 ([`PolicyKind::in_v1`]).
    KubernetesClusterNetworkPolicy,
}

impl PolicyKind {
    /// Every policy kind.
    pub const ALL: [PolicyKind; 7] = [
        PolicyKind::NetworkPolicy,
        PolicyKind::GlobalNetworkPolicy,
        PolicyKind::StagedNetworkPolicy,
        PolicyKind::StagedGlobalNetworkPolicy,
        PolicyKind::KubernetesNetworkPolicy,
        PolicyKind::StagedKubernetesNetworkPolicy,
        PolicyKind::KubernetesClusterNetworkPolicy,
    ];

    /// Whether a client of protocol version 1 knows this kind (see [`ResourceKind::in_v1`]).
    pub fn in_v1(self) -> bool {
        !matches!(
            self,
            PolicyKind::StagedKubernetesNetworkPolicy | PolicyKind::KubernetesClusterNetworkPolicy
        )
    }

    /// Whether policies of this kind are previews (Calico's staged policies): carried, never
    /// enforced.
    pub fn is_staged(self) -> bool {
        matches!(
            self,
            PolicyKind::StagedNetworkPolicy
                | PolicyKind::StagedGlobalNetworkPolicy
                | PolicyKind::StagedKubernetesNetworkPolicy
        )
    }

    /// The kind's name, as in the v3 API and the key path.
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyKind::NetworkPolicy => "NetworkPolicy",
            PolicyKind::GlobalNetworkPolicy => "GlobalNetworkPolicy",
            PolicyKind::StagedNetworkPolicy => "StagedNetworkPolicy",
            PolicyKind::StagedGlobalNetworkPolicy => "StagedGlobalNetworkPolicy",
            PolicyKind::KubernetesNetworkPolicy => "KubernetesNetworkPolicy",
            PolicyKind::StagedKubernetesNetworkPolicy => "StagedKubernetesNetworkPolicy",
            PolicyKind::KubernetesClusterNetworkPolicy => "KubernetesClusterNetworkPolicy",
        }
    }

    /// Whether policies of this kind live in a namespace.
    pub fn is_namespaced(self) -> bool {
        matches!(
            self,
            PolicyKind::NetworkPolicy
                | PolicyKind::StagedNetworkPolicy
                | PolicyKind::KubernetesNetworkPolicy
                | PolicyKind::StagedKubernetesNetworkPolicy
        )
    }

    fn from_segment(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// `/calico/v1/policy/<Kind>/[<namespace>/]<name>`
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PolicyKey {
    /// The v3 kind.
    pub kind: PolicyKind,
    /// Namespace: `Some` exactly when the kind is namespaced.
    pub namespace: Option<String>,
    /// Policy name (for staged policies Calico's `staged:` prefix is not used: the kind says).
    pub name: String,
}

/// A profile's name; used by both `/calico/v1/policy/profile/<name>/rules` and `/labels`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProfileKey {
    /// Profile name, e.g. `kns.default` for a Kubernetes namespace.
    pub name: String,
}

/// `/calico/v1/netset/<name>`
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NetworkSetKey {
    /// Network set name; namespaced sets are named `<namespace>/<name>`.
    pub name: String,
}

/// `/calico/v1/ipam/v4/pool/<cidr>` (or `v6`), CIDR written with `-` for `/`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IpPoolKey {
    /// The pool's CIDR.
    pub cidr: IpNet,
}

/// `/calico/ipam/v2/assignment/ipv4/block/<cidr>` (or `ipv6`), CIDR written with `-`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BlockKey {
    /// The block's CIDR.
    pub cidr: IpNet,
}

/// `/calico/v1/host/<hostname>/bird_ip`
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HostIpKey {
    /// The host.
    pub hostname: String,
}

/// `/calico/v1/host/<hostname>/config/<name>`; the name may contain `/`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HostConfigKey {
    /// The host.
    pub hostname: String,
    /// Parameter name.
    pub name: String,
}

/// `/calico/v1/config/<name>`; the name may contain `/`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GlobalConfigKey {
    /// Parameter name.
    pub name: String,
}

/// The v3 kinds that can be carried whole as a [`ResourceKey`], with their plural path names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum ResourceKind {
    /// `nodes`
    Node,
    /// `clusterinformations`
    ClusterInformation,
    /// `felixconfigurations`
    FelixConfiguration,
    /// `bgpconfigurations`
    BgpConfiguration,
    /// `bgppeers`
    BgpPeer,
    /// `ipreservations`
    IpReservation,
    /// `ipamconfigs`
    IpamConfig,
    /// `tiers`
    Tier,
    /// `kubernetesservice` (singular, as Calico registers it)
    KubernetesService,
    /// `kubernetesendpointslices`
    KubernetesEndpointSlice,
    /// `caliconodestatuses`
    CalicoNodeStatus,
    /// `blockaffinities`
    BlockAffinity,
    /// `bgpfilters`: the first kind added after protocol version 1 (see
    /// [`ResourceKind::in_v1`]).
    BgpFilter,
    /// `livemigrations` (namespaced): a workload moving between hosts, as Calico v3.32's felix
    /// syncer sends it; added after protocol version 1.
    LiveMigration,
}

impl ResourceKind {
    /// Every resource kind.
    pub const ALL: [ResourceKind; 14] = [
        ResourceKind::Node,
        ResourceKind::ClusterInformation,
        ResourceKind::FelixConfiguration,
        ResourceKind::BgpConfiguration,
        ResourceKind::BgpPeer,
        ResourceKind::IpReservation,
        ResourceKind::IpamConfig,
        ResourceKind::Tier,
        ResourceKind::KubernetesService,
        ResourceKind::KubernetesEndpointSlice,
        ResourceKind::CalicoNodeStatus,
        ResourceKind::BlockAffinity,
        ResourceKind::BgpFilter,
        ResourceKind::LiveMigration,
    ];

    /// Whether a client of protocol version 1 knows this kind. A key of a later kind makes
    /// such a client refuse the whole message, so it is sent only to clients that offered
    /// [`Features::OPAQUE_KINDS`](crate::message::Features::OPAQUE_KINDS).
    pub fn in_v1(self) -> bool {
        !matches!(self, ResourceKind::BgpFilter | ResourceKind::LiveMigration)
    }

    /// The kind's name in the v3 API.
    pub fn as_str(self) -> &'static str {
        match self {
            ResourceKind::Node => "Node",
            ResourceKind::ClusterInformation => "ClusterInformation",
            ResourceKind::FelixConfiguration => "FelixConfiguration",
            ResourceKind::BgpConfiguration => "BGPConfiguration",
            ResourceKind::BgpPeer => "BGPPeer",
            ResourceKind::IpReservation => "IPReservation",
            ResourceKind::IpamConfig => "IPAMConfig",
            ResourceKind::Tier => "Tier",
            ResourceKind::KubernetesService => "KubernetesService",
            ResourceKind::KubernetesEndpointSlice => "KubernetesEndpointSlice",
            ResourceKind::CalicoNodeStatus => "CalicoNodeStatus",
            ResourceKind::BlockAffinity => "BlockAffinity",
            ResourceKind::BgpFilter => "BGPFilter",
            ResourceKind::LiveMigration => "LiveMigration",
        }
    }

    /// The plural used in the key path (Calico's registered name).
    pub fn plural(self) -> &'static str {
        match self {
            ResourceKind::Node => "nodes",
            ResourceKind::ClusterInformation => "clusterinformations",
            ResourceKind::FelixConfiguration => "felixconfigurations",
            ResourceKind::BgpConfiguration => "bgpconfigurations",
            ResourceKind::BgpPeer => "bgppeers",
            ResourceKind::IpReservation => "ipreservations",
            ResourceKind::IpamConfig => "ipamconfigs",
            ResourceKind::Tier => "tiers",
            ResourceKind::KubernetesService => "kubernetesservice",
            ResourceKind::KubernetesEndpointSlice => "kubernetesendpointslices",
            ResourceKind::CalicoNodeStatus => "caliconodestatuses",
            ResourceKind::BlockAffinity => "blockaffinities",
            ResourceKind::BgpFilter => "bgpfilters",
            ResourceKind::LiveMigration => "livemigrations",
        }
    }

    /// Whether resources of this kind live in a namespace.
    pub fn is_namespaced(self) -> bool {
        matches!(
            self,
            ResourceKind::KubernetesService
                | ResourceKind::KubernetesEndpointSlice
                | ResourceKind::LiveMigration
        )
    }

    fn from_plural(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.plural() == s)
    }
}

/// `/calico/resources/v3/projectcalico.org/<plural>/[<namespace>/]<name>`
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ResourceKey {
    /// The resource's kind.
    pub kind: ResourceKind,
    /// Namespace: `Some` exactly when the kind is namespaced.
    pub namespace: Option<String>,
    /// Resource name.
    pub name: String,
}

/// A path of a kind this build does not know: see [`Key::Opaque`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OpaqueKey {
    /// The path as received.
    pub path: String,
}

/// A key path that could not be parsed. Names the path and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed key path {path:?}: {reason}")]
pub struct KeyError {
    /// The offending path (truncated to 256 bytes so an attacker cannot bloat logs).
    pub path: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl KeyError {
    pub(crate) fn new(path: &str, reason: &'static str) -> Self {
        let mut end = path.len().min(256);
        while !path.is_char_boundary(end) {
            end -= 1;
        }
        Self {
            path: path.get(..end).unwrap_or_default().to_owned(),
            reason,
        }
    }
}

impl Key {
    /// The key's type.
    pub fn key_type(&self) -> KeyType {
        match self {
            Key::WorkloadEndpoint(_) => KeyType::WorkloadEndpoint,
            Key::HostEndpoint(_) => KeyType::HostEndpoint,
            Key::Policy(_) => KeyType::Policy,
            Key::ProfileRules(_) => KeyType::ProfileRules,
            Key::ProfileLabels(_) => KeyType::ProfileLabels,
            Key::NetworkSet(_) => KeyType::NetworkSet,
            Key::IpPool(_) => KeyType::IpPool,
            Key::Block(_) => KeyType::Block,
            Key::HostIp(_) => KeyType::HostIp,
            Key::HostConfig(_) => KeyType::HostConfig,
            Key::GlobalConfig(_) => KeyType::GlobalConfig,
            Key::ReadyFlag => KeyType::ReadyFlag,
            Key::Resource(_) => KeyType::Resource,
            Key::Opaque(_) => KeyType::Opaque,
        }
    }

    /// Whether a client of protocol version 1 knows this key's kind (see
    /// [`ResourceKind::in_v1`]); an opaque key is of a kind later still.
    pub fn in_v1(&self) -> bool {
        match self {
            Key::Resource(k) => k.kind.in_v1(),
            Key::Policy(k) => k.kind.in_v1(),
            Key::Opaque(_) => false,
            _ => true,
        }
    }
}

mod path;

pub use path::{MAX_OPAQUE_PATH, PathClass};

#[cfg(test)]
mod tests;
