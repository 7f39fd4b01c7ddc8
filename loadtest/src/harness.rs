//! What every scenario shares: the run's work directory (generated cluster manifests, TLS
//! bundle), starting server and swarm processes, waiting on their progress, sampling a
//! timeline, and collecting each swarm's final latency histogram and digests.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use hdrhistogram::Histogram;
use hdrhistogram::serialization::Deserializer;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use crate::child::Child;
use crate::cluster::write_cluster;
use crate::procstat::usage;
use crate::server::{Backend, Listen, Server, ServerOpts, Spawn};

/// Settings every scenario has.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct Common {
    /// Most nodes per swarm process (each node is one connection, or one per syncer type in
    /// `calico`: 5,000 × 4 is 20,000 sockets, and loadtest raises its open-file limit to fit).
    #[arg(long, default_value_t = 5000)]
    pub(crate) nodes_per_swarm: usize,
    /// Nodes per swarm that keep the full store and recompute the digest themselves (the
    /// others keep no values and skip decoding snapshots). Calico-protocol nodes: that decode
    /// every update into typed values (the others skim: each key and value hashed where it
    /// lies); every Calico node's digest is checked either way.
    #[arg(long, default_value_t = 1)]
    pub(crate) full_nodes: usize,
    /// Nodes, over all swarms, that are real typha-clients and measure latency (the sample);
    /// every other node is a lean reader that proves it got every update (its sequence
    /// chain, snapshot count and final digest) at a fraction of the CPU (see `lean`). Each
    /// swarm gets its share, at least `--full-nodes`. At or above `--nodes`: every node a
    /// typha-client, the swarm as it was before issue 22.
    #[arg(long, default_value_t = 1000)]
    pub(crate) sample_nodes: usize,
    /// Plaintext instead of mutual TLS.
    #[arg(long)]
    pub(crate) plain: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub(crate) json: bool,
    /// Also write a Markdown report with SVG plots into this directory.
    #[arg(long)]
    pub(crate) report: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) server: ServerOpts,
}

impl Common {
    /// Fails if an external server was given: this scenario starts (and kills, or measures)
    /// its own.
    pub(crate) fn own_server_only(&self, scenario: &str) -> anyhow::Result<()> {
        if self.server.server_addr.is_some() {
            bail!("{scenario} starts its own servers; --server-addr works with steady only");
        }
        Ok(())
    }
}

/// A run's work directory; removed when dropped.
pub(crate) struct Workdir {
    path: PathBuf,
    manifests: PathBuf,
    tls: Option<PathBuf>,
    cluster_nodes: usize,
    pods: usize,
    server_bin: Option<PathBuf>,
}

impl Workdir {
    /// Writes a cluster of `cluster_nodes` nodes with `pods` pods each, and (unless `plain`) a
    /// CA with server and client certificates.
    pub(crate) fn new(cluster_nodes: usize, pods: usize, plain: bool) -> anyhow::Result<Self> {
        let path = std::env::temp_dir().join(format!("typha-loadtest-{}", std::process::id()));
        let manifests = path.join("manifests");
        let wd = Workdir {
            tls: (!plain).then(|| path.join("tls")),
            path,
            manifests,
            cluster_nodes,
            pods,
            server_bin: None,
        };
        write_cluster(&wd.manifests, cluster_nodes, pods)
            .context("writing the cluster manifests")?;
        if let Some(t) = &wd.tls {
            typha_server::pki::write_bundle(t, &["localhost", "127.0.0.1"], "typha-client")
                .context("writing the TLS bundle")?;
        }
        Ok(wd)
    }

    /// The TLS bundle directory, if TLS is on.
    pub(crate) fn tls_dir(&self) -> Option<&Path> {
        self.tls.as_deref()
    }

    /// Starts a server process over the cluster and waits until its cache holds all of it.
    pub(crate) async fn server(&self, name: &str) -> anyhow::Result<Server> {
        self.server_with(name, self.tls.as_deref(), &[]).await
    }

    /// [`server`](Self::server) with settings of its own (`TYPHA_…` variables) over the
    /// environment's.
    pub(crate) async fn server_tuned(
        &self,
        name: &str,
        env: &[(&str, String)],
    ) -> anyhow::Result<Server> {
        self.server_with(name, self.tls.as_deref(), env).await
    }

    /// [`server`](Self::server) without TLS, even if the work dir has a bundle.
    pub(crate) async fn plain_server(&self, name: &str) -> anyhow::Result<Server> {
        self.server_with(name, None, &[]).await
    }

