//! The embedded datastore: an in-process, revisioned store of v3 resources that needs nothing
//! installed. It is the default backend: seeded from a directory of YAML/JSON manifests in
//! Calico's v3 format and kept in step with it ([`DirSource`]), and driven directly by tests and
//! loadtest through [`Embedded::put`], [`Embedded::delete`] and [`Embedded::bulk_load`], or
//! from another process through its write API ([`api`], `TYPHA_EMBEDDEDAPIADDR`).
//!
//! Like etcd, every change gets the next revision and the store keeps a bounded history of
//! changes for watchers; a watcher asking for a revision older than the history gets
//! [`DatastoreError::TooOld`] and relists. Writes that change nothing do not bump the revision.
//!
//! Like etcd too, it keeps each resource serialized (`Stored`: its JSON manifest form,
//! compressed), not as parsed structs, which were most of the server's memory on this
//! datastore; a resource is parsed back only when it is listed (at start and on a relist) or
//! sent to a watcher, once per change.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use futures_util::future::BoxFuture;
use tokio::sync::watch;
use tracing::{info, warn};
use typha_protocol::model::Revision;

use super::{
    Datastore, DatastoreError, Invalid, Item, ItemSource, Items, Listing, WatchEvent, WatchStream,
};
use crate::calico::v3::{Resource, ResourceId, yaml_documents};
use form::{Dict, FIRST_TRAINING, Form, RETRAIN_GROWTH};

/// Changes kept for watchers by default.
pub const DEFAULT_HISTORY: usize = 10_000;

#[derive(Debug)]
struct Store {
    revision: u64,
    /// Shared with the log and listings: each version of a resource exists once.
    objects: BTreeMap<ResourceId, Stored>,
    /// (revision, change), oldest first.
    log: VecDeque<(u64, Change)>,
    /// Watches from revisions at or below this are too old.
    compacted: u64,
    max_log: usize,
    /// The dictionary new forms are compressed with, once the store has trained one.
    dict: Option<Arc<Dict>>,
    /// When the store holds this many resources, it trains a new dictionary.
    next_training: usize,
}

impl Store {
    /// Trains a dictionary on the resources held now and recompresses them all with it (the
    /// log's latest versions too, which share their forms with the objects). Under the lock:
    /// it happens a few times in a store's life, the first while the initial load is written.
    fn train(&mut self) {
        self.next_training = self.objects.len().saturating_mul(RETRAIN_GROWTH);
        let Some(dict) = form::train(self.objects.values().map(|st| &st.form)) else {
            return;
        };
        for st in self.objects.values_mut() {
            if let Some(form) = st.form.recompressed(&dict) {
                st.form = form;
            }
        }
        let objects = &self.objects;
        for (rev, change) in self.log.iter_mut() {
            if let Change::Put(id, st) = change
                && let Some(now) = objects.get(id).filter(|now| now.revision == *rev)
            {
                *st = now.clone();
            }
        }
        self.dict = Some(dict);
    }
}

#[derive(Debug, Clone)]
enum Change {
    Put(ResourceId, Stored),
    Delete(ResourceId),
}

/// A resource as the store keeps it: its JSON manifest form without `resourceVersion` (which
/// is the revision that wrote it, kept beside), compressed ([`form`]), shared by the objects,
/// the log and listings. Two writes of the same resource are the same change exactly when
/// their JSON is equal; where it came from is not part of the change.
#[derive(Debug, Clone)]
struct Stored {
    revision: u64,
    form: Form,
    origin: Origin,
}

/// Which manifest file of a [`DirSource`] defines a resource, kept with the resource by the
/// store ([`Origin::NONE`] for one written only through [`Embedded::put`] and friends). It
/// replaces a map from every resource's id to its file, which was a tenth of the live heap
/// of a server on a large manifest directory (BENCHMARKS.md, "The live heap at idle").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Origin(u32);

impl Origin {
    /// Not from a manifest file.
    pub const NONE: Origin = Origin(0);
}

impl Stored {
    /// The resource again, with the revision that wrote it as its `resourceVersion`. Reading
    /// what [`Form::of`] wrote cannot fail unless the two disagree (a bug the tests look
    /// for); if it ever did, the pipeline would count and log it, naming the resource.
    fn resource(&self, id: &ResourceId) -> Item {
        let parsed = self.form.json().and_then(|json| {
            serde_json::from_slice(&json)
                .map_err(|e| e.to_string())
                .and_then(|v| Resource::from_json(v).map_err(|e| e.to_string()))
        });
        match parsed {
            Ok(mut r) => {
                r.metadata.resource_version = Some(self.revision.to_string());
                Ok(Arc::new(r))
            }
            Err(e) => Err(Invalid {
                id: Some(id.clone()),
                reason: format!("embedded store cannot read back what it stored: {e}"),
            }),
        }
    }
}

