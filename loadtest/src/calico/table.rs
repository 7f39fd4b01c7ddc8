//! The `calico` scenario's Markdown report: the states checks, then one column per side with
//! the ratios.

use std::time::Duration;

use super::setup::{CalicoArgs, Side};
use super::states::{Checks, Diff};
use crate::harness::mib;
use crate::store::StoreKind;

/// The sides of a run, as the table shows them.
pub(super) struct Sides<'a> {
    /// The Calico-protocol fleet with `--syncer`'s connections, on typha-server.
    pub(super) calico: &'a Side,
    /// The same fleet with `--baseline-syncer`'s connections only, on typha-server.
    pub(super) fewer: Option<&'a Side>,
    /// The same nodes over our own protocol, on typha-server.
    pub(super) ours: Option<&'a Side>,
    /// The Calico-protocol fleet on Calico's Typha.
    pub(super) theirs: Option<&'a Side>,
}

impl Sides<'_> {
    /// Whether every side that ran lost nothing.
    pub(super) fn all_ok(&self) -> bool {
        self.calico.ok
            && [self.fewer, self.ours, self.theirs]
                .iter()
                .all(|s| s.is_none_or(|s| s.ok))
    }
}

/// The Markdown report: the states check, then one column per side with the ratios, then
/// each syncer type's connections.
pub(super) fn table(a: &CalicoArgs, checks: &Checks, sides: &Sides<'_>, took: Duration) -> String {
    let c = sides.calico;
    let mut t_ = format!(
        "calico: {} nodes ({}, {}), {} connections a node ({}), {} Calico KVs a node ({} in \
         our cache), {} updates/s for {} s per side; {:.0} s in all\n\n",
        a.nodes,
        if a.common.plain {
            "plaintext"
        } else {
            "mutual TLS"
        },
        match a.datastore {
            None => "embedded datastore",
            Some(StoreKind::Etcd) => "etcd",
            Some(StoreKind::Kubernetes) => "kube-apiserver",
        },
        c.by_syncer.len(),
        c.protocol.trim_start_matches("calico/"),
        c.kvs,
        sides.ours.map_or(0, |o| o.kvs),
        a.rate,
        a.secs,
        took.as_secs_f64(),
    );
    t_ += &checks_table(checks);
    // Columns: Calico protocol → ours, [fewer connections], [our protocol → ours], [Calico
    // protocol → Calico's].
    let mut cols: Vec<(String, &Side)> = vec![("Calico protocol, typha-server".into(), c)];
    if let Some(f) = sides.fewer {
        cols.push((
            format!(
                "Calico protocol ({} only), typha-server",
                f.protocol.trim_start_matches("calico/")
            ),
            f,
        ));
    }
    if let Some(o) = sides.ours {
        cols.push(("our protocol, typha-server".into(), o));
    }
    if let Some(t) = sides.theirs {
        cols.push(("Calico protocol, calico-typha".into(), t));
    }
    // Ratio columns: (heading, numerator, denominator).
    let mut ratios: Vec<(String, &Side, &Side)> = Vec::new();
    if let Some(f) = sides.fewer {
        ratios.push((
            format!(
                "{} / {}",
                c.protocol.trim_start_matches("calico/"),
                f.protocol.trim_start_matches("calico/")
            ),
            c,
            f,
        ));
    }
    if let Some(o) = sides.ours {
        ratios.push(("Calico / ours (typha-server)".into(), c, o));
    }
    if let Some(t) = sides.theirs {
        ratios.push(("calico-typha / typha-server (Calico protocol)".into(), t, c));
    }
    let mut head = String::from("| measure |");
    for (name, _) in &cols {
        head += &format!(" {name} |");
    }
    for (name, _, _) in &ratios {
        head += &format!(" {name} |");
    }
    t_ += &head;
    t_ += "\n|";
    t_ += &"---|".repeat(head.matches('|').count() - 1);
    t_ += "\n";
    let row = |name: &str, f: &dyn Fn(&Side) -> f64, fmt: &dyn Fn(f64) -> String| {
        let mut r = format!("| {name} |");
        for (_, s) in &cols {
            let v = f(s);
            // Not measured on this side (NaN): a dash.
            let cell = if v.is_nan() { "-".into() } else { fmt(v) };
            r += &format!(" {cell} |");
        }
        for (_, x, y) in &ratios {
            let (x, y) = (f(x), f(y));
            r += &if x.is_nan() || y.is_nan() || y <= 0.0 {
                " - |".to_owned()
            } else {
                format!(" {:.2} |", x / y)
            };
        }
        r + "\n"
    };
    let ms = |v: f64| format!("{v:.1} ms");
    let secs = |v: f64| format!("{v:.2} s");
    let us = |v: f64| format!("{v:.2} µs");
    let mb = |v: f64| format!("{:.1} MiB", mib(v as u64));
    let kib = |v: f64| format!("{:.1} KiB", v / 1024.0);
    let b = |v: f64| format!("{v:.1} B");
    let n = |v: f64| format!("{v:.0}");
    let mcores = |v: f64| format!("{:.1} m", v * 1000.0);
    // Per 1,000 nodes or connections: millicores.
    let per_k = |v: f64, of: u64| v * 1000.0 / of.max(1) as f64;
    t_ += &row("connections", &|s| s.connections as f64, &n);
    t_ += &row("KVs a node receives", &|s| s.kvs as f64, &n);
    t_ += &row("all connected after", &|s| s.connect_secs, &secs);
    t_ += &row("all in sync after", &|s| s.sync_secs, &secs);
    t_ += &row(
        "server CPU, initial sync",
        &|s| s.server_cpu_sync_secs,
        &secs,
    );
    t_ += &row("swarm CPU, initial sync", &|s| s.swarm_cpu_sync_secs, &secs);
    t_ += &row(
        "server cores, quiet, per 1,000 nodes",
        &|s| per_k(s.server_cpu_quiet_secs / s.quiet_secs.max(1e-9), s.nodes),
        &mcores,
    );
    t_ += &row("latency p50", &|s| s.latency_ms.p50, &ms);
    t_ += &row("latency p99", &|s| s.latency_ms.p99, &ms);
    t_ += &row("latency max", &|s| s.latency_ms.max, &ms);
    t_ += &row("server CPU, churn", &|s| s.server_cpu_churn_secs, &secs);
    t_ += &row(
        "server CPU per delivery",
        &|s| s.server_cpu_per_delivery_us,
        &us,
    );
    t_ += &row(
        "server cores, churn, per 1,000 nodes",
        &|s| per_k(s.server_cores_churn, s.nodes),
        &mcores,
    );
    t_ += &row("swarm CPU, churn", &|s| s.swarm_cpu_churn_secs, &secs);
    t_ += &row(
        "swarm CPU per delivery",
        &|s| s.swarm_cpu_per_delivery_us,
        &us,
    );
    t_ += &row(
        "swarm CPU per KV per node, initial sync",
        &|s| s.swarm_cpu_per_kv_us,
        &us,
    );
    t_ += &row("server RSS idle", &|s| s.rss_idle as f64, &mb);
    t_ += &row(
        "server RSS idle: waited to settle",
        &|s| s.idle_wait.rss_idle_wait_secs,
        &secs,
    );
    t_ += &row("server RSS connected", &|s| s.rss_connected as f64, &mb);
    t_ += &row("server RSS quiet", &|s| s.rss_quiet as f64, &mb);
    t_ += &row("server RSS peak", &|s| s.rss_peak as f64, &mb);
    t_ += &row("server RSS per node", &|s| s.rss_per_node, &kib);
    t_ += &row("server RSS per connection", &|s| s.rss_per_connection, &kib);
    t_ += &row(
        "server RSS per node, quiet",
        &|s| s.rss_quiet_per_node,
        &kib,
    );
    t_ += &row(
        "server RSS per connection, quiet",
        &|s| s.rss_quiet_per_connection,
        &kib,
    );
    t_ += &row("idle RSS per KV received", &|s| s.rss_idle_per_kv, &b);
    t_ += &row(
        "bytes written per KV (initial sync)",
        &|s| s.bytes_per_kv,
        &b,
    );
    t_ += &row(
        "bytes written per update per node",
        &|s| s.bytes_per_update,
        &b,
    );
    t_ += &row("deliveries", &|s| s.deliveries as f64, &n);
    t_ += &row("deliveries expected", &|s| s.deliveries_expected as f64, &n);
    t_ += &row(
        "nodes exact after sync",
        &|s| s.nodes_exact_before_churn as f64,
        &n,
    );
    t_ += &row("nodes exact at the end", &|s| s.nodes_exact as f64, &n);
    if c.kill_resync_secs.is_some() {
        let opt = |v: Option<f64>| v.unwrap_or(f64::NAN);
        t_ += &row(
            "SIGKILL: restarted server ready after",
            &|s| opt(s.kill_ready_secs),
            &secs,
        );
        t_ += &row(
            "SIGKILL: all in sync again after",
            &|s| opt(s.kill_resync_secs),
            &secs,
        );
        t_ += &row(
            "SIGKILL: restarted server's CPU until then",
            &|s| opt(s.kill_server_cpu_secs),
            &secs,
        );
        t_ += &row(
            "SIGKILL: extra sessions ended in the resync",
            &|s| opt(s.kill_extra_reconnects.map(|v| v as f64)),
            &n,
        );
    }
    for (name, s) in &cols {
        if s.protocol.starts_with("calico/") {
            t_ += &format!(
                "{name}: {} of {} full connections exact at the end; {} sessions reconnected \
                 before all were in sync, {} after{}{}.\n",
                s.full_nodes_exact,
                s.full_nodes,
                s.reconnects_sync,
                s.reconnects,
                if s.server_drops_sync.is_empty() {
                    String::new()
                } else {
                    format!("; the server closed {:?} until then", s.server_drops_sync)
                },
                if s.kill_server_drops.is_empty() {
                    String::new()
                } else {
                    format!(
                        "; after the SIGKILL the restarted server closed {:?} until all were in \
                         sync again",
                        s.kill_server_drops
                    )
                }
            );
        }
    }
    for (name, s) in &cols {
        t_ += &syncers_table(name, s);
    }
    t_ += if !sides.all_ok() {
        "LOST: deliveries missing or nodes diverged (see the rows above)"
    } else if !checks.ours_vs_translation.iter().all(Diff::equal) {
        "FAILED: typha-server's Calico states differ from the libcalico translation (above)"
    } else {
        "nothing lost"
    };
    t_
}

