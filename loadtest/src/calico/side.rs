//! One side of the `calico` scenario: a fleet against a fresh server, from its idle sample
//! through the initial sync, a quiet spell, the churn and the crash to the final checks.
//!
//! A Calico-protocol fleet opens one connection per syncer type per node; each type is
//! counted and checked apart (the swarms report `calico.<syncer>.<field>`), and the side's
//! totals are over every connection. Our own protocol's side (the baseline) has one
//! connection a node and is checked against the server's digest, as `steady` checks it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use typha_server::calico::libcalico::{SyncerType, calico_kvs};

use super::setup::{CalicoArgs, Side, SyncerSide, Target, start};
use super::states::{digest_of, dump};
use crate::child::Child;
use crate::harness::{self, Percentiles, Workdir};
use crate::procstat::{Settle, settled_usage, usage};
use crate::store::Store;

/// A swarm progress field of one syncer type's connections.
fn field(t: SyncerType, name: &str) -> String {
    format!("calico.{}.{name}", t.as_str())
}

/// The syncer types a churn write reaches: libcalico's translation of one (a stamped
/// workload endpoint relabel, as every churn writes) says which types receive its keys.
fn churned(shape: (usize, usize)) -> anyhow::Result<Vec<SyncerType>> {
    let spec = crate::cluster::cluster_spec(shape.0, shape.1);
    let mut r = spec.workload_endpoint(0, 0, 1);
    r.metadata
        .labels
        .insert(crate::server::SENT_LABEL.into(), "1".into());
    let mut out = Vec::new();
    for (key, value) in typha_server::calico::convert::convert(&r)
        .with_context(|| format!("converting {}", r.id()))?
    {
        for c in calico_kvs(&key, &value) {
            for t in SyncerType::ALL {
                if c.syncers.contains(t) && !out.contains(&t) {
                    out.push(t);
                }
            }
        }
    }
    Ok(out)
}

/// Per syncer type, how many connections hold its expected state (`want`, `count:digest`),
/// and of the full ones how many there are and how many hold it, from the swarms' answers to
/// `digests` (or, with `event` `done`, to `finish`); and the answers.
async fn exact(
    swarms: &mut [Child],
    event: &str,
    want: &[(SyncerType, String)],
) -> anyhow::Result<(Vec<(usize, usize, usize)>, Vec<serde_json::Value>)> {
    for s in swarms.iter_mut() {
        s.send(if event == "done" { "finish" } else { "digests" })
            .await?;
    }
    let mut events = Vec::new();
    for s in swarms.iter_mut() {
        events.push(s.expect(event, Duration::from_secs(300)).await?);
    }
    let count = |map: &str, t: SyncerType, d: Option<&str>| -> usize {
        events
            .iter()
            .filter_map(|v| v[map][t.as_str()].as_object())
            .flat_map(|o| o.iter())
            .filter(|(k, _)| d.is_none_or(|d| k.as_str() == d))
            .map(|(_, n)| n.as_u64().unwrap_or(0) as usize)
            .sum()
    };
    let out = want
        .iter()
        .map(|(t, d)| {
            (
                count("by_syncer", *t, Some(d)),
                count("full_by_syncer", *t, None),
                count("full_by_syncer", *t, Some(d)),
            )
        })
        .collect();
    Ok((out, events))
}

