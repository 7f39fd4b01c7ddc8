//! The `calico` scenario (issue 23): a fleet of N nodes speaking Calico's own Typha protocol
//! (`__swarm --calico SYNCER`, see `calico_node`) against the typha-server program, the
//! generated cluster and the steady churn; in the same invocation the same N nodes over our
//! own protocol against a fresh server as the baseline (`--no-baseline` skips it); and, with
//! `--calico-typha PATH`, the same Calico-protocol fleet against Calico's own `calico-typha`
//! on the same datastore (`--datastore etcd` or `kubernetes`: Calico's Typha cannot read the
//! embedded one). Each side starts its server fresh, alone on the machine, and reports the
//! time until all nodes are in sync, the write-to-receipt latency of every churn update (the
//! churn stamp is a label, which both servers keep in the workload endpoint's JSON), server
//! CPU per delivery, server RSS idle / connected / peak and per connection, and the bytes the
//! server wrote (`wchar` of /proc, the same measure for both programs) per KV in the initial
//! sync and per update in the churn.
//!
//! What each server sends is checked first, on the freshly seeded datastore: our Rust
//! Calico-protocol client (`typha_client::calico`) takes every syncer type's state from our
//! server, which must equal the libcalico translation of the generated cluster key for key
//! (embedded and etcd; the Kubernetes datastore seeds pods, not the translated resources);
//! with `--calico-typha`, it takes the same from Calico's Typha and the two are compared: keys
//! only one sends, and values that differ (JSON compared as values; revisions left out, they
//! are the datastore's).
//!
//! Nothing lost, per Calico-protocol side: before the churn every node holds exactly the keys
//! a client took from that server just before the fleet started, and every full node's digest
//! over (key, value) equals that client's; after the churn the same holds against a second
//! client's state, and every (node, update) pair was delivered.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use serde::Serialize;
use typha_client::calico::{self, CalicoHello, Until};
use typha_client::tls::ClientTls;
use typha_server::calico::libcalico::{SyncerType, builtin_kvs, calico_kvs};

use crate::child::Child;
use crate::harness::{self, Common, Outcome, Percentiles, Timeline, Workdir, mib};
use crate::procstat::{Settle, SettleWait, settled_usage, usage};
use crate::server::Server;
use crate::store::{Store, StoreKind};

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
    /// Skip the crash at the end of each Calico-protocol side (the server SIGKILLed and
    /// started again on the same ports, every node reconnecting and resyncing).
    #[arg(long)]
    pub(crate) no_kill: bool,
    /// Calico's own `calico-typha` executable: its states are compared with ours and the same
    /// fleet is run against it (needs `--datastore`).
    #[arg(long, value_name = "PATH")]
    pub(crate) calico_typha: Option<PathBuf>,
    /// A real datastore, seeded with the generated cluster, that every server reads: `etcd`
    /// (Calico's layout) or `kubernetes` (a real kube-apiserver; peers/build). Default: the
    /// embedded datastore (our server only).
    #[arg(long, value_enum)]
    pub(crate) datastore: Option<StoreKind>,
    #[command(flatten)]
    pub(crate) common: Common,
}

