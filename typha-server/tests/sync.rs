//! The server's core contract, over real TCP on loopback: the snapshot equals the datastore,
//! deltas arrive in order, status transitions, every resume kind, coalesced catch-up, manifest
//! edits, and frames encoded once whatever the number of clients.

// In tests a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Peer, cluster, eventually, expected_digest, server, settle};
use futures_util::future::BoxFuture;
use tokio::sync::Notify;
use typha_protocol::handshake::ClientOffer;
use typha_protocol::message::{GoodbyeReason, Message};
use typha_protocol::model::{Revision, SyncStatus};
use typha_server::config::Config;
use typha_server::datastore::embedded::{DirSource, Embedded};
use typha_server::datastore::{Datastore, DatastoreError, Listing, WatchStream};
use typha_server::metrics::{FrameKind, ResumeKind};

#[tokio::test]
async fn snapshot_equals_the_datastore_and_deltas_follow_in_order() {
    let (srv, store) = server(Config::for_tests()).await;
    store.bulk_load(cluster(20, 30));
    let mut p = Peer::connect(srv.addr).await;
    p.hello(Peer::offer("node-a", None)).await.unwrap();
    p.sync_to(&srv).await;
    let (want, n) = expected_digest(&store);
    assert_eq!(p.state.len(), n);
    assert_eq!(
        p.digest.combined(),
        want,
        "client digest equals a fold of the datastore"
    );
    assert_eq!(p.first_after_hello, Some("snapshot"));

    // Changes arrive once each, in order.
    let spec = typha_test_support::sample::Spec {
        nodes: 20,
        pods_per_node: 30,
        ..Default::default()
    };
    let before = p.updates_seen.len();
    for g in 1..=50u64 {
        store.put(spec.workload_endpoint((g % 20) as usize, (g % 30) as usize, g));
    }
    let victim = store
        .resources()
        .into_iter()
        .find(|r| r.metadata.name.contains("k8s"))
        .unwrap();
    store.delete(&victim.id());
    settle(&srv, &store).await;
    p.sync_to(&srv).await;
    let seen = &p.updates_seen[before..];
    assert_eq!(
        seen.len(),
        51,
        "50 updates and 1 deletion, each exactly once"
    );
    assert!(seen[..50].iter().all(|(_, v)| v.is_some()));
    assert!(seen[50].1.is_none());
    let (want, _) = expected_digest(&store);
    assert_eq!(p.digest.combined(), want);
    srv.shutdown().await;
}

#[tokio::test]
async fn frames_are_encoded_once_whatever_the_number_of_clients() {
    let (srv, store) = server(Config::for_tests()).await;
    store.bulk_load(cluster(5, 10));
    let mut peers = Vec::new();
    for i in 0..20 {
        let mut p = Peer::connect(srv.addr).await;
        p.hello(Peer::offer(&format!("node-{i}"), None))
            .await
            .unwrap();
        p.sync_to(&srv).await;
        peers.push(p);
    }
    let spec = typha_test_support::sample::Spec {
        nodes: 5,
        pods_per_node: 10,
        ..Default::default()
    };
    let deltas_before = srv.metrics.encoded_count(FrameKind::delta);
    let seq_before = srv.cache.latest().seq;
    for g in 1..=30u64 {
        // Each change becomes its own breadcrumb.
        let rev = store.put(spec.workload_endpoint(0, (g % 10) as usize, g));
        eventually("breadcrumb", || srv.cache.latest().revision >= rev).await;
    }
    for p in &mut peers {
        p.sync_to(&srv).await;
    }
    let crumbs = srv.cache.latest().seq.0 - seq_before.0;
    let encoded = srv.metrics.encoded_count(FrameKind::delta) - deltas_before;
    assert_eq!(
        encoded, crumbs,
        "one delta frame encode per breadcrumb for 20 clients"
    );
    // 20 clients joined one unchanged version: one snapshot built, the rest reused.
    assert_eq!(srv.metrics.snapshots_generated.felix().get(), 1);
    assert_eq!(srv.metrics.snapshots_reused.felix().get(), 19);
    srv.shutdown().await;
}

