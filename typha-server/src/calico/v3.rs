//! Calico `projectcalico.org/v3` resources, as they appear in manifests, etcd (JSON) and, after
//! the Kubernetes backend's own conversion, the Kubernetes API.
//!
//! Only the fields the felix syncer uses are modelled; other fields are accepted and ignored,
//! so real Calico manifests load. Parsing checks structure (types, enums); meaning (CIDRs,
//! ports, selectors) is checked by the conversion, which names the field that is wrong.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// The API group and version of Calico resources.
pub const API_VERSION: &str = "projectcalico.org/v3";

/// The resource kinds the server understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Kind {
    /// A pod or other workload interface.
    WorkloadEndpoint,
    /// Namespaced policy.
    NetworkPolicy,
    /// Cluster-wide policy.
    GlobalNetworkPolicy,
    /// `networking.k8s.io/v1` NetworkPolicy, already converted to Calico's form.
    KubernetesNetworkPolicy,
    /// Profile (Kubernetes namespaces and service accounts become profiles).
    Profile,
    /// Namespaced network set.
    NetworkSet,
    /// Cluster-wide network set.
    GlobalNetworkSet,
    /// Host interface under policy.
    HostEndpoint,
    /// IP pool.
    #[serde(rename = "IPPool")]
    IpPool,
    /// IPAM block.
    #[serde(rename = "IPAMBlock")]
    IpamBlock,
    /// IPAM block affinity.
    BlockAffinity,
    /// Node.
    Node,
    /// Felix configuration (`default` or `node.<name>`).
    FelixConfiguration,
    /// Cluster information (`default`).
    ClusterInformation,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 14] = [
        Kind::WorkloadEndpoint,
        Kind::NetworkPolicy,
        Kind::GlobalNetworkPolicy,
        Kind::KubernetesNetworkPolicy,
        Kind::Profile,
        Kind::NetworkSet,
        Kind::GlobalNetworkSet,
        Kind::HostEndpoint,
        Kind::IpPool,
        Kind::IpamBlock,
        Kind::BlockAffinity,
        Kind::Node,
        Kind::FelixConfiguration,
        Kind::ClusterInformation,
    ];

    /// The kind's name as written in manifests.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::WorkloadEndpoint => "WorkloadEndpoint",
            Kind::NetworkPolicy => "NetworkPolicy",
            Kind::GlobalNetworkPolicy => "GlobalNetworkPolicy",
            Kind::KubernetesNetworkPolicy => "KubernetesNetworkPolicy",
            Kind::Profile => "Profile",
            Kind::NetworkSet => "NetworkSet",
            Kind::GlobalNetworkSet => "GlobalNetworkSet",
            Kind::HostEndpoint => "HostEndpoint",
            Kind::IpPool => "IPPool",
            Kind::IpamBlock => "IPAMBlock",
            Kind::BlockAffinity => "BlockAffinity",
            Kind::Node => "Node",
            Kind::FelixConfiguration => "FelixConfiguration",
            Kind::ClusterInformation => "ClusterInformation",
        }
    }

    /// Parses a kind name.
    pub fn from_name(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// Whether resources of this kind live in a namespace.
    pub fn is_namespaced(self) -> bool {
        matches!(
            self,
            Kind::WorkloadEndpoint
                | Kind::NetworkPolicy
                | Kind::KubernetesNetworkPolicy
                | Kind::NetworkSet
        )
    }

    /// The plural used in Calico's etcd paths and Kubernetes URLs.
    pub fn plural(self) -> &'static str {
        match self {
            Kind::WorkloadEndpoint => "workloadendpoints",
            Kind::NetworkPolicy => "networkpolicies",
            Kind::GlobalNetworkPolicy => "globalnetworkpolicies",
            Kind::KubernetesNetworkPolicy => "kubernetesnetworkpolicies",
            Kind::Profile => "profiles",
            Kind::NetworkSet => "networksets",
            Kind::GlobalNetworkSet => "globalnetworksets",
            Kind::HostEndpoint => "hostendpoints",
            Kind::IpPool => "ippools",
            Kind::IpamBlock => "ipamblocks",
            Kind::BlockAffinity => "blockaffinities",
            Kind::Node => "nodes",
            Kind::FelixConfiguration => "felixconfigurations",
            Kind::ClusterInformation => "clusterinformations",
        }
    }

    /// Kind from its plural.
    pub fn from_plural(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.plural() == s)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Identifies a resource: kind, namespace (for namespaced kinds) and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ResourceId {
    /// Kind.
    pub kind: Kind,
    /// Namespace, for namespaced kinds.
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
}

