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
//!
//! Streaming ([`Decoder::decode_streaming`]): a reader that only looks at each element of a
//! large slice need not hold the whole message. A named slice field of the interface value
//! registered under a given name (Calico's `MsgKVs` and its `KVs`) is then read while its
//! message is still arriving, each complete element handed over at once. The elements handed
//! over are cut out of the buffer, and the message's byte count and the slice's count are
//! rewritten in front of what is left, so the buffer holds the message's first bytes, one
//! element still arriving and nothing else. The value returned at the end has that slice
//! empty. While a message is still arriving, a count is trusted only once its bytes have
//! arrived, so nothing is allocated for bytes a message merely announces.

use std::sync::Arc;

use bytes::{Buf, Bytes, BytesMut};

use super::basics::{GobError, Limits, TypeId};
use super::types::{FieldType, TypeTable, WireKind, read_definition};
use super::value::{Concrete, Struct, Value};
use super::wire::{Reader, put_uint, read_uint};

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
    Complete {
        start: usize,
        end: usize,
    },
    /// Not all there: `total` bytes of buffer are needed, and once its byte count has
    /// arrived, `body` is where the message's body starts and will end.
    Partial {
        total: usize,
        body: Option<(usize, usize)>,
    },
}

fn message_at(data: &[u8], at: usize, max: usize) -> Result<At, GobError> {
    let rest = data.get(at..).unwrap_or_default();
    let Some((len, n)) = read_uint(rest)? else {
        // A count is at most 9 bytes.
        return Ok(At::Partial {
            total: at + 9,
            body: None,
        });
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
        return Ok(At::Partial {
            total: end,
            body: Some((start, end)),
        });
    }
    Ok(At::Complete { start, end })
}

/// Bytes `x` takes as a gob uint (one below 128; else a length byte and the bytes without
/// leading zeros).
fn uint_len(x: u64) -> usize {
    if x < 128 {
        1
    } else {
        1 + 8 - (x.leading_zeros() / 8) as usize
    }
}

/// A message's place in the buffer: its byte count at `hdr`, its body `start..end`.
#[derive(Debug, Clone, Copy)]
struct MessagePos {
    hdr: usize,
    start: usize,
    end: usize,
}

/// How far a streamed slice has been handed over: its count `n` at `count_at`, its
/// elements from `elems`, the first `done` of them (ending at `cut`) handed over, in the
/// message at `msg`.
#[derive(Debug, Clone, Copy)]
struct Progress {
    msg: MessagePos,
    count_at: usize,
    n: u64,
    elems: usize,
    done: u64,
    cut: usize,
}

/// Cuts the elements `progress` handed over out of `src`: everything before them is
/// rewritten just in front of the first element not handed over, with the message's byte
/// count and the slice's count lowered, and the buffer then starts there. Both counts only
/// shrink, so the rewritten front never needs more room than the bytes it replaces.
fn splice(src: &mut BytesMut, p: &Progress) -> Result<(), GobError> {
    let broken = || GobError::Truncated("a streamed slice's bookkeeping");
    let removed = p.cut.checked_sub(p.elems).ok_or_else(broken)?;
    let left = p.n.checked_sub(p.done).ok_or_else(broken)?;
    let old_count = p.elems.checked_sub(p.count_at).ok_or_else(broken)?;
    let len = (p.msg.end - p.msg.start)
        .checked_sub(removed + old_count)
        .ok_or_else(broken)?
        + uint_len(left);
    let mut front = Vec::with_capacity(p.elems);
    front.extend_from_slice(src.get(..p.msg.hdr).ok_or_else(broken)?);
    put_uint(&mut front, len as u64);
    front.extend_from_slice(src.get(p.msg.start..p.count_at).ok_or_else(broken)?);
    put_uint(&mut front, left);
    let at = p.cut.checked_sub(front.len()).ok_or_else(broken)?;
    src.get_mut(at..p.cut)
        .ok_or_else(broken)?
        .copy_from_slice(&front);
    src.advance(at);
    Ok(())
}

