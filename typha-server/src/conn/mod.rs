//! One task per client connection.
//!
//! ```text
//! accept (TLS) ─▶ handshake (hello within the deadline) ─▶ held? ─▶ initial sync ─▶ stream
//!                                                                    │               │
//!                                deltas / digest buckets / snapshot ─┘   breadcrumbs, spans, status,
//!                                                                         pings; reads pongs and acks
//! ```
//!
//! The task writes only shared, pre-encoded frames (the hello, a digest resync's begin marker,
//! the staleness notice at connect and pings are the only per-client encodes, all tiny; later
//! staleness changes are encoded once for all; a Calico client's hello, decoder restart, sync
//! statuses and pings are per connection likewise). Several waiting frames go out in one
//! bounded write. A client that stops reading stalls only its own task: the writer and every
//! other connection go on, and it is dropped when a write stalls past the write timeout or its
//! position falls past the fall-behind limit.
//!
//! Files: [`admit`] (a connection from accept through TLS, the protocol from its first
//! bytes, the limits and the refusal, to its protocol's task), `drive` (the one driver of a
//! connection, both protocols, from its hello to its end), `session` (everything the clock
//! decides in a connection's life, with no I/O: handshake deadlines, pings while held, the
//! floor wait's end, liveness, falling behind), [`task`] (ours: its handshake, what a resuming
//! client is held for, its initial sync, and what a client of ours is sent and may say once
//! in sync), [`calico`] (the same for a client of Calico's own Typha protocol, on the same
//! port), `sync` (what to send: the initial sync by deltas, digest buckets or snapshot,
//! catching up, the holds of a resuming client; `calico_sync` the same for a Calico client),
//! `out` (queueing frames, bounded writes, pings and the end in each protocol's dialect),
//! [`limit`] (the connection limits and the log of refusals),
//! [`registry`] (every open connection), [`info`] (what each connection is doing, for
//! `/status?nodes` and the per-phase gauges), [`stream`] (a client's byte stream, plain TCP
//! or TLS, as one type); this file holds what they share, with the errors a connection ends
//! with and how each is logged and counted ([`ended`]).

pub mod admit;
pub mod calico;
mod calico_sync;
mod drive;
pub mod info;
pub mod limit;
mod out;
pub mod registry;
mod session;
pub mod stream;
mod sync;
pub mod task;

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use typha_protocol::calico::{Protocol, StreamError};
use typha_protocol::frame::FrameError;
use typha_protocol::handshake::{Rejected, ServerOffer};
use typha_protocol::message::GoodbyeReason;

use self::limit::Refusals;
pub use self::registry::Close;
use self::registry::ConnRegistry;
use crate::cache::Cache;
use crate::cache::calico::{CalicoSnapshots, Unencodable};
use crate::cache::snapshot::{SnapshotConfig, Snapshots};
use crate::governor::share::{Limits, Ranking};
use crate::metrics::DropReason;
use crate::syncer::freshness::Freshness;

