//! Shared snapshots: the frames that bring a joining client up to date, built once per
//! version and reused by every client that joins while that version is current (until it is
//! at least 1 s old and a newer breadcrumb exists, as Typha does).
//!
//! Two shapes: the full snapshot (begin, chunks, end), and the same state cut into the 1,024
//! digest buckets, for clients that resume with a digest and need only the buckets that differ.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::Mutex;
use tokio::time::Instant;
use typha_protocol::digest::{BUCKETS, BucketSet, KeyHash, StateDigest};
#[cfg(doc)]
use typha_protocol::frame::Limits;
use typha_protocol::message::{
    Message, Seq, SnapshotBegin, SnapshotChunk, SnapshotEnd, SnapshotScope,
};
use typha_protocol::model::{Revision, Update, UpdateKind};

use super::Cache;
use super::breadcrumb::{Breadcrumb, Kv, KvMap};
use crate::fanout::{PerVariant, Variant, View, encode, encode_at};
use crate::metrics::FrameKind;

/// Most KVs per snapshot chunk, by default.
pub const CHUNK_KVS: usize = 16_000;
/// Most key and value bytes per snapshot chunk (before compression), by default.
pub const CHUNK_BYTES: usize = 4 << 20;
/// The zstd level of snapshot chunks, by default.
pub const ZSTD_LEVEL: i32 = 1;
/// The largest chunk [`SnapshotConfig`] allows: a quarter of what a client decodes
/// ([`Limits::CLIENT_INBOUND`]'s 64 MiB), leaving room for postcard's framing.
pub const MAX_CHUNK_BYTES: usize = 16 << 20;
/// A snapshot is reused until at least this old once a newer breadcrumb exists.
pub const REUSE_FOR: Duration = Duration::from_secs(1);

/// A full snapshot's frames.
#[derive(Debug)]
pub struct SnapshotFrames {
    /// The state described.
    pub seq: Seq,
    /// The breadcrumb it was built from.
    pub crumb: Arc<Breadcrumb>,
    /// Begin marker, chunks, end marker.
    pub frames: Vec<Bytes>,
    /// KVs carried.
    pub kvs: u64,
    /// Bytes on the wire.
    pub wire_bytes: u64,
    /// When built.
    pub built: Instant,
}

/// The state cut into digest buckets.
#[derive(Debug)]
pub struct BucketFrames {
    /// The state described.
    pub seq: Seq,
    /// The breadcrumb it was built from.
    pub crumb: Arc<Breadcrumb>,
    /// Full digest of that state.
    pub digest: StateDigest,
    /// Chunk frames per bucket.
    pub buckets: Vec<Vec<Bytes>>,
    /// KVs per bucket.
    pub counts: Vec<u64>,
    /// The end marker.
    pub end: Bytes,
    /// When built.
    pub built: Instant,
}

impl BucketFrames {
    /// Begin marker for a client that needs `set` (encoded per client: it names its buckets).
    pub fn begin(&self, set: &BucketSet, compress: bool) -> Bytes {
        let kvs = set
            .ids()
            .iter()
            .map(|b| self.counts.get(usize::from(b.0)).copied().unwrap_or(0))
            .sum();
        encode(
            &Message::SnapshotBegin(SnapshotBegin {
                seq: self.seq,
                scope: SnapshotScope::Buckets(set.clone()),
                kvs,
            }),
            compress,
        )
    }
}

/// How snapshot chunks are cut and compressed. They are encoded once for every client, so they
/// can be larger than delta frames: zstd finds more to share in a larger chunk. Measured on
/// the 106,681-KV storm cluster (`cargo bench -p typha-server --bench snapshot`,
/// BENCHMARKS.md): chunks of 4 MiB instead of 256 KiB take 0.84x the bytes for about 1.1x the
/// build time; levels 6 to 12 save more (down to 0.67x) but cost 6-19x the build time, which
/// every joining client waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotConfig {
    /// Most KVs per chunk ([`CHUNK_KVS`]).
    pub chunk_kvs: usize,
    /// Most key and value bytes per chunk before compression ([`CHUNK_BYTES`]; at most
    /// [`MAX_CHUNK_BYTES`]).
    pub chunk_bytes: usize,
    /// zstd level of the chunks ([`ZSTD_LEVEL`]); delta frames keep
    /// [`DEFAULT_ZSTD_LEVEL`](typha_protocol::frame::DEFAULT_ZSTD_LEVEL).
    pub zstd_level: i32,
}

impl Default for SnapshotConfig {
    fn default() -> Self {
        Self {
            chunk_kvs: CHUNK_KVS,
            chunk_bytes: CHUNK_BYTES,
            zstd_level: ZSTD_LEVEL,
        }
    }
}

