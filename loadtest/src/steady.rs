//! The `steady` scenario: N nodes connect and sync, then the datastore churns at R updates per
//! second for T seconds. Reports latency from each datastore write to each node's receipt over
//! every (node, update) pair, updates delivered, bytes per update per node, CPU and memory; and
//! fails unless every node ends with the server's exact state.
//!
//! CPU is reported per delivery for the server and for the swarm processes side by side: the
//! swarm's nodes are mostly lean readers (see `lean`; `--sample-nodes` real typha-clients
//! measure latency), so the swarm costs less than the server and its backlog does not become
//! the measured latency.
//!
//! With `--baseline broadcaster` (the default) the same nodes, rate and seconds then run
//! against the bare TLS broadcaster (`__broadcast --steady`: one update per frame, a write per
//! frame while the connection keeps up, no cache, see `broadcast::steady`) with the same swarm code, and the result has both sides
//! and the ratios ours ÷ broadcaster of p99 latency and CPU per delivery.

use std::time::Duration;

use anyhow::Context;
use serde::Serialize;

use crate::child::Child;
use crate::harness::{self, Common, Outcome, Percentiles, Timeline, Workdir, mib};
use crate::procstat::{Settle, SettleWait, Settled, settled_usage, usage};
use crate::server::{Churn, Server};

/// What a steady run is compared with in the same invocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Baseline {
    /// The bare TLS broadcaster (`__broadcast --steady`), same nodes, rate and seconds.
    Broadcaster,
    /// Nothing.
    None,
}

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
    /// Then run the same nodes, rate and seconds against this, and report ours ÷ its p99
    /// latency and CPU per delivery (not run against an external server).
    #[arg(long, value_enum, default_value_t = Baseline::Broadcaster)]
    pub(crate) baseline: Baseline,
    /// Latency budgets to compare, milliseconds, comma-separated: after the run with the
    /// server's own settings, the same churn again against a fresh server per budget, each
    /// with that fixed batch window (`TYPHA_BATCHWINDOWMS`, `TYPHA_FANOUTFRAMESPERSEC=0`):
    /// server CPU per delivery against p99, beside the baseline.
    #[arg(long, value_delimiter = ',', value_name = "MS")]
    pub(crate) budgets: Vec<u64>,
    /// Seconds to wait once every node is in sync before the connected memory sample (then
    /// the same settling as the idle one), on both sides: what the initial syncs freed goes
    /// back to the system over jemalloc's 10 s decay, so the sample is of idle connected
    /// nodes, not of the syncs' leftovers.
    #[arg(long, default_value_t = 12.0)]
    pub(crate) connected_wait_secs: f64,
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
    /// Server CPU per delivery ((node, update) pair) during churn, microseconds.
    pub(crate) server_cpu_us_per_delivery: f64,
    /// Swarm CPU per delivery during churn, microseconds.
    pub(crate) swarm_cpu_us_per_delivery: f64,
    /// The same run against the bare broadcaster, if one ran.
    pub(crate) baseline: Option<BaselineResult>,
    /// The same churn with each fixed latency budget (`--budgets`).
    pub(crate) budgets: Vec<BudgetResult>,
    /// Server RSS before clients, once it settled, bytes.
    pub(crate) server_rss_idle: u64,
    /// How long that sample waited for the RSS to settle.
    #[serde(flatten)]
    pub(crate) idle_wait: SettleWait,
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

/// The same nodes, rate and seconds against the bare broadcaster.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct BaselineResult {
    /// Updates it wrote.
    pub(crate) updates_written: u64,
    /// (node, update) pairs delivered.
    pub(crate) deliveries: u64,
    /// Write-to-receipt latency percentiles, milliseconds (sample nodes).
    pub(crate) latency_ms: Percentiles,
    /// Bytes it wrote per update per node.
    pub(crate) bytes_per_update_per_node: f64,
    /// Its CPU seconds during churn.
    pub(crate) cpu_secs: f64,
    /// Swarm CPU seconds during churn.
    pub(crate) swarm_cpu_secs: f64,
    /// Its CPU per delivery, microseconds.
    pub(crate) cpu_us_per_delivery: f64,
    /// Swarm CPU per delivery, microseconds.
    pub(crate) swarm_cpu_us_per_delivery: f64,
    /// Its RSS before the nodes connected, bytes.
    pub(crate) rss_idle: u64,
    /// Its RSS with every node connected and in sync, bytes.
    pub(crate) rss_connected: u64,
    /// Its memory per connected node (a bare mutual-TLS connection), bytes.
    pub(crate) bytes_per_node: f64,
    /// Our server's memory per connected node ÷ its.
    pub(crate) bytes_per_node_ratio: f64,
    /// Connections it dropped for falling behind.
    pub(crate) dropped: u64,
    /// How many nodes ended with its exact state.
    #[serde(flatten)]
    pub(crate) exact: harness::Exactness,
    /// Our p99 ÷ its p99.
    pub(crate) p99_ratio: f64,
    /// Our server's CPU per delivery ÷ its.
    pub(crate) cpu_ratio: f64,
    /// Whether every node ended with its exact state (nothing lost). Deliveries short of
    /// the expected number only mean they came after the wait (the churn's seconds plus 60):
    /// a slow broadcaster does not fail the run, a lossy one does.
    pub(crate) nothing_lost: bool,
    /// Whether every delivery arrived within the wait.
    pub(crate) all_delivered_in_time: bool,
}

