//! Policy rules, mirroring Calico's `model.Rule` with typed fields.

use std::collections::BTreeMap;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

/// What a rule does with a matching packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Action {
    /// Accept the packet.
    Allow,
    /// Drop the packet.
    Deny,
    /// Log the packet and continue with the next rule.
    Log,
    /// Skip the rest of this tier's policies.
    Pass,
}

/// IP protocol of a rule: a well-known name or a number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Protocol {
    /// TCP (6).
    Tcp,
    /// UDP (17).
    Udp,
    /// ICMP (1).
    Icmp,
    /// ICMPv6 (58).
    IcmpV6,
    /// SCTP (132).
    Sctp,
    /// UDP-Lite (136).
    UdpLite,
    /// Any other protocol, by number.
    Number(u8),
}

impl Protocol {
    /// The IANA protocol number.
    pub fn number(self) -> u8 {
        match self {
            Protocol::Tcp => 6,
            Protocol::Udp => 17,
            Protocol::Icmp => 1,
            Protocol::IcmpV6 => 58,
            Protocol::Sctp => 132,
            Protocol::UdpLite => 136,
            Protocol::Number(n) => n,
        }
    }

    /// Whether rules with this protocol may match port numbers: TCP, UDP and SCTP, as
    /// Calico's `SupportsPorts` says (not UDP-Lite, although it has ports: Calico's validator
    /// refuses a rule that gives it ports, and Felix never sees one).
    pub fn has_ports(self) -> bool {
        matches!(self, Protocol::Tcp | Protocol::Udp | Protocol::Sctp)
    }
}

/// A port match: an inclusive range, or a named port resolved per endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Port {
    /// `first..=last`; a single port has `first == last`.
    Range {
        /// First port in the range.
        first: u16,
        /// Last port in the range (inclusive).
        last: u16,
    },
    /// A named port (`http`), looked up in each endpoint's `ports`.
    Named(String),
}

/// An ICMP type and optional code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Icmp {
    /// ICMP type, 0-254.
    pub icmp_type: u8,
    /// ICMP code, if matched.
    pub code: Option<u8>,
}

/// A Kubernetes Service a rule refers to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ServiceMatch {
    /// Service name.
    pub name: String,
    /// Service namespace.
    pub namespace: String,
}

/// The source or destination half of a rule. Empty fields match everything.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct EntityRule {
    /// Match if the address is in any of these networks.
    pub nets: Vec<IpNet>,
    /// Selector over endpoint labels (namespace selection already folded in).
    pub selector: String,
    /// Namespace selector as written in the v3 resource (informational).
    pub namespace_selector: String,
    /// Port matches.
    pub ports: Vec<Port>,
    /// Match endpoints running as these service accounts.
    pub service_account_names: Vec<String>,
    /// Match endpoints whose service account matches this selector.
    pub service_account_selector: String,
    /// Match a Kubernetes Service's endpoints.
    pub service: Option<ServiceMatch>,
    /// Match unless the address is in one of these networks.
    pub not_nets: Vec<IpNet>,
    /// Match unless the endpoint matches this selector.
    pub not_selector: String,
    /// Match unless the port is one of these.
    pub not_ports: Vec<Port>,
}

/// An HTTP match (application layer; carried for fidelity, not enforced by iptables).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct HttpMatch {
    /// HTTP methods.
    pub methods: Vec<String>,
    /// Path prefixes or exact paths.
    pub paths: Vec<String>,
}

/// One policy or profile rule.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Rule {
    /// What to do on a match.
    pub action: Action,
    /// Restrict to IPv4 (4) or IPv6 (6).
    pub ip_version: Option<u8>,
    /// Match this protocol.
    pub protocol: Option<Protocol>,
    /// Match any protocol but this one.
    pub not_protocol: Option<Protocol>,
    /// Match this ICMP type/code.
    pub icmp: Option<Icmp>,
    /// Match anything but this ICMP type/code.
    pub not_icmp: Option<Icmp>,
    /// Source match.
    pub src: EntityRule,
    /// Destination match.
    pub dst: EntityRule,
    /// HTTP match.
    pub http: Option<HttpMatch>,
    /// What Calico carries with the rule beyond the match, for a Calico client to be sent
    /// exactly what Calico sends. Not part of the version 1 encoding: it travels in its
    /// policy's or profile's tail ([`RuleDetail`]).
    #[serde(skip)]
    pub detail: RuleDetail,
}

/// What Calico's syncers carry with a rule that does not change what it matches, but that
/// Felix writes into its dataplane or hashes into the rule's id, so a Felix fed by us programs
/// the same text as one fed by Calico's Typha.
///
/// On the wire it is part of the tail of the policy or profile that holds the rule
/// (docs/protocol.md, "Compatibility rules" 4): one per rule, inbound then outbound, written
/// only when one of them is set. A decoder that predates it ignores it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RuleDetail {
    /// `orig_src_selector`: the v3 rule's `source.selector` as written (the rule's
    /// `src.selector` is the namespace-scoped composition Calico makes of it).
    pub orig_src_selector: String,
    /// `orig_dst_selector`: the same for the destination.
    pub orig_dst_selector: String,
    /// The rule's `protocol` was given as a number (`6`, `"6"`): Calico keeps a number a
    /// number (Felix renders `-p 6`), where [`Rule::protocol`] holds the protocol it names.
    pub protocol_number: bool,
    /// The same for `notProtocol`.
    pub not_protocol_number: bool,
    /// The rule's `metadata.annotations` (Felix writes each as an iptables comment
    /// `key=value`; a Kubernetes ClusterNetworkPolicy's rule name is one).
    pub annotations: BTreeMap<String, String>,
}

impl RuleDetail {
    /// Whether nothing is set.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// The tail of a policy or a profile's rules: each rule's [`RuleDetail`], inbound then
/// outbound; none when every one is empty.
pub(super) fn encode_rules_tail<'a>(
    rules: impl Iterator<Item = &'a Rule> + Clone,
    out: Vec<u8>,
) -> Result<Vec<u8>, postcard::Error> {
    if rules.clone().all(|r| r.detail.is_empty()) {
        return Ok(out);
    }
    let details: Vec<&RuleDetail> = rules.map(|r| &r.detail).collect();
    postcard::to_extend(&details, out)
}

/// Reads [`encode_rules_tail`]'s tail into `rules` (in the same order). A tail that holds a
/// different number of details than there are rules is an error.
pub(super) fn decode_rules_tail(
    rules: Vec<&mut Rule>,
    bytes: &[u8],
) -> Result<(), postcard::Error> {
    let (details, _) = postcard::take_from_bytes::<Vec<RuleDetail>>(bytes)?;
    if details.len() != rules.len() {
        return Err(postcard::Error::DeserializeBadEncoding);
    }
    for (r, d) in rules.into_iter().zip(details) {
        r.detail = d;
    }
    Ok(())
}

impl Rule {
    /// A rule that matches everything and applies `action`.
    pub fn new(action: Action) -> Self {
        Self {
            action,
            ip_version: None,
            protocol: None,
            not_protocol: None,
            icmp: None,
            not_icmp: None,
            src: EntityRule::default(),
            dst: EntityRule::default(),
            http: None,
            detail: RuleDetail::default(),
        }
    }
}
