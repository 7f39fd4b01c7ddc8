//! Our encoder's type ids and definitions, and the preambles built from them.
//!
//! The ids are the ones our Go reference peer's process gives these types (the golden
//! README's table), so what we encode is byte for byte what the golden `value/` and
//! `preamble/` files hold. Any ids of 64 or more would do: decoders learn them from the
//! preamble.

use std::sync::OnceLock;

use bytes::Bytes;

use super::model::MessageKind;
use crate::calico::gob::encode::preamble;
use crate::calico::gob::{FieldType, TypeId, TypeTable, WireType};

/// `Envelope{Message any}`.
pub const ENVELOPE: TypeId = TypeId(64);
/// `MsgClientHello`.
pub const CLIENT_HELLO: TypeId = TypeId(65);
/// `[]CompressionAlgorithm` (a slice of string).
pub const COMPRESSION_ALGORITHMS: TypeId = TypeId(66);
/// `MsgServerHello`.
pub const SERVER_HELLO: TypeId = TypeId(67);
/// `MsgDecoderRestart`.
pub const DECODER_RESTART: TypeId = TypeId(68);
/// `MsgACK`.
pub const ACK: TypeId = TypeId(69);
/// `MsgSyncStatus`.
pub const SYNC_STATUS: TypeId = TypeId(70);
/// `MsgPing`.
pub const PING: TypeId = TypeId(71);
/// `time.Time` (a GobEncoder).
pub const TIME: TypeId = TypeId(72);
/// `MsgPong`.
pub const PONG: TypeId = TypeId(73);
/// `MsgKVs`.
pub const KVS: TypeId = TypeId(74);
/// `SerializedUpdate`.
pub const SERIALIZED_UPDATE: TypeId = TypeId(75);
/// `[]SerializedUpdate`.
pub const SERIALIZED_UPDATES: TypeId = TypeId(76);

/// Which side's preamble a stream starts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    /// Server to client: Envelope, MsgServerHello, MsgDecoderRestart, MsgSyncStatus, MsgPing,
    /// Time, MsgKVs, []SerializedUpdate, SerializedUpdate (`preamble/server.bin`, 486 bytes).
    Server,
    /// Client to server: Envelope, MsgClientHello, []CompressionAlgorithm, MsgACK, MsgPong,
    /// Time (`preamble/client.bin`).
    Client,
}

impl Side {
    /// The definitions this side's preamble makes, in order.
    pub fn type_ids(self) -> &'static [TypeId] {
        match self {
            Side::Server => &[
                ENVELOPE,
                SERVER_HELLO,
                DECODER_RESTART,
                SYNC_STATUS,
                PING,
                TIME,
                KVS,
                SERIALIZED_UPDATES,
                SERIALIZED_UPDATE,
            ],
            Side::Client => &[
                ENVELOPE,
                CLIENT_HELLO,
                COMPRESSION_ALGORITHMS,
                ACK,
                PONG,
                TIME,
            ],
        }
    }

    /// Whether this side sends `kind` (its preamble defines it).
    pub fn sends(self, kind: MessageKind) -> bool {
        self.type_ids().contains(&type_id(kind))
    }

    /// The preamble: every definition this side needs, as consecutive gob messages. Constant:
    /// built once, shared by every stream.
    pub fn preamble(self) -> Bytes {
        static SERVER: OnceLock<Bytes> = OnceLock::new();
        static CLIENT: OnceLock<Bytes> = OnceLock::new();
        let cell = match self {
            Side::Server => &SERVER,
            Side::Client => &CLIENT,
        };
        cell.get_or_init(|| {
            let table = table();
            let defs: Vec<(TypeId, &WireType)> = self
                .type_ids()
                .iter()
                .filter_map(|id| table.get(*id).map(|wt| (*id, wt)))
                .collect();
            Bytes::from(preamble(&defs))
        })
        .clone()
    }
}

/// Our type id of a message kind's Go type.
pub fn type_id(kind: MessageKind) -> TypeId {
    match kind {
        MessageKind::ClientHello => CLIENT_HELLO,
        MessageKind::ServerHello => SERVER_HELLO,
        MessageKind::DecoderRestart => DECODER_RESTART,
        MessageKind::Ack => ACK,
        MessageKind::SyncStatus => SYNC_STATUS,
        MessageKind::Ping => PING,
        MessageKind::Pong => PONG,
        MessageKind::Kvs => KVS,
    }
}

/// Every type our encoder uses, defined with our ids: names, fields and field order as
/// Calico's Go types have them.
pub fn table() -> TypeTable {
    let f = FieldType::new;
    let s = TypeId::STRING;
    let defs = [
        (
            ENVELOPE,
            WireType::structure("Envelope", vec![f("Message", TypeId::INTERFACE)]),
        ),
        (
            CLIENT_HELLO,
            WireType::structure(
                "MsgClientHello",
                vec![
                    f("Hostname", s),
                    f("Info", s),
                    f("Version", s),
                    f("SyncerType", s),
                    f("SupportsDecoderRestart", TypeId::BOOL),
                    f("SupportedCompressionAlgorithms", COMPRESSION_ALGORITHMS),
                    f("SupportsModernPolicyKeys", TypeId::BOOL),
                    f("ClientConnID", TypeId::UINT),
                ],
            ),
        ),
        (
            COMPRESSION_ALGORITHMS,
            WireType::slice("[]syncproto.CompressionAlgorithm", s),
        ),
        (
            SERVER_HELLO,
            WireType::structure(
                "MsgServerHello",
                vec![
                    f("Version", s),
                    f("SyncerType", s),
                    f("SupportsNodeResourceUpdates", TypeId::BOOL),
                    f("ServerConnID", TypeId::UINT),
                ],
            ),
        ),
        (
            DECODER_RESTART,
            WireType::structure(
                "MsgDecoderRestart",
                vec![f("Message", s), f("CompressionAlgorithm", s)],
            ),
        ),
        (ACK, WireType::structure("MsgACK", vec![])),
        (
            SYNC_STATUS,
            WireType::structure("MsgSyncStatus", vec![f("SyncStatus", TypeId::UINT)]),
        ),
        (
            PING,
            WireType::structure("MsgPing", vec![f("Timestamp", TIME)]),
        ),
        (TIME, WireType::gob_encoder("Time")),
        (
            PONG,
            WireType::structure(
                "MsgPong",
                vec![f("PingTimestamp", TIME), f("PongTimestamp", TIME)],
            ),
        ),
        (
            KVS,
            WireType::structure("MsgKVs", vec![f("KVs", SERIALIZED_UPDATES)]),
        ),
        (
            SERIALIZED_UPDATE,
            WireType::structure(
                "SerializedUpdate",
                vec![
                    f("Key", s),
                    f("Value", TypeId::BYTES),
                    f("Revision", TypeId::INTERFACE),
                    f("V3ResourceVersion", s),
                    f("TTL", TypeId::INT),
                    f("UpdateType", TypeId::UINT),
                ],
            ),
        ),
        (
            SERIALIZED_UPDATES,
            WireType::slice("[]syncproto.SerializedUpdate", SERIALIZED_UPDATE),
        ),
    ];
    let mut table = TypeTable::new();
    for (id, wt) in defs {
        // Distinct ids of 64 or more, fewer than the limit: cannot fail.
        let _ = table.define(id, wt, usize::MAX);
    }
    table
}
