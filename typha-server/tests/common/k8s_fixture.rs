//! A fixture Kubernetes API server, for the one thing the real one (`common::kube`) cannot be
//! made to do: send a watch bookmark at the moment a test asks (kube-apiserver sends them on
//! its own schedule, about once a minute per watch). Everything else about the Kubernetes
//! backend is tested against a real kube-apiserver over etcd 3.6 (tests/kubernetes.rs,
//! tests/conformance.rs, tests/staleness.rs, tests/binary.rs).
//!
//! It is a fake, and only as much of one as the backend uses: discovery (`GET /apis`, and
//! `GET /apis/crd.projectcalico.org/v1`: Calico's classic group, with every kind), and `GET`
//! of a collection (`/apis/<group>/<version>/<plural>` or `/api/v1/<plural>`) returns a `*List` with
//! `metadata.resourceVersion`, and `?watch=1&resourceVersion=N` streams newline-separated JSON
//! watch events after revision N, as the real one does. One revision counter for every type,
//! as an etcd-backed API server has. The test writes objects, compacts (a watch from before
//! the compaction then gets an `ERROR` event carrying a 410 `Expired` Status, as the real API
//! server sends), sends bookmarks, and takes the server "down" (requests answer 503 and watches
//! in progress end).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::stream;
use serde_json::{Value, json};
use tokio::sync::watch;

/// One entry of the change log.
#[derive(Clone)]
struct Event {
    rev: u64,
    /// The collection path (`/apis/crd.projectcalico.org/v1/ippools`).
    path: String,
    kind: &'static str,
    object: Value,
}

/// The path of log entries for every watch (bookmarks).
const ANY: &str = "*";

#[derive(Default)]
struct Db {
    rev: u64,
    compacted: u64,
    down: bool,
    lists: usize,
    /// Current objects by collection path, namespace and name.
    objects: BTreeMap<String, BTreeMap<(String, String), Value>>,
    log: Vec<Event>,
    /// Paged lists in progress: the whole list at its first page, and its revision.
    snapshots: Vec<(u64, Vec<Value>)>,
}

/// The fixture API server. Dropping it stops it.
pub struct ApiServer {
    /// Where it listens.
    pub addr: SocketAddr,
    db: Arc<Mutex<Db>>,
    changed: watch::Sender<u64>,
    task: Mutex<tokio::task::JoinHandle<()>>,
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.task.lock().unwrap().abort();
    }
}

#[derive(Clone)]
struct Shared {
    db: Arc<Mutex<Db>>,
    changed: watch::Sender<u64>,
}

fn serve(listener: tokio::net::TcpListener, shared: Shared) -> tokio::task::JoinHandle<()> {
    let app = Router::new().fallback(handle).with_state(shared);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    })
}

/// The collection path of an object, from its apiVersion and plural.
pub fn collection(api_version: &str, plural: &str) -> String {
    if api_version.contains('/') {
        format!("/apis/{api_version}/{plural}")
    } else {
        format!("/api/{api_version}/{plural}")
    }
}

