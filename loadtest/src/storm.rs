//! The `storm` scenario: every node connects at once to a large state. Reports the time until
//! all are in sync, snapshots built vs reused, the server's peak memory and bytes per node; and
//! fails unless every node ends with the server's exact state.

use std::time::Duration;

use anyhow::Context;
use serde::Serialize;

use crate::harness::{self, Common, Outcome, Timeline, Workdir, mib};
use crate::procstat::{Settle, SettleWait, settled_usage, usage};
use crate::store::{Store, StoreKind};

/// Settings of a storm.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct StormArgs {
    /// Simulated nodes, all connecting at once.
    #[arg(long, default_value_t = 1000)]
    pub(crate) nodes: usize,
    /// About this many KVs in the datastore (a generated cluster of KVS / (pods + 1) nodes).
    #[arg(long, default_value_t = 100_000)]
    pub(crate) kvs: usize,
    /// Pods per node in the generated cluster.
    #[arg(long, default_value_t = 30)]
    pub(crate) pods_per_node: usize,
    /// A real datastore seeded with the cluster, that the server reads: `etcd` (Calico's
    /// layout) or `kubernetes` (a real kube-apiserver; peers/build). Default: the embedded
    /// datastore.
    #[arg(long, value_enum)]
    pub(crate) datastore: Option<StoreKind>,
    /// Seconds to wait once the server is ready before its idle memory is sampled: 130 lets
    /// the initial load's history age out (120 s), which is the memory it keeps while idle.
    #[arg(long, default_value_t = 0.0)]
    pub(crate) idle_secs: f64,
    #[command(flatten)]
    pub(crate) common: Common,
}

/// What a storm measured.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct StormResult {
    /// Nodes.
    pub(crate) nodes: usize,
    /// KVs in the cache.
    pub(crate) kvs: u64,
    /// TLS on.
    pub(crate) tls: bool,
    /// Seconds from starting the swarms until every node was connected.
    pub(crate) connect_secs: f64,
    /// Seconds from starting the swarms until every node was in sync.
    pub(crate) sync_secs: f64,
    /// Snapshots the server built.
    pub(crate) snapshots_built: u64,
    /// Snapshots it reused.
    pub(crate) snapshots_reused: u64,
    /// Bytes the server sent per node.
    pub(crate) bytes_per_node: f64,
    /// The datastore (`embedded`, `etcd` or `kubernetes`).
    pub(crate) datastore: &'static str,
    /// Server RSS before the storm, once it settled, bytes.
    pub(crate) server_rss_idle: u64,
    /// Seconds waited after the server was ready before that sample began (`--idle-secs`).
    pub(crate) idle_after_secs: f64,
    /// How long that sample waited for the RSS to settle.
    #[serde(flatten)]
    pub(crate) idle_wait: SettleWait,
    /// Server peak RSS over its whole life (the initial load included), bytes.
    pub(crate) server_peak_rss: u64,
    /// Server peak RSS during the storm (sampled every 50 ms from the swarms' start until all
    /// nodes were in sync), bytes.
    pub(crate) server_storm_peak_rss: u64,
    /// Server RSS after the storm with every node connected, bytes.
    pub(crate) server_rss_after: u64,
    /// Server and swarm CPU seconds during the storm.
    pub(crate) server_cpu_secs: f64,
    /// Swarm CPU seconds during the storm.
    pub(crate) swarm_cpu_secs: f64,
    /// Server CPU per delivery (a KV to a node), microseconds.
    pub(crate) server_cpu_us_per_delivery: f64,
    /// Swarm CPU per delivery, microseconds.
    pub(crate) swarm_cpu_us_per_delivery: f64,
    /// How many nodes ended exact.
    #[serde(flatten)]
    pub(crate) exact: harness::Exactness,
}

