//! The KV model: keys, values, updates and sync status, as the felix syncer sees them.
//!
//! On the wire and in caches a key travels as its [`KeyPath`] (a validated Calico path) and a
//! value as [`EncodedValue`] (opaque bytes): that is what the digest hashes, what a tier server
//! relays, and what costs nothing to clone. [`Key`] and [`Value`] are the typed views, built
//! on demand with [`KeyPath::key`] and [`EncodedValue::decode`].

mod key;
mod rule;
mod value;

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub use key::{
    BlockKey, GlobalConfigKey, HostConfigKey, HostEndpointKey, HostIpKey, IpPoolKey, Key, KeyError,
    KeyType, MAX_OPAQUE_PATH, NetworkSetKey, OpaqueKey, PathClass, PolicyKey, PolicyKind,
    ProfileKey, ResourceKey, ResourceKind, WorkloadEndpointKey,
};
pub use rule::{
    Action, EntityRule, HttpMatch, Icmp, Port, Protocol, Rule, RuleDetail, ServiceMatch,
};
pub use value::{
    AllocationAttribute, AllocationTable, Block, EncapMode, EndpointPort, HostEndpoint, IpNat,
    IpPool, Labels, Mac, MacParseError, NetworkSet, Node, NodeAddress, NodeDetail, NodeInterface,
    NodeMeta, OrchRef, Policy, PolicyType, ProfileDetail, ProfileLabels, ProfileRules, Resource,
    ResourceDetail, Value, WorkloadEndpoint,
};

/// A validated key path. Cheap to clone (shared).
///
/// Built here ([`KeyPath::new`]) it always parses as a [`Key`] this build knows. Decoded from
/// the wire it may also be a well-formed path of a kind this build does not know (a newer
/// peer's), whose [`KeyPath::key`] is [`Key::Opaque`]: carried, counted in digests, never
/// reported (docs/protocol.md, "Adding a kind").
///
/// Ordered and compared as the path string, so caches sort keys the way etcd does.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KeyPath(Arc<str>);

impl KeyPath {
    /// Validates `path` as a key path.
    ///
    /// # Errors
    ///
    /// [`KeyError`] when `path` is not a key path this build knows (see [`Key::validate`]); a path
    /// of a kind it does not know is refused too, unlike [`from_wire`](Self::from_wire).
    pub fn new(path: &str) -> Result<Self, KeyError> {
        Key::validate(path)?;
        Ok(Self(Arc::from(path)))
    }

    /// The path.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Validates a path received from a peer: a key this build knows, or a well-formed path
    /// of a kind it does not know (see [`Key::classify`]).
    ///
    /// # Errors
    ///
    /// [`KeyError`] for a malformed path: not under `/calico/`, an empty segment, a bad escape, or
    /// a bad CIDR in a kind this build knows.
    pub fn from_wire(path: &str) -> Result<Self, KeyError> {
        Key::classify(path)?;
        Ok(Self(Arc::from(path)))
    }

    /// The typed key: [`Key::Opaque`] for a path of a kind this build does not know.
    pub fn key(&self) -> Key {
        Key::parse(&self.0).unwrap_or_else(|_| {
            Key::Opaque(OpaqueKey {
                path: self.0.to_string(),
            })
        })
    }

    /// The key's type, without building the key.
    pub fn key_type(&self) -> KeyType {
        match Key::classify(&self.0) {
            Ok(PathClass::Known { key_type, .. }) => key_type,
            _ => KeyType::Opaque,
        }
    }

    /// Whether a protocol version 1 peer knows this key's kind: false for kinds added later
    /// and for kinds this build does not know.
    pub fn in_v1(&self) -> bool {
        matches!(
            Key::classify(&self.0),
            Ok(PathClass::Known { in_v1: true, .. })
        )
    }
}

impl From<&Key> for KeyPath {
    fn from(key: &Key) -> Self {
        // A key's Display is its canonical path, which parses back to the same key.
        Self(Arc::from(key.to_string()))
    }
}

