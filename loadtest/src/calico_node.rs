//! A Calico-protocol node inside a swarm (`__swarm --calico SYNCER[,SYNCER...]`): one
//! connection per syncer type, each speaking Calico's Typha protocol as calico-node v3.32's
//! processes do (the hello with snappy offered, an ACK for each decoder restart, a pong for
//! each ping): Felix (`felix`), confd (`bgp`), the tunnel address allocator
//! (`tunnel-ip-allocation`) and the status reporter (`node-status`) each hold one. A node's
//! connections live in the same swarm as the node, under its one hostname, each with a state
//! of its own. The session is `typha_client::calico::run_with`, the one our differential tests
//! hold against Go's client; this node is its observer, seeing each event as it arrives (in
//! sync, the latency of every update, counts and bytes) and keeping only what is below.
//!
//! What the swarm's connections count goes to its totals (`tally::Shared`) and to their
//! syncer type's [`SyncerTally`], so the coordinator reports each type apart: the churn
//! reaches felix only, while a bgp connection holds Nodes, pools and affinities and mostly
//! answers pings.
//!
//! What a connection keeps is small, as the light store of our own protocol's nodes: per key,
//! a hash of the key and a hash of (key, value), sorted (`hashes`: half what a hash map of
//! them takes), so deletions and updates are applied and the connection's
//! whole Calico state reduces to a digest (key count and the sum of the (key, value) hashes)
//! that the coordinator compares with a client's state ([`state_digest`]). Revisions are left
//! out: they are the datastore's, not part of what Calico's syncer consumers compare.
//!
//! Two kinds of node, both checked against that digest:
//! - a *full* node (the first `--full-nodes` of each swarm) decodes every message into typed
//!   updates ([`calico::run_with`]), as calico-node's client does, every field checked;
//! - every other node *skims* ([`calico::run_skimming`]): snappy and gob are read in full, but
//!   each update's key and value are hashed as soon as the update has arrived, with nothing
//!   built per update and no whole message held (a snapshot's `MsgKVs` is streamed). That is the cost a simulated node must have so that a 2-core machine
//!   measures the server and not the swarm (issue 22 asks the same of our own protocol).
//!
//! Latency, on every node: once its session is in sync, each update received is searched for
//! the churn's stamp (a byte search of the JSON, [`crate::etcd::sent_ns_json`]) and timed
//! against the clock as it is handed over, right after its message is decoded. Snapshot values
//! are not searched (the churn does not run during a sync; a session that resyncs during the
//! churn fails the run anyway).
//!
//! A session that fails (the server went away, a protocol error) is logged once, the node's
//! state is dropped as calico-node's restart drops it, and it reconnects after a second.

mod hashes;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, bail};
use hdrhistogram::Histogram;
use typha_client::calico::{self, CalicoHello, Event, Until};
use typha_protocol::calico::messages::SyncStatus;
use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

use crate::tally::{Shared, now_ns};

/// What a swarm's connections of one syncer type count together (their share of the
/// swarm's totals in [`Shared`]), printed in the swarm's progress as `calico.<syncer>.<field>`.
pub(crate) struct SyncerTally {
    /// The syncer type, as the hello names it.
    pub(crate) syncer: String,
    /// Connections that got the server's hello.
    connected: AtomicU64,
    /// Connections in sync.
    in_sync: AtomicUsize,
    /// Updates received (snapshot and deltas).
    updates: AtomicU64,
    /// Churn updates received (stamped) since the session was in sync.
    churn_updates: AtomicU64,
    /// Sessions that ended.
    failures: AtomicU64,
    /// Connections in sync in a session begun after the latest mark (each once).
    resynced: AtomicUsize,
    /// Latency of the churn updates, µs, in shards (taken by the `histograms` command).
    latency: Vec<Mutex<Histogram<u64>>>,
}

