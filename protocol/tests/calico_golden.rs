//! The Calico codec against the golden files our Go reference peer wrote with Go's own
//! `encoding/gob` and golang/snappy (`tests/golden/calico`, see its README):
//! - every `.bin` decodes, fed whole and fed a byte at a time;
//! - our encoder reproduces the preambles, every `value/` file, and the whole
//!   encode-once session `session/shared-snappy-server.bin`, byte for byte (our ids are the
//!   peer's, so the bytes must be equal; Go's client reading that session is the peer's own
//!   test).

// In tests a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::path::PathBuf;

use bytes::BytesMut;
use typha_protocol::calico::gob::{self, Limits};
use typha_protocol::calico::messages::{
    self, GoTime, Message, MessageKind, Revision, Side, SyncStatus, UpdateType, schema,
};
use typha_protocol::calico::snappy::{self, STREAM_IDENTIFIER};
use typha_protocol::calico::{Compression, StreamDecoder};

fn golden(path: &str) -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden/calico")
        .join(path);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

const KINDS: [&str; 8] = [
    "MsgClientHello",
    "MsgServerHello",
    "MsgDecoderRestart",
    "MsgACK",
    "MsgSyncStatus",
    "MsgPing",
    "MsgPong",
    "MsgKVs",
];

fn side_of(name: &str) -> Side {
    match name {
        "MsgClientHello" | "MsgACK" | "MsgPong" => Side::Client,
        _ => Side::Server,
    }
}

/// Reads a whole session the way a client (or server) would: restarting the decoder on each
/// `MsgDecoderRestart`. `step` bytes are fed at a time.
fn read_session(bytes: &[u8], limits: Limits, step: usize) -> Vec<Message> {
    let mut dec = StreamDecoder::new(limits);
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for piece in bytes.chunks(step) {
        buf.extend_from_slice(piece);
        while let Some(m) = dec.decode(&mut buf).unwrap() {
            if let Message::DecoderRestart(r) = &m {
                dec.restart(Compression::from_name(&r.compression_algorithm).unwrap())
                    .unwrap();
            }
            out.push(m);
        }
    }
    assert!(buf.is_empty(), "{} bytes left", buf.len());
    out
}

fn kinds(msgs: &[Message]) -> Vec<MessageKind> {
    msgs.iter().map(Message::kind).collect()
}

#[test]
fn fresh_files_decode_one_message_each_whole_and_byte_by_byte() {
    for name in KINDS {
        let bytes = golden(&format!("fresh/{name}.bin"));
        for step in [bytes.len(), 1, 7] {
            let msgs = read_session(&bytes, Limits::CLIENT_INBOUND, step);
            assert_eq!(msgs.len(), 1, "{name}");
            assert_eq!(msgs[0].kind().go_name(), name);
        }
    }
}

#[test]
fn fresh_and_value_files_hold_the_same_messages() {
    for name in KINDS {
        let fresh = read_session(
            &golden(&format!("fresh/{name}.bin")),
            Limits::CLIENT_INBOUND,
            1,
        );
        let mut stream = side_of(name).preamble().to_vec();
        stream.extend_from_slice(&golden(&format!("value/{name}.bin")));
        let value = read_session(&stream, Limits::CLIENT_INBOUND, 1);
        assert_eq!(fresh, value, "{name}");
    }
}

#[test]
fn preambles_are_the_golden_bytes_and_decode_to_our_table() {
    assert_eq!(
        &Side::Server.preamble()[..],
        &golden("preamble/server.bin")[..]
    );
    assert_eq!(
        &Side::Client.preamble()[..],
        &golden("preamble/client.bin")[..]
    );
    let ours = schema::table();
    for side in [Side::Server, Side::Client] {
        let mut dec = gob::Decoder::new(Limits::SERVER_INBOUND);
        let mut buf = BytesMut::from(&side.preamble()[..]);
        assert_eq!(dec.decode(&mut buf).unwrap(), None);
        assert!(buf.is_empty(), "definitions are consumed as they arrive");
        assert_eq!(dec.types().len(), side.type_ids().len());
        for (id, wt) in dec.types().iter() {
            assert_eq!(Some(wt), ours.get(id), "{id}");
        }
    }
}

#[test]
fn our_encoder_writes_every_value_file() {
    for name in KINDS {
        let golden_value = golden(&format!("value/{name}.bin"));
        let mut stream = side_of(name).preamble().to_vec();
        stream.extend_from_slice(&golden_value);
        let msg = read_session(&stream, Limits::CLIENT_INBOUND, stream.len()).remove(0);
        let ours = messages::encode(side_of(name), &msg).unwrap();
        assert_eq!(&ours[..], &golden_value[..], "{name}");
    }
}

