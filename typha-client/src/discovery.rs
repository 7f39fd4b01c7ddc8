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
    /// This discovery method is not available in this build.
    #[error("{0}")]
    Unsupported(String),
}

impl Discovery {
    /// A list of `host:port` entries.
    pub fn addresses(entries: Vec<String>) -> Self {
        Discovery::Addresses(entries)
    }

    /// Resolves the servers to try this round, shuffled.
    pub async fn discover(&self) -> Result<Vec<Target>, DiscoveryError> {
        let mut out = match self {
            Discovery::Addresses(entries) => resolve(entries).await?,
            Discovery::Kubernetes {
                service, namespace, ..
            } => {
                return Err(DiscoveryError::Unsupported(format!(
                    "Kubernetes discovery (service {namespace}/{service}) is not implemented yet; set FELIX_TYPHAADDR to the Service's DNS name instead"
                )));
            }
        };
        out.shuffle(&mut rand::rng());
        Ok(out)
    }
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
        let t = d.discover().await.unwrap();
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
                .discover()
                .await,
            Err(DiscoveryError::NothingResolved(_))
        ));
    }
}
