//! Which protocol a connection speaks, from its first bytes (after TLS).
//!
//! Ours starts with a frame's big-endian `u32` length, always below 16 MiB, so with `0x00`.
//! A Calico client starts with a gob message's length, never zero, and that first message is
//! the definition of `Envelope`: a struct whose one field, `Message`, is an interface.

use bytes::BytesMut;

use super::gob::{self, GobError, Limits, TypeId, WireKind, read_uint};

/// The longest first message accepted as Calico's `Envelope` definition (it is 34 bytes
/// from Go; the slack allows other names for the type).
pub const MAX_ENVELOPE_DEFINITION: usize = 256;

/// A connection's protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// This project's protocol (`docs/protocol.md`).
    Ours,
    /// Calico's Typha protocol (gob).
    Calico,
}

/// Why the first bytes are neither protocol.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DetectError {
    /// The first message is not gob, or too long to be the definition.
    #[error("first message is not gob: {0}")]
    Gob(#[from] GobError),
    /// The first message is gob but not the definition of `Envelope`.
    #[error("first gob message does not define Calico's Envelope: {0}")]
    NotEnvelope(&'static str),
}

/// Tells the protocol from the first bytes of a connection. `Ok(None)`: more bytes are
/// needed (at most [`MAX_ENVELOPE_DEFINITION`] + 3 for Calico, 1 for ours).
///
/// # Errors
///
/// [`DetectError`] when the bytes cannot open either protocol: a first byte that is not ours
/// and not the start of a gob message that defines `Envelope` (a struct whose one field is the
/// `Message` interface), or a first message too long to be that definition.
pub fn detect(prefix: &[u8]) -> Result<Option<Protocol>, DetectError> {
    match prefix.first() {
        None => return Ok(None),
        Some(0) => return Ok(Some(Protocol::Ours)),
        Some(_) => {}
    }
    let Some((len, n)) = read_uint(prefix)? else {
        return Ok(None);
    };
    if len > MAX_ENVELOPE_DEFINITION as u64 {
        return Err(DetectError::NotEnvelope("first message too long"));
    }
    let Some(first) = prefix.get(..n + len as usize) else {
        return Ok(None);
    };
    let limits = Limits {
        max_message_len: MAX_ENVELOPE_DEFINITION,
        max_value_messages: 1,
        max_types: 1,
        max_depth: 1,
        max_decoded_len: MAX_ENVELOPE_DEFINITION,
    };
    let mut decoder = gob::Decoder::new(limits);
    let mut buf = BytesMut::from(first);
    if decoder.decode(&mut buf)?.is_some() || !buf.is_empty() {
        return Err(DetectError::NotEnvelope("first message is a value"));
    }
    let Some((_, wt)) = decoder.types().iter().next() else {
        return Err(DetectError::NotEnvelope("no type defined"));
    };
    if wt.name != "Envelope" {
        return Err(DetectError::NotEnvelope("the type is not named Envelope"));
    }
    match &wt.kind {
        WireKind::Struct { fields }
            if fields.len() == 1
                && fields
                    .first()
                    .is_some_and(|f| &*f.name == "Message" && f.id == TypeId::INTERFACE) =>
        {
            Ok(Some(Protocol::Calico))
        }
        _ => Err(DetectError::NotEnvelope(
            "Envelope is not a struct of one interface field Message",
        )),
    }
}

#[cfg(test)]
mod tests {
    // In tests a panic is the failure report.
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use super::*;
    use crate::calico::messages::Side;

    #[test]
    fn ours_calico_or_neither() {
        assert_eq!(detect(&[]), Ok(None));
        assert_eq!(detect(&[0, 0, 1, 2]), Ok(Some(Protocol::Ours)));
        // Both preambles start with the Envelope definition, as Go's first message does.
        for side in [Side::Server, Side::Client] {
            let p = side.preamble();
            assert_eq!(detect(&p), Ok(Some(Protocol::Calico)));
            for cut in 1..34 {
                assert_eq!(detect(&p[..cut]), Ok(None), "{cut}");
            }
        }
        // HTTP, a TLS record, gob that is a value, gob that defines something else.
        let http = b"GET / HTTP/1.1\r\nHost: typha\r\nUser-Agent: curl\r\nAccept: */*\r\nConnection: close\r\n\r\n";
        assert_eq!(detect(&http[..16]), Ok(None), "'G' announces 71 bytes");
        assert!(detect(&http[..]).is_err());
        let mut tls = vec![0x16, 0x03, 0x01, 0x00, 0xf0];
        tls.resize(64, 0);
        assert!(detect(&tls).is_err(), "a TLS record");
        assert!(detect(&[0x03, 0x0c, 0x00, 0x00]).is_err());
        let p = Side::Server.preamble();
        assert!(detect(&p[0x22..]).is_err(), "MsgServerHello's definition");
        assert!(detect(&[0xfe, 0x10, 0x00]).is_err(), "4 KiB first message");
    }
}
