//! libcalico-go's default key paths: [`CalicoKey`] formats each key kind a syncer sends the
//! way `model.KeyToDefaultPath` does, and parses it back the way `model.KeyFromDefaultPath`
//! does.
//!
//! Calico is not uniform about escaping (`%` → `%25`, `/` → `%2f`): it escapes workload
//! endpoint ids, host endpoint ids, network set and profile names; it writes policy and
//! resource names, namespaces and tiers as they are, yet its parser unescapes them. Those
//! names are Kubernetes names, which hold neither character, so escaping them too changes
//! nothing for a real name and keeps an odd one readable back instead of unparseable; we
//! escape them. Host names and config names are written as they are, as Calico does (config
//! names may hold `/`). CIDRs are written as Go's `IPNet.String()` with the `/` replaced by
//! `-`.

use std::fmt::Write as _;
use std::net::IpAddr;

use ipnet::IpNet;

/// Where v3 resources live.
pub(super) const V3_PREFIX: &str = "/calico/resources/v3/projectcalico.org/";

/// A key in libcalico-go's model, as far as the four syncers send it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CalicoKey {
    /// `model.WorkloadEndpointKey`
    WorkloadEndpoint {
        /// `Hostname`
        host: String,
        /// `OrchestratorID`
        orchestrator: String,
        /// `WorkloadID`
        workload: String,
        /// `EndpointID`
        endpoint: String,
    },
    /// `model.HostEndpointKey`
    HostEndpoint {
        /// `Hostname`
        host: String,
        /// `EndpointID`
        endpoint: String,
    },
    /// `model.PolicyKey`: `/calico/v1/policy/<Kind>/<namespace>/<name>`, the namespace empty
    /// for cluster-wide kinds.
    Policy {
        /// `Kind`
        kind: String,
        /// `Namespace`
        namespace: String,
        /// `Name`
        name: String,
    },
    /// `model.LegacyPolicyKey`, as Calico before 3.30 wrote policies:
    /// `/calico/v1/policy/tier/<tier>/policy/<name>` with the name escaped.
    LegacyPolicy {
        /// The tier.
        tier: String,
        /// `[<namespace>/][staged:][knp.default.]<name>`
        name: String,
    },
    /// `model.TierKey`: `/calico/v1/policy/tier/<name>/metadata`.
    Tier(String),
    /// `model.ProfileRulesKey`
    ProfileRules(String),
    /// `model.ProfileLabelsKey`
    ProfileLabels(String),
    /// `model.NetworkSetKey`
    NetworkSet(String),
    /// `model.IPPoolKey`: `/calico/v1/ipam/v<4|6>/pool/<cidr>`.
    IpPool(IpNet),
    /// `model.BlockKey`: `/calico/ipam/v2/assignment/ipv<4|6>/block/<cidr>`.
    Block(IpNet),
    /// `model.BlockAffinityKey`: `/calico/ipam/v2/<type>/<host>/ipv<4|6>/block/<cidr>`.
    BlockAffinity {
        /// `host` or `virtual`.
        affinity_type: String,
        /// The node (or virtual owner).
        host: String,
        /// The block.
        cidr: IpNet,
    },
    /// `model.HostIPKey`: `/calico/v1/host/<host>/bird_ip`.
    HostIp(String),
    /// `model.WireguardKey`: `/calico/v1/host/<host>/wireguard`.
    Wireguard(String),
    /// `model.HostConfigKey`: `/calico/v1/host/<host>/config/<name>`.
    HostConfig {
        /// `Hostname`
        host: String,
        /// `Name` (may hold `/`).
        name: String,
    },
    /// `model.GlobalConfigKey`: `/calico/v1/config/<name>`.
    GlobalConfig(String),
    /// `model.ReadyFlagKey`: `/calico/v1/Ready`.
    Ready,
    /// `model.ResourceKey`: `/calico/resources/v3/projectcalico.org/<plural>/[<ns>/]<name>`.
    Resource {
        /// The registered plural (`nodes`, `profiles`, ...).
        plural: String,
        /// The namespace, for namespaced kinds.
        namespace: Option<String>,
        /// The name.
        name: String,
    },
}

