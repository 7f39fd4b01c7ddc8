//! Connection balancing across replicas (`TYPHA_CONNECTIONREBALANCINGMODE=kubernetes`).
//!
//! Every poll the governor lists the replicas ([`peers::endpoints`]: the Service's
//! EndpointSlices), counts the cluster's nodes in the cache, and sets this replica's hard
//! connection limits the way Typha computes its limit ([`share::Limits::for_cluster`]: four
//! connections per node for Calico's clients, one for ours). It reads every other ready
//! replica's load from its `/status` ([`peers::load`]) and, when it holds clearly more than
//! the mean ([`share::plan`]), moves the excess away gradually: at most
//! `moves_per_sec` connections a second, each closed with a Goodbye (Rebalance) that names the
//! least-loaded replica first, by a running estimate ([`share::Ranking`]). The client goes
//! there and resumes by digest: a move costs the buckets that differ, not a snapshot. The same
//! ranking is what clients turned away at the limit, or drained at shutdown, are told to try,
//! so a draining replica's clients spread over the others (a draining replica keeps polling,
//! to keep that ranking fresh, but moves nothing itself). A replica that says it is draining,
//! or that its view of the datastore is stale, is left out (`candidate`).

pub mod peers;
pub mod share;

use std::net::SocketAddr;
use std::ops::Bound;
use std::sync::Arc;
use std::time::Duration;

use tracing::{debug, info, warn};
use typha_protocol::message::Epoch;

use typha_protocol::model::SyncStatus;

use crate::cache::{Cache, NODES_PREFIX};

/// Governor settings (Typha's names and defaults where it has them).
#[derive(Debug, Clone, PartialEq)]
pub struct GovernorConfig {
    /// `TYPHA_K8SNAMESPACE` (kube-system).
    pub namespace: String,
    /// `TYPHA_K8SSERVICENAME` (calico-typha).
    pub service: String,
    /// `TYPHA_K8SPORTNAME` (calico-typha).
    pub port_name: String,
    /// `TYPHA_MAXCONNECTIONSLOWERLIMIT` (400).
    pub lower: usize,
    /// `TYPHA_MAXCONNECTIONSUPPERLIMIT` (10,000).
    pub upper: usize,
    /// How often the replicas and their loads are read (`TYPHA_REBALANCEPOLLSECS`, 10 s).
    pub poll: Duration,
    /// Most connections moved away per second (`TYPHA_REBALANCEMOVESPERSEC`, 20).
    pub moves_per_sec: u32,
    /// How far above the mean a replica may be before it moves connections (10 %).
    pub tolerance: f64,
    /// The health port every replica serves `/status` on.
    pub health_port: u16,
    /// The API server (`TYPHA_K8SAPIENDPOINT`); `None`: in-cluster, else the kubeconfig.
    pub api_endpoint: Option<String>,
}

impl Default for GovernorConfig {
    fn default() -> Self {
        Self {
            namespace: "kube-system".into(),
            service: "calico-typha".into(),
            port_name: "calico-typha".into(),
            lower: 400,
            upper: 10_000,
            poll: Duration::from_secs(10),
            moves_per_sec: 20,
            tolerance: 0.1,
            health_port: 9098,
            api_endpoint: None,
        }
    }
}

/// What the governor may do to this replica's connections.
pub trait Connections: Send + Sync {
    /// Connections held now (counted from accept).
    fn held(&self) -> usize;
    /// Sets the hard limits: connections above them are turned away.
    fn set_limits(&self, limits: share::Limits, why: LimitReason);
    /// Closes one established connection (a random one) with a Goodbye (Rebalance) suggesting
    /// the replicas by the current ranking; `false` if there was none to close.
    fn move_one(&self) -> bool;
    /// Whether this replica is draining (shutting down): it then moves nothing itself (the
    /// drain moves every client) but keeps the ranking fresh for the drain's Goodbyes.
    fn draining(&self) -> bool;
    /// Sets the other replicas and their loads: what every client sent away (moved, turned
    /// away at the limit, drained at shutdown) is told, each by the ranking at that moment.
    fn set_ranking(&self, ranking: share::Ranking);
}

/// What a limit was computed from, for the log line that says it changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitReason {
    /// Replicas the Service lists (`None`: the list failed).
    pub replicas: Option<usize>,
    /// Nodes in the cache (`None`: not in sync yet).
    pub nodes: Option<usize>,
    /// Which bound or rule decided it.
    pub rule: &'static str,
}

/// Nodes in the cache's latest state.
pub fn node_count(cache: &Cache) -> usize {
    let Some(map) = cache.latest().map() else {
        return 0;
    };
    map.range::<_, str>((Bound::Included(NODES_PREFIX), Bound::Unbounded))
        .take_while(|(k, _)| k.as_str().starts_with(NODES_PREFIX))
        .count()
}

