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
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{Instrument, Span, debug, field, info, info_span, warn};
use typha_protocol::handshake::ServerOffer;
use typha_protocol::message::{Epoch, GoodbyeReason};

use crate::cache::Cache;
use crate::cache::writer::CacheWriter;
use crate::calico::libcalico::SyncerType;
use crate::config::Config;
use crate::conn::limit::{Slot, Slots};
use crate::conn::registry::ConnRegistry;
use crate::conn::stream::Stream;
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
use typha_protocol::calico::Protocol;

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
        let task = connection(tcp, peer, accepted, tls.clone(), ctx.clone(), slot);
        ctx.registry.spawn(task);
    }
}

/// One connection's task, from accept to close: registered in the table now, when it is
/// accepted. The slot and the table entry are held until the task ends, whatever the outcome.
///
/// A task's future is allocated once, for the connection's life, at the size of its largest
/// state. So what only one phase needs is boxed, allocated for that phase alone: TLS with
/// telling the protocol, a Calico client's whole life, and (inside [`conn::task::run`]) our
/// hello with the initial sync. What is left inline is our protocol's stream loop: one
/// allocation per connection for the task and the loop, not a task around a boxed loop.
fn connection(
    tcp: TcpStream,
    peer: SocketAddr,
    accepted: Instant,
    tls: Option<Arc<tls::ServerTls>>,
    ctx: Arc<Ctx>,
    slot: Option<Slot>,
) -> impl Future<Output = ()> + Send + 'static {
    let info = ctx
        .registry
        .register(peer, accepted, ctx.cache.metrics.clone());
    // Every line the connection logs says whose it is: its address now, its protocol once
    // told, its node and syncer type once its hello is in (`ConnInfo::hello`).
    let span = info_span!(
        "conn",
        %peer,
        protocol = field::Empty,
        node = field::Empty,
        syncer = field::Empty
    );
    // Made here, so the task's future captures only it, not the socket it takes: an async
    // block keeps room for what it captures even once moved out. (The address and the time of
    // accept are in `info`.)
    let admit = Box::pin(admit_and_open(tcp, accepted, tls, ctx.clone(), slot));
    let conn = async move {
        let Some((stream, protocol, prefix, slot)) = admit.await else {
            drop(info);
            return;
        };
        let rx = info.closable();
        match protocol {
            Protocol::Calico => {
                Box::pin(conn::calico::serve(
                    stream,
                    info.accepted(),
                    ctx,
                    rx,
                    &info,
                    prefix,
                ))
                .await
            }
            _ => {
                let ended = conn::task::run(stream, &ctx, rx, &info, prefix).await;
                conn::task::ended(&ctx, ended);
            }
        }
        drop(info);
        drop(slot);
    };
    conn.instrument(span)
}

/// TLS (with the client's identity) when configured, then telling the protocol and applying
/// the connection limits (`slot`: `None` when the connection is over the limit of all
/// connections); `None`: the connection is over (counted and logged).
async fn admit_and_open(
    tcp: TcpStream,
    accepted: Instant,
    tls: Option<Arc<tls::ServerTls>>,
    ctx: Arc<Ctx>,
    slot: Option<Slot>,
) -> Option<(Stream, Protocol, bytes::BytesMut, Slot)> {
    let mut stream = match tls {
        None => Stream::Plain(tcp),
        Some(t) => Stream::Tls(admit(tcp, accepted, &t, &ctx).await?),
    };
    let (protocol, prefix, slot) = open(&mut stream, accepted, &ctx, slot).await?;
    Some((stream, protocol, prefix, slot))
}

/// The TLS handshake (within the handshake deadline) and the client's identity; `None`: the
/// connection is over (counted and logged).
async fn admit(
    tcp: TcpStream,
    accepted: Instant,
    t: &tls::ServerTls,
    ctx: &Ctx,
) -> Option<Box<tokio_rustls::server::TlsStream<TcpStream>>> {
    let m = &ctx.cache.metrics;
    let acceptor = tokio_rustls::TlsAcceptor::from(t.current());
    let cfg = t.config();
    let deadline = accepted + ctx.cfg.handshake_timeout;
    let stream = match tokio::time::timeout_at(deadline, acceptor.accept(tcp)).await {
        // rustls' connection state is over a kilobyte: boxed, the futures that take the stream
        // on move a pointer, not a copy each of them would keep room for.
        Ok(Ok(s)) => Box::new(s),
        Ok(Err(e)) => {
            m.dropped(DropReason::handshake);
            info!(error = %e, "TLS handshake failed");
            return None;
        }
        Err(_) => {
            m.dropped(DropReason::handshake);
            info!("TLS handshake timed out");
            return None;
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
            debug!(cn = ?id.common_names, "client admitted");
            Some(stream)
        }
        other => {
            m.dropped(DropReason::tls_identity);
            warn!(identity = ?other, "client certificate's CN/URI SAN is not allowed (TYPHA_CLIENTCN / TYPHA_CLIENTURISAN); closing");
            None
        }
    }
}

