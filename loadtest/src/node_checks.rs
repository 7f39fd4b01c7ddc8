//! What a swarm's typha-client nodes check in what they are told, while it happens (`__swarm
//! --checks`, which `chaos` passes; its mixed churn is what makes the checks sound):
//!
//! - **wrongful deletion**, on every typha-client node: a deletion (a delta, or the sweep at
//!   the end of a resync snapshot) of a key that is not an ephemeral pod's. The mixed churn
//!   deletes nothing else, so such a deletion is the "Felix deleted all routes" failure: an
//!   agent tearing down what still exists. A string test per deletion.
//! - **older after newer**, on full-store nodes: per key, the revision of the last update
//!   delivered; an update (put or deletion) with a lower revision is an agent going back in
//!   time, such as a resume from a replica that is behind. The last revision of a deleted key
//!   is kept, so an old value coming back after its deletion counts too. Equal revisions are
//!   not a violation: the sweep of a resync delivers a deletion with the revision the key was
//!   stored at. Nor is a replica's re-list, which gives every item it changed the listing's
//!   revision (at or above the item's own): a later write has a higher revision still, and
//!   another replica's older revision of the same value is not delivered (the store drops an
//!   update that does not change the value).
//!
//! Light-store nodes see no snapshot contents and no sweep (they do not decode snapshots), so
//! for them only deltas are checked; lean nodes decode nothing and check neither.
//! Violations are counted for the swarm's progress and `done` lines, and the first few of each
//! kind are printed on stderr with the node, key and revisions.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};
use typha_protocol::model::{KeyPath, Revision, Update};

use crate::cluster::EPHEMERAL_MARKER;

/// Violations of each kind printed on stderr, per swarm.
const SHOWN: u64 = 5;

/// What a swarm's checks found, and how much they looked at (so that a run can show the
/// checks had something to check).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CheckCounts {
    /// Deletions of keys the churn never deletes (every typha-client node).
    pub(crate) wrongful_deletions: u64,
    /// Updates with a revision lower than the last for their key (full-store nodes).
    pub(crate) older_after_newer: u64,
    /// Deletions looked at (every typha-client node).
    pub(crate) deletions_checked: u64,
    /// Updates whose revision was compared (full-store nodes).
    pub(crate) revisions_checked: u64,
}

impl CheckCounts {
    /// As a swarm printed them (`{"checks": {...}}`); zero if absent.
    pub(crate) fn of(v: &serde_json::Value) -> CheckCounts {
        serde_json::from_value(v["checks"].clone()).unwrap_or_default()
    }

    /// Both added up.
    pub(crate) fn add(self, o: CheckCounts) -> CheckCounts {
        CheckCounts {
            wrongful_deletions: self.wrongful_deletions + o.wrongful_deletions,
            older_after_newer: self.older_after_newer + o.older_after_newer,
            deletions_checked: self.deletions_checked + o.deletions_checked,
            revisions_checked: self.revisions_checked + o.revisions_checked,
        }
    }

    /// Whether any violation was counted.
    pub(crate) fn violated(&self) -> bool {
        self.wrongful_deletions > 0 || self.older_after_newer > 0
    }
}

/// A swarm's checks, counted.
#[derive(Debug, Default)]
pub(crate) struct Violations {
    wrongful: AtomicU64,
    older: AtomicU64,
    deletions: AtomicU64,
    revisions: AtomicU64,
}

impl Violations {
    /// The counts so far.
    pub(crate) fn counts(&self) -> CheckCounts {
        CheckCounts {
            wrongful_deletions: self.wrongful.load(Ordering::Relaxed),
            older_after_newer: self.older.load(Ordering::Relaxed),
            deletions_checked: self.deletions.load(Ordering::Relaxed),
            revisions_checked: self.revisions.load(Ordering::Relaxed),
        }
    }

    fn wrongful_deletion(&self, node: &str, u: &Update) {
        let n = self.wrongful.fetch_add(1, Ordering::Relaxed);
        if n < SHOWN {
            eprintln!(
                "swarm: VIOLATION wrongful deletion #{}: node {node} was told to delete {} (revision {}), which the churn never deletes",
                n + 1,
                u.key,
                u.revision
            );
        }
    }

    fn older_after_newer(&self, node: &str, u: &Update, newer: Revision) {
        let n = self.older.fetch_add(1, Ordering::Relaxed);
        if n < SHOWN {
            eprintln!(
                "swarm: VIOLATION older after newer #{}: node {node} got {} of {} at revision {} after revision {newer}",
                n + 1,
                if u.value.is_some() {
                    "a value"
                } else {
                    "a deletion"
                },
                u.key,
                u.revision
            );
        }
    }
}

/// Whether `u` deletes a key the mixed churn never deletes.
pub(crate) fn wrongful(u: &Update) -> bool {
    u.value.is_none() && !u.key.as_str().contains(EPHEMERAL_MARKER)
}

/// Per key, the revision of the last update delivered (a full-store node's).
#[derive(Debug, Default)]
pub(crate) struct Order {
    last: HashMap<KeyPath, Revision>,
}

impl Order {
    /// Records `u`; if its revision is lower than the last one seen for its key, that one.
    pub(crate) fn observe(&mut self, u: &Update) -> Option<Revision> {
        match self.last.get_mut(&u.key) {
            Some(last) => {
                let before = std::mem::replace(last, u.revision);
                (u.revision < before).then_some(before)
            }
            None => {
                self.last.insert(u.key.clone(), u.revision);
                None
            }
        }
    }
}

/// One node's checks.
#[derive(Debug)]
pub(crate) struct NodeChecks {
    name: String,
    /// Full-store nodes only.
    order: Option<Order>,
    violations: Arc<Violations>,
}

impl NodeChecks {
    /// Checks for node `name`; `full`: it keeps the full store (and so sees every change,
    /// deduplicated, with its revision).
    pub(crate) fn new(name: String, full: bool, violations: Arc<Violations>) -> Self {
        NodeChecks {
            name,
            order: full.then(Order::default),
            violations,
        }
    }

    /// Checks one batch of updates, as the client delivered it.
    pub(crate) fn check(&mut self, updates: &[Update]) {
        let mut deletions = 0;
        for u in updates {
            if u.value.is_none() {
                deletions += 1;
                if wrongful(u) {
                    self.violations.wrongful_deletion(&self.name, u);
                }
            }
            if let Some(newer) = self.order.as_mut().and_then(|o| o.observe(u)) {
                self.violations.older_after_newer(&self.name, u, newer);
            }
        }
        let v = &self.violations;
        v.deletions.fetch_add(deletions, Ordering::Relaxed);
        if self.order.is_some() {
            v.revisions
                .fetch_add(updates.len() as u64, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests;
