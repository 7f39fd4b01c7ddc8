//! Every open connection, in one place: what each is doing ([`ConnInfo`], for `/status`), how
//! to close it (a Goodbye, for balancing and the drain), its task (for shutdown) and its place
//! under the connection limits ([`Slots`]). `/status`, the governor, the drain and shutdown all
//! read it; the metrics are written beside it (the per-phase gauges by [`ConnInfo`], the
//! connection count by [`Slots`]), never read back for a decision.
//!
//! A connection is registered when it is accepted (before TLS) and removed when its task ends
//! (its [`Registered`] handle is dropped); it can be closed once it has been admitted
//! ([`Registered::closable`]: past TLS, its protocol known and under the limits). Its task
//! updates its own entry with atomics, so the lock is taken only to add, remove, close and
//! list.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use serde_json::Value;
use tokio::sync::oneshot;
use tokio::task::JoinSet;
use tokio::time::Instant;

use typha_protocol::message::GoodbyeReason;

use super::info::{ConnInfo, Phase};
use super::limit::Slots;
use crate::cache::Cache;
use crate::metrics::Metrics;

/// The server's request to close a connection: why, and where the client should go instead
/// (`None`: `Ctx::suggest`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Close {
    /// The reason sent in the Goodbye.
    pub reason: GoodbyeReason,
    /// Servers to suggest, best first.
    pub redirect: Option<Vec<String>>,
}

impl Close {
    /// A close for `reason`, suggesting the usual servers.
    pub fn because(reason: GoodbyeReason) -> Self {
        Close {
            reason,
            redirect: None,
        }
    }
}

/// The entries, under one lock.
#[derive(Debug, Default)]
struct Inner {
    /// Every open connection.
    infos: HashMap<u64, Arc<ConnInfo>>,
    /// How to close each admitted one not yet asked to.
    closers: HashMap<u64, oneshot::Sender<Close>>,
}

/// Every open connection: see the module's doc.
#[derive(Debug)]
pub struct ConnRegistry {
    next: AtomicU64,
    conns: Mutex<Inner>,
    tasks: Mutex<JoinSet<()>>,
    /// The connection limits and what is held against them (counted from accept).
    pub slots: Arc<Slots>,
}

/// How many connections are in each phase (`/status`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PhaseCounts {
    /// Accepted; TLS or the hello not done.
    pub handshaking: usize,
    /// Past the hello, waiting for a turn to be synced.
    pub waiting: usize,
    /// Being sent an initial sync.
    pub syncing: usize,
    /// Following the breadcrumbs.
    pub streaming: usize,
}

