//! A small HTTP/1.1 client (hyper) for the server's `/status`, `/readiness` and `/metrics`, and
//! the embedded datastore's write API. One keep-alive connection, reopened after an error.

use std::collections::HashMap;

use anyhow::{Context, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;

/// The longest one request may take (a churn batch of 2,000 endpoints into a loaded server
/// included).
pub(crate) const REQUEST_WITHIN: std::time::Duration = std::time::Duration::from_secs(120);

/// A client for one `host:port`.
pub(crate) struct Http {
    addr: String,
    sender: Option<SendRequest<Full<Bytes>>>,
}

impl Http {
    /// A client for `addr` (`host:port`); connects on first use.
    pub(crate) fn new(addr: &str) -> Self {
        Self {
            addr: addr.to_owned(),
            sender: None,
        }
    }

    async fn connect(&self) -> anyhow::Result<SendRequest<Full<Bytes>>> {
        let tcp = tokio::net::TcpStream::connect(&self.addr)
            .await
            .with_context(|| format!("connecting to {}", self.addr))?;
        let _ = tcp.set_nodelay(true);
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(sender)
    }

    /// One request; the status and body. A broken connection is reopened once. The whole
    /// exchange must end within [`REQUEST_WITHIN`]: a server that accepts and never answers
    /// fails the run with what was asked instead of holding it forever.
    pub(crate) async fn request(
        &mut self,
        method: &str,
        path: &str,
        body: Bytes,
    ) -> anyhow::Result<(u16, Bytes)> {
        match tokio::time::timeout(REQUEST_WITHIN, self.exchange(method, path, body)).await {
            Ok(r) => r,
            Err(_) => {
                // The connection may be the stuck part: the next request opens a new one.
                self.sender = None;
                bail!(
                    "{method} {path} to {}: no answer within {REQUEST_WITHIN:?}",
                    self.addr
                )
            }
        }
    }

    async fn exchange(
        &mut self,
        method: &str,
        path: &str,
        body: Bytes,
    ) -> anyhow::Result<(u16, Bytes)> {
        let mut retried = false;
        loop {
            let mut sender = match self.sender.take() {
                Some(s) if !s.is_closed() => s,
                _ => self.connect().await?,
            };
            let req = hyper::Request::builder()
                .method(method)
                .uri(path)
                .header(hyper::header::HOST, &self.addr)
                .body(Full::new(body.clone()))?;
            let resp = match async {
                sender.ready().await?;
                sender.send_request(req).await
            }
            .await
            {
                Ok(r) => r,
                Err(e) if !retried => {
                    retried = true;
                    tracing::debug!("{} {path}: {e}; reconnecting", self.addr);
                    continue;
                }
                Err(e) => return Err(e).with_context(|| format!("{method} {path}")),
            };
            let status = resp.status().as_u16();
            let bytes = resp.into_body().collect().await?.to_bytes();
            self.sender = Some(sender);
            return Ok((status, bytes));
        }
    }

    /// GET a JSON document (status 200 required).
    pub(crate) async fn get_json(&mut self, path: &str) -> anyhow::Result<serde_json::Value> {
        let (status, body) = self.request("GET", path, Bytes::new()).await?;
        if status != 200 {
            bail!(
                "GET {path}: {status}: {}",
                String::from_utf8_lossy(&body).trim()
            );
        }
        serde_json::from_slice(&body).with_context(|| format!("GET {path}: not JSON"))
    }

    /// GET a Prometheus text exposition: every sample, keyed `name{labels}`.
    pub(crate) async fn get_metrics(&mut self) -> anyhow::Result<HashMap<String, f64>> {
        let (status, body) = self.request("GET", "/metrics", Bytes::new()).await?;
        if status != 200 {
            bail!("GET /metrics: {status}");
        }
        Ok(parse_metrics(&String::from_utf8_lossy(&body)))
    }
}

/// Samples of a Prometheus text exposition (format 0.0.4, as the server serves it), keyed by
/// series (`name{labels}`, labels as the server writes them).
pub(crate) fn parse_metrics(text: &str) -> HashMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_owned(), value.parse().ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn parses_series_with_and_without_labels() {
        let m = parse_metrics(
            "# HELP typha_bytes_sent_total Bytes written to clients.\n# TYPE typha_bytes_sent_total counter\ntypha_bytes_sent_total 1234\n# TYPE typha_frames_encoded_total counter\ntypha_frames_encoded_total{kind=\"delta\"} 7\n# TYPE typha_ping_latency summary\ntypha_ping_latency{syncer=\"felix\",quantile=\"0.5\"} NaN\ntypha_ping_latency_count{syncer=\"felix\"} 0\n",
        );
        assert_eq!(m["typha_bytes_sent_total"], 1234.0);
        assert_eq!(m["typha_frames_encoded_total{kind=\"delta\"}"], 7.0);
        assert!(m["typha_ping_latency{syncer=\"felix\",quantile=\"0.5\"}"].is_nan());
        assert_eq!(m["typha_ping_latency_count{syncer=\"felix\"}"], 0.0);
        assert_eq!(m.len(), 4);
    }
}
