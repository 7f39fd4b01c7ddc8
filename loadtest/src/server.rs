//! The server under test, and the datastore writes that churn it.
//!
//! By default the server is the `typha-server` program itself: this binary re-executed in the
//! `__typha-server` role, which is one call to `typha_server::cli::main`, the same function the
//! `typha-server` binary is (so it can never be a stale build); `--server-bin PATH` runs a
//! separate executable instead, and `--server-addr` (with `--server-http`, `--server-api`)
//! uses a server that is already running. It is configured through `TYPHA_*` variables, as in
//! a deployment: the embedded datastore over the run's manifests, with its write API on a
//! loopback port. Variables already set in loadtest's environment (`TYPHA_FANOUTFRAMESPERSEC`,
//! say) reach the server, except the addresses, files and TLS settings the run owns.
//!
//! Loadtest reads the server only through what an operator has: `/readiness`, `/status` (the
//! state digest) and `/metrics`. Churn is written through the embedded datastore's write API
//! ([`Churn`]), each update stamped with its write time so nodes can measure latency.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use bytes::Bytes;
use serde_json::json;
use tokio::process::Command;

use crate::http::Http;

/// The role in which this binary runs the `typha-server` program.
pub(crate) const SERVER_ROLE: &str = "__typha-server";

/// Label carrying the write time of a churn update (Unix nanoseconds).
pub(crate) const SENT_LABEL: &str = "loadtest.sent-unix-ns";

/// The write time the churner stamped on a workload endpoint, found in its encoded value
/// without decoding it: the label is a postcard string pair (length byte, key; length byte,
/// decimal digits). Decoding each whole value for every node would cost the swarm more than
/// the server spends delivering it.
pub(crate) fn sent_ns(value: &[u8]) -> Option<u128> {
    let key = SENT_LABEL.as_bytes();
    let at = value
        .windows(key.len() + 1)
        .position(|w| w.first() == Some(&(key.len() as u8)) && w.get(1..) == Some(key))?;
    let rest = value.get(at + 1 + key.len()..)?;
    let len = usize::from(*rest.first()?);
    std::str::from_utf8(rest.get(1..1 + len)?)
        .ok()?
        .parse()
        .ok()
}

/// Which server, and how to reach it.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct ServerOpts {
    /// Run this `typha-server` executable instead of the built-in copy of its program.
    #[arg(long, value_name = "PATH")]
    pub(crate) server_bin: Option<PathBuf>,
    /// Use an already running server at HOST:PORT instead of starting one (steady only). Its
    /// embedded datastore's write API (`--server-api`) and health port (`--server-http`) are
    /// needed too; with TLS, `--tls-dir` holds ca.crt, client.crt and client.key it accepts.
    #[arg(long, value_name = "HOST:PORT", requires_all = ["server_http", "server_api"])]
    pub(crate) server_addr: Option<String>,
    /// The external server's health and metrics address (`/status`, `/metrics`).
    #[arg(long, value_name = "HOST:PORT")]
    pub(crate) server_http: Option<String>,
    /// The external server's embedded datastore write API (TYPHA_EMBEDDEDAPIADDR).
    #[arg(long, value_name = "HOST:PORT")]
    pub(crate) server_api: Option<String>,
    /// Client TLS material for an external server (ca.crt, client.crt, client.key).
    #[arg(long, value_name = "DIR")]
    pub(crate) tls_dir: Option<PathBuf>,
}

/// What a server reads.
#[derive(Debug, Clone)]
pub(crate) enum Backend {
    /// The embedded datastore over the run's manifests, with its write API.
    Embedded,
    /// etcd v3 at this client URL.
    Etcd(String),
    /// The Kubernetes API server this kubeconfig names.
    Kube(PathBuf),
}

/// A server under test.
pub(crate) struct Server {
    name: String,
    /// Calico's own Typha (no `/status`, none of our metrics), not ours.
    calico: bool,
    /// How it was started (program, arguments, environment), to start it again on the same
    /// ports after a kill; `None` for an external server.
    respawn: Option<std::process::Command>,
    /// `None` for an external server.
    proc: Option<tokio::process::Child>,
    log: Option<PathBuf>,
    /// Sync address, `host:port`.
    pub(crate) addr: String,
    http: Http,
    /// Write API address.
    pub(crate) api: String,
    /// KVs in its cache when it became ready.
    pub(crate) kvs: u64,
}

