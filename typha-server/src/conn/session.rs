//! A connection's life as the clock sees it, for both protocols, with no I/O: time is passed
//! in and the decisions come out, so a table of cases tests them without a socket or a
//! runtime (below). The one driver (`drive.rs`) does the reading and writing, keeps one timer
//! at [`Session::poll_timeout`] and, when it fires, asks [`Session::handle_timeout`] what is
//! due; what it reads and writes it reports (`heard`, `pong`, `pinged`, `caught_up`), and it
//! asks before each breadcrumb whether it may still be sent (`next_breadcrumb`).
//!
//! ```text
//!  Handshake ─▶ Held ─▶ Syncing ─▶ Streaming
//!  a message    waiting for a sync   the initial    pings, liveness, falling behind
//!  by its       slot, a complete     sync written   (with the grace period after the
//!  deadline     cache, a revision    (each write    initial sync)
//!               floor: pinged; the   under the
//!               floor gives up       write timeout)
//! ```
//!
//! - **Handshake**: the hello by the handshake timeout counted from accept (so TLS and hello
//!   share it: `TYPHA_SERVERHANDSHAKETIMEOUTSECS`); a reply the client owes later in the
//!   handshake (a Calico client's `MsgACK` of the switch to snappy) within the pong timeout.
//! - **Held** before the initial sync: pinged every ping interval (±10 % jitter, as Typha)
//!   so the client's read timeout does not fire; a hold for the client's revision floor gives
//!   up after `TYPHA_RESUMEREVISIONWAITSECS`.
//! - **Streaming**: when the next ping is due; whether the client has been silent longer
//!   than the pong timeout (a pong, or for ours an ack, is `heard`), not counting the time
//!   the driver spent blocked writing to it (while we write we read nothing, and our pings
//!   wait behind the data, so a slow but steady reader must not look dead); how long the
//!   first ping not answered yet took (`pong`, Typha's `typha_ping_latency`); whether the
//!   next breadcrumb, created when it was, may still be sent (`next_breadcrumb`): within
//!   `TYPHA_SERVERMAXFALLBEHINDSECS`, plus the grace period after the initial sync
//!   (`TYPHA_SERVERNEWCLIENTFALLBEHINDGRACEPERIOD`); whether only the grace kept it (Typha's
//!   `typha_connections_grace_used`, once a connection); and whether the client had been
//!   waiting for it (`typha_breadcrumb_block`) or it was already there
//!   (`typha_breadcrumb_non_block`).
//!
//! A close request (a drain, a balancing move) is not the clock's: the driver ends the
//! connection whatever the phase, in its protocol's way (`out.rs`).

use std::time::Duration;

use tokio::time::Instant;

use super::ConnConfig;
use super::out::jitter;

/// A connection's clock-driven state, from accept to its end. The settings are borrowed,
/// not copied: the state is kept for the connection's life, in every connection's task.
#[derive(Debug)]
pub(super) struct Session<'a> {
    cfg: &'a ConnConfig,
    phase: Phase,
}

#[derive(Debug)]
enum Phase {
    /// Waiting for this message of the handshake until the deadline.
    Handshake {
        awaiting: &'static str,
        deadline: Instant,
    },
    /// Held before the initial sync: pinged; a hold with `gives_up` ends then.
    Held {
        next_ping: Instant,
        gives_up: Option<Instant>,
    },
    /// The initial sync is being written: nothing is due by the clock (each write has the
    /// write timeout).
    Syncing,
    /// In sync, following the breadcrumbs.
    Streaming(Follow),
}

/// What [`Session::handle_timeout`] found due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Due {
    /// The handshake message awaited did not come in time: end the connection.
    HandshakeExpired(&'static str),
    /// Send a ping now (then tell [`Session::pinged`]).
    Ping,
    /// The hold ends without what it waited for.
    GiveUp,
    /// The client has been silent longer than the pong timeout: end the connection, once
    /// anything already waiting in its socket has been read and the session asked again.
    Silent,
}

/// A streaming connection's state.
#[derive(Debug)]
struct Follow {
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

/// What [`Session::next_breadcrumb`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Next {
    /// Send it. `grace_used`: only the grace period allowed it, the first time for this
    /// connection; `waited`: the client had been up to date, waiting for it.
    Send { grace_used: bool, waited: bool },
    /// The client has fallen behind by this much: close it.
    FellBehind(Duration),
}

impl<'a> Session<'a> {
    /// A connection accepted at `accepted`, with these settings: its hello is due by the
    /// handshake timeout.
    pub(super) fn new(accepted: Instant, cfg: &'a ConnConfig) -> Self {
        Session {
            cfg,
            phase: Phase::Handshake {
                awaiting: "hello",
                deadline: accepted + cfg.handshake_timeout,
            },
        }
    }

    /// The handshake now waits for `awaiting`, a reply the client owes to what it was sent at
    /// `now`: due within the pong timeout.
    pub(super) fn expect_reply(&mut self, awaiting: &'static str, now: Instant) {
        self.phase = Phase::Handshake {
            awaiting,
            deadline: now + self.cfg.pong_timeout,
        };
    }

