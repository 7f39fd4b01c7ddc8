//! The names the agent owns in the kernel: prefixes of its chains, ipsets and rule comments,
//! and the kernel's limits on those names.

/// Prefix of every chain the agent owns.
pub const CHAIN_PREFIX: &str = "cali-";
/// Prefix of every IPv4 ipset the agent owns.
pub const IPSET_PREFIX: &str = "cali40";
/// Prefix of the agent's temporary ipsets (filled, then swapped with the live one).
pub const IPSET_TEMP_PREFIX: &str = "cali4t";
/// Prefix of the comment on every rule the agent writes: `cali:<hash>`.
pub const RULE_COMMENT_PREFIX: &str = "cali:";
/// iptables' limit on chain names.
pub const MAX_CHAIN_NAME: usize = 28;
/// ipset's limit on set names.
pub const MAX_IPSET_NAME: usize = 31;
