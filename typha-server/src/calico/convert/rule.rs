//! Policy and profile rules: actions, protocols, ICMP, ports, and the source and destination
//! selectors with their namespace and service-account scoping.

use typha_protocol::model::{
    Action, EntityRule, HttpMatch, Icmp, Port, Protocol, Rule, RuleDetail, ServiceMatch,
};

use super::context::{ConvertError, Cx};
use super::selector;
use crate::calico::v3::{ActionSpec, EntityRuleSpec, IcmpSpec, Kind, PortSpec, RuleSpec};

/// The rules at `field`; `ns` scopes their selectors to a namespaced policy's namespace.
pub(super) fn rules(
    cx: &Cx<'_>,
    field: &str,
    rules: &[RuleSpec],
    ns: Option<&str>,
) -> Result<Vec<Rule>, ConvertError> {
    rules
        .iter()
        .enumerate()
        .map(|(i, r)| rule(&cx.at(&format!("{field}[{i}]")), r, ns))
        .collect()
}

fn rule(cx: &Cx<'_>, r: &RuleSpec, ns: Option<&str>) -> Result<Rule, ConvertError> {
    let f = |sub: &str| format!("{}.{sub}", cx.field());
    let protocol = r
        .protocol
        .as_ref()
        .map(|p| cx.at(&f("protocol")).protocol(p))
        .transpose()?;
    let ip_version = match r.ip_version {
        None | Some(4) | Some(6) => r.ip_version,
        Some(v) => return Err(cx.at(&f("ipVersion")).err(format!("{v} is not 4 or 6"))),
    };
    let src = entity(cx, &f("source"), &r.source, ns)?;
    let dst = entity(cx, &f("destination"), &r.destination, ns)?;
    let has_ports = !(src.ports.is_empty()
        && src.not_ports.is_empty()
        && dst.ports.is_empty()
        && dst.not_ports.is_empty());
    // Calico's Kubernetes driver gives a ClusterNetworkPolicy's named ports no protocol (a
    // named port of any protocol, as Felix matches it); Calico's validator refuses that in the
    // kinds written through its API, and that path runs no validator.
    let named_any = cx.kind() == Kind::KubernetesClusterNetworkPolicy
        && protocol.is_none()
        && [&src.ports, &src.not_ports, &dst.ports, &dst.not_ports]
            .iter()
            .all(|ps| ps.iter().all(|p| matches!(p, Port::Named(_))));
    if has_ports && !named_any && !protocol.is_some_and(Protocol::has_ports) {
        return Err(cx.err("ports need protocol TCP, UDP, SCTP or UDPLite"));
    }
    let icmp = r
        .icmp
        .as_ref()
        .map(|i| icmp_match(&cx.at(&f("icmp")), i))
        .transpose()?;
    let not_icmp = r
        .not_icmp
        .as_ref()
        .map(|i| icmp_match(&cx.at(&f("notICMP")), i))
        .transpose()?;
    if (icmp.is_some() || not_icmp.is_some())
        && !matches!(protocol, Some(Protocol::Icmp | Protocol::IcmpV6))
    {
        return Err(cx.err("icmp needs protocol ICMP or ICMPv6"));
    }
    Ok(Rule {
        action: match r.action {
            ActionSpec::Allow => Action::Allow,
            ActionSpec::Deny => Action::Deny,
            ActionSpec::Log => Action::Log,
            ActionSpec::Pass => Action::Pass,
        },
        ip_version,
        protocol,
        not_protocol: r
            .not_protocol
            .as_ref()
            .map(|p| cx.at(&f("notProtocol")).protocol(p))
            .transpose()?,
        icmp,
        not_icmp,
        src,
        dst,
        http: r.http.as_ref().map(|h| HttpMatch {
            methods: h.methods.clone(),
            paths: h
                .paths
                .iter()
                .filter_map(|p| p.exact.clone().or_else(|| p.prefix.clone()))
                .collect(),
        }),
        detail: RuleDetail {
            orig_src_selector: r.source.selector.clone(),
            orig_dst_selector: r.destination.selector.clone(),
            annotations: r
                .metadata
                .as_ref()
                .map(|m| m.annotations.clone())
                .unwrap_or_default(),
            ..RuleDetail::default()
        },
    })
}

