//! The incremental gob decoder: bytes in, values out, following Go's `encoding/gob` decoder.
//!
//! - Each message is `[uint count][count bytes]`. The count is checked against
//!   [`Limits::max_message_len`] before anything is reserved for it.
//! - A message starting with a negative id defines type `-id`; it must hold nothing else
//!   (Go: "extra data in buffer"). Definitions are consumed as soon as they are complete.
//! - A message starting with an id of 0 or more is a value of that type. A value continues
//!   into the next message only where Go's does: at an interface whose concrete type is
//!   defined in the messages that follow (definition messages, then one starting with the
//!   concrete id). Until all of them have arrived the value is `Ok(None)`, the definitions it
//!   carried are forgotten, and it is read again from its first message once another
//!   complete message is there ([`Limits::max_value_messages`] bounds the passes).
//! - Structs end at a zero field delta or at the end of the message, as in Go. Bytes left in
//!   a value's last message are dropped, as Go's decoder drops them.
//! - Strings and byte slices are copied out of the buffer, so the buffer can be reused.

use std::sync::Arc;

use bytes::{Buf, Bytes, BytesMut};

use super::basics::{GobError, Limits, TypeId};
use super::types::{FieldType, TypeTable, WireKind, read_definition};
use super::value::{Concrete, Struct, Value};
use super::wire::{Reader, read_uint};

/// How much room the decoder reserves ahead for a message that is still arriving.
const RESERVE_AHEAD: usize = 64 << 10;

/// Go refuses interface type names longer than this.
const MAX_NAME_LEN: u64 = 1024;

/// One top-level value and its type id.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded {
    /// The value's type id on this stream.
    pub type_id: TypeId,
    /// The value.
    pub value: Value,
}

/// Decodes one gob stream. A new stream (after a `MsgDecoderRestart`) needs a new decoder:
/// type definitions belong to the stream that made them.
#[derive(Debug)]
pub struct Decoder {
    limits: Limits,
    types: TypeTable,
    /// After a value that has not fully arrived: the offset in the buffer where the message
    /// it needs next starts. Nothing is read again until that message is complete.
    retry_at: Option<usize>,
}

/// Where a message starts and ends in the buffer, or how much of the buffer it needs.
enum At {
    Complete { start: usize, end: usize },
    Partial { total: usize },
}

fn message_at(data: &[u8], at: usize, max: usize) -> Result<At, GobError> {
    let rest = data.get(at..).unwrap_or_default();
    let Some((len, n)) = read_uint(rest)? else {
        // A count is at most 9 bytes.
        return Ok(At::Partial { total: at + 9 });
    };
    if len > max as u64 {
        return Err(GobError::MessageTooLarge { len, max });
    }
    if len == 0 {
        return Err(GobError::EmptyMessage);
    }
    let start = at + n;
    let end = start + len as usize;
    if end > data.len() {
        return Ok(At::Partial { total: end });
    }
    Ok(At::Complete { start, end })
}

fn reserve(src: &mut BytesMut, total: usize) {
    if total > src.len() {
        src.reserve((total - src.len()).min(RESERVE_AHEAD));
    }
}

/// A type id read where a value's type is expected: `0..=i32::MAX`, 0 being no type.
fn value_type_id(id: i64) -> Result<TypeId, GobError> {
    if id < 1 || id > i64::from(i32::MAX) {
        return Err(GobError::InvalidTypeId(id));
    }
    Ok(TypeId(id as u32))
}

/// The id a definition (`-id` on the wire) defines.
fn defined_type_id(neg: i64) -> Result<TypeId, GobError> {
    value_type_id(neg.checked_neg().ok_or(GobError::InvalidTypeId(neg))?)
        .map_err(|_| GobError::InvalidTypeId(neg))
}

impl Decoder {
    /// A decoder for a new stream, enforcing `limits`.
    pub fn new(limits: Limits) -> Self {
        Decoder {
            limits,
            types: TypeTable::new(),
            retry_at: None,
        }
    }

    /// The limits this decoder enforces.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// The types the stream has defined so far.
    pub fn types(&self) -> &TypeTable {
        &self.types
    }

