//! The Kubernetes backend through the real server to a raw protocol client, against a fixture
//! API server (`common::k8s_fixture`: there is no kube-apiserver binary here, so the API server
//! is a fake that speaks list and watch as the real one does, with one revision counter,
//! compaction with 410 Gone, and bookmarks). The backend uses kube's real `Client` over HTTP.
//! Expected states are written by hand as Calico v3 resources, independently of the backend's
//! conversion.

// In tests a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use common::k8s_fixture::ApiServer;
use common::{Peer, digest_of, eventually, metric};
use futures_util::StreamExt;
use serde_json::{Value, json};
use typha_protocol::model::{Revision, SyncStatus};
use typha_server::calico::v3::{Resource, ResourceId};
use typha_server::config::Config;
use typha_server::datastore::kubernetes::Kubernetes;
use typha_server::datastore::{Datastore, WatchEvent};
use typha_server::server::{RunningServer, start};

const CRD: &str = "crd.projectcalico.org/v1";

/// The API server, the server over the backend, and what the client must end up with.
struct Run {
    api: ApiServer,
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

fn plural(doc: &Value) -> String {
    let kind = doc["kind"].as_str().unwrap();
    match kind {
        "NetworkPolicy" => "networkpolicies".into(),
        "GlobalNetworkPolicy" => "globalnetworkpolicies".into(),
        _ => format!("{}s", kind.to_lowercase()),
    }
}

impl Run {
    async fn new() -> Run {
        let api = ApiServer::start().await;
        let ds = Kubernetes::new(api.client()).await;
        let srv = start(Config::for_tests(), Arc::new(ds)).await.unwrap();
        Run {
            api,
            srv,
            want: BTreeMap::new(),
        }
    }

    /// Writes a Calico resource as its CRD.
    fn put(&mut self, doc: Value) {
        let r = Resource::from_json(doc.clone()).unwrap();
        let mut crd = doc.clone();
        crd["apiVersion"] = CRD.into();
        self.api.put(&plural(&doc), crd);
        self.want.insert(r.id(), r);
    }

    fn delete(&mut self, doc: Value) {
        let r = Resource::from_json(doc.clone()).unwrap();
        let ns = r.metadata.namespace.clone().unwrap_or_default();
        self.api.delete(CRD, &plural(&doc), &ns, &r.metadata.name);
        self.want.remove(&r.id());
    }

    /// Writes a namespace, and the profile it must become.
    fn namespace(&mut self, name: &str, labels: Value) {
        self.api.put(
            "namespaces",
            json!({"apiVersion": "v1", "kind": "Namespace",
                   "metadata": {"name": name, "labels": labels}}),
        );
        let mut apply = json!({"pcns.projectcalico.org/name": name});
        for (k, v) in labels.as_object().unwrap() {
            apply[format!("pcns.{k}")] = v.clone();
        }
        let doc = v3(
            "Profile",
            json!({"name": format!("kns.{name}")}),
            json!({"ingress": [{"action": "Allow"}], "egress": [{"action": "Allow"}],
                   "labelsToApply": apply}),
        );
        let r = Resource::from_json(doc).unwrap();
        self.want.insert(r.id(), r);
    }

    /// Writes a service account, and the profile it must become.
    fn service_account(&mut self, ns: &str, name: &str) {
        self.api.put(
            "serviceaccounts",
            json!({"apiVersion": "v1", "kind": "ServiceAccount",
                   "metadata": {"name": name, "namespace": ns, "labels": {"tier": "db"}}}),
        );
        let doc = v3(
            "Profile",
            json!({"name": format!("ksa.{ns}.{name}")}),
            json!({"labelsToApply": {"pcsa.projectcalico.org/name": name, "pcsa.tier": "db"}}),
        );
        let r = Resource::from_json(doc).unwrap();
        self.want.insert(r.id(), r);
    }

