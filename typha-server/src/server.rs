//! Putting it together: the datastore syncer, the cache writer, the sync listener with its
//! connection limit, the HTTP listeners, and graceful shutdown.
//!
//! Shutdown (SIGTERM in the binary): stop accepting, then close connections one at a time,
//! spread over the shutdown timeout (at most one per second), each with a Goodbye, so clients
//! move to other replicas without a stampede; then stop.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use prometheus::Registry;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{info, warn};
use typha_protocol::handshake::ServerOffer;
use typha_protocol::message::{Epoch, GoodbyeReason};

use crate::cache::Cache;
use crate::cache::writer::CacheWriter;
use crate::config::Config;
use crate::conn::limit::Slots;
use crate::conn::registry::ConnRegistry;
use crate::conn::{self, Close, Ctx};
use crate::datastore::Datastore;
use crate::governor;
use crate::governor::share::Limits;
use crate::http::{self, HttpState};
use crate::liveness::Heartbeat;
use crate::metrics::{DropReason, Metrics};
use crate::syncer::freshness::Freshness;
use crate::syncer::{FeedContext, run_syncer};
use crate::tls;
use futures_util::future::BoxFuture;

/// A server that failed to start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A listener could not bind.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// TLS material is unusable.
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    /// Connection balancing needs a Kubernetes client, and there is no usable configuration.
    #[error(
        "TYPHA_CONNECTIONREBALANCINGMODE=kubernetes: no usable Kubernetes client configuration (TYPHA_K8SAPIENDPOINT, in-cluster or kubeconfig): {0}"
    )]
    Governor(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// How long a shutdown waits, after the drain, for the connections still finishing, all of
/// them together: shutdown takes at most `TYPHA_SHUTDOWNTIMEOUTSECS` and this.
pub const SHUTDOWN_LEFTOVER_WAIT: Duration = Duration::from_secs(2);

/// The governor's hold on this replica's connections.
struct Control {
    ctx: Arc<Ctx>,
    draining: Arc<AtomicBool>,
}

impl governor::Connections for Control {
    fn held(&self) -> usize {
        self.ctx.registry.slots.held()
    }

    fn set_limits(&self, limits: Limits, why: governor::LimitReason) {
        let slots = &self.ctx.registry.slots;
        if slots.set(limits) {
            info!(
                all = limits.all,
                typha_rs = limits.ours,
                held = slots.held(),
                replicas = why.replicas,
                nodes = why.nodes,
                rule = why.rule,
                "connection limits: every connection (Calico's clients count one per syncer type), and our own protocol's (one per node)"
            );
        }
    }

    fn move_one(&self) -> bool {
        // Where to: the ranking, when the connection writes its Goodbye.
        let moved = self
            .ctx
            .registry
            .close_random(Close::because(GoodbyeReason::Rebalance));
        if moved {
            self.ctx.cache.metrics.dropped(DropReason::rebalance);
        }
        moved
    }

    fn draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    fn set_ranking(&self, ranking: governor::share::Ranking) {
        *self.ctx.ranking.lock().unwrap_or_else(|p| p.into_inner()) = ranking;
    }
}

/// A running server.
#[derive(Debug)]
pub struct RunningServer {
    /// The sync listener's address.
    pub addr: SocketAddr,
    /// The health listener's address.
    pub health_addr: Option<SocketAddr>,
    /// The metrics listener's address.
    pub metrics_addr: Option<SocketAddr>,
    /// The cache (read side).
    pub cache: Arc<Cache>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// The metrics registry.
    pub registry: Arc<Registry>,
    /// Whether the datastore view is current.
    pub freshness: Arc<Freshness>,
    shutdown: watch::Sender<bool>,
    http_stop: watch::Sender<bool>,
    draining: Arc<AtomicBool>,
    accept_task: JoinHandle<()>,
    background: Vec<JoinHandle<()>>,
    conns: Arc<ConnRegistry>,
    shutdown_timeout: Duration,
}

/// Starts a server over `datastore`.
pub async fn start(
    mut cfg: Config,
    datastore: Arc<dyn Datastore>,
) -> Result<RunningServer, StartError> {
    cfg.cache.calico_driver = datastore.calico_driver();
    start_with(cfg, move |f: FeedContext<'_>| {
        Box::pin(run_syncer(datastore, f.tx, f.freshness))
    })
    .await
}

