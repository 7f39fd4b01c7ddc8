//! The client library against the real server (in-process, real TCP/TLS on loopback): initial
//! sync, updates once each in order, resume by digest across a server restart, failover,
//! Goodbye redirects, a silent server, refused TLS, and random churn with repeated disconnects.

// In tests a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;
use typha_client::conn::{SessionError, session};
use typha_client::discovery::Target;
use typha_client::metrics::ClientMetrics;
use typha_client::{ClientConfig, Discovery, ResumeKind, Store, SyncClient, SyncerCallbacks};
use typha_protocol::digest::StateDigest;
use typha_protocol::model::{EncodedValue, KeyPath, SyncStatus, Update, UpdateKind};
use typha_server::config::Config;
use typha_server::datastore::embedded::Embedded;
use typha_server::metrics::ResumeKind as ServerResume;
use typha_server::server::{RunningServer, start};

const WAIT: Duration = Duration::from_secs(30);

/// What the consumer saw, shared with the test.
#[derive(Debug, Default)]
struct Seen {
    statuses: Vec<SyncStatus>,
    updates: Vec<(KeyPath, UpdateKind)>,
    state: BTreeMap<KeyPath, EncodedValue>,
}

#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Seen>>);

impl SyncerCallbacks for Shared {
    fn on_status_updated(&mut self, s: SyncStatus) {
        self.0.lock().unwrap().statuses.push(s);
    }
    fn on_updates(&mut self, us: Vec<Update>) {
        let mut g = self.0.lock().unwrap();
        for u in us {
            // The consumer's view must agree with the kinds it is given.
            match (&u.value, g.state.contains_key(&u.key)) {
                (Some(_), true) => assert_eq!(u.kind, UpdateKind::Updated, "{}", u.key),
                (Some(_), false) => assert_eq!(u.kind, UpdateKind::New, "{}", u.key),
                (None, true) => assert_eq!(u.kind, UpdateKind::Deleted),
                (None, false) => panic!("deletion of {} which the consumer never had", u.key),
            }
            g.updates.push((u.key.clone(), u.kind));
            match u.value {
                Some(v) => g.state.insert(u.key, v),
                None => g.state.remove(&u.key),
            };
        }
    }
}

impl Shared {
    fn digest(&self) -> u64 {
        let g = self.0.lock().unwrap();
        let mut d = StateDigest::new();
        for (k, v) in &g.state {
            d.insert(k.as_str(), v.as_bytes());
        }
        d.combined()
    }
    fn status(&self) -> Option<SyncStatus> {
        self.0.lock().unwrap().statuses.last().copied()
    }
}

/// The digest and key count a correct consumer must reach for the store's content.
fn expected(store: &Embedded) -> (u64, usize) {
    let mut d = StateDigest::new();
    let mut n = 0;
    for r in store.resources() {
        for (k, v) in typha_server::calico::convert::convert(&r).unwrap() {
            d.insert(&k.to_string(), EncodedValue::encode(&v).as_bytes());
            n += 1;
        }
    }
    (d.combined(), n)
}

