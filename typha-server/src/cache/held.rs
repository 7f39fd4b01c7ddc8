//! How the cache's map holds a value: its encoded bytes, or, once the writer has trained a
//! dictionary on the map's own values, those bytes compressed alone with it.
//!
//! The values are most of a server's heap (464 B a KV for the storm's cluster). Compressed
//! alone with a 32 KiB dictionary trained on the cluster's values, the ones of
//! [`MIN_HELD_COMPRESSED`] bytes or more keep about a sixth of their bytes
//! (docs/benchmarks-history.md, "values held compressed"). The price is a decompression each
//! time a value is read from the map: once per value per snapshot build, per digest bucket
//! build, per Calico conversion, and once per change (the old value, for the digest). The
//! deltas a breadcrumb sends keep the plain value they were made from, so sending a change
//! costs nothing more.

use std::borrow::Cow;
use std::sync::Arc;

use bytes::Bytes;
use typha_protocol::model::EncodedValue;

use crate::zdict::{self, Dict};

/// Values shorter than this stay as they are: too short to gain.
pub const MIN_HELD_COMPRESSED: usize = 128;
/// The zstd level values are compressed at (once per change).
const LEVEL: i32 = 3;
/// How many of the map's values, spread over it, a dictionary is trained on.
pub const DICT_SAMPLES: usize = 2_000;
/// When the writer trains (`zdict`'s schedule, as the embedded store's forms).
pub use crate::zdict::{FIRST_TRAINING, RETRAIN_GROWTH};

/// A value as the map holds it.
#[derive(Debug, Clone)]
pub enum Held {
    /// The encoded value itself.
    Plain(EncodedValue),
    /// The `len` bytes of the encoded value, compressed alone with `dict`.
    Zstd {
        len: u32,
        dict: Arc<Dict>,
        z: Box<[u8]>,
    },
}

impl Held {
    /// How the map holds `v`: compressed with `dict` when there is one, `v` is long enough
    /// and compressing makes it shorter; else as it is.
    pub fn hold(v: &EncodedValue, dict: Option<&Arc<Dict>>) -> Held {
        let Some(dict) = dict.filter(|_| v.len() >= MIN_HELD_COMPRESSED) else {
            return Held::Plain(v.clone());
        };
        match (
            u32::try_from(v.len()),
            zdict::compress(v.as_bytes(), LEVEL, Some(dict)),
        ) {
            (Ok(len), Some(z)) if z.len() < v.len() => Held::Zstd {
                len,
                dict: dict.clone(),
                z: z.into_boxed_slice(),
            },
            _ => Held::Plain(v.clone()),
        }
    }

    /// The value's bytes. A compressed value that does not come back (which would be a bug, or
    /// memory corrupted) reads as empty bytes, which no client decodes as a value: it is
    /// logged and the KV is then reported invalid by whoever decodes it, never a panic here.
    pub fn bytes(&self) -> Cow<'_, [u8]> {
        match self {
            Held::Plain(v) => Cow::Borrowed(v.as_bytes()),
            Held::Zstd { len, dict, z } => match zdict::decompress(z, *len as usize, Some(dict)) {
                Ok(b) => Cow::Owned(b),
                Err(e) => {
                    tracing::error!(error = %e, "a value held compressed does not decompress");
                    Cow::Borrowed(&[])
                }
            },
        }
    }

    /// The encoded value (a copy when it is held compressed).
    pub fn encoded(&self) -> EncodedValue {
        match self {
            Held::Plain(v) => v.clone(),
            Held::Zstd { .. } => EncodedValue::from_bytes(Bytes::from(self.bytes().into_owned())),
        }
    }

    /// The encoded value's length.
    pub fn len(&self) -> usize {
        match self {
            Held::Plain(v) => v.len(),
            Held::Zstd { len, .. } => *len as usize,
        }
    }

    /// Whether the encoded value is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The same value held with `dict`.
    pub fn rehold(&self, dict: &Arc<Dict>) -> Held {
        Held::hold(&self.encoded(), Some(dict))
    }

    /// The bytes it takes beside the map's entry (for tests and metrics).
    pub fn held_bytes(&self) -> usize {
        match self {
            Held::Plain(v) => v.len(),
            Held::Zstd { z, .. } => z.len(),
        }
    }
}

