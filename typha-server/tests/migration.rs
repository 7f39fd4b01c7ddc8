//! Moving a cluster from Calico's Typha to typha-server and back, on a real kube-apiserver, as
//! `deploy/README.md` ("Moving from Calico's Typha") tells an operator to, for both of
//! Calico's installs:
//!
//! - a **manifest install** (`calico-typha.yaml`: `kube-system`, plaintext). Its Typha
//!   objects (the Service, Deployment and PodDisruptionBudget `calico-typha`) are read at test
//!   time from Calico's own manifest, in the Calico module `peers/build` downloads into the Go
//!   module cache (`$PEERS_DIR/calico-manifests`; a release-v3.28 commit, the only Calico
//!   module the Go proxy serves: its Typha objects are those of v3.32 for what matters here,
//!   the Service's selector `k8s-app: calico-typha` and port name `calico-typha`, the budget's
//!   selector). Nothing of Calico's is copied into this repository.
//! - a **Tigera operator install** (`calico-system`, mutual TLS with the operator's
//!   certificates). The operator cannot run here, so its objects are written by this test as
//!   the operator v1.42 (Calico v3.32's) renders them: ServiceAccount, ClusterRole,
//!   ClusterRoleBinding, PodDisruptionBudget, Service and Deployment all named `calico-typha`,
//!   Secrets `typha-certs` and `node-certs`, ConfigMap `tigera-ca-bundle`.
//!
//! Each: `helm install` of the chart with the value set for that install must not collide with
//! any of Calico's objects; the release's pods join Calico's Service (its selector selects
//! them, their port has the name calico-node's clients look for) and Calico's budget covers
//! them; the traffic moves (the manifest: Calico's Typha scaled to 0; the operator: the
//! Service told to select our pods only, with the operator's ignore annotation) and every node's
//! four calico-node connections (felix, bgp, tunnel-ip-allocation, node-status) are served, none
//! refused for capacity; then the roll back, and `helm uninstall` leaves every Calico object,
//! the Service above all, in place.
//!
//! No kubelet or controller-manager runs here, so no Pod is ever created: the server runs as a
//! process outside the cluster with the chart's environment and the chart's ServiceAccount, the
//! EndpointSlices are written as the EndpointSlice controller would write them, and calico-node
//! is our Rust Calico client, one per syncer type per node.

// In tests a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};
use typha_client::calico::{CalicoHello, Until};
use typha_test_support::control_plane::{ControlPlane, peers_dir};

use common::helm::{chart, documents, env_of, free_port, helm, helm_admin, readiness, selects};
use common::kube::{apply, resource};

const BIN: &str = env!("CARGO_BIN_EXE_typha-server");
/// Nodes of the simulated cluster: each opens calico-node's four connections, 480 in all,
/// more than one replica's lower limit (`TYPHA_MAXCONNECTIONSLOWERLIMIT`, 400) counted
/// across syncer types: what Calico's Typha allows per syncer type.
const NODES: usize = 120;
const SYNCERS: [&str; 4] = ["felix", "bgp", "tunnel-ip-allocation", "node-status"];

/// The control plane and helm, or `None` when the peers are missing and skipping is allowed.
async fn setup() -> Option<(std::path::PathBuf, ControlPlane, kube::Client)> {
    let helm = helm()?;
    let cp = common::kube::default().await?;
    let admin = cp.admin().unwrap();
    Some((helm, cp, admin))
}