/// A listing's stored forms (shared with the store), each parsed when it is taken.
struct StoredListing(Vec<(ResourceId, Stored)>);

impl StoredListing {
    fn iter(&self) -> impl Iterator<Item = Item> + '_ {
        self.0.iter().map(|(id, st)| st.resource(id))
    }
}

impl ItemSource for StoredListing {
    fn len(&self) -> usize {
        self.0.len()
    }

    fn item(&self, i: usize) -> Item {
        match self.0.get(i) {
            Some((id, st)) => st.resource(id),
            None => Err(super::Invalid::past_the_end(i)),
        }
    }
}

/// A change asked for: a resource to write, or one to delete. Short-lived (one batch of
/// writes); a box per resource would cost an allocation per write and save nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
enum Write {
    Put(Resource),
    Delete(ResourceId),
}

/// The embedded store. Cheap to clone: clones share the store.
#[derive(Debug, Clone)]
pub struct Embedded {
    store: Arc<Mutex<Store>>,
    latest: watch::Sender<u64>,
}

impl Default for Embedded {
    fn default() -> Self {
        Self::new()
    }
}

impl Embedded {
    /// An empty store keeping [`DEFAULT_HISTORY`] changes.
    pub fn new() -> Self {
        Self::with_history(DEFAULT_HISTORY)
    }

