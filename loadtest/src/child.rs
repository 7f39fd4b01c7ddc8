//! Child processes (swarms, the bare broadcaster): this same binary in another role, commands
//! on stdin, JSON events on stdout.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{ChildStdin, Command};
use tokio::sync::mpsc;

/// A running child.
pub(crate) struct Child {
    /// What it is, for messages.
    pub(crate) name: String,
    proc: tokio::process::Child,
    stdin: ChildStdin,
    events: mpsc::UnboundedReceiver<serde_json::Value>,
    /// The latest `progress` event.
    pub(crate) progress: Arc<Mutex<serde_json::Value>>,
}

impl Child {
    /// Starts this binary with `args`.
    pub(crate) fn spawn(name: &str, args: &[String]) -> anyhow::Result<Child> {
        let exe = std::env::current_exe().context("finding this executable")?;
        let mut proc = Command::new(exe)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {name}"))?;
        let stdin = proc.stdin.take().context("child stdin")?;
        let stdout = proc.stdout.take().context("child stdout")?;
        let (tx, events) = mpsc::unbounded_channel();
        let progress = Arc::new(Mutex::new(serde_json::Value::Null));
        let p2 = progress.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
                    continue;
                };
                if v["event"] == "progress" {
                    *p2.lock().unwrap_or_else(|p| p.into_inner()) = v;
                } else if tx.send(v).is_err() {
                    return;
                }
            }
        });
        Ok(Child {
            name: name.to_owned(),
            proc,
            stdin,
            events,
            progress,
        })
    }

    /// The child's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.proc.id().unwrap_or(0)
    }

    /// Sends one command line.
    pub(crate) async fn send(&mut self, line: &str) -> anyhow::Result<()> {
        self.stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .with_context(|| format!("writing to {}", self.name))?;
        self.stdin.flush().await?;
        Ok(())
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
        self.progress.lock().unwrap_or_else(|p| p.into_inner())[field]
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
