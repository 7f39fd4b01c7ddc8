//! Typed keys and Calico's default key paths.
//!
//! Every key formats to exactly one path and every accepted path parses to exactly one key, so
//! `parse(format(k)) == k` and `format(parse(p)) == p`. Paths follow Calico's libcalico-go
//! model: names that may contain `/` are escaped (`%` → `%25`, then `/` → `%2f`), host names
//! are written as they are, and CIDRs replace their `/` with `-`. The parser is strict where
//! Calico's is lenient (a leading `/` is required, no empty segments, no escapes other than
//! `%25` and `%2f`, canonical CIDRs), because a lenient parse could not round-trip exactly.
//!
//! Policies: Calico 3.3x no longer stores policies under a tier path; its PolicyKey is
//! (kind, namespace, name). Ours is written `/calico/v1/policy/<Kind>/<namespace>/<name>` for
//! namespaced kinds and `/calico/v1/policy/<Kind>/<name>` for cluster-wide ones.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use ipnet::IpNet;

/// A key in the felix-syncer model. See the module documentation for the paths.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Key {
    /// A pod, VM or other workload interface.
    WorkloadEndpoint(WorkloadEndpointKey),
    /// A host interface under policy.
    HostEndpoint(HostEndpointKey),
    /// A network policy of any kind.
    Policy(PolicyKey),
    /// The rules of a profile.
    ProfileRules(ProfileKey),
    /// The labels a profile gives to the endpoints that use it.
    ProfileLabels(ProfileKey),
    /// A named set of networks.
    NetworkSet(NetworkSetKey),
    /// An IP pool.
    IpPool(IpPoolKey),
    /// An IPAM allocation block; its value says which host it is affine to.
    Block(BlockKey),
    /// The IP address of a host (Calico's `bird_ip`).
    HostIp(HostIpKey),
    /// A per-host configuration parameter.
    HostConfig(HostConfigKey),
    /// A cluster-wide configuration parameter.
    GlobalConfig(GlobalConfigKey),
    /// The datastore's ready flag.
    ReadyFlag,
    /// A v3 resource stored whole, such as a Node.
    Resource(ResourceKey),
}

/// The type of a [`Key`], without its fields: for counting, logging and checking that a value
/// matches its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum KeyType {
    /// [`Key::WorkloadEndpoint`]
    WorkloadEndpoint,
    /// [`Key::HostEndpoint`]
    HostEndpoint,
    /// [`Key::Policy`]
    Policy,
    /// [`Key::ProfileRules`]
    ProfileRules,
    /// [`Key::ProfileLabels`]
    ProfileLabels,
    /// [`Key::NetworkSet`]
    NetworkSet,
    /// [`Key::IpPool`]
    IpPool,
    /// [`Key::Block`]
    Block,
    /// [`Key::HostIp`]
    HostIp,
    /// [`Key::HostConfig`]
    HostConfig,
    /// [`Key::GlobalConfig`]
    GlobalConfig,
    /// [`Key::ReadyFlag`]
    ReadyFlag,
    /// [`Key::Resource`]
    Resource,
}

impl KeyType {
    /// Every key type, for tables and tests.
    pub const ALL: [KeyType; 13] = [
        KeyType::WorkloadEndpoint,
        KeyType::HostEndpoint,
        KeyType::Policy,
        KeyType::ProfileRules,
        KeyType::ProfileLabels,
        KeyType::NetworkSet,
        KeyType::IpPool,
        KeyType::Block,
        KeyType::HostIp,
        KeyType::HostConfig,
        KeyType::GlobalConfig,
        KeyType::ReadyFlag,
        KeyType::Resource,
    ];

