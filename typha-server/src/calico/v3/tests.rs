//! Parsing manifests: a policy and a network set, errors, default namespaces.

use super::id::{Kind, ResourceId};
use super::policy::PortSpec;
use super::resource::{Resource, Spec};
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
    let bad = serde_json::json!({
        "apiVersion": "projectcalico.org/v3", "kind": "NetworkPolicy",
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"ingress": [{"action": "Allw"}]}
    });
    let e = Resource::from_json(bad).unwrap_err().to_string();
    assert!(
        e.contains("NetworkPolicy ns/p") && e.contains("Allw"),
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
