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
    let spec = typha_test_support::sample::Spec {
        nodes: 4,
        pods_per_node: 5,
        ..typha_test_support::sample::Spec::default()
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
    let snapshots_before = b.metrics.snapshots_generated.felix().get();

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
    assert_eq!(
        b.metrics.snapshots_generated.felix().get(),
        snapshots_before
    );
    b.shutdown().await;
    a2.shutdown().await;
}

/// A key of a kind added after protocol version 1 (BGPFilter) and one of a kind this build
/// does not know at all (as a newer upstream would send) pass through a tier: its clients that
/// offered `OPAQUE_KINDS` get both, with digests equal to the upstream's; a version 1 client of
/// either server gets neither, with digests over its own keys, and stays connected while they
/// come and go.
#[tokio::test]
async fn kinds_after_version_1_reach_the_clients_that_know_them_through_a_tier() {
    use typha_protocol::model::{
        EncodedValue, KeyPath, Resource, Revision, Update, UpdateKind, Value,
    };
    use typha_server::syncer::SyncerEvent;

    let (cmd_tx, mut cmd_rx) = tokio::sync::mpsc::unbounded_channel::<SyncerEvent>();
    let a = start_with(Config::for_tests(), move |f| {
        Box::pin(async move {
            while let Some(ev) = cmd_rx.recv().await {
                if f.tx.send(ev).await.is_err() {
                    return;
                }
            }
        })
    })
    .await
    .unwrap();
    let put = |path: &str, spec: &str, rev: u64| Update {
        key: KeyPath::from_wire(path).unwrap(),
        value: Some(EncodedValue::encode(&Value::Resource(Resource {
            spec_json: spec.into(),
            ..Default::default()
        }))),
        revision: Revision(rev),
        kind: UpdateKind::New,
    };
    let (known, later, future) = (
        "/calico/resources/v3/projectcalico.org/bgppeers/p1",
        "/calico/resources/v3/projectcalico.org/bgpfilters/f1",
        "/calico/resources/v3/projectcalico.org/widgetsfromthefuture/w1",
    );
    cmd_tx
        .send(SyncerEvent::Kvs(vec![
            put(known, "{}", 1),
            put(later, "{}", 2),
            put(future, "{}", 3),
        ]))
        .unwrap();
    cmd_tx
        .send(SyncerEvent::Status(SyncStatus::InSync))
        .unwrap();

    let b = tier(a.addr).await;
    let (mut new_a, mut old_a, mut new_b, mut old_b) = (
        Peer::connect(a.addr).await,
        Peer::connect(a.addr).await,
        Peer::connect(b.addr).await,
        Peer::connect(b.addr).await,
    );
    new_a.hello(Peer::offer("new-a", None)).await.unwrap();
    old_a.hello(Peer::offer_v1("old-a", None)).await.unwrap();
    new_b.hello(Peer::offer("new-b", None)).await.unwrap();
    old_b.hello(Peer::offer_v1("old-b", None)).await.unwrap();
    let keys = |p: &Peer| -> Vec<String> { p.state.keys().map(|k| k.to_string()).collect() };
    // Peers check every digest they are sent against their own state, and a version 1 peer
    // fails on any key of a later kind (`Peer::check_view`).
    new_a.sync_to(&a).await;
    old_a.sync_to(&a).await;
    let want_b = a.cache.latest().digest;
    new_b
        .until("the upstream's whole state through the tier", |p| {
            p.digest.combined() == want_b && p.status == Some(SyncStatus::InSync)
        })
        .await;
    old_b.sync_to(&b).await;
    assert_eq!(keys(&new_a), [later, known, future]);
    assert_eq!(keys(&new_b), [later, known, future]);
    assert_eq!(keys(&old_a), [known]);
    assert_eq!(keys(&old_b), [known]);
    assert_eq!(b.cache.latest().digest, a.cache.latest().digest);

    // A version 1 client resuming by digest, or by cursor, is compared with its own view.
    for resume in [
        typha_protocol::message::Resume {
            cursor: None,
            ..old_a.resume()
        },
        old_a.resume(),
    ] {
        let mut again = Peer::connect(a.addr).await;
        again.state = old_a.state.clone();
        again.digest = old_a.digest.clone();
        again.seq = old_a.seq;
        again
            .hello(Peer::offer_v1("old-a", Some(resume)))
            .await
            .unwrap();
        again.sync_to(&a).await;
        assert_eq!(keys(&again), [known]);
        assert!(again.updates_seen.is_empty(), "{:?}", again.updates_seen);
    }

    // Changed, then deleted: the version 1 clients see none of it and stay connected.
    cmd_tx
        .send(SyncerEvent::Kvs(vec![
            put(later, r#"{"exportV4":[]}"#, 4),
            put(future, r#"{"x":1}"#, 5),
        ]))
        .unwrap();
    cmd_tx
        .send(SyncerEvent::Kvs(vec![
            Update::delete(KeyPath::from_wire(later).unwrap(), Revision(6)),
            Update::delete(KeyPath::from_wire(future).unwrap(), Revision(7)),
            put(known, r#"{"asNumber":64512}"#, 8),
        ]))
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    for p in [&mut new_a, &mut old_a] {
        p.sync_to(&a).await;
    }
    for p in [&mut new_b, &mut old_b] {
        p.sync_to(&b).await;
    }
    for p in [&new_a, &old_a, &new_b, &old_b] {
        assert_eq!(keys(p), [known]);
        assert!(p.goodbye.is_none());
    }
    assert!(
        old_b.updates_seen.iter().all(|(k, _)| k.in_v1()),
        "{:?}",
        old_b.updates_seen
    );
    assert!(
        new_b
            .updates_seen
            .iter()
            .any(|(k, v)| k.as_str() == future && v.is_none()),
        "the tier relayed the deletion of the unknown kind"
    );
    b.shutdown().await;
    a.shutdown().await;
}
