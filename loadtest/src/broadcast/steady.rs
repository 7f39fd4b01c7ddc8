//! The bare broadcaster's steady mode (`__broadcast --steady`): the floor `steady` compares
//! our server with. It speaks just enough of our protocol for the same swarm code (sample
//! typha-clients and lean nodes) to read it: the server side of the handshake
//! (`typha_protocol::handshake`), a snapshot of its state on join, the sync status, pings; it
//! reads what clients send (pongs, acks) without looking at it.
//!
//! On `steady <rate> <secs> <nodes> <pods>` it writes `rate` updates a second for `secs`
//! seconds: the same workload-endpoint rewrites our churn writes to the datastore (the same
//! generated cluster, the same conversion, the write time stamped in the same label), each
//! update alone in one Deltas frame (chained `from_seq` → `seq`, with the state's real digest),
//! encoded and compressed once as the server does, and written by each connection's task as
//! soon as it is published: one update per frame, one frame per write while the connection
//! keeps up (the bare floor of the work per update: no coalescing of updates, no cache, no
//! per-client state beyond a channel receiver); a connection that fell behind writes the
//! frames queued for it together, up to 16 KiB, as the server batches writes, so an
//! overloaded machine does not also pay a TLS record per frame. Its state starts empty, so
//! joining costs nothing to compare.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, bail};
use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::broadcast;
use typha_protocol::digest::StateDigest;
use typha_protocol::frame::{FrameDecoder, FrameEncoder, Limits};
use typha_protocol::handshake::{ServerHandshake, ServerOffer};
use typha_protocol::message::{
    Deltas, Epoch, Message, Ping, Seq, SnapshotBegin, SnapshotChunk, SnapshotEnd, SnapshotScope,
};
use typha_protocol::model::{
    EncodedValue, KeyPath, KeyType, Revision, SyncStatus, Update, UpdateKind,
};

use super::totals::Totals;
use crate::raw::Io;

/// Frames a connection may fall behind by before it is dropped (its node then resyncs).
const BACKLOG: usize = 1 << 15;
/// KVs per snapshot chunk, as the server's.
const CHUNK_KVS: usize = 1000;
const PING_EVERY: Duration = Duration::from_secs(10);
/// The most bytes of queued frames put in one write.
const MAX_WRITE: usize = 16 << 10;

struct State {
    seq: Seq,
    kvs: HashMap<KeyPath, EncodedValue>,
    digest: StateDigest,
    enc: FrameEncoder,
    /// The frames that bring a joining client to `seq`, built on first use.
    snapshot: Option<(Seq, Arc<Vec<Bytes>>)>,
}

/// The broadcaster's state and its feed of frames.
pub(crate) struct Feed {
    state: Mutex<State>,
    tx: broadcast::Sender<Bytes>,
    epoch: Epoch,
}

impl Feed {
    pub(crate) fn new() -> anyhow::Result<Self> {
        let (tx, _) = broadcast::channel(BACKLOG);
        Ok(Feed {
            state: Mutex::new(State {
                seq: Seq(1),
                kvs: HashMap::new(),
                digest: StateDigest::new(),
                enc: FrameEncoder::zstd(typha_protocol::frame::DEFAULT_ZSTD_LEVEL)?,
                snapshot: None,
            }),
            tx,
            epoch: Epoch(crate::tally::now_ns() as u64),
        })
    }

    /// The frames that bring a new client to the current position, and everything published
    /// after it.
    fn join(&self) -> anyhow::Result<(Arc<Vec<Bytes>>, broadcast::Receiver<Bytes>)> {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let rx = self.tx.subscribe();
        if let Some((seq, frames)) = &s.snapshot
            && *seq == s.seq
        {
            return Ok((frames.clone(), rx));
        }
        let State {
            seq,
            kvs,
            digest,
            enc,
            ..
        } = &mut *s;
        let mut frames = vec![enc.encode(&Message::SnapshotBegin(SnapshotBegin {
            seq: *seq,
            scope: SnapshotScope::Full,
            kvs: kvs.len() as u64,
        }))?];
        let all: Vec<Update> = kvs
            .iter()
            .map(|(k, v)| Update::put(k.clone(), v.clone(), Revision(1), UpdateKind::New))
            .collect();
        for c in all.chunks(CHUNK_KVS) {
            frames.push(enc.encode(&Message::SnapshotChunk(SnapshotChunk {
                updates: c.to_vec(),
            }))?);
        }
        frames.push(enc.encode(&Message::SnapshotEnd(SnapshotEnd {
            seq: *seq,
            digest: digest.combined(),
        }))?);
        frames.push(enc.encode(&Message::SyncStatus(SyncStatus::InSync))?);
        let frames = Arc::new(frames);
        s.snapshot = Some((s.seq, frames.clone()));
        Ok((frames, rx))
    }

