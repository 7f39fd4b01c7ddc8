//! Codec benchmark (issue 2): 10,000 realistic workload-endpoint updates through
//! `FrameEncoder` (postcard + zstd level 1, or uncompressed) and back through `FrameDecoder`,
//! at 100 (Calico Typha's default message size), 1,000 and 10,000 KVs per frame, in key order
//! (a snapshot) and in random order (churn deltas).
//!
//! Throughput is the raw (uncompressed postcard payload) size, so MB/s are comparable between
//! the compressed and uncompressed encoders. Before timing, the bench prints a size table
//! (bytes per KV on the wire), sizes at other zstd levels, and a hand-built Calico-style JSON
//! equivalent for context.
//!
//! Run: `cargo bench -p typha-protocol --bench codec`. Results: BENCHMARKS.md.

// A benchmark of fixed, generated data: a panic is a bug in the bench, not a network input.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    missing_docs
)]

use std::fmt::Write as _;
use std::hint::black_box;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use typha_protocol::frame::HEADER_LEN;
use typha_protocol::message::{Deltas, SnapshotChunk};
use typha_protocol::model::{Key, Value};
use typha_protocol::sample::{Cluster, ClusterSpec, Rng, to_updates};
use typha_protocol::{FrameDecoder, FrameEncoder, Limits, Message, Seq, Update};

/// KVs in the batch.
const KVS: usize = 10_000;
/// KVs per frame: Calico Typha's default (100), 1,000, and the whole batch in one frame.
const FRAME_SIZES: [usize; 3] = [100, 1_000, KVS];
/// The issue's target: compressed bytes per realistic KV.
const TARGET_BYTES_PER_KV: f64 = 60.0;
const ZSTD_LEVEL: i32 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Order {
    /// Sorted by key path, as a snapshot is sent.
    Sorted,
    /// Shuffled, as churn deltas arrive.
    Random,
}

impl Order {
    fn name(self) -> &'static str {
        match self {
            Order::Sorted => "sorted",
            Order::Random => "random",
        }
    }
}

/// The first `KVS` workload endpoints of a 334-node, 30-pods-per-node cluster, in generation
/// (creation) order.
fn workload_endpoints() -> Vec<(Key, Value)> {
    let cluster = Cluster::new(ClusterSpec {
        nodes: 334,
        pods_per_node: 30,
        ..ClusterSpec::default()
    });
    let kvs: Vec<_> = cluster.workload_endpoints().take(KVS).collect();
    assert_eq!(kvs.len(), KVS);
    kvs
}

fn shuffle<T>(v: &mut [T], rng: &mut Rng) {
    for i in (1..v.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        v.swap(i, j);
    }
}

/// The updates in `order`, with revisions as they would be:
/// - sorted (snapshot): each key keeps the revision it was created at (creation order =
///   generation order), so revisions are not monotonic in key order;
/// - random (churn): revisions increase in delivery order.
fn updates(kvs: &[(Key, Value)], order: Order) -> Vec<Update> {
    match order {
        Order::Sorted => {
            let mut u = to_updates(kvs, 1_000_000);
            u.sort_by(|a, b| a.key.cmp(&b.key));
            u
        }
        Order::Random => {
            let mut kvs = kvs.to_vec();
            shuffle(&mut kvs, &mut Rng::new(0x5eed));
            to_updates(&kvs, 2_000_000)
        }
    }
}

/// The updates as messages of `per_frame` KVs: snapshot chunks (sorted) or deltas (random).
fn messages(updates: &[Update], per_frame: usize, order: Order) -> Vec<Message> {
    let mut rng = Rng::new(7);
    updates
        .chunks(per_frame)
        .enumerate()
        .map(|(i, chunk)| match order {
            Order::Sorted => Message::SnapshotChunk(SnapshotChunk {
                updates: chunk.to_vec(),
            }),
            Order::Random => Message::Deltas(Deltas {
                from_seq: Seq(5_000 + i as u64),
                seq: Seq(5_001 + i as u64),
                digest: rng.next_u64(),
                updates: chunk.to_vec(),
            }),
        })
        .collect()
}

fn encode_all(enc: &mut FrameEncoder, msgs: &[Message]) -> Vec<Bytes> {
    msgs.iter().map(|m| enc.encode(m).unwrap()).collect()
}

fn decode_all(dec: &mut FrameDecoder, mut buf: BytesMut) -> Vec<Message> {
    let mut out = Vec::new();
    while let Some(frame) = dec.decode_frame(&mut buf).unwrap() {
        out.push(dec.decode_message(&frame).unwrap());
    }
    assert!(buf.is_empty());
    out
}

