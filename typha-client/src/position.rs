//! Where a client's store is, readable from outside its callbacks while it runs.
//!
//! The store publishes its combined digest and sequence number here after every frame it
//! has applied in full (a Deltas frame, or a snapshot's end): never in the middle of a
//! snapshot, so a reader never sees a half-applied state. A caller that watches many clients
//! at once (a load test comparing thousands of simulated nodes with the server while they
//! run, or a health endpoint) reads it without a lock and without a round trip through the
//! client's task.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use typha_protocol::message::Seq;

/// The last whole-frame state of a store: see the module documentation. Get one from
/// [`SyncClient::position`](crate::SyncClient::position).
#[derive(Debug, Default)]
pub struct Position {
    digest: AtomicU64,
    seq: AtomicU64,
    applied: AtomicBool,
    connected: AtomicBool,
}

impl Position {
    /// The combined state digest after the last frame applied (what
    /// [`Store::combined_digest`](crate::Store::combined_digest) returned then: computed from
    /// the values by a full store, as the server announced it by a light one); `None` before
    /// the first. It is kept across disconnects, as the store keeps its state.
    pub fn digest(&self) -> Option<u64> {
        self.applied
            .load(Ordering::Acquire)
            .then(|| self.digest.load(Ordering::Relaxed))
    }

    /// The sequence number reached by the last frame applied, in the epoch of the server
    /// that sent it; `None` before the first. Read separately from [`Position::digest`]: a
    /// frame applied between the two reads may make them disagree.
    pub fn seq(&self) -> Option<Seq> {
        self.applied
            .load(Ordering::Acquire)
            .then(|| Seq(self.seq.load(Ordering::Relaxed)))
    }

    /// Whether a session with a server is up now (past its handshake; the same moments as
    /// `typha_client_connected`, for a caller that decides on it: a metric is for reading,
    /// not for deciding).
    pub fn connected(&self) -> bool {
        self.connected.load(Ordering::Acquire)
    }

    pub(crate) fn set_connected(&self, up: bool) {
        self.connected.store(up, Ordering::Release);
    }

    pub(crate) fn publish(&self, digest: u64, seq: Seq) {
        self.digest.store(digest, Ordering::Relaxed);
        self.seq.store(seq.0, Ordering::Relaxed);
        self.applied.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_published_before_the_first_frame() {
        let p = Position::default();
        assert_eq!((p.digest(), p.seq()), (None, None));
        p.publish(0xabc, Seq(7));
        assert_eq!((p.digest(), p.seq()), (Some(0xabc), Some(Seq(7))));
        assert!(!p.connected(), "connected is the store's to say");
    }
}
