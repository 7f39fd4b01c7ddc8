//! A real Kubernetes API server for the `direct --datastore kubernetes` scenario: etcd 3.6 and
//! kube-apiserver from `peers/build` (`typha_test_support::control_plane`, watch cache on, as
//! clusters run it), seeded with the generated cluster as a Calico cluster on Kubernetes holds
//! it: namespaces (with their ServiceAccounts), Nodes, Pods (their addresses in Calico CNI's
//! `cni.projectcalico.org/podIPs` annotation) and Calico's CRDs; churned by relabelling pods,
//! as a deployment controller would. A direct node lists and watches, as Felix does without
//! Typha, every resource the server's Kubernetes backend reads, over one HTTP/2 connection
//! (as client-go multiplexes), with a ServiceAccount token.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use bytes::Bytes;
use futures_util::StreamExt;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use serde_json::{Value, json};
use typha_server::calico::v3::{Kind, Resource};
use typha_server::datastore::kubernetes::Kubernetes;
use typha_test_support::control_plane::{ControlPlane, Options, crd_object};

use crate::churn_plan::Gate;
use crate::server::{Churn, SENT_LABEL, now_ns};

/// Concurrent writes while seeding.
const SEED_CONCURRENCY: usize = 32;

/// A control plane holding the generated cluster, with identities for typha-server and for
/// the nodes.
pub(crate) struct KubeCluster {
    cp: ControlPlane,
    /// typha-server's kubeconfig (ServiceAccount `kube-system/calico-typha`).
    pub(crate) typha_kubeconfig: PathBuf,
    /// The nodes' token (ServiceAccount `kube-system/calico-node`), granted the same reads.
    pub(crate) node_token: String,
    /// typha-server's token.
    typha_token: String,
}

impl KubeCluster {
    /// Starts etcd and kube-apiserver with their files under `dir`, applies Calico's CRDs, and
    /// grants both identities get, list and watch on what the backend reads.
    ///
    /// With `every_address`, the API server serves on every address and each server replica
    /// can reach it at a loopback address of its own
    /// ([`typha_kubeconfig_at`](Self::typha_kubeconfig_at)).
    pub(crate) async fn start(dir: &Path, every_address: bool) -> anyhow::Result<Self> {
        let cp = ControlPlane::start(Options {
            dir: Some(dir.join("control-plane")),
            // Room for 1,000 nodes' pods and the churn's history.
            etcd_quota_bytes: Some(8 << 30),
            every_address,
            ..Options::default()
        })
        .await
        .context("starting etcd and kube-apiserver (peers/build makes them)")?;
        let mut rules: Vec<(String, Vec<String>)> = Vec::new();
        for (group, plural) in Kubernetes::resources() {
            match rules.iter_mut().find(|(g, _)| *g == group) {
                Some((_, rs)) => rs.push(plural),
                None => rules.push((group, vec![plural])),
            }
        }
        cp.grant("kube-system", "calico-node", "calico-node", &rules)
            .await?;
        // typha-server also finds its fellow replicas, for connection balancing.
        rules.push(("discovery.k8s.io".into(), vec!["endpointslices".into()]));
        cp.grant("kube-system", "calico-typha", "calico-typha", &rules)
            .await?;
        let typha_token = cp
            .service_account_token("kube-system", "calico-typha")
            .await?;
        let node_token = cp
            .service_account_token("kube-system", "calico-node")
            .await?;
        let typha_kubeconfig = cp.write_kubeconfig("calico-typha", &typha_token)?;
        Ok(Self {
            cp,
            typha_kubeconfig,
            node_token,
            typha_token,
        })
    }

    /// typha-server's kubeconfig, reaching the API server at the loopback address `ip`;
    /// written under the control plane's directory as `<name>.kubeconfig`.
    pub(crate) fn typha_kubeconfig_at(&self, name: &str, ip: &str) -> anyhow::Result<PathBuf> {
        let path = self.cp.dir().join(format!("{name}.kubeconfig"));
        std::fs::write(&path, self.cp.kubeconfig_at(ip, &self.typha_token))
            .with_context(|| format!("writing {}", path.display()))?;
        Ok(path)
    }

