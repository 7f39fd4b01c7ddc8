//! A decoded gob value, whatever its type: the decoder builds these from the stream's own
//! definitions, and a typed layer (`calico::messages`) matches struct fields by name, as Go's
//! decoder does, ignoring fields it does not know.

use std::sync::Arc;

use bytes::Bytes;

use super::basics::TypeId;
use super::types::FieldType;

/// One gob value.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Value {
    /// `bool`.
    Bool(bool),
    /// Any signed integer.
    Int(i64),
    /// Any unsigned integer.
    Uint(u64),
    /// float32 or float64.
    Float(f64),
    /// complex64 or complex128: real and imaginary parts.
    Complex(f64, f64),
    /// `[]byte`.
    Bytes(Bytes),
    /// A string, as the bytes sent (Go does not check them for UTF-8).
    String(Bytes),
    /// A struct.
    Struct(Struct),
    /// A slice.
    Slice(Vec<Value>),
    /// An array.
    Array(Vec<Value>),
    /// A map, pairs in wire order.
    Map(Vec<(Value, Value)>),
    /// An interface: `None` for nil.
    Interface(Option<Box<Concrete>>),
    /// A `GobEncoder`, `BinaryMarshaler` or `TextMarshaler` type's bytes.
    Encoded(Bytes),
}

/// A struct value: the fields that were on the wire (zero-valued fields are left out by the
/// encoder), with the definition's field list.
#[derive(Debug, Clone, PartialEq)]
pub struct Struct {
    /// Every field of the struct's definition, in order.
    pub def: Arc<[FieldType]>,
    /// The fields sent: (index into `def`, value), in increasing index order.
    pub fields: Vec<(usize, Value)>,
}

impl Struct {
    /// The value of the field named `name`, if it was sent.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.fields
            .iter()
            .find(|(i, _)| self.def.get(*i).is_some_and(|f| &*f.name == name))
            .map(|(_, v)| v)
    }

    /// Whether the definition has a field named `name` (sent or not).
    pub fn defines(&self, name: &str) -> bool {
        self.def.iter().any(|f| &*f.name == name)
    }

    /// The fields sent, with their names.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.fields
            .iter()
            .filter_map(|(i, v)| self.def.get(*i).map(|f| (&*f.name, v)))
    }
}

/// The concrete value inside a non-nil interface.
#[derive(Debug, Clone, PartialEq)]
pub struct Concrete {
    /// The name the concrete type was registered under (`Register`), as sent.
    pub name: Bytes,
    /// The concrete type's id on this stream.
    pub type_id: TypeId,
    /// The value.
    pub value: Value,
}
