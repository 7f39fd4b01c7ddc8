#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use super::*;
use crate::calico::v3::Spec;

fn object(v: Value) -> DynamicObject {
    serde_json::from_value(v).unwrap()
}

#[test]
fn a_crd_becomes_its_v3_resource() {
    let o = object(json!({
        "apiVersion": "crd.projectcalico.org/v1", "kind": "GlobalNetworkSet",
        "metadata": {"name": "set", "labels": {"a": "b"}, "resourceVersion": "7"},
        "spec": {"nets": ["10.0.0.0/8"]}}));
    let (id, item) = convert(Conversion::Crd(Kind::GlobalNetworkSet, CalicoGroup::V1), &o);
    let r = item.unwrap().unwrap();
    assert_eq!(Some(r.id()), id);
    assert_eq!(r.metadata.labels.get("a").map(String::as_str), Some("b"));
    assert!(matches!(r.spec, Spec::GlobalNetworkSet(_)));
}

#[test]
fn a_bad_crd_is_invalid_not_an_error() {
    let o = object(json!({
        "apiVersion": "crd.projectcalico.org/v1", "kind": "GlobalNetworkSet",
        "metadata": {"name": "set"}, "spec": {"nets": 5}}));
    let (id, item) = convert(Conversion::Crd(Kind::GlobalNetworkSet, CalicoGroup::V1), &o);
    let invalid = item.unwrap().unwrap_err();
    assert_eq!(invalid.id, id);
}

#[test]
fn namespaces_and_service_accounts_become_profiles() {
    let ns = object(json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "web", "labels": {"team": "a"}}}));
    let r = convert(Conversion::Namespace, &ns).1.unwrap().unwrap();
    assert_eq!(r.metadata.name, "kns.web");
    let Spec::Profile(p) = &r.spec else {
        panic!("{r:?}")
    };
    assert_eq!(p.labels_to_apply["pcns.team"], "a");
    assert_eq!(p.labels_to_apply["pcns.projectcalico.org/name"], "web");
    assert_eq!(p.ingress.len(), 1);

    let sa = object(json!({"apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": "api", "namespace": "web", "labels": {"x": "y"}}}));
    let r = convert(Conversion::ServiceAccount, &sa).1.unwrap().unwrap();
    assert_eq!(r.metadata.name, "ksa.web.api");
    let Spec::Profile(p) = &r.spec else {
        panic!("{r:?}")
    };
    assert_eq!(p.labels_to_apply["pcsa.x"], "y");
    assert_eq!(p.labels_to_apply["pcsa.projectcalico.org/name"], "api");
    assert!(p.ingress.is_empty());
}

fn pod(extra: Value) -> DynamicObject {
    let mut v = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "api-7d9f-x2k4q", "namespace": "web", "labels": {"app": "api"}},
        "spec": {"nodeName": "node-1", "serviceAccountName": "api",
                 "containers": [{"name": "c", "ports": [
                     {"name": "http", "containerPort": 8080, "protocol": "TCP"},
                     {"containerPort": 9090}]}]},
        "status": {"phase": "Running", "podIPs": [{"ip": "10.0.0.5"}, {"ip": "fd00::5"}]}});
    json_merge(&mut v, extra);
    object(v)
}

fn json_merge(a: &mut Value, b: Value) {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                json_merge(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (a, b) => *a = b,
    }
}

#[test]
fn interface_names_are_calicos() {
    // From Python: "cali" + hashlib.sha1(b"web.api-7d9f-x2k4q").hexdigest()[:11]
    assert_eq!(
        interface_name(InterfacePrefix::CALI, "web", "api-7d9f-x2k4q"),
        "calif32b024f777"
    );
}

#[test]
fn a_pod_becomes_its_workload_endpoint() {
    let r = convert(Conversion::Pod(InterfacePrefix::CALI), &pod(json!({})))
        .1
        .unwrap()
        .unwrap();
    assert_eq!(r.metadata.name, "node--1-k8s-api--7d9f--x2k4q-eth0");
    assert_eq!(r.metadata.labels["projectcalico.org/namespace"], "web");
    assert_eq!(r.metadata.labels["projectcalico.org/serviceaccount"], "api");
    assert_eq!(r.metadata.labels["app"], "api");
    let Spec::WorkloadEndpoint(w) = &r.spec else {
        panic!("{r:?}")
    };
    assert_eq!(w.node, "node-1");
    assert_eq!(w.pod, "api-7d9f-x2k4q");
    assert_eq!(w.ip_networks, ["10.0.0.5/32", "fd00::5/128"]);
    assert_eq!(w.profiles, ["kns.web", "ksa.web.api"]);
    assert_eq!(w.interface_name, "calif32b024f777");
    assert_eq!(w.ports.len(), 1, "named ports only");

    // The status wins over Calico's CNI annotation (Calico v3.32's order), which is read when
    // the status has no address yet.
    let annotation = json!({"cni.projectcalico.org/podIPs": "10.9.9.9/32"});
    let annotated = pod(json!({"metadata": {"annotations": annotation}}));
    let r = convert(Conversion::Pod(InterfacePrefix::CALI), &annotated)
        .1
        .unwrap()
        .unwrap();
    let Spec::WorkloadEndpoint(w) = &r.spec else {
        panic!("{r:?}")
    };
    assert_eq!(w.ip_networks, ["10.0.0.5/32", "fd00::5/128"]);
    let early = pod(json!({"metadata": {"annotations": annotation}, "status": {"podIPs": []}}));
    let r = convert(Conversion::Pod(InterfacePrefix::CALI), &early)
        .1
        .unwrap()
        .unwrap();
    let Spec::WorkloadEndpoint(w) = &r.spec else {
        panic!("{r:?}")
    };
    assert_eq!(w.ip_networks, ["10.9.9.9/32"]);
}

/// A FelixConfiguration's annotations reach the conversion (the CRD's own and those in
/// Calico's metadata annotation), so `config.projectcalico.org/<Name>` overrides work here too.
#[test]
fn a_felix_configuration_keeps_its_override_annotations() {
    let o = object(json!({
        "apiVersion": "crd.projectcalico.org/v1", "kind": "FelixConfiguration",
        "metadata": {"name": "default", "annotations": {
            "config.projectcalico.org/LogSeverityScreen": "Debug",
            "projectcalico.org/metadata":
                r#"{"annotations": {"config.projectcalico.org/PrometheusMetricsEnabled": "true"}}"#}},
        "spec": {"logSeverityScreen": "Info"}}));
    let r = convert(
        Conversion::Crd(Kind::FelixConfiguration, CalicoGroup::V1),
        &o,
    )
    .1
    .unwrap()
    .unwrap();
    let mut keys: Vec<(String, String)> = crate::calico::convert::convert(&r)
        .unwrap()
        .into_iter()
        .map(|(k, v)| match v {
            typha_protocol::model::Value::Config(v) => (k.to_string(), v),
            other => panic!("{other:?}"),
        })
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            ("/calico/v1/config/LogSeverityScreen".into(), "Debug".into()),
            (
                "/calico/v1/config/PrometheusMetricsEnabled".into(),
                "true".into()
            ),
        ]
    );
}

