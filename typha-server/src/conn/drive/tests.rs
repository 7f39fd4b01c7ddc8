//! The connection's timers, for both protocols from one table of cases, on a paused clock:
//! each case runs the real connection task (`task::run` for ours, `calico::run` for Calico's,
//! the stream loop above for both) over an in-memory stream against a test client of that
//! protocol, and says how the connection must end and when. No socket, no wall clock: a
//! minute of pings takes no time and cannot race a loaded machine. (End-to-end tests over
//! real TLS and TCP stay in `tests/`.)

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::time::Instant;
use typha_protocol::calico::StreamDecoder;
use typha_protocol::calico::gob::Limits as GobLimits;
use typha_protocol::calico::messages::{
    ClientHello as CalicoHello, Message as CalicoMessage, Pong as CalicoPong, Side,
    encode as calico_encode,
};
use typha_protocol::frame::{FrameDecoder, FrameEncoder, Limits as FrameLimits};
use typha_protocol::handshake::{ClientHandshake, ClientOffer, ServerOffer};
use typha_protocol::message::{Epoch, GoodbyeReason, Message, Pong, Seq};
use typha_protocol::model::{Revision, SyncStatus};
use typha_protocol::sample::Rng;

use crate::cache::writer::CacheWriter;
use crate::cache::{Cache, CacheConfig};
use crate::calico::v3::Resource;
use crate::conn::limit::Slots;
use crate::conn::registry::{ConnRegistry, Registered};
use crate::conn::{Close, ConnConfig, ConnError, Ctx, calico, task};
use crate::datastore::{Item, Listing, WatchEvent};
use crate::governor::share::Limits;
use crate::metrics::{DropReason, Metrics};
use crate::syncer::SyncerEvent;
use crate::syncer::freshness::Freshness;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Proto {
    Ours,
    Calico,
}

const BOTH: [Proto; 2] = [Proto::Ours, Proto::Calico];

/// A server with a cache in sync, and what feeds it.
struct Rig {
    ctx: Arc<Ctx>,
    writer: CacheWriter,
    rev: u64,
    rng: Rng,
    /// The last connection made.
    conn: Option<Arc<Registered>>,
}

fn netset(name: &str, nets: Vec<String>) -> Resource {
    Resource::from_json(serde_json::json!({
        "apiVersion": "projectcalico.org/v3", "kind": "GlobalNetworkSet",
        "metadata": {"name": name}, "spec": {"nets": nets}
    }))
    .unwrap()
}

impl Rig {
    fn new(cfg: ConnConfig) -> Rig {
        let metrics = Metrics::unregistered();
        let (mut writer, cache) =
            CacheWriter::new(CacheConfig::default(), Epoch(7), metrics.clone());
        writer.handle(SyncerEvent::Resync(Listing {
            revision: Revision(1),
            items: vec![Ok::<_, crate::datastore::Invalid>(
                netset("first", vec!["10.0.0.0/8".into()]).into(),
            )]
            .into_iter()
            .collect::<Vec<Item>>()
            .into(),
        }));
        writer.handle(SyncerEvent::Status(SyncStatus::InSync));
        writer.flush();
        let slots = Slots::new(
            Limits {
                all: 100,
                ours: 100,
            },
            metrics,
        );
        // What wakes Calico connections (the server runs it beside the writer).
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(crate::cache::herald::run(cache.clone()));
        }
        let ctx = Arc::new(Ctx::new(
            cache,
            cfg,
            ServerOffer::new(Epoch(7)),
            Vec::new(),
            Freshness::new(Duration::from_secs(3600)),
            ConnRegistry::new(slots),
        ));
        Rig {
            ctx,
            writer,
            rev: 1,
            rng: Rng::new(11),
            conn: None,
        }
    }

    fn cache(&self) -> &Arc<Cache> {
        &self.ctx.cache
    }

    /// Publishes `n` breadcrumbs, each a set of 40 random addresses (about 1 KB that does not
    /// compress away).
    fn publish(&mut self, n: usize) {
        for i in 0..n {
            self.rev += 1;
            let nets = (0..40)
                .map(|_| {
                    let a = self.rng.next_u64();
                    format!("10.{}.{}.{}/32", a % 256, (a >> 8) % 256, (a >> 16) % 256)
                })
                .collect();
            self.writer.handle(SyncerEvent::Change(WatchEvent::Put {
                revision: Revision(self.rev),
                item: Ok(netset(&format!("set-{}-{i}", self.rev), nets).into()),
            }));
            self.writer.flush();
        }
    }

    /// Publishes one resource, as a breadcrumb of its own.
    fn put(&mut self, doc: serde_json::Value) {
        self.rev += 1;
        self.writer.handle(SyncerEvent::Change(WatchEvent::Put {
            revision: Revision(self.rev),
            item: Ok(Resource::from_json(doc).unwrap().into()),
        }));
        self.writer.flush();
    }

    /// Starts the connection task of `proto` over an in-memory stream with `window` bytes of
    /// buffer each way; returns the client's end, the connection and the task.
    fn connect(
        &mut self,
        proto: Proto,
        window: usize,
    ) -> (
        DuplexStream,
        Arc<Registered>,
        tokio::task::JoinHandle<Result<(), ConnError>>,
    ) {
        let (client, server) = tokio::io::duplex(window);
        let peer: SocketAddr = "192.0.2.1:4000".parse().unwrap();
        let info = Arc::new(self.ctx.registry.register(
            peer,
            Instant::now(),
            self.cache().metrics.clone(),
        ));
        let close = info.closable();
        self.conn = Some(info.clone());
        let (ctx, conn) = (self.ctx.clone(), info.clone());
        let task = tokio::spawn(async move {
            match proto {
                Proto::Ours => task::run(server, &ctx, close, &conn, BytesMut::new()).await,
                Proto::Calico => calico::run(server, &ctx, close, &conn, BytesMut::new()).await,
            }
        });
        (client, info, task)
    }
}

