//! Client metrics (the `prometheus` crate): whether connected, reconnects, resumes by kind, bytes
//! received, and staleness (time since the last message from a server: the signal Typha's
//! users lacked when a stale server kept them quiet).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use prometheus::core::Collector;
use prometheus::{Gauge, IntCounter, IntCounterVec, IntGauge, Opts, Registry};
use tokio::time::Instant;

use crate::store::ResumeKind;

/// The client's metrics. Exposed in the Prometheus text format 0.0.4 by the program that
/// serves them (`typha_service::metrics`): counters under the names below, which end in
/// `_total`, as they did in the OpenMetrics form before.
#[derive(Debug)]
pub struct ClientMetrics {
    /// `typha_client_connected`: 1 while connected to a server (clients sharing one set of
    /// metrics add up).
    pub connected: IntGauge,
    /// `typha_client_reconnects_total`: connections established after the first.
    pub reconnects: IntCounter,
    /// `typha_client_resumes_total{kind}` (`deltas`, `digest`, `snapshot`): how each
    /// connection brought the state up to date, in [`ResumeKind`] order.
    resumes: [IntCounter; 3],
    /// `typha_client_bytes_received_total`.
    pub bytes_received: IntCounter,
    /// `typha_client_staleness_seconds`: time since the last message from a server.
    pub staleness: Gauge,
    origin: Instant,
    last_message_ms: AtomicU64,
    sessions: AtomicU64,
}

/// Registers `c`; a second registration of the same name (two clients given one registry) is
/// logged and the metric, unexposed, still counts.
fn register<C: Collector + Clone + 'static>(r: &Registry, c: C) -> C {
    if let Err(e) = r.register(Box::new(c.clone())) {
        tracing::warn!(error = %e, "a client metric could not be registered; it is not exposed");
    }
    c
}

// The metrics below have literal names and help texts that the exposition format accepts
// (this module's tests encode them): creating them cannot fail.
#[allow(clippy::expect_used)]
impl ClientMetrics {
    /// Creates the metrics and registers them.
    pub fn new(registry: &Registry) -> Arc<Self> {
        let r = registry;
        let resumes = register(
            r,
            IntCounterVec::new(
                Opts::new(
                    "typha_client_resumes_total",
                    "How each connection brought the state up to date",
                ),
                &["kind"],
            )
            .expect("valid metric"),
        );
        Arc::new(ClientMetrics {
            connected: register(
                r,
                IntGauge::new("typha_client_connected", "1 while connected to a server")
                    .expect("valid metric"),
            ),
            reconnects: register(
                r,
                IntCounter::new(
                    "typha_client_reconnects_total",
                    "Connections established after the first",
                )
                .expect("valid metric"),
            ),
            // Every kind exists from the start, at zero.
            resumes: ["deltas", "digest", "snapshot"].map(|k| resumes.with_label_values(&[k])),
            bytes_received: register(
                r,
                IntCounter::new(
                    "typha_client_bytes_received_total",
                    "Bytes received from servers",
                )
                .expect("valid metric"),
            ),
            staleness: register(
                r,
                Gauge::new(
                    "typha_client_staleness_seconds",
                    "Seconds since the last message from a server",
                )
                .expect("valid metric"),
            ),
            origin: Instant::now(),
            last_message_ms: AtomicU64::new(0),
            sessions: AtomicU64::new(0),
        })
    }

    /// Metrics registered nowhere.
    pub fn unregistered() -> Arc<Self> {
        Self::new(&Registry::new())
    }

    /// Records an established session (every one after the first is a reconnect).
    pub fn session_started(&self) {
        self.connected.inc();
        if self.sessions.fetch_add(1, Ordering::Relaxed) > 0 {
            self.reconnects.inc();
        }
    }

    /// Records the end of an established session.
    pub fn session_ended(&self) {
        self.connected.dec();
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

    /// Refreshes the staleness gauge (the client does this every second).
    pub fn refresh(&self) {
        self.staleness.set(self.staleness().as_secs_f64());
    }

    /// Counts a resume.
    pub fn resumed(&self, kind: ResumeKind) {
        self.resume(kind).inc();
    }

    /// Resumes of a kind so far.
    pub fn resume_count(&self, kind: ResumeKind) -> u64 {
        self.resume(kind).get()
    }

    fn resume(&self, kind: ResumeKind) -> &IntCounter {
        let [deltas, digest, snapshot] = &self.resumes;
        match kind {
            ResumeKind::Deltas => deltas,
            ResumeKind::Digest => digest,
            ResumeKind::Snapshot => snapshot,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use prometheus::Encoder;

    use super::*;

    #[tokio::test]
    async fn names_are_what_they_were_in_the_openmetrics_form() {
        let r = Registry::new();
        let m = ClientMetrics::new(&r);
        m.session_started();
        m.session_started();
        m.resumed(ResumeKind::Digest);
        m.bytes_received.inc_by(10);
        let mut text = Vec::new();
        prometheus::TextEncoder::new()
            .encode(&r.gather(), &mut text)
            .unwrap();
        let text = String::from_utf8(text).unwrap();
        for line in [
            "typha_client_connected 2",
            "typha_client_reconnects_total 1",
            "typha_client_resumes_total{kind=\"deltas\"} 0",
            "typha_client_resumes_total{kind=\"digest\"} 1",
            "typha_client_resumes_total{kind=\"snapshot\"} 0",
            "typha_client_bytes_received_total 10",
            "typha_client_staleness_seconds 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
        assert_eq!(m.resume_count(ResumeKind::Digest), 1);
    }
}
