//! The client: finds a server, syncs, and keeps going.
//!
//! It never gives up and never takes the host process down: when a session ends, the consumer
//! keeps its state and hears ResyncInProgress, and the client tries the next server. Each round
//! resolves the servers again and shuffles them, tries each once, then waits (exponential
//! back-off with jitter, reset by any session that reached sync). A Goodbye that suggests other
//! servers is followed first.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tracing::{debug, info, warn};

use crate::config::ClientConfig;
use crate::conn::session;
use crate::discovery::resolve;
use crate::metrics::ClientMetrics;
use crate::position::Position;
use crate::store::{Store, SyncerCallbacks};
use crate::tls::{TlsError, TlsSource};

/// A client of typha servers.
#[derive(Debug)]
pub struct SyncClient {
    cfg: ClientConfig,
    tls: Option<TlsSource>,
    metrics: Arc<ClientMetrics>,
    position: Arc<Position>,
}

impl SyncClient {
    /// A client; TLS material is loaded now, so bad files fail here, not at the first connect.
    /// Later changes to the files are picked up at the next connect (see [`TlsSource`]).
    ///
    /// # Errors
    ///
    /// [`TlsError`] when the TLS files configured cannot be used (see [`tls::client_config`](crate::tls::client_config)).
    pub fn new(cfg: ClientConfig, metrics: Arc<ClientMetrics>) -> Result<Self, TlsError> {
        let tls = cfg.tls.clone().map(TlsSource::load).transpose()?;
        Ok(Self {
            cfg,
            tls,
            metrics,
            position: Arc::default(),
        })
    }

    /// The metrics.
    pub fn metrics(&self) -> &Arc<ClientMetrics> {
        &self.metrics
    }

    /// Where the store is while [`run`](Self::run) goes on: its digest and sequence number
    /// after each frame it applies (see [`Position`]). Take it before `run`, which consumes
    /// the client.
    pub fn position(&self) -> Arc<Position> {
        self.position.clone()
    }

    /// Runs until `shutdown` completes, feeding `cb`; returns the callbacks and the store.
    pub async fn run<C: SyncerCallbacks>(
        mut self,
        mut cb: C,
        shutdown: impl Future<Output = ()>,
    ) -> (C, Store) {
        let mut shutdown = std::pin::pin!(shutdown);
        let mut store = if self.cfg.light_store {
            Store::light()
        } else if self.cfg.relay_unknown_kinds {
            Store::relaying()
        } else {
            Store::new()
        };
        store.publish_to(self.position.clone());
        store.start(&mut cb);
        let mut backoff = self.cfg.backoff_min;
        let mut redirect: Vec<String> = Vec::new();
        let mut last_problem = String::new();
        let mut refresh = tokio::time::interval(Duration::from_secs(1));
        loop {
            let targets = if redirect.is_empty() {
                match self.cfg.discovery.discover(&self.cfg.hostname).await {
                    Ok(t) => t,
                    Err(e) => {
                        let msg = e.to_string();
                        if msg != last_problem {
                            warn!(error = %msg, "cannot find a typha server");
                            last_problem = msg;
                        }
                        Vec::new()
                    }
                }
            } else {
                let r = std::mem::take(&mut redirect);
                info!(servers = ?r, "following the server's suggestion");
                resolve(&r).await.unwrap_or_default()
            };
            let mut synced = false;
            for t in &targets {
                let tls = self.tls.as_mut().map(|t| t.current(&self.metrics));
                let end = {
                    let attempt = session(
                        t,
                        &self.cfg,
                        tls.as_ref(),
                        &mut store,
                        &mut cb,
                        &self.metrics,
                    );
                    let mut attempt = std::pin::pin!(attempt);
                    loop {
                        tokio::select! {
                            end = &mut attempt => break Some(end),
                            () = &mut shutdown => break None,
                            _ = refresh.tick() => self.metrics.refresh(),
                        }
                    }
                };
                let Some(end) = end else {
                    if store.is_connected() {
                        // Ours to end: not a cause worth counting.
                        self.metrics.connected.dec();
                        store.disconnected(&mut cb);
                    }
                    return (cb, store);
                };
                if store.is_connected() {
                    self.metrics.session_ended(end.error.cause());
                    store.disconnected(&mut cb);
                }
                let e = &end.error;
                if e.is_misconfiguration() {
                    let msg = e.to_string();
                    if msg != last_problem {
                        warn!(server = %t.addr, error = %msg, "cannot use this server: check the TLS and version settings");
                        last_problem = msg;
                    }
                } else if end.synced {
                    info!(server = %t.addr, reason = %e, "session ended; reconnecting");
                } else {
                    debug!(server = %t.addr, error = %e, "connection attempt failed");
                }
                redirect = e.redirect().to_vec();
                if end.synced {
                    synced = true;
                    last_problem.clear();
                }
                if synced || !redirect.is_empty() {
                    break;
                }
            }
            // After a working session, go again at once (a little jitter so a server's clients
            // do not all arrive at the same instant); otherwise back off.
            let delay = if synced || !redirect.is_empty() {
                backoff = self.cfg.backoff_min;
                jitter(self.cfg.backoff_min)
            } else {
                let d = jitter(backoff);
                backoff = (backoff * 2).min(self.cfg.backoff_max);
                d
            };
            let wait = tokio::time::sleep(delay);
            tokio::select! {
                () = wait => {}
                () = &mut shutdown => return (cb, store),
            }
        }
    }
}

/// Somewhere between half and all of `d`.
fn jitter(d: Duration) -> Duration {
    d.mul_f64(0.5 + rand::random::<f64>() * 0.5)
}
