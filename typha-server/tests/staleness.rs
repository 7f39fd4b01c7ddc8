//! A datastore outage is announced, not silent: the server's view goes stale past its
//! threshold (on `/status`, `/readiness`, in metrics, and to clients that understand it), a
//! tier passes its upstream's staleness on, and recovery is one resume back to current with
//! nothing lost. Against a real etcd (killed and restarted), a real kube-apiserver (killed:
//! refused connections; its ClusterRoleBinding deleted: 403 Forbidden), and a datastore
//! switched off under a tier.

// In tests a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::etcd::EtcdServer;
use common::{Peer, cluster};
use futures_util::future::BoxFuture;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;
use typha_client::metrics::ClientMetrics;
use typha_client::{ClientConfig, Discovery, Staleness, SyncClient, SyncerCallbacks};
use typha_protocol::digest::StateDigest;
use typha_protocol::handshake::ClientOffer;
use typha_protocol::message::{Features, Message};
use typha_protocol::model::{EncodedValue, KeyPath, SyncStatus, Update};
use typha_server::calico::v3::Resource;
use typha_server::config::Config;
use typha_server::datastore::embedded::Embedded;
use typha_server::datastore::etcd::Etcd;
use typha_server::datastore::kubernetes::Kubernetes;
use typha_server::datastore::{Datastore, DatastoreError, Listing, WatchStream};
use typha_server::server::{RunningServer, start, start_with};
use typha_server::syncer::upstream::{self, UpstreamConfig};

const THRESHOLD: Duration = Duration::from_secs(2);

/// What a consumer heard.
#[derive(Debug, Default)]
struct Heard {
    status: Option<SyncStatus>,
    staleness: Vec<Staleness>,
    state: BTreeMap<KeyPath, EncodedValue>,
}

#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Heard>>);

impl SyncerCallbacks for Recorder {
    fn on_status_updated(&mut self, s: SyncStatus) {
        self.0.lock().unwrap().status = Some(s);
    }
    fn on_updates(&mut self, us: Vec<Update>) {
        let mut h = self.0.lock().unwrap();
        for u in us {
            match u.value {
                Some(v) => h.state.insert(u.key, v),
                None => h.state.remove(&u.key),
            };
        }
    }
    fn on_staleness(&mut self, s: &Staleness) {
        self.0.lock().unwrap().staleness.push(s.clone());
    }
}

impl Recorder {
    fn digest(&self) -> u64 {
        let h = self.0.lock().unwrap();
        let mut d = StateDigest::new();
        for (k, v) in &h.state {
            d.insert(k.as_str(), v.as_bytes());
        }
        d.combined()
    }
    /// What the server said last: `Some(true)` stale, `Some(false)` current.
    fn stale(&self) -> Option<bool> {
        self.0.lock().unwrap().staleness.last().map(|s| s.stale)
    }
    fn last_reason(&self) -> String {
        let h = self.0.lock().unwrap();
        h.staleness
            .last()
            .map(|s| s.reason.clone())
            .unwrap_or_default()
    }
}

/// A typha-client consumer of the server at `addr`.
struct Consumer {
    heard: Recorder,
    metrics: Arc<ClientMetrics>,
    _stop: oneshot::Sender<()>,
}

fn consumer(addr: SocketAddr) -> Consumer {
    let mut cfg = ClientConfig::new("node-a", Discovery::addresses(vec![addr.to_string()]));
    cfg.backoff_min = Duration::from_millis(20);
    cfg.backoff_max = Duration::from_millis(200);
    let metrics = ClientMetrics::unregistered();
    let client = SyncClient::new(cfg, metrics.clone()).unwrap();
    let heard = Recorder::default();
    let (stop, rx) = oneshot::channel::<()>();
    tokio::spawn(client.run(heard.clone(), async move {
        let _ = rx.await;
    }));
    Consumer {
        heard,
        metrics,
        _stop: stop,
    }
}

fn config() -> Config {
    let mut cfg = Config::for_tests();
    cfg.health = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
    cfg.stale_threshold = THRESHOLD;
    cfg
}

/// GET `path` on the server's health listener: (status, body).
async fn get(srv: &RunningServer, path: &str) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(srv.health_addr.unwrap())
        .await
        .unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut buf = String::new();
    s.read_to_string(&mut buf).await.unwrap();
    let status = buf.split(' ').nth(1).unwrap().parse().unwrap();
    let body = buf.split_once("\r\n\r\n").unwrap().1.to_owned();
    (status, body)
}

async fn datastore_status(srv: &RunningServer) -> Value {
    let (_, body) = get(srv, "/status").await;
    let v: Value = serde_json::from_str(&body).unwrap();
    v["datastore"].clone()
}

