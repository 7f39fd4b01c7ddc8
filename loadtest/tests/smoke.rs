//! The real loadtest binary, tiny, once per scenario: server, swarm and broadcaster processes,
//! TLS, churn, the nothing-lost check and the report. (Real measurements are in BENCHMARKS.md;
//! these only prove the machinery works end to end and reports what it should.)

// In tests a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::process::Command;

/// Runs `loadtest <args> --json`; the result object, after checking the run passed.
fn run(args: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_loadtest"))
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["passed"], true, "{r}");
    r["result"].clone()
}

#[test]
fn a_small_steady_run_loses_nothing_and_writes_a_report() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report");
    let r = run(&[
        "steady",
        // The connected memory sample without its wait for the allocator's decay.
        "--connected-wait-secs",
        "0",
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
        "--full-nodes",
        "2",
        // Two typha-clients per swarm; the other nodes are lean readers.
        "--sample-nodes",
        "6",
        // One latency budget beside the server's own settings: a second server, the same
        // churn, every node exact again.
        "--budgets",
        "60",
        "--report",
        report.to_str().unwrap(),
    ]);
    assert_eq!(r["nodes"], 12);
    assert_eq!(r["nodes_exact"], 12, "{r}");
    assert_eq!(r["full_nodes"], 6, "two per swarm, three swarms: {r}");
    assert_eq!(r["full_nodes_exact"], 6, "{r}");
    // Each swarm's share of the sample, rounded up, at least its full nodes: 3, 3 and 2.
    assert_eq!(r["sample_nodes"], 8, "{r}");
    assert_eq!(r["lean_nodes"], 4, "{r}");
    // The same run against the bare broadcaster, with the ratios.
    let b = &r["baseline"];
    assert_eq!(b["nothing_lost"], true, "{r}");
    assert_eq!(b["nodes_exact"], 12, "{r}");
    assert_eq!(b["deliveries"], r["deliveries_expected"], "{r}");
    assert!(b["p99_ratio"].as_f64().unwrap() > 0.0, "{r}");
    assert!(b["cpu_ratio"].as_f64().unwrap() > 0.0, "{r}");
    assert_eq!(r["inconsistent_sessions"], 0, "{r}");
    assert_eq!(r["updates_written"], 120);
    assert_eq!(r["deliveries"], r["deliveries_expected"], "{r}");
    assert!(r["latency_ms"]["p99"].as_f64().unwrap() > 0.0);
    assert!(r["server_rss_connected"].as_u64().unwrap() > 0);
    let budget = &r["budgets"][0];
    assert_eq!(budget["window_ms"], 60, "{r}");
    assert_eq!(budget["nothing_lost"], true, "{r}");
    assert_eq!(budget["deliveries"], budget["deliveries_expected"], "{r}");
    assert_eq!(budget["deliveries_expected"], 12 * 120, "{r}");
    assert!(budget["p99_ratio"].as_f64().unwrap() > 0.0, "{r}");
    let md = std::fs::read_to_string(report.join("steady.md")).unwrap();
    assert!(md.contains("nothing lost"), "{md}");
    assert!(md.contains("| 60 ms |"), "{md}");
    for svg in [
        "steady-latency-cdf.svg",
        "steady-nodes.svg",
        "steady-server-rss.svg",
    ] {
        assert!(report.join(svg).exists(), "{svg}");
    }
}

#[test]
fn a_small_storm_builds_one_snapshot_and_reuses_it() {
    let r = run(&[
        "storm",
        "--nodes",
        "20",
        "--kvs",
        "600",
        "--full-nodes",
        "3",
    ]);
    assert_eq!(r["nodes_exact"], 20, "{r}");
    assert_eq!(r["full_nodes_exact"], 3, "{r}");
    assert_eq!(r["snapshots_built"], 1, "{r}");
    assert_eq!(r["snapshots_reused"], 19, "{r}");
    assert!(r["bytes_per_node"].as_f64().unwrap() > 1000.0, "{r}");
    assert_eq!(r["datastore"], "embedded", "{r}");
    let (idle, peak) = (
        r["server_rss_idle"].as_u64().unwrap(),
        r["server_storm_peak_rss"].as_u64().unwrap(),
    );
    assert!(idle > 0 && peak >= idle, "{r}");
}

