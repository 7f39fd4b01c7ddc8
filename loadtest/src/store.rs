//! A real datastore for a run, started and seeded with the generated cluster: etcd in
//! Calico's layout (`etcd.rs`), or a real kube-apiserver over etcd 3.6 holding it as
//! Kubernetes objects and Calico's CRDs (`kube.rs`). `direct` runs its nodes against it and
//! then our server in front of it; `calico` runs our server and Calico's own Typha in front of
//! the same one, in turn.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

use crate::etcd::{self, EtcdProc};
use crate::harness::{self, Workdir};
use crate::kube::KubeCluster;
use crate::server::{Backend, Churn, Server};

/// Which real datastore.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum StoreKind {
    /// etcd v3 in Calico's layout.
    Etcd,
    /// A real kube-apiserver over etcd 3.6 (peers/build).
    Kubernetes,
}

/// The datastore of a run, started and seeded.
pub(crate) enum Store {
    /// etcd in Calico's layout.
    Etcd(EtcdProc),
    /// kube-apiserver, and the resourceVersion of the last churn write.
    Kube(KubeCluster, Arc<AtomicU64>),
}

/// The processes a side measures: the datastore the nodes talk to (etcd, or kube-apiserver),
/// and for Kubernetes the etcd under it.
pub(crate) struct Watched {
    pub(crate) datastore: u32,
    pub(crate) etcd_under: Option<u32>,
}

impl Store {
    /// Starts the datastore under the work directory and writes the generated cluster into it;
    /// with how many resources (etcd) or objects (Kubernetes).
    pub(crate) async fn start(kind: StoreKind, wd: &Workdir) -> anyhow::Result<(Store, usize)> {
        Self::start_with(kind, wd, false).await
    }

    /// [`start`](Self::start); with `every_address`, each server replica can reach it at a
    /// loopback address of its own ([`backend_at`](Self::backend_at)), to be cut off alone.
    pub(crate) async fn start_with(
        kind: StoreKind,
        wd: &Workdir,
        every_address: bool,
    ) -> anyhow::Result<(Store, usize)> {
        Ok(match kind {
            StoreKind::Etcd => {
                let e = EtcdProc::start(wd.path(), every_address).await?;
                let n = etcd::seed(&e, wd.shape()).await?;
                (Store::Etcd(e), n)
            }
            StoreKind::Kubernetes => {
                let k = KubeCluster::start(wd.path(), every_address).await?;
                let seeding = std::time::Instant::now();
                let n = crate::kube::seed(&k, wd.shape()).await?;
                eprintln!(
                    "seeded {n} objects through the API in {:.0} s",
                    seeding.elapsed().as_secs_f64()
                );
                (Store::Kube(k, Arc::new(AtomicU64::new(0))), n)
            }
        })
    }

    pub(crate) fn watched(&self) -> Watched {
        match self {
            Store::Etcd(e) => Watched {
                datastore: e.pid(),
                etcd_under: None,
            },
            Store::Kube(k, _) => Watched {
                datastore: k.apiserver_pid(),
                etcd_under: Some(k.etcd_pid()),
            },
        }
    }

    /// CPU seconds so far of the datastore and of the etcd under it (0 for etcd itself).
    pub(crate) fn cpu(&self) -> (f64, f64) {
        let w = self.watched();
        (
            harness::cpu(&[w.datastore]),
            w.etcd_under.map_or(0.0, |p| harness::cpu(&[p])),
        )
    }

    /// Starts writing `rate` stamped updates per second for `secs` seconds into it.
    pub(crate) fn churn(&self, wd: &Workdir, rate: f64, secs: f64) -> anyhow::Result<Churn> {
        Ok(match self {
            Store::Etcd(e) => etcd::churn(e.endpoint.clone(), wd.shape(), rate, secs),
            Store::Kube(k, last) => crate::kube::churn(
                k,
                wd.shape(),
                (rate, secs),
                last.clone(),
                crate::churn_plan::Gate::default(),
            )?,
        })
    }

    /// The swarm arguments that make its nodes direct ones.
    pub(crate) fn swarm_args(&self) -> (String, Vec<String>) {
        match self {
            Store::Etcd(e) => (
                e.endpoint.clone(),
                vec!["--etcd".into(), e.endpoint.clone()],
            ),
            Store::Kube(k, _) => (
                k.url(),
                vec![
                    "--kube".into(),
                    k.url(),
                    "--kube-ca".into(),
                    k.ca_file().display().to_string(),
                    "--kube-token".into(),
                    k.node_token.clone(),
                ],
            ),
        }
    }

    /// What every direct node must end at: etcd's revision, or the last churn write's pod
    /// resourceVersion.
    pub(crate) async fn final_mark(&self) -> anyhow::Result<String> {
        Ok(match self {
            Store::Etcd(e) => {
                let rev = e
                    .client()
                    .await?
                    .get("/", None)
                    .await?
                    .header()
                    .map_or(0, |h| h.revision());
                format!("rev-{rev}")
            }
            Store::Kube(_, last) => format!("rv-{}", last.load(Ordering::Relaxed)),
        })
    }

    /// How a server reads it: etcd's client URL, or a kubeconfig. `admin` gives Calico's own
    /// Typha, which reads more kinds than our RBAC grants, the cluster admin's credentials.
    pub(crate) fn backend(&self, admin: bool) -> anyhow::Result<Backend> {
        Ok(match self {
            Store::Etcd(e) => Backend::Etcd(e.endpoint.clone()),
            Store::Kube(k, _) if admin => Backend::Kube(k.admin_kubeconfig()?),
            Store::Kube(k, _) => Backend::Kube(k.typha_kubeconfig.clone()),
        })
    }

    /// [`backend`](Self::backend) (ours), reaching it at the loopback address `ip`; `name`
    /// names the replica's kubeconfig.
    pub(crate) fn backend_at(&self, name: &str, ip: &str) -> anyhow::Result<Backend> {
        Ok(match self {
            Store::Etcd(e) => Backend::Etcd(e.endpoint_at(ip)),
            Store::Kube(k, _) => Backend::Kube(k.typha_kubeconfig_at(name, ip)?),
        })
    }

    /// The port servers reach it at.
    pub(crate) fn port(&self) -> String {
        match self {
            Store::Etcd(e) => e.port().to_owned(),
            Store::Kube(k, _) => k.port().to_string(),
        }
    }

    /// Kills what servers talk to (etcd, or kube-apiserver) with SIGKILL and starts it again;
    /// returns when it answers.
    pub(crate) async fn kill_and_restart(&mut self) -> anyhow::Result<()> {
        match self {
            Store::Etcd(e) => e.kill_and_restart().await,
            Store::Kube(k, _) => k.kill_and_restart_apiserver().await,
        }
    }

    /// Compacts etcd's history (under the API server, for Kubernetes) to its current
    /// revision; that revision.
    pub(crate) async fn compact(&self) -> anyhow::Result<i64> {
        match self {
            Store::Etcd(e) => e.compact().await,
            Store::Kube(k, _) => k.compact().await,
        }
    }

    /// Our server in front of it, ready with the whole datastore in its cache.
    pub(crate) async fn server(&self, wd: &Workdir, name: &str) -> anyhow::Result<Server> {
        wd.server_on(name, &self.backend(false)?).await
    }

    /// (short name, name in a sentence).
    pub(crate) fn names(&self) -> (&'static str, &'static str) {
        match self {
            Store::Etcd(_) => ("etcd", "etcd"),
            Store::Kube(..) => ("kube-apiserver", "the API server"),
        }
    }
}
