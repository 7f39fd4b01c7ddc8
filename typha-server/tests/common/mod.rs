//! Test support: a server on loopback over the embedded datastore, realistic resources, and
//! `Peer`, a raw protocol client that applies what it receives and checks every invariant
//! (contiguous sequence numbers, digests, snapshot counts). It is not the typha-client
//! library: it lets tests misbehave on purpose (never read, never pong, send garbage).
#![allow(dead_code, unreachable_pub)]

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::net::TcpStream;
use typha_protocol::digest::{KeyHash, StateDigest};
use typha_protocol::frame::{FrameDecoder, FrameEncoder, Limits};
use typha_protocol::handshake::{ClientHandshake, ClientOffer, Session};
use typha_protocol::message::{
    Cursor, Epoch, Features, Goodbye, Message, Pong, Resume, Seq, SnapshotScope, Staleness,
};
use typha_protocol::model::{EncodedValue, KeyPath, SyncStatus};
use typha_server::calico::v3::Resource;
use typha_server::config::Config;
use typha_server::datastore::embedded::Embedded;
use typha_server::server::{RunningServer, start};

pub mod calico_raw;
pub mod etcd;
pub mod helm;
pub mod k8s_fixture;
pub mod kube;

pub const WAIT: Duration = Duration::from_secs(20);

/// A server over a fresh embedded store.
pub async fn server(cfg: Config) -> (RunningServer, Embedded) {
    let store = Embedded::new();
    let srv = start(cfg, Arc::new(store.clone()))
        .await
        .expect("server starts");
    (srv, store)
}

/// Realistic resources: `nodes` nodes with `pods` workload endpoints each, namespaces, profiles,
/// policies, a pool, blocks.
pub fn cluster(nodes: usize, pods: usize) -> Vec<Resource> {
    typha_test_support::sample::cluster(&typha_test_support::sample::Spec {
        nodes,
        pods_per_node: pods,
        ..Default::default()
    })
}

/// The combined digest a correct client must reach for `store`'s content (conversion of every
/// resource, then the digest): computed independently of the server's cache.
pub fn expected_digest(store: &Embedded) -> (u64, usize) {
    let mut d = StateDigest::new();
    let mut n = 0;
    for r in store.resources() {
        for (k, v) in typha_server::calico::convert::convert(&r).expect("valid resource") {
            d.insert(&k.to_string(), EncodedValue::encode(&v).as_bytes());
            n += 1;
        }
    }
    (d.combined(), n)
}

/// The combined digest (and KV count) a correct client must reach for these resources: the
/// same fold as [`expected_digest`], for resources from any datastore.
pub fn digest_of<'a>(resources: impl IntoIterator<Item = &'a Resource>) -> (u64, usize) {
    let mut d = StateDigest::new();
    let mut n = 0;
    for r in resources {
        for (k, v) in typha_server::calico::convert::convert(r).expect("valid resource") {
            d.insert(&k.to_string(), EncodedValue::encode(&v).as_bytes());
            n += 1;
        }
    }
    (d.combined(), n)
}

pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// rustls client settings for tests.
pub fn tls_client(
    ca_pem: &str,
    client: Option<&typha_server::pki::Issued>,
) -> Arc<rustls::ClientConfig> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let b = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    Arc::new(match client {
        Some(c) => b
            .with_client_auth_cert(
                CertificateDer::pem_slice_iter(c.cert_pem.as_bytes())
                    .map(|c| c.unwrap())
                    .collect(),
                PrivateKeyDer::from_pem_slice(c.key_pem.as_bytes()).unwrap(),
            )
            .unwrap(),
        None => b.with_no_client_auth(),
    })
}

#[derive(Debug, Default)]
struct Snap {
    scope: Option<SnapshotScope>,
    seen: BTreeSet<KeyPath>,
    expected: u64,
}

