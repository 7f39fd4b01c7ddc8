// In tests a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::io::{Read, Write};

use bytes::BytesMut;

use super::*;

/// Data that compresses somewhat, deterministic.
fn data(len: usize) -> Vec<u8> {
    let mut x: u32 = 12345;
    (0..len)
        .map(|i| {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            if i % 3 == 0 { b'a' } else { (x >> 24) as u8 }
        })
        .collect()
}

fn decode_stream(bytes: &[u8]) -> Result<Vec<u8>, SnappyError> {
    let mut d = Decoder::new();
    let mut src = BytesMut::from(bytes);
    let mut dst = BytesMut::new();
    while d.decode_chunk(&mut src, &mut dst)? {}
    assert!(
        src.len() < 4 || src.len() < bytes.len(),
        "stalled with a complete chunk"
    );
    Ok(dst.to_vec())
}

#[test]
fn chunks_round_trip_and_match_snaps_reader_and_writer() {
    for len in [0, 1, 100, 65_535, 65_536, 65_537, 200_000] {
        let d = data(len);
        let mut stream = STREAM_IDENTIFIER.to_vec();
        stream.extend(encode_chunks(&d));
        assert_eq!(decode_stream(&stream).unwrap(), d, "{len}");
        let mut theirs = Vec::new();
        snap::read::FrameDecoder::new(&stream[..])
            .read_to_end(&mut theirs)
            .unwrap();
        assert_eq!(theirs, d, "{len}");
        // snap's writer, given the data in one write and flushed, writes the same bytes.
        let mut w = snap::write::FrameEncoder::new(Vec::new());
        w.write_all(&d).unwrap();
        w.flush().unwrap();
        let written = w.into_inner().unwrap();
        if len > 0 {
            assert_eq!(written, stream, "{len}");
        }
    }
}

#[test]
fn chunks_encoded_apart_splice_into_any_stream() {
    let (a, b, c) = (data(10), data(70_000), b"plain".to_vec());
    let (ca, cb, cc) = (encode_chunks(&a), encode_chunks(&b), encode_chunks(&c));
    let mut one = STREAM_IDENTIFIER.to_vec();
    one.extend([ca.clone(), cb.clone(), cc.clone()].concat());
    let mut other = STREAM_IDENTIFIER.to_vec();
    other.extend([cc, ca].concat());
    assert_eq!(
        decode_stream(&one).unwrap(),
        [a.clone(), b, c.clone()].concat()
    );
    assert_eq!(decode_stream(&other).unwrap(), [c, a].concat());
}

#[test]
fn small_data_is_stored_and_compressible_data_compressed() {
    assert_eq!(encode_chunks(b"abc")[0], 0x01);
    assert_eq!(encode_chunks(&[b'x'; 1000])[0], 0x00);
}

#[test]
fn byte_by_byte_is_the_same() {
    let d = data(100_000);
    let mut stream = STREAM_IDENTIFIER.to_vec();
    stream.extend(encode_chunks(&d));
    let mut dec = Decoder::new();
    let mut src = BytesMut::new();
    let mut dst = BytesMut::new();
    for b in &stream {
        src.extend_from_slice(&[*b]);
        while dec.decode_chunk(&mut src, &mut dst).unwrap() {}
    }
    assert!(src.is_empty());
    assert_eq!(&dst[..], &d[..]);
}

#[test]
fn hostile_streams_are_refused() {
    let chunk = encode_chunks(b"hello world");
    // No identifier first.
    assert_eq!(
        decode_stream(&chunk),
        Err(SnappyError::NoStreamIdentifier(0x01))
    );
    // A bad identifier.
    assert_eq!(
        decode_stream(b"\xff\x06\x00\x00sNaPpZ"),
        Err(SnappyError::BadIdentifier)
    );
    assert_eq!(
        decode_stream(b"\xff\x05\x00\x00sNaPp"),
        Err(SnappyError::BadIdentifier)
    );
    let with = |tail: &[u8]| [STREAM_IDENTIFIER, tail].concat();
    // A chunk announcing 16 MiB: refused from its header, before its bytes.
    let mut d = Decoder::new();
    let mut src = BytesMut::from(&with(&[0x00, 0xff, 0xff, 0xff])[..]);
    let mut dst = BytesMut::new();
    assert!(d.decode_chunk(&mut src, &mut dst).unwrap());
    assert_eq!(
        d.decode_chunk(&mut src, &mut dst),
        Err(SnappyError::ChunkTooLarge { len: 0xff_ffff })
    );
    assert!(src.capacity() < 1024);
    // Reserved unskippable, skippable, short.
    assert_eq!(
        decode_stream(&with(&[0x02, 0, 0, 0])),
        Err(SnappyError::ReservedChunk(0x02))
    );
    assert_eq!(decode_stream(&with(&[0x80, 2, 0, 0, 9, 9])).unwrap(), b"");
    assert_eq!(decode_stream(&with(&[0xfe, 1, 0, 0, 9])).unwrap(), b"");
    assert_eq!(
        decode_stream(&with(&[0x01, 3, 0, 0, 1, 2, 3])),
        Err(SnappyError::ShortChunk(3))
    );
    // A flipped data byte: the checksum catches it.
    let mut bad = with(&chunk);
    *bad.last_mut().unwrap() ^= 1;
    assert!(matches!(
        decode_stream(&bad),
        Err(SnappyError::Checksum { .. })
    ));
    // A stored chunk over a block.
    let mut big = vec![0x01];
    big.extend_from_slice(&((MAX_BLOCK_LEN + 5) as u32).to_le_bytes()[..3]);
    big.extend(vec![0; MAX_BLOCK_LEN + 5]);
    assert!(matches!(
        decode_stream(&with(&big)),
        Err(SnappyError::BlockTooLarge(_))
    ));
    // A compressed block claiming 1 MiB of output (a varint length prefix only).
    let claim = [0x00, 8, 0, 0, 0, 0, 0, 0, 0x80, 0x80, 0x40, 0];
    assert!(matches!(
        decode_stream(&with(&claim)),
        Err(SnappyError::BlockTooLarge(_))
    ));
    // Corrupt block data.
    let garbage = [0x00, 7, 0, 0, 0, 0, 0, 0, 5, 0xff, 0xff];
    assert!(matches!(
        decode_stream(&with(&garbage)),
        Err(SnappyError::Corrupt(_))
    ));
}
