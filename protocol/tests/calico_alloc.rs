//! Hostile input must not make the Calico decoder allocate past its limits. Measured with a
//! counting global allocator (the `cap` crate), in a test binary of its own with a single
//! test so that no other test's allocations mix in.

// In tests a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod gob_bytes;

use std::alloc::System;

use bytes::BytesMut;
use cap::Cap;
use gob_bytes::{def, int, msg, uint};
use typha_protocol::calico::gob::{FieldType, Limits, TypeId, WireType};
use typha_protocol::calico::snappy::STREAM_IDENTIFIER;
use typha_protocol::calico::{Compression, StreamDecoder};

#[global_allocator]
static ALLOC: Cap<System> = Cap::new(System, usize::MAX);

/// An upper bound on the peak live heap while `f` runs, above what was live when it started.
fn peak_growth(f: impl FnOnce()) -> usize {
    let live = ALLOC.allocated();
    f();
    ALLOC.max_allocated().saturating_sub(live)
}

#[test]
fn hostile_streams_stay_within_the_limits() {
    let limits = Limits::SERVER_INBOUND;
    // The message being read, its decoded value (Vec growth may double it), and slack.
    let budget = limits.max_message_len + 2 * limits.max_decoded_len + (1 << 20);

    let empty = WireType::structure("E", vec![]);
    let slice_of_empty = WireType::slice("[]E", TypeId(64));
    let mut many_elements = [def(64, &empty), def(65, &slice_of_empty)].concat();
    let n = limits.max_message_len - 16;
    let mut body = [int(65), vec![0], uint(n as u64)].concat();
    body.resize(body.len() + n, 0);
    many_elements.extend(msg(&body));

    let strings = WireType::slice("[]string", TypeId::STRING);
    let mut many_strings = def(64, &strings);
    let count = limits.max_message_len / 2 - 16;
    let mut body = [int(64), vec![0], uint(count as u64)].concat();
    body.resize(body.len() + 2 * count, 1); // each string: length 1, one byte
    many_strings.extend(msg(&body));

    let deep = WireType::slice("T", TypeId(64));
    let mut nested = def(64, &deep);
    let mut body = [int(64), vec![0]].concat();
    body.resize(body.len() + 100_000, 1);
    nested.extend(msg(&body));

    let env = WireType::structure(
        "Envelope",
        vec![FieldType::new("Message", TypeId::INTERFACE)],
    );
    let mut spanning = def(64, &env);
    spanning.extend(msg(&[int(64), vec![1, 1, b'x']].concat()));
    for id in 65..80 {
        spanning.extend(def(id, &empty));
    }

    let cases: Vec<(&str, Compression, Vec<u8>)> = vec![
        (
            "announces 2^60 bytes",
            Compression::None,
            vec![0xf8, 0x10, 0, 0, 0, 0, 0, 0, 0],
        ),
        (
            "announces the maximum, sends 10 bytes",
            Compression::None,
            [uint(limits.max_message_len as u64), vec![0; 10]].concat(),
        ),
        (
            "a million one-byte elements",
            Compression::None,
            many_elements,
        ),
        (
            "half a million one-byte strings",
            Compression::None,
            many_strings,
        ),
        (
            "a slice of 2^40",
            Compression::None,
            msg(&[int(5), vec![0], uint(1 << 40)].concat()),
        ),
        ("nested 100,000 deep", Compression::None, nested),
        (
            "a value waiting for its 16th message",
            Compression::None,
            spanning,
        ),
        (
            "a snappy chunk announcing 16 MiB",
            Compression::Snappy,
            [STREAM_IDENTIFIER, &[0x00, 0xff, 0xff, 0xff]].concat(),
        ),
        (
            "a snappy block claiming 1 MiB",
            Compression::Snappy,
            [
                STREAM_IDENTIFIER,
                &[0x00, 8, 0, 0, 0, 0, 0, 0, 0x80, 0x80, 0x40, 0],
            ]
            .concat(),
        ),
    ];
    for (name, compression, bytes) in cases {
        let mut buf = BytesMut::from(&bytes[..]);
        let mut dec = StreamDecoder::new(limits);
        dec.restart(compression).unwrap();
        let mut result = None;
        let growth = peak_growth(|| {
            result = Some(dec.decode(&mut buf));
        });
        assert!(
            growth <= budget,
            "{name}: grew {growth} bytes (budget {budget}); result {result:?}"
        );
        assert!(
            !matches!(result, Some(Ok(Some(_)))),
            "{name}: decoded a message: {result:?}"
        );
    }
}
