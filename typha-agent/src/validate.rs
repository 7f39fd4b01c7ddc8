//! Validation: the gate between the stream and the calc graph.
//!
//! As in Felix, a value that fails validation is treated as a deletion of its key: the calc
//! graph never sees half-understood data, and whatever the key held before is withdrawn. The
//! agent logs each rejection with the key and the reason and counts it.

use typha_protocol::model::{Key, Port, Rule, Update, Value, ValueError};
use typha_protocol::selector::{Selector, SelectorError};

/// Why an update was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {reason}")]
pub struct Invalid {
    /// The key.
    pub key: String,
    /// What is wrong.
    #[source]
    pub reason: InvalidValue,
}

/// What is wrong with a value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidValue {
    /// The bytes do not decode, or decode to a value of another type than the key's.
    #[error("{0}")]
    Undecodable(#[source] ValueError),
    /// An interface name that Linux would refuse (empty, longer than 15 bytes, `.`, `..`).
    #[error("interface name {0:?} is not a valid Linux interface name")]
    InterfaceName(String),
    /// An interface name with a `/`, `:`, whitespace or a control character (it goes into
    /// iptables rules).
    #[error("interface name {0:?} contains a forbidden character")]
    InterfaceCharacter(String),
    /// A workload endpoint without any address.
    #[error("no IP addresses")]
    NoAddresses,
    /// A policy whose order is NaN.
    #[error("order is NaN")]
    OrderNaN,
    /// A selector that does not parse.
    #[error("{field}: {source}")]
    Selector {
        /// Where: `selector`, `inbound[0].source.notSelector`, ...
        field: String,
        /// Why it does not parse.
        source: SelectorError,
    },
    /// Port numbers in a rule whose protocol has none (or without a protocol).
    #[error("{side}: ports need protocol TCP, UDP or SCTP")]
    PortsWithoutProtocol {
        /// Where: `inbound[0].destination`, ...
        side: String,
    },
    /// A port range that is empty or starts at 0.
    #[error("{side}: bad port range {first}:{last}")]
    PortRange {
        /// Where: `inbound[0].destination`, ...
        side: String,
        /// First port.
        first: u16,
        /// Last port.
        last: u16,
    },
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
    let bad = |key: Key, reason: InvalidValue| Checked {
        invalid: Some(Invalid {
            key: key.to_string(),
            reason,
        }),
        key,
        value: None,
    };
    let value = match u.decode_value() {
        Ok(v) => v,
        Err(e) => return bad(key, InvalidValue::Undecodable(e)),
    };
    let Some(value) = value else {
        return Checked {
            key,
            value: None,
            invalid: None,
        };
    };
    let check = match &value {
        Value::WorkloadEndpoint(w) => {
            iface_name(&w.name).and(if w.ipv4_nets.is_empty() && w.ipv6_nets.is_empty() {
                Err(InvalidValue::NoAddresses)
            } else {
                Ok(())
            })
        }
        // A host endpoint names its interface, or none (by address), or `*` (all); the name
        // goes into iptables rules, so anything else is refused.
        Value::HostEndpoint(h) if !h.name.is_empty() && h.name != "*" => iface_name(&h.name),
        Value::Policy(p) => selector("selector", &p.selector)
            .and(if p.order.is_some_and(f64::is_nan) {
                Err(InvalidValue::OrderNaN)
            } else {
                Ok(())
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
fn iface_name(name: &str) -> Result<(), InvalidValue> {
    if name.is_empty() || name.len() > 15 || name == "." || name == ".." {
        return Err(InvalidValue::InterfaceName(name.to_owned()));
    }
    if name
        .chars()
        .any(|c| c == '/' || c == ':' || c.is_whitespace() || c.is_control())
    {
        return Err(InvalidValue::InterfaceCharacter(name.to_owned()));
    }
    Ok(())
}

fn selector(field: &str, s: &str) -> Result<(), InvalidValue> {
    Selector::parse(s)
        .map(|_| ())
        .map_err(|source| InvalidValue::Selector {
            field: field.to_owned(),
            source,
        })
}

fn rules(dir: &str, rules: &[Rule]) -> Result<(), InvalidValue> {
    for (i, r) in rules.iter().enumerate() {
        let at = |f: &str| format!("{dir}[{i}].{f}");
        for (side, e) in [("source", &r.src), ("destination", &r.dst)] {
            selector(&at(&format!("{side}.selector")), &e.selector)?;
            selector(&at(&format!("{side}.notSelector")), &e.not_selector)?;
            let has_ports = !e.ports.is_empty() || !e.not_ports.is_empty();
            // Named ports alone need no protocol: they match the name's port of any protocol
            // (as Felix does; Calico's ClusterNetworkPolicies give them so).
            let named_only = r.protocol.is_none()
                && e.ports
                    .iter()
                    .chain(&e.not_ports)
                    .all(|p| matches!(p, Port::Named(_)));
            if has_ports && !named_only && !r.protocol.is_some_and(|p| p.has_ports()) {
                return Err(InvalidValue::PortsWithoutProtocol { side: at(side) });
            }
            for p in e.ports.iter().chain(&e.not_ports) {
                if let Port::Range { first, last } = p
                    && (first > last || *first == 0)
                {
                    return Err(InvalidValue::PortRange {
                        side: at(side),
                        first: *first,
                        last: *last,
                    });
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