impl From<Key> for KeyPath {
    fn from(key: Key) -> Self {
        Self::from(&key)
    }
}

impl fmt::Display for KeyPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for KeyPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl std::borrow::Borrow<str> for KeyPath {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl Serialize for KeyPath {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for KeyPath {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = KeyPath;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a Calico key path")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<KeyPath, E> {
                KeyPath::from_wire(v).map_err(E::custom)
            }
        }
        d.deserialize_str(V)
    }
}

/// A serialized [`Value`]: opaque bytes, shared, compared byte for byte.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct EncodedValue(Bytes);

/// A value that could not be decoded or does not belong under its key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ValueError {
    /// The bytes are not a value of this protocol version.
    #[error("value does not decode: {0}")]
    Decode(#[source] postcard::Error),
    /// The value decoded but is of another type than its key.
    #[error("a {value} value cannot be stored under a {key} key")]
    WrongType {
        /// The key's type.
        key: KeyType,
        /// The value's type.
        value: KeyType,
    },
}

impl EncodedValue {
    /// Serializes a typed value: the value, then its tail when it has one.
    ///
    /// Fields added to a value type after version 1 travel as a tail after the version 1
    /// encoding (a Node's [`NodeDetail`], a Block's
    /// [`AllocationTable`], a Resource's
    /// [`ResourceDetail`], a ProfileLabels'
    /// [`ProfileDetail`], a Policy's or ProfileRules' rules'
    /// [`RuleDetail`]s). A decoder that predates them stops
    /// before the tail (postcard ignores trailing bytes); [`EncodedValue::decode`] reads it
    /// when present and leaves it empty when not, so servers and clients of either age
    /// understand each other (docs/protocol.md, "Compatibility rules").
    pub fn encode(value: &Value) -> Self {
        // Serializing these types into a Vec cannot fail: no maps with non-string keys, no
        // unsupported serde types, and Vec output never runs out of space.
        let mut out = postcard::to_allocvec(value).unwrap_or_default();
        match value {
            Value::Node(n) if !n.detail.is_empty() => {
                out = n.detail.encode_tail(out).unwrap_or_default();
            }
            Value::Block(b) if !b.table.is_empty() => {
                out = postcard::to_extend(&b.table, out).unwrap_or_default();
            }
            Value::Resource(r) if !r.detail.is_empty() => {
                out = r.detail.encode_tail(out).unwrap_or_default();
            }
            Value::ProfileLabels(p) if !p.detail.is_empty() => {
                out = postcard::to_extend(&p.detail, out).unwrap_or_default();
            }
            Value::Policy(p) => {
                let rules = p.inbound_rules.iter().chain(&p.outbound_rules);
                out = rule::encode_rules_tail(rules, out).unwrap_or_default();
            }
            Value::ProfileRules(p) => {
                let rules = p.inbound_rules.iter().chain(&p.outbound_rules);
                out = rule::encode_rules_tail(rules, out).unwrap_or_default();
            }
            _ => {}
        }
        // Values live in the cache for as long as their key does: hold exactly their bytes
        // (`Bytes` keeps a `Vec`'s whole capacity, and the `Vec` grew by doubling).
        out.shrink_to_fit();
        Self(Bytes::from(out))
    }

    /// Wraps bytes received from elsewhere (a relay, a cache file) without checking them.
    pub fn from_bytes(bytes: Bytes) -> Self {
        Self(bytes)
    }

