//! Prometheus metrics. Names follow Calico Typha's where the meaning is the same (so existing
//! dashboards and habits carry over); ours cover what Typha does not measure. Counters are
//! exposed in OpenMetrics form, which appends `_total` to the family name.

use std::sync::Arc;

use bytes::Bytes;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Kinds of frames the server encodes.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum FrameKind {
    /// One breadcrumb's deltas.
    delta,
    /// A coalesced span of breadcrumbs for lagging clients.
    span,
    /// A chunk (or marker) of a full snapshot.
    snapshot,
    /// A chunk of a digest bucket.
    bucket,
}

/// Label set for [`FrameKind`].
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FrameLabels {
    /// The kind.
    pub kind: FrameKind,
}

/// How a connecting client was brought up to date.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum ResumeKind {
    /// Only the missed deltas (same epoch, inside the history window).
    deltas,
    /// Only the digest buckets that differ.
    digest,
    /// A full snapshot.
    snapshot,
}

/// Label set for [`ResumeKind`].
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResumeLabels {
    /// The kind.
    pub kind: ResumeKind,
}

/// Why a connection was closed by the server.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum DropReason {
    /// Over the connection limit.
    too_many_connections,
    /// Handshake failed or timed out.
    handshake,
    /// Client certificate not allowed.
    tls_identity,
    /// No pong in time.
    ping_timeout,
    /// A write stalled past the write timeout.
    write_timeout,
    /// Past the fall-behind limit.
    fell_behind,
    /// Malformed or unexpected input.
    protocol_error,
    /// Shutting down.
    shutdown,
    /// Moved to a less loaded replica.
    rebalance,
}

/// Label set for [`DropReason`].
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DropLabels {
    /// The reason.
    pub reason: DropReason,
}

/// Every metric the server exports.
#[derive(Debug)]
pub struct Metrics {
    // Cache (Typha names).
    /// `typha_breadcrumb_seq_number`
    pub breadcrumb_seq: Gauge,
    /// `typha_updates_total`: updates that entered the cache.
    pub updates: Counter,
    /// `typha_updates_skipped`: updates equal to the cached value, dropped.
    pub updates_skipped: Counter,
    /// `typha_cache_size`: KVs in the cache.
    pub cache_size: Gauge,
    /// `typha_breadcrumb_size`: updates per breadcrumb.
    pub breadcrumb_size: Histogram,
    // Ours: pipeline and encoding.
    /// `typha_updates_invalid`: values that failed validation (sent on as deletions).
    pub updates_invalid: Counter,
    /// `typha_frames_encoded{kind}`: frames encoded (and compressed), each once for all clients.
    pub frames_encoded: Family<FrameLabels, Counter>,
    // Snapshots (Typha names).
    /// `typha_snapshots_generated`
    pub snapshots_generated: Counter,
    /// `typha_snapshots_reused`
    pub snapshots_reused: Counter,
    /// `typha_snapshot_raw_bytes`: size of the last snapshot before compression.
    pub snapshot_raw_bytes: Gauge,
    /// `typha_snapshot_compressed_bytes`: size of the last snapshot on the wire.
    pub snapshot_compressed_bytes: Gauge,
    // Connections (Typha names).
    /// `typha_connections_accepted`
    pub connections_accepted: Counter,
    /// `typha_connections_active`
    pub connections_active: Gauge,
    /// `typha_connections_streaming`: past the handshake and initial sync.
    pub connections_streaming: Gauge,
    /// `typha_syncs_waiting`: past the handshake, waiting for a turn to be synced.
    pub syncs_waiting: Gauge,
    /// `typha_shutdown_draining`: 1 from SIGTERM until the process exits.
    pub shutdown_draining: Gauge,
    /// `typha_shutdown_connections_remaining`: while draining, connections not yet sent
    /// their Goodbye.
    pub shutdown_connections_remaining: Gauge,
    /// `typha_connections_dropped{reason}`
    pub connections_dropped: Family<DropLabels, Counter>,
    /// `typha_client_snapshot_send_secs`
    pub client_snapshot_send_secs: Histogram,
    /// `typha_client_latency_secs`: age of a breadcrumb when a client's write of it finished.
    pub client_latency_secs: Histogram,
    /// `typha_client_write_latency_secs`: time per write to a client.
    pub client_write_latency_secs: Histogram,
    /// `typha_ping_latency`: ping round trip, seconds.
    pub ping_latency: Histogram,
    /// `typha_kvs_per_msg`: KVs per delta frame.
    pub kvs_per_msg: Histogram,
    // Ours.
    /// `typha_resumes{kind}`: how connecting clients were brought up to date.
    pub resumes: Family<ResumeLabels, Counter>,
    /// `typha_bytes_sent`: bytes written to clients.
    pub bytes_sent: Counter,
    /// `typha_client_ack_lag_secs`: from a breadcrumb's creation to a client's Ack of it
    /// (fleet propagation latency as seen by the nodes themselves).
    pub client_ack_lag_secs: Histogram,
}