/// Calico's CNI annotations for floating IPs (the endpoint's 1:1 NATs onto the pod's address
/// of their family) and for the source prefixes a pod may send from, read as Calico's driver
/// reads them: one that is not a JSON list (of CIDRs, for the prefixes) makes the endpoint
/// invalid; a floating IP that is not an address is skipped by the conversion.
#[test]
fn a_pods_floating_ips_and_allowed_source_prefixes_are_read() {
    let annotated = pod(json!({"metadata": {"annotations": {
        "cni.projectcalico.org/floatingIPs": r#"["192.0.2.10", "2001:db8::10", "nope"]"#,
        "cni.projectcalico.org/allowedSourcePrefixes": r#"["198.51.100.1/24"]"#}}}));
    let r = convert(Conversion::Pod(InterfacePrefix::CALI), &annotated)
        .1
        .unwrap()
        .unwrap();
    let kvs = crate::calico::convert::convert(&r).unwrap();
    let typha_protocol::model::Value::WorkloadEndpoint(w) = &kvs[0].1 else {
        panic!("{kvs:?}")
    };
    let nat = |i: &str, e: &str| typha_protocol::model::IpNat {
        int_ip: i.parse().unwrap(),
        ext_ip: e.parse().unwrap(),
    };
    assert_eq!(w.ipv4_nat, [nat("10.0.0.5", "192.0.2.10")]);
    assert_eq!(w.ipv6_nat, [nat("fd00::5", "2001:db8::10")]);
    assert_eq!(
        w.allow_spoofed_source_prefixes,
        ["198.51.100.0/24".parse::<ipnet::IpNet>().unwrap()]
    );
    for annotations in [
        json!({"cni.projectcalico.org/floatingIPs": "192.0.2.10"}),
        json!({"cni.projectcalico.org/floatingIPs": ""}),
        json!({"cni.projectcalico.org/allowedSourcePrefixes": "[\"10.0.0.1\"]"}),
        json!({"cni.projectcalico.org/allowedSourcePrefixes": "10.0.0.0/8"}),
    ] {
        let (id, item) = convert(
            Conversion::Pod(InterfacePrefix::CALI),
            &pod(json!({"metadata": {"annotations": annotations}})),
        );
        let e = item.unwrap().unwrap_err();
        assert_eq!(e.id, id, "{annotations}");
    }
    // A pod address that is not a single address cannot take a floating IP.
    let wide = pod(json!({"metadata": {"annotations": {
        "cni.projectcalico.org/floatingIPs": r#"["192.0.2.10"]"#}},
        "status": {"podIPs": [{"ip": "10.0.0.0/24"}]}}));
    assert!(
        convert(Conversion::Pod(InterfacePrefix::CALI), &wide)
            .1
            .unwrap()
            .is_err()
    );
    // An empty allowedSourcePrefixes is none.
    let empty = pod(json!({"metadata": {"annotations": {
        "cni.projectcalico.org/allowedSourcePrefixes": ""}}}));
    assert!(
        convert(Conversion::Pod(InterfacePrefix::CALI), &empty)
            .1
            .unwrap()
            .is_ok()
    );
}

/// Named ports of init containers count, and a port of a protocol Calico does not map is
/// left out.
#[test]
fn a_pods_named_ports_are_mapped_as_calico_maps_them() {
    let p = pod(json!({"spec": {
        "containers": [{"name": "c", "ports": [
            {"name": "http", "containerPort": 8080},
            {"name": "dns", "containerPort": 53, "protocol": "UDP"},
            {"name": "odd", "containerPort": 9, "protocol": "FOO"}]}],
        "initContainers": [{"name": "i", "ports": [
            {"name": "sidecar", "containerPort": 15001, "protocol": "SCTP"}]}]}}));
    let r = convert(Conversion::Pod(InterfacePrefix::CALI), &p)
        .1
        .unwrap()
        .unwrap();
    let Spec::WorkloadEndpoint(w) = &r.spec else {
        panic!("{r:?}")
    };
    let ports: Vec<(&str, u16)> = w.ports.iter().map(|p| (p.name.as_str(), p.port)).collect();
    assert_eq!(ports, [("http", 8080), ("dns", 53), ("sidecar", 15001)]);
    assert!(crate::calico::convert::convert(&r).is_ok());
}

#[test]
fn pods_calico_does_not_network_are_skipped_by_id() {
    for extra in [
        json!({"spec": {"hostNetwork": true}}),
        json!({"status": {"podIPs": []}}),
        json!({"status": {"phase": "Succeeded"}}),
        json!({"spec": {"nodeName": null}}),
    ] {
        let (id, item) = convert(Conversion::Pod(InterfacePrefix::CALI), &pod(extra.clone()));
        assert!(item.is_none(), "{extra}");
        assert_eq!(id.unwrap().kind, Kind::WorkloadEndpoint);
    }
}

#[test]
fn a_node_takes_its_addresses_and_calicos_annotations() {
    let node = object(json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "node-1", "labels": {"zone": "a"}, "annotations": {
            "projectcalico.org/IPv4Address": "172.16.0.5/24",
            "projectcalico.org/ASNumber": "64512",
            "projectcalico.org/IPv4VXLANTunnelAddr": "10.244.1.0"}},
        "status": {"addresses": [{"type": "InternalIP", "address": "172.16.0.5"},
                                 {"type": "Hostname", "address": "node-1"}]}}));
    let r = convert(Conversion::Node { pod_cidr: false }, &node)
        .1
        .unwrap()
        .unwrap();
    assert_eq!(r.id(), ResourceId::global(Kind::Node, "node-1"));
    let Spec::Node(n) = &r.spec else {
        panic!("{r:?}")
    };
    let bgp = n.bgp.as_ref().unwrap();
    assert_eq!(bgp.ipv4_address, "172.16.0.5/24");
    assert_eq!(bgp.as_number, Some(crate::calico::v3::AsNumber(64512)));
    assert_eq!(n.ipv4_vxlan_tunnel_addr, "10.244.1.0");
    let addrs: Vec<_> = n
        .addresses
        .iter()
        .map(|a| (a.address.as_str(), a.address_type.as_str()))
        .collect();
    assert_eq!(
        addrs,
        [
            ("172.16.0.5/24", "CalicoNodeIP"),
            ("172.16.0.5", "InternalIP")
        ]
    );

    // A node calico-node has not annotated yet: its addresses, no BGP.
    let bare = object(json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "node-2"},
        "status": {"addresses": [{"type": "InternalIP", "address": "172.16.0.6"}]}}));
    let r = convert(Conversion::Node { pod_cidr: false }, &bare)
        .1
        .unwrap()
        .unwrap();
    let Spec::Node(n) = &r.spec else {
        panic!("{r:?}")
    };
    assert!(n.bgp.is_none());
    assert_eq!(n.addresses.len(), 1);
    assert_eq!(
        n.orch_refs.len(),
        1,
        "every Kubernetes node has its orchRef"
    );
}

/// Everything else Calico's Kubernetes driver puts in a Node (node.go, K8sNodeToCalico): IPv6
/// BGP address, route reflector cluster, IPv6 VXLAN, WireGuard interface addresses and keys,
/// orchRefs, interfaces, pod CIDRs; and an annotation that is not of its type is ignored.
#[test]
fn a_node_takes_everything_calicos_driver_reads() {
    let node = object(json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "node-1", "annotations": {
            "projectcalico.org/IPv4Address": "172.16.0.5/24",
            "projectcalico.org/IPv6Address": "fd00::5/64",
            "projectcalico.org/RouteReflectorClusterID": "224.0.0.1",
            "projectcalico.org/IPv4IPIPTunnelAddr": "not-an-ip",
            "projectcalico.org/IPv6VXLANTunnelAddr": "fd00:10::1",
            "projectcalico.org/VXLANTunnelMACAddrV6": "66:aa:bb:cc:dd:ee",
            "projectcalico.org/IPv4WireguardInterfaceAddr": "10.244.1.1",
            "projectcalico.org/WireguardPublicKey": "jlkVyQYooZYzI2wFfNhSZez5eWh44yfq1wKVjLvSXgY=",
            "projectcalico.org/Interfaces": "[{\"name\":\"eth0\",\"addresses\":[\"172.16.0.5\",\"junk\"]}]"}},
        "spec": {"podCIDRs": ["10.244.1.0/24"]},
        "status": {"addresses": [{"type": "ExternalIP", "address": "203.0.113.5"}]}}));
    let r = convert(Conversion::Node { pod_cidr: false }, &node)
        .1
        .unwrap()
        .unwrap();
    let Spec::Node(n) = &r.spec else {
        panic!("{r:?}")
    };
    let bgp = n.bgp.as_ref().unwrap();
    assert_eq!(bgp.ipv6_address, "fd00::5/64");
    assert_eq!(bgp.route_reflector_cluster_id, "224.0.0.1");
    assert_eq!(
        bgp.ipv4_ipip_tunnel_addr, "",
        "an invalid annotation is ignored"
    );
    assert_eq!(n.ipv6_vxlan_tunnel_addr, "fd00:10::1");
    assert_eq!(n.vxlan_tunnel_mac_addr_v6, "66:aa:bb:cc:dd:ee");
    assert_eq!(
        n.wireguard.as_ref().unwrap().interface_ipv4_address,
        "10.244.1.1"
    );
    let addrs: Vec<_> = n
        .addresses
        .iter()
        .map(|a| (a.address.as_str(), a.address_type.as_str()))
        .collect();
    assert_eq!(
        addrs,
        [
            ("172.16.0.5/24", "CalicoNodeIP"),
            ("fd00::5/64", "CalicoNodeIP"),
            ("203.0.113.5", "ExternalIP")
        ]
    );
    assert_eq!(n.orch_refs[0].node_name, "node-1");
    assert_eq!(n.orch_refs[0].orchestrator, "k8s");
    assert_eq!(n.interfaces.len(), 1);
    assert_eq!(n.interfaces[0].addresses, ["172.16.0.5"]);
    assert_eq!(
        n.status.wireguard_public_key,
        "jlkVyQYooZYzI2wFfNhSZez5eWh44yfq1wKVjLvSXgY="
    );
    assert_eq!(n.status.pod_cidrs, ["10.244.1.0/24"]);
}

