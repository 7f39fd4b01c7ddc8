//! The store between the connection and the consumer (Calico's "dedupe buffer"), sans-IO.
//!
//! It keeps the latest value of every key and the state digest, and turns what the server
//! sends into callbacks with Calico's semantics:
//! - updates carry New / Updated / Deleted as seen by this consumer (recomputed, not trusted
//!   from the wire); an update that does not change a value is not delivered;
//! - a snapshot (full, or of some digest buckets) marks the keys it carries; at its end every
//!   key in its scope that was not carried is deleted (mark and sweep), so no stale key
//!   survives a reconnect;
//! - the status seen by the consumer is WaitForDatastore until a first connection,
//!   ResyncInProgress while (re)synchronising, InSync only when the server is in sync *and*
//!   this store has caught up with it.
//!
//! A key of a kind this build does not know (a newer server's, [`Key::Opaque`]) is kept
//! with its value, so that the digest agrees with the server's, but never delivered, and left
//! out of [`Store::iter`].
//!
//! It checks what it is sent: a Deltas frame must start where the store is, and after every
//! frame the digest must equal the server's. A violation is an error; the caller reconnects and
//! offers its digest, and the server resends only the buckets that differ.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use typha_protocol::digest::{KeyHash, StateDigest};
use typha_protocol::handshake::Session;
use typha_protocol::message::{
    Cursor, Message, MessageType, Resume, Seq, SnapshotScope, Staleness,
};
use typha_protocol::model::{
    EncodedValue, KeyPath, KeyType, Revision, SyncStatus, Update, UpdateKind,
};

use crate::position::Position;

#[cfg(doc)]
use typha_protocol::model::Key;

/// What a consumer implements: Calico's `api.SyncerCallbacks`.
pub trait SyncerCallbacks: Send {
    /// The sync status changed.
    fn on_status_updated(&mut self, status: SyncStatus);
    /// A batch of changes, in order. Kinds are relative to what this consumer was told before.
    fn on_updates(&mut self, updates: Vec<Update>);
    /// The server said whether its view of the datastore is current: after each (re)connect
    /// and whenever it changes. While `staleness.stale`, what the consumer has is consistent
    /// but may be old (the server lost its datastore); the sync status does not change, and a
    /// consumer should keep what it has rather than act on the absence of news. The age grows
    /// from [`Staleness::age`] with the time since this call. Servers that predate the
    /// feature never call it. By default ignored.
    fn on_staleness(&mut self, staleness: &Staleness) {
        let _ = staleness;
    }
}

/// How the server brought this store up to date after a connect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResumeKind {
    /// Only the missed deltas.
    Deltas,
    /// Only the digest buckets that differed.
    Digest,
    /// A full snapshot.
    Snapshot,
}

impl ResumeKind {
    /// A stable name for logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            ResumeKind::Deltas => "deltas",
            ResumeKind::Digest => "digest",
            ResumeKind::Snapshot => "snapshot",
        }
    }
}

/// The server sent something inconsistent with what this store holds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// Deltas that do not start where the store is: something was missed.
    #[error("gap: at sequence {at} but deltas start from {from}")]
    Gap {
        /// Where the store is.
        at: Seq,
        /// Where the deltas start.
        from: Seq,
    },
    /// After applying a frame, the digest differs from the server's.
    #[error("state digest {ours:016x} differs from the server's {theirs:016x} at sequence {seq}")]
    DigestMismatch {
        /// The position.
        seq: Seq,
        /// Ours.
        ours: u64,
        /// The server's.
        theirs: u64,
    },
    /// A snapshot carried a different number of KVs than it announced.
    #[error("snapshot announced {announced} KVs but carried {carried}")]
    SnapshotCount {
        /// Announced.
        announced: u64,
        /// Carried.
        carried: u64,
    },
    /// A message out of place (a chunk outside a snapshot, a deletion in a snapshot, ...).
    #[error("unexpected {0}")]
    Unexpected(Unexpected),
}

/// A message out of place, for [`StoreError::Unexpected`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Unexpected {
    /// A light store's undecoded snapshot chunk, in a full store.
    UndecodedChunk,
    /// A snapshot chunk outside a snapshot.
    ChunkOutsideSnapshot,
    /// A snapshot begins inside a snapshot.
    SnapshotInSnapshot,
    /// A deletion of this key in a snapshot.
    DeletionInSnapshot(KeyPath),
    /// A snapshot end outside a snapshot.
    EndOutsideSnapshot,
    /// Deltas inside a snapshot.
    DeltasInSnapshot,
    /// A message of a type servers do not send after the handshake.
    Message(MessageType),
}

