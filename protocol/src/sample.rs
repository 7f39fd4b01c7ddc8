//! Realistic sample data: a Kubernetes cluster as the felix syncer sees it, generated
//! deterministically from a few parameters. For tests, benchmarks and loadtest; enabled by the
//! `sample` feature.
//!
//! What makes it realistic is what determines compression: EC2-style node names, pods named
//! `<deployment>-<replicaset hash>-<5 random chars>`, `cali` + 11 hex
//! interface names, pod IPs allocated from per-node /26 blocks, the labels Calico adds
//! (`projectcalico.org/namespace`, `.../orchestrator`, `.../serviceaccount`) next to app labels
//! and `pod-template-hash`, profiles `kns.<ns>` and `ksa.<ns>.<sa>`, named ports. No MAC: the
//! Kubernetes datastore does not know pod MACs.

// Indices here are taken modulo the length of non-empty tables; this is test data, not network
// input.
#![allow(clippy::indexing_slicing)]

use std::net::Ipv4Addr;

use ipnet::{IpNet, Ipv4Net};

use crate::EncodedValue;
use crate::model::{
    Action, Block, BlockKey, EncapMode, EndpointPort, EntityRule, HostIpKey, IpPool, IpPoolKey,
    Key, KeyPath, Labels, Policy, PolicyKey, PolicyKind, PolicyType, Port, ProfileKey,
    ProfileRules, Protocol, Revision, Rule, Update, UpdateKind, Value, WorkloadEndpoint,
    WorkloadEndpointKey,
};

/// A small, fast, deterministic generator (SplitMix64): same seed, same cluster.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// `n` lower-case hex characters.
    pub fn hex(&mut self, n: usize) -> String {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        (0..n)
            .map(|_| char::from(HEX[(self.next_u64() & 15) as usize]))
            .collect()
    }

    /// `n` characters from Kubernetes' random-suffix alphabet (no vowels, no ambiguous digits).
    pub fn k8s_suffix(&mut self, n: usize) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        (0..n)
            .map(|_| char::from(ALPHABET[self.below(ALPHABET.len() as u64) as usize]))
            .collect()
    }
}

/// The shape of a sample cluster.
#[derive(Debug, Clone)]
pub struct ClusterSpec {
    /// Nodes.
    pub nodes: usize,
    /// Pods per node.
    pub pods_per_node: usize,
    /// Namespaces.
    pub namespaces: usize,
    /// Deployments per namespace.
    pub deployments_per_namespace: usize,
    /// Calico network policies (spread over namespaces) plus a few global ones.
    pub policies: usize,
    /// Seed: the same spec and seed give the same cluster.
    pub seed: u64,
}

impl Default for ClusterSpec {
    fn default() -> Self {
        Self {
            nodes: 100,
            pods_per_node: 30,
            namespaces: 20,
            deployments_per_namespace: 8,
            policies: 50,
            seed: 1,
        }
    }
}

/// Application names the sample clusters use (also typha-server's v3 sample).
pub const APPS: &[&str] = &[
    "frontend",
    "checkout",
    "payments",
    "catalog",
    "search",
    "cart",
    "recommendation",
    "shipping",
    "email",
    "currency",
    "ad-service",
    "auth",
    "gateway",
    "inventory",
    "orders",
    "users",
    "notifications",
    "metrics-exporter",
    "redis",
    "postgres",
];
const TEAMS: &[&str] = &["web", "commerce", "platform", "data", "identity"];
const NAMESPACES: &[&str] = &[
    "default",
    "prod",
    "staging",
    "payments",
    "web",
    "data",
    "platform",
    "monitoring",
    "logging",
    "ingress",
    "identity",
    "search",
    "ml",
    "batch",
    "ci",
    "tools",
    "edge",
    "billing",
    "analytics",
    "support",
];

/// A deployment: its namespace, name, replica-set hash and labels.
#[derive(Debug, Clone)]
struct Deployment {
    namespace: String,
    name: String,
    rs_hash: String,
    app: String,
    team: &'static str,
    service_account: String,
    port: u16,
}

/// A generated cluster.
#[derive(Debug, Clone)]
pub struct Cluster {
    spec: ClusterSpec,
    deployments: Vec<Deployment>,
}

impl Cluster {
    /// Generates the cluster's fixed parts (namespaces, deployments).
    pub fn new(spec: ClusterSpec) -> Self {
        let mut rng = Rng::new(spec.seed);
        let mut deployments = Vec::new();
        for ns in 0..spec.namespaces.max(1) {
            let namespace = namespace_name(ns);
            for d in 0..spec.deployments_per_namespace.max(1) {
                let app = APPS[(ns * 7 + d) % APPS.len()].to_owned();
                let name = if d < APPS.len() {
                    app.clone()
                } else {
                    format!("{app}-{d}")
                };
                deployments.push(Deployment {
                    service_account: if rng.below(3) == 0 {
                        "default".into()
                    } else {
                        name.clone()
                    },
                    namespace: namespace.clone(),
                    rs_hash: rng.k8s_suffix(10),
                    team: TEAMS[(ns + d) % TEAMS.len()],
                    port: [8080, 8443, 9090, 3000, 6379, 5432][d % 6],
                    app,
                    name,
                });
            }
        }
        Self { spec, deployments }
    }

