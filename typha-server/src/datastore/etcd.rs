//! The etcd v3 datastore, in Calico's layout: each resource is JSON under
//! `/calico/resources/v3/projectcalico.org/<plural>/[<namespace>/]<name>` ([`PREFIX`]), except
//! IPAM blocks and block affinities, which Calico's IPAM keeps in its own model under
//! `/calico/ipam/v2/` ([`IPAM_PREFIX`], read by `ipam`).
//!
//! [`Etcd::list`] reads one key range, from [`IPAM_PREFIX`] to the end of [`PREFIX`] (the
//! range holds nothing else Calico writes: `/calico/bgp/`, `/calico/felix/` and `/calico/v1/`
//! sort outside it), in pages of [`PAGE_SIZE`] keys, every page pinned to the revision of the
//! first, so the listing is consistent however long it takes; IPAM handles, one per pod and
//! never read, are left out of it as a range of their own. [`Etcd::watch`] watches the same
//! range from a revision with progress notifications: one watch, so one revision order and no
//! gap between the two layouts. A watch whose start was compacted away is
//! [`DatastoreError::TooOld`], anything else that goes wrong (a refused or lost connection, a
//! timeout) is [`DatastoreError::Unavailable`], and `run_syncer` resumes.
//! A key outside the layout or a value that is not a resource is an [`Invalid`] item, never an
//! error; keys of kinds we do not serve (BGP peers and the like share the prefix, IPAM handles)
//! are skipped.
//!
//! Nothing waits forever: every request has a deadline ([`REQUEST_TIMEOUT`]), HTTP/2
//! keep-alive breaks a watch on an etcd that stopped answering, and a failed request drops
//! the client so the next one starts from a fresh connection whatever state the old one was
//! left in. A restarted etcd is found again on the next attempt.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{
    Certificate, Client, ConnectOptions, EventType, GetOptions, Identity, TlsOptions, WatchOptions,
    WatchResponse,
};
use futures_util::future::BoxFuture;
use futures_util::stream::StreamExt;
use tracing::debug;
use typha_protocol::model::Revision;

use self::ipam::{HANDLE_PREFIX, IpamKey};
pub use self::ipam::{IPAM_PREFIX, IpamError};
use super::{
    Datastore, DatastoreError, Invalid, Item, ItemSource, Items, Listing, WatchEvent, WatchStream,
};
use crate::calico::v3::{API_VERSION, Kind, Resource, ResourceId};

mod ipam;

/// Where Calico keeps v3 resources in etcd.
pub const PREFIX: &str = "/calico/resources/v3/projectcalico.org/";

/// Keys per page of a listing: big enough that a 100,000-resource cluster lists in 200
/// requests, small enough that no single response is large.
pub const PAGE_SIZE: i64 = 500;

/// How long a connection attempt may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long one request (a page of a listing, opening a watch) may take.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// HTTP/2 pings on the connection: a watch on a peer that vanished without closing the
/// connection fails within interval + timeout instead of waiting forever.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(5);

/// Largest response accepted (tonic's default is 4 MiB; a page of 500 large policies or a
/// watch catching up can be more).
const MAX_MESSAGE_BYTES: usize = 256 << 20;

/// TLS to etcd: the CA that signs etcd's certificate, and optionally a client certificate
/// (for etcd's `--client-cert-auth`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdTls {
    /// CA certificate(s), PEM (`TYPHA_ETCDCAFILE`).
    pub ca_file: PathBuf,
    /// Client certificate and key; `None`: server authentication only.
    pub client: Option<ClientCert>,
}

/// A client certificate and its key, PEM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCert {
    /// Certificate chain (`TYPHA_ETCDCERTFILE`).
    pub cert_file: PathBuf,
    /// Private key (`TYPHA_ETCDKEYFILE`).
    pub key_file: PathBuf,
}

/// Why the etcd client cannot be set up: the configuration, never the state of etcd.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EtcdError {
    /// An endpoint that is not an `http://` or `https://` URL, or TLS settings that do not fit
    /// the endpoints.
    #[error("{0}")]
    Endpoints(String),
    /// A certificate or key file that cannot be read or holds no PEM of the right kind.
    #[error("{}: {source}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// A file that cannot be read, as the message says it.
