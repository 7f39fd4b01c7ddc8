//! Calico's v3 validator on the kinds carried whole (`raw`): Calico's Typha sends one that
//! fails as a deletion, so confd never sees, say, a BGPPeer whose `peerIP` is not an address.
//! The checks that matter to confd and the node status reporter are here; the rest of that
//! validator is listed as not done in `docs/calico-conversion.md` ("Invalid content").

use std::collections::BTreeSet;
use std::net::IpAddr;

use super::context::{ConvertError, Cx};
use super::v3check::{self, dns1123_subdomain};
use crate::calico::v3::{
    BgpConfigurationSpec, BgpFilterRule, BgpFilterSpec, BgpPeerSpec, CalicoNodeStatusSpec,
    ObjectMeta,
};

/// Any v3 object's metadata ([`v3check::object_meta`]).
pub(super) fn meta(cx: &Cx<'_>, meta: &ObjectMeta) -> Result<(), ConvertError> {
    match v3check::object_meta(meta) {
        Some((field, reason)) => Err(cx.at(&field).err(reason)),
        None => Ok(()),
    }
}

fn selector(cx: &Cx<'_>, field: &str, s: &str) -> Result<(), ConvertError> {
    if !s.is_empty() {
        cx.at(field).selector(s)?;
    }
    Ok(())
}

