//! The `slow` scenario: some nodes stop reading. Healthy nodes connect and sync; the datastore
//! churns (phase 1, the baseline); then stalled nodes connect (they say hello and never read
//! again, so the server's writes to them back up) and the same churn runs again (phase 2).
//! Reports the healthy nodes' latency in both phases and the server's memory, which must stay
//! bounded; fails unless every healthy node gets every update and ends exact.

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::child::Child;
use crate::harness::{self, Common, Outcome, Percentiles, Server, Timeline, Workdir};
use crate::procstat::usage;

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

/// One churn phase.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Phase {
    /// Healthy nodes' write-to-receipt latency.
    pub(crate) latency_ms: Percentiles,
    /// Updates written.
    pub(crate) updates: u64,
    /// Deliveries to healthy nodes.
    pub(crate) deliveries: u64,
    /// Server RSS at the start and end of the phase, and its highest sample, bytes.
    pub(crate) rss_start: u64,
    /// End.
    pub(crate) rss_end: u64,
    /// Highest sample.
    pub(crate) rss_max: u64,
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
    /// Nodes whose final state equals the server's.
    pub(crate) nodes_exact: usize,
    /// Full-store nodes.
    pub(crate) full_nodes: usize,
    /// Of those, exact.
    pub(crate) full_nodes_exact: usize,
}

/// Churns `rate` × `secs` and waits for every healthy node to receive it; the phase's numbers.
async fn phase(
    server: &mut Server,
    swarms: &mut [Child],
    healthy: usize,
    rate: f64,
    secs: f64,
    what: &str,
) -> anyhow::Result<(Phase, hdrhistogram::Histogram<u64>)> {
    let rss = |pid| usage(pid).map(|u| u.rss).unwrap_or(0);
    let rss_start = rss(server.pid());
    let mut rss_max = rss_start;
    let got0 = harness::sum(swarms, "churn_updates");
    server.child.send(&format!("churn {rate} {secs}")).await?;
    let want = (rate * secs).round() as u64 * healthy as u64;
    let b = harness::bar(want, what);
    let started = Instant::now();
    let limit = Duration::from_secs_f64(secs) + Duration::from_secs(60);
    loop {
        let got = harness::sum(swarms, "churn_updates") - got0;
        b.set_position(got);
        rss_max = rss_max.max(rss(server.pid()));
        if got >= want || started.elapsed() > limit {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    b.finish();
    server.child.send("wait-churn").await?;
    let updates = server
        .child
        .expect("churned", Duration::from_secs(60))
        .await?["updates"]
        .as_u64()
        .unwrap_or(0);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let h = harness::phase_histogram(swarms).await?;
    let rss_end = rss(server.pid());
    let p = Phase {
        latency_ms: Percentiles::of(&h),
        updates,
        deliveries: harness::sum(swarms, "churn_updates") - got0,
        rss_start,
        rss_end,
        rss_max: rss_max.max(rss_end),
    };
    Ok((p, h))
}

pub(crate) async fn run(a: SlowArgs) -> anyhow::Result<Outcome> {
    let stalled = ((a.nodes as f64 * a.stalled_fraction).round() as usize).min(a.nodes);
    let healthy = a.nodes - stalled;
    let wd = Workdir::new(a.nodes, a.pods_per_node, a.common.plain)?;
    let timeline = Timeline::start();
    let mut server = wd.server("server").await?;
    timeline.add_server(server.pid());
    let mut swarms = wd.swarms(&[&server.addr], healthy, 0, &a.common, &[])?;
    timeline.add_swarms(&swarms);
    let limit = Duration::from_secs(1800);
    harness::wait_for(&swarms, "in_sync", healthy as u64, "in sync", limit).await?;
    harness::phase_histogram(&mut swarms).await?;
    let (baseline, _) = phase(
        &mut server,
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
    let (with_stalled, latency) = phase(
        &mut server,
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
        nodes_exact: done.exact,
        full_nodes: done.full_nodes,
        full_nodes_exact: done.full_exact,
        baseline,
        with_stalled,
    };
    let want = |p: &Phase| p.updates * healthy as u64;
    let ok = done.all_exact(healthy)
        && r.baseline.deliveries >= want(&r.baseline)
        && r.with_stalled.deliveries >= want(&r.with_stalled);
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
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
