//! Policy and profile rules: actions, protocols, ICMP, ports, and the source and destination
//! selectors with their namespace and service-account scoping.

use typha_protocol::model::{
    Action, EntityRule, HttpMatch, Icmp, Port, Protocol, Rule, RuleDetail, ServiceMatch,
};

use super::context::{ConvertError, Cx, given_as_number};
use super::selector;
use crate::calico::v3::{ActionSpec, EntityRuleSpec, IcmpSpec, PortSpec, RuleSpec};

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
        .map(|(i, r)| {
            let mut out = rule(&cx.at(&format!("{field}[{i}]")), r, ns)?;
            // Calico keeps a protocol given as a number a number (Felix writes `-p 6`).
            out.detail.protocol_number = given_as_number(r.protocol.as_ref());
            out.detail.not_protocol_number = given_as_number(r.not_protocol.as_ref());
            Ok(out)
        })
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
    // Calico's validator: without a protocol, only named ports (a named port of any protocol,
    // as Felix matches it); with one, ports only if it has them.
    let port_lists = [&src.ports, &src.not_ports, &dst.ports, &dst.not_ports];
    let ports_ok = match protocol {
        None => port_lists
            .iter()
            .all(|ps| ps.iter().all(|p| matches!(p, Port::Named(_)))),
        Some(p) => p.has_ports() || port_lists.iter().all(|ps| ps.is_empty()),
    };
    if !ports_ok {
        return Err(cx.err(
            "port numbers need protocol TCP, UDP or SCTP, and ports a protocol that has them",
        ));
    }
    // Calico passes ICMP matches on whatever the protocol (Felix's dataplane decides what they
    // mean), and one with a code but no type as no match at all (Felix ignores the code).
    let icmp = icmp_match(&cx.at(&f("icmp")), r.icmp.as_ref())?;
    let not_icmp = icmp_match(&cx.at(&f("notICMP")), r.not_icmp.as_ref())?;
    if icmp.is_some() && !matches!(protocol, Some(Protocol::Icmp | Protocol::IcmpV6)) {
        cx.at(&f("icmp"))
            .pass("an ICMP match needs protocol ICMP or ICMPv6; passed on as Calico does");
    }
    Ok(Rule {
        action: action(&cx.at(&f("action")), &r.action)?,
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
        nets: cx.nets(&format!("{field}.nets"), &e.nets),
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
        not_nets: cx.nets(&format!("{field}.notNets"), &e.not_nets),
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

/// Calico lower-cases a rule's action and passes on anything; Felix knows `allow`, `deny`,
/// `log` and `pass` (and takes an empty one for allow), and stops on any other. We take the
/// four in any case and refuse the rest, missing or empty included: a deliberate difference.
fn action(cx: &Cx<'_>, a: &ActionSpec) -> Result<Action, ConvertError> {
    let action = match a.0.to_ascii_lowercase().as_str() {
        "allow" => Action::Allow,
        "deny" => Action::Deny,
        "log" => Action::Log,
        "pass" => Action::Pass,
        _ => return Err(cx.err(format!("{:?} is not Allow, Deny, Log or Pass", a.0))),
    };
    if !matches!(a.0.as_str(), "Allow" | "Deny" | "Log" | "Pass") {
        cx.pass(format!(
            "{:?} is not in Calico's spelling; read as {action:?}",
            a.0
        ));
    }
    Ok(action)
}

/// A port as Calico's `numorstring.Port` reads it and its validator accepts: a number or
/// `first:last` of numbers 1-65535, or a Kubernetes port name.
fn port(cx: &Cx<'_>, p: &PortSpec) -> Result<Port, ConvertError> {
    let text = match p {
        PortSpec::Number(n) => return range(cx, *n, *n),
        PortSpec::Text(t) => t.as_str(),
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let num = |s: &str| {
        s.parse::<u16>()
            .map_err(|_| cx.err(format!("bad port {text:?}")))
    };
    if digits(text) {
        let n = num(text)?;
        return range(cx, n, n);
    }
    if let Some((a, b)) = text.split_once(':')
        && digits(a)
        && digits(b)
    {
        return range(cx, num(a)?, num(b)?);
    }
    let syntax_ok = !text.is_empty()
        && text.len() <= 128
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if !syntax_ok {
        return Err(cx.err(format!(
            "{text:?} is not a port, a range a:b or a port name"
        )));
    }
    if !kubernetes_port_name(text) {
        return Err(cx.err(format!(
            "{text:?} is not a Kubernetes port name (1-15 of a-z, 0-9 and inner single '-', \
             a letter among them)"
        )));
    }
    Ok(Port::Named(text.to_owned()))
}

fn range(cx: &Cx<'_>, first: u16, last: u16) -> Result<Port, ConvertError> {
    if first > last {
        return Err(cx.err(format!("port range {first}:{last} has first > last")));
    }
    if first == 0 {
        return Err(cx.err("port 0 is not a port"));
    }
    Ok(Port::Range { first, last })
}

/// Kubernetes' rule for port names (`IsValidPortName`), which Calico's validator applies to a
/// rule's named ports.
pub(super) fn kubernetes_port_name(s: &str) -> bool {
    s.len() <= 15
        && !s.is_empty()
        && s.bytes()
            .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'-'))
        && s.bytes().any(|b| b.is_ascii_lowercase())
        && !s.contains("--")
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// An ICMP match: `None` for none, and for a code without a type, which Felix ignores.
fn icmp_match(cx: &Cx<'_>, i: Option<&IcmpSpec>) -> Result<Option<Icmp>, ConvertError> {
    let Some(i) = i else {
        return Ok(None);
    };
    let code = i
        .code
        .map(|c| u8::try_from(c).map_err(|_| cx.err("code must be 0-255")))
        .transpose()?;
    let Some(t) = i.icmp_type else {
        if code.is_some() {
            cx.skip("an ICMP code without a type matches nothing more; ignored");
        }
        return Ok(None);
    };
    let icmp_type = u8::try_from(t)
        .ok()
        .filter(|t| *t <= 254)
        .ok_or_else(|| cx.err("type must be 0-254"))?;
    Ok(Some(Icmp { icmp_type, code }))
}