    /// A stable, readable name (`workload-endpoint`, ...), for logs, metrics labels and tools.
    pub fn as_str(self) -> &'static str {
        match self {
            KeyType::WorkloadEndpoint => "workload-endpoint",
            KeyType::HostEndpoint => "host-endpoint",
            KeyType::Policy => "policy",
            KeyType::ProfileRules => "profile-rules",
            KeyType::ProfileLabels => "profile-labels",
            KeyType::NetworkSet => "network-set",
            KeyType::IpPool => "ip-pool",
            KeyType::Block => "ipam-block",
            KeyType::HostIp => "host-ip",
            KeyType::HostConfig => "host-config",
            KeyType::GlobalConfig => "global-config",
            KeyType::ReadyFlag => "ready-flag",
            KeyType::Resource => "resource",
        }
    }
}

impl fmt::Display for KeyType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `/calico/v1/host/<hostname>/workload/<orchestrator>/<workload>/endpoint/<endpoint>`
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WorkloadEndpointKey {
    /// Node the workload runs on.
    pub hostname: String,
    /// Orchestrator, `k8s` for Kubernetes pods.
    pub orchestrator: String,
    /// Workload id; for Kubernetes `<namespace>/<pod>`.
    pub workload: String,
    /// Endpoint id within the workload, usually `eth0`.
    pub endpoint: String,
}

/// `/calico/v1/host/<hostname>/endpoint/<endpoint>`
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HostEndpointKey {
    /// Node the interface belongs to.
    pub hostname: String,
    /// Host endpoint name.
    pub endpoint: String,
}

/// The v3 kind a policy came from. Its name is the path segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum PolicyKind {
    /// `projectcalico.org/v3` NetworkPolicy (namespaced).
    NetworkPolicy,
    /// `projectcalico.org/v3` GlobalNetworkPolicy (cluster-wide).
    GlobalNetworkPolicy,
    /// `projectcalico.org/v3` StagedNetworkPolicy (namespaced).
    StagedNetworkPolicy,
    /// `projectcalico.org/v3` StagedGlobalNetworkPolicy (cluster-wide).
    StagedGlobalNetworkPolicy,
    /// `networking.k8s.io/v1` NetworkPolicy, converted (namespaced).
    KubernetesNetworkPolicy,
}

impl PolicyKind {
    /// Every policy kind.
    pub const ALL: [PolicyKind; 5] = [
        PolicyKind::NetworkPolicy,
        PolicyKind::GlobalNetworkPolicy,
        PolicyKind::StagedNetworkPolicy,
        PolicyKind::StagedGlobalNetworkPolicy,
        PolicyKind::KubernetesNetworkPolicy,
    ];

    /// The kind's name, as in the v3 API and the key path.
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyKind::NetworkPolicy => "NetworkPolicy",
            PolicyKind::GlobalNetworkPolicy => "GlobalNetworkPolicy",
            PolicyKind::StagedNetworkPolicy => "StagedNetworkPolicy",
            PolicyKind::StagedGlobalNetworkPolicy => "StagedGlobalNetworkPolicy",
            PolicyKind::KubernetesNetworkPolicy => "KubernetesNetworkPolicy",
        }
    }

    /// Whether policies of this kind live in a namespace.
    pub fn is_namespaced(self) -> bool {
        matches!(
            self,
            PolicyKind::NetworkPolicy
                | PolicyKind::StagedNetworkPolicy
                | PolicyKind::KubernetesNetworkPolicy
        )
    }

    fn from_segment(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// `/calico/v1/policy/<Kind>/[<namespace>/]<name>`
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PolicyKey {
    /// The v3 kind.
    pub kind: PolicyKind,
    /// Namespace: `Some` exactly when the kind is namespaced.
    pub namespace: Option<String>,
    /// Policy name (for staged policies Calico's `staged:` prefix is not used: the kind says).
    pub name: String,
}

/// A profile's name; used by both `/calico/v1/policy/profile/<name>/rules` and `/labels`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProfileKey {
    /// Profile name, e.g. `kns.default` for a Kubernetes namespace.
    pub name: String,
}

/// `/calico/v1/netset/<name>`
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NetworkSetKey {
    /// Network set name; namespaced sets are named `<namespace>/<name>`.
    pub name: String,
}

/// `/calico/v1/ipam/v4/pool/<cidr>` (or `v6`), CIDR written with `-` for `/`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IpPoolKey {
    /// The pool's CIDR.
    pub cidr: IpNet,
}

