//! The `direct` scenario: the baseline this product exists to beat. A real datastore holds the
//! generated cluster: etcd (Debian's `etcd-server`) in Calico's layout, or, with `--datastore
//! kubernetes`, a real kube-apiserver over etcd 3.6 (built by `peers/build`) holding it as
//! Kubernetes objects and Calico's CRDs (`kube.rs`). The same N nodes and the same churn run
//! twice in one invocation: first every node lists and watches the datastore itself, as Felix
//! does without Typha; then every node connects to our server, which holds the one watch.
//! Reports the datastore's CPU seconds and peak memory (for Kubernetes, kube-apiserver's and
//! the etcd under it), the nodes' latency and the time until all are in sync for both, and the
//! ratios. Fails unless both sides deliver every update to every node and every node ends at
//! the datastore's final revision (direct) or the server's exact digest.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;

use crate::harness::{self, Common, Outcome, Percentiles, Timeline, Workdir, mib};
use crate::procstat::usage;
use crate::store::{Store, StoreKind};

/// Settings of a direct run.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct DirectArgs {
    /// The datastore: `etcd`, or `kubernetes` (a real kube-apiserver over etcd 3.6, from
    /// peers/build).
    #[arg(long, value_enum, default_value = "etcd")]
    pub(crate) datastore: StoreKind,
    /// Simulated nodes (the generated cluster has as many).
    #[arg(long, default_value_t = 1000)]
    pub(crate) nodes: usize,
    /// Pods per node in the generated cluster.
    #[arg(long, default_value_t = 30)]
    pub(crate) pods_per_node: usize,
    /// Churn rate, updates per second.
    #[arg(long, default_value_t = 100.0)]
    pub(crate) rate: f64,
    /// Churn duration per side, seconds.
    #[arg(long, default_value_t = 30.0)]
    pub(crate) secs: f64,
    #[command(flatten)]
    pub(crate) common: Common,
}

/// One side of the comparison.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Side {
    /// Seconds until every node was in sync.
    pub(crate) sync_secs: f64,
    /// The datastore's CPU seconds (etcd, or kube-apiserver) from the first node's start until
    /// all were in sync.
    pub(crate) datastore_cpu_sync_secs: f64,
    /// The datastore's CPU seconds during the churn phase.
    pub(crate) datastore_cpu_churn_secs: f64,
    /// The datastore's highest RSS during this side, bytes.
    pub(crate) datastore_rss_peak: u64,
    /// Kubernetes: the etcd under the API server, CPU seconds until all were in sync.
    pub(crate) etcd_under_cpu_sync_secs: Option<f64>,
    /// Kubernetes: the etcd under the API server, CPU seconds during the churn.
    pub(crate) etcd_under_cpu_churn_secs: Option<f64>,
    /// Write-to-receipt latency, milliseconds.
    pub(crate) latency_ms: Percentiles,
    /// (node, update) pairs delivered.
    pub(crate) deliveries: u64,
    /// Expected.
    pub(crate) deliveries_expected: u64,
    /// Our server's CPU seconds during the churn (through the server only).
    pub(crate) server_cpu_churn_secs: f64,
    /// Our server's CPU seconds until all nodes were in sync (through the server only).
    pub(crate) server_cpu_sync_secs: f64,
    /// Nodes that ended exact.
    pub(crate) nodes_exact: usize,
}

/// What a direct run measured.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct DirectResult {
    /// The datastore.
    pub(crate) datastore: StoreKind,
    /// Nodes.
    pub(crate) nodes: usize,
    /// Resources (etcd) or objects (Kubernetes) in the datastore.
    pub(crate) resources: usize,
    /// TLS between nodes and our server.
    pub(crate) tls: bool,
    /// Every node watching etcd.
    pub(crate) direct: Side,
    /// Every node connected to our server in front of etcd.
    pub(crate) via_server: Side,
}