/// A raw protocol client that keeps the state it is sent and checks it.
pub struct Peer {
    r: ReadHalf<Box<dyn Io>>,
    w: WriteHalf<Box<dyn Io>>,
    dec: FrameDecoder,
    enc: FrameEncoder,
    buf: BytesMut,
    pub session: Option<Session>,
    pub state: BTreeMap<KeyPath, EncodedValue>,
    pub digest: StateDigest,
    pub seq: Seq,
    pub epoch: Epoch,
    pub status: Option<SyncStatus>,
    pub statuses: Vec<SyncStatus>,
    pub auto_pong: bool,
    pub goodbye: Option<Goodbye>,
    pub frames: u64,
    pub delta_frames: u64,
    pub updates_seen: Vec<(KeyPath, Option<EncodedValue>)>,
    pub first_after_hello: Option<&'static str>,
    /// What the server last said of its datastore view.
    pub staleness: Option<Staleness>,
    snap: Option<Snap>,
}

impl Peer {
    pub async fn connect(addr: SocketAddr) -> Peer {
        let tcp = TcpStream::connect(addr).await.expect("connect");
        Self::over(Box::new(tcp))
    }

    pub async fn connect_tls(
        addr: SocketAddr,
        cfg: Arc<rustls::ClientConfig>,
    ) -> std::io::Result<Peer> {
        let tcp = TcpStream::connect(addr).await?;
        let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
        let tls = tokio_rustls::TlsConnector::from(cfg)
            .connect(name, tcp)
            .await?;
        Ok(Self::over(Box::new(tls)))
    }

    pub fn over(io: Box<dyn Io>) -> Peer {
        let (r, w) = tokio::io::split(io);
        Peer {
            r,
            w,
            dec: FrameDecoder::new(Limits::CLIENT_INBOUND),
            enc: FrameEncoder::uncompressed(),
            buf: BytesMut::new(),
            session: None,
            state: BTreeMap::new(),
            digest: StateDigest::new(),
            seq: Seq(0),
            epoch: Epoch(0),
            status: None,
            statuses: Vec::new(),
            auto_pong: true,
            goodbye: None,
            frames: 0,
            delta_frames: 0,
            updates_seen: Vec::new(),
            first_after_hello: None,
            staleness: None,
            snap: None,
        }
    }

    pub async fn send_raw(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.w.write_all(bytes).await?;
        self.w.flush().await
    }

    pub async fn send(&mut self, m: &Message) -> std::io::Result<()> {
        let b = self.enc.encode(m).unwrap();
        self.send_raw(&b).await
    }

    /// Hello and the server's answer.
    pub async fn hello(&mut self, offer: ClientOffer) -> Result<Session, String> {
        let mut hs = ClientHandshake::new(offer, std::time::Instant::now());
        self.send(&Message::ClientHello(hs.hello()))
            .await
            .map_err(|e| e.to_string())?;
        let m = self.recv().await?;
        let s = hs
            .handle_message(m, std::time::Instant::now())
            .map_err(|e| e.to_string())?;
        self.epoch = s.epoch;
        self.session = Some(s.clone());
        Ok(s)
    }

    /// A default hello for `host`, optionally resuming from this peer's state.
    pub fn offer(host: &str, resume: Option<Resume>) -> ClientOffer {
        ClientOffer {
            resume,
            ..ClientOffer::new(host)
        }
    }

    /// What a client of protocol version 1 offers: no [`Features::OPAQUE_KINDS`]. Such a
    /// client refuses a whole message holding a key of a later kind; this peer checks that
    /// none arrives.
    pub fn offer_v1(host: &str, resume: Option<Resume>) -> ClientOffer {
        let mut o = Self::offer(host, resume);
        o.features = Features(o.features.0 & !Features::OPAQUE_KINDS.0);
        o
    }

    /// A key a version 1 client would refuse, sent to one.
    fn check_view(&self, key: &KeyPath) -> Result<(), String> {
        let v1_only = self
            .session
            .as_ref()
            .is_some_and(|s| !s.features.contains(Features::OPAQUE_KINDS));
        if v1_only && !key.in_v1() {
            return Err(format!("{key} sent to a version 1 client"));
        }
        Ok(())
    }

