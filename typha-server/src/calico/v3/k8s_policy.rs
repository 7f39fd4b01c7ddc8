//! Kubernetes NetworkPolicy specs in Calico's policy form, as Calico v3.32's Kubernetes driver
//! converts them (`K8sNetworkPolicyToCalico` in `k8s/conversion/conversion.go`): what the
//! Kubernetes backend reads from the `networking.k8s.io` API, and what a
//! StagedKubernetesNetworkPolicy stages.
//!
//! The text and the shape are Calico's, because Felix names IP sets after selectors' parse
//! trees and hashes rules into ids: the pod selector is `projectcalico.org/orchestrator ==
//! 'k8s'` then the labels (sorted) then the expressions (as given), joined by ` && ` without
//! parentheses; the rules are one per protocol (sorted, none first) and peer, each carrying
//! every port of its protocol (Calico's `SimplifyPorts`).

use std::collections::BTreeMap;

use ipnet::IpNet;
use serde_json::{Map, Value, json};

/// Calico's label on every Kubernetes workload endpoint, as a selector term.
pub(super) const K8S_ONLY: &str = "projectcalico.org/orchestrator == 'k8s'";

/// Calico's `k8sSelectorToCalico`: a Kubernetes label selector as Calico's selector text. A pod
/// selector starts with [`K8S_ONLY`]; an absent (`null`) selector has no other term, and an
/// absent namespace selector is `""`. A present namespace selector without terms is every
/// namespace, `all()`. Then `k == 'v'` per label (sorted by key) and one term per expression,
/// in order; an expression with an operator Calico does not know adds nothing.
fn k8s_selector(sel: &Value, pod: bool) -> String {
    let mut parts: Vec<String> = Vec::new();
    if pod {
        parts.push(K8S_ONLY.to_owned());
    }
    if sel.is_null() {
        return parts.join(" && ");
    }
    let labels = at(sel, "/matchLabels").as_object();
    let expressions = at(sel, "/matchExpressions").as_array();
    if !pod && labels.is_none_or(Map::is_empty) && expressions.is_none_or(Vec::is_empty) {
        return "all()".into();
    }
    // `serde_json::Map` is sorted by key (no `preserve_order`), as Calico sorts.
    for (k, v) in labels.into_iter().flatten() {
        parts.push(format!("{k} == '{}'", v.as_str().unwrap_or_default()));
    }
    for e in expressions.into_iter().flatten() {
        let key = at(e, "/key").as_str().unwrap_or_default();
        let values: Vec<&str> = at(e, "/values")
            .as_array()
            .into_iter()
            .flatten()
            .map(|v| v.as_str().unwrap_or_default())
            .collect();
        let values = values.join("', '");
        match at(e, "/operator").as_str().unwrap_or_default() {
            "In" => parts.push(format!("{key} in {{ '{values}' }}")),
            "NotIn" => parts.push(format!("{key} not in {{ '{values}' }}")),
            "Exists" => parts.push(format!("has({key})")),
            "DoesNotExist" => parts.push(format!("! has({key})")),
            _ => {}
        }
    }
    parts.join(" && ")
}

/// A Kubernetes pod selector (`null` when absent) as Calico's selector of those pods.
pub(super) fn pod_selector(sel: &Value) -> String {
    k8s_selector(sel, true)
}

/// A Kubernetes namespace selector (`null` when absent) as Calico's.
pub(super) fn namespace_selector(sel: &Value) -> String {
    k8s_selector(sel, false)
}

/// A destination port: a number, a range, or a name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum DstPort {
    Range(u16, u16),
    Named(String),
}

/// Calico's `SimplifyPorts`: with more than one numeric port, named ports first (as given),
/// then the numeric ones sorted and merged into ranges; otherwise as given.
pub(super) fn simplify(ports: &[DstPort]) -> Vec<Value> {
    let numeric: Vec<(u16, u16)> = ports
        .iter()
        .filter_map(|p| match p {
            DstPort::Range(a, b) => Some((*a, *b)),
            DstPort::Named(_) => None,
        })
        .collect();
    let count: u32 = numeric
        .iter()
        .map(|(a, b)| u32::from(*b).saturating_sub(u32::from(*a)) + 1)
        .sum();
    let merged = if ports.len() <= 1 || count <= 1 {
        ports.to_vec()
    } else {
        let mut sorted = numeric;
        sorted.sort_unstable();
        let mut ranges: Vec<(u16, u16)> = Vec::new();
        for (a, b) in sorted {
            match ranges.last_mut() {
                Some(last) if u32::from(a) <= u32::from(last.1) + 1 => last.1 = last.1.max(b),
                _ => ranges.push((a, b)),
            }
        }
        ports
            .iter()
            .filter(|p| matches!(p, DstPort::Named(_)))
            .cloned()
            .chain(ranges.into_iter().map(|(a, b)| DstPort::Range(a, b)))
            .collect()
    };
    merged
        .into_iter()
        .map(|p| match p {
            DstPort::Range(a, b) if a == b => Value::from(a),
            DstPort::Range(a, b) => Value::from(format!("{a}:{b}")),
            DstPort::Named(n) => Value::from(n),
        })
        .collect()
}

/// Ports per protocol name (`""` for none, sorted first); `None` is every port of it.
pub(super) type ProtocolPorts = BTreeMap<String, Option<Vec<DstPort>>>;

/// Adds `port` of `protocol` as Calico's `k8sRuleToCalico` does: every port of a protocol,
/// once given, stays every port.
pub(super) fn add_port(out: &mut ProtocolPorts, protocol: &str, port: Option<DstPort>) {
    match (out.get_mut(protocol), port) {
        (_, None) => {
            out.insert(protocol.to_owned(), None);
        }
        (None, Some(port)) => {
            out.insert(protocol.to_owned(), Some(vec![port]));
        }
        (Some(Some(ports)), Some(port)) => ports.push(port),
        (Some(None), Some(_)) => {}
    }
}