#[derive(Debug, thiserror::Error)]
#[error("cannot read: {0}")]
struct ReadFailed(#[source] std::io::Error);

/// Reads a PEM file holding at least one certificate.
pub fn read_certificates(path: &Path) -> Result<Vec<u8>, EtcdError> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    let bytes = read(path)?;
    let mut n = 0;
    for c in CertificateDer::pem_slice_iter(&bytes) {
        c.map_err(|e| file_error(path, format!("not a PEM certificate: {e}")))?;
        n += 1;
    }
    if n == 0 {
        return Err(file_error(path, "no PEM certificate in it"));
    }
    Ok(bytes)
}

/// Reads a PEM file holding a private key.
pub fn read_private_key(path: &Path) -> Result<Vec<u8>, EtcdError> {
    use rustls_pki_types::PrivateKeyDer;
    use rustls_pki_types::pem::PemObject;
    let bytes = read(path)?;
    PrivateKeyDer::from_pem_slice(&bytes)
        .map_err(|e| file_error(path, format!("no PEM private key in it: {e}")))?;
    Ok(bytes)
}

fn read(path: &Path) -> Result<Vec<u8>, EtcdError> {
    std::fs::read(path).map_err(|e| file_error(path, ReadFailed(e)))
}

fn file_error(
    path: &Path,
    source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
) -> EtcdError {
    EtcdError::File {
        path: path.to_owned(),
        source: source.into(),
    }
}

/// Checks the endpoints and that the TLS settings fit them: all `http://` without TLS, or all
/// `https://` with a CA.
pub fn check_endpoints(endpoints: &[String], tls: bool) -> Result<(), EtcdError> {
    if endpoints.is_empty() {
        return Err(EtcdError::Endpoints("no endpoint given".into()));
    }
    let mut schemes = Vec::new();
    for e in endpoints {
        let (scheme, rest) = e
            .split_once("://")
            .ok_or_else(|| EtcdError::Endpoints(format!("{e:?} is not an http(s):// URL")))?;
        if !matches!(scheme, "http" | "https") {
            return Err(EtcdError::Endpoints(format!(
                "{e:?}: scheme {scheme:?} (expected http or https)"
            )));
        }
        let authority = rest.split('/').next().unwrap_or_default();
        if authority.is_empty() || e.chars().any(char::is_whitespace) {
            return Err(EtcdError::Endpoints(format!("{e:?} is not a URL")));
        }
        schemes.push(scheme);
    }
    let https = schemes.iter().filter(|s| **s == "https").count();
    if https != 0 && https != schemes.len() {
        return Err(EtcdError::Endpoints(
            "mixes http:// and https:// endpoints".into(),
        ));
    }
    match (https > 0, tls) {
        (true, false) => Err(EtcdError::Endpoints(
            "https:// endpoints need a CA certificate".into(),
        )),
        (false, true) => Err(EtcdError::Endpoints(
            "TLS files are set but the endpoints are http://; use https:// URLs".into(),
        )),
        _ => Ok(()),
    }
}

/// The etcd key of a resource in the v3 layout (under [`PREFIX`]). IPAM blocks and affinities
/// as Calico's IPAM writes them live elsewhere: see [`key_value_of`].
pub fn key_of(id: &ResourceId) -> String {
    match &id.namespace {
        Some(ns) => format!("{PREFIX}{}/{ns}/{}", id.kind.plural(), id.name),
        None => format!("{PREFIX}{}/{}", id.kind.plural(), id.name),
    }
}

/// The key and value Calico stores for a resource in etcd mode: an IPAM block or block
/// affinity in the IPAM model under [`IPAM_PREFIX`] (the resource's name is not stored; it is
/// derived from the key as Calico's Kubernetes backend names them), anything else as v3 JSON
/// at [`key_of`]. For writers that stand in for Calico: tests, loadtest.
pub fn key_value_of(r: &Resource) -> Result<(String, Vec<u8>), IpamError> {
    if let Some(kv) = ipam::key_value(r) {
        return kv;
    }
    let mut r = r.clone();
    // Calico does not store the version: etcd's revision is the version.
    r.metadata.resource_version = None;
    Ok((key_of(&r.id()), r.to_json().to_string().into_bytes()))
}

/// The key range the backend lists and watches: from [`IPAM_PREFIX`] to the end of
/// [`PREFIX`] (start, end).
pub fn watched_range() -> (Vec<u8>, Vec<u8>) {
    (IPAM_PREFIX.as_bytes().to_vec(), range_end(PREFIX))
}