    /// An empty store keeping `max_log` changes for watchers.
    pub fn with_history(max_log: usize) -> Self {
        Self {
            store: Arc::new(Mutex::new(Store {
                revision: 0,
                objects: BTreeMap::new(),
                log: VecDeque::new(),
                compacted: 0,
                max_log: max_log.max(1),
                dict: None,
                next_training: FIRST_TRAINING,
            })),
            latest: watch::channel(0).0,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Store> {
        // A panic while holding this lock leaves the store consistent (every mutation is a
        // single insert/remove followed by a log push), so poisoning is not a reason to stop.
        self.store.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Creates or replaces a resource. Returns the new revision, or the current one if the
    /// resource is unchanged.
    pub fn put(&self, resource: Resource) -> Revision {
        self.apply(vec![Write::Put(resource)])
    }

    /// Deletes a resource. Returns the new revision, or the current one if it did not exist.
    pub fn delete(&self, id: &ResourceId) -> Revision {
        self.apply(vec![Write::Delete(id.clone())])
    }

    /// Creates or replaces a resource defined by `origin`, which it is then recorded as
    /// coming from (without a new revision when only that changed). Returns whether the
    /// resource changed.
    fn put_from(&self, resource: Resource, origin: Origin) -> bool {
        self.apply_from(vec![Write::Put(resource)], Some(origin)).1 > 0
    }

    /// Deletes those of `ids` that still come from `origin`, in one write; how many it did.
    fn delete_from(&self, ids: Vec<ResourceId>, origin: Origin) -> usize {
        if ids.is_empty() {
            return 0;
        }
        self.apply_from(ids.into_iter().map(Write::Delete).collect(), Some(origin))
            .1
    }

    /// Where the stored resource `id` came from, if it is stored.
    fn origin_of(&self, id: &ResourceId) -> Option<Origin> {
        self.lock().objects.get(id).map(|st| st.origin)
    }

    /// The resources that come from any of `origins`, by origin: one scan of the store (for
    /// a manifest file that changed, or all those that went in one directory scan, which is
    /// rare).
    fn ids_by_origin(&self, origins: &HashSet<Origin>) -> HashMap<Origin, Vec<ResourceId>> {
        let mut by = HashMap::<Origin, Vec<ResourceId>>::new();
        for (id, st) in self.lock().objects.iter() {
            if origins.contains(&st.origin) {
                by.entry(st.origin).or_default().push(id.clone());
            }
        }
        by
    }

    /// Writes many resources; each change gets its own revision, as separate writes would.
    pub fn bulk_load(&self, resources: impl IntoIterator<Item = Resource>) -> Revision {
        self.apply(resources.into_iter().map(Write::Put).collect())
    }

    /// Writes many resources in order, each with its own revision, under one lock (nothing
    /// reads a half-applied batch); the new revision and how many changed something.
    pub fn put_many(&self, resources: impl IntoIterator<Item = Resource>) -> (Revision, usize) {
        self.apply_counted(resources.into_iter().map(Write::Put).collect())
    }

    /// Deletes many resources, each with its own revision; missing ones are skipped. The new
    /// revision and how many existed.
    pub fn delete_many(&self, ids: impl IntoIterator<Item = ResourceId>) -> (Revision, usize) {
        self.apply_counted(ids.into_iter().map(Write::Delete).collect())
    }

    /// The current revision.
    pub fn revision(&self) -> Revision {
        Revision(self.lock().revision)
    }

    /// A copy of every resource (the stored ones that cannot be read back, which would be a
    /// bug, are left out).
    pub fn resources(&self) -> Vec<Resource> {
        let stored: Vec<(ResourceId, Stored)> = self
            .lock()
            .objects
            .iter()
            .map(|(id, s)| (id.clone(), s.clone()))
            .collect();
        StoredListing(stored)
            .iter()
            .filter_map(Result::ok)
            .map(Arc::unwrap_or_clone)
            .collect()
    }

    /// How many resources are stored.
    pub fn len(&self) -> usize {
        self.lock().objects.len()
    }

    /// Whether the store is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops the whole change history, as an etcd compaction would: current watchers and any
    /// watch from an older revision get "too old" and relist. For tests.
    pub fn compact(&self) {
        let mut s = self.lock();
        s.compacted = s.revision;
        s.log.clear();
        drop(s);
        // Wake watchers so they notice.
        self.latest.send_modify(|_| {});
    }

    fn apply(&self, changes: Vec<Write>) -> Revision {
        self.apply_counted(changes).0
    }

    /// Applies changes in order; the new revision and how many changed something.
    fn apply_counted(&self, changes: Vec<Write>) -> (Revision, usize) {
        self.apply_from(changes, None)
    }

    /// [`apply_counted`](Self::apply_counted), recording what it writes as coming from
    /// `origin`; with `None`, a replaced resource keeps where it came from and a new one comes
    /// from nowhere ([`Origin::NONE`]). A deletion with an origin is skipped unless the
    /// resource comes from it (checked under the same lock as the write).
    fn apply_from(&self, changes: Vec<Write>, origin: Option<Origin>) -> (Revision, usize) {
        // Serialize outside the lock (with the dictionary of the moment: a form made with one
        // that is replaced meanwhile stays readable, and compares by its JSON).
        let dict = self.lock().dict.clone();
        let changes: Vec<(ResourceId, Option<Form>)> = changes
            .into_iter()
            .map(|w| match w {
                Write::Put(mut r) => {
                    // As Calico's client library writes it (a policy's types filled in).
                    crate::calico::convert::write_defaults(&mut r);
                    (r.id(), Some(Form::of(&r, dict.as_ref())))
                }
                Write::Delete(id) => (id, None),
            })
            .collect();
        drop(dict);
        let mut s = self.lock();
        let mut count = 0;
        for (id, form) in changes {
            let old = s.objects.get_mut(&id);
            let was = old.as_ref().map(|old| old.origin);
            let changed = match (&form, old) {
                // Equal apart from the resourceVersion we stamp: not a change, though it may
                // now come from elsewhere.
                (Some(form), Some(old)) if old.form == *form => {
                    if let Some(o) = origin {
                        old.origin = o;
                    }
                    false
                }
                (Some(_), _) => true,
                (None, Some(old)) => origin.is_none_or(|o| o == old.origin),
                (None, None) => false,
            };
            if !changed {
                continue;
            }
            count += 1;
            s.revision += 1;
            let revision = s.revision;
            match form {
                Some(form) => {
                    let stored = Stored {
                        revision,
                        form,
                        origin: origin.or(was).unwrap_or(Origin::NONE),
                    };
                    s.objects.insert(id.clone(), stored.clone());
                    s.log.push_back((revision, Change::Put(id, stored)));
                }
                None => {
                    s.objects.remove(&id);
                    s.log.push_back((revision, Change::Delete(id)));
                }
            }
        }
        if s.objects.len() >= s.next_training {
            s.train();
        }
        while s.log.len() > s.max_log {
            if let Some((rev, _)) = s.log.pop_front() {
                s.compacted = rev;
            }
        }
        let rev = s.revision;
        drop(s);
        self.latest.send_if_modified(|v| {
            let changed = *v != rev;
            *v = rev;
            changed
        });
        (Revision(rev), count)
    }

    /// Changes after revision `after`, or "too old".
    fn changes_after(&self, after: u64) -> Result<Vec<WatchEvent>, DatastoreError> {
        let s = self.lock();
        if after < s.compacted {
            return Err(DatastoreError::TooOld {
                requested: Revision(after + 1),
                oldest: Revision(s.compacted + 1),
            });
        }
        // The log is ordered by revision: find the start by binary search, not by a scan of
        // the whole log on every wake-up (that was most of the per-update cost).
        let start = s.log.partition_point(|(rev, _)| *rev <= after);
        let changes: Vec<(u64, Change)> = s.log.range(start..).cloned().collect();
        drop(s);
        // Parsed outside the lock.
        Ok(changes
            .into_iter()
            .map(|(rev, c)| match c {
                Change::Put(id, stored) => WatchEvent::Put {
                    revision: Revision(rev),
                    item: stored.resource(&id),
                },
                Change::Delete(id) => WatchEvent::Delete {
                    revision: Revision(rev),
                    id,
                },
            })
            .collect())
    }
}

impl Datastore for Embedded {
    fn name(&self) -> &'static str {
        "embedded"
    }

    fn list(&self) -> BoxFuture<'_, Result<Listing, DatastoreError>> {
        let s = self.lock();
        let revision = Revision(s.revision);
        let stored: Vec<(ResourceId, Stored)> = s
            .objects
            .iter()
            .map(|(id, st)| (id.clone(), st.clone()))
            .collect();
        drop(s);
        // Parsed outside the lock, so writers are not held up, and lazily: each resource when
        // the pipeline takes it, converted and dropped before the next is parsed (the stored
        // forms listed here are shared with the store). Not on a blocking thread: that let a
        // client connect during the first listing, and its statuses went WaitForDatastore,
        // ResyncInProgress, then again WaitForDatastore, ResyncInProgress, InSync
        // (`tests/client.rs`); why needs looking at before the listing moves.
        let items = Items::lazy(Arc::new(StoredListing(stored)));
        Box::pin(async move { Ok(Listing { revision, items }) })
    }

    fn watch(&self, from: Revision) -> BoxFuture<'_, Result<WatchStream, DatastoreError>> {
        let this = self.clone();
        Box::pin(async move {
            let after = from.0.saturating_sub(1);
            // Fail fast, before handing out a stream, when `from` is already gone.
            this.changes_after(after)?;
            let rx = this.latest.subscribe();
            let stream = futures_util::stream::unfold(
                (this, rx, after, VecDeque::new(), false),
                |(this, mut rx, mut after, mut pending, done): (
                    Embedded,
                    _,
                    u64,
                    VecDeque<WatchEvent>,
                    bool,
                )| async move {
                    if done {
                        return None;
                    }
                    loop {
                        if let Some(ev) = pending.pop_front() {
                            return Some((Ok(ev), (this, rx, after, pending, false)));
                        }
                        // Mark the current version seen *before* reading the log: a write that
                        // lands after the read bumps the version again, so the wait below
                        // cannot miss it.
                        let _ = rx.borrow_and_update();
                        match this.changes_after(after) {
                            Err(e) => return Some((Err(e), (this, rx, after, pending, true))),
                            Ok(evs) if !evs.is_empty() => {
                                if let Some(
                                    WatchEvent::Put { revision, .. }
                                    | WatchEvent::Delete { revision, .. },
                                ) = evs.last()
                                {
                                    after = revision.0;
                                }
                                pending.extend(evs);
                            }
                            Ok(_) => {
                                // Nothing new: wait for the next write (or the store to go).
                                if rx.changed().await.is_err() {
                                    return None;
                                }
                            }
                        }
                    }
                },
            );
            Ok(Box::pin(stream) as WatchStream)
        })
    }
}

