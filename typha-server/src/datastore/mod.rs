//! Datastores: where the state comes from.
//!
//! A backend implements [`Datastore`]: a consistent listing at a revision, and a watch from a
//! revision, of Calico v3 resources ([`crate::calico::v3`]). Everything that makes a watch
//! correct across compaction, restarts and errors (relist on "too old", resume from the last
//! revision after a transient error, back-off, the sync status) lives once, in
//! [`crate::syncer`], for every backend. Backends: [`embedded`] (in-process, the default),
//! [`etcd`] (Calico's etcd v3 layout) and [`kubernetes`] (Calico's CRDs and Kubernetes' own
//! objects). [`open`] builds the configured one.

pub mod embedded;
pub mod etcd;
pub mod kubernetes;
pub mod open;

use std::sync::Arc;

use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use typha_protocol::model::Revision;

use crate::calico::libcalico::Driver;
use crate::calico::v3::{Resource, ResourceId};

/// A stored object that is not a valid resource (bad JSON in etcd, a manifest that does not
/// parse): counted and logged by the pipeline, and treated as a deletion of that resource.
#[derive(Debug, Clone, PartialEq)]
pub struct Invalid {
    /// The resource it claims to be, when that much is known.
    pub id: Option<ResourceId>,
    /// Why it is invalid.
    pub reason: String,
}

/// One stored object: a resource, or why it is not one. Shared, not copied: the embedded
/// store's objects, its change log, its listings and its watch events hold the same resource.
pub type Item = Result<Arc<Resource>, Invalid>;

/// A consistent listing.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Listing {
    /// The revision the listing is consistent at; watch from the next one.
    pub revision: Revision,
    /// Everything that exists at that revision.
    pub items: Items,
}

/// What a listing holds: items already made, or a backend's stored forms, each made into an
/// item only when it is consumed. A lazy listing of the embedded store never holds every
/// parsed resource at once: the initial load of 100,000 resources held about 150 MB of them,
/// which the allocator kept long after (BENCHMARKS.md, "Third session: memory per KV").
#[derive(Clone, Default)]
pub struct Items(Repr);

#[derive(Clone)]
enum Repr {
    Made(Vec<Item>),
    Lazy(Arc<dyn ItemSource>),
}

impl Default for Repr {
    fn default() -> Self {
        Repr::Made(Vec::new())
    }
}

impl Invalid {
    /// What an [`ItemSource`] gives for an index past its end (a caller's mistake, not bad
    /// input): an invalid item, which the pipeline logs and counts, rather than a panic.
    pub fn past_the_end(i: usize) -> Self {
        Invalid {
            id: None,
            reason: format!("no item {i} in this listing"),
        }
    }
}

/// Items made on demand, for [`Items::lazy`].
pub trait ItemSource: Send + Sync + 'static {
    /// How many.
    fn len(&self) -> usize;
    /// Whether there are none.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The `i`th (`i < len()`), made now.
    fn item(&self, i: usize) -> Item;
}

impl Items {
    /// Items made from `source` one at a time, as they are consumed.
    pub fn lazy(source: Arc<dyn ItemSource>) -> Self {
        Items(Repr::Lazy(source))
    }

    /// How many items.
    pub fn len(&self) -> usize {
        match &self.0 {
            Repr::Made(v) => v.len(),
            Repr::Lazy(s) => s.len(),
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Each item in order (a lazy one made now; each made again on every call).
    pub fn iter(&self) -> Box<dyn Iterator<Item = Item> + Send + '_> {
        match &self.0 {
            Repr::Made(v) => Box::new(v.iter().cloned()),
            Repr::Lazy(s) => Box::new((0..s.len()).map(|i| s.item(i))),
        }
    }
}

impl IntoIterator for Items {
    type Item = Item;
    type IntoIter = Box<dyn Iterator<Item = Item> + Send>;

    fn into_iter(self) -> Self::IntoIter {
        match self.0 {
            Repr::Made(v) => Box::new(v.into_iter()),
            Repr::Lazy(s) => Box::new((0..s.len()).map(move |i| s.item(i))),
        }
    }
}

impl From<Vec<Item>> for Items {
    fn from(v: Vec<Item>) -> Self {
        Items(Repr::Made(v))
    }
}

impl FromIterator<Item> for Items {
    fn from_iter<I: IntoIterator<Item = Item>>(iter: I) -> Self {
        Items(Repr::Made(iter.into_iter().collect()))
    }
}

impl PartialEq for Items {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl std::fmt::Debug for Items {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Repr::Made(v) => f.debug_list().entries(v).finish(),
            Repr::Lazy(s) => write!(f, "Items::lazy({} items)", s.len()),
        }
    }
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

/// Why a datastore operation failed. Cheap to clone: sources are shared.
#[derive(Debug, Clone, thiserror::Error)]
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
    /// The datastore cannot be reached, or the request failed on the way; retrying may help.
    #[error("datastore unavailable: {what}: {source}")]
    Unavailable {
        /// What was being done (`etcd list`, `kubernetes API`).
        what: String,
        /// Why it failed.
        #[source]
        source: Arc<dyn std::error::Error + Send + Sync>,
    },
    /// The datastore answered, and refused (an API server's error status: 403 after an RBAC
    /// change, 500, ...); retrying may help once the cause is fixed.
    #[error("datastore unavailable: {what}: {code} {reason}: {message}")]
    Refused {
        /// What was being done.
        what: String,
        /// The status code.
        code: u16,
        /// The status reason (`Forbidden`).
        reason: String,
        /// The datastore's message.
        message: String,
    },
    /// The datastore answers, but holds nothing this server could serve as the cluster's state
    /// (on Kubernetes: none of Calico's core kinds is installed in the API group read). Like
    /// the others, retried; until it passes the server is not ready. The backend that returns
    /// it says so at `warn`, once per cause, with what to do (the syncer does not repeat it).
    #[error("datastore not usable: {what}")]
    Unusable {
        /// Why, and what to do about it.
        what: String,
    },
}

impl DatastoreError {
    /// `what` failed because of `source`.
    pub fn unavailable(
        what: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        DatastoreError::Unavailable {
            what: what.into(),
            source: Arc::from(source.into()),
        }
    }
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

    /// One cheap request that succeeds only if the datastore answers and lets us read: what
    /// confirms the view is current while the watch is quiet (a quiet watch and a datastore
    /// that went away look the same from the watch alone). By default (an in-process store)
    /// always fine.
    fn probe(&self) -> BoxFuture<'_, Result<(), DatastoreError>> {
        Box::pin(async { Ok(()) })
    }

    /// Which of Calico's datastore drivers Calico's clients expect revisions from, for what
    /// this backend reads: etcd's unless it says otherwise (the embedded store, whose
    /// revisions are etcd-like, per write).
    fn calico_driver(&self) -> Driver {
        Driver::Etcd
    }
}