impl SyncerTally {
    /// Counters for `syncer`, with `shards` latency histograms.
    pub(crate) fn new(syncer: &str, shards: usize) -> anyhow::Result<Self> {
        Ok(Self {
            syncer: syncer.to_owned(),
            connected: AtomicU64::new(0),
            in_sync: AtomicUsize::new(0),
            updates: AtomicU64::new(0),
            churn_updates: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            resynced: AtomicUsize::new(0),
            latency: (0..shards.max(1))
                .map(|_| Histogram::new_with_bounds(1, 600_000_000, 3).map(Mutex::new))
                .collect::<Result<_, _>>()
                .context("histogram")?,
        })
    }

    /// Its fields for the swarm's progress line, `calico.<syncer>.<field>`.
    pub(crate) fn progress(&self, into: &mut serde_json::Map<String, serde_json::Value>) {
        let mut put = |field: &str, v: u64| {
            into.insert(format!("calico.{}.{field}", self.syncer), v.into());
        };
        put("connected", self.connected.load(Ordering::Relaxed));
        put("in_sync", self.in_sync.load(Ordering::Relaxed) as u64);
        put("updates", self.updates.load(Ordering::Relaxed));
        put("churn_updates", self.churn_updates.load(Ordering::Relaxed));
        put("failures", self.failures.load(Ordering::Relaxed));
        put("resynced", self.resynced.load(Ordering::SeqCst) as u64);
    }

    /// A new mark: no connection has resynced since.
    pub(crate) fn reset_resynced(&self) {
        self.resynced.store(0, Ordering::SeqCst);
    }

    /// The merged latency histogram of its shards, which are reset.
    pub(crate) fn take_histogram(&self) -> anyhow::Result<Histogram<u64>> {
        let mut merged = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3)?;
        for h in &self.latency {
            let mut h = h.lock().unwrap_or_else(|p| p.into_inner());
            merged.add(&*h).context("merging histograms")?;
            h.reset();
        }
        Ok(merged)
    }

    fn record(&self, shard: usize, lat: &[u64]) {
        if lat.is_empty() {
            return;
        }
        self.churn_updates
            .fetch_add(lat.len() as u64, Ordering::Relaxed);
        if let Some(h) = self.latency.get(shard) {
            let mut h = h.lock().unwrap_or_else(|p| p.into_inner());
            for us in lat {
                h.saturating_record(*us);
            }
        }
    }
}

/// Where a connection counts: the swarm's totals and its syncer type's.
#[derive(Clone, Copy)]
struct Counts<'a> {
    shared: &'a Shared,
    tally: &'a SyncerTally,
    shard: usize,
}

