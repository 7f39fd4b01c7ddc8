//! The syncer pipeline between the datastore and the cache: conversion to KVs, validation
//! (an invalid value is logged, counted and becomes a deletion, as in Calico), and the record
//! of which keys each resource produced, so deletions and shrinking updates remove exactly
//! those keys.

use std::collections::{BTreeSet, HashMap};
use std::fmt;

use tracing::{debug, warn};
use typha_protocol::model::{EncodedValue, Key, KeyPath, KeyType, Revision, Value};
use typha_protocol::selector::{Selector, SelectorError};

use crate::calico::convert::{Effect, Note, convert_noting};
use crate::calico::v3::ResourceId;
use crate::datastore::{Invalid, Item, Listing};

/// Largest encoded value accepted; larger ones are invalid. Keeps every batch frame bounded.
pub const MAX_VALUE_BYTES: usize = 512 << 10;

/// One KV change for the cache: a value, or `None` to delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvChange {
    /// Key.
    pub key: KeyPath,
    /// New value; `None` deletes.
    pub value: Option<EncodedValue>,
    /// Datastore revision: the event's (a listing's, or the watch's position on Kubernetes),
    /// which the cache's own revision follows and our protocol sends.
    pub revision: Revision,
    /// The revision of the stored object the value came from, as Calico's syncer gives it
    /// with the KV: the key's own `mod_revision` on etcd, even in a listing; the object's
    /// `resourceVersion` on Kubernetes. `Revision(0)` for a deletion (Calico sends none).
    pub object_revision: Revision,
}

/// Conversion, validation and key ownership.
///
/// These two maps are all a server on etcd or Kubernetes holds per KV beside the cache, so
/// they are kept small: a resource is known by a 128-bit hash of its id (`Rid`), not by its
/// id, and the common resource that produces a single key keeps it without a `Vec`.
#[derive(Debug, Default)]
pub struct Pipeline {
    /// Keys each resource produced, in order.
    produced: HashMap<Rid, Keys>,
    /// Which resource currently provides each key (last writer wins).
    owner: HashMap<KeyPath, Rid>,
    /// Where an id is packed to be hashed, without an allocation per resource.
    scratch: Vec<u8>,
    /// Values that failed validation or conversion since start.
    pub invalid: u64,
}

/// A resource as the pipeline knows it: the xxh3-128 hash of its packed id (kind, namespace,
/// name; [`Rid::of`]). It replaced the packed id itself, one allocation of about 100 bytes
/// per resource (10 MB of the storm cluster's 128 MB of live heap: BENCHMARKS.md, "The live
/// heap at idle"). Two resources share a hash with a probability of about n² / 2¹²⁹: 10⁻²⁷
/// for a million resources, far below the chance of a memory error; if it ever happened, the
/// second would be taken for an update of the first, and the keys the first produced but
/// the second does not would be deleted.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Rid([u64; 2]);

impl Rid {
    /// The hash of `id`, packed into `scratch` first.
    fn of(id: &ResourceId, scratch: &mut Vec<u8>) -> Rid {
        Self::pack(id, scratch);
        let h = xxhash_rust::xxh3::xxh3_128(scratch);
        Rid([h as u64, (h >> 64) as u64])
    }

    /// Packs `id` into `out`: the kind's discriminant, then 0 for no namespace or
    /// 1 and the namespace's length (4 bytes, little-endian) and the namespace, then the name.
    fn pack(id: &ResourceId, out: &mut Vec<u8>) {
        out.clear();
        out.push(id.kind as u8);
        match &id.namespace {
            Some(ns) => {
                out.push(1);
                out.extend_from_slice(&u32::try_from(ns.len()).unwrap_or(0).to_le_bytes());
                out.extend_from_slice(ns.as_bytes());
            }
            None => out.push(0),
        }
        out.extend_from_slice(id.name.as_bytes());
    }
}

