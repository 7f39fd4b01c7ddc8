//! Fuzz target for the handshake (`typha_protocol::handshake`): the first messages each side
//! reads from the other, decoded and handed to the server's and the client's state machines.
//!
//! The input is a byte stream as one side would read it. Frames are decoded under the limits
//! of the side reading them (`SERVER_INBOUND` for the server, `CLIENT_INBOUND` for the
//! client), and every message that decodes is handed to a fresh handshake of that side
//! (the first message a peer sends is what decides it), then all of them in order to one
//! handshake. It checks:
//!
//! 1. Nothing panics, whatever the bytes or the order.
//! 2. What the server accepts is within what it offered and what the client said: the version
//!    is one both list, the features are in both sets, the syncer one the server serves, and
//!    zstd is used only if the client decodes it. The reply it builds re-encodes and decodes
//!    to itself.
//! 3. What the client accepts is within its own offer: a version and features it offered and
//!    the syncer it asked for.
//! 4. A handshake that has finished accepts nothing more.
//!
//! Shared by the libFuzzer target (`fuzz_targets/handshake.rs`) and the corpus replay test
//! (`protocol/tests/fuzz_corpus.rs`).

use std::time::{Duration, Instant};

use bytes::BytesMut;
use typha_protocol::handshake::{ClientHandshake, ClientOffer, ServerHandshake, ServerOffer};
use typha_protocol::message::Epoch;
use typha_protocol::{FrameDecoder, FrameEncoder, Limits, Message};

/// Every message that decodes off `data` under `limits`, until framing fails or needs more.
fn messages(data: &[u8], limits: Limits) -> Vec<Message> {
    let mut dec = FrameDecoder::new(limits);
    let mut buf = BytesMut::from(data);
    let mut out = Vec::new();
    while let Ok(Some(frame)) = dec.decode_frame(&mut buf) {
        if let Ok(m) = dec.decode_message(&frame) {
            out.push(m);
        }
        if out.len() >= 16 {
            break;
        }
    }
    out
}

fn server_side(msgs: &[Message], now: Instant) {
    let offer = ServerOffer::new(Epoch(7));
    for m in msgs {
        let mut hs = ServerHandshake::new(offer.clone(), now);
        let hello = match m {
            Message::ClientHello(h) => Some(h.clone()),
            _ => None,
        };
        if let Ok(acc) = hs.handle_message(m.clone(), now) {
            let Some(hello) = hello else {
                panic!("the server accepted a {:?} as a hello", m.message_type());
            };
            let s = &acc.session;
            assert!(
                offer.versions.contains(&s.version),
                "version {:?} not offered",
                s.version
            );
            assert!(
                hello.versions.contains(&s.version),
                "version {:?} not asked",
                s.version
            );
            assert!(
                offer.features.contains(s.features),
                "features beyond the offer"
            );
            assert!(
                hello.features.contains(s.features),
                "features beyond the hello"
            );
            assert!(offer.syncer_types.contains(&s.syncer_type));
            if s.peer_decodes_zstd {
                assert!(
                    hello.compression.zstd(),
                    "zstd for a client that does not decode it"
                );
            }
            let reply = Message::ServerHello(acc.reply.clone());
            let bytes = FrameEncoder::uncompressed()
                .encode(&reply)
                .unwrap_or_else(|e| panic!("the reply does not encode: {e}"));
            let mut buf = BytesMut::from(&bytes[..]);
            let back = FrameDecoder::new(Limits::CLIENT_INBOUND).decode(&mut buf);
            assert_eq!(back, Ok(Some(reply)), "the reply does not round-trip");
            assert!(
                hs.handle_message(m.clone(), now).is_err(),
                "a finished handshake accepted a second hello"
            );
        }
    }
    let mut hs = ServerHandshake::new(offer, now);
    for m in msgs {
        let _ = hs.handle_message(m.clone(), now);
    }
    let _ = hs.handle_timeout(now + Duration::from_secs(3600));
}

fn client_side(msgs: &[Message], now: Instant) {
    let offer = ClientOffer::new("node-1");
    for m in msgs {
        let mut hs = ClientHandshake::new(offer.clone(), now);
        let _ = hs.hello();
        if let Ok(s) = hs.handle_message(m.clone(), now) {
            assert!(
                offer.versions.contains(&s.version),
                "version {:?} not offered",
                s.version
            );
            assert!(
                offer.features.contains(s.features),
                "features beyond the offer"
            );
            assert_eq!(s.syncer_type, offer.syncer_type);
            assert!(
                hs.handle_message(m.clone(), now).is_err(),
                "a finished handshake accepted a second answer"
            );
        }
    }
    let mut hs = ClientHandshake::new(offer, now);
    for m in msgs {
        let _ = hs.handle_message(m.clone(), now);
    }
    let _ = hs.handle_timeout(now + Duration::from_secs(3600));
}

/// Checks one input (panics on a violation).
pub(crate) fn run(data: &[u8]) {
    let now = Instant::now();
    server_side(&messages(data, Limits::SERVER_INBOUND), now);
    client_side(&messages(data, Limits::CLIENT_INBOUND), now);
}