#[test]
fn a_small_storm_over_etcd_waits_before_its_idle_sample() {
    let r = run(&[
        "storm",
        "--nodes",
        "10",
        "--kvs",
        "300",
        "--full-nodes",
        "2",
        "--datastore",
        "etcd",
        "--idle-secs",
        "2",
    ]);
    assert_eq!(r["datastore"], "etcd", "{r}");
    assert_eq!(r["nodes_exact"], 10, "{r}");
    assert_eq!(r["idle_after_secs"], 2.0, "{r}");
    assert!(r["kvs"].as_u64().unwrap() >= 300, "{r}");
}

#[test]
fn a_short_chaos_run_loses_nothing_through_every_kind_of_fault() {
    let r = run(&[
        "chaos",
        "--nodes",
        "30",
        "--pods-per-node",
        "3",
        // Long enough for one fault of each kind, each followed by a checkpoint: a partition
        // outlasts the nodes' 30 s read timeout, and a half-open connection is noticed at it.
        "--secs",
        "180",
        "--rate",
        "20",
        "--fault-every",
        "3",
        "--seed",
        "19",
        // Two groups of 15 nodes, each in a network namespace of its own: restarting half
        // the nodes is a burst of 15 fresh ones, a network fault cuts 15 off.
        "--groups",
        "2",
        "--degraded-secs",
        "5",
        "--full-nodes",
        "1",
        // Two thirds typha-clients (they hear a replica say it is stale), a third lean.
        "--sample-nodes",
        "20",
    ]);
    let faults = r["faults"].as_array().unwrap();
    let kinds: std::collections::BTreeSet<String> = faults
        .iter()
        .map(|f| match &f["fault"] {
            serde_json::Value::Object(o) => o.keys().next().unwrap().clone(),
            v => v.as_str().unwrap().to_owned(),
        })
        .collect();
    assert_eq!(kinds.len(), 10, "every kind of fault, once at least: {r}");
    assert_eq!(r["network_faults"], true, "{r}");
    assert_eq!(r["replicas_agree"], true, "{r}");
    assert_eq!(r["nodes_exact"], 30, "{r}");
    assert_eq!(r["full_nodes_exact"], 2, "{r}");
    assert_eq!(r["seed"], 19, "{r}");
    // The replicas balanced their connections (through an API server of the run's own: the
    // datastore is etcd) and were balanced at the end.
    assert_eq!(r["balancing"], true, "{r}");
    assert_eq!(r["balanced"], true, "{r}");
    // The checks made while the faults went on ran, and had something to check.
    let c = &r["checks"];
    let churn = &c["churn"];
    for kind in [
        "relabels",
        "pods_created",
        "pods_deleted",
        "policy_updates",
        "node_updates",
    ] {
        assert!(churn[kind].as_u64().unwrap() > 0, "{kind}: {r}");
    }
    let checkpoints = c["checkpoints"].as_array().unwrap();
    assert!(checkpoints.len() > faults.len() / 2, "{r}");
    assert!(
        checkpoints.iter().all(|p| p["kvs"].as_u64().unwrap() > 0),
        "{r}"
    );
    // Every sample node saw the ephemeral pods go; the full-store nodes compared revisions.
    assert!(
        c["deletions_checked"].as_u64().unwrap() >= churn["pods_deleted"].as_u64().unwrap(),
        "{r}"
    );
    assert!(c["revisions_checked"].as_u64().unwrap() > 0, "{r}");
    assert_eq!(c["wrongful_deletions"], 0, "{r}");
    assert_eq!(c["older_after_newer"], 0, "{r}");
}

