//! The calculation graph: validated KVs in, the node's [`Desired`] dataplane out.
//!
//! ```text
//! update ─┬─ workload/host endpoint ──▶ local? ──▶ label index (policies × local endpoints)
//!         │                          └─▶ ipset index (every endpoint in the cluster)
//!         ├─ network set ─────────────▶ ipset index
//!         ├─ policy / tier ───────────▶ label index ──▶ active policies ──▶ their rule ipsets
//!         ├─ profile rules / labels ──▶ label index (inherited labels), ipset index
//!         └─ block / node / host IP ──▶ routes
//! flush ──▶ fill new ipsets (one pass) ──▶ render chains (if they changed) ──▶ routes
//! ```
//!
//! The label index here is the part that decides which policies apply to which of this
//! node's endpoints. A policy is *active* while it selects at least one local endpoint; only
//! active policies and the profiles of local endpoints get chains, and only their rules'
//! selectors get ipsets (as in Felix). Labels an endpoint inherits from its profiles (a
//! namespace's `pcns.*` labels arrive that way) count, the endpoint's own labels winning.

pub mod ipsets;
pub mod render;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::Ipv4Addr;
use std::sync::Arc;

use ipnet::{IpNet, Ipv4Net};
use protocol::model::{
    Block, HostEndpoint, Key, Labels, Policy, PolicyKey, PolicyKind, PolicyType, ProfileRules,
    ResourceKind, Value, WorkloadEndpoint,
};
use protocol::selector::Selector;

use self::ipsets::{EpData, EpId, IpSetIndex, SetDef, SetSink};
use self::render::{Dir, EndpointPlan, RenderConfig, RenderStats, TierPolicies};
use crate::agent::dataplane::{Desired, Dirty, RouteTarget};

/// Tier order when a tier gives none, and for the `default` tier (Calico's).
const DEFAULT_TIER_ORDER: f64 = 1_000_000.0;

/// A local endpoint: one of this node's workload (or host) endpoints.
#[derive(Debug, Clone)]
struct LocalEp {
    iface: String,
    /// A host endpoint (an interface of the node itself), not a workload.
    host: bool,
    labels: Labels,
    profiles: Vec<String>,
    nets: Vec<Ipv4Net>,
    /// Policies that select it.
    policies: BTreeSet<PolicyKey>,
}

#[derive(Debug)]
struct PolicyEntry {
    policy: Policy,
    selector: Selector,
    /// Display name and chain base (`ns/name`, `knp.default.ns/name`).
    name: String,
    /// Local endpoints it selects.
    selects: BTreeSet<Arc<str>>,
    /// Sets registered while active.
    sets: Vec<String>,
}

#[derive(Debug, Default)]
struct ProfileEntry {
    rules: Option<ProfileRules>,
    labels: Option<Labels>,
    /// Local endpoints that use it.
    users: usize,
    sets: Vec<String>,
}

/// Sizes, for metrics and the status page.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// This node's endpoints.
    pub local_endpoints: usize,
    /// Policies that select at least one of them.
    pub active_policies: usize,
    /// Policies known in the cluster.
    pub policies: usize,
    /// Endpoints of the cluster (and network sets) indexed for ipsets.
    pub indexed_endpoints: usize,
    /// ipsets.
    pub ipsets: usize,
    /// Chains.
    pub chains: usize,
    /// Routes.
    pub routes: usize,
    /// Rules not fully enforceable (see [`render`]).
    pub unsupported_rules: u64,
}

/// The calc graph for one node.
#[derive(Debug)]
pub struct CalcGraph {
    nodename: String,
    cfg: RenderConfig,
    local: BTreeMap<Arc<str>, LocalEp>,
    policies: HashMap<PolicyKey, PolicyEntry>,
    tiers: HashMap<String, f64>,
    profiles: HashMap<String, ProfileEntry>,
    index: IpSetIndex,
    blocks: BTreeMap<Ipv4Net, String>,
    node_ips: HashMap<String, NodeIps>,
    desired: Desired,
    dirty: Dirty,
    render_stats: RenderStats,
}

#[derive(Debug, Default, Clone, Copy)]
struct NodeIps {
    from_node: Option<Ipv4Addr>,
    from_host_ip: Option<Ipv4Addr>,
}