    /// The API server's port.
    pub(crate) fn port(&self) -> u16 {
        self.cp.port()
    }

    /// Kills the API server (SIGKILL) and starts it again on its port; returns when it is
    /// ready.
    pub(crate) async fn kill_and_restart_apiserver(&mut self) -> anyhow::Result<()> {
        self.cp.kill_apiserver();
        self.cp
            .start_apiserver()
            .await
            .context("restarting kube-apiserver")
    }

    /// Compacts the history of the etcd under the API server to its current revision; that
    /// revision.
    pub(crate) async fn compact(&self) -> anyhow::Result<i64> {
        self.cp.compact_etcd().await.context("compacting etcd")
    }

    /// kube-apiserver's process id.
    pub(crate) fn apiserver_pid(&self) -> u32 {
        self.cp.apiserver_pid().unwrap_or(0)
    }

    /// etcd's process id.
    pub(crate) fn etcd_pid(&self) -> u32 {
        self.cp.etcd_pid().unwrap_or(0)
    }

    /// The API server's URL.
    pub(crate) fn url(&self) -> String {
        self.cp.url()
    }

    /// The CA of the API server's certificate.
    pub(crate) fn ca_file(&self) -> PathBuf {
        self.cp.ca_file()
    }

    /// A kubeconfig with the cluster admin's credentials, written under the control plane's
    /// directory.
    pub(crate) fn admin_kubeconfig(&self) -> anyhow::Result<std::path::PathBuf> {
        Ok(self.cp.write_admin_kubeconfig()?)
    }

    /// A client with the cluster admin's credentials.
    pub(crate) fn admin(&self) -> anyhow::Result<kube::Client> {
        Ok(self.cp.admin()?)
    }

    /// Writes the EndpointSlice of Service `kube-system/calico-typha` as the EndpointSlice
    /// controller keeps it: one endpoint per replica pod that exists (its address and
    /// whether it is ready or terminating), all on `port`, named `calico-typha`. There is no
    /// controller-manager here, so whoever starts and stops the replicas keeps it.
    pub(crate) async fn publish_typha(
        &self,
        replicas: &[(std::net::Ipv4Addr, Readiness)],
        port: u16,
    ) -> anyhow::Result<()> {
        let endpoints: Vec<Value> = replicas
            .iter()
            .enumerate()
            .map(|(k, (ip, r))| {
                let (ready, serving, terminating) = match r {
                    Readiness::Ready => (true, true, false),
                    Readiness::NotReady => (false, false, false),
                    Readiness::Terminating => (false, true, true),
                };
                json!({"addresses": [ip.to_string()],
                       "conditions": {"ready": ready, "serving": serving,
                                      "terminating": terminating},
                       "targetRef": {"kind": "Pod", "namespace": "kube-system",
                                     "name": format!("calico-typha-{k}")}})
            })
            .collect();
        let slice = json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "calico-typha-chaos", "namespace": "kube-system",
                         "labels": {"kubernetes.io/service-name": "calico-typha"}},
            "addressType": "IPv4",
            "ports": [{"name": "calico-typha", "port": port, "protocol": "TCP"}],
            "endpoints": endpoints});
        let client = self.admin()?;
        api(&client, &slice)?
            .patch(
                "calico-typha-chaos",
                &PatchParams::apply("loadtest").force(),
                &Patch::Apply(&slice),
            )
            .await
            .context("writing the calico-typha EndpointSlice")?;
        Ok(())
    }
}

/// A replica pod's state in its Service's EndpointSlice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Readiness {
    /// Running and ready: balanced onto.
    Ready,
    /// Gone or not ready (crashed, starting again).
    NotReady,
    /// Being deleted: still serving while it drains.
    Terminating,
}