/// Connection settings (defaults are Calico Typha's).
#[derive(Debug, Clone)]
pub struct ConnConfig {
    /// TLS and hello must complete within this (TYPHA_SERVERHANDSHAKETIMEOUTSECS, 10 s).
    pub handshake_timeout: Duration,
    /// Ping period (TYPHA_SERVERPINGINTERVALSECS, 10 s, ±10 % jitter).
    pub ping_interval: Duration,
    /// No pong for this long closes the connection (TYPHA_SERVERPONGTIMEOUTSECS, 60 s).
    pub pong_timeout: Duration,
    /// A write that takes longer closes the connection (TYPHA_SERVERWRITETIMEOUTSECS, 120 s).
    pub write_timeout: Duration,
    /// A client whose next breadcrumb is this old is dropped (TYPHA_SERVERMAXFALLBEHINDSECS).
    pub max_fall_behind: Duration,
    /// Extra allowance after an initial sync (TYPHA_SERVERNEWCLIENTFALLBEHINDGRACEPERIOD).
    pub new_client_grace: Duration,
    /// Most bytes per write when several frames are waiting.
    pub max_write: usize,
    /// Most initial syncs written at once (TYPHA_MAXCONCURRENTSYNCS, 64; 0: no limit). When
    /// thousands of agents connect together, the others wait their turn (pinged, so they do
    /// not time out) instead of all sharing the CPU: handshakes keep finishing inside their
    /// timeout, each sync finishes sooner, and per-connection buffers are held by a bounded
    /// number of connections at a time.
    pub max_concurrent_syncs: usize,
    /// How snapshot chunks are cut and compressed (TYPHA_SNAPSHOTCHUNKKVS,
    /// TYPHA_SNAPSHOTCHUNKKIB, TYPHA_SNAPSHOTZSTDLEVEL; [`SnapshotConfig::default`]).
    pub snapshot: SnapshotConfig,
    /// Longest a resuming client whose revision floor the cache has not reached is held
    /// before it is served what the cache has (TYPHA_RESUMEREVISIONWAITSECS, 10 s; zero, and
    /// always zero over the embedded datastore, whose revisions are each server's own: not
    /// held). See [`typha_protocol::message::Extension::REVISION_FLOOR`].
    pub resume_floor_wait: Duration,
}

impl Default for ConnConfig {
    fn default() -> Self {
        Self {
            handshake_timeout: Duration::from_secs(10),
            ping_interval: Duration::from_secs(10),
            pong_timeout: Duration::from_secs(60),
            write_timeout: Duration::from_secs(120),
            max_fall_behind: Duration::from_secs(300),
            new_client_grace: Duration::from_secs(300),
            max_write: 16 << 10,
            max_concurrent_syncs: 64,
            snapshot: SnapshotConfig::default(),
            resume_floor_wait: Duration::from_secs(10),
        }
    }
}

impl ConnConfig {
    /// Applies Typha's rule: a pong timeout of at most twice the ping interval is too tight to
    /// be meant, so it becomes six times the interval.
    pub fn normalized(mut self) -> Self {
        if self.pong_timeout <= self.ping_interval * 2 {
            self.pong_timeout = self.ping_interval * 6;
        }
        self
    }
}

/// What every connection shares.
#[derive(Debug)]
pub struct Ctx {
    /// The cache.
    pub cache: Arc<Cache>,
    /// Shared snapshot and bucket frames for joining and resuming clients.
    pub snapshots: Snapshots,
    /// Shared snapshots for Calico-protocol clients, per syncer type.
    pub calico_snapshots: CalicoSnapshots,
    /// Settings.
    pub cfg: ConnConfig,
    /// What the handshake offers.
    pub offer: ServerOffer,
    /// Reference point for ping timestamps.
    pub started: Instant,
    /// Servers to suggest in a Goodbye when there is no [`Ctx::ranking`]:
    /// `TYPHA_REDIRECTADDRS`.
    pub redirect: arc_swap::ArcSwap<Vec<String>>,
    /// With balancing, the other replicas, ranked afresh for every client sent away (the
    /// governor refreshes it every poll).
    pub ranking: std::sync::Mutex<Ranking>,
    /// Initial syncs in progress ([`ConnConfig::max_concurrent_syncs`]; `None`: no limit).
    pub sync_slots: Option<Arc<tokio::sync::Semaphore>>,
    /// Whether the datastore view is current (told to clients that understand it).
    pub freshness: Arc<Freshness>,
    /// Every open connection: what each is doing, how to close it, the limits.
    pub registry: Arc<ConnRegistry>,
    /// The log of Calico clients refused at the limit.
    pub refusals: Refusals,
}

