//! Discovery through a Kubernetes Service's EndpointSlices, against a real kube-apiserver over
//! etcd 3.6 (`common::kube`, built by `peers/build`), shared by the tests of this file (each
//! works in a namespace of its own). The EndpointSlices are written by the test through the
//! API (there is no controller-manager to write them from a Service's pods), so the API
//! server's validation is the real one. The client runs as an agent does: as a ServiceAccount
//! allowed to list EndpointSlices, its credentials from a kubeconfig (`$KUBECONFIG`, the same
//! path `kube::Client::try_default` takes in a cluster with the in-cluster files). Since the
//! environment is per process, the client side runs in a child process: this test binary
//! again, as `discovery_process`.
//!
//! FIXTURE, for one test: the API server refuses EndpointSlices whose addresses are in the
//! loopback range ("may not be in the loopback range"), and a test may connect only to the
//! loopback, so the end-to-end sync through discovery (a client finding a real server on
//! 127.0.0.1 and syncing) is served the one request discovery makes (a label-selected
//! EndpointSlice list) by a small HTTP server in this file. Everything on the client side
//! (kube, its HTTP stack, the JSON types) is real there too.

// In tests a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod common;

use std::process::Command;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use serde_json::{Value, json};
use typha_client::discovery::Discovery;
use typha_test_support::control_plane::ControlPlane;

/// Not a test: the tests start this test binary with `TYPHA_TEST_RUN_DISCOVERY` set to run the
/// client side in a process whose `$KUBECONFIG` is the agent's. The variable's lines: `discover`
/// then service, namespace, port name and node (prints `OK <addr> ...` or `ERR <error>`), or
/// `tail` then `typha-tail`'s arguments (runs it: the real program).
#[test]
fn discovery_process() {
    let Some(args) = std::env::var_os("TYPHA_TEST_RUN_DISCOVERY") else {
        return;
    };
    let args = args.into_string().unwrap();
    let mut lines = args.lines();
    match lines.next() {
        Some("discover") => {
            let [service, namespace, port_name, node] =
                <[&str; 4]>::try_from(lines.collect::<Vec<_>>()).unwrap();
            let discovery = Discovery::Kubernetes {
                service: service.into(),
                namespace: namespace.into(),
                port_name: port_name.into(),
                api_server: None,
            };
            let rt = tokio::runtime::Runtime::new().unwrap();
            match rt.block_on(discovery.discover(node)) {
                Ok(targets) => {
                    let addrs: Vec<String> = targets
                        .iter()
                        .map(|t| format!("{}={}", t.addr, t.server_name))
                        .collect();
                    println!("OK {}", addrs.join(" "));
                }
                Err(e) => println!("ERR {e}"),
            }
            std::process::exit(0);
        }
        Some("tail") => {
            let code = typha_client::tail::main_from(std::iter::once("typha-tail").chain(lines));
            std::process::exit(if code == std::process::ExitCode::SUCCESS {
                0
            } else {
                1
            });
        }
        other => panic!("unknown child role {other:?}"),
    }
}

/// The control plane every test here shares (started by the first to ask).
async fn control_plane() -> Option<&'static ControlPlane> {
    static SHARED: tokio::sync::OnceCell<Option<ControlPlane>> = tokio::sync::OnceCell::const_new();
    SHARED.get_or_init(common::kube::default).await.as_ref()
}

/// An agent's identity in `ns`: a ServiceAccount that may list EndpointSlices (Calico gives
/// calico-node this), and a kubeconfig with its minted token.
async fn agent_kubeconfig(cp: &ControlPlane, ns: &str) -> std::path::PathBuf {
    let admin = cp.admin().unwrap();
    common::kube::namespace(&admin, ns).await;
    let rules = [(
        "discovery.k8s.io".to_owned(),
        vec!["endpointslices".to_owned()],
    )];
    cp.grant(ns, "calico-node", &format!("{ns}-node"), &rules)
        .await
        .unwrap();
    let token = cp.service_account_token(ns, "calico-node").await.unwrap();
    cp.write_kubeconfig(&format!("{ns}-node"), &token).unwrap()
}

