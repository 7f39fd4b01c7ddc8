//! The `calico` scenario (issue 23): a fleet of N nodes speaking Calico's own Typha protocol
//! (`__swarm --calico SYNCER`, see `calico_node`) against the typha-server program on the
//! embedded datastore, the generated cluster and the steady churn; and, in the same
//! invocation, the same N nodes over our own protocol against a fresh server as the baseline
//! (`--no-baseline` skips it). Each side reports the time until all nodes are in sync, the
//! write-to-receipt latency of every churn update (the churn stamp is a label, which the
//! libcalico translation keeps in the workload endpoint's JSON), server CPU per delivery,
//! server RSS idle / connected / peak and per connection, bytes per KV (initial sync) and per
//! update (churn), from the server's `typha_bytes_sent_total`.
//!
//! Nothing lost, on the Calico side: before the churn, every node holds exactly as many keys
//! as the libcalico translation of the generated cluster gives the syncer type, and every full
//! node's digest over (Calico key, value) equals that translation's; after the churn every
//! node still holds that many keys, every full node agrees with the others, and every
//! (node, update) pair was delivered.
//!
//! `--calico-typha PATH` (Calico's own `calico-typha`) would run the same fleet against it;
//! it needs an etcd or Kubernetes datastore seeded with the cluster, which this scenario does
//! not set up yet: it says so and exits 2 after our side.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde::Serialize;
use typha_server::calico::libcalico::{SyncerType, calico_kvs};

use crate::child::Child;
use crate::harness::{self, Common, Outcome, Percentiles, Timeline, Workdir, mib};
use crate::procstat::usage;

/// Settings of a Calico-protocol run.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct CalicoArgs {
    /// Calico-protocol nodes (the generated cluster has as many).
    #[arg(long, default_value_t = 1000)]
    pub(crate) nodes: usize,
    /// Pods per node in the generated cluster.
    #[arg(long, default_value_t = 30)]
    pub(crate) pods_per_node: usize,
    /// The syncer type every node asks for: felix, bgp, tunnel-ip-allocation, node-status.
    #[arg(long, default_value = "felix")]
    pub(crate) syncer: String,
    /// Churn rate, updates per second.
    #[arg(long, default_value_t = 100.0)]
    pub(crate) rate: f64,
    /// Churn duration per side, seconds.
    #[arg(long, default_value_t = 30.0)]
    pub(crate) secs: f64,
    /// Skip the baseline (the same nodes over our own protocol).
    #[arg(long)]
    pub(crate) no_baseline: bool,
    /// Calico's own `calico-typha` executable, to drive with the same fleet (needs an etcd or
    /// Kubernetes datastore: not set up yet, so the run exits 2 after our side).
    #[arg(long, value_name = "PATH")]
    pub(crate) calico_typha: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) common: Common,
}

