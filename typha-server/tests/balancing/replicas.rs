//! The replicas: `typha-server` processes (the real binary), their TLS material, and what
//! the test reads from them (`/status`, `/metrics`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

use super::{
    BIN, HEALTH_PORT, METRICS_PORT, MOVES_PER_SEC, NS, POLL_SECS, REPLICAS, SERVICE, SHUTDOWN_SECS,
    SYNC_PORT,
};

/// Mutual TLS as in a cluster: one CA, one server certificate (a Secret every replica
/// mounts, CN `typha-server`, the replicas' addresses as IP SANs), one client certificate.
pub(crate) struct Tls {
    pub(crate) ca: PathBuf,
    pub(crate) server_cert: PathBuf,
    pub(crate) server_key: PathBuf,
    pub(crate) client_cert: PathBuf,
    pub(crate) client_key: PathBuf,
}

impl Tls {
    pub(crate) fn write(dir: &Path) -> Self {
        std::fs::create_dir_all(dir).unwrap();
        let ca = typha_server::pki::Ca::new("typha-test-ca").unwrap();
        let server = ca.server("typha-server", &REPLICAS).unwrap();
        let client = ca.client("typha-client", None).unwrap();
        let w = |name: &str, body: &str| {
            let p = dir.join(name);
            std::fs::write(&p, body).unwrap();
            p
        };
        Tls {
            ca: w("ca.crt", &ca.cert_pem),
            server_cert: w("server.crt", &server.cert_pem),
            server_key: w("server.key", &server.key_pem),
            client_cert: w("client.crt", &client.cert_pem),
            client_key: w("client.key", &client.key_pem),
        }
    }
}

/// One `typha-server` process on `REPLICAS[k]`, killed if dropped still running.
pub(crate) struct Replica {
    pub(crate) k: usize,
    pub(crate) child: Option<Child>,
    pub(crate) started: Instant,
}

impl Replica {
    pub(crate) fn start(
        k: usize,
        kubeconfig: &Path,
        tls: &Tls,
        logs: &Path,
        generation: u32,
    ) -> Self {
        let ip = REPLICAS[k];
        let log = std::fs::File::create(logs.join(format!("typha-{k}-{generation}.log"))).unwrap();
        let child = Command::new(BIN)
            .env("TYPHA_DATASTORETYPE", "kubernetes")
            .env("KUBECONFIG", kubeconfig)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("TYPHA_K8SAPIENDPOINT")
            .env("TYPHA_SERVERHOST", ip)
            .env("TYPHA_SERVERPORT", SYNC_PORT.to_string())
            .env("TYPHA_HEALTHHOST", ip)
            .env("TYPHA_HEALTHPORT", HEALTH_PORT.to_string())
            .env("TYPHA_PROMETHEUSMETRICSHOST", ip)
            .env("TYPHA_PROMETHEUSMETRICSPORT", METRICS_PORT.to_string())
            .env("TYPHA_CONNECTIONREBALANCINGMODE", "kubernetes")
            .env("TYPHA_K8SNAMESPACE", NS)
            .env("TYPHA_K8SSERVICENAME", SERVICE)
            .env("TYPHA_K8SPORTNAME", "calico-typha")
            .env("TYPHA_REBALANCEPOLLSECS", POLL_SECS.to_string())
            .env("TYPHA_REBALANCEMOVESPERSEC", MOVES_PER_SEC.to_string())
            .env("TYPHA_SHUTDOWNTIMEOUTSECS", SHUTDOWN_SECS.to_string())
            .env("TYPHA_SERVERCERTFILE", &tls.server_cert)
            .env("TYPHA_SERVERKEYFILE", &tls.server_key)
            .env("TYPHA_CAFILE", &tls.ca)
            .env("TYPHA_CLIENTCN", "typha-client")
            .env("TYPHA_LOGSEVERITYSCREEN", "Info")
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        Replica {
            k,
            child: Some(child),
            started: Instant::now(),
        }
    }

    pub(crate) fn health(&self) -> SocketAddr {
        SocketAddr::new(REPLICAS[self.k].parse().unwrap(), HEALTH_PORT)
    }

    pub(crate) fn metrics_addr(&self) -> SocketAddr {
        SocketAddr::new(REPLICAS[self.k].parse().unwrap(), METRICS_PORT)
    }

    pub(crate) async fn until_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some((200, _)) = get(self.health(), "/readiness").await {
                return;
            }
            assert!(Instant::now() < deadline, "replica {} never ready", self.k);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub(crate) async fn status(&self) -> Value {
        let (code, body) = get(self.health(), "/status").await.expect("/status");
        assert_eq!(code, 200, "{body}");
        serde_json::from_str(&body).unwrap()
    }

