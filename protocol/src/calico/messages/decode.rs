//! Decoded gob values to messages, matching fields by name as Go's decoder does: fields the
//! sender has and we do not are ignored, fields we have and the sender did not send are zero,
//! and a field of the wrong type is an error.

use bytes::Bytes;

use super::model::{
    ClientHello, DecoderRestart, GoTime, Message, MessageKind, Ping, Pong, Revision,
    SerializedUpdate, ServerHello, SyncStatus, TimeError, UpdateType,
};
use crate::calico::gob::{Concrete, Decoded, Struct, Value};

/// Why a decoded gob value is not a message of Calico's protocol. The stream is intact (the
/// gob decoder read the value); whether to go on is the caller's choice (Go's decoder
/// reports the same cases as errors).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MessageError {
    /// The top-level value is not a struct.
    #[error("the value is not an Envelope struct")]
    NotEnvelope,
    /// The envelope's message is nil or absent.
    #[error("the Envelope holds no message")]
    NoMessage,
    /// The interface holds a type registered under a name Calico does not use (Go: "name not
    /// registered for interface").
    #[error("unknown message type {0:?}")]
    UnknownName(String),
    /// A field, or the message itself, has a type that cannot be decoded into ours.
    #[error("field {field} has the wrong type: want {want}")]
    WrongType {
        /// The field (`Envelope.Message`, `MsgKVs.KVs`, ...).
        field: &'static str,
        /// What type it must be.
        want: &'static str,
    },
    /// A struct with fields of which none is one of ours (Go: "type mismatch: no fields
    /// matched compiling decoder").
    #[error("no fields of {0} matched")]
    NoFieldsMatched(&'static str),
    /// An integer too large for its field (Go: "value out of range").
    #[error("field {field} value {value} out of range")]
    OutOfRange {
        /// The field.
        field: &'static str,
        /// The value.
        value: u64,
    },
    /// A string that is not UTF-8 (Go would accept it; Rust strings cannot hold it).
    #[error("field {0} is not UTF-8")]
    NotUtf8(&'static str),
    /// A timestamp that is not a valid `time.Time` encoding.
    #[error("field {field}: {source}")]
    Time {
        /// The field.
        field: &'static str,
        /// Why.
        #[source]
        source: TimeError,
    },
}

/// The message in a decoded `Envelope`.
///
/// # Errors
///
/// [`MessageError`] when the value is not an `Envelope` holding one of the messages Calico
/// registers, or when a field of it has a type or value Go's decoder would not put into Calico's
/// struct (the variants say which). The stream itself is intact: the next value can be read.
pub fn from_gob(decoded: &Decoded) -> Result<Message, MessageError> {
    let Value::Struct(envelope) = &decoded.value else {
        return Err(MessageError::NotEnvelope);
    };
    let fields = Fields::new(envelope, "Envelope", &["Message"])?;
    let Some(v) = fields.get("Message") else {
        return Err(MessageError::NoMessage);
    };
    let Value::Interface(concrete) = v else {
        return Err(MessageError::WrongType {
            field: "Envelope.Message",
            want: "interface",
        });
    };
    let Some(concrete) = concrete.as_deref() else {
        return Err(MessageError::NoMessage);
    };
    message(concrete)
}

fn message(c: &Concrete) -> Result<Message, MessageError> {
    let kind = MessageKind::from_registered_name(&c.name)
        .ok_or_else(|| MessageError::UnknownName(String::from_utf8_lossy(&c.name).into_owned()))?;
    let Value::Struct(s) = &c.value else {
        return Err(MessageError::WrongType {
            field: "Envelope.Message",
            want: "struct",
        });
    };
    Ok(match kind {
        MessageKind::ClientHello => {
            let f = Fields::new(
                s,
                "MsgClientHello",
                &[
                    "Hostname",
                    "Info",
                    "Version",
                    "SyncerType",
                    "SupportsDecoderRestart",
                    "SupportedCompressionAlgorithms",
                    "SupportsModernPolicyKeys",
                    "ClientConnID",
                ],
            )?;
            Message::ClientHello(ClientHello {
                hostname: f.string("Hostname")?,
                info: f.string("Info")?,
                version: f.string("Version")?,
                syncer_type: f.string("SyncerType")?,
                supports_decoder_restart: f.bool("SupportsDecoderRestart")?,
                supported_compression_algorithms: f.strings("SupportedCompressionAlgorithms")?,
                supports_modern_policy_keys: f.bool("SupportsModernPolicyKeys")?,
                client_conn_id: f.uint("ClientConnID")?,
            })
        }
        MessageKind::ServerHello => {
            let f = Fields::new(
                s,
                "MsgServerHello",
                &[
                    "Version",
                    "SyncerType",
                    "SupportsNodeResourceUpdates",
                    "ServerConnID",
                ],
            )?;
            Message::ServerHello(ServerHello {
                version: f.string("Version")?,
                syncer_type: f.string("SyncerType")?,
                supports_node_resource_updates: f.bool("SupportsNodeResourceUpdates")?,
                server_conn_id: f.uint("ServerConnID")?,
            })
        }
        MessageKind::DecoderRestart => {
            let f = Fields::new(s, "MsgDecoderRestart", &["Message", "CompressionAlgorithm"])?;
            Message::DecoderRestart(DecoderRestart {
                message: f.string("Message")?,
                compression_algorithm: f.string("CompressionAlgorithm")?,
            })
        }
        MessageKind::Ack => Message::Ack,
        MessageKind::SyncStatus => {
            let f = Fields::new(s, "MsgSyncStatus", &["SyncStatus"])?;
            Message::SyncStatus(SyncStatus::from_u8(f.u8("SyncStatus")?))
        }
        MessageKind::Ping => {
            let f = Fields::new(s, "MsgPing", &["Timestamp"])?;
            Message::Ping(Ping {
                timestamp: f.time("Timestamp")?,
            })
        }
        MessageKind::Pong => {
            let f = Fields::new(s, "MsgPong", &["PingTimestamp", "PongTimestamp"])?;
            Message::Pong(Pong {
                ping_timestamp: f.time("PingTimestamp")?,
                pong_timestamp: f.time("PongTimestamp")?,
            })
        }
        MessageKind::Kvs => {
            let f = Fields::new(s, "MsgKVs", &["KVs"])?;
            let kvs = match f.get("KVs") {
                None => Vec::new(),
                Some(Value::Slice(items)) => {
                    let mut kvs = Vec::with_capacity(items.len());
                    for item in items {
                        kvs.push(update(item)?);
                    }
                    kvs
                }
                Some(_) => {
                    return Err(MessageError::WrongType {
                        field: "MsgKVs.KVs",
                        want: "[]SerializedUpdate",
                    });
                }
            };
            Message::Kvs(kvs)
        }
    })
}

fn update(v: &Value) -> Result<SerializedUpdate, MessageError> {
    let Value::Struct(s) = v else {
        return Err(MessageError::WrongType {
            field: "MsgKVs.KVs",
            want: "[]SerializedUpdate",
        });
    };
    let f = Fields::new(
        s,
        "SerializedUpdate",
        &[
            "Key",
            "Value",
            "Revision",
            "V3ResourceVersion",
            "TTL",
            "UpdateType",
        ],
    )?;
    Ok(SerializedUpdate {
        key: f.string("Key")?,
        value: f.bytes("Value")?,
        revision: revision(f.get("Revision"))?,
        v3_resource_version: f.string("V3ResourceVersion")?,
        ttl: f.int("TTL")?,
        update_type: UpdateType::from_u8(f.u8("UpdateType")?),
    })
}

fn revision(v: Option<&Value>) -> Result<Revision, MessageError> {
    let c = match v {
        None | Some(Value::Interface(None)) => return Ok(Revision::None),
        Some(Value::Interface(Some(c))) => c,
        Some(_) => {
            return Err(MessageError::WrongType {
                field: "SerializedUpdate.Revision",
                want: "interface",
            });
        }
    };
    Ok(match (&c.name[..], &c.value) {
        (b"string", Value::String(s)) => Revision::String(
            String::from_utf8(s.to_vec())
                .map_err(|_| MessageError::NotUtf8("SerializedUpdate.Revision"))?,
        ),
        (b"int64", Value::Int(i)) => Revision::Int64(*i),
        (name, value) => Revision::Other {
            name: String::from_utf8_lossy(name).into_owned(),
            value: value.clone(),
        },
    })
}

/// A struct's fields, looked up by the names we know.
struct Fields<'a> {
    s: &'a Struct,
    type_name: &'static str,
}