    /// Decodes the next value from `src`, consuming its messages (and any definition messages
    /// before it). `Ok(None)`: more bytes are needed; complete definitions have been consumed,
    /// a partial value has not. An error ends the stream.
    pub fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Decoded>, GobError> {
        let max = self.limits.max_message_len;
        loop {
            if let Some(at) = self.retry_at {
                match message_at(src, at, max)? {
                    At::Partial { total } => {
                        reserve(src, total);
                        return Ok(None);
                    }
                    At::Complete { .. } => self.retry_at = None,
                }
            }
            let (start, end) = match message_at(src, 0, max)? {
                At::Partial { total } => {
                    reserve(src, total);
                    return Ok(None);
                }
                At::Complete { start, end } => (start, end),
            };
            let mut r = Reader::new(src, start, end);
            let id = r.int("type id")?;
            if id < 0 {
                let tid = defined_type_id(id)?;
                let wt = read_definition(&mut r, tid)?;
                if r.left() > 0 {
                    return Err(GobError::ExtraData(tid));
                }
                self.types.define(tid, wt, self.limits.max_types)?;
                src.advance(end);
                continue;
            }
            let tid = value_type_id(id)?;
            let mut walk = Walk {
                types: &mut self.types,
                limits: self.limits,
                added: Vec::new(),
                messages: 1,
                charged: 0,
            };
            let result = walk.top(&mut r, tid, 1);
            let used = r.pos() + r.left();
            return match result {
                Ok(value) => {
                    src.advance(used);
                    Ok(Some(Decoded {
                        type_id: tid,
                        value,
                    }))
                }
                Err(Stop::Incomplete { at }) => {
                    for id in walk.added {
                        self.types.forget(id);
                    }
                    self.retry_at = Some(at);
                    if let At::Partial { total } = message_at(src, at, max)? {
                        reserve(src, total);
                    }
                    Ok(None)
                }
                Err(Stop::Fail(e)) => Err(e),
            };
        }
    }
}

/// Why a value could not be read (yet).
enum Stop {
    /// It continues into a message that starts at `at` and has not fully arrived.
    Incomplete {
        at: usize,
    },
    Fail(GobError),
}

impl From<GobError> for Stop {
    fn from(e: GobError) -> Self {
        Stop::Fail(e)
    }
}

/// One pass over one value.
struct Walk<'t> {
    types: &'t mut TypeTable,
    limits: Limits,
    /// Definitions made inside this value: forgotten if it turns out incomplete.
    added: Vec<TypeId>,
    /// Messages this value has used so far.
    messages: usize,
    /// Bytes of memory the value's nodes and copies take so far.
    charged: usize,
}

const NODE: usize = std::mem::size_of::<Value>();