/// The cluster's nodes, as the Kubernetes datastore counts them.
async fn nodes(admin: &kube::Client) {
    futures_util::stream::iter(0..NODES)
        .map(|i| {
            let admin = admin.clone();
            async move {
                apply(
                    &admin,
                    json!({"apiVersion": "v1", "kind": "Node",
                           "metadata": {"name": format!("node-{i:03}")}}),
                )
                .await
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
}

/// An object, or `None` if it does not exist.
async fn get(
    admin: &kube::Client,
    api_version: &str,
    kind: &str,
    ns: &str,
    name: &str,
) -> Option<DynamicObject> {
    let res = resource(api_version, kind, &common::kube::plural_of(kind));
    let api: Api<DynamicObject> = if ns.is_empty() {
        Api::all_with(admin.clone(), &res)
    } else {
        Api::namespaced_with(admin.clone(), ns, &res)
    };
    api.get_opt(name).await.unwrap()
}

fn json_of(o: &DynamicObject) -> Value {
    serde_json::to_value(o).unwrap()
}

/// The Calico Typha objects every migration must leave in place.
const CALICO_TYPHA: [(&str, &str); 3] = [
    ("v1", "Service"),
    ("apps/v1", "Deployment"),
    ("policy/v1", "PodDisruptionBudget"),
];

async fn assert_calico_objects(admin: &kube::Client, ns: &str, when: &str) {
    for (v, kind) in CALICO_TYPHA {
        assert!(
            get(admin, v, kind, ns, "calico-typha").await.is_some(),
            "{when}: Calico's {kind} calico-typha is gone"
        );
    }
}

/// The EndpointSlice of the Service `calico-typha`, as the EndpointSlice controller writes it
/// for the ready pods at `ready` (the port named as Calico's clients look for it).
async fn endpoints(admin: &kube::Client, ns: &str, ready: &[&str]) {
    let endpoints: Vec<Value> = ready
        .iter()
        .map(|a| json!({"addresses": [a], "conditions": {"ready": true}}))
        .collect();
    apply(
        admin,
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
               "metadata": {"name": "calico-typha-x7k2p", "namespace": ns,
                            "labels": {"kubernetes.io/service-name": "calico-typha"}},
               "addressType": "IPv4",
               "ports": [{"name": "calico-typha", "port": 5473, "protocol": "TCP"}],
               "endpoints": endpoints}),
    )
    .await;
}

/// Scales a Deployment (what `kubectl scale` does).
async fn scale(admin: &kube::Client, ns: &str, name: &str, replicas: u32) {
    let api: Api<DynamicObject> = Api::namespaced_with(
        admin.clone(),
        ns,
        &resource("apps/v1", "Deployment", "deployments"),
    );
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": replicas}})),
    )
    .await
    .unwrap();
}

/// What the release made, by `helm get manifest`.
fn release_objects(helm: &Path, cp: &ControlPlane, ns: &str) -> Vec<Value> {
    documents(&helm_admin(
        helm,
        cp,
        &["get", "manifest", "typha-server", "--namespace", ns],
    ))
}

