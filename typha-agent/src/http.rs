//! The agent's HTTP endpoints: `/liveness`, `/readiness`, `/metrics`, `/status`.
//!
//! Live while the loop keeps turning (it turns at least every second unless stuck); ready once
//! in sync and the dataplane has been programmed from that state.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus::Registry;

use crate::run::Shared;

/// How long the loop may go without a turn before the agent is not live. An apply of a large
/// dataplane can take seconds; a minute without a turn means it is stuck.
pub const MAX_TURN_AGE: Duration = Duration::from_secs(60);

#[derive(Clone)]
struct HttpState {
    shared: Arc<Shared>,
    registry: Arc<Registry>,
}

/// The router.
pub fn router(shared: Arc<Shared>, registry: Arc<Registry>) -> Router {
    Router::new()
        .route("/liveness", get(liveness))
        .route("/readiness", get(readiness))
        .route("/status", get(status))
        .route("/metrics", get(metrics_text))
        .with_state(HttpState { shared, registry })
}

async fn liveness(State(s): State<HttpState>) -> impl IntoResponse {
    let age = s.shared.since_last_turn();
    if age > MAX_TURN_AGE {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not live: the agent loop last turned {age:?} ago\n"),
        )
    } else {
        (StatusCode::OK, "live\n".to_string())
    }
}

async fn readiness(State(s): State<HttpState>) -> impl IntoResponse {
    let status = s.shared.metrics.resync_state.get();
    if status != 3 {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: not in sync with a typha server\n".to_string(),
        );
    }
    if !s.shared.ready.load(Ordering::Relaxed) {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: dataplane not programmed yet\n".to_string(),
        );
    }
    (StatusCode::OK, "ready\n".to_string())
}

async fn status(State(s): State<HttpState>) -> impl IntoResponse {
    let m = &s.shared.metrics;
    axum::Json(serde_json::json!({
        "status": match m.resync_state.get() {
            1 => "wait-for-datastore",
            2 => "resync-in-progress",
            _ => "in-sync",
        },
        "ready": s.shared.ready.load(Ordering::Relaxed),
        "applies": m.applies.get(),
        "local_endpoints": m.local_endpoints.get(),
        "active_policies": m.active_policies.get(),
        "ipsets": m.ipsets.get(),
        "chains": m.chains.get(),
        "routes": m.routes.get(),
        "failures": m.failures.get(),
        "server_view": match s.shared.server_stale() {
            Some((age, reason)) => serde_json::json!({
                "stale": true,
                "age_secs": age.as_secs_f64(),
                "reason": reason,
                "held_updates": s.shared.held_updates.load(Ordering::Relaxed),
                "dataplane": "kept as it is until the server's view is current again",
            }),
            None => serde_json::json!({"stale": false}),
        },
    }))
}

async fn metrics_text(State(s): State<HttpState>) -> impl IntoResponse {
    typha_service::metrics::metrics_response(&s.registry)
}
