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

#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use typha_protocol::calico::gob::Limits;
use typha_protocol::calico::messages::{self, Message, Side};
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

fuzz_target!(|data: &[u8]| {
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
    }
});
