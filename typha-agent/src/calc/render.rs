//! Policies, profiles and endpoints as iptables chains, in Calico's naming and shape.
//!
//! ```text
//! FORWARD ─▶ cali-FORWARD ─┬─ -i cali+ ─▶ cali-from-wl-dispatch ─▶ cali-fw-<iface> (egress)
//!                          ├─ -o cali+ ─▶ cali-to-wl-dispatch   ─▶ cali-tw-<iface> (ingress)
//!                          └─ accept-mark set ─▶ ACCEPT
//! INPUT   ─▶ cali-INPUT ─▶ -i cali+ ─▶ cali-wl-to-host ─▶ cali-from-wl-dispatch, then the
//!                                                          configured endpoint-to-host action
//! cali-tw-<iface>: conntrack, then per tier: each policy's cali-pi-<policy> until one accepts
//!                  (RETURN) or passes (next tier); end of tier drops (unless the tier's
//!                  default action is Pass); then the profiles'
//!                  cali-pri-<profile>; then drop.
//! ```
//!
//! A policy's Allow sets the accept mark bit and returns, Pass sets the pass bit and returns,
//! Deny drops. Rule selectors become `-m set --match-set` on the rule's ipsets ([`SetDef`]).
//! Names longer than iptables' 28 characters are hashed the way Calico does it
//! (`cali-pi-_<hash>`).
//!
//! Rules that cannot be expressed here fail closed: an Allow, Pass or Log rule with a match we
//! cannot enforce (a Kubernetes Service, an HTTP match) is left out, so it allows nothing; a
//! Deny rule with one is kept without it, so it denies more. IPv6-only rules are left out
//! (this dataplane programs IPv4).

use std::collections::BTreeSet;

use ipnet::{IpNet, Ipv4Net};
use typha_protocol::model::{Action, EntityRule, Port, Protocol, Rule};
use typha_protocol::selector::Selector;

use super::ipsets::{SetDef, proto_name};
use crate::dataplane::{CHAIN_PREFIX, Hook, MAX_CHAIN_NAME, hash_b64};

/// The mark bit a policy sets when it accepts.
pub const MARK_ACCEPT: u32 = 0x10000;
/// The mark bit a policy sets when it passes to the next tier.
pub const MARK_PASS: u32 = 0x20000;

/// What happens to traffic from a workload to the host itself, after the workload's egress
/// policy allowed it (Felix's `DefaultEndpointToHostAction`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EndpointToHost {
    /// Drop it (Felix's default).
    #[default]
    Drop,
    /// Return to the INPUT chain's other rules.
    Return,
    /// Accept it.
    Accept,
}

/// A name that is not an [`EndpointToHost`] action.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not Drop, Return or Accept")]
pub struct UnknownEndpointToHost(pub String);

impl std::str::FromStr for EndpointToHost {
    type Err = UnknownEndpointToHost;
    fn from_str(s: &str) -> Result<Self, UnknownEndpointToHost> {
        match s.to_ascii_lowercase().as_str() {
            "drop" => Ok(Self::Drop),
            "return" => Ok(Self::Return),
            "accept" => Ok(Self::Accept),
            _ => Err(UnknownEndpointToHost(s.to_owned())),
        }
    }
}

/// Settings of the rendering.
#[derive(Debug, Clone)]
pub struct RenderConfig {
    /// Prefix of workload interface names (`cali`).
    pub iface_prefix: String,
    /// Workload-to-host traffic after egress policy.
    pub endpoint_to_host: EndpointToHost,
}

impl Default for RenderConfig {
    fn default() -> Self {
        Self {
            iface_prefix: "cali".into(),
            endpoint_to_host: EndpointToHost::Drop,
        }
    }
}

/// Counters of what could not be rendered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RenderStats {
    /// Rules left out or narrowed because they use something this dataplane cannot enforce.
    pub unsupported_rules: u64,
}

/// A chain name: `prefix + name` when it fits and is plain, else `prefix + "_" + hash`.
pub fn chain_name(prefix: &str, name: &str) -> String {
    let plain = name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/'));
    if plain && prefix.len() + name.len() <= MAX_CHAIN_NAME {
        format!("{prefix}{name}")
    } else {
        let room = MAX_CHAIN_NAME.saturating_sub(prefix.len() + 1);
        format!("{prefix}_{}", hash_b64(&[name], room))
    }
}

/// Direction of a rule list, relative to the endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dir {
    /// Traffic to the endpoint.
    Ingress,
    /// Traffic from the endpoint.
    Egress,
}

