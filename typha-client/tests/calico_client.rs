//! The Rust Calico-protocol client ([`typha_client::calico`]) against Go's own gob encoder:
//! our Go reference peer (`peers/calico-peer`, built by `peers/build`) serves each scripted
//! session in `peers/calico-peer/testdata/` twice, once to its own Go client (Go's gob and
//! golang/snappy on both ends) and once to ours; the two end states must be equal key for
//! key (values compared as JSON where they are JSON), with the same revisions, resource
//! versions and update types, the same sync statuses and the same number of decoder restarts.
//! A third connection runs the skimming session ([`typha_client::calico::run_skimming`]),
//! which must end with the same keys and value bytes.

// In tests a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use typha_client::calico::{CalicoHello, CalicoState, Event, Until, run, run_skimming};
use typha_protocol::calico::messages::UpdateType;

fn peer() -> Option<PathBuf> {
    let dir = std::env::var_os("TYPHA_PEERS_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/peers"),
        PathBuf::from,
    );
    let p = dir.join("bin/calico-peer");
    if p.is_file() {
        Some(p)
    } else if std::env::var_os("TYPHA_TEST_ALLOW_SKIP").is_some() {
        eprintln!(
            "skipped: no calico-peer at {} (run peers/build)",
            p.display()
        );
        None
    } else {
        panic!(
            "no calico-peer at {} (run peers/build). Or set TYPHA_TEST_ALLOW_SKIP=1 to skip.",
            p.display()
        )
    }
}

fn update_type(t: UpdateType) -> &'static str {
    match t {
        UpdateType::New => "new",
        UpdateType::Updated => "updated",
        UpdateType::Deleted => "deleted",
        _ => "unknown",
    }
}

/// A value as JSON if it is JSON, else as a string.
fn as_value(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.to_owned()))
}

/// Our state in the Go client's JSON shape.
fn ours(st: &CalicoState) -> Value {
    let kvs: serde_json::Map<String, Value> = st
        .kvs
        .iter()
        .map(|(k, kv)| {
            let mut o = serde_json::json!({
                "value": as_value(&String::from_utf8_lossy(&kv.value)),
                "revision": kv.revision,
                "updateType": update_type(kv.update_type),
            });
            if !kv.v3_resource_version.is_empty() {
                o["v3ResourceVersion"] = kv.v3_resource_version.clone().into();
            }
            (k.clone(), o)
        })
        .collect();
    Value::Object(kvs)
}

fn theirs(out: &Value) -> Value {
    let kvs: serde_json::Map<String, Value> = out["kvs"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, kv)| {
            let mut o = serde_json::json!({
                "value": as_value(kv["value"].as_str().unwrap()),
                "revision": kv["revision"],
                "updateType": kv["updateType"],
            });
            if let Some(v) = kv.get("v3ResourceVersion") {
                o["v3ResourceVersion"] = v.clone();
            }
            (k.clone(), o)
        })
        .collect();
    Value::Object(kvs)
}

async fn differential(script: &str, snappy: bool, until: Until) {
    let Some(peer) = peer() else { return };
    let dir = tempfile::tempdir().unwrap();
    let addr_file = dir.path().join("addr");
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../peers/calico-peer/testdata")
        .join(script);
    let mut server = Command::new(&peer)
        .arg("serve")
        .arg("--script")
        .arg(&script)
        .arg("--addr-file")
        .arg(&addr_file)
        .args(["--connections", "3"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = loop {
        if let Ok(a) = std::fs::read_to_string(&addr_file)
            && !a.trim().is_empty()
        {
            break a.trim().to_owned();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };

    // Go's client first. The scripts end by closing the connection, which the Go client
    // reports as its end; the state file is what counts.
    let out_file = dir.path().join("go.json");
    let mut go = Command::new(&peer);
    go.args(["client", "--addr", &addr, "--out"])
        .arg(&out_file)
        .args(["--duration", "10s", "--quiet"]);
    if !snappy {
        go.arg("--no-decoder-restart");
    }
    if until == Until::InSync {
        go.arg("--until-in-sync");
    }
    go.status().unwrap();
    let go_out: Value = serde_json::from_str(&std::fs::read_to_string(&out_file).unwrap()).unwrap();

    // Then ours, to the same script.
    let tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let mut hello = CalicoHello::calico_node("vm", "felix");
    hello.snappy = snappy;
    let state = run(tcp, &hello, until, Duration::from_secs(30))
        .await
        .unwrap();

    // And the skimming session (the fleet's cheap nodes) to the same script: the same keys
    // and value bytes, with none of the typed updates built.
    let tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let mut skimmed: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut kvs_events = 0;
    run_skimming(
        tcp,
        &hello,
        until,
        Duration::from_secs(30),
        |e| {
            if matches!(e, Event::Kvs(_)) {
                kvs_events += 1;
            }
        },
        |k, v| {
            let k = String::from_utf8(k.to_vec()).unwrap();
            if v.is_empty() {
                skimmed.remove(&k);
            } else {
                skimmed.insert(k, v.to_vec());
            }
        },
    )
    .await
    .unwrap();
    let typed: BTreeMap<String, Vec<u8>> = state
        .kvs
        .iter()
        .map(|(k, v)| (k.clone(), v.value.to_vec()))
        .collect();
    assert_eq!(skimmed, typed, "the skimming session's keys and values");
    assert_eq!(
        kvs_events, 0,
        "a skimming session hands updates over one by one"
    );

    let status = server.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(server.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(
        status.success(),
        "the scripted server saw a difference: {err}"
    );

    assert!(!state.kvs.is_empty());
    assert_eq!(ours(&state), theirs(&go_out), "end states differ");
    let go_statuses: Vec<String> = go_out["summary"]["statusTransitions"]
        .as_array()
        .map(|a| a.iter().map(|s| s.as_str().unwrap().to_owned()).collect())
        .unwrap_or_default();
    let our_statuses: Vec<String> = state.statuses.iter().map(|s| format!("{s:?}")).collect();
    assert_eq!(our_statuses, go_statuses, "statuses");
    let go_restarts = go_out["summary"]["decoderRestarts"]
        .as_array()
        .map_or(0, Vec::len);
    assert_eq!(
        state.decoder_restarts as usize, go_restarts,
        "decoder restarts"
    );
    assert!(state.pongs >= 1, "the script pings and expects a pong");
}

#[tokio::test]
async fn a_snappy_session_with_a_pre_encoded_snapshot_ends_as_gos_client_ends() {
    // The server closes after its last ping.
    differential(
        "typical.json",
        true,
        Until::ClosedOr(Duration::from_secs(10)),
    )
    .await;
}

#[tokio::test]
async fn a_plain_session_ends_as_gos_client_ends() {
    // The server waits for the client to leave once in sync.
    differential("plain.json", false, Until::InSync).await;
}
