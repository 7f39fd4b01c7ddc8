//! What Calico clients (Calico's own Typha protocol, `conn::calico`) get from the cache, encoded
//! once and shared by every Calico client of a syncer type:
//!
//! - [`CalicoCrumb`]: kept with each breadcrumb. Its changes are translated by
//!   [`libcalico`](crate::calico::libcalico) once, for all four syncer types, by the first
//!   Calico client that reaches the breadcrumb, from the breadcrumb alone: the writer keeps
//!   with each change the value its key held before ([`Breadcrumb::previous`]), which a
//!   translation needs (to tell an update from a new key, and which derived keys went away).
//!   So a Calico client never needs an older map version, however long the cluster was
//!   quiet before the change. Its `MsgKVs` is encoded once per syncer type and carriage
//!   (plain gob or a snappy chunk).
//! - [`CalicoSnapshots`]: the `MsgKVs` messages of a whole map version for one syncer type and
//!   carriage, sorted by Calico key, built by the first joiner and reused by every joiner
//!   until the version is at least 1 s old and a newer breadcrumb exists (Typha's rule).
//!
//! Every stream our server writes to a Calico client starts with the server preamble
//! ([`Side::preamble`]), so a value message has the same bytes on every connection.
//!
//! A message that cannot be encoded is a bug. It is logged at error where it happens and
//! counted (`typha_encode_errors_total{kind}`), and it is an error to whoever needed it
//! ([`Unencodable`]): a Calico connection that cannot be sent a change is dropped to resync,
//! never left without it. A cached value that does not decode (also a bug: the cache holds
//! only values it encoded) is treated as missing, as Typha's validation filter treats a value
//! it cannot accept, and logged and counted the same way.
//!
//! [`Breadcrumb::previous`]: super::breadcrumb::Breadcrumb::previous

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use super::held::Held;
use bytes::Bytes;
use tokio::time::Instant;
use typha_protocol::calico::messages::{
    self, Message, Revision as CalicoRevision, SerializedUpdate, Side, UpdateType,
};
use typha_protocol::calico::snappy::ChunkEncoder;
use typha_protocol::message::Seq;
use typha_protocol::model::{KeyPath, Revision, SyncStatus, Update, UpdateKind};

use crate::calico::libcalico::{
    CalicoKv, Driver, SyncerSet, SyncerType, builtin_kvs, calico_changes_encoded, calico_kvs,
    receivers,
};
use crate::metrics::{FrameKind, Metrics};

/// KVs per `MsgKVs` in a snapshot on a snappy stream (Typha's pre-encoded snapshot).
pub const SNAPSHOT_BATCH_SNAPPY: usize = 1000;
/// KVs per `MsgKVs` in a snapshot on a plain stream (Typha's `MaxMessageSize`).
pub const SNAPSHOT_BATCH_PLAIN: usize = 100;

/// A Calico message could not be encoded (a bug; logged at error where it happened).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a Calico {kind} message could not be encoded: {error}")]
pub struct Unencodable {
    /// The message's kind.
    pub kind: messages::MessageKind,
    /// Why.
    pub error: String,
}

/// How the gob stream to a client is carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Carriage {
    /// Plain gob value messages.
    Plain,
    /// Each message as its own snappy chunks (after a decoder restart into snappy).
    Snappy,
}

impl Carriage {
    /// A `MsgSyncStatus` telling `status`, for a stream of this carriage.
    pub fn sync_status(self, status: SyncStatus) -> Result<Bytes, Unencodable> {
        self.encode(&Message::SyncStatus(status.into()))
    }

    /// `msg` as bytes for a stream of this carriage that started with the server preamble.
    /// Our messages always encode; a failure is a bug, logged here at error.
    pub fn encode(self, msg: &Message) -> Result<Bytes, Unencodable> {
        self.encode_sized(msg).map(|(b, _)| b)
    }

    /// [`Carriage::encode`], with the size of the gob before compression.
    fn encode_sized(self, msg: &Message) -> Result<(Bytes, usize), Unencodable> {
        let gob = messages::encode(Side::Server, msg).map_err(|e| {
            tracing::error!(kind = %msg.kind(), error = %e, "a Calico message could not be encoded");
            Unencodable {
                kind: msg.kind(),
                error: e.to_string(),
            }
        })?;
        let raw = gob.len();
        Ok(match self {
            Carriage::Plain => (gob, raw),
            Carriage::Snappy => {
                // Room for the whole message, as a block may be stored uncompressed; but a
                // frame is usually a fraction of it (Calico's JSON values compress well), and
                // frames are kept: a snapshot's while it is current, a
                // breadcrumb's for the history. `Bytes::from` a Vec keeps its whole
                // capacity, so the frame is copied out at its own size.
                let mut out = Vec::with_capacity(gob.len() + 16);
                ChunkEncoder::new().encode(&gob, &mut out);
                (Bytes::copy_from_slice(&out), raw)
            }
        })
    }

