use std::collections::BTreeMap;

use proptest::prelude::*;
use typha_protocol::digest::StateDigest;
use typha_protocol::message::Epoch;
use typha_protocol::model::{Revision, SyncStatus, Update, UpdateKind, Value};

use super::breadcrumb::{KvMap, MAP_VERSIONS_KEPT};
use super::writer::CacheWriter;
use super::*;
use crate::calico::v3::{Kind, Resource, ResourceId};
use crate::datastore::{Item, Listing, WatchEvent};
use crate::metrics::Metrics;
use crate::syncer::SyncerEvent;

fn netset(name: &str, net: &str) -> Resource {
    Resource::from_json(serde_json::json!({
        "apiVersion": "projectcalico.org/v3", "kind": "GlobalNetworkSet",
        "metadata": {"name": name}, "spec": {"nets": [net]}
    }))
    .unwrap()
}

fn put(rev: u64, r: Resource) -> SyncerEvent {
    SyncerEvent::Change(WatchEvent::Put {
        revision: Revision(rev),
        item: Ok(r.into()),
    })
}

fn del(rev: u64, name: &str) -> SyncerEvent {
    SyncerEvent::Change(WatchEvent::Delete {
        revision: Revision(rev),
        id: ResourceId::global(Kind::GlobalNetworkSet, name),
    })
}

fn writer(cfg: CacheConfig) -> (CacheWriter, Arc<Cache>) {
    CacheWriter::new(cfg, Epoch(7), Metrics::unregistered())
}

/// Folds deltas into a map of path → value bytes.
fn fold(state: &mut BTreeMap<String, Vec<u8>>, deltas: &[Update]) {
    for u in deltas {
        match &u.value {
            Some(v) => state.insert(u.key.to_string(), v.as_bytes().to_vec()),
            None => state.remove(u.key.as_str()),
        };
    }
}

fn map_of(m: &KvMap) -> BTreeMap<String, Vec<u8>> {
    m.iter()
        .map(|(k, v)| (k.to_string(), v.value.bytes().to_vec()))
        .collect()
}

fn digest_of(state: &BTreeMap<String, Vec<u8>>) -> u64 {
    let mut d = StateDigest::new();
    for (k, v) in state {
        d.insert(k, v);
    }
    d.combined()
}

#[test]
fn batches_no_ops_and_status_on_the_last_breadcrumb() {
    let (mut w, cache) = writer(CacheConfig {
        max_batch: 3,
        ..CacheConfig::default()
    });
    w.handle(SyncerEvent::Status(SyncStatus::ResyncInProgress));
    let listing = Listing {
        revision: Revision(10),
        items: (0..7)
            .map(|i| Ok(netset(&format!("n{i}"), "10.0.0.0/8").into()))
            .collect::<Vec<Item>>()
            .into(),
    };
    w.handle(SyncerEvent::Resync(listing));
    w.handle(SyncerEvent::Status(SyncStatus::InSync));
    w.flush();
    // 7 updates in batches of at most 3: seq 1..=3; only the last is InSync.
    let crumbs = cache.after(Seq(0), 100).unwrap();
    assert_eq!(
        crumbs.iter().map(|c| c.deltas.len()).collect::<Vec<_>>(),
        [3, 3, 1]
    );
    assert_eq!(
        crumbs.iter().map(|c| c.status).collect::<Vec<_>>(),
        [
            SyncStatus::WaitForDatastore,
            SyncStatus::WaitForDatastore,
            SyncStatus::InSync
        ]
    );
    assert!(crumbs.iter().all(|c| c.revision == Revision(10)));
    // The same value again is skipped and counted; no breadcrumb.
    w.handle(put(11, netset("n0", "10.0.0.0/8")));
    w.flush();
    assert_eq!(cache.latest().seq, Seq(3));
    assert_eq!(cache.metrics.updates_skipped.get(), 1);
    // A change, then a delete of something absent (nothing).
    w.handle(put(12, netset("n0", "10.9.0.0/16")));
    w.handle(del(13, "nope"));
    w.flush();
    let latest = cache.latest();
    assert_eq!(latest.seq, Seq(4));
    assert_eq!(latest.deltas.len(), 1);
    assert_eq!(latest.deltas[0].kind, UpdateKind::Updated);
    // Every update the cache received counts (Typha's `typha_updates_total`): the seven
    // first, the skipped one and the change. The delete of an unknown resource never reached
    // the cache: the pipeline knew no keys for it.
    assert_eq!(cache.metrics.updates.get(), 9);
}

