//! The cluster, through the API server: the Service's EndpointSlice, the nodes, the churn, and
//! the state the agents must reach, read back independently of the backend's conversion.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;
use typha_server::calico::v3::Resource;

use super::common;
use super::replicas::Replica;
use super::{NODES, NS, REPLICAS, SERVICE, SYNC_PORT, TOLERANCE};

/// The EndpointSlice as the EndpointSlice controller would write it: each replica that
/// exists, ready or terminating.
pub(crate) async fn publish(admin: &kube::Client, ready: [Option<bool>; 3]) {
    let endpoints: Vec<Value> = ready
        .iter()
        .enumerate()
        .filter_map(|(k, r)| {
            let r = (*r)?;
            Some(json!({"addresses": [REPLICAS[k]],
                        "conditions": {"ready": r, "serving": r, "terminating": !r},
                        "nodeName": format!("node-{k:03}")}))
        })
        .collect();
    common::kube::apply(
        admin,
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
               "metadata": {"name": "calico-typha-x7k2p", "namespace": NS,
                            "labels": {"kubernetes.io/service-name": SERVICE}},
               "addressType": "IPv4",
               "ports": [{"name": "calico-typha", "port": SYNC_PORT, "protocol": "TCP"}],
               "endpoints": endpoints}),
    )
    .await;
}

pub(crate) fn node_ip(i: usize) -> String {
    format!("172.16.{}.{}/16", i / 250, i % 250 + 1)
}

pub(crate) fn node(i: usize, generation: u64) -> Value {
    json!({"apiVersion": "v1", "kind": "Node",
           "metadata": {"name": format!("node-{i:03}"),
                        "labels": {"zone": format!("z{}", i % 3), "gen": generation.to_string()},
                        "annotations": {"projectcalico.org/IPv4Address": node_ip(i)}}})
}

pub(crate) fn network_set(i: u64, generation: u64) -> Value {
    json!({"apiVersion": "crd.projectcalico.org/v1", "kind": "GlobalNetworkSet",
           "metadata": {"name": format!("churn-{i}"), "labels": {"gen": generation.to_string()}},
           "spec": {"nets": [format!("198.51.100.{}/32", generation % 256)]}})
}

/// Changes the cluster through the API until stopped: a node relabelled every 100 ms, a
/// GlobalNetworkSet created or replaced every 300 ms and one deleted every 700 ms. The number
/// of writes.
pub(crate) async fn churn(
    admin: kube::Client,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> u64 {
    let mut writes = 0;
    let mut round: u64 = 0;
    let sets = |c: &kube::Client| {
        kube::Api::<kube::api::DynamicObject>::all_with(
            c.clone(),
            &common::kube::resource(
                "crd.projectcalico.org/v1",
                "GlobalNetworkSet",
                "globalnetworksets",
            ),
        )
    };
    while !*stop.borrow() {
        round += 1;
        let i = usize::try_from(round * 7).unwrap() % NODES;
        common::kube::apply(&admin, node(i, round)).await;
        writes += 1;
        if round.is_multiple_of(3) {
            common::kube::apply(&admin, network_set(round % 11, round)).await;
            writes += 1;
        }
        if round.is_multiple_of(7) {
            let name = format!("churn-{}", (round / 7) % 11);
            if sets(&admin)
                .delete(&name, &kube::api::DeleteParams::default())
                .await
                .is_ok()
            {
                writes += 1;
            }
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(100)) => {}
            _ = stop.changed() => {}
        }
    }
    writes
}

/// The cluster's Calico state as the test reads it back from the API server (independently
/// of the backend's conversion): the digest agents must reach, and its KV count.
pub(crate) async fn datastore_digest(admin: &kube::Client) -> (u64, usize) {
    let mut all = common::kube::ambient(admin).await;
    all.extend(common::kube::calico_resources(admin).await);
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(admin.clone());
    for n in nodes.list(&Default::default()).await.unwrap() {
        let ip = n.metadata.annotations.as_ref().unwrap()["projectcalico.org/IPv4Address"].clone();
        // Calico's metadata for it: the node's uid and creation time, and its labels again in
        // `projectcalico.org/kube-labels` (as Go's json.Marshal writes a map).
        let kube_labels = serde_json::to_string(&n.metadata.labels).unwrap();
        all.push(
            Resource::from_json(json!({
                "apiVersion": "projectcalico.org/v3", "kind": "Node",
                "metadata": {"name": n.metadata.name, "labels": n.metadata.labels,
                             "uid": n.metadata.uid,
                             "creationTimestamp": common::kube::created(&n.metadata),
                             "annotations": {"projectcalico.org/kube-labels": kube_labels}},
                "spec": {"bgp": {"ipv4Address": ip},
                         "orchRefs": [{"nodeName": n.metadata.name, "orchestrator": "k8s"}],
                         "addresses": [{"address": ip, "type": "CalicoNodeIP"}]}}))
            .unwrap(),
        );
    }
    common::digest_of(&all)
}

/// Waits until the replicas' loads are each within the tolerance of the mean of `total`;
/// the loads.
pub(crate) async fn until_balanced(
    replicas: &[&Replica],
    total: usize,
    within: Duration,
) -> Vec<usize> {
    let mean = total as f64 / replicas.len() as f64;
    let (lo, hi) = (mean * (1.0 - TOLERANCE), mean * (1.0 + TOLERANCE));
    let deadline = Instant::now() + within;
    loop {
        let mut loads = Vec::new();
        for r in replicas {
            loads.push(r.load().await);
        }
        if loads.iter().sum::<usize>() == total
            && loads.iter().all(|&l| (lo..=hi).contains(&(l as f64)))
        {
            return loads;
        }
        assert!(
            Instant::now() < deadline,
            "not balanced within {within:?}: loads {loads:?}, want {lo:.0}..={hi:.0} each"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