impl std::fmt::Display for Unexpected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unexpected::UndecodedChunk => {
                f.write_str("an undecoded snapshot chunk in a full store")
            }
            Unexpected::ChunkOutsideSnapshot => f.write_str("a snapshot chunk outside a snapshot"),
            Unexpected::SnapshotInSnapshot => f.write_str("a snapshot inside a snapshot"),
            Unexpected::DeletionInSnapshot(key) => write!(f, "a deletion of {key} in a snapshot"),
            Unexpected::EndOutsideSnapshot => f.write_str("a snapshot end outside a snapshot"),
            Unexpected::DeltasInSnapshot => f.write_str("deltas inside a snapshot"),
            Unexpected::Message(t) => write!(f, "{t} from a server"),
        }
    }
}

#[derive(Debug)]
struct Marks {
    scope: SnapshotScope,
    seen: HashSet<KeyPath>,
    announced: u64,
    first: bool,
}

/// What applying a message did, for the connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Applied {
    /// Set when this message completed the initial sync of a connection.
    pub resumed: Option<ResumeKind>,
    /// The position now reached, if the message moved it (to acknowledge).
    pub reached: Option<Seq>,
}

/// The consumer-side state.
#[derive(Debug)]
pub struct Store {
    kvs: HashMap<KeyPath, (EncodedValue, Revision)>,
    digest: StateDigest,
    cursor: Option<Cursor>,
    marks: Option<Marks>,
    /// The session epoch of the current connection.
    epoch: Option<typha_protocol::message::Epoch>,
    /// Whether this connection's initial sync has completed.
    caught_up: bool,
    /// Whether a session is established (between `connected` and `disconnected`).
    session: bool,
    /// The server's status on this connection (unknown until it says).
    server_status: Option<SyncStatus>,
    reported: Option<SyncStatus>,
    /// Light mode: no values kept (see [`Store::light`]).
    light: bool,
    /// Keys of unknown kinds are delivered too (see [`Store::relaying`]).
    relay: bool,
    /// Light mode: snapshot KVs counted, and the server's digest at the cursor.
    light_seen: u64,
    /// Light mode: a chunk of this snapshot went by undecoded, so its KVs cannot be counted.
    light_skipped: bool,
    announced: u64,
    /// The highest datastore revision among the changes applied (0: none yet).
    high_water: Revision,
    /// Where each whole frame applied is published, if anyone asked (see [`Position`]).
    position: Option<Arc<Position>>,
}

impl Default for Store {
    fn default() -> Self {
        Self::new()
    }
}

impl Store {
    /// The highest datastore revision among the changes applied so far, if any: offered as
    /// the resume's revision floor, so that a server behind it does not send older values
    /// ([`typha_protocol::message::Extension::REVISION_FLOOR`]).
    pub fn revision_floor(&self) -> Option<Revision> {
        (self.high_water > Revision(0)).then_some(self.high_water)
    }

    fn saw(&mut self, updates: &[Update]) {
        if let Some(r) = updates.iter().map(|u| u.revision).max() {
            self.high_water = self.high_water.max(r);
        }
    }

    /// An empty store.
    pub fn new() -> Self {
        Self {
            kvs: HashMap::new(),
            digest: StateDigest::new(),
            cursor: None,
            marks: None,
            epoch: None,
            caught_up: false,
            session: false,
            server_status: None,
            reported: None,
            light: false,
            relay: false,
            light_seen: 0,
            light_skipped: false,
            announced: 0,
            high_water: Revision(0),
            position: None,
        }
    }

    /// A store that keeps no values: for simulating thousands of nodes in one process. It
    /// checks the sequence chain (every Deltas frame starts where the last ended) and remembers
    /// the digest the server announced at its position, but cannot recompute digests, dedupe,
    /// recompute kinds (wire kinds are passed on) or sweep; it resumes by deltas or snapshot,
    /// never by digest. A client with a light store does not even decode snapshot chunks
    /// ([`Store::skip_chunk`]); their KV count is then not checked. Real agents use
    /// [`Store::new`].
    pub fn light() -> Self {
        Self {
            light: true,
            ..Self::new()
        }
    }

