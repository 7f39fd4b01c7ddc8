//! The dataplane: what the calc graph wants the node to look like ([`Desired`]), and the
//! managers that make the kernel match it.
//!
//! [`Desired`] is plain data: ipsets by name, `cali-*` chains of the filter table as rule
//! texts, the hook rules that jump to them from the built-in chains, routes and the workload
//! interfaces to configure. A [`Dataplane`] brings the node to it. [`linux::LinuxDataplane`]
//! does it for real, in the order that never leaves a dangling reference: ipsets created and
//! filled, then iptables (one `iptables-restore --noflush` transaction), then routes and
//! interface settings, then ipsets no longer referenced are destroyed. [`Recording`] keeps the
//! last applied state in memory, for tests and for loadtest.
//!
//! Ownership is by name: chains starting with [`CHAIN_PREFIX`], ipsets starting with
//! [`IPSET_PREFIX`] (or the temporary [`IPSET_TEMP_PREFIX`]), hook rules whose comment starts
//! with [`RULE_COMMENT_PREFIX`], routes with the agent's protocol number. Nothing else is ever
//! changed or removed.

mod command;
pub mod error;
pub mod ipsets;
pub mod iptables;
pub mod linux;
pub mod names;
pub mod routes;

pub use error::DataplaneError;
pub use names::{
    CHAIN_PREFIX, IPSET_PREFIX, IPSET_TEMP_PREFIX, MAX_CHAIN_NAME, MAX_IPSET_NAME,
    RULE_COMMENT_PREFIX,
};

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;

/// The type of an ipset, and so the format of its members.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IpSetKind {
    /// `hash:net`: members are `a.b.c.d` (a /32, written without the suffix, as `ipset save`
    /// prints it) or `a.b.c.d/n`.
    HashNet,
    /// `hash:ip,port`: members are `a.b.c.d,tcp:8080` (named ports).
    HashIpPort,
}

impl IpSetKind {
    /// The name ipset uses (`hash:net`).
    pub fn as_str(self) -> &'static str {
        match self {
            IpSetKind::HashNet => "hash:net",
            IpSetKind::HashIpPort => "hash:ip,port",
        }
    }
}

/// One ipset as the agent wants it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IpSet {
    /// Type (set when the set is created; a change of type means destroy and recreate).
    pub kind: Option<IpSetKind>,
    /// Members, in canonical text form (see [`IpSetKind`] and [`canonical_net`]).
    pub members: BTreeSet<String>,
}

/// Where a route sends traffic.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RouteTarget {
    /// Out of this interface, scope link (a local workload).
    Dev(String),
    /// Via this gateway (a remote node's IPAM block: direct routing to the node).
    Via(Ipv4Addr),
    /// Dropped (this node's own IPAM blocks, so unallocated addresses do not leak out).
    Blackhole,
}

/// A rule inserted at the top of a built-in chain to jump into the agent's chains.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Hook {
    /// Built-in chain (`FORWARD`, `INPUT`, `OUTPUT`).
    pub chain: String,
    /// Rule text after the chain name, without a comment (`-j cali-FORWARD`).
    pub rule: String,
}

/// The whole dataplane as the calc graph wants it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Desired {
    /// IPv4 ipsets by name (each name starts with [`IPSET_PREFIX`]).
    pub ipsets: BTreeMap<String, IpSet>,
    /// Filter-table chains by name (each starts with [`CHAIN_PREFIX`]), as rule texts: what
    /// follows `-A <chain>` in `iptables-restore` input, without a comment. The manager adds a
    /// `-m comment --comment "cali:<hash>"` to each so it can recognise them later.
    pub chains: BTreeMap<String, Vec<String>>,
    /// Jumps from the built-in chains into ours.
    pub hooks: Vec<Hook>,
    /// IPv4 routes by destination.
    pub routes: BTreeMap<Ipv4Net, RouteTarget>,
    /// Workload interfaces to configure (`proxy_arp`, forwarding) when they exist.
    pub interfaces: BTreeSet<String>,
}

/// Which parts of [`Desired`] changed since the last apply; the managers skip the rest.
/// `Dirty::all()` after a resync or at the start.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Dirty {
    /// Every ipset may have changed.
    pub all_ipsets: bool,
    /// These ipsets changed (added, removed or members changed).
    pub ipsets: BTreeSet<String>,
    /// Chains or hooks changed.
    pub chains: bool,
    /// Routes or interfaces changed.
    pub routes: bool,
}

impl Dirty {
    /// Everything.
    pub fn all() -> Self {
        Self {
            all_ipsets: true,
            ipsets: BTreeSet::new(),
            chains: true,
            routes: true,
        }
    }

    /// Nothing changed.
    pub fn is_clean(&self) -> bool {
        !self.all_ipsets && self.ipsets.is_empty() && !self.chains && !self.routes
    }

    /// Adds `other`'s marks to these.
    pub fn merge(&mut self, other: &Dirty) {
        self.all_ipsets |= other.all_ipsets;
        self.ipsets.extend(other.ipsets.iter().cloned());
        self.chains |= other.chains;
        self.routes |= other.routes;
    }
}

/// What one apply did, for metrics and the benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ApplyStats {
    /// Bytes written to `iptables-restore`.
    pub iptables_bytes: u64,
    /// Chains written (created or rewritten).
    pub chains_written: u64,
    /// Chains deleted.
    pub chains_deleted: u64,
    /// Bytes written to `ipset restore`.
    pub ipset_bytes: u64,
    /// ipset member lines (`add`/`del`) written.
    pub ipset_members_changed: u64,
    /// Routes added or replaced.
    pub routes_added: u64,
    /// Routes removed.
    pub routes_removed: u64,
}

