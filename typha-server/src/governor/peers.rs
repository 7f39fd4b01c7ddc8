//! The other replicas: who they are (the Service's EndpointSlices) and what they hold (each
//! one's `/status`, on the health port every replica shares).
//!
//! Why `/status` and not an annotation: EndpointSlices belong to the EndpointSlice controller
//! (anything we wrote there would be overwritten), and an annotation on our own Pod would need
//! a write permission on Pods and an API write per change from every replica. Reading each
//! other's `/status` needs no permission beyond listing EndpointSlices, costs one small HTTP
//! request per replica per poll, and reports what the replica itself counts right now.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A replica of the Service, as its EndpointSlices list it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// Its address.
    pub ip: IpAddr,
    /// Its sync port (the port named like `TYPHA_K8SPORTNAME`).
    pub port: u16,
    /// Whether it is ready (Kubernetes' `ready` condition; unknown counts as ready).
    pub ready: bool,
}

/// Why the replicas could not be listed.
#[derive(Debug, thiserror::Error)]
#[error("listing the EndpointSlices of Service {namespace}/{service}: {source}")]
pub struct ListError {
    namespace: String,
    service: String,
    #[source]
    source: kube::Error,
}

/// Every endpoint of the Service with the port named `port_name`, ready or not, each address
/// once (the first listing of an address decides its readiness).
pub async fn endpoints(
    client: &kube::Client,
    namespace: &str,
    service: &str,
    port_name: &str,
) -> Result<Vec<Endpoint>, ListError> {
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), namespace);
    let list = slices
        .list(&ListParams::default().labels(&format!("kubernetes.io/service-name={service}")))
        .await
        .map_err(|source| ListError {
            namespace: namespace.to_owned(),
            service: service.to_owned(),
            source,
        })?;
    let mut out: Vec<Endpoint> = Vec::new();
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
            let ready = ep.conditions.as_ref().and_then(|c| c.ready) != Some(false);
            for a in &ep.addresses {
                if let Ok(ip) = a.parse()
                    && !out.iter().any(|e| e.ip == ip)
                {
                    out.push(Endpoint { ip, port, ready });
                }
            }
        }
    }
    Ok(out)
}

/// What a replica says of itself on `/status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Load {
    /// Its epoch (to tell ourselves apart).
    pub epoch: u64,
    /// Connections it holds.
    pub connections: usize,
    /// Whether it is shutting down (its clients are leaving; it accepts no more).
    pub draining: bool,
    /// Whether its view of the datastore is stale (unconfirmed for `TYPHA_STALETHRESHOLDSECS`:
    /// cut off from the datastore, it falls behind the others).
    pub stale: bool,
}

/// Why a replica's load is unknown.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// It did not answer in time, or the connection failed.
    #[error("{0}: {1}")]
    Io(SocketAddr, #[source] std::io::Error),
    /// It answered something that is not its `/status`.
    #[error("{0}: not a /status answer")]
    Answer(SocketAddr),
}

/// `GET /status` from a replica's health listener.
pub async fn load(addr: SocketAddr, timeout: Duration) -> Result<Load, LoadError> {
    let io = |e| LoadError::Io(addr, e);
    let text = tokio::time::timeout(timeout, async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        s.write_all(b"GET /status HTTP/1.1\r\nHost: typha\r\nConnection: close\r\n\r\n")
            .await?;
        let mut buf = Vec::new();
        // Bounded: a /status answer is a few hundred bytes.
        (&mut s).take(64 << 10).read_to_end(&mut buf).await?;
        Ok::<_, std::io::Error>(buf)
    })
    .await
    .map_err(|_| io(std::io::ErrorKind::TimedOut.into()))?
    .map_err(io)?;
    parse_status(&text).ok_or(LoadError::Answer(addr))
}

fn parse_status(answer: &[u8]) -> Option<Load> {
    let text = std::str::from_utf8(answer).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    if !head.starts_with("HTTP/1.1 200") {
        return None;
    }
    let v: serde_json::Value = serde_json::from_str(body).ok()?;
    let epoch = u64::from_str_radix(v.get("epoch")?.as_str()?, 16).ok()?;
    let connections = usize::try_from(v.get("connections")?.as_u64()?).ok()?;
    // Older replicas do not say.
    let draining = v
        .get("draining")
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false);
    let stale = v
        .get("datastore")
        .and_then(|d| d.get("stale"))
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false);
    Some(Load {
        epoch,
        connections,
        draining,
        stale,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_answers_parse_and_anything_else_does_not() {
        let ok = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n{\"epoch\":\"00000000000000ff\",\"connections\":42,\"seq\":3}";
        assert_eq!(
            parse_status(ok),
            Some(Load {
                epoch: 255,
                connections: 42,
                draining: false,
                stale: false,
            })
        );
        let leaving =
            b"HTTP/1.1 200 OK\r\n\r\n{\"epoch\":\"01\",\"connections\":7,\"draining\":true}";
        assert!(parse_status(leaving).unwrap().draining);
        let cut_off = b"HTTP/1.1 200 OK\r\n\r\n{\"epoch\":\"01\",\"connections\":7,\"datastore\":{\"connected\":false,\"stale\":true}}";
        let l = parse_status(cut_off).unwrap();
        assert!(l.stale && !l.draining);
        assert_eq!(parse_status(b"HTTP/1.1 503 X\r\n\r\n{}"), None);
        assert_eq!(parse_status(b"HTTP/1.1 200 OK\r\n\r\nnot json"), None);
        assert_eq!(parse_status(b"garbage"), None);
        assert_eq!(parse_status(&[0xff, 0xfe]), None);
    }
}
