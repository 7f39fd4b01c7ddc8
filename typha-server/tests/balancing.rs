//! Connection balancing and a rolling replacement, on a real kube-apiserver over etcd 3.6
//! (`common::kube`, built by `peers/build`): three `typha-server` processes (the real binary)
//! with `TYPHA_DATASTORETYPE=kubernetes` and `TYPHA_CONNECTIONREBALANCINGMODE=kubernetes`, a
//! Service `kube-system/calico-typha` and its EndpointSlice written by the test (there is no
//! controller-manager), a cluster of 600 Nodes, and 600 agents (the typha-client library,
//! in-process, each with a full store and a consumer that keeps its own copy of the state and
//! digest from the callbacks alone).
//!
//! The story, as an operator lives it:
//! 1. one replica serves all 600 agents (they joined with a full snapshot each);
//! 2. the Deployment scales to three: two more replicas start, become ready and are added to the
//!    EndpointSlice. The limit on our protocol's connections for 600 nodes on 3 replicas is 400
//!    (`1 + 600 × 1.2 / 2 = 361`, raised to the lower limit; on all connections, Typha's
//!    `4 × 361`), the mean 200: the first replica moves 400 agents away
//!    at `TYPHA_REBALANCEMOVESPERSEC`, each with a Goodbye naming the least-loaded replicas, and
//!    the loads converge to 200 ± 10 % within the time those settings allow;
//! 3. a rolling replacement: one replica at a time is marked terminating in the EndpointSlice,
//!    sent SIGTERM (it drains its agents over `TYPHA_SHUTDOWNTIMEOUTSECS`, spreading them over
//!    the others), and a new process is started on the same address, waited ready and marked
//!    ready; the loads converge again.
//!
//! Data changes all along (node labels, GlobalNetworkSets created and deleted through the API).
//! It passes when no agent ever needed a full snapshot after its first (`typha_resumes_total`
//! and the snapshot counters of every server process, and the agents' own
//! `typha_client_resumes_total`), every reconnect was a server's Goodbye followed by a resume by
//! digest (or by deltas, back on a replica it had been on), no session ended on a gap or a
//! digest mismatch, every agent's callbacks were consistent (New only for absent keys, ...),
//! and every agent's final state, by its store's digest and its consumer's own, is exactly the
//! cluster as the test reads it back from the API server.
//!
//! Addresses. The API server refuses EndpointSlice addresses in the loopback range ("may not
//! be in the loopback range"; `client_discovery.rs` asserts it), and the governor reads the
//! replicas' addresses from the EndpointSlice, so the replicas cannot be 127.0.0.x. They are
//! 192.0.2.1-3 (TEST-NET-1, RFC 5737: documentation addresses, accepted by the API server and
//! never routed anywhere), put on the loopback interface of a network namespace of the test's
//! own: the test binary re-runs itself under `unshare --net` (it needs root, as the agent's
//! namespace tests do), so etcd, kube-apiserver, the three servers and the agents all live in
//! a network where nothing else is, traffic never leaves the loopback device, and the host's
//! network is untouched. Inside, the replicas share the health port (9098), as pods do.
//!
//! Measuring mode: with `TYPHA_BALANCE_REPORT=<file>` the run writes what it measured (times,
//! moves, resumes, bytes, the full snapshot's size) as JSON to that file; BENCHMARKS.md quotes
//! such a run. Without it the numbers are printed in one line and not asserted: timing belongs
//! in benchmarks, and the only time asserted is the convergence bound the settings imply.

// In tests a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[path = "balancing/agents.rs"]
mod agents;
#[path = "balancing/cluster.rs"]
mod cluster;
mod common;
#[path = "balancing/replicas.rs"]
mod replicas;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::json;
use tokio::time::Instant;
use typha_client::ResumeKind;
use typha_client::metrics::EndCause;
use typha_test_support::control_plane::ControlPlane;

use agents::Agents;
use cluster::{churn, datastore_digest, node, publish, until_balanced};
use replicas::{Counters, Replica, Tls};

const BIN: &str = env!("CARGO_BIN_EXE_typha-server");

/// Set in the child that runs in the network namespace.
const IN_NETNS: &str = "TYPHA_TEST_BALANCING_IN_NETNS";
/// Measuring mode: where to write the numbers (JSON).
const REPORT: &str = "TYPHA_BALANCE_REPORT";

/// The replicas' addresses (TEST-NET-1, on the namespace's loopback device).
const REPLICAS: [&str; 3] = ["192.0.2.1", "192.0.2.2", "192.0.2.3"];
const SYNC_PORT: u16 = 5473;
const HEALTH_PORT: u16 = 9098;
const METRICS_PORT: u16 = 9093;

