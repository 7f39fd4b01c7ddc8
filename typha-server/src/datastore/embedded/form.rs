//! How the embedded store keeps a resource: its JSON manifest form, compressed with zstd, with
//! a dictionary trained on the store's own resources once it holds enough of them.
//!
//! Compressed alone, a workload endpoint's 1.2 KB of JSON keeps about 0.5 KB; with a dictionary
//! trained on a thousand of the cluster's resources, about 0.13 KB (docs/benchmarks-history.md,
//! "lazy listings, and a dictionary for the embedded store's forms").

use std::borrow::Cow;
use std::sync::Arc;

use crate::calico::v3::Resource;
pub(super) use crate::zdict::Dict;
use crate::zdict::{compress, decompress};

/// The zstd level of stored resources: they are compressed once per write.
const LEVEL: i32 = 3;
/// How many of the store's resources, spread over it, a dictionary is trained on.
const DICT_SAMPLES: usize = 1_000;
/// When the store trains (`zdict`'s schedule, as the cache's values).
pub(super) use crate::zdict::{FIRST_TRAINING, RETRAIN_GROWTH};

/// A dictionary trained on a store's resources (an even spread of [`DICT_SAMPLES`] of them),
/// or `None` if zstd cannot make one of them (too few, or too alike).
pub(super) fn train<'a>(forms: impl ExactSizeIterator<Item = &'a Form>) -> Option<Arc<Dict>> {
    crate::zdict::train_spread(forms, DICT_SAMPLES, |f| f.json().ok().map(Cow::into_owned))
}

/// A resource's stored bytes.
#[derive(Debug, Clone)]
pub(super) enum Form {
    /// zstd of `len` bytes of JSON, made with `dict` if there is one.
    Zstd {
        len: u32,
        dict: Option<Arc<Dict>>,
        z: Arc<[u8]>,
    },
    /// The JSON itself (when compressing failed, which takes running out of memory).
    Json(Arc<[u8]>),
}

impl Form {
    /// The stored form of `r` (its `resourceVersion` ignored), compressed with `dict`.
    pub(super) fn of(r: &Resource, dict: Option<&Arc<Dict>>) -> Form {
        let mut doc = r.to_json();
        if let Some(meta) = doc.get_mut("metadata").and_then(|m| m.as_object_mut()) {
            meta.remove("resourceVersion");
        }
        // Writing a JSON value to memory cannot fail.
        let json = serde_json::to_vec(&doc).unwrap_or_default();
        Form::compressed(json, dict)
    }

    fn compressed(json: Vec<u8>, dict: Option<&Arc<Dict>>) -> Form {
        match (
            u32::try_from(json.len()),
            compress(&json, LEVEL, dict.map(|d| &**d)),
        ) {
            (Ok(len), Some(z)) => Form::Zstd {
                len,
                dict: dict.cloned(),
                z: Arc::from(z),
            },
            _ => Form::Json(Arc::from(json)),
        }
    }

    /// The same JSON compressed with `dict` (`None` if it cannot be read back, which would be
    /// a bug; the form stays as it was then).
    pub(super) fn recompressed(&self, dict: &Arc<Dict>) -> Option<Form> {
        Some(Form::compressed(self.json().ok()?.into_owned(), Some(dict)))
    }

    /// The JSON.
    pub(super) fn json(&self) -> Result<Cow<'_, [u8]>, String> {
        match self {
            Form::Zstd { len, dict, z } => {
                decompress(z, *len as usize, dict.as_deref()).map(Cow::Owned)
            }
            Form::Json(j) => Ok(Cow::Borrowed(j)),
        }
    }
}

/// Two forms are equal when their JSON is: two writes of the same resource are the same change
/// exactly then. With the same dictionary (or none) that is when the bytes are (zstd is
/// deterministic); across a new dictionary, the JSON is compared.
impl PartialEq for Form {
    fn eq(&self, other: &Form) -> bool {
        match (self, other) {
            (
                Form::Zstd { len, dict, z },
                Form::Zstd {
                    len: len2,
                    dict: dict2,
                    z: z2,
                },
            ) if dict.as_ref().map(|d| d.id()) == dict2.as_ref().map(|d| d.id()) => {
                len == len2 && z == z2
            }
            (Form::Json(a), Form::Json(b)) => a == b,
            _ => matches!((self.json(), other.json()), (Ok(a), Ok(b)) if a == b),
        }
    }
}

impl Eq for Form {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::sample_cluster as cluster;
    use typha_test_support::sample::Spec;

    fn resources() -> Vec<Resource> {
        cluster(&Spec {
            nodes: 4,
            pods_per_node: 30,
            namespaces: 2,
            deployments_per_namespace: 2,
            policies: 4,
            seed: 7,
        })
    }

    #[test]
    fn a_dictionary_keeps_the_json_and_equality_holds_across_dictionaries() {
        let rs = resources();
        let plain: Vec<Form> = rs.iter().map(|r| Form::of(r, None)).collect();
        let dict = train(plain.iter()).expect("a dictionary from 100+ resources");
        let with: Vec<Form> = rs.iter().map(|r| Form::of(r, Some(&dict))).collect();
        let other = train(with.iter()).expect("a second dictionary");
        for ((p, w), r) in plain.iter().zip(&with).zip(&rs) {
            assert_eq!(p.json().unwrap(), w.json().unwrap());
            assert_eq!(*p, *w, "the same JSON, with and without a dictionary");
            assert_eq!(w.recompressed(&other).unwrap(), *w);
            assert_eq!(Form::of(r, Some(&dict)), *w);
        }
        assert_ne!(plain[0], plain[1]);
        assert_ne!(with[0], with[1]);
        let size = |fs: &[Form]| -> usize {
            fs.iter()
                .map(|f| match f {
                    Form::Zstd { z, .. } => z.len(),
                    Form::Json(j) => j.len(),
                })
                .sum()
        };
        assert!(
            size(&with) * 2 < size(&plain),
            "with {} vs alone {}",
            size(&with),
            size(&plain)
        );
    }
}
