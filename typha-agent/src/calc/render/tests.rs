#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
use typha_protocol::model::{Icmp, ServiceMatch};

use super::*;

fn rule(action: Action) -> Rule {
    Rule::new(action)
}

fn lines(r: Rule) -> Vec<String> {
    let mut stats = RenderStats::default();
    render_rules(&[r], &mut stats)
}

#[test]
fn allow_sets_the_accept_mark_and_returns() {
    assert_eq!(
        lines(rule(Action::Allow)),
        [
            "-j MARK --set-xmark 0x10000/0x10000",
            "-m mark --mark 0x10000/0x10000 -j RETURN"
        ]
    );
    assert_eq!(lines(rule(Action::Deny)), ["-j DROP"]);
    assert_eq!(
        lines(rule(Action::Pass))[0],
        "-j MARK --set-xmark 0x20000/0x20000"
    );
}

#[test]
fn matches_render_in_iptables_syntax() {
    let mut r = rule(Action::Deny);
    r.protocol = Some(Protocol::Tcp);
    r.src.nets = vec!["10.0.0.0/8".parse().unwrap()];
    r.dst.ports = vec![
        Port::Range {
            first: 80,
            last: 80,
        },
        Port::Range {
            first: 8000,
            last: 8080,
        },
    ];
    r.dst.not_nets = vec!["10.1.0.0/16".parse().unwrap()];
    assert_eq!(
        lines(r),
        ["-p tcp -s 10.0.0.0/8 ! -d 10.1.0.0/16 -m multiport --dports 80,8000:8080 -j DROP"]
    );
}

#[test]
fn selectors_and_many_nets_become_ipsets() {
    let mut r = rule(Action::Allow);
    r.src.selector = "app == 'db'".into();
    r.src.not_selector = "role == 'x'".into();
    r.dst.nets = vec![
        "10.0.0.0/8".parse().unwrap(),
        "192.168.0.0/16".parse().unwrap(),
    ];
    let sets = rule_sets(std::slice::from_ref(&r));
    assert_eq!(sets.len(), 3);
    let names: Vec<String> = sets.iter().map(SetDef::name).collect();
    for n in &names {
        assert!(n.len() <= 31 && n.starts_with("cali40"), "{n}");
    }
    let l = lines(r);
    let sel = SetDef::Selector(Selector::parse("app == 'db'").unwrap()).name();
    assert!(
        l[0].contains(&format!("-m set --match-set {sel} src")),
        "{}",
        l[0]
    );
    assert!(l[0].contains("-m set ! --match-set cali40s:"), "{}", l[0]);
    assert!(l[0].contains("-m set --match-set cali40c:"), "{}", l[0]);
}

#[test]
fn named_ports_use_ip_port_sets_and_split_the_rule() {
    let mut r = rule(Action::Allow);
    r.protocol = Some(Protocol::Tcp);
    r.dst.selector = "app == 'web'".into();
    r.dst.ports = vec![
        Port::Range {
            first: 443,
            last: 443,
        },
        Port::Named("http".into()),
    ];
    let sets = rule_sets(std::slice::from_ref(&r));
    assert!(
        sets.iter()
            .any(|s| matches!(s, SetDef::NamedPort(_, 6, n) if n == "http"))
    );
    let l = lines(r);
    // One variant for the numeric port, one for the named one; each with its RETURN.
    assert_eq!(l.len(), 4, "{l:#?}");
    assert!(l[0].contains("--dports 443"));
    assert!(
        l[2].contains("cali40n:") && l[2].ends_with("dst,dst -j MARK --set-xmark 0x10000/0x10000")
    );
}

/// Named ports without a protocol (a ClusterNetworkPolicy's) match the name's port of any
/// protocol: a set of protocol 0 and no `-p`; a port number without a protocol never matches.
#[test]
fn named_ports_without_a_protocol_match_any_protocol() {
    let mut r = rule(Action::Deny);
    r.dst.ports = vec![Port::Named("http".into())];
    let sets = rule_sets(std::slice::from_ref(&r));
    assert!(
        sets.iter()
            .any(|s| matches!(s, SetDef::NamedPort(_, 0, n) if n == "http"))
    );
    let l = lines(r.clone());
    assert_eq!(l.len(), 1, "{l:#?}");
    assert!(!l[0].contains(" -p "), "{}", l[0]);
    assert!(
        l[0].contains("cali40n:") && l[0].contains("dst,dst -j DROP"),
        "{}",
        l[0]
    );
    r.dst.ports.push(Port::Range {
        first: 80,
        last: 80,
    });
    let l = lines(r);
    assert!(!l.iter().any(|l| l.contains("--dports")), "{l:#?}");
}

#[test]
fn multiport_is_split_at_fifteen_slots() {
    let mut r = rule(Action::Deny);
    r.protocol = Some(Protocol::Udp);
    r.dst.ports = (1..=20)
        .map(|p| Port::Range { first: p, last: p })
        .collect();
    let l = lines(r);
    assert_eq!(l.len(), 2);
    assert!(l[0].contains("--dports 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15 "));
    assert!(l[1].contains("--dports 16,17,18,19,20 "));
}