impl ApplyStats {
    /// Sums two reports.
    pub fn add(&mut self, o: &ApplyStats) {
        self.iptables_bytes += o.iptables_bytes;
        self.chains_written += o.chains_written;
        self.chains_deleted += o.chains_deleted;
        self.ipset_bytes += o.ipset_bytes;
        self.ipset_members_changed += o.ipset_members_changed;
        self.routes_added += o.routes_added;
        self.routes_removed += o.routes_removed;
    }
}

/// Something that can bring the node to a [`Desired`] state.
///
/// Futures need not be `Send`: the agent runs its dataplane on a thread of its own.
pub trait Dataplane {
    /// Makes the node match `desired`; `dirty` says which parts changed since the last call
    /// (the first call after [`Dataplane::resync`] treats everything as dirty).
    fn apply(
        &mut self,
        desired: &Desired,
        dirty: &Dirty,
    ) -> impl Future<Output = Result<ApplyStats, DataplaneError>>;

    /// Forgets what is cached about the kernel: the next apply reads it again and repairs
    /// anything that drifted (a chain deleted by hand, a route removed).
    fn resync(&mut self);

    /// Completes when something outside the agent changed that an apply should react to (an
    /// interface appeared). Never completes for dataplanes without such events.
    fn event(&mut self) -> impl Future<Output = ()>;
}

/// An in-memory dataplane: keeps what was applied (the parts each apply marked dirty) and what
/// each apply did. After every apply, `state` equals the desired state given, as long as the
/// dirty marks were right: tests compare the two to check the marks.
#[derive(Debug, Default)]
pub struct Recording {
    /// The state after the last apply.
    pub state: Desired,
    /// How many applies.
    pub applies: u64,
}

impl Dataplane for Recording {
    /// Copies only what `dirty` marks (as a real dataplane touches only that), so its cost
    /// per apply follows the change, not the size of the state.
    async fn apply(
        &mut self,
        desired: &Desired,
        dirty: &Dirty,
    ) -> Result<ApplyStats, DataplaneError> {
        let mut stats = ApplyStats::default();
        let names: BTreeSet<String> = if dirty.all_ipsets {
            desired
                .ipsets
                .keys()
                .chain(self.state.ipsets.keys())
                .cloned()
                .collect()
        } else {
            dirty.ipsets.clone()
        };
        let empty = BTreeSet::new();
        for name in names {
            let new = desired.ipsets.get(&name);
            let old = self.state.ipsets.get(&name);
            let (o, n) = (
                old.map_or(&empty, |s| &s.members),
                new.map_or(&empty, |s| &s.members),
            );
            stats.ipset_members_changed +=
                (o.difference(n).count() + n.difference(o).count()) as u64;
            match new {
                Some(set) => {
                    self.state.ipsets.insert(name, set.clone());
                }
                None => {
                    self.state.ipsets.remove(&name);
                }
            }
        }
        if dirty.chains {
            for (name, rules) in &desired.chains {
                if self.state.chains.get(name) != Some(rules) {
                    stats.chains_written += 1;
                }
            }
            stats.chains_deleted = self
                .state
                .chains
                .keys()
                .filter(|c| !desired.chains.contains_key(*c))
                .count() as u64;
            self.state.chains = desired.chains.clone();
            self.state.hooks = desired.hooks.clone();
        }
        if dirty.routes {
            self.state.routes = desired.routes.clone();
            self.state.interfaces = desired.interfaces.clone();
        }
        self.applies += 1;
        Ok(stats)
    }

    fn resync(&mut self) {}

    async fn event(&mut self) {
        std::future::pending::<()>().await
    }
}

/// The canonical member text of an IPv4 network: `a.b.c.d` for a /32, else `a.b.c.d/n`
/// (host bits cleared), as `ipset save` prints `hash:net` members.
pub fn canonical_net(net: &Ipv4Net) -> String {
    let net = net.trunc();
    if net.prefix_len() == 32 {
        net.addr().to_string()
    } else {
        net.to_string()
    }
}

/// URL-safe base64 (no padding) of the SHA-256 of `parts` joined by NUL, cut to `len`
/// characters: Calico's way of naming things that are too long, and of tagging rules.
pub fn hash_b64(parts: &[&str], len: usize) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for (i, p) in parts.iter().enumerate() {
        if i > 0 {
            ctx.update(&[0]);
        }
        ctx.update(p.as_bytes());
    }
    let digest = ctx.finish();
    let mut out = String::with_capacity(len);
    let mut acc: u32 = 0;
    let mut bits = 0;
    for &b in digest.as_ref() {
        acc = (acc << 8) | u32::from(b);
        bits += 8;
        while bits >= 6 {
            bits -= 6;
            let idx = ((acc >> bits) & 0x3f) as usize;
            if out.len() == len {
                return out;
            }
            out.push(char::from(ALPHABET.get(idx).copied().unwrap_or(b'A')));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn canonical_nets_match_ipset_save() {
        assert_eq!(canonical_net(&"10.0.0.1/32".parse().unwrap()), "10.0.0.1");
        assert_eq!(
            canonical_net(&"10.0.0.1/24".parse().unwrap()),
            "10.0.0.0/24"
        );
    }

    #[test]
    fn hashes_are_stable_and_url_safe() {
        let a = hash_b64(&["cali-pi-x", "rule"], 16);
        assert_eq!(a.len(), 16);
        assert_eq!(a, hash_b64(&["cali-pi-x", "rule"], 16));
        assert_ne!(a, hash_b64(&["cali-pi-x", "rul", "e"], 16));
        assert!(
            a.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        );
    }
}