/// Keeps an [`Embedded`] store in step with a directory of manifests.
///
/// Every `*.yaml`, `*.yml` and `*.json` file under the directory (recursively) holds one or more
/// resources (`---`-separated documents, or a `List`). A file that is added, edited or removed
/// is reflected on the next scan. A file that does not parse, or a resource in it that is
/// invalid (it does not parse or does not convert to KVs), is logged once at warn with the file,
/// the resource and the reason, and changes nothing: the store keeps what it had from that
/// file, and every other file and resource is unaffected.
#[derive(Debug)]
pub struct DirSource {
    dir: PathBuf,
    store: Embedded,
    files: HashMap<Arc<Path>, FileState>,
    /// The origin the next new file gets. Which file defines each resource (the first one
    /// wins; duplicates are warned about) is kept by the store with the resource
    /// ([`Origin`]); nothing per resource is kept here.
    next_origin: u32,
    /// Warnings already logged, so a bad file is reported once, not every scan.
    warned: HashSet<String>,
}

#[derive(Debug, Clone)]
struct FileState {
    modified: Option<SystemTime>,
    len: u64,
    content: u64,
    /// What the store records as this file's.
    origin: Origin,
}

/// What one scan did (for logs and tests).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScanReport {
    /// Files read (new or changed).
    pub files_read: usize,
    /// Resources written (new or changed).
    pub puts: usize,
    /// Resources deleted.
    pub deletes: usize,
    /// Problems logged during this scan (each only the first time it is seen).
    pub new_warnings: Vec<String>,
}

