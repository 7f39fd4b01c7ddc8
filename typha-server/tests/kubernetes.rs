//! The Kubernetes backend through the real server to a raw protocol client, against a real
//! kube-apiserver over a real etcd 3.6 (`common::kube`, built by `peers/build`), as the
//! ServiceAccount `kube-system/calico-typha` with exactly the README's RBAC rules. Pods,
//! Namespaces, ServiceAccounts, Nodes and NetworkPolicies are written through the API, so their
//! defaulting and validation are the API server's (a namespace gains its
//! `kubernetes.io/metadata.name` label, a pod its defaulted fields); Calico's resources are
//! written as their CRDs and validated against Calico's own schemas. The API server runs as
//! clusters run it, with its watch cache. Expected states are written by hand as Calico v3
//! resources, independently of the backend's conversion.
//!
//! Bookmarks are the one thing left on the fixture API server (`common::k8s_fixture`, at the
//! end of this file): the real one sends a bookmark on its own schedule (about once a minute
//! per watch), and a test cannot ask it for one at the moment it needs.

// In tests a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use common::kube::{apply, delete, set_status};
use common::{Peer, digest_of, eventually, metric};
use serde_json::{Value, json};
use typha_protocol::model::SyncStatus;
use typha_server::calico::v3::{Kind, Resource, ResourceId};
use typha_server::config::Config;
use typha_server::datastore::Datastore;
use typha_server::datastore::kubernetes::{CalicoGroup, InterfacePrefix, Kubernetes};
use typha_server::server::{RunningServer, start};
use typha_test_support::control_plane::ControlPlane;

const CRD: &str = "crd.projectcalico.org/v1";

/// The control plane, the server over the backend, and what the client must end up with.
struct Run {
    cp: ControlPlane,
    admin: kube::Client,
    srv: RunningServer,
    want: BTreeMap<ResourceId, Resource>,
}

/// A v3 document of `kind`.
fn v3(kind: &str, metadata: Value, spec: Value) -> Value {
    json!({"apiVersion": "projectcalico.org/v3", "kind": kind, "metadata": metadata, "spec": spec})
}

fn global_set(i: usize, g: u64) -> Value {
    v3(
        "GlobalNetworkSet",
        json!({"name": format!("gset-{i}"), "labels": {"gen": g.to_string()}}),
        json!({"nets": [format!("198.51.100.{}/32", g % 256)]}),
    )
}

fn policy(i: usize, g: u64) -> Value {
    v3(
        "NetworkPolicy",
        json!({"name": format!("np-{i}"), "namespace": "web"}),
        json!({"order": 100 + g, "selector": format!("app == 'a{g}'"), "types": ["Ingress"],
               "ingress": [{"action": "Allow", "protocol": "TCP",
                            "destination": {"ports": [1000 + g]}}]}),
    )
}

fn pool(i: usize) -> Value {
    v3(
        "IPPool",
        json!({"name": format!("pool-{i}")}),
        json!({"cidr": format!("10.{}.0.0/16", 100 + i), "vxlanMode": "Always"}),
    )
}

fn host_endpoint(i: usize) -> Value {
    v3(
        "HostEndpoint",
        json!({"name": format!("hep-{i}"), "labels": {"role": "edge"}}),
        json!({"node": "host-1", "interfaceName": "eth0", "expectedIPs": ["192.0.2.1"]}),
    )
}

/// The profile Calico makes of a service account.
impl Run {
    /// A control plane, typha's identity, and the server over the backend; `None` when the
    /// peers are missing and skipping is allowed.
    async fn new() -> Option<Run> {
        Run::without_crd(None).await
    }

    /// As [`Run::new`], with Calico's CRD of `plural` (if given) deleted before the server
    /// starts: a cluster of a Calico release that has no such CRD.
    async fn without_crd(plural: Option<&str>) -> Option<Run> {
        let cp = common::kube::default().await?;
        let admin = cp.admin().unwrap();
        if let Some(plural) = plural {
            remove_crd(&admin, plural).await;
        }
        let (client, _) = common::kube::typha_identity(&cp).await;
        // What the cluster holds before the test writes anything: the profiles of the API
        // server's own namespaces and of typha-server's account.
        let want = common::kube::ambient(&admin)
            .await
            .into_iter()
            .map(|r| (r.id(), r))
            .collect();
        // A CRD that is not installed (tiers, in the Calico release linked) is asked for again
        // every half second here.
        let ds = Kubernetes::new(client)
            .await
            .with_crd_poll(Duration::from_millis(500));
        let srv = start(Config::for_tests(), Arc::new(ds)).await.unwrap();
        Some(Run {
            cp,
            admin,
            srv,
            want,
        })
    }

    /// Writes a Calico resource as its CRD.
    async fn put(&mut self, doc: Value) {
        let mut r = Resource::from_json(doc).unwrap();
        let stored = common::kube::put_crd(&self.admin, &r).await;
        // The API server's generation, which the server carries on, and the metadata
        // Calico's driver gives the resource.
        common::kube::crd_metadata(&mut r, &stored);
        self.want.insert(r.id(), r);
    }

    async fn delete(&mut self, doc: Value) {
        let r = Resource::from_json(doc).unwrap();
        let ns = r.metadata.namespace.clone().unwrap_or_default();
        delete(&self.admin, CRD, r.kind().as_str(), &ns, &r.metadata.name).await;
        self.want.remove(&r.id());
    }

    /// Writes a namespace, and the profile it must become (with the label the API server adds).
    async fn namespace(&mut self, name: &str, labels: Value) {
        let stored = apply(
            &self.admin,
            json!({"apiVersion": "v1", "kind": "Namespace",
                   "metadata": {"name": name, "labels": labels}}),
        )
        .await;
        let mut want: BTreeMap<String, String> = serde_json::from_value(labels).unwrap();
        want.insert("kubernetes.io/metadata.name".into(), name.into());
        assert_eq!(
            stored.metadata.labels.clone().unwrap_or_default(),
            want,
            "the API server's defaulting of a namespace's labels"
        );
        let r = common::kube::namespace_profile(&stored.metadata);
        self.want.insert(r.id(), r);
    }

    /// Writes a service account, and the profile it must become.
    async fn service_account(&mut self, ns: &str, name: &str) {
        let stored = apply(
            &self.admin,
            json!({"apiVersion": "v1", "kind": "ServiceAccount",
                   "metadata": {"name": name, "namespace": ns, "labels": {"tier": "db"}}}),
        )
        .await;
        let r = common::kube::service_account_profile(&stored.metadata);
        self.want.insert(r.id(), r);
    }

