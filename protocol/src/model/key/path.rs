//! Key paths: formatting a [`Key`] as Calico's default path and parsing one back, strictly, so
//! that the two round-trip exactly.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use ipnet::IpNet;

use super::*;

impl Key {
    /// Parses a default key path. Equivalent to `path.parse()`.
    ///
    /// # Errors
    ///
    /// [`KeyError`], naming the path and what is wrong, for a path that is not one of the kinds
    /// this build knows, or is malformed (not under `/calico/`, an empty segment, a bad escape,
    /// too many segments, a CIDR that is not canonical or does not match the path's family).
    pub fn parse(path: &str) -> Result<Key, KeyError> {
        let raw = RawKey::parse(path)?;
        Ok(raw.into_key())
    }

    /// Checks that `path` is a valid key path without building the key, and returns its type.
    /// Allocation-free: this is what the wire decoder runs on every key it receives.
    ///
    /// # Errors
    ///
    /// As [`Key::parse`].
    pub fn validate(path: &str) -> Result<KeyType, KeyError> {
        RawKey::parse(path).map(|raw| raw.key_type())
    }

    /// Classifies a path received from a peer: a key this build knows (its type, and whether
    /// a protocol version 1 peer knows its kind too), a well-formed path of a kind it does not
    /// know (a newer peer's: [`Key::Opaque`]), or an error for a path that is malformed (not
    /// under `/calico/`, an empty segment, a bad escape or CIDR in a known kind, ...).
    /// Allocation-free, like [`Key::validate`].
    ///
    /// # Errors
    ///
    /// [`KeyError`] for a malformed path, as above; a well-formed path of an unknown kind is
    /// [`PathClass::Unknown`], not an error.
    pub fn classify(path: &str) -> Result<PathClass, KeyError> {
        match RawKey::parse(path) {
            Ok(raw) => Ok(PathClass::Known {
                key_type: raw.key_type(),
                in_v1: raw.in_v1(),
            }),
            Err(e) if UNKNOWN_KIND.contains(&e.reason) && well_formed(path) => {
                Ok(PathClass::Unknown)
            }
            Err(e) => Err(e),
        }
    }
}

/// What [`Key::classify`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathClass {
    /// A key this build parses.
    Known {
        /// Its type.
        key_type: KeyType,
        /// Whether a protocol version 1 peer knows its kind ([`Key::in_v1`]).
        in_v1: bool,
    },
    /// A well-formed path of a kind this build does not know.
    Unknown,
}

/// The parse errors that mean "a kind this build does not know" rather than "malformed".
const UNKNOWN_KIND: [&str; 4] = [
    "unknown policy kind",
    "unknown resource kind",
    "not a known key path",
    "too many segments",
];

/// Longest opaque path accepted: far above any Calico key, so a peer cannot make a client
/// keep arbitrary blobs as keys.
pub const MAX_OPAQUE_PATH: usize = 1024;

/// Under `/calico/`, no empty segment, not too long: what any key of any kind looks like.
fn well_formed(path: &str) -> bool {
    path.len() <= MAX_OPAQUE_PATH
        && path
            .strip_prefix("/calico/")
            .is_some_and(|rest| rest.split('/').all(|s| !s.is_empty()))
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
            Key::Opaque(k) => f.write_str(&k.path),
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

    fn in_v1(&self) -> bool {
        match self {
            RawKey::Resource(kind, ..) => kind.in_v1(),
            RawKey::Policy(kind, ..) => kind.in_v1(),
            _ => true,
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
