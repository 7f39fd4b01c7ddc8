//! A connection's life: handshake (hello within the deadline, counted from accept), initial
//! sync, then the stream loop: breadcrumbs as they come, pings, pongs and acks read, until
//! either side closes or a limit is hit. The outcome is logged once, at the task's boundary.

use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::sync::{oneshot, watch};
use tokio::time::{Instant, sleep_until, timeout_at};
use tracing::{debug, info, warn};
use typha_protocol::frame::{FrameDecoder, Limits};
use typha_protocol::handshake::{ServerHandshake, Session};
use typha_protocol::message::{Features, GoodbyeReason, Message, MessageType, Ping};

use super::info::{ConnInfo, Phase};
use super::out::Out;
use super::session::Follow;
use super::sync::{
    FloorWait, catch_up, initial_sync, wait_for_first_sync, wait_for_revision, wait_for_sync_slot,
};
use super::{Close, ConnError, Ctx};
use crate::cache::breadcrumb::Breadcrumb;
use crate::calico::libcalico::SyncerType;
use crate::fanout::{Variant, encode};
use crate::metrics::DropReason;
use crate::syncer::freshness::Published;

/// Logs how a connection served by [`run`] ended, once, and counts a drop by its reason.
pub fn ended(ctx: &Ctx, result: Result<(), ConnError>) {
    match result {
        Ok(()) | Err(ConnError::PeerClosed) => debug!("connection closed"),
        // Sent away on purpose (a drain, a balancing move): expected, counted, not logged.
        Err(e @ ConnError::Closed(GoodbyeReason::Shutdown | GoodbyeReason::Rebalance)) => {
            debug!("{e}")
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
                ctx.cache.metrics.dropped(r);
            }
            info!(error = %e, "connection ended");
        }
    }
}

/// Serves one connection of our protocol until it ends (then [`ended`] tells how).
/// `prefix`: bytes already read from the stream (to tell its protocol). Its future is the
/// stream loop's state, kept for the connection's life: the connection's task holds it
/// inline, and what only the start needs is boxed.
pub fn run<'a, S>(
    stream: S,
    ctx: &'a Arc<Ctx>,
    close: oneshot::Receiver<Close>,
    info: &'a ConnInfo,
    prefix: BytesMut,
) -> impl Future<Output = Result<(), ConnError>> + Send + 'a
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    // One stream, read and written in turn (never at once): no split halves. The handshake
    // and the initial sync in an allocation of their own, freed before the stream loop: their
    // futures, and what they hold (the hello; a resuming client's 8 KiB digest), are not kept
    // for the life of the connection. Made here, so the stream loop's future captures only
    // it, not the stream and the bytes it takes (an async block keeps room for what it
    // captures even once moved out).
    let start = Box::pin(start_owned(
        Out::new(stream, ctx.clone()),
        close,
        ctx,
        info,
        prefix,
    ));
    async move {
        let Started {
            mut out,
            mut close,
            mut dec,
            mut rbuf,
            may_receive,
            variant,
            mut cursor,
            mut staleness,
            tells_staleness,
        } = start.await?;
        let mut follow = Follow::new(Instant::now(), &ctx.cfg);
        let _following = ctx.cache.follow(SyncerType::Felix);

        let mut crumbs: watch::Receiver<Arc<Breadcrumb>> = ctx.cache.subscribe();
        let mut sent_status = cursor.status;
        // One timer for the whole stream, moved after each ping: a fresh one per turn of the
        // loop (per breadcrumb) would be registered and cancelled thousands of times a second
        // across the connections.
        let ping_timer = sleep_until(follow.next_ping());
        tokio::pin!(ping_timer);
        // The timestamp of the first ping not answered yet (when it was sent: from the
        // timestamp).
        let mut ping_sent: Option<u64> = None;
        // The client is alive if it answers pings or acknowledges what it applied (acks come while
        // it works through a long catch-up, when our pings wait behind the data). The clock stops
        // while we are writing to it (`Follow::pause_for_writing`): a client that reads slowly
        // but steadily is the write timeout's business, not the pong timeout's.
        follow.pause_for_writing(out.writing, Instant::now());

        loop {
            // First time round this also sends breadcrumbs published while the initial sync was
            // being written (they came before the subscription and would not wake us).
            catch_up(
                ctx,
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
                n = read_some(out.io(), &mut rbuf) => {
                    match n {
                        Ok(0) => return Err(ConnError::PeerClosed),
                        Ok(_) => {}
                        Err(e) => return Err(e.into()),
                    }
                    if let Err(e) = inbound(ctx, may_receive, &mut dec, &mut rbuf, &mut follow, &mut ping_sent, info) {
                        return Err(Box::pin(refuse(&mut out, e)).await);
                    }
                }
                () = &mut ping_timer => {
                    follow.pause_for_writing(out.writing, Instant::now());
                    if follow.silent_too_long(Instant::now()) {
                        // While a long write to this client was in progress nothing was read: its
                        // pongs may be waiting in the socket. Judge only after reading them.
                        // (Bounded: a client that keeps sending cannot keep us here. Boxed: rare, and
                        // not worth room in the connection's future for its life.)
                        Box::pin(async {
                            for _ in 0..64 {
                                let Ok(n) = tokio::time::timeout(Duration::ZERO, read_some(out.io(), &mut rbuf)).await else {
                                    break;
                                };
                                match n {
                                    Ok(0) => return Err(ConnError::PeerClosed),
                                    Ok(_) => {}
                                    Err(e) => return Err(e.into()),
                                }
                                if let Err(e) = inbound(ctx, may_receive, &mut dec, &mut rbuf, &mut follow, &mut ping_sent, info) {
                                    return Err(Box::pin(refuse(&mut out, e)).await);
                                }
                            }
                            Ok(())
                        })
                        .await?;
                    }
                    let now = Instant::now();
                    if follow.silent_too_long(now) {
                        out.goodbye(GoodbyeReason::PingTimeout, "no pong in time").await;
                        return Err(ConnError::Closed(GoodbyeReason::PingTimeout));
                    }
                    let ts = u64::try_from(now.duration_since(ctx.started).as_micros()).unwrap_or(u64::MAX);
                    out.queue(encode(&Message::Ping(Ping { timestamp_micros: ts }), false))?;
                    if ping_sent.is_none() {
                        ping_sent = Some(ts);
                    }
                    follow.pinged(now);
                    ping_timer.as_mut().reset(follow.next_ping());
                }
            }
        }
    }
}