    /// Decodes the typed value, with its tail when it has one (see [`EncodedValue::encode`]).
    /// Bytes after what this version knows are ignored: they belong to a newer version.
    ///
    /// # Errors
    ///
    /// [`ValueError::Decode`] when the bytes (or a tail this version knows) are not a value of
    /// this protocol.
    pub fn decode(&self) -> Result<Value, ValueError> {
        let (mut value, tail) =
            postcard::take_from_bytes::<Value>(&self.0).map_err(ValueError::Decode)?;
        if !tail.is_empty() {
            match &mut value {
                Value::Node(n) => {
                    n.detail = NodeDetail::decode_tail(tail).map_err(ValueError::Decode)?;
                }
                Value::Block(b) => {
                    b.table = postcard::take_from_bytes(tail)
                        .map_err(ValueError::Decode)?
                        .0;
                }
                Value::Resource(r) => {
                    r.detail = ResourceDetail::decode_tail(tail).map_err(ValueError::Decode)?;
                }
                Value::ProfileLabels(p) => {
                    p.detail = postcard::take_from_bytes(tail)
                        .map_err(ValueError::Decode)?
                        .0;
                }
                Value::Policy(p) => {
                    let rules = p.inbound_rules.iter_mut().chain(&mut p.outbound_rules);
                    rule::decode_rules_tail(rules.collect(), tail).map_err(ValueError::Decode)?;
                }
                Value::ProfileRules(p) => {
                    let rules = p.inbound_rules.iter_mut().chain(&mut p.outbound_rules);
                    rule::decode_rules_tail(rules.collect(), tail).map_err(ValueError::Decode)?;
                }
                _ => {}
            }
        }
        Ok(value)
    }

    /// Decodes the value and checks that it belongs under `key`.
    ///
    /// # Errors
    ///
    /// As [`decode`](Self::decode), and [`ValueError::WrongType`] for a value of another type than
    /// `key`'s.
    pub fn decode_for(&self, key: &Key) -> Result<Value, ValueError> {
        let value = self.decode()?;
        let fits = match (key, &value) {
            (Key::Resource(k), Value::Node(_)) => k.kind == ResourceKind::Node,
            (Key::Resource(k), Value::Resource(_)) => k.kind != ResourceKind::Node,
            (_, v) => v.fits(key.key_type()),
        };
        if fits {
            Ok(value)
        } else {
            Err(ValueError::WrongType {
                key: key.key_type(),
                value: value.key_type(),
            })
        }
    }

    /// The raw bytes (what the digest hashes).
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The shared buffer.
    pub fn bytes(&self) -> &Bytes {
        &self.0
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the encoding is empty (never true for a real value).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<&Value> for EncodedValue {
    fn from(v: &Value) -> Self {
        Self::encode(v)
    }
}

impl fmt::Debug for EncodedValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EncodedValue({} bytes)", self.0.len())
    }
}

impl Serialize for EncodedValue {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for EncodedValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = EncodedValue;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("value bytes")
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<EncodedValue, E> {
                if v.is_empty() {
                    return Err(E::custom("empty value bytes"));
                }
                Ok(EncodedValue(Bytes::copy_from_slice(v)))
            }
        }
        d.deserialize_bytes(V)
    }
}

/// A datastore revision: etcd's mod revision, or a Kubernetes resourceVersion.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Revision(pub u64);

impl fmt::Display for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// What an update did to its key, relative to what the receiver had.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum UpdateKind {
    /// The key was absent and now has a value.
    New,
    /// The key had a value and has a new one.
    Updated,
    /// The key had a value and is now absent.
    Deleted,
}

/// One change to one key. `value` is `None` exactly when `kind` is [`UpdateKind::Deleted`];
/// decoding rejects anything else. As in Calico, decide add versus delete from the presence
/// of a value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "UpdateWire")]
pub struct Update {
    /// The key.
    pub key: KeyPath,
    /// The new value, or `None` for a deletion.
    pub value: Option<EncodedValue>,
    /// Datastore revision of this change.
    pub revision: Revision,
    /// New, updated or deleted.
    pub kind: UpdateKind,
}