impl fmt::Debug for Rid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}{:016x}", self.0[1], self.0[0])
    }
}

impl Pipeline {
    /// A created or updated resource (or an invalid item).
    pub fn put(&mut self, revision: Revision, item: Item) -> Vec<KvChange> {
        match item {
            Ok(r) => {
                let id = r.id();
                let object = object_revision(&r, revision);
                match convert_noting(&r) {
                    Ok(c) => {
                        self.noted(&id, &c.notes);
                        self.replace(id, (revision, object), c.kvs)
                    }
                    Err(e) => {
                        warn!(resource = %id, field = %e.field, reason = %e.reason, "invalid resource; treated as deleted");
                        self.invalid += 1;
                        self.remove(&id, revision)
                    }
                }
            }
            Err(Invalid { id, reason }) => {
                self.invalid += 1;
                match id {
                    Some(id) => {
                        warn!(resource = %id, %reason, "invalid resource; treated as deleted");
                        self.remove(&id, revision)
                    }
                    None => {
                        warn!(%reason, "invalid object in the datastore; ignored");
                        Vec::new()
                    }
                }
            }
        }
    }

    /// Logs what a conversion left out, as Calico's processors log it; a KV left out as
    /// invalid is counted as one that fails validation is.
    fn noted(&mut self, id: &ResourceId, notes: &[Note]) {
        for n in notes {
            match n.effect {
                Effect::Skipped => {
                    warn!(resource = %id, field = %n.field, reason = %n.reason, "invalid entry skipped; the rest of the resource kept");
                }
                Effect::Dropped => {
                    warn!(resource = %id, field = %n.field, reason = %n.reason, "invalid part of a resource; its key treated as deleted");
                    self.invalid += 1;
                }
                Effect::Passed => {
                    debug!(resource = %id, field = %n.field, reason = %n.reason, "passed on as Calico does, although Calico's API refuses it");
                }
            }
        }
    }

    /// A deleted resource.
    pub fn delete(&mut self, revision: Revision, id: &ResourceId) -> Vec<KvChange> {
        self.remove(id, revision)
    }

    /// A complete listing: every resource's KVs, plus deletions for every key in `current`
    /// (what the cache holds now) that the listing no longer produces.
    pub fn resync<'a>(
        &mut self,
        listing: Listing,
        current: impl Iterator<Item = &'a KeyPath>,
    ) -> Vec<KvChange> {
        let revision = listing.revision;
        self.produced.clear();
        self.owner.clear();
        let mut out = Vec::new();
        for item in listing.items {
            out.extend(self.put(revision, item));
        }
        let live: BTreeSet<&KeyPath> = out
            .iter()
            .filter(|c| c.value.is_some())
            .map(|c| &c.key)
            .collect();
        let gone: Vec<KeyPath> = current.filter(|k| !live.contains(k)).cloned().collect();
        out.extend(gone.into_iter().map(|key| KvChange {
            key,
            value: None,
            revision,
            object_revision: Revision(0),
        }));
        out
    }

    /// `revision` is the event's revision and the object's (see [`KvChange`]).
    fn replace(
        &mut self,
        id: ResourceId,
        (revision, object): (Revision, Revision),
        kvs: Vec<(Key, Value)>,
    ) -> Vec<KvChange> {
        let rid = Rid::of(&id, &mut self.scratch);
        let mut out = Vec::with_capacity(kvs.len());
        let mut keys = Keys::default();
        for (key, value) in kvs {
            let path = KeyPath::from(&key);
            let encoded = EncodedValue::encode(&value);
            let value = match validate(&key, &value, &encoded) {
                Ok(()) => Some(encoded),
                Err(reason) => {
                    warn!(key = %path, resource = %id, %reason, "invalid value; sent as a deletion");
                    self.invalid += 1;
                    None
                }
            };
            if let Some(prev) = self.owner.insert(path.clone(), rid)
                && prev != rid
            {
                warn!(key = %path, resource = %id, "two resources produce the same key; the latest wins");
                if let Some(ks) = self.produced.get_mut(&prev) {
                    ks.retain(|k| k != &path);
                }
            }
            keys.push(path.clone());
            let object_revision = if value.is_some() { object } else { Revision(0) };
            out.push(KvChange {
                key: path,
                value,
                revision,
                object_revision,
            });
        }
        // Keys this resource produced before and no longer does.
        if let Some(old) = self.produced.insert(rid, keys) {
            let now: BTreeSet<KeyPath> = out.iter().map(|c| c.key.clone()).collect();
            let gone = old.into_iter().filter(|k| !now.contains(k));
            self.release(rid, gone, revision, &mut out);
        }
        out
    }

    fn remove(&mut self, id: &ResourceId, revision: Revision) -> Vec<KvChange> {
        let mut out = Vec::new();
        let rid = Rid::of(id, &mut self.scratch);
        if let Some(keys) = self.produced.remove(&rid) {
            self.release(rid, keys.into_iter(), revision, &mut out);
        }
        out
    }

    /// Deletes those of `keys` that `id` still owns.
    fn release(
        &mut self,
        id: Rid,
        keys: impl Iterator<Item = KeyPath>,
        revision: Revision,
        out: &mut Vec<KvChange>,
    ) {
        for key in keys {
            if self.owner.get(&key).is_some_and(|o| *o == id) {
                self.owner.remove(&key);
                out.push(KvChange {
                    key,
                    value: None,
                    revision,
                    object_revision: Revision(0),
                });
            }
        }
    }
}