/// What the handshake and the initial sync leave to the stream loop.
struct Started<S> {
    out: Out<S>,
    close: oneshot::Receiver<Close>,
    dec: FrameDecoder,
    rbuf: BytesMut,
    /// What the client may send: a [`bit`] per message type (the session's 48 bytes would be
    /// kept for this alone).
    may_receive: u32,
    variant: Variant,
    cursor: Arc<Breadcrumb>,
    staleness: watch::Receiver<Published>,
    tells_staleness: bool,
}

/// [`start`], owning what the stream loop takes over.
async fn start_owned<S>(
    mut out: Out<S>,
    mut close: oneshot::Receiver<Close>,
    ctx: &Arc<Ctx>,
    info: &ConnInfo,
    prefix: BytesMut,
) -> Result<Started<S>, ConnError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let s = start(ctx, &mut close, info, prefix, &mut out).await?;
    Ok(Started {
        out,
        close,
        dec: s.dec,
        rbuf: s.rbuf,
        may_receive: MessageType::ALL
            .iter()
            .filter(|t| s.session.may_receive(**t))
            .fold(0, |mask, t| mask | bit(*t)),
        variant: Variant::of(&s.session),
        cursor: s.cursor,
        staleness: s.staleness,
        tells_staleness: s.tells_staleness,
    })
}

/// A message type's bit in [`Started::may_receive`] (the types are numbered 1 to 12).
fn bit(t: MessageType) -> u32 {
    1 << (t as u32)
}

/// What [`start`] leaves.
struct Begun {
    dec: FrameDecoder,
    rbuf: BytesMut,
    session: Session,
    cursor: Arc<Breadcrumb>,
    staleness: watch::Receiver<Published>,
    tells_staleness: bool,
}

/// The hello (within the deadline, counted from accept, so TLS and hello share it), then the
/// initial sync, written and flushed.
async fn start<S>(
    ctx: &Arc<Ctx>,
    close: &mut oneshot::Receiver<Close>,
    info: &ConnInfo,
    prefix: BytesMut,
    out: &mut Out<S>,
) -> Result<Begun, ConnError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let accepted = info.accepted();
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
        match timeout_at(deadline, out.io().read_buf(&mut rbuf)).await {
            Ok(Ok(0)) => return Err(ConnError::PeerClosed),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(e.into()),
            Err(_) => {
                let rej = hs.handle_timeout(Instant::now().into_std());
                let msg = rej
                    .as_ref()
                    .map_or_else(|| "handshake timed out".into(), |r| r.to_string());
                out.goodbye(GoodbyeReason::HandshakeTimeout, &msg).await;
                return Err(rej.map_or(ConnError::HandshakeTimeout, |r| {
                    ConnError::Handshake(Box::new(r))
                }));
            }
        }
    };
    let accepted_hello = match hs.handle_message(first, Instant::now().into_std()) {
        Ok(a) => a,
        Err(rej) => {
            if let Some(g) = &rej.goodbye {
                out.goodbye(g.reason, &g.message).await;
            }
            return Err(ConnError::Handshake(Box::new(rej)));
        }
    };
    let session = accepted_hello.session;
    info.hello(
        &accepted_hello.hostname,
        &accepted_hello.client_info,
        session.version,
    );
    debug!(client = %accepted_hello.client_info, version = %session.version, "client hello");
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
    // The client's revision floor, where revisions are shared by the replicas.
    let floor = accepted_hello
        .revision_floor
        .filter(|_| !ctx.cfg.resume_floor_wait.is_zero())
        .unwrap_or_default();
    if ctx.cache.latest().revision < floor {
        out.flush().await?;
        let ended = wait_for_revision(ctx, out, close, floor).await?;
        let [yes, no, away] = &ctx.cache.metrics.resume_floor_waits;
        if ended == FloorWait::Reached {
            yes.inc();
        } else if ended == FloorWait::Stale {
            // Cut off from the datastore: this cache is behind because it cannot hear, not
            // because the datastore went back. Another replica can serve the client what it
            // has; this one would send it back in time.
            away.inc();
            info!(
                floor = floor.0,
                cache = ctx.cache.latest().revision.0,
                "a resuming client has seen newer datastore revisions than this cache, which is stale (cut off from the datastore): sent to another replica"
            );
            out.goodbye(
                GoodbyeReason::Rebalance,
                "this server's view of the datastore is stale and older than yours; try another",
            )
            .await;
            return Err(ConnError::Closed(GoodbyeReason::Rebalance));
        } else {
            no.inc();
            warn!(
                floor = floor.0,
                cache = ctx.cache.latest().revision.0,
                "a resuming client has seen newer datastore revisions than this cache reached within TYPHA_RESUMEREVISIONWAITSECS; serving what it has"
            );
        }
    }
    let slot = wait_for_sync_slot(ctx, out, close).await?;
    let sync_started = Instant::now();
    info.set_phase(Phase::Syncing);
    let queued_before = out.queued;
    let (cursor, resumed) =
        initial_sync(ctx, &session, (accepted_hello.resume.as_ref(), floor), out).await?;
    out.flush().await?;
    drop(slot);
    let m = &ctx.cache.metrics;
    m.resume_bytes(resumed).inc_by(out.queued - queued_before);
    info.synced(resumed, cursor.seq);
    m.client_snapshot_send_secs
        .felix()
        .observe(sync_started.elapsed().as_secs_f64());
    Ok(Begun {
        dec,
        rbuf,
        session,
        cursor,
        staleness,
        tells_staleness,
    })
}

