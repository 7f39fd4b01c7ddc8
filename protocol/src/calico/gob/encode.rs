//! Writing gob: messages, type definitions, struct fields, and any [`Value`] of a type in a
//! [`TypeTable`].
//!
//! This encoder never defines a type inline: the stream is expected to start with every
//! definition it uses (a preamble, see [`preamble`]). Then a value message depends only on
//! the type ids and the value, and has the same bytes on every stream that used the same
//! preamble.

use super::basics::TypeId;
use super::types::{FieldType, TypeTable, WireKind, WireType};
use super::value::{Struct, Value};
use super::wire::{put_bytes, put_float, put_int, put_uint};

/// Why a value could not be encoded: it does not fit the type it was to be encoded as.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// The type is neither basic nor in the table.
    #[error("type id {0} is not defined")]
    UnknownType(TypeId),
    /// The value's kind does not match its type.
    #[error("a {value} value cannot be encoded as type {id}")]
    Mismatch {
        /// The type.
        id: TypeId,
        /// The value's kind.
        value: &'static str,
    },
    /// A struct value sent a field its type does not have, or fields out of order.
    #[error("struct field {index} is out of order or not in type {id}")]
    BadField {
        /// The struct's type.
        id: TypeId,
        /// The field index.
        index: usize,
    },
    /// An array value whose length is not its type's.
    #[error("array of type {id} needs {len} elements, got {got}")]
    ArrayLength {
        /// The array's type.
        id: TypeId,
        /// The type's length.
        len: u64,
        /// The value's length.
        got: usize,
    },
}

/// Appends one gob message: the body's length, then the body.
pub fn put_message(out: &mut Vec<u8>, body: &[u8]) {
    put_uint(out, body.len() as u64);
    out.extend_from_slice(body);
}

/// Definition messages for `types`, in the order given: a preamble. A stream that starts with
/// it needs no definition later.
pub fn preamble(types: &[(TypeId, &WireType)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (id, wt) in types {
        put_message(&mut out, &wt.definition_body(*id));
    }
    out
}

/// Writes a struct's fields as gob does: each field's number as the delta from the previous
/// one (the first field is 1), then its value; [`StructWriter::finish`] writes the zero delta
/// that ends the struct. Fields must come in increasing order; leave zero values out.
#[derive(Debug)]
pub struct StructWriter<'a> {
    out: &'a mut Vec<u8>,
    /// One more than the last field index written.
    next: usize,
}

impl<'a> StructWriter<'a> {
    /// Starts a struct at the end of `out`.
    pub fn new(out: &'a mut Vec<u8>) -> Self {
        StructWriter { out, next: 0 }
    }

    /// Writes the delta to field `index` (0-based, the definition's order) and returns the
    /// buffer for its value. An index not after the previous one writes nothing sensible; it
    /// is a bug in the caller, caught in debug builds.
    pub fn field(&mut self, index: usize) -> &mut Vec<u8> {
        debug_assert!(index >= self.next, "struct fields out of order");
        put_uint(self.out, (index + 1).saturating_sub(self.next) as u64);
        self.next = index + 1;
        self.out
    }

    /// Ends the struct.
    pub fn finish(self) {
        self.out.push(0);
    }
}

/// The body of a value message: the type id, then the value (a struct as its fields,
/// anything else as a singleton: a zero delta, then the value).
///
/// # Errors
///
/// [`EncodeError`] when `value` does not fit type `id` as `types` defines it: a type not
/// defined, a value of another kind, struct fields out of order or not in the type, an array of
/// another length.
pub fn value_body(types: &TypeTable, id: TypeId, value: &Value) -> Result<Vec<u8>, EncodeError> {
    let mut out = Vec::new();
    put_int(&mut out, i64::from(id.0));
    top(&mut out, types, id, value)?;
    Ok(out)
}

/// A complete value message (length prefix included).
///
/// # Errors
///
/// As [`value_body`].
pub fn value_message(types: &TypeTable, id: TypeId, value: &Value) -> Result<Vec<u8>, EncodeError> {
    let body = value_body(types, id, value)?;
    let mut out = Vec::with_capacity(body.len() + 9);
    put_message(&mut out, &body);
    Ok(out)
}

fn kind_of(types: &TypeTable, id: TypeId) -> Result<Option<&WireKind>, EncodeError> {
    if id.is_basic() {
        return Ok(None);
    }
    types
        .get(id)
        .map(|w| Some(&w.kind))
        .ok_or(EncodeError::UnknownType(id))
}

fn top(out: &mut Vec<u8>, types: &TypeTable, id: TypeId, v: &Value) -> Result<(), EncodeError> {
    if let Some(WireKind::Struct { .. }) = kind_of(types, id)? {
        return value(out, types, id, v);
    }
    out.push(0);
    value(out, types, id, v)
}

