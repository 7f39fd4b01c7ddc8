//! One task per client connection.
//!
//! ```text
//! accept (TLS) ─▶ handshake (hello within the deadline) ─▶ initial sync ─▶ stream
//!                                                           │               │
//!                       deltas / digest buckets / snapshot ─┘   breadcrumbs, spans, status,
//!                                                                pings; reads pongs and acks
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
//! Files: [`calico`] (a client of Calico's own Typha protocol, on the same port: its hello,
//! snapshot, breadcrumbs and pings), [`limit`] (the connection limits and the log of refusals),
//! [`task`] (the connection's life: handshake, initial sync, the stream loop, reading
//! pongs and acks), `sync` (what to send: the initial sync by deltas, digest buckets or
//! snapshot, and catching up), `out` (queueing frames and bounded writes), [`info`] (what each
//! connection is doing, for `/status?nodes` and the per-phase gauges), [`stream`] (a client's
//! byte stream, plain TCP or TLS, as one type); this file holds what they share.

pub mod admit;
pub mod calico;
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
use typha_protocol::frame::FrameError;
use typha_protocol::handshake::{Rejected, ServerOffer};
use typha_protocol::message::{GoodbyeReason, MessageType};

use self::limit::Refusals;
pub use self::registry::Close;
use self::registry::ConnRegistry;
use crate::cache::Cache;
use crate::cache::calico::CalicoSnapshots;
use crate::cache::snapshot::{SnapshotConfig, Snapshots};
use crate::governor::share::{Limits, Ranking};
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

/// Why a connection ended.
#[derive(Debug, thiserror::Error)]
pub enum ConnError {
    /// The socket failed or the peer went away.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// A write did not complete in time.
    #[error("write stalled for {0:?}")]
    WriteTimeout(Duration),
    /// The peer sent bytes that are not a valid frame.
    #[error("protocol error: {0}")]
    Frame(#[source] FrameError),
    /// The peer sent a message a client may not send.
    #[error("protocol error: unexpected {0} from a client")]
    Unexpected(MessageType),
    /// A frame of ours could not be encoded (a bug, logged where it happened).
    #[error("protocol error: a frame could not be encoded")]
    Unencodable,
    /// The hello was not a valid frame.
    #[error("handshake: {0}")]
    HandshakeFrame(#[source] FrameError),
    /// The handshake was refused (no common version, wrong syncer type, no hello in time).
    /// Boxed: the refusal is large, and every future that holds a `Result` of this type keeps
    /// room for it (the stream loop's, for the connection's life).
    #[error("handshake: {0}")]
    Handshake(#[source] Box<Rejected>),
    /// No hello before the deadline.
    #[error("handshake: handshake timed out")]
    HandshakeTimeout,
    /// The server closed it (reason sent as a Goodbye).
    #[error("closed: {0}")]
    Closed(GoodbyeReason),
    /// The peer closed it.
    #[error("peer closed the connection")]
    PeerClosed,
}
