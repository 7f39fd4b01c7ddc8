//! Prometheus metrics, served at `/metrics` in the Prometheus text format 0.0.4
//! ([`typha_service::metrics`]).
//!
//! Typha's metrics keep Typha's exact names, types and labels (Calico v3.32), so existing
//! dashboards and alerts work: a counter Typha names `typha_connections_accepted` is the sample
//! `typha_connections_accepted` (no `_total` appended); Typha's summaries are summaries with
//! its objectives and windows. Typha labels its per-syncer metrics `syncer="<type>"`, with a
//! series for each of its four syncer types from the start. Here the connection and snapshot
//! ones are [`PerSyncer`] in the same way: a Calico client counts under the syncer type of its
//! hello, a client of our own protocol under felix (it is the felix syncer's equivalent). The
//! cache's own metrics describe the one cache every syncer type is served from, and carry
//! [`SYNCER`]. Ours sit beside them under our own names, and our counters end in `_total`
//! (Prometheus' convention). What each one measures, and where it differs from Typha, is in
//! `docs/server.md`.
//!
//! The `process_*` metrics (CPU, memory, file descriptors) are registered with them
//! ([`typha_service::metrics::ProcessCollector`]).
//!
//! Labels take only values from a fixed set (a syncer type, a frame kind, a drop reason):
//! never a node name, an address or a connection id.
//!
//! Files: this one (the metrics, their registration and the counting helpers) and
//! `labels.rs` (the fixed label values of ours).
//!
//! Adding a metric:
//!
//! 1. a field in [`Metrics`] (`IntCounter`, `IntGauge`, `Gauge`, `Histogram`, [`Summary`]);
//! 2. one line in [`Metrics::new`] that creates and registers it, with a helper of
//!    [`typha_service::metrics`]: `gauge(r, "typha_somethings", "What it is")` (an integer),
//!    `float_gauge(r, "typha_something_seconds", "...")`, `counter(r,
//!    "typha_somethings_total", "...")` (ours end in `_total`), `histogram`, `summary`; or
//!    `syncer_gauge` and friends here for one of Typha's per-syncer metrics;
//! 3. record it where it is measured (`ctx.cache.metrics.something.set(..)`);
//! 4. name it in `docs/server.md`'s metrics list (and, if it is Typha's, in the list in
//!    `tests/metrics.rs`).

mod labels;

use std::sync::Arc;

use crate::calico::libcalico::SyncerType;
use bytes::Bytes;
use prometheus::{Histogram, IntCounter, IntGauge, Registry};
use typha_service::metrics::{
    Summary, SummaryOpts, counter, counter_vec, exponential_buckets, float_gauge, float_gauge_vec,
    gauge, gauge_vec, histogram, register, summary,
};

pub use labels::{DropReason, FrameKind, ResumeKind};

/// The `syncer` label value of Typha's per-cache metrics: the syncer type of the one cache
/// every type is served from ([`typha_protocol::message::SyncerType::Felix`]'s wire name).
pub const SYNCER: &str = "felix";

/// One of Typha's per-syncer metrics: a series for each of Calico's four syncer types, every
/// one exposed from the start (as Typha creates them), in the order of [`SyncerType::ALL`].
#[derive(Debug)]
pub struct PerSyncer<T>([T; 4]);

impl<T> PerSyncer<T> {
    /// The series of syncer type `t`.
    pub fn of(&self, t: SyncerType) -> &T {
        let [felix, bgp, tunnel, status] = &self.0;
        match t {
            SyncerType::Felix => felix,
            SyncerType::Bgp => bgp,
            SyncerType::TunnelIpAllocation => tunnel,
            SyncerType::NodeStatus => status,
        }
    }

    /// The felix series: where clients of our own protocol count.
    pub fn felix(&self) -> &T {
        self.of(SyncerType::Felix)
    }

    /// Every syncer type's series.
    pub fn iter(&self) -> impl Iterator<Item = (SyncerType, &T)> {
        SyncerType::ALL.into_iter().zip(self.0.iter())
    }
}