impl CalicoKey {
    /// The default path, as libcalico-go writes it.
    pub fn path(&self) -> String {
        let mut p = String::with_capacity(64);
        // Writing to a String cannot fail.
        let _ = match self {
            CalicoKey::WorkloadEndpoint {
                host,
                orchestrator,
                workload,
                endpoint,
            } => write!(
                p,
                "/calico/v1/host/{host}/workload/{}/{}/endpoint/{}",
                escape(orchestrator),
                escape(workload),
                escape(endpoint)
            ),
            CalicoKey::HostEndpoint { host, endpoint } => {
                write!(p, "/calico/v1/host/{host}/endpoint/{}", escape(endpoint))
            }
            CalicoKey::Policy {
                kind,
                namespace,
                name,
            } => write!(
                p,
                "/calico/v1/policy/{}/{}/{}",
                escape(kind),
                escape(namespace),
                escape(name)
            ),
            CalicoKey::LegacyPolicy { tier, name } => {
                write!(
                    p,
                    "/calico/v1/policy/tier/{}/policy/{}",
                    escape(tier),
                    escape(name)
                )
            }
            CalicoKey::Tier(name) => write!(p, "/calico/v1/policy/tier/{}/metadata", escape(name)),
            CalicoKey::ProfileRules(name) => {
                write!(p, "/calico/v1/policy/profile/{}/rules", escape(name))
            }
            CalicoKey::ProfileLabels(name) => {
                write!(p, "/calico/v1/policy/profile/{}/labels", escape(name))
            }
            CalicoKey::NetworkSet(name) => write!(p, "/calico/v1/netset/{}", escape(name)),
            CalicoKey::IpPool(cidr) => write!(
                p,
                "/calico/v1/ipam/v{}/pool/{}",
                version(cidr),
                go_cidr(cidr).replacen('/', "-", 1)
            ),
            CalicoKey::Block(cidr) => write!(
                p,
                "/calico/ipam/v2/assignment/ipv{}/block/{}",
                version(cidr),
                go_cidr(cidr).replacen('/', "-", 1)
            ),
            CalicoKey::BlockAffinity {
                affinity_type,
                host,
                cidr,
            } => write!(
                p,
                "/calico/ipam/v2/{affinity_type}/{host}/ipv{}/block/{}",
                version(cidr),
                go_cidr(cidr).replacen('/', "-", 1)
            ),
            CalicoKey::HostIp(host) => write!(p, "/calico/v1/host/{host}/bird_ip"),
            CalicoKey::Wireguard(host) => write!(p, "/calico/v1/host/{host}/wireguard"),
            CalicoKey::HostConfig { host, name } => {
                write!(p, "/calico/v1/host/{host}/config/{name}")
            }
            CalicoKey::GlobalConfig(name) => write!(p, "/calico/v1/config/{name}"),
            CalicoKey::Ready => write!(p, "/calico/v1/Ready"),
            CalicoKey::Resource {
                plural,
                namespace,
                name,
            } => match namespace {
                Some(ns) => write!(p, "{V3_PREFIX}{plural}/{}/{}", escape(ns), escape(name)),
                None => write!(p, "{V3_PREFIX}{plural}/{}", escape(name)),
            },
        };
        p
    }

