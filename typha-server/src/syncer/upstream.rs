//! Tiered fan-out: a server whose cache is fed by another server (`TYPHA_DATASTORETYPE=typha`,
//! `TYPHA_UPSTREAMADDR`), through `typha-client`, so one datastore watch can fan out to a very
//! large fleet in layers. The upstream has already converted and validated every value, so its
//! KVs go into the cache as they are ([`SyncerEvent::Kvs`]); the sync status is passed on.
//!
//! The client keeps the full store with its digest, so when the upstream restarts or another
//! replica takes over it resumes by deltas or digest buckets and hands on only what changed:
//! this server's own clients see a few deltas, not a resync.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::sync::mpsc;
use tracing::{info, warn};
use typha_client::metrics::ClientMetrics;
use typha_client::tls::ClientTls;
use typha_client::{ClientConfig, Discovery, Staleness, SyncClient, SyncerCallbacks};
use typha_protocol::model::{SyncStatus, Update};

use super::freshness::Freshness;
use super::{FeedContext, SyncerEvent};

/// Mutual TLS to the upstream: the client library's settings (CA, certificate, key, the
/// upstream's required CN or URI SAN).
pub type UpstreamTls = ClientTls;

/// Where the upstream is and how to reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamConfig {
    /// Upstream servers, `host:port` (shuffled and failed over as any client does).
    pub addrs: Vec<String>,
    /// Mutual TLS to the upstream; `None`: plaintext.
    pub tls: Option<ClientTls>,
    /// The name this server gives the upstream (its hostname).
    pub hostname: String,
}

/// Passes the client's callbacks on to the cache writer (callbacks cannot wait; the forwarder
/// task does), and the upstream's staleness on to this server's.
struct Forward {
    tx: mpsc::UnboundedSender<SyncerEvent>,
    freshness: Arc<Freshness>,
}

impl SyncerCallbacks for Forward {
    fn on_status_updated(&mut self, status: SyncStatus) {
        let _ = self.tx.send(SyncerEvent::Status(status));
    }

    fn on_updates(&mut self, updates: Vec<Update>) {
        let _ = self.tx.send(SyncerEvent::Kvs(updates));
    }

    fn on_staleness(&mut self, staleness: &Staleness) {
        self.freshness.relay(Some(staleness.clone()));
    }
}

/// The feed [`crate::server::start_with`] runs for a tier: [`run`], with the client's metrics
/// (`typha_client_*`) registered on the server's registry.
pub fn feed(cfg: UpstreamConfig) -> impl for<'a> FnOnce(FeedContext<'a>) -> BoxFuture<'static, ()> {
    move |f: FeedContext<'_>| {
        let metrics = ClientMetrics::new(f.registry);
        Box::pin(run(cfg, metrics, f.tx, f.freshness))
    }
}

/// How often the feed looks at its upstream connection.
const CHECK_EVERY: Duration = Duration::from_millis(250);

/// Feeds the cache writer from the upstream until the writer's channel closes; the client's
/// metrics (`typha_client_*`, registered by the caller) show the upstream connection. This
/// server's view is confirmed while the upstream connection is up (as the client's
/// [`Position::connected`](typha_client::Position::connected) says, not its metric) and the upstream's own view
/// is current; a stale upstream makes this server stale too, with the upstream's age. TLS
/// settings are checked before the server starts ([`check_tls`]); if they still cannot be
/// used the feed logs it and ends (the server stays not ready).
pub async fn run(
    cfg: UpstreamConfig,
    metrics: Arc<ClientMetrics>,
    out: mpsc::Sender<SyncerEvent>,
    freshness: Arc<Freshness>,
) {
    let mut client_cfg = ClientConfig::new(cfg.hostname.clone(), Discovery::addresses(cfg.addrs));
    client_cfg.tls = cfg.tls;
    client_cfg.info = format!("typha-server {} (tier)", env!("CARGO_PKG_VERSION"));
    client_cfg.light_store = false;
    // Kinds this build does not know (a newer upstream's) are passed on too: this server's
    // clients that know them get them; the others get the version 1 view without them.
    client_cfg.relay_unknown_kinds = true;
    let client = match SyncClient::new(client_cfg, metrics) {
        Ok(c) => c,
        Err(e) => {
            warn!("upstream TLS settings cannot be used: {e}");
            return;
        }
    };
    let (tx, mut rx) = mpsc::unbounded_channel();
    let closed = out.clone();
    let forward = tokio::spawn(async move {
        while let Some(ev) = rx.recv().await {
            if out.send(ev).await.is_err() {
                return;
            }
        }
    });
    let watch_link = {
        let (link, freshness) = (client.position(), freshness.clone());
        tokio::spawn(async move {
            loop {
                if link.connected() {
                    freshness.confirmed();
                } else if freshness.failed(&"not connected to an upstream server") {
                    warn!("lost the upstream server; reconnecting");
                }
                tokio::time::sleep(CHECK_EVERY).await;
            }
        })
    };
    info!("feeding the cache from the upstream server");
    let _ = client
        .run(
            Forward { tx, freshness },
            async move { closed.closed().await },
        )
        .await;
    forward.abort();
    watch_link.abort();
}

/// Whether the upstream TLS files make a usable client configuration (readable PEM, a key
/// that matches); the reason if not.
pub fn check_tls(tls: &ClientTls) -> Result<(), typha_client::tls::TlsError> {
    typha_client::tls::client_config(tls).map(|_| ())
}
