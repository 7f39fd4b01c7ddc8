//! The Calico frames of a breadcrumb and a snapshot, decoded back as a client would.

// In tests a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use typha_protocol::calico::gob::Limits;
use typha_protocol::calico::{Compression, StreamDecoder, snappy};

use super::*;
use crate::calico::convert::convert;
use crate::calico::v3::Resource;
use typha_protocol::model::EncodedValue;

fn netset(net: &str) -> (KeyPath, EncodedValue) {
    let r = Resource::from_json(serde_json::json!({
        "apiVersion": "projectcalico.org/v3", "kind": "GlobalNetworkSet",
        "metadata": {"name": "n"}, "spec": {"nets": [net]}
    }))
    .unwrap();
    let (k, v) = convert(&r).unwrap().remove(0);
    (KeyPath::from(&k), EncodedValue::encode(&v))
}

/// The `MsgKVs` in `bytes` (a stream after the server preamble), decoded.
fn kvs(carriage: Carriage, bytes: &[u8]) -> Vec<SerializedUpdate> {
    let mut dec = StreamDecoder::new(Limits::CLIENT_INBOUND);
    let mut buf = bytes::BytesMut::from(&Side::Server.preamble()[..]);
    assert!(dec.decode(&mut buf).unwrap().is_none());
    if carriage == Carriage::Snappy {
        dec.restart(Compression::Snappy).unwrap();
        buf.extend_from_slice(snappy::STREAM_IDENTIFIER);
        buf.extend_from_slice(&snappy::encode_chunks(&Side::Server.preamble()));
    }
    buf.extend_from_slice(bytes);
    match dec.decode(&mut buf).unwrap() {
        Some(Message::Kvs(kvs)) => kvs,
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_breadcrumb_is_translated_against_the_values_before_it_and_encoded_once() {
    let m = Metrics::unregistered();
    let (key, old) = netset("10.0.0.0/8");
    let (_, new) = netset("10.2.0.0/16");
    // The key changes twice in one batch: the writer keeps, with each change, what the key
    // held just before it (after the deletion, the put is new, not an update of the value
    // before the batch).
    let deltas = [
        Update::delete(key.clone(), Revision(5)),
        Update::put(key.clone(), new, Revision(6), UpdateKind::New),
    ];
    let previous = [Some(Held::Plain(old)), None];
    let crumb = CalicoCrumb::default();
    for carriage in [Carriage::Plain, Carriage::Snappy] {
        let f = crumb
            .frame(&deltas, &previous, SyncerType::Felix, carriage, &m)
            .unwrap()
            .unwrap();
        let got = kvs(carriage, &f);
        assert_eq!(got.len(), 2);
        let types: Vec<_> = got.iter().map(|u| u.update_type).collect();
        assert_eq!(types, [UpdateType::Deleted, UpdateType::New]);
        assert!(got[0].value.is_empty());
        assert_eq!(got[1].revision, CalicoRevision::String("6".into()));
        assert!(
            std::str::from_utf8(&got[1].value)
                .unwrap()
                .contains("10.2.0.0/16")
        );
    }
    // Bgp receives no network sets: nothing to send.
    let none = crumb
        .frame(&deltas, &previous, SyncerType::Bgp, Carriage::Plain, &m)
        .unwrap();
    assert!(none.is_none());
    // Asked again: the same bytes, not encoded again.
    let n = m.encoded_count(FrameKind::calico_delta);
    let again = crumb
        .frame(&deltas, &previous, SyncerType::Felix, Carriage::Plain, &m)
        .unwrap();
    assert!(again.is_some());
    assert_eq!(m.encoded_count(FrameKind::calico_delta), n);
    assert_eq!(n, 2, "one plain, one snappy");
    assert_eq!(m.encode_error_count(FrameKind::calico_delta), 0);
}

/// An update is told from a new key by the previous value alone: with it, the change is
/// `Updated`; a value that does not decode (which the cache never holds) is treated as
/// missing, logged and counted, not skipped in silence.
#[test]
fn the_previous_value_makes_an_update_and_an_undecodable_one_is_counted() {
    let m = Metrics::unregistered();
    let (key, old) = netset("10.0.0.0/8");
    let (_, new) = netset("10.2.0.0/16");
    let deltas = [Update::put(
        key.clone(),
        new,
        Revision(6),
        UpdateKind::Updated,
    )];
    let f = CalicoCrumb::default()
        .frame(
            &deltas,
            &[Some(Held::Plain(old))],
            SyncerType::Felix,
            Carriage::Plain,
            &m,
        )
        .unwrap()
        .unwrap();
    let got = kvs(Carriage::Plain, &f);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].update_type, UpdateType::Updated);

    let garbage = Held::Plain(EncodedValue::from_bytes(bytes::Bytes::from_static(b"\xff")));
    let f = CalicoCrumb::default()
        .frame(
            &deltas,
            &[Some(garbage)],
            SyncerType::Felix,
            Carriage::Plain,
            &m,
        )
        .unwrap()
        .unwrap();
    let got = kvs(Carriage::Plain, &f);
    assert_eq!(got.len(), 1);
    assert_eq!(
        got[0].update_type,
        UpdateType::New,
        "the old value treated as missing"
    );
    assert_eq!(m.encode_error_count(FrameKind::calico_delta), 1);
}

#[test]
fn a_snapshot_is_sorted_by_calico_key_and_cut_into_messages() {
    let m = Metrics::unregistered();
    let entries: Vec<(KeyPath, Held)> = (0..250)
        .map(|i| {
            let r = Resource::from_json(serde_json::json!({
                "apiVersion": "projectcalico.org/v3", "kind": "GlobalNetworkSet",
                "metadata": {"name": format!("n{i}")}, "spec": {"nets": ["10.0.0.0/8"]}
            }))
            .unwrap();
            let (k, v) = convert(&r).unwrap().remove(0);
            (KeyPath::from(&k), Held::Plain(EncodedValue::encode(&v)))
        })
        .collect();
    let it = entries.iter().map(|(k, v)| (k, v, Revision(3)));
    let s = build(
        SyncerType::Felix,
        Carriage::Plain,
        (Seq(4), SyncStatus::InSync),
        it,
        &m,
    )
    .unwrap();
    // The 250 network sets and the built-in default-allow profile's two KVs.
    assert_eq!((s.kvs, s.frames.len()), (252, 3));
    let keys: Vec<String> = s
        .frames
        .iter()
        .flat_map(|f| kvs(Carriage::Plain, f))
        .map(|u| u.key)
        .collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted);
    assert!(
        keys.iter()
            .any(|k| k.ends_with("/profile/projectcalico-default-allow/rules"))
    );
    assert_eq!(m.encoded_count(FrameKind::calico_snapshot), 3);
}
