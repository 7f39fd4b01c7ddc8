//! The agent while its server's datastore is gone: a real etcd under a real server, the agent's
//! loop fed by the sync client as `typha-agent` runs it. When etcd dies the server's view goes
//! stale, the agent says so on `/status` and keeps its dataplane exactly as it is; when etcd is
//! back, a change written right away is programmed.

// In tests a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

// The server's real-etcd helper (Debian's etcd-server, killed and restarted on the same data).
#[path = "../../typha-server/tests/common/etcd.rs"]
#[allow(dead_code, unreachable_pub)]
mod etcd;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd::EtcdServer;
use prometheus::Registry;
use serde_json::{Value, json};
use typha_agent::dataplane::{ApplyStats, Dataplane, DataplaneError, Desired, Dirty};
use typha_agent::metrics::AgentMetrics;
use typha_agent::run::{AgentConfig, Feeder, Shared, run};
use typha_client::metrics::ClientMetrics;
use typha_client::{ClientConfig, Discovery, SyncClient};
use typha_server::calico::v3::Resource;
use typha_server::config::Config;
use typha_server::datastore::etcd::Etcd;

/// A dataplane that keeps every state it was asked to apply.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<Desired>>>);

impl Dataplane for Log {
    async fn apply(&mut self, d: &Desired, _: &Dirty) -> Result<ApplyStats, DataplaneError> {
        self.0.lock().unwrap().push(d.clone());
        Ok(ApplyStats::default())
    }
    fn resync(&mut self) {}
    async fn event(&mut self) {
        std::future::pending::<()>().await
    }
}

impl Log {
    fn routed(&self, ip: &str) -> bool {
        let net = format!("{ip}/32").parse().unwrap();
        self.0
            .lock()
            .unwrap()
            .last()
            .is_some_and(|d| d.routes.contains_key(&net))
    }
    fn applies(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}

/// A pod on `node-a`.
fn pod(name: &str, ip: &str) -> Resource {
    Resource::from_json(json!({
        "apiVersion": "projectcalico.org/v3", "kind": "WorkloadEndpoint",
        "metadata": {"name": format!("node--a-k8s-{name}-eth0"), "namespace": "default"},
        "spec": {"node": "node-a", "orchestrator": "k8s", "pod": name, "endpoint": "eth0",
                 "interfaceName": format!("cali{name}"), "ipNetworks": [format!("{ip}/32")],
                 "profiles": ["kns.default"]},
    }))
    .unwrap()
}

async fn eventually(what: &str, f: impl Fn() -> bool) {
    for _ in 0..600 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}");
}

/// The agent's `/status`, from its HTTP router on `addr`.
async fn status(addr: SocketAddr) -> Value {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut buf = String::new();
    s.read_to_string(&mut buf).await.unwrap();
    serde_json::from_str(buf.split_once("\r\n\r\n").unwrap().1).unwrap()
}

#[tokio::test]
async fn the_agent_keeps_its_dataplane_while_the_servers_view_is_stale() {
    let mut etcd = EtcdServer::start().await;
    let mut c = etcd.client().await;
    etcd::put(&mut c, &pod("a", "10.0.0.1")).await;
    let mut cfg = Config::for_tests();
    cfg.stale_threshold = Duration::from_secs(2);
    let backend = Etcd::connect(&[etcd.endpoint()], None).await.unwrap();
    let srv = typha_server::server::start(cfg, Arc::new(backend))
        .await
        .unwrap();

    // The agent as typha-agent runs it: sync client → feeder → loop → dataplane; HTTP beside.
    let registry = Registry::new();
    let client_metrics = ClientMetrics::new(&registry);
    let shared = Arc::new(Shared::new(AgentMetrics::new(&registry)));
    let http = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let http_addr = http.local_addr().unwrap();
    let router = typha_agent::http::router(shared.clone(), Arc::new(registry));
    tokio::spawn(async move { axum::serve(http, router).await });
    let (feeder, rx) = Feeder::new();
    let log = Log::default();
    {
        let (mut dp, shared) = (log.clone(), shared.clone());
        tokio::spawn(async move {
            run(
                AgentConfig::new("node-a"),
                rx,
                &mut dp,
                &shared,
                std::future::pending(),
            )
            .await;
        });
    }
    let mut ccfg = ClientConfig::new("node-a", Discovery::addresses(vec![srv.addr.to_string()]));
    ccfg.backoff_max = Duration::from_millis(200);
    let client = SyncClient::new(ccfg, client_metrics).unwrap();
    tokio::spawn(client.run(feeder, std::future::pending::<()>()));
    eventually("the first pod programmed", || log.routed("10.0.0.1")).await;
    assert_eq!(status(http_addr).await["server_view"]["stale"], false);

    etcd.kill();
    let applies_before = log.applies();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let st = loop {
        let st = status(http_addr).await;
        if st["server_view"]["stale"] == true {
            break st;
        }
        assert!(tokio::time::Instant::now() < deadline, "never stale: {st}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let view = &st["server_view"];
    assert!(view["age_secs"].as_f64().unwrap() >= 2.0, "{st}");
    assert!(view["reason"].as_str().unwrap().contains("etcd"), "{st}");
    assert_eq!(
        st["status"], "in-sync",
        "still in sync, with what it has: {st}"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        log.applies(),
        applies_before,
        "nothing reprogrammed while stale"
    );
    assert!(log.routed("10.0.0.1"), "nothing deleted while stale");

    etcd.restart().await;
    let mut c = etcd.client().await;
    etcd::put(&mut c, &pod("b", "10.0.0.2")).await;
    eventually("the second pod programmed", || log.routed("10.0.0.2")).await;
    assert!(log.routed("10.0.0.1"));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while status(http_addr).await["server_view"]["stale"] != false {
        assert!(
            tokio::time::Instant::now() < deadline,
            "never current again"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    srv.shutdown().await;
}
