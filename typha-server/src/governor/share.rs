//! How many connections a replica should hold: Typha's limit, and our balancing target.
//!
//! Typha's limit (`typha/pkg/k8s/rebalance.go`, facts in our words): one replica alone takes
//! up to the upper limit; with `n` replicas each may hold `syncer types × (1 + nodes × 1.2 /
//! (n − 1))` (one replica's worth of headroom for a rolling update, plus 20 %), within the
//! lower and upper limits. Typha enforces it by dropping random connections, every one of which
//! then needs a full snapshot elsewhere.
//!
//! Ours keeps that limit as the hard ceiling (new connections above it are turned away), and
//! balances below it: each replica knows the others' loads, and one holding clearly more than
//! the mean moves its excess, gradually, to the least-loaded replicas, whose clients then
//! resume there by digest.

/// Typha's per-replica connection limit.
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