/// How a shutdown's wait for the connections' tasks ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Finished {
    /// Tasks still running when the wait ran out, aborted.
    pub aborted: usize,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section is one map or set operation: still consistent after a panic.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl ConnRegistry {
    /// No connection yet; `slots` holds the limits.
    pub fn new(slots: Arc<Slots>) -> Arc<Self> {
        Arc::new(ConnRegistry {
            next: AtomicU64::new(0),
            conns: Mutex::new(Inner::default()),
            tasks: Mutex::new(JoinSet::new()),
            slots,
        })
    }

    /// Registers a connection from `peer`, accepted at `accepted`, handshaking.
    pub fn register(
        self: &Arc<Self>,
        peer: SocketAddr,
        accepted: Instant,
        metrics: Arc<Metrics>,
    ) -> Registered {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let info = Arc::new(ConnInfo::new(peer, accepted, metrics));
        lock(&self.conns).infos.insert(id, info.clone());
        Registered {
            registry: self.clone(),
            id,
            info,
        }
    }

    /// Runs a connection's task; shutdown waits for it ([`ConnRegistry::finish`]). Tasks that
    /// have ended are reaped here, so the set holds the running ones.
    pub fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        let mut t = lock(&self.tasks);
        while t.try_join_next().is_some() {}
        t.spawn(task);
    }

    /// Open connections (admitted or not).
    pub fn len(&self) -> usize {
        lock(&self.conns).infos.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        lock(&self.conns).infos.is_empty()
    }

    /// Admitted connections not yet asked to close: those a close would reach.
    pub fn closable(&self) -> usize {
        lock(&self.conns).closers.len()
    }

    /// Asks one admitted connection (picked by `pick` among the `n` closable, `0..n`) to close;
    /// `false` if there was none.
    fn close_one(&self, close: Close, pick: impl FnOnce(usize) -> usize) -> bool {
        let tx = {
            let mut conns = lock(&self.conns);
            let n = conns.closers.len();
            if n == 0 {
                return false;
            }
            let k = pick(n).min(n - 1);
            let id = conns.closers.keys().nth(k).copied();
            id.and_then(|id| conns.closers.remove(&id))
        };
        let Some(tx) = tx else { return false };
        // A connection whose task has just ended has dropped its receiver: nothing to close.
        let _ = tx.send(close);
        true
    }

    /// Asks a random admitted connection to close (balancing); `false` if there was none.
    pub fn close_random(&self, close: Close) -> bool {
        self.close_one(close, |n| rand::random_range(0..n))
    }

    /// Asks the next admitted connection to close (the drain); `false` if there was none.
    pub fn close_next(&self, close: Close) -> bool {
        self.close_one(close, |_| 0)
    }

    /// Closes every admitted connection with a shutdown, one at a time, paced as Typha paces
    /// a shutdown so clients move elsewhere without a stampede: one every 0.95 × `timeout` /
    /// connections, at most 1 s apart. Ends when none is left or `timeout` has passed (the
    /// caller closes what is left at once). `closed(left)` is told after each close, with how
    /// many are left. Returns how many it closed.
    pub async fn drain(&self, timeout: Duration, mut closed: impl FnMut(usize)) -> usize {
        let start = tokio::time::Instant::now();
        let n = self.closable();
        let step = timeout
            .mul_f64(0.95)
            .checked_div(u32::try_from(n.max(1)).unwrap_or(u32::MAX))
            .unwrap_or_default()
            .min(Duration::from_secs(1));
        tracing::info!(
            connections = n,
            ?step,
            "shutting down: closing connections gradually"
        );
        let mut done = 0;
        while self.close_next(Close::because(GoodbyeReason::Shutdown)) {
            done += 1;
            let left = self.closable();
            closed(left);
            if left == 0 || start.elapsed() >= timeout {
                break;
            }
            tokio::time::sleep(step).await;
        }
        done
    }

    /// Asks every admitted connection to close; how many were asked.
    pub fn close_all(&self, close: &Close) -> usize {
        let txs: Vec<_> = lock(&self.conns)
            .closers
            .drain()
            .map(|(_, tx)| tx)
            .collect();
        let n = txs.len();
        for tx in txs {
            let _ = tx.send(close.clone());
        }
        n
    }

    /// Waits up to `bound` for every connection's task to end, all of them together, then
    /// aborts the rest (stuck in a handshake, or in a write to a client that stopped reading):
    /// however many there are, it takes at most `bound`.
    pub async fn finish(&self, bound: Duration) -> Finished {
        let mut tasks = std::mem::take(&mut *lock(&self.tasks));
        let all = async { while tasks.join_next().await.is_some() {} };
        if tokio::time::timeout(bound, all).await.is_ok() {
            return Finished { aborted: 0 };
        }
        let aborted = tasks.len();
        tasks.shutdown().await;
        Finished { aborted }
    }

    /// Connections in each phase now.
    pub fn phases(&self) -> PhaseCounts {
        let mut c = PhaseCounts::default();
        for info in lock(&self.conns).infos.values() {
            match info.phase() {
                Phase::Handshaking => c.handshaking += 1,
                Phase::Waiting => c.waiting += 1,
                Phase::Syncing => c.syncing += 1,
                Phase::Streaming => c.streaming += 1,
            }
        }
        c
    }

    /// Every connection as `/status?nodes` shows it, by node name, then address.
    pub fn nodes_json(&self, cache: &Cache) -> Vec<Value> {
        let conns: Vec<Arc<ConnInfo>> = lock(&self.conns).infos.values().cloned().collect();
        let latest = cache.latest().seq;
        let now = SystemTime::now();
        let mut out: Vec<(Option<String>, SocketAddr, Value)> = conns
            .iter()
            .map(|c| {
                (
                    c.name().map(str::to_owned),
                    c.peer(),
                    c.json(cache, latest, now),
                )
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)));
        out.into_iter().map(|(_, _, v)| v).collect()
    }
}

/// A connection's entry in the registry, removed when this is dropped (when its task ends).
#[derive(Debug)]
pub struct Registered {
    registry: Arc<ConnRegistry>,
    id: u64,
    info: Arc<ConnInfo>,
}

impl Registered {
    /// The connection was admitted: from now on balancing, the drain and shutdown can close it.
    /// What they ask arrives on the receiver.
    pub fn closable(&self) -> oneshot::Receiver<Close> {
        let (tx, rx) = oneshot::channel();
        lock(&self.registry.conns).closers.insert(self.id, tx);
        rx
    }
}

