//! The one conversion layer from Calico v3 resources to the felix syncer's KV model, used by
//! every backend. Follows Calico's update processors (see `docs/calico-conversion.md`).
//!
//! A resource converts to zero or more KVs, or fails with an error naming the resource, the
//! field and the reason. The caller (the pipeline) remembers which keys each resource produced,
//! so a deletion, or an update that produces fewer keys, removes exactly the right ones.
//!
//! Where Calico's syncers skip one bad entry or field and send the rest (a network set's bad
//! CIDR, a node's bad tunnel address), so does the conversion, and it says so in a [`Note`];
//! where they drop the resource, the conversion fails. Calico's API refuses at write time
//! what its syncers tolerate on reading, so the embedded store, whose writes stand in for that
//! API, accepts a resource only when it converts without a note ([`accept_write`]). The table
//! of which is which, per kind, is in `docs/calico-conversion.md` ("Invalid content").
//!
//! One file per concept: `endpoint`, `policy` with its `rule`s, `network` (network sets,
//! pools, blocks, nodes), `profile` (the v3 Profile in a profile's tail), `config` and `raw`
//! (kinds carried whole); `selector` composes selector text as Calico's update processors do,
//! `v3check` and `raw_check` are Calico's v3 validator on what is sent whole, and `context`
//! holds what they share. This file only dispatches on the kind, so the concepts never depend
//! on it.

mod config;
mod context;
mod endpoint;
mod network;
mod policy;
mod profile;
mod raw;
mod raw_check;
mod rule;
mod selector;
#[cfg(test)]
mod tests;
mod v3check;
#[cfg(test)]
mod validation_tests;

use std::cell::RefCell;

use typha_protocol::model::{Key, PolicyKind, ResourceKind, Value};

use self::context::Cx;
pub use self::context::{ConvertError, Effect, Note, ORCHESTRATOR_LABEL, SERVICE_ACCOUNT_LABEL};
use crate::calico::v3::{Resource, Spec};

/// A resource's KVs, and what the conversion left out on the way.
#[derive(Debug, Clone, PartialEq)]
pub struct Converted {
    /// The KVs.
    pub kvs: Vec<(Key, Value)>,
    /// What was skipped or dropped, in the order met.
    pub notes: Vec<Note>,
}

/// Converts a resource to its KVs (see [`convert_noting`] for what was left out).
pub fn convert(r: &Resource) -> Result<Vec<(Key, Value)>, ConvertError> {
    convert_noting(r).map(|c| c.kvs)
}

/// Converts a resource to its KVs as Calico's syncers read it, noting what was left out.
pub fn convert_noting(r: &Resource) -> Result<Converted, ConvertError> {
    let id = r.id();
    let notes = RefCell::new(Vec::new());
    let kvs = convert_in(&Cx::new(&id, &notes), r, true)?;
    Ok(Converted {
        kvs,
        notes: notes.into_inner(),
    })
}

/// A resource as a write through Calico's API leaves it: refused when it does not convert or
/// when converting it leaves anything out (Calico's API refuses what its syncers would skip),
/// and with the defaults Calico's client library fills in on writing (a policy's `types`).
/// The embedded store checks every resource it is given with this.
pub fn accept_write(mut r: Resource) -> Result<Resource, ConvertError> {
    write_defaults(&mut r);
    let c = convert_noting(&r)?;
    match c.notes.into_iter().next() {
        None => Ok(r),
        Some(n) => Err(ConvertError {
            id: r.id(),
            field: n.field,
            reason: n.reason,
        }),
    }
}

/// [`convert`] without Calico's v3 validator on the kinds carried whole: for the tests of their
/// JSON form, whose fixtures set every field, those that exclude each other included.
#[cfg(test)]
pub(crate) fn convert_unchecked(r: &Resource) -> Result<Vec<(Key, Value)>, ConvertError> {
    let id = r.id();
    let notes = RefCell::new(Vec::new());
    convert_in(&Cx::new(&id, &notes), r, false)
}

