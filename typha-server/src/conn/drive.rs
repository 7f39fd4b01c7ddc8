//! The one driver of a connection, for both protocols, from its hello to its end. What is
//! decided by the clock (deadlines, when to ping, whether the client is silent too long or
//! has fallen behind) is the [`Session`]'s, with no I/O; what differs by protocol is its
//! [`Start`] (the handshake, what its client may have to wait for, the initial sync: ours in
//! `task.rs`, Calico's in `calico.rs`) and its [`Feed`] (what it is sent once in sync and
//! what it may say); how a ping and the end are written is [`Out`]'s dialect. This file only
//! reads, writes, and waits for whichever comes first:
//!
//! ```text
//!  Start::handshake (read_message by the session's deadline) ─▶ Start::before_sync (held)
//!   ─▶ a sync slot (held) ─▶ Start::initial_sync ─▶ the stream loop:
//!   ┌─▶ feed.catch_up (one bounded round) ─▶ flush ─▶ wait for the first of:
//!   │     close request ─▶ out.end ─▶ done        staleness change ─▶ queue (ours)
//!   │     new breadcrumb (Calico's: of its type)  more to send from the last round
//!   │     bytes ─▶ feed.inbound (pongs, acks)     the session's timer ─▶ ping (or end:
//!   │                                             silent too long)
//!   └────────────────────────────────────────────────────────────────────────────┘
//! ```
//!
//! While a client is held (for a sync slot; for ours also a complete cache or its revision
//! floor) it is pinged ([`hold`]). The stream is read and written in turn, never at once:
//! while a write to a slow client is blocked nothing is read, so that time does not count
//! as the client's silence, and a client found silent has the bytes already in its socket
//! read before it is judged. A connection the start ends is told why where its protocol can
//! ([`ConnError::goodbye`]), as one the loop ends.

use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, oneshot, watch};
use tokio::time::{Instant, sleep_until, timeout_at};
use typha_protocol::message::{GoodbyeReason, Seq};

use super::info::{ConnInfo, Phase};
use super::out::{Dialect, Out, scopeguard};
use super::session::{Due, Session};
use super::{Close, ConnError, Ctx};
use crate::calico::libcalico::SyncerType;
use crate::metrics::ResumeKind;
use crate::syncer::freshness::Published;

/// How a protocol starts a connection: its handshake, what its client may have to wait for,
/// and its initial sync. The driver ([`run`]) does the rest, the same for both.
pub(super) trait Start: 'static {
    /// What the handshake learnt, for the rest of the start.
    type Hello: 'static;
    /// What the client is sent once in sync, and what it may say.
    type Feed: Feed + 'static;
    /// How pings and the end are written from the first byte.
    const DIALECT: Dialect;

    /// Reads the client's hello from `rbuf` and the stream ([`read_message`], by the
    /// session's deadline), and queues the reply.
    async fn handshake<S: AsyncRead + AsyncWrite + Unpin>(
        ctx: &Arc<Ctx>,
        session: &mut Session<'_>,
        out: &mut Out<S>,
        rbuf: &mut BytesMut,
        info: &ConnInfo,
    ) -> Result<Self::Hello, ConnError>;

    /// What the client must wait for before it takes a turn to sync ([`hold`]); nothing by
    /// default.
    async fn before_sync<S: AsyncRead + AsyncWrite + Unpin>(
        _ctx: &Arc<Ctx>,
        _hello: &Self::Hello,
        _session: &mut Session<'_>,
        _out: &mut Out<S>,
        _close: &mut oneshot::Receiver<Close>,
    ) -> Result<(), ConnError> {
        Ok(())
    }

    /// Queues (and writes, as it grows) the initial sync.
    async fn initial_sync<S: AsyncRead + AsyncWrite + Unpin>(
        ctx: &Arc<Ctx>,
        hello: Self::Hello,
        out: &mut Out<S>,
    ) -> Result<Synced<Self::Feed>, ConnError>;
}

/// What an initial sync leaves.
pub(super) struct Synced<F> {
    pub(super) feed: F,
    /// How the client was brought in sync.
    pub(super) resumed: ResumeKind,
    /// For a client told how current the view is (ours, when it asked), the changes to tell
    /// it, subscribed before its initial sync so none is missed.
    pub(super) staleness: Option<watch::Receiver<Published>>,
}

/// What a protocol sends and reads once its client is in sync.
pub(super) trait Feed {
    /// The last breadcrumb the client was sent.
    fn position(&self) -> Seq;

