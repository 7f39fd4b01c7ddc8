//! How many connections a replica should hold: Typha's limit, and our balancing target.
//!
//! Typha's limit (Calico v3.32, `typha/pkg/k8s/rebalance.go`, `CalculateMaxConnLimit`; facts
//! in our words): one replica alone takes up to the upper limit; with `n` replicas each may
//! hold `syncer types × (1 + nodes × 1.2 / (n − 1))` connections (integer arithmetic, one
//! replica's worth of headroom for a rolling update, plus 20 %), at least the lower limit and
//! at most the upper one. The factor is the number of syncer types the server serves (four:
//! `daemon.go` passes `len(CachesBySyncerType)`), because each calico-node may open one
//! connection of each type (Felix, confd's bgp, the tunnel IP allocator, the node status
//! reporter). Every connection counts, whatever its type. When the replicas or the nodes
//! cannot be counted (a failed list, a node count not in sync yet), the limit is the upper
//! one. Typha enforces the limit by dropping one random connection a second above it, every
//! one of which then needs a full snapshot elsewhere.
//!
//! Ours applies that limit, with the factor four, to every connection, so Calico's clients
//! get the room Typha gives them ([`Limits::all`]). A client of our own protocol is one
//! connection per node (the agent takes everything it needs over one), so connections of
//! our protocol are also held to one connection per node's share ([`Limits::ours`]: the same
//! formula with the factor one, within the same bounds): a fleet of our agents is limited as
//! before, a fleet of calico-nodes as Typha limits it, and a mixed one by both. Both are hard
//! ceilings (a connection over one is turned away), and balancing works below them: each
//! replica knows the others' loads, and one holding clearly more than the mean moves its
//! excess, gradually, to the least-loaded replicas, whose clients then resume there by digest.

/// The syncer types a Calico client may connect for: Typha's factor.
pub const SYNCER_TYPES: usize = 4;

/// Typha's per-replica connection limit for `replicas` replicas, `nodes` nodes and `types`
/// connections per node (`CalculateMaxConnLimit`).
pub fn typha_limit(
    lower: usize,
    upper: usize,
    replicas: usize,
    nodes: usize,
    types: usize,
) -> usize {
    if replicas <= 1 {
        return upper;
    }
    let candidate = types.saturating_mul(1 + nodes.saturating_mul(120) / (replicas - 1) / 100);
    candidate.max(lower).min(upper)
}

/// A replica's connection limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Every connection, whatever its protocol (Typha's limit, counting each syncer type).
    pub all: usize,
    /// Connections of our own protocol (one per node).
    pub ours: usize,
}

impl Limits {
    /// The same limit for both: the upper limit, without balancing.
    pub fn flat(limit: usize) -> Self {
        Limits {
            all: limit,
            ours: limit,
        }
    }

    /// The limits for `replicas` (every address the Service lists, as Typha counts them) and
    /// `nodes` (the cache's Node resources); `None` for either: not known (a failed list, the
    /// cache not in sync yet), so the upper limit, as Typha does. With the reason Typha would
    /// log.
    pub fn for_cluster(
        lower: usize,
        upper: usize,
        replicas: Option<usize>,
        nodes: Option<usize>,
    ) -> (Self, &'static str) {
        let (Some(replicas), Some(nodes)) = (replicas, nodes) else {
            return (Self::flat(upper), "replicas or nodes unknown");
        };
        if replicas <= 1 {
            return (Self::flat(upper), "lone replica");
        }
        let limits = Limits {
            all: typha_limit(lower, upper, replicas, nodes, SYNCER_TYPES),
            ours: typha_limit(lower, upper, replicas, nodes, 1),
        };
        let reason = if limits.all == upper {
            "upper limit"
        } else if limits.all == lower {
            "lower limit"
        } else {
            "share + 20 %"
        };
        (limits, reason)
    }
}

/// One replica's load, as it reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// Where its clients connect (`host:port`).
    pub addr: String,
    /// Connections it holds.
    pub load: usize,
}

/// What a replica holding `own` connections should do, given the other ready replicas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The most it should hold: the mean over every replica, plus the tolerance.
    pub target: usize,
    /// How many connections to move away (0 when within the target).
    pub excess: usize,
    /// Where to send them: the other replicas, least loaded first.
    pub redirect: Vec<String>,
}

/// Balances `own` against `peers` (the other ready replicas). A replica moves connections only
/// when it holds more than the mean by more than `tolerance` (a fraction, plus one connection,
/// so rounding and the loads' age do not make replicas trade clients back and forth).
pub fn plan(own: usize, peers: &[Peer], tolerance: f64) -> Plan {
    let mut ranked: Vec<&Peer> = peers.iter().collect();
    ranked.sort_by(|a, b| a.load.cmp(&b.load).then_with(|| a.addr.cmp(&b.addr)));
    let redirect = ranked.iter().map(|p| p.addr.clone()).collect();
    if peers.is_empty() {
        return Plan {
            target: own,
            excess: 0,
            redirect,
        };
    }
    let total: usize = own + peers.iter().map(|p| p.load).sum::<usize>();
    let mean = total as f64 / (peers.len() + 1) as f64;
    let target = (mean * (1.0 + tolerance)).ceil() as usize + 1;
    Plan {
        target,
        // Down to the mean, not to the target: otherwise the last replicas never get their share.
        excess: if own > target {
            own - mean.ceil() as usize
        } else {
            0
        },
        redirect,
    }
}

/// The other replicas, ranked for the next client sent away (moved, turned away at the limit,
/// or drained at shutdown): least loaded first by a running estimate that counts every client
/// sent to the first, so a stream of clients spreads over the replicas instead of piling onto
/// the one that was least loaded at the last poll. Refreshed from the replicas' own counts
/// every poll.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ranking {
    peers: Vec<Peer>,
}

