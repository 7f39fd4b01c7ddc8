//! HTTP: `/liveness`, `/readiness` and `/metrics` (axum; the Prometheus text format 0.0.4).
//!
//! Liveness means the sync listener's accept loop and the cache writer are both making
//! progress (Typha's health could pass while `accept()` was broken). Readiness adds that the
//! cache is in sync with the datastore. `/status` (on the health listener) is the cache's
//! position as JSON, for operators and tools: sync status, breadcrumb sequence, KV count, the
//! state digest (the one clients compute and `typha-tail` prints) and connection counts.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus::Registry;
use tokio::time::Instant;
use typha_protocol::model::SyncStatus;

use crate::cache::Cache;
use crate::metrics::Metrics;

/// How stale the accept loop's heartbeat may be before liveness fails.
pub const HEARTBEAT_MAX_AGE: Duration = Duration::from_secs(10);

/// A timestamp a loop bumps to show it is alive.
#[derive(Debug)]
pub struct Heartbeat {
    origin: Instant,
    millis: AtomicU64,
}

impl Heartbeat {
    /// A heartbeat that beats now.
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            origin: Instant::now(),
            millis: AtomicU64::new(0),
        })
    }

    /// Records a beat.
    pub fn beat(&self) {
        let ms = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.millis.store(ms, Ordering::Relaxed);
    }

    /// Time since the last beat.
    pub fn age(&self) -> Duration {
        let last = Duration::from_millis(self.millis.load(Ordering::Relaxed));
        self.origin.elapsed().saturating_sub(last)
    }
}

/// What the handlers read.
#[derive(Debug, Clone)]
pub struct HttpState {
    /// The cache.
    pub cache: Arc<Cache>,
    /// The accept loop's heartbeat.
    pub accept: Arc<Heartbeat>,
    /// The metrics registry.
    pub registry: Arc<Registry>,
    /// The metrics (for `/status`).
    pub metrics: Arc<Metrics>,
}

/// The router: health routes, metrics route, or both.
pub fn router(state: HttpState, health: bool, metrics: bool) -> Router {
    let mut r = Router::new();
    if health {
        r = r
            .route("/liveness", get(liveness))
            .route("/readiness", get(readiness))
            .route("/status", get(status));
    }
    if metrics {
        r = r.route("/metrics", get(metrics_text));
    }
    r.with_state(state)
}

/// Why the server is not live.
#[derive(Debug, thiserror::Error)]
enum NotLive {
    /// The sync listener's accept loop has not run for too long.
    #[error("sync listener's accept loop last ran {0:?} ago")]
    AcceptLoop(Duration),
}

fn live(s: &HttpState) -> Result<(), NotLive> {
    let age = s.accept.age();
    if age > HEARTBEAT_MAX_AGE {
        return Err(NotLive::AcceptLoop(age));
    }
    Ok(())
}

async fn liveness(State(s): State<HttpState>) -> impl IntoResponse {
    match live(&s) {
        Ok(()) => (StatusCode::OK, "live\n".to_owned()),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("not live: {e}\n")),
    }
}

async fn readiness(State(s): State<HttpState>) -> impl IntoResponse {
    if let Err(e) = live(&s) {
        return (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {e}\n"));
    }
    let latest = s.cache.latest();
    if latest.status != SyncStatus::InSync {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: cache is {}\n", latest.status),
        );
    }
    (
        StatusCode::OK,
        format!(
            "ready: in sync at breadcrumb {}, {} KVs\n",
            latest.seq, latest.kvs
        ),
    )
}

async fn status(State(s): State<HttpState>) -> impl IntoResponse {
    let latest = s.cache.latest();
    axum::Json(serde_json::json!({
        "status": latest.status.to_string(),
        "seq": latest.seq.0,
        "kvs": latest.kvs,
        "digest": format!("{:016x}", latest.digest),
        "connections": s.metrics.connections_active.get(),
        "streaming": s.metrics.connections_streaming.get(),
    }))
}

async fn metrics_text(State(s): State<HttpState>) -> impl IntoResponse {
    typha_service::metrics::metrics_response(&s.registry)
}
