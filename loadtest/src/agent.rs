//! The `agent` scenario: one node's agent in a big cluster, with the real Linux dataplane.
//!
//! A network namespace stands in for the node, with one veth pair per local pod (so routes go
//! to real interfaces). The agent's loop (calc graph and `LinuxDataplane`, exactly as
//! `typha-agent` runs them) runs on a thread inside it, fed the generated cluster the way the
//! sync client feeds it: snapshot batches, then InSync. Measured:
//!
//! - time from InSync to a fully programmed dataplane (first apply done);
//! - a pod added or removed on another node → time until this node's ipsets reflect it (the
//!   apply that contains it has returned), p50 and p99;
//! - bytes fed to `iptables-restore` and `ipset restore` per update.
//!
//! The typha transport is not in these numbers (the other scenarios measure it): this is the
//! agent's own cost. Baseline in the same run: the same loop with a reconciler that re-reads
//! the kernel and reconciles everything on every apply (what a controller without dirty
//! tracking or caches does).

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use hdrhistogram::Histogram;
use ipnet::Ipv4Net;
use prometheus::Registry;
use tokio::sync::oneshot;
use typha_agent::dataplane::linux::{LinuxConfig, LinuxDataplane};
use typha_agent::dataplane::{ApplyStats, Dataplane, DataplaneError, Desired, Dirty, Recording};
use typha_agent::metrics::AgentMetrics;
use typha_agent::run::{AgentConfig, Feeder, Shared, run};
use typha_client::SyncerCallbacks;
use typha_protocol::model::{Key, KeyPath, Revision, Update, Value, WorkloadEndpointKey};
use typha_protocol::sample::{Cluster, ClusterSpec};
use typha_protocol::{EncodedValue, model::UpdateKind};

/// Flags of the agent scenario.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct AgentArgs {
    /// Nodes in the cluster.
    #[arg(long, default_value_t = 5000)]
    pub(crate) nodes: usize,
    /// Pods on every other node.
    #[arg(long, default_value_t = 30)]
    pub(crate) pods_per_node: usize,
    /// Pods on the measured node.
    #[arg(long, default_value_t = 110)]
    pub(crate) local_pods: usize,
    /// Network policies.
    #[arg(long, default_value_t = 1000)]
    pub(crate) policies: usize,
    /// Namespaces.
    #[arg(long, default_value_t = 50)]
    pub(crate) namespaces: usize,
    /// Remote pod changes measured (half adds, half removes).
    #[arg(long, default_value_t = 200)]
    pub(crate) ops: usize,
    /// `linux` (needs root: network namespace, iptables, ipset) or `recording` (in memory:
    /// the calc graph's cost alone).
    #[arg(long, default_value = "linux")]
    pub(crate) dataplane: String,
    /// Then this many remote pods added at once: time until all are in the ipsets.
    #[arg(long, default_value_t = 1000)]
    pub(crate) burst: usize,
    /// Skip the re-read-everything baseline.
    #[arg(long)]
    pub(crate) no_baseline: bool,
}

/// What one run measured.
#[derive(Debug)]
struct Measured {
    label: &'static str,
    programmed: Duration,
    first_dataplane: Duration,
    first_apply: ApplyStats,
    chains: usize,
    ipsets: usize,
    routes: usize,
    add: Histogram<u64>,
    remove: Histogram<u64>,
    iptables_bytes_per_op: f64,
    /// The burst: how long until every pod of it was in the ipsets.
    burst: Option<Duration>,
    ipset_bytes_per_op: f64,
}

/// A pending watch: an address that should appear in (or leave) the ipsets.
struct Watch {
    ip: String,
    present: bool,
    done: oneshot::Sender<(Instant, ApplyStats)>,
    stats: ApplyStats,
}

/// The first apply: when it ended, how long the dataplane part took, what it wrote, and the
/// chain, ipset and route counts.
type First = (Instant, Duration, ApplyStats, usize, usize, usize);

#[derive(Default)]
struct Probe {
    first: Option<First>,
    members: HashSet<String>,
    watch: Option<Watch>,
}

/// Wraps a dataplane: timestamps applies and answers the watch.
struct Timed<D> {
    inner: D,
    naive: bool,
    probe: Arc<Mutex<Probe>>,
}