    /// Writes a node (its addresses through the status subresource, as a kubelet reports
    /// them), and the Calico node it must become.
    async fn node(&mut self, name: &str, ip: &str) {
        let node = json!({"apiVersion": "v1", "kind": "Node",
               "metadata": {"name": name, "labels": {"zone": "a"},
                            "annotations": {"projectcalico.org/IPv4Address": format!("{ip}/24")}}});
        let stored = apply(&self.admin, node.clone()).await;
        set_status(
            &self.admin,
            &node,
            json!({"addresses": [{"type": "InternalIP", "address": ip},
                                 {"type": "Hostname", "address": name}]}),
        )
        .await;
        // Calico's metadata for it: the node's uid and creation time, and its labels again in
        // `projectcalico.org/kube-labels` (as json.Marshal writes a map).
        let doc = v3(
            "Node",
            json!({"name": name, "uid": stored.metadata.uid,
                   "creationTimestamp": common::kube::created(&stored.metadata),
                   "labels": {"zone": "a"},
                   "annotations": {"projectcalico.org/kube-labels": r#"{"zone":"a"}"#}}),
            json!({"bgp": {"ipv4Address": format!("{ip}/24")},
                   "orchRefs": [{"nodeName": name, "orchestrator": "k8s"}],
                   "addresses": [{"address": format!("{ip}/24"), "type": "CalicoNodeIP"},
                                 {"address": ip, "type": "InternalIP"}]}),
        );
        let r = Resource::from_json(doc).unwrap();
        self.want.insert(r.id(), r);
    }

    async fn seed(&mut self) {
        self.node("node-1", "172.16.0.5").await;
        self.namespace("web", json!({"team": "a"})).await;
        self.service_account("web", "api").await;
        for i in 0..3 {
            self.put(global_set(i, 0)).await;
            self.put(policy(i, 0)).await;
        }
        self.put(pool(0)).await;
        self.put(host_endpoint(0)).await;
    }

    /// Reads the Services and EndpointSlices back from the API into what the client must hold.
    async fn refresh_services(&mut self) {
        self.want.retain(|id, _| {
            !matches!(
                id.kind,
                Kind::KubernetesService | Kind::KubernetesEndpointSlice
            )
        });
        for r in common::kube::services(&self.admin).await {
            self.want.insert(r.id(), r);
        }
    }

    async fn peer(&self) -> Peer {
        let mut p = Peer::connect(self.srv.addr).await;
        p.hello(Peer::offer("node-a", None)).await.unwrap();
        p
    }

    /// Waits until `p` holds exactly what the test wrote.
    async fn converge(&self, p: &mut Peer, what: &str) {
        let want = digest_of(self.want.values());
        p.until(what, |p| {
            p.digest.combined() == want.0 && p.status == Some(SyncStatus::InSync)
        })
        .await;
        assert_eq!(p.state.len(), want.1, "{what}");
        assert_eq!(
            self.srv.cache.latest().digest,
            want.0,
            "{what}: server cache"
        );
    }
}

#[tokio::test]
async fn initial_sync_serves_calico_crds_and_profiles() {
    let Some(mut run) = Run::new().await else {
        return;
    };
    run.seed().await;
    let mut p = run.peer().await;
    run.converge(&mut p, "the initial sync").await;
    assert_eq!(p.first_after_hello, Some("snapshot"));
    assert!(run.want.len() >= 10);
    run.srv.shutdown().await;
}

#[tokio::test]
async fn creates_updates_and_deletes_arrive() {
    let Some(mut run) = Run::new().await else {
        return;
    };
    run.seed().await;
    let mut p = run.peer().await;
    run.converge(&mut p, "the initial sync").await;

    run.put(global_set(7, 1)).await;
    run.converge(&mut p, "a set created").await;
    run.put(global_set(7, 2)).await;
    run.put(policy(1, 5)).await;
    run.converge(&mut p, "a set and a policy updated").await;
    run.delete(global_set(7, 2)).await;
    run.delete(pool(0)).await;
    run.converge(&mut p, "a set and a pool deleted").await;
    run.namespace("web", json!({"team": "b", "env": "prod"}))
        .await;
    run.service_account("web", "worker").await;
    run.converge(&mut p, "namespace relabelled, service account added")
        .await;
    run.node("node-1", "172.16.0.9").await;
    run.converge(&mut p, "node readdressed").await;
    delete(&run.admin, "v1", "ServiceAccount", "web", "api").await;
    run.want
        .remove(&ResourceId::global(Kind::Profile, "ksa.web.api"));
    run.converge(&mut p, "service account deleted").await;
    delete(&run.admin, "v1", "Node", "", "node-1").await;
    run.want.remove(&ResourceId::global(Kind::Node, "node-1"));
    run.converge(&mut p, "node deleted").await;
    run.srv.shutdown().await;
}

#[tokio::test]
async fn an_apiserver_restart_with_its_watch_cache_ends_exact() {
    // A restarted API server's watch cache starts at the current revision: a watch resumed from
    // before it is "too old" (410) unless nothing it holds changed, so the server relists or
    // resumes; either way, nothing is lost and nothing is left over.
    let Some(mut run) = Run::new().await else {
        return;
    };
    run.seed().await;
    let mut p = run.peer().await;
    run.converge(&mut p, "the initial sync").await;
    run.put(global_set(3, 1)).await;
    run.converge(&mut p, "before the restart").await;
    run.cp.kill_apiserver();
    tokio::time::sleep(Duration::from_millis(500)).await;
    run.cp.start_apiserver().await.unwrap();
    run.put(global_set(9, 3)).await;
    run.put(policy(0, 8)).await;
    run.delete(policy(2, 0)).await;
    run.delete(global_set(1, 0)).await;
    run.converge(&mut p, "after the restart").await;
    run.put(global_set(10, 1)).await;
    run.converge(&mut p, "a change after that").await;
    run.srv.shutdown().await;
}

#[tokio::test]
async fn an_object_that_does_not_convert_is_invalid_and_the_rest_is_served() {
    let Some(mut run) = Run::new().await else {
        return;
    };
    run.seed().await;
    // Calico's CRD schema takes any string as a net: Calico's syncers skip the bad one and
    // serve the set with the rest (issue 38), and so do we, without counting it invalid.
    run.put(v3(
        "GlobalNetworkSet",
        json!({"name": "feed"}),
        json!({"nets": ["10.1.0.0/16", "not-a-cidr", "192.168.5.0/24"]}),
    ))
    .await;
    let mut p = run.peer().await;
    run.converge(&mut p, "the initial sync with the set's good nets")
        .await;
    assert_eq!(metric(&run.srv, "typha_updates_invalid_total"), 0.0);
    // A policy Calico's validator drops (port 0, which the CRD schema takes).
    apply(
        &run.admin,
        json!({"apiVersion": CRD, "kind": "GlobalNetworkPolicy", "metadata": {"name": "bad"},
               "spec": {"selector": "all()", "ingress": [{"action": "Allow", "protocol": "TCP",
                        "destination": {"ports": [0]}}]}}),
    )
    .await;
    eventually("the bad policy counted", || {
        metric(&run.srv, "typha_updates_invalid_total") >= 1.0
    })
    .await;
    run.converge(&mut p, "the sync without the bad policy")
        .await;

    // A bad update to a good object removes it; fixing it brings it back.
    apply(
        &run.admin,
        json!({"apiVersion": CRD, "kind": "GlobalNetworkSet",
               "metadata": {"name": "gset-0", "labels": {"gen": "0"},
                            "annotations": {"projectcalico.org/metadata": "{not json"}},
               "spec": {"nets": ["10.0.0.0/8"]}}),
    )
    .await;
    let gone = Resource::from_json(global_set(0, 0)).unwrap().id();
    run.want.remove(&gone);
    run.converge(&mut p, "the set made invalid is gone").await;
    run.put(global_set(0, 4)).await;
    run.converge(&mut p, "the set fixed").await;
    run.srv.shutdown().await;
}

/// A pod of namespace `web` on node-1 as a user writes it (the API server fills in the rest).
fn pod(name: &str, host_network: bool) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "web", "labels": {"app": "api"}},
           "spec": {"nodeName": "node-1", "serviceAccountName": "api", "hostNetwork": host_network,
                    "containers": [{"name": "c", "image": "registry.invalid/app:1"}]}})
}

/// A pod's status as a kubelet reports it: running, with this address (or none yet).
fn running(ip: Option<&str>) -> Value {
    let ips: Vec<Value> = ip.iter().map(|ip| json!({"ip": ip})).collect();
    json!({"phase": "Running", "podIP": ip, "podIPs": if ips.is_empty() { Value::Null } else { json!(ips) }})
}

/// The workload endpoint the pod named `name` on node-1 must become (interface name from
/// Python: `"cali" + hashlib.sha1(b"web.<name>").hexdigest()[:11]`).
fn endpoint(name: &str, ip: &str, interface: &str) -> Resource {
    Resource::from_json(v3(
        "WorkloadEndpoint",
        json!({"name": format!("node--1-k8s-{}-eth0", name.replace('-', "--")),
               "namespace": "web",
               "labels": {"app": "api", "projectcalico.org/namespace": "web",
                          "projectcalico.org/orchestrator": "k8s",
                          "projectcalico.org/serviceaccount": "api"}}),
        json!({"orchestrator": "k8s", "node": "node-1", "pod": name, "endpoint": "eth0",
               "serviceAccountName": "api", "interfaceName": interface,
               "ipNetworks": [format!("{ip}/32")], "profiles": ["kns.web", "ksa.web.api"]}),
    ))
    .unwrap()
}

#[tokio::test]
async fn pods_become_workload_endpoints_once_they_have_an_address() {
    let Some(mut run) = Run::new().await else {
        return;
    };
    run.seed().await;
    let api_1 = pod("api-1", false);
    let host_agent = pod("host-agent", true);
    apply(&run.admin, api_1.clone()).await;
    apply(&run.admin, host_agent.clone()).await;
    set_status(&run.admin, &host_agent, running(Some("192.0.2.10"))).await;
    let mut p = run.peer().await;
    run.converge(&mut p, "pending and host-networked pods are not endpoints")
        .await;

    set_status(&run.admin, &api_1, running(Some("10.0.0.7"))).await;
    let wep = endpoint("api-1", "10.0.0.7", "cali81deba30cdc");
    run.want.insert(wep.id(), wep.clone());
    run.converge(&mut p, "the pod got its address").await;

    set_status(&run.admin, &api_1, running(None)).await;
    run.want.remove(&wep.id());
    run.converge(&mut p, "the pod lost its address").await;

    set_status(&run.admin, &api_1, running(Some("10.0.0.8"))).await;
    let wep = endpoint("api-1", "10.0.0.8", "cali81deba30cdc");
    run.want.insert(wep.id(), wep.clone());
    run.converge(&mut p, "and got another").await;

    set_status(
        &run.admin,
        &api_1,
        json!({"phase": "Succeeded", "podIP": "10.0.0.8", "podIPs": [{"ip": "10.0.0.8"}]}),
    )
    .await;
    run.want.remove(&wep.id());
    run.converge(&mut p, "a finished pod is no endpoint").await;

    delete(&run.admin, "v1", "Pod", "web", "api-1").await;
    run.converge(&mut p, "the pod deleted").await;
    run.srv.shutdown().await;
}

