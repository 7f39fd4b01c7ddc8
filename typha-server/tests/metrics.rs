//! `/metrics` as Prometheus scrapes it: the text format 0.0.4 over HTTP, with every metric
//! Calico's Typha exposes under Typha's exact name, type and labels, beside ours; and no label
//! that names a node, an address or a connection.
//!
//! The server is driven so that every family has samples and Typha's have non-zero values:
//! two clients join (one snapshot built, one reused), one leaves and resumes by deltas from an
//! old position after falling behind (catch-up steps, the grace period), changes flow (block
//! and non-block steps, skipped updates), pings are answered, and a third client is refused
//! at the connection limit.
//!
//! Per-node detail is on `/status?nodes` instead (the last test): each connection's node name,
//! address, connected-since, phase, how it resumed, position and lag.

// In tests a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::Duration;

use common::{Peer, cluster, server, settle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use typha_protocol::message::{GoodbyeReason, Message};
use typha_server::config::Config;
use typha_test_support::sample::Spec;

/// Every Prometheus metric Calico's Typha v3.32.0 registers: name, type, labels. From
/// `typha/pkg/snapcache/cache.go` (cache), `typha/pkg/syncserver/snap_precalc.go`
/// (snapshots), `typha/pkg/syncserver/sync_server.go` (connections; its summaries are created
/// per syncer type with a constant `syncer` label) and `typha/pkg/logutils/logutils.go`
/// (logging). Counter and gauge vectors are labelled `syncer` (Typha pre-creates a series per
/// syncer type); Typha's summaries use libcalico-go's objectives 0.5, 0.9 and 0.99.
const TYPHA: &[(&str, &str, &[&str])] = &[
    // snapcache/cache.go
    ("typha_breadcrumb_seq_number", "gauge", &["syncer"]),
    ("typha_breadcrumb_non_block", "counter", &["syncer"]),
    ("typha_breadcrumb_block", "counter", &["syncer"]),
    ("typha_updates_total", "counter", &["syncer"]),
    ("typha_updates_skipped", "counter", &["syncer"]),
    ("typha_cache_size", "gauge", &["syncer"]),
    ("typha_breadcrumb_size", "summary", &["syncer"]),
    // syncserver/snap_precalc.go
    ("typha_snapshots_generated", "counter", &["syncer"]),
    ("typha_snapshots_reused", "counter", &["syncer"]),
    ("typha_snapshot_raw_bytes", "gauge", &["syncer"]),
    ("typha_snapshot_compressed_bytes", "gauge", &["syncer"]),
    // syncserver/sync_server.go
    ("typha_connections_accepted", "counter", &[]),
    ("typha_connections_dropped", "counter", &[]),
    ("typha_connections_active", "gauge", &[]),
    ("typha_connections_streaming", "gauge", &["syncer"]),
    ("typha_connections_grace_used", "counter", &["syncer"]),
    ("typha_client_snapshot_send_secs", "summary", &["syncer"]),
    ("typha_client_latency_secs", "summary", &["syncer"]),
    ("typha_client_write_latency_secs", "summary", &["syncer"]),
    ("typha_next_breadcrumb_latency_secs", "summary", &["syncer"]),
    ("typha_ping_latency", "summary", &["syncer"]),
    ("typha_kvs_per_msg", "summary", &["syncer"]),
    // logutils/logutils.go
    ("typha_log_errors", "counter", &[]),
];

/// Calico's syncer types: Typha's per-syncer metrics have a series for each.
const SYNCERS: [&str; 4] = ["felix", "bgp", "tunnel-ip-allocation", "node-status"];

/// Typha's per-syncer metrics of the cache: here one cache serves every syncer type, and they
/// carry `syncer="felix"` only (docs/server.md).
const PER_CACHE: &[&str] = &[
    "typha_breadcrumb_seq_number",
    "typha_updates_total",
    "typha_updates_skipped",
    "typha_cache_size",
    "typha_breadcrumb_size",
];

/// Typha's metrics this server does not expose, each for a reason given in docs/server.md.
const NOT_EXPOSED: &[(&str, &str)] = &[(
    "typha_logs_dropped",
    "logs are written synchronously, never dropped",
)];

/// Typha's metrics that stay zero in this test: nothing here should make them count.
const ZERO_HERE: &[&str] = &["typha_log_errors"];

/// Ours, beside Typha's (names as exposed before the move to the 0.0.4 format).
const OURS: &[(&str, &str)] = &[
    ("typha_frames_encoded_total", "counter"),
    ("typha_encode_errors_total", "counter"),
    ("typha_resumes_total", "counter"),
    ("typha_resume_bytes_total", "counter"),
    ("typha_resume_floor_waits_total", "counter"),
    ("typha_connections_dropped_total", "counter"),
    ("typha_updates_invalid_total", "counter"),
    ("typha_bytes_sent_total", "counter"),
    ("typha_syncs_waiting", "gauge"),
    ("typha_connections_handshaking", "gauge"),
    ("typha_connections_syncing", "gauge"),
    ("typha_client_ack_lag_secs", "histogram"),
    ("typha_connections_limit", "gauge"),
    ("typha_calico_connections", "gauge"),
    ("typha_calico_connections_refused_total", "counter"),
    ("typha_build_info", "gauge"),
    // What deploy/monitoring's alerts compare: nodes against agents, replicas with each other.
    ("typha_in_sync", "gauge"),
    ("typha_cluster_nodes", "gauge"),
    ("typha_state_revision", "gauge"),
    ("typha_state_digest", "gauge"),
];

/// The process metrics every Prometheus exporter serves (Go's client names and types; no
/// labels), read from /proc at scrape time. Not Typha's own list: Go's collectors are
/// registered beside Typha's metrics there, these beside ours here.
const PROCESS: &[(&str, &str)] = &[
    ("process_cpu_seconds_total", "counter"),
    ("process_resident_memory_bytes", "gauge"),
    ("process_virtual_memory_bytes", "gauge"),
    ("process_open_fds", "gauge"),
    ("process_max_fds", "gauge"),
    ("process_start_time_seconds", "gauge"),
];

/// The only label names any sample may carry: each takes values from a fixed set.
const LABELS: &[&str] = &[
    "syncer",
    "protocol",
    "kind",
    "reason",
    "quantile",
    "le",
    "certificate",
    "result",
];

const NODE: &str = "metrics-test-node";

/// One sample of the exposition.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// The families' types and their samples, checking the text format 0.0.4 as it goes: every
/// sample belongs to the family declared before it, label values are quoted and escaped,
/// values are numbers.
fn parse(text: &str) -> (BTreeMap<String, String>, Vec<Sample>) {
    let mut types = BTreeMap::new();
    let mut samples = Vec::new();
    let mut family: Option<(String, String)> = None;
    for line in text.lines() {
        assert!(!line.is_empty(), "empty line in\n{text}");
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, ty) = rest.split_once(' ').unwrap();
            assert!(
                ["counter", "gauge", "summary", "histogram", "untyped"].contains(&ty),
                "{line}"
            );
            assert!(
                types.insert(name.to_owned(), ty.to_owned()).is_none(),
                "{name} declared twice"
            );
            family = Some((name.to_owned(), ty.to_owned()));
            continue;
        }
        if line.starts_with("# HELP ") {
            continue;
        }
        assert!(!line.starts_with('#'), "not 0.0.4: {line}");
        let (series, value) = line.rsplit_once(' ').unwrap();
        let value: f64 = value.parse().unwrap_or_else(|_| panic!("value of {line}"));
        let (name, labels) = match series.split_once('{') {
            None => (series.to_owned(), BTreeMap::new()),
            Some((name, rest)) => (name.to_owned(), parse_labels(rest, line)),
        };
        let (fam, ty) = family.as_ref().unwrap_or_else(|| panic!("{line}: no TYPE"));
        let suffixes: &[&str] = match ty.as_str() {
            "summary" => &["", "_sum", "_count"],
            "histogram" => &["_bucket", "_sum", "_count"],
            _ => &[""],
        };
        assert!(
            suffixes.iter().any(|s| name == format!("{fam}{s}")),
            "{line} is not a sample of {fam} ({ty})"
        );
        samples.push(Sample {
            name,
            labels,
            value,
        });
    }
    (types, samples)
}

