//! What the scenario is told and what each side reports (`CalicoArgs`, `Side`,
//! `SyncerSide`), and starting a side's server (`start`): the leaf the scenario's other parts
//! (`side`, `states`, `table`, and `mod.rs`'s order of the sides) all read.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::bail;
use serde::Serialize;
use typha_server::calico::libcalico::SyncerType;

use crate::harness::{Common, Percentiles, Workdir};
use crate::procstat::SettleWait;
use crate::server::{Listen, Server};
use crate::store::{Store, StoreKind};

/// Settings of a Calico-protocol run.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct CalicoArgs {
    /// Calico-protocol nodes (the generated cluster has as many).
    #[arg(long, default_value_t = 1000)]
    pub(crate) nodes: usize,
    /// Pods per node in the generated cluster.
    #[arg(long, default_value_t = 30)]
    pub(crate) pods_per_node: usize,
    /// The connections each node opens, one per syncer type, comma-separated: felix, bgp,
    /// tunnel-ip-allocation, node-status. The default is what a calico-node with BGP
    /// networking opens (Felix, confd, the tunnel address allocator, the status reporter);
    /// without BIRD (VXLAN or policy only) confd does not run and bgp is not opened. Before
    /// issue 39 the default was `felix`: the earlier figures were taken with it.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "felix,bgp,tunnel-ip-allocation,node-status"
    )]
    pub(crate) syncer: Vec<String>,
    /// Also run the same Calico-protocol fleet with only these connections per node (e.g.
    /// `felix`) on a fresh typha-server, as a baseline in the same invocation: the table gives
    /// the ratio of `--syncer`'s fleet to it (what the other connections cost).
    #[arg(long, value_delimiter = ',')]
    pub(crate) baseline_syncer: Vec<String>,
    /// Seconds to wait once every connection is in sync before the quiet sample (server RSS
    /// settled, as the idle one is, and server CPU over the wait: the connections' pings and
    /// nothing else): what the initial syncs freed goes back over the allocator's decay.
    #[arg(long, default_value_t = 12.0)]
    pub(crate) connected_wait_secs: f64,
    /// Churn rate, updates per second.
    #[arg(long, default_value_t = 100.0)]
    pub(crate) rate: f64,
    /// Churn duration per side, seconds.
    #[arg(long, default_value_t = 30.0)]
    pub(crate) secs: f64,
    /// Skip the baseline (the same nodes over our own protocol).
    #[arg(long)]
    pub(crate) no_baseline: bool,
    /// Skip the crash at the end of each Calico-protocol side (the server SIGKILLed and
    /// started again on the same ports, every node reconnecting and resyncing).
    #[arg(long)]
    pub(crate) no_kill: bool,
    /// Calico's own `calico-typha` executable: its states are compared with ours and the same
    /// fleet is run against it (needs `--datastore`).
    #[arg(long, value_name = "PATH")]
    pub(crate) calico_typha: Option<PathBuf>,
    /// A real datastore, seeded with the generated cluster, that every server reads: `etcd`
    /// (Calico's layout) or `kubernetes` (a real kube-apiserver; peers/build). Default: the
    /// embedded datastore (our server only).
    #[arg(long, value_enum)]
    pub(crate) datastore: Option<StoreKind>,
    #[command(flatten)]
    pub(crate) common: Common,
}