impl Update {
    /// An upsert; `kind` is `New` or `Updated`.
    pub fn put(key: KeyPath, value: EncodedValue, revision: Revision, kind: UpdateKind) -> Self {
        let kind = if kind == UpdateKind::Deleted {
            UpdateKind::Updated
        } else {
            kind
        };
        Self {
            key,
            value: Some(value),
            revision,
            kind,
        }
    }

    /// A deletion.
    pub fn delete(key: KeyPath, revision: Revision) -> Self {
        Self {
            key,
            value: None,
            revision,
            kind: UpdateKind::Deleted,
        }
    }

    /// Decodes the value (if any) and checks it belongs under the key.
    ///
    /// # Errors
    ///
    /// As [`EncodedValue::decode_for`].
    pub fn decode_value(&self) -> Result<Option<Value>, ValueError> {
        match &self.value {
            None => Ok(None),
            Some(v) => v.decode_for(&self.key.key()).map(Some),
        }
    }
}

/// Same fields and order as [`Update`], checked before it becomes one.
#[derive(Deserialize)]
struct UpdateWire {
    key: KeyPath,
    value: Option<EncodedValue>,
    revision: Revision,
    kind: UpdateKind,
}

impl TryFrom<UpdateWire> for Update {
    type Error = &'static str;
    fn try_from(w: UpdateWire) -> Result<Self, Self::Error> {
        match (&w.value, w.kind) {
            (None, UpdateKind::Deleted) | (Some(_), UpdateKind::New | UpdateKind::Updated) => {
                Ok(Update {
                    key: w.key,
                    value: w.value,
                    revision: w.revision,
                    kind: w.kind,
                })
            }
            (None, _) => Err("update without a value is not a deletion"),
            (Some(_), _) => Err("deletion carries a value"),
        }
    }
}

/// The syncer's status, as Calico's `api.SyncStatus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SyncStatus {
    /// Not connected to the datastore yet.
    WaitForDatastore,
    /// Loading a complete snapshot; state is incomplete.
    ResyncInProgress,
    /// State is complete and current; deltas follow.
    InSync,
}