impl Ranking {
    /// The replicas as they reported themselves.
    pub fn new(peers: Vec<Peer>) -> Self {
        Self { peers }
    }

    /// Whether there is no other replica to suggest.
    pub fn is_empty(&self) -> bool {
        self.peers.is_empty()
    }

    /// Where the next client should go, best first; counts it against the first.
    pub fn next_client(&mut self) -> Vec<String> {
        self.peers
            .sort_by(|a, b| a.load.cmp(&b.load).then_with(|| a.addr.cmp(&b.addr)));
        let order = self.peers.iter().map(|p| p.addr.clone()).collect();
        if let Some(first) = self.peers.first_mut() {
            first.load += 1;
        }
        order
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typhas_limit_as_typha_computes_it() {
        // A lone replica takes up to the upper limit.
        assert_eq!(typha_limit(400, 10_000, 1, 5_000, 1), 10_000);
        // 1,000 nodes on 3 replicas: 1 + 1,000 × 1.2 / 2 = 601.
        assert_eq!(typha_limit(400, 10_000, 3, 1_000, 1), 601);
        // Four syncer types per node, as calico-node opens.
        assert_eq!(typha_limit(400, 10_000, 3, 1_000, 4), 2_404);
        // Within the limits.
        assert_eq!(typha_limit(400, 10_000, 3, 100, 1), 400);
        assert_eq!(typha_limit(400, 10_000, 2, 50_000, 1), 10_000);
        // Go's integer arithmetic, left to right: 1,000 × 120 / 7 / 100 = 171.
        assert_eq!(typha_limit(1, 10_000, 8, 1_000, 4), 4 * 172);
    }

    #[test]
    fn calico_clients_get_four_connections_per_node_and_ours_one() {
        // Issue 39: 2,000 nodes on 12 replicas. Typha: 4 × (1 + 2,000 × 1.2 / 11) = 876 per
        // replica (10,512 in all, for about 8,000 connections of calico-nodes); one per node
        // would be 219, raised to the lower limit: 4,800 in all, too few.
        let (l, reason) = Limits::for_cluster(400, 10_000, Some(12), Some(2_000));
        assert_eq!(
            l,
            Limits {
                all: 876,
                ours: 400
            }
        );
        assert_eq!(reason, "share + 20 %");
        // 1,000 nodes, 3 replicas: TYPHA-FACTS' example.
        let (l, _) = Limits::for_cluster(400, 10_000, Some(3), Some(1_000));
        assert_eq!(
            l,
            Limits {
                all: 2_404,
                ours: 601
            }
        );
        // A lone replica, or nothing known: the upper limit, for both.
        for (replicas, nodes) in [(Some(1), Some(5_000)), (None, Some(5)), (Some(3), None)] {
            let (l, _) = Limits::for_cluster(400, 10_000, replicas, nodes);
            assert_eq!(l, Limits::flat(10_000), "{replicas:?} {nodes:?}");
        }
        let (l, reason) = Limits::for_cluster(400, 1_000, Some(2), Some(5_000));
        assert_eq!((l, reason), (Limits::flat(1_000), "upper limit"));
        let (l, reason) = Limits::for_cluster(400, 10_000, Some(3), Some(10));
        assert_eq!((l, reason), (Limits::flat(400), "lower limit"));
    }

    fn peers(loads: &[usize]) -> Vec<Peer> {
        loads
            .iter()
            .enumerate()
            .map(|(i, l)| Peer {
                addr: format!("10.0.0.{}:5473", i + 2),
                load: *l,
            })
            .collect()
    }

    #[test]
    fn an_overloaded_replica_moves_its_excess_to_the_least_loaded() {
        let p = plan(600, &peers(&[0, 0]), 0.1);
        assert_eq!(p.excess, 400, "down to the mean");
        assert_eq!(p.redirect[0], "10.0.0.2:5473");
        let p = plan(300, &peers(&[250, 50]), 0.1);
        assert_eq!(p.redirect, ["10.0.0.3:5473", "10.0.0.2:5473"]);
        assert_eq!(p.excess, 100);
    }

    #[test]
    fn near_the_mean_nothing_moves() {
        assert_eq!(plan(205, &peers(&[200, 195]), 0.1).excess, 0);
        assert_eq!(plan(10, &peers(&[]), 0.1).excess, 0);
        // Small numbers: one connection more than the others is not worth a move.
        assert_eq!(plan(2, &peers(&[1, 1]), 0.1).excess, 0);
    }

    #[test]
    fn a_stream_of_clients_spreads_over_the_least_loaded() {
        let mut r = Ranking::new(peers(&[100, 0, 0]));
        let firsts: Vec<String> = (0..4).map(|_| r.next_client().remove(0)).collect();
        assert_eq!(
            firsts,
            [
                "10.0.0.3:5473",
                "10.0.0.4:5473",
                "10.0.0.3:5473",
                "10.0.0.4:5473"
            ],
            "alternating, not all to the one least loaded at the start"
        );
        // The busy one is last in every suggestion until the others catch up with it.
        assert_eq!(r.next_client()[2], "10.0.0.2:5473");
        let mut r = Ranking::new(peers(&[3, 0]));
        let firsts: Vec<String> = (0..5).map(|_| r.next_client().remove(0)).collect();
        assert_eq!(firsts.iter().filter(|a| *a == "10.0.0.3:5473").count(), 4);
        assert!(Ranking::default().next_client().is_empty());
    }

    #[test]
    fn balanced_replicas_stay_balanced_whatever_the_order() {
        // Three replicas that each see the others: none of them moves anything at 200 each.
        for own in [199, 200, 201] {
            assert_eq!(plan(own, &peers(&[200, 200]), 0.1).excess, 0);
        }
    }
}
