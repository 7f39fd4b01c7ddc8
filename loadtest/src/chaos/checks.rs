//! What `chaos` checks while its faults go on (issue 19), beside recovery and the end state:
//!
//! - the churn is the mixed one (`churn_plan`): endpoint relabels, ephemeral pods created and
//!   deleted, policy and node updates;
//! - the swarms run with `--checks` (`node_checks`): every typha-client node counts
//!   deletions of keys the churn never deletes, every full-store node counts updates older
//!   than the last it had for their key; any one fails the run;
//! - every `--checkpoint-every` faults, once the nodes have recovered, a **quiescent
//!   checkpoint**: the churn is paused (after its write in progress), the datastore's state is
//!   read from etcd and digested with the server's own conversion (`Pipeline`, as a replica's
//!   re-list would), and the run waits until every replica's digest and every node's live
//!   digest (swarm command `digests`: computed from the values by full stores, the digest the
//!   server announced at their position by light and lean nodes) is that one; then the churn
//!   goes on. The time that took is recorded; past `--converge-within` the run fails. The
//!   same is done once more at the end, with the churn over.
//!
//! Over Kubernetes the churn is the plain one (pods relabelled through the API: nothing is
//! ever deleted, so every deletion a node is told of is wrongful), and a checkpoint lists the
//! API server as the server's Kubernetes backend does.
//!
//! Every failure names the seed.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde::Serialize;
use typha_protocol::digest::StateDigest;
use typha_server::cache::pipeline::Pipeline;
use typha_server::datastore::Datastore;

use crate::child::Child;
use crate::churn_plan::{ChurnCounts, Gate, Written};
use crate::harness::Workdir;
use crate::node_checks::CheckCounts;
use crate::server::{Churn, Server};
use crate::store::Store;

/// Longest a pause may wait for the churn's write in progress (which retries through an
/// etcd restart for up to a minute).
const PAUSE_WITHIN: Duration = Duration::from_secs(90);

/// One quiescent checkpoint.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Checkpoint {
    /// After this many faults (at the end: all of them).
    pub(super) after_faults: usize,
    /// Seconds from pausing the churn until every replica and node held the datastore's
    /// state.
    pub(super) secs: f64,
    /// KVs in that state.
    pub(super) kvs: usize,
    /// Its digest.
    pub(super) digest: String,
}

/// What the checks found, for the result.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Report {
    /// What the nodes checked and found (every swarm process, replaced ones too).
    #[serde(flatten)]
    pub(super) nodes: CheckCounts,
    /// Quiescent checkpoints reached (the last one at the end).
    pub(super) checkpoints: Vec<Checkpoint>,
    /// Longest time to reach one, seconds.
    pub(super) worst_checkpoint_secs: f64,
    /// What the churn wrote, by kind.
    pub(super) churn: ChurnCounts,
    /// Whether the churn was the mixed one (into etcd), counted by kind.
    pub(super) mixed_churn: bool,
}

impl Report {
    /// Whether every check passed.
    pub(super) fn passed(&self) -> bool {
        !self.nodes.violated() && !self.checkpoints.is_empty()
    }

    /// Rows for the result table (`| check | result |`).
    pub(super) fn rows(&self) -> String {
        let c = &self.churn;
        let churn = if self.mixed_churn {
            format!(
                "{} / {} / {} / {} / {}",
                c.relabels, c.pods_created, c.pods_deleted, c.policy_updates, c.node_updates
            )
        } else {
            "pods relabelled through the API only".to_owned()
        };
        format!(
            "| churn: relabels / pods created / pods deleted / policy / node updates | {churn} |\n\
             | quiescent checkpoints (every node and replica at the datastore's state) | {} reached, worst {:.1} s |\n\
             | wrongful deletions (typha-client nodes) | {} of {} deletions |\n\
             | older after newer (full-store nodes) | {} of {} updates |\n",
            self.checkpoints.len(),
            self.worst_checkpoint_secs,
            self.nodes.wrongful_deletions,
            self.nodes.deletions_checked,
            self.nodes.older_after_newer,
            self.nodes.revisions_checked,
        )
    }
}

