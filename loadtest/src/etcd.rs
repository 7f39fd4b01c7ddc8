//! A real etcd for the `direct` scenario: the Debian `etcd` binary on free loopback ports with
//! its data in the run's work directory, seeded with the generated cluster in Calico's layout
//! (v3 resources as JSON, IPAM blocks in Calico's IPAM model under `/calico/ipam/v2/`), and
//! churned with stamped workload endpoints, the same churn the other scenarios write
//! through the embedded store's API (or, for `chaos`, the mixed churn of `churn_plan`).

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use etcd_client::{Client, Txn, TxnOp};
use tokio::process::Command;
use typha_server::datastore::etcd::{key_of, key_value_of, watched_range};

use crate::churn_plan::{ChurnKind, Gate, Plan, Written};
use crate::server::{Churn, SENT_LABEL, free_port, now_ns};

/// etcd's default limit on operations per transaction.
const TXN_OPS: usize = 128;

/// An etcd process, killed when dropped.
pub(crate) struct EtcdProc {
    proc: tokio::process::Child,
    /// Client URL.
    pub(crate) endpoint: String,
    /// How it was started, to start it again on the same ports and data.
    respawn: std::process::Command,
    log: std::path::PathBuf,
}

impl EtcdProc {
    /// Starts etcd (`LOADTEST_ETCD` or `etcd` on the PATH) with its data under `dir`. With
    /// `every_address`, its client port listens on every address, so that each of several
    /// clients can reach it at a loopback address of its own
    /// ([`endpoint_at`](Self::endpoint_at)) and be cut off from it alone (chaos, in a network
    /// namespace of its own).
    pub(crate) async fn start(dir: &Path, every_address: bool) -> anyhow::Result<EtcdProc> {
        let bin = std::env::var("LOADTEST_ETCD").unwrap_or_else(|_| "etcd".into());
        let (client, peer) = (free_port()?, free_port()?);
        let endpoint = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let data = dir.join("etcd-data");
        let log = dir.join("etcd.log");
        let mut cmd = std::process::Command::new(&bin);
        cmd.arg("--name=loadtest")
            .arg(format!("--data-dir={}", data.display()))
            .arg(if every_address {
                format!("--listen-client-urls=http://0.0.0.0:{client}")
            } else {
                format!("--listen-client-urls={endpoint}")
            })
            .arg(format!("--advertise-client-urls={endpoint}"))
            .arg(format!("--listen-peer-urls={peer_url}"))
            .arg(format!("--initial-advertise-peer-urls={peer_url}"))
            .arg(format!("--initial-cluster=loadtest={peer_url}"))
            // Room for the seeded cluster and the churn's history.
            .arg("--quota-backend-bytes=8589934592");
        let proc = Self::spawn(&cmd, &log, true)
            .with_context(|| format!("starting {bin} (Debian package etcd-server)"))?;
        let e = EtcdProc {
            proc,
            endpoint,
            respawn: cmd,
            log,
        };
        e.answering(dir).await?;
        Ok(e)
    }

    fn spawn(
        cmd: &std::process::Command,
        log: &Path,
        create: bool,
    ) -> anyhow::Result<tokio::process::Child> {
        let file = if create {
            std::fs::File::create(log)?
        } else {
            std::fs::OpenOptions::new().append(true).open(log)?
        };
        let mut c = Command::new(cmd.get_program());
        c.args(cmd.get_args());
        Ok(c.stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .kill_on_drop(true)
            .spawn()?)
    }

    /// Kills it (SIGKILL) and starts it again on the same ports and data; returns when it
    /// answers.
    pub(crate) async fn kill_and_restart(&mut self) -> anyhow::Result<()> {
        self.proc.kill().await.context("killing etcd")?;
        self.proc = Self::spawn(&self.respawn, &self.log, false).context("restarting etcd")?;
        let dir = self.log.parent().map(Path::to_path_buf).unwrap_or_default();
        self.answering(&dir).await
    }

    /// Compacts its history up to its current revision, as an operator's (or the API
    /// server's) periodic compaction does; returns that revision.
    pub(crate) async fn compact(&self) -> anyhow::Result<i64> {
        let mut c = self.client().await?;
        let rev = c.get("/", None).await?.header().map_or(0, |h| h.revision());
        c.compact(rev, None).await.context("compacting etcd")?;
        Ok(rev)
    }