/// `cali-pi-<policy>` / `cali-po-<policy>`.
pub fn policy_chain(dir: Dir, policy: &str) -> String {
    match dir {
        Dir::Ingress => chain_name("cali-pi-", policy),
        Dir::Egress => chain_name("cali-po-", policy),
    }
}

/// `cali-pri-<profile>` / `cali-pro-<profile>`.
pub fn profile_chain(dir: Dir, profile: &str) -> String {
    match dir {
        Dir::Ingress => chain_name("cali-pri-", profile),
        Dir::Egress => chain_name("cali-pro-", profile),
    }
}

/// The ipsets a rule list refers to.
pub fn rule_sets(rules: &[Rule]) -> Vec<SetDef> {
    let mut sets = Vec::new();
    let mut lines = Vec::new();
    let mut stats = RenderStats::default();
    for r in rules {
        render_rule(r, &mut lines, &mut sets, &mut stats);
    }
    sets.sort();
    sets.dedup();
    sets
}

/// A policy's or profile's rules as chain rules.
pub fn render_rules(rules: &[Rule], stats: &mut RenderStats) -> Vec<String> {
    let mut lines = Vec::new();
    let mut sets = Vec::new();
    for r in rules {
        render_rule(r, &mut lines, &mut sets, stats);
    }
    lines
}

/// `-p`'s argument as Felix writes it: the number when the rule gave the protocol as one
/// (`RuleDetail::protocol_number`), else its name.
fn proto_arg(p: Protocol, given_as_number: bool) -> String {
    if given_as_number {
        p.number().to_string()
    } else {
        proto_name(p.number())
    }
}

fn v4_nets(nets: &[IpNet]) -> (Vec<Ipv4Net>, bool) {
    let v4: Vec<Ipv4Net> = nets
        .iter()
        .filter_map(|n| match n {
            IpNet::V4(n) => Some(n.trunc()),
            IpNet::V6(_) => None,
        })
        .collect();
    let only_v6 = !nets.is_empty() && v4.is_empty();
    (v4, only_v6)
}

/// One side's matches. Returns `None` when the side can never match in IPv4.
/// `variants` gets one alternative per port group (the rule is repeated per alternative).
fn side(
    e: &EntityRule,
    flag: &str,
    dir_word: &str,
    proto: Option<Protocol>,
    base: &mut String,
    variants: &mut Vec<String>,
    sets: &mut Vec<SetDef>,
) -> Option<()> {
    let (nets, only_v6) = v4_nets(&e.nets);
    if only_v6 {
        return None;
    }
    match nets.len() {
        0 => {}
        1 => base.push_str(&format!(" {flag} {}", nets.first()?)),
        _ => {
            let def = SetDef::Nets(nets.into_iter().collect());
            base.push_str(&format!(" -m set --match-set {} {dir_word}", def.name()));
            sets.push(def);
        }
    }
    let (not_nets, _) = v4_nets(&e.not_nets);
    match not_nets.len() {
        0 => {}
        1 => base.push_str(&format!(" ! {flag} {}", not_nets.first()?)),
        _ => {
            let def = SetDef::Nets(not_nets.into_iter().collect());
            base.push_str(&format!(" -m set ! --match-set {} {dir_word}", def.name()));
            sets.push(def);
        }
    }
    let selector = if e.selector.is_empty() {
        None
    } else {
        Selector::parse(&e.selector).ok()
    };
    if let Some(sel) = &selector {
        let def = SetDef::Selector(sel.clone());
        base.push_str(&format!(" -m set --match-set {} {dir_word}", def.name()));
        sets.push(def);
    }
    if !e.not_selector.is_empty()
        && let Ok(sel) = Selector::parse(&e.not_selector)
    {
        let def = SetDef::Selector(sel);
        base.push_str(&format!(" -m set ! --match-set {} {dir_word}", def.name()));
        sets.push(def);
    }
    let port_word = if flag == "-s" { "--sports" } else { "--dports" };
    let (numeric, named) = split_ports(&e.not_ports);
    if !e.not_ports.is_empty() {
        let proto = port_proto(proto, &numeric)?;
        for chunk in port_chunks(&numeric) {
            base.push_str(&format!(" -m multiport ! {port_word} {chunk}"));
        }
        for name in named {
            let def = SetDef::NamedPort(
                selector.clone().unwrap_or(Selector::All),
                proto,
                name.to_string(),
            );
            base.push_str(&format!(
                " -m set ! --match-set {} {dir_word},{dir_word}",
                def.name()
            ));
            sets.push(def);
        }
    }
    if !e.ports.is_empty() {
        let (numeric, named) = split_ports(&e.ports);
        let proto = port_proto(proto, &numeric)?;
        for chunk in port_chunks(&numeric) {
            variants.push(format!(" -m multiport {port_word} {chunk}"));
        }
        for name in named {
            let def = SetDef::NamedPort(
                selector.clone().unwrap_or(Selector::All),
                proto,
                name.to_string(),
            );
            variants.push(format!(
                " -m set --match-set {} {dir_word},{dir_word}",
                def.name()
            ));
            sets.push(def);
        }
    }
    Some(())
}