#[test]
fn a_kubernetes_network_policy_becomes_calicos_knp() {
    let np = object(
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "allow-web", "namespace": "web"},
        "spec": {
            "podSelector": {"matchLabels": {"app": "api"},
                            "matchExpressions": [{"key": "tier", "operator": "In",
                                                  "values": ["a", "b"]}]},
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "fe"}}},
                                  {"namespaceSelector": {}},
                                  {"ipBlock": {"cidr": "10.0.0.0/8",
                                               "except": ["10.1.0.0/16"]}}],
                         "ports": [{"port": 8080}, {"protocol": "UDP", "port": "dns"},
                                   {"port": 9000, "endPort": 9010}]}],
            "egress": [{}]}}),
    );
    let r = convert(Conversion::NetworkPolicy, &np).1.unwrap().unwrap();
    assert_eq!(r.metadata.name, "knp.default.allow-web");
    assert_eq!(r.metadata.namespace.as_deref(), Some("web"));
    let Spec::KubernetesNetworkPolicy(p) = &r.spec else {
        panic!("{r:?}")
    };
    // Calico's text: the orchestrator first, the labels, then the expressions as given.
    assert_eq!(
        p.selector,
        "projectcalico.org/orchestrator == 'k8s' && app == 'api' && tier in { 'a', 'b' }"
    );
    assert_eq!(p.order, Some(1000.0));
    // No policyTypes: Ingress alone, as Calico reads a policy from before the field (the API
    // server fills it in on write).
    assert_eq!(p.types, ["Ingress"]);
    // One rule per protocol (sorted) and peer, each with every port of its protocol.
    assert_eq!(p.ingress.len(), 6, "2 protocols x 3 peers");
    let tcp = &p.ingress[0];
    assert_eq!(
        tcp.source.selector,
        "projectcalico.org/orchestrator == 'k8s' && role == 'fe'"
    );
    assert_eq!(
        serde_json::to_value(&tcp.destination.ports).unwrap(),
        json!([8080, "9000:9010"])
    );
    assert_eq!(p.ingress[1].source.namespace_selector, "all()");
    assert_eq!(
        p.ingress[1].source.selector,
        "projectcalico.org/orchestrator == 'k8s'"
    );
    assert_eq!(p.ingress[2].source.nets, ["10.0.0.0/8"]);
    assert_eq!(p.ingress[2].source.not_nets, ["10.1.0.0/16"]);
    assert_eq!(
        serde_json::to_value(&p.ingress[3].destination.ports).unwrap(),
        json!(["dns"])
    );
    assert_eq!(p.egress.len(), 1, "an empty egress rule allows everything");
    // And the pipeline accepts it.
    let kvs = crate::calico::convert::convert(&r).unwrap();
    assert_eq!(kvs.len(), 1);
}

/// What a Felix is sent for a Kubernetes NetworkPolicy: its Calico key and value as text.
fn felix_sees(np: Value) -> (String, String) {
    let r = convert(Conversion::NetworkPolicy, &object(np))
        .1
        .unwrap()
        .unwrap();
    let (k, v) = crate::calico::convert::convert(&r).unwrap().remove(0);
    let kv = crate::calico::libcalico::calico_kvs(&k, &v).remove(0);
    (
        kv.key.to_string(),
        String::from_utf8(kv.value.unwrap().to_vec()).unwrap(),
    )
}

/// Issue 38: Felix names a selector's IP set after the selector's parse tree and hashes each
/// rule (its `orig_*` selectors too) into the rule's id, so a Kubernetes NetworkPolicy must
/// reach it as the exact text Calico v3.32's Typha sends (its driver's
/// `K8sNetworkPolicyToCalico`, then the NetworkPolicy update processor): the orchestrator term
/// first, the user's parts verbatim in Calico's parentheses, one rule per peer carrying all its
/// ports. Compared as text, as Calico's own conversion tests compare it.
#[test]
fn a_kubernetes_network_policy_reaches_felix_as_calicos_text() {
    let (key, value) = felix_sees(json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "web", "namespace": "prod"},
        "spec": {
            "podSelector": {"matchLabels": {"app": "web"}},
            "policyTypes": ["Ingress"],
            "ingress": [{
                "from": [{"podSelector": {"matchLabels": {"role": "db"}},
                          "namespaceSelector": {"matchLabels": {"team": "x"}}}],
                "ports": [{"port": "http"}, {"port": 9000, "endPort": 9100}]}]}}));
    assert_eq!(key, "/calico/v1/policy/KubernetesNetworkPolicy/prod/web");
    assert_eq!(
        value,
        concat!(
            r#"{"namespace":"prod","tier":"default","order":1000,"inbound_rules":[{"action":"allow","protocol":"tcp","#,
            r#""src_selector":"(pcns.team == \"x\") \u0026\u0026 (projectcalico.org/orchestrator == 'k8s' \u0026\u0026 role == 'db')","#,
            r#""dst_ports":["http","9000:9100"],"#,
            r#""orig_src_selector":"projectcalico.org/orchestrator == 'k8s' \u0026\u0026 role == 'db'","#,
            r#""orig_src_namespace_selector":"team == 'x'"}],"#,
            r#""selector":"(projectcalico.org/orchestrator == 'k8s' \u0026\u0026 app == 'web') \u0026\u0026 projectcalico.org/namespace == 'prod'","#,
            r#""types":["ingress"]}"#
        )
    );

    // Two protocols and two peers: four rules, TCP's before UDP's, each protocol's peers in
    // order; an egress ipBlock is its masked network and exceptions, not scoped to the
    // namespace (it selects no endpoint); matchExpressions as Calico writes them.
    let (_, value) = felix_sees(json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "dns", "namespace": "prod"},
        "spec": {
            "podSelector": {"matchExpressions": [
                {"key": "env", "operator": "In", "values": ["prod", "staging"]},
                {"key": "debug", "operator": "DoesNotExist"}]},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{
                "from": [{"podSelector": {"matchLabels": {"a": "1"}}},
                         {"namespaceSelector": {}}],
                "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}],
            "egress": [{
                "to": [{"ipBlock": {"cidr": "10.0.0.1/8", "except": ["10.1.0.0/16"]}}],
                "ports": [{"port": 443}]}]}}));
    let v: Value = serde_json::from_str(&value).unwrap();
    assert_eq!(
        v["selector"],
        "(projectcalico.org/orchestrator == 'k8s' && env in { 'prod', 'staging' } && ! has(debug)) && projectcalico.org/namespace == 'prod'"
    );
    let a = "(projectcalico.org/namespace == 'prod') && (projectcalico.org/orchestrator == 'k8s' && a == '1')";
    let any_ns = "(has(projectcalico.org/namespace)) && (projectcalico.org/orchestrator == 'k8s')";
    let rules: Vec<(String, String, Value)> = v["inbound_rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["protocol"].as_str().unwrap().to_owned(),
                r["src_selector"].as_str().unwrap().to_owned(),
                r["dst_ports"].clone(),
            )
        })
        .collect();
    assert_eq!(
        rules,
        [
            ("tcp".into(), a.into(), json!([53])),
            ("tcp".into(), any_ns.into(), json!([53])),
            ("udp".into(), a.into(), json!([53])),
            ("udp".into(), any_ns.into(), json!([53])),
        ]
    );
    assert_eq!(
        v["outbound_rules"],
        json!([{"action": "allow", "protocol": "tcp", "dst_nets": ["10.0.0.0/8"],
                "dst_ports": [443], "!dst_nets": ["10.1.0.0/16"]}])
    );
    assert_eq!(v["types"], json!(["ingress", "egress"]));
}