    async fn server_with(
        &self,
        name: &str,
        tls: Option<&Path>,
        env: &[(&str, String)],
    ) -> anyhow::Result<Server> {
        Server::spawn(Spawn {
            name,
            manifests: &self.manifests,
            tls,
            log_dir: &self.path,
            bin: self.server_bin.as_deref(),
            backend: &Backend::Embedded,
            calico_typha: None,
            env,
            listen: Listen::Loopback,
        })
        .await
    }

    /// Starts our server over `backend` and waits until its cache holds all of it.
    pub(crate) async fn server_on(&self, name: &str, backend: &Backend) -> anyhow::Result<Server> {
        self.server_placed(name, backend, Listen::Loopback, &[])
            .await
    }

    /// [`server_on`](Self::server_on), listening where `listen` says, with settings of its
    /// own (`TYPHA_…` variables) over the environment's.
    pub(crate) async fn server_placed(
        &self,
        name: &str,
        backend: &Backend,
        listen: Listen,
        env: &[(&str, String)],
    ) -> anyhow::Result<Server> {
        Server::spawn(Spawn {
            name,
            manifests: &self.manifests,
            tls: self.tls.as_deref(),
            log_dir: &self.path,
            bin: self.server_bin.as_deref(),
            backend,
            calico_typha: None,
            env,
            listen,
        })
        .await
    }

    /// Starts Calico's own Typha (`bin`) over `backend` with the run's TLS bundle, and waits
    /// until it says it is ready.
    pub(crate) async fn calico_typha(
        &self,
        name: &str,
        bin: &Path,
        backend: &Backend,
    ) -> anyhow::Result<Server> {
        Server::spawn(Spawn {
            name,
            manifests: &self.manifests,
            tls: self.tls.as_deref(),
            log_dir: &self.path,
            bin: None,
            backend,
            calico_typha: Some(bin),
            env: &[],
            listen: Listen::Loopback,
        })
        .await
    }

    /// The work directory.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Applies the run's server settings: which server binary, and (for an external server)
    /// its client TLS material instead of the generated bundle.
    pub(crate) fn using(mut self, c: &Common) -> Self {
        self.server_bin = c.server.server_bin.clone();
        if let Some(t) = &c.server.tls_dir {
            self.tls = Some(t.clone());
        }
        self
    }

    /// The generated cluster's shape: (nodes, pods per node).
    pub(crate) fn shape(&self) -> (usize, usize) {
        (self.cluster_nodes, self.pods)
    }

    /// Starts swarms for `nodes` nodes (numbered from `first`) against `servers`: as many
    /// processes as `nodes_per_swarm` requires. `extra` is passed to each.
    pub(crate) fn swarms(
        &self,
        servers: &[&str],
        nodes: usize,
        first: usize,
        c: &Common,
        extra: &[String],
    ) -> anyhow::Result<Vec<Child>> {
        self.swarms_with(servers, nodes, first, c, extra, self.tls.as_deref())
    }

    fn swarms_with(
        &self,
        servers: &[&str],
        nodes: usize,
        first: usize,
        c: &Common,
        extra: &[String],
        tls: Option<&Path>,
    ) -> anyhow::Result<Vec<Child>> {
        let mut out = Vec::new();
        let mut at = 0;
        while at < nodes {
            let n = c.nodes_per_swarm.max(1).min(nodes - at);
            // This swarm's share of the sample, rounded up.
            let sample = (c.sample_nodes.saturating_mul(n)).div_ceil(nodes).min(n);
            let args = swarm_args(servers, n, first + at, sample, c, extra, tls);
            out.push(Child::spawn(&format!("swarm {}", first + at), &args)?);
            at += n;
        }
        Ok(out)
    }

    /// One swarm of `nodes` nodes (numbered from `first`, `sample` of them real
    /// typha-clients), in the network namespace `netns` if given, against `servers` as
    /// addressed from there.
    pub(crate) fn swarm_in(
        &self,
        netns: Option<&str>,
        servers: &[&str],
        (nodes, first, sample): (usize, usize, usize),
        c: &Common,
        extra: &[String],
    ) -> anyhow::Result<Child> {
        let args = swarm_args(servers, nodes, first, sample, c, extra, self.tls.as_deref());
        match netns {
            Some(ns) => Child::spawn_in(ns, &format!("swarm {first} (in {ns})"), &args),
            None => Child::spawn(&format!("swarm {first}"), &args),
        }
    }
}

