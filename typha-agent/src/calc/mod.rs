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
//! Parts: this file takes updates in; `labels.rs` is the label index, which decides which
//! policies apply to which of this node's endpoints; [`ipsets`] keeps the rule ipsets;
//! `output.rs` renders chains (with [`render`]) and routes.
//!
//! A policy is *active* while it selects at least one local endpoint; only
//! active policies and the profiles of local endpoints get chains, and only their rules'
//! selectors get ipsets (as in Felix). Labels an endpoint inherits from its profiles (a
//! namespace's `pcns.*` labels arrive that way) count, the endpoint's own labels winning.

pub mod ipsets;
mod labels;
mod output;
pub mod render;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::Ipv4Addr;
use std::sync::Arc;

use ipnet::{IpNet, Ipv4Net};
use typha_protocol::model::{
    Block, HostEndpoint, Key, Labels, Policy, PolicyKey, ProfileRules, ResourceKind, Value,
    WorkloadEndpoint,
};
use typha_protocol::selector::Selector;

use self::ipsets::{EpData, EpId, IpSetIndex, SetSink};
use self::render::{RenderConfig, RenderStats};
use crate::dataplane::{Desired, Dirty};

/// Tier order when a tier gives none, and for the `default` tier (Calico's).
const DEFAULT_TIER_ORDER: f64 = 1_000_000.0;

/// What a Tier resource says about its policies. A tier without one (Calico's Felix calls it
/// not valid) has the default order and drops what its policies leave, as Felix does.
#[derive(Debug, Clone, Copy, PartialEq)]
struct TierInfo {
    /// `order`; none given is [`DEFAULT_TIER_ORDER`].
    order: Option<f64>,
    /// `defaultAction: Pass`: traffic no policy of the tier decides goes on to the next tier
    /// (Calico's `kube-admin` and `kube-baseline` tiers), rather than being dropped.
    pass: bool,
}

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
    tiers: HashMap<String, TierInfo>,
    profiles: HashMap<String, ProfileEntry>,
    index: IpSetIndex,
    blocks: BTreeMap<Ipv4Net, BlockRoutes>,
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
                    Some(Value::ProfileLabels(l)) => Some(l.labels),
                    _ => None,
                };
                self.set_profile_labels(&k.name, labels);
            }
            (Key::Block(k), v) => {
                let IpNet::V4(cidr) = k.cidr else { return };
                let owner = match v {
                    Some(Value::Block(b)) => block_routes(&b),
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
                let info = match v {
                    Some(Value::Resource(r)) => {
                        serde_json::from_str::<serde_json::Value>(&r.spec_json)
                            .ok()
                            .map(|s| TierInfo {
                                order: s.get("order").and_then(serde_json::Value::as_f64),
                                pass: s.get("defaultAction").and_then(serde_json::Value::as_str)
                                    == Some("Pass"),
                            })
                    }
                    _ => None,
                };
                let old = match info {
                    Some(i) => self.tiers.insert(k.name.clone(), i),
                    None => self.tiers.remove(&k.name),
                };
                if old != info {
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
        let (index, mut sink) = self.sink();
        index.scan(&mut sink);
        if self.dirty.chains {
            self.render_chains();
        }
        if self.dirty.routes {
            self.render_routes();
        }
        std::mem::take(&mut self.dirty)
    }

    fn sink(&mut self) -> (&mut IpSetIndex, SetSink<'_>) {
        let r = ipsets::Refs::new(&mut self.index, &mut self.desired, &mut self.dirty);
        (r.index, r.sink)
    }

    fn set_indexed(&mut self, id: &EpId, data: Option<EpData>) {
        let (index, mut sink) = self.sink();
        index.set_endpoint(id, data, &mut sink);
    }
}

/// Where a block's addresses live: the block with its affine host, and each address another
/// host borrowed from it with that host (from the allocation table's `node` attribute, as
/// Felix's route resolver finds them).
#[derive(Debug, Clone, PartialEq, Eq)]
struct BlockRoutes {
    owner: Option<String>,
    borrowed: Vec<(Ipv4Addr, String)>,
}

fn block_routes(b: &Block) -> Option<BlockRoutes> {
    let IpNet::V4(cidr) = b.cidr else { return None };
    if b.deleted {
        return None;
    }
    let owner = b.affine_host().map(str::to_string);
    let size = b.table.allocations.as_ref().map_or(0, Vec::len);
    let base = u32::from(cidr.network());
    let borrowed: Vec<(Ipv4Addr, String)> = (0..size)
        .filter_map(|ordinal| {
            let node = b.table.node_of(ordinal)?;
            if Some(node) == owner.as_deref() {
                return None;
            }
            let ip = Ipv4Addr::from(base.checked_add(u32::try_from(ordinal).ok()?)?);
            cidr.contains(&ip).then(|| (ip, node.to_owned()))
        })
        .collect();
    (owner.is_some() || !borrowed.is_empty()).then_some(BlockRoutes { owner, borrowed })
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
