//! The syncer: one list + watch on the datastore, kept correct across everything that breaks
//! it, for every backend.
//!
//! [`run_syncer`] lists, then watches from the listing's revision; a transient watch error
//! resumes from the last revision seen, "too old" (compaction, 410 Gone) relists, and failed
//! attempts back off ([`backoff`]). It records in [`freshness`] when the view was last
//! confirmed current, so an outage is visible (stale) instead of silent. It feeds [`SyncerEvent`]s to the cache's writer, in order.
//! [`upstream`] is the other feed: a server fed by another server (tiered fan-out), whose
//! events are KVs already converted and validated upstream.

pub mod backoff;
pub mod freshness;
pub mod upstream;

use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::StreamExt;
use prometheus::Registry;
use tokio::sync::mpsc;
use tracing::{debug, info, warn};
use typha_protocol::model::{Revision, SyncStatus, Update};

use crate::datastore::{Datastore, DatastoreError, Listing, WatchEvent};
use backoff::Backoff;
use freshness::Freshness;

/// What the syncer feeds the pipeline.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum SyncerEvent {
    /// The syncer's status changed.
    Status(SyncStatus),
    /// A complete listing: it replaces everything known before.
    Resync(Listing),
    /// A change.
    Change(WatchEvent),
    /// Changes that are already KVs (from an upstream server: converted and validated there).
    Kvs(Vec<Update>),
}

/// What a feed is given: where to send what it sees, the metrics registry for metrics of its
/// own, and the record of the view's freshness to keep.
#[derive(Debug)]
pub struct FeedContext<'a> {
    /// The cache writer's channel; the feed runs until it closes.
    pub tx: mpsc::Sender<SyncerEvent>,
    /// The server's metrics registry.
    pub registry: &'a Registry,
    /// When the view was last confirmed current, and the last failure.
    pub freshness: Arc<Freshness>,
}

/// Runs list + watch against `ds` until `tx` is closed, sending what it sees, and recording in
/// `fresh` when the view was confirmed current and when the datastore failed.
///
/// Status: WaitForDatastore until the first listing succeeds, ResyncInProgress while a listing
/// is loaded, InSync after. A transient watch error resumes the watch from the last revision
/// seen, without a status change (clients keep their state); "too old" relists, with
/// ResyncInProgress then InSync around it. A watch that stays quiet for a quarter of the
/// staleness threshold is checked with [`Datastore::probe`]. The first failure after a
/// success is logged at `warn` (but [`DatastoreError::Unusable`], which its backend has said);
/// the retries that follow at `debug` (the staleness monitor says when the view has been
/// unconfirmed for too long, once).
pub async fn run_syncer(
    ds: Arc<dyn Datastore>,
    tx: mpsc::Sender<SyncerEvent>,
    fresh: Arc<Freshness>,
) {
    let probe_every = (fresh.threshold() / 4).max(Duration::from_millis(100));
    let failed = |what: &str, e: &DatastoreError| {
        // An unusable datastore is said at warn by the backend, once per cause, with what to
        // do about it: a second line would only repeat it.
        if fresh.failed(e) && !matches!(e, DatastoreError::Unusable { .. }) {
            warn!(datastore = ds.name(), error = %e, "{what} failed; retrying");
        } else {
            debug!(datastore = ds.name(), error = %e, "{what} failed; retrying");
        }
    };
    let mut backoff = Backoff::default();
    let mut status = SyncStatus::WaitForDatastore;
    if tx.send(SyncerEvent::Status(status)).await.is_err() {
        return;
    }
    'relist: loop {
        let listing = match ds.list().await {
            Ok(l) => l,
            Err(e) => {
                failed("listing", &e);
                tokio::time::sleep(backoff.next_delay()).await;
                continue;
            }
        };
        fresh.confirmed();
        backoff.reset();
        if status != SyncStatus::ResyncInProgress {
            status = SyncStatus::ResyncInProgress;
            if tx.send(SyncerEvent::Status(status)).await.is_err() {
                return;
            }
        }
        let mut revision = listing.revision;
        info!(
            datastore = ds.name(),
            revision = revision.0,
            items = listing.items.len(),
            "listed"
        );
        if tx.send(SyncerEvent::Resync(listing)).await.is_err() {
            return;
        }
        status = SyncStatus::InSync;
        if tx.send(SyncerEvent::Status(status)).await.is_err() {
            return;
        }
        loop {
            let from = Revision(revision.0 + 1);
            let mut stream = match ds.watch(from).await {
                Ok(s) => s,
                Err(DatastoreError::TooOld { .. }) => {
                    info!(
                        datastore = ds.name(),
                        from = from.0,
                        "watch revision too old; relisting"
                    );
                    continue 'relist;
                }
                Err(e) => {
                    failed("watch", &e);
                    tokio::time::sleep(backoff.next_delay()).await;
                    continue;
                }
            };
            fresh.confirmed();
            loop {
                let next = tokio::select! {
                    ev = stream.next() => ev,
                    () = tokio::time::sleep(probe_every) => {
                        // Quiet: ask the datastore directly.
                        match tokio::time::timeout(probe_every.max(PROBE_TIMEOUT), ds.probe()).await {
                            Ok(Ok(())) => fresh.confirmed(),
                            Ok(Err(e)) => failed("probe", &e),
                            Err(_) => failed(
                                "probe",
                                &DatastoreError::unavailable("probe", "timed out"),
                            ),
                        }
                        continue;
                    }
                };
                let Some(ev) = next else { break };
                match ev {
                    Ok(ev) => {
                        backoff.reset();
                        fresh.confirmed();
                        let seen = match &ev {
                            WatchEvent::Put { revision, .. }
                            | WatchEvent::Delete { revision, .. }
                            | WatchEvent::Progress(revision) => *revision,
                        };
                        revision = revision.max(seen);
                        if !matches!(ev, WatchEvent::Progress(_))
                            && tx.send(SyncerEvent::Change(ev)).await.is_err()
                        {
                            return;
                        }
                    }
                    Err(DatastoreError::TooOld { .. }) => {
                        info!(datastore = ds.name(), "watch says too old; relisting");
                        continue 'relist;
                    }
                    Err(e) => {
                        failed("watch", &e);
                        break;
                    }
                }
            }
            if tx.is_closed() {
                return;
            }
            tokio::time::sleep(backoff.next_delay()).await;
        }
    }
}

/// The longest a probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