impl fmt::Display for SyncStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SyncStatus::WaitForDatastore => "wait-for-datastore",
            SyncStatus::ResyncInProgress => "resync-in-progress",
            SyncStatus::InSync => "in-sync",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node_with_detail() -> Value {
        Value::Node(Node {
            ipv4_address: Some("192.0.2.1/24".parse().unwrap()),
            labels: [("a".to_owned(), "b".to_owned())].into(),
            detail: NodeDetail {
                addresses: vec![NodeAddress {
                    address: "192.0.2.1".into(),
                    kind: "InternalIP".into(),
                }],
                route_reflector_cluster_id: "224.0.0.1".into(),
                meta: NodeMeta {
                    uid: "3f1c7d2e-0b4a-4c8e-9f10-2a3b4c5d6e7f".into(),
                    creation_timestamp: "2025-01-02T03:04:05Z".into(),
                    annotations: [("projectcalico.org/note".to_owned(), "x".to_owned())].into(),
                    kube_labels: true,
                    invalid_as_v3: true,
                },
                ..NodeDetail::default()
            },
            ..Node::default()
        })
    }

    /// A node's second tail (its metadata and its validity as a v3 Node) is written only when
    /// something in it is set, so a node without them encodes as before it existed; one with
    /// nothing but the validity flag writes both tails and reads back.
    #[test]
    fn node_second_tail_is_written_only_when_set() {
        let Value::Node(mut n) = node_with_detail() else {
            unreachable!()
        };
        let with_meta = EncodedValue::encode(&Value::Node(n.clone()));
        n.detail.meta = NodeMeta::default();
        let without = EncodedValue::encode(&Value::Node(n.clone()));
        let mut expected = postcard::to_allocvec(&Value::Node(n.clone())).unwrap();
        expected = postcard::to_extend(&n.detail, expected).unwrap();
        assert_eq!(without.as_bytes(), &expected[..]);
        assert!(with_meta.len() > without.len());
        let only_flag = Value::Node(Node {
            detail: NodeDetail {
                meta: NodeMeta {
                    invalid_as_v3: true,
                    ..NodeMeta::default()
                },
                ..NodeDetail::default()
            },
            ..Node::default()
        });
        assert_eq!(
            EncodedValue::encode(&only_flag).decode().unwrap(),
            only_flag
        );
    }

    fn block_with_table() -> Value {
        Value::Block(Block {
            cidr: "10.0.1.0/30".parse().unwrap(),
            affinity: Some("host:node-1".into()),
            allocated: 1,
            deleted: false,
            table: AllocationTable {
                allocations: Some(vec![Some(0), None, None, None]),
                unallocated: Some(vec![1, 2, 3]),
                attributes: Some(vec![AllocationAttribute {
                    handle_id: Some("k8s-pod-network.abc".into()),
                    secondary: [("node".to_owned(), "node-2".to_owned())].into(),
                    alternate: Labels::new(),
                }]),
                sequence_number: 7,
                ..AllocationTable::default()
            },
        })
    }

    fn resource_with_detail() -> Value {
        Value::Resource(Resource {
            labels: [("a".to_owned(), "b".to_owned())].into(),
            spec_json: r#"{"node":"n1"}"#.into(),
            detail: ResourceDetail {
                generation: 3,
                ..ResourceDetail::default()
            },
        })
    }

    /// A profile's labels with the rest of its v3 Profile.
    fn profile_labels_with_detail() -> Value {
        Value::ProfileLabels(ProfileLabels {
            labels: [("pcns.projectcalico.org/name".to_owned(), "prod".to_owned())].into(),
            detail: ProfileDetail {
                uid: "0c8c26a6-c6a6-44c6-adc6-ac2646b46c1c".into(),
                creation_timestamp: "2025-01-02T03:04:05Z".into(),
                ingress_json: r#"[{"action":"Allow","source":{},"destination":{}}]"#.into(),
                ..ProfileDetail::default()
            },
        })
    }

    /// A resource with both of its tails (a LiveMigration's uid, creation time, annotations).
    fn resource_with_object_detail() -> Value {
        Value::Resource(Resource {
            labels: Labels::new(),
            spec_json: r#"{"target":{"selector":"a == 'b'"}}"#.into(),
            detail: ResourceDetail {
                generation: 0,
                uid: "c05275a7-f85b-42d5-a1d0-acdd49c26d57".into(),
                creation_timestamp: "2026-11-24T23:45:24Z".into(),
                annotations: [("k".to_owned(), "v".to_owned())].into(),
            },
        })
    }

    /// A node's second tail (its metadata): read by a decoder that knows it, ignored by one
    /// that knows only the first, which reads that as before; absent when there is nothing
    /// to put in it; and a node with metadata alone still writes the (empty) first tail
    /// before it.
    #[test]
    fn the_node_tail_grows_compatibly() {
        let v = node_with_detail();
        let Value::Node(mut n) = v.clone() else {
            unreachable!()
        };
        let meta = std::mem::take(&mut n.detail.meta);
        let first_only = EncodedValue::encode(&Value::Node(n.clone()));
        assert_eq!(first_only.decode().unwrap(), Value::Node(n.clone()));
        let both = EncodedValue::encode(&v);
        assert_eq!(both.decode().unwrap(), v);
        assert!(both.as_bytes().starts_with(first_only.as_bytes()));
        // What a build that knows only the first tail does with the value.
        let (_, tail) = postcard::take_from_bytes::<Value>(both.as_bytes()).unwrap();
        let (old, _) = postcard::take_from_bytes::<NodeDetail>(tail).unwrap();
        assert_eq!(old, n.detail);

        let metadata_only = Value::Node(Node {
            detail: NodeDetail {
                meta,
                ..NodeDetail::default()
            },
            ..Node::default()
        });
        assert_eq!(
            EncodedValue::encode(&metadata_only).decode().unwrap(),
            metadata_only
        );
    }

    /// A resource's second tail: read by a decoder that knows it, ignored by one that knows
    /// only the generation (which reads the generation from it), and absent (the bytes are as
    /// before it existed) when there is nothing to put in it.
    #[test]
    fn the_resource_tail_grows_compatibly() {
        let v = resource_with_object_detail();
        let both = EncodedValue::encode(&v);
        assert_eq!(both.decode().unwrap(), v);
        let Value::Resource(r) = &v else {
            unreachable!()
        };
        // What a build that knows only the generation does with the tail.
        let (_, tail) = postcard::take_from_bytes::<Value>(both.as_bytes()).unwrap();
        // (The generation tail is a struct of one i64, encoded as the i64.)
        let (old, _) = postcard::take_from_bytes::<i64>(tail).unwrap();
        assert_eq!(old, r.detail.generation);

        let generation_only = resource_with_detail();
        let Value::Resource(g) = &generation_only else {
            unreachable!()
        };
        let bytes = EncodedValue::encode(&generation_only);
        let mut expected = postcard::to_allocvec(&generation_only).unwrap();
        expected = postcard::to_extend(&g.detail.generation, expected).unwrap();
        assert_eq!(bytes.as_bytes(), &expected[..], "no second tail when empty");
        assert_eq!(bytes.decode().unwrap(), generation_only);
    }

    /// Rules that carry what Calico carries beyond the match: in the second rule only, so the
    /// tail holds an empty detail for the first.
    fn rules_with_detail() -> (Vec<Rule>, Vec<Rule>) {
        let mut numbered = Rule::new(Action::Allow);
        numbered.protocol = Some(Protocol::Tcp);
        numbered.detail = RuleDetail {
            orig_src_selector: "role == 'db'".into(),
            protocol_number: true,
            annotations: [("name".to_owned(), "allow-db".to_owned())].into(),
            ..RuleDetail::default()
        };
        (vec![Rule::new(Action::Deny)], vec![numbered])
    }

    fn policy_with_rule_detail() -> Value {
        let (inbound_rules, outbound_rules) = rules_with_detail();
        Value::Policy(Policy {
            namespace: "prod".into(),
            tier: "default".into(),
            order: Some(10.0),
            selector: "all()".into(),
            types: vec![PolicyType::Ingress, PolicyType::Egress],
            inbound_rules,
            outbound_rules,
            untracked: false,
            pre_dnat: false,
            apply_on_forward: false,
            performance_hints: vec![],
            staged_action: None,
        })
    }

    fn profile_rules_with_rule_detail() -> Value {
        let (inbound_rules, outbound_rules) = rules_with_detail();
        Value::ProfileRules(ProfileRules {
            inbound_rules,
            outbound_rules,
        })
    }

    /// The tail: a version 1 decoder (postcard's `from_bytes`, which ignores trailing bytes)
    /// reads a value with a tail as the value without it; ours reads both forms.
    #[test]
    fn value_tails_are_compatible_both_ways() {
        for v in [
            node_with_detail(),
            block_with_table(),
            resource_with_object_detail(),
            policy_with_rule_detail(),
            profile_rules_with_rule_detail(),
            profile_labels_with_detail(),
        ] {
            let with_tail = EncodedValue::encode(&v);
            assert_eq!(with_tail.decode().unwrap(), v);

            let mut bare = v.clone();
            match &mut bare {
                Value::Node(n) => n.detail = NodeDetail::default(),
                Value::Block(b) => b.table = AllocationTable::default(),
                Value::Resource(r) => r.detail = ResourceDetail::default(),
                Value::ProfileLabels(p) => p.detail = ProfileDetail::default(),
                Value::Policy(p) => {
                    for r in p.inbound_rules.iter_mut().chain(&mut p.outbound_rules) {
                        r.detail = RuleDetail::default();
                    }
                }
                Value::ProfileRules(p) => {
                    for r in p.inbound_rules.iter_mut().chain(&mut p.outbound_rules) {
                        r.detail = RuleDetail::default();
                    }
                }
                _ => unreachable!(),
            }
            let old_reader: Value = postcard::from_bytes(with_tail.as_bytes()).unwrap();
            assert_eq!(old_reader, bare, "a version 1 decoder ignores the tail");

            let v1_bytes = postcard::to_allocvec(&bare).unwrap();
            assert_eq!(EncodedValue::encode(&bare).as_bytes(), &v1_bytes[..]);
            assert!(with_tail.len() > v1_bytes.len());
            let from_old = EncodedValue::from_bytes(Bytes::from(v1_bytes))
                .decode()
                .unwrap();
            assert_eq!(
                from_old, bare,
                "a version 1 value decodes with an empty tail"
            );

            // A newer version's longer tail is read as far as this one knows it.
            let mut longer = with_tail.as_bytes().to_vec();
            longer.extend_from_slice(&[1, 2, 3]);
            let newer = EncodedValue::from_bytes(Bytes::from(longer))
                .decode()
                .unwrap();
            assert_eq!(newer, v);
        }
        // A tail that does not decode is an error, not a silently empty table.
        let mut bad = EncodedValue::encode(&block_with_table())
            .as_bytes()
            .to_vec();
        bad.truncate(bad.len() - 2);
        assert!(EncodedValue::from_bytes(Bytes::from(bad)).decode().is_err());
    }

    #[test]
    fn key_path_validates_and_orders_like_strings() {
        assert!(KeyPath::new("/calico/v1/nope").is_err());
        let a = KeyPath::new("/calico/v1/config/A").unwrap();
        let b = KeyPath::new("/calico/v1/config/B").unwrap();
        assert!(a < b);
        assert_eq!(a.key_type(), KeyType::GlobalConfig);
    }

    #[test]
    fn invalid_key_path_on_the_wire_is_a_decode_error() {
        let bytes = postcard::to_allocvec("/not/a/key").unwrap();
        assert!(postcard::from_bytes::<KeyPath>(&bytes).is_err());
    }

    #[test]
    fn update_kind_must_agree_with_value_presence() {
        let key = KeyPath::new("/calico/v1/Ready").unwrap();
        let good = Update::delete(key.clone(), Revision(3));
        let bytes = postcard::to_allocvec(&good).unwrap();
        assert_eq!(postcard::from_bytes::<Update>(&bytes).unwrap(), good);

        let bad = Update {
            key,
            value: None,
            revision: Revision(3),
            kind: UpdateKind::New,
        };
        let bytes = postcard::to_allocvec(&bad).unwrap();
        assert!(postcard::from_bytes::<Update>(&bytes).is_err());
    }

    #[test]
    fn value_must_fit_its_key() {
        let key = Key::parse("/calico/v1/Ready").unwrap();
        let v = EncodedValue::encode(&Value::ReadyFlag(true));
        assert_eq!(v.decode_for(&key).unwrap(), Value::ReadyFlag(true));
        let wrong = EncodedValue::encode(&Value::Config("x".into()));
        assert!(matches!(
            wrong.decode_for(&key),
            Err(ValueError::WrongType { .. })
        ));
        let node = Key::parse("/calico/resources/v3/projectcalico.org/nodes/n1").unwrap();
        let tier = Key::parse("/calico/resources/v3/projectcalico.org/tiers/t1").unwrap();
        let v = EncodedValue::encode(&Value::Node(Node::default()));
        assert!(v.decode_for(&node).is_ok());
        assert!(v.decode_for(&tier).is_err());
        let cfg = Key::parse("/calico/v1/host/h/config/X").unwrap();
        assert!(
            EncodedValue::encode(&Value::Config("1".into()))
                .decode_for(&cfg)
                .is_ok()
        );
    }
}
