//! The cluster every scenario runs against: generated from a few numbers, the same for the same
//! numbers, written out as manifests for the server's embedded datastore.

use std::path::Path;

/// The generated cluster: `nodes` nodes with `pods` pods each, 20 namespaces of 8
/// deployments, 200 policies, a BGPConfiguration `default`, three BGPPeers (one naming a
/// BGPFilter), the BGPFilter and a CalicoNodeStatus (compared side by side with Calico's Typha
/// by `loadtest calico`). The churn
/// rewrites its workload endpoints.
pub(crate) fn cluster_spec(nodes: usize, pods: usize) -> typha_server::sample::Spec {
    typha_server::sample::Spec {
        nodes: nodes.max(1),
        pods_per_node: pods.max(1),
        namespaces: 20,
        deployments_per_namespace: 8,
        policies: 200,
        seed: 1,
    }
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
