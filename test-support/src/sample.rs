//! A realistic Kubernetes cluster as Calico v3 resources, generated deterministically from a
//! few parameters: for tests, for `loadtest` (which writes it out as manifests for the
//! embedded datastore) and for demos.

use serde_json::json;

use typha_protocol::sample::{APPS, Rng};
use typha_server::calico::v3::Resource;

/// The shape of a generated cluster.
#[derive(Debug, Clone)]
pub struct Spec {
    /// Nodes.
    pub nodes: usize,
    /// Workload endpoints (pods) per node.
    pub pods_per_node: usize,
    /// Namespaces.
    pub namespaces: usize,
    /// Deployments per namespace (pods are spread over them).
    pub deployments_per_namespace: usize,
    /// NetworkPolicies (spread over namespaces).
    pub policies: usize,
    /// Seed: same spec and seed, same cluster.
    pub seed: u64,
}

impl Default for Spec {
    fn default() -> Self {
        Self {
            nodes: 10,
            pods_per_node: 30,
            namespaces: 10,
            deployments_per_namespace: 6,
            policies: 20,
            seed: 1,
        }
    }
}

/// Node `i`'s name (EC2 style, the same names as the protocol crate's sample data).
pub fn node_name(i: usize) -> String {
    typha_protocol::sample::Cluster::node_name(i)
}

/// Namespace `i`'s name.
pub fn namespace(i: usize) -> String {
    const NAMES: &[&str] = &[
        "default",
        "prod",
        "staging",
        "payments",
        "web",
        "data",
        "platform",
        "monitoring",
        "search",
        "batch",
    ];
    NAMES
        .get(i)
        .map_or_else(|| format!("team-{i}"), |n| (*n).to_owned())
}

fn must(v: serde_json::Value) -> Resource {
    // Every document here is built from fixed templates; a failure is a bug in this file.
    Resource::from_json(v).unwrap_or_else(|e| panic!("sample resource does not parse: {e}"))
}

impl Spec {
    fn deployment(&self, n: usize) -> (String, String, String) {
        let ns = namespace(n / self.deployments_per_namespace.max(1) % self.namespaces.max(1));
        let app = APPS.get(n % APPS.len()).copied().unwrap_or("app");
        let mut rng = Rng::new(self.seed ^ (n as u64).wrapping_mul(0x9e37));
        (ns, app.to_owned(), rng.k8s_suffix(10))
    }

    /// Pod `pod` of node `node`: its namespace, app, replica set and name.
    fn pod_identity(&self, node: usize, pod: usize) -> (String, String, String, String, Rng) {
        let mut rng =
            Rng::new(self.seed ^ ((node as u64) << 32) ^ (pod as u64).wrapping_mul(0x2545_f491));
        let deployments = (self.namespaces * self.deployments_per_namespace).max(1);
        let (ns, app, rs) = self.deployment(rng.below(deployments as u64) as usize);
        let pod_name = format!("{app}-{rs}-{}", rng.k8s_suffix(5));
        (ns, app, rs, pod_name, rng)
    }

    /// Node `node`'s IPAM block as Calico's IPAM writes it: its first `pods_per_node`
    /// addresses allocated to the node's pods, each with its handle and owner.
    pub fn ipam_block(&self, node: usize) -> Resource {
        must(self.ipam_block_document(node))
    }

    /// [`Spec::ipam_block`] as its JSON document.
    fn ipam_block_document(&self, node: usize) -> serde_json::Value {
        let name = node_name(node);
        let pods = self.pods_per_node.min(256);
        let attributes: Vec<serde_json::Value> = (0..pods)
            .map(|pod| {
                let (ns, _, _, pod_name, _) = self.pod_identity(node, pod);
                let container = format!(
                    "{:016x}{:016x}{:016x}{:016x}",
                    self.seed ^ node as u64,
                    pod as u64,
                    (node as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15),
                    (pod as u64).wrapping_mul(0xc2b2_ae3d_27d4_eb4f)
                );
                json!({"handle_id": format!("k8s-pod-network.{container}"),
                       "secondary": {"namespace": ns, "node": name, "pod": pod_name,
                                     "timestamp": "2026-11-24 12:00:00.000000000 +0000 UTC"}})
            })
            .collect();
        json!({"apiVersion": "crd.projectcalico.org/v1", "kind": "IPAMBlock",
            "metadata": {"name": format!("10-{}-{}-0-24", 128 + node / 256, node % 256)},
            "spec": {"cidr": format!("10.{}.{}.0/24", 128 + node / 256, node % 256),
                     "affinity": format!("host:{name}"),
                     "allocations": (0..256).map(|a| if a < pods { Some(a) } else { None }).collect::<Vec<_>>(),
                     "unallocated": (pods..256).collect::<Vec<_>>(),
                     "attributes": attributes,
                     "sequenceNumber": pods,
                     "sequenceNumberForAllocation": (0..pods).map(|a| (a.to_string(), json!(a + 1))).collect::<serde_json::Map<_, _>>()}})
    }