impl ApiServer {
    /// Starts on an ephemeral loopback port, at revision 1 (an empty cluster).
    pub async fn start() -> ApiServer {
        let db = Arc::new(Mutex::new(Db {
            rev: 1,
            ..Db::default()
        }));
        let changed = watch::channel(0).0;
        let shared = Shared {
            db: db.clone(),
            changed: changed.clone(),
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = serve(listener, shared);
        ApiServer {
            addr,
            db,
            changed,
            task: Mutex::new(task),
        }
    }

    /// A kube client for this server.
    pub fn client(&self) -> kube::Client {
        let url = format!("http://{}", self.addr).parse().unwrap();
        kube::Client::try_from(kube::Config::new(url)).unwrap()
    }

    fn notify(&self) {
        self.changed.send_modify(|n| *n += 1);
    }

    /// Creates or replaces `object` (which has apiVersion, kind, metadata) in collection
    /// `plural`; returns its new resourceVersion.
    pub fn put(&self, plural: &str, mut object: Value) -> u64 {
        let rev = {
            let mut db = self.db.lock().unwrap();
            db.rev += 1;
            let rev = db.rev;
            let path = collection(object["apiVersion"].as_str().unwrap(), plural);
            object["metadata"]["resourceVersion"] = rev.to_string().into();
            let key = key_of(&object);
            let old = db
                .objects
                .entry(path.clone())
                .or_default()
                .insert(key, object.clone());
            let kind = if old.is_some() { "MODIFIED" } else { "ADDED" };
            db.log.push(Event {
                rev,
                path,
                kind,
                object,
            });
            rev
        };
        self.notify();
        rev
    }

    /// Forgets the change log up to now: a watch from an earlier revision gets 410.
    pub fn compact(&self) {
        let mut db = self.db.lock().unwrap();
        db.compacted = db.rev;
        let c = db.compacted;
        db.log.retain(|e| e.rev > c);
    }

    /// Sends every watch a bookmark at the current revision.
    pub fn bookmark(&self) {
        {
            let mut db = self.db.lock().unwrap();
            let rev = db.rev;
            db.log.push(Event {
                rev,
                path: ANY.into(),
                kind: "BOOKMARK",
                object: json!({"metadata": {"resourceVersion": rev.to_string()}}),
            });
        }
        self.notify();
    }

    /// Takes the server down (503 to everything, watches end) or brings it back.
    pub fn set_down(&self, down: bool) {
        self.db.lock().unwrap().down = down;
        self.notify();
    }

    /// How many list requests have been answered.
    pub fn lists(&self) -> usize {
        self.db.lock().unwrap().lists
    }

    /// The current revision.
    pub fn revision(&self) -> u64 {
        self.db.lock().unwrap().rev
    }
}

/// `crd.projectcalico.org/v1` from `/apis/crd.projectcalico.org/v1/ippools`, `v1` from
/// `/api/v1/namespaces`.
fn api_version_of(path: &str) -> String {
    let rest = path
        .strip_prefix("/apis/")
        .or_else(|| path.strip_prefix("/api/"))
        .unwrap_or(path);
    rest.rsplit_once('/').map_or(rest, |(v, _)| v).to_string()
}

fn key_of(object: &Value) -> (String, String) {
    let m = &object["metadata"];
    (
        m["namespace"].as_str().unwrap_or_default().to_string(),
        m["name"].as_str().unwrap_or_default().to_string(),
    )
}

fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": reason, "code": code})
}

