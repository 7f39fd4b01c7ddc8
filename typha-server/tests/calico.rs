//! Calico's own Typha protocol on our port: the Go reference peer (`calico-peer client`, Go's
//! own gob, behaving as calico-node's syncclient) against a real typha-server over mutual TLS,
//! for each of the four syncer types, next to a client of our own protocol on the same port.
//! Its end state must equal, key for key, what libcalico translation of the server's cache gives
//! that syncer type: after the snapshot, and after churn that creates, changes and deletes.
//!
//! Needs `target/peers/bin/calico-peer` (`peers/build calico-peer`; `TYPHA_PEERS_DIR` names
//! another folder). Without it the tests fail, saying so.

// In tests a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::calico_raw::Raw;
use common::{Peer, cluster, eventually, server, tls_client};
use typha_protocol::calico::messages::Message;
use typha_server::calico::libcalico::{SyncerType, builtin_kvs, calico_kvs};
use typha_server::calico::v3::Resource;
use typha_server::config::Config;
use typha_server::datastore::embedded::Embedded;
use typha_server::metrics::DropReason;
use typha_server::pki::Ca;
use typha_server::server::RunningServer;
use typha_server::tls::TlsConfig;
use typha_test_support::control_plane::peer;

struct Pki {
    dir: tempfile::TempDir,
    ca: Ca,
    cfg: TlsConfig,
}

fn pki() -> Pki {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("test-ca").unwrap();
    let srv = ca
        .server("typha-server", &["localhost", "127.0.0.1"])
        .unwrap();
    let node = ca.client("typha-client", None).unwrap();
    let w = |name: &str, body: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, body).unwrap();
        p
    };
    w("node.crt", &node.cert_pem);
    w("node.key", &node.key_pem);
    let stranger = ca.client("someone-else", None).unwrap();
    w("stranger.crt", &stranger.cert_pem);
    w("stranger.key", &stranger.key_pem);
    let cfg = TlsConfig {
        cert_file: w("server.crt", &srv.cert_pem),
        key_file: w("server.key", &srv.key_pem),
        ca_file: w("ca.crt", &ca.cert_pem),
        client_cns: vec!["typha-client".into()],
        client_uri_sans: vec![],
    };
    Pki { dir, ca, cfg }
}

/// The Go peer as a Calico client of `syncer`; `extra` adds flags.
fn calico_peer(
    p: &Pki,
    srv: &RunningServer,
    syncer: SyncerType,
    out: &Path,
    extra: &[&str],
) -> Child {
    let bin = peer("calico-peer").expect("calico-peer: run peers/build calico-peer");
    let d = p.dir.path();
    Command::new(bin)
        .arg("client")
        .args(["--addr", &srv.addr.to_string()])
        .args(["--syncer", syncer.as_str()])
        .args(["--hostname", "node-0"])
        .arg("--ca")
        .arg(d.join("ca.crt"))
        .arg("--cert")
        .arg(d.join("node.crt"))
        .arg("--key")
        .arg(d.join("node.key"))
        .args(["--server-cn", "typha-server", "--quiet"])
        .arg("--out")
        .arg(out)
        .args(extra)
        .stdin(Stdio::null())
        .spawn()
        .unwrap()
}

async fn wait(mut c: Child) {
    let status = tokio::task::spawn_blocking(move || c.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "calico-peer: {status}");
}

/// What the peer ended with: key → (value, revision, v3 resource version).
type State = BTreeMap<String, (String, String, String)>;

fn read_state(path: &Path) -> (State, serde_json::Value) {
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let kvs = v["kvs"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, e)| {
            let s = |f: &str| e[f].as_str().unwrap_or_default().to_owned();
            (
                k.clone(),
                (s("value"), s("revision"), s("v3ResourceVersion")),
            )
        })
        .collect();
    (kvs, v["summary"].clone())
}

