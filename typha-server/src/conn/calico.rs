//! A client speaking Calico's own Typha protocol (calico-node's Felix, confd, tunnel IP
//! allocator, node status reporter), on the same port as ours, told apart by its first bytes
//! ([`sniff`]).
//!
//! ```text
//! MsgClientHello ─▶ preamble, MsgServerHello ─▶ (snappy offered: MsgDecoderRestart, wait
//! for MsgACK, snappy identifier + preamble chunk) ─▶ snapshot MsgKVs, MsgSyncStatus ─▶
//! per breadcrumb: MsgKVs, MsgSyncStatus on change; MsgPing every ping interval, pongs read
//! ```
//!
//! Every stream starts with the server preamble, so the `MsgKVs` of a breadcrumb and of a
//! snapshot are encoded once per syncer type and carriage for every Calico client
//! ([`crate::cache::calico`]). Only the hello, the restart, sync status and pings are encoded
//! per connection (all tiny). Calico's protocol has no goodbye: a connection the server ends
//! (shutdown, limit, refusal) is simply closed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::sync::oneshot;
use tokio::time::{Instant, sleep_until, timeout_at};
use tracing::{debug, info, warn};
use typha_protocol::calico::gob::Limits;
use typha_protocol::calico::messages::{
    COMPRESSION_SNAPPY, ClientHello, DecoderRestart, GoTime, Message, MessageKind, Ping,
    RESTART_ENABLE_SNAPPY, ServerHello, Side,
};
use typha_protocol::calico::snappy::{self, STREAM_IDENTIFIER};
use typha_protocol::calico::{Protocol, StreamDecoder, StreamError, detect};
use typha_protocol::message::Seq;
use typha_protocol::model::SyncStatus;

use super::info::{ConnInfo, Phase};
use super::out::{Out, jitter, scopeguard};
use super::session::{Follow, Next};
use super::{Close, ConnError, Ctx};
use crate::cache::calico::{Carriage, Unencodable, build as build_snapshot};
use crate::calico::libcalico::SyncerType;
use crate::metrics::{DropReason, ResumeKind};

