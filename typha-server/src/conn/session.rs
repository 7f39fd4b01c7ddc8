//! What a streaming connection decides by the clock, for both protocols, with no I/O: time is
//! passed in and the decisions come out, so a table of cases tests them without a socket or
//! a runtime (below). The stream loop (`drive.rs`, the same for both protocols) does the
//! reading and writing and asks it:
//!
//! - **Pings and liveness**: when the next ping is due (`next_ping`, ±10 % jitter as Typha
//!   has it); whether the client has been silent longer than the pong timeout (a pong, or
//!   for ours an ack, is `heard`), not counting the time the task spent blocked writing to it
//!   (`pause_for_writing`: while we write we read nothing, and our pings wait behind the
//!   data, so a slow but steady reader must not look dead); how long the first ping not
//!   answered yet took (`pong`, Typha's `typha_ping_latency`).
//! - **Falling behind**: whether the next breadcrumb, created when it was, may still be sent
//!   (`next_breadcrumb`): within `TYPHA_SERVERMAXFALLBEHINDSECS`, plus the grace period after
//!   the initial sync (`TYPHA_SERVERNEWCLIENTFALLBEHINDGRACEPERIOD`); whether only the grace
//!   kept it (Typha's `typha_connections_grace_used`, once a connection); and whether the
//!   client had been waiting for it (`typha_breadcrumb_block`) or it was already there
//!   (`typha_breadcrumb_non_block`).

use std::time::Duration;

use tokio::time::Instant;

use super::ConnConfig;
use super::out::jitter;

/// A streaming connection's clock-driven state. The settings are borrowed, not copied: the
/// state is kept for the connection's life, in every connection's task.
#[derive(Debug)]
pub(super) struct Follow<'a> {
    cfg: &'a ConnConfig,
    /// When the next ping is due.
    next_ping: Instant,
    /// When the client was last heard from, moved on by the time spent writing to it.
    last_heard: Instant,
    /// Time spent writing to the client, as of the last check.
    writing_seen: Duration,
    /// End of the extra fall-behind allowance after the initial sync.
    grace_until: Instant,
    /// The grace period has been needed once.
    grace_used: bool,
    /// The last round found nothing to send: the next breadcrumb is one the client waited for.
    caught_up: bool,
    /// The first ping not answered yet: its token and when it was sent.
    ping_sent: Option<(u64, Instant)>,
}

/// What [`Follow::next_breadcrumb`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Next {
    /// Send it. `grace_used`: only the grace period allowed it, the first time for this
    /// connection; `waited`: the client had been up to date, waiting for it.
    Send { grace_used: bool, waited: bool },
    /// The client has fallen behind by this much: close it.
    FellBehind(Duration),
}

impl<'a> Follow<'a> {
    /// A connection whose initial sync ended at `now`, with these settings.
    pub(super) fn new(now: Instant, cfg: &'a ConnConfig) -> Self {
        Follow {
            cfg,
            next_ping: now + jitter(cfg.ping_interval),
            last_heard: now,
            writing_seen: Duration::ZERO,
            grace_until: now + cfg.new_client_grace,
            grace_used: false,
            caught_up: false,
            ping_sent: None,
        }
    }

    /// When the next ping is due.
    pub(super) fn next_ping(&self) -> Instant {
        self.next_ping
    }

    /// The client was heard from (for ours, an ack) at `now`.
    pub(super) fn heard(&mut self, now: Instant) {
        self.last_heard = now;
    }

    /// A pong echoing the ping of `token` came at `now`: the client is heard from; if it
    /// answers the first ping not answered yet, how long that took (Typha's
    /// `typha_ping_latency`; one ping in flight is timed at a time).
    pub(super) fn pong(&mut self, token: u64, now: Instant) -> Option<Duration> {
        self.heard(now);
        let (_, at) = self.ping_sent.take_if(|(t, _)| *t == token)?;
        Some(now.saturating_duration_since(at))
    }

    /// The task has spent `writing` in all blocked writing to the client: that time does not
    /// count as the client's silence.
    pub(super) fn pause_for_writing(&mut self, writing: Duration, now: Instant) {
        let paused = writing.saturating_sub(self.writing_seen);
        self.writing_seen = writing;
        self.last_heard = (self.last_heard + paused).min(now);
    }