/// The protocol number ports are matched with: the rule's, which must have ports; none (0, any
/// protocol) for named ports alone, as Calico's ClusterNetworkPolicies give them. `None` when
/// the ports cannot match.
fn port_proto(proto: Option<Protocol>, numeric: &[(u16, u16)]) -> Option<u8> {
    match proto {
        Some(p) if p.has_ports() => Some(p.number()),
        None if numeric.is_empty() => Some(0),
        _ => None,
    }
}

fn split_ports(ports: &[Port]) -> (Vec<(u16, u16)>, Vec<&str>) {
    let mut numeric = Vec::new();
    let mut named = Vec::new();
    for p in ports {
        match p {
            Port::Range { first, last } => numeric.push((*first, *last)),
            Port::Named(n) => named.push(n.as_str()),
        }
    }
    (numeric, named)
}

/// multiport takes 15 slots; a range takes two.
fn port_chunks(ports: &[(u16, u16)]) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur: Vec<String> = Vec::new();
    let mut slots = 0;
    for (a, b) in ports {
        let (text, cost) = if a == b {
            (a.to_string(), 1)
        } else {
            (format!("{a}:{b}"), 2)
        };
        if slots + cost > 15 {
            out.push(cur.join(","));
            cur.clear();
            slots = 0;
        }
        cur.push(text);
        slots += cost;
    }
    if !cur.is_empty() {
        out.push(cur.join(","));
    }
    out
}

fn render_rule(r: &Rule, lines: &mut Vec<String>, sets: &mut Vec<SetDef>, stats: &mut RenderStats) {
    if r.ip_version == Some(6) || r.protocol == Some(Protocol::IcmpV6) {
        return;
    }
    let unsupported = r.http.is_some() || r.src.service.is_some() || r.dst.service.is_some();
    if unsupported {
        stats.unsupported_rules += 1;
        if r.action != Action::Deny {
            return;
        }
    }
    let mut base = String::new();
    if let Some(p) = r.protocol {
        base.push_str(&format!(" -p {}", proto_arg(p, r.detail.protocol_number)));
    }
    if let Some(p) = r.not_protocol {
        base.push_str(&format!(
            " ! -p {}",
            proto_arg(p, r.detail.not_protocol_number)
        ));
    }
    let mut rule_sets = Vec::new();
    let mut src_variants = Vec::new();
    let mut dst_variants = Vec::new();
    if side(
        &r.src,
        "-s",
        "src",
        r.protocol,
        &mut base,
        &mut src_variants,
        &mut rule_sets,
    )
    .is_none()
        || side(
            &r.dst,
            "-d",
            "dst",
            r.protocol,
            &mut base,
            &mut dst_variants,
            &mut rule_sets,
        )
        .is_none()
    {
        return;
    }
    if let Some(icmp) = r.icmp {
        if r.protocol != Some(Protocol::Icmp) {
            return;
        }
        base.push_str(&format!(" -m icmp --icmp-type {}", icmp_text(icmp)));
    }
    if let Some(icmp) = r.not_icmp
        && r.protocol == Some(Protocol::Icmp)
    {
        base.push_str(&format!(" -m icmp ! --icmp-type {}", icmp_text(icmp)));
    }
    sets.extend(rule_sets);
    if src_variants.is_empty() {
        src_variants.push(String::new());
    }
    if dst_variants.is_empty() {
        dst_variants.push(String::new());
    }
    for s in &src_variants {
        for d in &dst_variants {
            let m = format!("{base}{s}{d}");
            let m = m.trim_start();
            let sep = if m.is_empty() { "" } else { " " };
            match r.action {
                Action::Allow => {
                    lines.push(format!(
                        "{m}{sep}-j MARK --set-xmark {MARK_ACCEPT:#x}/{MARK_ACCEPT:#x}"
                    ));
                    lines.push(format!(
                        "-m mark --mark {MARK_ACCEPT:#x}/{MARK_ACCEPT:#x} -j RETURN"
                    ));
                }
                Action::Pass => {
                    lines.push(format!(
                        "{m}{sep}-j MARK --set-xmark {MARK_PASS:#x}/{MARK_PASS:#x}"
                    ));
                    lines.push(format!(
                        "-m mark --mark {MARK_PASS:#x}/{MARK_PASS:#x} -j RETURN"
                    ));
                }
                Action::Deny => lines.push(format!("{m}{sep}-j DROP")),
                Action::Log => lines.push(format!(
                    "{m}{sep}-j LOG --log-prefix \"calico-packet: \" --log-level 5"
                )),
            }
        }
    }
}

