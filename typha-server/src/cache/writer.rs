//! The cache's single writer: takes the syncer's events through the pipeline, applies them to
//! the map and the digest, and publishes breadcrumbs.

use std::collections::VecDeque;
use std::sync::{Arc, RwLock};

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tracing::debug;
use typha_protocol::digest::{KeyHash, StateDigest};
use typha_protocol::message::{Epoch, Seq};
use typha_protocol::model::{EncodedValue, Revision, SyncStatus, Update, UpdateKind};

use super::breadcrumb::{Breadcrumb, CrumbFrames, Kv, KvMap, MAP_VERSIONS_KEPT};
use super::held::{self, Held};
use super::pipeline::{KvChange, Pipeline};
use super::{Cache, CacheConfig, NODES_PREFIX};
use crate::datastore::WatchEvent;
use crate::fanout::Variant;
use crate::liveness::Heartbeat;
use crate::metrics::Metrics;
use crate::syncer::SyncerEvent;

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
    /// Keys under [`NODES_PREFIX`] in `map`, kept as changes apply (a scan of the map per
    /// breadcrumb would cost O(nodes) on the writer's path).
    nodes: usize,
    /// The keys outside the version 1 view (docs/protocol.md, "Adding a kind"): how many
    /// there are, the XOR of their digest entries (the version 1 digest is the full one
    /// without them), and whether the batch being built holds one.
    later: Later,
    /// The dictionary the map's values are held compressed with ([`held`]), once trained.
    dict: Option<Arc<crate::zdict::Dict>>,
    /// When the map holds this many values, the writer trains a new dictionary.
    next_training: usize,
}

