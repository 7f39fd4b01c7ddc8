//! v3 resources as the syncers send them: `{"kind", "apiVersion", "metadata", "spec", ...}`
//! with `metav1.TypeMeta` inline and `metav1.ObjectMeta` (k8s.io/apimachinery), marshalled by
//! json-iterator.
//!
//! Our cache keeps a resource's name, labels and the parts of its spec the agents use, not the
//! whole object, so `metadata` holds the name, the namespace and the labels, and for the
//! kinds sent as v3 objects the uid, generation, creation time and annotations Calico's syncer
//! gives them (`ownerReferences`, `finalizers` and `managedFields` are not carried). Go writes
//! the zero `creationTimestamp` as `null` (a struct is never "empty" to `omitempty`); we do
//! too.
//! The resource version is not in the JSON: Typha moves it to `V3ResourceVersion`.
//!
//! Kubernetes' own objects (Services, EndpointSlices) go out as client-go decodes them, without
//! `kind` and `apiVersion` ([`k8s_object`]).

use typha_protocol::model::{Labels, ResourceDetail};

use super::json::{Escape, Json, Obj};

/// The API version of every Calico v3 resource.
const API_VERSION: &str = "projectcalico.org/v3";

/// A v3 object of `kind`: TypeMeta, ObjectMeta, then the fields `rest` writes (`spec`, and
/// `status` where the Go type has one). The metadata each where Go's ObjectMeta has it: name,
/// namespace, `uid`, `generation`, `creationTimestamp` (`null` when empty), the labels, then
/// `annotations`; all but the timestamp `omitempty`.
pub(super) fn v3_object_with(
    kind: &str,
    name: &str,
    namespace: Option<&str>,
    labels: &Labels,
    detail: &ResourceDetail,
    rest: impl FnOnce(&mut Obj<'_>),
) -> Vec<u8> {
    let mut j = Json::new();
    j.object(|o| {
        o.str("kind", kind);
        o.str("apiVersion", API_VERSION);
        metadata(o, name, namespace.unwrap_or_default(), labels, detail, true);
        rest(o);
    });
    j.into_bytes()
}

/// A Kubernetes object as Calico's Kubernetes driver passes it on (a Service, an
/// EndpointSlice): no `kind` or `apiVersion` (client-go's typed clients clear them), then
/// `metadata` (what we carry of it: name, namespace, uid, generation, creation time, labels,
/// in ObjectMeta's order) and what `rest` writes.
pub(super) fn k8s_object(
    name: &str,
    namespace: &str,
    labels: &Labels,
    detail: &ResourceDetail,
    rest: impl FnOnce(&mut Obj<'_>),
) -> Vec<u8> {
    let mut j = Json::new();
    j.object(|o| {
        metadata(o, name, namespace, labels, detail, false);
        rest(o);
    });
    j.into_bytes()
}

/// `metadata`, what we carry of ObjectMeta in its order: name, namespace, uid, generation,
/// creationTimestamp (`null` when none, as Go writes a zero time), labels, and annotations
/// when `annotations` says so.
fn metadata(
    o: &mut Obj<'_>,
    name: &str,
    namespace: &str,
    labels: &Labels,
    detail: &ResourceDetail,
    annotations: bool,
) {
    o.field("metadata").object(|m| {
        m.str_ne("name", name);
        m.str_ne("namespace", namespace);
        m.str_ne("uid", &detail.uid);
        if detail.generation != 0 {
            m.field("generation")
                .raw(detail.generation.to_string().as_bytes());
        }
        if detail.creation_timestamp.is_empty() {
            m.field("creationTimestamp").null();
        } else {
            m.str("creationTimestamp", &detail.creation_timestamp);
        }
        if !labels.is_empty() {
            m.field("labels").string_map(labels, Escape::Jsoniter);
        }
        if annotations && !detail.annotations.is_empty() {
            m.field("annotations")
                .string_map(&detail.annotations, Escape::Jsoniter);
        }
    });
}

/// A spec kept as JSON text (our `Resource` values), written back with Go's escaping and its
/// object keys in the order the text has them: our conversion writes Calico's kinds from types
/// that declare their fields in Go's order, so this is Go's order too. Text that is not JSON
/// (it never is: we wrote it) comes out as `null`.
pub(super) fn json_text(j: &mut Json, text: &str) {
    match serde_json::from_str::<Ordered>(text) {
        Ok(v) => v.write(j),
        Err(_) => j.null(),
    }
}

/// A JSON value that keeps its objects' keys in the order they were read (serde_json's own
/// `Value` sorts them).
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Ordered {
    Null,
    Bool(bool),
    Number(serde_json::Number),
    String(String),
    Array(Vec<Ordered>),
    Object(Vec<(String, Ordered)>),
}

impl Ordered {
    /// Writes the value with json-iterator's escaping.
    pub(super) fn write(&self, j: &mut Json) {
        match self {
            Ordered::Null => j.null(),
            Ordered::Bool(b) => j.bool(*b),
            Ordered::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
                (Some(u), _, _) => j.uint(u),
                (None, Some(i), _) => j.raw(i.to_string().as_bytes()),
                (None, None, Some(f)) => j.float(f),
                (None, None, None) => j.null(),
            },
            Ordered::String(s) => j.string(s, Escape::Jsoniter),
            Ordered::Array(items) => j.array(items, |j, v| v.write(j)),
            Ordered::Object(fields) => j.object(|o| {
                for (k, v) in fields {
                    v.write(o.field_escaped(k));
                }
            }),
        }
    }
}

impl<'de> serde::Deserialize<'de> for Ordered {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Ordered;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_unit<E>(self) -> Result<Ordered, E> {
                Ok(Ordered::Null)
            }
            fn visit_none<E>(self) -> Result<Ordered, E> {
                Ok(Ordered::Null)
            }
            fn visit_bool<E>(self, b: bool) -> Result<Ordered, E> {
                Ok(Ordered::Bool(b))
            }
            fn visit_u64<E>(self, n: u64) -> Result<Ordered, E> {
                Ok(Ordered::Number(n.into()))
            }
            fn visit_i64<E>(self, n: i64) -> Result<Ordered, E> {
                Ok(Ordered::Number(n.into()))
            }
            fn visit_f64<E>(self, f: f64) -> Result<Ordered, E> {
                Ok(serde_json::Number::from_f64(f).map_or(Ordered::Null, Ordered::Number))
            }
            fn visit_str<E>(self, s: &str) -> Result<Ordered, E> {
                Ok(Ordered::String(s.to_owned()))
            }
            fn visit_string<E>(self, s: String) -> Result<Ordered, E> {
                Ok(Ordered::String(s))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<Ordered, A::Error> {
                let mut items = Vec::new();
                while let Some(v) = a.next_element()? {
                    items.push(v);
                }
                Ok(Ordered::Array(items))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<Ordered, A::Error> {
                let mut fields: Vec<(String, Ordered)> = Vec::new();
                while let Some((k, v)) = a.next_entry::<String, Ordered>()? {
                    // A repeated key: the last one wins, as in Go, at the first one's place.
                    match fields.iter_mut().find(|(f, _)| *f == k) {
                        Some(slot) => slot.1 = v,
                        None => fields.push((k, v)),
                    }
                }
                Ok(Ordered::Object(fields))
            }
        }
        d.deserialize_any(V)
    }
}
