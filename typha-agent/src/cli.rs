//! The `typha-agent` program: flags, logging, the two runtimes, signals, exit codes.
//!
//! The sync client and the HTTP endpoints run on a small multi-threaded runtime; the calc
//! graph and the dataplane run on a thread of their own (a current-thread runtime), so a slow
//! `iptables-restore` never delays pongs to the server.
//!
//! Exit codes: 0 after SIGTERM/SIGINT (or a finished `--dry-run`/`--cleanup`), 64 for bad
//! settings (one line naming the setting), 1 when the dataplane cannot be opened.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use prometheus::Registry;
use tokio::sync::{oneshot, watch};
use tracing::{error, info, warn};
use typha_client::SyncClient;
use typha_client::cli::ConnectArgs;
use typha_client::metrics::ClientMetrics;
use typha_service::exit::{self, SettingError};
use typha_service::logging::{self, Output};
use typha_service::signal::wait_for_signal;

use crate::calc::render::{EndpointToHost, RenderConfig};
use crate::dataplane::linux::{LinuxConfig, LinuxDataplane};
use crate::dataplane::{ApplyStats, Dataplane, DataplaneError, Desired, Dirty};
use crate::metrics::AgentMetrics;
use crate::run::{AgentConfig, Feeder, Shared, run};

const PROGRAM: &str = "typha-agent";

/// The node agent: syncs from typha and programs routes, iptables and ipsets.
#[derive(Debug, Parser)]
#[command(name = "typha-agent", version, about)]
pub struct Cli {
    #[command(flatten)]
    connect: ConnectArgs,
    /// This node's name (as in workload endpoints and IPAM block affinities). Default: the
    /// `NODENAME` or `FELIX_FELIXHOSTNAME` variable, else the host name.
    #[arg(long, env = "NODENAME")]
    nodename: Option<String>,
    /// Address of /liveness, /readiness, /status and /metrics.
    #[arg(long, env = "TYPHA_AGENT_HEALTHADDR", default_value = "127.0.0.1:9099")]
    health_addr: SocketAddr,
    /// Seconds between re-reads of the kernel state (drift is repaired then).
    #[arg(long, env = "FELIX_IPTABLESREFRESHINTERVAL", default_value_t = 90.0)]
    refresh_interval: f64,
    /// Route protocol number of the agent's routes; routes with another are never touched.
    #[arg(long, env = "TYPHA_AGENT_ROUTEPROTOCOL", default_value_t = 80)]
    route_protocol: u8,
    /// Prefix of workload interface names.
    #[arg(long, env = "FELIX_INTERFACEPREFIX", default_value = "cali")]
    interface_prefix: String,
    /// Workload-to-host traffic after egress policy: Drop, Return or Accept.
    #[arg(
        long,
        env = "FELIX_DEFAULTENDPOINTTOHOSTACTION",
        default_value = "Drop"
    )]
    endpoint_to_host_action: String,
    /// Print the ipset, iptables-restore and route plan once in sync, apply nothing, exit.
    #[arg(long)]
    dry_run: bool,
    /// Remove every chain, hook, ipset and route the agent owns, then exit (no server needed).
    #[arg(long)]
    cleanup: bool,
    /// Log as JSON lines.
    #[arg(long, env = "TYPHA_AGENT_LOGJSON")]
    log_json: bool,
    /// Read the flags and variables as the agent would, then exit: 0 if it would start with
    /// them, 64 naming the first wrong setting or any `TYPHA_*` / `FELIX_*` variable that is
    /// not a setting of this program (a typo, or a Felix setting the agent does not have).
    #[arg(long)]
    check_config: bool,
}

/// `TYPHA_*` and `FELIX_*` variables in this process that no flag reads (`FELIX_FELIXHOSTNAME`
/// is read as the node name's fallback).
fn unknown_variables() -> Vec<String> {
    use clap::CommandFactory;
    let known: std::collections::BTreeSet<String> = Cli::command()
        .get_arguments()
        .filter_map(|a| a.get_env())
        .map(|e| e.to_string_lossy().into_owned())
        .chain(["FELIX_FELIXHOSTNAME".to_owned()])
        .collect();
    std::env::vars_os()
        .filter_map(|(k, _)| k.into_string().ok())
        .filter(|k| (k.starts_with("TYPHA_") || k.starts_with("FELIX_")) && !known.contains(k))
        .collect()
}

struct Settings {
    agent: AgentConfig,
    linux: LinuxConfig,
}

