//! What a client of ours is sent: its initial sync (the missed deltas, the digest buckets
//! that differ, or a full snapshot, as its resume allows), then catching up from its
//! position with as few shared frames as the history allows (a Calico client's:
//! `calico_sync.rs`); what a resuming client may be held for first (a complete cache, its
//! revision floor: [`hold`]). For both protocols' catch-up: whether the next breadcrumb may
//! still be sent (`may_send`) and what each step sent counts (`count_step`).

use std::sync::Arc;

use tokio::io::AsyncWrite;
use tokio::sync::oneshot;
use tokio::time::Instant;
use typha_protocol::digest::BUCKETS;
use typha_protocol::handshake::Session as Agreed;
use typha_protocol::message::{Deltas, Features, GoodbyeReason, Message, Resume, Seq};
use typha_protocol::model::{Revision, SyncStatus};

use super::drive::hold;
use super::out::Out;
use super::session::{Next, Session};
use super::{Close, ConnError, Ctx};
use crate::cache::breadcrumb::Breadcrumb;
use crate::calico::libcalico::SyncerType;
use crate::fanout::{self, Step, Variant, encode, plan};
use crate::metrics::{Metrics, ResumeKind};

/// Holds a resuming client until the cache has been in sync once, pinging it meanwhile.
pub(super) async fn wait_for_first_sync<W: AsyncWrite + Unpin>(
    ctx: &Arc<Ctx>,
    session: &mut Session<'_>,
    out: &mut Out<W>,
    close: &mut oneshot::Receiver<Close>,
) -> Result<(), ConnError> {
    let mut crumbs = ctx.cache.subscribe();
    let in_sync = async {
        while !ctx.cache.ever_in_sync() {
            if crumbs.changed().await.is_err() {
                return false;
            }
        }
        true
    };
    if hold(session, out, close, None, in_sync).await? == Some(true) {
        Ok(())
    } else {
        Err(ConnError::Closed(GoodbyeReason::Shutdown))
    }
}

/// Holds a resuming client whose revision floor the cache has not reached (pinging it
/// meanwhile) until it does, or [`ConnConfig::resume_floor_wait`] runs out, or the view of the
/// datastore is (or turns) stale: resumed from a replica that is behind the one it left, it
/// would be sent older values than it has, and a replica cut off from its datastore will not
/// catch up while it is (the caller sends the client elsewhere at once, not at the wait's end).
///
/// [`ConnConfig::resume_floor_wait`]: super::ConnConfig::resume_floor_wait
pub(super) async fn wait_for_revision<W: AsyncWrite + Unpin>(
    ctx: &Arc<Ctx>,
    session: &mut Session<'_>,
    out: &mut Out<W>,
    close: &mut oneshot::Receiver<Close>,
    floor: Revision,
) -> Result<FloorWait, ConnError> {
    let mut crumbs = ctx.cache.subscribe();
    let mut staleness = ctx.freshness.subscribe();
    let ended = async {
        loop {
            if ctx.cache.latest().revision >= floor {
                return FloorWait::Reached;
            }
            if ctx.freshness.view().stale {
                return FloorWait::Stale;
            }
            tokio::select! {
                r = crumbs.changed() => if r.is_err() { return FloorWait::TimedOut },
                // Published when the view turns stale or current again (`view` above says which).
                r = staleness.changed() => if r.is_err() { return FloorWait::TimedOut },
            }
        }
    };
    let at_most = Some(ctx.cfg.resume_floor_wait);
    Ok(hold(session, out, close, at_most, ended)
        .await?
        .unwrap_or(FloorWait::TimedOut))
}

/// How [`wait_for_revision`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FloorWait {
    /// The cache reached the client's floor.
    Reached,
    /// It did not within the wait (or the cache closed).
    TimedOut,
    /// The view of the datastore is stale: cut off, the cache will not catch up while it is.
    Stale,
}

