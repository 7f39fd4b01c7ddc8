//! A Calico-protocol node inside a swarm (`__swarm --calico SYNCER`): one connection speaking
//! Calico's Typha protocol as calico-node v3.32 does (the hello with snappy offered, an ACK
//! for each decoder restart, a pong for each ping). The session is
//! `typha_client::calico::run_with`, the one our differential tests hold against Go's client;
//! this node is its observer, seeing each event as it arrives (in sync, the latency of every
//! update, counts and bytes) and keeping only what is below.
//!
//! What a node keeps is small, as the light store of our own protocol's nodes: a hash per key
//! (so deletions and updates are applied, and keys counted) and, on full nodes, a hash of each
//! value, so the node's whole Calico state reduces to a digest that the coordinator compares
//! with the libcalico translation of the cluster ([`state_digest`]). Revisions are left out:
//! they are the datastore's, not part of what Calico's syncer consumers compare.
//!
//! A session that fails (the server went away, a protocol error) is logged once, the node's
//! state is dropped as calico-node's restart drops it, and it reconnects after a second.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, bail};
use typha_client::calico::{self, CalicoHello, Event, Until};
use typha_protocol::calico::messages::{SerializedUpdate, SyncStatus};

use crate::tally::{Shared, now_ns};

/// One node's Calico state: key hash → hash of (key, value) (0 on light nodes).
#[derive(Debug, Default)]
pub(crate) struct NodeState {
    kvs: HashMap<u64, u64>,
    /// Keeps value hashes (a full node).
    pub(crate) full: bool,
    /// Sessions that failed.
    pub(crate) failures: u64,
}

impl NodeState {
    /// An empty state; `full` keeps value hashes.
    pub(crate) fn new(full: bool) -> Self {
        Self {
            full,
            ..Default::default()
        }
    }

    /// `count` for a light node, `count:digest` for a full one.
    pub(crate) fn digest(&self) -> String {
        let n = self.kvs.len();
        if self.full {
            let sum = self.kvs.values().fold(0u64, |a, h| a.wrapping_add(*h));
            format!("{n}:{sum:016x}")
        } else {
            n.to_string()
        }
    }
}

fn hash_of(parts: &[&[u8]]) -> u64 {
    // SipHash with fixed keys: the same in every process of this build.
    let mut h = std::hash::DefaultHasher::new();
    for p in parts {
        p.hash(&mut h);
    }
    h.finish()
}

/// The digest a full node reports for these (key, value) pairs: what the coordinator expects.
pub(crate) fn state_digest<'a>(kvs: impl Iterator<Item = (&'a str, &'a [u8])>) -> String {
    let (mut n, mut sum) = (0usize, 0u64);
    for (k, v) in kvs {
        n += 1;
        sum = sum.wrapping_add(hash_of(&[k.as_bytes(), v]));
    }
    format!("{n}:{sum:016x}")
}

/// Who a node is and where it connects.
pub(crate) struct NodeConf {
    /// The server, `host:port`.
    pub(crate) addr: String,
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
    loop {
        let mut in_sync = false;
        let mut connected = false;
        let r = tokio::select! {
            r = session(&conf, &state, &shared, shard, &mut in_sync, &mut connected) => r,
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

async fn session(
    conf: &NodeConf,
    state: &Mutex<NodeState>,
    shared: &Shared,
    shard: usize,
    in_sync: &mut bool,
    connected: &mut bool,
) -> anyhow::Result<()> {
    let conn = crate::raw::dial(&conf.addr, conf.tls.as_ref())
        .await
        .context("connecting")?;
    let hello = CalicoHello::calico_node(conf.hostname.clone(), conf.syncer.clone());
    calico::run_with(
        conn,
        &hello,
        Until::Closed,
        READ_TIMEOUT,
        |event| match event {
            Event::Received(n) => {
                shared.calico_bytes.fetch_add(n as u64, Ordering::Relaxed);
            }
            Event::ServerHello(_) => {
                *connected = true;
                shared.direct_connected.fetch_add(1, Ordering::Relaxed);
            }
            Event::SyncStatus(s) => {
                let now = s == SyncStatus::InSync;
                if now != *in_sync {
                    *in_sync = now;
                    if now {
                        shared.in_sync.fetch_add(1, Ordering::Relaxed);
                    } else {
                        shared.in_sync.fetch_sub(1, Ordering::Relaxed);
                    }
                }
            }
            Event::Kvs(updates) => apply(&updates, state, shared, shard),
            _ => {}
        },
    )
    .await?;
    bail!("the server closed the connection")
}

/// One message's updates: into the node's hashes, counted, stamped ones timed.
fn apply(updates: &[SerializedUpdate], state: &Mutex<NodeState>, shared: &Shared, shard: usize) {
    let received = now_ns();
    let mut lat = Vec::new();
    {
        let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
        let full = st.full;
        for u in updates {
            let k = hash_of(&[u.key.as_bytes()]);
            if u.value.is_empty() {
                st.kvs.remove(&k);
                continue;
            }
            let v = if full {
                hash_of(&[u.key.as_bytes(), &u.value])
            } else {
                0
            };
            st.kvs.insert(k, v);
            if let Some(sent) = crate::etcd::sent_ns_json(&u.value) {
                lat.push(u64::try_from(received.saturating_sub(sent) / 1000).unwrap_or(u64::MAX));
            }
        }
    }
    shared
        .updates
        .fetch_add(updates.len() as u64, Ordering::Relaxed);
    shared.record(shard, &lat);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_full_nodes_digest_is_the_expected_digest_of_the_same_pairs_in_any_order() {
        let mut st = NodeState {
            full: true,
            ..Default::default()
        };
        let pairs = [("/a", &b"1"[..]), ("/b", b"2"), ("/c", b"3")];
        for (k, v) in pairs.iter().rev() {
            st.kvs
                .insert(hash_of(&[k.as_bytes()]), hash_of(&[k.as_bytes(), v]));
        }
        assert_eq!(st.digest(), state_digest(pairs.iter().copied()));
        // A different value is a different digest.
        let other = [("/a", &b"1"[..]), ("/b", b"2"), ("/c", b"4")];
        assert_ne!(st.digest(), state_digest(other.iter().copied()));
        st.full = false;
        assert_eq!(st.digest(), "3");
    }
}