#[derive(Debug, Default)]
struct Later {
    kvs: usize,
    digest: u64,
    in_batch: bool,
    last: Seq,
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
            previous: Arc::from(Vec::new()),
            object_revisions: Arc::from(Vec::new()),
            status: SyncStatus::WaitForDatastore,
            digest: 0,
            digest_v1: 0,
            later_kvs: 0,
            last_later: Seq(0),
            frames: CrumbFrames::default(),
        });
        let cache = Arc::new(Cache {
            epoch,
            crumbs: RwLock::new(VecDeque::from([first.clone()])),
            latest: watch::channel(first).0,
            ever_in_sync: std::sync::atomic::AtomicBool::new(false),
            pins: Default::default(),
            calico_driver: cfg.calico_driver,
            metrics,
            followers: Default::default(),
            calico_followers: Default::default(),
            every: watch::channel(Seq(0)).0,
            calico_news: std::array::from_fn(|_| watch::channel(Seq(0)).0),
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
            nodes: 0,
            later: Later::default(),
            dict: None,
            next_training: held::FIRST_TRAINING,
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
                .map(|u| KvChange {
                    // An upstream server of ours sends one revision per change: the best there
                    // is for Calico's clients too.
                    object_revision: if u.value.is_some() {
                        u.revision
                    } else {
                        Revision(0)
                    },
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
        // What each change's key held before it, and each change's object revision, beside
        // `batch`.
        let mut previous: Vec<Option<Held>> = Vec::new();
        let mut objects: Vec<Revision> = Vec::new();
        let mut batch_bytes = 0;
        let n = changes.len();
        for (i, c) in changes.into_iter().enumerate() {
            // Typha's `typha_updates_total` counts every update the cache receives, including
            // those it then skips.
            m.updates.inc();
            // The old value's bytes, decompressed once if held compressed: for the no-op check
            // and the digest.
            let old = self.map.get(&c.key).map(|o| o.value.bytes());
            let kind = match (&c.value, &old) {
                (None, None) => continue,
                (Some(v), Some(o)) if **o == *v.as_bytes() => {
                    m.updates_skipped.inc();
                    continue;
                }
                (None, Some(_)) => UpdateKind::Deleted,
                (Some(_), Some(_)) => UpdateKind::Updated,
                (Some(_), None) => UpdateKind::New,
            };
            if matches!(kind, UpdateKind::New | UpdateKind::Deleted)
                && c.key.as_str().starts_with(NODES_PREFIX)
            {
                if kind == UpdateKind::New {
                    self.nodes += 1;
                } else {
                    self.nodes = self.nodes.saturating_sub(1);
                }
            }
            self.digest.apply(
                c.key.as_str(),
                old.as_deref(),
                c.value.as_ref().map(EncodedValue::as_bytes),
            );
            if !c.key.in_v1() {
                let h = KeyHash::of(c.key.as_str());
                for v in [old.as_deref(), c.value.as_ref().map(EncodedValue::as_bytes)]
                    .into_iter()
                    .flatten()
                {
                    self.later.digest ^= h.entry(v);
                }
                match kind {
                    UpdateKind::New => self.later.kvs += 1,
                    UpdateKind::Deleted => self.later.kvs = self.later.kvs.saturating_sub(1),
                    UpdateKind::Updated => {}
                }
                self.later.in_batch = true;
            }
            let before = match &c.value {
                Some(v) => {
                    batch_bytes += v.len();
                    let held = Held::hold(v, self.dict.as_ref());
                    let before = self.map.insert(
                        c.key.clone(),
                        Kv {
                            value: held,
                            revision: c.revision,
                            object_revision: c.object_revision,
                        },
                    );
                    if self.map.len() >= self.next_training {
                        self.train();
                    }
                    before
                }
                None => self.map.remove(&c.key),
            };
            previous.push(before.map(|kv| kv.value));
            objects.push(c.object_revision);
            self.revision = self.revision.max(c.revision);
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
                self.publish(
                    std::mem::take(&mut batch),
                    std::mem::take(&mut previous),
                    std::mem::take(&mut objects),
                    status,
                );
                batch_bytes = 0;
            }
        }
        if !batch.is_empty() || self.pending_status != self.status {
            self.publish(batch, previous, objects, self.pending_status);
        }
    }

    /// Lets the oldest breadcrumbs go while there are more than `history_max` or they are
    /// older than `history_max_age` (the latest always stays).
    fn trim(&self, crumbs: &mut VecDeque<Arc<Breadcrumb>>, now: Instant) {
        let pinned = self.cache.oldest_pin();
        while crumbs.len() > self.cfg.history_max.max(1)
            || crumbs.front().is_some_and(|c| {
                now.duration_since(c.created) > self.cfg.history_max_age && crumbs.len() > 1
            })
        {
            // A breadcrumb a lagging Calico connection still needs stays until that
            // connection would be dropped for its lag anyway.
            let needed = crumbs.front().is_some_and(|c| {
                pinned.is_some_and(|p| c.seq.0 > p)
                    && now.duration_since(c.created) <= self.cfg.pinned_max_age
            });
            if needed {
                break;
            }
            crumbs.pop_front();
        }
    }

    /// Ages the history out while nothing is published (a quiet cluster): the breadcrumbs of
    /// a large load hold every value it wrote, which the map holds compressed.
    pub(super) fn trim_idle(&self) {
        let now = Instant::now();
        let stale = {
            let crumbs = self.cache.crumbs.read().unwrap_or_else(|p| p.into_inner());
            crumbs.len() > 1
                && crumbs
                    .front()
                    .is_some_and(|c| now.duration_since(c.created) > self.cfg.history_max_age)
        };
        if stale {
            let mut crumbs = self.cache.crumbs.write().unwrap_or_else(|p| p.into_inner());
            self.trim(&mut crumbs, now);
        }
    }

    /// Trains a dictionary on the map's values and holds every value with it: a new map,
    /// built afresh (the published versions keep theirs until they are let go). Inside the
    /// initial load, not after it, so that what the load's last breadcrumbs keep is held
    /// compressed too.
    fn train(&mut self) {
        self.next_training = self.map.len().saturating_mul(held::RETRAIN_GROWTH);
        let Some(dict) = held::train(self.map.values().map(|kv| &kv.value)) else {
            return;
        };
        let started = std::time::Instant::now();
        self.map = self
            .map
            .iter()
            .map(|(k, kv)| {
                (
                    k.clone(),
                    Kv {
                        value: kv.value.rehold(&dict),
                        revision: kv.revision,
                        object_revision: kv.object_revision,
                    },
                )
            })
            .collect();
        debug!(
            values = self.map.len(),
            dict_bytes = dict.len(),
            secs = started.elapsed().as_secs_f64(),
            "cache values held with a new dictionary"
        );
        self.dict = Some(dict);
    }

    fn publish(
        &mut self,
        deltas: Vec<Update>,
        previous: Vec<Option<Held>>,
        object_revisions: Vec<Revision>,
        status: SyncStatus,
    ) {
        self.seq += 1;
        self.last_publish = Some(Instant::now());
        self.status = status;
        let m = &self.cache.metrics;
        m.breadcrumb_size.observe(deltas.len() as f64);
        if std::mem::take(&mut self.later.in_batch) || self.later.kvs > 0 {
            self.later.last = Seq(self.seq);
        }
        let digest = self.digest.combined();
        let crumb = Arc::new(Breadcrumb {
            epoch: self.cache.epoch,
            seq: Seq(self.seq),
            revision: self.revision,
            created: Instant::now(),
            map: arc_swap::ArcSwapOption::from_pointee(self.map.clone()),
            kvs: self.map.len(),
            deltas: Arc::from(deltas),
            previous: Arc::from(previous),
            object_revisions: Arc::from(object_revisions),
            status,
            digest,
            digest_v1: digest ^ self.later.digest,
            later_kvs: self.later.kvs,
            last_later: self.later.last,
            frames: CrumbFrames::default(),
        });
        // Encode the common (compressed) delta frame now, once, off the connections' path.
        crumb.delta_frame(Variant::all(true), m);
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
            self.trim(&mut crumbs, crumb.created);
        }
        m.breadcrumb_seq
            .set(i64::try_from(self.seq).unwrap_or(i64::MAX));
        m.cache_size
            .set(i64::try_from(self.map.len()).unwrap_or(i64::MAX));
        m.in_sync.set(i64::from(status == SyncStatus::InSync));
        m.cluster_nodes
            .set(i64::try_from(self.nodes).unwrap_or(i64::MAX));
        m.state_revision
            .set(i64::try_from(self.revision.0).unwrap_or(i64::MAX));
        m.state_digest.set(exported_digest(crumb.digest));
        debug!(seq = self.seq, updates = crumb.deltas.len(), %status, "breadcrumb");
        if status == SyncStatus::InSync {
            self.cache
                .ever_in_sync
                .store(true, std::sync::atomic::Ordering::Release);
        }
        let seq = crumb.seq;
        self.cache.latest.send_replace(crumb);
        self.cache.every.send_replace(seq);
    }

    /// Runs until the syncer's channel closes, batching what arrives together: everything
    /// already queued, and, when the previous breadcrumb is younger than the window (see
    /// [`CacheConfig::window`]), whatever arrives until it is that old (or the batch is full).
    /// It beats `heartbeat` at least once a second, idle or not (liveness).
    pub async fn run(mut self, mut rx: mpsc::Receiver<SyncerEvent>, heartbeat: Arc<Heartbeat>) {
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
        loop {
            heartbeat.beat();
            let ev = tokio::select! {
                ev = rx.recv() => ev,
                _ = tick.tick() => {
                    self.trim_idle();
                    continue;
                }
            };
            let Some(ev) = ev else { return };
            self.handle(ev);
            self.drain(&mut rx);
            let clients = self.cache.followers();
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

    /// Nodes in the current state (keys under [`NODES_PREFIX`]).
    pub fn nodes(&self) -> usize {
        self.nodes
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

/// The state digest as `typha_state_digest` exports it: its low 52 bits, which a float64 (what
/// Prometheus stores) holds exactly, so replicas with different digests never show equal
/// values by rounding.
pub fn exported_digest(digest: u64) -> i64 {
    // Below 2^52: always fits an i64.
    (digest & ((1 << 52) - 1)) as i64
}