    /// Pod `pod` on node `node`; `generation` changes its labels (for churn).
    pub fn workload_endpoint(&self, node: usize, pod: usize, generation: u64) -> Resource {
        must(self.workload_endpoint_document(node, pod, generation))
    }

    /// [`Spec::workload_endpoint`] as its JSON document.
    fn workload_endpoint_document(
        &self,
        node: usize,
        pod: usize,
        generation: u64,
    ) -> serde_json::Value {
        let (ns, app, rs, pod_name, mut rng) = self.pod_identity(node, pod);
        let node_name = node_name(node);
        let ip =
            u32::from(std::net::Ipv4Addr::new(10, 128, 0, 0)) + (node * 256 + pod % 256) as u32;
        let sa = if app.len() % 2 == 0 {
            "default".to_owned()
        } else {
            app.clone()
        };
        json!({
            "apiVersion": "projectcalico.org/v3",
            "kind": "WorkloadEndpoint",
            "metadata": {
                "name": format!("{}-k8s-{}-eth0", node_name.replace('-', "--"), pod_name.replace('-', "--")),
                "namespace": ns,
                "generateName": format!("{app}-{rs}-"),
                "labels": {
                    "app": app,
                    "pod-template-hash": rs,
                    "generation": generation.to_string(),
                    "projectcalico.org/namespace": ns,
                    "projectcalico.org/orchestrator": "k8s",
                    "projectcalico.org/serviceaccount": sa,
                },
            },
            "spec": {
                "orchestrator": "k8s",
                "node": node_name,
                "pod": pod_name,
                "endpoint": "eth0",
                "serviceAccountName": sa,
                "interfaceName": format!("cali{}", rng.hex(11)),
                "ipNetworks": [format!("{}/32", std::net::Ipv4Addr::from(ip))],
                "profiles": [format!("kns.{ns}"), format!("ksa.{ns}.{sa}")],
                "ports": [{"name": "http", "protocol": "TCP", "port": 8080}],
            },
        })
    }

    /// Everything: cluster info, config, pool, BGP settings and peers, a node status request,
    /// nodes, blocks, profiles, policies, endpoints.
    pub fn resources(&self) -> Vec<Resource> {
        self.documents().into_iter().map(must).collect()
    }

