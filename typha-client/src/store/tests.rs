use typha_protocol::digest::{BucketSet, KeyHash};
use typha_protocol::handshake::Side;
use typha_protocol::message::{
    Deltas, Epoch, Features, ProtocolVersion, SnapshotBegin, SnapshotChunk, SnapshotEnd, SyncerType,
};
use typha_protocol::model::Value;

use super::*;

#[derive(Default)]
struct Rec {
    statuses: Vec<SyncStatus>,
    updates: Vec<Update>,
}

impl SyncerCallbacks for Rec {
    fn on_status_updated(&mut self, s: SyncStatus) {
        self.statuses.push(s);
    }
    fn on_updates(&mut self, u: Vec<Update>) {
        self.updates.extend(u);
    }
}

fn session(epoch: u64) -> Session {
    Session {
        version: ProtocolVersion::V1,
        syncer_type: SyncerType::Felix,
        epoch: Epoch(epoch),
        features: Features::ALL,
        peer_decodes_zstd: true,
        side: Side::Client,
    }
}

fn key(i: u32) -> KeyPath {
    KeyPath::new(&format!("/calico/v1/config/K{i}")).unwrap()
}

fn val(s: &str) -> EncodedValue {
    EncodedValue::encode(&Value::Config(s.into()))
}

fn put(i: u32, v: &str) -> Update {
    Update::put(key(i), val(v), Revision(u64::from(i)), UpdateKind::New)
}

/// The server side's digest of `kvs`.
fn digest(kvs: &[(u32, &str)]) -> u64 {
    let mut d = StateDigest::new();
    for (i, v) in kvs {
        d.insert(key(*i).as_str(), val(v).as_bytes());
    }
    d.combined()
}

fn snapshot(store: &mut Store, rec: &mut Rec, seq: u64, kvs: &[(u32, &str)]) -> Applied {
    store
        .apply(
            Message::SnapshotBegin(SnapshotBegin {
                seq: Seq(seq),
                scope: SnapshotScope::Full,
                kvs: kvs.len() as u64,
            }),
            rec,
        )
        .unwrap();
    store
        .apply(
            Message::SnapshotChunk(SnapshotChunk {
                updates: kvs.iter().map(|(i, v)| put(*i, v)).collect(),
            }),
            rec,
        )
        .unwrap();
    store
        .apply(
            Message::SnapshotEnd(SnapshotEnd {
                seq: Seq(seq),
                digest: digest(kvs),
            }),
            rec,
        )
        .unwrap()
}

#[test]
fn first_sync_reports_resync_then_in_sync() {
    let (mut s, mut rec) = (Store::new(), Rec::default());
    s.start(&mut rec);
    s.connected(&session(1), &mut rec);
    let a = snapshot(&mut s, &mut rec, 5, &[(1, "a"), (2, "b")]);
    assert_eq!(
        a,
        Applied {
            resumed: Some(ResumeKind::Snapshot),
            reached: Some(Seq(5))
        }
    );
    s.apply(Message::SyncStatus(SyncStatus::InSync), &mut rec)
        .unwrap();
    assert_eq!(
        rec.statuses,
        [
            SyncStatus::WaitForDatastore,
            SyncStatus::ResyncInProgress,
            SyncStatus::InSync
        ]
    );
    assert_eq!(rec.updates.len(), 2);
    assert!(rec.updates.iter().all(|u| u.kind == UpdateKind::New));
    assert_eq!(
        s.cursor(),
        Some(Cursor {
            epoch: Epoch(1),
            seq: Seq(5)
        })
    );
}

#[test]
fn kinds_are_recomputed_and_no_op_updates_dropped() {
    let (mut s, mut rec) = (Store::new(), Rec::default());
    s.connected(&session(1), &mut rec);
    snapshot(&mut s, &mut rec, 5, &[(1, "a")]);
    rec.updates.clear();
    let d = Deltas {
        from_seq: Seq(5),
        seq: Seq(6),
        digest: digest(&[(1, "b"), (2, "c")]),
        // The wire says New for key 1, but the consumer has it: Updated. A repeat of key 2's
        // value is not delivered twice. Deleting an absent key is not delivered.
        updates: vec![
            put(1, "b"),
            put(2, "c"),
            put(2, "c"),
            Update::delete(key(9), Revision(9)),
        ],
    };
    s.apply(Message::Deltas(d), &mut rec).unwrap();
    let kinds: Vec<_> = rec
        .updates
        .iter()
        .map(|u| (u.key.clone(), u.kind))
        .collect();
    assert_eq!(
        kinds,
        [(key(1), UpdateKind::Updated), (key(2), UpdateKind::New)]
    );
}