/// What a test client does with the pings it reads.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pongs {
    Answer,
    Ignore,
}

/// A test client of either protocol: says hello, reads (at a pace), answers pings (or not).
struct Client {
    io: DuplexStream,
    proto: Proto,
    /// The syncer type a Calico client asks for.
    syncer: &'static str,
    buf: BytesMut,
    ours: FrameDecoder,
    calico: StreamDecoder,
    /// Messages read, by kind.
    seen: Vec<String>,
    closed: bool,
}

impl Client {
    fn new(io: DuplexStream, proto: Proto) -> Client {
        Client {
            io,
            proto,
            syncer: "felix",
            buf: BytesMut::new(),
            ours: FrameDecoder::new(FrameLimits::CLIENT_INBOUND),
            calico: StreamDecoder::new(GobLimits::CLIENT_INBOUND),
            seen: Vec::new(),
            closed: false,
        }
    }

    async fn hello(&mut self, name: &str) {
        let bytes = match self.proto {
            Proto::Ours => {
                let hs = ClientHandshake::new(ClientOffer::new(name), std::time::Instant::now());
                FrameEncoder::uncompressed()
                    .encode(&Message::ClientHello(hs.hello()))
                    .unwrap()
                    .to_vec()
            }
            Proto::Calico => {
                let hello = CalicoMessage::ClientHello(CalicoHello {
                    hostname: name.into(),
                    version: "v3.32.0".into(),
                    syncer_type: self.syncer.into(),
                    supports_modern_policy_keys: true,
                    ..Default::default()
                });
                let mut b = Side::Client.preamble().to_vec();
                b.extend_from_slice(&calico_encode(Side::Client, &hello).unwrap());
                b
            }
        };
        self.io.write_all(&bytes).await.unwrap();
    }

    /// Reads for `d` (at most `chunk` bytes per read, sleeping `pause` after each read),
    /// handling every message; stops early once the server closed the stream.
    async fn read_for(&mut self, d: Duration, chunk: usize, pause: Duration, pongs: Pongs) {
        let until = Instant::now() + d;
        let mut tmp = vec![0u8; chunk];
        while !self.closed {
            let n = match tokio::time::timeout_at(until, self.io.read(&mut tmp)).await {
                Err(_) => return,
                Ok(Ok(0)) | Ok(Err(_)) => {
                    self.closed = true;
                    0
                }
                Ok(Ok(n)) => n,
            };
            self.buf.extend_from_slice(&tmp[..n]);
            self.handle(pongs).await;
            if !pause.is_zero() {
                if Instant::now() + pause >= until {
                    return;
                }
                tokio::time::sleep(pause).await;
            }
        }
    }

