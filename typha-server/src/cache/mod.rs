//! The snapshot cache: one writer, many readers.
//!
//! The writer ([`writer::CacheWriter`]) owns the current KV map (an `imbl::OrdMap`, so every version
//! is an O(1), structure-sharing clone), the state digest, and the pipeline. Each batch of
//! changes (at most `max_batch` updates and `max_batch_bytes` of values) becomes one
//! [`breadcrumb::Breadcrumb`]: epoch, sequence number, upstream revision, the map version, the deltas,
//! the sync status and the combined digest, plus its delta frame, encoded once. Readers
//! (connections) hold `Arc`s to breadcrumbs and never block the writer. History is bounded by
//! count and age: a client of ours that falls out of the window resumes by digest or gets a
//! fresh snapshot instead of deltas. A Calico-protocol client cannot resume, so its cursor pins
//! the breadcrumbs after it ([`Cache::pin`]) up to [`CacheConfig::pinned_max_age`], as long as
//! Typha's own rule would let it lag. Each breadcrumb carries what its key held before each
//! change, so a Calico client's next step never needs an older map version.
//!
//! Files: [`breadcrumb`] (one step and its frames), [`writer`] (the single writer),
//! [`calico`] (what Calico-protocol clients get, encoded once per syncer type),
//! [`pipeline`] (conversion, validation and key ownership between the syncer and the writer),
//! [`snapshot`] (the shared frames that bring a joining client up to date), [`held`] (how the
//! map holds a value: plain, or compressed with a dictionary trained on the map's values);
//! this file holds the read side, [`Cache`].

pub mod breadcrumb;
pub mod calico;
pub mod held;
pub mod herald;
pub mod pipeline;
pub mod snapshot;
pub mod writer;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::watch;
use typha_protocol::message::{Epoch, Seq};

use crate::calico::libcalico::{Driver, SyncerType};
use crate::fanout::Variant;
use crate::metrics::Metrics;
use breadcrumb::Breadcrumb;

/// Where Calico's v3 Node resources live in the cache: one key per node of the cluster (what
/// Typha's node counter and `typha_cluster_nodes` count).
pub const NODES_PREFIX: &str = "/calico/resources/v3/projectcalico.org/nodes/";

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
    /// frames per second go out in all (0: a fixed `min_interval`): 1,000 clients at 15,000
    /// frames/s get a 67 ms window. Per-frame work (a TLS record, a syscall, a wake-up on
    /// each side) is what fan-out costs; bigger frames cost little more. This is the latency
    /// budget: how long a current client may wait so that several updates leave in one
    /// write. It only costs latency when updates come faster than one per window (an
    /// isolated update is not delayed); see BENCHMARKS.md "Latency budgets" for the
    /// CPU-per-delivery and p99 each budget gave.
    pub fanout_frames_per_sec: u64,
    /// The largest window the budget may ask for: 100 ms, where 10,000 clients at 100
    /// updates/s had their lowest p99 on 2 cores (BENCHMARKS.md "Latency budgets", 10,000
    /// nodes).
    pub max_interval: Duration,
    /// How long a breadcrumb a Calico client still needs ([`Cache::pin`]) is kept past the
    /// history limits: the longest such a client may lag before it is dropped (Typha's
    /// fall-behind limit plus the new client's grace). Our own clients resume by digest when
    /// they fall out of the history; Calico's protocol has no resume, so for them the history
    /// must reach as far back as Typha's own rule lets them lag.
    pub pinned_max_age: Duration,
    /// Whose revisions Calico's clients are sent: those of Calico's etcd driver (the default)
    /// or of its Kubernetes driver. [`crate::server::start`] sets it from the datastore
    /// ([`crate::datastore::Datastore::calico_driver`]).
    pub calico_driver: Driver,
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
            fanout_frames_per_sec: 15_000,
            max_interval: Duration::from_millis(100),
            pinned_max_age: Duration::from_secs(600),
            calico_driver: Driver::Etcd,
        }
    }
}

/// The read side of the cache, shared by every connection.
#[derive(Debug)]
pub struct Cache {
    epoch: Epoch,
    crumbs: RwLock<VecDeque<Arc<Breadcrumb>>>,
    latest: watch::Sender<Arc<Breadcrumb>>,
    ever_in_sync: std::sync::atomic::AtomicBool,
    /// The cursors of connections that cannot resume (Calico's protocol): the breadcrumbs
    /// after the oldest are kept up to [`CacheConfig::pinned_max_age`].
    pins: Mutex<Vec<Weak<AtomicU64>>>,
    /// Whose revisions Calico's clients are sent ([`CacheConfig::calico_driver`]).
    pub calico_driver: Driver,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Connections following the breadcrumbs ([`Cache::follow`]): the batch window grows
    /// with them ([`CacheConfig::window`]).
    followers: AtomicUsize,
    /// Of them, those of Calico's protocol (the herald translates only while there are).
    calico_followers: AtomicUsize,
    /// Every breadcrumb's sequence number, as it is published: what our protocol's
    /// connections wake on.
    every: watch::Sender<Seq>,
    /// Per Calico syncer type (felix, bgp, tunnel-ip-allocation, node-status), the last breadcrumb with something
    /// for it, as [`herald::run`] tells it: what Calico connections wake on.
    calico_news: [watch::Sender<Seq>; 4],
}