/// Waits until `/status` says the view is `stale` (or not).
async fn until_stale(srv: &RunningServer, stale: bool) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let d = datastore_status(srv).await;
        if d["stale"] == stale {
            return d;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never stale={stale}: {d}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Checks the server, and a consumer of it, while the view is stale (`connected`: whether the
/// server's own link still works, as a tier's does when only its upstream lost the datastore).
async fn check_stale(srv: &RunningServer, c: &Consumer, error_says: &str, connected: bool) {
    let d = until_stale(srv, true).await;
    assert_eq!(d["connected"], connected, "{d}");
    assert!(
        d["confirmed_secs_ago"].as_f64().unwrap() >= THRESHOLD.as_secs_f64(),
        "{d}"
    );
    let error = d["last_error"].as_str().unwrap_or_default();
    assert!(error.contains(error_says), "{d}");
    // The gauges say the same (the monitor updates them four times a second).
    common::eventually("the gauges to follow", || {
        common::metric(srv, "typha_upstream_stale") == 1.0
            && common::metric(srv, "typha_upstream_connected") == f64::from(u8::from(connected))
            && common::metric(srv, "typha_upstream_confirmed_age_seconds")
                >= THRESHOLD.as_secs_f64()
    })
    .await;
    // Ready still (off by default), but saying so.
    let (code, body) = get(srv, "/readiness").await;
    assert_eq!(code, 200, "{body}");
    assert!(
        body.contains("STALE") && body.contains(error_says),
        "{body}"
    );
    // The server's own clients hear it, with the reason; they stay InSync.
    common::eventually("the consumer to hear it", || c.heard.stale() == Some(true)).await;
    assert!(
        c.heard.last_reason().contains(error_says),
        "{}",
        c.heard.last_reason()
    );
    assert!(c.metrics.server_stale());
    assert_eq!(c.heard.0.lock().unwrap().status, Some(SyncStatus::InSync));
}

async fn check_current(srv: &RunningServer, c: &Consumer) {
    let d = until_stale(srv, false).await;
    assert_eq!(d["connected"], true, "{d}");
    common::eventually("the gauges to follow", || {
        common::metric(srv, "typha_upstream_stale") == 0.0
            && common::metric(srv, "typha_upstream_connected") == 1.0
    })
    .await;
    assert!(d["last_error"].is_null(), "{d}");
    let (code, body) = get(srv, "/readiness").await;
    assert_eq!(code, 200);
    assert!(!body.contains("STALE"), "{body}");
    common::eventually("the consumer to hear it is current", || {
        c.heard.stale() == Some(false)
    })
    .await;
    assert!(!c.metrics.server_stale());
}

fn network_set(name: &str, net: &str) -> Resource {
    Resource::from_json(json!({
        "apiVersion": "projectcalico.org/v3", "kind": "GlobalNetworkSet",
        "metadata": {"name": name}, "spec": {"nets": [net]},
    }))
    .unwrap()
}

#[tokio::test]
async fn etcd_down_is_announced_and_its_return_loses_nothing() {
    let mut etcd = EtcdServer::start().await;
    let mut c = etcd.client().await;
    common::etcd::put(&mut c, &network_set("before", "10.1.0.0/24")).await;
    let backend = Etcd::connect(&[etcd.endpoint()], None).await.unwrap();
    let srv = start(config(), Arc::new(backend)).await.unwrap();
    let consumer = consumer(srv.addr);
    common::eventually("the consumer in sync", || {
        consumer.heard.0.lock().unwrap().status == Some(SyncStatus::InSync)
    })
    .await;
    // Told at once that the view is current.
    common::eventually("the consumer told", || {
        consumer.heard.stale() == Some(false)
    })
    .await;
    // A quiet, healthy etcd does not go stale: probes confirm it.
    tokio::time::sleep(THRESHOLD * 2).await;
    assert_eq!(datastore_status(&srv).await["stale"], false);

    etcd.kill();
    check_stale(&srv, &consumer, "etcd", false).await;

    // Nothing can be written while it is down; write right after it is back.
    etcd.restart().await;
    let mut c = etcd.client().await;
    common::etcd::put(&mut c, &network_set("after", "10.2.0.0/24")).await;
    check_current(&srv, &consumer).await;
    let contents = common::etcd::resources(&mut c).await;
    let (want, n) = common::digest_of(&contents);
    common::eventually("the consumer to have etcd's content", || {
        consumer.heard.digest() == want
    })
    .await;
    assert_eq!(consumer.heard.0.lock().unwrap().state.len(), n);
    srv.shutdown().await;
}

#[tokio::test]
async fn kubernetes_refused_or_forbidden_is_announced() {
    let Some(mut cp) = common::kube::default().await else {
        return;
    };
    let admin = cp.admin().unwrap();
    common::kube::put_crd(&admin, &network_set("a", "10.1.0.0/24")).await;
    let (client, _) = common::kube::typha_identity(&cp).await;
    let backend = Kubernetes::new(client).await;
    let srv = start(config(), Arc::new(backend)).await.unwrap();
    let consumer = consumer(srv.addr);
    common::eventually("the consumer in sync and told it is current", || {
        consumer.heard.0.lock().unwrap().status == Some(SyncStatus::InSync)
            && consumer.heard.stale() == Some(false)
    })
    .await;

    // kube-apiserver is killed: connections refused.
    cp.kill_apiserver();
    check_stale(&srv, &consumer, "kubernetes API", false).await;
    cp.start_apiserver().await.unwrap();
    check_current(&srv, &consumer).await;

    // An RBAC change takes our permission away: 403 on every new request (the watches already
    // open go on; the probe is refused).
    let admin = cp.admin().unwrap();
    common::kube::revoke(&admin, common::kube::TYPHA_ACCOUNT).await;
    check_stale(&srv, &consumer, "403 Forbidden", false).await;
    common::kube::typha_identity(&cp).await;
    check_current(&srv, &consumer).await;
    srv.shutdown().await;
}

/// The embedded store, with a switch that makes it unreachable.
#[derive(Clone)]
struct Switched {
    store: Embedded,
    off: Arc<AtomicBool>,
}

impl Switched {
    fn check(&self) -> Result<(), DatastoreError> {
        if self.off.load(Ordering::Relaxed) {
            Err(DatastoreError::unavailable(
                "test datastore",
                "switched off",
            ))
        } else {
            Ok(())
        }
    }
}

impl Datastore for Switched {
    fn name(&self) -> &'static str {
        "switched"
    }
    fn list(&self) -> BoxFuture<'_, Result<Listing, DatastoreError>> {
        Box::pin(async {
            self.check()?;
            self.store.list().await
        })
    }
    fn watch(
        &self,
        from: typha_protocol::model::Revision,
    ) -> BoxFuture<'_, Result<WatchStream, DatastoreError>> {
        Box::pin(async move {
            self.check()?;
            self.store.watch(from).await
        })
    }
    fn probe(&self) -> BoxFuture<'_, Result<(), DatastoreError>> {
        Box::pin(async { self.check() })
    }
}

