//! A Calico-protocol node inside a swarm (`__swarm --calico SYNCER`): one connection speaking
//! Calico's Typha protocol as calico-node v3.32 does (the hello with snappy offered, an ACK
//! for each decoder restart, a pong for each ping). The session is
//! `typha_client::calico::run_with`, the one our differential tests hold against Go's client;
//! this node is its observer, seeing each event as it arrives (in sync, the latency of every
//! update, counts and bytes) and keeping only what is below.
//!
//! What a node keeps is small, as the light store of our own protocol's nodes: per key, a hash
//! of the key and a hash of (key, value), so deletions and updates are applied and the node's
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

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, bail};
use typha_client::calico::{self, CalicoHello, Event, Until};
use typha_protocol::calico::messages::SyncStatus;
use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

use crate::tally::{Shared, now_ns};

/// One node's Calico state: key hash → hash of (key, value).
#[derive(Debug, Default)]
pub(crate) struct NodeState {
    kvs: HashMap<u64, u64>,
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
    pub(crate) fn digest(&self) -> String {
        let sum = self.kvs.values().fold(0u64, |a, h| a.wrapping_add(*h));
        format!("{}:{sum:016x}", self.kvs.len())
    }

    /// Takes one update (an empty value deletes the key).
    fn apply(&mut self, key: &[u8], value: &[u8]) {
        let k = xxh3_64(key);
        if value.is_empty() {
            self.kvs.remove(&k);
        } else {
            self.kvs.insert(k, xxh3_64_with_seed(value, k));
        }
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
    /// The hello's hostname.
    pub(crate) hostname: String,
    /// The hello's syncer type.
    pub(crate) syncer: String,
}

/// Session failures per swarm whose reason is printed.
const FAILURES_SHOWN: u64 = 5;

/// Runs a node until `stop`: sessions against the server, reconnecting after failures.
pub(crate) async fn node(
    conf: NodeConf,
    state: Arc<Mutex<NodeState>>,
    shared: Arc<Shared>,
    shard: usize,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    // The latest mark this node has counted in `resynced`.
    let mut counted = 0;
    loop {
        let mut in_sync = false;
        let mut connected = false;
        let mut flags = Flags {
            in_sync: &mut in_sync,
            connected: &mut connected,
            counted: &mut counted,
        };
        let r = tokio::select! {
            r = session(&conf, &state, &shared, shard, &mut flags) => r,
            _ = stop.wait_for(|s| *s) => return,
        };
        if in_sync {
            shared.in_sync.fetch_sub(1, Ordering::Relaxed);
        }
        if connected {
            shared.direct_connected.fetch_sub(1, Ordering::Relaxed);
        }
        {
            let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
            st.failures += 1;
            st.kvs.clear();
        }
        let nth = shared.calico_failures.fetch_add(1, Ordering::Relaxed);
        // The swarm has no log: the first few reasons go to the coordinator's terminal, so a
        // run with reconnects says why.
        if nth < FAILURES_SHOWN {
            let why = match &r {
                Err(e) => format!("{e:#}"),
                Ok(()) => "the session ended".into(),
            };
            eprintln!("swarm: Calico node {}: {why}; reconnecting", conf.hostname);
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
    shared: &Shared,
    shard: usize,
    flags: &mut Flags<'_>,
) -> anyhow::Result<()> {
    // Taken before dialling: only a session begun after a mark counts for it.
    let mark = shared.mark.load(Ordering::SeqCst);
    let Flags {
        in_sync,
        connected,
        counted,
    } = flags;
    let conn = crate::raw::dial_at(conf.resolved, &conf.addr, conf.tls.as_ref())
        .await
        .context("connecting")?;
    let hello = CalicoHello::calico_node(conf.hostname.clone(), conf.syncer.clone());
    let full = state.lock().unwrap_or_else(|p| p.into_inner()).full;
    // What both kinds of node do with each event but the updates. Whether the session is in
    // sync is read by the update hashing below too, so both closures share it.
    let synced = AtomicBool::new(false);
    let on_event = |event: Event| match event {
        Event::Received(n) => {
            shared.calico_bytes.fetch_add(n as u64, Ordering::Relaxed);
        }
        Event::ServerHello(_) => {
            **connected = true;
            shared.direct_connected.fetch_add(1, Ordering::Relaxed);
        }
        Event::SyncStatus(s) => {
            let now = s == SyncStatus::InSync;
            if now != synced.load(Ordering::Relaxed) {
                synced.store(now, Ordering::Relaxed);
                if now {
                    shared.in_sync.fetch_add(1, Ordering::Relaxed);
                    if mark > **counted {
                        **counted = mark;
                        shared.resynced.fetch_add(1, Ordering::SeqCst);
                    }
                } else {
                    shared.in_sync.fetch_sub(1, Ordering::Relaxed);
                }
            }
        }
        Event::Kvs(updates) => {
            let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
            for u in &updates {
                st.apply(u.key.as_bytes(), &u.value);
            }
            drop(st);
            shared
                .updates
                .fetch_add(updates.len() as u64, Ordering::Relaxed);
            if synced.load(Ordering::Relaxed) {
                let received = now_ns();
                let lat: Vec<u64> = updates
                    .iter()
                    .filter_map(|u| crate::etcd::sent_ns_json(&u.value))
                    .map(|sent| micros(received, sent))
                    .collect();
                shared.record(shard, &lat);
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
            shared.updates.fetch_add(1, Ordering::Relaxed);
            if synced.load(Ordering::Relaxed)
                && let Some(sent) = crate::etcd::sent_ns_json(value)
            {
                shared.record(shard, &[micros(now_ns(), sent)]);
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
