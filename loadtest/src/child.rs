//! Child processes (swarms, the bare broadcaster): this same binary in another role, commands
//! on stdin, JSON events on stdout.
//!
//! Every wait on a child is bounded and says what it waited for. A child that exits, or whose
//! stdout can no longer be read, is noticed at once ([`Child::gone`]); a child that stops
//! printing progress (a swarm prints a line every half second from a thread of its own, so a
//! silent one is stuck, not busy) is noticed after [`PROGRESS_SILENCE`].

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{ChildStdin, Command};
use tokio::sync::mpsc;

/// A child that printed no progress for this long is stuck: waits on it fail.
pub(crate) const PROGRESS_SILENCE: Duration = Duration::from_secs(60);

/// How long writing one command line may take (a few bytes into a pipe: only a child that
/// stopped reading its stdin makes it wait).
const SEND_WITHIN: Duration = Duration::from_secs(30);

/// What the reader of a child's stdout saw last.
#[derive(Debug)]
struct Seen {
    /// The latest `progress` event.
    progress: serde_json::Value,
    /// When a progress event last arrived (or the child started).
    at: Instant,
    /// Why stdout is no longer read (the child exited, or a line could not be read).
    ended: Option<String>,
}

/// A running child.
pub(crate) struct Child {
    /// What it is, for messages.
    pub(crate) name: String,
    proc: tokio::process::Child,
    stdin: ChildStdin,
    events: mpsc::UnboundedReceiver<serde_json::Value>,
    seen: Arc<Mutex<Seen>>,
    /// Progress silence after which it counts as stuck.
    silence: Duration,
}

/// A handle on a child's latest progress, for samplers that outlive a borrow of the child.
#[derive(Clone)]
pub(crate) struct Progress(Arc<Mutex<Seen>>);

impl Progress {
    /// The latest `progress` event.
    pub(crate) fn latest(&self) -> serde_json::Value {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .progress
            .clone()
    }
}

impl Child {
    /// Starts this binary with `args`.
    pub(crate) fn spawn(name: &str, args: &[String]) -> anyhow::Result<Child> {
        let exe = std::env::current_exe().context("finding this executable")?;
        let mut cmd = Command::new(exe);
        cmd.args(args);
        Child::start(name, cmd)
    }

    /// Starts this binary with `args` in the network namespace `netns` (`ip netns exec`,
    /// which enters it and then runs the binary in its own place: the child is the binary).
    pub(crate) fn spawn_in(netns: &str, name: &str, args: &[String]) -> anyhow::Result<Child> {
        let exe = std::env::current_exe().context("finding this executable")?;
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", netns]).arg(exe).args(args);
        Child::start(name, cmd)
    }