impl PerSyncer<IntGauge> {
    /// The sum over the syncer types.
    pub fn total(&self) -> i64 {
        self.0.iter().map(IntGauge::get).sum()
    }
}

impl PerSyncer<IntCounter> {
    /// The sum over the syncer types.
    pub fn total(&self) -> u64 {
        self.0.iter().map(IntCounter::get).sum()
    }
}

/// Every metric the server exports. Typha's first (their exposed names in the field docs),
/// then ours.
#[derive(Debug)]
pub struct Metrics {
    // Typha's cache metrics, per syncer.
    /// `typha_breadcrumb_seq_number`: sequence number of the latest breadcrumb.
    pub breadcrumb_seq: IntGauge,
    /// `typha_breadcrumb_non_block`: a connection took its next step through the breadcrumbs
    /// without waiting (it was behind).
    pub breadcrumb_non_block: PerSyncer<IntCounter>,
    /// `typha_breadcrumb_block`: a connection had to wait for its next breadcrumb (it was up
    /// to date).
    pub breadcrumb_block: PerSyncer<IntCounter>,
    /// `typha_updates_total`: updates the cache received (skipped ones included).
    pub updates: IntCounter,
    /// `typha_updates_skipped`: updates equal to the cached value, dropped.
    pub updates_skipped: IntCounter,
    /// `typha_cache_size`: KVs in the cache.
    pub cache_size: IntGauge,
    /// `typha_breadcrumb_size` (summary): updates per breadcrumb.
    pub breadcrumb_size: Summary,
    // Typha's snapshot metrics, per syncer.
    /// `typha_snapshots_generated`.
    pub snapshots_generated: PerSyncer<IntCounter>,
    /// `typha_snapshots_reused`.
    pub snapshots_reused: PerSyncer<IntCounter>,
    /// `typha_snapshot_raw_bytes`: size of the last snapshot before compression.
    pub snapshot_raw_bytes: PerSyncer<IntGauge>,
    /// `typha_snapshot_compressed_bytes`: size of the last snapshot on the wire.
    pub snapshot_compressed_bytes: PerSyncer<IntGauge>,
    // Typha's connection metrics.
    /// `typha_connections_accepted`.
    pub connections_accepted: IntCounter,
    /// `typha_connections_dropped`: connections closed to hold the connection limit (Typha:
    /// "dropped due to rebalancing"); every reason is in `typha_connections_dropped_total`.
    pub connections_dropped: IntCounter,
    /// `typha_connections_active`: open connections.
    pub connections_active: IntGauge,
    /// `typha_connections_streaming` (per syncer): connections past their initial sync.
    pub connections_streaming: PerSyncer<IntGauge>,
    /// `typha_connections_grace_used` (per syncer): connections that fell more than the
    /// fall-behind limit behind during their grace period after the initial sync.
    pub connections_grace_used: PerSyncer<IntCounter>,
    /// `typha_client_snapshot_send_secs` (summary): time to send a client its initial sync.
    pub client_snapshot_send_secs: PerSyncer<Summary>,
    /// `typha_client_latency_secs` (summary, 1 min window): how far behind the latest
    /// breadcrumb a client's next step is.
    pub client_latency_secs: PerSyncer<Summary>,
    /// `typha_client_write_latency_secs` (summary): time per write to a client.
    pub client_write_latency_secs: PerSyncer<Summary>,
    /// `typha_next_breadcrumb_latency_secs` (summary): time to get the next step's frame for
    /// a client that is behind.
    pub next_breadcrumb_latency_secs: PerSyncer<Summary>,
    /// `typha_ping_latency` (summary): ping round trip, seconds.
    pub ping_latency: PerSyncer<Summary>,
    /// `typha_kvs_per_msg` (summary): KVs per delta message.
    pub kvs_per_msg: PerSyncer<Summary>,
    /// `typha_log_errors`: log lines that could not be written
    /// ([`typha_service::logging::errors`], process-wide).
    pub log_errors: IntCounter,
    // Ours.
    /// `typha_updates_invalid_total`: values that failed validation (sent on as deletions).
    pub updates_invalid: IntCounter,
    /// `typha_frames_encoded_total{kind}`, indexed by [`FrameKind`]: frames encoded (and
    /// compressed), each once for all clients.
    frames_encoded: [IntCounter; 6],
    /// `typha_encode_errors_total{kind}`, indexed by [`FrameKind`]: frames that could not be
    /// encoded (a bug, logged at error): the clients that needed one were dropped to resync.
    encode_errors: [IntCounter; 6],
    /// `typha_resumes_total{kind}`, indexed by [`ResumeKind`].
    resumes: [IntCounter; 3],
    /// `typha_resume_bytes_total{kind}`, indexed by [`ResumeKind`]: bytes of initial syncs.
    resume_bytes: [IntCounter; 3],
    /// `typha_resume_floor_waits_total{result}`: resuming clients held until the cache
    /// reached their revision floor (`reached`), served what it had when the wait ran out
    /// (`timed_out`), or sent to another replica because this one's view of the datastore
    /// was or turned stale during the wait (`sent_away`).
    pub resume_floor_waits: [IntCounter; 3],
    /// `typha_connections_dropped_total{reason}`, indexed by [`DropReason`].
    drops: [IntCounter; 10],
    /// `typha_syncs_waiting`: past the handshake, waiting for a turn to be synced.
    pub syncs_waiting: IntGauge,
    /// `typha_connections_handshaking`: accepted, TLS and hello not done yet.
    pub connections_handshaking: IntGauge,
    /// `typha_connections_limit{protocol}` (`all`, `typha-rs`): the limit on every connection
    /// (Typha's, four per node with balancing) and on those of our own protocol (one per
    /// node).
    pub connections_limit: [IntGauge; 2],
    /// `typha_calico_connections_refused_total{syncer}`: Calico clients closed at the
    /// connection limit (their protocol has no goodbye), by the syncer type of their hello
    /// (`unknown`: not read in time).
    calico_refused: [IntCounter; 5],
    /// `typha_calico_connections{syncer}`: connections speaking Calico's own Typha protocol,
    /// past their hello, by syncer type (felix, bgp, tunnel-ip-allocation, node-status).
    calico_connections: [IntGauge; 4],
    /// `typha_connections_syncing`: being sent their initial sync.
    pub connections_syncing: IntGauge,
    /// `typha_in_sync{syncer}`: 1 while the cache is in sync with the datastore.
    pub in_sync: IntGauge,
    /// `typha_cluster_nodes{syncer}`: Calico Node resources in the cache (the cluster's
    /// nodes, as Typha's node counter sees them), kept by the writer as changes apply.
    pub cluster_nodes: IntGauge,
    /// `typha_state_revision{syncer}`: the highest datastore revision applied, at the latest
    /// breadcrumb.
    pub state_revision: IntGauge,
    /// `typha_state_digest{syncer}`: the low 52 bits of the state digest at the latest
    /// breadcrumb (exact in a float64), to compare replicas at the same revision.
    pub state_digest: IntGauge,
    /// `typha_shutdown_draining`: 1 from SIGTERM until the process exits.
    pub shutdown_draining: IntGauge,
    /// `typha_shutdown_connections_remaining`: while draining, connections not yet sent
    /// their Goodbye.
    pub shutdown_connections_remaining: IntGauge,
    /// `typha_upstream_connected`: 1 while the last request to the datastore (or, for a tier,
    /// the upstream server) succeeded.
    pub upstream_connected: IntGauge,
    /// `typha_upstream_stale`: 1 while the datastore view is stale.
    pub upstream_stale: IntGauge,
    /// `typha_upstream_confirmed_age_seconds`: time since the datastore view was last
    /// confirmed current.
    pub upstream_confirmed_age: prometheus::Gauge,
    /// `typha_tls_certificate_expiry_timestamp_seconds{certificate}` (`server`, `ca`): when
    /// the certificate in use expires (the earliest, for a bundle), Unix seconds.
    pub tls_expiry: [prometheus::Gauge; 2],
    /// `typha_tls_reloads_total{result}` (`success`, `failure`): changed TLS files taken, or
    /// refused (the old material stays in use).
    pub tls_reloads: [IntCounter; 2],
    /// `typha_bytes_sent_total`: bytes written to clients.
    pub bytes_sent: IntCounter,
    /// `typha_client_ack_lag_secs` (histogram): from a breadcrumb's creation to a client's Ack
    /// of it (fleet propagation latency as seen by the nodes themselves).
    pub client_ack_lag_secs: Histogram,
}