/// What libcalico translation of the server's cache gives `syncer`, with the revisions
/// Calico's etcd driver gives (the embedded store's are etcd-like): each KV's own object's,
/// and no v3 resource version.
fn expected(srv: &RunningServer, syncer: SyncerType) -> State {
    let map = srv.cache.latest().map().unwrap();
    let mut out = State::new();
    for (k, kv) in map.iter() {
        let key = k.key();
        let value = kv.value.encoded().decode_for(&key).unwrap();
        for c in calico_kvs(&key, &value) {
            if !c.syncers.contains(syncer) {
                continue;
            }
            let rev = kv.object_revision.to_string();
            let value = String::from_utf8(c.value.unwrap().to_vec()).unwrap();
            out.insert(c.key.to_string(), (value, rev, String::new()));
        }
    }
    // What Calico's drivers always provide, at revision 1.
    for c in builtin_kvs(syncer) {
        let value = String::from_utf8(c.value.unwrap().to_vec()).unwrap();
        out.insert(c.key.to_string(), (value, "1".into(), String::new()));
    }
    out
}

fn assert_same(got: &State, want: &State, what: &str) {
    for (k, v) in want {
        assert_eq!(got.get(k), Some(v), "{what}: key {k}");
    }
    for k in got.keys() {
        assert!(want.contains_key(k), "{what}: extra key {k}");
    }
}

async fn tls_server(p: &Pki) -> (RunningServer, Embedded) {
    let mut cfg = Config::for_tests();
    cfg.tls = Some(p.cfg.clone());
    let (srv, store) = server(cfg).await;
    store.bulk_load(cluster(4, 5));
    loaded(&srv, &store).await;
    (srv, store)
}

/// Waits until the cache holds all of `store` (a bulk load may span several breadcrumbs).
async fn loaded(srv: &RunningServer, store: &Embedded) {
    let want = common::expected_digest(store).0;
    eventually("the cache to hold the store", || {
        srv.cache.latest().digest == want
    })
    .await;
}

fn res(v: serde_json::Value) -> Resource {
    Resource::from_json(v).unwrap()
}

