//! Policies (namespaced, global, Kubernetes and staged) and profiles; their rules are in
//! [`super::rule`].

use super::context::{ConvertError, Cx};
use super::rule::rules;
use super::selector;
use crate::calico::v3::{
    ObjectMeta, PolicySpec, ProfileSpec, StagedAction, StagedKubernetesPolicySpec,
    StagedPolicySpec, TierSpec, k8s_policy,
};
use typha_protocol::model::{
    Key, Policy, PolicyKey, PolicyKind, PolicyType, ProfileKey, ProfileRules,
    Resource as ResourceValue, ResourceKey, ResourceKind, Value,
};

/// A policy of `kind`; `ns` is its namespace, `None` for a global policy.
pub(super) fn policy(
    cx: &Cx<'_>,
    kind: PolicyKind,
    ns: Option<&str>,
    name: &str,
    s: &PolicySpec,
) -> Result<Vec<(Key, Value)>, ConvertError> {
    // The text Calico composes (`selector`): the user's selector verbatim, scoped to the
    // namespace or joined with the namespace and service-account selectors. A namespace or
    // service-account selector that does not parse is left out, as Calico leaves it out; a
    // composed selector that does not parse makes the policy invalid, as Typha's validation
    // filter makes it.
    let sel = match ns {
        Some(ns) => selector::namespaced_policy(&s.selector, ns, &s.service_account_selector),
        None => selector::global_policy(
            &s.selector,
            &s.namespace_selector,
            &s.service_account_selector,
        ),
    };
    cx.at("spec.selector").selector(&sel)?;
    let mut types = Vec::new();
    for (i, t) in s.types.iter().enumerate() {
        types.push(match t.to_ascii_lowercase().as_str() {
            "ingress" => PolicyType::Ingress,
            "egress" => PolicyType::Egress,
            _ => {
                return Err(cx
                    .at(&format!("spec.types[{i}]"))
                    .err(format!("{t:?} is not Ingress or Egress")));
            }
        });
    }
    // A ClusterNetworkPolicy's types are what Calico's Kubernetes driver made them (one per
    // non-empty rule list, possibly none), and Calico's processor fills nothing in.
    if types.is_empty() && kind != PolicyKind::KubernetesClusterNetworkPolicy {
        // What Calico's API server fills in when a policy is written without types.
        types.push(PolicyType::Ingress);
        if !s.egress.is_empty() {
            if s.ingress.is_empty() {
                types.clear();
            }
            types.push(PolicyType::Egress);
        }
    }
    types.sort();
    types.dedup();
    if s.order.is_some_and(|o| !o.is_finite()) {
        return Err(cx.at("spec.order").err("must be a finite number"));
    }
    let key = Key::Policy(PolicyKey {
        kind,
        namespace: ns.map(str::to_owned),
        name: if kind == PolicyKind::KubernetesNetworkPolicy && !name.starts_with("knp.default.") {
            format!("knp.default.{name}")
        } else {
            name.to_owned()
        },
    });
    let global = ns.is_none();
    Ok(vec![(
        key,
        Value::Policy(Policy {
            namespace: ns.unwrap_or_default().to_owned(),
            tier: if s.tier.is_empty() {
                "default".into()
            } else {
                s.tier.clone()
            },
            order: s.order,
            selector: sel,
            types,
            inbound_rules: rules(cx, "spec.ingress", &s.ingress, ns)?,
            outbound_rules: rules(cx, "spec.egress", &s.egress, ns)?,
            untracked: global && s.do_not_track,
            pre_dnat: global && s.pre_dnat,
            apply_on_forward: global && (s.apply_on_forward || s.do_not_track || s.pre_dnat),
            performance_hints: s.performance_hints.clone(),
            staged_action: None,
        }),
    )])
}

/// A staged policy of `kind` (`ns` as for [`policy`]): as Calico's felix syncer sends it, the
/// policy it stages converted as that policy is, keyed by the staged kind and its own name, with
/// `staged_action` when one is given. A staged deletion (`stagedAction: Delete`) sends nothing:
/// Calico gives it no value, so its key is deleted, and its other fields are not looked at.
pub(super) fn staged_policy(
    cx: &Cx<'_>,
    kind: PolicyKind,
    ns: Option<&str>,
    name: &str,
    s: &StagedPolicySpec,
) -> Result<Vec<(Key, Value)>, ConvertError> {
    if s.staged_action == Some(StagedAction::Delete) {
        return Ok(Vec::new());
    }
    let mut kvs = policy(cx, kind, ns, name, &s.policy)?;
    for (_, v) in &mut kvs {
        if let Value::Policy(p) = v {
            p.staged_action = s.staged_action.map(|a| a.as_str().to_owned());
        }
    }
    Ok(kvs)
}

/// A StagedKubernetesNetworkPolicy, as Calico's staged Kubernetes processor converts it: nothing
/// for `stagedAction: Delete`; otherwise the NetworkPolicy it stages converted as Calico
/// converts a Kubernetes NetworkPolicy, keyed by its staged kind and its own name (no
/// `knp.default.` prefix), with its action.
pub(super) fn staged_kubernetes_policy(
    cx: &Cx<'_>,
    ns: &str,
    name: &str,
    s: &StagedKubernetesPolicySpec,
) -> Result<Vec<(Key, Value)>, ConvertError> {
    if s.staged_action == Some(StagedAction::Delete) {
        return Ok(Vec::new());
    }
    let calico = k8s_policy::calico_spec(&serde_json::Value::Object(s.network_policy.clone()));
    let spec: PolicySpec =
        serde_json::from_value(calico).map_err(|e| cx.at("spec").err(e.to_string()))?;
    staged_policy(
        cx,
        PolicyKind::StagedKubernetesNetworkPolicy,
        Some(ns),
        name,
        &StagedPolicySpec {
            staged_action: s.staged_action,
            policy: spec,
        },
    )
}

/// A profile's rules, and its labels when it has any (none is a deletion of the labels key).
pub(super) fn profile(
    cx: &Cx<'_>,
    name: &str,
    s: &ProfileSpec,
) -> Result<Vec<(Key, Value)>, ConvertError> {
    let key = ProfileKey {
        name: name.to_owned(),
    };
    let mut out = vec![(
        Key::ProfileRules(key.clone()),
        Value::ProfileRules(ProfileRules {
            inbound_rules: rules(cx, "spec.ingress", &s.ingress, None)?,
            outbound_rules: rules(cx, "spec.egress", &s.egress, None)?,
        }),
    )];
    if !s.labels_to_apply.is_empty() {
        out.push((
            Key::ProfileLabels(key),
            Value::ProfileLabels(s.labels_to_apply.to_btree()),
        ));
    }
    Ok(out)
}

/// A tier, carried as the raw resource (order and default action): our agent orders policies by
/// their own order within tier `default`; Calico's clients get `model.Tier` from it
/// (`libcalico::route`).
pub(super) fn tier(meta: &ObjectMeta, s: &TierSpec) -> Vec<(Key, Value)> {
    vec![(
        Key::Resource(ResourceKey {
            kind: ResourceKind::Tier,
            namespace: None,
            name: meta.name.clone(),
        }),
        Value::Resource(ResourceValue {
            labels: meta.labels.to_btree(),
            // Serializing a plain struct to JSON cannot fail.
            spec_json: serde_json::to_string(s).unwrap_or_default(),
            detail: super::raw::detail(meta),
        }),
    )]
}