/// A ClusterNetworkPolicy is Calico's KubernetesClusterNetworkPolicy of the same name, in
/// Calico's form (`calico::v3::k8s_cluster_policy`); one Calico gives no policy is nothing
/// to serve (its earlier version is deleted), not an invalid object. Its CRD may be missing.
#[test]
fn cluster_network_policies_become_calicos_or_nothing() {
    let cnp = |tier: &str| {
        object(json!({"apiVersion": "policy.networking.k8s.io/v1alpha2",
            "kind": "ClusterNetworkPolicy", "metadata": {"name": "guard"},
            "spec": {"tier": tier, "priority": 3, "subject": {"namespaces": {}},
                     "ingress": [{"action": "Accept", "from": [{"namespaces": {}}]}]}}))
    };
    let (id, item) = convert(Conversion::ClusterNetworkPolicy, &cnp("Admin"));
    let r = item.unwrap().unwrap();
    assert_eq!(Some(r.id()), id);
    assert_eq!(r.metadata.name, "guard");
    let Spec::KubernetesClusterNetworkPolicy(p) = &r.spec else {
        panic!("{r:?}")
    };
    assert_eq!((p.tier.as_str(), p.order), ("kube-admin", Some(3.0)));
    assert_eq!(p.ingress[0].source.namespace_selector, "all()");
    assert_eq!(crate::calico::convert::convert(&r).unwrap().len(), 1);
    let (id, item) = convert(Conversion::ClusterNetworkPolicy, &cnp("Application"));
    assert_eq!(
        id,
        Some(ResourceId::global(
            Kind::KubernetesClusterNetworkPolicy,
            "guard"
        ))
    );
    assert!(item.is_none());
    let source = Kubernetes::sources(false, CalicoGroup::V1, InterfacePrefix::CALI)
        .into_iter()
        .find(|s| matches!(s.conversion, Conversion::ClusterNetworkPolicy))
        .unwrap();
    assert_eq!(source.resource.version, "v1alpha2");
    assert!(source.conversion.optional());
}

#[test]
fn gone_is_too_old_and_the_rest_refused() {
    let k = Kubernetes::sources(false, CalicoGroup::V1, InterfacePrefix::CALI);
    let pods = k
        .iter()
        .find(|s| matches!(s.conversion, Conversion::Pod(_)))
        .unwrap();
    assert!(matches!(
        status_error(
            410,
            "Expired",
            "too old resource version",
            Revision(3),
            "watch",
            pods
        ),
        DatastoreError::TooOld { .. }
    ));
    assert!(matches!(
        status_error(500, "InternalError", "", Revision(3), "list", pods),
        DatastoreError::Refused { code: 500, .. }
    ));
    assert!(parse_rv("abc").is_err());
}

#[test]
fn forbidden_names_the_resource_and_the_verb() {
    let k = Kubernetes::sources(false, CalicoGroup::V1, InterfacePrefix::CALI);
    let knp = k
        .iter()
        .find(|s| matches!(s.conversion, Conversion::NetworkPolicy))
        .unwrap();
    let e = status_error(403, "Forbidden", "no", Revision(0), "watch", knp).to_string();
    assert!(
        e.contains("may not watch networkpolicies.networking.k8s.io"),
        "{e}"
    );
    let pods = k
        .iter()
        .find(|s| matches!(s.conversion, Conversion::Pod(_)))
        .unwrap();
    let e = status_error(403, "Forbidden", "no", Revision(0), "list", pods).to_string();
    assert!(e.contains("may not list pods "), "{e}");
}

/// A Service keeps its name, namespace, labels and spec (what Felix reads); status,
/// annotations and managed fields are not carried.
#[test]
fn a_service_becomes_a_kubernetes_service() {
    let o = object(json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": "prod", "labels": {"app": "web"},
                     "annotations": {"big": "x"}, "resourceVersion": "12",
                     "managedFields": [{"manager": "kubectl"}]},
        "spec": {"clusterIP": "10.96.0.10", "ports": [{"port": 80, "protocol": "TCP"}]},
        "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.9"}]}}}));
    let (id, item) = convert(Conversion::Service, &o);
    let r = item.unwrap().unwrap();
    assert_eq!(
        id,
        Some(ResourceId::namespaced(
            Kind::KubernetesService,
            "prod",
            "web"
        ))
    );
    let kvs = crate::calico::convert::convert(&r).unwrap();
    assert_eq!(kvs.len(), 1);
    assert_eq!(
        kvs[0].0.to_string(),
        "/calico/resources/v3/projectcalico.org/kubernetesservice/prod/web"
    );
    let typha_protocol::model::Value::Resource(v) = &kvs[0].1 else {
        panic!("{kvs:?}")
    };
    assert_eq!(v.labels.get("app").map(String::as_str), Some("web"));
    assert_eq!(
        serde_json::from_str::<Value>(&v.spec_json).unwrap(),
        json!({"clusterIP": "10.96.0.10", "ports": [{"port": 80, "protocol": "TCP"}]})
    );
}

/// An EndpointSlice keeps its labels (the service it belongs to), address type, endpoints and
/// ports; a missing list stays null, as Go writes a nil slice.
#[test]
fn an_endpoint_slice_becomes_a_kubernetes_endpoint_slice() {
    let o = object(
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "web-x1", "namespace": "prod",
                     "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.0.1.5"], "conditions": {"ready": true}}]}),
    );
    let (id, item) = convert(Conversion::EndpointSlice, &o);
    let r = item.unwrap().unwrap();
    assert_eq!(
        id,
        Some(ResourceId::namespaced(
            Kind::KubernetesEndpointSlice,
            "prod",
            "web-x1"
        ))
    );
    let kvs = crate::calico::convert::convert(&r).unwrap();
    let typha_protocol::model::Value::Resource(v) = &kvs[0].1 else {
        panic!("{kvs:?}")
    };
    assert_eq!(
        serde_json::from_str::<Value>(&v.spec_json).unwrap(),
        json!({"addressType": "IPv4",
               "endpoints": [{"addresses": ["10.0.1.5"], "conditions": {"ready": true}}],
               "ports": null})
    );
}

/// The backend reads the new kinds, and the CRD kinds include tiers, staged policies, BGP
/// (filters too) and node status; KubeVirt's migrations too.
#[test]
fn what_is_read() {
    let resources = Kubernetes::resources();
    for (group, plural) in [
        ("", "services"),
        ("discovery.k8s.io", "endpointslices"),
        (CRD_GROUP, "tiers"),
        (CRD_GROUP, "stagednetworkpolicies"),
        (CRD_GROUP, "stagedglobalnetworkpolicies"),
        (CRD_GROUP, "stagedkubernetesnetworkpolicies"),
        (CLUSTER_NETWORK_POLICY_GROUP, "clusternetworkpolicies"),
        (CRD_GROUP, "bgpconfigurations"),
        (CRD_GROUP, "bgppeers"),
        (CRD_GROUP, "bgpfilters"),
        (CRD_GROUP, "caliconodestatuses"),
        (KUBEVIRT_GROUP, "virtualmachineinstancemigrations"),
    ] {
        assert!(
            resources.contains(&(group.to_owned(), plural.to_owned())),
            "{group}/{plural}"
        );
    }
}

