//! Parsing manifests: a policy and a network set, errors, default namespaces.

use super::id::{Kind, ResourceId};
use super::policy::PortSpec;
use super::resource::{ParseError, Resource, Spec};
use super::yaml::yaml_documents;

#[test]
fn parses_a_calico_policy_manifest() {
    let docs = yaml_documents(
        r#"
apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata:
  name: allow-web
  namespace: prod
spec:
  selector: app == 'web'
  order: 100
  types: [Ingress]
  ingress:
    - action: Allow
      protocol: TCP
      source:
        selector: app == 'frontend'
      destination:
        ports: [80, "8000:8080", http]
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkSet
metadata:
  name: blocked
spec:
  nets: [198.51.100.0/24]
"#,
    )
    .unwrap();
    assert_eq!(docs.len(), 2);
    let r = Resource::from_json(docs[0].clone()).unwrap();
    assert_eq!(
        r.id(),
        ResourceId::namespaced(Kind::NetworkPolicy, "prod", "allow-web")
    );
    let Spec::NetworkPolicy(p) = &r.spec else {
        panic!()
    };
    assert_eq!(p.order, Some(100.0));
    assert_eq!(
        p.ingress[0].destination.ports,
        vec![
            PortSpec::Number(80),
            PortSpec::Text("8000:8080".into()),
            PortSpec::Text("http".into())
        ]
    );
    // Round trip through the manifest form.
    assert_eq!(Resource::from_json(r.to_json()).unwrap(), r);
    let s = Resource::from_json(docs[1].clone()).unwrap();
    assert_eq!(
        s.id(),
        ResourceId::global(Kind::GlobalNetworkSet, "blocked")
    );
}

#[test]
fn errors_name_the_resource_and_reason() {
    // A rule without an action (which the conversion, not the parse, judges).
    let bad = serde_json::json!({
        "apiVersion": "projectcalico.org/v3", "kind": "NetworkPolicy",
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"ingress": [{"protocol": "TCP"}]}
    });
    let e = Resource::from_json(bad).unwrap_err().to_string();
    assert!(
        e.contains("NetworkPolicy ns/p") && e.contains("action"),
        "{e}"
    );
    let e = Resource::from_json(serde_json::json!({"apiVersion": "projectcalico.org/v3", "kind": "Widget", "metadata": {"name": "w"}}))
        .unwrap_err()
        .to_string();
    assert!(e.contains("Widget"), "{e}");
    let e = Resource::from_json(
        serde_json::json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}}),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("apiVersion"), "{e}");
}

#[test]
fn namespaced_kinds_default_to_the_default_namespace() {
    let r = Resource::from_json(serde_json::json!({
        "apiVersion": "projectcalico.org/v3", "kind": "NetworkSet", "metadata": {"name": "x"}
    }))
    .unwrap();
    assert_eq!(r.id().namespace.as_deref(), Some("default"));
}

#[test]
fn errors_keep_the_parsers_error_as_their_source() {
    use std::error::Error as _;
    let e = Resource::from_json_str("{not json").unwrap_err();
    assert!(e.to_string().starts_with("not a Calico resource: "), "{e}");
    assert!(e.source().is_some(), "{e:?}");
    let e = Resource::from_json(serde_json::json!({
        "apiVersion": "projectcalico.org/v3", "kind": "IPPool",
        "metadata": {"name": "p"}, "spec": {"natOutgoing": "yes"}
    }))
    .unwrap_err();
    assert!(e.to_string().starts_with("IPPool p: invalid spec: "), "{e}");
    assert!(e.source().is_some(), "{e:?}");
    let e = yaml_documents("a: [").unwrap_err();
    assert!(e.source().is_some(), "{e:?}");
}