#[test]
fn a_short_chaos_run_over_the_api_server_loses_nothing() {
    // The faults that differ over Kubernetes: the API server killed, etcd under it compacted,
    // a replica cut off from the API server (it must tell its nodes it is stale); and a
    // replica drained and restarted, so that balancing has its share to give back.
    let r = run(&[
        "chaos",
        "--datastore",
        "kubernetes",
        "--nodes",
        "20",
        "--pods-per-node",
        "3",
        "--secs",
        "45",
        "--rate",
        "10",
        "--fault-every",
        "3",
        "--seed",
        "4",
        "--groups",
        "2",
        "--full-nodes",
        "1",
        "--sample-nodes",
        "20",
        "--kinds",
        "kill_datastore,compact_etcd,cut_from_datastore,term_replica",
    ]);
    let faults = r["faults"].as_array().unwrap();
    assert!(faults.len() >= 4, "{r}");
    assert_eq!(r["datastore"], "kubernetes", "{r}");
    assert_eq!(r["replicas_agree"], true, "{r}");
    assert_eq!(r["nodes_exact"], 20, "{r}");
    // The replicas balanced their connections through the Service's EndpointSlice: the one
    // restarted empty got its share back.
    assert_eq!(r["balancing"], true, "{r}");
    assert_eq!(r["balanced"], true, "{r}");
    assert!(r["rebalanced"].as_u64().unwrap() > 0, "{r}");
    let loads = r["final_loads"].as_array().unwrap();
    assert_eq!(loads.len(), 3, "{r}");
    assert!(loads.iter().all(|l| l.as_u64().unwrap() > 0), "{r}");
    // Checkpoints against the API server's own listing; nothing deleted, nothing older.
    let c = &r["checks"];
    assert!(!c["checkpoints"].as_array().unwrap().is_empty(), "{r}");
    assert!(c["revisions_checked"].as_u64().unwrap() > 0, "{r}");
    assert_eq!(c["wrongful_deletions"], 0, "{r}");
    assert_eq!(c["older_after_newer"], 0, "{r}");
}

#[test]
fn a_small_failover_moves_the_killed_servers_nodes() {
    let r = run(&[
        "failover",
        "--nodes",
        "16",
        "--pods-per-node",
        "3",
        "--full-nodes",
        "4",
        // Half the nodes are lean readers: they move and resume too.
        "--sample-nodes",
        "8",
    ]);
    let moved = r["moved"].as_u64().unwrap();
    assert!(moved > 0, "the nodes shuffle over both servers: {r}");
    let resumed = ["resumed_deltas", "resumed_digest", "resumed_snapshot"]
        .iter()
        .map(|k| r[k].as_u64().unwrap())
        .sum::<u64>();
    assert!(resumed >= moved, "{r}");
    assert_eq!(r["resumed_deltas"], 0, "another server's epoch: {r}");
    assert_eq!(r["nodes_exact"], 16, "{r}");
    assert_eq!(r["full_nodes_exact"], 4, "{r}");
}

#[test]
fn a_small_slow_run_keeps_the_healthy_nodes_whole() {
    let r = run(&[
        "slow",
        "--nodes",
        "10",
        "--stalled-fraction",
        "0.3",
        "--pods-per-node",
        "3",
        "--rate",
        "40",
        "--secs",
        "2",
    ]);
    assert_eq!(
        (r["healthy"].as_u64(), r["stalled"].as_u64()),
        (Some(7), Some(3))
    );
    assert_eq!(r["nodes_exact"], 7, "{r}");
    for p in ["baseline", "with_stalled"] {
        assert_eq!(r[p]["deliveries"], 7 * 80, "{p}: {r}");
    }
    assert_eq!(
        r["server_connections_end"], 10,
        "stalled nodes are still held: {r}"
    );
}