/// A datastore whose listing waits for a signal, to watch the status move.
struct Gated {
    inner: Embedded,
    open: Arc<Notify>,
}

impl Datastore for Gated {
    fn name(&self) -> &'static str {
        "gated"
    }
    fn list(&self) -> BoxFuture<'_, Result<Listing, DatastoreError>> {
        Box::pin(async move {
            self.open.notified().await;
            self.open.notify_one();
            self.inner.list().await
        })
    }
    fn watch(
        &self,
        from: typha_protocol::model::Revision,
    ) -> BoxFuture<'_, Result<WatchStream, DatastoreError>> {
        self.inner.watch(from)
    }
}

#[tokio::test]
async fn status_moves_from_wait_for_datastore_to_in_sync() {
    let store = Embedded::new();
    store.bulk_load(cluster(2, 3));
    let open = Arc::new(Notify::new());
    let srv = typha_server::server::start(
        Config::for_tests(),
        Arc::new(Gated {
            inner: store.clone(),
            open: open.clone(),
        }),
    )
    .await
    .unwrap();
    let mut p = Peer::connect(srv.addr).await;
    p.hello(Peer::offer("early", None)).await.unwrap();
    p.until("first status", |p| p.status.is_some()).await;
    assert_eq!(p.statuses, vec![SyncStatus::WaitForDatastore]);
    assert!(p.state.is_empty());
    open.notify_one();
    p.sync_to(&srv).await;
    assert_eq!(*p.statuses.last().unwrap(), SyncStatus::InSync);
    assert!(
        !p.statuses.contains(&SyncStatus::InSync)
            || p.statuses.iter().position(|s| *s == SyncStatus::InSync)
                == Some(p.statuses.len() - 1)
    );
    let (want, _) = expected_digest(&store);
    assert_eq!(
        p.digest.combined(),
        want,
        "InSync is only reported once the data is complete"
    );
    srv.shutdown().await;
}

#[tokio::test]
async fn resume_by_deltas_sends_only_what_was_missed() {
    let (srv, store) = server(Config::for_tests()).await;
    store.bulk_load(cluster(5, 10));
    let spec = typha_test_support::sample::Spec {
        nodes: 5,
        pods_per_node: 10,
        ..Default::default()
    };
    let mut p = Peer::connect(srv.addr).await;
    p.hello(Peer::offer("n", None)).await.unwrap();
    p.sync_to(&srv).await;
    let (state, digest, seq) = (p.state.clone(), p.digest.clone(), p.seq);
    let resume = p.resume();
    drop(p);
    for g in 1..=5u64 {
        store.put(spec.workload_endpoint(1, g as usize, g));
    }
    settle(&srv, &store).await;
    let mut q = Peer::connect(srv.addr).await;
    q.state = state;
    q.digest = digest;
    q.seq = seq;
    q.hello(Peer::offer("n", Some(resume))).await.unwrap();
    q.sync_to(&srv).await;
    assert_eq!(q.first_after_hello, Some("deltas"));
    assert_eq!(q.updates_seen.len(), 5, "only the five missed updates");
    assert_eq!(q.digest.combined(), expected_digest(&store).0);
    assert_eq!(srv.metrics.resume_count(ResumeKind::deltas), 1);
    srv.shutdown().await;
}