    async fn handle(&mut self, pongs: Pongs) {
        loop {
            let answer = match self.proto {
                Proto::Ours => match self.ours.decode(&mut self.buf).unwrap() {
                    None => return,
                    Some(m) => {
                        self.seen.push(name(&m.message_type().to_string()));
                        match m {
                            Message::Ping(p) => Some(
                                FrameEncoder::uncompressed()
                                    .encode(&Message::Pong(Pong {
                                        ping_timestamp_micros: p.timestamp_micros,
                                    }))
                                    .unwrap()
                                    .to_vec(),
                            ),
                            Message::Goodbye(g) => {
                                self.seen.push(format!("goodbye {:?}", g.reason));
                                None
                            }
                            _ => None,
                        }
                    }
                },
                Proto::Calico => match self.calico.decode(&mut self.buf).unwrap() {
                    None => return,
                    Some(m) => {
                        self.seen.push(name(&m.kind().to_string()));
                        match m {
                            CalicoMessage::Ping(p) => {
                                let pong = CalicoMessage::Pong(CalicoPong {
                                    ping_timestamp: p.timestamp,
                                    ..Default::default()
                                });
                                Some(calico_encode(Side::Client, &pong).unwrap().to_vec())
                            }
                            _ => None,
                        }
                    }
                },
            };
            if let (Some(b), Pongs::Answer) = (answer, pongs) {
                // The server may have gone; what it did is the case's business.
                let _ = self.io.write_all(&b).await;
            }
        }
    }

    /// How many messages of this kind were read (named as [`name`] names them).
    fn count(&self, what: &str) -> usize {
        self.seen.iter().filter(|s| *s == what).count()
    }

    /// Whether a message of this kind was read (named as [`name`] names it).
    fn saw(&self, what: &str) -> bool {
        self.seen.iter().any(|s| s.contains(what))
    }
}

/// A message kind's name the same in both protocols: `server_hello` and `MsgServerHello` are
/// `serverhello`.
fn name(kind: &str) -> String {
    let k = kind.to_lowercase().replace('_', "");
    k.strip_prefix("msg").map(str::to_string).unwrap_or(k)
}

/// How a case's connection must be at its end.
#[derive(Debug)]
enum Outcome {
    /// Still serving: closed by the test, it ends as sent away.
    Serving,
    /// Ended by the server for this reason (a drop counted under it), within this window of
    /// the paused clock after the case began.
    Dropped(DropReason, Duration, Duration),
}

/// A case's client: what it does, until the case's time is over.
type ClientPart = for<'a> fn(&'a mut Rig, &'a mut Client) -> Pin<Box<dyn Future<Output = ()> + 'a>>;

struct Case {
    name: &'static str,
    cfg: fn() -> ConnConfig,
    client: ClientPart,
    outcome: Outcome,
}

fn base_cfg() -> ConnConfig {
    ConnConfig {
        ping_interval: Duration::from_secs(10),
        pong_timeout: Duration::from_secs(60),
        write_timeout: Duration::from_secs(3600),
        max_fall_behind: Duration::from_secs(30),
        new_client_grace: Duration::ZERO,
        handshake_timeout: Duration::from_secs(10),
        ..ConnConfig::default()
    }
}

fn slow_writes_cfg() -> ConnConfig {
    ConnConfig {
        max_write: 1024,
        ..base_cfg()
    }
}

fn graceful_cfg() -> ConnConfig {
    ConnConfig {
        new_client_grace: Duration::from_secs(3600),
        ..slow_writes_cfg()
    }
}