#[tokio::test]
async fn kubernetes_network_policies_are_served_as_calicos() {
    let Some(mut run) = Run::new().await else {
        return;
    };
    run.seed().await;
    apply(
        &run.admin,
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
               "metadata": {"name": "deny-all", "namespace": "web"},
               "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}}),
    )
    .await;
    let knp = Resource::from_json(v3(
        "KubernetesNetworkPolicy",
        json!({"name": "knp.default.deny-all", "namespace": "web"}),
        json!({"order": 1000.0, "selector": "projectcalico.org/orchestrator == 'k8s'",
               "types": ["Ingress"]}),
    ))
    .unwrap();
    run.want.insert(knp.id(), knp.clone());
    let mut p = run.peer().await;
    run.converge(&mut p, "the policy served").await;

    // Issue 38: a Calico client (calico-node's Felix) is sent the exact text Calico v3.32's
    // Typha sends for a NetworkPolicy written through the real API server (which fills in
    // `policyTypes` and each port's protocol): the orchestrator term first, the user's parts
    // verbatim in Calico's parentheses, one rule for the peer carrying all its ports.
    apply(
        &run.admin,
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
               "metadata": {"name": "db", "namespace": "web"},
               "spec": {"podSelector": {"matchLabels": {"app": "web"}},
                        "ingress": [{
                            "from": [{"podSelector": {"matchLabels": {"role": "db"}},
                                      "namespaceSelector": {"matchLabels": {"team": "x"}}}],
                            "ports": [{"port": "http"}, {"port": 9000, "endPort": 9100}]}]}}),
    )
    .await;
    let db = Resource::from_json(v3(
        "KubernetesNetworkPolicy",
        json!({"name": "knp.default.db", "namespace": "web"}),
        json!({"order": 1000.0,
               "selector": "projectcalico.org/orchestrator == 'k8s' && app == 'web'",
               "types": ["Ingress"],
               "ingress": [{"action": "Allow", "protocol": "TCP",
                            "source": {"selector": "projectcalico.org/orchestrator == 'k8s' && role == 'db'",
                                       "namespaceSelector": "team == 'x'"},
                            "destination": {"ports": ["http", "9000:9100"]}}]}),
    ))
    .unwrap();
    run.want.insert(db.id(), db.clone());
    run.converge(&mut p, "the policy with peers and ports")
        .await;
    let tcp = tokio::net::TcpStream::connect(run.srv.addr).await.unwrap();
    let felix = typha_client::calico::run(
        tcp,
        &typha_client::calico::CalicoHello::calico_node("node-1", "felix"),
        typha_client::calico::Until::InSync,
        Duration::from_secs(60),
    )
    .await
    .unwrap();
    let got = &felix.kvs["/calico/v1/policy/KubernetesNetworkPolicy/web/db"];
    assert_eq!(
        std::str::from_utf8(&got.value).unwrap(),
        concat!(
            r#"{"namespace":"web","tier":"default","order":1000,"inbound_rules":[{"action":"allow","protocol":"tcp","#,
            r#""src_selector":"(pcns.team == \"x\") \u0026\u0026 (projectcalico.org/orchestrator == 'k8s' \u0026\u0026 role == 'db')","#,
            r#""dst_ports":["http","9000:9100"],"#,
            r#""orig_src_selector":"projectcalico.org/orchestrator == 'k8s' \u0026\u0026 role == 'db'","#,
            r#""orig_src_namespace_selector":"team == 'x'"}],"#,
            r#""selector":"(projectcalico.org/orchestrator == 'k8s' \u0026\u0026 app == 'web') \u0026\u0026 projectcalico.org/namespace == 'web'","#,
            r#""types":["ingress"]}"#
        )
    );
    delete(
        &run.admin,
        "networking.k8s.io/v1",
        "NetworkPolicy",
        "web",
        "db",
    )
    .await;
    run.want.remove(&db.id());

    // The API server rejects what Kubernetes does not allow: nothing reaches the cache.
    let bad = common::kube::try_create(
        &run.admin,
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
               "metadata": {"name": "bad", "namespace": "web"},
               "spec": {"podSelector": {}, "policyTypes": ["Sideways"]}}),
    )
    .await;
    assert!(
        matches!(&bad, Err(kube::Error::Api(s)) if s.code == 422),
        "{bad:?}"
    );

    delete(
        &run.admin,
        "networking.k8s.io/v1",
        "NetworkPolicy",
        "web",
        "deny-all",
    )
    .await;
    run.want.remove(&knp.id());
    run.converge(&mut p, "the policy deleted").await;
    run.srv.shutdown().await;
}

/// BGPConfiguration, BGPPeer, BGPFilter and CalicoNodeStatus CRDs are read: created, updated,
/// deleted. The filter uses the rule fields the linked CRD declares (it prunes the others).
#[tokio::test]
async fn bgp_kinds_and_node_status_requests_are_read() {
    let Some(mut run) = Run::new().await else {
        return;
    };
    run.seed().await;
    let mut p = run.peer().await;
    run.converge(&mut p, "the initial sync").await;
    let config = |mesh: bool| {
        v3(
            "BGPConfiguration",
            json!({"name": "default"}),
            json!({"nodeToNodeMeshEnabled": mesh, "asNumber": 64512, "logSeverityScreen": "Info",
                   "serviceClusterIPs": [{"cidr": "10.96.0.0/12"}]}),
        )
    };
    let peer = |asn: u32| {
        v3(
            "BGPPeer",
            json!({"name": "tor", "labels": {"rack": "a"}}),
            json!({"peerIP": "192.0.2.1", "asNumber": asn, "nodeSelector": "rack == 'a'"}),
        )
    };
    let filter = |action: &str| {
        v3(
            "BGPFilter",
            json!({"name": "export-pods"}),
            json!({"exportV4": [{"cidr": "10.128.0.0/9", "matchOperator": "In", "action": action,
                                 "interface": "eth0", "source": "RemotePeers"}],
                   "importV6": [{"action": "Reject"}]}),
        )
    };
    let status = |period: u32| {
        v3(
            "CalicoNodeStatus",
            json!({"name": "node-1-status"}),
            json!({"node": "node-1", "classes": ["Agent", "BGP"], "updatePeriodSeconds": period}),
        )
    };
    run.put(config(false)).await;
    run.put(peer(64513)).await;
    run.put(filter("Accept")).await;
    run.put(status(10)).await;
    run.converge(
        &mut p,
        "BGP configuration, a peer, a filter, a status request created",
    )
    .await;
    run.put(config(true)).await;
    run.put(peer(64514)).await;
    run.put(filter("Reject")).await;
    run.put(status(30)).await;
    run.converge(&mut p, "all four updated").await;
    run.delete(config(true)).await;
    run.delete(peer(64514)).await;
    run.delete(filter("Reject")).await;
    run.delete(status(30)).await;
    run.converge(&mut p, "all four deleted").await;
    run.srv.shutdown().await;
}

/// Services and EndpointSlices are read (the API server's own `kubernetes` Service among
/// them): created, updated, deleted.
#[tokio::test]
async fn services_and_endpoint_slices_are_read() {
    let Some(mut run) = Run::new().await else {
        return;
    };
    run.seed().await;
    assert!(
        run.want.contains_key(&ResourceId::namespaced(
            Kind::KubernetesService,
            "default",
            "kubernetes"
        )),
        "the API server's own Service"
    );
    let mut p = run.peer().await;
    run.converge(&mut p, "the initial sync").await;
    let service = |port: u16| {
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "api", "namespace": "web", "labels": {"app": "api"}},
               "spec": {"selector": {"app": "api"},
                        "ports": [{"name": "http", "port": port, "targetPort": 8080}]}})
    };
    let slice = |ip: &str| {
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
               "metadata": {"name": "api-1", "namespace": "web",
                            "labels": {"kubernetes.io/service-name": "api"}},
               "addressType": "IPv4",
               "endpoints": [{"addresses": [ip], "conditions": {"ready": true}}],
               "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]})
    };
    apply(&run.admin, service(80)).await;
    apply(&run.admin, slice("10.0.1.5")).await;
    run.refresh_services().await;
    run.converge(&mut p, "a service and its slice created")
        .await;
    apply(&run.admin, service(81)).await;
    apply(&run.admin, slice("10.0.1.6")).await;
    run.refresh_services().await;
    run.converge(&mut p, "both updated").await;
    delete(&run.admin, "v1", "Service", "web", "api").await;
    delete(
        &run.admin,
        "discovery.k8s.io/v1",
        "EndpointSlice",
        "web",
        "api-1",
    )
    .await;
    run.refresh_services().await;
    assert!(
        !run.want
            .keys()
            .any(|id| id.namespace.as_deref() == Some("web") && id.name.starts_with("api")),
        "both gone from the API"
    );
    run.converge(&mut p, "both deleted").await;
    run.srv.shutdown().await;
}

