//! v3 resources as the syncers send them: `{"kind", "apiVersion", "metadata", "spec", ...}`
//! with `metav1.TypeMeta` inline and `metav1.ObjectMeta` (k8s.io/apimachinery), marshalled by
//! json-iterator.
//!
//! Our cache keeps a resource's name, labels and the parts of its spec the agents use, not the
//! whole object, so `metadata` holds the name, the namespace and the labels. Go writes the
//! zero `creationTimestamp` as `null` (a struct is never "empty" to `omitempty`); we do too.
//! The resource version is not in the JSON: Typha moves it to `V3ResourceVersion`.

use typha_protocol::model::Labels;

use super::json::{Escape, Json, Obj};

/// The API version of every Calico v3 resource.
const API_VERSION: &str = "projectcalico.org/v3";

/// A v3 object of `kind`: TypeMeta, ObjectMeta, then the fields `rest` writes (`spec`, and
/// `status` where the Go type has one).
pub(super) fn v3_object(
    kind: &str,
    name: &str,
    namespace: Option<&str>,
    labels: &Labels,
    rest: impl FnOnce(&mut Obj<'_>),
) -> Vec<u8> {
    let mut j = Json::new();
    j.object(|o| {
        o.str("kind", kind);
        o.str("apiVersion", API_VERSION);
        o.field("metadata").object(|m| {
            m.str_ne("name", name);
            m.str_ne("namespace", namespace.unwrap_or_default());
            m.field("creationTimestamp").null();
            if !labels.is_empty() {
                m.field("labels").string_map(labels, Escape::Jsoniter);
            }
        });
        rest(o);
    });
    j.into_bytes()
}

/// A spec kept as JSON text (our `Resource` values): written back with Go's escaping. Object
/// keys come out sorted, which is Go's order only where the struct declares its fields
/// alphabetically.
pub(super) fn json_value(j: &mut Json, v: &serde_json::Value) {
    use serde_json::Value as J;
    match v {
        J::Null => j.null(),
        J::Bool(b) => j.bool(*b),
        J::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => j.uint(u),
            (None, Some(i), _) => j.raw(i.to_string().as_bytes()),
            (None, None, Some(f)) => j.float(f),
            (None, None, None) => j.null(),
        },
        J::String(s) => j.string(s, Escape::Jsoniter),
        J::Array(items) => j.array(items, json_value),
        J::Object(m) => j.object(|o| {
            for (k, v) in m {
                json_value(o.field_escaped(k), v);
            }
        }),
    }
}
