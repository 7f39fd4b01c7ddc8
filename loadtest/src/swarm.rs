//! `loadtest __swarm`: many simulated nodes in one process. The sample nodes (`--sample`, all
//! by default) are each a real `typha-client` (TLS, handshake, the full store with its digest,
//! or a light store), with light callbacks that count updates and measure, for every churn
//! update, the time from its datastore write to its receipt. The other nodes are lean readers
//! (see `lean`) that prove they received every update (the sequence chain, the snapshot's KV
//! count, the server's digest at their position) without decoding what the swarm has decoded
//! once already, so the swarm's CPU does not hide the server's. Optionally some nodes are
//! stalled (hello, then never read), or every node is a
//! bare reader of the ceiling broadcaster (see `raw`), or every node watches etcd directly
//! (`--etcd`, the `direct` scenario's baseline: see `etcd::direct_node`), or every node opens
//! calico-node's Calico-protocol connections, one per syncer type (`--calico`: see
//! `calico_node`).
//!
//! Prints a JSON progress line every half second; on `finish` (stdin) it stops every node and
//! prints the latency histogram (HdrHistogram V2, hex) and how many nodes ended with each
//! digest.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use hdrhistogram::Histogram;
use hdrhistogram::serialization::{Serializer, V2Serializer};
use serde_json::json;
use typha_client::metrics::ClientMetrics;
use typha_client::tls::ClientTls;
use typha_client::{ClientConfig, Discovery, Position, ResumeKind, SyncClient, SyncerCallbacks};
use typha_protocol::message::Staleness;
use typha_protocol::model::{KeyType, SyncStatus, Update};

use crate::node_checks::{NodeChecks, Violations};
use crate::raw::RawCounters;
use crate::tally::{Shared, now_ns};

/// Settings of a swarm.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct SwarmArgs {
    /// Servers, `host:port[,host:port...]`; each node shuffles them, as the client does.
    #[arg(long, value_delimiter = ',', required = true)]
    pub(crate) server: Vec<String>,
    /// Nodes to simulate.
    #[arg(long)]
    pub(crate) nodes: usize,
    /// First node number (names are `sim-<n>`).
    #[arg(long, default_value_t = 0)]
    pub(crate) first: usize,
    /// Directory with ca.crt, client.crt, client.key (omit for plaintext).
    #[arg(long)]
    pub(crate) tls_dir: Option<PathBuf>,
    /// Nodes that keep the full store and recompute the digest themselves; the others keep no
    /// values (a light store: the sequence chain is checked and the server's announced digest
    /// at their position is compared). 10,000 full stores of a 300,000-KV cluster would not fit
    /// in this machine's memory.
    #[arg(long, default_value_t = 1)]
    pub(crate) full_nodes: usize,
    /// Of the (not stalled) nodes, this many (the first ones) are real typha-clients that
    /// measure latency; the others are lean readers (see `lean`). At least `--full-nodes`.
    /// Default: every node.
    #[arg(long)]
    pub(crate) sample: Option<usize>,
    /// Of the nodes, this many (the last ones) say hello and then never read.
    #[arg(long, default_value_t = 0)]
    pub(crate) stalled: usize,
    /// Every node is a bare reader of the ceiling broadcaster, not a typha-client.
    #[arg(long)]
    pub(crate) raw: bool,
    /// Every node lists and watches this etcd (client URL) itself, not a typha-client.
    #[arg(long)]
    pub(crate) etcd: Option<String>,
    /// Every node lists and watches this Kubernetes API server (URL) itself, not a
    /// typha-client (with `--kube-ca` and `--kube-token`).
    #[arg(long)]
    pub(crate) kube: Option<String>,
    /// The CA of the API server's certificate.
    #[arg(long)]
    pub(crate) kube_ca: Option<PathBuf>,
    /// The nodes' bearer token (a throwaway ServiceAccount's, on a loopback API server).
    #[arg(long)]
    pub(crate) kube_token: Option<String>,
    /// Every node speaks Calico's Typha protocol as calico-node does, not our own, with one
    /// connection per syncer type listed (`felix`, `bgp`, `tunnel-ip-allocation`,
    /// `node-status`; comma-separated), as calico-node's processes each open one (see
    /// `calico_node`).
    #[arg(long, value_name = "SYNCER", value_delimiter = ',')]
    pub(crate) calico: Vec<String>,
    /// Typha-client nodes check what they are told (see `node_checks`: no deletion but of
    /// ephemeral pods; on full-store nodes, no revision lower than the last for its key).
    /// Sound only against the mixed churn, which deletes nothing else.
    #[arg(long)]
    pub(crate) checks: bool,
}