    /// Which breadcrumbs wake the connection ([`Cache::wake_on`]): every one for ours; for
    /// a Calico client, those with something for its syncer type.
    ///
    /// [`Cache::wake_on`]: crate::cache::Cache::wake_on
    fn wakes_on(&self) -> Option<SyncerType>;

    /// Queues one bounded round of what the client has not been sent (asking the session
    /// whether it may still be sent: [`ConnError::FellBehind`] if not); `Ok(true)`: more is
    /// waiting after this round. Bounded so reads and pings are served between rounds.
    fn catch_up<S: AsyncRead + AsyncWrite + Unpin>(
        &mut self,
        ctx: &Arc<Ctx>,
        session: &mut Session<'_>,
        out: &mut Out<S>,
    ) -> impl Future<Output = Result<bool, ConnError>>;

    /// Handles every complete message in `rbuf` (pongs, for ours also acks and a goodbye,
    /// telling the session the client was heard), leaving a partial one; anything a client
    /// may not send is an error. Not async: the loop's state keeps no room for it.
    fn inbound(
        &mut self,
        ctx: &Ctx,
        rbuf: &mut BytesMut,
        session: &mut Session<'_>,
        info: &ConnInfo,
    ) -> Result<(), ConnError>;
}

/// What a connection streams with, once its client is in sync.
struct Streaming<'a, S, F> {
    session: Session<'a>,
    out: Out<S>,
    close: oneshot::Receiver<Close>,
    feed: F,
    /// Bytes read and not yet handled.
    rbuf: BytesMut,
    staleness: Option<watch::Receiver<Published>>,
}

/// Serves one connection of protocol `P` until it ends; returns why (logged by the caller,
/// once). `prefix`: bytes already read from the stream (to tell its protocol). Its future is
/// the stream loop's state, kept for the connection's life; the start is boxed, so what
/// only it needs is freed when it is done.
pub(super) fn run<'a, P, S>(
    stream: S,
    ctx: &'a Arc<Ctx>,
    close: oneshot::Receiver<Close>,
    info: &'a ConnInfo,
    prefix: BytesMut,
) -> impl Future<Output = Result<(), ConnError>> + 'a
where
    P: Start,
    S: AsyncRead + AsyncWrite + Unpin + 'a,
{
    // One stream, read and written in turn (never at once): no split halves.
    let start = Box::pin(start::<P, S>(
        Out::new(stream, ctx.clone()),
        close,
        ctx,
        info,
        prefix,
    ));
    stream_loop(ctx, info, start)
}

/// The start of a connection, to the end of its initial sync. A connection it ends is told
/// why where its protocol can.
async fn start<'a, P: Start, S: AsyncRead + AsyncWrite + Unpin>(
    mut out: Out<S>,
    mut close: oneshot::Receiver<Close>,
    ctx: &'a Arc<Ctx>,
    info: &ConnInfo,
    prefix: BytesMut,
) -> Result<Streaming<'a, S, P::Feed>, ConnError> {
    out.dialect = P::DIALECT;
    let mut session = Session::new(info.accepted(), &ctx.cfg);
    // The bytes read to tell the protocol are the start of the hello.
    let mut rbuf = prefix;
    let begun = async {
        let hello = P::handshake(ctx, &mut session, &mut out, &mut rbuf, info).await?;
        P::before_sync(ctx, &hello, &mut session, &mut out, &mut close).await?;
        // Initial syncs take turns, the two protocols' alike.
        let slot = wait_for_sync_slot(ctx, &mut session, &mut out, &mut close).await?;
        session.syncing();
        info.set_phase(Phase::Syncing);
        let sync_started = Instant::now();
        let synced = P::initial_sync(ctx, hello, &mut out).await?;
        out.flush().await?;
        drop(slot);
        info.synced(synced.resumed, synced.feed.position());
        ctx.cache
            .metrics
            .client_snapshot_send_secs
            .of(out.syncer)
            .observe(sync_started.elapsed().as_secs_f64());
        Ok(synced)
    };
    match begun.await {
        Ok(synced) => {
            session.synced(Instant::now(), out.writing);
            Ok(Streaming {
                session,
                out,
                close,
                feed: synced.feed,
                rbuf,
                staleness: synced.staleness,
            })
        }
        Err(e) => Err(end_for(&mut out, e).await),
    }
}