/// Tells the protocol from the first bytes (within the handshake deadline) and applies the
/// connection limits: returns the protocol, the bytes read and the connection's place under
/// the limits; `None`: the connection is over (it ended first, or it was refused for a
/// connection limit; counted and logged).
async fn open<S>(
    stream: &mut S,
    accepted: Instant,
    ctx: &Ctx,
    slot: Option<Slot>,
) -> Option<(Protocol, bytes::BytesMut, Slot)>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let m = &ctx.cache.metrics;
    // Ours or Calico's Typha protocol, from the first bytes (within the handshake deadline).
    // Over the limit, a client of ours gets its Goodbye right after TLS, as before: wait only
    // briefly for a Calico hello (a Calico client is closed instead, as Typha does; it would
    // not understand a Goodbye).
    let mut deadline = accepted + ctx.cfg.handshake_timeout;
    if slot.is_none() {
        deadline = deadline.min(Instant::now() + Duration::from_secs(1));
    }
    let (protocol, prefix) = match conn::calico::sniff(stream, deadline).await {
        Ok(p) => p,
        Err(e) => {
            m.dropped(DropReason::handshake);
            info!(error = %e, "connection ended before its protocol was known");
            return None;
        }
    };
    Span::current().record("protocol", field::display(protocol_name(protocol)));
    let limits = ctx.limits();
    let refused = match slot {
        // Our protocol: one connection per node, held to its own limit too.
        Some(mut slot) if protocol == Protocol::Ours => {
            if slot.ours() {
                return Some((protocol, prefix, slot));
            }
            format!(
                "at the limit of {} connections of our own protocol",
                limits.ours
            )
        }
        Some(slot) => return Some((protocol, prefix, slot)),
        None => format!("at the limit of {} connections", limits.all),
    };
    use tokio::io::AsyncWriteExt;
    m.dropped(DropReason::too_many_connections);
    if protocol == Protocol::Ours {
        let g = typha_protocol::message::Goodbye {
            reason: GoodbyeReason::TooManyConnections,
            message: "this server is at its connection limit; try another".into(),
            redirect: ctx.suggest(),
        };
        let frame = crate::fanout::encode(&typha_protocol::Message::Goodbye(g), false);
        let _ = tokio::time::timeout(Duration::from_secs(5), stream.write_all(&frame)).await;
        let _ = tokio::time::timeout(Duration::from_secs(5), stream.shutdown()).await;
        info!("refused: {refused}");
        return None;
    }
    // Calico's protocol has no goodbye: its clients are just closed, as Typha does. So that an
    // operator can tell who, the hello (already on its way) is read within the same second.
    let hello = conn::calico::read_hello(stream, prefix, deadline).await;
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.shutdown()).await;
    let syncer = hello
        .as_ref()
        .and_then(|h| SyncerType::from_hello(&h.syncer_type));
    m.calico_refused(syncer);
    let span = Span::current();
    if let Some(h) = &hello {
        span.record("node", field::display(conn::info::bounded(&h.hostname)));
    }
    span.record(
        "syncer",
        field::display(syncer.map_or("unknown", SyncerType::as_str)),
    );
    if let Some(unlogged) = ctx.refusals.note() {
        warn!(
            limit = limits.all,
            refused_since_last_line = unlogged,
            "Calico client refused {refused}: closed without a word (Calico's protocol has no goodbye); it retries, another replica or later. Counted in typha_calico_connections_refused_total"
        );
    }
    None
}

/// A protocol's name in the connection's span (as `/status?nodes` names it).
fn protocol_name(p: Protocol) -> &'static str {
    match p {
        Protocol::Calico => "calico",
        _ => "typha-rs",
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
        let start = Instant::now();
        let budget = self.shutdown_timeout.mul_f64(0.95);
        let n = self.conns.closable();
        self.metrics
            .shutdown_connections_remaining
            .set(i64::try_from(n).unwrap_or(i64::MAX));
        // Typha's pacing: one connection every 0.95 x timeout / connections, at most 1 s apart.
        let step =
            (budget / u32::try_from(n.max(1)).unwrap_or(u32::MAX)).min(Duration::from_secs(1));
        info!(
            connections = n,
            ?step,
            "shutting down: closing connections gradually"
        );
        while self
            .conns
            .close_next(Close::because(GoodbyeReason::Shutdown))
        {
            let left = self.conns.closable();
            self.metrics.dropped(DropReason::shutdown);
            self.metrics
                .shutdown_connections_remaining
                .set(i64::try_from(left).unwrap_or(i64::MAX));
            if left == 0 || start.elapsed() >= self.shutdown_timeout {
                break;
            }
            tokio::time::sleep(step).await;
        }
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
