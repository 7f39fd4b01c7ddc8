//! A Calico connection's state as the swarm keeps it: per key, the key's hash and a hash of
//! (key, value), in a sorted vector rather than a hash map.
//!
//! A swarm of 5,000 nodes holds one of these per connection: 5,000 felix states of 35,000
//! keys and as many bgp and tunnel-ip-allocation states of 5,000. A `HashMap<u64, u64>`
//! costs 17 bytes a bucket at a load of at most 7/8 and a power of two of buckets: 1.1 MB for
//! 35,000 keys. Sorted pairs cost 16 bytes a key: half. The price is a binary search per
//! update, which is small beside the snappy and gob a skimming node reads per update.
//!
//! An update of a key held is made in place (the churn's relabels). A key not held waits in
//! `pending` with the updates after it, and the pending keys are merged in (sorted, the
//! latest update of each kept, deletions dropped) when there are many of them, when the
//! session is in sync, and before a digest: a snapshot's keys arrive in an order of their
//! own, so sorting them in one by one would move the vector on every key.

/// Key hash → hash of (key, value).
#[derive(Debug, Default)]
pub(crate) struct KeyHashes {
    /// Sorted by key hash, each key once.
    sorted: Vec<(u64, u64)>,
    /// Keys not in `sorted`, in arrival order: the value's hash, or `None` for a deletion.
    pending: Vec<(u64, Option<u64>)>,
}

/// Fewest pending keys merged in at once while a session is taking its snapshot (or a
/// quarter of the keys held, if more): each merge moves every key held, so merges must be
/// rarer as the state grows.
const MERGE_AT: usize = 1024;

impl KeyHashes {
    /// Sets key `k`'s value hash, or deletes it (`None`).
    pub(crate) fn set(&mut self, k: u64, v: Option<u64>) {
        match (self.sorted.binary_search_by_key(&k, |e| e.0), v) {
            (Ok(i), Some(v)) => {
                if let Some(e) = self.sorted.get_mut(i) {
                    e.1 = v;
                }
            }
            // A key held is never also pending (a pending key was not held when it came,
            // and merging empties `pending`), so removing it here is the whole deletion.
            (Ok(i), None) => {
                self.sorted.remove(i);
            }
            (Err(_), v) => {
                self.pending.push((k, v));
                if self.pending.len() >= MERGE_AT.max(self.sorted.len() / 4) {
                    self.merge();
                }
            }
        }
    }

    /// Merges the pending keys in and gives back what the vectors do not use.
    pub(crate) fn merge(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let mut pending = std::mem::take(&mut self.pending);
        // Stable: a key's updates stay in arrival order, and the last one is kept.
        pending.sort_by_key(|e| e.0);
        let mut latest: Vec<(u64, u64)> = Vec::with_capacity(pending.len());
        let mut at = 0;
        while let Some(&(k, _)) = pending.get(at) {
            let run = pending
                .get(at..)
                .map_or(0, |r| r.iter().take_while(|e| e.0 == k).count());
            if let Some((_, Some(v))) = pending.get(at + run - 1) {
                latest.push((k, *v));
            }
            at += run;
        }
        drop(pending);
        let old = std::mem::take(&mut self.sorted);
        let mut merged = Vec::with_capacity(old.len() + latest.len());
        let (mut a, mut b) = (old.into_iter().peekable(), latest.into_iter().peekable());
        loop {
            let next = match (a.peek(), b.peek()) {
                (Some(x), Some(y)) if x.0 <= y.0 => a.next(),
                (Some(_), Some(_)) | (None, Some(_)) => b.next(),
                (Some(_), None) => a.next(),
                (None, None) => break,
            };
            merged.extend(next);
        }
        self.sorted = merged;
        self.pending = Vec::new();
    }

    /// Keys held (pending ones merged in first).
    pub(crate) fn len(&mut self) -> usize {
        self.merge();
        self.sorted.len()
    }

    /// The sum of the value hashes (pending ones merged in first).
    pub(crate) fn sum(&mut self) -> u64 {
        self.merge();
        self.sorted.iter().fold(0u64, |a, e| a.wrapping_add(e.1))
    }

    /// Forgets every key.
    pub(crate) fn clear(&mut self) {
        *self = Self::default();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::collections::HashMap;

    use super::*;

    /// A deterministic stream of sets and deletions over `keys` keys.
    fn ops(n: usize, keys: u64, seed: u64) -> Vec<(u64, Option<u64>)> {
        let mut x = seed;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        (0..n)
            .map(|_| {
                let k = next() % keys;
                let v = next();
                (k, (v % 7 != 0).then_some(v))
            })
            .collect()
    }

    #[test]
    fn holds_what_a_hash_map_holds_through_sets_deletions_and_merges() {
        // Few keys (updates in place and deletions of held keys) and many (snapshot-like
        // arrivals, merged several times), merged early, late or only at the end.
        for (n, keys) in [(10, 4), (5_000, 50), (20_000, 15_000), (3_000, 1 << 40)] {
            for seed in [1, 7, 99] {
                let mut want: HashMap<u64, u64> = HashMap::new();
                let mut got = KeyHashes::default();
                for (i, (k, v)) in ops(n, keys, seed).into_iter().enumerate() {
                    match v {
                        Some(v) => want.insert(k, v),
                        None => want.remove(&k),
                    };
                    got.set(k, v);
                    if i % 997 == 0 {
                        got.merge();
                    }
                }
                let sum = want.values().fold(0u64, |a, v| a.wrapping_add(*v));
                assert_eq!(got.len(), want.len(), "n {n} keys {keys} seed {seed}");
                assert_eq!(got.sum(), sum, "n {n} keys {keys} seed {seed}");
                assert!(got.sorted.windows(2).all(|w| w[0].0 < w[1].0));
                assert!(got.pending.is_empty());
            }
        }
    }

    #[test]
    fn a_key_set_and_deleted_before_a_merge_is_gone() {
        let mut h = KeyHashes::default();
        h.set(5, Some(1));
        h.set(5, Some(2));
        h.set(6, Some(3));
        h.set(5, None);
        assert_eq!((h.len(), h.sum()), (1, 3));
        // Held now: updated in place, deleted in place, set again as new.
        h.set(6, Some(4));
        assert_eq!((h.len(), h.sum()), (1, 4));
        h.set(6, None);
        h.set(6, Some(9));
        assert_eq!((h.len(), h.sum()), (1, 9));
    }
}