#[test]
fn golden_contents_are_the_fixed_ones() {
    let msgs = read_session(
        &golden("session/calico-snappy-client.bin"),
        Limits::SERVER_INBOUND,
        1,
    );
    let Message::ClientHello(hello) = &msgs[0] else {
        panic!("{msgs:?}")
    };
    assert_eq!(hello.hostname, "node-1");
    assert_eq!(hello.syncer_type, "felix");
    assert_eq!(hello.version, "v3.32.0");
    assert!(hello.supports_decoder_restart && hello.supports_modern_policy_keys);
    assert_eq!(hello.supported_compression_algorithms, ["snappy"]);
    assert_eq!(hello.client_conn_id, 0x1234_5678_0000_0001);
    let Message::Pong(pong) = &msgs[3] else {
        panic!("{msgs:?}")
    };
    // 2026-11-24T12:00:00.123456789Z, in UTC.
    assert_eq!(
        pong.ping_timestamp,
        GoTime::from_unix(1_795_521_600, 123_456_789)
    );
    assert!(pong.pong_timestamp.is_zero());

    let msgs = read_session(
        &golden("session/calico-snappy-server.bin"),
        Limits::CLIENT_INBOUND,
        1,
    );
    let Message::ServerHello(hello) = &msgs[0] else {
        panic!("{msgs:?}")
    };
    assert_eq!(hello.server_conn_id, 0x0abc_def0_0000_0001);
    assert!(hello.supports_node_resource_updates);
    let Message::Kvs(snapshot) = &msgs[2] else {
        panic!("{msgs:?}")
    };
    assert!(snapshot.iter().all(|u| u.update_type == UpdateType::New));
    let node = snapshot.iter().find(|u| u.key.contains("/nodes/")).unwrap();
    assert_eq!(node.v3_resource_version, "1002");
    assert_eq!(node.revision, Revision::String("1002".into()));
    let Message::Kvs(deltas) = &msgs[5] else {
        panic!("{msgs:?}")
    };
    let deleted = deltas.iter().find(|u| u.value.is_empty()).unwrap();
    assert_eq!(deleted.update_type, UpdateType::Deleted);
    assert_eq!(deleted.revision, Revision::String("1004".into()));
    assert_eq!(msgs[4], Message::SyncStatus(SyncStatus::InSync));
}

#[test]
fn sessions_decode_and_agree() {
    let snappy = read_session(
        &golden("session/calico-snappy-server.bin"),
        Limits::CLIENT_INBOUND,
        1,
    );
    use MessageKind::*;
    assert_eq!(
        kinds(&snappy),
        [
            ServerHello,
            DecoderRestart,
            Kvs,
            DecoderRestart,
            SyncStatus,
            Kvs,
            Ping
        ]
    );
    for step in [1, 5, 4096] {
        let shared = read_session(
            &golden("session/shared-snappy-server.bin"),
            Limits::CLIENT_INBOUND,
            step,
        );
        assert_eq!(shared, snappy);
    }
    let plain = read_session(
        &golden("session/calico-plain-server.bin"),
        Limits::CLIENT_INBOUND,
        3,
    );
    assert_eq!(kinds(&plain)[0], ServerHello);
    assert!(
        !plain
            .iter()
            .any(|m| matches!(m, Message::DecoderRestart(_)))
    );
    // The same KVs arrive, however they were sent.
    let all_kvs = |msgs: &[Message]| -> Vec<_> {
        msgs.iter()
            .filter_map(|m| match m {
                Message::Kvs(k) => Some(k.clone()),
                _ => None,
            })
            .flatten()
            .collect()
    };
    assert_eq!(all_kvs(&plain), all_kvs(&snappy));

    let client = read_session(
        &golden("session/calico-snappy-client.bin"),
        Limits::SERVER_INBOUND,
        1,
    );
    assert_eq!(kinds(&client), [ClientHello, Ack, Ack, Pong]);
    let client = read_session(
        &golden("session/calico-plain-client.bin"),
        Limits::SERVER_INBOUND,
        1,
    );
    assert_eq!(kinds(&client)[0], ClientHello);
}

/// The whole encode-once session, built the way our server will build it: per stream the
/// constant identifier and preamble chunk, then per message chunks encoded once.
#[test]
fn our_encoder_builds_the_shared_snappy_session_byte_for_byte() {
    let golden_bytes = golden("session/shared-snappy-server.bin");
    let msgs = read_session(&golden_bytes, Limits::CLIENT_INBOUND, golden_bytes.len());
    let value = |m: &Message| messages::encode(Side::Server, m).unwrap();
    let chunks = |b: &[u8]| snappy::encode_chunks(b);
    let preamble = Side::Server.preamble();

    let mut ours = preamble.to_vec();
    ours.extend_from_slice(&value(&msgs[0]));
    ours.extend_from_slice(&value(&msgs[1]));
    for stream in [&msgs[2..4], &msgs[4..7]] {
        ours.extend_from_slice(STREAM_IDENTIFIER);
        ours.extend_from_slice(&chunks(&preamble));
        for m in stream {
            ours.extend_from_slice(&chunks(&value(m)));
        }
    }
    assert_eq!(ours.len(), golden_bytes.len());
    assert_eq!(ours, golden_bytes);
}

#[test]
fn snappy_chunks_of_golden_sessions_decode_with_snap_too() {
    // Cross-check our framing against the snap crate's own std::io reader on the snapshot
    // stream of the Typha-style session (its region starts at the second identifier).
    let bytes = golden("session/calico-snappy-server.bin");
    let start = bytes
        .windows(STREAM_IDENTIFIER.len())
        .position(|w| w == STREAM_IDENTIFIER)
        .unwrap();
    let end = start
        + 1
        + bytes[start + 1..]
            .windows(STREAM_IDENTIFIER.len())
            .position(|w| w == STREAM_IDENTIFIER)
            .unwrap();
    let region = &bytes[start..end];
    let mut theirs = Vec::new();
    std::io::Read::read_to_end(&mut snap::read::FrameDecoder::new(region), &mut theirs).unwrap();
    let mut ours = BytesMut::new();
    let mut src = BytesMut::from(region);
    let mut dec = snappy::Decoder::new();
    while dec.decode_chunk(&mut src, &mut ours).unwrap() {}
    assert!(src.is_empty());
    assert_eq!(&ours[..], &theirs[..]);
}
