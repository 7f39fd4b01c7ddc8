//! The `typha-server` program: flags to settings, settings to a running server, a signal to a
//! graceful shutdown.

use std::process::ExitCode;

use tracing::{error, info, warn};
use typha_service::exit::{self, EX_CONFIG};
use typha_service::logging::{self, Output};
use typha_service::signal::wait_for_signal;

use super::flags::Command;
use super::sources::{LoadError, Loaded, is_display, load, read_file};
use crate::config::{Config, DatastoreConfig};
use crate::datastore::open::{OpenError, open};
use crate::server::RunningServer;

const PROGRAM: &str = "typha-server";

/// The `typha-server` program: reads its settings from flags, `TYPHA_*` variables and the
/// config file ([`super::sources`]), starts the server, and shuts it down gracefully on
/// SIGTERM or Ctrl-C. Bad configuration: one line naming the setting, exit code 64.
pub fn main() -> ExitCode {
    main_from(std::env::args_os())
}

/// [`main`] with these arguments (the first is the program name), for programs that embed it.
/// The environment and the config file are the process's.
pub fn main_from<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
    let loaded = match load(args, std::env::vars_os(), read_file) {
        Ok(l) => l,
        Err(LoadError::Flags(e)) if is_display(&e) => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => return exit::invalid_config(PROGRAM, e),
    };
    match &loaded.cli.command {
        Some(Command::GenCerts(args)) => return gen_certs(args),
        Some(Command::CheckConfig) => return check_config(loaded),
        None => {}
    }
    let filter = match loaded.cli.log_filter() {
        Ok(f) => f,
        Err(e) => return exit::invalid_config(PROGRAM, e),
    };
    logging::init(&filter, loaded.cli.log_json, Output::Stdout);
    crate::build_info::log_start();
    if let Some(f) = &loaded.file {
        info!(file = %f.display(), "settings read from the config file too");
    }
    for note in &loaded.notes {
        info!("{note}");
    }
    for name in &loaded.unknown {
        warn!("{name}: not a setting of {PROGRAM} nor of Calico's Typha; ignored");
    }
    let cfg = match loaded.cli.into_config() {
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

/// `check-config`: the settings as the server would read them. Unknown `TYPHA_*` names are
/// refused; each Typha setting this program does not implement gets its line on standard
/// output, then the summary.
fn check_config(loaded: Loaded) -> ExitCode {
    if !loaded.unknown.is_empty() {
        return exit::invalid_config(
            PROGRAM,
            format_args!(
                "{}: not a setting of {PROGRAM} nor of Calico's Typha (the server would ignore it)",
                loaded.unknown.join(", ")
            ),
        );
    }
    let (notes, file) = (loaded.notes, loaded.file);
    match loaded.cli.into_config() {
        Ok(cfg) => {
            for note in notes {
                println!("{PROGRAM}: {note}");
            }
            if let Some(f) = file {
                println!("{PROGRAM}: settings read from {} too", f.display());
            }
            println!("{PROGRAM}: configuration ok: {}", cfg.summary());
            ExitCode::SUCCESS
        }
        Err(e) => exit::invalid_config(PROGRAM, e),
    }
}