impl NodeIps {
    fn get(&self) -> Option<Ipv4Addr> {
        self.from_node.or(self.from_host_ip)
    }
}

impl CalcGraph {
    /// A graph for the node called `nodename`.
    pub fn new(nodename: impl Into<String>, cfg: RenderConfig) -> Self {
        let mut g = Self {
            nodename: nodename.into(),
            cfg,
            local: BTreeMap::new(),
            policies: HashMap::new(),
            tiers: HashMap::new(),
            profiles: HashMap::new(),
            index: IpSetIndex::default(),
            blocks: BTreeMap::new(),
            node_ips: HashMap::new(),
            desired: Desired::default(),
            dirty: Dirty::all(),
            render_stats: RenderStats::default(),
        };
        g.render_chains();
        g
    }

    /// The node's name.
    pub fn nodename(&self) -> &str {
        &self.nodename
    }

    /// The desired dataplane as of the last [`CalcGraph::flush`].
    pub fn desired(&self) -> &Desired {
        &self.desired
    }

    /// Whether updates since the last flush changed anything.
    pub fn has_changes(&self) -> bool {
        !self.dirty.is_clean() || self.index.scan_pending()
    }

    /// Sizes.
    pub fn counts(&self) -> Counts {
        Counts {
            local_endpoints: self.local.len(),
            active_policies: self
                .policies
                .values()
                .filter(|p| !p.selects.is_empty())
                .count(),
            policies: self.policies.len(),
            indexed_endpoints: self.index.endpoints(),
            ipsets: self.desired.ipsets.len(),
            chains: self.desired.chains.len(),
            routes: self.desired.routes.len(),
            unsupported_rules: self.render_stats.unsupported_rules,
        }
    }

    /// Applies one validated KV (`None`: deleted).
    pub fn on_update(&mut self, key: &Key, value: Option<Value>) {
        match (key, value) {
            (Key::WorkloadEndpoint(k), v) => {
                let id: EpId = Arc::from(key.to_string());
                let wep = match v {
                    Some(Value::WorkloadEndpoint(w)) => Some(w),
                    _ => None,
                };
                self.set_indexed(&id, wep.as_ref().map(wep_data));
                let local = if k.hostname == self.nodename {
                    wep.map(local_wep)
                } else {
                    None
                };
                self.set_local(&id, local);
            }
            (Key::HostEndpoint(k), v) => {
                let id: EpId = Arc::from(key.to_string());
                let hep = match v {
                    Some(Value::HostEndpoint(h)) => Some(h),
                    _ => None,
                };
                self.set_indexed(&id, hep.as_ref().map(hep_data));
                // Host endpoints named by interface get chains; `*` (all interfaces) and
                // address-only ones are not programmed (see docs/agent.md).
                let local = if k.hostname == self.nodename {
                    hep.filter(|h| !h.name.is_empty() && h.name != "*")
                        .map(local_hep)
                } else {
                    None
                };
                self.set_local(&id, local);
            }
            (Key::NetworkSet(_), v) => {
                let id: EpId = Arc::from(key.to_string());
                let data = match v {
                    Some(Value::NetworkSet(n)) => Some(EpData {
                        labels: n.labels,
                        profiles: n.profile_ids,
                        nets: n
                            .nets
                            .iter()
                            .filter_map(|n| match n {
                                IpNet::V4(n) => Some(n.trunc()),
                                IpNet::V6(_) => None,
                            })
                            .collect(),
                        ports: Vec::new(),
                    }),
                    _ => None,
                };
                self.set_indexed(&id, data);
            }
            (Key::Policy(k), v) => {
                let p = match v {
                    Some(Value::Policy(p)) => Some(p),
                    _ => None,
                };
                self.set_policy(k, p);
            }
            (Key::ProfileRules(k), v) => {
                let rules = match v {
                    Some(Value::ProfileRules(r)) => Some(r),
                    _ => None,
                };
                self.set_profile_rules(&k.name, rules);
            }
            (Key::ProfileLabels(k), v) => {
                let labels = match v {
                    Some(Value::ProfileLabels(l)) => Some(l),
                    _ => None,
                };
                self.set_profile_labels(&k.name, labels);
            }
            (Key::Block(k), v) => {
                let IpNet::V4(cidr) = k.cidr else { return };
                let owner = match v {
                    Some(Value::Block(b)) => block_owner(&b),
                    _ => None,
                };
                let changed = match owner {
                    Some(o) => self.blocks.insert(cidr, o.clone()) != Some(o),
                    None => self.blocks.remove(&cidr).is_some(),
                };
                self.dirty.routes |= changed;
            }
            (Key::HostIp(k), v) => {
                let ip = match v {
                    Some(Value::HostIp(std::net::IpAddr::V4(ip))) => Some(ip),
                    _ => None,
                };
                let e = self.node_ips.entry(k.hostname.clone()).or_default();
                let before = e.get();
                e.from_host_ip = ip;
                self.dirty.routes |= e.get() != before;
            }
            (Key::Resource(k), v) if k.kind == ResourceKind::Node => {
                let ip = match v {
                    Some(Value::Node(n)) => n.ipv4_address.map(|a| a.addr()),
                    _ => None,
                };
                let e = self.node_ips.entry(k.name.clone()).or_default();
                let before = e.get();
                e.from_node = ip;
                self.dirty.routes |= e.get() != before;
            }
            (Key::Resource(k), v) if k.kind == ResourceKind::Tier => {
                let order = match v {
                    Some(Value::Resource(r)) => {
                        serde_json::from_str::<serde_json::Value>(&r.spec_json)
                            .ok()
                            .and_then(|s| s.get("order").and_then(serde_json::Value::as_f64))
                    }
                    _ => None,
                };
                let old = match order {
                    Some(o) => self.tiers.insert(k.name.clone(), o),
                    None => self.tiers.remove(&k.name),
                };
                if old != order {
                    self.dirty.chains = true;
                }
            }
            _ => {}
        }
    }

