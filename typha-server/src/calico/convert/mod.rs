//! The one conversion layer from Calico v3 resources to the felix syncer's KV model, used by
//! every backend. Follows Calico's update processors (see `docs/calico-conversion.md`).
//!
//! A resource converts to zero or more KVs, or fails with an error naming the resource, the
//! field and the reason. The caller (the pipeline) remembers which keys each resource produced,
//! so a deletion, or an update that produces fewer keys, removes exactly the right ones.
//!
//! One file per concept: `endpoint`, `policy` with its `rule`s, `network` (network sets,
//! pools, blocks, nodes), `config` and `raw` (kinds carried whole); `context` holds what they share. This file only
//! dispatches on the kind, so the concepts never depend on it.

mod config;
mod context;
mod endpoint;
mod network;
mod policy;
mod profile;
mod raw;
mod rule;
#[cfg(test)]
mod tests;

use typha_protocol::model::{Key, PolicyKind, ResourceKind, Value};

use self::context::Cx;
pub use self::context::{ConvertError, ORCHESTRATOR_LABEL, SERVICE_ACCOUNT_LABEL};
use crate::calico::v3::{Resource, Spec};

/// Converts a resource to its KVs.
pub fn convert(r: &Resource) -> Result<Vec<(Key, Value)>, ConvertError> {
    let id = r.id();
    let cx = Cx::new(&id);
    let ns = cx.namespace()?;
    let meta = &r.metadata;
    let name = &meta.name;
    match &r.spec {
        Spec::WorkloadEndpoint(s) => endpoint::workload_endpoint(&cx, meta, &ns, s),
        Spec::HostEndpoint(s) => endpoint::host_endpoint(&cx, meta, s),
        Spec::NetworkPolicy(s) => {
            policy::policy(&cx, PolicyKind::NetworkPolicy, Some(&ns), name, s)
        }
        Spec::KubernetesNetworkPolicy(s) => {
            policy::policy(&cx, PolicyKind::KubernetesNetworkPolicy, Some(&ns), name, s)
        }
        Spec::GlobalNetworkPolicy(s) => {
            policy::policy(&cx, PolicyKind::GlobalNetworkPolicy, None, name, s)
        }
        Spec::KubernetesClusterNetworkPolicy(s) => policy::policy(
            &cx,
            PolicyKind::KubernetesClusterNetworkPolicy,
            None,
            name,
            s,
        ),
        Spec::StagedKubernetesNetworkPolicy(s) => {
            policy::staged_kubernetes_policy(&cx, &ns, name, s)
        }
        Spec::StagedNetworkPolicy(s) => {
            policy::staged_policy(&cx, PolicyKind::StagedNetworkPolicy, Some(&ns), name, s)
        }
        Spec::StagedGlobalNetworkPolicy(s) => {
            policy::staged_policy(&cx, PolicyKind::StagedGlobalNetworkPolicy, None, name, s)
        }
        Spec::Profile(s) => Ok(profile::with_detail(
            policy::profile(&cx, name, s)?,
            meta,
            s,
        )),
        Spec::NetworkSet(s) => network::network_set(&cx, meta, &ns, s),
        Spec::GlobalNetworkSet(s) => network::global_network_set(&cx, meta, s),
        Spec::IpPool(s) => network::ip_pool(&cx, s),
        Spec::IpamBlock(s) => network::ipam_block(&cx, s),
        Spec::BlockAffinity(s) => Ok(network::block_affinity(meta, s)),
        Spec::Node(s) => network::node(&cx, meta, s),
        Spec::FelixConfiguration(fields) => config::felix_configuration(&cx, meta, fields),
        Spec::ClusterInformation(s) => Ok(config::cluster_information(s)),
        Spec::Tier(s) => Ok(policy::tier(meta, s)),
        Spec::BgpConfiguration(s) => Ok(raw::raw(ResourceKind::BgpConfiguration, meta, None, s)),
        Spec::BgpPeer(s) => Ok(raw::raw(ResourceKind::BgpPeer, meta, None, s)),
        Spec::BgpFilter(s) => Ok(raw::raw(ResourceKind::BgpFilter, meta, None, s)),
        Spec::CalicoNodeStatus(s) => Ok(raw::raw(ResourceKind::CalicoNodeStatus, meta, None, s)),
        Spec::LiveMigration(s) => Ok(raw::live_migration(meta, &ns, s)),
        Spec::KubernetesService(s) => Ok(raw::raw(
            ResourceKind::KubernetesService,
            meta,
            Some(&ns),
            s,
        )),
        Spec::KubernetesEndpointSlice(s) => Ok(raw::raw(
            ResourceKind::KubernetesEndpointSlice,
            meta,
            Some(&ns),
            s,
        )),
    }
}