/// One side: one protocol against a fresh server.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Side {
    /// `calico/<syncer>` or `ours`.
    pub(crate) protocol: String,
    /// KVs a node receives (Calico KVs of the syncer type, or our cache's).
    pub(crate) kvs: u64,
    /// Seconds from starting the swarms until every node was connected.
    pub(crate) connect_secs: f64,
    /// Seconds from starting the swarms until every node was in sync.
    pub(crate) sync_secs: f64,
    /// Server bytes sent per node per KV during the initial sync.
    pub(crate) bytes_per_kv: f64,
    /// Server bytes sent per update per node during the churn.
    pub(crate) bytes_per_update: f64,
    /// Updates written.
    pub(crate) updates: u64,
    /// (node, update) pairs delivered.
    pub(crate) deliveries: u64,
    /// Expected: updates × nodes.
    pub(crate) deliveries_expected: u64,
    /// Write-to-receipt latency, ms.
    pub(crate) latency_ms: Percentiles,
    /// Server CPU seconds during the initial sync.
    pub(crate) server_cpu_sync_secs: f64,
    /// Server CPU seconds during the churn.
    pub(crate) server_cpu_churn_secs: f64,
    /// Server CPU per delivery during the churn, µs.
    pub(crate) server_cpu_per_delivery_us: f64,
    /// Swarm CPU seconds during the initial sync (the nodes' side of it).
    pub(crate) swarm_cpu_sync_secs: f64,
    /// Swarm CPU seconds during the churn.
    pub(crate) swarm_cpu_churn_secs: f64,
    /// Server RSS before any client, bytes.
    pub(crate) rss_idle: u64,
    /// With every node connected and in sync.
    pub(crate) rss_connected: u64,
    /// Peak.
    pub(crate) rss_peak: u64,
    /// (connected − idle) / nodes.
    pub(crate) rss_per_connection: f64,
    /// Idle RSS / KVs in the cache (an upper bound of memory per KV).
    pub(crate) rss_idle_per_kv: f64,
    /// Nodes whose state was exact before the churn (Calico side; ours: not checked there).
    pub(crate) nodes_exact_before_churn: usize,
    /// Nodes whose state was exact at the end.
    pub(crate) nodes_exact: usize,
    /// Full nodes (values hashed) and how many of them were exact at the end.
    pub(crate) full_nodes: usize,
    /// Of those, exact.
    pub(crate) full_nodes_exact: usize,
    /// Calico sessions that ended and reconnected before every node was in sync (reported:
    /// a node that reconnects gets a new snapshot, as calico-node would).
    pub(crate) reconnects_sync: u64,
    /// Calico sessions that ended and reconnected after (fails the run: a resent snapshot
    /// would count stamped values as deliveries).
    pub(crate) reconnects: u64,
    /// Nothing lost.
    pub(crate) ok: bool,
}

/// The expected Calico state of the generated cluster for `syncer`: (key count, a full node's
/// digest).
fn expected(nodes: usize, pods: usize, syncer: SyncerType) -> anyhow::Result<(usize, String)> {
    let spec = crate::cluster::cluster_spec(nodes, pods);
    let mut kvs: BTreeMap<String, bytes::Bytes> = BTreeMap::new();
    for r in spec.resources() {
        for (key, value) in typha_server::calico::convert::convert(&r)
            .with_context(|| format!("converting {}", r.id()))?
        {
            for c in calico_kvs(&key, &value) {
                if let (true, Some(v)) = (c.syncers.contains(syncer), c.value) {
                    kvs.insert(c.key.to_string(), v);
                }
            }
        }
    }
    let d = crate::calico_node::state_digest(kvs.iter().map(|(k, v)| (k.as_str(), &v[..])));
    Ok((kvs.len(), d))
}

/// Asks every swarm for its nodes' states: (all nodes by key count, full nodes by digest).
async fn digests(
    swarms: &mut [Child],
    event: &str,
) -> anyhow::Result<(
    BTreeMap<String, u64>,
    BTreeMap<String, u64>,
    Vec<serde_json::Value>,
)> {
    let (mut all, mut full, mut events) = (BTreeMap::new(), BTreeMap::new(), Vec::new());
    for s in swarms.iter_mut() {
        s.send(if event == "done" { "finish" } else { "digests" })
            .await?;
    }
    for s in swarms.iter_mut() {
        let v = s.expect(event, Duration::from_secs(300)).await?;
        for (field, into) in [("digests", &mut all), ("full_digests", &mut full)] {
            if let Some(o) = v[field].as_object() {
                for (d, n) in o {
                    *into.entry(d.clone()).or_default() += n.as_u64().unwrap_or(0);
                }
            }
        }
        events.push(v);
    }
    Ok((all, full, events))
}

