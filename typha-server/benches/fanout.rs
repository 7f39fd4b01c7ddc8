//! Fan-out benchmark (issue 3): frames encoded per update, and the server's CPU per update per
//! connection, at 1, 100 and 1,000 mutual-TLS connections.
//!
//! The server runs in this process on its own runtime, whose threads are named
//! `typha-server`; clients run on another runtime (`bench-client`). Server CPU is read per
//! thread from /proc/self/task, so the clients' work (TLS decrypt, decode) is not counted.
//! Each client is a real TLS connection speaking the protocol; it decodes every frame and
//! checks that every update arrived.
//!
//! Run: `cargo bench -p typha-server --bench fanout` (add `-- 1 100` to pick client counts).
//! Results: BENCHMARKS.md.

// A benchmark of generated data: a panic is a bug in the bench.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    missing_docs
)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use typha_protocol::frame::{FrameDecoder, FrameEncoder, Limits};
use typha_protocol::handshake::{ClientHandshake, ClientOffer};
use typha_protocol::message::Message;
use typha_server::config::Config;
use typha_server::datastore::embedded::Embedded;
use typha_server::metrics::FrameKind;
use typha_server::pki::Ca;
use typha_server::tls::TlsConfig;
use typha_test_support::sample::Spec;

const UPDATES: u64 = 2_000;
const RATE_PER_SEC: u64 = 400;

/// CPU seconds (user + system) of this process's threads whose name starts with `prefix`.
fn thread_cpu(prefix: &str) -> f64 {
    let tick = 100.0; // USER_HZ on Linux
    let mut total = 0.0;
    for entry in std::fs::read_dir("/proc/self/task").unwrap() {
        let dir = entry.unwrap().path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if !comm.trim_end().starts_with(prefix) {
            continue;
        }
        let stat = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
        // Fields after the parenthesised name: state is field 3; utime 14, stime 15.
        let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
        let f: Vec<&str> = after.split_whitespace().collect();
        let ut: f64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0);
        let st: f64 = f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0.0);
        total += (ut + st) / tick;
    }
    total
}

struct Run {
    clients: usize,
    updates: u64,
    breadcrumbs: u64,
    delta_frames: u64,
    span_frames: u64,
    server_cpu: f64,
    received: u64,
    secs: f64,
}