const NODES: usize = 600;
const AGENTS: usize = 600;
/// `TYPHA_REBALANCEPOLLSECS`, `TYPHA_REBALANCEMOVESPERSEC`, `TYPHA_SHUTDOWNTIMEOUTSECS`.
const POLL_SECS: u64 = 1;
const MOVES_PER_SEC: u64 = 50;
const SHUTDOWN_SECS: u64 = 5;
/// Balanced: every replica within the governor's tolerance (10 %) of the mean.
const TOLERANCE: f64 = 0.1;

const NS: &str = common::kube::TYPHA_NAMESPACE;
const SERVICE: &str = "calico-typha";

#[test]
fn three_replicas_balance_and_roll_without_a_snapshot() {
    if std::env::var_os(IN_NETNS).is_some() {
        return;
    }
    let status = Command::new("unshare")
        .args(["--net", "--"])
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", "in_its_own_network_namespace", "--nocapture"])
        .args(["--test-threads", "1"])
        .env(IN_NETNS, "1")
        .status();
    match status {
        Ok(s) => assert!(s.success(), "the run in its network namespace failed: {s}"),
        Err(e) => {
            assert!(
                std::env::var_os(common::kube::ALLOW_SKIP).is_some(),
                "cannot run `unshare --net` (util-linux, root): {e}"
            );
            eprintln!("skipped: cannot run `unshare --net`: {e}");
        }
    }
}