#[tokio::test]
async fn a_tier_passes_its_upstreams_staleness_on_and_old_clients_never_see_it() {
    let store = Embedded::new();
    store.bulk_load(cluster(2, 3));
    let ds = Switched {
        store: store.clone(),
        off: Arc::new(AtomicBool::new(false)),
    };
    let mut top_cfg = config();
    // This replica chose to fail readiness while stale.
    top_cfg.readiness_fails_when_stale = true;
    let top = start(top_cfg, Arc::new(ds.clone())).await.unwrap();
    let tier = start_with(
        config(),
        upstream::feed(UpstreamConfig {
            addrs: vec![top.addr.to_string()],
            tls: None,
            hostname: "tier".into(),
        }),
    )
    .await
    .unwrap();
    let consumer = consumer(tier.addr);
    // A client that predates the feature.
    let mut old = Peer::connect(tier.addr).await;
    let mut offer = ClientOffer::new("old-node");
    offer.features = Features::ACK.with(Features::BUCKET_RESYNC);
    old.hello(offer).await.unwrap();
    old.sync_to(&tier).await;
    common::eventually("the consumer in sync and told it is current", || {
        consumer.heard.0.lock().unwrap().status == Some(SyncStatus::InSync)
            && consumer.heard.stale() == Some(false)
    })
    .await;

    ds.off.store(true, Ordering::Relaxed);
    until_stale(&top, true).await;
    let (code, body) = get(&top, "/readiness").await;
    assert_eq!(code, 503, "TYPHA_FAILREADINESSWHENSTALE: {body}");
    // The tier is stale because its upstream is, and says why.
    check_stale(&tier, &consumer, "upstream: ", true).await;
    assert!(consumer.heard.last_reason().contains("switched off"));

    ds.off.store(false, Ordering::Relaxed);
    until_stale(&top, false).await;
    check_current(&tier, &consumer).await;
    // The old client got the same data and never a message it does not know.
    old.sync_to(&tier).await;
    loop {
        match old.recv_within(Duration::from_millis(300)).await {
            Ok(Message::Staleness(_)) => panic!("an old client was sent a Staleness"),
            Ok(m) => old.apply(m).await.unwrap(),
            Err(_) => break,
        }
    }
    assert!(old.goodbye.is_none());
    tier.shutdown().await;
    top.shutdown().await;
}
