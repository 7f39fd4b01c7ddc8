//! `loadtest __server`: the real server (the typha-server library, the same code its binary
//! runs) over the embedded datastore, in its own process, plus a churner driven from stdin.
//!
//! Commands (one per line on stdin): `churn <rate> <secs>` writes workload-endpoint updates at
//! `rate` per second for `secs` seconds, each stamped with the wall-clock time of its write
//! (label `loadtest.sent-unix-ns`), so a node can measure datastore-write-to-receipt latency;
//! `state` prints the cache's sequence number, digest and counters; `quit` shuts down
//! gracefully. Replies are JSON lines on stdout.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use typha_server::config::{Config, DatastoreConfig};
use typha_server::datastore::embedded::{DirSource, Embedded};
use typha_server::metrics::{FrameKind, ResumeKind};
use typha_server::sample::Spec;
use typha_server::tls::TlsConfig;

/// Label carrying the write time of a churn update.
pub(crate) const SENT_LABEL: &str = "loadtest.sent-unix-ns";

/// Settings of the server child.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ServerArgs {
    /// Manifest directory.
    #[arg(long)]
    pub(crate) dir: PathBuf,
    /// Sync listener.
    #[arg(long)]
    pub(crate) listen: std::net::SocketAddr,
    /// Directory with ca.crt, server.crt, server.key (omit for plaintext).
    #[arg(long)]
    pub(crate) tls_dir: Option<PathBuf>,
    /// Shape of the churned cluster: nodes.
    #[arg(long)]
    pub(crate) nodes: usize,
    /// Shape of the churned cluster: pods per node.
    #[arg(long)]
    pub(crate) pods: usize,
}

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

fn say(v: serde_json::Value) {
    println!("{v}");
}

pub(crate) async fn run(a: ServerArgs) -> anyhow::Result<()> {
    let store = Embedded::new();
    let mut src = DirSource::new(a.dir.clone(), store.clone());
    let report = src.scan();
    anyhow::ensure!(
        report.new_warnings.is_empty(),
        "manifests: {:?}",
        report.new_warnings
    );
    let mut cfg = Config {
        listen: a.listen,
        health: None,
        metrics: None,
        ..Config::default()
    };
    cfg.datastore = DatastoreConfig::Embedded {
        dir: Some(a.dir.clone()),
        scan_interval: Duration::from_millis(250),
    };
    cfg.max_connections = 100_000;
    cfg.shutdown_timeout = Duration::from_secs(5);
    if let Some(d) = &a.tls_dir {
        cfg.tls = Some(TlsConfig {
            cert_file: d.join("server.crt"),
            key_file: d.join("server.key"),
            ca_file: d.join("ca.crt"),
            client_cns: vec!["typha-client".into()],
            client_uri_sans: vec![],
        });
    }
    let srv = typha_server::server::start(cfg, Arc::new(store.clone()))
        .await
        .context("starting the server")?;
    // Ready only once the cache holds the whole cluster.
    while srv.cache.latest().status != protocol::model::SyncStatus::InSync {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    say(json!({"event": "ready", "addr": srv.addr.to_string(), "kvs": srv.cache.latest().kvs}));
    let spec = Spec {
        nodes: a.nodes.max(1),
        pods_per_node: a.pods.max(1),
        ..Spec::default()
    };
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut churner: Option<tokio::task::JoinHandle<u64>> = None;
    while let Ok(Some(line)) = lines.next_line().await {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["churn", rate, secs] => {
                let rate: f64 = rate.parse().context("churn rate")?;
                let secs: f64 = secs.parse().context("churn seconds")?;
                let (store, spec) = (store.clone(), spec.clone());
                churner = Some(tokio::spawn(async move {
                    churn(&store, &spec, rate, secs).await
                }));
            }
            ["wait-churn"] => {
                let n = match churner.take() {
                    Some(h) => h.await.unwrap_or(0),
                    None => 0,
                };
                say(json!({"event": "churned", "updates": n}));
            }
            ["state"] => {
                let c = srv.cache.latest();
                let m = &srv.metrics;
                say(json!({
                    "event": "state",
                    "seq": c.seq.0,
                    "digest": format!("{:016x}", c.digest),
                    "kvs": c.kvs,
                    "connections": srv.connections(),
                    "delta_frames": m.encoded_count(FrameKind::delta),
                    "span_frames": m.encoded_count(FrameKind::span),
                    "bytes_sent": m.bytes_sent.get(),
                    "snapshots_generated": m.snapshots_generated.get(),
                    "snapshots_reused": m.snapshots_reused.get(),
                    "resumes_deltas": m.resume_count(ResumeKind::deltas),
                    "resumes_digest": m.resume_count(ResumeKind::digest),
                    "resumes_snapshot": m.resume_count(ResumeKind::snapshot),
                }));
            }
            ["quit"] => break,
            _ => say(json!({"event": "error", "message": format!("unknown command {line:?}")})),
        }
    }
    srv.shutdown().await;
    Ok(())
}

/// Writes `rate` updates per second for `secs` seconds; returns how many it wrote.
async fn churn(store: &Embedded, spec: &Spec, rate: f64, secs: f64) -> u64 {
    let total = (rate * secs).round() as u64;
    let start = tokio::time::Instant::now();
    let per = Duration::from_secs_f64(1.0 / rate.max(0.001));
    for i in 0..total {
        tokio::time::sleep_until(start + per.mul_f64(i as f64)).await;
        let node = (i as usize) % spec.nodes;
        let pod = (i as usize / spec.nodes) % spec.pods_per_node;
        let mut r = spec.workload_endpoint(node, pod, i + 1);
        r.metadata
            .labels
            .insert(SENT_LABEL.into(), now_ns().to_string());
        store.put(r);
    }
    total
}
