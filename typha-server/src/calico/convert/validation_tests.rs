//! Invalid content, kind by kind: where Calico's syncers skip one bad entry or field and send
//! the rest, where they drop the resource, and where they pass on what their API would refuse
//! (the table in `docs/calico-conversion.md`, "Invalid content", names each test here).

use std::net::{IpAddr, Ipv4Addr};

use ipnet::IpNet;
use typha_protocol::model::{
    EncapMode, EndpointPort, HostConfigKey, HostIpKey, Icmp, IpNat, Key, NetworkSet, Node, Policy,
    PolicyType, Port, Protocol, ResourceKey, Rule, Value,
};

use super::{ConvertError, Converted, Effect, accept_write, convert_noting};
use crate::calico::libcalico::{CalicoKv, calico_changes, calico_kvs};
use crate::calico::v3::{Resource, yaml_documents};

fn resource(yaml: &str) -> Resource {
    let docs = yaml_documents(yaml).unwrap();
    assert_eq!(docs.len(), 1);
    Resource::from_json(docs[0].clone()).unwrap()
}

/// A v3 manifest of `kind` named `name` (namespace `ns` for namespaced kinds) with `spec`.
fn manifest(kind: &str, name: &str, spec: &str) -> String {
    format!(
        "apiVersion: projectcalico.org/v3\nkind: {kind}\nmetadata: {{name: {name}, namespace: ns}}\nspec: {spec}\n"
    )
}

fn noting(kind: &str, spec: &str) -> Result<Converted, ConvertError> {
    convert_noting(&resource(&manifest(kind, "x", spec)))
}

fn ok(kind: &str, spec: &str) -> Converted {
    noting(kind, spec).unwrap()
}

fn refused(kind: &str, spec: &str) -> ConvertError {
    noting(kind, spec).unwrap_err()
}

/// The notes as (field, effect), to compare whole.
fn notes(c: &Converted) -> Vec<(&str, Effect)> {
    c.notes
        .iter()
        .map(|n| (n.field.as_str(), n.effect))
        .collect()
}

fn net(s: &str) -> IpNet {
    s.parse().unwrap()
}

fn the_policy(c: &Converted) -> &Policy {
    match &c.kvs[..] {
        [(_, Value::Policy(p))] => p,
        other => panic!("{other:?}"),
    }
}

fn first_rule(c: &Converted) -> &Rule {
    let p = the_policy(c);
    p.inbound_rules
        .first()
        .or(p.outbound_rules.first())
        .unwrap()
}

/// The Calico KVs of every KV, as (key, JSON).
fn calico(kvs: &[(Key, Value)]) -> Vec<(String, String)> {
    kvs.iter()
        .flat_map(|(k, v)| calico_kvs(k, v))
        .map(|kv: CalicoKv| {
            let value = String::from_utf8(kv.value.unwrap().to_vec()).unwrap();
            (kv.key.to_string(), value)
        })
        .collect()
}

fn calico_json(kvs: &[(Key, Value)]) -> serde_json::Value {
    let all = calico(kvs);
    assert_eq!(all.len(), 1, "{all:?}");
    serde_json::from_str(&all[0].1).unwrap()
}

// ---- Network sets ----

#[test]
fn network_set_bad_cidr_is_skipped_and_the_rest_kept() {
    for kind in ["GlobalNetworkSet", "NetworkSet"] {
        let c = ok(
            kind,
            "{nets: [10.1.0.0/16, not-a-cidr, 192.168.5.0/24, 10.9.9.9]}",
        );
        let Value::NetworkSet(NetworkSet { nets, .. }) = &c.kvs[0].1 else {
            panic!("{c:?}")
        };
        assert_eq!(
            nets,
            &[
                net("10.1.0.0/16"),
                net("192.168.5.0/24"),
                net("10.9.9.9/32")
            ]
        );
        assert_eq!(notes(&c), [("spec.nets[1]", Effect::Skipped)], "{kind}");
        assert_eq!(
            calico_json(&c.kvs)["nets"],
            serde_json::json!(["10.1.0.0/16", "192.168.5.0/24", "10.9.9.9/32"])
        );
    }
}