/// Handles every complete message in `rbuf`: pongs and acks; a goodbye or anything a client
/// may not send ends the connection ([`refuse`] says why to the client). Not async: the
/// stream loop's state keeps no room for it.
fn inbound(
    ctx: &Ctx,
    may_receive: u32,
    dec: &mut FrameDecoder,
    rbuf: &mut BytesMut,
    follow: &mut Follow,
    ping_sent: &mut Option<u64>,
    info: &ConnInfo,
) -> Result<(), ConnError> {
    loop {
        let msg = match dec.decode(rbuf) {
            Ok(Some(msg)) => msg,
            Ok(None) => {
                // Nothing left over (the usual case, between pongs): an idle connection keeps
                // no read buffer.
                if rbuf.is_empty() {
                    *rbuf = BytesMut::new();
                }
                return Ok(());
            }
            Err(e) => return Err(ConnError::Frame(e)),
        };
        if may_receive & bit(msg.message_type()) == 0 {
            return Err(ConnError::Unexpected(msg.message_type()));
        }
        match msg {
            Message::Pong(p) => {
                follow.heard(Instant::now());
                if let Some(ts) = ping_sent.take_if(|ts| *ts == p.ping_timestamp_micros) {
                    let at = ctx.started + Duration::from_micros(ts);
                    ctx.cache
                        .metrics
                        .ping_latency
                        .felix()
                        .observe(at.elapsed().as_secs_f64());
                }
            }
            Message::Ack(a) => {
                // A client acknowledging what it applied is alive and reading.
                follow.heard(Instant::now());
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
            other => return Err(ConnError::Unexpected(other.message_type())),
        }
    }
}

/// Ends a connection for what [`inbound`] found: a frame that does not decode or a message a
/// client may not send gets a Goodbye saying so; returns the error. (Boxed where it is called:
/// once per connection at most.)
async fn refuse<W: AsyncWrite + Unpin>(out: &mut Out<W>, e: ConnError) -> ConnError {
    let message = match &e {
        ConnError::Frame(f) => Some(f.to_string()),
        ConnError::Unexpected(ty) => Some(format!("unexpected {ty} from a client")),
        _ => None,
    };
    if let Some(message) = message {
        out.goodbye(GoodbyeReason::ProtocolError, &message).await;
    }
    e
}

/// Reads what the client sent, appending it to `rbuf`; 0: the client closed the connection.
/// Through a buffer on the stack, there only while polled: a connection waiting for its
/// client keeps no read buffer (the stream loop's `rbuf` holds only a partial frame).
fn read_some<'a, S: AsyncRead + Unpin>(
    s: &'a mut S,
    rbuf: &'a mut BytesMut,
) -> impl Future<Output = std::io::Result<usize>> + 'a {
    std::future::poll_fn(move |cx| {
        let mut tmp = [0u8; 1024];
        let mut b = ReadBuf::new(&mut tmp);
        std::task::ready!(Pin::new(&mut *s).poll_read(cx, &mut b))?;
        rbuf.extend_from_slice(b.filled());
        Poll::Ready(Ok(b.filled().len()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_type_has_a_bit_of_its_own() {
        let mut seen = 0u32;
        for t in MessageType::ALL {
            assert!((t as u8) < 32, "{t} does not fit the mask");
            assert_eq!(seen & bit(t), 0, "{t} shares a bit");
            seen |= bit(t);
        }
    }
}
