//! What a churn writes at each step, deterministic in the step number, and the handle that
//! pauses it.
//!
//! The plain plan (every scenario's, whose latency numbers are recorded) rewrites the
//! cluster's workload endpoints, one per step, stamped. The mixed plan (`chaos`) writes every
//! kind of change the generated cluster has: in each round of ten steps, six endpoint
//! relabels (stamped, as in the plain plan), one ephemeral pod created, one deleted (the one
//! created [`LIFE`] rounds before; a relabel in the first rounds), one NetworkPolicy's order
//! changed and one Node's labels. Only ephemeral pods are ever deleted: a node that sees any
//! other key deleted was told something false (see `node_checks`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;
use typha_server::calico::v3::{Kind, Resource};
use typha_test_support::sample::Spec;

use crate::cluster::{cluster_spec, ephemeral_pod};

/// Rounds (of ten steps) an ephemeral pod lives.
pub(crate) const LIFE: u64 = 20;

/// One kind of churn write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChurnKind {
    /// An existing endpoint relabelled, stamped with its write time.
    Labels,
    /// An ephemeral pod created.
    Created,
    /// An ephemeral pod deleted.
    Deleted,
    /// A NetworkPolicy's order changed.
    Policy,
    /// A Node's labels changed.
    Node,
}

/// One write: a resource put, or deleted.
#[derive(Debug, Clone)]
pub(crate) struct Write {
    pub(crate) kind: ChurnKind,
    pub(crate) resource: Resource,
    pub(crate) delete: bool,
}

/// What to write at each step.
pub(crate) struct Plan {
    spec: Spec,
    /// The mixed plan's policies and nodes as generated (`None`: the plain plan).
    mixed: Option<(Vec<Resource>, Vec<Resource>)>,
}

impl Plan {
    /// Endpoint relabels only (the generated cluster `(nodes, pods per node)`).
    pub(crate) fn labels(shape: (usize, usize)) -> Plan {
        Plan {
            spec: cluster_spec(shape.0, shape.1),
            mixed: None,
        }
    }

    /// Every kind (see the module documentation).
    pub(crate) fn mixed(shape: (usize, usize)) -> Plan {
        let spec = cluster_spec(shape.0, shape.1);
        let (mut policies, mut nodes) = (Vec::new(), Vec::new());
        for r in spec.resources() {
            match r.kind() {
                Kind::NetworkPolicy => policies.push(r),
                Kind::Node => nodes.push(r),
                _ => {}
            }
        }
        Plan {
            spec,
            mixed: Some((policies, nodes)),
        }
    }

    /// The write at step `i` (from 0).
    pub(crate) fn step(&self, i: u64) -> anyhow::Result<Write> {
        let (round, slot) = (i / 10, i % 10);
        let write = |kind, resource| Write {
            kind,
            resource,
            delete: false,
        };
        let Some((policies, nodes)) = &self.mixed else {
            return Ok(write(ChurnKind::Labels, self.relabel(i)));
        };
        Ok(match slot {
            2 => write(ChurnKind::Created, ephemeral_pod(&self.spec, round)?),
            5 if !policies.is_empty() => {
                let mut v = pick(policies, round).to_json();
                v["spec"]["order"] = (1000 + round).into();
                write(ChurnKind::Policy, Resource::from_json(v)?)
            }
            7 if round >= LIFE => Write {
                kind: ChurnKind::Deleted,
                resource: ephemeral_pod(&self.spec, round - LIFE)?,
                delete: true,
            },
            9 if !nodes.is_empty() => {
                let mut v = pick(nodes, round).to_json();
                v["metadata"]["labels"]["loadtest.generation"] = round.to_string().into();
                write(ChurnKind::Node, Resource::from_json(v)?)
            }
            _ => write(ChurnKind::Labels, self.relabel(i)),
        })
    }

    /// Step `i`'s endpoint relabel (unstamped: the writer stamps it as it sends it).
    fn relabel(&self, i: u64) -> Resource {
        let node = (i as usize) % self.spec.nodes;
        let pod = (i as usize / self.spec.nodes) % self.spec.pods_per_node;
        self.spec.workload_endpoint(node, pod, i + 1)
    }
}

fn pick(of: &[Resource], round: u64) -> Resource {
    of.get((round % of.len().max(1) as u64) as usize)
        .cloned()
        .unwrap_or_else(|| unreachable!("callers check that `of` is not empty"))
}

/// Writes done so far, by kind (shared with the writer).
#[derive(Debug, Default)]
pub(crate) struct Written([AtomicU64; 5]);

impl Written {
    pub(crate) fn add(&self, kind: ChurnKind) {
        if let Some(c) = self.0.get(kind as usize) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The counts now.
    pub(crate) fn counts(&self) -> ChurnCounts {
        let n = |k: ChurnKind| {
            self.0
                .get(k as usize)
                .map_or(0, |c| c.load(Ordering::Relaxed))
        };
        ChurnCounts {
            relabels: n(ChurnKind::Labels),
            pods_created: n(ChurnKind::Created),
            pods_deleted: n(ChurnKind::Deleted),
            policy_updates: n(ChurnKind::Policy),
            node_updates: n(ChurnKind::Node),
        }
    }
}

/// What a churn wrote, by kind.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct ChurnCounts {
    pub(crate) relabels: u64,
    pub(crate) pods_created: u64,
    pub(crate) pods_deleted: u64,
    pub(crate) policy_updates: u64,
    pub(crate) node_updates: u64,
}