/// Once `start` has brought the client in sync, streams to it until the connection ends.
/// One future for the connection's life: everything the loop keeps is kept here once, not
/// in a caller's future as well.
async fn stream_loop<S, F>(
    ctx: &Arc<Ctx>,
    info: &ConnInfo,
    start: impl Future<Output = Result<Streaming<'_, S, F>, ConnError>>,
) -> Result<(), ConnError>
where
    S: AsyncRead + AsyncWrite + Unpin,
    F: Feed,
{
    let Streaming {
        mut session,
        mut out,
        mut close,
        mut feed,
        mut rbuf,
        mut staleness,
    } = start.await?;
    let wakes_on = feed.wakes_on();
    let _following = ctx.cache.follow(out.syncer, wakes_on.is_some());
    let mut crumbs = ctx.cache.wake_on(wakes_on);
    // One timer for the whole stream, moved after each ping: a fresh one per turn of the loop
    // (per breadcrumb) would be registered and cancelled thousands of times a second across
    // the connections.
    let timer = sleep_until(wake_at(&session));
    tokio::pin!(timer);
    loop {
        // First time round this also sends breadcrumbs published while the initial sync was
        // being written (they came before the subscription and would not wake us).
        let more = match feed.catch_up(ctx, &mut session, &mut out).await {
            Ok(more) => more,
            Err(e) => return Err(end_for(&mut out, e).await),
        };
        out.flush().await?;
        info.sent(feed.position());
        tokio::select! {
            close = &mut close => return Err(closing(&mut out, close).await),
            Ok(()) = changed(&mut staleness) => {
                if let Some(s) = &mut staleness {
                    let frame = s.borrow_and_update().frame.clone();
                    out.queue(frame)?;
                }
            }
            changed = crumbs.changed() => {
                if changed.is_err() {
                    out.end(GoodbyeReason::Shutdown, "cache closed", None).await;
                    return Err(ConnError::Closed(GoodbyeReason::Shutdown));
                }
            }
            // The last round was cut short: go on, after anything else that is ready.
            () = std::future::ready(()), if more => {}
            n = read_some(out.io(), &mut rbuf) => {
                match n {
                    Ok(0) => return Err(ConnError::PeerClosed),
                    Ok(_) => {}
                    Err(e) => return Err(e.into()),
                }
                if let Err(e) = feed.inbound(ctx, &mut rbuf, &mut session, info) {
                    return Err(end_for(&mut out, e).await);
                }
            }
            () = &mut timer => {
                if session.handle_timeout(Instant::now(), out.writing) == Some(Due::Silent) {
                    // Boxed: rare, and not worth room in the connection's future for its life.
                    Box::pin(read_waiting(ctx, &mut out, &mut feed, &mut rbuf, &mut session, info)).await?;
                }
                // Asked again: what was waiting may have been a pong.
                match session.handle_timeout(Instant::now(), out.writing) {
                    Some(Due::Silent) => return Err(end_for(&mut out, ConnError::PingTimeout).await),
                    Some(Due::Ping) => ping(&mut session, &mut out)?,
                    _ => {}
                }
                timer.as_mut().reset(wake_at(&session));
            }
        }
    }
}

/// Holds a client before its initial sync until `until` is ready (`Some`), or `at_most`
/// has passed (`None`), pinging it meanwhile (so its read timeout does not fire); a close
/// request ends the hold, and the connection, in its protocol's way. What is queued (the
/// server's hello) goes out first: a client must not wait for its answer until the first
/// ping.
pub(super) async fn hold<W: AsyncWrite + Unpin, T>(
    session: &mut Session<'_>,
    out: &mut Out<W>,
    close: &mut oneshot::Receiver<Close>,
    at_most: Option<Duration>,
    until: impl Future<Output = T>,
) -> Result<Option<T>, ConnError> {
    out.flush().await?;
    session.hold(Instant::now(), at_most);
    tokio::pin!(until);
    loop {
        tokio::select! {
            v = &mut until => return Ok(Some(v)),
            close = &mut *close => return Err(closing(out, close).await),
            () = sleep_until(wake_at(session)) => {
                match session.handle_timeout(Instant::now(), out.writing) {
                    Some(Due::Ping) => {
                        ping(session, out)?;
                        out.flush().await?;
                    }
                    Some(Due::GiveUp) => return Ok(None),
                    _ => {}
                }
            }
        }
    }
}

