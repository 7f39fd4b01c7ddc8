//! The state digest: a fingerprint of a whole KV state that two peers can compare bucket by
//! bucket, so a reconnecting client is sent only the parts of the state that differ.
//!
//! Every key falls in one of [`BUCKETS`] buckets, chosen by a hash of the key alone (so a
//! changed value stays in its bucket). A bucket's value is the XOR of a 64-bit hash of
//! (key, value bytes) over the keys in it: XOR makes insert, remove and replace O(1) and
//! independent of order, so equal states give equal digests however they were built. The
//! XOR of all buckets, [`StateDigest::combined`], travels in every delta frame as a cheap
//! end-to-end check.
//!
//! The hash is XXH3-64, a fixed, documented algorithm: digests are comparable across
//! processes, machines, replicas and releases. Revisions are deliberately not hashed: two
//! datastores views with the same content but different revisions are the same state.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

/// Number of buckets in a protocol v1 digest. A power of two, fixed by the wire format.
pub const BUCKETS: usize = 1024;

/// Index of one digest bucket, `0..BUCKETS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct BucketId(pub u16);

/// Hash of a key, from which both its bucket and its entry hash derive. Computing it once per
/// update saves hashing the key twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyHash(u64);

impl KeyHash {
    /// Hashes a key path.
    pub fn of(key: &str) -> Self {
        Self(xxh3_64(key.as_bytes()))
    }

    /// The bucket this key belongs to.
    pub fn bucket(self) -> BucketId {
        // High bits: the low bits already seed the entry hash. `BUCKETS` is 2^10, so the shift
        // leaves a value below 1024 and the cast is lossless.
        BucketId((self.0 >> (64 - BUCKETS.trailing_zeros())) as u16)
    }

    /// The contribution of this key holding `value` (serialized value bytes).
    pub fn entry(self, value: &[u8]) -> u64 {
        // Seeding with the key hash binds value to key: (k1, v) and (k2, v) differ, and no
        // split of the concatenated bytes collides the way hash(key ++ value) would.
        // An entry of zero would be invisible; the chance is 2^-64 per entry, which we accept.
        xxh3_64_with_seed(value, self.0)
    }
}

/// A bucketed digest of a KV state. See the module documentation.
#[derive(Clone, PartialEq, Eq)]
pub struct StateDigest {
    buckets: Box<[u64; BUCKETS]>,
    combined: u64,
}

impl Default for StateDigest {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for StateDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let non_empty = self.buckets.iter().filter(|b| **b != 0).count();
        write!(
            f,
            "StateDigest({:016x}, {non_empty}/{BUCKETS} buckets non-empty)",
            self.combined
        )
    }
}

impl StateDigest {
    /// The digest of the empty state.
    pub fn new() -> Self {
        Self {
            buckets: Box::new([0; BUCKETS]),
            combined: 0,
        }
    }

    /// Adds `key` holding `value`. The caller guarantees the key was absent.
    pub fn insert(&mut self, key: &str, value: &[u8]) {
        self.toggle(KeyHash::of(key), value);
    }

    /// Removes `key`, which held `value`.
    pub fn remove(&mut self, key: &str, value: &[u8]) {
        self.toggle(KeyHash::of(key), value);
    }

    /// Replaces `key`'s value `old` by `new`.
    pub fn replace(&mut self, key: &str, old: &[u8], new: &[u8]) {
        let h = KeyHash::of(key);
        self.toggle(h, old);
        self.toggle(h, new);
    }

    /// Applies a change to `key`: `old` is its value before (None: absent), `new` after.
    /// Covers insert, replace and remove in one call, for stores that already know both.
    pub fn apply(&mut self, key: &str, old: Option<&[u8]>, new: Option<&[u8]>) {
        let h = KeyHash::of(key);
        if let Some(old) = old {
            self.toggle(h, old);
        }
        if let Some(new) = new {
            self.toggle(h, new);
        }
    }

    /// XORs one entry in or out: the same call adds and removes.
    pub fn toggle(&mut self, key: KeyHash, value: &[u8]) {
        let entry = key.entry(value);
        let bucket = usize::from(key.bucket().0);
        if let Some(b) = self.buckets.get_mut(bucket) {
            *b ^= entry;
        }
        self.combined ^= entry;
    }

    /// XOR of every bucket: equal for equal states, and a one-number summary for logs and
    /// for the check carried by every delta frame.
    pub fn combined(&self) -> u64 {
        self.combined
    }

    /// The value of one bucket (zero for an out-of-range id).
    pub fn bucket(&self, id: BucketId) -> u64 {
        self.buckets.get(usize::from(id.0)).copied().unwrap_or(0)
    }

    /// All bucket values, in bucket order.
    pub fn buckets(&self) -> &[u64; BUCKETS] {
        &self.buckets
    }

