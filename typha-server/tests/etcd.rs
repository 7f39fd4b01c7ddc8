//! The etcd backend against a real etcd (Debian's `etcd-server`), beyond what the conformance
//! suite checks for every backend: listings that stay consistent across pages while etcd is
//! written to, watches from compacted revisions and progress notifications, values that are
//! not resources, IPAM data where Calico's IPAM writes it, TLS with client certificates, an
//! etcd that hangs, and the `typha-server` program waiting for an etcd that is down when it
//! starts.

// In tests a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::etcd::{EtcdServer, pki_file};
use common::{Peer, digest_of, metric};
use etcd_client::GetOptions;
use futures_util::StreamExt;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use typha_protocol::model::{Revision, SyncStatus};
use typha_server::calico::v3::{Kind, Resource, ResourceId};
use typha_server::config::Config;
use typha_server::datastore::etcd::{Etcd, EtcdTls, PAGE_SIZE, PREFIX};
use typha_server::datastore::{Datastore, DatastoreError, WatchEvent};
use typha_server::server::start;

fn network_set(i: usize, g: u64) -> Resource {
    Resource::from_json(json!({
        "apiVersion": "projectcalico.org/v3", "kind": "GlobalNetworkSet",
        "metadata": {"name": format!("set-{i:05}"), "labels": {"gen": g.to_string()}},
        "spec": {"nets": [format!("10.{}.{}.0/24", i / 256 % 256, i % 256)]},
    }))
    .unwrap()
}

async fn backend(etcd: &EtcdServer) -> Etcd {
    Etcd::connect(&[etcd.endpoint()], etcd.client_tls().as_ref())
        .await
        .unwrap()
}

