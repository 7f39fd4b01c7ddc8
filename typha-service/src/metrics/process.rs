//! The process metrics every Prometheus exporter serves (`process_cpu_seconds_total`,
//! `process_resident_memory_bytes`, ...), under the names and types of Go's client, read from
//! `/proc/self` when a scrape asks for them: nothing runs between scrapes.
//!
//! Ours rather than the `prometheus` crate's `process` feature: that one pulls `procfs` (and
//! its dependencies) for four small files, reads the process' start time once through `libc`
//! (`unsafe`), and counts CPU in whole seconds, where a `rate()` over a minute wants
//! hundredths.
//!
//! On a system without `/proc` (or where a file cannot be read) the metrics it feeds are left
//! out of the scrape, not reported as zero.

use prometheus::core::{Collector, Desc};
use prometheus::proto::{Counter, Gauge, Metric, MetricFamily, MetricType};

/// Clock ticks per second in `/proc` times: the kernel's `USER_HZ`, fixed at 100 in the
/// user-space ABI of every architecture Rust's Linux targets build for (what
/// `sysconf(_SC_CLK_TCK)` returns, and what Go's procfs assumes too).
const USER_HZ: f64 = 100.0;

/// The families, in the order [`ProcessCollector::collect`] fills them.
const FAMILIES: [(&str, &str, MetricType); 7] = [
    (
        "process_cpu_seconds_total",
        "Total user and system CPU time spent in seconds.",
        MetricType::COUNTER,
    ),
    (
        "process_resident_memory_bytes",
        "Resident memory size in bytes.",
        MetricType::GAUGE,
    ),
    (
        "process_virtual_memory_bytes",
        "Virtual memory size in bytes.",
        MetricType::GAUGE,
    ),
    (
        "process_open_fds",
        "Number of open file descriptors.",
        MetricType::GAUGE,
    ),
    (
        "process_max_fds",
        "Maximum number of open file descriptors.",
        MetricType::GAUGE,
    ),
    (
        "process_start_time_seconds",
        "Start time of the process since unix epoch in seconds.",
        MetricType::GAUGE,
    ),
    (
        "process_threads",
        "Number of OS threads in the process.",
        MetricType::GAUGE,
    ),
];

/// Collects this process' metrics from `/proc/self` at each scrape. Register it with
/// `register_process_metrics` (or `register`) of the parent module.
#[derive(Debug, Clone)]
pub struct ProcessCollector {
    descs: Vec<Desc>,
    /// Unix seconds; read once, it does not change.
    start_time: Option<f64>,
}

/// What one read of `/proc/self/stat` gives.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Stat {
    cpu_seconds: f64,
    threads: f64,
    /// Clock ticks after boot.
    start_ticks: f64,
    virtual_bytes: f64,
}

impl ProcessCollector {
    /// A collector for this process.
    #[allow(clippy::expect_used)] // Literal names and help texts: a test encodes them.
    pub fn new() -> Self {
        let descs = FAMILIES
            .iter()
            .map(|(name, help, _)| {
                Desc::new(
                    (*name).into(),
                    (*help).into(),
                    Vec::new(),
                    Default::default(),
                )
                .expect("valid process metric name")
            })
            .collect();
        let start_time = read("/proc/self/stat")
            .and_then(|s| parse_stat(&s))
            .zip(read("/proc/stat").and_then(|s| parse_boot_time(&s)))
            .map(|(stat, boot)| boot + stat.start_ticks / USER_HZ);
        Self { descs, start_time }
    }

    /// The values, in [`FAMILIES`]' order; `None` for what could not be read.
    fn values(&self) -> [Option<f64>; 7] {
        let stat = read("/proc/self/stat").and_then(|s| parse_stat(&s));
        let rss = read("/proc/self/status").and_then(|s| parse_rss(&s));
        let open_fds = std::fs::read_dir("/proc/self/fd")
            .ok()
            .map(|d| d.count() as f64);
        let max_fds = read("/proc/self/limits").and_then(|s| parse_max_fds(&s));
        [
            stat.map(|s| s.cpu_seconds),
            rss,
            stat.map(|s| s.virtual_bytes),
            open_fds,
            max_fds,
            self.start_time,
            stat.map(|s| s.threads),
        ]
    }
}

