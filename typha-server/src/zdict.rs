//! zstd with dictionaries trained on the server's own data, for what it holds in memory many
//! small times over: the embedded store's resources ([`crate::datastore::embedded`]) and the
//! cache's values ([`crate::cache::held`]). Each item is compressed alone, so it can be read
//! alone; a dictionary trained on a spread of the items gives each the context a large stream
//! would have (docs/benchmarks-history.md, "values held compressed": a workload endpoint's
//! value keeps about a fifth of its bytes).
//!
//! Frames carry neither the content size nor the dictionary id: the holder keeps both beside.
//! Contexts are per thread and reused while the dictionary and level stay the same (making
//! one per item cost more than compressing it).

use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

/// A trained dictionary. Each item compressed with one holds it.
pub struct Dict {
    /// Unique in the process: what each thread's reused contexts are keyed by.
    id: u32,
    bytes: Vec<u8>,
}

impl std::fmt::Debug for Dict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Dict({}, {} bytes)", self.id, self.bytes.len())
    }
}

static NEXT_DICT: AtomicU32 = AtomicU32::new(1);

/// The largest dictionary trained.
pub const DICT_BYTES: usize = 32 << 10;
/// A holder trains its first dictionary once it holds this many items...
pub const FIRST_TRAINING: usize = 4_096;
/// ...and a new one each time it has grown this many times over since the last. Training
/// recompresses every item, so the total work stays within a few times the holder's size.
pub const RETRAIN_GROWTH: usize = 8;

/// A [`DICT_BYTES`] dictionary trained on an even spread of `samples` of `items`, read through
/// `bytes` (only the sampled ones are read), or `None` if fewer than 64 give bytes or zstd
/// cannot make one of them.
pub fn train_spread<T>(
    items: impl ExactSizeIterator<Item = T>,
    samples: usize,
    bytes: impl FnMut(T) -> Option<Vec<u8>>,
) -> Option<Arc<Dict>> {
    let step = (items.len() / samples.max(1)).max(1);
    let picked: Vec<Vec<u8>> = items.step_by(step).filter_map(bytes).collect();
    if picked.len() < 64 {
        return None;
    }
    Dict::train(&picked, DICT_BYTES)
}

impl Dict {
    /// A dictionary of at most `max_bytes` trained on `samples`, or `None` if zstd cannot make
    /// one of them (too few, or too alike).
    pub fn train<S: AsRef<[u8]>>(samples: &[S], max_bytes: usize) -> Option<Arc<Dict>> {
        let bytes = zstd::dict::from_samples(samples, max_bytes).ok()?;
        Some(Arc::new(Dict {
            id: NEXT_DICT.fetch_add(1, Ordering::Relaxed),
            bytes,
        }))
    }

    /// Its id, unique in the process.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Its size.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether it is empty (never, once trained).
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

/// Contexts a thread keeps: two, most recently used first, so that a thread that reads the
/// embedded store's forms and the cache's values in turn (two dictionaries) does not make a
/// context (and load a dictionary into it) at every switch.
const CONTEXTS: usize = 2;

thread_local! {
    static COMPRESSORS: RefCell<Vec<((u32, i32), zstd::bulk::Compressor<'static>)>> =
        const { RefCell::new(Vec::new()) };
    static DECOMPRESSORS: RefCell<Vec<(u32, zstd::bulk::Decompressor<'static>)>> =
        const { RefCell::new(Vec::new()) };
}

/// The context keyed `key` in `cache`, moved to the front (made with `make` if it is not
/// there, the least recently used one dropped past [`CONTEXTS`]).
fn front<K: PartialEq, C>(
    cache: &mut Vec<(K, C)>,
    key: K,
    make: impl FnOnce() -> std::io::Result<C>,
) -> std::io::Result<&mut C> {
    match cache.iter().position(|(k, _)| *k == key) {
        Some(i) => {
            let hit = cache.remove(i);
            cache.insert(0, hit);
        }
        None => {
            cache.insert(0, (key, make()?));
            cache.truncate(CONTEXTS);
        }
    }
    cache
        .first_mut()
        .map(|(_, c)| c)
        .ok_or_else(|| std::io::Error::other("no zstd context"))
}

fn compressor(level: i32, dict: Option<&Dict>) -> std::io::Result<zstd::bulk::Compressor<'static>> {
    use zstd::stream::raw::CParameter;
    let mut c = match dict {
        Some(d) => zstd::bulk::Compressor::with_dictionary(level, &d.bytes)?,
        None => zstd::bulk::Compressor::new(level)?,
    };
    c.set_parameter(CParameter::ContentSizeFlag(false))?;
    c.set_parameter(CParameter::DictIdFlag(false))?;
    Ok(c)
}

/// `bytes` compressed at `level` with `dict` (or none); `None` only if zstd fails, which
/// takes running out of memory.
pub fn compress(bytes: &[u8], level: i32, dict: Option<&Dict>) -> Option<Vec<u8>> {
    let key = (dict.map_or(0, |d| d.id), level);
    COMPRESSORS.with(|c| {
        let mut c = c.borrow_mut();
        front(&mut c, key, || compressor(level, dict))
            .ok()?
            .compress(bytes)
            .ok()
    })
}

/// The `len` bytes `z` holds, compressed with `dict` (or none).
pub fn decompress(z: &[u8], len: usize, dict: Option<&Dict>) -> Result<Vec<u8>, String> {
    let id = dict.map_or(0, |d| d.id);
    DECOMPRESSORS.with(|d| {
        let mut d = d.borrow_mut();
        front(&mut d, id, || match dict {
            Some(dict) => zstd::bulk::Decompressor::with_dictionary(&dict.bytes),
            None => zstd::bulk::Decompressor::new(),
        })
        .map_err(|e| e.to_string())?
        .decompress(z, len)
        .map_err(|e| e.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_come_back_with_and_without_a_dictionary_and_levels_do_not_mix_contexts() {
        let items: Vec<Vec<u8>> = (0..500)
            .map(|i| {
                format!(
                    "{{\"name\":\"pod-{i}\",\"labels\":{{\"app\":\"web\",\"tier\":\"{}\"}}}}",
                    i % 7
                )
                .into_bytes()
            })
            .collect();
        let dict = Dict::train(&items, 4 << 10).expect("a dictionary from 500 items");
        for level in [1, 3] {
            for d in [None, Some(&*dict)] {
                for item in &items {
                    let z = compress(item, level, d).unwrap();
                    assert_eq!(decompress(&z, item.len(), d).unwrap(), *item);
                }
            }
        }
        let alone: usize = items
            .iter()
            .map(|i| compress(i, 3, None).unwrap().len())
            .sum();
        let with: usize = items
            .iter()
            .map(|i| compress(i, 3, Some(&dict)).unwrap().len())
            .sum();
        assert!(with * 2 < alone, "with {with} vs alone {alone}");
        // Three keys used in turn (two dictionaries and none), past the contexts a thread
        // keeps: each item still comes back.
        let other = Dict::train(&items[250..], 2 << 10).expect("a second dictionary");
        for (i, item) in items.iter().enumerate() {
            let d = [Some(&*dict), Some(&*other), None][i % 3];
            let z = compress(item, 1 + (i % 2) as i32, d).unwrap();
            assert_eq!(decompress(&z, item.len(), d).unwrap(), *item);
        }
        // A wrong dictionary is an error or other bytes, never a panic.
        let z = compress(&items[0], 3, Some(&dict)).unwrap();
        assert_ne!(
            decompress(&z, items[0].len(), None).ok(),
            Some(items[0].clone())
        );
    }
}