/// Seconds until each syncer type's connections were all in sync (`nodes` of each), polled
/// beside the wait for all of them.
async fn sync_times(
    swarms: &[Child],
    syncers: &[SyncerType],
    nodes: u64,
    limit: Duration,
) -> anyhow::Result<Vec<f64>> {
    let started = Instant::now();
    let mut times = vec![None; syncers.len()];
    while times.iter().any(Option::is_none) {
        for (t, at) in syncers.iter().zip(&mut times) {
            if at.is_none() && harness::sum(swarms, &field(*t, "in_sync")) >= nodes {
                *at = Some(started.elapsed().as_secs_f64());
            }
        }
        if started.elapsed() > limit {
            anyhow::bail!("not every syncer type's connections were in sync within {limit:?}");
        }
        if let Some(why) = harness::gone(swarms) {
            anyhow::bail!("waiting for each syncer type's connections to be in sync, but {why}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(times.into_iter().map(Option::unwrap_or_default).collect())
}

/// Each syncer type's latency histogram since the last call (the swarms' `histograms`).
async fn histograms(
    swarms: &mut [Child],
    syncers: &[SyncerType],
) -> anyhow::Result<Vec<hdrhistogram::Histogram<u64>>> {
    for s in swarms.iter_mut() {
        s.send("histograms").await?;
    }
    let mut out = syncers
        .iter()
        .map(|_| harness::histogram())
        .collect::<anyhow::Result<Vec<_>>>()?;
    for s in swarms.iter_mut() {
        let v = s.expect("histograms", Duration::from_secs(30)).await?;
        for (t, h) in syncers.iter().zip(&mut out) {
            h.add(harness::decode_histogram(
                v["by_syncer"][t.as_str()].as_str().unwrap_or_default(),
            )?)?;
        }
    }
    Ok(out)
}

/// Runs one side: `calico` the syncer types of each node's Calico-protocol connections, or
/// empty for our own protocol.
pub(super) async fn side(
    wd: &Workdir,
    a: &CalicoArgs,
    store: Option<&Store>,
    target: Target<'_>,
    calico: &[SyncerType],
    tls: Option<&Arc<rustls::ClientConfig>>,
) -> anyhow::Result<(Side, hdrhistogram::Histogram<u64>)> {
    let c = &a.common;
    let names = calico
        .iter()
        .map(|t| t.as_str())
        .collect::<Vec<_>>()
        .join(",");
    let (name, server_name) = match (target, calico.is_empty()) {
        (Target::Calico(_), _) => ("calico-typha".to_owned(), "calico-typha"),
        (Target::Ours, false) => (format!("server-calico-{names}"), "typha-server"),
        (Target::Ours, true) => ("server-ours".to_owned(), "typha-server"),
    };
    let nodes = a.nodes as u64;
    let conns = nodes * (calico.len().max(1) as u64);
    let mut server = start(wd, store, target, &name, conns).await?;
    let idle = settled_usage(server.pid(), Settle::IDLE)
        .await
        .context("server usage")?;
    let wchar = |v: &serde_json::Value| v["wchar"].as_u64().unwrap_or(0);
    // What every connection must hold: a client's state of its syncer type, taken just before
    // the fleet (its few hundred bytes are in `before`, not in the fleet's bytes).
    let mut want = Vec::new();
    for t in calico {
        want.push((*t, digest_of(&dump(&server.addr, tls, *t).await?)));
    }
    let churned = churned(wd.shape())?;
    let before = server.state().await?;
    let cpu0 = harness::cpu(&[server.pid()]);
    let extra: Vec<String> = if calico.is_empty() {
        vec![]
    } else {
        vec!["--calico".into(), names.clone()]
    };
    let mut swarms = wd.swarms(&[&server.addr], a.nodes, 0, c, &extra)?;
    let limit = Duration::from_secs(1800);
    let (connect_secs, sync_secs, by_sync_secs) = tokio::try_join!(
        harness::wait_for(&swarms, "connected", conns, "connected", limit),
        harness::wait_for(&swarms, "in_sync", conns, &name, limit),
        sync_times(&swarms, calico, nodes, limit),
    )?;
    let cpu_synced = harness::cpu(&[server.pid()]);
    let failures = |swarms: &[Child], t: Option<SyncerType>| match t {
        Some(t) => harness::sum(swarms, &field(t, "failures")),
        None => harness::sum(swarms, "calico_failures"),
    };
    let reconnects_sync = failures(&swarms, None);
    let by_reconnects_sync: Vec<u64> = calico.iter().map(|t| failures(&swarms, Some(*t))).collect();
    let server_drops_sync = server.drops().await?;
    let swarm_pids: Vec<u32> = swarms.iter().map(|s| s.pid()).collect();
    let swarm_cpu_synced = harness::cpu(&swarm_pids);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let connected = usage(server.pid()).context("server usage")?;
    // What the server itself counts, per syncer type, once every connection is in sync.
    let streaming = server.streaming().await?;
    // Quiet: every connection in sync, nothing written. The server pings and is answered;
    // what the syncs freed goes back to the system over the allocator's decay.
    let (quiet_t0, quiet_cpu0) = (Instant::now(), harness::cpu(&[server.pid()]));
    tokio::time::sleep(Duration::from_secs_f64(a.connected_wait_secs.max(0.0))).await;
    let quiet = settled_usage(server.pid(), Settle::IDLE)
        .await
        .context("server usage")?;
    let (quiet_secs, quiet_cpu) = (
        quiet_t0.elapsed().as_secs_f64(),
        harness::cpu(&[server.pid()]) - quiet_cpu0,
    );
    let synced = server.state().await?;
    let kvs_each: Vec<u64> = want.iter().map(|(_, (n, _))| *n as u64).collect();
    let kvs = if calico.is_empty() {
        server.kvs
    } else {
        kvs_each.iter().sum()
    };
    let mut by_exact_before = Vec::new();
    if !want.is_empty() {
        let w: Vec<(SyncerType, String)> = want.iter().map(|(t, (_, d))| (*t, d.clone())).collect();
        by_exact_before = exact(&mut swarms, "digests", &w).await?.0;
    }
    harness::phase_histogram(&mut swarms).await?;
    if !calico.is_empty() {
        histograms(&mut swarms, calico).await?;
    }

    // The churn reaches every connection of the types it reaches (ours: every node).
    let receivers = if calico.is_empty() {
        nodes
    } else {
        nodes * calico.iter().filter(|t| churned.contains(t)).count() as u64
    };
    let updates_at = |swarms: &[Child]| -> Vec<u64> {
        calico
            .iter()
            .map(|t| harness::sum(swarms, &field(*t, "updates")))
            .collect()
    };
    let churn_at = |swarms: &[Child]| -> Vec<u64> {
        calico
            .iter()
            .map(|t| harness::sum(swarms, &field(*t, "churn_updates")))
            .collect()
    };
    let (updates0, churn0) = (updates_at(&swarms), churn_at(&swarms));
    let (cpu1, swarm_cpu1) = (harness::cpu(&[server.pid()]), harness::cpu(&swarm_pids));
    let churn_t0 = Instant::now();
    let churn = match store {
        Some(st) => st.churn(wd, a.rate, a.secs)?,
        None => server.churn(wd.shape(), a.rate, a.secs),
    };
    let (churn, latency) = harness::churn_phase(
        server.pid(),
        churn,
        &mut swarms,
        receivers as usize,
        a.rate,
        a.secs,
        "delivered",
    )
    .await?;
    let churn_secs = churn_t0.elapsed().as_secs_f64();
    let (cpu2, swarm_cpu2) = (harness::cpu(&[server.pid()]), harness::cpu(&swarm_pids));
    let (updates1, churn1) = (updates_at(&swarms), churn_at(&swarms));
    let by_latency = if calico.is_empty() {
        Vec::new()
    } else {
        histograms(&mut swarms, calico).await?
    };
    let after = server.state().await?;
    let peak = usage(server.pid()).map(|u| u.peak_rss).unwrap_or(0);

    let grown = |r: u64| r as f64 - idle.usage.rss as f64;
    let mut s = Side {
        server: server_name.into(),
        protocol: if calico.is_empty() {
            "ours".into()
        } else {
            format!("calico/{names}")
        },
        nodes,
        connections: conns,
        kvs,
        connect_secs,
        sync_secs,
        bytes_per_kv: wchar(&synced).saturating_sub(wchar(&before)) as f64
            / (kvs.max(1) * nodes) as f64,
        bytes_per_update: wchar(&after).saturating_sub(wchar(&synced)) as f64
            / (churn.updates.max(1) * nodes) as f64,
        updates: churn.updates,
        deliveries: churn.deliveries,
        deliveries_expected: churn.updates * receivers,
        churn_secs,
        latency_ms: churn.latency_ms,
        server_cpu_sync_secs: cpu_synced - cpu0,
        server_cpu_churn_secs: cpu2 - cpu1,
        server_cpu_per_delivery_us: (cpu2 - cpu1) * 1e6 / churn.deliveries.max(1) as f64,
        server_cores_churn: (cpu2 - cpu1) / churn_secs.max(1e-9),
        server_cpu_quiet_secs: quiet_cpu,
        quiet_secs,
        swarm_cpu_sync_secs: swarm_cpu_synced,
        swarm_cpu_churn_secs: swarm_cpu2 - swarm_cpu1,
        swarm_cpu_per_delivery_us: (swarm_cpu2 - swarm_cpu1) * 1e6 / churn.deliveries.max(1) as f64,
        swarm_cpu_per_kv_us: swarm_cpu_synced * 1e6 / (kvs.max(1) * nodes) as f64,
        rss_idle: idle.usage.rss,
        idle_wait: idle.wait,
        rss_connected: connected.rss,
        rss_quiet: quiet.usage.rss,
        rss_peak: peak,
        rss_per_connection: grown(connected.rss) / conns as f64,
        rss_per_node: grown(connected.rss) / nodes as f64,
        rss_quiet_per_connection: grown(quiet.usage.rss) / conns as f64,
        rss_quiet_per_node: grown(quiet.usage.rss) / nodes as f64,
        rss_idle_per_kv: idle.usage.rss as f64 / kvs.max(1) as f64,
        server_drops_sync,
        ..Side::default()
    };
    s.by_syncer = calico
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let at = |v: &[u64]| v.get(i).copied().unwrap_or(0);
            let reached = churned.contains(t);
            SyncerSide {
                syncer: t.as_str().into(),
                kvs: at(&kvs_each),
                churned: reached,
                sync_secs: by_sync_secs.get(i).copied().unwrap_or_default(),
                deliveries: at(&churn1) - at(&churn0),
                deliveries_expected: if reached { churn.updates * nodes } else { 0 },
                updates_in_churn: at(&updates1) - at(&updates0),
                latency_ms: by_latency.get(i).map(Percentiles::of).unwrap_or_default(),
                exact_before_churn: by_exact_before.get(i).map_or(0, |e| e.0),
                server_streaming: streaming.get(t.as_str()).copied(),
                reconnects_sync: at(&by_reconnects_sync),
                ..SyncerSide::default()
            }
        })
        .collect();
    // With several types, a node whose every connection is exact: at least the nodes less
    // the connections that are not (exactly that when all are).
    let nodes_exact = |exact: &mut dyn Iterator<Item = usize>| {
        let off: u64 = exact.map(|e| nodes.saturating_sub(e as u64)).sum();
        nodes.saturating_sub(off) as usize
    };
    s.nodes_exact_before_churn = nodes_exact(&mut by_exact_before.iter().map(|e| e.0));
    if calico.is_empty() {
        let digest = after["digest"].as_str().unwrap_or_default().to_owned();
        let done = harness::finish(swarms, &digest).await?;
        s.nodes_exact = done.exact;
        s.nodes_exact_before_churn = done.exact;
        s.full_nodes = done.full_nodes;
        s.full_nodes_exact = done.full_exact;
        s.ok = done.all_exact(a.nodes) && s.deliveries >= s.deliveries_expected;
        server.quit().await?;
        return Ok((s, latency));
    }
    let reconnects = failures(&swarms, None);
    let by_reconnects: Vec<u64> = calico.iter().map(|t| failures(&swarms, Some(*t))).collect();
    if !a.no_kill {
        // A crash: every connection loses its session, reconnects after a second (as
        // calico-node's clients do) and gets a new snapshot from the restarted server.
        //
        // Every connection is counted once when a session it began after the mark reaches
        // InSync: exact whatever the connections were doing at the kill. (Counting session
        // failures until there was one per connection could not end when one was between
        // sessions at the kill and its next dial found the restarted server: it fails no
        // more, and the coordinator watched a count that could not move.)
        let mut marks = Vec::new();
        for sw in swarms.iter_mut() {
            sw.send("mark").await?;
        }
        for sw in swarms.iter_mut() {
            marks.push(sw.expect("marked", Duration::from_secs(30)).await?["mark"].clone());
        }
        let killed = Instant::now();
        server.kill_and_restart().await?;
        s.kill_ready_secs = Some(killed.elapsed().as_secs_f64());
        // Progress printed before the mark still shows the last mark's count.
        harness::wait_for_marked(&swarms, &marks, "resynced", conns, "in sync again", limit)
            .await?;
        harness::wait_for(&swarms, "in_sync", conns, "in sync again", limit).await?;
        s.kill_resync_secs = Some(killed.elapsed().as_secs_f64());
        s.kill_server_cpu_secs = Some(harness::cpu(&[server.pid()]));
        s.kill_extra_reconnects = Some(failures(&swarms, None).saturating_sub(reconnects + conns));
        // The restarted server counts from zero: its drops are the resync's.
        s.kill_server_drops = server.drops().await?;
    }
    // The churn relabels existing endpoints: what a client takes now is the end state.
    let mut end = Vec::new();
    for t in calico {
        end.push((*t, digest_of(&dump(&server.addr, tls, *t).await?).1));
    }
    let (by_exact, _) = exact(&mut swarms, "done", &end).await?;
    for sw in swarms {
        sw.wait(Duration::from_secs(60)).await?;
    }
    for (i, b) in s.by_syncer.iter_mut().enumerate() {
        let (exact, full, full_exact) = by_exact.get(i).copied().unwrap_or_default();
        b.exact = exact;
        b.full = full;
        b.full_exact = full_exact;
        b.reconnects = by_reconnects
            .get(i)
            .copied()
            .unwrap_or(0)
            .saturating_sub(b.reconnects_sync);
        b.ok = b.exact == a.nodes
            && b.exact_before_churn == a.nodes
            && b.full_exact == b.full
            && b.reconnects == 0
            && b.deliveries >= b.deliveries_expected
            && b.server_streaming.is_none_or(|n| n == nodes);
    }
    s.nodes_exact = nodes_exact(&mut by_exact.iter().map(|e| e.0));
    s.full_nodes = by_exact.iter().map(|e| e.1).sum();
    s.full_nodes_exact = by_exact.iter().map(|e| e.2).sum();
    s.reconnects_sync = reconnects_sync;
    s.reconnects = reconnects.saturating_sub(reconnects_sync);
    s.ok = s.by_syncer.iter().all(|b| b.ok)
        && s.nodes_exact == a.nodes
        && s.nodes_exact_before_churn == a.nodes
        && s.full_nodes_exact == s.full_nodes
        && s.reconnects == 0
        && s.deliveries >= s.deliveries_expected;
    server.quit().await?;
    Ok((s, latency))
}
