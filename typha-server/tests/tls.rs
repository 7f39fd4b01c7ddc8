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
