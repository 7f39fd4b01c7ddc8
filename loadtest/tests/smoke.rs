//! The real loadtest binary, tiny: a server process, a swarm process, TLS, churn, and the
//! nothing-lost check. (Real measurements are in BENCHMARKS.md; this only proves the machinery
//! works end to end and fails loudly when something is lost.)

// In tests a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::process::Command;

#[test]
fn a_small_steady_run_loses_nothing() {
    let out = Command::new(env!("CARGO_BIN_EXE_loadtest"))
        .args([
            "steady",
            "--nodes",
            "12",
            "--pods-per-node",
            "4",
            "--rate",
            "40",
            "--secs",
            "3",
            "--nodes-per-swarm",
            "5",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["nodes"], 12);
    assert_eq!(r["nodes_exact"], 12, "{r}");
    assert_eq!(r["updates_written"], 120);
    assert_eq!(r["deliveries"], r["deliveries_expected"], "{r}");
    assert!(r["latency_ms"]["p99"].as_f64().unwrap() > 0.0);
    assert!(r["server_rss_connected"].as_u64().unwrap() > 0);
}
