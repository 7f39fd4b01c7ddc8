//! Snapshot bytes per KV (issue 22): what the storm cluster's snapshot costs on the wire per
//! kind of key, and what larger chunks, higher zstd levels or a dictionary trained on the
//! cluster's own values would save, with the CPU each costs to build (once per snapshot, on
//! the server) and to decode (once per client).
//!
//! The KVs are the server's own: the generated cluster `loadtest storm` runs against (3,225
//! nodes of 30 pods: 106,681 KVs) is loaded into an embedded datastore, a server starts on it,
//! and the cache's map, once in sync, is the snapshot every candidate encodes, in key order as
//! the server sends it. Building and decoding run on this thread alone.
//!
//! Run: `cargo bench -p typha-server --bench snapshot` (add `-- NODES PODS` for another size;
//! `SNAPSHOT_BENCH_HELD=1` instead measures the values held compressed in memory;
//! `SNAPSHOT_BENCH_CALICO=1` what translating every update for Calico's clients would add to
//! the cache writer's work, against that work itself).
//! Results: BENCHMARKS.md, "Snapshot bytes per KV" and "Calico translation"; the chunk sizes,
//! levels and dictionaries measured, and the values held compressed, in
//! docs/benchmarks-history.md.

// A benchmark of generated data: a panic is a bug in the bench.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    missing_docs
)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use typha_protocol::frame::{FrameDecoder, FrameEncoder, HEADER_LEN, Limits};
use typha_protocol::message::{Message, MessageType, SnapshotChunk};
use typha_protocol::model::{Key, Update, UpdateKind};
use typha_server::config::Config;
use typha_server::datastore::embedded::Embedded;
use typha_test_support::sample::Spec;

/// Rounds of each timing; the median is reported.
const ROUNDS: usize = 3;

/// One way of cutting and compressing a snapshot.
#[derive(Debug, Clone, Copy)]
struct Candidate {
    chunk_kvs: usize,
    chunk_bytes: usize,
    level: i32,
    /// Dictionary size in bytes (trained on this snapshot's KVs), or none.
    dict: Option<usize>,
}

impl Candidate {
    fn name(&self) -> String {
        let dict = self
            .dict
            .map_or(String::new(), |d| format!(" + {} KiB dict", d >> 10));
        format!(
            "{} KVs / {} KiB, level {}{dict}",
            self.chunk_kvs,
            self.chunk_bytes >> 10,
            self.level
        )
    }
}

/// The cluster `loadtest storm` generates for `--kvs 100000 --pods-per-node 30`.
fn storm_spec(nodes: usize, pods: usize) -> Spec {
    Spec {
        nodes,
        pods_per_node: pods,
        namespaces: 20,
        deployments_per_namespace: 8,
        policies: 200,
        seed: 1,
    }
}

/// The server's snapshot of `spec`, in the order it sends it.
fn snapshot_of(spec: &Spec) -> Vec<Update> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let store = Embedded::new();
    store.bulk_load(spec.resources());
    let srv = rt
        .block_on(typha_server::server::start(
            Config::for_tests(),
            Arc::new(store),
        ))
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(300);
    let map = loop {
        let latest = srv.cache.latest();
        if srv.cache.ever_in_sync() {
            break latest.map().unwrap();
        }
        assert!(Instant::now() < deadline, "the cache did not sync");
        std::thread::sleep(Duration::from_millis(50));
    };
    let kvs = map
        .iter()
        .map(|(k, kv)| Update {
            key: k.clone(),
            value: Some(kv.value.encoded()),
            revision: kv.revision,
            kind: UpdateKind::New,
        })
        .collect();
    rt.block_on(srv.shutdown());
    kvs
}

/// Cuts `kvs` as the server does (a chunk ends at `chunk_kvs` KVs or once its keys and values
/// reach `chunk_bytes`).
fn cut(kvs: &[Update], chunk_kvs: usize, chunk_bytes: usize) -> Vec<Message> {
    let mut out = Vec::new();
    let mut batch = Vec::new();
    let mut bytes = 0;
    for u in kvs {
        bytes += u.value.as_ref().map_or(0, |v| v.len()) + u.key.as_str().len();
        batch.push(u.clone());
        if batch.len() >= chunk_kvs || bytes >= chunk_bytes {
            out.push(Message::SnapshotChunk(SnapshotChunk {
                updates: std::mem::take(&mut batch),
            }));
            bytes = 0;
        }
    }
    if !batch.is_empty() {
        out.push(Message::SnapshotChunk(SnapshotChunk { updates: batch }));
    }
    out
}