/// Whether another replica may be sent clients (moved, turned away, drained); if not, why.
/// Left out: this replica itself; one that is draining (still listed, the EndpointSlice
/// lags, but its clients are on their way here and it takes no new ones); one whose view of
/// the datastore is stale (cut off from it, it is behind: a client sent there with newer
/// revisions than its cache would wait for it, `TYPHA_RESUMEREVISIONWAITSECS`, then be served
/// older values than it had).
fn candidate(l: &peers::Load, own: Epoch) -> Result<(), &'static str> {
    if l.epoch == own.0 {
        Err("this one")
    } else if l.draining {
        Err("draining")
    } else if l.stale {
        Err("stale (its view of the datastore)")
    } else {
        Ok(())
    }
}

/// Balances this replica's connections until the process ends.
pub async fn run(
    cfg: GovernorConfig,
    client: kube::Client,
    cache: Arc<Cache>,
    conns: Arc<dyn Connections>,
    own_epoch: Epoch,
) {
    let mut tick = tokio::time::interval(cfg.poll);
    let mut last_problem = String::new();
    loop {
        tick.tick().await;
        let listed = peers::endpoints(&client, &cfg.namespace, &cfg.service, &cfg.port_name).await;
        // Typha's limit: every address the Service lists, ready or not, and the cache's nodes
        // once it is in sync; either unknown, the upper limit.
        let replicas = listed.as_ref().ok().map(Vec::len);
        let nodes = (cache.latest().status == SyncStatus::InSync).then(|| node_count(&cache));
        let (limits, rule) = share::Limits::for_cluster(cfg.lower, cfg.upper, replicas, nodes);
        conns.set_limits(
            limits,
            LimitReason {
                replicas,
                nodes,
                rule,
            },
        );
        let endpoints = match listed {
            Ok(e) => e,
            Err(e) => {
                let msg = e.to_string();
                if msg != last_problem {
                    warn!(error = %msg, upper = cfg.upper, "connection balancing: cannot list the replicas; the connection limit is the upper limit until they can be");
                    last_problem = msg;
                }
                continue;
            }
        };
        last_problem.clear();
        let mut others = Vec::new();
        for e in endpoints.iter().filter(|e| e.ready) {
            match peers::load(
                SocketAddr::new(e.ip, cfg.health_port),
                Duration::from_secs(2),
            )
            .await
            {
                Ok(l) => match candidate(&l, own_epoch) {
                    Ok(()) => others.push(share::Peer {
                        addr: SocketAddr::new(e.ip, e.port).to_string(),
                        load: l.connections,
                    }),
                    Err(why) => debug!(replica = %e.ip, "a replica is {why}; left out"),
                },
                Err(err) => {
                    debug!(error = %err, "a replica's load is unknown; left out this round")
                }
            }
        }
        let held = conns.held();
        let plan = share::plan(held, &others, cfg.tolerance);
        conns.set_ranking(share::Ranking::new(others));
        if plan.excess == 0 || conns.draining() {
            continue;
        }
        // Move no more than fits in one poll at the bounded rate; the next poll sees the result.
        let budget = (cfg.moves_per_sec as f64 * cfg.poll.as_secs_f64()) as usize;
        let moves = plan.excess.min(budget.max(1));
        info!(
            held,
            target = plan.target,
            moving = moves,
            replicas = endpoints.len(),
            nodes,
            limit = limits.all,
            "connection balancing: moving connections to less loaded replicas"
        );
        let gap = Duration::from_secs_f64(1.0 / f64::from(cfg.moves_per_sec.max(1)));
        for _ in 0..moves {
            // Each goes where the ranking says at that moment (it counts every client sent).
            if conns.draining() || !conns.move_one() {
                break;
            }
            tokio::time::sleep(gap).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(epoch: u64, draining: bool, stale: bool) -> peers::Load {
        peers::Load {
            epoch,
            connections: 10,
            draining,
            stale,
        }
    }

    #[test]
    fn only_other_replicas_that_are_current_and_staying_take_clients() {
        let own = Epoch(1);
        assert_eq!(candidate(&load(2, false, false), own), Ok(()));
        assert!(candidate(&load(1, false, false), own).is_err(), "itself");
        assert!(candidate(&load(2, true, false), own).is_err(), "draining");
        // Cut off from the datastore: behind the others. A client moved there from a replica
        // that is ahead would be served older values than it had (loadtest chaos, seed 19).
        assert!(candidate(&load(2, false, true), own).is_err(), "stale");
    }
}
