//! The `typha-tail` program: connect to a typha server the way an agent does and print the
//! stream.
//!
//! Lines: `status <status>`, then `+ key` (new), `~ key` (updated), `- key` (deleted), with the
//! revision; `stale <age>s <reason>` when the server says its view of the datastore is stale,
//! `current` when it is again; `--json` prints one JSON object per line instead, with decoded values.
//! `--summary` prints counts per key type, the status and the digest once in sync, then exits.
//! Failures (server unreachable, TLS refused, version mismatch) are one line on stderr and a
//! non-zero exit when no server could be used at all: 64 for a bad setting, 69 when no server
//! could be used.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::Parser;
use tokio::sync::Notify;
use typha_protocol::model::{KeyType, SyncStatus, Update, UpdateKind};
use typha_service::exit;

use crate::cli::ConnectArgs;
use crate::conn::session;
use crate::metrics::ClientMetrics;
use crate::{ClientConfig, ConfigError, Staleness, Store, SyncerCallbacks};

const PROGRAM: &str = "typha-tail";

/// Print what a typha server streams, as an agent would receive it.
#[derive(Debug, Parser)]
#[command(name = "typha-tail", version, about)]
pub struct Cli {
    #[command(flatten)]
    connect: ConnectArgs,
    /// Node name to present.
    #[arg(long, default_value = "typha-tail")]
    hostname: String,
    /// One JSON object per line, with decoded values.
    #[arg(long)]
    json: bool,
    /// Print counts per key type, the status and the digest once in sync, then exit.
    #[arg(long)]
    summary: bool,
}

struct Printer {
    json: bool,
    summary: bool,
    counts: BTreeMap<KeyType, i64>,
    in_sync: Arc<Notify>,
    synced: Arc<AtomicBool>,
    /// What the server last said of its view of the datastore.
    staleness: Option<Staleness>,
    out: std::io::BufWriter<std::io::Stdout>,
}

impl SyncerCallbacks for Printer {
    fn on_status_updated(&mut self, status: SyncStatus) {
        if status == SyncStatus::InSync {
            self.synced.store(true, Ordering::Release);
            self.in_sync.notify_one();
        }
        if self.summary {
            return;
        }
        let _ = if self.json {
            writeln!(
                self.out,
                "{}",
                serde_json::json!({"type": "status", "status": status.to_string()})
            )
        } else {
            writeln!(self.out, "status {status}")
        };
        let _ = self.out.flush();
    }

    fn on_staleness(&mut self, st: &Staleness) {
        let changed = self.staleness.as_ref().is_none_or(|s| s.stale != st.stale);
        self.staleness = Some(st.clone());
        if self.summary || !changed {
            return;
        }
        let _ = if self.json {
            writeln!(
                self.out,
                "{}",
                serde_json::json!({"type": "staleness", "stale": st.stale, "age_secs": st.age().as_secs_f64(), "reason": st.reason})
            )
        } else if st.stale {
            writeln!(
                self.out,
                "stale {:.1}s {}",
                st.age().as_secs_f64(),
                st.reason
            )
        } else {
            writeln!(self.out, "current")
        };
        let _ = self.out.flush();
    }

    fn on_updates(&mut self, updates: Vec<Update>) {
        for u in updates {
            let ty = u.key.key_type();
            *self.counts.entry(ty).or_default() += match u.kind {
                UpdateKind::New => 1,
                UpdateKind::Deleted => -1,
                UpdateKind::Updated => 0,
            };
            if self.summary {
                continue;
            }
            let _ = if self.json {
                let value = match u.decode_value() {
                    Ok(Some(v)) => serde_json::to_value(&v).unwrap_or_default(),
                    Ok(None) => serde_json::Value::Null,
                    Err(e) => serde_json::json!({"undecodable": e.to_string()}),
                };
                let kind = match u.kind {
                    UpdateKind::New => "new",
                    UpdateKind::Updated => "updated",
                    UpdateKind::Deleted => "deleted",
                };
                writeln!(
                    self.out,
                    "{}",
                    serde_json::json!({"type": "update", "kind": kind, "key": u.key.as_str(), "key_type": ty.as_str(), "revision": u.revision.0, "value": value})
                )
            } else {
                let mark = match u.kind {
                    UpdateKind::New => '+',
                    UpdateKind::Updated => '~',
                    UpdateKind::Deleted => '-',
                };
                writeln!(self.out, "{mark} {} rev={}", u.key, u.revision)
            };
        }
        let _ = self.out.flush();
    }
}

