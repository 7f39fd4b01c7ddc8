//! BGP specs (BGPConfiguration, BGPPeer, BGPFilter) and the node status request
//! (CalicoNodeStatus): kinds the server carries whole for confd and the node status reporter,
//! never interprets.
//!
//! Every field Calico v3.32 declares is modelled, in the order Go declares it and with Go's
//! `omitempty`, so serializing one of these specs gives the JSON Calico's own clients write for
//! it (field order included). Values are normalised the way Go's types normalise them on a
//! round trip: an AS number written as `"1.10"` becomes `65546`, a duration written as `"2m"`
//! becomes `"2m0s"`. Unknown fields are dropped, as Go drops them.

use std::fmt;

use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize, Serializer};

/// An AS number: written as a number, read from a number, a decimal string or the dotted
/// `high.low` form (both halves 16 bits), as Calico's `numorstring.ASNumber`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(transparent)]
pub struct AsNumber(pub u32);

impl<'de> Deserialize<'de> for AsNumber {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(u32),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Number(n) => Ok(AsNumber(n)),
            Raw::Text(s) => as_number_from_str(&s)
                .map(AsNumber)
                .ok_or_else(|| de::Error::custom(format!("invalid AS number {s:?}"))),
        }
    }
}

fn as_number_from_str(s: &str) -> Option<u32> {
    if let Ok(n) = s.parse::<u32>() {
        return Some(n);
    }
    let (high, low) = s.split_once('.')?;
    let high: u16 = high.parse().ok()?;
    let low: u16 = low.parse().ok()?;
    Some((u32::from(high) << 16) | u32::from(low))
}

/// A Go duration (`metav1.Duration`), kept in nanoseconds and written as Go writes it
/// (`90s` → `1m30s`, `0.5s` → `500ms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GoDuration(pub i64);

impl GoDuration {
    /// Parses Go's duration syntax (`1h2m3.5s`, `-10ms`, `0`).
    pub fn parse(s: &str) -> Option<GoDuration> {
        let (neg, mut rest) = match s.strip_prefix('-') {
            Some(r) => (true, r),
            None => (false, s.strip_prefix('+').unwrap_or(s)),
        };
        if rest == "0" {
            return Some(GoDuration(0));
        }
        if rest.is_empty() {
            return None;
        }
        let mut total: f64 = 0.0;
        while !rest.is_empty() {
            let n = rest
                .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                .unwrap_or(rest.len());
            let number: f64 = rest.get(..n)?.parse().ok()?;
            rest = rest.get(n..)?;
            let (unit, len) = [
                ("ns", 1.0),
                ("us", 1e3),
                ("µs", 1e3),
                ("μs", 1e3),
                ("ms", 1e6),
                ("s", 1e9),
                ("m", 60e9),
                ("h", 3600e9),
            ]
            .into_iter()
            .filter(|(u, _)| rest.starts_with(u))
            .map(|(u, m)| (m, u.len()))
            .max_by_key(|(_, len)| *len)?;
            total += number * unit;
            rest = rest.get(len..)?;
        }
        if total > i64::MAX as f64 {
            return None;
        }
        let ns = total.round() as i64;
        Some(GoDuration(if neg { -ns } else { ns }))
    }
}

impl fmt::Display for GoDuration {
    /// Go's `time.Duration.String`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let neg = self.0 < 0;
        let u = self.0.unsigned_abs();
        let sign = if neg { "-" } else { "" };
        if u == 0 {
            return f.write_str("0s");
        }
        // Digits after the point, without trailing zeros.
        let frac = |v: u64, digits: usize| -> String {
            let s = format!("{v:0digits$}");
            let s = s.trim_end_matches('0');
            if s.is_empty() {
                String::new()
            } else {
                format!(".{s}")
            }
        };
        if u < 1_000_000_000 {
            let (unit, div, digits) = if u < 1_000 {
                ("ns", 1, 0)
            } else if u < 1_000_000 {
                ("µs", 1_000, 3)
            } else {
                ("ms", 1_000_000, 6)
            };
            let whole = u / div;
            let rest = if digits == 0 {
                String::new()
            } else {
                frac(u % div, digits)
            };
            return write!(f, "{sign}{whole}{rest}{unit}");
        }
        let secs = u / 1_000_000_000;
        let sub = frac(u % 1_000_000_000, 9);
        let (h, m, s) = (secs / 3600, (secs / 60) % 60, secs % 60);
        if h > 0 {
            write!(f, "{sign}{h}h{m}m{s}{sub}s")
        } else if m > 0 {
            write!(f, "{sign}{m}m{s}{sub}s")
        } else {
            write!(f, "{sign}{s}{sub}s")
        }
    }
}