/// A frame as the encoder makes it, but compressed with `c` (which may hold a dictionary).
fn frame_with(c: &mut zstd::bulk::Compressor<'_>, msg: &Message, scratch: &mut Vec<u8>) -> Bytes {
    scratch.clear();
    msg.encode_payload(scratch).unwrap();
    let z = c.compress(scratch).unwrap();
    let mut out = Vec::with_capacity(HEADER_LEN + z.len());
    out.extend_from_slice(&u32::try_from(z.len()).unwrap().to_be_bytes());
    out.extend_from_slice(&[msg.message_type() as u8, 1]);
    out.extend_from_slice(&z);
    Bytes::from(out)
}

struct Measured {
    wire: usize,
    frames: usize,
    largest_raw: usize,
    build: Duration,
    decode: Duration,
    dict_bytes: usize,
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn measure(kvs: &[Update], c: Candidate) -> Measured {
    let msgs = cut(kvs, c.chunk_kvs, c.chunk_bytes);
    let mut scratch = Vec::new();
    let largest_raw = msgs
        .iter()
        .map(|m| {
            scratch.clear();
            m.encode_payload(&mut scratch).unwrap();
            scratch.len()
        })
        .max()
        .unwrap_or(0);
    let dict = c.dict.map(|size| {
        // Samples: each KV's key and value, as they appear in a chunk's payload.
        let samples: Vec<Vec<u8>> = kvs
            .iter()
            .step_by(4)
            .map(|u| {
                let mut s = u.key.as_str().as_bytes().to_vec();
                s.extend_from_slice(u.value.as_ref().map_or(&[][..], |v| v.as_bytes()));
                s
            })
            .collect();
        zstd::dict::from_samples(&samples, size).unwrap()
    });

    let mut builds = Vec::new();
    let mut frames = Vec::new();
    for _ in 0..ROUNDS {
        let t = Instant::now();
        frames = match &dict {
            None => {
                let mut enc = FrameEncoder::zstd(c.level).unwrap();
                msgs.iter().map(|m| enc.encode(m).unwrap()).collect()
            }
            Some(d) => {
                let mut z = zstd::bulk::Compressor::with_dictionary(c.level, d).unwrap();
                z.include_contentsize(true).unwrap();
                z.include_checksum(false).unwrap();
                z.include_dictid(false).unwrap();
                msgs.iter()
                    .map(|m| frame_with(&mut z, m, &mut scratch))
                    .collect::<Vec<_>>()
            }
        };
        builds.push(t.elapsed());
    }
    let wire = frames.iter().map(Bytes::len).sum();

    let mut decodes = Vec::new();
    let mut stream = BytesMut::new();
    for f in &frames {
        stream.extend_from_slice(f);
    }
    let stream = stream.freeze();
    for _ in 0..ROUNDS {
        let t = Instant::now();
        let mut n = 0;
        match &dict {
            None => {
                let mut dec = FrameDecoder::new(Limits::CLIENT_INBOUND);
                let mut buf = BytesMut::from(&stream[..]);
                while let Some(Message::SnapshotChunk(ch)) = dec.decode(&mut buf).unwrap() {
                    n += ch.updates.len();
                }
            }
            Some(d) => {
                let mut z = zstd::bulk::Decompressor::with_dictionary(d).unwrap();
                for f in &frames {
                    let payload = &f[HEADER_LEN..];
                    let len = zstd::zstd_safe::get_frame_content_size(payload)
                        .unwrap()
                        .unwrap();
                    let raw = z.decompress(payload, len as usize).unwrap();
                    let Message::SnapshotChunk(ch) =
                        Message::decode_payload(MessageType::SnapshotChunk, &raw).unwrap()
                    else {
                        panic!("not a chunk")
                    };
                    n += ch.updates.len();
                }
            }
        }
        assert_eq!(n, kvs.len());
        decodes.push(t.elapsed());
    }
    Measured {
        wire,
        frames: frames.len(),
        largest_raw,
        build: median(builds),
        decode: median(decodes),
        dict_bytes: dict.as_ref().map_or(0, Vec::len),
    }
}

/// Bytes per KV per kind of key: raw (key + value) and in level-1 chunks of that kind alone.
fn per_kind(kvs: &[Update]) {
    let mut kinds: BTreeMap<String, Vec<Update>> = BTreeMap::new();
    for u in kvs {
        let kind = Key::validate(u.key.as_str())
            .map(|t| format!("{t:?}"))
            .unwrap_or_else(|_| "invalid".into());
        kinds.entry(kind).or_default().push(u.clone());
    }
    println!("| kind | KVs | raw key+value B/KV | level-1 chunks B/KV | share of the snapshot |");
    println!("|---|---|---|---|---|");
    let total: usize = kinds
        .values()
        .map(|v| measure_wire(v, 1000, 256 << 10, 1))
        .sum();
    for (kind, v) in &kinds {
        let raw: usize = v
            .iter()
            .map(|u| u.key.as_str().len() + u.value.as_ref().map_or(0, |x| x.len()))
            .sum();
        let wire = measure_wire(v, 1000, 256 << 10, 1);
        println!(
            "| {kind} | {} | {:.1} | {:.1} | {:.1} % |",
            v.len(),
            raw as f64 / v.len() as f64,
            wire as f64 / v.len() as f64,
            100.0 * wire as f64 / total as f64
        );
    }
    println!();
}

/// What the cache's values would take in memory if each value of at least `min` bytes were
/// held compressed alone (zstd at `level`, optionally with a dictionary trained on the
/// cluster's own large values), by kind of key; and what a snapshot build would add to get
/// them back (decompressing every such value once, on this thread). Issue 22's memory: the
/// values are the largest part of the heap, the IPAM blocks about half of them.
fn held(kvs: &[Update]) {
    let kind_of = |u: &Update| {
        Key::validate(u.key.as_str())
            .map(|t| format!("{t:?}"))
            .unwrap_or_default()
    };
    let mut raw: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for u in kvs {
        let e = raw.entry(kind_of(u)).or_default();
        e.0 += 1;
        e.1 += u.value.as_ref().map_or(0, |v| v.len());
    }
    let total_raw: usize = raw.values().map(|(_, b)| b).sum();
    println!(
        "values held now: {total_raw} B ({:.0} B per KV)",
        total_raw as f64 / kvs.len() as f64
    );
    println!("| kind | KVs | raw B/value |");
    println!("|---|---|---|");
    for (kind, (n, b)) in &raw {
        println!("| {kind} | {n} | {:.0} |", *b as f64 / *n as f64);
    }
    println!();
    println!(
        "| held compressed when at least | level | dictionary | values compressed | all values held, B/KV | \
         vs raw | decompress all ms |"
    );
    println!("|---|---|---|---|---|---|---|");
    for min in [128usize, 512, 2048] {
        let large: Vec<&[u8]> = kvs
            .iter()
            .filter_map(|u| u.value.as_ref().map(|v| v.as_bytes()))
            .filter(|v| v.len() >= min)
            .collect();
        for (level, dict_size) in [
            (1, None),
            (3, None),
            (1, Some(32usize << 10)),
            (3, Some(32 << 10)),
        ] {
            let dict = dict_size.map(|size| {
                let samples: Vec<&[u8]> = large.iter().step_by(4).copied().collect();
                zstd::dict::from_samples(&samples, size).unwrap()
            });
            let mut c = match &dict {
                Some(d) => zstd::bulk::Compressor::with_dictionary(level, d).unwrap(),
                None => zstd::bulk::Compressor::new(level).unwrap(),
            };
            c.include_checksum(false).unwrap();
            c.include_dictid(false).unwrap();
            let packed: Vec<Vec<u8>> = large.iter().map(|v| c.compress(v).unwrap()).collect();
            let mut d = match &dict {
                Some(dd) => zstd::bulk::Decompressor::with_dictionary(dd).unwrap(),
                None => zstd::bulk::Decompressor::new().unwrap(),
            };
            let mut times = Vec::new();
            for _ in 0..ROUNDS {
                let t = Instant::now();
                for (z, v) in packed.iter().zip(&large) {
                    let back = d.decompress(z, v.len()).unwrap();
                    assert_eq!(back.len(), v.len());
                }
                times.push(t.elapsed());
            }
            let saved: usize = large.iter().map(|v| v.len()).sum::<usize>()
                - packed.iter().map(Vec::len).sum::<usize>();
            let held = total_raw - saved + dict.as_ref().map_or(0, Vec::len);
            println!(
                "| {min} B | {level} | {} | {} | {:.0} | {:.2} | {:.1} |",
                dict_size.map_or("none".to_owned(), |s| format!("{} KiB", s >> 10)),
                large.len(),
                held as f64 / kvs.len() as f64,
                held as f64 / total_raw as f64,
                median(times).as_secs_f64() * 1e3,
            );
        }
    }
}

/// Issue 38: what translating every update for Calico's clients in the cache writer (eagerly,
/// as each breadcrumb is made) would cost, against the writer's own work for the same updates
/// in the same run: the whole cluster as one initial load (every KV new), then every KV
/// changed once (an update: the old value is translated too). The server translates lazily,
/// once per breadcrumb, only when a Calico client reaches it.
fn calico_translation(kvs: &[Update]) {
    use typha_protocol::message::Epoch;
    use typha_server::cache::CacheConfig;
    use typha_server::cache::writer::CacheWriter;
    use typha_server::calico::libcalico::calico_changes_encoded;
    use typha_server::metrics::Metrics;
    use typha_server::syncer::SyncerEvent;

    let changed: Vec<Update> = kvs
        .iter()
        .map(|u| Update {
            revision: typha_protocol::model::Revision(u.revision.0 + 1_000_000),
            kind: UpdateKind::Updated,
            ..u.clone()
        })
        .collect();
    let mut writer_load = Vec::new();
    let mut translate_load = Vec::new();
    let mut translate_update = Vec::new();
    for _ in 0..ROUNDS {
        let (mut w, _cache) =
            CacheWriter::new(CacheConfig::default(), Epoch(1), Metrics::unregistered());
        let load = kvs.to_vec();
        let t = Instant::now();
        w.handle(SyncerEvent::Kvs(load));
        w.flush();
        writer_load.push(t.elapsed());

        let t = Instant::now();
        let mut n = 0;
        for u in kvs {
            n += calico_changes_encoded(&u.key, None, u.value.as_ref())
                .unwrap()
                .len();
        }
        translate_load.push(t.elapsed());
        assert!(n > 0);

        let t = Instant::now();
        for (old, new) in kvs.iter().zip(&changed) {
            calico_changes_encoded(&new.key, old.value.as_ref(), new.value.as_ref()).unwrap();
        }
        translate_update.push(t.elapsed());
    }
    let (w, tl, tu) = (
        median(writer_load),
        median(translate_load),
        median(translate_update),
    );
    let us = |d: Duration| d.as_secs_f64() * 1e6 / kvs.len() as f64;
    println!(
        "| what, {} KVs | ms | µs per KV | vs the writer's load |",
        kvs.len()
    );
    println!("|---|---|---|---|");
    for (what, d) in [
        ("the cache writer: the initial load (baseline)", w),
        ("Calico translation of the initial load", tl),
        ("Calico translation of every KV updated once", tu),
    ] {
        println!(
            "| {what} | {:.0} | {:.2} | {:.2} |",
            d.as_secs_f64() * 1e3,
            us(d),
            d.as_secs_f64() / w.as_secs_f64()
        );
    }
}

fn measure_wire(kvs: &[Update], chunk_kvs: usize, chunk_bytes: usize, level: i32) -> usize {
    let mut enc = FrameEncoder::zstd(level).unwrap();
    cut(kvs, chunk_kvs, chunk_bytes)
        .iter()
        .map(|m| enc.encode(m).unwrap().len())
        .sum()
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let nodes = args.first().copied().unwrap_or(3225);
    let pods = args.get(1).copied().unwrap_or(30);
    let t = Instant::now();
    let kvs = snapshot_of(&storm_spec(nodes, pods));
    eprintln!("{} KVs in {:.1} s", kvs.len(), t.elapsed().as_secs_f64());
    per_kind(&kvs);
    if std::env::var_os("SNAPSHOT_BENCH_HELD").is_some() {
        held(&kvs);
        return;
    }
    if std::env::var_os("SNAPSHOT_BENCH_CALICO").is_some() {
        calico_translation(&kvs);
        return;
    }
    if let Ok(file) = std::env::var("SNAPSHOT_BENCH_DUMP_KVS") {
        // Every KV in the server's order, to try other orders and encodings on: per KV its
        // key's length (u32, little-endian), the key, its value's length, the value, the
        // revision (u64).
        let mut b = Vec::new();
        for u in &kvs {
            let v = u.value.as_ref().map_or(&[][..], |v| v.as_bytes());
            b.extend_from_slice(&u32::try_from(u.key.as_str().len()).unwrap().to_le_bytes());
            b.extend_from_slice(u.key.as_str().as_bytes());
            b.extend_from_slice(&u32::try_from(v.len()).unwrap().to_le_bytes());
            b.extend_from_slice(v);
            b.extend_from_slice(&u.revision.0.to_le_bytes());
        }
        std::fs::write(file, b).unwrap();
        return;
    }
    if let Ok(dir) = std::env::var("SNAPSHOT_BENCH_DUMP") {
        // The raw payloads of one chunk per kind, to try other compressors on.
        let mut by_kind: BTreeMap<String, Vec<u8>> = BTreeMap::new();
        for u in &kvs {
            let kind = Key::validate(u.key.as_str())
                .map(|t| format!("{t:?}"))
                .unwrap_or_default();
            let mut b = Vec::new();
            Message::SnapshotChunk(SnapshotChunk {
                updates: vec![u.clone()],
            })
            .encode_payload(&mut b)
            .unwrap();
            by_kind.entry(kind).or_default().extend_from_slice(&b[1..]);
        }
        for (kind, b) in by_kind {
            std::fs::write(format!("{dir}/{kind}.raw"), b).unwrap();
        }
        return;
    }

    let only = std::env::var("SNAPSHOT_BENCH_ONLY").ok();
    let mut candidates = vec![Candidate {
        chunk_kvs: 1000,
        chunk_bytes: 256 << 10,
        level: 1,
        dict: None,
    }];
    let grid: &[((usize, usize), &[i32])] = &[
        ((1000, 256 << 10), &[3, 6, 9]),
        ((4000, 1 << 20), &[1, 3, 6, 7, 9, 11]),
        ((16_000, 4 << 20), &[1, 3, 6, 7, 9, 11, 19]),
        ((64_000, 16 << 20), &[1, 9]),
    ];
    for &((chunk_kvs, chunk_bytes), levels) in grid {
        for &level in levels {
            candidates.push(Candidate {
                chunk_kvs,
                chunk_bytes,
                level,
                dict: None,
            });
        }
    }
    for (chunk_kvs, chunk_bytes) in [(1000, 256 << 10), (4000, 1 << 20)] {
        for level in [1, 3, 6, 9] {
            candidates.push(Candidate {
                chunk_kvs,
                chunk_bytes,
                level,
                dict: Some(112 << 10),
            });
        }
    }
    println!(
        "| candidate | frames | largest raw payload | wire B/KV | vs base | build ms | vs base | \
         decode ms | vs base |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let mut base: Option<Measured> = None;
    for c in candidates {
        if only
            .as_deref()
            .is_some_and(|o| !c.name().contains(o) && base.is_some())
        {
            continue;
        }
        let m = measure(&kvs, c);
        let b = base.get_or_insert(Measured { ..m });
        let per_kv = (m.wire + m.dict_bytes) as f64 / kvs.len() as f64;
        let base_kv = (b.wire + b.dict_bytes) as f64 / kvs.len() as f64;
        println!(
            "| {} | {} | {} KiB | {per_kv:.1} | {:.2} | {:.0} | {:.2} | {:.0} | {:.2} |",
            c.name(),
            m.frames,
            m.largest_raw >> 10,
            per_kv / base_kv,
            m.build.as_secs_f64() * 1e3,
            m.build.as_secs_f64() / b.build.as_secs_f64(),
            m.decode.as_secs_f64() * 1e3,
            m.decode.as_secs_f64() / b.decode.as_secs_f64(),
        );
    }
}
