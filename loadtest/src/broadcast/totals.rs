//! What the broadcaster sent, in all (shared by its connections and its steady mode).

use std::sync::atomic::AtomicU64;

/// Counters of what the broadcaster sent.
#[derive(Debug, Default)]
pub(super) struct Totals {
    pub(super) connections: AtomicU64,
    pub(super) bytes: AtomicU64,
    pub(super) frames: AtomicU64,
    /// Steady mode: connections dropped for falling behind.
    pub(super) dropped: AtomicU64,
}
