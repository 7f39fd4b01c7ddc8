//! The calc graph's outputs: chains (rendered from the active policies, used profiles and
//! local endpoints) and routes.

use std::collections::{BTreeMap, BTreeSet};

use ipnet::Ipv4Net;
use typha_protocol::model::{PolicyType, ProfileRules};

use super::render::{self, Dir, EndpointPlan, RenderStats, TierPolicies};
use super::{CalcGraph, DEFAULT_TIER_ORDER, LocalEp, NodeIps};
use crate::dataplane::RouteTarget;

impl CalcGraph {
    pub(super) fn render_chains(&mut self) {
        let mut chains = BTreeMap::new();
        let mut stats = RenderStats::default();
        let ifaces: BTreeSet<&str> = self
            .local
            .values()
            .filter(|e| !e.host)
            .map(|e| e.iface.as_str())
            .collect();
        let host_ifaces: BTreeSet<&str> = self
            .local
            .values()
            .filter(|e| e.host)
            .map(|e| e.iface.as_str())
            .collect();
        let hooks = render::base_chains(&self.cfg, &ifaces, &host_ifaces, &mut chains);
        for p in self.policies.values().filter(|p| !p.selects.is_empty()) {
            for (dir, ty, rules) in [
                (Dir::Ingress, PolicyType::Ingress, &p.policy.inbound_rules),
                (Dir::Egress, PolicyType::Egress, &p.policy.outbound_rules),
            ] {
                if p.policy.types.contains(&ty) {
                    chains.insert(
                        render::policy_chain(dir, &p.name),
                        render::render_rules(rules, &mut stats),
                    );
                }
            }
        }
        for (name, prof) in self.profiles.iter().filter(|(_, p)| p.users > 0) {
            let empty = ProfileRules::default();
            let rules = prof.rules.as_ref().unwrap_or(&empty);
            chains.insert(
                render::profile_chain(Dir::Ingress, name),
                render::render_rules(&rules.inbound_rules, &mut stats),
            );
            chains.insert(
                render::profile_chain(Dir::Egress, name),
                render::render_rules(&rules.outbound_rules, &mut stats),
            );
        }
        for ep in self.local.values() {
            let plan = EndpointPlan {
                iface: &ep.iface,
                host: ep.host,
                ingress: self.tiers_for(ep, PolicyType::Ingress, Dir::Ingress),
                egress: self.tiers_for(ep, PolicyType::Egress, Dir::Egress),
                profiles: &ep.profiles,
            };
            for dir in [Dir::Ingress, Dir::Egress] {
                let (name, rules) = render::endpoint_chain(&plan, dir);
                chains.insert(name, rules);
            }
        }
        self.render_stats = stats;
        self.desired.chains = chains;
        self.desired.hooks = hooks;
        self.desired.interfaces = self.workload_ifaces();
    }

    pub(super) fn workload_ifaces(&self) -> BTreeSet<String> {
        self.local
            .values()
            .filter(|e| !e.host)
            .map(|e| e.iface.clone())
            .collect()
    }

    /// The endpoint's policies for one direction, grouped by tier, both in order.
    pub(super) fn tiers_for(&self, ep: &LocalEp, ty: PolicyType, dir: Dir) -> Vec<TierPolicies> {
        type Policies<'a> = (bool, Vec<(Ordered, &'a str)>);
        let mut by_tier: BTreeMap<(Ordered, &str), Policies<'_>> = BTreeMap::new();
        for key in &ep.policies {
            let Some(p) = self.policies.get(key) else {
                continue;
            };
            if !p.policy.types.contains(&ty) {
                continue;
            }
            let tier = p.policy.tier.as_str();
            let info = self.tiers.get(tier);
            let tier_order = info.and_then(|t| t.order).unwrap_or(DEFAULT_TIER_ORDER);
            by_tier
                .entry((Ordered(tier_order), tier))
                .or_insert_with(|| (info.is_some_and(|t| t.pass), Vec::new()))
                .1
                .push((Ordered(p.policy.order.unwrap_or(f64::INFINITY)), &p.name));
        }
        by_tier
            .into_values()
            .map(|(pass, mut ps)| {
                ps.sort();
                TierPolicies {
                    chains: ps
                        .iter()
                        .map(|(_, n)| render::policy_chain(dir, n))
                        .collect(),
                    pass_by_default: pass,
                }
            })
            .collect()
    }

    pub(super) fn render_routes(&mut self) {
        let mut routes = BTreeMap::new();
        for (cidr, block) in &self.blocks {
            match &block.owner {
                Some(owner) if *owner == self.nodename => {
                    routes.insert(*cidr, RouteTarget::Blackhole);
                }
                Some(owner) => {
                    if let Some(ip) = self.node_ips.get(owner).and_then(NodeIps::get) {
                        routes.insert(*cidr, RouteTarget::Via(ip));
                    }
                }
                None => {}
            }
            // Addresses borrowed from the block by other hosts go to those hosts, also out of
            // our own block (past its blackhole); ours are local endpoint routes below.
            for (addr, node) in &block.borrowed {
                if *node == self.nodename {
                    continue;
                }
                if let Some(ip) = self.node_ips.get(node).and_then(NodeIps::get) {
                    routes.insert(Ipv4Net::from(*addr), RouteTarget::Via(ip));
                }
            }
        }
        for ep in self.local.values().filter(|e| !e.host) {
            for n in &ep.nets {
                routes.insert(*n, RouteTarget::Dev(ep.iface.clone()));
            }
        }
        self.desired.routes = routes;
        self.desired.interfaces = self.workload_ifaces();
    }
}

/// An f64 that sorts (orders are never NaN: the model forbids it).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Ordered(f64);
impl Eq for Ordered {}
impl PartialOrd for Ordered {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Ordered {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}