/// Host-local IPAM (`USE_POD_CIDR`), as Calico's driver and felix node processor do it: the
/// IPIP tunnel address (and the WireGuard one, with a key) is the pod CIDR's first address
/// plus one, not the annotations; each pod CIDR becomes a block affine to the node; IPAM
/// blocks and affinities are not read.
#[test]
fn with_pod_cidrs_a_nodes_cidrs_are_its_blocks_and_its_tunnel_address() {
    let node = |annotations: serde_json::Value| {
        object(json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "node-1", "annotations": annotations},
            "spec": {"podCIDR": "10.244.1.0/24", "podCIDRs": ["10.244.1.0/24", "fd00:244:1::/64"]}}))
    };
    let annotated = json!({
        "projectcalico.org/IPv4IPIPTunnelAddr": "10.9.9.9",
        "projectcalico.org/IPv4WireguardInterfaceAddr": "10.9.9.8",
        "projectcalico.org/WireguardPublicKey": "jlkVyQYooZYzI2wFfNhSZez5eWh44yfq1wKVjLvSXgY="});
    let r = convert(
        Conversion::Node { pod_cidr: true },
        &node(annotated.clone()),
    )
    .1
    .unwrap()
    .unwrap();
    let Spec::Node(n) = &r.spec else {
        panic!("{r:?}")
    };
    assert_eq!(n.bgp.as_ref().unwrap().ipv4_ipip_tunnel_addr, "10.244.1.1");
    assert_eq!(
        n.wireguard.as_ref().unwrap().interface_ipv4_address,
        "10.244.1.1"
    );
    assert!(n.status.pod_cidr_blocks);
    let kvs = crate::calico::convert::convert(&r).unwrap();
    let blocks: Vec<(String, typha_protocol::model::Value)> = kvs
        .iter()
        .filter(|(k, _)| matches!(k, typha_protocol::model::Key::Block(_)))
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    assert_eq!(
        blocks.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
        [
            "/calico/ipam/v2/assignment/ipv4/block/10.244.1.0-24",
            "/calico/ipam/v2/assignment/ipv6/block/fd00:244:1::-64"
        ]
    );
    let typha_protocol::model::Value::Block(b) = &blocks[0].1 else {
        panic!("{blocks:?}")
    };
    assert_eq!(b.affinity.as_deref(), Some("host:node-1"));
    assert_eq!((b.allocated, b.deleted), (0, false));
    assert!(b.table.is_empty());

    // Without a WireGuard key there is no WireGuard address; without the setting, the
    // annotations as before and no blocks.
    let r = convert(Conversion::Node { pod_cidr: true }, &node(json!({})))
        .1
        .unwrap()
        .unwrap();
    let Spec::Node(n) = &r.spec else {
        panic!("{r:?}")
    };
    assert!(n.wireguard.is_none());
    let r = convert(Conversion::Node { pod_cidr: false }, &node(annotated))
        .1
        .unwrap()
        .unwrap();
    let Spec::Node(n) = &r.spec else {
        panic!("{r:?}")
    };
    assert_eq!(n.bgp.as_ref().unwrap().ipv4_ipip_tunnel_addr, "10.9.9.9");
    assert!(!n.status.pod_cidr_blocks);
    let kvs = crate::calico::convert::convert(&r).unwrap();
    assert!(
        !kvs.iter()
            .any(|(k, _)| matches!(k, typha_protocol::model::Key::Block(_)))
    );

    let kinds = |pod_cidr| -> Vec<Conversion> {
        Kubernetes::sources(pod_cidr, CalicoGroup::V1, InterfacePrefix::CALI)
            .into_iter()
            .map(|s| s.conversion)
            .collect()
    };
    for pod_cidr in [false, true] {
        let reads_blocks = kinds(pod_cidr)
            .iter()
            .any(|c| matches!(c, Conversion::Crd(Kind::IpamBlock | Kind::BlockAffinity, _)));
        assert_eq!(reads_blocks, !pod_cidr);
    }
}

/// What Calico's own writers (calicoctl, its API server) store: the v3 labels and name in the
/// `projectcalico.org/metadata` annotation and the CRD's labels cleared but for Calico's own.
/// Read back as Calico's driver reads it.
#[test]
fn calicos_metadata_annotation_gives_the_labels_and_the_name() {
    let set = object(json!({
        "apiVersion": "crd.projectcalico.org/v1", "kind": "GlobalNetworkSet",
        "metadata": {"name": "blocked", "labels": {"projectcalico.org/owned": "x"},
                     "annotations": {"projectcalico.org/metadata":
                         "{\"name\":\"blocked\",\"labels\":{\"role\":\"blocked\"},\"creationTimestamp\":null}"}},
        "spec": {"nets": ["192.0.2.0/24"]}}));
    let r = convert(
        Conversion::Crd(Kind::GlobalNetworkSet, CalicoGroup::V1),
        &set,
    )
    .1
    .unwrap()
    .unwrap();
    assert_eq!(
        r.metadata.labels,
        [
            ("projectcalico.org/owned".to_owned(), "x".to_owned()),
            ("role".to_owned(), "blocked".to_owned())
        ]
        .into()
    );
    let policy = |name: &str, meta: Option<&str>, tier: Option<&str>| {
        let mut o = json!({
            "apiVersion": "crd.projectcalico.org/v1", "kind": "NetworkPolicy",
            "metadata": {"name": name, "namespace": "prod"},
            "spec": {"selector": "all()"}});
        if let Some(m) = meta {
            o["metadata"]["annotations"] = json!({"projectcalico.org/metadata": m});
        }
        if let Some(t) = tier {
            o["spec"]["tier"] = t.into();
        }
        convert(
            Conversion::Crd(Kind::NetworkPolicy, CalicoGroup::V1),
            &object(o),
        )
    };
    let named = |r: (Option<ResourceId>, Option<Item>)| r.0.unwrap().name;
    // Pre-3.30 storage of a default-tier policy: `default.` dropped when the annotation has
    // no name; the annotation's name when it has one; a CRD without the annotation as it is.
    assert_eq!(named(policy("default.web", Some("{}"), None)), "web");
    assert_eq!(
        named(policy("default.web", Some("{}"), Some("default"))),
        "web"
    );
    assert_eq!(named(policy("ops.web", Some("{}"), Some("ops"))), "ops.web");
    assert_eq!(
        named(policy(
            "default.web",
            Some("{\"name\":\"default.web\"}"),
            None
        )),
        "default.web"
    );
    assert_eq!(named(policy("default.web", None, None)), "default.web");
    let (id, item) = policy("web", Some("not json"), None);
    assert_eq!(id.unwrap().name, "web");
    let err = item.unwrap().unwrap_err();
    assert!(err.reason.contains("projectcalico.org/metadata"), "{err:?}");
}

/// A KubeVirt VirtualMachineInstanceMigration in `phase`, with `extra` merged in.
fn vmim(phase: &str, extra: Value) -> DynamicObject {
    let mut v = json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
        "metadata": {"name": "mig-1", "namespace": "vms", "uid": "c05275a7-f85b-42d5-a1d0-acdd49c26d57",
                     "resourceVersion": "400", "creationTimestamp": "2026-11-24T23:45:24Z",
                     "labels": {"kubevirt.io/vmi-name": "vm12"},
                     "annotations": {"kubevirt.io/latest-observed-api-version": "v1"}},
        "spec": {"vmiName": "vm12"},
        "status": {"phase": phase}});
    json_merge(&mut v, extra);
    object(v)
}

