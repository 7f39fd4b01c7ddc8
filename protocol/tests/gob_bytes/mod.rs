//! gob bytes written by hand, for the Calico decoder's allocation tests.

use typha_protocol::calico::gob::encode::put_message;
use typha_protocol::calico::gob::{TypeId, WireType, put_int, put_uint};

/// `x` as a gob uint.
pub(crate) fn uint(x: u64) -> Vec<u8> {
    let mut v = Vec::new();
    put_uint(&mut v, x);
    v
}

/// `i` as a gob int.
pub(crate) fn int(i: i64) -> Vec<u8> {
    let mut v = Vec::new();
    put_int(&mut v, i);
    v
}

/// `body` as one gob message (its byte count first).
pub(crate) fn msg(body: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    put_message(&mut v, body);
    v
}

/// The message defining type `id` as `wt`.
pub(crate) fn def(id: u32, wt: &WireType) -> Vec<u8> {
    msg(&wt.definition_body(TypeId(id)))
}