fn settings(cli: &Cli) -> Result<Settings, SettingError> {
    let nodename = match &cli.nodename {
        Some(n) if !n.is_empty() => n.clone(),
        _ => match std::env::var("FELIX_FELIXHOSTNAME") {
            Ok(n) if !n.is_empty() => n,
            _ => typha_service::hostname().ok_or_else(|| {
                SettingError::new("NODENAME", "not set and the host name cannot be read")
            })?,
        },
    };
    let mut agent = AgentConfig::new(nodename);
    agent.refresh_interval = Duration::try_from_secs_f64(cli.refresh_interval)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| {
            SettingError::new(
                "FELIX_IPTABLESREFRESHINTERVAL",
                "not a positive number of seconds",
            )
        })?;
    if cli.interface_prefix.is_empty()
        || cli.interface_prefix.len() > 14
        || !cli
            .interface_prefix
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(SettingError::new(
            "FELIX_INTERFACEPREFIX",
            "must be 1 to 14 letters, digits, '-' or '_'",
        ));
    }
    agent.render = RenderConfig {
        iface_prefix: cli.interface_prefix.clone(),
        endpoint_to_host: cli
            .endpoint_to_host_action
            .parse::<EndpointToHost>()
            .map_err(|e| SettingError::new("FELIX_DEFAULTENDPOINTTOHOSTACTION", e.to_string()))?,
    };
    Ok(Settings {
        agent,
        linux: LinuxConfig {
            route_protocol: cli.route_protocol,
            ..LinuxConfig::default()
        },
    })
}

/// The program, with the process's arguments.
pub fn main() -> ExitCode {
    main_from(std::env::args_os())
}