/// Durations come out as Go's `time.Duration.String` writes them, whatever form went in.
#[test]
fn go_durations_are_written_as_go_writes_them() {
    use super::bgp::GoDuration;
    for (input, go) in [
        ("0", "0s"),
        ("0s", "0s"),
        ("90s", "1m30s"),
        ("2m", "2m0s"),
        ("1h", "1h0m0s"),
        ("1.5h", "1h30m0s"),
        ("0.5s", "500ms"),
        ("1500ms", "1.5s"),
        ("100us", "100µs"),
        ("1µs", "1µs"),
        ("1ns", "1ns"),
        ("1m0.25s", "1m0.25s"),
        ("-3s", "-3s"),
        ("26h3m", "26h3m0s"),
    ] {
        assert_eq!(
            GoDuration::parse(input).map(|d| d.to_string()).as_deref(),
            Some(go),
            "{input}"
        );
    }
    for bad in ["", "s", "10", "1x", "1.2.3s", "m1"] {
        assert_eq!(GoDuration::parse(bad), None, "{bad}");
    }
}

/// AS numbers: a number, a decimal string, or Calico's dotted form; anything else fails.
#[test]
fn as_numbers_parse_as_calicos() {
    use super::bgp::AsNumber;
    for (input, n) in [
        ("64512", Some(64512)),
        ("\"64512\"", Some(64512)),
        ("\"1.10\"", Some(65546)),
        ("\"65535.65535\"", Some(u32::MAX)),
        ("\"65536.1\"", None),
        ("\"1.2.3\"", None),
        ("\"abc\"", None),
        ("-1", None),
    ] {
        let got = serde_json::from_str::<AsNumber>(input).ok().map(|a| a.0);
        assert_eq!(got, n, "{input}");
    }
}

/// The BGP kinds and node status requests parse, and a spec of the wrong shape names the
/// resource.
#[test]
fn bgp_kinds_parse() {
    let docs = yaml_documents(
        "apiVersion: projectcalico.org/v3\nkind: BGPPeer\nmetadata: {name: p}\nspec: {peerIP: 192.0.2.1, asNumber: 64512}\n---\napiVersion: projectcalico.org/v3\nkind: CalicoNodeStatus\nmetadata: {name: s}\nspec: {node: n1, classes: [Agent], updatePeriodSeconds: 5}\n---\napiVersion: projectcalico.org/v3\nkind: BGPConfiguration\nmetadata: {name: default}\nspec: {nodeMeshMaxRestartTime: soon}\n",
    )
    .unwrap();
    let r = Resource::from_json(docs[0].clone()).unwrap();
    assert_eq!(r.id(), ResourceId::global(Kind::BgpPeer, "p"));
    let Spec::BgpPeer(p) = &r.spec else {
        panic!("{r:?}")
    };
    assert_eq!((p.peer_ip.as_str(), p.as_number.0), ("192.0.2.1", 64512));
    let r = Resource::from_json(docs[1].clone()).unwrap();
    assert_eq!(r.kind(), Kind::CalicoNodeStatus);
    let err = Resource::from_json(docs[2].clone())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("BGPConfiguration default") && err.contains("soon"),
        "{err}"
    );
    // Parsed, written back and parsed again: the same resource.
    let again = Resource::from_json(r.to_json()).unwrap();
    assert_eq!(again, r);
}

/// Staged policies: namespaced and cluster-wide, their action beside the policy's fields, and
/// the manifest form read back the same (the action left out when none was given).
#[test]
fn parses_staged_policies() {
    use super::policy::{StagedAction, StagedPolicySpec};
    let docs = yaml_documents(
        r#"
apiVersion: projectcalico.org/v3
kind: StagedNetworkPolicy
metadata: {name: p, namespace: prod}
spec:
  stagedAction: Delete
  tier: security
---
apiVersion: projectcalico.org/v3
kind: StagedGlobalNetworkPolicy
metadata: {name: g, namespace: ignored}
spec:
  order: 5
  selector: all()
  namespaceSelector: team == 'a'
  ingress: [{action: Allow, protocol: TCP, destination: {ports: [80]}}]
"#,
    )
    .unwrap();
    let r = Resource::from_json(docs[0].clone()).unwrap();
    assert_eq!(
        r.id(),
        ResourceId::namespaced(Kind::StagedNetworkPolicy, "prod", "p")
    );
    let Spec::StagedNetworkPolicy(StagedPolicySpec {
        staged_action,
        policy,
    }) = &r.spec
    else {
        panic!("{r:?}")
    };
    assert_eq!(*staged_action, Some(StagedAction::Delete));
    assert_eq!(policy.tier, "security");
    assert_eq!(r.to_json()["spec"]["stagedAction"], "Delete");
    assert_eq!(Resource::from_json(r.to_json()).unwrap(), r);

    let g = Resource::from_json(docs[1].clone()).unwrap();
    assert_eq!(
        g.id(),
        ResourceId::global(Kind::StagedGlobalNetworkPolicy, "g")
    );
    let Spec::StagedGlobalNetworkPolicy(s) = &g.spec else {
        panic!("{g:?}")
    };
    assert_eq!(s.staged_action, None);
    assert_eq!(s.policy.order, Some(5.0));
    assert_eq!(s.policy.namespace_selector, "team == 'a'");
    assert_eq!(
        s.policy.ingress[0].destination.ports,
        vec![PortSpec::Number(80)]
    );
    assert!(g.to_json()["spec"].get("stagedAction").is_none());
    assert_eq!(Resource::from_json(g.to_json()).unwrap(), g);
    assert_eq!(
        Kind::from_plural("stagedglobalnetworkpolicies"),
        Some(g.kind())
    );
    assert_eq!(Kind::from_name("StagedNetworkPolicy"), Some(r.kind()));
}

