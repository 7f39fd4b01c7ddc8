//! Encode once, share bytes: the frames connections write.
//!
//! Every frame is encoded (and compressed) once per protocol variant ([`PerVariant`]) with
//! [`encode`] and kept as `Bytes` next to the breadcrumb or snapshot it describes
//! ([`crate::cache::breadcrumb`], [`crate::cache::snapshot`]); connections only write it. The
//! `typha_frames_encoded_total` counter proves it: encodes per update = 1 at any client count.
//!
//! A client that is behind catches up with pre-merged spans at aligned strides (16 and 256
//! breadcrumbs): each span carries the latest value of every key changed in it, is built by
//! the first client that needs it, and is shared by every later one. [`plan`] says which
//! frames take a client from where it is to the latest breadcrumb.
//!
//! This module knows messages and frames, not the cache: it is a leaf.

use std::cell::RefCell;
use std::sync::OnceLock;

use bytes::Bytes;
use tracing::error;
use typha_protocol::frame::{DEFAULT_ZSTD_LEVEL, FrameEncoder};
use typha_protocol::handshake::Session;
use typha_protocol::message::{Features, Message, Seq};
use typha_protocol::model::{KeyPath, SyncStatus};

/// Span strides, largest first.
pub const STRIDES: [u64; 2] = [256, 16];

thread_local! {
    static ZSTD: RefCell<Option<FrameEncoder>> = const { RefCell::new(None) };
    static PLAIN: RefCell<Option<FrameEncoder>> = const { RefCell::new(None) };
    static LEVELLED: RefCell<Option<(i32, FrameEncoder)>> = const { RefCell::new(None) };
}

/// Encodes a message with this thread's encoder. Messages here are bounded (batches by count
/// and bytes, values by validation), so a failure is a bug: it is logged and the frame is
/// empty, which the connection treats as a reason to close rather than send garbage.
pub fn encode(msg: &Message, compress: bool) -> Bytes {
    let cell = if compress { &ZSTD } else { &PLAIN };
    cell.with(|c| {
        let mut c = c.borrow_mut();
        let enc = match c.as_mut() {
            Some(e) => e,
            None => {
                let e = if compress {
                    FrameEncoder::zstd(DEFAULT_ZSTD_LEVEL)
                        .unwrap_or_else(|_| FrameEncoder::uncompressed())
                } else {
                    FrameEncoder::uncompressed()
                };
                c.insert(e)
            }
        };
        enc.encode(msg).unwrap_or_else(|e| {
            error!(error = %e, message_type = %msg.message_type(), "cannot encode a frame");
            Bytes::new()
        })
    })
}

/// Encodes a message compressed at zstd `level` (snapshot chunks: encoded once for every
/// client, so worth more CPU than a delta), with this thread's encoder for that level; as
/// [`encode`] otherwise.
pub fn encode_at(msg: &Message, level: i32) -> Bytes {
    if level == DEFAULT_ZSTD_LEVEL {
        return encode(msg, true);
    }
    LEVELLED.with(|c| {
        let mut c = c.borrow_mut();
        let enc = match c.as_mut().filter(|(l, _)| *l == level) {
            Some((_, e)) => e,
            None => {
                let e = FrameEncoder::zstd(level).unwrap_or_else(|_| FrameEncoder::uncompressed());
                &mut c.insert((level, e)).1
            }
        };
        enc.encode(msg).unwrap_or_else(|e| {
            error!(error = %e, message_type = %msg.message_type(), "cannot encode a frame");
            Bytes::new()
        })
    })
}

/// Which keys a client of our protocol is sent (docs/protocol.md, "Adding a kind").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum View {
    /// Every key: the client offered [`Features::OPAQUE_KINDS`].
    All,
    /// Only keys of kinds protocol version 1 knows, and digests over those alone: a client
    /// that would refuse a whole message holding a later kind. While the cache holds no key
    /// of a later kind, its frames are the same as [`View::All`]'s (and shared with them).
    V1,
}

impl View {
    /// The view a session's features allow.
    pub fn of(features: Features) -> View {
        if features.contains(Features::OPAQUE_KINDS) {
            View::All
        } else {
            View::V1
        }
    }