#[test]
fn resync_after_too_old_deletes_what_is_gone() {
    let (mut w, cache) = writer(CacheConfig::default());
    w.handle(put(1, netset("a", "10.0.0.0/8")));
    w.handle(put(2, netset("b", "10.1.0.0/16")));
    w.flush();
    w.handle(SyncerEvent::Resync(Listing {
        revision: Revision(5),
        items: vec![Ok(netset("b", "10.1.0.0/16").into())].into(),
    }));
    w.flush();
    let latest = cache.latest();
    assert_eq!(latest.kvs, 1);
    assert_eq!(latest.deltas.len(), 1);
    assert_eq!(latest.deltas[0].kind, UpdateKind::Deleted);
    assert!(latest.deltas[0].key.as_str().ends_with("/netset/a"));
}

fn node(name: &str, ip: &str) -> Resource {
    Resource::from_json(serde_json::json!({
        "apiVersion": "projectcalico.org/v3", "kind": "Node",
        "metadata": {"name": name}, "spec": {"bgp": {"ipv4Address": ip}}
    }))
    .unwrap()
}

#[test]
fn nodes_are_counted_as_changes_apply_not_by_scanning() {
    let (mut w, cache) = writer(CacheConfig::default());
    let m = cache.metrics.clone();
    w.handle(put(1, node("n1", "192.0.2.1/24")));
    w.handle(put(2, node("n2", "192.0.2.2/24")));
    w.handle(put(3, node("n3", "192.0.2.3/24")));
    w.handle(put(4, netset("a", "10.0.0.0/8")));
    w.flush();
    assert_eq!((w.nodes(), m.cluster_nodes.get()), (3, 3));
    // A changed node, the same node again (skipped), a deleted one.
    w.handle(put(5, node("n1", "192.0.2.9/24")));
    w.handle(put(6, node("n2", "192.0.2.2/24")));
    w.handle(SyncerEvent::Change(WatchEvent::Delete {
        revision: Revision(7),
        id: ResourceId::global(Kind::Node, "n3"),
    }));
    w.flush();
    assert_eq!((w.nodes(), m.cluster_nodes.get()), (2, 2));
    // A relist without n2: the resync deletes it.
    w.handle(SyncerEvent::Resync(Listing {
        revision: Revision(9),
        items: vec![
            Ok(node("n1", "192.0.2.9/24").into()),
            Ok(netset("a", "10.0.0.0/8").into()),
        ]
        .into(),
    }));
    w.flush();
    assert_eq!((w.nodes(), m.cluster_nodes.get()), (1, 1));
    assert_eq!(
        crate::governor::node_count(&cache),
        1,
        "the count a scan gives"
    );
}

#[test]
fn the_revision_and_the_digest_are_exported_exactly() {
    let (mut w, cache) = writer(CacheConfig::default());
    let m = cache.metrics.clone();
    w.handle(put(41, netset("a", "10.0.0.0/8")));
    w.handle(put(42, netset("b", "10.1.0.0/16")));
    w.flush();
    let latest = cache.latest();
    assert_eq!(m.state_revision.get(), 42);
    assert_ne!(latest.digest, 0);
    assert_eq!(
        m.state_digest.get(),
        super::writer::exported_digest(latest.digest)
    );
    // 52 bits: a float64 holds every such value exactly.
    assert_eq!(super::writer::exported_digest(u64::MAX), (1 << 52) - 1);
    let d = super::writer::exported_digest(u64::MAX - 1);
    assert_eq!(d as f64 as i64, d);
    assert_eq!(
        super::writer::exported_digest(0x0123_4567_89ab_cdef),
        0x3_4567_89ab_cdef
    );
}

#[test]
fn history_is_bounded_and_eviction_is_reported() {
    let (mut w, cache) = writer(CacheConfig {
        history_max: 5,
        ..CacheConfig::default()
    });
    for i in 0..20 {
        w.handle(put(i + 1, netset("a", &format!("10.{i}.0.0/16"))));
        w.flush();
    }
    assert_eq!(cache.latest().seq, Seq(20));
    assert!(cache.get(Seq(15)).is_none());
    assert!(cache.get(Seq(16)).is_some());
    assert_eq!(cache.after(Seq(10), 100).unwrap_err(), Evicted(Seq(11)));
    assert_eq!(cache.after(Seq(15), 100).unwrap().len(), 5);
    assert_eq!(cache.oldest_resumable(), Seq(15));
    assert!(cache.range(Seq(14), Seq(20)).is_none());
    assert_eq!(cache.range(Seq(15), Seq(20)).unwrap().len(), 5);
}

