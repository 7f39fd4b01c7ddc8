//! Mutual TLS with real certificates (generated per test): the right client is served; a wrong
//! CA, a wrong CN or no client certificate is turned away, and the server is fine.

// In tests a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod common;

use common::{Peer, cluster, expected_digest, server, tls_client};
use typha_server::config::Config;
use typha_server::metrics::DropReason;
use typha_server::pki::Ca;
use typha_server::tls::TlsConfig;

struct Pki {
    _dir: tempfile::TempDir,
    ca: Ca,
    cfg: TlsConfig,
}

fn pki() -> Pki {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("test-ca").unwrap();
    let srv = ca
        .server("typha-server", &["localhost", "127.0.0.1"])
        .unwrap();
    let w = |name: &str, body: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, body).unwrap();
        p
    };
    let cfg = TlsConfig {
        cert_file: w("server.crt", &srv.cert_pem),
        key_file: w("server.key", &srv.key_pem),
        ca_file: w("ca.crt", &ca.cert_pem),
        client_cns: vec!["typha-client".into()],
        client_uri_sans: vec!["spiffe://cluster.local/ns/kube-system/sa/calico-node".into()],
    };
    Pki { _dir: dir, ca, cfg }
}

async fn tls_server(
    p: &Pki,
) -> (
    typha_server::server::RunningServer,
    typha_server::datastore::embedded::Embedded,
) {
    let mut cfg = Config::for_tests();
    cfg.tls = Some(p.cfg.clone());
    let (srv, store) = server(cfg).await;
    store.bulk_load(cluster(3, 4));
    (srv, store)
}

#[tokio::test]
async fn allowed_cn_or_uri_san_is_served() {
    let p = pki();
    let (srv, store) = tls_server(&p).await;
    let by_cn = p.ca.client("typha-client", None).unwrap();
    let mut a = Peer::connect_tls(srv.addr, tls_client(&p.ca.cert_pem, Some(&by_cn)))
        .await
        .unwrap();
    a.hello(Peer::offer("a", None)).await.unwrap();
    a.sync_to(&srv).await;
    assert_eq!(a.digest.combined(), expected_digest(&store).0);

    let by_san =
        p.ca.client(
            "some-other-cn",
            Some("spiffe://cluster.local/ns/kube-system/sa/calico-node"),
        )
        .unwrap();
    let mut b = Peer::connect_tls(srv.addr, tls_client(&p.ca.cert_pem, Some(&by_san)))
        .await
        .unwrap();
    b.hello(Peer::offer("b", None)).await.unwrap();
    b.sync_to(&srv).await;
    srv.shutdown().await;
}

#[tokio::test]
async fn wrong_cn_wrong_ca_and_no_certificate_are_rejected() {
    let p = pki();
    let (srv, _store) = tls_server(&p).await;

    // A certificate from the right CA with a CN that is not allowed: TLS completes, then the
    // server closes without a word.
    let wrong_cn = p.ca.client("intruder", None).unwrap();
    let mut c = Peer::connect_tls(srv.addr, tls_client(&p.ca.cert_pem, Some(&wrong_cn)))
        .await
        .unwrap();
    assert!(c.hello(Peer::offer("c", None)).await.is_err());

    // A certificate from another CA: the handshake fails.
    let other = Ca::new("other-ca").unwrap();
    let foreign = other.client("typha-client", None).unwrap();
    let r = Peer::connect_tls(srv.addr, tls_client(&p.ca.cert_pem, Some(&foreign))).await;
    let refused = match r {
        Err(_) => true,
        Ok(mut peer) => peer.hello(Peer::offer("d", None)).await.is_err(),
    };
    assert!(refused, "a certificate from another CA must be refused");

    // No client certificate at all.
    let r = Peer::connect_tls(srv.addr, tls_client(&p.ca.cert_pem, None)).await;
    let refused = match r {
        Err(_) => true,
        Ok(mut peer) => peer.hello(Peer::offer("e", None)).await.is_err(),
    };
    assert!(refused, "a client without a certificate must be refused");

    common::eventually("rejections counted", || {
        srv.metrics.dropped_count(DropReason::tls_identity) == 1
            && srv.metrics.dropped_count(DropReason::handshake) == 2
    })
    .await;

    // And the server still serves the right client.
    let good = p.ca.client("typha-client", None).unwrap();
    let mut g = Peer::connect_tls(srv.addr, tls_client(&p.ca.cert_pem, Some(&good)))
        .await
        .unwrap();
    g.hello(Peer::offer("g", None)).await.unwrap();
    g.sync_to(&srv).await;
    srv.shutdown().await;
}

