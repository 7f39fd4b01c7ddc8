//! Fuzz target for the Calico-protocol decoder (`typha_protocol::calico::StreamDecoder`:
//! snappy framing, our gob decoder, the messages).
//!
//! The input is a byte stream as a client would read it from a server (or a server from a
//! client): gob streams one after another, each `MsgDecoderRestart` starting a new one, plain
//! or snappy as it says. For each limit profile (`SERVER_INBOUND`, `CLIENT_INBOUND`):
//!
//! 1. Nothing panics, whatever the bytes. A value that is not one of Calico's messages is
//!    recorded and decoding goes on (the gob stream is intact); any other error ends it.
//! 2. Partial input: the same bytes fed in two pieces, split at a position derived from the
//!    input, give the same messages, the same errors and leave the same bytes unconsumed.
//! 3. Round trip: every decoded message that our encoder can write (all but revisions of
//!    non-basic types), encoded after its side's preamble and decoded again, encodes to the
//!    same bytes (bytes, not values: a float revision may be NaN).
//! 4. Streaming (`StreamDecoder::decode_gob_streaming`, which hands a `MsgKVs`'s updates over
//!    as they arrive and cuts them out of the buffer), fed the same two pieces: with the
//!    updates put back into their messages, the same messages and the same ending as the
//!    whole read; or, if it fails, a prefix of them (a value read as it arrives can fail
//!    before the whole read has looked at it, never after).
//!
//! Shared by the libFuzzer target (`fuzz_targets/calico_decode.rs`) and the corpus replay test
//! (`protocol/tests/fuzz_corpus.rs`), which runs every committed input through it on each
//! `cargo test`.

use crate::calico_streamed::put_back;
use bytes::BytesMut;
use typha_protocol::calico::gob::{Limits, Value};
use typha_protocol::calico::messages::{self, Message, MessageKind, Side};
use typha_protocol::calico::{Compression, StreamDecoder, StreamError};

/// One step of decoding a stream.
#[derive(Debug, PartialEq)]
enum Step {
    Message(Message),
    /// A gob value that is not a message (the stream goes on).
    NotAMessage(StreamError),
}

/// How decoding ended.
#[derive(Debug, PartialEq)]
enum End {
    /// More bytes needed: what is left unconsumed of the last piece's buffer.
    NeedMore(usize),
    /// The stream is lost.
    Failed(StreamError),
    /// A restart to a compression we do not know: a client would hang up.
    UnknownCompression(String),
}

#[derive(Debug, PartialEq)]
struct Outcome {
    steps: Vec<Step>,
    end: End,
}

fn drain(dec: &mut StreamDecoder, buf: &mut BytesMut, steps: &mut Vec<Step>) -> Option<End> {
    loop {
        match dec.decode(buf) {
            Ok(None) => return None,
            Ok(Some(m)) => {
                if let Message::DecoderRestart(r) = &m {
                    let Some(c) = Compression::from_name(&r.compression_algorithm) else {
                        return Some(End::UnknownCompression(r.compression_algorithm.clone()));
                    };
                    if let Err(e) = dec.restart(c) {
                        return Some(End::Failed(e));
                    }
                }
                steps.push(Step::Message(m));
            }
            Err(e @ StreamError::Message(_)) => steps.push(Step::NotAMessage(e)),
            Err(e) => return Some(End::Failed(e)),
        }
    }
}

fn decode_pieces(limits: Limits, pieces: &[&[u8]]) -> Outcome {
    let mut dec = StreamDecoder::new(limits);
    let mut buf = BytesMut::new();
    let mut steps = Vec::new();
    for piece in pieces {
        buf.extend_from_slice(piece);
        if let Some(end) = drain(&mut dec, &mut buf, &mut steps) {
            return Outcome { steps, end };
        }
    }
    Outcome {
        steps,
        end: End::NeedMore(buf.len()),
    }
}

/// As [`decode_pieces`], streaming every `MsgKVs` and putting its updates back.
fn decode_pieces_streaming(limits: Limits, pieces: &[&[u8]]) -> Outcome {
    let name = MessageKind::Kvs.registered_name();
    let mut dec = StreamDecoder::new(limits);
    let mut buf = BytesMut::new();
    let mut steps = Vec::new();
    let mut handed: Vec<Value> = Vec::new();
    for piece in pieces {
        buf.extend_from_slice(piece);
        loop {
            let got =
                dec.decode_gob_streaming(&mut buf, name.as_bytes(), b"KVs", &mut |v: &Value| {
                    handed.push(v.clone())
                });
            let mut d = match got {
                Ok(None) => break,
                Ok(Some(d)) => d,
                Err(e) => {
                    return Outcome {
                        steps,
                        end: End::Failed(e),
                    };
                }
            };
            put_back(&mut d.value, std::mem::take(&mut handed));
            let m = match messages::from_gob(&d) {
                Ok(m) => m,
                Err(e) => {
                    steps.push(Step::NotAMessage(e.into()));
                    continue;
                }
            };
            if let Message::DecoderRestart(r) = &m {
                let Some(c) = Compression::from_name(&r.compression_algorithm) else {
                    let end = End::UnknownCompression(r.compression_algorithm.clone());
                    return Outcome { steps, end };
                };
                if let Err(e) = dec.restart(c) {
                    return Outcome {
                        steps,
                        end: End::Failed(e),
                    };
                }
            }
            steps.push(Step::Message(m));
        }
    }
    Outcome {
        steps,
        end: End::NeedMore(buf.len()),
    }
}

/// A split position in `0..=data.len()` derived from the whole input (FNV-1a).
fn split_point(data: &[u8]) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in data {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (h % (data.len() as u64 + 1)) as usize
}

fn check_round_trip(msg: &Message) {
    let side = if Side::Server.sends(msg.kind()) {
        Side::Server
    } else {
        Side::Client
    };
    let Ok(once) = messages::encode(side, msg) else {
        // Only a revision of a non-basic type cannot be written by our encoder.
        return;
    };
    let mut buf = BytesMut::from(&side.preamble()[..]);
    buf.extend_from_slice(&once);
    let unlimited = Limits {
        max_message_len: usize::MAX,
        max_value_messages: 2,
        max_types: 64,
        max_depth: 64,
        max_decoded_len: usize::MAX,
    };
    let mut dec = StreamDecoder::new(unlimited);
    let again = match dec.decode(&mut buf) {
        Ok(Some(m)) => m,
        other => panic!("re-encoded message does not decode: {other:?}\nmessage: {msg:?}"),
    };
    assert!(
        buf.is_empty(),
        "re-encoded message left {} bytes",
        buf.len()
    );
    let twice = messages::encode(side, &again).expect("encodes again");
    assert_eq!(once, twice, "message changed in a round trip: {msg:?}");
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
            "whole input and input split at {at} differ ({limits:?})"
        );
        for step in &whole.steps {
            if let Step::Message(msg) = step {
                check_round_trip(msg);
            }
        }
        let streamed = decode_pieces_streaming(limits, &[head, tail]);
        match (&streamed.end, &whole.end) {
            (End::Failed(_), _) => assert!(
                whole.steps.starts_with(&streamed.steps),
                "streaming read is not a prefix of the whole read ({limits:?})"
            ),
            (End::NeedMore(_), End::NeedMore(_)) => assert_eq!(
                streamed.steps, whole.steps,
                "streaming and whole reads differ ({limits:?})"
            ),
            (a, b) => {
                assert_eq!(
                    a, b,
                    "streaming and whole reads end differently ({limits:?})"
                );
                assert_eq!(streamed.steps, whole.steps, "({limits:?})");
            }
        }
    }
}