    /// Reads a default path back, as libcalico-go's `KeyFromDefaultPath` does for these kinds
    /// (`None` where it would return nil).
    pub fn parse(path: &str) -> Option<CalicoKey> {
        let rest = path.strip_prefix('/')?;
        let parts: Vec<&str> = rest.split('/').collect();
        let un = |s: &str| unescape(s);
        match parts.as_slice() {
            ["calico", "v1", "host", h, "workload", o, w, "endpoint", e] => {
                Some(CalicoKey::WorkloadEndpoint {
                    host: un(h),
                    orchestrator: un(o),
                    workload: un(w),
                    endpoint: un(e),
                })
            }
            ["calico", "v1", "host", h, "endpoint", e] => Some(CalicoKey::HostEndpoint {
                host: un(h),
                endpoint: un(e),
            }),
            ["calico", "v1", "host", h, "bird_ip"] => Some(CalicoKey::HostIp(un(h))),
            ["calico", "v1", "host", h, "wireguard"] => Some(CalicoKey::Wireguard(un(h))),
            ["calico", "v1", "host", h, "config", name @ ..] if !name.is_empty() => {
                Some(CalicoKey::HostConfig {
                    host: un(h),
                    name: name.join("/"),
                })
            }
            ["calico", "v1", "config", name @ ..] if !name.is_empty() => {
                Some(CalicoKey::GlobalConfig(name.join("/")))
            }
            ["calico", "v1", "Ready"] => Some(CalicoKey::Ready),
            ["calico", "v1", "netset", n] => Some(CalicoKey::NetworkSet(un(n))),
            ["calico", "v1", "policy", "tier", t, "metadata"] => Some(CalicoKey::Tier(un(t))),
            ["calico", "v1", "policy", "tier", t, "policy", n] => Some(CalicoKey::LegacyPolicy {
                tier: un(t),
                name: un(n),
            }),
            ["calico", "v1", "policy", "profile", n, "rules"] => {
                Some(CalicoKey::ProfileRules(un(n)))
            }
            ["calico", "v1", "policy", "profile", n, "labels"] => {
                Some(CalicoKey::ProfileLabels(un(n)))
            }
            ["calico", "v1", "policy", k, ns, n] if *k != "tier" && *k != "profile" => {
                Some(CalicoKey::Policy {
                    kind: un(k),
                    namespace: un(ns),
                    name: un(n),
                })
            }
            ["calico", "v1", "ipam", v, "pool", c] if matches!(*v, "v4" | "v6") => {
                Some(CalicoKey::IpPool(path_cidr(c)?))
            }
            ["calico", "ipam", "v2", "assignment", v, "block", c]
                if matches!(*v, "ipv4" | "ipv6") =>
            {
                Some(CalicoKey::Block(path_cidr(c)?))
            }
            ["calico", "ipam", "v2", t, h, v, "block", c]
                if matches!(*t, "host" | "virtual") && matches!(*v, "ipv4" | "ipv6") =>
            {
                Some(CalicoKey::BlockAffinity {
                    affinity_type: (*t).to_owned(),
                    host: (*h).to_owned(),
                    cidr: path_cidr(c)?,
                })
            }
            [
                "calico",
                "resources",
                "v3",
                "projectcalico.org",
                plural,
                name,
            ] => Some(CalicoKey::Resource {
                plural: un(plural),
                namespace: None,
                name: un(name),
            }),
            [
                "calico",
                "resources",
                "v3",
                "projectcalico.org",
                plural,
                ns,
                name,
            ] => Some(CalicoKey::Resource {
                plural: un(plural),
                namespace: Some(un(ns)),
                name: un(name),
            }),
            _ => None,
        }
    }
}

/// libcalico-go's `escapeName`.
fn escape(name: &str) -> String {
    name.replace('%', "%25").replace('/', "%2f")
}

/// libcalico-go's `unescapeName` (`%2f` first, then `%25`, as it does).
fn unescape(name: &str) -> String {
    name.replace("%2f", "/").replace("%25", "%")
}

/// A CIDR in a path (`10.0.1.0-26`), parsed as Go's `net.ParseCIDR` does (masked).
fn path_cidr(s: &str) -> Option<IpNet> {
    s.replacen('-', "/", 1)
        .parse::<IpNet>()
        .ok()
        .map(|n| n.trunc())
}