/// The revision of the stored object `r` (see [`KvChange::object_revision`]): its
/// `resourceVersion` as the backend gives it (etcd: the key's `mod_revision`; Kubernetes: the
/// object's; the embedded store: the write's), `event` when it has none or one that is not a
/// number.
fn object_revision(r: &crate::calico::v3::Resource, event: Revision) -> Revision {
    r.metadata
        .resource_version
        .as_deref()
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|v| *v > 0)
        .map_or(event, Revision)
}

/// The keys one resource produced: nearly always one, kept without a `Vec`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
enum Keys {
    #[default]
    None,
    One(KeyPath),
    Many(Vec<KeyPath>),
}

impl Keys {
    fn push(&mut self, key: KeyPath) {
        *self = match std::mem::take(self) {
            Keys::None => Keys::One(key),
            Keys::One(first) => Keys::Many(vec![first, key]),
            Keys::Many(mut v) => {
                v.push(key);
                Keys::Many(v)
            }
        };
    }

    fn retain(&mut self, keep: impl Fn(&KeyPath) -> bool) {
        match self {
            Keys::None => {}
            Keys::One(k) => {
                if !keep(k) {
                    *self = Keys::None;
                }
            }
            Keys::Many(v) => v.retain(|k| keep(k)),
        }
    }
}

impl IntoIterator for Keys {
    type Item = KeyPath;
    type IntoIter = std::iter::Chain<std::option::IntoIter<KeyPath>, std::vec::IntoIter<KeyPath>>;

    fn into_iter(self) -> Self::IntoIter {
        let (one, many) = match self {
            Keys::None => (None, Vec::new()),
            Keys::One(k) => (Some(k), Vec::new()),
            Keys::Many(v) => (None, v),
        };
        one.into_iter().chain(many)
    }
}