#[test]
fn a_small_ceiling_run_compares_with_the_bare_broadcaster() {
    let r = run(&[
        "ceiling",
        "--nodes",
        "8",
        "--cluster-nodes",
        "4",
        "--rate",
        "400",
        "--secs",
        "2",
    ]);
    assert_eq!(r["nothing_lost"], true, "{r}");
    assert_eq!(r["server"]["updates"], 8 * 800, "{r}");
    for c in ["ceiling_tls", "ceiling_plain"] {
        assert!(r[c]["frames"].as_u64().unwrap() > 0, "{c}: {r}");
    }
    assert!(r["ratio"].as_f64().unwrap() > 0.0, "{r}");
}

/// The `typha-server` executable of this build (built here if `cargo test` did not build it,
/// as it does not when only this package is tested).
fn typha_server_bin() -> std::path::PathBuf {
    static BUILT: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let mut cargo = Command::new(env!("CARGO"));
            cargo
                .args(["build", "-p", "typha-server", "--bin", "typha-server"])
                .current_dir(env!("CARGO_MANIFEST_DIR"));
            // Not the variables `cargo test` set for this test (CARGO_MANIFEST_DIR, CARGO_PKG_*,
            // ...): build scripts that watch them (ring's) would run again, here and in every
            // later cargo command, rebuilding everything above them each time.
            let set_for_tests = [
                "CARGO_PKG_",
                "CARGO_BIN_",
                "CARGO_CRATE_",
                "CARGO_MANIFEST_",
                "CARGO_PRIMARY_PACKAGE",
                "CARGO_TARGET_TMPDIR",
                "CARGO_RUSTC_CURRENT_DIR",
            ];
            for (name, _) in std::env::vars_os() {
                if set_for_tests
                    .iter()
                    .any(|p| name.to_string_lossy().starts_with(p))
                {
                    cargo.env_remove(name);
                }
            }
            let out = cargo.output().unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let bin =
                std::path::Path::new(env!("CARGO_BIN_EXE_loadtest")).with_file_name("typha-server");
            assert!(bin.is_file(), "{}", bin.display());
            bin
        })
        .clone()
}

fn free_port() -> u16 {
    // Below the ephemeral range: never given to an outgoing connection meanwhile.
    typha_test_support::control_plane::free_port().expect("a free port")
}

#[test]
fn steady_runs_a_separate_typha_server_executable_when_given_one() {
    let bin = typha_server_bin();
    let r = run(&[
        "steady",
        "--connected-wait-secs",
        "0",
        "--nodes",
        "6",
        "--pods-per-node",
        "3",
        "--rate",
        "30",
        "--secs",
        "2",
        "--server-bin",
        bin.to_str().unwrap(),
    ]);
    assert_eq!(r["nodes_exact"], 6, "{r}");
    assert_eq!(r["deliveries"], r["deliveries_expected"], "{r}");
    assert_eq!(r["server_external"], false);
    assert!(r["server_rss_connected"].as_u64().unwrap() > 0, "{r}");
}

#[test]
fn steady_drives_an_external_server_through_its_write_api() {
    let (port, http, api) = (free_port(), free_port(), free_port());
    let empty = tempfile::tempdir().unwrap();
    let mut server = Command::new(typha_server_bin())
        .env("TYPHA_SERVERHOST", "127.0.0.1")
        .env("TYPHA_SERVERPORT", port.to_string())
        .env("TYPHA_HEALTHHOST", "127.0.0.1")
        .env("TYPHA_HEALTHPORT", http.to_string())
        .env("TYPHA_PROMETHEUSMETRICSHOST", "127.0.0.1")
        .env("TYPHA_PROMETHEUSMETRICSPORT", http.to_string())
        .env("TYPHA_EMBEDDEDDIR", empty.path())
        .env("TYPHA_EMBEDDEDAPIADDR", format!("127.0.0.1:{api}"))
        .env("TYPHA_LOGSEVERITYSCREEN", "Warning")
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let r = run(&[
        "steady",
        "--plain",
        "--nodes",
        "5",
        "--pods-per-node",
        "2",
        "--rate",
        "20",
        "--secs",
        "2",
        "--server-addr",
        &format!("127.0.0.1:{port}"),
        "--server-http",
        &format!("127.0.0.1:{http}"),
        "--server-api",
        &format!("127.0.0.1:{api}"),
    ]);
    let _ = server.kill();
    let _ = server.wait();
    assert_eq!(r["server_external"], true);
    assert_eq!(r["nodes_exact"], 5, "{r}");
    assert_eq!(r["updates_written"], 40);
    assert_eq!(r["deliveries"], r["deliveries_expected"], "{r}");
}