#[test]
fn network_set_with_only_bad_cidrs_is_sent_with_no_nets() {
    let c = ok("GlobalNetworkSet", "{nets: [bogus, 10.0.0.0/33]}");
    let Value::NetworkSet(s) = &c.kvs[0].1 else {
        panic!()
    };
    assert!(s.nets.is_empty());
    assert_eq!(calico(&c.kvs)[0].1, r#"{"labels":null}"#);
}

// ---- Policy and profile rules ----

#[test]
fn rule_bad_net_is_skipped_and_the_rest_kept() {
    let c = ok(
        "GlobalNetworkPolicy",
        "{ingress: [{action: Deny, source: {nets: [10.0.0.0/8, nope]}, destination: {notNets: [x/1, 'fd00::/8']}}]}",
    );
    let r = first_rule(&c);
    assert_eq!(r.src.nets, [net("10.0.0.0/8")]);
    assert_eq!(r.dst.not_nets, [net("fd00::/8")]);
    assert_eq!(
        notes(&c),
        [
            ("spec.ingress[0].source.nets[1]", Effect::Skipped),
            ("spec.ingress[0].destination.notNets[0]", Effect::Skipped),
        ]
    );
    let rule = &calico_json(&c.kvs)["inbound_rules"][0];
    assert_eq!(rule["src_nets"], serde_json::json!(["10.0.0.0/8"]));
    assert_eq!(rule["!dst_nets"], serde_json::json!(["fd00::/8"]));
}

/// Calico's behaviour, copied: a rule whose nets are all bad has none left and matches any
/// address (Calico's API refuses such a rule when it is written; the embedded store does too).
#[test]
fn rule_with_only_bad_nets_is_left_with_none() {
    let yaml = manifest(
        "GlobalNetworkPolicy",
        "x",
        "{ingress: [{action: Deny, source: {nets: [bogus]}}]}",
    );
    let c = convert_noting(&resource(&yaml)).unwrap();
    assert!(first_rule(&c).src.nets.is_empty());
    assert_eq!(
        calico_json(&c.kvs)["inbound_rules"],
        serde_json::json!([{"action": "deny"}])
    );
    let e = accept_write(resource(&yaml)).unwrap_err();
    assert_eq!(e.field, "spec.ingress[0].source.nets[0]");
}

#[test]
fn protocol_given_as_a_number_stays_a_number() {
    for (given, protocol, number, json) in [
        ("6", Protocol::Tcp, true, serde_json::json!(6)),
        ("'6'", Protocol::Tcp, true, serde_json::json!(6)),
        ("'06'", Protocol::Tcp, true, serde_json::json!(6)),
        ("132", Protocol::Sctp, true, serde_json::json!(132)),
        ("'17'", Protocol::Udp, true, serde_json::json!(17)),
        ("47", Protocol::Number(47), true, serde_json::json!(47)),
        ("TCP", Protocol::Tcp, false, serde_json::json!("tcp")),
        ("Tcp", Protocol::Tcp, false, serde_json::json!("tcp")),
        (
            "ICMPv6",
            Protocol::IcmpV6,
            false,
            serde_json::json!("icmpv6"),
        ),
        (
            "UDPLite",
            Protocol::UdpLite,
            false,
            serde_json::json!("udplite"),
        ),
    ] {
        let c = ok(
            "GlobalNetworkPolicy",
            &format!("{{ingress: [{{action: Allow, protocol: {given}, notProtocol: {given}}}]}}"),
        );
        let r = first_rule(&c);
        assert_eq!(
            (r.protocol, r.detail.protocol_number),
            (Some(protocol), number),
            "{given}"
        );
        assert_eq!(
            (r.not_protocol, r.detail.not_protocol_number),
            (Some(protocol), number),
            "{given}"
        );
        let rule = &calico_json(&c.kvs)["inbound_rules"][0];
        assert_eq!(rule["protocol"], json, "{given}");
        assert_eq!(rule["!protocol"], json, "{given}");
    }
}

#[test]
fn protocol_number_0_or_an_unknown_name_drops_the_policy() {
    for given in ["0", "'0'", "'+6'", "' 6'", "'256'", "Bogus"] {
        let e = refused(
            "GlobalNetworkPolicy",
            &format!("{{ingress: [{{action: Allow, protocol: {given}}}]}}"),
        );
        assert_eq!(e.field, "spec.ingress[0].protocol", "{given}");
    }
}

#[test]
fn port_0_or_a_range_from_0_drops_the_policy() {
    for ports in ["[0]", "['0']", "['0:10']"] {
        let e = refused(
            "GlobalNetworkPolicy",
            &format!(
                "{{ingress: [{{action: Allow, protocol: TCP, destination: {{ports: {ports}}}}}]}}"
            ),
        );
        assert_eq!(e.field, "spec.ingress[0].destination.ports[0]", "{ports}");
    }
}

#[test]
fn named_port_that_is_not_a_kubernetes_port_name_drops_the_policy() {
    for name in [
        "HTTP",
        "my_port",
        "a.b",
        "80-90x-",
        "a--b",
        "-web",
        "sixteen-chars-xx",
    ] {
        let e = refused(
            "GlobalNetworkPolicy",
            &format!(
                "{{ingress: [{{action: Allow, protocol: TCP, destination: {{ports: ['{name}']}}}}]}}"
            ),
        );
        assert!(e.reason.contains("Kubernetes port name"), "{name}: {e}");
    }
    let c = ok(
        "GlobalNetworkPolicy",
        "{ingress: [{action: Allow, protocol: TCP, destination: {ports: [web-1, h2c]}}]}",
    );
    assert_eq!(
        first_rule(&c).dst.ports,
        [Port::Named("web-1".into()), Port::Named("h2c".into())]
    );
}

#[test]
fn ports_with_udplite_drop_the_policy() {
    for p in ["UDPLite", "136"] {
        let e = refused(
            "GlobalNetworkPolicy",
            &format!(
                "{{ingress: [{{action: Allow, protocol: {p}, destination: {{ports: [53]}}}}]}}"
            ),
        );
        assert_eq!(e.field, "spec.ingress[0]", "{p}");
    }
    // UDPLite without ports is a protocol match like any other.
    let c = ok(
        "GlobalNetworkPolicy",
        "{ingress: [{action: Allow, protocol: UDPLite}]}",
    );
    assert_eq!(first_rule(&c).protocol, Some(Protocol::UdpLite));
}

#[test]
fn named_ports_without_a_protocol_are_kept() {
    let c = ok(
        "NetworkPolicy",
        "{ingress: [{action: Allow, destination: {ports: [http], notPorts: [metrics]}}]}",
    );
    let r = first_rule(&c);
    assert_eq!((r.protocol, r.dst.ports.len()), (None, 1));
    assert!(c.notes.is_empty());
    // Numbers still need a protocol that has ports.
    let e = refused(
        "NetworkPolicy",
        "{ingress: [{action: Allow, destination: {ports: [http, 80]}}]}",
    );
    assert_eq!(e.field, "spec.ingress[0]");
}

#[test]
fn icmp_code_without_type_is_ignored() {
    let c = ok(
        "GlobalNetworkPolicy",
        "{ingress: [{action: Allow, protocol: ICMP, icmp: {code: 3}, notICMP: {type: 8, code: 0}}]}",
    );
    let r = first_rule(&c);
    assert_eq!(r.icmp, None);
    assert_eq!(
        r.not_icmp,
        Some(Icmp {
            icmp_type: 8,
            code: Some(0)
        })
    );
    assert_eq!(notes(&c), [("spec.ingress[0].icmp", Effect::Skipped)]);
    let e = refused(
        "GlobalNetworkPolicy",
        "{ingress: [{action: Allow, protocol: ICMP, icmp: {type: 255}}]}",
    );
    assert_eq!(e.field, "spec.ingress[0].icmp");
}

#[test]
fn icmp_with_another_protocol_is_passed_on() {
    for protocol in ["", "protocol: TCP, "] {
        let c = ok(
            "GlobalNetworkPolicy",
            &format!("{{ingress: [{{action: Allow, {protocol}icmp: {{type: 8}}}}]}}"),
        );
        assert_eq!(
            first_rule(&c).icmp,
            Some(Icmp {
                icmp_type: 8,
                code: None
            })
        );
        assert_eq!(notes(&c), [("spec.ingress[0].icmp", Effect::Passed)]);
    }
}

/// Deliberately not Calico's: Calico passes any action on (lower-cased) and Felix stops on one
/// it does not know; we take the four in any case and refuse the rest.
#[test]
fn action_unknown_or_missing_drops_the_policy_and_any_case_is_read() {
    for action in ["Allw", "next-tier", "''"] {
        let e = refused(
            "GlobalNetworkPolicy",
            &format!("{{ingress: [{{action: {action}}}]}}"),
        );
        assert_eq!(e.field, "spec.ingress[0].action", "{action}");
    }
    let yaml = manifest("GlobalNetworkPolicy", "x", "{ingress: [{action: allow}]}");
    let c = convert_noting(&resource(&yaml)).unwrap();
    assert_eq!(first_rule(&c).action, typha_protocol::model::Action::Allow);
    assert_eq!(notes(&c), [("spec.ingress[0].action", Effect::Passed)]);
    assert!(accept_write(resource(&yaml)).is_err());
    assert!(
        Resource::from_json(serde_json::json!({
            "apiVersion": "projectcalico.org/v3", "kind": "GlobalNetworkPolicy",
            "metadata": {"name": "x"}, "spec": {"ingress": [{"protocol": "TCP"}]}
        }))
        .is_err()
    );
}

#[test]
fn policy_types_unknown_are_ignored_and_none_means_both() {
    let c = ok(
        "GlobalNetworkPolicy",
        "{types: [Ingress, Sideways, egress]}",
    );
    assert_eq!(
        the_policy(&c).types,
        [PolicyType::Ingress, PolicyType::Egress]
    );
    assert_eq!(
        notes(&c),
        [
            ("spec.types[1]", Effect::Skipped),
            ("spec.types[2]", Effect::Passed)
        ]
    );
    // Only unknown types: Felix applies the policy in no direction, which we cannot say.
    let e = refused("GlobalNetworkPolicy", "{types: [Sideways]}");
    assert_eq!(e.field, "spec.types");
    // None: both directions, as Felix reads no types; written so to Calico's clients.
    let c = ok("NetworkPolicy", "{ingress: [{action: Allow}]}");
    assert_eq!(
        the_policy(&c).types,
        [PolicyType::Ingress, PolicyType::Egress]
    );
    assert_eq!(
        calico_json(&c.kvs)["types"],
        serde_json::json!(["ingress", "egress"])
    );
}

/// The embedded store fills types in as Calico's client library does on writing.
#[test]
fn policy_types_are_defaulted_on_write_to_the_embedded_store() {
    for (spec, types) in [
        ("{ingress: [{action: Allow}]}", vec![PolicyType::Ingress]),
        ("{}", vec![PolicyType::Ingress]),
        ("{egress: [{action: Allow}]}", vec![PolicyType::Egress]),
        (
            "{ingress: [{action: Allow}], egress: [{action: Allow}]}",
            vec![PolicyType::Ingress, PolicyType::Egress],
        ),
        (
            "{types: [Egress], ingress: [{action: Allow}]}",
            vec![PolicyType::Egress],
        ),
    ] {
        for kind in [
            "NetworkPolicy",
            "GlobalNetworkPolicy",
            "StagedNetworkPolicy",
            "StagedGlobalNetworkPolicy",
        ] {
            let r = accept_write(resource(&manifest(kind, "x", spec))).unwrap();
            let c = convert_noting(&r).unwrap();
            assert_eq!(the_policy(&c).types, types, "{kind} {spec}");
        }
    }
}

#[test]
fn performance_hints_unknown_or_twice_drop_the_policy() {
    for hints in [
        "[Fast]",
        "[AssumeNeededOnEveryNode, AssumeNeededOnEveryNode]",
    ] {
        let e = refused(
            "GlobalNetworkPolicy",
            &format!("{{performanceHints: {hints}}}"),
        );
        assert!(
            e.field.starts_with("spec.performanceHints["),
            "{hints}: {e}"
        );
    }
    let c = ok(
        "GlobalNetworkPolicy",
        "{performanceHints: [AssumeNeededOnEveryNode]}",
    );
    assert_eq!(
        the_policy(&c).performance_hints,
        ["AssumeNeededOnEveryNode"]
    );
}

#[test]
fn staged_action_unknown_is_passed_on() {
    let c = ok("StagedNetworkPolicy", "{stagedAction: Promote}");
    assert_eq!(the_policy(&c).staged_action.as_deref(), Some("Promote"));
    assert_eq!(notes(&c), [("spec.stagedAction", Effect::Passed)]);
    assert_eq!(calico_json(&c.kvs)["staged_action"], "Promote");
}

#[test]
fn policy_namespace_or_service_account_selector_that_does_not_parse_is_ignored() {
    let c = ok(
        "GlobalNetworkPolicy",
        "{selector: role == 'db', namespaceSelector: 'a ==', serviceAccountSelector: 'b in {'}",
    );
    assert_eq!(the_policy(&c).selector, "role == 'db'");
    assert_eq!(
        notes(&c),
        [
            ("spec.namespaceSelector", Effect::Skipped),
            ("spec.serviceAccountSelector", Effect::Skipped)
        ]
    );
    let c = ok("NetworkPolicy", "{serviceAccountSelector: 'b in {'}");
    assert_eq!(
        the_policy(&c).selector,
        "projectcalico.org/namespace == 'ns'"
    );
    // The policy's own selector still has to parse.
    assert_eq!(
        refused("GlobalNetworkPolicy", "{selector: 'a =='}").field,
        "spec.selector"
    );
}

#[test]
fn profile_bad_rule_drops_only_its_rules() {
    let c = ok(
        "Profile",
        "{labelsToApply: {team: a}, ingress: [{action: Allow, protocol: TCP, destination: {ports: [0]}}]}",
    );
    assert_eq!(c.kvs.len(), 1);
    assert!(
        matches!(&c.kvs[0], (Key::ProfileLabels(_), Value::ProfileLabels(l)) if l.labels["team"] == "a")
    );
    assert_eq!(
        notes(&c),
        [("spec.ingress[0].destination.ports[0]", Effect::Dropped)]
    );
}

// ---- Endpoints ----

#[test]
fn host_endpoint_bad_expected_ip_is_skipped() {
    let c = ok(
        "HostEndpoint",
        "{node: n1, interfaceName: eth0, expectedIPs: [10.0.0.1, 300.1.1.1, 'fd00::1']}",
    );
    let Value::HostEndpoint(h) = &c.kvs[0].1 else {
        panic!()
    };
    assert_eq!(h.expected_ipv4_addrs, [Ipv4Addr::new(10, 0, 0, 1)]);
    assert_eq!(h.expected_ipv6_addrs.len(), 1);
    assert_eq!(notes(&c), [("spec.expectedIPs[1]", Effect::Skipped)]);
    // With neither an interface nor an address left, it is sent all the same (it matches
    // nothing); Calico's API refuses one written with neither.
    let c = ok("HostEndpoint", "{node: n1, expectedIPs: [bogus]}");
    assert_eq!(c.kvs.len(), 1);
    let c = ok("HostEndpoint", "{node: n1}");
    assert_eq!(
        (c.kvs.len(), notes(&c)),
        (1, vec![("spec", Effect::Passed)])
    );
}

#[test]
fn host_endpoint_checks_calicos_validator_makes() {
    for (spec, field) in [
        ("{node: n1, interfaceName: 'eth0:1'}", "spec.interfaceName"),
        (
            "{node: n1, interfaceName: a-very-long-interface}",
            "spec.interfaceName",
        ),
        (
            "{node: n1, interfaceName: eth0, profiles: ['a b']}",
            "spec.profiles[0]",
        ),
        (
            "{node: n1, interfaceName: eth0, ports: [{name: '', protocol: TCP, port: 22}]}",
            "spec.ports[0]",
        ),
        (
            "{node: n1, interfaceName: eth0, ports: [{name: ssh, protocol: UDPLite, port: 22}]}",
            "spec.ports[0]",
        ),
        (
            "{node: n1, interfaceName: eth0, ports: [{name: ssh, protocol: 6, port: 22}]}",
            "spec.ports[0]",
        ),
    ] {
        assert_eq!(refused("HostEndpoint", spec).field, field, "{spec}");
    }
    let c = ok(
        "HostEndpoint",
        "{node: n1, interfaceName: '*', profiles: [a.b_c-1], ports: [{name: ssh, protocol: SCTP, port: 22}]}",
    );
    let Value::HostEndpoint(h) = &c.kvs[0].1 else {
        panic!()
    };
    assert_eq!(
        h.ports,
        [EndpointPort {
            name: "ssh".into(),
            protocol: Protocol::Sctp,
            port: 22
        }]
    );
}

fn wep(extra: &str) -> Result<Converted, ConvertError> {
    noting(
        "WorkloadEndpoint",
        &format!(
            "{{orchestrator: k8s, node: n1, pod: p, endpoint: eth0, interfaceName: cali1, ipNetworks: [10.0.0.5/32], {extra}}}"
        ),
    )
}

fn the_wep(c: &Converted) -> &typha_protocol::model::WorkloadEndpoint {
    match &c.kvs[..] {
        [(_, Value::WorkloadEndpoint(w))] => w,
        other => panic!("{other:?}"),
    }
}

#[test]
fn workload_endpoint_bad_nat_is_skipped() {
    let c = wep("ipNATs: [{internalIP: 10.0.0.5, externalIP: 192.0.2.9}, {internalIP: 10.0.0.5, externalIP: nope}]").unwrap();
    assert_eq!(
        the_wep(&c).ipv4_nat,
        [IpNat {
            int_ip: "10.0.0.5".parse().unwrap(),
            ext_ip: "192.0.2.9".parse().unwrap()
        }]
    );
    assert_eq!(notes(&c), [("spec.ipNATs[1]", Effect::Skipped)]);
    // An address left out is Go's empty string: the NAT is skipped too.
    let c = wep("ipNATs: [{internalIP: 10.0.0.5}]").unwrap();
    assert!(the_wep(&c).ipv4_nat.is_empty());
    assert_eq!(notes(&c), [("spec.ipNATs[0]", Effect::Skipped)]);
}

#[test]
fn workload_endpoint_gateway_as_a_cidr_is_its_address() {
    let c = wep("ipv4Gateway: 10.0.0.1/24, ipv6Gateway: 'fd00::1/64'").unwrap();
    let w = the_wep(&c);
    assert_eq!(w.ipv4_gateway, Some(Ipv4Addr::new(10, 0, 0, 1)));
    assert_eq!(w.ipv6_gateway, Some("fd00::1".parse().unwrap()));
    assert!(c.notes.is_empty());
    // Of the other family: kept by Calico, which our model cannot hold; the endpoint is kept.
    let c = wep("ipv4Gateway: 'fd00::1'").unwrap();
    assert_eq!(the_wep(&c).ipv4_gateway, None);
    assert_eq!(notes(&c), [("spec.ipv4Gateway", Effect::Skipped)]);
    assert_eq!(
        wep("ipv4Gateway: bogus").unwrap_err().field,
        "spec.ipv4Gateway"
    );
}

#[test]
fn workload_endpoint_named_port_checks_calicos_validator_makes() {
    for ports in [
        "[{name: dns, protocol: 17, port: 53}]",
        "[{name: dns, protocol: '17', port: 53}]",
        "[{name: ping, protocol: ICMP, port: 1}]",
        "[{name: 'a b', protocol: TCP, port: 80}]",
    ] {
        assert_eq!(
            wep(&format!("ports: {ports}")).unwrap_err().field,
            "spec.ports[0]",
            "{ports}"
        );
    }
    // A named port without a protocol or a port number is Go's zero value: refused.
    for ports in ["[{name: dns, port: 53}]", "[{name: dns, protocol: UDP}]"] {
        assert_eq!(
            wep(&format!("ports: {ports}")).unwrap_err().field,
            "spec.ports[0]",
            "{ports}"
        );
    }
    // Unnamed ports are left out before they are checked, as Calico's processor does.
    let c =
        wep("ports: [{name: '', protocol: 17, port: 53}, {name: Web_1, protocol: tcp, port: 80}]")
            .unwrap();
    assert_eq!(
        the_wep(&c).ports,
        [EndpointPort {
            name: "Web_1".into(),
            protocol: Protocol::Tcp,
            port: 80
        }]
    );
}

/// Calico's Typha refuses a workload endpoint's interface name only when it is empty.
#[test]
fn workload_endpoint_interface_name_is_refused_only_when_empty() {
    use crate::cache::pipeline::{InvalidKv, validate};
    use typha_protocol::model::EncodedValue;
    let long = noting(
        "WorkloadEndpoint",
        "{orchestrator: k8s, node: n1, pod: p, endpoint: eth0, interfaceName: a-name-longer-than-15:x, ipNetworks: [10.0.0.5/32]}",
    )
    .unwrap();
    let (k, v) = &long.kvs[0];
    assert_eq!(validate(k, v, &EncodedValue::encode(v)), Ok(()));
    let empty = noting(
        "WorkloadEndpoint",
        "{orchestrator: k8s, node: n1, pod: p, endpoint: eth0, ipNetworks: [10.0.0.5/32]}",
    )
    .unwrap();
    let (k, v) = &empty.kvs[0];
    assert_eq!(
        validate(k, v, &EncodedValue::encode(v)),
        Err(InvalidKv::NoInterfaceName)
    );
}

// ---- Pools ----

#[test]
fn ip_pool_unknown_mode_is_never() {
    let c = ok(
        "IPPool",
        "{cidr: 10.65.0.0/16, ipipMode: Sometimes, vxlanMode: Always}",
    );
    let Value::IpPool(p) = &c.kvs[0].1 else {
        panic!()
    };
    assert_eq!(
        (p.ipip_mode, p.vxlan_mode),
        (EncapMode::Never, EncapMode::Always)
    );
    assert_eq!(notes(&c), [("spec.ipipMode", Effect::Skipped)]);
    // Calico reads the CIDR as a CIDR only.
    assert_eq!(refused("IPPool", "{cidr: 10.65.0.1}").field, "spec.cidr");
}

// ---- Nodes ----

fn node(spec: &str, status: &str) -> Converted {
    convert_noting(&resource(&format!(
        "apiVersion: projectcalico.org/v3\nkind: Node\nmetadata: {{name: n1}}\nspec: {spec}\nstatus: {status}\n"
    )))
    .unwrap()
}

fn host_ip(c: &Converted) -> Option<IpAddr> {
    c.kvs.iter().find_map(|(k, v)| match (k, v) {
        (Key::HostIp(HostIpKey { .. }), Value::HostIp(ip)) => Some(*ip),
        _ => None,
    })
}

fn host_config(c: &Converted) -> Vec<(String, String)> {
    c.kvs
        .iter()
        .filter_map(|(k, v)| match (k, v) {
            (Key::HostConfig(HostConfigKey { name, .. }), Value::Config(v)) => {
                Some((name.clone(), v.clone()))
            }
            _ => None,
        })
        .collect()
}

fn the_node(c: &Converted) -> (&ResourceKey, &Node) {
    c.kvs
        .iter()
        .find_map(|(k, v)| match (k, v) {
            (Key::Resource(k), Value::Node(n)) => Some((k, n)),
            _ => None,
        })
        .unwrap()
}

#[test]
fn node_bad_bgp_address_falls_back_for_the_host_ip() {
    let c = node(
        "{bgp: {ipv4Address: not-an-ip, ipv4IPIPTunnelAddr: 10.244.0.1}, addresses: [{address: 192.0.2.7, type: InternalIP}]}",
        "{}",
    );
    assert_eq!(host_ip(&c), Some("192.0.2.7".parse().unwrap()));
    assert_eq!(
        host_config(&c),
        [("IpInIpTunnelAddr".into(), "10.244.0.1".into())]
    );
    let (_, n) = the_node(&c);
    assert_eq!((n.ipv4_address, n.detail.meta.invalid_as_v3), (None, true));
    assert_eq!(notes(&c), [("spec.bgp.ipv4Address", Effect::Skipped)]);
    // An IPv6 address there is the host IP, as Calico's processor takes it.
    let c = node("{bgp: {ipv4Address: 'fd00::7/64'}}", "{}");
    assert_eq!(host_ip(&c), Some("fd00::7".parse().unwrap()));
}

#[test]
fn node_bad_tunnel_address_leaves_out_only_its_key() {
    let c = node(
        "{bgp: {ipv4Address: 10.0.0.7/24, ipv4IPIPTunnelAddr: bad}, ipv4VXLANTunnelAddr: 10.244.0.2, ipv6VXLANTunnelAddr: nope}",
        "{}",
    );
    assert_eq!(host_ip(&c), Some("10.0.0.7".parse().unwrap()));
    assert_eq!(
        host_config(&c),
        [("IPv4VXLANTunnelAddr".into(), "10.244.0.2".into())]
    );
    let (_, n) = the_node(&c);
    assert_eq!(n.ipv4_ipip_tunnel_addr, None);
    assert!(n.detail.meta.invalid_as_v3);
}

#[test]
fn node_mac_is_passed_on_as_written() {
    let c = node(
        "{vxlanTunnelMACAddr: 'AA:BB:CC:DD:EE:FF', vxlanTunnelMACAddrV6: not-a-mac}",
        "{}",
    );
    assert_eq!(
        host_config(&c),
        [
            ("VXLANTunnelMACAddr".into(), "AA:BB:CC:DD:EE:FF".into()),
            ("VXLANTunnelMACAddrV6".into(), "not-a-mac".into())
        ]
    );
    let (_, n) = the_node(&c);
    assert!(n.vxlan_tunnel_mac.is_some());
    assert!(n.detail.meta.invalid_as_v3);
    // Go's other MAC forms are valid.
    let c = node("{vxlanTunnelMACAddr: 0123.4567.89ab}", "{}");
    assert!(!the_node(&c).1.detail.meta.invalid_as_v3);
}

/// A node Calico's v3 validator refuses: its KVs are sent, and Calico's clients are sent its
/// v3 Node as a deletion while its WireGuard key stays.
#[test]
fn node_invalid_as_v3_sends_no_v3_node_to_calicos_clients() {
    let good = node(
        "{bgp: {ipv4Address: 10.0.0.7/24}, wireguard: {interfaceIPv4Address: 10.0.9.1}}",
        "{wireguardPublicKey: jlkVyQYooZYzI2wFfNhSZez5eWh44yfq1wKVjLvSXgY=}",
    );
    let (k, n) = the_node(&good);
    assert!(!n.detail.meta.invalid_as_v3);
    for (spec, status) in [
        (
            "{bgp: {ipv4Address: 10.0.0.7/24, routeReflectorClusterID: rr-1}}",
            "{}",
        ),
        (
            "{bgp: {ipv4Address: 10.0.0.7/24}}",
            "{wireguardPublicKey: not-a-key}",
        ),
        ("{bgp: {}}", "{}"),
        (
            "{bgp: {ipv4Address: 10.0.0.7/24, ipv6Address: 10.0.0.8}}",
            "{}",
        ),
        ("{wireguard: {interfaceIPv4Address: 'fd00::1'}}", "{}"),
    ] {
        let c = node(spec, status);
        assert!(the_node(&c).1.detail.meta.invalid_as_v3, "{spec} {status}");
    }
    let bad = node(
        "{bgp: {ipv4Address: 10.0.0.7/24, routeReflectorClusterID: rr-1}, wireguard: {interfaceIPv4Address: 10.0.9.1}}",
        "{wireguardPublicKey: jlkVyQYooZYzI2wFfNhSZez5eWh44yfq1wKVjLvSXgY=}",
    );
    let key = Key::Resource(k.clone());
    let changes = calico_changes(
        &key,
        Some(&Value::Node(n.clone())),
        Some(&Value::Node(the_node(&bad).1.clone())),
    );
    let v3: Vec<_> = changes
        .iter()
        .filter(|c| c.key.contains("/nodes/"))
        .map(|c| c.value.is_none())
        .collect();
    assert_eq!(v3, [true], "{changes:?}");
    assert!(
        calico_kvs(&key, &Value::Node(the_node(&bad).1.clone()))
            .iter()
            .any(|kv| kv.key.ends_with("/wireguard") && kv.value.is_some())
    );
    // A node name that is not a DNS-1123 subdomain (etcd) is refused too.
    let c = convert_noting(&resource(
        "apiVersion: projectcalico.org/v3\nkind: Node\nmetadata: {name: Node_1}\nspec: {}\n",
    ))
    .unwrap();
    assert!(the_node(&c).1.detail.meta.invalid_as_v3);
}

#[test]
fn node_as_number_as_calico_reads_it() {
    for (asn, n) in [("64512", 64512), ("'64512'", 64512), ("'1.10'", 65546)] {
        let c = node(
            &format!("{{bgp: {{ipv4Address: 10.0.0.7/24, asNumber: {asn}}}}}"),
            "{}",
        );
        assert_eq!(the_node(&c).1.as_number, Some(n), "{asn}");
    }
}

// ---- Kinds carried whole ----

fn raw(kind: &str, name: &str, spec: &str) -> Result<Converted, ConvertError> {
    convert_noting(&resource(&format!(
        "apiVersion: projectcalico.org/v3\nkind: {kind}\nmetadata: {{name: {name}}}\nspec: {spec}\n"
    )))
}

#[test]
fn bgp_peer_checks_calicos_validator_makes() {
    for spec in [
        "{peerIP: 10.0.0.1, asNumber: 64512}",
        "{peerIP: '10.0.0.1:1790', asNumber: 64512}",
        "{peerIP: '[fd00::1]:179', asNumber: 64512, reachableBy: 'fd00::fe'}",
        "{peerIP: 'fd00::1', asNumber: 64512}",
        "{nodeSelector: all(), peerSelector: rr == 'true'}",
        "{node: node-1, peerIP: 10.0.0.1, asNumber: 64512, sourceAddress: None}",
    ] {
        assert!(raw("BGPPeer", "p", spec).is_ok(), "{spec}");
    }
    for (spec, field) in [
        ("{peerIP: 'router-1', asNumber: 64512}", "spec.peerIP"),
        ("{peerIP: '10.0.0.1:0', asNumber: 64512}", "spec.peerIP"),
        ("{peerIP: 'fd00::1:179x'}", "spec.peerIP"),
        ("{node: a, nodeSelector: all()}", "spec.node"),
        ("{peerIP: 10.0.0.1, peerSelector: all()}", "spec.peerIP"),
        ("{asNumber: 64512, peerSelector: all()}", "spec.asNumber"),
        ("{localWorkloadSelector: all()}", "spec.asNumber"),
        ("{peerSelector: 'a =='}", "spec.peerSelector"),
        ("{node: Node_1}", "spec.node"),
        ("{filters: [Bad_Name]}", "spec.filters[0]"),
        ("{sourceAddress: Other}", "spec.sourceAddress"),
        (
            "{peerIP: 10.0.0.1, reachableBy: 'fd00::1'}",
            "spec.reachableBy",
        ),
        ("{reachableBy: 10.0.0.1}", "spec.reachableBy"),
        (
            "{keepOriginalNextHop: true, nextHopMode: Self}",
            "spec.keepOriginalNextHop",
        ),
    ] {
        assert_eq!(
            raw("BGPPeer", "p", spec).unwrap_err().field,
            field,
            "{spec}"
        );
    }
    assert_eq!(
        raw("BGPPeer", "Rack_1", "{}").unwrap_err().field,
        "metadata.name"
    );
}

#[test]
fn bgp_configuration_checks_calicos_validator_makes() {
    assert!(raw(
        "BGPConfiguration",
        "default",
        "{logSeverityScreen: Info, serviceClusterIPs: [{cidr: 10.96.0.0/12}], communities: [{name: c1, value: '64512:100'}], prefixAdvertisements: [{cidr: 10.0.0.0/8, communities: [c1, '1:2:3']}]}"
    )
    .is_ok());
    for (spec, field) in [
        ("{logSeverityScreen: Loud}", "spec.logSeverityScreen"),
        (
            "{serviceClusterIPs: [{cidr: 10.96.0.1/12}]}",
            "spec.serviceClusterIPs[0].cidr",
        ),
        (
            "{communities: [{name: c1, value: '70000:1'}], prefixAdvertisements: [{cidr: 10.0.0.0/8, communities: [c1]}]}",
            "spec.communities[0].value",
        ),
        (
            "{communities: [{name: c1, value: '1:1'}]}",
            "spec.communities",
        ),
        (
            "{prefixAdvertisements: [{cidr: 10.0.0.0/8, communities: [c9]}]}",
            "spec.prefixAdvertisements[0].communities",
        ),
        (
            "{nodeToNodeMeshEnabled: false, nodeMeshMaxRestartTime: 2m}",
            "spec.nodeMeshMaxRestartTime",
        ),
        ("{ignoredInterfaces: ['*']}", "spec.ignoredInterfaces[0]"),
        (
            "{localWorkloadPeeringIPV4: 'fd00::1'}",
            "spec.localWorkloadPeeringIPV4",
        ),
        (
            "{ipv4NormalRoutePriority: -1}",
            "spec.ipv4NormalRoutePriority",
        ),
    ] {
        assert_eq!(
            raw("BGPConfiguration", "default", spec).unwrap_err().field,
            field,
            "{spec}"
        );
    }
}

#[test]
fn bgp_filter_checks_calicos_validator_makes() {
    assert!(raw(
        "BGPFilter",
        "f",
        "{exportV4: [{action: Accept, cidr: 10.0.0.0/8, matchOperator: In, prefixLength: {min: 16, max: 24}}], importV6: [{action: Reject, interface: 'cali*', operations: [{setPriority: {value: 3}}]}]}"
    )
    .is_ok());
    for (spec, field) in [
        (
            "{exportV4: [{action: Accept, cidr: 10.0.0.0/8}]}",
            "spec.exportV4[0].matchOperator",
        ),
        (
            "{exportV4: [{action: Accept, matchOperator: In}]}",
            "spec.exportV4[0].matchOperator",
        ),
        (
            "{exportV4: [{action: Accept, cidr: 'fd00::/8', matchOperator: In}]}",
            "spec.exportV4[0].cidr",
        ),
        (
            "{exportV4: [{action: Accept, cidr: 10.0.0.1/8, matchOperator: In}]}",
            "spec.exportV4[0].cidr",
        ),
        (
            "{importV6: [{action: Accept, prefixLength: {max: 64}}]}",
            "spec.importV6[0].prefixLength",
        ),
        (
            "{importV4: [{action: Accept, cidr: 10.0.0.0/8, matchOperator: In, prefixLength: {max: 33}}]}",
            "spec.importV4[0].prefixLength",
        ),
        ("{importV4: [{action: Drop}]}", "spec.importV4[0].action"),
        (
            "{importV4: [{action: Accept, peerType: both}]}",
            "spec.importV4[0].peerType",
        ),
        (
            "{importV4: [{action: Accept, operations: [{}]}]}",
            "spec.importV4[0].operations[0]",
        ),
        (
            "{importV4: [{action: Accept, operations: [{setPriority: {value: 1}, prependASPath: {prefix: [1]}}]}]}",
            "spec.importV4[0].operations[0]",
        ),
        (
            "{importV4: [{action: Accept, operations: [{addCommunity: {}}]}]}",
            "spec.importV4[0].operations[0]",
        ),
        (
            "{importV4: [{action: Accept, operations: [{setPriority: {value: 0}}]}]}",
            "spec.importV4[0].operations[0].setPriority.value",
        ),
    ] {
        assert_eq!(
            raw("BGPFilter", "f", spec).unwrap_err().field,
            field,
            "{spec}"
        );
    }
}

#[test]
fn calico_node_status_needs_node_classes_and_period() {
    assert!(
        raw(
            "CalicoNodeStatus",
            "s",
            "{node: node-1, classes: [Agent, BGP], updatePeriodSeconds: 0}"
        )
        .is_ok()
    );
    for (spec, field) in [
        ("{classes: [Agent], updatePeriodSeconds: 10}", "spec.node"),
        ("{node: n1, updatePeriodSeconds: 10}", "spec.classes"),
        (
            "{node: n1, classes: [BGP, BGP], updatePeriodSeconds: 10}",
            "spec.classes",
        ),
        ("{node: n1, classes: [BGP]}", "spec.updatePeriodSeconds"),
        (
            "{node: n1, classes: [BGP], updatePeriodSeconds: 86401}",
            "spec.updatePeriodSeconds",
        ),
    ] {
        assert_eq!(
            raw("CalicoNodeStatus", "s", spec).unwrap_err().field,
            field,
            "{spec}"
        );
    }
}

// ---- FelixConfiguration ----

fn felix_config(meta: &str, spec: &str) -> Result<Converted, ConvertError> {
    convert_noting(&resource(&format!(
        "apiVersion: projectcalico.org/v3\nkind: FelixConfiguration\nmetadata: {meta}\nspec: {spec}\n"
    )))
}

fn config_keys(c: &Converted) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = c
        .kvs
        .iter()
        .map(|(k, v)| match v {
            Value::Config(v) => (k.to_string(), v.clone()),
            other => panic!("{other:?}"),
        })
        .collect();
    out.sort();
    out
}

