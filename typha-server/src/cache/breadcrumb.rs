//! A breadcrumb: one step of the cache, the state after a batch of changes, with the frames
//! that take a client to it (each encoded once and shared by every connection: the full
//! view's compressed delta frame by the writer as it publishes the breadcrumb, the other
//! variants and the spans on first use).

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use imbl::OrdMap;
use tokio::time::Instant;
use typha_protocol::message::{Deltas, Epoch, Message, Seq};
use typha_protocol::model::{KeyPath, Revision, SyncStatus, Update};

use super::calico::{CalicoCrumb, Carriage, Unencodable};
use super::held::Held;
use crate::calico::libcalico::{Driver, SyncerSet, SyncerType};
use crate::fanout::{PerVariant, Variant, View, encode};
use crate::metrics::{FrameKind, Metrics};

/// A cached value and the revisions it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kv {
    /// The value, encoded once; held compressed once the writer has a dictionary
    /// ([`Held`]).
    pub value: Held,
    /// Datastore revision, as our protocol sends it.
    pub revision: Revision,
    /// The revision of the stored object the value came from, as Calico's syncer sends it
    /// ([`KvChange::object_revision`](super::pipeline::KvChange::object_revision)).
    pub object_revision: Revision,
}

/// One version of the whole state.
pub type KvMap = OrdMap<KeyPath, Kv>;

/// How many of the newest breadcrumbs keep their map version, so that joiners a few
/// breadcrumbs apart can share one snapshot of ours. Nothing depends on an older version being
/// kept: a snapshot falls back to the latest map, and a breadcrumb's Calico translation needs
/// only the breadcrumb ([`Breadcrumb::previous`]). Keeping every version in the history would
/// retain every node a later batch replaced (about 10 KB per update: hundreds of MB after a
/// large initial load).
pub const MAP_VERSIONS_KEPT: usize = 16;

/// One step of the cache: the state after a batch of changes.
#[derive(Debug)]
pub struct Breadcrumb {
    /// The server run this belongs to.
    pub epoch: Epoch,
    /// Sequence number, +1 per breadcrumb.
    pub seq: Seq,
    /// Highest datastore revision applied.
    pub revision: Revision,
    /// When it was made.
    pub created: Instant,
    /// The whole state at this point, while this breadcrumb is one of the most recent
    /// [`MAP_VERSIONS_KEPT`]; older breadcrumbs drop it (see [`Breadcrumb::map`]).
    pub(super) map: arc_swap::ArcSwapOption<KvMap>,
    /// Number of KVs in the state at this point.
    pub kvs: usize,
    /// The changes from the previous breadcrumb.
    pub deltas: Arc<[Update]>,
    /// For each of `deltas`, the value its key held before it (`None`: absent), as the writer
    /// had it: what translating a change for Calico's clients needs (an update or a new key;
    /// the derived keys that went away), so that translation never needs an older map version
    /// (docs/server.md, "Calico clients").
    pub previous: Arc<[Option<Held>]>,
    /// For each of `deltas`, the revision of the stored object it came from, which Calico's
    /// clients are sent ([`Kv::object_revision`]; `Revision(0)` for a deletion).
    pub object_revisions: Arc<[Revision]>,
    /// Sync status at this point.
    pub status: SyncStatus,
    /// Combined state digest at this point.
    pub digest: u64,
    /// The same over the keys of the version 1 view alone ([`View::V1`]).
    pub digest_v1: u64,
    /// Keys in the state at this point that are not in the version 1 view.
    pub later_kvs: usize,
    /// The newest breadcrumb up to this one (this one included) whose state or deltas held a
    /// key outside the version 1 view; `Seq(0)` if none. The frames of the breadcrumbs after
    /// it are the same in both views.
    pub last_later: Seq,
    /// Encoded frames, built once on first use and shared by every connection.
    pub(super) frames: CrumbFrames,
}

impl Breadcrumb {
    /// The state at this breadcrumb, if it is still kept (always, for the latest).
    pub fn map(&self) -> Option<Arc<KvMap>> {
        self.map.load_full()
    }

    /// The combined digest of `view` at this point.
    pub fn digest_for(&self, view: View) -> u64 {
        match view {
            View::All => self.digest,
            View::V1 => self.digest_v1,
        }
    }

