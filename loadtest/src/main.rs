//! loadtest: simulates nodes against the real typha server and reports what it measured.
//!
//! The server runs in its own process: the `typha-server` program (this binary in the
//! `__typha-server` role, which is exactly `typha_server::cli::main`, or `--server-bin`),
//! configured by `TYPHA_*` variables, over the embedded datastore (etcd or a kube-apiserver
//! where a scenario says so: `chaos`, `direct`, `calico --datastore`); churn is written through
//! the datastore's write API (or the real datastore's own). The simulated nodes run in swarm
//! processes (`__swarm`), each node a real `typha-client` with TLS. The coordinator starts
//! them, drives the scenario, reads CPU and memory from /proc, reads the server only through
//! `/status` and `/metrics`, and checks that every node ends with the server's exact state.
//!
//! Scenarios: `steady` (the default), `storm`, `failover`, `chaos`, `slow`, `ceiling`, `direct`,
//! `calico` (a fleet speaking Calico's Typha protocol, beside ours), `agent` (one node's agent
//! on the real Linux dataplane, no server); see docs/loadtest.md.

// Indexing here is into serde_json::Value, which yields Null for a missing field instead of
// panicking; the lint cannot tell those apart from slice indexing.
#![allow(clippy::indexing_slicing)]

/// The typha-server program's allocator (its default feature), so that this binary's
/// `__typha-server` role measures what the program does.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

mod agent;
mod broadcast;
mod calico;
mod calico_node;
mod ceiling;
mod chaos;
mod child;
mod churn_plan;
mod cluster;
mod direct;
mod etcd;
mod failover;
mod harness;
mod http;
mod kube;
mod lean;
mod node_checks;
mod procstat;
mod raw;
mod report;
mod server;
mod slow;
mod steady;
mod store;
mod storm;
mod swarm;
mod tally;

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
    /// All N nodes connect at once to a large state: time until all are in sync.
    Storm(storm::StormArgs),
    /// Two servers; one is killed; its nodes move to the other.
    Failover(failover::FailoverArgs),
    /// Replicas over a real etcd, churn, and a seeded schedule of faults: nothing may be lost.
    Chaos(chaos::ChaosArgs),
    /// Some nodes stop reading; the others' latency and the server's memory stay bounded.
    Slow(slow::SlowArgs),
    /// Our delivery rate against a bare broadcaster's, over TLS and plain TCP.
    Ceiling(ceiling::CeilingArgs),
    /// The same nodes and churn on a real etcd: every node watching etcd, then through us.
    Direct(direct::DirectArgs),
    /// N nodes speaking Calico's Typha protocol, then ours as the baseline: sync, churn, cost.
    Calico(calico::CalicoArgs),
    /// One node's agent in a big cluster, real Linux dataplane: time to program, ipset latency.
    Agent(agent::AgentArgs),
    /// Internal: the ceiling scenario's bare broadcaster.
    #[command(name = "__broadcast", hide = true)]
    Broadcast(broadcast::BroadcastArgs),
    /// Internal: a swarm of simulated nodes.
    #[command(name = "__swarm", hide = true)]
    Swarm(swarm::SwarmArgs),
}

fn main() -> ExitCode {
    // The server role is the typha-server program itself, with its own flags and runtime.
    if std::env::args_os().nth(1).as_deref() == Some(std::ffi::OsStr::new(server::SERVER_ROLE)) {
        return typha_server::cli::main_from(
            std::iter::once(std::ffi::OsString::from("typha-server"))
                .chain(std::env::args_os().skip(2)),
        );
    }
    // No arguments: the default steady scenario, with the defaults its flags document.
    let cli = if std::env::args_os().len() <= 1 {
        Cli::parse_from(["loadtest", "steady"])
    } else {
        Cli::parse()
    };
    // Chaos's network faults need the run in a network namespace of its own, entered before
    // any thread starts (a namespace is a thread's, and threads inherit it when they start).
    if let Cmd::Chaos(a) = &cli.cmd
        && !a.no_net
        && let Err(e) = chaos::net::isolate()
    {
        eprintln!("loadtest: {e:#}");
        return ExitCode::FAILURE;
    }
    // kube's client logs every 5xx at error; waiting for a starting kube-apiserver's /readyz
    // makes dozens, none of them news.
    let filter = std::env::var("LOADTEST_LOG").unwrap_or_else(|_| "warn,kube_client=off".into());
    typha_service::logging::init(&filter, false, typha_service::logging::Output::Stderr);
    let rt = match typha_service::runtime::multi_thread("loadtest", None) {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    let cmd = cli.cmd;
    let outcome = rt.block_on(async move {
        match cmd {
            Cmd::Swarm(a) => swarm::run(a).await.map(|()| true),
            Cmd::Agent(a) => agent::run_scenario(a).await.map(|()| true),
            Cmd::Broadcast(a) => broadcast::run(a).await.map(|()| true),
            Cmd::Steady(a) => {
                let c = a.common.clone();
                finish(steady::run(a).await?, &c)
            }
            Cmd::Storm(a) => {
                let c = a.common.clone();
                finish(storm::run(a).await?, &c)
            }
            Cmd::Failover(a) => {
                let c = a.common.clone();
                finish(failover::run(a).await?, &c)
            }
            Cmd::Chaos(a) => {
                let c = a.common.clone();
                finish(chaos::run(a).await?, &c)
            }
            Cmd::Slow(a) => {
                let c = a.common.clone();
                finish(slow::run(a).await?, &c)
            }
            Cmd::Ceiling(a) => {
                let c = a.common.clone();
                finish(ceiling::run(a).await?, &c)
            }
            Cmd::Direct(a) => {
                let c = a.common.clone();
                finish(direct::run(a).await?, &c)
            }
            Cmd::Calico(a) => {
                let c = a.common.clone();
                finish(calico::run(a).await?, &c)
            }
        }
    });
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("loadtest: the run failed its checks (see the table)");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("loadtest: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Prints (and, if asked, writes the report of) a scenario's outcome; whether it passed.
fn finish(o: harness::Outcome, c: &harness::Common) -> anyhow::Result<bool> {
    if c.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "scenario": o.name,
                "passed": o.ok,
                "result": o.json,
            }))?
        );
    } else {
        println!("{}", o.table);
    }
    if let Some(dir) = &c.report {
        let path = report::write(dir, &o)?;
        eprintln!("loadtest: report written to {}", path.display());
    }
    Ok(o.ok)
}
