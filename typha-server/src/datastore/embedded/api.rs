//! The embedded datastore's write API (`TYPHA_EMBEDDEDAPIADDR`, off by default): what
//! `calicoctl apply -f` / `delete -f` are to a real datastore, for the embedded one. Tools and
//! loadtest use it to change the state of a running `typha-server` from another process.
//!
//! - `POST /apply`: the body is manifests (YAML or JSON; several `---` documents or a `List`).
//!   Every resource is parsed and converted first; if any is invalid the answer is 400 naming
//!   the document and the reason, and nothing is written. Otherwise each is written in order.
//! - `POST /delete`: the same body; only `kind`, `metadata.name` and `metadata.namespace`
//!   are read. Resources that do not exist are skipped.
//! - `GET /revision`: the store's revision.
//!
//! Answers are JSON: `{"applied": n, "changed": c, "revision": r}`, `{"deleted": n, "revision": r}`, or
//! `{"error": "..."}`. Bodies over [`MAX_BODY`] get 413. There is no authentication: bind it to
//! the loopback (or a pod-local address).

use std::net::SocketAddr;

use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use serde_json::json;
use tokio::task::JoinHandle;

use super::{Embedded, claimed_id};
use crate::calico::convert::accept_write;
use crate::calico::v3::{Resource, ResourceId, YamlError, yaml_documents};

/// Largest request body.
pub const MAX_BODY: usize = 64 << 20;

/// The API's routes over `store`.
pub fn router(store: Embedded) -> Router {
    Router::new()
        .route("/apply", post(apply))
        .route("/delete", post(delete))
        .route("/revision", get(revision))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(store)
}

/// Binds `addr` and serves the API on it; the bound address and the serving task.
pub async fn serve(
    addr: SocketAddr,
    store: Embedded,
) -> std::io::Result<(SocketAddr, JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let app = router(store);
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::warn!("embedded datastore write API stopped: {e}");
        }
    });
    Ok((bound, task))
}

fn error(status: StatusCode, msg: String) -> Response {
    (status, axum::Json(json!({ "error": msg }))).into_response()
}

/// A request body that holds no documents.
#[derive(Debug, thiserror::Error)]
enum BadBody {
    #[error("body is not UTF-8: {0}")]
    Utf8(#[source] std::str::Utf8Error),
    #[error("body is not YAML or JSON: {0}")]
    Yaml(#[source] YamlError),
}

fn documents(body: &Bytes) -> Result<Vec<serde_json::Value>, BadBody> {
    let text = std::str::from_utf8(body).map_err(BadBody::Utf8)?;
    yaml_documents(text).map_err(BadBody::Yaml)
}

/// Describes document `i` for an error: its id if it names one.
fn which(i: usize, doc: &serde_json::Value) -> String {
    claimed_id(doc).map_or_else(|| format!("document {}", i + 1), |id| id.to_string())
}

async fn apply(State(store): State<Embedded>, body: Bytes) -> Response {
    let docs = match documents(&body) {
        Ok(d) => d,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
    };
    let mut resources = Vec::with_capacity(docs.len());
    for (i, doc) in docs.into_iter().enumerate() {
        let what = which(i, &doc);
        let r = Resource::from_json(doc)
            .map_err(|e| e.to_string())
            .and_then(|r| accept_write(r).map_err(|e| e.to_string()));
        match r {
            Ok(r) => resources.push(r),
            Err(e) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    format!("{what}: invalid, nothing applied: {e}"),
                );
            }
        }
    }
    let n = resources.len();
    let (revision, changed) = store.put_many(resources);
    axum::Json(json!({ "applied": n, "changed": changed, "revision": revision.0 })).into_response()
}