pub(crate) async fn run(a: StormArgs) -> anyhow::Result<Outcome> {
    let cluster_nodes = (a.kvs / (a.pods_per_node + 1)).max(1);
    a.common.own_server_only("storm")?;
    let wd = Workdir::new(cluster_nodes, a.pods_per_node, a.common.plain)?.using(&a.common);
    let timeline = Timeline::start();
    let store = match a.datastore {
        Some(kind) => Some(Store::start(kind, &wd).await?.0),
        None => None,
    };
    let mut server = match &store {
        Some(s) => s.server(&wd, "server").await?,
        None => wd.server("server").await?,
    };
    timeline.add_server(server.pid());
    tokio::time::sleep(Duration::from_secs_f64(a.idle_secs.max(0.0))).await;
    let idle = settled_usage(server.pid(), Settle::IDLE)
        .await
        .context("server usage")?;
    let before = server.state().await?;
    let cpu0 = harness::cpu(&[server.pid()]);

    let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(idle.usage.rss));
    let sampler = {
        let (peak, pid) = (peak.clone(), server.pid());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(50));
            loop {
                tick.tick().await;
                if let Some(u) = usage(pid) {
                    peak.fetch_max(u.rss, std::sync::atomic::Ordering::Relaxed);
                }
            }
        })
    };
    let swarms = wd.swarms(&[&server.addr], a.nodes, 0, &a.common, &[])?;
    timeline.add_swarms(&swarms);
    let swarm_pids: Vec<u32> = swarms.iter().map(|s| s.pid()).collect();
    let limit = Duration::from_secs(1800);
    let (connect_secs, sync_secs) = tokio::try_join!(
        harness::wait_for(&swarms, "connected", a.nodes as u64, "connected", limit),
        harness::wait_for(&swarms, "in_sync", a.nodes as u64, "in sync", limit),
    )?;
    sampler.abort();
    let (cpu1, swarm_cpu) = (harness::cpu(&[server.pid()]), harness::cpu(&swarm_pids));
    let after = server.state().await?;
    let now = usage(server.pid()).context("server usage")?;
    let digest = after["digest"].as_str().unwrap_or_default().to_owned();
    let done = harness::finish(swarms, &digest).await?;
    let kvs = server.kvs;
    server.quit().await?;

    let delta = |f: &str| {
        after[f]
            .as_u64()
            .unwrap_or(0)
            .saturating_sub(before[f].as_u64().unwrap_or(0))
    };
    let r = StormResult {
        nodes: a.nodes,
        kvs,
        tls: !a.common.plain,
        datastore: store.as_ref().map_or("embedded", |s| s.names().0),
        connect_secs,
        sync_secs,
        snapshots_built: delta("snapshots_generated"),
        snapshots_reused: delta("snapshots_reused"),
        bytes_per_node: delta("bytes_sent") as f64 / a.nodes as f64,
        server_rss_idle: idle.usage.rss,
        idle_after_secs: a.idle_secs.max(0.0),
        idle_wait: idle.wait,
        server_peak_rss: now.peak_rss,
        server_storm_peak_rss: peak.load(std::sync::atomic::Ordering::Relaxed),
        server_rss_after: now.rss,
        server_cpu_secs: cpu1 - cpu0,
        swarm_cpu_secs: swarm_cpu,
        server_cpu_us_per_delivery: (cpu1 - cpu0) * 1e6 / (kvs.max(1) * a.nodes as u64) as f64,
        swarm_cpu_us_per_delivery: swarm_cpu * 1e6 / (kvs.max(1) * a.nodes as u64) as f64,
        exact: done.exactness(),
    };
    let ok = done.all_exact(a.nodes);
    let table = format!(
        "storm: {} nodes at once ({}), {} KVs on {}\n\
         | measure | value |\n|---|---|\n\
         | all nodes connected after | {:.1} s |\n\
         | all nodes in sync after | {:.1} s |\n\
         | snapshots built / reused | {} / {} |\n\
         | bytes sent per node | {:.0} ({:.1} per KV) |\n\
         | server RSS before / storm's peak / after | {:.1} / {:.1} / {:.1} MiB |\n\
         | server RSS peak (its whole life, the initial load included) | {:.1} MiB |\n\
         | server RSS before: per KV / sampled after ready + | {:.0} B / {:.0} s |\n\
         | server RSS before: waited to settle | {} |\n\
         | server / swarm CPU during the storm | {:.1} / {:.1} s ({:.3} / {:.3} µs per KV per node) |\n\
         {}\n{}",
        r.nodes,
        if r.tls { "mutual TLS" } else { "plaintext" },
        r.kvs,
        r.datastore,
        r.connect_secs,
        r.sync_secs,
        r.snapshots_built,
        r.snapshots_reused,
        r.bytes_per_node,
        r.bytes_per_node / r.kvs.max(1) as f64,
        mib(r.server_rss_idle),
        mib(r.server_storm_peak_rss),
        mib(r.server_rss_after),
        mib(r.server_peak_rss),
        r.server_rss_idle as f64 / r.kvs.max(1) as f64,
        r.idle_after_secs,
        r.idle_wait,
        r.server_cpu_secs,
        r.swarm_cpu_secs,
        r.server_cpu_us_per_delivery,
        r.swarm_cpu_us_per_delivery,
        done.verdict(a.nodes),
        if ok {
            "nothing lost"
        } else {
            "LOST: nodes diverged"
        },
    );
    Ok(Outcome {
        name: "storm",
        table,
        json: serde_json::to_value(&r)?,
        ok,
        timeline: timeline.stop(),
        latency: None,
    })
}
