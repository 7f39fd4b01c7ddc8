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