    /// A full store that also delivers keys of kinds this build does not know, as they are:
    /// for a relay, whose own clients may know them.
    pub fn relaying() -> Self {
        Self {
            relay: true,
            ..Self::new()
        }
    }

    /// Publishes the state to `position` after every frame applied in full from now on (and
    /// at once, if a frame has been applied already).
    pub fn publish_to(&mut self, position: Arc<Position>) {
        if let Some(c) = self.cursor {
            position.publish(self.combined_digest(), c.seq);
        }
        self.position = Some(position);
    }

    /// Whether a session is established: [`connected`](Self::connected) was called and
    /// [`disconnected`](Self::disconnected) not since.
    pub fn is_connected(&self) -> bool {
        self.session
    }

    /// Whether this is a light store.
    pub fn is_light(&self) -> bool {
        self.light
    }

    /// Light store: a snapshot chunk went by without being decoded (a simulated node does not
    /// need its contents). The chunk must come inside a snapshot; the snapshot's KV count is
    /// then not checked.
    ///
    /// # Errors
    ///
    /// [`StoreError::Unexpected`] in a full store ([`Unexpected::UndecodedChunk`]) and outside a
    /// snapshot ([`Unexpected::ChunkOutsideSnapshot`]).
    pub fn skip_chunk(&mut self) -> Result<(), StoreError> {
        if !self.light {
            return Err(StoreError::Unexpected(Unexpected::UndecodedChunk));
        }
        if self.marks.is_none() {
            return Err(StoreError::Unexpected(Unexpected::ChunkOutsideSnapshot));
        }
        self.light_skipped = true;
        Ok(())
    }

    /// The combined digest of the state: computed (full store) or as the server announced it
    /// at the cursor (light store).
    pub fn combined_digest(&self) -> u64 {
        if self.light {
            self.announced
        } else {
            self.digest.combined()
        }
    }

    /// Number of keys held (opaque ones included).
    pub fn len(&self) -> usize {
        self.kvs.len()
    }

    /// Whether the store is empty.
    pub fn is_empty(&self) -> bool {
        self.kvs.is_empty()
    }

    /// The value of a key.
    pub fn get(&self, key: &str) -> Option<&EncodedValue> {
        self.kvs.get(key).map(|(v, _)| v)
    }

    /// Every key and value (unordered), but for keys of kinds this build does not know.
    pub fn iter(&self) -> impl Iterator<Item = (&KeyPath, &EncodedValue)> {
        self.kvs
            .iter()
            .filter(|(k, _)| k.key_type() != KeyType::Opaque)
            .map(|(k, (v, _))| (k, v))
    }

    /// How many keys of kinds this build does not know are held (see [`Key::Opaque`]).
    pub fn opaque_len(&self) -> usize {
        self.kvs
            .keys()
            .filter(|k| k.key_type() == KeyType::Opaque)
            .count()
    }

    /// The state digest.
    pub fn digest(&self) -> &StateDigest {
        &self.digest
    }

    /// The last position fully applied (epoch and sequence), if any.
    pub fn cursor(&self) -> Option<Cursor> {
        self.cursor
    }

    /// The status last reported to the consumer.
    pub fn status(&self) -> Option<SyncStatus> {
        self.reported
    }

    /// What to offer the next server so it can send less than a snapshot.
    pub fn resume(&self) -> Option<Resume> {
        if self.light {
            return self.cursor.map(|c| Resume {
                cursor: Some(c),
                digest: None,
            });
        }
        if self.cursor.is_none() && self.kvs.is_empty() {
            return None;
        }
        Some(Resume {
            cursor: self.cursor,
            digest: Some(self.digest.clone()),
        })
    }

    /// Reports the starting status (WaitForDatastore) once.
    pub fn start(&mut self, cb: &mut dyn SyncerCallbacks) {
        if self.reported.is_none() {
            self.report(SyncStatus::WaitForDatastore, cb);
        }
    }

    /// A new connection was established with `session`.
    pub fn connected(&mut self, session: &Session, cb: &mut dyn SyncerCallbacks) {
        if let Some(p) = &self.position {
            p.set_connected(true);
        }
        self.epoch = Some(session.epoch);
        self.session = true;
        self.caught_up = false;
        self.server_status = None;
        self.marks = None;
        if self.reported == Some(SyncStatus::InSync) {
            self.report(SyncStatus::ResyncInProgress, cb);
        }
    }