/// Starts a server whose cache is fed by `feed`: [`run_syncer`] over a datastore, or an
/// upstream server ([`crate::syncer::upstream::feed`]).
pub async fn start_with(
    cfg: Config,
    feed: impl for<'a> FnOnce(FeedContext<'a>) -> BoxFuture<'static, ()>,
) -> Result<RunningServer, StartError> {
    let registry = Registry::new();
    let metrics = Metrics::new(&registry);
    let (tx, rx) = mpsc::channel(1024);
    let freshness = Freshness::new(cfg.stale_threshold);
    let feed = feed(FeedContext {
        tx,
        registry: &registry,
        freshness: freshness.clone(),
    });
    let registry = Arc::new(registry);
    let epoch = Epoch(rand::random());
    let (writer, cache) = CacheWriter::new(cfg.cache.clone(), epoch, metrics.clone());
    let writer_hb = Heartbeat::new();
    let mut background = vec![
        tokio::spawn(feed),
        tokio::spawn(writer.run(rx, writer_hb.clone())),
        tokio::spawn(crate::cache::herald::run(cache.clone())),
        tokio::spawn(freshness.clone().monitor({
            let m = metrics.clone();
            move |v| {
                m.upstream_connected.set(i64::from(v.connected));
                m.upstream_stale.set(i64::from(v.stale));
                m.upstream_confirmed_age
                    .set(v.confirmed_age.map_or(0.0, |a| a.as_secs_f64()));
            }
        })),
    ];

    let tls = match &cfg.tls {
        Some(t) => {
            let source = Arc::new(tls::ServerTls::load(t.clone())?);
            let (s2, m) = (source.clone(), metrics.clone());
            background.push(tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_secs(1));
                loop {
                    tick.tick().await;
                    let [ok, failed] = &m.tls_reloads;
                    match s2.reload() {
                        tls::Reloaded::Unchanged => {}
                        tls::Reloaded::Reloaded => ok.inc(),
                        tls::Reloaded::Failed => failed.inc(),
                    }
                    let (leaf, ca) = s2.expiry();
                    let [leaf_gauge, ca_gauge] = &m.tls_expiry;
                    leaf_gauge.set(leaf.unwrap_or(0) as f64);
                    ca_gauge.set(ca.unwrap_or(0) as f64);
                }
            }));
            Some(source)
        }
        None => {
            warn!(
                "no TLS settings: serving plaintext. Set TYPHA_SERVERCERTFILE, TYPHA_SERVERKEYFILE, TYPHA_CAFILE and TYPHA_CLIENTCN or TYPHA_CLIENTURISAN for mutual TLS"
            );
            None
        }
    };
    let listener = crate::listen::bind(cfg.listen).map_err(|source| StartError::Bind {
        addr: cfg.listen,
        source,
    })?;
    let addr = listener.local_addr().map_err(|source| StartError::Bind {
        addr: cfg.listen,
        source,
    })?;
    let accept_hb = Heartbeat::new();
    accept_hb.beat();

    let draining = Arc::new(AtomicBool::new(false));
    // Without balancing (or until the governor's first poll) both limits are the upper one.
    let conns = ConnRegistry::new(Slots::new(
        Limits::flat(cfg.max_connections),
        metrics.clone(),
    ));
    let http_state = HttpState {
        conns: conns.clone(),
        cache: cache.clone(),
        accept: accept_hb.clone(),
        writer: writer_hb,
        registry: registry.clone(),
        metrics: metrics.clone(),
        draining: draining.clone(),
        freshness: freshness.clone(),
        readiness_fails_when_stale: cfg.readiness_fails_when_stale,
    };
    let (shutdown, shutdown_rx) = watch::channel(false);
    // The HTTP listeners stop last, when the drain is over: liveness and metrics answer
    // throughout it.
    let (http_stop, http_stop_rx) = watch::channel(false);
    let mut health_addr = None;
    let mut metrics_addr = None;
    let mut http_listeners = Vec::new();
    match (cfg.health, cfg.metrics) {
        (Some(h), Some(m)) if h == m => http_listeners.push((h, true, true)),
        (h, m) => {
            http_listeners.extend(h.map(|a| (a, true, false)));
            http_listeners.extend(m.map(|a| (a, false, true)));
        }
    }
    for (a, health, metrics_on) in http_listeners {
        let l = crate::listen::bind(a).map_err(|source| StartError::Bind { addr: a, source })?;
        let bound = l
            .local_addr()
            .map_err(|source| StartError::Bind { addr: a, source })?;
        if health {
            health_addr = Some(bound);
        }
        if metrics_on {
            metrics_addr = Some(bound);
        }
        let app = http::router(http_state.clone(), health, metrics_on);
        let mut stop = http_stop_rx.clone();
        background.push(tokio::spawn(async move {
            let serve = axum::serve(l, app).with_graceful_shutdown(async move {
                let _ = stop.wait_for(|s| *s).await;
            });
            if let Err(e) = serve.await {
                warn!(addr = %bound, error = %e, "HTTP listener failed");
            }
        }));
        info!(addr = %bound, health, metrics = metrics_on, "HTTP listening");
    }

    let mut offer = ServerOffer::new(epoch);
    offer.timeout = cfg.conn.handshake_timeout;
    offer.info = format!("typha-server/{}", env!("CARGO_PKG_VERSION"));
    let ctx = Arc::new(Ctx::new(
        cache.clone(),
        cfg.conn.clone(),
        offer,
        cfg.redirect.clone(),
        freshness.clone(),
        conns.clone(),
    ));
    if let Some(g) = &cfg.governor {
        let client = crate::datastore::open::kube_client(g.api_endpoint.as_deref())
            .await
            .map_err(StartError::Governor)?;
        let control = Arc::new(Control {
            ctx: ctx.clone(),
            draining: draining.clone(),
        });
        info!(service = %format!("{}/{}", g.namespace, g.service), "balancing connections across the Service's replicas");
        background.push(tokio::spawn(governor::run(
            g.clone(),
            client,
            cache.clone(),
            control,
            epoch,
        )));
    }
    info!(%addr, epoch = %epoch, tls = tls.is_some(), "sync listener up");
    let accept_task = tokio::spawn(accept_loop(listener, tls, ctx, accept_hb, shutdown_rx));
    Ok(RunningServer {
        addr,
        health_addr,
        metrics_addr,
        cache,
        metrics,
        registry,
        freshness,
        shutdown,
        http_stop,
        draining,
        accept_task,
        background,
        conns,
        shutdown_timeout: cfg.shutdown_timeout,
    })
}

