//! What a swarm's nodes count together (ours and the Calico-protocol ones), and the clock
//! their latencies are measured against: a leaf both kinds of node use.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use hdrhistogram::Histogram;

/// What a swarm's nodes count together.
pub(crate) struct Shared {
    pub(crate) in_sync: AtomicUsize,
    /// Typha-client nodes whose server said, last, that its view of the datastore is stale.
    pub(crate) stale: AtomicUsize,
    /// Times a typha-client node was told its server's view turned stale (each turn counts
    /// once; a node that then moves to a current replica stays counted).
    pub(crate) stale_told: AtomicU64,
    /// Direct (etcd or Kubernetes) or Calico-protocol nodes connected.
    pub(crate) direct_connected: AtomicU64,
    pub(crate) updates: AtomicU64,
    pub(crate) churn_updates: AtomicU64,
    pub(crate) churn_frames: AtomicU64,
    /// Bytes Calico-protocol nodes read.
    pub(crate) calico_bytes: AtomicU64,
    /// Calico-protocol sessions that ended (each reconnects).
    pub(crate) calico_failures: AtomicU64,
    /// The latest `mark` command's number (0: none yet): a Calico-protocol session started
    /// after it counts in `resynced` when it reaches InSync.
    pub(crate) mark: AtomicU64,
    /// Calico-protocol nodes that have been in sync in a session started after the latest
    /// mark (each node once).
    pub(crate) resynced: AtomicUsize,
    /// Set by a mark: the session failures up to then plus one per Calico connection (the
    /// one each loses to a crash). The first few failures beyond it are shown with their
    /// reason, as the first few of the run are: the extra ones of a resync.
    pub(crate) calico_failures_extra_from: AtomicU64,
    pub(crate) latency: Vec<Mutex<Histogram<u64>>>,
}

impl Shared {
    /// Moves one node's in-sync flag (`was`) to `now`, keeping the count of nodes in sync.
    pub(crate) fn set_in_sync(&self, was: &mut bool, now: bool) {
        flip(&self.in_sync, was, now);
    }

    /// Moves one node's stale flag (`was`) to `now`, keeping the count of stale nodes.
    pub(crate) fn set_stale(&self, was: &mut bool, now: bool) {
        if now && !*was {
            self.stale_told.fetch_add(1, Ordering::Relaxed);
        }
        flip(&self.stale, was, now);
    }

    /// Counts one frame's churn updates and records their latencies (µs).
    pub(crate) fn record(&self, shard: usize, lat: &[u64]) {
        if lat.is_empty() {
            return;
        }
        self.churn_updates
            .fetch_add(lat.len() as u64, Ordering::Relaxed);
        self.churn_frames.fetch_add(1, Ordering::Relaxed);
        if let Some(h) = self.latency.get(shard) {
            let mut h = h.lock().unwrap_or_else(|p| p.into_inner());
            for us in lat {
                h.saturating_record(*us);
            }
        }
    }
}

/// Nanoseconds since the Unix epoch (0 if the clock is before it).
/// Moves a flag (`was`) to `now`, keeping `count` of the flags set.
fn flip(count: &AtomicUsize, was: &mut bool, now: bool) {
    if now != *was {
        *was = now;
        if now {
            count.fetch_add(1, Ordering::Relaxed);
        } else {
            count.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

pub(crate) fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}