async fn eventually(what: &str, f: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !f() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn converged(seen: &Shared, store: &Embedded) {
    eventually("the consumer to match the datastore", || {
        seen.status() == Some(SyncStatus::InSync) && seen.digest() == expected(store).0
    })
    .await;
}

struct Running {
    seen: Shared,
    metrics: Arc<ClientMetrics>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<(Shared, Store)>,
}

impl Running {
    async fn stop(mut self) -> Store {
        let _ = self.stop.take().unwrap().send(());
        self.task.await.unwrap().1
    }
}

fn client_cfg(addrs: &[SocketAddr]) -> ClientConfig {
    let mut cfg = ClientConfig::new(
        "node-test",
        Discovery::addresses(addrs.iter().map(ToString::to_string).collect()),
    );
    cfg.backoff_min = Duration::from_millis(20);
    cfg.backoff_max = Duration::from_millis(200);
    cfg.read_timeout = Duration::from_secs(5);
    cfg.dial_timeout = Duration::from_secs(2);
    cfg
}

fn run_client(cfg: ClientConfig) -> Running {
    let metrics = ClientMetrics::unregistered();
    let client = SyncClient::new(cfg, metrics.clone()).unwrap();
    let seen = Shared::default();
    let (tx, rx) = oneshot::channel();
    let task = tokio::spawn(client.run(seen.clone(), async move {
        let _ = rx.await;
    }));
    Running {
        seen,
        metrics,
        stop: Some(tx),
        task,
    }
}

async fn server_on(store: &Embedded, addr: SocketAddr) -> RunningServer {
    let mut cfg = Config::for_tests();
    cfg.listen = addr;
    start(cfg, Arc::new(store.clone())).await.unwrap()
}

fn cluster(nodes: usize, pods: usize) -> (Embedded, typha_test_support::sample::Spec) {
    let spec = typha_test_support::sample::Spec {
        nodes,
        pods_per_node: pods,
        ..Default::default()
    };
    let store = Embedded::new();
    store.bulk_load(spec.resources());
    (store, spec)
}

#[tokio::test]
async fn initial_sync_then_every_update_once_in_order() {
    let (store, spec) = cluster(10, 20);
    let srv = server_on(&store, "127.0.0.1:0".parse().unwrap()).await;
    let c = run_client(client_cfg(&[srv.addr]));
    converged(&c.seen, &store).await;
    assert_eq!(
        c.seen.0.lock().unwrap().statuses,
        [
            SyncStatus::WaitForDatastore,
            SyncStatus::ResyncInProgress,
            SyncStatus::InSync
        ]
    );
    assert_eq!(c.seen.0.lock().unwrap().state.len(), expected(&store).1);

    let before = c.seen.0.lock().unwrap().updates.len();
    let mut want = Vec::new();
    for g in 1..=40u64 {
        let r = spec.workload_endpoint((g % 10) as usize, (g % 20) as usize, g);
        let (k, _) = typha_server::calico::convert::convert(&r)
            .unwrap()
            .remove(0);
        want.push((KeyPath::from(&k), UpdateKind::Updated));
        store.put(r);
    }
    let victim = spec.workload_endpoint(3, 3, 999);
    let (vk, _) = typha_server::calico::convert::convert(&victim)
        .unwrap()
        .remove(0);
    store.delete(&victim.id());
    want.push((KeyPath::from(&vk), UpdateKind::Deleted));
    converged(&c.seen, &store).await;
    let got = c.seen.0.lock().unwrap().updates[before..].to_vec();
    assert_eq!(got, want, "each update exactly once, in order");
    let _ = c.stop().await;
    srv.shutdown().await;
}

#[tokio::test]
async fn a_restarted_server_resumes_the_client_by_digest_not_snapshot() {
    let (store, spec) = cluster(20, 30);
    // The restarted server binds the same port: one below the ephemeral range, so no outgoing
    // connection (the client's reconnects among them) is given it in between.
    let addr = SocketAddr::from((
        [127, 0, 0, 1],
        typha_test_support::control_plane::free_port().unwrap(),
    ));
    let a = server_on(&store, addr).await;
    let c = run_client(client_cfg(&[addr]));
    converged(&c.seen, &store).await;
    a.shutdown().await;
    for g in 1..=3u64 {
        store.put(spec.workload_endpoint(1, g as usize, 500 + g));
    }
    let b = server_on(&store, addr).await;
    converged(&c.seen, &store).await;
    assert_eq!(b.metrics.resume_count(ServerResume::digest), 1);
    assert_eq!(b.metrics.resume_count(ServerResume::snapshot), 0);
    assert_eq!(c.metrics.resume_count(ResumeKind::Digest), 1);
    assert_eq!(c.metrics.reconnects.get(), 1);
    let _ = c.stop().await;
    b.shutdown().await;
}

#[tokio::test]
async fn failover_between_two_servers_over_the_same_datastore() {
    let (store, spec) = cluster(10, 20);
    let s1 = server_on(&store, "127.0.0.1:0".parse().unwrap()).await;
    let s2 = server_on(&store, "127.0.0.1:0".parse().unwrap()).await;
    let c = run_client(client_cfg(&[s1.addr, s2.addr]));
    converged(&c.seen, &store).await;
    eventually("connected", || s1.connections() + s2.connections() == 1).await;
    let (gone, other) = if s1.connections() == 1 {
        (s1, s2)
    } else {
        (s2, s1)
    };
    gone.shutdown().await;
    store.put(spec.workload_endpoint(2, 2, 77));
    converged(&c.seen, &store).await;
    eventually("moved", || other.connections() == 1).await;
    assert_eq!(
        other.metrics.resume_count(ServerResume::digest),
        1,
        "no full snapshot on failover"
    );
    assert_eq!(other.metrics.resume_count(ServerResume::snapshot), 0);
    let _ = c.stop().await;
    other.shutdown().await;
}

#[tokio::test]
async fn a_goodbye_redirect_is_followed() {
    let (store, _) = cluster(2, 2);
    let target = server_on(&store, "127.0.0.1:0".parse().unwrap()).await;
    let mut cfg = Config::for_tests();
    cfg.max_connections = 0;
    cfg.redirect = vec![target.addr.to_string()];
    let full = start(cfg, Arc::new(store.clone())).await.unwrap();
    // The client only knows the full server.
    let c = run_client(client_cfg(&[full.addr]));
    converged(&c.seen, &store).await;
    assert_eq!(target.connections(), 1);
    assert!(
        full.metrics
            .dropped_count(typha_server::metrics::DropReason::too_many_connections)
            >= 1
    );
    let _ = c.stop().await;
    target.shutdown().await;
    full.shutdown().await;
}

/// On a paused clock (the silent server runs in the test's runtime): the read timeout is the
/// clock's, not the machine's.
#[tokio::test(start_paused = true)]
async fn a_silent_server_is_detected_by_the_read_timeout() {
    // Accepts, answers the hello, then says nothing more.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut s, _) = listener.accept().await.unwrap();
        let mut buf = bytes::BytesMut::new();
        let mut dec = typha_protocol::FrameDecoder::new(typha_protocol::Limits::SERVER_INBOUND);
        let hello = loop {
            if let Some(m) = dec.decode(&mut buf).unwrap() {
                break m;
            }
            s.read_buf(&mut buf).await.unwrap();
        };
        let mut hs = typha_protocol::handshake::ServerHandshake::new(
            typha_protocol::handshake::ServerOffer::new(typha_protocol::Epoch(1)),
            std::time::Instant::now(),
        );
        let acc = hs.handle_message(hello, std::time::Instant::now()).unwrap();
        let reply = typha_protocol::FrameEncoder::uncompressed()
            .encode(&typha_protocol::Message::ServerHello(acc.reply))
            .unwrap();
        s.write_all(&reply).await.unwrap();
        tokio::time::sleep(Duration::from_secs(60)).await;
        drop(s);
    });
    let mut cfg = client_cfg(&[addr]);
    cfg.read_timeout = Duration::from_millis(400);
    let target = Target {
        addr,
        server_name: "localhost".into(),
    };
    let (mut store, mut cb) = (Store::new(), Shared::default());
    let started = tokio::time::Instant::now();
    let end = session(
        &target,
        &cfg,
        None,
        &mut store,
        &mut cb,
        &ClientMetrics::unregistered(),
    )
    .await;
    assert!(
        matches!(end.error, SessionError::ReadTimeout(_)),
        "{}",
        end.error
    );
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn refused_tls_gives_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let ca = typha_server::pki::Ca::new("ca").unwrap();
    let srv_cert = ca.server("typha-server", &["localhost"]).unwrap();
    let w = |n: &str, b: &str| {
        let p = dir.path().join(n);
        std::fs::write(&p, b).unwrap();
        p
    };
    let mut cfg = Config::for_tests();
    cfg.tls = Some(typha_server::tls::TlsConfig {
        cert_file: w("s.crt", &srv_cert.cert_pem),
        key_file: w("s.key", &srv_cert.key_pem),
        ca_file: w("ca.crt", &ca.cert_pem),
        client_cns: vec!["typha-client".into()],
        client_uri_sans: vec![],
    });
    let (store, _) = cluster(1, 1);
    let srv = start(cfg, Arc::new(store.clone())).await.unwrap();
    let target = Target {
        addr: srv.addr,
        server_name: "localhost".into(),
    };

    // A client certificate from another CA.
    let other = typha_server::pki::Ca::new("other").unwrap();
    let bad = other.client("typha-client", None).unwrap();
    let mut ccfg = client_cfg(&[srv.addr]);
    ccfg.tls = Some(typha_client::tls::ClientTls {
        ca_file: w("ca2.crt", &ca.cert_pem),
        cert_file: w("bad.crt", &bad.cert_pem),
        key_file: w("bad.key", &bad.key_pem),
        server_cn: Some("typha-server".into()),
        server_uri_san: None,
    });
    let tls = typha_client::tls::client_config(ccfg.tls.as_ref().unwrap()).unwrap();
    let end = session(
        &target,
        &ccfg,
        Some(&tls),
        &mut Store::new(),
        &mut Shared::default(),
        &ClientMetrics::unregistered(),
    )
    .await;
    let msg = end.error.to_string();
    assert!(msg.contains(&srv.addr.to_string()), "{msg}");
    assert!(!end.synced);

    // The right certificate, but the server's CN is not the one required.
    let good = ca.client("typha-client", None).unwrap();
    ccfg.tls = Some(typha_client::tls::ClientTls {
        ca_file: w("ca3.crt", &ca.cert_pem),
        cert_file: w("good.crt", &good.cert_pem),
        key_file: w("good.key", &good.key_pem),
        server_cn: Some("some-other-server".into()),
        server_uri_san: None,
    });
    let tls = typha_client::tls::client_config(ccfg.tls.as_ref().unwrap()).unwrap();
    let end = session(
        &target,
        &ccfg,
        Some(&tls),
        &mut Store::new(),
        &mut Shared::default(),
        &ClientMetrics::unregistered(),
    )
    .await;
    assert!(
        matches!(end.error, SessionError::Tls { .. }),
        "{}",
        end.error
    );
    assert!(
        end.error.to_string().contains("FELIX_TYPHACN"),
        "{}",
        end.error
    );
    assert!(end.error.is_misconfiguration());

    // And with the right CN it syncs.
    ccfg.tls.as_mut().unwrap().server_cn = Some("typha-server".into());
    let c = run_client(ccfg);
    converged(&c.seen, &store).await;
    let _ = c.stop().await;
    srv.shutdown().await;
}