const SHARDS: usize = 16;

struct Node {
    shared: Arc<Shared>,
    shard: usize,
    in_sync: bool,
    stale: bool,
    checks: Option<NodeChecks>,
}

impl SyncerCallbacks for Node {
    fn on_status_updated(&mut self, s: SyncStatus) {
        self.shared
            .set_in_sync(&mut self.in_sync, s == SyncStatus::InSync);
    }

    fn on_staleness(&mut self, s: &Staleness) {
        self.shared.set_stale(&mut self.stale, s.stale);
    }

    fn on_updates(&mut self, updates: Vec<Update>) {
        self.shared
            .updates
            .fetch_add(updates.len() as u64, Ordering::Relaxed);
        if let Some(c) = &mut self.checks {
            c.check(&updates);
        }
        let received = now_ns();
        let mut lat = Vec::new();
        for u in &updates {
            if u.key.key_type() != KeyType::WorkloadEndpoint {
                continue;
            }
            if let Some(sent) = u
                .value
                .as_ref()
                .and_then(|v| crate::server::sent_ns(v.as_bytes()))
            {
                lat.push(u64::try_from(received.saturating_sub(sent) / 1000).unwrap_or(u64::MAX));
            }
        }
        self.shared.record(self.shard, &lat);
    }
}

pub(crate) async fn run(a: SwarmArgs) -> anyhow::Result<()> {
    let latency = (0..SHARDS)
        .map(|_| Histogram::new_with_bounds(1, 600_000_000, 3).map(Mutex::new))
        .collect::<Result<Vec<_>, _>>()
        .context("histogram")?;
    let shared = Arc::new(Shared {
        in_sync: AtomicUsize::new(0),
        stale: AtomicUsize::new(0),
        stale_told: AtomicU64::new(0),
        direct_connected: AtomicU64::new(0),
        updates: AtomicU64::new(0),
        churn_updates: AtomicU64::new(0),
        churn_frames: AtomicU64::new(0),
        calico_bytes: AtomicU64::new(0),
        calico_failures: AtomicU64::new(0),
        mark: AtomicU64::new(0),
        resynced: AtomicUsize::new(0),
        calico_failures_extra_from: AtomicU64::new(u64::MAX),
        latency,
    });
    let metrics = ClientMetrics::unregistered();
    let tls = a.tls_dir.as_ref().map(|d| ClientTls {
        ca_file: d.join("ca.crt"),
        cert_file: d.join("client.crt"),
        key_file: d.join("client.key"),
        server_cn: Some("typha-server".into()),
        server_uri_san: None,
    });
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stop = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let raw_tls = match &tls {
        Some(t) if a.raw || a.stalled > 0 || !a.calico.is_empty() => {
            Some(typha_client::tls::client_config(t).context("client TLS settings")?)
        }
        _ => None,
    };
    let raw = Arc::new(RawCounters::default());
    let mut tasks = Vec::with_capacity(a.nodes);
    let mut raw_tasks = Vec::new();
    let mut direct_tasks = Vec::new();
    if let Some(endpoint) = &a.etcd {
        for i in 0..a.nodes {
            direct_tasks.push(tokio::spawn(direct(
                endpoint.clone(),
                shared.clone(),
                i % SHARDS,
                stop_rx.clone(),
            )));
        }
    }
    let real = if a.raw {
        0
    } else {
        a.nodes.saturating_sub(a.stalled)
    };
    let mut kube_tasks = Vec::new();
    if let Some(url) = &a.kube {
        let ca = a.kube_ca.as_deref().context("--kube needs --kube-ca")?;
        let token = a.kube_token.clone().context("--kube needs --kube-token")?;
        let tls = crate::kube::node_tls(ca)?;
        for i in 0..a.nodes {
            kube_tasks.push(tokio::spawn(direct_kube(
                url.clone(),
                tls.clone(),
                token.clone(),
                shared.clone(),
                i % SHARDS,
                stop_rx.clone(),
            )));
        }
    }
    let mut calico_tasks = Vec::new();
    // Each connection's state, with the index of its syncer type in `tallies`.
    let mut calico_states = Vec::new();
    let tallies = a
        .calico
        .iter()
        .map(|t| crate::calico_node::SyncerTally::new(t, SHARDS).map(Arc::new))
        .collect::<anyhow::Result<Vec<_>>>()?;
    if !tallies.is_empty() {
        let mut resolved = Vec::new();
        for s in &a.server {
            resolved.push(crate::raw::resolve(s).await?);
        }
        // Node by node, each with all its connections: a node's connections start together,
        // as calico-node's processes do.
        for i in 0..a.nodes {
            for (j, tally) in tallies.iter().enumerate() {
                let state = Arc::new(Mutex::new(crate::calico_node::NodeState::new(
                    i < a.full_nodes,
                )));
                calico_states.push((j, state.clone()));
                let addr = a
                    .server
                    .get(i % a.server.len())
                    .cloned()
                    .unwrap_or_default();
                let conf = crate::calico_node::NodeConf {
                    addr,
                    resolved: resolved
                        .get(i % resolved.len())
                        .copied()
                        .context("no server")?,
                    tls: raw_tls.clone(),
                    hostname: format!("sim-{}", a.first + i),
                    tally: tally.clone(),
                };
                calico_tasks.push(tokio::spawn(crate::calico_node::node(
                    conf,
                    state,
                    shared.clone(),
                    i % SHARDS,
                    stop_rx.clone(),
                )));
            }
        }
    }
    // Direct and Calico-protocol nodes replace the typha-clients (and stalled or raw ones).
    let simulated = if a.etcd.is_some() || a.kube.is_some() || !tallies.is_empty() {
        0
    } else {
        a.nodes
    };
    let sample = a.sample.unwrap_or(usize::MAX).max(a.full_nodes);
    let lean_ctx = if simulated > 0 && !a.raw && sample < real {
        let mut servers = Vec::new();
        for s in &a.server {
            servers.push((s.clone(), crate::raw::resolve(s).await?));
        }
        let tls = match &tls {
            Some(t) => Some(typha_client::tls::client_config(t).context("client TLS settings")?),
            None => None,
        };
        Some(Arc::new(crate::lean::Ctx {
            servers,
            tls,
            facts: crate::lean::facts::FactCache::default(),
            shared: shared.clone(),
            metrics: metrics.clone(),
        }))
    } else {
        None
    };
    let mut lean_tasks = Vec::new();
    let violations = Arc::new(Violations::default());
    // Each typha-client's position (and whether it keeps the full store), each lean node's
    // digest: the nodes' states while they run, for `digests`.
    let mut positions: Vec<(Arc<Position>, bool)> = Vec::new();
    let mut lean_live = Vec::new();
    for i in 0..simulated {
        let name = format!("sim-{}", a.first + i);
        if i >= sample
            && i < real
            && let Some(ctx) = &lean_ctx
        {
            let live = Arc::new(crate::lean::Live::default());
            lean_live.push(live.clone());
            lean_tasks.push(tokio::spawn(crate::lean::node(
                ctx.clone(),
                name,
                a.first + i,
                live,
                stop_rx.clone(),
            )));
            continue;
        }
        if i >= real {
            let addr = a
                .server
                .get(i % a.server.len())
                .cloned()
                .unwrap_or_default();
            let (t, c, s) = (raw_tls.clone(), raw.clone(), stop(stop_rx.clone()));
            raw_tasks.push(if a.raw {
                tokio::spawn(crate::raw::reader(addr, t, c, s))
            } else {
                tokio::spawn(crate::raw::stalled(addr, t, name, c, s))
            });
            continue;
        }
        let checks = a
            .checks
            .then(|| NodeChecks::new(name.clone(), i < a.full_nodes, violations.clone()));
        let mut cfg = ClientConfig::new(name, Discovery::addresses(a.server.clone()));
        cfg.tls = tls.clone();
        cfg.info = "loadtest".into();
        cfg.light_store = i >= a.full_nodes;
        let client = SyncClient::new(cfg, metrics.clone()).context("client TLS settings")?;
        positions.push((client.position(), i < a.full_nodes));
        let node = Node {
            shared: shared.clone(),
            shard: i % SHARDS,
            in_sync: false,
            stale: false,
            checks,
        };
        tasks.push(tokio::spawn(client.run(node, stop(stop_rx.clone()))));
    }
    // Progress and commands each have a thread of their own, not a task among the nodes':
    // a swarm whose nodes saturate its runtime (thousands decoding snapshots) still reports
    // every half second and still hears `finish`, and a silent swarm is a stuck one.
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let progress = {
        let (shared, metrics, raw, done, violations, tallies) = (
            shared.clone(),
            metrics.clone(),
            raw.clone(),
            done.clone(),
            violations.clone(),
            tallies.clone(),
        );
        std::thread::Builder::new()
            .name("progress".into())
            .spawn(move || {
                while !done.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(500));
                    if done.load(Ordering::Relaxed) {
                        break;
                    }
                    // The mark before the count: a count read after a newer mark is that
                    // mark's (it was reset before the mark moved).
                    let mark = shared.mark.load(Ordering::SeqCst);
                    let resynced = shared.resynced.load(Ordering::SeqCst);
                    let checks = violations.counts();
                    let mut line = json!({
                            "event": "progress",
                            "mark": mark,
                            "resynced": resynced,
                            "connected": metrics.connected.get() + shared.direct_connected.load(Ordering::Relaxed) as i64,
                            "in_sync": shared.in_sync.load(Ordering::Relaxed),
                            "stale": shared.stale.load(Ordering::Relaxed),
                            "stale_told": shared.stale_told.load(Ordering::Relaxed),
                            "updates": shared.updates.load(Ordering::Relaxed),
                            "churn_updates": shared.churn_updates.load(Ordering::Relaxed),
                            "churn_frames": shared.churn_frames.load(Ordering::Relaxed),
                            "bytes_received": metrics.bytes_received.get() + shared.calico_bytes.load(Ordering::Relaxed),
                            "calico_failures": shared.calico_failures.load(Ordering::Relaxed),
                            "resumed_deltas": metrics.resume_count(ResumeKind::Deltas),
                            "resumed_digest": metrics.resume_count(ResumeKind::Digest),
                            "resumed_snapshot": metrics.resume_count(ResumeKind::Snapshot),
                            "raw_connected": raw.connected.load(Ordering::Relaxed),
                            "raw_frames": raw.frames.load(Ordering::Relaxed),
                            "raw_bytes": raw.bytes.load(Ordering::Relaxed),
                            "checks": checks,
                    });
                    if let Some(o) = line.as_object_mut() {
                        for t in &tallies {
                            t.progress(o);
                        }
                    }
                    println!("{line}");
                }
            })
            .context("starting the progress thread")?
    };
    let mut commands = commands();
    // A closed stdin (the coordinator gone) finishes too.
    while let Some(line) = commands.recv().await {
        match line.trim() {
            "finish" => break,
            // The latency histogram so far, and start a new one (a phase boundary).
            "histogram" => println!(
                "{}",
                json!({"event": "histogram", "histogram": take_histogram(&shared)?})
            ),
            // Calico-protocol nodes: count, from now on, each node once when a session it
            // starts from now on reaches InSync (before a crash: every node's resync after it).
            "mark" => {
                shared.calico_failures_extra_from.store(
                    shared.calico_failures.load(Ordering::SeqCst) + calico_states.len() as u64,
                    Ordering::SeqCst,
                );
                shared.resynced.store(0, Ordering::SeqCst);
                for t in &tallies {
                    t.reset_resynced();
                }
                let mark = shared.mark.fetch_add(1, Ordering::SeqCst) + 1;
                println!("{}", json!({"event": "marked", "mark": mark}));
            }
            // Each Calico syncer type's latency histogram so far, and start new ones (a
            // phase boundary of their own: `histogram` takes the totals).
            "histograms" => {
                let mut by = serde_json::Map::new();
                for t in &tallies {
                    by.insert(t.syncer.clone(), hex(&t.take_histogram()?)?.into());
                }
                println!("{}", json!({"event": "histograms", "by_syncer": by}));
            }
            // How many nodes hold each state now (Calico-protocol connections, typha-clients,
            // lean nodes), and the checks' violations so far.
            "digests" => {
                let c = calico_digests(&calico_states, &tallies);
                let (mut d, mut f) = (c.all, c.full);
                live_digests(&positions, &lean_live, &mut d, &mut f);
                println!(
                    "{}",
                    json!({"event": "digests", "digests": d, "full_digests": f,
                           "by_syncer": c.by_syncer, "full_by_syncer": c.full_by_syncer,
                           "checks": violations.counts()})
                );
            }
            _ => {}
        }
    }
    let _ = stop_tx.send(true);
    let mut raw_errors = 0;
    for t in raw_tasks {
        if !matches!(t.await, Ok(Ok(()))) {
            raw_errors += 1;
        }
    }
    let mut digests: BTreeMap<String, usize> = BTreeMap::new();
    // A direct node's "digest" is the last etcd revision it saw.
    for t in direct_tasks {
        let d = match t.await {
            Ok(Ok(r)) => format!("rev-{}", r.revision),
            Ok(Err(e)) => format!("error: {e:#}"),
            Err(e) => format!("error: {e}"),
        };
        *digests.entry(d).or_default() += 1;
    }
    // A direct Kubernetes node's: the highest pod resourceVersion it saw.
    for t in kube_tasks {
        let d = match t.await {
            Ok(Ok(r)) => format!("rv-{}", r.pods_rv),
            Ok(Err(e)) => format!("error: {e:#}"),
            Err(e) => format!("error: {e}"),
        };
        *digests.entry(d).or_default() += 1;
    }
    for t in calico_tasks {
        let _ = t.await;
    }
    let calico_d = calico_digests(&calico_states, &tallies);
    let mut full_digests = calico_d.full;
    for (d, n) in calico_d.all {
        *digests.entry(d).or_default() += n;
    }
    let lean_nodes = lean_tasks.len();
    let mut lean_inconsistent = 0;
    for t in lean_tasks {
        let d = match t.await {
            Ok(end) => {
                lean_inconsistent += end.inconsistent;
                match end.chain.digest() {
                    Some(d) => format!("{d:016x}"),
                    None => "none".to_owned(),
                }
            }
            Err(e) => format!("error: {e}"),
        };
        *digests.entry(d).or_default() += 1;
    }
    let sample_nodes = tasks.len();
    for (i, t) in tasks.into_iter().enumerate() {
        if let Ok((_, store)) = t.await {
            let d = format!("{:016x}", store.combined_digest());
            if i < a.full_nodes {
                *full_digests.entry(d.clone()).or_default() += 1;
            }
            *digests.entry(d).or_default() += 1;
        }
    }
    done.store(true, Ordering::Relaxed);
    let _ = progress.join();
    let hex = take_histogram(&shared)?;
    let checks = violations.counts();
    println!(
        "{}",
        json!({
            "event": "done",
            "digests": digests,
            "full_digests": full_digests,
            "by_syncer": calico_d.by_syncer,
            "full_by_syncer": calico_d.full_by_syncer,
            "histogram": hex,
            "updates": shared.updates.load(Ordering::Relaxed),
            "churn_updates": shared.churn_updates.load(Ordering::Relaxed),
            "bytes_received": metrics.bytes_received.get(),
            "raw_errors": raw_errors,
            "sample_nodes": sample_nodes,
            "lean_nodes": lean_nodes,
            // Sessions that ended because the stream disagreed with a node's state (a gap, a
            // wrong digest or snapshot count): lean nodes' and typha-clients'.
            "inconsistent": metrics.ended_count(typha_client::metrics::EndCause::Inconsistent),
            "lean_inconsistent": lean_inconsistent,
            "checks": checks,
        })
    );
    Ok(())
}

