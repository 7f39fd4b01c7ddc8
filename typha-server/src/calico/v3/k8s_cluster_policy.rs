//! Kubernetes ClusterNetworkPolicies (`policy.networking.k8s.io/v1alpha2`) in Calico's
//! GlobalNetworkPolicy form, as Calico v3.32's Kubernetes driver converts them
//! (`K8sClusterNetworkPolicyToCalico`): what the Kubernetes backend reads and serves as
//! `KubernetesClusterNetworkPolicy`.
//!
//! - Tier `Admin` is Calico's tier `kube-admin`, `Baseline` is `kube-baseline`; any other tier,
//!   or a subject with neither `namespaces` nor `pods`, gives no policy at all (Calico's
//!   tombstone: an earlier version of it is deleted).
//! - The order is the priority; the subject's selectors become the policy's namespace and pod
//!   selectors (pods of Kubernetes workloads only).
//! - Each rule becomes one Calico rule per protocol (sorted; no protocol first) and peer, with
//!   the protocol's ports merged into ranges; `Accept` is Allow, `Deny` and `Pass` are as
//!   written. A rule that does not convert (a peer of a kind Calico does not read, such as
//!   `nodes` or `domainNames`, a bad range or network) becomes a Deny rule matching everything
//!   when its action is Deny or Pass, and is dropped when it is Accept.
//! - Types: `Ingress` and `Egress` for the non-empty rule lists only (Calico's tiers for these
//!   policies pass by default, so a direction without rules need not be enforced).
//! - A rule's `name` goes into each of its Calico rules' metadata (annotation `name`), as
//!   Calico writes it: Felix puts it in a comment on the rule's iptables lines.

use ipnet::IpNet;
use serde_json::{Map, Value, json};

use super::k8s_policy::{
    DstPort, ProtocolPorts, add_port, at, namespace_selector, pod_selector, simplify,
};

/// Calico's tier for ClusterNetworkPolicies of tier `Admin`.
pub const ADMIN_TIER: &str = "kube-admin";
/// Calico's tier for ClusterNetworkPolicies of tier `Baseline`.
pub const BASELINE_TIER: &str = "kube-baseline";

/// A ClusterNetworkPolicy's `spec` in Calico's GlobalNetworkPolicy form, or `None` when Calico
/// gives it no policy (a tier other than Admin or Baseline, or no subject).
pub fn calico_spec(spec: &Value) -> Option<Value> {
    let tier = match at(spec, "/tier").as_str() {
        Some("Admin") => ADMIN_TIER,
        Some("Baseline") => BASELINE_TIER,
        _ => return None,
    };
    let (ns_selector, selector) = if let Some(ns) = present(spec, "/subject/namespaces") {
        (namespace_selector(ns), pod_selector(&Value::Null))
    } else if let Some(pods) = present(spec, "/subject/pods") {
        namespaced_pods(pods)
    } else {
        return None;
    };
    let rules = |field: &str, ingress: bool| -> Vec<Value> {
        at(spec, field)
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|r| match rule(r, ingress) {
                Ok(rules) => rules,
                Err(()) => fail_closed(r),
            })
            .collect()
    };
    let (ingress, egress) = (rules("/ingress", true), rules("/egress", false));
    let mut types = Vec::new();
    if !ingress.is_empty() {
        types.push("Ingress");
    }
    if !egress.is_empty() {
        types.push("Egress");
    }
    Some(json!({
        "tier": tier,
        "order": at(spec, "/priority").as_f64().unwrap_or(0.0),
        "namespaceSelector": ns_selector,
        "selector": selector,
        "types": types,
        "ingress": ingress,
        "egress": egress,
    }))
}

/// The value at `pointer` unless it is absent or `null` (Go's nil pointer).
fn present<'a>(v: &'a Value, pointer: &str) -> Option<&'a Value> {
    v.pointer(pointer).filter(|v| !v.is_null())
}

/// A `NamespacedPod` (`namespaceSelector`, `podSelector`) as (namespace selector, selector).
fn namespaced_pods(pods: &Value) -> (String, String) {
    // Both are required and not pointers in Go: an absent one is empty, i.e. everything.
    let empty = Value::Object(Map::new());
    let ns = present(pods, "/namespaceSelector").unwrap_or(&empty);
    let pod = present(pods, "/podSelector").unwrap_or(&empty);
    (namespace_selector(ns), pod_selector(pod))
}

/// What a rule that does not convert becomes: Deny everything for Deny and Pass, nothing for
/// Accept (or an unknown action).
fn fail_closed(r: &Value) -> Vec<Value> {
    match at(r, "/action").as_str() {
        Some("Deny" | "Pass") => vec![json!({"action": "Deny"})],
        _ => Vec::new(),
    }
}