/// A ServiceAccount in `ns` that was granted nothing, and a kubeconfig with its token.
async fn unprivileged_kubeconfig(cp: &ControlPlane, ns: &str) -> std::path::PathBuf {
    let admin = cp.admin().unwrap();
    common::kube::apply(
        &admin,
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": "nobody", "namespace": ns}}),
    )
    .await;
    let token = cp.service_account_token(ns, "nobody").await.unwrap();
    cp.write_kubeconfig(&format!("{ns}-nobody"), &token)
        .unwrap()
}

/// Writes the Service's EndpointSlices in `ns`: one with ready, not-ready and unknown-readiness
/// endpoints, one node's endpoint first in no particular order; one whose port is not ours.
async fn slices(cp: &ControlPlane, ns: &str, port: u16, addresses: [&str; 4]) {
    let admin = cp.admin().unwrap();
    let slice = |name: &str, ports: Value, endpoints: Value| {
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
               "metadata": {"name": name, "namespace": ns,
                            "labels": {"kubernetes.io/service-name": "calico-typha"}},
               "addressType": "IPv4", "ports": ports, "endpoints": endpoints})
    };
    let [c, b, a, d] = addresses;
    common::kube::apply(
        &admin,
        slice(
            "calico-typha-x1",
            json!([{"name": "metrics", "port": 9093, "protocol": "TCP"},
                   {"name": "calico-typha", "port": port, "protocol": "TCP"}]),
            json!([
                {"addresses": [c], "conditions": {"ready": true}, "nodeName": "node-c"},
                {"addresses": [b], "conditions": {"ready": false}, "nodeName": "node-b"},
                {"addresses": [a], "conditions": {"ready": true}, "nodeName": "node-a"},
                {"addresses": [d], "nodeName": "node-d"}
            ]),
        ),
    )
    .await;
    common::kube::apply(
        &admin,
        slice(
            "calico-typha-x2",
            json!([{"name": "other", "port": 1, "protocol": "TCP"}]),
            json!([{"addresses": ["10.0.0.9"], "conditions": {"ready": true}}]),
        ),
    )
    .await;
}

/// Runs the client side in a child process with this kubeconfig; its stdout.
async fn child(kubeconfig: &std::path::Path, lines: &[&str]) -> String {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "discovery_process", "--nocapture", "--quiet"])
        .args(["--test-threads", "1"])
        .env("TYPHA_TEST_RUN_DISCOVERY", lines.join("\n"))
        .env("KUBECONFIG", kubeconfig)
        // Not in a cluster: the kubeconfig is the only configuration.
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("FELIX_TYPHAADDR");
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The child's `OK`/`ERR` line.
fn answer(stdout: &str) -> &str {
    stdout
        .lines()
        .find(|l| l.starts_with("OK") || l.starts_with("ERR"))
        .unwrap_or_else(|| panic!("no answer in {stdout:?}"))
}

#[tokio::test]
async fn ready_endpoints_with_the_named_port_same_node_first() {
    let Some(cp) = control_plane().await else {
        return;
    };
    let ns = "typha-order";
    let kubeconfig = agent_kubeconfig(cp, ns).await;
    slices(
        cp,
        ns,
        5473,
        ["10.0.0.3", "10.0.0.2", "10.0.0.1", "10.0.0.4"],
    )
    .await;
    let out = child(
        &kubeconfig,
        &["discover", "calico-typha", ns, "calico-typha", "node-a"],
    )
    .await;
    let line = answer(&out);
    let targets: Vec<&str> = line.strip_prefix("OK ").unwrap().split(' ').collect();
    let addrs: Vec<&str> = targets
        .iter()
        .map(|t| t.split('=').next().unwrap())
        .collect();
    assert_eq!(
        addrs.len(),
        3,
        "not-ready and port-less endpoints skipped: {addrs:?}"
    );
    assert_eq!(addrs[0], "10.0.0.1:5473", "the local node's endpoint first");
    assert!(addrs.contains(&"10.0.0.3:5473"));
    assert!(
        addrs.contains(&"10.0.0.4:5473"),
        "ready unknown counts as ready"
    );
    assert!(
        targets
            .iter()
            .all(|t| t.ends_with(&format!("=calico-typha.{ns}.svc")))
    );
}

