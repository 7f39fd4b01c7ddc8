//! Metrics encoding (issue 21): the cost of one `/metrics` scrape of a server's registry in the
//! Prometheus text format 0.0.4, for the two ways of getting Typha's exact names.
//!
//! - `prometheus`: the `prometheus` crate's registry and text encoder, with our summary
//!   (`typha_service::metrics`); what the workspace uses.
//! - `prometheus-client+rewrite`: prometheus-client's registry encoded with its OpenMetrics
//!   text encoder, then turned into 0.0.4 (counter samples named as their family, no `# EOF`),
//!   with the summaries (which prometheus-client cannot hold) written after it by hand.
//!
//! Both registries hold the same families as a tier server's `/metrics` (Typha's per-syncer
//! counters, gauges and summaries; ours, with every label value; the upstream client's), with
//! the same values; the bench first checks that both texts carry the same samples.
//!
//! Run: `cargo bench -p typha-service --bench metrics_encoding`. Results: BENCHMARKS.md.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    missing_docs
)]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use prometheus_client::metrics::counter::Counter as PcCounter;
use prometheus_client::metrics::family::Family as PcFamily;
use prometheus_client::metrics::gauge::Gauge as PcGauge;
use prometheus_client::metrics::histogram::Histogram as PcHistogram;
use prometheus_client::registry::Registry as PcRegistry;
use typha_service::metrics::{self as m, Summary, SummaryOpts};

#[derive(Clone, Copy)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
    Summary,
}

