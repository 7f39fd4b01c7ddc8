//! A connection of our protocol: the handshake (hello within the deadline, counted from
//! accept), the initial sync, then the stream loop (`drive.rs`) with `Ours`: breadcrumbs as
//! shared delta and span frames, staleness changes; pongs, acks and a goodbye read. The
//! outcome is logged once, at the task's boundary ([`super::ended`]).

use std::sync::Arc;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::sync::{oneshot, watch};
use tokio::time::{Instant, timeout_at};
use tracing::{debug, info, warn};
use typha_protocol::frame::{FrameDecoder, Limits};
use typha_protocol::handshake::{ServerHandshake, Session};
use typha_protocol::message::{Features, GoodbyeReason, Message, MessageType, Seq};
use typha_protocol::model::SyncStatus;

use super::drive::{self, Feed, Streaming};
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
use crate::syncer::freshness::Published;

/// Serves one connection of our protocol until it ends (then [`super::ended`] tells how).
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
    // for the life of the connection.
    let start = Box::pin(start_owned(
        Out::new(stream, ctx.clone()),
        close,
        ctx,
        info,
        prefix,
    ));
    drive::stream(ctx, info, start)
}

/// What a client of ours is sent once in sync, and what it may say.
struct Ours {
    dec: FrameDecoder,
    /// What the client may send: a [`bit`] per message type (the session's 48 bytes would be
    /// kept for this alone).
    may_receive: u32,
    variant: Variant,
    /// The last breadcrumb it was sent.
    cursor: Arc<Breadcrumb>,
    /// The sync status it was last told.
    sent_status: SyncStatus,
}

impl Feed for Ours {
    fn position(&self) -> Seq {
        self.cursor.seq
    }

    fn wakes_on(&self) -> Option<SyncerType> {
        None
    }

    fn catch_up<S: AsyncRead + AsyncWrite + Unpin>(
        &mut self,
        ctx: &Arc<Ctx>,
        follow: &mut Follow<'_>,
        out: &mut Out<S>,
    ) -> impl Future<Output = Result<bool, ConnError>> {
        // The catch-up's own future, not one around it.
        catch_up(
            ctx,
            &mut self.cursor,
            &mut self.sent_status,
            self.variant,
            follow,
            out,
        )
    }

    fn inbound(
        &mut self,
        ctx: &Ctx,
        rbuf: &mut BytesMut,
        follow: &mut Follow<'_>,
        info: &ConnInfo,
    ) -> Result<(), ConnError> {
        inbound(ctx, self.may_receive, &mut self.dec, rbuf, follow, info)
    }
}

/// [`start`], owning what the stream loop takes over.
async fn start_owned<S>(
    mut out: Out<S>,
    mut close: oneshot::Receiver<Close>,
    ctx: &Arc<Ctx>,
    info: &ConnInfo,
    prefix: BytesMut,
) -> Result<Streaming<S, Ours>, ConnError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let s = start(ctx, &mut close, info, prefix, &mut out).await?;
    Ok(Streaming {
        out,
        close,
        rbuf: s.rbuf,
        feed: Ours {
            dec: s.dec,
            may_receive: MessageType::ALL
                .iter()
                .filter(|t| s.session.may_receive(**t))
                .fold(0, |mask, t| mask | bit(*t)),
            variant: Variant::of(&s.session),
            sent_status: s.cursor.status,
            cursor: s.cursor,
        },
        staleness: s.staleness,
        tells_staleness: s.tells_staleness,
        syncer: SyncerType::Felix,
    })
}

/// A message type's bit in [`Ours::may_receive`] (the types are numbered 1 to 12).
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
                return Err(rej.map_or(ConnError::HandshakeTimeout("hello"), |r| {
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
/// may not send ends the connection (the stream loop says why to the client).
fn inbound(
    ctx: &Ctx,
    may_receive: u32,
    dec: &mut FrameDecoder,
    rbuf: &mut BytesMut,
    follow: &mut Follow<'_>,
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
            return Err(ConnError::Unexpected(msg.message_type().to_string()));
        }
        match msg {
            Message::Pong(p) => {
                if let Some(took) = follow.pong(p.ping_timestamp_micros, Instant::now()) {
                    ctx.cache
                        .metrics
                        .ping_latency
                        .felix()
                        .observe(took.as_secs_f64());
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
            other => return Err(ConnError::Unexpected(other.message_type().to_string())),
        }
    }
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
