//! The `tracing` subscriber every program installs once, first thing in `main`.
//!
//! Lines are written as they are made (a blocked output blocks the logging thread; none is
//! dropped). Write errors are counted in [`errors`], which the server exposes as Typha's
//! `typha_log_errors`.

use std::io::{self, IsTerminal, Write};
use std::sync::LazyLock;

use prometheus::IntCounter;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

/// Log lines that could not be written (the output was closed or failed), since start.
#[allow(clippy::expect_used)] // A literal, valid name and help text.
static ERRORS: LazyLock<IntCounter> = LazyLock::new(|| {
    IntCounter::new("typha_log_errors", "Errors encountered while writing logs.")
        .expect("valid metric name")
});

/// The counter of log write errors (`typha_log_errors`), to register in a program's registry.
pub fn errors() -> IntCounter {
    ERRORS.clone()
}

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
    let builder = builder.with_writer(Counted(output));
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}

/// Checks a filter of `tracing` directives: each a level (`info`) or `target=level`
/// (`typha_server=debug`; `[span]` forms too). A bare word that is not a level is refused: it
/// would enable every level of a target of that name and nothing else, so a level name
/// misspelt (`verbose`, `inf`) would silence the program.
pub fn check_filter(filter: &str) -> Result<(), String> {
    const LEVELS: [&str; 6] = ["trace", "debug", "info", "warn", "error", "off"];
    if filter.trim().is_empty() {
        return Err("empty".into());
    }
    for d in filter.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let level = !d.contains('=') && !d.contains('[');
        if level && !LEVELS.contains(&d.to_ascii_lowercase().as_str()) {
            return Err(format!("{d:?} is not a level ({})", LEVELS.join(", ")));
        }
    }
    EnvFilter::builder()
        .parse(filter)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Makes writers to `Output` that count write errors.
#[derive(Debug, Clone, Copy)]
struct Counted(Output);

impl<'a> MakeWriter<'a> for Counted {
    type Writer = Writer;

    fn make_writer(&'a self) -> Writer {
        match self.0 {
            Output::Stdout => Writer::Stdout(io::stdout()),
            Output::Stderr => Writer::Stderr(io::stderr()),
        }
    }
}

/// Standard output or error; a failed write is counted in [`errors`].
#[derive(Debug)]
enum Writer {
    Stdout(io::Stdout),
    Stderr(io::Stderr),
}

impl Writer {
    fn counted<T>(r: io::Result<T>) -> io::Result<T> {
        if let Err(e) = &r
            && e.kind() != io::ErrorKind::Interrupted
        {
            ERRORS.inc();
        }
        r
    }
}

impl Write for Writer {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        Self::counted(match self {
            Writer::Stdout(w) => w.write(buf),
            Writer::Stderr(w) => w.write(buf),
        })
    }

    fn flush(&mut self) -> io::Result<()> {
        Self::counted(match self {
            Writer::Stdout(w) => w.flush(),
            Writer::Stderr(w) => w.flush(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_is_levels_and_directives_and_a_bare_word_is_refused() {
        for ok in [
            "info",
            "DEBUG",
            "info,typha_server=debug",
            "typha_server::conn=trace",
        ] {
            assert_eq!(check_filter(ok), Ok(()), "{ok}");
        }
        for bad in ["verbose", "", "info,inf", "x=notalevel"] {
            assert!(check_filter(bad).is_err(), "{bad}");
        }
    }
}