    /// Writes a node, and the Calico node it must become.
    fn node(&mut self, name: &str, ip: &str) {
        self.api.put(
            "nodes",
            json!({"apiVersion": "v1", "kind": "Node",
                   "metadata": {"name": name, "labels": {"zone": "a"},
                                "annotations": {"projectcalico.org/IPv4Address": format!("{ip}/24")}},
                   "status": {"addresses": [{"type": "InternalIP", "address": ip},
                                            {"type": "Hostname", "address": name}]}}),
        );
        let doc = v3(
            "Node",
            json!({"name": name, "labels": {"zone": "a"}}),
            json!({"bgp": {"ipv4Address": format!("{ip}/24")},
                   "addresses": [{"address": format!("{ip}/24"), "type": "CalicoNodeIP"},
                                 {"address": ip, "type": "InternalIP"}]}),
        );
        let r = Resource::from_json(doc).unwrap();
        self.want.insert(r.id(), r);
    }

    fn seed(&mut self) {
        self.node("node-1", "172.16.0.5");
        self.namespace("web", json!({"team": "a"}));
        self.service_account("web", "api");
        for i in 0..3 {
            self.put(global_set(i, 0));
            self.put(policy(i, 0));
        }
        self.put(pool(0));
        self.put(host_endpoint(0));
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
    let mut run = Run::new().await;
    run.seed();
    let mut p = run.peer().await;
    run.converge(&mut p, "the initial sync").await;
    assert_eq!(p.first_after_hello, Some("snapshot"));
    assert!(run.want.len() >= 10);
    run.srv.shutdown().await;
}

#[tokio::test]
async fn creates_updates_and_deletes_arrive() {
    let mut run = Run::new().await;
    run.seed();
    let mut p = run.peer().await;
    run.converge(&mut p, "the initial sync").await;

    run.put(global_set(7, 1));
    run.converge(&mut p, "a set created").await;
    run.put(global_set(7, 2));
    run.put(policy(1, 5));
    run.converge(&mut p, "a set and a policy updated").await;
    run.delete(global_set(7, 2));
    run.delete(pool(0));
    run.converge(&mut p, "a set and a pool deleted").await;
    run.namespace("web", json!({"team": "b", "env": "prod"}));
    run.service_account("web", "worker");
    run.converge(&mut p, "namespace relabelled, service account added")
        .await;
    run.node("node-1", "172.16.0.9");
    run.converge(&mut p, "node readdressed").await;
    run.api.delete("v1", "serviceaccounts", "web", "api");
    run.want.remove(&ResourceId::global(
        typha_server::calico::v3::Kind::Profile,
        "ksa.web.api",
    ));
    run.converge(&mut p, "service account deleted").await;
    run.srv.shutdown().await;
}

#[tokio::test]
async fn gone_relists_with_no_lost_and_no_phantom_keys() {
    let mut run = Run::new().await;
    run.seed();
    let mut p = run.peer().await;
    run.converge(&mut p, "the initial sync").await;
    let lists = run.api.lists();

    // While the watches are cut, things change and the history is compacted away.
    run.api.set_down(true);
    run.put(global_set(9, 3));
    run.put(policy(0, 8));
    run.delete(policy(2, 0));
    run.delete(global_set(1, 0));
    run.api.compact();
    run.api.set_down(false);

    run.converge(&mut p, "after the relist").await;
    assert!(run.api.lists() > lists, "410 made the backend list again");

    // And the watch after the relist works.
    run.put(global_set(10, 1));
    run.converge(&mut p, "a change after the relist").await;
    run.srv.shutdown().await;
}

/// Only sets change (every other type's watch stays at the listing's revision), then,
/// with or without a bookmark to move every type's watch along, history is compacted and the
/// API server drops the watches. Returns the run and its listing count before the outage,
/// once a change after it has arrived.
async fn outage_after_compaction(bookmark: bool) -> (Run, usize) {
    let mut run = Run::new().await;
    run.seed();
    let mut p = run.peer().await;
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

#[tokio::test]
async fn an_object_that_does_not_convert_is_invalid_and_the_rest_is_served() {
    let mut run = Run::new().await;
    run.seed();
    run.api.put(
        "globalnetworksets",
        json!({"apiVersion": CRD, "kind": "GlobalNetworkSet",
               "metadata": {"name": "bad"}, "spec": {"nets": 5}}),
    );
    let mut p = run.peer().await;
    run.converge(&mut p, "the initial sync without the bad set")
        .await;
    assert!(metric(&run.srv, "typha_updates_invalid_total") >= 1.0);

    // A bad update to a good object removes it; fixing it brings it back.
    run.api.put(
        "globalnetworksets",
        json!({"apiVersion": CRD, "kind": "GlobalNetworkSet",
               "metadata": {"name": "gset-0"}, "spec": {"nets": "nope"}}),
    );
    let gone = Resource::from_json(global_set(0, 0)).unwrap().id();
    run.want.remove(&gone);
    run.converge(&mut p, "the set made invalid is gone").await;
    run.put(global_set(0, 4));
    run.converge(&mut p, "the set fixed").await;
    run.srv.shutdown().await;
}

fn pod(name: &str, ip: Option<&str>, host_network: bool) -> Value {
    let ips: Vec<Value> = ip.iter().map(|ip| json!({"ip": ip})).collect();
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "web", "labels": {"app": "api"}},
           "spec": {"nodeName": "node-1", "serviceAccountName": "api", "hostNetwork": host_network,
                    "containers": [{"name": "c"}]},
           "status": {"phase": "Running", "podIPs": ips}})
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
    let mut run = Run::new().await;
    run.seed();
    run.api.put("pods", pod("api-1", None, false));
    run.api
        .put("pods", pod("host-agent", Some("192.0.2.10"), true));
    let mut p = run.peer().await;
    run.converge(&mut p, "pending and host-networked pods are not endpoints")
        .await;