    /// [`Spec::resources`] as their JSON documents, in the same order. typha-server's own
    /// unit tests parse these: the [`Resource`]s this crate makes are those of the typha-server
    /// library it links, which is not the crate a unit test compiles.
    pub fn documents(&self) -> Vec<serde_json::Value> {
        let mut out = vec![
            json!({"apiVersion": "projectcalico.org/v3", "kind": "ClusterInformation", "metadata": {"name": "default"},
                "spec": {"clusterGUID": format!("{:032x}", self.seed), "clusterType": "typha,kdd,k8s", "calicoVersion": "v3.32.0", "datastoreReady": true}}),
            json!({"apiVersion": "projectcalico.org/v3", "kind": "FelixConfiguration", "metadata": {"name": "default"},
                "spec": {"logSeverityScreen": "Info", "reportingInterval": "0s", "bpfEnabled": false}}),
            json!({"apiVersion": "projectcalico.org/v3", "kind": "IPPool", "metadata": {"name": "default-ipv4-ippool"},
                "spec": {"cidr": "10.128.0.0/9", "vxlanMode": "CrossSubnet", "natOutgoing": true, "blockSize": 24}}),
            json!({"apiVersion": "projectcalico.org/v3", "kind": "GlobalNetworkSet", "metadata": {"name": "blocked-ranges", "labels": {"role": "blocked"}},
                "spec": {"nets": ["198.51.100.0/24", "203.0.113.0/24"]}}),
            json!({"apiVersion": "projectcalico.org/v3", "kind": "GlobalNetworkPolicy", "metadata": {"name": "deny-blocked-ranges"},
                "spec": {"order": 10, "selector": "all()", "types": ["Ingress"],
                         "ingress": [{"action": "Deny", "source": {"selector": "role == 'blocked'"}}]}}),
        ];
        // BGP as a cluster with route reflectors and top-of-rack peers has it (the first
        // peer exports through a BGPFilter), and one node status request: what confd and the
        // node status reporter read. The filter uses only fields every Calico release with
        // BGPFilters has, so the sample can be written to any cluster's CRDs as it is.
        out.push(
            json!({"apiVersion": "projectcalico.org/v3", "kind": "BGPConfiguration", "metadata": {"name": "default"},
            "spec": {"logSeverityScreen": "Info", "nodeToNodeMeshEnabled": false, "asNumber": 64512,
                     "serviceClusterIPs": [{"cidr": "10.96.0.0/12"}], "listenPort": 179}}),
        );
        out.push(json!({"apiVersion": "projectcalico.org/v3", "kind": "BGPFilter",
            "metadata": {"name": "export-pods-only"},
            "spec": {"exportV4": [{"cidr": "10.128.0.0/9", "matchOperator": "In", "action": "Accept"},
                                  {"action": "Reject"}],
                     "importV4": [{"cidr": "10.128.0.0/9", "matchOperator": "In", "action": "Reject"}]}}));
        for rack in 0..3 {
            let filters: &[&str] = if rack == 0 {
                &["export-pods-only"]
            } else {
                &[]
            };
            out.push(json!({"apiVersion": "projectcalico.org/v3", "kind": "BGPPeer",
                "metadata": {"name": format!("rack-{rack}-tor")},
                "spec": {"nodeSelector": format!("rack == 'r{rack}'"), "peerIP": format!("10.255.{rack}.1"),
                         "asNumber": 65000 + rack, "keepOriginalNextHop": true, "filters": filters}}));
        }
        out.push(json!({"apiVersion": "projectcalico.org/v3", "kind": "CalicoNodeStatus",
            "metadata": {"name": format!("{}-status", node_name(0))},
            "spec": {"node": node_name(0), "classes": ["Agent", "BGP", "Routes"], "updatePeriodSeconds": 60}}));
        for i in 0..self.nodes {
            let name = node_name(i);
            let ip = format!("10.{}.{}.{}", 20 + i / 65536, (i / 256) % 256, i % 256);
            out.push(json!({"apiVersion": "projectcalico.org/v3", "kind": "Node", "metadata": {"name": name},
                "spec": {"bgp": {"ipv4Address": format!("{ip}/16")}, "addresses": [{"address": ip, "type": "InternalIP"}]}}));
            out.push(self.ipam_block_document(i));
        }
        for n in 0..self.namespaces {
            let ns = namespace(n);
            out.push(json!({"apiVersion": "projectcalico.org/v3", "kind": "Profile", "metadata": {"name": format!("kns.{ns}")},
                "spec": {"ingress": [{"action": "Allow"}], "egress": [{"action": "Allow"}],
                         "labelsToApply": {"pcns.projectcalico.org/name": ns, "pcns.kubernetes.io/metadata.name": ns}}}));
        }
        for p in 0..self.policies {
            let (ns, app, _) = self.deployment(p);
            let from = APPS.get((p * 7 + 3) % APPS.len()).copied().unwrap_or("app");
            out.push(json!({"apiVersion": "projectcalico.org/v3", "kind": "NetworkPolicy",
                "metadata": {"name": format!("allow-{from}-to-{app}-{p}"), "namespace": ns},
                "spec": {"order": 100 + p % 10, "selector": format!("app == '{app}'"), "types": ["Ingress"],
                         "ingress": [{"action": "Allow", "protocol": "TCP", "source": {"selector": format!("app == '{from}'")},
                                      "destination": {"ports": [8080, "http"]}}]}}));
        }
        for node in 0..self.nodes {
            for pod in 0..self.pods_per_node {
                out.push(self.workload_endpoint_document(node, pod, 0));
            }
        }
        out
    }
}

/// [`Spec::resources`] for `spec`.
pub fn cluster(spec: &Spec) -> Vec<Resource> {
    spec.resources()
}

/// [`Spec::documents`] for `spec`.
pub fn documents(spec: &Spec) -> Vec<serde_json::Value> {
    spec.documents()
}

#[cfg(test)]
mod tests {
    use super::*;
    use typha_server::calico::convert::convert;

    #[test]
    fn every_generated_resource_converts() {
        let spec = Spec {
            nodes: 3,
            pods_per_node: 5,
            ..Spec::default()
        };
        let rs = cluster(&spec);
        let mut ids = std::collections::BTreeSet::new();
        for r in &rs {
            convert(r).unwrap_or_else(|e| panic!("{e}"));
            assert!(ids.insert(r.id()), "duplicate {}", r.id());
        }
        assert_eq!(
            rs.iter()
                .filter(|r| r.kind() == typha_server::calico::v3::Kind::WorkloadEndpoint)
                .count(),
            15
        );
        assert_eq!(cluster(&spec), rs, "deterministic");
    }
}