fn icmp_text(i: typha_protocol::model::Icmp) -> String {
    match i.code {
        Some(c) => format!("{}/{c}", i.icmp_type),
        None => i.icmp_type.to_string(),
    }
}

/// The policies of one tier that apply to an endpoint in one direction, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TierPolicies {
    /// Policy chain names, in order.
    pub chains: Vec<String>,
    /// The tier's default action is Pass: what none of its policies accepts, drops or passes
    /// goes on to the next tier instead of being dropped at the end of the tier.
    pub pass_by_default: bool,
}

/// What an endpoint chain needs.
#[derive(Debug, Clone)]
pub struct EndpointPlan<'a> {
    /// Interface name.
    pub iface: &'a str,
    /// A host endpoint (chains `cali-fh-`/`cali-th-`, failsafe ports first, ACCEPT on
    /// allow) rather than a workload (`cali-fw-`/`cali-tw-`, RETURN to cali-FORWARD).
    pub host: bool,
    /// Ingress tiers, in order.
    pub ingress: Vec<TierPolicies>,
    /// Egress tiers, in order.
    pub egress: Vec<TierPolicies>,
    /// Profiles, in order.
    pub profiles: &'a [String],
}

/// Calico's default failsafe ports, open on host endpoints whatever the policy says, so a
/// policy mistake cannot cut the node off (ssh, DHCP, BGP, etcd, typha, the API server).
const FAILSAFE_IN: &[(&str, &str)] = &[
    ("tcp", "22,179,2379,2380,5473,6443,6666,6667"),
    ("udp", "68"),
];
/// Failsafe ports for traffic leaving the node.
const FAILSAFE_OUT: &[(&str, &str)] = &[
    ("tcp", "179,2379,2380,5473,6443,6666,6667"),
    ("udp", "53,67"),
];

fn endpoint_chain_name(plan: &EndpointPlan<'_>, dir: Dir) -> String {
    match (plan.host, dir) {
        (false, Dir::Ingress) => chain_name("cali-tw-", plan.iface),
        (false, Dir::Egress) => chain_name("cali-fw-", plan.iface),
        // For a host endpoint, ingress is traffic from the interface into the host.
        (true, Dir::Ingress) => chain_name("cali-fh-", plan.iface),
        (true, Dir::Egress) => chain_name("cali-th-", plan.iface),
    }
}

/// The endpoint's chain for one direction and its rules: `cali-tw-`/`cali-fw-` for workloads,
/// `cali-fh-`/`cali-th-` for host endpoints.
pub fn endpoint_chain(plan: &EndpointPlan<'_>, dir: Dir) -> (String, Vec<String>) {
    let name = endpoint_chain_name(plan, dir);
    let both = MARK_ACCEPT | MARK_PASS;
    let mut rules = vec![
        "-m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT".to_string(),
        "-m conntrack --ctstate INVALID -j DROP".to_string(),
        format!("-j MARK --set-xmark 0x0/{both:#x}"),
    ];
    if plan.host {
        rules.push(match dir {
            Dir::Ingress => "-j cali-failsafe-in".to_string(),
            Dir::Egress => "-j cali-failsafe-out".to_string(),
        });
    }
    // Workload chains return to cali-FORWARD (which accepts on the mark after checking the
    // other side); host endpoint chains are the last word in INPUT/OUTPUT.
    let accepted = if plan.host { "ACCEPT" } else { "RETURN" };
    let tiers = match dir {
        Dir::Ingress => &plan.ingress,
        Dir::Egress => &plan.egress,
    };
    for tier in tiers.iter().filter(|t| !t.chains.is_empty()) {
        rules.push(format!("-j MARK --set-xmark 0x0/{MARK_PASS:#x}"));
        for c in &tier.chains {
            rules.push(format!("-m mark --mark 0x0/{MARK_PASS:#x} -j {c}"));
            rules.push(format!(
                "-m mark --mark {MARK_ACCEPT:#x}/{MARK_ACCEPT:#x} -j {accepted}"
            ));
        }
        if !tier.pass_by_default {
            rules.push(format!("-m mark --mark 0x0/{MARK_PASS:#x} -j DROP"));
        }
    }
    for p in plan.profiles {
        rules.push(format!("-j {}", profile_chain(dir, p)));
        rules.push(format!(
            "-m mark --mark {MARK_ACCEPT:#x}/{MARK_ACCEPT:#x} -j {accepted}"
        ));
    }
    rules.push("-j DROP".to_string());
    (name, rules)
}