/// The ranges a listing reads, in key order: [`watched_range`] without the IPAM handles.
fn listed_ranges() -> [(Vec<u8>, Vec<u8>); 2] {
    let (start, end) = watched_range();
    [
        (start, HANDLE_PREFIX.as_bytes().to_vec()),
        (range_end(HANDLE_PREFIX), end),
    ]
}

/// What a key names.
#[derive(Debug, Clone, PartialEq, Eq)]
enum KeyMeaning {
    /// A resource of a kind we serve, as v3 JSON.
    Resource(ResourceId),
    /// An IPAM block or affinity, in Calico's IPAM model.
    Ipam(IpamKey),
    /// In the range, but nothing we serve: skipped.
    Other,
    /// Not in the layout.
    Bad(String),
}

impl KeyMeaning {
    /// The resource a key names, if any.
    fn id(&self) -> Option<ResourceId> {
        match self {
            KeyMeaning::Resource(id) => Some(id.clone()),
            KeyMeaning::Ipam(k) => Some(k.id()),
            KeyMeaning::Other | KeyMeaning::Bad(_) => None,
        }
    }
}

fn parse_key(key: &[u8]) -> KeyMeaning {
    let Ok(key) = std::str::from_utf8(key) else {
        return KeyMeaning::Bad(format!("key {} is not UTF-8", String::from_utf8_lossy(key)));
    };
    if let Some(rest) = key.strip_prefix(IPAM_PREFIX) {
        return match ipam::parse_key(key, rest) {
            Ok(Some(k)) => KeyMeaning::Ipam(k),
            Ok(None) => KeyMeaning::Other,
            Err(reason) => KeyMeaning::Bad(reason),
        };
    }
    let Some(rest) = key.strip_prefix(PREFIX) else {
        // Between the two prefixes, or outside: not Calico's data we serve.
        return KeyMeaning::Other;
    };
    let parts: Vec<&str> = rest.split('/').collect();
    let Some(kind) = parts.first().and_then(|p| Kind::from_plural(p)) else {
        return KeyMeaning::Other;
    };
    // Calico never stores IPAM blocks as v3 resources in etcd (only in the IPAM model), so
    // nothing of Calico's is here: left alone like other kinds we do not serve. (It does
    // store BlockAffinity resources here, written through its v3 API: those are read.)
    // Nor Kubernetes' own Services and EndpointSlices, which only Calico's Kubernetes driver
    // reads (from the Kubernetes API), or ClusterNetworkPolicies, which Calico reads only in
    // Kubernetes datastore mode.
    if matches!(
        kind,
        Kind::IpamBlock
            | Kind::KubernetesService
            | Kind::KubernetesEndpointSlice
            | Kind::KubernetesClusterNetworkPolicy
    ) {
        return KeyMeaning::Other;
    }
    let bad = || {
        KeyMeaning::Bad(format!(
            "key {key:?} is not {PREFIX}{}/{}<name>",
            kind.plural(),
            if kind.is_namespaced() {
                "<namespace>/"
            } else {
                ""
            }
        ))
    };
    match (kind.is_namespaced(), parts.as_slice()) {
        (true, [_, ns, name]) if !ns.is_empty() && !name.is_empty() => {
            KeyMeaning::Resource(ResourceId::namespaced(kind, *ns, *name))
        }
        (false, [_, name]) if !name.is_empty() => {
            KeyMeaning::Resource(ResourceId::global(kind, *name))
        }
        _ => bad(),
    }
}

/// The item a key/value pair holds; `None` for keys of kinds we do not serve.
fn item_from_kv(key: &[u8], value: &[u8], mod_revision: i64) -> Option<Item> {
    match parse_key(key) {
        KeyMeaning::Resource(id) => Some(resource_from_json(id, value, mod_revision)),
        KeyMeaning::Ipam(k) => Some(ipam::item(&k, value, mod_revision)),
        KeyMeaning::Other => None,
        KeyMeaning::Bad(reason) => Some(Err(Invalid { id: None, reason })),
    }
}

/// What the server makes of a key and value read from etcd (the fuzz target `etcd_kv`).
#[cfg(feature = "fuzzing")]
pub fn fuzz_item(key: &[u8], value: &[u8], mod_revision: i64) -> Option<Item> {
    item_from_kv(key, value, mod_revision)
}

