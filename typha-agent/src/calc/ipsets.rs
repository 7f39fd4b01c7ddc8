//! Rule ipsets: which addresses of the whole cluster each rule selector matches, kept up to
//! date one endpoint change at a time.
//!
//! Every endpoint of the cluster (workload and host endpoints, network sets) is indexed with its
//! own labels and profiles, so that labels inherited from a profile (a namespace's) count. A set
//! is defined by a [`SetDef`] and exists while some active rule refers to it (reference counted).
//!
//! Cost: an endpoint change is evaluated only against the sets whose selector could match it.
//! Each selector is indexed under one `label == value` term it requires (a conjunct), or kept
//! in a short list of unindexed sets. A new set is filled by one pass over the endpoints at the
//! next flush, so the thousands of sets created at start-up cost one pass together.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use ipnet::Ipv4Net;
use typha_protocol::model::{EndpointPort, Labels};
use typha_protocol::selector::{NAMESPACE_LABEL, Selector};

use crate::dataplane::{Desired, Dirty, IPSET_PREFIX, IpSet, IpSetKind, canonical_net, hash_b64};

/// What a set holds.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SetDef {
    /// The addresses of every endpoint and network set matching the selector.
    Selector(Selector),
    /// `ip,proto:port` of every endpoint matching the selector that has a port of this name
    /// and IP protocol (by number; 0 is any protocol, as Felix matches a named port in a rule
    /// without one).
    NamedPort(Selector, u8, String),
    /// A fixed list of networks (a rule with more than one CIDR).
    Nets(BTreeSet<Ipv4Net>),
}

impl SetDef {
    /// The ipset's name: Calico's scheme, a type letter and a hash of the definition.
    pub fn name(&self) -> String {
        let (letter, text) = match self {
            SetDef::Selector(s) => ('s', s.to_string()),
            SetDef::NamedPort(s, p, n) => ('n', format!("{s}\u{0}{p}\u{0}{n}")),
            SetDef::Nets(nets) => (
                'c',
                nets.iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
            ),
        };
        format!("{IPSET_PREFIX}{letter}:{}", hash_b64(&[&text], 22))
    }

    fn kind(&self) -> IpSetKind {
        match self {
            SetDef::NamedPort(..) => IpSetKind::HashIpPort,
            _ => IpSetKind::HashNet,
        }
    }

    fn selector(&self) -> Option<&Selector> {
        match self {
            SetDef::Selector(s) | SetDef::NamedPort(s, ..) => Some(s),
            SetDef::Nets(_) => None,
        }
    }
}

/// Which endpoint: its key path.
pub type EpId = Arc<str>;

/// An endpoint as the index sees it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EpData {
    /// Own labels.
    pub labels: Labels,
    /// Profiles, whose labels it inherits (own labels win).
    pub profiles: Vec<String>,
    /// IPv4 networks (/32 for endpoints).
    pub nets: Vec<Ipv4Net>,
    /// Named ports.
    pub ports: Vec<EndpointPort>,
}

#[derive(Debug)]
struct Ep {
    data: EpData,
    /// Sets this endpoint contributes to, with the set's generation.
    in_sets: Vec<(String, u64)>,
}

#[derive(Debug)]
struct SetState {
    def: SetDef,
    generation: u64,
    refs: usize,
    /// Member → how many endpoints contribute it.
    counts: HashMap<String, u32>,
    index_term: Option<(String, String)>,
}

/// The ipsets of the cluster's endpoints.
#[derive(Debug, Default)]
pub struct IpSetIndex {
    eps: HashMap<EpId, Ep>,
    profile_labels: HashMap<String, Labels>,
    profile_users: HashMap<String, HashSet<EpId>>,
    sets: HashMap<String, SetState>,
    by_term: HashMap<(String, String), HashSet<String>>,
    unindexed: HashSet<String>,
    pending_scan: HashSet<String>,
    next_generation: u64,
}

