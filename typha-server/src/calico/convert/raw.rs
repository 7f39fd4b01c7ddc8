//! Kinds carried whole as raw resources (`ResourceKey` + labels + spec JSON): BGP settings,
//! peers and filters, node status requests, Kubernetes Services and EndpointSlices. Nothing here is
//! interpreted; Calico's clients get the v3 object back (`libcalico::route`), our agent ignores
//! them.

use serde::Serialize;
use typha_protocol::model::{
    Key, Resource as ResourceValue, ResourceDetail, ResourceKey, ResourceKind, Value,
};

use crate::calico::v3::ObjectMeta;

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
            labels: meta.labels.clone(),
            // Serializing plain data (structs, JSON values) to JSON cannot fail.
            spec_json: serde_json::to_string(spec).unwrap_or_default(),
            detail: detail(meta),
        }),
    )]
}

/// The metadata a raw resource carries beyond name and labels.
pub(super) fn detail(meta: &ObjectMeta) -> ResourceDetail {
    ResourceDetail {
        generation: meta.generation.unwrap_or_default(),
    }
}