/// `/calico/ipam/v2/assignment/ipv4/block/<cidr>` (or `ipv6`), CIDR written with `-`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BlockKey {
    /// The block's CIDR.
    pub cidr: IpNet,
}

/// `/calico/v1/host/<hostname>/bird_ip`
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HostIpKey {
    /// The host.
    pub hostname: String,
}

/// `/calico/v1/host/<hostname>/config/<name>`; the name may contain `/`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HostConfigKey {
    /// The host.
    pub hostname: String,
    /// Parameter name.
    pub name: String,
}

/// `/calico/v1/config/<name>`; the name may contain `/`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GlobalConfigKey {
    /// Parameter name.
    pub name: String,
}

/// The v3 kinds that can be carried whole as a [`ResourceKey`], with their plural path names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum ResourceKind {
    /// `nodes`
    Node,
    /// `clusterinformations`
    ClusterInformation,
    /// `felixconfigurations`
    FelixConfiguration,
    /// `bgpconfigurations`
    BgpConfiguration,
    /// `bgppeers`
    BgpPeer,
    /// `ipreservations`
    IpReservation,
    /// `ipamconfigs`
    IpamConfig,
    /// `tiers`
    Tier,
    /// `kubernetesservice` (singular, as Calico registers it)
    KubernetesService,
    /// `kubernetesendpointslices`
    KubernetesEndpointSlice,
    /// `caliconodestatuses`
    CalicoNodeStatus,
    /// `blockaffinities`
    BlockAffinity,
}

impl ResourceKind {
    /// Every resource kind.
    pub const ALL: [ResourceKind; 12] = [
        ResourceKind::Node,
        ResourceKind::ClusterInformation,
        ResourceKind::FelixConfiguration,
        ResourceKind::BgpConfiguration,
        ResourceKind::BgpPeer,
        ResourceKind::IpReservation,
        ResourceKind::IpamConfig,
        ResourceKind::Tier,
        ResourceKind::KubernetesService,
        ResourceKind::KubernetesEndpointSlice,
        ResourceKind::CalicoNodeStatus,
        ResourceKind::BlockAffinity,
    ];

    /// The kind's name in the v3 API.
    pub fn as_str(self) -> &'static str {
        match self {
            ResourceKind::Node => "Node",
            ResourceKind::ClusterInformation => "ClusterInformation",
            ResourceKind::FelixConfiguration => "FelixConfiguration",
            ResourceKind::BgpConfiguration => "BGPConfiguration",
            ResourceKind::BgpPeer => "BGPPeer",
            ResourceKind::IpReservation => "IPReservation",
            ResourceKind::IpamConfig => "IPAMConfig",
            ResourceKind::Tier => "Tier",
            ResourceKind::KubernetesService => "KubernetesService",
            ResourceKind::KubernetesEndpointSlice => "KubernetesEndpointSlice",
            ResourceKind::CalicoNodeStatus => "CalicoNodeStatus",
            ResourceKind::BlockAffinity => "BlockAffinity",
        }
    }

    /// The plural used in the key path (Calico's registered name).
    pub fn plural(self) -> &'static str {
        match self {
            ResourceKind::Node => "nodes",
            ResourceKind::ClusterInformation => "clusterinformations",
            ResourceKind::FelixConfiguration => "felixconfigurations",
            ResourceKind::BgpConfiguration => "bgpconfigurations",
            ResourceKind::BgpPeer => "bgppeers",
            ResourceKind::IpReservation => "ipreservations",
            ResourceKind::IpamConfig => "ipamconfigs",
            ResourceKind::Tier => "tiers",
            ResourceKind::KubernetesService => "kubernetesservice",
            ResourceKind::KubernetesEndpointSlice => "kubernetesendpointslices",
            ResourceKind::CalicoNodeStatus => "caliconodestatuses",
            ResourceKind::BlockAffinity => "blockaffinities",
        }
    }

    /// Whether resources of this kind live in a namespace.
    pub fn is_namespaced(self) -> bool {
        matches!(
            self,
            ResourceKind::KubernetesService | ResourceKind::KubernetesEndpointSlice
        )
    }

    fn from_plural(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.plural() == s)
    }
}