    /// Where this peer is, for a resume.
    pub fn resume(&self) -> Resume {
        Resume {
            cursor: Some(Cursor {
                epoch: self.epoch,
                seq: self.seq,
            }),
            digest: Some(self.digest.clone()),
        }
    }

    /// The next message (EOF and errors are `Err`).
    pub async fn recv(&mut self) -> Result<Message, String> {
        self.recv_within(WAIT).await
    }

    pub async fn recv_within(&mut self, d: Duration) -> Result<Message, String> {
        let deadline = tokio::time::Instant::now() + d;
        loop {
            match self.dec.decode(&mut self.buf) {
                Ok(Some(m)) => {
                    self.frames += 1;
                    return Ok(m);
                }
                Ok(None) => {}
                Err(e) => return Err(format!("decode: {e}")),
            }
            match tokio::time::timeout_at(deadline, self.r.read_buf(&mut self.buf)).await {
                Err(_) => return Err("timeout".into()),
                Ok(Ok(0)) => return Err("eof".into()),
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return Err(format!("read: {e}")),
            }
        }
    }

    /// Applies a message, checking invariants; answers pings.
    pub async fn apply(&mut self, m: Message) -> Result<(), String> {
        if let Message::Staleness(st) = m {
            // Not data: how current the server's view is (right after the hello, and on change).
            self.staleness = Some(st);
            return Ok(());
        }
        // Pings may come at any moment; the first *data* message counts.
        if self.first_after_hello.is_none() && !matches!(m, Message::Ping(_)) {
            self.first_after_hello = Some(match &m {
                Message::SnapshotBegin(b) if b.scope == SnapshotScope::Full => "snapshot",
                Message::SnapshotBegin(_) => "digest",
                Message::Deltas(_) => "deltas",
                _ => "other",
            });
        }
        match m {
            Message::SnapshotBegin(b) => {
                if self.snap.is_some() {
                    return Err("nested snapshot".into());
                }
                self.snap = Some(Snap {
                    scope: Some(b.scope),
                    seen: BTreeSet::new(),
                    expected: b.kvs,
                });
            }
            Message::SnapshotChunk(c) => {
                for u in &c.updates {
                    self.check_view(&u.key)?;
                }
                let Some(snap) = self.snap.as_mut() else {
                    return Err("chunk outside a snapshot".into());
                };
                for u in c.updates {
                    let v = u.value.ok_or("snapshot deletion")?;
                    let old = self.state.insert(u.key.clone(), v.clone());
                    self.digest.apply(
                        u.key.as_str(),
                        old.as_ref().map(|o| o.as_bytes()),
                        Some(v.as_bytes()),
                    );
                    snap.seen.insert(u.key);
                }
            }
            Message::SnapshotEnd(e) => {
                let snap = self.snap.take().ok_or("end outside a snapshot")?;
                if snap.seen.len() as u64 != snap.expected {
                    return Err(format!(
                        "snapshot announced {} KVs, sent {}",
                        snap.expected,
                        snap.seen.len()
                    ));
                }
                let in_scope = |k: &KeyPath| match &snap.scope {
                    Some(SnapshotScope::Buckets(set)) => {
                        set.contains(KeyHash::of(k.as_str()).bucket())
                    }
                    _ => true,
                };
                let stale: Vec<KeyPath> = self
                    .state
                    .keys()
                    .filter(|k| in_scope(k) && !snap.seen.contains(*k))
                    .cloned()
                    .collect();
                for k in stale {
                    if let Some(old) = self.state.remove(&k) {
                        self.digest.remove(k.as_str(), old.as_bytes());
                    }
                }
                self.seq = e.seq;
                if self.digest.combined() != e.digest {
                    return Err(format!(
                        "digest after snapshot {:x} != server's {:x}",
                        self.digest.combined(),
                        e.digest
                    ));
                }
            }
            Message::Deltas(d) => {
                if d.from_seq != self.seq {
                    return Err(format!(
                        "gap: at {} but deltas from {}",
                        self.seq, d.from_seq
                    ));
                }
                self.delta_frames += 1;
                for u in d.updates {
                    self.check_view(&u.key)?;
                    let old = match &u.value {
                        Some(v) => self.state.insert(u.key.clone(), v.clone()),
                        None => self.state.remove(&u.key),
                    };
                    self.digest.apply(
                        u.key.as_str(),
                        old.as_ref().map(|o| o.as_bytes()),
                        u.value.as_ref().map(|v| v.as_bytes()),
                    );
                    self.updates_seen.push((u.key, u.value));
                }
                self.seq = d.seq;
                if self.digest.combined() != d.digest {
                    return Err(format!(
                        "digest at {} is {:x}, server says {:x}",
                        d.seq,
                        self.digest.combined(),
                        d.digest
                    ));
                }
            }
            Message::SyncStatus(s) => {
                self.status = Some(s);
                self.statuses.push(s);
            }
            Message::Ping(p) => {
                if self.auto_pong {
                    let _ = self
                        .send(&Message::Pong(Pong {
                            ping_timestamp_micros: p.timestamp_micros,
                        }))
                        .await;
                }
            }
            Message::Goodbye(g) => {
                self.goodbye = Some(g.clone());
                return Err(format!("goodbye: {} ({})", g.reason, g.message));
            }
            other => return Err(format!("unexpected {other:?}")),
        }
        Ok(())
    }

