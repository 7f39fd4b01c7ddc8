//! loadtest: simulates nodes against the real typha server and reports what it measured.
//!
//! The server runs in its own process (this binary in the `__server` role: the typha-server
//! library over the embedded datastore, exactly as the typha-server binary runs it, plus a
//! churner); the simulated nodes run in swarm processes (`__swarm`), each node a real
//! `typha-client` with TLS. The coordinator starts them, drives the scenario, reads CPU and
//! memory from /proc, and checks that every node ends with the server's exact state.
//!
//! Scenarios: `steady` (the default). Planned: storm, failover, slow, ceiling (see issue 5).

// Indexing here is into serde_json::Value, which yields Null for a missing field instead of
// panicking; the lint cannot tell those apart from slice indexing.
#![allow(clippy::indexing_slicing)]

mod child;
mod procstat;
mod server_child;
mod steady;
mod swarm;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Simulate nodes against the real typha server and measure.
#[derive(Debug, Parser)]
#[command(name = "loadtest", version, about)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// N nodes connect, then the datastore churns at R updates/s for T seconds (default).
    Steady(steady::SteadyArgs),
    /// Internal: the server process.
    #[command(name = "__server", hide = true)]
    Server(server_child::ServerArgs),
    /// Internal: a swarm of simulated nodes.
    #[command(name = "__swarm", hide = true)]
    Swarm(swarm::SwarmArgs),
}

fn main() -> ExitCode {
    // No arguments: the default steady scenario, with the defaults its flags document.
    let cli = if std::env::args_os().len() <= 1 {
        Cli::parse_from(["loadtest", "steady"])
    } else {
        Cli::parse()
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("LOADTEST_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("loadtest: {e}");
            return ExitCode::FAILURE;
        }
    };
    let cmd = cli.cmd;
    let outcome = rt.block_on(async move {
        match cmd {
            Cmd::Server(a) => server_child::run(a).await.map(|()| true),
            Cmd::Swarm(a) => swarm::run(a).await.map(|()| true),
            Cmd::Steady(a) => {
                let json = a.json;
                let r = steady::run(a).await?;
                if json {
                    println!("{}", serde_json::to_string_pretty(&r)?);
                } else {
                    println!("{}", steady::table(&r));
                }
                Ok(r.nodes_exact == r.nodes
                    && r.full_nodes_exact == r.full_nodes
                    && r.deliveries >= r.deliveries_expected)
            }
        }
    });
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("loadtest: something was lost (see the table)");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("loadtest: {e:#}");
            ExitCode::FAILURE
        }
    }
}
