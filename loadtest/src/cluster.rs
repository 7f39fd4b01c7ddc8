//! The cluster every scenario runs against: generated from a few numbers, the same for the same
//! numbers, written out as manifests for the server's embedded datastore.

use std::path::Path;

/// The generated cluster: `nodes` nodes with `pods` pods each, 20 namespaces of 8
/// deployments, 200 policies, a BGPConfiguration `default`, three BGPPeers (one naming a
/// BGPFilter), the BGPFilter and a CalicoNodeStatus (compared side by side with Calico's Typha
/// by `loadtest calico`). The churn
/// rewrites its workload endpoints.
pub(crate) fn cluster_spec(nodes: usize, pods: usize) -> typha_test_support::sample::Spec {
    typha_test_support::sample::Spec {
        nodes: nodes.max(1),
        pods_per_node: pods.max(1),
        namespaces: 20,
        deployments_per_namespace: 8,
        policies: 200,
        seed: 1,
    }
}

/// What every ephemeral pod's name starts with, and so every key path of its workload
/// endpoint holds (`/calico/v1/host/<node>/workload/k8s/<ns>/<pod>/endpoint/eth0`): the
/// mixed churn creates and deletes only these, so a node can tell a deletion the churn wrote
/// from one it must never see. No name of the generated cluster contains it.
pub(crate) const EPHEMERAL_MARKER: &str = "loadtest-ephemeral-";

/// Ephemeral pod `k` of the mixed churn: a workload endpoint on node `k % nodes`, shaped as
/// the cluster's own pods (an address of its node's block beyond theirs), named
/// `loadtest-ephemeral-<k>`.
pub(crate) fn ephemeral_pod(
    spec: &typha_test_support::sample::Spec,
    k: u64,
) -> anyhow::Result<typha_server::calico::v3::Resource> {
    let node = (k % spec.nodes as u64) as usize;
    let spare = 256usize.saturating_sub(spec.pods_per_node).max(1);
    let slot = spec.pods_per_node + (k / spec.nodes as u64) as usize % spare;
    let mut v = spec.workload_endpoint(node, slot, k + 1).to_json();
    let pod = format!("{EPHEMERAL_MARKER}{k}");
    let host = typha_test_support::sample::node_name(node).replace('-', "--");
    v["metadata"]["name"] = format!("{host}-k8s-{}-eth0", pod.replace('-', "--")).into();
    v["spec"]["pod"] = pod.into();
    Ok(typha_server::calico::v3::Resource::from_json(v)?)
}

/// Writes the generated cluster as manifests of 250 resources each (`List`s): small files keep
/// the server's transient parsing memory small.
pub(crate) fn write_cluster(dir: &Path, nodes: usize, pods: usize) -> anyhow::Result<()> {
    let spec = cluster_spec(nodes, pods);
    std::fs::create_dir_all(dir)?;
    for (i, chunk) in spec.resources().chunks(250).enumerate() {
        let items: Vec<serde_json::Value> = chunk.iter().map(|r| r.to_json()).collect();
        let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items});
        std::fs::write(
            dir.join(format!("cluster-{i:05}.json")),
            serde_json::to_vec(&list)?,
        )?;
    }
    Ok(())
}