    pub(crate) async fn load(&self) -> usize {
        usize::try_from(self.status().await["connections"].as_u64().unwrap()).unwrap()
    }

    pub(crate) async fn metrics(&self) -> Counters {
        let (code, text) = get(self.metrics_addr(), "/metrics")
            .await
            .expect("/metrics");
        assert_eq!(code, 200);
        Counters::parse(&text)
    }

    /// SIGTERM, then waits for exit 0; how long the drain took, and the process's counters as
    /// last read during the drain (it accepts nothing after SIGTERM, so they are final).
    pub(crate) async fn terminate(mut self) -> (Duration, Counters) {
        let mut child = self.child.take().unwrap();
        let mut last = self.metrics().await;
        let at = Instant::now();
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                assert_eq!(
                    status.code(),
                    Some(0),
                    "replica {} exited with {status}",
                    self.k
                );
                return (at.elapsed(), last);
            }
            if let Some((200, text)) = get(self.metrics_addr(), "/metrics").await {
                last = Counters::parse(&text);
            }
            assert!(
                at.elapsed() < Duration::from_secs(SHUTDOWN_SECS + 10),
                "replica {} did not exit after its drain",
                self.k
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The counters one server process reports that this test adds up.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Counters {
    pub(crate) snapshots: f64,
    pub(crate) digests: f64,
    pub(crate) deltas: f64,
    pub(crate) digest_bytes: f64,
    pub(crate) snapshot_resume_bytes: f64,
    pub(crate) snapshots_built: f64,
    pub(crate) snapshots_reused: f64,
    pub(crate) snapshot_bytes: f64,
    pub(crate) snapshot_raw_bytes: f64,
    pub(crate) rebalanced: f64,
    pub(crate) drained: f64,
    pub(crate) refused: f64,
    pub(crate) bytes_sent: f64,
}

impl Counters {
    pub(crate) fn parse(text: &str) -> Self {
        let v = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
                .unwrap_or_else(|| panic!("no {name} in /metrics"))
        };
        Counters {
            snapshots: v("typha_resumes_total{kind=\"snapshot\"}"),
            digests: v("typha_resumes_total{kind=\"digest\"}"),
            deltas: v("typha_resumes_total{kind=\"deltas\"}"),
            digest_bytes: v("typha_resume_bytes_total{kind=\"digest\"}"),
            snapshot_resume_bytes: v("typha_resume_bytes_total{kind=\"snapshot\"}"),
            snapshots_built: v("typha_snapshots_generated{syncer=\"felix\"}"),
            snapshots_reused: v("typha_snapshots_reused{syncer=\"felix\"}"),
            snapshot_bytes: v("typha_snapshot_compressed_bytes{syncer=\"felix\"}"),
            snapshot_raw_bytes: v("typha_snapshot_raw_bytes{syncer=\"felix\"}"),
            rebalanced: v("typha_connections_dropped_total{reason=\"rebalance\"}"),
            drained: v("typha_connections_dropped_total{reason=\"shutdown\"}"),
            refused: v("typha_connections_dropped_total{reason=\"too_many_connections\"}"),
            bytes_sent: v("typha_bytes_sent_total"),
        }
    }

    pub(crate) fn add(&mut self, o: &Counters) {
        self.snapshots += o.snapshots;
        self.digests += o.digests;
        self.deltas += o.deltas;
        self.digest_bytes += o.digest_bytes;
        self.snapshot_resume_bytes += o.snapshot_resume_bytes;
        self.snapshots_built += o.snapshots_built;
        self.snapshots_reused += o.snapshots_reused;
        self.snapshot_bytes = self.snapshot_bytes.max(o.snapshot_bytes);
        self.snapshot_raw_bytes = self.snapshot_raw_bytes.max(o.snapshot_raw_bytes);
        self.rebalanced += o.rebalanced;
        self.drained += o.drained;
        self.refused += o.refused;
        self.bytes_sent += o.bytes_sent;
    }
}

/// One HTTP/1.1 GET; (status, body).
pub(crate) async fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let io = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: typha\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .ok()?;
        let mut buf = String::new();
        s.read_to_string(&mut buf).await.ok()?;
        let code = buf.split(' ').nth(1)?.parse().ok()?;
        let body = buf.split_once("\r\n\r\n")?.1.to_owned();
        Some((code, body))
    };
    tokio::time::timeout(Duration::from_secs(5), io)
        .await
        .ok()
        .flatten()
}
