//! Validation: the gate between the stream and the calc graph.
//!
//! As in Felix, a value that fails validation is treated as a deletion of its key: the calc
//! graph never sees half-understood data, and whatever the key held before is withdrawn. The
//! agent logs each rejection with the key and the reason and counts it.

use typha_protocol::model::{Key, Port, Rule, Update, Value};
use typha_protocol::selector::Selector;

/// Why an update was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {reason}")]
pub struct Invalid {
    /// The key.
    pub key: String,
    /// What is wrong.
    pub reason: String,
}

/// An update after validation: what to apply, and why the value was refused if it was.
#[derive(Debug, Clone, PartialEq)]
pub struct Checked {
    /// The key.
    pub key: Key,
    /// The value to apply; `None` is a deletion (asked for, or because the value is invalid).
    pub value: Option<Value>,
    /// Why the value was refused.
    pub invalid: Option<Invalid>,
}

/// Checks an update.
pub fn validate(u: &Update) -> Checked {
    let key = u.key.key();
    let bad = |key: Key, reason: String| Checked {
        invalid: Some(Invalid {
            key: key.to_string(),
            reason,
        }),
        key,
        value: None,
    };
    let value = match u.decode_value() {
        Ok(v) => v,
        Err(e) => return bad(key, e.to_string()),
    };
    let Some(value) = value else {
        return Checked {
            key,
            value: None,
            invalid: None,
        };
    };
    let check = match &value {
        Value::WorkloadEndpoint(w) => iface_name(&w.name).and_then(|()| {
            if w.ipv4_nets.is_empty() && w.ipv6_nets.is_empty() {
                Err("no IP addresses".to_string())
            } else {
                Ok(())
            }
        }),
        // A host endpoint names its interface, or none (by address), or `*` (all); the name
        // goes into iptables rules, so anything else is refused.
        Value::HostEndpoint(h) if !h.name.is_empty() && h.name != "*" => iface_name(&h.name),
        Value::Policy(p) => selector("selector", &p.selector)
            .and_then(|()| {
                if p.order.is_some_and(f64::is_nan) {
                    Err("order is NaN".to_string())
                } else {
                    Ok(())
                }
            })
            .and_then(|()| rules("inbound", &p.inbound_rules))
            .and_then(|()| rules("outbound", &p.outbound_rules)),
        Value::ProfileRules(r) => {
            rules("inbound", &r.inbound_rules).and_then(|()| rules("outbound", &r.outbound_rules))
        }
        _ => Ok(()),
    };
    match check {
        Ok(()) => Checked {
            key,
            value: Some(value),
            invalid: None,
        },
        Err(reason) => bad(key, reason),
    }
}

/// Linux interface names: 1 to 15 bytes, no `/`, whitespace or `:`.
fn iface_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 15 || name == "." || name == ".." {
        return Err(format!(
            "interface name {name:?} is not a valid Linux interface name"
        ));
    }
    if name
        .chars()
        .any(|c| c == '/' || c == ':' || c.is_whitespace() || c.is_control())
    {
        return Err(format!(
            "interface name {name:?} contains a forbidden character"
        ));
    }
    Ok(())
}

fn selector(field: &str, s: &str) -> Result<(), String> {
    Selector::parse(s)
        .map(|_| ())
        .map_err(|e| format!("{field}: {e}"))
}

fn rules(dir: &str, rules: &[Rule]) -> Result<(), String> {
    for (i, r) in rules.iter().enumerate() {
        let at = |f: &str| format!("{dir}[{i}].{f}");
        for (side, e) in [("source", &r.src), ("destination", &r.dst)] {
            selector(&at(&format!("{side}.selector")), &e.selector)?;
            selector(&at(&format!("{side}.notSelector")), &e.not_selector)?;
            let has_ports = !e.ports.is_empty() || !e.not_ports.is_empty();
            if has_ports && !r.protocol.is_some_and(|p| p.has_ports()) {
                return Err(format!(
                    "{}: ports need protocol TCP, UDP, SCTP or UDPLite",
                    at(side)
                ));
            }
            for p in e.ports.iter().chain(&e.not_ports) {
                if let Port::Range { first, last } = p
                    && (first > last || *first == 0)
                {
                    return Err(format!("{}: bad port range {first}:{last}", at(side)));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
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
        assert!(e.reason.contains("inbound[0].source.selector"), "{e}");
        assert!(e.reason.contains("position"), "{e}");
    }

    #[test]
    fn ports_without_a_port_protocol_are_rejected() {
        let mut p = policy("all()", "");
        p.inbound_rules[0].dst.ports = vec![Port::Range {
            first: 80,
            last: 80,
        }];
        let e = validate(&update(p)).invalid.unwrap();
        assert!(e.reason.contains("ports need protocol"), "{e}");
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
        assert!(c.invalid.unwrap().reason.contains("forbidden character"));
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
        assert!(validate(&u).invalid.is_some());
    }
}