/// Where a server's files live and how it is reached.
pub(crate) struct Spawn<'a> {
    /// Name for messages and its log file.
    pub(crate) name: &'a str,
    /// Manifest directory (TYPHA_EMBEDDEDDIR).
    pub(crate) manifests: &'a Path,
    /// TLS bundle directory (ca.crt, server.crt, server.key), or plaintext.
    pub(crate) tls: Option<&'a Path>,
    /// Where its log goes.
    pub(crate) log_dir: &'a Path,
    /// `None`: the built-in program.
    pub(crate) bin: Option<&'a Path>,
    /// What it serves from.
    pub(crate) backend: &'a Backend,
    /// Run Calico's own `calico-typha` executable instead of ours (not over the embedded
    /// datastore, which it cannot read).
    pub(crate) calico_typha: Option<&'a Path>,
    /// Settings for this server only, over the caller's environment (e.g. a fixed batch
    /// window); never one of the settings loadtest owns.
    pub(crate) env: &'a [(&'a str, String)],
    /// Where it listens.
    pub(crate) listen: Listen,
}

/// Where a started server listens.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Listen {
    /// Free ports on the loopback.
    Loopback,
    /// An address of its own, with sync and health ports every replica shares, as pods behind
    /// one Service: nodes reach it from network namespaces of their own, and the replicas
    /// find each other through the Service's EndpointSlice (chaos).
    Own {
        ip: std::net::Ipv4Addr,
        sync: u16,
        http: u16,
    },
}

/// A copy of a command: its program, arguments, environment and directory (the standard
/// library's `Command` cannot be cloned, but says all of these).
fn copy_of(c: &std::process::Command) -> std::process::Command {
    let mut n = std::process::Command::new(c.get_program());
    n.args(c.get_args());
    for (k, v) in c.get_envs() {
        match v {
            Some(v) => n.env(k, v),
            None => n.env_remove(k),
        };
    }
    if let Some(d) = c.get_current_dir() {
        n.current_dir(d);
    }
    n
}

/// A free TCP port on the loopback, below the ephemeral range (so none of the swarm's
/// outgoing connections can be given it before the server binds it).
pub(crate) fn free_port() -> anyhow::Result<u16> {
    Ok(typha_test_support::control_plane::free_port()?)
}

/// Settings loadtest owns: never taken from its own environment.
const OWNED: &[&str] = &[
    "TYPHA_DATASTORETYPE",
    "TYPHA_EMBEDDEDDIR",
    "TYPHA_EMBEDDEDAPIADDR",
    "TYPHA_SERVERHOST",
    "TYPHA_SERVERPORT",
    "TYPHA_HEALTHENABLED",
    "TYPHA_HEALTHHOST",
    "TYPHA_HEALTHPORT",
    "TYPHA_PROMETHEUSMETRICSENABLED",
    "TYPHA_PROMETHEUSMETRICSHOST",
    "TYPHA_PROMETHEUSMETRICSPORT",
    "TYPHA_SERVERCERTFILE",
    "TYPHA_SERVERKEYFILE",
    "TYPHA_CAFILE",
    "TYPHA_CLIENTCN",
    "TYPHA_CLIENTURISAN",
    "TYPHA_ETCDENDPOINTS",
    "TYPHA_ETCDCAFILE",
    "TYPHA_ETCDCERTFILE",
    "TYPHA_ETCDKEYFILE",
    "TYPHA_K8SAPIENDPOINT",
];

/// Defaults for a load test that the caller's environment may override.
const DEFAULTS: &[(&str, &str)] = &[
    // Typha's default of 10,000 would turn away the 10,000th node and the stalled ones.
    ("TYPHA_MAXCONNECTIONSUPPERLIMIT", "100000"),
    ("TYPHA_SHUTDOWNTIMEOUTSECS", "5"),
    ("TYPHA_LOGSEVERITYSCREEN", "Warning"),
];

