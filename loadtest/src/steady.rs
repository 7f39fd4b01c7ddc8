//! The `steady` scenario: N nodes connect and sync, then the datastore churns at R updates per
//! second for T seconds. Reports latency from each datastore write to each node's receipt over
//! every (node, update) pair, updates delivered, bytes per update per node, CPU and memory; and
//! fails unless every node ends with the server's exact state.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use hdrhistogram::Histogram;
use hdrhistogram::serialization::Deserializer;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use crate::child::Child;
use crate::procstat::usage;

/// Settings of a steady run.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct SteadyArgs {
    /// Simulated nodes.
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
    /// Most nodes per swarm process (each node is one connection; 20,000 files per process).
    #[arg(long, default_value_t = 5000)]
    pub(crate) nodes_per_swarm: usize,
    /// Plaintext instead of mutual TLS.
    #[arg(long)]
    pub(crate) plain: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub(crate) json: bool,
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
    /// Nodes whose final state equals the server's (by digest).
    pub(crate) nodes_exact: usize,
    /// Nodes that kept the full store and recomputed the digest themselves.
    pub(crate) full_nodes: usize,
    /// Of those, how many ended exact.
    pub(crate) full_nodes_exact: usize,
}

/// Latency percentiles, milliseconds.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Percentiles {
    /// 50th.
    pub p50: f64,
    /// 90th.
    pub p90: f64,
    /// 99th.
    pub p99: f64,
    /// Largest.
    pub(crate) max: f64,
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

fn bar(len: u64, what: &str) -> ProgressBar {
    let b = ProgressBar::new(len);
    b.set_style(
        ProgressStyle::with_template("{prefix:>10} [{bar:40}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    b.set_prefix(what.to_owned());
    b
}

/// Writes the generated cluster as manifests of 250 resources each (`List`s): small files keep
/// the server's transient parsing memory small.
pub(crate) fn write_cluster(dir: &Path, nodes: usize, pods: usize) -> anyhow::Result<()> {
    let spec = typha_server::sample::Spec {
        nodes,
        pods_per_node: pods,
        namespaces: 20,
        deployments_per_namespace: 8,
        policies: 200,
        seed: 1,
    };
    std::fs::create_dir_all(dir)?;
    for (i, chunk) in spec.resources().chunks(250).enumerate() {
        let items: Vec<serde_json::Value> = chunk.iter().map(|r| r.to_json()).collect();
        let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items});
        std::fs::write(
            dir.join(format!("cluster-{i:05}.json")),
            serde_json::to_vec(&list)?,
        )?;
    }
    Ok(())
}