fn value_kind(v: &Value) -> &'static str {
    match v {
        Value::Bool(_) => "bool",
        Value::Int(_) => "int",
        Value::Uint(_) => "uint",
        Value::Float(_) => "float",
        Value::Complex(..) => "complex",
        Value::Bytes(_) => "[]byte",
        Value::String(_) => "string",
        Value::Struct(_) => "struct",
        Value::Slice(_) => "slice",
        Value::Array(_) => "array",
        Value::Map(_) => "map",
        Value::Interface(_) => "interface",
        Value::Encoded(_) => "encoded",
    }
}

/// Whether Go leaves a struct field with this value out (zero scalars, empty strings, byte
/// slices, slices and maps, nil interfaces; structs, arrays and encoded values are always
/// sent).
pub fn is_zero(v: &Value) -> bool {
    match v {
        Value::Bool(b) => !b,
        Value::Int(i) => *i == 0,
        Value::Uint(u) => *u == 0,
        Value::Float(f) => *f == 0.0,
        Value::Complex(re, im) => *re == 0.0 && *im == 0.0,
        Value::Bytes(b) | Value::String(b) => b.is_empty(),
        Value::Slice(s) => s.is_empty(),
        Value::Map(m) => m.is_empty(),
        Value::Interface(i) => i.is_none(),
        Value::Struct(_) | Value::Array(_) | Value::Encoded(_) => false,
    }
}

fn value(out: &mut Vec<u8>, types: &TypeTable, id: TypeId, v: &Value) -> Result<(), EncodeError> {
    let mismatch = || EncodeError::Mismatch {
        id,
        value: value_kind(v),
    };
    match (kind_of(types, id)?, v) {
        (None, Value::Bool(b)) if id == TypeId::BOOL => put_uint(out, u64::from(*b)),
        (None, Value::Int(i)) if id == TypeId::INT => put_int(out, *i),
        (None, Value::Uint(u)) if id == TypeId::UINT => put_uint(out, *u),
        (None, Value::Float(f)) if id == TypeId::FLOAT => put_float(out, *f),
        (None, Value::Complex(re, im)) if id == TypeId::COMPLEX => {
            put_float(out, *re);
            put_float(out, *im);
        }
        (None, Value::Bytes(b)) if id == TypeId::BYTES => put_bytes(out, b),
        (None, Value::String(s)) if id == TypeId::STRING => put_bytes(out, s),
        (None, Value::Interface(i)) if id == TypeId::INTERFACE => match i {
            None => put_uint(out, 0),
            Some(c) => {
                put_bytes(out, &c.name);
                put_int(out, i64::from(c.type_id.0));
                let mut inner = Vec::new();
                top(&mut inner, types, c.type_id, &c.value)?;
                put_bytes(out, &inner);
            }
        },
        (Some(WireKind::Struct { fields }), Value::Struct(s)) => {
            structure(out, types, id, fields, s)?
        }
        (Some(WireKind::Slice { elem }), Value::Slice(items)) => {
            put_uint(out, items.len() as u64);
            for item in items {
                value(out, types, *elem, item)?;
            }
        }
        (Some(WireKind::Array { elem, len }), Value::Array(items)) => {
            if items.len() as u64 != *len {
                return Err(EncodeError::ArrayLength {
                    id,
                    len: *len,
                    got: items.len(),
                });
            }
            put_uint(out, items.len() as u64);
            for item in items {
                value(out, types, *elem, item)?;
            }
        }
        (Some(WireKind::Map { key, elem }), Value::Map(pairs)) => {
            put_uint(out, pairs.len() as u64);
            for (k, v) in pairs {
                value(out, types, *key, k)?;
                value(out, types, *elem, v)?;
            }
        }
        (
            Some(WireKind::GobEncoder | WireKind::BinaryMarshaler | WireKind::TextMarshaler),
            Value::Encoded(b),
        ) => put_bytes(out, b),
        _ => return Err(mismatch()),
    }
    Ok(())
}

fn structure(
    out: &mut Vec<u8>,
    types: &TypeTable,
    id: TypeId,
    def: &[FieldType],
    s: &Struct,
) -> Result<(), EncodeError> {
    let mut w = StructWriter::new(out);
    let mut next = 0;
    for (index, v) in &s.fields {
        let field_type = match def.get(*index) {
            Some(f) if *index >= next => f.id,
            _ => return Err(EncodeError::BadField { id, index: *index }),
        };
        next = index + 1;
        if is_zero(v) {
            continue;
        }
        value(w.field(*index), types, field_type, v)?;
    }
    w.finish();
    Ok(())
}