    /// Finishes pending work and returns what changed since the last flush; [`desired`] is
    /// then current.
    ///
    /// [`desired`]: CalcGraph::desired
    pub fn flush(&mut self) -> Dirty {
        let mut sink = SetSink {
            sets: &mut self.desired.ipsets,
            dirty: &mut self.dirty.ipsets,
        };
        self.index.scan(&mut sink);
        if self.dirty.chains {
            self.render_chains();
        }
        if self.dirty.routes {
            self.render_routes();
        }
        std::mem::take(&mut self.dirty)
    }

    fn sink(&mut self) -> (&mut IpSetIndex, SetSink<'_>) {
        (
            &mut self.index,
            SetSink {
                sets: &mut self.desired.ipsets,
                dirty: &mut self.dirty.ipsets,
            },
        )
    }

    fn set_indexed(&mut self, id: &EpId, data: Option<EpData>) {
        let (index, mut sink) = self.sink();
        index.set_endpoint(id, data, &mut sink);
    }

    fn set_local(&mut self, id: &Arc<str>, ep: Option<LocalEp>) {
        let old = self.local.remove(id);
        let Some(mut ep) = ep else {
            if let Some(old) = old {
                self.dirty.chains = true;
                self.dirty.routes = true;
                for p in &old.policies {
                    self.unselect(p, id);
                }
                for p in &old.profiles {
                    self.profile_unused(p);
                }
            }
            return;
        };
        // Which policies select it now.
        let lookup_profiles: Vec<Option<&Labels>> = ep
            .profiles
            .iter()
            .map(|p| self.profiles.get(p).and_then(|e| e.labels.as_ref()))
            .collect();
        let lookup = |k: &str| -> Option<&str> {
            ep.labels.get(k).map(String::as_str).or_else(|| {
                lookup_profiles
                    .iter()
                    .flatten()
                    .find_map(|l| l.get(k).map(String::as_str))
            })
        };
        let selected: BTreeSet<PolicyKey> = self
            .policies
            .iter()
            .filter(|(_, p)| p.selector.matches(&lookup))
            .map(|(k, _)| k.clone())
            .collect();
        ep.policies = selected;
        let old_policies = old.as_ref().map(|o| o.policies.clone()).unwrap_or_default();
        let old_profiles = old.as_ref().map(|o| o.profiles.clone()).unwrap_or_default();
        let routes_changed = !ep.host
            && old
                .as_ref()
                .is_none_or(|o| o.nets != ep.nets || o.iface != ep.iface);
        let chains_changed = old.as_ref().is_none_or(|o| {
            o.policies != ep.policies || o.profiles != ep.profiles || o.iface != ep.iface
        });
        for p in ep.policies.difference(&old_policies) {
            self.select(p, id);
        }
        for p in &ep.profiles {
            self.profile_used(p);
        }
        for p in old_policies.difference(&ep.policies) {
            self.unselect(p, id);
        }
        for p in &old_profiles {
            self.profile_unused(p);
        }
        self.dirty.routes |= routes_changed;
        self.dirty.chains |= chains_changed;
        self.local.insert(id.clone(), ep);
    }