impl Server {
    /// Starts a server and waits until its cache holds the whole datastore.
    pub(crate) async fn spawn(s: Spawn<'_>) -> anyhow::Result<Server> {
        let (host, port, http_host, http_port) = match s.listen {
            Listen::Loopback => (
                "127.0.0.1".to_owned(),
                free_port()?,
                "127.0.0.1".to_owned(),
                free_port()?,
            ),
            Listen::Own { ip, sync, http } => (ip.to_string(), sync, ip.to_string(), http),
        };
        let api_port = free_port()?;
        let mut cmd = match (s.calico_typha, s.bin) {
            (Some(b), _) | (None, Some(b)) => Command::new(b),
            (None, None) => {
                let mut c =
                    Command::new(std::env::current_exe().context("finding this executable")?);
                c.arg(SERVER_ROLE);
                c
            }
        };
        for k in OWNED {
            cmd.env_remove(k);
        }
        for (k, v) in DEFAULTS {
            if std::env::var_os(k).is_none() {
                cmd.env(k, v);
            }
        }
        for (k, v) in s.env {
            if OWNED.contains(k) {
                bail!("{k} is set by loadtest itself");
            }
            cmd.env(k, v);
        }
        let http = format!("{http_host}:{http_port}");
        let api = format!("127.0.0.1:{api_port}");
        match s.backend {
            Backend::Etcd(endpoint) => cmd
                .env("TYPHA_DATASTORETYPE", "etcdv3")
                .env("TYPHA_ETCDENDPOINTS", endpoint),
            Backend::Kube(kubeconfig) => cmd
                .env("TYPHA_DATASTORETYPE", "kubernetes")
                .env("KUBECONFIG", kubeconfig)
                .env_remove("KUBERNETES_SERVICE_HOST"),
            Backend::Embedded if s.calico_typha.is_some() => {
                bail!("Calico's Typha cannot read the embedded datastore: use etcd or kubernetes")
            }
            Backend::Embedded => cmd
                .env("TYPHA_DATASTORETYPE", "embedded")
                .env("TYPHA_EMBEDDEDDIR", s.manifests)
                .env("TYPHA_EMBEDDEDAPIADDR", &api),
        };
        // Calico's Typha serves health and metrics on two listeners; ours shares one port.
        let metrics_port = if s.calico_typha.is_some() {
            free_port()?
        } else {
            http_port
        };
        cmd.env("TYPHA_SERVERHOST", &host)
            .env("TYPHA_SERVERPORT", port.to_string())
            .env("TYPHA_HEALTHHOST", &http_host)
            .env("TYPHA_HEALTHPORT", http_port.to_string())
            .env("TYPHA_PROMETHEUSMETRICSHOST", &http_host)
            .env("TYPHA_PROMETHEUSMETRICSPORT", metrics_port.to_string());
        if s.calico_typha.is_some() {
            // Off by default in Calico's Typha; its log goes to the screen only, at warning
            // (its level names are upper case), as ours runs.
            cmd.env("TYPHA_HEALTHENABLED", "true")
                .env("TYPHA_PROMETHEUSMETRICSENABLED", "true")
                .env("TYPHA_LOGFILEPATH", "none")
                .env("TYPHA_LOGSEVERITYSCREEN", "WARNING")
                .env("TYPHA_LOGSEVERITYSYS", "none");
        }
        if let Some(t) = s.tls {
            cmd.env("TYPHA_SERVERCERTFILE", t.join("server.crt"))
                .env("TYPHA_SERVERKEYFILE", t.join("server.key"))
                .env("TYPHA_CAFILE", t.join("ca.crt"))
                .env("TYPHA_CLIENTCN", "typha-client");
        }
        let respawn = Some(copy_of(cmd.as_std()));
        let log = s.log_dir.join(format!("{}.log", s.name.replace(' ', "-")));
        let file =
            std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let proc = cmd
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", s.name))?;
        let mut server = Server {
            name: s.name.to_owned(),
            calico: s.calico_typha.is_some(),
            respawn,
            proc: Some(proc),
            log: Some(log),
            addr: match s.listen {
                Listen::Loopback => format!("localhost:{port}"),
                Listen::Own { .. } => format!("{host}:{port}"),
            },
            http: Http::new(&http),
            api,
            kvs: 0,
        };
        server.ready(Duration::from_secs(600)).await?;
        Ok(server)
    }

