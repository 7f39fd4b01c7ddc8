//! The `calico` scenario (issues 23 and 39): a fleet of N nodes speaking Calico's own Typha
//! protocol, each node opening calico-node's connections, one per syncer type (`--syncer`:
//! by default felix, bgp, tunnel-ip-allocation and node-status, as Felix, confd, the tunnel
//! address allocator and the status reporter each hold one; `__swarm --calico SYNCERS`, see
//! `calico_node`), against the typha-server program, the generated cluster and the steady
//! churn; in the same invocation, with `--baseline-syncer felix`, the same fleet with felix
//! connections only on a fresh server (what the other connections cost), and the same N
//! nodes over our own protocol against a fresh server as the baseline (`--no-baseline` skips
//! it); and, with
//! `--calico-typha PATH`, the same Calico-protocol fleet against Calico's own `calico-typha`
//! on the same datastore (`--datastore etcd` or `kubernetes`: Calico's Typha cannot read the
//! embedded one). Each side starts its server fresh, alone on the machine, and reports the
//! time until all nodes are in sync, the write-to-receipt latency of every churn update (the
//! churn stamp is a label, which both servers keep in the workload endpoint's JSON), server
//! CPU per delivery, server RSS idle / connected / peak and per connection, and the bytes the
//! server wrote (`wchar` of /proc, the same measure for both programs) per KV in the initial
//! sync and per update in the churn.
//!
//! What each server sends is checked first, on the freshly seeded datastore: our Rust
//! Calico-protocol client (`typha_client::calico`) takes every syncer type's state from our
//! server, which must equal the libcalico translation of the generated cluster key for key
//! (embedded and etcd; the Kubernetes datastore seeds pods, not the translated resources);
//! with `--calico-typha`, it takes the same from Calico's Typha and the two are compared: keys
//! only one sends, and values that differ (JSON compared as values; revisions left out, they
//! are the datastore's).
//!
//! Nothing lost, per Calico-protocol side and per syncer type: before the churn every
//! connection holds exactly the keys a client of its syncer type took from that server just
//! before the fleet started, and every full connection's digest over (key, value) equals that
//! client's; after the churn the same holds against a second client's state, no connection
//! reconnected during the churn, and every (connection, update) pair the churn sends to its
//! syncer type was delivered. The churn relabels workload endpoints, which libcalico sends to
//! felix only (the scenario translates one churn write to find out which types it reaches):
//! a connection of another type (bgp: Nodes, pools, affinities) is expected to receive none
//! of it, and is judged by its state before and after, by staying connected through the churn
//! (answering the server's pings), and is reported with the updates it did receive.
//!
//! The parts: `states` (every syncer type's state taken with our Rust client, the libcalico
//! translation, the comparisons), `side` (one fleet against one fresh server: sync, churn,
//! crash, checks), `table` (the Markdown report), `setup` (the settings, what a side reports,
//! starting a side's server: the leaf the others read). This file holds the order of the sides.

mod setup;
mod side;
mod states;
mod table;

use std::time::Instant;

use anyhow::{Context, bail};
use typha_client::tls::ClientTls;

pub(crate) use self::setup::CalicoArgs;
use self::setup::{OTHER_FILES, Side, Target, syncer_types};
use self::side::side;
use self::states::{Diff, check_states};
use self::table::table;
use crate::harness::{self, Outcome, Timeline, Workdir};
use crate::store::Store;