/// A BGPFilter parses (both address families, operations, nil and empty lists kept apart),
/// writes back to the same resource, and a rule of the wrong shape names the resource.
#[test]
fn bgp_filters_parse() {
    use super::bgp::AsNumber;
    let docs = yaml_documents(concat!(
        "apiVersion: projectcalico.org/v3\nkind: BGPFilter\nmetadata: {name: f}\n",
        "spec:\n",
        "  exportV4: [{cidr: 10.0.0.0/8, matchOperator: In, prefixLength: {min: 16}, action: Accept,\n",
        "              operations: [{prependASPath: {prefix: [65000, '1.10']}}]}]\n",
        "  importV6: [{action: Reject, communities: {}}, {action: Reject, communities: {values: []}}]\n",
        "---\n",
        "apiVersion: projectcalico.org/v3\nkind: BGPFilter\nmetadata: {name: bad}\n",
        "spec: {importV4: [{action: Accept, priority: high}]}\n",
    ))
    .unwrap();
    let r = Resource::from_json(docs[0].clone()).unwrap();
    assert_eq!(r.id(), ResourceId::global(Kind::BgpFilter, "f"));
    let Spec::BgpFilter(f) = &r.spec else {
        panic!("{r:?}")
    };
    let rule = &f.export_v4[0];
    assert_eq!(
        rule.prefix_length.map(|p| (p.min, p.max)),
        Some((Some(16), None))
    );
    let prefix = rule.operations[0].prepend_as_path.as_ref().unwrap();
    assert_eq!(prefix.prefix, Some(vec![AsNumber(65000), AsNumber(65546)]));
    assert_eq!(f.import_v6[0].communities.as_ref().unwrap().values, None);
    assert_eq!(
        f.import_v6[1].communities.as_ref().unwrap().values,
        Some(vec![])
    );
    assert!(f.import_v4.is_empty() && f.export_v6.is_empty());
    assert_eq!(Resource::from_json(r.to_json()).unwrap(), r);
    let err = Resource::from_json(docs[1].clone())
        .unwrap_err()
        .to_string();
    assert!(err.contains("BGPFilter bad"), "{err}");
}

#[test]
fn names_the_kubernetes_api_would_refuse_are_refused() {
    for (name, ns) in [
        ("w/rker-3", "default"),
        ("..", "default"),
        ("50%", "default"),
        ("ok", "a/b"),
        ("nul\u{0}", "default"),
    ] {
        let doc = serde_json::json!({"apiVersion": "projectcalico.org/v3", "kind": "NetworkSet",
            "metadata": {"name": name, "namespace": ns}, "spec": {"nets": ["10.0.0.0/8"]}});
        let e = Resource::from_json(doc).unwrap_err();
        assert!(
            matches!(e, ParseError::BadName { .. }),
            "{name:?} {ns:?}: {e}"
        );
    }
    let fine = serde_json::json!({"apiVersion": "projectcalico.org/v3", "kind": "NetworkSet",
        "metadata": {"name": "a.b-c", "namespace": "web"}, "spec": {"nets": ["10.0.0.0/8"]}});
    assert!(Resource::from_json(fine).is_ok());
}