/// What a streaming decode looks for and where it hands the elements.
struct Streaming<'s> {
    /// The registered name of the interface value whose slice field is streamed.
    name: &'s [u8],
    /// The name of that field.
    field: &'s [u8],
    each: &'s mut dyn FnMut(&Value),
    /// The target was met (only its first occurrence in a value is streamed).
    met: bool,
    /// Its field was met (only the first field of that name sent is streamed).
    field_met: bool,
    /// The slice being handed over.
    progress: Option<Progress>,
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
    ///
    /// # Errors
    ///
    /// [`GobError`] for what Go's decoder refuses (a malformed message, definition or value, a
    /// value of an undefined type, a type defined twice) and for what passes this decoder's
    /// [`Limits`]. The stream cannot go on after one.
    pub fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Decoded>, GobError> {
        self.decode_with(src, None)
    }

    /// As [`decode`](Self::decode), but the elements of the slice field named `field` of the
    /// interface value registered as `name` are handed to `each` as soon as each has arrived,
    /// before the rest of its message, and cut out of `src` (the module's notes say how); the
    /// value returned has that slice empty. Only the first such interface that the top-level
    /// value holds directly (a field of it, or itself) is streamed.
    ///
    /// The buffer then holds at most a message's first bytes and one element, however long
    /// the message: what a reader that handles each element on its own needs (a simulated
    /// node hashing a snapshot's KVs). Elements handed over stay handed over even if the
    /// stream later fails; the limits apply as in `decode`, each element's memory counted
    /// until it is handed over.
    ///
    /// # Errors
    ///
    /// As [`decode`](Self::decode).
    pub fn decode_streaming(
        &mut self,
        src: &mut BytesMut,
        name: &[u8],
        field: &[u8],
        each: &mut dyn FnMut(&Value),
    ) -> Result<Option<Decoded>, GobError> {
        // A streaming decoder walks a partial value again on every call.
        self.retry_at = None;
        self.decode_with(
            src,
            Some(Streaming {
                name,
                field,
                each,
                met: false,
                field_met: false,
                progress: None,
            }),
        )
    }

    fn decode_with(
        &mut self,
        src: &mut BytesMut,
        mut stream: Option<Streaming<'_>>,
    ) -> Result<Option<Decoded>, GobError> {
        let max = self.limits.max_message_len;
        loop {
            if let Some(at) = self.retry_at {
                match message_at(src, at, max)? {
                    At::Partial { total, .. } => {
                        reserve(src, total);
                        return Ok(None);
                    }
                    At::Complete { .. } => self.retry_at = None,
                }
            }
            let (start, end) = match message_at(src, 0, max)? {
                At::Complete { start, end } => (start, end),
                // A value's first message may be walked while it arrives when streaming.
                At::Partial {
                    body: Some((start, end)),
                    ..
                } if stream.is_some() => (start, end),
                At::Partial { total, .. } => {
                    reserve(src, total);
                    return Ok(None);
                }
            };
            let mut r = Reader::new(src, start, end);
            let id = match r.int("type id") {
                Err(GobError::Pending) => {
                    reserve(src, end);
                    return Ok(None);
                }
                id => id?,
            };
            if id < 0 {
                // Definitions are read whole.
                if end > src.len() {
                    reserve(src, end);
                    return Ok(None);
                }
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
            let streaming = stream.is_some();
            let mut walk = Walk {
                types: &mut self.types,
                limits: self.limits,
                added: Vec::new(),
                messages: 1,
                charged: 0,
                msg: MessagePos { hdr: 0, start, end },
                stream: stream.as_mut(),
            };
            let result = walk.top(&mut r, tid, 1);
            // Go drops what a value leaves of its last message.
            let used = r.end();
            let added = std::mem::take(&mut walk.added);
            let progress = walk.stream.and_then(|s| s.progress);
            let wait = match result {
                Ok(value) if used <= src.len() => {
                    src.advance(used);
                    return Ok(Some(Decoded {
                        type_id: tid,
                        value,
                    }));
                }
                // Complete but for bytes still arriving after it: they are waited for.
                Ok(_) => None,
                Err(Stop::Incomplete { at }) => Some(at),
                Err(Stop::Fail(GobError::Pending)) => None,
                Err(Stop::Fail(e)) => return Err(e),
            };
            for id in added {
                self.types.forget(id);
            }
            if let Some(p) = progress {
                splice(src, &p)?;
                reserve(src, src.len() + RESERVE_AHEAD);
                return Ok(None);
            }
            match wait {
                Some(at) if !streaming => {
                    self.retry_at = Some(at);
                    if let At::Partial { total, .. } = message_at(src, at, max)? {
                        reserve(src, total);
                    }
                }
                Some(at) => {
                    if let At::Partial { total, .. } = message_at(src, at, max)? {
                        reserve(src, total);
                    }
                }
                None => reserve(src, used),
            }
            return Ok(None);
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
struct Walk<'t, 's> {
    types: &'t mut TypeTable,
    limits: Limits,
    /// Definitions made inside this value: forgotten if it turns out incomplete.
    added: Vec<TypeId>,
    /// Messages this value has used so far.
    messages: usize,
    /// Bytes of memory the value's nodes and copies take so far.
    charged: usize,
    /// The message being read.
    msg: MessagePos,
    /// The slice to stream, when streaming.
    stream: Option<&'t mut Streaming<'s>>,
}

const NODE: usize = std::mem::size_of::<Value>();

impl Walk<'_, '_> {
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
                    WireKind::Struct { fields } => self.structure(r, fields, depth, false)?,
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

    /// A struct: field deltas up to a zero delta or the end of the message. With `streamed`,
    /// its slice field of the streamed name is streamed ([`Walk::streamed_slice`]).
    fn structure(
        &mut self,
        r: &mut Reader<'_>,
        def: Arc<[FieldType]>,
        depth: usize,
        streamed: bool,
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
            let is_slice = matches!(
                self.types.get(id).map(|w| &w.kind),
                Some(WireKind::Slice { .. })
            );
            let slice_of = match self.stream.as_deref_mut() {
                Some(s) if streamed && is_slice && !s.field_met && s.field == f.name.as_bytes() => {
                    s.field_met = true;
                    match self.types.get(id).map(|w| &w.kind) {
                        Some(WireKind::Slice { elem }) => Some(*elem),
                        _ => None,
                    }
                }
                _ => None,
            };
            let v = match slice_of {
                Some(elem) => self.streamed_slice(r, elem, self.deeper(depth)?)?,
                None => self.value(r, id, depth)?,
            };
            fields.push(((field - 1) as usize, v));
            next = field;
        }
        Ok(Value::Struct(Struct { def, fields }))
    }

    /// A slice whose elements are handed over one by one as they complete
    /// ([`Decoder::decode_streaming`]): the value left is an empty slice.
    fn streamed_slice(
        &mut self,
        r: &mut Reader<'_>,
        elem: TypeId,
        depth: usize,
    ) -> Result<Value, Stop> {
        let count_at = r.pos();
        // Nothing is allocated by the count: elements are handed over one at a time.
        let n = r.message_count("slice length")?;
        let elems = r.pos();
        for done in 1..=n {
            let charged = self.charged;
            let v = self.value(r, elem, depth)?;
            // Handed over and gone: its memory no longer counts against the value.
            self.charged = charged;
            let msg = self.msg;
            if let Some(s) = self.stream.as_deref_mut() {
                (s.each)(&v);
                s.progress = Some(Progress {
                    msg,
                    count_at,
                    n: n as u64,
                    elems,
                    done: done as u64,
                    cut: r.pos(),
                });
            }
        }
        Ok(Value::Slice(Vec::new()))
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
        // Only an interface the top-level value holds directly (a field of the Envelope) is
        // streamed, as only that one is the message a reader sees.
        let streamed = match self.stream.as_deref_mut() {
            Some(s) if depth == 2 && !s.met && s.name == &name[..] => {
                s.met = true;
                true
            }
            _ => false,
        };
        let value = if streamed {
            match self.types.get(type_id).map(|w| &w.kind) {
                Some(WireKind::Struct { fields }) => {
                    let fields = fields.clone();
                    self.structure(r, fields, depth, true)?
                }
                _ => self.top(r, type_id, depth)?,
            }
        } else {
            self.top(r, type_id, depth)?
        };
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
            return self.structure(r, fields, depth, false);
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
        let (start, end) = match message_at(r.data(), at, self.limits.max_message_len)? {
            At::Complete { start, end } => (start, end),
            // When streaming, the message the value continues into is read as it arrives.
            At::Partial {
                body: Some((start, end)),
                ..
            } if self.stream.is_some() => (start, end),
            At::Partial { .. } => return Err(Stop::Incomplete { at }),
        };
        r.jump(start, end);
        self.messages += 1;
        self.msg = MessagePos {
            hdr: at,
            start,
            end,
        };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uint_len_is_what_put_uint_writes() {
        let mut xs = vec![0, 1, 127, 128, 255, 256, u64::MAX];
        xs.extend((0..64).map(|b| 1u64 << b));
        xs.extend((1..64).map(|b| (1u64 << b) - 1));
        for x in xs {
            let mut v = Vec::new();
            put_uint(&mut v, x);
            assert_eq!(uint_len(x), v.len(), "{x}");
        }
    }
}
