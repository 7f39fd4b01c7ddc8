//! The `tracing` subscriber every program installs once, first thing in `main`.

use std::io::IsTerminal;

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

impl Output {
    /// Whether the output is a terminal (a person reading), not a file or a pipe (a container
    /// runtime, a log collector).
    pub fn is_terminal(self) -> bool {
        match self {
            Output::Stdout => std::io::stdout().is_terminal(),
            Output::Stderr => std::io::stderr().is_terminal(),
        }
    }
}

/// Installs the global subscriber: `filter` is a `tracing` filter (`info`,
/// `typha_server=debug,info`); one that does not parse falls back to `info`. `json`: one JSON
/// object per line. Text lines carry colour only on a terminal: written to a file or a pipe
/// (what a container runtime collects) they are plain. Calling it twice keeps the first
/// subscriber.
pub fn init(filter: &str, json: bool, output: Output) {
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(!json && output.is_terminal());
    // try_init: a second call (a program embedded in another, as loadtest runs the server)
    // keeps the first subscriber instead of failing.
    let _ = match (json, output) {
        (false, Output::Stdout) => builder.try_init(),
        (false, Output::Stderr) => builder.with_writer(std::io::stderr).try_init(),
        (true, Output::Stdout) => builder.json().try_init(),
        (true, Output::Stderr) => builder.json().with_writer(std::io::stderr).try_init(),
    };
}
