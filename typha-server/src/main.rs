//! `typha-server`: parses flags and `TYPHA_*` variables, starts the server, and shuts it
//! down gracefully on SIGTERM or Ctrl-C. Bad configuration: one line naming the setting,
//! exit code 64.

mod cli;

use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;

use tracing::{error, info};
use tracing_subscriber::EnvFilter;
use typha_server::config::DatastoreConfig;
use typha_server::datastore::Datastore;
use typha_server::datastore::embedded::{DirSource, Embedded};

/// sysexits.h EX_USAGE: the configuration is wrong.
const EX_CONFIG: u8 = 64;

fn main() -> ExitCode {
    let cli = match cli::Cli::try_parse() {
        Ok(c) => c,
        Err(e) => match e.kind() {
            clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
                e.exit()
            }
            _ => {
                eprintln!(
                    "typha-server: invalid configuration: {}",
                    cli::describe_clap_error(&e)
                );
                return ExitCode::from(EX_CONFIG);
            }
        },
    };
    let filter = EnvFilter::try_new(cli.log_filter()).unwrap_or_else(|_| EnvFilter::new("info"));
    if cli.log_json {
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .json()
            .init();
    } else {
        tracing_subscriber::fmt().with_env_filter(filter).init();
    }
    let cfg = match cli.into_config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("typha-server: invalid configuration: {e}");
            return ExitCode::from(EX_CONFIG);
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("typha-server: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    rt.block_on(async move {
        let datastore: Arc<dyn Datastore> = match &cfg.datastore {
            DatastoreConfig::Embedded { dir, scan_interval } => {
                let store = Embedded::new();
                if let Some(dir) = dir {
                    if !dir.is_dir() {
                        eprintln!("typha-server: invalid configuration: TYPHA_EMBEDDEDDIR: {} is not a directory", dir.display());
                        return ExitCode::from(EX_CONFIG);
                    }
                    let mut src = DirSource::new(dir.clone(), store.clone());
                    let report = src.scan();
                    info!(dir = %dir.display(), resources = store.resources().len(), warnings = report.new_warnings.len(), "embedded datastore loaded");
                    tokio::spawn(src.run(scan_interval.to_owned()));
                }
                Arc::new(store)
            }
            other => {
                eprintln!("typha-server: datastore {other:?} is not available in this build");
                return ExitCode::from(EX_CONFIG);
            }
        };
        let server = match typha_server::server::start(cfg, datastore).await {
            Ok(s) => s,
            Err(e) => {
                error!("cannot start: {e}");
                eprintln!("typha-server: cannot start: {e}");
                return ExitCode::from(EX_CONFIG);
            }
        };
        wait_for_signal().await;
        info!("shutdown signal received");
        server.shutdown().await;
        ExitCode::SUCCESS
    })
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