/// The release's pods join Calico's Service, and Calico's budget covers them: nothing of the
/// release carries a name of Calico's, nor is a Service or a budget of its own.
async fn assert_joins_calicos_service(admin: &kube::Client, objs: &[Value], ns: &str) {
    let dep = objs
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .expect("the release's Deployment");
    let pod = &dep["spec"]["template"];
    let labels = &pod["metadata"]["labels"];
    let svc = json_of(
        &get(admin, "v1", "Service", ns, "calico-typha")
            .await
            .unwrap(),
    );
    assert!(
        selects(&svc["spec"]["selector"], labels),
        "Calico's Service {} does not select the release's pods {labels}",
        svc["spec"]["selector"]
    );
    let ports = pod["spec"]["containers"][0]["ports"].to_string();
    assert!(ports.contains(r#""name":"calico-typha""#), "{ports}");
    let pdb = json_of(
        &get(
            admin,
            "policy/v1",
            "PodDisruptionBudget",
            ns,
            "calico-typha",
        )
        .await
        .unwrap(),
    );
    assert!(
        selects(&pdb["spec"]["selector"]["matchLabels"], labels),
        "Calico's budget does not cover the release's pods"
    );
    for o in objs {
        assert_ne!(o["metadata"]["name"], "calico-typha", "{}", o["kind"]);
        assert!(
            !matches!(o["kind"].as_str(), Some("Service" | "PodDisruptionBudget"))
                || o["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.ends_with("-metrics")),
            "the release made a {} of its own",
            o["kind"]
        );
    }
}

/// typha-server as a process outside the cluster: the chart's environment, the chart's
/// ServiceAccount, loopback ports, and the files its volume would hold (`files`: the
/// directory standing in for `/etc/typha/tls`). The child and what it logs.
async fn serve(
    cp: &ControlPlane,
    env: &BTreeMap<String, String>,
    ns: &str,
    files: Option<&Path>,
) -> (Child, Arc<Mutex<String>>, u16, u16) {
    let token = cp.service_account_token(ns, "typha-server").await.unwrap();
    let kubeconfig = cp
        .write_kubeconfig(&format!("typha-server-{ns}"), &token)
        .unwrap();
    let (port, health) = (free_port(), free_port());
    let mut cmd = Command::new(BIN);
    cmd.env_clear();
    for (k, v) in env {
        let v = match (v.strip_prefix("/etc/typha/tls/"), files) {
            (Some(f), Some(dir)) => dir.join(f).display().to_string(),
            _ => v.clone(),
        };
        cmd.env(k, v);
    }
    cmd.env("TYPHA_K8SNAMESPACE", ns)
        .env("KUBECONFIG", &kubeconfig)
        .env("TYPHA_SERVERHOST", "127.0.0.1")
        .env("TYPHA_SERVERPORT", port.to_string())
        .env("TYPHA_HEALTHHOST", "127.0.0.1")
        .env("TYPHA_HEALTHPORT", health.to_string())
        .env("TYPHA_PROMETHEUSMETRICSENABLED", "false")
        .env("TYPHA_SHUTDOWNTIMEOUTSECS", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let log = Arc::new(Mutex::new(String::new()));
    for out in [
        Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
        Box::new(child.stderr.take().unwrap()),
    ] {
        let log = log.clone();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for l in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                let mut g = log.lock().unwrap_or_else(|e| e.into_inner());
                g.push_str(&l);
                g.push('\n');
            }
        });
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    while !readiness(health).await.is_some_and(|l| l.contains(" 200 ")) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not ready with the chart's settings: {}",
            log.lock().unwrap_or_else(|e| e.into_inner())
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    (child, log, port, health)
}

/// How a simulated calico-node reaches the server.
#[derive(Clone)]
enum Link {
    Plain,
    Tls(Arc<rustls::ClientConfig>),
}

/// Every node's four calico-node connections at once, all held open: each until the server
/// says it is in sync. The connections that did not get there, with why, and the tasks that
/// hold the others (dropping them closes the connections).
async fn calico_nodes(port: u16, link: Link) -> (Vec<String>, tokio::task::JoinSet<()>) {
    use typha_client::calico::{Event, run_with};
    use typha_protocol::calico::messages::SyncStatus;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut held = tokio::task::JoinSet::new();
    let mut waits = Vec::new();
    for i in 0..NODES {
        for syncer in SYNCERS {
            let node = format!("node-{i:03}");
            let link = link.clone();
            let (tx, rx) = tokio::sync::oneshot::channel::<Result<(), String>>();
            waits.push(rx);
            held.spawn(async move {
                let mut tx = Some(tx);
                let mut said = |r: Result<(), String>| {
                    if let Some(tx) = tx.take() {
                        let _ = tx.send(r);
                    }
                };
                let hello = CalicoHello::calico_node(node.as_str(), syncer);
                let observe = |e: Event| {
                    if let Event::SyncStatus(SyncStatus::InSync) = e {
                        said(Ok(()));
                    }
                };
                let ended: Result<(), String> = async {
                    let tcp = tokio::net::TcpStream::connect(addr)
                        .await
                        .map_err(|e| e.to_string())?;
                    let r = match link {
                        Link::Plain => {
                            run_with(tcp, &hello, Until::Closed, Duration::from_secs(60), observe)
                                .await
                        }
                        Link::Tls(cfg) => {
                            let name =
                                rustls_pki_types::ServerName::try_from("typha-server").unwrap();
                            let tls = tokio_rustls::TlsConnector::from(cfg)
                                .connect(name, tcp)
                                .await
                                .map_err(|e| format!("TLS: {e}"))?;
                            run_with(tls, &hello, Until::Closed, Duration::from_secs(60), observe)
                                .await
                        }
                    };
                    r.map_err(|e| e.to_string())
                        .and_then(|()| Err("closed by the server".to_owned()))
                }
                .await;
                if let Err(e) = ended {
                    said(Err(format!("{node} {syncer}: {e}")));
                }
            });
        }
    }
    let mut failed = Vec::new();
    for w in waits {
        match tokio::time::timeout(Duration::from_secs(180), w).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => failed.push(e),
            Ok(Err(_)) => failed.push("the session's task ended without a word".to_owned()),
            Err(_) => failed.push("not in sync within 180 s".to_owned()),
        }
    }
    (failed, held)
}

/// The server's `/status` (health port).
async fn status(health: u16) -> Value {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", health))
        .await
        .unwrap();
    s.write_all(b"GET /status HTTP/1.0\r\n\r\n").await.unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.unwrap();
    let text = String::from_utf8(buf).unwrap();
    let body = text.split_once("\r\n\r\n").unwrap().1;
    serde_json::from_str(body).unwrap()
}

/// The Typha objects of Calico's manifest install, from Calico's own `calico-typha.yaml`.
fn calico_manifest_typha_objects() -> Vec<Value> {
    let file = peers_dir().join("calico-manifests/calico-typha.yaml");
    let text = std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("{}: {e} (run peers/build)", file.display()));
    let objs: Vec<Value> = documents(&text)
        .into_iter()
        .filter(|o| {
            o["metadata"]["name"] == "calico-typha"
                && matches!(
                    o["kind"].as_str(),
                    Some("Service" | "Deployment" | "PodDisruptionBudget")
                )
        })
        .collect();
    assert_eq!(objs.len(), 3, "calico-typha.yaml's Typha objects");
    objs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manifest_install_moves_to_typha_server_and_back() {
    let Some((helm, cp, admin)) = setup().await else {
        return;
    };
    const NS: &str = "kube-system";
    // Calico's Typha as its manifest install leaves it.
    for o in calico_manifest_typha_objects() {
        apply(&admin, o).await;
    }
    nodes(&admin).await;

    // 1. Install beside it: nothing of Calico's is touched or taken over.
    let values = chart().join("ci/replace-calico-manifest-values.yaml");
    helm_admin(
        &helm,
        &cp,
        &[
            "install",
            "typha-server",
            chart().to_str().unwrap(),
            "--namespace",
            NS,
            "-f",
            values.to_str().unwrap(),
            "--set",
            &format!("cluster.nodes={NODES}"),
        ],
    );
    let objs = release_objects(&helm, &cp, NS);
    assert_joins_calicos_service(&admin, &objs, NS).await;
    assert_calico_objects(&admin, NS, "after the install").await;

    // 2. Both serve: the Service lists Calico's replica and ours.
    endpoints(&admin, NS, &["192.0.2.1", "192.0.2.2"]).await;
    let dep = objs.iter().find(|o| o["kind"] == "Deployment").unwrap();
    let env = env_of(&dep["spec"]["template"]["spec"]["containers"][0]);
    assert!(
        !env.contains_key("TYPHA_SERVERCERTFILE"),
        "plaintext, as the manifest install"
    );
    let (mut child, log, port, health) = serve(&cp, &env, NS, None).await;

    // 3. The move: Calico's Typha scaled to 0, its replica leaves the Service, and every node's
    // calico-node connects to ours.
    scale(&admin, NS, "calico-typha", 0).await;
    endpoints(&admin, NS, &["192.0.2.2"]).await;
    let (failed, held) = calico_nodes(port, Link::Plain).await;
    assert!(
        failed.is_empty(),
        "{} of {} connections not served: {:?}\n{}",
        failed.len(),
        NODES * 4,
        &failed[..failed.len().min(5)],
        log.lock().unwrap_or_else(|e| e.into_inner())
    );
    assert_eq!(status(health).await["connections"], NODES * 4);
    drop(held);

    // 4. The roll back: Calico's Typha back, ours uninstalled; every Calico object stays.
    scale(&admin, NS, "calico-typha", 1).await;
    endpoints(&admin, NS, &["192.0.2.1", "192.0.2.2"]).await;
    let _ = Command::new("kill").arg(child.id().to_string()).status();
    let _ = child.wait();
    helm_admin(
        &helm,
        &cp,
        &["uninstall", "typha-server", "--namespace", NS],
    );
    assert_calico_objects(&admin, NS, "after the uninstall").await;
    assert!(
        get(&admin, "apps/v1", "Deployment", NS, "typha-server")
            .await
            .is_none()
    );
    let svc = json_of(
        &get(&admin, "v1", "Service", NS, "calico-typha")
            .await
            .unwrap(),
    );
    assert_eq!(svc["spec"]["selector"], json!({"k8s-app": "calico-typha"}));
}

/// The Tigera operator's Typha objects and TLS material in `calico-system`, as the operator
/// v1.42 renders them (written here: the operator cannot run). The CA, and the clients' and
/// server's material, from `ca`.
async fn operator_install(admin: &kube::Client, ca: &typha_server::pki::Ca) {
    const NS: &str = "calico-system";
    common::kube::namespace(admin, NS).await;
    let labels = json!({"k8s-app": "calico-typha", "app.kubernetes.io/name": "calico-typha"});
    let server = ca.server("typha-server", &["typha-server"]).unwrap();
    let node = ca.client("typha-client", None).unwrap();
    for o in [
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": "calico-typha", "namespace": NS}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": {"name": "calico-typha"},
               "rules": [{"apiGroups": ["crd.projectcalico.org"], "resources": ["*"],
                          "verbs": ["get", "list", "watch"]}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": "calico-typha"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                           "name": "calico-typha"},
               "subjects": [{"kind": "ServiceAccount", "name": "calico-typha",
                             "namespace": NS}]}),
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
               "metadata": {"name": "calico-typha", "namespace": NS},
               "spec": {"maxUnavailable": 1,
                        "selector": {"matchLabels": {"k8s-app": "calico-typha"}}}}),
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "calico-typha", "namespace": NS,
                            "labels": {"k8s-app": "calico-typha"}},
               "spec": {"selector": {"k8s-app": "calico-typha"},
                        "ports": [{"name": "calico-typha", "port": 5473, "protocol": "TCP",
                                   "targetPort": "calico-typha"}]}}),
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "calico-typha", "namespace": NS, "labels": labels},
               "spec": {"replicas": 3,
                        "selector": {"matchLabels": {"k8s-app": "calico-typha"}},
                        "template": {"metadata": {"labels": labels},
                                     "spec": {"serviceAccountName": "calico-typha",
                                              "hostNetwork": true,
                                              "containers": [{"name": "calico-typha",
                                                  "image": "quay.io/calico/typha:v3.32.0",
                                                  "ports": [{"name": "calico-typha",
                                                             "containerPort": 5473,
                                                             "protocol": "TCP"}]}]}}}}),
        // The Secrets carry no type (Opaque), each a tls.crt and a tls.key.
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "typha-certs", "namespace": NS},
               "stringData": {"tls.crt": server.cert_pem, "tls.key": server.key_pem}}),
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "node-certs", "namespace": NS},
               "stringData": {"tls.crt": node.cert_pem, "tls.key": node.key_pem}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "tigera-ca-bundle", "namespace": NS},
               "data": {"tigera-ca-bundle.crt": ca.cert_pem, "ca-bundle.crt": ca.cert_pem}}),
    ] {
        apply(admin, o).await;
    }
}