/// A BGPPeer: the peer's address (`IP`, `IPv4:port` or `[IPv6]:port`), the node and filter
/// names, the selectors, `sourceAddress` and `reachableBy`, and the fields that exclude each
/// other.
pub(super) fn bgp_peer(cx: &Cx<'_>, m: &ObjectMeta, s: &BgpPeerSpec) -> Result<(), ConvertError> {
    meta(cx, m)?;
    let at = |f: &str| cx.at(f);
    if !s.node.is_empty() && !dns1123_subdomain(&s.node) {
        return Err(at("spec.node").err(format!("{:?} is not a node name", s.node)));
    }
    selector(cx, "spec.nodeSelector", &s.node_selector)?;
    selector(cx, "spec.peerSelector", &s.peer_selector)?;
    selector(cx, "spec.localWorkloadSelector", &s.local_workload_selector)?;
    let peer_ip = if s.peer_ip.is_empty() {
        None
    } else {
        Some(peer_address(&s.peer_ip).ok_or_else(|| {
            at("spec.peerIP").err(format!(
                "{:?} is not an address, IPv4:port or [IPv6]:port",
                s.peer_ip
            ))
        })?)
    };
    if !matches!(s.source_address.as_str(), "" | "UseNodeIP" | "None") {
        return Err(at("spec.sourceAddress")
            .err(format!("{:?} is not UseNodeIP or None", s.source_address)));
    }
    for (i, f) in s.filters.iter().enumerate() {
        if !dns1123_subdomain(f) {
            return Err(at(&format!("spec.filters[{i}]")).err(format!("{f:?} is not a name")));
        }
    }
    let exclusive = [
        (
            !s.node.is_empty() && !s.node_selector.is_empty(),
            "spec.node",
            "must be empty when nodeSelector is given",
        ),
        (
            !s.peer_ip.is_empty() && !s.peer_selector.is_empty(),
            "spec.peerIP",
            "must be empty when peerSelector is given",
        ),
        (
            s.as_number.0 != 0 && !s.peer_selector.is_empty(),
            "spec.asNumber",
            "must be empty when peerSelector is given",
        ),
        (
            s.as_number.0 == 0 && !s.local_workload_selector.is_empty(),
            "spec.asNumber",
            "must be given with localWorkloadSelector",
        ),
        (
            !s.peer_ip.is_empty() && !s.local_workload_selector.is_empty(),
            "spec.peerIP",
            "must be empty when localWorkloadSelector is given",
        ),
        (
            !s.peer_selector.is_empty() && !s.local_workload_selector.is_empty(),
            "spec.peerSelector",
            "must be empty when localWorkloadSelector is given",
        ),
        (
            s.keep_original_next_hop && s.next_hop_mode.is_some(),
            "spec.keepOriginalNextHop",
            "must not be set with nextHopMode",
        ),
    ];
    if let Some((_, field, reason)) = exclusive.iter().find(|(bad, _, _)| *bad) {
        return Err(at(field).err(*reason));
    }
    if !s.reachable_by.is_empty() {
        let by = v3check::ip(&s.reachable_by)
            .ok_or_else(|| at("spec.reachableBy").err("not an address"))?;
        match peer_ip {
            None => return Err(at("spec.reachableBy").err("must be empty when peerIP is")),
            Some(p) if p.is_ipv4() != by.is_ipv4() => {
                return Err(at("spec.reachableBy").err("not of peerIP's family"));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// A BGPPeer's `peerIP` as Calico's validator reads it: `IPv4:port` (1-65535), `[IPv6]:port`,
/// or an address alone. The address.
fn peer_address(s: &str) -> Option<IpAddr> {
    if let Some(a) = v3check::ip(s) {
        return Some(a);
    }
    let (host, port) = s.rsplit_once(':')?;
    let port_ok = !port.is_empty()
        && port.bytes().all(|b| b.is_ascii_digit())
        && port.parse::<u16>().is_ok_and(|p| p >= 1);
    let addr = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(v6) => v6.parse::<std::net::Ipv6Addr>().ok().map(IpAddr::V6),
        None => host.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4),
    };
    addr.filter(|_| port_ok)
}

/// A BGPConfiguration: its log level, service CIDRs (strictly masked), communities and prefix
/// advertisements, the mesh settings that need the mesh, ignored interfaces, the workload
/// peering addresses and route priorities.
pub(super) fn bgp_configuration(
    cx: &Cx<'_>,
    m: &ObjectMeta,
    s: &BgpConfigurationSpec,
) -> Result<(), ConvertError> {
    meta(cx, m)?;
    let at = |f: &str| cx.at(f);
    if !matches!(
        s.log_severity_screen.as_str(),
        "" | "Trace" | "Debug" | "Info" | "Warning" | "Error" | "Fatal"
    ) {
        return Err(at("spec.logSeverityScreen")
            .err(format!("{:?} is not a log level", s.log_severity_screen)));
    }
    for (field, blocks) in [
        ("spec.serviceLoadBalancerIPs", &s.service_load_balancer_ips),
        ("spec.serviceExternalIPs", &s.service_external_ips),
        ("spec.serviceClusterIPs", &s.service_cluster_ips),
    ] {
        for (i, b) in blocks.iter().enumerate() {
            if !b.cidr.is_empty() && !masked_network(&b.cidr) {
                return Err(at(&format!("{field}[{i}].cidr"))
                    .err(format!("{:?} is not a network (host bits clear)", b.cidr)));
            }
        }
    }
    for (i, c) in s.communities.iter().enumerate() {
        let c_at = |f: &str| at(&format!("spec.communities[{i}].{f}"));
        if !dns1123_subdomain(&c.name) {
            return Err(c_at("name").err(format!("{:?} is not a name", c.name)));
        }
        if !community(&c.value) {
            return Err(c_at("value").err(format!("{:?} is not aa:nn or aa:nn:mm", c.value)));
        }
    }
    if s.prefix_advertisements.is_empty() && !s.communities.is_empty() {
        return Err(at("spec.communities").err("defined but used by no prefix advertisement"));
    }
    for (i, p) in s.prefix_advertisements.iter().enumerate() {
        let p_at = |f: &str| at(&format!("spec.prefixAdvertisements[{i}].{f}"));
        if !masked_network(&p.cidr) {
            return Err(p_at("cidr").err(format!("{:?} is not a network", p.cidr)));
        }
        if p.communities.is_empty() {
            return Err(p_at("communities").err("required"));
        }
        for c in &p.communities {
            if !community(c) && !s.communities.iter().any(|d| d.name == *c) {
                return Err(p_at("communities").err(format!(
                    "{c:?} is neither a community value nor a defined community"
                )));
            }
        }
    }
    if s.node_to_node_mesh_enabled == Some(false) {
        if s.node_mesh_password.is_some() {
            return Err(at("spec.nodeMeshPassword").err("must not be set with the mesh disabled"));
        }
        if s.node_mesh_max_restart_time.is_some() {
            return Err(
                at("spec.nodeMeshMaxRestartTime").err("must not be set with the mesh disabled")
            );
        }
    }
    for (i, iface) in s.ignored_interfaces.iter().enumerate() {
        let ok = iface != "*"
            && (1..=15).contains(&iface.len())
            && iface
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'*' | b'-'));
        if !ok {
            return Err(at(&format!("spec.ignoredInterfaces[{i}]"))
                .err(format!("{iface:?} is not an interface name or pattern")));
        }
    }
    if !s.local_workload_peering_ipv4.is_empty() && !v3check::ipv4(&s.local_workload_peering_ipv4) {
        return Err(at("spec.localWorkloadPeeringIPV4").err("not an IPv4 address"));
    }
    if !s.local_workload_peering_ipv6.is_empty() && !v3check::ipv6(&s.local_workload_peering_ipv6) {
        return Err(at("spec.localWorkloadPeeringIPV6").err("not an IPv6 address"));
    }
    for (field, p) in [
        ("spec.ipv4NormalRoutePriority", s.ipv4_normal_route_priority),
        ("spec.ipv6NormalRoutePriority", s.ipv6_normal_route_priority),
    ] {
        // Go's `omitempty` skips the check for 0.
        if p.is_some_and(|p| p != 0 && !(1..=2_147_483_646).contains(&p)) {
            return Err(at(field).err("must be 1-2147483646"));
        }
    }
    Ok(())
}