async fn handle(State(s): State<Shared>, uri: Uri) -> Response {
    let path = uri.path().to_string();
    let query: BTreeMap<String, String> = uri
        .query()
        .unwrap_or_default()
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let watching = matches!(query.get("watch").map(String::as_str), Some("1" | "true"));
    let mut db = s.db.lock().unwrap();
    if db.down {
        let body = status(503, "ServiceUnavailable", "the fixture is down").to_string();
        return (StatusCode::SERVICE_UNAVAILABLE, body).into_response();
    }
    // Discovery, as much as the backend asks before it lists: Calico's classic CRD group is
    // served, with every kind the backend reads.
    if path == "/apis" {
        let body = json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [
            {"name": "crd.projectcalico.org",
             "versions": [{"groupVersion": "crd.projectcalico.org/v1", "version": "v1"}],
             "preferredVersion": {"groupVersion": "crd.projectcalico.org/v1", "version": "v1"}}]});
        return ([("content-type", "application/json")], body.to_string()).into_response();
    }
    if path == "/apis/crd.projectcalico.org/v1" {
        let resources: Vec<Value> = typha_server::datastore::kubernetes::CRD_KINDS
            .iter()
            .map(|k| {
                json!({"name": k.plural(), "singularName": k.as_str().to_lowercase(),
                       "namespaced": k.is_namespaced(), "kind": k.as_str(),
                       "verbs": ["get", "list", "watch"]})
            })
            .collect();
        let body = json!({"kind": "APIResourceList", "apiVersion": "v1",
                          "groupVersion": "crd.projectcalico.org/v1", "resources": resources});
        return ([("content-type", "application/json")], body.to_string()).into_response();
    }
    if !watching {
        db.lists += 1;
        let limit: usize = query
            .get("limit")
            .and_then(|v| v.parse().ok())
            .unwrap_or(usize::MAX);
        // A continue token is `<snapshot>-<offset>`: later pages come from the first page's
        // snapshot, as the real API server serves them at the first page's revision, until
        // compaction expires the token.
        let (snapshot, offset) = match query.get("continue") {
            Some(token) => {
                let (id, offset) = token.split_once('-').unwrap();
                (
                    id.parse::<usize>().unwrap(),
                    offset.parse::<usize>().unwrap(),
                )
            }
            None => {
                let items: Vec<Value> = db
                    .objects
                    .get(&path)
                    .map(|m| m.values().cloned().collect())
                    .unwrap_or_default();
                let rev = db.rev;
                db.snapshots.push((rev, items));
                (db.snapshots.len() - 1, 0)
            }
        };
        let (rev, all) = db.snapshots[snapshot].clone();
        if rev < db.compacted {
            let body = status(410, "Expired", "the continue token has expired").to_string();
            return (StatusCode::GONE, body).into_response();
        }
        let page: Vec<Value> = all.iter().skip(offset).take(limit).cloned().collect();
        let next = offset + page.len();
        let mut metadata = json!({"resourceVersion": rev.to_string()});
        if next < all.len() {
            metadata["continue"] = format!("{snapshot}-{next}").into();
        }
        let body = json!({"kind": "List", "apiVersion": "v1", "metadata": metadata, "items": page});
        return ([("content-type", "application/json")], body.to_string()).into_response();
    }
    let from: u64 = query
        .get("resourceVersion")
        .and_then(|v| v.parse().ok())
        .unwrap_or(db.rev);
    drop(db);
    let state = (s, path, from, false);
    let events = stream::unfold(state, |(s, path, mut from, ended)| async move {
        if ended {
            return None;
        }
        let mut changed = s.changed.subscribe();
        loop {
            let (lines, done) = {
                let db = s.db.lock().unwrap();
                if db.down {
                    return None;
                }
                if from < db.compacted {
                    let message = format!("too old resource version: {from} ({})", db.compacted);
                    let ev = json!({"type": "ERROR", "object": status(410, "Expired", &message)});
                    (format!("{ev}\n"), true)
                } else {
                    let mut out = String::new();
                    for e in db
                        .log
                        .iter()
                        .filter(|e| e.rev > from && (e.path == path || e.path == ANY))
                    {
                        let mut object = e.object.clone();
                        if e.path == ANY {
                            // A bookmark is an object of the watched type with only a
                            // resourceVersion.
                            object["apiVersion"] = api_version_of(&path).into();
                            object["kind"] = "Bookmark".into();
                        }
                        out.push_str(&json!({"type": e.kind, "object": object}).to_string());
                        out.push('\n');
                    }
                    // Bookmarks sit at the current revision; skip past all of them once sent.
                    if let Some(last) = db
                        .log
                        .iter()
                        .filter(|e| e.path == path || e.path == ANY)
                        .map(|e| e.rev)
                        .max()
                    {
                        from = from.max(last);
                    }
                    (out, false)
                }
            };
            if !lines.is_empty() {
                let chunk: Result<Bytes, Infallible> = Ok(Bytes::from(lines));
                return Some((chunk, (s, path, from, done)));
            }
            if changed.changed().await.is_err() {
                return None;
            }
        }
    });
    (
        [("content-type", "application/json")],
        Body::from_stream(events),
    )
        .into_response()
}