/// What Calico's driver makes of a migration: a LiveMigration only in the phases Felix needs
/// it in and only with a VMI name and a uid; its target the selector of the target pod, its
/// source the source pod once KubeVirt names it; its metadata the migration's.
#[test]
fn a_migration_under_way_is_a_live_migration() {
    use crate::calico::v3::{LiveMigrationSpec, LiveMigrationTarget, WorkloadIdentifier};
    let id = ResourceId::namespaced(Kind::LiveMigration, "vms", "mig-1");
    let selector = "(vmi.kubevirt.io/id == 'vm12' || vm.kubevirt.io/name == 'vm12') \
                    && kubevirt.io/migrationJobUID == 'c05275a7-f85b-42d5-a1d0-acdd49c26d57'";
    let source = json!({"status": {"migrationState": {"sourcePod": "virt-launcher-vm12-snq7w"}}});
    let spec = |o: &DynamicObject| {
        let (got, item) = convert(Conversion::LiveMigration, o);
        assert_eq!(got.as_ref(), Some(&id));
        item.map(|i| {
            let r = Resource::clone(&i.unwrap());
            assert_eq!(r.id(), id);
            let Spec::LiveMigration(s) = r.spec else {
                panic!("{r:?}")
            };
            (r.metadata, s)
        })
    };
    let target = Some(LiveMigrationTarget {
        selector: Some(selector.into()),
        workload_endpoint: None,
    });

    // Not yet, and no longer: the id, for a deletion, and nothing to serve.
    for phase in ["", "Pending", "Succeeded", "Unknown", "WaitingForSync"] {
        assert_eq!(spec(&vmim(phase, source.clone())), None, "{phase:?}");
    }
    // Scheduling: the target only (KubeVirt has not named the source pod yet).
    let (meta, s) = spec(&vmim("Scheduling", json!({}))).unwrap();
    assert_eq!(
        s,
        LiveMigrationSpec {
            source: None,
            target: target.clone()
        }
    );
    assert_eq!(meta.uid, "c05275a7-f85b-42d5-a1d0-acdd49c26d57");
    assert_eq!(
        meta.creation_timestamp.as_deref(),
        Some("2026-11-24T23:45:24Z")
    );
    assert_eq!(meta.labels["kubevirt.io/vmi-name"], "vm12");
    assert_eq!(
        meta.annotations["kubevirt.io/latest-observed-api-version"],
        "v1"
    );
    assert_eq!(meta.namespace.as_deref(), Some("vms"));
    // Once the source pod is known, in every phase that keeps the migration.
    for phase in [
        "Scheduling",
        "Scheduled",
        "PreparingTarget",
        "TargetReady",
        "Running",
        "Failed",
    ] {
        let (_, s) = spec(&vmim(phase, source.clone())).unwrap();
        let workload = s.source.and_then(|s| s.workload);
        assert_eq!(
            workload,
            Some(WorkloadIdentifier {
                hostname: String::new(),
                orchestrator_id: "k8s".into(),
                workload_id: "vms/virt-launcher-vm12-snq7w".into(),
            }),
            "{phase}"
        );
        assert_eq!(s.target, target, "{phase}");
    }
    // An empty source pod is no source.
    let empty = json!({"status": {"migrationState": {"sourcePod": ""}}});
    assert_eq!(spec(&vmim("Running", empty)).unwrap().1.source, None);
    // Without a VMI name or a uid: none.
    assert_eq!(
        spec(&vmim("Running", json!({"spec": {"vmiName": ""}}))),
        None
    );
    let mut no_uid = vmim("Running", json!({}));
    no_uid.metadata.uid = None;
    assert_eq!(spec(&no_uid), None);
}

/// Migrations through our whole path (this backend's conversion, then the felix syncer's
/// Calico form) give the bytes Calico v3.32.0's own does. The expected lines are what Calico's
/// `LiveMigrationClient.Get` and Typha's `syncproto.SerializeUpdate` printed for these very
/// objects on 2026-11-24 (a Go program linking libcalico-go and Typha from the v3.32.0 source
/// tree, run by hand; `null`: no LiveMigration). Escaping (`&`, `<`, `>`), `creationTimestamp`
/// as `null` when there is none, and no generation, as Calico's conversion does not copy it.
#[test]
fn migrations_come_out_as_calicos_own_code_writes_them() {
    let vmim = |text: &str| object(serde_json::from_str(text).unwrap());
    let cases = [
        (
            r#"{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachineInstanceMigration","metadata":{"name":"mig-1","namespace":"vms","uid":"c05275a7-f85b-42d5-a1d0-acdd49c26d57","resourceVersion":"400","generation":2,"creationTimestamp":"2026-11-24T23:45:24Z","labels":{"kubevirt.io/vmi-name":"vm12"},"annotations":{"kubevirt.io/latest-observed-api-version":"v1","x":"a&b<c>"}},"spec":{"vmiName":"vm12"},"status":{"phase":"Scheduling"}}"#,
            Some(
                r#"{"kind":"LiveMigration","apiVersion":"projectcalico.org/v3","metadata":{"name":"mig-1","namespace":"vms","uid":"c05275a7-f85b-42d5-a1d0-acdd49c26d57","creationTimestamp":"2026-11-24T23:45:24Z","labels":{"kubevirt.io/vmi-name":"vm12"},"annotations":{"kubevirt.io/latest-observed-api-version":"v1","x":"a\u0026b\u003cc\u003e"}},"spec":{"target":{"selector":"(vmi.kubevirt.io/id == 'vm12' || vm.kubevirt.io/name == 'vm12') \u0026\u0026 kubevirt.io/migrationJobUID == 'c05275a7-f85b-42d5-a1d0-acdd49c26d57'"}}}"#,
            ),
        ),
        (
            r#"{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachineInstanceMigration","metadata":{"name":"mig-1","namespace":"vms","uid":"c05275a7-f85b-42d5-a1d0-acdd49c26d57","resourceVersion":"401","creationTimestamp":"2026-11-24T23:45:24Z","labels":{"kubevirt.io/vmi-name":"vm12"}},"spec":{"vmiName":"vm12"},"status":{"phase":"Running","migrationState":{"sourcePod":"virt-launcher-vm12-snq7w","targetNode":"n2"}}}"#,
            Some(
                r#"{"kind":"LiveMigration","apiVersion":"projectcalico.org/v3","metadata":{"name":"mig-1","namespace":"vms","uid":"c05275a7-f85b-42d5-a1d0-acdd49c26d57","creationTimestamp":"2026-11-24T23:45:24Z","labels":{"kubevirt.io/vmi-name":"vm12"}},"spec":{"source":{"workload":{"orchestratorID":"k8s","workloadID":"vms/virt-launcher-vm12-snq7w"}},"target":{"selector":"(vmi.kubevirt.io/id == 'vm12' || vm.kubevirt.io/name == 'vm12') \u0026\u0026 kubevirt.io/migrationJobUID == 'c05275a7-f85b-42d5-a1d0-acdd49c26d57'"}}}"#,
            ),
        ),
        (
            r#"{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachineInstanceMigration","metadata":{"name":"mig-2","namespace":"vms","uid":"u2","resourceVersion":"402"},"spec":{"vmiName":"vm13"},"status":{"phase":"Failed","migrationState":{"sourcePod":"p"}}}"#,
            Some(
                r#"{"kind":"LiveMigration","apiVersion":"projectcalico.org/v3","metadata":{"name":"mig-2","namespace":"vms","uid":"u2","creationTimestamp":null},"spec":{"source":{"workload":{"orchestratorID":"k8s","workloadID":"vms/p"}},"target":{"selector":"(vmi.kubevirt.io/id == 'vm13' || vm.kubevirt.io/name == 'vm13') \u0026\u0026 kubevirt.io/migrationJobUID == 'u2'"}}}"#,
            ),
        ),
        (
            r#"{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachineInstanceMigration","metadata":{"name":"mig-3","namespace":"vms","uid":"u3"},"spec":{"vmiName":"vm13"},"status":{"phase":"Pending"}}"#,
            None,
        ),
        (
            r#"{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachineInstanceMigration","metadata":{"name":"mig-4","namespace":"vms","uid":"u4"},"spec":{"vmiName":"vm13"},"status":{"phase":"Succeeded","migrationState":{"sourcePod":"p"}}}"#,
            None,
        ),
        (
            r#"{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachineInstanceMigration","metadata":{"name":"mig-5","namespace":"vms"},"spec":{"vmiName":"vm13"},"status":{"phase":"Running"}}"#,
            None,
        ),
        (
            r#"{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachineInstanceMigration","metadata":{"name":"mig-6","namespace":"vms","uid":"u6"},"spec":{},"status":{"phase":"Running"}}"#,
            None,
        ),
    ];
    for (input, want) in cases {
        let o = vmim(input);
        let got = match convert(Conversion::LiveMigration, &o).1 {
            None => None,
            Some(item) => {
                let kvs = crate::calico::convert::convert(&item.unwrap()).unwrap();
                let calico: Vec<_> = kvs
                    .iter()
                    .flat_map(|(k, v)| crate::calico::libcalico::calico_kvs(k, v))
                    .collect();
                assert_eq!(calico.len(), 1, "{calico:?}");
                Some(String::from_utf8(calico[0].value.clone().unwrap().to_vec()).unwrap())
            }
        };
        assert_eq!(got.as_deref(), want, "{input}");
    }
}

