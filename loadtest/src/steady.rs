//! The `steady` scenario: N nodes connect and sync, then the datastore churns at R updates per
//! second for T seconds. Reports latency from each datastore write to each node's receipt over
//! every (node, update) pair, updates delivered, bytes per update per node, CPU and memory; and
//! fails unless every node ends with the server's exact state.

use std::time::Duration;

use anyhow::Context;
use serde::Serialize;

use crate::harness::{self, Common, Outcome, Percentiles, Timeline, Workdir, mib};
use crate::procstat::usage;
use crate::server::Server;

/// Settings of a steady run.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct SteadyArgs {
    /// Simulated nodes (the generated cluster has as many).
    #[arg(long, default_value_t = 1000)]
    pub(crate) nodes: usize,
    /// Pods per node in the generated cluster.
    #[arg(long, default_value_t = 30)]
    pub(crate) pods_per_node: usize,
    /// Churn rate, updates per second.
    #[arg(long, default_value_t = 100.0)]
    pub(crate) rate: f64,
    /// Churn duration, seconds.
    #[arg(long, default_value_t = 30.0)]
    pub(crate) secs: f64,
    #[command(flatten)]
    pub(crate) common: Common,
}

/// What a steady run measured.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SteadyResult {
    /// Nodes.
    pub(crate) nodes: usize,
    /// KVs in the cache.
    pub(crate) kvs: u64,
    /// TLS on.
    pub(crate) tls: bool,
    /// The server was already running (its CPU and memory were not measured).
    pub(crate) server_external: bool,
    /// Seconds until every node was in sync.
    pub(crate) sync_secs: f64,
    /// Updates written to the datastore.
    pub(crate) updates_written: u64,
    /// (node, update) pairs delivered.
    pub(crate) deliveries: u64,
    /// Expected deliveries (nodes × updates).
    pub(crate) deliveries_expected: u64,
    /// Write-to-receipt latency percentiles, milliseconds.
    pub(crate) latency_ms: Percentiles,
    /// Bytes the server sent per update per node during churn.
    pub(crate) bytes_per_update_per_node: f64,
    /// Server CPU seconds during churn.
    pub(crate) server_cpu_secs: f64,
    /// Swarm CPU seconds during churn.
    pub(crate) swarm_cpu_secs: f64,
    /// Server RSS before clients, bytes.
    pub(crate) server_rss_idle: u64,
    /// Server RSS with all nodes connected and in sync, bytes.
    pub(crate) server_rss_connected: u64,
    /// Server memory per connected node, bytes.
    pub(crate) server_bytes_per_node: f64,
    /// Server peak RSS, bytes.
    pub(crate) server_peak_rss: u64,
    /// How many nodes ended exact.
    #[serde(flatten)]
    pub(crate) exact: harness::Exactness,
}

