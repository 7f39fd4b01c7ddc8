//! What a Calico client is sent: its syncer type's snapshot, then breadcrumb by breadcrumb
//! what each has for it, as its shared `MsgKVs`, and `MsgSyncStatus` on change. The same
//! fall-behind check and per-step counts as ours (`sync.rs`); the encodings are the cache's
//! (`cache/calico.rs`), shared by every Calico client of the same syncer type and carriage.

use std::sync::Arc;

use tokio::io::AsyncWrite;
use tokio::time::Instant;
use typha_protocol::message::Seq;
use typha_protocol::model::SyncStatus;

use super::out::Out;
use super::session::Session;
use super::sync::{count_step, may_send};
use super::{ConnError, Ctx};
use crate::cache::Pin as CachePin;
use crate::cache::calico::{Carriage, build as build_calico_snapshot};
use crate::calico::libcalico::SyncerType;

/// Where a Calico client is: its syncer type and carriage, the last breadcrumb it was sent,
/// the sync status it was last told, and its hold on the history (Calico's protocol cannot
/// resume: the breadcrumbs after its cursor are kept while it lags).
pub(super) struct CalicoCursor {
    pub(super) syncer: SyncerType,
    pub(super) carriage: Carriage,
    pub(super) seq: Seq,
    pub(super) status: SyncStatus,
    pin: CachePin,
}

/// A Calico client's initial sync: the snapshot of its syncer type and carriage (shared by
/// every client that asks for the same, [`crate::cache::calico`]) and the sync status, written
/// and flushed. Returns where the client is.
pub(super) async fn calico_initial_sync<W: AsyncWrite + Unpin>(
    ctx: &Arc<Ctx>,
    syncer: SyncerType,
    carriage: Carriage,
    out: &mut Out<W>,
) -> Result<CalicoCursor, ConnError> {
    let m = &ctx.cache.metrics;
    // The snapshot and the breadcrumb it was asked for are held only while it is written:
    // kept for the connection's life, they would pin that snapshot's frames (and the
    // breadcrumb) after the cache has moved on, one set per moment clients joined.
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
            build_calico_snapshot((syncer, carriage, driver), at, kvs, &metrics)
        }
    };
    let snap = ctx
        .calico_snapshots
        .get(syncer, carriage, latest.seq, build, m)
        .await?;
    drop(latest);
    // From here the history keeps what this connection still needs, including what arrives
    // while the snapshot is written to a slow reader.
    let pin = ctx.cache.pin(snap.seq);
    for f in &snap.frames {
        out.queue(f.clone())?;
    }
    if snap.status != SyncStatus::WaitForDatastore {
        out.queue(carriage.sync_status(snap.status)?)?;
    }
    let (seq, status, kvs) = (snap.seq, snap.status, snap.kvs);
    drop(snap);
    out.flush().await?;
    tracing::debug!(syncer = %syncer, kvs, seq = seq.0, "Calico snapshot sent");
    Ok(CalicoCursor {
        syncer,
        carriage,
        seq,
        status,
        pin,
    })
}

/// Queues one bounded round of breadcrumbs for a Calico client, each as its shared `MsgKVs`
/// for the client's syncer type and a `MsgSyncStatus` on change; `Ok(true)`: more is waiting.
/// A breadcrumb with nothing for its syncer type is passed at no cost, as Typha's breadcrumbs
/// of that type would not hold it: only what is sent counts for the fall-behind limit and
/// Typha's per-step counts. One that has left the history drops the client (it cannot
/// resume; it reconnects and takes a snapshot).
pub(super) async fn calico_catch_up<W: AsyncWrite + Unpin>(
    ctx: &Arc<Ctx>,
    at: &mut CalicoCursor,
    session: &mut Session<'_>,
    out: &mut Out<W>,
) -> Result<bool, ConnError> {
    let m = &ctx.cache.metrics;
    let syncer = at.syncer;
    let latest = ctx.cache.latest();
    let catching_up = latest.seq.0.saturating_sub(at.seq.0) > 1;
    // Passing breadcrumbs costs little, but not without end in one round.
    let mut budget = 4096;
    while at.seq < latest.seq {
        if out.pending_len >= ctx.cfg.max_write || budget == 0 {
            // A round's worth: written before the rest.
            return Ok(true);
        }
        budget -= 1;
        let next = Seq(at.seq.0 + 1);
        let started = catching_up.then(Instant::now);
        let Some(crumb) = ctx.cache.get(next) else {
            return Err(ConnError::FellBehind(format!(
                "breadcrumb {} has left the history",
                next.0
            )));
        };
        let frame = crumb.calico_frame(syncer, at.carriage, ctx.cache.calico_driver, m)?;
        let status = (crumb.status != at.status).then_some(crumb.status);
        if frame.is_some() || status.is_some() {
            // Typha's fall-behind limit, with the grace after the snapshot, and its counts.
            let waited = may_send(session, m, syncer, &crumb)?;
            count_step(m, syncer, waited, started, (&latest, &crumb));
        }
        if let Some(frame) = frame {
            out.queue(frame)?;
        }
        if let Some(status) = status {
            out.queue(at.carriage.sync_status(status)?)?;
            at.status = status;
        }
        at.seq = next;
        at.pin.set(next);
    }
    session.caught_up();
    Ok(false)
}
