//! A parsed resource: [`ObjectMeta`] plus a typed [`Spec`], parsed from and written back to
//! its JSON manifest form, and the [`ParseError`] for documents that are not one.

use serde::{Deserialize, Serialize};

use super::strmap::StrMap;

use super::bgp::{BgpConfigurationSpec, BgpFilterSpec, BgpPeerSpec, CalicoNodeStatusSpec};
use super::endpoint::{HostEndpointSpec, WorkloadEndpointSpec};
use super::id::{API_VERSION, Kind, ResourceId};
use super::migration::LiveMigrationSpec;
use super::network::{
    BlockAffinitySpec, ClusterInformationSpec, IpPoolSpec, IpamBlockSpec, NetworkSetSpec, NodeSpec,
    NodeStatusSpec,
};
use super::policy::{
    PolicySpec, ProfileSpec, StagedKubernetesPolicySpec, StagedPolicySpec, TierSpec,
};

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
    #[serde(skip_serializing_if = "StrMap::is_empty")]
    pub labels: StrMap,
    /// Annotations.
    #[serde(skip_serializing_if = "StrMap::is_empty")]
    pub annotations: StrMap,
    /// `uid`: the datastore's identity of this object (kept for LiveMigrations, whose uid
    /// Felix reads).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
    /// `creationTimestamp` as written (RFC 3339); `None` for Go's `null`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub creation_timestamp: Option<String>,
    /// The datastore's version of this object.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
    /// `generateName` (pods).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub generate_name: String,
    /// `generation`: raised by the Kubernetes API server on each change of the spec.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
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
    StagedNetworkPolicy(StagedPolicySpec),
    StagedGlobalNetworkPolicy(StagedPolicySpec),
    StagedKubernetesNetworkPolicy(StagedKubernetesPolicySpec),
    KubernetesClusterNetworkPolicy(PolicySpec),
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
    Tier(TierSpec),
    BgpConfiguration(BgpConfigurationSpec),
    BgpPeer(BgpPeerSpec),
    BgpFilter(BgpFilterSpec),
    CalicoNodeStatus(CalicoNodeStatusSpec),
    LiveMigration(LiveMigrationSpec),
    /// A Service's `spec`, as the API server wrote it.
    KubernetesService(serde_json::Value),
    /// An EndpointSlice's `addressType`, `endpoints` and `ports` (it has no spec), as an object.
    KubernetesEndpointSlice(serde_json::Value),
}