/// One family: name, kind, and its label (name and values), if any.
struct Fam {
    name: &'static str,
    kind: Kind,
    label: Option<(&'static str, &'static [&'static str])>,
}

const SYNCER: Option<(&str, &[&str])> = Some(("syncer", &["felix"]));

fn families() -> Vec<Fam> {
    use Kind::*;
    let f = |name, kind, label| Fam { name, kind, label };
    vec![
        // Typha's.
        f("typha_breadcrumb_seq_number", Gauge, SYNCER),
        f("typha_breadcrumb_non_block", Counter, SYNCER),
        f("typha_breadcrumb_block", Counter, SYNCER),
        f("typha_updates_total", Counter, SYNCER),
        f("typha_updates_skipped", Counter, SYNCER),
        f("typha_cache_size", Gauge, SYNCER),
        f("typha_breadcrumb_size", Summary, SYNCER),
        f("typha_snapshots_generated", Counter, SYNCER),
        f("typha_snapshots_reused", Counter, SYNCER),
        f("typha_snapshot_raw_bytes", Gauge, SYNCER),
        f("typha_snapshot_compressed_bytes", Gauge, SYNCER),
        f("typha_connections_accepted", Counter, None),
        f("typha_connections_dropped", Counter, None),
        f("typha_connections_active", Gauge, None),
        f("typha_connections_streaming", Gauge, SYNCER),
        f("typha_connections_grace_used", Counter, SYNCER),
        f("typha_client_snapshot_send_secs", Summary, SYNCER),
        f("typha_client_latency_secs", Summary, SYNCER),
        f("typha_client_write_latency_secs", Summary, SYNCER),
        f("typha_next_breadcrumb_latency_secs", Summary, SYNCER),
        f("typha_ping_latency", Summary, SYNCER),
        f("typha_kvs_per_msg", Summary, SYNCER),
        f("typha_log_errors", Counter, None),
        // Ours.
        f("typha_updates_invalid_total", Counter, None),
        f(
            "typha_frames_encoded_total",
            Counter,
            Some(("kind", &["delta", "span", "snapshot", "bucket"])),
        ),
        f(
            "typha_resumes_total",
            Counter,
            Some(("kind", &["deltas", "digest", "snapshot"])),
        ),
        f(
            "typha_connections_dropped_total",
            Counter,
            Some((
                "reason",
                &[
                    "too_many_connections",
                    "handshake",
                    "tls_identity",
                    "ping_timeout",
                    "write_timeout",
                    "fell_behind",
                    "protocol_error",
                    "shutdown",
                ],
            )),
        ),
        f("typha_syncs_waiting", Gauge, None),
        f("typha_bytes_sent_total", Counter, None),
        f("typha_client_ack_lag_secs", Histogram, None),
        // The upstream client's, on a tier server.
        f("typha_client_connected", Gauge, None),
        f("typha_client_reconnects_total", Counter, None),
        f(
            "typha_client_resumes_total",
            Counter,
            Some(("kind", &["deltas", "digest", "snapshot"])),
        ),
        f("typha_client_bytes_received_total", Counter, None),
        f("typha_client_staleness_seconds", Gauge, None),
    ]
}

fn buckets() -> Vec<f64> {
    m::exponential_buckets(0.0005, 2.0, 18)
}

/// Values every series gets (the same in both registries).
fn value(i: usize) -> u64 {
    1_000 + 37 * i as u64
}

fn summaries(fams: &[Fam]) -> Vec<Summary> {
    fams.iter()
        .filter(|f| matches!(f.kind, Kind::Summary))
        .map(|f| {
            let s = Summary::new(
                SummaryOpts::new(f.name, "help text of this summary")
                    .const_label("syncer", "felix"),
            )
            .unwrap();
            for i in 0..5_000 {
                s.observe((i % 977) as f64 * 0.001);
            }
            s
        })
        .collect()
}

fn observe_histogram(observe: impl Fn(f64)) {
    for i in 0..5_000 {
        observe((i % 977) as f64 * 0.0003);
    }
}

fn prometheus_registry(fams: &[Fam], sums: &[Summary]) -> prometheus::Registry {
    let r = prometheus::Registry::new();
    let mut sums = sums.iter();
    for (i, f) in fams.iter().enumerate() {
        let help = "help text of this family";
        match (f.kind, f.label) {
            (Kind::Counter, None) => m::counter(&r, f.name, help).inc_by(value(i)),
            (Kind::Counter, Some((l, vs))) => {
                let c = m::counter_vec(&r, f.name, help, &[l]);
                for (j, v) in vs.iter().enumerate() {
                    c.with_label_values(&[v]).inc_by(value(i + j));
                }
            }
            (Kind::Gauge, None) => m::gauge(&r, f.name, help).set(value(i) as i64),
            (Kind::Gauge, Some((l, vs))) => {
                let g = m::gauge_vec(&r, f.name, help, &[l]);
                for (j, v) in vs.iter().enumerate() {
                    g.with_label_values(&[v]).set(value(i + j) as i64);
                }
            }
            (Kind::Histogram, _) => {
                let h = m::histogram(&r, f.name, help, buckets());
                observe_histogram(|v| h.observe(v));
            }
            (Kind::Summary, _) => {
                m::register(&r, sums.next().unwrap().clone());
            }
        }
    }
    r
}

type Labels = Vec<(String, String)>;

fn client_registry(fams: &[Fam]) -> PcRegistry {
    let mut r = PcRegistry::default();
    for (i, f) in fams.iter().enumerate() {
        let help = "help text of this family";
        let sets: Vec<Labels> = match f.label {
            None => vec![vec![]],
            Some((l, vs)) => vs
                .iter()
                .map(|v| vec![(l.to_owned(), (*v).to_owned())])
                .collect(),
        };
        match (f.kind, f.label) {
            (Kind::Counter, None) => {
                let c = PcCounter::<u64>::default();
                c.inc_by(value(i));
                r.register(f.name, help, c);
            }
            (Kind::Gauge, None) => {
                let g = PcGauge::<i64>::default();
                g.set(value(i) as i64);
                r.register(f.name, help, g);
            }
            (Kind::Counter, _) => {
                let fam = PcFamily::<Labels, PcCounter>::default();
                for (j, s) in sets.iter().enumerate() {
                    fam.get_or_create(s).inc_by(value(i + j));
                }
                r.register(f.name, help, fam);
            }
            (Kind::Gauge, _) => {
                let fam = PcFamily::<Labels, PcGauge>::default();
                for (j, s) in sets.iter().enumerate() {
                    fam.get_or_create(s).set(value(i + j) as i64);
                }
                r.register(f.name, help, fam);
            }
            (Kind::Histogram, _) => {
                let h = PcHistogram::new(buckets());
                observe_histogram(|v| h.observe(v));
                r.register(f.name, help, h);
            }
            // prometheus-client has no summary: written by hand after the registry.
            (Kind::Summary, _) => {}
        }
    }
    r
}

/// prometheus-client's OpenMetrics text turned into 0.0.4, plus the summaries.
fn encode_rewritten(r: &PcRegistry, sums: &[Summary], out: &mut String) {
    let mut om = String::with_capacity(16 << 10);
    prometheus_client::encoding::text::encode_registry(&mut om, r).unwrap();
    let mut counter: Option<&str> = None;
    for line in om.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            counter = rest
                .split_once(' ')
                .filter(|(_, ty)| *ty == "counter")
                .map(|(name, _)| name);
        } else if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        } else if let Some(fam) = counter
            && let Some(rest) = line
                .strip_prefix(fam)
                .and_then(|r| r.strip_prefix("_total"))
        {
            out.push_str(fam);
            out.push_str(rest);
            out.push('\n');
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    for s in sums {
        let fam = prometheus::core::Collector::collect(s);
        let name = fam[0].name();
        let _ = writeln!(out, "# HELP {name} {}", fam[0].help());
        let _ = writeln!(out, "# TYPE {name} summary");
        for (q, v) in s.quantiles() {
            let _ = writeln!(out, "{name}{{syncer=\"felix\",quantile=\"{q}\"}} {v}");
        }
        let _ = writeln!(out, "{name}_sum{{syncer=\"felix\"}} {}", s.sum());
        let _ = writeln!(out, "{name}_count{{syncer=\"felix\"}} {}", s.count());
    }
}

/// Every sample (series → value text) and every family's type.
fn samples(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter(|l| !l.starts_with("# HELP"))
        .map(|l| match l.rsplit_once(' ') {
            Some((series, v)) if !l.starts_with('#') => {
                // Same numbers, whichever way each library prints them.
                let v: f64 = v.parse().unwrap();
                (normalize_le(series), format!("{v}"))
            }
            _ => (l.to_owned(), String::new()),
        })
        .collect()
}

/// A bucket bound as a number (`1` and `1.0` are the same bucket).
fn normalize_le(series: &str) -> String {
    let Some((head, rest)) = series.split_once("le=\"") else {
        return series.to_owned();
    };
    let (le, tail) = rest.split_once('"').unwrap();
    let le = match le {
        "+Inf" => "+Inf".to_owned(),
        x => format!("{}", x.parse::<f64>().unwrap()),
    };
    format!("{head}le=\"{le}\"{tail}")
}

fn bench(c: &mut Criterion) {
    let fams = families();
    let sums = summaries(&fams);
    let a = prometheus_registry(&fams, &sums);
    let b = client_registry(&fams);

    let text_a = m::encode(&a).unwrap();
    let mut text_b = String::new();
    encode_rewritten(&b, &sums, &mut text_b);
    let (sa, sb) = (samples(&text_a), samples(&text_b));
    assert_eq!(sa, sb, "the two encodings must carry the same samples");
    eprintln!(
        "{} families, {} samples, {} bytes",
        fams.len(),
        sa.keys().filter(|k| !k.starts_with('#')).count(),
        text_a.len()
    );

    let mut g = c.benchmark_group("metrics_encoding");
    g.bench_function("prometheus", |bch| {
        bch.iter(|| black_box(m::encode(black_box(&a)).unwrap()))
    });
    g.bench_function("prometheus-client+rewrite", |bch| {
        bch.iter(|| {
            let mut out = String::with_capacity(16 << 10);
            encode_rewritten(black_box(&b), black_box(&sums), &mut out);
            black_box(out)
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
