//! [`StrMap`]: a small string-to-string map for labels, annotations and IPAM attributes.
//!
//! A `BTreeMap<String, String>` allocates a whole B-tree leaf (eleven slots, about 540 bytes)
//! for its first entry, and the resources a cluster has most of carry a few labels each: the
//! embedded store's workload endpoints and IPAM blocks (one map per allocation) spent more on
//! empty leaf slots than on their strings. A `StrMap` is a sorted `Vec` of pairs, sized to
//! fit: 48 bytes per entry beside the strings, and nothing at all when empty. Lookups are a
//! binary search; maps this small do not need more. It reads and writes as a JSON/YAML map,
//! keeping the last of duplicate keys as `BTreeMap` does.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A small sorted map of strings (see the module docs).
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StrMap {
    /// Sorted by key, keys unique, capacity equal to length.
    entries: Vec<(String, String)>,
}

impl StrMap {
    /// An empty map.
    pub const fn new() -> Self {
        Self {
            entries: Vec::new(),
        }
    }

    fn find(&self, key: &str) -> Result<usize, usize> {
        self.entries.binary_search_by(|(k, _)| k.as_str().cmp(key))
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&String> {
        self.find(key)
            .ok()
            .and_then(|i| self.entries.get(i))
            .map(|(_, v)| v)
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: &str) -> bool {
        self.find(key).is_ok()
    }

    /// Sets `key`, returning its previous value.
    pub fn insert(&mut self, key: String, value: String) -> Option<String> {
        match self.find(&key) {
            Ok(i) => self
                .entries
                .get_mut(i)
                .map(|(_, v)| std::mem::replace(v, value)),
            Err(i) => {
                self.entries.reserve_exact(1);
                self.entries.insert(i, (key, value));
                None
            }
        }
    }

    /// Removes `key`, returning its value.
    pub fn remove(&mut self, key: &str) -> Option<String> {
        let i = self.find(key).ok()?;
        let (_, v) = self.entries.remove(i);
        self.entries.shrink_to_fit();
        Some(v)
    }

    /// Keeps the entries `keep` says yes to.
    pub fn retain(&mut self, mut keep: impl FnMut(&String, &mut String) -> bool) {
        self.entries.retain_mut(|(k, v)| keep(k, v));
        self.entries.shrink_to_fit();
    }

    /// Entries in key order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&String, &String)> + ExactSizeIterator {
        self.entries.iter().map(|(k, v)| (k, v))
    }

    /// Keys in order.
    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &String> + ExactSizeIterator {
        self.entries.iter().map(|(k, _)| k)
    }

    /// Values in key order.
    pub fn values(&self) -> impl DoubleEndedIterator<Item = &String> + ExactSizeIterator {
        self.entries.iter().map(|(_, v)| v)
    }

    /// Entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The same entries as a `BTreeMap` (for the wire model, which uses one).
    pub fn to_btree(&self) -> BTreeMap<String, String> {
        self.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }
}

impl fmt::Debug for StrMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl FromIterator<(String, String)> for StrMap {
    /// Later duplicates replace earlier ones, as in a `BTreeMap`.
    fn from_iter<I: IntoIterator<Item = (String, String)>>(iter: I) -> Self {
        let mut entries: Vec<(String, String)> = iter.into_iter().collect();
        // Stable: among equal keys the last one written stays last, and is the one kept.
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        let mut out: Vec<(String, String)> = Vec::with_capacity(entries.len());
        for (k, v) in entries {
            match out.last_mut() {
                Some(last) if last.0 == k => last.1 = v,
                _ => out.push((k, v)),
            }
        }
        out.shrink_to_fit();
        Self { entries: out }
    }
}

impl<const N: usize> From<[(String, String); N]> for StrMap {
    fn from(pairs: [(String, String); N]) -> Self {
        pairs.into_iter().collect()
    }
}

impl From<BTreeMap<String, String>> for StrMap {
    fn from(m: BTreeMap<String, String>) -> Self {
        // Already sorted and unique.
        let mut entries: Vec<(String, String)> = m.into_iter().collect();
        entries.shrink_to_fit();
        Self { entries }
    }
}

