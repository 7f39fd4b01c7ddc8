//! What each connection is doing, for an operator debugging one node: `/status?nodes` lists
//! every connection with its node's name (from the hello), address, protocol and syncer type,
//! when it connected, its phase, how it was brought up to date, and where it is in the
//! breadcrumbs (sent, acknowledged, and how far behind). A Calico client acknowledges nothing
//! (its protocol has no acks), so its lag is what has not been written to it yet. This is per
//! node, so it is never a metric label (5,000
//! nodes would be 5,000 series); what dashboards need are the counts per phase, which are
//! metrics: `typha_connections_handshaking`, `typha_connections_syncing` and Typha's
//! `typha_connections_streaming`.
//!
//! The registry (`conn/registry.rs`) lists every connection's entry from accept until its task
//! ends; the task updates its own entry with atomics.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::SystemTime;

use serde_json::{Value, json};
use tokio::time::Instant;
use typha_protocol::message::Seq;

use crate::cache::Cache;
use crate::calico::libcalico::SyncerType;
use crate::metrics::{Metrics, ResumeKind};

/// Where a connection is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Phase {
    /// Accepted; TLS and the hello are not done.
    Handshaking = 0,
    /// Past the hello, waiting for a turn to be synced (or for the cache's first sync).
    Waiting = 1,
    /// Being sent its initial sync (deltas, digest buckets or a snapshot).
    Syncing = 2,
    /// Following the breadcrumbs.
    Streaming = 3,
}

impl Phase {
    fn from_u8(v: u8) -> Self {
        match v {
            0 => Phase::Handshaking,
            1 => Phase::Waiting,
            2 => Phase::Syncing,
            _ => Phase::Streaming,
        }
    }

    /// Its name on `/status`.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Handshaking => "handshaking",
            Phase::Waiting => "waiting",
            Phase::Syncing => "syncing",
            Phase::Streaming => "streaming",
        }
    }
}

/// Longest node name shown (a DNS name's limit): the name comes from the client.
pub const MAX_NAME: usize = 253;
// Its length is kept in a byte ([`Hello`]).
const _: () = assert!(MAX_NAME <= u8::MAX as usize);

/// `s`, cut to at most [`MAX_NAME`] bytes (on a character boundary).
pub fn bounded(s: &str) -> &str {
    let mut cut = s.len().min(MAX_NAME);
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    &s[..cut]
}

/// What the hello said: the node's name, the client's description and the protocol version,
/// one after the other in one allocation (three strings would be three, and 72 bytes inline
/// in every connection's entry).
#[derive(Debug)]
struct Hello {
    text: Box<str>,
    /// Where the name ends and the client's description begins (each at most [`MAX_NAME`]).
    name_len: u8,
    /// Where the description ends and the version begins, after the name.
    client_len: u8,
}

impl Hello {
    fn new(name: &str, client: &str, version: impl std::fmt::Display) -> Self {
        let (name, client) = (bounded(name), bounded(client));
        Hello {
            text: format!("{name}{client}{version}").into_boxed_str(),
            name_len: u8::try_from(name.len()).unwrap_or(u8::MAX),
            client_len: u8::try_from(client.len()).unwrap_or(u8::MAX),
        }
    }

    fn name(&self) -> &str {
        &self.text[..usize::from(self.name_len)]
    }

    fn client(&self) -> &str {
        let start = usize::from(self.name_len);
        &self.text[start..start + usize::from(self.client_len)]
    }

    fn version(&self) -> &str {
        &self.text[usize::from(self.name_len) + usize::from(self.client_len)..]
    }
}

/// One connection, as its task reports it.
#[derive(Debug)]
pub struct ConnInfo {
    peer: SocketAddr,
    since: SystemTime,
    accepted: Instant,
    hello: OnceLock<Hello>,
    /// A Calico client's syncer type (set with its hello); none for ours.
    calico: OnceLock<SyncerType>,
    resumed: OnceLock<ResumeKind>,
    phase: AtomicU8,
    /// The last breadcrumb sent (0 before the initial sync).
    sent: AtomicU64,
    /// The last breadcrumb the client acknowledged (0: none yet).
    acked: AtomicU64,
    metrics: Arc<Metrics>,
}

impl ConnInfo {
    /// A connection from `peer`, accepted at `accepted`, handshaking (counted in its gauge
    /// until [`ConnInfo::left`]).
    pub(super) fn new(peer: SocketAddr, accepted: Instant, metrics: Arc<Metrics>) -> Self {
        let info = ConnInfo {
            peer,
            since: SystemTime::now(),
            accepted,
            hello: OnceLock::new(),
            calico: OnceLock::new(),
            resumed: OnceLock::new(),
            phase: AtomicU8::new(Phase::Handshaking as u8),
            sent: AtomicU64::new(0),
            acked: AtomicU64::new(0),
            metrics,
        };
        info.gauge(Phase::Handshaking, 1);
        info
    }

    /// The connection is gone: out of its phase's gauge.
    pub(super) fn left(&self) {
        self.gauge(self.phase(), -1);
    }

    /// The node name the client gave in its hello (`None` before it).
    pub(super) fn name(&self) -> Option<&str> {
        self.hello.get().map(Hello::name)
    }