    /// Whether the client has been silent for longer than the pong timeout.
    pub(super) fn silent_too_long(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.last_heard) > self.cfg.pong_timeout
    }

    /// The ping of `token` was sent at `now`: the next is due an interval (jittered) later.
    pub(super) fn pinged(&mut self, now: Instant, token: u64) {
        self.next_ping = now + jitter(self.cfg.ping_interval);
        if self.ping_sent.is_none() {
            self.ping_sent = Some((token, now));
        }
    }

    /// The last round found nothing more to send.
    pub(super) fn caught_up(&mut self) {
        self.caught_up = true;
    }

    /// Whether the next breadcrumb, created at `created`, may be sent at `now`.
    pub(super) fn next_breadcrumb(&mut self, now: Instant, created: Instant) -> Next {
        let in_grace = now < self.grace_until;
        let grace = if in_grace {
            self.cfg.new_client_grace
        } else {
            Duration::ZERO
        };
        let allowance = self.cfg.max_fall_behind + grace;
        let behind = now.saturating_duration_since(created);
        if behind > allowance {
            return Next::FellBehind(behind);
        }
        let grace_used = in_grace
            && behind > self.cfg.max_fall_behind
            && !std::mem::replace(&mut self.grace_used, true);
        Next::Send {
            grace_used,
            waited: std::mem::take(&mut self.caught_up),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One case: what happens at which second, and what the session must say then.
    enum Step {
        /// The client is heard from.
        Heard(u64),
        /// The task has spent this many seconds writing in all, as of this second.
        Wrote(u64, u64),
        /// At this second, the client is (or is not) silent too long.
        Silent(u64, bool),
        /// A breadcrumb created at the first second (before the start if negative), at the
        /// second: sent (grace used, waited) or not.
        Crumb(i64, u64, Option<(bool, bool)>),
        /// Nothing more to send.
        CaughtUp,
    }

    fn cfg() -> ConnConfig {
        ConnConfig {
            ping_interval: Duration::from_secs(10),
            pong_timeout: Duration::from_secs(60),
            max_fall_behind: Duration::from_secs(300),
            new_client_grace: Duration::from_secs(100),
            ..ConnConfig::default()
        }
    }

    #[test]
    fn the_clock_decides_the_same_for_every_case() {
        use Step::*;
        let cases: &[(&str, &[Step])] = &[
            (
                "silence past the pong timeout",
                &[Silent(60, false), Silent(61, true)],
            ),
            (
                "a pong resets it",
                &[Heard(50), Silent(100, false), Silent(111, true)],
            ),
            (
                "time spent writing does not count",
                &[Wrote(70, 30), Silent(70, false), Silent(91, true)],
            ),
            (
                "writing never moves the last word past now",
                &[Wrote(5, 500), Silent(64, false), Silent(66, true)],
            ),
            (
                "within the fall-behind limit",
                &[Crumb(0, 300, Some((false, false))), Crumb(0, 301, None)],
            ),
            (
                "the grace period allows more, once counted",
                &[
                    Crumb(-250, 99, Some((true, false))),
                    Crumb(-250, 99, Some((false, false))),
                    Crumb(-250, 101, None),
                ],
            ),
            (
                "a client waiting for the next breadcrumb",
                &[
                    CaughtUp,
                    Crumb(10, 10, Some((false, true))),
                    Crumb(10, 10, Some((false, false))),
                ],
            ),
        ];
        for (name, steps) in cases {
            let base = Instant::now() + Duration::from_secs(1000);
            let at = |s: u64| base + Duration::from_secs(s);
            let at_signed = |s: i64| {
                if s < 0 {
                    base - Duration::from_secs(s.unsigned_abs())
                } else {
                    base + Duration::from_secs(s.unsigned_abs())
                }
            };
            let cfg = cfg();
            let mut s = Follow::new(base, &cfg);
            for step in *steps {
                match *step {
                    Heard(t) => s.heard(at(t)),
                    Wrote(t, secs) => s.pause_for_writing(Duration::from_secs(secs), at(t)),
                    Silent(t, want) => {
                        assert_eq!(s.silent_too_long(at(t)), want, "{name}: at {t} s")
                    }
                    Crumb(created, t, want) => {
                        let got = match s.next_breadcrumb(at(t), at_signed(created)) {
                            Next::Send { grace_used, waited } => Some((grace_used, waited)),
                            Next::FellBehind(_) => None,
                        };
                        assert_eq!(got, want, "{name}: created {created} s, sent at {t} s");
                    }
                    CaughtUp => s.caught_up(),
                }
            }
        }
    }

    #[test]
    fn grace_is_counted_once_and_ends() {
        let base = Instant::now() + Duration::from_secs(1000);
        let cfg = cfg();
        let mut s = Follow::new(base, &cfg);
        let created = base - Duration::from_secs(350);
        assert_eq!(
            s.next_breadcrumb(base, created),
            Next::Send {
                grace_used: true,
                waited: false
            },
            "only the grace allows 350 s"
        );
        assert_eq!(
            s.next_breadcrumb(base, created),
            Next::Send {
                grace_used: false,
                waited: false
            },
            "counted once"
        );
        let after = base + Duration::from_secs(100);
        assert!(matches!(
            s.next_breadcrumb(after, after - Duration::from_secs(350)),
            Next::FellBehind(_)
        ));
    }

    #[test]
    fn a_pong_times_the_first_ping_not_answered() {
        let base = Instant::now() + Duration::from_secs(1000);
        let at = |ms: u64| base + Duration::from_millis(ms);
        let cfg = cfg();
        let mut s = Follow::new(base, &cfg);
        s.pinged(at(0), 1);
        s.pinged(at(10_000), 2);
        assert_eq!(s.pong(2, at(10_050)), None, "not the ping being timed");
        assert!(!s.silent_too_long(at(70_000)), "but the client is heard");
        assert_eq!(s.pong(1, at(10_100)), Some(Duration::from_millis(10_100)));
        assert_eq!(s.pong(1, at(10_200)), None, "timed once");
        s.pinged(at(20_000), 3);
        assert_eq!(s.pong(3, at(20_020)), Some(Duration::from_millis(20)));
    }

    #[test]
    fn pings_are_jittered_within_ten_percent() {
        let base = Instant::now();
        let cfg = cfg();
        let mut s = Follow::new(base, &cfg);
        let mut seen = std::collections::BTreeSet::new();
        let mut now = base;
        for _ in 0..200 {
            let gap = s.next_ping() - now;
            assert!(
                gap >= Duration::from_secs(9) && gap <= Duration::from_secs(11),
                "{gap:?}"
            );
            seen.insert(gap.as_millis());
            now = s.next_ping();
            s.pinged(now, 0);
        }
        assert!(
            seen.len() > 100,
            "jittered, not fixed: {} distinct gaps",
            seen.len()
        );
    }
}