/// Where set changes go: the desired sets and the dirty marks.
#[derive(Debug)]
pub struct SetSink<'a> {
    /// Desired ipsets, updated in place.
    pub sets: &'a mut BTreeMap<String, IpSet>,
    /// Names of sets that changed.
    pub dirty: &'a mut BTreeSet<String>,
}

impl IpSetIndex {
    /// Number of endpoints indexed.
    pub fn endpoints(&self) -> usize {
        self.eps.len()
    }

    /// Number of live sets.
    pub fn sets(&self) -> usize {
        self.sets.len()
    }

    /// Adds a reference to the set `def`, creating it (empty, filled at the next
    /// [`IpSetIndex::scan`]) if it is new. Returns its name.
    pub fn add_ref(&mut self, def: &SetDef, out: &mut SetSink<'_>) -> String {
        let name = def.name();
        if let Some(s) = self.sets.get_mut(&name) {
            s.refs += 1;
            return name;
        }
        self.next_generation += 1;
        let index_term = def.selector().and_then(index_term);
        match &index_term {
            Some(t) => {
                self.by_term
                    .entry(t.clone())
                    .or_default()
                    .insert(name.clone());
            }
            None => {
                self.unindexed.insert(name.clone());
            }
        }
        let mut state = SetState {
            def: def.clone(),
            generation: self.next_generation,
            refs: 1,
            counts: HashMap::new(),
            index_term,
        };
        let mut members = BTreeSet::new();
        if let SetDef::Nets(nets) = def {
            for n in nets {
                let m = canonical_net(n);
                state.counts.insert(m.clone(), 1);
                members.insert(m);
            }
        } else {
            self.pending_scan.insert(name.clone());
        }
        self.sets.insert(name.clone(), state);
        out.sets.insert(
            name.clone(),
            IpSet {
                kind: Some(def.kind()),
                members,
            },
        );
        out.dirty.insert(name.clone());
        name
    }

    /// Drops a reference; the set goes when the last one does.
    pub fn remove_ref(&mut self, name: &str, out: &mut SetSink<'_>) {
        let Some(s) = self.sets.get_mut(name) else {
            return;
        };
        s.refs = s.refs.saturating_sub(1);
        if s.refs > 0 {
            return;
        }
        if let Some(s) = self.sets.remove(name) {
            match &s.index_term {
                Some(t) => {
                    if let Some(names) = self.by_term.get_mut(t) {
                        names.remove(name);
                        if names.is_empty() {
                            self.by_term.remove(t);
                        }
                    }
                }
                None => {
                    self.unindexed.remove(name);
                }
            }
        }
        self.pending_scan.remove(name);
        out.sets.remove(name);
        out.dirty.insert(name.to_string());
    }

    /// Adds, changes (`Some`) or removes (`None`) an endpoint.
    pub fn set_endpoint(&mut self, id: &EpId, data: Option<EpData>, out: &mut SetSink<'_>) {
        if self
            .eps
            .get(id)
            .is_some_and(|old| data.as_ref() == Some(&old.data))
        {
            return;
        }
        if let Some(old) = self.eps.remove(id) {
            self.withdraw(&old.data, &old.in_sets, out);
            for p in &old.data.profiles {
                if let Some(users) = self.profile_users.get_mut(p) {
                    users.remove(id);
                    if users.is_empty() {
                        self.profile_users.remove(p);
                    }
                }
            }
        }
        let Some(data) = data else {
            return;
        };
        for p in &data.profiles {
            self.profile_users
                .entry(p.clone())
                .or_default()
                .insert(id.clone());
        }
        let mut ep = Ep {
            data,
            in_sets: Vec::new(),
        };
        let candidates = self.candidates(&ep.data);
        for name in candidates {
            self.evaluate(&mut ep, &name, out);
        }
        self.eps.insert(id.clone(), ep);
    }