/// A listed key and value as etcd sent them.
struct RawKv {
    key: Box<[u8]>,
    value: Box<[u8]>,
    mod_revision: i64,
}

/// A listing's keys and values, each parsed when it is taken. Holds only keys that
/// [`item_from_kv`] makes an item of.
struct RawListing(Vec<RawKv>);

impl ItemSource for RawListing {
    fn len(&self) -> usize {
        self.0.len()
    }

    fn item(&self, i: usize) -> Item {
        let Some(kv) = self.0.get(i) else {
            return Err(Invalid::past_the_end(i));
        };
        // `list_all` kept only the keys that make an item.
        item_from_kv(&kv.key, &kv.value, kv.mod_revision).unwrap_or_else(|| {
            Err(Invalid {
                id: None,
                reason: "listed key is not a resource".into(),
            })
        })
    }
}

/// A v3 resource's JSON value.
///
/// The key is authoritative for what the resource is: a value that leaves out its kind, name
/// or namespace gets them from the key, and one that names a different resource is invalid.
fn resource_from_json(id: ResourceId, value: &[u8], mod_revision: i64) -> Item {
    let invalid = |reason: String| {
        Err(Invalid {
            id: Some(id.clone()),
            reason,
        })
    };
    let mut doc: serde_json::Value = match serde_json::from_slice(value) {
        Ok(v) => v,
        Err(e) => return invalid(format!("value is not JSON: {e}")),
    };
    let Some(obj) = doc.as_object_mut() else {
        return invalid("value is not a JSON object".into());
    };
    obj.entry("apiVersion")
        .or_insert_with(|| API_VERSION.into());
    obj.entry("kind").or_insert_with(|| id.kind.as_str().into());
    let meta = obj
        .entry("metadata")
        .or_insert_with(|| serde_json::Value::Object(Default::default()));
    if let Some(meta) = meta.as_object_mut() {
        meta.entry("name").or_insert_with(|| id.name.clone().into());
        if let Some(ns) = &id.namespace {
            meta.entry("namespace").or_insert_with(|| ns.clone().into());
        }
    }
    let mut resource = match Resource::from_json(doc) {
        Ok(r) => r,
        Err(e) => return invalid(e.to_string()),
    };
    if resource.id() != id {
        return invalid(format!(
            "the value is {}, not what its key names",
            resource.id()
        ));
    }
    // As Calico does: the resource's version is the revision that last changed it.
    resource.metadata.resource_version = Some(mod_revision.to_string());
    Ok(Arc::new(resource))
}

fn revision(r: i64) -> Revision {
    Revision(u64::try_from(r).unwrap_or(0))
}

/// The end of the key range that starts with `prefix`.
fn range_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // Only for a prefix of all 0xff bytes: "to the end of the keyspace".
    vec![0]
}

fn unavailable(
    what: &str,
    e: impl Into<Box<dyn std::error::Error + Send + Sync>>,
) -> DatastoreError {
    DatastoreError::unavailable(format!("etcd {what}"), e)
}

/// The etcd v3 backend.
pub struct Etcd {
    endpoints: Vec<String>,
    options: ConnectOptions,
    /// The client in use; `None` after a failure, so the next request connects afresh.
    client: Mutex<Option<Client>>,
    page_size: i64,
}

impl std::fmt::Debug for Etcd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Etcd")
            .field("endpoints", &self.endpoints)
            .finish_non_exhaustive()
    }
}