fn concat(frames: &[Bytes]) -> BytesMut {
    let mut buf = BytesMut::with_capacity(frames.iter().map(Bytes::len).sum());
    for f in frames {
        buf.extend_from_slice(f);
    }
    buf
}

fn wire_len(frames: &[Bytes]) -> usize {
    frames.iter().map(Bytes::len).sum()
}

/// Raw postcard payload bytes (no frame headers) of `msgs`.
fn raw_len(msgs: &[Message]) -> usize {
    let frames = encode_all(&mut FrameEncoder::uncompressed(), msgs);
    wire_len(&frames) - frames.len() * HEADER_LEN
}

/// zstd wire bytes per KV of `kvs` at `per_frame` KVs per frame and zstd `level`.
fn zstd_level_bytes_per_kv(
    kvs: &[(Key, Value)],
    order: Order,
    per_frame: usize,
    level: i32,
) -> f64 {
    let msgs = messages(&updates(kvs, order), per_frame, order);
    let frames = encode_all(&mut FrameEncoder::zstd(level).unwrap(), &msgs);
    wire_len(&frames) as f64 / kvs.len() as f64
}

/// Prints the size table and the experiments, once, before anything is timed.
fn print_sizes(kvs: &[(Key, Value)]) {
    let n = kvs.len() as f64;
    let mut t = String::new();
    let _ = writeln!(
        t,
        "\n== codec sizes: {KVS} workload-endpoint updates, zstd level {ZSTD_LEVEL}, \
         wire bytes include the {HEADER_LEN}-byte frame header =="
    );
    let _ = writeln!(
        t,
        "| KVs/frame | order | frames | raw B/KV | uncompressed wire B/KV \
         | zstd wire B/KV | ratio | <= {TARGET_BYTES_PER_KV} B/KV |"
    );
    let _ = writeln!(t, "|---|---|---|---|---|---|---|---|");
    for order in [Order::Sorted, Order::Random] {
        let ups = updates(kvs, order);
        for per_frame in FRAME_SIZES {
            let msgs = messages(&ups, per_frame, order);
            let raw = raw_len(&msgs);
            let plain = wire_len(&encode_all(&mut FrameEncoder::uncompressed(), &msgs));
            let z = wire_len(&encode_all(
                &mut FrameEncoder::zstd(ZSTD_LEVEL).unwrap(),
                &msgs,
            ));
            let zpk = z as f64 / n;
            let _ = writeln!(
                t,
                "| {per_frame} | {} | {} | {:.1} | {:.1} | {zpk:.1} | {:.2} | {} |",
                order.name(),
                msgs.len(),
                raw as f64 / n,
                plain as f64 / n,
                plain as f64 / z as f64,
                if zpk <= TARGET_BYTES_PER_KV {
                    "yes"
                } else {
                    "no"
                },
            );
        }
    }

    // Would a higher level reach the target? Sizes only; speed at these levels is not timed.
    let levels = [1, 3, 9];
    let _ = writeln!(
        t,
        "\n== experiment: zstd wire B/KV by zstd level (sizes only, not timed) =="
    );
    let _ = writeln!(
        t,
        "| order | KVs/frame | {} |",
        levels.map(|l| format!("level {l}")).join(" | ")
    );
    let _ = writeln!(t, "|---|---|{}", "---|".repeat(levels.len()));
    for order in [Order::Sorted, Order::Random] {
        for per_frame in FRAME_SIZES {
            let cells =
                levels.map(|l| format!("{:.1}", zstd_level_bytes_per_kv(kvs, order, per_frame, l)));
            let _ = writeln!(
                t,
                "| {} | {per_frame} | {} |",
                order.name(),
                cells.join(" | ")
            );
        }
    }

    // Context: the same KVs as Calico-style JSON (key path, revision string, JSON value),
    // hand-built (no JSON crate in the dependency tree), zstd level 1 per group of KVs.
    let json: Vec<String> = updates(kvs, Order::Sorted)
        .iter()
        .zip(sorted_values(kvs))
        .map(|(u, v)| calico_json(u, &v))
        .collect();
    let json_raw: usize = json.iter().map(String::len).sum();
    let _ = writeln!(
        t,
        "\n== context: hand-built Calico-style JSON (key, revision, value), sorted order =="
    );
    let _ = writeln!(t, "| KVs/group | raw JSON B/KV | zstd-1 B/KV | ratio |");
    let _ = writeln!(t, "|---|---|---|---|");
    for per_frame in FRAME_SIZES {
        let z: usize = json
            .chunks(per_frame)
            .map(|c| {
                zstd::bulk::compress(c.concat().as_bytes(), ZSTD_LEVEL)
                    .unwrap()
                    .len()
            })
            .sum();
        let _ = writeln!(
            t,
            "| {per_frame} | {:.1} | {:.1} | {:.2} |",
            json_raw as f64 / n,
            z as f64 / n,
            json_raw as f64 / z as f64
        );
    }
    if let Some(example) = json.first() {
        let _ = writeln!(t, "example JSON KV ({} bytes): {example}", example.len());
    }
    eprintln!("{t}");
}