impl<'a> Fields<'a> {
    /// Go refuses a struct whose definition has fields, none of them ours.
    fn new(s: &'a Struct, type_name: &'static str, ours: &[&str]) -> Result<Self, MessageError> {
        if !ours.is_empty() && !s.def.is_empty() && !ours.iter().any(|n| s.defines(n)) {
            return Err(MessageError::NoFieldsMatched(type_name));
        }
        Ok(Fields { s, type_name })
    }

    fn get(&self, name: &str) -> Option<&'a Value> {
        self.s.get(name)
    }

    fn wrong(&self, field: &'static str, want: &'static str) -> MessageError {
        MessageError::WrongType {
            field: if field.is_empty() {
                self.type_name
            } else {
                field
            },
            want,
        }
    }

    fn string(&self, name: &'static str) -> Result<String, MessageError> {
        match self.get(name) {
            None => Ok(String::new()),
            Some(Value::String(b)) => {
                String::from_utf8(b.to_vec()).map_err(|_| MessageError::NotUtf8(name))
            }
            Some(_) => Err(self.wrong(name, "string")),
        }
    }

    fn strings(&self, name: &'static str) -> Result<Vec<String>, MessageError> {
        match self.get(name) {
            None => Ok(Vec::new()),
            Some(Value::Slice(items)) => items
                .iter()
                .map(|v| match v {
                    Value::String(b) => {
                        String::from_utf8(b.to_vec()).map_err(|_| MessageError::NotUtf8(name))
                    }
                    _ => Err(self.wrong(name, "[]string")),
                })
                .collect(),
            Some(_) => Err(self.wrong(name, "[]string")),
        }
    }

    fn bytes(&self, name: &'static str) -> Result<Bytes, MessageError> {
        match self.get(name) {
            None => Ok(Bytes::new()),
            Some(Value::Bytes(b)) => Ok(b.clone()),
            Some(_) => Err(self.wrong(name, "[]byte")),
        }
    }

    fn bool(&self, name: &'static str) -> Result<bool, MessageError> {
        match self.get(name) {
            None => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => Err(self.wrong(name, "bool")),
        }
    }

    fn uint(&self, name: &'static str) -> Result<u64, MessageError> {
        match self.get(name) {
            None => Ok(0),
            Some(Value::Uint(u)) => Ok(*u),
            Some(_) => Err(self.wrong(name, "uint")),
        }
    }

    fn u8(&self, name: &'static str) -> Result<u8, MessageError> {
        let u = self.uint(name)?;
        u8::try_from(u).map_err(|_| MessageError::OutOfRange {
            field: name,
            value: u,
        })
    }

    fn int(&self, name: &'static str) -> Result<i64, MessageError> {
        match self.get(name) {
            None => Ok(0),
            Some(Value::Int(i)) => Ok(*i),
            Some(_) => Err(self.wrong(name, "int")),
        }
    }

    fn time(&self, name: &'static str) -> Result<GoTime, MessageError> {
        match self.get(name) {
            None => Ok(GoTime::ZERO),
            Some(Value::Encoded(b)) => {
                GoTime::from_gob_bytes(b).map_err(|source| MessageError::Time {
                    field: name,
                    source,
                })
            }
            Some(_) => Err(self.wrong(name, "time.Time")),
        }
    }
}
