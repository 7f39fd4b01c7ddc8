//! Client metrics (the `prometheus` crate): whether connected, reconnects, resumes by kind, bytes
//! received, and staleness (time since the last message from a server: the signal Typha's
//! users lacked when a stale server kept them quiet).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use prometheus::core::Collector;
use prometheus::{Gauge, IntCounter, IntCounterVec, IntGauge, Opts, Registry};
use tokio::time::Instant;
use typha_protocol::message::Staleness;

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
    /// `typha_client_sessions_ended_total{cause}`, in [`EndCause`] order: established
    /// sessions that ended, and why.
    sessions_ended: [IntCounter; 4],
    /// `typha_client_staleness_seconds`: time since the last message from a server.
    pub staleness: Gauge,
    /// `typha_client_server_view_stale`: 1 while the server says its view of the datastore is
    /// stale (it lost its datastore; what this client has may be old).
    pub server_view_stale: IntGauge,
    /// `typha_client_server_view_age_seconds`: while stale, how long ago the server's view
    /// was last confirmed current (its report plus the time since); 0 otherwise.
    pub server_view_age: Gauge,
    /// When the server's last stale report came (ms since `origin`) and the age it gave.
    stale_report: std::sync::Mutex<Option<(u64, u64)>>,
    /// `typha_client_tls_certificate_expiry_timestamp_seconds{certificate}` (`client`, `ca`):
    /// when the certificate in use expires (the earliest of a CA bundle), Unix seconds.
    pub tls_expiry: [Gauge; 2],
    /// `typha_client_tls_reloads_total{result}` (`success`, `failure`): changed TLS files
    /// taken, or refused (the old ones kept).
    pub tls_reloads: [IntCounter; 2],
    origin: Instant,
    last_message_ms: AtomicU64,
    sessions: AtomicU64,
}

/// Why an established session ended (`typha_client_sessions_ended_total{cause}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndCause {
    /// The server sent this client away (moved to another replica, drained at shutdown, at
    /// its limit): expected, and followed by a resume elsewhere.
    Goodbye,
    /// The connection was lost or went quiet past a timeout.
    Lost,
    /// The server's stream disagreed with the store (a gap in the sequence, a digest
    /// mismatch): healed by the next resume, but it should never happen.
    Inconsistent,
    /// Anything else (a protocol error).
    Other,
}

impl EndCause {
    const ALL: [EndCause; 4] = [Self::Goodbye, Self::Lost, Self::Inconsistent, Self::Other];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Goodbye => "goodbye",
            Self::Lost => "lost",
            Self::Inconsistent => "inconsistent",
            Self::Other => "other",
        }
    }
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
    ///
    /// # Panics
    ///
    /// Never: every metric's name and help text are literals the exposition format accepts (this
    /// module's tests encode them). A metric the registry refuses (a name already registered
    /// there) is logged and left unexposed, not a panic.
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
            sessions_ended: {
                let v = register(
                    r,
                    IntCounterVec::new(
                        Opts::new(
                            "typha_client_sessions_ended_total",
                            "Established sessions that ended, by cause (inconsistent: a gap or a digest mismatch, which should never happen)",
                        ),
                        &["cause"],
                    )
                    .expect("valid metric"),
                );
                EndCause::ALL.map(|c| v.with_label_values(&[c.as_str()]))
            },
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
            server_view_stale: register(
                r,
                IntGauge::new(
                    "typha_client_server_view_stale",
                    "1 while the server says its view of the datastore is stale",
                )
                .expect("valid metric"),
            ),
            server_view_age: register(
                r,
                Gauge::new(
                    "typha_client_server_view_age_seconds",
                    "While the server's view is stale, seconds since it was last confirmed current",
                )
                .expect("valid metric"),
            ),
            stale_report: std::sync::Mutex::new(None),
            tls_expiry: {
                let v = register(
                    r,
                    prometheus::GaugeVec::new(
                        Opts::new(
                            "typha_client_tls_certificate_expiry_timestamp_seconds",
                            "When the certificate in use expires (Unix seconds; the earliest of a CA bundle)",
                        ),
                        &["certificate"],
                    )
                    .expect("valid metric"),
                );
                ["client", "ca"].map(|c| v.with_label_values(&[c]))
            },
            tls_reloads: {
                let v = register(
                    r,
                    IntCounterVec::new(
                        Opts::new(
                            "typha_client_tls_reloads_total",
                            "Changed TLS files taken (success) or refused, the old ones kept (failure)",
                        ),
                        &["result"],
                    )
                    .expect("valid metric"),
                );
                ["success", "failure"].map(|c| v.with_label_values(&[c]))
            },
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

    /// Records the end of an established session, and why (the next server says how current
    /// it is).
    pub fn session_ended(&self, cause: EndCause) {
        self.connected.dec();
        self.ended(cause).inc();
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
        self.resume(kind).inc();
    }

    /// Resumes of a kind so far.
    pub fn resume_count(&self, kind: ResumeKind) -> u64 {
        self.resume(kind).get()
    }

    /// Established sessions that ended for `cause` so far.
    pub fn ended_count(&self, cause: EndCause) -> u64 {
        self.ended(cause).get()
    }

    fn ended(&self, cause: EndCause) -> &IntCounter {
        let [goodbye, lost, inconsistent, other] = &self.sessions_ended;
        match cause {
            EndCause::Goodbye => goodbye,
            EndCause::Lost => lost,
            EndCause::Inconsistent => inconsistent,
            EndCause::Other => other,
        }
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
        m.session_ended(EndCause::Goodbye);
        m.session_started();
        m.heard();
        m.bytes_received.inc_by(10);
        let mut text = Vec::new();
        prometheus::TextEncoder::new()
            .encode(&r.gather(), &mut text)
            .unwrap();
        let text = String::from_utf8(text).unwrap();
        for line in [
            "typha_client_connected 2",
            "typha_client_reconnects_total 2",
            "typha_client_sessions_ended_total{cause=\"goodbye\"} 1",
            "typha_client_sessions_ended_total{cause=\"inconsistent\"} 0",
            "typha_client_sessions_ended_total{cause=\"lost\"} 0",
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