    /// [`Carriage::encode`] of a shared frame of `kind`: counted as encoded, or as an encode
    /// error.
    fn encode_counted(
        self,
        msg: &Message,
        kind: FrameKind,
        m: &Metrics,
    ) -> Result<Bytes, Unencodable> {
        self.encode_counted_sized(msg, kind, m).map(|(b, _)| b)
    }

    /// [`Carriage::encode_counted`], with the size of the gob before compression.
    fn encode_counted_sized(
        self,
        msg: &Message,
        kind: FrameKind,
        m: &Metrics,
    ) -> Result<(Bytes, usize), Unencodable> {
        match self.encode_sized(msg) {
            Ok((b, raw)) => Ok((m.counted(kind, b), raw)),
            Err(e) => {
                m.encode_failed(kind);
                Err(e)
            }
        }
    }
}

/// A translated change, with the revision of the object it came from.
#[derive(Debug, Clone)]
struct Change {
    kv: CalicoKv,
    revision: Revision,
}

/// A breadcrumb's `MsgKVs` for one syncer type and carriage: `None` when nothing in it
/// concerns that syncer type.
type Frame = Result<Option<Bytes>, Unencodable>;

/// One frame per carriage.
#[derive(Debug, Default)]
struct PerCarriage {
    plain: OnceLock<Frame>,
    snappy: OnceLock<Frame>,
}

/// A breadcrumb's Calico form, built on first use and shared.
#[derive(Debug, Default)]
pub struct CalicoCrumb {
    changes: OnceLock<Arc<[Change]>>,
    /// `MsgKVs` per (syncer type, carriage).
    frames: [PerCarriage; 4],
}

impl CalicoCrumb {
    /// The `MsgKVs` taking a client of `syncer` from the breadcrumb before to this one, or
    /// `None` when nothing in `deltas` concerns it. `previous[i]` is the value `deltas[i]`'s
    /// key held before it (`None`: absent), as the writer kept it, and `objects[i]` the
    /// revision of the stored object it came from. A server has one `driver`: the frames are
    /// kept per syncer type and carriage only.
    pub fn frame(
        &self,
        deltas: &[Update],
        previous: &[Option<Held>],
        objects: &[Revision],
        (syncer, carriage, driver): (SyncerType, Carriage, Driver),
        m: &Metrics,
    ) -> Frame {
        let changes = self
            .changes
            .get_or_init(|| translate(deltas, previous, objects, m));
        let [felix, bgp, tunnel, status] = &self.frames;
        let per = match syncer {
            SyncerType::Felix => felix,
            SyncerType::Bgp => bgp,
            SyncerType::TunnelIpAllocation => tunnel,
            SyncerType::NodeStatus => status,
        };
        let slot = match carriage {
            Carriage::Plain => &per.plain,
            Carriage::Snappy => &per.snappy,
        };
        slot.get_or_init(|| {
            let kvs: Vec<SerializedUpdate> = changes
                .iter()
                .filter(|c| c.kv.syncers.contains(syncer))
                .map(|c| serialized(&c.kv, c.revision, driver))
                .collect();
            if kvs.is_empty() {
                return Ok(None);
            }
            m.kvs_per_msg.of(syncer).observe(kvs.len() as f64);
            carriage
                .encode_counted(&Message::Kvs(kvs), FrameKind::calico_delta, m)
                .map(Some)
        })
        .clone()
    }
}

impl CalicoCrumb {
    /// The syncer types `deltas` has a change for (translated as [`CalicoCrumb::frame`]
    /// translates them, once: the translation is kept for the frames).
    pub fn syncers(
        &self,
        deltas: &[Update],
        previous: &[Option<Held>],
        objects: &[Revision],
        m: &Metrics,
    ) -> SyncerSet {
        self.changes
            .get_or_init(|| translate(deltas, previous, objects, m))
            .iter()
            .fold(SyncerSet::NONE, |set, c| set.union(c.kv.syncers))
    }
}