/// A Calico-protocol side's connections, one row per syncer type (nothing for ours, or for a
/// side with felix alone: the table above is its row).
fn syncers_table(name: &str, s: &Side) -> String {
    if s.by_syncer.len() < 2 {
        return String::new();
    }
    let mut out = format!(
        "\n{name}, per syncer type (the churn relabels workload endpoints: \"no\" types are \
         expected to receive none of it, and are judged by their state and by staying \
         connected):\n\n| syncer | KVs | churn reaches it | in sync after | deliveries / \
         expected | updates during the churn | latency p50 / p99 / max | exact after sync / \
         at the end | full exact | the server counts streaming | reconnects before sync / after | \
         ok |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    );
    for b in &s.by_syncer {
        let latency = if b.latency_ms.count == 0 {
            "-".to_owned()
        } else {
            format!(
                "{:.1} / {:.1} / {:.1} ms",
                b.latency_ms.p50, b.latency_ms.p99, b.latency_ms.max
            )
        };
        out += &format!(
            "| {} | {} | {} | {:.2} s | {} / {} | {} | {latency} | {} / {} of {} | {} of {} | {} \
             | {} / {} | {} |\n",
            b.syncer,
            b.kvs,
            if b.churned { "yes" } else { "no" },
            b.sync_secs,
            b.deliveries,
            b.deliveries_expected,
            b.updates_in_churn,
            b.exact_before_churn,
            b.exact,
            s.nodes,
            b.full_exact,
            b.full,
            b.server_streaming
                .map_or_else(|| "-".to_owned(), |n| n.to_string()),
            b.reconnects_sync,
            b.reconnects,
            if b.ok { "yes" } else { "NO" },
        );
    }
    out + "\n"
}

/// How many differences to list per syncer type in the table (`--json` has them all).
const LISTED: usize = 12;

fn checks_table(c: &Checks) -> String {
    let mut out = String::new();
    for (title, first, second, diffs) in [
        (
            "typha-server's Calico states against the libcalico translation of the cluster",
            "typha-server",
            "translation",
            &c.ours_vs_translation,
        ),
        (
            "typha-server's Calico states against calico-typha's, same datastore (JSON compared \
             as values, revisions left out)",
            "typha-server",
            "calico-typha",
            &c.ours_vs_calico_typha,
        ),
    ] {
        if diffs.is_empty() {
            continue;
        }
        out += &format!(
            "{title}:\n| syncer | keys {first} / {second} | same | only {first} | only {second} \
             | values differ |\n|---|---|---|---|---|---|\n"
        );
        for d in diffs {
            out += &format!(
                "| {} | {} / {} | {} | {} | {} | {} |\n",
                d.syncer,
                d.keys.0,
                d.keys.1,
                d.same,
                d.only_first.len(),
                d.only_second.len(),
                d.differ.len()
            );
        }
        for d in diffs {
            for k in d.only_first.iter().take(LISTED) {
                out += &format!("- {}: only {first}: `{k}`\n", d.syncer);
            }
            for k in d.only_second.iter().take(LISTED) {
                out += &format!("- {}: only {second}: `{k}`\n", d.syncer);
            }
            for (k, x, y) in d.differ.iter().take(LISTED) {
                out += &format!(
                    "- {}: `{k}`:\n  - {first}: `{x}`\n  - {second}: `{y}`\n",
                    d.syncer
                );
            }
        }
        out += "\n";
    }
    out
}
