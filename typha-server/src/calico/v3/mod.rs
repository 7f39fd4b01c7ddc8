//! Calico `projectcalico.org/v3` resources, as they appear in manifests, etcd (JSON) and, after
//! the Kubernetes backend's own conversion, the Kubernetes API.
//!
//! Only the fields the felix syncer uses are modelled; other fields are accepted and ignored,
//! so real Calico manifests load. Parsing checks structure (types, enums); meaning (CIDRs,
//! ports, selectors) is checked by the conversion, which names the field that is wrong.
//!
//! `id` names resources, `resource` parses them, `policy`, `endpoint`, `network`, `bgp` and
//! `migration` hold the specs by concept, [`k8s_policy`] and [`k8s_cluster_policy`] convert
//! Kubernetes' network policies as Calico's driver does, `strmap` is the small map of labels
//! and annotations, `yaml` splits manifests. This file only re-exports,
//! so callers keep one path (`calico::v3::X`) and the files never depend on it.

mod bgp;
mod endpoint;
mod id;
pub mod k8s_cluster_policy;
pub mod k8s_policy;
mod migration;
mod network;
mod policy;
mod resource;
mod strmap;
#[cfg(test)]
mod tests;
mod yaml;

pub use self::bgp::{
    AsNumber, BgpConfigurationSpec, BgpFilterAddCommunity, BgpFilterCommunityMatch,
    BgpFilterOperation, BgpFilterPrefixLength, BgpFilterPrependAsPath, BgpFilterRule,
    BgpFilterSetPriority, BgpFilterSpec, BgpPassword, BgpPeerSpec, CalicoNodeStatusSpec, CidrBlock,
    Community, GoDuration, PrefixAdvertisement, SecretKeySelector,
};
pub use self::endpoint::{EndpointPortSpec, HostEndpointSpec, IpNatSpec, WorkloadEndpointSpec};
pub use self::id::{API_VERSION, Kind, ResourceId};
pub use self::migration::{
    LiveMigrationSource, LiveMigrationSpec, LiveMigrationTarget, WorkloadEndpointIdentifier,
    WorkloadIdentifier,
};
pub use self::network::{
    AllocationAttributeSpec, BlockAffinitySpec, ClusterInformationSpec, IpPoolSpec, IpamBlockSpec,
    NetworkSetSpec, NodeAddressSpec, NodeBgpSpec, NodeInterfaceSpec, NodeSpec, NodeStatusSpec,
    NodeWireguardSpec, OrchRefSpec,
};
pub use self::policy::{
    ActionSpec, EntityRuleSpec, HttpPathSpec, HttpSpec, IcmpSpec, PolicySpec, PortSpec,
    ProfileSpec, ProtocolSpec, RuleMetadataSpec, RuleSpec, ServiceAccountMatch, ServiceSpec,
    StagedAction, StagedKubernetesPolicySpec, StagedPolicySpec, TierSpec,
};
pub use self::resource::{ObjectMeta, ParseError, Resource, Spec};
pub use self::strmap::StrMap;
pub use self::yaml::{YamlError, yaml_documents};