async fn side(
    wd: &Workdir,
    a: &CalicoArgs,
    calico: Option<(SyncerType, usize, &str)>,
) -> anyhow::Result<(Side, hdrhistogram::Histogram<u64>)> {
    let c = &a.common;
    let mut server = wd
        .server(if calico.is_some() {
            "server-calico"
        } else {
            "server-ours"
        })
        .await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle = usage(server.pid()).context("server usage")?;
    let before = server.state().await?;
    let cpu0 = harness::cpu(&[server.pid()]);
    let extra: Vec<String> = match calico {
        Some((s, _, _)) => vec!["--calico".into(), s.as_str().into()],
        None => vec![],
    };
    let mut swarms = wd.swarms(&[&server.addr], a.nodes, 0, c, &extra)?;
    let limit = Duration::from_secs(1800);
    let what = if calico.is_some() { "calico" } else { "ours" };
    let (connect_secs, sync_secs) = tokio::try_join!(
        harness::wait_for(&swarms, "connected", a.nodes as u64, "connected", limit),
        harness::wait_for(&swarms, "in_sync", a.nodes as u64, what, limit),
    )?;
    let cpu_synced = harness::cpu(&[server.pid()]);
    let reconnects_sync: u64 = swarms
        .iter()
        .map(|s| s.progress_u64("calico_failures"))
        .sum();
    let swarm_pids: Vec<u32> = swarms.iter().map(|s| s.pid()).collect();
    let swarm_cpu_synced = harness::cpu(&swarm_pids);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let connected = usage(server.pid()).context("server usage")?;
    let synced = server.state().await?;
    let kvs = match calico {
        Some((_, n, _)) => n as u64,
        None => server.kvs,
    };
    let mut exact_before = 0;
    if let Some((_, n, want)) = calico {
        let (all, full, _) = digests(&mut swarms, "digests").await?;
        exact_before = all.get(&n.to_string()).copied().unwrap_or(0) as usize;
        let full_n: u64 = full.values().sum();
        let full_ok = full.get(want).copied().unwrap_or(0);
        if full_ok != full_n {
            exact_before = exact_before.saturating_sub((full_n - full_ok) as usize);
        }
    }
    harness::phase_histogram(&mut swarms).await?;

    let (cpu1, swarm_cpu1) = (harness::cpu(&[server.pid()]), harness::cpu(&swarm_pids));
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
    let (cpu2, swarm_cpu2) = (harness::cpu(&[server.pid()]), harness::cpu(&swarm_pids));
    let after = server.state().await?;
    let peak = usage(server.pid()).map(|u| u.peak_rss).unwrap_or(0);
    let bytes = |v: &serde_json::Value| v["bytes_sent"].as_u64().unwrap_or(0);

    let mut s = Side {
        protocol: calico.map_or("ours".into(), |(t, _, _)| format!("calico/{}", t.as_str())),
        kvs,
        connect_secs,
        sync_secs,
        bytes_per_kv: bytes(&synced).saturating_sub(bytes(&before)) as f64
            / (kvs.max(1) * a.nodes as u64) as f64,
        bytes_per_update: bytes(&after).saturating_sub(bytes(&synced)) as f64
            / (churn.updates.max(1) * a.nodes as u64) as f64,
        updates: churn.updates,
        deliveries: churn.deliveries,
        deliveries_expected: churn.updates * a.nodes as u64,
        latency_ms: churn.latency_ms,
        server_cpu_sync_secs: cpu_synced - cpu0,
        server_cpu_churn_secs: cpu2 - cpu1,
        server_cpu_per_delivery_us: (cpu2 - cpu1) * 1e6 / churn.deliveries.max(1) as f64,
        swarm_cpu_sync_secs: swarm_cpu_synced,
        swarm_cpu_churn_secs: swarm_cpu2 - swarm_cpu1,
        rss_idle: idle.rss,
        rss_connected: connected.rss,
        rss_peak: peak,
        rss_per_connection: (connected.rss as f64 - idle.rss as f64) / a.nodes as f64,
        rss_idle_per_kv: idle.rss as f64 / server.kvs.max(1) as f64,
        nodes_exact_before_churn: exact_before,
        ..Side::default()
    };
    match calico {
        Some((_, n, _)) => {
            let reconnects: u64 = swarms
                .iter()
                .map(|s| s.progress_u64("calico_failures"))
                .sum();
            let (all, full, events) = digests(&mut swarms, "done").await?;
            // The churn relabels existing endpoints: the key count stays the translation's.
            s.nodes_exact = all.get(&n.to_string()).copied().unwrap_or(0) as usize;
            s.full_nodes = full.values().sum::<u64>() as usize;
            // Full nodes hold the churned values too: they must all agree.
            s.full_nodes_exact = if full.len() == 1 { s.full_nodes } else { 0 };
            s.reconnects_sync = reconnects_sync;
            s.reconnects = reconnects.saturating_sub(reconnects_sync);
            let mut h = harness::histogram()?;
            for v in &events {
                h.add(harness::decode_histogram(
                    v["histogram"].as_str().unwrap_or_default(),
                )?)?;
            }
            for sw in swarms {
                sw.wait(Duration::from_secs(60)).await?;
            }
            s.ok = s.nodes_exact == a.nodes
                && s.nodes_exact_before_churn == a.nodes
                && s.full_nodes_exact == s.full_nodes
                && s.reconnects == 0
                && s.deliveries >= s.deliveries_expected;
        }
        None => {
            let digest = after["digest"].as_str().unwrap_or_default().to_owned();
            let done = harness::finish(swarms, &digest).await?;
            s.nodes_exact = done.exact;
            s.nodes_exact_before_churn = done.exact;
            s.full_nodes = done.full_nodes;
            s.full_nodes_exact = done.full_exact;
            s.ok = done.all_exact(a.nodes) && s.deliveries >= s.deliveries_expected;
        }
    }
    server.quit().await?;
    Ok((s, latency))
}

