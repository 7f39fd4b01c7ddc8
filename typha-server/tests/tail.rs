//! `typha-tail`, the real program in a process of its own, against a real server: the summary,
//! JSON lines, and one-line errors for an unreachable server, refused TLS and a version
//! mismatch.

// In tests a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;

use typha_server::config::Config;
use typha_server::datastore::embedded::Embedded;
use typha_server::server::start;

/// Not a test: the tests start this test binary with `TYPHA_TEST_RUN_TAIL` set to get a
/// `typha-tail` process, the very function its binary calls (the binary belongs to
/// typha-client, so its path is not visible to this package's tests). Arguments come in that
/// variable, one per line.
#[test]
fn typha_tail_process() {
    let Some(args) = std::env::var_os("TYPHA_TEST_RUN_TAIL") else {
        return;
    };
    let args = args.into_string().unwrap();
    let code = typha_client::tail::main_from(std::iter::once("typha-tail").chain(args.lines()));
    let code = if code == std::process::ExitCode::SUCCESS {
        0
    } else if code == std::process::ExitCode::from(64) {
        64
    } else if code == std::process::ExitCode::from(69) {
        69
    } else {
        1
    };
    std::process::exit(code);
}

async fn server(
    tls: Option<typha_server::tls::TlsConfig>,
) -> (typha_server::server::RunningServer, Embedded) {
    let store = Embedded::new();
    store.bulk_load(
        typha_test_support::sample::Spec {
            nodes: 3,
            pods_per_node: 4,
            ..Default::default()
        }
        .resources(),
    );
    let mut cfg = Config::for_tests();
    cfg.tls = tls;
    (start(cfg, Arc::new(store.clone())).await.unwrap(), store)
}

/// `typha-tail` with these arguments, as a process.
fn tail<S: AsRef<str>>(args: &[S]) -> Command {
    let args: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "typha_tail_process", "--nocapture", "--quiet"])
        .args(["--test-threads", "1"])
        .env("TYPHA_TEST_RUN_TAIL", args.join("\n"))
        .env_remove("FELIX_TYPHAADDR");
    cmd
}

/// The test harness's own first lines on stdout, before `typha-tail` writes anything.
const HARNESS_PREAMBLE: [&str; 2] = ["", "running 1 test"];

fn run(args: &[&str]) -> std::process::Output {
    tail(args).output().unwrap()
}

#[tokio::test]
async fn summary_counts_key_types_and_prints_the_digest() {
    let (srv, _store) = server(None).await;
    let addr = srv.addr.to_string();
    let out = tokio::task::spawn_blocking(move || run(&["--addr", &addr, "--summary"]))
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("status in-sync"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("workload-endpoint") && l.trim_end().ends_with(" 12")),
        "{text}"
    );
    let digest = format!("{:016x}", srv.cache.latest().digest);
    assert!(text.contains(&format!("digest {digest}")), "{text}");
    srv.shutdown().await;
}

#[tokio::test]
async fn json_lines_carry_decoded_values() {
    let (srv, _store) = server(None).await;
    let mut child = tail(&["--addr", &srv.addr.to_string(), "--json"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let lines = tokio::task::spawn_blocking(move || {
        BufReader::new(stdout)
            .lines()
            .take(HARNESS_PREAMBLE.len() + 40)
            .map(|l| l.unwrap())
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    child.kill().unwrap();
    let _ = child.wait();
    let (preamble, lines) = lines.split_at(HARNESS_PREAMBLE.len());
    assert_eq!(preamble, HARNESS_PREAMBLE);
    let parsed: Vec<serde_json::Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(parsed[0]["type"], "status");
    let wep = parsed
        .iter()
        .find(|v| v["key_type"] == "workload-endpoint")
        .expect("a workload endpoint in the first lines");
    assert_eq!(wep["kind"], "new");
    assert!(
        wep["value"]["WorkloadEndpoint"]["name"]
            .as_str()
            .unwrap()
            .starts_with("cali")
    );
    srv.shutdown().await;
}

fn one_line_error(out: &std::process::Output) -> String {
    assert!(!out.status.success(), "{out:?}");
    let err = String::from_utf8(out.stderr.clone()).unwrap();
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    err
}

#[test]
fn unreachable_server_is_one_line() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let err = one_line_error(&run(&["--addr", &format!("127.0.0.1:{port}"), "--summary"]));
    assert!(err.contains("cannot connect"), "{err}");
    let err = one_line_error(&run(&["--addr", "no-such-host.invalid:5473"]));
    assert!(err.contains("could be resolved"), "{err}");
}

#[tokio::test]
async fn refused_tls_is_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let ca = typha_server::pki::Ca::new("ca").unwrap();
    let s = ca.server("typha-server", &["localhost"]).unwrap();
    let w = |n: &str, b: &str| {
        let p = dir.path().join(n);
        std::fs::write(&p, b).unwrap();
        p.to_str().unwrap().to_owned()
    };
    let tls = typha_server::tls::TlsConfig {
        cert_file: w("s.crt", &s.cert_pem).into(),
        key_file: w("s.key", &s.key_pem).into(),
        ca_file: w("ca.crt", &ca.cert_pem).into(),
        client_cns: vec!["typha-client".into()],
        client_uri_sans: vec![],
    };
    let (srv, _store) = server(Some(tls)).await;
    // A client certificate whose CN the server does not allow.
    let c = ca.client("not-allowed", None).unwrap();
    let args = vec![
        "--addr".to_owned(),
        format!("localhost:{}", srv.addr.port()),
        "--summary".into(),
        "--ca-file".into(),
        w("ca2.crt", &ca.cert_pem),
        "--cert-file".into(),
        w("c.crt", &c.cert_pem),
        "--key-file".into(),
        w("c.key", &c.key_pem),
        "--server-cn".into(),
        "typha-server".into(),
    ];
    let out = tokio::task::spawn_blocking(move || tail(&args).output().unwrap())
        .await
        .unwrap();
    let err = one_line_error(&out);
    assert!(err.contains("TLS"), "{err}");
    srv.shutdown().await;
}

#[tokio::test]
async fn version_mismatch_is_one_line() {
    // A server from the future: it speaks only protocol v9 and refuses everyone else.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        loop {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = bytes::BytesMut::new();
            let mut dec = typha_protocol::FrameDecoder::new(typha_protocol::Limits::SERVER_INBOUND);
            let hello = loop {
                if let Some(m) = dec.decode(&mut buf).unwrap() {
                    break m;
                }
                if s.read_buf(&mut buf).await.unwrap() == 0 {
                    return;
                }
            };
            let mut offer = typha_protocol::handshake::ServerOffer::new(typha_protocol::Epoch(1));
            offer.versions = vec![typha_protocol::ProtocolVersion(9)];
            let rej =
                typha_protocol::handshake::ServerHandshake::new(offer, std::time::Instant::now())
                    .handle_message(hello, std::time::Instant::now())
                    .unwrap_err();
            let bye = typha_protocol::FrameEncoder::uncompressed()
                .encode(&typha_protocol::Message::Goodbye(rej.goodbye.unwrap()))
                .unwrap();
            let _ = s.write_all(&bye).await;
        }
    });
    let out = tokio::task::spawn_blocking(move || run(&["--addr", &addr.to_string(), "--summary"]))
        .await
        .unwrap();
    let err = one_line_error(&out);
    assert!(err.contains("no protocol version in common"), "{err}");
}