/// A connection following the breadcrumbs, counted from [`Cache::follow`] until dropped (in
/// the count the writer's batch window reads, and in Typha's `typha_connections_streaming`
/// for its syncer type).
#[derive(Debug)]
pub struct Follower {
    cache: Arc<Cache>,
    syncer: SyncerType,
    calico: bool,
}

impl Drop for Follower {
    fn drop(&mut self) {
        self.cache.followers.fetch_sub(1, Ordering::AcqRel);
        if self.calico {
            self.cache.calico_followers.fetch_sub(1, Ordering::AcqRel);
        }
        self.cache
            .metrics
            .connections_streaming
            .of(self.syncer)
            .dec();
    }
}

/// A connection's cursor, keeping the breadcrumbs after it in the history while it lags
/// (up to [`CacheConfig::pinned_max_age`]); released when dropped.
#[derive(Debug)]
pub struct Pin(Arc<AtomicU64>);

impl Pin {
    /// The connection has sent everything up to `seq`.
    pub fn set(&self, seq: Seq) {
        self.0.store(seq.0, Ordering::Relaxed);
    }
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

    /// Keeps the breadcrumbs after `at` while the returned pin lives (and moves with it).
    pub fn pin(&self, at: Seq) -> Pin {
        let p = Arc::new(AtomicU64::new(at.0));
        let mut pins = self.pins.lock().unwrap_or_else(|e| e.into_inner());
        pins.push(Arc::downgrade(&p));
        Pin(p)
    }

    /// The oldest pinned cursor, if any; forgets released pins.
    fn oldest_pin(&self) -> Option<u64> {
        let mut pins = self.pins.lock().unwrap_or_else(|e| e.into_inner());
        let mut oldest = None;
        pins.retain(|w| match w.upgrade() {
            Some(p) => {
                let seq = p.load(Ordering::Relaxed);
                oldest = Some(oldest.map_or(seq, |o: u64| o.min(seq)));
                true
            }
            None => false,
        });
        oldest
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

    /// A connection of `syncer` type (of Calico's protocol: `calico`) starts following the
    /// breadcrumbs (its initial sync is done); it stops when the guard is dropped.
    pub fn follow(self: &Arc<Self>, syncer: SyncerType, calico: bool) -> Follower {
        self.followers.fetch_add(1, Ordering::AcqRel);
        if calico {
            self.calico_followers.fetch_add(1, Ordering::AcqRel);
        }
        self.metrics.connections_streaming.of(syncer).inc();
        Follower {
            cache: self.clone(),
            syncer,
            calico,
        }
    }

    /// Connections following the breadcrumbs now.
    pub fn followers(&self) -> usize {
        self.followers.load(Ordering::Acquire)
    }

    /// Connections of Calico's protocol following the breadcrumbs now.
    pub fn calico_followers(&self) -> usize {
        self.calico_followers.load(Ordering::Acquire)
    }

    /// Wakes on every new breadcrumb.
    pub fn subscribe(&self) -> watch::Receiver<Arc<Breadcrumb>> {
        self.latest.subscribe()
    }

    /// Wakes a connection when there is something new for it: on every breadcrumb (`None`:
    /// our protocol), or on those with something for a Calico client of this syncer type
    /// (as [`herald::run`] tells them; Typha's syncer types have breadcrumbs of their own).
    /// The value is the sequence number of the breadcrumb that woke it.
    pub fn wake_on(&self, syncer: Option<SyncerType>) -> watch::Receiver<Seq> {
        match syncer {
            None => self.every.subscribe(),
            Some(t) => self.news(t).subscribe(),
        }
    }

    /// The channel of the breadcrumbs with something for Calico clients of `t`.
    fn news(&self, t: SyncerType) -> &watch::Sender<Seq> {
        let [felix, bgp, tunnel, status] = &self.calico_news;
        match t {
            SyncerType::Felix => felix,
            SyncerType::Bgp => bgp,
            SyncerType::TunnelIpAllocation => tunnel,
            SyncerType::NodeStatus => status,
        }
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

    /// The coalesced span of `stride` breadcrumbs ending at `end`, if `end` is aligned and
    /// every breadcrumb of the span is still in the history.
    pub fn span_frame(&self, end: &Breadcrumb, stride: u64, v: Variant) -> Option<Bytes> {
        end.span_frame(stride, v, &self.metrics, |from, to| self.range(from, to))
    }
}

#[cfg(test)]
mod tests;
