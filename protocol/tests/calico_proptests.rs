//! Property tests of the Calico codec: every message round-trips; no input, random or a
//! damaged golden session, makes the decoder panic; and how the bytes are split across
//! reads does not change what is decoded.

// In tests a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::path::PathBuf;

use bytes::{Bytes, BytesMut};
use proptest::collection::vec;
use proptest::prelude::*;
use typha_protocol::calico::gob::{Limits, Value};
use typha_protocol::calico::messages::{
    self, ClientHello, DecoderRestart, GoTime, Message, Ping, Pong, Revision, SerializedUpdate,
    ServerHello, Side, SyncStatus, UpdateType,
};
use typha_protocol::calico::{Compression, StreamDecoder, StreamError};

/// What reading `bytes` gives, as a client reads a server's stream (restarting its decoder
/// on each `MsgDecoderRestart` it understands), fed in pieces that end at `cuts`.
fn read(limits: Limits, bytes: &[u8], cuts: &[usize]) -> (Vec<Message>, Option<StreamError>) {
    read_with(limits, bytes, cuts, true)
}

fn read_with(
    limits: Limits,
    bytes: &[u8],
    cuts: &[usize],
    restarts: bool,
) -> (Vec<Message>, Option<StreamError>) {
    let mut dec = StreamDecoder::new(limits);
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    let mut at = 0;
    let mut ends: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    ends.sort_unstable();
    ends.push(bytes.len());
    for end in ends {
        buf.extend_from_slice(&bytes[at..end.max(at)]);
        at = end.max(at);
        loop {
            match dec.decode(&mut buf) {
                Ok(Some(m)) => {
                    if let (true, Message::DecoderRestart(r)) = (restarts, &m) {
                        let Some(c) = Compression::from_name(&r.compression_algorithm) else {
                            return (out, None);
                        };
                        if let Err(e) = dec.restart(c) {
                            return (out, Some(e));
                        }
                    }
                    out.push(m);
                }
                Ok(None) => break,
                Err(e) => return (out, Some(e)),
            }
        }
    }
    (out, None)
}

fn golden_sessions() -> Vec<Vec<u8>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden/calico/session");
    let mut out: Vec<Vec<u8>> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "bin"))
        .map(|p| std::fs::read(p).unwrap())
        .collect();
    out.sort();
    out
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![Just(String::new()), "[a-zA-Z0-9/._ü-]{1,40}"]
}

fn time() -> impl Strategy<Value = GoTime> {
    prop_oneof![
        Just(GoTime::ZERO),
        (
            any::<i64>(),
            any::<i32>(),
            any::<i16>(),
            proptest::option::of(any::<u8>())
        )
            .prop_map(|(seconds, nanos, offset_minutes, offset_seconds)| GoTime {
                seconds,
                nanos,
                offset_minutes,
                offset_seconds,
            }),
    ]
}

fn revision() -> impl Strategy<Value = Revision> {
    prop_oneof![
        Just(Revision::None),
        text().prop_map(Revision::String),
        any::<i64>().prop_map(Revision::Int64),
        any::<u64>().prop_map(|u| Revision::Other {
            name: "uint64".into(),
            value: Value::Uint(u),
        }),
        any::<bool>().prop_map(|b| Revision::Other {
            name: "bool".into(),
            value: Value::Bool(b),
        }),
    ]
}

fn update() -> impl Strategy<Value = SerializedUpdate> {
    (
        text(),
        vec(any::<u8>(), 0..64),
        revision(),
        text(),
        any::<i64>(),
        any::<u8>(),
    )
        .prop_map(|(key, value, revision, v3, ttl, ut)| SerializedUpdate {
            key,
            value: Bytes::from(value),
            revision,
            v3_resource_version: v3,
            ttl,
            update_type: UpdateType::from_u8(ut),
        })
}