impl Etcd {
    /// A backend for these endpoints (`http://host:port` or, with `tls`, `https://...`).
    ///
    /// Reads the TLS files and checks the endpoints; it does not contact etcd (a datastore
    /// that is down at start is waited for, not a configuration error).
    pub async fn connect(endpoints: &[String], tls: Option<&EtcdTls>) -> Result<Self, EtcdError> {
        check_endpoints(endpoints, tls.is_some())?;
        let mut options = ConnectOptions::new()
            .with_connect_timeout(CONNECT_TIMEOUT)
            .with_keep_alive(KEEPALIVE_INTERVAL, KEEPALIVE_TIMEOUT)
            // Without a leader etcd cannot make progress: fail the watch rather than hang.
            .with_require_leader(true);
        if let Some(tls) = tls {
            let mut t = TlsOptions::new()
                .ca_certificate(Certificate::from_pem(read_certificates(&tls.ca_file)?));
            if let Some(c) = &tls.client {
                t = t.identity(Identity::from_pem(
                    read_certificates(&c.cert_file)?,
                    read_private_key(&c.key_file)?,
                ));
            }
            options = options.with_tls(t);
        }
        let this = Self {
            endpoints: endpoints.to_vec(),
            options,
            client: Mutex::new(None),
            page_size: PAGE_SIZE,
        };
        // Building the client checks the URLs and the TLS material without any I/O.
        match tokio::time::timeout(CONNECT_TIMEOUT, this.new_client()).await {
            Ok(Ok(c)) => *this.slot() = Some(c),
            Ok(Err(e)) => return Err(EtcdError::Endpoints(e.to_string())),
            Err(_) => {}
        }
        Ok(this)
    }

