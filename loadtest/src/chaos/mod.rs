//! The `chaos` scenario (issue 19): replicas of our server over a real datastore (etcd, or
//! a kube-apiserver over etcd), nodes spread over all of them, steady churn, and a seeded
//! schedule of faults:
//! - a replica killed (SIGKILL) and restarted; a replica stopped as an orchestrator stops it
//!   (SIGTERM, drain) and restarted; every replica restarted one after another;
//! - the datastore killed and restarted; etcd's history compacted while the replicas watch;
//! - half the nodes restarted at once (their swarm processes killed and started again: a
//!   reconnect burst);
//! - network faults (see `net`): a group of nodes behind a slow, lossy link, cut off longer
//!   than the nodes' read timeout, or left holding half-open connections; a replica cut off
//!   from the datastore while its nodes still reach it, which must tell them that its view is
//!   stale.
//!
//! With network faults the replicas each serve at an address of their own and balance their
//! connections through the Service's EndpointSlice, which the run keeps as the EndpointSlice
//! controller would (in the datastore's API server, or over etcd in one of its own); at the
//! end they must be balanced by their own rule.
//!
//! After each fault it waits until every node is in sync again (and none believes its server
//! stale) and records how long that took; at the end, with the churn over, every replica must
//! hold the same state and every node exactly that state. The memory of every process is
//! sampled throughout. The churn is of every kind, and while the faults go on `checks`
//! checks that no node deletes a key that still exists or applies an older value after a
//! newer one, and at quiescent checkpoints that every replica and node holds the
//! datastore's state.
//!
//! The same seed gives the same schedule (`--seed`; a run without one draws a seed and prints
//! it), so a failure can be run again. The first faults are one of each kind, in an order
//! the seed shuffles, so even a short run meets every kind; the rest are drawn at random.
//! Network faults need root (the run enters a network namespace of its own); `--no-net`
//! runs without them. See docs/loadtest.md.

mod checks;

pub(crate) mod net;

mod memory;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Serialize;

use crate::child::Child;
use crate::harness::{self, Common, Outcome, Timeline, Workdir, mib};
use crate::kube::{KubeCluster, Readiness};
use crate::server::{Listen, Server, free_port};
use crate::store::{Store, StoreKind};
use memory::{Memory, Role};

/// Settings of a chaos run.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ChaosArgs {
    /// Simulated nodes (the generated cluster has as many).
    #[arg(long, default_value_t = 1000)]
    pub(crate) nodes: usize,
    /// Pods per node in the generated cluster.
    #[arg(long, default_value_t = 10)]
    pub(crate) pods_per_node: usize,
    /// Server replicas over the one datastore.
    #[arg(long, default_value_t = 3)]
    pub(crate) replicas: usize,
    /// How long the churn and the faults go on, seconds.
    #[arg(long, default_value_t = 600)]
    pub(crate) secs: u64,
    /// Churn rate, updates per second, written into the datastore.
    #[arg(long, default_value_t = 50.0)]
    pub(crate) rate: f64,
    /// Seconds between one fault's recovery and the next fault.
    #[arg(long, default_value_t = 20)]
    pub(crate) fault_every: u64,
    /// The schedule's seed (default: drawn, and printed).
    #[arg(long)]
    pub(crate) seed: Option<u64>,
    /// Longest a fault may take to recover from (every node in sync again), seconds.
    #[arg(long, default_value_t = 180)]
    pub(crate) converge_within: u64,
    /// Groups of nodes: each is one swarm process in a network namespace of its own behind a
    /// link of its own, and a network fault hits one group.
    #[arg(long, default_value_t = 4)]
    pub(crate) groups: usize,
    /// No network namespaces and no network faults (a run without root); swarms are split by
    /// `--nodes-per-swarm` instead of `--groups`.
    #[arg(long)]
    pub(crate) no_net: bool,
    /// How long a group stays cut off, seconds: longer than the nodes' read timeout (30 s).
    #[arg(long, default_value_t = 35)]
    pub(crate) partition_secs: u64,
    /// How long a degraded link lasts, seconds.
    #[arg(long, default_value_t = 20)]
    pub(crate) degraded_secs: u64,
    /// The delay a degraded link adds, each way, milliseconds.
    #[arg(long, default_value_t = 100)]
    pub(crate) delay_ms: u64,
    /// The share of packets a degraded link drops, each way, percent.
    #[arg(long, default_value_t = 5)]
    pub(crate) loss_percent: u32,
    /// Only these kinds of fault (default: every kind): kill_replica, term_replica,
    /// rolling_restart, kill_datastore, compact_etcd, restart_nodes, degraded, partition,
    /// half_open, cut_from_datastore.
    #[arg(long, value_delimiter = ',')]
    pub(crate) kinds: Vec<String>,
    /// The datastore: etcd, or a real kube-apiserver over etcd (peers/build).
    #[arg(long, value_enum, default_value = "etcd")]
    pub(crate) datastore: StoreKind,
    /// A quiescent checkpoint (see `checks`) after every this many faults' recoveries (0:
    /// only at the end).
    #[arg(long, default_value_t = 1)]
    pub(crate) checkpoint_every: usize,
    /// Connection balancing off. It is on with network faults: the replicas
    /// (`TYPHA_CONNECTIONREBALANCINGMODE=kubernetes`) find each other through the Service's
    /// EndpointSlice, which the run keeps as the EndpointSlice controller would, in the
    /// datastore's API server or, over etcd, in a Kubernetes API of its own (a Calico cluster
    /// on etcd still runs Kubernetes).
    #[arg(long)]
    pub(crate) no_balancing: bool,
    #[command(flatten)]
    pub(crate) common: Common,
}

