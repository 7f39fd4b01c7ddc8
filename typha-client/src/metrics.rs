//! Client metrics (prometheus-client): whether connected, reconnects, resumes by kind, bytes
//! received, and staleness (time since the last message from a server: the signal Typha's
//! users lacked when a stale server kept them quiet).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::time::Instant;
use typha_protocol::message::Staleness;

use crate::store::ResumeKind;

/// Label value for [`ResumeKind`].
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum Kind {
    /// By deltas.
    deltas,
    /// By digest buckets.
    digest,
    /// By snapshot.
    snapshot,
}

/// Labels for resumes.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    /// The kind.
    pub kind: Kind,
}

/// The client's metrics.
#[derive(Debug)]
pub struct ClientMetrics {
    /// `typha_client_connected`: 1 while connected to a server (clients sharing one set of
    /// metrics add up).
    pub connected: Gauge,
    /// `typha_client_reconnects`: connections established after the first.
    pub reconnects: Counter,
    /// `typha_client_resumes{kind}`: how each connection brought the state up to date.
    pub resumes: Family<KindLabels, Counter>,
    /// `typha_client_bytes_received`.
    pub bytes_received: Counter,
    /// `typha_client_staleness_seconds`: time since the last message from a server.
    pub staleness: Gauge<f64, AtomicU64>,
    /// `typha_client_server_view_stale`: 1 while the server says its view of the datastore is
    /// stale (it lost its datastore; what this client has may be old).
    pub server_view_stale: Gauge,
    /// `typha_client_server_view_age_seconds`: while stale, how long ago the server's view
    /// was last confirmed current (its report plus the time since); 0 otherwise.
    pub server_view_age: Gauge<f64, AtomicU64>,
    /// When the server's last stale report came (ms since `origin`) and the age it gave.
    stale_report: std::sync::Mutex<Option<(u64, u64)>>,
    origin: Instant,
    last_message_ms: AtomicU64,
    sessions: AtomicU64,
}

impl ClientMetrics {
    /// Creates the metrics and registers them.
    pub fn new(registry: &mut Registry) -> Arc<Self> {
        let m = ClientMetrics {
            connected: Gauge::default(),
            reconnects: Counter::default(),
            resumes: Family::default(),
            bytes_received: Counter::default(),
            staleness: Gauge::default(),
            server_view_stale: Gauge::default(),
            server_view_age: Gauge::default(),
            stale_report: std::sync::Mutex::new(None),
            origin: Instant::now(),
            last_message_ms: AtomicU64::new(0),
            sessions: AtomicU64::new(0),
        };
        for kind in [Kind::deltas, Kind::digest, Kind::snapshot] {
            let _ = m.resumes.get_or_create(&KindLabels { kind });
        }
        registry.register(
            "typha_client_connected",
            "1 while connected to a server",
            m.connected.clone(),
        );
        registry.register(
            "typha_client_reconnects",
            "Connections established after the first",
            m.reconnects.clone(),
        );
        registry.register(
            "typha_client_resumes",
            "How each connection brought the state up to date",
            m.resumes.clone(),
        );
        registry.register(
            "typha_client_bytes_received",
            "Bytes received from servers",
            m.bytes_received.clone(),
        );
        registry.register(
            "typha_client_staleness_seconds",
            "Seconds since the last message from a server",
            m.staleness.clone(),
        );
        registry.register(
            "typha_client_server_view_stale",
            "1 while the server says its view of the datastore is stale",
            m.server_view_stale.clone(),
        );
        registry.register(
            "typha_client_server_view_age_seconds",
            "While the server's view is stale, seconds since it was last confirmed current",
            m.server_view_age.clone(),
        );
        Arc::new(m)
    }

    /// Metrics registered nowhere.
    pub fn unregistered() -> Arc<Self> {
        Self::new(&mut Registry::default())
    }

    /// Records an established session (every one after the first is a reconnect).
    pub fn session_started(&self) {
        self.connected.inc();
        if self.sessions.fetch_add(1, Ordering::Relaxed) > 0 {
            self.reconnects.inc();
        }
    }

    /// Records the end of an established session (the next server says how current it is).
    pub fn session_ended(&self) {
        self.connected.dec();
        self.server_staleness(&Staleness::new(false, Duration::ZERO, ""));
    }

    /// Records what the server said of its datastore view.
    pub fn server_staleness(&self, s: &Staleness) {
        let now = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        *self.stale_report.lock().unwrap_or_else(|p| p.into_inner()) =
            s.stale.then_some((now, s.age_millis));
        self.server_view_stale.set(i64::from(s.stale));
        self.refresh();
    }

    /// Whether the server's last report said stale.
    pub fn server_stale(&self) -> bool {
        self.server_view_stale.get() != 0
    }

    /// Records a message received now.
    pub fn heard(&self) {
        let ms = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_message_ms.store(ms, Ordering::Relaxed);
        self.staleness.set(0.0);
    }

    /// Time since the last message from a server (since start if none yet).
    pub fn staleness(&self) -> Duration {
        let last = Duration::from_millis(self.last_message_ms.load(Ordering::Relaxed));
        self.origin.elapsed().saturating_sub(last)
    }

    /// Refreshes the time-based gauges (the client does this every second).
    pub fn refresh(&self) {
        self.staleness.set(self.staleness().as_secs_f64());
        let report = *self.stale_report.lock().unwrap_or_else(|p| p.into_inner());
        let age = report.map_or(Duration::ZERO, |(at, age)| {
            let now = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
            Duration::from_millis(age.saturating_add(now.saturating_sub(at)))
        });
        self.server_view_age.set(age.as_secs_f64());
    }

    /// Counts a resume.
    pub fn resumed(&self, kind: ResumeKind) {
        let kind = match kind {
            ResumeKind::Deltas => Kind::deltas,
            ResumeKind::Digest => Kind::digest,
            ResumeKind::Snapshot => Kind::snapshot,
        };
        self.resumes.get_or_create(&KindLabels { kind }).inc();
    }

    /// Resumes of a kind so far.
    pub fn resume_count(&self, kind: ResumeKind) -> u64 {
        let kind = match kind {
            ResumeKind::Deltas => Kind::deltas,
            ResumeKind::Digest => Kind::digest,
            ResumeKind::Snapshot => Kind::snapshot,
        };
        self.resumes.get_or_create(&KindLabels { kind }).get()
    }
}
