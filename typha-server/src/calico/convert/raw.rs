//! Kinds carried whole as raw resources (`ResourceKey` + labels + spec JSON): BGP settings,
//! peers and filters, node status requests, live migrations, Kubernetes Services and
//! EndpointSlices. Nothing here is interpreted; Calico's clients get the v3 object back
//! (`libcalico::route`), with the metadata Calico's syncer gives it (uid, creation time,
//! generation, annotations: [`object_detail`]); our agent ignores them.

use serde::Serialize;
use typha_protocol::model::{
    Key, Resource as ResourceValue, ResourceDetail, ResourceKey, ResourceKind, Value,
};

use crate::calico::v3::{LiveMigrationSpec, ObjectMeta};

/// `spec` as one raw resource of `kind` (namespaced when `ns` is given). The spec is written
/// from its typed form, so its fields keep the order the type declares (Go's, for Calico's
/// kinds).
pub(super) fn raw(
    kind: ResourceKind,
    meta: &ObjectMeta,
    ns: Option<&str>,
    spec: &impl Serialize,
) -> Vec<(Key, Value)> {
    vec![(
        Key::Resource(ResourceKey {
            kind,
            namespace: ns.map(str::to_owned),
            name: meta.name.clone(),
        }),
        Value::Resource(ResourceValue {
            labels: meta.labels.to_btree(),
            // Serializing plain data (structs, JSON values) to JSON cannot fail.
            spec_json: serde_json::to_string(spec).unwrap_or_default(),
            detail: object_detail(meta),
        }),
    )]
}

/// A LiveMigration in namespace `ns`: raw, with its uid (Felix gives it to the dataplane).
pub(super) fn live_migration(
    meta: &ObjectMeta,
    ns: &str,
    spec: &LiveMigrationSpec,
) -> Vec<(Key, Value)> {
    raw(ResourceKind::LiveMigration, meta, Some(ns), spec)
}

/// The metadata a raw resource carries beyond name and labels, for a kind whose v3 object
/// Calico's clients do not get (a tier, a block affinity: Calico sends them in v1 models):
/// its generation.
pub(super) fn detail(meta: &ObjectMeta) -> ResourceDetail {
    ResourceDetail {
        generation: meta.generation.unwrap_or_default(),
        ..ResourceDetail::default()
    }
}

/// The metadata of a resource whose v3 object Calico's clients get: generation, uid,
/// creation time and annotations, as the backend read them (etcd and the embedded store: as
/// stored; Kubernetes: as Calico's driver makes them, `datastore::kubernetes`). Calico's
/// node status reporter writes back the CalicoNodeStatus it was sent, and Calico's client
/// refuses to update one without a uid or a creation time.
pub(super) fn object_detail(meta: &ObjectMeta) -> ResourceDetail {
    ResourceDetail {
        generation: meta.generation.unwrap_or_default(),
        uid: meta.uid.clone(),
        creation_timestamp: meta.creation_timestamp.clone().unwrap_or_default(),
        annotations: meta.annotations.to_btree(),
    }
}
