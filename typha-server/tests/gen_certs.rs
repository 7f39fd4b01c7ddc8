//! `typha-server gen-certs`, the operator command that makes the TLS material for clusters
//! without cert-manager: the files it writes serve mutual TLS as they are, the Secrets hold the
//! same material in cert-manager's layout, renewal with the existing CA keeps every node's
//! trust, and nothing is ever overwritten or signed with a key that is not the CA's.

// In tests a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod common;

use std::path::Path;
use std::process::Command;

use base64::Engine as _;
use common::{Peer, cluster, expected_digest, server, tls_client};
use typha_server::config::Config;
use typha_server::pki::Issued;
use typha_server::tls::TlsConfig;

const BIN: &str = env!("CARGO_BIN_EXE_typha-server");

/// Runs `typha-server gen-certs <args>`: exit code and stderr.
fn gen_certs(args: &[&str]) -> (i32, String) {
    let out = Command::new(BIN)
        .arg("gen-certs")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn read(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap()
}

fn issued(dir: &Path, name: &str) -> Issued {
    Issued {
        cert_pem: read(dir, &format!("{name}.crt")),
        key_pem: read(dir, &format!("{name}.key")),
    }
}

#[tokio::test]
async fn the_files_serve_mutual_tls_and_renewal_with_the_same_ca_keeps_trust() {
    let tmp = tempfile::tempdir().unwrap();
    let first = tmp.path().join("first");
    let manifest = tmp.path().join("secrets.yaml");
    let (code, err) = gen_certs(&[
        "--out",
        first.to_str().unwrap(),
        "--secret-manifest",
        manifest.to_str().unwrap(),
        "--namespace",
        "calico-system",
        // The test's peer checks the name it dialled (our client checks the CN).
        "--server-name",
        "localhost",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("wrote"), "{err}");
    // Keys are private to their owner.
    for key in ["ca.key", "server.key", "client.key"] {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(first.join(key))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "{key} is readable by others: {mode:o}");
    }

    // The server serves with the files as they are; the client certificate is admitted.
    let mut cfg = Config::for_tests();
    cfg.tls = Some(TlsConfig {
        cert_file: first.join("server.crt"),
        key_file: first.join("server.key"),
        ca_file: first.join("ca.crt"),
        client_cns: vec!["typha-client".into()],
        client_uri_sans: vec![],
    });
    let (srv, store) = server(cfg).await;
    store.bulk_load(cluster(2, 3));
    let ca = read(&first, "ca.crt");
    let mut a = Peer::connect_tls(srv.addr, tls_client(&ca, Some(&issued(&first, "client"))))
        .await
        .unwrap();
    a.hello(Peer::offer("a", None)).await.unwrap();
    a.sync_to(&srv).await;
    assert_eq!(a.digest.combined(), expected_digest(&store).0);

    // Renewed with the same CA: no new CA file, and the new client certificate is admitted by
    // a server that still trusts only the first CA.
    let renewed = tmp.path().join("renewed");
    let (code, err) = gen_certs(&[
        "--out",
        renewed.to_str().unwrap(),
        "--ca-cert",
        first.join("ca.crt").to_str().unwrap(),
        "--ca-key",
        first.join("ca.key").to_str().unwrap(),
        "--days",
        "30",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        !renewed.join("ca.key").exists(),
        "the CA's key is not copied"
    );
    assert_eq!(read(&renewed, "ca.crt"), ca, "the same CA");
    let mut b = Peer::connect_tls(srv.addr, tls_client(&ca, Some(&issued(&renewed, "client"))))
        .await
        .unwrap();
    b.hello(Peer::offer("b", None)).await.unwrap();
    b.sync_to(&srv).await;

    // A certificate from another gen-certs run (another CA) is turned away.
    let other = tmp.path().join("other");
    assert_eq!(gen_certs(&["--out", other.to_str().unwrap()]).0, 0);
    let mut c = Peer::connect_tls(srv.addr, tls_client(&ca, Some(&issued(&other, "client"))))
        .await
        .unwrap();
    assert!(
        c.hello(Peer::offer("c", None)).await.is_err(),
        "a client certificate of another CA must be refused"
    );
    srv.shutdown().await;

    // The Secrets hold the same material, in cert-manager's layout.
    let text = std::fs::read_to_string(&manifest).unwrap();
    assert!(
        !text.contains(&base64(&read(&first, "ca.key"))),
        "no CA key in a Secret"
    );
    let docs: Vec<serde_json::Value> = text
        .split("\n---\n")
        .filter(|d| d.contains("kind: Secret"))
        .map(|d| serde_norway::from_str(d).unwrap())
        .collect();
    assert_eq!(docs.len(), 2, "{text}");
    for (doc, (name, files)) in docs.iter().zip([
        ("calico-typha-server-tls", "server"),
        ("calico-typha-agent-tls", "client"),
    ]) {
        assert_eq!(doc["metadata"]["name"], name);
        assert_eq!(doc["metadata"]["namespace"], "calico-system");
        assert_eq!(doc["type"], "kubernetes.io/tls");
        let field = |k: &str| {
            let b = doc["data"][k].as_str().unwrap();
            String::from_utf8(base64::engine::general_purpose::STANDARD.decode(b).unwrap()).unwrap()
        };
        assert_eq!(field("tls.crt"), read(&first, &format!("{files}.crt")));
        assert_eq!(field("tls.key"), read(&first, &format!("{files}.key")));
        assert_eq!(field("ca.crt"), ca);
    }
}

fn base64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

#[test]
fn nothing_is_overwritten_and_a_key_that_is_not_the_cas_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("certs");
    assert_eq!(gen_certs(&["--out", dir.to_str().unwrap()]).0, 0);
    let before = read(&dir, "server.key");

    let (code, err) = gen_certs(&["--out", dir.to_str().unwrap()]);
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("exists already"), "{err}");
    assert_eq!(read(&dir, "server.key"), before, "the key is untouched");

    // Signing with the server's key instead of the CA's: refused before anything is written.
    let out = tmp.path().join("renewed");
    let (code, err) = gen_certs(&[
        "--out",
        out.to_str().unwrap(),
        "--ca-cert",
        dir.join("ca.crt").to_str().unwrap(),
        "--ca-key",
        dir.join("server.key").to_str().unwrap(),
    ]);
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("does not belong"), "{err}");
    assert!(!out.join("server.crt").exists());

    // A leaf is not a CA.
    let (code, err) = gen_certs(&[
        "--out",
        out.to_str().unwrap(),
        "--ca-cert",
        dir.join("server.crt").to_str().unwrap(),
        "--ca-key",
        dir.join("server.key").to_str().unwrap(),
    ]);
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("not a CA"), "{err}");

    // No output asked for: says how to ask.
    let (code, err) = gen_certs(&[]);
    assert_eq!(code, 64);
    assert!(err.contains("--out"), "{err}");
}
