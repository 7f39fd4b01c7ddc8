//! The control plane itself: etcd and kube-apiserver processes, clients, identities, faults.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use serde_json::{Value, json};

use super::crds;
use super::peers::{ControlPlaneError, STARTUP, peer};
use super::process::{self, Proc, free_port};

/// The admin's bearer token (group `system:masters`): setup only, never the code under test.
const ADMIN_TOKEN: &str = "typha-test-admin";

/// How to run the control plane.
#[derive(Debug, Clone)]
pub struct Options {
    /// Where its files go (data, certificates, logs). `None`: a fresh folder under the system's
    /// temporary folder, removed when the control plane is dropped.
    pub dir: Option<PathBuf>,
    /// kube-apiserver's watch cache (`--watch-cache`, on by default as in every cluster). Off,
    /// every list and watch goes to etcd, so a compaction of etcd reaches watchers as 410 Gone
    /// at once; on, the API server serves recent history from memory (and sends bookmarks).
    pub watch_cache: bool,
    /// Apply Calico's CRDs once the API server is ready.
    pub calico_crds: bool,
    /// etcd's `--quota-backend-bytes` (its default, 2 GiB, is too small for big loadtests).
    pub etcd_quota_bytes: Option<u64>,
    /// Serve on every address (`--bind-address=0.0.0.0`) with a certificate for the loopback
    /// aliases [`ControlPlane::LOOPBACK_ALIASES`] too, so that each client can reach it at an
    /// address of its own ([`ControlPlane::kubeconfig_at`]) and be cut off alone (loadtest's
    /// chaos, inside a network namespace of its own).
    pub every_address: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            dir: None,
            watch_cache: true,
            calico_crds: true,
            etcd_quota_bytes: None,
            every_address: false,
        }
    }
}

/// etcd and kube-apiserver, running; both killed when dropped.
pub struct ControlPlane {
    dir: PathBuf,
    remove_dir: bool,
    opts: Options,
    etcd: Option<Proc>,
    apiserver: Option<Proc>,
    etcd_port: u16,
    etcd_peer_port: u16,
    port: u16,
    ca_der: Vec<u8>,
}

impl std::fmt::Debug for ControlPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlPlane")
            .field("url", &self.url())
            .field("etcd", &self.etcd_endpoint())
            .finish_non_exhaustive()
    }
}

impl ControlPlane {
    /// Starts etcd and kube-apiserver and waits until the API server is ready (and, if asked,
    /// Calico's CRDs are established).
    pub async fn start(opts: Options) -> Result<Self, ControlPlaneError> {
        // Both programs, before anything is started: a missing one says what to run.
        peer("etcd")?;
        peer("kube-apiserver")?;
        let (dir, remove_dir) = match &opts.dir {
            Some(d) => (d.clone(), false),
            None => (process::fresh_dir("typha-control-plane")?, true),
        };
        std::fs::create_dir_all(&dir).map_err(ControlPlaneError::io(dir.display().to_string()))?;
        let ca = typha_server::pki::Ca::new("typha-test-kube-ca")?;
        let mut names = vec!["127.0.0.1".to_owned(), "localhost".to_owned()];
        if opts.every_address {
            names.extend((1..=Self::LOOPBACK_ALIASES).map(|i| format!("127.0.1.{i}")));
        }
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let serving = ca.server("kube-apiserver", &names)?;
        let signing = ca.client("service-account-signer", None)?;
        let write = |name: &str, body: &str| {
            let path = dir.join(name);
            std::fs::write(&path, body).map_err(ControlPlaneError::io(path.display().to_string()))
        };
        write("apiserver.crt", &serving.cert_pem)?;
        write("apiserver.key", &serving.key_pem)?;
        write("sa.key", &signing.key_pem)?;
        // The verifying key, as a certificate: kube-apiserver reads public keys from those too.
        write("sa.crt", &signing.cert_pem)?;
        write("ca.crt", &ca.cert_pem)?;
        write(
            "tokens.csv",
            &format!("{ADMIN_TOKEN},admin,admin,\"system:masters\"\n"),
        )?;
        let ca_der = CertificateDer::from_pem_slice(ca.cert_pem.as_bytes())
            .map_err(|e| ControlPlaneError::Crds(format!("our own CA certificate: {e}")))?
            .to_vec();
        let mut cp = Self {
            dir,
            remove_dir,
            opts,
            etcd: None,
            apiserver: None,
            etcd_port: free_port()?,
            etcd_peer_port: free_port()?,
            port: free_port()?,
            ca_der,
        };
        cp.start_etcd().await?;
        cp.start_apiserver().await?;
        if cp.opts.calico_crds {
            crds::apply(&cp.admin()?).await?;
        }
        Ok(cp)
    }

