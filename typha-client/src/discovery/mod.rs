//! Finding servers: a list of `host:port` entries (each host name resolves to every A/AAAA
//! record, so one DNS name can stand for a whole Service), or a Kubernetes Service's
//! EndpointSlices. Every round the list is resolved again and shuffled, so thousands of nodes
//! spread over the replicas instead of all trying the first one.

use rand::seq::SliceRandom;

mod target;
pub use target::{DiscoveryError, KubernetesError, Target};

/// Where to find servers.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Discovery {
    /// `host:port` entries (FELIX_TYPHAADDR). Names resolve to all their addresses.
    Addresses(Vec<String>),
    /// A Kubernetes Service (FELIX_TYPHAK8SSERVICENAME / FELIX_TYPHAK8SNAMESPACE), through its
    /// EndpointSlices: ready endpoints, the port named `port_name`.
    Kubernetes {
        /// Service name.
        service: String,
        /// Namespace.
        namespace: String,
        /// Port name (`calico-typha`).
        port_name: String,
        /// API server URL; `None`: in-cluster configuration or the kubeconfig.
        api_server: Option<String>,
    },
}

impl Discovery {
    /// A list of `host:port` entries.
    pub fn addresses(entries: Vec<String>) -> Self {
        Discovery::Addresses(entries)
    }

    /// A Kubernetes Service, found through the in-cluster configuration or the kubeconfig.
    pub fn kubernetes(service: impl Into<String>, namespace: impl Into<String>) -> Self {
        Discovery::Kubernetes {
            service: service.into(),
            namespace: namespace.into(),
            port_name: "calico-typha".into(),
            api_server: None,
        }
    }

    /// Resolves the servers to try this round, shuffled; with Kubernetes discovery, endpoints
    /// on `local_node` come first (each group shuffled), as Felix does.
    ///
    /// # Errors
    ///
    /// [`DiscoveryError::NothingResolved`] when no address entry resolves;
    /// [`DiscoveryError::Kubernetes`] when the API server cannot be asked or answers with an error
    /// (or the `kubernetes` feature is off), [`DiscoveryError::NoEndpoints`] when the Service has
    /// no ready endpoint with the port. The caller tries again on its next round.
    pub async fn discover(&self, local_node: &str) -> Result<Vec<Target>, DiscoveryError> {
        match self {
            Discovery::Addresses(entries) => {
                let mut out = resolve(entries).await?;
                out.shuffle(&mut rand::rng());
                Ok(out)
            }
            Discovery::Kubernetes {
                service,
                namespace,
                port_name,
                api_server,
            } => {
                endpoint_slices(
                    service,
                    namespace,
                    port_name,
                    api_server.as_deref(),
                    local_node,
                )
                .await
            }
        }
    }
}

#[cfg(feature = "kubernetes")]
mod kubernetes;
#[cfg(feature = "kubernetes")]
use kubernetes::endpoint_slices;

/// Without the `kubernetes` feature there is no Kubernetes client to ask.
#[cfg(not(feature = "kubernetes"))]
async fn endpoint_slices(
    service: &str,
    namespace: &str,
    _port_name: &str,
    _api_server: Option<&str>,
    _local_node: &str,
) -> Result<Vec<Target>, DiscoveryError> {
    Err(DiscoveryError::Kubernetes {
        service: format!("{namespace}/{service}"),
        source: KubernetesError::NotBuilt,
    })
}

/// Resolves `host:port` entries to every address they name (deduplicated).
///
/// # Errors
///
/// [`DiscoveryError::NothingResolved`] when no entry resolves to an address (an entry that
/// does not resolve is skipped while others do).
pub async fn resolve(entries: &[String]) -> Result<Vec<Target>, DiscoveryError> {
    let mut out: Vec<Target> = Vec::new();
    for e in entries {
        let host = e
            .rsplit_once(':')
            .map_or(e.as_str(), |(h, _)| h)
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        if let Ok(addrs) = tokio::net::lookup_host(e.as_str()).await {
            for addr in addrs {
                let t = Target {
                    addr,
                    server_name: host.clone(),
                };
                if !out.contains(&t) {
                    out.push(t);
                }
            }
        }
    }
    if out.is_empty() {
        return Err(DiscoveryError::NothingResolved(entries.to_vec()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn names_resolve_to_every_address_and_ips_pass_through() {
        let d = Discovery::addresses(vec![
            "127.0.0.1:5473".into(),
            "localhost:5473".into(),
            "[::1]:5473".into(),
        ]);
        let t = d.discover("node").await.unwrap();
        assert!(
            t.iter()
                .any(|t| t.addr == "127.0.0.1:5473".parse().unwrap())
        );
        assert!(t.iter().any(|t| t.server_name == "localhost"));
        assert!(t.iter().any(|t| t.server_name == "::1"));
        let unique: std::collections::HashSet<_> = t.iter().collect();
        assert_eq!(unique.len(), t.len());
        assert!(matches!(
            Discovery::addresses(vec!["no-such-host.invalid:5473".into()])
                .discover("node")
                .await,
            Err(DiscoveryError::NothingResolved(_))
        ));
    }
}