/// A swarm's arguments.
fn swarm_args(
    servers: &[&str],
    nodes: usize,
    first: usize,
    sample: usize,
    c: &Common,
    extra: &[String],
    tls: Option<&Path>,
) -> Vec<String> {
    let mut args = vec![
        "__swarm".to_owned(),
        "--server".into(),
        servers.join(","),
        "--nodes".into(),
        nodes.to_string(),
        "--first".into(),
        first.to_string(),
        "--full-nodes".into(),
        c.full_nodes.to_string(),
        "--sample".into(),
        sample.to_string(),
    ];
    if let Some(t) = tls {
        args.extend(["--tls-dir".into(), t.display().to_string()]);
    }
    args.extend(extra.iter().cloned());
    args
}

/// Swarms without TLS, even if the work dir has a bundle.
pub(crate) fn plain_swarms(
    wd: &Workdir,
    servers: &[&str],
    nodes: usize,
    c: &Common,
    extra: &[String],
) -> anyhow::Result<Vec<Child>> {
    wd.swarms_with(servers, nodes, 0, c, extra, None)
}

impl Drop for Workdir {
    fn drop(&mut self) {
        // `LOADTEST_KEEP=1` keeps it (the servers' and datastore's logs) for a post-mortem.
        if std::env::var_os("LOADTEST_KEEP").is_some_and(|v| v != "0") {
            eprintln!("loadtest: kept {}", self.path.display());
            return;
        }
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Makes room for `needed` open files in this process and the servers and swarms it starts
/// (they inherit its limit): the soft limit is raised towards the hard one. Fails, naming
/// `why` and what to do, when even the hard limit is lower: a server or swarm out of file
/// descriptors turns nodes away in ways that look like the server's fault.
pub(crate) fn open_files(needed: u64, why: &str) -> anyhow::Result<()> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).context("getrlimit(RLIMIT_NOFILE)")?;
    if soft >= needed {
        return Ok(());
    }
    if hard < needed {
        bail!(
            "{why} need {needed} open files per process, and the hard limit is {hard}: raise it \
             (as root, `ulimit -n {needed}` in the shell that runs loadtest)"
        );
    }
    setrlimit(Resource::RLIMIT_NOFILE, needed, hard).context("setrlimit(RLIMIT_NOFILE)")
}

/// The sum of a progress field over swarms.
pub(crate) fn sum(swarms: &[Child], field: &str) -> u64 {
    swarms.iter().map(|s| s.progress_u64(field)).sum()
}

/// The first swarm that can no longer report (exited, unreadable, or silent), and why.
pub(crate) fn gone(swarms: &[Child]) -> Option<String> {
    swarms.iter().find_map(Child::gone)
}

/// CPU seconds of processes (those still running).
pub(crate) fn cpu(pids: &[u32]) -> f64 {
    pids.iter()
        .filter_map(|p| usage(*p))
        .map(|u| u.cpu_secs)
        .sum()
}

