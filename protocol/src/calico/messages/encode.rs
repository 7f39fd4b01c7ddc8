//! Messages to gob value messages, written directly (no intermediate [`Value`] tree), with
//! our type ids ([`super::schema`]). Zero-valued fields are left out, as Go leaves them out.
//!
//! Each result is one complete gob message, `[len][64][01][name][id][count][value][00]`,
//! valid on any stream that started with the preamble of a side that sends the message: the
//! same bytes for every connection.

use bytes::Bytes;

use super::model::{GoTime, Message, MessageKind, Revision, SerializedUpdate};
use super::schema::{self, Side};
use crate::calico::gob::encode::{StructWriter, put_message, value_body};
use crate::calico::gob::{
    EncodeError as GobEncodeError, TypeId, TypeTable, Value, put_bytes, put_int, put_uint,
};

/// Why a message could not be encoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// The side's preamble does not define the message's type: it is not one that side sends.
    #[error("{kind} is not sent by the {side:?} side, whose preamble does not define it")]
    NotInPreamble {
        /// The message.
        kind: MessageKind,
        /// The side.
        side: Side,
    },
    /// A revision whose value is not of a basic gob type.
    #[error("revision of type {name:?}: {source}")]
    Revision {
        /// The revision's registered name.
        name: String,
        /// Why.
        #[source]
        source: GobEncodeError,
    },
}

/// Encodes `msg` as a value message for a stream that started with `side`'s preamble.
///
/// # Errors
///
/// [`EncodeError::NotInPreamble`] when `msg` is not one that `side` sends (its preamble does not
/// define the type); [`EncodeError::Revision`] as [`encode_body`] returns it.
pub fn encode(side: Side, msg: &Message) -> Result<Bytes, EncodeError> {
    let kind = msg.kind();
    if !side.sends(kind) {
        return Err(EncodeError::NotInPreamble { kind, side });
    }
    let mut body = Vec::with_capacity(128);
    encode_body(msg, &mut body)?;
    let mut out = Vec::with_capacity(body.len() + 9);
    put_message(&mut out, &body);
    Ok(Bytes::from(out))
}

/// The body of `msg`'s value message (without the length prefix), whatever the side.
///
/// # Errors
///
/// [`EncodeError::Revision`] for a KV whose revision is a value of no basic gob type. `out` may
/// hold part of the message then.
pub fn encode_body(msg: &Message, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    let kind = msg.kind();
    put_int(out, i64::from(schema::ENVELOPE.0));
    let mut envelope = StructWriter::new(out);
    let field = envelope.field(0);
    put_bytes(field, kind.registered_name().as_bytes());
    put_int(field, i64::from(schema::type_id(kind).0));
    let mut inner = Vec::with_capacity(64);
    message_struct(msg, &mut inner)?;
    put_bytes(field, &inner);
    envelope.finish();
    Ok(())
}

fn string_field(w: &mut StructWriter<'_>, index: usize, s: &str) {
    if !s.is_empty() {
        put_bytes(w.field(index), s.as_bytes());
    }
}

fn bool_field(w: &mut StructWriter<'_>, index: usize, b: bool) {
    if b {
        put_uint(w.field(index), 1);
    }
}

fn uint_field(w: &mut StructWriter<'_>, index: usize, u: u64) {
    if u != 0 {
        put_uint(w.field(index), u);
    }
}

fn time_field(w: &mut StructWriter<'_>, index: usize, t: &GoTime) {
    if !t.is_zero() {
        put_bytes(w.field(index), &t.to_gob_bytes());
    }
}