/// The checks of one chaos run.
pub(super) struct Checks {
    seed: u64,
    /// The datastore whose state checkpoints compare with.
    source: Source,
    nodes: u64,
    every: usize,
    gate: Gate,
    written: Arc<Written>,
    faults: usize,
    checkpoints: Vec<Checkpoint>,
    /// What swarm processes since replaced counted.
    retired: CheckCounts,
}

impl Checks {
    /// Starts the churn into `store` (the mixed one into etcd; the plain one through the
    /// Kubernetes API) for the cluster of `wd`, `rate` writes per second for `secs` seconds;
    /// `nodes` nodes, a checkpoint every `every` faults (0: only at the end; none over
    /// Kubernetes).
    pub(super) fn start(
        seed: u64,
        store: &Store,
        wd: &Workdir,
        (rate, secs): (f64, f64),
        nodes: usize,
        every: usize,
    ) -> anyhow::Result<(Checks, Churn)> {
        let (gate, written) = (Gate::default(), Arc::new(Written::default()));
        let (churn, source) = match store {
            Store::Etcd(e) => (
                crate::etcd::churn_mixed(
                    e.endpoint.clone(),
                    wd.shape(),
                    rate,
                    secs,
                    gate.clone(),
                    written.clone(),
                ),
                Source::Etcd(e.endpoint.clone()),
            ),
            Store::Kube(k, last) => (
                crate::kube::churn(k, wd.shape(), (rate, secs), last.clone(), gate.clone())?,
                Source::Kube(k.admin()?),
            ),
        };
        let checks = Checks {
            seed,
            source,
            nodes: nodes as u64,
            every,
            gate,
            written,
            faults: 0,
            checkpoints: Vec::new(),
            retired: CheckCounts::default(),
        };
        Ok((checks, churn))
    }

    fn fail(&self, what: impl std::fmt::Display) -> anyhow::Error {
        anyhow::anyhow!(
            "chaos (seed {}): {what}; run it again with --seed {}",
            self.seed,
            self.seed
        )
    }

    /// Fails on any violation counted so far (`now`: the running swarms' counts).
    fn no_violations(&self, now: CheckCounts) -> anyhow::Result<()> {
        let c = now.add(self.retired);
        if c.violated() {
            return Err(self.fail(format!(
                "{} wrongful deletions and {} older-after-newer updates on the nodes (the swarms printed the first ones on stderr)",
                c.wrongful_deletions, c.older_after_newer
            )));
        }
        Ok(())
    }

    /// A swarm is about to be replaced: keeps what it counted.
    pub(super) async fn retire(&mut self, swarm: &mut Child) {
        let counts = match ask(std::slice::from_mut(swarm)).await {
            Ok(a) => a.checks,
            // It cannot answer: its last progress line.
            Err(_) => CheckCounts::of(&swarm.progress().latest()),
        };
        self.retired = self.retired.add(counts);
    }

    /// Every node has recovered from a fault: fails on any violation so far, and every
    /// `every` faults reaches a quiescent checkpoint.
    pub(super) async fn after_fault(
        &mut self,
        swarms: &mut [Child],
        servers: &mut [Server],
        converge: Duration,
    ) -> anyhow::Result<()> {
        self.faults += 1;
        let now = swarms
            .iter()
            .map(|s| CheckCounts::of(&s.progress().latest()))
            .fold(CheckCounts::default(), CheckCounts::add);
        self.no_violations(now)?;
        if self.every > 0 && self.faults.is_multiple_of(self.every) {
            self.checkpoint(swarms, servers, converge).await?;
        }
        Ok(())
    }