/// Creates, changes and deletes something each syncer type receives.
fn churn(store: &Embedded) {
    let spec = typha_test_support::sample::Spec {
        nodes: 4,
        pods_per_node: 5,
        ..Default::default()
    };
    // Change: pods (felix), the pool (felix, bgp, tunnel-ip-allocation), a node's address.
    for g in 1..=3u64 {
        store.put(spec.workload_endpoint(g as usize, g as usize, 100 + g));
    }
    store.put(res(serde_json::json!({"apiVersion": "projectcalico.org/v3", "kind": "IPPool",
        "metadata": {"name": "default-ipv4-ippool"},
        "spec": {"cidr": "10.128.0.0/9", "vxlanMode": "Always", "natOutgoing": false, "blockSize": 24}})));
    store.put(res(
        serde_json::json!({"apiVersion": "projectcalico.org/v3", "kind": "Node",
        "metadata": {"name": typha_test_support::sample::node_name(1)},
        "spec": {"bgp": {"ipv4Address": "10.99.0.1/16"}}}),
    ));
    // Create: a node and a pool.
    store.put(res(
        serde_json::json!({"apiVersion": "projectcalico.org/v3", "kind": "Node",
        "metadata": {"name": "new-node"}, "spec": {"bgp": {"ipv4Address": "10.98.0.1/16"}}}),
    ));
    store.put(res(
        serde_json::json!({"apiVersion": "projectcalico.org/v3", "kind": "IPPool",
        "metadata": {"name": "extra"}, "spec": {"cidr": "10.64.0.0/16", "blockSize": 26}}),
    ));
    // BGP (felix, bgp) and node status (node-status): a peer changed, one created, one
    // deleted; the BGP configuration and the status request changed.
    store.put(res(
        serde_json::json!({"apiVersion": "projectcalico.org/v3", "kind": "BGPPeer",
        "metadata": {"name": "rack-0-tor"},
        "spec": {"nodeSelector": "rack == 'r0'", "peerIP": "10.255.0.2", "asNumber": 65100}}),
    ));
    store.put(res(
        serde_json::json!({"apiVersion": "projectcalico.org/v3", "kind": "BGPPeer",
        "metadata": {"name": "rr"}, "spec": {"peerSelector": "has(rr)", "nodeSelector": "all()"}}),
    ));
    store.delete(
        &res(
            serde_json::json!({"apiVersion": "projectcalico.org/v3", "kind": "BGPPeer",
        "metadata": {"name": "rack-2-tor"}, "spec": {}}),
        )
        .id(),
    );
    // BGPFilters (bgp only): the sample's changed, one with every field created, one created
    // and deleted again.
    store.put(res(serde_json::json!({"apiVersion": "projectcalico.org/v3", "kind": "BGPFilter",
        "metadata": {"name": "export-pods-only"},
        "spec": {"exportV4": [{"cidr": "10.128.0.0/9", "matchOperator": "In", "action": "Reject"}]}})));
    store.put(res(serde_json::json!({"apiVersion": "projectcalico.org/v3", "kind": "BGPFilter",
        "metadata": {"name": "every-field"},
        "spec": {"exportV4": [{"cidr": "10.0.0.0/8", "prefixLength": {"min": 16, "max": 24},
                               "source": "RemotePeers", "interface": "eth*", "matchOperator": "In",
                               "peerType": "eBGP", "communities": {"values": ["64512:100"]},
                               "asPathPrefix": [64512], "priority": 100, "action": "Accept",
                               "operations": [{"addCommunity": {"value": "64512:200"}},
                                              {"prependASPath": {"prefix": [65000]}},
                                              {"setPriority": {"value": 10}}]}],
                 "importV6": [{"cidr": "fd00::/8", "matchOperator": "NotIn", "action": "Reject"}]}})));
    let gone = res(
        serde_json::json!({"apiVersion": "projectcalico.org/v3", "kind": "BGPFilter",
        "metadata": {"name": "short-lived"}, "spec": {"importV4": [{"action": "Reject"}]}}),
    );
    store.put(gone.clone());
    store.delete(&gone.id());
    // LiveMigrations (felix only): KubeVirt's form with the metadata Felix reads, and
    // OpenStack's created and deleted again.
    store.put(res(serde_json::json!({"apiVersion": "projectcalico.org/v3", "kind": "LiveMigration",
        "metadata": {"name": "mig-1", "namespace": "vms", "uid": "3b1f0c2e-uid",
                     "creationTimestamp": "2026-11-24T23:45:24Z",
                     "labels": {"kubevirt.io/vmi-name": "vm12"}, "annotations": {"a": "b"}},
        "spec": {"source": {"workload": {"orchestratorID": "k8s", "workloadID": "vms/virt-launcher-vm12-x"}},
                 "target": {"selector": "kubevirt.io/migrationJobUID == '3b1f0c2e-uid'"}}})));
    let gone = res(
        serde_json::json!({"apiVersion": "projectcalico.org/v3", "kind": "LiveMigration",
        "metadata": {"name": "port-1", "namespace": "openstack"},
        "spec": {"target": {"workloadEndpoint": {"hostname": "h2", "orchestratorID": "openstack",
                                                 "workloadID": "openstack/vm1", "endpointID": "port-1"}}}}),
    );
    store.put(gone.clone());
    store.delete(&gone.id());
    store.put(res(serde_json::json!({"apiVersion": "projectcalico.org/v3", "kind": "BGPConfiguration",
        "metadata": {"name": "default"}, "spec": {"nodeToNodeMeshEnabled": true, "asNumber": "1.10"}})));
    store.put(res(serde_json::json!({"apiVersion": "projectcalico.org/v3", "kind": "CalicoNodeStatus",
        "metadata": {"name": format!("{}-status", typha_test_support::sample::node_name(0))},
        "spec": {"node": typha_test_support::sample::node_name(0), "classes": ["BGP"], "updatePeriodSeconds": 5}})));
    // Delete: a pod, a node, the global network set.
    store.delete(&spec.workload_endpoint(0, 0, 0).id());
    let node2 = res(
        serde_json::json!({"apiVersion": "projectcalico.org/v3", "kind": "Node",
        "metadata": {"name": typha_test_support::sample::node_name(2)}, "spec": {}}),
    );
    store.delete(&node2.id());
    let gns = res(
        serde_json::json!({"apiVersion": "projectcalico.org/v3", "kind": "GlobalNetworkSet",
        "metadata": {"name": "blocked-ranges"}, "spec": {}}),
    );
    store.delete(&gns.id());
}