#[tokio::test]
async fn listing_pages_are_pinned_to_one_revision_while_etcd_is_written() {
    let etcd = EtcdServer::start().await;
    let mut c = etcd.client().await;
    let n = 2 * PAGE_SIZE as usize + 100;
    common::etcd::put_many(
        &mut c,
        &(0..n).map(|i| network_set(i, 0)).collect::<Vec<_>>(),
    )
    .await;
    // Small pages, so that writes certainly land between them.
    let ds = backend(&etcd).await.with_page_size(25);
    assert_eq!(
        backend(&etcd).await.list().await.unwrap().items.len(),
        n,
        "{PAGE_SIZE}-key pages"
    );

    // A writer rewrites resources all over the keyspace while we list.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = tokio::spawn({
        let stop = stop.clone();
        let mut c = etcd.client().await;
        async move {
            let mut g = 1u64;
            while !stop.load(Ordering::Relaxed) {
                common::etcd::put(&mut c, &network_set((g as usize * 7919) % n, g)).await;
                g += 1;
            }
        }
    });
    let mut raced = 0;
    for _ in 0..50 {
        let listing = ds.list().await.unwrap();
        let after = common::etcd::revision(&mut c).await;
        // What etcd held at the listing's revision, in one unpaged read.
        let at = c
            .get(
                PREFIX,
                Some(
                    GetOptions::new()
                        .with_prefix()
                        .with_revision(listing.revision.0 as i64),
                ),
            )
            .await
            .unwrap();
        let want: BTreeMap<String, String> = at
            .kvs()
            .iter()
            .map(|kv| {
                let r = Resource::from_json_str(kv.value_str().unwrap()).unwrap();
                (r.metadata.name.clone(), kv.mod_revision().to_string())
            })
            .collect();
        let got: BTreeMap<String, String> = listing
            .items
            .iter()
            .map(|i| {
                let r = i.as_ref().unwrap();
                (
                    r.metadata.name.clone(),
                    r.metadata.resource_version.clone().unwrap(),
                )
            })
            .collect();
        assert_eq!(got.len(), n);
        assert_eq!(got, want, "the listing is etcd's state at its revision");
        if after > listing.revision.0 as i64 {
            raced += 1;
            if raced >= 3 {
                break;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    writer.await.unwrap();
    assert!(raced >= 3, "writes landed during only {raced} listings");
}

#[tokio::test]
async fn watches_report_compaction_as_too_old_and_send_progress() {
    let etcd = EtcdServer::start().await;
    let mut c = etcd.client().await;
    let first = common::etcd::put(&mut c, &network_set(1, 1)).await;
    common::etcd::put(&mut c, &network_set(1, 2)).await;
    let compacted = common::etcd::compact(&mut c).await;
    let ds = backend(&etcd).await;

    let too_old = match ds.watch(Revision(first as u64)).await {
        Err(e) => e,
        Ok(mut s) => tokio::time::timeout(common::WAIT, s.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap_err(),
    };
    assert!(
        matches!(
            too_old,
            DatastoreError::TooOld { requested, oldest }
                if requested == Revision(first as u64) && oldest == Revision(compacted as u64)
        ),
        "{too_old:?}"
    );

    // From the compaction revision on, changes arrive, then progress at the latest revision
    // (this etcd notifies every second).
    let mut s = ds.watch(Revision(compacted as u64 + 1)).await.unwrap();
    let rev = common::etcd::delete(&mut c, &network_set(1, 0).id()).await;
    let mut next = async || {
        tokio::time::timeout(common::WAIT, s.next())
            .await
            .expect("an event")
            .expect("the watch goes on")
            .expect("not an error")
    };
    // Progress notified before the deletion (the timer is etcd's) is from before it.
    let ev = loop {
        match next().await {
            WatchEvent::Progress(r) => assert!(r < Revision(rev as u64)),
            ev => break ev,
        }
    };
    assert_eq!(
        ev,
        WatchEvent::Delete {
            revision: Revision(rev as u64),
            id: ResourceId::global(Kind::GlobalNetworkSet, "set-00001"),
        }
    );
    assert_eq!(next().await, WatchEvent::Progress(Revision(rev as u64)));
}

#[tokio::test]
async fn values_that_are_not_resources_are_counted_and_the_rest_is_served() {
    let etcd = EtcdServer::start().await;
    let mut c = etcd.client().await;
    let good: Vec<Resource> = (0..5).map(|i| network_set(i, 0)).collect();
    for r in &good {
        common::etcd::put(&mut c, r).await;
    }
    let valid = network_set(9, 0).to_json().to_string();
    // Not JSON; a namespaced kind without a namespace; a value naming another resource.
    common::etcd::put_raw(&mut c, "globalnetworksets/broken", b"{not json").await;
    common::etcd::put_raw(&mut c, "networkpolicies/no-namespace", valid.as_bytes()).await;
    common::etcd::put_raw(&mut c, "globalnetworksets/impostor", valid.as_bytes()).await;
    // A kind this server does not serve: skipped, not invalid.
    common::etcd::put_raw(&mut c, "ipreservations/r-1", b"{}").await;
    // Staged policies: an action that is not text and a selector that does not parse are
    // invalid; a staged deletion is valid and sends nothing.
    let staged = |kind: &str, metadata: serde_json::Value, spec: serde_json::Value| {
        serde_json::json!({"apiVersion": "projectcalico.org/v3", "kind": kind,
                           "metadata": metadata, "spec": spec})
        .to_string()
    };
    let bad_action = staged(
        "StagedNetworkPolicy",
        serde_json::json!({"name": "p", "namespace": "ns"}),
        serde_json::json!({"stagedAction": 7, "selector": "all()"}),
    );
    let bad_selector = staged(
        "StagedGlobalNetworkPolicy",
        serde_json::json!({"name": "g"}),
        serde_json::json!({"stagedAction": "Set", "selector": "a =="}),
    );
    let deletion = staged(
        "StagedNetworkPolicy",
        serde_json::json!({"name": "d", "namespace": "ns"}),
        serde_json::json!({"stagedAction": "Delete", "selector": "a =="}),
    );
    common::etcd::put_raw(&mut c, "stagednetworkpolicies/ns/p", bad_action.as_bytes()).await;
    common::etcd::put_raw(
        &mut c,
        "stagedglobalnetworkpolicies/g",
        bad_selector.as_bytes(),
    )
    .await;
    common::etcd::put_raw(&mut c, "stagednetworkpolicies/ns/d", deletion.as_bytes()).await;

    let ds = Arc::new(backend(&etcd).await);
    let srv = start(Config::for_tests(), ds).await.unwrap();
    let mut p = Peer::connect(srv.addr).await;
    p.hello(Peer::offer("node-a", None)).await.unwrap();
    let want = digest_of(&good);
    p.until("the valid resources", |p| {
        p.digest.combined() == want.0 && p.status == Some(SyncStatus::InSync)
    })
    .await;
    assert_eq!(metric(&srv, "typha_updates_invalid_total"), 5.0);

    // A resource overwritten with garbage is gone (and counted); fixed, it is back.
    let victim = good[0].clone();
    common::etcd::put_raw(&mut c, "globalnetworksets/set-00000", b"\x00garbage").await;
    let without = digest_of(&good[1..]);
    p.until("the broken resource to go", |p| {
        p.digest.combined() == without.0
    })
    .await;
    assert_eq!(metric(&srv, "typha_updates_invalid_total"), 6.0);
    common::etcd::put(&mut c, &victim).await;
    p.until("the fixed resource to return", |p| {
        p.digest.combined() == want.0
    })
    .await;
    assert_eq!(p.state.len(), want.1);
    assert!(p.goodbye.is_none());
    srv.shutdown().await;
}

/// Issue 38: a threat-feed GlobalNetworkSet with one bad CIDR among good ones, written to etcd
/// as `kubectl apply` of the CRD or a direct write would leave it, reaches a Calico client
/// with its good CIDRs (Calico's syncers skip the bad entry), and is not counted invalid. A
/// policy that names its protocol by number reaches it with the number, as Calico sends it.
#[tokio::test]
async fn a_network_set_with_one_bad_cidr_reaches_calico_clients_with_the_good_ones() {
    let etcd = EtcdServer::start().await;
    let mut c = etcd.client().await;
    let set = json!({"apiVersion": "projectcalico.org/v3", "kind": "GlobalNetworkSet",
        "metadata": {"name": "threat-feed", "labels": {"feed": "bad-actors"}},
        "spec": {"nets": ["10.1.0.0/16", "not-a-cidr", "192.168.5.0/24"]}});
    common::etcd::put_raw(
        &mut c,
        "globalnetworksets/threat-feed",
        set.to_string().as_bytes(),
    )
    .await;
    let policy = json!({"apiVersion": "projectcalico.org/v3", "kind": "GlobalNetworkPolicy",
        "metadata": {"name": "deny-feed"},
        "spec": {"selector": "all()", "types": ["Egress"], "egress": [{"action": "Deny",
            "protocol": 6, "destination": {"selector": "feed == 'bad-actors'",
            "nets": ["203.0.113.0/24", "also-bad"]}}]}});
    common::etcd::put_raw(
        &mut c,
        "globalnetworkpolicies/deny-feed",
        policy.to_string().as_bytes(),
    )
    .await;

    let ds = Arc::new(backend(&etcd).await);
    let srv = start(Config::for_tests(), ds).await.unwrap();
    let tcp = tokio::net::TcpStream::connect(srv.addr).await.unwrap();
    let hello = typha_client::calico::CalicoHello::calico_node("node-a", "felix");
    let state = typha_client::calico::run(
        tcp,
        &hello,
        typha_client::calico::Until::InSync,
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    let value = |key: &str| -> serde_json::Value {
        let kv = state.kvs.get(key).unwrap_or_else(|| panic!("no {key}"));
        serde_json::from_slice(&kv.value).unwrap()
    };
    assert_eq!(
        value("/calico/v1/netset/threat-feed"),
        json!({"nets": ["10.1.0.0/16", "192.168.5.0/24"], "labels": {"feed": "bad-actors"}})
    );
    let rule = &value("/calico/v1/policy/GlobalNetworkPolicy//deny-feed")["outbound_rules"][0];
    assert_eq!(rule["protocol"], json!(6));
    assert_eq!(rule["dst_nets"], json!(["203.0.113.0/24"]));
    assert_eq!(metric(&srv, "typha_updates_invalid_total"), 0.0);
    assert_eq!(
        metric(
            &srv,
            r#"typha_connections_dropped_total{reason="fell_behind"}"#
        ),
        0.0
    );
    srv.shutdown().await;
}

/// Calico's IPAM in etcd mode: a block, a node's affinity to it, the pod's handle and the IPAM
/// settings, at the keys and in the JSON Calico writes them (libcalico-go's model:
/// `AllocationBlock`, `BlockAffinity`, `IPAMHandle`, `IPAMConfig`), written with a plain etcd
/// client.
const BLOCK_KEY: &str = "/calico/ipam/v2/assignment/ipv4/block/10.0.1.0-26";
const AFFINITY_KEY: &str = "/calico/ipam/v2/host/node-1/ipv4/block/10.0.1.0-26";

/// The block with the first `n` addresses allocated, as Calico's IPAM writes it.
fn calico_block(n: usize) -> String {
    let allocations: Vec<Option<usize>> = (0..64).map(|i| (i < n).then_some(i)).collect();
    json!({
        "cidr": "10.0.1.0/26",
        "affinity": "host:node-1",
        "allocations": allocations,
        "unallocated": (n..64).collect::<Vec<_>>(),
        "attributes": (0..n).map(|i| json!({
            "handle_id": format!("k8s-pod-network.{i:08x}"),
            "secondary": {"namespace": "prod", "node": "node-1", "pod": format!("web-{i}")}
        })).collect::<Vec<_>>(),
        "sequenceNumber": n,
        "sequenceNumberForAllocation": {},
        "deleted": false,
    })
    .to_string()
}

#[tokio::test]
async fn ipam_blocks_and_affinities_where_calico_writes_them_reach_clients() {
    use typha_protocol::model::{
        AllocationAttribute, AllocationTable, Block, BlockKey, EncodedValue, Key, KeyPath, Value,
    };

    let etcd = EtcdServer::start().await;
    let mut c = etcd.client().await;
    c.put(BLOCK_KEY, calico_block(3), None).await.unwrap();
    c.put(
        AFFINITY_KEY,
        r#"{"state":"confirmed","deleted":false}"#,
        None,
    )
    .await
    .unwrap();
    c.put(
        "/calico/ipam/v2/handle/k8s-pod-network.00000000",
        r#"{"block":{"10.0.1.0/26":1},"deleted":false}"#,
        None,
    )
    .await
    .unwrap();
    c.put(
        "/calico/ipam/v2/config",
        r#"{"strict_affinity":false,"auto_allocate_blocks":true}"#,
        None,
    )
    .await
    .unwrap();

    let srv = start(Config::for_tests(), Arc::new(backend(&etcd).await))
        .await
        .unwrap();
    let mut p = Peer::connect(srv.addr).await;
    p.hello(Peer::offer("node-a", None)).await.unwrap();

    // The felix syncer's block KV, at Calico's key.
    let block_path = KeyPath::new(BLOCK_KEY).unwrap();
    let cidr = "10.0.1.0/26".parse().unwrap();
    assert_eq!(KeyPath::from(&Key::Block(BlockKey { cidr })), block_path);
    // With its whole table: Calico's clients get the block as Calico stored it.
    let block = |allocated: u32| {
        let n = allocated as usize;
        EncodedValue::encode(&Value::Block(Block {
            cidr,
            affinity: Some("host:node-1".into()),
            allocated,
            deleted: false,
            table: AllocationTable {
                affinity_claim_time: None,
                allocations: Some((0..64).map(|i| (i < allocated).then_some(i)).collect()),
                unallocated: Some((allocated..64).collect()),
                attributes: Some(
                    (0..n)
                        .map(|i| AllocationAttribute {
                            handle_id: Some(format!("k8s-pod-network.{i:08x}")),
                            secondary: [
                                ("namespace".to_owned(), "prod".to_owned()),
                                ("node".to_owned(), "node-1".to_owned()),
                                ("pod".to_owned(), format!("web-{i}")),
                            ]
                            .into(),
                            alternate: Default::default(),
                        })
                        .collect(),
                ),
                sequence_number: u64::from(allocated),
                sequence_number_for_allocation: Some(Default::default()),
            },
        }))
    };
    // The affinity as the Kubernetes backend passes on the same affinity (its CRD).
    let affinity_crd = Resource::from_json(json!({
        "apiVersion": "crd.projectcalico.org/v1", "kind": "BlockAffinity",
        "metadata": {"name": "node-1-10-0-1-0-26"},
        "spec": {"state": "confirmed", "node": "node-1", "type": "host", "cidr": "10.0.1.0/26",
                 "deleted": "false"}}))
    .unwrap();
    let affinity: Vec<(KeyPath, EncodedValue)> =
        typha_server::calico::convert::convert(&affinity_crd)
            .unwrap()
            .iter()
            .map(|(k, v)| (KeyPath::from(k), EncodedValue::encode(v)))
            .collect();
    assert_eq!(affinity.len(), 1);
    let holds_affinity = |p: &Peer| affinity.iter().all(|(k, v)| p.state.get(k) == Some(v));

    p.until("the block and the affinity", |p| {
        p.state.get(&block_path) == Some(&block(3))
            && holds_affinity(p)
            && p.status == Some(SyncStatus::InSync)
    })
    .await;
    // Handles and IPAM settings are not for Felix, and not invalid either.
    assert_eq!(p.state.len(), 2, "{:?}", p.state.keys().collect::<Vec<_>>());
    assert_eq!(metric(&srv, "typha_updates_invalid_total"), 0.0);

    // Another pod gets an address: the block is rewritten, with its handle.
    c.put(BLOCK_KEY, calico_block(4), None).await.unwrap();
    c.put(
        "/calico/ipam/v2/handle/k8s-pod-network.00000003",
        r#"{"block":{"10.0.1.0/26":1},"deleted":false}"#,
        None,
    )
    .await
    .unwrap();
    p.until("the block's update", |p| {
        p.state.get(&block_path) == Some(&block(4))
    })
    .await;

    // The node lets the block go: Calico deletes the affinity, then the block.
    c.delete(AFFINITY_KEY, None).await.unwrap();
    p.until("the affinity's deletion", |p| {
        affinity.iter().all(|(k, _)| !p.state.contains_key(k))
    })
    .await;
    c.delete(BLOCK_KEY, None).await.unwrap();
    p.until("the block's deletion", |p| {
        !p.state.contains_key(&block_path)
    })
    .await;
    assert!(
        p.state.is_empty(),
        "{:?}",
        p.state.keys().collect::<Vec<_>>()
    );
    assert_eq!(metric(&srv, "typha_updates_invalid_total"), 0.0);
    srv.shutdown().await;
}

/// What a Calico client of `syncer` holds once in sync with `srv`: key → the KV.
async fn calico_state(
    srv: &typha_server::server::RunningServer,
    syncer: &str,
) -> BTreeMap<String, typha_client::calico::CalicoKv> {
    use typha_client::calico::{CalicoHello, Until, run};
    let tcp = tokio::net::TcpStream::connect(srv.addr).await.unwrap();
    let hello = CalicoHello::calico_node("node-1", syncer);
    let st = run(tcp, &hello, Until::InSync, Duration::from_secs(20))
        .await
        .unwrap();
    st.kvs
}

/// Calico's etcd driver gives each KV its key's own `mod_revision`, in a listing as in a watch
/// event, and leaves a v3 resource's `resourceVersion` empty; the metadata clientv3 stored
/// with the resource (uid, creation time, annotations) comes back as stored. So a Calico
/// client of ours sees what it would see from Calico's Typha on the same etcd.
#[tokio::test]
async fn calico_clients_get_each_keys_own_revision_and_the_stored_metadata() {
    let etcd = EtcdServer::start().await;
    let mut c = etcd.client().await;
    let peer_key = format!("{PREFIX}bgppeers/peer-a");
    let status_key = format!("{PREFIX}caliconodestatuses/status-1");
    let peer = c
        .put(
            peer_key.as_str(),
            r#"{"kind":"BGPPeer","apiVersion":"projectcalico.org/v3","metadata":{"name":"peer-a","uid":"6c1e1a2b-9d4e-4a55-8c86-2f0a7f1c3b11","creationTimestamp":"2025-01-02T03:04:05Z"},"spec":{"peerIP":"10.0.0.9","asNumber":64512}}"#,
            None,
        )
        .await
        .unwrap();
    let status_json = |period: u32| {
        format!(
            r#"{{"kind":"CalicoNodeStatus","apiVersion":"projectcalico.org/v3","metadata":{{"name":"status-1","uid":"0a0b0c0d-1e2f-4a3b-8c4d-5e6f7a8b9c0d","creationTimestamp":"2025-02-03T04:05:06Z","annotations":{{"team":"net"}}}},"spec":{{"node":"node-1","classes":["Agent"],"updatePeriodSeconds":{period}}}}}"#
        )
    };
    let status = c
        .put(status_key.as_str(), status_json(10), None)
        .await
        .unwrap();
    // A later write elsewhere: the listing's revision is past both keys'.
    c.put(
        format!("{PREFIX}globalnetworksets/other").as_str(),
        r#"{"kind":"GlobalNetworkSet","apiVersion":"projectcalico.org/v3","metadata":{"name":"other"},"spec":{"nets":["10.9.0.0/16"]}}"#,
        None,
    )
    .await
    .unwrap();
    let rev = |r: &etcd_client::PutResponse| r.header().unwrap().revision().to_string();
    let (peer_rev, status_rev) = (rev(&peer), rev(&status));

    let srv = start(Config::for_tests(), Arc::new(backend(&etcd).await))
        .await
        .unwrap();
    // Calico's key for a v3 resource is where etcd keeps it.
    let bgp = calico_state(&srv, "bgp").await;
    let got = &bgp[&peer_key];
    assert_eq!(
        (got.revision.as_str(), got.v3_resource_version.as_str()),
        (peer_rev.as_str(), ""),
        "a listed key carries its own mod_revision, not the listing's"
    );
    let v: serde_json::Value = serde_json::from_slice(&got.value).unwrap();
    assert_eq!(
        v["metadata"],
        json!({"name": "peer-a", "uid": "6c1e1a2b-9d4e-4a55-8c86-2f0a7f1c3b11",
               "creationTimestamp": "2025-01-02T03:04:05Z"})
    );

    let ns = calico_state(&srv, "node-status").await;
    let got = &ns[&status_key];
    assert_eq!(
        (got.revision.as_str(), got.v3_resource_version.as_str()),
        (status_rev.as_str(), "")
    );
    let v: serde_json::Value = serde_json::from_slice(&got.value).unwrap();
    assert_eq!(
        v["metadata"],
        json!({"name": "status-1", "uid": "0a0b0c0d-1e2f-4a3b-8c4d-5e6f7a8b9c0d",
               "creationTimestamp": "2025-02-03T04:05:06Z", "annotations": {"team": "net"}})
    );

    // Through the watch: the key's new mod_revision.
    let changed = c
        .put(status_key.as_str(), status_json(30), None)
        .await
        .unwrap();
    let changed_rev = rev(&changed);
    let want = changed_rev.clone();
    let mut ns = BTreeMap::new();
    for _ in 0..100 {
        ns = calico_state(&srv, "node-status").await;
        if ns[&status_key].revision == want {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let got = &ns[&status_key];
    assert_eq!(
        (got.revision.as_str(), got.v3_resource_version.as_str()),
        (changed_rev.as_str(), "")
    );
    assert!(
        std::str::from_utf8(&got.value)
            .unwrap()
            .contains(r#""updatePeriodSeconds":30"#)
    );
    assert_eq!(
        metric(
            &srv,
            r#"typha_connections_dropped_total{reason="fell_behind"}"#
        ),
        0.0
    );
    srv.shutdown().await;
}

#[tokio::test]
async fn tls_with_client_certificates() {
    let etcd = EtcdServer::start_tls().await;
    let mut c = etcd.client().await;
    let rs: Vec<Resource> = (0..10).map(|i| network_set(i, 0)).collect();
    for r in &rs {
        common::etcd::put(&mut c, r).await;
    }
    let ds = Arc::new(backend(&etcd).await);
    assert_eq!(ds.list().await.unwrap().items.len(), 10);
    let srv = start(Config::for_tests(), ds).await.unwrap();
    let mut p = Peer::connect(srv.addr).await;
    p.hello(Peer::offer("node-a", None)).await.unwrap();
    let want = digest_of(&rs);
    p.until("the resources over TLS", |p| p.digest.combined() == want.0)
        .await;
    common::etcd::put(&mut c, &network_set(10, 0)).await;
    let want = digest_of(rs.iter().chain([&network_set(10, 0)]));
    p.until("a change over TLS", |p| p.digest.combined() == want.0)
        .await;
    srv.shutdown().await;

    // etcd requires a client certificate: without one, nothing is read.
    let ca_only = EtcdTls {
        client: None,
        ..etcd.client_tls().unwrap()
    };
    let ds = Etcd::connect(&[etcd.endpoint()], Some(&ca_only))
        .await
        .unwrap();
    assert!(matches!(
        ds.list().await,
        Err(DatastoreError::Unavailable { .. })
    ));
    // Nor with a CA that did not sign etcd's certificate.
    let other = tempfile::tempdir().unwrap();
    typha_server::pki::write_bundle(other.path(), &["127.0.0.1"], "typha").unwrap();
    let wrong_ca = EtcdTls {
        ca_file: other.path().join("ca.crt"),
        ..etcd.client_tls().unwrap()
    };
    let ds = Etcd::connect(&[etcd.endpoint()], Some(&wrong_ca))
        .await
        .unwrap();
    assert!(matches!(
        ds.list().await,
        Err(DatastoreError::Unavailable { .. })
    ));
}

const BIN: &str = env!("CARGO_BIN_EXE_typha-server");

fn free_port() -> u16 {
    // Below the ephemeral range: never given to an outgoing connection meanwhile.
    typha_test_support::control_plane::free_port().expect("a free port")
}

/// GET `path` on the loopback; the status code.
async fn get_status(port: u16, path: &str) -> Option<u16> {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).await.ok()?;
    buf.split(' ').nth(1)?.parse().ok()
}

/// Kills the child when the test ends, however it ends.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn the_program_waits_for_an_etcd_that_is_down_at_start_over_tls() {
    let mut etcd = EtcdServer::stopped(true);
    let pki = etcd.pki_dir();
    let (port, health) = (free_port(), free_port());
    let _server = Killed(
        Command::new(BIN)
            .env("TYPHA_DATASTORETYPE", "etcdv3")
            .env("TYPHA_ETCDENDPOINTS", etcd.endpoint())
            .env("TYPHA_ETCDCAFILE", pki_file(&pki, "ca.crt"))
            .env("TYPHA_ETCDCERTFILE", pki_file(&pki, "client.crt"))
            .env("TYPHA_ETCDKEYFILE", pki_file(&pki, "client.key"))
            .env("TYPHA_SERVERHOST", "127.0.0.1")
            .env("TYPHA_SERVERPORT", port.to_string())
            .env("TYPHA_HEALTHHOST", "127.0.0.1")
            .env("TYPHA_HEALTHPORT", health.to_string())
            .env("TYPHA_PROMETHEUSMETRICSENABLED", "false")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    // Up, alive, not ready.
    common::eventually("the health listener", || {
        std::net::TcpStream::connect(("127.0.0.1", health)).is_ok()
    })
    .await;
    assert_eq!(get_status(health, "/liveness").await, Some(200));
    assert_eq!(get_status(health, "/readiness").await, Some(503));
    let mut p = Peer::connect(SocketAddr::from(([127, 0, 0, 1], port))).await;
    p.hello(Peer::offer("node-a", None)).await.unwrap();

    etcd.restart().await;
    let mut c = etcd.client().await;
    let rs: Vec<Resource> = (0..10).map(|i| network_set(i, 0)).collect();
    for r in &rs {
        common::etcd::put(&mut c, r).await;
    }
    let want = digest_of(&rs);
    p.until("etcd's content once it is up", |p| {
        p.digest.combined() == want.0 && p.status == Some(SyncStatus::InSync)
    })
    .await;
    assert_eq!(p.statuses.first(), Some(&SyncStatus::WaitForDatastore));
    let deadline = tokio::time::Instant::now() + common::WAIT;
    while get_status(health, "/readiness").await != Some(200) {
        assert!(tokio::time::Instant::now() < deadline, "never ready");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[test]
fn a_bad_etcd_file_is_a_configuration_error_naming_the_setting() {
    let out = Command::new(BIN)
        .env("TYPHA_DATASTORETYPE", "etcdv3")
        .env("TYPHA_ETCDENDPOINTS", "https://127.0.0.1:1")
        .env("TYPHA_ETCDCAFILE", "/nonexistent/ca.crt")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("TYPHA_ETCDCAFILE"), "{err}");
}

/// The slowest test here (about 15 s): it waits out the request deadline and the HTTP/2
/// keep-alive, which is the point.
#[tokio::test]
async fn a_hung_etcd_fails_requests_and_breaks_watches_instead_of_hanging() {
    let etcd = EtcdServer::start().await;
    let mut c = etcd.client().await;
    let rev = common::etcd::put(&mut c, &network_set(1, 0)).await;
    let ds = backend(&etcd).await;
    let mut w = ds.watch(Revision(rev as u64 + 1)).await.unwrap();
    etcd.freeze(true);
    let r = tokio::time::timeout(Duration::from_secs(30), ds.list())
        .await
        .expect("a listing from a hung etcd times out");
    assert!(
        matches!(r, Err(DatastoreError::Unavailable { .. })),
        "{r:?}"
    );
    loop {
        match tokio::time::timeout(Duration::from_secs(30), w.next())
            .await
            .expect("a watch on a hung etcd breaks")
        {
            Some(Ok(WatchEvent::Progress(_))) => {}
            Some(Err(DatastoreError::Unavailable { .. })) => break,
            other => panic!("{other:?}"),
        }
    }
    etcd.freeze(false);
    assert_eq!(ds.list().await.unwrap().items.len(), 1);
}

#[tokio::test]
async fn etcd_killed_and_restarted_in_the_middle_of_churn_ends_exact() {
    let mut etcd = EtcdServer::start().await;
    let mut c = etcd.client().await;
    common::etcd::put_many(
        &mut c,
        &(0..100).map(|i| network_set(i, 0)).collect::<Vec<_>>(),
    )
    .await;
    let srv = start(Config::for_tests(), Arc::new(backend(&etcd).await))
        .await
        .unwrap();
    let mut p = Peer::connect(srv.addr).await;
    p.hello(Peer::offer("node-a", None)).await.unwrap();
    p.sync_to(&srv).await;

    // A writer that keeps going through the outage, retrying each write until etcd takes it
    // (as an API server or calicoctl user would).
    let written = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let writer = {
        let (endpoint, written) = (etcd.endpoint(), written.clone());
        tokio::spawn(async move {
            let mut c: Option<etcd_client::Client> = None;
            for i in 0..400u64 {
                let r = network_set((i % 150) as usize, i + 1);
                loop {
                    if c.is_none() {
                        c = etcd_client::Client::connect([endpoint.as_str()], None)
                            .await
                            .ok();
                    }
                    let ok = match c.as_mut() {
                        Some(cl) => tokio::time::timeout(
                            Duration::from_secs(2),
                            cl.put(
                                typha_server::datastore::etcd::key_of(&r.id()),
                                serde_json::to_vec(&r.to_json()).unwrap(),
                                None,
                            ),
                        )
                        .await
                        .is_ok_and(|r| r.is_ok()),
                        None => false,
                    };
                    if ok {
                        break;
                    }
                    c = None;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                written.store(i + 1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };
    // Kill etcd while the writes are flowing, and bring it back on the same data.
    common::eventually("the churn to be under way", || {
        written.load(Ordering::Relaxed) >= 100
    })
    .await;
    etcd.kill();
    tokio::time::sleep(Duration::from_millis(500)).await;
    etcd.restart().await;
    writer.await.unwrap();
    assert_eq!(written.load(Ordering::Relaxed), 400);

    let mut c = etcd.client().await;
    let contents = common::etcd::resources(&mut c).await;
    let (want, n) = digest_of(&contents);
    p.until("etcd's content after the outage", |p| {
        p.digest.combined() == want && p.status == Some(SyncStatus::InSync)
    })
    .await;
    assert_eq!(p.state.len(), n);
    assert!(p.goodbye.is_none(), "the client was never dropped");
    srv.shutdown().await;
}
