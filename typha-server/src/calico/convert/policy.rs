//! Policies (namespaced, global, Kubernetes and staged) and profiles; their rules are in
//! [`super::rule`].

use super::context::{ConvertError, Cx};
use super::rule::rules;
use super::selector;
use crate::calico::v3::{
    ObjectMeta, PolicySpec, ProfileSpec, Spec, StagedAction, StagedKubernetesPolicySpec,
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
    note_unreadable_selectors(cx, s, ns.is_none());
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
    let types = types(cx, kind, s)?;
    performance_hints(cx, &s.performance_hints)?;
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
    if let Some(StagedAction::Other(a)) = &s.staged_action {
        cx.at("spec.stagedAction").pass(format!(
            "{a:?} is not Set, Delete, Learn or Ignore; passed on as Calico does"
        ));
    }
    let mut kvs = policy(cx, kind, ns, name, &s.policy)?;
    for (_, v) in &mut kvs {
        if let Value::Policy(p) = v {
            p.staged_action = s.staged_action.as_ref().map(|a| a.as_str().to_owned());
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
            staged_action: s.staged_action.clone(),
            policy: spec,
        },
    )
}

/// Notes a `namespaceSelector` or `serviceAccountSelector` that does not parse: Calico's
/// processors leave such a selector out of the policy's selector (it then selects more) rather
/// than drop the policy, and so does [`selector`]'s composition. Only global policies have a
/// namespace selector.
fn note_unreadable_selectors(cx: &Cx<'_>, s: &PolicySpec, global: bool) {
    for (field, sel) in [
        ("spec.namespaceSelector", &s.namespace_selector),
        ("spec.serviceAccountSelector", &s.service_account_selector),
    ] {
        if sel.is_empty() || (!global && field == "spec.namespaceSelector") {
            continue;
        }
        if let Err(e) = cx.at(field).selector(sel) {
            cx.at(field).skip(format!(
                "{}; ignored, as Calico ignores it (the policy selects more)",
                e.reason
            ));
        }
    }
}

/// The policy's types as Felix reads them: `ingress` and `egress` in any case, others ignored.
/// A policy stored without types applies in both directions (Calico's syncers send no types,
/// which Felix reads as both; only Calico's client library fills them in, when it writes a
/// policy: [`default_types`]). One whose types are all unknown applies in no direction in
/// Felix, which our model cannot say (no types is both): it is refused, which has the same
/// effect. A Kubernetes ClusterNetworkPolicy's types are what Calico's Kubernetes driver made
/// them (one per non-empty rule list, possibly none).
fn types(cx: &Cx<'_>, kind: PolicyKind, s: &PolicySpec) -> Result<Vec<PolicyType>, ConvertError> {
    let mut types = Vec::new();
    for (i, t) in s.types.iter().enumerate() {
        let c = cx.at(&format!("spec.types[{i}]"));
        match t.to_ascii_lowercase().as_str() {
            "ingress" => types.push(PolicyType::Ingress),
            "egress" => types.push(PolicyType::Egress),
            _ => {
                c.skip(format!(
                    "{t:?} is not Ingress or Egress; ignored, as Felix ignores it"
                ));
                continue;
            }
        }
        if t != "Ingress" && t != "Egress" {
            c.pass(format!("{t:?} is not in Calico's spelling"));
        }
    }
    if kind != PolicyKind::KubernetesClusterNetworkPolicy {
        if s.types.is_empty() {
            types = vec![PolicyType::Ingress, PolicyType::Egress];
        } else if types.is_empty() {
            return Err(cx
                .at("spec.types")
                .err("none is Ingress or Egress: the policy applies in no direction"));
        }
    }
    types.sort();
    types.dedup();
    Ok(types)
}

/// What Calico's client library fills in when a policy is written without types: Ingress
/// when it has no egress rules, Egress when it has only egress rules, else both.
pub(super) fn default_types(spec: &mut Spec) {
    let p = match spec {
        Spec::NetworkPolicy(p) | Spec::GlobalNetworkPolicy(p) => p,
        Spec::StagedNetworkPolicy(s) | Spec::StagedGlobalNetworkPolicy(s) => &mut s.policy,
        _ => return,
    };
    if !p.types.is_empty() {
        return;
    }
    p.types = match (p.ingress.is_empty(), p.egress.is_empty()) {
        (_, true) => vec!["Ingress".into()],
        (true, false) => vec!["Egress".into()],
        (false, false) => vec!["Ingress".into(), "Egress".into()],
    };
}

/// Calico's validator takes `AssumeNeededOnEveryNode` only, each once; a policy with another
/// hint is dropped.
fn performance_hints(cx: &Cx<'_>, hints: &[String]) -> Result<(), ConvertError> {
    for (i, h) in hints.iter().enumerate() {
        let c = cx.at(&format!("spec.performanceHints[{i}]"));
        if h != "AssumeNeededOnEveryNode" {
            return Err(c.err(format!("{h:?} is not AssumeNeededOnEveryNode")));
        }
        if hints.get(..i).is_some_and(|before| before.contains(h)) {
            return Err(c.err(format!("{h:?} is given twice")));
        }
    }
    Ok(())
}

/// A profile's rules, and its labels when it has any (none is a deletion of the labels key).
/// As Calico's profile processor sends them, the two are independent: rules that do not
/// convert leave the rules key out (a deletion) and the labels, which endpoints inherit, in
/// place.
pub(super) fn profile(
    cx: &Cx<'_>,
    name: &str,
    s: &ProfileSpec,
) -> Result<Vec<(Key, Value)>, ConvertError> {
    let key = ProfileKey {
        name: name.to_owned(),
    };
    let mut out = Vec::new();
    let inbound = rules(cx, "spec.ingress", &s.ingress, None);
    let outbound = rules(cx, "spec.egress", &s.egress, None);
    match (inbound, outbound) {
        (Ok(inbound_rules), Ok(outbound_rules)) => out.push((
            Key::ProfileRules(key.clone()),
            Value::ProfileRules(ProfileRules {
                inbound_rules,
                outbound_rules,
            }),
        )),
        (Err(e), _) | (_, Err(e)) => cx.drop_kv(&e),
    }
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
