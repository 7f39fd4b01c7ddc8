// In tests a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};

use super::*;
use crate::calico::gob::encode::{preamble, value_message};
use crate::calico::gob::{
    self, Concrete, Decoded, FieldType, Limits, Struct, TypeId, TypeTable, Value, WireKind,
    WireType,
};

fn every_message() -> Vec<Message> {
    let t = GoTime::from_unix(1_795_521_600, 123_456_789);
    vec![
        Message::ClientHello(ClientHello {
            hostname: "node-ü".into(),
            info: "calico-node v3.32.0".into(),
            version: "v3.32.0".into(),
            syncer_type: "bgp".into(),
            supports_decoder_restart: true,
            supported_compression_algorithms: vec!["snappy".into(), "zstd".into()],
            supports_modern_policy_keys: true,
            client_conn_id: u64::MAX,
        }),
        Message::ClientHello(ClientHello::default()),
        Message::ServerHello(ServerHello {
            version: "typha-rs".into(),
            syncer_type: "felix".into(),
            supports_node_resource_updates: true,
            server_conn_id: 7,
        }),
        Message::DecoderRestart(DecoderRestart {
            message: RESTART_ENABLE_SNAPPY.into(),
            compression_algorithm: COMPRESSION_SNAPPY.into(),
        }),
        Message::DecoderRestart(DecoderRestart::default()),
        Message::Ack,
        Message::SyncStatus(SyncStatus::WaitForDatastore),
        Message::SyncStatus(SyncStatus::InSync),
        Message::SyncStatus(SyncStatus::Other(200)),
        Message::Ping(Ping { timestamp: t }),
        Message::Ping(Ping::default()),
        Message::Pong(Pong {
            ping_timestamp: GoTime {
                offset_minutes: 60,
                offset_seconds: Some(30),
                ..t
            },
            pong_timestamp: GoTime {
                offset_minutes: 0,
                ..t
            },
        }),
        Message::Kvs(vec![]),
        Message::Kvs(vec![
            SerializedUpdate {
                key: "/calico/v1/config/LogSeverityScreen".into(),
                value: Bytes::from_static(b"Info"),
                revision: Revision::String("1".into()),
                update_type: UpdateType::New,
                ..Default::default()
            },
            SerializedUpdate {
                key: "/calico/resources/v3/projectcalico.org/nodes/n".into(),
                value: Bytes::from_static(b"{}"),
                revision: Revision::String(String::new()),
                v3_resource_version: "42".into(),
                ttl: -5,
                update_type: UpdateType::Updated,
            },
            SerializedUpdate {
                key: "/calico/v1/Ready".into(),
                revision: Revision::Int64(-1),
                update_type: UpdateType::Deleted,
                ..Default::default()
            },
            SerializedUpdate {
                key: "k".into(),
                revision: Revision::Other {
                    name: "uint64".into(),
                    value: Value::Uint(0),
                },
                update_type: UpdateType::Other(9),
                ..Default::default()
            },
            SerializedUpdate::default(),
        ]),
    ]
}

fn side_of(m: &Message) -> Side {
    if Side::Server.sends(m.kind()) {
        Side::Server
    } else {
        Side::Client
    }
}

fn decode_stream(bytes: &[u8]) -> Vec<Message> {
    let mut d = gob::Decoder::new(Limits::CLIENT_INBOUND);
    let mut buf = BytesMut::from(bytes);
    let mut out = Vec::new();
    while let Some(v) = d.decode(&mut buf).unwrap() {
        out.push(from_gob(&v).unwrap());
    }
    assert!(buf.is_empty());
    out
}

#[test]
fn every_message_round_trips_after_its_sides_preamble() {
    for m in every_message() {
        let side = side_of(&m);
        let mut stream = side.preamble().to_vec();
        let once = encode(side, &m).unwrap();
        stream.extend_from_slice(&once);
        stream.extend_from_slice(&once);
        assert_eq!(decode_stream(&stream), vec![m.clone(), m.clone()], "{m:?}");
    }
}

#[test]
fn a_side_encodes_only_what_its_preamble_defines() {
    for kind in MessageKind::ALL {
        assert!(
            Side::Server.sends(kind) != Side::Client.sends(kind),
            "{kind}"
        );
    }
    assert_eq!(
        encode(Side::Server, &Message::Ack),
        Err(EncodeError::NotInPreamble {
            kind: MessageKind::Ack,
            side: Side::Server
        })
    );
}

