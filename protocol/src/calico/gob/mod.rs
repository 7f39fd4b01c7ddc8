//! The part of Go's `encoding/gob` that Calico's Typha protocol uses, written for this crate.
//!
//! - [`Decoder`]: incremental, over a `BytesMut` the caller fills. It learns type ids from
//!   each stream's own definitions (Go numbers types per process, so they differ between
//!   peers), decodes any value into a [`Value`], follows a value into the next messages where
//!   Go's encoder splits it (an interface whose concrete type is defined inline), and checks
//!   every length and count against [`Limits`] or the bytes present before allocating.
//! - [`encode`]: type definitions, preambles, struct fields, and any [`Value`] of a defined
//!   type. It never defines types inline, so a value message has the same bytes on every
//!   stream that starts with the same preamble.
//!
//! Go's wire format, as far as this protocol needs it, is described in
//! `docs/calico-protocol.md`; the golden files in `tests/golden/calico` pin it.

mod basics;
mod decode;
pub mod encode;
mod types;
mod value;
mod wire;

#[cfg(test)]
mod tests;

pub use basics::{GobError, Limits, TypeId};
pub use decode::{Decoded, Decoder};
pub use encode::EncodeError;
pub use types::{FieldType, TypeTable, WireKind, WireType};
pub use value::{Concrete, Struct, Value};
pub use wire::{put_bytes, put_float, put_int, put_uint, read_uint, uint_to_int};