fn latency_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 18))
}

impl Metrics {
    /// Creates the metrics and registers them in `registry`.
    pub fn new(registry: &mut Registry) -> Arc<Self> {
        let m = Metrics {
            breadcrumb_seq: Gauge::default(),
            updates: Counter::default(),
            updates_skipped: Counter::default(),
            cache_size: Gauge::default(),
            breadcrumb_size: Histogram::new(exponential_buckets(1.0, 2.0, 12)),
            updates_invalid: Counter::default(),
            frames_encoded: Family::default(),
            snapshots_generated: Counter::default(),
            snapshots_reused: Counter::default(),
            snapshot_raw_bytes: Gauge::default(),
            snapshot_compressed_bytes: Gauge::default(),
            connections_accepted: Counter::default(),
            connections_active: Gauge::default(),
            connections_streaming: Gauge::default(),
            syncs_waiting: Gauge::default(),
            shutdown_draining: Gauge::default(),
            shutdown_connections_remaining: Gauge::default(),
            connections_dropped: Family::default(),
            client_snapshot_send_secs: Histogram::new(exponential_buckets(0.001, 2.0, 18)),
            client_latency_secs: latency_buckets(),
            client_write_latency_secs: latency_buckets(),
            ping_latency: latency_buckets(),
            kvs_per_msg: Histogram::new(exponential_buckets(1.0, 2.0, 12)),
            resumes: Family::default(),
            bytes_sent: Counter::default(),
            client_ack_lag_secs: latency_buckets(),
        };
        let r = registry;
        r.register(
            "typha_breadcrumb_seq_number",
            "Sequence number of the latest breadcrumb",
            m.breadcrumb_seq.clone(),
        );
        r.register(
            "typha_updates",
            "Updates that entered the cache",
            m.updates.clone(),
        );
        r.register(
            "typha_updates_skipped",
            "Updates equal to the cached value, dropped",
            m.updates_skipped.clone(),
        );
        r.register("typha_cache_size", "KVs in the cache", m.cache_size.clone());
        r.register(
            "typha_breadcrumb_size",
            "Updates per breadcrumb",
            m.breadcrumb_size.clone(),
        );
        r.register(
            "typha_updates_invalid",
            "Values that failed validation and were sent as deletions",
            m.updates_invalid.clone(),
        );
        r.register(
            "typha_frames_encoded",
            "Frames encoded, each once for all clients",
            m.frames_encoded.clone(),
        );
        r.register(
            "typha_snapshots_generated",
            "Snapshots built",
            m.snapshots_generated.clone(),
        );
        r.register(
            "typha_snapshots_reused",
            "Snapshots reused by a joining client",
            m.snapshots_reused.clone(),
        );
        r.register(
            "typha_snapshot_raw_bytes",
            "Size of the last snapshot before compression",
            m.snapshot_raw_bytes.clone(),
        );
        r.register(
            "typha_snapshot_compressed_bytes",
            "Size of the last snapshot on the wire",
            m.snapshot_compressed_bytes.clone(),
        );
        r.register(
            "typha_connections_accepted",
            "Connections accepted",
            m.connections_accepted.clone(),
        );
        r.register(
            "typha_connections_active",
            "Open connections",
            m.connections_active.clone(),
        );
        r.register(
            "typha_connections_streaming",
            "Connections past their initial sync",
            m.connections_streaming.clone(),
        );
        r.register(
            "typha_syncs_waiting",
            "Connections waiting for a turn to be synced (TYPHA_MAXCONCURRENTSYNCS)",
            m.syncs_waiting.clone(),
        );
        r.register(
            "typha_shutdown_draining",
            "1 while the server drains its connections after SIGTERM (readiness fails meanwhile)",
            m.shutdown_draining.clone(),
        );
        r.register(
            "typha_shutdown_connections_remaining",
            "Connections not yet sent their Goodbye in a shutdown drain",
            m.shutdown_connections_remaining.clone(),
        );
        r.register(
            "typha_connections_dropped",
            "Connections closed by the server",
            m.connections_dropped.clone(),
        );
        r.register(
            "typha_client_snapshot_send_secs",
            "Time to send a client its initial sync",
            m.client_snapshot_send_secs.clone(),
        );
        r.register(
            "typha_client_latency_secs",
            "Age of a breadcrumb when written to a client",
            m.client_latency_secs.clone(),
        );
        r.register(
            "typha_client_write_latency_secs",
            "Time per write to a client",
            m.client_write_latency_secs.clone(),
        );
        r.register(
            "typha_ping_latency",
            "Ping round-trip time, seconds",
            m.ping_latency.clone(),
        );
        r.register(
            "typha_kvs_per_msg",
            "KVs per delta frame",
            m.kvs_per_msg.clone(),
        );
        r.register(
            "typha_resumes",
            "How connecting clients were brought up to date",
            m.resumes.clone(),
        );
        r.register(
            "typha_bytes_sent",
            "Bytes written to clients",
            m.bytes_sent.clone(),
        );
        r.register(
            "typha_client_ack_lag_secs",
            "From a breadcrumb's creation to a client's Ack of it",
            m.client_ack_lag_secs.clone(),
        );
        // Every label value exists from the start, at zero: dashboards and alerts see a
        // series before the first event, and rates work from the first scrape.
        for kind in [
            FrameKind::delta,
            FrameKind::span,
            FrameKind::snapshot,
            FrameKind::bucket,
        ] {
            let _ = m.frames_encoded.get_or_create(&FrameLabels { kind });
        }
        for kind in [ResumeKind::deltas, ResumeKind::digest, ResumeKind::snapshot] {
            let _ = m.resumes.get_or_create(&ResumeLabels { kind });
        }
        for reason in [
            DropReason::too_many_connections,
            DropReason::handshake,
            DropReason::tls_identity,
            DropReason::ping_timeout,
            DropReason::write_timeout,
            DropReason::fell_behind,
            DropReason::protocol_error,
            DropReason::shutdown,
        ] {
            let _ = m.connections_dropped.get_or_create(&DropLabels { reason });
        }
        Arc::new(m)
    }