/// Samples a process's RSS every 100 ms until dropped; the highest.
struct RssPeak {
    max: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl RssPeak {
    fn start(pid: u32) -> Self {
        let max = Arc::new(AtomicU64::new(0));
        let m = max.clone();
        let task = tokio::spawn(async move {
            loop {
                if let Some(u) = usage(pid) {
                    m.fetch_max(u.rss, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        Self { max, task }
    }

    fn stop(self) -> u64 {
        self.task.abort();
        self.max.load(Ordering::Relaxed)
    }
}

/// One side, once its nodes are started: waits until all are in sync, then starts the
/// store's churn and waits for every delivery. `cpu_before` is the datastore's CPU when
/// the side started (and the etcd under it). The server's CPU (side 2) and the exact count are
/// the caller's.
async fn side(
    store: &Store,
    wd: &Workdir,
    rss: RssPeak,
    a: &DirectArgs,
    swarms: &mut [crate::child::Child],
    cpu_before: (f64, f64),
    what: &str,
) -> anyhow::Result<(Side, hdrhistogram::Histogram<u64>)> {
    let n = a.nodes as u64;
    let w = store.watched();
    let ds_cpu = || harness::cpu(&[w.datastore]);
    let etcd_cpu = || w.etcd_under.map(|p| harness::cpu(&[p]));
    // Ten minutes: the limit the issue sets for the direct side to list, at any node count.
    let sync_secs =
        harness::wait_for(swarms, "in_sync", n, "in sync", Duration::from_secs(600)).await?;
    let datastore_cpu_sync_secs = ds_cpu() - cpu_before.0;
    let etcd_under_cpu_sync_secs = etcd_cpu().map(|c| c - cpu_before.1);
    harness::phase_histogram(swarms).await?;
    let (cpu, ecpu) = (ds_cpu(), etcd_cpu());
    let churn = store.churn(wd, a.rate, a.secs)?;
    let (phase, latency) =
        harness::churn_phase(w.datastore, churn, swarms, a.nodes, a.rate, a.secs, what).await?;
    let side = Side {
        sync_secs,
        datastore_cpu_sync_secs,
        datastore_cpu_churn_secs: ds_cpu() - cpu,
        datastore_rss_peak: rss.stop().max(phase.rss_max),
        etcd_under_cpu_sync_secs,
        etcd_under_cpu_churn_secs: etcd_cpu().zip(ecpu).map(|(b, a)| b - a),
        latency_ms: phase.latency_ms,
        deliveries: phase.deliveries,
        deliveries_expected: phase.updates * n,
        server_cpu_churn_secs: 0.0,
        server_cpu_sync_secs: 0.0,
        nodes_exact: 0,
    };
    Ok((side, latency))
}

fn ratio(ours: f64, theirs: f64) -> String {
    if theirs > 0.0 {
        format!("{:.3}×", ours / theirs)
    } else {
        "n/a".into()
    }
}

pub(crate) async fn run(a: DirectArgs) -> anyhow::Result<Outcome> {
    a.common.own_server_only("direct")?;
    let wd = Workdir::new(a.nodes, a.pods_per_node, a.common.plain)?.using(&a.common);
    let (store, resources) = Store::start(a.datastore, &wd).await?;
    let timeline = Timeline::start();
    let w = store.watched();
    timeline.add_server(w.datastore);

    // Side 1: every node lists and watches the datastore.
    let cpu0 = store.cpu();
    let (endpoint, extra) = store.swarm_args();
    let rss = RssPeak::start(w.datastore);
    let mut swarms = wd.swarms(&[&endpoint], a.nodes, 0, &a.common, &extra)?;
    timeline.add_swarms(&swarms);
    let (mut direct, _) = side(&store, &wd, rss, &a, &mut swarms, cpu0, "direct").await?;
    let mark = store.final_mark().await?;
    let done = harness::finish(swarms, &mark).await?;
    direct.nodes_exact = done.exact;
    let direct_ok = done.nodes == a.nodes && done.exact == a.nodes;

    // Side 2: the same nodes through our server, which holds the one watch.
    let cpu1 = store.cpu();
    let rss = RssPeak::start(w.datastore);
    let mut server = store.server(&wd, "server").await?;
    timeline.add_server(server.pid());
    let scpu0 = harness::cpu(&[server.pid()]);
    let mut swarms = wd.swarms(&[&server.addr], a.nodes, 0, &a.common, &[])?;
    timeline.add_swarms(&swarms);
    let (mut via, latency) = side(&store, &wd, rss, &a, &mut swarms, cpu1, "via server").await?;
    let scpu = harness::cpu(&[server.pid()]);
    via.server_cpu_churn_secs = (scpu - scpu0).max(0.0);
    let state = server.state().await?;
    let digest = state["digest"].as_str().unwrap_or_default().to_owned();
    let done_via = harness::finish(swarms, &digest).await?;
    via.nodes_exact = done_via.exact;
    server.quit().await?;

    let ok = direct_ok
        && done_via.all_exact(a.nodes)
        && direct.deliveries >= direct.deliveries_expected
        && via.deliveries >= via.deliveries_expected;
    let r = DirectResult {
        datastore: a.datastore,
        nodes: a.nodes,
        resources,
        tls: !a.common.plain,
        direct,
        via_server: via,
    };
    let (name, the) = store.names();
    let table = table(&r, &a, name, the, &mark, ok);
    Ok(Outcome {
        name: "direct",
        table,
        json: serde_json::to_value(&r)?,
        ok,
        timeline: timeline.stop(),
        latency: Some(latency),
    })
}

/// The Markdown table of a run.
fn table(r: &DirectResult, a: &DirectArgs, name: &str, the: &str, mark: &str, ok: bool) -> String {
    let (d, v) = (&r.direct, &r.via_server);
    let mut rows = format!(
        "direct ({}): {} nodes, {} {} in {the}, {} updates/s for {} s per side\n\
         | measure | every node watches {the} | through typha-server ({}) | ratio |\n|---|---|---|---|\n\
         | all nodes in sync after | {:.1} s | {:.1} s | {} |\n\
         | {name} CPU until all in sync | {:.2} s | {:.2} s | {} |\n\
         | {name} CPU during churn | {:.2} s | {:.2} s | {} |\n\
         | {name} peak RSS | {:.1} MiB | {:.1} MiB | {} |\n",
        name,
        r.nodes,
        r.resources,
        if a.datastore == StoreKind::Etcd {
            "resources"
        } else {
            "objects"
        },
        a.rate,
        a.secs,
        if r.tls { "mutual TLS" } else { "plaintext" },
        d.sync_secs,
        v.sync_secs,
        ratio(v.sync_secs, d.sync_secs),
        d.datastore_cpu_sync_secs,
        v.datastore_cpu_sync_secs,
        ratio(v.datastore_cpu_sync_secs, d.datastore_cpu_sync_secs),
        d.datastore_cpu_churn_secs,
        v.datastore_cpu_churn_secs,
        ratio(v.datastore_cpu_churn_secs, d.datastore_cpu_churn_secs),
        mib(d.datastore_rss_peak),
        mib(v.datastore_rss_peak),
        ratio(v.datastore_rss_peak as f64, d.datastore_rss_peak as f64),
    );
    if let (Some(ds), Some(vs), Some(dc), Some(vc)) = (
        d.etcd_under_cpu_sync_secs,
        v.etcd_under_cpu_sync_secs,
        d.etcd_under_cpu_churn_secs,
        v.etcd_under_cpu_churn_secs,
    ) {
        rows.push_str(&format!(
            "| etcd (under it) CPU until all in sync | {ds:.2} s | {vs:.2} s | {} |\n\
             | etcd (under it) CPU during churn | {dc:.2} s | {vc:.2} s | {} |\n",
            ratio(vs, ds),
            ratio(vc, dc),
        ));
    }
    rows.push_str(&format!(
        "| latency p50 / p90 / p99 / max | {} | {} | p99 {} |\n\
         | deliveries / expected | {} / {} | {} / {} | |\n\
         | typha-server CPU during churn | | {:.2} s | |\n\
         | nodes ending exact | {} of {} ({mark}) | {} of {} (server digest) | |\n\
         {}",
        d.latency_ms.cells(),
        v.latency_ms.cells(),
        ratio(v.latency_ms.p99, d.latency_ms.p99),
        d.deliveries,
        d.deliveries_expected,
        v.deliveries,
        v.deliveries_expected,
        v.server_cpu_churn_secs,
        d.nodes_exact,
        r.nodes,
        v.nodes_exact,
        r.nodes,
        if ok {
            "nothing lost"
        } else {
            "LOST: deliveries missing or nodes diverged"
        },
    ));
    rows
}