/// Calico's `ConvertUID`, checked against Calico's own test case.
#[test]
fn uids_are_converted_as_calico_converts_them() {
    assert_eq!(
        calico_uid("30316465-6365-4463-ad63-3564622d3638").as_deref(),
        Some("0c8c26a6-c6a6-44c6-adc6-ac2646b46c1c")
    );
    // Its own inverse; upper case is read.
    assert_eq!(
        calico_uid("0C8C26A6-C6A6-44C6-ADC6-AC2646B46C1C").as_deref(),
        Some("30316465-6365-4463-ad63-3564622d3638")
    );
    for bad in [
        "",
        "not-a-uid",
        "30316465636544630ad633564622d36380000",
        "3031646x-6365-4463-ad63-3564622d3638",
    ] {
        assert_eq!(calico_uid(bad), None, "{bad}");
    }
}

/// Every KV of a resource carries the object's own resourceVersion (Calico's revision for it).
#[test]
fn the_objects_resource_version_is_the_resources() {
    let o = object(json!({
        "apiVersion": "crd.projectcalico.org/v1", "kind": "GlobalNetworkSet",
        "metadata": {"name": "set", "resourceVersion": "4711"},
        "spec": {"nets": ["10.0.0.0/8"]}}));
    let r = convert(Conversion::Crd(Kind::GlobalNetworkSet, CalicoGroup::V1), &o)
        .1
        .unwrap()
        .unwrap();
    assert_eq!(r.metadata.resource_version.as_deref(), Some("4711"));
}

/// A Calico CRD's metadata as Calico's driver gives it: the uid converted, the creation time
/// and annotations of the metadata annotation over the CRD's, the CRD's annotations but that
/// one; without the annotation, the CRD's own.
#[test]
fn a_crds_uid_creation_time_and_annotations_are_calicos() {
    let stored = json!({"creationTimestamp": "2024-06-01T00:00:00Z",
                        "annotations": {"note": "from calicoctl"}, "labels": {"a": "b"}});
    let o = object(json!({
        "apiVersion": "crd.projectcalico.org/v1", "kind": "CalicoNodeStatus",
        "metadata": {"name": "status-1", "uid": "30316465-6365-4463-ad63-3564622d3638",
                     "creationTimestamp": "2025-01-01T10:00:00Z", "generation": 3,
                     "resourceVersion": "88",
                     "annotations": {"projectcalico.org/metadata": stored.to_string(),
                                     "projectcalico.org/owned": "yes"}},
        "spec": {"node": "node-1", "classes": ["Agent"], "updatePeriodSeconds": 10}}));
    let r = convert(Conversion::Crd(Kind::CalicoNodeStatus, CalicoGroup::V1), &o)
        .1
        .unwrap()
        .unwrap();
    let m = &r.metadata;
    assert_eq!(m.uid, "0c8c26a6-c6a6-44c6-adc6-ac2646b46c1c");
    assert_eq!(
        m.creation_timestamp.as_deref(),
        Some("2024-06-01T00:00:00Z")
    );
    assert_eq!(m.generation, Some(3));
    let annotations: Vec<(&str, &str)> = m
        .annotations
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        annotations,
        [
            ("note", "from calicoctl"),
            ("projectcalico.org/owned", "yes")
        ]
    );

    let plain = object(json!({
        "apiVersion": "crd.projectcalico.org/v1", "kind": "BGPPeer",
        "metadata": {"name": "peer", "uid": "30316465-6365-4463-ad63-3564622d3638",
                     "creationTimestamp": "2025-01-01T10:00:00Z",
                     "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"}},
        "spec": {"peerIP": "10.0.0.1", "asNumber": 64512}}));
    let r = convert(Conversion::Crd(Kind::BgpPeer, CalicoGroup::V1), &plain)
        .1
        .unwrap()
        .unwrap();
    assert_eq!(r.metadata.uid, "0c8c26a6-c6a6-44c6-adc6-ac2646b46c1c");
    assert_eq!(
        r.metadata.creation_timestamp.as_deref(),
        Some("2025-01-01T10:00:00Z")
    );
    assert_eq!(
        r.metadata
            .annotations
            .get("kubectl.kubernetes.io/last-applied-configuration")
            .map(String::as_str),
        Some("{}")
    );
}

/// A Kubernetes node's v3 Node metadata: its uid (not converted) and creation time, the labels
/// of calico-node's `projectcalico.org/labels` with the node's over them, the annotations of
/// `projectcalico.org/annotations`, and `projectcalico.org/kube-labels`.
#[test]
fn a_nodes_metadata_is_calicos() {
    let o = object(json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "node-1", "uid": "30316465-6365-4463-ad63-3564622d3638",
                     "creationTimestamp": "2025-01-01T10:00:00Z", "resourceVersion": "812",
                     "labels": {"kubernetes.io/hostname": "node-1", "zone": "a&b"},
                     "annotations": {
                        "projectcalico.org/labels": r#"{"zone":"calico","rack":"r1"}"#,
                        "projectcalico.org/annotations": r#"{"owner":"net"}"#,
                        "node.alpha.kubernetes.io/ttl": "0"}},
        "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.5"}]}}));
    let r = convert(Conversion::Node { pod_cidr: false }, &o)
        .1
        .unwrap()
        .unwrap();
    let m = &r.metadata;
    assert_eq!(m.uid, "30316465-6365-4463-ad63-3564622d3638");
    assert_eq!(
        m.creation_timestamp.as_deref(),
        Some("2025-01-01T10:00:00Z")
    );
    assert_eq!(m.resource_version.as_deref(), Some("812"));
    let labels: Vec<(&str, &str)> = m
        .labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        labels,
        [
            ("kubernetes.io/hostname", "node-1"),
            ("rack", "r1"),
            ("zone", "a&b")
        ]
    );
    let annotations: Vec<(&str, &str)> = m
        .annotations
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        annotations,
        [
            ("owner", "net"),
            (
                "projectcalico.org/kube-labels",
                r#"{"kubernetes.io/hostname":"node-1","zone":"a\u0026b"}"#
            ),
        ]
    );
    // A node without labels: `null`, as Go marshals a nil map.
    let bare = object(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-2"}}));
    let r = convert(Conversion::Node { pod_cidr: false }, &bare)
        .1
        .unwrap()
        .unwrap();
    assert_eq!(
        r.metadata
            .annotations
            .get("projectcalico.org/kube-labels")
            .map(String::as_str),
        Some("null")
    );
}

/// Profiles made from namespaces and service accounts carry the object's uid converted and its
/// creation time, and nothing else of its metadata.
#[test]
fn profiles_carry_the_converted_uid_and_creation_time() {
    let ns = object(json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "web", "uid": "30316465-6365-4463-ad63-3564622d3638",
                     "creationTimestamp": "2025-01-01T10:00:00Z", "resourceVersion": "9",
                     "labels": {"team": "a"}, "annotations": {"x": "y"}}}));
    let r = convert(Conversion::Namespace, &ns).1.unwrap().unwrap();
    assert_eq!(r.metadata.uid, "0c8c26a6-c6a6-44c6-adc6-ac2646b46c1c");
    assert_eq!(
        r.metadata.creation_timestamp.as_deref(),
        Some("2025-01-01T10:00:00Z")
    );
    assert!(r.metadata.labels.is_empty() && r.metadata.annotations.is_empty());
    assert_eq!(r.metadata.resource_version.as_deref(), Some("9"));
}

/// An EndpointSlice's uid, creation time and generation are carried; its annotations are not.
#[test]
fn an_endpoint_slice_keeps_its_generation() {
    let o = object(
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "web-abc12", "namespace": "prod", "generation": 5,
                     "uid": "30316465-6365-4463-ad63-3564622d3638",
                     "creationTimestamp": "2025-01-01T10:00:00Z",
                     "annotations": {"endpoints.kubernetes.io/last-change-trigger-time": "x"}},
        "addressType": "IPv4", "endpoints": [], "ports": []}),
    );
    let r = convert(Conversion::EndpointSlice, &o).1.unwrap().unwrap();
    assert_eq!(r.metadata.generation, Some(5));
    assert_eq!(r.metadata.uid, "30316465-6365-4463-ad63-3564622d3638");
    assert_eq!(
        r.metadata.creation_timestamp.as_deref(),
        Some("2025-01-01T10:00:00Z")
    );
    assert!(r.metadata.annotations.is_empty());
}