/// One side: one protocol against a fresh server.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Side {
    /// `typha-server` or `calico-typha`.
    pub(crate) server: String,
    /// `calico/<syncer>[,<syncer>...]` or `ours`.
    pub(crate) protocol: String,
    /// Nodes.
    pub(crate) nodes: u64,
    /// Connections: nodes × syncer types (ours: one a node).
    pub(crate) connections: u64,
    /// KVs a node receives over all its connections (Calico KVs of its syncer types, or our
    /// cache's).
    pub(crate) kvs: u64,
    /// Seconds from starting the swarms until every connection was connected.
    pub(crate) connect_secs: f64,
    /// Seconds from starting the swarms until every connection was in sync.
    pub(crate) sync_secs: f64,
    /// Bytes the server wrote (`wchar`) per node per KV during the initial sync.
    pub(crate) bytes_per_kv: f64,
    /// Bytes the server wrote per update per node during the churn.
    pub(crate) bytes_per_update: f64,
    /// Updates written.
    pub(crate) updates: u64,
    /// (connection, update) pairs delivered.
    pub(crate) deliveries: u64,
    /// Expected: updates × the connections the churn reaches (ours: every node; Calico:
    /// every connection of a syncer type that receives workload endpoints).
    pub(crate) deliveries_expected: u64,
    /// Seconds the churn phase took, from its first write until every delivery arrived.
    pub(crate) churn_secs: f64,
    /// Write-to-receipt latency, ms.
    pub(crate) latency_ms: Percentiles,
    /// Server CPU seconds during the initial sync.
    pub(crate) server_cpu_sync_secs: f64,
    /// Server CPU seconds during the churn.
    pub(crate) server_cpu_churn_secs: f64,
    /// Server CPU per delivery during the churn, µs.
    pub(crate) server_cpu_per_delivery_us: f64,
    /// Server CPU during the churn over its wall time: cores.
    pub(crate) server_cores_churn: f64,
    /// Server CPU seconds while every connection was in sync and nothing changed (pings
    /// only), over `quiet_secs`.
    pub(crate) server_cpu_quiet_secs: f64,
    /// How long that was.
    pub(crate) quiet_secs: f64,
    /// Swarm CPU seconds during the initial sync (the nodes' side of it).
    pub(crate) swarm_cpu_sync_secs: f64,
    /// Swarm CPU seconds during the churn.
    pub(crate) swarm_cpu_churn_secs: f64,
    /// Swarm CPU per delivery during the churn, µs (beside the server's: what the simulated
    /// nodes cost, which must stay well below it for the server to be what is measured).
    pub(crate) swarm_cpu_per_delivery_us: f64,
    /// Swarm CPU per KV per node in the initial sync, µs.
    pub(crate) swarm_cpu_per_kv_us: f64,
    /// Server RSS before any client, once it settled, bytes.
    pub(crate) rss_idle: u64,
    /// How long that sample waited for the RSS to settle.
    #[serde(flatten)]
    pub(crate) idle_wait: SettleWait,
    /// With every connection connected and in sync (a second after).
    pub(crate) rss_connected: u64,
    /// With every connection in sync and quiet for `--connected-wait-secs`, settled.
    pub(crate) rss_quiet: u64,
    /// Peak.
    pub(crate) rss_peak: u64,
    /// (connected − idle) / connections.
    pub(crate) rss_per_connection: f64,
    /// (connected − idle) / nodes.
    pub(crate) rss_per_node: f64,
    /// (quiet − idle) / connections.
    pub(crate) rss_quiet_per_connection: f64,
    /// (quiet − idle) / nodes.
    pub(crate) rss_quiet_per_node: f64,
    /// Idle RSS / KVs a node receives (an upper bound of memory per KV).
    pub(crate) rss_idle_per_kv: f64,
    /// Nodes whose every connection was exact before the churn (Calico protocol; ours: not
    /// checked there). With several syncer types, when some connection was not exact, a lower
    /// bound: the nodes less the connections that were not (`by_syncer` has each type's).
    pub(crate) nodes_exact_before_churn: usize,
    /// Nodes whose every connection was exact at the end (the same lower bound).
    pub(crate) nodes_exact: usize,
    /// Full connections (values hashed; the first `--full-nodes` nodes of each swarm, every
    /// connection of theirs).
    pub(crate) full_nodes: usize,
    /// Of those, exact at the end.
    pub(crate) full_nodes_exact: usize,
    /// Calico sessions that ended and reconnected before every connection was in sync
    /// (reported: a connection that reconnects gets a new snapshot, as calico-node's would).
    pub(crate) reconnects_sync: u64,
    /// Calico sessions that ended and reconnected after (fails the run: a resent snapshot
    /// would count stamped values as deliveries, and a connection the churn does not reach is
    /// judged by staying connected).
    pub(crate) reconnects: u64,
    /// Each syncer type's connections (Calico protocol).
    pub(crate) by_syncer: Vec<SyncerSide>,
    /// Connections the server closed, by reason, until every node was in sync (typha-server
    /// only: Calico's Typha does not say why).
    pub(crate) server_drops_sync: BTreeMap<String, u64>,
    /// After the churn (Calico protocol): seconds from SIGKILL until the restarted server was
    /// ready (its datastore listed again).
    pub(crate) kill_ready_secs: Option<f64>,
    /// Seconds from SIGKILL until every connection was in sync again.
    pub(crate) kill_resync_secs: Option<f64>,
    /// CPU seconds of the restarted server until then.
    pub(crate) kill_server_cpu_secs: Option<f64>,
    /// Sessions that ended during the resync beyond the one each connection lost to the kill.
    pub(crate) kill_extra_reconnects: Option<u64>,
    /// Connections the restarted server closed, by reason, until every connection was in sync
    /// again (typha-server only).
    pub(crate) kill_server_drops: BTreeMap<String, u64>,
    /// Nothing lost.
    pub(crate) ok: bool,
}