/// The Calico changes of a breadcrumb, each change translated against the value its key held
/// before it, with the revision of the object it came from.
fn translate(
    deltas: &[Update],
    previous: &[Option<Held>],
    objects: &[Revision],
    m: &Metrics,
) -> Arc<[Change]> {
    let mut out = Vec::with_capacity(deltas.len());
    for (i, u) in deltas.iter().enumerate() {
        let before = previous.get(i).and_then(|p| p.as_ref()).map(Held::encoded);
        let kvs = match calico_changes_encoded(&u.key, before.as_ref(), u.value.as_ref()) {
            Ok(kvs) => kvs,
            // The cache holds only values that decode for their key: a bug. The side that does
            // not decode is treated as missing, as Typha's validation filter treats a value
            // it cannot accept.
            Err(e) => {
                tracing::error!(key = %u.key, error = %e, "a cached value does not decode; treated as missing for Calico clients");
                m.encode_failed(FrameKind::calico_delta);
                let decodes = |v: &Option<typha_protocol::model::EncodedValue>| {
                    v.as_ref()
                        .filter(|v| v.decode_for(&u.key.key()).is_ok())
                        .cloned()
                };
                let (b, c) = (decodes(&before), decodes(&u.value));
                calico_changes_encoded(&u.key, b.as_ref(), c.as_ref()).unwrap_or_default()
            }
        };
        // Our writer keeps one for every change; a breadcrumb made without (a test's) falls
        // back to our protocol's revision.
        let revision = objects.get(i).copied().unwrap_or(u.revision);
        out.extend(kvs.into_iter().map(|kv| Change { kv, revision }));
    }
    Arc::from(out)
}

/// One KV as `SerializedUpdate`, with the revisions Calico's `driver` gives (libcalico-go's
/// `KVPair.Revision`, and a v3 resource's `resourceVersion`, which Typha moves to
/// `V3ResourceVersion`):
///
/// - a deletion: neither (Calico's watcher cache sends a deletion without a revision);
/// - [`Driver::Etcd`]: `revision` (the key's `mod_revision`), and no resource version;
/// - [`Driver::Kubernetes`]: `revision` (the object's `resourceVersion`) in both, except for a
///   profile made from a namespace (`kns.`: `<rv>/`) or a service account (`ksa.`: `/<rv>`),
///   which has no resource version.
fn serialized(kv: &CalicoKv, revision: Revision, driver: Driver) -> SerializedUpdate {
    let (rev, v3) = match &kv.value {
        None => (String::new(), String::new()),
        Some(_) => {
            let rev = if revision.0 == 0 {
                String::new()
            } else {
                revision.to_string()
            };
            match (driver, profile_name(&kv.key)) {
                (Driver::Etcd, _) => (rev, String::new()),
                (Driver::Kubernetes, Some(p)) if p.starts_with("kns.") => {
                    (format!("{rev}/"), String::new())
                }
                (Driver::Kubernetes, Some(p)) if p.starts_with("ksa.") => {
                    (format!("/{rev}"), String::new())
                }
                (Driver::Kubernetes, _) if kv.is_v3_resource() => (rev.clone(), rev),
                (Driver::Kubernetes, _) => (rev, String::new()),
            }
        }
    };
    SerializedUpdate {
        key: kv.key.to_string(),
        value: kv.value.clone().unwrap_or_default(),
        v3_resource_version: v3,
        revision: CalicoRevision::String(rev),
        ttl: 0,
        update_type: match kv.kind {
            UpdateKind::New => UpdateType::New,
            UpdateKind::Updated => UpdateType::Updated,
            UpdateKind::Deleted => UpdateType::Deleted,
        },
    }
}

/// The profile a Calico key belongs to: its rules, its labels, or its v3 resource.
fn profile_name(key: &str) -> Option<&str> {
    if let Some(rest) = key.strip_prefix("/calico/v1/policy/profile/") {
        return rest
            .strip_suffix("/rules")
            .or_else(|| rest.strip_suffix("/labels"));
    }
    key.strip_prefix("/calico/resources/v3/projectcalico.org/profiles/")
}

/// A Calico snapshot of one map version for one syncer type and carriage.
#[derive(Debug)]
pub struct CalicoSnapshot {
    /// The breadcrumb it is the state of.
    pub seq: Seq,
    /// Its sync status.
    pub status: SyncStatus,
    /// When it was built.
    pub built: Instant,
    /// The `MsgKVs` messages, in Calico key order.
    pub frames: Vec<Bytes>,
    /// KVs in it.
    pub kvs: usize,
}

/// The current snapshot of one (syncer type, carriage); locked while one is built, so joiners
/// meanwhile wait for it.
type SnapshotSlot = Arc<tokio::sync::Mutex<Option<Arc<CalicoSnapshot>>>>;

/// Shared Calico snapshots, one current per (syncer type, carriage).
#[derive(Debug, Default)]
pub struct CalicoSnapshots {
    current: Mutex<HashMap<(SyncerType, Carriage), SnapshotSlot>>,
}

/// How long a snapshot is reused even when newer breadcrumbs exist (Typha's rule).
const REUSE_FOR: Duration = Duration::from_secs(1);