    /// Applies one update and publishes it as a Deltas frame of its own; the frame's length.
    fn publish(&self, key: KeyPath, value: EncodedValue, revision: u64) -> anyhow::Result<usize> {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let old = s.kvs.insert(key.clone(), value.clone());
        s.digest.apply(
            key.as_str(),
            old.as_ref().map(EncodedValue::as_bytes),
            Some(value.as_bytes()),
        );
        let from = s.seq;
        s.seq = Seq(from.0 + 1);
        let kind = if old.is_some() {
            UpdateKind::Updated
        } else {
            UpdateKind::New
        };
        let msg = Message::Deltas(Deltas {
            from_seq: from,
            seq: s.seq,
            digest: s.digest.combined(),
            updates: vec![Update::put(key, value, Revision(revision), kind)],
        });
        let frame = s.enc.encode(&msg)?;
        let len = frame.len();
        // Sent under the lock, so frames enter the channel in seq order. No receivers is fine.
        let _ = self.tx.send(frame);
        Ok(len)
    }

    /// The position and the digest there, as `(seq, digest hex)`.
    pub(crate) fn position(&self) -> (u64, String) {
        let s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        (s.seq.0, format!("{:016x}", s.digest.combined()))
    }
}

/// Writes `rate` churn updates a second for `secs` seconds (see the module doc); how many,
/// and their frames' total length.
pub(crate) async fn churn(
    feed: &Feed,
    rate: f64,
    secs: f64,
    shape: (usize, usize),
) -> anyhow::Result<(u64, u64)> {
    let spec = crate::cluster::cluster_spec(shape.0, shape.1);
    let total = (rate * secs).round() as u64;
    let per = Duration::from_secs_f64(1.0 / rate.max(0.001));
    let started = tokio::time::Instant::now();
    let mut bytes = 0u64;
    for i in 0..total {
        tokio::time::sleep_until(started + per.mul_f64(i as f64)).await;
        // As the datastore churn: node, pod and generation from the update's number.
        let node = (i as usize) % spec.nodes;
        let pod = (i as usize / spec.nodes) % spec.pods_per_node;
        let mut r = spec.workload_endpoint(node, pod, i + 1);
        r.metadata.labels.insert(
            crate::server::SENT_LABEL.into(),
            crate::tally::now_ns().to_string(),
        );
        let kvs = typha_server::calico::convert::convert(&r)
            .map_err(|e| anyhow::anyhow!("converting a churned endpoint: {e}"))?;
        for (k, v) in kvs {
            let key = KeyPath::from(&k);
            if key.key_type() != KeyType::WorkloadEndpoint {
                continue;
            }
            let len = feed.publish(key, EncodedValue::encode(&v), i + 1)?;
            bytes += len as u64;
        }
    }
    Ok((total, bytes))
}

/// One client: handshake, snapshot, then every published frame in a write of its own.
pub(crate) async fn serve(
    io: Box<dyn Io>,
    feed: Arc<Feed>,
    totals: Arc<Totals>,
) -> anyhow::Result<()> {
    let (mut r, mut w) = tokio::io::split(io);
    let mut dec = FrameDecoder::new(Limits::SERVER_INBOUND);
    let mut buf = BytesMut::with_capacity(1024);
    let started = std::time::Instant::now();
    let hello = loop {
        if let Some(m) = dec.decode(&mut buf)? {
            break m;
        }
        let n = tokio::time::timeout(Duration::from_secs(10), r.read_buf(&mut buf))
            .await
            .context("no hello")??;
        if n == 0 {
            bail!("closed before the hello");
        }
    };
    let mut hs = ServerHandshake::new(ServerOffer::new(feed.epoch), started);
    let accepted = hs
        .handle_message(hello, std::time::Instant::now())
        .map_err(|r| anyhow::anyhow!("hello refused: {r}"))?;
    let mut enc = FrameEncoder::uncompressed();
    w.write_all(&enc.encode(&Message::ServerHello(accepted.reply))?)
        .await?;
    let (snapshot, mut rx) = feed.join()?;
    for f in snapshot.iter() {
        w.write_all(f).await?;
    }
    w.flush().await?;
    let mut batch = BytesMut::new();
    let mut ping = tokio::time::interval(PING_EVERY);
    ping.tick().await;
    loop {
        tokio::select! {
            f = rx.recv() => match f {
                Ok(f) => {
                    // Frames already queued behind this one (the connection fell behind) go
                    // in the same write, up to 16 KiB, as the server batches its writes;
                    // each update is still a frame of its own.
                    let mut frames = 1;
                    let mut bytes = f.len();
                    if let Ok(next) = rx.try_recv() {
                        batch.clear();
                        batch.extend_from_slice(&f);
                        batch.extend_from_slice(&next);
                        frames += 1;
                        while batch.len() < MAX_WRITE && let Ok(next) = rx.try_recv() {
                            batch.extend_from_slice(&next);
                            frames += 1;
                        }
                        bytes = batch.len();
                        w.write_all(&batch).await?;
                    } else {
                        w.write_all(&f).await?;
                    }
                    w.flush().await?;
                    totals.frames.fetch_add(frames, Ordering::Relaxed);
                    totals.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
                }
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    totals.dropped.fetch_add(1, Ordering::Relaxed);
                    bail!("fell {n} frames behind");
                }
                Err(broadcast::error::RecvError::Closed) => return Ok(()),
            },
            // Pongs and acks: read, not looked at.
            n = r.read_buf(&mut buf) => {
                if n? == 0 {
                    return Ok(());
                }
                buf.clear();
            }
            _ = ping.tick() => {
                let micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
                w.write_all(&enc.encode(&Message::Ping(Ping { timestamp_micros: micros }))?).await?;
                w.flush().await?;
            }
        }
    }
}
