//! Putting it together: the datastore syncer, the cache writer, the sync listener with its
//! connection limit, the HTTP listeners, and graceful shutdown.
//!
//! Shutdown (SIGTERM in the binary): stop accepting, then close connections one at a time,
//! spread over the shutdown timeout (at most one per second), each with a Goodbye, so clients
//! move to other replicas without a stampede; then stop.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus::Registry;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{debug, info, warn};
use typha_protocol::handshake::ServerOffer;
use typha_protocol::message::{Epoch, GoodbyeReason};

use crate::cache::Cache;
use crate::cache::writer::CacheWriter;
use crate::config::Config;
use crate::conn::{self, Ctx};
use crate::datastore::Datastore;
use crate::http::{self, Heartbeat, HttpState};
use crate::metrics::{DropReason, Metrics};
use crate::syncer::{SyncerEvent, run_syncer};
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
}

/// Open connections, each with a way to close it.
#[derive(Debug, Default)]
struct Registry_ {
    next: u64,
    conns: HashMap<u64, oneshot::Sender<GoodbyeReason>>,
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
    shutdown: watch::Sender<bool>,
    accept_task: JoinHandle<()>,
    background: Vec<JoinHandle<()>>,
    conns: Arc<Mutex<Registry_>>,
    conn_tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
    shutdown_timeout: Duration,
}

/// Starts a server over `datastore`.
pub async fn start(
    cfg: Config,
    datastore: Arc<dyn Datastore>,
) -> Result<RunningServer, StartError> {
    start_with(cfg, move |tx, _| Box::pin(run_syncer(datastore, tx))).await
}

/// Starts a server whose cache is fed by `feed` (given the cache writer's channel, and the
/// metrics registry for metrics of its own; it runs until the channel closes): [`run_syncer`]
/// over a datastore, or an upstream server ([`crate::syncer::upstream`]).
pub async fn start_with(
    cfg: Config,
    feed: impl FnOnce(mpsc::Sender<SyncerEvent>, &Registry) -> BoxFuture<'static, ()>,
) -> Result<RunningServer, StartError> {
    let registry = Registry::new();
    let metrics = Metrics::new(&registry);
    let (tx, rx) = mpsc::channel(1024);
    let feed = feed(tx, &registry);
    let registry = Arc::new(registry);
    let epoch = Epoch(rand::random());
    let (writer, cache) = CacheWriter::new(cfg.cache.clone(), epoch, metrics.clone());
    let mut background = vec![tokio::spawn(feed), tokio::spawn(writer.run(rx))];

    let tls = match &cfg.tls {
        Some(t) => Some((
            tokio_rustls::TlsAcceptor::from(tls::server_config(t)?),
            t.clone(),
        )),
        None => {
            warn!(
                "no TLS settings: serving plaintext. Set TYPHA_SERVERCERTFILE, TYPHA_SERVERKEYFILE, TYPHA_CAFILE and TYPHA_CLIENTCN or TYPHA_CLIENTURISAN for mutual TLS"
            );
            None
        }
    };
    let listener = TcpListener::bind(cfg.listen)
        .await
        .map_err(|source| StartError::Bind {
            addr: cfg.listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| StartError::Bind {
        addr: cfg.listen,
        source,
    })?;
    let accept_hb = Heartbeat::new();
    accept_hb.beat();

    let http_state = HttpState {
        cache: cache.clone(),
        accept: accept_hb.clone(),
        registry: registry.clone(),
        metrics: metrics.clone(),
    };
    let (shutdown, shutdown_rx) = watch::channel(false);
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
        let l = TcpListener::bind(a)
            .await
            .map_err(|source| StartError::Bind { addr: a, source })?;
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
        let mut stop = shutdown_rx.clone();
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
    ));
    let conns = Arc::new(Mutex::new(Registry_::default()));
    let conn_tasks = Arc::new(Mutex::new(Vec::new()));
    info!(%addr, epoch = %epoch, tls = tls.is_some(), "sync listener up");
    let accept_task = tokio::spawn(accept_loop(
        listener,
        tls,
        ctx,
        conns.clone(),
        conn_tasks.clone(),
        cfg.max_connections,
        accept_hb,
        shutdown_rx,
    ));
    Ok(RunningServer {
        addr,
        health_addr,
        metrics_addr,
        cache,
        metrics,
        registry,
        shutdown,
        accept_task,
        background,
        conns,
        conn_tasks,
        shutdown_timeout: cfg.shutdown_timeout,
    })
}

