//! Whether the server's view of its datastore is current.
//!
//! The feed (the syncer over a datastore, or the upstream feed of a tier) says when the view
//! was confirmed current ([`Freshness::confirmed`]: a listing, a watch event, a bookmark or
//! progress notification, a successful probe of an idle watch; for a tier, a connected
//! upstream that is not stale itself) and when talking to the datastore failed
//! ([`Freshness::failed`]). Past [`Freshness::threshold`] without a confirmation the view is
//! **stale**: the cache still serves what it has (consistent, maybe old), and says so on
//! `/status`, `/readiness`, in metrics, in one log line each way, and to clients that
//! understand [`typha_protocol::message::Staleness`].

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::warn;
use typha_protocol::message::{Message, Staleness};

use crate::fanout::encode;

/// What is known about the datastore, at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    /// Whether the last attempt to talk to the datastore succeeded.
    pub connected: bool,
    /// How long ago the view was last confirmed current; `None` before the first time.
    pub confirmed_age: Option<Duration>,
    /// Whether it is stale: confirmed once, not for longer than the threshold since.
    pub stale: bool,
    /// The last failure, until a success clears it.
    pub last_error: Option<String>,
}

impl View {
    /// The view as the protocol's message says it.
    pub fn to_message(&self) -> Staleness {
        Staleness::new(
            self.stale,
            self.confirmed_age.unwrap_or_default(),
            self.last_error.as_deref().unwrap_or_default(),
        )
    }
}

#[derive(Debug, Default)]
struct State {
    confirmed: Option<Instant>,
    failing: bool,
    last_error: Option<String>,
    /// For a tier: the upstream's own staleness, when it last said, and when it said it.
    upstream: Option<(Staleness, Instant)>,
}

/// A change of the view, as [`Freshness::monitor`] publishes it.
#[derive(Debug, Clone, Default)]
pub struct Published {
    /// Whether it turned stale (or current again).
    pub stale: bool,
    /// The [`Staleness`] frame saying so, encoded once for every client.
    pub frame: Bytes,
}

/// The shared record of the datastore view's freshness. One per server; the feed writes it,
/// health, metrics and connections read it.
#[derive(Debug)]
pub struct Freshness {
    threshold: Duration,
    state: Mutex<State>,
    /// The last change published by [`Freshness::monitor`].
    published: watch::Sender<Published>,
}

impl Freshness {
    /// A record with nothing confirmed yet; stale after `threshold` without a confirmation.
    pub fn new(threshold: Duration) -> Arc<Self> {
        Arc::new(Self {
            threshold,
            state: Mutex::new(State::default()),
            published: watch::channel(Published::default()).0,
        })
    }