const SEC: Duration = Duration::from_secs(1);

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "a client that answers every ping stays for ten pong timeouts",
            cfg: base_cfg,
            client: |_, c| {
                Box::pin(async move {
                    c.hello("steady").await;
                    c.read_for(600 * SEC, 64 << 10, Duration::ZERO, Pongs::Answer)
                        .await;
                    assert!(c.saw("ping"), "pinged");
                })
            },
            outcome: Outcome::Serving,
        },
        Case {
            name: "a client that never answers is dropped after the pong timeout",
            cfg: base_cfg,
            client: |_, c| {
                Box::pin(async move {
                    c.hello("silent").await;
                    c.read_for(600 * SEC, 64 << 10, Duration::ZERO, Pongs::Ignore)
                        .await;
                })
            },
            // Judged at a ping: the first after 60 s of silence, 9-11 s apart.
            outcome: Outcome::Dropped(DropReason::ping_timeout, 60 * SEC, 72 * SEC),
        },
        Case {
            name: "a client that says nothing is dropped at the handshake timeout",
            cfg: base_cfg,
            client: |_, c| {
                Box::pin(async move {
                    c.read_for(600 * SEC, 64 << 10, Duration::ZERO, Pongs::Ignore)
                        .await;
                })
            },
            outcome: Outcome::Dropped(DropReason::handshake, 10 * SEC, 10 * SEC),
        },
        Case {
            name: "a slow reader falls behind",
            cfg: slow_writes_cfg,
            client: |rig, c| {
                Box::pin(async move {
                    c.hello("slow").await;
                    c.read_for(SEC, 64 << 10, Duration::ZERO, Pongs::Answer)
                        .await;
                    rig.publish(300);
                    // A kilobyte a second, for far longer than the fall-behind limit.
                    c.read_for(600 * SEC, 1024, SEC, Pongs::Ignore).await;
                })
            },
            outcome: Outcome::Dropped(DropReason::fell_behind, 31 * SEC, 100 * SEC),
        },
        Case {
            name: "a client far behind is sent everything without waiting for the next change",
            cfg: slow_writes_cfg,
            client: |rig, c| {
                Box::pin(async move {
                    c.hello("behind").await;
                    c.read_for(SEC, 64 << 10, Duration::ZERO, Pongs::Answer)
                        .await;
                    rig.publish(300);
                    // Well inside the first ping interval (9 s at the soonest).
                    c.read_for(5 * SEC, 64 << 10, Duration::ZERO, Pongs::Answer)
                        .await;
                    let latest = rig.cache().latest().seq;
                    let conn = rig.conn.as_ref().unwrap();
                    assert_eq!(conn.position(), latest, "sent everything");
                })
            },
            outcome: Outcome::Serving,
        },
        Case {
            name: "the grace after the initial sync keeps a slow new reader, and its own \
                   writes do not count as its silence",
            cfg: graceful_cfg,
            client: |rig, c| {
                Box::pin(async move {
                    c.hello("slow-new").await;
                    c.read_for(SEC, 64 << 10, Duration::ZERO, Pongs::Answer)
                        .await;
                    rig.publish(600);
                    // No pong for 100 s, more than the pong timeout: all that time the server
                    // was writing to this client (the catch-up still goes on).
                    c.read_for(100 * SEC, 1024, SEC, Pongs::Ignore).await;
                    let conn = rig.conn.as_ref().unwrap();
                    assert!(
                        conn.position() < rig.cache().latest().seq,
                        "the catch-up must outlast the pong timeout to test anything"
                    );
                    c.read_for(100 * SEC, 1024, SEC, Pongs::Answer).await;
                    assert!(
                        rig.cache().metrics.connections_grace_used.total() >= 1,
                        "only the grace kept it"
                    );
                })
            },
            outcome: Outcome::Serving,
        },
    ]
}

#[tokio::test(start_paused = true)]
async fn the_timers_end_connections_alike_in_both_protocols() {
    for case in cases() {
        for proto in BOTH {
            let what = format!("{} ({proto:?})", case.name);
            let mut rig = Rig::new((case.cfg)());
            let (io, conn, task) = rig.connect(proto, 4096);
            let mut client = Client::new(io, proto);
            let started = Instant::now();
            (case.client)(&mut rig, &mut client).await;
            let result = match case.outcome {
                Outcome::Serving => {
                    assert!(!task.is_finished(), "{what}: ended early: {:?}", task.await);
                    rig.ctx
                        .registry
                        .close_all(&Close::because(GoodbyeReason::Shutdown));
                    // Drain what it wrote, so a blocked write lets it see the close.
                    let drain = client.read_for(60 * SEC, 64 << 10, Duration::ZERO, Pongs::Ignore);
                    let (_, r) = tokio::join!(drain, task);
                    let r = r.unwrap();
                    assert!(
                        matches!(r, Err(ConnError::Closed(GoodbyeReason::Shutdown))),
                        "{what}: {r:?}"
                    );
                    continue;
                }
                Outcome::Dropped(..) => task.await.unwrap(),
            };
            let Outcome::Dropped(reason, from, to) = case.outcome else {
                unreachable!()
            };
            let took = started.elapsed();
            let err = result.expect_err(&what);
            assert_eq!(err.drop_reason(), Some(reason), "{what}: {err}");
            assert!(
                took >= from && took <= to,
                "{what}: ended after {took:?}, not within {from:?}..{to:?}"
            );
            drop(conn);
        }
    }
}