    /// The connection was lost: the state stays; the consumer hears ResyncInProgress.
    pub fn disconnected(&mut self, cb: &mut dyn SyncerCallbacks) {
        if let Some(p) = &self.position {
            p.set_connected(false);
        }
        self.session = false;
        self.light_seen = 0;
        self.light_skipped = false;
        if self.marks.take().is_some() {
            // Part of a snapshot was applied: the state is ahead of the cursor in places, so
            // the cursor no longer describes it. The digest still does; resume by digest.
            self.cursor = None;
        }
        self.caught_up = false;
        if self
            .reported
            .is_some_and(|s| s != SyncStatus::WaitForDatastore)
        {
            self.report(SyncStatus::ResyncInProgress, cb);
        }
    }

    fn report(&mut self, status: SyncStatus, cb: &mut dyn SyncerCallbacks) {
        if self.reported != Some(status) {
            self.reported = Some(status);
            cb.on_status_updated(status);
        }
    }

    /// What the consumer should see now (`None` until the server has said).
    fn effective_status(&self) -> Option<SyncStatus> {
        self.server_status.map(|s| match s {
            SyncStatus::InSync if !self.caught_up => SyncStatus::ResyncInProgress,
            s => s,
        })
    }

    /// Changes `key` to `value` (None: delete), returning the update to deliver, if any (none
    /// for a key of a kind this build does not know: it is only kept, for the digest).
    fn set(
        &mut self,
        key: KeyPath,
        value: Option<EncodedValue>,
        revision: Revision,
    ) -> Option<Update> {
        let update = self.change(key, value, revision)?;
        (self.relay || update.key.key_type() != KeyType::Opaque).then_some(update)
    }

    fn change(
        &mut self,
        key: KeyPath,
        value: Option<EncodedValue>,
        revision: Revision,
    ) -> Option<Update> {
        match value {
            Some(v) => {
                let old = self.kvs.get(&key);
                if old.is_some_and(|(o, _)| *o == v) {
                    return None;
                }
                let kind = if old.is_some() {
                    UpdateKind::Updated
                } else {
                    UpdateKind::New
                };
                let h = KeyHash::of(key.as_str());
                if let Some((o, _)) = old {
                    self.digest.toggle(h, o.as_bytes());
                }
                self.digest.toggle(h, v.as_bytes());
                self.kvs.insert(key.clone(), (v.clone(), revision));
                Some(Update {
                    key,
                    value: Some(v),
                    revision,
                    kind,
                })
            }
            None => {
                let (old, _) = self.kvs.remove(&key)?;
                self.digest.remove(key.as_str(), old.as_bytes());
                Some(Update::delete(key, revision))
            }
        }
    }

    fn check_digest(&mut self, seq: Seq, theirs: u64) -> Result<(), StoreError> {
        if self.light {
            self.announced = theirs;
            return Ok(());
        }
        let ours = self.digest.combined();
        if ours == theirs {
            Ok(())
        } else {
            Err(StoreError::DigestMismatch { seq, ours, theirs })
        }
    }

    fn reach(&mut self, seq: Seq) {
        if let Some(epoch) = self.epoch {
            self.cursor = Some(Cursor { epoch, seq });
        }
        if let Some(p) = &self.position {
            p.publish(self.combined_digest(), seq);
        }
    }

