//! What every part of the gob codec shares: type ids, the decoder's limits, the error type.

use std::fmt;

/// A gob type id. Ids 1-8 are gob's predefined basic types, 16-63 gob's own `wireType` and
/// its parts, 64 and up the types a stream defines. The ids of user types are chosen by the
/// encoder (Go numbers them process-wide), so a decoder learns them from each stream's
/// definitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TypeId(pub u32);

impl TypeId {
    /// `bool`.
    pub const BOOL: TypeId = TypeId(1);
    /// `int` (any signed integer).
    pub const INT: TypeId = TypeId(2);
    /// `uint` (any unsigned integer).
    pub const UINT: TypeId = TypeId(3);
    /// `float` (float32 or float64).
    pub const FLOAT: TypeId = TypeId(4);
    /// `[]byte`.
    pub const BYTES: TypeId = TypeId(5);
    /// `string`.
    pub const STRING: TypeId = TypeId(6);
    /// `complex` (complex64 or complex128).
    pub const COMPLEX: TypeId = TypeId(7);
    /// `interface` (any interface type).
    pub const INTERFACE: TypeId = TypeId(8);
    /// The first id a stream may define. Go refuses definitions below it.
    pub const FIRST_USER: TypeId = TypeId(64);

    /// Whether this is one of the predefined basic types 1-8.
    pub fn is_basic(self) -> bool {
        (1..=8).contains(&self.0)
    }
}

impl fmt::Display for TypeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// What a decoder accepts from one stream. Every count and length read from the wire is
/// checked against these, or against the bytes actually present, before anything is
/// allocated for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest gob message (its byte count, without the length prefix). Go itself refuses
    /// 2^33 bytes and more on 64-bit; Typha v3.32 has no smaller cap.
    pub max_message_len: usize,
    /// Most messages one value may span. A value continues into the next message only inside
    /// an interface whose concrete type is defined there; Go's encoder needs 1 + the number
    /// of new types (at most 4 for Calico's messages). Not a limit of Go's: ours, so that
    /// re-reading a value that has not fully arrived costs at most this many passes.
    pub max_value_messages: usize,
    /// Most type definitions one stream may make (Calico's messages need 13).
    pub max_types: usize,
    /// Deepest nesting of structs, slices, arrays, maps and interfaces in a value.
    pub max_depth: usize,
    /// Most memory one decoded value may take: its [`Value`](super::Value) nodes and the
    /// bytes copied into them, charged before each allocation. Without it a message of
    /// one-byte elements (`[]struct{}`) would expand about fifty-fold.
    pub max_decoded_len: usize,
}

impl Limits {
    /// What a server accepts from a Calico client: hellos of about 400 bytes, ACKs, pongs.
    /// The 1 MiB cap is what our own protocol's server applies (and Calico's master).
    pub const SERVER_INBOUND: Limits = Limits {
        max_message_len: 1 << 20,
        max_value_messages: 16,
        max_types: 64,
        max_depth: 16,
        max_decoded_len: 4 << 20,
    };

    /// What a client accepts from a Calico server: `MsgKVs` of up to 1,000 KVs in a
    /// pre-encoded snapshot, each value a resource's JSON.
    pub const CLIENT_INBOUND: Limits = Limits {
        max_message_len: 256 << 20,
        max_value_messages: 16,
        max_types: 256,
        max_depth: 32,
        max_decoded_len: 1 << 30,
    };
}

/// Why bytes could not be read as gob. Every variant ends the stream: after an error the
/// decoder's position in the stream is unknown.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GobError {
    /// A message announces more bytes than the limit.
    #[error("gob message of {len} bytes exceeds the limit of {max}")]
    MessageTooLarge {
        /// Announced byte count.
        len: u64,
        /// The limit.
        max: usize,
    },
    /// A message with no bytes at all (Go's encoder never writes one).
    #[error("empty gob message")]
    EmptyMessage,
    /// A gob unsigned integer whose length byte announces more than 8 bytes.
    #[error("bad gob integer length byte {0:#04x}")]
    BadUint(u8),
    /// The message ended inside a value.
    #[error("gob message ended inside {0}")]
    Truncated(&'static str),
    /// The bytes of a message still arriving ran out: only a decoder streaming a value
    /// ([`Decoder::decode_streaming`](super::Decoder::decode_streaming)) meets it, and it
    /// waits for more bytes rather than returning it.
    #[error("gob message still arriving")]
    Pending,
    /// A length or count larger than the bytes left in the message.
    #[error("{what} of {len} exceeds the {left} bytes left in the message")]
    LengthExceedsInput {
        /// What was counted.
        what: &'static str,
        /// The length or count read.
        len: u64,
        /// Bytes left in the message.
        left: usize,
    },
    /// A type id that is negative where it must not be, zero, or out of gob's range.
    #[error("invalid type id {0}")]
    InvalidTypeId(i64),
    /// A value of a type the stream has not defined.
    #[error("unknown type id {0}")]
    UnknownType(TypeId),
    /// A definition of a predefined id, or a second definition of an id on one stream
    /// (Go: "duplicate type received").
    #[error("duplicate type received: id {0}")]
    DuplicateType(TypeId),
    /// The stream defines more types than the limit.
    #[error("more than {max} type definitions on one stream")]
    TooManyTypes {
        /// The limit.
        max: usize,
    },
    /// A type definition that sets no kind, or more than one, or a kind gob has not got.
    #[error("malformed type definition for id {id}: {reason}")]
    BadDefinition {
        /// The id being defined.
        id: TypeId,
        /// What is wrong.
        reason: &'static str,
    },
    /// A definition message, outside an interface, with bytes after the definition (Go:
    /// "extra data in buffer").
    #[error("extra data after the type definition of id {0}")]
    ExtraData(TypeId),
    /// A struct field delta past the struct's last field (Go: "field number out of range").
    #[error("field number {field} out of range for a struct of {count} fields")]
    FieldOutOfRange {
        /// The field number the delta leads to.
        field: u64,
        /// How many fields the struct's definition has.
        count: usize,
    },
    /// A non-struct value whose leading field delta is not zero.
    #[error("non-zero delta {0} for a singleton value")]
    BadSingleton(u64),
    /// An array whose element count is not its length.
    #[error("array of length {len} sent with {count} elements")]
    ArrayLength {
        /// The definition's length.
        len: u64,
        /// The count on the wire.
        count: u64,
    },
    /// An interface value's registered name is too long (Go's limit: 1,024 bytes).
    #[error("interface type name of {0} bytes is too long")]
    NameTooLong(u64),
    /// Values nested deeper than the limit.
    #[error("values nested deeper than {max}")]
    TooDeep {
        /// The limit.
        max: usize,
    },
    /// A value spans more messages than the limit.
    #[error("a value spans more than {max} messages")]
    TooManyMessages {
        /// The limit.
        max: usize,
    },
    /// The decoded value would take more memory than the limit.
    #[error("decoded value needs more than {max} bytes")]
    DecodedTooLarge {
        /// The limit.
        max: usize,
    },
    /// An interface's value uses a type id that names no type gob can decode here (the
    /// predefined ids 9-63 belong to gob's own type descriptions).
    #[error("type id {0} cannot carry a value")]
    ReservedType(TypeId),
}