    /// Pauses the churn, waits until every replica and every node holds the datastore's
    /// state (at most `converge`), and resumes it. At the end (the churn over) as well.
    pub(super) async fn checkpoint(
        &mut self,
        swarms: &mut [Child],
        servers: &mut [Server],
        converge: Duration,
    ) -> anyhow::Result<()> {
        let t0 = Instant::now();
        let paused = tokio::time::timeout(PAUSE_WITHIN, self.gate.pause())
            .await
            .map_err(|_| {
                self.fail(format!(
                    "the churn's write in progress did not end within {PAUSE_WITHIN:?}"
                ))
            })?;
        let (digest, kvs) = datastore_digest(&self.source)
            .await
            .map_err(|e| self.fail(format!("reading the datastore's state: {e:#}")))?;
        loop {
            let mut replicas = Vec::new();
            for s in servers.iter_mut() {
                replicas.push(s.state().await?["digest"].as_str().unwrap_or("").to_owned());
            }
            let nodes = ask(swarms).await?;
            self.no_violations(nodes.checks)?;
            let at = nodes.digests.get(&digest).copied().unwrap_or(0);
            if at >= self.nodes && replicas.iter().all(|d| *d == digest) {
                break;
            }
            if t0.elapsed() > converge {
                let mut held: Vec<(u64, String)> =
                    nodes.digests.into_iter().map(|(d, n)| (n, d)).collect();
                held.sort_unstable_by(|a, b| b.cmp(a));
                held.truncate(5);
                return Err(self.fail(format!(
                    "quiescent checkpoint after {} faults: within {converge:?} only {at} of {} nodes held etcd's state ({kvs} KVs, digest {digest}); replicas: {replicas:?}; nodes by digest (most held): {held:?}",
                    self.faults, self.nodes
                )));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let secs = t0.elapsed().as_secs_f64();
        drop(paused);
        eprintln!(
            "chaos: checkpoint after {} faults: every replica and node at etcd's state ({kvs} KVs) after {secs:.1} s",
            self.faults
        );
        self.checkpoints.push(Checkpoint {
            after_faults: self.faults,
            secs,
            kvs,
            digest,
        });
        Ok(())
    }

    /// The report, with the swarms' final counts (from their `done` lines); fails on any
    /// violation.
    pub(super) fn report(&self, last: CheckCounts) -> anyhow::Result<Report> {
        self.no_violations(last)?;
        Ok(Report {
            nodes: last.add(self.retired),
            worst_checkpoint_secs: self.checkpoints.iter().map(|c| c.secs).fold(0.0, f64::max),
            checkpoints: self.checkpoints.clone(),
            churn: self.written.counts(),
            mixed_churn: matches!(self.source, Source::Etcd(_)),
        })
    }
}

/// What the swarms said to `digests`.
struct Answer {
    /// Nodes by digest.
    digests: BTreeMap<String, u64>,
    /// What their checks counted.
    checks: CheckCounts,
}

/// Asks every swarm how many of its nodes hold each state now.
async fn ask(swarms: &mut [Child]) -> anyhow::Result<Answer> {
    for s in swarms.iter_mut() {
        s.send("digests").await?;
    }
    let mut a = Answer {
        digests: BTreeMap::new(),
        checks: CheckCounts::default(),
    };
    for s in swarms.iter_mut() {
        let v = s.expect("digests", Duration::from_secs(30)).await?;
        if let Some(o) = v["digests"].as_object() {
            for (d, n) in o {
                *a.digests.entry(d.clone()).or_default() += n.as_u64().unwrap_or(0);
            }
        }
        a.checks = a.checks.add(CheckCounts::of(&v));
    }
    Ok(a)
}

/// Where a checkpoint reads the datastore's state.
enum Source {
    /// etcd's client URL.
    Etcd(String),
    /// The API server, with the admin's credentials.
    Kube(kube::Client),
}

/// The datastore's state as a replica would hold it: listed as the server's backend lists it
/// and converted by the server's pipeline, digested; (digest, KVs).
async fn datastore_digest(source: &Source) -> anyhow::Result<(String, usize)> {
    let listing = match source {
        Source::Etcd(endpoint) => {
            typha_server::datastore::etcd::Etcd::connect(std::slice::from_ref(endpoint), None)
                .await
                .context("etcd client")?
                .list()
                .await
                .context("listing etcd")?
        }
        Source::Kube(client) => {
            typha_server::datastore::kubernetes::Kubernetes::new(client.clone())
                .await
                .list()
                .await
                .context("listing the API server")?
        }
    };
    let mut kvs = HashMap::new();
    for c in Pipeline::default().resync(listing, std::iter::empty()) {
        kvs.insert(c.key, c.value);
    }
    let mut d = StateDigest::new();
    let mut n = 0;
    for (k, v) in &kvs {
        if let Some(v) = v {
            d.insert(k.as_str(), v.as_bytes());
            n += 1;
        }
    }
    if n == 0 {
        bail!("the datastore holds nothing the server serves");
    }
    Ok((format!("{:016x}", d.combined()), n))
}