/// What a projected volume of `typha-certs` and `tigera-ca-bundle` holds, written to `dir`
/// from the cluster's objects (as the kubelet would).
async fn project_operator_material(admin: &kube::Client, dir: &Path) {
    let secret = json_of(
        &get(admin, "v1", "Secret", "calico-system", "typha-certs")
            .await
            .unwrap(),
    );
    use base64::Engine as _;
    for k in ["tls.crt", "tls.key"] {
        let b = base64::engine::general_purpose::STANDARD
            .decode(secret["data"][k].as_str().unwrap())
            .unwrap();
        std::fs::write(dir.join(k), b).unwrap();
    }
    let cm = json_of(
        &get(
            admin,
            "v1",
            "ConfigMap",
            "calico-system",
            "tigera-ca-bundle",
        )
        .await
        .unwrap(),
    );
    std::fs::write(
        dir.join("ca.crt"),
        cm["data"]["tigera-ca-bundle.crt"].as_str().unwrap(),
    )
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_install_moves_to_typha_server_and_back() {
    let Some((helm, cp, admin)) = setup().await else {
        return;
    };
    const NS: &str = "calico-system";
    let ca = typha_server::pki::Ca::new("tigera-ca-signer").unwrap();
    operator_install(&admin, &ca).await;
    nodes(&admin).await;

    // 1. Install beside it, with the operator's TLS material.
    let values = chart().join("ci/replace-calico-operator-values.yaml");
    helm_admin(
        &helm,
        &cp,
        &[
            "install",
            "typha-server",
            chart().to_str().unwrap(),
            "--namespace",
            NS,
            "-f",
            values.to_str().unwrap(),
            "--set",
            &format!("cluster.nodes={NODES}"),
        ],
    );
    let objs = release_objects(&helm, &cp, NS);
    assert_joins_calicos_service(&admin, &objs, NS).await;
    assert_calico_objects(&admin, NS, "after the install").await;
    for (v, kind, ns) in [
        ("v1", "ServiceAccount", NS),
        ("rbac.authorization.k8s.io/v1", "ClusterRole", ""),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", ""),
    ] {
        let o = json_of(&get(&admin, v, kind, ns, "calico-typha").await.unwrap());
        assert!(
            o["metadata"]["labels"]["app.kubernetes.io/managed-by"] != "Helm",
            "the operator's {kind} taken over: {o}"
        );
    }

    // 2. Both serve; ours with the operator's certificate, trusting its CA bundle.
    endpoints(&admin, NS, &["192.0.2.1", "192.0.2.2"]).await;
    let dep = objs.iter().find(|o| o["kind"] == "Deployment").unwrap();
    let env = env_of(&dep["spec"]["template"]["spec"]["containers"][0]);
    assert_eq!(env["TYPHA_CLIENTCN"], "typha-client");
    let files = tempfile::tempdir().unwrap();
    project_operator_material(&admin, files.path()).await;
    let (mut child, log, port, health) = serve(&cp, &env, NS, Some(files.path())).await;

    // 3. The move. The operator puts its Service back as it rendered it, unless the Service
    // carries its ignore annotation: with it, the Service selects our pods only, and Calico's
    // Typha replicas leave its endpoints.
    let svcs: Api<DynamicObject> =
        Api::namespaced_with(admin.clone(), NS, &resource("v1", "Service", "services"));
    svcs.patch(
        "calico-typha",
        &PatchParams::default(),
        &Patch::Merge(json!({
            "metadata": {"annotations": {"unsupported.operator.tigera.io/ignore": "true"}},
            "spec": {"selector": {"k8s-app": "calico-typha",
                                  "app.kubernetes.io/instance": "typha-server"}}})),
    )
    .await
    .unwrap();
    assert_joins_calicos_service(&admin, &objs, NS).await;
    endpoints(&admin, NS, &["192.0.2.2"]).await;
    // calico-node's material: node-certs (CN typha-client), the CA bundle, and the server's
    // CN checked (typha-server).
    let node = json_of(&get(&admin, "v1", "Secret", NS, "node-certs").await.unwrap());
    let pem = |k: &str| {
        use base64::Engine as _;
        String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(node["data"][k].as_str().unwrap())
                .unwrap(),
        )
        .unwrap()
    };
    let cert = typha_server::pki::Issued {
        cert_pem: pem("tls.crt"),
        key_pem: pem("tls.key"),
    };
    let tls = common::tls_client(&ca.cert_pem, Some(&cert));
    let (failed, held) = calico_nodes(port, Link::Tls(tls)).await;
    assert!(
        failed.is_empty(),
        "{} of {} connections not served: {:?}\n{}",
        failed.len(),
        NODES * 4,
        &failed[..failed.len().min(5)],
        log.lock().unwrap_or_else(|e| e.into_inner())
    );
    assert_eq!(status(health).await["connections"], NODES * 4);
    drop(held);

    // 4. The roll back: the annotation removed, the operator's selector back (what the operator
    // does at once), ours uninstalled; every Calico object stays.
    svcs.patch(
        "calico-typha",
        &PatchParams::default(),
        &Patch::<()>::Json(
            serde_json::from_value(json!([
                {"op": "remove",
                 "path": "/metadata/annotations/unsupported.operator.tigera.io~1ignore"},
                {"op": "replace", "path": "/spec/selector",
                 "value": {"k8s-app": "calico-typha"}}]))
            .unwrap(),
        ),
    )
    .await
    .unwrap();
    endpoints(&admin, NS, &["192.0.2.1", "192.0.2.2"]).await;
    let _ = Command::new("kill").arg(child.id().to_string()).status();
    let _ = child.wait();
    helm_admin(
        &helm,
        &cp,
        &["uninstall", "typha-server", "--namespace", NS],
    );
    assert_calico_objects(&admin, NS, "after the uninstall").await;
    for (v, kind, ns) in [
        ("v1", "ServiceAccount", NS),
        ("rbac.authorization.k8s.io/v1", "ClusterRole", ""),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", ""),
        ("v1", "Secret", NS),
    ] {
        let name = if kind == "Secret" {
            "typha-certs"
        } else {
            "calico-typha"
        };
        assert!(
            get(&admin, v, kind, ns, name).await.is_some(),
            "the operator's {kind} {name} is gone"
        );
    }
}