fn api(client: &kube::Client, object: &Value) -> anyhow::Result<Api<DynamicObject>> {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let kind = object["kind"].as_str().unwrap_or_default();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let plural = match kind {
        "Namespace" => "namespaces".to_owned(),
        "ServiceAccount" => "serviceaccounts".to_owned(),
        "Node" => "nodes".to_owned(),
        "Pod" => "pods".to_owned(),
        "EndpointSlice" => "endpointslices".to_owned(),
        other => Kind::from_name(other)
            .map(|k| k.plural().to_owned())
            .with_context(|| format!("no plural for {other}"))?,
    };
    let res =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), &plural);
    Ok(match object["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &res),
        None => Api::all_with(client.clone(), &res),
    })
}

/// The generated cluster as Kubernetes objects, in the order they can be created: namespaces
/// and their ServiceAccounts, then Nodes, Pods and Calico's CRDs.
fn objects(shape: (usize, usize)) -> (Vec<Value>, Vec<Value>) {
    let resources = crate::cluster::cluster_spec(shape.0, shape.1).resources();
    let mut first = Vec::new();
    let mut rest = Vec::new();
    let mut accounts = std::collections::BTreeSet::new();
    for r in &resources {
        let doc = r.to_json();
        match r.kind() {
            Kind::Profile => {
                // Only namespaces' profiles (`kns.<ns>`) have a Kubernetes object.
                if let Some(ns) = r.metadata.name.strip_prefix("kns.") {
                    first.push(json!({"apiVersion": "v1", "kind": "Namespace",
                                      "metadata": {"name": ns}}));
                }
            }
            Kind::Node => {
                let ip = doc["spec"]["bgp"]["ipv4Address"].clone();
                rest.push(json!({"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": r.metadata.name,
                                 "annotations": {"projectcalico.org/IPv4Address": ip}}}));
            }
            Kind::WorkloadEndpoint => {
                let ns = r.metadata.namespace.clone().unwrap_or_default();
                let sa = doc["spec"]["serviceAccountName"]
                    .as_str()
                    .unwrap_or("default");
                accounts.insert((ns.clone(), sa.to_owned()));
                let labels: serde_json::Map<String, Value> = r
                    .metadata
                    .labels
                    .iter()
                    .filter(|(k, _)| !k.starts_with("projectcalico.org/"))
                    .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                    .collect();
                let ips: Vec<&str> = doc["spec"]["ipNetworks"]
                    .as_array()
                    .map(|a| a.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                rest.push(json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": doc["spec"]["pod"], "namespace": ns, "labels": labels,
                                 "annotations": {"cni.projectcalico.org/podIPs": ips.join(",")}},
                    "spec": {"nodeName": doc["spec"]["node"], "serviceAccountName": sa,
                             "containers": [{"name": "app", "image": "registry.invalid/app:1"}]}}));
            }
            k if typha_server::datastore::kubernetes::CRD_KINDS.contains(&k) => {
                rest.push(crd_object(r));
            }
            _ => {}
        }
    }
    // There is no controller-manager to make each namespace's `default` account.
    for (ns, sa) in accounts
        .into_iter()
        .chain(first.clone().iter().filter_map(|n| {
            Some((
                n["metadata"]["name"].as_str()?.to_owned(),
                "default".to_owned(),
            ))
        }))
        .collect::<std::collections::BTreeSet<_>>()
    {
        first.push(json!({"apiVersion": "v1", "kind": "ServiceAccount",
                          "metadata": {"name": sa, "namespace": ns}}));
    }
    (first, rest)
}

/// Creates `objects`, [`SEED_CONCURRENCY`] at a time; how many were created (a generated pod
/// whose name repeats one in its namespace is skipped).
async fn create_all(client: &kube::Client, objects: Vec<Value>) -> anyhow::Result<usize> {
    let results: Vec<anyhow::Result<bool>> = futures_util::stream::iter(objects)
        .map(|o| async move {
            let obj: DynamicObject = serde_json::from_value(o.clone())?;
            match api(client, &o)?.create(&PostParams::default(), &obj).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e).with_context(|| format!("creating {o}")),
            }
        })
        .buffer_unordered(SEED_CONCURRENCY)
        .collect()
        .await;
    let mut n = 0;
    for r in results {
        n += usize::from(r?);
    }
    Ok(n)
}