impl ResourceId {
    /// A cluster-wide resource's id.
    pub fn global(kind: Kind, name: impl Into<String>) -> Self {
        Self {
            kind,
            namespace: None,
            name: name.into(),
        }
    }

    /// A namespaced resource's id.
    pub fn namespaced(kind: Kind, namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            kind,
            namespace: Some(namespace.into()),
            name: name.into(),
        }
    }
}

impl fmt::Display for ResourceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {ns}/{}", self.kind, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

/// Object metadata (the parts we use).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ObjectMeta {
    /// Name.
    pub name: String,
    /// Namespace (namespaced kinds).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Labels.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// The datastore's version of this object.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
    /// `generateName` (pods).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub generate_name: String,
}

/// A parsed resource: metadata plus a typed spec.
#[derive(Debug, Clone, PartialEq)]
pub struct Resource {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// The kind-specific part.
    pub spec: Spec,
}

/// The kind-specific part of a resource.
#[derive(Debug, Clone, PartialEq)]
#[allow(missing_docs)]
#[non_exhaustive]
pub enum Spec {
    WorkloadEndpoint(WorkloadEndpointSpec),
    NetworkPolicy(PolicySpec),
    GlobalNetworkPolicy(PolicySpec),
    KubernetesNetworkPolicy(PolicySpec),
    Profile(ProfileSpec),
    NetworkSet(NetworkSetSpec),
    GlobalNetworkSet(NetworkSetSpec),
    HostEndpoint(HostEndpointSpec),
    IpPool(IpPoolSpec),
    IpamBlock(IpamBlockSpec),
    BlockAffinity(BlockAffinitySpec),
    Node(NodeSpec),
    /// Felix configuration fields, kept as JSON: each becomes a config parameter.
    FelixConfiguration(serde_json::Map<String, serde_json::Value>),
    ClusterInformation(ClusterInformationSpec),
}

impl Resource {
    /// The resource's kind.
    pub fn kind(&self) -> Kind {
        match &self.spec {
            Spec::WorkloadEndpoint(_) => Kind::WorkloadEndpoint,
            Spec::NetworkPolicy(_) => Kind::NetworkPolicy,
            Spec::GlobalNetworkPolicy(_) => Kind::GlobalNetworkPolicy,
            Spec::KubernetesNetworkPolicy(_) => Kind::KubernetesNetworkPolicy,
            Spec::Profile(_) => Kind::Profile,
            Spec::NetworkSet(_) => Kind::NetworkSet,
            Spec::GlobalNetworkSet(_) => Kind::GlobalNetworkSet,
            Spec::HostEndpoint(_) => Kind::HostEndpoint,
            Spec::IpPool(_) => Kind::IpPool,
            Spec::IpamBlock(_) => Kind::IpamBlock,
            Spec::BlockAffinity(_) => Kind::BlockAffinity,
            Spec::Node(_) => Kind::Node,
            Spec::FelixConfiguration(_) => Kind::FelixConfiguration,
            Spec::ClusterInformation(_) => Kind::ClusterInformation,
        }
    }

    /// The resource's id.
    pub fn id(&self) -> ResourceId {
        ResourceId {
            kind: self.kind(),
            namespace: self
                .kind()
                .is_namespaced()
                .then(|| self.metadata.namespace.clone().unwrap_or_default()),
            name: self.metadata.name.clone(),
        }
    }

