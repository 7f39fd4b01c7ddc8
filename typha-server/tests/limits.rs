//! The connection limits as Calico's Typha computes them (issue 39): with balancing on, each
//! replica takes `4 × (1 + nodes × 1.2 / (replicas − 1))` connections, because each
//! calico-node opens one connection per syncer type, and our own protocol's clients (one
//! connection per node) are held to one per node's share. A Calico client refused at the
//! limit is closed without a word (its protocol has none), counted and logged.
//!
//! The real `typha-server` binary with `TYPHA_CONNECTIONREBALANCINGMODE=kubernetes`, reading
//! the Service's EndpointSlice from a real kube-apiserver (`common::kube`, built by
//! `peers/build`) as ServiceAccount `kube-system/calico-typha` with the README's rules; its
//! nodes from the embedded datastore. The EndpointSlice lists three replicas, none ready:
//! Typha counts every address listed for its limit, and our balancing reads the load only of
//! ready ones, so nothing outside the loopback is dialled.

// In tests a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod common;

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::Peer;
use common::calico_raw::Raw;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use typha_protocol::message::GoodbyeReason;

const BIN: &str = env!("CARGO_BIN_EXE_typha-server");
const SYNCERS: [&str; 4] = ["felix", "bgp", "tunnel-ip-allocation", "node-status"];

fn free_port() -> u16 {
    // Below the ephemeral range: never given to an outgoing connection meanwhile.
    typha_test_support::control_plane::free_port().expect("a free port")
}

/// `/metrics` of the server on `port`.
async fn metrics(port: u16) -> Option<String> {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).await.ok()?;
    Some(buf.split_once("\r\n\r\n")?.1.to_owned())
}