pub(crate) async fn run(a: SteadyArgs) -> anyhow::Result<Outcome> {
    let wd = Workdir::new(a.nodes, a.pods_per_node, a.common.plain)?.using(&a.common);
    let timeline = Timeline::start();
    let external = a.common.server.server_addr.is_some();
    let mut server = if external {
        Server::external(&a.common.server).await?
    } else {
        wd.server("server").await?
    };
    timeline.add_server(server.pid());
    tokio::time::sleep(Duration::from_millis(500)).await;
    // An external server's process is not ours to read: its CPU and memory show as 0.
    let usage_of = |pid: u32| -> anyhow::Result<crate::procstat::Usage> {
        if external {
            return Ok(Default::default());
        }
        usage(pid).context("server usage")
    };
    let idle = usage_of(server.pid())?;

    let mut swarms = wd.swarms(&[&server.addr], a.nodes, 0, &a.common, &[])?;
    timeline.add_swarms(&swarms);
    let sync_secs = harness::wait_for(
        &swarms,
        "in_sync",
        a.nodes as u64,
        "in sync",
        Duration::from_secs(1800),
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let connected = usage_of(server.pid())?;
    // Updates delivered during the initial sync are not latencies of churn.
    harness::phase_histogram(&mut swarms).await?;

    // Churn.
    let before = server.state().await?;
    let swarm_pids: Vec<u32> = swarms.iter().map(|s| s.pid()).collect();
    let (cpu0, swarm_cpu0) = (harness::cpu(&[server.pid()]), harness::cpu(&swarm_pids));
    let (churn, latency) = harness::churn_phase(
        server.pid(),
        server.churn(wd.shape(), a.rate, a.secs),
        &mut swarms,
        a.nodes,
        a.rate,
        a.secs,
        "delivered",
    )
    .await?;
    let (cpu1, swarm_cpu1) = (harness::cpu(&[server.pid()]), harness::cpu(&swarm_pids));
    // The last frames have landed (every delivery counted); compare every node's state.
    let after = server.state().await?;
    let server_digest = after["digest"].as_str().unwrap_or_default().to_owned();
    let peak = usage(server.pid()).map(|u| u.peak_rss).unwrap_or(0);
    let done = harness::finish(swarms, &server_digest).await?;
    let kvs = server.kvs;
    server.quit().await?;

    let sent = after["bytes_sent"]
        .as_u64()
        .unwrap_or(0)
        .saturating_sub(before["bytes_sent"].as_u64().unwrap_or(0));
    let r = SteadyResult {
        nodes: a.nodes,
        kvs,
        tls: !a.common.plain,
        server_external: external,
        sync_secs,
        updates_written: churn.updates,
        deliveries: churn.deliveries,
        deliveries_expected: churn.updates * a.nodes as u64,
        latency_ms: churn.latency_ms,
        bytes_per_update_per_node: sent as f64 / (churn.updates.max(1) * a.nodes as u64) as f64,
        server_cpu_secs: cpu1 - cpu0,
        swarm_cpu_secs: swarm_cpu1 - swarm_cpu0,
        server_rss_idle: idle.rss,
        server_rss_connected: connected.rss,
        server_bytes_per_node: (connected.rss as f64 - idle.rss as f64) / a.nodes as f64,
        server_peak_rss: peak,
        exact: done.exactness(),
    };
    let ok = done.all_exact(a.nodes) && r.deliveries >= r.deliveries_expected;
    Ok(Outcome {
        name: "steady",
        table: table(&r, &done),
        json: serde_json::to_value(&r)?,
        ok,
        timeline: timeline.stop(),
        latency: Some(latency),
    })
}

/// The result as a table.
fn table(r: &SteadyResult, done: &harness::Finished) -> String {
    let lost = r.deliveries_expected.saturating_sub(r.deliveries);
    let t = format!(
        "steady: {} nodes ({}), {} KVs\n\
         | measure | value |\n|---|---|\n\
         | all nodes in sync after | {:.1} s |\n\
         | updates written / delivered / expected | {} / {} / {} |\n\
         | write-to-receipt latency p50 / p90 / p99 / max | {} |\n\
         | bytes on the wire per update per node | {:.1} |\n\
         | server CPU during churn | {:.2} s |\n\
         | swarm CPU during churn | {:.2} s |\n\
         | server RSS idle / connected / peak | {:.1} / {:.1} / {:.1} MiB |\n\
         | server memory per connected node | {:.1} KiB |\n\
         {}\n\
         {}",
        r.nodes,
        if r.tls { "mutual TLS" } else { "plaintext" },
        r.kvs,
        r.sync_secs,
        r.updates_written,
        r.deliveries,
        r.deliveries_expected,
        r.latency_ms.cells(),
        r.bytes_per_update_per_node,
        r.server_cpu_secs,
        r.swarm_cpu_secs,
        mib(r.server_rss_idle),
        mib(r.server_rss_connected),
        mib(r.server_peak_rss),
        r.server_bytes_per_node / 1024.0,
        done.verdict(r.nodes),
        if lost == 0 && done.all_exact(r.nodes) {
            "nothing lost".to_owned()
        } else {
            format!(
                "LOST: {lost} deliveries missing, {} nodes diverged",
                r.nodes.saturating_sub(r.exact.nodes_exact)
            )
        },
    );
    if !r.server_external {
        return t;
    }
    // Not ours to measure: say so instead of printing zeros.
    t.lines()
        .filter(|l| !l.starts_with("| server "))
        .chain(["| server CPU and memory | not measured (external server) |"])
        .collect::<Vec<_>>()
        .join("\n")
}