    fn select(&mut self, key: &PolicyKey, ep: &Arc<str>) {
        let Some(entry) = self.policies.get_mut(key) else {
            return;
        };
        let was_active = !entry.selects.is_empty();
        entry.selects.insert(ep.clone());
        if !was_active {
            let defs = policy_sets(&entry.policy);
            let mut refs = Refs::new(&mut self.index, &mut self.desired, &mut self.dirty);
            entry.sets = refs.add(&defs);
            self.dirty.chains = true;
        }
    }

    fn unselect(&mut self, key: &PolicyKey, ep: &Arc<str>) {
        let Some(entry) = self.policies.get_mut(key) else {
            return;
        };
        entry.selects.remove(ep);
        if entry.selects.is_empty() {
            let sets = std::mem::take(&mut entry.sets);
            let mut refs = Refs::new(&mut self.index, &mut self.desired, &mut self.dirty);
            refs.remove(sets);
            self.dirty.chains = true;
        }
    }

    fn profile_used(&mut self, name: &str) {
        let entry = self.profiles.entry(name.to_string()).or_default();
        entry.users += 1;
        if entry.users == 1 {
            let defs = entry.rules.as_ref().map(profile_sets).unwrap_or_default();
            let mut refs = Refs::new(&mut self.index, &mut self.desired, &mut self.dirty);
            entry.sets = refs.add(&defs);
            self.dirty.chains = true;
        }
    }

    fn profile_unused(&mut self, name: &str) {
        let Some(entry) = self.profiles.get_mut(name) else {
            return;
        };
        entry.users = entry.users.saturating_sub(1);
        if entry.users == 0 {
            let sets = std::mem::take(&mut entry.sets);
            let mut refs = Refs::new(&mut self.index, &mut self.desired, &mut self.dirty);
            refs.remove(sets);
            if entry.rules.is_none() && entry.labels.is_none() {
                self.profiles.remove(name);
            }
            self.dirty.chains = true;
        }
    }

    fn set_policy(&mut self, key: &PolicyKey, policy: Option<Policy>) {
        // Staged policies are previews: never enforced. Untracked and pre-DNAT policies
        // belong to the raw and mangle tables, which this dataplane does not program.
        let policy = policy.filter(|p| {
            !matches!(
                key.kind,
                PolicyKind::StagedNetworkPolicy | PolicyKind::StagedGlobalNetworkPolicy
            ) && !p.untracked
                && !p.pre_dnat
        });
        let selector = policy
            .as_ref()
            .and_then(|p| Selector::parse(&p.selector).ok());
        let old = self.policies.remove(key);
        let old_selects = old.as_ref().map(|o| o.selects.clone()).unwrap_or_default();
        let old_sets = old.map(|o| o.sets).unwrap_or_default();
        let mut new_sets = Vec::new();
        if let (Some(policy), Some(selector)) = (policy, selector) {
            let mut selects = BTreeSet::new();
            for (id, ep) in &self.local {
                if self.ep_matches(ep, &selector) {
                    selects.insert(id.clone());
                }
            }
            if !selects.is_empty() {
                let defs = policy_sets(&policy);
                new_sets =
                    Refs::new(&mut self.index, &mut self.desired, &mut self.dirty).add(&defs);
            }
            for id in selects.symmetric_difference(&old_selects) {
                if let Some(ep) = self.local.get_mut(id) {
                    if selects.contains(id) {
                        ep.policies.insert(key.clone());
                    } else {
                        ep.policies.remove(key);
                    }
                }
            }
            if !selects.is_empty() || !old_selects.is_empty() {
                self.dirty.chains = true;
            }
            let name = policy_name(key, &policy);
            self.policies.insert(
                key.clone(),
                PolicyEntry {
                    policy,
                    selector,
                    name,
                    selects,
                    sets: new_sets,
                },
            );
        } else {
            for id in &old_selects {
                if let Some(ep) = self.local.get_mut(id) {
                    ep.policies.remove(key);
                }
            }
            if !old_selects.is_empty() {
                self.dirty.chains = true;
            }
        }
        Refs::new(&mut self.index, &mut self.desired, &mut self.dirty).remove(old_sets);
    }

