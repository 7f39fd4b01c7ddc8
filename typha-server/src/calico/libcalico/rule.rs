//! Rules as libcalico-go's `model.Rule` (libcalico-go/lib/backend/model/rule.go), with ports and
//! protocols as `numorstring` writes them.
//!
//! Field order is the struct's: action, ip_version, protocol, !protocol, icmp_type, icmp_code,
//! !icmp_type, !icmp_code, the source fields (nets, selector, ports, service), the destination
//! fields (selector *before* nets, as declared), the negated source and destination fields,
//! the `orig_*` fields Calico keeps for Felix's rule ids, then http and metadata.

use typha_protocol::model::{Action, EntityRule, Port, Protocol, Rule};

use super::json::{Escape, Json, Obj};
use super::path::go_cidr;

/// `[]model.Rule`.
pub(super) fn rules(j: &mut Json, rules: &[Rule]) {
    j.array(rules, rule);
}

fn rule(j: &mut Json, r: &Rule) {
    j.object(|o| {
        o.str(
            "action",
            match r.action {
                Action::Allow => "allow",
                Action::Deny => "deny",
                Action::Log => "log",
                Action::Pass => "next-tier",
            },
        );
        if let Some(v) = r.ip_version {
            o.field("ip_version").uint(u64::from(v));
        }
        if let Some(p) = r.protocol {
            protocol_as_given(o.field("protocol"), p, r.detail.protocol_number);
        }
        if let Some(p) = r.not_protocol {
            protocol_as_given(o.field("!protocol"), p, r.detail.not_protocol_number);
        }
        if let Some(i) = r.icmp {
            o.field("icmp_type").uint(u64::from(i.icmp_type));
            if let Some(c) = i.code {
                o.field("icmp_code").uint(u64::from(c));
            }
        }
        if let Some(i) = r.not_icmp {
            o.field("!icmp_type").uint(u64::from(i.icmp_type));
            if let Some(c) = i.code {
                o.field("!icmp_code").uint(u64::from(c));
            }
        }
        let (s, d) = (&r.src, &r.dst);
        nets(o, "src_nets", s);
        o.str_ne("src_selector", &s.selector);
        ports(o, "src_ports", &s.ports);
        service(o, "src_service", "src_service_ns", s);
        o.str_ne("dst_selector", &d.selector);
        nets(o, "dst_nets", d);
        ports(o, "dst_ports", &d.ports);
        service(o, "dst_service", "dst_service_ns", d);
        not_nets(o, "!src_nets", s);
        o.str_ne("!src_selector", &s.not_selector);
        ports(o, "!src_ports", &s.not_ports);
        o.str_ne("!dst_selector", &d.not_selector);
        not_nets(o, "!dst_nets", d);
        ports(o, "!dst_ports", &d.not_ports);
        // The `orig_*` fields: the rule's selectors as written (Felix hashes them into the
        // rule's id).
        o.str_ne("orig_src_selector", &r.detail.orig_src_selector);
        o.str_ne("orig_src_namespace_selector", &s.namespace_selector);
        o.str_ne("orig_dst_selector", &r.detail.orig_dst_selector);
        o.str_ne("orig_dst_namespace_selector", &d.namespace_selector);
        o.str_ne("!orig_src_selector", &s.not_selector);
        o.str_ne("!orig_dst_selector", &d.not_selector);
        o.strings_ne("orig_src_service_acct_names", &s.service_account_names);
        o.str_ne(
            "orig_src_service_acct_selector",
            &s.service_account_selector,
        );
        o.strings_ne("orig_dst_service_acct_names", &d.service_account_names);
        o.str_ne(
            "orig_dst_service_acct_selector",
            &d.service_account_selector,
        );
        if let Some(h) = &r.http {
            // apiv3.HTTPPath is `{"exact"}` or `{"prefix"}`; our model keeps the path only,
            // so every path is sent as an exact match.
            o.field("http").object(|o| {
                o.strings_ne("methods", &h.methods);
                if !h.paths.is_empty() {
                    o.field("paths").array(&h.paths, |j, p| {
                        j.object(|o| o.str("exact", p));
                    });
                }
            });
        }
        // `model.RuleMetadata`: Felix writes each annotation as a comment on the rule's
        // iptables lines.
        if !r.detail.annotations.is_empty() {
            o.field("metadata").object(|o| {
                o.field("annotations")
                    .string_map(&r.detail.annotations, Escape::Jsoniter);
            });
        }
    });
}

fn nets(o: &mut Obj<'_>, name: &str, e: &EntityRule) {
    if !e.nets.is_empty() {
        let n: Vec<String> = e.nets.iter().map(go_cidr).collect();
        o.field(name).strings(&n, Escape::Std);
    }
}

fn not_nets(o: &mut Obj<'_>, name: &str, e: &EntityRule) {
    if !e.not_nets.is_empty() {
        let n: Vec<String> = e.not_nets.iter().map(go_cidr).collect();
        o.field(name).strings(&n, Escape::Std);
    }
}

fn service(o: &mut Obj<'_>, name: &str, ns: &str, e: &EntityRule) {
    if let Some(s) = &e.service {
        o.str_ne(name, &s.name);
        o.str_ne(ns, &s.namespace);
    }
}

/// `[]numorstring.Port`: a single port as a number, a range as `"a:b"`, a name as itself.
fn ports(o: &mut Obj<'_>, name: &str, ps: &[Port]) {
    if ps.is_empty() {
        return;
    }
    o.field(name).array(ps, |j, p| match p {
        Port::Range { first, last } if first == last => j.uint(u64::from(*first)),
        Port::Range { first, last } => j.string(&format!("{first}:{last}"), Escape::Std),
        Port::Named(n) => j.string(n, Escape::Std),
    });
}

/// A rule's protocol as Calico's `ToV1` leaves it: a number when the resource gave one
/// (`RuleDetail::protocol_number`), else as [`protocol`] writes it.
fn protocol_as_given(j: &mut Json, p: Protocol, number: bool) {
    if number {
        j.uint(u64::from(p.number()));
    } else {
        protocol(j, p);
    }
}

/// `numorstring.Protocol` in its v1 form for a protocol given by name: Calico lower-cases
/// protocol names (`ToV1`); the protocols without a name are numbers.
pub(super) fn protocol(j: &mut Json, p: Protocol) {
    match p {
        Protocol::Tcp => j.string("tcp", Escape::Std),
        Protocol::Udp => j.string("udp", Escape::Std),
        Protocol::Icmp => j.string("icmp", Escape::Std),
        Protocol::IcmpV6 => j.string("icmpv6", Escape::Std),
        Protocol::Sctp => j.string("sctp", Escape::Std),
        Protocol::UdpLite => j.string("udplite", Escape::Std),
        Protocol::Number(n) => j.uint(u64::from(n)),
    }
}