/// `a="x",b="y\"z"}` into a map (the text after `{`).
fn parse_labels(mut rest: &str, line: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    loop {
        if let Some(r) = rest.strip_prefix('}') {
            assert!(r.is_empty(), "{line}");
            return labels;
        }
        let (name, r) = rest.split_once("=\"").unwrap_or_else(|| panic!("{line}"));
        let mut value = String::new();
        let mut chars = r.char_indices();
        let end = loop {
            match chars.next() {
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c @ ('\\' | '"'))) => value.push(c),
                    other => panic!("bad escape {other:?} in {line}"),
                },
                Some((i, '"')) => break i,
                Some((_, c)) => value.push(c),
                None => panic!("unterminated label value in {line}"),
            }
        };
        assert!(
            labels.insert(name.to_owned(), value).is_none(),
            "label {name} twice in {line}"
        );
        rest = &r[end + 1..];
        rest = rest.strip_prefix(',').unwrap_or(rest);
    }
}

/// GET `path` over HTTP/1.1: status, headers (lower-case names), body.
async fn get(addr: SocketAddr, path: &str) -> (u16, BTreeMap<String, String>, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut buf = String::new();
    s.read_to_string(&mut buf).await.unwrap();
    let (head, body) = buf.split_once("\r\n\r\n").unwrap();
    let mut lines = head.lines();
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    (status, headers, body.to_owned())
}

