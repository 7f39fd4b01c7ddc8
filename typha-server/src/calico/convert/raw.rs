//! Kinds carried whole as raw resources (`ResourceKey` + labels + spec JSON): BGP settings,
//! peers and filters, node status requests, live migrations, Kubernetes Services and
//! EndpointSlices. Nothing here is interpreted; Calico's clients get the v3 object back (`libcalico::route`), our agent ignores
//! them.

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
            detail: detail(meta),
        }),
    )]
}

/// A LiveMigration in namespace `ns`: raw, and with the metadata Calico's LiveMigration has
/// beyond name and labels (its uid, which Felix gives the dataplane; its creation time and
/// annotations), so Calico's clients get the object Calico's Typha sends.
pub(super) fn live_migration(
    meta: &ObjectMeta,
    ns: &str,
    spec: &LiveMigrationSpec,
) -> Vec<(Key, Value)> {
    let mut kvs = raw(ResourceKind::LiveMigration, meta, Some(ns), spec);
    for (_, v) in &mut kvs {
        if let Value::Resource(r) = v {
            r.detail.uid = meta.uid.clone();
            r.detail.creation_timestamp = meta.creation_timestamp.clone().unwrap_or_default();
            r.detail.annotations = meta.annotations.to_btree();
        }
    }
    kvs
}

/// The metadata a raw resource carries beyond name and labels: its generation.
pub(super) fn detail(meta: &ObjectMeta) -> ResourceDetail {
    ResourceDetail {
        generation: meta.generation.unwrap_or_default(),
        ..ResourceDetail::default()
    }
}
