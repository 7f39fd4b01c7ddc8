#![allow(clippy::unwrap_used)]
use typha_protocol::model::{
    Action, EncodedValue, KeyPath, Policy, PolicyType, Revision, UpdateKind,
};

use super::*;

fn policy(selector: &str, rule_selector: &str) -> Policy {
    let mut rule = Rule::new(Action::Allow);
    rule.src.selector = rule_selector.into();
    Policy {
        namespace: String::new(),
        tier: "default".into(),
        order: Some(10.0),
        selector: selector.into(),
        types: vec![PolicyType::Ingress],
        inbound_rules: vec![rule],
        outbound_rules: vec![],
        untracked: false,
        pre_dnat: false,
        apply_on_forward: false,
        performance_hints: vec![],
        staged_action: None,
    }
}

fn update(p: Policy) -> Update {
    Update::put(
        KeyPath::new("/calico/v1/policy/GlobalNetworkPolicy/p1").unwrap(),
        EncodedValue::encode(&Value::Policy(p)),
        Revision(1),
        UpdateKind::New,
    )
}

#[test]
fn a_valid_policy_passes() {
    let c = validate(&update(policy("app == 'a'", "role == 'db'")));
    assert!(c.value.is_some() && c.invalid.is_none());
}

#[test]
fn a_bad_rule_selector_is_rejected_with_where() {
    let c = validate(&update(policy("all()", "role == ")));
    assert!(matches!(c.key, Key::Policy(_)));
    assert!(c.value.is_none());
    let e = c.invalid.unwrap();
    assert!(
        matches!(&e.reason, InvalidValue::Selector { field, .. } if field == "inbound[0].source.selector"),
        "{e}"
    );
    assert!(e.to_string().contains("inbound[0].source.selector"), "{e}");
    assert!(e.to_string().contains("position"), "{e}");
}

#[test]
fn ports_without_a_port_protocol_are_rejected() {
    let mut p = policy("all()", "");
    p.inbound_rules[0].dst.ports = vec![Port::Range {
        first: 80,
        last: 80,
    }];
    let e = validate(&update(p)).invalid.unwrap();
    assert!(
        matches!(&e.reason, InvalidValue::PortsWithoutProtocol { side } if side == "inbound[0].destination"),
        "{e}"
    );
    assert!(e.to_string().contains("ports need protocol"), "{e}");
    // Named ports alone match any protocol's port of that name (a ClusterNetworkPolicy's).
    let mut p = policy("all()", "");
    p.inbound_rules[0].dst.ports = vec![Port::Named("web".into())];
    assert!(validate(&update(p.clone())).invalid.is_none());
    p.inbound_rules[0].dst.ports.push(Port::Range {
        first: 80,
        last: 80,
    });
    assert!(validate(&update(p)).invalid.is_some());
}

#[test]
fn interface_names_that_could_inject_rule_text_are_refused() {
    let hep = typha_protocol::model::HostEndpoint {
        name: "eth0 -j ACCEPT".into(),
        expected_ipv4_addrs: vec![],
        expected_ipv6_addrs: vec![],
        labels: Default::default(),
        profile_ids: vec![],
        ports: vec![],
    };
    let u = Update::put(
        KeyPath::new("/calico/v1/host/n1/endpoint/uplink").unwrap(),
        EncodedValue::encode(&Value::HostEndpoint(hep.clone())),
        Revision(1),
        UpdateKind::New,
    );
    let c = validate(&u);
    assert!(c.value.is_none());
    let e = c.invalid.unwrap();
    assert_eq!(
        e.reason,
        InvalidValue::InterfaceCharacter("eth0 -j ACCEPT".into())
    );
    assert!(e.to_string().contains("forbidden character"), "{e}");
    let all = typha_protocol::model::HostEndpoint {
        name: "*".into(),
        ..hep
    };
    let u = Update::put(
        KeyPath::new("/calico/v1/host/n1/endpoint/all").unwrap(),
        EncodedValue::encode(&Value::HostEndpoint(all)),
        Revision(1),
        UpdateKind::New,
    );
    assert!(validate(&u).invalid.is_none());
}

#[test]
fn undecodable_bytes_are_rejected_not_panicked_on() {
    let u = Update::put(
        KeyPath::new("/calico/v1/policy/GlobalNetworkPolicy/p1").unwrap(),
        EncodedValue::from_bytes(bytes::Bytes::from_static(&[0xff, 0xff, 0xff])),
        Revision(1),
        UpdateKind::New,
    );
    let e = validate(&u).invalid.unwrap();
    assert!(matches!(e.reason, InvalidValue::Undecodable(_)), "{e}");
}