/// Why a Calico connection ended.
#[derive(Debug, thiserror::Error)]
pub enum CalicoError {
    /// Writing, the write timeout, or the peer going away.
    #[error(transparent)]
    Conn(#[from] ConnError),
    /// The client's byte stream is not valid.
    #[error("protocol error: {0}")]
    Stream(#[from] StreamError),
    /// The hello asked for something we do not serve (named in the text).
    #[error("refused: {0}")]
    Refused(String),
    /// A message the client may not send at this point.
    #[error("protocol error: unexpected {0} from a Calico client")]
    Unexpected(MessageKind),
    /// No hello, or no ACK, in time.
    #[error("handshake: no {0} in time")]
    Timeout(&'static str),
    /// No pong for the pong timeout.
    #[error("no pong in time")]
    PingTimeout,
    /// The client is further behind than the fall-behind limit lets it be.
    #[error("fell behind: {0}")]
    FellBehind(String),
    /// A message it needed could not be encoded (a bug, logged where it happened).
    #[error(transparent)]
    Unencodable(#[from] Unencodable),
    /// The server closed it (shutdown, rebalancing).
    #[error("closed by the server")]
    Closed,
}

/// Why a connection ended before its protocol was told.
#[derive(Debug, thiserror::Error)]
pub enum SniffError {
    /// The socket failed.
    #[error("i/o: {0}")]
    Io(#[source] std::io::Error),
    /// The peer closed before its first message.
    #[error("peer closed the connection before a hello")]
    Closed,
}

/// Reads the first bytes of a connection until they tell its protocol (within `deadline`).
/// Returns the protocol and the bytes read, which belong to its first message. Bytes that are
/// neither protocol's, or none before the deadline, are left to ours, which answers them as it
/// always has (a Goodbye saying what was wrong).
pub async fn sniff<S: AsyncRead + Unpin>(
    stream: &mut S,
    deadline: Instant,
) -> Result<(Protocol, BytesMut), SniffError> {
    let mut buf = BytesMut::with_capacity(1024);
    loop {
        match detect(&buf) {
            Ok(Some(p)) => return Ok((p, buf)),
            Ok(None) => {}
            Err(e) => {
                debug!(error = %e, "first bytes are not Calico's; left to our protocol");
                return Ok((Protocol::Ours, buf));
            }
        }
        match timeout_at(deadline, stream.read_buf(&mut buf)).await {
            Ok(Ok(0)) => return Err(SniffError::Closed),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(SniffError::Io(e)),
            Err(_) => return Ok((Protocol::Ours, buf)),
        }
    }
}

/// Serves one Calico-protocol connection until it ends; logs the outcome once. `prefix`: the
/// bytes [`sniff`] read.
pub async fn serve<S>(
    stream: S,
    accepted: Instant,
    ctx: Arc<Ctx>,
    close: oneshot::Receiver<Close>,
    info: &ConnInfo,
    prefix: BytesMut,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let m = ctx.cache.metrics.clone();
    match run(stream, accepted, ctx, close, info, prefix).await {
        Ok(()) | Err(CalicoError::Conn(ConnError::PeerClosed)) => {
            debug!("Calico connection closed")
        }
        Err(CalicoError::Closed) => debug!("Calico connection closed by the server"),
        Err(e) => {
            let reason = match &e {
                CalicoError::Conn(ConnError::WriteTimeout(_)) => Some(DropReason::write_timeout),
                CalicoError::Stream(_) | CalicoError::Unexpected(_) => {
                    Some(DropReason::protocol_error)
                }
                CalicoError::Refused(_) | CalicoError::Timeout(_) => Some(DropReason::handshake),
                CalicoError::PingTimeout => Some(DropReason::ping_timeout),
                CalicoError::FellBehind(_) => Some(DropReason::fell_behind),
                CalicoError::Unencodable(_) => Some(DropReason::encode_error),
                CalicoError::Conn(_) | CalicoError::Closed => None,
            };
            if let Some(r) = reason {
                m.dropped(r);
            }
            match reason {
                // The client was dropped while it was being served: it will reconnect and
                // take a whole snapshot, so say why, once, where an operator looks.
                Some(
                    r @ (DropReason::write_timeout
                    | DropReason::ping_timeout
                    | DropReason::fell_behind
                    | DropReason::encode_error),
                ) => {
                    warn!(reason = r.label(), error = %e, "Calico client dropped; it will reconnect and resync")
                }
                Some(DropReason::handshake) if matches!(e, CalicoError::Refused(_)) => {
                    warn!(error = %e, "Calico client refused; closing")
                }
                _ => info!(error = %e, "Calico connection ended"),
            }
        }
    }
}

/// The snappy stream's opening for every connection: the identifier and the preamble's chunks.
fn snappy_opening() -> Bytes {
    static OPENING: OnceLock<Bytes> = OnceLock::new();
    OPENING
        .get_or_init(|| {
            let mut out = STREAM_IDENTIFIER.to_vec();
            out.extend_from_slice(&snappy::encode_chunks(&Side::Server.preamble()));
            Bytes::from(out)
        })
        .clone()
}

/// A connection id for the hello: a random prefix per process and a counter, as Typha's.
fn conn_id() -> u64 {
    static PREFIX: OnceLock<u64> = OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let prefix = *PREFIX.get_or_init(|| u64::from(rand::random::<u32>()) << 32);
    prefix | (NEXT.fetch_add(1, Ordering::Relaxed) & 0xffff_ffff)
}

struct Reader<R> {
    r: R,
    dec: StreamDecoder,
    buf: BytesMut,
}

impl<R: AsyncRead + Unpin> Reader<R> {
    /// The next message, or `None` at the deadline.
    async fn next(&mut self, deadline: Instant) -> Result<Option<Message>, CalicoError> {
        loop {
            if let Some(m) = self.dec.decode(&mut self.buf)? {
                return Ok(Some(m));
            }
            match timeout_at(deadline, self.r.read_buf(&mut self.buf)).await {
                Ok(Ok(0)) => return Err(ConnError::PeerClosed.into()),
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return Err(ConnError::Io(e).into()),
                Err(_) => return Ok(None),
            }
        }
    }
}

/// The hello of a Calico client about to be refused (at the connection limit), to say who it
/// was: `None` if it does not arrive, whole and valid, before `deadline`. `prefix`: the bytes
/// [`sniff`] read.
pub async fn read_hello<S: AsyncRead + Unpin>(
    stream: &mut S,
    prefix: BytesMut,
    deadline: Instant,
) -> Option<ClientHello> {
    let mut rd = Reader {
        r: stream,
        dec: StreamDecoder::new(Limits::SERVER_INBOUND),
        buf: prefix,
    };
    match rd.next(deadline).await {
        Ok(Some(Message::ClientHello(h))) => Some(h),
        _ => None,
    }
}

/// What a hello asks for, if we serve it.
fn check_hello(h: &ClientHello) -> Result<(SyncerType, Carriage), CalicoError> {
    let Some(syncer) = SyncerType::from_hello(&h.syncer_type) else {
        return Err(CalicoError::Refused(format!(
            "syncer type {:?} is not served (felix, bgp, tunnel-ip-allocation, node-status)",
            h.syncer_type
        )));
    };
    if !h.supports_modern_policy_keys {
        return Err(CalicoError::Refused(
            "SupportsModernPolicyKeys is false (a client older than Calico 3.30; Typha 3.32 refuses it too)".into(),
        ));
    }
    let snappy = h.supports_decoder_restart
        && h.supported_compression_algorithms
            .iter()
            .any(|a| a == COMPRESSION_SNAPPY);
    let carriage = if snappy {
        Carriage::Snappy
    } else {
        Carriage::Plain
    };
    Ok((syncer, carriage))
}

async fn run<S>(
    stream: S,
    accepted: Instant,
    ctx: Arc<Ctx>,
    mut close: oneshot::Receiver<Close>,
    info: &ConnInfo,
    prefix: BytesMut,
) -> Result<(), CalicoError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (r, w) = tokio::io::split(stream);
    let mut out = Out::new(w, ctx.clone());
    let mut rd = Reader {
        r,
        dec: StreamDecoder::new(Limits::SERVER_INBOUND),
        buf: prefix,
    };

    // Hello, within the handshake deadline (counted from accept, so TLS shares it).
    let hello = match rd.next(accepted + ctx.cfg.handshake_timeout).await? {
        Some(Message::ClientHello(h)) => h,
        Some(other) => return Err(CalicoError::Unexpected(other.kind())),
        None => return Err(CalicoError::Timeout("MsgClientHello")),
    };
    let (syncer, carriage) = check_hello(&hello)?;
    info.calico_hello(
        &hello.hostname,
        &hello.info,
        format!("calico {}", hello.version),
        syncer,
    );
    // Every per-syncer metric of this connection counts under its syncer type, as Typha's.
    out.syncer = syncer;
    let by_type = ctx.cache.metrics.calico_connections(syncer).clone();
    by_type.inc();
    let _by_type = scopeguard(move || by_type.dec());
    debug!(version = %hello.version, ?carriage, client_conn_id = hello.client_conn_id, "Calico client hello");

    out.queue(Side::Server.preamble())?;
    let reply = Message::ServerHello(ServerHello {
        version: concat!("typha-server ", env!("CARGO_PKG_VERSION")).into(),
        syncer_type: syncer.as_str().into(),
        supports_node_resource_updates: true,
        server_conn_id: conn_id(),
    });
    out.queue(Carriage::Plain.encode(&reply)?)?;
    if carriage == Carriage::Snappy {
        let restart = Message::DecoderRestart(DecoderRestart {
            message: RESTART_ENABLE_SNAPPY.into(),
            compression_algorithm: COMPRESSION_SNAPPY.into(),
        });
        out.queue(Carriage::Plain.encode(&restart)?)?;
        out.flush().await?;
        // Nothing more may be written until the ACK: the client's old decoder could read
        // ahead and swallow it.
        match rd.next(Instant::now() + ctx.cfg.pong_timeout).await? {
            Some(Message::Ack) => {}
            Some(other) => return Err(CalicoError::Unexpected(other.kind())),
            None => return Err(CalicoError::Timeout("MsgACK")),
        }
        out.queue(snappy_opening())?;
    }

    // Initial syncs take turns with ours; the client is pinged while it waits.
    info.set_phase(Phase::Waiting);
    let _slot = match &ctx.sync_slots {
        None => None,
        Some(slots) => {
            let acquire = slots.clone().acquire_owned();
            tokio::pin!(acquire);
            loop {
                out.flush().await?;
                tokio::select! {
                    p = &mut acquire => break p.ok(),
                    _ = &mut close => return Err(CalicoError::Closed),
                    () = tokio::time::sleep(jitter(ctx.cfg.ping_interval)) => {
                        out.queue(ping(carriage)?)?;
                    }
                }
            }
        }
    };

    info.set_phase(Phase::Syncing);
    let sync_started = Instant::now();
    let m = &ctx.cache.metrics;
    // The snapshot and the breadcrumb it was asked for are held only while it is written:
    // kept for the connection's life, they would pin that snapshot's frames (and the
    // breadcrumb) after the cache has moved on, one set per moment clients joined.
    let (mut cursor, mut sent_status, pin) = {
        let latest = ctx.cache.latest();
        let build = {
            let (map, metrics) = (latest.map(), m.clone());
            let at = (latest.seq, latest.status);
            let driver = ctx.cache.calico_driver;
            move || {
                let kvs = map
                    .iter()
                    .flat_map(|m| m.iter())
                    .map(|(k, kv)| (k, &kv.value, kv.object_revision));
                build_snapshot((syncer, carriage, driver), at, kvs, &metrics)
            }
        };
        let snap = ctx
            .calico_snapshots
            .get(syncer, carriage, latest.seq, build, m)
            .await?;
        drop(latest);
        // Calico's protocol cannot resume: from here the history keeps what this connection
        // still needs, including what arrives while the snapshot is written to a slow reader.
        let pin = ctx.cache.pin(snap.seq);
        for f in &snap.frames {
            out.queue(f.clone())?;
        }
        if snap.status != SyncStatus::WaitForDatastore {
            out.queue(status_frame(carriage, snap.status)?)?;
        }
        let (seq, status, kvs) = (snap.seq, snap.status, snap.kvs);
        drop(snap);
        out.flush().await?;
        debug!(syncer = %syncer, kvs, seq = seq.0, "Calico snapshot sent");
        (seq, status, pin)
    };
    drop(_slot);
    info.synced(ResumeKind::snapshot, cursor);
    m.client_snapshot_send_secs
        .of(syncer)
        .observe(sync_started.elapsed().as_secs_f64());
    let _following = ctx.cache.follow(syncer);

    let mut crumbs = ctx.cache.subscribe();
    // Pings, liveness and the fall-behind limit, decided as for ours.
    let mut follow = Follow::new(Instant::now(), &ctx.cfg);
    follow.pause_for_writing(out.writing, Instant::now());
    let mut ping_sent: Option<(GoTime, Instant)> = None;
    loop {
        // Breadcrumbs published since the cursor, each as its shared MsgKVs.
        let latest = ctx.cache.latest();
        let catching_up = latest.seq.0.saturating_sub(cursor.0) > 1;
        while cursor < latest.seq {
            let next = Seq(cursor.0 + 1);
            let started = catching_up.then(Instant::now);
            let Some(crumb) = ctx.cache.get(next) else {
                return Err(CalicoError::FellBehind(format!(
                    "breadcrumb {} has left the history",
                    next.0
                )));
            };
            // Typha's fall-behind limit, with the grace after the snapshot.
            let waited = match follow.next_breadcrumb(Instant::now(), crumb.created) {
                Next::FellBehind(age) => {
                    return Err(CalicoError::FellBehind(format!(
                        "breadcrumb {} is {age:?} old",
                        next.0
                    )));
                }
                Next::Send { grace_used, waited } => {
                    if grace_used {
                        // Only the grace period kept this client connected.
                        m.connections_grace_used.of(syncer).inc();
                    }
                    waited
                }
            };
            let frame = crumb.calico_frame(syncer, carriage, ctx.cache.calico_driver, m)?;
            if let Some(t) = started {
                m.next_breadcrumb_latency_secs
                    .of(syncer)
                    .observe(t.elapsed().as_secs_f64());
            }
            if waited {
                m.breadcrumb_block.of(syncer).inc();
            } else {
                m.breadcrumb_non_block.of(syncer).inc();
            }
            m.client_latency_secs.of(syncer).observe(
                latest
                    .created
                    .saturating_duration_since(crumb.created)
                    .as_secs_f64(),
            );
            if let Some(frame) = frame {
                out.queue(frame)?;
            }
            if crumb.status != sent_status {
                out.queue(status_frame(carriage, crumb.status)?)?;
                sent_status = crumb.status;
            }
            cursor = next;
            pin.set(cursor);
            if out.pending_len >= ctx.cfg.max_write {
                out.flush().await?;
                info.sent(cursor);
            }
        }
        out.flush().await?;
        info.sent(cursor);
        drop(latest);
        follow.caught_up();
        tokio::select! {
            _ = &mut close => {
                out.close().await;
                return Err(CalicoError::Closed);
            }
            changed = crumbs.changed() => {
                if changed.is_err() {
                    out.close().await;
                    return Err(CalicoError::Closed);
                }
            }
            msg = rd.next(Instant::now() + Duration::from_secs(3600)) => {
                match msg? {
                    None => {}
                    Some(Message::Pong(p)) => {
                        follow.heard(Instant::now());
                        if let Some((_, at)) = ping_sent.take_if(|(ts, _)| *ts == p.ping_timestamp) {
                            m.ping_latency.of(syncer).observe(at.elapsed().as_secs_f64());
                        }
                    }
                    // As in Typha: anything but a pong ends the connection.
                    Some(other) => return Err(CalicoError::Unexpected(other.kind())),
                }
            }
            () = sleep_until(follow.next_ping()) => {
                // Time spent blocked writing to the client does not count against it.
                let now = Instant::now();
                follow.pause_for_writing(out.writing, now);
                if follow.silent_too_long(now) {
                    out.close().await;
                    return Err(CalicoError::PingTimeout);
                }
                let ts = GoTime::from_system_time(SystemTime::now());
                out.queue(carriage.encode(&Message::Ping(Ping { timestamp: ts }))?)?;
                if ping_sent.is_none() {
                    ping_sent = Some((ts, now));
                }
                follow.pinged(now);
            }
        }
    }
}

fn ping(carriage: Carriage) -> Result<Bytes, Unencodable> {
    let ts = GoTime::from_system_time(SystemTime::now());
    carriage.encode(&Message::Ping(Ping { timestamp: ts }))
}

fn status_frame(carriage: Carriage, s: SyncStatus) -> Result<Bytes, Unencodable> {
    carriage.encode(&Message::SyncStatus(s.into()))
}
