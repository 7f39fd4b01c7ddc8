//! The `typha-agent` program as a process: what it logs, where and how.

// In tests a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::io::BufRead;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const AGENT: &str = env!("CARGO_BIN_EXE_typha-agent");

fn free_port() -> u16 {
    // Below the ephemeral range: never given to an outgoing connection meanwhile.
    typha_test_support::control_plane::free_port().expect("a free port")
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

/// GET `path` from 127.0.0.1:`port`: the body of a 200, or `None`.
fn get(port: u16, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n").as_bytes(),
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let (head, body) = out.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_owned())
}

#[test]
fn metrics_include_the_process_cpu_memory_and_file_descriptors() {
    let health = free_port();
    let mut child = Command::new(AGENT)
        .args(["--addr", &format!("127.0.0.1:{}", free_port())])
        .args(["--nodename", "node-a", "--dry-run"])
        .args(["--health-addr", &format!("127.0.0.1:{health}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let text = loop {
        if let Some(t) = get(health, "/metrics") {
            break Some(t);
        }
        if Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let _ = child.kill();
    let _ = child.wait();
    let text = text.expect("the agent served no /metrics within 10 s");
    for (name, ty) in [
        ("process_cpu_seconds_total", "counter"),
        ("process_resident_memory_bytes", "gauge"),
        ("process_virtual_memory_bytes", "gauge"),
        ("process_open_fds", "gauge"),
        ("process_max_fds", "gauge"),
        ("process_start_time_seconds", "gauge"),
    ] {
        assert!(
            text.contains(&format!("\n# TYPE {name} {ty}\n")),
            "{name} ({ty}) in\n{text}"
        );
        let value: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no sample of {name}"))
            .parse()
            .unwrap();
        // A process a moment old may not have used a clock tick (10 ms) of CPU yet.
        let least = if name == "process_cpu_seconds_total" {
            0.0
        } else {
            1.0
        };
        assert!(value >= least, "{name} {value}");
    }
    // Beside the client's own (one registry).
    assert!(text.contains("\n# TYPE typha_client_"), "{text}");
}
