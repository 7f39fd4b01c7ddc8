//! What a lean node checks of the stream it is sent, sans-IO: the sequence chain and the
//! server's digest at its position, from a frame's header facts alone (see `facts`).
//!
//! Verified, per node:
//! - a snapshot is full-scope, nests in nothing, and carries exactly the KVs its begin announced
//!   (counted chunk by chunk); its end names the begin's seq, and that seq starts the chain;
//! - every Deltas frame starts where the node is (`from_seq` = the last `seq`) and does not go
//!   backwards; the first one of a delta resume names the position the node offered, in the
//!   same server epoch;
//! - the node's digest is the one the server announced at the node's position, so a node whose
//!   chain is whole ends with the digest the server reports for its final state.
//!
//! Not verified here: that the announced digest matches the values (only a full-store sample
//! node recomputes it), and anything about individual updates beyond their count.

use typha_protocol::message::{Cursor, Epoch, Resume, Seq};
use typha_protocol::model::SyncStatus;

/// How the server brought a node up to date after a connect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resumed {
    /// Only the missed deltas.
    Deltas,
    /// A full snapshot.
    Snapshot,
}

/// The stream disagrees with what the node holds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ChainError {
    /// Deltas that do not start where the node is: something was missed.
    #[error("gap: at {at:?} but deltas start from {from}")]
    Gap {
        /// Where the node is (none: nowhere yet, or another epoch's position).
        at: Option<Seq>,
        /// Where the deltas start.
        from: Seq,
    },
    /// Deltas that end before they start.
    #[error("deltas from {from} go back to {seq}")]
    Backwards {
        /// Start.
        from: Seq,
        /// End.
        seq: Seq,
    },
    /// A snapshot carried a different number of KVs than it announced.
    #[error("snapshot announced {announced} KVs but carried {carried}")]
    SnapshotCount {
        /// Announced.
        announced: u64,
        /// Carried.
        carried: u64,
    },
    /// A snapshot ended at another position than it began.
    #[error("snapshot began at {begin} but ended at {end}")]
    SnapshotSeq {
        /// The begin's seq.
        begin: Seq,
        /// The end's.
        end: Seq,
    },
    /// A message out of place.
    #[error("unexpected {0}")]
    Unexpected(&'static str),
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    seq: Seq,
    announced: u64,
    carried: u64,
}

/// One lean node's position and the server's digest there, across its sessions.
#[derive(Debug, Default)]
pub(crate) struct Chain {
    /// The last position fully reached.
    cursor: Option<Cursor>,
    /// The digest the server announced at `cursor`.
    digest: Option<u64>,
    /// The current session's epoch.
    epoch: Option<Epoch>,
    snapshot: Option<Pending>,
    /// This session's initial sync is done.
    caught_up: bool,
    server_status: Option<SyncStatus>,
}

impl Chain {
    /// What to offer the next server: the cursor (a lean node keeps no digest to offer).
    pub(crate) fn resume(&self) -> Option<Resume> {
        self.cursor.map(|c| Resume {
            cursor: Some(c),
            digest: None,
        })
    }

    /// The server's digest at the node's position, if it has one.
    pub(crate) fn digest(&self) -> Option<u64> {
        self.digest
    }

    /// The node's position.
    pub(crate) fn seq(&self) -> Option<Seq> {
        self.cursor.map(|c| c.seq)
    }

    /// A session with a server of `epoch` began.
    pub(crate) fn connected(&mut self, epoch: Epoch) {
        self.epoch = Some(epoch);
        self.snapshot = None;
        self.caught_up = false;
        self.server_status = None;
    }

    /// The session ended. Half a snapshot leaves no position to resume from.
    pub(crate) fn disconnected(&mut self) {
        if self.snapshot.take().is_some() {
            self.cursor = None;
            self.digest = None;
        }
        self.epoch = None;
        self.caught_up = false;
        self.server_status = None;
    }

    /// After an inconsistency: forget the position, so the next session starts from a
    /// snapshot.
    pub(crate) fn reset(&mut self) {
        self.disconnected();
        self.cursor = None;
        self.digest = None;
    }

    /// The server's sync status.
    pub(crate) fn status(&mut self, s: SyncStatus) {
        self.server_status = Some(s);
    }