fn message() -> impl Strategy<Value = Message> {
    prop_oneof![
        (
            text(),
            text(),
            text(),
            text(),
            any::<bool>(),
            vec(text(), 0..3),
            any::<bool>(),
            any::<u64>()
        )
            .prop_map(
                |(h, i, v, s, r, c, m, id)| Message::ClientHello(ClientHello {
                    hostname: h,
                    info: i,
                    version: v,
                    syncer_type: s,
                    supports_decoder_restart: r,
                    supported_compression_algorithms: c,
                    supports_modern_policy_keys: m,
                    client_conn_id: id,
                })
            ),
        (text(), text(), any::<bool>(), any::<u64>()).prop_map(|(v, s, n, id)| {
            Message::ServerHello(ServerHello {
                version: v,
                syncer_type: s,
                supports_node_resource_updates: n,
                server_conn_id: id,
            })
        }),
        (
            text(),
            prop_oneof![Just(String::new()), Just("zstd".to_owned())]
        )
            .prop_map(|(m, c)| {
                Message::DecoderRestart(DecoderRestart {
                    message: m,
                    compression_algorithm: c,
                })
            }),
        Just(Message::Ack),
        any::<u8>().prop_map(|s| Message::SyncStatus(SyncStatus::from_u8(s))),
        time().prop_map(|t| Message::Ping(Ping { timestamp: t })),
        (time(), time()).prop_map(|(a, b)| Message::Pong(Pong {
            ping_timestamp: a,
            pong_timestamp: b,
        })),
        vec(update(), 0..8).prop_map(Message::Kvs),
    ]
}

fn side(m: &Message) -> Side {
    if Side::Server.sends(m.kind()) {
        Side::Server
    } else {
        Side::Client
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn messages_round_trip_whatever_the_split(msgs in vec(message(), 1..6), cuts in vec(any::<usize>(), 0..4)) {
        for s in [Side::Server, Side::Client] {
            let ours: Vec<_> = msgs.iter().filter(|m| side(m) == s).cloned().collect();
            let mut stream = s.preamble().to_vec();
            for m in &ours {
                stream.extend_from_slice(&messages::encode(s, m).unwrap());
            }
            let (got, err) = read_with(Limits::CLIENT_INBOUND, &stream, &cuts, false);
            prop_assert!(err.is_none(), "{err:?}");
            prop_assert_eq!(got, ours);
        }
    }

    #[test]
    fn random_bytes_never_panic(bytes in vec(any::<u8>(), 0..512), cuts in vec(any::<usize>(), 0..4)) {
        for limits in [Limits::SERVER_INBOUND, Limits::CLIENT_INBOUND] {
            let whole = read(limits, &bytes, &[]);
            let split = read(limits, &bytes, &cuts);
            prop_assert_eq!(whole.0, split.0);
            prop_assert_eq!(whole.1.is_some(), split.1.is_some());
        }
    }

    #[test]
    fn damaged_golden_sessions_never_panic_and_split_the_same(
        which in 0usize..5,
        edits in vec((any::<usize>(), any::<u8>(), 0u8..3), 1..6),
        cuts in vec(any::<usize>(), 1..4),
    ) {
        let mut bytes = golden_sessions()[which].clone();
        for (at, b, op) in edits {
            let at = at % (bytes.len() + 1);
            match op {
                0 if at < bytes.len() => bytes[at] ^= b | 1,
                1 => bytes.insert(at, b),
                _ if at < bytes.len() => { bytes.remove(at); }
                _ => {}
            }
        }
        for limits in [Limits::SERVER_INBOUND, Limits::CLIENT_INBOUND] {
            let whole = read(limits, &bytes, &[]);
            let split = read(limits, &bytes, &cuts);
            prop_assert_eq!(whole.0, split.0);
            prop_assert_eq!(whole.1, split.1);
        }
    }

    #[test]
    fn every_prefix_of_a_golden_session_is_only_incomplete(which in 0usize..5, cut in any::<usize>()) {
        let bytes = golden_sessions()[which].clone();
        let cut = cut % (bytes.len() + 1);
        let (_, err) = read(Limits::CLIENT_INBOUND, &bytes[..cut], &[]);
        prop_assert!(err.is_none(), "{err:?}");
    }
}

#[test]
fn a_restart_with_old_stream_bytes_after_it_is_an_error() {
    // A snappy stream whose chunk holds the restart message and one more byte.
    let restart = messages::encode(
        Side::Server,
        &Message::DecoderRestart(DecoderRestart {
            message: "x".into(),
            compression_algorithm: "".into(),
        }),
    )
    .unwrap();
    let mut plain = Side::Server.preamble().to_vec();
    plain.extend_from_slice(&restart);
    plain.push(0x01);
    let mut stream = typha_protocol::calico::snappy::STREAM_IDENTIFIER.to_vec();
    stream.extend(typha_protocol::calico::snappy::encode_chunks(&plain));
    let mut dec = StreamDecoder::new(Limits::CLIENT_INBOUND);
    dec.restart(Compression::Snappy).unwrap();
    let mut buf = BytesMut::from(&stream[..]);
    assert!(matches!(
        dec.decode(&mut buf).unwrap(),
        Some(Message::DecoderRestart(_))
    ));
    assert_eq!(
        dec.restart(Compression::None),
        Err(StreamError::DataAfterRestart(1))
    );
}