/// A node watching the Kubernetes API server itself; latency and counts go where a
/// typha-client node's do.
async fn direct_kube(
    url: String,
    tls: Arc<rustls::ClientConfig>,
    token: String,
    shared: Arc<Shared>,
    shard: usize,
    stop: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<crate::kube::KubeReport> {
    shared.direct_connected.fetch_add(1, Ordering::Relaxed);
    let s2 = shared.clone();
    crate::kube::direct_node(
        url,
        tls,
        token,
        move |listed| {
            s2.updates.fetch_add(listed as u64, Ordering::Relaxed);
            s2.in_sync.fetch_add(1, Ordering::Relaxed);
        },
        |line| {
            shared.updates.fetch_add(1, Ordering::Relaxed);
            let Some(sent) = crate::etcd::sent_ns_json(line) else {
                return;
            };
            let us = u64::try_from(now_ns().saturating_sub(sent) / 1000).unwrap_or(u64::MAX);
            shared.record(shard, &[us]);
        },
        stop,
    )
    .await
}

/// A node watching etcd itself; latency and counts go where a typha-client node's do.
async fn direct(
    endpoint: String,
    shared: Arc<Shared>,
    shard: usize,
    stop: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<crate::etcd::DirectReport> {
    shared.direct_connected.fetch_add(1, Ordering::Relaxed);
    let s2 = shared.clone();
    crate::etcd::direct_node(
        endpoint,
        |listed| {
            s2.updates.fetch_add(listed as u64, Ordering::Relaxed);
            s2.in_sync.fetch_add(1, Ordering::Relaxed);
        },
        |value| {
            shared.updates.fetch_add(1, Ordering::Relaxed);
            let Some(sent) = value.and_then(crate::etcd::sent_ns_json) else {
                return;
            };
            let us = u64::try_from(now_ns().saturating_sub(sent) / 1000).unwrap_or(u64::MAX);
            shared.record(shard, &[us]);
        },
        stop,
    )
    .await
}

/// How many Calico-protocol connections hold each state (`count:digest`), over all syncer
/// types and per syncer type.
#[derive(Default)]
struct CalicoDigests {
    /// Every connection.
    all: BTreeMap<String, usize>,
    /// Full connections (every update decoded).
    full: BTreeMap<String, usize>,
    /// Per syncer type, every connection.
    by_syncer: BTreeMap<String, BTreeMap<String, usize>>,
    /// Per syncer type, full connections.
    full_by_syncer: BTreeMap<String, BTreeMap<String, usize>>,
}

/// Counts the connections' states (`states`: the index of each one's syncer type in
/// `tallies`, and its state).
fn calico_digests(
    states: &[(usize, Arc<Mutex<crate::calico_node::NodeState>>)],
    tallies: &[Arc<crate::calico_node::SyncerTally>],
) -> CalicoDigests {
    let mut c = CalicoDigests::default();
    for (j, s) in states {
        let syncer = tallies.get(*j).map_or("?", |t| t.syncer.as_str());
        let mut s = s.lock().unwrap_or_else(|p| p.into_inner());
        let d = s.digest();
        let count = |m: &mut BTreeMap<String, usize>| *m.entry(d.clone()).or_default() += 1;
        if s.full {
            count(&mut c.full);
            count(c.full_by_syncer.entry(syncer.to_owned()).or_default());
        }
        count(&mut c.all);
        count(c.by_syncer.entry(syncer.to_owned()).or_default());
    }
    c
}

/// Adds the typha-client nodes' digests as they are now (`positions`: full stores also to
/// `full`) and the lean nodes' (`lean`) to the counts by digest (`none`: no state yet).
fn live_digests(
    positions: &[(Arc<Position>, bool)],
    lean: &[Arc<crate::lean::Live>],
    all: &mut BTreeMap<String, usize>,
    full: &mut BTreeMap<String, usize>,
) {
    let name = |d: Option<u64>| d.map_or_else(|| "none".to_owned(), |d| format!("{d:016x}"));
    for (p, is_full) in positions {
        let d = name(p.digest());
        if *is_full {
            *full.entry(d.clone()).or_default() += 1;
        }
        *all.entry(d).or_default() += 1;
    }
    for l in lean {
        *all.entry(name(l.digest())).or_default() += 1;
    }
}

/// Command lines from stdin, read on a thread of their own (tokio's stdin reads on the
/// blocking pool, which thousands of nodes' work must not stand in front of). The channel
/// closes when stdin does.
fn commands() -> tokio::sync::mpsc::UnboundedReceiver<String> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let spawned = std::thread::Builder::new()
        .name("commands".into())
        .spawn(move || {
            for line in std::io::stdin().lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
    // Without the thread no command can arrive: the dropped sender ends the swarm at once,
    // which the coordinator reports as the swarm exiting.
    drop(spawned);
    rx
}

/// The merged latency histogram of every shard (HdrHistogram V2, hex), and resets the shards.
fn take_histogram(shared: &Shared) -> anyhow::Result<String> {
    let mut merged = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3).context("histogram")?;
    for h in &shared.latency {
        let mut h = h.lock().unwrap_or_else(|p| p.into_inner());
        merged.add(&*h).context("merging histograms")?;
        h.reset();
    }
    hex(&merged)
}

/// A histogram as the swarm prints it: HdrHistogram V2, hex.
fn hex(merged: &Histogram<u64>) -> anyhow::Result<String> {
    let mut buf = Vec::new();
    V2Serializer::new()
        .serialize(merged, &mut buf)
        .context("serializing the histogram")?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use typha_protocol::model::{EncodedValue, Value};

    #[test]
    fn finds_the_write_time_in_an_encoded_endpoint_as_decoding_would() {
        let spec = typha_test_support::sample::Spec::default();
        let encoded = |r: &typha_server::calico::v3::Resource| {
            let kvs = typha_server::calico::convert::convert(r).unwrap();
            let (_, v) = kvs
                .into_iter()
                .find(|(_, v)| matches!(v, Value::WorkloadEndpoint(_)))
                .unwrap();
            EncodedValue::encode(&v)
        };
        let plain = spec.workload_endpoint(1, 2, 3);
        assert_eq!(crate::server::sent_ns(encoded(&plain).as_bytes()), None);
        let mut r = plain.clone();
        r.metadata.labels.insert(
            crate::server::SENT_LABEL.into(),
            "1763780000123456789".into(),
        );
        let value = encoded(&r);
        let Value::WorkloadEndpoint(w) = value.decode().unwrap() else {
            panic!("not an endpoint")
        };
        let label: u128 = w
            .labels
            .get(crate::server::SENT_LABEL)
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(crate::server::sent_ns(value.as_bytes()), Some(label));
    }
}
