//! Property tests of the Calico codec: every message round-trips; no input, random or a
//! damaged golden session, makes the decoder panic; and how the bytes are split across
//! reads does not change what is decoded.

// In tests a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod calico_streamed;
use calico_streamed::put_back;
use std::path::PathBuf;

use bytes::{Bytes, BytesMut};
use proptest::collection::vec;
use proptest::prelude::*;
use typha_protocol::calico::gob::{Limits, Value};
use typha_protocol::calico::messages::{
    self, ClientHello, DecoderRestart, GoTime, Message, MessageKind, Ping, Pong, Revision,
    SerializedUpdate, ServerHello, Side, SyncStatus, UpdateType,
};
use typha_protocol::calico::{Compression, StreamDecoder, StreamError};

/// `bytes` cut into consecutive pieces that end at `cuts` (each taken modulo the length, in
/// any order) and at the end.
fn pieces<'a>(bytes: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut ends: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    ends.sort_unstable();
    ends.push(bytes.len());
    let mut at = 0;
    ends.into_iter()
        .map(|end| {
            let piece = &bytes[at..end];
            at = end;
            piece
        })
        .collect()
}

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
    for piece in pieces(bytes, cuts) {
        buf.extend_from_slice(piece);
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

/// As [`read_with`], but streaming every `MsgKVs`
/// ([`StreamDecoder::decode_gob_streaming`]): the updates handed over are put back into their
/// message once it has ended, so the result compares with [`read`]'s. Also the most bytes the
/// decoder held (read but not decoded, and decoded but not read by gob) between reads.
fn read_streaming(
    limits: Limits,
    bytes: &[u8],
    cuts: &[usize],
    restarts: bool,
) -> (Vec<Message>, Option<StreamError>, usize) {
    let name = MessageKind::Kvs.registered_name();
    let mut dec = StreamDecoder::new(limits);
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    let mut handed: Vec<Value> = Vec::new();
    let mut held = 0;
    for piece in pieces(bytes, cuts) {
        buf.extend_from_slice(piece);
        loop {
            let got =
                dec.decode_gob_streaming(&mut buf, name.as_bytes(), b"KVs", &mut |v: &Value| {
                    handed.push(v.clone())
                });
            let decoded = match got {
                Ok(Some(mut d)) => {
                    put_back(&mut d.value, std::mem::take(&mut handed));
                    match messages::from_gob(&d) {
                        Ok(m) => m,
                        Err(e) => return (out, Some(e.into()), held),
                    }
                }
                Ok(None) => break,
                Err(e) => return (out, Some(e), held),
            };
            if let (true, Message::DecoderRestart(r)) = (restarts, &decoded) {
                let Some(c) = Compression::from_name(&r.compression_algorithm) else {
                    return (out, None, held);
                };
                if let Err(e) = dec.restart(c) {
                    return (out, Some(e), held);
                }
            }
            out.push(decoded);
        }
        held = held.max(buf.len() + dec.decoded_held());
    }
    (out, None, held)
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

/// A streaming read of any input never panics, and agrees with the whole read: the same
/// messages if it succeeds; if not, it fails no later (a streamed value is checked as it
/// arrives, so a damaged message still arriving can fail before the whole read, which waits
/// for its end, would look at it).
fn streaming_agrees(
    limits: Limits,
    bytes: &[u8],
    cuts: &[usize],
    whole: &(Vec<Message>, Option<StreamError>),
) -> Result<(), TestCaseError> {
    let (got, err, _) = read_streaming(limits, bytes, cuts, true);
    if err.is_none() {
        prop_assert_eq!(&got, &whole.0);
        prop_assert!(whole.1.is_none(), "{:?}", whole.1);
    } else {
        prop_assert!(whole.0.starts_with(&got), "{got:?} vs {:?}", whole.0);
    }
    Ok(())
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
            prop_assert_eq!(&got, &ours);
            // Streamed, every update arrives once, in order, whatever the split.
            let (got, err, _) = read_streaming(Limits::CLIENT_INBOUND, &stream, &cuts, false);
            prop_assert!(err.is_none(), "{err:?}");
            prop_assert_eq!(&got, &ours);
        }
    }

    #[test]
    fn a_streamed_stream_reads_the_same_byte_by_byte(which in 0usize..5, from in any::<usize>()) {
        // Every byte its own read from `from` on: every position a value can stop at.
        let bytes = golden_sessions()[which].clone();
        let from = from % (bytes.len() + 1);
        let cuts: Vec<usize> = (from..bytes.len()).collect();
        let whole = read(Limits::CLIENT_INBOUND, &bytes, &[]);
        let (got, err, _) = read_streaming(Limits::CLIENT_INBOUND, &bytes, &cuts, true);
        prop_assert_eq!(got, whole.0);
        prop_assert_eq!(err, whole.1);
    }

    #[test]
    fn random_bytes_never_panic(bytes in vec(any::<u8>(), 0..512), cuts in vec(any::<usize>(), 0..4)) {
        for limits in [Limits::SERVER_INBOUND, Limits::CLIENT_INBOUND] {
            let whole = read(limits, &bytes, &[]);
            let split = read(limits, &bytes, &cuts);
            prop_assert_eq!(&whole.0, &split.0);
            prop_assert_eq!(whole.1.is_some(), split.1.is_some());
            streaming_agrees(limits, &bytes, &cuts, &whole)?;
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
            prop_assert_eq!(&whole.0, &split.0);
            prop_assert_eq!(&whole.1, &split.1);
            streaming_agrees(limits, &bytes, &cuts, &whole)?;
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

#[test]
fn a_streamed_snapshot_is_never_held_whole() {
    // A snapshot message of 2,000 updates (about 900 KB), plain and then in snappy framing
    // after a decoder restart, read 1,500 bytes at a time.
    let updates: Vec<SerializedUpdate> = (0..2000)
        .map(|i| SerializedUpdate {
            key: format!("/calico/v1/host/node-{i}/workload/k8s/pod-{i}/endpoint/eth0"),
            value: Bytes::from(format!(
                "{{\"state\":\"active\",\"n\":{i},\"pad\":\"{}\"}}",
                "x".repeat(i % 700)
            )),
            revision: Revision::String(i.to_string()),
            update_type: UpdateType::New,
            ..Default::default()
        })
        .collect();
    let largest = updates
        .iter()
        .map(|u| u.key.len() + u.value.len())
        .max()
        .unwrap();
    let kvs = messages::encode(Side::Server, &Message::Kvs(updates.clone())).unwrap();
    let hello = Message::ServerHello(ServerHello {
        version: "v".into(),
        syncer_type: "felix".into(),
        supports_node_resource_updates: true,
        server_conn_id: 1,
    });
    let in_sync = Message::SyncStatus(SyncStatus::InSync);
    let mut plain = Side::Server.preamble().to_vec();
    plain.extend_from_slice(&messages::encode(Side::Server, &hello).unwrap());
    plain.extend_from_slice(&kvs);
    let restart = Message::DecoderRestart(DecoderRestart {
        message: "snappy".into(),
        compression_algorithm: "snappy".into(),
    });
    plain.extend_from_slice(&messages::encode(Side::Server, &restart).unwrap());
    let mut after = Side::Server.preamble().to_vec();
    after.extend_from_slice(&kvs);
    after.extend_from_slice(&messages::encode(Side::Server, &in_sync).unwrap());
    let mut snappy = typha_protocol::calico::snappy::STREAM_IDENTIFIER.to_vec();
    snappy.extend(typha_protocol::calico::snappy::encode_chunks(&after));

    for (what, stream, bound) in [
        ("plain", plain.clone(), largest + 3_000),
        // At most one chunk (64 KiB) decoded ahead of gob.
        (
            "snappy",
            [plain.clone(), snappy].concat(),
            largest + 3_000 + 65_536 + 76_500,
        ),
    ] {
        let cuts: Vec<usize> = (0..stream.len()).step_by(1_500).collect();
        let (got, err, held) = read_streaming(Limits::CLIENT_INBOUND, &stream, &cuts, true);
        assert!(err.is_none(), "{what}: {err:?}");
        let kvs: Vec<&Message> = got
            .iter()
            .filter(|m| matches!(m, Message::Kvs(_)))
            .collect();
        assert!(!kvs.is_empty(), "{what}");
        for m in kvs {
            assert_eq!(m, &Message::Kvs(updates.clone()), "{what}");
        }
        assert!(
            held < bound && held * 10 < kvs_len(&updates),
            "{what}: held {held} bytes (bound {bound})"
        );
        // The whole read holds the message.
        let whole_held = {
            let mut dec = StreamDecoder::new(Limits::CLIENT_INBOUND);
            let mut buf = BytesMut::from(&plain[..plain.len() / 2]);
            while dec.decode(&mut buf).unwrap().is_some() {}
            buf.len()
        };
        assert!(whole_held > held, "{what}: {whole_held} vs {held}");
    }
}

fn kvs_len(updates: &[SerializedUpdate]) -> usize {
    updates.iter().map(|u| u.key.len() + u.value.len()).sum()
}
