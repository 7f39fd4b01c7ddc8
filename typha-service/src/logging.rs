//! The `tracing` subscriber every program installs once, first thing in `main`.

use tracing_subscriber::EnvFilter;

/// Where log lines go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// Standard output (the server: its stdout carries nothing else).
    Stdout,
    /// Standard error (programs whose stdout is their product: the agent's `--dry-run` plan,
    /// loadtest's report).
    Stderr,
}

/// Installs the global subscriber: `filter` is a `tracing` filter (`info`,
/// `typha_server=debug,info`); one that does not parse falls back to `info`. `json`: one JSON
/// object per line. Calling it twice keeps the first subscriber.
pub fn init(filter: &str, json: bool, output: Output) {
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    // try_init: a second call (a program embedded in another, as loadtest runs the server)
    // keeps the first subscriber instead of failing.
    let _ = match (json, output) {
        (false, Output::Stdout) => builder.try_init(),
        (false, Output::Stderr) => builder.with_writer(std::io::stderr).try_init(),
        (true, Output::Stdout) => builder.json().try_init(),
        (true, Output::Stderr) => builder.json().with_writer(std::io::stderr).try_init(),
    };
}