/// The program, with these arguments.
pub fn main_from(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    let cli = match typha_service::cli::parse::<Cli>(PROGRAM, args) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into());
    // stderr: stdout carries the --dry-run plan.
    logging::init(&filter, cli.log_json, Output::Stderr);
    let s = match settings(&cli) {
        Ok(s) => s,
        Err(e) => return bad_config(e),
    };
    if cli.cleanup {
        return cleanup(&s.linux);
    }
    let client_cfg = match cli.connect.client_config(&s.agent.nodename, "typha-agent") {
        Ok(c) => c,
        Err(e) => return bad_config(e),
    };
    if cli.check_config {
        let unknown = unknown_variables();
        if !unknown.is_empty() {
            return exit::invalid_config(
                PROGRAM,
                format_args!(
                    "{}: not a setting of {PROGRAM} (the agent would ignore it)",
                    unknown.join(", ")
                ),
            );
        }
        println!(
            "{PROGRAM}: configuration ok: node {}, health on {}",
            s.agent.nodename, cli.health_addr
        );
        return ExitCode::SUCCESS;
    }
    let rt = match typha_service::runtime::multi_thread(PROGRAM, Some(2)) {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    let registry = Registry::new();
    let client_metrics = ClientMetrics::new(&registry);
    let shared = Arc::new(Shared::new(AgentMetrics::new(&registry)));
    let registry = Arc::new(registry);
    let client = match SyncClient::new(client_cfg, client_metrics) {
        Ok(c) => c,
        Err(e) => return bad_config(e),
    };
    let listener = match rt.block_on(tokio::net::TcpListener::bind(cli.health_addr)) {
        Ok(l) => l,
        Err(e) => {
            return bad_config(SettingError::new(
                "TYPHA_AGENT_HEALTHADDR",
                format!("cannot listen on {}: {e}", cli.health_addr),
            ));
        }
    };

    let (feeder, rx) = Feeder::new();
    let (stop_tx, stop_rx) = watch::channel(false);
    let (opened_tx, opened_rx) = oneshot::channel::<Result<(), OpenError>>();
    let dp_thread = {
        let shared = shared.clone();
        let agent_cfg = s.agent.clone();
        let linux = s.linux.clone();
        let dry_run = cli.dry_run;
        let stop_tx = stop_tx.clone();
        std::thread::Builder::new()
            .name("dataplane".into())
            .spawn(move || {
                dataplane_thread(agent_cfg, linux, dry_run, rx, shared, stop_tx, opened_tx)
            })
    };
    let dp_thread = match dp_thread {
        Ok(t) => t,
        Err(e) => return fail(format!("cannot start the dataplane thread: {e}")),
    };
    match rt.block_on(opened_rx) {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return fail(format!("cannot open the dataplane: {e}")),
        Err(_) => return fail("the dataplane thread ended before starting"),
    }
    info!(
        nodename = %s.agent.nodename,
        health = %cli.health_addr,
        dry_run = cli.dry_run,
        "typha-agent starting"
    );
    rt.block_on(async {
        let http = crate::http::router(shared.clone(), registry.clone());
        let mut http_stop = stop_rx.clone();
        tokio::spawn(async move {
            let serve = axum::serve(listener, http).with_graceful_shutdown(async move {
                let _ = http_stop.wait_for(|v| *v).await;
            });
            if let Err(e) = serve.await {
                warn!(error = %e, "health server ended");
            }
        });
        let mut client_stop = stop_rx.clone();
        let client_task = tokio::spawn(client.run(feeder, async move {
            let _ = client_stop.wait_for(|v| *v).await;
        }));
        let mut done = stop_rx.clone();
        tokio::select! {
            () = wait_for_signal() => info!("shutdown signal received"),
            _ = done.wait_for(|v| *v) => {}
        }
        let _ = stop_tx.send(true);
        let _ = tokio::time::timeout(Duration::from_secs(5), client_task).await;
    });
    drop(rt);
    if dp_thread.join().is_err() {
        error!("the dataplane thread panicked");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// Why the dataplane thread could not start its loop.
#[derive(Debug, thiserror::Error)]
enum OpenError {
    /// Its runtime could not be built.
    #[error("{0}")]
    Runtime(#[source] std::io::Error),
    /// The Linux dataplane could not be opened.
    #[error("{0}")]
    Dataplane(#[source] DataplaneError),
}

fn dataplane_thread(
    cfg: AgentConfig,
    linux: LinuxConfig,
    dry_run: bool,
    rx: tokio::sync::mpsc::UnboundedReceiver<crate::run::Input>,
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    opened: oneshot::Sender<Result<(), OpenError>>,
) {
    let rt = match typha_service::runtime::current_thread() {
        Ok(rt) => rt,
        Err(e) => {
            let _ = opened.send(Err(OpenError::Runtime(e)));
            return;
        }
    };
    rt.block_on(async move {
        let mut stop_rx = stop.subscribe();
        let shutdown = async move {
            let _ = stop_rx.wait_for(|v| *v).await;
        };
        if dry_run {
            let _ = opened.send(Ok(()));
            let mut dp = DryRun {
                protocol: linux.route_protocol,
                stop: stop.clone(),
            };
            run(cfg, rx, &mut dp, &shared, shutdown).await;
        } else {
            let mut dp = match LinuxDataplane::new(&linux) {
                Ok(dp) => dp,
                Err(e) => {
                    let _ = opened.send(Err(OpenError::Dataplane(e)));
                    return;
                }
            };
            let _ = opened.send(Ok(()));
            run(cfg, rx, &mut dp, &shared, shutdown).await;
        }
        // The loop ended (shutdown, or the input closed): let the main thread go too.
        let _ = stop.send(true);
    });
}

/// `--dry-run`: print the plan of the first apply, then stop.
struct DryRun {
    protocol: u8,
    stop: watch::Sender<bool>,
}

impl Dataplane for DryRun {
    async fn apply(
        &mut self,
        desired: &Desired,
        _dirty: &Dirty,
    ) -> Result<ApplyStats, DataplaneError> {
        use std::io::Write;
        let plan = LinuxDataplane::plan(desired, self.protocol);
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(plan.as_bytes());
        let _ = out.flush();
        let _ = self.stop.send(true);
        Ok(ApplyStats::default())
    }

    fn resync(&mut self) {}

    async fn event(&mut self) {
        std::future::pending::<()>().await
    }
}

/// A setting is wrong: one line naming it, exit 64.
fn bad_config(e: impl std::fmt::Display) -> ExitCode {
    exit::invalid_config(PROGRAM, e)
}

fn fail(e: impl std::fmt::Display) -> ExitCode {
    exit::failed(PROGRAM, e)
}

fn cleanup(linux: &LinuxConfig) -> ExitCode {
    let rt = match typha_service::runtime::current_thread() {
        Ok(rt) => rt,
        Err(e) => return fail(e),
    };
    rt.block_on(async {
        let mut dp = match LinuxDataplane::new(linux) {
            Ok(dp) => dp,
            Err(e) => return fail(format!("cannot open the dataplane: {e}")),
        };
        dp.resync();
        match dp.apply(&Desired::default(), &Dirty::all()).await {
            Ok(stats) => {
                info!(?stats, "removed everything the agent owned");
                ExitCode::SUCCESS
            }
            Err(e) => fail(format!("cleanup failed: {e}")),
        }
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn parse(args: &[&str]) -> Cli {
        Cli::try_parse_from(std::iter::once("typha-agent").chain(args.iter().copied())).unwrap()
    }

    #[test]
    fn settings_name_the_bad_one() {
        let e = settings(&parse(&["--nodename", "n1", "--refresh-interval", "0"])).err();
        assert_eq!(e.unwrap().setting, "FELIX_IPTABLESREFRESHINTERVAL");
        let e = settings(&parse(&[
            "--nodename",
            "n1",
            "--endpoint-to-host-action",
            "Maybe",
        ]))
        .err();
        assert_eq!(e.unwrap().setting, "FELIX_DEFAULTENDPOINTTOHOSTACTION");
        let s = settings(&parse(&[
            "--nodename",
            "n1",
            "--endpoint-to-host-action",
            "accept",
        ]))
        .unwrap();
        assert_eq!(s.agent.nodename, "n1");
        assert_eq!(s.agent.render.endpoint_to_host, EndpointToHost::Accept);
        assert_eq!(s.linux.route_protocol, 80);
    }
}