/// 4 or 6, as `cnet.IPNet.Version()` says: an IPv4-mapped IPv6 network counts as 4.
fn version(n: &IpNet) -> u8 {
    match n {
        IpNet::V4(_) => 4,
        IpNet::V6(v6) if v6.addr().to_ipv4_mapped().is_some() => 4,
        IpNet::V6(_) => 6,
    }
}

/// An address as Go's `net.IP.String()` writes it: an IPv4-mapped IPv6 address in dotted
/// form; otherwise RFC 5952, as Rust's `Display` also does.
pub(super) fn go_ip(ip: IpAddr) -> String {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => v6.to_string(),
        },
        IpAddr::V4(v4) => v4.to_string(),
    }
}

/// A network as Go's `net.IPNet.String()` writes it. An IPv4-mapped IPv6 network is written
/// as IPv4 with the mask's last four bytes, as Go does.
pub(super) fn go_cidr(n: &IpNet) -> String {
    match n {
        IpNet::V6(v6) if v6.addr().to_ipv4_mapped().is_some() => format!(
            "{}/{}",
            go_ip(IpAddr::V6(v6.addr())),
            v6.prefix_len().saturating_sub(96)
        ),
        _ => format!("{}/{}", n.addr(), n.prefix_len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_calicos_and_parse_back() {
        let cases = [
            (
                CalicoKey::WorkloadEndpoint {
                    host: "node-1".into(),
                    orchestrator: "k8s".into(),
                    workload: "prod/web-0".into(),
                    endpoint: "eth0".into(),
                },
                "/calico/v1/host/node-1/workload/k8s/prod%2fweb-0/endpoint/eth0",
            ),
            (
                CalicoKey::Policy {
                    kind: "GlobalNetworkPolicy".into(),
                    namespace: String::new(),
                    name: "deny".into(),
                },
                "/calico/v1/policy/GlobalNetworkPolicy//deny",
            ),
            (
                CalicoKey::LegacyPolicy {
                    tier: "default".into(),
                    name: "prod/knp.default.web".into(),
                },
                "/calico/v1/policy/tier/default/policy/prod%2fknp.default.web",
            ),
            (
                CalicoKey::NetworkSet("ns/100%".into()),
                "/calico/v1/netset/ns%2f100%25",
            ),
            (
                CalicoKey::IpPool("fd00::/48".parse().unwrap()),
                "/calico/v1/ipam/v6/pool/fd00::-48",
            ),
            (
                CalicoKey::BlockAffinity {
                    affinity_type: "host".into(),
                    host: "node-1".into(),
                    cidr: "10.0.1.0/26".parse().unwrap(),
                },
                "/calico/ipam/v2/host/node-1/ipv4/block/10.0.1.0-26",
            ),
            (
                CalicoKey::HostConfig {
                    host: "n".into(),
                    name: "a/b".into(),
                },
                "/calico/v1/host/n/config/a/b",
            ),
            (
                CalicoKey::Resource {
                    plural: "nodes".into(),
                    namespace: None,
                    name: "n".into(),
                },
                "/calico/resources/v3/projectcalico.org/nodes/n",
            ),
        ];
        for (key, path) in cases {
            assert_eq!(key.path(), path);
            assert_eq!(CalicoKey::parse(path), Some(key));
        }
        assert_eq!(
            CalicoKey::parse("/calico/v1/policy/GlobalNetworkPolicy/x"),
            None
        );
    }

    #[test]
    fn go_forms_of_addresses() {
        let mapped: IpNet = "::ffff:10.0.0.0/120".parse().unwrap();
        assert_eq!(go_cidr(&mapped), "10.0.0.0/24");
        assert_eq!(go_ip("::ffff:10.0.0.1".parse().unwrap()), "10.0.0.1");
        assert_eq!(go_ip("fd00::1".parse().unwrap()), "fd00::1");
        assert_eq!(
            go_ip("2001:db8:0:0:1:0:0:1".parse().unwrap()),
            "2001:db8::1:0:0:1"
        );
    }
}