#[test]
fn icmp_and_protocol_negation() {
    let mut r = rule(Action::Allow);
    r.protocol = Some(Protocol::Icmp);
    r.icmp = Some(Icmp {
        icmp_type: 8,
        code: Some(0),
    });
    assert!(lines(r)[0].starts_with("-p icmp -m icmp --icmp-type 8/0 "));
    let mut r = rule(Action::Deny);
    r.not_protocol = Some(Protocol::Udp);
    assert_eq!(lines(r), ["! -p udp -j DROP"]);
}

/// A protocol the policy gave as a number is written as one, as Felix writes it.
#[test]
fn a_protocol_given_as_a_number_is_written_as_one() {
    let mut r = rule(Action::Deny);
    r.protocol = Some(Protocol::Tcp);
    r.not_protocol = Some(Protocol::Sctp);
    r.detail.protocol_number = true;
    r.detail.not_protocol_number = true;
    assert_eq!(lines(r.clone()), ["-p 6 ! -p 132 -j DROP"]);
    r.detail.protocol_number = false;
    assert_eq!(lines(r), ["-p tcp ! -p 132 -j DROP"]);
}

#[test]
fn unenforceable_rules_fail_closed() {
    let svc = Some(ServiceMatch {
        name: "api".into(),
        namespace: "ns".into(),
    });
    let mut allow = rule(Action::Allow);
    allow.dst.service = svc.clone();
    let mut stats = RenderStats::default();
    assert!(render_rules(&[allow], &mut stats).is_empty());
    assert_eq!(stats.unsupported_rules, 1);
    let mut deny = rule(Action::Deny);
    deny.dst.service = svc;
    assert_eq!(render_rules(&[deny], &mut stats), ["-j DROP"]);
    let mut v6 = rule(Action::Allow);
    v6.src.nets = vec!["fd00::/64".parse().unwrap()];
    assert!(lines(v6).is_empty(), "an IPv6-only rule never matches IPv4");
    let mut only6 = rule(Action::Allow);
    only6.ip_version = Some(6);
    assert!(lines(only6).is_empty());
}

#[test]
fn long_names_are_hashed_to_fit() {
    assert_eq!(
        policy_chain(Dir::Ingress, "shop/allow-web"),
        "cali-pi-shop/allow-web"
    );
    let long = policy_chain(Dir::Egress, "some-namespace/a-rather-long-policy-name");
    assert_eq!(long.len(), MAX_CHAIN_NAME);
    assert!(long.starts_with("cali-po-_"));
    assert_ne!(
        long,
        policy_chain(Dir::Egress, "some-namespace/a-rather-long-policy-namf")
    );
    assert!(chain_name("cali-tw-", "weird name").starts_with("cali-tw-_"));
}

#[test]
fn endpoint_chain_orders_tiers_then_profiles() {
    let profiles = vec!["kns.shop".to_string()];
    let plan = EndpointPlan {
        iface: "cali12345",
        host: false,
        ingress: vec![
            TierPolicies {
                chains: vec!["cali-pi-a".into(), "cali-pi-b".into()],
                pass_by_default: false,
            },
            TierPolicies {
                chains: vec![],
                pass_by_default: false,
            },
        ],
        egress: vec![],
        profiles: &profiles,
    };
    let (name, rules) = endpoint_chain(&plan, Dir::Ingress);
    assert_eq!(name, "cali-tw-cali12345");
    let text = rules.join("\n");
    let a = text.find("-j cali-pi-a").unwrap();
    let b = text.find("-j cali-pi-b").unwrap();
    let end_of_tier = text.find("-m mark --mark 0x0/0x20000 -j DROP").unwrap();
    let profile = text.find("-j cali-pri-kns.shop").unwrap();
    assert!(a < b && b < end_of_tier && end_of_tier < profile);
    assert_eq!(rules.last().unwrap(), "-j DROP");
    let (name, rules) = endpoint_chain(&plan, Dir::Egress);
    assert_eq!(name, "cali-fw-cali12345");
    assert!(
        !rules.join("\n").contains("0x0/0x20000 -j DROP"),
        "no egress tiers"
    );
}

#[test]
fn host_endpoint_chains_open_failsafe_ports_first_and_accept() {
    let plan = EndpointPlan {
        iface: "eth0",
        host: true,
        ingress: vec![TierPolicies {
            chains: vec!["cali-pi-a".into()],
            pass_by_default: false,
        }],
        egress: vec![],
        profiles: &[],
    };
    let (name, rules) = endpoint_chain(&plan, Dir::Ingress);
    assert_eq!(name, "cali-fh-eth0");
    let text = rules.join("\n");
    assert!(text.find("-j cali-failsafe-in").unwrap() < text.find("-j cali-pi-a").unwrap());
    assert!(text.contains("-m mark --mark 0x10000/0x10000 -j ACCEPT"));
    assert!(!text.contains("-j RETURN"));
    assert_eq!(endpoint_chain(&plan, Dir::Egress).0, "cali-th-eth0");
    let mut chains = std::collections::BTreeMap::new();
    let hooks = base_chains(
        &RenderConfig::default(),
        &BTreeSet::new(),
        &["eth0"].into_iter().collect(),
        &mut chains,
    );
    assert_eq!(
        chains["cali-from-host-endpoint"],
        ["-i eth0 -g cali-fh-eth0"]
    );
    assert!(chains["cali-failsafe-in"][0].contains("--dports 22,"));
    assert!(hooks.iter().any(|h| h.chain == "OUTPUT"));
}