impl Walk<'_> {
    fn value(&mut self, r: &mut Reader<'_>, id: TypeId, depth: usize) -> Result<Value, Stop> {
        Ok(match id {
            TypeId::BOOL => Value::Bool(r.uint("bool")? != 0),
            TypeId::INT => Value::Int(r.int("int")?),
            TypeId::UINT => Value::Uint(r.uint("uint")?),
            TypeId::FLOAT => Value::Float(f64::from_bits(r.uint("float")?.swap_bytes())),
            TypeId::COMPLEX => {
                let re = f64::from_bits(r.uint("complex")?.swap_bytes());
                let im = f64::from_bits(r.uint("complex")?.swap_bytes());
                Value::Complex(re, im)
            }
            TypeId::BYTES => Value::Bytes(self.copy(r.bytes("[]byte")?)?),
            TypeId::STRING => Value::String(self.copy(r.bytes("string")?)?),
            TypeId::INTERFACE => self.interface(r, self.deeper(depth)?)?,
            id if id < TypeId::FIRST_USER => return Err(GobError::ReservedType(id).into()),
            id => {
                let kind = self
                    .types
                    .get(id)
                    .map(|w| w.kind.clone())
                    .ok_or(GobError::UnknownType(id))?;
                let depth = self.deeper(depth)?;
                match kind {
                    WireKind::Struct { fields } => self.structure(r, fields, depth)?,
                    WireKind::Slice { elem } => {
                        let n = r.count("slice length")?;
                        Value::Slice(self.elements(r, elem, n, depth)?)
                    }
                    WireKind::Array { elem, len } => {
                        let n = r.count("array length")?;
                        if n as u64 != len {
                            return Err(GobError::ArrayLength {
                                len,
                                count: n as u64,
                            }
                            .into());
                        }
                        Value::Array(self.elements(r, elem, n, depth)?)
                    }
                    WireKind::Map { key, elem } => {
                        let n = r.count("map length")?;
                        self.charge(n.saturating_mul(2 * NODE))?;
                        let mut pairs = Vec::with_capacity(n);
                        for _ in 0..n {
                            let k = self.value(r, key, depth)?;
                            let v = self.value(r, elem, depth)?;
                            pairs.push((k, v));
                        }
                        Value::Map(pairs)
                    }
                    WireKind::GobEncoder | WireKind::BinaryMarshaler | WireKind::TextMarshaler => {
                        Value::Encoded(self.copy(r.bytes("encoded value")?)?)
                    }
                }
            }
        })
    }

    /// Accounts for `bytes` about to be allocated.
    fn charge(&mut self, bytes: usize) -> Result<(), GobError> {
        self.charged = self.charged.saturating_add(bytes);
        if self.charged > self.limits.max_decoded_len {
            return Err(GobError::DecodedTooLarge {
                max: self.limits.max_decoded_len,
            });
        }
        Ok(())
    }

    fn copy(&mut self, b: &[u8]) -> Result<Bytes, GobError> {
        self.charge(b.len())?;
        Ok(Bytes::copy_from_slice(b))
    }

    fn deeper(&self, depth: usize) -> Result<usize, GobError> {
        if depth >= self.limits.max_depth {
            return Err(GobError::TooDeep {
                max: self.limits.max_depth,
            });
        }
        Ok(depth + 1)
    }

    fn elements(
        &mut self,
        r: &mut Reader<'_>,
        elem: TypeId,
        n: usize,
        depth: usize,
    ) -> Result<Vec<Value>, Stop> {
        self.charge(n.saturating_mul(NODE))?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(self.value(r, elem, depth)?);
        }
        Ok(out)
    }

    /// A struct: field deltas up to a zero delta or the end of the message.
    fn structure(
        &mut self,
        r: &mut Reader<'_>,
        def: Arc<[FieldType]>,
        depth: usize,
    ) -> Result<Value, Stop> {
        let mut fields = Vec::new();
        let mut next: u64 = 0; // one more than the last field number read
        while r.left() > 0 {
            let delta = r.uint("struct field delta")?;
            if delta == 0 {
                break;
            }
            let field = next.saturating_add(delta);
            let Some(f) = def.get((field - 1) as usize) else {
                return Err(GobError::FieldOutOfRange {
                    field: field - 1,
                    count: def.len(),
                }
                .into());
            };
            let id = f.id;
            self.charge(std::mem::size_of::<(usize, Value)>())?;
            fields.push(((field - 1) as usize, self.value(r, id, depth)?));
            next = field;
        }
        Ok(Value::Struct(Struct { def, fields }))
    }

    /// An interface: the registered name (empty for nil), the concrete type id (after any
    /// definitions, which may fill the following messages), a byte count (ignored, as Go
    /// ignores it), then the value.
    fn interface(&mut self, r: &mut Reader<'_>, depth: usize) -> Result<Value, Stop> {
        let n = r.count("interface name length")?;
        if n as u64 > MAX_NAME_LEN {
            return Err(GobError::NameTooLong(n as u64).into());
        }
        let name = self.copy(r.take(n, "interface name")?)?;
        if name.is_empty() {
            return Ok(Value::Interface(None));
        }
        let type_id = self.type_sequence(r)?;
        r.uint("interface value length")?;
        self.charge(std::mem::size_of::<Concrete>())?;
        let value = self.top(r, type_id, depth)?;
        Ok(Value::Interface(Some(Box::new(Concrete {
            name,
            type_id,
            value,
        }))))
    }

    /// A top-level value, or the value inside an interface: a struct as its fields, anything
    /// else as a "singleton" (a zero delta, then the value).
    fn top(&mut self, r: &mut Reader<'_>, id: TypeId, depth: usize) -> Result<Value, Stop> {
        if let Some(WireKind::Struct { fields }) = self.types.get(id).map(|w| &w.kind) {
            let fields = fields.clone();
            return self.structure(r, fields, depth);
        }
        let delta = r.uint("singleton delta")?;
        if delta != 0 {
            return Err(GobError::BadSingleton(delta).into());
        }
        self.value(r, id, depth)
    }

    /// Go's `decodeTypeSequence(isInterface = true)`: definitions, possibly in the following
    /// messages, until a non-negative type id.
    fn type_sequence(&mut self, r: &mut Reader<'_>) -> Result<TypeId, Stop> {
        loop {
            if r.left() == 0 {
                self.next_message(r)?;
            }
            let id = r.int("type id")?;
            if id >= 0 {
                return Ok(value_type_id(id)?);
            }
            let tid = defined_type_id(id)?;
            let wt = read_definition(r, tid)?;
            self.types.define(tid, wt, self.limits.max_types)?;
            self.added.push(tid);
            // Go: "after a type there may be a DelimitedValue still in the buffer. Skip its
            // count."
            if r.left() > 0 {
                r.uint("delimited value count")?;
            }
        }
    }

    /// Moves `r` to the message after the current one, if it has fully arrived.
    fn next_message(&mut self, r: &mut Reader<'_>) -> Result<(), Stop> {
        if self.messages >= self.limits.max_value_messages {
            return Err(GobError::TooManyMessages {
                max: self.limits.max_value_messages,
            }
            .into());
        }
        let at = r.pos();
        match message_at(r.data(), at, self.limits.max_message_len)? {
            At::Complete { start, end } => {
                r.jump(start, end);
                self.messages += 1;
                Ok(())
            }
            At::Partial { .. } => Err(Stop::Incomplete { at }),
        }
    }
}
