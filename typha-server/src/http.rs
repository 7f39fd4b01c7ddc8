//! HTTP: `/liveness`, `/readiness` and `/metrics` (axum; the Prometheus text format 0.0.4).
//!
//! Liveness means the sync listener's accept loop and the cache writer are both making
//! progress: each beats a [`Heartbeat`] at least once a second, idle or not, and liveness fails
//! when either has not beaten for [`HEARTBEAT_MAX_AGE`] (Typha's health could pass while
//! `accept()` was broken). Readiness adds that the cache is in sync with the datastore, and
//! fails from the start of a shutdown drain. `/status` (on the health listener) is the cache's
//! position as JSON, for operators and tools: sync status, breadcrumb sequence, KV count, the
//! state digest (the one clients compute and `typha-tail` prints) and connection counts per
//! phase; `/status?nodes` adds every connection (node name, address, connected since, phase,
//! how it resumed, position and lag: [`crate::conn::info`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus::Registry;
use typha_protocol::model::SyncStatus;

use crate::cache::Cache;
use crate::conn::registry::ConnRegistry;
use crate::liveness::{HEARTBEAT_MAX_AGE, Heartbeat};
use crate::metrics::Metrics;
use crate::syncer::freshness::Freshness;

/// What the handlers read.
#[derive(Debug, Clone)]
pub struct HttpState {
    /// The cache.
    pub cache: Arc<Cache>,
    /// The accept loop's heartbeat.
    pub accept: Arc<Heartbeat>,
    /// The cache writer's heartbeat.
    pub writer: Arc<Heartbeat>,
    /// The metrics registry.
    pub registry: Arc<Registry>,
    /// The metrics (for `/status`).
    pub metrics: Arc<Metrics>,
    /// Every open connection (`/status`, with `?nodes` what each is doing).
    pub conns: Arc<ConnRegistry>,
    /// Set when a shutdown drain starts: readiness fails from then on (the Service stops
    /// sending new agents here) while liveness and `/metrics` keep answering until the
    /// process exits (a failing liveness probe would restart the container mid-drain).
    pub draining: Arc<AtomicBool>,
    /// Whether the datastore view is current.
    pub freshness: Arc<Freshness>,
    /// Whether `/readiness` fails while the view is stale (`TYPHA_FAILREADINESSWHENSTALE`).
    pub readiness_fails_when_stale: bool,
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
    /// The cache writer has not run for too long (stuck, or ended).
    #[error("cache writer last ran {0:?} ago")]
    CacheWriter(Duration),
}

fn live(s: &HttpState) -> Result<(), NotLive> {
    let age = s.accept.age();
    if age > HEARTBEAT_MAX_AGE {
        return Err(NotLive::AcceptLoop(age));
    }
    let age = s.writer.age();
    if age > HEARTBEAT_MAX_AGE {
        return Err(NotLive::CacheWriter(age));
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
    if s.draining.load(Ordering::Acquire) {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "not ready: shutting down, {} connections left to move\n",
                s.conns.closable()
            ),
        );
    }
    let latest = s.cache.latest();
    if latest.status != SyncStatus::InSync {
        // Why it is not in sync yet, when the datastore said (no Calico CRDs, a 403, ...).
        let why = s
            .freshness
            .view()
            .last_error
            .map(|e| format!("; last datastore error: {e}"))
            .unwrap_or_default();
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: cache is {}{why}\n", latest.status),
        );
    }
    let view = s.freshness.view();
    if view.stale {
        let stale = format!(
            "datastore view is STALE: last confirmed {:.1} s ago (threshold {:.0} s); last error: {}",
            view.confirmed_age.unwrap_or_default().as_secs_f64(),
            s.freshness.threshold().as_secs_f64(),
            view.last_error.as_deref().unwrap_or("none"),
        );
        if s.readiness_fails_when_stale {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("not ready: {stale}\n"),
            );
        }
        return (
            StatusCode::OK,
            format!(
                "ready: in sync at breadcrumb {}, {} KVs; {stale}\n",
                latest.seq, latest.kvs
            ),
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

/// Whether the query asks for the per-node detail: `nodes` (with any value but `false`/`0`).
fn wants_nodes(query: Option<&str>) -> bool {
    query.into_iter().flat_map(|q| q.split('&')).any(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        k == "nodes" && !matches!(v, "false" | "0")
    })
}