impl From<StrMap> for BTreeMap<String, String> {
    fn from(m: StrMap) -> Self {
        m.entries.into_iter().collect()
    }
}

impl Extend<(String, String)> for StrMap {
    fn extend<I: IntoIterator<Item = (String, String)>>(&mut self, iter: I) {
        for (k, v) in iter {
            self.insert(k, v);
        }
    }
}

impl IntoIterator for StrMap {
    type Item = (String, String);
    type IntoIter = std::vec::IntoIter<(String, String)>;

    fn into_iter(self) -> Self::IntoIter {
        self.entries.into_iter()
    }
}

impl<'a> IntoIterator for &'a StrMap {
    type Item = (&'a String, &'a String);
    type IntoIter = std::iter::Map<
        std::slice::Iter<'a, (String, String)>,
        fn(&'a (String, String)) -> (&'a String, &'a String),
    >;

    fn into_iter(self) -> Self::IntoIter {
        self.entries.iter().map(|(k, v)| (k, v))
    }
}

impl std::ops::Index<&str> for StrMap {
    type Output = String;

    /// The value of `key`; panics if it is absent, as `BTreeMap`'s does (that is `Index`'s
    /// contract; code that may meet a missing key calls [`StrMap::get`]).
    #[allow(clippy::expect_used)]
    fn index(&self, key: &str) -> &String {
        self.get(key).expect("no entry found for key")
    }
}

impl Serialize for StrMap {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.len()))?;
        for (k, v) in self.iter() {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for StrMap {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = StrMap;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of strings to strings")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<StrMap, A::Error> {
                // The hint comes from the input: cap what it may reserve.
                let mut pairs = Vec::with_capacity(a.size_hint().unwrap_or(0).min(64));
                while let Some(kv) = a.next_entry::<String, String>()? {
                    pairs.push(kv);
                }
                Ok(pairs.into_iter().collect())
            }
        }
        d.deserialize_map(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(x: &str) -> String {
        x.to_owned()
    }

    #[test]
    fn behaves_like_a_btreemap() {
        let mut m = StrMap::new();
        let mut b = BTreeMap::new();
        for (k, v) in [("b", "1"), ("a", "2"), ("c", "3"), ("a", "4"), ("d", "5")] {
            assert_eq!(m.insert(s(k), s(v)), b.insert(s(k), s(v)));
        }
        assert_eq!(m.remove("c"), b.remove("c"));
        assert_eq!(m.remove("zz"), b.remove("zz"));
        assert_eq!(m.to_btree(), b);
        assert_eq!(m.get("a"), b.get("a"));
        assert!(m.contains_key("d") && !m.contains_key("c"));
        assert_eq!(m["b"], "1");
        assert_eq!(m.len(), 3);
        assert_eq!(m.keys().cloned().collect::<Vec<_>>(), ["a", "b", "d"]);
    }

    #[test]
    fn reads_and_writes_json_maps_keeping_the_last_duplicate() {
        let m: StrMap = serde_json::from_str(r#"{"z":"1","a":"2","z":"3"}"#).unwrap();
        assert_eq!(m.len(), 2);
        assert_eq!(m["z"], "3");
        assert_eq!(serde_json::to_string(&m).unwrap(), r#"{"a":"2","z":"3"}"#);
        assert!(serde_json::from_str::<StrMap>(r#"{"a":1}"#).is_err());
        assert!(serde_json::from_str::<StrMap>(r#"["a"]"#).is_err());
        let empty: StrMap = serde_json::from_str("{}").unwrap();
        assert!(empty.is_empty());
    }

    #[test]
    fn collects_keeping_the_last_of_equal_keys() {
        let m: StrMap = [(s("k"), s("1")), (s("j"), s("2")), (s("k"), s("3"))].into();
        assert_eq!(
            m.iter().collect::<Vec<_>>(),
            [(&s("j"), &s("2")), (&s("k"), &s("3"))]
        );
    }
}