/// A client that has seen a newer datastore revision than this server's cache (it comes
/// from a replica that is ahead of this one) is held, pinged, until the cache reaches it:
/// resumed from behind, it would be sent older values than it has. Past the wait it is
/// served what the cache has, unless the server's view of the datastore is stale (cut off):
/// then it is sent to another replica, at once (stale already, or turned stale meanwhile).
#[tokio::test]
async fn a_resume_from_ahead_is_held_until_the_cache_reaches_the_clients_revision() {
    let mut cfg = Config::for_tests();
    cfg.conn.resume_floor_wait = Duration::from_secs(20);
    let (srv, store) = server(cfg).await;
    store.bulk_load(cluster(5, 10));
    let spec = typha_test_support::sample::Spec {
        nodes: 5,
        pods_per_node: 10,
        ..Default::default()
    };
    let mut p = Peer::connect(srv.addr).await;
    p.hello(Peer::offer("n", None)).await.unwrap();
    p.sync_to(&srv).await;
    let (state, digest, seq) = (p.state.clone(), p.digest.clone(), p.seq);
    let resume = p.resume();
    drop(p);
    let now = srv.cache.latest().revision;
    // The client again, with its state, resuming at `addr` having seen revision `floor`.
    let resume_at = |addr: std::net::SocketAddr, floor: u64| {
        let (state, digest, resume) = (state.clone(), digest.clone(), resume.clone());
        async move {
            let mut q = Peer::connect(addr).await;
            q.state = state;
            q.digest = digest;
            q.seq = seq;
            q.hello(ClientOffer {
                revision_floor: Some(Revision(floor)),
                ..Peer::offer("n", Some(resume))
            })
            .await
            .unwrap();
            q
        }
    };

    let mut q = resume_at(srv.addr, now.0 + 2).await;
    // Held: nothing but how current the view is, and pings.
    loop {
        match q.recv_within(Duration::from_millis(800)).await {
            Ok(m @ (Message::Staleness(_) | Message::Ping(_))) => q.apply(m).await.unwrap(),
            Ok(m) => panic!("a client from ahead was sent {m:?} before the cache reached it"),
            Err(e) => {
                assert_eq!(e, "timeout");
                break;
            }
        }
    }
    for g in 1..=2u64 {
        store.put(spec.workload_endpoint(1, g as usize, g));
    }
    q.sync_to(&srv).await;
    assert_eq!(q.first_after_hello, Some("deltas"));
    assert_eq!(q.digest.combined(), expected_digest(&store).0);
    let [reached, timed_out, _] = &srv.metrics.resume_floor_waits;
    assert_eq!((reached.get(), timed_out.get()), (1, 0));

    // At or below the cache's revision: not held at all.
    let mut q = resume_at(srv.addr, srv.cache.latest().revision.0).await;
    q.sync_to(&srv).await;
    assert_eq!((reached.get(), timed_out.get()), (1, 0));
    srv.shutdown().await;

    // A revision the cache never reaches (the datastore went back): served after the wait.
    let mut cfg = Config::for_tests();
    cfg.conn.resume_floor_wait = Duration::from_millis(300);
    let (srv, store) = server(cfg).await;
    store.bulk_load(cluster(5, 10));
    // The state the resume's digest describes (the same cluster as the first server's).
    let mut q = resume_at(srv.addr, u64::MAX).await;
    q.sync_to(&srv).await;
    assert_eq!(q.digest.combined(), expected_digest(&store).0);
    let [reached, timed_out, sent_away] = &srv.metrics.resume_floor_waits;
    assert_eq!((reached.get(), timed_out.get(), sent_away.get()), (0, 1, 0));

    // The same client on a server cut off from its datastore (its view stale): behind because
    // it cannot hear, so the client is sent to another replica at once, not back in time.
    cut_off(&srv);
    assert!(srv.freshness.view().stale);
    let mut q = resume_at(srv.addr, u64::MAX).await;
    let bye = tokio::time::timeout(Duration::from_secs(60), q.until_closed())
        .await
        .expect("sent away, not served")
        .expect("a Goodbye");
    assert_eq!(bye.reason, GoodbyeReason::Rebalance);
    assert!(q.updates_seen.is_empty(), "nothing older was sent");
    assert_eq!((reached.get(), timed_out.get(), sent_away.get()), (0, 1, 1));
    srv.shutdown().await;

    // A view that turns stale while a client is held ends the wait there: the cache will not
    // catch up while it cannot hear, so the client goes elsewhere now, not when an hour's wait
    // runs out. (Held before: nothing but pings and how current the view is.)
    let mut cfg = Config::for_tests();
    cfg.conn.resume_floor_wait = Duration::from_secs(3600);
    let (srv, store) = server(cfg).await;
    store.bulk_load(cluster(5, 10));
    let mut q = resume_at(srv.addr, u64::MAX).await;
    match q.recv_within(Duration::from_millis(800)).await {
        Ok(m @ (Message::Staleness(_) | Message::Ping(_))) => q.apply(m).await.unwrap(),
        Ok(m) => panic!("a held client was sent {m:?}"),
        Err(e) => assert_eq!(e, "timeout"),
    }
    cut_off(&srv);
    let bye = tokio::time::timeout(Duration::from_secs(60), q.until_closed())
        .await
        .expect("sent away when the view turned stale, not held for the hour")
        .expect("a Goodbye");
    assert_eq!(bye.reason, GoodbyeReason::Rebalance);
    assert!(q.updates_seen.is_empty(), "nothing older was sent");
    let [reached, timed_out, sent_away] = &srv.metrics.resume_floor_waits;
    assert_eq!((reached.get(), timed_out.get(), sent_away.get()), (0, 0, 1));
    srv.shutdown().await;
}