/// One latency budget's run: a fresh server whose batch window is fixed at the budget.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct BudgetResult {
    /// The batch window, milliseconds.
    pub(crate) window_ms: u64,
    /// Write-to-receipt latency percentiles, milliseconds.
    pub(crate) latency_ms: Percentiles,
    /// Server CPU per delivery during churn, microseconds.
    pub(crate) server_cpu_us_per_delivery: f64,
    /// Swarm CPU per delivery during churn, microseconds.
    pub(crate) swarm_cpu_us_per_delivery: f64,
    /// Bytes the server sent per update per node during churn.
    pub(crate) bytes_per_update_per_node: f64,
    /// Deliveries, and how many were expected.
    pub(crate) deliveries: u64,
    /// Nodes × updates written.
    pub(crate) deliveries_expected: u64,
    /// Every node ended with the server's exact state.
    pub(crate) nothing_lost: bool,
    /// p99 ÷ the baseline's (0 without one).
    pub(crate) p99_ratio: f64,
    /// Server CPU per delivery ÷ the baseline's (0 without one).
    pub(crate) cpu_ratio: f64,
}

impl BudgetResult {
    /// The figures of run `s` with window `window_ms`, not yet compared with a baseline.
    fn of(window_ms: u64, s: &SteadyResult, nothing_lost: bool) -> Self {
        BudgetResult {
            window_ms,
            latency_ms: s.latency_ms.clone(),
            server_cpu_us_per_delivery: s.server_cpu_us_per_delivery,
            swarm_cpu_us_per_delivery: s.swarm_cpu_us_per_delivery,
            bytes_per_update_per_node: s.bytes_per_update_per_node,
            deliveries: s.deliveries,
            deliveries_expected: s.deliveries_expected,
            nothing_lost,
            p99_ratio: 0.0,
            cpu_ratio: 0.0,
        }
    }

    /// Its p99 and server CPU per delivery ÷ the baseline's.
    fn compare(&mut self, b: &BaselineResult) {
        self.p99_ratio = self.latency_ms.p99 / b.latency_ms.p99.max(1e-9);
        self.cpu_ratio = self.server_cpu_us_per_delivery / b.cpu_us_per_delivery.max(1e-9);
    }
}

/// CPU seconds per delivery, in microseconds.
fn per_delivery(cpu_secs: f64, deliveries: u64) -> f64 {
    cpu_secs * 1e6 / deliveries.max(1) as f64
}

