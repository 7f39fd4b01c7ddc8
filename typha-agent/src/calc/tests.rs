#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
use std::collections::BTreeMap;

use proptest::prelude::*;
use typha_protocol::model::{
    Action, BlockKey, Node, ProfileKey, ResourceKey, Rule, WorkloadEndpointKey,
};

use super::ipsets::SetDef;
use super::*;
use crate::dataplane::RouteTarget;
use typha_protocol::model::{PolicyKind, PolicyType};

const ME: &str = "node-a";

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| ((*k).into(), (*v).into()))
        .collect()
}

fn wep_key(host: &str, pod: &str) -> Key {
    Key::WorkloadEndpoint(WorkloadEndpointKey {
        hostname: host.into(),
        orchestrator: "k8s".into(),
        workload: format!("ns/{pod}"),
        endpoint: "eth0".into(),
    })
}

fn wep(iface: &str, ip: &str, l: &[(&str, &str)], profiles: &[&str]) -> Value {
    Value::WorkloadEndpoint(WorkloadEndpoint {
        state: "active".into(),
        name: iface.into(),
        active_instance_id: String::new(),
        mac: None,
        profile_ids: profiles.iter().map(|p| (*p).into()).collect(),
        ipv4_nets: vec![format!("{ip}/32").parse().unwrap()],
        ipv6_nets: vec![],
        ipv4_nat: vec![],
        ipv6_nat: vec![],
        labels: labels(l),
        ipv4_gateway: None,
        ipv6_gateway: None,
        ports: vec![],
        generate_name: String::new(),
        allow_spoofed_source_prefixes: vec![],
    })
}

fn policy_key(name: &str) -> PolicyKey {
    PolicyKey {
        kind: PolicyKind::GlobalNetworkPolicy,
        namespace: None,
        name: name.into(),
    }
}

fn policy(selector: &str, order: Option<f64>, from: &str) -> Policy {
    let mut allow = Rule::new(Action::Allow);
    allow.src.selector = from.into();
    Policy {
        namespace: String::new(),
        tier: "default".into(),
        order,
        selector: selector.into(),
        types: vec![PolicyType::Ingress],
        inbound_rules: vec![allow],
        outbound_rules: vec![],
        untracked: false,
        pre_dnat: false,
        apply_on_forward: false,
        performance_hints: vec![],
        staged_action: None,
    }
}

fn graph() -> CalcGraph {
    CalcGraph::new(ME, RenderConfig::default())
}

fn set_name(sel: &str) -> String {
    SetDef::Selector(Selector::parse(sel).unwrap()).name()
}

fn members(g: &CalcGraph, sel: &str) -> Option<Vec<String>> {
    g.desired()
        .ipsets
        .get(&set_name(sel))
        .map(|s| s.members.iter().cloned().collect())
}

#[test]
fn only_this_nodes_endpoints_get_chains_and_routes() {
    let mut g = graph();
    g.on_update(&wep_key(ME, "a"), Some(wep("calia", "10.0.0.1", &[], &[])));
    g.on_update(
        &wep_key("node-b", "b"),
        Some(wep("calib", "10.0.1.1", &[], &[])),
    );
    let d = g.flush();
    assert!(d.chains && d.routes);
    let want = g.desired();
    assert!(want.chains.contains_key("cali-tw-calia"));
    assert!(want.chains.contains_key("cali-fw-calia"));
    assert!(!want.chains.contains_key("cali-tw-calib"));
    assert_eq!(
        want.routes.get(&"10.0.0.1/32".parse().unwrap()),
        Some(&RouteTarget::Dev("calia".into()))
    );
    assert_eq!(want.routes.len(), 1);
    assert_eq!(want.interfaces.iter().collect::<Vec<_>>(), ["calia"]);
    assert_eq!(g.counts().local_endpoints, 1);
    g.on_update(&wep_key(ME, "a"), None);
    g.flush();
    assert!(!g.desired().chains.contains_key("cali-tw-calia"));
    assert!(g.desired().routes.is_empty());
}

