//! A connection of our protocol, as the driver (`drive.rs`) runs it: the handshake (the
//! hello, answered with the server's hello and how current the view is), a resuming client
//! held for a complete cache or its revision floor, the initial sync, then `OurFeed`:
//! breadcrumbs as shared delta and span frames, staleness changes; pongs, acks and a
//! goodbye read. The outcome is logged once, at the task's boundary ([`super::ended`]).

use std::sync::Arc;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;
use tracing::{debug, info, warn};
use typha_protocol::frame::{FrameDecoder, Limits};
use typha_protocol::handshake::{ServerHandshake, Session as Agreed};
use typha_protocol::message::{Features, GoodbyeReason, Message, MessageType, Resume, Seq};
use typha_protocol::model::{Revision, SyncStatus};

use super::drive::{self, Feed, Start, Synced, read_message};
use super::info::ConnInfo;
use super::out::{Dialect, Out};
use super::session::{Due, Session};
use super::sync::{self, FloorWait, catch_up, wait_for_first_sync, wait_for_revision};
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
    drive::run::<Ours, S>(stream, ctx, close, info, prefix)
}

/// Our protocol's start.
struct Ours;

/// What our handshake learnt.
struct OurHello {
    dec: FrameDecoder,
    agreed: Agreed,
    resume: Option<Resume>,
    /// The client's revision floor, where revisions are shared by the replicas (0: none).
    floor: Revision,
    staleness: Option<watch::Receiver<Published>>,
}

impl Start for Ours {
    type Hello = OurHello;
    type Feed = OurFeed;
    const DIALECT: Dialect = Dialect::Ours;

    /// The hello (by the session's deadline, counted from accept, so TLS and hello share it),
    /// answered with the server's hello and, for a client that asked, how current the view
    /// is.
    async fn handshake<S: AsyncRead + AsyncWrite + Unpin>(
        ctx: &Arc<Ctx>,
        session: &mut Session<'_>,
        out: &mut Out<S>,
        rbuf: &mut BytesMut,
        info: &ConnInfo,
    ) -> Result<OurHello, ConnError> {
        let mut dec = FrameDecoder::new(Limits::SERVER_INBOUND);
        let mut hs = ServerHandshake::new(ctx.offer.clone(), info.accepted().into_std());
        let deadline = session.poll_timeout().unwrap_or_else(Instant::now);
        let decode = |b: &mut BytesMut| dec.decode(b).map_err(ConnError::HandshakeFrame);
        let Some(first) = read_message(out.io(), rbuf, deadline, decode).await? else {
            // Past the session's deadline: the handshake's refusal says so to the client.
            let now = Instant::now();
            let what = match session.handle_timeout(now, out.writing) {
                Some(Due::HandshakeExpired(what)) => what,
                _ => "hello",
            };
            return Err(hs
                .handle_timeout(now.into_std())
                .map_or(ConnError::HandshakeTimeout(what), |rej| {
                    ConnError::Handshake(Box::new(rej))
                }));
        };
        let accepted = hs
            .handle_message(first, Instant::now().into_std())
            .map_err(|rej| ConnError::Handshake(Box::new(rej)))?;
        let agreed = accepted.session;
        info.hello(&accepted.hostname, &accepted.client_info, agreed.version);
        debug!(client = %accepted.client_info, version = %agreed.version, "client hello");
        out.queue(encode(&Message::ServerHello(accepted.reply), false))?;
        // How current the view is, before any data (so a consumer knows what it is about to
        // get), with its age now: a tiny per-client encode, like the hello. Later changes go
        // out as the frame encoded once for everyone; subscribed first, so none is missed.
        let staleness = agreed.features.contains(Features::STALENESS).then(|| {
            let mut s = ctx.freshness.subscribe();
            s.borrow_and_update();
            s
        });
        if staleness.is_some() {
            let now = Message::Staleness(ctx.freshness.view().to_message());
            out.queue(encode(&now, false))?;
        }
        // The hello's digest was the big part of the read buffer; do not keep its capacity.
        *rbuf = BytesMut::from(&rbuf[..]);
        let floor = accepted
            .revision_floor
            .filter(|_| !ctx.cfg.resume_floor_wait.is_zero())
            .unwrap_or_default();
        Ok(OurHello {
            dec,
            agreed,
            resume: accepted.resume,
            floor,
            staleness,
        })
    }