/// Breadcrumbs past the history's age go while nothing is published too (the writer's
/// one-second tick), all but the latest. On a paused clock: the ages are the clock's, not
/// how fast this machine runs the test.
#[tokio::test(start_paused = true)]
async fn the_history_ages_out_while_idle() {
    let (mut w, cache) = writer(CacheConfig {
        history_max_age: std::time::Duration::from_secs(120),
        ..CacheConfig::default()
    });
    for i in 0..5 {
        w.handle(put(i + 1, netset("a", &format!("10.{i}.0.0/16"))));
        w.flush();
    }
    tokio::time::advance(std::time::Duration::from_secs(119)).await;
    w.trim_idle();
    assert_eq!(cache.crumbs.read().unwrap().len(), 6, "young ones stay");
    tokio::time::advance(std::time::Duration::from_secs(2)).await;
    w.trim_idle();
    let crumbs = cache.crumbs.read().unwrap();
    assert_eq!(crumbs.len(), 1);
    assert_eq!(crumbs.front().unwrap().seq, Seq(5));
}

/// The fleet-wide resync of issue 38: after a quiet spell longer than the history's age, the
/// history holds only the latest breadcrumb; the next change pushes it out too. A Calico
/// client at that breadcrumb (pinned there) must still be given the change, translated as an
/// update of the value it held, without the map version before it.
#[tokio::test(start_paused = true)]
async fn after_a_quiet_spell_a_change_is_translated_for_calico_clients_from_its_breadcrumb() {
    use crate::cache::calico::Carriage;
    use crate::calico::libcalico::SyncerType;
    let (mut w, cache) = writer(CacheConfig {
        history_max_age: std::time::Duration::from_secs(120),
        ..CacheConfig::default()
    });
    w.handle(put(1, netset("a", "10.1.0.0/16")));
    w.handle(put(2, netset("b", "10.2.0.0/16")));
    w.flush();
    let at = cache.latest().seq;
    let pin = cache.pin(at);
    tokio::time::advance(std::time::Duration::from_secs(600)).await;
    w.trim_idle();
    w.handle(put(3, netset("a", "10.9.0.0/16")));
    w.handle(del(4, "b"));
    w.flush();
    let next = cache.latest();
    assert!(
        cache.get(at).is_none(),
        "the breadcrumb before has aged out"
    );
    assert!(cache.get(next.seq).is_some());
    let frame = next
        .calico_frame(
            SyncerType::Felix,
            Carriage::Plain,
            Driver::Etcd,
            &cache.metrics,
        )
        .unwrap()
        .expect("the change concerns felix clients");
    let mut dec = typha_protocol::calico::StreamDecoder::new(
        typha_protocol::calico::gob::Limits::CLIENT_INBOUND,
    );
    let mut buf =
        bytes::BytesMut::from(&typha_protocol::calico::messages::Side::Server.preamble()[..]);
    assert!(dec.decode(&mut buf).unwrap().is_none());
    buf.extend_from_slice(&frame);
    let Some(typha_protocol::calico::messages::Message::Kvs(kvs)) = dec.decode(&mut buf).unwrap()
    else {
        panic!("not a MsgKVs")
    };
    use typha_protocol::calico::messages::UpdateType;
    let got: Vec<(String, UpdateType)> =
        kvs.iter().map(|u| (u.key.clone(), u.update_type)).collect();
    assert_eq!(
        got,
        [
            ("/calico/v1/netset/a".to_string(), UpdateType::Updated),
            ("/calico/v1/netset/b".to_string(), UpdateType::Deleted),
        ]
    );
    assert!(String::from_utf8_lossy(&kvs[0].value).contains("10.9.0.0/16"));
    drop(pin);
}