    /// Lists `n` keys per page instead of [`PAGE_SIZE`] (at least 1).
    pub fn with_page_size(mut self, n: i64) -> Self {
        self.page_size = n.max(1);
        self
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<Client>> {
        // The slot holds a cheap handle, replaced whole; a poisoned lock still holds a usable
        // (or empty) one.
        self.client.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn new_client(&self) -> Result<Client, etcd_client::Error> {
        Client::connect(&self.endpoints, Some(self.options.clone())).await
    }

    /// The current client, or a new one.
    async fn client(&self) -> Result<Client, DatastoreError> {
        if let Some(c) = self.slot().clone() {
            return Ok(c);
        }
        let c = tokio::time::timeout(CONNECT_TIMEOUT, self.new_client())
            .await
            .map_err(|_| unavailable("connect", "timed out"))?
            .map_err(|e| unavailable("connect", e))?;
        *self.slot() = Some(c.clone());
        Ok(c)
    }

    /// Forgets the client after a failure: the next request connects afresh.
    fn failed(
        &self,
        what: &str,
        e: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> DatastoreError {
        *self.slot() = None;
        unavailable(what, e)
    }

    /// Runs one request with the deadline.
    async fn request<T>(
        &self,
        what: &str,
        f: impl Future<Output = Result<T, etcd_client::Error>>,
    ) -> Result<T, DatastoreError> {
        match tokio::time::timeout(REQUEST_TIMEOUT, f).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(self.failed(what, e)),
            Err(_) => Err(self.failed(what, "timed out")),
        }
    }

    async fn list_all(&self) -> Result<Listing, DatastoreError> {
        let mut kv = self
            .client()
            .await?
            .kv_client()
            .max_decoding_message_size(MAX_MESSAGE_BYTES);
        let mut at = 0i64;
        let mut items = Vec::new();
        for (start, end) in listed_ranges() {
            let mut from = start;
            loop {
                let mut opts = GetOptions::new()
                    .with_range(end.clone())
                    .with_limit(self.page_size);
                if at > 0 {
                    opts = opts.with_revision(at);
                }
                let resp = self
                    .request("list", kv.get(from.clone(), Some(opts)))
                    .await?;
                if at == 0 {
                    at = resp.header().map_or(0, |h| h.revision());
                    if at <= 0 {
                        return Err(unavailable("list", "response without a revision"));
                    }
                }
                // Kept as etcd sent them, and parsed when the pipeline takes each (see
                // `Items`): the parsed listing of a large cluster was the server's peak.
                items.extend(
                    resp.kvs()
                        .iter()
                        .filter(|kv| !matches!(parse_key(kv.key()), KeyMeaning::Other))
                        .map(|kv| RawKv {
                            key: kv.key().into(),
                            value: kv.value().into(),
                            mod_revision: kv.mod_revision(),
                        }),
                );
                match resp.kvs().last() {
                    Some(last) if resp.more() => {
                        // The next page starts just after the last key of this one.
                        from = last.key().to_vec();
                        from.push(0);
                    }
                    _ => break,
                }
            }
        }
        Ok(Listing {
            revision: revision(at),
            items: Items::lazy(Arc::new(RawListing(items))),
        })
    }

    async fn open_watch(&self, from: Revision) -> Result<WatchStream, DatastoreError> {
        let start = i64::try_from(from.0).unwrap_or(i64::MAX);
        let mut watch = self
            .client()
            .await?
            .watch_client()
            .max_decoding_message_size(MAX_MESSAGE_BYTES);
        let (key, end) = watched_range();
        let opts = WatchOptions::new()
            .with_range(end)
            .with_start_revision(start)
            .with_progress_notify();
        let stream = self.request("watch", watch.watch(key, Some(opts))).await?;
        let events = futures_util::stream::unfold(Some(stream), move |state| async move {
            // The stream (which also holds the request side: dropping it ends the watch).
            let mut stream = state?;
            loop {
                let resp = match stream.next().await {
                    Some(Ok(resp)) => resp,
                    Some(Err(e)) => {
                        return Some((vec![Err(unavailable("watch", e))], None));
                    }
                    None => {
                        return Some((vec![Err(unavailable("watch", "stream ended"))], None));
                    }
                };
                match watch_response(&resp, from) {
                    Response::Events(evs) if evs.is_empty() => continue,
                    Response::Events(evs) => {
                        return Some((evs.into_iter().map(Ok).collect(), Some(stream)));
                    }
                    Response::End(e) => return Some((vec![Err(e)], None)),
                }
            }
        })
        .flat_map(futures_util::stream::iter);
        Ok(Box::pin(events) as WatchStream)
    }
}

/// What one watch response means.
enum Response {
    /// Changes, or a progress notification (or nothing, for the "created" response).
    Events(Vec<WatchEvent>),
    /// The watch is over.
    End(DatastoreError),
}

fn watch_response(resp: &WatchResponse, from: Revision) -> Response {
    if resp.compact_revision() > 0 {
        return Response::End(DatastoreError::TooOld {
            requested: from,
            oldest: revision(resp.compact_revision()),
        });
    }
    if resp.canceled() {
        return Response::End(unavailable(
            "watch",
            format!("canceled by etcd: {}", resp.cancel_reason()),
        ));
    }
    if resp.created() {
        // Its header is etcd's revision now, not how far the watch has delivered: not progress.
        return Response::Events(Vec::new());
    }
    if resp.events().is_empty() {
        return Response::Events(
            resp.header()
                .map(|h| WatchEvent::Progress(revision(h.revision())))
                .into_iter()
                .collect(),
        );
    }
    let mut out = Vec::with_capacity(resp.events().len());
    for ev in resp.events() {
        let Some(kv) = ev.kv() else { continue };
        let rev = revision(kv.mod_revision());
        match ev.event_type() {
            EventType::Put => {
                if let Some(item) = item_from_kv(kv.key(), kv.value(), kv.mod_revision()) {
                    out.push(WatchEvent::Put {
                        revision: rev,
                        item,
                    });
                }
            }
            EventType::Delete => match parse_key(kv.key()).id() {
                Some(id) => out.push(WatchEvent::Delete { revision: rev, id }),
                // Nothing was known under a key outside the layout: nothing to delete.
                None => {
                    debug!(key = %String::from_utf8_lossy(kv.key()), "deletion outside the layout ignored");
                }
            },
        }
    }
    if out.is_empty() {
        // Only keys we skip changed; the watch has still moved past them. (Not the header's
        // revision: a watch catching up gets etcd's current revision there, ahead of its events.)
        if let Some(last) = resp
            .events()
            .iter()
            .filter_map(|e| e.kv())
            .map(|kv| kv.mod_revision())
            .max()
        {
            out.push(WatchEvent::Progress(revision(last)));
        }
    }
    Response::Events(out)
}

impl Datastore for Etcd {
    fn name(&self) -> &'static str {
        "etcd"
    }

    fn list(&self) -> BoxFuture<'_, Result<Listing, DatastoreError>> {
        Box::pin(self.list_all())
    }

    fn watch(&self, from: Revision) -> BoxFuture<'_, Result<WatchStream, DatastoreError>> {
        Box::pin(self.open_watch(from))
    }

    fn probe(&self) -> BoxFuture<'_, Result<(), DatastoreError>> {
        Box::pin(async {
            // A linearizable read of one key (absent or not): etcd answers only with a quorum.
            let mut kv = self.client().await?.kv_client();
            self.request("probe", kv.get(PROBE_KEY, None)).await?;
            Ok(())
        })
    }
}

/// The key the probe reads: under Calico's prefix, so an etcd user limited to it may read it.
const PROBE_KEY: &str = "/calico/typha-probe";

#[cfg(test)]
mod tests;