    /// A resuming client has state: comparing it with a partial cache would tell it to delete
    /// what this server has not loaded yet, so it is held (pinged) until the cache is
    /// complete; a new client has nothing to lose and gets the partial state. Then a client
    /// whose revision floor the cache has not reached is held for it (or sent elsewhere, if
    /// this server's view is stale).
    async fn before_sync<S: AsyncRead + AsyncWrite + Unpin>(
        ctx: &Arc<Ctx>,
        hello: &OurHello,
        session: &mut Session<'_>,
        out: &mut Out<S>,
        close: &mut oneshot::Receiver<Close>,
    ) -> Result<(), ConnError> {
        if hello.resume.is_some() && !ctx.cache.ever_in_sync() {
            wait_for_first_sync(ctx, session, out, close).await?;
        }
        let floor = hello.floor;
        if ctx.cache.latest().revision >= floor {
            return Ok(());
        }
        let ended = wait_for_revision(ctx, session, out, close, floor).await?;
        let [yes, no, away] = &ctx.cache.metrics.resume_floor_waits;
        match ended {
            FloorWait::Reached => yes.inc(),
            FloorWait::Stale => {
                // Cut off from the datastore: this cache is behind because it cannot hear,
                // not because the datastore went back. Another replica can serve the client
                // what it has; this one would send it back in time.
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
            }
            FloorWait::TimedOut => {
                no.inc();
                warn!(
                    floor = floor.0,
                    cache = ctx.cache.latest().revision.0,
                    "a resuming client has seen newer datastore revisions than this cache reached within TYPHA_RESUMEREVISIONWAITSECS; serving what it has"
                );
            }
        }
        Ok(())
    }

    /// By deltas, digest buckets or a snapshot, as the client's resume allows.
    async fn initial_sync<S: AsyncRead + AsyncWrite + Unpin>(
        ctx: &Arc<Ctx>,
        hello: OurHello,
        out: &mut Out<S>,
    ) -> Result<Synced<OurFeed>, ConnError> {
        let queued_before = out.queued;
        let resume = (hello.resume.as_ref(), hello.floor);
        let (cursor, resumed) = sync::initial_sync(ctx, &hello.agreed, resume, out).await?;
        ctx.cache
            .metrics
            .resume_bytes(resumed)
            .inc_by(out.queued - queued_before);
        let feed = OurFeed {
            dec: hello.dec,
            may_receive: MessageType::ALL
                .iter()
                .filter(|t| hello.agreed.may_receive(**t))
                .fold(0, |mask, t| mask | bit(*t)),
            variant: Variant::of(&hello.agreed),
            sent_status: cursor.status,
            cursor,
        };
        Ok(Synced {
            feed,
            resumed,
            staleness: hello.staleness,
        })
    }
}

/// What a client of ours is sent once in sync, and what it may say.
struct OurFeed {
    dec: FrameDecoder,
    /// What the client may send: a [`bit`] per message type (the agreed session's 48 bytes
    /// would be kept for this alone).
    may_receive: u32,
    variant: Variant,
    /// The last breadcrumb it was sent.
    cursor: Arc<Breadcrumb>,
    /// The sync status it was last told.
    sent_status: SyncStatus,
}

impl Feed for OurFeed {
    fn position(&self) -> Seq {
        self.cursor.seq
    }

    fn wakes_on(&self) -> Option<SyncerType> {
        None
    }

    fn catch_up<S: AsyncRead + AsyncWrite + Unpin>(
        &mut self,
        ctx: &Arc<Ctx>,
        session: &mut Session<'_>,
        out: &mut Out<S>,
    ) -> impl Future<Output = Result<bool, ConnError>> {
        // The catch-up's own future, not one around it.
        catch_up(
            ctx,
            &mut self.cursor,
            &mut self.sent_status,
            self.variant,
            session,
            out,
        )
    }

    fn inbound(
        &mut self,
        ctx: &Ctx,
        rbuf: &mut BytesMut,
        session: &mut Session<'_>,
        info: &ConnInfo,
    ) -> Result<(), ConnError> {
        inbound(ctx, self.may_receive, &mut self.dec, rbuf, session, info)
    }
}

/// A message type's bit in [`OurFeed::may_receive`] (the types are numbered 1 to 12).
fn bit(t: MessageType) -> u32 {
    1 << (t as u32)
}

/// Handles every complete message in `rbuf`: pongs and acks; a goodbye or anything a client
/// may not send ends the connection (the stream loop says why to the client).
fn inbound(
    ctx: &Ctx,
    may_receive: u32,
    dec: &mut FrameDecoder,
    rbuf: &mut BytesMut,
    session: &mut Session<'_>,
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
                if let Some(took) = session.pong(p.ping_timestamp_micros, Instant::now()) {
                    ctx.cache
                        .metrics
                        .ping_latency
                        .felix()
                        .observe(took.as_secs_f64());
                }
            }
            Message::Ack(a) => {
                // A client acknowledging what it applied is alive and reading.
                session.heard(Instant::now());
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