/// A lagging Calico connection's pin keeps the breadcrumbs after its cursor past the history
/// limits, up to the pinned age; once released, the limits apply again.
#[test]
fn a_pin_keeps_what_a_lagging_connection_needs_until_it_is_released_or_too_old() {
    let (mut w, cache) = writer(CacheConfig {
        history_max: 5,
        pinned_max_age: std::time::Duration::from_secs(600),
        ..CacheConfig::default()
    });
    let step = |w: &mut CacheWriter, i: u64| {
        w.handle(put(i, netset("a", &format!("10.{}.0.0/16", i % 200))));
        w.flush();
    };
    step(&mut w, 1);
    step(&mut w, 2);
    let pin = cache.pin(Seq(2));
    for i in 3..=20 {
        step(&mut w, i);
    }
    // Everything after the pinned cursor is still there; before it, the limit applied.
    assert!(cache.get(Seq(3)).is_some());
    assert_eq!(cache.range(Seq(2), Seq(20)).unwrap().len(), 18);
    pin.set(Seq(10));
    step(&mut w, 21);
    assert!(cache.get(Seq(10)).is_none());
    assert!(cache.get(Seq(11)).is_some());
    drop(pin);
    step(&mut w, 22);
    assert!(cache.get(Seq(17)).is_none());
    assert_eq!(cache.after(Seq(17), 100).unwrap().len(), 5);

    // Pinned breadcrumbs older than the pinned age go all the same.
    let (mut w, cache) = writer(CacheConfig {
        history_max: 5,
        pinned_max_age: std::time::Duration::ZERO,
        ..CacheConfig::default()
    });
    let _pin = cache.pin(Seq(0));
    for i in 1..=20 {
        std::thread::sleep(std::time::Duration::from_millis(1));
        step(&mut w, i);
    }
    assert!(cache.get(Seq(15)).is_none());
}

#[test]
fn spans_carry_the_latest_value_of_each_changed_key() {
    let (mut w, cache) = writer(CacheConfig::default());
    for i in 0..32u64 {
        // Key "k{i%4}" changes 8 times; "gone" is created and deleted inside the span.
        w.handle(put(
            i + 1,
            netset(&format!("k{}", i % 4), &format!("10.{i}.0.0/16")),
        ));
        if i == 20 {
            w.handle(put(100, netset("gone", "10.0.0.0/8")));
        }
        if i == 22 {
            w.handle(del(101, "gone"));
        }
        w.flush();
    }
    let end = cache.get(Seq(32)).unwrap();
    let frame = cache.span_frame(&end, 16, Variant::all(false)).unwrap();
    let mut dec = typha_protocol::FrameDecoder::new(typha_protocol::Limits::CLIENT_INBOUND);
    let msg = dec
        .decode(&mut bytes::BytesMut::from(&frame[..]))
        .unwrap()
        .unwrap();
    let typha_protocol::Message::Deltas(d) = msg else {
        panic!()
    };
    assert_eq!(
        (d.from_seq, d.seq, d.digest),
        (Seq(16), Seq(32), end.digest)
    );
    assert_eq!(d.updates.len(), 5, "4 keys + the deletion of `gone`");
    // The state at 16, folded from the deltas (old breadcrumbs no longer keep their maps).
    let mut state = BTreeMap::new();
    for c in cache.range(Seq(0), Seq(16)).unwrap() {
        fold(&mut state, &c.deltas);
    }
    fold(&mut state, &d.updates);
    assert_eq!(state, map_of(&end.map().unwrap()));
    // Built once, shared.
    let again = cache.span_frame(&end, 16, Variant::all(false)).unwrap();
    assert_eq!(again.as_ptr(), frame.as_ptr());
    assert_eq!(
        cache.metrics.encoded_count(crate::metrics::FrameKind::span),
        1
    );
    // Not aligned: no span.
    assert!(
        cache
            .span_frame(&cache.get(Seq(31)).unwrap(), 16, Variant::all(false))
            .is_none()
    );
}

