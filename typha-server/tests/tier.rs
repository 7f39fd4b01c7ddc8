//! Tiered fan-out: agents ← server B ← server A ← datastore. B is fed by A through
//! typha-client (`TYPHA_DATASTORETYPE=typha`); its clients must end with exactly the
//! datastore's state, and B must ride out a restart of A without resyncing its own clients.

// In tests a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod common;

use std::time::Duration;

use common::{Peer, cluster, expected_digest, server, settle};
use typha_protocol::model::SyncStatus;
use typha_server::config::Config;
use typha_server::datastore::embedded::Embedded;
use typha_server::server::{RunningServer, start_with};
use typha_server::syncer::upstream::{self, UpstreamConfig};

async fn tier(upstream_addr: std::net::SocketAddr) -> RunningServer {
    let u = UpstreamConfig {
        addrs: vec![upstream_addr.to_string()],
        tls: None,
        hostname: "tier-b".into(),
    };
    start_with(Config::for_tests(), upstream::feed(u))
        .await
        .unwrap()
}

/// Starts a server over `store` listening on `addr` (the same port after a restart).
async fn server_at(addr: std::net::SocketAddr, store: &Embedded) -> RunningServer {
    let mut cfg = Config::for_tests();
    cfg.listen = addr;
    typha_server::server::start(cfg, std::sync::Arc::new(store.clone()))
        .await
        .unwrap()
}

fn churn(store: &Embedded, round: u64) {
    let spec = typha_server::sample::Spec {
        nodes: 4,
        pods_per_node: 5,
        ..typha_server::sample::Spec::default()
    };
    for i in 0..40u64 {
        let n = (i as usize) % 4;
        let p = (i as usize / 4) % 5;
        if i % 7 == 3 {
            store.delete(&spec.workload_endpoint(n, p, 0).id());
        } else {
            store.put(spec.workload_endpoint(n, p, round * 100 + i));
        }
    }
}

#[tokio::test]
async fn agents_of_a_second_tier_end_with_the_datastores_exact_state() {
    let (a, store) = server(Config::for_tests()).await;
    store.bulk_load(cluster(4, 5));
    settle(&a, &store).await;
    let b = tier(a.addr).await;
    let mut agent = Peer::connect(b.addr).await;
    agent.hello(Peer::offer("agent-1", None)).await.unwrap();
    churn(&store, 1);
    settle(&a, &store).await;
    let (want, n) = expected_digest(&store);
    agent
        .until("the datastore's state through two tiers", |p| {
            p.digest.combined() == want && p.status == Some(SyncStatus::InSync)
        })
        .await;
    assert_eq!(agent.state.len(), n);
    // Both tiers hold the same state, so their digests agree too.
    assert_eq!(b.cache.latest().digest, a.cache.latest().digest);
    // The tier's /metrics shows its upstream connection.
    assert_eq!(common::metric(&b, "typha_client_connected"), 1.0);
    b.shutdown().await;
    a.shutdown().await;
}

#[tokio::test]
async fn a_restart_of_the_upstream_costs_the_second_tiers_agents_only_deltas() {
    let (a, store) = server(Config::for_tests()).await;
    store.bulk_load(cluster(4, 5));
    settle(&a, &store).await;
    let addr = a.addr;
    let b = tier(addr).await;
    let mut agent = Peer::connect(b.addr).await;
    agent.hello(Peer::offer("agent-1", None)).await.unwrap();
    agent.sync_to(&b).await;
    let snapshots_before = b.metrics.snapshots_generated.get();

    // A goes away; meanwhile the datastore changes; a new A (new epoch) comes up on the
    // same address.
    a.shutdown().await;
    churn(&store, 2);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let a2 = server_at(addr, &store).await;
    settle(&a2, &store).await;
    let (want, _) = expected_digest(&store);
    agent
        .until("the changes made while A was down", |p| {
            p.digest.combined() == want && p.status == Some(SyncStatus::InSync)
        })
        .await;
    // B's own agent was never resynced: no new snapshot was built for it.
    assert_eq!(b.metrics.snapshots_generated.get(), snapshots_before);
    b.shutdown().await;
    a2.shutdown().await;
}