#[tokio::test]
async fn a_plaintext_client_cannot_talk_to_a_tls_server() {
    let p = pki();
    let (srv, _store) = tls_server(&p).await;
    let mut plain = Peer::connect(srv.addr).await;
    assert!(plain.hello(Peer::offer("plain", None)).await.is_err());
    srv.shutdown().await;
}

#[tokio::test]
async fn a_reconnect_storm_never_holds_more_than_the_limit() {
    // TLS makes the window between accept and hello long: a limit checked only against
    // connections past their hello lets a whole storm in.
    const LIMIT: usize = 8;
    const STORM: usize = 48;
    let p = pki();
    let mut cfg = Config::for_tests();
    cfg.tls = Some(p.cfg.clone());
    cfg.max_connections = LIMIT;
    cfg.redirect = vec!["typha-b.example:5473".into()];
    let (srv, store) = server(cfg).await;
    store.bulk_load(cluster(1, 2));
    let srv = std::sync::Arc::new(srv);
    let client = p.ca.client("typha-client", None).unwrap();
    let tls = tls_client(&p.ca.cert_pem, Some(&client));

    // Sample what the server holds while the storm runs.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let (srv, stop) = (srv.clone(), stop.clone());
        tokio::spawn(async move {
            let mut most = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                most = most
                    .max(srv.connections())
                    .max(usize::try_from(srv.metrics.connections_active.get()).unwrap());
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
            most
        })
    };
    let storm: Vec<_> = (0..STORM)
        .map(|i| {
            let tls = tls.clone();
            let addr = srv.addr;
            tokio::spawn(async move {
                let mut peer = Peer::connect_tls(addr, tls).await.unwrap();
                let hello = typha_protocol::handshake::ClientHandshake::new(
                    Peer::offer(&format!("node-{i}"), None),
                    std::time::Instant::now(),
                )
                .hello();
                peer.send(&typha_protocol::Message::ClientHello(hello))
                    .await
                    .unwrap();
                let answer = peer.recv().await.unwrap();
                (peer, answer)
            })
        })
        .collect();
    let mut served = Vec::new();
    let mut refused = 0;
    for t in storm {
        let (peer, answer) = t.await.unwrap();
        match answer {
            typha_protocol::Message::ServerHello(_) => served.push(peer),
            typha_protocol::Message::Goodbye(g) => {
                assert_eq!(
                    g.reason,
                    typha_protocol::message::GoodbyeReason::TooManyConnections
                );
                assert_eq!(g.redirect, ["typha-b.example:5473"], "servers to try");
                refused += 1;
            }
            other => panic!("unexpected answer {other:?}"),
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let most = sampler.await.unwrap();
    assert!(
        most <= LIMIT,
        "held {most} connections at once, over the limit of {LIMIT}"
    );
    assert_eq!(served.len(), LIMIT, "the limit is used, not undershot");
    assert_eq!(refused, STORM - LIMIT);
    assert_eq!(
        srv.metrics.dropped_count(DropReason::too_many_connections),
        u64::try_from(STORM - LIMIT).unwrap()
    );
    drop(served);
    std::sync::Arc::into_inner(srv).unwrap().shutdown().await;
}

/// Files in `dir`, written atomically through a kubelet-style `..data` symlink swap: the
/// names are symlinks into `..data/`, and `..data` is repointed to a new folder at once.
struct SecretVolume {
    dir: std::path::PathBuf,
    version: u32,
}

impl SecretVolume {
    fn new(dir: std::path::PathBuf) -> Self {
        std::fs::create_dir_all(&dir).unwrap();
        Self { dir, version: 0 }
    }
    fn path(&self, name: &str) -> std::path::PathBuf {
        self.dir.join(name)
    }
    fn write(&mut self, files: &[(&str, String)]) {
        self.version += 1;
        let data = format!("..2026_11_24_{:02}", self.version);
        std::fs::create_dir(self.dir.join(&data)).unwrap();
        for (name, body) in files {
            std::fs::write(self.dir.join(&data).join(name), body).unwrap();
            let link = self.dir.join(name);
            if std::fs::symlink_metadata(&link).is_err() {
                std::os::unix::fs::symlink(format!("..data/{name}"), &link).unwrap();
            }
        }
        let tmp = self.dir.join("..data_tmp");
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&data, &tmp).unwrap();
        std::fs::rename(&tmp, self.dir.join("..data")).unwrap();
    }
}