    /// In sync: the server says so and this session's initial sync is done.
    pub(crate) fn in_sync(&self) -> bool {
        self.caught_up && self.server_status == Some(SyncStatus::InSync)
    }

    /// A snapshot begins (`full`: of every key).
    pub(crate) fn snapshot_begin(
        &mut self,
        seq: Seq,
        full: bool,
        kvs: u64,
    ) -> Result<(), ChainError> {
        if self.snapshot.is_some() {
            return Err(ChainError::Unexpected("a snapshot inside a snapshot"));
        }
        // A lean node never offers a digest, so a server has no reason to send it buckets;
        // and it could not check what a partial snapshot leaves.
        if !full {
            return Err(ChainError::Unexpected("a digest-bucket snapshot"));
        }
        self.snapshot = Some(Pending {
            seq,
            announced: kvs,
            carried: 0,
        });
        Ok(())
    }

    /// A snapshot chunk of `kvs` KVs.
    pub(crate) fn chunk(&mut self, kvs: u64) -> Result<(), ChainError> {
        let Some(p) = self.snapshot.as_mut() else {
            return Err(ChainError::Unexpected(
                "a snapshot chunk outside a snapshot",
            ));
        };
        p.carried = p.carried.saturating_add(kvs);
        Ok(())
    }

    /// A snapshot ends at `seq` with the server's `digest` there; `Some` if that completed
    /// this session's initial sync.
    pub(crate) fn snapshot_end(
        &mut self,
        seq: Seq,
        digest: u64,
    ) -> Result<Option<Resumed>, ChainError> {
        let Some(p) = self.snapshot.take() else {
            return Err(ChainError::Unexpected("a snapshot end outside a snapshot"));
        };
        if p.carried != p.announced {
            return Err(ChainError::SnapshotCount {
                announced: p.announced,
                carried: p.carried,
            });
        }
        if p.seq != seq {
            return Err(ChainError::SnapshotSeq {
                begin: p.seq,
                end: seq,
            });
        }
        self.reach(seq, digest)?;
        Ok((!std::mem::replace(&mut self.caught_up, true)).then_some(Resumed::Snapshot))
    }

    /// Deltas from `from` to `seq`, after which the server's digest is `digest`; `Some` if
    /// they completed this session's initial sync (a delta resume).
    pub(crate) fn deltas(
        &mut self,
        from: Seq,
        seq: Seq,
        digest: u64,
    ) -> Result<Option<Resumed>, ChainError> {
        if self.snapshot.is_some() {
            return Err(ChainError::Unexpected("deltas inside a snapshot"));
        }
        // A position of another epoch is no position here.
        let at = self
            .cursor
            .filter(|c| Some(c.epoch) == self.epoch)
            .map(|c| c.seq);
        if at != Some(from) {
            return Err(ChainError::Gap { at, from });
        }
        if seq < from {
            return Err(ChainError::Backwards { from, seq });
        }
        self.reach(seq, digest)?;
        Ok((!std::mem::replace(&mut self.caught_up, true)).then_some(Resumed::Deltas))
    }