impl DirSource {
    /// A source for `dir` feeding `store`. Call [`DirSource::scan`] to load it.
    pub fn new(dir: impl Into<PathBuf>, store: Embedded) -> Self {
        Self {
            dir: dir.into(),
            store,
            files: HashMap::new(),
            next_origin: 1,
            warned: HashSet::new(),
        }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Scans the directory once and applies what changed.
    pub fn scan(&mut self) -> ScanReport {
        let mut report = ScanReport::default();
        let mut paths = Vec::new();
        if let Err(e) = collect_files(&self.dir, &mut paths, 0) {
            self.warn_once(
                &mut report,
                format!("cannot read manifest directory {}: {e}", self.dir.display()),
            );
        }
        paths.sort();
        // A file that went no longer holds on to what it defined: another file may define it
        // now (a file renamed), and that is not a duplicate.
        let seen: HashSet<PathBuf> = paths.iter().cloned().collect();
        for path in paths {
            let Ok(meta) = std::fs::metadata(&path) else {
                continue;
            };
            let modified = meta.modified().ok();
            if self
                .files
                .get(path.as_path())
                .is_some_and(|old| old.modified == modified && old.len == meta.len())
            {
                continue;
            }
            let text = match std::fs::read_to_string(&path) {
                Ok(t) => t,
                Err(e) => {
                    self.warn_once(&mut report, format!("{}: cannot read: {e}", path.display()));
                    continue;
                }
            };
            report.files_read += 1;
            let content = xxhash_of(&text);
            if let Some(old) = self
                .files
                .get_mut(path.as_path())
                .filter(|old| old.content == content)
            {
                old.modified = modified;
                old.len = meta.len();
                continue;
            }
            self.load_file(
                &path,
                &text,
                (modified, meta.len(), content),
                &seen,
                &mut report,
            );
        }
        // Files that disappeared: their resources go (one scan of the store for all of them,
        // one write per file).
        let gone: HashSet<Origin> = {
            let paths: Vec<Arc<Path>> = self
                .files
                .keys()
                .filter(|p| !seen.contains(&***p))
                .cloned()
                .collect();
            paths
                .iter()
                .filter_map(|p| self.files.remove(p))
                .map(|file| file.origin)
                .collect()
        };
        if !gone.is_empty() {
            for (origin, ids) in self.store.ids_by_origin(&gone) {
                report.deletes += self.store.delete_from(ids, origin);
            }
        }
        if report.puts + report.deletes > 0 {
            info!(dir = %self.dir.display(), puts = report.puts, deletes = report.deletes, revision = self.store.revision().0, "manifests applied");
        }
        report
    }

    fn load_file(
        &mut self,
        path: &Path,
        text: &str,
        (modified, len, content): (Option<SystemTime>, u64, u64),
        seen: &HashSet<PathBuf>,
        report: &mut ScanReport,
    ) {
        let (shared, origin, previous): (Arc<Path>, Origin, BTreeSet<ResourceId>) =
            match self.files.get_key_value(path) {
                Some((p, file)) => (
                    Arc::clone(p),
                    file.origin,
                    self.store
                        .ids_by_origin(&HashSet::from([file.origin]))
                        .remove(&file.origin)
                        .unwrap_or_default()
                        .into_iter()
                        .collect(),
                ),
                None => {
                    let origin = Origin(self.next_origin);
                    self.next_origin = self.next_origin.wrapping_add(1).max(1);
                    (Arc::from(path), origin, BTreeSet::new())
                }
            };
        let docs = match yaml_documents(text) {
            Ok(d) => d,
            Err(e) => {
                // The whole file is unreadable: keep everything it defined before.
                self.warn_once(
                    report,
                    format!("{}: invalid YAML, file ignored: {e}", path.display()),
                );
                return;
            }
        };
        let mut ids = BTreeSet::new();
        let mut puts = Vec::new();
        for (i, doc) in docs.into_iter().enumerate() {
            let claimed = claimed_id(&doc);
            let resource = Resource::from_json(doc)
                .map_err(|e| e.to_string())
                .and_then(|r| crate::calico::convert::accept_write(r).map_err(|e| e.to_string()));
            match resource {
                Ok(r) => {
                    let id = r.id();
                    if let Some(owner) = self
                        .store
                        .origin_of(&id)
                        .filter(|o| *o != origin && *o != Origin::NONE)
                        .and_then(|o| self.path_of(o))
                        .filter(|p| seen.contains(&**p))
                    {
                        self.warn_once(
                            report,
                            format!(
                                "{}: {id} is already defined in {}; ignored",
                                path.display(),
                                owner.display()
                            ),
                        );
                        continue;
                    }
                    ids.insert(id.clone());
                    puts.push(r);
                }
                Err(reason) => {
                    let what = claimed
                        .as_ref()
                        .map_or_else(|| format!("document {}", i + 1), |id| id.to_string());
                    self.warn_once(
                        report,
                        format!("{}: {what}: invalid, ignored: {reason}", path.display()),
                    );
                    // Changes nothing: a previous good version from this file stays.
                    if let Some(id) = claimed.filter(|id| previous.contains(id)) {
                        ids.insert(id);
                    }
                }
            }
        }
        for r in puts {
            if self.store.put_from(r, origin) {
                report.puts += 1;
            }
        }
        report.deletes += self
            .store
            .delete_from(previous.difference(&ids).cloned().collect(), origin);
        self.files.insert(
            shared,
            FileState {
                modified,
                len,
                content,
                origin,
            },
        );
    }

    /// The file whose resources the store records as coming from `origin`, if it is still
    /// known (for messages).
    fn path_of(&self, origin: Origin) -> Option<Arc<Path>> {
        self.files
            .iter()
            .find(|(_, f)| f.origin == origin)
            .map(|(p, _)| Arc::clone(p))
    }

    fn warn_once(&mut self, report: &mut ScanReport, msg: String) {
        if self.warned.insert(msg.clone()) {
            warn!("{msg}");
            report.new_warnings.push(msg);
        }
    }

    /// Scans every `interval`, forever (spawn it; abort the task to stop).
    pub async fn run(mut self, interval: Duration) {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            // Reading files blocks; manifest directories are small, but keep the runtime
            // responsive all the same.
            self = match tokio::task::spawn_blocking(move || {
                self.scan();
                self
            })
            .await
            {
                Ok(s) => s,
                Err(_) => return,
            };
        }
    }
}

