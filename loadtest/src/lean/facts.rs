//! A swarm-wide cache of what a data frame says, keyed by a strong hash of its bytes.
//!
//! The server encodes each frame once and writes the same bytes to every client of the same
//! variant, so the first lean node to see a Deltas or snapshot-chunk frame decompresses and
//! decodes it in full (the real protocol decoder: every length, limit and update checked), and
//! every other node that receives the same bytes hashes them (xxh3-128 over the payload, seeded
//! with the header's type and flags) and looks the facts up. A frame that does not decode is
//! never cached: every node that receives it decodes it and fails.
//!
//! A collision of xxh3-128 between two different frames of one run is what this trusts not to
//! happen (it is not a cryptographic hash; the input is the server's, not an attacker's).

use std::collections::HashMap;
use std::sync::Mutex;

use bytes::Bytes;
use typha_protocol::frame::{Frame, FrameDecoder, FrameError, Limits};
use typha_protocol::message::{Message, MessageType, Seq};
use typha_protocol::model::{KeyType, Update};
use xxhash_rust::xxh3::xxh3_128_with_seed;

/// What a data frame says, as far as a lean node checks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Facts {
    /// A Deltas frame.
    Deltas {
        /// The position it applies on.
        from: Seq,
        /// The position it reaches.
        seq: Seq,
        /// The server's digest at `seq`.
        digest: u64,
        /// Updates carried.
        updates: u64,
        /// Of those, churn updates (workload endpoints stamped with their write time).
        stamped: u64,
    },
    /// A snapshot chunk of this many KVs.
    Chunk {
        /// KVs carried.
        kvs: u64,
    },
}

/// Entries per shard generation: two generations of 16 shards hold about 130,000 frames'
/// facts (a 300,000-KV snapshot is about 300 chunks; a 30-s churn at 100/s, 3,000 deltas).
const PER_SHARD: usize = 4096;
const SHARDS: usize = 16;

#[derive(Default)]
struct Shard {
    now: HashMap<u128, Facts>,
    old: HashMap<u128, Facts>,
}

/// The cache, and how often it was hit.
pub(crate) struct FactCache {
    shards: Vec<Mutex<Shard>>,
}

impl Default for FactCache {
    fn default() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
        }
    }
}

thread_local! {
    /// One zstd context per thread for the frames decoded in full, not one per node.
    static DECODER: std::cell::RefCell<FrameDecoder> =
        std::cell::RefCell::new(FrameDecoder::new(Limits::CLIENT_INBOUND));
}

/// Decodes a whole frame with the real decoder (its limits, decompression and payload checks).
pub(crate) fn decode(
    ty: MessageType,
    compressed: bool,
    payload: &[u8],
) -> Result<Message, FrameError> {
    let frame = Frame {
        message_type: ty,
        compressed,
        payload: Bytes::copy_from_slice(payload),
    };
    DECODER.with(|d| d.borrow_mut().decode_message(&frame))
}

/// The churn updates among `updates`: workload endpoints whose value carries the write stamp.
fn stamped(updates: &[Update]) -> u64 {
    updates
        .iter()
        .filter(|u| u.key.key_type() == KeyType::WorkloadEndpoint)
        .filter(|u| {
            u.value
                .as_ref()
                .and_then(|v| crate::server::sent_ns(v.as_bytes()))
                .is_some()
        })
        .count() as u64
}

impl FactCache {
    /// The facts of a Deltas or snapshot-chunk frame (`flags` as in its header), from the
    /// cache or by decoding it.
    pub(crate) fn facts(
        &self,
        ty: MessageType,
        flags: u8,
        payload: &[u8],
    ) -> Result<Facts, FrameError> {
        let key = xxh3_128_with_seed(payload, (u64::from(ty as u8) << 8) | u64::from(flags));
        let shard = self
            .shards
            .get((key as usize) % SHARDS)
            .ok_or(FrameError::UnknownType(ty as u8))?;
        // Decoding under the shard's lock: a node that receives the same new frame meanwhile
        // waits for its facts rather than decoding it again.
        let mut s = shard.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = s.now.get(&key) {
            return Ok(*f);
        }
        let f = match s.old.get(&key) {
            Some(f) => *f,
            None => match decode(ty, flags & typha_protocol::frame::FLAG_ZSTD != 0, payload)? {
                Message::Deltas(d) => Facts::Deltas {
                    from: d.from_seq,
                    seq: d.seq,
                    digest: d.digest,
                    updates: d.updates.len() as u64,
                    stamped: stamped(&d.updates),
                },
                Message::SnapshotChunk(c) => Facts::Chunk {
                    kvs: c.updates.len() as u64,
                },
                _ => return Err(FrameError::UnknownType(ty as u8)),
            },
        };
        if s.now.len() >= PER_SHARD {
            s.old = std::mem::take(&mut s.now);
        }
        s.now.insert(key, f);
        Ok(f)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use typha_protocol::frame::{FrameEncoder, HEADER_LEN};
    use typha_protocol::message::{Deltas, SnapshotChunk};
    use typha_protocol::sample::{Cluster, ClusterSpec, to_updates};

    use super::*;

    fn frame(msg: &Message) -> (MessageType, u8, Vec<u8>) {
        let b = FrameEncoder::zstd(1).unwrap().encode(msg).unwrap();
        let (ty, flags) = (b[4], b[5]);
        (
            MessageType::from_u8(ty).unwrap(),
            flags,
            b[HEADER_LEN..].to_vec(),
        )
    }

    #[test]
    fn facts_are_what_decoding_says_and_differ_with_the_bytes() {
        let cluster = Cluster::new(ClusterSpec::default());
        let kvs: Vec<_> = cluster.workload_endpoints().take(50).collect();
        let updates = to_updates(&kvs, 1);
        let d = |from, seq, digest| {
            Message::Deltas(Deltas {
                from_seq: Seq(from),
                seq: Seq(seq),
                digest,
                updates: updates.clone(),
            })
        };
        let cache = FactCache::default();
        let (ty, fl, p) = frame(&d(3, 4, 99));
        assert_ne!(fl, 0, "compressed");
        let want = Facts::Deltas {
            from: Seq(3),
            seq: Seq(4),
            digest: 99,
            updates: 50,
            stamped: 0,
        };
        assert_eq!(cache.facts(ty, fl, &p).unwrap(), want);
        // A hit gives the same.
        assert_eq!(cache.facts(ty, fl, &p).unwrap(), want);
        // Another frame with the same updates but another position is not mistaken for it.
        let (ty2, fl2, p2) = frame(&d(4, 5, 98));
        assert!(matches!(
            cache.facts(ty2, fl2, &p2).unwrap(),
            Facts::Deltas {
                from: Seq(4),
                seq: Seq(5),
                digest: 98,
                ..
            }
        ));
        let (ty3, fl3, p3) = frame(&Message::SnapshotChunk(SnapshotChunk {
            updates: updates.clone(),
        }));
        assert_eq!(
            cache.facts(ty3, fl3, &p3).unwrap(),
            Facts::Chunk { kvs: 50 }
        );
        // Corrupt bytes are an error, and stay one.
        let mut bad = p.clone();
        let mid = bad.len() / 2;
        bad[mid] ^= 0xff;
        bad.truncate(bad.len() - 3);
        assert!(cache.facts(ty, fl, &bad).is_err());
        assert!(cache.facts(ty, fl, &bad).is_err());
    }
}