    /// Whether a key is in this view.
    pub fn holds(self, key: &KeyPath) -> bool {
        self == View::All || key.in_v1()
    }
}

/// What a frame is encoded for: the keys its client is sent, and whether it decodes zstd.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Variant {
    /// Which keys.
    pub view: View,
    /// zstd or plain.
    pub compress: bool,
}

impl Variant {
    /// Every key, compressed or not (what Calico clients' shared frames and tests use).
    pub fn all(compress: bool) -> Variant {
        Variant {
            view: View::All,
            compress,
        }
    }

    /// The variant a session asked for.
    pub fn of(session: &Session) -> Variant {
        Variant {
            view: View::of(session.features),
            compress: session.peer_decodes_zstd,
        }
    }

    /// The same compression, every key.
    pub fn with_all_keys(self) -> Variant {
        Variant::all(self.compress)
    }
}

/// One value per protocol variant: frames for peers that decode zstd and for those that do
/// not, for each [`View`].
#[derive(Debug, Default)]
pub struct PerVariant<T> {
    plain: T,
    zstd: T,
    plain_v1: T,
    zstd_v1: T,
}

impl<T> PerVariant<T> {
    /// The value for the variant.
    pub fn get(&self, v: Variant) -> &T {
        match (v.view, v.compress) {
            (View::All, false) => &self.plain,
            (View::All, true) => &self.zstd,
            (View::V1, false) => &self.plain_v1,
            (View::V1, true) => &self.zstd_v1,
        }
    }
}

/// One step of catching up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The single breadcrumb with this sequence number.
    Crumb(Seq),
    /// A span of `stride` breadcrumbs ending at `end`.
    Span {
        /// Last breadcrumb of the span.
        end: Seq,
        /// Its length.
        stride: u64,
    },
}

/// How to get from `cursor` to `latest`: single breadcrumbs up to a stride boundary, then the
/// biggest aligned spans that fit, then single breadcrumbs again. A client one behind gets one
/// breadcrumb; a client 1,000 behind gets a handful of shared frames.
pub fn plan(cursor: Seq, latest: Seq) -> Vec<Step> {
    let mut out = Vec::new();
    let mut s = cursor.0;
    while s < latest.0 {
        if let Some(&stride) = STRIDES
            .iter()
            .find(|&&st| s.is_multiple_of(st) && latest.0 - s >= st)
        {
            s += stride;
            out.push(Step::Span {
                end: Seq(s),
                stride,
            });
        } else {
            s += 1;
            out.push(Step::Crumb(Seq(s)));
        }
    }
    out
}

/// The pre-encoded SyncStatus frame for `status` (three frames for the life of the process).
pub fn status_frame(status: SyncStatus) -> Bytes {
    static FRAMES: OnceLock<[Bytes; 3]> = OnceLock::new();
    let frames = FRAMES.get_or_init(|| {
        [
            SyncStatus::WaitForDatastore,
            SyncStatus::ResyncInProgress,
            SyncStatus::InSync,
        ]
        .map(|s| encode(&Message::SyncStatus(s), false))
    });
    let i = match status {
        SyncStatus::WaitForDatastore => 0,
        SyncStatus::ResyncInProgress => 1,
        SyncStatus::InSync => 2,
    };
    frames.get(i).cloned().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_use_aligned_spans() {
        assert_eq!(plan(Seq(5), Seq(6)), vec![Step::Crumb(Seq(6))]);
        assert_eq!(plan(Seq(5), Seq(5)), vec![]);
        let p = plan(Seq(3), Seq(1000));
        // 13 singles to 16, 15 spans of 16 to 256, 2 spans of 256 to 768, 14 spans of 16 to
        // 992, 8 singles.
        assert_eq!(p.len(), 13 + 15 + 2 + 14 + 8);
        let mut s = 3;
        for step in &p {
            match *step {
                Step::Crumb(q) => {
                    assert_eq!(q.0, s + 1);
                    s += 1;
                }
                Step::Span { end, stride } => {
                    assert_eq!(s % stride, 0);
                    assert_eq!(end.0, s + stride);
                    s = end.0;
                }
            }
        }
        assert_eq!(s, 1000);
    }
}