/// One of Typha's per-syncer counters: its `syncer` series for [`SYNCER`].
fn syncer_counter(r: &Registry, name: &str, help: &str) -> IntCounter {
    counter_vec(r, name, help, &["syncer"]).with_label_values(&[SYNCER])
}

/// One of Typha's per-syncer gauges.
fn syncer_gauge(r: &Registry, name: &str, help: &str) -> IntGauge {
    gauge_vec(r, name, help, &["syncer"]).with_label_values(&[SYNCER])
}

/// One of Typha's per-syncer summaries of the cache (Calico's objectives; Go's 10-minute
/// window unless Typha sets another).
fn syncer_summary(r: &Registry, opts: SummaryOpts) -> Summary {
    summary(r, opts.const_label("syncer", SYNCER))
}

/// One of Typha's per-syncer counters of connections and snapshots: a series per syncer type.
fn per_syncer_counter(r: &Registry, name: &str, help: &str) -> PerSyncer<IntCounter> {
    let v = counter_vec(r, name, help, &["syncer"]);
    PerSyncer(SyncerType::ALL.map(|t| v.with_label_values(&[t.as_str()])))
}

/// One of Typha's per-syncer gauges of connections and snapshots.
fn per_syncer_gauge(r: &Registry, name: &str, help: &str) -> PerSyncer<IntGauge> {
    let v = gauge_vec(r, name, help, &["syncer"]);
    PerSyncer(SyncerType::ALL.map(|t| v.with_label_values(&[t.as_str()])))
}

