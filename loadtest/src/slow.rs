//! The `slow` scenario: some nodes stop reading. Healthy nodes connect and sync; the datastore
//! churns (phase 1, the baseline); then stalled nodes connect (they say hello and never read
//! again, so the server's writes to them back up) and the same churn runs again (phase 2).
//! Reports the healthy nodes' latency in both phases and the server's memory, which must stay
//! bounded; fails unless every healthy node gets every update and ends exact.

use std::time::Duration;

use serde::Serialize;

use crate::harness::{self, Common, Outcome, Phase, Timeline, Workdir, churn_phase, mib};

/// Settings of a slow run.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct SlowArgs {
    /// Simulated nodes, healthy and stalled together (the generated cluster has as many).
    #[arg(long, default_value_t = 1000)]
    pub(crate) nodes: usize,
    /// Fraction of the nodes that stop reading.
    #[arg(long, default_value_t = 0.1)]
    pub(crate) stalled_fraction: f64,
    /// Pods per node in the generated cluster.
    #[arg(long, default_value_t = 30)]
    pub(crate) pods_per_node: usize,
    /// Churn rate, updates per second.
    #[arg(long, default_value_t = 100.0)]
    pub(crate) rate: f64,
    /// Duration of each churn phase, seconds.
    #[arg(long, default_value_t = 20.0)]
    pub(crate) secs: f64,
    #[command(flatten)]
    pub(crate) common: Common,
}

/// What a slow run measured.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SlowResult {
    /// Healthy nodes.
    pub(crate) healthy: usize,
    /// Stalled nodes.
    pub(crate) stalled: usize,
    /// KVs.
    pub(crate) kvs: u64,
    /// TLS on.
    pub(crate) tls: bool,
    /// Without stalled nodes.
    pub(crate) baseline: Phase,
    /// With them.
    pub(crate) with_stalled: Phase,
    /// Server memory per stalled node (RSS at the end of phase 2 − at the end of phase 1).
    pub(crate) bytes_per_stalled_node: f64,
    /// Connections the server still held at the end.
    pub(crate) server_connections_end: u64,
    /// How many nodes ended exact.
    #[serde(flatten)]
    pub(crate) exact: harness::Exactness,
}

pub(crate) async fn run(a: SlowArgs) -> anyhow::Result<Outcome> {
    let stalled = ((a.nodes as f64 * a.stalled_fraction).round() as usize).min(a.nodes);
    let healthy = a.nodes - stalled;
    a.common.own_server_only("slow")?;
    let wd = Workdir::new(a.nodes, a.pods_per_node, a.common.plain)?.using(&a.common);
    let timeline = Timeline::start();
    let mut server = wd.server("server").await?;
    timeline.add_server(server.pid());
    let mut swarms = wd.swarms(&[&server.addr], healthy, 0, &a.common, &[])?;
    timeline.add_swarms(&swarms);
    let limit = Duration::from_secs(1800);
    harness::wait_for(&swarms, "in_sync", healthy as u64, "in sync", limit).await?;
    harness::phase_histogram(&mut swarms).await?;
    let (baseline, _) = churn_phase(
        server.pid(),
        server.churn(wd.shape(), a.rate, a.secs),
        &mut swarms,
        healthy,
        a.rate,
        a.secs,
        "baseline",
    )
    .await?;

    // The stalled nodes: a swarm of raw connections that hello and never read.
    let stalled_swarms = wd.swarms(
        &[&server.addr],
        stalled,
        healthy,
        &a.common,
        &["--stalled".into(), stalled.to_string()],
    )?;
    timeline.add_swarms(&stalled_swarms);
    harness::wait_for(
        &stalled_swarms,
        "raw_connected",
        stalled as u64,
        "stalled",
        limit,
    )
    .await?;
    // Let the server fill their buffers with the snapshot.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (with_stalled, latency) = churn_phase(
        server.pid(),
        server.churn(wd.shape(), a.rate, a.secs),
        &mut swarms,
        healthy,
        a.rate,
        a.secs,
        "with stalled",
    )
    .await?;
    let state = server.state().await?;
    let digest = state["digest"].as_str().unwrap_or_default().to_owned();
    let done = harness::finish(swarms, &digest).await?;
    harness::finish(stalled_swarms, &digest).await?;
    let kvs = server.kvs;
    server.quit().await?;

    let r = SlowResult {
        healthy,
        stalled,
        kvs,
        tls: !a.common.plain,
        bytes_per_stalled_node: (with_stalled.rss_end as f64 - baseline.rss_end as f64)
            / stalled.max(1) as f64,
        server_connections_end: state["connections"].as_u64().unwrap_or(0),
        exact: done.exactness(),
        baseline,
        with_stalled,
    };
    let want = |p: &Phase| p.updates * healthy as u64;
    let ok = done.all_exact(healthy)
        && r.baseline.deliveries >= want(&r.baseline)
        && r.with_stalled.deliveries >= want(&r.with_stalled);
    let table = format!(
        "slow: {} healthy + {} stalled nodes ({}), {} KVs, {} updates/s for {} s per phase\n\
         | measure | baseline | with stalled nodes |\n|---|---|---|\n\
         | healthy nodes' latency p50 / p90 / p99 / max | {} | {} |\n\
         | deliveries / expected | {} / {} | {} / {} |\n\
         | server RSS start / end / highest | {:.1} / {:.1} / {:.1} MiB | {:.1} / {:.1} / {:.1} MiB |\n\
         | server memory per stalled node | | {:.1} KiB |\n\
         | connections held at the end | | {} |\n\
         {}\n{}",
        healthy,
        stalled,
        if r.tls { "mutual TLS" } else { "plaintext" },
        kvs,
        a.rate,
        a.secs,
        r.baseline.latency_ms.cells(),
        r.with_stalled.latency_ms.cells(),
        r.baseline.deliveries,
        want(&r.baseline),
        r.with_stalled.deliveries,
        want(&r.with_stalled),
        mib(r.baseline.rss_start),
        mib(r.baseline.rss_end),
        mib(r.baseline.rss_max),
        mib(r.with_stalled.rss_start),
        mib(r.with_stalled.rss_end),
        mib(r.with_stalled.rss_max),
        r.bytes_per_stalled_node / 1024.0,
        r.server_connections_end,
        done.verdict(healthy),
        if ok {
            "nothing lost"
        } else {
            "LOST: deliveries missing or nodes diverged"
        },
    );
    Ok(Outcome {
        name: "slow",
        table,
        json: serde_json::to_value(&r)?,
        ok,
        timeline: timeline.stop(),
        latency: Some(latency),
    })
}