/// Per-variant (plain, zstd) slots for the current snapshot and bucket frames.
#[derive(Debug, Default)]
pub struct Snapshots {
    cfg: SnapshotConfig,
    full: PerVariant<Mutex<Option<Arc<SnapshotFrames>>>>,
    buckets: PerVariant<Mutex<Option<Arc<BucketFrames>>>>,
}

/// Whether frames built at `crumb` (at `built`) may go to a client joining now, whose floor is
/// `floor`: they are of the latest state, or young ([`REUSE_FOR`]) and not older than what the
/// client has already applied (as far as the cache has got).
fn reusable(crumb: &Breadcrumb, built: Instant, latest: &Breadcrumb, floor: Revision) -> bool {
    crumb.seq == latest.seq
        || (built.elapsed() < REUSE_FOR && crumb.revision >= floor.min(latest.revision))
}

impl Snapshots {
    /// Empty slots; snapshots built as `cfg` says.
    pub fn new(cfg: SnapshotConfig) -> Self {
        Self {
            cfg,
            ..Self::default()
        }
    }

    /// The full snapshot to send a joining client of `v`: the current one if still reusable,
    /// else a new one built from the latest breadcrumb (once, however many clients are
    /// waiting). Each view has its own: a reused snapshot of one view could be of a state the
    /// other view's frames must not describe.
    pub async fn full(&self, cache: &Arc<Cache>, v: Variant) -> Arc<SnapshotFrames> {
        self.full_from(cache, v, Revision(0)).await
    }

    /// [`full`](Self::full), for a client that has applied changes up to revision `floor`:
    /// a kept snapshot of an older state is not reused for it (it would be sent older values
    /// than it has), unless the cache itself has not reached the floor.
    pub async fn full_from(
        &self,
        cache: &Arc<Cache>,
        v: Variant,
        floor: Revision,
    ) -> Arc<SnapshotFrames> {
        let mut slot = self.full.get(v).lock().await;
        let latest = cache.latest();
        if let Some(s) = slot
            .as_ref()
            .filter(|s| reusable(&s.crumb, s.built, &latest, floor))
        {
            cache.metrics.snapshots_reused.felix().inc();
            return s.clone();
        }
        let (c2, cfg) = (cache.clone(), self.cfg);
        let built = tokio::task::spawn_blocking(move || build_full(&c2, latest, v, cfg)).await;
        let s = match built {
            Ok(s) => Arc::new(s),
            // The build panicked: a bug; build again on this thread rather than fail the client.
            Err(_) => Arc::new(build_full(cache, cache.latest(), v, cfg)),
        };
        cache.metrics.snapshots_generated.felix().inc();
        cache
            .metrics
            .snapshot_compressed_bytes
            .felix()
            .set(i64::try_from(s.wire_bytes).unwrap_or(i64::MAX));
        *slot = Some(s.clone());
        s
    }

    /// The bucket frames to resynchronise a client of `v` by digest (same reuse rule).
    pub async fn buckets(&self, cache: &Arc<Cache>, v: Variant) -> Arc<BucketFrames> {
        self.buckets_from(cache, v, Revision(0)).await
    }

    /// [`buckets`](Self::buckets), for a client that has applied changes up to revision
    /// `floor` (the reuse rule of [`full_from`](Self::full_from)).
    pub async fn buckets_from(
        &self,
        cache: &Arc<Cache>,
        v: Variant,
        floor: Revision,
    ) -> Arc<BucketFrames> {
        let mut slot = self.buckets.get(v).lock().await;
        let latest = cache.latest();
        if let Some(s) = slot
            .as_ref()
            .filter(|s| reusable(&s.crumb, s.built, &latest, floor))
        {
            return s.clone();
        }
        let (c2, cfg) = (cache.clone(), self.cfg);
        let built = tokio::task::spawn_blocking(move || build_buckets(&c2, latest, v, cfg)).await;
        let s = match built {
            Ok(s) => Arc::new(s),
            Err(_) => Arc::new(build_buckets(cache, cache.latest(), v, cfg)),
        };
        *slot = Some(s.clone());
        s
    }
}