/// Equal when the encoded values are: by the compressed bytes when both were made with the
/// same dictionary (zstd is deterministic at one level), else by the bytes themselves.
impl PartialEq for Held {
    fn eq(&self, other: &Held) -> bool {
        match (self, other) {
            (Held::Plain(a), Held::Plain(b)) => a == b,
            (
                Held::Zstd { len, dict, z },
                Held::Zstd {
                    len: len2,
                    dict: dict2,
                    z: z2,
                },
            ) if dict.id() == dict2.id() => len == len2 && z == z2,
            _ => self.len() == other.len() && self.bytes() == other.bytes(),
        }
    }
}

impl Eq for Held {}

/// A dictionary trained on an even spread of the values of at least [`MIN_HELD_COMPRESSED`]
/// bytes, or `None` if there are too few, or zstd cannot make one of them.
pub fn train<'a>(values: impl Iterator<Item = &'a Held>) -> Option<Arc<Dict>> {
    let long: Vec<&Held> = values.filter(|h| h.len() >= MIN_HELD_COMPRESSED).collect();
    zdict::train_spread(long.into_iter(), DICT_SAMPLES, |h| {
        Some(h.bytes().into_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use typha_protocol::model::Value;

    fn values() -> Vec<EncodedValue> {
        crate::testing::sample_cluster(&typha_test_support::sample::Spec {
            nodes: 6,
            pods_per_node: 30,
            namespaces: 3,
            deployments_per_namespace: 2,
            policies: 4,
            seed: 9,
        })
        .iter()
        .flat_map(|r| crate::calico::convert::convert(r).unwrap())
        .map(|(_, v): (_, Value)| EncodedValue::encode(&v))
        .collect()
    }

    #[test]
    fn values_come_back_exactly_and_long_ones_are_held_smaller() {
        let vs = values();
        let plain: Vec<Held> = vs.iter().map(|v| Held::hold(v, None)).collect();
        assert!(plain.iter().all(|h| matches!(h, Held::Plain(_))));
        let dict = train(plain.iter()).expect("a dictionary from the sample cluster's values");
        let held: Vec<Held> = vs.iter().map(|v| Held::hold(v, Some(&dict))).collect();
        let other = train(held.iter()).expect("a second dictionary, from held values");
        for (v, h) in vs.iter().zip(&held) {
            assert_eq!(h.encoded(), *v);
            assert_eq!(h.len(), v.len());
            assert_eq!(*h.bytes(), *v.as_bytes());
            assert_eq!(h.rehold(&other).encoded(), *v);
            if v.len() < MIN_HELD_COMPRESSED {
                assert!(matches!(h, Held::Plain(_)));
            }
        }
        assert!(held.iter().any(|h| matches!(h, Held::Zstd { .. })));
        assert!(held[0] != held[1] || vs[0] == vs[1]);
        let sum = |hs: &[Held]| hs.iter().map(Held::held_bytes).sum::<usize>();
        assert!(
            sum(&held) * 2 < sum(&plain),
            "held {} vs plain {}",
            sum(&held),
            sum(&plain)
        );
    }

    #[test]
    fn a_value_that_does_not_decompress_reads_as_empty_not_a_panic() {
        let vs = values();
        let plain: Vec<Held> = vs.iter().map(|v| Held::hold(v, None)).collect();
        let dict = train(plain.iter()).unwrap();
        let v = vs.iter().find(|v| v.len() >= 512).unwrap();
        let Held::Zstd { len, dict: d, .. } = Held::hold(v, Some(&dict)) else {
            panic!("a long value is held compressed");
        };
        let broken = Held::Zstd {
            len,
            dict: d,
            z: vec![0xff; 7].into_boxed_slice(),
        };
        assert!(broken.bytes().is_empty());
        assert_ne!(broken.encoded(), *v);
    }
}