/// One syncer type's connections on a side.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct SyncerSide {
    /// The syncer type.
    pub(crate) syncer: String,
    /// KVs a connection of this type receives (a client's state taken before the fleet).
    pub(crate) kvs: u64,
    /// Whether the churn reaches this type (libcalico's translation of a churn write says).
    pub(crate) churned: bool,
    /// Seconds from starting the swarms until every connection of this type was in sync.
    pub(crate) sync_secs: f64,
    /// (connection, churn update) pairs delivered.
    pub(crate) deliveries: u64,
    /// Expected: updates × nodes if the churn reaches the type, else 0.
    pub(crate) deliveries_expected: u64,
    /// Updates of any key received during the churn (0 expected where the churn does not
    /// reach; reported, not judged: the state checks judge what they did).
    pub(crate) updates_in_churn: u64,
    /// Write-to-receipt latency of the churn updates, ms (none where the churn does not
    /// reach).
    pub(crate) latency_ms: Percentiles,
    /// Connections exact before the churn / at the end.
    pub(crate) exact_before_churn: usize,
    /// At the end.
    pub(crate) exact: usize,
    /// The server's own count of this type's connections streaming once every connection was
    /// in sync (`typha_connections_streaming{syncer}`; typha-server only): each node's, under
    /// its type.
    pub(crate) server_streaming: Option<u64>,
    /// Full connections, and how many were exact at the end.
    pub(crate) full: usize,
    /// Of those, exact.
    pub(crate) full_exact: usize,
    /// Sessions that reconnected before every connection was in sync / after.
    pub(crate) reconnects_sync: u64,
    /// After.
    pub(crate) reconnects: u64,
    /// Every connection exact before and after, none reconnected during or after the churn,
    /// every delivery made, and the server counting each node's connection under this type.
    pub(crate) ok: bool,
}

/// Which server a side runs.
#[derive(Debug, Clone, Copy)]
pub(super) enum Target<'a> {
    /// typha-server.
    Ours,
    /// Calico's `calico-typha` at this path.
    Calico(&'a Path),
}

/// Starts the target over the run's datastore (the embedded one when `store` is `None`),
/// ours with a connection limit that admits `connections` (see [`limit_env`]).
pub(super) async fn start(
    wd: &Workdir,
    store: Option<&Store>,
    t: Target<'_>,
    name: &str,
    connections: u64,
) -> anyhow::Result<Server> {
    let env = limit_env(connections);
    match (t, store) {
        (Target::Ours, None) => wd.server_tuned(name, &env).await,
        (Target::Ours, Some(s)) => {
            wd.server_placed(name, &s.backend(false)?, Listen::Loopback, &env)
                .await
        }
        (Target::Calico(bin), Some(s)) => wd.calico_typha(name, bin, &s.backend(true)?).await,
        (Target::Calico(_), None) => bail!("Calico's Typha cannot read the embedded datastore"),
    }
}

/// The connection limit a run of `connections` needs: loadtest's default for every server
/// (100,000, `server::DEFAULTS`) unless the run needs more. A limit set in the environment is
/// left alone (it is the caller's to test), but one below the run's connections is warned
/// of: the server would turn nodes away.
pub(super) fn limit_env(connections: u64) -> Vec<(&'static str, String)> {
    const LIMIT: &str = "TYPHA_MAXCONNECTIONSUPPERLIMIT";
    // Room for the states check's and the end-of-run clients beside the fleet.
    let needed = connections + 16;
    match std::env::var(LIMIT).ok().map(|v| v.trim().parse::<u64>()) {
        Some(Ok(set)) if set < needed => {
            eprintln!(
                "calico: {LIMIT}={set} is below the run's {connections} connections: the server \
                 will turn some away"
            );
            Vec::new()
        }
        Some(_) => Vec::new(),
        None if needed > 100_000 => vec![(LIMIT, needed.to_string())],
        None => Vec::new(),
    }
}

/// Open files a server needs beside its connections, with room to spare (typha-server on
/// the embedded datastore held 816 with 800 connections: 16 others).
pub(super) const OTHER_FILES: u64 = 256;

/// Parses a list of syncer type names (`flag` names it in an error), each once, in order.
pub(super) fn syncer_types(flag: &str, names: &[String]) -> anyhow::Result<Vec<SyncerType>> {
    let mut out = Vec::new();
    for n in names {
        let Some(t) = SyncerType::from_hello(n.trim()).filter(|_| !n.trim().is_empty()) else {
            bail!("{flag} {n}: not one of felix, bgp, tunnel-ip-allocation, node-status");
        };
        if !out.contains(&t) {
            out.push(t);
        }
    }
    Ok(out)
}