    /// The client is held from `now` (before its initial sync), pinged meanwhile; the hold
    /// gives up after `at_most`, if given.
    pub(super) fn hold(&mut self, now: Instant, at_most: Option<Duration>) {
        self.phase = Phase::Held {
            next_ping: now + jitter(self.cfg.ping_interval),
            gives_up: at_most.map(|d| now + d),
        };
    }

    /// The initial sync is being written.
    pub(super) fn syncing(&mut self) {
        self.phase = Phase::Syncing;
    }

    /// The initial sync was written by `now`, the driver having spent `writing` in all
    /// writing to the client: the client streams from here, with the grace period, and the
    /// time already spent writing is not counted against its next silence.
    pub(super) fn synced(&mut self, now: Instant, writing: Duration) {
        self.phase = Phase::Streaming(Follow {
            next_ping: now + jitter(self.cfg.ping_interval),
            last_heard: now,
            writing_seen: writing,
            grace_until: now + self.cfg.new_client_grace,
            grace_used: false,
            caught_up: false,
            ping_sent: None,
        });
    }

    /// When the driver must next call [`Session::handle_timeout`]; `None`: nothing is due by
    /// the clock.
    pub(super) fn poll_timeout(&self) -> Option<Instant> {
        match &self.phase {
            Phase::Handshake { deadline, .. } => Some(*deadline),
            Phase::Held {
                next_ping,
                gives_up,
            } => Some(gives_up.map_or(*next_ping, |g| g.min(*next_ping))),
            Phase::Syncing => None,
            Phase::Streaming(f) => Some(f.next_ping),
        }
    }

    /// What is due at `now`, the driver having spent `writing` in all blocked writing to the
    /// client (that time does not count as its silence); `None`: nothing yet.
    pub(super) fn handle_timeout(&mut self, now: Instant, writing: Duration) -> Option<Due> {
        match &mut self.phase {
            Phase::Handshake { awaiting, deadline } => {
                (now >= *deadline).then_some(Due::HandshakeExpired(awaiting))
            }
            Phase::Held {
                next_ping,
                gives_up,
            } => {
                if gives_up.is_some_and(|g| now >= g) {
                    Some(Due::GiveUp)
                } else {
                    (now >= *next_ping).then_some(Due::Ping)
                }
            }
            Phase::Syncing => None,
            Phase::Streaming(f) => {
                let paused = writing.saturating_sub(f.writing_seen);
                f.writing_seen = writing;
                f.last_heard = (f.last_heard + paused).min(now);
                if now.saturating_duration_since(f.last_heard) > self.cfg.pong_timeout {
                    Some(Due::Silent)
                } else {
                    (now >= f.next_ping).then_some(Due::Ping)
                }
            }
        }
    }

    /// The ping of `token` was sent at `now`: the next is due an interval (jittered) later.
    pub(super) fn pinged(&mut self, now: Instant, token: u64) {
        let next = now + jitter(self.cfg.ping_interval);
        match &mut self.phase {
            Phase::Held { next_ping, .. } => *next_ping = next,
            Phase::Streaming(f) => {
                f.next_ping = next;
                if f.ping_sent.is_none() {
                    f.ping_sent = Some((token, now));
                }
            }
            Phase::Handshake { .. } | Phase::Syncing => {}
        }
    }

    /// The client was heard from (for ours, an ack) at `now`.
    pub(super) fn heard(&mut self, now: Instant) {
        if let Phase::Streaming(f) = &mut self.phase {
            f.last_heard = now;
        }
    }

    /// A pong echoing the ping of `token` came at `now`: the client is heard from; if it
    /// answers the first ping not answered yet, how long that took (Typha's
    /// `typha_ping_latency`; one ping in flight is timed at a time).
    pub(super) fn pong(&mut self, token: u64, now: Instant) -> Option<Duration> {
        let Phase::Streaming(f) = &mut self.phase else {
            return None;
        };
        f.last_heard = now;
        let (_, at) = f.ping_sent.take_if(|(t, _)| *t == token)?;
        Some(now.saturating_duration_since(at))
    }

    /// The last round found nothing more to send.
    pub(super) fn caught_up(&mut self) {
        if let Phase::Streaming(f) = &mut self.phase {
            f.caught_up = true;
        }
    }

    /// Whether the next breadcrumb, created at `created`, may be sent at `now`. (Before the
    /// client streams, nothing is sent breadcrumb by breadcrumb: always yes.)
    pub(super) fn next_breadcrumb(&mut self, now: Instant, created: Instant) -> Next {
        let Phase::Streaming(f) = &mut self.phase else {
            return Next::Send {
                grace_used: false,
                waited: false,
            };
        };
        let in_grace = now < f.grace_until;
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
            && !std::mem::replace(&mut f.grace_used, true);
        Next::Send {
            grace_used,
            waited: std::mem::take(&mut f.caught_up),
        }
    }
}

#[cfg(test)]
mod tests;