#[test]
fn scenarios_that_need_their_own_server_refuse_an_external_one() {
    let out = Command::new(env!("CARGO_BIN_EXE_loadtest"))
        .args(["failover", "--server-addr", "127.0.0.1:1"])
        .args([
            "--server-http",
            "127.0.0.1:2",
            "--server-api",
            "127.0.0.1:3",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("steady only"), "{e}");
}

#[test]
fn a_small_direct_run_compares_nodes_on_etcd_with_nodes_through_the_server() {
    // Needs Debian's etcd-server (installed by .ci/run).
    let r = run(&[
        "direct",
        "--nodes",
        "6",
        "--pods-per-node",
        "2",
        "--rate",
        "20",
        "--secs",
        "2",
        "--nodes-per-swarm",
        "3",
    ]);
    for side in ["direct", "via_server"] {
        assert_eq!(r[side]["nodes_exact"], 6, "{side}: {r}");
        assert_eq!(r[side]["deliveries"], 240, "{side}: {r}");
        assert!(
            r[side]["datastore_cpu_churn_secs"].as_f64().is_some(),
            "{r}"
        );
    }
    assert!(r["via_server"]["server_cpu_churn_secs"].as_f64().unwrap() > 0.0);
}

/// The agent scenario, small, on both dataplanes (the Linux one in a namespace it creates):
/// the report has both rows, and every watched ipset change arrived (or the run fails).
#[test]
fn a_small_agent_run_measures_both_dataplanes_against_the_baseline() {
    for dataplane in ["recording", "linux"] {
        let out = Command::new(env!("CARGO_BIN_EXE_loadtest"))
            .args([
                "agent",
                "--nodes",
                "50",
                "--policies",
                "40",
                "--namespaces",
                "5",
            ])
            .args(["--ops", "6", "--dataplane", dataplane])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{dataplane}: {}{text}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("| typha-agent (dirty tracking"), "{text}");
        assert!(
            text.contains("| re-read everything per apply (baseline)"),
            "{text}"
        );
        assert!(text.contains("baseline / ours: pod added p50"), "{text}");
    }
}