/// `/calico/resources/v3/projectcalico.org/<plural>/[<namespace>/]<name>`
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ResourceKey {
    /// The resource's kind.
    pub kind: ResourceKind,
    /// Namespace: `Some` exactly when the kind is namespaced.
    pub namespace: Option<String>,
    /// Resource name.
    pub name: String,
}

/// A key path that could not be parsed. Names the path and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed key path {path:?}: {reason}")]
pub struct KeyError {
    /// The offending path (truncated to 256 bytes so an attacker cannot bloat logs).
    pub path: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl KeyError {
    pub(crate) fn new(path: &str, reason: &'static str) -> Self {
        let mut end = path.len().min(256);
        while !path.is_char_boundary(end) {
            end -= 1;
        }
        Self {
            path: path.get(..end).unwrap_or_default().to_owned(),
            reason,
        }
    }
}

impl Key {
    /// The key's type.
    pub fn key_type(&self) -> KeyType {
        match self {
            Key::WorkloadEndpoint(_) => KeyType::WorkloadEndpoint,
            Key::HostEndpoint(_) => KeyType::HostEndpoint,
            Key::Policy(_) => KeyType::Policy,
            Key::ProfileRules(_) => KeyType::ProfileRules,
            Key::ProfileLabels(_) => KeyType::ProfileLabels,
            Key::NetworkSet(_) => KeyType::NetworkSet,
            Key::IpPool(_) => KeyType::IpPool,
            Key::Block(_) => KeyType::Block,
            Key::HostIp(_) => KeyType::HostIp,
            Key::HostConfig(_) => KeyType::HostConfig,
            Key::GlobalConfig(_) => KeyType::GlobalConfig,
            Key::ReadyFlag => KeyType::ReadyFlag,
            Key::Resource(_) => KeyType::Resource,
        }
    }

    /// Parses a default key path. Equivalent to `path.parse()`.
    pub fn parse(path: &str) -> Result<Key, KeyError> {
        let raw = RawKey::parse(path)?;
        Ok(raw.into_key())
    }

    /// Checks that `path` is a valid key path without building the key, and returns its type.
    /// Allocation-free: this is what the wire decoder runs on every key it receives.
    pub fn validate(path: &str) -> Result<KeyType, KeyError> {
        RawKey::parse(path).map(|raw| raw.key_type())
    }
}

impl FromStr for Key {
    type Err = KeyError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Key::parse(s)
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Key::WorkloadEndpoint(k) => write!(
                f,
                "/calico/v1/host/{}/workload/{}/{}/endpoint/{}",
                k.hostname,
                Escaped(&k.orchestrator),
                Escaped(&k.workload),
                Escaped(&k.endpoint)
            ),
            Key::HostEndpoint(k) => write!(
                f,
                "/calico/v1/host/{}/endpoint/{}",
                k.hostname,
                Escaped(&k.endpoint)
            ),
            Key::Policy(k) => {
                write!(f, "/calico/v1/policy/{}/", k.kind.as_str())?;
                if let Some(ns) = &k.namespace {
                    write!(f, "{}/", Escaped(ns))?;
                }
                write!(f, "{}", Escaped(&k.name))
            }
            Key::ProfileRules(k) => {
                write!(f, "/calico/v1/policy/profile/{}/rules", Escaped(&k.name))
            }
            Key::ProfileLabels(k) => {
                write!(f, "/calico/v1/policy/profile/{}/labels", Escaped(&k.name))
            }
            Key::NetworkSet(k) => write!(f, "/calico/v1/netset/{}", Escaped(&k.name)),
            Key::IpPool(k) => write!(
                f,
                "/calico/v1/ipam/{}/pool/{}",
                if k.cidr.addr().is_ipv4() { "v4" } else { "v6" },
                PathCidr(&k.cidr)
            ),
            Key::Block(k) => write!(
                f,
                "/calico/ipam/v2/assignment/{}/block/{}",
                if k.cidr.addr().is_ipv4() {
                    "ipv4"
                } else {
                    "ipv6"
                },
                PathCidr(&k.cidr)
            ),
            Key::HostIp(k) => write!(f, "/calico/v1/host/{}/bird_ip", k.hostname),
            Key::HostConfig(k) => write!(f, "/calico/v1/host/{}/config/{}", k.hostname, k.name),
            Key::GlobalConfig(k) => write!(f, "/calico/v1/config/{}", k.name),
            Key::ReadyFlag => f.write_str("/calico/v1/Ready"),
            Key::Resource(k) => {
                write!(
                    f,
                    "/calico/resources/v3/projectcalico.org/{}/",
                    k.kind.plural()
                )?;
                if let Some(ns) = &k.namespace {
                    write!(f, "{}/", Escaped(ns))?;
                }
                write!(f, "{}", Escaped(&k.name))
            }
        }
    }
}