    /// Sets a profile's labels (`None`: the profile is gone); endpoints using it are
    /// re-evaluated.
    pub fn set_profile_labels(
        &mut self,
        profile: &str,
        labels: Option<Labels>,
        out: &mut SetSink<'_>,
    ) {
        let old = match labels {
            Some(l) => self.profile_labels.insert(profile.to_string(), l),
            None => self.profile_labels.remove(profile),
        };
        if old.as_ref() == self.profile_labels.get(profile) {
            return;
        }
        let users: Vec<EpId> = self
            .profile_users
            .get(profile)
            .map(|u| u.iter().cloned().collect())
            .unwrap_or_default();
        for id in users {
            let Some(mut ep) = self.eps.remove(&id) else {
                continue;
            };
            self.withdraw(&ep.data, &ep.in_sets, out);
            ep.in_sets.clear();
            let candidates = self.candidates(&ep.data);
            for name in candidates {
                self.evaluate(&mut ep, &name, out);
            }
            self.eps.insert(id, ep);
        }
    }

    /// Fills sets created since the last scan: one pass over every endpoint.
    pub fn scan(&mut self, out: &mut SetSink<'_>) {
        if self.pending_scan.is_empty() {
            return;
        }
        let pending = std::mem::take(&mut self.pending_scan);
        let ids: Vec<EpId> = self.eps.keys().cloned().collect();
        let pending_unindexed: Vec<String> = pending
            .iter()
            .filter(|n| self.unindexed.contains(*n))
            .cloned()
            .collect();
        for id in ids {
            let Some(mut ep) = self.eps.remove(&id) else {
                continue;
            };
            let mut names: Vec<String> = pending_unindexed.clone();
            self.for_each_label(&ep.data, |k, v| {
                if let Some(sets) = self.by_term.get(&(k.to_string(), v.to_string())) {
                    names.extend(sets.iter().filter(|n| pending.contains(*n)).cloned());
                }
            });
            names.sort_unstable();
            names.dedup();
            for name in names {
                self.evaluate(&mut ep, &name, out);
            }
            self.eps.insert(id, ep);
        }
    }

    /// Whether any set waits for a scan.
    pub fn scan_pending(&self) -> bool {
        !self.pending_scan.is_empty()
    }

    /// Whether the endpoint matches the set's selector (with inherited labels).
    fn matches(&self, def: &SetDef, data: &EpData) -> bool {
        let Some(sel) = def.selector() else {
            return false;
        };
        let lookup = |k: &str| -> Option<&str> {
            data.labels.get(k).map(String::as_str).or_else(|| {
                data.profiles
                    .iter()
                    .find_map(|p| self.profile_labels.get(p)?.get(k).map(String::as_str))
            })
        };
        sel.matches(&lookup)
    }

    /// The members `data` gives a set of this definition when it matches.
    fn members(def: &SetDef, data: &EpData) -> Vec<String> {
        match def {
            SetDef::Selector(_) => data.nets.iter().map(canonical_net).collect(),
            SetDef::NamedPort(_, proto, port_name) => {
                let mut out = Vec::new();
                for p in data.ports.iter().filter(|p| {
                    &p.name == port_name && (*proto == 0 || p.protocol.number() == *proto)
                }) {
                    let proto = proto_name(p.protocol.number());
                    for n in data.nets.iter().filter(|n| n.prefix_len() == 32) {
                        out.push(format!("{},{proto}:{}", n.addr(), p.port));
                    }
                }
                out
            }
            SetDef::Nets(_) => Vec::new(),
        }
    }

    fn evaluate(&mut self, ep: &mut Ep, name: &str, out: &mut SetSink<'_>) {
        let Some(set) = self.sets.get(name) else {
            return;
        };
        let generation = set.generation;
        if ep
            .in_sets
            .iter()
            .any(|(n, g)| n == name && *g == generation)
        {
            return;
        }
        if !self.matches(&set.def, &ep.data) {
            return;
        }
        let members = Self::members(&set.def, &ep.data);
        ep.in_sets.retain(|(n, _)| n != name);
        ep.in_sets.push((name.to_string(), generation));
        self.add_members(name, members, out);
    }