/// One side: one protocol against a fresh server.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Side {
    /// `typha-server` or `calico-typha`.
    pub(crate) server: String,
    /// `calico/<syncer>` or `ours`.
    pub(crate) protocol: String,
    /// KVs a node receives (Calico KVs of the syncer type, or our cache's).
    pub(crate) kvs: u64,
    /// Seconds from starting the swarms until every node was connected.
    pub(crate) connect_secs: f64,
    /// Seconds from starting the swarms until every node was in sync.
    pub(crate) sync_secs: f64,
    /// Bytes the server wrote (`wchar`) per node per KV during the initial sync.
    pub(crate) bytes_per_kv: f64,
    /// Bytes the server wrote per update per node during the churn.
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
    /// Swarm CPU per delivery during the churn, µs (beside the server's: what the simulated
    /// nodes cost, which must stay well below it for the server to be what is measured).
    pub(crate) swarm_cpu_per_delivery_us: f64,
    /// Swarm CPU per KV per node in the initial sync, µs.
    pub(crate) swarm_cpu_per_kv_us: f64,
    /// Server RSS before any client, once it settled, bytes.
    pub(crate) rss_idle: u64,
    /// How long that sample waited for the RSS to settle.
    #[serde(flatten)]
    pub(crate) idle_wait: SettleWait,
    /// With every node connected and in sync.
    pub(crate) rss_connected: u64,
    /// Peak.
    pub(crate) rss_peak: u64,
    /// (connected − idle) / nodes.
    pub(crate) rss_per_connection: f64,
    /// Idle RSS / KVs a node receives (an upper bound of memory per KV).
    pub(crate) rss_idle_per_kv: f64,
    /// Nodes whose state was exact before the churn (Calico protocol; ours: not checked there).
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
    /// Connections the server closed, by reason, until every node was in sync (typha-server
    /// only: Calico's Typha does not say why).
    pub(crate) server_drops_sync: BTreeMap<String, u64>,
    /// After the churn (Calico protocol): seconds from SIGKILL until the restarted server was
    /// ready (its datastore listed again).
    pub(crate) kill_ready_secs: Option<f64>,
    /// Seconds from SIGKILL until every node was in sync again.
    pub(crate) kill_resync_secs: Option<f64>,
    /// CPU seconds of the restarted server until then.
    pub(crate) kill_server_cpu_secs: Option<f64>,
    /// Sessions that ended during the resync beyond the one each node lost to the kill.
    pub(crate) kill_extra_reconnects: Option<u64>,
    /// Nothing lost.
    pub(crate) ok: bool,
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

/// Which server a side runs.
#[derive(Debug, Clone, Copy)]
enum Target<'a> {
    /// typha-server.
    Ours,
    /// Calico's `calico-typha` at this path.
    Calico(&'a Path),
}

/// Starts the target over the run's datastore (the embedded one when `store` is `None`).
async fn start(
    wd: &Workdir,
    store: Option<&Store>,
    t: Target<'_>,
    name: &str,
) -> anyhow::Result<Server> {
    match (t, store) {
        (Target::Ours, None) => wd.server(name).await,
        (Target::Ours, Some(s)) => s.server(wd, name).await,
        (Target::Calico(bin), Some(s)) => wd.calico_typha(name, bin, &s.backend(true)?).await,
        (Target::Calico(_), None) => bail!("Calico's Typha cannot read the embedded datastore"),
    }
}

/// A Calico client's state: Calico key → value.
type Kvs = BTreeMap<String, Bytes>;

/// Takes a syncer type's whole state from a server with our Rust Calico-protocol client (the
/// hello calico-node sends, snappy offered), until the server says InSync.
async fn dump(
    addr: &str,
    tls: Option<&Arc<rustls::ClientConfig>>,
    syncer: SyncerType,
) -> anyhow::Result<Kvs> {
    let hello = CalicoHello::calico_node("loadtest-check", syncer.as_str());
    let session = async {
        let conn = crate::raw::dial(addr, tls).await.context("connecting")?;
        let st = calico::run(conn, &hello, Until::InSync, Duration::from_secs(90)).await?;
        Ok::<_, anyhow::Error>(st.kvs.into_iter().map(|(k, v)| (k, v.value)).collect())
    };
    tokio::time::timeout(Duration::from_secs(600), session)
        .await
        .with_context(|| format!("{addr}: no InSync for {} within 600 s", syncer.as_str()))?
        .with_context(|| format!("{addr}: taking the {} state", syncer.as_str()))
}

/// (key count, a full node's digest) of a state.
fn digest_of(kvs: &Kvs) -> (usize, String) {
    let d = crate::calico_node::state_digest(kvs.iter().map(|(k, v)| (k.as_str(), &v[..])));
    (kvs.len(), d)
}

/// How two states of one syncer type differ.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Diff {
    /// The syncer type.
    pub(crate) syncer: String,
    /// Keys in the first / the second.
    pub(crate) keys: (usize, usize),
    /// Keys with equal values in both.
    pub(crate) same: usize,
    /// Keys only the first has.
    pub(crate) only_first: Vec<String>,
    /// Keys only the second has.
    pub(crate) only_second: Vec<String>,
    /// Keys whose values differ: (key, first's value, second's value).
    pub(crate) differ: Vec<(String, String, String)>,
}

impl Diff {
    fn equal(&self) -> bool {
        self.only_first.is_empty() && self.only_second.is_empty() && self.differ.is_empty()
    }
}

