//! Type definitions: gob's `wireType`, how it is read from a definition message and written
//! into one, and the table of definitions one stream has made.
//!
//! A definition message is `[-id][wireType]`. `wireType` is a struct of which exactly one
//! field is set: `ArrayT` (1), `SliceT` (2), `StructT` (3), `MapT` (4), `GobEncoderT` (5),
//! `BinaryMarshalerT` (6), `TextMarshalerT` (7). Each starts with `CommonType{Name, Id}`; a
//! struct adds `Field []fieldType{Name, Id}`, a slice `Elem`, an array `Elem, Len`, a map
//! `Key, Elem`. Names are informational: Go matches struct fields by name, and nothing else.

use std::collections::HashMap;
use std::sync::Arc;

use super::basics::{GobError, TypeId};
use super::wire::{Reader, put_bytes, put_int, put_uint};

/// One field of a struct definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldType {
    /// The Go field name; decoders match fields by it.
    pub name: Arc<str>,
    /// The field's type.
    pub id: TypeId,
}

impl FieldType {
    /// A field named `name` of type `id`.
    pub fn new(name: &str, id: TypeId) -> Self {
        FieldType {
            name: name.into(),
            id,
        }
    }
}

/// What kind of type a definition makes.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum WireKind {
    /// A fixed-length array.
    Array {
        /// Element type.
        elem: TypeId,
        /// Length.
        len: u64,
    },
    /// A slice.
    Slice {
        /// Element type.
        elem: TypeId,
    },
    /// A struct and its exported fields, in declaration order (field numbers are indexes).
    Struct {
        /// The fields.
        fields: Arc<[FieldType]>,
    },
    /// A map.
    Map {
        /// Key type.
        key: TypeId,
        /// Value type.
        elem: TypeId,
    },
    /// A type with its own `GobEncode` (Go's `time.Time`): its value is opaque bytes.
    GobEncoder,
    /// A type encoded by its `MarshalBinary`: opaque bytes.
    BinaryMarshaler,
    /// A type encoded by its `MarshalText`: opaque bytes.
    TextMarshaler,
}

/// One type definition: a name (informational) and a kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireType {
    /// The type's name as the encoder wrote it (`MsgKVs`, `[]syncproto.SerializedUpdate`).
    pub name: String,
    /// What the type is.
    pub kind: WireKind,
}

impl WireType {
    /// A struct type.
    pub fn structure(name: &str, fields: Vec<FieldType>) -> Self {
        WireType {
            name: name.to_owned(),
            kind: WireKind::Struct {
                fields: fields.into(),
            },
        }
    }

    /// A slice type.
    pub fn slice(name: &str, elem: TypeId) -> Self {
        WireType {
            name: name.to_owned(),
            kind: WireKind::Slice { elem },
        }
    }

    /// A type with its own `GobEncode`.
    pub fn gob_encoder(name: &str) -> Self {
        WireType {
            name: name.to_owned(),
            kind: WireKind::GobEncoder,
        }
    }

    /// The body of the definition message of `id` as this type, as Go's encoder writes it:
    /// `-id`, then the `wireType` with only this kind's field set, zero fields left out.
    pub fn definition_body(&self, id: TypeId) -> Vec<u8> {
        let mut b = Vec::with_capacity(32 + self.name.len());
        put_int(&mut b, -i64::from(id.0));
        let field = match &self.kind {
            WireKind::Array { .. } => 1,
            WireKind::Slice { .. } => 2,
            WireKind::Struct { .. } => 3,
            WireKind::Map { .. } => 4,
            WireKind::GobEncoder => 5,
            WireKind::BinaryMarshaler => 6,
            WireKind::TextMarshaler => 7,
        };
        b.push(field);
        // Field 1 of every kind: CommonType{Name, Id}.
        b.push(1);
        if self.name.is_empty() {
            b.push(2);
        } else {
            b.push(1);
            put_bytes(&mut b, self.name.as_bytes());
            b.push(1);
        }
        put_int(&mut b, i64::from(id.0));
        b.push(0);
        match &self.kind {
            WireKind::Array { elem, len } => {
                b.push(1);
                put_int(&mut b, i64::from(elem.0));
                if *len != 0 {
                    b.push(1);
                    put_int(&mut b, *len as i64);
                }
            }
            WireKind::Slice { elem } => {
                b.push(1);
                put_int(&mut b, i64::from(elem.0));
            }
            WireKind::Struct { fields } => {
                if !fields.is_empty() {
                    b.push(1);
                    put_uint(&mut b, fields.len() as u64);
                    for f in fields.iter() {
                        if f.name.is_empty() {
                            b.push(2);
                        } else {
                            b.push(1);
                            put_bytes(&mut b, f.name.as_bytes());
                            b.push(1);
                        }
                        put_int(&mut b, i64::from(f.id.0));
                        b.push(0);
                    }
                }
            }
            WireKind::Map { key, elem } => {
                b.push(1);
                put_int(&mut b, i64::from(key.0));
                b.push(1);
                put_int(&mut b, i64::from(elem.0));
            }
            WireKind::GobEncoder | WireKind::BinaryMarshaler | WireKind::TextMarshaler => {}
        }
        b.push(0); // end of the kind's struct
        b.push(0); // end of wireType
        b
    }
}