/// A progress bar (drawn only on a terminal).
pub(crate) fn bar(len: u64, what: &str) -> ProgressBar {
    let b = ProgressBar::new(len);
    b.set_style(
        ProgressStyle::with_template("{prefix:>10} [{bar:40}] {pos}/{len} {msg} ({elapsed})")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    b.set_prefix(what.to_owned());
    b
}

/// Waits until the progress `field` summed over `swarms` reaches `target` (at most `limit`),
/// showing a bar; returns the seconds it took.
pub(crate) async fn wait_for(
    swarms: &[Child],
    field: &str,
    target: u64,
    what: &str,
    limit: Duration,
) -> anyhow::Result<f64> {
    let started = Instant::now();
    let b = bar(target, what);
    loop {
        let n = sum(swarms, field);
        b.set_position(n.min(target));
        if n >= target {
            break;
        }
        if started.elapsed() > limit {
            b.abandon();
            bail!("{what}: only {n} of {target} ({field}) after {limit:?}");
        }
        if let Some(why) = gone(swarms) {
            b.abandon();
            bail!("{what}: waiting for {field} to reach {target} (at {n}), but {why}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    b.finish();
    Ok(started.elapsed().as_secs_f64())
}

/// [`wait_for`], counting only progress that reports `marks` (one per swarm: the mark each
/// swarm answered), so a line printed before a swarm took its mark cannot count.
pub(crate) async fn wait_for_marked(
    swarms: &[Child],
    marks: &[serde_json::Value],
    field: &str,
    target: u64,
    what: &str,
    limit: Duration,
) -> anyhow::Result<f64> {
    let started = Instant::now();
    loop {
        let current = swarms
            .iter()
            .zip(marks)
            .all(|(s, m)| s.progress().latest()["mark"] == *m);
        if current {
            break;
        }
        if let Some(why) = gone(swarms) {
            bail!("{what}: waiting for progress after the mark, but {why}");
        }
        if started.elapsed() > limit {
            bail!("{what}: no progress after the mark within {limit:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let rest = limit.saturating_sub(started.elapsed());
    Ok(started.elapsed().as_secs_f64() + wait_for(swarms, field, target, what, rest).await?)
}

/// A latency histogram in microseconds.
pub(crate) fn histogram() -> anyhow::Result<Histogram<u64>> {
    Ok(Histogram::new_with_bounds(1, 600_000_000, 3)?)
}

/// Decodes a histogram a swarm printed.
pub(crate) fn decode_histogram(hex: &str) -> anyhow::Result<Histogram<u64>> {
    let bytes: Vec<u8> = (0..hex.len() / 2)
        .filter_map(|i| u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok())
        .collect();
    Deserializer::new()
        .deserialize(&mut &bytes[..])
        .context("swarm histogram")
}

/// Asks every swarm for its latency histogram so far (and to start a new one); merged.
pub(crate) async fn phase_histogram(swarms: &mut [Child]) -> anyhow::Result<Histogram<u64>> {
    let mut merged = histogram()?;
    for s in swarms.iter_mut() {
        s.send("histogram").await?;
    }
    for s in swarms.iter_mut() {
        let v = s.expect("histogram", Duration::from_secs(30)).await?;
        merged.add(decode_histogram(
            v["histogram"].as_str().unwrap_or_default(),
        )?)?;
    }
    Ok(merged)
}

/// One churn phase.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Phase {
    /// Healthy nodes' write-to-receipt latency.
    pub(crate) latency_ms: Percentiles,
    /// Updates written.
    pub(crate) updates: u64,
    /// Deliveries to healthy nodes.
    pub(crate) deliveries: u64,
    /// Server RSS at the start and end of the phase, and its highest sample, bytes.
    pub(crate) rss_start: u64,
    /// End.
    pub(crate) rss_end: u64,
    /// Highest sample.
    pub(crate) rss_max: u64,
}

/// Runs `churn` (`rate` × `secs` updates) and waits until every healthy node has received
/// them, sampling the RSS of `watched_pid` (the server, or etcd); the phase's numbers.
pub(crate) async fn churn_phase(
    watched_pid: u32,
    churn: crate::server::Churn,
    swarms: &mut [Child],
    healthy: usize,
    rate: f64,
    secs: f64,
    what: &str,
) -> anyhow::Result<(Phase, hdrhistogram::Histogram<u64>)> {
    let rss = |pid| usage(pid).map(|u| u.rss).unwrap_or(0);
    let rss_start = rss(watched_pid);
    let mut rss_max = rss_start;
    let got0 = sum(swarms, "churn_updates");
    let want = (rate * secs).round() as u64 * healthy as u64;
    let b = bar(want, what);
    let started = Instant::now();
    let limit = Duration::from_secs_f64(secs) + Duration::from_secs(60);
    loop {
        let got = sum(swarms, "churn_updates") - got0;
        b.set_position(got);
        rss_max = rss_max.max(rss(watched_pid));
        if got >= want || started.elapsed() > limit {
            break;
        }
        if let Some(why) = gone(swarms) {
            b.abandon();
            bail!("{what}: waiting for {want} deliveries (at {got}), but {why}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    b.finish();
    // The writer paces itself over `secs`; a minute more for its last requests.
    let updates = churn.wait(limit + Duration::from_secs(60)).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let h = phase_histogram(swarms).await?;
    let rss_end = rss(watched_pid);
    let p = Phase {
        latency_ms: Percentiles::of(&h),
        updates,
        deliveries: sum(swarms, "churn_updates") - got0,
        rss_start,
        rss_end,
        rss_max: rss_max.max(rss_end),
    };
    Ok((p, h))
}

/// Latency percentiles, milliseconds.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Percentiles {
    /// Samples.
    pub(crate) count: u64,
    /// 50th.
    pub(crate) p50: f64,
    /// 90th.
    pub(crate) p90: f64,
    /// 99th.
    pub(crate) p99: f64,
    /// Largest.
    pub(crate) max: f64,
}

impl Percentiles {
    /// Of a histogram in microseconds.
    pub(crate) fn of(h: &Histogram<u64>) -> Self {
        let pct = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
        Percentiles {
            count: h.len(),
            p50: pct(0.5),
            p90: pct(0.9),
            p99: pct(0.99),
            max: h.max() as f64 / 1000.0,
        }
    }

    /// `p50 / p90 / p99 / max ms`.
    pub(crate) fn cells(&self) -> String {
        format!(
            "{:.1} / {:.1} / {:.1} / {:.1} ms",
            self.p50, self.p90, self.p99, self.max
        )
    }
}

/// What the swarms reported when they finished.
#[derive(Debug)]
pub(crate) struct Finished {
    /// Latency since the last phase boundary.
    pub(crate) histogram: Histogram<u64>,
    /// Nodes whose final digest equals the expected one.
    pub(crate) exact: usize,
    /// Nodes with a full store.
    pub(crate) full_nodes: usize,
    /// Of those, exact.
    pub(crate) full_exact: usize,
    /// Nodes that reported a digest.
    pub(crate) nodes: usize,
    /// Raw connections that ended with an error.
    pub(crate) raw_errors: u64,
    /// Sessions that ended because the stream disagreed with a node's state (gap, digest,
    /// snapshot count): each one is a node that missed or misapplied something.
    pub(crate) inconsistent: u64,
    /// Nodes that were real typha-clients (latency measured).
    pub(crate) sample_nodes: u64,
    /// Nodes that were lean readers.
    pub(crate) lean_nodes: u64,
    /// What swarms run with `--checks` counted.
    pub(crate) checks: crate::node_checks::CheckCounts,
}

/// Stops every swarm; compares each node's digest with `digest` (the server's).
pub(crate) async fn finish(swarms: Vec<Child>, digest: &str) -> anyhow::Result<Finished> {
    let mut f = Finished {
        histogram: histogram()?,
        exact: 0,
        full_nodes: 0,
        full_exact: 0,
        nodes: 0,
        raw_errors: 0,
        inconsistent: 0,
        sample_nodes: 0,
        lean_nodes: 0,
        checks: crate::node_checks::CheckCounts::default(),
    };
    let mut swarms = swarms;
    for s in &mut swarms {
        s.send("finish").await?;
    }
    for mut s in swarms {
        let done = s.expect("done", Duration::from_secs(300)).await?;
        f.raw_errors += done["raw_errors"].as_u64().unwrap_or(0);
        f.inconsistent += done["inconsistent"].as_u64().unwrap_or(0);
        f.sample_nodes += done["sample_nodes"].as_u64().unwrap_or(0);
        f.lean_nodes += done["lean_nodes"].as_u64().unwrap_or(0);
        f.checks = f.checks.add(crate::node_checks::CheckCounts::of(&done));
        let count = |v: &serde_json::Value, exact: &mut usize, all: &mut usize| {
            if let Some(d) = v.as_object() {
                *all += d.values().filter_map(|v| v.as_u64()).sum::<u64>() as usize;
                *exact += d.get(digest).and_then(|v| v.as_u64()).unwrap_or(0) as usize;
            }
        };
        count(&done["digests"], &mut f.exact, &mut f.nodes);
        count(&done["full_digests"], &mut f.full_exact, &mut f.full_nodes);
        f.histogram.add(decode_histogram(
            done["histogram"].as_str().unwrap_or_default(),
        )?)?;
        s.wait(Duration::from_secs(60)).await?;
    }
    Ok(f)
}

/// How many nodes ended with the server's exact state (flattened into each result).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Exactness {
    /// Nodes whose final state equals the server's (by digest).
    pub(crate) nodes_exact: usize,
    /// Nodes that kept the full store and recomputed the digest themselves.
    pub(crate) full_nodes: usize,
    /// Of those, how many ended exact.
    pub(crate) full_nodes_exact: usize,
    /// Sessions that ended on an inconsistent stream (a gap, a digest or snapshot count
    /// mismatch).
    pub(crate) inconsistent_sessions: u64,
    /// Nodes that were real typha-clients, latency measured (the sample).
    pub(crate) sample_nodes: u64,
    /// Nodes that were lean readers (see `lean`).
    pub(crate) lean_nodes: u64,
}

/// Bytes as MiB.
pub(crate) fn mib(b: u64) -> f64 {
    b as f64 / (1 << 20) as f64
}

impl Finished {
    /// The counts for a result.
    pub(crate) fn exactness(&self) -> Exactness {
        Exactness {
            nodes_exact: self.exact,
            full_nodes: self.full_nodes,
            full_nodes_exact: self.full_exact,
            inconsistent_sessions: self.inconsistent,
            sample_nodes: self.sample_nodes,
            lean_nodes: self.lean_nodes,
        }
    }

    /// Whether every node (and every full-store node) ended with the server's state.
    pub(crate) fn all_exact(&self, expected_nodes: usize) -> bool {
        self.nodes == expected_nodes
            && self.exact == self.nodes
            && self.full_exact == self.full_nodes
            && self.inconsistent == 0
    }

    /// One table line about it.
    pub(crate) fn verdict(&self, expected_nodes: usize) -> String {
        format!(
            "| nodes with the server's exact state | {} of {} ({} of {} full-store nodes recomputed it; {} sample typha-clients, {} lean; {} inconsistent sessions) |",
            self.exact,
            expected_nodes,
            self.full_exact,
            self.full_nodes,
            self.sample_nodes,
            self.lean_nodes,
            self.inconsistent
        )
    }
}

/// One sample of the timeline.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct Sample {
    /// Seconds since the timeline started.
    pub(crate) t: f64,
    /// Nodes connected.
    pub(crate) connected: u64,
    /// Nodes in sync.
    pub(crate) in_sync: u64,
    /// RSS of the servers being watched, MiB (summed).
    pub(crate) server_rss_mib: f64,
}

/// Samples connected and in-sync nodes and server memory every 250 ms.
pub(crate) struct Timeline {
    samples: Arc<Mutex<Vec<Sample>>>,
    sources: Arc<Mutex<Sources>>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct Sources {
    swarms: Vec<crate::child::Progress>,
    servers: Vec<u32>,
}

impl Timeline {
    /// Starts sampling.
    pub(crate) fn start() -> Self {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let sources = Arc::new(Mutex::new(Sources::default()));
        let origin = Instant::now();
        let (s2, src2) = (samples.clone(), sources.clone());
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(250));
            loop {
                tick.tick().await;
                let (mut connected, mut in_sync, mut rss) = (0, 0, 0);
                {
                    let src = src2.lock().unwrap_or_else(|p| p.into_inner());
                    for p in &src.swarms {
                        let p = p.latest();
                        connected += p["connected"].as_u64().unwrap_or(0)
                            + p["raw_connected"].as_u64().unwrap_or(0);
                        in_sync += p["in_sync"].as_u64().unwrap_or(0);
                    }
                    for pid in &src.servers {
                        rss += usage(*pid).map(|u| u.rss).unwrap_or(0);
                    }
                }
                s2.lock().unwrap_or_else(|p| p.into_inner()).push(Sample {
                    t: origin.elapsed().as_secs_f64(),
                    connected,
                    in_sync,
                    server_rss_mib: rss as f64 / (1 << 20) as f64,
                });
            }
        });
        Timeline {
            samples,
            sources,
            task,
        }
    }

    /// Watches these swarms too.
    pub(crate) fn add_swarms(&self, swarms: &[Child]) {
        let mut src = self.sources.lock().unwrap_or_else(|p| p.into_inner());
        src.swarms.extend(swarms.iter().map(Child::progress));
    }

    /// Watches this server's memory too.
    pub(crate) fn add_server(&self, pid: u32) {
        let mut src = self.sources.lock().unwrap_or_else(|p| p.into_inner());
        src.servers.push(pid);
    }

    /// Stops sampling; the samples.
    pub(crate) fn stop(self) -> Vec<Sample> {
        self.task.abort();
        let s = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        s.clone()
    }
}

/// What a scenario produced.
pub(crate) struct Outcome {
    /// Scenario name.
    pub(crate) name: &'static str,
    /// The table for the terminal (Markdown).
    pub(crate) table: String,
    /// The result for machines.
    pub(crate) json: serde_json::Value,
    /// Whether it passed: nothing lost, every node exact.
    pub(crate) ok: bool,
    /// Connected / in sync / RSS over time.
    pub(crate) timeline: Vec<Sample>,
    /// Write-to-receipt latency, if measured (µs).
    pub(crate) latency: Option<Histogram<u64>>,
}