impl Resource {
    /// The resource's kind.
    pub fn kind(&self) -> Kind {
        match &self.spec {
            Spec::WorkloadEndpoint(_) => Kind::WorkloadEndpoint,
            Spec::NetworkPolicy(_) => Kind::NetworkPolicy,
            Spec::GlobalNetworkPolicy(_) => Kind::GlobalNetworkPolicy,
            Spec::KubernetesNetworkPolicy(_) => Kind::KubernetesNetworkPolicy,
            Spec::StagedNetworkPolicy(_) => Kind::StagedNetworkPolicy,
            Spec::StagedGlobalNetworkPolicy(_) => Kind::StagedGlobalNetworkPolicy,
            Spec::StagedKubernetesNetworkPolicy(_) => Kind::StagedKubernetesNetworkPolicy,
            Spec::KubernetesClusterNetworkPolicy(_) => Kind::KubernetesClusterNetworkPolicy,
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
            Spec::Tier(_) => Kind::Tier,
            Spec::BgpConfiguration(_) => Kind::BgpConfiguration,
            Spec::BgpPeer(_) => Kind::BgpPeer,
            Spec::BgpFilter(_) => Kind::BgpFilter,
            Spec::CalicoNodeStatus(_) => Kind::CalicoNodeStatus,
            Spec::LiveMigration(_) => Kind::LiveMigration,
            Spec::KubernetesService(_) => Kind::KubernetesService,
            Spec::KubernetesEndpointSlice(_) => Kind::KubernetesEndpointSlice,
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
            /// Read for Node only (its WireGuard keys and pod CIDRs).
            #[serde(default)]
            status: serde_json::Value,
        }
        let env: Envelope = serde_json::from_value(value).map_err(ParseError::Envelope)?;
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
        // The Kubernetes API refuses these in any object's name or namespace (a path
        // segment); a `/` here would also cut the keys the resource becomes.
        for (field, v) in [
            ("metadata.name", Some(env.metadata.name.as_str())),
            ("metadata.namespace", env.metadata.namespace.as_deref()),
        ] {
            if let Some(v) = v
                && (v == "." || v == ".." || v.contains(['/', '%', '\0']))
            {
                return Err(ParseError::BadName {
                    kind,
                    field,
                    name: v.chars().take(253).collect(),
                });
            }
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
        let bad = |source: serde_json::Error| ParseError::Spec {
            id: id.clone(),
            source,
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
            Kind::StagedNetworkPolicy => {
                Spec::StagedNetworkPolicy(serde_json::from_value(spec_json).map_err(bad)?)
            }
            Kind::StagedGlobalNetworkPolicy => {
                Spec::StagedGlobalNetworkPolicy(serde_json::from_value(spec_json).map_err(bad)?)
            }
            Kind::StagedKubernetesNetworkPolicy => {
                Spec::StagedKubernetesNetworkPolicy(serde_json::from_value(spec_json).map_err(bad)?)
            }
            Kind::KubernetesClusterNetworkPolicy => Spec::KubernetesClusterNetworkPolicy(
                serde_json::from_value(spec_json).map_err(bad)?,
            ),
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
            Kind::Node => {
                let mut spec: NodeSpec = serde_json::from_value(spec_json).map_err(bad)?;
                if !env.status.is_null() {
                    spec.status = serde_json::from_value(env.status).map_err(bad)?;
                }
                Spec::Node(spec)
            }
            Kind::FelixConfiguration => match spec_json {
                serde_json::Value::Object(m) => Spec::FelixConfiguration(m),
                _ => return Err(ParseError::SpecNotMapping { id }),
            },
            Kind::ClusterInformation => {
                Spec::ClusterInformation(serde_json::from_value(spec_json).map_err(bad)?)
            }
            Kind::Tier => Spec::Tier(serde_json::from_value(spec_json).map_err(bad)?),
            Kind::BgpConfiguration => {
                Spec::BgpConfiguration(serde_json::from_value(spec_json).map_err(bad)?)
            }
            Kind::BgpPeer => Spec::BgpPeer(serde_json::from_value(spec_json).map_err(bad)?),
            Kind::BgpFilter => Spec::BgpFilter(serde_json::from_value(spec_json).map_err(bad)?),
            Kind::CalicoNodeStatus => {
                Spec::CalicoNodeStatus(serde_json::from_value(spec_json).map_err(bad)?)
            }
            Kind::LiveMigration => {
                Spec::LiveMigration(serde_json::from_value(spec_json).map_err(bad)?)
            }
            Kind::KubernetesService | Kind::KubernetesEndpointSlice => match spec_json {
                v @ serde_json::Value::Object(_) if kind == Kind::KubernetesService => {
                    Spec::KubernetesService(v)
                }
                v @ serde_json::Value::Object(_) => Spec::KubernetesEndpointSlice(v),
                _ => return Err(ParseError::SpecNotMapping { id }),
            },
        };
        Ok(Resource { metadata, spec })
    }

    /// Parses one resource from JSON text (etcd values).
    pub fn from_json_str(s: &str) -> Result<Resource, ParseError> {
        let v: serde_json::Value = serde_json::from_str(s).map_err(ParseError::Envelope)?;
        Resource::from_json(v)
    }

    /// Serializes back to a JSON value in manifest form (for the etcd backend and tests).
    pub fn to_json(&self) -> serde_json::Value {
        let spec = match &self.spec {
            Spec::WorkloadEndpoint(s) => serde_json::to_value(s),
            Spec::NetworkPolicy(s)
            | Spec::GlobalNetworkPolicy(s)
            | Spec::KubernetesNetworkPolicy(s)
            | Spec::KubernetesClusterNetworkPolicy(s) => serde_json::to_value(s),
            Spec::StagedNetworkPolicy(s) | Spec::StagedGlobalNetworkPolicy(s) => {
                serde_json::to_value(s)
            }
            Spec::StagedKubernetesNetworkPolicy(s) => serde_json::to_value(s),
            Spec::Profile(s) => serde_json::to_value(s),
            Spec::NetworkSet(s) | Spec::GlobalNetworkSet(s) => serde_json::to_value(s),
            Spec::HostEndpoint(s) => serde_json::to_value(s),
            Spec::IpPool(s) => serde_json::to_value(s),
            Spec::IpamBlock(s) => serde_json::to_value(s),
            Spec::BlockAffinity(s) => serde_json::to_value(s),
            Spec::Node(s) => serde_json::to_value(s),
            Spec::FelixConfiguration(m) => Ok(serde_json::Value::Object(m.clone())),
            Spec::ClusterInformation(s) => serde_json::to_value(s),
            Spec::Tier(s) => serde_json::to_value(s),
            Spec::BgpConfiguration(s) => serde_json::to_value(s),
            Spec::BgpPeer(s) => serde_json::to_value(s),
            Spec::BgpFilter(s) => serde_json::to_value(s),
            Spec::CalicoNodeStatus(s) => serde_json::to_value(s),
            Spec::LiveMigration(s) => serde_json::to_value(s),
            Spec::KubernetesService(v) | Spec::KubernetesEndpointSlice(v) => Ok(v.clone()),
        }
        // Serializing plain data structs to a JSON value cannot fail.
        .unwrap_or_default();
        let mut doc = serde_json::json!({
            "apiVersion": API_VERSION,
            "kind": self.kind().as_str(),
            "metadata": self.metadata,
            "spec": spec,
        });
        if let Spec::Node(s) = &self.spec
            && s.status != NodeStatusSpec::default()
            && let Some(o) = doc.as_object_mut()
        {
            o.insert(
                "status".into(),
                serde_json::to_value(&s.status).unwrap_or_default(),
            );
        }
        doc
    }
}

/// A document that is not a resource we can use.
///
/// The messages repeat their source's text because callers show only the top message.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ParseError {
    /// Not an object with apiVersion/kind/metadata/spec (or, from text, not JSON at all).
    #[error("not a Calico resource: {0}")]
    Envelope(#[source] serde_json::Error),
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
    /// A name or namespace the Kubernetes API would refuse: `.`, `..`, or holding `/`, `%`
    /// or NUL.
    #[error("{kind} {field} {name:?} may not be \".\" or \"..\" nor contain '/', '%' or NUL")]
    BadName {
        /// The kind.
        kind: Kind,
        /// `metadata.name` or `metadata.namespace`.
        field: &'static str,
        /// The name given (at most 253 characters of it).
        name: String,
    },
    /// The spec does not parse.
    #[error("{id}: invalid spec: {source}")]
    Spec {
        /// Which resource.
        id: ResourceId,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// The spec is not a mapping (for a kind kept as a mapping of fields).
    #[error("{id}: invalid spec: spec must be a mapping")]
    SpecNotMapping {
        /// Which resource.
        id: ResourceId,
    },
}
