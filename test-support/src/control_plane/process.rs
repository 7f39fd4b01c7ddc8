//! A child process with its output in a log file, killed when dropped; free ports; fresh
//! folders.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

use super::peers::ControlPlaneError;

/// A running program: SIGKILLed and reaped when dropped. A watchdog (a shell loop) kills it,
/// and removes its folder if asked, should this process end without dropping it: a control
/// plane shared by a test binary's tests lives in a `static`, which is never dropped.
pub(super) struct Proc {
    name: &'static str,
    child: Child,
    watchdog: Option<Child>,
    log: PathBuf,
}

/// Waits while both the parent ($1) and the program ($2) live; if the parent is gone, kills
/// the program and removes its folder ($3, if any).
const WATCHDOG: &str = r#"while kill -0 "$1" 2>/dev/null && kill -0 "$2" 2>/dev/null; do sleep 1; done
if ! kill -0 "$1" 2>/dev/null; then kill -9 "$2" 2>/dev/null; sleep 1; [ -n "$3" ] && rm -rf "$3"; fi"#;

impl Proc {
    /// Starts `bin` with `args`, stdout and stderr appended to `log`; `orphan_cleanup`: the
    /// folder to remove if this process ends without dropping it.
    pub(super) fn spawn(
        name: &'static str,
        bin: &Path,
        args: &[String],
        log: &Path,
        orphan_cleanup: Option<&Path>,
    ) -> Result<Self, ControlPlaneError> {
        let open = || {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)
                .map_err(ControlPlaneError::io(log.display().to_string()))
        };
        let child = Command::new(bin)
            .args(args)
            .stdin(Stdio::null())
            .stdout(open()?)
            .stderr(open()?)
            .spawn()
            .map_err(ControlPlaneError::io(format!("starting {}", bin.display())))?;
        // Without a watchdog an orphan would only outlive us; not worth failing the start.
        let watchdog = Command::new("sh")
            .args(["-c", WATCHDOG, "watchdog"])
            .arg(std::process::id().to_string())
            .arg(child.id().to_string())
            .arg(orphan_cleanup.map(Path::as_os_str).unwrap_or_default())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok();
        Ok(Self {
            name,
            child,
            watchdog,
            log: log.to_owned(),
        })
    }

    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// An error if the program has exited.
    pub(super) fn check_running(&mut self) -> Result<(), ControlPlaneError> {
        match self.child.try_wait() {
            Ok(Some(status)) => Err(ControlPlaneError::Exited {
                name: self.name,
                status,
                tail: tail(&self.log),
            }),
            Ok(None) => Ok(()),
            Err(source) => Err(ControlPlaneError::Io {
                what: format!("waiting for {}", self.name),
                source,
            }),
        }
    }

    pub(super) fn not_ready(&self) -> ControlPlaneError {
        ControlPlaneError::NotReady {
            name: self.name,
            tail: tail(&self.log),
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(mut w) = self.watchdog.take() {
            let _ = w.kill();
            let _ = w.wait();
        }
    }
}

/// The last 30 lines of a log file.
pub(super) fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines
        .get(lines.len().saturating_sub(30)..)
        .unwrap_or_default()
        .join("\n")
}

/// The lowest port the kernel may give an outgoing connection (`ip_local_port_range`).
const EPHEMERAL_RANGE: &str = "/proc/sys/net/ipv4/ip_local_port_range";

/// Ports handed out start here: above the well-known and most registered services' ports.
const FIRST_PORT: u16 = 10_000;

/// A loopback port nothing listens on now, for a program a test starts, from below the
/// kernel's ephemeral range.
///
/// Asking the kernel for port 0 and closing the socket is racy: the port it gave is in the
/// ephemeral range, so any outgoing connection on the machine (the tests make thousands) may
/// be given it before the program binds it, and etcd then fails with "address already in use".
/// A port below that range is never given to an outgoing connection; it is picked at random
/// (so concurrent test processes rarely try the same one) and checked free by binding it.
pub fn free_port() -> Result<u16, ControlPlaneError> {
    use std::hash::{BuildHasher, Hasher};
    let ephemeral = std::fs::read_to_string(EPHEMERAL_RANGE)
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768);
    if let Some(span) = ephemeral
        .checked_sub(FIRST_PORT)
        .filter(|span| *span >= 1_000)
    {
        for _ in 0..200 {
            // A fresh random number each time (std's per-instance hash keys).
            let r = std::collections::hash_map::RandomState::new()
                .build_hasher()
                .finish();
            let port = FIRST_PORT + (r % u64::from(span)) as u16;
            if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
                return Ok(port);
            }
        }
    }
    // A machine whose ephemeral range starts low: the kernel's choice, racy as said above.
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(ControlPlaneError::io("finding a free port"))
}

/// A new, empty folder under the system's temporary folder.
pub(super) fn fresh_dir(prefix: &str) -> Result<PathBuf, ControlPlaneError> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let dir = std::env::temp_dir().join(format!("{prefix}-{}-{n}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(ControlPlaneError::io(dir.display().to_string()))?;
    Ok(dir)
}
