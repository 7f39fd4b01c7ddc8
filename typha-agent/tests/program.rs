//! The `typha-agent` program as a process: what it logs, where and how.

// In tests a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::io::BufRead;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const AGENT: &str = env!("CARGO_BIN_EXE_typha-agent");

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The log lines the agent writes to a pipe in its first seconds, pointed at a server that is
/// not there (`--dry-run`: it opens no dataplane and waits to sync).
fn log_lines(extra: &[&str]) -> Vec<String> {
    let mut child = Command::new(AGENT)
        .args(["--addr", &format!("127.0.0.1:{}", free_port())])
        .args(["--nodename", "node-a", "--dry-run"])
        .args(["--health-addr", &format!("127.0.0.1:{}", free_port())])
        .args(extra)
        .env("RUST_LOG", "debug")
        .env_remove("NO_COLOR")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(l).is_err() {
                return;
            }
        }
    });
    let mut lines = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while lines.len() < 3 && Instant::now() < deadline {
        if let Ok(l) = rx.recv_timeout(Duration::from_millis(100)) {
            lines.push(l);
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    lines
}

#[test]
fn logs_on_a_pipe_are_plain_text_or_json_lines_without_colour() {
    let text = log_lines(&[]);
    assert!(!text.is_empty(), "the agent logged nothing");
    for l in &text {
        assert!(
            !l.contains('\u{1b}'),
            "a terminal escape in a piped log line: {l:?}"
        );
    }
    let json = log_lines(&["--log-json"]);
    assert!(!json.is_empty(), "the agent logged nothing");
    for l in &json {
        let v: serde_json::Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}"));
        assert!(v["level"].is_string(), "{l}");
    }
}