    /// With [`Options::every_address`], the API server's certificate also names
    /// `127.0.1.1` to `127.0.1.<this>`.
    pub const LOOPBACK_ALIASES: usize = 16;

    /// The API server's URL.
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// The API server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// etcd's client URL.
    pub fn etcd_endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.etcd_port)
    }

    /// The folder of its files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The CA that signed the API server's certificate (PEM file).
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    /// kube-apiserver's process id, while it runs.
    pub fn apiserver_pid(&self) -> Option<u32> {
        self.apiserver.as_ref().map(Proc::pid)
    }

    /// etcd's process id, while it runs.
    pub fn etcd_pid(&self) -> Option<u32> {
        self.etcd.as_ref().map(Proc::pid)
    }

    /// A client configuration for the API server that verifies its certificate and sends
    /// `token`, with kube's own retries off (as typha-server runs it).
    pub fn config_with_token(&self, token: &str) -> Result<kube::Config, ControlPlaneError> {
        let url = self
            .url()
            .parse()
            .map_err(|e| ControlPlaneError::Crds(format!("API server URL: {e}")))?;
        let mut config = kube::Config::new(url);
        config.root_cert = Some(vec![self.ca_der.clone()]);
        let bearer = format!("Bearer {token}")
            .parse()
            .map_err(|e| ControlPlaneError::Crds(format!("token header: {e}")))?;
        config.headers = vec![(http::header::AUTHORIZATION, bearer)];
        config.default_retry = false;
        config.connect_timeout = Some(Duration::from_secs(5));
        Ok(config)
    }

    /// A client for `token`.
    pub fn client_with_token(&self, token: &str) -> Result<kube::Client, ControlPlaneError> {
        kube::Client::try_from(self.config_with_token(token)?)
            .map_err(ControlPlaneError::kube("building a client"))
    }

    /// The admin's client (`system:masters`): for setting things up, never for the code under
    /// test.
    pub fn admin(&self) -> Result<kube::Client, ControlPlaneError> {
        self.client_with_token(ADMIN_TOKEN)
    }

    /// A kubeconfig (YAML) for the API server that authenticates with `token`: what a program
    /// under test reads through `$KUBECONFIG`.
    pub fn kubeconfig(&self, token: &str) -> String {
        self.kubeconfig_for(&self.url(), token)
    }

    /// [`ControlPlane::kubeconfig`], reaching the API server at the loopback address `ip`
    /// (with [`Options::every_address`]).
    pub fn kubeconfig_at(&self, ip: &str, token: &str) -> String {
        self.kubeconfig_for(&format!("https://{ip}:{}", self.port), token)
    }

    fn kubeconfig_for(&self, server: &str, token: &str) -> String {
        let ca = self.ca_file();
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {server}\n    certificate-authority: {}\nusers:\n- name: test\n  user:\n    token: {token}\ncontexts:\n- name: test\n  context:\n    cluster: test\n    user: test\ncurrent-context: test\n",
            ca.display()
        )
    }

    /// Writes [`ControlPlane::kubeconfig`] for `token` to `<dir>/<name>.kubeconfig`; its path.
    pub fn write_kubeconfig(&self, name: &str, token: &str) -> Result<PathBuf, ControlPlaneError> {
        let path = self.dir.join(format!("{name}.kubeconfig"));
        std::fs::write(&path, self.kubeconfig(token))
            .map_err(ControlPlaneError::io(path.display().to_string()))?;
        Ok(path)
    }

    /// A kubeconfig file for the cluster administrator (`system:masters`): what an operator
    /// running `helm install` holds.
    pub fn write_admin_kubeconfig(&self) -> Result<PathBuf, ControlPlaneError> {
        self.write_kubeconfig("admin", ADMIN_TOKEN)
    }

    /// A token for ServiceAccount `namespace/name` (which must exist), minted by the API
    /// server's TokenRequest API, valid for an hour.
    pub async fn service_account_token(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<String, ControlPlaneError> {
        let api: Api<ServiceAccount> = Api::namespaced(self.admin()?, namespace);
        let req = TokenRequest {
            spec: TokenRequestSpec {
                audiences: Vec::new(),
                expiration_seconds: Some(3600),
                ..TokenRequestSpec::default()
            },
            ..TokenRequest::default()
        };
        let resp = api
            .create_token_request(name, &PostParams::default(), &req)
            .await
            .map_err(ControlPlaneError::kube(format!(
                "minting a token for {namespace}/{name}"
            )))?;
        resp.status.map(|s| s.token).ok_or_else(|| {
            ControlPlaneError::Crds("a TokenRequest answered without a token".into())
        })
    }

    /// Grants ServiceAccount `namespace/account` (created if missing) get, list and watch on
    /// `rules` ((API group, resources) pairs) through ClusterRole and ClusterRoleBinding
    /// `name`, replacing what that role granted before.
    pub async fn grant(
        &self,
        namespace: &str,
        account: &str,
        name: &str,
        rules: &[(String, Vec<String>)],
    ) -> Result<(), ControlPlaneError> {
        let admin = self.admin()?;
        let rules: Vec<Value> = rules
            .iter()
            .map(|(group, resources)| {
                json!({"apiGroups": [group], "resources": resources,
                       "verbs": ["get", "list", "watch"]})
            })
            .collect();
        let objects = [
            json!({"apiVersion": "v1", "kind": "ServiceAccount",
                   "metadata": {"name": account, "namespace": namespace}}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                   "metadata": {"name": name}, "rules": rules}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                   "metadata": {"name": name},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                               "name": name},
                   "subjects": [{"kind": "ServiceAccount", "name": account,
                                 "namespace": namespace}]}),
        ];
        for (object, plural) in
            objects
                .iter()
                .zip(["serviceaccounts", "clusterroles", "clusterrolebindings"])
        {
            let gvk = GroupVersionKind::gvk(
                if plural == "serviceaccounts" {
                    ""
                } else {
                    "rbac.authorization.k8s.io"
                },
                "v1",
                object
                    .get("kind")
                    .and_then(Value::as_str)
                    .unwrap_or_default(),
            );
            let res = ApiResource::from_gvk_with_plural(&gvk, plural);
            let api: Api<DynamicObject> = if plural == "serviceaccounts" {
                Api::namespaced_with(admin.clone(), namespace, &res)
            } else {
                Api::all_with(admin.clone(), &res)
            };
            let name = object
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            api.patch(
                name,
                &PatchParams::apply("typha-control-plane").force(),
                &Patch::Apply(object),
            )
            .await
            .map_err(ControlPlaneError::kube(format!("granting {name}")))?;
        }
        Ok(())
    }

    /// Starts etcd (again, on the same data and ports) and waits until it answers.
    pub async fn start_etcd(&mut self) -> Result<(), ControlPlaneError> {
        if self.etcd.is_some() {
            return Ok(());
        }
        let endpoint = self.etcd_endpoint();
        let peer_url = format!("http://127.0.0.1:{}", self.etcd_peer_port);
        let mut args = vec![
            "--name=test".to_owned(),
            format!("--data-dir={}", self.dir.join("etcd-data").display()),
            format!("--listen-client-urls={endpoint}"),
            format!("--advertise-client-urls={endpoint}"),
            format!("--listen-peer-urls={peer_url}"),
            format!("--initial-advertise-peer-urls={peer_url}"),
            format!("--initial-cluster=test={peer_url}"),
            // One member elects itself at once; no reason to wait a second for it.
            "--heartbeat-interval=10".to_owned(),
            "--election-timeout=100".to_owned(),
            "--log-level=warn".to_owned(),
        ];
        if let Some(q) = self.opts.etcd_quota_bytes {
            args.push(format!("--quota-backend-bytes={q}"));
        }
        let cleanup = self.remove_dir.then_some(self.dir.as_path());
        let log = self.dir.join("etcd.log");
        let proc = Proc::spawn("etcd", &peer("etcd")?, &args, &log, cleanup)?;
        let etcd = self.etcd.insert(proc);
        let deadline = tokio::time::Instant::now() + STARTUP;
        loop {
            let opts = etcd_client::ConnectOptions::new()
                .with_connect_timeout(Duration::from_secs(2))
                .with_timeout(Duration::from_secs(2));
            if let Ok(mut c) = etcd_client::Client::connect([endpoint.as_str()], Some(opts)).await
                && c.get("/health-probe", None).await.is_ok()
            {
                return Ok(());
            }
            etcd.check_running()?;
            if tokio::time::Instant::now() > deadline {
                return Err(etcd.not_ready());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Kills etcd (SIGKILL: no goodbye to the API server) and waits for it to exit.
    pub fn kill_etcd(&mut self) {
        self.etcd.take();
    }

    /// Starts kube-apiserver (again, on the same port) and waits until `/readyz` says ready.
    pub async fn start_apiserver(&mut self) -> Result<(), ControlPlaneError> {
        if self.apiserver.is_some() {
            return Ok(());
        }
        let d = |name: &str| self.dir.join(name).display().to_string();
        let args = vec![
            format!("--etcd-servers={}", self.etcd_endpoint()),
            if self.opts.every_address {
                "--bind-address=0.0.0.0".to_owned()
            } else {
                "--bind-address=127.0.0.1".to_owned()
            },
            "--advertise-address=127.0.0.1".to_owned(),
            format!("--secure-port={}", self.port),
            format!("--tls-cert-file={}", d("apiserver.crt")),
            format!("--tls-private-key-file={}", d("apiserver.key")),
            format!("--cert-dir={}", d("certs")),
            format!("--token-auth-file={}", d("tokens.csv")),
            "--authorization-mode=RBAC".to_owned(),
            "--service-account-issuer=https://kubernetes.default.svc".to_owned(),
            format!("--service-account-key-file={}", d("sa.crt")),
            format!("--service-account-signing-key-file={}", d("sa.key")),
            "--service-cluster-ip-range=10.96.0.0/16".to_owned(),
            format!("--watch-cache={}", self.opts.watch_cache),
            // Compaction is the test's to make, at the moment it chooses.
            "--etcd-compaction-interval=0".to_owned(),
            "--profiling=false".to_owned(),
            "--v=0".to_owned(),
        ];
        let bin = peer("kube-apiserver")?;
        let log = self.dir.join("kube-apiserver.log");
        self.apiserver = Some(Proc::spawn("kube-apiserver", &bin, &args, &log, None)?);
        let client = kube::Client::try_from(self.config_with_token(ADMIN_TOKEN)?)
            .map_err(ControlPlaneError::kube("building a client"))?;
        let deadline = tokio::time::Instant::now() + STARTUP;
        loop {
            let req = http::Request::get("/readyz").body(Vec::new());
            if let Ok(req) = req
                && let Ok(Ok(body)) =
                    tokio::time::timeout(Duration::from_secs(5), client.request_text(req)).await
                && body.trim() == "ok"
            {
                return Ok(());
            }
            if let Some(a) = self.apiserver.as_mut() {
                a.check_running()?;
            }
            if tokio::time::Instant::now() > deadline {
                return Err(ControlPlaneError::NotReady {
                    name: "kube-apiserver",
                    tail: process::tail(&log),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Kills kube-apiserver (SIGKILL: its clients' connections are reset) and waits for it to
    /// exit. Connections to its port are refused until [`ControlPlane::start_apiserver`].
    pub fn kill_apiserver(&mut self) {
        self.apiserver.take();
    }

    /// Compacts etcd's history up to its current revision (physically: a watch from before it
    /// fails at once); the revision.
    pub async fn compact_etcd(&self) -> Result<i64, ControlPlaneError> {
        let mut c = etcd_client::Client::connect([self.etcd_endpoint()], None).await?;
        let rev = c
            .get("/", Some(etcd_client::GetOptions::new().with_count_only()))
            .await?
            .header()
            .map_or(0, |h| h.revision());
        c.compact(
            rev,
            Some(etcd_client::CompactionOptions::new().with_physical()),
        )
        .await?;
        Ok(rev)
    }

    /// What kube-apiserver logged.
    pub fn apiserver_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("kube-apiserver.log")).unwrap_or_default()
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.apiserver.take();
        self.etcd.take();
        if self.remove_dir {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
