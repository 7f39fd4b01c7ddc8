//! CPU time and memory of a process, from /proc, and the idle sample taken once a process's
//! memory has settled.

use std::time::{Duration, Instant};

/// CPU seconds (user + system) and resident memory of a process.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Usage {
    /// User + system CPU seconds so far.
    pub(crate) cpu_secs: f64,
    /// Resident set size now, bytes.
    pub(crate) rss: u64,
    /// Peak resident set size, bytes.
    pub(crate) peak_rss: u64,
}

/// Reads `/proc/<pid>/stat` and `/proc/<pid>/status`; `None` if the process is gone.
pub(crate) fn usage(pid: u32) -> Option<Usage> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = after.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of stat; after the name, indices 11 and 12.
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    let cpu_secs = (ticks(11) + ticks(12)) / 100.0;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    };
    Some(Usage {
        cpu_secs,
        rss: kb("VmRSS:"),
        peak_rss: kb("VmHWM:"),
    })
}

/// When a process's RSS counts as settled: sampled every `every`, the last `window` samples
/// lie within `tolerance` (a fraction of the largest of them) of each other; at most `limit`.
///
/// A server's RSS goes on moving after it is ready: its allocator returns what the initial
/// listing freed some time later, or not until a thread allocates again. A sample taken at a
/// fixed delay after ready read anywhere between the two (285-444 MiB for one binary).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Settle {
    /// Time between samples.
    pub(crate) every: Duration,
    /// How many of the latest samples must agree (9 every 250 ms: two seconds).
    pub(crate) window: usize,
    /// How far apart they may be, as a fraction of the largest.
    pub(crate) tolerance: f64,
    /// The longest wait; the sample is taken then, settled or not.
    pub(crate) limit: Duration,
}

impl Settle {
    /// The idle sample of every scenario that reports one: within 1 % over two seconds, at
    /// most 30 seconds.
    pub(crate) const IDLE: Settle = Settle {
        every: Duration::from_millis(250),
        window: 9,
        tolerance: 0.01,
        limit: Duration::from_secs(30),
    };

    /// Whether the series of RSS samples `rss` (oldest first) has settled.
    pub(crate) fn settled(&self, rss: &[u64]) -> bool {
        let Some(last) = rss.len().checked_sub(self.window.max(1)) else {
            return false;
        };
        let tail = &rss[last..];
        let (lo, hi) = tail
            .iter()
            .fold((u64::MAX, 0), |(lo, hi), &r| (lo.min(r), hi.max(r)));
        (hi - lo) as f64 <= self.tolerance * hi as f64
    }
}

/// How long an idle sample waited for the RSS to settle, as every scenario reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub(crate) struct SettleWait {
    /// Seconds from the first sample to the one taken.
    pub(crate) rss_idle_wait_secs: f64,
    /// False when the wait reached [`Settle::limit`] first.
    pub(crate) rss_idle_settled: bool,
}

impl std::fmt::Display for SettleWait {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.1} s", self.rss_idle_wait_secs)?;
        if !self.rss_idle_settled {
            f.write_str(" (did not settle)")?;
        }
        Ok(())
    }
}

/// A process's usage once its RSS settled (see [`Settle`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Settled {
    /// The last sample.
    pub(crate) usage: Usage,
    /// How long that took.
    pub(crate) wait: SettleWait,
}

/// Samples `pid` until its RSS settles or `settle.limit` passes; `None` if the process is
/// gone.
pub(crate) async fn settled_usage(pid: u32, settle: Settle) -> Option<Settled> {
    let started = Instant::now();
    let mut rss = Vec::new();
    loop {
        let u = usage(pid)?;
        rss.push(u.rss);
        let settled = settle.settled(&rss);
        let waited = started.elapsed();
        if settled || waited >= settle.limit {
            return Some(Settled {
                usage: u,
                wait: SettleWait {
                    rss_idle_wait_secs: waited.as_secs_f64(),
                    rss_idle_settled: settled,
                },
            });
        }
        tokio::time::sleep(settle.every).await;
    }
}

/// Bytes the process has passed to write-like system calls (`wchar` of `/proc/<pid>/io`):
/// sockets and files alike.
pub(crate) fn written(pid: u32) -> Option<u64> {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).ok()?;
    io.lines()
        .find_map(|l| l.strip_prefix("wchar:"))?
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::Settle;

    const MIB: u64 = 1 << 20;

    fn series(mib: &[u64]) -> Vec<u64> {
        mib.iter().map(|m| m * MIB).collect()
    }

    #[test]
    fn settles_only_once_a_full_window_agrees() {
        let s = Settle::IDLE;
        // Loading, then a drop when the allocator returns the listing's memory, then flat.
        let mut rss = series(&[74, 146, 290, 392, 392, 392, 392, 300, 290]);
        assert!(!s.settled(&rss[..4]), "fewer samples than the window");
        assert!(!s.settled(&rss));
        for _ in 0..7 {
            rss.push(290 * MIB);
            assert!(!s.settled(&rss), "the 300 is still in the window");
        }
        rss.push(289 * MIB);
        assert!(s.settled(&rss));
    }

    #[test]
    fn within_the_tolerance_is_settled_and_beyond_it_is_not() {
        let s = Settle::IDLE;
        // 1 % of 400 MiB is 4 MiB.
        assert!(s.settled(&series(&[400, 398, 397, 396, 399, 400, 396, 398, 397])));
        assert!(!s.settled(&series(&[400, 398, 397, 395, 399, 400, 396, 398, 397])));
        assert!(!s.settled(&[]));
    }

    #[test]
    fn reads_this_process() {
        let u = super::usage(std::process::id()).unwrap();
        assert!(u.rss > 0 && u.peak_rss >= u.rss);
    }

    #[test]
    fn counts_what_this_process_writes() {
        let before = super::written(std::process::id()).unwrap();
        let path = std::env::temp_dir().join(format!("procstat-{}", std::process::id()));
        std::fs::write(&path, [0u8; 4096]).unwrap();
        let _ = std::fs::remove_file(&path);
        assert!(super::written(std::process::id()).unwrap() >= before + 4096);
    }
}