#[test]
fn a_small_calico_fleet_loses_nothing_beside_our_protocol() {
    let r = run(&[
        "calico",
        // Felix's connection alone, as the fleet was before issue 39.
        "--syncer",
        "felix",
        "--connected-wait-secs",
        "0",
        "--nodes",
        "6",
        "--pods-per-node",
        "3",
        "--rate",
        "20",
        "--secs",
        "2",
        "--nodes-per-swarm",
        "4",
    ]);
    let (c, o) = (&r["calico"], &r["ours"]);
    assert_eq!(c["protocol"], "calico/felix", "{r}");
    // Before and after the churn, every Calico node holds the libcalico translation of the
    // cluster; one full node per swarm (two swarms) checked it value by value.
    assert_eq!(c["nodes_exact_before_churn"], 6, "{r}");
    assert_eq!(c["nodes_exact"], 6, "{r}");
    assert_eq!(c["full_nodes"], 2, "{r}");
    assert_eq!(c["full_nodes_exact"], 2, "{r}");
    assert_eq!(c["reconnects"], 0, "{r}");
    assert_eq!(c["updates"], 40);
    // Latency is measured from the churn stamp carried in the Calico JSON.
    assert_eq!(c["deliveries"], c["deliveries_expected"], "{r}");
    assert!(c["latency_ms"]["p99"].as_f64().unwrap() > 0.0, "{r}");
    assert!(c["bytes_per_kv"].as_f64().unwrap() > 0.0, "{r}");
    assert!(c["bytes_per_update"].as_f64().unwrap() > 0.0, "{r}");
    assert!(
        c["server_cpu_per_delivery_us"].as_f64().unwrap() > 0.0,
        "{r}"
    );
    // The baseline ran in the same invocation, on a fresh server.
    assert_eq!(o["protocol"], "ours", "{r}");
    assert_eq!(o["nodes_exact"], 6, "{r}");
    assert_eq!(o["deliveries"], o["deliveries_expected"], "{r}");
    // Before any fleet, our Rust Calico client took every syncer type's state, equal to the
    // libcalico translation key for key.
    let checks = r["checks"]["ours_vs_translation"].as_array().unwrap();
    assert_eq!(checks.len(), 4, "{r}");
    for d in checks {
        assert!(d["only_first"].as_array().unwrap().is_empty(), "{d}");
        assert!(d["only_second"].as_array().unwrap().is_empty(), "{d}");
        assert!(d["differ"].as_array().unwrap().is_empty(), "{d}");
    }
    assert_eq!(checks[0]["syncer"], "felix");
    assert!(checks[0]["same"].as_u64().unwrap() > 0, "{r}");
}

