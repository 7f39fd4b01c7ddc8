//! How a resource is named: the API version, its [`Kind`] and its [`ResourceId`].

use std::fmt;

use serde::{Deserialize, Serialize};

/// The API group and version of Calico resources.
pub const API_VERSION: &str = "projectcalico.org/v3";

/// The resource kinds the server understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Kind {
    /// A pod or other workload interface.
    WorkloadEndpoint,
    /// Namespaced policy.
    NetworkPolicy,
    /// Cluster-wide policy.
    GlobalNetworkPolicy,
    /// `networking.k8s.io/v1` NetworkPolicy, already converted to Calico's form.
    KubernetesNetworkPolicy,
    /// A namespaced policy staged: previewed, not enforced.
    StagedNetworkPolicy,
    /// A cluster-wide policy staged: previewed, not enforced.
    StagedGlobalNetworkPolicy,
    /// A Kubernetes NetworkPolicy staged (Calico's CRD, namespaced): previewed, not enforced.
    StagedKubernetesNetworkPolicy,
    /// `policy.networking.k8s.io/v1alpha2` ClusterNetworkPolicy, already converted to Calico's
    /// GlobalNetworkPolicy form (tier `kube-admin` or `kube-baseline`); read from the
    /// Kubernetes datastore only, as Calico does.
    KubernetesClusterNetworkPolicy,
    /// Profile (Kubernetes namespaces and service accounts become profiles).
    Profile,
    /// Namespaced network set.
    NetworkSet,
    /// Cluster-wide network set.
    GlobalNetworkSet,
    /// Host interface under policy.
    HostEndpoint,
    /// IP pool.
    #[serde(rename = "IPPool")]
    IpPool,
    /// IPAM block.
    #[serde(rename = "IPAMBlock")]
    IpamBlock,
    /// IPAM block affinity.
    BlockAffinity,
    /// Node.
    Node,
    /// Felix configuration (`default` or `node.<name>`).
    FelixConfiguration,
    /// Cluster information (`default`).
    ClusterInformation,
    /// Policy tier: its order and default action.
    Tier,
    /// BGP settings (`default`, or `node.<name>`).
    #[serde(rename = "BGPConfiguration")]
    BgpConfiguration,
    /// A BGP peering.
    #[serde(rename = "BGPPeer")]
    BgpPeer,
    /// Import and export rules a BGP peering names.
    #[serde(rename = "BGPFilter")]
    BgpFilter,
    /// A request for a node's BGP and agent status.
    CalicoNodeStatus,
    /// A workload moving between hosts (namespaced; on Kubernetes, made from a KubeVirt
    /// VirtualMachineInstanceMigration).
    LiveMigration,
    /// A Kubernetes Service (read from the Kubernetes API only), its spec.
    KubernetesService,
    /// A Kubernetes EndpointSlice (read from the Kubernetes API only).
    KubernetesEndpointSlice,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 26] = [
        Kind::WorkloadEndpoint,
        Kind::NetworkPolicy,
        Kind::GlobalNetworkPolicy,
        Kind::KubernetesNetworkPolicy,
        Kind::StagedNetworkPolicy,
        Kind::StagedGlobalNetworkPolicy,
        Kind::StagedKubernetesNetworkPolicy,
        Kind::KubernetesClusterNetworkPolicy,
        Kind::Profile,
        Kind::NetworkSet,
        Kind::GlobalNetworkSet,
        Kind::HostEndpoint,
        Kind::IpPool,
        Kind::IpamBlock,
        Kind::BlockAffinity,
        Kind::Node,
        Kind::FelixConfiguration,
        Kind::ClusterInformation,
        Kind::Tier,
        Kind::BgpConfiguration,
        Kind::BgpPeer,
        Kind::BgpFilter,
        Kind::CalicoNodeStatus,
        Kind::LiveMigration,
        Kind::KubernetesService,
        Kind::KubernetesEndpointSlice,
    ];

    /// The kind's name as written in manifests.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::WorkloadEndpoint => "WorkloadEndpoint",
            Kind::NetworkPolicy => "NetworkPolicy",
            Kind::GlobalNetworkPolicy => "GlobalNetworkPolicy",
            Kind::KubernetesNetworkPolicy => "KubernetesNetworkPolicy",
            Kind::StagedNetworkPolicy => "StagedNetworkPolicy",
            Kind::StagedGlobalNetworkPolicy => "StagedGlobalNetworkPolicy",
            Kind::StagedKubernetesNetworkPolicy => "StagedKubernetesNetworkPolicy",
            Kind::KubernetesClusterNetworkPolicy => "KubernetesClusterNetworkPolicy",
            Kind::Profile => "Profile",
            Kind::NetworkSet => "NetworkSet",
            Kind::GlobalNetworkSet => "GlobalNetworkSet",
            Kind::HostEndpoint => "HostEndpoint",
            Kind::IpPool => "IPPool",
            Kind::IpamBlock => "IPAMBlock",
            Kind::BlockAffinity => "BlockAffinity",
            Kind::Node => "Node",
            Kind::FelixConfiguration => "FelixConfiguration",
            Kind::ClusterInformation => "ClusterInformation",
            Kind::Tier => "Tier",
            Kind::BgpConfiguration => "BGPConfiguration",
            Kind::BgpPeer => "BGPPeer",
            Kind::BgpFilter => "BGPFilter",
            Kind::CalicoNodeStatus => "CalicoNodeStatus",
            Kind::LiveMigration => "LiveMigration",
            Kind::KubernetesService => "KubernetesService",
            Kind::KubernetesEndpointSlice => "KubernetesEndpointSlice",
        }
    }

    /// Parses a kind name.
    pub fn from_name(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// Whether resources of this kind live in a namespace.
    pub fn is_namespaced(self) -> bool {
        matches!(
            self,
            Kind::WorkloadEndpoint
                | Kind::NetworkPolicy
                | Kind::KubernetesNetworkPolicy
                | Kind::StagedNetworkPolicy
                | Kind::StagedKubernetesNetworkPolicy
                | Kind::NetworkSet
                | Kind::LiveMigration
                | Kind::KubernetesService
                | Kind::KubernetesEndpointSlice
        )
    }

    /// The plural used in Calico's etcd paths and Kubernetes URLs.
    pub fn plural(self) -> &'static str {
        match self {
            Kind::WorkloadEndpoint => "workloadendpoints",
            Kind::NetworkPolicy => "networkpolicies",
            Kind::GlobalNetworkPolicy => "globalnetworkpolicies",
            Kind::KubernetesNetworkPolicy => "kubernetesnetworkpolicies",
            Kind::StagedNetworkPolicy => "stagednetworkpolicies",
            Kind::StagedGlobalNetworkPolicy => "stagedglobalnetworkpolicies",
            Kind::StagedKubernetesNetworkPolicy => "stagedkubernetesnetworkpolicies",
            // Calico's registered name (model/resource.go).
            Kind::KubernetesClusterNetworkPolicy => "kubernetesclusternetworkpolicies",
            Kind::Profile => "profiles",
            Kind::NetworkSet => "networksets",
            Kind::GlobalNetworkSet => "globalnetworksets",
            Kind::HostEndpoint => "hostendpoints",
            Kind::IpPool => "ippools",
            Kind::IpamBlock => "ipamblocks",
            Kind::BlockAffinity => "blockaffinities",
            Kind::Node => "nodes",
            Kind::FelixConfiguration => "felixconfigurations",
            Kind::ClusterInformation => "clusterinformations",
            Kind::Tier => "tiers",
            Kind::BgpConfiguration => "bgpconfigurations",
            Kind::BgpPeer => "bgppeers",
            Kind::BgpFilter => "bgpfilters",
            Kind::CalicoNodeStatus => "caliconodestatuses",
            Kind::LiveMigration => "livemigrations",
            // Calico's registered names for the Kubernetes kinds (the first is singular).
            Kind::KubernetesService => "kubernetesservice",
            Kind::KubernetesEndpointSlice => "kubernetesendpointslices",
        }
    }

    /// Kind from its plural.
    pub fn from_plural(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.plural() == s)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Identifies a resource: kind, namespace (for namespaced kinds) and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ResourceId {
    /// Kind.
    pub kind: Kind,
    /// Namespace, for namespaced kinds.
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
}

impl ResourceId {
    /// A cluster-wide resource's id.
    pub fn global(kind: Kind, name: impl Into<String>) -> Self {
        Self {
            kind,
            namespace: None,
            name: name.into(),
        }
    }

    /// A namespaced resource's id.
    pub fn namespaced(kind: Kind, namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            kind,
            namespace: Some(namespace.into()),
            name: name.into(),
        }
    }
}

impl fmt::Display for ResourceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {ns}/{}", self.kind, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}