fn message_struct(msg: &Message, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    let mut w = StructWriter::new(out);
    match msg {
        Message::ClientHello(h) => {
            string_field(&mut w, 0, &h.hostname);
            string_field(&mut w, 1, &h.info);
            string_field(&mut w, 2, &h.version);
            string_field(&mut w, 3, &h.syncer_type);
            bool_field(&mut w, 4, h.supports_decoder_restart);
            if !h.supported_compression_algorithms.is_empty() {
                let f = w.field(5);
                put_uint(f, h.supported_compression_algorithms.len() as u64);
                for a in &h.supported_compression_algorithms {
                    put_bytes(f, a.as_bytes());
                }
            }
            bool_field(&mut w, 6, h.supports_modern_policy_keys);
            uint_field(&mut w, 7, h.client_conn_id);
        }
        Message::ServerHello(h) => {
            string_field(&mut w, 0, &h.version);
            string_field(&mut w, 1, &h.syncer_type);
            bool_field(&mut w, 2, h.supports_node_resource_updates);
            uint_field(&mut w, 3, h.server_conn_id);
        }
        Message::DecoderRestart(r) => {
            string_field(&mut w, 0, &r.message);
            string_field(&mut w, 1, &r.compression_algorithm);
        }
        Message::Ack => {}
        Message::SyncStatus(s) => uint_field(&mut w, 0, u64::from(s.as_u8())),
        Message::Ping(p) => time_field(&mut w, 0, &p.timestamp),
        Message::Pong(p) => {
            time_field(&mut w, 0, &p.ping_timestamp);
            time_field(&mut w, 1, &p.pong_timestamp);
        }
        Message::Kvs(kvs) => {
            if !kvs.is_empty() {
                let f = w.field(0);
                put_uint(f, kvs.len() as u64);
                for u in kvs {
                    update(u, f)?;
                }
            }
        }
    }
    w.finish();
    Ok(())
}

fn update(u: &SerializedUpdate, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    let mut w = StructWriter::new(out);
    string_field(&mut w, 0, &u.key);
    if !u.value.is_empty() {
        put_bytes(w.field(1), &u.value);
    }
    match &u.revision {
        Revision::None => {}
        Revision::String(s) => interface_basic(w.field(2), "string", TypeId::STRING, |b| {
            put_bytes(b, s.as_bytes())
        }),
        Revision::Int64(i) => interface_basic(w.field(2), "int64", TypeId::INT, |b| put_int(b, *i)),
        Revision::Other { name, value } => {
            let (id, encoded) = basic(value).map_err(|source| EncodeError::Revision {
                name: name.clone(),
                source,
            })?;
            interface_basic(w.field(2), name, id, |b| b.extend_from_slice(&encoded));
        }
    }
    string_field(&mut w, 3, &u.v3_resource_version);
    if u.ttl != 0 {
        put_int(w.field(4), u.ttl);
    }
    uint_field(&mut w, 5, u64::from(u.update_type.as_u8()));
    w.finish();
    Ok(())
}

/// A basic value inside an interface: the name, the type id, the byte count, then the value
/// as a singleton (a zero delta first; zero values are sent here).
fn interface_basic(out: &mut Vec<u8>, name: &str, id: TypeId, value: impl FnOnce(&mut Vec<u8>)) {
    put_bytes(out, name.as_bytes());
    put_int(out, i64::from(id.0));
    let mut inner = vec![0u8];
    value(&mut inner);
    put_bytes(out, &inner);
}

/// A basic value's type id and encoding.
fn basic(v: &Value) -> Result<(TypeId, Vec<u8>), GobEncodeError> {
    let id = match v {
        Value::Bool(_) => TypeId::BOOL,
        Value::Int(_) => TypeId::INT,
        Value::Uint(_) => TypeId::UINT,
        Value::Float(_) => TypeId::FLOAT,
        Value::Bytes(_) => TypeId::BYTES,
        Value::String(_) => TypeId::STRING,
        Value::Complex(..) => TypeId::COMPLEX,
        _ => {
            return Err(GobEncodeError::Mismatch {
                id: TypeId::INTERFACE,
                value: "non-basic",
            });
        }
    };
    // A one-value body of a basic type is its id (one byte), the singleton's zero delta,
    // then the value: keep the value.
    let body = value_body(&TypeTable::new(), id, v)?;
    Ok((id, body.get(2..).unwrap_or_default().to_vec()))
}