/// Runs the steady churn against the bare broadcaster with the same swarm settings.
async fn broadcaster(
    wd: &Workdir,
    a: &SteadyArgs,
    timeline: &Timeline,
) -> anyhow::Result<(BaselineResult, hdrhistogram::Histogram<u64>)> {
    let port = crate::server::free_port()?;
    let mut args = vec![
        "__broadcast".to_owned(),
        "--steady".into(),
        "--listen".into(),
        format!("127.0.0.1:{port}"),
    ];
    if let Some(d) = wd.tls_dir() {
        args.extend(["--tls-dir".into(), d.display().to_string()]);
    }
    let mut b = Child::spawn("broadcaster (steady)", &args)?;
    b.expect("ready", Duration::from_secs(30)).await?;
    let pid = b.pid();
    timeline.add_server(pid);
    // It holds nothing but its connections: no cache whose loading memory could still be
    // returned, so the idle figure is settled at once.
    let idle = usage(pid).context("broadcaster usage")?;
    let addr = format!("localhost:{port}");
    let mut swarms = wd.swarms(&[&addr], a.nodes, 0, &a.common, &[])?;
    timeline.add_swarms(&swarms);
    harness::wait_for(
        &swarms,
        "in_sync",
        a.nodes as u64,
        "in sync (broadcaster)",
        Duration::from_secs(1800),
    )
    .await?;
    // Connected and idle (nothing is written until the churn), once the memory the initial
    // syncs freed has gone back: the same settling as the idle sample, on both sides.
    let connected = connected_usage(pid, a.connected_wait_secs)
        .await
        .context("broadcaster usage")?;
    harness::phase_histogram(&mut swarms).await?;
    let swarm_pids: Vec<u32> = swarms.iter().map(|s| s.pid()).collect();
    let (cpu0, swarm_cpu0) = (harness::cpu(&[pid]), harness::cpu(&swarm_pids));
    let b = std::sync::Arc::new(tokio::sync::Mutex::new(b));
    let (shape, rate, secs) = (wd.shape(), a.rate, a.secs);
    let writer = {
        let b = b.clone();
        Churn::spawn(async move {
            let mut b = b.lock().await;
            b.send(&format!("steady {rate} {secs} {} {}", shape.0, shape.1))
                .await?;
            let v = b
                .expect("steadied", Duration::from_secs_f64(secs + 120.0))
                .await?;
            Ok(v["updates"].as_u64().unwrap_or(0))
        })
    };
    let (churn, latency) = harness::churn_phase(
        pid,
        writer,
        &mut swarms,
        a.nodes,
        rate,
        secs,
        "delivered (broadcaster)",
    )
    .await?;
    let (cpu1, swarm_cpu1) = (harness::cpu(&[pid]), harness::cpu(&swarm_pids));
    let state = {
        let mut b = b.lock().await;
        b.send("state").await?;
        b.expect("state", Duration::from_secs(30)).await?
    };
    let digest = state["digest"].as_str().unwrap_or_default().to_owned();
    let done = harness::finish(swarms, &digest).await?;
    if let Ok(b) = std::sync::Arc::try_unwrap(b) {
        let mut b = b.into_inner();
        b.send("quit").await?;
        b.wait(Duration::from_secs(60)).await?;
    }
    let bytes = state["bytes_written"].as_u64().unwrap_or(0);
    let cpu = cpu1 - cpu0;
    let swarm_cpu = swarm_cpu1 - swarm_cpu0;
    let nothing_lost = done.all_exact(a.nodes);
    let all_delivered_in_time = churn.deliveries >= churn.updates * a.nodes as u64;
    Ok((
        BaselineResult {
            updates_written: churn.updates,
            deliveries: churn.deliveries,
            latency_ms: churn.latency_ms,
            bytes_per_update_per_node: bytes as f64
                / (churn.updates.max(1) * a.nodes as u64) as f64,
            cpu_secs: cpu,
            swarm_cpu_secs: swarm_cpu,
            rss_idle: idle.rss,
            rss_connected: connected.rss,
            bytes_per_node: (connected.rss as f64 - idle.rss as f64) / a.nodes as f64,
            bytes_per_node_ratio: 0.0,
            cpu_us_per_delivery: per_delivery(cpu, churn.deliveries),
            swarm_cpu_us_per_delivery: per_delivery(swarm_cpu, churn.deliveries),
            dropped: state["dropped"].as_u64().unwrap_or(0),
            exact: done.exactness(),
            p99_ratio: 0.0,
            cpu_ratio: 0.0,
            nothing_lost,
            all_delivered_in_time,
        },
        latency,
    ))
}

/// Our server's run: a fresh server (with `env` over the defaults), the nodes synced, the
/// churn, and every node's state compared with the server's.
async fn ours(
    wd: &Workdir,
    a: &SteadyArgs,
    timeline: &Timeline,
    env: &[(&str, String)],
) -> anyhow::Result<(
    SteadyResult,
    harness::Finished,
    hdrhistogram::Histogram<u64>,
)> {
    let external = a.common.server.server_addr.is_some();
    let mut server = if external {
        Server::external(&a.common.server).await?
    } else {
        wd.server_tuned("server", env).await?
    };
    timeline.add_server(server.pid());
    // An external server's process is not ours to read: its CPU and memory show as 0.
    let idle = if external {
        Settled::default()
    } else {
        settled_usage(server.pid(), Settle::IDLE)
            .await
            .context("server usage")?
    };

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
    let connected = if external {
        Default::default()
    } else {
        connected_usage(server.pid(), a.connected_wait_secs)
            .await
            .context("server usage")?
    };
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
        server_cpu_us_per_delivery: per_delivery(cpu1 - cpu0, churn.deliveries),
        swarm_cpu_us_per_delivery: per_delivery(swarm_cpu1 - swarm_cpu0, churn.deliveries),
        baseline: None,
        budgets: Vec::new(),
        server_rss_idle: idle.usage.rss,
        idle_wait: idle.wait,
        server_rss_connected: connected.rss,
        server_bytes_per_node: (connected.rss as f64 - idle.usage.rss as f64) / a.nodes as f64,
        server_peak_rss: peak,
        exact: done.exactness(),
    };
    Ok((r, done, latency))
}