/// A `projectcalico.org/v3` CRD object is the v3 resource as stored, as Calico's driver takes
/// it: its uid not converted, its name kept (no `default.` taken off a policy's), its labels and
/// annotations as they are (a `projectcalico.org/metadata` annotation is only an annotation
/// there), its creation time and generation.
#[test]
fn a_v3_crd_is_the_resource_as_stored() {
    let stored = json!({"name": "other", "labels": {"from": "annotation"}});
    let o = object(json!({
        "apiVersion": "projectcalico.org/v3", "kind": "NetworkPolicy",
        "metadata": {"name": "default.legacy", "namespace": "web",
                     "uid": "30316465-6365-4463-ad63-3564622d3638",
                     "creationTimestamp": "2025-01-01T10:00:00Z", "generation": 2,
                     "resourceVersion": "41", "labels": {"projectcalico.org/tier": "default"},
                     "annotations": {"projectcalico.org/metadata": stored.to_string(),
                                     "note": "kept"}},
        "spec": {"tier": "default", "selector": "all()", "types": ["Ingress"]}}));
    let (id, item) = convert(Conversion::Crd(Kind::NetworkPolicy, CalicoGroup::V3), &o);
    let r = item.unwrap().unwrap();
    assert_eq!(
        id,
        Some(ResourceId::namespaced(
            Kind::NetworkPolicy,
            "web",
            "default.legacy"
        ))
    );
    let m = &r.metadata;
    assert_eq!(m.name, "default.legacy");
    assert_eq!(m.uid, "30316465-6365-4463-ad63-3564622d3638");
    assert_eq!(
        m.creation_timestamp.as_deref(),
        Some("2025-01-01T10:00:00Z")
    );
    assert_eq!(m.generation, Some(2));
    assert_eq!(m.resource_version.as_deref(), Some("41"));
    assert_eq!(
        m.labels.to_btree().into_iter().collect::<Vec<_>>(),
        [("projectcalico.org/tier".to_owned(), "default".to_owned())]
    );
    assert_eq!(m.annotations.len(), 2);
    assert_eq!(m.annotations["note"], "kept");
    assert_eq!(
        m.annotations["projectcalico.org/metadata"],
        stored.to_string()
    );

    // The same object in crd.projectcalico.org/v1 is Calico's converted form: the other name,
    // the uid converted.
    let r = convert(Conversion::Crd(Kind::NetworkPolicy, CalicoGroup::V1), &o)
        .1
        .unwrap()
        .unwrap();
    assert_eq!(r.metadata.name, "other");
    assert_eq!(r.metadata.uid, "0c8c26a6-c6a6-44c6-adc6-ac2646b46c1c");

    // A FelixConfiguration has its annotations (Felix's overrides) in either group.
    let fc = object(json!({
        "apiVersion": "projectcalico.org/v3", "kind": "FelixConfiguration",
        "metadata": {"name": "default",
                     "annotations": {"config.projectcalico.org/LogSeverityScreen": "Debug"}},
        "spec": {}}));
    let r = convert(
        Conversion::Crd(Kind::FelixConfiguration, CalicoGroup::V3),
        &fc,
    )
    .1
    .unwrap()
    .unwrap();
    assert_eq!(
        r.metadata.annotations["config.projectcalico.org/LogSeverityScreen"],
        "Debug"
    );
}

/// Calico v3.32's choice of group (libcalico-go's `UsingV3CRDs`): the setting, else v3 only
/// when the API server serves `projectcalico.org` and not `crd.projectcalico.org`.
#[test]
fn the_group_is_chosen_as_calico_chooses_it() {
    assert_eq!(CalicoGroup::discover(true, false), CalicoGroup::V1);
    assert_eq!(CalicoGroup::discover(false, true), CalicoGroup::V3);
    // Both: the v1 CRDs behind Calico's aggregated API server (or a migration under way).
    assert_eq!(CalicoGroup::discover(true, true), CalicoGroup::V1);
    assert_eq!(CalicoGroup::discover(false, false), CalicoGroup::V1);
    assert_eq!(CalicoGroup::from_setting(""), Ok(None));
    assert_eq!(
        CalicoGroup::from_setting("projectcalico.org/v3"),
        Ok(Some(CalicoGroup::V3))
    );
    assert_eq!(
        CalicoGroup::from_setting("CRD.projectcalico.org/v1"),
        Ok(Some(CalicoGroup::V1))
    );
    assert!(CalicoGroup::from_setting("projectcalico.org/v1").is_err());

    // The same sources in the same order in either group, Calico's kinds in the group's own
    // version.
    let (v1, v3) = (
        Kubernetes::sources(false, CalicoGroup::V1, InterfacePrefix::CALI),
        Kubernetes::sources(false, CalicoGroup::V3, InterfacePrefix::CALI),
    );
    assert_eq!(v1.len(), v3.len());
    for (a, b) in v1.iter().zip(&v3) {
        assert_eq!(a.resource.plural, b.resource.plural);
        match (a.conversion, b.conversion) {
            (Conversion::Crd(k, CalicoGroup::V1), Conversion::Crd(l, CalicoGroup::V3)) => {
                assert_eq!(k, l);
                assert_eq!(
                    (a.resource.group.as_str(), a.resource.version.as_str()),
                    (CRD_GROUP, "v1")
                );
                assert_eq!(
                    (b.resource.group.as_str(), b.resource.version.as_str()),
                    (V3_GROUP, "v3")
                );
            }
            (Conversion::Crd(..), _) | (_, Conversion::Crd(..)) => panic!("{a:?} / {b:?}"),
            _ => assert_eq!(a.resource.group, b.resource.group),
        }
    }
    // RBAC: Calico's kinds in both groups.
    let resources = Kubernetes::resources();
    for k in CRD_KINDS {
        for g in [CRD_GROUP, V3_GROUP] {
            assert!(resources.contains(&(g.to_owned(), k.plural().to_owned())));
        }
    }
}

/// Without any core kind the listing fails, and says what was read, why, and what to do.
#[test]
fn no_calico_kinds_says_what_to_do() {
    let e = DatastoreError::Unusable {
        what: group::no_calico_kinds(
            CalicoGroup::V1,
            Chosen::Discovered {
                v1: false,
                v3: false,
            },
        ),
    }
    .to_string();
    for part in [
        "ippools, networkpolicies, globalnetworkpolicies",
        "crd.projectcalico.org/v1",
        "CALICO_API_GROUP unset",
        "projectcalico.org not served",
        "Install Calico's CRDs",
        "set CALICO_API_GROUP",
        "not ready",
    ] {
        assert!(e.contains(part), "{part:?} in {e}");
    }
    let e = group::no_calico_kinds(CalicoGroup::V3, Chosen::Setting);
    assert!(
        e.contains("in projectcalico.org/v3 (as CALICO_API_GROUP says)"),
        "{e}"
    );
}

/// `FELIX_INTERFACEPREFIX` as Calico's conversion reads it: the first of its prefixes, then the
/// hash.
#[test]
fn interface_names_take_the_first_prefix() {
    let eni = InterfacePrefix::from_setting("eni,cali").unwrap();
    assert_eq!(eni.as_str(), "eni");
    // From Python: "eni" + hashlib.sha1(b"web.api-7d9f-x2k4q").hexdigest()[:11]
    assert_eq!(
        interface_name(eni, "web", "api-7d9f-x2k4q"),
        "enif32b024f777"
    );
    assert_eq!(
        InterfacePrefix::from_setting("").unwrap(),
        InterfacePrefix::CALI
    );
    let long = InterfacePrefix::from_setting("fifteen-chars-x").unwrap();
    assert_eq!(long.as_str(), "fifteen-chars-x");
    assert!(InterfacePrefix::from_setting("sixteen-chars-xx").is_err());
    assert!(InterfacePrefix::from_setting("eni,").is_err());
    let r = convert(Conversion::Pod(eni), &pod(json!({})))
        .1
        .unwrap()
        .unwrap();
    let Spec::WorkloadEndpoint(w) = &r.spec else {
        panic!("{r:?}")
    };
    assert_eq!(w.interface_name, "enif32b024f777");
}
