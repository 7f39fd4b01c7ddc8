//! The syncer: one list + watch on the datastore, kept correct across everything that breaks
//! it, for every backend.
//!
//! [`run_syncer`] lists, then watches from the listing's revision; a transient watch error
//! resumes from the last revision seen, "too old" (compaction, 410 Gone) relists, and failed
//! attempts back off ([`backoff`]). It feeds [`SyncerEvent`]s to the cache's writer, in order.
//! [`upstream`] is the other feed: a server fed by another server (tiered fan-out), whose
//! events are KVs already converted and validated upstream.

pub mod backoff;
pub mod upstream;

use std::sync::Arc;

use futures_util::stream::StreamExt;
use tokio::sync::mpsc;
use tracing::{debug, info, warn};
use typha_protocol::model::{Revision, SyncStatus, Update};

use crate::datastore::{Datastore, DatastoreError, Listing, WatchEvent};
use backoff::Backoff;

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

/// Runs list + watch against `ds` until `tx` is closed, sending what it sees.
///
/// Status: WaitForDatastore until the first listing succeeds, ResyncInProgress while a listing
/// is loaded, InSync after. A transient watch error resumes the watch from the last revision
/// seen, without a status change (clients keep their state); "too old" relists, with
/// ResyncInProgress then InSync around it.
pub async fn run_syncer(ds: Arc<dyn Datastore>, tx: mpsc::Sender<SyncerEvent>) {
    let mut backoff = Backoff::default();
    let mut status = SyncStatus::WaitForDatastore;
    if tx.send(SyncerEvent::Status(status)).await.is_err() {
        return;
    }
    'relist: loop {
        let listing = match ds.list().await {
            Ok(l) => l,
            Err(e) => {
                let delay = backoff.next_delay();
                warn!(datastore = ds.name(), error = %e, ?delay, "listing failed; retrying");
                tokio::time::sleep(delay).await;
                continue;
            }
        };
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
                    let delay = backoff.next_delay();
                    debug!(datastore = ds.name(), error = %e, ?delay, "watch failed; retrying");
                    tokio::time::sleep(delay).await;
                    continue;
                }
            };
            while let Some(ev) = stream.next().await {
                match ev {
                    Ok(ev) => {
                        backoff.reset();
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
                        debug!(datastore = ds.name(), error = %e, "watch broke; resuming");
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
