//! The connection limits, as the accept loop and the connection tasks apply them.
//!
//! Every connection counts against [`Limits::all`] from the moment it is accepted (not once it
//! has finished TLS and its hello: in a reconnect storm thousands are accepted before the
//! first registers, and a limit checked against registered connections would let them all
//! in). A connection of our own protocol also counts against [`Limits::ours`] from the moment
//! its first bytes say so. The governor sets both (`governor::share`); without balancing both
//! are `TYPHA_MAXCONNECTIONSUPPERLIMIT`. The gauges `typha_connections_active` and
//! `typha_connections_limit{protocol}` follow them.
//!
//! A Calico client over the limit cannot be told (its protocol has no goodbye): it is counted
//! (`typha_calico_connections_refused_total{syncer}`) and logged ([`Refusals`]), then closed.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::governor::share::Limits;
use crate::metrics::Metrics;

/// Connections held against the limits.
#[derive(Debug)]
pub struct Slots {
    all: AtomicUsize,
    ours: AtomicUsize,
    max_all: AtomicUsize,
    max_ours: AtomicUsize,
    metrics: Arc<Metrics>,
}

/// One connection's place under the limits, given back when it is dropped (when the
/// connection's task ends).
#[derive(Debug)]
pub struct Slot {
    slots: Arc<Slots>,
    /// Also a place under [`Limits::ours`].
    ours: bool,
}

fn gauge(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Takes one from `used` if it is below `max`; the count after.
fn take(used: &AtomicUsize, max: &AtomicUsize) -> Option<usize> {
    used.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
        (n < max.load(Ordering::Relaxed)).then_some(n + 1)
    })
    .ok()
    .map(|n| n + 1)
}

impl Slots {
    /// No connection yet, these limits.
    pub fn new(limits: Limits, metrics: Arc<Metrics>) -> Arc<Self> {
        let s = Arc::new(Slots {
            all: AtomicUsize::new(0),
            ours: AtomicUsize::new(0),
            max_all: AtomicUsize::new(limits.all),
            max_ours: AtomicUsize::new(limits.ours),
            metrics,
        });
        s.show_limits(limits);
        s
    }

    fn show_limits(&self, l: Limits) {
        let [all, ours] = &self.metrics.connections_limit;
        all.set(gauge(l.all));
        ours.set(gauge(l.ours));
    }

    /// Connections held now (counted from accept), whatever their protocol.
    pub fn held(&self) -> usize {
        self.all.load(Ordering::Acquire)
    }

    /// The limits now.
    pub fn limits(&self) -> Limits {
        Limits {
            all: self.max_all.load(Ordering::Acquire),
            ours: self.max_ours.load(Ordering::Acquire),
        }
    }

    /// Sets the limits (connections already held stay); whether they changed.
    pub fn set(&self, l: Limits) -> bool {
        let all = self.max_all.swap(l.all, Ordering::AcqRel);
        let ours = self.max_ours.swap(l.ours, Ordering::AcqRel);
        self.show_limits(l);
        (all, ours) != (l.all, l.ours)
    }

    /// A place for a connection just accepted, or `None` at the limit of all connections.
    pub fn take(self: &Arc<Self>) -> Option<Slot> {
        let n = take(&self.all, &self.max_all)?;
        self.metrics.connections_active.set(gauge(n));
        Some(Slot {
            slots: self.clone(),
            ours: false,
        })
    }
}

impl Slot {
    /// The connection speaks our protocol: it takes a place under [`Limits::ours`] too;
    /// `false` at that limit (it is to be turned away).
    pub fn ours(&mut self) -> bool {
        if self.ours {
            return true;
        }
        self.ours = take(&self.slots.ours, &self.slots.max_ours).is_some();
        self.ours
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let s = &self.slots;
        if self.ours {
            s.ours.fetch_sub(1, Ordering::AcqRel);
        }
        let before = s.all.fetch_sub(1, Ordering::AcqRel);
        s.metrics
            .connections_active
            .set(gauge(before.saturating_sub(1)));
    }
}

/// How often a refusal is logged at most: in a reconnect storm thousands may be refused a
/// second, and one line says what the next ten seconds' would.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// The log of refusals at the connection limit: the first one logged at once, then at most
/// one line per `LOG_EVERY` (10 s) saying how many were not logged since.
#[derive(Debug, Default)]
pub struct Refusals {
    last: Mutex<Option<Instant>>,
    unlogged: AtomicU64,
}

impl Refusals {
    /// A refusal happened: `Some(n)` if it is to be logged, `n` the refusals not logged since
    /// the last line; `None` if it is only counted.
    pub fn note(&self) -> Option<u64> {
        let now = Instant::now();
        // One comparison under the lock: still consistent after a panic.
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if last.is_some_and(|t| now.duration_since(t) < LOG_EVERY) {
            self.unlogged.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        *last = Some(now);
        Some(self.unlogged.swap(0, Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_connection_counts_once_and_ours_also_against_their_own_limit() {
        let m = Metrics::unregistered();
        let slots = Slots::new(Limits { all: 3, ours: 1 }, m.clone());
        let a = slots.take().unwrap();
        let mut b = slots.take().unwrap();
        let mut c = slots.take().unwrap();
        assert!(slots.take().is_none(), "all three places are taken");
        assert_eq!(m.connections_active.get(), 3);
        assert!(b.ours());
        assert!(b.ours(), "asking again takes nothing more");
        assert!(!c.ours(), "one of ours at most");
        drop(b);
        assert!(c.ours(), "its place is free again");
        assert_eq!(slots.held(), 2);
        drop((a, c));
        assert_eq!((slots.held(), m.connections_active.get()), (0, 0));
        assert!(slots.set(Limits::flat(10)));
        assert!(!slots.set(Limits::flat(10)));
        assert_eq!(slots.limits(), Limits::flat(10));
        let [all, ours] = &m.connections_limit;
        assert_eq!((all.get(), ours.get()), (10, 10));
    }

    #[tokio::test(start_paused = true)]
    async fn refusals_are_logged_at_most_once_every_ten_seconds_with_the_count_in_between() {
        let r = Refusals::default();
        assert_eq!(r.note(), Some(0));
        assert_eq!(r.note(), None);
        assert_eq!(r.note(), None);
        tokio::time::advance(Duration::from_secs(9)).await;
        assert_eq!(r.note(), None);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(r.note(), Some(3), "three not logged since the first");
        assert_eq!(r.note(), None);
    }
}