#[tokio::test]
async fn errors_name_the_service() {
    let Some(cp) = control_plane().await else {
        return;
    };
    let ns = "typha-errors";
    let kubeconfig = agent_kubeconfig(cp, ns).await;
    slices(
        cp,
        ns,
        5473,
        ["10.0.0.3", "10.0.0.2", "10.0.0.1", "10.0.0.4"],
    )
    .await;
    let out = child(
        &kubeconfig,
        &["discover", "calico-typha", ns, "no-such-port", "n"],
    )
    .await;
    let line = answer(&out);
    assert!(line.starts_with("ERR"), "{line}");
    assert!(line.contains(&format!("{ns}/calico-typha")), "{line}");

    // An agent that may not list EndpointSlices is told so by the API server, and the error
    // names the Service.
    let nobody = unprivileged_kubeconfig(cp, ns).await;
    let out = child(
        &nobody,
        &["discover", "calico-typha", ns, "calico-typha", "n"],
    )
    .await;
    let line = answer(&out);
    assert!(line.starts_with("ERR"), "{line}");
    assert!(line.contains(&format!("{ns}/calico-typha")), "{line}");
    assert!(line.contains("forbidden"), "{line}");
}

/// The fixture (see the top of the file): serves `body` for EndpointSlice lists of
/// `kube-system/calico-typha`; records the request lines it saw.
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

/// Endpoint slices of `kube-system/calico-typha` in the fixture, every ready endpoint on
/// 127.0.0.1 at `port`.
fn loopback_slices(port: u16) -> String {
    json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSliceList",
        "metadata": {"resourceVersion": "7"},
        "items": [{
            "metadata": {"name": "calico-typha-x1", "namespace": "kube-system", "labels": {"kubernetes.io/service-name": "calico-typha"}},
            "addressType": "IPv4",
            "ports": [{"name": "metrics", "port": 9093, "protocol": "TCP"}, {"name": "calico-typha", "port": port, "protocol": "TCP"}],
            "endpoints": [
                {"addresses": ["127.0.0.1"], "conditions": {"ready": true}, "nodeName": "node-c"},
                {"addresses": ["127.0.0.2"], "conditions": {"ready": false}, "nodeName": "node-b"},
                {"addresses": ["127.0.0.1"], "conditions": {"ready": true}, "nodeName": "node-a"}
            ]
        }]
    })
    .to_string()
}

#[tokio::test]
async fn a_client_finds_and_syncs_with_a_server_through_the_service() {
    let store = typha_server::datastore::embedded::Embedded::new();
    store.bulk_load(
        typha_test_support::sample::Spec {
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
    let (api, seen) = fixture_api(loopback_slices(srv.addr.port())).await;
    let discovery = Discovery::Kubernetes {
        service: "calico-typha".into(),
        namespace: "kube-system".into(),
        port_name: "calico-typha".into(),
        api_server: Some(api),
    };
    let cfg = typha_client::ClientConfig::new("node-a", discovery);
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
    assert!(!seen.lock().unwrap().is_empty());
    let _ = tx.send(());
    let _ = task.await;
    srv.shutdown().await;
}

#[tokio::test]
async fn the_real_api_server_refuses_loopback_endpoints() {
    // Why the test above uses the fixture: say it, so the day this changes is noticed.
    let Some(cp) = control_plane().await else {
        return;
    };
    let admin = cp.admin().unwrap();
    common::kube::namespace(&admin, "typha-loopback").await;
    let refused = common::kube::try_create(
        &admin,
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
               "metadata": {"name": "x", "namespace": "typha-loopback",
                            "labels": {"kubernetes.io/service-name": "calico-typha"}},
               "addressType": "IPv4", "ports": [{"name": "calico-typha", "port": 5473}],
               "endpoints": [{"addresses": ["127.0.0.1"]}]}),
    )
    .await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(s)) if s.code == 422 && s.message.contains("loopback")),
        "{refused:?}"
    );
}