    run.api.put("pods", pod("api-1", Some("10.0.0.7"), false));
    let wep = endpoint("api-1", "10.0.0.7", "cali81deba30cdc");
    run.want.insert(wep.id(), wep.clone());
    run.converge(&mut p, "the pod got its address").await;

    run.api.put("pods", pod("api-1", None, false));
    run.want.remove(&wep.id());
    run.converge(&mut p, "the pod lost its address").await;

    run.api.put("pods", pod("api-1", Some("10.0.0.8"), false));
    let wep = endpoint("api-1", "10.0.0.8", "cali81deba30cdc");
    run.want.insert(wep.id(), wep.clone());
    run.converge(&mut p, "and got another").await;

    run.api.delete("v1", "pods", "web", "api-1");
    run.want.remove(&wep.id());
    run.converge(&mut p, "the pod deleted").await;
    run.srv.shutdown().await;
}

#[tokio::test]
async fn kubernetes_network_policies_are_served_as_calicos() {
    let mut run = Run::new().await;
    run.seed();
    run.api.put(
        "networkpolicies",
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
               "metadata": {"name": "deny-all", "namespace": "web"},
               "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}}),
    );
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

    run.api
        .delete("networking.k8s.io/v1", "networkpolicies", "web", "deny-all");
    run.want.remove(&knp.id());
    run.converge(&mut p, "the policy deleted").await;
    run.srv.shutdown().await;
}

#[tokio::test]
async fn lists_are_paged() {
    let api = ApiServer::start().await;
    let mut want = BTreeMap::new();
    for i in 0..25 {
        let mut d = global_set(i, 0);
        let r = Resource::from_json(d.clone()).unwrap();
        want.insert(r.id(), r);
        d["apiVersion"] = CRD.into();
        api.put("globalnetworksets", d);
    }
    let ds = Kubernetes::new(api.client()).await.with_page_size(4);
    let listing = ds.list().await.unwrap();
    assert!(api.continued() >= 6, "25 sets in pages of 4");
    let got: BTreeMap<ResourceId, Resource> = listing
        .items
        .into_iter()
        .map(|i| {
            let r = i.unwrap();
            (r.id(), r)
        })
        .collect();
    assert_eq!(digest_of(got.values()), digest_of(want.values()));
}