fn run(clients: usize, pki: &(TlsConfig, Arc<rustls::ClientConfig>)) -> Run {
    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("typha-server")
        .enable_all()
        .build()
        .unwrap();
    let client_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("bench-client")
        .enable_all()
        .build()
        .unwrap();
    let store = Embedded::new();
    let spec = Spec {
        nodes: 50,
        pods_per_node: 20,
        ..Spec::default()
    };
    store.bulk_load(spec.resources());
    let mut cfg = Config::for_tests();
    cfg.tls = Some(pki.0.clone());
    cfg.max_connections = 100_000;
    let srv = server_rt
        .block_on(typha_server::server::start(cfg, Arc::new(store.clone())))
        .unwrap();
    let addr = srv.addr;

    // Connect and sync every client.
    let received = Arc::new(AtomicU64::new(0));
    let synced = Arc::new(AtomicU64::new(0));
    for i in 0..clients {
        let (tls, received, synced) = (pki.1.clone(), received.clone(), synced.clone());
        client_rt.spawn(async move {
            let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
            let mut s = tokio_rustls::TlsConnector::from(tls)
                .connect(ServerName::try_from("localhost").unwrap(), tcp)
                .await
                .unwrap();
            let hs = ClientHandshake::new(
                ClientOffer::new(format!("bench-{i}")),
                std::time::Instant::now(),
            );
            let hello = FrameEncoder::uncompressed()
                .encode(&Message::ClientHello(hs.hello()))
                .unwrap();
            s.write_all(&hello).await.unwrap();
            let mut dec = FrameDecoder::new(Limits::CLIENT_INBOUND);
            let mut buf = BytesMut::with_capacity(64 << 10);
            let mut in_sync = false;
            loop {
                while let Some(m) = dec.decode(&mut buf).unwrap() {
                    match m {
                        Message::Deltas(d) if in_sync => {
                            received.fetch_add(d.updates.len() as u64, Ordering::Relaxed);
                        }
                        Message::SyncStatus(typha_protocol::model::SyncStatus::InSync)
                            if !in_sync =>
                        {
                            in_sync = true;
                            synced.fetch_add(1, Ordering::Relaxed);
                        }
                        Message::Ping(p) => {
                            let pong = FrameEncoder::uncompressed()
                                .encode(&Message::Pong(typha_protocol::message::Pong {
                                    ping_timestamp_micros: p.timestamp_micros,
                                }))
                                .unwrap();
                            s.write_all(&pong).await.unwrap();
                        }
                        _ => {}
                    }
                }
                if s.read_buf(&mut buf).await.unwrap_or(0) == 0 {
                    return;
                }
            }
        });
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    while synced.load(Ordering::Relaxed) < clients as u64 {
        assert!(Instant::now() < deadline, "clients did not sync");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(500));

    // Churn at a steady rate; measure the server's CPU over it.
    let m = srv.metrics.clone();
    let (d0, s0, seq0) = (
        m.encoded_count(FrameKind::delta),
        m.encoded_count(FrameKind::span),
        srv.cache.latest().seq.0,
    );
    let cpu0 = thread_cpu("typha-server");
    let start = Instant::now();
    let period = Duration::from_secs_f64(1.0 / RATE_PER_SEC as f64);
    for g in 0..UPDATES {
        let due = start + period * g as u32;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        store.put(spec.workload_endpoint((g % 50) as usize, (g % 20) as usize, g + 1));
    }
    let want = UPDATES * clients as u64;
    let deadline = Instant::now() + Duration::from_secs(120);
    while received.load(Ordering::Relaxed) < want {
        assert!(
            Instant::now() < deadline,
            "only {} of {want} updates delivered",
            received.load(Ordering::Relaxed)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let secs = start.elapsed().as_secs_f64();
    let server_cpu = thread_cpu("typha-server") - cpu0;
    let r = Run {
        clients,
        updates: UPDATES,
        breadcrumbs: srv.cache.latest().seq.0 - seq0,
        delta_frames: m.encoded_count(FrameKind::delta) - d0,
        span_frames: m.encoded_count(FrameKind::span) - s0,
        server_cpu,
        received: received.load(Ordering::Relaxed),
        secs,
    };
    server_rt.block_on(srv.shutdown());
    client_rt.shutdown_timeout(Duration::from_secs(1));
    server_rt.shutdown_timeout(Duration::from_secs(1));
    r
}

fn main() {
    let counts: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let counts = if counts.is_empty() {
        vec![1, 100, 1000]
    } else {
        counts
    };
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("bench-ca").unwrap();
    let server = ca.server("typha-server", &["localhost"]).unwrap();
    let client = ca.client("typha-client", None).unwrap();
    let w = |name: &str, body: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, body).unwrap();
        p
    };
    let tls = TlsConfig {
        cert_file: w("server.crt", &server.cert_pem),
        key_file: w("server.key", &server.key_pem),
        ca_file: w("ca.crt", &ca.cert_pem),
        client_cns: vec!["typha-client".into()],
        client_uri_sans: vec![],
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca.cert_pem.as_bytes()).unwrap())
        .unwrap();
    let client_tls = Arc::new(
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_client_auth_cert(
                vec![CertificateDer::from_pem_slice(client.cert_pem.as_bytes()).unwrap()],
                PrivateKeyDer::from_pem_slice(client.key_pem.as_bytes()).unwrap(),
            )
            .unwrap(),
    );
    let pki = (tls, client_tls);
    println!(
        "fan-out over mutual TLS: {UPDATES} updates at {RATE_PER_SEC}/s, 1,000-endpoint cluster, server on 1 thread"
    );
    println!(
        "| clients | updates | breadcrumbs | delta frames encoded | frames/breadcrumb | frames/update | span frames | delivered | server CPU s | server CPU µs per update per client |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for n in counts {
        let r = run(n, &pki);
        println!(
            "| {} | {} | {} | {} | {:.3} | {:.3} | {} | {} | {:.2} | {:.2} |",
            r.clients,
            r.updates,
            r.breadcrumbs,
            r.delta_frames,
            r.delta_frames as f64 / r.breadcrumbs.max(1) as f64,
            r.delta_frames as f64 / r.updates as f64,
            r.span_frames,
            r.received,
            r.server_cpu,
            r.server_cpu * 1e6 / (r.updates as f64 * r.clients as f64),
        );
        let _ = r.secs;
    }
}