/// Calico's `net` rule: a CIDR or address whose host bits are clear.
fn masked_network(s: &str) -> bool {
    match s.parse::<ipnet::IpNet>() {
        Ok(n) => n.trunc() == n,
        Err(_) => v3check::ip(s).is_some(),
    }
}

/// A BGP community: `aa:nn` of 16-bit numbers, or `aa:nn:mm` of 32-bit numbers.
fn community(s: &str) -> bool {
    let parts: Vec<&str> = s.split(':').collect();
    let digits = |p: &&str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    match parts.len() {
        2 => parts.iter().all(|p| digits(p) && p.parse::<u16>().is_ok()),
        3 => parts.iter().all(|p| digits(p) && p.parse::<u32>().is_ok()),
        _ => false,
    }
}

/// A BGPFilter: each rule's CIDR (of its family, host bits clear) with its match operator,
/// prefix lengths, source, interface, peer type, priority, action, and one change per
/// operation.
pub(super) fn bgp_filter(
    cx: &Cx<'_>,
    m: &ObjectMeta,
    s: &BgpFilterSpec,
) -> Result<(), ConvertError> {
    meta(cx, m)?;
    for (list, rules, v4) in [
        ("spec.exportV4", &s.export_v4, true),
        ("spec.importV4", &s.import_v4, true),
        ("spec.exportV6", &s.export_v6, false),
        ("spec.importV6", &s.import_v6, false),
    ] {
        for (i, r) in rules.iter().enumerate() {
            filter_rule(&cx.at(&format!("{list}[{i}]")), r, v4)?;
        }
    }
    Ok(())
}