/// Compares two states key for key; values as JSON values when both are JSON (Calico's
/// raw-string keys, config and IPs, byte for byte).
fn diff(syncer: SyncerType, a: &Kvs, b: &Kvs) -> Diff {
    let json = |v: &[u8]| serde_json::from_slice::<serde_json::Value>(v).ok();
    let text = |v: &[u8]| String::from_utf8_lossy(v).into_owned();
    let mut d = Diff {
        syncer: syncer.as_str().into(),
        keys: (a.len(), b.len()),
        ..Diff::default()
    };
    for (k, va) in a {
        match b.get(k) {
            None => d.only_first.push(k.clone()),
            Some(vb) => {
                let same = va == vb || matches!((json(va), json(vb)), (Some(x), Some(y)) if x == y);
                if same {
                    d.same += 1;
                } else {
                    d.differ.push((k.clone(), text(va), text(vb)));
                }
            }
        }
    }
    d.only_second = b.keys().filter(|k| !a.contains_key(*k)).cloned().collect();
    d
}

/// The libcalico translation of the generated cluster, per syncer type.
fn translation(nodes: usize, pods: usize) -> anyhow::Result<Vec<(SyncerType, Kvs)>> {
    let spec = crate::cluster::cluster_spec(nodes, pods);
    let mut out: Vec<(SyncerType, Kvs)> =
        SyncerType::ALL.iter().map(|t| (*t, Kvs::new())).collect();
    for r in spec.resources() {
        for (key, value) in typha_server::calico::convert::convert(&r)
            .with_context(|| format!("converting {}", r.id()))?
        {
            for c in calico_kvs(&key, &value) {
                let Some(v) = c.value else { continue };
                for (t, kvs) in &mut out {
                    if c.syncers.contains(*t) {
                        kvs.insert(c.key.to_string(), v.clone());
                    }
                }
            }
        }
    }
    for (t, kvs) in &mut out {
        for c in builtin_kvs(*t) {
            if let Some(v) = c.value {
                kvs.insert(c.key.to_string(), v);
            }
        }
    }
    Ok(out)
}

/// Every syncer type's state from a server.
async fn dump_all(
    addr: &str,
    tls: Option<&Arc<rustls::ClientConfig>>,
) -> anyhow::Result<Vec<(SyncerType, Kvs)>> {
    let mut out = Vec::new();
    for t in SyncerType::ALL {
        out.push((t, dump(addr, tls, t).await?));
    }
    Ok(out)
}

/// What the states check found, before any fleet ran.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Checks {
    /// Our server against the libcalico translation of the generated cluster (empty where not
    /// checked: the Kubernetes datastore).
    pub(crate) ours_vs_translation: Vec<Diff>,
    /// Our server (first) against Calico's Typha (second), on the same datastore.
    pub(crate) ours_vs_calico_typha: Vec<Diff>,
}

/// Takes every syncer type's state from our server on the freshly seeded datastore (checked
/// against the translation) and, if given, from Calico's and then ours again, each started
/// alone, and compares the last two.
async fn check_states(
    wd: &Workdir,
    a: &CalicoArgs,
    store: Option<&Store>,
    tls: Option<&Arc<rustls::ClientConfig>>,
) -> anyhow::Result<Checks> {
    let mut c = Checks::default();
    let server = start(wd, store, Target::Ours, "server-check").await?;
    let ours = dump_all(&server.addr, tls).await?;
    server.quit().await?;
    if a.datastore != Some(StoreKind::Kubernetes) {
        for ((t, want), (_, got)) in translation(a.nodes, a.pods_per_node)?.iter().zip(&ours) {
            c.ours_vs_translation.push(diff(*t, got, want));
        }
    }
    if let Some(bin) = &a.calico_typha {
        // Calico's Typha initializes the datastore when it starts, as calico-node and
        // kube-controllers would have in a real cluster: it writes the three default tiers
        // and fills in ClusterInformation. Our server is asked again after it, so both are
        // compared on the same datastore.
        let theirs = start(wd, store, Target::Calico(bin), "calico-typha-check").await?;
        let got = dump_all(&theirs.addr, tls).await?;
        theirs.quit().await?;
        let server = start(wd, store, Target::Ours, "server-check-after").await?;
        let ours = dump_all(&server.addr, tls).await?;
        server.quit().await?;
        for ((t, o), (_, g)) in ours.iter().zip(&got) {
            c.ours_vs_calico_typha.push(diff(*t, o, g));
        }
    }
    Ok(c)
}