/// The server's view of its datastore turns stale, as a server cut off from it says.
fn cut_off(srv: &typha_server::server::RunningServer) {
    srv.freshness
        .relay(Some(typha_protocol::message::Staleness::new(
            true,
            Duration::from_secs(30),
            "datastore unavailable",
        )));
}

#[tokio::test]
async fn resume_by_digest_after_a_server_restart_sends_only_differing_buckets() {
    let store = Embedded::new();
    store.bulk_load(cluster(20, 30));
    let srv = typha_server::server::start(Config::for_tests(), Arc::new(store.clone()))
        .await
        .unwrap();
    let mut p = Peer::connect(srv.addr).await;
    p.hello(Peer::offer("n", None)).await.unwrap();
    p.sync_to(&srv).await;
    let (state, digest) = (p.state.clone(), p.digest.clone());
    let resume = p.resume();
    let total = state.len();
    drop(p);
    srv.shutdown().await;

    // A few changes while the server is down; a new server (new epoch) over the same store.
    let spec = typha_test_support::sample::Spec {
        nodes: 20,
        pods_per_node: 30,
        ..Default::default()
    };
    for g in 1..=3u64 {
        store.put(spec.workload_endpoint(2, g as usize, 100 + g));
    }
    let victim = store
        .resources()
        .into_iter()
        .find(|r| r.metadata.name.contains("k8s"))
        .unwrap();
    store.delete(&victim.id());
    let srv = typha_server::server::start(Config::for_tests(), Arc::new(store.clone()))
        .await
        .unwrap();
    eventually("new server in sync", || {
        srv.cache.latest().status == SyncStatus::InSync
    })
    .await;
    let mut q = Peer::connect(srv.addr).await;
    q.state = state;
    q.digest = digest;
    let old_epoch = resume.cursor.unwrap().epoch;
    let session = q.hello(Peer::offer("n", Some(resume))).await.unwrap();
    assert_ne!(
        session.epoch, old_epoch,
        "a restarted server has a new epoch"
    );
    q.sync_to(&srv).await;
    assert_eq!(q.first_after_hello, Some("digest"));
    assert_eq!(
        q.digest.combined(),
        expected_digest(&store).0,
        "final state is exact, deletion included"
    );
    assert_eq!(srv.metrics.resume_count(ResumeKind::digest), 1);
    assert_eq!(srv.metrics.resume_count(ResumeKind::snapshot), 0);
    // At most 4 buckets differ: far fewer KVs were sent than a snapshot would carry.
    assert!(q.frames < 20, "{} frames", q.frames);
    assert!(total > 600);
    srv.shutdown().await;
}

