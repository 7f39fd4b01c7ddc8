//! The `ceiling` scenario: how close the server comes to the physical limit of this machine.
//!
//! 1. Our server: N light nodes sync, then the datastore churns faster than the server can
//!    fan out (`--rate`); the delivery rate is what reached the nodes (updates and bytes per
//!    second, from the first write until the last node had the last update).
//! 2. The bare broadcaster (`loadtest __broadcast`) writes one pre-encoded Deltas frame of the
//!    same number of updates as the server's average frame to N mutual-TLS connections, then
//!    to N plain TCP ones, for as long as the server's delivery took, to bare readers that
//!    decode every frame.
//!
//! The server's rate as a ratio of the TLS ceiling is the result.

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::child::Child;
use crate::harness::{self, Common, Outcome, Timeline, Workdir};

/// Settings of a ceiling run.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct CeilingArgs {
    /// Connections.
    #[arg(long, default_value_t = 1000)]
    pub(crate) nodes: usize,
    /// Nodes of the generated cluster (its size matters only for the initial sync).
    #[arg(long, default_value_t = 100)]
    pub(crate) cluster_nodes: usize,
    /// Offered churn, updates per second (more than the server can deliver to every node).
    #[arg(long, default_value_t = 5000.0)]
    pub(crate) rate: f64,
    /// Seconds of churn, and of each broadcast.
    #[arg(long, default_value_t = 10.0)]
    pub(crate) secs: f64,
    #[command(flatten)]
    pub(crate) common: Common,
}

/// One delivery rate.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Rate {
    /// Seconds measured.
    pub(crate) secs: f64,
    /// Frames received by all nodes together.
    pub(crate) frames: u64,
    /// Updates received by all nodes together.
    pub(crate) updates: u64,
    /// Bytes on the wire (before TLS).
    pub(crate) bytes: u64,
    /// Updates per second, all nodes together.
    pub(crate) updates_per_sec: f64,
    /// MB (10^6 bytes) per second.
    pub(crate) mb_per_sec: f64,
}

impl Rate {
    fn new(secs: f64, frames: u64, updates: u64, bytes: u64) -> Self {
        let secs = secs.max(1e-9);
        Rate {
            secs,
            frames,
            updates,
            bytes,
            updates_per_sec: updates as f64 / secs,
            mb_per_sec: bytes as f64 / secs / 1e6,
        }
    }
}

/// What a ceiling run measured.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct CeilingResult {
    /// Connections.
    pub(crate) nodes: usize,
    /// Updates per frame in the server's run (average), and in the broadcaster's frame.
    pub(crate) updates_per_frame: f64,
    /// Our server (TLS unless --plain).
    pub(crate) server: Rate,
    /// The bare broadcaster over mutual TLS.
    pub(crate) ceiling_tls: Rate,
    /// The bare broadcaster over plain TCP.
    pub(crate) ceiling_plain: Rate,
    /// Server updates/s ÷ the ceiling's over the same transport.
    pub(crate) ratio: f64,
    /// Whether every node got every update and ended exact.
    pub(crate) nothing_lost: bool,
}

/// Runs one broadcast to `nodes` bare readers; the rate they received.
async fn broadcast(
    wd: &Workdir,
    c: &Common,
    tls: bool,
    nodes: usize,
    updates_per_frame: usize,
    secs: f64,
    timeline: &Timeline,
) -> anyhow::Result<Rate> {
    let port = crate::server::free_port()?;
    let mut args = vec![
        "__broadcast".to_owned(),
        "--listen".into(),
        format!("127.0.0.1:{port}"),
    ];
    if tls && let Some(d) = wd.tls_dir() {
        args.extend(["--tls-dir".into(), d.display().to_string()]);
    }
    let mut b = Child::spawn(
        if tls {
            "broadcaster (TLS)"
        } else {
            "broadcaster"
        },
        &args,
    )?;
    b.expect("ready", Duration::from_secs(30)).await?;
    timeline.add_server(b.pid());
    let mut common = c.clone();
    common.plain = !tls;
    let addr = format!("localhost:{port}");
    let swarms = if tls {
        wd.swarms(&[&addr], nodes, 0, &common, &["--raw".into()])?
    } else {
        harness::plain_swarms(wd, &[&addr], nodes, &common, &["--raw".into()])?
    };
    timeline.add_swarms(&swarms);
    harness::wait_for(
        &swarms,
        "raw_connected",
        nodes as u64,
        "readers",
        Duration::from_secs(600),
    )
    .await?;
    let (f0, b0) = (
        harness::sum(&swarms, "raw_frames"),
        harness::sum(&swarms, "raw_bytes"),
    );
    let started = Instant::now();
    b.send(&format!("blast {updates_per_frame} {secs}")).await?;
    let blasted = b
        .expect("blasted", Duration::from_secs_f64(secs + 120.0))
        .await?;
    // What the readers had received by the end of the blast (progress is at most 0.5 s old).
    let elapsed = started.elapsed().as_secs_f64();
    let (f1, b1) = (
        harness::sum(&swarms, "raw_frames"),
        harness::sum(&swarms, "raw_bytes"),
    );
    tracing::info!(?blasted, "broadcast done");
    let frames = f1 - f0;
    let r = Rate::new(elapsed, frames, frames * updates_per_frame as u64, b1 - b0);
    let done = harness::finish(swarms, "").await?;
    anyhow::ensure!(
        done.raw_errors == 0,
        "{} bare readers failed (bad frames?)",
        done.raw_errors
    );
    b.send("quit").await?;
    b.wait(Duration::from_secs(30)).await?;
    Ok(r)
}

