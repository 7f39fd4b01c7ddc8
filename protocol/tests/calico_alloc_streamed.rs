//! Streaming reads (`StreamDecoder::decode_gob_streaming`, a `MsgKVs`'s updates read as they
//! arrive) walk a value whose message is still arriving. What they allocate must therefore be
//! bounded by the bytes that have arrived, never by what a message announces (a client's
//! limits let a message announce 256 MiB). Measured with a counting global allocator, in a
//! test binary of its own with a single test, on inputs of a few kilobytes at most, so that
//! the allocator's high-water mark belongs to the decoding.

// In tests a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod gob_bytes;

use std::alloc::System;

use bytes::BytesMut;
use cap::Cap;
use gob_bytes::{def, int, uint};
use typha_protocol::calico::gob::{FieldType, Limits, TypeId, WireType, put_bytes};
use typha_protocol::calico::messages::MessageKind;
use typha_protocol::calico::snappy::STREAM_IDENTIFIER;
use typha_protocol::calico::{Compression, StreamDecoder};

#[global_allocator]
static ALLOC: Cap<System> = Cap::new(System, usize::MAX);

#[test]
fn a_streamed_read_allocates_for_what_arrived_not_for_what_is_announced() {
    let limits = Limits::CLIENT_INBOUND;
    let kvs = MessageKind::Kvs.registered_name();

    // An Envelope, then a value announcing 200 MiB of which 1 KiB has arrived: a MsgKVs
    // whose slice of 1,000,000 updates is still arriving.
    let env = WireType::structure(
        "Envelope",
        vec![FieldType::new("Message", TypeId::INTERFACE)],
    );
    let update = WireType::structure(
        "SerializedUpdate",
        vec![FieldType::new("Key", TypeId::STRING)],
    );
    let updates = WireType::slice("[]SerializedUpdate", TypeId(65));
    let kvs_type = WireType::structure("MsgKVs", vec![FieldType::new("KVs", TypeId(66))]);
    let mut announced = [
        def(64, &env),
        def(65, &update),
        def(66, &updates),
        def(67, &kvs_type),
    ]
    .concat();
    let mut body = [int(64), vec![1]].concat();
    put_bytes(&mut body, kvs.as_bytes());
    body.extend([int(67), uint(0), vec![1], uint(1_000_000)].concat());
    for i in 0..50 {
        body.extend([vec![1], uint(6), format!("/k/{i:03}").into_bytes(), vec![0]].concat());
    }
    announced.extend(uint(200 << 20));
    announced.extend(&body);

    let cases: Vec<(&str, Compression, Vec<u8>)> = vec![
        (
            // Found by the fuzzer: 3.2 GB before counts were checked against arrived bytes.
            "a definition in a value still arriving claims 10^8 fields",
            Compression::None,
            include_bytes!(
                "../fuzz/corpus/calico_decode/bad_streamed_definition_claims_many_fields"
            )
            .to_vec(),
        ),
        (
            "a MsgKVs announcing 200 MiB, 1 KiB arrived",
            Compression::None,
            announced,
        ),
        (
            "announces the maximum, sends 10 bytes",
            Compression::None,
            [uint(limits.max_message_len as u64), vec![0; 10]].concat(),
        ),
        (
            "a slice of 2^40 announced in a message still arriving",
            Compression::None,
            [uint(100 << 20), int(5), vec![0], uint(1 << 40)].concat(),
        ),
        (
            "a snappy chunk announcing 16 MiB",
            Compression::Snappy,
            [STREAM_IDENTIFIER, &[0x00, 0xff, 0xff, 0xff]].concat(),
        ),
    ];
    for (name, compression, bytes) in cases {
        let mut buf = BytesMut::from(&bytes[..]);
        let mut dec = StreamDecoder::new(limits);
        dec.restart(compression).unwrap();
        let mut handed = 0;
        let live = ALLOC.allocated();
        let result = loop {
            match dec.decode_gob_streaming(&mut buf, kvs.as_bytes(), b"KVs", &mut |_| handed += 1) {
                Ok(Some(_)) => continue,
                other => break other,
            }
        };
        // An upper bound: the high-water mark also holds earlier peaks, all small here.
        let growth = ALLOC.max_allocated().saturating_sub(live);
        // Values expand at most about fifty-fold in memory, plus the decoder's read-ahead.
        let budget = 64 * bytes.len() + (256 << 10);
        assert!(
            growth <= budget,
            "{name}: grew {growth} bytes (budget {budget}); result {result:?}"
        );
        assert!(!matches!(result, Ok(Some(_))), "{name}: decoded a message");
        if name.starts_with("a MsgKVs") {
            assert_eq!(
                handed, 50,
                "{name}: the updates that arrived are handed over"
            );
        }
    }
}