/// Changes to `n` workload endpoints: `n` breadcrumbs when settled one at a time.
async fn churn(
    srv: &typha_server::server::RunningServer,
    store: &typha_server::datastore::embedded::Embedded,
    round: u64,
    n: usize,
) {
    let spec = Spec {
        nodes: 2,
        pods_per_node: 3,
        ..Spec::default()
    };
    for i in 0..n {
        store.put(spec.workload_endpoint(i % 2, i % 3, round * 100 + i as u64));
        settle(srv, store).await;
    }
}

#[tokio::test]
async fn metrics_are_typhas_exact_names_and_types_beside_ours() {
    let mut cfg = Config::for_tests();
    cfg.metrics = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
    cfg.max_connections = 2;
    cfg.conn.ping_interval = Duration::from_millis(50);
    // A resuming client whose missed breadcrumbs are older than this is behind; only its
    // grace period keeps it.
    cfg.conn.max_fall_behind = Duration::from_millis(300);
    cfg.conn.new_client_grace = Duration::from_secs(60);
    let (srv, store) = server(cfg).await;
    let spec = Spec {
        nodes: 2,
        pods_per_node: 3,
        ..Spec::default()
    };
    store.bulk_load(cluster(2, 3));
    settle(&srv, &store).await;

    // Two joiners: the second reuses the first one's snapshot.
    let mut a = Peer::connect(srv.addr).await;
    a.hello(Peer::offer(NODE, None)).await.unwrap();
    a.sync_to(&srv).await;
    let mut b = Peer::connect(srv.addr).await;
    b.hello(Peer::offer(NODE, None)).await.unwrap();
    b.sync_to(&srv).await;

    // B leaves; changes go on; B comes back and resumes by deltas, several breadcrumbs and
    // more than the fall-behind limit behind.
    let (state, digest, seq, resume) = (b.state.clone(), b.digest.clone(), b.seq, b.resume());
    drop(b);
    common::eventually("B's connection to close", || srv.connections() == 1).await;
    churn(&srv, &store, 1, 4).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let mut b = Peer::connect(srv.addr).await;
    (b.state, b.digest, b.seq) = (state, digest, seq);
    b.hello(Peer::offer(NODE, Some(resume))).await.unwrap();
    b.sync_to(&srv).await;
    assert_eq!(b.first_after_hello, Some("deltas"));

    // Both follow more changes, one of them a value the cache already has (skipped), and
    // answer pings meanwhile.
    churn(&srv, &store, 2, 3).await;
    // An annotation is not part of what agents get: the same value again.
    let mut same = spec.workload_endpoint(0, 0, 200);
    same.metadata
        .annotations
        .insert("example.com/touched".into(), "yes".into());
    store.put(same);
    common::eventually("the unchanged value to be skipped", || {
        srv.metrics.updates_skipped.get() == 1
    })
    .await;
    let deadline = tokio::time::Instant::now() + Duration::from_millis(400);
    while tokio::time::Instant::now() < deadline {
        for p in [&mut a, &mut b] {
            if let Ok(m) = p.recv_within(Duration::from_millis(10)).await {
                p.apply(m).await.unwrap();
            }
        }
    }
    a.sync_to(&srv).await;
    b.sync_to(&srv).await;

    // A third client is over the limit.
    let mut c = Peer::connect(srv.addr).await;
    match c.recv().await {
        Ok(Message::Goodbye(g)) => assert_eq!(g.reason, GoodbyeReason::TooManyConnections),
        other => panic!("expected a Goodbye, got {other:?}"),
    }

    let (status, headers, text) = get(srv.metrics_addr.unwrap(), "/metrics").await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(
        headers["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    let (types, samples) = parse(&text);
    let of = |name: &str| -> Vec<&Sample> {
        samples
            .iter()
            .filter(|s| {
                s.name == name
                    || s.name == format!("{name}_sum")
                    || s.name == format!("{name}_count")
                    || s.name == format!("{name}_bucket")
            })
            .collect()
    };

    for (name, ty, labels) in TYPHA {
        assert_eq!(
            types.get(*name).map(String::as_str),
            Some(*ty),
            "Typha's {name} must be a {ty}"
        );
        let series = of(name);
        assert!(!series.is_empty(), "no samples of {name}");
        for s in &series {
            let mut want: BTreeSet<&str> = labels.iter().copied().collect();
            if *ty == "summary" && s.name == *name {
                want.insert("quantile");
            }
            let got: BTreeSet<&str> = s.labels.keys().map(String::as_str).collect();
            assert_eq!(got, want, "labels of {s:?}");
        }
        // The syncer types each has a series for: the cache's own, felix (the one cache every
        // type is served from); the others, all four from the start, as Typha creates them.
        let syncers: BTreeSet<&str> = series
            .iter()
            .filter_map(|s| s.labels.get("syncer").map(String::as_str))
            .collect();
        if !labels.contains(&"syncer") {
            assert!(syncers.is_empty(), "{name}");
        } else if PER_CACHE.contains(name) {
            assert_eq!(syncers, BTreeSet::from(["felix"]), "{name}");
        } else {
            assert_eq!(syncers, BTreeSet::from(SYNCERS), "{name}");
        }
        // This story has clients of our own protocol only: they count under felix.
        let felix = |s: &&&Sample| s.labels.get("syncer").is_none_or(|v| v == "felix");
        match *ty {
            "summary" => {
                let quantiles: BTreeSet<&str> = series
                    .iter()
                    .filter(|s| s.name == *name)
                    .map(|s| s.labels["quantile"].as_str())
                    .collect();
                assert_eq!(quantiles, BTreeSet::from(["0.5", "0.9", "0.99"]), "{name}");
                let count = series
                    .iter()
                    .filter(felix)
                    .find(|s| s.name == format!("{name}_count"))
                    .unwrap_or_else(|| panic!("{name}_count"));
                assert!(count.value >= 1.0, "{name}: nothing observed");
                assert!(
                    series.iter().any(|s| s.name == format!("{name}_sum")),
                    "{name}_sum"
                );
            }
            _ => {
                assert_eq!(series.len(), syncers.len().max(1), "{name}: {series:?}");
                let v = series.iter().find(felix).unwrap().value;
                if ZERO_HERE.contains(name) {
                    assert_eq!(v, 0.0, "{name}");
                } else {
                    assert!(v >= 1.0, "{name} is {v}: nothing measured");
                }
                for s in series.iter().filter(|s| !felix(s)) {
                    assert_eq!(s.value, 0.0, "no Calico client here: {s:?}");
                }
            }
        }
    }
    for (name, why) in NOT_EXPOSED {
        assert!(
            !types.contains_key(*name),
            "{name} is exposed, but docs say it is not ({why})"
        );
    }
    for (name, ty) in OURS {
        assert_eq!(
            types.get(*name).map(String::as_str),
            Some(*ty),
            "ours: {name}"
        );
        assert!(!of(name).is_empty(), "no samples of {name}");
    }
    for (name, ty) in PROCESS {
        assert_eq!(
            types.get(*name).map(String::as_str),
            Some(*ty),
            "process: {name}"
        );
        let series = of(name);
        assert_eq!(series.len(), 1, "{name}: {series:?}");
        assert!(series[0].labels.is_empty(), "{name}: {series:?}");
        assert!(series[0].value > 0.0, "{name}: {series:?}");
    }

    // Specific values the story above makes certain.
    let value = |name: &str, labels: &[(&str, &str)]| {
        samples
            .iter()
            .find(|s| {
                s.name == name
                    && s.labels.len() == labels.len()
                    && labels
                        .iter()
                        .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(v))
            })
            .unwrap_or_else(|| panic!("no {name}{labels:?}"))
            .value
    };
    let felix = [("syncer", "felix")];
    assert_eq!(value("typha_connections_accepted", &[]), 4.0);
    assert_eq!(value("typha_connections_dropped", &[]), 1.0);
    assert_eq!(value("typha_connections_active", &[]), 2.0);
    assert_eq!(value("typha_connections_streaming", &felix), 2.0);
    assert_eq!(value("typha_connections_grace_used", &felix), 1.0);
    assert_eq!(value("typha_snapshots_generated", &felix), 1.0);
    assert_eq!(value("typha_snapshots_reused", &felix), 1.0);
    assert_eq!(value("typha_updates_skipped", &felix), 1.0);
    assert_eq!(
        value("typha_cache_size", &felix),
        srv.cache.latest().kvs as f64
    );
    assert_eq!(
        value("typha_breadcrumb_seq_number", &felix),
        srv.cache.latest().seq.0 as f64
    );
    let latest = srv.cache.latest();
    assert_eq!(value("typha_in_sync", &felix), 1.0);
    // Two nodes in the sample cluster (Calico Node resources).
    assert_eq!(value("typha_cluster_nodes", &felix), 2.0);
    assert_eq!(
        value("typha_state_revision", &felix),
        latest.revision.0 as f64
    );
    assert!(latest.revision.0 > 0);
    // The digest's low 52 bits, exact in the float the exposition carries.
    assert_eq!(
        value("typha_state_digest", &felix),
        (latest.digest & ((1 << 52) - 1)) as f64
    );
    assert_eq!(
        value(
            "typha_connections_dropped_total",
            &[("reason", "too_many_connections")]
        ),
        1.0
    );
    assert_eq!(value("typha_resumes_total", &[("kind", "deltas")]), 1.0);
    assert_eq!(value("typha_resumes_total", &[("kind", "snapshot")]), 2.0);
    // Two snapshots of the same state cost the same; a resume by deltas, less.
    let snapshot_bytes = value("typha_resume_bytes_total", &[("kind", "snapshot")]);
    let deltas_bytes = value("typha_resume_bytes_total", &[("kind", "deltas")]);
    assert!(snapshot_bytes > 2.0 * deltas_bytes && deltas_bytes > 0.0);

    // The limits: no balancing here, so both are TYPHA_MAXCONNECTIONSUPPERLIMIT.
    for p in ["all", "typha-rs"] {
        assert_eq!(value("typha_connections_limit", &[("protocol", p)]), 2.0);
    }
    // What the binary was built from (its labels are checked in build_info's unit test).
    let build = of("typha_build_info");
    assert_eq!(build.len(), 1);
    assert_eq!(build[0].value, 1.0);
    assert_eq!(build[0].labels["version"], env!("CARGO_PKG_VERSION"));

    // No per-node detail in any label: names from a fixed set, and no value that is the
    // clients' host name or an address.
    for s in samples.iter().filter(|s| s.name != "typha_build_info") {
        for (k, v) in &s.labels {
            assert!(LABELS.contains(&k.as_str()), "label {k} on {s:?}");
            assert!(
                !v.contains(NODE) && !v.contains("127.0.0.1") && !v.contains(':'),
                "per-node detail in {s:?}"
            );
        }
    }
    srv.shutdown().await;
}

#[tokio::test]
async fn per_node_detail_is_on_status_and_the_phases_are_counted() {
    use typha_protocol::message::Ack;
    let mut cfg = Config::for_tests();
    cfg.health = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
    cfg.metrics = cfg.health;
    let (srv, store) = server(cfg).await;
    store.bulk_load(cluster(2, 3));
    settle(&srv, &store).await;
    let health = srv.health_addr.unwrap();

    // One node that acknowledges what it applied, one that never does, and a connection that
    // never says hello.
    let mut a = Peer::connect(srv.addr).await;
    a.hello(Peer::offer("node-a", None)).await.unwrap();
    a.sync_to(&srv).await;
    let mut b = Peer::connect(srv.addr).await;
    b.hello(Peer::offer("node-b", None)).await.unwrap();
    b.sync_to(&srv).await;
    let silent = tokio::net::TcpStream::connect(srv.addr).await.unwrap();
    churn(&srv, &store, 1, 3).await;
    a.sync_to(&srv).await;
    b.sync_to(&srv).await;
    a.send(&Message::Ack(Ack { seq: a.seq })).await.unwrap();
    let latest = srv.cache.latest().seq.0;

    let nodes = loop {
        let (code, _, body) = get(health, "/status?nodes").await;
        assert_eq!(code, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        let nodes = v["nodes"].as_array().unwrap().clone();
        let acked = nodes
            .iter()
            .any(|n| n["name"] == "node-a" && n["acked"] == latest);
        if nodes.len() == 3 && acked {
            assert_eq!(v["handshaking"], 1, "{v}");
            assert_eq!(v["streaming"], 2, "{v}");
            assert_eq!(v["syncing"], 0, "{v}");
            break nodes;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // Sorted by name; the connection without a hello has none, and comes first.
    let [hs, na, nb] = <[serde_json::Value; 3]>::try_from(nodes).unwrap();
    assert_eq!(hs["name"], serde_json::Value::Null);
    assert_eq!(hs["phase"], "handshaking");
    assert_eq!(hs["address"], silent.local_addr().unwrap().to_string());
    for (n, name) in [(&na, "node-a"), (&nb, "node-b")] {
        assert_eq!(n["name"], name, "{n}");
        assert_eq!(n["phase"], "streaming", "{n}");
        assert_eq!(n["resumed"], "snapshot", "{n}");
        assert_eq!(n["seq"], latest, "{n}");
        assert_eq!(n["lag"], 0, "{n}");
        assert!(n["connected_secs"].as_f64().unwrap() >= 0.0, "{n}");
        assert!(
            n["address"].as_str().unwrap().starts_with("127.0.0.1:"),
            "{n}"
        );
    }
    assert_eq!(na["ack_lag"], 0, "{na}");
    assert_eq!(na["behind_secs"], 0.0, "{na}");
    // B applied everything but never said so: the server counts it behind by what it has not
    // acknowledged, for as long as the oldest of those breadcrumbs has existed.
    assert_eq!(nb["acked"], serde_json::Value::Null, "{nb}");
    assert_eq!(nb["ack_lag"], latest, "{nb}");
    assert!(nb["behind_secs"].as_f64().unwrap() > 0.0, "{nb}");

    // The short form (what other replicas read every poll) has no per-node list.
    let (_, _, body) = get(health, "/status").await;
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(v.get("nodes").is_none(), "{v}");
    // The phase counts are metrics; the names are not in them.
    let (_, _, text) = get(srv.metrics_addr.unwrap(), "/metrics").await;
    assert!(
        text.contains("\ntypha_connections_handshaking 1\n"),
        "{text}"
    );
    assert!(text.contains("\ntypha_connections_syncing 0\n"), "{text}");
    assert!(!text.contains("node-a"));
    drop(silent);
    common::eventually("the silent connection to leave the table", || {
        srv.metrics.connections_handshaking.get() == 0
    })
    .await;
    srv.shutdown().await;
}

/// A Calico client of `syncer` (our Rust client of Calico's protocol, as calico-node behaves:
/// it answers pings) on plain TCP, until the server closes it or the task is aborted.
fn calico_client(
    srv: &typha_server::server::RunningServer,
    syncer: &'static str,
) -> tokio::task::JoinHandle<()> {
    let addr = srv.addr;
    tokio::spawn(async move {
        use typha_client::calico::{CalicoHello, Until, run_with};
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let hello = CalicoHello::calico_node(format!("calico-{syncer}"), syncer);
        let _ = run_with(tcp, &hello, Until::Closed, Duration::from_secs(60), |_| {}).await;
    })
}

/// Issue 39: each Calico client counts under the syncer type of its hello in every one of
/// Typha's per-syncer metrics of connections and snapshots (a calico-node's four connections
/// used to show as `typha_connections_streaming{syncer="felix"} 4`), ours under felix; and
/// `/status?nodes` shows a Calico client's protocol, syncer type and real lag (it
/// acknowledges nothing: what has not been written to it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calico_clients_count_under_their_own_syncer_type_and_show_their_lag_on_status() {
    let mut cfg = Config::for_tests();
    cfg.health = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
    cfg.metrics = cfg.health;
    cfg.conn.ping_interval = Duration::from_millis(50);
    let (srv, store) = server(cfg).await;
    store.bulk_load(cluster(2, 3));
    settle(&srv, &store).await;
    let clients: Vec<_> = SYNCERS.iter().map(|s| calico_client(&srv, s)).collect();
    let mut ours = Peer::connect(srv.addr).await;
    ours.hello(Peer::offer("ours", None)).await.unwrap();
    ours.sync_to(&srv).await;
    common::eventually("every client streaming", || {
        srv.metrics.connections_streaming.total() == 5
    })
    .await;
    // Changes that reach every syncer type but node-status (nodes), then pings answered.
    for i in 0..3 {
        store.put(
            typha_server::calico::v3::Resource::from_json(serde_json::json!({
                "apiVersion": "projectcalico.org/v3", "kind": "Node",
                "metadata": {"name": format!("extra-{i}")},
                "spec": {"bgp": {"ipv4Address": format!("10.99.0.{i}/16")}}}))
            .unwrap(),
        );
        settle(&srv, &store).await;
    }
    // And one for node-status.
    store.put(
        typha_server::calico::v3::Resource::from_json(serde_json::json!({
            "apiVersion": "projectcalico.org/v3", "kind": "CalicoNodeStatus",
            "metadata": {"name": "status-0"},
            "spec": {"node": typha_test_support::sample::node_name(0), "classes": ["BGP"],
                     "updatePeriodSeconds": 5}}))
        .unwrap(),
    );
    settle(&srv, &store).await;
    ours.sync_to(&srv).await;
    let latest = srv.cache.latest().seq.0;
    let health = srv.health_addr.unwrap();
    let nodes = loop {
        let (_, _, body) = get(health, "/status?nodes").await;
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        let nodes = v["nodes"].as_array().unwrap().clone();
        let current = nodes.iter().all(|n| n["seq"] == latest);
        let (_, _, text) = get(srv.metrics_addr.unwrap(), "/metrics").await;
        let pinged = SYNCERS.iter().all(|s| {
            text.contains(&format!("typha_ping_latency_count{{syncer=\"{s}\"}} "))
                && !text.contains(&format!("typha_ping_latency_count{{syncer=\"{s}\"}} 0\n"))
        });
        if nodes.len() == 5 && current && pinged {
            break nodes;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    for n in &nodes {
        if n["name"] == "ours" {
            assert_eq!(n["protocol"], "typha-rs", "{n}");
            assert_eq!(n["syncer"], "felix", "{n}");
            continue;
        }
        assert_eq!(n["protocol"], "calico", "{n}");
        assert_eq!(
            n["name"].as_str().unwrap(),
            format!("calico-{}", n["syncer"].as_str().unwrap()),
            "{n}"
        );
        assert_eq!(n["phase"], "streaming", "{n}");
        // Written everything: no lag, nothing behind, and no acknowledgement to show.
        assert_eq!(n["lag"], 0, "{n}");
        assert_eq!(n["behind_secs"], 0.0, "{n}");
        assert_eq!(n["acked"], serde_json::Value::Null, "{n}");
        assert_eq!(n["ack_lag"], serde_json::Value::Null, "{n}");
    }

    let (_, _, text) = get(srv.metrics_addr.unwrap(), "/metrics").await;
    let (_, samples) = parse(&text);
    let value = |name: &str, syncer: &str| {
        samples
            .iter()
            .find(|s| {
                s.name == name
                    && s.labels.get("syncer").map(String::as_str) == Some(syncer)
                    && !s.labels.contains_key("quantile")
            })
            .unwrap_or_else(|| panic!("no {name}{{syncer={syncer}}}"))
            .value
    };
    for syncer in SYNCERS {
        let want = if syncer == "felix" { 2.0 } else { 1.0 };
        assert_eq!(
            value("typha_connections_streaming", syncer),
            want,
            "{syncer}"
        );
        assert_eq!(value("typha_calico_connections", syncer), 1.0, "{syncer}");
        assert_eq!(value("typha_snapshots_generated", syncer), want, "{syncer}");
        assert!(
            value("typha_snapshot_compressed_bytes", syncer) > 0.0,
            "{syncer}"
        );
        assert!(value("typha_snapshot_raw_bytes", syncer) > 0.0, "{syncer}");
        for summary in [
            "typha_client_snapshot_send_secs_count",
            "typha_client_latency_secs_count",
            "typha_client_write_latency_secs_count",
            "typha_ping_latency_count",
            "typha_kvs_per_msg_count",
        ] {
            assert!(value(summary, syncer) >= 1.0, "{summary}{{{syncer}}}");
        }
        // A syncer type's steps are the breadcrumbs with something for it, as Typha's
        // breadcrumbs of that type would hold them: the three nodes for every type but
        // node-status, the CalicoNodeStatus for node-status (which no node change reaches).
        let steps =
            value("typha_breadcrumb_block", syncer) + value("typha_breadcrumb_non_block", syncer);
        let want = if syncer == "node-status" { 1.0 } else { 3.0 };
        assert!(steps >= want, "{syncer}: {steps} steps");
    }
    for c in clients {
        c.abort();
    }
    srv.shutdown().await;
}