fn filter_rule(cx: &Cx<'_>, r: &BgpFilterRule, v4: bool) -> Result<(), ConvertError> {
    let at = |f: &str| cx.at(&format!("{}.{f}", cx.field()));
    if !r.cidr.is_empty() {
        let family_ok = r.cidr.parse::<ipnet::IpNet>().map_or_else(
            |_| v3check::ip(&r.cidr).map(|a| a.is_ipv4()),
            |n| Some(n.addr().is_ipv4()),
        ) == Some(v4);
        if !(family_ok && masked_network(&r.cidr)) {
            return Err(at("cidr").err(format!(
                "{:?} is not an IPv{} network",
                r.cidr,
                if v4 { 4 } else { 6 }
            )));
        }
    }
    if r.cidr.is_empty() != r.match_operator.is_empty() {
        return Err(at("matchOperator").err("cidr and matchOperator go together"));
    }
    if r.cidr.is_empty() && r.prefix_length.is_some() {
        return Err(at("prefixLength").err("needs a cidr"));
    }
    let max_len = if v4 { 32 } else { 128 };
    if let Some(p) = &r.prefix_length
        && [p.min, p.max]
            .iter()
            .flatten()
            .any(|l| !(0..=max_len).contains(l))
    {
        return Err(at("prefixLength").err(format!("lengths must be 0-{max_len}")));
    }
    if !matches!(
        r.match_operator.as_str(),
        "" | "Equal" | "In" | "NotEqual" | "NotIn"
    ) {
        return Err(at("matchOperator").err(format!("{:?} is not an operator", r.match_operator)));
    }
    if !matches!(r.source.as_str(), "" | "RemotePeers") {
        return Err(at("source").err(format!("{:?} is not RemotePeers", r.source)));
    }
    let iface_ok = r.interface.is_empty()
        || r.interface == "*"
        || ((1..=15).contains(&r.interface.len())
            && r.interface
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'*' | b'-')));
    if !iface_ok {
        return Err(at("interface").err(format!("{:?} is not an interface pattern", r.interface)));
    }
    if !matches!(r.peer_type.as_str(), "" | "eBGP" | "iBGP") {
        return Err(at("peerType").err(format!("{:?} is not eBGP or iBGP", r.peer_type)));
    }
    if r.priority
        .is_some_and(|p| !(1..=2_147_483_646).contains(&p))
    {
        return Err(at("priority").err("must be 1-2147483646"));
    }
    if !matches!(r.action.as_str(), "Accept" | "Reject") {
        return Err(at("action").err(format!("{:?} is not Accept or Reject", r.action)));
    }
    if r.communities.as_ref().is_some_and(|c| c.values.is_none()) {
        return Err(at("communities.values").err("required"));
    }
    for (i, op) in r.operations.iter().enumerate() {
        let set = [
            op.add_community.is_some(),
            op.prepend_as_path.is_some(),
            op.set_priority.is_some(),
        ];
        if set.iter().filter(|s| **s).count() != 1 {
            return Err(at(&format!("operations[{i}]")).err("exactly one operation must be set"));
        }
        let missing = op.add_community.as_ref().is_some_and(|c| c.value.is_none())
            || op
                .prepend_as_path
                .as_ref()
                .is_some_and(|p| p.prefix.is_none())
            || op.set_priority.as_ref().is_some_and(|p| p.value.is_none());
        if missing {
            return Err(at(&format!("operations[{i}]")).err("the operation's value is required"));
        }
        if op
            .set_priority
            .as_ref()
            .and_then(|p| p.value)
            .is_some_and(|p| !(1..=2_147_483_646).contains(&p))
        {
            return Err(
                at(&format!("operations[{i}].setPriority.value")).err("must be 1-2147483646")
            );
        }
    }
    Ok(())
}

/// A CalicoNodeStatus: `node` (a name), `classes` (some, none twice) and
/// `updatePeriodSeconds` (0-86400) are required.
pub(super) fn calico_node_status(
    cx: &Cx<'_>,
    m: &ObjectMeta,
    s: &CalicoNodeStatusSpec,
) -> Result<(), ConvertError> {
    meta(cx, m)?;
    if !dns1123_subdomain(&s.node) {
        return Err(cx
            .at("spec.node")
            .err(format!("{:?} is not a node name", s.node)));
    }
    if s.classes.is_empty() {
        return Err(cx.at("spec.classes").err("required"));
    }
    if s.classes.iter().collect::<BTreeSet<_>>().len() != s.classes.len() {
        return Err(cx.at("spec.classes").err("a class is given twice"));
    }
    match s.update_period_seconds {
        None => Err(cx.at("spec.updatePeriodSeconds").err("required")),
        Some(p) if p > 86_400 => Err(cx.at("spec.updatePeriodSeconds").err("must be 0-86400")),
        Some(_) => Ok(()),
    }
}