impl std::ops::Deref for Registered {
    type Target = ConnInfo;
    fn deref(&self) -> &ConnInfo {
        &self.info
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.info.left();
        let mut conns = lock(&self.registry.conns);
        conns.infos.remove(&self.id);
        conns.closers.remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::CacheConfig;
    use crate::cache::writer::CacheWriter;
    use crate::calico::libcalico::SyncerType;
    use crate::conn::info::MAX_NAME;
    use crate::governor::share::Limits;
    use crate::metrics::ResumeKind;
    use typha_protocol::message::{Epoch, Seq};

    fn registry(metrics: &Arc<Metrics>) -> Arc<ConnRegistry> {
        ConnRegistry::new(Slots::new(Limits::flat(10), metrics.clone()))
    }

    #[tokio::test]
    async fn phases_keep_the_gauges_and_the_table_lists_each_node() {
        let metrics = Metrics::unregistered();
        let (_w, cache) = CacheWriter::new(CacheConfig::default(), Epoch(1), metrics.clone());
        let table = registry(&metrics);
        let a = table.register(
            "192.0.2.7:40000".parse().unwrap(),
            Instant::now(),
            metrics.clone(),
        );
        let b = table.register(
            "192.0.2.8:40000".parse().unwrap(),
            Instant::now(),
            metrics.clone(),
        );
        assert_eq!(metrics.connections_handshaking.get(), 2);
        a.hello("node-b", "typha-client/1", "v1");
        assert_eq!(a.phase(), Phase::Waiting);
        assert_eq!(metrics.connections_handshaking.get(), 1);
        a.set_phase(Phase::Syncing);
        assert_eq!(metrics.connections_syncing.get(), 1);
        a.synced(ResumeKind::digest, Seq(0));
        a.acked(Seq(0));
        assert_eq!(metrics.connections_syncing.get(), 0);
        b.hello(&"é".repeat(1000), "x", "v1");
        b.set_phase(Phase::Syncing);

        let nodes = table.nodes_json(&cache);
        assert_eq!(nodes.len(), 2);
        let a_json = &nodes[0];
        assert_eq!(a_json["name"], "node-b");
        assert_eq!(a_json["address"], "192.0.2.7:40000");
        assert_eq!(a_json["phase"], "streaming");
        assert_eq!(a_json["resumed"], "digest");
        assert_eq!(a_json["lag"], 0);
        assert_eq!(a_json["behind_secs"], 0.0);
        assert!(a_json["connected_since"].as_f64().unwrap() > 1.7e9);
        let b_json = &nodes[1];
        assert_eq!(
            b_json["name"].as_str().unwrap().len(),
            MAX_NAME - 1,
            "cut on a boundary"
        );
        assert_eq!(b_json["phase"], "syncing");
        assert!(b_json.get("seq").is_none());

        // A Calico client: its protocol and syncer type; no acks, so behind by what has not
        // been written to it.
        let c = table.register(
            "192.0.2.9:40000".parse().unwrap(),
            Instant::now(),
            metrics.clone(),
        );
        c.calico_hello("node-c", "", "calico v3.32.0", SyncerType::Bgp);
        c.synced(ResumeKind::snapshot, Seq(0));
        let nodes = table.nodes_json(&cache);
        let c_json = nodes.iter().find(|n| n["name"] == "node-c").unwrap();
        assert_eq!(c_json["protocol"], "calico");
        assert_eq!(c_json["syncer"], "bgp");
        assert_eq!(c_json["acked"], Value::Null);
        assert_eq!(c_json["ack_lag"], Value::Null);
        assert_eq!(c_json["behind_secs"], 0.0, "written everything there is");
        assert_eq!(nodes[0]["protocol"], "typha-rs");
        assert_eq!(nodes[0]["syncer"], "felix");
        drop(c);

        drop(b);
        assert_eq!(metrics.connections_syncing.get(), 0);
        assert_eq!(table.len(), 1);
        drop(a);
        assert!(table.is_empty());
        assert_eq!(metrics.connections_handshaking.get(), 0);
    }

    #[tokio::test]
    async fn closes_reach_admitted_connections_once_each() {
        let metrics = Metrics::unregistered();
        let reg = registry(&metrics);
        let peer: SocketAddr = "192.0.2.7:40000".parse().unwrap();
        let a = reg.register(peer, Instant::now(), metrics.clone());
        let b = reg.register(peer, Instant::now(), metrics.clone());
        let _handshaking = reg.register(peer, Instant::now(), metrics.clone());
        assert_eq!((reg.len(), reg.closable()), (3, 0), "none admitted yet");
        assert!(!reg.close_next(Close::because(GoodbyeReason::Shutdown)));
        let mut a_rx = a.closable();
        let mut b_rx = b.closable();
        assert_eq!(reg.closable(), 2);
        assert!(reg.close_random(Close::because(GoodbyeReason::Rebalance)));
        assert_eq!(reg.closable(), 1, "asked once, not again");
        assert_eq!(reg.close_all(&Close::because(GoodbyeReason::Shutdown)), 1);
        let (ra, rb) = (a_rx.try_recv().unwrap(), b_rx.try_recv().unwrap());
        let mut reasons = [ra.reason, rb.reason];
        reasons.sort_by_key(|r| format!("{r:?}"));
        assert_eq!(reasons, [GoodbyeReason::Rebalance, GoodbyeReason::Shutdown]);
        assert!(!reg.close_random(Close::because(GoodbyeReason::Rebalance)));
        drop(a);
        assert_eq!(reg.len(), 2, "listed until its task ends");
    }

    #[tokio::test(start_paused = true)]
    async fn finish_waits_once_for_all_tasks_then_aborts_the_rest() {
        let metrics = Metrics::unregistered();
        let reg = registry(&metrics);
        reg.spawn(async {});
        for _ in 0..10 {
            reg.spawn(std::future::pending());
        }
        let began = Instant::now();
        let f = reg.finish(Duration::from_secs(2)).await;
        assert_eq!(f.aborted, 10);
        assert_eq!(
            began.elapsed(),
            Duration::from_secs(2),
            "one bound for all ten"
        );
        let f = reg.finish(Duration::from_secs(2)).await;
        assert_eq!(
            (f.aborted, began.elapsed()),
            (0, Duration::from_secs(2)),
            "none left"
        );
    }
}