async fn status(State(s): State<HttpState>, RawQuery(query): RawQuery) -> impl IntoResponse {
    let latest = s.cache.latest();
    let phases = s.conns.phases();
    let mut body = serde_json::json!({
        "status": latest.status.to_string(),
        "epoch": latest.epoch.to_string(),
        "seq": latest.seq.0,
        "kvs": latest.kvs,
        "digest": format!("{:016x}", latest.digest),
        // What the connection limit counts (from accept): what the other replicas balance by.
        "connections": s.conns.slots.held(),
        "streaming": phases.streaming,
        "handshaking": phases.handshaking,
        "waiting": phases.waiting,
        "syncing": phases.syncing,
        "draining": s.draining.load(Ordering::Acquire),
        "datastore": datastore_json(&s.freshness),
    });
    // Per node only on request: with thousands of nodes this is hundreds of kilobytes, and
    // the other replicas read the short form every poll.
    if wants_nodes(query.as_deref())
        && let Some(o) = body.as_object_mut()
    {
        o.insert("nodes".into(), s.conns.nodes_json(&s.cache).into());
    }
    axum::Json(body)
}

/// The datastore view's freshness, for `/status`.
fn datastore_json(f: &Freshness) -> serde_json::Value {
    let v = f.view();
    serde_json::json!({
        "connected": v.connected,
        "stale": v.stale,
        "confirmed_secs_ago": v.confirmed_age.map(|a| a.as_secs_f64()),
        "stale_threshold_secs": f.threshold().as_secs_f64(),
        "last_error": v.last_error,
    })
}

async fn metrics_text(State(s): State<HttpState>) -> impl IntoResponse {
    typha_service::metrics::metrics_response(&s.registry)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::CacheConfig;
    use crate::cache::writer::CacheWriter;
    use typha_protocol::message::Epoch;

    fn state() -> HttpState {
        let metrics = Metrics::unregistered();
        let (_w, cache) = CacheWriter::new(CacheConfig::default(), Epoch(1), metrics.clone());
        HttpState {
            cache,
            accept: Heartbeat::new(),
            writer: Heartbeat::new(),
            registry: Arc::new(Registry::default()),
            metrics,
            conns: ConnRegistry::new(crate::conn::limit::Slots::new(
                crate::governor::share::Limits::flat(10),
                Metrics::unregistered(),
            )),
            draining: Arc::new(AtomicBool::new(false)),
            freshness: Freshness::new(Duration::from_secs(10)),
            readiness_fails_when_stale: false,
        }
    }

    #[test]
    fn per_node_detail_only_when_asked() {
        assert!(wants_nodes(Some("nodes")));
        assert!(wants_nodes(Some("x=1&nodes=true")));
        assert!(!wants_nodes(Some("nodes=false")));
        assert!(!wants_nodes(Some("nodesx")));
        assert!(!wants_nodes(None));
    }

    #[tokio::test(start_paused = true)]
    async fn liveness_needs_both_the_accept_loop_and_the_cache_writer_to_beat() {
        let s = state();
        s.accept.beat();
        s.writer.beat();
        assert!(live(&s).is_ok());
        tokio::time::advance(HEARTBEAT_MAX_AGE + Duration::from_secs(1)).await;
        // The accept loop goes on; the cache writer is stuck.
        s.accept.beat();
        let e = live(&s).unwrap_err();
        assert!(matches!(e, NotLive::CacheWriter(_)), "{e}");
        s.writer.beat();
        assert!(live(&s).is_ok());
        tokio::time::advance(HEARTBEAT_MAX_AGE + Duration::from_secs(1)).await;
        s.writer.beat();
        assert!(matches!(live(&s), Err(NotLive::AcceptLoop(_))));
    }

    #[tokio::test]
    async fn not_in_sync_readiness_says_the_datastores_last_error() {
        let s = state();
        s.accept.beat();
        s.writer.beat();
        let body = |s: HttpState| async move {
            let r = readiness(State(s)).await.into_response();
            let code = r.status();
            let b = axum::body::to_bytes(r.into_body(), 1 << 16).await.unwrap();
            (code, String::from_utf8(b.to_vec()).unwrap())
        };
        let (code, text) = body(s.clone()).await;
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
        assert!(!text.contains("last datastore error"), "{text}");
        s.freshness
            .failed(&"datastore not usable: no Calico CRDs; install them");
        let (code, text) = body(s).await;
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            text.contains("last datastore error: datastore not usable: no Calico CRDs"),
            "{text}"
        );
    }
}