#[tokio::test]
async fn a_client_far_behind_catches_up_through_shared_spans() {
    let (srv, store) = server(Config::for_tests()).await;
    store.bulk_load(cluster(2, 5));
    let spec = typha_test_support::sample::Spec {
        nodes: 2,
        pods_per_node: 5,
        ..Default::default()
    };
    let mut p = Peer::connect(srv.addr).await;
    p.hello(Peer::offer("behind", None)).await.unwrap();
    p.sync_to(&srv).await;
    let (state, digest, seq, resume) = (p.state.clone(), p.digest.clone(), p.seq, p.resume());
    drop(p);
    // 600 breadcrumbs while the client is away (a socket's buffers would hide a slow reader on
    // loopback; a short disconnect is the honest way to be 600 behind).
    for g in 1..=600u64 {
        let rev = store.put(spec.workload_endpoint(0, (g % 5) as usize, g));
        eventually("breadcrumb", || srv.cache.latest().revision >= rev).await;
    }
    let crumbs = srv.cache.latest().seq.0 - seq.0;
    assert!(crumbs >= 600);
    let mut q = Peer::connect(srv.addr).await;
    (q.state, q.digest, q.seq) = (state, digest, seq);
    q.hello(Peer::offer("behind", Some(resume))).await.unwrap();
    q.sync_to(&srv).await;
    assert_eq!(q.first_after_hello, Some("deltas"));
    // One confirming frame, then a handful of spans and single breadcrumbs, not 600 frames.
    assert!(
        q.delta_frames < 50,
        "{} frames for {crumbs} breadcrumbs",
        q.delta_frames
    );
    assert!(
        q.updates_seen.len() <= q.delta_frames as usize * 5,
        "a span carries the latest value of each of the 5 keys at most: {} updates",
        q.updates_seen.len()
    );
    assert_eq!(q.digest.combined(), expected_digest(&store).0);
    let spans = srv.metrics.encoded_count(FrameKind::span);
    // A second client at the same position reuses every span: no new encodes.
    let mut r = Peer::connect(srv.addr).await;
    r.hello(Peer::offer("behind-2", None)).await.unwrap();
    r.sync_to(&srv).await;
    assert_eq!(srv.metrics.encoded_count(FrameKind::span), spans);
    srv.shutdown().await;
}

/// A manifest edited, then removed, reaches a connected client. How fast is a benchmark's
/// question (the directory is polled every 100 ms here), not this test's.
#[tokio::test]
async fn manifest_edits_and_removals_reach_a_connected_client() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("sets.yaml");
    std::fs::write(&file, "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata: {name: office}\nspec: {nets: [192.0.2.0/24]}\n").unwrap();
    let store = Embedded::new();
    let mut src = DirSource::new(dir.path(), store.clone());
    src.scan();
    tokio::spawn(src.run(Duration::from_millis(100)));
    let srv = typha_server::server::start(Config::for_tests(), Arc::new(store.clone()))
        .await
        .unwrap();
    let mut p = Peer::connect(srv.addr).await;
    p.hello(Peer::offer("n", None)).await.unwrap();
    p.sync_to(&srv).await;
    assert_eq!(p.state.len(), 1);

    std::fs::write(&file, "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata: {name: office}\nspec: {nets: [192.0.2.0/24, 198.51.100.0/24]}\n").unwrap();
    let before = p.updates_seen.len();
    p.until("the edit", |p| p.updates_seen.len() > before).await;
    assert_eq!(p.state.len(), 1, "the edited set replaced the old one");
    std::fs::remove_file(&file).unwrap();
    p.until("the removal", |p| p.state.is_empty()).await;
    srv.shutdown().await;
}