/// Brings a newly connected client to a position in the cache: by deltas, by digest buckets,
/// or by full snapshot; never by frames of an older state than its revision `floor` (0: none)
/// while the cache has a newer one. Returns the breadcrumb the client is now at, and how it
/// got there.
pub(super) async fn initial_sync<W: AsyncWrite + Unpin>(
    ctx: &Arc<Ctx>,
    agreed: &Agreed,
    (resume, floor): (Option<&Resume>, Revision),
    out: &mut Out<W>,
) -> Result<(Arc<Breadcrumb>, ResumeKind), ConnError> {
    let cache = &ctx.cache;
    let m = &cache.metrics;
    let v = Variant::of(agreed);
    let compress = v.compress;
    // Same epoch, still in the window: only the missed deltas.
    if agreed.features.contains(Features::DELTA_RESUME)
        && let Some(at) = resume
            .and_then(|r| r.cursor)
            .filter(|c| c.epoch == cache.epoch())
            .and_then(|c| cache.get(c.seq))
    {
        // Confirms the position and its digest; the catch-up follows from the stream loop.
        let msg = Message::Deltas(Deltas {
            from_seq: at.seq,
            seq: at.seq,
            digest: at.digest_for(v.view),
            updates: vec![],
        });
        out.queue(encode(&msg, compress))?;
        out.queue(fanout::status_frame(at.status))?;
        m.resumed(ResumeKind::deltas);
        return Ok((at, ResumeKind::deltas));
    }
    // A digest: only the buckets that differ, unless most do.
    if agreed.features.contains(Features::BUCKET_RESYNC)
        && let Some(theirs) = resume.and_then(|r| r.digest.as_ref())
    {
        let bf = ctx.snapshots.buckets_from(cache, v, floor).await;
        let diff = theirs.diff(&bf.digest);
        if diff.len() <= BUCKETS / 2 {
            out.queue(bf.begin(&diff, compress))?;
            for b in diff.ids() {
                for f in bf.buckets.get(usize::from(b.0)).into_iter().flatten() {
                    out.queue(f.clone())?;
                }
                if out.pending_len >= ctx.cfg.max_write * 4 {
                    out.flush().await?;
                }
            }
            out.queue(bf.end.clone())?;
            out.queue(fanout::status_frame(bf.crumb.status))?;
            m.resumed(ResumeKind::digest);
            return Ok((bf.crumb.clone(), ResumeKind::digest));
        }
    }
    let snap = ctx.snapshots.full_from(cache, v, floor).await;
    for f in &snap.frames {
        out.queue(f.clone())?;
        if out.pending_len >= ctx.cfg.max_write * 4 {
            out.flush().await?;
        }
    }
    out.queue(fanout::status_frame(snap.crumb.status))?;
    m.resumed(ResumeKind::snapshot);
    Ok((snap.crumb.clone(), ResumeKind::snapshot))
}

/// Queues one bounded round of what the client has not seen, as few shared frames as the
/// history allows; `Ok(true)`: more is waiting. A client whose position has left the window
/// gets a fresh snapshot in-band.
pub(super) async fn catch_up<W: AsyncWrite + Unpin>(
    ctx: &Arc<Ctx>,
    cursor: &mut Arc<Breadcrumb>,
    sent_status: &mut SyncStatus,
    v: Variant,
    session: &mut Session<'_>,
    out: &mut Out<W>,
) -> Result<bool, ConnError> {
    let cache = &ctx.cache;
    let latest = cache.latest();
    if latest.seq <= cursor.seq {
        session.caught_up();
        return Ok(false);
    }
    let Some(next) = cache.get(Seq(cursor.seq.0 + 1)) else {
        // Fell out of the window: resnapshot (the client replaces its state). Boxed: rare, and
        // not worth room in every streaming connection's future.
        Box::pin(resnapshot(ctx, cursor, sent_status, v, out)).await?;
        return Ok(cursor.seq < cache.latest().seq);
    };
    let m = &cache.metrics;
    let mut waited = may_send(session, m, SyncerType::Felix, &next)?;
    // A client more than one breadcrumb behind is catching up, not following: the time each
    // of its steps takes to get is Typha's `typha_next_breadcrumb_latency_secs`.
    let catching_up = latest.seq.0 - cursor.seq.0 > 1;
    // Bound one round so reads and pings are served between rounds.
    let mut budget = 256;
    for step in plan(cursor.seq, latest.seq) {
        if budget == 0 || out.pending_len >= ctx.cfg.max_write * 8 {
            break;
        }
        budget -= 1;
        // The clock is read only for the figure that needs it.
        let started = catching_up.then(Instant::now);
        let span = match step {
            Step::Crumb(_) => None,
            Step::Span { end, stride } => cache
                .get(end)
                .and_then(|c| cache.span_frame(&c, stride, v).map(|f| (f, c))),
        };
        let spanned = span.is_some();
        let (frame, reached) = match span {
            Some(x) => x,
            // A single breadcrumb; also the fallback when part of a span left the window.
            None => match cache.get(Seq(cursor.seq.0 + 1)) {
                Some(c) => (c.delta_frame(v, m), c),
                None => break,
            },
        };
        let steps = (&*latest, &*reached);
        count_step(
            m,
            SyncerType::Felix,
            std::mem::take(&mut waited),
            started,
            steps,
        );
        out.queue(frame)?;
        *cursor = reached;
        send_status(cursor, sent_status, out)?;
        if matches!(step, Step::Span { .. }) && !spanned {
            // The plan assumed a span: re-plan from the new position next round.
            break;
        }
    }
    if cursor.seq < latest.seq {
        return Ok(true);
    }
    // Up to date: the next breadcrumb is one it waits for.
    session.caught_up();
    Ok(false)
}