impl Counts<'_> {
    fn connected(self, up: bool) {
        for c in [&self.shared.direct_connected, &self.tally.connected] {
            if up {
                c.fetch_add(1, Ordering::Relaxed);
            } else {
                c.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    fn in_sync(self, now: bool) {
        for c in [&self.shared.in_sync, &self.tally.in_sync] {
            if now {
                c.fetch_add(1, Ordering::Relaxed);
            } else {
                c.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    fn resynced(self) {
        self.shared.resynced.fetch_add(1, Ordering::SeqCst);
        self.tally.resynced.fetch_add(1, Ordering::SeqCst);
    }

    fn updates(self, n: u64) {
        self.shared.updates.fetch_add(n, Ordering::Relaxed);
        self.tally.updates.fetch_add(n, Ordering::Relaxed);
    }

    fn failed(self) -> u64 {
        self.tally.failures.fetch_add(1, Ordering::Relaxed);
        self.shared.calico_failures.fetch_add(1, Ordering::Relaxed)
    }

    fn record(self, lat: &[u64]) {
        self.shared.record(self.shard, lat);
        self.tally.record(self.shard, lat);
    }
}

/// One connection's Calico state: key hash → hash of (key, value).
#[derive(Debug, Default)]
pub(crate) struct NodeState {
    kvs: hashes::KeyHashes,
    /// Decodes every update fully (a full node), rather than skimming.
    pub(crate) full: bool,
    /// Sessions that failed.
    pub(crate) failures: u64,
}

impl NodeState {
    /// An empty state; `full` decodes every update fully.
    pub(crate) fn new(full: bool) -> Self {
        Self {
            full,
            ..Default::default()
        }
    }

    /// `count:digest`, as [`state_digest`] says it.
    pub(crate) fn digest(&mut self) -> String {
        let sum = self.kvs.sum();
        format!("{}:{sum:016x}", self.kvs.len())
    }

    /// Takes one update (an empty value deletes the key).
    fn apply(&mut self, key: &[u8], value: &[u8]) {
        let k = xxh3_64(key);
        self.kvs
            .set(k, (!value.is_empty()).then(|| xxh3_64_with_seed(value, k)));
    }

    /// The session is in sync: the keys that came with the snapshot are sorted in now, so
    /// the state holds no more than its keys while it is quiet.
    fn synced(&mut self) {
        self.kvs.merge();
    }
}

/// The digest a node reports for these (key, value) pairs: what the coordinator expects.
pub(crate) fn state_digest<'a>(kvs: impl Iterator<Item = (&'a str, &'a [u8])>) -> String {
    let mut st = NodeState::default();
    for (k, v) in kvs {
        st.apply(k.as_bytes(), v);
    }
    st.digest()
}

/// Who a node is and where it connects.
pub(crate) struct NodeConf {
    /// The server, `host:port` (the host is the TLS server name).
    pub(crate) addr: String,
    /// Its address, resolved once for the swarm: thousands of nodes reconnecting at once
    /// after a crash need no name lookup each.
    pub(crate) resolved: SocketAddr,
    /// Mutual TLS, or plaintext.
    pub(crate) tls: Option<Arc<rustls::ClientConfig>>,
    /// The hello's hostname: the node's, the same for each of its connections.
    pub(crate) hostname: String,
    /// The hello's syncer type, and where its connections count.
    pub(crate) tally: Arc<SyncerTally>,
}

/// Session failures per swarm whose reason is printed.
const FAILURES_SHOWN: u64 = 5;

/// Runs one of a node's connections until `stop`: sessions against the server, reconnecting
/// after failures.
pub(crate) async fn node(
    conf: NodeConf,
    state: Arc<Mutex<NodeState>>,
    shared: Arc<Shared>,
    shard: usize,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    // The latest mark this node has counted in `resynced`.
    let mut counted = 0;
    let counts = Counts {
        shared: &shared,
        tally: &conf.tally,
        shard,
    };
    loop {
        let mut in_sync = false;
        let mut connected = false;
        let mut flags = Flags {
            in_sync: &mut in_sync,
            connected: &mut connected,
            counted: &mut counted,
        };
        let r = tokio::select! {
            r = session(&conf, &state, counts, &mut flags) => r,
            _ = stop.wait_for(|s| *s) => return,
        };
        if in_sync {
            counts.in_sync(false);
        }
        if connected {
            counts.connected(false);
        }
        {
            let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
            st.failures += 1;
            st.kvs.clear();
        }
        let nth = counts.failed();
        // The swarm has no log: the first few reasons go to the coordinator's terminal, so a
        // run with reconnects says why; after a mark (a crash), the first few beyond the one
        // each connection loses to it.
        let extra_from = shared.calico_failures_extra_from.load(Ordering::SeqCst);
        if nth < FAILURES_SHOWN
            || (extra_from..extra_from.saturating_add(FAILURES_SHOWN)).contains(&nth)
        {
            let why = match &r {
                Err(e) => format!("{e:#}"),
                Ok(()) => "the session ended".into(),
            };
            eprintln!(
                "swarm: Calico node {} ({}): {why}; reconnecting",
                conf.hostname, conf.tally.syncer
            );
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

/// calico-node's read timeout is its ping interval's multiple; 90 s is generous.
const READ_TIMEOUT: Duration = Duration::from_secs(90);

/// What a session leaves for its node.
struct Flags<'a> {
    /// It ended in sync (counted in `in_sync`).
    in_sync: &'a mut bool,
    /// It got the server's hello (counted in `direct_connected`).
    connected: &'a mut bool,
    /// The latest mark the node has counted in `resynced`.
    counted: &'a mut u64,
}

async fn session(
    conf: &NodeConf,
    state: &Mutex<NodeState>,
    counts: Counts<'_>,
    flags: &mut Flags<'_>,
) -> anyhow::Result<()> {
    // Taken before dialling: only a session begun after a mark counts for it.
    let mark = counts.shared.mark.load(Ordering::SeqCst);
    let Flags {
        in_sync,
        connected,
        counted,
    } = flags;
    let conn = crate::raw::dial_at(conf.resolved, &conf.addr, conf.tls.as_ref())
        .await
        .context("connecting")?;
    let hello = CalicoHello::calico_node(conf.hostname.clone(), conf.tally.syncer.clone());
    let full = state.lock().unwrap_or_else(|p| p.into_inner()).full;
    // What both kinds of node do with each event but the updates. Whether the session is in
    // sync is read by the update hashing below too, so both closures share it.
    let synced = AtomicBool::new(false);
    let on_event = |event: Event| match event {
        Event::Received(n) => {
            counts
                .shared
                .calico_bytes
                .fetch_add(n as u64, Ordering::Relaxed);
        }
        Event::ServerHello(_) => {
            **connected = true;
            counts.connected(true);
        }
        Event::SyncStatus(s) => {
            let now = s == SyncStatus::InSync;
            if now != synced.load(Ordering::Relaxed) {
                synced.store(now, Ordering::Relaxed);
                counts.in_sync(now);
                if now {
                    state.lock().unwrap_or_else(|p| p.into_inner()).synced();
                }
                if now && mark > **counted {
                    **counted = mark;
                    counts.resynced();
                }
            }
        }
        Event::Kvs(updates) => {
            let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
            for u in &updates {
                st.apply(u.key.as_bytes(), &u.value);
            }
            drop(st);
            counts.updates(updates.len() as u64);
            if synced.load(Ordering::Relaxed) {
                let received = now_ns();
                let lat: Vec<u64> = updates
                    .iter()
                    .filter_map(|u| crate::etcd::sent_ns_json(&u.value))
                    .map(|sent| micros(received, sent))
                    .collect();
                counts.record(&lat);
            }
        }
        _ => {}
    };
    let r = if full {
        calico::run_with(conn, &hello, Until::Closed, READ_TIMEOUT, on_event).await
    } else {
        // The node's own lock, taken per update: uncontended (only the coordinator's
        // `digests` command takes it from elsewhere).
        let each = |key: &[u8], value: &[u8]| {
            state
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .apply(key, value);
            counts.updates(1);
            if synced.load(Ordering::Relaxed)
                && let Some(sent) = crate::etcd::sent_ns_json(value)
            {
                counts.record(&[micros(now_ns(), sent)]);
            }
        };
        calico::run_skimming(conn, &hello, Until::Closed, READ_TIMEOUT, on_event, each).await
    };
    **in_sync = synced.load(Ordering::Relaxed);
    r?;
    bail!("the server closed the connection")
}

/// Write-to-receipt time, µs.
fn micros(received: u128, sent: u128) -> u64 {
    u64::try_from(received.saturating_sub(sent) / 1000).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_nodes_digest_is_the_expected_digest_of_the_same_pairs_in_any_order() {
        let mut st = NodeState::new(false);
        let pairs = [("/a", &b"1"[..]), ("/b", b"2"), ("/c", b"3")];
        for (k, v) in pairs.iter().rev() {
            st.apply(k.as_bytes(), v);
        }
        // An update replaces, a deletion removes.
        st.apply(b"/d", b"x");
        st.apply(b"/a", b"0");
        st.apply(b"/a", b"1");
        st.apply(b"/d", b"");
        assert_eq!(st.digest(), state_digest(pairs.iter().copied()));
        // A different value is a different digest.
        let other = [("/a", &b"1"[..]), ("/b", b"2"), ("/c", b"4")];
        assert_ne!(st.digest(), state_digest(other.iter().copied()));
    }
}
