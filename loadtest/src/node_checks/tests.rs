//! The checks against a real client store fed as replicas feed it: the sequences a chaos run
//! produces, legitimate and not.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use typha_client::{Store, SyncerCallbacks};
use typha_protocol::digest::{BucketSet, KeyHash, StateDigest};
use typha_protocol::handshake::{Session, Side};
use typha_protocol::message::{
    Deltas, Epoch, Features, Message, ProtocolVersion, Seq, SnapshotBegin, SnapshotChunk,
    SnapshotEnd, SnapshotScope, SyncerType,
};
use typha_protocol::model::{
    EncodedValue, Key, KeyPath, SyncStatus, UpdateKind, Value, WorkloadEndpointKey,
};

use super::*;

/// A workload endpoint's key; `pod` may be an ephemeral pod's name.
fn key(pod: &str) -> KeyPath {
    KeyPath::from(&Key::WorkloadEndpoint(WorkloadEndpointKey {
        hostname: "node-1".into(),
        orchestrator: "k8s".into(),
        workload: format!("default/{pod}"),
        endpoint: "eth0".into(),
    }))
}

fn ephemeral(k: u32) -> String {
    format!("{EPHEMERAL_MARKER}{k}")
}

fn val(s: &str) -> EncodedValue {
    EncodedValue::encode(&Value::Config(s.into()))
}

/// A replica's cache: values with the revisions it holds them at.
#[derive(Debug, Clone, Default)]
struct Replica {
    epoch: u64,
    seq: u64,
    kvs: BTreeMap<KeyPath, (EncodedValue, Revision)>,
}

impl Replica {
    fn new(epoch: u64, kvs: &[(&str, &str, u64)]) -> Self {
        let mut r = Replica {
            epoch,
            seq: 1,
            ..Replica::default()
        };
        for (k, v, rev) in kvs {
            r.kvs.insert(key(k), (val(v), Revision(*rev)));
        }
        r
    }

    /// A change written to its cache (None: deleted), as the update it sends.
    fn change(&mut self, k: &str, v: Option<&str>, rev: u64) -> Update {
        let (k, rev) = (key(k), Revision(rev));
        match v {
            Some(v) => {
                self.kvs.insert(k.clone(), (val(v), rev));
                Update::put(k, val(v), rev, UpdateKind::Updated)
            }
            None => {
                self.kvs.remove(&k);
                Update::delete(k, rev)
            }
        }
    }

    fn digest(&self) -> u64 {
        let mut d = StateDigest::new();
        for (k, (v, _)) in &self.kvs {
            d.insert(k.as_str(), v.as_bytes());
        }
        d.combined()
    }
}

struct Cb(NodeChecks);

impl SyncerCallbacks for Cb {
    fn on_status_updated(&mut self, _: SyncStatus) {}
    fn on_updates(&mut self, updates: Vec<Update>) {
        self.0.check(&updates);
    }
}

/// A node: a real client store, its checks as the callbacks.
struct Node {
    store: Store,
    cb: Cb,
    violations: Arc<Violations>,
}

impl Node {
    fn new(full: bool) -> Node {
        let violations = Arc::new(Violations::default());
        Node {
            store: if full { Store::new() } else { Store::light() },
            cb: Cb(NodeChecks::new("sim-0".into(), full, violations.clone())),
            violations,
        }
    }

    /// (wrongful deletions, older after newer).
    fn counts(&self) -> (u64, u64) {
        let c = self.violations.counts();
        (c.wrongful_deletions, c.older_after_newer)
    }

    fn connect(&mut self, r: &Replica) {
        if self.store.is_connected() {
            self.store.disconnected(&mut self.cb);
        }
        let session = Session {
            version: ProtocolVersion::V1,
            syncer_type: SyncerType::Felix,
            epoch: Epoch(r.epoch),
            features: Features::ALL,
            peer_decodes_zstd: true,
            side: Side::Client,
        };
        self.store.connected(&session, &mut self.cb);
    }

    fn apply(&mut self, m: Message) {
        self.store.apply(m, &mut self.cb).unwrap();
    }

    /// Connects to `r` and takes its snapshot: all of it, or the buckets of `only`'s keys (a
    /// resume by digest).
    fn resync(&mut self, r: &Replica, only: Option<&[&str]>) {
        self.connect(r);
        let scope = match only {
            None => SnapshotScope::Full,
            Some(keys) => SnapshotScope::Buckets(
                BucketSet::new(
                    keys.iter()
                        .map(|k| KeyHash::of(key(k).as_str()).bucket())
                        .collect(),
                )
                .unwrap(),
            ),
        };
        let carried: Vec<Update> = r
            .kvs
            .iter()
            .filter(|(k, _)| match &scope {
                SnapshotScope::Buckets(set) => set.contains(KeyHash::of(k.as_str()).bucket()),
                _ => true,
            })
            .map(|(k, (v, rev))| Update::put(k.clone(), v.clone(), *rev, UpdateKind::New))
            .collect();
        self.apply(Message::SnapshotBegin(SnapshotBegin {
            seq: Seq(r.seq),
            scope,
            kvs: carried.len() as u64,
        }));
        self.apply(Message::SnapshotChunk(SnapshotChunk { updates: carried }));
        self.apply(Message::SnapshotEnd(SnapshotEnd {
            seq: Seq(r.seq),
            digest: r.digest(),
        }));
    }