async fn delete(State(store): State<Embedded>, body: Bytes) -> Response {
    let docs = match documents(&body) {
        Ok(d) => d,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
    };
    let mut ids: Vec<ResourceId> = Vec::with_capacity(docs.len());
    for (i, doc) in docs.iter().enumerate() {
        match claimed_id(doc) {
            Some(id) => ids.push(id),
            None => {
                return error(
                    StatusCode::BAD_REQUEST,
                    format!(
                        "document {}: needs a known kind and metadata.name; nothing deleted",
                        i + 1
                    ),
                );
            }
        }
    }
    let (revision, deleted) = store.delete_many(ids);
    axum::Json(json!({ "deleted": deleted, "revision": revision.0 })).into_response()
}

async fn revision(State(store): State<Embedded>) -> Response {
    axum::Json(json!({ "revision": store.revision().0 })).into_response()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

    use super::*;
    use crate::calico::v3::Kind;

    async fn call(store: &Embedded, path: &str, body: &str) -> (StatusCode, serde_json::Value) {
        use tower_service::Service;
        let mut app = router(store.clone());
        let req = axum::http::Request::post(path)
            .body(axum::body::Body::from(body.to_owned()))
            .unwrap();
        let resp = app.call(req).await.unwrap();
        let status = resp.status();
        let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, serde_json::from_slice(&bytes).unwrap_or_default())
    }

    const TWO: &str = r#"
apiVersion: projectcalico.org/v3
kind: GlobalNetworkSet
metadata: {name: a}
spec: {nets: [198.51.100.0/24]}
---
apiVersion: projectcalico.org/v3
kind: NetworkSet
metadata: {name: b, namespace: prod}
spec: {nets: [203.0.113.0/24]}
"#;

    #[tokio::test]
    async fn applies_and_deletes_manifests() {
        let store = Embedded::new();
        let (s, v) = call(&store, "/apply", TWO).await;
        assert_eq!(s, StatusCode::OK, "{v}");
        assert_eq!(v["applied"], 2);
        assert_eq!(v["revision"], 2);
        assert_eq!(store.resources().len(), 2);
        // JSON works too, and an unchanged resource is not a new revision.
        let json = r#"{"apiVersion":"projectcalico.org/v3","kind":"GlobalNetworkSet","metadata":{"name":"a"},"spec":{"nets":["198.51.100.0/24"]}}"#;
        let (s, v) = call(&store, "/apply", json).await;
        assert_eq!((s, v["revision"].as_u64()), (StatusCode::OK, Some(2)));
        assert_eq!(v["changed"], 0);
        let (s, v) = call(
            &store,
            "/delete",
            "kind: NetworkSet\nmetadata: {name: b, namespace: prod}\n---\nkind: NetworkSet\nmetadata: {name: nope}\n",
        )
        .await;
        assert_eq!(s, StatusCode::OK, "{v}");
        assert_eq!(v["deleted"], 1);
        let ids: Vec<_> = store.resources().iter().map(|r| r.id()).collect();
        assert_eq!(ids, vec![ResourceId::global(Kind::GlobalNetworkSet, "a")]);
    }

    #[tokio::test]
    async fn an_invalid_resource_writes_nothing_and_is_named() {
        let store = Embedded::new();
        let bad = format!(
            "{TWO}---\napiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata: {{name: c}}\nspec: {{nets: [not-a-cidr]}}\n"
        );
        let (s, v) = call(&store, "/apply", &bad).await;
        assert_eq!(s, StatusCode::BAD_REQUEST);
        let e = v["error"].as_str().unwrap();
        assert!(
            e.contains("GlobalNetworkSet c") && e.contains("nothing applied"),
            "{e}"
        );
        assert!(store.resources().is_empty());
        let (s, v) = call(&store, "/apply", "{{{ not yaml").await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
        let (s, _) = call(&store, "/delete", "kind: Widget\nmetadata: {name: w}\n").await;
        assert_eq!(s, StatusCode::BAD_REQUEST);
    }

    #[tokio::test]
    async fn oversized_bodies_are_refused() {
        let store = Embedded::new();
        let big = "#".repeat(MAX_BODY + 1);
        let (s, _) = call(&store, "/apply", &big).await;
        assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE);
    }
}
