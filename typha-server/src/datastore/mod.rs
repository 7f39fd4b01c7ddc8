//! Datastores: where the state comes from.
//!
//! A backend implements [`Datastore`]: a consistent listing at a revision, and a watch from a
//! revision. Everything that makes a watch correct across compaction, restarts and errors
//! (relist on "too old", resume from the last revision after a transient error, back-off, the
//! sync status) lives once, in [`run_syncer`], for every backend. Resources are Calico v3
//! ([`v3`]); [`convert`] turns them into KVs, also once for every backend. Backends:
//! [`embedded`] (in-process, the default), [`etcd`] (Calico's etcd v3 layout) and
//! [`kubernetes`] (Calico's CRDs and Kubernetes' own objects). [`upstream`] is not a backend
//! but another feed: a server fed by another server (tiered fan-out), with KVs already made.

pub mod convert;
pub mod embedded;
pub mod etcd;
pub mod kubernetes;
pub mod upstream;
pub mod v3;

use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::stream::{BoxStream, StreamExt};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};
use typha_protocol::model::{Revision, SyncStatus};

use v3::{Resource, ResourceId};

/// A stored object that is not a valid resource (bad JSON in etcd, a manifest that does not
/// parse): counted and logged by the pipeline, and treated as a deletion of that resource.
#[derive(Debug, Clone, PartialEq)]
pub struct Invalid {
    /// The resource it claims to be, when that much is known.
    pub id: Option<ResourceId>,
    /// Why it is invalid.
    pub reason: String,
}

/// One stored object: a resource, or why it is not one.
pub type Item = Result<Resource, Invalid>;

/// A consistent listing.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Listing {
    /// The revision the listing is consistent at; watch from the next one.
    pub revision: Revision,
    /// Everything that exists at that revision.
    pub items: Vec<Item>,
}

/// One change seen by a watch.
// Events are moved through a channel one at a time; a box per event would cost more than the
// copy it saves.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum WatchEvent {
    /// Created or updated.
    Put {
        /// Revision of the change.
        revision: Revision,
        /// The new state (or why it is invalid).
        item: Item,
    },
    /// Deleted.
    Delete {
        /// Revision of the change.
        revision: Revision,
        /// What was deleted.
        id: ResourceId,
    },
    /// Nothing changed, but the datastore has reached this revision (progress notification,
    /// bookmark): the next watch may start after it.
    Progress(Revision),
}

/// Why a datastore operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DatastoreError {
    /// The requested revision has been compacted away (etcd compaction, Kubernetes 410
    /// Gone): only a new listing can continue.
    #[error("revision {requested} is too old (compacted before {oldest})")]
    TooOld {
        /// What was asked for.
        requested: Revision,
        /// The oldest revision still available.
        oldest: Revision,
    },
    /// The datastore cannot be reached or answered with an error; retrying may help.
    #[error("datastore unavailable: {0}")]
    Unavailable(String),
}

/// A stream of watch events.
pub type WatchStream = BoxStream<'static, Result<WatchEvent, DatastoreError>>;

/// A backend: etcd, Kubernetes, the embedded store, or an upstream server.
pub trait Datastore: Send + Sync + 'static {
    /// A short name for logs (`embedded`, `etcd`, `kubernetes`).
    fn name(&self) -> &'static str;

    /// Everything that exists, consistent at one revision.
    fn list(&self) -> BoxFuture<'_, Result<Listing, DatastoreError>>;

    /// Changes from revision `from` (inclusive) on. Fails with [`DatastoreError::TooOld`]
    /// (immediately or as a stream item) when `from` has been compacted away.
    fn watch(&self, from: Revision) -> BoxFuture<'_, Result<WatchStream, DatastoreError>>;
}

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
    Kvs(Vec<typha_protocol::model::Update>),
}

/// Back-off between failed attempts: doubles from 100 ms to 5 s.
#[derive(Debug, Clone)]
pub struct Backoff {
    next: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self { next: Self::MIN }
    }
}

impl Backoff {
    const MIN: Duration = Duration::from_millis(100);
    const MAX: Duration = Duration::from_secs(5);

    /// The delay before the next attempt (and doubles the one after).
    pub fn next_delay(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(Self::MAX);
        d
    }

    /// Call after a success.
    pub fn reset(&mut self) {
        self.next = Self::MIN;
    }
}

/// Runs list + watch against `ds` until `tx` is closed, sending what it sees.
///
/// Status: WaitForDatastore until the first listing succeeds, ResyncInProgress while a listing
/// is loaded, InSync after. A transient watch error resumes the watch from the last revision
/// seen, without a status change (clients keep their state); "too old" relists, with
/// ResyncInProgress then InSync around it.
pub async fn run_syncer(ds: std::sync::Arc<dyn Datastore>, tx: mpsc::Sender<SyncerEvent>) {
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