/// Why a KV is invalid: what Felix's validator would reject.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidKv {
    /// The encoded value is over [`MAX_VALUE_BYTES`].
    #[error("value is {0} bytes, over the limit of {MAX_VALUE_BYTES}")]
    TooLarge(usize),
    /// The value is of another type than its key.
    #[error("a {value} value under a {key} key")]
    WrongType {
        /// The value's type.
        value: KeyType,
        /// The key's type.
        key: KeyType,
    },
    /// A workload endpoint without an interface name (Calico's Typha refuses only that; a
    /// name Linux would refuse is the agent's to refuse).
    #[error("workload endpoint has no interface name")]
    NoInterfaceName,
    /// A workload endpoint without any address.
    #[error("workload endpoint has no addresses")]
    NoAddresses,
    /// A selector that does not parse.
    #[error("{0}")]
    Selector(#[from] SelectorError),
    /// A policy order that is NaN or infinite.
    #[error("order is not a finite number")]
    Order,
    /// An empty config value.
    #[error("empty config value")]
    EmptyConfig,
}

/// Checks a KV the way Felix's validator would.
pub fn validate(key: &Key, value: &Value, encoded: &EncodedValue) -> Result<(), InvalidKv> {
    if encoded.len() > MAX_VALUE_BYTES {
        return Err(InvalidKv::TooLarge(encoded.len()));
    }
    if !value.fits(key.key_type()) {
        return Err(InvalidKv::WrongType {
            value: value.key_type(),
            key: key.key_type(),
        });
    }
    match value {
        Value::WorkloadEndpoint(w) => {
            if w.name.is_empty() {
                return Err(InvalidKv::NoInterfaceName);
            }
            if w.ipv4_nets.is_empty() && w.ipv6_nets.is_empty() {
                return Err(InvalidKv::NoAddresses);
            }
        }
        Value::Policy(p) => {
            Selector::parse(&p.selector)?;
            if p.order.is_some_and(|o| !o.is_finite()) {
                return Err(InvalidKv::Order);
            }
            for r in p.inbound_rules.iter().chain(&p.outbound_rules) {
                for s in [
                    &r.src.selector,
                    &r.dst.selector,
                    &r.src.not_selector,
                    &r.dst.not_selector,
                ] {
                    Selector::parse(s)?;
                }
            }
        }
        Value::Config(v) if v.is_empty() => return Err(InvalidKv::EmptyConfig),
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calico::v3::{Kind, Resource};

    fn wep(name: &str, node: &str, iface: &str) -> Resource {
        Resource::from_json(serde_json::json!({
            "apiVersion": "projectcalico.org/v3", "kind": "WorkloadEndpoint",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"orchestrator": "k8s", "node": node, "pod": name, "endpoint": "eth0",
                     "interfaceName": iface, "ipNetworks": ["10.0.0.1/32"]}
        }))
        .unwrap()
    }

    #[test]
    fn ids_of_every_kind_pack_and_hash_apart() {
        let mut buf = Vec::new();
        let mut packed = std::collections::HashSet::new();
        let mut hashed = std::collections::HashSet::new();
        for kind in Kind::ALL {
            for id in [
                ResourceId::global(kind, "a-name"),
                ResourceId::namespaced(kind, "ns", "pod/with/slashes"),
                ResourceId::namespaced(kind, "", ""),
                ResourceId::global(kind, ""),
                // A namespace and name split differently are different ids.
                ResourceId::namespaced(kind, "ab", "c"),
                ResourceId::namespaced(kind, "a", "bc"),
                ResourceId::global(kind, "ab"),
            ] {
                let rid = Rid::of(&id, &mut buf);
                assert!(packed.insert(buf.clone()), "{id} packs like another id");
                assert!(hashed.insert(rid), "{id} hashes like another id");
                assert_eq!(Rid::of(&id, &mut Vec::new()), rid, "{id}");
            }
        }
    }

    #[test]
    fn moving_an_endpoint_deletes_its_old_key() {
        let mut p = Pipeline::default();
        let a = p.put(Revision(1), Ok(wep("pod", "node-1", "cali1").into()));
        assert_eq!(a.len(), 1);
        let b = p.put(Revision(2), Ok(wep("pod", "node-2", "cali1").into()));
        assert_eq!(b.len(), 2);
        assert!(b[0].key.as_str().contains("node-2") && b[0].value.is_some());
        assert!(b[1].key.as_str().contains("node-1") && b[1].value.is_none());
        let c = p.delete(
            Revision(3),
            &ResourceId::namespaced(Kind::WorkloadEndpoint, "ns", "pod"),
        );
        assert_eq!(c.len(), 1);
        assert!(c[0].key.as_str().contains("node-2") && c[0].value.is_none());
    }

    #[test]
    fn invalid_values_become_deletions_and_are_counted() {
        let mut p = Pipeline::default();
        p.put(Revision(1), Ok(wep("pod", "node-1", "cali1").into()));
        let out = p.put(Revision(2), Ok(wep("pod", "node-1", "").into()));
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].value, None);
        assert_eq!(p.invalid, 1);
        // A resource that does not convert at all deletes what it produced before.
        let mut bad = wep("pod", "node-1", "cali1");
        if let crate::calico::v3::Spec::WorkloadEndpoint(s) = &mut bad.spec {
            s.ip_networks = vec!["garbage".into()];
        }
        p.put(Revision(3), Ok(wep("pod", "node-1", "cali1").into()));
        let out = p.put(Revision(4), Ok(bad.into()));
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].value, None);
        assert_eq!(p.invalid, 2);
    }

    /// An entry skipped where Calico skips it is logged, not counted; a KV of the resource left
    /// out as invalid (a profile's rules) is counted and deleted, the rest kept.
    #[test]
    fn skipped_entries_are_not_counted_and_dropped_parts_are() {
        let res = |v: serde_json::Value| Resource::from_json(v).unwrap();
        let mut p = Pipeline::default();
        let out = p.put(
            Revision(1),
            Ok(res(serde_json::json!({
                "apiVersion": "projectcalico.org/v3", "kind": "GlobalNetworkSet",
                "metadata": {"name": "feed"}, "spec": {"nets": ["10.1.0.0/16", "bogus"]}
            }))
            .into()),
        );
        assert!(out.len() == 1 && out[0].value.is_some());
        assert_eq!(p.invalid, 0);
        let profile = |ports: serde_json::Value| {
            res(serde_json::json!({
                "apiVersion": "projectcalico.org/v3", "kind": "Profile",
                "metadata": {"name": "prof"},
                "spec": {"labelsToApply": {"a": "b"}, "ingress": [{"action": "Allow",
                         "protocol": "TCP", "destination": {"ports": ports}}]}
            }))
        };
        let out = p.put(Revision(2), Ok(profile(serde_json::json!([80])).into()));
        assert_eq!(out.iter().filter(|c| c.value.is_some()).count(), 2);
        let out = p.put(Revision(3), Ok(profile(serde_json::json!([0])).into()));
        assert_eq!(p.invalid, 1);
        let deleted: Vec<&str> = out
            .iter()
            .filter(|c| c.value.is_none())
            .map(|c| c.key.as_str())
            .collect();
        assert_eq!(deleted, ["/calico/v1/policy/profile/prof/rules"]);
        assert!(
            out.iter()
                .any(|c| c.value.is_some() && c.key.as_str().ends_with("/labels"))
        );
    }

    #[test]
    fn resync_deletes_what_is_gone() {
        let mut p = Pipeline::default();
        let first = p.put(Revision(1), Ok(wep("a", "n", "cali1").into()));
        let gone_key = first[0].key.clone();
        let listing = Listing {
            revision: Revision(9),
            items: vec![Ok(wep("b", "n", "cali2").into())].into(),
        };
        let out = p.resync(listing, [gone_key.clone()].iter());
        assert_eq!(out.len(), 2);
        assert!(out[0].key.as_str().contains("/ns%2fb/") && out[0].value.is_some());
        assert_eq!(
            out[1],
            KvChange {
                key: gone_key,
                value: None,
                revision: Revision(9),
                object_revision: Revision(0),
            }
        );
    }
}