/// A TCP proxy that cuts every connection through it when told to.
async fn flaky_proxy(upstream: SocketAddr) -> (SocketAddr, tokio::sync::watch::Sender<u64>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (cut, rx) = tokio::sync::watch::channel(0u64);
    tokio::spawn(async move {
        loop {
            let Ok((mut down, _)) = listener.accept().await else {
                return;
            };
            let mut rx = rx.clone();
            // Only cuts ordered after this connection opened apply to it.
            rx.borrow_and_update();
            tokio::spawn(async move {
                let Ok(mut up) = tokio::net::TcpStream::connect(upstream).await else {
                    return;
                };
                tokio::select! {
                    _ = tokio::io::copy_bidirectional(&mut down, &mut up) => {}
                    _ = rx.changed() => {}
                }
            });
        }
    });
    (addr, cut)
}

#[tokio::test]
async fn random_churn_with_repeated_disconnects_ends_exact() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let (store, spec) = cluster(10, 10);
    let srv = server_on(&store, "127.0.0.1:0".parse().unwrap()).await;
    let (proxy, cut) = flaky_proxy(srv.addr).await;
    let c = run_client(client_cfg(&[proxy]));
    converged(&c.seen, &store).await;
    let churn_store = store.clone();
    let churn = tokio::spawn(async move {
        let mut rng = typha_protocol::sample::Rng::new(42);
        for g in 1..=1500u64 {
            let node = rng.below(10) as usize;
            let pod = rng.below(10) as usize;
            let r = spec.workload_endpoint(node, pod, g);
            if rng.below(5) == 0 {
                churn_store.delete(&r.id());
            } else {
                churn_store.put(r);
            }
            if g % 10 == 0 {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
    });
    for i in 0..8u64 {
        tokio::time::sleep(Duration::from_millis(60)).await;
        cut.send_replace(i + 1);
    }
    churn.await.unwrap();
    converged(&c.seen, &store).await;
    // No stale keys: exactly the datastore's keys, nothing more.
    let want: std::collections::BTreeSet<String> = store
        .resources()
        .iter()
        .flat_map(|r| typha_server::calico::convert::convert(r).unwrap())
        .map(|(k, _)| k.to_string())
        .collect();
    let got: std::collections::BTreeSet<String> = c
        .seen
        .0
        .lock()
        .unwrap()
        .state
        .keys()
        .map(|k| k.to_string())
        .collect();
    assert_eq!(got, want);
    assert!(
        c.metrics.reconnects.get() >= 4,
        "{} reconnects",
        c.metrics.reconnects.get()
    );
    assert!(
        c.metrics.resume_count(ResumeKind::Deltas) >= 3,
        "resumed by deltas: {}",
        c.metrics.resume_count(ResumeKind::Deltas)
    );
    let store_state = c.stop().await;
    assert_eq!(store_state.digest().combined(), expected(&store).0);
    srv.shutdown().await;
}
