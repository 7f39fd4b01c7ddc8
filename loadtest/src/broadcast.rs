//! `loadtest __broadcast`: the bare broadcaster of the `ceiling` scenario. It accepts
//! connections (mutual TLS with the run's certificates, or plain TCP) and, on `blast <updates>
//! <secs>`, writes one pre-encoded Deltas frame of `<updates>` workload-endpoint updates to
//! every connection, again and again, for `<secs>` seconds: the most this machine can push to
//! that many connections, with no cache, no per-client state and no encoding in the loop.
//! Writes are batched like the server's (copies of the frame up to 16 KiB per write).
//!
//! With `--steady` it is instead the floor of the `steady` scenario: a paced feed of single
//! updates to handshaken clients (see `steady`).

mod steady;
mod totals;

use self::totals::Totals;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context;
use bytes::{Bytes, BytesMut};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio::sync::watch;
use typha_protocol::frame::FrameEncoder;
use typha_protocol::message::{Deltas, Message, Seq};
use typha_protocol::sample::{Cluster, ClusterSpec};
use typha_server::tls::TlsConfig;

use crate::raw::Io;

/// Settings of the broadcaster child.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct BroadcastArgs {
    /// Listener.
    #[arg(long)]
    pub(crate) listen: std::net::SocketAddr,
    /// Directory with ca.crt, server.crt, server.key (omit for plain TCP).
    #[arg(long)]
    pub(crate) tls_dir: Option<PathBuf>,
    /// Steady mode: clients handshake and sync, then get a paced feed of updates on
    /// `steady <rate> <secs> <nodes> <pods>` (see `steady`).
    #[arg(long)]
    pub(crate) steady: bool,
}

/// One blast: the frame, and until when.
#[derive(Clone)]
struct Blast {
    batch: Bytes,
    frames_per_batch: u64,
    until: tokio::time::Instant,
}

/// A Deltas frame of `n` updates, encoded and compressed as the server does.
fn frame(n: usize) -> anyhow::Result<Bytes> {
    let cluster = Cluster::new(ClusterSpec::default());
    let kvs: Vec<_> = cluster.workload_endpoints().take(n.max(1)).collect();
    let updates = typha_protocol::sample::to_updates(&kvs, 1);
    let msg = Message::Deltas(Deltas {
        from_seq: Seq(1),
        seq: Seq(2),
        digest: 0,
        updates,
    });
    Ok(FrameEncoder::zstd(1)?.encode(&msg)?)
}