    /// Parses one resource from a JSON value (a YAML document converts to one).
    pub fn from_json(value: serde_json::Value) -> Result<Resource, ParseError> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Envelope {
            #[serde(default)]
            api_version: String,
            #[serde(default)]
            kind: String,
            #[serde(default)]
            metadata: ObjectMeta,
            #[serde(default)]
            spec: serde_json::Value,
        }
        let env: Envelope =
            serde_json::from_value(value).map_err(|e| ParseError::Envelope(e.to_string()))?;
        let kind = Kind::from_name(&env.kind).ok_or_else(|| ParseError::UnknownKind {
            kind: env.kind.clone(),
            name: env.metadata.name.clone(),
        })?;
        if env.api_version != API_VERSION && !env.api_version.starts_with("crd.projectcalico.org/")
        {
            return Err(ParseError::ApiVersion {
                api_version: env.api_version,
                kind,
                name: env.metadata.name,
            });
        }
        if env.metadata.name.is_empty() {
            return Err(ParseError::NoName(kind));
        }
        let mut metadata = env.metadata;
        if kind.is_namespaced() {
            if metadata.namespace.as_deref().unwrap_or_default().is_empty() {
                metadata.namespace = Some("default".into());
            }
        } else {
            metadata.namespace = None;
        }
        let spec_json = if env.spec.is_null() {
            serde_json::Value::Object(Default::default())
        } else {
            env.spec
        };
        let id = ResourceId {
            kind,
            namespace: metadata.namespace.clone(),
            name: metadata.name.clone(),
        };
        let bad = |e: serde_json::Error| ParseError::Spec {
            id: id.clone(),
            reason: e.to_string(),
        };
        let spec = match kind {
            Kind::WorkloadEndpoint => {
                Spec::WorkloadEndpoint(serde_json::from_value(spec_json).map_err(bad)?)
            }
            Kind::NetworkPolicy => {
                Spec::NetworkPolicy(serde_json::from_value(spec_json).map_err(bad)?)
            }
            Kind::GlobalNetworkPolicy => {
                Spec::GlobalNetworkPolicy(serde_json::from_value(spec_json).map_err(bad)?)
            }
            Kind::KubernetesNetworkPolicy => {
                Spec::KubernetesNetworkPolicy(serde_json::from_value(spec_json).map_err(bad)?)
            }
            Kind::Profile => Spec::Profile(serde_json::from_value(spec_json).map_err(bad)?),
            Kind::NetworkSet => Spec::NetworkSet(serde_json::from_value(spec_json).map_err(bad)?),
            Kind::GlobalNetworkSet => {
                Spec::GlobalNetworkSet(serde_json::from_value(spec_json).map_err(bad)?)
            }
            Kind::HostEndpoint => {
                Spec::HostEndpoint(serde_json::from_value(spec_json).map_err(bad)?)
            }
            Kind::IpPool => Spec::IpPool(serde_json::from_value(spec_json).map_err(bad)?),
            Kind::IpamBlock => Spec::IpamBlock(serde_json::from_value(spec_json).map_err(bad)?),
            Kind::BlockAffinity => {
                Spec::BlockAffinity(serde_json::from_value(spec_json).map_err(bad)?)
            }
            Kind::Node => Spec::Node(serde_json::from_value(spec_json).map_err(bad)?),
            Kind::FelixConfiguration => match spec_json {
                serde_json::Value::Object(m) => Spec::FelixConfiguration(m),
                _ => {
                    return Err(ParseError::Spec {
                        id,
                        reason: "spec must be a mapping".into(),
                    });
                }
            },
            Kind::ClusterInformation => {
                Spec::ClusterInformation(serde_json::from_value(spec_json).map_err(bad)?)
            }
        };
        Ok(Resource { metadata, spec })
    }

    /// Parses one resource from JSON text (etcd values).
    pub fn from_json_str(s: &str) -> Result<Resource, ParseError> {
        let v: serde_json::Value =
            serde_json::from_str(s).map_err(|e| ParseError::Envelope(e.to_string()))?;
        Resource::from_json(v)
    }

    /// Serializes back to a JSON value in manifest form (for the etcd backend and tests).
    pub fn to_json(&self) -> serde_json::Value {
        let spec = match &self.spec {
            Spec::WorkloadEndpoint(s) => serde_json::to_value(s),
            Spec::NetworkPolicy(s)
            | Spec::GlobalNetworkPolicy(s)
            | Spec::KubernetesNetworkPolicy(s) => serde_json::to_value(s),
            Spec::Profile(s) => serde_json::to_value(s),
            Spec::NetworkSet(s) | Spec::GlobalNetworkSet(s) => serde_json::to_value(s),
            Spec::HostEndpoint(s) => serde_json::to_value(s),
            Spec::IpPool(s) => serde_json::to_value(s),
            Spec::IpamBlock(s) => serde_json::to_value(s),
            Spec::BlockAffinity(s) => serde_json::to_value(s),
            Spec::Node(s) => serde_json::to_value(s),
            Spec::FelixConfiguration(m) => Ok(serde_json::Value::Object(m.clone())),
            Spec::ClusterInformation(s) => serde_json::to_value(s),
        }
        // Serializing plain data structs to a JSON value cannot fail.
        .unwrap_or_default();
        serde_json::json!({
            "apiVersion": API_VERSION,
            "kind": self.kind().as_str(),
            "metadata": self.metadata,
            "spec": spec,
        })
    }
}

