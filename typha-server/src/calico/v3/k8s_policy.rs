//! Kubernetes NetworkPolicy specs in Calico's policy form, as Calico's Kubernetes driver
//! converts them (`K8sNetworkPolicyToCalico`): what the Kubernetes backend reads from the
//! `networking.k8s.io` API, and what a StagedKubernetesNetworkPolicy stages.

use serde_json::{Map, Value, json};

/// Calico's label on every Kubernetes workload endpoint.
pub(super) const K8S_ONLY: &str = "projectcalico.org/orchestrator == 'k8s'";

/// A Kubernetes label selector as a Calico selector (`""` for an empty one).
pub fn label_selector(sel: &Value) -> String {
    let mut parts: Vec<String> = at(sel, "/matchLabels")
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k} == '{}'", v.as_str().unwrap_or_default()))
        .collect();
    for e in at(sel, "/matchExpressions")
        .as_array()
        .into_iter()
        .flatten()
    {
        let key = at(e, "/key").as_str().unwrap_or_default();
        let values: Vec<String> = at(e, "/values")
            .as_array()
            .into_iter()
            .flatten()
            .map(|v| format!("'{}'", v.as_str().unwrap_or_default()))
            .collect();
        let values = values.join(", ");
        parts.push(match at(e, "/operator").as_str().unwrap_or_default() {
            "In" => format!("{key} in {{ {values} }}"),
            "NotIn" => format!("{key} not in {{ {values} }}"),
            "Exists" => format!("has({key})"),
            "DoesNotExist" => format!("! has({key})"),
            // Not a valid operator: a selector that does not parse, so the policy is invalid
            // rather than wider than written.
            other => format!("<unknown operator {other:?}>"),
        });
    }
    parts.join(" && ")
}

/// A Kubernetes pod selector as Calico's selector of those pods: Kubernetes workload
/// endpoints only (Calico's `k8sSelectorToCalico` for pods).
pub(super) fn pod_selector(sel: &Value) -> String {
    and(label_selector(sel), K8S_ONLY)
}

/// A Kubernetes namespace selector as Calico's: an empty one is every namespace, `all()`
/// (Calico's `k8sSelectorToCalico` for namespaces).
pub(super) fn namespace_selector(sel: &Value) -> String {
    let ns = label_selector(sel);
    if ns.is_empty() { "all()".into() } else { ns }
}

/// `a && b`, where either may be empty.
fn and(a: String, b: &str) -> String {
    match (a.is_empty(), b.is_empty()) {
        (true, _) => b.to_string(),
        (_, true) => a,
        _ => format!("{a} && {b}"),
    }
}

/// A NetworkPolicy peer as a Calico entity (without ports).
fn peer_entity(peer: &Value) -> Value {
    if let Some(block) = peer.get("ipBlock") {
        return json!({
            "nets": [at(block, "/cidr")],
            "notNets": at(block, "/except").as_array().cloned().unwrap_or_default(),
        });
    }
    let pods = pod_selector(peer.get("podSelector").unwrap_or(&Value::Null));
    match peer.get("namespaceSelector") {
        Some(ns) => json!({"selector": pods, "namespaceSelector": namespace_selector(ns)}),
        None => json!({"selector": pods}),
    }
}

/// The rules of one NetworkPolicy rule: one Calico rule per (port, peer), all Allow.
fn k8s_rules(rule: &Value, peers_field: &str, ingress: bool) -> Vec<Value> {
    let peers: Vec<Value> = match at(rule, peers_field).as_array() {
        Some(ps) if !ps.is_empty() => ps.iter().map(peer_entity).collect(),
        _ => vec![json!({})],
    };
    let ports: Vec<Option<(String, Value)>> = match at(rule, "/ports").as_array() {
        Some(ps) if !ps.is_empty() => ps
            .iter()
            .map(|p| {
                let proto = at(p, "/protocol").as_str().unwrap_or("TCP").to_string();
                let port = match (at(p, "/port"), at(p, "/endPort").as_u64()) {
                    (Value::Number(n), Some(end)) => json!([format!("{n}:{end}")]),
                    (Value::Null, _) => json!([]),
                    (port, _) => json!([port]),
                };
                Some((proto, port))
            })
            .collect(),
        _ => vec![None],
    };
    let mut out = Vec::new();
    for port in &ports {
        for peer in &peers {
            let mut dest = if ingress { json!({}) } else { peer.clone() };
            let mut rule = Map::new();
            rule.insert("action".into(), "Allow".into());
            if let (Some((proto, ports)), Some(d)) = (port, dest.as_object_mut()) {
                rule.insert("protocol".into(), proto.as_str().into());
                d.insert("ports".into(), ports.clone());
            }
            if ingress {
                rule.insert("source".into(), peer.clone());
            }
            rule.insert("destination".into(), dest);
            out.push(Value::Object(rule));
        }
    }
    out
}

/// A Kubernetes NetworkPolicy's `spec` in Calico's form, as Calico's Kubernetes driver converts
/// it (order 1000, the pod selector with Calico's Kubernetes label, one Allow rule per port and
/// peer). Used for Kubernetes NetworkPolicies and for StagedKubernetesNetworkPolicies.
pub fn calico_spec(spec: &Value) -> Value {
    let selector = pod_selector(at(spec, "/podSelector"));
    let rules = |field: &str, peers: &str, ingress: bool| -> Vec<Value> {
        at(spec, field)
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|r| k8s_rules(r, peers, ingress))
            .collect()
    };
    let types: Vec<Value> = match at(spec, "/policyTypes").as_array() {
        Some(t) if !t.is_empty() => t.clone(),
        _ if spec.get("egress").is_some() => json!(["Ingress", "Egress"])
            .as_array()
            .cloned()
            .unwrap_or_default(),
        _ => vec!["Ingress".into()],
    };
    json!({
        "order": 1000.0,
        "selector": selector,
        "types": types,
        "ingress": rules("/ingress", "/from", true),
        "egress": rules("/egress", "/to", false),
    })
}

/// The value at a JSON pointer, `null` when absent.
pub(super) fn at<'a>(v: &'a Value, pointer: &str) -> &'a Value {
    v.pointer(pointer).unwrap_or(&Value::Null)
}
