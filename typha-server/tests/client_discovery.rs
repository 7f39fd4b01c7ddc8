//! Discovery through a Kubernetes Service's EndpointSlices, via kube's real client.
//!
//! FIXTURE: there is no Kubernetes API server binary on these machines, so the test serves the
//! one request discovery makes (a label-selected EndpointSlice list) from a small HTTP server
//! in this file. Everything on the client side (kube, its HTTP stack, the JSON types) is real.

// In tests a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use typha_client::discovery::{Discovery, DiscoveryError};

/// Serves `body` for EndpointSlice lists; records the request lines it saw.
async fn fixture_api(body: String) -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            let body = body.clone();
            let seen = seen2.clone();
            tokio::spawn(async move {
                let mut req = Vec::new();
                let mut buf = [0u8; 4096];
                while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => req.extend_from_slice(&buf[..n]),
                    }
                }
                let line = String::from_utf8_lossy(&req)
                    .lines()
                    .next()
                    .unwrap_or_default()
                    .to_owned();
                seen.lock().unwrap().push(line.clone());
                let ok = line.starts_with(
                    "GET /apis/discovery.k8s.io/v1/namespaces/kube-system/endpointslices?",
                ) && line
                    .contains("labelSelector=kubernetes.io%2Fservice-name%3Dcalico-typha");
                let (status, body) = if ok {
                    ("200 OK", body)
                } else {
                    ("404 Not Found", r#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}"#.to_owned())
                };
                let resp = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(resp.as_bytes()).await;
            });
        }
    });
    (url, seen)
}

fn slices(port: u16) -> String {
    serde_json::json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSliceList",
        "metadata": {"resourceVersion": "7"},
        "items": [{
            "metadata": {"name": "calico-typha-x1", "namespace": "kube-system", "labels": {"kubernetes.io/service-name": "calico-typha"}},
            "addressType": "IPv4",
            "ports": [{"name": "metrics", "port": 9093, "protocol": "TCP"}, {"name": "calico-typha", "port": port, "protocol": "TCP"}],
            "endpoints": [
                {"addresses": ["127.0.0.3"], "conditions": {"ready": true}, "nodeName": "node-c"},
                {"addresses": ["127.0.0.2"], "conditions": {"ready": false}, "nodeName": "node-b"},
                {"addresses": ["127.0.0.1"], "conditions": {"ready": true}, "nodeName": "node-a"},
                {"addresses": ["127.0.0.4"], "nodeName": "node-d"}
            ]
        }, {
            "metadata": {"name": "calico-typha-x2", "namespace": "kube-system", "labels": {"kubernetes.io/service-name": "calico-typha"}},
            "addressType": "IPv4",
            "ports": [{"name": "other", "port": 1, "protocol": "TCP"}],
            "endpoints": [{"addresses": ["127.0.0.9"], "conditions": {"ready": true}}]
        }]
    })
    .to_string()
}

fn k8s(api: &str) -> Discovery {
    Discovery::Kubernetes {
        service: "calico-typha".into(),
        namespace: "kube-system".into(),
        port_name: "calico-typha".into(),
        api_server: Some(api.to_owned()),
    }
}

#[tokio::test]
async fn ready_endpoints_with_the_named_port_same_node_first() {
    let (api, seen) = fixture_api(slices(5473)).await;
    let targets = k8s(&api).discover("node-a").await.unwrap();
    let addrs: Vec<SocketAddr> = targets.iter().map(|t| t.addr).collect();
    assert_eq!(
        addrs.len(),
        3,
        "not-ready and port-less endpoints skipped: {addrs:?}"
    );
    assert_eq!(
        addrs[0],
        "127.0.0.1:5473".parse().unwrap(),
        "the local node's endpoint first"
    );
    assert!(addrs.contains(&"127.0.0.3:5473".parse().unwrap()));
    assert!(
        addrs.contains(&"127.0.0.4:5473".parse().unwrap()),
        "ready unknown counts as ready"
    );
    assert!(
        targets
            .iter()
            .all(|t| t.server_name == "calico-typha.kube-system.svc")
    );
    assert_eq!(seen.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn errors_name_the_service() {
    let (api, _) = fixture_api(slices(5473)).await;
    let wrong = Discovery::Kubernetes {
        service: "calico-typha".into(),
        namespace: "kube-system".into(),
        port_name: "no-such-port".into(),
        api_server: Some(api),
    };
    let e = wrong.discover("n").await.unwrap_err();
    assert!(matches!(e, DiscoveryError::NoEndpoints { .. }), "{e}");
    assert!(e.to_string().contains("kube-system/calico-typha"), "{e}");
    let e = k8s("http://127.0.0.1:1").discover("n").await.unwrap_err();
    assert!(matches!(e, DiscoveryError::Kubernetes { .. }), "{e}");
}

#[tokio::test]
async fn a_client_finds_and_syncs_with_a_server_through_the_service() {
    let store = typha_server::datastore::embedded::Embedded::new();
    store.bulk_load(
        typha_server::sample::Spec {
            nodes: 2,
            pods_per_node: 2,
            ..Default::default()
        }
        .resources(),
    );
    let srv = typha_server::server::start(
        typha_server::config::Config::for_tests(),
        Arc::new(store.clone()),
    )
    .await
    .unwrap();
    let body = slices(srv.addr.port())
        .replace("127.0.0.3", "127.0.0.1")
        .replace("127.0.0.4", "127.0.0.1");
    let (api, _) = fixture_api(body).await;
    let cfg = typha_client::ClientConfig::new("node-a", k8s(&api));
    let client =
        typha_client::SyncClient::new(cfg, typha_client::metrics::ClientMetrics::unregistered())
            .unwrap();
    struct Count(Arc<Mutex<(usize, bool)>>);
    impl typha_client::SyncerCallbacks for Count {
        fn on_status_updated(&mut self, s: typha_protocol::model::SyncStatus) {
            self.0.lock().unwrap().1 = s == typha_protocol::model::SyncStatus::InSync;
        }
        fn on_updates(&mut self, u: Vec<typha_protocol::model::Update>) {
            self.0.lock().unwrap().0 += u.len();
        }
    }
    let state = Arc::new(Mutex::new((0, false)));
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(client.run(Count(state.clone()), async move {
        let _ = rx.await;
    }));
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    while !state.lock().unwrap().1 {
        assert!(tokio::time::Instant::now() < deadline, "never in sync");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(state.lock().unwrap().0, srv.cache.latest().kvs);
    let _ = tx.send(());
    let _ = task.await;
    srv.shutdown().await;
}