pub(crate) async fn run(a: CeilingArgs) -> anyhow::Result<Outcome> {
    // The work dir always has a TLS bundle: the TLS ceiling needs it even with --plain.
    a.common.own_server_only("ceiling")?;
    let wd = Workdir::new(a.cluster_nodes, 30, false)?.using(&a.common);
    let timeline = Timeline::start();
    let mut server = if a.common.plain {
        wd.plain_server("server").await?
    } else {
        wd.server("server").await?
    };
    timeline.add_server(server.pid());
    let mut swarms = if a.common.plain {
        harness::plain_swarms(&wd, &[&server.addr], a.nodes, &a.common, &[])?
    } else {
        wd.swarms(&[&server.addr], a.nodes, 0, &a.common, &[])?
    };
    timeline.add_swarms(&swarms);
    let n = a.nodes as u64;
    harness::wait_for(&swarms, "in_sync", n, "in sync", Duration::from_secs(1800)).await?;
    harness::phase_histogram(&mut swarms).await?;
    let before = server.state().await?;
    let (u0, f0) = (
        harness::sum(&swarms, "churn_updates"),
        harness::sum(&swarms, "churn_frames"),
    );
    let started = Instant::now();
    // Wait for the writer to finish, then for every node to have every update.
    let written = server
        .churn(wd.shape(), a.rate, a.secs)
        .wait(Duration::from_secs_f64(a.secs + 120.0))
        .await?;
    let want = written * n;
    let b = harness::bar(want, "delivered");
    let mut last = (0, Instant::now());
    loop {
        let got = harness::sum(&swarms, "churn_updates") - u0;
        b.set_position(got);
        if got != last.0 {
            last = (got, Instant::now());
        }
        if got >= want || last.1.elapsed() > Duration::from_secs(30) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    b.finish();
    // Progress arrives every 0.5 s: the last delivery was at most that long before we saw it.
    let elapsed = started.elapsed().as_secs_f64();
    let (u1, f1) = (
        harness::sum(&swarms, "churn_updates"),
        harness::sum(&swarms, "churn_frames"),
    );
    let after = server.state().await?;
    let digest = after["digest"].as_str().unwrap_or_default().to_owned();
    let done = harness::finish(swarms, &digest).await?;
    server.quit().await?;
    let sent = after["bytes_sent"]
        .as_u64()
        .unwrap_or(0)
        .saturating_sub(before["bytes_sent"].as_u64().unwrap_or(0));
    let ours = Rate::new(elapsed, f1 - f0, u1 - u0, sent);
    let nothing_lost = done.all_exact(a.nodes) && ours.updates >= want;
    let per_frame = ours.updates as f64 / ours.frames.max(1) as f64;
    let k = per_frame.round().max(1.0) as usize;

    // As long as our server took, so start-up and buffer filling weigh the same on both.
    let secs = ours.secs.max(a.secs);
    let ceiling_tls = broadcast(&wd, &a.common, true, a.nodes, k, secs, &timeline).await?;
    let ceiling_plain = broadcast(&wd, &a.common, false, a.nodes, k, secs, &timeline).await?;
    let reference = if a.common.plain {
        &ceiling_plain
    } else {
        &ceiling_tls
    };
    let r = CeilingResult {
        nodes: a.nodes,
        updates_per_frame: per_frame,
        ratio: ours.updates_per_sec / reference.updates_per_sec.max(1e-9),
        server: ours,
        ceiling_tls,
        ceiling_plain,
        nothing_lost,
    };
    let row = |name: &str, x: &Rate| {
        format!(
            "| {name} | {:.0} | {:.0} | {:.1} | {:.1} s |",
            x.updates_per_sec,
            x.frames as f64 / x.secs,
            x.mb_per_sec,
            x.secs
        )
    };
    let table = format!(
        "ceiling: {} connections, {} updates/s offered for {} s; frames of {:.1} updates\n\
         | sender | updates/s delivered (all nodes) | frames/s | MB/s | measured over |\n\
         |---|---|---|---|---|\n{}\n{}\n{}\n\
         our server delivers {:.0} % of the bare {} broadcaster's rate\n{}",
        a.nodes,
        a.rate,
        a.secs,
        per_frame,
        row(
            if a.common.plain {
                "typha-server (plain)"
            } else {
                "typha-server (mutual TLS)"
            },
            &r.server
        ),
        row("bare broadcaster, mutual TLS", &r.ceiling_tls),
        row("bare broadcaster, plain TCP", &r.ceiling_plain),
        r.ratio * 100.0,
        if a.common.plain { "plain" } else { "TLS" },
        if nothing_lost {
            "nothing lost"
        } else {
            "LOST: deliveries missing or nodes diverged"
        },
    );
    Ok(Outcome {
        name: "ceiling",
        table,
        json: serde_json::to_value(&r)?,
        ok: nothing_lost,
        timeline: timeline.stop(),
        latency: Some(done.histogram),
    })
}
