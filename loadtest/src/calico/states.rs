//! What each server sends, checked before any fleet runs: every syncer type's state taken
//! with our Rust Calico-protocol client, against the libcalico translation of the generated
//! cluster and, with `--calico-typha`, against Calico's own Typha's.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use serde::Serialize;
use typha_client::calico::{self, CalicoHello, Until};
use typha_server::calico::libcalico::{SyncerType, builtin_kvs, calico_kvs};

use super::setup::{CalicoArgs, Target, start};
use crate::harness::Workdir;
use crate::store::{Store, StoreKind};

/// A Calico client's state: Calico key → value.
type Kvs = BTreeMap<String, Bytes>;

/// Takes a syncer type's whole state from a server with our Rust Calico-protocol client (the
/// hello calico-node sends, snappy offered), until the server says InSync.
pub(super) async fn dump(
    addr: &str,
    tls: Option<&Arc<rustls::ClientConfig>>,
    syncer: SyncerType,
) -> anyhow::Result<Kvs> {
    let hello = CalicoHello::calico_node("loadtest-check", syncer.as_str());
    let session = async {
        let conn = crate::raw::dial(addr, tls).await.context("connecting")?;
        let st = calico::run(conn, &hello, Until::InSync, Duration::from_secs(90)).await?;
        Ok::<_, anyhow::Error>(st.kvs.into_iter().map(|(k, v)| (k, v.value)).collect())
    };
    tokio::time::timeout(Duration::from_secs(600), session)
        .await
        .with_context(|| format!("{addr}: no InSync for {} within 600 s", syncer.as_str()))?
        .with_context(|| format!("{addr}: taking the {} state", syncer.as_str()))
}

/// (key count, a full node's digest) of a state.
pub(super) fn digest_of(kvs: &Kvs) -> (usize, String) {
    let d = crate::calico_node::state_digest(kvs.iter().map(|(k, v)| (k.as_str(), &v[..])));
    (kvs.len(), d)
}

/// How two states of one syncer type differ.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Diff {
    /// The syncer type.
    pub(crate) syncer: String,
    /// Keys in the first / the second.
    pub(crate) keys: (usize, usize),
    /// Keys with equal values in both.
    pub(crate) same: usize,
    /// Keys only the first has.
    pub(crate) only_first: Vec<String>,
    /// Keys only the second has.
    pub(crate) only_second: Vec<String>,
    /// Keys whose values differ: (key, first's value, second's value).
    pub(crate) differ: Vec<(String, String, String)>,
}

impl Diff {
    pub(super) fn equal(&self) -> bool {
        self.only_first.is_empty() && self.only_second.is_empty() && self.differ.is_empty()
    }
}

/// Compares two states key for key; values as JSON values when both are JSON (Calico's
/// raw-string keys, config and IPs, byte for byte).
fn diff(syncer: SyncerType, a: &Kvs, b: &Kvs) -> Diff {
    let json = |v: &[u8]| serde_json::from_slice::<serde_json::Value>(v).ok();
    let text = |v: &[u8]| String::from_utf8_lossy(v).into_owned();
    let mut d = Diff {
        syncer: syncer.as_str().into(),
        keys: (a.len(), b.len()),
        ..Diff::default()
    };
    for (k, va) in a {
        match b.get(k) {
            None => d.only_first.push(k.clone()),
            Some(vb) => {
                let same = va == vb || matches!((json(va), json(vb)), (Some(x), Some(y)) if x == y);
                if same {
                    d.same += 1;
                } else {
                    d.differ.push((k.clone(), text(va), text(vb)));
                }
            }
        }
    }
    d.only_second = b.keys().filter(|k| !a.contains_key(*k)).cloned().collect();
    d
}

/// The libcalico translation of the generated cluster, per syncer type.
fn translation(nodes: usize, pods: usize) -> anyhow::Result<Vec<(SyncerType, Kvs)>> {
    let spec = crate::cluster::cluster_spec(nodes, pods);
    let mut out: Vec<(SyncerType, Kvs)> =
        SyncerType::ALL.iter().map(|t| (*t, Kvs::new())).collect();
    for r in spec.resources() {
        for (key, value) in typha_server::calico::convert::convert(&r)
            .with_context(|| format!("converting {}", r.id()))?
        {
            for c in calico_kvs(&key, &value) {
                let Some(v) = c.value else { continue };
                for (t, kvs) in &mut out {
                    if c.syncers.contains(*t) {
                        kvs.insert(c.key.to_string(), v.clone());
                    }
                }
            }
        }
    }
    for (t, kvs) in &mut out {
        for c in builtin_kvs(*t) {
            if let Some(v) = c.value {
                kvs.insert(c.key.to_string(), v);
            }
        }
    }
    Ok(out)
}

