//! The `direct` scenario: the baseline this product exists to beat. A real etcd (Debian's
//! `etcd-server`) holds the generated cluster in Calico's layout. The same N nodes and the same
//! churn run twice in one invocation: first every node lists and watches etcd itself, as Felix
//! does without Typha; then every node connects to our server, which holds the one watch on
//! that etcd. Reports etcd's CPU seconds and memory, the nodes' latency and the time until all
//! are in sync for both, and the ratios. Fails unless both sides deliver every update to every
//! node and every node ends at etcd's final revision (direct) or the server's exact digest.

use std::time::Duration;

use serde::Serialize;

use crate::etcd::{self, EtcdProc};
use crate::harness::{self, Common, Outcome, Percentiles, Timeline, Workdir, mib};
use crate::procstat::usage;

/// Settings of a direct run.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct DirectArgs {
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
    /// etcd CPU seconds from the first node's start until all were in sync.
    pub(crate) etcd_cpu_sync_secs: f64,
    /// etcd CPU seconds during the churn phase.
    pub(crate) etcd_cpu_churn_secs: f64,
    /// etcd's highest RSS during this side, bytes.
    pub(crate) etcd_rss_peak: u64,
    /// Write-to-receipt latency, milliseconds.
    pub(crate) latency_ms: Percentiles,
    /// (node, update) pairs delivered.
    pub(crate) deliveries: u64,
    /// Expected.
    pub(crate) deliveries_expected: u64,
    /// Our server's CPU seconds during the churn (through the server only).
    pub(crate) server_cpu_churn_secs: f64,
    /// Nodes that ended exact.
    pub(crate) nodes_exact: usize,
}

/// What a direct run measured.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct DirectResult {
    /// Nodes.
    pub(crate) nodes: usize,
    /// Resources in etcd.
    pub(crate) resources: usize,
    /// TLS between nodes and our server.
    pub(crate) tls: bool,
    /// Every node watching etcd.
    pub(crate) direct: Side,
    /// Every node connected to our server in front of etcd.
    pub(crate) via_server: Side,
}

/// One side, once its nodes are started: waits until all are in sync, then churns etcd and
/// waits for every delivery. `cpu_before` is etcd's CPU when the side started. The server's
/// CPU (side 2) and the exact count are the caller's.
async fn side(
    e: &EtcdProc,
    wd: &Workdir,
    a: &DirectArgs,
    swarms: &mut [crate::child::Child],
    cpu_before: f64,
    what: &str,
) -> anyhow::Result<(Side, hdrhistogram::Histogram<u64>)> {
    let n = a.nodes as u64;
    let etcd_cpu = || harness::cpu(&[e.pid()]);
    let sync_secs =
        harness::wait_for(swarms, "in_sync", n, "in sync", Duration::from_secs(1800)).await?;
    let etcd_cpu_sync_secs = etcd_cpu() - cpu_before;
    harness::phase_histogram(swarms).await?;
    let cpu = etcd_cpu();
    let (phase, latency) = harness::churn_phase(
        e.pid(),
        etcd::churn(e.endpoint.clone(), wd.shape(), a.rate, a.secs),
        swarms,
        a.nodes,
        a.rate,
        a.secs,
        what,
    )
    .await?;
    let side = Side {
        sync_secs,
        etcd_cpu_sync_secs,
        etcd_cpu_churn_secs: etcd_cpu() - cpu,
        etcd_rss_peak: usage(e.pid()).map_or(phase.rss_max, |u| u.rss.max(phase.rss_max)),
        latency_ms: phase.latency_ms,
        deliveries: phase.deliveries,
        deliveries_expected: phase.updates * n,
        server_cpu_churn_secs: 0.0,
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
    let e = EtcdProc::start(wd.path()).await?;
    let resources = etcd::seed(&e, wd.shape()).await?;
    let timeline = Timeline::start();
    timeline.add_server(e.pid());
    let etcd_cpu = || harness::cpu(&[e.pid()]);

    // Side 1: every node lists and watches etcd.
    let cpu0 = etcd_cpu();
    let endpoint = e.endpoint.clone();
    let mut swarms = wd.swarms(
        &[&endpoint],
        a.nodes,
        0,
        &a.common,
        &["--etcd".into(), endpoint.clone()],
    )?;
    timeline.add_swarms(&swarms);
    let (mut direct, _) = side(&e, &wd, &a, &mut swarms, cpu0, "direct").await?;
    let revision = e
        .client()
        .await?
        .get("/", None)
        .await?
        .header()
        .map_or(0, |h| h.revision());
    let done = harness::finish(swarms, &format!("rev-{revision}")).await?;
    direct.nodes_exact = done.exact;
    let direct_ok = done.nodes == a.nodes && done.exact == a.nodes;

    // Side 2: the same nodes through our server, which holds the one watch.
    let cpu1 = etcd_cpu();
    let mut server = wd.etcd_server("server", &endpoint).await?;
    timeline.add_server(server.pid());
    let mut swarms = wd.swarms(&[&server.addr], a.nodes, 0, &a.common, &[])?;
    timeline.add_swarms(&swarms);
    let scpu = harness::cpu(&[server.pid()]);
    let (mut via, latency) = side(&e, &wd, &a, &mut swarms, cpu1, "via server").await?;
    via.server_cpu_churn_secs = harness::cpu(&[server.pid()]) - scpu;
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
        nodes: a.nodes,
        resources,
        tls: !a.common.plain,
        direct,
        via_server: via,
    };
    let (d, v) = (&r.direct, &r.via_server);
    let table = format!(
        "direct: {} nodes, {} resources in etcd, {} updates/s for {} s per side\n\
         | measure | every node watches etcd | through typha-server ({}) | ratio |\n|---|---|---|---|\n\
         | all nodes in sync after | {:.1} s | {:.1} s | {} |\n\
         | etcd CPU until all in sync | {:.2} s | {:.2} s | {} |\n\
         | etcd CPU during churn | {:.2} s | {:.2} s | {} |\n\
         | etcd peak RSS | {:.1} MiB | {:.1} MiB | {} |\n\
         | latency p50 / p90 / p99 / max | {} | {} | p99 {} |\n\
         | deliveries / expected | {} / {} | {} / {} | |\n\
         | typha-server CPU during churn | | {:.2} s | |\n\
         | nodes ending exact | {} of {} (etcd revision {revision}) | {} of {} (server digest) | |\n\
         {}",
        r.nodes,
        r.resources,
        a.rate,
        a.secs,
        if r.tls { "mutual TLS" } else { "plaintext" },
        d.sync_secs,
        v.sync_secs,
        ratio(v.sync_secs, d.sync_secs),
        d.etcd_cpu_sync_secs,
        v.etcd_cpu_sync_secs,
        ratio(v.etcd_cpu_sync_secs, d.etcd_cpu_sync_secs),
        d.etcd_cpu_churn_secs,
        v.etcd_cpu_churn_secs,
        ratio(v.etcd_cpu_churn_secs, d.etcd_cpu_churn_secs),
        mib(d.etcd_rss_peak),
        mib(v.etcd_rss_peak),
        ratio(v.etcd_rss_peak as f64, d.etcd_rss_peak as f64),
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
    );
    Ok(Outcome {
        name: "direct",
        table,
        json: serde_json::to_value(&r)?,
        ok,
        timeline: timeline.stop(),
        latency: Some(latency),
    })
}