    /// How long a view may go unconfirmed before it is stale.
    pub fn threshold(&self) -> Duration {
        self.threshold
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Every critical section assigns plain fields: consistent even if poisoned.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The view was confirmed current just now.
    pub fn confirmed(&self) {
        let mut s = self.lock();
        s.confirmed = Some(Instant::now());
        s.failing = false;
        s.last_error = None;
    }

    /// Talking to the datastore failed. Returns whether this is the first failure since the
    /// last success (worth a log line; the retries that follow are not).
    pub fn failed(&self, error: &dyn std::fmt::Display) -> bool {
        let mut s = self.lock();
        let first = !s.failing;
        s.failing = true;
        s.last_error = Some(error.to_string());
        first
    }

    /// For a tier: what the upstream says of its own view (`None`: it has not said).
    pub fn relay(&self, upstream: Option<Staleness>) {
        self.lock().upstream = upstream.map(|u| (u, Instant::now()));
    }

    /// The view now.
    pub fn view(&self) -> View {
        let s = self.lock();
        let now = Instant::now();
        let mut age = s.confirmed.map(|c| now.duration_since(c));
        let mut last_error = s.last_error.clone();
        let mut stale = age.is_some_and(|a| a > self.threshold);
        if let Some((u, at)) = s.upstream.as_ref().filter(|(u, _)| u.stale) {
            // Stale upstream: our view is as old as its view, whatever our connection does.
            let theirs = u.age() + now.duration_since(*at);
            age = Some(age.map_or(theirs, |a| a.max(theirs)));
            stale = true;
            if last_error.is_none() {
                last_error = Some(format!("upstream: {}", u.reason));
            }
        }
        View {
            connected: !s.failing,
            confirmed_age: age,
            stale,
            last_error,
        }
    }

    /// Wakes when the view turns stale or current again.
    pub fn subscribe(&self) -> watch::Receiver<Published> {
        self.published.subscribe()
    }

    /// Watches the view until the process ends: when it turns stale or current again it logs
    /// one line and publishes the change to [`Freshness::subscribe`]rs; every tick (4 a
    /// second) it calls `on_tick` (for gauges).
    pub async fn monitor(self: Arc<Self>, on_tick: impl Fn(&View) + Send + 'static) {
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        loop {
            tick.tick().await;
            let v = self.view();
            on_tick(&v);
            let was = self.published.borrow().stale;
            if v.stale == was {
                continue;
            }
            let age = v.confirmed_age.unwrap_or_default();
            if v.stale {
                warn!(
                    age = ?age,
                    threshold = ?self.threshold,
                    error = v.last_error.as_deref().unwrap_or("none"),
                    "datastore view is stale: not confirmed current for longer than the threshold; serving what the cache has"
                );
            } else {
                warn!("datastore view is current again");
            }
            let frame = encode(&Message::Staleness(v.to_message()), false);
            self.published.send_replace(Published {
                stale: v.stale,
                frame,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn stale_only_after_the_threshold_without_a_confirmation() {
        let f = Freshness::new(Duration::from_secs(10));
        // Never confirmed: not stale (not synced either), not connected once it fails.
        assert!(!f.view().stale);
        assert!(f.failed(&"connection refused"));
        assert!(
            !f.failed(&"connection refused"),
            "a retry is not a first failure"
        );
        let v = f.view();
        assert!(!v.connected && !v.stale && v.confirmed_age.is_none());

        f.confirmed();
        let v = f.view();
        assert!(v.connected && !v.stale && v.last_error.is_none());
        assert!(f.failed(&"etcd watch: connection refused"));
        tokio::time::advance(Duration::from_secs(9)).await;
        assert!(!f.view().stale, "within the threshold");
        tokio::time::advance(Duration::from_secs(2)).await;
        let v = f.view();
        assert!(v.stale && !v.connected);
        assert_eq!(v.confirmed_age, Some(Duration::from_secs(11)));
        assert_eq!(
            v.last_error.as_deref(),
            Some("etcd watch: connection refused")
        );
        let m = v.to_message();
        assert!(m.stale && m.age_millis == 11_000 && m.reason.contains("refused"));

        f.confirmed();
        assert!(!f.view().stale);
    }

    #[tokio::test(start_paused = true)]
    async fn a_tier_is_as_stale_as_its_upstream() {
        let f = Freshness::new(Duration::from_secs(10));
        f.confirmed();
        f.relay(Some(Staleness::new(
            true,
            Duration::from_secs(30),
            "etcd down",
        )));
        tokio::time::advance(Duration::from_secs(2)).await;
        f.confirmed();
        let v = f.view();
        assert!(v.stale, "our own link is fine, the upstream's view is not");
        assert_eq!(v.confirmed_age, Some(Duration::from_secs(32)));
        assert_eq!(v.last_error.as_deref(), Some("upstream: etcd down"));
        f.relay(Some(Staleness::new(false, Duration::ZERO, "")));
        assert!(!f.view().stale);
    }

    #[tokio::test(start_paused = true)]
    async fn the_monitor_publishes_each_change_once() {
        let f = Freshness::new(Duration::from_secs(1));
        let mut rx = f.subscribe();
        tokio::spawn(f.clone().monitor(|_| {}));
        f.confirmed();
        tokio::time::advance(Duration::from_secs(2)).await;
        rx.changed().await.unwrap();
        let p = rx.borrow_and_update().clone();
        assert!(p.stale);
        let mut dec = typha_protocol::FrameDecoder::new(typha_protocol::Limits::CLIENT_INBOUND);
        let mut buf = bytes::BytesMut::from(&p.frame[..]);
        let Some(Message::Staleness(m)) = dec.decode(&mut buf).unwrap() else {
            panic!("not a staleness frame")
        };
        assert!(m.stale && m.age_millis >= 1_000);
        f.confirmed();
        rx.changed().await.unwrap();
        assert!(!rx.borrow_and_update().stale);
    }
}
