// In tests a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use super::encode::{preamble, put_message, value_body, value_message};
use super::*;

fn uint(x: u64) -> Vec<u8> {
    let mut v = Vec::new();
    put_uint(&mut v, x);
    v
}

fn int(i: i64) -> Vec<u8> {
    let mut v = Vec::new();
    put_int(&mut v, i);
    v
}

fn msg(body: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    put_message(&mut v, body);
    v
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

fn decode_all(limits: Limits, bytes: &[u8]) -> Result<Vec<Decoded>, GobError> {
    let mut d = Decoder::new(limits);
    let mut buf = BytesMut::from(bytes);
    let mut out = Vec::new();
    while let Some(v) = d.decode(&mut buf)? {
        out.push(v);
    }
    Ok(out)
}

fn decode_err(limits: Limits, bytes: &[u8]) -> GobError {
    decode_all(limits, bytes).expect_err("must fail")
}

const L: Limits = Limits::SERVER_INBOUND;

fn s(text: &str) -> Value {
    Value::String(Bytes::copy_from_slice(text.as_bytes()))
}

/// A definition message.
fn def(id: u32, wt: &WireType) -> Vec<u8> {
    msg(&wt.definition_body(TypeId(id)))
}

#[test]
fn integers_as_go_writes_them() {
    assert_eq!(uint(0), [0x00]);
    assert_eq!(uint(127), [0x7f]);
    assert_eq!(uint(128), [0xff, 0x80]);
    assert_eq!(uint(256), [0xfe, 0x01, 0x00]);
    assert_eq!(
        uint(u64::MAX),
        [0xf8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]
    );
    assert_eq!(int(-1), [0x01]);
    assert_eq!(int(-64), [0x7f]);
    assert_eq!(int(64), [0xff, 0x80]);
    assert_eq!(int(-129), [0xfe, 0x01, 0x01]);
    for x in [0, 1, 127, 128, 255, 256, 1 << 40, u64::MAX] {
        assert_eq!(read_uint(&uint(x)).unwrap(), Some((x, uint(x).len())));
    }
    for i in [0, -1, 1, i64::MIN, i64::MAX, -64, 64] {
        let (x, _) = read_uint(&int(i)).unwrap().unwrap();
        assert_eq!(uint_to_int(x), i);
    }
    // Non-minimal, as Go accepts it.
    assert_eq!(read_uint(&[0xff, 0x05]).unwrap(), Some((5, 2)));
    // Partial.
    assert_eq!(read_uint(&[0xfe, 0x01]).unwrap(), None);
    assert_eq!(read_uint(&[]).unwrap(), None);
    // More than 8 bytes (0xf7 = -9) and the byte 0x80 (-128).
    assert_eq!(read_uint(&[0xf7]), Err(GobError::BadUint(0xf7)));
    assert_eq!(read_uint(&[0x80]), Err(GobError::BadUint(0x80)));
}

/// A table with one of each kind, and a value using all of it.
fn rich() -> (Vec<(TypeId, WireType)>, Value) {
    let inner = WireType::structure(
        "Inner",
        vec![
            FieldType::new("B", TypeId::BOOL),
            FieldType::new("I", TypeId::INT),
            FieldType::new("F", TypeId::FLOAT),
            FieldType::new("C", TypeId::COMPLEX),
        ],
    );
    let defs = vec![
        (
            TypeId(64),
            WireType::structure(
                "Outer",
                vec![
                    FieldType::new("Name", TypeId::STRING),
                    FieldType::new("Data", TypeId::BYTES),
                    FieldType::new("Inner", TypeId(65)),
                    FieldType::new("List", TypeId(66)),
                    FieldType::new("Arr", TypeId(67)),
                    FieldType::new("Map", TypeId(68)),
                    FieldType::new("Any", TypeId::INTERFACE),
                    FieldType::new("When", TypeId(69)),
                    FieldType::new("Zero", TypeId::UINT),
                ],
            ),
        ),
        (TypeId(65), inner),
        (TypeId(66), WireType::slice("[]Inner", TypeId(65))),
        (
            TypeId(67),
            WireType {
                name: "[2]uint".into(),
                kind: WireKind::Array {
                    elem: TypeId::UINT,
                    len: 2,
                },
            },
        ),
        (
            TypeId(68),
            WireType {
                name: "map[string]int".into(),
                kind: WireKind::Map {
                    key: TypeId::STRING,
                    elem: TypeId::INT,
                },
            },
        ),
        (TypeId(69), WireType::gob_encoder("Time")),
    ];
    let inner_def: Arc<[FieldType]> = match &defs[1].1.kind {
        WireKind::Struct { fields } => fields.clone(),
        _ => unreachable!(),
    };
    let outer_def: Arc<[FieldType]> = match &defs[0].1.kind {
        WireKind::Struct { fields } => fields.clone(),
        _ => unreachable!(),
    };
    let inner = |b: bool, i: i64| {
        Value::Struct(Struct {
            def: inner_def.clone(),
            fields: vec![
                (0, Value::Bool(b)),
                (1, Value::Int(i)),
                (2, Value::Float(1.5)),
                (3, Value::Complex(-2.0, 0.25)),
            ]
            .into_iter()
            .filter(|(_, v)| !encode::is_zero(v))
            .collect(),
        })
    };
    let value = Value::Struct(Struct {
        def: outer_def,
        fields: vec![
            (0, s("outer")),
            (1, Value::Bytes(Bytes::from_static(&[0, 1, 2, 255]))),
            (2, inner(true, -7)),
            (
                3,
                Value::Slice(vec![inner(false, 0), inner(true, i64::MIN)]),
            ),
            (4, Value::Array(vec![Value::Uint(0), Value::Uint(u64::MAX)])),
            (
                5,
                Value::Map(vec![(s("a"), Value::Int(1)), (s(""), Value::Int(0))]),
            ),
            (
                6,
                Value::Interface(Some(Box::new(Concrete {
                    name: Bytes::from_static(b"string"),
                    type_id: TypeId::STRING,
                    value: s(""),
                }))),
            ),
            (7, Value::Encoded(Bytes::from_static(b"\x01abc"))),
        ],
    });
    (defs, value)
}

#[test]
fn any_value_round_trips_after_a_preamble() {
    let (defs, value) = rich();
    let mut table = TypeTable::new();
    for (id, wt) in &defs {
        table.define(*id, wt.clone(), 100).unwrap();
    }
    let refs: Vec<_> = defs.iter().map(|(id, wt)| (*id, wt)).collect();
    let mut stream = preamble(&refs);
    stream.extend(value_message(&table, TypeId(64), &value).unwrap());
    // A top-level basic value (a singleton) and a nil interface too.
    stream.extend(value_message(&table, TypeId::STRING, &s("alone")).unwrap());
    stream.extend(value_message(&table, TypeId::INTERFACE, &Value::Interface(None)).unwrap());
    let got = decode_all(L, &stream).unwrap();
    assert_eq!(got.len(), 3);
    assert_eq!(got[0].type_id, TypeId(64));
    assert_eq!(got[0].value, value);
    assert_eq!(got[1].value, s("alone"));
    assert_eq!(got[2].value, Value::Interface(None));
    // The decoder learned exactly the definitions.
    for (id, wt) in &defs {
        assert_eq!(table.get(*id), Some(wt));
    }
}

#[test]
fn every_split_of_a_stream_decodes_the_same() {
    let golden = include_bytes!("../../../tests/golden/calico/fresh/MsgKVs.bin");
    let whole = decode_all(Limits::CLIENT_INBOUND, golden).unwrap();
    assert_eq!(whole.len(), 1);
    for cut in 0..=golden.len() {
        let mut d = Decoder::new(Limits::CLIENT_INBOUND);
        let mut buf = BytesMut::from(&golden[..cut]);
        let mut got = Vec::new();
        while let Some(v) = d.decode(&mut buf).unwrap() {
            got.push(v);
        }
        buf.extend_from_slice(&golden[cut..]);
        while let Some(v) = d.decode(&mut buf).unwrap() {
            got.push(v);
        }
        assert_eq!(got, whole, "cut at {cut}");
        assert!(buf.is_empty());
    }
}

#[test]
fn a_value_waiting_for_its_next_message_forgets_the_definitions_it_carried() {
    // fresh/MsgKVs: Envelope definition, then the value whose interface defines MsgKVs (74)
    // inline, then 76 and 75 in their own messages, then the rest of the value.
    let golden = include_bytes!("../../../tests/golden/calico/fresh/MsgKVs.bin");
    let mut d = Decoder::new(Limits::CLIENT_INBOUND);
    let mut buf = BytesMut::from(&golden[..0xa3]); // up to the definition of 75
    assert_eq!(d.decode(&mut buf).unwrap(), None);
    assert_eq!(d.types().len(), 1, "only the Envelope, consumed on its own");
    assert_eq!(buf.len(), 0xa3 - 0x22, "the partial value stays buffered");
    buf.extend_from_slice(&golden[0xa3..]);
    assert!(d.decode(&mut buf).unwrap().is_some());
    assert_eq!(d.types().len(), 4);
}

#[test]
fn unknown_fields_and_trailing_bytes_are_skipped_as_go_skips_them() {
    // A struct without its terminator ends with the message, as in Go.
    let st = WireType::structure("S", vec![FieldType::new("A", TypeId::UINT)]);
    let stream = cat(&[&def(64, &st), &msg(&[0xff, 0x80, 0x01, 0x05])]);
    let got = decode_all(L, &stream).unwrap();
    let Value::Struct(v) = &got[0].value else {
        panic!()
    };
    assert_eq!(v.get("A"), Some(&Value::Uint(5)));
    // Bytes after a value's end are dropped (Go resets its buffer before the next value).
    let stream = cat(&[
        &def(64, &st),
        &msg(&[0xff, 0x80, 0x01, 0x05, 0x00, 0x99, 0x98]),
    ]);
    assert_eq!(decode_all(L, &stream).unwrap().len(), 1);
}

#[test]
fn hostile_lengths_are_refused_before_anything_is_reserved() {
    // A message announcing 2^60 bytes.
    let mut d = Decoder::new(L);
    let mut buf = BytesMut::from(&[0xf8, 0x10, 0, 0, 0, 0, 0, 0, 0][..]);
    assert!(matches!(
        d.decode(&mut buf),
        Err(GobError::MessageTooLarge { .. })
    ));
    assert!(buf.capacity() < 1024);
    // Just over the limit.
    let mut buf = BytesMut::from(&uint(L.max_message_len as u64 + 1)[..]);
    assert!(matches!(
        Decoder::new(L).decode(&mut buf),
        Err(GobError::MessageTooLarge { .. })
    ));
    // At the limit, nothing sent yet: a bounded reservation, Ok(None).
    let mut buf = BytesMut::from(&uint(L.max_message_len as u64)[..]);
    assert_eq!(Decoder::new(L).decode(&mut buf).unwrap(), None);
    assert!(buf.capacity() <= 128 << 10);
    // A slice count, a string length and a name length beyond the message.
    let sl = WireType::slice("[]uint", TypeId::UINT);
    let stream = cat(&[
        &def(64, &sl),
        &msg(&cat(&[&int(64), &[0], &uint(1 << 40), &[1]])),
    ]);
    assert!(matches!(
        decode_err(L, &stream),
        GobError::LengthExceedsInput { .. }
    ));
    let stream = msg(&cat(&[&int(6), &[0], &uint(1 << 40)]));
    assert!(matches!(
        decode_err(L, &stream),
        GobError::LengthExceedsInput { .. }
    ));
    let stream = msg(&cat(&[&int(8), &[0], &uint(1 << 40)]));
    assert!(matches!(
        decode_err(L, &stream),
        GobError::LengthExceedsInput { .. }
    ));
    let long = vec![b'x'; 2000];
    let stream = msg(&cat(&[&int(8), &[0], &uint(2000), &long]));
    assert_eq!(decode_err(L, &stream), GobError::NameTooLong(2000));
    // An empty message.
    assert_eq!(decode_err(L, &[0]), GobError::EmptyMessage);
}

#[test]
fn many_small_elements_hit_the_memory_limit() {
    // []struct{}: one byte per element, ~50 bytes of Value each.
    let st = WireType::structure("E", vec![]);
    let sl = WireType::slice("[]E", TypeId(64));
    let n = 500_000;
    let mut body = cat(&[&int(65), &[0], &uint(n)]);
    body.resize(body.len() + n as usize, 0);
    let stream = cat(&[&def(64, &st), &def(65, &sl), &msg(&body)]);
    assert!(matches!(
        decode_err(L, &stream),
        GobError::DecodedTooLarge { .. }
    ));
    let roomy = Limits {
        max_decoded_len: 64 << 20,
        ..L
    };
    assert_eq!(decode_all(roomy, &stream).unwrap().len(), 1);
}

#[test]
fn definitions_are_checked_as_go_checks_them() {
    let st = WireType::structure("S", vec![FieldType::new("A", TypeId::UINT)]);
    // Below 64, or twice on one stream.
    assert_eq!(
        decode_err(L, &def(63, &st)),
        GobError::DuplicateType(TypeId(63))
    );
    assert_eq!(
        decode_err(L, &def(8, &st)),
        GobError::DuplicateType(TypeId(8))
    );
    let twice = cat(&[&def(64, &st), &def(64, &st)]);
    assert_eq!(decode_err(L, &twice), GobError::DuplicateType(TypeId(64)));
    // Too many.
    let few = Limits { max_types: 2, ..L };
    let three = cat(&[&def(64, &st), &def(65, &st), &def(66, &st)]);
    assert_eq!(decode_err(few, &three), GobError::TooManyTypes { max: 2 });
    // Extra bytes after a top-level definition.
    let mut body = st.definition_body(TypeId(64));
    body.push(7);
    assert_eq!(decode_err(L, &msg(&body)), GobError::ExtraData(TypeId(64)));
    // No kind set: the wireType ends at once.
    let body = cat(&[&int(-64), &[0]]);
    assert!(matches!(
        decode_err(L, &msg(&body)),
        GobError::BadDefinition { .. }
    ));
    // Two kinds set.
    let mut body = st.definition_body(TypeId(64));
    body.pop(); // the wireType's end: add GobEncoderT (field 5, delta 2) after StructT
    body.extend_from_slice(&[2, 1, 1, 1, b'T', 0, 0, 0]);
    assert!(matches!(
        decode_err(L, &msg(&body)),
        GobError::BadDefinition { .. }
    ));
    // A field number past wireType's seven.
    let body = cat(&[&int(-64), &[8, 0]]);
    assert!(matches!(
        decode_err(L, &msg(&body)),
        GobError::BadDefinition { .. }
    ));
    // A field type id out of range.
    let bad = WireType::structure("S", vec![FieldType::new("A", TypeId(u32::MAX))]);
    assert!(matches!(
        decode_err(L, &def(64, &bad)),
        GobError::InvalidTypeId(_)
    ));
}

#[test]
fn values_of_undefined_or_reserved_types_are_refused() {
    assert_eq!(
        decode_err(L, &msg(&cat(&[&int(70), &[0]]))),
        GobError::UnknownType(TypeId(70))
    );
    assert_eq!(
        decode_err(L, &msg(&cat(&[&int(16), &[0]]))),
        GobError::ReservedType(TypeId(16))
    );
    assert_eq!(decode_err(L, &msg(&[0])), GobError::InvalidTypeId(0));
    // A struct field delta past the last field.
    let st = WireType::structure("S", vec![FieldType::new("A", TypeId::UINT)]);
    let stream = cat(&[&def(64, &st), &msg(&cat(&[&int(64), &[2, 1, 0]]))]);
    assert!(matches!(
        decode_err(L, &stream),
        GobError::FieldOutOfRange { .. }
    ));
    // A huge delta does not overflow.
    let stream = cat(&[
        &def(64, &st),
        &msg(&cat(&[&int(64), &uint(u64::MAX), &[1, 0]])),
    ]);
    assert!(matches!(
        decode_err(L, &stream),
        GobError::FieldOutOfRange { .. }
    ));
    // A singleton whose delta is not zero.
    assert_eq!(
        decode_err(L, &msg(&cat(&[&int(3), &[1, 5]]))),
        GobError::BadSingleton(1)
    );
    // An array sent with the wrong count.
    let arr = WireType {
        name: "[2]uint".into(),
        kind: WireKind::Array {
            elem: TypeId::UINT,
            len: 2,
        },
    };
    let stream = cat(&[&def(64, &arr), &msg(&cat(&[&int(64), &[0, 3, 1, 2, 3]]))]);
    assert_eq!(
        decode_err(L, &stream),
        GobError::ArrayLength { len: 2, count: 3 }
    );
    // Truncated inside a value.
    assert_eq!(
        decode_err(L, &msg(&cat(&[&int(6), &[0, 5, b'a']]))),
        GobError::LengthExceedsInput {
            what: "string",
            len: 5,
            left: 1
        }
    );
    assert_eq!(
        decode_err(L, &msg(&int(2))),
        GobError::Truncated("singleton delta")
    );
}

#[test]
fn deep_nesting_is_refused() {
    // type T []T, nested 1,000 deep.
    let sl = WireType::slice("T", TypeId(64));
    let mut body = cat(&[&int(64), &[0]]);
    body.extend(std::iter::repeat_n(1u8, 1000));
    body.push(0);
    let stream = cat(&[&def(64, &sl), &msg(&body)]);
    assert_eq!(
        decode_err(L, &stream),
        GobError::TooDeep { max: L.max_depth }
    );
    // Interfaces in interfaces, each a singleton of type interface.
    let mut body = cat(&[&int(8), &[0]]);
    for _ in 0..1000 {
        body.extend_from_slice(&[1, b'x', 0x10, 0x7f, 0]);
    }
    assert_eq!(
        decode_err(L, &msg(&body)),
        GobError::TooDeep { max: L.max_depth }
    );
}

#[test]
fn a_value_may_not_span_more_messages_than_the_limit() {
    // Envelope{Message any} whose interface's type sequence runs over one definition per
    // message, more of them than the limit allows.
    let env = WireType::structure(
        "Envelope",
        vec![FieldType::new("Message", TypeId::INTERFACE)],
    );
    let st = WireType::structure("S", vec![]);
    let mut stream = def(64, &env);
    stream.extend(msg(&cat(&[&int(64), &[1, 1, b'x']])));
    for id in 65..65 + L.max_value_messages as u32 {
        stream.extend(def(id, &st));
    }
    stream.extend(msg(&cat(&[&int(65), &[1, 0, 0]])));
    assert_eq!(
        decode_err(L, &stream),
        GobError::TooManyMessages {
            max: L.max_value_messages
        }
    );
    // The value's first message, the definitions and its last message fit a limit of two
    // more.
    let roomy = Limits {
        max_value_messages: L.max_value_messages + 2,
        ..L
    };
    assert_eq!(decode_all(roomy, &stream).unwrap().len(), 1);
}

#[test]
fn the_generic_encoder_refuses_values_that_do_not_fit_their_type() {
    let table = TypeTable::new();
    assert_eq!(
        value_body(&table, TypeId(64), &Value::Uint(1)),
        Err(EncodeError::UnknownType(TypeId(64)))
    );
    assert!(matches!(
        value_body(&table, TypeId::STRING, &Value::Uint(1)),
        Err(EncodeError::Mismatch { .. })
    ));
}
