//! Opening the configured datastore: the backend, and the tasks that feed it (the embedded
//! store's directory scanner and write API).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::task::JoinHandle;
use tracing::info;

use super::Datastore;
use super::embedded::{DirSource, Embedded, api};
use super::etcd::{Etcd, EtcdError, EtcdTls};
use super::kubernetes::Kubernetes;
use crate::config::DatastoreConfig;

/// An open datastore and the background tasks that belong to it.
#[derive(Debug)]
pub struct Opened {
    /// The backend the syncer lists and watches.
    pub datastore: Arc<dyn Datastore>,
    /// Tasks to stop at shutdown (the embedded store's write API).
    pub tasks: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for dyn Datastore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why the datastore could not be opened. Displays as `SETTING: reason`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// `TYPHA_EMBEDDEDDIR` is not a directory.
    #[error(
        "TYPHA_EMBEDDEDDIR: {} is not a directory (set TYPHA_EMBEDDEDDIR to a folder of Calico v3 manifests)",
        dir.display()
    )]
    EmbeddedDir {
        /// The configured (or default) directory.
        dir: PathBuf,
    },
    /// The embedded store's write API cannot listen.
    #[error("TYPHA_EMBEDDEDAPIADDR: cannot listen on {addr}: {source}")]
    EmbeddedApi {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The etcd client cannot be set up.
    #[error("{setting}: {source}")]
    Etcd {
        /// The setting the error is about.
        setting: &'static str,
        /// Why.
        #[source]
        source: EtcdError,
    },
    /// There is no usable Kubernetes client configuration.
    #[error(
        "TYPHA_K8SAPIENDPOINT: no usable Kubernetes client configuration (in-cluster or kubeconfig): {source}"
    )]
    Kubernetes {
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// An upstream server is not a datastore: it feeds the cache through
    /// [`crate::syncer::upstream`].
    #[error("TYPHA_DATASTORETYPE: typha is not a datastore")]
    Upstream,
}

/// Opens the datastore `cfg` describes.
pub async fn open(cfg: &DatastoreConfig) -> Result<Opened, OpenError> {
    let mut tasks = Vec::new();
    let datastore: Arc<dyn Datastore> = match cfg {
        DatastoreConfig::Embedded {
            dir,
            scan_interval,
            api: api_addr,
        } => {
            let store = Embedded::new();
            if let Some(dir) = dir {
                if !dir.is_dir() {
                    return Err(OpenError::EmbeddedDir { dir: dir.clone() });
                }
                let mut src = DirSource::new(dir.clone(), store.clone());
                let report = src.scan();
                info!(dir = %dir.display(), resources = store.len(), warnings = report.new_warnings.len(), "embedded datastore loaded");
                tokio::spawn(src.run(scan_interval.to_owned()));
            }
            if let Some(addr) = api_addr {
                let (bound, task) = api::serve(*addr, store.clone()).await.map_err(|source| {
                    OpenError::EmbeddedApi {
                        addr: *addr,
                        source,
                    }
                })?;
                info!(addr = %bound, "embedded datastore write API listening");
                tasks.push(task);
            }
            Arc::new(store)
        }
        DatastoreConfig::Etcd { endpoints, tls } => {
            let e = Etcd::connect(endpoints, tls.as_ref())
                .await
                .map_err(|source| OpenError::Etcd {
                    setting: etcd_setting(&source, tls.as_ref()),
                    source,
                })?;
            info!(?endpoints, tls = tls.is_some(), "etcd datastore");
            Arc::new(e)
        }
        DatastoreConfig::Kubernetes {
            api_endpoint,
            use_pod_cidr,
            calico_api_group,
            interface_prefix,
        } => {
            let client = kube_client(api_endpoint.as_deref())
                .await
                .map_err(|source| OpenError::Kubernetes { source })?;
            info!(api = ?api_endpoint, use_pod_cidr, calico_api_group = ?calico_api_group.map(|g| g.api_version()), %interface_prefix, "kubernetes datastore");
            Arc::new(
                Kubernetes::with_pod_cidr(client, *use_pod_cidr)
                    .with_api_group(*calico_api_group)
                    .with_interface_prefix(*interface_prefix),
            )
        }
        DatastoreConfig::Upstream(_) => return Err(OpenError::Upstream),
    };
    Ok(Opened { datastore, tasks })
}

/// A Kubernetes client for `api_endpoint`, else the in-cluster configuration or the kubeconfig.
pub(crate) async fn kube_client(
    api_endpoint: Option<&str>,
) -> Result<kube::Client, Box<dyn std::error::Error + Send + Sync>> {
    let mut config = match api_endpoint {
        Some(url) => kube::Config::new(url.parse::<http::Uri>()?),
        None => kube::Config::infer().await?,
    };
    // kube retries 429/503/504 on its own, up to 15 times: an API server that is down would
    // stall the syncer for minutes instead of being reported and retried by it.
    config.default_retry = false;
    Ok(kube::Client::try_from(config)?)
}

/// The setting an etcd set-up error is about.
fn etcd_setting(e: &EtcdError, tls: Option<&EtcdTls>) -> &'static str {
    let EtcdError::File { path, .. } = e else {
        return "TYPHA_ETCDENDPOINTS";
    };
    let client = tls.and_then(|t| t.client.as_ref());
    if client.is_some_and(|c| &c.key_file == path) {
        "TYPHA_ETCDKEYFILE"
    } else if client.is_some_and(|c| &c.cert_file == path) {
        "TYPHA_ETCDCERTFILE"
    } else {
        "TYPHA_ETCDCAFILE"
    }
}