/// One of Typha's per-syncer summaries of connections: a summary per syncer type (one family:
/// the registry merges them).
fn per_syncer_summary(r: &Registry, opts: SummaryOpts) -> PerSyncer<Summary> {
    PerSyncer(SyncerType::ALL.map(|t| summary(r, opts.clone().const_label("syncer", t.as_str()))))
}

/// A counter per label value, in the order of `values`, every one exposed from the start (at
/// zero: dashboards see a series before the first event, and rates work from the first
/// scrape).
fn counters<const N: usize>(
    r: &Registry,
    name: &str,
    help: &str,
    label: &str,
    values: [&str; N],
) -> [IntCounter; N] {
    let v = counter_vec(r, name, help, &[label]);
    values.map(|value| v.with_label_values(&[value]))
}

impl Metrics {
    /// Creates the metrics and registers them in `r`.
    pub fn new(r: &Registry) -> Arc<Self> {
        let summary = SummaryOpts::new;
        // CPU, memory, file descriptors, start time: what every exporter serves.
        typha_service::metrics::register_process_metrics(r);
        // What the binary was built from: `typha_build_info`.
        crate::build_info::register(r);
        Arc::new(Metrics {
            breadcrumb_seq: syncer_gauge(
                r,
                "typha_breadcrumb_seq_number",
                "Sequence number of the latest breadcrumb.",
            ),
            breadcrumb_non_block: per_syncer_counter(
                r,
                "typha_breadcrumb_non_block",
                "Times a connection got its next breadcrumb without waiting for it.",
            ),
            breadcrumb_block: per_syncer_counter(
                r,
                "typha_breadcrumb_block",
                "Times a connection got its next breadcrumb after waiting for it.",
            ),
            updates: syncer_counter(
                r,
                "typha_updates_total",
                "Updates the cache received from the syncer, skipped ones included.",
            ),
            updates_skipped: syncer_counter(
                r,
                "typha_updates_skipped",
                "Updates equal to the cached value, dropped.",
            ),
            cache_size: syncer_gauge(r, "typha_cache_size", "KVs in the cache."),
            breadcrumb_size: syncer_summary(
                r,
                summary("typha_breadcrumb_size", "Updates per breadcrumb."),
            ),
            snapshots_generated: per_syncer_counter(
                r,
                "typha_snapshots_generated",
                "Snapshots built for joining clients.",
            ),
            snapshots_reused: per_syncer_counter(
                r,
                "typha_snapshots_reused",
                "Times a joining client was sent a snapshot already built.",
            ),
            snapshot_raw_bytes: per_syncer_gauge(
                r,
                "typha_snapshot_raw_bytes",
                "Size of the last snapshot built, before compression.",
            ),
            snapshot_compressed_bytes: per_syncer_gauge(
                r,
                "typha_snapshot_compressed_bytes",
                "Size of the last snapshot built, on the wire.",
            ),
            connections_accepted: counter(r, "typha_connections_accepted", "Connections accepted."),
            connections_dropped: counter(
                r,
                "typha_connections_dropped",
                "Connections closed to hold the connection limit.",
            ),
            connections_active: gauge(
                r,
                "typha_connections_active",
                "Open client connections, including those still in the handshake.",
            ),
            connections_streaming: per_syncer_gauge(
                r,
                "typha_connections_streaming",
                "Client connections past their initial sync, streaming updates.",
            ),
            connections_grace_used: per_syncer_counter(
                r,
                "typha_connections_grace_used",
                "Connections that needed their grace period after the initial sync to catch up.",
            ),
            client_snapshot_send_secs: per_syncer_summary(
                r,
                summary(
                    "typha_client_snapshot_send_secs",
                    "Time to send a client its initial sync.",
                ),
            ),
            // Typha's one window of its own: a minute in two steps, so the figure recovers
            // soon after a spike.
            client_latency_secs: per_syncer_summary(
                r,
                summary(
                    "typha_client_latency_secs",
                    "How far behind the latest breadcrumb each client's next step is.",
                )
                .window(std::time::Duration::from_secs(60), 2),
            ),
            client_write_latency_secs: per_syncer_summary(
                r,
                summary(
                    "typha_client_write_latency_secs",
                    "Time per write to a client.",
                ),
            ),
            next_breadcrumb_latency_secs: per_syncer_summary(
                r,
                summary(
                    "typha_next_breadcrumb_latency_secs",
                    "Time to get the next breadcrumb's frame for a client that is behind.",
                ),
            ),
            ping_latency: per_syncer_summary(
                r,
                summary("typha_ping_latency", "Round-trip ping latency to a client."),
            ),
            kvs_per_msg: per_syncer_summary(
                r,
                summary("typha_kvs_per_msg", "KVs per delta message."),
            ),
            log_errors: register(r, typha_service::logging::errors()),
            updates_invalid: counter(
                r,
                "typha_updates_invalid_total",
                "Values that failed validation and were sent as deletions.",
            ),
            frames_encoded: counters(
                r,
                "typha_frames_encoded_total",
                "Frames encoded, each once for all clients.",
                "kind",
                FrameKind::ALL.map(FrameKind::label),
            ),
            encode_errors: counters(
                r,
                "typha_encode_errors_total",
                "Frames that could not be encoded (a bug; the clients that needed them resync).",
                "kind",
                FrameKind::ALL.map(FrameKind::label),
            ),
            resumes: counters(
                r,
                "typha_resumes_total",
                "How connecting clients were brought up to date.",
                "kind",
                ResumeKind::ALL.map(ResumeKind::label),
            ),
            resume_floor_waits: counters(
                r,
                "typha_resume_floor_waits_total",
                "Resuming clients that had seen newer datastore revisions than the cache, held \
                 until it reached them (reached), served what it had when the wait ran out \
                 (timed_out), or sent to another replica because this one's view of the \
                 datastore was or turned stale during the wait (sent_away).",
                "result",
                ["reached", "timed_out", "sent_away"],
            ),
            resume_bytes: counters(
                r,
                "typha_resume_bytes_total",
                "Bytes sent to bring connecting clients up to date (before TLS), by how.",
                "kind",
                ResumeKind::ALL.map(ResumeKind::label),
            ),
            drops: counters(
                r,
                "typha_connections_dropped_total",
                "Connections closed by the server, by reason.",
                "reason",
                DropReason::ALL.map(DropReason::label),
            ),
            syncs_waiting: gauge(
                r,
                "typha_syncs_waiting",
                "Connections waiting for a turn to be synced (TYPHA_MAXCONCURRENTSYNCS).",
            ),
            connections_handshaking: gauge(
                r,
                "typha_connections_handshaking",
                "Connections accepted whose TLS handshake or hello is not done yet.",
            ),
            calico_connections: {
                let v = gauge_vec(
                    r,
                    "typha_calico_connections",
                    "Connections speaking Calico's Typha protocol, past their hello, by syncer type.",
                    &["syncer"],
                );
                SyncerType::ALL.map(|t| v.with_label_values(&[t.as_str()]))
            },
            connections_limit: {
                let v = gauge_vec(
                    r,
                    "typha_connections_limit",
                    "Most connections this replica takes: all of them (Typha's limit, four per node with balancing), and those of our own protocol (one per node).",
                    &["protocol"],
                );
                ["all", "typha-rs"].map(|p| v.with_label_values(&[p]))
            },
            calico_refused: counters(
                r,
                "typha_calico_connections_refused_total",
                "Calico clients closed at the connection limit (their protocol has no goodbye), by the syncer type of their hello.",
                "syncer",
                [
                    SyncerType::Felix.as_str(),
                    SyncerType::Bgp.as_str(),
                    SyncerType::TunnelIpAllocation.as_str(),
                    SyncerType::NodeStatus.as_str(),
                    "unknown",
                ],
            ),
            connections_syncing: gauge(
                r,
                "typha_connections_syncing",
                "Connections being sent their initial sync (deltas, digest buckets or a snapshot).",
            ),
            in_sync: syncer_gauge(
                r,
                "typha_in_sync",
                "1 while the cache is in sync with the datastore.",
            ),
            cluster_nodes: syncer_gauge(
                r,
                "typha_cluster_nodes",
                "Calico Node resources in the cache: the cluster's nodes.",
            ),
            state_revision: syncer_gauge(
                r,
                "typha_state_revision",
                "Highest datastore revision applied to the cache, at the latest breadcrumb.",
            ),
            state_digest: syncer_gauge(
                r,
                "typha_state_digest",
                "State digest at the latest breadcrumb, its low 52 bits (so a float64 holds it exactly): replicas at the same typha_state_revision should show the same value.",
            ),
            shutdown_draining: gauge(
                r,
                "typha_shutdown_draining",
                "1 while the server drains its connections after SIGTERM (readiness fails meanwhile).",
            ),
            shutdown_connections_remaining: gauge(
                r,
                "typha_shutdown_connections_remaining",
                "Connections not yet sent their Goodbye in a shutdown drain.",
            ),
            upstream_connected: gauge(
                r,
                "typha_upstream_connected",
                "1 while the last request to the datastore (or upstream server) succeeded.",
            ),
            upstream_stale: gauge(
                r,
                "typha_upstream_stale",
                "1 while the datastore view has not been confirmed current for longer than TYPHA_STALETHRESHOLDSECS.",
            ),
            upstream_confirmed_age: float_gauge(
                r,
                "typha_upstream_confirmed_age_seconds",
                "Seconds since the datastore view was last confirmed current.",
            ),
            tls_expiry: {
                let v = float_gauge_vec(
                    r,
                    "typha_tls_certificate_expiry_timestamp_seconds",
                    "When the certificate in use expires (Unix seconds; the earliest of a CA bundle).",
                    &["certificate"],
                );
                ["server", "ca"].map(|c| v.with_label_values(&[c]))
            },
            tls_reloads: counters(
                r,
                "typha_tls_reloads_total",
                "Changed TLS files taken (success) or refused, the old ones kept (failure).",
                "result",
                ["success", "failure"],
            ),
            bytes_sent: counter(r, "typha_bytes_sent_total", "Bytes written to clients."),
            client_ack_lag_secs: histogram(
                r,
                "typha_client_ack_lag_secs",
                "From a breadcrumb's creation to a client's Ack of it.",
                exponential_buckets(0.0005, 2.0, 18),
            ),
        })
    }

