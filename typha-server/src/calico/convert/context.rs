//! What every conversion shares: the [`Cx`] context that names the field being converted,
//! [`ConvertError`], the [`Note`]s of what a conversion left out, Calico's label names and the
//! parsers for addresses, selectors and protocols.

use std::cell::RefCell;
use std::net::IpAddr;

use ipnet::IpNet;
use typha_protocol::model::{Mac, Protocol};
use typha_protocol::selector::Selector;

use crate::calico::v3::{ProtocolSpec, ResourceId};

/// Calico's label for the orchestrator of a workload.
pub const ORCHESTRATOR_LABEL: &str = "projectcalico.org/orchestrator";
/// Calico's label for the service account of a workload.
pub const SERVICE_ACCOUNT_LABEL: &str = "projectcalico.org/serviceaccount";

/// A resource that cannot be converted: which one, which field, why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{id}: {field}: {reason}")]
pub struct ConvertError {
    /// The resource.
    pub id: ResourceId,
    /// The offending field (`spec.ingress[0].destination.ports[1]`).
    pub field: String,
    /// What is wrong.
    pub reason: String,
}

/// Something a conversion left out or read leniently where Calico's syncers do the same (an
/// entry skipped, a field ignored, one of the resource's KVs left out), and that Calico's API
/// refuses when the resource is written. The pipeline logs each; the embedded store refuses a
/// write that gives any ([`super::accept_write`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// The field (`spec.nets[1]`).
    pub field: String,
    /// What is wrong with it and what was done.
    pub reason: String,
    /// Whether the rest of the KV it belongs to was sent.
    pub effect: Effect,
}

/// What a [`Note`] did to the resource's KVs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// The entry or field was left out (or read as its default); its KV was sent with the rest.
    Skipped,
    /// One of the resource's KVs was left out (sent as a deletion) as invalid; the others were
    /// sent. Counted as an invalid value, as a KV that fails validation is.
    Dropped,
    /// The field was sent as written, as Calico's syncers send it, although Calico's API
    /// refuses it (an ICMP match on TCP). Logged at debug only.
    Passed,
}

/// Conversion context: the resource and the field being converted, for error messages, and
/// where the conversion notes what it leaves out.
pub(super) struct Cx<'a> {
    id: &'a ResourceId,
    field: String,
    notes: &'a RefCell<Vec<Note>>,
}

impl<'a> Cx<'a> {
    /// The context of a resource's `spec`, noting into `notes`.
    pub(super) fn new(id: &'a ResourceId, notes: &'a RefCell<Vec<Note>>) -> Self {
        Cx {
            id,
            field: String::from("spec"),
            notes,
        }
    }
}