/// The fixed chains and the dispatch chains for these workload and host endpoint interfaces;
/// hooks into the built-in chains.
pub fn base_chains(
    cfg: &RenderConfig,
    ifaces: &BTreeSet<&str>,
    host_ifaces: &BTreeSet<&str>,
    out: &mut std::collections::BTreeMap<String, Vec<String>>,
) -> Vec<Hook> {
    let wl = format!("{}+", cfg.iface_prefix);
    let accept = format!("-m mark --mark {MARK_ACCEPT:#x}/{MARK_ACCEPT:#x}");
    out.insert(
        "cali-FORWARD".into(),
        vec![
            format!("-i {wl} -j cali-from-wl-dispatch"),
            format!("-o {wl} -j cali-to-wl-dispatch"),
            format!("-i {wl} {accept} -j ACCEPT"),
            format!("-o {wl} {accept} -j ACCEPT"),
        ],
    );
    out.insert(
        "cali-INPUT".into(),
        vec![
            format!("-i {wl} -g cali-wl-to-host"),
            "-j cali-from-host-endpoint".into(),
        ],
    );
    // Host-to-workload traffic is not host endpoint egress (kubelet probes must work).
    out.insert(
        "cali-OUTPUT".into(),
        vec![
            format!("-o {wl} -j RETURN"),
            "-j cali-to-host-endpoint".into(),
        ],
    );
    let mut fh = Vec::new();
    let mut th = Vec::new();
    for i in host_ifaces {
        fh.push(format!("-i {i} -g {}", chain_name("cali-fh-", i)));
        th.push(format!("-o {i} -g {}", chain_name("cali-th-", i)));
    }
    // Interfaces that are not host endpoints are not ours to police: back to INPUT/OUTPUT.
    out.insert("cali-from-host-endpoint".into(), fh);
    out.insert("cali-to-host-endpoint".into(), th);
    let failsafe = |ports: &[(&str, &str)], word: &str| -> Vec<String> {
        ports
            .iter()
            .map(|(proto, list)| format!("-p {proto} -m multiport --{word} {list} -j ACCEPT"))
            .collect()
    };
    out.insert("cali-failsafe-in".into(), failsafe(FAILSAFE_IN, "dports"));
    out.insert("cali-failsafe-out".into(), failsafe(FAILSAFE_OUT, "dports"));
    let to_host = match cfg.endpoint_to_host {
        EndpointToHost::Drop => "-j DROP",
        EndpointToHost::Return => "-j RETURN",
        EndpointToHost::Accept => "-j ACCEPT",
    };
    out.insert(
        "cali-wl-to-host".into(),
        vec![
            "-j cali-from-wl-dispatch".into(),
            format!("{accept} {to_host}"),
            "-j DROP".into(),
        ],
    );
    let mut from = Vec::new();
    let mut to = Vec::new();
    for i in ifaces {
        from.push(format!("-i {i} -g {}", chain_name("cali-fw-", i)));
        to.push(format!("-o {i} -g {}", chain_name("cali-tw-", i)));
    }
    from.push("-j DROP".into());
    to.push("-j DROP".into());
    out.insert("cali-from-wl-dispatch".into(), from);
    out.insert("cali-to-wl-dispatch".into(), to);
    debug_assert!(out.keys().all(|k| k.starts_with(CHAIN_PREFIX)));
    vec![
        Hook {
            chain: "FORWARD".into(),
            rule: "-j cali-FORWARD".into(),
        },
        Hook {
            chain: "INPUT".into(),
            rule: "-j cali-INPUT".into(),
        },
        Hook {
            chain: "OUTPUT".into(),
            rule: "-j cali-OUTPUT".into(),
        },
    ]
}

#[cfg(test)]
mod tests;