impl Ctx {
    /// Shared state for connections with these settings.
    pub fn new(
        cache: Arc<Cache>,
        cfg: ConnConfig,
        offer: ServerOffer,
        redirect: Vec<String>,
        freshness: Arc<Freshness>,
        registry: Arc<ConnRegistry>,
    ) -> Self {
        let sync_slots = (cfg.max_concurrent_syncs > 0)
            .then(|| Arc::new(tokio::sync::Semaphore::new(cfg.max_concurrent_syncs)));
        Self {
            cache,
            snapshots: Snapshots::new(cfg.snapshot),
            calico_snapshots: CalicoSnapshots::default(),
            cfg: cfg.normalized(),
            offer,
            started: Instant::now(),
            redirect: arc_swap::ArcSwap::from_pointee(redirect),
            ranking: std::sync::Mutex::new(Ranking::default()),
            sync_slots,
            freshness,
            registry,
            refusals: Refusals::default(),
        }
    }

    /// The connection limits now.
    pub fn limits(&self) -> Limits {
        self.registry.slots.limits()
    }
}

impl Ctx {
    /// Where the next client sent away should go, best first: the other replicas by the
    /// balancing ranking (counting this client), else `TYPHA_REDIRECTADDRS`.
    pub fn suggest(&self) -> Vec<String> {
        // One sort of a handful of replicas under the lock: still consistent after a panic.
        let mut ranking = self.ranking.lock().unwrap_or_else(|p| p.into_inner());
        if ranking.is_empty() {
            self.redirect.load().to_vec()
        } else {
            ranking.next_client()
        }
    }
}