    /// Metrics not registered anywhere (tests, tools).
    pub fn unregistered() -> Arc<Self> {
        Self::new(&mut Registry::default())
    }

    /// Counts `frame`, just encoded for `kind`, and passes it on.
    pub fn counted(&self, kind: FrameKind, frame: Bytes) -> Bytes {
        self.encoded(kind);
        frame
    }

    /// Counts one frame encoded for `kind`.
    pub fn encoded(&self, kind: FrameKind) {
        self.frames_encoded
            .get_or_create(&FrameLabels { kind })
            .inc();
    }

    /// Frames of `kind` encoded so far.
    pub fn encoded_count(&self, kind: FrameKind) -> u64 {
        self.frames_encoded
            .get_or_create(&FrameLabels { kind })
            .get()
    }

    /// Counts a resume.
    pub fn resumed(&self, kind: ResumeKind) {
        self.resumes.get_or_create(&ResumeLabels { kind }).inc();
    }

    /// Resumes of `kind` so far.
    pub fn resume_count(&self, kind: ResumeKind) -> u64 {
        self.resumes.get_or_create(&ResumeLabels { kind }).get()
    }

    /// Counts a dropped connection.
    pub fn dropped(&self, reason: DropReason) {
        self.connections_dropped
            .get_or_create(&DropLabels { reason })
            .inc();
    }

    /// Drops of `reason` so far.
    pub fn dropped_count(&self, reason: DropReason) -> u64 {
        self.connections_dropped
            .get_or_create(&DropLabels { reason })
            .get()
    }
}