pub(crate) async fn run(a: CalicoArgs) -> anyhow::Result<Outcome> {
    a.common.own_server_only("calico")?;
    let Some(syncer) = SyncerType::from_hello(&a.syncer) else {
        bail!(
            "--syncer {}: not one of felix, bgp, tunnel-ip-allocation, node-status",
            a.syncer
        );
    };
    match &a.calico_typha {
        None => eprintln!(
            "calico: the side-by-side with Calico's own Typha needs --calico-typha PATH (and an \
             etcd or Kubernetes datastore); running our server only"
        ),
        Some(p) => eprintln!(
            "calico: --calico-typha {}: driving Calico's Typha needs an etcd or Kubernetes \
             datastore seeded with the cluster, which this scenario does not set up yet; \
             running our server only, then exiting 2",
            p.display()
        ),
    }
    let wd = Workdir::new(a.nodes, a.pods_per_node, a.common.plain)?.using(&a.common);
    let (n, want) = expected(a.nodes, a.pods_per_node, syncer)?;
    let timeline = Timeline::start();
    let started = Instant::now();
    let (cal, latency) = side(&wd, &a, Some((syncer, n, &want))).await?;
    let ours = if a.no_baseline {
        None
    } else {
        Some(side(&wd, &a, None).await?.0)
    };
    let ok = cal.ok && ours.as_ref().is_none_or(|o| o.ok);
    let table = table(&a, &cal, ours.as_ref(), started.elapsed());
    Ok(Outcome {
        name: "calico",
        table,
        json: serde_json::json!({
            "nodes": a.nodes,
            "tls": !a.common.plain,
            "calico": cal,
            "ours": ours,
            "calico_typha": serde_json::Value::Null,
        }),
        ok,
        timeline: timeline.stop(),
        latency: Some(latency),
    })
}