/// A typha-client consumer with these TLS files.
fn agent(
    addr: std::net::SocketAddr,
    vol: &SecretVolume,
) -> (
    std::sync::Arc<typha_client::metrics::ClientMetrics>,
    tokio::sync::oneshot::Sender<()>,
) {
    let mut cfg = typha_client::ClientConfig::new(
        "node",
        typha_client::Discovery::addresses(vec![format!("localhost:{}", addr.port())]),
    );
    cfg.backoff_min = std::time::Duration::from_millis(20);
    cfg.backoff_max = std::time::Duration::from_millis(200);
    cfg.tls = Some(typha_client::tls::ClientTls {
        ca_file: vol.path("ca.crt"),
        cert_file: vol.path("tls.crt"),
        key_file: vol.path("tls.key"),
        server_cn: Some("typha-server".into()),
        server_uri_san: None,
    });
    let metrics = typha_client::metrics::ClientMetrics::unregistered();
    let client = typha_client::SyncClient::new(cfg, metrics.clone()).unwrap();
    let (stop, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(client.run(NoOp, async move {
        let _ = rx.await;
    }));
    (metrics, stop)
}

struct NoOp;
impl typha_client::SyncerCallbacks for NoOp {
    fn on_status_updated(&mut self, _: typha_protocol::model::SyncStatus) {}
    fn on_updates(&mut self, _: Vec<typha_protocol::model::Update>) {}
}

#[tokio::test]
async fn certificates_and_cas_rotate_under_running_agents() {
    use typha_client::ResumeKind;
    let tmp = tempfile::tempdir().unwrap();
    let (ca1, ca2) = (Ca::new("ca-1").unwrap(), Ca::new("ca-2").unwrap());
    let server_cert = |ca: &Ca| {
        ca.server("typha-server", &["localhost", "127.0.0.1"])
            .unwrap()
    };
    let client_cert = |ca: &Ca| ca.client("typha-client", None).unwrap();
    let pair = |issued: typha_server::pki::Issued, ca: String| {
        vec![
            ("tls.crt", issued.cert_pem),
            ("tls.key", issued.key_pem),
            ("ca.crt", ca),
        ]
    };
    // The server's and the agents' Secrets, as mounted volumes.
    let mut srv_vol = SecretVolume::new(tmp.path().join("server"));
    srv_vol.write(&pair(server_cert(&ca1), ca1.cert_pem.clone()));
    let mut agents_vol = SecretVolume::new(tmp.path().join("agents"));
    agents_vol.write(&pair(client_cert(&ca1), ca1.cert_pem.clone()));
    // A client whose Secret is never updated: it will hold only the old CA.
    let mut stale_vol = SecretVolume::new(tmp.path().join("stale"));
    stale_vol.write(&pair(client_cert(&ca1), ca1.cert_pem.clone()));

    let tls = TlsConfig {
        cert_file: srv_vol.path("tls.crt"),
        key_file: srv_vol.path("tls.key"),
        ca_file: srv_vol.path("ca.crt"),
        client_cns: vec!["typha-client".into()],
        client_uri_sans: vec![],
    };
    let mut cfg = Config::for_tests();
    cfg.tls = Some(tls.clone());
    let (srv, store) = server(cfg.clone()).await;
    store.bulk_load(cluster(3, 4));
    let agents: Vec<_> = (0..3).map(|_| agent(srv.addr, &agents_vol)).collect();
    common::eventually("every agent in sync", || {
        agents
            .iter()
            .all(|(m, _)| m.resume_count(ResumeKind::Snapshot) == 1)
    })
    .await;

    // Overlap: both CAs trusted everywhere; new leaves from the new CA.
    let both = format!("{}{}", ca1.cert_pem, ca2.cert_pem);
    srv_vol.write(&pair(server_cert(&ca2), both.clone()));
    agents_vol.write(&pair(client_cert(&ca2), both));
    // New handshakes use the new material (within the server's one-second re-read), while the
    // agents' sessions go on.
    let fresh = agent(srv.addr, &agents_vol);
    common::eventually("a new agent served with the new certificates", || {
        fresh.0.resume_count(ResumeKind::Snapshot) == 1
    })
    .await;
    assert!(agents.iter().all(|(m, _)| m.reconnects.get() == 0));
    // An agent whose Secret has the bundle but not yet its new leaf (a straggler) is still
    // served during the overlap: the old CA is trusted too.
    let mut straggler_vol = SecretVolume::new(tmp.path().join("straggler"));
    straggler_vol.write(&pair(
        client_cert(&ca1),
        format!("{}{}", ca1.cert_pem, ca2.cert_pem),
    ));
    let straggler = agent(srv.addr, &straggler_vol);
    common::eventually(
        "an agent with an old-CA leaf served during the overlap",
        || straggler.0.resume_count(ResumeKind::Snapshot) == 1,
    )
    .await;
    drop(straggler);

    // The old CA goes. Every agent's next session (here: the server restarts on the same
    // port) is made with the new material, and resumes without a snapshot.
    srv_vol.write(&pair(server_cert(&ca2), ca2.cert_pem.clone()));
    agents_vol.write(&pair(client_cert(&ca2), ca2.cert_pem.clone()));
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    // Taken both times, never refused (the server re-reads every second).
    let [taken, refused] = &srv.metrics.tls_reloads;
    assert_eq!((taken.get(), refused.get()), (2, 0));
    let addr = srv.addr;
    srv.shutdown().await;
    let mut cfg2 = cfg.clone();
    cfg2.listen = addr;
    let srv = typha_server::server::start(cfg2, std::sync::Arc::new(store.clone()))
        .await
        .unwrap();
    common::eventually("every agent back, resumed by digest", || {
        agents
            .iter()
            .all(|(m, _)| m.connected.get() == 1 && m.resume_count(ResumeKind::Digest) == 1)
    })
    .await;
    assert!(
        agents
            .iter()
            .all(|(m, _)| m.resume_count(ResumeKind::Snapshot) == 1)
    );

    // A client holding only the removed CA (and a certificate from it) is refused, clearly.
    let stale_tls = typha_client::tls::client_config(&typha_client::tls::ClientTls {
        ca_file: stale_vol.path("ca.crt"),
        cert_file: stale_vol.path("tls.crt"),
        key_file: stale_vol.path("tls.key"),
        server_cn: Some("typha-server".into()),
        server_uri_san: None,
    })
    .unwrap();
    let target = typha_client::discovery::Target {
        addr: srv.addr,
        server_name: "localhost".into(),
    };
    let ccfg = typha_client::ClientConfig::new(
        "stale",
        typha_client::Discovery::addresses(vec![srv.addr.to_string()]),
    );
    let mut st = typha_client::Store::new();
    let end = typha_client::conn::session(
        &target,
        &ccfg,
        Some(&stale_tls),
        &mut st,
        &mut NoOp,
        &typha_client::metrics::ClientMetrics::unregistered(),
    )
    .await;
    assert!(end.error.is_misconfiguration(), "{}", end.error);
    let msg = end.error.to_string();
    // It cannot verify the server's new certificate, and says so.
    assert!(
        msg.contains("TLS") && msg.contains("certificate") && msg.contains("UnknownIssuer"),
        "{msg}"
    );

    // A client that trusts the new CA but still presents a leaf of the removed one is
    // refused by the server, and told so.
    let mut half_vol = SecretVolume::new(tmp.path().join("half"));
    half_vol.write(&pair(client_cert(&ca1), ca2.cert_pem.clone()));
    let half_tls = typha_client::tls::client_config(&typha_client::tls::ClientTls {
        ca_file: half_vol.path("ca.crt"),
        cert_file: half_vol.path("tls.crt"),
        key_file: half_vol.path("tls.key"),
        server_cn: Some("typha-server".into()),
        server_uri_san: None,
    })
    .unwrap();
    let end = typha_client::conn::session(
        &target,
        &ccfg,
        Some(&half_tls),
        &mut typha_client::Store::new(),
        &mut NoOp,
        &typha_client::metrics::ClientMetrics::unregistered(),
    )
    .await;
    assert!(end.error.is_misconfiguration(), "{}", end.error);
    let msg = end.error.to_string();
    assert!(
        msg.contains("refused this client") || msg.contains("closed the connection after TLS"),
        "{msg}"
    );
    // Both handshakes failed, and this (restarted) server counted both: the client above that
    // gave up on it, and this one it refused.
    common::eventually("the server counted the failed handshakes", || {
        srv.metrics.dropped_count(DropReason::handshake) == 2
    })
    .await;
    srv.shutdown().await;
}

#[tokio::test]
async fn a_broken_new_certificate_keeps_the_old_one_in_use() {
    let tmp = tempfile::tempdir().unwrap();
    let ca = Ca::new("ca").unwrap();
    let s = ca.server("typha-server", &["localhost"]).unwrap();
    let mut vol = SecretVolume::new(tmp.path().to_path_buf());
    vol.write(&[
        ("tls.crt", s.cert_pem.clone()),
        ("tls.key", s.key_pem.clone()),
        ("ca.crt", ca.cert_pem.clone()),
    ]);
    let source = typha_server::tls::ServerTls::load(TlsConfig {
        cert_file: vol.path("tls.crt"),
        key_file: vol.path("tls.key"),
        ca_file: vol.path("ca.crt"),
        client_cns: vec!["typha-client".into()],
        client_uri_sans: vec![],
    })
    .unwrap();
    use typha_server::tls::Reloaded;
    assert_eq!(source.reload(), Reloaded::Unchanged);
    let before = source.current();
    // Half a rotation: a certificate that does not match its key.
    let other = ca.server("typha-server", &["localhost"]).unwrap();
    vol.write(&[
        ("tls.crt", other.cert_pem.clone()),
        ("tls.key", s.key_pem.clone()),
        ("ca.crt", ca.cert_pem.clone()),
    ]);
    assert_eq!(source.reload(), Reloaded::Failed);
    assert_eq!(
        source.reload(),
        Reloaded::Unchanged,
        "a broken version is tried once"
    );
    assert!(std::sync::Arc::ptr_eq(&before, &source.current()));
    // The rotation completes: the matching key arrives.
    vol.write(&[
        ("tls.crt", other.cert_pem),
        ("tls.key", other.key_pem),
        ("ca.crt", ca.cert_pem),
    ]);
    assert_eq!(source.reload(), Reloaded::Reloaded);
    assert!(!std::sync::Arc::ptr_eq(&before, &source.current()));
}