/// Pauses a churn writer between writes. The writer takes a turn for each write (held while
/// it writes and retries); [`Gate::pause`] waits for the write in progress, if any, and
/// keeps the writer out until the [`Paused`] it returns is dropped. The writer moves its
/// schedule on by the time it waited, so it does not burst to catch up afterwards.
#[derive(Debug, Clone, Default)]
pub(crate) struct Gate(Arc<tokio::sync::RwLock<()>>);

/// A paused churn; dropping it resumes the churn.
pub(crate) struct Paused(#[allow(dead_code)] tokio::sync::OwnedRwLockWriteGuard<()>);

impl Gate {
    /// Stops the writer once its current write is done; returns then.
    pub(crate) async fn pause(&self) -> Paused {
        Paused(self.0.clone().write_owned().await)
    }

    /// The writer's turn for one write, once it is not paused.
    pub(crate) async fn turn(&self) -> tokio::sync::OwnedRwLockReadGuard<()> {
        self.0.clone().read_owned().await
    }

    /// [`turn`](Self::turn) for a writer on a schedule: the time it waited for a pause to end
    /// is added to `paused`, which the writer adds to its schedule.
    pub(crate) async fn scheduled_turn(
        &self,
        paused: &mut std::time::Duration,
    ) -> tokio::sync::OwnedRwLockReadGuard<()> {
        if let Ok(t) = self.0.clone().try_read_owned() {
            return t;
        }
        let waited = tokio::time::Instant::now();
        let t = self.turn().await;
        *paused += waited.elapsed();
        t
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::cluster::EPHEMERAL_MARKER;

    #[test]
    fn the_plain_plan_relabels_endpoints_as_before() {
        let plan = Plan::labels((3, 2));
        let spec = cluster_spec(3, 2);
        for i in 0..20 {
            let w = plan.step(i).unwrap();
            assert_eq!(w.kind, ChurnKind::Labels);
            assert!(!w.delete);
            let (node, pod) = ((i as usize) % 3, (i as usize / 3) % 2);
            assert_eq!(w.resource, spec.workload_endpoint(node, pod, i + 1));
        }
    }

    #[test]
    fn the_mixed_plan_writes_every_kind_and_deletes_only_ephemeral_pods() {
        let plan = Plan::mixed((4, 3));
        let steps = 10 * (LIFE + 5);
        let writes: Vec<Write> = (0..steps).map(|i| plan.step(i).unwrap()).collect();
        let again: Vec<Write> = (0..steps).map(|i| plan.step(i).unwrap()).collect();
        let ids = |w: &[Write]| {
            w.iter()
                .map(|w| (w.resource.to_json(), w.delete))
                .collect::<Vec<_>>()
        };
        assert_eq!(ids(&writes), ids(&again), "deterministic");
        let count = |k| writes.iter().filter(|w| w.kind == k).count() as u64;
        assert_eq!(count(ChurnKind::Created), LIFE + 5);
        assert_eq!(count(ChurnKind::Deleted), 5);
        assert_eq!(count(ChurnKind::Policy), LIFE + 5);
        assert_eq!(count(ChurnKind::Node), LIFE + 5);
        let mut live = std::collections::BTreeSet::new();
        for w in &writes {
            let id = w.resource.id();
            let ephemeral = w.resource.to_json().to_string().contains(EPHEMERAL_MARKER);
            assert_eq!(
                ephemeral,
                matches!(w.kind, ChurnKind::Created | ChurnKind::Deleted)
            );
            match w.kind {
                ChurnKind::Created => assert!(live.insert(id), "a new name each time"),
                ChurnKind::Deleted => {
                    assert!(w.delete);
                    assert!(live.remove(&id), "deletes one it created");
                }
                _ => assert!(!w.delete),
            }
            // Every write converts, with the endpoint's key naming the pod.
            let kvs = typha_server::calico::convert::convert(&w.resource).unwrap();
            if ephemeral {
                assert!(kvs.iter().any(|(k, _)| {
                    typha_protocol::model::KeyPath::from(k)
                        .as_str()
                        .contains(EPHEMERAL_MARKER)
                }));
            }
        }
        assert_eq!(live.len() as u64, LIFE);
        // Successive writes of a policy or node change its value.
        let policies = cluster_spec(4, 3).policies as u64;
        let (p1, p2) = (plan.step(5).unwrap(), plan.step(5 + 10 * policies).unwrap());
        assert_eq!(p1.resource.id(), p2.resource.id());
        assert_ne!(p1.resource.to_json(), p2.resource.to_json());
    }

    #[tokio::test]
    async fn a_pause_waits_for_the_write_in_progress_and_holds_the_next() {
        let gate = Gate::default();
        let turn = gate.turn().await;
        let g2 = gate.clone();
        let pausing = tokio::spawn(async move { g2.pause().await });
        tokio::task::yield_now().await;
        assert!(!pausing.is_finished(), "waits for the write in progress");
        drop(turn);
        let paused = pausing.await.unwrap();
        let g3 = gate.clone();
        let next = tokio::spawn(async move { drop(g3.turn().await) });
        tokio::task::yield_now().await;
        assert!(!next.is_finished(), "no write while paused");
        drop(paused);
        next.await.unwrap();
    }
}