/// What Calico's client library fills in when a resource is written: a policy's types, from
/// its rules. The embedded store applies it to every resource it is given; resources read from
/// etcd or Kubernetes are taken as stored, as Calico's syncers take them.
pub fn write_defaults(r: &mut Resource) {
    policy::default_types(&mut r.spec);
}

/// The conversion; `v3_checks` runs Calico's v3 validator on the kinds carried whole.
fn convert_in(
    cx: &Cx<'_>,
    r: &Resource,
    v3_checks: bool,
) -> Result<Vec<(Key, Value)>, ConvertError> {
    let ns = cx.namespace()?;
    let meta = &r.metadata;
    let name = &meta.name;
    match &r.spec {
        Spec::WorkloadEndpoint(s) => endpoint::workload_endpoint(cx, meta, &ns, s),
        Spec::HostEndpoint(s) => endpoint::host_endpoint(cx, meta, s),
        Spec::NetworkPolicy(s) => policy::policy(cx, PolicyKind::NetworkPolicy, Some(&ns), name, s),
        Spec::KubernetesNetworkPolicy(s) => {
            policy::policy(cx, PolicyKind::KubernetesNetworkPolicy, Some(&ns), name, s)
        }
        Spec::GlobalNetworkPolicy(s) => {
            policy::policy(cx, PolicyKind::GlobalNetworkPolicy, None, name, s)
        }
        Spec::KubernetesClusterNetworkPolicy(s) => policy::policy(
            cx,
            PolicyKind::KubernetesClusterNetworkPolicy,
            None,
            name,
            s,
        ),
        Spec::StagedKubernetesNetworkPolicy(s) => {
            policy::staged_kubernetes_policy(cx, &ns, name, s)
        }
        Spec::StagedNetworkPolicy(s) => {
            policy::staged_policy(cx, PolicyKind::StagedNetworkPolicy, Some(&ns), name, s)
        }
        Spec::StagedGlobalNetworkPolicy(s) => {
            policy::staged_policy(cx, PolicyKind::StagedGlobalNetworkPolicy, None, name, s)
        }
        Spec::Profile(s) => Ok(profile::with_detail(policy::profile(cx, name, s)?, meta, s)),
        Spec::NetworkSet(s) => network::network_set(cx, meta, &ns, s),
        Spec::GlobalNetworkSet(s) => network::global_network_set(cx, meta, s),
        Spec::IpPool(s) => network::ip_pool(cx, s),
        Spec::IpamBlock(s) => network::ipam_block(cx, s),
        Spec::BlockAffinity(s) => Ok(network::block_affinity(meta, s)),
        Spec::Node(s) => network::node(cx, meta, s),
        Spec::FelixConfiguration(fields) => config::felix_configuration(cx, meta, fields),
        Spec::ClusterInformation(s) => Ok(config::cluster_information(s)),
        Spec::Tier(s) => Ok(policy::tier(meta, s)),
        Spec::BgpConfiguration(s) => {
            if v3_checks {
                raw_check::bgp_configuration(cx, meta, s)?;
            }
            Ok(raw::raw(ResourceKind::BgpConfiguration, meta, None, s))
        }
        Spec::BgpPeer(s) => {
            if v3_checks {
                raw_check::bgp_peer(cx, meta, s)?;
            }
            Ok(raw::raw(ResourceKind::BgpPeer, meta, None, s))
        }
        Spec::BgpFilter(s) => {
            if v3_checks {
                raw_check::bgp_filter(cx, meta, s)?;
            }
            Ok(raw::raw(ResourceKind::BgpFilter, meta, None, s))
        }
        Spec::CalicoNodeStatus(s) => {
            if v3_checks {
                raw_check::calico_node_status(cx, meta, s)?;
            }
            Ok(raw::raw(ResourceKind::CalicoNodeStatus, meta, None, s))
        }
        Spec::LiveMigration(s) => {
            if v3_checks {
                raw_check::meta(cx, meta)?;
            }
            Ok(raw::live_migration(meta, &ns, s))
        }
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