/// Reads a type id as a field of a definition: an int in `1..=i32::MAX` (Go's `typeId` is an
/// `int32`).
fn read_type_id(r: &mut Reader<'_>) -> Result<TypeId, GobError> {
    let id = r.int("type id")?;
    if id < 1 || id > i64::from(i32::MAX) {
        return Err(GobError::InvalidTypeId(id));
    }
    Ok(TypeId(id as u32))
}

/// Walks a struct's fields as gob writes them: field-number deltas, each followed by the
/// field's value, up to a zero delta or the end of the message (Go stops at either).
/// `count` is the number of fields the struct has; `f` reads field `n`'s value.
fn walk_struct<'a>(
    r: &mut Reader<'a>,
    count: usize,
    mut f: impl FnMut(usize, &mut Reader<'a>) -> Result<(), GobError>,
) -> Result<(), GobError> {
    let mut field: u64 = 0; // one more than the last field number read
    while r.left() > 0 {
        let delta = r.uint("struct field delta")?;
        if delta == 0 {
            break;
        }
        let next = field.saturating_add(delta);
        if next > count as u64 {
            return Err(GobError::FieldOutOfRange {
                field: next - 1,
                count,
            });
        }
        f((next - 1) as usize, r)?;
        field = next;
    }
    Ok(())
}

/// Reads `CommonType{Name string, Id typeId}`: the name (the id is informational, as in Go).
fn read_common(r: &mut Reader<'_>, id: TypeId) -> Result<String, GobError> {
    let mut name = String::new();
    walk_struct(r, 2, |n, r| {
        match n {
            0 => {
                let b = r.bytes("type name")?;
                name = String::from_utf8_lossy(b).into_owned();
            }
            _ => {
                read_type_id(r)?;
            }
        }
        Ok(())
    })
    .map_err(|e| bad_if_range(e, id))?;
    Ok(name)
}

fn bad_if_range(e: GobError, id: TypeId) -> GobError {
    match e {
        GobError::FieldOutOfRange { .. } => GobError::BadDefinition {
            id,
            reason: "field number out of range",
        },
        e => e,
    }
}