#[test]
fn a_snapshot_after_reconnect_deletes_what_the_server_no_longer_has() {
    let (mut s, mut rec) = (Store::new(), Rec::default());
    s.connected(&session(1), &mut rec);
    snapshot(&mut s, &mut rec, 5, &[(1, "a"), (2, "b"), (3, "c")]);
    s.apply(Message::SyncStatus(SyncStatus::InSync), &mut rec)
        .unwrap();
    s.disconnected(&mut rec);
    assert_eq!(rec.statuses.last(), Some(&SyncStatus::ResyncInProgress));
    assert_eq!(s.len(), 3, "state kept while disconnected");
    rec.updates.clear();
    s.connected(&session(2), &mut rec);
    snapshot(&mut s, &mut rec, 1, &[(1, "a"), (3, "z")]);
    let got: Vec<_> = rec
        .updates
        .iter()
        .map(|u| (u.key.clone(), u.kind))
        .collect();
    assert_eq!(
        got,
        [(key(3), UpdateKind::Updated), (key(2), UpdateKind::Deleted)]
    );
    assert_eq!(s.len(), 2);
}

#[test]
fn a_bucket_resync_sweeps_only_its_buckets() {
    let (mut s, mut rec) = (Store::new(), Rec::default());
    s.connected(&session(1), &mut rec);
    let kvs: Vec<(u32, &str)> = (0..50).map(|i| (i, "v")).collect();
    snapshot(&mut s, &mut rec, 1, &kvs);
    // The server dropped key 7 and changed key 8; it resends their buckets.
    let b7 = KeyHash::of(key(7).as_str()).bucket();
    let b8 = KeyHash::of(key(8).as_str()).bucket();
    let set = BucketSet::new(vec![b7, b8]).unwrap();
    let in_set: Vec<(u32, &str)> = kvs
        .iter()
        .copied()
        .filter(|(i, _)| *i != 7 && set.contains(KeyHash::of(key(*i).as_str()).bucket()))
        .map(|(i, v)| if i == 8 { (i, "w") } else { (i, v) })
        .collect();
    let after: Vec<(u32, &str)> = kvs
        .iter()
        .copied()
        .filter(|(i, _)| *i != 7)
        .map(|(i, v)| if i == 8 { (i, "w") } else { (i, v) })
        .collect();
    s.disconnected(&mut rec);
    s.connected(&session(2), &mut rec);
    rec.updates.clear();
    s.apply(
        Message::SnapshotBegin(SnapshotBegin {
            seq: Seq(9),
            scope: SnapshotScope::Buckets(set),
            kvs: in_set.len() as u64,
        }),
        &mut rec,
    )
    .unwrap();
    s.apply(
        Message::SnapshotChunk(SnapshotChunk {
            updates: in_set.iter().map(|(i, v)| put(*i, v)).collect(),
        }),
        &mut rec,
    )
    .unwrap();
    let a = s
        .apply(
            Message::SnapshotEnd(SnapshotEnd {
                seq: Seq(9),
                digest: digest(&after),
            }),
            &mut rec,
        )
        .unwrap();
    assert_eq!(a.resumed, Some(ResumeKind::Digest));
    let got: Vec<_> = rec
        .updates
        .iter()
        .map(|u| (u.key.clone(), u.kind))
        .collect();
    assert_eq!(
        got,
        [(key(8), UpdateKind::Updated), (key(7), UpdateKind::Deleted)]
    );
    assert_eq!(s.len(), 49);
}

#[test]
fn gaps_and_digest_mismatches_are_errors() {
    let (mut s, mut rec) = (Store::new(), Rec::default());
    s.connected(&session(1), &mut rec);
    snapshot(&mut s, &mut rec, 5, &[(1, "a")]);
    let gap = Deltas {
        from_seq: Seq(6),
        seq: Seq(7),
        digest: 0,
        updates: vec![],
    };
    assert_eq!(
        s.apply(Message::Deltas(gap), &mut rec),
        Err(StoreError::Gap {
            at: Seq(5),
            from: Seq(6)
        })
    );
    let wrong = Deltas {
        from_seq: Seq(5),
        seq: Seq(6),
        digest: 12345,
        updates: vec![put(2, "b")],
    };
    assert!(matches!(
        s.apply(Message::Deltas(wrong), &mut rec),
        Err(StoreError::DigestMismatch { .. })
    ));
    let bad_count = SnapshotBegin {
        seq: Seq(9),
        scope: SnapshotScope::Full,
        kvs: 3,
    };
    s.apply(Message::SnapshotBegin(bad_count), &mut rec)
        .unwrap();
    assert!(matches!(
        s.apply(
            Message::SnapshotEnd(SnapshotEnd {
                seq: Seq(9),
                digest: 0
            }),
            &mut rec
        ),
        Err(StoreError::SnapshotCount { .. })
    ));
}

