//! What a test needs from the machine, and what happens when it is missing: the test fails,
//! naming what is missing, unless `TYPHA_TEST_ALLOW_SKIP` is set, in which case it says it
//! skipped and passes. CI runs as root and never sets the variable, so no test there passes
//! without running.

/// Set (to anything) to let tests that cannot run here skip instead of failing.
pub const ALLOW_SKIP: &str = "TYPHA_TEST_ALLOW_SKIP";

/// What to do about a missing requirement.
#[derive(Debug, PartialEq, Eq)]
pub enum Missing {
    /// Nothing is missing: run.
    Run,
    /// Missing, and skipping is allowed: say so and return.
    Skip(String),
    /// Missing: fail with this message.
    Fail(String),
}

/// The decision for a test that needs root, given the effective uid and whether skipping is
/// allowed.
pub fn decide_root(euid: u32, allow_skip: bool) -> Missing {
    if euid == 0 {
        return Missing::Run;
    }
    let what = format!("needs root (network namespaces, iptables, ipset); running as uid {euid}");
    if allow_skip {
        Missing::Skip(format!("skipped: {what}"))
    } else {
        Missing::Fail(format!(
            "{what}. Run as root, or set {ALLOW_SKIP}=1 to skip."
        ))
    }
}

/// The effective uid of this process.
pub fn euid() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|u| u.parse().ok())
        .unwrap_or(u32::MAX)
}

/// `true` to run a test that needs root; `false` (after saying so) to skip it when allowed;
/// a panic naming what is missing otherwise.
pub fn root() -> bool {
    match decide_root(euid(), std::env::var_os(ALLOW_SKIP).is_some()) {
        Missing::Run => true,
        Missing::Skip(why) => {
            eprintln!("{why}");
            false
        }
        Missing::Fail(why) => panic!("{why}"),
    }
}