/// Why a connection ended, in either protocol.
#[derive(Debug, thiserror::Error)]
pub enum ConnError {
    /// The socket failed or the peer went away.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// A write did not complete in time.
    #[error("write stalled for {0:?}")]
    WriteTimeout(Duration),
    /// The peer sent bytes that are not a valid frame of ours.
    #[error("protocol error: {0}")]
    Frame(#[source] FrameError),
    /// The peer's bytes are not a valid stream of Calico's protocol. (The larger errors are
    /// boxed: every future that holds a `Result` of this type keeps room for the largest.)
    #[error("protocol error: {0}")]
    Stream(#[source] Box<StreamError>),
    /// The peer sent a message a client may not send (at this point).
    #[error("protocol error: unexpected {0} from a client")]
    Unexpected(String),
    /// A frame of ours could not be encoded (a bug, logged where it happened).
    #[error("protocol error: a frame could not be encoded")]
    Unencodable,
    /// A Calico message could not be encoded (a bug, logged where it happened).
    #[error(transparent)]
    CalicoUnencodable(Box<Unencodable>),
    /// The hello was not a valid frame.
    #[error("handshake: {0}")]
    HandshakeFrame(#[source] FrameError),
    /// The handshake was refused (no common version, wrong syncer type, no hello in time).
    /// Boxed: the refusal is large, and every future that holds a `Result` of this type keeps
    /// room for it (the stream loop's, for the connection's life).
    #[error("handshake: {0}")]
    Handshake(#[source] Box<Rejected>),
    /// A Calico hello asked for something we do not serve (named in the text).
    #[error("refused: {0}")]
    Refused(String),
    /// This message did not come before the handshake deadline.
    #[error("handshake: no {0} in time")]
    HandshakeTimeout(&'static str),
    /// No pong (or, from ours, ack) within the pong timeout.
    #[error("no pong in time")]
    PingTimeout,
    /// The client is further behind than the fall-behind limit lets it be.
    #[error("fell behind: {0}")]
    FellBehind(String),
    /// The server closed it (a drain, a balancing move; for ours, said in a Goodbye).
    #[error("closed: {0}")]
    Closed(GoodbyeReason),
    /// The peer closed it.
    #[error("peer closed the connection")]
    PeerClosed,
}

impl From<Unencodable> for ConnError {
    fn from(e: Unencodable) -> Self {
        ConnError::CalicoUnencodable(Box::new(e))
    }
}

impl From<StreamError> for ConnError {
    fn from(e: StreamError) -> Self {
        ConnError::Stream(Box::new(e))
    }
}

impl ConnError {
    /// Why the client is told the server ends the connection for this error, and what it is
    /// told (a Goodbye, for ours; Calico's protocol has none and is just closed). `None`:
    /// nothing is said (the connection cannot carry it, or the client went away).
    pub(super) fn goodbye(&self) -> Option<(GoodbyeReason, String)> {
        let reason = match self {
            ConnError::Frame(_)
            | ConnError::Stream(_)
            | ConnError::Unexpected(_)
            | ConnError::HandshakeFrame(_) => GoodbyeReason::ProtocolError,
            ConnError::FellBehind(_) => GoodbyeReason::FellBehind,
            ConnError::PingTimeout => GoodbyeReason::PingTimeout,
            ConnError::HandshakeTimeout(_) => GoodbyeReason::HandshakeTimeout,
            // The handshake's refusal says what to tell the client, if anything.
            ConnError::Handshake(rej) => {
                let g = rej.goodbye.as_ref()?;
                return Some((g.reason, g.message.clone()));
            }
            _ => return None,
        };
        let message = match self {
            ConnError::FellBehind(_) => "fell too far behind".to_string(),
            ConnError::PingTimeout => reason.to_string(),
            ConnError::Unexpected(what) => format!("unexpected {what} from a client"),
            ConnError::HandshakeFrame(e) => e.to_string(),
            other => other.to_string(),
        };
        Some((reason, message))
    }

    /// The reason a drop for this error is counted under (`typha_connections_dropped_total`);
    /// `None`: not a drop (the client left, or the server sent it away on purpose).
    fn drop_reason(&self) -> Option<DropReason> {
        Some(match self {
            ConnError::WriteTimeout(_) => DropReason::write_timeout,
            ConnError::Frame(_)
            | ConnError::Stream(_)
            | ConnError::Unexpected(_)
            | ConnError::Unencodable => DropReason::protocol_error,
            ConnError::CalicoUnencodable(_) => DropReason::encode_error,
            ConnError::HandshakeFrame(_)
            | ConnError::Handshake(_)
            | ConnError::Refused(_)
            | ConnError::HandshakeTimeout(_) => DropReason::handshake,
            ConnError::PingTimeout => DropReason::ping_timeout,
            ConnError::FellBehind(_) => DropReason::fell_behind,
            ConnError::Io(_) | ConnError::Closed(_) | ConnError::PeerClosed => return None,
        })
    }
}

/// Logs how a connection ended, once, at its task's boundary, and counts a drop by its
/// reason. A Calico client dropped while it was served, or refused, gets a warning: it cannot
/// resume, and will reconnect and take a whole snapshot (ours resumes by deltas: a line at
/// info).
pub fn ended(ctx: &Ctx, protocol: Protocol, result: Result<(), ConnError>) {
    let e = match result {
        Ok(()) | Err(ConnError::PeerClosed) => return tracing::debug!("connection closed"),
        // Sent away on purpose (a drain, a balancing move): expected, not logged.
        Err(e @ ConnError::Closed(GoodbyeReason::Shutdown | GoodbyeReason::Rebalance)) => {
            return tracing::debug!("{e}");
        }
        Err(e) => e,
    };
    let reason = e.drop_reason();
    if let Some(r) = reason {
        ctx.cache.metrics.dropped(r);
    }
    if protocol != Protocol::Calico {
        return tracing::info!(error = %e, "connection ended");
    }
    match reason {
        Some(
            r @ (DropReason::write_timeout
            | DropReason::ping_timeout
            | DropReason::fell_behind
            | DropReason::encode_error),
        ) => {
            tracing::warn!(reason = r.label(), error = %e, "Calico client dropped; it will reconnect and resync")
        }
        Some(DropReason::handshake) if matches!(e, ConnError::Refused(_)) => {
            tracing::warn!(error = %e, "Calico client refused; closing")
        }
        _ => tracing::info!(error = %e, "Calico connection ended"),
    }
}