#[test]
fn go_time_encoding() {
    let t = GoTime::from_unix(0, 5);
    assert_eq!(
        t.to_system_time(),
        Some(UNIX_EPOCH + Duration::from_nanos(5))
    );
    assert_eq!(
        GoTime::from_system_time(UNIX_EPOCH + Duration::new(3, 7)),
        GoTime::from_unix(3, 7)
    );
    assert_eq!(
        GoTime::from_system_time(UNIX_EPOCH - Duration::from_millis(1500)),
        GoTime::from_unix(-2, 500_000_000)
    );
    let b = t.to_gob_bytes();
    assert_eq!(b.len(), 15);
    assert_eq!(b[0], 1);
    assert_eq!(&b[13..], &[0xff, 0xff], "UTC is offset -1");
    assert_eq!(GoTime::from_gob_bytes(&b), Ok(t));
    let v2 = GoTime {
        offset_seconds: Some(200),
        ..t
    };
    assert_eq!(v2.to_gob_bytes().len(), 16);
    assert_eq!(GoTime::from_gob_bytes(&v2.to_gob_bytes()), Ok(v2));
    assert_eq!(GoTime::from_gob_bytes(&[]), Err(TimeError::Length(0)));
    assert_eq!(GoTime::from_gob_bytes(&[3; 15]), Err(TimeError::Version(3)));
    assert_eq!(GoTime::from_gob_bytes(&b[..14]), Err(TimeError::Length(14)));
    assert!(GoTime::ZERO.is_zero() && GoTime::default().is_zero());
    assert!(
        !GoTime {
            offset_minutes: 0,
            ..GoTime::ZERO
        }
        .is_zero(),
        "a zone is not UTC"
    );
}

/// A table where the server hello has other ids, another field order, and fields we do not
/// know, as a later Calico might send it.
fn other_table() -> (TypeTable, Vec<u8>) {
    let mut table = TypeTable::new();
    let env = WireType::structure(
        "Envelope",
        vec![FieldType::new("Message", TypeId::INTERFACE)],
    );
    let hello = WireType::structure(
        "MsgServerHello",
        vec![
            FieldType::new("Extra", TypeId(201)),
            FieldType::new("SyncerType", TypeId::STRING),
            FieldType::new("Version", TypeId::STRING),
            FieldType::new("Future", TypeId::INTERFACE),
        ],
    );
    let extra = WireType::slice("[]string", TypeId::STRING);
    table.define(TypeId(200), env.clone(), 10).unwrap();
    table.define(TypeId(300), hello.clone(), 10).unwrap();
    table.define(TypeId(201), extra.clone(), 10).unwrap();
    let pre = preamble(&[
        (TypeId(200), &env),
        (TypeId(201), &extra),
        (TypeId(300), &hello),
    ]);
    (table, pre)
}

fn def_of(table: &TypeTable, id: u32) -> Arc<[FieldType]> {
    match &table.get(TypeId(id)).unwrap().kind {
        WireKind::Struct { fields } => fields.clone(),
        _ => unreachable!(),
    }
}

fn envelope(table: &TypeTable, name: &str, id: u32, inner: Value) -> Value {
    Value::Struct(Struct {
        def: def_of(table, 200),
        fields: vec![(
            0,
            Value::Interface(Some(Box::new(Concrete {
                name: Bytes::from(format!("{REGISTERED_PREFIX}{name}")),
                type_id: TypeId(id),
                value: inner,
            }))),
        )],
    })
}

fn s(text: &str) -> Value {
    Value::String(Bytes::copy_from_slice(text.as_bytes()))
}

#[test]
fn fields_match_by_name_and_unknown_ones_are_ignored() {
    let (table, mut stream) = other_table();
    let hello = Value::Struct(Struct {
        def: def_of(&table, 300),
        fields: vec![
            (0, Value::Slice(vec![s("a")])),
            (1, s("bgp")),
            (2, s("v9")),
            (
                3,
                Value::Interface(Some(Box::new(Concrete {
                    name: Bytes::from_static(b"int"),
                    type_id: TypeId::INT,
                    value: Value::Int(3),
                }))),
            ),
        ],
    });
    stream.extend(
        value_message(
            &table,
            TypeId(200),
            &envelope(&table, "MsgServerHello", 300, hello),
        )
        .unwrap(),
    );
    assert_eq!(
        decode_stream(&stream),
        vec![Message::ServerHello(ServerHello {
            version: "v9".into(),
            syncer_type: "bgp".into(),
            ..Default::default()
        })]
    );
}