/// A document that is not a resource we can use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseError {
    /// Not an object with apiVersion/kind/metadata/spec.
    #[error("not a Calico resource: {0}")]
    Envelope(String),
    /// A kind we do not serve.
    #[error("unsupported kind {kind:?} (resource {name:?})")]
    UnknownKind {
        /// The kind as written.
        kind: String,
        /// The resource's name.
        name: String,
    },
    /// Wrong apiVersion.
    #[error("{kind} {name}: apiVersion {api_version:?}, expected {API_VERSION}")]
    ApiVersion {
        /// As written.
        api_version: String,
        /// Kind.
        kind: Kind,
        /// Name.
        name: String,
    },
    /// No metadata.name.
    #[error("{0} without metadata.name")]
    NoName(Kind),
    /// The spec does not parse.
    #[error("{id}: invalid spec: {reason}")]
    Spec {
        /// Which resource.
        id: ResourceId,
        /// Why.
        reason: String,
    },
}

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

/// A rule action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub enum ActionSpec {
    Allow,
    Deny,
    Log,
    Pass,
}

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
}

/// NetworkPolicy / GlobalNetworkPolicy spec.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PolicySpec {
    /// Tier (default `default`).
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
    /// `Ingress` and/or `Egress`.
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

/// Profile spec.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ProfileSpec {
    /// Ingress rules.
    pub ingress: Vec<RuleSpec>,
    /// Egress rules.
    pub egress: Vec<RuleSpec>,
    /// Labels given to endpoints that use this profile.
    pub labels_to_apply: BTreeMap<String, String>,
}

/// NetworkSet / GlobalNetworkSet spec.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct NetworkSetSpec {
    /// CIDRs.
    pub nets: Vec<String>,
}

/// A named port on an endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointPortSpec {
    /// Name.
    pub name: String,
    /// Protocol.
    pub protocol: ProtocolSpec,
    /// Port.
    pub port: u16,
}

/// A 1:1 NAT of a workload address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpNatSpec {
    /// Inside address.
    #[serde(rename = "internalIP")]
    pub internal_ip: String,
    /// Outside address.
    #[serde(rename = "externalIP")]
    pub external_ip: String,
}

/// WorkloadEndpoint spec.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct WorkloadEndpointSpec {
    /// Orchestrator (`k8s`).
    pub orchestrator: String,
    /// Workload name (non-Kubernetes orchestrators).
    pub workload: String,
    /// Node.
    pub node: String,
    /// Container id.
    #[serde(rename = "containerID")]
    pub container_id: String,
    /// Pod name (Kubernetes).
    pub pod: String,
    /// Endpoint name (`eth0`).
    pub endpoint: String,
    /// Service account.
    pub service_account_name: String,
    /// Addresses.
    pub ip_networks: Vec<String>,
    /// 1:1 NATs.
    #[serde(rename = "ipNATs")]
    pub ip_nats: Vec<IpNatSpec>,
    /// IPv4 gateway.
    #[serde(rename = "ipv4Gateway")]
    pub ipv4_gateway: String,
    /// IPv6 gateway.
    #[serde(rename = "ipv6Gateway")]
    pub ipv6_gateway: String,
    /// Profiles.
    pub profiles: Vec<String>,
    /// Host-side interface.
    pub interface_name: String,
    /// MAC address.
    pub mac: String,
    /// Named ports.
    pub ports: Vec<EndpointPortSpec>,
    /// Source prefixes the workload may spoof.
    pub allow_spoofed_source_prefixes: Vec<String>,
}