/// Whether the breadcrumb `next`, the one after the client's position, may still be sent to
/// it ([`Session::next_breadcrumb`]: [`ConnError::FellBehind`] if not), counting a connection
/// only the grace period kept (Typha's `typha_connections_grace_used`); `Ok`: whether the
/// client had been waiting for it.
pub(super) fn may_send(
    session: &mut Session<'_>,
    m: &Metrics,
    syncer: SyncerType,
    next: &Breadcrumb,
) -> Result<bool, ConnError> {
    match session.next_breadcrumb(Instant::now(), next.created) {
        Next::FellBehind(age) => Err(ConnError::FellBehind(format!(
            "breadcrumb {} is {age:?} old",
            next.seq.0
        ))),
        Next::Send { grace_used, waited } => {
            if grace_used {
                m.connections_grace_used.of(syncer).inc();
            }
            Ok(waited)
        }
    }
}

/// Counts a step sent to a client (one breadcrumb, or for ours a span of them ending at
/// `reached`), as Typha does: whether the client had waited for it
/// (`typha_breadcrumb_block` / `_non_block`), how far behind the latest it was
/// (`typha_client_latency_secs`) and, for a client catching up, how long getting the step
/// took since `started` (`typha_next_breadcrumb_latency_secs`).
pub(super) fn count_step(
    m: &Metrics,
    syncer: SyncerType,
    waited: bool,
    started: Option<Instant>,
    (latest, reached): (&Breadcrumb, &Breadcrumb),
) {
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
            .saturating_duration_since(reached.created)
            .as_secs_f64(),
    );
}

/// A fresh snapshot in-band, for a client whose position left the window.
async fn resnapshot<W: AsyncWrite + Unpin>(
    ctx: &Arc<Ctx>,
    cursor: &mut Arc<Breadcrumb>,
    sent_status: &mut SyncStatus,
    v: Variant,
    out: &mut Out<W>,
) -> Result<(), ConnError> {
    let snap = ctx.snapshots.full(&ctx.cache, v).await;
    for f in &snap.frames {
        out.queue(f.clone())?;
        if out.pending_len >= ctx.cfg.max_write * 4 {
            out.flush().await?;
        }
    }
    *cursor = snap.crumb.clone();
    out.queue(fanout::status_frame(cursor.status))?;
    *sent_status = cursor.status;
    Ok(())
}

fn send_status<W: AsyncWrite + Unpin>(
    cursor: &Breadcrumb,
    sent: &mut SyncStatus,
    out: &mut Out<W>,
) -> Result<(), ConnError> {
    if cursor.status != *sent {
        out.queue(fanout::status_frame(cursor.status))?;
        *sent = cursor.status;
    }
    Ok(())
}
