#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::time::{Duration, Instant};

use prometheus::Registry;

use super::quantiles::Stream;
use super::summary::testing::{new_at, observe_at, quantiles_at};
use super::*;

#[test]
fn a_small_registry_exactly() {
    let r = Registry::new();
    let c = counter(&r, "typha_connections_accepted", "Connections accepted.");
    c.inc_by(3);
    let ours = counter(&r, "typha_bytes_sent_total", "Bytes written to clients.");
    ours.inc_by(1234);
    let by_kind = counter_vec(&r, "typha_frames_encoded_total", "Frames.", &["kind"]);
    by_kind.with_label_values(&["delta"]).inc();
    by_kind.with_label_values(&["bucket"]);
    let g = gauge_vec(&r, "typha_cache_size", "KVs.", &["syncer"]);
    g.with_label_values(&["felix"]).set(42);
    let f = float_gauge(&r, "typha_client_staleness_seconds", "Staleness.");
    f.set(1.5);
    let h = histogram(&r, "typha_ack_secs", "Ack lag.", vec![0.5, 1.0]);
    h.observe(0.25);
    h.observe(0.75);
    h.observe(2.0);
    let s = summary(
        &r,
        SummaryOpts::new("typha_ping_latency", "Round-trip ping latency to client.")
            .const_label("syncer", "felix"),
    );
    s.observe(0.5);
    let want = "\
# HELP typha_ack_secs Ack lag.
# TYPE typha_ack_secs histogram
typha_ack_secs_bucket{le=\"0.5\"} 1
typha_ack_secs_bucket{le=\"1\"} 2
typha_ack_secs_bucket{le=\"+Inf\"} 3
typha_ack_secs_sum 3
typha_ack_secs_count 3
# HELP typha_bytes_sent_total Bytes written to clients.
# TYPE typha_bytes_sent_total counter
typha_bytes_sent_total 1234
# HELP typha_cache_size KVs.
# TYPE typha_cache_size gauge
typha_cache_size{syncer=\"felix\"} 42
# HELP typha_client_staleness_seconds Staleness.
# TYPE typha_client_staleness_seconds gauge
typha_client_staleness_seconds 1.5
# HELP typha_connections_accepted Connections accepted.
# TYPE typha_connections_accepted counter
typha_connections_accepted 3
# HELP typha_frames_encoded_total Frames.
# TYPE typha_frames_encoded_total counter
typha_frames_encoded_total{kind=\"bucket\"} 0
typha_frames_encoded_total{kind=\"delta\"} 1
# HELP typha_ping_latency Round-trip ping latency to client.
# TYPE typha_ping_latency summary
typha_ping_latency{syncer=\"felix\",quantile=\"0.5\"} 0.5
typha_ping_latency{syncer=\"felix\",quantile=\"0.9\"} 0.5
typha_ping_latency{syncer=\"felix\",quantile=\"0.99\"} 0.5
typha_ping_latency_sum{syncer=\"felix\"} 0.5
typha_ping_latency_count{syncer=\"felix\"} 1
";
    assert_eq!(encode(&r).unwrap(), want);
}

#[test]
fn help_and_label_values_are_escaped() {
    let r = Registry::new();
    let c = counter_vec(&r, "x_total", "a \\ backslash\nand a \"quote\"", &["v"]);
    c.with_label_values(&["say \"hi\"\\\nbye"]).inc();
    let text = encode(&r).unwrap();
    // HELP escapes backslash and newline (a quote stays); label values also escape quotes.
    assert!(
        text.contains("# HELP x_total a \\\\ backslash\\nand a \"quote\"\n"),
        "{text}"
    );
    assert!(
        text.contains("x_total{v=\"say \\\"hi\\\"\\\\\\nbye\"} 1\n"),
        "{text}"
    );
    // Every line is one line: nothing the values held broke the format.
    assert_eq!(text.lines().count(), 3, "{text}");
}

#[test]
fn an_empty_summary_has_nan_quantiles_and_zero_sum_and_count() {
    let r = Registry::new();
    summary(&r, SummaryOpts::new("s", "help"));
    let text = encode(&r).unwrap();
    assert!(text.contains("s{quantile=\"0.5\"} NaN\n"), "{text}");
    assert!(text.contains("s_sum 0\ns_count 0\n"), "{text}");
}

#[test]
fn a_summary_without_objectives_has_only_sum_and_count() {
    let r = Registry::new();
    let mut opts = SummaryOpts::new("s", "help");
    opts.objectives.clear();
    let s = summary(&r, opts);
    s.observe(2.0);
    s.observe(3.0);
    assert_eq!(
        encode(&r).unwrap(),
        "# HELP s help\n# TYPE s summary\ns_sum 5\ns_count 2\n"
    );
}

#[test]
fn summary_objectives_must_be_quantiles() {
    let mut opts = SummaryOpts::new("s", "help");
    opts.objectives = vec![(1.5, 0.01)];
    assert!(matches!(
        Summary::new(opts),
        Err(SummaryError::Objective { .. })
    ));
    assert!(matches!(
        Summary::new(SummaryOpts::new("bad name", "help")),
        Err(SummaryError::Desc { .. })
    ));
}

#[test]
fn summary_quantiles_are_within_their_objectives() {
    let t0 = Instant::now();
    let s = new_at(SummaryOpts::new("s", "h"), t0);
    // 0..10,000 in a scrambled order (a multiplicative permutation).
    let n = 10_000u64;
    for i in 0..n {
        observe_at(&s, ((i * 7919) % n) as f64, t0);
    }
    let q = quantiles_at(&s, t0);
    assert_eq!(q.len(), 3);
    for (i, (quantile, err)) in CALICO_OBJECTIVES.iter().enumerate() {
        let (got_q, v) = q[i];
        assert_eq!(got_q, *quantile);
        let lo = (quantile - err) * n as f64 - 1.0;
        let hi = (quantile + err) * n as f64 + 1.0;
        assert!(v >= lo && v <= hi, "q{quantile}: {v} not in [{lo}, {hi}]");
    }
    assert_eq!(s.count(), n);
    assert_eq!(s.sum(), (n * (n - 1) / 2) as f64);
}

#[test]
fn summary_window_forgets_old_observations_but_not_sum_and_count() {
    let t0 = Instant::now();
    let opts = SummaryOpts::new("s", "h").window(Duration::from_secs(60), 2);
    let s = new_at(opts, t0);
    for _ in 0..100 {
        observe_at(&s, 10.0, t0);
    }
    // Half a window later the answers still include them.
    let later = t0 + Duration::from_secs(29);
    for _ in 0..100 {
        observe_at(&s, 1.0, later);
    }
    assert_eq!(quantiles_at(&s, later)[2].1, 10.0);
    // After one step, the stream answering is the one that started with the step: it has
    // seen everything since t0 (the first stream was emptied).
    let t31 = t0 + Duration::from_secs(31);
    assert_eq!(quantiles_at(&s, t31)[2].1, 10.0);
    // After the next step, only what came after t0 + 30 s is left.
    observe_at(&s, 1.0, t0 + Duration::from_secs(45));
    let t61 = t0 + Duration::from_secs(61);
    assert_eq!(quantiles_at(&s, t61)[2].1, 1.0);
    // A whole idle window later nothing is left; sum and count are kept.
    let t200 = t0 + Duration::from_secs(200);
    assert!(quantiles_at(&s, t200)[0].1.is_nan());
    assert_eq!(s.count(), 201);
    assert_eq!(s.sum(), 1000.0 + 101.0);
}

#[test]
fn quantile_stream_memory_is_bounded() {
    let mut st = Stream::new(&CALICO_OBJECTIVES);
    let mut batch: Vec<f64> = Vec::new();
    for i in 0..200_000u64 {
        batch.push(((i * 104_729) % 200_000) as f64);
        if batch.len() == 500 {
            st.insert(&mut batch);
            batch.clear();
        }
    }
    assert_eq!(st.count(), 200_000);
    assert!(st.retained() < 5_000, "{} samples kept", st.retained());
    let median = st.query(0.5);
    assert!((90_000.0..=110_000.0).contains(&median), "{median}");
    let p99 = st.query(0.99);
    assert!((197_800.0..=198_200.0).contains(&p99), "{p99}");
}

#[test]
fn quantile_stream_ignores_nan_and_answers_nan_when_empty() {
    let mut st = Stream::new(&CALICO_OBJECTIVES);
    assert!(st.query(0.5).is_nan());
    st.insert(&mut [f64::NAN, 3.0]);
    assert_eq!(st.count(), 1);
    assert_eq!(st.query(0.99), 3.0);
}

#[test]
fn response_is_text_format_0_0_4() {
    let r = Registry::new();
    counter(&r, "typha_connections_accepted", "Connections accepted.").inc();
    let resp = metrics_response(&r);
    assert_eq!(resp.status(), http::StatusCode::OK);
    assert_eq!(
        resp.headers()[http::header::CONTENT_TYPE],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    assert!(!resp.body().contains("# EOF"));
    assert!(resp.body().contains("\ntypha_connections_accepted 1\n"));
}

#[test]
fn a_second_metric_of_the_same_name_is_not_exposed_but_still_counts() {
    let r = Registry::new();
    let a = counter(&r, "dup", "first");
    let b = counter(&r, "dup", "second");
    a.inc();
    b.inc_by(5);
    assert_eq!(b.get(), 5);
    assert!(encode(&r).unwrap().contains("\ndup 1\n"));
}

#[test]
fn this_process_is_scraped_with_gos_names_and_types() {
    let r = Registry::new();
    register_process_metrics(&r);
    // Some CPU to count.
    let mut x = 0u64;
    for i in 0..2_000_000u64 {
        x = x.wrapping_mul(31).wrapping_add(i);
    }
    assert_ne!(x, 1);
    let text = encode(&r).unwrap();
    let value = |name: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} in\n{text}"))
            .parse()
            .unwrap()
    };
    assert!(
        text.contains("# TYPE process_cpu_seconds_total counter\n"),
        "{text}"
    );
    assert!(
        text.contains("# TYPE process_resident_memory_bytes gauge\n"),
        "{text}"
    );
    assert!(value("process_cpu_seconds_total") > 0.0);
    assert!(value("process_resident_memory_bytes") > 1e5);
    assert!(value("process_virtual_memory_bytes") >= value("process_resident_memory_bytes"));
    assert!(value("process_open_fds") >= 3.0);
    assert!(value("process_max_fds") >= value("process_open_fds"));
    assert!(value("process_threads") >= 1.0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let started = value("process_start_time_seconds");
    assert!(
        started <= now + 1.0 && started > now - 3600.0,
        "{started} vs {now}"
    );
}
