//! What Calico's felix syncer sends of a profile beyond its v1 rules and labels: the v3
//! Profile, with its metadata and its rules in the v3 form. It travels in the tail of the
//! profile's labels KV ([`ProfileDetail`]), which every profile has here (with no labels when
//! it applies none), so that `libcalico` can write the v3 Profile from that one KV.

use serde_json::Value as Json;
use typha_protocol::model::{Key, ProfileDetail, ProfileKey, ProfileLabels, Value};

use crate::calico::v3::{ObjectMeta, ProfileSpec, RuleSpec};

/// `kvs` (a profile's, from `policy::profile`) with the profile's labels KV holding the rest
/// of its v3 Profile; one with no labels is added when the profile applies none.
pub(super) fn with_detail(
    mut kvs: Vec<(Key, Value)>,
    meta: &ObjectMeta,
    s: &ProfileSpec,
) -> Vec<(Key, Value)> {
    let detail = ProfileDetail {
        uid: meta.uid.clone(),
        creation_timestamp: meta.creation_timestamp.clone().unwrap_or_default(),
        labels: meta.labels.to_btree(),
        annotations: meta.annotations.to_btree(),
        ingress_json: rules_json(&s.ingress),
        egress_json: rules_json(&s.egress),
    };
    let labels = kvs.iter_mut().find_map(|(_, v)| match v {
        Value::ProfileLabels(l) => Some(l),
        _ => None,
    });
    match labels {
        Some(l) => l.detail = detail,
        None => kvs.push((
            Key::ProfileLabels(ProfileKey {
                name: meta.name.clone(),
            }),
            Value::ProfileLabels(ProfileLabels {
                labels: Default::default(),
                detail,
            }),
        )),
    }
    kvs
}

/// v3 rules as Calico's syncer writes them (Go's `v3.Rule`, marshalled by json-iterator):
/// fields in the Go type's order, `omitempty` ones left out when empty, `source` and
/// `destination` always written (json-iterator does not know `omitzero`), ports and protocols
/// as `numorstring` writes them. Empty for no rules (`omitempty`).
pub(crate) fn rules_json(rules: &[RuleSpec]) -> String {
    if rules.is_empty() {
        return String::new();
    }
    let mut out = String::from("[");
    for (i, r) in rules.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        // Serializing a plain struct to a JSON value cannot fail.
        let v = serde_json::to_value(r).unwrap_or_default();
        rule(&v, &mut out);
    }
    out.push(']');
    out
}

/// Go's `v3.Rule` field order.
const RULE: [&str; 10] = [
    "action",
    "ipVersion",
    "protocol",
    "icmp",
    "notProtocol",
    "notICMP",
    "source",
    "destination",
    "http",
    "metadata",
];

/// Go's `v3.EntityRule` field order (every field `omitempty`).
const ENTITY: [&str; 9] = [
    "nets",
    "selector",
    "namespaceSelector",
    "services",
    "ports",
    "notNets",
    "notSelector",
    "notPorts",
    "serviceAccounts",
];

fn rule(v: &Json, out: &mut String) {
    let mut o = Obj::new(out);
    for f in RULE {
        let Some(x) = v.get(f) else { continue };
        match f {
            "source" | "destination" => {
                o.key(f);
                entity(x, o.out);
            }
            "protocol" | "notProtocol" if !x.is_null() => o.value(f, &protocol(x)),
            "icmp" | "notICMP" if !x.is_null() => {
                o.key(f);
                fields(x, &["type", "code"], o.out);
            }
            "http" => {
                if let Some(h) = x.as_object().filter(|h| !h.is_empty()) {
                    o.key(f);
                    let mut ho = Obj::new(o.out);
                    if let Some(m) = h.get("methods").filter(|m| !empty(m)) {
                        ho.value("methods", m);
                    }
                    if let Some(paths) = h
                        .get("paths")
                        .and_then(Json::as_array)
                        .filter(|p| !p.is_empty())
                    {
                        ho.key("paths");
                        ho.out.push('[');
                        for (i, p) in paths.iter().enumerate() {
                            if i > 0 {
                                ho.out.push(',');
                            }
                            fields(p, &["exact", "prefix"], ho.out);
                        }
                        ho.out.push(']');
                    }
                    ho.end();
                }
            }
            "metadata" if !x.is_null() => {
                o.key(f);
                fields(x, &["annotations"], o.out);
            }
            _ if !empty(x) => o.value(f, x),
            _ => {}
        }
    }
    o.end();
}

fn entity(v: &Json, out: &mut String) {
    let mut o = Obj::new(out);
    for f in ENTITY {
        let Some(x) = v.get(f).filter(|x| !empty(x)) else {
            continue;
        };
        match f {
            "ports" | "notPorts" => {
                let ports: Vec<Json> = x.as_array().into_iter().flatten().map(port).collect();
                o.value(f, &Json::Array(ports));
            }
            "services" => {
                o.key(f);
                fields(x, &["name", "namespace"], o.out);
            }
            "serviceAccounts" => {
                o.key(f);
                fields(x, &["names", "selector"], o.out);
            }
            _ => o.value(f, x),
        }
    }
    o.end();
}

/// An object of `names` in that order, each `omitempty`.
fn fields(v: &Json, names: &[&str], out: &mut String) {
    let mut o = Obj::new(out);
    for f in names {
        if let Some(x) = v.get(*f).filter(|x| !empty(x)) {
            o.value(f, x);
        }
    }
    o.end();
}

/// Go's `omitempty`: null, `""`, `[]`, `{}`.
fn empty(v: &Json) -> bool {
    match v {
        Json::Null => true,
        Json::String(s) => s.is_empty(),
        Json::Array(a) => a.is_empty(),
        Json::Object(o) => o.is_empty(),
        _ => false,
    }
}

/// `numorstring.Port` as Go writes it: a name as itself, one port as a number, a range as
/// `first:last`.
fn port(p: &Json) -> Json {
    let Some(text) = p.as_str() else {
        return p.clone();
    };
    if let Ok(n) = text.parse::<u16>() {
        return n.into();
    }
    match text.split_once(':') {
        Some((a, b)) if a == b && a.parse::<u16>().is_ok() => {
            a.parse::<u16>().map_or(p.clone(), Json::from)
        }
        _ => p.clone(),
    }
}

/// `numorstring.Protocol` as Go writes it: a number, or a string that is one, as a number;
/// any other string as written.
fn protocol(p: &Json) -> Json {
    match p.as_str().map(str::parse::<u8>) {
        Some(Ok(n)) => n.into(),
        _ => p.clone(),
    }
}

/// A JSON object being written into a string.
struct Obj<'a> {
    out: &'a mut String,
    first: bool,
}

impl<'a> Obj<'a> {
    fn new(out: &'a mut String) -> Self {
        out.push('{');
        Obj { out, first: true }
    }

    fn key(&mut self, k: &str) {
        if !self.first {
            self.out.push(',');
        }
        self.first = false;
        self.out.push_str(&Json::from(k).to_string());
        self.out.push(':');
    }

    fn value(&mut self, k: &str, v: &Json) {
        self.key(k);
        self.out.push_str(&v.to_string());
    }

    fn end(self) {
        self.out.push('}');
    }
}