/// Not a test on its own: the body of the one above, in a fresh network namespace.
#[test]
fn in_its_own_network_namespace() {
    if std::env::var_os(IN_NETNS).is_none() {
        return;
    }
    let ip = |args: &[&str]| {
        let s = Command::new("ip")
            .args(args)
            .status()
            .expect("ip (iproute2)");
        assert!(s.success(), "ip {args:?}");
    };
    ip(&["link", "set", "lo", "up"]);
    for a in REPLICAS {
        ip(&["addr", "add", &format!("{a}/32"), "dev", "lo"]);
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(scenario());
}

async fn scenario() {
    let Some(cp): Option<ControlPlane> = common::kube::default().await else {
        return;
    };
    let admin = cp.admin().unwrap();
    // The servers' logs outlive a failed run (the control plane's folder does not).
    let logs = tempfile::Builder::new()
        .prefix("typha-balancing-logs-")
        .tempdir()
        .unwrap()
        .keep();
    eprintln!("typha-server logs: {}", logs.display());
    let began = Instant::now();

    // typha-server's identity: the README's rules, and list on EndpointSlices (balancing).
    let mut rules = common::kube::readme_rules();
    rules.push(("discovery.k8s.io".into(), vec!["endpointslices".into()]));
    cp.grant(NS, common::kube::TYPHA_ACCOUNT, "calico-typha", &rules)
        .await
        .unwrap();
    let token = cp
        .service_account_token(NS, common::kube::TYPHA_ACCOUNT)
        .await
        .unwrap();
    let kubeconfig: PathBuf = cp.write_kubeconfig("typha", &token).unwrap();
    let tls = Tls::write(&cp.dir().join("typha-tls"));

    // The Service, its EndpointSlice with one replica, and the nodes.
    common::kube::apply(
        &admin,
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": SERVICE, "namespace": NS},
               "spec": {"selector": {"k8s-app": "calico-typha"},
                        "ports": [{"name": "calico-typha", "port": SYNC_PORT,
                                   "targetPort": "calico-typha", "protocol": "TCP"}]}}),
    )
    .await;
    publish(&admin, [Some(true), None, None]).await;
    futures_util::stream::iter(0..NODES)
        .map(|i| {
            let admin = admin.clone();
            async move { common::kube::apply(&admin, node(i, 0)).await }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
    let seeded = began.elapsed();

    // 1. One replica serves every agent.
    let mut replicas: Vec<Replica> = vec![Replica::start(0, &kubeconfig, &tls, &logs, 0)];
    replicas[0].until_ready().await;
    let want = datastore_digest(&admin).await;
    let status = replicas[0].status().await;
    assert_eq!(
        status["digest"],
        format!("{:016x}", want.0),
        "the replica serves the cluster as the API server holds it: {status}"
    );
    let joined_at = Instant::now();
    let agents = Agents::start(AGENTS, &tls);
    agents
        .all_at(
            want.0,
            "every agent on the first replica",
            Duration::from_secs(120),
        )
        .await;
    let joined = joined_at.elapsed();
    let updates_at_join = agents.updates();
    assert_eq!(replicas[0].load().await, AGENTS);
    let first = replicas[0].metrics().await;
    assert_eq!(first.snapshots, AGENTS as f64, "{first:?}");

    // 2. Scale to three replicas; changes flow meanwhile.
    for k in 1..3 {
        replicas.push(Replica::start(k, &kubeconfig, &tls, &logs, 0));
    }
    for r in &replicas[1..] {
        r.until_ready().await;
    }
    let (stop_churn, churn_rx) = tokio::sync::watch::channel(false);
    let churner = tokio::spawn(churn(cp.admin().unwrap(), churn_rx));
    let scaled_at = Instant::now();
    publish(&admin, [Some(true); 3]).await;
    // What the settings allow: a poll to see the replicas, the excess at the moves' rate, a
    // poll to see the result; plus slack for a loaded CI machine.
    let excess = (AGENTS - AGENTS / 3) as u64;
    let bound = Duration::from_secs(2 * POLL_SECS + excess.div_ceil(MOVES_PER_SEC) + 20);
    let refs: Vec<&Replica> = replicas.iter().collect();
    let loads = until_balanced(&refs, AGENTS, bound).await;
    let balanced = scaled_at.elapsed();
    let sessions_at_balance = agents.metrics.reconnects.get();
    let mut moved_by_balancing = Counters::default();
    for r in &replicas {
        moved_by_balancing.add(&r.metrics().await);
    }

    // 3. A rolling replacement, one replica at a time.
    let mut totals = Counters::default();
    let roll_at = Instant::now();
    let mut steps = Vec::new();
    for k in 0..3 {
        let mut ready = [Some(true); 3];
        ready[k] = Some(false);
        publish(&admin, ready).await;
        // Its counters are final once it stops accepting; read them while it can answer.
        let old = replicas.remove(k);
        let held = old.load().await;
        let lived = old.started.elapsed();
        let (drain, counted) = old.terminate().await;
        totals.add(&counted);
        let restart_at = Instant::now();
        let new = Replica::start(k, &kubeconfig, &tls, &logs, 1);
        new.until_ready().await;
        let ready_in = restart_at.elapsed();
        replicas.insert(k, new);
        publish(&admin, [Some(true); 3]).await;
        steps.push(
            json!({"replica": REPLICAS[k], "held": held, "drain_secs": drain.as_secs_f64(),
                          "new_ready_secs": ready_in.as_secs_f64(),
                          "lived_secs": lived.as_secs_f64()}),
        );
    }
    let refs: Vec<&Replica> = replicas.iter().collect();
    let loads_after_roll = until_balanced(&refs, AGENTS, bound).await;
    let rolled = roll_at.elapsed();

    // Everything converges on the cluster as it is now.
    let _ = stop_churn.send(true);
    let writes = churner.await.unwrap();
    let want = datastore_digest(&admin).await;
    for r in &replicas {
        let deadline = Instant::now() + Duration::from_secs(30);
        while r.status().await["digest"] != format!("{:016x}", want.0) {
            assert!(
                Instant::now() < deadline,
                "replica {} never reached the cluster's state",
                r.k
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    agents
        .all_at(
            want.0,
            "every agent at the final state",
            Duration::from_secs(60),
        )
        .await;
    for r in &replicas {
        totals.add(&r.metrics().await);
    }
    let updates_after_join = agents.updates() - updates_at_join;
    let offer_bytes = agents.resume_offer_bytes();
    let m = agents.metrics.clone();
    // The agents share one set of metrics, which counts every session after its very first
    // as a reconnect: the other agents' first sessions are not.
    let reconnects = m.reconnects.get() - (AGENTS as u64 - 1);
    let ended = |c| m.ended_count(c);
    let client_resumes = |k| m.resume_count(k);

    // The numbers, whatever happens next.
    let report = json!({
        "nodes": NODES, "agents": AGENTS, "kvs": want.1,
        "settings": {"poll_secs": POLL_SECS, "moves_per_sec": MOVES_PER_SEC,
                     "shutdown_timeout_secs": SHUTDOWN_SECS},
        "seed_secs": seeded.as_secs_f64(),
        "join_one_replica_secs": joined.as_secs_f64(),
        "full_snapshot_bytes": first.snapshot_bytes,
        "full_snapshot_raw_bytes": first.snapshot_raw_bytes,
        "resume_offer_bytes": offer_bytes,
        "balancing": {"secs": balanced.as_secs_f64(), "loads": loads,
                      "moved": moved_by_balancing.rebalanced,
                      "refused_at_limit": moved_by_balancing.refused,
                      "digest_resumes": moved_by_balancing.digests,
                      "deltas_resumes": moved_by_balancing.deltas,
                      "snapshots": moved_by_balancing.snapshots - first.snapshots,
                      "reconnects": sessions_at_balance - (AGENTS as u64 - 1)},
        "roll": {"secs": rolled.as_secs_f64(), "steps": steps, "loads_after": loads_after_roll,
                 "reconnects": m.reconnects.get() - sessions_at_balance},
        "whole_run": {"reconnects": reconnects,
                      "moved_by_balancing": totals.rebalanced,
                      // As last read before each process exited (the last few Goodbyes of a
                      // drain may come after); the agents' counts are exact.
                      "drained_at_shutdown": totals.drained,
                      "refused_at_limit": totals.refused,
                      "resumes": {"snapshot": totals.snapshots, "digest": totals.digests,
                                  "deltas": totals.deltas},
                      "resume_bytes": {"snapshot": totals.snapshot_resume_bytes,
                                       "digest": totals.digest_bytes},
                      "snapshots_sent_after_the_first_join":
                          totals.snapshots_built + totals.snapshots_reused - AGENTS as f64,
                      "bytes_sent_by_servers": totals.bytes_sent,
                      "bytes_received_by_agents": m.bytes_received.get(),
                      "agents_sessions_ended_by_goodbye": ended(EndCause::Goodbye),
                      "agents_resumes": {"snapshot": client_resumes(ResumeKind::Snapshot),
                                         "digest": client_resumes(ResumeKind::Digest),
                                         "deltas": client_resumes(ResumeKind::Deltas)},
                      "updates_delivered_after_joining": updates_after_join,
                      "churn_writes": writes},
        "typha_way": {"full_resyncs": reconnects,
                      "bytes": reconnects as f64 * first.snapshot_bytes},
        "total_secs": began.elapsed().as_secs_f64(),
    });
    println!("balancing report: {report}");
    if let Some(path) = std::env::var_os(REPORT) {
        std::fs::write(path, serde_json::to_string_pretty(&report).unwrap()).unwrap();
    }

    // No agent needed a snapshot after its first, by every count.
    assert_eq!(
        totals.snapshots, AGENTS as f64,
        "server resumes by snapshot: {report}"
    );
    assert_eq!(
        totals.snapshots_built + totals.snapshots_reused,
        AGENTS as f64,
        "full snapshots sent by any server (in-band ones included): {report}"
    );
    assert_eq!(
        client_resumes(ResumeKind::Snapshot),
        AGENTS as u64,
        "{report}"
    );
    // Agents were moved (the first replica's excess, then the roll), each session ended by a
    // server's Goodbye, never by a gap, a digest mismatch, a lost connection or a protocol
    // error, and the moved agents resumed by digest (or by deltas, back on a replica they had
    // been on).
    assert!(
        totals.rebalanced >= excess as f64 && totals.drained > 0.0,
        "the first replica moved its excess and the roll drained agents: {report}"
    );
    assert!(
        moved_by_balancing.rebalanced <= excess as f64 * (1.0 + TOLERANCE),
        "moved about the excess, not clients back and forth: {report}"
    );
    assert!(reconnects >= excess + (AGENTS / 3) as u64, "{report}");
    assert!(ended(EndCause::Goodbye) >= reconnects, "{report}");
    for c in [EndCause::Inconsistent, EndCause::Lost, EndCause::Other] {
        assert_eq!(ended(c), 0, "sessions ended {}: {report}", c.as_str());
    }
    let resumed = client_resumes(ResumeKind::Digest) + client_resumes(ResumeKind::Deltas);
    assert!(
        resumed >= moved_by_balancing.rebalanced as u64,
        "every moved agent resumed: {report}"
    );
    assert_eq!(
        resumed,
        (totals.digests + totals.deltas) as u64,
        "agents and servers count the same resumes: {report}"
    );
    assert!(writes > 20, "the data changed during the run: {report}");

    // Each agent holds exactly the cluster: by its store's digest, and by its consumer's own
    // copy built from the callbacks.
    for (i, (agent, store)) in agents.stop().await.into_iter().enumerate() {
        let v = agent.0.lock().unwrap();
        assert_eq!(store.digest().combined(), want.0, "node-{i:03}'s store");
        assert_eq!(store.len(), want.1, "node-{i:03}'s store");
        assert_eq!(v.digest.combined(), want.0, "node-{i:03}'s consumer");
        assert_eq!(v.kvs.len(), want.1, "node-{i:03}'s consumer");
        assert_eq!(v.wrong_kinds, 0, "node-{i:03}: updates of the wrong kind");
    }
    drop(replicas);
    drop(cp);
    if std::env::var_os(REPORT).is_none() {
        let _ = std::fs::remove_dir_all(&logs);
    }
}