/// Every syncer type's state from a server.
async fn dump_all(
    addr: &str,
    tls: Option<&Arc<rustls::ClientConfig>>,
) -> anyhow::Result<Vec<(SyncerType, Kvs)>> {
    let mut out = Vec::new();
    for t in SyncerType::ALL {
        out.push((t, dump(addr, tls, t).await?));
    }
    Ok(out)
}

/// What the states check found, before any fleet ran.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Checks {
    /// Our server against the libcalico translation of the generated cluster (empty where not
    /// checked: the Kubernetes datastore).
    pub(crate) ours_vs_translation: Vec<Diff>,
    /// Our server (first) against Calico's Typha (second), on the same datastore.
    pub(crate) ours_vs_calico_typha: Vec<Diff>,
}

/// Takes every syncer type's state from our server on the freshly seeded datastore (checked
/// against the translation) and, if given, from Calico's and then ours again, each started
/// alone, and compares the last two.
pub(super) async fn check_states(
    wd: &Workdir,
    a: &CalicoArgs,
    store: Option<&Store>,
    tls: Option<&Arc<rustls::ClientConfig>>,
) -> anyhow::Result<Checks> {
    let mut c = Checks::default();
    let server = start(wd, store, Target::Ours, "server-check", 1).await?;
    let ours = dump_all(&server.addr, tls).await?;
    server.quit().await?;
    if a.datastore != Some(StoreKind::Kubernetes) {
        for ((t, want), (_, got)) in translation(a.nodes, a.pods_per_node)?.iter().zip(&ours) {
            c.ours_vs_translation.push(diff(*t, got, want));
        }
    }
    if let Some(bin) = &a.calico_typha {
        // Calico's Typha initializes the datastore when it starts, as calico-node and
        // kube-controllers would have in a real cluster: it writes the three default tiers
        // and fills in ClusterInformation. Our server is asked again after it, so both are
        // compared on the same datastore.
        let theirs = start(wd, store, Target::Calico(bin), "calico-typha-check", 1).await?;
        let got = dump_all(&theirs.addr, tls).await?;
        theirs.quit().await?;
        let server = start(wd, store, Target::Ours, "server-check-after", 1).await?;
        let ours = dump_all(&server.addr, tls).await?;
        server.quit().await?;
        for ((t, o), (_, g)) in ours.iter().zip(&got) {
            c.ours_vs_calico_typha.push(diff(*t, o, g));
        }
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kvs(pairs: &[(&str, &str)]) -> Kvs {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Bytes::copy_from_slice(v.as_bytes())))
            .collect()
    }

    #[test]
    fn values_are_compared_as_json_and_raw_strings_byte_for_byte() {
        let a = kvs(&[
            ("/a", r#"{"x":1,"y":[1,2]}"#),
            ("/b", "10.0.0.1"),
            ("/c", r#"{"x":1}"#),
            ("/only-a", "true"),
        ]);
        let b = kvs(&[
            // The same JSON value, written differently.
            ("/a", r#"{ "y": [1, 2], "x": 1 }"#),
            ("/b", "10.0.0.1 "),
            ("/c", r#"{"x":2}"#),
            ("/only-b", "false"),
        ]);
        let d = diff(SyncerType::Felix, &a, &b);
        assert_eq!(d.keys, (4, 4));
        assert_eq!(d.only_first, vec!["/only-a".to_owned()]);
        assert_eq!(d.only_second, vec!["/only-b".to_owned()]);
        let differ: Vec<&str> = d.differ.iter().map(|(k, _, _)| k.as_str()).collect();
        // "10.0.0.1" is not JSON: a trailing space is a difference; {"x":1} vs {"x":2} too.
        assert_eq!(differ, ["/b", "/c"]);
        assert_eq!(d.same, 1);
        assert!(!d.equal());
        assert!(diff(SyncerType::Felix, &a, &a).equal());
    }
}
