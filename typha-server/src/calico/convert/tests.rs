//! The conversion, resource by resource: keys, values, and errors that name the field.

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use typha_protocol::model::{
    EncapMode, Key, Policy, PolicyKey, PolicyKind, PolicyType, Port, Value,
};
use typha_protocol::selector::NAMESPACE_LABEL;

use super::config::go_duration_secs;
use super::context::{ConvertError, ORCHESTRATOR_LABEL, SERVICE_ACCOUNT_LABEL};
use crate::calico::convert::convert;
use crate::calico::v3::{Resource, yaml_documents};

fn one(yaml: &str) -> Result<Vec<(Key, Value)>, ConvertError> {
    let docs = yaml_documents(yaml).unwrap();
    assert_eq!(docs.len(), 1);
    convert(&Resource::from_json(docs[0].clone()).unwrap())
}

fn policy(kvs: &[(Key, Value)]) -> &Policy {
    match &kvs[0].1 {
        Value::Policy(p) => p,
        other => panic!("{other:?}"),
    }
}

#[test]
fn workload_endpoint_from_a_pod() {
    let kvs = one(r#"
apiVersion: projectcalico.org/v3
kind: WorkloadEndpoint
metadata:
  name: node--1-k8s-web--5d8f-eth0
  namespace: prod
  labels: {app: web, pcns.team: x}
  generateName: web-5d8f-
spec:
  orchestrator: k8s
  node: node-1
  pod: web-5d8f
  endpoint: eth0
  serviceAccountName: web
  interfaceName: cali0123456789a
  ipNetworks: [10.65.1.23/32, "fd00::17"]
  profiles: [kns.prod, ksa.prod.web]
  ports: [{name: http, protocol: TCP, port: 8080}, {name: "", protocol: UDP, port: 53}]
"#)
    .unwrap();
    assert_eq!(kvs.len(), 1);
    assert_eq!(
        kvs[0].0.to_string(),
        "/calico/v1/host/node-1/workload/k8s/prod%2fweb-5d8f/endpoint/eth0"
    );
    let Value::WorkloadEndpoint(w) = &kvs[0].1 else {
        panic!()
    };
    assert_eq!(w.name, "cali0123456789a");
    assert_eq!(
        w.ipv4_nets,
        vec!["10.65.1.23/32".parse::<Ipv4Net>().unwrap()]
    );
    assert_eq!(
        w.ipv6_nets,
        vec!["fd00::17/128".parse::<Ipv6Net>().unwrap()]
    );
    assert_eq!(w.labels.get(NAMESPACE_LABEL).unwrap(), "prod");
    assert_eq!(w.labels.get(ORCHESTRATOR_LABEL).unwrap(), "k8s");
    assert_eq!(w.labels.get(SERVICE_ACCOUNT_LABEL).unwrap(), "web");
    assert!(!w.labels.contains_key("pcns.team"));
    assert_eq!(w.ports.len(), 1, "only named ports are kept");
    assert_eq!(w.generate_name, "web-5d8f-");
}

#[test]
fn endpoint_without_addresses_produces_nothing() {
    let kvs = one(
        "apiVersion: projectcalico.org/v3\nkind: WorkloadEndpoint\nmetadata: {name: x, namespace: a}\nspec: {orchestrator: k8s, node: n, pod: p, endpoint: eth0, interfaceName: calix}\n",
    )
    .unwrap();
    assert!(kvs.is_empty());
}

#[test]
fn namespaced_policy_is_scoped_to_its_namespace() {
    let kvs = one(r#"
apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: allow-web, namespace: prod}
spec:
  selector: app == 'web'
  types: [Ingress]
  ingress:
    - action: Allow
      protocol: TCP
      source: {selector: app == 'frontend'}
      destination: {ports: [80, "8000:8080", http]}
    - action: Allow
      source: {nets: [10.0.0.5]}
"#)
    .unwrap();
    assert_eq!(
        kvs[0].0.to_string(),
        "/calico/v1/policy/NetworkPolicy/prod/allow-web"
    );
    let p = policy(&kvs);
    // Calico's text: the user's selector verbatim, the namespace in single quotes.
    assert_eq!(
        p.selector,
        "(app == 'web') && projectcalico.org/namespace == 'prod'"
    );
    assert_eq!(p.types, vec![PolicyType::Ingress]);
    assert_eq!(p.tier, "default");
    let r = &p.inbound_rules[0];
    assert_eq!(
        r.src.selector,
        "(projectcalico.org/namespace == 'prod') && (app == 'frontend')"
    );
    assert_eq!(r.detail.orig_src_selector, "app == 'frontend'");
    assert_eq!(r.detail.orig_dst_selector, "");
    assert_eq!(
        r.dst.ports,
        vec![
            Port::Range {
                first: 80,
                last: 80
            },
            Port::Range {
                first: 8000,
                last: 8080
            },
            Port::Named("http".into())
        ]
    );
    // A rule with only nets is not scoped to the namespace (as in Calico).
    assert_eq!(p.inbound_rules[1].src.selector, "");
    assert_eq!(
        p.inbound_rules[1].src.nets,
        vec!["10.0.0.5/32".parse::<IpNet>().unwrap()]
    );
}

/// `namespaceSelector: all()` beside a selector still demands a namespace, as Calico's text
/// replacement of `all()` in the joined selector makes it (host endpoints have none).
#[test]
fn global_policy_all_namespaces_beside_a_selector_still_needs_a_namespace() {
    let kvs = one("apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata: {name: g}\nspec: {selector: app == 'x', namespaceSelector: all()}\n").unwrap();
    assert_eq!(
        policy(&kvs).selector,
        "(app == 'x') && has(projectcalico.org/namespace)"
    );
    let kvs = one("apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata: {name: g}\nspec: {namespaceSelector: all()}\n").unwrap();
    assert_eq!(policy(&kvs).selector, "has(projectcalico.org/namespace)");
}

#[test]
fn global_policy_namespace_selector_is_prefixed() {
    let kvs = one(r#"
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: g}
spec:
  namespaceSelector: team == 'web'
  egress: [{action: Deny}]
  ingress:
    - action: Allow
      source: {namespaceSelector: all(), serviceAccounts: {names: [b, a]}}
"#)
    .unwrap();
    let p = policy(&kvs);
    assert_eq!(p.selector, r#"pcns.team == "web""#);
    assert_eq!(p.types, vec![PolicyType::Ingress, PolicyType::Egress]);
    assert_eq!(
        p.inbound_rules[0].src.selector,
        r#"(has(projectcalico.org/namespace)) && (projectcalico.org/serviceaccount in {"a", "b"})"#
    );
}

/// Calico's syncers send a policy stored without types with none, which Felix applies in both
/// directions; only its client library fills them in, when writing (`accept_write`).
#[test]
fn a_policy_stored_without_types_applies_both_ways() {
    let kvs = one(
        "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata: {name: g}\nspec: {egress: [{action: Allow}]}\n",
    )
    .unwrap();
    assert_eq!(
        policy(&kvs).types,
        vec![PolicyType::Ingress, PolicyType::Egress]
    );
}

#[test]
fn invalid_rules_name_the_field() {
    for (spec, field, reason) in [
        (
            "{ingress: [{action: Allow, destination: {ports: [80]}}]}",
            "spec.ingress[0]",
            "port numbers need protocol",
        ),
        (
            "{ingress: [{action: Allow, protocol: TCP, destination: {ports: ['90:80']}}]}",
            "spec.ingress[0].destination.ports[0]",
            "first > last",
        ),
        (
            "{ingress: [{action: Allow, source: {selector: 'app =='}}]}",
            "spec.ingress[0].source.selector",
            "position 6",
        ),
        ("{selector: 'a in {'}", "spec.selector", "invalid selector"),
        (
            "{ingress: [{action: Allow, protocol: Bogus}]}",
            "spec.ingress[0].protocol",
            "unknown protocol",
        ),
        ("{types: [Sideways]}", "spec.types", "Ingress or Egress"),
    ] {
        let yaml = format!(
            "apiVersion: projectcalico.org/v3\nkind: NetworkPolicy\nmetadata: {{name: p, namespace: n}}\nspec: {spec}\n"
        );
        let e = one(&yaml).unwrap_err();
        assert_eq!(e.field, field, "{spec}: {e}");
        assert!(e.reason.contains(reason), "{spec}: {e}");
        assert!(e.to_string().starts_with("NetworkPolicy n/p: "), "{e}");
    }
}

#[test]
fn profile_gives_rules_and_labels() {
    let kvs = one(
        "apiVersion: projectcalico.org/v3\nkind: Profile\nmetadata: {name: kns.prod}\nspec: {ingress: [{action: Allow}], egress: [{action: Allow}], labelsToApply: {pcns.team: web}}\n",
    )
    .unwrap();
    let paths: Vec<_> = kvs.iter().map(|(k, _)| k.to_string()).collect();
    assert_eq!(
        paths,
        [
            "/calico/v1/policy/profile/kns.prod/rules",
            "/calico/v1/policy/profile/kns.prod/labels"
        ]
    );
}

#[test]
fn network_sets_pools_blocks_nodes() {
    let kvs = one("apiVersion: projectcalico.org/v3\nkind: NetworkSet\nmetadata: {name: blocked, namespace: prod, labels: {a: b}}\nspec: {nets: [198.51.100.7/24]}\n").unwrap();
    assert_eq!(kvs[0].0.to_string(), "/calico/v1/netset/prod%2fblocked");
    let Value::NetworkSet(s) = &kvs[0].1 else {
        panic!()
    };
    assert_eq!(
        s.nets,
        vec!["198.51.100.0/24".parse::<IpNet>().unwrap()],
        "masked"
    );
    assert_eq!(s.labels.get(NAMESPACE_LABEL).unwrap(), "prod");

    let kvs = one("apiVersion: projectcalico.org/v3\nkind: IPPool\nmetadata: {name: p}\nspec: {cidr: 10.65.0.0/16, vxlanMode: CrossSubnet, natOutgoing: true}\n").unwrap();
    assert_eq!(kvs[0].0.to_string(), "/calico/v1/ipam/v4/pool/10.65.0.0-16");
    let Value::IpPool(p) = &kvs[0].1 else {
        panic!()
    };
    assert!(
        p.masquerade
            && p.ipam
            && p.vxlan_mode == EncapMode::CrossSubnet
            && p.ipip_mode == EncapMode::Never
    );

    let kvs = one("apiVersion: crd.projectcalico.org/v1\nkind: IPAMBlock\nmetadata: {name: 10-65-1-0-26}\nspec: {cidr: 10.65.1.0/26, affinity: 'host:node-1', allocations: [0, null, 1]}\n").unwrap();
    let Value::Block(b) = &kvs[0].1 else { panic!() };
    assert_eq!((b.affine_host(), b.allocated), (Some("node-1"), 2));

    let kvs = one("apiVersion: projectcalico.org/v3\nkind: Node\nmetadata: {name: node-1}\nspec: {bgp: {ipv4Address: 192.0.2.10/24, ipv4IPIPTunnelAddr: 10.65.1.1}}\n").unwrap();
    let paths: Vec<_> = kvs.iter().map(|(k, _)| k.to_string()).collect();
    assert_eq!(
        paths,
        [
            "/calico/v1/host/node-1/bird_ip",
            "/calico/v1/host/node-1/config/IpInIpTunnelAddr",
            "/calico/resources/v3/projectcalico.org/nodes/node-1"
        ]
    );
    assert_eq!(kvs[0].1, Value::HostIp("192.0.2.10".parse().unwrap()));
    let kvs = one("apiVersion: projectcalico.org/v3\nkind: Node\nmetadata: {name: n2}\nspec: {addresses: [{address: 'fd00::1', type: InternalIP}, {address: 192.0.2.11, type: InternalIP}]}\n").unwrap();
    assert_eq!(kvs[0].1, Value::HostIp("192.0.2.11".parse().unwrap()));
}

#[test]
fn felix_configuration_becomes_config_keys() {
    let kvs = one("apiVersion: projectcalico.org/v3\nkind: FelixConfiguration\nmetadata: {name: default}\nspec: {logSeverityScreen: Info, reportingInterval: 90s, iptablesRefreshInterval: 100ms, bpfEnabled: false, failsafeInboundHostPorts: [{protocol: tcp, port: 22}], healthPort: 9099, empty: ''}\n").unwrap();
    let got: Vec<(String, Value)> = kvs.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    let want = [
        ("/calico/v1/config/BPFEnabled", "false"),
        ("/calico/v1/config/FailsafeInboundHostPorts", "tcp:22"),
        ("/calico/v1/config/HealthPort", "9099"),
        ("/calico/v1/config/IptablesRefreshInterval", "0.1"),
        ("/calico/v1/config/LogSeverityScreen", "Info"),
        ("/calico/v1/config/ReportingIntervalSecs", "90"),
    ];
    assert_eq!(
        got,
        want.map(|(k, v)| (k.to_owned(), Value::Config(v.into())))
            .to_vec()
    );
    let kvs = one("apiVersion: projectcalico.org/v3\nkind: FelixConfiguration\nmetadata: {name: node.node-1}\nspec: {logSeverityScreen: Debug}\n").unwrap();
    assert_eq!(
        kvs[0].0.to_string(),
        "/calico/v1/host/node-1/config/LogSeverityScreen"
    );
    let e = one("apiVersion: projectcalico.org/v3\nkind: FelixConfiguration\nmetadata: {name: node.}\nspec: {}\n").unwrap_err();
    assert_eq!(e.field, "metadata.name");
}

/// Any other name is a selector-scoped configuration: Calico's felix syncer passes it through
/// whole (its `configurationprocessor`), so it is carried as the raw resource, spec as given.
#[test]
fn selector_scoped_felix_configurations_are_carried_whole() {
    let kvs = one("apiVersion: projectcalico.org/v3\nkind: FelixConfiguration\nmetadata: {name: gpu-nodes, labels: {team: ml}}\nspec: {nodeSelector: \"gpu == 'true'\", logSeverityScreen: Debug, bpfEnabled: true}\n").unwrap();
    assert_eq!(kvs.len(), 1);
    assert_eq!(
        kvs[0].0.to_string(),
        "/calico/resources/v3/projectcalico.org/felixconfigurations/gpu-nodes"
    );
    let Value::Resource(r) = &kvs[0].1 else {
        panic!("{:?}", kvs[0].1)
    };
    assert_eq!(r.labels.get("team").map(String::as_str), Some("ml"));
    let spec: serde_json::Value = serde_json::from_str(&r.spec_json).unwrap();
    assert_eq!(
        spec,
        serde_json::json!({"nodeSelector": "gpu == 'true'", "logSeverityScreen": "Debug", "bpfEnabled": true, "bpfLogLevel": ""})
    );
}

#[test]
fn cluster_information_sets_the_ready_flag() {
    let kvs = one("apiVersion: projectcalico.org/v3\nkind: ClusterInformation\nmetadata: {name: default}\nspec: {datastoreReady: true, clusterGUID: abc}\n").unwrap();
    assert_eq!(kvs[0], (Key::ReadyFlag, Value::ReadyFlag(true)));
    assert_eq!(kvs[1].0.to_string(), "/calico/v1/config/ClusterGUID");
}

#[test]
fn go_durations() {
    assert_eq!(go_duration_secs("90s"), Some(90.0));
    assert_eq!(go_duration_secs("1m30s"), Some(90.0));
    assert_eq!(go_duration_secs("100ms"), Some(0.1));
    assert_eq!(go_duration_secs("1.5h"), Some(5400.0));
    assert_eq!(go_duration_secs("Info"), None);
    assert_eq!(go_duration_secs("10"), None);
}

#[test]
fn quotes_that_could_rewrite_a_selector_are_refused() {
    // The selector language has no escapes: a namespace or service account name with quotes,
    // folded into a selector, could change its meaning (`x' || all() || a == '`).
    let e = one("apiVersion: projectcalico.org/v3\nkind: NetworkPolicy\nmetadata: {name: p, namespace: \"x' || all() || a == '\"}\nspec: {selector: all()}\n").unwrap_err();
    assert_eq!(e.field, "metadata.namespace");
    // A service account name with a quote cannot rewrite the rule's selector either: the
    // names do not make a selector, and Calico leaves the whole service-account match out of
    // the rule's selector (logging it), as we do.
    let kvs = one("apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata: {name: p}\nspec:\n  ingress:\n    - action: Allow\n      source: {selector: a == 'b', serviceAccounts: {names: [\"a'b\\\"c\"]}}\n").unwrap();
    let r = &policy(&kvs).inbound_rules[0];
    assert_eq!(r.src.selector, "a == 'b'");
    assert_eq!(r.src.service_account_names, ["a'b\"c"]);
}

#[test]
fn felix_configuration_lists_of_lists_are_refused() {
    let e = one("apiVersion: projectcalico.org/v3\nkind: FelixConfiguration\nmetadata: {name: default}\nspec: {failsafeInboundHostPorts: [[22]]}\n").unwrap_err();
    assert_eq!(e.field, "spec.failsafeInboundHostPorts");
    assert_eq!(
        e.reason,
        "[[22]] is not a list of {protocol, port, net}; Calico cannot read the resource"
    );
}

#[test]
fn felix_parameter_names_keep_calicos_acronyms_and_units() {
    for (field, name) in [
        ("bpfEnabled", Some("BPFEnabled")),
        ("vxlanMTU", Some("VXLANMTU")),
        ("ipipEnabled", Some("IpInIpEnabled")),
        ("reportingInterval", Some("ReportingIntervalSecs")),
        ("wireguardKeepAlive", Some("WireguardPersistentKeepAlive")),
        ("logSeverityScreen", Some("LogSeverityScreen")),
        ("nodeSelector", None),
        // Not identifiers: no parameter (one with a `/` made a config key that is no key).
        ("", None),
        ("logSeveignmentvip4//blockrityScreen", None),
        ("9lives", None),
        ("with space", None),
        ("feature_Flag2", Some("Feature_Flag2")),
    ] {
        assert_eq!(
            super::config::felix_param_name_for_tests(field).as_deref(),
            name,
            "{field}"
        );
    }
}

/// A tier is carried as its raw resource, which Calico's clients receive as `model.Tier`.
#[test]
fn a_tier_is_carried_with_its_order_and_default_action() {
    let kvs = one("apiVersion: projectcalico.org/v3\nkind: Tier\nmetadata: {name: kube-admin}\nspec: {order: 1000, defaultAction: Pass}\n").unwrap();
    assert_eq!(kvs.len(), 1);
    assert_eq!(
        kvs[0].0.to_string(),
        "/calico/resources/v3/projectcalico.org/tiers/kube-admin"
    );
    let Value::Resource(r) = &kvs[0].1 else {
        panic!("{kvs:?}")
    };
    let spec: serde_json::Value = serde_json::from_str(&r.spec_json).unwrap();
    assert_eq!(
        spec,
        serde_json::json!({"order": 1000.0, "defaultAction": "Pass"})
    );
    let calico = crate::calico::libcalico::calico_kvs(&kvs[0].0, &kvs[0].1);
    assert_eq!(
        &*calico[0].key,
        "/calico/v1/policy/tier/kube-admin/metadata"
    );
    assert_eq!(
        calico[0].value.as_deref(),
        Some(&br#"{"order":1000,"defaultAction":"Pass"}"#[..])
    );
}

/// Staged policies as Calico v3.32's staged update processors make them: the staged policy's
/// own kind and name in the key (no `staged:` prefix: that is only in the pre-3.30 key), the
/// value converted as the policy it stages (selectors folded by the same rules), and
/// `staged_action` copied when one is given.
#[test]
fn staged_policies_convert_as_the_policy_they_stage_with_their_action() {
    let kvs = one(r#"
apiVersion: projectcalico.org/v3
kind: StagedNetworkPolicy
metadata: {name: allow-web, namespace: prod}
spec:
  stagedAction: Set
  tier: default
  order: 10
  types: [Ingress]
  selector: app == 'web'
  serviceAccountSelector: role == 'api'
  ingress:
    - action: Allow
      source: {selector: app == 'frontend'}
"#)
    .unwrap();
    assert_eq!(kvs.len(), 1);
    assert_eq!(
        kvs[0].0,
        Key::Policy(PolicyKey {
            kind: PolicyKind::StagedNetworkPolicy,
            namespace: Some("prod".into()),
            name: "allow-web".into(),
        })
    );
    assert_eq!(
        kvs[0].0.to_string(),
        "/calico/v1/policy/StagedNetworkPolicy/prod/allow-web"
    );
    let p = policy(&kvs);
    assert_eq!(
        p.selector,
        r#"((app == 'web') && projectcalico.org/namespace == 'prod') && pcsa.role == "api""#
    );
    assert_eq!(p.staged_action.as_deref(), Some("Set"));
    assert_eq!((p.tier.as_str(), p.order), ("default", Some(10.0)));
    assert_eq!(p.types, vec![PolicyType::Ingress]);
    assert_eq!(
        p.inbound_rules[0].src.selector,
        "(projectcalico.org/namespace == 'prod') && (app == 'frontend')"
    );
    // The same spec as an enforced NetworkPolicy converts to the same value but for the action.
    let enforced = one(r#"
apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: allow-web, namespace: prod}
spec:
  tier: default
  order: 10
  types: [Ingress]
  selector: app == 'web'
  serviceAccountSelector: role == 'api'
  ingress:
    - action: Allow
      source: {selector: app == 'frontend'}
"#)
    .unwrap();
    let mut unstaged = p.clone();
    unstaged.staged_action = None;
    assert_eq!(&unstaged, policy(&enforced));
    // What a felix syncer client of Calico's protocol gets: model.PolicyKey's path with the
    // staged kind, and the pre-3.30 key with the `staged:` prefix in the name.
    let calico = crate::calico::libcalico::calico_kvs(&kvs[0].0, &kvs[0].1);
    assert_eq!(calico.len(), 1);
    assert_eq!(
        &*calico[0].key,
        "/calico/v1/policy/StagedNetworkPolicy/prod/allow-web"
    );
    assert_eq!(
        calico[0].legacy_key.as_deref(),
        Some("/calico/v1/policy/tier/default/policy/prod%2fstaged:allow-web")
    );
    assert_eq!(
        std::str::from_utf8(calico[0].value.as_ref().unwrap()).unwrap(),
        // As Calico's networkpolicyprocessor_test.go has it: the user's selectors verbatim,
        // the namespace in single quotes, the service-account selector canonical.
        r#"{"namespace":"prod","tier":"default","order":10,"inbound_rules":[{"action":"allow","src_selector":"(projectcalico.org/namespace == 'prod') \u0026\u0026 (app == 'frontend')","orig_src_selector":"app == 'frontend'"}],"selector":"((app == 'web') \u0026\u0026 projectcalico.org/namespace == 'prod') \u0026\u0026 pcsa.role == \"api\"","types":["ingress"],"staged_action":"Set"}"#
    );

    let kvs = one(r#"
apiVersion: projectcalico.org/v3
kind: StagedGlobalNetworkPolicy
metadata: {name: g}
spec:
  stagedAction: Learn
  tier: security
  namespaceSelector: team == 'web'
  doNotTrack: true
  ingress: [{action: Deny}]
"#)
    .unwrap();
    assert_eq!(
        kvs[0].0.to_string(),
        "/calico/v1/policy/StagedGlobalNetworkPolicy/g"
    );
    let p = policy(&kvs);
    assert_eq!(p.selector, r#"pcns.team == "web""#);
    assert_eq!(p.namespace, "");
    assert_eq!(p.tier, "security");
    assert!(p.untracked && p.apply_on_forward);
    assert_eq!(p.staged_action.as_deref(), Some("Learn"));
    let calico = crate::calico::libcalico::calico_kvs(&kvs[0].0, &kvs[0].1);
    assert_eq!(
        &*calico[0].key,
        "/calico/v1/policy/StagedGlobalNetworkPolicy//g"
    );
    assert_eq!(
        calico[0].legacy_key.as_deref(),
        Some("/calico/v1/policy/tier/security/policy/staged:g")
    );

    // No stagedAction (or an empty one): none in the value, as Calico leaves the pointer nil.
    for action in ["", "stagedAction: '', "] {
        let kvs = one(&format!(
            "apiVersion: projectcalico.org/v3\nkind: StagedGlobalNetworkPolicy\nmetadata: {{name: g}}\nspec: {{{action}selector: all()}}\n"
        ))
        .unwrap();
        assert_eq!(policy(&kvs).staged_action, None, "{action:?}");
        assert_eq!(policy(&kvs).selector, "all()");
    }
    let kvs = one("apiVersion: projectcalico.org/v3\nkind: StagedNetworkPolicy\nmetadata: {name: p, namespace: n}\nspec: {stagedAction: Ignore}\n").unwrap();
    assert_eq!(policy(&kvs).staged_action.as_deref(), Some("Ignore"));
    assert_eq!(policy(&kvs).selector, "projectcalico.org/namespace == 'n'");
}

/// `stagedAction: Delete` stages the deletion of the enforced policy: Calico sends no value
/// (the key is deleted), without looking at the rest of the spec.
#[test]
fn a_staged_deletion_sends_nothing() {
    for kind in ["StagedNetworkPolicy", "StagedGlobalNetworkPolicy"] {
        for spec in [
            "{stagedAction: Delete}",
            "{stagedAction: Delete, tier: security}",
            "{stagedAction: Delete, selector: 'a in {', ingress: [{action: Allow, protocol: Bogus}]}",
        ] {
            let kvs = one(&format!(
                "apiVersion: projectcalico.org/v3\nkind: {kind}\nmetadata: {{name: p, namespace: n}}\nspec: {spec}\n"
            ))
            .unwrap();
            assert!(kvs.is_empty(), "{kind} {spec}: {kvs:?}");
        }
    }
}

/// An invalid staged policy is refused as an invalid policy is: an action that is not text does
/// not parse, a bad rule fails the conversion naming the field. An action other than Set,
/// Delete, Learn and Ignore (which Calico's CRD and validator refuse on writing) is passed on
/// as Calico's syncers pass it, and a namespace selector that does not parse is ignored.
#[test]
fn invalid_staged_policies_are_refused() {
    let doc = |spec: &str| {
        yaml_documents(&format!(
            "apiVersion: projectcalico.org/v3\nkind: StagedNetworkPolicy\nmetadata: {{name: p, namespace: n}}\nspec: {spec}\n"
        ))
        .unwrap()
        .remove(0)
    };
    for (spec, sent) in [
        ("{stagedAction: Remove}", "Remove"),
        ("{stagedAction: set}", "set"),
    ] {
        let kvs = convert(&Resource::from_json(doc(spec)).unwrap()).unwrap();
        assert_eq!(policy(&kvs).staged_action.as_deref(), Some(sent), "{spec}");
    }
    for spec in ["{stagedAction: 1}", "{stagedAction: [Set]}"] {
        let e = Resource::from_json(doc(spec)).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("StagedNetworkPolicy n/p: invalid spec"),
            "{spec}: {e}"
        );
    }
    // A rule selector that does not parse makes the policy invalid, as Typha's validation
    // filter makes it.
    let e = one("apiVersion: projectcalico.org/v3\nkind: StagedGlobalNetworkPolicy\nmetadata: {name: g}\nspec: {stagedAction: Set, ingress: [{action: Allow, source: {selector: 'a =='}}]}\n").unwrap_err();
    assert_eq!(e.field, "spec.ingress[0].source.selector", "{e}");
    assert!(
        e.to_string().starts_with("StagedGlobalNetworkPolicy g: "),
        "{e}"
    );
    let kvs = one("apiVersion: projectcalico.org/v3\nkind: StagedGlobalNetworkPolicy\nmetadata: {name: g}\nspec: {stagedAction: Set, selector: app == 'x', namespaceSelector: 'a =='}\n").unwrap();
    // Calico's text: the namespace selector left out, but its `all()` replacement still made.
    assert_eq!(policy(&kvs).selector, "app == 'x'");
    let e = one("apiVersion: projectcalico.org/v3\nkind: StagedNetworkPolicy\nmetadata: {name: p, namespace: n}\nspec: {egress: [{action: Allow, destination: {ports: [80]}}]}\n").unwrap_err();
    assert_eq!(e.field, "spec.egress[0]", "{e}");
}

/// StagedKubernetesNetworkPolicy as Calico v3.32's staged Kubernetes processor makes it: the
/// NetworkPolicy it stages converted as Calico converts a Kubernetes NetworkPolicy, keyed by
/// the staged kind and its own name (no `knp.default.` prefix), with its action; nothing for
/// Delete. A kind added after protocol version 1: version 1 clients of our protocol are not
/// sent it.
#[test]
fn staged_kubernetes_policies_convert_as_the_kubernetes_policy_they_stage() {
    let k8s_spec = serde_json::json!({
        "podSelector": {"matchLabels": {"app": "db"}},
        "policyTypes": ["Ingress"],
        "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "api"}}}],
                     "ports": [{"protocol": "TCP", "port": 5432}]}]
    });
    let mut staged_spec = k8s_spec.clone();
    staged_spec["stagedAction"] = "Learn".into();
    let staged = Resource::from_json(serde_json::json!({
        "apiVersion": "projectcalico.org/v3", "kind": "StagedKubernetesNetworkPolicy",
        "metadata": {"name": "db", "namespace": "prod"}, "spec": staged_spec
    }))
    .unwrap();
    assert_eq!(
        Resource::from_json(staged.to_json()).unwrap(),
        staged,
        "the manifest form reads back the same"
    );
    let kvs = convert(&staged).unwrap();
    assert_eq!(kvs.len(), 1);
    assert_eq!(
        kvs[0].0.to_string(),
        "/calico/v1/policy/StagedKubernetesNetworkPolicy/prod/db"
    );
    assert!(!kvs[0].0.in_v1());
    let p = policy(&kvs);
    assert_eq!(p.staged_action.as_deref(), Some("Learn"));
    // The same NetworkPolicy enforced (as the Kubernetes backend reads one) converts to the
    // same value but for the action.
    let enforced = Resource::from_json(serde_json::json!({
        "apiVersion": "projectcalico.org/v3", "kind": "KubernetesNetworkPolicy",
        "metadata": {"name": "knp.default.db", "namespace": "prod"},
        "spec": crate::calico::v3::k8s_policy::calico_spec(&k8s_spec)
    }))
    .unwrap();
    let enforced = convert(&enforced).unwrap();
    let mut unstaged = p.clone();
    unstaged.staged_action = None;
    assert_eq!(&unstaged, policy(&enforced));
    assert_eq!(p.order, Some(1000.0));
    // Calico's keys: the staged kind's path, and the pre-3.30 name `staged:knp.default.<n>`.
    let calico = crate::calico::libcalico::calico_kvs(&kvs[0].0, &kvs[0].1);
    assert_eq!(
        &*calico[0].key,
        "/calico/v1/policy/StagedKubernetesNetworkPolicy/prod/db"
    );
    assert_eq!(
        calico[0].legacy_key.as_deref(),
        Some("/calico/v1/policy/tier/default/policy/prod%2fstaged:knp.default.db")
    );

    let mut delete = staged.to_json();
    delete["spec"]["stagedAction"] = "Delete".into();
    assert!(
        convert(&Resource::from_json(delete).unwrap())
            .unwrap()
            .is_empty()
    );
    let mut odd = staged.to_json();
    odd["spec"]["stagedAction"] = "Maybe".into();
    let kvs = convert(&Resource::from_json(odd).unwrap()).unwrap();
    assert_eq!(policy(&kvs).staged_action.as_deref(), Some("Maybe"));
}

/// A Kubernetes ClusterNetworkPolicy as the Kubernetes backend reads it, through the felix
/// syncer's conversion as Calico's GlobalNetworkPolicy processor makes it: keyed
/// `KubernetesClusterNetworkPolicy` by its own name, in tier `kube-admin`, its order the
/// priority, types only for its rule lists, and named ports without a protocol. A kind added
/// after protocol version 1.
#[test]
fn cluster_network_policies_convert_as_global_policies_in_their_tier() {
    let spec = crate::calico::v3::k8s_cluster_policy::calico_spec(&serde_json::json!({
        "tier": "Admin", "priority": 20,
        "subject": {"namespaces": {"matchLabels": {"team": "a"}}},
        "egress": [{"name": "dns", "action": "Accept", "to": [{"pods": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}}],
            "protocols": [{"udp": {"destinationPort": {"number": 53}}},
                          {"destinationNamedPort": "dns-tcp"}]},
            {"name": "rest", "action": "Pass", "to": [{"networks": ["0.0.0.0/0"]}]}]
    }))
    .unwrap();
    let r = Resource::from_json(serde_json::json!({
        "apiVersion": "projectcalico.org/v3", "kind": "KubernetesClusterNetworkPolicy",
        "metadata": {"name": "egress"}, "spec": spec
    }))
    .unwrap();
    let kvs = convert(&r).unwrap();
    assert_eq!(kvs.len(), 1);
    assert_eq!(
        kvs[0].0,
        Key::Policy(PolicyKey {
            kind: PolicyKind::KubernetesClusterNetworkPolicy,
            namespace: None,
            name: "egress".into()
        })
    );
    assert!(!kvs[0].0.in_v1());
    let p = policy(&kvs);
    assert_eq!(p.tier, "kube-admin");
    assert_eq!(p.order, Some(20.0));
    assert_eq!(p.types, vec![PolicyType::Egress]);
    assert_eq!(
        p.selector,
        "(projectcalico.org/orchestrator == 'k8s') && pcns.team == \"a\""
    );
    assert!(p.inbound_rules.is_empty());
    let out = &p.outbound_rules;
    assert_eq!(out.len(), 3, "{out:?}");
    assert_eq!(out[0].protocol, None);
    assert_eq!(out[0].dst.ports, vec![Port::Named("dns-tcp".into())]);
    assert_eq!(out[1].protocol, Some(typha_protocol::model::Protocol::Udp));
    assert_eq!(
        out[1].dst.ports,
        vec![Port::Range {
            first: 53,
            last: 53
        }]
    );
    assert_eq!(out[0].dst.selector, out[1].dst.selector);
    assert_eq!(out[2].action, typha_protocol::model::Action::Pass);
    assert_eq!(out[2].dst.nets, vec!["0.0.0.0/0".parse::<IpNet>().unwrap()]);
    // Calico's keys: the kind's path with an empty namespace, and `kcnp.<name>` in the tier
    // before 3.30.
    let calico = crate::calico::libcalico::calico_kvs(&kvs[0].0, &kvs[0].1);
    assert_eq!(
        &*calico[0].key,
        "/calico/v1/policy/KubernetesClusterNetworkPolicy//egress"
    );
    assert_eq!(
        calico[0].legacy_key.as_deref(),
        Some("/calico/v1/policy/tier/kube-admin/policy/kcnp.egress")
    );
    // Each rule's name in its metadata, as Calico's driver puts it (Felix writes it as a
    // comment on the rule's iptables lines).
    let json = std::str::from_utf8(calico[0].value.as_ref().unwrap()).unwrap();
    assert!(
        json.contains(r#""metadata":{"annotations":{"name":"rest"}}"#),
        "{json}"
    );
    assert_eq!(
        p.outbound_rules[2]
            .detail
            .annotations
            .get("name")
            .map(String::as_str),
        Some("rest")
    );
    // No rules at all: no types, not Calico's API defaults.
    let empty = crate::calico::v3::k8s_cluster_policy::calico_spec(&serde_json::json!({
        "tier": "Baseline", "priority": 0, "subject": {"namespaces": {}}
    }))
    .unwrap();
    let r = Resource::from_json(serde_json::json!({
        "apiVersion": "projectcalico.org/v3", "kind": "KubernetesClusterNetworkPolicy",
        "metadata": {"name": "quiet"}, "spec": empty
    }))
    .unwrap();
    let kvs = convert(&r).unwrap();
    let p = policy(&kvs);
    assert_eq!((p.tier.as_str(), p.types.len()), ("kube-baseline", 0));
    assert_eq!(
        p.selector,
        "(projectcalico.org/orchestrator == 'k8s') && has(projectcalico.org/namespace)"
    );
    // Named ports without a protocol are not this kind's only: Calico's validator takes them
    // in any rule (a named port of any protocol).
    let kvs = one("apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata: {name: p}\nspec: {egress: [{action: Allow, destination: {ports: [web]}}]}\n").unwrap();
    assert_eq!(
        policy(&kvs).outbound_rules[0].dst.ports,
        vec![Port::Named("web".into())]
    );
}

/// Issue 38: every policy kind's selectors are the text Calico v3.32's update processors
/// compose (`networkpolicyprocessor.go`, `globalnetworkpolicyprocessor.go`, `rules.go`; the
/// expected strings follow Calico's own processor tests), so Felix names the same IP sets and
/// policy groups from ours as from Calico's Typha.
#[test]
fn selectors_are_the_text_calico_composes() {
    let np = |spec: &str| {
        policy(
            &one(&format!(
                "apiVersion: projectcalico.org/v3\nkind: NetworkPolicy\nmetadata: {{name: p, namespace: prod}}\nspec: {spec}\n"
            ))
            .unwrap(),
        )
        .clone()
    };
    let gnp = |spec: &str| {
        policy(
            &one(&format!(
                "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata: {{name: g}}\nspec: {spec}\n"
            ))
            .unwrap(),
        )
        .clone()
    };
    // Policy selectors.
    for (spec, want) in [
        (
            r#"{selector: 'app == "x"'}"#,
            r#"(app == "x") && projectcalico.org/namespace == 'prod'"#,
        ),
        ("{selector: ''}", "projectcalico.org/namespace == 'prod'"),
        (
            "{selector: all()}",
            "(all()) && projectcalico.org/namespace == 'prod'",
        ),
        (
            "{selector: app == 'x', serviceAccountSelector: all()}",
            "((app == 'x') && projectcalico.org/namespace == 'prod') && all()",
        ),
    ] {
        assert_eq!(np(spec).selector, want, "{spec}");
    }
    for (spec, want) in [
        ("{selector: app == 'x'}", "app == 'x'"),
        ("{selector: ''}", ""),
        (
            "{selector: a == 'x' && b == 'y', namespaceSelector: a == 'b' && c == 'd'}",
            r#"(a == 'x' && b == 'y') && (pcns.a == "b" && pcns.c == "d")"#,
        ),
        (
            "{selector: all(), namespaceSelector: team == 'x'}",
            r#"(has(projectcalico.org/namespace)) && pcns.team == "x""#,
        ),
        (
            "{serviceAccountSelector: all()}",
            "has(projectcalico.org/serviceaccount)",
        ),
        // A namespace selector that does not parse is left out, as Calico leaves it out.
        (
            "{selector: app == 'x', namespaceSelector: 'a =='}",
            "app == 'x'",
        ),
    ] {
        assert_eq!(gnp(spec).selector, want, "{spec}");
    }
    // Rule selectors: `all()` selects every endpoint (not every address), scoped to the
    // namespace in a namespaced policy; a not-selector alone scopes the rule; the service
    // account part before the selector.
    let rule = |p: Policy| p.inbound_rules[0].clone();
    let r = rule(gnp(
        "{ingress: [{action: Allow, source: {selector: all()}}]}",
    ));
    assert_eq!(r.src.selector, "all()");
    let r = rule(np(
        "{ingress: [{action: Allow, source: {selector: all()}}]}",
    ));
    assert_eq!(
        r.src.selector,
        "(projectcalico.org/namespace == 'prod') && (all())"
    );
    let r = rule(np(
        "{ingress: [{action: Allow, source: {notSelector: app == 'x'}}]}",
    ));
    assert_eq!(
        (r.src.selector.as_str(), r.src.not_selector.as_str()),
        ("projectcalico.org/namespace == 'prod'", "app == 'x'")
    );
    let r = rule(np(
        "{ingress: [{action: Allow, source: {selector: has(label1), serviceAccounts: {selector: key == 'value2', names: [sa3]}}}]}",
    ));
    assert_eq!(
        r.src.selector,
        r#"(projectcalico.org/namespace == 'prod') && (((pcsa.key == "value2") && (projectcalico.org/serviceaccount in {"sa3"})) && (has(label1)))"#
    );
    assert_eq!(r.detail.orig_src_selector, "has(label1)");
    let r = rule(gnp(
        "{ingress: [{action: Allow, destination: {namespaceSelector: global(), selector: role == 'db'}}]}",
    ));
    assert_eq!(
        r.dst.selector,
        "(!has(projectcalico.org/namespace)) && (role == 'db')"
    );
    assert_eq!(
        (
            r.detail.orig_dst_selector.as_str(),
            r.dst.namespace_selector.as_str()
        ),
        ("role == 'db'", "global()")
    );
    // A rule's selector that does not parse makes the policy invalid, as Typha's validation
    // filter makes it (the `orig_*` fields carry it verbatim).
    for bad in [
        "{ingress: [{action: Allow, source: {selector: 'a =='}}]}",
        "{ingress: [{action: Allow, source: {namespaceSelector: 'a =='}}]}",
        "{ingress: [{action: Allow, source: {notSelector: 'a =='}}]}",
        "{ingress: [{action: Allow, source: {serviceAccounts: {selector: 'a =='}}}]}",
    ] {
        let e = one(&format!(
            "apiVersion: projectcalico.org/v3\nkind: NetworkPolicy\nmetadata: {{name: p, namespace: prod}}\nspec: {bad}\n"
        ))
        .unwrap_err();
        assert!(e.field.starts_with("spec.ingress[0].source."), "{bad}: {e}");
    }
}