fn filter_key(name: &str) -> String {
    format!("/calico/resources/v3/projectcalico.org/bgpfilters/{name}")
}

/// The bgp syncer type holds exactly these BGPFilters; the others none (Calico's felix syncer
/// does not watch them).
fn assert_filters(got: &State, syncer: SyncerType, names: &[&str]) {
    let filters: Vec<&str> = got
        .keys()
        .filter(|k| k.contains("/bgpfilters/"))
        .map(String::as_str)
        .collect();
    let want: Vec<String> = match syncer {
        SyncerType::Bgp => names.iter().map(|n| filter_key(n)).collect(),
        _ => Vec::new(),
    };
    assert_eq!(filters, want, "{syncer}: BGPFilters");
}

fn out_file(p: &Pki, name: &str) -> PathBuf {
    p.dir.path().join(format!("{name}.json"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_syncer_type_reaches_in_sync_with_the_translated_cache() {
    let p = pki();
    let (srv, _store) = tls_server(&p).await;
    for syncer in SyncerType::ALL {
        for extra in [
            &[][..],
            &["--no-compression"][..],
            &["--no-decoder-restart"][..],
        ] {
            let out = out_file(&p, syncer.as_str());
            let mut args = vec!["--until-in-sync", "--duration", "20s"];
            args.extend_from_slice(extra);
            wait(calico_peer(&p, &srv, syncer, &out, &args)).await;
            let (got, summary) = read_state(&out);
            assert_eq!(summary["inSync"], true, "{syncer} {extra:?}: {summary}");
            assert_eq!(summary["serverHello"]["syncerType"], syncer.as_str());
            let snappy = extra.is_empty();
            assert_eq!(
                summary["decoderRestarted"], snappy,
                "{syncer} {extra:?}: {summary}"
            );
            assert_same(
                &got,
                &expected(&srv, syncer),
                &format!("{syncer} {extra:?}"),
            );
            assert!(
                !got.is_empty(),
                "{syncer}: the sample cluster has keys for it"
            );
            assert_filters(&got, syncer, &["export-pods-only"]);
        }
    }
    srv.shutdown().await;
}

/// Staged policies reach a felix client of Calico's protocol as Calico v3.32's felix syncer
/// sends them: at `model.PolicyKey`'s path for the staged kind (the namespace empty for the
/// cluster-wide kind), the value a `model.Policy` with `staged_action`; a staged deletion is
/// not sent; a change of action and a staged deletion of a policy sent before arrive as an
/// update and a deletion. Expected keys and values written by hand.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn staged_policies_reach_a_felix_client_as_calico_sends_them() {
    let p = pki();
    let (srv, store) = tls_server(&p).await;
    let staged = |kind: &str, name: &str, spec: serde_json::Value| {
        let mut metadata = serde_json::json!({"name": name});
        if kind == "StagedNetworkPolicy" {
            metadata["namespace"] = "ns-a".into();
        }
        res(
            serde_json::json!({"apiVersion": "projectcalico.org/v3", "kind": kind,
                               "metadata": metadata, "spec": spec}),
        )
    };
    let snp = |action: &str| {
        staged(
            "StagedNetworkPolicy",
            "preview",
            serde_json::json!({"stagedAction": action, "order": 10, "selector": "app == 'web'",
                               "ingress": [{"action": "Allow"}]}),
        )
    };
    store.put(snp("Set"));
    store.put(staged(
        "StagedGlobalNetworkPolicy",
        "preview",
        serde_json::json!({"stagedAction": "Learn", "selector": "all()",
                           "egress": [{"action": "Deny"}]}),
    ));
    store.put(staged(
        "StagedNetworkPolicy",
        "gone",
        serde_json::json!({"stagedAction": "Delete"}),
    ));
    loaded(&srv, &store).await;
    let snp_key = "/calico/v1/policy/StagedNetworkPolicy/ns-a/preview";
    let sgnp_key = "/calico/v1/policy/StagedGlobalNetworkPolicy//preview";
    let snp_value = |action: &str| {
        format!(
            r#"{{"namespace":"ns-a","tier":"default","order":10,"inbound_rules":[{{"action":"allow"}}],"selector":"(app == 'web') \u0026\u0026 projectcalico.org/namespace == 'ns-a'","types":["ingress"],"staged_action":"{action}"}}"#
        )
    };
    let sgnp_value = r#"{"tier":"default","outbound_rules":[{"action":"deny"}],"selector":"all()","types":["egress"],"staged_action":"Learn"}"#;

    let out = out_file(&p, "staged-snapshot");
    wait(calico_peer(
        &p,
        &srv,
        SyncerType::Felix,
        &out,
        &["--until-in-sync", "--duration", "20s"],
    ))
    .await;
    let (got, summary) = read_state(&out);
    assert_eq!(summary["inSync"], true, "{summary}");
    assert_eq!(
        got.get(snp_key).map(|v| v.0.as_str()),
        Some(&*snp_value("Set"))
    );
    assert_eq!(got.get(sgnp_key).map(|v| v.0.as_str()), Some(sgnp_value));
    assert!(
        got.keys().all(|k| !k.contains("/gone")),
        "a staged deletion is not sent"
    );
    assert_same(&got, &expected(&srv, SyncerType::Felix), "staged snapshot");

    // Changes after the snapshot: the action changes, then the deletion of the other is staged.
    let out = out_file(&p, "staged-changes");
    let child = calico_peer(&p, &srv, SyncerType::Felix, &out, &["--duration", "6s"]);
    eventually("the Calico client streaming", || {
        srv.metrics.calico_connections(SyncerType::Felix).get() == 1
    })
    .await;
    store.put(snp("Ignore"));
    store.put(staged(
        "StagedGlobalNetworkPolicy",
        "preview",
        serde_json::json!({"stagedAction": "Delete"}),
    ));
    loaded(&srv, &store).await;
    wait(child).await;
    let (got, summary) = read_state(&out);
    assert_eq!(summary["inSync"], true, "{summary}");
    assert!(
        summary["deletionsReceived"].as_u64().unwrap() > 0,
        "{summary}"
    );
    assert_eq!(
        got.get(snp_key).map(|v| v.0.as_str()),
        Some(&*snp_value("Ignore"))
    );
    assert!(
        !got.contains_key(sgnp_key),
        "the staged deletion deleted the key"
    );
    assert_same(&got, &expected(&srv, SyncerType::Felix), "staged changes");
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn churn_reaches_every_syncer_type_next_to_our_own_client() {
    let p = pki();
    let (srv, store) = tls_server(&p).await;
    let clients: Vec<_> = SyncerType::ALL
        .into_iter()
        .map(|s| {
            let out = out_file(&p, s.as_str());
            (
                s,
                out.clone(),
                calico_peer(&p, &srv, s, &out, &["--duration", "6s"]),
            )
        })
        .collect();
    // Ours, on the same port at the same time.
    let cert = p.ca.client("typha-client", None).unwrap();
    let mut ours = Peer::connect_tls(srv.addr, tls_client(&p.ca.cert_pem, Some(&cert)))
        .await
        .unwrap();
    ours.hello(Peer::offer("ours", None)).await.unwrap();
    ours.sync_to(&srv).await;
    eventually("every Calico client streaming", || {
        srv.metrics.connections_streaming.total() == 5
    })
    .await;
    for s in SyncerType::ALL {
        assert_eq!(srv.metrics.calico_connections(s).get(), 1, "{s}");
    }
    churn(&store);
    loaded(&srv, &store).await;
    ours.sync_to(&srv).await;
    for (syncer, out, child) in clients {
        wait(child).await;
        let (got, summary) = read_state(&out);
        assert_eq!(summary["inSync"], true, "{syncer}: {summary}");
        if syncer != SyncerType::NodeStatus {
            // A deleted node reaches every syncer type but node-status, after its snapshot.
            assert!(
                summary["deletionsReceived"].as_u64().unwrap() > 0,
                "{syncer}: {summary}"
            );
        }
        assert_same(
            &got,
            &expected(&srv, syncer),
            &format!("{syncer} after churn"),
        );
        assert_filters(&got, syncer, &["every-field", "export-pods-only"]);
        // LiveMigrations: to felix only, with their uid (Felix gives it to the dataplane).
        let migration = "/calico/resources/v3/projectcalico.org/livemigrations/vms/mig-1";
        let migrations: Vec<&str> = got
            .keys()
            .filter(|k| k.contains("/livemigrations/"))
            .map(String::as_str)
            .collect();
        if syncer == SyncerType::Felix {
            assert_eq!(migrations, [migration], "{syncer}: LiveMigrations");
            let (v, _, _) = &got[migration];
            assert!(
                v.contains(r#""namespace":"vms","uid":"3b1f0c2e-uid","creationTimestamp":"2026-11-24T23:45:24Z""#),
                "{v}"
            );
        } else {
            assert!(migrations.is_empty(), "{syncer}: {migrations:?}");
        }
        if syncer == SyncerType::Bgp {
            let (v, _, _) = &got[&filter_key("every-field")];
            assert!(
                v.contains(r#""operations":[{"addCommunity":{"value":"64512:200"}},"#)
                    && v.contains(r#""importV6":[{"cidr":"fd00::/8","#),
                "{v}"
            );
        }
    }
    assert!(
        srv.metrics
            .encoded_count(typha_server::metrics::FrameKind::calico_delta)
            > 0
    );
    srv.shutdown().await;
}

/// Issue 38's fleet-wide resync: the datastore is quiet for longer than the history's age, then
/// one thing changes. Every Calico client (the Go peer for felix and bgp, our Rust client for
/// felix) must stay connected and be given the change; none is dropped for falling behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_after_a_quiet_spell_longer_than_the_history_reaches_every_calico_client() {
    let p = pki();
    let mut cfg = Config::for_tests();
    cfg.tls = Some(p.cfg.clone());
    cfg.cache.history_max_age = Duration::from_secs(1);
    let (srv, store) = server(cfg).await;
    store.bulk_load(cluster(4, 5));
    loaded(&srv, &store).await;
    // The Go peers live long enough for the quiet spell and the change (a generous deadline:
    // the test waits for events, not for this).
    let go: Vec<_> = [SyncerType::Felix, SyncerType::Bgp]
        .into_iter()
        .map(|s| {
            let out = out_file(&p, &format!("quiet-{s}"));
            let child = calico_peer(&p, &srv, s, &out, &["--duration", "20s"]);
            (s, out, child)
        })
        .collect();
    // Ours: every message after its snapshot into a channel, so the test sees the change
    // arrive.
    let cert = p.ca.client("typha-client", None).unwrap();
    let tls = tls_client(&p.ca.cert_pem, Some(&cert));
    let tcp = tokio::net::TcpStream::connect(srv.addr).await.unwrap();
    let conn = tokio_rustls::TlsConnector::from(tls)
        .connect(
            rustls_pki_types::ServerName::try_from("localhost").unwrap(),
            tcp,
        )
        .await
        .unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let ours = tokio::spawn(async move {
        use typha_client::calico::{CalicoHello, Event, Until, run_with};
        let hello = CalicoHello::calico_node("node-0", "felix");
        let mut synced = false;
        run_with(
            conn,
            &hello,
            Until::Closed,
            Duration::from_secs(60),
            |e| match e {
                Event::SyncStatus(typha_protocol::calico::messages::SyncStatus::InSync) => {
                    synced = true
                }
                Event::Kvs(kvs) if synced => {
                    let _ = tx.send(kvs);
                }
                _ => {}
            },
        )
        .await
    });
    eventually("every Calico client streaming", || {
        srv.metrics.connections_streaming.total() == 3
    })
    .await;
    // The quiet spell: past the history's age, and the writer's once-a-second trim has run.
    let quiet_from = srv.cache.latest().seq;
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        srv.cache.latest().seq,
        quiet_from,
        "nothing changed meanwhile"
    );
    // One change that every client here receives: the pool (felix and bgp).
    store.put(res(serde_json::json!({"apiVersion": "projectcalico.org/v3", "kind": "IPPool",
        "metadata": {"name": "default-ipv4-ippool"},
        "spec": {"cidr": "10.128.0.0/9", "vxlanMode": "Always", "natOutgoing": false, "blockSize": 24}})));
    loaded(&srv, &store).await;
    assert!(
        srv.cache.get(quiet_from).is_none(),
        "the breadcrumb before the change has left the history: the case under test"
    );
    let pool = "/calico/v1/ipam/v4/pool/10.128.0.0-9";
    loop {
        let kvs = tokio::time::timeout(common::WAIT, rx.recv())
            .await
            .expect("our Calico client was not sent the change")
            .expect("our Calico client's session ended");
        if let Some(u) = kvs.iter().find(|u| u.key == pool) {
            assert_eq!(
                u.update_type,
                typha_protocol::calico::messages::UpdateType::Updated
            );
            assert!(String::from_utf8_lossy(&u.value).contains(r#""vxlan_mode":"always""#));
            break;
        }
    }
    for (syncer, out, child) in go {
        wait(child).await;
        let (got, summary) = read_state(&out);
        assert_eq!(summary["inSync"], true, "{syncer}: {summary}");
        assert_same(
            &got,
            &expected(&srv, syncer),
            &format!("{syncer} after the quiet spell"),
        );
    }
    assert!(!ours.is_finished(), "our Calico client is still connected");
    assert_eq!(srv.metrics.dropped_count(DropReason::fell_behind), 0);
    assert_eq!(
        srv.metrics
            .encode_error_count(typha_server::metrics::FrameKind::calico_delta),
        0
    );
    ours.abort();
    srv.shutdown().await;
}

#[tokio::test]
async fn a_hello_we_do_not_serve_is_closed_without_a_word() {
    let (srv, store) = server(Config::for_tests()).await;
    store.bulk_load(cluster(2, 2));
    for (syncer, modern) in [("bogus", true), ("felix", false)] {
        let mut c = Raw::hello(srv.addr, "raw", syncer, modern).await;
        assert!(c.until_closed().await.is_empty(), "{syncer} {modern}");
    }
    eventually("counted", || {
        srv.metrics.dropped_count(DropReason::handshake) == 2
    })
    .await;
    // The empty syncer type is felix.
    let mut c = Raw::hello(srv.addr, "raw", "", true).await;
    let first = loop {
        use tokio::io::AsyncReadExt;
        if let Some(m) = c.dec.decode(&mut c.buf).unwrap() {
            break m;
        }
        assert!(c.tcp.read_buf(&mut c.buf).await.unwrap() > 0);
    };
    match first {
        Message::ServerHello(h) => {
            assert_eq!(h.syncer_type, "felix");
            assert!(h.supports_node_resource_updates);
        }
        other => panic!("{other:?}"),
    }
    srv.shutdown().await;
}

#[tokio::test]
async fn a_client_that_never_pongs_is_dropped_and_shutdown_closes_the_rest() {
    let mut cfg = Config::for_tests();
    cfg.conn.ping_interval = Duration::from_millis(100);
    cfg.conn.pong_timeout = Duration::from_millis(500);
    let (srv, store) = server(cfg).await;
    store.bulk_load(cluster(2, 2));
    eventually("in sync", || {
        srv.cache.latest().status == typha_protocol::model::SyncStatus::InSync
    })
    .await;
    let mut silent = Raw::hello(srv.addr, "raw", "felix", true).await;
    let got = silent.until_closed().await;
    assert!(matches!(got[0], Message::ServerHello(_)), "{:?}", got[0]);
    assert!(got.iter().any(|m| matches!(m, Message::Kvs(_))));
    assert!(got.iter().filter(|m| matches!(m, Message::Ping(_))).count() >= 2);
    assert_eq!(srv.metrics.dropped_count(DropReason::ping_timeout), 1);

    // Shutdown closes a Calico client with no goodbye (there is none in its protocol).
    let mut c = Raw::hello(srv.addr, "raw", "bgp", true).await;
    eventually("streaming", || {
        srv.metrics.connections_streaming.total() == 1
    })
    .await;
    let (_, got) = tokio::join!(srv.shutdown(), c.until_closed());
    assert!(matches!(got[0], Message::ServerHello(_)));
}

#[tokio::test]
async fn over_the_limit_a_calico_client_is_closed() {
    let mut cfg = Config::for_tests();
    cfg.max_connections = 1;
    let (srv, _store) = server(cfg).await;
    let _first = Raw::hello(srv.addr, "raw", "felix", true).await;
    eventually("active", || srv.metrics.connections_active.get() == 1).await;
    let mut second = Raw::hello(srv.addr, "raw", "bgp", true).await;
    assert!(second.until_closed().await.is_empty());
    assert_eq!(
        srv.metrics.dropped_count(DropReason::too_many_connections),
        1
    );
    // Counted by the syncer type of its hello, which the server read before closing.
    assert_eq!(srv.metrics.calico_refused_count(Some(SyncerType::Bgp)), 1);
    assert_eq!(srv.metrics.calico_refused_count(Some(SyncerType::Felix)), 0);
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_breadcrumb_is_encoded_once_for_every_client_of_a_syncer_type() {
    use typha_server::metrics::FrameKind;
    let p = pki();
    let (srv, store) = tls_server(&p).await;
    let clients: Vec<_> = (0..3)
        .map(|i| {
            let out = out_file(&p, &format!("felix-{i}"));
            let c = calico_peer(&p, &srv, SyncerType::Felix, &out, &["--duration", "5s"]);
            (out, c)
        })
        .collect();
    eventually("every client streaming", || {
        srv.metrics.connections_streaming.total() == 3
    })
    .await;
    let (seq0, encoded0) = (
        srv.cache.latest().seq.0,
        srv.metrics.encoded_count(FrameKind::calico_delta),
    );
    churn(&store);
    loaded(&srv, &store).await;
    let want = expected(&srv, SyncerType::Felix);
    for (out, child) in clients {
        wait(child).await;
        assert_same(&read_state(&out).0, &want, "felix after churn");
    }
    let crumbs = srv.cache.latest().seq.0 - seq0;
    let encoded = srv.metrics.encoded_count(FrameKind::calico_delta) - encoded0;
    assert!(crumbs > 0 && encoded > 0);
    assert!(
        encoded <= crumbs,
        "{encoded} MsgKVs encoded for {crumbs} breadcrumbs and 3 clients"
    );
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_calico_client_whose_cn_is_not_allowed_is_turned_away() {
    let p = pki();
    let (srv, _store) = tls_server(&p).await;
    let d = p.dir.path();
    let mut cmd = Command::new(peer("calico-peer").unwrap());
    cmd.arg("client")
        .args([
            "--addr",
            &srv.addr.to_string(),
            "--syncer",
            "felix",
            "--hostname",
            "x",
        ])
        .arg("--ca")
        .arg(d.join("ca.crt"))
        .arg("--cert")
        .arg(d.join("stranger.crt"))
        .arg("--key")
        .arg(d.join("stranger.key"))
        .args(["--server-cn", "typha-server", "--quiet", "--until-in-sync"])
        .args(["--duration", "10s"]);
    let status = tokio::task::spawn_blocking(move || cmd.status().unwrap())
        .await
        .unwrap();
    assert!(!status.success());
    eventually("counted", || {
        srv.metrics.dropped_count(DropReason::tls_identity) == 1
    })
    .await;
    srv.shutdown().await;
}
