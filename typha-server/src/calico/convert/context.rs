//! What every conversion shares: the [`Cx`] context that names the field being converted,
//! [`ConvertError`], Calico's label names and the parsers for addresses, selectors and protocols.

use std::net::IpAddr;

use ipnet::IpNet;
use typha_protocol::model::{Mac, Protocol};
use typha_protocol::selector::Selector;

use crate::calico::v3::{Kind, ProtocolSpec, ResourceId};

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

/// Conversion context: the resource and the field being converted, for error messages.
pub(super) struct Cx<'a> {
    id: &'a ResourceId,
    field: String,
}

impl<'a> Cx<'a> {
    /// The context of a resource's `spec`.
    pub(super) fn new(id: &'a ResourceId) -> Self {
        Cx {
            id,
            field: String::from("spec"),
        }
    }
}

impl Cx<'_> {
    pub(super) fn at(&self, field: &str) -> Cx<'_> {
        Cx {
            id: self.id,
            field: field.to_owned(),
        }
    }

    pub(super) fn field(&self) -> &str {
        &self.field
    }

    /// The kind of the resource being converted.
    pub(super) fn kind(&self) -> Kind {
        self.id.kind
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

    pub(super) fn nets(&self, field: &str, v: &[String]) -> Result<Vec<IpNet>, ConvertError> {
        v.iter()
            .enumerate()
            .map(|(i, n)| self.at(&format!("{field}[{i}]")).net(n))
            .collect()
    }

    pub(super) fn mac(&self, s: &str) -> Result<Mac, ConvertError> {
        s.parse()
            .map_err(|e: typha_protocol::model::MacParseError| self.err(e.to_string()))
    }

    pub(super) fn selector(&self, s: &str) -> Result<Selector, ConvertError> {
        Selector::parse(s).map_err(|e| self.err(e.to_string()))
    }

    pub(super) fn protocol(&self, p: &ProtocolSpec) -> Result<Protocol, ConvertError> {
        let by_number = |n: u8| match n {
            6 => Protocol::Tcp,
            17 => Protocol::Udp,
            1 => Protocol::Icmp,
            58 => Protocol::IcmpV6,
            132 => Protocol::Sctp,
            136 => Protocol::UdpLite,
            n => Protocol::Number(n),
        };
        match p {
            ProtocolSpec::Number(n) => Ok(by_number(*n)),
            ProtocolSpec::Name(s) => match s.to_ascii_lowercase().as_str() {
                "tcp" => Ok(Protocol::Tcp),
                "udp" => Ok(Protocol::Udp),
                "icmp" => Ok(Protocol::Icmp),
                "icmpv6" => Ok(Protocol::IcmpV6),
                "sctp" => Ok(Protocol::Sctp),
                "udplite" => Ok(Protocol::UdpLite),
                other => other
                    .parse::<u8>()
                    .map(by_number)
                    .map_err(|_| self.err(format!("unknown protocol {s:?}"))),
            },
        }
    }
}

/// An empty string as "not set".
pub(super) fn opt(s: &str) -> Option<&str> {
    (!s.is_empty()).then_some(s)
}