    /// The variant whose frames a client of `v` can be sent for what happened after `from`
    /// up to this breadcrumb: `v` itself, or, where the two views do not differ there, the
    /// same compression with every key (so such frames are encoded once for both).
    fn shared_variant(&self, from: Seq, v: Variant) -> Variant {
        if v.view == View::V1 && self.last_later <= from {
            v.with_all_keys()
        } else {
            v
        }
    }

    /// This breadcrumb's delta frame (from `seq - 1` to `seq`) for `v`, encoded on first use.
    pub fn delta_frame(&self, v: Variant, m: &Metrics) -> Bytes {
        let v = self.shared_variant(Seq(self.seq.0.saturating_sub(1)), v);
        self.frames
            .delta
            .get(v)
            .get_or_init(|| {
                let msg = deltas_message(self, v.view);
                if let Message::Deltas(d) = &msg {
                    m.kvs_per_msg.felix().observe(d.updates.len() as f64);
                }
                m.counted(FrameKind::delta, encode(&msg, v.compress))
            })
            .clone()
    }

    /// The coalesced span of `stride` breadcrumbs ending at this one for `v`, encoded on
    /// first use, if this one is aligned and `span` (called with the span's bounds, exclusive
    /// and inclusive) can still give every breadcrumb of it.
    pub fn span_frame(
        &self,
        stride: u64,
        v: Variant,
        m: &Metrics,
        span: impl FnOnce(Seq, Seq) -> Option<Vec<Arc<Breadcrumb>>>,
    ) -> Option<Bytes> {
        let slot = match stride {
            256 => &self.frames.span256,
            16 => &self.frames.span16,
            _ => return None,
        };
        if !self.seq.0.is_multiple_of(stride) || self.seq.0 < stride {
            return None;
        }
        let from = Seq(self.seq.0 - stride);
        let v = self.shared_variant(from, v);
        slot.get(v)
            .get_or_init(|| {
                let crumbs = span(from, self.seq)?;
                let mut latest: BTreeMap<KeyPath, Update> = BTreeMap::new();
                for c in &crumbs {
                    for u in c.deltas.iter().filter(|u| v.view.holds(&u.key)) {
                        latest.insert(u.key.clone(), u.clone());
                    }
                }
                m.kvs_per_msg.felix().observe(latest.len() as f64);
                let msg = Message::Deltas(Deltas {
                    from_seq: from,
                    seq: self.seq,
                    digest: self.digest_for(v.view),
                    updates: latest.into_values().collect(),
                });
                Some(m.counted(FrameKind::span, encode(&msg, v.compress)))
            })
            .clone()
    }
}

impl Breadcrumb {
    /// The `MsgKVs` taking a Calico client of `syncer` from the breadcrumb before to this one
    /// (`None`: nothing in it for that syncer type), translated and encoded on first use, with
    /// revisions as `driver` gives them.
    pub fn calico_frame(
        &self,
        syncer: SyncerType,
        carriage: Carriage,
        driver: Driver,
        m: &Metrics,
    ) -> Result<Option<Bytes>, Unencodable> {
        self.frames.calico.frame(
            &self.deltas,
            &self.previous,
            &self.object_revisions,
            (syncer, carriage, driver),
            m,
        )
    }
}

impl Breadcrumb {
    /// The Calico syncer types this breadcrumb has a change for (translated on first use, as
    /// for [`Breadcrumb::calico_frame`]).
    pub fn calico_syncers(&self, m: &Metrics) -> SyncerSet {
        self.frames
            .calico
            .syncers(&self.deltas, &self.previous, &self.object_revisions, m)
    }
}

/// Frames kept with a breadcrumb, built once on first use and shared by every connection.
#[derive(Debug, Default)]
pub(super) struct CrumbFrames {
    delta: PerVariant<OnceLock<Bytes>>,
    /// For Calico clients: the translated changes and their `MsgKVs` per syncer type.
    calico: CalicoCrumb,
    /// Spans ending at this breadcrumb: stride 256, stride 16.
    span256: PerVariant<OnceLock<Option<Bytes>>>,
    span16: PerVariant<OnceLock<Option<Bytes>>>,
}

/// The delta message of a breadcrumb: what takes a client of `view` from `seq - 1` to `seq`.
fn deltas_message(c: &Breadcrumb, view: View) -> Message {
    Message::Deltas(Deltas {
        from_seq: Seq(c.seq.0.saturating_sub(1)),
        seq: c.seq,
        digest: c.digest_for(view),
        updates: c
            .deltas
            .iter()
            .filter(|u| view.holds(&u.key))
            .cloned()
            .collect(),
    })
}