/// Calico's `numorstring.PortFromString`: `80`, `80:90` or a name.
fn port_from_string(s: &str) -> Result<DstPort, ()> {
    let num = |t: &str| t.parse::<u16>().map_err(|_| ());
    if let Some((a, b)) = s.split_once(':') {
        let (a, b) = (num(a)?, num(b)?);
        return if a <= b {
            Ok(DstPort::Range(a, b))
        } else {
            Err(())
        };
    }
    if s.bytes().all(|c| c.is_ascii_digit()) && !s.is_empty() {
        return num(s).map(|n| DstPort::Range(n, n));
    }
    Ok(DstPort::Named(s.to_owned()))
}

/// One `NetworkPolicyPort` as (protocol, port): the protocol as written (TCP when absent), the
/// port as Calico reads it (`None`: every port of the protocol); an end port makes a range.
fn k8s_port(p: &Value) -> Result<(String, Option<DstPort>), ()> {
    let protocol = at(p, "/protocol").as_str().unwrap_or("TCP").to_owned();
    let port = match at(p, "/port") {
        Value::Null => return Ok((protocol, None)),
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        _ => return Err(()),
    };
    let text = match at(p, "/endPort").as_u64() {
        Some(end) => format!("{port}:{end}"),
        None => port,
    };
    Ok((protocol, Some(port_from_string(&text)?)))
}

/// A NetworkPolicy peer as Calico's entity fields (without ports). An `ipBlock` is its network
/// and exceptions, masked; one that does not parse gives an empty peer, as Calico's does.
fn peer_entity(peer: &Value) -> Map<String, Value> {
    let mut e = Map::new();
    if let Some(block) = peer.get("ipBlock") {
        let net = |v: &Value| -> Option<String> {
            let n: IpNet = v.as_str()?.parse().ok()?;
            Some(n.trunc().to_string())
        };
        let Some(cidr) = net(at(block, "/cidr")) else {
            return e;
        };
        let except: Option<Vec<String>> = at(block, "/except")
            .as_array()
            .into_iter()
            .flatten()
            .map(net)
            .collect();
        let Some(except) = except else {
            return e;
        };
        e.insert("nets".into(), json!([cidr]));
        if !except.is_empty() {
            e.insert("notNets".into(), json!(except));
        }
        return e;
    }
    e.insert(
        "selector".into(),
        pod_selector(peer.get("podSelector").unwrap_or(&Value::Null)).into(),
    );
    let ns = namespace_selector(peer.get("namespaceSelector").unwrap_or(&Value::Null));
    if !ns.is_empty() {
        e.insert("namespaceSelector".into(), ns.into());
    }
    e
}

/// The Calico rules of one NetworkPolicy rule (Calico's `k8sRuleToCalico`): Allow, one per
/// protocol (sorted, none first) and peer, each with every port of its protocol. A port that
/// does not convert drops the whole rule, as Calico drops it.
fn k8s_rules(rule: &Value, peers_field: &str, ingress: bool) -> Result<Vec<Value>, ()> {
    let peers: Vec<Map<String, Value>> = match at(rule, peers_field).as_array() {
        Some(ps) if !ps.is_empty() => ps.iter().map(peer_entity).collect(),
        _ => vec![Map::new()],
    };
    let mut by_protocol = ProtocolPorts::new();
    match at(rule, "/ports").as_array() {
        Some(ps) if !ps.is_empty() => {
            for p in ps {
                let (protocol, port) = k8s_port(p)?;
                add_port(&mut by_protocol, &protocol, port);
            }
        }
        _ => {
            by_protocol.insert(String::new(), None);
        }
    }
    let mut out = Vec::new();
    for (protocol, ports) in &by_protocol {
        for peer in &peers {
            let mut rule = Map::new();
            rule.insert("action".into(), "Allow".into());
            if !protocol.is_empty() {
                rule.insert("protocol".into(), protocol.as_str().into());
            }
            let mut dest = if ingress {
                rule.insert("source".into(), Value::Object(peer.clone()));
                Map::new()
            } else {
                peer.clone()
            };
            if let Some(ports) = ports {
                dest.insert("ports".into(), simplify(ports).into());
            }
            rule.insert("destination".into(), Value::Object(dest));
            out.push(Value::Object(rule));
        }
    }
    Ok(out)
}

/// A Kubernetes NetworkPolicy's `spec` in Calico's form, as Calico's Kubernetes driver converts
/// it: order 1000, the pod selector of Kubernetes pods, the rules above (a rule that does not
/// convert is left out, the rest kept), and types from `policyTypes` (Ingress first; none
/// given is Ingress alone, as Calico reads a policy from before `policyTypes`). Used for
/// Kubernetes NetworkPolicies and for StagedKubernetesNetworkPolicies.
pub fn calico_spec(spec: &Value) -> Value {
    let selector = pod_selector(at(spec, "/podSelector"));
    let rules = |field: &str, peers: &str, ingress: bool| -> Vec<Value> {
        at(spec, field)
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| k8s_rules(r, peers, ingress).ok())
            .flatten()
            .collect()
    };
    let listed = |t: &str| {
        at(spec, "/policyTypes")
            .as_array()
            .is_some_and(|ts| ts.iter().any(|v| v.as_str() == Some(t)))
    };
    let mut types = Vec::new();
    if listed("Ingress") {
        types.push("Ingress");
    }
    if listed("Egress") {
        types.push("Egress");
    }
    if types.is_empty() {
        types.push("Ingress");
    }
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