    /// The spec.
    pub fn spec(&self) -> &ClusterSpec {
        &self.spec
    }

    /// Name of node `i`, EC2 style.
    pub fn node_name(i: usize) -> String {
        format!(
            "ip-10-{}-{}-{}.ec2.internal",
            20 + i / 65536,
            (i / 256) % 256,
            i % 256
        )
    }

    /// The /26 block node `node` allocates pod IPs from (block `b` of that node).
    pub fn node_block(node: usize, b: usize) -> Ipv4Net {
        let n = (node * 4 + b) as u32;
        let base = u32::from(Ipv4Addr::new(10, 128, 0, 0)) + n * 64;
        Ipv4Net::new(Ipv4Addr::from(base), 26).unwrap_or_default()
    }

    /// Workload endpoint for pod `pod` on node `node` (deterministic per (seed, node, pod)).
    pub fn workload_endpoint(&self, node: usize, pod: usize) -> (Key, Value) {
        let mut rng = Rng::new(
            self.spec.seed ^ ((node as u64) << 32) ^ (pod as u64).wrapping_mul(0x2545_f491),
        );
        let dep = &self.deployments[rng.below(self.deployments.len() as u64) as usize];
        let pod_name = format!("{}-{}-{}", dep.name, dep.rs_hash, rng.k8s_suffix(5));
        let block = Self::node_block(node, pod / 64);
        let ip = u32::from(block.network()) + (pod % 64) as u32;
        let mut labels = Labels::new();
        labels.insert("app".into(), dep.app.clone());
        labels.insert("app.kubernetes.io/name".into(), dep.name.clone());
        labels.insert("pod-template-hash".into(), dep.rs_hash.clone());
        labels.insert("team".into(), dep.team.into());
        labels.insert("projectcalico.org/namespace".into(), dep.namespace.clone());
        labels.insert("projectcalico.org/orchestrator".into(), "k8s".into());
        labels.insert(
            "projectcalico.org/serviceaccount".into(),
            dep.service_account.clone(),
        );
        let key = Key::WorkloadEndpoint(WorkloadEndpointKey {
            hostname: Self::node_name(node),
            orchestrator: "k8s".into(),
            workload: format!("{}/{}", dep.namespace, pod_name),
            endpoint: "eth0".into(),
        });
        let value = Value::WorkloadEndpoint(WorkloadEndpoint {
            state: "active".into(),
            name: format!("cali{}", rng.hex(11)),
            // Current Calico never sets it (the container id is dropped by its update
            // processor), so neither do we.
            active_instance_id: String::new(),
            mac: None,
            profile_ids: vec![
                format!("kns.{}", dep.namespace),
                format!("ksa.{}.{}", dep.namespace, dep.service_account),
            ],
            ipv4_nets: vec![Ipv4Net::new(Ipv4Addr::from(ip), 32).unwrap_or_default()],
            ipv6_nets: vec![],
            ipv4_nat: vec![],
            ipv6_nat: vec![],
            labels,
            ipv4_gateway: None,
            ipv6_gateway: None,
            ports: vec![EndpointPort {
                name: if dep.port == 8443 {
                    "https".into()
                } else {
                    "http".into()
                },
                protocol: Protocol::Tcp,
                port: dep.port,
            }],
            generate_name: format!("{}-{}-", dep.name, dep.rs_hash),
            allow_spoofed_source_prefixes: vec![],
        });
        (key, value)
    }