/// A client waiting for its turn to sync is answered at once (ours: its ServerHello; Calico's:
/// the server's hello), not with the first ping: its own handshake deadline would run out.
#[tokio::test(start_paused = true)]
async fn a_client_waiting_for_a_sync_turn_has_its_hello_answered_at_once() {
    for proto in BOTH {
        let mut rig = Rig::new(ConnConfig {
            max_concurrent_syncs: 1,
            ..base_cfg()
        });
        let slots = rig.ctx.sync_slots.clone().unwrap();
        let turn = slots.try_acquire_owned().unwrap();
        let (io, _conn, task) = rig.connect(proto, 64 << 10);
        let mut c = Client::new(io, proto);
        c.hello("waiting").await;
        c.read_for(SEC, 64 << 10, Duration::ZERO, Pongs::Answer)
            .await;
        assert!(c.saw("serverhello"), "{proto:?}: {:?}", c.seen);
        assert!(!c.saw("ping"), "{proto:?}: not waiting for a ping");
        // Held for longer than the pong timeout, pinged every interval meanwhile.
        c.read_for(99 * SEC, 64 << 10, Duration::ZERO, Pongs::Answer)
            .await;
        let pings = c.count("ping");
        assert!(
            (9..=11).contains(&pings),
            "{proto:?}: {pings} pings in 100 s"
        );
        assert!(!task.is_finished(), "{proto:?}: still held");
        drop(turn);
        c.read_for(5 * SEC, 64 << 10, Duration::ZERO, Pongs::Answer)
            .await;
        assert_eq!(
            _conn.position(),
            rig.cache().latest().seq,
            "{proto:?}: synced once its turn came"
        );
        task.abort();
    }
}

/// A Calico client that offers snappy owes the server a `MsgACK` of the switch: one that never
/// sends it is dropped when the pong timeout has passed since the restart was sent, as a
/// failed handshake.
#[tokio::test(start_paused = true)]
async fn a_calico_client_that_never_acknowledges_the_switch_to_snappy_is_dropped_in_time() {
    let mut rig = Rig::new(base_cfg());
    let (mut io, _conn, task) = rig.connect(Proto::Calico, 64 << 10);
    let hello = CalicoMessage::ClientHello(CalicoHello {
        hostname: "n1".into(),
        version: "v3.32.0".into(),
        syncer_type: "felix".into(),
        supports_modern_policy_keys: true,
        supports_decoder_restart: true,
        supported_compression_algorithms: vec!["snappy".into()],
        ..Default::default()
    });
    let mut b = Side::Client.preamble().to_vec();
    b.extend_from_slice(&calico_encode(Side::Client, &hello).unwrap());
    let started = Instant::now();
    io.write_all(&b).await.unwrap();
    // Read everything (the hello, the restart), never answer.
    let mut sink = vec![0u8; 64 << 10];
    while !matches!(io.read(&mut sink).await, Ok(0) | Err(_)) {}
    let took = started.elapsed();
    let err = task.await.unwrap().expect_err("dropped");
    assert!(
        matches!(err, ConnError::HandshakeTimeout("MsgACK")),
        "{err}"
    );
    assert_eq!(err.drop_reason(), Some(DropReason::handshake));
    assert_eq!(took, 60 * SEC, "the pong timeout after the restart");
}

#[test]
fn the_rig_publishes_what_it_says() {
    let mut rig = Rig::new(base_cfg());
    let before = rig.cache().latest().seq;
    rig.publish(3);
    assert_eq!(rig.cache().latest().seq, Seq(before.0 + 3));
}