async fn accept_loop(
    listener: TcpListener,
    tls: Option<Arc<tls::ServerTls>>,
    ctx: Arc<Ctx>,
    heartbeat: Arc<Heartbeat>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        heartbeat.beat();
        let (tcp, peer) = tokio::select! {
            () = async { let _ = shutdown.wait_for(|s| *s).await; } => return,
            () = tokio::time::sleep(Duration::from_secs(1)) => continue,
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    // Typically out of file descriptors: back off rather than spin.
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let accepted = Instant::now();
        let _ = tcp.set_nodelay(true);
        ctx.cache.metrics.connections_accepted.inc();
        let slot = ctx.registry.slots.take();
        let task = conn::admit::connection(tcp, peer, accepted, tls.clone(), ctx.clone(), slot);
        ctx.registry.spawn(task);
    }
}

impl RunningServer {
    /// Open connections.
    pub fn connections(&self) -> usize {
        self.conns.closable()
    }

    /// Graceful shutdown: readiness fails at once, accepting stops, connections are closed
    /// one at a time (each with a Goodbye) spread over the shutdown timeout, then everything
    /// else stops; liveness and `/metrics` answer until then. It takes at most the shutdown
    /// timeout and [`SHUTDOWN_LEFTOVER_WAIT`], however many connections are stuck.
    pub async fn shutdown(self) {
        self.draining.store(true, Ordering::Release);

        self.metrics.shutdown_draining.set(1);
        let _ = self.shutdown.send(true);
        let _ = self.accept_task.await;
        let n = self.conns.closable();
        self.metrics
            .shutdown_connections_remaining
            .set(i64::try_from(n).unwrap_or(i64::MAX));
        let metrics = &self.metrics;
        self.conns
            .drain(self.shutdown_timeout, |left| {
                metrics.dropped(DropReason::shutdown);
                metrics
                    .shutdown_connections_remaining
                    .set(i64::try_from(left).unwrap_or(i64::MAX));
            })
            .await;
        // Any connection still registered now is closed at once.
        // (Connections registered after the drain began, still in their handshake then, are
        // among them.)
        let late = self
            .conns
            .close_all(&Close::because(GoodbyeReason::Shutdown));
        for _ in 0..late {
            self.metrics.dropped(DropReason::shutdown);
        }
        // One bound for every connection still finishing (writing its Goodbye, or stuck in a
        // handshake or a write to a client that stopped reading): what is not done by then is
        // aborted, however many there are.
        let finished = self.conns.finish(SHUTDOWN_LEFTOVER_WAIT).await;
        if finished.aborted > 0 {
            info!(
                left = finished.aborted,
                "connections still finishing {SHUTDOWN_LEFTOVER_WAIT:?} after the drain: closed"
            );
        }
        self.metrics.shutdown_connections_remaining.set(0);
        let _ = self.http_stop.send(true);
        for t in self.background {
            t.abort();
        }
        info!("shut down");
    }
}