#[test]
fn resume_by_deltas_starts_at_the_cursor_and_an_interrupted_snapshot_drops_it() {
    let (mut s, mut rec) = (Store::new(), Rec::default());
    s.connected(&session(1), &mut rec);
    snapshot(&mut s, &mut rec, 5, &[(1, "a")]);
    s.disconnected(&mut rec);
    s.connected(&session(1), &mut rec);
    let confirm = Deltas {
        from_seq: Seq(5),
        seq: Seq(5),
        digest: digest(&[(1, "a")]),
        updates: vec![],
    };
    assert_eq!(
        s.apply(Message::Deltas(confirm), &mut rec).unwrap().resumed,
        Some(ResumeKind::Deltas)
    );
    // A snapshot cut in the middle: the cursor no longer describes the state.
    s.apply(
        Message::SnapshotBegin(SnapshotBegin {
            seq: Seq(20),
            scope: SnapshotScope::Full,
            kvs: 2,
        }),
        &mut rec,
    )
    .unwrap();
    s.apply(
        Message::SnapshotChunk(SnapshotChunk {
            updates: vec![put(4, "x")],
        }),
        &mut rec,
    )
    .unwrap();
    s.disconnected(&mut rec);
    let r = s.resume().unwrap();
    assert_eq!(r.cursor, None);
    assert_eq!(r.digest.unwrap().combined(), s.digest().combined());
}

#[test]
fn a_light_store_checks_the_chain_and_remembers_the_announced_digest() {
    let (mut s, mut rec) = (Store::light(), Rec::default());
    s.connected(&session(1), &mut rec);
    snapshot(&mut s, &mut rec, 5, &[(1, "a"), (2, "b")]);
    assert_eq!(s.len(), 0, "keeps no values");
    assert_eq!(s.combined_digest(), digest(&[(1, "a"), (2, "b")]));
    let d = Deltas {
        from_seq: Seq(5),
        seq: Seq(6),
        digest: 99,
        updates: vec![put(3, "c")],
    };
    s.apply(Message::Deltas(d), &mut rec).unwrap();
    assert_eq!(s.combined_digest(), 99);
    assert_eq!(rec.updates.len(), 3);
    let gap = Deltas {
        from_seq: Seq(7),
        seq: Seq(8),
        digest: 0,
        updates: vec![],
    };
    assert!(matches!(
        s.apply(Message::Deltas(gap), &mut rec),
        Err(StoreError::Gap { .. })
    ));
    let r = s.resume().unwrap();
    assert_eq!((r.cursor.unwrap().seq, r.digest), (Seq(6), None));
}

#[test]
fn a_light_store_may_skip_snapshot_chunks_but_only_inside_a_snapshot() {
    let (mut s, mut rec) = (Store::light(), Rec::default());
    s.connected(&session(1), &mut rec);
    assert!(s.skip_chunk().is_err(), "outside a snapshot");
    s.apply(
        Message::SnapshotBegin(SnapshotBegin {
            seq: Seq(3),
            scope: SnapshotScope::Full,
            kvs: 2,
        }),
        &mut rec,
    )
    .unwrap();
    s.skip_chunk().unwrap();
    s.apply(
        Message::SnapshotEnd(SnapshotEnd {
            seq: Seq(3),
            digest: 42,
        }),
        &mut rec,
    )
    .unwrap();
    assert_eq!(s.combined_digest(), 42);
    assert_eq!(s.cursor().unwrap().seq, Seq(3));
    let mut full = Store::new();
    full.connected(&session(1), &mut rec);
    assert!(full.skip_chunk().is_err(), "a full store must decode");
}

