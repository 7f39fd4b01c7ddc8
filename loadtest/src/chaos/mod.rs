//! The `chaos` scenario (issue 19, its first part): replicas of our server over a real etcd,
//! nodes spread over all of them, steady churn, and a seeded schedule of faults: a replica
//! killed (SIGKILL) and restarted, a replica stopped as an orchestrator stops it (SIGTERM,
//! drain) and restarted, every replica restarted one after another, etcd killed and
//! restarted, etcd's history compacted while the replicas watch it, a group of nodes
//! restarted at once (their swarm process killed and started again: a reconnect burst). The
//! churn is of every kind (`churn_plan`'s mixed plan). After each fault it waits
//! until every node is in sync again and records how long that took; at the end, with the
//! churn over, every replica must hold the same state and every node exactly that state.
//!
//! The same seed gives the same schedule (`--seed`; a run without one draws a seed and prints
//! it), so a failure can be run again. The first six faults are one of each kind, in an order
//! the seed shuffles, so even a short run meets every kind; the rest are drawn at random. What it does not inject yet: network faults for groups
//! of nodes (delay, loss, partitions, half-open connections: `tc netem` in network
//! namespaces), a replica cut off from etcd while its nodes stay connected. While the faults
//! go on, `checks` checks that no node deletes a key that still exists or applies an older
//! value after a newer one, and at quiescent checkpoints that every replica and node holds
//! etcd's state. See docs/loadtest.md.

mod checks;

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::etcd::{self, EtcdProc};
use crate::harness::{self, Common, Outcome, Timeline, Workdir, mib};
use crate::procstat::usage;
use crate::server::{Backend, Server};

/// Settings of a chaos run.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ChaosArgs {
    /// Simulated nodes (the generated cluster has as many).
    #[arg(long, default_value_t = 1000)]
    pub(crate) nodes: usize,
    /// Pods per node in the generated cluster.
    #[arg(long, default_value_t = 10)]
    pub(crate) pods_per_node: usize,
    /// Server replicas over the one etcd.
    #[arg(long, default_value_t = 3)]
    pub(crate) replicas: usize,
    /// How long the churn and the faults go on, seconds.
    #[arg(long, default_value_t = 600)]
    pub(crate) secs: u64,
    /// Churn rate, updates per second, written into etcd.
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
    /// A quiescent checkpoint (see `checks`) after every this many faults' recoveries (0:
    /// only at the end).
    #[arg(long, default_value_t = 1)]
    pub(crate) checkpoint_every: usize,
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
    /// etcd killed (SIGKILL) and started again on its data: the replicas' watches break.
    KillEtcd,
    /// etcd's history compacted to its current revision while the replicas watch it.
    CompactEtcd,
    /// A group of nodes restarted at once: one swarm process SIGKILLed and started again, so
    /// its nodes (up to `--nodes-per-swarm`) come back fresh and connect in the same moment.
    RestartNodes(usize),
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
            3 => Fault::KillEtcd,
            4 => Fault::CompactEtcd,
            _ => Fault::RestartNodes(self.below(swarms)),
        }
    }
}

/// Kinds of fault.
const KINDS: usize = 6;

/// The schedule: every kind once, in an order the seed shuffles (so a short run covers them
/// all), then kinds drawn at random, weighted towards the common ones (replicas crashing and
/// being replaced, nodes restarting).
struct Schedule {
    rng: Rng,
    first: Vec<usize>,
    replicas: usize,
    swarms: usize,
}

impl Schedule {
    fn new(seed: u64, replicas: usize, swarms: usize) -> Self {
        let mut rng = Rng(seed);
        let mut first: Vec<usize> = (0..KINDS).collect();
        for i in (1..first.len()).rev() {
            first.swap(i, rng.below(i + 1));
        }
        first.reverse();
        Schedule {
            rng,
            first,
            replicas,
            swarms,
        }
    }

    fn next(&mut self) -> Fault {
        let k = match self.first.pop() {
            Some(k) => k,
            None => match self.rng.below(12) {
                0..=2 => 0,
                3..=4 => 1,
                5 => 2,
                6..=7 => 3,
                8..=9 => 4,
                _ => 5,
            },
        };
        self.rng.of_kind(k, self.replicas, self.swarms)
    }
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
    /// Churn updates written into etcd.
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
    #[serde(flatten)]
    pub(crate) exact: harness::Exactness,
    /// The checks made while the faults went on.
    checks: checks::Report,
}

