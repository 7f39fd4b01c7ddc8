//! A connection's life: handshake (hello within the deadline, counted from accept), initial
//! sync, then the stream loop: breadcrumbs as they come, pings, pongs and acks read, until
//! either side closes or a limit is hit. The outcome is logged once, at the task's boundary.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::sync::{oneshot, watch};
use tokio::time::{Instant, sleep_until, timeout_at};
use tracing::{debug, info};
use typha_protocol::frame::{FrameDecoder, Limits};
use typha_protocol::handshake::{ServerHandshake, Session};
use typha_protocol::message::{Features, GoodbyeReason, Message, MessageType, Ping};

use super::info::{ConnInfo, Phase};
use super::out::{Out, jitter, scopeguard};
use super::sync::{Following, catch_up, initial_sync, wait_for_first_sync, wait_for_sync_slot};
use super::{Close, ConnError, Ctx};
use crate::cache::breadcrumb::Breadcrumb;
use crate::fanout::{Variant, encode};
use crate::metrics::DropReason;
use crate::syncer::freshness::Published;

/// Serves one connection until it ends, reporting what it does in `info`; logs the outcome
/// once. `prefix`: bytes already read from the stream (to tell its protocol).
pub async fn serve<S>(
    stream: S,
    peer: SocketAddr,
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
        Ok(()) | Err(ConnError::PeerClosed) => debug!(%peer, "connection closed"),
        // Sent away on purpose (a drain, a balancing move): expected, counted, not logged.
        Err(e @ ConnError::Closed(GoodbyeReason::Shutdown | GoodbyeReason::Rebalance)) => {
            debug!(%peer, "{e}")
        }
        Err(e) => {
            let reason = match &e {
                ConnError::WriteTimeout(_) => Some(DropReason::write_timeout),
                ConnError::Frame(_) | ConnError::Unexpected(_) | ConnError::Unencodable => {
                    Some(DropReason::protocol_error)
                }
                ConnError::HandshakeFrame(_)
                | ConnError::Handshake(_)
                | ConnError::HandshakeTimeout => Some(DropReason::handshake),
                ConnError::Closed(GoodbyeReason::PingTimeout) => Some(DropReason::ping_timeout),
                ConnError::Closed(GoodbyeReason::FellBehind) => Some(DropReason::fell_behind),
                _ => None,
            };
            if let Some(r) = reason {
                m.dropped(r);
            }
            info!(%peer, error = %e, "connection ended");
        }
    }
}

