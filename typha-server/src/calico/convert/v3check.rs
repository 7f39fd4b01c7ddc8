//! The checks Calico's Typha makes with Calico's v3 validator on the v3 objects it sends whole
//! (BGP settings, peers and filters, node status requests, the v3 Node): an object that fails
//! is sent as a deletion. Each check here is one of those rules, in our words; what is not
//! checked is listed in `docs/calico-conversion.md` ("Invalid content").

use std::net::IpAddr;

use base64::Engine;

use crate::calico::v3::ObjectMeta;

/// A field that fails a check, and why.
pub(super) type Problem = (String, String);

/// Kubernetes' DNS-1123 label: 1-63 of a-z, 0-9 and `-`, starting and ending alphanumeric.
pub(super) fn dns1123_label(s: &str) -> bool {
    (1..=63).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// Kubernetes' DNS-1123 subdomain: at most 253 bytes of DNS-1123 labels joined by `.`.
pub(super) fn dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(dns1123_label)
}

/// The name part of a label key, or a label value when not empty: at most 63 of A-Z, a-z,
/// 0-9, `-`, `_` and `.`, starting and ending alphanumeric.
fn label_word(s: &str) -> bool {
    (1..=63).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// Kubernetes' qualified name (a label or annotation key): a name, optionally after a
/// DNS-1123 subdomain and `/`.
pub(super) fn qualified_name(s: &str) -> bool {
    match s.split_once('/') {
        None => label_word(s),
        Some((prefix, name)) => !prefix.is_empty() && dns1123_subdomain(prefix) && label_word(name),
    }
}

/// A label value: empty, or as the name part of a key.
pub(super) fn label_value(s: &str) -> bool {
    s.is_empty() || label_word(s)
}

/// Calico's checks on any object's metadata: the name a DNS-1123 subdomain, label keys and
/// annotation keys qualified names, label values valid, annotations at most 256 KiB.
pub(super) fn object_meta(meta: &ObjectMeta) -> Option<Problem> {
    if !dns1123_subdomain(&meta.name) {
        return Some((
            "metadata.name".into(),
            format!(
                "{:?} is not a DNS-1123 subdomain (lower case a-z, 0-9, '-' and '.', at most 253)",
                meta.name
            ),
        ));
    }
    for (k, v) in meta.labels.iter() {
        if !qualified_name(k) {
            return Some((
                format!("metadata.labels[{k:?}]"),
                "not a qualified name".into(),
            ));
        }
        if !label_value(v) {
            return Some((
                format!("metadata.labels[{k:?}]"),
                format!("{v:?} is not a label value"),
            ));
        }
    }
    let mut size = 0;
    for (k, v) in meta.annotations.iter() {
        // Calico checks the key lower-cased.
        if !qualified_name(&k.to_ascii_lowercase()) {
            return Some((
                format!("metadata.annotations[{k:?}]"),
                "not a qualified name".into(),
            ));
        }
        size += k.len() + v.len();
    }
    if size > 256 << 10 {
        return Some((
            "metadata.annotations".into(),
            format!("{size} bytes, over 256 KiB"),
        ));
    }
    None
}

/// Go's `net.ParseIP` (no zone, no prefix).
pub(super) fn ip(s: &str) -> Option<IpAddr> {
    s.parse().ok()
}

/// Calico's `ipv4` rule: an address whose `To4` is not nil (IPv4, or IPv4-mapped IPv6).
pub(super) fn ipv4(s: &str) -> bool {
    match ip(s) {
        Some(IpAddr::V4(_)) => true,
        Some(IpAddr::V6(a)) => a.to_ipv4_mapped().is_some(),
        None => false,
    }
}

/// Calico's `ipv6` rule: an address that is not IPv4 (nor IPv4-mapped).
pub(super) fn ipv6(s: &str) -> bool {
    ip(s).is_some() && !ipv4(s)
}

/// Calico's `ParseCIDROrIP`: the address of a CIDR (host bits kept) or a bare address.
pub(super) fn cidr_or_ip(s: &str) -> Option<IpAddr> {
    match s.parse::<ipnet::IpNet>() {
        Ok(n) => Some(n.addr()),
        Err(_) => ip(s),
    }
}

/// Go's `net.ParseMAC`: 6, 8 or 20 bytes, as `aa:bb:..`, `aa-bb-..` or `aabb.ccdd...`.
pub(super) fn mac(s: &str) -> bool {
    let hex = |p: &str, n: usize| p.len() == n && p.bytes().all(|b| b.is_ascii_hexdigit());
    let groups = |sep: char, width: usize| -> Option<usize> {
        let parts: Vec<&str> = s.split(sep).collect();
        parts.iter().all(|p| hex(p, width)).then_some(parts.len())
    };
    let bytes = if s.len() >= 14 && s.as_bytes().get(2) == Some(&b':') {
        groups(':', 2)
    } else if s.len() >= 14 && s.as_bytes().get(2) == Some(&b'-') {
        groups('-', 2)
    } else if s.len() >= 14 && s.as_bytes().get(4) == Some(&b'.') {
        groups('.', 4).map(|n| n * 2)
    } else {
        None
    };
    matches!(bytes, Some(6 | 8 | 20))
}

/// A WireGuard public key: standard base64 of 32 bytes.
pub(super) fn wireguard_key(s: &str) -> bool {
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .is_ok_and(|k| k.len() == 32)
}