impl Default for ProcessCollector {
    fn default() -> Self {
        Self::new()
    }
}

impl Collector for ProcessCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        FAMILIES
            .iter()
            .zip(self.values())
            .filter_map(|((name, help, ty), value)| Some(family(name, help, *ty, value?)))
            .collect()
    }
}

fn family(name: &str, help: &str, ty: MetricType, value: f64) -> MetricFamily {
    let mut m = Metric::default();
    if ty == MetricType::COUNTER {
        let mut c = Counter::default();
        c.set_value(value);
        m.set_counter(c);
    } else {
        let mut g = Gauge::default();
        g.set_value(value);
        m.set_gauge(g);
    }
    let mut f = MetricFamily::default();
    f.set_name(name.into());
    f.set_help(help.into());
    f.set_field_type(ty);
    f.set_metric(vec![m]);
    f
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// `/proc/<pid>/stat` (proc(5)): the command name is in parentheses and may hold spaces and
/// parentheses itself, so fields are counted from the last `)`. Field 3 (state) is the first
/// after it; utime 14, stime 15, num_threads 20, starttime 22, vsize 23.
fn parse_stat(s: &str) -> Option<Stat> {
    let (_, rest) = s.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| -> Option<f64> {
        fields
            .get(n.checked_sub(3)?)?
            .parse::<u64>()
            .ok()
            .map(|v| v as f64)
    };
    Some(Stat {
        cpu_seconds: (field(14)? + field(15)?) / USER_HZ,
        threads: field(20)?,
        start_ticks: field(22)?,
        virtual_bytes: field(23)?,
    })
}

/// `btime` of `/proc/stat`: boot time, Unix seconds.
fn parse_boot_time(s: &str) -> Option<f64> {
    s.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|v| v as f64)
}

/// `VmRSS` of `/proc/<pid>/status`, in bytes (the kernel writes kB: KiB). Read here rather
/// than `rss` of `stat`, which counts pages of a size only `sysconf` tells.
fn parse_rss(s: &str) -> Option<f64> {
    let kib = s
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse::<u64>()
        .ok()?;
    Some(kib as f64 * 1024.0)
}

/// The soft limit of `Max open files` in `/proc/<pid>/limits`; `None` if unlimited.
fn parse_max_fds(s: &str) -> Option<f64> {
    s.lines()
        .find_map(|l| l.strip_prefix("Max open files"))?
        .split_whitespace()
        .next()?
        .parse::<u64>()
        .ok()
        .map(|v| v as f64)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn stat_fields_are_counted_from_the_last_parenthesis() {
        // A command name with a space and a parenthesis in it, as a thread may name itself.
        let s = "4242 (tokio (rt) x) S 1 4242 4242 0 -1 4194560 1234 0 0 0 250 75 0 0 20 0 \
                 7 0 123456 987654321 2048 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 \
                 0 0 0 0 0\n";
        assert_eq!(
            parse_stat(s),
            Some(Stat {
                cpu_seconds: 3.25,
                threads: 7.0,
                start_ticks: 123_456.0,
                virtual_bytes: 987_654_321.0,
            })
        );
        assert_eq!(parse_stat("4242 (truncated) S 1 2"), None);
    }

    #[test]
    fn status_limits_and_boot_time() {
        let status = "Name:\ttypha-server\nVmPeak:\t  20000 kB\nVmRSS:\t    5120 kB\nThreads:\t3\n";
        assert_eq!(parse_rss(status), Some(5_242_880.0));
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max processes             95393                95393                processes \n\
                      Max open files            1024                 524288               files     \n";
        assert_eq!(parse_max_fds(limits), Some(1024.0));
        assert_eq!(
            parse_max_fds(
                "Max open files            unlimited            unlimited            files\n"
            ),
            None
        );
        assert_eq!(
            parse_boot_time("cpu  1 2 3\nintr 5\nbtime 1764000000\nprocesses 9\n"),
            Some(1_764_000_000.0)
        );
    }
}
