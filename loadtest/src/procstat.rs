//! CPU time and memory of a process, from /proc.

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

/// Reads /proc/<pid>/stat and /proc/<pid>/status; `None` if the process is gone.
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

/// Bytes the process has passed to write-like system calls (`wchar` of /proc/<pid>/io):
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