/// Waits for a turn to write an initial sync (either protocol's), held meanwhile; the turn
/// lasts as long as the permit is held.
async fn wait_for_sync_slot<W: AsyncWrite + Unpin>(
    ctx: &Arc<Ctx>,
    session: &mut Session<'_>,
    out: &mut Out<W>,
    close: &mut oneshot::Receiver<Close>,
) -> Result<Option<OwnedSemaphorePermit>, ConnError> {
    let Some(slots) = &ctx.sync_slots else {
        return Ok(None);
    };
    if let Ok(p) = slots.clone().try_acquire_owned() {
        return Ok(Some(p));
    }
    ctx.cache.metrics.syncs_waiting.inc();
    let _waiting = scopeguard(|| {
        ctx.cache.metrics.syncs_waiting.dec();
    });
    let permit = hold(session, out, close, None, slots.clone().acquire_owned()).await?;
    // Never `None` without a limit; the semaphore is never closed.
    Ok(permit.and_then(Result::ok))
}

/// Sends a ping now and tells the session.
fn ping<W: AsyncWrite + Unpin>(
    session: &mut Session<'_>,
    out: &mut Out<W>,
) -> Result<(), ConnError> {
    let now = Instant::now();
    let token = out.ping(now)?;
    session.pinged(now, token);
    Ok(())
}

/// When the session's timer is due; a day away when nothing is (no phase that waits has
/// none).
fn wake_at(session: &Session<'_>) -> Instant {
    session
        .poll_timeout()
        .unwrap_or_else(|| Instant::now() + Duration::from_secs(86_400))
}

/// The next message of the handshake, reading from `io` into `rbuf` as needed; `None`: none
/// came whole before `deadline`. `decode` takes one message from the front of `rbuf`.
pub(super) async fn read_message<S: AsyncRead + Unpin, M>(
    io: &mut S,
    rbuf: &mut BytesMut,
    deadline: Instant,
    mut decode: impl FnMut(&mut BytesMut) -> Result<Option<M>, ConnError>,
) -> Result<Option<M>, ConnError> {
    loop {
        if let Some(m) = decode(rbuf)? {
            return Ok(Some(m));
        }
        rbuf.reserve(1024);
        match timeout_at(deadline, io.read_buf(rbuf)).await {
            Ok(Ok(0)) => return Err(ConnError::PeerClosed),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(e.into()),
            Err(_) => return Ok(None),
        }
    }
}

/// A staleness change to tell the client, if it is told (never ready if not).
async fn changed(
    staleness: &mut Option<watch::Receiver<Published>>,
) -> Result<(), watch::error::RecvError> {
    match staleness {
        Some(s) => s.changed().await,
        None => std::future::pending().await,
    }
}

/// Ends the connection for a close request (a drain, a balancing move; the sender gone
/// counts as a shutdown), in its protocol's way.
async fn closing<W: AsyncWrite + Unpin>(
    out: &mut Out<W>,
    close: Result<Close, oneshot::error::RecvError>,
) -> ConnError {
    let close = close.unwrap_or(Close::because(GoodbyeReason::Shutdown));
    out.end(
        close.reason,
        "server closing this connection",
        close.redirect,
    )
    .await;
    ConnError::Closed(close.reason)
}

/// While a long write to the client was in progress nothing was read: its pongs may be
/// waiting in the socket. Reads and handles what is there, without waiting, before the
/// client is judged silent. Bounded: a client that keeps sending cannot keep us here.
async fn read_waiting<S: AsyncRead + AsyncWrite + Unpin, F: Feed>(
    ctx: &Ctx,
    out: &mut Out<S>,
    feed: &mut F,
    rbuf: &mut BytesMut,
    session: &mut Session<'_>,
    info: &ConnInfo,
) -> Result<(), ConnError> {
    for _ in 0..64 {
        let Ok(n) = tokio::time::timeout(Duration::ZERO, read_some(out.io(), rbuf)).await else {
            break;
        };
        match n {
            Ok(0) => return Err(ConnError::PeerClosed),
            Ok(_) => {}
            Err(e) => return Err(e.into()),
        }
        if let Err(e) = feed.inbound(ctx, rbuf, session, info) {
            return Err(end_for(out, e).await);
        }
    }
    Ok(())
}

/// Ends the connection for `e`, telling the client why where its protocol can
/// ([`ConnError::goodbye`]); returns `e`. Boxed: once per connection at most, and not worth
/// room in the loop's state.
fn end_for<S: AsyncWrite + Unpin>(
    out: &mut Out<S>,
    e: ConnError,
) -> Pin<Box<impl Future<Output = ConnError> + '_>> {
    Box::pin(async move {
        if let Some((reason, message)) = e.goodbye() {
            out.end(reason, &message, None).await;
        }
        e
    })
}

/// Reads what the client sent, appending it to `rbuf`; 0: the client closed the connection.
/// Through a buffer on the stack, there only while polled: a connection waiting for its
/// client keeps no read buffer (`rbuf` holds only a partial message).
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
mod tests;