    /// Waits until it answers (30 s at most).
    async fn answering(&self, dir: &Path) -> anyhow::Result<()> {
        let e = self;
        let started = Instant::now();
        loop {
            if let Ok(mut c) = e.client().await
                && c.get("/", None).await.is_ok()
            {
                return Ok(());
            }
            if started.elapsed() > Duration::from_secs(30) {
                bail!(
                    "etcd did not answer within 30 s; see {}",
                    dir.join("etcd.log").display()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// A client.
    pub(crate) async fn client(&self) -> anyhow::Result<Client> {
        Client::connect([self.endpoint.as_str()], None)
            .await
            .context("connecting to etcd")
    }

    /// Its process id.
    pub(crate) fn pid(&self) -> u32 {
        self.proc.id().unwrap_or(0)
    }

    /// Its client port.
    pub(crate) fn port(&self) -> &str {
        self.endpoint.rsplit_once(':').map_or("", |(_, p)| p)
    }

    /// Its client URL at the loopback address `ip` (any of 127.0.0.0/8, when started with
    /// `every_address`).
    pub(crate) fn endpoint_at(&self, ip: &str) -> String {
        format!("http://{ip}:{}", self.port())
    }
}

/// Writes the generated cluster (`(nodes, pods per node)`) into etcd.
pub(crate) async fn seed(e: &EtcdProc, shape: (usize, usize)) -> anyhow::Result<usize> {
    let mut c = e.client().await?;
    let resources = crate::cluster::cluster_spec(shape.0, shape.1).resources();
    for chunk in resources.chunks(TXN_OPS) {
        let ops = chunk
            .iter()
            .map(|r| {
                let (key, value) = key_value_of(r)?;
                Ok(TxnOp::put(key, value, None))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        c.txn(Txn::new().and_then(ops))
            .await
            .context("seeding etcd")?;
    }
    Ok(resources.len())
}

/// Writes `rate` stamped workload-endpoint updates per second for `secs` seconds into etcd,
/// each its own put (as an API server or calicoctl would), in order.
pub(crate) fn churn(endpoint: String, shape: (usize, usize), rate: f64, secs: f64) -> Churn {
    let plan = Plan::labels(shape);
    Churn::spawn(write_plan(
        endpoint,
        plan,
        rate,
        secs,
        Gate::default(),
        Arc::default(),
    ))
}

/// The mixed churn (`churn_plan`: every kind of change, ephemeral pods created and deleted)
/// at `rate` writes per second for `secs` seconds (plus the time it was paused through
/// `gate`), counting what it wrote by kind into `written`.
pub(crate) fn churn_mixed(
    endpoint: String,
    shape: (usize, usize),
    rate: f64,
    secs: f64,
    gate: Gate,
    written: Arc<Written>,
) -> Churn {
    let plan = Plan::mixed(shape);
    Churn::spawn(write_plan(endpoint, plan, rate, secs, gate, written))
}

/// Writes `plan`'s steps into etcd, `rate` per second for `secs` seconds, one request each;
/// the time spent paused through `gate` moves the schedule on.
async fn write_plan(
    endpoint: String,
    plan: Plan,
    rate: f64,
    secs: f64,
    gate: Gate,
    written: Arc<Written>,
) -> anyhow::Result<u64> {
    let mut c = Client::connect([endpoint.as_str()], None)
        .await
        .context("connecting to etcd")?;
    let total = (rate * secs).round() as u64;
    let started = tokio::time::Instant::now();
    let per = Duration::from_secs_f64(1.0 / rate.max(0.001));
    let mut paused = Duration::ZERO;
    for i in 0..total {
        tokio::time::sleep_until(started + paused + per.mul_f64(i as f64)).await;
        let _turn = gate.scheduled_turn(&mut paused).await;
        let mut w = plan.step(i)?;
        if w.kind == ChurnKind::Labels {
            w.resource
                .metadata
                .labels
                .insert(SENT_LABEL.into(), now_ns().to_string());
        }
        let key = key_of(&w.resource.id());
        let value = (!w.delete)
            .then(|| serde_json::to_vec(&w.resource.to_json()))
            .transpose()?;
        // etcd may be down for a while (the chaos scenario restarts it): retry as a
        // client of it would, for up to a minute, then give up.
        let failing = tokio::time::Instant::now();
        loop {
            let r = match &value {
                Some(v) => c.put(key.clone(), v.clone(), None).await.map(drop),
                None => c.delete(key.clone(), None).await.map(drop),
            };
            match r {
                Ok(()) => break,
                Err(e) if failing.elapsed() < Duration::from_secs(60) => {
                    tracing::debug!(error = %e, "churn write failed; retrying");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    if let Ok(fresh) = Client::connect([endpoint.as_str()], None).await {
                        c = fresh;
                    }
                }
                Err(e) => return Err(e).context("writing churn to etcd"),
            }
        }
        written.add(w.kind);
    }
    Ok(total)
}

/// The write time in a churned resource's JSON (`"loadtest.sent-unix-ns":"<digits>"`), found
/// without parsing the document.
pub(crate) fn sent_ns_json(value: &[u8]) -> Option<u128> {
    // Built once: this runs for every (node, update) pair. A vectorised search: comparing
    // the needle at every offset cost a swarm more than the server spent delivering.
    static NEEDLE: std::sync::LazyLock<(memchr::memmem::Finder<'static>, usize)> =
        std::sync::LazyLock::new(|| {
            let needle = format!("\"{SENT_LABEL}\":\"").into_bytes();
            let len = needle.len();
            (memchr::memmem::Finder::new(&needle).into_owned(), len)
        });
    let (finder, len) = &*NEEDLE;
    let at = finder.find(value)?;
    let rest = value.get(at + len..)?;
    let end = rest.iter().position(|b| *b == b'"')?;
    std::str::from_utf8(rest.get(..end)?).ok()?.parse().ok()
}

/// What a direct node reports.
pub(crate) struct DirectReport {
    /// The last revision it saw.
    pub(crate) revision: i64,
}

/// One node watching etcd itself, as Felix does without Typha: a paged listing of what Felix
/// reads (the key range the server's backend reads: Calico's IPAM data and v3 resources)
/// pinned to one revision, then a watch from the next. `on_listed` runs once the
/// listing is complete; `on_event` gets each watched value (or `None` for a deletion).
pub(crate) async fn direct_node(
    endpoint: String,
    mut on_listed: impl FnMut(usize) + Send,
    mut on_event: impl FnMut(Option<&[u8]>) + Send,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<DirectReport> {
    use etcd_client::{EventType, GetOptions, WatchOptions};
    let mut c = loop {
        match Client::connect([endpoint.as_str()], None).await {
            Ok(c) => break c,
            Err(_) if !*stop.borrow() => tokio::time::sleep(Duration::from_millis(200)).await,
            Err(e) => return Err(e).context("connecting to etcd"),
        }
    };
    let (start, end) = watched_range();
    let mut from = start.clone();
    let mut revision = 0;
    let mut listed = 0;
    loop {
        let mut opts = GetOptions::new().with_range(end.clone()).with_limit(500);
        if revision > 0 {
            opts = opts.with_revision(revision);
        }
        let resp = c.get(from.clone(), Some(opts)).await.context("listing")?;
        if revision == 0 {
            revision = resp.header().map_or(0, |h| h.revision());
        }
        listed += resp.kvs().len();
        match resp.kvs().last() {
            Some(last) if resp.more() => {
                from = last.key().to_vec();
                from.push(0);
            }
            _ => break,
        }
    }
    on_listed(listed);
    let mut stream = c
        .watch(
            start,
            Some(
                WatchOptions::new()
                    .with_range(end)
                    .with_start_revision(revision + 1),
            ),
        )
        .await
        .context("watching")?;
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => break,
            msg = futures_util::StreamExt::next(&mut stream) => {
                let Some(resp) = msg else {
                    anyhow::bail!("etcd ended the watch");
                };
                let resp = resp.context("watch")?;
                for ev in resp.events() {
                    if let Some(kv) = ev.kv() {
                        revision = revision.max(kv.mod_revision());
                        match ev.event_type() {
                            EventType::Put => on_event(Some(kv.value())),
                            EventType::Delete => on_event(None),
                        }
                    }
                }
            }
        }
    }
    Ok(DirectReport { revision })
}

#[cfg(test)]
mod tests {
    #[test]
    fn finds_the_stamp_in_json() {
        let spec = crate::cluster::cluster_spec(2, 2);
        let mut r = spec.workload_endpoint(1, 1, 7);
        let plain = serde_json::to_vec(&r.to_json()).unwrap_or_default();
        assert_eq!(super::sent_ns_json(&plain), None);
        r.metadata
            .labels
            .insert(super::SENT_LABEL.into(), "1763780000123456789".into());
        let json = serde_json::to_vec(&r.to_json()).unwrap_or_default();
        assert_eq!(super::sent_ns_json(&json), Some(1_763_780_000_123_456_789));
    }
}