/// A drain closes connections one at a time, paced as Typha paces a shutdown (0.95 × the
/// timeout / connections apart, at most 1 s), each in its protocol's way: ours with a Goodbye
/// saying so, Calico's closed.
#[tokio::test(start_paused = true)]
async fn a_drain_closes_connections_one_at_a_time_each_in_its_protocols_way() {
    let mut rig = Rig::new(base_cfg());
    let mut readers = Vec::new();
    for (i, proto) in [Proto::Ours, Proto::Calico, Proto::Ours, Proto::Calico]
        .into_iter()
        .enumerate()
    {
        let (io, _conn, task) = rig.connect(proto, 64 << 10);
        let mut c = Client::new(io, proto);
        c.hello(&format!("n{i}")).await;
        readers.push(tokio::spawn(async move {
            c.read_for(3600 * SEC, 64 << 10, Duration::ZERO, Pongs::Answer)
                .await;
            (Instant::now(), c, task.await.unwrap())
        }));
    }
    tokio::time::sleep(SEC).await;
    let drained = Instant::now();
    let timeout = 4 * SEC;
    let mut lefts = Vec::new();
    let closed = rig
        .ctx
        .registry
        .drain(timeout, |left| lefts.push(left))
        .await;
    assert_eq!((closed, lefts), (4, vec![3, 2, 1, 0]));
    let mut ends = Vec::new();
    for r in readers {
        let (at, c, result) = r.await.unwrap();
        assert!(
            matches!(result, Err(ConnError::Closed(GoodbyeReason::Shutdown))),
            "{:?}: {result:?}",
            c.proto
        );
        if c.proto == Proto::Ours {
            assert!(c.saw("goodbye Shutdown"), "{:?}", c.seen);
        }
        ends.push(at - drained);
    }
    ends.sort();
    let step = timeout.mul_f64(0.95) / 4;
    for (i, end) in ends.iter().enumerate() {
        let want = step * u32::try_from(i).unwrap();
        assert!(
            *end >= want && *end < want + Duration::from_millis(50),
            "connection {i} closed after {end:?}, not at {want:?}: {ends:?}"
        );
    }
}

/// A Calico client has its breadcrumbs counted (and is woken) only for what concerns its
/// syncer type, as Typha's breadcrumbs of that type would hold it; what concerns it reaches
/// it.
#[tokio::test(start_paused = true)]
async fn a_calico_client_follows_only_what_concerns_its_syncer_type() {
    use crate::calico::libcalico::SyncerType;
    let mut rig = Rig::new(base_cfg());
    let (io, _bgp_conn, _bgp_task) = rig.connect(Proto::Calico, 64 << 10);
    let mut bgp = Client::new(io, Proto::Calico);
    bgp.syncer = "bgp";
    bgp.hello("n1").await;
    let (io, _felix_conn, _felix_task) = rig.connect(Proto::Calico, 64 << 10);
    let mut felix = Client::new(io, Proto::Calico);
    felix.hello("n1").await;
    for c in [&mut bgp, &mut felix] {
        c.read_for(SEC, 64 << 10, Duration::ZERO, Pongs::Answer)
            .await;
    }
    let m = rig.cache().metrics.clone();
    let counted =
        |t: SyncerType| m.breadcrumb_block.of(t).get() + m.breadcrumb_non_block.of(t).get();
    let (bgp_kvs, felix_kvs) = (bgp.count("kvs"), felix.count("kvs"));

    rig.publish(10);
    for c in [&mut bgp, &mut felix] {
        c.read_for(SEC, 64 << 10, Duration::ZERO, Pongs::Answer)
            .await;
    }
    assert_eq!(counted(SyncerType::Felix), 10, "felix's: every network set");
    assert_eq!(counted(SyncerType::Bgp), 0, "nothing for confd");
    assert_eq!(felix.count("kvs"), felix_kvs + 10);
    assert_eq!(bgp.count("kvs"), bgp_kvs);

    rig.put(serde_json::json!({
        "apiVersion": "projectcalico.org/v3", "kind": "BGPPeer",
        "metadata": {"name": "peer"}, "spec": {"peerIP": "10.0.0.1", "asNumber": 64512}
    }));
    for c in [&mut bgp, &mut felix] {
        c.read_for(SEC, 64 << 10, Duration::ZERO, Pongs::Answer)
            .await;
    }
    assert_eq!(
        counted(SyncerType::Bgp),
        1,
        "a BGP peer is confd's (and felix's)"
    );
    assert_eq!(bgp.count("kvs"), bgp_kvs + 1);
    assert_eq!(counted(SyncerType::Felix), 11);
}