/// The values of `kvs` in key-path order (to pair with `updates(kvs, Order::Sorted)`).
fn sorted_values(kvs: &[(Key, Value)]) -> Vec<Value> {
    let mut v: Vec<_> = kvs
        .iter()
        .map(|(k, v)| (typha_protocol::KeyPath::from(k), v.clone()))
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v.into_iter().map(|(_, v)| v).collect()
}

fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// One KV as Calico's JSON would carry it: field names of libcalico-go's
/// `model.WorkloadEndpoint` (null/empty fields as Go's encoding/json writes them), plus the key
/// path and the revision as a string. An approximation for context, not Typha's gob framing.
fn calico_json(u: &Update, v: &Value) -> String {
    let Value::WorkloadEndpoint(w) = v else {
        panic!("not a workload endpoint");
    };
    let list = |items: Vec<String>| format!("[{}]", items.join(","));
    let labels: Vec<String> = w
        .labels
        .iter()
        .map(|(k, v)| format!("{}:{}", json_str(k), json_str(v)))
        .collect();
    let ports: Vec<String> = w
        .ports
        .iter()
        .map(|p| {
            format!(
                r#"{{"name":{},"protocol":"TCP","port":{}}}"#,
                json_str(&p.name),
                p.port
            )
        })
        .collect();
    format!(
        r#"{{"key":{},"revision":"{}","value":{{"state":{},"name":{},"active_instance_id":{},"mac":null,"profile_ids":{},"ipv4_nets":{},"ipv6_nets":null,"labels":{{{}}},"ports":{},"generate_name":{}}}}}"#,
        json_str(u.key.as_str()),
        u.revision.0,
        json_str(&w.state),
        json_str(&w.name),
        json_str(&w.active_instance_id),
        list(w.profile_ids.iter().map(|p| json_str(p)).collect()),
        list(
            w.ipv4_nets
                .iter()
                .map(|n| json_str(&n.to_string()))
                .collect()
        ),
        labels.join(","),
        list(ports),
        json_str(&w.generate_name),
    )
}

fn bench_codec(c: &mut Criterion) {
    let kvs = workload_endpoints();
    print_sizes(&kvs);

    let mut group = c.benchmark_group("codec");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));

    for order in [Order::Sorted, Order::Random] {
        let ups = updates(&kvs, order);
        for per_frame in FRAME_SIZES {
            let msgs = messages(&ups, per_frame, order);
            group.throughput(Throughput::Bytes(raw_len(&msgs) as u64));

            for (codec, mut enc) in [
                ("zstd1", FrameEncoder::zstd(ZSTD_LEVEL).unwrap()),
                ("none", FrameEncoder::uncompressed()),
            ] {
                let frames = encode_all(&mut enc, &msgs);
                let buf = concat(&frames);
                let mut dec = FrameDecoder::new(Limits::CLIENT_INBOUND);
                // Round trip once before timing it.
                assert_eq!(decode_all(&mut dec, buf.clone()), msgs);

                let id = format!("{codec}/{}", order.name());
                group.bench_function(BenchmarkId::new(format!("encode/{id}"), per_frame), |b| {
                    b.iter(|| encode_all(&mut enc, black_box(&msgs)));
                });
                // The input copy is made outside the timing, and the decoded messages are
                // dropped outside it (a client keeps them).
                group.bench_function(BenchmarkId::new(format!("decode/{id}"), per_frame), |b| {
                    b.iter_batched(
                        || buf.clone(),
                        |buf| decode_all(&mut dec, buf),
                        BatchSize::LargeInput,
                    );
                });
            }
        }
    }
    group.finish();
}

criterion_group!(benches, bench_codec);
criterion_main!(benches);
