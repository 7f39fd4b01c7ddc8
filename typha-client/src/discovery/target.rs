//! What discovery finds (servers to try) and why it may find none.

use std::net::SocketAddr;

/// One server to try.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Target {
    /// Where to connect.
    pub addr: SocketAddr,
    /// The name to verify the server's certificate against (the host as configured).
    pub server_name: String,
}

/// Discovery that found nothing to try.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DiscoveryError {
    /// No entry resolved to an address.
    #[error("no server address could be resolved from {0:?}")]
    NothingResolved(Vec<String>),
    /// The Kubernetes API could not be asked, or answered with an error.
    #[error("Kubernetes discovery of {service}: {source}")]
    Kubernetes {
        /// `namespace/service`.
        service: String,
        /// Why.
        source: KubernetesError,
    },
    /// The Service has no ready endpoint with the port.
    #[error("Kubernetes Service {service} has no ready endpoint with a port named {port_name:?}")]
    NoEndpoints {
        /// `namespace/service`.
        service: String,
        /// The port name looked for.
        port_name: String,
    },
}

/// Why the Kubernetes API gave no EndpointSlices.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KubernetesError {
    /// The configured API server URL does not parse.
    #[cfg(feature = "kubernetes")]
    #[error("bad API server URL {url:?}: {source}")]
    ApiServerUrl {
        /// The URL.
        url: String,
        /// Why it does not parse.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// No client could be made (no in-cluster configuration, no usable kubeconfig, bad TLS
    /// settings).
    #[cfg(feature = "kubernetes")]
    #[error("{0}")]
    Client(#[source] kube::Error),
    /// Listing the Service's EndpointSlices failed.
    #[cfg(feature = "kubernetes")]
    #[error("{0}")]
    List(#[source] kube::Error),
    /// This build has no Kubernetes client.
    #[error("this build of typha-client has no Kubernetes discovery (feature `kubernetes`)")]
    NotBuilt,
}