/// HostEndpoint spec.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HostEndpointSpec {
    /// Node.
    pub node: String,
    /// Interface (empty: by address; `*`: all).
    pub interface_name: String,
    /// Expected addresses.
    #[serde(rename = "expectedIPs")]
    pub expected_ips: Vec<String>,
    /// Profiles.
    pub profiles: Vec<String>,
    /// Named ports.
    pub ports: Vec<EndpointPortSpec>,
}

/// IPPool spec.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct IpPoolSpec {
    /// CIDR.
    pub cidr: String,
    /// `Always`, `CrossSubnet` or `Never` (default).
    #[serde(rename = "ipipMode")]
    pub ipip_mode: String,
    /// `Always`, `CrossSubnet` or `Never` (default).
    #[serde(rename = "vxlanMode")]
    pub vxlan_mode: String,
    /// Masquerade outgoing traffic.
    pub nat_outgoing: bool,
    /// No new allocations.
    pub disabled: bool,
    /// Not exported over BGP.
    #[serde(rename = "disableBGPExport")]
    pub disable_bgp_export: bool,
    /// Block size.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub block_size: Option<u8>,
}

/// IPAMBlock spec.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct IpamBlockSpec {
    /// CIDR.
    pub cidr: String,
    /// `host:<node>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub affinity: Option<String>,
    /// One entry per address: the attribute index when allocated.
    pub allocations: Vec<Option<u32>>,
    /// Being deleted.
    pub deleted: bool,
}

/// BlockAffinity spec.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct BlockAffinitySpec {
    /// `confirmed`, `pending`, `pendingDeletion`.
    pub state: String,
    /// Node.
    pub node: String,
    /// Block CIDR.
    pub cidr: String,
    /// Being deleted (`"true"`/`"false"` in Calico's CRD, or a bool).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deleted: Option<serde_json::Value>,
}

/// Node BGP settings.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct NodeBgpSpec {
    /// IPv4 address with prefix (`10.0.0.5/24`).
    #[serde(rename = "ipv4Address")]
    pub ipv4_address: String,
    /// IPv6 address with prefix.
    #[serde(rename = "ipv6Address")]
    pub ipv6_address: String,
    /// IP-in-IP tunnel address.
    #[serde(rename = "ipv4IPIPTunnelAddr")]
    pub ipv4_ipip_tunnel_addr: String,
    /// AS number.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub as_number: Option<u32>,
}

/// A node address.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeAddressSpec {
    /// Address (may carry a prefix).
    pub address: String,
    /// `InternalIP`, `ExternalIP`, `CalicoNodeIP`.
    #[serde(rename = "type")]
    pub address_type: String,
}

/// Node spec.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct NodeSpec {
    /// BGP settings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bgp: Option<NodeBgpSpec>,
    /// VXLAN tunnel address.
    #[serde(rename = "ipv4VXLANTunnelAddr")]
    pub ipv4_vxlan_tunnel_addr: String,
    /// VXLAN tunnel MAC.
    #[serde(rename = "vxlanTunnelMACAddr")]
    pub vxlan_tunnel_mac_addr: String,
    /// Node addresses.
    pub addresses: Vec<NodeAddressSpec>,
}

/// ClusterInformation spec.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ClusterInformationSpec {
    /// Cluster GUID.
    #[serde(rename = "clusterGUID")]
    pub cluster_guid: String,
    /// Cluster type.
    pub cluster_type: String,
    /// Calico version.
    pub calico_version: String,
    /// Whether the datastore is ready for use.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub datastore_ready: Option<bool>,
}

/// Parses a YAML stream (one or more `---` documents, or a `List`) into JSON values, one per
/// resource; empty documents are skipped.
pub fn yaml_documents(text: &str) -> Result<Vec<serde_json::Value>, String> {
    let mut out = Vec::new();
    for doc in serde_norway::Deserializer::from_str(text) {
        let v = serde_json::Value::deserialize(doc).map_err(|e| e.to_string())?;
        match v {
            serde_json::Value::Null => {}
            serde_json::Value::Object(ref m)
                if m.get("kind")
                    .and_then(|k| k.as_str())
                    .is_some_and(|k| k.ends_with("List")) =>
            {
                if let Some(items) = m.get("items").and_then(|i| i.as_array()) {
                    out.extend(items.iter().cloned());
                }
            }
            other => out.push(other),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