/// A rule's source or destination.
fn entity(
    cx: &Cx<'_>,
    field: &str,
    e: &EntityRuleSpec,
    ns: Option<&str>,
) -> Result<EntityRule, ConvertError> {
    let c = |sub: &str| cx.at(&format!("{field}.{sub}"));
    // Every selector field is checked as Typha's validation filter checks Calico's: one that
    // does not parse makes the whole policy invalid (as the `orig_*` fields carry them
    // verbatim, that includes a namespace or service-account selector Calico's composition
    // would have left out).
    for (sub, sel) in [
        ("selector", e.selector.as_str()),
        ("notSelector", e.not_selector.as_str()),
        ("namespaceSelector", e.namespace_selector.as_str()),
        (
            "serviceAccounts.selector",
            e.service_accounts
                .as_ref()
                .map_or("", |s| s.selector.as_str()),
        ),
    ] {
        if !sel.is_empty() {
            c(sub).selector(sel)?;
        }
    }
    let sa = e.service_accounts.as_ref().map_or_else(String::new, |s| {
        selector::service_accounts(&s.selector, &s.names)
    });
    let composed = selector::endpoint(&e.namespace_selector, &e.selector, &sa, &e.not_selector, ns);
    c("selector").selector(&composed)?;
    Ok(EntityRule {
        nets: cx.nets(&format!("{field}.nets"), &e.nets)?,
        selector: composed,
        namespace_selector: e.namespace_selector.clone(),
        ports: ports(cx, &format!("{field}.ports"), &e.ports)?,
        service_account_names: e
            .service_accounts
            .as_ref()
            .map(|s| s.names.clone())
            .unwrap_or_default(),
        service_account_selector: e
            .service_accounts
            .as_ref()
            .map(|s| s.selector.clone())
            .unwrap_or_default(),
        service: e
            .services
            .as_ref()
            .filter(|s| !s.name.is_empty())
            .map(|s| ServiceMatch {
                name: s.name.clone(),
                namespace: s.namespace.clone(),
            }),
        not_nets: cx.nets(&format!("{field}.notNets"), &e.not_nets)?,
        not_selector: e.not_selector.clone(),
        not_ports: ports(cx, &format!("{field}.notPorts"), &e.not_ports)?,
    })
}

fn ports(cx: &Cx<'_>, field: &str, ps: &[PortSpec]) -> Result<Vec<Port>, ConvertError> {
    ps.iter()
        .enumerate()
        .map(|(i, p)| port(&cx.at(&format!("{field}[{i}]")), p))
        .collect()
}

fn port(cx: &Cx<'_>, p: &PortSpec) -> Result<Port, ConvertError> {
    let text = match p {
        PortSpec::Number(n) => {
            return Ok(Port::Range {
                first: *n,
                last: *n,
            });
        }
        PortSpec::Text(t) => t.as_str(),
    };
    let num = |s: &str| {
        s.parse::<u16>()
            .map_err(|_| cx.err(format!("bad port {text:?}")))
    };
    if text.bytes().all(|b| b.is_ascii_digit()) && !text.is_empty() {
        let n = num(text)?;
        return Ok(Port::Range { first: n, last: n });
    }
    if let Some((a, b)) = text.split_once(':') {
        let (first, last) = (num(a)?, num(b)?);
        if first > last {
            return Err(cx.err(format!("port range {text:?} has first > last")));
        }
        return Ok(Port::Range { first, last });
    }
    let named_ok = !text.is_empty()
        && text.len() <= 128
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if named_ok {
        Ok(Port::Named(text.to_owned()))
    } else {
        Err(cx.err(format!(
            "{text:?} is not a port, a range a:b or a port name"
        )))
    }
}

fn icmp_match(cx: &Cx<'_>, i: &IcmpSpec) -> Result<Icmp, ConvertError> {
    let Some(t) = i.icmp_type else {
        return Err(cx.err("code given without type"));
    };
    let icmp_type = u8::try_from(t)
        .ok()
        .filter(|t| *t <= 254)
        .ok_or_else(|| cx.err("type must be 0-254"))?;
    let code = i
        .code
        .map(|c| u8::try_from(c).map_err(|_| cx.err("code must be 0-255")))
        .transpose()?;
    Ok(Icmp { icmp_type, code })
}