impl Serialize for GoDuration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for GoDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        GoDuration::parse(&s).ok_or_else(|| de::Error::custom(format!("invalid duration {s:?}")))
    }
}

/// A CIDR block (`serviceClusterIPs`, `serviceExternalIPs`, `serviceLoadBalancerIPs`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct CidrBlock {
    /// The CIDR.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub cidr: String,
}

/// A named BGP community value.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Community {
    /// Name, referred to by prefix advertisements.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// `aa:nn` or `aa:nn:mm`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub value: String,
}

/// Communities to attach to a prefix.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct PrefixAdvertisement {
    /// The prefix.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub cidr: String,
    /// Community names or values.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub communities: Vec<String>,
}

/// A key in a Secret (Kubernetes' `SecretKeySelector`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct SecretKeySelector {
    /// The Secret's name.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// The key (always written, as Go has no `omitempty` on it).
    pub key: String,
    /// Whether the Secret may be missing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub optional: Option<bool>,
}

/// A BGP password: where to read it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct BgpPassword {
    /// The Secret key holding it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret_key_ref: Option<SecretKeySelector>,
}

/// BGPConfiguration spec (`default`, or `node.<name>` for one node).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
#[allow(missing_docs)]
pub struct BgpConfigurationSpec {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub log_severity_screen: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_to_node_mesh_enabled: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub as_number: Option<AsNumber>,
    #[serde(
        rename = "serviceLoadBalancerIPs",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub service_load_balancer_ips: Vec<CidrBlock>,
    #[serde(rename = "serviceExternalIPs", skip_serializing_if = "Vec::is_empty")]
    pub service_external_ips: Vec<CidrBlock>,
    #[serde(rename = "serviceClusterIPs", skip_serializing_if = "Vec::is_empty")]
    pub service_cluster_ips: Vec<CidrBlock>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_load_balancer_aggregation: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub communities: Vec<Community>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub prefix_advertisements: Vec<PrefixAdvertisement>,
    #[serde(skip_serializing_if = "is_zero_u16")]
    pub listen_port: u16,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_mesh_password: Option<BgpPassword>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_mesh_max_restart_time: Option<GoDuration>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bind_mode: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ignored_interfaces: Vec<String>,
    #[serde(
        rename = "localWorkloadPeeringIPV4",
        skip_serializing_if = "String::is_empty"
    )]
    pub local_workload_peering_ipv4: String,
    #[serde(
        rename = "localWorkloadPeeringIPV6",
        skip_serializing_if = "String::is_empty"
    )]
    pub local_workload_peering_ipv6: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub program_cluster_routes: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipv4_normal_route_priority: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipv6_normal_route_priority: Option<i64>,
}

/// BGPPeer spec: who peers with whom.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
#[allow(missing_docs)]
pub struct BgpPeerSpec {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub node: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub node_selector: String,
    #[serde(rename = "peerIP", skip_serializing_if = "String::is_empty")]
    pub peer_ip: String,
    #[serde(skip_serializing_if = "is_zero_as")]
    pub as_number: AsNumber,
    #[serde(rename = "localASNumber", skip_serializing_if = "Option::is_none")]
    pub local_as_number: Option<AsNumber>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub peer_selector: String,
    #[serde(skip_serializing_if = "is_false")]
    pub keep_original_next_hop: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_hop_mode: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub password: Option<BgpPassword>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub source_address: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_restart_time: Option<GoDuration>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keepalive_time: Option<GoDuration>,
    #[serde(
        rename = "numAllowedLocalASNumbers",
        skip_serializing_if = "Option::is_none"
    )]
    pub num_allowed_local_as_numbers: Option<i32>,
    #[serde(rename = "ttlSecurity", skip_serializing_if = "Option::is_none")]
    pub ttl_security: Option<u8>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reachable_by: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub filters: Vec<String>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub local_workload_selector: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reverse_peering: Option<String>,
}

