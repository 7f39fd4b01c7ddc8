//! The cases of Calico v3.32's `clusternetworkpolicy_test.go` that decide what Felix gets, with
//! the values written from Calico's conversion (tier, order, selectors, one rule per protocol
//! and peer, merged ports, failed rules).

use serde_json::{Value, json};

use super::calico_spec;

const K8S: &str = "projectcalico.org/orchestrator == 'k8s'";

/// A spec in tier Admin, priority 100, for the namespaces labelled `label: value`.
fn admin(ingress: Value, egress: Value) -> Value {
    json!({
        "tier": "Admin", "priority": 100,
        "subject": {"namespaces": {"matchLabels": {"label": "value", "label2": "value2"}}},
        "ingress": ingress, "egress": egress,
    })
}

fn ns_peer(k: &str, v: &str) -> Value {
    json!({"namespaces": {"matchLabels": {k: v}}})
}

#[test]
fn a_basic_policy_is_a_global_policy_in_tier_kube_admin() {
    let spec = admin(
        json!([{"name": "The first ingress rule", "action": "Accept",
                "protocols": [{"tcp": {"destinationPort": {"number": 80}}}],
                "from": [{"namespaces": {"matchLabels": {"k": "v", "k2": "v2"}}}]}]),
        Value::Null,
    );
    assert_eq!(
        calico_spec(&spec),
        Some(json!({
            "tier": "kube-admin", "order": 100.0,
            "namespaceSelector": "label == 'value' && label2 == 'value2'",
            "selector": K8S,
            "types": ["Ingress"],
            "ingress": [{"metadata": {"annotations": {"name": "The first ingress rule"}},
                         "action": "Allow", "protocol": "TCP",
                         "source": {"namespaceSelector": "k == 'v' && k2 == 'v2'"},
                         "destination": {"ports": [80]}}],
            "egress": [],
        }))
    );
    let mut baseline = spec.clone();
    baseline["tier"] = "Baseline".into();
    assert_eq!(calico_spec(&baseline).unwrap()["tier"], "kube-baseline");
}

#[test]
fn a_pods_subject_selects_kubernetes_pods_in_the_selected_namespaces() {
    let spec = json!({
        "tier": "Baseline", "priority": 5,
        "subject": {"pods": {"namespaceSelector": {},
                             "podSelector": {"matchExpressions": [
                                 {"key": "app", "operator": "DoesNotExist"}]}}},
    });
    let s = calico_spec(&spec).unwrap();
    assert_eq!(s["namespaceSelector"], "all()");
    assert_eq!(s["selector"], format!("{K8S} && ! has(app)"));
    // No rules: no types (the tier passes what no policy decides).
    assert_eq!(s["types"], json!([]));
    assert_eq!(s["order"], 5.0);
}

#[test]
fn a_policy_calico_does_not_read_gives_nothing() {
    let mut bad_tier = admin(json!([]), json!([]));
    bad_tier["tier"] = "Developer".into();
    assert_eq!(calico_spec(&bad_tier), None);
    let mut no_tier = bad_tier.clone();
    no_tier.as_object_mut().unwrap().remove("tier");
    assert_eq!(calico_spec(&no_tier), None);
    let no_subject = json!({"tier": "Admin", "priority": 1, "subject": {}});
    assert_eq!(calico_spec(&no_subject), None);
}