impl CalicoSnapshots {
    /// The snapshot to send a joining client of `syncer`: the current one if it is of the latest
    /// breadcrumb or younger than 1 s, else the one `build` makes (of the latest breadcrumb,
    /// with [`build`]), run on a blocking thread so that a large translation does not hold up
    /// the connections' tasks. Joiners during a build wait for it. A build that fails is not
    /// kept: the next joiner tries again.
    pub async fn get(
        &self,
        syncer: SyncerType,
        carriage: Carriage,
        latest: Seq,
        build: impl FnOnce() -> Result<CalicoSnapshot, Unencodable> + Send + 'static,
        m: &Metrics,
    ) -> Result<Arc<CalicoSnapshot>, Unencodable> {
        let slot = {
            let mut cur = self.current.lock().unwrap_or_else(|p| p.into_inner());
            cur.entry((syncer, carriage)).or_default().clone()
        };
        let mut slot = slot.lock().await;
        if let Some(s) = slot.as_ref()
            && (s.seq == latest || s.built.elapsed() < REUSE_FOR)
        {
            m.snapshots_reused.of(syncer).inc();
            return Ok(s.clone());
        }
        let snap = match tokio::task::spawn_blocking(build).await {
            Ok(s) => Arc::new(s?),
            // The build panicked (a bug); the panic has been reported.
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        };
        *slot = Some(snap.clone());
        Ok(snap)
    }
}

/// A Calico snapshot for `syncer` of the KVs `kvs` (a map version at breadcrumb `seq`, each
/// KV with the revision of the object it came from; revisions as `driver` gives them): each
/// KV translated, sorted by Calico key, cut into `MsgKVs` of [`SNAPSHOT_BATCH_SNAPPY`] or
/// [`SNAPSHOT_BATCH_PLAIN`] KVs, each encoded once. A cached value that does not decode (a
/// bug) is left out, logged and counted, as a value Typha's validation filter refuses is.
pub fn build<'a>(
    (syncer, carriage, driver): (SyncerType, Carriage, Driver),
    (seq, status): (Seq, SyncStatus),
    kvs: impl Iterator<Item = (&'a KeyPath, &'a Held, Revision)>,
    m: &Metrics,
) -> Result<CalicoSnapshot, Unencodable> {
    let mut all: Vec<SerializedUpdate> = Vec::new();
    for (path, value, revision) in kvs {
        let key = path.key();
        if !receivers(&key).contains(syncer) {
            continue;
        }
        let v = match value.encoded().decode_for(&key) {
            Ok(v) => v,
            Err(e) => {
                tracing::error!(key = %path, error = %e, "a cached value does not decode; left out of a Calico snapshot");
                m.encode_failed(FrameKind::calico_snapshot);
                continue;
            }
        };
        all.extend(
            calico_kvs(&key, &v)
                .iter()
                .filter(|kv| kv.syncers.contains(syncer))
                .map(|kv| serialized(kv, revision, driver)),
        );
    }
    // Calico's drivers give these revision 1, and the v3 profile no resource version.
    all.extend(
        builtin_kvs(syncer)
            .iter()
            .map(|kv| serialized(kv, Revision(1), Driver::Etcd)),
    );
    all.sort_by(|a, b| a.key.cmp(&b.key));
    let batch = match carriage {
        Carriage::Plain => SNAPSHOT_BATCH_PLAIN,
        Carriage::Snappy => SNAPSHOT_BATCH_SNAPPY,
    };
    let n = all.len();
    // Each batch is moved out of `all`, not cloned: the KVs' strings are freed as their
    // message is encoded instead of existing twice until the end.
    let mut frames = Vec::with_capacity(n.div_ceil(batch));
    let mut rest = all.into_iter();
    let (mut raw, mut wire) = (0usize, 0usize);
    loop {
        let kvs: Vec<SerializedUpdate> = rest.by_ref().take(batch).collect();
        if kvs.is_empty() {
            break;
        }
        m.kvs_per_msg.of(syncer).observe(kvs.len() as f64);
        let (frame, gob) =
            carriage.encode_counted_sized(&Message::Kvs(kvs), FrameKind::calico_snapshot, m)?;
        raw += gob;
        wire += frame.len();
        frames.push(frame);
    }
    m.snapshots_generated.of(syncer).inc();
    let bytes = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    m.snapshot_raw_bytes.of(syncer).set(bytes(raw));
    m.snapshot_compressed_bytes.of(syncer).set(bytes(wire));
    Ok(CalicoSnapshot {
        seq,
        status,
        built: Instant::now(),
        frames,
        kvs: n,
    })
}

#[cfg(test)]
mod tests;