#[test]
fn felix_configuration_field_of_the_wrong_type_makes_it_unreadable() {
    for (spec, field) in [
        ("{bpfEnabled: 'yes'}", "spec.bpfEnabled"),
        ("{logSeverityScreen: 3}", "spec.logSeverityScreen"),
        ("{reportingInterval: 30}", "spec.reportingInterval"),
        ("{reportingInterval: 30 seconds}", "spec.reportingInterval"),
        ("{vxlanVNI: 1.5}", "spec.vxlanVNI"),
        ("{vxlanVNI: '4096'}", "spec.vxlanVNI"),
        (
            "{ipv6Support: true, failsafeInboundHostPorts: [{port: tcp}]}",
            "spec.failsafeInboundHostPorts",
        ),
        ("{routeTableRange: {min: a}}", "spec.routeTableRange"),
        (
            "{healthTimeoutOverrides: [{name: x, timeout: soon}]}",
            "spec.healthTimeoutOverrides",
        ),
    ] {
        assert_eq!(
            felix_config("{name: default}", spec).unwrap_err().field,
            field,
            "{spec}"
        );
    }
    // Every field of its type reads.
    let c = felix_config(
        "{name: default}",
        "{bpfEnabled: true, logSeverityScreen: Info, reportingInterval: 30s, vxlanVNI: 4096, failsafeInboundHostPorts: [{protocol: tcp, port: 22}], routeTableRange: {min: 1, max: 250}, healthTimeoutOverrides: [{name: x, timeout: 5s}], bpfLogLevel: null}",
    )
    .unwrap();
    assert_eq!(c.kvs.len(), 7);
    assert!(c.notes.is_empty());
}