/// One rule per protocol (no protocol, i.e. the named ports, first; then TCP, UDP) and per peer
/// within it; a pods peer with its namespaces.
#[test]
fn rules_are_split_by_protocol_then_peer() {
    let protocols = json!([
        {"tcp": {"destinationPort": {"number": 80}}},
        {"udp": {"destinationPort": {"range": {"start": 20, "end": 30}}}},
        {"destinationNamedPort": "http-port"},
        {"destinationNamedPort": "metrics"},
    ]);
    let pods =
        json!({"pods": {"namespaceSelector": {}, "podSelector": {"matchLabels": {"k2": "v2"}}}});
    let spec = admin(
        json!([{"name": "in", "action": "Pass", "protocols": protocols,
                "from": [ns_peer("k", "v"), pods]}]),
        json!([{"name": "out", "action": "Deny", "protocols": protocols,
                "to": [ns_peer("k3", "v3"), {"pods": {
                    "namespaceSelector": {"matchLabels": {"k4": "v4"}},
                    "podSelector": {"matchLabels": {"k5": "v5"}}}}]}]),
    );
    let s = calico_spec(&spec).unwrap();
    let from_ns = json!({"namespaceSelector": "k == 'v'"});
    let from_pods =
        json!({"namespaceSelector": "all()", "selector": format!("{K8S} && k2 == 'v2'")});
    let named = json!(["http-port", "metrics"]);
    let ingress = |proto: Option<&str>, src: &Value, ports: &Value| {
        let mut r = json!({"metadata": {"annotations": {"name": "in"}}, "action": "Pass",
                           "source": src, "destination": {"ports": ports}});
        if let Some(p) = proto {
            r["protocol"] = p.into();
        }
        r
    };
    assert_eq!(
        s["ingress"],
        json!([
            ingress(None, &from_ns, &named),
            ingress(None, &from_pods, &named),
            ingress(Some("TCP"), &from_ns, &json!([80])),
            ingress(Some("TCP"), &from_pods, &json!([80])),
            ingress(Some("UDP"), &from_ns, &json!(["20:30"])),
            ingress(Some("UDP"), &from_pods, &json!(["20:30"])),
        ])
    );
    let egress = s["egress"].as_array().unwrap();
    assert_eq!(egress.len(), 6);
    assert_eq!(
        egress[1],
        json!({"metadata": {"annotations": {"name": "out"}}, "action": "Deny", "destination": {
            "namespaceSelector": "k4 == 'v4'", "selector": format!("{K8S} && k5 == 'v5'"),
            "ports": named}})
    );
    assert_eq!(
        egress[4],
        json!({"metadata": {"annotations": {"name": "out"}}, "action": "Deny", "protocol": "UDP",
               "destination": {"namespaceSelector": "k3 == 'v3'", "ports": ["20:30"]}})
    );
    assert_eq!(s["types"], json!(["Ingress", "Egress"]));
}

/// Calico's `SimplifyPorts` per protocol; a protocol without a port is every port of it, and a
/// protocol entry without any field makes the rule match everything.
#[test]
fn ports_merge_into_ranges_and_every_port_wins() {
    let with = |protocols: Value| {
        let spec = admin(
            json!([{"action": "Accept", "protocols": protocols, "from": [ns_peer("k", "v")]}]),
            Value::Null,
        );
        calico_spec(&spec).unwrap()["ingress"].clone()
    };
    let tcp = |n: u16| json!({"tcp": {"destinationPort": {"number": n}}});
    let merged = with(json!([
        tcp(90), tcp(81), {"destinationNamedPort": "web"}, tcp(80), tcp(82),
        {"tcp": {"destinationPort": {"range": {"start": 85, "end": 89}}}},
    ]));
    assert_eq!(
        merged,
        json!([
            {"action": "Allow", "source": {"namespaceSelector": "k == 'v'"},
             "destination": {"ports": ["web"]}},
            {"action": "Allow", "protocol": "TCP", "source": {"namespaceSelector": "k == 'v'"},
             "destination": {"ports": ["80:82", "85:90"]}},
        ])
    );
    // Protocols in the order of their names.
    let sorted = with(json!([tcp(443), {"sctp": {"destinationPort": {"number": 9}}}]));
    assert_eq!(
        [&sorted[0]["protocol"], &sorted[1]["protocol"]],
        [&json!("SCTP"), &json!("TCP")]
    );
    // TCP without a port: every TCP port, whatever TCP port is listed too.
    let every = with(json!([tcp(80), {"tcp": {}}, tcp(81)]));
    assert_eq!(
        every,
        json!([{"action": "Allow", "protocol": "TCP",
                "source": {"namespaceSelector": "k == 'v'"}, "destination": {}}])
    );
    // An entry with no field: any protocol, any port.
    let any = with(json!([tcp(80), {}]));
    assert_eq!(
        any,
        json!([{"action": "Allow", "source": {"namespaceSelector": "k == 'v'"}, "destination": {}}])
    );
}