#[test]
fn policies_select_with_inherited_profile_labels_in_order() {
    let mut g = graph();
    g.on_update(
        &Key::ProfileLabels(ProfileKey {
            name: "kns.shop".into(),
        }),
        Some(Value::ProfileLabels(labels(&[("pcns.team", "web")]).into())),
    );
    g.on_update(
        &wep_key(ME, "a"),
        Some(wep("calia", "10.0.0.1", &[("app", "x")], &["kns.shop"])),
    );
    g.on_update(
        &Key::Policy(policy_key("zeta")),
        Some(Value::Policy(policy("pcns.team == 'web'", Some(10.0), ""))),
    );
    g.on_update(
        &Key::Policy(policy_key("alpha")),
        Some(Value::Policy(policy("app == 'x'", Some(10.0), ""))),
    );
    g.on_update(
        &Key::Policy(policy_key("first")),
        Some(Value::Policy(policy("all()", Some(1.0), ""))),
    );
    g.on_update(
        &Key::Policy(policy_key("last")),
        Some(Value::Policy(policy("all()", None, ""))),
    );
    g.on_update(
        &Key::Policy(policy_key("other")),
        Some(Value::Policy(policy("app == 'y'", Some(0.0), ""))),
    );
    g.flush();
    let tw = g.desired().chains["cali-tw-calia"].join("\n");
    let pos = |p: &str| {
        tw.find(&format!("-j cali-pi-{p}\n"))
            .unwrap_or_else(|| panic!("{p} not in {tw}"))
    };
    assert!(pos("first") < pos("alpha") && pos("alpha") < pos("zeta") && pos("zeta") < pos("last"));
    assert!(!tw.contains("cali-pi-other"));
    assert!(g.desired().chains.contains_key("cali-pi-zeta"));
    assert!(
        !g.desired().chains.contains_key("cali-pi-other"),
        "inactive policies get no chain"
    );
    assert_eq!(g.counts().active_policies, 4);

    // The namespace's labels change: the policy that used them no longer applies.
    g.on_update(
        &Key::ProfileLabels(ProfileKey {
            name: "kns.shop".into(),
        }),
        Some(Value::ProfileLabels(labels(&[("pcns.team", "ops")]).into())),
    );
    assert!(g.flush().chains);
    assert!(!g.desired().chains.contains_key("cali-pi-zeta"));
    // Own labels win over inherited ones.
    g.on_update(
        &Key::ProfileLabels(ProfileKey {
            name: "kns.shop".into(),
        }),
        Some(Value::ProfileLabels(labels(&[("app", "y")]).into())),
    );
    g.flush();
    assert!(!g.desired().chains.contains_key("cali-pi-other"));
}

#[test]
fn tiers_apply_in_tier_order() {
    let mut g = graph();
    g.on_update(&wep_key(ME, "a"), Some(wep("calia", "10.0.0.1", &[], &[])));
    let mut sec = policy("all()", Some(1.0), "");
    sec.tier = "security".into();
    g.on_update(
        &Key::Policy(policy_key("d")),
        Some(Value::Policy(policy("all()", Some(1.0), ""))),
    );
    g.on_update(&Key::Policy(policy_key("s")), Some(Value::Policy(sec)));
    g.flush();
    let tw = g.desired().chains["cali-tw-calia"].join("\n");
    // No Tier resource: both tiers get the default order; ties go by name.
    assert!(tw.find("cali-pi-default.d").is_none());
    assert!(tw.find("-j cali-pi-d\n").unwrap() < tw.find("-j cali-pi-security.s\n").unwrap());
    g.on_update(
        &Key::Resource(ResourceKey {
            kind: ResourceKind::Tier,
            namespace: None,
            name: "security".into(),
        }),
        Some(Value::Resource(typha_protocol::model::Resource {
            labels: Labels::new(),
            spec_json: r#"{"order":100}"#.into(),
            ..Default::default()
        })),
    );
    assert!(g.flush().chains);
    let tw = g.desired().chains["cali-tw-calia"].join("\n");
    assert!(tw.find("-j cali-pi-security.s\n").unwrap() < tw.find("-j cali-pi-d\n").unwrap());
}

fn tier(name: &str, spec: &str) -> (Key, Option<Value>) {
    let key = Key::Resource(ResourceKey {
        kind: ResourceKind::Tier,
        namespace: None,
        name: name.into(),
    });
    let value = Value::Resource(typha_protocol::model::Resource {
        labels: Labels::new(),
        spec_json: spec.into(),
        ..Default::default()
    });
    (key, Some(value))
}