fn decoded(value: Value) -> Decoded {
    Decoded {
        type_id: TypeId(200),
        value,
    }
}

#[test]
fn what_go_refuses_is_an_error() {
    let (table, _) = other_table();
    // A field of the wrong type.
    let hello = Value::Struct(Struct {
        def: def_of(&table, 300),
        fields: vec![(1, Value::Uint(1))],
    });
    assert!(matches!(
        from_gob(&decoded(envelope(
            &table,
            "MsgServerHello",
            300,
            hello.clone()
        ))),
        Err(MessageError::WrongType {
            field: "SyncerType",
            ..
        })
    ));
    // No field of ours in a struct that has fields.
    let hello = Value::Struct(Struct {
        def: def_of(&table, 300),
        fields: vec![],
    });
    assert_eq!(
        from_gob(&decoded(envelope(&table, "MsgPing", 300, hello))),
        Err(MessageError::NoFieldsMatched("MsgPing"))
    );
    // A name nobody registered.
    let empty = Value::Struct(Struct {
        def: Arc::from(vec![]),
        fields: vec![],
    });
    assert_eq!(
        from_gob(&decoded(envelope(&table, "MsgGoodbye", 300, empty.clone()))),
        Err(MessageError::UnknownName(format!(
            "{REGISTERED_PREFIX}MsgGoodbye"
        )))
    );
    assert_eq!(
        from_gob(&decoded(envelope(&table, "MsgACK", 300, empty.clone()))),
        Ok(Message::Ack)
    );
    // A nil message, a message that is not a struct, a value that is not a struct.
    let nil = Value::Struct(Struct {
        def: def_of(&table, 200),
        fields: vec![],
    });
    assert_eq!(from_gob(&decoded(nil)), Err(MessageError::NoMessage));
    assert!(matches!(
        from_gob(&decoded(envelope(&table, "MsgACK", 6, s("x")))),
        Err(MessageError::WrongType { .. })
    ));
    assert_eq!(from_gob(&decoded(s("x"))), Err(MessageError::NotEnvelope));
    // A sync status past uint8, a bad time, a key that is not UTF-8.
    let status = Value::Struct(Struct {
        def: Arc::from(vec![FieldType::new("SyncStatus", TypeId::UINT)]),
        fields: vec![(0, Value::Uint(256))],
    });
    assert!(matches!(
        from_gob(&decoded(envelope(&table, "MsgSyncStatus", 300, status))),
        Err(MessageError::OutOfRange { value: 256, .. })
    ));
    let ping = Value::Struct(Struct {
        def: Arc::from(vec![FieldType::new("Timestamp", TypeId(72))]),
        fields: vec![(0, Value::Encoded(Bytes::from_static(b"\x01short")))],
    });
    assert!(matches!(
        from_gob(&decoded(envelope(&table, "MsgPing", 300, ping))),
        Err(MessageError::Time { .. })
    ));
    let dr = Value::Struct(Struct {
        def: Arc::from(vec![FieldType::new("Message", TypeId::STRING)]),
        fields: vec![(0, Value::String(Bytes::from_static(b"\xff")))],
    });
    assert_eq!(
        from_gob(&decoded(envelope(&table, "MsgDecoderRestart", 300, dr))),
        Err(MessageError::NotUtf8("Message"))
    );
}

#[test]
fn sync_status_maps_to_our_model() {
    use crate::model::SyncStatus as Ours;
    for ours in [Ours::WaitForDatastore, Ours::ResyncInProgress, Ours::InSync] {
        assert_eq!(SyncStatus::from(ours).to_model(), Some(ours));
        assert_eq!(
            SyncStatus::from_u8(SyncStatus::from(ours).as_u8()),
            SyncStatus::from(ours)
        );
    }
    assert_eq!(SyncStatus::Other(7).to_model(), None);
}