    fn reach(&mut self, seq: Seq, digest: u64) -> Result<(), ChainError> {
        let Some(epoch) = self.epoch else {
            return Err(ChainError::Unexpected("data outside a session"));
        };
        self.cursor = Some(Cursor { epoch, seq });
        self.digest = Some(digest);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    const E: Epoch = Epoch(7);

    /// A node that synced by a snapshot of 3 KVs at seq 10 (digest 100).
    fn synced() -> Chain {
        let mut c = Chain::default();
        c.connected(E);
        c.snapshot_begin(Seq(10), true, 3).unwrap();
        c.chunk(2).unwrap();
        c.chunk(1).unwrap();
        assert_eq!(
            c.snapshot_end(Seq(10), 100).unwrap(),
            Some(Resumed::Snapshot)
        );
        c.status(SyncStatus::InSync);
        assert!(c.in_sync());
        c
    }

    #[test]
    fn a_whole_chain_ends_with_the_last_announced_digest() {
        let mut c = synced();
        assert_eq!(c.deltas(Seq(10), Seq(11), 111).unwrap(), None);
        assert_eq!(c.deltas(Seq(11), Seq(12), 122).unwrap(), None);
        // A coalesced span.
        assert_eq!(c.deltas(Seq(12), Seq(28), 128).unwrap(), None);
        assert_eq!((c.seq(), c.digest()), (Some(Seq(28)), Some(128)));
    }

    #[test]
    fn a_gap_is_detected() {
        let mut c = synced();
        c.deltas(Seq(10), Seq(11), 111).unwrap();
        // Seq 11 -> 12 went missing.
        assert_eq!(
            c.deltas(Seq(12), Seq(13), 133),
            Err(ChainError::Gap {
                at: Some(Seq(11)),
                from: Seq(12)
            })
        );
        // The first deltas after a snapshot must start at its seq.
        let mut c = synced();
        assert!(matches!(
            c.deltas(Seq(9), Seq(10), 1),
            Err(ChainError::Gap { .. })
        ));
        // And deltas never go backwards.
        let mut c = synced();
        assert!(matches!(
            c.deltas(Seq(10), Seq(9), 1),
            Err(ChainError::Backwards { .. })
        ));
    }

    #[test]
    fn a_node_with_a_gap_or_a_wrong_digest_does_not_end_with_the_servers_digest() {
        // The digest a node ends with is the one announced at its position: one frame short
        // (the last one missed) ends with the previous digest, not the server's.
        let mut whole = synced();
        let mut short = synced();
        for (from, to, d) in [(10, 11, 111), (11, 12, 122)] {
            whole.deltas(Seq(from), Seq(to), d).unwrap();
        }
        short.deltas(Seq(10), Seq(11), 111).unwrap();
        let server = 122;
        assert_eq!(whole.digest(), Some(server));
        assert_ne!(short.digest(), Some(server));
    }

    #[test]
    fn a_snapshot_must_carry_what_it_announced_and_end_where_it_began() {
        let mut c = Chain::default();
        c.connected(E);
        c.snapshot_begin(Seq(5), true, 3).unwrap();
        c.chunk(2).unwrap();
        assert_eq!(
            c.snapshot_end(Seq(5), 1),
            Err(ChainError::SnapshotCount {
                announced: 3,
                carried: 2
            })
        );
        let mut c = Chain::default();
        c.connected(E);
        c.snapshot_begin(Seq(5), true, 1).unwrap();
        c.chunk(1).unwrap();
        assert_eq!(
            c.snapshot_end(Seq(6), 1),
            Err(ChainError::SnapshotSeq {
                begin: Seq(5),
                end: Seq(6)
            })
        );
        // Out of place.
        let mut c = Chain::default();
        c.connected(E);
        assert!(c.chunk(1).is_err());
        assert!(c.snapshot_end(Seq(1), 1).is_err());
        assert!(c.snapshot_begin(Seq(1), false, 1).is_err());
        c.snapshot_begin(Seq(1), true, 1).unwrap();
        assert!(c.snapshot_begin(Seq(1), true, 1).is_err());
        assert!(c.deltas(Seq(1), Seq(2), 1).is_err());
    }

    #[test]
    fn a_delta_resume_must_name_the_offered_position_in_the_same_epoch() {
        let mut c = synced();
        c.deltas(Seq(10), Seq(11), 111).unwrap();
        c.disconnected();
        assert!(!c.in_sync());
        assert_eq!(c.resume().unwrap().cursor.unwrap().seq, Seq(11));
        // The same server again: the confirming empty deltas, then on.
        c.connected(E);
        assert_eq!(
            c.deltas(Seq(11), Seq(11), 111).unwrap(),
            Some(Resumed::Deltas)
        );
        c.deltas(Seq(11), Seq(12), 122).unwrap();
        // Another server (epoch): its seq 12 is not ours.
        c.disconnected();
        c.connected(Epoch(8));
        assert!(matches!(
            c.deltas(Seq(12), Seq(13), 1),
            Err(ChainError::Gap { at: None, .. })
        ));
        // Half a snapshot leaves nothing to resume from.
        let mut c = synced();
        c.disconnected();
        c.connected(E);
        c.snapshot_begin(Seq(20), true, 5).unwrap();
        c.disconnected();
        assert!(c.resume().is_none());
        assert_eq!(c.digest(), None);
    }
}