    fn ep_matches(&self, ep: &LocalEp, selector: &Selector) -> bool {
        selector.matches(&|k: &str| {
            ep.labels.get(k).map(String::as_str).or_else(|| {
                ep.profiles.iter().find_map(|p| {
                    self.profiles
                        .get(p)?
                        .labels
                        .as_ref()?
                        .get(k)
                        .map(String::as_str)
                })
            })
        })
    }

    fn set_profile_rules(&mut self, name: &str, rules: Option<ProfileRules>) {
        let entry = self.profiles.entry(name.to_string()).or_default();
        if entry.rules == rules {
            return;
        }
        entry.rules = rules;
        if entry.users > 0 {
            let defs = entry.rules.as_ref().map(profile_sets).unwrap_or_default();
            let old = std::mem::take(&mut entry.sets);
            let mut refs = Refs::new(&mut self.index, &mut self.desired, &mut self.dirty);
            entry.sets = refs.add(&defs);
            refs.remove(old);
            self.dirty.chains = true;
        } else if entry.rules.is_none() && entry.labels.is_none() {
            self.profiles.remove(name);
        }
    }

    fn set_profile_labels(&mut self, name: &str, labels: Option<Labels>) {
        let entry = self.profiles.entry(name.to_string()).or_default();
        if entry.labels == labels {
            return;
        }
        entry.labels = labels.clone();
        let used = entry.users > 0;
        if !used && entry.rules.is_none() && entry.labels.is_none() {
            self.profiles.remove(name);
        }
        {
            let (index, mut sink) = self.sink();
            index.set_profile_labels(name, labels, &mut sink);
        }
        if used {
            // Local endpoints inheriting these labels: re-evaluate their policies.
            let ids: Vec<Arc<str>> = self
                .local
                .iter()
                .filter(|(_, e)| e.profiles.iter().any(|p| p == name))
                .map(|(id, _)| id.clone())
                .collect();
            for id in ids {
                if let Some(ep) = self.local.get(&id).cloned() {
                    self.set_local(&id, Some(ep));
                }
            }
        }
    }

