//! The snapshot cache: one writer, many readers.
//!
//! The writer ([`CacheWriter`]) owns the current KV map (an `imbl::OrdMap`, so every version
//! is an O(1), structure-sharing clone), the state digest, and the pipeline. Each batch of
//! changes (at most `max_batch` updates and `max_batch_bytes` of values) becomes one
//! [`Breadcrumb`]: epoch, sequence number, upstream revision, the map version, the deltas,
//! the sync status and the combined digest, plus its delta frame, encoded once. Readers
//! (connections) hold `Arc`s to breadcrumbs and never block the writer. History is bounded by
//! count and age, whatever clients do: a client that falls out of the window gets a fresh
//! snapshot instead of deltas.

pub mod pipeline;
pub mod snapshot;

use std::collections::VecDeque;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::Bytes;
use imbl::OrdMap;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tracing::debug;
use typha_protocol::digest::StateDigest;
use typha_protocol::message::{Deltas, Epoch, Message, Seq};
use typha_protocol::model::{EncodedValue, KeyPath, Revision, SyncStatus, Update, UpdateKind};

use crate::datastore::{SyncerEvent, WatchEvent};
use crate::fanout;
use crate::metrics::{FrameKind, Metrics};
use pipeline::{KvChange, Pipeline};

/// A cached value and the revision it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kv {
    /// The value, encoded once.
    pub value: EncodedValue,
    /// Datastore revision.
    pub revision: Revision,
}

/// One version of the whole state.
pub type KvMap = OrdMap<KeyPath, Kv>;

/// How many of the newest breadcrumbs keep their map version. Snapshots are always built from
/// the latest; keeping every version in the history would retain every node a later batch
/// replaced (about 10 KB per update: hundreds of MB after a large initial load).
pub const MAP_VERSIONS_KEPT: usize = 16;

/// Cache settings.
#[derive(Debug, Clone)]
pub struct CacheConfig {
    /// Most updates per breadcrumb (Typha's SnapshotCacheMaxBatchSize, default 100).
    pub max_batch: usize,
    /// Most value bytes per breadcrumb, so a delta frame stays small.
    pub max_batch_bytes: usize,
    /// Most breadcrumbs kept for catch-up and resume.
    pub history_max: usize,
    /// Oldest breadcrumb kept for catch-up and resume.
    pub history_max_age: Duration,
    /// Least time between breadcrumbs, unless a batch fills up. Under load, updates that
    /// arrive within it share a breadcrumb: one frame, one write and one read per client
    /// instead of one per update. An isolated update is not delayed.
    pub min_interval: Duration,
    /// The window grows with the number of streaming clients so that at most this many delta
    /// frames per second go out in all (0: a fixed `min_interval`): 10,000 clients at 100,000
    /// frames/s get a 100 ms window. Per-frame work (a TLS record, a syscall, a wake-up on
    /// each side) is what fan-out costs; bigger frames cost little more.
    pub fanout_frames_per_sec: u64,
    /// The largest window the budget may ask for.
    pub max_interval: Duration,
}

impl CacheConfig {
    /// The batch window for `clients` streaming clients.
    pub fn window(&self, clients: u64) -> Duration {
        if self.fanout_frames_per_sec == 0 {
            return self.min_interval;
        }
        let wanted = Duration::from_secs_f64(clients as f64 / self.fanout_frames_per_sec as f64);
        wanted.clamp(self.min_interval, self.max_interval.max(self.min_interval))
    }
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self {
            max_batch: 100,
            max_batch_bytes: 1 << 20,
            history_max: 1024,
            history_max_age: Duration::from_secs(120),
            min_interval: Duration::from_millis(20),
            fanout_frames_per_sec: 100_000,
            max_interval: Duration::from_millis(200),
        }
    }
}

/// One step of the cache: the state after a batch of changes.
#[derive(Debug)]
pub struct Breadcrumb {
    /// The server run this belongs to.
    pub epoch: Epoch,
    /// Sequence number, +1 per breadcrumb.
    pub seq: Seq,
    /// Highest datastore revision applied.
    pub revision: Revision,
    /// When it was made.
    pub created: Instant,
    /// The whole state at this point, while this breadcrumb is one of the most recent
    /// [`MAP_VERSIONS_KEPT`]; older breadcrumbs drop it (see [`Breadcrumb::map`]).
    map: arc_swap::ArcSwapOption<KvMap>,
    /// Number of KVs in the state at this point.
    pub kvs: usize,
    /// The changes from the previous breadcrumb.
    pub deltas: Arc<[Update]>,
    /// Sync status at this point.
    pub status: SyncStatus,
    /// Combined state digest at this point.
    pub digest: u64,
    /// Encoded frames, built once on first use and shared by every connection.
    pub(crate) frames: fanout::CrumbFrames,
}