/// Kinds added after protocol version 1, through a real datastore's conversion: the sample
/// cluster's BGPFilter, a StagedKubernetesNetworkPolicy and a KubernetesClusterNetworkPolicy
/// reach a client that offered `OPAQUE_KINDS`; a version 1 client (the test peer refuses any later key sent to it) gets
/// the rest, with digests over its keys alone, while they are created, changed and deleted.
#[tokio::test]
async fn a_version_1_client_gets_the_cluster_without_kinds_it_does_not_know() {
    use typha_protocol::digest::StateDigest;
    use typha_protocol::model::{EncodedValue, KeyPath};
    use typha_server::calico::v3::Resource;

    let (srv, store) = server(Config::for_tests()).await;
    store.bulk_load(cluster(3, 2));
    let staged = |action: &str| {
        Resource::from_json(serde_json::json!({
            "apiVersion": "projectcalico.org/v3", "kind": "StagedKubernetesNetworkPolicy",
            "metadata": {"name": "db", "namespace": "default"},
            "spec": {"stagedAction": action, "podSelector": {"matchLabels": {"app": "db"}},
                     "ingress": [{"from": [{"podSelector": {}}]}]}
        }))
        .unwrap()
    };
    store.put(staged("Set"));
    // A Kubernetes ClusterNetworkPolicy as the Kubernetes backend converts one (that backend
    // alone reads them; the embedded store carries the converted form here).
    let cluster_policy = Resource::from_json(serde_json::json!({
        "apiVersion": "projectcalico.org/v3", "kind": "KubernetesClusterNetworkPolicy",
        "metadata": {"name": "guard"},
        "spec": {"tier": "kube-admin", "order": 10.0, "namespaceSelector": "all()",
                 "selector": "projectcalico.org/orchestrator == 'k8s'", "types": ["Ingress"],
                 "ingress": [{"action": "Pass", "destination": {"ports": ["web"]}}]}
    }))
    .unwrap();
    store.put(cluster_policy.clone());
    settle(&srv, &store).await;
    // What each kind of client must hold: everything, or the version 1 kinds alone.
    let views = |store: &Embedded| {
        let (mut all, mut v1) = (StateDigest::new(), StateDigest::new());
        let (mut n_all, mut n_v1) = (0, 0);
        for r in store.resources() {
            for (k, v) in typha_server::calico::convert::convert(&r).unwrap() {
                let (k, v) = (KeyPath::from(&k), EncodedValue::encode(&v));
                all.insert(k.as_str(), v.as_bytes());
                n_all += 1;
                if k.in_v1() {
                    v1.insert(k.as_str(), v.as_bytes());
                    n_v1 += 1;
                }
            }
        }
        ((all.combined(), n_all), (v1.combined(), n_v1))
    };
    let later = |p: &Peer| p.state.keys().filter(|k| !k.in_v1()).count();
    let mut new = Peer::connect(srv.addr).await;
    new.hello(Peer::offer("new", None)).await.unwrap();
    let mut old = Peer::connect(srv.addr).await;
    old.hello(Peer::offer_v1("old", None)).await.unwrap();
    for round in 0..3 {
        new.sync_to(&srv).await;
        old.sync_to(&srv).await;
        let ((all, n_all), (v1, n_v1)) = views(&store);
        assert_eq!(
            (new.digest.combined(), new.state.len()),
            (all, n_all),
            "{round}"
        );
        assert_eq!(
            (old.digest.combined(), old.state.len()),
            (v1, n_v1),
            "{round}"
        );
        assert_eq!(later(&old), 0);
        match round {
            0 => {
                assert_eq!(
                    later(&new),
                    3,
                    "the BGPFilter, the staged policy and the cluster policy"
                );
                store.put(staged("Learn"));
            }
            1 => {
                assert_eq!(later(&new), 3);
                store.put(staged("Delete"));
                store.delete(&cluster_policy.id());
                for r in store.resources() {
                    if r.kind() == typha_server::calico::v3::Kind::BgpFilter {
                        store.delete(&r.id());
                    }
                }
            }
            _ => assert_eq!(later(&new), 0),
        }
        settle(&srv, &store).await;
    }
    assert!(old.goodbye.is_none() && new.goodbye.is_none());
    srv.shutdown().await;
}
