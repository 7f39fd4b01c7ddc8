//! Back-off between failed attempts at the datastore.

use std::time::Duration;

/// Back-off between failed attempts: doubles from 100 ms to 5 s.
#[derive(Debug, Clone)]
pub struct Backoff {
    next: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self { next: Self::MIN }
    }
}

impl Backoff {
    const MIN: Duration = Duration::from_millis(100);
    const MAX: Duration = Duration::from_secs(5);

    /// The delay before the next attempt (and doubles the one after).
    pub fn next_delay(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(Self::MAX);
        d
    }

    /// Call after a success.
    pub fn reset(&mut self) {
        self.next = Self::MIN;
    }
}
