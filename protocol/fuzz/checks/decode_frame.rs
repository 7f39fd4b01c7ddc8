//! Fuzz target for the sans-IO frame decoder (`typha_protocol::FrameDecoder`).
//!
//! The input is a byte stream as it would arrive on a connection. For each limit profile
//! (`Limits::SERVER_INBOUND`, `Limits::CLIENT_INBOUND`) it checks:
//!
//! 1. Nothing panics, whatever the bytes: frames are split off with `decode_frame` and their
//!    payloads decoded with `decode_message` until the stream needs more bytes (`Ok(None)`)
//!    or framing fails. A payload that does not decode is recorded and the loop goes on with
//!    the next frame: the framing does not depend on the payload, and going on reaches more
//!    code.
//! 2. Partial input: the same bytes fed in two pieces, split at a position derived from the
//!    input, give exactly the same sequence of results (messages, payload errors, the final
//!    framing error or need-more) and leave the same unconsumed bytes as the whole input.
//! 3. Round trip: every decoded message, re-encoded with `FrameEncoder::uncompressed()` and
//!    decoded again, equals itself, and the re-encoded frame is consumed exactly.
//!
//! Shared by the libFuzzer target (`fuzz_targets/decode_frame.rs`) and the corpus replay test
//! (`protocol/tests/fuzz_corpus.rs`), which runs every committed input through it on each
//! `cargo test`.

use bytes::BytesMut;
use typha_protocol::{FrameDecoder, FrameEncoder, FrameError, Limits, Message};

/// One step of decoding a stream.
#[derive(Debug, PartialEq)]
enum Step {
    /// A frame whose payload decoded.
    Message(Message),
    /// A frame whose payload did not decode (`decode_message` failed).
    BadPayload(FrameError),
}

/// How decoding a stream ended.
#[derive(Debug, PartialEq)]
enum End {
    /// `decode_frame` returned `Ok(None)`: it needs more bytes. Holds what is left unconsumed.
    NeedMore(Vec<u8>),
    /// `decode_frame` failed: the connection would be closed.
    Framing(FrameError),
}

/// Everything decoding a stream produced.
#[derive(Debug, PartialEq)]
struct Outcome {
    steps: Vec<Step>,
    end: End,
}

/// Decodes frames off `buf` until it needs more bytes or framing fails. `Err` carries the
/// framing error; `Ok` means `Ok(None)` was reached.
fn drain(
    dec: &mut FrameDecoder,
    buf: &mut BytesMut,
    steps: &mut Vec<Step>,
) -> Result<(), FrameError> {
    loop {
        let before = buf.len();
        match dec.decode_frame(buf)? {
            None => {
                // Needing more bytes consumes nothing.
                assert_eq!(buf.len(), before, "Ok(None) consumed bytes");
                return Ok(());
            }
            Some(frame) => {
                assert_eq!(
                    before - buf.len(),
                    frame.wire_len(),
                    "frame length does not match bytes consumed"
                );
                match dec.decode_message(&frame) {
                    Ok(msg) => {
                        assert_eq!(msg.message_type(), frame.message_type);
                        steps.push(Step::Message(msg));
                    }
                    Err(e) => steps.push(Step::BadPayload(e)),
                }
            }
        }
    }
}

/// Decodes `pieces` fed one after the other into one buffer, draining after each piece.
fn decode_pieces(limits: Limits, pieces: &[&[u8]]) -> Outcome {
    let mut dec = FrameDecoder::new(limits);
    let mut buf = BytesMut::new();
    let mut steps = Vec::new();
    for piece in pieces {
        buf.extend_from_slice(piece);
        if let Err(e) = drain(&mut dec, &mut buf, &mut steps) {
            return Outcome {
                steps,
                end: End::Framing(e),
            };
        }
    }
    Outcome {
        steps,
        end: End::NeedMore(buf.to_vec()),
    }
}

/// A split position in `0..=data.len()` derived from the whole input (FNV-1a), so the fuzzer
/// explores different splits as it mutates, while the corpus stays plain wire bytes.
fn split_point(data: &[u8]) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in data {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    // Lossless: the result is at most data.len().
    (h % (data.len() as u64 + 1)) as usize
}

/// Re-encodes `msg` without compression, decodes it again and checks it is unchanged.
fn check_round_trip(msg: &Message) {
    // No size limit on either side: a message decoded under CLIENT_INBOUND may decompress
    // to more than one frame's limit, and the round trip is about content, not limits.
    let mut enc = FrameEncoder::uncompressed().with_max_frame_len(u32::MAX as usize);
    let bytes = match enc.encode(msg) {
        Ok(b) => b,
        Err(e) => panic!("re-encoding a decoded message failed: {e}\nmessage: {msg:?}"),
    };
    let mut dec = FrameDecoder::new(Limits {
        max_frame_len: u32::MAX as usize,
        max_decoded_len: usize::MAX,
    });
    let mut buf = BytesMut::from(&bytes[..]);
    match dec.decode(&mut buf) {
        Ok(Some(again)) => assert_eq!(&again, msg, "message changed in a round trip"),
        Ok(None) => panic!("re-encoded frame is incomplete: {bytes:02x?}\nmessage: {msg:?}"),
        Err(e) => panic!("re-encoded frame does not decode: {e}\nmessage: {msg:?}"),
    }
    assert!(buf.is_empty(), "re-encoded frame left {} bytes", buf.len());
}

/// Checks one input (panics on a violation).
pub(crate) fn run(data: &[u8]) {
    let at = split_point(data);
    let (head, tail) = data.split_at(at);
    for limits in [Limits::SERVER_INBOUND, Limits::CLIENT_INBOUND] {
        let whole = decode_pieces(limits, &[data]);
        let split = decode_pieces(limits, &[head, tail]);
        assert_eq!(
            whole, split,
            "whole input and input split at {at} decode differently ({limits:?})"
        );
        for step in &whole.steps {
            if let Step::Message(msg) = step {
                check_round_trip(msg);
            }
        }
    }
}
