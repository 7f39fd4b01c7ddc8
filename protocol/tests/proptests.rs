//! Property tests: everything round-trips, and no input makes the decoder panic.

// In tests a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod common;

use bytes::BytesMut;
use proptest::prelude::*;
use typha_protocol::frame::HEADER_LEN;
use typha_protocol::{
    EncodedValue, FrameDecoder, FrameEncoder, FrameError, Key, KeyPath, Limits, Message,
};

fn encoders() -> [FrameEncoder; 2] {
    [
        FrameEncoder::uncompressed(),
        FrameEncoder::zstd(1).unwrap().with_min_compress_len(0),
    ]
}

/// Decodes frames until the buffer runs dry or an error: what a connection task does.
fn decode_all(limits: Limits, bytes: &[u8]) -> (Vec<Message>, Option<FrameError>) {
    let mut dec = FrameDecoder::new(limits);
    let mut buf = BytesMut::from(bytes);
    let mut out = Vec::new();
    loop {
        match dec.decode(&mut buf) {
            Ok(Some(m)) => out.push(m),
            Ok(None) => return (out, None),
            Err(e) => return (out, Some(e)),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn keys_round_trip_through_their_path(key in common::key()) {
        let path = key.to_string();
        prop_assert_eq!(Key::parse(&path).unwrap(), key.clone());
        prop_assert_eq!(Key::validate(&path).unwrap(), key.key_type());
        let kp = KeyPath::new(&path).unwrap();
        prop_assert_eq!(kp.key(), key);
        let wire = postcard::to_allocvec(&kp).unwrap();
        prop_assert_eq!(postcard::from_bytes::<KeyPath>(&wire).unwrap(), kp);
    }

    #[test]
    fn accepted_paths_round_trip_exactly(path in "/calico/[a-zA-Z0-9%/._:-]{0,60}") {
        // Whatever the parser accepts formats back to the very same string.
        if let Ok(key) = Key::parse(&path) {
            prop_assert_eq!(key.to_string(), path);
        }
    }

    #[test]
    fn mutated_paths_round_trip_exactly_or_are_rejected(
        key in common::key(),
        at in any::<prop::sample::Index>(),
        with in prop::sample::select(vec!['/', '%', '-', '.', 'A', '0', ':', 'x', '2', 'f']),
    ) {
        let mut chars: Vec<char> = key.to_string().chars().collect();
        let i = at.index(chars.len());
        chars[i] = with;
        let path: String = chars.into_iter().collect();
        match Key::parse(&path) {
            Ok(k) => prop_assert_eq!(k.to_string(), path),
            Err(e) => prop_assert_eq!(e.path, path),
        }
    }

    #[test]
    fn values_round_trip(value in common::value()) {
        let enc = EncodedValue::encode(&value);
        prop_assert_eq!(enc.decode().unwrap(), value.clone());
        // Deterministic: the same value always gives the same bytes (the digest relies on it).
        prop_assert_eq!(EncodedValue::encode(&value), enc);
    }

    #[test]
    fn messages_round_trip_through_frames(msg in common::message()) {
        for mut enc in encoders() {
            let frame = enc.encode(&msg).unwrap();
            let (got, err) = decode_all(Limits::CLIENT_INBOUND, &frame);
            prop_assert!(err.is_none(), "{:?}", err);
            prop_assert_eq!(got, vec![msg.clone()]);
        }
    }

    #[test]
    fn truncated_frames_need_more_input(msg in common::message(), cut in any::<prop::sample::Index>()) {
        for mut enc in encoders() {
            let frame = enc.encode(&msg).unwrap();
            let cut = cut.index(frame.len());
            let (got, err) = decode_all(Limits::CLIENT_INBOUND, &frame[..cut]);
            prop_assert!(got.is_empty());
            prop_assert!(err.is_none(), "a prefix of a valid frame is not an error: {:?}", err);
        }
    }

    #[test]
    fn corrupted_frames_never_panic(msg in common::message(), flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8)) {
        for mut enc in encoders() {
            let mut frame = enc.encode(&msg).unwrap().to_vec();
            for (i, x) in &flips {
                let i = i.index(frame.len());
                frame[i] ^= x;
            }
            // Any outcome but a panic is fine; an error must leave a readable reason.
            for limits in [Limits::SERVER_INBOUND, Limits::CLIENT_INBOUND] {
                if let (_, Some(e)) = decode_all(limits, &frame) {
                    prop_assert!(!e.to_string().is_empty());
                }
            }
        }
    }

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
        for limits in [Limits::SERVER_INBOUND, Limits::CLIENT_INBOUND] {
            let _ = decode_all(limits, &bytes);
        }
    }

    #[test]
    fn random_payloads_behind_valid_headers_never_panic(
        ty in 1u8..=11,
        compressed in any::<bool>(),
        payload in prop::collection::vec(any::<u8>(), 0..512),
    ) {
        let mut frame = (payload.len() as u32).to_be_bytes().to_vec();
        frame.extend_from_slice(&[ty, u8::from(compressed)]);
        frame.extend_from_slice(&payload);
        let (_, err) = decode_all(Limits::SERVER_INBOUND, &frame);
        if let Some(e) = err {
            prop_assert!(!e.to_string().is_empty());
        }
    }

    #[test]
    fn frames_split_anywhere_decode_the_same(msgs in prop::collection::vec(common::message(), 1..4), cut in any::<prop::sample::Index>()) {
        let mut enc = FrameEncoder::zstd(1).unwrap();
        let stream: Vec<u8> = msgs.iter().flat_map(|m| enc.encode(m).unwrap().to_vec()).collect();
        let cut = cut.index(stream.len());
        let mut dec = FrameDecoder::new(Limits::CLIENT_INBOUND);
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for part in [&stream[..cut], &stream[cut..]] {
            buf.extend_from_slice(part);
            while let Some(m) = dec.decode(&mut buf).unwrap() {
                got.push(m);
            }
        }
        prop_assert_eq!(got, msgs);
        prop_assert!(buf.len() < HEADER_LEN || buf.is_empty());
    }
}