/// The CRDs linked have no tiers CRD: the backend serves the rest, in sync, and once the CRD is
/// installed its objects arrive without a resync.
#[tokio::test]
async fn a_crd_that_is_not_installed_is_empty_until_it_is() {
    let Some(mut run) = Run::new().await else {
        return;
    };
    let tiers = common::kube::resource(CRD, "Tier", "tiers");
    let api: kube::Api<kube::api::DynamicObject> = kube::Api::all_with(run.admin.clone(), &tiers);
    assert!(
        matches!(api.list(&Default::default()).await, Err(kube::Error::Api(e)) if e.code == 404),
        "the linked CRDs have a tiers CRD: this test needs another one to be missing"
    );
    run.seed().await;
    let mut p = run.peer().await;
    run.converge(&mut p, "in sync without the tiers CRD").await;
    // Ours, not Calico's: a minimal tiers CRD that keeps whatever spec it is given.
    apply(
        &run.admin,
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
               "metadata": {"name": "tiers.crd.projectcalico.org"},
               "spec": {"group": "crd.projectcalico.org", "scope": "Cluster",
                        "names": {"kind": "Tier", "listKind": "TierList", "plural": "tiers",
                                  "singular": "tier"},
                        "versions": [{"name": "v1", "served": true, "storage": true,
                                      "schema": {"openAPIV3Schema": {"type": "object",
                                                 "x-kubernetes-preserve-unknown-fields": true}}}]}}),
    )
    .await;
    let tier = |order: u32| {
        v3(
            "Tier",
            json!({"name": "security"}),
            json!({"order": order, "defaultAction": "Pass"}),
        )
    };
    let obj: kube::api::DynamicObject = serde_json::from_value(crd_doc(&tier(100))).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let created = loop {
        match api.create(&Default::default(), &obj).await {
            Ok(created) => break created,
            Err(e) => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "the tiers CRD is not served: {e}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let mut r = Resource::from_json(tier(100)).unwrap();
    r.metadata.generation = created.metadata.generation;
    run.want.insert(r.id(), r);
    run.converge(&mut p, "a tier of a CRD installed later")
        .await;
    run.put(tier(200)).await;
    run.converge(&mut p, "the tier updated (its watch runs)")
        .await;
    run.delete(tier(200)).await;
    run.converge(&mut p, "the tier deleted").await;
    assert_no_resync(&p);
    run.srv.shutdown().await;
}

/// Staged policies: where their CRDs are not installed (the Calico release linked has none) the
/// backend is in sync without them, and once installed (here ours, minimal, unless the linked
/// set has them) their policies arrive without a resync: keyed by their staged kind, with their
/// action; a staged deletion takes the key away; one that does not convert is counted as
/// invalid and the rest is served.
#[tokio::test]
async fn staged_policies_arrive_once_their_crds_are_installed() {
    let Some(mut run) = Run::new().await else {
        return;
    };
    run.seed().await;
    let mut p = run.peer().await;
    run.converge(&mut p, "in sync, with or without the staged CRDs")
        .await;
    for (kind, plural, scope) in [
        ("StagedNetworkPolicy", "stagednetworkpolicies", "Namespaced"),
        (
            "StagedGlobalNetworkPolicy",
            "stagedglobalnetworkpolicies",
            "Cluster",
        ),
        (
            "StagedKubernetesNetworkPolicy",
            "stagedkubernetesnetworkpolicies",
            "Namespaced",
        ),
    ] {
        let res = common::kube::resource(CRD, kind, plural);
        let api: kube::Api<kube::api::DynamicObject> = kube::Api::all_with(run.admin.clone(), &res);
        if matches!(api.list(&Default::default()).await, Err(kube::Error::Api(e)) if e.code == 404)
        {
            minimal_crd(&run.admin, CRD, kind, plural, scope).await;
        }
    }
    let staged = |kind: &str, action: &str, selector: &str| {
        let metadata = if kind == "StagedNetworkPolicy" {
            json!({"name": "preview", "namespace": "web"})
        } else {
            json!({"name": "preview"})
        };
        let spec = if action == "Delete" {
            json!({"stagedAction": "Delete", "tier": "default"})
        } else {
            json!({"stagedAction": action, "tier": "default", "order": 10, "selector": selector,
                   "types": ["Ingress"], "ingress": [{"action": "Deny"}]})
        };
        v3(kind, metadata, spec)
    };
    let snp = "/calico/v1/policy/StagedNetworkPolicy/web/preview";
    let sgnp = "/calico/v1/policy/StagedGlobalNetworkPolicy/preview";
    let action_at = |p: &Peer, key: &str| match p.state.get(key).map(|v| v.decode().unwrap()) {
        Some(typha_protocol::model::Value::Policy(v)) => Some(v.staged_action),
        Some(other) => panic!("{key}: {other:?}"),
        None => None,
    };
    run.put(staged("StagedNetworkPolicy", "Set", "app == 'web'"))
        .await;
    run.put(staged("StagedGlobalNetworkPolicy", "Learn", "all()"))
        .await;
    run.converge(&mut p, "staged policies of CRDs installed later")
        .await;
    assert_eq!(action_at(&p, snp), Some(Some("Set".into())));
    assert_eq!(action_at(&p, sgnp), Some(Some("Learn".into())));

    run.put(staged("StagedNetworkPolicy", "Delete", "")).await;
    run.converge(&mut p, "a staged deletion").await;
    assert_eq!(action_at(&p, snp), None, "a staged deletion sends nothing");

    // Calico's CRD schema takes any string as a selector; the conversion does not.
    let invalid = metric(&run.srv, "typha_updates_invalid_total");
    apply(
        &run.admin,
        crd_doc(&staged("StagedGlobalNetworkPolicy", "Set", "app ==")),
    )
    .await;
    run.want.remove(&ResourceId::global(
        Kind::StagedGlobalNetworkPolicy,
        "preview",
    ));
    run.converge(&mut p, "an invalid staged policy removed")
        .await;
    assert_eq!(action_at(&p, sgnp), None);
    assert!(metric(&run.srv, "typha_updates_invalid_total") > invalid);

    run.put(staged("StagedGlobalNetworkPolicy", "Set", "all()"))
        .await;
    run.converge(&mut p, "the staged policy fixed").await;
    run.delete(staged("StagedNetworkPolicy", "Delete", ""))
        .await;
    run.delete(staged("StagedGlobalNetworkPolicy", "Set", "all()"))
        .await;
    run.converge(&mut p, "staged policies deleted").await;

    // A staged Kubernetes NetworkPolicy: the NetworkPolicy it stages, converted, under the
    // staged kind and its own name.
    let sknp = |action: &str| {
        v3(
            "StagedKubernetesNetworkPolicy",
            json!({"name": "db", "namespace": "web"}),
            json!({"stagedAction": action, "podSelector": {"matchLabels": {"app": "db"}},
                   "policyTypes": ["Ingress"],
                   "ingress": [{"ports": [{"protocol": "TCP", "port": 5432}]}]}),
        )
    };
    let key = "/calico/v1/policy/StagedKubernetesNetworkPolicy/web/db";
    run.put(sknp("Set")).await;
    run.converge(&mut p, "a staged Kubernetes policy").await;
    assert_eq!(action_at(&p, key), Some(Some("Set".into())));
    run.put(sknp("Delete")).await;
    run.converge(&mut p, "a staged Kubernetes deletion").await;
    assert_eq!(action_at(&p, key), None);
    run.delete(sknp("Delete")).await;
    run.converge(&mut p, "the staged Kubernetes policy deleted")
        .await;
    assert_no_resync(&p);
    run.srv.shutdown().await;
}

/// Installs a minimal CRD of ours (not its project's) for `kind` in `api_version` that keeps
/// whatever spec it is given, and waits until the API server serves it.
async fn minimal_crd(
    admin: &kube::Client,
    api_version: &str,
    kind: &str,
    plural: &str,
    scope: &str,
) {
    let (group, version) = api_version.split_once('/').unwrap();
    let mut metadata = json!({"name": format!("{plural}.{group}")});
    if group.ends_with(".k8s.io") {
        // The API server refuses a CRD in Kubernetes' own groups without this.
        metadata["annotations"] = json!({"api-approved.kubernetes.io":
            "https://github.com/kubernetes-sigs/network-policy-api/pull/347"});
    }
    apply(
        admin,
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
               "metadata": metadata,
               "spec": {"group": group, "scope": scope,
                        "names": {"kind": kind, "listKind": format!("{kind}List"),
                                  "plural": plural, "singular": kind.to_lowercase()},
                        "versions": [{"name": version, "served": true, "storage": true,
                                      "schema": {"openAPIV3Schema": {"type": "object",
                                                 "x-kubernetes-preserve-unknown-fields": true}}}]}}),
    )
    .await;
    let api: kube::Api<kube::api::DynamicObject> = kube::Api::all_with(
        admin.clone(),
        &common::kube::resource(api_version, kind, plural),
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while let Err(e) = api.list(&Default::default()).await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the {plural} CRD is not served: {e}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Kubernetes ClusterNetworkPolicies (`policy.networking.k8s.io/v1alpha2`): without their CRD
/// (the API server has none of its own) the backend is in sync; once installed (a minimal
/// CRD, which unlike the project's takes any tier) a policy created, changed and deleted
/// reaches the client as Calico's GlobalNetworkPolicy form in tier `kube-admin` or
/// `kube-baseline`, under its own key; a tier Calico does not know gives nothing.
#[tokio::test]
async fn cluster_network_policies_are_served_in_calicos_tiers() {
    const CNP: &str = "policy.networking.k8s.io/v1alpha2";
    let Some(mut run) = Run::new().await else {
        return;
    };
    run.seed().await;
    let mut p = run.peer().await;
    run.converge(&mut p, "in sync without the CRD").await;
    minimal_crd(
        &run.admin,
        CNP,
        "ClusterNetworkPolicy",
        "clusternetworkpolicies",
        "Cluster",
    )
    .await;
    let cnp = |tier: &str, priority: u32| {
        json!({"apiVersion": CNP, "kind": "ClusterNetworkPolicy",
               "metadata": {"name": "guard"},
               "spec": {"tier": tier, "priority": priority,
                        "subject": {"namespaces": {"matchLabels": {"team": "a"}}},
                        "ingress": [{"name": "no-db", "action": "Deny",
                                     "from": [{"namespaces": {"matchLabels": {"team": "db"}}}],
                                     "protocols": [{"tcp": {"destinationPort": {"number": 5432}}},
                                                   {"destinationNamedPort": "metrics"}]}],
                        "egress": [{"name": "out", "action": "Accept",
                                    "to": [{"networks": ["10.0.0.0/8"]}]}]}})
    };
    // What Calico's Kubernetes driver makes of it, written out.
    let want = |tier: &str, order: f64| {
        let from = json!({"namespaceSelector": "team == 'db'"});
        // Each rule's name, as Calico's driver puts it in the rule's metadata.
        let no_db = json!({"annotations": {"name": "no-db"}});
        Resource::from_json(v3(
            "KubernetesClusterNetworkPolicy",
            json!({"name": "guard"}),
            json!({"tier": tier, "order": order, "namespaceSelector": "team == 'a'",
                   "selector": "projectcalico.org/orchestrator == 'k8s'",
                   "types": ["Ingress", "Egress"],
                   "ingress": [{"metadata": no_db, "action": "Deny", "source": from,
                                "destination": {"ports": ["metrics"]}},
                               {"metadata": no_db, "action": "Deny", "protocol": "TCP",
                                "source": from, "destination": {"ports": [5432]}}],
                   "egress": [{"metadata": {"annotations": {"name": "out"}}, "action": "Allow",
                               "destination": {"nets": ["10.0.0.0/8"]}}]}),
        ))
        .unwrap()
    };
    let key = "/calico/v1/policy/KubernetesClusterNetworkPolicy/guard";
    let at = |p: &Peer| match p.state.get(key).map(|v| v.decode().unwrap()) {
        Some(typha_protocol::model::Value::Policy(v)) => Some(v),
        Some(other) => panic!("{key}: {other:?}"),
        None => None,
    };

    apply(&run.admin, cnp("Admin", 10)).await;
    let r = want("kube-admin", 10.0);
    run.want.insert(r.id(), r);
    run.converge(&mut p, "a ClusterNetworkPolicy").await;
    let v = at(&p).unwrap();
    assert_eq!((v.tier.as_str(), v.order), ("kube-admin", Some(10.0)));
    assert_eq!((v.inbound_rules.len(), v.outbound_rules.len()), (2, 1));

    apply(&run.admin, cnp("Baseline", 20)).await;
    let r = want("kube-baseline", 20.0);
    run.want.insert(r.id(), r.clone());
    run.converge(&mut p, "moved to the baseline tier").await;
    assert_eq!(at(&p).unwrap().tier, "kube-baseline");

    // A tier Calico does not know: no policy (its earlier version deleted), nothing invalid.
    let invalid = metric(&run.srv, "typha_updates_invalid_total");
    apply(&run.admin, cnp("Developer", 20)).await;
    run.want.remove(&r.id());
    run.converge(&mut p, "a tier Calico does not know").await;
    assert!(at(&p).is_none());
    assert_eq!(metric(&run.srv, "typha_updates_invalid_total"), invalid);

    apply(&run.admin, cnp("Admin", 10)).await;
    let r = want("kube-admin", 10.0);
    run.want.insert(r.id(), r.clone());
    run.converge(&mut p, "back in the admin tier").await;
    delete(&run.admin, CNP, "ClusterNetworkPolicy", "", "guard").await;
    run.want.remove(&r.id());
    run.converge(&mut p, "the ClusterNetworkPolicy deleted")
        .await;
    assert!(at(&p).is_none());
    assert_no_resync(&p);
    run.srv.shutdown().await;
}

/// Deletes Calico's CRD of `plural` and waits until it is gone (its objects with it).
async fn remove_crd(admin: &kube::Client, plural: &str) {
    let name = format!("{plural}.crd.projectcalico.org");
    delete(
        admin,
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        "",
        &name,
    )
    .await;
    let crds: kube::Api<kube::api::DynamicObject> = kube::Api::all_with(
        admin.clone(),
        &common::kube::resource(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
        ),
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while crds.get_opt(&name).await.unwrap().is_some() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{name} is not deleted"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A cluster of a Calico release without BGPFilters (before 3.26): the backend serves the rest,
/// a BGPPeer that names a filter among it, in sync; once Calico's bgpfilters CRD is installed, a
/// filter arrives, changes and goes without a resync.
#[tokio::test]
async fn a_cluster_without_the_bgpfilters_crd_is_served_and_gets_filters_once_installed() {
    let Some(mut run) = Run::without_crd(Some("bgpfilters")).await else {
        return;
    };
    let filters = common::kube::resource(CRD, "BGPFilter", "bgpfilters");
    let api: kube::Api<kube::api::DynamicObject> = kube::Api::all_with(run.admin.clone(), &filters);
    assert!(
        matches!(api.list(&Default::default()).await, Err(kube::Error::Api(e)) if e.code == 404),
        "the bgpfilters CRD is still served"
    );
    run.seed().await;
    run.put(v3(
        "BGPPeer",
        json!({"name": "tor"}),
        json!({"peerIP": "192.0.2.1", "asNumber": 64513, "filters": ["export-pods"]}),
    ))
    .await;
    let mut p = run.peer().await;
    run.converge(&mut p, "in sync without the bgpfilters CRD")
        .await;
    // Calico's own CRD, the one the control plane installed at first.
    let dir = typha_test_support::control_plane::crd_dir().unwrap();
    let text = std::fs::read_to_string(dir.join("crd.projectcalico.org_bgpfilters.yaml")).unwrap();
    let mut crd = typha_server::calico::v3::yaml_documents(&text)
        .unwrap()
        .remove(0);
    if let Some(o) = crd.as_object_mut() {
        o.remove("status");
    }
    apply(&run.admin, crd).await;
    let filter = |action: &str| {
        v3(
            "BGPFilter",
            json!({"name": "export-pods"}),
            json!({"exportV4": [{"cidr": "10.128.0.0/9", "matchOperator": "In", "action": action}]}),
        )
    };
    let obj: kube::api::DynamicObject = serde_json::from_value(crd_doc(&filter("Accept"))).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let created = loop {
        match api.create(&Default::default(), &obj).await {
            Ok(created) => break created,
            Err(e) => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "the bgpfilters CRD is not served: {e}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let mut r = Resource::from_json(filter("Accept")).unwrap();
    common::kube::crd_metadata(&mut r, &created);
    run.want.insert(r.id(), r);
    run.converge(&mut p, "a filter of a CRD installed later")
        .await;
    run.put(filter("Reject")).await;
    run.converge(&mut p, "the filter changed (its watch runs)")
        .await;
    run.delete(filter("Reject")).await;
    run.converge(&mut p, "the filter deleted").await;
    assert_no_resync(&p);
    run.srv.shutdown().await;
}

/// A VirtualMachineInstanceMigration of VMI `vm12` in namespace `web`, as KubeVirt's controller
/// writes it, in `phase`, its source pod named once KubeVirt knows it.
fn migration(phase: &str, source_pod: Option<&str>) -> Value {
    let mut status = json!({"phase": phase});
    if let Some(pod) = source_pod {
        status["migrationState"] = json!({"sourcePod": pod, "targetNode": "node-2"});
    }
    json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
           "metadata": {"name": "mig-1", "namespace": "web",
                        "labels": {"kubevirt.io/vmi-name": "vm12"},
                        "annotations": {"kubevirt.io/latest-observed-api-version": "v1"}},
           "spec": {"vmiName": "vm12"},
           "status": status})
}

/// KubeVirt's VirtualMachineInstanceMigrations become Calico's LiveMigrations, as Calico's
/// driver makes them. Without KubeVirt (most clusters) the backend is in sync with the rest;
/// once its CRD is installed (ours, minimal, without a status subresource, so the test writes
/// the status with the object as KubeVirt's controller would through its own) a migration
/// reaches the client as absent while Pending, present from Scheduling (the target only), changed
/// once the source pod is known, and deleted when it succeeds, without a resync.
#[tokio::test]
async fn kubevirt_migrations_are_live_migrations_while_under_way() {
    let Some(mut run) = Run::new().await else {
        return;
    };
    let res = common::kube::resource(
        "kubevirt.io/v1",
        "VirtualMachineInstanceMigration",
        "virtualmachineinstancemigrations",
    );
    let api: kube::Api<kube::api::DynamicObject> = kube::Api::all_with(run.admin.clone(), &res);
    assert!(
        matches!(api.list(&Default::default()).await, Err(kube::Error::Api(e)) if e.code == 404),
        "KubeVirt's CRD is served before the test installs it"
    );
    run.seed().await;
    let mut p = run.peer().await;
    run.converge(&mut p, "in sync without KubeVirt").await;

    minimal_crd(
        &run.admin,
        "kubevirt.io/v1",
        "VirtualMachineInstanceMigration",
        "virtualmachineinstancemigrations",
        "Namespaced",
    )
    .await;

    let key = "/calico/resources/v3/projectcalico.org/livemigrations/web/mig-1";
    let id = ResourceId::namespaced(Kind::LiveMigration, "web", "mig-1");
    let spec_at = |p: &Peer| match p.state.get(key).map(|v| v.decode().unwrap()) {
        Some(typha_protocol::model::Value::Resource(r)) => {
            Some(serde_json::from_str::<Value>(&r.spec_json).unwrap())
        }
        Some(other) => panic!("{key}: {other:?}"),
        None => None,
    };
    // The LiveMigration the stored migration must become, written by hand.
    let live = |stored: &kube::api::DynamicObject, source: Option<&str>| {
        let uid = stored.metadata.uid.clone().unwrap();
        let mut spec = json!({"target": {"selector": format!(
            "(vmi.kubevirt.io/id == 'vm12' || vm.kubevirt.io/name == 'vm12') && kubevirt.io/migrationJobUID == '{uid}'"
        )}});
        if let Some(pod) = source {
            spec["source"] =
                json!({"workload": {"orchestratorID": "k8s", "workloadID": format!("web/{pod}")}});
        }
        let created = serde_json::to_value(&stored.metadata.creation_timestamp).unwrap();
        Resource::from_json(v3(
            "LiveMigration",
            json!({"name": "mig-1", "namespace": "web", "uid": uid, "creationTimestamp": created,
                   "labels": {"kubevirt.io/vmi-name": "vm12"},
                   "annotations": {"kubevirt.io/latest-observed-api-version": "v1"}}),
            spec,
        ))
        .unwrap()
    };

    // Pending: nothing (the key's history below has no value before Scheduling's; the
    // watch delivers one object's changes in order).
    apply(&run.admin, migration("Pending", None)).await;
    let stored = apply(&run.admin, migration("Scheduling", None)).await;
    run.want.insert(id.clone(), live(&stored, None));
    run.converge(&mut p, "a scheduling migration: its target")
        .await;
    let uid = stored.metadata.uid.clone().unwrap();
    assert_eq!(
        spec_at(&p),
        Some(json!({"target": {"selector": format!(
            "(vmi.kubevirt.io/id == 'vm12' || vm.kubevirt.io/name == 'vm12') && kubevirt.io/migrationJobUID == '{uid}'"
        )}}))
    );

    let stored = apply(
        &run.admin,
        migration("Running", Some("virt-launcher-vm12-snq7w")),
    )
    .await;
    run.want
        .insert(id.clone(), live(&stored, Some("virt-launcher-vm12-snq7w")));
    run.converge(&mut p, "a running migration: its source too")
        .await;
    assert_eq!(
        spec_at(&p).unwrap()["source"],
        json!({"workload": {"orchestratorID": "k8s", "workloadID": "web/virt-launcher-vm12-snq7w"}})
    );

    apply(
        &run.admin,
        migration("Succeeded", Some("virt-launcher-vm12-snq7w")),
    )
    .await;
    run.want.remove(&id);
    run.converge(&mut p, "a migration that succeeded: gone")
        .await;
    assert_eq!(spec_at(&p), None);
    // What the client was sent for the key, in order: absent while Pending, then present,
    // changed, deleted.
    let history: Vec<Option<Value>> = p
        .updates_seen
        .iter()
        .filter(|(k, _)| k.as_str() == key)
        .map(|(_, v)| {
            v.as_ref().map(|v| match v.decode().unwrap() {
                typha_protocol::model::Value::Resource(r) => {
                    serde_json::from_str(&r.spec_json).unwrap()
                }
                other => panic!("{other:?}"),
            })
        })
        .collect();
    assert_eq!(history.len(), 3, "{history:?}");
    assert!(
        history[0]
            .as_ref()
            .is_some_and(|s| s.get("source").is_none()),
        "{history:?}"
    );
    assert!(
        history[1]
            .as_ref()
            .is_some_and(|s| s.get("source").is_some()),
        "{history:?}"
    );
    assert_eq!(history[2], None);
    assert_no_resync(&p);
    run.srv.shutdown().await;
}

fn crd_doc(doc: &Value) -> Value {
    typha_test_support::control_plane::crd_object(&Resource::from_json(doc.clone()).unwrap())
}

#[test]
fn the_readme_lists_exactly_what_the_backend_reads() {
    let mut readme: Vec<(String, String)> = common::kube::readme_rules()
        .into_iter()
        .flat_map(|(g, rs)| rs.into_iter().map(move |r| (g.clone(), r)))
        .collect();
    let mut read = Kubernetes::resources();
    readme.sort();
    read.sort();
    assert_eq!(
        readme, read,
        "README's RBAC table vs what the backend lists and watches"
    );
}

/// The API server's count of LIST requests for `resource` (from its own /metrics).
async fn lists_served(admin: &kube::Client, resource: &str) -> f64 {
    let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = admin.request_text(req).await.unwrap();
    text.lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
        .filter(|l| l.contains(&format!("resource=\"{resource}\"")) && l.contains("verb=\"LIST\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test]
async fn lists_are_paged() {
    let Some(cp) = common::kube::default().await else {
        return;
    };
    let admin = cp.admin().unwrap();
    let mut want = BTreeMap::new();
    for i in 0..25 {
        let mut r = Resource::from_json(global_set(i, 0)).unwrap();
        r.metadata.generation = common::kube::put_crd(&admin, &r).await.metadata.generation;
        want.insert(r.id(), r);
    }
    let (client, _) = common::kube::typha_identity(&cp).await;
    let before = lists_served(&admin, "globalnetworksets").await;
    let ds = Kubernetes::new(client).await.with_page_size(4);
    let listing = ds.list().await.unwrap();
    let pages = lists_served(&admin, "globalnetworksets").await - before;
    assert!(pages >= 7.0, "25 sets in pages of 4: {pages} requests");
    let got: BTreeMap<ResourceId, Resource> = listing
        .items
        .into_iter()
        .map(|i| i.unwrap())
        .filter(|r| r.kind() == Kind::GlobalNetworkSet)
        .map(|r| (r.id(), Resource::clone(&r)))
        .collect();
    assert_eq!(digest_of(got.values()), digest_of(want.values()));
}

// ---- Bookmarks: the fixture API server ------------------------------------------------------

mod bookmarks {
    //! On the fixture API server (`common::k8s_fixture`), which sends a bookmark when the test
    //! asks: the real one sends them on its own schedule.

    use super::*;
    use common::k8s_fixture::ApiServer;
    use futures_util::StreamExt;
    use typha_protocol::model::Revision;
    use typha_server::datastore::WatchEvent;

    struct FixtureRun {
        api: ApiServer,
        srv: RunningServer,
        want: BTreeMap<ResourceId, Resource>,
    }

    fn plural(doc: &Value) -> String {
        common::kube::plural_of(doc["kind"].as_str().unwrap())
    }

    impl FixtureRun {
        async fn new() -> FixtureRun {
            let api = ApiServer::start().await;
            let ds = Kubernetes::new(api.client()).await;
            let srv = start(Config::for_tests(), Arc::new(ds)).await.unwrap();
            let mut run = FixtureRun {
                api,
                srv,
                want: BTreeMap::new(),
            };
            for i in 0..3 {
                run.put(global_set(i, 0));
                run.put(policy(i, 0));
            }
            run
        }

        fn put(&mut self, doc: Value) {
            let r = Resource::from_json(doc.clone()).unwrap();
            let mut crd = doc.clone();
            crd["apiVersion"] = CRD.into();
            self.api.put(&plural(&doc), crd);
            self.want.insert(r.id(), r);
        }

        async fn converge(&self, p: &mut Peer, what: &str) {
            let want = digest_of(self.want.values());
            p.until(what, |p| {
                p.digest.combined() == want.0 && p.status == Some(SyncStatus::InSync)
            })
            .await;
        }
    }

    /// Only sets change (every other type's watch stays at the listing's revision), then,
    /// with or without a bookmark to move every type's watch along, history is compacted and
    /// the API server drops the watches. Returns the run and its listing count before the
    /// outage, once a change after it has arrived.
    async fn outage_after_compaction(bookmark: bool) -> (FixtureRun, usize) {
        let mut run = FixtureRun::new().await;
        let mut p = Peer::connect(run.srv.addr).await;
        p.hello(Peer::offer("node-a", None)).await.unwrap();
        run.converge(&mut p, "the initial sync").await;
        for g in 1..5 {
            run.put(global_set(0, g));
        }
        run.converge(&mut p, "sets changed").await;
        if bookmark {
            run.api.bookmark();
            // The resume point is internal; give the bookmark time to be read.
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let lists = run.api.lists();
        run.api.compact();
        run.api.set_down(true);
        run.api.set_down(false);
        run.put(global_set(1, 9));
        run.converge(&mut p, "a change after the outage").await;
        (run, lists)
    }

    #[tokio::test]
    async fn bookmarks_move_the_revision_past_a_compaction() {
        let (run, lists) = outage_after_compaction(true).await;
        assert_eq!(
            run.api.lists(),
            lists,
            "resumed after the bookmark: no 410, no relist"
        );
        run.srv.shutdown().await;
    }

    #[tokio::test]
    async fn without_a_bookmark_a_resume_after_compaction_relists() {
        // The control for the test above: the same steps without the bookmark do relist.
        let (run, lists) = outage_after_compaction(false).await;
        eventually("a relist", || run.api.lists() > lists).await;
        run.srv.shutdown().await;
    }

    #[tokio::test]
    async fn the_watch_reports_bookmarks_as_progress() {
        let api = ApiServer::start().await;
        let ds = Kubernetes::new(api.client()).await;
        let listing = ds.list().await.unwrap();
        assert_eq!(listing.revision, Revision(api.revision()));
        let mut w = ds.watch(Revision(listing.revision.0 + 1)).await.unwrap();
        let rev = api.put("globalnetworksets", {
            let mut d = global_set(0, 0);
            d["apiVersion"] = CRD.into();
            d
        });
        match w.next().await.unwrap().unwrap() {
            // Every other type is still at the listing's revision.
            WatchEvent::Put { revision, item } => {
                assert_eq!(revision, listing.revision);
                assert_eq!(item.unwrap().metadata.name, "gset-0");
            }
            other => panic!("{other:?}"),
        }
        api.bookmark();
        assert_eq!(
            w.next().await.unwrap().unwrap(),
            WatchEvent::Progress(Revision(rev))
        );
    }
}

/// Host-local IPAM (`USE_POD_CIDR`), against the real API server: a node's pod CIDR arrives
/// as a block affine to it, with its IPIP tunnel address from the CIDR; an IPAMBlock in the
/// datastore is not read; deleting the node deletes its block.
#[tokio::test]
async fn with_pod_cidrs_the_nodes_cidrs_are_the_blocks() {
    let Some(cp) = common::kube::default().await else {
        return;
    };
    let admin = cp.admin().unwrap();
    let (client, _) = common::kube::typha_identity(&cp).await;
    let srv = start(
        Config::for_tests(),
        Arc::new(Kubernetes::with_pod_cidr(client, true)),
    )
    .await
    .unwrap();
    let stray = Resource::from_json(v3(
        "IPAMBlock",
        json!({"name": "10-99-0-0-26"}),
        json!({"cidr": "10.99.0.0/26", "affinity": "host:elsewhere", "allocations": [],
               "unallocated": [], "attributes": [], "deleted": false}),
    ))
    .unwrap();
    common::kube::put_crd(&admin, &stray).await;
    apply(
        &admin,
        json!({"apiVersion": "v1", "kind": "Node",
               "metadata": {"name": "node-p"},
               "spec": {"podCIDR": "10.244.7.0/24", "podCIDRs": ["10.244.7.0/24"]}}),
    )
    .await;
    let block = "/calico/ipam/v2/assignment/ipv4/block/10.244.7.0-24";
    let tunnel = "/calico/v1/host/node-p/config/IpInIpTunnelAddr";
    let mut p = Peer::connect(srv.addr).await;
    p.hello(Peer::offer("node-a", None)).await.unwrap();
    p.until("the node's pod CIDR as its block", |p| {
        p.state.contains_key(block) && p.status == Some(SyncStatus::InSync)
    })
    .await;
    let v = p.state.get(block).unwrap().decode().unwrap();
    let typha_protocol::model::Value::Block(b) = v else {
        panic!("{v:?}")
    };
    assert_eq!(b.affinity.as_deref(), Some("host:node-p"));
    assert_eq!(
        p.state.get(tunnel).map(|v| v.decode().unwrap()),
        Some(typha_protocol::model::Value::Config("10.244.7.1".into()))
    );
    assert!(
        !p.state.keys().any(|k| k.as_str().contains("10.99.0.0")),
        "IPAM blocks are not read with host-local IPAM"
    );
    delete(&admin, "v1", "Node", "", "node-p").await;
    p.until("the node's block deleted with it", |p| {
        !p.state.contains_key(block) && !p.state.contains_key(tunnel)
    })
    .await;
    srv.shutdown().await;
}

/// Resources as Calico's own writers store them (calicoctl, Calico's API server): labels and
/// name in the `projectcalico.org/metadata` annotation, the CRD's labels cleared. A network set
/// keeps its labels (policies select it by them), and a default-tier policy stored under the
/// pre-3.30 name `default.<name>` is served under its name.
#[tokio::test]
async fn resources_written_by_calicos_tools_keep_their_labels_and_names() {
    let Some(mut run) = Run::new().await else {
        return;
    };
    run.seed().await;
    let mut p = run.peer().await;
    run.converge(&mut p, "seeded").await;
    apply(
        &run.admin,
        json!({"apiVersion": "crd.projectcalico.org/v1", "kind": "GlobalNetworkSet",
               "metadata": {"name": "blocked", "annotations": {"projectcalico.org/metadata":
                   "{\"name\":\"blocked\",\"labels\":{\"role\":\"blocked\"},\"creationTimestamp\":null}"}},
               "spec": {"nets": ["192.0.2.0/24"]}}),
    )
    .await;
    apply(
        &run.admin,
        json!({"apiVersion": "crd.projectcalico.org/v1", "kind": "NetworkPolicy",
               "metadata": {"name": "default.web", "namespace": "web",
                            "annotations": {"projectcalico.org/metadata": "{\"creationTimestamp\":null}"}},
               "spec": {"tier": "default", "order": 10, "selector": "app == 'web'",
                        "types": ["Ingress"], "ingress": [{"action": "Allow"}]}}),
    )
    .await;
    for doc in [
        v3(
            "GlobalNetworkSet",
            json!({"name": "blocked", "labels": {"role": "blocked"}}),
            json!({"nets": ["192.0.2.0/24"]}),
        ),
        v3(
            "NetworkPolicy",
            json!({"name": "web", "namespace": "web"}),
            json!({"tier": "default", "order": 10, "selector": "app == 'web'",
                   "types": ["Ingress"], "ingress": [{"action": "Allow"}]}),
        ),
    ] {
        let r = Resource::from_json(doc).unwrap();
        run.want.insert(r.id(), r);
    }
    run.converge(&mut p, "resources in Calico's own storage form")
        .await;
    assert!(
        p.state
            .contains_key("/calico/v1/policy/NetworkPolicy/web/web"),
        "{:?}",
        p.state.keys().collect::<Vec<_>>()
    );
    run.srv.shutdown().await;
}

/// The peer reached InSync once: nothing on the way made it resync.
fn assert_no_resync(p: &Peer) {
    assert_eq!(
        p.statuses
            .iter()
            .filter(|s| **s == SyncStatus::InSync)
            .count(),
        1,
        "no resync on the way: {:?}",
        p.statuses
    );
}

/// What a Calico client of `syncer` holds once in sync with `srv`: key → the KV.
async fn calico_state(
    srv: &RunningServer,
    syncer: &str,
) -> BTreeMap<String, typha_client::calico::CalicoKv> {
    use typha_client::calico::{CalicoHello, Until, run};
    let tcp = tokio::net::TcpStream::connect(srv.addr).await.unwrap();
    let hello = CalicoHello::calico_node("node-1", syncer);
    run(tcp, &hello, Until::InSync, Duration::from_secs(20))
        .await
        .unwrap()
        .kvs
}

/// A Calico client gets what Calico's Kubernetes driver gives: each KV at its object's
/// resourceVersion (`<rv>/` for a namespace's profile), v3 resources with it as their resource
/// version too (none for a profile); a Node with its uid, creation time and
/// `projectcalico.org/kube-labels`; a namespace's profile with its allow rules and the
/// namespace's uid converted; an EndpointSlice with its generation; a CalicoNodeStatus with
/// the uid, creation time and generation Calico's node status reporter writes back.
#[tokio::test]
async fn calico_clients_get_calicos_revisions_and_metadata() {
    let Some(mut run) = Run::new().await else {
        return;
    };
    run.seed().await;
    run.put(v3(
        "CalicoNodeStatus",
        json!({"name": "node-1-status"}),
        json!({"node": "node-1", "classes": ["Agent"], "updatePeriodSeconds": 10}),
    ))
    .await;
    apply(
        &run.admin,
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
               "metadata": {"name": "api-1", "namespace": "web",
                            "labels": {"kubernetes.io/service-name": "api"}},
               "addressType": "IPv4",
               "endpoints": [{"addresses": ["10.0.1.5"]}], "ports": []}),
    )
    .await;
    run.refresh_services().await;
    let mut p = run.peer().await;
    run.converge(&mut p, "seeded").await;

    let get = |api_version: &str, kind: &str, ns: &str, name: &str| {
        let admin = run.admin.clone();
        let object = if ns.is_empty() {
            json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": name}})
        } else {
            json!({"apiVersion": api_version, "kind": kind,
                   "metadata": {"name": name, "namespace": ns}})
        };
        async move {
            let res = common::kube::resource(
                object["apiVersion"].as_str().unwrap(),
                object["kind"].as_str().unwrap(),
                &common::kube::plural_of(object["kind"].as_str().unwrap()),
            );
            let api: kube::Api<kube::api::DynamicObject> =
                match object["metadata"]["namespace"].as_str() {
                    Some(ns) => kube::Api::namespaced_with(admin, ns, &res),
                    None => kube::Api::all_with(admin, &res),
                };
            api.get(object["metadata"]["name"].as_str().unwrap())
                .await
                .unwrap()
        }
    };
    let node = get("v1", "Node", "", "node-1").await;
    let ns = get("v1", "Namespace", "", "web").await;
    let slice = get("discovery.k8s.io/v1", "EndpointSlice", "web", "api-1").await;
    let status = get(CRD, "CalicoNodeStatus", "", "node-1-status").await;
    let rv = |o: &kube::api::DynamicObject| o.metadata.resource_version.clone().unwrap();
    let json_of = |kv: &typha_client::calico::CalicoKv| -> Value {
        serde_json::from_slice(&kv.value).unwrap()
    };
    let v3_key = |plural: &str, name: &str| {
        format!("/calico/resources/v3/projectcalico.org/{plural}/{name}")
    };

    let felix = calico_state(&run.srv, "felix").await;
    let got = &felix[&v3_key("nodes", "node-1")];
    assert_eq!(
        (got.revision.clone(), got.v3_resource_version.clone()),
        (rv(&node), rv(&node))
    );
    let v = json_of(got);
    assert_eq!(v["metadata"]["uid"], json!(node.metadata.uid));
    assert_eq!(
        v["metadata"]["creationTimestamp"],
        json!(common::kube::created(&node.metadata))
    );
    assert_eq!(
        v["metadata"]["annotations"],
        json!({"projectcalico.org/kube-labels": r#"{"zone":"a"}"#})
    );

    let got = &felix[&v3_key("profiles", "kns.web")];
    let ns_rev = format!("{}/", rv(&ns));
    assert_eq!(
        (got.revision.as_str(), got.v3_resource_version.as_str()),
        (ns_rev.as_str(), "")
    );
    assert_eq!(
        felix["/calico/v1/policy/profile/kns.web/rules"].revision,
        ns_rev
    );
    let v = json_of(got);
    assert_eq!(
        v["metadata"],
        json!({"name": "kns.web",
               "uid": common::kube::calico_uid(ns.metadata.uid.as_deref().unwrap()),
               "creationTimestamp": common::kube::created(&ns.metadata)})
    );
    assert_eq!(
        v["spec"]["ingress"],
        json!([{"action": "Allow", "source": {}, "destination": {}}])
    );
    assert_eq!(
        v["spec"]["egress"],
        json!([{"action": "Allow", "source": {}, "destination": {}}])
    );
    let sa = &felix[&v3_key("profiles", "ksa.web.api")];
    assert!(
        sa.revision.starts_with('/') && sa.revision.len() > 1,
        "{}",
        sa.revision
    );

    let got = &felix[&v3_key("kubernetesendpointslices", "web/api-1")];
    assert_eq!(
        (got.revision.clone(), got.v3_resource_version.clone()),
        (rv(&slice), rv(&slice))
    );
    let v = json_of(got);
    assert_eq!(
        v["metadata"]["generation"],
        json!(slice.metadata.generation.unwrap())
    );
    assert_eq!(v["metadata"]["uid"], json!(slice.metadata.uid));

    let ns_syncer = calico_state(&run.srv, "node-status").await;
    let got = &ns_syncer[&v3_key("caliconodestatuses", "node-1-status")];
    assert_eq!(
        (got.revision.clone(), got.v3_resource_version.clone()),
        (rv(&status), rv(&status))
    );
    let v = json_of(got);
    assert_eq!(
        v["metadata"],
        json!({"name": "node-1-status",
               "uid": common::kube::calico_uid(status.metadata.uid.as_deref().unwrap()),
               "generation": status.metadata.generation.unwrap(),
               "creationTimestamp": common::kube::created(&status.metadata)})
    );
    run.srv.shutdown().await;
}

/// A control plane with Calico's kinds as `projectcalico.org/v3` CRDs only (Calico 3.32's
/// install without the aggregated API server; no `crd.projectcalico.org` at all): minimal CRDs
/// of ours, or Calico's own when `TYPHA_TEST_CALICO_V3_CRDS` names its `calico-v3-crds.yaml`
/// (`common::kube::v3_crds`). The admin, typha's client, and what the cluster holds before
/// the test writes.
async fn v3_only_cluster() -> Option<(
    ControlPlane,
    kube::Client,
    kube::Client,
    BTreeMap<ResourceId, Resource>,
)> {
    let cp = common::kube::start(typha_test_support::control_plane::Options {
        calico_crds: false,
        ..Default::default()
    })
    .await?;
    let admin = cp.admin().unwrap();
    let which = common::kube::v3_crds(&admin).await;
    eprintln!("projectcalico.org/v3: {which}");
    let (client, _) = common::kube::typha_identity(&cp).await;
    let want = common::kube::ambient(&admin)
        .await
        .into_iter()
        .map(|r| (r.id(), r))
        .collect();
    Some((cp, admin, client, want))
}

/// Writes `doc` (a v3 resource) as a `projectcalico.org/v3` object into `want`, as the API
/// server stored it.
async fn put_v3(admin: &kube::Client, want: &mut BTreeMap<ResourceId, Resource>, doc: Value) {
    let stored = common::kube::put_v3(admin, &Resource::from_json(doc).unwrap()).await;
    let r = common::kube::stored_v3(&stored);
    want.insert(r.id(), r);
}

/// Waits until `p` holds exactly `want`, in sync.
async fn converge_to(p: &mut Peer, want: &BTreeMap<ResourceId, Resource>, what: &str) {
    converge_within(p, want, what, common::WAIT).await;
}

async fn converge_within(
    p: &mut Peer,
    want: &BTreeMap<ResourceId, Resource>,
    what: &str,
    wait: Duration,
) {
    let want = digest_of(want.values());
    p.until_within(what, wait, |p| {
        p.digest.combined() == want.0 && p.status == Some(SyncStatus::InSync)
    })
    .await;
    assert_eq!(p.state.len(), want.1, "{what}");
}

/// Issue 39: a cluster with Calico 3.32's `projectcalico.org/v3` CRDs and no
/// `crd.projectcalico.org` group. With `CALICO_API_GROUP` unset the backend discovers them, as
/// Calico does, and serves policies, pools and sets from them, each with its metadata as stored
/// (its uid not converted: Calico converts uids only of `crd.projectcalico.org/v1` objects);
/// changes and deletions arrive through the v3 watches. A server told
/// `CALICO_API_GROUP=crd.projectcalico.org/v1` on the same cluster reads nothing there, and is
/// not ready, saying why, instead of serving an empty policy state as in sync.
#[tokio::test]
async fn a_cluster_with_only_calicos_v3_crds_is_read_from_them() {
    let Some((_cp, admin, client, mut want)) = v3_only_cluster().await else {
        return;
    };
    let ns = apply(
        &admin,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "web"}}),
    )
    .await;
    let r = common::kube::namespace_profile(&ns.metadata);
    want.insert(r.id(), r);
    let gnp = |order: u32| {
        v3(
            "GlobalNetworkPolicy",
            json!({"name": "deny-db"}),
            json!({"tier": "default", "order": order, "selector": "role == 'db'",
                   "types": ["Ingress"], "ingress": [{"action": "Deny"}]}),
        )
    };
    for doc in [pool(0), pool(1), policy(0, 0), gnp(10), global_set(0, 0)] {
        put_v3(&admin, &mut want, doc).await;
    }
    let ds = Kubernetes::new(client.clone())
        .await
        .with_crd_poll(Duration::from_millis(500));
    let srv = start(Config::for_tests(), Arc::new(ds)).await.unwrap();
    let mut p = Peer::connect(srv.addr).await;
    p.hello(Peer::offer("node-a", None)).await.unwrap();
    converge_to(&mut p, &want, "the v3 CRDs' resources").await;
    for key in [
        "/calico/v1/ipam/v4/pool/10.100.0.0-16",
        "/calico/v1/policy/NetworkPolicy/web/np-0",
        "/calico/v1/policy/GlobalNetworkPolicy/deny-db",
    ] {
        assert!(
            p.state.contains_key(key),
            "{key} in {:?}",
            p.state.keys().collect::<Vec<_>>()
        );
    }
    // The uid travels with the resources Calico's clients get as v3 objects: a BGP peer's is
    // the object's own, not converted as a crd.projectcalico.org/v1 object's would be.
    let tor = common::kube::put_v3(
        &admin,
        &Resource::from_json(v3(
            "BGPPeer",
            json!({"name": "tor"}),
            json!({"peerIP": "192.0.2.1", "asNumber": 64513}),
        ))
        .unwrap(),
    )
    .await;
    let r = common::kube::stored_v3(&tor);
    want.insert(r.id(), r);
    converge_to(&mut p, &want, "a BGP peer").await;
    let key = "/calico/resources/v3/projectcalico.org/bgppeers/tor";
    let Some(typha_protocol::model::Value::Resource(r)) =
        p.state.get(key).map(|v| v.decode().unwrap())
    else {
        panic!("{key} in {:?}", p.state.keys().collect::<Vec<_>>())
    };
    let uid = tor.metadata.uid.clone().unwrap();
    assert_eq!(r.detail.uid, uid, "the uid as stored");
    assert_ne!(common::kube::calico_uid(&uid), uid);

    put_v3(&admin, &mut want, policy(0, 1)).await;
    put_v3(&admin, &mut want, gnp(20)).await;
    delete(&admin, "projectcalico.org/v3", "IPPool", "", "pool-1").await;
    want.remove(&ResourceId::global(Kind::IpPool, "pool-1"));
    run_converge_no_resync(&mut p, &want, "changed and deleted through the v3 watches").await;

    // CALICO_API_GROUP=crd.projectcalico.org/v1 here: nothing of Calico's to read.
    let v1 = Kubernetes::new(client)
        .await
        .with_api_group(Some(CalicoGroup::V1));
    let wrong = start(Config::for_tests(), Arc::new(v1)).await.unwrap();
    eventually("the v1 server to say why it is not ready", || {
        wrong
            .freshness
            .view()
            .last_error
            .is_some_and(|e| e.contains("none of Calico's kinds"))
    })
    .await;
    let e = wrong.freshness.view().last_error.unwrap();
    assert!(
        e.contains("crd.projectcalico.org/v1 (as CALICO_API_GROUP says)"),
        "{e}"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        wrong.cache.latest().status,
        SyncStatus::WaitForDatastore,
        "never in sync on a group that holds nothing"
    );
    wrong.shutdown().await;
    srv.shutdown().await;
}

async fn run_converge_no_resync(p: &mut Peer, want: &BTreeMap<ResourceId, Resource>, what: &str) {
    converge_to(p, want, what).await;
    assert_no_resync(p);
}

/// `CALICO_API_GROUP` on a cluster with both of Calico's groups as CRDs (a migration to the v3
/// CRDs under way: Calico's classic CRDs, and v3 ones, each holding another pool). Unset, the
/// backend reads `crd.projectcalico.org/v1`, as Calico's discovery does when both are served;
/// `projectcalico.org/v3` reads the other. Once every `crd.projectcalico.org` CRD is removed
/// (the migration's end), the discovering server follows to `projectcalico.org/v3` by
/// itself, without a restart.
#[tokio::test]
async fn calico_api_group_chooses_the_group_and_discovery_follows_the_crds() {
    let Some(cp) = common::kube::default().await else {
        return;
    };
    let admin = cp.admin().unwrap();
    common::kube::v3_crds(&admin).await;
    let (client, _) = common::kube::typha_identity(&cp).await;
    let ambient: BTreeMap<ResourceId, Resource> = common::kube::ambient(&admin)
        .await
        .into_iter()
        .map(|r| (r.id(), r))
        .collect();
    let mut in_v1 = ambient.clone();
    let r = Resource::from_json(pool(1)).unwrap();
    let stored = common::kube::put_crd(&admin, &r).await;
    let mut r1 = r.clone();
    common::kube::crd_metadata(&mut r1, &stored);
    in_v1.insert(r1.id(), r1);
    let mut in_v3 = ambient.clone();
    put_v3(&admin, &mut in_v3, pool(3)).await;

    let discovering = Kubernetes::new(client.clone()).await;
    let v3_only = Kubernetes::new(client)
        .await
        .with_api_group(Some(CalicoGroup::V3));
    let (a, b) = (
        start(Config::for_tests(), Arc::new(discovering))
            .await
            .unwrap(),
        start(Config::for_tests(), Arc::new(v3_only)).await.unwrap(),
    );
    let mut pa = Peer::connect(a.addr).await;
    pa.hello(Peer::offer("node-a", None)).await.unwrap();
    converge_to(
        &mut pa,
        &in_v1,
        "unset, both served: crd.projectcalico.org/v1",
    )
    .await;
    let mut pb = Peer::connect(b.addr).await;
    pb.hello(Peer::offer("node-b", None)).await.unwrap();
    converge_to(&mut pb, &in_v3, "CALICO_API_GROUP=projectcalico.org/v3").await;

    // The end of a migration: every crd.projectcalico.org CRD goes.
    let crds: kube::Api<kube::api::DynamicObject> = kube::Api::all_with(
        admin.clone(),
        &common::kube::resource(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
        ),
    );
    let v1_crds: Vec<String> = crds
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|c| c.data["spec"]["group"] == "crd.projectcalico.org")
        .filter_map(|c| c.metadata.name)
        .collect();
    assert!(!v1_crds.is_empty());
    for name in &v1_crds {
        crds.delete(name, &Default::default()).await.unwrap();
    }
    // The API server deletes a CRD only once its objects are gone, which takes it a while on a
    // loaded machine: the server is held to noticing, not to the API server's pace.
    let gone = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let left = crds.list(&Default::default()).await.unwrap().items;
        if !left
            .iter()
            .any(|c| c.data["spec"]["group"] == "crd.projectcalico.org")
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < gone,
            "the API server did not delete the v1 CRDs within 120 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    converge_within(
        &mut pa,
        &in_v3,
        "the v1 CRDs removed: the discovering server reads projectcalico.org/v3",
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(a.cache.latest().status, SyncStatus::InSync);
    a.shutdown().await;
    b.shutdown().await;
}

/// `FELIX_INTERFACEPREFIX` through the real API server: a pod's workload endpoint is named with
/// the prefix given (the first of `eni,cali`), on the v3 CRDs as on the v1 ones.
#[tokio::test]
async fn pods_interfaces_take_the_interface_prefix() {
    let Some((_cp, admin, client, mut want)) = v3_only_cluster().await else {
        return;
    };
    for (ns, labels) in [("web", json!({}))] {
        let stored = apply(
            &admin,
            json!({"apiVersion": "v1", "kind": "Namespace",
                   "metadata": {"name": ns, "labels": labels}}),
        )
        .await;
        let r = common::kube::namespace_profile(&stored.metadata);
        want.insert(r.id(), r);
    }
    let sa = apply(
        &admin,
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": "api", "namespace": "web", "labels": {"tier": "db"}}}),
    )
    .await;
    let r = common::kube::service_account_profile(&sa.metadata);
    want.insert(r.id(), r);
    put_v3(&admin, &mut want, pool(0)).await;
    let api_1 = pod("api-1", false);
    apply(&admin, api_1.clone()).await;
    set_status(&admin, &api_1, running(Some("10.0.0.7"))).await;
    let wep = endpoint("api-1", "10.0.0.7", "eni81deba30cdc");
    want.insert(wep.id(), wep);
    let prefix = InterfacePrefix::from_setting("eni,cali").unwrap();
    let ds = Kubernetes::new(client).await.with_interface_prefix(prefix);
    let srv = start(Config::for_tests(), Arc::new(ds)).await.unwrap();
    let mut p = Peer::connect(srv.addr).await;
    p.hello(Peer::offer("node-a", None)).await.unwrap();
    converge_to(&mut p, &want, "the pod's endpoint, its interface eni…").await;
    let interface = p.state.iter().find_map(|(k, v)| match v.decode().unwrap() {
        typha_protocol::model::Value::WorkloadEndpoint(w) if k.to_string().contains("api-1") => {
            Some(w.name)
        }
        _ => None,
    });
    assert_eq!(interface.as_deref(), Some("eni81deba30cdc"));
    srv.shutdown().await;
}