/// Writes a name with Calico's escaping: `%` → `%25`, `/` → `%2f`.
struct Escaped<'a>(&'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut rest = self.0;
        while let Some(i) = rest.find(['%', '/']) {
            let (head, tail) = rest.split_at(i);
            f.write_str(head)?;
            f.write_str(if tail.starts_with('%') { "%25" } else { "%2f" })?;
            rest = tail.get(1..).unwrap_or_default();
        }
        f.write_str(rest)
    }
}

/// Writes a CIDR with its `/` replaced by `-`.
struct PathCidr<'a>(&'a IpNet);

impl fmt::Display for PathCidr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.0.addr(), self.0.prefix_len())
    }
}

/// A segment that may hold escapes; checked but not yet unescaped.
#[derive(Clone, Copy)]
struct Esc<'a>(&'a str);

impl<'a> Esc<'a> {
    fn check(s: &'a str, path: &str) -> Result<Self, KeyError> {
        let bytes = s.as_bytes();
        let mut i = 0;
        while let Some(&b) = bytes.get(i) {
            if b == b'%' {
                match bytes.get(i + 1..i + 3) {
                    Some(b"25") | Some(b"2f") => i += 3,
                    _ => return Err(KeyError::new(path, "bad escape: only %25 and %2f allowed")),
                }
            } else {
                i += 1;
            }
        }
        Ok(Esc(s))
    }

    fn unescape(self) -> String {
        if !self.0.contains('%') {
            return self.0.to_owned();
        }
        self.0.replace("%2f", "/").replace("%25", "%")
    }
}