#[allow(clippy::too_many_arguments)]
async fn accept_loop(
    listener: TcpListener,
    tls: Option<(tokio_rustls::TlsAcceptor, tls::TlsConfig)>,
    ctx: Arc<Ctx>,
    conns: Arc<Mutex<Registry_>>,
    tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
    max_connections: usize,
    heartbeat: Arc<Heartbeat>,
    mut shutdown: watch::Receiver<bool>,
) {
    let tls = tls.map(Arc::new);
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
        let over_limit = lock(&conns).conns.len() >= max_connections;
        let (ctx, conns2, tls) = (ctx.clone(), conns.clone(), tls.clone());
        let task = tokio::spawn(async move {
            handle(tcp, peer, accepted, tls, ctx, conns2, over_limit).await;
        });
        let mut t = lock(&tasks);
        t.retain(|h| !h.is_finished());
        t.push(task);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Every critical section is a single map or vector operation: still consistent if a
    // panicking task poisoned the lock.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

async fn handle(
    tcp: TcpStream,
    peer: SocketAddr,
    accepted: Instant,
    tls: Option<Arc<(tokio_rustls::TlsAcceptor, tls::TlsConfig)>>,
    ctx: Arc<Ctx>,
    conns: Arc<Mutex<Registry_>>,
    over_limit: bool,
) {
    let m = ctx.cache.metrics.clone();
    match tls {
        None => serve_registered(tcp, peer, accepted, ctx, conns, over_limit).await,
        Some(t) => {
            let (acceptor, cfg) = &*t;
            let deadline = accepted + ctx.cfg.handshake_timeout;
            let stream = match tokio::time::timeout_at(deadline, acceptor.accept(tcp)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    m.dropped(DropReason::handshake);
                    info!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    m.dropped(DropReason::handshake);
                    info!(%peer, "TLS handshake timed out");
                    return;
                }
            };
            let identity = stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                .map(tls::peer_identity);
            match identity {
                Some(Ok(id)) if cfg.admits(&id) => {
                    debug!(%peer, cn = ?id.common_names, "client admitted");
                    serve_registered(stream, peer, accepted, ctx, conns, over_limit).await;
                }
                other => {
                    m.dropped(DropReason::tls_identity);
                    warn!(%peer, identity = ?other, "client certificate's CN/URI SAN is not allowed (TYPHA_CLIENTCN / TYPHA_CLIENTURISAN); closing");
                }
            }
        }
    }
}

async fn serve_registered<S>(
    mut stream: S,
    peer: SocketAddr,
    accepted: Instant,
    ctx: Arc<Ctx>,
    conns: Arc<Mutex<Registry_>>,
    over_limit: bool,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let m = ctx.cache.metrics.clone();
    if over_limit {
        use tokio::io::AsyncWriteExt;
        m.dropped(DropReason::too_many_connections);
        let g = typha_protocol::message::Goodbye {
            reason: GoodbyeReason::TooManyConnections,
            message: "this server is at its connection limit; try another".into(),
            redirect: ctx.redirect.clone(),
        };
        let frame = crate::fanout::encode(&typha_protocol::Message::Goodbye(g), false);
        let _ = tokio::time::timeout(Duration::from_secs(5), async {
            stream.write_all(&frame).await?;
            stream.shutdown().await
        })
        .await;
        info!(%peer, "refused: at the connection limit");
        return;
    }
    let (tx, rx) = oneshot::channel();
    let id = {
        let mut r = lock(&conns);
        r.next += 1;
        let id = r.next;
        r.conns.insert(id, tx);
        m.connections_active
            .set(i64::try_from(r.conns.len()).unwrap_or(i64::MAX));
        id
    };
    conn::task::serve(stream, peer, accepted, ctx, rx).await;
    let mut r = lock(&conns);
    r.conns.remove(&id);
    m.connections_active
        .set(i64::try_from(r.conns.len()).unwrap_or(i64::MAX));
}

impl RunningServer {
    /// Open connections.
    pub fn connections(&self) -> usize {
        lock(&self.conns).conns.len()
    }

    /// Graceful shutdown: stop accepting, close connections gradually over the shutdown
    /// timeout, stop everything else.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        let _ = self.accept_task.await;
        let start = Instant::now();
        let budget = self.shutdown_timeout.mul_f64(0.95);
        let n = lock(&self.conns).conns.len().max(1);
        let step = (budget / u32::try_from(n).unwrap_or(u32::MAX)).min(Duration::from_secs(1));
        info!(
            connections = n,
            ?step,
            "shutting down: closing connections gradually"
        );
        loop {
            let next = {
                let mut r = lock(&self.conns);
                let id = r.conns.keys().next().copied();
                id.and_then(|id| r.conns.remove(&id))
            };
            let Some(tx) = next else { break };
            let _ = tx.send(GoodbyeReason::Shutdown);
            self.metrics.dropped(DropReason::shutdown);
            if start.elapsed() >= self.shutdown_timeout {
                break;
            }
            tokio::time::sleep(step).await;
        }
        // Any connection still registered now is closed at once.
        for (_, tx) in lock(&self.conns).conns.drain() {
            let _ = tx.send(GoodbyeReason::Shutdown);
        }
        let tasks: Vec<_> = lock(&self.conn_tasks).drain(..).collect();
        for t in tasks {
            if tokio::time::timeout(Duration::from_secs(2), t)
                .await
                .is_err()
            {
                debug!("a connection did not finish in time");
            }
        }
        for t in self.background {
            t.abort();
        }
        info!("shut down");
    }
}
