//! Policies, profiles and tiers as libcalico-go's `model.Policy` (policy.go),
//! `model.ProfileRules` and the profile labels map (profile.go), the v3 `Profile` the felix
//! syncer also sends, and `model.Tier` (tier.go).

use typha_protocol::model::{Labels, Policy, PolicyKey, PolicyKind, PolicyType, ProfileRules};

use super::json::{Escape, Json};
use super::path::CalicoKey;
use super::rule::rules;

/// The prefix our conversion gives converted Kubernetes NetworkPolicies (as Calico before 3.30
/// did); Calico 3.32 keys them by the Kubernetes name alone.
const KNP_PREFIX: &str = "knp.default.";

/// `model.PolicyKey`: `/calico/v1/policy/<Kind>/<namespace>/<name>`.
pub(super) fn policy_key(k: &PolicyKey) -> CalicoKey {
    let name = match k.kind {
        PolicyKind::KubernetesNetworkPolicy => k.name.strip_prefix(KNP_PREFIX).unwrap_or(&k.name),
        _ => &k.name,
    };
    CalicoKey::Policy {
        kind: k.kind.as_str().to_owned(),
        namespace: k.namespace.clone().unwrap_or_default(),
        name: name.to_owned(),
    }
}

/// The key Calico before 3.30 used for the same policy: the tier in the path and the kind
/// folded into the name (`<ns>/knp.default.<name>`, `staged:` for staged kinds,
/// `staged:knp.default.` for staged Kubernetes ones, `kcnp.` for ClusterNetworkPolicies), which
/// is what libcalico-go's `parseLegacyPolicyName` reads back.
pub(super) fn legacy_policy_key(k: &PolicyKey, tier: &str) -> CalicoKey {
    let bare = k.name.strip_prefix(KNP_PREFIX).unwrap_or(&k.name);
    let name = match k.kind {
        PolicyKind::KubernetesNetworkPolicy => format!("{KNP_PREFIX}{bare}"),
        PolicyKind::StagedNetworkPolicy | PolicyKind::StagedGlobalNetworkPolicy => {
            format!("staged:{}", k.name)
        }
        PolicyKind::StagedKubernetesNetworkPolicy => format!("staged:{KNP_PREFIX}{}", k.name),
        PolicyKind::KubernetesClusterNetworkPolicy => format!("kcnp.{}", k.name),
        _ => k.name.clone(),
    };
    let name = match &k.namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name,
    };
    CalicoKey::LegacyPolicy {
        tier: tier.to_owned(),
        name,
    }
}

/// `model.Policy`: namespace, tier, order, inbound_rules, outbound_rules, selector (always),
/// untracked, pre_dnat, apply_on_forward, types (lower case), performance_hints,
/// staged_action. Our model has no annotations, which Go leaves out when empty.
pub(super) fn policy(p: &Policy) -> Vec<u8> {
    let mut j = Json::new();
    j.object(|o| {
        o.str_ne("namespace", &p.namespace);
        o.str_ne("tier", &p.tier);
        if let Some(order) = p.order {
            o.field("order").float(order);
        }
        if !p.inbound_rules.is_empty() {
            rules(o.field("inbound_rules"), &p.inbound_rules);
        }
        if !p.outbound_rules.is_empty() {
            rules(o.field("outbound_rules"), &p.outbound_rules);
        }
        o.str("selector", &p.selector);
        o.bool_ne("untracked", p.untracked);
        o.bool_ne("pre_dnat", p.pre_dnat);
        o.bool_ne("apply_on_forward", p.apply_on_forward);
        let types: Vec<&str> = p
            .types
            .iter()
            .map(|t| match t {
                PolicyType::Ingress => "ingress",
                PolicyType::Egress => "egress",
            })
            .collect();
        o.strings_ne("types", &types);
        o.strings_ne("performance_hints", &p.performance_hints);
        if let Some(a) = &p.staged_action {
            o.str("staged_action", a);
        }
    });
    j.into_bytes()
}

/// `model.ProfileRules`: both lists `omitempty`, so a profile without rules is `{}`.
pub(super) fn profile_rules(r: &ProfileRules) -> Vec<u8> {
    let mut j = Json::new();
    j.object(|o| {
        if !r.inbound_rules.is_empty() {
            rules(o.field("inbound_rules"), &r.inbound_rules);
        }
        if !r.outbound_rules.is_empty() {
            rules(o.field("outbound_rules"), &r.outbound_rules);
        }
    });
    j.into_bytes()
}

/// The profile labels key's value: a plain `map[string]string`, marshalled by json-iterator.
pub(super) fn profile_labels(l: &Labels) -> Vec<u8> {
    let mut j = Json::new();
    j.string_map(l, Escape::Jsoniter);
    j.into_bytes()
}

/// `model.Tier` from a v3 Tier's spec (`order`, `defaultAction`): Calico's processor sends the
/// order as it is and the default action as `Pass` when the spec says so, else `Deny`.
pub(super) fn tier(spec: &serde_json::Value) -> Vec<u8> {
    let mut j = Json::new();
    j.object(|o| {
        if let Some(order) = spec.get("order").and_then(serde_json::Value::as_f64) {
            o.field("order").float(order);
        }
        let pass = spec
            .get("defaultAction")
            .and_then(serde_json::Value::as_str)
            == Some("Pass");
        o.str("defaultAction", if pass { "Pass" } else { "Deny" });
    });
    j.into_bytes()
}
