//! Hostile input must not make the decoder allocate past its limits. Measured with a counting
//! global allocator (the `cap` crate), in a test binary of its own with a single test so no
//! other test's allocations mix in.

// In tests a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::alloc::System;

use bytes::BytesMut;
use cap::Cap;
use typha_protocol::frame::FLAG_ZSTD;
use typha_protocol::message::MessageType;
use typha_protocol::{FrameDecoder, Limits};

#[global_allocator]
static ALLOC: Cap<System> = Cap::new(System, usize::MAX);

fn frame(ty: MessageType, flags: u8, announced_len: u32, payload: &[u8]) -> Vec<u8> {
    let mut v = announced_len.to_be_bytes().to_vec();
    v.extend_from_slice(&[ty as u8, flags]);
    v.extend_from_slice(payload);
    v
}

/// An upper bound on the peak live heap while `f` runs, above what was live when it started.
/// (`max_allocated` is a process-wide high-water mark, so this may overestimate, never under.)
fn peak_growth(f: impl FnOnce()) -> usize {
    let live = ALLOC.allocated();
    f();
    ALLOC.max_allocated().saturating_sub(live)
}

#[test]
fn hostile_frames_stay_within_the_limits() {
    // Warm up: the first zstd context and the test harness's own buffers.
    let _ = FrameDecoder::new(Limits::SERVER_INBOUND).decode(&mut BytesMut::from(
        &frame(MessageType::Ping, 0, 1, &[0])[..],
    ));

    let limits = Limits::SERVER_INBOUND;
    // Slack for the zstd context (~100 KiB-1 MiB), the reserve-ahead step and bookkeeping.
    let budget = limits.max_frame_len + limits.max_decoded_len + (2 << 20);

    // A Vec length prefix of 2^62 elements inside a small, valid-looking payload.
    let mut huge_vec = Vec::new();
    // Deltas { from_seq, seq, digest, updates: <len varint 2^62> }
    huge_vec.extend_from_slice(&[1, 2, 3]);
    huge_vec.extend_from_slice(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x40]);
    // A string length of 2^40 in a goodbye.
    let huge_str = [2u8, 0x80, 0x80, 0x80, 0x80, 0x80, 0x20];
    // A zstd frame that claims 1 GiB of output (frame header only, content size field set).
    let mut zstd_claim = zstd::bulk::compress(&vec![0u8; 1 << 20], 1).unwrap();
    // Patch: decompressing these real 1 MiB of zeros is over a 64 KiB decoded limit below.
    let small_decoded = Limits {
        max_frame_len: 1 << 20,
        max_decoded_len: 64 << 10,
    };
    let bomb = frame(
        MessageType::Goodbye,
        FLAG_ZSTD,
        zstd_claim.len() as u32,
        &zstd_claim,
    );
    zstd_claim.truncate(8);

    let cases: Vec<(&str, Limits, Vec<u8>)> = vec![
        (
            "announces 4 GiB",
            limits,
            frame(MessageType::Deltas, 0, u32::MAX, &[]),
        ),
        (
            "announces the maximum, sends 10 bytes",
            limits,
            frame(
                MessageType::Deltas,
                0,
                limits.max_frame_len as u32,
                &[0; 10],
            ),
        ),
        (
            "vec length 2^62",
            limits,
            frame(MessageType::Deltas, 0, huge_vec.len() as u32, &huge_vec),
        ),
        (
            "string length 2^40",
            limits,
            frame(MessageType::Goodbye, 0, huge_str.len() as u32, &huge_str),
        ),
        ("zstd bomb over the decoded limit", small_decoded, bomb),
        (
            "truncated zstd header",
            limits,
            frame(MessageType::Goodbye, FLAG_ZSTD, 8, &zstd_claim),
        ),
        (
            "client limits, announces 16 MiB, sends 6 bytes",
            Limits::CLIENT_INBOUND,
            frame(MessageType::SnapshotChunk, 0, 16 << 20, &[1; 6]),
        ),
    ];
    for (name, limits, bytes) in cases {
        let growth = peak_growth(|| {
            let mut dec = FrameDecoder::new(limits);
            let mut buf = BytesMut::from(&bytes[..]);
            let _ = dec.decode(&mut buf);
            drop(buf);
        });
        assert!(
            growth <= budget,
            "{name}: decoder grew the heap by {growth} bytes (budget {budget})"
        );
        // A frame announced but not sent must not make the decoder reserve it all.
        if name.contains("sends") {
            assert!(
                growth < 1 << 20,
                "{name}: reserved {growth} bytes for data never sent"
            );
        }
    }
}
