//! The `typha-server` program: flags to settings, settings to a running server, a signal to a
//! graceful shutdown.

use std::process::ExitCode;

use tracing::{error, info};
use typha_service::exit::{self, EX_CONFIG};
use typha_service::logging::{self, Output};
use typha_service::signal::wait_for_signal;

use super::flags::{Cli, Command};
use crate::config::{Config, DatastoreConfig};
use crate::datastore::open::{OpenError, open};
use crate::server::RunningServer;

const PROGRAM: &str = "typha-server";

/// The `typha-server` program: parses flags and `TYPHA_*` variables from the process, starts
/// the server, and shuts it down gracefully on SIGTERM or Ctrl-C. Bad configuration: one line
/// naming the setting, exit code 64.
pub fn main() -> ExitCode {
    main_from(std::env::args_os())
}

/// [`main`] with these arguments (the first is the program name), for programs that embed it.
pub fn main_from<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = match typha_service::cli::parse::<Cli>(PROGRAM, args) {
        Ok(c) => c,
        Err(code) => return code,
    };
    match &cli.command {
        Some(Command::GenCerts(args)) => return gen_certs(args),
        Some(Command::CheckConfig) => return check_config(cli),
        None => {}
    }
    logging::init(&cli.log_filter(), cli.log_json, Output::Stdout);
    let cfg = match cli.into_config() {
        Ok(c) => c,
        Err(e) => return exit::invalid_config(PROGRAM, e),
    };
    let rt = match typha_service::runtime::multi_thread(PROGRAM, None) {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    rt.block_on(run(cfg))
}

/// Starts the server on the configured feed, serves until SIGTERM or SIGINT, drains.
async fn run(cfg: Config) -> ExitCode {
    let mut tasks = Vec::new();
    let started = if let DatastoreConfig::Upstream(u) = &cfg.datastore {
        info!(upstream = ?u.addrs, tls = u.tls.is_some(), "fed by upstream typha servers");
        if let Some(t) = &u.tls
            && let Err(e) = crate::syncer::upstream::check_tls(t)
        {
            return exit::invalid_config(PROGRAM, format_args!("TYPHA_UPSTREAMCERTFILE: {e}"));
        }
        let feed = crate::syncer::upstream::feed(u.clone());
        crate::server::start_with(cfg, feed).await
    } else {
        let opened = match open(&cfg.datastore).await {
            Ok(o) => o,
            Err(e @ OpenError::EmbeddedApi { .. }) => return cannot_start(e),
            Err(e) => return exit::invalid_config(PROGRAM, e),
        };
        tasks = opened.tasks;
        crate::server::start(cfg, opened.datastore).await
    };
    let server: RunningServer = match started {
        Ok(s) => s,
        Err(e) => return cannot_start(e),
    };
    wait_for_signal().await;
    info!("shutdown signal received");
    for t in tasks {
        t.abort();
    }
    server.shutdown().await;
    ExitCode::SUCCESS
}

/// The server could not start (a port in use, say): logged, one line on stderr, exit 64.
fn cannot_start(e: impl std::fmt::Display) -> ExitCode {
    error!("cannot start: {e}");
    eprintln!("{PROGRAM}: cannot start: {e}");
    ExitCode::from(EX_CONFIG)
}

fn gen_certs(args: &super::gen_certs::GenCertsArgs) -> ExitCode {
    match super::gen_certs::run(args) {
        Ok(wrote) => {
            eprintln!("{PROGRAM} gen-certs: wrote {}", wrote.join(", "));
            ExitCode::SUCCESS
        }
        Err(e) if e.is_usage() => exit::invalid_config(PROGRAM, format_args!("gen-certs: {e}")),
        Err(e) => exit::failed(PROGRAM, format_args!("gen-certs: {e}")),
    }
}

/// `TYPHA_*` variables in this process that no flag reads.
fn unknown_variables() -> Vec<String> {
    use clap::CommandFactory;
    let cmd = Cli::command();
    let known: std::collections::BTreeSet<String> = cmd
        .get_arguments()
        .filter_map(|a| a.get_env())
        .map(|e| e.to_string_lossy().into_owned())
        .collect();
    std::env::vars_os()
        .filter_map(|(k, _)| k.into_string().ok())
        .filter(|k| k.starts_with("TYPHA_") && !known.contains(k))
        .collect()
}

fn check_config(cli: Cli) -> ExitCode {
    let unknown = unknown_variables();
    if !unknown.is_empty() {
        return exit::invalid_config(
            PROGRAM,
            format_args!(
                "{}: not a setting of {PROGRAM} (the server would ignore it)",
                unknown.join(", ")
            ),
        );
    }
    match cli.into_config() {
        Ok(cfg) => {
            println!("{PROGRAM}: configuration ok: {}", cfg.summary());
            ExitCode::SUCCESS
        }
        Err(e) => exit::invalid_config(PROGRAM, e),
    }
}