    /// The buckets whose values differ between `self` and `other`, in ascending order.
    pub fn diff(&self, other: &StateDigest) -> BucketSet {
        BucketSet(
            self.buckets
                .iter()
                .zip(other.buckets.iter())
                .enumerate()
                .filter(|(_, (a, b))| a != b)
                // enumerate over BUCKETS (1024) entries: always fits in u16.
                .map(|(i, _)| BucketId(i as u16))
                .collect(),
        )
    }
}

// Wire form: the bucket count (u16, so a future digest size is recognisable) then the buckets
// as fixed 8-byte little-endian words in one byte string. Random 64-bit values take ~9.5 bytes
// as postcard varints; fixed width is smaller and decodes without branching.
impl Serialize for StateDigest {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut raw = Vec::with_capacity(BUCKETS * 8);
        for b in self.buckets.iter() {
            raw.extend_from_slice(&b.to_le_bytes());
        }
        // BUCKETS = 1024 fits in u16.
        (BUCKETS as u16, serde_bytes_ref(&raw)).serialize(s)
    }
}

impl<'de> Deserialize<'de> for StateDigest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let (count, raw): (u16, ByteBuf) = Deserialize::deserialize(d)?;
        if usize::from(count) != BUCKETS {
            return Err(D::Error::custom(format_args!(
                "state digest has {count} buckets, protocol v1 uses {BUCKETS}"
            )));
        }
        if raw.0.len() != BUCKETS * 8 {
            return Err(D::Error::custom(format_args!(
                "state digest is {} bytes, expected {}",
                raw.0.len(),
                BUCKETS * 8
            )));
        }
        let mut digest = StateDigest::new();
        for (slot, chunk) in digest.buckets.iter_mut().zip(raw.0.chunks_exact(8)) {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            *slot = u64::from_le_bytes(word);
            digest.combined ^= *slot;
        }
        Ok(digest)
    }
}

/// A set of buckets, sorted ascending without duplicates, every id below [`BUCKETS`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct BucketSet(Vec<BucketId>);

impl BucketSet {
    /// Builds a set from any ids; sorts, removes duplicates, and rejects out-of-range ids.
    ///
    /// # Errors
    ///
    /// [`BucketSetError::OutOfRange`] for an id not below [`BUCKETS`].
    pub fn new(mut ids: Vec<BucketId>) -> Result<Self, BucketSetError> {
        if let Some(bad) = ids.iter().find(|id| usize::from(id.0) >= BUCKETS) {
            return Err(BucketSetError::OutOfRange(bad.0));
        }
        ids.sort_unstable();
        ids.dedup();
        Ok(Self(ids))
    }

    /// Every bucket.
    pub fn all() -> Self {
        // BUCKETS fits in u16.
        Self((0..BUCKETS as u16).map(BucketId).collect())
    }

    /// Whether `id` is in the set.
    pub fn contains(&self, id: BucketId) -> bool {
        self.0.binary_search(&id).is_ok()
    }

    /// The ids, ascending.
    pub fn ids(&self) -> &[BucketId] {
        &self.0
    }

    /// Number of buckets in the set.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Why a [`BucketSet`] was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BucketSetError {
    /// A bucket id is not below [`BUCKETS`].
    #[error("bucket id {0} is out of range (protocol v1 has {BUCKETS} buckets)")]
    OutOfRange(u16),
    /// Ids on the wire must be strictly ascending.
    #[error("bucket ids are not strictly ascending")]
    NotAscending,
}

impl<'de> Deserialize<'de> for BucketSet {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let ids: Vec<BucketId> = Deserialize::deserialize(d)?;
        if let Some(bad) = ids.iter().find(|id| usize::from(id.0) >= BUCKETS) {
            return Err(D::Error::custom(BucketSetError::OutOfRange(bad.0)));
        }
        if ids.windows(2).any(|w| matches!(w, [a, b] if a >= b)) {
            return Err(D::Error::custom(BucketSetError::NotAscending));
        }
        Ok(Self(ids))
    }
}

/// Serializes a byte slice as a byte string (not a sequence of u8).
fn serde_bytes_ref(b: &[u8]) -> impl Serialize + '_ {
    struct B<'a>(&'a [u8]);
    impl Serialize for B<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_bytes(self.0)
        }
    }
    B(b)
}

/// An owned byte string for deserialization.
struct ByteBuf(Vec<u8>);

impl<'de> Deserialize<'de> for ByteBuf {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = ByteBuf;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a byte string")
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<ByteBuf, E> {
                Ok(ByteBuf(v.to_vec()))
            }
        }
        d.deserialize_bytes(V)
    }
}

#[cfg(test)]
mod tests;