    /// Applies one message from the server, calling back the consumer.
    ///
    /// # Errors
    ///
    /// [`StoreError::Gap`] for deltas that do not start where the store is,
    /// [`StoreError::DigestMismatch`] when the digest after a snapshot or deltas differs from the
    /// server's (full store), [`StoreError::SnapshotCount`] for a snapshot that carried another
    /// number of KVs than it announced, and [`StoreError::Unexpected`] for a message out of place.
    /// The connection should close then; the store keeps what it had applied, and the next
    /// server resumes it.
    pub fn apply(
        &mut self,
        msg: Message,
        cb: &mut dyn SyncerCallbacks,
    ) -> Result<Applied, StoreError> {
        let mut applied = Applied::default();
        match msg {
            Message::SyncStatus(s) => {
                self.server_status = Some(s);
                if let Some(eff) = self.effective_status() {
                    self.report(eff, cb);
                }
            }
            Message::SnapshotBegin(b) => {
                if self.marks.is_some() {
                    return Err(StoreError::Unexpected(Unexpected::SnapshotInSnapshot));
                }
                self.report(SyncStatus::ResyncInProgress, cb);
                self.marks = Some(Marks {
                    scope: b.scope,
                    seen: HashSet::new(),
                    announced: b.kvs,
                    first: !self.caught_up,
                });
            }
            Message::SnapshotChunk(c) => {
                if self.marks.is_none() {
                    return Err(StoreError::Unexpected(Unexpected::ChunkOutsideSnapshot));
                }
                self.saw(&c.updates);
                if self.light {
                    self.light_seen += c.updates.len() as u64;
                    cb.on_updates(c.updates);
                    return Ok(applied);
                }
                let mut out = Vec::with_capacity(c.updates.len());
                for u in c.updates {
                    let Some(v) = u.value else {
                        return Err(StoreError::Unexpected(Unexpected::DeletionInSnapshot(
                            u.key,
                        )));
                    };
                    if let Some(m) = self.marks.as_mut() {
                        m.seen.insert(u.key.clone());
                    }
                    out.extend(self.set(u.key, Some(v), u.revision));
                }
                if !out.is_empty() {
                    cb.on_updates(out);
                }
            }
            Message::SnapshotEnd(e) => {
                let Some(m) = self.marks.take() else {
                    return Err(StoreError::Unexpected(Unexpected::EndOutsideSnapshot));
                };
                let skipped = std::mem::take(&mut self.light_skipped);
                let carried = if self.light {
                    std::mem::take(&mut self.light_seen)
                } else {
                    m.seen.len() as u64
                };
                if carried != m.announced && !skipped {
                    return Err(StoreError::SnapshotCount {
                        announced: m.announced,
                        carried,
                    });
                }
                let in_scope = |k: &KeyPath| match &m.scope {
                    SnapshotScope::Buckets(set) => set.contains(KeyHash::of(k.as_str()).bucket()),
                    _ => true,
                };
                let stale: Vec<(KeyPath, Revision)> = self
                    .kvs
                    .iter()
                    .filter(|(k, _)| in_scope(k) && !m.seen.contains(*k))
                    .map(|(k, (_, r))| (k.clone(), *r))
                    .collect();
                let out: Vec<Update> = stale
                    .into_iter()
                    .filter_map(|(k, r)| self.set(k, None, r))
                    .collect();
                if !out.is_empty() {
                    cb.on_updates(out);
                }
                self.check_digest(e.seq, e.digest)?;
                self.reach(e.seq);
                applied.reached = Some(e.seq);
                if m.first {
                    self.caught_up = true;
                    applied.resumed = Some(match m.scope {
                        SnapshotScope::Buckets(_) => ResumeKind::Digest,
                        _ => ResumeKind::Snapshot,
                    });
                }
            }
            Message::Deltas(d) => {
                if self.marks.is_some() {
                    return Err(StoreError::Unexpected(Unexpected::DeltasInSnapshot));
                }
                let at = self.cursor.map(|c| c.seq);
                if !self.caught_up {
                    // The first message of a delta resume names the client's own position.
                    if at != Some(d.from_seq) {
                        return Err(StoreError::Gap {
                            at: at.unwrap_or_default(),
                            from: d.from_seq,
                        });
                    }
                    self.caught_up = true;
                    applied.resumed = Some(ResumeKind::Deltas);
                } else if at != Some(d.from_seq) {
                    return Err(StoreError::Gap {
                        at: at.unwrap_or_default(),
                        from: d.from_seq,
                    });
                }
                self.saw(&d.updates);
                let out: Vec<Update> = if self.light {
                    d.updates
                } else {
                    d.updates
                        .into_iter()
                        .filter_map(|u| self.set(u.key, u.value, u.revision))
                        .collect()
                };
                if !out.is_empty() {
                    cb.on_updates(out);
                }
                self.check_digest(d.seq, d.digest)?;
                self.reach(d.seq);
                applied.reached = Some(d.seq);
            }
            other => {
                return Err(StoreError::Unexpected(Unexpected::Message(
                    other.message_type(),
                )));
            }
        }
        if applied.resumed.is_some()
            && let Some(eff) = self.effective_status()
        {
            self.report(eff, cb);
        }
        Ok(applied)
    }
}

#[cfg(test)]
mod tests;