#[test]
fn a_small_fleet_of_calico_nodes_opens_every_connection_and_checks_each_syncer_type() {
    // The default: each node opens felix, bgp, tunnel-ip-allocation and node-status, as
    // calico-node does, all in its own swarm (two swarms here); beside it the same fleet with
    // felix alone on a fresh server.
    let r = run(&[
        "calico",
        "--baseline-syncer",
        "felix",
        "--no-baseline",
        "--connected-wait-secs",
        "0",
        "--nodes",
        "6",
        "--pods-per-node",
        "3",
        "--rate",
        "20",
        "--secs",
        "2",
        "--nodes-per-swarm",
        "4",
    ]);
    let c = &r["calico"];
    assert_eq!(
        c["protocol"], "calico/felix,bgp,tunnel-ip-allocation,node-status",
        "{r}"
    );
    assert_eq!(c["connections"], 24, "{r}");
    assert_eq!(c["nodes_exact_before_churn"], 6, "{r}");
    assert_eq!(c["nodes_exact"], 6, "{r}");
    // The first node of each swarm is full on every one of its connections.
    assert_eq!(c["full_nodes"], 8, "{r}");
    assert_eq!(c["full_nodes_exact"], 8, "{r}");
    assert_eq!(c["reconnects"], 0, "{r}");
    // The churn relabels endpoints: felix's six connections get every update, no other.
    assert_eq!(c["deliveries_expected"], 40 * 6, "{r}");
    assert_eq!(c["deliveries"], c["deliveries_expected"], "{r}");
    let by = c["by_syncer"].as_array().unwrap();
    let names: Vec<&str> = by.iter().map(|b| b["syncer"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["felix", "bgp", "tunnel-ip-allocation", "node-status"],
        "{r}"
    );
    for b in by {
        assert_eq!(b["ok"], true, "{b}");
        assert_eq!(b["exact_before_churn"], 6, "{b}");
        assert_eq!(b["exact"], 6, "{b}");
        assert_eq!(b["reconnects"], 0, "{b}");
        // The server counts each node's connection under its own syncer type.
        assert_eq!(b["server_streaming"], 6, "{b}");
        assert!(b["kvs"].as_u64().unwrap() > 0, "{b}");
        assert!(b["sync_secs"].as_f64().unwrap() > 0.0, "{b}");
        if b["syncer"] == "felix" {
            assert_eq!(b["churned"], true, "{b}");
            assert_eq!(b["deliveries"], 240, "{b}");
            assert!(b["latency_ms"]["p99"].as_f64().unwrap() > 0.0, "{b}");
        } else {
            // Not reached by the churn, and not failed for it: nothing expected, nothing
            // received, no latency, still exact and connected.
            assert_eq!(b["churned"], false, "{b}");
            assert_eq!(b["deliveries_expected"], 0, "{b}");
            assert_eq!(b["deliveries"], 0, "{b}");
            assert_eq!(b["updates_in_churn"], 0, "{b}");
            assert_eq!(b["latency_ms"]["count"], 0, "{b}");
        }
    }
    // Felix holds the most, node-status the least (the cluster has no CalicoNodeStatus).
    let kvs = |i: usize| by[i]["kvs"].as_u64().unwrap();
    assert!(kvs(0) > kvs(1) && kvs(1) > kvs(3), "{r}");
    assert_eq!(c["kvs"], kvs(0) + kvs(1) + kvs(2) + kvs(3), "{r}");
    // Every connection lost its session to the SIGKILL and resynced.
    assert!(c["kill_resync_secs"].as_f64().unwrap() > 0.0, "{r}");
    // The baseline: the same six nodes, felix alone.
    let f = &r["calico_baseline"];
    assert_eq!(f["protocol"], "calico/felix", "{r}");
    assert_eq!(f["connections"], 6, "{r}");
    assert_eq!(f["nodes_exact"], 6, "{r}");
    assert_eq!(f["deliveries"], 240, "{r}");
    assert!(r["ours"].is_null(), "{r}");
}

#[test]
fn the_calico_fleet_runs_on_a_real_etcd_read_by_the_server() {
    // The churn goes to etcd and reaches the nodes through the server's watch; the states
    // every node must hold come from a client's state taken from the server before and after.
    let r = run(&[
        "calico",
        "--datastore",
        "etcd",
        "--nodes",
        "4",
        "--pods-per-node",
        "3",
        "--rate",
        "20",
        "--secs",
        "2",
        "--no-baseline",
    ]);
    assert_eq!(r["datastore"], "etcd", "{r}");
    let c = &r["calico"];
    assert_eq!(c["nodes_exact_before_churn"], 4, "{r}");
    assert_eq!(c["nodes_exact"], 4, "{r}");
    assert_eq!(c["full_nodes_exact"], c["full_nodes"], "{r}");
    assert_eq!(c["deliveries"], c["deliveries_expected"], "{r}");
    assert!(c["bytes_per_update"].as_f64().unwrap() > 0.0, "{r}");
    for d in r["checks"]["ours_vs_translation"].as_array().unwrap() {
        assert!(d["differ"].as_array().unwrap().is_empty(), "{d}");
        assert!(d["only_first"].as_array().unwrap().is_empty(), "{d}");
        assert!(d["only_second"].as_array().unwrap().is_empty(), "{d}");
    }
    assert!(r["calico_typha"].is_null(), "{r}");
    // After the churn the server was SIGKILLed and started again on the same ports: every node
    // reconnected, resynced from etcd through it, and still ended exact (checked above, after
    // the restart).
    assert!(c["kill_resync_secs"].as_f64().unwrap() > 0.0, "{r}");
    assert!(
        c["kill_resync_secs"].as_f64().unwrap() >= c["kill_ready_secs"].as_f64().unwrap(),
        "{r}"
    );
    assert!(c["kill_server_cpu_secs"].as_f64().unwrap() > 0.0, "{r}");
}

#[test]
fn calicos_typha_without_a_real_datastore_is_refused_with_the_reason() {
    let out = Command::new(env!("CARGO_BIN_EXE_loadtest"))
        .args(["calico", "--nodes", "2", "--pods-per-node", "2"])
        .args(["--calico-typha", "/nonexistent/calico-typha"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("cannot read the embedded datastore"), "{err}");
    assert!(err.contains("--datastore etcd"), "{err}");
}
