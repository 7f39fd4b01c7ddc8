//! The label index: which policies select which of this node's endpoints (with labels
//! inherited from profiles), and the rule ipsets that active policies and used profiles
//! hold references to.

use std::collections::BTreeSet;
use std::sync::Arc;

use typha_protocol::model::{Labels, Policy, PolicyKey, PolicyKind, PolicyType, ProfileRules};
use typha_protocol::selector::Selector;

use super::ipsets::{Refs, SetDef};
use super::{CalcGraph, LocalEp, PolicyEntry, render};

impl CalcGraph {
    pub(super) fn set_local(&mut self, id: &Arc<str>, ep: Option<LocalEp>) {
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

    pub(super) fn select(&mut self, key: &PolicyKey, ep: &Arc<str>) {
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

    pub(super) fn unselect(&mut self, key: &PolicyKey, ep: &Arc<str>) {
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

    pub(super) fn profile_used(&mut self, name: &str) {
        let entry = self.profiles.entry(name.to_string()).or_default();
        entry.users += 1;
        if entry.users == 1 {
            let defs = entry.rules.as_ref().map(profile_sets).unwrap_or_default();
            let mut refs = Refs::new(&mut self.index, &mut self.desired, &mut self.dirty);
            entry.sets = refs.add(&defs);
            self.dirty.chains = true;
        }
    }

    pub(super) fn profile_unused(&mut self, name: &str) {
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

    pub(super) fn set_policy(&mut self, key: &PolicyKey, policy: Option<Policy>) {
        // Staged policies are previews: never enforced. Untracked and pre-DNAT policies
        // belong to the raw and mangle tables, which this dataplane does not program.
        let policy = policy.filter(|_| !key.kind.is_staged());
        let policy = policy.filter(|p| !p.untracked && !p.pre_dnat);
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

    pub(super) fn ep_matches(&self, ep: &LocalEp, selector: &Selector) -> bool {
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

    pub(super) fn set_profile_rules(&mut self, name: &str, rules: Option<ProfileRules>) {
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

    pub(super) fn set_profile_labels(&mut self, name: &str, labels: Option<Labels>) {
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
/// policies, `kcnp.<tier>.` for ClusterNetworkPolicies, namespace first for namespaced ones.
fn policy_name(key: &PolicyKey, p: &Policy) -> String {
    let mut name = match key.kind {
        PolicyKind::KubernetesNetworkPolicy => format!("knp.default.{}", key.name),
        // Not `<tier>.<name>`, which a GlobalNetworkPolicy of the same name in that tier has.
        PolicyKind::KubernetesClusterNetworkPolicy => format!("kcnp.{}.{}", p.tier, key.name),
        _ if p.tier.is_empty() || p.tier == "default" => key.name.clone(),
        _ => format!("{}.{}", p.tier, key.name),
    };
    if let Some(ns) = &key.namespace {
        name = format!("{ns}/{name}");
    }
    name
}