/// Random operations on a few keys (so values change, repeat and get deleted).
fn ops() -> impl Strategy<Value = Vec<(u8, Option<u8>)>> {
    prop::collection::vec((0u8..12, prop::option::weighted(0.8, 0u8..4)), 1..120)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any breadcrumb's map equals the fold of every delta up to it, and its digest equals a
    /// recomputation from that map.
    #[test]
    fn every_breadcrumb_is_the_fold_of_its_deltas(ops in ops(), batch in 1usize..6, flush_every in 1usize..8) {
        let (mut w, cache) = writer(CacheConfig { max_batch: batch, history_max: 10_000, ..CacheConfig::default() });
        for (i, (k, v)) in ops.iter().enumerate() {
            let rev = i as u64 + 1;
            match v {
                Some(v) => w.handle(put(rev, netset(&format!("k{k}"), &format!("10.{v}.0.0/16")))),
                None => w.handle(del(rev, &format!("k{k}"))),
            }
            if i % flush_every == 0 {
                w.flush();
            }
        }
        w.flush();
        let mut state = BTreeMap::new();
        let crumbs = cache.after(Seq(0), usize::MAX).unwrap();
        let total = crumbs.len();
        for (i, c) in crumbs.into_iter().enumerate() {
            // Only the newest breadcrumbs keep their map version.
            prop_assert_eq!(c.map().is_some(), i + MAP_VERSIONS_KEPT >= total);
            prop_assert!(c.deltas.len() <= batch);
            fold(&mut state, &c.deltas);
            if let Some(map) = c.map() {
                prop_assert_eq!(&state, &map_of(&map));
            }
            prop_assert_eq!(c.kvs, state.len());
            prop_assert_eq!(c.digest, digest_of(&state));
            for u in c.deltas.iter() {
                if let Some(v) = &u.value {
                    prop_assert!(matches!(v.decode().unwrap(), Value::NetworkSet(_)));
                }
            }
        }
    }
}

#[test]
fn the_batch_window_grows_with_the_streaming_clients_within_its_bounds() {
    let cfg = CacheConfig::default();
    let ms = |n| cfg.window(n).as_secs_f64() * 1000.0;
    assert_eq!(ms(0), 20.0, "the floor");
    assert_eq!(
        ms(100),
        20.0,
        "100 clients at 15,000 frames/s: 6.7 ms, under the floor"
    );
    assert!((ms(1_000) - 1000.0 / 15.0).abs() < 1e-6, "{}", ms(1_000));
    assert!((ms(1_200) - 80.0).abs() < 1e-6, "{}", ms(1_200));
    assert_eq!(ms(2_000), 100.0, "the ceiling");
    assert_eq!(ms(10_000), 100.0, "the ceiling");
    let fixed = CacheConfig {
        fanout_frames_per_sec: 0,
        ..CacheConfig::default()
    };
    assert_eq!(fixed.window(10_000), fixed.min_interval);
}

/// A BGPFilter, the first kind a protocol version 1 client does not know, as raw KVs (the
/// reader of the kind is not needed to test the views).
fn filter(rev: u64, name: &str, spec: Option<&str>) -> SyncerEvent {
    let key = typha_protocol::model::KeyPath::new(&format!(
        "/calico/resources/v3/projectcalico.org/bgpfilters/{name}"
    ))
    .unwrap();
    let value = spec.map(|s| {
        typha_protocol::model::EncodedValue::encode(&Value::Resource(
            typha_protocol::model::Resource {
                spec_json: s.into(),
                ..Default::default()
            },
        ))
    });
    SyncerEvent::Kvs(vec![Update {
        key,
        kind: if value.is_some() {
            UpdateKind::New
        } else {
            UpdateKind::Deleted
        },
        value,
        revision: Revision(rev),
    }])
}

fn decode_frame(frame: &bytes::Bytes) -> Vec<typha_protocol::Message> {
    let mut dec = typha_protocol::FrameDecoder::new(typha_protocol::Limits::CLIENT_INBOUND);
    let mut buf = bytes::BytesMut::from(&frame[..]);
    let mut out = Vec::new();
    while let Some(m) = dec.decode(&mut buf).unwrap() {
        out.push(m);
    }
    out
}

fn deltas_of(frame: &bytes::Bytes) -> typha_protocol::message::Deltas {
    match decode_frame(frame).pop() {
        Some(typha_protocol::Message::Deltas(d)) => d,
        other => panic!("{other:?}"),
    }
}

const V1: Variant = Variant {
    view: crate::fanout::View::V1,
    compress: false,
};