pub(crate) async fn run(a: BroadcastArgs) -> anyhow::Result<()> {
    let acceptor = match &a.tls_dir {
        Some(d) => Some(tokio_rustls::TlsAcceptor::from(
            typha_server::tls::server_config(&TlsConfig {
                cert_file: d.join("server.crt"),
                key_file: d.join("server.key"),
                ca_file: d.join("ca.crt"),
                client_cns: vec!["typha-client".into()],
                client_uri_sans: vec![],
            })
            .map_err(|e| anyhow::anyhow!("{e}"))?,
        )),
        None => None,
    };
    let listener = TcpListener::bind(a.listen).await.context("listening")?;
    println!(
        "{}",
        json!({"event": "ready", "addr": listener.local_addr()?.to_string()})
    );
    let totals = Arc::new(Totals::default());
    let (blast_tx, blast_rx) = watch::channel::<Option<Blast>>(None);
    let feed = Arc::new(steady::Feed::new()?);
    {
        let totals = totals.clone();
        let feed = a.steady.then(|| feed.clone());
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, totals, rx) = (acceptor.clone(), totals.clone(), blast_rx.clone());
                let feed = feed.clone();
                tokio::spawn(async move {
                    let _ = tcp.set_nodelay(true);
                    let io: Box<dyn Io> = match acceptor {
                        Some(acc) => match acc.accept(tcp).await {
                            Ok(s) => Box::new(s),
                            Err(_) => return,
                        },
                        None => Box::new(tcp),
                    };
                    totals.connections.fetch_add(1, Ordering::Relaxed);
                    match feed {
                        Some(feed) => {
                            if let Err(e) = steady::serve(io, feed, totals.clone()).await {
                                tracing::debug!(error = %e, "steady connection ended");
                            }
                        }
                        None => serve(io, rx, &totals).await,
                    }
                    totals.connections.fetch_sub(1, Ordering::Relaxed);
                });
            }
        });
    }
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["connections"] => println!(
                "{}",
                json!({"event": "connections", "connections": totals.connections.load(Ordering::Relaxed)})
            ),
            ["blast", updates, secs] => {
                let f = frame(updates.parse().context("updates per frame")?)?;
                let secs: f64 = secs.parse().context("seconds")?;
                let copies = (16 << 10) / f.len().max(1);
                let copies = copies.max(1);
                let mut batch = BytesMut::with_capacity(f.len() * copies);
                for _ in 0..copies {
                    batch.extend_from_slice(&f);
                }
                let (b0, f0) = (
                    totals.bytes.load(Ordering::Relaxed),
                    totals.frames.load(Ordering::Relaxed),
                );
                let start = tokio::time::Instant::now();
                let until = start + Duration::from_secs_f64(secs);
                let _ = blast_tx.send(Some(Blast {
                    batch: batch.freeze(),
                    frames_per_batch: copies as u64,
                    until,
                }));
                tokio::time::sleep_until(until).await;
                // What was written by the deadline (each writer finishes its batch after it).
                let (b1, f1) = (
                    totals.bytes.load(Ordering::Relaxed),
                    totals.frames.load(Ordering::Relaxed),
                );
                println!(
                    "{}",
                    json!({
                        "event": "blasted",
                        "frame_bytes": f.len(),
                        "bytes": b1 - b0,
                        "frames": f1 - f0,
                        "secs": start.elapsed().as_secs_f64(),
                    })
                );
            }
            ["steady", rate, secs, nodes, pods] => {
                let rate: f64 = rate.parse().context("rate")?;
                let secs: f64 = secs.parse().context("seconds")?;
                let shape = (
                    nodes.parse().context("nodes")?,
                    pods.parse().context("pods per node")?,
                );
                let (f0, b0) = (
                    totals.frames.load(Ordering::Relaxed),
                    totals.bytes.load(Ordering::Relaxed),
                );
                let started = tokio::time::Instant::now();
                let (updates, frame_bytes) = steady::churn(&feed, rate, secs, shape).await?;
                println!(
                    "{}",
                    json!({
                        "event": "steadied",
                        "updates": updates,
                        "frame_bytes": frame_bytes,
                        "secs": started.elapsed().as_secs_f64(),
                        "frames_written": totals.frames.load(Ordering::Relaxed) - f0,
                        "bytes_written": totals.bytes.load(Ordering::Relaxed) - b0,
                    })
                );
            }
            ["state"] => {
                let (seq, digest) = feed.position();
                println!(
                    "{}",
                    json!({
                        "event": "state",
                        "seq": seq,
                        "digest": digest,
                        "bytes_written": totals.bytes.load(Ordering::Relaxed),
                        "dropped": totals.dropped.load(Ordering::Relaxed),
                    })
                );
            }
            ["quit"] => break,
            _ => println!(
                "{}",
                json!({"event": "error", "message": format!("unknown command {line:?}")})
            ),
        }
    }
    Ok(())
}

/// Writes every blast to one connection until its deadline.
async fn serve(mut io: Box<dyn Io>, mut rx: watch::Receiver<Option<Blast>>, totals: &Totals) {
    loop {
        if rx.changed().await.is_err() {
            return;
        }
        let Some(b) = rx.borrow_and_update().clone() else {
            continue;
        };
        // Whole batches only, so frames stay whole for the readers.
        while tokio::time::Instant::now() < b.until {
            if io.write_all(&b.batch).await.is_err() || io.flush().await.is_err() {
                return;
            }
            totals
                .bytes
                .fetch_add(b.batch.len() as u64, Ordering::Relaxed);
            totals
                .frames
                .fetch_add(b.frames_per_batch, Ordering::Relaxed);
        }
    }
}