    /// Receives and applies until `done` holds.
    pub async fn until(&mut self, what: &str, done: impl Fn(&Peer) -> bool) {
        self.until_within(what, WAIT, done).await;
    }

    /// [`Peer::until`] with another deadline, for what waits on a slower party (the API
    /// server deleting a CRD's objects).
    pub async fn until_within(&mut self, what: &str, wait: Duration, done: impl Fn(&Peer) -> bool) {
        let deadline = tokio::time::Instant::now() + wait;
        while !done(self) {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let m = self
                .recv_within(left)
                .await
                .unwrap_or_else(|e| panic!("waiting for {what}: {e}"));
            self.apply(m)
                .await
                .unwrap_or_else(|e| panic!("waiting for {what}: {e}"));
        }
    }

    /// Receives and applies until in sync at the server's latest breadcrumb.
    pub async fn sync_to(&mut self, srv: &RunningServer) {
        self.until("in sync with the server", |p| {
            let latest = srv.cache.latest();
            p.snap.is_none() && p.seq == latest.seq && p.status == Some(SyncStatus::InSync)
        })
        .await;
    }

    /// Reads until the connection ends; returns the goodbye, if one came.
    pub async fn until_closed(&mut self) -> Option<Goodbye> {
        loop {
            match self.recv().await {
                Ok(Message::Goodbye(g)) => return Some(g),
                Ok(m) => {
                    let _ = self.apply(m).await;
                }
                Err(_) => return self.goodbye.clone(),
            }
        }
    }
}

/// A sample's value from the server's /metrics text (the first sample named `name`, with any
/// labels given inside `name`, e.g. `typha_resumes_total{kind="deltas"}`).
pub fn metric(srv: &RunningServer, name: &str) -> f64 {
    let text = typha_service::metrics::encode(&srv.registry).unwrap();
    text.lines()
        .find_map(|l| {
            l.strip_prefix(name)
                .and_then(|rest| rest.strip_prefix(' '))
                .and_then(|v| v.split(' ').next()?.parse().ok())
        })
        .unwrap_or_else(|| panic!("no sample {name} in\n{text}"))
}

/// Waits until the server's cache has applied everything the store holds.
pub async fn settle(srv: &RunningServer, store: &Embedded) {
    let want = store.revision();
    eventually("the cache to catch up with the store", || {
        srv.cache.latest().revision >= want
    })
    .await;
}

/// Waits until `f` holds (polling), or panics naming `what`.
pub async fn eventually(what: &str, f: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !f() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}