pub(crate) async fn run(a: SteadyArgs) -> anyhow::Result<Outcome> {
    if !a.budgets.is_empty() {
        a.common.own_server_only("steady --budgets")?;
    }
    let wd = Workdir::new(a.nodes, a.pods_per_node, a.common.plain)?.using(&a.common);
    let timeline = Timeline::start();
    let (mut r, done, latency) = ours(&wd, &a, &timeline, &[]).await?;
    let mut ok = done.all_exact(a.nodes) && r.deliveries >= r.deliveries_expected;
    for &window_ms in &a.budgets {
        let env = [
            ("TYPHA_BATCHWINDOWMS", window_ms.to_string()),
            ("TYPHA_FANOUTFRAMESPERSEC", "0".to_owned()),
        ];
        let (b, done, _) = ours(&wd, &a, &timeline, &env).await?;
        let nothing_lost = done.all_exact(a.nodes);
        ok &= nothing_lost && b.deliveries >= b.deliveries_expected;
        r.budgets
            .push(BudgetResult::of(window_ms, &b, nothing_lost));
    }
    if a.baseline == Baseline::Broadcaster && !r.server_external {
        let (mut b, _) = broadcaster(&wd, &a, &timeline).await?;
        b.p99_ratio = r.latency_ms.p99 / b.latency_ms.p99.max(1e-9);
        b.cpu_ratio = r.server_cpu_us_per_delivery / b.cpu_us_per_delivery.max(1e-9);
        for x in &mut r.budgets {
            x.compare(&b);
        }
        b.bytes_per_node_ratio = r.server_bytes_per_node / b.bytes_per_node.max(1.0);
        ok &= b.nothing_lost;
        r.baseline = Some(b);
    }
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
    let mut t = format!(
        "steady: {} nodes ({}), {} KVs\n\
         | measure | value |\n|---|---|\n\
         | all nodes in sync after | {:.1} s |\n\
         | updates written / delivered / expected | {} / {} / {} |\n\
         | write-to-receipt latency p50 / p90 / p99 / max | {} |\n\
         | bytes on the wire per update per node | {:.1} |\n\
         | server CPU during churn | {:.2} s ({:.2} µs per delivery) |\n\
         | swarm CPU during churn | {:.2} s ({:.2} µs per delivery; {} sample typha-clients, {} lean nodes) |\n\
         | server RSS idle / connected / peak | {:.1} / {:.1} / {:.1} MiB |\n\
         | server RSS idle: waited to settle | {} |\n\
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
        r.server_cpu_us_per_delivery,
        r.swarm_cpu_secs,
        r.swarm_cpu_us_per_delivery,
        r.exact.sample_nodes,
        r.exact.lean_nodes,
        mib(r.server_rss_idle),
        mib(r.server_rss_connected),
        mib(r.server_peak_rss),
        r.idle_wait,
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
    if let Some(b) = &r.baseline {
        t.push_str(&format!(
            "\n\nthe same against the bare TLS broadcaster (one update per frame; a write per frame unless behind)\n\
             | measure | typha-server | bare broadcaster | ours ÷ broadcaster |\n|---|---|---|---|\n\
             | write-to-receipt latency p50 / p99 | {:.1} / {:.1} ms | {:.1} / {:.1} ms | {:.2} / {:.2} |\n\
             | sender CPU per delivery | {:.2} µs | {:.2} µs | {:.2} |\n\
             | swarm CPU per delivery | {:.2} µs | {:.2} µs | {:.2} |\n\
             | bytes on the wire per update per node | {:.1} | {:.1} | {:.2} |\n\
             | memory per connected node (RSS connected − idle) | {:.1} KiB | {:.1} KiB | {:.2} |\n\
             | delivered / expected | {} / {} | {} / {} | |\n\
             broadcaster: {}",
            r.latency_ms.p50,
            r.latency_ms.p99,
            b.latency_ms.p50,
            b.latency_ms.p99,
            r.latency_ms.p50 / b.latency_ms.p50.max(1e-9),
            b.p99_ratio,
            r.server_cpu_us_per_delivery,
            b.cpu_us_per_delivery,
            b.cpu_ratio,
            r.swarm_cpu_us_per_delivery,
            b.swarm_cpu_us_per_delivery,
            r.swarm_cpu_us_per_delivery / b.swarm_cpu_us_per_delivery.max(1e-9),
            r.bytes_per_update_per_node,
            b.bytes_per_update_per_node,
            r.bytes_per_update_per_node / b.bytes_per_update_per_node.max(1e-9),
            r.server_bytes_per_node / 1024.0,
            b.bytes_per_node / 1024.0,
            b.bytes_per_node_ratio,
            r.deliveries,
            r.deliveries_expected,
            b.deliveries,
            b.updates_written * r.nodes as u64,
            if b.nothing_lost && b.all_delivered_in_time {
                "nothing lost".to_owned()
            } else if b.nothing_lost {
                "nothing lost, but not every delivery within the churn's seconds + 60 (the \
                 latency histogram has only those)"
                    .to_owned()
            } else {
                format!(
                    "LOST: {} of {} nodes exact, {} connections dropped",
                    b.exact.nodes_exact, r.nodes, b.dropped
                )
            },
        ));
    }
    if !r.budgets.is_empty() {
        t.push_str(&budgets_table(r));
    }
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

/// The latency budgets beside the server's own settings and the baseline: server CPU per
/// delivery against p99.
fn budgets_table(r: &SteadyResult) -> String {
    let row = |name: &str, x: &BudgetResult| {
        let ratio = |v: f64| match &r.baseline {
            Some(_) => format!("{v:.2}"),
            None => "-".to_owned(),
        };
        let exact = x.nothing_lost && x.deliveries >= x.deliveries_expected;
        format!(
            "| {name} | {:.1} / {:.1} / {:.1} ms | {:.2} µs | {:.2} µs | {:.1} | {} | {} | {} |\n",
            x.latency_ms.p50,
            x.latency_ms.p99,
            x.latency_ms.max,
            x.server_cpu_us_per_delivery,
            x.swarm_cpu_us_per_delivery,
            x.bytes_per_update_per_node,
            ratio(x.p99_ratio),
            ratio(x.cpu_ratio),
            if exact { "nothing lost" } else { "LOST" },
        )
    };
    let mut t = "\n\nlatency budgets: the same churn against a fresh server per budget, its batch \
                 window fixed there (TYPHA_BATCHWINDOWMS, TYPHA_FANOUTFRAMESPERSEC=0)\n\
                 | budget | p50 / p99 / max | server CPU per delivery | swarm CPU per delivery | \
                 bytes per update per node | p99 ÷ broadcaster | server CPU ÷ broadcaster | |\n\
                 |---|---|---|---|---|---|---|---|\n"
        .to_owned();
    let mut own = BudgetResult::of(0, r, r.exact.nodes_exact == r.nodes);
    if let Some(b) = &r.baseline {
        own.compare(b);
    }
    t += &row("the server's own settings", &own);
    for b in &r.budgets {
        t += &row(&format!("{} ms", b.window_ms), b);
    }
    if let Some(b) = &r.baseline {
        t += &format!(
            "| bare broadcaster | {:.1} / {:.1} / {:.1} ms | {:.2} µs | {:.2} µs | {:.1} | 1.00 | 1.00 | {} |\n",
            b.latency_ms.p50,
            b.latency_ms.p99,
            b.latency_ms.max,
            b.cpu_us_per_delivery,
            b.swarm_cpu_us_per_delivery,
            b.bytes_per_update_per_node,
            if b.nothing_lost {
                "nothing lost"
            } else {
                "LOST"
            },
        );
    }
    t
}

/// The memory of `pid` with every node connected and idle: `wait_secs` after the last node
/// was in sync (what the initial syncs freed goes back over the allocator's decay), then
/// settled as the idle sample is, so both sides of a comparison are sampled alike.
async fn connected_usage(pid: u32, wait_secs: f64) -> Option<crate::procstat::Usage> {
    tokio::time::sleep(Duration::from_secs_f64(wait_secs.max(0.0))).await;
    Some(settled_usage(pid, Settle::IDLE).await?.usage)
}