/// Splits KVs into chunk frames.
fn chunks(
    cache: &Cache,
    kvs: impl Iterator<Item = Update>,
    v: Variant,
    cfg: SnapshotConfig,
    kind: FrameKind,
    raw: &mut u64,
) -> Vec<Bytes> {
    let mut out = Vec::new();
    let mut batch = Vec::new();
    let mut bytes = 0;
    let flush = |batch: &mut Vec<Update>, out: &mut Vec<Bytes>| {
        if !batch.is_empty() {
            let msg = Message::SnapshotChunk(SnapshotChunk {
                updates: std::mem::take(batch),
            });
            let frame = if v.compress {
                encode_at(&msg, cfg.zstd_level)
            } else {
                encode(&msg, false)
            };
            out.push(cache.metrics.counted(kind, frame));
        }
    };
    for u in kvs {
        let size = u.value.as_ref().map_or(0, |v| v.len()) + u.key.as_str().len();
        bytes += size;
        *raw += size as u64;
        batch.push(u);
        if batch.len() >= cfg.chunk_kvs || bytes >= cfg.chunk_bytes.min(MAX_CHUNK_BYTES) {
            flush(&mut batch, &mut out);
            bytes = 0;
        }
    }
    flush(&mut batch, &mut out);
    out
}

fn as_update((k, kv): (&typha_protocol::model::KeyPath, &Kv)) -> Update {
    Update {
        key: k.clone(),
        value: Some(kv.value.encoded()),
        revision: kv.revision,
        kind: UpdateKind::New,
    }
}

/// The breadcrumb to build from and its map: `crumb` if it still has its map, else the latest.
fn with_map(cache: &Cache, crumb: Arc<Breadcrumb>) -> (Arc<Breadcrumb>, Arc<KvMap>) {
    if let Some(m) = crumb.map() {
        return (crumb, m);
    }
    loop {
        let latest = cache.latest();
        // The latest breadcrumb always keeps its map.
        if let Some(m) = latest.map() {
            return (latest, m);
        }
    }
}

fn build_full(
    cache: &Cache,
    crumb: Arc<Breadcrumb>,
    v: Variant,
    cfg: SnapshotConfig,
) -> SnapshotFrames {
    let (crumb, map) = with_map(cache, crumb);
    let compress = v.compress;
    let mut raw = 0;
    let kvs = match v.view {
        View::All => map.len(),
        View::V1 => map.len() - crumb.later_kvs,
    } as u64;
    let begin = Message::SnapshotBegin(SnapshotBegin {
        seq: crumb.seq,
        scope: SnapshotScope::Full,
        kvs,
    });
    let mut frames = vec![
        cache
            .metrics
            .counted(FrameKind::snapshot, encode(&begin, compress)),
    ];
    let view = v.view;
    frames.extend(chunks(
        cache,
        map.iter().filter(|(k, _)| view.holds(k)).map(as_update),
        v,
        cfg,
        FrameKind::snapshot,
        &mut raw,
    ));
    let end = Message::SnapshotEnd(SnapshotEnd {
        seq: crumb.seq,
        digest: crumb.digest_for(view),
    });
    frames.push(
        cache
            .metrics
            .counted(FrameKind::snapshot, encode(&end, compress)),
    );
    cache
        .metrics
        .snapshot_raw_bytes
        .felix()
        .set(i64::try_from(raw).unwrap_or(i64::MAX));
    SnapshotFrames {
        seq: crumb.seq,
        kvs,
        wire_bytes: frames.iter().map(|f| f.len() as u64).sum(),
        crumb,
        frames,
        built: Instant::now(),
    }
}

fn build_buckets(
    cache: &Cache,
    crumb: Arc<Breadcrumb>,
    v: Variant,
    cfg: SnapshotConfig,
) -> BucketFrames {
    let (crumb, map) = with_map(cache, crumb);
    let compress = v.compress;
    let mut per_bucket: Vec<Vec<Update>> = vec![Vec::new(); BUCKETS];
    let mut digest = StateDigest::new();
    for (k, kv) in map.iter().filter(|(k, _)| v.view.holds(k)) {
        let h = KeyHash::of(k.as_str());
        digest.toggle(h, &kv.value.bytes());
        if let Some(b) = per_bucket.get_mut(usize::from(h.bucket().0)) {
            b.push(as_update((k, kv)));
        }
    }
    let mut raw = 0;
    let counts = per_bucket.iter().map(|b| b.len() as u64).collect();
    let buckets = per_bucket
        .into_iter()
        .map(|kvs| chunks(cache, kvs.into_iter(), v, cfg, FrameKind::bucket, &mut raw))
        .collect();
    let end = Message::SnapshotEnd(SnapshotEnd {
        seq: crumb.seq,
        digest: crumb.digest_for(v.view),
    });
    BucketFrames {
        seq: crumb.seq,
        digest,
        buckets,
        counts,
        end: cache
            .metrics
            .counted(FrameKind::bucket, encode(&end, compress)),
        built: Instant::now(),
        crumb,
    }
}
