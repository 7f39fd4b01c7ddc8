//! Issue 39: with the default settings every listener takes IPv6 clients as well as IPv4 ones,
//! as Calico's Typha does (Go's `net.Listen("tcp", ":5473")` is dual-stack), so an IPv6-only
//! cluster's nodes can connect.

// In tests a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod common;

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

use common::{Peer, cluster, server, settle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// GET `path` from `addr`: the status line and body.
async fn get(addr: SocketAddr, path: &str) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut buf = String::new();
    s.read_to_string(&mut buf).await.unwrap();
    buf
}

#[tokio::test]
async fn with_the_defaults_clients_connect_over_ipv6_and_ipv4() {
    // The settings as the program reads them with nothing set (no flag, no variable, no
    // config file).
    let loaded =
        typha_server::cli::sources::load(vec!["typha-server".into()], Vec::new(), |_| Ok(None))
            .unwrap();
    let mut cfg = loaded.cli.into_config().unwrap();
    // Only the ports change: ones free here.
    for a in [
        Some(&mut cfg.listen),
        cfg.health.as_mut(),
        cfg.metrics.as_mut(),
    ] {
        let a = a.unwrap();
        assert_eq!(a.ip(), Ipv6Addr::UNSPECIFIED, "all interfaces by default");
        a.set_port(0);
    }
    let (srv, store) = server(cfg).await;
    store.bulk_load(cluster(2, 2));
    settle(&srv, &store).await;
    let port = srv.addr.port();
    for ip in [
        std::net::IpAddr::from(Ipv6Addr::LOCALHOST),
        Ipv4Addr::LOCALHOST.into(),
    ] {
        let mut p = Peer::connect(SocketAddr::new(ip, port)).await;
        p.hello(Peer::offer("node", None)).await.unwrap();
        p.sync_to(&srv).await;
        let health = SocketAddr::new(ip, srv.health_addr.unwrap().port());
        assert!(
            get(health, "/readiness").await.starts_with("HTTP/1.1 200"),
            "{ip}"
        );
        let metrics = SocketAddr::new(ip, srv.metrics_addr.unwrap().port());
        assert!(
            get(metrics, "/metrics").await.contains("typha_build_info"),
            "{ip}"
        );
    }
    srv.shutdown().await;
}