fn xxhash_of(text: &str) -> u64 {
    typha_protocol::digest::KeyHash::of(text).entry(b"")
}

/// The id a raw document claims, for messages about documents that do not parse.
pub(crate) fn claimed_id(doc: &serde_json::Value) -> Option<ResourceId> {
    let kind = crate::calico::v3::Kind::from_name(doc.get("kind")?.as_str()?)?;
    let meta = doc.get("metadata")?;
    let name = meta.get("name")?.as_str()?.to_owned();
    let namespace = kind.is_namespaced().then(|| {
        meta.get("namespace")
            .and_then(|n| n.as_str())
            .filter(|n| !n.is_empty())
            .unwrap_or("default")
            .to_owned()
    });
    Some(ResourceId {
        kind,
        namespace,
        name,
    })
}

fn collect_files(dir: &Path, out: &mut Vec<PathBuf>, depth: usize) -> std::io::Result<()> {
    if depth > 8 {
        return Ok(());
    }
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let name = entry.file_name();
        if name.to_string_lossy().starts_with('.') {
            continue;
        }
        if entry.file_type()?.is_dir() {
            collect_files(&path, out, depth + 1)?;
        } else if matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml" | "json")
        ) {
            out.push(path);
        }
    }
    Ok(())
}

pub mod api;
mod form;

#[cfg(test)]
mod tests;
