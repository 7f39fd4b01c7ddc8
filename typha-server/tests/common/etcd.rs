//! A real etcd for tests: Debian's `etcd-server` (`/usr/bin/etcd`, or `$ETCD_BIN`), one
//! single-member cluster per test on free loopback ports with its own data directory, killed
//! when dropped. It can be killed and restarted on the same data and ports (an outage), and
//! can serve TLS with client certificates.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use etcd_client::{
    Certificate, Client, CompactionOptions, ConnectOptions, GetOptions, Identity, TlsOptions, Txn,
    TxnOp,
};
use serde_json::json;
use typha_server::calico::v3::{Resource, ResourceId};
use typha_server::datastore::etcd::{
    ClientCert, EtcdTls, IPAM_PREFIX, PREFIX, key_of, key_value_of,
};

/// How long etcd may take to answer after it is started.
const STARTUP: Duration = Duration::from_secs(20);

fn free_port() -> u16 {
    // Below the ephemeral range: never given to an outgoing connection meanwhile.
    typha_test_support::control_plane::free_port().expect("a free port")
}

/// The state letter of each thread of a process (`R`, `S`, `T` stopped, `Z` zombie...), from
/// `/proc/<pid>/task/*/stat`; empty once the process is gone.
fn thread_states(pid: u32) -> Vec<char> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("stat")).ok())
        // The state follows the command name, which is in parentheses and may hold spaces.
        .filter_map(|stat| stat.rsplit_once(") ")?.1.chars().next())
        .collect()
}

/// The etcd binary.
pub fn etcd_bin() -> PathBuf {
    std::env::var_os("ETCD_BIN").map_or_else(|| PathBuf::from("/usr/bin/etcd"), PathBuf::from)
}

/// A running (or stopped) etcd.
pub struct EtcdServer {
    dir: tempfile::TempDir,
    /// The member's name, unique to this instance: the readiness probe checks that the etcd
    /// answering on the chosen port is this one, not another test's that took the port first.
    name: String,
    client_port: u16,
    peer_port: u16,
    tls: bool,
    child: Option<Child>,
}

impl EtcdServer {
    /// Starts a plaintext etcd and waits until it answers.
    pub async fn start() -> Self {
        let mut s = Self::stopped(false);
        s.restart().await;
        s
    }

    /// Starts an etcd that serves TLS and requires client certificates from the test CA
    /// (`ca.crt`, `server.crt`/`server.key` for 127.0.0.1 and localhost, `client.crt`/`client.key`).
    pub async fn start_tls() -> Self {
        let mut s = Self::stopped(true);
        s.restart().await;
        s
    }

    /// A plaintext etcd whose ports and data directory are chosen but which is not running
    /// yet (for "etcd is down when the server starts").
    pub fn stopped(tls: bool) -> Self {
        let dir = tempfile::tempdir().unwrap();
        if tls {
            typha_server::pki::write_bundle(
                &dir.path().join("pki"),
                &["localhost", "127.0.0.1"],
                "typha",
            )
            .unwrap();
        }
        let name = format!(
            "test-{}",
            dir.path()
                .file_name()
                .unwrap()
                .to_string_lossy()
                .trim_start_matches('.')
        );
        Self {
            dir,
            name,
            client_port: free_port(),
            peer_port: free_port(),
            tls,
            child: None,
        }
    }

    fn pki(&self, name: &str) -> PathBuf {
        self.dir.path().join("pki").join(name)
    }

