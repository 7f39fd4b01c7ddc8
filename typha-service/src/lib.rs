//! typha-service: what every long-running program of the workspace shares (`typha-server`,
//! `typha-agent`, `typha-tail`, `loadtest`), so each program's `main` reads as its own steps:
//!
//! - [`cli`]: parsing flags and environment variables, one line naming a bad setting.
//! - [`exit`]: exit codes (64 for a bad setting, named in one line; 69 for a peer that cannot be
//!   used) and [`exit::SettingError`], the error that names a setting.
//! - [`logging`]: the `tracing` subscriber, text or JSON lines, counting write errors.
//! - [`runtime`]: building the tokio runtime a program runs on.
//! - [`signal`]: the shutdown signal (SIGTERM or SIGINT).
//! - [`metrics`]: the `/metrics` response for a Prometheus registry (the text format 0.0.4,
//!   names exactly as registered), the summary the `prometheus` crate lacks, and helpers that
//!   create and register a metric in one call.
//! - [`hostname`]: this machine's name.
//!
//! No program logic lives here; nothing here reads configuration.

pub mod cli;
pub mod exit;
pub mod logging;
pub mod metrics;
pub mod runtime;
pub mod signal;

/// This machine's host name as the kernel has it (what Go's `os.Hostname` returns), or `None`
/// when it cannot be read or is empty.
pub fn hostname() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
}
