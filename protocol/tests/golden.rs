//! Golden files pin the wire format of protocol v1: one uncompressed frame per message type.
//!
//! If this test fails, the encoding changed. That breaks every deployed peer, so it is almost
//! always a bug. A deliberate change needs a new protocol version (new golden directory); to
//! regenerate files after adding a new message type, run with `UPDATE_GOLDEN=1`.

// In tests a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod common;

use std::path::PathBuf;

use bytes::BytesMut;
use typha_protocol::{FrameDecoder, FrameEncoder, Limits, Message};

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden/v1")
}

fn decode_one(bytes: &[u8]) -> Message {
    let mut dec = FrameDecoder::new(Limits::CLIENT_INBOUND);
    let mut buf = BytesMut::from(bytes);
    let msg = dec
        .decode(&mut buf)
        .expect("golden frame decodes")
        .expect("a whole frame");
    assert!(buf.is_empty(), "golden file holds exactly one frame");
    msg
}

#[test]
fn every_message_type_has_a_golden_file() {
    let names: Vec<_> = common::canonical_messages()
        .iter()
        .map(|(_, m)| m.message_type())
        .collect();
    for ty in typha_protocol::MessageType::ALL {
        assert!(names.contains(&ty), "no canonical message for {ty}");
    }
}

#[test]
fn encoding_matches_golden_files() {
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let mut enc = FrameEncoder::uncompressed();
    for (name, msg) in common::canonical_messages() {
        let path = golden_dir().join(format!("{name}.bin"));
        let bytes = enc.encode(&msg).unwrap();
        if update && !path.exists() {
            std::fs::write(&path, &bytes).unwrap();
        }
        let golden = std::fs::read(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (UPDATE_GOLDEN=1 creates missing files)",
                path.display()
            )
        });
        assert!(
            golden == bytes[..],
            "{name}: encoding drifted from {}\n golden: {:02x?}\n    now: {:02x?}",
            path.display(),
            &golden[..golden.len().min(64)],
            &bytes[..bytes.len().min(64)],
        );
        // And the committed bytes still decode to the same message.
        assert_eq!(decode_one(&golden), msg, "{name}");
    }
}

/// Compressed output may legitimately differ between zstd releases, so a compressed golden
/// frame is checked for decoding only: frames written by older builds must always decode.
#[test]
fn compressed_golden_frame_still_decodes() {
    let path = golden_dir().join("deltas.zstd.bin");
    let (_, msg) = common::canonical_messages()
        .into_iter()
        .find(|(n, _)| *n == "deltas")
        .unwrap();
    if std::env::var_os("UPDATE_GOLDEN").is_some() && !path.exists() {
        let mut enc = FrameEncoder::zstd(1).unwrap().with_min_compress_len(0);
        std::fs::write(&path, enc.encode(&msg).unwrap()).unwrap();
    }
    let golden = std::fs::read(&path).unwrap();
    assert_eq!(
        golden[5] & typha_protocol::frame::FLAG_ZSTD,
        typha_protocol::frame::FLAG_ZSTD
    );
    assert_eq!(decode_one(&golden), msg);
}

#[test]
fn golden_values_decode_as_their_typed_values() {
    // The snapshot chunk golden file carries one value of every type: decoding the committed
    // bytes must give back the typed values, not just equal bytes.
    let golden = std::fs::read(golden_dir().join("snapshot_chunk.bin")).unwrap();
    let Message::SnapshotChunk(chunk) = decode_one(&golden) else {
        panic!("not a snapshot chunk")
    };
    let kvs = common::canonical_kvs();
    assert_eq!(chunk.updates.len(), kvs.len());
    for (u, (k, v)) in chunk.updates.iter().zip(kvs) {
        assert_eq!(u.key.key(), k);
        assert_eq!(u.decode_value().unwrap(), Some(v));
    }
}