/// Reads the `wireType` that follows `-id` in a definition message.
pub(crate) fn read_definition(r: &mut Reader<'_>, id: TypeId) -> Result<WireType, GobError> {
    let mut found: Option<WireType> = None;
    walk_struct(r, 7, |n, r| {
        let mut name = String::new();
        let kind = match n {
            // ArrayT: {CommonType, Elem, Len}
            0 => {
                let (mut elem, mut len) = (None, 0u64);
                walk_struct(r, 3, |m, r| {
                    match m {
                        0 => name = read_common(r, id)?,
                        1 => elem = Some(read_type_id(r)?),
                        _ => {
                            let l = r.int("array length")?;
                            len = u64::try_from(l).map_err(|_| GobError::BadDefinition {
                                id,
                                reason: "negative array length",
                            })?;
                        }
                    }
                    Ok(())
                })?;
                let elem = elem.ok_or(GobError::BadDefinition {
                    id,
                    reason: "array without an element type",
                })?;
                WireKind::Array { elem, len }
            }
            // SliceT: {CommonType, Elem}
            1 => {
                let mut elem = None;
                walk_struct(r, 2, |m, r| {
                    match m {
                        0 => name = read_common(r, id)?,
                        _ => elem = Some(read_type_id(r)?),
                    }
                    Ok(())
                })?;
                let elem = elem.ok_or(GobError::BadDefinition {
                    id,
                    reason: "slice without an element type",
                })?;
                WireKind::Slice { elem }
            }
            // StructT: {CommonType, Field []fieldType}
            2 => {
                let mut fields = Vec::new();
                walk_struct(r, 2, |m, r| {
                    match m {
                        0 => name = read_common(r, id)?,
                        _ => {
                            let count = r.count("struct field count")?;
                            fields = Vec::with_capacity(count);
                            for _ in 0..count {
                                let (mut fname, mut fid) = (String::new(), None);
                                walk_struct(r, 2, |k, r| {
                                    match k {
                                        0 => {
                                            let b = r.bytes("field name")?;
                                            fname = String::from_utf8_lossy(b).into_owned();
                                        }
                                        _ => fid = Some(read_type_id(r)?),
                                    }
                                    Ok(())
                                })?;
                                let fid = fid.ok_or(GobError::BadDefinition {
                                    id,
                                    reason: "struct field without a type",
                                })?;
                                fields.push(FieldType::new(&fname, fid));
                            }
                        }
                    }
                    Ok(())
                })?;
                WireKind::Struct {
                    fields: fields.into(),
                }
            }
            // MapT: {CommonType, Key, Elem}
            3 => {
                let (mut key, mut elem) = (None, None);
                walk_struct(r, 3, |m, r| {
                    match m {
                        0 => name = read_common(r, id)?,
                        1 => key = Some(read_type_id(r)?),
                        _ => elem = Some(read_type_id(r)?),
                    }
                    Ok(())
                })?;
                match (key, elem) {
                    (Some(key), Some(elem)) => WireKind::Map { key, elem },
                    _ => {
                        return Err(GobError::BadDefinition {
                            id,
                            reason: "map without a key or element type",
                        });
                    }
                }
            }
            // GobEncoderT, BinaryMarshalerT, TextMarshalerT: {CommonType}
            _ => {
                walk_struct(r, 1, |_, r| {
                    name = read_common(r, id)?;
                    Ok(())
                })?;
                match n {
                    4 => WireKind::GobEncoder,
                    5 => WireKind::BinaryMarshaler,
                    _ => WireKind::TextMarshaler,
                }
            }
        };
        if found.is_some() {
            return Err(GobError::BadDefinition {
                id,
                reason: "more than one kind set",
            });
        }
        found = Some(WireType { name, kind });
        Ok(())
    })
    .map_err(|e| bad_if_range(e, id))?;
    found.ok_or(GobError::BadDefinition {
        id,
        reason: "no kind set",
    })
}

/// The definitions one gob stream has made, by id.
#[derive(Debug, Clone, Default)]
pub struct TypeTable {
    types: HashMap<TypeId, WireType>,
}

impl TypeTable {
    /// An empty table, as at the start of every stream.
    pub fn new() -> Self {
        TypeTable::default()
    }

    /// The definition of `id`, if the stream made one.
    pub fn get(&self, id: TypeId) -> Option<&WireType> {
        self.types.get(&id)
    }

    /// Every definition, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (TypeId, &WireType)> {
        self.types.iter().map(|(id, wt)| (*id, wt))
    }

    /// How many types are defined.
    pub fn len(&self) -> usize {
        self.types.len()
    }

    /// Whether no type is defined.
    pub fn is_empty(&self) -> bool {
        self.types.is_empty()
    }

    /// Adds a definition, refusing what Go refuses (ids below 64, a second definition of an
    /// id) and more than `max` definitions.
    ///
    /// # Errors
    ///
    /// [`GobError::DuplicateType`] for an id below 64 or one already defined;
    /// [`GobError::TooManyTypes`] when `max` are defined already. The table is unchanged then.
    pub fn define(&mut self, id: TypeId, wt: WireType, max: usize) -> Result<(), GobError> {
        if id < TypeId::FIRST_USER || self.types.contains_key(&id) {
            return Err(GobError::DuplicateType(id));
        }
        if self.types.len() >= max {
            return Err(GobError::TooManyTypes { max });
        }
        self.types.insert(id, wt);
        Ok(())
    }

    /// Forgets a definition (a value that has not fully arrived is read again later, with
    /// the definitions it carried).
    pub(crate) fn forget(&mut self, id: TypeId) {
        self.types.remove(&id);
    }
}