pub(crate) async fn run(a: CalicoArgs) -> anyhow::Result<Outcome> {
    a.common.own_server_only("calico")?;
    let syncers = syncer_types("--syncer", &a.syncer)?;
    if syncers.is_empty() {
        bail!("--syncer: name at least one syncer type");
    }
    let baseline_syncers = syncer_types("--baseline-syncer", &a.baseline_syncer)?;
    // Every connection is a socket in the server and in its node's swarm; beside them a
    // server holds a few files (listeners, epoll, its datastore's, loadtest's HTTP client).
    let k = syncers.len().max(baseline_syncers.len()) as u64;
    let per_swarm = a.common.nodes_per_swarm.clamp(1, a.nodes.max(1)) as u64;
    harness::open_files(
        (a.nodes as u64 * k).max(per_swarm * k) + OTHER_FILES,
        &format!(
            "{} nodes × {k} connections in the server, {} × {k} in a swarm",
            a.nodes, per_swarm
        ),
    )?;
    if a.calico_typha.is_some() && a.datastore.is_none() {
        bail!(
            "--calico-typha: Calico's Typha cannot read the embedded datastore; add --datastore \
             etcd (or kubernetes) so both servers read the same one"
        );
    }
    if a.calico_typha.is_none() {
        eprintln!(
            "calico: the side-by-side with Calico's own Typha needs --calico-typha PATH (and \
             --datastore etcd or kubernetes); running our server only"
        );
    }
    let wd = Workdir::new(a.nodes, a.pods_per_node, a.common.plain)?.using(&a.common);
    let tls = match wd.tls_dir() {
        Some(d) => Some(
            typha_client::tls::client_config(&ClientTls {
                ca_file: d.join("ca.crt"),
                cert_file: d.join("client.crt"),
                key_file: d.join("client.key"),
                server_cn: Some("typha-server".into()),
                server_uri_san: None,
            })
            .context("client TLS settings")?,
        ),
        None => None,
    };
    let store = match a.datastore {
        Some(k) => Some(Store::start(k, &wd).await?.0),
        None => None,
    };
    let timeline = Timeline::start();
    let started = Instant::now();
    let checks = check_states(&wd, &a, store.as_ref(), tls.as_ref()).await?;
    let (cal, latency) = side(
        &wd,
        &a,
        store.as_ref(),
        Target::Ours,
        &syncers,
        tls.as_ref(),
    )
    .await?;
    said_as_it_ends(&cal);
    let fewer = if baseline_syncers.is_empty() {
        None
    } else {
        let (s, _) = side(
            &wd,
            &a,
            store.as_ref(),
            Target::Ours,
            &baseline_syncers,
            tls.as_ref(),
        )
        .await?;
        said_as_it_ends(&s);
        Some(s)
    };
    let ours = if a.no_baseline {
        None
    } else {
        let (s, _) = side(&wd, &a, store.as_ref(), Target::Ours, &[], tls.as_ref()).await?;
        said_as_it_ends(&s);
        Some(s)
    };
    let theirs = match &a.calico_typha {
        Some(bin) => Some(
            side(
                &wd,
                &a,
                store.as_ref(),
                Target::Calico(bin),
                &syncers,
                tls.as_ref(),
            )
            .await?
            .0,
        ),
        None => None,
    };
    if let Some(t) = &theirs {
        said_as_it_ends(t);
    }
    let sides = table::Sides {
        calico: &cal,
        fewer: fewer.as_ref(),
        ours: ours.as_ref(),
        theirs: theirs.as_ref(),
    };
    // The translation must match exactly; Calico's Typha is compared and reported, since the
    // differences are listed and explained in docs/replacing-calico-typha.md.
    let ok = sides.all_ok() && checks.ours_vs_translation.iter().all(Diff::equal);
    let table = table(&a, &checks, &sides, started.elapsed());
    Ok(Outcome {
        name: "calico",
        table,
        json: serde_json::json!({
            "nodes": a.nodes,
            "tls": !a.common.plain,
            "datastore": a.datastore,
            "checks": checks,
            "calico": cal,
            "calico_baseline": fewer,
            "ours": ours,
            "calico_typha": theirs,
        }),
        ok,
        timeline: timeline.stop(),
        latency: Some(latency),
    })
}

/// Writes a side's results to stderr as soon as the side ends, one JSON line: a later side
/// that fails (or a coordinator killed for its memory) then does not take them with it.
fn said_as_it_ends(s: &Side) {
    match serde_json::to_string(s) {
        Ok(line) => eprintln!("calico: {} ({}) side ended: {line}", s.server, s.protocol),
        Err(e) => eprintln!(
            "calico: {} ({}) side ended; its results do not serialize: {e}",
            s.server, s.protocol
        ),
    }
}

#[cfg(test)]
mod tests {
    use typha_server::calico::libcalico::SyncerType;

    use super::*;

    #[test]
    fn syncer_lists_are_parsed_each_type_once_in_order() {
        let names = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let got = syncer_types("--syncer", &names(&["bgp", "felix", "bgp", "node-status"]));
        assert_eq!(
            got.unwrap(),
            [SyncerType::Bgp, SyncerType::Felix, SyncerType::NodeStatus]
        );
        // Typha's empty name means felix; on the command line it is a mistake.
        for bad in ["", "felx"] {
            let e = syncer_types("--syncer", &names(&["felix", bad])).unwrap_err();
            assert!(e.to_string().contains("not one of felix, bgp"), "{e}");
        }
    }
}
