use super::*;
use crate::message::Seq;
use crate::message::{Ack, Goodbye, GoodbyeReason, Ping};

fn big_goodbye() -> Message {
    Message::Goodbye(Goodbye {
        reason: GoodbyeReason::Shutdown,
        message: "draining ".repeat(200),
        redirect: vec!["10.0.0.1:5473".into(); 20],
    })
}

#[test]
fn round_trip_plain_and_compressed() {
    for mut enc in [FrameEncoder::uncompressed(), FrameEncoder::zstd(1).unwrap()] {
        let mut dec = FrameDecoder::new(Limits::CLIENT_INBOUND);
        for msg in [
            Message::Ping(Ping {
                timestamp_micros: 7,
            }),
            big_goodbye(),
        ] {
            let bytes = enc.encode(&msg).unwrap();
            let mut buf = BytesMut::from(&bytes[..]);
            assert_eq!(dec.decode(&mut buf).unwrap(), Some(msg));
            assert!(buf.is_empty());
        }
    }
}

#[test]
fn large_payloads_are_compressed_small_ones_not() {
    let mut enc = FrameEncoder::zstd(1).unwrap();
    let small = enc.encode(&Message::Ack(Ack { seq: Seq(1) })).unwrap();
    assert_eq!(small[5], 0);
    let big = enc.encode(&big_goodbye()).unwrap();
    assert_eq!(big[5], FLAG_ZSTD);
}

#[test]
fn partial_input_needs_more_byte_by_byte() {
    let mut enc = FrameEncoder::zstd(1).unwrap();
    let msg = big_goodbye();
    let bytes = enc.encode(&msg).unwrap();
    let mut dec = FrameDecoder::new(Limits::CLIENT_INBOUND);
    let mut buf = BytesMut::new();
    for (i, b) in bytes.iter().enumerate() {
        buf.extend_from_slice(&[*b]);
        let got = dec.decode(&mut buf).unwrap();
        if i + 1 < bytes.len() {
            assert_eq!(got, None);
        } else {
            assert_eq!(got, Some(msg.clone()));
        }
    }
}

#[test]
fn oversized_length_is_rejected_before_reserving() {
    let dec = FrameDecoder::new(Limits::SERVER_INBOUND);
    let mut buf = BytesMut::from(&[0xff, 0xff, 0xff, 0xff, 1, 0][..]);
    let cap = buf.capacity();
    let err = dec.decode_frame(&mut buf).unwrap_err();
    assert!(matches!(err, FrameError::TooLarge { .. }), "{err}");
    assert_eq!(buf.capacity(), cap);
}

#[test]
fn unknown_type_and_reserved_flags_are_rejected() {
    let dec = FrameDecoder::new(Limits::SERVER_INBOUND);
    let mut buf = BytesMut::from(&[0, 0, 0, 0, 200, 0][..]);
    assert_eq!(
        dec.decode_frame(&mut buf),
        Err(FrameError::UnknownType(200))
    );
    let mut buf = BytesMut::from(&[0, 0, 0, 0, 4, 0x80][..]);
    assert_eq!(
        dec.decode_frame(&mut buf),
        Err(FrameError::ReservedFlags(0x80))
    );
}

#[test]
fn trailing_payload_bytes_are_an_error() {
    let mut enc = FrameEncoder::uncompressed();
    let bytes = enc
        .encode(&Message::Ping(Ping {
            timestamp_micros: 1,
        }))
        .unwrap();
    let mut v = bytes.to_vec();
    v.push(0);
    v[3] += 1;
    let mut dec = FrameDecoder::new(Limits::SERVER_INBOUND);
    let err = dec.decode(&mut BytesMut::from(&v[..])).unwrap_err();
    assert!(err.to_string().contains("trailing"), "{err}");
}

#[test]
fn decompression_bomb_is_refused_by_recorded_size() {
    // 8 MiB of zeros compresses to a few hundred bytes: under the frame limit, over the
    // decoded limit.
    let zeros = vec![0u8; 8 << 20];
    let compressed = zstd::bulk::compress(&zeros, 1).unwrap();
    let mut v = (compressed.len() as u32).to_be_bytes().to_vec();
    v.extend_from_slice(&[MessageType::Goodbye as u8, FLAG_ZSTD]);
    v.extend_from_slice(&compressed);
    let mut dec = FrameDecoder::new(Limits::SERVER_INBOUND);
    let err = dec.decode(&mut BytesMut::from(&v[..])).unwrap_err();
    assert!(matches!(err, FrameError::DecodedTooLarge { .. }), "{err}");
}

#[test]
fn compressed_frame_without_recorded_size_is_refused() {
    use std::io::Write;
    let mut w = zstd::stream::Encoder::new(Vec::new(), 1).unwrap();
    w.write_all(b"hello").unwrap();
    let compressed = w.finish().unwrap();
    let mut v = (compressed.len() as u32).to_be_bytes().to_vec();
    v.extend_from_slice(&[MessageType::Goodbye as u8, FLAG_ZSTD]);
    v.extend_from_slice(&compressed);
    let mut dec = FrameDecoder::new(Limits::SERVER_INBOUND);
    let err = dec.decode(&mut BytesMut::from(&v[..])).unwrap_err();
    assert!(matches!(err, FrameError::UnknownDecodedLen(_)), "{err}");
}

#[test]
fn encoder_refuses_frames_over_its_limit() {
    let mut enc = FrameEncoder::uncompressed().with_max_frame_len(100);
    assert!(matches!(
        enc.encode(&big_goodbye()),
        Err(EncodeError::TooLarge { .. })
    ));
}