/// One kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum Fault {
    /// A replica killed (SIGKILL) and started again on the same ports.
    KillReplica(usize),
    /// A replica stopped with SIGTERM (it drains its nodes away) and started again.
    TermReplica(usize),
    /// Every replica stopped with SIGTERM and started again, one after another.
    RollingRestart,
    /// The datastore the replicas talk to (etcd, or kube-apiserver) killed (SIGKILL) and
    /// started again: the replicas' watches break.
    KillDatastore,
    /// etcd's history (under the API server, for Kubernetes) compacted to its current
    /// revision while the replicas watch it.
    CompactEtcd,
    /// Half the nodes restarted at once, from this swarm on: their swarm processes SIGKILLed
    /// and started again, so they come back fresh and connect in the same moment. (With
    /// `--no-net`, one swarm: up to `--nodes-per-swarm` nodes.)
    RestartNodes(usize),
    /// A group's link delays every packet by `--delay-ms` and drops `--loss-percent` of
    /// them, each way, for `--degraded-secs`.
    Degraded(usize),
    /// A group cut off (every packet dropped, both ways) for `--partition-secs`.
    Partition(usize),
    /// A group's connections made half-open: the servers' end destroyed while the group's
    /// packets are dropped, so the reset never arrives.
    HalfOpen(usize),
    /// A replica cut off from the datastore while its nodes still reach it, until it has told
    /// them that its view is stale.
    CutFromDatastore(usize),
}

/// The schedule's generator (splitmix64: small, and the same everywhere).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    /// The kind of fault numbered `k` (0 to [`KINDS`] - 1).
    fn of_kind(&mut self, k: usize, replicas: usize, swarms: usize) -> Fault {
        match k {
            0 => Fault::KillReplica(self.below(replicas)),
            1 => Fault::TermReplica(self.below(replicas)),
            2 => Fault::RollingRestart,
            3 => Fault::KillDatastore,
            4 => Fault::CompactEtcd,
            5 => Fault::RestartNodes(self.below(swarms)),
            6 => Fault::Degraded(self.below(swarms)),
            7 => Fault::Partition(self.below(swarms)),
            8 => Fault::HalfOpen(self.below(swarms)),
            _ => Fault::CutFromDatastore(self.below(replicas)),
        }
    }
}

/// Kinds of fault: the first [`PROCESS_KINDS`] need no network namespaces.
const KINDS: usize = 10;
const PROCESS_KINDS: usize = 6;

/// The schedule: every kind once, in an order the seed shuffles (so a short run covers them
/// all), then kinds drawn at random, weighted towards the common ones (replicas crashing and
/// being replaced, nodes restarting).
struct Schedule {
    rng: Rng,
    first: Vec<usize>,
    replicas: usize,
    swarms: usize,
    /// The kinds it draws from.
    kinds: Vec<usize>,
}

/// How often each kind is drawn once every kind has come once, out of their sum: replicas
/// crashing and etcd going away most, as in a cluster.
const WEIGHTS: [usize; KINDS] = [3, 2, 1, 2, 1, 2, 1, 1, 1, 2];

/// The names of the kinds, as `--kinds` takes them.
const NAMES: [&str; KINDS] = [
    "kill_replica",
    "term_replica",
    "rolling_restart",
    "kill_datastore",
    "compact_etcd",
    "restart_nodes",
    "degraded",
    "partition",
    "half_open",
    "cut_from_datastore",
];

impl Schedule {
    /// A schedule over these kinds (numbers below [`KINDS`]).
    fn new(seed: u64, replicas: usize, swarms: usize, kinds: Vec<usize>) -> Self {
        let mut rng = Rng(seed);
        let mut first = kinds.clone();
        for i in (1..first.len()).rev() {
            first.swap(i, rng.below(i + 1));
        }
        first.reverse();
        Schedule {
            rng,
            first,
            replicas,
            swarms,
            kinds,
        }
    }

    fn next(&mut self) -> Fault {
        let k = match self.first.pop() {
            Some(k) => k,
            None => {
                let weight = |k: &usize| WEIGHTS.get(*k).copied().unwrap_or(1);
                let mut at = self.rng.below(self.kinds.iter().map(weight).sum());
                let mut chosen = 0;
                for k in &self.kinds {
                    if at < weight(k) {
                        chosen = *k;
                        break;
                    }
                    at -= weight(k);
                }
                chosen
            }
        };
        self.rng.of_kind(k, self.replicas, self.swarms)
    }
}

