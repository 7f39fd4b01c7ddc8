//! What can go wrong applying the dataplane, and why a desired state cannot be written.

use std::time::Duration;

use super::names::{CHAIN_PREFIX, IPSET_PREFIX, MAX_CHAIN_NAME, MAX_IPSET_NAME};

/// A dataplane operation that failed. The agent logs it, counts it, and retries on the next
/// apply with the kernel state re-read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DataplaneError {
    /// A helper program failed.
    #[error("{program}: {message}")]
    Command {
        /// `iptables-restore`, `ipset`, ...
        program: String,
        /// What it said (stderr, trimmed), or its exit status.
        message: String,
    },
    /// A helper program could not be run: started, fed its input or waited for.
    #[error("{program}: {what}: {source}")]
    Run {
        /// `iptables-restore`, `ipset`, ...
        program: String,
        /// What failed (`cannot run ipset`, `writing to stdin`).
        what: String,
        /// Why.
        source: std::io::Error,
    },
    /// A helper program ran too long and was killed.
    #[error("{program}: timed out after {}s", .limit.as_secs())]
    Timeout {
        /// `iptables-restore`, `ipset`, ...
        program: String,
        /// How long it may run.
        limit: Duration,
    },
    /// The desired chains or hooks cannot be written (nothing was).
    #[error("{program}: invalid desired state: {source}")]
    InvalidChains {
        /// The restore program.
        program: String,
        /// What is wrong.
        source: InvalidChains,
    },
    /// The desired ipsets cannot be written (nothing was).
    #[error("{program}: invalid desired state: {source}")]
    InvalidIpsets {
        /// The ipset program.
        program: String,
        /// What is wrong.
        source: InvalidIpset,
    },
    /// A netlink request failed.
    #[error("netlink: {what}: {source}")]
    Netlink {
        /// What was asked (`list routes`, `add route 10.0.0.0/24`).
        what: String,
        /// Why.
        source: rtnetlink::Error,
    },
    /// A netlink socket could not be opened.
    #[error("netlink: {what}: {source}")]
    NetlinkSocket {
        /// Which socket (`route socket`, `link monitor socket`).
        what: &'static str,
        /// Why.
        source: std::io::Error,
    },
    /// The netlink sockets need a tokio runtime, and there is none on this thread.
    #[error("netlink: {what}: {source}")]
    NoRuntime {
        /// What needed it.
        what: &'static str,
        /// Why.
        source: tokio::runtime::TryCurrentError,
    },
    /// Output of a helper program that could not be understood.
    #[error("cannot parse {what}: {message}")]
    Parse {
        /// Whose output.
        what: String,
        /// What was wrong.
        message: String,
    },
    /// A file under /proc/sys could not be written.
    #[error("{path}: {source}")]
    Sysctl {
        /// The path.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

/// Why desired chains and hooks cannot be written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidChains {
    /// A chain to own whose name does not start with [`CHAIN_PREFIX`].
    #[error("chain {0:?} does not start with {CHAIN_PREFIX}")]
    NotOurs(String),
    /// A chain name longer than [`MAX_CHAIN_NAME`] or not printable ASCII.
    #[error("chain name {0:?} is longer than {MAX_CHAIN_NAME} or not printable ASCII")]
    ChainName(String),
    /// A rule text with a control character (a newline would start another restore line).
    #[error("a rule of chain {chain} holds a control character: {rule:?}")]
    ControlCharacter {
        /// The chain.
        chain: String,
        /// The rule text.
        rule: String,
    },
    /// A hook into one of the agent's own chains, or into a chain with no name or one that
    /// reads as an option.
    #[error("hook chain {0:?} is not a chain outside {CHAIN_PREFIX}*")]
    HookChain(String),
}

/// Why desired ipsets cannot be written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidIpset {
    /// A set name that does not start with [`IPSET_PREFIX`].
    #[error("ipset {0:?} does not start with {IPSET_PREFIX}")]
    NotOurs(String),
    /// A set name longer than [`MAX_IPSET_NAME`] or not printable ASCII.
    #[error("ipset name {0:?} is longer than {MAX_IPSET_NAME} or not printable ASCII")]
    Name(String),
}
