//! The `failover` scenario: two server processes over the same datastore content; the nodes
//! spread over both (each shuffles the pair, as the client does); one server is killed
//! (SIGKILL, no Goodbye); its nodes move to the other. Reports the time until every node is in
//! sync again and how the moved nodes resumed (by deltas, by digest buckets, or by a full
//! snapshot); fails unless every node ends with the surviving server's exact state.
//!
//! The two servers have different epochs (each is its own cache), so delta resume cannot
//! apply across them: full-store nodes resume by digest, light nodes (which keep no digest)
//! by snapshot. Real agents keep full stores.

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::harness::{self, Common, Outcome, Timeline, Workdir, mib};
use crate::procstat::usage;

/// Settings of a failover.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct FailoverArgs {
    /// Simulated nodes (the generated cluster has as many).
    #[arg(long, default_value_t = 5000)]
    pub(crate) nodes: usize,
    /// Pods per node in the generated cluster.
    #[arg(long, default_value_t = 30)]
    pub(crate) pods_per_node: usize,
    #[command(flatten)]
    pub(crate) common: Common,
}

/// What a failover measured.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct FailoverResult {
    /// Nodes.
    pub(crate) nodes: usize,
    /// KVs in the cache.
    pub(crate) kvs: u64,
    /// TLS on.
    pub(crate) tls: bool,
    /// Seconds until every node was first in sync.
    pub(crate) sync_secs: f64,
    /// Nodes on the server that was killed.
    pub(crate) moved: u64,
    /// Seconds from the kill until every node was in sync again.
    pub(crate) resync_secs: f64,
    /// Moved nodes that resumed by deltas.
    pub(crate) resumed_deltas: u64,
    /// Moved nodes that resumed by digest buckets.
    pub(crate) resumed_digest: u64,
    /// Moved nodes that needed a full snapshot.
    pub(crate) resumed_snapshot: u64,
    /// Bytes the surviving server sent per moved node.
    pub(crate) bytes_per_moved_node: f64,
    /// Surviving server's RSS before and after taking the moved nodes, bytes.
    pub(crate) survivor_rss_before: u64,
    /// After.
    pub(crate) survivor_rss_after: u64,
    /// How many nodes ended exact.
    #[serde(flatten)]
    pub(crate) exact: harness::Exactness,
}

pub(crate) async fn run(a: FailoverArgs) -> anyhow::Result<Outcome> {
    a.common.own_server_only("failover")?;
    let wd = Workdir::new(a.nodes, a.pods_per_node, a.common.plain)?.using(&a.common);
    let timeline = Timeline::start();
    let mut victim = wd.server("server A").await?;
    let mut survivor = wd.server("server B").await?;
    timeline.add_server(victim.pid());
    timeline.add_server(survivor.pid());
    let swarms = wd.swarms(&[&victim.addr, &survivor.addr], a.nodes, 0, &a.common, &[])?;
    timeline.add_swarms(&swarms);
    let n = a.nodes as u64;
    let limit = Duration::from_secs(1800);
    let sync_secs = harness::wait_for(&swarms, "in_sync", n, "in sync", limit).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;

    let moved = victim.state().await?["connections"].as_u64().unwrap_or(0);
    let before = survivor.state().await?;
    let rss_before = usage(survivor.pid()).map(|u| u.rss).unwrap_or(0);
    let resumed = |s: &[crate::child::Child]| {
        (
            harness::sum(s, "resumed_deltas"),
            harness::sum(s, "resumed_digest"),
            harness::sum(s, "resumed_snapshot"),
        )
    };
    let r0 = resumed(&swarms);
    victim.kill().await?;
    let killed = Instant::now();
    // Every moved node has resumed once more, and every node is in sync.
    let b = harness::bar(moved, "resumed");
    loop {
        let r = resumed(&swarms);
        let again = (r.0 + r.1 + r.2) - (r0.0 + r0.1 + r0.2);
        b.set_position(again.min(moved));
        if again >= moved && harness::sum(&swarms, "in_sync") >= n {
            break;
        }
        anyhow::ensure!(
            killed.elapsed() < limit,
            "only {again} of {moved} nodes resumed after {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    b.finish();
    let resync_secs = killed.elapsed().as_secs_f64();
    let r1 = resumed(&swarms);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = survivor.state().await?;
    let rss_after = usage(survivor.pid()).map(|u| u.rss).unwrap_or(0);
    let digest = after["digest"].as_str().unwrap_or_default().to_owned();
    let done = harness::finish(swarms, &digest).await?;
    let kvs = survivor.kvs;
    survivor.quit().await?;

    let sent = after["bytes_sent"]
        .as_u64()
        .unwrap_or(0)
        .saturating_sub(before["bytes_sent"].as_u64().unwrap_or(0));
    let r = FailoverResult {
        nodes: a.nodes,
        kvs,
        tls: !a.common.plain,
        sync_secs,
        moved,
        resync_secs,
        resumed_deltas: r1.0 - r0.0,
        resumed_digest: r1.1 - r0.1,
        resumed_snapshot: r1.2 - r0.2,
        bytes_per_moved_node: sent as f64 / moved.max(1) as f64,
        survivor_rss_before: rss_before,
        survivor_rss_after: rss_after,
        exact: done.exactness(),
    };
    let ok = done.all_exact(a.nodes);
    let table = format!(
        "failover: {} nodes over two servers ({}), {} KVs; one server killed\n\
         | measure | value |\n|---|---|\n\
         | all nodes in sync at first after | {:.1} s |\n\
         | nodes on the killed server | {} |\n\
         | all nodes in sync again after the kill | {:.1} s |\n\
         | moved nodes resumed by deltas / digest / snapshot | {} / {} / {} |\n\
         | bytes the survivor sent per moved node | {:.0} |\n\
         | survivor RSS before / after | {:.1} / {:.1} MiB |\n\
         {}\n{}",
        r.nodes,
        if r.tls { "mutual TLS" } else { "plaintext" },
        r.kvs,
        r.sync_secs,
        r.moved,
        r.resync_secs,
        r.resumed_deltas,
        r.resumed_digest,
        r.resumed_snapshot,
        r.bytes_per_moved_node,
        mib(r.survivor_rss_before),
        mib(r.survivor_rss_after),
        done.verdict(a.nodes),
        if ok {
            "nothing lost"
        } else {
            "LOST: nodes diverged"
        },
    );
    Ok(Outcome {
        name: "failover",
        table,
        json: serde_json::to_value(&r)?,
        ok,
        timeline: timeline.stop(),
        latency: None,
    })
}
