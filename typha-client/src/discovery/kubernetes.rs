//! Kubernetes discovery: a Service's ready endpoints from its EndpointSlices.

use std::net::SocketAddr;

use rand::seq::SliceRandom;

use super::target::{DiscoveryError, KubernetesError, Target};

/// Ready endpoints of a Service's EndpointSlices, with the port named `port_name`.
pub(super) async fn endpoint_slices(
    service: &str,
    namespace: &str,
    port_name: &str,
    api_server: Option<&str>,
    local_node: &str,
) -> Result<Vec<Target>, DiscoveryError> {
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    use kube::api::{Api, ListParams};
    let name = format!("{namespace}/{service}");
    let err = |source: KubernetesError| DiscoveryError::Kubernetes {
        service: name.clone(),
        source,
    };
    let client = match api_server {
        Some(url) => {
            let uri = url.parse().map_err(|e| {
                err(KubernetesError::ApiServerUrl {
                    url: url.to_owned(),
                    source: boxed(e),
                })
            })?;
            kube::Client::try_from(kube::Config::new(uri))
                .map_err(|e| err(KubernetesError::Client(e)))?
        }
        None => kube::Client::try_default()
            .await
            .map_err(|e| err(KubernetesError::Client(e)))?,
    };
    let slices: Api<EndpointSlice> = Api::namespaced(client, namespace);
    let list = slices
        .list(&ListParams::default().labels(&format!("kubernetes.io/service-name={service}")))
        .await
        .map_err(|e| err(KubernetesError::List(e)))?;
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

/// `e` as a boxed error (for errors of crates this one does not name, like `http`'s).
fn boxed<E: std::error::Error + Send + Sync + 'static>(
    e: E,
) -> Box<dyn std::error::Error + Send + Sync> {
    Box::new(e)
}