/// Writes the generated cluster (`(nodes, pods per node)`) through the API; how many objects.
pub(crate) async fn seed(k: &KubeCluster, shape: (usize, usize)) -> anyhow::Result<usize> {
    let client = k.admin()?;
    let (first, rest) = objects(shape);
    let pods = rest.iter().filter(|o| o["kind"] == "Pod").count();
    // Namespaces before what lives in them: created concurrently, a ServiceAccount can reach
    // the API server before its namespace does (404; seen under load).
    let (namespaces, accounts): (Vec<Value>, Vec<Value>) =
        first.into_iter().partition(|o| o["kind"] == "Namespace");
    let n = create_all(&client, namespaces).await?
        + create_all(&client, accounts).await?
        + create_all(&client, rest).await?;
    let api: Api<DynamicObject> = Api::all_with(
        client,
        &ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", "Pod"), "pods"),
    );
    let stored = api.list(&Default::default()).await?.items.len();
    eprintln!("pods: {pods} generated, {stored} stored");
    Ok(n)
}

/// The pods the churn relabels, in order: the generated cluster's pods node by node.
fn churned_pods(shape: (usize, usize)) -> Vec<(String, String)> {
    let spec = crate::cluster::cluster_spec(shape.0, shape.1);
    (0..spec.nodes * spec.pods_per_node)
        .map(|i| {
            let (node, pod) = (i % spec.nodes, (i / spec.nodes) % spec.pods_per_node);
            let r: Resource = spec.workload_endpoint(node, pod, 0);
            let doc = r.to_json();
            (
                r.metadata.namespace.clone().unwrap_or_default(),
                doc["spec"]["pod"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// Relabels `rate` pods per second for `secs` seconds through the API (a merge patch of one
/// label carrying the write time), each its own request, in order, waiting while `gate` is
/// paused. `last` gets the resourceVersion of the last write.
pub(crate) fn churn(
    k: &KubeCluster,
    shape: (usize, usize),
    (rate, secs): (f64, f64),
    last: Arc<AtomicU64>,
    gate: Gate,
) -> anyhow::Result<Churn> {
    let client = k.admin()?;
    Ok(Churn::spawn(async move {
        let pods = churned_pods(shape);
        let total = (rate * secs).round() as u64;
        let started = tokio::time::Instant::now();
        let per = Duration::from_secs_f64(1.0 / rate.max(0.001));
        let res =
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", "Pod"), "pods");
        // Time spent paused through `gate` moves the schedule on.
        let mut paused = Duration::ZERO;
        for i in 0..total {
            tokio::time::sleep_until(started + paused + per.mul_f64(i as f64)).await;
            let _turn = gate.scheduled_turn(&mut paused).await;
            let Some((ns, name)) = pods.get(i as usize % pods.len().max(1)) else {
                bail!("no pods to churn");
            };
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &res);
            let patch = json!({"metadata": {"labels": {SENT_LABEL: now_ns().to_string()}}});
            // The API server may be down for a while (the chaos scenario restarts it): retry
            // as a controller would, for up to a minute, then give up.
            let failing = tokio::time::Instant::now();
            let o = loop {
                match api
                    .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(o) => break o,
                    Err(e) if failing.elapsed() < Duration::from_secs(60) => {
                        tracing::debug!(error = %e, "churn write failed; retrying");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    Err(e) => {
                        return Err(e).with_context(|| format!("relabelling pod {ns}/{name}"));
                    }
                }
            };
            let rv = o
                .metadata
                .resource_version
                .as_deref()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            last.fetch_max(rv, Ordering::Relaxed);
        }
        Ok(total)
    }))
}

/// What a direct Kubernetes node reports.
pub(crate) struct KubeReport {
    /// The highest pod resourceVersion it saw.
    pub(crate) pods_rv: u64,
}

/// TLS for the nodes: the API server's CA, HTTP/2.
pub(crate) fn node_tls(ca_file: &Path) -> anyhow::Result<Arc<rustls::ClientConfig>> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca_file).context("reading the API server's CA")? {
        roots.add(c?)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(cfg))
}

/// One node's connection to the API server.
struct Conn {
    send: SendRequest<Empty<Bytes>>,
    url: String,
    token: String,
}

impl Conn {
    async fn open(url: &str, tls: Arc<rustls::ClientConfig>, token: &str) -> anyhow::Result<Conn> {
        let addr: SocketAddr = url
            .strip_prefix("https://")
            .unwrap_or(url)
            .parse()
            .context("the API server's address")?;
        let tcp = tokio::net::TcpStream::connect(addr).await?;
        tcp.set_nodelay(true)?;
        let name = rustls_pki_types::ServerName::IpAddress(addr.ip().into());
        let tls = tokio_rustls::TlsConnector::from(tls)
            .connect(name, tcp)
            .await?;
        let (send, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls)).await?;
        tokio::spawn(conn);
        Ok(Conn {
            send,
            url: url.to_owned(),
            token: token.to_owned(),
        })
    }

    /// GET `path_and_query`, retrying while the API server says 429 (its priority and fairness
    /// queues are full), as client-go does.
    async fn get(
        &self,
        path_and_query: &str,
    ) -> anyhow::Result<hyper::Response<hyper::body::Incoming>> {
        loop {
            let req = hyper::Request::get(format!("{}{path_and_query}", self.url))
                .header("authorization", format!("Bearer {}", self.token))
                .header("accept", "application/json")
                .body(Empty::new())?;
            let mut send = self.send.clone();
            send.ready().await?;
            let resp = send.send_request(req).await?;
            if resp.status() == 429 {
                let wait = resp
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok()?.parse().ok())
                    .unwrap_or(1);
                tokio::time::sleep(Duration::from_secs(wait)).await;
                continue;
            }
            if !resp.status().is_success() {
                let status = resp.status();
                let body = resp.into_body().collect().await?.to_bytes();
                bail!(
                    "{path_and_query}: {status}: {}",
                    String::from_utf8_lossy(&body)
                );
            }
            return Ok(resp);
        }
    }

    /// Lists a collection in pages of 500; (objects, resourceVersion).
    async fn list(&self, path: &str) -> anyhow::Result<(usize, u64)> {
        #[derive(serde::Deserialize)]
        struct Meta {
            #[serde(rename = "resourceVersion")]
            rv: String,
            #[serde(rename = "continue", default)]
            cont: Option<String>,
        }
        #[derive(serde::Deserialize)]
        struct Page {
            metadata: Meta,
            items: Vec<serde::de::IgnoredAny>,
        }
        let mut n = 0;
        let mut rv = None;
        let mut cont: Option<String> = None;
        loop {
            let mut q = format!("{path}?limit=500");
            if let Some(c) = &cont {
                q.push_str("&continue=");
                q.push_str(&percent_encode(c));
            }
            let body = self.get(&q).await?.into_body().collect().await?.to_bytes();
            let page: Page =
                serde_json::from_slice(&body).with_context(|| format!("listing {path}"))?;
            n += page.items.len();
            if rv.is_none() {
                rv = Some(page.metadata.rv.parse().context("a resourceVersion")?);
            }
            cont = page.metadata.cont.filter(|c| !c.is_empty());
            if cont.is_none() {
                break;
            }
        }
        Ok((n, rv.unwrap_or(0)))
    }
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The first `"resourceVersion":"N"` in a watch event line: the object's own.
fn event_rv(line: &[u8]) -> Option<u64> {
    const NEEDLE: &[u8] = b"\"resourceVersion\":\"";
    let at = line.windows(NEEDLE.len()).position(|w| w == NEEDLE)?;
    let rest = line.get(at + NEEDLE.len()..)?;
    let end = rest.iter().position(|b| *b == b'"')?;
    std::str::from_utf8(rest.get(..end)?).ok()?.parse().ok()
}

/// One node listing and watching the API server itself, as Felix does without Typha: every
/// resource the server's Kubernetes backend reads, listed (paged) at once over one HTTP/2
/// connection, then watched from each list's resourceVersion with bookmarks. `on_listed` runs
/// once every list is complete; `on_event` gets every watch event line but bookmarks.
pub(crate) async fn direct_node(
    url: String,
    tls: Arc<rustls::ClientConfig>,
    token: String,
    on_listed: impl FnOnce(usize) + Send,
    on_event: impl Fn(&[u8]) + Send + Sync,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<KubeReport> {
    let conn = loop {
        match Conn::open(&url, tls.clone(), &token).await {
            Ok(c) => break c,
            Err(_) if !*stop.borrow() => tokio::time::sleep(Duration::from_millis(200)).await,
            Err(e) => return Err(e).context("connecting to the API server"),
        }
    };
    // What the server's backend reads that this API server has: a Calico CRD that is not
    // installed (tiers, in the release `peers/build` links) answers 404, and has nothing to
    // list or watch, as the backend treats it.
    let mut paths = Vec::new();
    for p in Kubernetes::collection_paths() {
        let resp = conn.get(&format!("{p}?limit=1")).await;
        match resp {
            Err(e) if p.contains("projectcalico.org") && e.to_string().contains(": 404") => {}
            Err(e) => return Err(e),
            Ok(_) => paths.push(p),
        }
    }
    let lists = futures_util::future::try_join_all(paths.iter().map(|p| conn.list(p))).await?;
    on_listed(lists.iter().map(|(n, _)| n).sum());
    let pods_rv = Arc::new(AtomicU64::new(0));
    let watches = paths.iter().zip(&lists).map(|(path, (_, rv))| {
        let (conn, on_event, pods_rv) = (&conn, &on_event, pods_rv.clone());
        let is_pods = path.ends_with("/pods");
        if is_pods {
            pods_rv.fetch_max(*rv, Ordering::Relaxed);
        }
        async move {
            let q = format!(
                "{path}?watch=1&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds=3600"
            );
            let mut body = conn.get(&q).await?.into_body();
            let mut buf: Vec<u8> = Vec::new();
            while let Some(frame) = body.frame().await {
                let Ok(data) = frame?.into_data() else {
                    continue;
                };
                buf.extend_from_slice(&data);
                while let Some(nl) = buf.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = buf.drain(..=nl).collect();
                    if line.starts_with(b"{\"type\":\"BOOKMARK\"") {
                        continue;
                    }
                    if line.starts_with(b"{\"type\":\"ERROR\"") {
                        bail!("{path}: {}", String::from_utf8_lossy(&line));
                    }
                    if is_pods && let Some(rv) = event_rv(&line) {
                        pods_rv.fetch_max(rv, Ordering::Relaxed);
                    }
                    on_event(&line);
                }
            }
            Err::<(), _>(anyhow::anyhow!("the API server ended the watch of {path}"))
        }
    });
    let all = futures_util::future::try_join_all(watches);
    tokio::select! {
        _ = stop.wait_for(|s| *s) => {}
        r = all => { r?; }
    }
    Ok(KubeReport {
        pods_rv: pods_rv.load(Ordering::Relaxed),
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn finds_the_object_resource_version_in_a_watch_line() {
        let line = br#"{"type":"MODIFIED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a","namespace":"b","uid":"u","resourceVersion":"4321","labels":{"loadtest.sent-unix-ns":"17"}}}}"#;
        assert_eq!(super::event_rv(line), Some(4321));
        assert_eq!(crate::etcd::sent_ns_json(line), Some(17));
        assert_eq!(super::percent_encode("a+b/="), "a%2Bb%2F%3D");
    }
}