fn table(a: &CalicoArgs, c: &Side, o: Option<&Side>, took: Duration) -> String {
    let row = |name: &str, f: &dyn Fn(&Side) -> f64, fmt: &dyn Fn(f64) -> String| {
        let cv = f(c);
        match o {
            Some(o) => {
                let ov = f(o);
                let ratio = if ov > 0.0 {
                    format!("{:.2}", cv / ov)
                } else {
                    "-".into()
                };
                format!("| {name} | {} | {} | {ratio} |\n", fmt(cv), fmt(ov))
            }
            None => format!("| {name} | {} |\n", fmt(cv)),
        }
    };
    let ms = |v: f64| format!("{v:.1} ms");
    let secs = |v: f64| format!("{v:.2} s");
    let us = |v: f64| format!("{v:.2} µs");
    let mb = |v: f64| format!("{:.1} MiB", mib(v as u64));
    let kib = |v: f64| format!("{:.1} KiB", v / 1024.0);
    let b = |v: f64| format!("{v:.1} B");
    let n = |v: f64| format!("{v:.0}");
    let mut t = format!(
        "calico: {} nodes ({}), syncer {}, {} Calico KVs ({} in our cache), {} updates/s for {} s; \
         {:.0} s in all\n",
        a.nodes,
        if a.common.plain {
            "plaintext"
        } else {
            "mutual TLS"
        },
        a.syncer,
        c.kvs,
        o.map_or(0, |o| o.kvs),
        a.rate,
        a.secs,
        took.as_secs_f64(),
    );
    t += match o {
        Some(_) => {
            "| measure | Calico protocol | our protocol | Calico / ours |\n|---|---|---|---|\n"
        }
        None => "| measure | Calico protocol |\n|---|---|\n",
    };
    t += &row("all nodes connected after", &|s| s.connect_secs, &secs);
    t += &row("all nodes in sync after", &|s| s.sync_secs, &secs);
    t += &row(
        "server CPU, initial sync",
        &|s| s.server_cpu_sync_secs,
        &secs,
    );
    t += &row("swarm CPU, initial sync", &|s| s.swarm_cpu_sync_secs, &secs);
    t += &row("latency p50", &|s| s.latency_ms.p50, &ms);
    t += &row("latency p99", &|s| s.latency_ms.p99, &ms);
    t += &row("latency max", &|s| s.latency_ms.max, &ms);
    t += &row("server CPU, churn", &|s| s.server_cpu_churn_secs, &secs);
    t += &row(
        "server CPU per delivery",
        &|s| s.server_cpu_per_delivery_us,
        &us,
    );
    t += &row("swarm CPU, churn", &|s| s.swarm_cpu_churn_secs, &secs);
    t += &row("server RSS idle", &|s| s.rss_idle as f64, &mb);
    t += &row("server RSS connected", &|s| s.rss_connected as f64, &mb);
    t += &row("server RSS peak", &|s| s.rss_peak as f64, &mb);
    t += &row("server RSS per connection", &|s| s.rss_per_connection, &kib);
    t += &row("idle RSS per cached KV", &|s| s.rss_idle_per_kv, &b);
    t += &row("bytes per KV (initial sync)", &|s| s.bytes_per_kv, &b);
    t += &row("bytes per update per node", &|s| s.bytes_per_update, &b);
    t += &row("deliveries", &|s| s.deliveries as f64, &n);
    t += &row("deliveries expected", &|s| s.deliveries_expected as f64, &n);
    t += &row(
        "nodes exact after sync",
        &|s| s.nodes_exact_before_churn as f64,
        &n,
    );
    t += &row("nodes exact at the end", &|s| s.nodes_exact as f64, &n);
    t += &format!(
        "Calico side: {} of {} full nodes agree on (key, value) at the end; {} sessions \
         reconnected before all were in sync, {} after.\n",
        c.full_nodes_exact, c.full_nodes, c.reconnects_sync, c.reconnects
    );
    t += if c.ok && o.is_none_or(|o| o.ok) {
        "nothing lost"
    } else {
        "LOST: deliveries missing or nodes diverged (see the rows above)"
    };
    t
}