pub(crate) async fn run(a: SteadyArgs) -> anyhow::Result<SteadyResult> {
    let work = std::env::temp_dir().join(format!("typha-loadtest-{}", std::process::id()));
    let _cleanup = Cleanup(work.clone());
    let manifests = work.join("manifests");
    write_cluster(&manifests, a.nodes, a.pods_per_node).context("writing the cluster manifests")?;
    let tls_dir = work.join("tls");
    if !a.plain {
        typha_server::pki::write_bundle(&tls_dir, &["localhost", "127.0.0.1"], "typha-client")
            .map_err(anyhow::Error::msg)?;
    }
    let port = free_port()?;
    let mut server_args = vec![
        "__server".to_owned(),
        "--dir".into(),
        manifests.display().to_string(),
        "--listen".into(),
        format!("127.0.0.1:{port}"),
        "--nodes".into(),
        a.nodes.to_string(),
        "--pods".into(),
        a.pods_per_node.to_string(),
    ];
    if !a.plain {
        server_args.extend(["--tls-dir".into(), tls_dir.display().to_string()]);
    }
    let mut server = Child::spawn("server", &server_args)?;
    let ready = server.expect("ready", Duration::from_secs(600)).await?;
    let kvs = ready["kvs"].as_u64().unwrap_or(0);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle = usage(server.pid()).context("server usage")?;

    // Swarms.
    let mut swarms = Vec::new();
    let mut first = 0;
    while first < a.nodes {
        let n = a.nodes_per_swarm.min(a.nodes - first);
        let mut args = vec![
            "__swarm".to_owned(),
            "--server".into(),
            format!("localhost:{port}"),
            "--nodes".into(),
            n.to_string(),
            "--first".into(),
            first.to_string(),
        ];
        if !a.plain {
            args.extend(["--tls-dir".into(), tls_dir.display().to_string()]);
        }
        swarms.push(Child::spawn(&format!("swarm {}", swarms.len()), &args)?);
        first += n;
    }
    let started = Instant::now();
    let sync_bar = bar(a.nodes as u64, "in sync");
    loop {
        let n: u64 = swarms.iter().map(|s| s.progress_u64("in_sync")).sum();
        sync_bar.set_position(n);
        if n >= a.nodes as u64 {
            break;
        }
        if started.elapsed() > Duration::from_secs(600) {
            bail!("only {n} of {} nodes in sync after 10 minutes", a.nodes);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    sync_bar.finish();
    let sync_secs = started.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let connected = usage(server.pid()).context("server usage")?;

    // Churn.
    server.send("state").await?;
    let before = server.expect("state", Duration::from_secs(10)).await?;
    let cpu0 = usage(server.pid()).map(|u| u.cpu_secs).unwrap_or(0.0);
    let swarm_cpu0: f64 = swarms
        .iter()
        .filter_map(|s| usage(s.pid()))
        .map(|u| u.cpu_secs)
        .sum();
    let churn0: u64 = swarms.iter().map(|s| s.progress_u64("churn_updates")).sum();
    server.send(&format!("churn {} {}", a.rate, a.secs)).await?;
    let want = (a.rate * a.secs).round() as u64 * a.nodes as u64;
    let churn_bar = bar(want, "delivered");
    let churn_started = Instant::now();
    let drain_limit = Duration::from_secs_f64(a.secs) + Duration::from_secs(60);
    loop {
        let got: u64 = swarms
            .iter()
            .map(|s| s.progress_u64("churn_updates"))
            .sum::<u64>()
            - churn0;
        churn_bar.set_position(got);
        if got >= want || churn_started.elapsed() > drain_limit {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    churn_bar.finish();
    server.send("wait-churn").await?;
    let churned = server.expect("churned", Duration::from_secs(60)).await?["updates"]
        .as_u64()
        .unwrap_or(0);
    let cpu1 = usage(server.pid()).map(|u| u.cpu_secs).unwrap_or(0.0);
    let swarm_cpu1: f64 = swarms
        .iter()
        .filter_map(|s| usage(s.pid()))
        .map(|u| u.cpu_secs)
        .sum();
    // Let the last frames land, then compare every node's state with the server's.
    tokio::time::sleep(Duration::from_secs(2)).await;
    server.send("state").await?;
    let after = server.expect("state", Duration::from_secs(10)).await?;
    let server_digest = after["digest"].as_str().unwrap_or_default().to_owned();
    let peak = usage(server.pid()).map(|u| u.peak_rss).unwrap_or(0);

    let mut merged = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3)?;
    let mut exact = 0;
    let mut full_exact = 0;
    let mut full_nodes = 0;
    let mut deliveries = 0;
    for s in &mut swarms {
        s.send("finish").await?;
    }
    for mut s in swarms {
        let done = s.expect("done", Duration::from_secs(120)).await?;
        deliveries += done["churn_updates"].as_u64().unwrap_or(0);
        if let Some(d) = done["digests"].as_object() {
            exact += d.get(&server_digest).and_then(|v| v.as_u64()).unwrap_or(0) as usize;
        }
        if let Some(d) = done["full_digests"].as_object() {
            full_nodes += d.values().filter_map(|v| v.as_u64()).sum::<u64>() as usize;
            full_exact += d.get(&server_digest).and_then(|v| v.as_u64()).unwrap_or(0) as usize;
        }
        let hex = done["histogram"].as_str().unwrap_or_default();
        let bytes: Vec<u8> = (0..hex.len() / 2)
            .filter_map(|i| u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok())
            .collect();
        let h: Histogram<u64> = Deserializer::new()
            .deserialize(&mut &bytes[..])
            .context("swarm histogram")?;
        merged.add(&h)?;
        s.wait(Duration::from_secs(30)).await?;
    }
    server.send("quit").await?;
    server.wait(Duration::from_secs(30)).await?;

    let sent = after["bytes_sent"]
        .as_u64()
        .unwrap_or(0)
        .saturating_sub(before["bytes_sent"].as_u64().unwrap_or(0));
    let pct = |q: f64| merged.value_at_quantile(q) as f64 / 1000.0;
    let result = SteadyResult {
        nodes: a.nodes,
        kvs,
        tls: !a.plain,
        sync_secs,
        updates_written: churned,
        deliveries: deliveries - churn0,
        deliveries_expected: churned * a.nodes as u64,
        latency_ms: Percentiles {
            p50: pct(0.5),
            p90: pct(0.9),
            p99: pct(0.99),
            max: merged.max() as f64 / 1000.0,
        },
        bytes_per_update_per_node: sent as f64 / (churned.max(1) * a.nodes as u64) as f64,
        server_cpu_secs: cpu1 - cpu0,
        swarm_cpu_secs: swarm_cpu1 - swarm_cpu0,
        server_rss_idle: idle.rss,
        server_rss_connected: connected.rss,
        server_bytes_per_node: (connected.rss as f64 - idle.rss as f64) / a.nodes as f64,
        server_peak_rss: peak,
        nodes_exact: exact,
        full_nodes,
        full_nodes_exact: full_exact,
    };
    Ok(result)
}

/// Removes the work directory when the run ends.
struct Cleanup(std::path::PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The result as a table.
pub(crate) fn table(r: &SteadyResult) -> String {
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    let lost = r.deliveries_expected.saturating_sub(r.deliveries);
    format!(
        "steady: {} nodes ({}), {} KVs\n\
         | measure | value |\n|---|---|\n\
         | all nodes in sync after | {:.1} s |\n\
         | updates written / delivered / expected | {} / {} / {} |\n\
         | write-to-receipt latency p50 / p90 / p99 / max | {:.1} / {:.1} / {:.1} / {:.1} ms |\n\
         | bytes on the wire per update per node | {:.1} |\n\
         | server CPU during churn | {:.2} s |\n\
         | swarm CPU during churn | {:.2} s |\n\
         | server RSS idle / connected / peak | {:.1} / {:.1} / {:.1} MiB |\n\
         | server memory per connected node | {:.1} KiB |\n\
         | nodes with the server's exact state | {} of {} ({} of {} full-store nodes recomputed it) |\n\
         {}",
        r.nodes,
        if r.tls { "mutual TLS" } else { "plaintext" },
        r.kvs,
        r.sync_secs,
        r.updates_written,
        r.deliveries,
        r.deliveries_expected,
        r.latency_ms.p50,
        r.latency_ms.p90,
        r.latency_ms.p99,
        r.latency_ms.max,
        r.bytes_per_update_per_node,
        r.server_cpu_secs,
        r.swarm_cpu_secs,
        mib(r.server_rss_idle),
        mib(r.server_rss_connected),
        mib(r.server_peak_rss),
        r.server_bytes_per_node / 1024.0,
        r.nodes_exact,
        r.nodes,
        r.full_nodes_exact,
        r.full_nodes,
        if lost == 0 && r.nodes_exact == r.nodes && r.full_nodes_exact == r.full_nodes {
            "nothing lost".to_owned()
        } else {
            format!(
                "LOST: {lost} deliveries missing, {} nodes diverged",
                r.nodes - r.nodes_exact
            )
        },
    )
}