/// A parsed path whose string parts still borrow from the input.
enum RawKey<'a> {
    WorkloadEndpoint(&'a str, Esc<'a>, Esc<'a>, Esc<'a>),
    HostEndpoint(&'a str, Esc<'a>),
    Policy(PolicyKind, Option<Esc<'a>>, Esc<'a>),
    ProfileRules(Esc<'a>),
    ProfileLabels(Esc<'a>),
    NetworkSet(Esc<'a>),
    IpPool(IpNet),
    Block(IpNet),
    HostIp(&'a str),
    HostConfig(&'a str, &'a str),
    GlobalConfig(&'a str),
    ReadyFlag,
    Resource(ResourceKind, Option<Esc<'a>>, Esc<'a>),
}

impl<'a> RawKey<'a> {
    fn parse(path: &'a str) -> Result<Self, KeyError> {
        let err = |reason| KeyError::new(path, reason);
        let rest = path
            .strip_prefix("/calico/")
            .ok_or_else(|| err("does not start with /calico/"))?;

        // Config names may contain '/', so they are recognised by prefix before splitting.
        if let Some(name) = rest.strip_prefix("v1/config/") {
            return Ok(RawKey::GlobalConfig(config_name(name, path)?));
        }
        if let Some((host, name)) = rest
            .strip_prefix("v1/host/")
            .and_then(|after_host| after_host.split_once("/config/"))
            .filter(|(host, _)| !host.contains('/'))
        {
            return Ok(RawKey::HostConfig(
                segment(host, path)?,
                config_name(name, path)?,
            ));
        }

        // At most 8 segments follow "/calico/" in any other key; one more slot detects excess.
        let mut segs = [""; 9];
        let mut n = 0;
        for s in rest.split('/') {
            let slot = segs.get_mut(n).ok_or_else(|| err("too many segments"))?;
            *slot = segment(s, path)?;
            n += 1;
        }
        let segs = segs.get(..n).unwrap_or_default();

        Ok(match segs {
            ["v1", "host", h, "workload", o, w, "endpoint", e] => RawKey::WorkloadEndpoint(
                h,
                Esc::check(o, path)?,
                Esc::check(w, path)?,
                Esc::check(e, path)?,
            ),
            ["v1", "host", h, "endpoint", e] => RawKey::HostEndpoint(h, Esc::check(e, path)?),
            ["v1", "host", h, "bird_ip"] => RawKey::HostIp(h),
            ["v1", "Ready"] => RawKey::ReadyFlag,
            ["v1", "policy", "profile", name, "rules"] => {
                RawKey::ProfileRules(Esc::check(name, path)?)
            }
            ["v1", "policy", "profile", name, "labels"] => {
                RawKey::ProfileLabels(Esc::check(name, path)?)
            }
            ["v1", "policy", kind, names @ ..] => {
                let kind =
                    PolicyKind::from_segment(kind).ok_or_else(|| err("unknown policy kind"))?;
                let (ns, name) = namespaced(kind.is_namespaced(), names, path)?;
                RawKey::Policy(kind, ns, name)
            }
            ["v1", "netset", name] => RawKey::NetworkSet(Esc::check(name, path)?),
            ["v1", "ipam", v @ ("v4" | "v6"), "pool", cidr] => {
                RawKey::IpPool(path_cidr(cidr, *v == "v4", path)?)
            }
            [
                "ipam",
                "v2",
                "assignment",
                v @ ("ipv4" | "ipv6"),
                "block",
                cidr,
            ] => RawKey::Block(path_cidr(cidr, *v == "ipv4", path)?),
            ["resources", "v3", "projectcalico.org", plural, names @ ..] => {
                let kind = ResourceKind::from_plural(plural)
                    .ok_or_else(|| err("unknown resource kind"))?;
                let (ns, name) = namespaced(kind.is_namespaced(), names, path)?;
                RawKey::Resource(kind, ns, name)
            }
            _ => return Err(err("not a known key path")),
        })
    }

    fn key_type(&self) -> KeyType {
        match self {
            RawKey::WorkloadEndpoint(..) => KeyType::WorkloadEndpoint,
            RawKey::HostEndpoint(..) => KeyType::HostEndpoint,
            RawKey::Policy(..) => KeyType::Policy,
            RawKey::ProfileRules(_) => KeyType::ProfileRules,
            RawKey::ProfileLabels(_) => KeyType::ProfileLabels,
            RawKey::NetworkSet(_) => KeyType::NetworkSet,
            RawKey::IpPool(_) => KeyType::IpPool,
            RawKey::Block(_) => KeyType::Block,
            RawKey::HostIp(_) => KeyType::HostIp,
            RawKey::HostConfig(..) => KeyType::HostConfig,
            RawKey::GlobalConfig(_) => KeyType::GlobalConfig,
            RawKey::ReadyFlag => KeyType::ReadyFlag,
            RawKey::Resource(..) => KeyType::Resource,
        }
    }

    fn into_key(self) -> Key {
        match self {
            RawKey::WorkloadEndpoint(h, o, w, e) => Key::WorkloadEndpoint(WorkloadEndpointKey {
                hostname: h.to_owned(),
                orchestrator: o.unescape(),
                workload: w.unescape(),
                endpoint: e.unescape(),
            }),
            RawKey::HostEndpoint(h, e) => Key::HostEndpoint(HostEndpointKey {
                hostname: h.to_owned(),
                endpoint: e.unescape(),
            }),
            RawKey::Policy(kind, ns, name) => Key::Policy(PolicyKey {
                kind,
                namespace: ns.map(Esc::unescape),
                name: name.unescape(),
            }),
            RawKey::ProfileRules(n) => Key::ProfileRules(ProfileKey { name: n.unescape() }),
            RawKey::ProfileLabels(n) => Key::ProfileLabels(ProfileKey { name: n.unescape() }),
            RawKey::NetworkSet(n) => Key::NetworkSet(NetworkSetKey { name: n.unescape() }),
            RawKey::IpPool(cidr) => Key::IpPool(IpPoolKey { cidr }),
            RawKey::Block(cidr) => Key::Block(BlockKey { cidr }),
            RawKey::HostIp(h) => Key::HostIp(HostIpKey {
                hostname: h.to_owned(),
            }),
            RawKey::HostConfig(h, name) => Key::HostConfig(HostConfigKey {
                hostname: h.to_owned(),
                name: name.to_owned(),
            }),
            RawKey::GlobalConfig(name) => Key::GlobalConfig(GlobalConfigKey {
                name: name.to_owned(),
            }),
            RawKey::ReadyFlag => Key::ReadyFlag,
            RawKey::Resource(kind, ns, name) => Key::Resource(ResourceKey {
                kind,
                namespace: ns.map(Esc::unescape),
                name: name.unescape(),
            }),
        }
    }
}

/// A single path segment: non-empty.
fn segment<'a>(s: &'a str, path: &str) -> Result<&'a str, KeyError> {
    if s.is_empty() {
        Err(KeyError::new(path, "empty path segment"))
    } else {
        Ok(s)
    }
}

/// A config parameter name: one or more non-empty segments.
fn config_name<'a>(name: &'a str, path: &str) -> Result<&'a str, KeyError> {
    for s in name.split('/') {
        segment(s, path)?;
    }
    Ok(name)
}