fn resumed(swarms: &[crate::child::Child]) -> [u64; 3] {
    [
        harness::sum(swarms, "resumed_deltas"),
        harness::sum(swarms, "resumed_digest"),
        harness::sum(swarms, "resumed_snapshot"),
    ]
}

fn add(a: [u64; 3], b: [u64; 3]) -> [u64; 3] {
    [a[0] + b[0], a[1] + b[1], a[2] + b[2]]
}

pub(crate) async fn run(a: ChaosArgs) -> anyhow::Result<Outcome> {
    a.common.own_server_only("chaos")?;
    anyhow::ensure!(a.replicas >= 2, "chaos needs at least two replicas");
    let seed = a.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    eprintln!("chaos: seed {seed} (run it again with --seed {seed})");

    let wd = Workdir::new(a.nodes, a.pods_per_node, a.common.plain)?.using(&a.common);
    let timeline = Timeline::start();
    let mut etcd = EtcdProc::start(wd.path()).await?;
    etcd::seed(&etcd, wd.shape()).await?;
    let backend = Backend::Etcd(etcd.endpoint.clone());
    let mut servers: Vec<Server> = Vec::new();
    for i in 0..a.replicas {
        let s = wd.server_on(&format!("replica {i}"), &backend).await?;
        timeline.add_server(s.pid());
        servers.push(s);
    }
    let addrs: Vec<String> = servers.iter().map(|s| s.addr.clone()).collect();
    let addr_refs: Vec<&str> = addrs.iter().map(String::as_str).collect();
    // Every typha-client node checks what it is told (see `checks`).
    let check_args = ["--checks".to_owned()];
    let mut swarms = wd.swarms(&addr_refs, a.nodes, 0, &a.common, &check_args)?;
    timeline.add_swarms(&swarms);
    let per_swarm = a.common.nodes_per_swarm.max(1);
    let mut schedule = Schedule::new(seed, a.replicas, swarms.len());
    // Resumes counted by swarm processes since replaced (a restarted swarm counts afresh).
    let mut retired = [0u64; 3];
    let n = a.nodes as u64;
    let converge = Duration::from_secs(a.converge_within);
    harness::wait_for(&swarms, "in_sync", n, "in sync", Duration::from_secs(1800)).await?;
    let rss = |servers: &[Server]| {
        servers
            .iter()
            .map(|s| usage(s.pid()).map(|u| u.rss).unwrap_or(0))
            .max()
            .unwrap_or(0)
    };
    let rss_synced = rss(&servers);
    let mut peak = rss_synced;

    let (mut checks, churn) = checks::Checks::start(
        seed,
        &etcd.endpoint,
        wd.shape(),
        (a.rate, a.secs as f64),
        a.nodes,
        a.checkpoint_every,
    );
    let started = Instant::now();
    let mut faults = Vec::new();
    let fail = |what: String| anyhow::anyhow!("chaos (seed {seed}): {what}");
    while started.elapsed() + Duration::from_secs(a.fault_every) < Duration::from_secs(a.secs) {
        tokio::time::sleep(Duration::from_secs(a.fault_every)).await;
        let fault = schedule.next();
        let at = started.elapsed().as_secs_f64();
        let before = add(resumed(&swarms), retired);
        let t0 = Instant::now();
        eprintln!("chaos: {at:.0} s: {fault:?}");
        let applied = match fault {
            Fault::KillReplica(i) => match servers.get_mut(i) {
                Some(s) => s.kill_and_restart().await,
                None => Ok(()),
            },
            Fault::TermReplica(i) => match servers.get_mut(i) {
                Some(s) => s.term_and_restart().await,
                None => Ok(()),
            },
            Fault::RollingRestart => {
                let mut r = Ok(());
                for s in &mut servers {
                    r = s.term_and_restart().await;
                    if r.is_err() {
                        break;
                    }
                }
                r
            }
            Fault::KillEtcd => etcd.kill_and_restart().await,
            Fault::CompactEtcd => etcd.compact().await.map(|_| ()),
            Fault::RestartNodes(i) => {
                let first = i * per_swarm;
                let count = per_swarm.min(a.nodes.saturating_sub(first));
                match wd.swarms(&addr_refs, count, first, &a.common, &check_args) {
                    Ok(mut fresh) => {
                        if let (Some(slot), Some(new)) = (swarms.get_mut(i), fresh.pop()) {
                            retired = add(retired, resumed(std::slice::from_ref(slot)));
                            checks.retire(slot).await;
                            timeline.add_swarms(std::slice::from_ref(&new));
                            // Dropping the old process kills it (SIGKILL).
                            drop(std::mem::replace(slot, new));
                        }
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            }
        };
        applied.map_err(|e| fail(format!("injecting {fault:?}: {e:#}")))?;
        for s in &servers {
            timeline.add_server(s.pid());
        }
        // Give the nodes a moment to notice, then wait until every one is in sync again.
        tokio::time::sleep(Duration::from_secs(1)).await;
        loop {
            peak = peak.max(rss(&servers));
            if let Some(gone) = harness::gone(&swarms) {
                return Err(fail(format!("a swarm ended: {gone}")));
            }
            if harness::sum(&swarms, "in_sync") >= n {
                break;
            }
            if t0.elapsed() > converge {
                return Err(fail(format!(
                    "after {fault:?} at {at:.0} s only {} of {n} nodes were in sync within {converge:?}",
                    harness::sum(&swarms, "in_sync")
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let after = add(resumed(&swarms), retired);
        faults.push(Injected {
            at_secs: at,
            fault,
            converged_secs: t0.elapsed().as_secs_f64(),
            resumed: [
                after[0].saturating_sub(before[0]),
                after[1].saturating_sub(before[1]),
                after[2].saturating_sub(before[2]),
            ],
        });
        checks
            .after_fault(&mut swarms, &mut servers, converge)
            .await?;
    }
    let written = churn
        .wait(Duration::from_secs(a.secs + 600))
        .await
        .map_err(|e| fail(format!("the churn: {e:#}")))?;
    checks
        .checkpoint(&mut swarms, &mut servers, converge)
        .await?;

    // Quiescent: every replica reaches the same state, then every node must hold it.
    let settle = Instant::now();
    let (digest, replicas_agree) = loop {
        let mut digests = Vec::new();
        for s in &mut servers {
            digests.push(
                s.state().await?["digest"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            );
        }
        if digests.windows(2).all(|w| w.first() == w.last())
            && harness::sum(&swarms, "in_sync") >= n
        {
            break (digests.swap_remove(0), true);
        }
        if settle.elapsed() > converge {
            eprintln!("chaos: the replicas still disagree after {converge:?}: {digests:?}");
            break (digests.swap_remove(0), false);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    let total = add(resumed(&swarms), retired);
    let done = harness::finish(swarms, &digest).await?;
    let checked = checks.report(done.checks)?;
    let kvs = servers.first().map_or(0, |s| s.kvs);
    for s in servers {
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
        replica_peak_rss: peak,
        replica_rss_synced: rss_synced,
        exact: done.exactness(),
        checks: checked,
    };
    // Memory stays bounded: no replica grows past three times what it held once synced.
    let bounded = r.replica_peak_rss <= r.replica_rss_synced.saturating_mul(3);
    let ok = done.all_exact(a.nodes) && replicas_agree && bounded && r.checks.passed();
    let mut table = format!(
        "chaos: {} nodes over {} replicas on etcd, {} KVs, {} s of churn at {}/s, seed {}\n\
         | fault | at | every node in sync again after | resumed by deltas / digest / snapshot |\n\
         |---|---|---|---|\n",
        r.nodes, r.replicas, r.kvs, r.secs, a.rate, r.seed
    );
    for f in &r.faults {
        table.push_str(&format!(
            "| {:?} | {:.0} s | {:.1} s | {} / {} / {} |\n",
            f.fault, f.at_secs, f.converged_secs, f.resumed[0], f.resumed[1], f.resumed[2]
        ));
    }
    table.push_str(&format!(
        "\n| check | result |\n|---|---|\n\
         | faults injected | {} |\n\
         | updates written | {} |\n\
         | worst recovery | {:.1} s |\n\
         | resumes by deltas / digest / snapshot | {} / {} / {} |\n\
         | replicas agree at the end | {} |\n\
         | replica RSS synced / peak | {:.1} / {:.1} MiB ({}) |\n\
         {}{}\n{}",
        r.faults.len(),
        r.updates_written,
        r.worst_converge_secs,
        r.resumed_deltas,
        r.resumed_digest,
        r.resumed_snapshot,
        if r.replicas_agree { "yes" } else { "NO" },
        mib(r.replica_rss_synced),
        mib(r.replica_peak_rss),
        if bounded { "bounded" } else { "GREW past 3x" },
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schedule_starts_with_every_kind_and_repeats_with_its_seed() {
        let kinds = |seed| {
            let mut s = Schedule::new(seed, 3, 2);
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
            Fault::KillReplica(i) | Fault::TermReplica(i) => *i < 3,
            Fault::RestartNodes(i) => *i < 2,
            _ => true,
        }));
    }
}