/// The value of `series` (name and labels, as exposed) in the server's `/metrics`.
async fn value(port: u16, series: &str) -> Option<f64> {
    let text = metrics(port).await?;
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// Waits (up to 30 s) until `series` has the value `want`.
async fn until(port: u16, series: &str, want: f64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let got = value(port, series).await;
        if got == Some(want) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{series} is {got:?}, not {want}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calico_clients_count_once_per_syncer_type_and_ours_once_per_node() {
    let Some(cp) = common::kube::default().await else {
        return;
    };
    let (_, token) = common::kube::typha_identity(&cp).await;
    let kubeconfig = cp.write_kubeconfig("typha", &token).unwrap();
    let admin = cp.admin().unwrap();
    let endpoints: Vec<_> = ["192.0.2.1", "192.0.2.2", "192.0.2.3"]
        .iter()
        .map(|ip| json!({"addresses": [ip], "conditions": {"ready": false}}))
        .collect();
    common::kube::apply(
        &admin,
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
               "metadata": {"name": "calico-typha-abcde", "namespace": "kube-system",
                            "labels": {"kubernetes.io/service-name": "calico-typha"}},
               "addressType": "IPv4",
               "ports": [{"name": "calico-typha", "port": 5473, "protocol": "TCP"}],
               "endpoints": endpoints}),
    )
    .await;
    // Four nodes.
    let dir = tempfile::tempdir().unwrap();
    let nodes: String = (0..4)
        .map(|i| {
            format!(
                "---\napiVersion: projectcalico.org/v3\nkind: Node\nmetadata:\n  name: node-{i}\nspec:\n  bgp:\n    ipv4Address: 10.0.0.{i}/24\n"
            )
        })
        .collect();
    std::fs::write(dir.path().join("nodes.yaml"), nodes).unwrap();
    let log = dir.path().join("server.log");

    let (port, health, metrics_port) = (free_port(), free_port(), free_port());
    let mut child = Command::new(BIN)
        .env_clear()
        .env("KUBECONFIG", &kubeconfig)
        .env("TYPHA_EMBEDDEDDIR", dir.path())
        .env("TYPHA_SERVERHOST", "127.0.0.1")
        .env("TYPHA_SERVERPORT", port.to_string())
        .env("TYPHA_HEALTHHOST", "127.0.0.1")
        .env("TYPHA_HEALTHPORT", health.to_string())
        .env("TYPHA_PROMETHEUSMETRICSHOST", "127.0.0.1")
        .env("TYPHA_PROMETHEUSMETRICSPORT", metrics_port.to_string())
        .env("TYPHA_CONNECTIONREBALANCINGMODE", "kubernetes")
        .env("TYPHA_MAXCONNECTIONSLOWERLIMIT", "1")
        .env("TYPHA_REBALANCEPOLLSECS", "1")
        .env("TYPHA_SHUTDOWNTIMEOUTSECS", "2")
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));

    // 3 replicas, 4 nodes: 1 + 4 × 1.2 / 2 = 3 per node type (integer arithmetic, as Go's),
    // so 12 connections in all, 3 of our protocol. (One per node, as before issue 39, would
    // have been 3 in all: 9 of the 12 calico-node connections below refused.)
    until(
        metrics_port,
        "typha_connections_limit{protocol=\"all\"}",
        12.0,
    )
    .await;
    until(
        metrics_port,
        "typha_connections_limit{protocol=\"typha-rs\"}",
        3.0,
    )
    .await;

    // Three calico-nodes with their four connections each: all taken.
    let mut calico = Vec::new();
    for node in 0..3 {
        for syncer in SYNCERS {
            calico.push(Raw::hello(addr, &format!("node-{node}"), syncer, true).await);
        }
    }
    for syncer in SYNCERS {
        until(
            metrics_port,
            &format!("typha_connections_streaming{{syncer=\"{syncer}\"}}"),
            3.0,
        )
        .await;
    }
    // A fourth node's Felix: over the limit, closed without a word; counted by its syncer
    // type, and logged.
    let mut refused = Raw::hello(addr, "node-3", "felix", true).await;
    assert!(refused.until_closed().await.is_empty());
    until(
        metrics_port,
        "typha_calico_connections_refused_total{syncer=\"felix\"}",
        1.0,
    )
    .await;
    // A client of ours over the limit of all connections gets its Goodbye.
    let mut ours = Peer::connect(addr).await;
    match ours.recv().await {
        Ok(typha_protocol::Message::Goodbye(g)) => {
            assert_eq!(g.reason, GoodbyeReason::TooManyConnections)
        }
        other => panic!("expected a Goodbye, got {other:?}"),
    }
    drop(calico);
    until(metrics_port, "typha_connections_active", 0.0).await;

    // Ours: one per node's share, though far below the limit of all connections.
    let mut agents = Vec::new();
    for i in 0..3 {
        let mut p = Peer::connect(addr).await;
        p.hello(Peer::offer(&format!("node-{i}"), None))
            .await
            .unwrap();
        agents.push(p);
    }
    let mut fourth = Peer::connect(addr).await;
    let hello = typha_protocol::handshake::ClientHandshake::new(
        Peer::offer("node-3", None),
        std::time::Instant::now(),
    )
    .hello();
    fourth
        .send(&typha_protocol::Message::ClientHello(hello))
        .await
        .unwrap();
    match fourth.recv().await {
        Ok(typha_protocol::Message::Goodbye(g)) => {
            assert_eq!(g.reason, GoodbyeReason::TooManyConnections)
        }
        other => panic!("expected a Goodbye, got {other:?}"),
    }
    until(
        metrics_port,
        "typha_connections_dropped_total{reason=\"too_many_connections\"}",
        3.0,
    )
    .await;
    // Calico's own count: refusals are its kind of drop.
    until(metrics_port, "typha_connections_dropped", 3.0).await;

    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(0));
    let text = std::fs::read_to_string(&log).unwrap();
    let line = text
        .lines()
        .find(|l| l.contains("Calico client refused"))
        .unwrap_or_else(|| panic!("no refusal logged in\n{text}"));
    // Said by the connection's span: whose connection it was.
    assert!(
        line.contains("WARN")
            && line.contains("conn{peer=127.0.0.1:")
            && line.contains("protocol=calico")
            && line.contains("node=node-3")
            && line.contains("syncer=felix"),
        "{line}"
    );
    // Our own client turned away at the limit: its line names it too.
    let ours = text
        .lines()
        .find(|l| l.contains("refused: at the limit of 3 connections of our own protocol"))
        .unwrap_or_else(|| panic!("no refusal of ours logged in\n{text}"));
    assert!(
        ours.contains("conn{peer=127.0.0.1:") && ours.contains("protocol=typha-rs"),
        "{ours}"
    );
    assert!(
        text.lines()
            .any(|l| l.contains("connection limits") && l.contains("all=12")),
        "{text}"
    );
}
