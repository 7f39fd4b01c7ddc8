//! A connection's life, step by step on a clock of our own: what the session says is due,
//! and when, from accept to streaming. (The same timers through the real connection tasks,
//! both protocols, on tokio's paused clock: `drive/tests.rs`.)

use super::*;

/// One step, at a time in milliseconds after accept.
enum Step {
    /// The handshake now waits for a reply the client owes to what it was sent at `t`.
    Expect(u64, &'static str),
    /// Held from `t`, giving up after so many seconds, if given.
    Hold(u64, Option<u64>),
    /// The initial sync is being written.
    Syncing,
    /// The initial sync was written by `t`, with this many seconds spent writing in all.
    Synced(u64, u64),
    /// At `t`, with this many seconds spent writing in all, this is due (a ping is sent).
    At(u64, u64, Option<Due>),
    /// At the time the session asks to be woken, this is due (a ping is sent).
    AtTimer(Option<Due>),
    /// The session asks to be woken this many milliseconds (within these bounds) after the
    /// last step's time; `None`: not at all.
    Timer(Option<(u64, u64)>),
    /// The client is heard from at `t`.
    Heard(u64),
    /// A breadcrumb created at the first time (before accept if negative) is asked for at the
    /// second: sent (grace used, waited) or not.
    Crumb(i64, u64, Option<(bool, bool)>),
    /// Nothing more to send.
    CaughtUp,
}

fn cfg() -> ConnConfig {
    ConnConfig {
        handshake_timeout: Duration::from_secs(10),
        ping_interval: Duration::from_secs(10),
        pong_timeout: Duration::from_secs(60),
        max_fall_behind: Duration::from_secs(300),
        new_client_grace: Duration::from_secs(100),
        ..ConnConfig::default()
    }
}

const S: u64 = 1000;

#[test]
fn the_clock_decides_the_same_for_every_case() {
    use Step::*;
    let ping = Some(Due::Ping);
    let silent = Some(Due::Silent);
    let cases: &[(&str, &[Step])] = &[
        (
            "the hello is due by the handshake timeout, counted from accept",
            &[
                Timer(Some((10 * S, 10 * S))),
                At(10 * S - 1, 0, None),
                At(10 * S, 0, Some(Due::HandshakeExpired("hello"))),
            ],
        ),
        (
            "a reply owed in the handshake is due within the pong timeout",
            &[
                Expect(2 * S, "MsgACK"),
                At(10 * S, 0, None),
                At(62 * S - 1, 0, None),
                At(62 * S, 0, Some(Due::HandshakeExpired("MsgACK"))),
            ],
        ),
        (
            "a held client is pinged every interval, ±10 %",
            &[
                Hold(3 * S, None),
                Timer(Some((9 * S, 11 * S))),
                At(3 * S + 9 * S - 1, 0, None),
                AtTimer(ping),
                Timer(Some((9 * S, 11 * S))),
                AtTimer(ping),
                Timer(Some((9 * S, 11 * S))),
            ],
        ),
        (
            "a hold with a limit gives up then, pinging until",
            &[
                Hold(0, Some(25)),
                AtTimer(ping),
                AtTimer(ping),
                At(25 * S - 1, 0, None),
                At(25 * S, 0, Some(Due::GiveUp)),
            ],
        ),
        (
            "nothing is due by the clock while the initial sync is written",
            &[Syncing, Timer(None), At(1000 * S, 500, None)],
        ),
        (
            "streaming: silence past the pong timeout from the sync's end; what the sync took to write is not held against it",
            &[
                Synced(5 * S, 3),
                Timer(Some((9 * S, 11 * S))),
                At(65 * S, 3, ping),
                At(65 * S + 1, 3, silent),
            ],
        ),
        (
            "a pong resets it",
            &[
                Synced(0, 0),
                Heard(50 * S),
                At(110 * S, 0, ping),
                At(110 * S + 1, 0, silent),
            ],
        ),
        (
            "time spent writing does not count as silence",
            &[Synced(0, 0), At(70 * S, 30, ping), At(91 * S, 30, silent)],
        ),
        (
            "writing never moves the last word past now",
            &[
                Synced(0, 0),
                At(5 * S, 500, None),
                At(64 * S, 500, ping),
                At(66 * S, 500, silent),
            ],
        ),
        (
            "within the fall-behind limit",
            &[
                Synced(0, 0),
                Crumb(0, 300 * S, Some((false, false))),
                Crumb(0, 300 * S + 1, None),
            ],
        ),
        (
            "the grace period after the initial sync allows more, counted once",
            &[
                Synced(0, 0),
                Crumb(-250 * S as i64, 99 * S, Some((true, false))),
                Crumb(-250 * S as i64, 99 * S, Some((false, false))),
                Crumb(-250 * S as i64, 101 * S, None),
            ],
        ),
        (
            "the grace counts from the sync's end, not from accept",
            &[
                Hold(0, None),
                Syncing,
                Synced(200 * S, 0),
                Crumb(0, 250 * S, Some((false, false))),
                Crumb(-100 * S as i64, 250 * S, Some((true, false))),
            ],
        ),
        (
            "a client waiting for the next breadcrumb",
            &[
                Synced(0, 0),
                CaughtUp,
                Crumb(10 * S as i64, 10 * S, Some((false, true))),
                Crumb(10 * S as i64, 10 * S, Some((false, false))),
            ],
        ),
    ];
    for (name, steps) in cases {
        let accepted = Instant::now() + Duration::from_secs(1000);
        let at = |ms: u64| accepted + Duration::from_millis(ms);
        let at_signed = |ms: i64| {
            if ms < 0 {
                accepted - Duration::from_millis(ms.unsigned_abs())
            } else {
                at(ms.unsigned_abs())
            }
        };
        let cfg = cfg();
        let mut s = Session::new(accepted, &cfg);
        let mut last = accepted;
        for (i, step) in steps.iter().enumerate() {
            let name = format!("{name}, step {i}");
            match *step {
                Expect(t, what) => {
                    s.expect_reply(what, at(t));
                    last = at(t);
                }
                Hold(t, limit) => {
                    s.hold(at(t), limit.map(Duration::from_secs));
                    last = at(t);
                }
                Syncing => s.syncing(),
                Synced(t, w) => {
                    s.synced(at(t), Duration::from_secs(w));
                    last = at(t);
                }
                At(t, w, want) => {
                    let got = s.handle_timeout(at(t), Duration::from_secs(w));
                    assert_eq!(got, want, "{name}: at {t} ms");
                    if got == Some(Due::Ping) {
                        s.pinged(at(t), t);
                    }
                    last = at(t);
                }
                AtTimer(want) => {
                    let t = s.poll_timeout().expect("a timer");
                    let got = s.handle_timeout(t, Duration::ZERO);
                    assert_eq!(got, want, "{name}");
                    if got == Some(Due::Ping) {
                        s.pinged(t, 0);
                    }
                    last = t;
                }
                Timer(want) => {
                    let got = s.poll_timeout().map(|t| t - last);
                    match want {
                        None => assert_eq!(got, None, "{name}"),
                        Some((lo, hi)) => {
                            let got = got.expect("a timer");
                            assert!(
                                got >= Duration::from_millis(lo)
                                    && got <= Duration::from_millis(hi),
                                "{name}: woken after {got:?}"
                            );
                        }
                    }
                }
                Heard(t) => s.heard(at(t)),
                Crumb(created, t, want) => {
                    let got = match s.next_breadcrumb(at(t), at_signed(created)) {
                        Next::Send { grace_used, waited } => Some((grace_used, waited)),
                        Next::FellBehind(_) => None,
                    };
                    assert_eq!(got, want, "{name}: created {created} ms, sent at {t} ms");
                }
                CaughtUp => s.caught_up(),
            }
        }
    }
}

#[test]
fn a_pong_times_the_first_ping_not_answered() {
    let base = Instant::now() + Duration::from_secs(1000);
    let at = |ms: u64| base + Duration::from_millis(ms);
    let cfg = cfg();
    let mut s = Session::new(base, &cfg);
    s.hold(base, None);
    s.pinged(at(0), 9);
    s.synced(base, Duration::ZERO);
    assert_eq!(s.pong(9, at(1)), None, "a ping of the hold is not timed");
    s.pinged(at(0), 1);
    s.pinged(at(10_000), 2);
    assert_eq!(s.pong(2, at(10_050)), None, "not the ping being timed");
    assert_eq!(
        s.handle_timeout(at(70_000), Duration::ZERO),
        Some(Due::Ping),
        "but the client is heard"
    );
    assert_eq!(s.pong(1, at(10_100)), Some(Duration::from_millis(10_100)));
    assert_eq!(s.pong(1, at(10_200)), None, "timed once");
    s.pinged(at(20_000), 3);
    assert_eq!(s.pong(3, at(20_020)), Some(Duration::from_millis(20)));
}

#[test]
fn pings_are_jittered_within_ten_percent() {
    let base = Instant::now();
    let cfg = cfg();
    let mut s = Session::new(base, &cfg);
    s.synced(base, Duration::ZERO);
    let mut seen = std::collections::BTreeSet::new();
    let mut now = base;
    for _ in 0..200 {
        let next = s.poll_timeout().expect("a timer");
        let gap = next - now;
        assert!(
            gap >= Duration::from_secs(9) && gap <= Duration::from_secs(11),
            "{gap:?}"
        );
        seen.insert(gap.as_millis());
        now = next;
        assert_eq!(s.handle_timeout(now, Duration::ZERO), Some(Due::Ping));
        s.pinged(now, 0);
        s.heard(now);
    }
    assert!(
        seen.len() > 100,
        "jittered, not fixed: {} distinct gaps",
        seen.len()
    );
}