    /// Every workload endpoint, node by node.
    pub fn workload_endpoints(&self) -> impl Iterator<Item = (Key, Value)> + '_ {
        (0..self.spec.nodes).flat_map(move |n| {
            (0..self.spec.pods_per_node).map(move |p| self.workload_endpoint(n, p))
        })
    }

    /// A policy: selects one app, allows ingress from a few others on its port.
    pub fn policy(&self, i: usize) -> (Key, Value) {
        let mut rng = Rng::new(self.spec.seed ^ 0x5eed ^ i as u64);
        let dep = &self.deployments[i % self.deployments.len()];
        let global = i % 10 == 9;
        let from = APPS[rng.below(APPS.len() as u64) as usize];
        let mut allow = Rule::new(Action::Allow);
        allow.protocol = Some(Protocol::Tcp);
        allow.src = EntityRule {
            selector: format!("app == '{from}'"),
            ..EntityRule::default()
        };
        allow.dst.ports = vec![Port::Range {
            first: dep.port,
            last: dep.port,
        }];
        let key = Key::Policy(PolicyKey {
            kind: if global {
                PolicyKind::GlobalNetworkPolicy
            } else {
                PolicyKind::NetworkPolicy
            },
            namespace: (!global).then(|| dep.namespace.clone()),
            name: format!("allow-{from}-to-{}-{i}", dep.name),
        });
        let value = Value::Policy(Policy {
            namespace: if global {
                String::new()
            } else {
                dep.namespace.clone()
            },
            tier: "default".into(),
            order: Some(100.0 + (i % 10) as f64),
            selector: format!(
                "projectcalico.org/namespace == '{}' && app == '{}'",
                dep.namespace, dep.app
            ),
            types: vec![PolicyType::Ingress],
            inbound_rules: vec![allow],
            outbound_rules: vec![],
            untracked: false,
            pre_dnat: false,
            apply_on_forward: false,
            performance_hints: vec![],
            staged_action: None,
        });
        (key, value)
    }

    /// Everything: pools, node IPs, blocks, namespace profiles, policies and endpoints.
    pub fn kvs(&self) -> Vec<(Key, Value)> {
        let mut out = Vec::new();
        let pool: IpNet = "10.128.0.0/9".parse().unwrap_or_default();
        out.push((
            Key::IpPool(IpPoolKey { cidr: pool }),
            Value::IpPool(IpPool {
                cidr: pool,
                ipip_mode: EncapMode::Never,
                vxlan_mode: EncapMode::CrossSubnet,
                masquerade: true,
                ipam: true,
                disabled: false,
                disable_bgp_export: false,
            }),
        ));
        out.push((Key::ReadyFlag, Value::ReadyFlag(true)));
        for ns in 0..self.spec.namespaces.max(1) {
            let name = namespace_name(ns);
            let profile = ProfileKey {
                name: format!("kns.{name}"),
            };
            let mut labels = Labels::new();
            labels.insert("pcns.kubernetes.io/metadata.name".into(), name.clone());
            labels.insert("pcns.projectcalico.org/name".into(), name);
            out.push((
                Key::ProfileRules(profile.clone()),
                Value::ProfileRules(ProfileRules {
                    inbound_rules: vec![Rule::new(Action::Allow)],
                    outbound_rules: vec![Rule::new(Action::Allow)],
                }),
            ));
            out.push((
                Key::ProfileLabels(profile),
                Value::ProfileLabels(labels.into()),
            ));
        }
        for node in 0..self.spec.nodes {
            out.push((
                Key::HostIp(HostIpKey {
                    hostname: Self::node_name(node),
                }),
                Value::HostIp(std::net::IpAddr::V4(Ipv4Addr::new(
                    10,
                    20 + (node / 65536) as u8,
                    ((node / 256) % 256) as u8,
                    (node % 256) as u8,
                ))),
            ));
            for b in 0..self.spec.pods_per_node.div_ceil(64).max(1) {
                let cidr = IpNet::V4(Self::node_block(node, b));
                out.push((
                    Key::Block(BlockKey { cidr }),
                    Value::Block(Block {
                        cidr,
                        affinity: Some(format!("host:{}", Self::node_name(node))),
                        allocated: self.spec.pods_per_node.min(64) as u32,
                        deleted: false,
                        table: Default::default(),
                    }),
                ));
            }
        }
        out.extend((0..self.spec.policies).map(|i| self.policy(i)));
        out.extend(self.workload_endpoints());
        out
    }
}

fn namespace_name(i: usize) -> String {
    match NAMESPACES.get(i) {
        Some(n) => (*n).to_owned(),
        None => format!("team-{i}"),
    }
}

/// Turns typed KVs into wire updates (kind New, revisions counting from `first_revision`).
pub fn to_updates(kvs: &[(Key, Value)], first_revision: u64) -> Vec<Update> {
    kvs.iter()
        .enumerate()
        .map(|(i, (k, v))| {
            Update::put(
                KeyPath::from(k),
                EncodedValue::encode(v),
                Revision(first_revision + i as u64),
                UpdateKind::New,
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_is_deterministic_and_valid() {
        let a = Cluster::new(ClusterSpec::default()).kvs();
        let b = Cluster::new(ClusterSpec::default()).kvs();
        assert_eq!(a, b);
        for (k, v) in &a {
            let path = KeyPath::from(k);
            assert_eq!(&path.key(), k);
            EncodedValue::encode(v).decode_for(k).unwrap();
        }
        let weps = a
            .iter()
            .filter(|(k, _)| matches!(k, Key::WorkloadEndpoint(_)))
            .count();
        assert_eq!(weps, 100 * 30);
    }
}
