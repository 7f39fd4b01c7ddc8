//! Policies (namespaced, global, Kubernetes and staged) and profiles; their rules are in
//! [`super::rule`].

use typha_protocol::model::{
    Key, Policy, PolicyKey, PolicyKind, PolicyType, ProfileKey, ProfileRules,
    Resource as ResourceValue, ResourceKey, ResourceKind, Value,
};
use typha_protocol::selector::{NAMESPACE_LABEL, Selector};

use super::context::{ConvertError, Cx};
use super::rule::rules;
use crate::calico::v3::{
    ObjectMeta, PolicySpec, ProfileSpec, StagedAction, StagedKubernetesPolicySpec,
    StagedPolicySpec, TierSpec, k8s_policy,
};

/// A policy of `kind`; `ns` is its namespace, `None` for a global policy.
pub(super) fn policy(
    cx: &Cx<'_>,
    kind: PolicyKind,
    ns: Option<&str>,
    name: &str,
    s: &PolicySpec,
) -> Result<Vec<(Key, Value)>, ConvertError> {
    let mut sel = cx.at("spec.selector").selector(&s.selector)?;
    if let Some(ns) = ns {
        sel = Selector::and([sel, Selector::Eq(NAMESPACE_LABEL.into(), ns.into())]);
    } else if !s.namespace_selector.is_empty() {
        let has_ns = Selector::Has(NAMESPACE_LABEL.into());
        let nssel = cx
            .at("spec.namespaceSelector")
            .selector(&s.namespace_selector)?
            .map_labels(&|k| format!("pcns.{k}"));
        // Calico replaces `all()` in the joined text, so an `all()` namespace selector still
        // demands a namespace beside a selector: replaced before joining, where `and` would
        // drop it (an empty selector adds no text, so nothing to replace).
        let global = Selector::Not(Box::new(has_ns.clone()));
        if !s.selector.trim().is_empty() {
            sel = sel.replace_all_and_global(&has_ns, &global);
        }
        sel = Selector::and([sel, nssel.replace_all_and_global(&has_ns, &global)]);
    }
    if !s.service_account_selector.is_empty() {
        let sasel = cx
            .at("spec.serviceAccountSelector")
            .selector(&s.service_account_selector)?
            .map_labels(&|k| format!("pcsa.{k}"));
        sel = Selector::and([sel, sasel]);
    }
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
            selector: sel.to_string(),
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
            Value::ProfileLabels(s.labels_to_apply.to_btree().into()),
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