/// One rule's Calico rules: per protocol, per peer.
fn rule(r: &Value, ingress: bool) -> Result<Vec<Value>, ()> {
    let action = match at(r, "/action").as_str() {
        Some("Accept") => "Allow",
        Some(a @ ("Deny" | "Pass")) => a,
        _ => return Err(()),
    };
    let protocols = protocol_ports(at(r, "/protocols"))?;
    let peers: Vec<Value> = at(r, if ingress { "/from" } else { "/to" })
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| peer(p, ingress))
        .collect::<Result<_, _>>()?;
    let name = at(r, "/name").as_str().filter(|n| !n.is_empty());
    let mut out = Vec::new();
    for (protocol, ports) in &protocols {
        for peer in &peers {
            let mut rule = Map::new();
            if let Some(name) = name {
                rule.insert("metadata".into(), json!({"annotations": {"name": name}}));
            }
            rule.insert("action".into(), action.into());
            if !protocol.is_empty() {
                rule.insert("protocol".into(), protocol.as_str().into());
            }
            let mut dest = if ingress {
                rule.insert("source".into(), peer.clone());
                Map::new()
            } else {
                peer.as_object().cloned().unwrap_or_default()
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

/// A peer as a Calico entity (without ports). Ingress peers are `namespaces` or `pods`; egress
/// peers also `networks`. A peer with none of them is an error.
fn peer(p: &Value, ingress: bool) -> Result<Value, ()> {
    let mut e = Map::new();
    let mut found = false;
    if let Some(ns) = present(p, "/namespaces") {
        e.insert("namespaceSelector".into(), namespace_selector(ns).into());
        found = true;
    }
    if let Some(pods) = present(p, "/pods") {
        let (ns, sel) = namespaced_pods(pods);
        e.insert("namespaceSelector".into(), ns.into());
        e.insert("selector".into(), sel.into());
        found = true;
    }
    if !ingress && let Some(networks) = at(p, "/networks").as_array().filter(|n| !n.is_empty()) {
        let nets: Vec<Value> = networks
            .iter()
            .map(|n| {
                let net: IpNet = n.as_str().ok_or(())?.parse().map_err(|_| ())?;
                // The network itself, as Go's `IPNet.String` writes it.
                Ok(Value::String(net.trunc().to_string()))
            })
            .collect::<Result<_, ()>>()?;
        e.insert("nets".into(), nets.into());
        found = true;
    }
    if found { Ok(Value::Object(e)) } else { Err(()) }
}

/// A rule's protocols, as Calico unpacks them: per protocol name (`""` for none, sorted
/// first), its ports, `None` for every port. No protocols, or one without any field, is one
/// entry matching everything.
fn protocol_ports(protocols: &Value) -> Result<ProtocolPorts, ()> {
    let all = || ProtocolPorts::from([(String::new(), None)]);
    let Some(list) = protocols.as_array().filter(|l| !l.is_empty()) else {
        return Ok(all());
    };
    let mut out = ProtocolPorts::new();
    for p in list {
        let (protocol, port) = protocol_port(p)?;
        if protocol.is_empty() && port.is_none() {
            // Any traffic: this rule matches everything, whatever else it lists.
            return Ok(all());
        }
        add_port(&mut out, protocol, port);
    }
    Ok(out)
}

/// One `ClusterNetworkPolicyProtocol`: its protocol (`""` for a named port) and port (`None`
/// for every port). The first of `tcp`, `udp`, `sctp`, `destinationNamedPort` given counts.
fn protocol_port(p: &Value) -> Result<(&'static str, Option<DstPort>), ()> {
    for (field, name) in [("/tcp", "TCP"), ("/udp", "UDP"), ("/sctp", "SCTP")] {
        if let Some(proto) = present(p, field) {
            return Ok((name, number_or_range(at(proto, "/destinationPort"))?));
        }
    }
    match at(p, "/destinationNamedPort").as_str() {
        None | Some("") => Ok(("", None)),
        // A name our model would read as a number or a range: it cannot be carried as a
        // name, so the rule does not convert (and fails closed).
        Some(n) if n.bytes().all(|b| b.is_ascii_digit() || b == b':') => Err(()),
        Some(n) => Ok(("", Some(DstPort::Named(n.to_owned())))),
    }
}

/// A `Port`: `number` (0 is none given) or `range`; neither is every port.
fn number_or_range(p: &Value) -> Result<Option<DstPort>, ()> {
    let port = |v: &Value| -> Result<u16, ()> {
        v.as_u64()
            .and_then(|n| u16::try_from(n).ok())
            .filter(|n| *n > 0)
            .ok_or(())
    };
    let number = at(p, "/number");
    if !matches!(number.as_u64(), None | Some(0)) {
        let n = port(number)?;
        return Ok(Some(DstPort::Range(n, n)));
    }
    match present(p, "/range") {
        Some(r) => {
            let (start, end) = (port(at(r, "/start"))?, port(at(r, "/end"))?);
            if start > end {
                return Err(());
            }
            Ok(Some(DstPort::Range(start, end)))
        }
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests;
