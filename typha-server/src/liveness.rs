//! Heartbeats: how the server's loops show they are making progress, for `/liveness`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// How stale a heartbeat may be before liveness fails.
pub const HEARTBEAT_MAX_AGE: Duration = Duration::from_secs(10);

/// A timestamp a loop bumps to show it is alive.
#[derive(Debug)]
pub struct Heartbeat {
    origin: Instant,
    millis: AtomicU64,
}

impl Heartbeat {
    /// A heartbeat that beats now.
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            origin: Instant::now(),
            millis: AtomicU64::new(0),
        })
    }

    /// Records a beat.
    pub fn beat(&self) {
        let ms = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.millis.store(ms, Ordering::Relaxed);
    }

    /// Time since the last beat.
    pub fn age(&self) -> Duration {
        let last = Duration::from_millis(self.millis.load(Ordering::Relaxed));
        self.origin.elapsed().saturating_sub(last)
    }
}
