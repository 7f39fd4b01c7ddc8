//! The stream loop, one for both protocols: once a client is in sync, it is sent what the
//! cache publishes as it comes, pinged, and read, until either side ends the connection or a
//! limit is hit. What is decided by the clock (when to ping, whether the client is silent too
//! long, whether it has fallen behind) is [`Follow`]'s, with no I/O; what each protocol
//! writes and reads is its [`Feed`]'s (ours in `task.rs`, Calico's in `calico.rs`); how a
//! ping and the end are written is [`Out`]'s dialect. This loop only waits for whichever
//! comes first and hands it on:
//!
//! ```text
//!   ┌─▶ feed.catch_up (one bounded round) ─▶ flush ─▶ wait for the first of:
//!   │     close request ─▶ out.end ─▶ done        staleness change ─▶ queue (ours)
//!   │     new breadcrumb (Calico's: of its type)  more to send from the last round
//!   │     bytes ─▶ feed.inbound (pongs, acks)     ping due ─▶ silent too long? ─▶ out.end
//!   └────────────────────────────────────────────────────────────────────────────┘
//! ```
//!
//! The stream is read and written in turn, never at once: while a write to a slow client is
//! blocked nothing is read, so that time does not count as the client's silence
//! ([`Follow::pause_for_writing`]), and a client found silent has the bytes already in its
//! socket read before it is judged.

use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{oneshot, watch};
use tokio::time::{Instant, sleep_until};
use typha_protocol::message::{GoodbyeReason, Seq};

use super::info::ConnInfo;
use super::out::Out;
use super::session::Follow;
use super::{Close, ConnError, Ctx};
use crate::calico::libcalico::SyncerType;
use crate::syncer::freshness::Published;

/// What a protocol sends and reads once its client is in sync.
pub(super) trait Feed {
    /// The last breadcrumb the client was sent.
    fn position(&self) -> Seq;

    /// Which breadcrumbs wake the connection ([`Cache::wake_on`]): every one for ours; for
    /// a Calico client, those with something for its syncer type.
    ///
    /// [`Cache::wake_on`]: crate::cache::Cache::wake_on
    fn wakes_on(&self) -> Option<SyncerType>;

    /// Queues one bounded round of what the client has not been sent (asking `follow`
    /// whether it may still be sent: [`ConnError::FellBehind`] if not); `Ok(true)`: more is
    /// waiting after this round. Bounded so reads and pings are served between rounds.
    fn catch_up<S: AsyncRead + AsyncWrite + Unpin>(
        &mut self,
        ctx: &Arc<Ctx>,
        follow: &mut Follow<'_>,
        out: &mut Out<S>,
    ) -> impl Future<Output = Result<bool, ConnError>>;

    /// Handles every complete message in `rbuf` (pongs, for ours also acks and a goodbye,
    /// telling `follow` the client was heard), leaving a partial one; anything a client may
    /// not send is an error. Not async: the loop's state keeps no room for it.
    fn inbound(
        &mut self,
        ctx: &Ctx,
        rbuf: &mut BytesMut,
        follow: &mut Follow<'_>,
        info: &ConnInfo,
    ) -> Result<(), ConnError>;
}

/// What a connection streams with, once its client is in sync: what the protocol's start
/// (handshake, initial sync) leaves to [`stream`].
pub(super) struct Streaming<S, F> {
    pub(super) out: Out<S>,
    pub(super) close: oneshot::Receiver<Close>,
    pub(super) feed: F,
    /// Bytes read and not yet handled.
    pub(super) rbuf: BytesMut,
    /// For a client told how current the view is (ours, when it asked), the changes to tell
    /// it, subscribed before its initial sync so none is missed; for the others a
    /// subscription never read.
    pub(super) staleness: watch::Receiver<Published>,
    pub(super) tells_staleness: bool,
    /// The syncer type its metrics count under.
    pub(super) syncer: SyncerType,
}

/// Runs `start` (the protocol's handshake and initial sync), then streams to the client
/// until the connection ends; returns why (logged by the caller, once). One future for the
/// connection's life: the start is the caller's to box (so what only it needs is freed when
/// it is done), and everything the loop keeps is kept here once, not in a caller's future as
/// well.
pub(super) async fn stream<S, F>(
    ctx: &Arc<Ctx>,
    info: &ConnInfo,
    start: impl Future<Output = Result<Streaming<S, F>, ConnError>>,
) -> Result<(), ConnError>
where
    S: AsyncRead + AsyncWrite + Unpin,
    F: Feed,
{
    let Streaming {
        mut out,
        mut close,
        mut feed,
        mut rbuf,
        mut staleness,
        tells_staleness,
        syncer,
    } = start.await?;
    let wakes_on = feed.wakes_on();
    let _following = ctx.cache.follow(syncer, wakes_on.is_some());
    let mut crumbs = ctx.cache.wake_on(wakes_on);
    let mut follow = Follow::new(Instant::now(), &ctx.cfg);
    // What the initial sync took to write is not silence either.
    follow.pause_for_writing(out.writing, Instant::now());
    // One timer for the whole stream, moved after each ping: a fresh one per turn of the loop
    // (per breadcrumb) would be registered and cancelled thousands of times a second across
    // the connections.
    let ping_timer = sleep_until(follow.next_ping());
    tokio::pin!(ping_timer);
    loop {
        // First time round this also sends breadcrumbs published while the initial sync was
        // being written (they came before the subscription and would not wake us).
        let more = match feed.catch_up(ctx, &mut follow, &mut out).await {
            Ok(more) => more,
            Err(e) => return Err(end_for(&mut out, e).await),
        };
        out.flush().await?;
        info.sent(feed.position());
        tokio::select! {
            close = &mut close => {
                let close = close.unwrap_or(Close::because(GoodbyeReason::Shutdown));
                out.end(close.reason, "server closing this connection", close.redirect).await;
                return Err(ConnError::Closed(close.reason));
            }
            Ok(()) = staleness.changed(), if tells_staleness => {
                let frame = staleness.borrow_and_update().frame.clone();
                out.queue(frame)?;
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
                if let Err(e) = feed.inbound(ctx, &mut rbuf, &mut follow, info) {
                    return Err(end_for(&mut out, e).await);
                }
            }
            () = &mut ping_timer => {
                follow.pause_for_writing(out.writing, Instant::now());
                if follow.silent_too_long(Instant::now()) {
                    // Boxed: rare, and not worth room in the connection's future for its life.
                    Box::pin(read_waiting(ctx, &mut out, &mut feed, &mut rbuf, &mut follow, info)).await?;
                }
                let now = Instant::now();
                if follow.silent_too_long(now) {
                    return Err(end_for(&mut out, ConnError::PingTimeout).await);
                }
                let token = out.ping(now)?;
                follow.pinged(now, token);
                ping_timer.as_mut().reset(follow.next_ping());
            }
        }
    }
}

/// While a long write to the client was in progress nothing was read: its pongs may be
/// waiting in the socket. Reads and handles what is there, without waiting, before the
/// client is judged silent. Bounded: a client that keeps sending cannot keep us here.
async fn read_waiting<S: AsyncRead + AsyncWrite + Unpin, F: Feed>(
    ctx: &Ctx,
    out: &mut Out<S>,
    feed: &mut F,
    rbuf: &mut BytesMut,
    follow: &mut Follow<'_>,
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
        if let Err(e) = feed.inbound(ctx, rbuf, follow, info) {
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