impl<D: Dataplane> Dataplane for Timed<D> {
    async fn apply(
        &mut self,
        desired: &Desired,
        dirty: &Dirty,
    ) -> Result<ApplyStats, DataplaneError> {
        let t0 = Instant::now();
        let stats = if self.naive {
            self.inner.resync();
            self.inner.apply(desired, &Dirty::all()).await?
        } else {
            self.inner.apply(desired, dirty).await?
        };
        let now = Instant::now();
        let mut p = self.probe.lock().unwrap_or_else(|e| e.into_inner());
        if p.first.is_none() {
            p.first = Some((
                now,
                now.saturating_duration_since(t0),
                stats,
                desired.chains.len(),
                desired.ipsets.len(),
                desired.routes.len(),
            ));
            p.members = desired
                .ipsets
                .values()
                .flat_map(|s| s.members.iter().cloned())
                .collect();
        }
        if let Some(mut w) = p.watch.take() {
            w.stats.add(&stats);
            let present = desired.ipsets.values().any(|s| s.members.contains(&w.ip));
            if present == w.present {
                let _ = w.done.send((now, w.stats));
            } else {
                p.watch = Some(w);
            }
        }
        Ok(stats)
    }

    fn resync(&mut self) {
        self.inner.resync();
    }

    async fn event(&mut self) {
        self.inner.event().await;
    }
}

/// Runs the scenario; prints the report.
pub(crate) async fn run_scenario(a: AgentArgs) -> anyhow::Result<()> {
    let linux = match a.dataplane.as_str() {
        "linux" => true,
        "recording" => false,
        other => bail!("--dataplane: {other:?} is not linux or recording"),
    };
    let spec = ClusterSpec {
        nodes: a.nodes,
        pods_per_node: a.pods_per_node,
        namespaces: a.namespaces,
        policies: a.policies,
        ..ClusterSpec::default()
    };
    let cluster = Cluster::new(spec);
    let started = Instant::now();
    let mut kvs = cluster.kvs();
    // The measured node is node 0; give it its local pods.
    kvs.extend((a.pods_per_node..a.local_pods).map(|p| cluster.workload_endpoint(0, p)));
    let me = Cluster::node_name(0);
    let endpoints = kvs
        .iter()
        .filter(|(k, _)| matches!(k, Key::WorkloadEndpoint(_)))
        .count();
    eprintln!(
        "agent: generated {} KVs ({endpoints} endpoints, {} policies) in {:.1} s",
        kvs.len(),
        a.policies,
        started.elapsed().as_secs_f64()
    );
    let mut results = vec![measure(&a, &kvs, &me, linux, false).await?];
    if !a.no_baseline {
        results.push(measure(&a, &kvs, &me, linux, true).await?);
    }
    report(&a, endpoints, &results);
    Ok(())
}