/// A client without `OPAQUE_KINDS` is sent the version 1 view: no key of a later kind in any
/// frame, and digests over its keys alone, so its own digest checks pass. Where the views do
/// not differ the frames are the very same bytes (encoded once for both).
#[test]
fn a_version_1_client_gets_frames_and_digests_without_later_kinds() {
    let (mut w, cache) = writer(CacheConfig::default());
    let steps: Vec<SyncerEvent> = vec![
        put(1, netset("a", "10.1.0.0/16")),
        filter(2, "f1", Some(r#"{"exportV4":[]}"#)),
        put(3, netset("b", "10.2.0.0/16")),
        filter(4, "f1", Some(r#"{"importV4":[]}"#)),
        filter(5, "f1", None),
        put(6, netset("c", "10.3.0.0/16")),
    ];
    for ev in steps {
        w.handle(ev);
        w.flush();
    }
    let (mut all, mut v1) = (BTreeMap::new(), BTreeMap::new());
    let mut shared = Vec::new();
    for seq in 1..=6 {
        let c = cache.get(Seq(seq)).unwrap();
        let (fa, f1) = (
            c.delta_frame(Variant::all(false), &cache.metrics),
            c.delta_frame(V1, &cache.metrics),
        );
        let (da, d1) = (deltas_of(&fa), deltas_of(&f1));
        fold(&mut all, &da.updates);
        fold(&mut v1, &d1.updates);
        assert!(d1.updates.iter().all(|u| u.key.in_v1()), "{seq}: {d1:?}");
        assert_eq!(da.digest, digest_of(&all), "{seq}");
        assert_eq!(d1.digest, digest_of(&v1), "{seq}");
        if fa.as_ptr() == f1.as_ptr() {
            shared.push(seq);
        }
    }
    assert_eq!(all.len(), 3);
    assert_eq!(v1, all, "the filter is gone at the end");
    // 1: before any filter; 6: after its deletion. 3 held one in the state, 2, 4, 5 changed it.
    assert_eq!(shared, [1, 6]);
    assert_eq!(cache.get(Seq(3)).unwrap().later_kvs, 1);
}

#[tokio::test]
async fn snapshots_and_buckets_of_the_version_1_view_leave_later_kinds_out() {
    let (mut w, cache) = writer(CacheConfig::default());
    w.handle(put(1, netset("a", "10.1.0.0/16")));
    w.handle(filter(2, "f1", Some("{}")));
    w.handle(filter(3, "f2", Some("{}")));
    w.handle(SyncerEvent::Status(SyncStatus::InSync));
    w.flush();
    let latest = cache.latest();
    assert_eq!((latest.kvs, latest.later_kvs), (3, 2));
    let snaps = snapshot::Snapshots::default();
    for (v, kvs, digest) in [
        (Variant::all(false), 3, latest.digest),
        (V1, 1, latest.digest_v1),
    ] {
        let s = snaps.full(&cache, v).await;
        let msgs: Vec<_> = s.frames.iter().flat_map(decode_frame).collect();
        let keys: Vec<_> = msgs
            .iter()
            .flat_map(|m| match m {
                typha_protocol::Message::SnapshotChunk(c) => c.updates.clone(),
                _ => vec![],
            })
            .collect();
        assert_eq!(keys.len(), kvs, "{v:?}");
        assert_eq!(s.kvs, kvs as u64);
        assert!(v.view == crate::fanout::View::All || keys.iter().all(|u| u.key.in_v1()));
        let mut state = BTreeMap::new();
        fold(&mut state, &keys);
        match (msgs.first(), msgs.last()) {
            (
                Some(typha_protocol::Message::SnapshotBegin(b)),
                Some(typha_protocol::Message::SnapshotEnd(e)),
            ) => {
                assert_eq!(b.kvs, kvs as u64);
                assert_eq!(e.digest, digest);
                assert_eq!(e.digest, digest_of(&state));
            }
            other => panic!("{other:?}"),
        }
        let b = snaps.buckets(&cache, v).await;
        assert_eq!(b.digest.combined(), digest);
        assert_eq!(b.counts.iter().sum::<u64>(), kvs as u64);
    }
    assert_ne!(latest.digest, latest.digest_v1);
}

/// Spans: one in which a later kind came and went is filtered (and its digest is the version 1
/// one); one without any is shared.
#[test]
fn spans_of_the_version_1_view_leave_later_kinds_out() {
    let (mut w, cache) = writer(CacheConfig::default());
    for i in 0..48u64 {
        w.handle(put(
            i + 1,
            netset(&format!("k{}", i % 4), &format!("10.{i}.0.0/16")),
        ));
        if i == 20 {
            w.handle(filter(100, "f", Some("{}")));
        }
        if i == 22 {
            w.handle(filter(101, "f", None));
        }
        w.flush();
    }
    let (e32, e48) = (cache.get(Seq(32)).unwrap(), cache.get(Seq(48)).unwrap());
    let (a32, v32) = (
        cache.span_frame(&e32, 16, Variant::all(false)).unwrap(),
        cache.span_frame(&e32, 16, V1).unwrap(),
    );
    assert_ne!(a32.as_ptr(), v32.as_ptr());
    let (da, d1) = (deltas_of(&a32), deltas_of(&v32));
    assert_eq!(da.updates.len(), 5, "4 keys + the deletion of the filter");
    assert_eq!(d1.updates.len(), 4);
    assert!(d1.updates.iter().all(|u| u.key.in_v1()));
    assert_eq!((da.digest, d1.digest), (e32.digest, e32.digest_v1));
    assert_eq!(e32.digest, e32.digest_v1, "no filter left at 32");
    let (a48, v48) = (
        cache.span_frame(&e48, 16, Variant::all(false)).unwrap(),
        cache.span_frame(&e48, 16, V1).unwrap(),
    );
    assert_eq!(a48.as_ptr(), v48.as_ptr());
}

/// A kept snapshot (Typha's reuse rule: young, though a newer breadcrumb exists) is not sent to
/// a resuming client that has applied newer changes than it holds: that client would go back
/// in time. Found by `loadtest chaos`: a restarted replica built frames right after its
/// listing and reused them for a client that had waited for its revision floor.
#[tokio::test]
async fn a_kept_snapshot_older_than_a_clients_floor_is_not_reused_for_it() {
    let (mut w, cache) = writer(CacheConfig::default());
    w.handle(put(1, netset("a", "10.1.0.0/16")));
    w.handle(SyncerEvent::Status(SyncStatus::InSync));
    w.flush();
    let snaps = snapshot::Snapshots::default();
    let v = Variant::all(false);
    let first = snaps.full(&cache, v).await;
    let first_buckets = snaps.buckets(&cache, v).await;
    w.handle(put(5, netset("a", "10.2.0.0/16")));
    w.flush();
    assert_eq!(cache.latest().revision, Revision(5));
    // Young enough to be reused by a client without a floor, or with an older one...
    assert!(Arc::ptr_eq(&first, &snaps.full(&cache, v).await));
    assert!(Arc::ptr_eq(
        &first,
        &snaps.full_from(&cache, v, Revision(1)).await
    ));
    let b = snaps.buckets_from(&cache, v, Revision(1)).await;
    assert!(Arc::ptr_eq(&first_buckets, &b));
    // ...but not by one that has applied revision 5: it gets the state at 5.
    assert_eq!(
        snaps.full_from(&cache, v, Revision(5)).await.crumb.revision,
        Revision(5)
    );
    assert_eq!(
        snaps
            .buckets_from(&cache, v, Revision(5))
            .await
            .crumb
            .revision,
        Revision(5)
    );
    // A floor the cache has not reached: the latest it has (no rebuild per client).
    let beyond = snaps.full_from(&cache, v, Revision(99)).await;
    assert_eq!(beyond.crumb.revision, Revision(5));
    assert!(Arc::ptr_eq(
        &beyond,
        &snaps.full_from(&cache, v, Revision(99)).await
    ));
}

/// Past its first training the writer holds long values compressed with a dictionary of the
/// map's own values: what it publishes (deltas, the map, the digest) is exactly what it was
/// without, through the load, changes, no-op rewrites and deletions after it.
#[test]
fn values_held_compressed_change_nothing_that_is_published() {
    use super::held::{FIRST_TRAINING, Held};
    let (mut w, cache) = writer(CacheConfig::default());
    let resources = crate::testing::sample_cluster(&typha_test_support::sample::Spec {
        nodes: 150,
        pods_per_node: 30,
        namespaces: 4,
        deployments_per_namespace: 3,
        policies: 10,
        seed: 3,
    });
    w.handle(SyncerEvent::Status(SyncStatus::ResyncInProgress));
    w.handle(SyncerEvent::Resync(Listing {
        revision: Revision(10),
        items: resources
            .iter()
            .map(|r| Ok(r.clone().into()))
            .collect::<Vec<Item>>()
            .into(),
    }));
    w.handle(SyncerEvent::Status(SyncStatus::InSync));
    w.flush();
    let mut state = BTreeMap::new();
    let mut seen = 0;
    let mut follow = |state: &mut BTreeMap<String, Vec<u8>>| {
        let crumbs = cache.crumbs.read().unwrap();
        let from = seen;
        for c in crumbs.iter().filter(|c| c.seq.0 > from) {
            fold(state, &c.deltas);
            seen = c.seq.0;
        }
    };
    follow(&mut state);
    let latest = cache.latest();
    assert!(latest.kvs > FIRST_TRAINING, "{} KVs", latest.kvs);
    let map = latest.map().unwrap();
    assert_eq!(map_of(&map), state);
    assert_eq!(latest.digest, digest_of(&state));
    let (held, plain): (usize, usize) = map.values().fold((0, 0), |(h, p), kv| {
        (h + kv.value.held_bytes(), p + kv.value.len())
    });
    assert!(
        map.values().any(|kv| matches!(kv.value, Held::Zstd { .. })),
        "long values are held compressed"
    );
    assert!(held * 3 < plain, "held {held} of {plain} bytes");

    // Changes after the training: rewrites of the same value are skipped, others published.
    let first_wep = resources
        .iter()
        .find(|r| r.kind() == Kind::WorkloadEndpoint)
        .unwrap()
        .clone();
    let seq = cache.latest().seq;
    w.handle(put(11, first_wep.clone()));
    w.flush();
    assert_eq!(cache.latest().seq, seq, "an unchanged value is no change");
    let mut changed = first_wep.clone();
    changed
        .metadata
        .labels
        .insert("loadtest".into(), "relabelled".into());
    w.handle(put(12, changed));
    w.handle(SyncerEvent::Change(WatchEvent::Delete {
        revision: Revision(13),
        id: resources[resources.len() / 2].id(),
    }));
    w.flush();
    follow(&mut state);
    let latest = cache.latest();
    assert_eq!(map_of(&latest.map().unwrap()), state);
    assert_eq!(latest.digest, digest_of(&state));
}

/// A listing gives each KV the revision of its own object (what Calico's clients are sent),
/// while the cache's revision and what our protocol sends stay the listing's: the datastore's
/// revision, which a resuming client's floor is compared with. A change that leaves the
/// value as it was (a no-op) keeps the revision of the last real change, as Typha does.
#[test]
fn a_listing_keeps_each_objects_own_revision_beside_the_datastores() {
    let (mut w, cache) = writer(CacheConfig::default());
    let versioned = |name: &str, net: &str, rv: u64| {
        let mut r = netset(name, net);
        r.metadata.resource_version = Some(rv.to_string());
        r
    };
    let listing = Listing {
        revision: Revision(50),
        items: vec![
            Ok(versioned("a", "10.1.0.0/16", 7).into()),
            Ok(versioned("b", "10.2.0.0/16", 31).into()),
        ]
        .into(),
    };
    w.handle(SyncerEvent::Resync(listing));
    w.flush();
    let crumb = cache.latest();
    assert_eq!(crumb.revision, Revision(50));
    let map = crumb.map().unwrap();
    let revs: Vec<(Revision, Revision)> = map
        .values()
        .map(|kv| (kv.revision, kv.object_revision))
        .collect();
    assert_eq!(
        revs,
        [(Revision(50), Revision(7)), (Revision(50), Revision(31))]
    );
    assert_eq!(&*crumb.object_revisions, &[Revision(7), Revision(31)]);
    assert!(crumb.deltas.iter().all(|u| u.revision == Revision(50)));

    // The same value again at a later revision: nothing changes, not even the revisions.
    w.handle(put(60, versioned("a", "10.1.0.0/16", 60)));
    // A real change, and a deletion (which carries no object revision).
    w.handle(put(61, versioned("b", "10.3.0.0/16", 61)));
    w.handle(del(62, "a"));
    w.flush();
    let crumb = cache.latest();
    assert_eq!(crumb.revision, Revision(62));
    assert_eq!(&*crumb.object_revisions, &[Revision(61), Revision(0)]);
    let map = crumb.map().unwrap();
    let b = map.values().next().unwrap();
    assert_eq!(
        (b.revision, b.object_revision),
        (Revision(61), Revision(61))
    );
}