    fn render_chains(&mut self) {
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

    fn workload_ifaces(&self) -> BTreeSet<String> {
        self.local
            .values()
            .filter(|e| !e.host)
            .map(|e| e.iface.clone())
            .collect()
    }

    /// The endpoint's policies for one direction, grouped by tier, both in order.
    fn tiers_for(&self, ep: &LocalEp, ty: PolicyType, dir: Dir) -> Vec<TierPolicies> {
        let mut by_tier: BTreeMap<(Ordered, &str), Vec<(Ordered, &str)>> = BTreeMap::new();
        for key in &ep.policies {
            let Some(p) = self.policies.get(key) else {
                continue;
            };
            if !p.policy.types.contains(&ty) {
                continue;
            }
            let tier = p.policy.tier.as_str();
            let tier_order = self.tiers.get(tier).copied().unwrap_or(DEFAULT_TIER_ORDER);
            by_tier
                .entry((Ordered(tier_order), tier))
                .or_default()
                .push((Ordered(p.policy.order.unwrap_or(f64::INFINITY)), &p.name));
        }
        by_tier
            .into_values()
            .map(|mut ps| {
                ps.sort();
                TierPolicies {
                    chains: ps
                        .iter()
                        .map(|(_, n)| render::policy_chain(dir, n))
                        .collect(),
                }
            })
            .collect()
    }

    fn render_routes(&mut self) {
        let mut routes = BTreeMap::new();
        for (cidr, owner) in &self.blocks {
            if *owner == self.nodename {
                routes.insert(*cidr, RouteTarget::Blackhole);
            } else if let Some(ip) = self.node_ips.get(owner).and_then(NodeIps::get) {
                routes.insert(*cidr, RouteTarget::Via(ip));
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

/// Adds and drops references to rule ipsets, writing the changes into the desired state.
struct Refs<'a> {
    index: &'a mut IpSetIndex,
    sink: SetSink<'a>,
}

impl<'a> Refs<'a> {
    fn new(index: &'a mut IpSetIndex, desired: &'a mut Desired, dirty: &'a mut Dirty) -> Self {
        Self {
            index,
            sink: SetSink {
                sets: &mut desired.ipsets,
                dirty: &mut dirty.ipsets,
            },
        }
    }

    fn add(&mut self, defs: &[SetDef]) -> Vec<String> {
        defs.iter()
            .map(|d| self.index.add_ref(d, &mut self.sink))
            .collect()
    }

    fn remove(&mut self, names: Vec<String>) {
        for n in names {
            self.index.remove_ref(&n, &mut self.sink);
        }
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

fn policy_sets(p: &Policy) -> Vec<SetDef> {
    let mut defs = Vec::new();
    if p.types.contains(&PolicyType::Ingress) {
        defs.extend(render::rule_sets(&p.inbound_rules));
    }
    if p.types.contains(&PolicyType::Egress) {
        defs.extend(render::rule_sets(&p.outbound_rules));
    }
    defs.sort();
    defs.dedup();
    defs
}

fn profile_sets(r: &ProfileRules) -> Vec<SetDef> {
    let mut defs = render::rule_sets(&r.inbound_rules);
    defs.extend(render::rule_sets(&r.outbound_rules));
    defs.sort();
    defs.dedup();
    defs
}

/// Calico's names: tier-prefixed outside the default tier, `knp.default.` for Kubernetes
/// policies, namespace first for namespaced ones.
fn policy_name(key: &PolicyKey, p: &Policy) -> String {
    let mut name = match key.kind {
        PolicyKind::KubernetesNetworkPolicy => format!("knp.default.{}", key.name),
        _ if p.tier.is_empty() || p.tier == "default" => key.name.clone(),
        _ => format!("{}.{}", p.tier, key.name),
    };
    if let Some(ns) = &key.namespace {
        name = format!("{ns}/{name}");
    }
    name
}

fn block_owner(b: &Block) -> Option<String> {
    if b.deleted {
        return None;
    }
    b.affine_host().map(str::to_string)
}

fn v4(nets: &[Ipv4Net]) -> Vec<Ipv4Net> {
    nets.iter().map(Ipv4Net::trunc).collect()
}

fn wep_data(w: &WorkloadEndpoint) -> EpData {
    EpData {
        labels: w.labels.clone(),
        profiles: w.profile_ids.clone(),
        nets: v4(&w.ipv4_nets),
        ports: w.ports.clone(),
    }
}

fn hep_data(h: &HostEndpoint) -> EpData {
    EpData {
        labels: h.labels.clone(),
        profiles: h.profile_ids.clone(),
        nets: h
            .expected_ipv4_addrs
            .iter()
            .map(|a| Ipv4Net::from(*a))
            .collect(),
        ports: h.ports.clone(),
    }
}

fn local_hep(h: HostEndpoint) -> LocalEp {
    LocalEp {
        iface: h.name,
        host: true,
        labels: h.labels,
        profiles: h.profile_ids,
        nets: Vec::new(),
        policies: BTreeSet::new(),
    }
}

fn local_wep(w: WorkloadEndpoint) -> LocalEp {
    LocalEp {
        host: false,
        iface: w.name,
        labels: w.labels,
        profiles: w.profile_ids,
        nets: v4(&w.ipv4_nets),
        policies: BTreeSet::new(),
    }
}

#[cfg(test)]
mod tests;
