//! Policy and profile specs, and the rules they hold (ports, protocols, ICMP, entities).

use serde::{Deserialize, Serialize};

use super::strmap::StrMap;

/// A port: a number, a `first:last` range, or a name. Written as a number or a string.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PortSpec {
    /// A single port number.
    Number(u16),
    /// `"80"`, `"80:90"` or a port name.
    Text(String),
}

/// A protocol: a name (`TCP`, `UDP`, `ICMP`, `ICMPv6`, `SCTP`, `UDPLite`) or a number.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ProtocolSpec {
    /// By number.
    Number(u8),
    /// By name.
    Name(String),
}

/// ICMP match.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct IcmpSpec {
    /// ICMP type.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub icmp_type: Option<u16>,
    /// ICMP code.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<u16>,
}

/// Service accounts a rule matches.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ServiceAccountMatch {
    /// Names.
    pub names: Vec<String>,
    /// Label selector.
    pub selector: String,
}

/// A Kubernetes Service a rule matches.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ServiceSpec {
    /// Name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
}

/// Source or destination of a rule.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct EntityRuleSpec {
    /// CIDRs.
    pub nets: Vec<String>,
    /// Excluded CIDRs.
    pub not_nets: Vec<String>,
    /// Endpoint selector.
    pub selector: String,
    /// Excluded endpoints.
    pub not_selector: String,
    /// Namespace selector.
    pub namespace_selector: String,
    /// Ports.
    pub ports: Vec<PortSpec>,
    /// Excluded ports.
    pub not_ports: Vec<PortSpec>,
    /// Service accounts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_accounts: Option<ServiceAccountMatch>,
    /// A Kubernetes Service.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub services: Option<ServiceSpec>,
}

/// HTTP path match.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct HttpPathSpec {
    /// Exact path.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exact: Option<String>,
    /// Path prefix.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
}

/// HTTP match.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct HttpSpec {
    /// Methods.
    pub methods: Vec<String>,
    /// Paths.
    pub paths: Vec<HttpPathSpec>,
}

/// A rule action as written: `Allow`, `Deny`, `Log` or `Pass`. Calico's syncers lower-case
/// whatever is written; the conversion takes these four in any case and refuses the rest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ActionSpec(pub String);

/// A policy or profile rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuleSpec {
    /// Action.
    pub action: ActionSpec,
    /// 4 or 6.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_version: Option<u8>,
    /// Protocol.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<ProtocolSpec>,
    /// Excluded protocol.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_protocol: Option<ProtocolSpec>,
    /// ICMP match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icmp: Option<IcmpSpec>,
    /// Excluded ICMP.
    #[serde(default, rename = "notICMP", skip_serializing_if = "Option::is_none")]
    pub not_icmp: Option<IcmpSpec>,
    /// Source.
    #[serde(default)]
    pub source: EntityRuleSpec,
    /// Destination.
    #[serde(default)]
    pub destination: EntityRuleSpec,
    /// HTTP match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpSpec>,
    /// Metadata: annotations Calico passes to Felix, which writes each as a comment on the
    /// rule's iptables lines (a Kubernetes ClusterNetworkPolicy's rule name is one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<RuleMetadataSpec>,
}

/// A rule's `metadata`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RuleMetadataSpec {
    /// Annotations.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub annotations: std::collections::BTreeMap<String, String>,
}

/// NetworkPolicy / GlobalNetworkPolicy spec.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PolicySpec {
    /// Tier (default `default`). Left out when empty, as Go's `omitempty` does.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub tier: String,
    /// Order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub order: Option<f64>,
    /// Endpoint selector.
    pub selector: String,
    /// Namespace selector (global policies).
    pub namespace_selector: String,
    /// Service-account selector.
    pub service_account_selector: String,
    /// `Ingress` and/or `Egress`. Left out when empty, as Go's `omitempty` does (Calico's
    /// v3.32 CRDs refuse an empty list).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub types: Vec<String>,
    /// Ingress rules.
    pub ingress: Vec<RuleSpec>,
    /// Egress rules.
    pub egress: Vec<RuleSpec>,
    /// Untracked.
    pub do_not_track: bool,
    /// Pre-DNAT.
    #[serde(rename = "preDNAT")]
    pub pre_dnat: bool,
    /// Apply on forwarded traffic.
    pub apply_on_forward: bool,
    /// Performance hints.
    pub performance_hints: Vec<String>,
}

/// What a staged policy would do once enforced (`stagedAction`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum StagedAction {
    /// Create the policy, or replace the enforced one of the same name.
    Set,
    /// Delete the enforced policy of the same name: Calico sends no policy for it.
    Delete,
    /// Learn (Calico Enterprise); sent as it is.
    Learn,
    /// Ignore (Calico Enterprise); sent as it is.
    Ignore,
    /// Any other text (Calico's validator refuses it when the policy is written; its syncers
    /// pass it on as they pass `Set`).
    #[serde(untagged)]
    Other(String),
}

impl StagedAction {
    /// As written in manifests and in the felix syncer's `staged_action`.
    pub fn as_str(&self) -> &str {
        match self {
            StagedAction::Set => "Set",
            StagedAction::Delete => "Delete",
            StagedAction::Learn => "Learn",
            StagedAction::Ignore => "Ignore",
            StagedAction::Other(s) => s,
        }
    }
}

/// StagedNetworkPolicy / StagedGlobalNetworkPolicy spec: the fields of the policy it stages,
/// and its `stagedAction` (absent or `""`: none given; the Kubernetes CRD defaults it to `Set`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StagedPolicySpec {
    /// The staged action.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "staged_action"
    )]
    pub staged_action: Option<StagedAction>,
    /// The policy's own fields.
    #[serde(flatten)]
    pub policy: PolicySpec,
}

/// StagedKubernetesNetworkPolicy spec: a Kubernetes NetworkPolicy's spec (`podSelector`,
/// `ingress`, `egress`, `policyTypes`), kept as written and converted as Calico converts a
/// Kubernetes NetworkPolicy ([`super::k8s_policy::calico_spec`]), and its `stagedAction`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StagedKubernetesPolicySpec {
    /// The staged action.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "staged_action"
    )]
    pub staged_action: Option<StagedAction>,
    /// The NetworkPolicy's spec fields.
    #[serde(flatten)]
    pub network_policy: serde_json::Map<String, serde_json::Value>,
}

/// `stagedAction`: `null` and `""` are none given (Go's `omitempty` string).
fn staged_action<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<StagedAction>, D::Error> {
    match Option::<String>::deserialize(d)?.as_deref() {
        None | Some("") => Ok(None),
        Some(s) => StagedAction::deserialize(serde::de::value::StrDeserializer::new(s)).map(Some),
    }
}

/// Profile spec.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ProfileSpec {
    /// Ingress rules.
    pub ingress: Vec<RuleSpec>,
    /// Egress rules.
    pub egress: Vec<RuleSpec>,
    /// Labels given to endpoints that use this profile.
    pub labels_to_apply: StrMap,
}

/// Tier spec: where the tier's policies sit among the others, and what happens to traffic no
/// policy of the tier decides (`Deny`, or `Pass` to the next tier). Calico creates `default`
/// (Deny), `kube-admin` and `kube-baseline` (Pass) when it initializes a datastore.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TierSpec {
    /// Order: lower first; none is last.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub order: Option<f64>,
    /// `Deny` (Calico's default) or `Pass`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_action: Option<String>,
}