    fn add_members(&mut self, name: &str, members: Vec<String>, out: &mut SetSink<'_>) {
        let Some(set) = self.sets.get_mut(name) else {
            return;
        };
        for m in members {
            let c = set.counts.entry(m.clone()).or_insert(0);
            *c += 1;
            if *c == 1 {
                if let Some(s) = out.sets.get_mut(name) {
                    s.members.insert(m);
                }
                out.dirty.insert(name.to_string());
            }
        }
    }

    /// Takes back what an endpoint contributed.
    fn withdraw(&mut self, data: &EpData, in_sets: &[(String, u64)], out: &mut SetSink<'_>) {
        for (name, generation) in in_sets {
            let Some(set) = self.sets.get(name) else {
                continue;
            };
            if set.generation != *generation {
                continue;
            }
            let members = Self::members(&set.def, data);
            let Some(set) = self.sets.get_mut(name) else {
                continue;
            };
            for m in members {
                if let Some(c) = set.counts.get_mut(&m) {
                    *c -= 1;
                    if *c == 0 {
                        set.counts.remove(&m);
                        if let Some(s) = out.sets.get_mut(name) {
                            s.members.remove(&m);
                        }
                        out.dirty.insert(name.clone());
                    }
                }
            }
        }
    }

    fn candidates(&self, data: &EpData) -> Vec<String> {
        let mut names: Vec<String> = self.unindexed.iter().cloned().collect();
        self.for_each_label(data, |k, v| {
            if let Some(sets) = self.by_term.get(&(k.to_string(), v.to_string())) {
                names.extend(sets.iter().cloned());
            }
        });
        names.sort_unstable();
        names.dedup();
        names
    }

    /// Every effective label (own, then inherited ones the endpoint does not set itself).
    fn for_each_label(&self, data: &EpData, mut f: impl FnMut(&str, &str)) {
        for (k, v) in &data.labels {
            f(k, v);
        }
        for p in &data.profiles {
            if let Some(labels) = self.profile_labels.get(p) {
                for (k, v) in labels {
                    if !data.labels.contains_key(k) {
                        f(k, v);
                    }
                }
            }
        }
    }
}

/// A `label == value` term every match of `sel` must have, preferring one that is not the
/// namespace label (namespaces are big).
fn index_term(sel: &Selector) -> Option<(String, String)> {
    fn term(s: &Selector) -> Option<(String, String)> {
        match s {
            Selector::Eq(k, v) => Some((k.clone(), v.clone())),
            Selector::In(k, vs) if vs.len() == 1 => {
                vs.iter().next().map(|v| (k.clone(), v.clone()))
            }
            _ => None,
        }
    }
    match sel {
        Selector::And(parts) => {
            let terms: Vec<_> = parts.iter().filter_map(term).collect();
            terms
                .iter()
                .find(|(k, _)| k != NAMESPACE_LABEL)
                .or(terms.first())
                .cloned()
        }
        other => term(other),
    }
}

/// The protocol as ipset and iptables write it (`tcp`), from its number.
pub fn proto_name(number: u8) -> String {
    match number {
        1 => "icmp".into(),
        6 => "tcp".into(),
        17 => "udp".into(),
        132 => "sctp".into(),
        136 => "udplite".into(),
        n => n.to_string(),
    }
}

/// Adds and drops references to rule ipsets, writing the changes into the desired state.
pub(super) struct Refs<'a> {
    pub(super) index: &'a mut IpSetIndex,
    pub(super) sink: SetSink<'a>,
}

impl<'a> Refs<'a> {
    pub(super) fn new(
        index: &'a mut IpSetIndex,
        desired: &'a mut Desired,
        dirty: &'a mut Dirty,
    ) -> Self {
        Self {
            index,
            sink: SetSink {
                sets: &mut desired.ipsets,
                dirty: &mut dirty.ipsets,
            },
        }
    }

    pub(super) fn add(&mut self, defs: &[SetDef]) -> Vec<String> {
        defs.iter()
            .map(|d| self.index.add_ref(d, &mut self.sink))
            .collect()
    }

    pub(super) fn remove(&mut self, names: Vec<String>) {
        for n in names {
            self.index.remove_ref(&n, &mut self.sink);
        }
    }
}

#[cfg(test)]
mod tests;