    /// The hello was accepted: who the client says it is. Then waiting for its turn.
    /// Its node name and syncer type go into the connection's span (the current one: the
    /// connection's task calls this), so every later line it logs names them.
    pub fn hello(&self, name: &str, client: &str, version: impl std::fmt::Display) {
        let _ = self.hello.set(Hello::new(name, client, version));
        let span = tracing::Span::current();
        let syncer = self.calico.get().copied().unwrap_or(SyncerType::Felix);
        span.record("node", tracing::field::display(bounded(name)));
        span.record("syncer", tracing::field::display(syncer.as_str()));
        self.set_phase(Phase::Waiting);
    }

    /// A Calico client's hello was accepted: as [`ConnInfo::hello`], with its syncer type.
    pub fn calico_hello(
        &self,
        name: &str,
        client: &str,
        version: impl std::fmt::Display,
        syncer: SyncerType,
    ) {
        let _ = self.calico.set(syncer);
        self.hello(name, client, version);
    }

    /// Moves to `phase`, keeping the per-phase gauges right.
    pub fn set_phase(&self, phase: Phase) {
        let before = Phase::from_u8(self.phase.swap(phase as u8, Ordering::AcqRel));
        if before != phase {
            self.gauge(before, -1);
            self.gauge(phase, 1);
        }
    }

    fn gauge(&self, phase: Phase, by: i64) {
        match phase {
            Phase::Handshaking => self.metrics.connections_handshaking.add(by),
            Phase::Syncing => self.metrics.connections_syncing.add(by),
            // Typha's streaming gauge is kept by the stream loop, the waiting one
            // (`typha_syncs_waiting`) by the sync-slot wait.
            Phase::Waiting | Phase::Streaming => {}
        }
    }

    /// The node name the client gave in its hello (empty before it).
    pub fn hostname(&self) -> &str {
        self.hello.get().map_or("", Hello::name)
    }

    /// The client's address.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// When the connection was accepted (its handshake deadline counts from here).
    pub fn accepted(&self) -> Instant {
        self.accepted
    }

    /// The phase now.
    pub fn phase(&self) -> Phase {
        Phase::from_u8(self.phase.load(Ordering::Acquire))
    }

    /// The initial sync is done, this way: the connection streams from here.
    pub fn synced(&self, kind: ResumeKind, at: Seq) {
        let _ = self.resumed.set(kind);
        self.sent(at);
        self.set_phase(Phase::Streaming);
    }

    /// Breadcrumbs up to `seq` were sent.
    pub fn sent(&self, seq: Seq) {
        self.sent.store(seq.0, Ordering::Release);
    }

    /// The last breadcrumb sent (0 before the initial sync).
    pub fn position(&self) -> Seq {
        Seq(self.sent.load(Ordering::Acquire))
    }

    /// The client acknowledged `seq`.
    pub fn acked(&self, seq: Seq) {
        self.acked.fetch_max(seq.0, Ordering::AcqRel);
    }

    /// The connection as `/status?nodes` shows it, against the cache's latest breadcrumb.
    pub(super) fn json(&self, cache: &Cache, latest: Seq, now: SystemTime) -> Value {
        let hello = self.hello.get();
        let calico = self.calico.get().copied();
        let phase = self.phase();
        let since = self
            .since
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        // A json! object literal is always an object.
        let Value::Object(mut v) = json!({
            "name": hello.map(Hello::name),
            "address": self.peer.to_string(),
            "client": hello.map(Hello::client),
            "version": hello.map(Hello::version),
            // Known once the hello is in: a Calico client's syncer type, felix for ours (the
            // type its metrics count under).
            "protocol": hello.map(|_| if calico.is_some() { "calico" } else { "typha-rs" }),
            "syncer": hello.map(|_| calico.unwrap_or(SyncerType::Felix).as_str()),
            "phase": phase.as_str(),
            "connected_since": since,
            "connected_secs": now.duration_since(self.since).map_or(0.0, |d| d.as_secs_f64()),
            "resumed": self.resumed.get().map(|k| k.label()),
        }) else {
            return Value::Null;
        };
        if phase == Phase::Streaming {
            let sent = self.sent.load(Ordering::Acquire);
            let acked = self.acked.load(Ordering::Acquire);
            // How long the client has been behind: the age of the first breadcrumb it has
            // not acknowledged (none: it is up to date; gone from the history: at least the
            // oldest's age). A Calico client acknowledges nothing: the first not yet written
            // to it.
            let reached = if calico.is_some() { sent } else { acked };
            let behind = if reached >= latest.0 {
                Some(0.0)
            } else {
                cache
                    .get(Seq(reached + 1))
                    .or_else(|| cache.get(Seq(cache.oldest_resumable().0 + 1)))
                    .map(|c| c.created.elapsed().as_secs_f64())
            };
            v.insert("seq".into(), sent.into());
            let (acked, ack_lag) = match calico {
                Some(_) => (None, None),
                None => (
                    (acked > 0).then_some(acked),
                    Some(latest.0.saturating_sub(acked)),
                ),
            };
            v.insert("acked".into(), acked.into());
            v.insert("lag".into(), latest.0.saturating_sub(sent).into());
            v.insert("ack_lag".into(), ack_lag.into());
            v.insert("behind_secs".into(), behind.into());
        } else {
            let waiting = self.accepted.elapsed().as_secs_f64();
            v.insert("waiting_secs".into(), waiting.into());
        }
        Value::Object(v)
    }
}