    /// Metrics not registered anywhere (tests, tools).
    pub fn unregistered() -> Arc<Self> {
        Self::new(&Registry::new())
    }

    /// Counts `frame`, just encoded for `kind`, and passes it on.
    pub fn counted(&self, kind: FrameKind, frame: Bytes) -> Bytes {
        self.encoded(kind);
        frame
    }

    /// Counts one frame encoded for `kind`.
    pub fn encoded(&self, kind: FrameKind) {
        self.frames(kind).inc();
    }

    /// Counts one frame of `kind` that could not be encoded.
    pub fn encode_failed(&self, kind: FrameKind) {
        self.pick(&self.encode_errors, kind).inc();
    }

    /// Frames of `kind` that could not be encoded so far.
    pub fn encode_error_count(&self, kind: FrameKind) -> u64 {
        self.pick(&self.encode_errors, kind).get()
    }

    /// The `typha_calico_connections` gauge of syncer type `t`.
    pub fn calico_connections(&self, t: SyncerType) -> &IntGauge {
        let [felix, bgp, tunnel, status] = &self.calico_connections;
        match t {
            SyncerType::Felix => felix,
            SyncerType::Bgp => bgp,
            SyncerType::TunnelIpAllocation => tunnel,
            SyncerType::NodeStatus => status,
        }
    }