    /// The client URL.
    pub fn endpoint(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.client_port)
    }

    /// The TLS settings a client needs (with the client certificate).
    pub fn client_tls(&self) -> Option<EtcdTls> {
        self.tls.then(|| EtcdTls {
            ca_file: self.pki("ca.crt"),
            client: Some(ClientCert {
                cert_file: self.pki("client.crt"),
                key_file: self.pki("client.key"),
            }),
        })
    }

    /// The test CA's directory (TLS only).
    pub fn pki_dir(&self) -> PathBuf {
        self.dir.path().join("pki")
    }

    /// Starts etcd (again) on the same data directory and ports, and waits until it answers.
    pub async fn restart(&mut self) {
        assert!(self.child.is_none(), "etcd is already running");
        let first_start = !self.dir.path().join("data").exists();
        for _ in 0..3 {
            if self.try_start().await {
                return;
            }
            // Another process took a port between `free_port` and etcd's bind. On a first
            // start nothing refers to the ports yet, so choose others; a restart must keep them.
            assert!(
                first_start,
                "etcd could not take its ports again:\n{}",
                self.log()
            );
            self.client_port = free_port();
            self.peer_port = free_port();
            let _ = std::fs::remove_dir_all(self.dir.path().join("data"));
        }
        panic!("etcd lost its ports three times:\n{}", self.log());
    }

    /// Starts etcd and waits until it answers; false if it exited because a port was taken.
    async fn try_start(&mut self) -> bool {
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let client = self.endpoint();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("etcd.log"))
            .unwrap();
        let mut cmd = Command::new(etcd_bin());
        cmd.args(["--name", &self.name])
            .arg("--data-dir")
            .arg(self.dir.path().join("data"))
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("{}={peer}", self.name)])
            .args(["--initial-cluster-state", "new"])
            // A single member elects itself at once; no reason to wait a second for it.
            .args(["--heartbeat-interval", "10", "--election-timeout", "100"])
            // Progress notifications often enough that the backend sees some.
            .args(["--experimental-watch-progress-notify-interval", "1s"])
            .args(["--logger", "zap", "--log-level", "warn"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        if self.tls {
            cmd.arg("--cert-file")
                .arg(self.pki("server.crt"))
                .arg("--key-file")
                .arg(self.pki("server.key"))
                .arg("--client-cert-auth")
                .arg("--trusted-ca-file")
                .arg(self.pki("ca.crt"));
        }
        self.child = Some(cmd.spawn().unwrap_or_else(|e| {
            panic!(
                "cannot run {} ({e}): install Debian's etcd-server (bash .ci/run does)",
                etcd_bin().display()
            )
        }));
        let deadline = tokio::time::Instant::now() + STARTUP;
        loop {
            if let Some(mut c) = self.try_client().await
                && let Ok(Ok(members)) =
                    tokio::time::timeout(Duration::from_secs(2), c.member_list()).await
            {
                if members.members().iter().any(|m| m.name() == self.name) {
                    return true;
                }
                // Someone else's etcd answers on our port: ours cannot have bound it.
                let mut child = self.child.take().unwrap();
                let _ = child.kill();
                let _ = child.wait();
                return false;
            }
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().unwrap()) {
                if self.log().contains("address already in use") {
                    self.child = None;
                    return false;
                }
                panic!("etcd exited ({status}):\n{}", self.log());
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "etcd did not answer within {STARTUP:?}:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Kills etcd at once (SIGKILL: no goodbye to its clients) and waits for it to exit.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Freezes (`SIGSTOP`) or thaws (`SIGCONT`) etcd: its connections stay open but nothing
    /// answers, as with a hung server or a network that drops everything.
    pub fn freeze(&self, frozen: bool) {
        let pid = self.child.as_ref().expect("etcd is running").id();
        let status = Command::new("kill")
            .arg(if frozen { "-STOP" } else { "-CONT" })
            .arg(pid.to_string())
            .status()
            .unwrap();
        assert!(status.success());
        // The signal is sent, not yet taken: wait until every thread has stopped (or runs
        // again), so that what the test does next meets a hung etcd, and say so if it died.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let states = thread_states(pid);
            assert!(
                !states.is_empty() && !states.contains(&'Z') && !states.contains(&'X'),
                "etcd (pid {pid}) is not running:\n{}",
                self.log()
            );
            let stopped = |c: &char| *c == 'T' || *c == 't';
            if (frozen && states.iter().all(stopped)) || (!frozen && !states.iter().any(stopped)) {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "etcd's threads did not {} within 10 s: {states:?}",
                if frozen { "stop" } else { "resume" }
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// What etcd logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("etcd.log")).unwrap_or_default()
    }

    async fn try_client(&self) -> Option<Client> {
        let mut opts = ConnectOptions::new().with_connect_timeout(Duration::from_secs(2));
        if self.tls {
            let read = |p: PathBuf| std::fs::read(p).unwrap();
            opts = opts.with_tls(
                TlsOptions::new()
                    .ca_certificate(Certificate::from_pem(read(self.pki("ca.crt"))))
                    .identity(Identity::from_pem(
                        read(self.pki("client.crt")),
                        read(self.pki("client.key")),
                    )),
            );
        }
        Client::connect([self.endpoint()], Some(opts)).await.ok()
    }

    /// A client for the test's own writes and reads.
    pub async fn client(&self) -> Client {
        self.try_client().await.expect("etcd client")
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Writes a resource where Calico would, as Calico would (JSON under its v3 key; IPAM blocks
/// and affinities in Calico's IPAM model); the revision.
pub async fn put(c: &mut Client, r: &Resource) -> i64 {
    let (key, value) = key_value_of(r).unwrap();
    let resp = c.put(key, value, None).await.unwrap();
    resp.header().unwrap().revision()
}

/// Writes many resources, 100 to a transaction (etcd allows 128 operations in one); the last
/// revision.
pub async fn put_many(c: &mut Client, rs: &[Resource]) -> i64 {
    let mut rev = 0;
    for chunk in rs.chunks(100) {
        let ops: Vec<TxnOp> = chunk
            .iter()
            .map(|r| {
                let (k, v) = key_value_of(r).unwrap();
                TxnOp::put(k, v, None)
            })
            .collect();
        let resp = c.txn(Txn::new().and_then(ops)).await.unwrap();
        rev = resp.header().unwrap().revision();
    }
    rev
}

/// Deletes a resource stored at its v3 key; the revision.
pub async fn delete(c: &mut Client, id: &ResourceId) -> i64 {
    delete_key(c, &key_of(id)).await
}

/// Deletes a key; the revision.
pub async fn delete_key(c: &mut Client, key: &str) -> i64 {
    let resp = c.delete(key, None).await.unwrap();
    resp.header().unwrap().revision()
}

/// Writes raw bytes under a key below the prefix (`rest` is the part after it).
pub async fn put_raw(c: &mut Client, rest: &str, value: &[u8]) -> i64 {
    let resp = c.put(format!("{PREFIX}{rest}"), value, None).await.unwrap();
    resp.header().unwrap().revision()
}

/// Every resource stored under the v3 prefix and Calico's IPAM prefix, read directly (not
/// through the backend under test); values that are not resources are left out, and so are
/// v3 IPAM blocks (Calico never stores them there).
pub async fn resources(c: &mut Client) -> Vec<Resource> {
    let resp = c
        .get(PREFIX, Some(GetOptions::new().with_prefix()))
        .await
        .unwrap();
    let mut out: Vec<Resource> = resp
        .kvs()
        .iter()
        .filter(|kv| !kv.key_str().unwrap().contains("/ipamblocks/"))
        .filter_map(|kv| Resource::from_json_str(kv.value_str().ok()?).ok())
        .collect();
    let resp = c
        .get(IPAM_PREFIX, Some(GetOptions::new().with_prefix()))
        .await
        .unwrap();
    out.extend(
        resp.kvs()
            .iter()
            .filter_map(|kv| ipam_resource(kv.key_str().ok()?, kv.value())),
    );
    out
}

/// An IPAM block or affinity in Calico's IPAM model as the v3 resource Calico's Kubernetes
/// backend would store for it, read here without the backend's code: blocks at
/// `assignment/ipv4/block/<cidr>` named by their CIDR (`10-0-1-0-26`), affinities at
/// `host/<node>/ipv4/block/<cidr>` named `<node>-<cidr name>`, `deleted` as a string.
fn ipam_resource(key: &str, value: &[u8]) -> Option<Resource> {
    let rest = key.strip_prefix(IPAM_PREFIX)?;
    let parts: Vec<&str> = rest.split('/').collect();
    let v: serde_json::Value = serde_json::from_slice(value).ok()?;
    let doc = match parts.as_slice() {
        ["assignment", _, "block", cidr] => {
            let cidr = cidr.replacen('-', "/", 1);
            json!({"kind": "IPAMBlock",
                   "metadata": {"name": cidr.replace(['.', ':', '/'], "-")},
                   "spec": {"cidr": cidr, "affinity": v["affinity"],
                            "allocations": v["allocations"],
                            "unallocated": v["unallocated"],
                            "attributes": v["attributes"],
                            "sequenceNumber": v["sequenceNumber"],
                            "sequenceNumberForAllocation": v["sequenceNumberForAllocation"],
                            "deleted": v["deleted"].as_bool().unwrap_or(false)}})
        }
        ["host", node, _, "block", cidr] => {
            let cidr = cidr.replacen('-', "/", 1);
            json!({"kind": "BlockAffinity",
                   "metadata": {"name": format!("{node}-{}", cidr.replace(['.', ':', '/'], "-"))},
                   "spec": {"state": v["state"], "node": node, "cidr": cidr,
                            "deleted": v["deleted"].as_bool().unwrap_or(false).to_string()}})
        }
        _ => return None,
    };
    let mut doc = doc;
    doc["apiVersion"] = "projectcalico.org/v3".into();
    Resource::from_json(doc).ok()
}

/// The current revision.
pub async fn revision(c: &mut Client) -> i64 {
    let resp = c
        .get("/", Some(GetOptions::new().with_count_only()))
        .await
        .unwrap();
    resp.header().unwrap().revision()
}

/// Compacts history up to the current revision (physically, so watches from before it fail
/// at once).
pub async fn compact(c: &mut Client) -> i64 {
    let rev = revision(c).await;
    c.compact(rev, Some(CompactionOptions::new().with_physical()))
        .await
        .unwrap();
    rev
}

/// The path of a file in the test CA (TLS servers).
pub fn pki_file(dir: &Path, name: &str) -> String {
    dir.join(name).to_str().unwrap().to_owned()
}