    /// A server that is already running; waits until it is ready.
    pub(crate) async fn external(o: &ServerOpts) -> anyhow::Result<Server> {
        let (Some(addr), Some(http), Some(api)) = (&o.server_addr, &o.server_http, &o.server_api)
        else {
            bail!("an external server needs --server-addr, --server-http and --server-api");
        };
        let mut server = Server {
            name: format!("server at {addr}"),
            calico: false,
            respawn: None,
            proc: None,
            log: None,
            addr: addr.clone(),
            http: Http::new(http),
            api: api.clone(),
            kvs: 0,
        };
        server.ready(Duration::from_secs(60)).await?;
        Ok(server)
    }

    async fn ready(&mut self, within: Duration) -> anyhow::Result<()> {
        let started = Instant::now();
        loop {
            if let Some(p) = &mut self.proc
                && let Some(status) = p.try_wait()?
            {
                bail!("{} exited with {status}{}", self.name, self.log_tail());
            }
            if let Ok((200, _)) = self.http.request("GET", "/readiness", Bytes::new()).await {
                break;
            }
            if started.elapsed() > within {
                bail!(
                    "{} not ready within {within:?}{}",
                    self.name,
                    self.log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if self.calico {
            // Calico's Typha says how many KVs only per syncer type in its metrics; the
            // scenario counts them with a client instead.
            return Ok(());
        }
        self.kvs = self.http.get_json("/status").await?["kvs"]
            .as_u64()
            .unwrap_or(0);
        Ok(())
    }

    fn log_tail(&self) -> String {
        let Some(log) = &self.log else {
            return String::new();
        };
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines.get(lines.len().saturating_sub(10)..).unwrap_or(&[]);
        format!("; its log ({}) ends:\n{}", log.display(), tail.join("\n"))
    }

    /// Its process id (0 for an external server).
    pub(crate) fn pid(&self) -> u32 {
        self.proc.as_ref().and_then(|p| p.id()).unwrap_or(0)
    }

    /// The cache's position (`/status`) and the counters the scenarios use (`/metrics`), and
    /// the bytes it has written (`wchar`, from /proc: TLS records and its log). For Calico's
    /// Typha, `wchar` alone.
    pub(crate) async fn state(&mut self) -> anyhow::Result<serde_json::Value> {
        let wchar = crate::procstat::written(self.pid()).unwrap_or(0);
        if self.calico {
            return Ok(json!({ "wchar": wchar }));
        }
        let mut v = self.http.get_json("/status").await?;
        let m = self.http.get_metrics().await?;
        // A series that is not there is an error, not a zero: a renamed metric must not
        // quietly report nothing.
        let get = |series: &str| -> anyhow::Result<u64> {
            m.get(series)
                .map(|v| *v as u64)
                .with_context(|| format!("{}: no series {series} in /metrics", self.name))
        };
        let frames = |kind: &str| get(&format!("typha_frames_encoded_total{{kind=\"{kind}\"}}"));
        let resumes = |kind: &str| get(&format!("typha_resumes_total{{kind=\"{kind}\"}}"));
        let felix = |name: &str| get(&format!("{name}{{syncer=\"felix\"}}"));
        if let Some(o) = v.as_object_mut() {
            for (k, n) in [
                ("delta_frames", frames("delta")?),
                ("span_frames", frames("span")?),
                ("bytes_sent", get("typha_bytes_sent_total")?),
                ("snapshots_generated", felix("typha_snapshots_generated")?),
                ("snapshots_reused", felix("typha_snapshots_reused")?),
                ("resumes_deltas", resumes("deltas")?),
                ("resumes_digest", resumes("digest")?),
                ("resumes_snapshot", resumes("snapshot")?),
                ("wchar", wchar),
            ] {
                o.insert(k.into(), json!(n));
            }
        }
        Ok(v)
    }

    /// The names of the nodes connected to it (`/status?nodes=true`), those in one phase
    /// only if given (its `phase`: `streaming` for those past their initial sync).
    pub(crate) async fn node_names(&mut self, phase: Option<&str>) -> anyhow::Result<Vec<String>> {
        let v = self.http.get_json("/status?nodes=true").await?;
        Ok(v["nodes"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter(|n| phase.is_none_or(|p| n["phase"] == p))
                    .filter_map(|n| n["name"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default())
    }

    /// Connections it has closed, by reason (`typha_connections_dropped_total{reason}`, the
    /// reasons with a count); empty for Calico's Typha, which counts drops without reasons.
    pub(crate) async fn drops(&mut self) -> anyhow::Result<BTreeMap<String, u64>> {
        if self.calico {
            return Ok(BTreeMap::new());
        }
        let m = self.http.get_metrics().await?;
        Ok(m.iter()
            .filter_map(|(series, v)| {
                let reason = series
                    .strip_prefix("typha_connections_dropped_total{reason=\"")?
                    .strip_suffix("\"}")?;
                (*v > 0.0).then(|| (reason.to_owned(), *v as u64))
            })
            .collect())
    }

    /// Connections past their initial sync, per syncer type, as the server counts them
    /// (`typha_connections_streaming{syncer}`: a Calico client under its own type, ours under
    /// felix); empty for Calico's Typha (not read: its series are not ours to name).
    pub(crate) async fn streaming(&mut self) -> anyhow::Result<BTreeMap<String, u64>> {
        if self.calico {
            return Ok(BTreeMap::new());
        }
        let m = self.http.get_metrics().await?;
        Ok(m.iter()
            .filter_map(|(series, v)| {
                let syncer = series
                    .strip_prefix("typha_connections_streaming{syncer=\"")?
                    .strip_suffix("\"}")?;
                Some((syncer.to_owned(), *v as u64))
            })
            .collect())
    }

    /// Kills it at once (SIGKILL), as a crash would.
    pub(crate) async fn kill(&mut self) -> anyhow::Result<()> {
        if let Some(p) = &mut self.proc {
            p.kill()
                .await
                .with_context(|| format!("killing {}", self.name))?;
        }
        Ok(())
    }

    /// Kills it (SIGKILL), as a crash would, and starts it again at once with the same
    /// settings and ports, as its replacement would come back at the Service's address; its
    /// log goes on in the same file. Returns when it says it is ready.
    pub(crate) async fn kill_and_restart(&mut self) -> anyhow::Result<()> {
        self.kill().await?;
        self.respawn().await
    }

    /// Starts it again, its process gone, on the same ports and log.
    pub(crate) async fn respawn(&mut self) -> anyhow::Result<()> {
        let Some(spec) = &self.respawn else {
            bail!("{}: not started by loadtest, cannot restart it", self.name);
        };
        let mut cmd = Command::from(copy_of(spec));
        let file = match &self.log {
            Some(log) => std::fs::OpenOptions::new()
                .append(true)
                .open(log)
                .with_context(|| format!("opening {}", log.display()))?,
            None => bail!("{}: no log file", self.name),
        };
        self.proc = Some(
            cmd.stdin(Stdio::null())
                .stdout(file.try_clone()?)
                .stderr(file)
                .kill_on_drop(true)
                .spawn()
                .with_context(|| format!("restarting {}", self.name))?,
        );
        self.ready(Duration::from_secs(600)).await
    }

    /// Stops it as an orchestrator would (SIGTERM) and checks that it exits cleanly.
    pub(crate) async fn quit(mut self) -> anyhow::Result<()> {
        self.terminate().await
    }

    /// Sends SIGTERM and waits (60 s at most, then SIGKILL) for a clean exit; its process is
    /// gone afterwards either way.
    pub(crate) async fn terminate(&mut self) -> anyhow::Result<()> {
        let Some(mut p) = self.proc.take() else {
            return Ok(());
        };
        if let Some(pid) = p.id() {
            Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status()
                .await
                .context("running kill")?;
        }
        match tokio::time::timeout(Duration::from_secs(60), p.wait()).await {
            Ok(status) => {
                let status = status?;
                // Calico's Typha ends its drain with a fatal log line and exit status 1.
                anyhow::ensure!(
                    status.success() || (self.calico && status.code() == Some(1)),
                    "{} exited with {status}{}",
                    self.name,
                    self.log_tail()
                );
                Ok(())
            }
            Err(_) => {
                let _ = p.kill().await;
                bail!("{} did not exit within 60 s of SIGTERM; killed", self.name)
            }
        }
    }

    /// Starts writing `rate` updates per second for `secs` seconds into its datastore.
    pub(crate) fn churn(&self, shape: (usize, usize), rate: f64, secs: f64) -> Churn {
        Churn::spawn(churn(self.api.clone(), shape, rate, secs))
    }
}

/// Datastore writes in progress.
pub(crate) struct Churn {
    task: tokio::task::JoinHandle<anyhow::Result<u64>>,
}

impl Churn {
    /// Runs a writer; it returns how many updates it wrote.
    pub(crate) fn spawn(
        writer: impl std::future::Future<Output = anyhow::Result<u64>> + Send + 'static,
    ) -> Churn {
        Churn {
            task: tokio::spawn(writer),
        }
    }

    /// Waits for the writer to finish (at most `within`); how many updates it wrote.
    pub(crate) async fn wait(self, within: Duration) -> anyhow::Result<u64> {
        match tokio::time::timeout(within, self.task).await {
            Ok(r) => r.context("churn task")?,
            Err(_) => bail!("the churn writer did not finish within {within:?}"),
        }
    }
}

/// Wall-clock time, Unix nanoseconds (the churn stamp).
pub(crate) fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

/// Largest batch in one request (each workload endpoint is ~1 KB of JSON).
const MAX_BATCH: u64 = 2_000;

/// Writes workload-endpoint updates to the write API at `api`, `rate` per second for `secs`
/// seconds: the generated cluster's own endpoints (`(nodes, pods per node)`), rewritten. Updates that fall due while a request
/// is in flight go together in the next one; each is stamped with the time its request is sent.
async fn churn(api: String, shape: (usize, usize), rate: f64, secs: f64) -> anyhow::Result<u64> {
    let spec = crate::cluster::cluster_spec(shape.0, shape.1);
    let mut http = Http::new(&api);
    let total = (rate * secs).round() as u64;
    let started = tokio::time::Instant::now();
    let per = Duration::from_secs_f64(1.0 / rate.max(0.001));
    let mut written = 0u64;
    while written < total {
        tokio::time::sleep_until(started + per.mul_f64(written as f64)).await;
        let due = ((started.elapsed().as_secs_f64() * rate).floor() as u64 + 1)
            .clamp(written + 1, total)
            .min(written + MAX_BATCH);
        let stamp = now_ns().to_string();
        let items: Vec<serde_json::Value> = (written..due)
            .map(|i| {
                let node = (i as usize) % spec.nodes;
                let pod = (i as usize / spec.nodes) % spec.pods_per_node;
                let mut r = spec.workload_endpoint(node, pod, i + 1);
                r.metadata.labels.insert(SENT_LABEL.into(), stamp.clone());
                r.to_json()
            })
            .collect();
        let body =
            serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "List", "items": items}))?;
        let (status, reply) = http.request("POST", "/apply", Bytes::from(body)).await?;
        if status != 200 {
            bail!(
                "writing churn to {api}: {status}: {}",
                String::from_utf8_lossy(&reply).trim()
            );
        }
        written = due;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    #[test]
    fn churn_rewrites_endpoints_the_cluster_has() {
        let spec = crate::cluster::cluster_spec(3, 4);
        let ids: std::collections::HashSet<_> = spec.resources().iter().map(|r| r.id()).collect();
        for (node, pod) in [(0, 0), (2, 3), (1, 2)] {
            let r = spec.workload_endpoint(node, pod, 99);
            assert!(ids.contains(&r.id()), "{}", r.id());
        }
    }
}