impl Cx<'_> {
    pub(super) fn at(&self, field: &str) -> Cx<'_> {
        Cx {
            id: self.id,
            field: field.to_owned(),
            notes: self.notes,
        }
    }

    /// Notes that this field was left out or read leniently, the rest kept.
    pub(super) fn skip(&self, reason: impl Into<String>) {
        self.note(reason, Effect::Skipped);
    }

    /// Notes that this field was passed on as written although Calico's API refuses it.
    pub(super) fn pass(&self, reason: impl Into<String>) {
        self.note(reason, Effect::Passed);
    }

    /// Notes that a KV of the resource was left out as invalid, the others kept.
    pub(super) fn drop_kv(&self, e: &ConvertError) {
        self.notes.borrow_mut().push(Note {
            field: e.field.clone(),
            reason: e.reason.clone(),
            effect: Effect::Dropped,
        });
    }

    fn note(&self, reason: impl Into<String>, effect: Effect) {
        self.notes.borrow_mut().push(Note {
            field: self.field.clone(),
            reason: reason.into(),
            effect,
        });
    }

    pub(super) fn field(&self) -> &str {
        &self.field
    }

    pub(super) fn err(&self, reason: impl Into<String>) -> ConvertError {
        ConvertError {
            id: self.id.clone(),
            field: self.field.clone(),
            reason: reason.into(),
        }
    }

    /// The resource's namespace (empty for cluster-wide kinds).
    pub(super) fn namespace(&self) -> Result<String, ConvertError> {
        let ns = self.id.namespace.clone().unwrap_or_default();
        // Namespaces end up inside selectors the agents parse; the selector language has no
        // escapes, so a quote here could change what a selector means.
        if ns.contains(['\'', '"']) {
            return Err(self.at("metadata.namespace").err("must not contain quotes"));
        }
        Ok(ns)
    }

    pub(super) fn require(&self, field: &str, v: &str) -> Result<(), ConvertError> {
        if v.is_empty() {
            Err(self.at(field).err("required"))
        } else {
            Ok(())
        }
    }

    pub(super) fn ip(&self, s: &str) -> Result<IpAddr, ConvertError> {
        s.parse()
            .map_err(|_| self.err(format!("{s:?} is not an IP address")))
    }

    /// A CIDR or bare address, masked to its network (Calico masks).
    pub(super) fn net(&self, s: &str) -> Result<IpNet, ConvertError> {
        Ok(self.iface_net(s)?.trunc())
    }

    /// A CIDR or bare address, host bits kept (node addresses).
    pub(super) fn iface_net(&self, s: &str) -> Result<IpNet, ConvertError> {
        if let Ok(n) = s.parse::<IpNet>() {
            return Ok(n);
        }
        match s.parse::<IpAddr>() {
            Ok(a) => Ok(IpNet::from(a)),
            Err(_) => Err(self.err(format!("{s:?} is not a CIDR or IP address"))),
        }
    }

    /// The networks of a list at `field`, masked; an entry that is not a CIDR or an address is
    /// skipped (noted), as Calico's processors skip it.
    pub(super) fn nets(&self, field: &str, v: &[String]) -> Vec<IpNet> {
        v.iter()
            .enumerate()
            .filter_map(|(i, n)| {
                let c = self.at(&format!("{field}[{i}]"));
                c.net(n)
                    .map_err(|e| c.skip(format!("{}; skipped", e.reason)))
                    .ok()
            })
            .collect()
    }

    pub(super) fn mac(&self, s: &str) -> Result<Mac, ConvertError> {
        s.parse()
            .map_err(|e: typha_protocol::model::MacParseError| self.err(e.to_string()))
    }

    pub(super) fn selector(&self, s: &str) -> Result<Selector, ConvertError> {
        Selector::parse(s).map_err(|e| self.err(e.to_string()))
    }

    /// A protocol. As Calico's `numorstring.Protocol` reads it, a string of decimal digits
    /// that fits a byte (`"6"`) is a number ([`given_as_number`]); a name is matched without
    /// case (Calico lower-cases it). Calico's validator refuses the number 0 and any other
    /// name, and so do we.
    pub(super) fn protocol(&self, p: &ProtocolSpec) -> Result<Protocol, ConvertError> {
        if let Some(n) = number(p) {
            return match n {
                0 => Err(self.err("protocol number 0 is not a protocol")),
                6 => Ok(Protocol::Tcp),
                17 => Ok(Protocol::Udp),
                1 => Ok(Protocol::Icmp),
                58 => Ok(Protocol::IcmpV6),
                132 => Ok(Protocol::Sctp),
                136 => Ok(Protocol::UdpLite),
                n => Ok(Protocol::Number(n)),
            };
        }
        // A number was read above.
        let name = match p {
            ProtocolSpec::Name(s) => s.as_str(),
            ProtocolSpec::Number(_) => "",
        };
        match name.to_ascii_lowercase().as_str() {
            "tcp" => Ok(Protocol::Tcp),
            "udp" => Ok(Protocol::Udp),
            "icmp" => Ok(Protocol::Icmp),
            "icmpv6" => Ok(Protocol::IcmpV6),
            "sctp" => Ok(Protocol::Sctp),
            "udplite" => Ok(Protocol::UdpLite),
            _ => Err(self.err(format!("unknown protocol {name:?}"))),
        }
    }
}

/// The protocol's number when it was given as one: a JSON number, or a string Go's
/// `strconv.ParseUint(s, 10, 8)` reads (digits only: no sign, no space).
fn number(p: &ProtocolSpec) -> Option<u8> {
    match p {
        ProtocolSpec::Number(n) => Some(*n),
        ProtocolSpec::Name(s) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
            s.parse().ok()
        }
        ProtocolSpec::Name(_) => None,
    }
}

/// Whether a protocol was given as a number (`6`, `"6"`): Calico then sends it as a number,
/// where a name is sent lower-cased.
pub(super) fn given_as_number(p: Option<&ProtocolSpec>) -> bool {
    p.and_then(number).is_some()
}

/// An empty string as "not set".
pub(super) fn opt(s: &str) -> Option<&str> {
    (!s.is_empty()).then_some(s)
}