    /// Counts a Calico client closed at the connection limit, by its hello's syncer type
    /// (`None`: the hello was not read in time).
    pub fn calico_refused(&self, t: Option<SyncerType>) {
        self.calico_refused_counter(t).inc();
    }

    /// Calico clients of syncer type `t` closed at the connection limit so far.
    pub fn calico_refused_count(&self, t: Option<SyncerType>) -> u64 {
        self.calico_refused_counter(t).get()
    }

    fn calico_refused_counter(&self, t: Option<SyncerType>) -> &IntCounter {
        let [felix, bgp, tunnel, status, unknown] = &self.calico_refused;
        match t {
            Some(SyncerType::Felix) => felix,
            Some(SyncerType::Bgp) => bgp,
            Some(SyncerType::TunnelIpAllocation) => tunnel,
            Some(SyncerType::NodeStatus) => status,
            None => unknown,
        }
    }

    /// Frames of `kind` encoded so far.
    pub fn encoded_count(&self, kind: FrameKind) -> u64 {
        self.frames(kind).get()
    }

    fn frames(&self, kind: FrameKind) -> &IntCounter {
        self.pick(&self.frames_encoded, kind)
    }

    /// The counter of `kind` in a set indexed by [`FrameKind`].
    fn pick<'a>(&self, set: &'a [IntCounter; 6], kind: FrameKind) -> &'a IntCounter {
        let [delta, span, snapshot, bucket, calico_delta, calico_snapshot] = set;
        match kind {
            FrameKind::delta => delta,
            FrameKind::span => span,
            FrameKind::snapshot => snapshot,
            FrameKind::bucket => bucket,
            FrameKind::calico_delta => calico_delta,
            FrameKind::calico_snapshot => calico_snapshot,
        }
    }

    /// Counts a resume.
    pub fn resumed(&self, kind: ResumeKind) {
        self.resume(kind).inc();
    }

    /// Resumes of `kind` so far.
    pub fn resume_count(&self, kind: ResumeKind) -> u64 {
        self.resume(kind).get()
    }

    /// Bytes of initial syncs of `kind`.
    pub fn resume_bytes(&self, kind: ResumeKind) -> &IntCounter {
        let [deltas, digest, snapshot] = &self.resume_bytes;
        match kind {
            ResumeKind::deltas => deltas,
            ResumeKind::digest => digest,
            ResumeKind::snapshot => snapshot,
        }
    }

    fn resume(&self, kind: ResumeKind) -> &IntCounter {
        let [deltas, digest, snapshot] = &self.resumes;
        match kind {
            ResumeKind::deltas => deltas,
            ResumeKind::digest => digest,
            ResumeKind::snapshot => snapshot,
        }
    }

    /// Counts a connection the server closed; one closed to hold the connection limit is
    /// also Typha's `typha_connections_dropped`.
    pub fn dropped(&self, reason: DropReason) {
        self.drop_counter(reason).inc();
        // Typha's counter: connections closed to hold the limit (its governor's random drops;
        // our refusals at the limit and our balancing moves).
        if matches!(
            reason,
            DropReason::too_many_connections | DropReason::rebalance
        ) {
            self.connections_dropped.inc();
        }
    }

    /// Drops of `reason` so far.
    pub fn dropped_count(&self, reason: DropReason) -> u64 {
        self.drop_counter(reason).get()
    }

    fn drop_counter(&self, reason: DropReason) -> &IntCounter {
        let [
            limit,
            handshake,
            tls,
            ping,
            write,
            behind,
            protocol,
            shutdown,
            rebalance,
            encode,
        ] = &self.drops;
        match reason {
            DropReason::too_many_connections => limit,
            DropReason::handshake => handshake,
            DropReason::tls_identity => tls,
            DropReason::ping_timeout => ping,
            DropReason::write_timeout => write,
            DropReason::fell_behind => behind,
            DropReason::protocol_error => protocol,
            DropReason::shutdown => shutdown,
            DropReason::rebalance => rebalance,
            DropReason::encode_error => encode,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use typha_protocol::message::SyncerType;

    use super::*;

    #[test]
    fn the_syncer_label_is_the_felix_syncer_types_wire_name() {
        assert_eq!(SYNCER, SyncerType::Felix.as_str());
    }

    #[test]
    fn every_label_value_has_its_own_series_from_the_start() {
        let r = Registry::new();
        let m = Metrics::new(&r);
        for (i, k) in FrameKind::ALL.into_iter().enumerate() {
            for _ in 0..=i {
                m.encoded(k);
            }
        }
        m.dropped(DropReason::too_many_connections);
        m.dropped(DropReason::shutdown);
        m.resumed(ResumeKind::digest);
        let text = typha_service::metrics::encode(&r).unwrap();
        for (i, k) in FrameKind::ALL.into_iter().enumerate() {
            assert_eq!(m.encoded_count(k), i as u64 + 1);
            let line = format!(
                "typha_frames_encoded_total{{kind=\"{}\"}} {}\n",
                k.label(),
                i + 1
            );
            assert!(text.contains(&line), "{line} in\n{text}");
        }
        for r in DropReason::ALL {
            assert!(text.contains(&format!("{{reason=\"{}\"}}", r.label())));
        }
        assert_eq!(m.dropped_count(DropReason::shutdown), 1);
        assert_eq!(m.resume_count(ResumeKind::digest), 1);
        // Only a drop at the connection limit is Typha's kind of drop.
        assert!(text.contains("\ntypha_connections_dropped 1\n"), "{text}");
        assert!(text.contains("\ntypha_connections_dropped_total{reason=\"shutdown\"} 1\n"));
    }
}
