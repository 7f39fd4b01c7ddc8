//! Finding servers: a list of `host:port` entries (each host name resolves to every A/AAAA
//! record, so one DNS name can stand for a whole Service), or a Kubernetes Service's
//! EndpointSlices. Every round the list is resolved again and shuffled, so thousands of nodes
//! spread over the replicas instead of all trying the first one.

use std::net::SocketAddr;

use rand::seq::SliceRandom;

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

/// One server to try.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Target {
    /// Where to connect.
    pub addr: SocketAddr,
    /// The name to verify the server's certificate against (the host as configured).
    pub server_name: String,
}

/// Discovery that found nothing to try.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DiscoveryError {
    /// No entry resolved to an address.
    #[error("no server address could be resolved from {0:?}")]
    NothingResolved(Vec<String>),
    /// The Kubernetes API could not be asked, or answered with an error.
    #[error("Kubernetes discovery of {service}: {reason}")]
    Kubernetes {
        /// `namespace/service`.
        service: String,
        /// Why.
        reason: String,
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

/// Ready endpoints of a Service's EndpointSlices, with the port named `port_name`.
async fn endpoint_slices(
    service: &str,
    namespace: &str,
    port_name: &str,
    api_server: Option<&str>,
    local_node: &str,
) -> Result<Vec<Target>, DiscoveryError> {
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    use kube::api::{Api, ListParams};
    let name = format!("{namespace}/{service}");
    let err = |reason: String| DiscoveryError::Kubernetes {
        service: name.clone(),
        reason,
    };
    let client = match api_server {
        Some(url) => {
            let uri = url
                .parse()
                .map_err(|e| err(format!("bad API server URL {url:?}: {e}")))?;
            kube::Client::try_from(kube::Config::new(uri)).map_err(|e| err(e.to_string()))?
        }
        None => kube::Client::try_default()
            .await
            .map_err(|e| err(e.to_string()))?,
    };
    let slices: Api<EndpointSlice> = Api::namespaced(client, namespace);
    let list = slices
        .list(&ListParams::default().labels(&format!("kubernetes.io/service-name={service}")))
        .await
        .map_err(|e| err(e.to_string()))?;
    let server_name = format!("{service}.{namespace}.svc");
    let (mut local, mut remote) = (Vec::new(), Vec::new());
    for slice in list.items {
        let Some(port) = slice
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(port_name))
            .and_then(|p| p.port)
            .and_then(|p| u16::try_from(p).ok())
        else {
            continue;
        };
        for ep in slice.endpoints {
            // Ready unknown counts as ready, as Kubernetes defines it.
            if ep.conditions.as_ref().and_then(|c| c.ready) == Some(false) {
                continue;
            }
            let here = ep.node_name.as_deref() == Some(local_node);
            for a in &ep.addresses {
                let Ok(ip) = a.parse::<std::net::IpAddr>() else {
                    continue;
                };
                let t = Target {
                    addr: SocketAddr::new(ip, port),
                    server_name: server_name.clone(),
                };
                if here { local.push(t) } else { remote.push(t) }
            }
        }
    }
    let mut rng = rand::rng();
    local.shuffle(&mut rng);
    remote.shuffle(&mut rng);
    local.extend(remote);
    if local.is_empty() {
        return Err(DiscoveryError::NoEndpoints {
            service: name,
            port_name: port_name.to_owned(),
        });
    }
    Ok(local)
}

/// Resolves `host:port` entries to every address they name (deduplicated).
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
