//! Encode once, share bytes: the frames connections write.
//!
//! Every frame here is encoded (and compressed) once per protocol variant and kept as `Bytes`
//! next to the breadcrumb or snapshot it describes; connections only write it. The
//! `typha_frames_encoded` counter proves it: encodes per update = 1 at any client count.
//!
//! A client that is behind catches up with pre-merged spans at aligned strides (16 and 256
//! breadcrumbs): each span carries the latest value of every key changed in it, is built by
//! the first client that needs it, and is shared by every later one.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::OnceLock;

use bytes::Bytes;
use tracing::error;
use typha_protocol::frame::{DEFAULT_ZSTD_LEVEL, FrameEncoder};
use typha_protocol::message::{Deltas, Message, Seq};
use typha_protocol::model::{KeyPath, SyncStatus, Update};

use crate::cache::{Breadcrumb, Cache, counted, deltas_message};
use crate::metrics::{FrameKind, Metrics};

/// Span strides, largest first.
pub const STRIDES: [u64; 2] = [256, 16];

thread_local! {
    static ZSTD: RefCell<Option<FrameEncoder>> = const { RefCell::new(None) };
    static PLAIN: RefCell<Option<FrameEncoder>> = const { RefCell::new(None) };
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

/// One value per protocol variant: frames for peers that decode zstd, and for those that do
/// not.
#[derive(Debug, Default)]
pub struct PerVariant<T> {
    plain: T,
    zstd: T,
}

impl<T> PerVariant<T> {
    /// The value for the variant.
    pub fn get(&self, compress: bool) -> &T {
        if compress { &self.zstd } else { &self.plain }
    }
}

/// Frames kept with a breadcrumb.
#[derive(Debug, Default)]
pub(crate) struct CrumbFrames {
    delta: PerVariant<OnceLock<Bytes>>,
    /// Spans ending at this breadcrumb: stride 256, stride 16.
    span256: PerVariant<OnceLock<Option<Bytes>>>,
    span16: PerVariant<OnceLock<Option<Bytes>>>,
}

/// This breadcrumb's delta frame (from `seq - 1` to `seq`).
pub fn delta_frame(c: &Breadcrumb, compress: bool, m: &Metrics) -> Bytes {
    c.frames
        .delta
        .get(compress)
        .get_or_init(|| {
            m.kvs_per_msg.observe(c.deltas.len() as f64);
            counted(m, FrameKind::delta, encode(&deltas_message(c), compress))
        })
        .clone()
}

/// The coalesced span of `stride` breadcrumbs ending at `end`, if `end` is aligned and every
/// breadcrumb of the span is still in the history.
pub fn span_frame(cache: &Cache, end: &Breadcrumb, stride: u64, compress: bool) -> Option<Bytes> {
    let slot = match stride {
        256 => &end.frames.span256,
        16 => &end.frames.span16,
        _ => return None,
    };
    if !end.seq.0.is_multiple_of(stride) || end.seq.0 < stride {
        return None;
    }
    slot.get(compress)
        .get_or_init(|| {
            let from = Seq(end.seq.0 - stride);
            let crumbs = cache.range(from, end.seq)?;
            let mut latest: BTreeMap<KeyPath, Update> = BTreeMap::new();
            for c in &crumbs {
                for u in c.deltas.iter() {
                    latest.insert(u.key.clone(), u.clone());
                }
            }
            let msg = Message::Deltas(Deltas {
                from_seq: from,
                seq: end.seq,
                digest: end.digest,
                updates: latest.into_values().collect(),
            });
            Some(counted(
                &cache.metrics,
                FrameKind::span,
                encode(&msg, compress),
            ))
        })
        .clone()
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