impl Breadcrumb {
    /// The state at this breadcrumb, if it is still kept (always, for the latest).
    pub fn map(&self) -> Option<Arc<KvMap>> {
        self.map.load_full()
    }
}

/// The read side of the cache, shared by every connection.
#[derive(Debug)]
pub struct Cache {
    epoch: Epoch,
    crumbs: RwLock<VecDeque<Arc<Breadcrumb>>>,
    latest: watch::Sender<Arc<Breadcrumb>>,
    ever_in_sync: std::sync::atomic::AtomicBool,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Shared snapshot and bucket frames.
    pub snapshots: snapshot::Snapshots,
}

/// The breadcrumbs a client needs are no longer in the history window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("breadcrumb {0} is no longer in the history window")]
pub struct Evicted(pub Seq);

impl Cache {
    /// The server's epoch.
    pub fn epoch(&self) -> Epoch {
        self.epoch
    }

    /// The newest breadcrumb.
    pub fn latest(&self) -> Arc<Breadcrumb> {
        self.latest.borrow().clone()
    }

    /// Whether the cache has been in sync with the datastore at least once: before that its
    /// state may be partial, and must not be used to tell a resuming client what to delete.
    pub fn ever_in_sync(&self) -> bool {
        self.ever_in_sync.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Wakes on every new breadcrumb.
    pub fn subscribe(&self) -> watch::Receiver<Arc<Breadcrumb>> {
        self.latest.subscribe()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, VecDeque<Arc<Breadcrumb>>> {
        // The writer only pushes and pops whole Arcs: a poisoned lock still guards a
        // consistent deque.
        self.crumbs.read().unwrap_or_else(|p| p.into_inner())
    }

    /// The breadcrumb with sequence number `seq`, if still in the window.
    pub fn get(&self, seq: Seq) -> Option<Arc<Breadcrumb>> {
        let crumbs = self.read();
        let first = crumbs.front()?.seq.0;
        let i = usize::try_from(seq.0.checked_sub(first)?).ok()?;
        crumbs.get(i).cloned()
    }

    /// The oldest sequence number a client may resume from (its cursor): the breadcrumb
    /// before the oldest one kept.
    pub fn oldest_resumable(&self) -> Seq {
        let crumbs = self.read();
        crumbs
            .front()
            .map_or(Seq(0), |c| Seq(c.seq.0.saturating_sub(1)))
    }

    /// Up to `max` breadcrumbs after `seq`, in order.
    pub fn after(&self, seq: Seq, max: usize) -> Result<Vec<Arc<Breadcrumb>>, Evicted> {
        let crumbs = self.read();
        let Some(first) = crumbs.front().map(|c| c.seq.0) else {
            return Ok(Vec::new());
        };
        if seq.0 + 1 < first {
            return Err(Evicted(Seq(seq.0 + 1)));
        }
        let start = usize::try_from(seq.0 + 1 - first).unwrap_or(usize::MAX);
        Ok(crumbs.iter().skip(start).take(max).cloned().collect())
    }

    /// Breadcrumbs `from+1 ..= to`, or `None` if any is gone.
    pub fn range(&self, from: Seq, to: Seq) -> Option<Vec<Arc<Breadcrumb>>> {
        let want = usize::try_from(to.0.checked_sub(from.0)?).ok()?;
        let got = self.after(from, want).ok()?;
        (got.len() == want && got.last().is_none_or(|c| c.seq == to)).then_some(got)
    }
}

/// The cache's single writer.
#[derive(Debug)]
pub struct CacheWriter {
    cache: Arc<Cache>,
    cfg: CacheConfig,
    map: KvMap,
    digest: StateDigest,
    seq: u64,
    revision: Revision,
    status: SyncStatus,
    pending: Vec<KvChange>,
    pending_status: SyncStatus,
    pipeline: Pipeline,
    last_publish: Option<Instant>,
}

impl CacheWriter {
    /// A writer with an empty cache at sequence 0 (status WaitForDatastore), and the shared
    /// read side.
    pub fn new(cfg: CacheConfig, epoch: Epoch, metrics: Arc<Metrics>) -> (CacheWriter, Arc<Cache>) {
        let first = Arc::new(Breadcrumb {
            epoch,
            seq: Seq(0),
            revision: Revision(0),
            created: Instant::now(),
            map: arc_swap::ArcSwapOption::from_pointee(KvMap::new()),
            kvs: 0,
            deltas: Arc::from(Vec::new()),
            status: SyncStatus::WaitForDatastore,
            digest: 0,
            frames: fanout::CrumbFrames::default(),
        });
        let cache = Arc::new(Cache {
            epoch,
            crumbs: RwLock::new(VecDeque::from([first.clone()])),
            latest: watch::channel(first).0,
            ever_in_sync: std::sync::atomic::AtomicBool::new(false),
            metrics,
            snapshots: snapshot::Snapshots::default(),
        });
        let writer = CacheWriter {
            cache: cache.clone(),
            cfg,
            map: KvMap::new(),
            digest: StateDigest::new(),
            seq: 0,
            revision: Revision(0),
            status: SyncStatus::WaitForDatastore,
            pending: Vec::new(),
            pending_status: SyncStatus::WaitForDatastore,
            pipeline: Pipeline::default(),
            last_publish: None,
        };
        (writer, cache)
    }

    /// The read side.
    pub fn cache(&self) -> &Arc<Cache> {
        &self.cache
    }

    /// Takes in one event from the syncer (applied at the next [`CacheWriter::flush`]).
    pub fn handle(&mut self, ev: SyncerEvent) {
        let invalid_before = self.pipeline.invalid;
        let changes = match ev {
            SyncerEvent::Status(s) => {
                self.pending_status = s;
                return;
            }
            SyncerEvent::Resync(listing) => {
                // Compare with the state as it will be after what is already pending.
                self.flush_changes_only();
                self.pipeline.resync(listing, self.map.keys())
            }
            SyncerEvent::Change(WatchEvent::Put { revision, item }) => {
                self.pipeline.put(revision, item)
            }
            SyncerEvent::Change(WatchEvent::Delete { revision, id }) => {
                self.pipeline.delete(revision, &id)
            }
            SyncerEvent::Change(WatchEvent::Progress(_)) => return,
            SyncerEvent::Kvs(updates) => updates
                .into_iter()
                .map(|u| pipeline::KvChange {
                    key: u.key,
                    value: u.value,
                    revision: u.revision,
                })
                .collect(),
        };
        self.cache
            .metrics
            .updates_invalid
            .inc_by(self.pipeline.invalid - invalid_before);
        self.pending.extend(changes);
    }

    /// Changes waiting for the next flush.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// Publishes what is pending without changing the status.
    fn flush_changes_only(&mut self) {
        let status = self.pending_status;
        self.pending_status = self.status;
        self.flush();
        self.pending_status = status;
    }

    /// Publishes what is pending as breadcrumbs. The status change, if any, goes with the last
    /// one (never InSync before the data that makes it true).
    pub fn flush(&mut self) {
        let m = self.cache.metrics.clone();
        let changes = std::mem::take(&mut self.pending);
        let mut batch: Vec<Update> = Vec::new();
        let mut batch_bytes = 0;
        let n = changes.len();
        for (i, c) in changes.into_iter().enumerate() {
            let old = self.map.get(&c.key);
            let kind = match (&c.value, old) {
                (None, None) => continue,
                (Some(v), Some(o)) if o.value == *v => {
                    m.updates_skipped.inc();
                    continue;
                }
                (None, Some(_)) => UpdateKind::Deleted,
                (Some(_), Some(_)) => UpdateKind::Updated,
                (Some(_), None) => UpdateKind::New,
            };
            self.digest.apply(
                c.key.as_str(),
                old.map(|o| o.value.as_bytes()),
                c.value.as_ref().map(EncodedValue::as_bytes),
            );
            match &c.value {
                Some(v) => {
                    batch_bytes += v.len();
                    self.map.insert(
                        c.key.clone(),
                        Kv {
                            value: v.clone(),
                            revision: c.revision,
                        },
                    );
                }
                None => {
                    self.map.remove(&c.key);
                }
            }
            self.revision = self.revision.max(c.revision);
            m.updates.inc();
            batch.push(Update {
                key: c.key,
                value: c.value,
                revision: c.revision,
                kind,
            });
            let last = i + 1 == n;
            if (batch.len() >= self.cfg.max_batch || batch_bytes >= self.cfg.max_batch_bytes)
                && !last
            {
                let status = self.status;
                self.publish(std::mem::take(&mut batch), status);
                batch_bytes = 0;
            }
        }
        if !batch.is_empty() || self.pending_status != self.status {
            self.publish(batch, self.pending_status);
        }
    }

    fn publish(&mut self, deltas: Vec<Update>, status: SyncStatus) {
        self.seq += 1;
        self.last_publish = Some(Instant::now());
        self.status = status;
        let m = &self.cache.metrics;
        m.breadcrumb_size.observe(deltas.len() as f64);
        let crumb = Arc::new(Breadcrumb {
            epoch: self.cache.epoch,
            seq: Seq(self.seq),
            revision: self.revision,
            created: Instant::now(),
            map: arc_swap::ArcSwapOption::from_pointee(self.map.clone()),
            kvs: self.map.len(),
            deltas: Arc::from(deltas),
            status,
            digest: self.digest.combined(),
            frames: fanout::CrumbFrames::default(),
        });
        // Encode the common (compressed) delta frame now, once, off the connections' path.
        fanout::delta_frame(&crumb, true, m);
        {
            let mut crumbs = self.cache.crumbs.write().unwrap_or_else(|p| p.into_inner());
            crumbs.push_back(crumb.clone());
            if let Some(old) = crumbs
                .len()
                .checked_sub(MAP_VERSIONS_KEPT + 1)
                .and_then(|i| crumbs.get(i))
            {
                old.map.store(None);
            }
            let now = crumb.created;
            while crumbs.len() > self.cfg.history_max.max(1)
                || crumbs.front().is_some_and(|c| {
                    now.duration_since(c.created) > self.cfg.history_max_age && crumbs.len() > 1
                })
            {
                crumbs.pop_front();
            }
        }
        m.breadcrumb_seq
            .set(i64::try_from(self.seq).unwrap_or(i64::MAX));
        m.cache_size
            .set(i64::try_from(self.map.len()).unwrap_or(i64::MAX));
        debug!(seq = self.seq, updates = crumb.deltas.len(), %status, "breadcrumb");
        if status == SyncStatus::InSync {
            self.cache
                .ever_in_sync
                .store(true, std::sync::atomic::Ordering::Release);
        }
        self.cache.latest.send_replace(crumb);
    }

    /// Runs until the syncer's channel closes, batching what arrives together: everything
    /// already queued, and, when the previous breadcrumb is younger than the window (see
    /// [`CacheConfig::window`]), whatever arrives until it is that old (or the batch is full).
    pub async fn run(mut self, mut rx: mpsc::Receiver<SyncerEvent>) {
        while let Some(ev) = rx.recv().await {
            self.handle(ev);
            self.drain(&mut rx);
            let clients = self.cache.metrics.connections_streaming.get();
            let window = self.cfg.window(u64::try_from(clients).unwrap_or(0));
            let hold = self
                .last_publish
                .map(|t| t + window)
                .filter(|t| *t > Instant::now());
            if let Some(until) = hold {
                while self.pending.len() < self.cfg.max_batch {
                    match tokio::time::timeout_at(until, rx.recv()).await {
                        Ok(Some(ev)) => {
                            self.handle(ev);
                            self.drain(&mut rx);
                        }
                        Ok(None) | Err(_) => break,
                    }
                }
            }
            self.flush();
        }
    }

    fn drain(&mut self, rx: &mut mpsc::Receiver<SyncerEvent>) {
        while self.pending.len() < self.cfg.max_batch {
            match rx.try_recv() {
                Ok(ev) => self.handle(ev),
                Err(_) => break,
            }
        }
    }
}

/// Encodes the delta frame of a breadcrumb: what takes a client from `seq - 1` to `seq`.
pub(crate) fn deltas_message(c: &Breadcrumb) -> Message {
    Message::Deltas(Deltas {
        from_seq: Seq(c.seq.0.saturating_sub(1)),
        seq: c.seq,
        digest: c.digest,
        updates: c.deltas.to_vec(),
    })
}

/// Counts an encoded frame and returns it.
pub(crate) fn counted(m: &Metrics, kind: FrameKind, b: Bytes) -> Bytes {
    m.encoded(kind);
    b
}

#[cfg(test)]
mod tests;
