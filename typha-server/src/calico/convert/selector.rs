//! The selector text Calico's felix syncer composes for policies and rules, as text.
//!
//! Felix names a selector's IP set (and a policy group's chains) after the selector's parse
//! tree, and Calico's parser keeps the nesting it is given: `(a && b) && c` is not `a && b &&
//! c`. So to program the same dataplane as a Felix fed by Calico's Typha, the text must be
//! composed exactly as Calico's update processors compose it (v3.32,
//! `syncersv1/updateprocessors`: `networkpolicyprocessor.go`, `globalnetworkpolicyprocessor.go`,
//! `selectors.go`, `rules.go`):
//!
//! - the user's selectors are kept verbatim, inside the parentheses Calico adds;
//! - a namespace selector or service-account selector is parsed, its labels prefixed (`pcns.`,
//!   `pcsa.`) and printed canonically (Calico's `String()`, which is our [`Selector`]'s
//!   `Display`), then joined on;
//! - a namespaced policy's scoping is `projectcalico.org/namespace == '<ns>'`, single quotes;
//! - `all()` and `global()` in a namespace selector become `has(projectcalico.org/namespace)`
//!   and `!has(...)` by text replacement, as Calico does it (in a global policy's selector,
//!   over the whole joined text).
//!
//! Every selector is still parsed once, by the caller, to refuse what Typha's validation
//! filter would refuse (a selector field that does not parse makes Calico's Typha send the
//! whole policy as a deletion).

use typha_protocol::selector::{NAMESPACE_LABEL, Selector};

use super::context::SERVICE_ACCOUNT_LABEL;

/// Calico's label prefix for namespace labels in selectors.
pub(super) const NAMESPACE_PREFIX: &str = "pcns.";
/// Calico's label prefix for service-account labels in selectors.
pub(super) const SERVICE_ACCOUNT_PREFIX: &str = "pcsa.";

/// `projectcalico.org/namespace == '<ns>'`: a namespaced policy's scope, as Calico writes it.
pub(super) fn in_namespace(ns: &str) -> String {
    format!("{NAMESPACE_LABEL} == '{ns}'")
}

/// Calico's `parseSelectorAttachPrefix`: `s` parsed, every label prefixed with `prefix`, printed
/// canonically. `None` when `s` does not parse (Calico logs it and uses nothing).
pub(super) fn attach_prefix(s: &str, prefix: &str) -> Option<String> {
    Selector::parse(s)
        .ok()
        .map(|sel| sel.map_labels(&|k| format!("{prefix}{k}")).to_string())
}

/// Calico's `prefixAndAppendSelector`: `new` prefixed and joined onto `current` as
/// `(<current>) && <new>`; `current` unchanged when `new` is empty or does not parse (Calico
/// ignores such a selector; the caller says so).
pub(super) fn prefix_and_append(current: String, new: &str, prefix: &str) -> String {
    if new.is_empty() {
        return current;
    }
    match attach_prefix(new, prefix) {
        Some(p) if current.is_empty() => p,
        Some(p) => format!("({current}) && {p}"),
        None => current,
    }
}

/// The selector of a namespaced policy (NetworkPolicy, its staged forms, Kubernetes
/// NetworkPolicies) in namespace `ns`.
pub(super) fn namespaced_policy(selector: &str, ns: &str, service_account: &str) -> String {
    let scope = in_namespace(ns);
    let sel = if selector.is_empty() {
        scope
    } else {
        format!("({selector}) && {scope}")
    };
    prefix_and_append(sel, service_account, SERVICE_ACCOUNT_PREFIX)
}

/// The selector of a global policy (GlobalNetworkPolicy, its staged form, Kubernetes
/// ClusterNetworkPolicies).
pub(super) fn global_policy(selector: &str, namespace: &str, service_account: &str) -> String {
    let mut sel = selector.to_owned();
    if !namespace.is_empty() {
        sel = prefix_and_append(sel, namespace, NAMESPACE_PREFIX)
            .replace("all()", &format!("has({NAMESPACE_LABEL})"));
    }
    if !service_account.is_empty() {
        sel = prefix_and_append(sel, service_account, SERVICE_ACCOUNT_PREFIX)
            .replace("all()", &format!("has({SERVICE_ACCOUNT_LABEL})"));
    }
    sel
}

/// What a rule's `serviceAccounts` match becomes (Calico's `parseServiceAccounts`): the
/// selector prefixed, the names as `projectcalico.org/serviceaccount in {...}` (canonical:
/// sorted, without repeats), both joined. Empty when there is neither, or when the names do not
/// make a selector (a name holding a quote: Calico then drops the whole match and logs it).
pub(super) fn service_accounts(selector: &str, names: &[String]) -> String {
    let prefixed = if selector.is_empty() {
        String::new()
    } else {
        attach_prefix(selector, SERVICE_ACCOUNT_PREFIX).unwrap_or_default()
    };
    if names.is_empty() {
        return prefixed;
    }
    let text = format!("{SERVICE_ACCOUNT_LABEL} in {{ '{}' }}", names.join("', '"));
    let Ok(parsed) = Selector::parse(&text) else {
        return String::new();
    };
    let names = parsed.to_string();
    if prefixed.is_empty() {
        names
    } else {
        format!("({prefixed}) && ({names})")
    }
}

/// A rule's source or destination selector (Calico's `getEndpointSelector`): the namespace
/// part (the rule's namespace selector, else the policy's namespace), the service-account part
/// and the endpoint selector, parenthesised and joined. The namespace part applies only when
/// the rule selects endpoints at all (a selector, a not-selector or a namespace selector):
/// nets and ports alone are not scoped.
pub(super) fn endpoint(
    namespace_selector: &str,
    selector: &str,
    service_accounts: &str,
    not_selector: &str,
    ns: Option<&str>,
) -> String {
    let ns_sel = if !namespace_selector.is_empty() {
        attach_prefix(namespace_selector, NAMESPACE_PREFIX)
            .unwrap_or_default()
            .replace("all()", &format!("has({NAMESPACE_LABEL})"))
            .replace("global()", &format!("!has({NAMESPACE_LABEL})"))
    } else {
        ns.filter(|n| !n.is_empty())
            .map(in_namespace)
            .unwrap_or_default()
    };
    let parts: Vec<&str> = [service_accounts, selector]
        .into_iter()
        .filter(|s| !s.is_empty())
        .collect();
    let sel = match parts.as_slice() {
        [] => String::new(),
        [one] => (*one).to_owned(),
        many => format!("({})", many.join(") && (")),
    };
    let selects = !sel.is_empty() || !not_selector.is_empty() || !namespace_selector.is_empty();
    if ns_sel.is_empty() || !selects {
        sel
    } else if sel.is_empty() {
        ns_sel
    } else {
        format!("({ns_sel}) && ({sel})")
    }
}