async fn measure(
    a: &AgentArgs,
    kvs: &[(Key, Value)],
    me: &str,
    linux: bool,
    naive: bool,
) -> anyhow::Result<Measured> {
    let label = if naive {
        "re-read everything per apply (baseline)"
    } else {
        "typha-agent (dirty tracking, cached kernel state)"
    };
    let local_ifaces: Vec<String> = kvs
        .iter()
        .filter_map(|(k, v)| match (k, v) {
            (Key::WorkloadEndpoint(wk), Value::WorkloadEndpoint(w)) if wk.hostname == me => {
                Some(w.name.clone())
            }
            _ => None,
        })
        .collect();
    let ns = if linux {
        Some(Netns::new(&local_ifaces)?)
    } else {
        None
    };
    let probe = Arc::new(Mutex::new(Probe::default()));
    let (mut feeder, rx) = Feeder::new();
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let thread = {
        let probe = probe.clone();
        let ns_path = ns.as_ref().map(|n| format!("/var/run/netns/{}", n.0));
        let cfg = AgentConfig::new(me);
        std::thread::spawn(move || -> anyhow::Result<()> {
            if let Some(path) = ns_path {
                let f = std::fs::File::open(&path).with_context(|| path.clone())?;
                nix::sched::setns(f, nix::sched::CloneFlags::CLONE_NEWNET)?;
            }
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(async move {
                let shared = Shared::new(AgentMetrics::new(&Registry::new()));
                let shutdown = async {
                    let _ = stop_rx.await;
                };
                if linux {
                    let inner = LinuxDataplane::new(&LinuxConfig::default())?;
                    let mut dp = Timed {
                        inner,
                        naive,
                        probe,
                    };
                    run(cfg, rx, &mut dp, &shared, shutdown).await;
                } else {
                    let mut dp = Timed {
                        inner: Recording::default(),
                        naive,
                        probe,
                    };
                    run(cfg, rx, &mut dp, &shared, shutdown).await;
                }
                anyhow::Ok(())
            })
        })
    };

    // The snapshot, in the batches a client delivers, then InSync.
    let updates = typha_protocol::sample::to_updates(kvs, 1);
    feeder.on_status_updated(typha_protocol::model::SyncStatus::ResyncInProgress);
    for chunk in updates.chunks(1000) {
        feeder.on_updates(chunk.to_vec());
    }
    let in_sync = Instant::now();
    feeder.on_status_updated(typha_protocol::model::SyncStatus::InSync);
    let first = loop {
        if let Some(f) = probe.lock().unwrap_or_else(|e| e.into_inner()).first {
            break f;
        }
        if thread.is_finished() {
            bail!("the agent loop ended before programming the dataplane");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let programmed = first.0.saturating_duration_since(in_sync);

    // Remote pods that some active rule's ipset holds: clone them with fresh addresses.
    let members = probe
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .members
        .clone();
    let candidates: Vec<(
        &WorkloadEndpointKey,
        &typha_protocol::model::WorkloadEndpoint,
    )> = kvs
        .iter()
        .filter_map(|(k, v)| match (k, v) {
            (Key::WorkloadEndpoint(wk), Value::WorkloadEndpoint(w))
                if wk.hostname != me
                    && w.ipv4_nets
                        .first()
                        .is_some_and(|n| members.contains(&n.addr().to_string())) =>
            {
                Some((wk, w))
            }
            _ => None,
        })
        .collect();
    if candidates.is_empty() {
        bail!("no remote pod is in any of this node's ipsets: no policy applies here?");
    }
    let mut add = Histogram::<u64>::new(3)?;
    let mut remove = Histogram::<u64>::new(3)?;
    let (mut ipt, mut ips) = (0u64, 0u64);
    let mut revision = 10_000_000u64;
    for i in 0..a.ops.div_ceil(2) {
        let (wk, w) = candidates
            .get(i * 7919 % candidates.len())
            .context("candidate")?;
        let mut key = (*wk).clone();
        key.workload = format!("{}-lt{i}", key.workload);
        let mut value = (*w).clone();
        let ip = std::net::Ipv4Addr::new(10, 250, (i / 250) as u8, (i % 250 + 1) as u8);
        value.ipv4_nets = vec![Ipv4Net::from(ip)];
        let path = KeyPath::from(Key::WorkloadEndpoint(key));
        for present in [true, false] {
            revision += 1;
            let u = if present {
                Update::put(
                    path.clone(),
                    EncodedValue::encode(&Value::WorkloadEndpoint(value.clone())),
                    Revision(revision),
                    UpdateKind::New,
                )
            } else {
                Update::delete(path.clone(), Revision(revision))
            };
            let (done_tx, done_rx) = oneshot::channel();
            probe.lock().unwrap_or_else(|e| e.into_inner()).watch = Some(Watch {
                ip: ip.to_string(),
                present,
                done: done_tx,
                stats: ApplyStats::default(),
            });
            let t0 = Instant::now();
            feeder.on_updates(vec![u]);
            let (t1, stats) = tokio::time::timeout(Duration::from_secs(60), done_rx)
                .await
                .context("an ipset update took over 60 s")?
                .context("the agent loop ended")?;
            let us =
                u64::try_from(t1.saturating_duration_since(t0).as_micros()).unwrap_or(u64::MAX);
            if present {
                add.record(us.max(1))?;
            } else {
                remove.record(us.max(1))?;
            }
            ipt += stats.iptables_bytes;
            ips += stats.ipset_bytes;
        }
    }
    // The burst: N adds queued back to back; the loop batches what arrives during an apply.
    // Updates are applied in order, so the apply that holds the last address holds them all.
    let mut burst = None;
    if a.burst > 0 {
        let mut batch = Vec::new();
        let mut last_ip = String::new();
        for i in 0..a.burst {
            let (wk, w) = candidates
                .get(i * 104_729 % candidates.len())
                .context("candidate")?;
            let mut key = (*wk).clone();
            key.workload = format!("{}-burst{i}", key.workload);
            let mut value = (*w).clone();
            let ip = std::net::Ipv4Addr::new(10, 251, (i / 250) as u8, (i % 250 + 1) as u8);
            value.ipv4_nets = vec![Ipv4Net::from(ip)];
            revision += 1;
            batch.push(Update::put(
                KeyPath::from(Key::WorkloadEndpoint(key)),
                EncodedValue::encode(&Value::WorkloadEndpoint(value)),
                Revision(revision),
                UpdateKind::New,
            ));
            last_ip = ip.to_string();
        }
        let (done_tx, done_rx) = oneshot::channel();
        probe.lock().unwrap_or_else(|e| e.into_inner()).watch = Some(Watch {
            ip: last_ip,
            present: true,
            done: done_tx,
            stats: ApplyStats::default(),
        });
        let t0 = Instant::now();
        for u in batch {
            feeder.on_updates(vec![u]);
        }
        let (t1, _) = tokio::time::timeout(Duration::from_secs(120), done_rx)
            .await
            .context("the burst took over 120 s")?
            .context("the agent loop ended")?;
        burst = Some(t1.saturating_duration_since(t0));
    }
    let _ = stop_tx.send(());
    drop(feeder);
    match thread.join() {
        Ok(r) => r?,
        Err(_) => bail!("the agent thread panicked"),
    }
    let ops = (add.len() + remove.len()).max(1) as f64;
    Ok(Measured {
        label,
        programmed,
        first_dataplane: first.1,
        first_apply: first.2,
        chains: first.3,
        ipsets: first.4,
        routes: first.5,
        add,
        remove,
        iptables_bytes_per_op: ipt as f64 / ops,
        ipset_bytes_per_op: ips as f64 / ops,
        burst,
    })
}

fn report(a: &AgentArgs, endpoints: usize, r: &[Measured]) {
    println!(
        "## agent: node with {} local pods in {} nodes, {endpoints} endpoints, {} policies ({} dataplane)\n",
        a.local_pods, a.nodes, a.policies, a.dataplane
    );
    println!(
        "| | InSync → programmed | first apply: iptables / ipset bytes | chains / ipsets / routes | pod added → ipset p50 / p99 | pod removed → ipset p50 / p99 | bytes per update: iptables / ipset |"
    );
    println!("|---|---|---|---|---|---|---|");
    let ms = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    for m in r {
        println!(
            "| {} | {:.0} ms ({:.0} ms) | {} / {} | {} / {} / {} | {:.2} / {:.2} ms | {:.2} / {:.2} ms | {:.0} / {:.0} |",
            m.label,
            m.programmed.as_secs_f64() * 1000.0,
            m.first_dataplane.as_secs_f64() * 1000.0,
            m.first_apply.iptables_bytes,
            m.first_apply.ipset_bytes,
            m.chains,
            m.ipsets,
            m.routes,
            ms(&m.add, 0.5),
            ms(&m.add, 0.99),
            ms(&m.remove, 0.5),
            ms(&m.remove, 0.99),
            m.iptables_bytes_per_op,
            m.ipset_bytes_per_op,
        );
    }
    for m in r {
        if let Some(b) = m.burst {
            println!(
                "\n{}: burst of {} remote pods → all in the ipsets after {:.0} ms ({:.0} updates/s)",
                m.label,
                a.burst,
                b.as_secs_f64() * 1000.0,
                a.burst as f64 / b.as_secs_f64().max(1e-9)
            );
        }
    }
    if let [ours, base] = r {
        let ratio = |b: f64, o: f64| if o > 0.0 { b / o } else { f64::NAN };
        println!(
            "\nbaseline / ours: pod added p50 {:.1}×, p99 {:.1}×; removed p50 {:.1}×, p99 {:.1}×",
            ratio(ms(&base.add, 0.5), ms(&ours.add, 0.5)),
            ratio(ms(&base.add, 0.99), ms(&ours.add, 0.99)),
            ratio(ms(&base.remove, 0.5), ms(&ours.remove, 0.5)),
            ratio(ms(&base.remove, 0.99), ms(&ours.remove, 0.99)),
        );
    }
}

/// The measured node's network namespace, with a veth pair per local pod and an uplink whose
/// subnet holds the other nodes' addresses (10.20.0.0/16 in the sample cluster).
struct Netns(String);

impl Netns {
    fn new(ifaces: &[String]) -> anyhow::Result<Netns> {
        let name = format!("lt-agent-{}", std::process::id());
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &name])
            .stderr(std::process::Stdio::null())
            .status();
        sh(&["ip", "netns", "add", &name])?;
        let ns = Netns(name);
        let mut batch = String::from("link set lo up\n");
        batch.push_str("link add up0 type veth peer name up1\naddr add 10.20.255.254/16 dev up0\nlink set up0 up\nlink set up1 up\n");
        let mut seen = BTreeMap::new();
        for (i, iface) in ifaces.iter().enumerate() {
            if seen.insert(iface.clone(), i).is_some() {
                continue;
            }
            batch.push_str(&format!(
                "link add {iface} type veth peer name lp{i}\nlink set {iface} up\nlink set lp{i} up\n"
            ));
        }
        let path = std::env::temp_dir().join(format!("{}.batch", ns.0));
        std::fs::write(&path, batch)?;
        sh(&["ip", "-n", &ns.0, "-batch", &path.display().to_string()])?;
        let _ = std::fs::remove_file(path);
        Ok(ns)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.0])
            .status();
    }
}

fn sh(args: &[&str]) -> anyhow::Result<()> {
    let (prog, rest) = args.split_first().context("empty command")?;
    let out = std::process::Command::new(prog).args(rest).output()?;
    if !out.status.success() {
        bail!("{args:?}: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}
