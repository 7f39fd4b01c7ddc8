//! Our cache's KVs in the form unmodified Calico clients expect over Calico's Typha protocol:
//! libcalico-go's default key paths and the JSON (or raw strings) libcalico-go writes for each
//! model type, routed to the four syncer types (`felix`, `bgp`, `tunnel-ip-allocation`,
//! `node-status`).
//!
//! Two entry points, both pure:
//!
//! - [`calico_kvs`]: what one of our KVs is in a Calico snapshot (puts only, update type new).
//! - [`calico_changes`]: what one change of our cache (a key, the value it had, the value it
//!   has) is as Calico updates: puts with new/updated, deletions, and nothing for a change
//!   Calico cannot see (a no-op, as Typha drops them).
//!
//! Each result is tagged with the [`SyncerSet`] that receives it and carries its value as
//! shared [`Bytes`], so a server translates each cache update once per breadcrumb (when the
//! first Calico client reaches it: `cache::calico`), and hands the same bytes to every syncer
//! type and every client. The cost is one JSON encoding per Calico KV per change (two for an
//! update: the old value is encoded again to tell a no-op and to find keys that went away),
//! linear in the value's size.
//!
//! The files: `route` is the table (which Calico keys each of our keys stands for and who
//! receives them); `endpoint`, `policy` with `rule`, `profile`, `network`, `host` and
//! `resource` write the values, each mirroring the Go types named in its documentation; `path`
//! writes and reads the key paths; `json` is a writer that produces Go's bytes; `kv` is the
//! vocabulary.
//! `docs/calico-conversion.md` ("What each Calico syncer type receives") lists what is sent
//! and where the values differ from Calico's.

mod endpoint;
mod host;
mod json;
mod kv;
mod network;
mod path;
mod policy;
mod profile;
mod resource;
mod route;
mod rule;
#[cfg(test)]
mod tests;

use bytes::Bytes;
use typha_protocol::model::{EncodedValue, Key, KeyPath, UpdateKind, Value, ValueError};

pub use self::host::{KUBE_LABELS, go_string_map};
pub use self::kv::{CalicoKv, DEFAULT_ALLOW_PROFILE, Driver, SyncerSet, SyncerType};
pub use self::path::CalicoKey;
pub use self::route::receivers;
use self::route::{Entry, entries, share};

/// What every felix snapshot holds besides the cache's KVs, as Calico's drivers send it: the
/// default-allow profile's rules and its v3 resource (revision `1` in Calico's). A stored
/// profile of that name is ignored, as Calico's drivers ignore it.
pub fn builtin_kvs(syncer: SyncerType) -> Vec<CalicoKv> {
    if syncer != SyncerType::Felix {
        return Vec::new();
    }
    [
        (
            CalicoKey::ProfileRules(DEFAULT_ALLOW_PROFILE.into()),
            &br#"{"inbound_rules":[{"action":"allow"}],"outbound_rules":[{"action":"allow"}]}"#[..],
        ),
        (
            CalicoKey::Resource {
                plural: "profiles".into(),
                namespace: None,
                name: DEFAULT_ALLOW_PROFILE.into(),
            },
            &br#"{"kind":"Profile","apiVersion":"projectcalico.org/v3","metadata":{"name":"projectcalico-default-allow","creationTimestamp":null},"spec":{"ingress":[{"action":"Allow","source":{},"destination":{}}],"egress":[{"action":"Allow","source":{},"destination":{}}]}}"#[..],
        ),
    ]
    .into_iter()
    .map(|(key, value)| CalicoKv {
        syncers: SyncerSet::of(&[SyncerType::Felix]),
        key: key.path().into(),
        value: Some(Bytes::from_static(value)),
        kind: UpdateKind::New,
        legacy_key: None,
    })
    .collect()
}

/// The Calico KVs `value` under `key` stands for in a snapshot: every one a put of update type
/// new. Empty when no syncer type receives the key (or the value is not of the key's type).
pub fn calico_kvs(key: &Key, value: &Value) -> Vec<CalicoKv> {
    entries(key, Some(value))
        .iter()
        .filter(|e| e.value.is_some())
        .map(|e| kv(e, UpdateKind::New))
        .collect()
}

/// The Calico updates one change of our cache stands for: `key` held `previous` (`None`:
/// absent) and now holds `current` (`None`: deleted).
///
/// - A Calico KV whose bytes are unchanged is left out (Typha drops no-op updates too).
/// - A KV the previous value produced and the current one does not is deleted.
/// - A put is `Updated` when the previous value produced the same key, else `New`.
/// - A deletion of a key that was absent is passed on (Typha passes every deletion on),
///   except where the key alone does not name the Calico key (block affinities).
pub fn calico_changes(
    key: &Key,
    previous: Option<&Value>,
    current: Option<&Value>,
) -> Vec<CalicoKv> {
    let before = match previous {
        Some(v) => entries(key, Some(v)),
        None => Vec::new(),
    };
    let after = match current {
        Some(v) => entries(key, Some(v)),
        None if previous.is_none() => entries(key, None),
        None => Vec::new(),
    };
    let held = |k: &path::CalicoKey| before.iter().find(|b| &b.key == k && b.value.is_some());
    let mut out = Vec::new();
    for a in &after {
        match (&a.value, held(&a.key)) {
            (Some(v), Some(b)) if b.value.as_ref() == Some(v) && b.legacy == a.legacy => {}
            (Some(_), Some(_)) => out.push(kv(a, UpdateKind::Updated)),
            (Some(_), None) => out.push(kv(a, UpdateKind::New)),
            // A deletion where there was nothing: pass it on only when the change itself is a
            // deletion of an unknown value (as Typha would), not when a put merely lacks a
            // derived key (a node without WireGuard).
            (None, None) if previous.is_none() && current.is_none() => {
                out.push(kv(a, UpdateKind::Deleted))
            }
            // Nothing to put, or a key that went away, which the loop below deletes.
            (None, _) => {}
        }
    }
    for b in &before {
        let still = after.iter().any(|a| a.key == b.key && a.value.is_some());
        if b.value.is_some() && !still {
            let mut gone = b.clone();
            gone.value = None;
            out.push(kv(&gone, UpdateKind::Deleted));
        }
    }
    out
}

/// [`calico_changes`] on the cache's encoded form. Fails when a value does not decode as a
/// value of its key's type (the cache never holds such a value).
pub fn calico_changes_encoded(
    key: &KeyPath,
    previous: Option<&EncodedValue>,
    current: Option<&EncodedValue>,
) -> Result<Vec<CalicoKv>, ValueError> {
    let k = key.key();
    let previous = previous.map(|v| v.decode_for(&k)).transpose()?;
    let current = current.map(|v| v.decode_for(&k)).transpose()?;
    Ok(calico_changes(&k, previous.as_ref(), current.as_ref()))
}

fn kv(e: &Entry, kind: UpdateKind) -> CalicoKv {
    let (key, value, legacy_key) = share(e);
    CalicoKv {
        syncers: e.syncers,
        key,
        value,
        kind,
        legacy_key,
    }
}
