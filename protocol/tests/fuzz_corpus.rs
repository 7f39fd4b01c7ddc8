//! Runs every fuzz target's checked-in corpus (`protocol/fuzz/corpus/<target>/`) on every
//! `cargo test`, so a crash found by fuzzing (added to the corpus, see docs/fuzzing.md) stays
//! fixed: each input through the same checks the libFuzzer target runs
//! (`protocol/fuzz/checks/`), which is libFuzzer's `-runs=0` replay without the sanitizer
//! build; and, for the two decoders, the valid seeds must decode cleanly to their end.

// In tests a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod calico_streamed;

#[path = "../fuzz/checks/calico_decode.rs"]
mod calico_decode;
#[path = "../fuzz/checks/decode_frame.rs"]
mod decode_frame;
#[path = "../fuzz/checks/handshake.rs"]
mod handshake;
#[path = "../fuzz/checks/selector.rs"]
mod selector;

use std::path::PathBuf;

use bytes::BytesMut;
use typha_protocol::{FrameDecoder, FrameEncoder, Limits};

/// Runs every input of `target`'s corpus through its fuzz check.
fn replay(target: &str, check: fn(&[u8])) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        let outcome = std::panic::catch_unwind(|| check(&data));
        assert!(
            outcome.is_ok(),
            "{target}: {} fails its check",
            path.display()
        );
        n += 1;
    }
    assert!(n > 0, "{target}: no corpus in {}", dir.display());
}

#[test]
fn every_corpus_passes_its_fuzz_check() {
    replay("decode_frame", decode_frame::run);
    replay("calico_decode", calico_decode::run);
    replay("selector", selector::run);
    replay("handshake", handshake::run);
}

#[test]
fn seed_corpus_decodes_without_panics_and_valid_seeds_decode_cleanly() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/decode_frame");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let bytes = std::fs::read(&path).unwrap();
        let mut dec = FrameDecoder::new(Limits::CLIENT_INBOUND);
        let mut buf = BytesMut::from(&bytes[..]);
        let mut messages = Vec::new();
        let err = loop {
            match dec.decode(&mut buf) {
                Ok(Some(m)) => messages.push(m),
                Ok(None) => break None,
                Err(e) => break Some(e),
            }
        };
        // Malformed seeds (`bad_*`) only have to be survived: a flipped byte inside zstd
        // literals, for one, can still decode (frames carry no checksum; TLS and the state
        // digest catch corruption).
        if !name.starts_with("bad_") {
            assert!(err.is_none(), "{name}: {err:?}");
            assert!(buf.is_empty(), "{name}: {} bytes left over", buf.len());
            assert!(!messages.is_empty(), "{name}: no message");
            // Round trip, as the fuzz target checks.
            let mut enc = FrameEncoder::uncompressed();
            for m in messages {
                let again = enc.encode(&m).unwrap();
                let mut buf = BytesMut::from(&again[..]);
                assert_eq!(dec.decode(&mut buf).unwrap(), Some(m), "{name}");
            }
        }
        seen += 1;
    }
    assert!(seen >= 10, "only {seen} seeds in {}", dir.display());
}

/// The same for the Calico-protocol target's seeds (`corpus/calico_decode`): read as a client
/// reads a server (restarting on each `MsgDecoderRestart`), the valid seeds decode to the end
/// with every byte consumed; the `bad_*` ones only have to be survived.
#[test]
fn calico_seed_corpus_decodes_without_panics_and_valid_seeds_decode_cleanly() {
    use typha_protocol::calico::gob::Limits as GobLimits;
    use typha_protocol::calico::messages::Message as CalicoMessage;
    use typha_protocol::calico::{Compression, StreamDecoder};

    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/calico_decode");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let bytes = std::fs::read(&path).unwrap();
        let mut dec = StreamDecoder::new(GobLimits::CLIENT_INBOUND);
        let mut buf = BytesMut::from(&bytes[..]);
        let mut messages = 0;
        let err = loop {
            match dec.decode(&mut buf) {
                Ok(Some(m)) => {
                    messages += 1;
                    if let CalicoMessage::DecoderRestart(r) = &m {
                        let c = Compression::from_name(&r.compression_algorithm).unwrap();
                        dec.restart(c).unwrap();
                    }
                }
                Ok(None) => break None,
                Err(e) => break Some(e),
            }
        };
        if !name.starts_with("bad_") {
            assert!(err.is_none(), "{name}: {err:?}");
            assert!(buf.is_empty(), "{name}: {} bytes left over", buf.len());
            assert!(
                messages > 0 || name.starts_with("preamble_"),
                "{name}: no message"
            );
        }
        seen += 1;
    }
    assert!(seen >= 20, "only {seen} seeds in {}", dir.display());
}
