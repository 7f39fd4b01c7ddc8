//! Entry points for typha-server's fuzz targets (`typha-server/fuzz/`, docs/fuzzing.md): the
//! decoders that read what a datastore or an operator hands the server, each followed by the
//! conversion, validation and key ownership the server runs on what they return
//! ([`Pipeline`]). Only built with this crate's `fuzzing` feature, which turns on
//! typha-server's: the server keeps its decoders private and shows them only through two
//! hooks behind that feature, `datastore::etcd::fuzz_item` and
//! `datastore::kubernetes::fuzz_convert`.
//!
//! Each panics on a violation of what the server relies on:
//! - nothing panics on the way, whatever the input;
//! - every value the pipeline sends decodes again under its key, and passes validation;
//! - deleting the resource afterwards deletes exactly the keys it produced: nothing is left
//!   behind, nothing else is touched.

use std::collections::BTreeSet;
use std::sync::Arc;

use typha_protocol::model::{KeyPath, Revision};
use typha_server::cache::pipeline::{Pipeline, validate};
use typha_server::calico::v3::{Resource, yaml_documents};
use typha_server::datastore::Item;

/// A key and a value as etcd holds them: the input is the key, a NUL byte, then the value
/// (no NUL: all key, empty value).
pub fn etcd_kv(data: &[u8]) {
    let (key, value) = match data.iter().position(|&b| b == 0) {
        Some(i) => (
            data.get(..i).unwrap_or_default(),
            data.get(i + 1..).unwrap_or_default(),
        ),
        None => (data, &[][..]),
    };
    if let Some(item) = typha_server::datastore::etcd::fuzz_item(key, value, 7) {
        check(item);
    }
}

/// A request body for the embedded store's write API, or a file of its manifest directory:
/// YAML or JSON documents, each a Calico v3 resource.
pub fn manifests(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(docs) = yaml_documents(text) else {
        return;
    };
    for doc in docs.into_iter().take(64) {
        let item =
            Resource::from_json(doc)
                .map(Arc::new)
                .map_err(|e| typha_server::datastore::Invalid {
                    id: None,
                    reason: e.to_string(),
                });
        check(item);
    }
}

/// An object as the Kubernetes API sends it: the first byte picks which of the watched
/// sources of the object's kind reads it (a node is read with and without host-local IPAM),
/// the rest is its JSON.
pub fn kube_object(data: &[u8]) {
    let Some((&which, object)) = data.split_first() else {
        return;
    };
    if let Some(item) = typha_server::datastore::kubernetes::fuzz_convert(which, object) {
        check(item);
    }
}

fn check(item: Item) {
    let mut p = Pipeline::default();
    let id = item.as_ref().ok().map(|r| r.id());
    let put = p.put(Revision(7), item);
    for c in &put {
        let key = c.key.key();
        if let Some(v) = &c.value {
            let value = v.decode_for(&key).unwrap_or_else(|e| {
                panic!(
                    "{}: the pipeline sent a value that does not decode: {e}",
                    c.key
                )
            });
            if let Err(e) = validate(&key, &value, v) {
                panic!("{}: the pipeline sent an invalid value: {e}", c.key);
            }
            assert_eq!(
                KeyPath::from(&key),
                c.key,
                "a key that does not print as itself"
            );
        }
    }
    if let Some(id) = id {
        let gone: BTreeSet<KeyPath> = p
            .delete(Revision(8), &id)
            .into_iter()
            .inspect(|c| assert!(c.value.is_none(), "a deletion with a value"))
            .map(|c| c.key)
            .collect();
        let keys: BTreeSet<KeyPath> = put.iter().map(|c| c.key.clone()).collect();
        assert_eq!(
            gone, keys,
            "deleting {id} did not delete exactly the keys it produced"
        );
    }
}