/// BGPFilter spec: the ordered import and export rules a BGPPeer names in `filters`, one list
/// per direction and address family.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct BgpFilterSpec {
    /// Rules for IPv4 routes exported to a peer.
    #[serde(rename = "exportV4", skip_serializing_if = "Vec::is_empty")]
    pub export_v4: Vec<BgpFilterRule>,
    /// Rules for IPv4 routes imported from a peer.
    #[serde(rename = "importV4", skip_serializing_if = "Vec::is_empty")]
    pub import_v4: Vec<BgpFilterRule>,
    /// Rules for IPv6 routes exported to a peer.
    #[serde(rename = "exportV6", skip_serializing_if = "Vec::is_empty")]
    pub export_v6: Vec<BgpFilterRule>,
    /// Rules for IPv6 routes imported from a peer.
    #[serde(rename = "importV6", skip_serializing_if = "Vec::is_empty")]
    pub import_v6: Vec<BgpFilterRule>,
}

/// One BGPFilter rule: what it matches, its action and what it changes. Go declares a type per
/// address family (`BGPFilterRuleV4`, `BGPFilterRuleV6`) with the same fields, tags and order;
/// they differ only in what validation allows, which is not ours to check.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
#[allow(missing_docs)]
pub struct BgpFilterRule {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub cidr: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix_length: Option<BgpFilterPrefixLength>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub source: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub interface: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub match_operator: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub peer_type: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub communities: Option<BgpFilterCommunityMatch>,
    #[serde(rename = "asPathPrefix", skip_serializing_if = "Vec::is_empty")]
    pub as_path_prefix: Vec<AsNumber>,
    /// Go's `*int`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority: Option<i64>,
    /// `Accept` or `Reject`; always written (no `omitempty` in Go).
    pub action: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub operations: Vec<BgpFilterOperation>,
}

/// The range of prefix lengths a rule's CIDR matches (`BGPFilterPrefixLengthV4`/`V6`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct BgpFilterPrefixLength {
    /// Shortest prefix length (Go's `*int32`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min: Option<i32>,
    /// Longest prefix length (Go's `*int32`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max: Option<i32>,
}

/// The communities a route must carry. `values` has no `omitempty` in Go: a nil list is
/// written `null`, an empty one `[]`, and both are kept apart here.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct BgpFilterCommunityMatch {
    /// Community values (`aa:nn` or `aa:nn:mm`).
    pub values: Option<Vec<String>>,
}

/// One change to a matching route; Go's union of pointers, of which one is meant to be set.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct BgpFilterOperation {
    /// Adds a community.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub add_community: Option<BgpFilterAddCommunity>,
    /// Prepends AS numbers to the AS path.
    #[serde(rename = "prependASPath", skip_serializing_if = "Option::is_none")]
    pub prepend_as_path: Option<BgpFilterPrependAsPath>,
    /// Sets the route's priority.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub set_priority: Option<BgpFilterSetPriority>,
}

/// The community an operation adds (Go's `*BGPCommunityValue`, no `omitempty`: nil is `null`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct BgpFilterAddCommunity {
    /// `aa:nn` or `aa:nn:mm`.
    pub value: Option<String>,
}

/// The AS numbers an operation prepends (no `omitempty`: a nil list is `null`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct BgpFilterPrependAsPath {
    /// In the order they end up in the path.
    pub prefix: Option<Vec<AsNumber>>,
}

/// The priority an operation sets (Go's `*int`, no `omitempty`: nil is `null`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct BgpFilterSetPriority {
    /// The priority.
    pub value: Option<i64>,
}

/// CalicoNodeStatus spec: which node should report what, how often. The status the node writes
/// back is not carried (see `docs/calico-conversion.md`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct CalicoNodeStatusSpec {
    /// The node that reports.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub node: String,
    /// `Agent`, `BGP`, `Routes`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub classes: Vec<String>,
    /// Seconds between reports; 0 stops them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub update_period_seconds: Option<u32>,
}

fn is_zero_u16(v: &u16) -> bool {
    *v == 0
}

fn is_zero_as(v: &AsNumber) -> bool {
    v.0 == 0
}

fn is_false(v: &bool) -> bool {
    !*v
}