/// A key of a kind this build does not know (a newer server's) is kept, counted in the digest
/// as the server counts it, swept and deleted like any other, but never delivered.
#[test]
fn keys_of_unknown_kinds_count_in_the_digest_but_are_never_delivered() {
    // Decoded from the wire, as a client receives it.
    let opaque = KeyPath::from_wire("/calico/resources/v3/projectcalico.org/widgets/w1").unwrap();
    // An opaque value is never decoded either: any bytes do.
    let blob = EncodedValue::from_bytes(bytes::Bytes::from_static(&[0xff, 0x00, 0x42]));
    let (mut s, mut rec) = (Store::new(), Rec::default());
    s.connected(&session(1), &mut rec);
    snapshot(&mut s, &mut rec, 5, &[(1, "a")]);
    rec.updates.clear();

    let mut server = StateDigest::new();
    server.insert(key(1).as_str(), val("a").as_bytes());
    server.insert(opaque.as_str(), blob.as_bytes());
    s.apply(
        Message::Deltas(Deltas {
            from_seq: Seq(5),
            seq: Seq(6),
            digest: server.combined(),
            updates: vec![Update::put(
                opaque.clone(),
                blob.clone(),
                Revision(6),
                UpdateKind::New,
            )],
        }),
        &mut rec,
    )
    .expect("the digest counts the opaque entry");
    assert!(rec.updates.is_empty(), "{:?}", rec.updates);
    assert_eq!((s.len(), s.opaque_len(), s.iter().count()), (2, 1, 1));
    assert_eq!(s.get(opaque.as_str()), Some(&blob));

    // A snapshot without it sweeps it, silently.
    snapshot(&mut s, &mut rec, 7, &[(1, "a")]);
    assert!(rec.updates.is_empty(), "{:?}", rec.updates);
    assert_eq!((s.len(), s.opaque_len()), (1, 0));
}

#[test]
fn the_revision_floor_is_the_highest_revision_applied() {
    let (mut s, mut rec) = (Store::new(), Rec::default());
    assert_eq!(s.revision_floor(), None, "nothing applied yet");
    s.start(&mut rec);
    s.connected(&session(1), &mut rec);
    snapshot(&mut s, &mut rec, 5, &[(7, "a"), (3, "b")]);
    assert_eq!(s.revision_floor(), Some(Revision(7)));
    // A deletion carries the revision it happened at: it counts too.
    s.apply(
        Message::Deltas(Deltas {
            from_seq: Seq(5),
            seq: Seq(6),
            digest: digest(&[(7, "a")]),
            updates: vec![Update::delete(key(3), Revision(12))],
        }),
        &mut rec,
    )
    .unwrap();
    assert_eq!(s.revision_floor(), Some(Revision(12)));
    // A frame that does not follow on is refused, and its revisions do not count.
    let gap = s.apply(
        Message::Deltas(Deltas {
            from_seq: Seq(9),
            seq: Seq(10),
            digest: 0,
            updates: vec![put(40, "x")],
        }),
        &mut rec,
    );
    assert!(gap.is_err());
    assert_eq!(s.revision_floor(), Some(Revision(12)));
}

#[test]
fn the_position_is_published_after_whole_frames_only() {
    let (mut s, mut rec) = (Store::new(), Rec::default());
    let position = std::sync::Arc::new(Position::default());
    s.publish_to(position.clone());
    s.connected(&session(1), &mut rec);
    s.apply(
        Message::SnapshotBegin(SnapshotBegin {
            seq: Seq(5),
            scope: SnapshotScope::Full,
            kvs: 1,
        }),
        &mut rec,
    )
    .unwrap();
    s.apply(
        Message::SnapshotChunk(SnapshotChunk {
            updates: vec![put(1, "a")],
        }),
        &mut rec,
    )
    .unwrap();
    assert_eq!(position.digest(), None, "not in the middle of a snapshot");
    s.apply(
        Message::SnapshotEnd(SnapshotEnd {
            seq: Seq(5),
            digest: digest(&[(1, "a")]),
        }),
        &mut rec,
    )
    .unwrap();
    assert_eq!(position.digest(), Some(digest(&[(1, "a")])));
    s.apply(
        Message::Deltas(Deltas {
            from_seq: Seq(5),
            seq: Seq(6),
            digest: digest(&[(1, "a"), (2, "b")]),
            updates: vec![put(2, "b")],
        }),
        &mut rec,
    )
    .unwrap();
    assert_eq!(
        (position.digest(), position.seq()),
        (Some(digest(&[(1, "a"), (2, "b")])), Some(Seq(6)))
    );
    // A second watcher gets the state at once.
    let late = std::sync::Arc::new(Position::default());
    s.publish_to(late.clone());
    assert_eq!(late.seq(), Some(Seq(6)));
}
