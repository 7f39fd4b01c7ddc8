//! Exit codes and the messages that go with them: one line on stderr, prefixed with the
//! program's name, so an operator reading a crash loop sees what to fix.

use std::fmt::Display;
use std::process::ExitCode;

/// sysexits.h `EX_USAGE`: a setting is wrong. Fix the configuration; retrying will not help.
pub const EX_CONFIG: u8 = 64;

/// sysexits.h `EX_UNAVAILABLE`: no peer (server, datastore) could be used.
pub const EX_UNAVAILABLE: u8 = 69;

/// A setting that cannot be used. Displays as `SETTING: reason`, the setting under its
/// environment name (`TYPHA_...`, `FELIX_...`) so it can be searched for in a manifest.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{setting}: {reason}")]
pub struct SettingError {
    /// The environment name of the setting.
    pub setting: &'static str,
    /// What is wrong with it.
    pub reason: String,
}

impl SettingError {
    /// `setting` is wrong because of `reason`.
    pub fn new(setting: &'static str, reason: impl Into<String>) -> Self {
        Self {
            setting,
            reason: reason.into(),
        }
    }
}

/// `program: invalid configuration: <e>` on stderr; exit code 64.
pub fn invalid_config(program: &str, e: impl Display) -> ExitCode {
    eprintln!("{program}: invalid configuration: {e}");
    ExitCode::from(EX_CONFIG)
}

/// `program: <e>` on stderr; exit code 69.
pub fn unavailable(program: &str, e: impl Display) -> ExitCode {
    eprintln!("{program}: {e}");
    ExitCode::from(EX_UNAVAILABLE)
}

/// `program: <e>` on stderr; exit code 1.
pub fn failed(program: &str, e: impl Display) -> ExitCode {
    eprintln!("{program}: {e}");
    ExitCode::FAILURE
}