/// `[namespace, name]` for namespaced kinds, `[name]` otherwise.
#[allow(clippy::type_complexity)]
fn namespaced<'a>(
    namespaced: bool,
    names: &[&'a str],
    path: &str,
) -> Result<(Option<Esc<'a>>, Esc<'a>), KeyError> {
    match (namespaced, names) {
        (true, [ns, name]) => Ok((Some(Esc::check(ns, path)?), Esc::check(name, path)?)),
        (false, [name]) => Ok((None, Esc::check(name, path)?)),
        (true, _) => Err(KeyError::new(
            path,
            "namespaced kind needs <namespace>/<name>",
        )),
        (false, _) => Err(KeyError::new(
            path,
            "cluster-wide kind needs exactly <name>",
        )),
    }
}

/// A CIDR written `<addr>-<prefix>`, of the expected family and in canonical form.
fn path_cidr(s: &str, v4: bool, path: &str) -> Result<IpNet, KeyError> {
    let err = |reason| KeyError::new(path, reason);
    let (addr, len) = s
        .split_once('-')
        .ok_or_else(|| err("CIDR must be written <address>-<prefix length>"))?;
    let addr: IpAddr = addr.parse().map_err(|_| err("bad IP address in CIDR"))?;
    if addr.is_ipv4() != v4 {
        return Err(err("CIDR address family does not match the path"));
    }
    let len: u8 = len.parse().map_err(|_| err("bad prefix length in CIDR"))?;
    let net = IpNet::new(addr, len).map_err(|_| err("prefix length too long for the address"))?;
    // Only the canonical spelling round-trips: lower-case compressed IPv6, no leading zeros.
    if PathCidr(&net).to_string() != s {
        return Err(err("CIDR is not in canonical form"));
    }
    Ok(net)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rt(path: &str) -> Key {
        let key: Key = path.parse().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(key.to_string(), path, "round trip of {path}");
        assert_eq!(Key::validate(path).unwrap(), key.key_type());
        key
    }

    #[test]
    fn calico_default_paths_round_trip() {
        let k = rt("/calico/v1/host/node-1/workload/k8s/default%2fnginx-7d9b/endpoint/eth0");
        assert_eq!(
            k,
            Key::WorkloadEndpoint(WorkloadEndpointKey {
                hostname: "node-1".into(),
                orchestrator: "k8s".into(),
                workload: "default/nginx-7d9b".into(),
                endpoint: "eth0".into(),
            })
        );
        rt("/calico/v1/host/node-1/endpoint/eth0-hep");
        rt("/calico/v1/policy/NetworkPolicy/prod/allow-web");
        rt("/calico/v1/policy/GlobalNetworkPolicy/default-deny");
        rt("/calico/v1/policy/KubernetesNetworkPolicy/prod/knp.default.web");
        rt("/calico/v1/policy/profile/kns.default/rules");
        rt("/calico/v1/policy/profile/ksa.default.default/labels");
        rt("/calico/v1/netset/prod%2fblocked");
        rt("/calico/v1/ipam/v4/pool/10.65.0.0-16");
        rt("/calico/v1/ipam/v6/pool/fd00:65::-48");
        rt("/calico/ipam/v2/assignment/ipv4/block/10.65.3.64-26");
        rt("/calico/ipam/v2/assignment/ipv6/block/fd00:65::1:0-122");
        rt("/calico/v1/host/node-1/bird_ip");
        rt("/calico/v1/host/node-1/config/LogSeverityScreen");
        rt("/calico/v1/host/node-1/config/some/nested/name");
        rt("/calico/v1/config/ReportingIntervalSecs");
        rt("/calico/v1/config/a/b");
        assert_eq!(rt("/calico/v1/Ready"), Key::ReadyFlag);
        rt("/calico/resources/v3/projectcalico.org/nodes/node-1");
        rt("/calico/resources/v3/projectcalico.org/kubernetesservice/default/kubernetes");
    }

    #[test]
    fn escapes_round_trip_exactly() {
        let k = Key::NetworkSet(NetworkSetKey {
            name: "a/b%c%2fd".into(),
        });
        let p = k.to_string();
        assert_eq!(p, "/calico/v1/netset/a%2fb%25c%252fd");
        assert_eq!(rt(&p), k);
    }

    #[test]
    fn malformed_paths_are_errors_that_name_the_path() {
        for bad in [
            "",
            "/",
            "calico/v1/Ready",
            "/calico/v1/Ready/",
            "/calico/v1/host//endpoint/x",
            "/calico/v1/host/h/workload/k8s/w/endpoint",
            "/calico/v1/host/h/workload/k8s/w/endpoint/e/extra",
            "/calico/v1/netset/bad%41escape",
            "/calico/v1/netset/trailing%2",
            "/calico/v1/policy/Bogus/x",
            "/calico/v1/policy/NetworkPolicy/no-namespace",
            "/calico/v1/policy/GlobalNetworkPolicy/ns/extra",
            "/calico/v1/ipam/v4/pool/10.0.0.0-33",
            "/calico/v1/ipam/v4/pool/10.0.0.0/16",
            "/calico/v1/ipam/v4/pool/fd00::-64",
            "/calico/v1/ipam/v6/pool/FD00::-64",
            "/calico/v1/ipam/v4/pool/10.0.0.0-016",
            "/calico/v1/config/",
            "/calico/v1/config/a//b",
            "/calico/v1/host/h/config/",
            "/calico/resources/v3/projectcalico.org/widgets/x",
            "/calico/resources/v3/projectcalico.org/nodes/ns/x",
            "/calico/a/b/c/d/e/f/g/h/i/j/k",
        ] {
            let e = Key::parse(bad).unwrap_err();
            assert_eq!(e.path, bad);
            assert!(e.to_string().contains("malformed key path"), "{e}");
            assert!(Key::validate(bad).is_err());
        }
    }

    #[test]
    fn long_bad_paths_are_truncated_in_errors() {
        let bad = format!("/x{}", "é".repeat(400));
        let e = Key::parse(&bad).unwrap_err();
        assert!(e.path.len() <= 256);
    }
}