/// A Kubernetes ClusterNetworkPolicy is enforced as a global policy of its tier: Calico's
/// `kube-admin` (order 1000, before the default tier) passes by default, so what its policy
/// does not decide goes on to the default tier instead of being dropped; without its Tier
/// resource the tier is like any other, dropping at its end (as Felix does).
#[test]
fn cluster_network_policies_apply_in_their_tier_which_passes_by_default() {
    let mut g = graph();
    g.on_update(&wep_key(ME, "a"), Some(wep("calia", "10.0.0.1", &[], &[])));
    let mut cnp = policy("all()", Some(10.0), "app == 'bad'");
    cnp.tier = "kube-admin".into();
    cnp.inbound_rules[0].action = Action::Deny;
    let key = PolicyKey {
        kind: PolicyKind::KubernetesClusterNetworkPolicy,
        namespace: None,
        name: "deny-bad".into(),
    };
    g.on_update(&Key::Policy(key), Some(Value::Policy(cnp)));
    g.on_update(
        &Key::Policy(policy_key("d")),
        Some(Value::Policy(policy("all()", Some(1.0), ""))),
    );
    g.flush();
    let end_of_tier = "-m mark --mark 0x0/0x20000 -j DROP";
    // Named apart from a GlobalNetworkPolicy `deny-bad` of the same tier.
    let chain = render::policy_chain(render::Dir::Ingress, "kcnp.kube-admin.deny-bad");
    let jump = format!("-j {chain}\n");
    assert!(g.desired().chains.contains_key(&chain));
    let tw = g.desired().chains["cali-tw-calia"].join("\n");
    // No Tier resource: the default order (a tie with `default`, which sorts first), and
    // each tier drops at its end.
    assert!(tw.find("-j cali-pi-d\n").unwrap() < tw.find(&jump).unwrap());
    assert_eq!(tw.matches(end_of_tier).count(), 2);
    let (k, v) = tier("kube-admin", r#"{"order":1000,"defaultAction":"Pass"}"#);
    g.on_update(&k, v);
    assert!(g.flush().chains);
    let tw = g.desired().chains["cali-tw-calia"].join("\n");
    let cnp_at = tw.find(&jump).unwrap();
    let default_at = tw.find("-j cali-pi-d\n").unwrap();
    assert!(cnp_at < default_at);
    // Only the default tier drops at its end; kube-admin goes on to it.
    assert_eq!(tw.matches(end_of_tier).count(), 1);
    assert!(tw.find(end_of_tier).unwrap() > default_at);
    // A tier whose default action is Deny (or not given) drops again.
    let (k, v) = tier("kube-admin", r#"{"order":1000,"defaultAction":"Deny"}"#);
    g.on_update(&k, v);
    assert!(g.flush().chains);
    let tw = g.desired().chains["cali-tw-calia"].join("\n");
    assert_eq!(tw.matches(end_of_tier).count(), 2);
}

#[test]
fn rule_ipsets_hold_every_matching_endpoint_of_the_cluster() {
    let mut g = graph();
    g.on_update(
        &wep_key(ME, "a"),
        Some(wep("calia", "10.0.0.1", &[("app", "web")], &[])),
    );
    g.on_update(
        &wep_key("node-b", "db1"),
        Some(wep("calib", "10.0.1.1", &[("app", "db")], &[])),
    );
    g.on_update(
        &Key::Policy(policy_key("p")),
        Some(Value::Policy(policy(
            "app == 'web'",
            Some(1.0),
            "app == 'db'",
        ))),
    );
    let d = g.flush();
    assert!(d.ipsets.contains(&set_name("app == 'db'")));
    assert_eq!(members(&g, "app == 'db'").unwrap(), ["10.0.1.1"]);
    // Another db pod anywhere joins; a relabelled one leaves; a deleted one leaves.
    g.on_update(
        &wep_key("node-c", "db2"),
        Some(wep("calic", "10.0.2.1", &[("app", "db")], &[])),
    );
    let d = g.flush();
    assert_eq!(d.ipsets.len(), 1);
    assert!(!d.chains, "a remote pod changes ipsets only");
    assert_eq!(
        members(&g, "app == 'db'").unwrap(),
        ["10.0.1.1", "10.0.2.1"]
    );
    g.on_update(
        &wep_key("node-b", "db1"),
        Some(wep("calib", "10.0.1.1", &[("app", "cache")], &[])),
    );
    g.on_update(&wep_key("node-c", "db2"), None);
    g.flush();
    assert_eq!(members(&g, "app == 'db'").unwrap(), Vec::<String>::new());
    // A network set matching the selector adds its CIDRs.
    g.on_update(
        &Key::NetworkSet(typha_protocol::model::NetworkSetKey { name: "dbs".into() }),
        Some(Value::NetworkSet(typha_protocol::model::NetworkSet {
            nets: vec![
                "192.168.0.0/24".parse().unwrap(),
                "fd00::/64".parse().unwrap(),
            ],
            labels: labels(&[("app", "db")]),
            profile_ids: vec![],
        })),
    );
    g.flush();
    assert_eq!(members(&g, "app == 'db'").unwrap(), ["192.168.0.0/24"]);
    // The local endpoint goes: the policy is inactive, its set and chain go.
    g.on_update(&wep_key(ME, "a"), None);
    let d = g.flush();
    assert!(d.ipsets.contains(&set_name("app == 'db'")));
    assert!(members(&g, "app == 'db'").is_none());
    assert!(!g.desired().chains.contains_key("cali-pi-p"));
}

#[test]
fn routes_follow_blocks_and_node_addresses() {
    let mut g = graph();
    let block = |cidr: &str, host: &str| {
        (
            Key::Block(BlockKey {
                cidr: cidr.parse().unwrap(),
            }),
            Value::Block(Block {
                cidr: cidr.parse().unwrap(),
                affinity: Some(format!("host:{host}")),
                allocated: 1,
                deleted: false,
                table: Default::default(),
            }),
        )
    };
    for (k, v) in [
        block("10.0.0.0/26", ME),
        block("10.0.1.0/26", "node-b"),
        block("10.0.2.0/26", "node-c"),
    ] {
        g.on_update(&k, Some(v));
    }
    g.on_update(
        &Key::Resource(ResourceKey {
            kind: ResourceKind::Node,
            namespace: None,
            name: "node-b".into(),
        }),
        Some(Value::Node(Node {
            ipv4_address: Some("192.168.1.2/24".parse().unwrap()),
            ..Node::default()
        })),
    );
    g.flush();
    let r = &g.desired().routes;
    assert_eq!(
        r.get(&"10.0.0.0/26".parse().unwrap()),
        Some(&RouteTarget::Blackhole)
    );
    assert_eq!(
        r.get(&"10.0.1.0/26".parse().unwrap()),
        Some(&RouteTarget::Via("192.168.1.2".parse().unwrap()))
    );
    assert!(
        !r.contains_key(&"10.0.2.0/26".parse().unwrap()),
        "no address for node-c yet"
    );
    g.on_update(
        &Key::HostIp(typha_protocol::model::HostIpKey {
            hostname: "node-c".into(),
        }),
        Some(Value::HostIp("192.168.1.3".parse().unwrap())),
    );
    assert!(g.flush().routes);
    assert_eq!(
        g.desired().routes.get(&"10.0.2.0/26".parse().unwrap()),
        Some(&RouteTarget::Via("192.168.1.3".parse().unwrap()))
    );
    g.on_update(&block("10.0.1.0/26", "node-b").0, None);
    g.flush();
    assert!(
        !g.desired()
            .routes
            .contains_key(&"10.0.1.0/26".parse().unwrap())
    );
}

/// An address another host borrowed from a block is routed to that host, also out of our own
/// block (past its blackhole); one we borrowed is our endpoint's; a free one follows the block.
#[test]
fn borrowed_addresses_are_routed_to_their_host() {
    use typha_protocol::model::{AllocationAttribute, AllocationTable};
    let mut g = graph();
    let attr = |node: &str| AllocationAttribute {
        secondary: [("node".to_owned(), node.to_owned())].into(),
        ..AllocationAttribute::default()
    };
    let block = |cidr: &str, host: &str, allocations: Vec<Option<u32>>, nodes: &[&str]| {
        (
            Key::Block(BlockKey {
                cidr: cidr.parse().unwrap(),
            }),
            Value::Block(Block {
                cidr: cidr.parse().unwrap(),
                affinity: Some(format!("host:{host}")),
                allocated: 2,
                deleted: false,
                table: AllocationTable {
                    allocations: Some(allocations),
                    attributes: Some(nodes.iter().map(|n| attr(n)).collect()),
                    ..AllocationTable::default()
                },
            }),
        )
    };
    // Our block: .0 ours, .1 borrowed by node-b. node-b's block: .0 node-b's, .2 borrowed by us.
    for (k, v) in [
        block(
            "10.0.0.0/30",
            ME,
            vec![Some(0), Some(1), None, None],
            &[ME, "node-b"],
        ),
        block(
            "10.0.1.0/30",
            "node-b",
            vec![Some(0), None, Some(1), None],
            &["node-b", ME],
        ),
    ] {
        g.on_update(&k, Some(v));
    }
    g.on_update(
        &Key::HostIp(typha_protocol::model::HostIpKey {
            hostname: "node-b".into(),
        }),
        Some(Value::HostIp("192.168.1.2".parse().unwrap())),
    );
    g.flush();
    let r = &g.desired().routes;
    let via_b = RouteTarget::Via("192.168.1.2".parse().unwrap());
    assert_eq!(
        r.get(&"10.0.0.0/30".parse().unwrap()),
        Some(&RouteTarget::Blackhole)
    );
    assert_eq!(r.get(&"10.0.0.1/32".parse().unwrap()), Some(&via_b));
    assert_eq!(r.get(&"10.0.1.0/30".parse().unwrap()), Some(&via_b));
    assert!(
        !r.contains_key(&"10.0.1.2/32".parse().unwrap()),
        "ours: an endpoint route"
    );
    assert!(!r.contains_key(&"10.0.0.0/32".parse().unwrap()));
    assert_eq!(r.len(), 3);
}

#[test]
fn staged_untracked_and_unparsable_policies_are_not_enforced() {
    let mut g = graph();
    g.on_update(&wep_key(ME, "a"), Some(wep("calia", "10.0.0.1", &[], &[])));
    let staged = PolicyKey {
        kind: PolicyKind::StagedGlobalNetworkPolicy,
        namespace: None,
        name: "s".into(),
    };
    g.on_update(
        &Key::Policy(staged),
        Some(Value::Policy(policy("all()", Some(1.0), ""))),
    );
    let mut untracked = policy("all()", Some(1.0), "");
    untracked.untracked = true;
    g.on_update(
        &Key::Policy(policy_key("u")),
        Some(Value::Policy(untracked)),
    );
    g.on_update(
        &Key::Policy(policy_key("bad")),
        Some(Value::Policy(policy("app ==", Some(1.0), ""))),
    );
    g.flush();
    assert_eq!(g.counts().active_policies, 0);
    assert!(!g.desired().chains.keys().any(|c| c.starts_with("cali-pi-")));
}

// ---- property: incremental state equals a from-scratch computation ----

#[derive(Debug, Clone)]
enum Op {
    Ep {
        host: bool,
        pod: u8,
        app: Option<u8>,
        ns: u8,
        ip: u8,
    },
    DelEp {
        host: bool,
        pod: u8,
    },
    NsLabel {
        ns: u8,
        team: Option<u8>,
    },
    Policy {
        id: u8,
        sel_app: Option<u8>,
        team: Option<u8>,
        from_app: u8,
    },
    DelPolicy {
        id: u8,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (any::<bool>(), 0..6u8, proptest::option::of(0..3u8), 0..2u8, 0..4u8)
            .prop_map(|(host, pod, app, ns, ip)| Op::Ep { host, pod, app, ns, ip }),
        1 => (any::<bool>(), 0..6u8).prop_map(|(host, pod)| Op::DelEp { host, pod }),
        1 => (0..2u8, proptest::option::of(0..2u8)).prop_map(|(ns, team)| Op::NsLabel { ns, team }),
        2 => (0..4u8, proptest::option::of(0..3u8), proptest::option::of(0..2u8), 0..3u8)
            .prop_map(|(id, sel_app, team, from_app)| Op::Policy { id, sel_app, team, from_app }),
        1 => (0..4u8).prop_map(|id| Op::DelPolicy { id }),
    ]
}

/// The KV an op writes (`None`: a deletion).
fn kv(op: &Op) -> (Key, Option<Value>) {
    let host = |h: bool| if h { ME } else { "node-b" };
    match op {
        Op::Ep {
            host: h,
            pod,
            app,
            ns,
            ip,
        } => {
            let app_v = app.map(|a| format!("a{a}"));
            let l: Vec<(&str, &str)> = app_v.iter().map(|a| ("app", a.as_str())).collect();
            let profile = format!("kns.n{ns}");
            // Distinct pods may share an IP: membership must be counted, not just set.
            (
                wep_key(host(*h), &format!("p{pod}")),
                Some(wep(
                    &format!("cali{}{pod}", u8::from(*h)),
                    &format!("10.0.0.{ip}"),
                    &l,
                    &[&profile],
                )),
            )
        }
        Op::DelEp { host: h, pod } => (wep_key(host(*h), &format!("p{pod}")), None),
        Op::NsLabel { ns, team } => (
            Key::ProfileLabels(ProfileKey {
                name: format!("kns.n{ns}"),
            }),
            team.map(|t| Value::ProfileLabels(labels(&[("pcns.team", &format!("t{t}"))]).into())),
        ),
        Op::Policy {
            id,
            sel_app,
            team,
            from_app,
        } => {
            let mut parts = vec![];
            if let Some(a) = sel_app {
                parts.push(format!("app == 'a{a}'"));
            }
            if let Some(t) = team {
                parts.push(format!("pcns.team == 't{t}'"));
            }
            let sel = if parts.is_empty() {
                "all()".to_string()
            } else {
                parts.join(" && ")
            };
            let from = format!("app == 'a{from_app}' || pcns.team == 't0'");
            (
                Key::Policy(policy_key(&format!("p{id}"))),
                Some(Value::Policy(policy(&sel, Some(f64::from(*id)), &from))),
            )
        }
        Op::DelPolicy { id } => (Key::Policy(policy_key(&format!("p{id}"))), None),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// Whatever the order of changes, and however often flushed, the desired dataplane equals
    /// the one computed from scratch from the final state.
    #[test]
    fn incremental_equals_from_scratch(ops in proptest::collection::vec(op(), 1..60), flush_every in 1..8usize) {
        let mut g = graph();
        let mut final_kvs: BTreeMap<String, (Key, Option<Value>)> = BTreeMap::new();
        for (i, o) in ops.iter().enumerate() {
            let (k, v) = kv(o);
            g.on_update(&k, v.clone());
            final_kvs.insert(k.to_string(), (k, v));
            if i % flush_every == 0 {
                g.flush();
            }
        }
        g.flush();
        let mut fresh = graph();
        for (k, v) in final_kvs.values() {
            if v.is_some() {
                fresh.on_update(k, v.clone());
            }
        }
        fresh.flush();
        prop_assert_eq!(&g.desired().ipsets, &fresh.desired().ipsets);
        prop_assert_eq!(&g.desired().chains, &fresh.desired().chains);
        prop_assert_eq!(&g.desired().routes, &fresh.desired().routes);
        prop_assert_eq!(g.counts(), fresh.counts());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 100, ..ProptestConfig::default() })]

    /// The dirty marks are complete: a dataplane that copies only what they mark ends with
    /// exactly the desired state after every flush.
    #[test]
    fn dirty_marks_cover_every_change(ops in proptest::collection::vec(op(), 1..60), flush_every in 1..6usize) {
        use crate::dataplane::{Dataplane, Recording};
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let mut g = graph();
        let mut dp = Recording::default();
        for (i, o) in ops.iter().enumerate() {
            let (k, v) = kv(o);
            g.on_update(&k, v);
            if i % flush_every == 0 || i + 1 == ops.len() {
                let dirty = g.flush();
                rt.block_on(dp.apply(g.desired(), &dirty)).unwrap();
                prop_assert_eq!(&dp.state, g.desired());
            }
        }
    }
}

/// The kinds carried whole for Calico's own clients (BGP settings, peers and filters, node
/// status, live migrations, Kubernetes Services and EndpointSlices) change nothing the agent
/// programs.
#[test]
fn kinds_carried_for_calicos_clients_are_ignored() {
    let mut g = graph();
    g.on_update(
        &wep_key(ME, "a"),
        Some(wep("calia", "10.0.0.1", &[("app", "web")], &[])),
    );
    g.flush();
    let before = g.desired().clone();
    for (kind, ns) in [
        (ResourceKind::BgpConfiguration, None),
        (ResourceKind::BgpPeer, None),
        (ResourceKind::BgpFilter, None),
        (ResourceKind::CalicoNodeStatus, None),
        (ResourceKind::LiveMigration, Some("web".to_owned())),
        (ResourceKind::KubernetesService, Some("web".to_owned())),
        (
            ResourceKind::KubernetesEndpointSlice,
            Some("web".to_owned()),
        ),
    ] {
        let key = Key::Resource(ResourceKey {
            kind,
            namespace: ns,
            name: "x".into(),
        });
        let value = Value::Resource(typha_protocol::model::Resource {
            labels: Labels::new(),
            spec_json: r#"{"order":1,"peerIP":"10.0.0.9"}"#.into(),
            ..Default::default()
        });
        g.on_update(&key, Some(value));
        let d = g.flush();
        assert!(
            !d.chains && !d.routes && !d.all_ipsets && d.ipsets.is_empty(),
            "{kind:?}: {d:?}"
        );
        g.on_update(&key, None);
        g.flush();
    }
    assert_eq!(g.desired(), &before);
}