fn config(cli: &Cli) -> Result<ClientConfig, ConfigError> {
    cli.connect.client_config(&cli.hostname, PROGRAM)
}

/// The program, with the process's arguments.
pub fn main() -> ExitCode {
    main_from(std::env::args_os())
}

/// The program, with these arguments (the first is the program's name).
pub fn main_from<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = match typha_service::cli::parse::<Cli>(PROGRAM, args) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let cfg = match config(&cli) {
        Ok(c) => c,
        Err(e) => return exit::invalid_config(PROGRAM, e),
    };
    let rt = match typha_service::runtime::current_thread() {
        Ok(rt) => rt,
        Err(e) => return exit::failed(PROGRAM, format_args!("cannot start the runtime: {e}")),
    };
    rt.block_on(tail(cli, cfg))
}

async fn tail(cli: Cli, cfg: ClientConfig) -> ExitCode {
    let tls = match cfg.tls.as_ref().map(crate::tls::client_config).transpose() {
        Ok(t) => t,
        Err(e) => return exit::invalid_config(PROGRAM, e),
    };
    let in_sync = Arc::new(Notify::new());
    let synced = Arc::new(AtomicBool::new(false));
    let mut printer = Printer {
        json: cli.json,
        summary: cli.summary,
        counts: BTreeMap::new(),
        in_sync: in_sync.clone(),
        synced: synced.clone(),
        staleness: None,
        out: std::io::BufWriter::new(std::io::stdout()),
    };
    let metrics = ClientMetrics::unregistered();
    let mut store = Store::new();
    store.start(&mut printer);
    let mut ever_connected = false;
    loop {
        let targets = match cfg.discovery.discover(&cfg.hostname).await {
            Ok(t) => t,
            Err(e) => return exit::unavailable(PROGRAM, e),
        };
        let mut last_error = None;
        for t in &targets {
            let end = {
                let s = session(t, &cfg, tls.as_ref(), &mut store, &mut printer, &metrics);
                tokio::select! {
                    end = s => Some(end),
                    () = in_sync.notified(), if cli.summary => None,
                }
            };
            let Some(end) = end else {
                let digest = store.digest();
                let non_empty = digest.buckets().iter().filter(|b| **b != 0).count();
                println!(
                    "server {} status {}",
                    t.addr,
                    store.status().map(|s| s.to_string()).unwrap_or_default()
                );
                for (ty, n) in &printer.counts {
                    println!("{:<20} {n}", ty.as_str());
                }
                println!("{:<20} {}", "total", store.len());
                println!(
                    "digest {:016x} ({non_empty}/1024 buckets non-empty)",
                    digest.combined()
                );
                match &printer.staleness {
                    Some(s) if s.stale => println!(
                        "datastore view stale ({:.1}s: {})",
                        s.age().as_secs_f64(),
                        s.reason
                    ),
                    Some(_) => println!("datastore view current"),
                    None => println!("datastore view not reported by this server"),
                }
                return ExitCode::SUCCESS;
            };
            if end.synced || synced.load(Ordering::Acquire) {
                ever_connected = true;
            }
            store.disconnected(&mut printer);
            if ever_connected && !cli.summary {
                eprintln!("typha-tail: {}; reconnecting", end.error);
            }
            last_error = Some(end.error);
            if ever_connected {
                break;
            }
        }
        if !ever_connected {
            return match last_error {
                Some(e) => exit::unavailable(PROGRAM, e),
                None => exit::unavailable(PROGRAM, "no server to try"),
            };
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