#[test]
fn egress_networks_are_networks() {
    let spec = admin(
        Value::Null,
        json!([{"name": "out", "action": "Deny",
                "to": [ns_peer("k3", "v3"),
                       {"networks": ["10.10.10.5/24", "1.1.1.1/32", "::/0"]}]}]),
    );
    let s = calico_spec(&spec).unwrap();
    assert_eq!(
        s["egress"],
        json!([
            {"metadata": {"annotations": {"name": "out"}}, "action": "Deny",
             "destination": {"namespaceSelector": "k3 == 'v3'"}},
            {"metadata": {"annotations": {"name": "out"}}, "action": "Deny",
             "destination": {"nets": ["10.10.10.0/24", "1.1.1.1/32", "::/0"]}},
        ])
    );
    assert_eq!(s["types"], json!(["Egress"]));
}

/// A rule that does not convert: dropped when it accepts, a Deny of everything when it denies
/// or passes (Calico's fail-closed rule); the other rules are kept in their places.
#[test]
fn rules_that_do_not_convert_fail_closed() {
    let bad_range = json!([{"udp": {"destinationPort": {"range": {"start": 40, "end": 20}}}}]);
    let good = json!([{"tcp": {"destinationPort": {"number": 80}}}]);
    let spec = admin(
        json!([
            {"name": "a", "action": "Pass", "protocols": bad_range, "from": [ns_peer("k", "v")]},
            {"name": "b", "action": "Accept", "protocols": bad_range, "from": [ns_peer("k", "v")]},
            // A name our model would read as a port number.
            {"name": "c", "action": "Accept", "protocols": [{"destinationNamedPort": "8080"}],
             "from": [ns_peer("k", "v")]},
        ]),
        json!([
            {"name": "d", "action": "Deny", "protocols": bad_range, "to": [ns_peer("k3", "v3")]},
            {"name": "e", "action": "Deny", "protocols": good, "to": [ns_peer("k4", "v4")]},
            // Peers Calico does not read: nodes, domain names; and a network that is not one.
            {"name": "f", "action": "Accept", "to": [{"nodes": {}}]},
            {"name": "g", "action": "Pass", "to": [{"domainNames": ["example.com"]}]},
            {"name": "h", "action": "Deny", "to": [{"networks": ["10.0.0.0/33"]}]},
            // An action that is not one of the three.
            {"name": "i", "action": "Maybe", "to": [ns_peer("k", "v")]},
        ]),
    );
    let s = calico_spec(&spec).unwrap();
    // Calico's fail-closed rule carries no name.
    let deny_all = json!({"action": "Deny"});
    assert_eq!(s["ingress"], json!([deny_all]));
    assert_eq!(
        s["egress"],
        json!([
            deny_all,
            {"metadata": {"annotations": {"name": "e"}}, "action": "Deny", "protocol": "TCP",
             "destination": {"namespaceSelector": "k4 == 'v4'", "ports": [80]}},
            deny_all,
            deny_all,
        ])
    );
    // An ingress peer has no networks.
    let ingress_networks = admin(
        json!([{"action": "Deny", "from": [{"networks": ["10.0.0.0/8"]}]}]),
        Value::Null,
    );
    assert_eq!(
        calico_spec(&ingress_networks).unwrap()["ingress"],
        json!([deny_all])
    );
}