async fn side(
    wd: &Workdir,
    a: &CalicoArgs,
    store: Option<&Store>,
    target: Target<'_>,
    calico: Option<SyncerType>,
    tls: Option<&Arc<rustls::ClientConfig>>,
) -> anyhow::Result<(Side, hdrhistogram::Histogram<u64>)> {
    let c = &a.common;
    let (name, server_name) = match (target, calico) {
        (Target::Calico(_), _) => ("calico-typha", "calico-typha"),
        (Target::Ours, Some(_)) => ("server-calico", "typha-server"),
        (Target::Ours, None) => ("server-ours", "typha-server"),
    };
    let mut server = start(wd, store, target, name).await?;
    let idle = settled_usage(server.pid(), Settle::IDLE)
        .await
        .context("server usage")?;
    let wchar = |v: &serde_json::Value| v["wchar"].as_u64().unwrap_or(0);
    // What every node must hold: a client's state, taken just before the fleet (its few
    // hundred bytes are in `before`, not in the fleet's bytes).
    let want = match calico {
        Some(t) => Some(digest_of(&dump(&server.addr, tls, t).await?)),
        None => None,
    };
    let before = server.state().await?;
    let cpu0 = harness::cpu(&[server.pid()]);
    let extra: Vec<String> = match calico {
        Some(s) => vec!["--calico".into(), s.as_str().into()],
        None => vec![],
    };
    let mut swarms = wd.swarms(&[&server.addr], a.nodes, 0, c, &extra)?;
    let limit = Duration::from_secs(1800);
    let (connect_secs, sync_secs) = tokio::try_join!(
        harness::wait_for(&swarms, "connected", a.nodes as u64, "connected", limit),
        harness::wait_for(&swarms, "in_sync", a.nodes as u64, name, limit),
    )?;
    let cpu_synced = harness::cpu(&[server.pid()]);
    let reconnects_sync: u64 = swarms
        .iter()
        .map(|s| s.progress_u64("calico_failures"))
        .sum();
    let server_drops_sync = server.drops().await?;
    let swarm_pids: Vec<u32> = swarms.iter().map(|s| s.pid()).collect();
    let swarm_cpu_synced = harness::cpu(&swarm_pids);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let connected = usage(server.pid()).context("server usage")?;
    let synced = server.state().await?;
    let kvs = match &want {
        Some((n, _)) => *n as u64,
        None => server.kvs,
    };
    let mut exact_before = 0;
    if let Some((_, d)) = &want {
        exact_before = exact(&mut swarms, "digests", d).await?.0;
    }
    harness::phase_histogram(&mut swarms).await?;

    let (cpu1, swarm_cpu1) = (harness::cpu(&[server.pid()]), harness::cpu(&swarm_pids));
    let churn = match store {
        Some(st) => st.churn(wd, a.rate, a.secs)?,
        None => server.churn(wd.shape(), a.rate, a.secs),
    };
    let (churn, latency) = harness::churn_phase(
        server.pid(),
        churn,
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

    let mut s = Side {
        server: server_name.into(),
        protocol: calico.map_or("ours".into(), |t| format!("calico/{}", t.as_str())),
        kvs,
        connect_secs,
        sync_secs,
        bytes_per_kv: wchar(&synced).saturating_sub(wchar(&before)) as f64
            / (kvs.max(1) * a.nodes as u64) as f64,
        bytes_per_update: wchar(&after).saturating_sub(wchar(&synced)) as f64
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
        swarm_cpu_per_delivery_us: (swarm_cpu2 - swarm_cpu1) * 1e6 / churn.deliveries.max(1) as f64,
        swarm_cpu_per_kv_us: swarm_cpu_synced * 1e6 / (kvs.max(1) * a.nodes as u64) as f64,
        rss_idle: idle.usage.rss,
        idle_wait: idle.wait,
        rss_connected: connected.rss,
        rss_peak: peak,
        rss_per_connection: (connected.rss as f64 - idle.usage.rss as f64) / a.nodes as f64,
        rss_idle_per_kv: idle.usage.rss as f64 / kvs.max(1) as f64,
        nodes_exact_before_churn: exact_before,
        server_drops_sync,
        ..Side::default()
    };
    match (calico, want) {
        (Some(t), Some(_)) => {
            let reconnects: u64 = swarms
                .iter()
                .map(|s| s.progress_u64("calico_failures"))
                .sum();
            if !a.no_kill {
                // A crash: every node loses its session, reconnects after a second (as
                // calico-node's client does) and gets a new snapshot from the restarted server.
                //
                // Every node is counted once when a session it began after the mark reaches
                // InSync: exact whatever the nodes were doing at the kill. (Counting session
                // failures until there was one per node could not end when a node was between
                // sessions at the kill and its next dial found the restarted server: it
                // fails no more, and the coordinator watched a count that could not move.)
                let nodes = a.nodes as u64;
                let mut marks = Vec::new();
                for sw in swarms.iter_mut() {
                    sw.send("mark").await?;
                }
                for sw in swarms.iter_mut() {
                    marks.push(sw.expect("marked", Duration::from_secs(30)).await?["mark"].clone());
                }
                let killed = Instant::now();
                server.kill_and_restart().await?;
                s.kill_ready_secs = Some(killed.elapsed().as_secs_f64());
                // Progress printed before the mark still shows the last mark's count.
                harness::wait_for_marked(
                    &swarms,
                    &marks,
                    "resynced",
                    nodes,
                    "in sync again",
                    limit,
                )
                .await?;
                harness::wait_for(&swarms, "in_sync", nodes, "in sync again", limit).await?;
                s.kill_resync_secs = Some(killed.elapsed().as_secs_f64());
                s.kill_server_cpu_secs = Some(harness::cpu(&[server.pid()]));
                s.kill_extra_reconnects = Some(
                    harness::sum(&swarms, "calico_failures").saturating_sub(reconnects + nodes),
                );
            }
            // The churn relabels existing endpoints: what a client takes now is the end state.
            let (_, d) = digest_of(&dump(&server.addr, tls, t).await?);
            let (nodes_exact, full, full_exact, events) = exact(&mut swarms, "done", &d).await?;
            s.nodes_exact = nodes_exact;
            s.full_nodes = full;
            s.full_nodes_exact = full_exact;
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
        _ => {
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

/// Asks every swarm for its nodes' states (`event` `digests`, or `done` at the end) and counts
/// against a client's state, digest `d` (`count:digest`, which every node, full or skimming,
/// computes): (nodes holding exactly it; full nodes; full nodes exact; the swarms' events).
async fn exact(
    swarms: &mut [Child],
    event: &str,
    d: &str,
) -> anyhow::Result<(usize, usize, usize, Vec<serde_json::Value>)> {
    let (all, full, events) = digests(swarms, event).await?;
    let full_n = full.values().sum::<u64>() as usize;
    let full_ok = full.get(d).copied().unwrap_or(0) as usize;
    let nodes = all.get(d).copied().unwrap_or(0) as usize;
    Ok((nodes, full_n, full_ok, events))
}

pub(crate) async fn run(a: CalicoArgs) -> anyhow::Result<Outcome> {
    a.common.own_server_only("calico")?;
    let Some(syncer) = SyncerType::from_hello(&a.syncer) else {
        bail!(
            "--syncer {}: not one of felix, bgp, tunnel-ip-allocation, node-status",
            a.syncer
        );
    };
    if a.calico_typha.is_some() && a.datastore.is_none() {
        bail!(
            "--calico-typha: Calico's Typha cannot read the embedded datastore; add --datastore \
             etcd (or kubernetes) so both servers read the same one"
        );
    }
    if a.calico_typha.is_none() {
        eprintln!(
            "calico: the side-by-side with Calico's own Typha needs --calico-typha PATH (and \
             --datastore etcd or kubernetes); running our server only"
        );
    }
    let wd = Workdir::new(a.nodes, a.pods_per_node, a.common.plain)?.using(&a.common);
    let tls = match wd.tls_dir() {
        Some(d) => Some(
            typha_client::tls::client_config(&ClientTls {
                ca_file: d.join("ca.crt"),
                cert_file: d.join("client.crt"),
                key_file: d.join("client.key"),
                server_cn: Some("typha-server".into()),
                server_uri_san: None,
            })
            .context("client TLS settings")?,
        ),
        None => None,
    };
    let store = match a.datastore {
        Some(k) => Some(Store::start(k, &wd).await?.0),
        None => None,
    };
    let timeline = Timeline::start();
    let started = Instant::now();
    let checks = check_states(&wd, &a, store.as_ref(), tls.as_ref()).await?;
    let (cal, latency) = side(
        &wd,
        &a,
        store.as_ref(),
        Target::Ours,
        Some(syncer),
        tls.as_ref(),
    )
    .await?;
    said_as_it_ends(&cal);
    let ours = if a.no_baseline {
        None
    } else {
        Some(
            side(&wd, &a, store.as_ref(), Target::Ours, None, tls.as_ref())
                .await?
                .0,
        )
    };
    let theirs = match &a.calico_typha {
        Some(bin) => Some(
            side(
                &wd,
                &a,
                store.as_ref(),
                Target::Calico(bin),
                Some(syncer),
                tls.as_ref(),
            )
            .await?
            .0,
        ),
        None => None,
    };
    if let Some(t) = &theirs {
        said_as_it_ends(t);
    }
    // The translation must match exactly; Calico's Typha is compared and reported, since the
    // differences are listed and explained in docs/replacing-calico-typha.md.
    let ok = cal.ok
        && ours.as_ref().is_none_or(|o| o.ok)
        && theirs.as_ref().is_none_or(|t| t.ok)
        && checks.ours_vs_translation.iter().all(Diff::equal);
    let table = table(
        &a,
        &checks,
        &cal,
        ours.as_ref(),
        theirs.as_ref(),
        started.elapsed(),
    );
    Ok(Outcome {
        name: "calico",
        table,
        json: serde_json::json!({
            "nodes": a.nodes,
            "tls": !a.common.plain,
            "datastore": a.datastore,
            "checks": checks,
            "calico": cal,
            "ours": ours,
            "calico_typha": theirs,
        }),
        ok,
        timeline: timeline.stop(),
        latency: Some(latency),
    })
}

/// Writes a side's results to stderr as soon as the side ends, one JSON line: a later side
/// that fails (or a coordinator killed for its memory) then does not take them with it.
fn said_as_it_ends(s: &Side) {
    match serde_json::to_string(s) {
        Ok(line) => eprintln!("calico: {} side ended: {line}", s.server),
        Err(e) => eprintln!(
            "calico: {} side ended; its results do not serialize: {e}",
            s.server
        ),
    }
}

/// The Markdown report: the states check, then one column per side with the ratios.
fn table(
    a: &CalicoArgs,
    checks: &Checks,
    c: &Side,
    o: Option<&Side>,
    t: Option<&Side>,
    took: Duration,
) -> String {
    let mut t_ = format!(
        "calico: {} nodes ({}, {}), syncer {}, {} Calico KVs ({} in our cache), {} updates/s \
         for {} s per side; {:.0} s in all\n\n",
        a.nodes,
        if a.common.plain {
            "plaintext"
        } else {
            "mutual TLS"
        },
        match a.datastore {
            None => "embedded datastore",
            Some(StoreKind::Etcd) => "etcd",
            Some(StoreKind::Kubernetes) => "kube-apiserver",
        },
        a.syncer,
        c.kvs,
        o.map_or(0, |o| o.kvs),
        a.rate,
        a.secs,
        took.as_secs_f64(),
    );
    t_ += &checks_table(checks);
    // Columns: Calico protocol → ours, [our protocol → ours], [Calico protocol → Calico's].
    let mut cols: Vec<(&str, &Side)> = vec![("Calico protocol, typha-server", c)];
    if let Some(o) = o {
        cols.push(("our protocol, typha-server", o));
    }
    if let Some(t) = t {
        cols.push(("Calico protocol, calico-typha", t));
    }
    let mut head = String::from("| measure |");
    for (name, _) in &cols {
        head += &format!(" {name} |");
    }
    if o.is_some() {
        head += " Calico / ours (typha-server) |";
    }
    if t.is_some() {
        head += " calico-typha / typha-server (Calico protocol) |";
    }
    t_ += &head;
    t_ += "\n|";
    t_ += &"---|".repeat(head.matches('|').count() - 1);
    t_ += "\n";
    let row = |name: &str, f: &dyn Fn(&Side) -> f64, fmt: &dyn Fn(f64) -> String| {
        let mut r = format!("| {name} |");
        for (_, s) in &cols {
            let v = f(s);
            // Not measured on this side (NaN): a dash.
            let cell = if v.is_nan() { "-".into() } else { fmt(v) };
            r += &format!(" {cell} |");
        }
        let ratio = |x: f64, y: f64| {
            if x.is_nan() {
                " - |".into()
            } else if y > 0.0 {
                format!(" {:.2} |", x / y)
            } else {
                " - |".into()
            }
        };
        if let Some(o) = o {
            r += &ratio(f(c), f(o));
        }
        if let Some(t) = t {
            r += &ratio(f(t), f(c));
        }
        r + "\n"
    };
    let ms = |v: f64| format!("{v:.1} ms");
    let secs = |v: f64| format!("{v:.2} s");
    let us = |v: f64| format!("{v:.2} µs");
    let mb = |v: f64| format!("{:.1} MiB", mib(v as u64));
    let kib = |v: f64| format!("{:.1} KiB", v / 1024.0);
    let b = |v: f64| format!("{v:.1} B");
    let n = |v: f64| format!("{v:.0}");
    t_ += &row("KVs a node receives", &|s| s.kvs as f64, &n);
    t_ += &row("all nodes connected after", &|s| s.connect_secs, &secs);
    t_ += &row("all nodes in sync after", &|s| s.sync_secs, &secs);
    t_ += &row(
        "server CPU, initial sync",
        &|s| s.server_cpu_sync_secs,
        &secs,
    );
    t_ += &row("swarm CPU, initial sync", &|s| s.swarm_cpu_sync_secs, &secs);
    t_ += &row("latency p50", &|s| s.latency_ms.p50, &ms);
    t_ += &row("latency p99", &|s| s.latency_ms.p99, &ms);
    t_ += &row("latency max", &|s| s.latency_ms.max, &ms);
    t_ += &row("server CPU, churn", &|s| s.server_cpu_churn_secs, &secs);
    t_ += &row(
        "server CPU per delivery",
        &|s| s.server_cpu_per_delivery_us,
        &us,
    );
    t_ += &row("swarm CPU, churn", &|s| s.swarm_cpu_churn_secs, &secs);
    t_ += &row(
        "swarm CPU per delivery",
        &|s| s.swarm_cpu_per_delivery_us,
        &us,
    );
    t_ += &row(
        "swarm CPU per KV per node, initial sync",
        &|s| s.swarm_cpu_per_kv_us,
        &us,
    );
    t_ += &row("server RSS idle", &|s| s.rss_idle as f64, &mb);
    t_ += &row(
        "server RSS idle: waited to settle",
        &|s| s.idle_wait.rss_idle_wait_secs,
        &secs,
    );
    t_ += &row("server RSS connected", &|s| s.rss_connected as f64, &mb);
    t_ += &row("server RSS peak", &|s| s.rss_peak as f64, &mb);
    t_ += &row("server RSS per connection", &|s| s.rss_per_connection, &kib);
    t_ += &row("idle RSS per KV received", &|s| s.rss_idle_per_kv, &b);
    t_ += &row(
        "bytes written per KV (initial sync)",
        &|s| s.bytes_per_kv,
        &b,
    );
    t_ += &row(
        "bytes written per update per node",
        &|s| s.bytes_per_update,
        &b,
    );
    t_ += &row("deliveries", &|s| s.deliveries as f64, &n);
    t_ += &row("deliveries expected", &|s| s.deliveries_expected as f64, &n);
    t_ += &row(
        "nodes exact after sync",
        &|s| s.nodes_exact_before_churn as f64,
        &n,
    );
    t_ += &row("nodes exact at the end", &|s| s.nodes_exact as f64, &n);
    if c.kill_resync_secs.is_some() {
        let opt = |v: Option<f64>| v.unwrap_or(f64::NAN);
        t_ += &row(
            "SIGKILL: restarted server ready after",
            &|s| opt(s.kill_ready_secs),
            &secs,
        );
        t_ += &row(
            "SIGKILL: all nodes in sync again after",
            &|s| opt(s.kill_resync_secs),
            &secs,
        );
        t_ += &row(
            "SIGKILL: restarted server's CPU until then",
            &|s| opt(s.kill_server_cpu_secs),
            &secs,
        );
        t_ += &row(
            "SIGKILL: extra sessions ended in the resync",
            &|s| opt(s.kill_extra_reconnects.map(|v| v as f64)),
            &n,
        );
    }
    for (name, s) in &cols {
        if s.protocol.starts_with("calico/") {
            t_ += &format!(
                "{name}: {} of {} full nodes exact at the end; {} sessions reconnected before \
                 all were in sync, {} after{}.\n",
                s.full_nodes_exact,
                s.full_nodes,
                s.reconnects_sync,
                s.reconnects,
                if s.server_drops_sync.is_empty() {
                    String::new()
                } else {
                    format!("; the server closed {:?} until then", s.server_drops_sync)
                }
            );
        }
    }
    let lost = !(c.ok && o.is_none_or(|o| o.ok) && t.is_none_or(|t| t.ok));
    t_ += if lost {
        "LOST: deliveries missing or nodes diverged (see the rows above)"
    } else if !checks.ours_vs_translation.iter().all(Diff::equal) {
        "FAILED: typha-server's Calico states differ from the libcalico translation (above)"
    } else {
        "nothing lost"
    };
    t_
}

/// How many differences to list per syncer type in the table (`--json` has them all).
const LISTED: usize = 12;

fn checks_table(c: &Checks) -> String {
    let mut out = String::new();
    for (title, first, second, diffs) in [
        (
            "typha-server's Calico states against the libcalico translation of the cluster",
            "typha-server",
            "translation",
            &c.ours_vs_translation,
        ),
        (
            "typha-server's Calico states against calico-typha's, same datastore (JSON compared \
             as values, revisions left out)",
            "typha-server",
            "calico-typha",
            &c.ours_vs_calico_typha,
        ),
    ] {
        if diffs.is_empty() {
            continue;
        }
        out += &format!(
            "{title}:\n| syncer | keys {first} / {second} | same | only {first} | only {second} \
             | values differ |\n|---|---|---|---|---|---|\n"
        );
        for d in diffs {
            out += &format!(
                "| {} | {} / {} | {} | {} | {} | {} |\n",
                d.syncer,
                d.keys.0,
                d.keys.1,
                d.same,
                d.only_first.len(),
                d.only_second.len(),
                d.differ.len()
            );
        }
        for d in diffs {
            for k in d.only_first.iter().take(LISTED) {
                out += &format!("- {}: only {first}: `{k}`\n", d.syncer);
            }
            for k in d.only_second.iter().take(LISTED) {
                out += &format!("- {}: only {second}: `{k}`\n", d.syncer);
            }
            for (k, x, y) in d.differ.iter().take(LISTED) {
                out += &format!(
                    "- {}: `{k}`:\n  - {first}: `{x}`\n  - {second}: `{y}`\n",
                    d.syncer
                );
            }
        }
        out += "\n";
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kvs(pairs: &[(&str, &str)]) -> Kvs {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Bytes::copy_from_slice(v.as_bytes())))
            .collect()
    }

    #[test]
    fn values_are_compared_as_json_and_raw_strings_byte_for_byte() {
        let a = kvs(&[
            ("/a", r#"{"x":1,"y":[1,2]}"#),
            ("/b", "10.0.0.1"),
            ("/c", r#"{"x":1}"#),
            ("/only-a", "true"),
        ]);
        let b = kvs(&[
            // The same JSON value, written differently.
            ("/a", r#"{ "y": [1, 2], "x": 1 }"#),
            ("/b", "10.0.0.1 "),
            ("/c", r#"{"x":2}"#),
            ("/only-b", "false"),
        ]);
        let d = diff(SyncerType::Felix, &a, &b);
        assert_eq!(d.keys, (4, 4));
        assert_eq!(d.only_first, vec!["/only-a".to_owned()]);
        assert_eq!(d.only_second, vec!["/only-b".to_owned()]);
        let differ: Vec<&str> = d.differ.iter().map(|(k, _, _)| k.as_str()).collect();
        // "10.0.0.1" is not JSON: a trailing space is a difference; {"x":1} vs {"x":2} too.
        assert_eq!(differ, ["/b", "/c"]);
        assert_eq!(d.same, 1);
        assert!(!d.equal());
        assert!(diff(SyncerType::Felix, &a, &a).equal());
    }
}