/// The kinds a run draws from: those named (all by default), less the network faults
/// without network namespaces.
fn kinds_of(names: &[String], with_net: bool) -> anyhow::Result<Vec<usize>> {
    let mut kinds = Vec::new();
    for (k, name) in NAMES.iter().enumerate() {
        if (names.is_empty() || names.iter().any(|n| n == name)) && (with_net || k < PROCESS_KINDS)
        {
            kinds.push(k);
        }
    }
    if let Some(bad) = names.iter().find(|n| !NAMES.contains(&n.as_str())) {
        anyhow::bail!("no fault kind {bad:?}; the kinds: {}", NAMES.join(", "));
    }
    anyhow::ensure!(
        !kinds.is_empty(),
        "none of the kinds asked for can run without network namespaces (--no-net)"
    );
    Ok(kinds)
}

/// One fault and what recovering from it took.
#[derive(Debug, Clone, Serialize)]
struct Injected {
    /// Seconds into the churn when it was injected.
    at_secs: f64,
    fault: Fault,
    /// Seconds from injecting it until every node was in sync again.
    converged_secs: f64,
    /// Nodes that resumed by deltas, by digest buckets, by a full snapshot meanwhile.
    resumed: [u64; 3],
    /// What the fault did, where there is more to say (connections cut, time until stale).
    #[serde(skip_serializing_if = "String::is_empty")]
    detail: String,
}

/// What a chaos run found.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ChaosResult {
    /// The schedule's seed: `--seed` runs the same schedule again.
    pub(crate) seed: u64,
    pub(crate) nodes: usize,
    pub(crate) replicas: usize,
    pub(crate) kvs: u64,
    pub(crate) secs: u64,
    /// Churn updates written into the datastore.
    pub(crate) updates_written: u64,
    faults: Vec<Injected>,
    /// Resumes over the whole run: by deltas, by digest buckets, by full snapshot.
    pub(crate) resumed_deltas: u64,
    pub(crate) resumed_digest: u64,
    pub(crate) resumed_snapshot: u64,
    /// Longest recovery from one fault, seconds.
    pub(crate) worst_converge_secs: f64,
    /// Every replica's digest equal at the end.
    pub(crate) replicas_agree: bool,
    /// Largest RSS any replica reached, bytes, and the largest after the first sync.
    pub(crate) replica_peak_rss: u64,
    pub(crate) replica_rss_synced: u64,
    /// The same for the swarm processes (each a group of nodes) and for the datastore's
    /// processes (etcd; kube-apiserver and its etcd).
    pub(crate) swarm_peak_rss: u64,
    pub(crate) swarm_rss_synced: u64,
    pub(crate) datastore_peak_rss: u64,
    pub(crate) datastore_rss_synced: u64,
    /// etcd, or kubernetes.
    pub(crate) datastore: StoreKind,
    /// Whether the network faults were on (the run in a network namespace of its own).
    pub(crate) network_faults: bool,
    #[serde(flatten)]
    pub(crate) exact: harness::Exactness,
    /// The checks made while the faults went on.
    checks: checks::Report,
    /// Connection balancing: whether it was on, the connections the replicas moved to
    /// balance their loads, and each replica's load at the end once balanced (or when the
    /// wait for that ran out: `balanced` false).
    pub(crate) balancing: bool,
    pub(crate) rebalanced: u64,
    pub(crate) final_loads: Vec<u64>,
    pub(crate) balanced: bool,
}

fn resumed(swarms: &[Child]) -> [u64; 3] {
    [
        harness::sum(swarms, "resumed_deltas"),
        harness::sum(swarms, "resumed_digest"),
        harness::sum(swarms, "resumed_snapshot"),
    ]
}

fn add(a: [u64; 3], b: [u64; 3]) -> [u64; 3] {
    [a[0] + b[0], a[1] + b[1], a[2] + b[2]]
}

/// One swarm's nodes: the first one's number, how many, and how many of them (the first
/// ones) are real typha-clients.
#[derive(Debug, Clone, Copy)]
struct Slot {
    first: usize,
    nodes: usize,
    sample: usize,
}

/// `nodes` split into swarms of at most `per`, each with its share of `sample_nodes`.
fn layout(nodes: usize, per: usize, sample_nodes: usize) -> Vec<Slot> {
    let mut out = Vec::new();
    let mut first = 0;
    while first < nodes {
        let n = per.max(1).min(nodes - first);
        let sample = sample_nodes.saturating_mul(n).div_ceil(nodes).min(n);
        out.push(Slot {
            first,
            nodes: n,
            sample,
        });
        first += n;
    }
    out
}

/// The Service's EndpointSlice, with balancing.
struct Endpoints {
    /// The Kubernetes API that holds it when the datastore is not one (over etcd); `None`:
    /// the datastore's.
    own_api: Option<KubeCluster>,
    /// Each replica's endpoint.
    ready: Vec<Readiness>,
    /// The replicas' sync port.
    port: u16,
}

/// The run's processes and network.
struct Cluster {
    wd: Workdir,
    store: Store,
    servers: Vec<Server>,
    swarms: Vec<Child>,
    slots: Vec<Slot>,
    /// Each swarm's group (none with `--no-net`).
    groups: Vec<net::Group>,
    /// The servers' addresses as the swarms reach them.
    addrs: Vec<String>,
    common: Common,
    memory: Memory,
    /// With balancing: where the replicas find each other.
    endpoints: Option<Endpoints>,
    /// Connections moved by balancing, counted by replica processes since stopped.
    rebalanced_retired: u64,
}

