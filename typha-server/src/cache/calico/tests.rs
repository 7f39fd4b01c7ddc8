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
            .frame(
                &deltas,
                &previous,
                &[],
                (SyncerType::Felix, carriage, Driver::Etcd),
                &m,
            )
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
        .frame(
            &deltas,
            &previous,
            &[],
            (SyncerType::Bgp, Carriage::Plain, Driver::Etcd),
            &m,
        )
        .unwrap();
    assert!(none.is_none());
    // Asked again: the same bytes, not encoded again.
    let n = m.encoded_count(FrameKind::calico_delta);
    let again = crumb
        .frame(
            &deltas,
            &previous,
            &[],
            (SyncerType::Felix, Carriage::Plain, Driver::Etcd),
            &m,
        )
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
            &[],
            (SyncerType::Felix, Carriage::Plain, Driver::Etcd),
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
            &[],
            (SyncerType::Felix, Carriage::Plain, Driver::Etcd),
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
        (SyncerType::Felix, Carriage::Plain, Driver::Etcd),
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

/// The KVs of `r` as the cache holds them.
fn held(r: serde_json::Value) -> Vec<(KeyPath, Held)> {
    convert(&Resource::from_json(r).unwrap())
        .unwrap()
        .into_iter()
        .map(|(k, v)| (KeyPath::from(&k), Held::Plain(EncodedValue::encode(&v))))
        .collect()
}

/// key → (revision, V3ResourceVersion) of every KV of a snapshot.
fn revisions(s: &CalicoSnapshot) -> std::collections::BTreeMap<String, (String, String)> {
    s.frames
        .iter()
        .flat_map(|f| kvs(Carriage::Plain, f))
        .map(|u| {
            let CalicoRevision::String(rev) = u.revision else {
                panic!("{:?}", u.revision)
            };
            (u.key, (rev, u.v3_resource_version))
        })
        .collect()
}

/// Each KV carries the revision of the object it came from, as the driver Calico's clients
/// expect gives it: etcd's without a v3 resource version, Kubernetes' with one (none for
/// profiles made from namespaces and service accounts, whose revision is composed); the
/// built-in profile at revision 1 and no resource version; a deletion with neither.
#[test]
fn revisions_are_each_objects_own_as_calicos_driver_gives_them() {
    let m = Metrics::unregistered();
    let node_status = held(serde_json::json!({
        "apiVersion": "projectcalico.org/v3", "kind": "CalicoNodeStatus",
        "metadata": {"name": "status-1"},
        "spec": {"node": "node-1", "classes": ["Agent"], "updatePeriodSeconds": 10}
    }));
    let kns = held(serde_json::json!({
        "apiVersion": "projectcalico.org/v3", "kind": "Profile",
        "metadata": {"name": "kns.prod"},
        "spec": {"ingress": [{"action": "Allow"}], "egress": [{"action": "Allow"}],
                 "labelsToApply": {"pcns.projectcalico.org/name": "prod"}}
    }));
    let ksa = held(serde_json::json!({
        "apiVersion": "projectcalico.org/v3", "kind": "Profile",
        "metadata": {"name": "ksa.prod.default"},
        "spec": {"labelsToApply": {"pcsa.projectcalico.org/name": "default"}}
    }));
    let netset = held(serde_json::json!({
        "apiVersion": "projectcalico.org/v3", "kind": "GlobalNetworkSet",
        "metadata": {"name": "n"}, "spec": {"nets": ["10.0.0.0/8"]}
    }));
    let all: Vec<(KeyPath, Held, Revision)> =
        [(node_status, 11), (kns, 12), (ksa, 13), (netset, 14)]
            .into_iter()
            .flat_map(|(kvs, rev)| kvs.into_iter().map(move |(k, v)| (k, v, Revision(rev))))
            .collect();
    let snapshot = |syncer, driver| {
        let it = all.iter().map(|(k, v, r)| (k, v, *r));
        revisions(
            &build(
                (syncer, Carriage::Plain, driver),
                (Seq(1), SyncStatus::InSync),
                it,
                &m,
            )
            .unwrap(),
        )
    };
    let pair = |r: &str, v: &str| (r.to_owned(), v.to_owned());
    let status_key = "/calico/resources/v3/projectcalico.org/caliconodestatuses/status-1";
    let v3_profile = |n: &str| format!("/calico/resources/v3/projectcalico.org/profiles/{n}");
    let rules = |n: &str| format!("/calico/v1/policy/profile/{n}/rules");
    let labels = |n: &str| format!("/calico/v1/policy/profile/{n}/labels");
    let netset_key = "/calico/v1/netset/n";
    let default_allow = "projectcalico-default-allow";

    let etcd = snapshot(SyncerType::Felix, Driver::Etcd);
    assert_eq!(etcd[&rules("kns.prod")], pair("12", ""));
    assert_eq!(etcd[&labels("kns.prod")], pair("12", ""));
    assert_eq!(etcd[&v3_profile("kns.prod")], pair("12", ""));
    assert_eq!(etcd[&v3_profile("ksa.prod.default")], pair("13", ""));
    assert_eq!(etcd[netset_key], pair("14", ""));
    assert_eq!(etcd[&v3_profile(default_allow)], pair("1", ""));
    assert_eq!(etcd[&rules(default_allow)], pair("1", ""));
    let etcd = snapshot(SyncerType::NodeStatus, Driver::Etcd);
    assert_eq!(etcd[status_key], pair("11", ""));

    let kdd = snapshot(SyncerType::Felix, Driver::Kubernetes);
    assert_eq!(kdd[&rules("kns.prod")], pair("12/", ""));
    assert_eq!(kdd[&labels("kns.prod")], pair("12/", ""));
    assert_eq!(kdd[&v3_profile("kns.prod")], pair("12/", ""));
    assert_eq!(kdd[&rules("ksa.prod.default")], pair("/13", ""));
    assert_eq!(kdd[&v3_profile("ksa.prod.default")], pair("/13", ""));
    assert_eq!(kdd[netset_key], pair("14", ""));
    assert_eq!(kdd[&v3_profile(default_allow)], pair("1", ""));
    let kdd = snapshot(SyncerType::NodeStatus, Driver::Kubernetes);
    assert_eq!(kdd[status_key], pair("11", "11"));

    // A breadcrumb: the object's revision, not our protocol's; a deletion has none.
    let (key, value) = (all[0].0.clone(), all[0].1.encoded());
    let deltas = [
        Update::put(key.clone(), value, Revision(40), UpdateKind::New),
        Update::delete(key, Revision(41)),
    ];
    for driver in [Driver::Etcd, Driver::Kubernetes] {
        let f = CalicoCrumb::default()
            .frame(
                &deltas,
                &[None, Some(all[0].1.clone())],
                &[Revision(39), Revision(0)],
                (SyncerType::NodeStatus, Carriage::Plain, driver),
                &m,
            )
            .unwrap()
            .unwrap();
        let got: Vec<(CalicoRevision, String)> = kvs(Carriage::Plain, &f)
            .into_iter()
            .map(|u| (u.revision, u.v3_resource_version))
            .collect();
        let v3 = if driver == Driver::Kubernetes {
            "39"
        } else {
            ""
        };
        assert_eq!(
            got,
            [
                (CalicoRevision::String("39".into()), v3.to_owned()),
                (CalicoRevision::String(String::new()), String::new()),
            ],
            "{driver:?}"
        );
    }
}