#[test]
fn felix_configuration_unknown_field_is_dropped() {
    let c = felix_config("{name: default}", "{bpfEnabled: true, notAFelixSetting: 1}").unwrap();
    assert_eq!(
        config_keys(&c),
        [("/calico/v1/config/BPFEnabled".into(), "true".into())]
    );
    assert_eq!(notes(&c), [("spec.notAFelixSetting", Effect::Skipped)]);
    // In a selector-scoped configuration too (carried whole).
    let c = felix_config(
        "{name: rack-a}",
        "{nodeSelector: rack == 'a', bpfEnabled: true, notAFelixSetting: 1}",
    )
    .unwrap();
    let Value::Resource(r) = &c.kvs[0].1 else {
        panic!()
    };
    assert!(!r.spec_json.contains("notAFelixSetting"), "{}", r.spec_json);
}

#[test]
fn felix_configuration_override_annotations_set_parameters() {
    let c = felix_config(
        "{name: node.n1, annotations: {config.projectcalico.org/LogSeverityScreen: Debug, config.projectcalico.org/SomethingNew: x, config.projectcalico.org/Empty: '', other.io/LogSeverityScreen: Error}}",
        "{logSeverityScreen: Info, bpfEnabled: false}",
    )
    .unwrap();
    assert_eq!(
        config_keys(&c),
        [
            (
                "/calico/v1/host/n1/config/BPFEnabled".into(),
                "false".into()
            ),
            (
                "/calico/v1/host/n1/config/LogSeverityScreen".into(),
                "Debug".into()
            ),
            ("/calico/v1/host/n1/config/SomethingNew".into(), "x".into()),
        ]
    );
    assert_eq!(
        notes(&c),
        [(
            "metadata.annotations[config.projectcalico.org/Empty]",
            Effect::Skipped
        )]
    );
}