impl Cluster {
    /// Starts (again) swarm `i` in its group.
    fn start_swarm(&self, i: usize) -> anyhow::Result<Child> {
        let slot = self.slots.get(i).context("no such swarm")?;
        let addrs: Vec<&str> = self.addrs.iter().map(String::as_str).collect();
        self.wd.swarm_in(
            self.groups.get(i).map(|g| g.netns.as_str()),
            &addrs,
            (slot.nodes, slot.first, slot.sample),
            &self.common,
            // Every typha-client node checks what it is told (see `checks`).
            &["--checks".to_owned()],
        )
    }

    /// Sets replica `i`'s endpoint in the Service's EndpointSlice (with balancing; nothing
    /// without), as the EndpointSlice controller would on seeing its pod change.
    async fn mark(&mut self, i: usize, r: Readiness) -> anyhow::Result<()> {
        let Some(e) = &mut self.endpoints else {
            return Ok(());
        };
        let k = match (&e.own_api, &self.store) {
            (Some(k), _) | (None, Store::Kube(k, _)) => k,
            (None, Store::Etcd(_)) => anyhow::bail!("balancing over etcd without an API server"),
        };
        if let Some(slot) = e.ready.get_mut(i) {
            *slot = r;
        }
        let list: Vec<_> = e
            .ready
            .iter()
            .enumerate()
            .map(|(k, r)| (net::serving_ip(k), *r))
            .collect();
        let mut tries = 0;
        loop {
            match k.publish_typha(&list, e.port).await {
                Ok(()) => return Ok(()),
                Err(e) if tries < 10 => {
                    tries += 1;
                    tracing::debug!(error = %format!("{e:#}"), "retrying the EndpointSlice");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Connections replica `i` has moved to balance the loads (0 without balancing).
    async fn rebalanced_by(&mut self, i: usize) -> anyhow::Result<u64> {
        if self.endpoints.is_none() {
            return Ok(0);
        }
        Ok(replica(self, i)?
            .drops()
            .await?
            .get("rebalance")
            .copied()
            .unwrap_or(0))
    }

    /// Replica `i` stopped, by SIGTERM (it drains its nodes away) or SIGKILL (a crash), and
    /// started again on the same address and ports, its endpoint kept as the EndpointSlice
    /// controller keeps a replaced pod's: terminating from the SIGTERM, not ready once
    /// crashed, ready again when the replica says so.
    async fn restart_replica(&mut self, i: usize, graceful: bool) -> anyhow::Result<()> {
        self.rebalanced_retired += self.rebalanced_by(i).await?;
        if graceful {
            self.mark(i, Readiness::Terminating).await?;
            replica(self, i)?.terminate().await?;
        } else {
            replica(self, i)?.kill().await?;
            self.mark(i, Readiness::NotReady).await?;
        }
        replica(self, i)?.respawn().await?;
        self.mark(i, Readiness::Ready).await
    }

    /// Tells the memory sampler which processes there are now.
    fn watch(&self) {
        let w = self.store.watched();
        self.memory.watch(
            self.servers
                .iter()
                .map(|s| (Role::Replica, s.pid()))
                .chain(self.swarms.iter().map(|s| (Role::Swarm, s.pid())))
                .chain(
                    [Some(w.datastore), w.etcd_under]
                        .into_iter()
                        .flatten()
                        .map(|p| (Role::Datastore, p)),
                ),
        );
    }
}

pub(crate) async fn run(a: ChaosArgs) -> anyhow::Result<Outcome> {
    a.common.own_server_only("chaos")?;
    anyhow::ensure!(a.replicas >= 2, "chaos needs at least two replicas");
    let with_net = !a.no_net;
    let seed = a.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    eprintln!("chaos: seed {seed} (run it again with --seed {seed})");
    let fail = |what: String| anyhow::anyhow!("chaos (seed {seed}): {what}");
    let kinds = kinds_of(&a.kinds, with_net)?;

    anyhow::ensure!(
        !with_net || a.replicas <= net::MAX_REPLICAS,
        "at most {} replicas with network faults",
        net::MAX_REPLICAS
    );
    let balancing = with_net && !a.no_balancing;
    let wd = Workdir::new(a.nodes, a.pods_per_node, a.common.plain)?.using(&a.common);
    let timeline = Timeline::start();
    let (store, _) = Store::start_with(a.datastore, &wd, with_net).await?;
    // With network faults each replica serves at an address of its own, all on the same
    // ports, as pods behind a Service.
    let (sync_port, http_port) = (free_port()?, free_port()?);
    let endpoints = if balancing {
        let own_api = match a.datastore {
            StoreKind::Etcd => Some(KubeCluster::start(wd.path(), true).await?),
            StoreKind::Kubernetes => None,
        };
        Some(Endpoints {
            own_api,
            ready: vec![Readiness::NotReady; a.replicas],
            port: sync_port,
        })
    } else {
        None
    };
    let mut c = Cluster {
        wd,
        store,
        servers: Vec::new(),
        swarms: Vec::new(),
        slots: Vec::new(),
        groups: Vec::new(),
        addrs: Vec::new(),
        common: a.common.clone(),
        memory: Memory::start(),
        endpoints,
        rebalanced_retired: 0,
    };
    for i in 0..a.replicas {
        let name = format!("replica {i}");
        let s = if with_net {
            // Each replica reaches the datastore at an address of its own, to be cut off
            // alone.
            let backend = c
                .store
                .backend_at(&format!("replica-{i}"), &net::replica_ip(i))?;
            let mut settings: Vec<(&str, String)> = Vec::new();
            if let Some(e) = &c.endpoints {
                settings.push(("TYPHA_CONNECTIONREBALANCINGMODE", "kubernetes".into()));
                if let Some(k) = &e.own_api {
                    // The Kubernetes API beside the datastore, at this replica's own address.
                    let kubeconfig =
                        k.typha_kubeconfig_at(&format!("replica-{i}"), &net::replica_ip(i))?;
                    settings.push(("KUBECONFIG", kubeconfig.display().to_string()));
                }
            }
            let listen = Listen::Own {
                ip: net::serving_ip(i),
                sync: sync_port,
                http: http_port,
            };
            c.wd.server_placed(&name, &backend, listen, &settings)
                .await?
        } else {
            c.wd.server_on(&name, &c.store.backend(false)?).await?
        };
        timeline.add_server(s.pid());
        c.servers.push(s);
        c.mark(i, Readiness::Ready).await?;
    }
    let per = if with_net {
        a.nodes.div_ceil(a.groups.max(1))
    } else {
        a.common.nodes_per_swarm
    };
    c.slots = layout(a.nodes, per, a.common.sample_nodes);
    if with_net {
        c.groups = (0..c.slots.len())
            .map(net::Group::new)
            .collect::<anyhow::Result<Vec<_>>>()?;
    }
    c.addrs = c.servers.iter().map(|s| s.addr.clone()).collect();
    // The typha-client nodes: those that hear when a server's view is stale.
    let told: HashSet<String> = c
        .slots
        .iter()
        .flat_map(|s| (s.first..s.first + s.sample).map(|k| format!("sim-{k}")))
        .collect();
    for i in 0..c.slots.len() {
        let s = c.start_swarm(i)?;
        c.swarms.push(s);
    }
    timeline.add_swarms(&c.swarms);
    c.watch();
    let mut schedule = Schedule::new(seed, a.replicas, c.swarms.len(), kinds);
    // Resumes counted by swarm processes since replaced (a restarted swarm counts afresh).
    let mut retired = [0u64; 3];
    let n = a.nodes as u64;
    let converge = Duration::from_secs(a.converge_within);
    harness::wait_for(
        &c.swarms,
        "in_sync",
        n,
        "in sync",
        Duration::from_secs(1800),
    )
    .await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let synced = c.memory.now();

    let (mut checks, churn) = checks::Checks::start(
        seed,
        &c.store,
        &c.wd,
        (a.rate, a.secs as f64),
        a.nodes,
        a.checkpoint_every,
    )?;
    let started = Instant::now();
    let mut faults = Vec::new();
    while started.elapsed() + Duration::from_secs(a.fault_every) < Duration::from_secs(a.secs) {
        tokio::time::sleep(Duration::from_secs(a.fault_every)).await;
        let fault = schedule.next();
        let at = started.elapsed().as_secs_f64();
        let before = add(resumed(&c.swarms), retired);
        let t0 = Instant::now();
        eprintln!("chaos: {at:.0} s: {fault:?}");
        let detail = inject(
            &mut c,
            fault,
            &a,
            &told,
            (&mut retired, &mut checks),
            &timeline,
        )
        .await
        .map_err(|e| fail(format!("{fault:?} at {at:.0} s: {e:#}")))?;
        for s in &c.servers {
            timeline.add_server(s.pid());
        }
        c.watch();
        // Give the nodes a moment to notice, then wait until every one is in sync again and
        // none believes its server's view stale.
        tokio::time::sleep(Duration::from_secs(1)).await;
        loop {
            if let Some(gone) = harness::gone(&c.swarms) {
                return Err(fail(format!("a swarm ended: {gone}")));
            }
            let in_sync = harness::sum(&c.swarms, "in_sync");
            let stale = harness::sum(&c.swarms, "stale");
            if in_sync >= n && stale == 0 {
                break;
            }
            if t0.elapsed() > converge {
                return Err(fail(format!(
                    "after {fault:?} at {at:.0} s only {in_sync} of {n} nodes were in sync \
                     ({stale} told their server is stale) within {converge:?}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let after = add(resumed(&c.swarms), retired);
        faults.push(Injected {
            at_secs: at,
            fault,
            converged_secs: t0.elapsed().as_secs_f64(),
            resumed: [
                after[0].saturating_sub(before[0]),
                after[1].saturating_sub(before[1]),
                after[2].saturating_sub(before[2]),
            ],
            detail,
        });
        checks
            .after_fault(&mut c.swarms, &mut c.servers, converge)
            .await?;
    }
    let written = churn
        .wait(Duration::from_secs(a.secs + 600))
        .await
        .map_err(|e| fail(format!("the churn: {e:#}")))?;
    checks
        .checkpoint(&mut c.swarms, &mut c.servers, converge)
        .await?;

    // Quiescent: every replica reaches the same state, then every node must hold it.
    let settle = Instant::now();
    let (digest, replicas_agree) = loop {
        let mut digests = Vec::new();
        for s in &mut c.servers {
            digests.push(
                s.state().await?["digest"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            );
        }
        if digests.windows(2).all(|w| w.first() == w.last())
            && harness::sum(&c.swarms, "in_sync") >= n
        {
            break (digests.swap_remove(0), true);
        }
        if settle.elapsed() > converge {
            eprintln!("chaos: the replicas still disagree after {converge:?}: {digests:?}");
            break (digests.swap_remove(0), false);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // Balanced, as the replicas' own rule judges it.
    let (final_loads, balanced) = if balancing {
        balance(&mut c, n, converge).await?
    } else {
        (Vec::new(), true)
    };
    let mut rebalanced = c.rebalanced_retired;
    for i in 0..c.servers.len() {
        rebalanced += c.rebalanced_by(i).await?;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let total = add(resumed(&c.swarms), retired);
    let peaks = c.memory.peaks();
    let done = harness::finish(std::mem::take(&mut c.swarms), &digest).await?;
    let checked = checks.report(done.checks)?;
    let kvs = c.servers.first().map_or(0, |s| s.kvs);
    for s in std::mem::take(&mut c.servers) {
        s.quit().await?;
    }

    let r = ChaosResult {
        seed,
        nodes: a.nodes,
        replicas: a.replicas,
        kvs,
        secs: a.secs,
        updates_written: written,
        worst_converge_secs: faults.iter().map(|f| f.converged_secs).fold(0.0, f64::max),
        faults,
        resumed_deltas: total[0],
        resumed_digest: total[1],
        resumed_snapshot: total[2],
        replicas_agree,
        replica_peak_rss: peaks.replica,
        replica_rss_synced: synced.replica,
        swarm_peak_rss: peaks.swarm,
        swarm_rss_synced: synced.swarm,
        datastore_peak_rss: peaks.datastore,
        datastore_rss_synced: synced.datastore,
        datastore: a.datastore,
        network_faults: with_net,
        exact: done.exactness(),
        checks: checked,
        balancing,
        rebalanced,
        final_loads,
        balanced,
    };
    // Memory stays bounded: no replica and no swarm grows past three times what it held once
    // synced. The datastore is reported, not judged: it keeps the churn's history between
    // compactions.
    let bounded = |peak: u64, synced: u64| peak <= synced.saturating_mul(3);
    let replicas_bounded = bounded(r.replica_peak_rss, r.replica_rss_synced);
    let swarms_bounded = bounded(r.swarm_peak_rss, r.swarm_rss_synced);
    let ok = done.all_exact(a.nodes)
        && replicas_agree
        && replicas_bounded
        && swarms_bounded
        && r.balanced
        && r.checks.passed();
    let mut table = format!(
        "chaos: {} nodes over {} replicas on {}, {} KVs, {} s of churn at {}/s, seed {}{}\n\
         | fault | at | every node in sync again after | resumed by deltas / digest / snapshot | detail |\n\
         |---|---|---|---|---|\n",
        r.nodes,
        r.replicas,
        c.store.names().1,
        r.kvs,
        r.secs,
        a.rate,
        r.seed,
        if with_net { "" } else { " (no network faults)" },
    );
    for f in &r.faults {
        table.push_str(&format!(
            "| {:?} | {:.0} s | {:.1} s | {} / {} / {} | {} |\n",
            f.fault,
            f.at_secs,
            f.converged_secs,
            f.resumed[0],
            f.resumed[1],
            f.resumed[2],
            f.detail
        ));
    }
    let verdict = |b: bool| if b { "bounded" } else { "GREW past 3x" };
    table.push_str(&format!(
        "\n| check | result |\n|---|---|\n\
         | faults injected | {} |\n\
         | updates written | {} |\n\
         | worst recovery | {:.1} s |\n\
         | resumes by deltas / digest / snapshot | {} / {} / {} |\n\
         | replicas agree at the end | {} |\n\
         | connection balancing | {} |\n\
         | replica RSS synced / peak | {:.1} / {:.1} MiB ({}) |\n\
         | swarm RSS synced / peak | {:.1} / {:.1} MiB ({}) |\n\
         | datastore RSS synced / peak (largest process) | {:.1} / {:.1} MiB |\n\
         {}{}\n{}",
        r.faults.len(),
        r.updates_written,
        r.worst_converge_secs,
        r.resumed_deltas,
        r.resumed_digest,
        r.resumed_snapshot,
        if r.replicas_agree { "yes" } else { "NO" },
        if !r.balancing {
            "off".to_owned()
        } else {
            format!(
                "{} connections moved; loads at the end {} ({})",
                r.rebalanced,
                r.final_loads
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(" / "),
                if r.balanced {
                    "balanced"
                } else {
                    "NOT balanced"
                }
            )
        },
        mib(r.replica_rss_synced),
        mib(r.replica_peak_rss),
        verdict(replicas_bounded),
        mib(r.swarm_rss_synced),
        mib(r.swarm_peak_rss),
        verdict(swarms_bounded),
        mib(r.datastore_rss_synced),
        mib(r.datastore_peak_rss),
        r.checks.rows(),
        done.verdict(a.nodes),
        if ok {
            "nothing lost".to_owned()
        } else {
            format!("FAILED: run again with --seed {seed}")
        },
    ));
    Ok(Outcome {
        name: "chaos",
        table,
        json: serde_json::to_value(&r)?,
        ok,
        timeline: timeline.stop(),
        latency: None,
    })
}

/// Injects one fault and, for those that last a while, lifts it again; says what it did
/// where there is more to say than its name.
async fn inject(
    c: &mut Cluster,
    fault: Fault,
    a: &ChaosArgs,
    told: &HashSet<String>,
    (retired, checks): (&mut [u64; 3], &mut checks::Checks),
    timeline: &Timeline,
) -> anyhow::Result<String> {
    let mut detail = String::new();
    match fault {
        Fault::KillReplica(i) => c.restart_replica(i, false).await?,
        Fault::TermReplica(i) => c.restart_replica(i, true).await?,
        Fault::RollingRestart => {
            for i in 0..c.servers.len() {
                c.restart_replica(i, true).await?;
            }
        }
        Fault::KillDatastore => c.store.kill_and_restart().await?,
        Fault::CompactEtcd => {
            let rev = c.store.compact().await?;
            detail = format!("to revision {rev}");
        }
        Fault::RestartNodes(i) => {
            // Half the groups (with --no-net, one swarm), from this one on.
            let count = if c.groups.is_empty() {
                1
            } else {
                c.swarms.len().div_ceil(2)
            };
            let mut nodes = 0;
            for k in 0..count {
                let j = (i + k) % c.swarms.len().max(1);
                let fresh = c.start_swarm(j)?;
                timeline.add_swarms(std::slice::from_ref(&fresh));
                if let Some(slot) = c.swarms.get_mut(j) {
                    *retired = add(*retired, resumed(std::slice::from_ref(slot)));
                    checks.retire(slot).await;
                    // Dropping the old process kills it (SIGKILL).
                    drop(std::mem::replace(slot, fresh));
                }
                nodes += c.slots.get(j).map_or(0, |s| s.nodes);
            }
            detail = format!("{nodes} nodes");
        }
        Fault::Degraded(g) => {
            let delay = group(c, g)?.delayed(Duration::from_millis(a.delay_ms))?;
            group(c, g)?.lossy(Some(a.loss_percent))?;
            tokio::time::sleep(Duration::from_secs(a.degraded_secs)).await;
            group(c, g)?.lossy(None)?;
            let held = delay.lift()?;
            detail = format!(
                "+{} ms and {} % lost each way for {} s ({held} packets held)",
                a.delay_ms, a.loss_percent, a.degraded_secs
            );
        }
        Fault::Partition(g) => {
            group(c, g)?.partition(true)?;
            tokio::time::sleep(Duration::from_secs(a.partition_secs)).await;
            group(c, g)?.partition(false)?;
            detail = format!("{} s", a.partition_secs);
        }
        Fault::HalfOpen(g) => {
            // The nodes believe they are connected and in sync: what shows that they noticed
            // is the servers holding as many connections again as before (not more than one
            // a node: a connection an earlier fault left behind, which the servers have not
            // yet dropped, is counted before but comes back to no one).
            let before = connections(c).await?.min(a.nodes as u64);
            let cut = group(c, g)?.half_open()?;
            let t0 = Instant::now();
            let within = Duration::from_secs(a.converge_within);
            loop {
                let now = connections(c).await?;
                if now >= before {
                    break;
                }
                anyhow::ensure!(
                    t0.elapsed() < within,
                    "{cut} connections made half-open; the servers hold {now} of {before} \
                     again after {within:?}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            detail = format!(
                "{cut} connections gone from the servers; their nodes back after {:.1} s",
                t0.elapsed().as_secs_f64()
            );
        }
        Fault::CutFromDatastore(i) => detail = cut_off(c, i, told, a).await?,
    }
    Ok(detail)
}

/// Waits until every node is connected and no replica holds more than the replicas' own
/// balancing rule allows (more than the mean by more than its tolerance); each replica's load,
/// and whether that came within `within`.
async fn balance(c: &mut Cluster, n: u64, within: Duration) -> anyhow::Result<(Vec<u64>, bool)> {
    use typha_server::governor::{GovernorConfig, share};
    let tolerance = GovernorConfig::default().tolerance;
    let t0 = Instant::now();
    loop {
        let mut loads = Vec::new();
        for s in &mut c.servers {
            loads.push(s.state().await?["connections"].as_u64().unwrap_or(0));
        }
        let over = loads.iter().enumerate().any(|(i, own)| {
            let peers: Vec<share::Peer> = loads
                .iter()
                .enumerate()
                .filter(|(k, _)| *k != i)
                .map(|(k, l)| share::Peer {
                    addr: k.to_string(),
                    load: usize::try_from(*l).unwrap_or(usize::MAX),
                })
                .collect();
            share::plan(usize::try_from(*own).unwrap_or(0), &peers, tolerance).excess > 0
        });
        if loads.iter().sum::<u64>() >= n && !over {
            return Ok((loads, true));
        }
        if t0.elapsed() > within {
            eprintln!("chaos: the replicas' loads are not balanced after {within:?}: {loads:?}");
            return Ok((loads, false));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The connections the replicas hold, together.
async fn connections(c: &mut Cluster) -> anyhow::Result<u64> {
    let mut total = 0;
    for s in &mut c.servers {
        total += s.state().await?["connections"].as_u64().unwrap_or(0);
    }
    Ok(total)
}

fn replica(c: &mut Cluster, i: usize) -> anyhow::Result<&mut Server> {
    c.servers.get_mut(i).context("no such replica")
}

fn group(c: &mut Cluster, g: usize) -> anyhow::Result<&mut net::Group> {
    c.groups.get_mut(g).context("no such group")
}

/// Cuts replica `i` off from the datastore until it says its view is stale and every
/// typha-client node it was streaming to then has been told so; then lets it reach it again.
/// (Told, counted as it happens: a told node may move to a current replica before the count
/// is read. Not counted: nodes still in their handshake or held for their revision floor;
/// the replica sends those away as its view turns stale, to a replica that can serve them.)
async fn cut_off(
    c: &mut Cluster,
    i: usize,
    told: &HashSet<String>,
    a: &ChaosArgs,
) -> anyhow::Result<String> {
    let within = Duration::from_secs(a.converge_within);
    let told_before = harness::sum(&c.swarms, "stale_told");
    let cut = net::Cut::new(i, &c.store.port())?;
    let t0 = Instant::now();
    let s = replica(c, i)?;
    loop {
        if s.state().await?["datastore"]["stale"] == true {
            break;
        }
        anyhow::ensure!(
            t0.elapsed() < within,
            "replica {i}, cut off from the datastore, did not say its view is stale within \
             {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let stale_after = t0.elapsed();
    let on_it = s
        .node_names(Some("streaming"))
        .await?
        .iter()
        .filter(|n| told.contains(*n))
        .count() as u64;
    let t1 = Instant::now();
    loop {
        let stale = harness::sum(&c.swarms, "stale_told").saturating_sub(told_before);
        if stale >= on_it {
            break;
        }
        anyhow::ensure!(
            t1.elapsed() < Duration::from_secs(30),
            "replica {i} is stale, but only {stale} of the {on_it} typha-client nodes it was \
             streaming to were told within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let told_after = t0.elapsed();
    drop(cut);
    Ok(format!(
        "stale after {:.1} s; its {on_it} typha-client nodes told after {:.1} s",
        stale_after.as_secs_f64(),
        told_after.as_secs_f64()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schedule_starts_with_every_kind_and_repeats_with_its_seed() {
        let kinds = |seed| {
            let mut s = Schedule::new(seed, 3, 2, (0..KINDS).collect());
            (0..40).map(|_| s.next()).collect::<Vec<_>>()
        };
        let a = kinds(7);
        assert_eq!(a, kinds(7));
        assert_ne!(a, kinds(8));
        let first: std::collections::BTreeSet<String> = a
            .iter()
            .take(KINDS)
            .map(|f| {
                format!("{f:?}")
                    .split('(')
                    .next()
                    .unwrap_or_default()
                    .to_owned()
            })
            .collect();
        assert_eq!(first.len(), KINDS, "{a:?}");
        assert!(a.iter().all(|f| match f {
            Fault::KillReplica(i) | Fault::TermReplica(i) | Fault::CutFromDatastore(i) => *i < 3,
            Fault::RestartNodes(i)
            | Fault::Degraded(i)
            | Fault::Partition(i)
            | Fault::HalfOpen(i) => *i < 2,
            _ => true,
        }));
    }

    #[test]
    fn kinds_are_named_as_the_report_names_them_and_chosen_by_name() {
        let mut rng = Rng(3);
        for (k, name) in NAMES.iter().enumerate() {
            let v = serde_json::to_value(rng.of_kind(k, 3, 2)).unwrap();
            let named = match &v {
                serde_json::Value::Object(o) => o.keys().next().unwrap().clone(),
                v => v.as_str().unwrap().to_owned(),
            };
            assert_eq!(&named, name);
        }
        assert_eq!(kinds_of(&[], true).unwrap(), (0..KINDS).collect::<Vec<_>>());
        assert_eq!(kinds_of(&[], false).unwrap().len(), PROCESS_KINDS);
        let some = ["partition".to_owned(), "kill_datastore".to_owned()];
        assert_eq!(kinds_of(&some, true).unwrap(), vec![3, 7]);
        assert_eq!(kinds_of(&some, false).unwrap(), vec![3]);
        assert!(kinds_of(&["partition".to_owned()], false).is_err());
        assert!(kinds_of(&["meteor".to_owned()], true).is_err());
        // Drawn from the kinds asked for only.
        let mut s = Schedule::new(9, 3, 2, vec![3, 7]);
        assert!((0..50).all(|_| matches!(s.next(), Fault::KillDatastore | Fault::Partition(_))));
    }
}