async fn run<S>(
    stream: S,
    accepted: Instant,
    ctx: Arc<Ctx>,
    mut close: oneshot::Receiver<Close>,
    info: &ConnInfo,
    prefix: BytesMut,
) -> Result<(), ConnError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (r, w) = tokio::io::split(stream);
    let mut out = Out::new(w, ctx.clone());
    // The handshake and the initial sync in an allocation of their own, freed before the
    // stream loop: their futures, and what they hold (the hello; a resuming client's 8 KiB
    // digest), are not kept for the life of the connection.
    let Started {
        mut r,
        mut dec,
        mut rbuf,
        session,
        mut cursor,
        mut staleness,
        tells_staleness,
    } = Box::pin(start(r, accepted, &ctx, &mut close, info, prefix, &mut out)).await?;
    let variant = Variant::of(&session);
    let m = &ctx.cache.metrics;
    let mut follow = Following::new(Instant::now() + ctx.cfg.new_client_grace);
    m.connections_streaming.inc();
    let _streaming = scopeguard(|| {
        ctx.cache.metrics.connections_streaming.dec();
    });

    let mut crumbs: watch::Receiver<Arc<Breadcrumb>> = ctx.cache.subscribe();
    let mut sent_status = cursor.status;
    // One timer for the whole stream, moved after each ping: a fresh one per turn of the
    // loop (per breadcrumb) would be registered and cancelled thousands of times a second
    // across the connections.
    let ping_timer = sleep_until(Instant::now() + jitter(ctx.cfg.ping_interval));
    tokio::pin!(ping_timer);
    let mut last_heard = Instant::now();
    let mut ping_sent: Option<(u64, Instant)> = None;
    // The client is alive if it answers pings or acknowledges what it applied (acks come while
    // it works through a long catch-up, when our pings wait behind the data). The clock stops
    // while we are writing to it: a client that reads slowly but steadily is the write
    // timeout's business, not the pong timeout's.
    let mut writing_seen = out.writing;

    loop {
        // First time round this also sends breadcrumbs published while the initial sync was
        // being written (they came before the subscription and would not wake us).
        catch_up(
            &ctx,
            &mut cursor,
            &mut sent_status,
            variant,
            &mut follow,
            &mut out,
        )
        .await?;
        out.flush().await?;
        info.sent(cursor.seq);
        tokio::select! {
            close = &mut close => {
                let close = close.unwrap_or(Close::because(GoodbyeReason::Shutdown));
                out.goodbye_to(close.reason, "server closing this connection", close.redirect).await;
                return Err(ConnError::Closed(close.reason));
            }
            Ok(()) = staleness.changed(), if tells_staleness => {
                let frame = staleness.borrow_and_update().frame.clone();
                out.queue(frame)?;
            }
            changed = crumbs.changed() => {
                if changed.is_err() {
                    out.goodbye(GoodbyeReason::Shutdown, "cache closed").await;
                    return Err(ConnError::Closed(GoodbyeReason::Shutdown));
                }
            }
            n = r.read_buf(&mut rbuf) => {
                match n {
                    Ok(0) => return Err(ConnError::PeerClosed),
                    Ok(_) => {}
                    Err(e) => return Err(e.into()),
                }
                inbound(&ctx, &session, &mut dec, &mut rbuf, &mut out, &mut last_heard, &mut ping_sent, info).await?;
            }
            () = &mut ping_timer => {
                let paused = out.writing.saturating_sub(writing_seen);
                writing_seen = out.writing;
                last_heard = (last_heard + paused).min(Instant::now());
                if last_heard.elapsed() > ctx.cfg.pong_timeout {
                    // While a long write to this client was in progress nothing was read: its
                    // pongs may be waiting in the socket. Judge only after reading them.
                    // (Bounded: a client that keeps sending cannot keep us here. Boxed: rare, and
                    // not worth room in the connection's future for its life.)
                    Box::pin(async {
                        for _ in 0..64 {
                            let Ok(n) = tokio::time::timeout(Duration::ZERO, r.read_buf(&mut rbuf)).await else {
                                break;
                            };
                            match n {
                                Ok(0) => return Err(ConnError::PeerClosed),
                                Ok(_) => {}
                                Err(e) => return Err(e.into()),
                            }
                            inbound(&ctx, &session, &mut dec, &mut rbuf, &mut out, &mut last_heard, &mut ping_sent, info).await?;
                        }
                        Ok(())
                    })
                    .await?;
                }
                let now = Instant::now();
                if now.duration_since(last_heard) > ctx.cfg.pong_timeout {
                    out.goodbye(GoodbyeReason::PingTimeout, "no pong in time").await;
                    return Err(ConnError::Closed(GoodbyeReason::PingTimeout));
                }
                let ts = u64::try_from(now.duration_since(ctx.started).as_micros()).unwrap_or(u64::MAX);
                out.queue(encode(&Message::Ping(Ping { timestamp_micros: ts }), false))?;
                if ping_sent.is_none() {
                    ping_sent = Some((ts, now));
                }
                ping_timer.as_mut().reset(now + jitter(ctx.cfg.ping_interval));
            }
        }
    }
}

/// What the handshake and the initial sync leave to the stream loop.
struct Started<R> {
    r: R,
    dec: FrameDecoder,
    rbuf: BytesMut,
    session: Session,
    cursor: Arc<Breadcrumb>,
    staleness: watch::Receiver<Published>,
    tells_staleness: bool,
}

