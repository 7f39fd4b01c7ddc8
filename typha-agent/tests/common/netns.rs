//! Network namespaces for the agent's tests: a guard that makes one with `ip netns add` under a
//! unique name (`<prefix>-<pid>-<n>`) and removes it on drop, even when the test fails, after
//! killing any process still in it; commands run in it through `ip netns exec` and `ip -n`,
//! and code on a thread that has joined it with `setns`. Needs root.

// Each test binary compiles this module on its own and uses a different subset of it; what one
// of them leaves unused is not dead.
#![allow(dead_code)]

use std::fs::File;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use nix::sched::{CloneFlags, setns};

/// A network namespace, deleted when the owning value is dropped.
pub struct Netns {
    name: String,
    owner: bool,
}

impl Netns {
    /// A fresh namespace named `<prefix>-<pid>-<n>`, its loopback left down.
    pub fn add(prefix: &str) -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "{prefix}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        run(&["ip", "netns", "add", &name]);
        Self { name, owner: true }
    }

    /// Brings the loopback interface up.
    pub fn with_lo_up(self) -> Self {
        self.ip(&["link", "set", "lo", "up"]);
        self
    }

    /// The same namespace, for a test thread; the original still deletes it.
    pub fn handle(&self) -> Self {
        Self {
            name: self.name.clone(),
            owner: false,
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Where `ip netns add` mounted it, for `setns`.
    pub fn path(&self) -> String {
        format!("/var/run/netns/{}", self.name)
    }

    /// `ip netns exec <name>`, to put before a command to run it in the namespace.
    pub fn exec_prefix(&self) -> Vec<String> {
        ["ip", "netns", "exec", &self.name]
            .map(str::to_owned)
            .to_vec()
    }

    /// Runs a command in the namespace; panics unless it succeeds; returns its stdout.
    pub fn exec(&self, args: &[&str]) -> String {
        let mut all = vec!["ip", "netns", "exec", &self.name];
        all.extend_from_slice(args);
        run(&all)
    }

    /// Runs a command in the namespace, its output discarded: whether it succeeded.
    pub fn try_exec(&self, args: &[&str]) -> bool {
        Command::new("ip")
            .args(["netns", "exec", &self.name])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// `ip -n <name> args`, which must succeed; its stdout.
    pub fn ip(&self, args: &[&str]) -> String {
        let mut all = vec!["ip", "-n", &self.name];
        all.extend_from_slice(args);
        run(&all)
    }

    /// Starts a command in the namespace with these environment variables added; its stdout
    /// discarded, its stderr the test's.
    pub fn spawn(&self, args: &[&str], env: &[(&str, String)]) -> Child {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name]).args(args);
        for (k, v) in env {
            c.env(k, v);
        }
        c.stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap()
    }

    /// Runs `f` on a thread that has entered the namespace (sockets it opens, and
    /// `/proc/sys/net` files, are the namespace's); a panic in `f` is re-raised here.
    pub fn on_thread<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let path = self.path();
        let thread = std::thread::spawn(move || {
            enter(&path);
            f()
        });
        match thread.join() {
            Ok(v) => v,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        if !self.owner {
            return;
        }
        if let Ok(o) = Command::new("ip")
            .args(["netns", "pids", &self.name])
            .output()
        {
            for pid in String::from_utf8_lossy(&o.stdout).split_whitespace() {
                let _ = Command::new("kill").args(["-9", pid]).status();
            }
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// Moves the calling thread into the namespace mounted at `path`.
fn enter(path: &str) {
    let f = File::open(path).unwrap();
    setns(&f, CloneFlags::CLONE_NEWNET).unwrap();
}

/// Runs `args[0]` with the rest as arguments; panics unless it succeeds; returns its stdout.
pub fn run(args: &[&str]) -> String {
    let out = Command::new(args[0]).args(&args[1..]).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}