// ---- The embedded store's writes ----

/// Calico's API refuses at write time what its syncers skip on reading; so does the embedded
/// store, with `accept_write`.
#[test]
fn writes_are_refused_where_reading_would_skip() {
    for yaml in [
        manifest("GlobalNetworkSet", "s", "{nets: [10.0.0.0/8, bogus]}"),
        manifest("HostEndpoint", "h", "{node: n1, expectedIPs: [bogus]}"),
        manifest("IPPool", "p", "{cidr: 10.0.0.0/16, vxlanMode: Sometimes}"),
        manifest("GlobalNetworkPolicy", "p", "{namespaceSelector: 'a =='}"),
        manifest("GlobalNetworkPolicy", "p", "{ingress: [{action: Allow, icmp: {type: 8}}]}"),
        manifest("StagedGlobalNetworkPolicy", "p", "{stagedAction: Promote}"),
        manifest("Profile", "p", "{ingress: [{action: Allow, protocol: TCP, destination: {ports: [0]}}]}"),
        "apiVersion: projectcalico.org/v3\nkind: Node\nmetadata: {name: n1}\nspec: {bgp: {ipv4Address: bogus}}\n".into(),
    ] {
        let r = resource(&yaml);
        assert!(convert_noting(&r).is_ok(), "{yaml}");
        assert!(accept_write(r).is_err(), "{yaml}");
    }
    assert!(
        accept_write(resource(&manifest(
            "GlobalNetworkSet",
            "s",
            "{nets: [10.0.0.0/8]}"
        )))
        .is_ok()
    );
}