/// The hello (within the deadline, counted from accept, so TLS and hello share it), then the
/// initial sync, written and flushed.
async fn start<R, W>(
    mut r: R,
    accepted: Instant,
    ctx: &Arc<Ctx>,
    close: &mut oneshot::Receiver<Close>,
    info: &ConnInfo,
    prefix: BytesMut,
    out: &mut Out<W>,
) -> Result<Started<R>, ConnError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut dec = FrameDecoder::new(Limits::SERVER_INBOUND);
    // The bytes read to tell the protocol are the start of the hello.
    let mut rbuf = prefix;
    rbuf.reserve(1024);

    let deadline = accepted + ctx.cfg.handshake_timeout;
    let mut hs = ServerHandshake::new(ctx.offer.clone(), accepted.into_std());
    let first = loop {
        match dec.decode(&mut rbuf) {
            Ok(Some(m)) => break m,
            Ok(None) => {}
            Err(e) => {
                out.goodbye(GoodbyeReason::ProtocolError, &e.to_string())
                    .await;
                return Err(ConnError::HandshakeFrame(e));
            }
        }
        match timeout_at(deadline, r.read_buf(&mut rbuf)).await {
            Ok(Ok(0)) => return Err(ConnError::PeerClosed),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(e.into()),
            Err(_) => {
                let rej = hs.handle_timeout(Instant::now().into_std());
                let msg = rej
                    .as_ref()
                    .map_or_else(|| "handshake timed out".into(), |r| r.to_string());
                out.goodbye(GoodbyeReason::HandshakeTimeout, &msg).await;
                return Err(rej.map_or(ConnError::HandshakeTimeout, ConnError::Handshake));
            }
        }
    };
    let accepted_hello = match hs.handle_message(first, Instant::now().into_std()) {
        Ok(a) => a,
        Err(rej) => {
            if let Some(g) = &rej.goodbye {
                out.goodbye(g.reason, &g.message).await;
            }
            return Err(ConnError::Handshake(rej));
        }
    };
    let session = accepted_hello.session;
    info.hello(
        &accepted_hello.hostname,
        &accepted_hello.client_info,
        session.version,
    );
    debug!(host = %accepted_hello.hostname, client = %accepted_hello.client_info, version = %session.version, "client hello");
    out.queue(encode(&Message::ServerHello(accepted_hello.reply), false))?;
    // How current the view is, before any data (so a consumer knows what it is about to get),
    // with its age now: a tiny per-client encode, like the hello. Later changes go out as the
    // frame encoded once for everyone; subscribed first, so none is missed.
    let tells_staleness = session.features.contains(Features::STALENESS);
    let mut staleness = ctx.freshness.subscribe();
    if tells_staleness {
        staleness.borrow_and_update();
        let now = Message::Staleness(ctx.freshness.view().to_message());
        out.queue(encode(&now, false))?;
    }
    // The hello's digest was the big part of the read buffer; do not keep its capacity.
    rbuf = BytesMut::from(&rbuf[..]);

    if accepted_hello.resume.is_some() && !ctx.cache.ever_in_sync() {
        // A resuming client has state: comparing it with a partial cache would tell it to
        // delete what this server has not loaded yet. Hold it (answering pings) until the
        // cache is complete; a new client has nothing to lose and gets the partial state.
        out.flush().await?;
        wait_for_first_sync(ctx, out, close).await?;
    }
    let slot = wait_for_sync_slot(ctx, out, close).await?;
    let sync_started = Instant::now();
    info.set_phase(Phase::Syncing);
    let queued_before = out.queued;
    let (cursor, resumed) =
        initial_sync(ctx, &session, accepted_hello.resume.as_ref(), out).await?;
    out.flush().await?;
    drop(slot);
    let m = &ctx.cache.metrics;
    m.resume_bytes(resumed).inc_by(out.queued - queued_before);
    info.synced(resumed, cursor.seq);
    m.client_snapshot_send_secs
        .observe(sync_started.elapsed().as_secs_f64());
    Ok(Started {
        r,
        dec,
        rbuf,
        session,
        cursor,
        staleness,
        tells_staleness,
    })
}

/// Handles every complete message in `rbuf`: pongs and acks; a goodbye or anything a client
/// may not send ends the connection.
#[allow(clippy::too_many_arguments)]
async fn inbound<W: AsyncWrite + Unpin>(
    ctx: &Arc<Ctx>,
    session: &Session,
    dec: &mut FrameDecoder,
    rbuf: &mut BytesMut,
    out: &mut Out<W>,
    last_heard: &mut Instant,
    ping_sent: &mut Option<(u64, Instant)>,
    info: &ConnInfo,
) -> Result<(), ConnError> {
    loop {
        let msg = match dec.decode(rbuf) {
            Ok(Some(msg)) => msg,
            Ok(None) => return Ok(()),
            Err(e) => {
                out.goodbye(GoodbyeReason::ProtocolError, &e.to_string())
                    .await;
                return Err(ConnError::Frame(e));
            }
        };
        if !session.may_receive(msg.message_type()) {
            return Err(unexpected(out, msg.message_type()).await);
        }
        match msg {
            Message::Pong(p) => {
                *last_heard = Instant::now();
                if let Some((_, at)) = ping_sent.take_if(|(ts, _)| *ts == p.ping_timestamp_micros) {
                    ctx.cache
                        .metrics
                        .ping_latency
                        .observe(at.elapsed().as_secs_f64());
                }
            }
            Message::Ack(a) => {
                // A client acknowledging what it applied is alive and reading.
                *last_heard = Instant::now();
                info.acked(a.seq);
                if let Some(c) = ctx.cache.get(a.seq) {
                    ctx.cache
                        .metrics
                        .client_ack_lag_secs
                        .observe(c.created.elapsed().as_secs_f64());
                }
            }
            Message::Goodbye(g) => {
                debug!(reason = %g.reason, message = %g.message, "client said goodbye");
                return Err(ConnError::PeerClosed);
            }
            other => return Err(unexpected(out, other.message_type()).await),
        }
    }
}

/// A message a client may not send: a Goodbye saying so, and the error.
async fn unexpected<W: AsyncWrite + Unpin>(out: &mut Out<W>, ty: MessageType) -> ConnError {
    let e = ConnError::Unexpected(ty);
    out.goodbye(
        GoodbyeReason::ProtocolError,
        &format!("unexpected {ty} from a client"),
    )
    .await;
    e
}