    /// Starts `cmd` as a child speaking this module's line protocol.
    fn start(name: &str, mut cmd: Command) -> anyhow::Result<Child> {
        let mut proc = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {name}"))?;
        let stdin = proc.stdin.take().context("child stdin")?;
        let stdout = proc.stdout.take().context("child stdout")?;
        let (tx, events) = mpsc::unbounded_channel();
        let seen = Arc::new(Mutex::new(Seen {
            progress: serde_json::Value::Null,
            at: Instant::now(),
            ended: None,
        }));
        let s2 = seen.clone();
        tokio::spawn(async move {
            // Read every line for as long as the child lives, whatever it is: a reader that
            // stopped would leave the child blocked on a full pipe, and its progress frozen.
            let mut lines = BufReader::new(stdout).lines();
            let why = loop {
                match lines.next_line().await {
                    Ok(Some(line)) => {
                        let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
                            continue;
                        };
                        if v["event"] == "progress" {
                            let mut s = s2.lock().unwrap_or_else(|p| p.into_inner());
                            s.progress = v;
                            s.at = Instant::now();
                        } else {
                            // The receiver is gone only when the child is dropped.
                            let _ = tx.send(v);
                        }
                    }
                    Ok(None) => break "its stdout closed (it exited)".to_owned(),
                    Err(e) => break format!("reading its stdout: {e}"),
                }
            };
            s2.lock().unwrap_or_else(|p| p.into_inner()).ended = Some(why);
        });
        Ok(Child {
            name: name.to_owned(),
            proc,
            stdin,
            events,
            seen,
            silence: PROGRESS_SILENCE,
        })
    }

    /// The child's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.proc.id().unwrap_or(0)
    }

    /// A handle on its progress.
    pub(crate) fn progress(&self) -> Progress {
        Progress(self.seen.clone())
    }

    /// Why waiting on this child is hopeless, if it is: it exited, its stdout cannot be read,
    /// or it has printed no progress for [`PROGRESS_SILENCE`] (only for children that print
    /// progress at all).
    pub(crate) fn gone(&self) -> Option<String> {
        let s = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(why) = &s.ended {
            return Some(format!("{}: {why}", self.name));
        }
        let silent = s.at.elapsed();
        (!s.progress.is_null() && silent > self.silence).then(|| {
            format!(
                "{}: no progress reported for {:.0} s (stuck)",
                self.name,
                silent.as_secs_f64()
            )
        })
    }

    /// Sends one command line.
    pub(crate) async fn send(&mut self, line: &str) -> anyhow::Result<()> {
        let write = async {
            self.stdin.write_all(format!("{line}\n").as_bytes()).await?;
            self.stdin.flush().await
        };
        match tokio::time::timeout(SEND_WITHIN, write).await {
            Ok(r) => r.with_context(|| format!("sending {line:?} to {}", self.name)),
            Err(_) => bail!(
                "{} did not take the command {line:?} within {SEND_WITHIN:?} (not reading its stdin)",
                self.name
            ),
        }
    }

    /// Waits for the next event named `kind` (other events are dropped).
    pub(crate) async fn expect(
        &mut self,
        kind: &str,
        within: Duration,
    ) -> anyhow::Result<serde_json::Value> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            match tokio::time::timeout_at(deadline, self.events.recv()).await {
                Err(_) => bail!("{} did not report {kind} within {within:?}", self.name),
                Ok(None) => bail!("{} exited before reporting {kind}", self.name),
                Ok(Some(v)) if v["event"] == kind => return Ok(v),
                Ok(Some(v)) if v["event"] == "error" => bail!("{}: {}", self.name, v["message"]),
                Ok(Some(_)) => {}
            }
        }
    }

    /// A number from the latest progress event.
    pub(crate) fn progress_u64(&self, field: &str) -> u64 {
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).progress[field]
            .as_u64()
            .unwrap_or(0)
    }

    /// Waits for the child to exit (killing it after `within`).
    pub(crate) async fn wait(mut self, within: Duration) -> anyhow::Result<()> {
        drop(self.stdin);
        match tokio::time::timeout(within, self.proc.wait()).await {
            Ok(status) => {
                let status = status?;
                anyhow::ensure!(status.success(), "{} exited with {status}", self.name);
                Ok(())
            }
            Err(_) => {
                let _ = self.proc.kill().await;
                bail!("{} did not exit within {within:?}; killed", self.name)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// A child that prints one progress line, then does `then` (a shell command).
    fn child(then: &str) -> Child {
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg(format!(
            "echo '{{\"event\":\"progress\",\"in_sync\":1}}'; {then}"
        ));
        let mut c = Child::start("test child", cmd).unwrap();
        c.silence = Duration::from_secs(2);
        c
    }

    // Before every wait checked its children, both of these waited out the whole limit (half
    // an hour in the calico scenario) on a count that could no longer move.

    #[tokio::test]
    async fn a_wait_on_a_child_that_stops_reporting_fails_naming_it() {
        let swarms = [child("exec sleep 600")];
        let started = Instant::now();
        let e =
            crate::harness::wait_for(&swarms, "in_sync", 2, "in sync", Duration::from_secs(1800))
                .await
                .unwrap_err()
                .to_string();
        assert!(e.contains("no progress reported"), "{e}");
        assert!(e.contains("test child"), "{e}");
        assert!(e.contains("in_sync to reach 2 (at 1)"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(60), "{e}");
    }

    #[tokio::test]
    async fn a_wait_on_a_child_that_exited_fails_at_once() {
        let swarms = [child("exit 0")];
        let e =
            crate::harness::wait_for(&swarms, "in_sync", 2, "in sync", Duration::from_secs(1800))
                .await
                .unwrap_err()
                .to_string();
        assert!(e.contains("exited"), "{e}");
    }

    #[tokio::test]
    async fn a_reached_count_is_not_a_failure_and_events_still_arrive() {
        let mut c = child("echo '{\"event\":\"done\"}'; exec sleep 600");
        let swarms = std::slice::from_mut(&mut c);
        crate::harness::wait_for(swarms, "in_sync", 1, "in sync", Duration::from_secs(30))
            .await
            .unwrap();
        c.expect("done", Duration::from_secs(30)).await.unwrap();
    }
}