    /// `r`'s next breadcrumb: these updates, already applied to `r`.
    fn deltas(&mut self, r: &mut Replica, updates: Vec<Update>) {
        r.seq += 1;
        self.apply(Message::Deltas(Deltas {
            from_seq: Seq(r.seq - 1),
            seq: Seq(r.seq),
            digest: r.digest(),
            updates,
        }));
    }
}

#[test]
fn the_sweep_of_an_ephemeral_pod_deleted_meanwhile_is_no_violation() {
    let e = ephemeral(3);
    let mut a = Replica::new(1, &[("web-1", "v1", 10), (&e, "e", 11)]);
    let mut node = Node::new(true);
    node.resync(&a, None);
    // The pod is deleted while the node is away; the next session's snapshot lacks it, and
    // the sweep deletes it with the revision the store held it at (11, not lower).
    a.change(&e, None, 12);
    a.seq += 1;
    node.resync(&a, None);
    assert!(node.store.get(key(&e).as_str()).is_none());
    assert_eq!(node.counts(), (0, 0));
    assert_eq!(
        node.violations.counts().deletions_checked,
        1,
        "the sweep was checked"
    );
    // A later delta deletes nothing else and writes forward.
    let u = a.change("web-1", Some("v2"), 13);
    node.deltas(&mut a, vec![u]);
    assert_eq!(node.counts(), (0, 0));
}

#[test]
fn deleting_what_still_exists_is_a_wrongful_deletion_by_sweep_or_delta() {
    let mut a = Replica::new(1, &[("web-1", "v1", 10), ("web-2", "v1", 11)]);
    let mut node = Node::new(true);
    node.resync(&a, None);
    // A replica that lost a key (a truncated listing, say) resyncs the node: the sweep
    // deletes it.
    let mut lossy = a.clone();
    lossy.epoch = 2;
    lossy.kvs.remove(&key("web-2"));
    node.resync(&lossy, None);
    assert_eq!(node.counts(), (1, 0));
    // A light node sees deltas only: one deleting a pod that exists counts there too.
    let mut light = Node::new(false);
    light.resync(&a, None);
    let u = a.change("web-1", None, 12);
    light.deltas(&mut a, vec![u]);
    assert_eq!(light.counts(), (1, 0));
}

#[test]
fn a_relisted_replicas_revisions_then_another_replicas_are_not_older() {
    // Replica B has watched all along: each item at its own revision. Replica A was
    // restarted and listed at revision 100: every item at 100.
    let e = ephemeral(1);
    let b0 = Replica::new(2, &[("web-1", "v1", 40), (&e, "e", 41)]);
    let a = Replica::new(1, &[("web-1", "v1", 100), (&e, "e", 100)]);
    let mut node = Node::new(true);
    node.resync(&a, None);
    // A is killed; the node resumes on B by digest. The states agree, but say B resends a
    // bucket anyway, or all of it: the same values at lower revisions are not delivered.
    let mut b = b0.clone();
    node.resync(&b, Some(&["web-1"]));
    node.resync(&b, None);
    assert_eq!(node.counts(), (0, 0));
    // Writes after the listing are above its revision, on any replica.
    let u = b.change("web-1", Some("v2"), 105);
    node.deltas(&mut b, vec![u]);
    let u = b.change(&e, None, 106);
    node.deltas(&mut b, vec![u]);
    assert_eq!(node.counts(), (0, 0));
    assert_eq!(node.store.len(), 1);
}

#[test]
fn a_resume_from_a_replica_that_is_behind_is_older_after_newer() {
    let mut a = Replica::new(1, &[("web-1", "v1", 40)]);
    let behind = a.clone();
    let mut node = Node::new(true);
    node.resync(&a, None);
    let u = a.change("web-1", Some("v2"), 105);
    node.deltas(&mut a, vec![u]);
    // The node fails over to a replica that has not seen revision 105 yet.
    let mut b = behind;
    b.epoch = 2;
    node.resync(&b, Some(&["web-1"]));
    assert_eq!(node.counts(), (0, 1));
    // B catches up: forward again, not counted a second time.
    let u = b.change("web-1", Some("v2"), 105);
    node.deltas(&mut b, vec![u]);
    assert_eq!(node.counts(), (0, 1));
}

#[test]
fn an_old_value_back_after_its_deletion_is_older_after_newer() {
    let e = ephemeral(7);
    let mut a = Replica::new(1, &[("web-1", "v1", 10), (&e, "e", 50)]);
    let behind = a.clone();
    let mut node = Node::new(true);
    node.resync(&a, None);
    let u = a.change(&e, None, 60);
    node.deltas(&mut a, vec![u]);
    assert_eq!(node.counts(), (0, 0), "the churn deletes ephemeral pods");
    let mut b = behind;
    b.epoch = 2;
    node.resync(&b, None);
    assert_eq!(
        node.counts(),
        (0, 1),
        "resurrected at 50 after its deletion at 60"
    );
}

#[test]
fn the_order_check_counts_only_lower_revisions() {
    let mut o = Order::default();
    let (k, v) = (key("web-1"), val("v"));
    assert_eq!(
        o.observe(&Update::put(
            k.clone(),
            v.clone(),
            Revision(5),
            UpdateKind::New
        )),
        None
    );
    assert_eq!(o.observe(&Update::delete(k.clone(), Revision(5))), None);
    assert_eq!(
        o.observe(&Update::put(
            k.clone(),
            v.clone(),
            Revision(9),
            UpdateKind::New
        )),
        None
    );
    assert_eq!(
        o.observe(&Update::put(k.clone(), v, Revision(8), UpdateKind::Updated)),
        Some(Revision(9))
    );
    assert_eq!(o.observe(&Update::delete(k, Revision(8))), None);
}
