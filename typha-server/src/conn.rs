//! One task per client connection.
//!
//! ```text
//! accept (TLS) ─▶ handshake (hello within the deadline) ─▶ initial sync ─▶ stream
//!                                                           │               │
//!                       deltas / digest buckets / snapshot ─┘   breadcrumbs, spans, status,
//!                                                                pings; reads pongs and acks
//! ```
//!
//! The task writes only shared, pre-encoded frames (the hello, a digest resync's begin marker
//! and pings are the only per-client encodes, all tiny). Several waiting frames go out in one
//! bounded write. A client that stops reading stalls only its own task: the writer and every
//! other connection go on, and it is dropped when a write stalls past the write timeout or its
//! position falls past the fall-behind limit.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{oneshot, watch};
use tokio::time::{Instant, sleep_until, timeout_at};
use tracing::{debug, info};
use typha_protocol::digest::BUCKETS;
use typha_protocol::frame::{FrameDecoder, Limits};
use typha_protocol::handshake::{ServerHandshake, ServerOffer, Session};
use typha_protocol::message::{
    Deltas, Features, Goodbye, GoodbyeReason, Message, Ping, Resume, Seq,
};
use typha_protocol::model::SyncStatus;

use crate::cache::{Breadcrumb, Cache};
use crate::fanout::{self, Step, encode, plan};
use crate::metrics::{DropReason, ResumeKind};

/// Connection settings (defaults are Calico Typha's).
#[derive(Debug, Clone)]
pub struct ConnConfig {
    /// TLS and hello must complete within this (TYPHA_SERVERHANDSHAKETIMEOUTSECS, 10 s).
    pub handshake_timeout: Duration,
    /// Ping period (TYPHA_SERVERPINGINTERVALSECS, 10 s, ±10 % jitter).
    pub ping_interval: Duration,
    /// No pong for this long closes the connection (TYPHA_SERVERPONGTIMEOUTSECS, 60 s).
    pub pong_timeout: Duration,
    /// A write that takes longer closes the connection (TYPHA_SERVERWRITETIMEOUTSECS, 120 s).
    pub write_timeout: Duration,
    /// A client whose next breadcrumb is this old is dropped (TYPHA_SERVERMAXFALLBEHINDSECS).
    pub max_fall_behind: Duration,
    /// Extra allowance after an initial sync (TYPHA_SERVERNEWCLIENTFALLBEHINDGRACEPERIOD).
    pub new_client_grace: Duration,
    /// Most bytes per write when several frames are waiting.
    pub max_write: usize,
    /// Most initial syncs written at once (TYPHA_MAXCONCURRENTSYNCS, 64; 0: no limit). When
    /// thousands of agents connect together, the others wait their turn (pinged, so they do
    /// not time out) instead of all sharing the CPU: handshakes keep finishing inside their
    /// timeout, each sync finishes sooner, and per-connection buffers are held by a bounded
    /// number of connections at a time.
    pub max_concurrent_syncs: usize,
}

impl Default for ConnConfig {
    fn default() -> Self {
        Self {
            handshake_timeout: Duration::from_secs(10),
            ping_interval: Duration::from_secs(10),
            pong_timeout: Duration::from_secs(60),
            write_timeout: Duration::from_secs(120),
            max_fall_behind: Duration::from_secs(300),
            new_client_grace: Duration::from_secs(300),
            max_write: 16 << 10,
            max_concurrent_syncs: 64,
        }
    }
}

impl ConnConfig {
    /// Applies Typha's rule: a pong timeout of at most twice the ping interval is too tight to
    /// be meant, so it becomes six times the interval.
    pub fn normalized(mut self) -> Self {
        if self.pong_timeout <= self.ping_interval * 2 {
            self.pong_timeout = self.ping_interval * 6;
        }
        self
    }
}

/// What every connection shares.
#[derive(Debug)]
pub struct Ctx {
    /// The cache.
    pub cache: Arc<Cache>,
    /// Settings.
    pub cfg: ConnConfig,
    /// What the handshake offers.
    pub offer: ServerOffer,
    /// Reference point for ping timestamps.
    pub started: Instant,
    /// Servers to suggest in a Goodbye.
    pub redirect: Vec<String>,
    /// Initial syncs in progress ([`ConnConfig::max_concurrent_syncs`]; `None`: no limit).
    pub sync_slots: Option<Arc<tokio::sync::Semaphore>>,
}

impl Ctx {
    /// Shared state for connections with these settings.
    pub fn new(
        cache: Arc<Cache>,
        cfg: ConnConfig,
        offer: ServerOffer,
        redirect: Vec<String>,
    ) -> Self {
        let sync_slots = (cfg.max_concurrent_syncs > 0)
            .then(|| Arc::new(tokio::sync::Semaphore::new(cfg.max_concurrent_syncs)));
        Self {
            cache,
            cfg: cfg.normalized(),
            offer,
            started: Instant::now(),
            redirect,
            sync_slots,
        }
    }
}

/// Why a connection ended.
#[derive(Debug, thiserror::Error)]
pub enum ConnError {
    /// The socket failed or the peer went away.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// A write did not complete in time.
    #[error("write stalled for {0:?}")]
    WriteTimeout(Duration),
    /// The peer broke the protocol.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The handshake failed.
    #[error("handshake: {0}")]
    Handshake(String),
    /// The server closed it (reason sent as a Goodbye).
    #[error("closed: {0}")]
    Closed(GoodbyeReason),
    /// The peer closed it.
    #[error("peer closed the connection")]
    PeerClosed,
}

/// Frames waiting to be written, and the writing.
struct Out<W> {
    w: W,
    pending: Vec<Bytes>,
    pending_len: usize,
    write_timeout: Duration,
    max_write: usize,
    ctx: Arc<Ctx>,
    /// Total time spent in [`Out::flush`]: while we write, we neither read pongs nor send pings.
    writing: Duration,
}

impl<W: AsyncWrite + Unpin> Out<W> {
    fn queue(&mut self, b: Bytes) -> Result<(), ConnError> {
        if b.is_empty() {
            return Err(ConnError::Protocol("a frame could not be encoded".into()));
        }
        self.pending_len += b.len();
        self.pending.push(b);
        Ok(())
    }

    /// Writes what is queued: a lone frame as it is, several coalesced into writes of at most
    /// `max_write` bytes (the copy is cheap next to a syscall per frame).
    async fn flush(&mut self) -> Result<(), ConnError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let start = Instant::now();
        let deadline = start + self.write_timeout;
        let frames = std::mem::take(&mut self.pending);
        let total = std::mem::take(&mut self.pending_len);
        let write = async {
            if let [one] = frames.as_slice() {
                self.w.write_all(one).await?;
            } else {
                let mut buf = Vec::with_capacity(total.min(self.max_write));
                for f in &frames {
                    if !buf.is_empty() && buf.len() + f.len() > self.max_write {
                        self.w.write_all(&buf).await?;
                        buf.clear();
                    }
                    if f.len() >= self.max_write {
                        self.w.write_all(f).await?;
                    } else {
                        buf.extend_from_slice(f);
                    }
                }
                if !buf.is_empty() {
                    self.w.write_all(&buf).await?;
                }
            }
            self.w.flush().await
        };
        let written = timeout_at(deadline, write).await;
        self.writing += start.elapsed();
        match written {
            Ok(r) => r?,
            Err(_) => return Err(ConnError::WriteTimeout(self.write_timeout)),
        }
        let m = &self.ctx.cache.metrics;
        m.bytes_sent.inc_by(total as u64);
        m.client_write_latency_secs
            .observe(start.elapsed().as_secs_f64());
        Ok(())
    }

    async fn goodbye(&mut self, reason: GoodbyeReason, message: &str) {
        let redirect = match reason {
            GoodbyeReason::Shutdown
            | GoodbyeReason::TooManyConnections
            | GoodbyeReason::Rebalance => self.ctx.redirect.clone(),
            _ => Vec::new(),
        };
        let g = Message::Goodbye(Goodbye {
            reason,
            message: message.into(),
            redirect,
        });
        self.pending.clear();
        self.pending_len = 0;
        if self.queue(encode(&g, false)).is_ok() {
            let _ = self.flush().await;
        }
        let _ = tokio::time::timeout(Duration::from_secs(1), self.w.shutdown()).await;
    }
}

/// Serves one connection until it ends; logs the outcome once.
pub async fn serve<S>(
    stream: S,
    peer: SocketAddr,
    accepted: Instant,
    ctx: Arc<Ctx>,
    close: oneshot::Receiver<GoodbyeReason>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let m = ctx.cache.metrics.clone();
    match run(stream, accepted, ctx, close).await {
        Ok(()) | Err(ConnError::PeerClosed) => debug!(%peer, "connection closed"),
        Err(e @ ConnError::Closed(GoodbyeReason::Shutdown)) => debug!(%peer, "{e}"),
        Err(e) => {
            let reason = match &e {
                ConnError::WriteTimeout(_) => Some(DropReason::write_timeout),
                ConnError::Protocol(_) => Some(DropReason::protocol_error),
                ConnError::Handshake(_) => Some(DropReason::handshake),
                ConnError::Closed(GoodbyeReason::PingTimeout) => Some(DropReason::ping_timeout),
                ConnError::Closed(GoodbyeReason::FellBehind) => Some(DropReason::fell_behind),
                _ => None,
            };
            if let Some(r) = reason {
                m.dropped(r);
            }
            info!(%peer, error = %e, "connection ended");
        }
    }
}

async fn run<S>(
    stream: S,
    accepted: Instant,
    ctx: Arc<Ctx>,
    mut close: oneshot::Receiver<GoodbyeReason>,
) -> Result<(), ConnError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut r, w) = tokio::io::split(stream);
    let mut out = Out {
        w,
        pending: Vec::new(),
        pending_len: 0,
        write_timeout: ctx.cfg.write_timeout,
        max_write: ctx.cfg.max_write,
        ctx: ctx.clone(),
        writing: Duration::ZERO,
    };
    let mut dec = FrameDecoder::new(Limits::SERVER_INBOUND);
    let mut rbuf = BytesMut::with_capacity(1024);

    // Handshake: the deadline counts from accept, so TLS and hello share it.
    let deadline = accepted + ctx.cfg.handshake_timeout;
    let mut hs = ServerHandshake::new(ctx.offer.clone(), accepted.into_std());
    let first = loop {
        match dec.decode(&mut rbuf) {
            Ok(Some(m)) => break m,
            Ok(None) => {}
            Err(e) => {
                out.goodbye(GoodbyeReason::ProtocolError, &e.to_string())
                    .await;
                return Err(ConnError::Handshake(e.to_string()));
            }
        }
        match timeout_at(deadline, r.read_buf(&mut rbuf)).await {
            Ok(Ok(0)) => return Err(ConnError::PeerClosed),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(e.into()),
            Err(_) => {
                let rej = hs.handle_timeout(Instant::now().into_std());
                let msg = rej
                    .as_ref()
                    .map_or_else(|| "handshake timed out".into(), |r| r.to_string());
                out.goodbye(GoodbyeReason::HandshakeTimeout, &msg).await;
                return Err(ConnError::Handshake(msg));
            }
        }
    };
    let accepted_hello = match hs.handle_message(first, Instant::now().into_std()) {
        Ok(a) => a,
        Err(rej) => {
            if let Some(g) = &rej.goodbye {
                out.goodbye(g.reason, &g.message).await;
            }
            return Err(ConnError::Handshake(rej.to_string()));
        }
    };
    let session = accepted_hello.session;
    debug!(host = %accepted_hello.hostname, client = %accepted_hello.client_info, version = %session.version, "client hello");
    out.queue(encode(&Message::ServerHello(accepted_hello.reply), false))?;
    // The hello's digest was the big part of the read buffer; do not keep its capacity.
    rbuf = BytesMut::from(&rbuf[..]);

    let compress = session.peer_decodes_zstd;
    if accepted_hello.resume.is_some() && !ctx.cache.ever_in_sync() {
        // A resuming client has state: comparing it with a partial cache would tell it to
        // delete what this server has not loaded yet. Hold it (answering pings) until the
        // cache is complete; a new client has nothing to lose and gets the partial state.
        out.flush().await?;
        wait_for_first_sync(&ctx, &mut out, &mut close).await?;
    }
    let slot = wait_for_sync_slot(&ctx, &mut out, &mut close).await?;
    let sync_started = Instant::now();
    let mut cursor = initial_sync(&ctx, &session, accepted_hello.resume.as_ref(), &mut out).await?;
    out.flush().await?;
    drop(slot);
    let m = &ctx.cache.metrics;
    m.client_snapshot_send_secs
        .observe(sync_started.elapsed().as_secs_f64());
    let grace_until = Instant::now() + ctx.cfg.new_client_grace;
    m.connections_streaming.inc();
    let _streaming = scopeguard(|| {
        ctx.cache.metrics.connections_streaming.dec();
    });

    let mut crumbs: watch::Receiver<Arc<Breadcrumb>> = ctx.cache.subscribe();
    let mut sent_status = cursor.status;
    let mut next_ping = Instant::now() + jitter(ctx.cfg.ping_interval);
    let mut last_heard = Instant::now();
    let mut ping_sent: Option<(u64, Instant)> = None;
    // The client is alive if it answers pings or acknowledges what it applied (acks come while
    // it works through a long catch-up, when our pings wait behind the data). The clock stops
    // while we are writing to it: a client that reads slowly but steadily is the write
    // timeout's business, not the pong timeout's.
    let mut writing_seen = out.writing;

    loop {
        // First time round this also sends breadcrumbs published while the initial sync was
        // being written (they came before the subscription and would not wake us).
        catch_up(
            &ctx,
            &mut cursor,
            &mut sent_status,
            compress,
            grace_until,
            &mut out,
        )
        .await?;
        out.flush().await?;
        tokio::select! {
            reason = &mut close => {
                let reason = reason.unwrap_or(GoodbyeReason::Shutdown);
                out.goodbye(reason, "server closing this connection").await;
                return Err(ConnError::Closed(reason));
            }
            changed = crumbs.changed() => {
                if changed.is_err() {
                    out.goodbye(GoodbyeReason::Shutdown, "cache closed").await;
                    return Err(ConnError::Closed(GoodbyeReason::Shutdown));
                }
            }
            n = r.read_buf(&mut rbuf) => {
                match n {
                    Ok(0) => return Err(ConnError::PeerClosed),
                    Ok(_) => {}
                    Err(e) => return Err(e.into()),
                }
                inbound(&ctx, &session, &mut dec, &mut rbuf, &mut out, &mut last_heard, &mut ping_sent).await?;
            }
            () = sleep_until(next_ping) => {
                let paused = out.writing.saturating_sub(writing_seen);
                writing_seen = out.writing;
                last_heard = (last_heard + paused).min(Instant::now());
                if last_heard.elapsed() > ctx.cfg.pong_timeout {
                    // While a long write to this client was in progress nothing was read: its
                    // pongs may be waiting in the socket. Judge only after reading them.
                    // (Bounded: a client that keeps sending cannot keep us here.)
                    for _ in 0..64 {
                        let Ok(n) = tokio::time::timeout(Duration::ZERO, r.read_buf(&mut rbuf)).await else {
                            break;
                        };
                        match n {
                            Ok(0) => return Err(ConnError::PeerClosed),
                            Ok(_) => {}
                            Err(e) => return Err(e.into()),
                        }
                        inbound(&ctx, &session, &mut dec, &mut rbuf, &mut out, &mut last_heard, &mut ping_sent).await?;
                    }
                }
                let now = Instant::now();
                if now.duration_since(last_heard) > ctx.cfg.pong_timeout {
                    out.goodbye(GoodbyeReason::PingTimeout, "no pong in time").await;
                    return Err(ConnError::Closed(GoodbyeReason::PingTimeout));
                }
                let ts = u64::try_from(now.duration_since(ctx.started).as_micros()).unwrap_or(u64::MAX);
                out.queue(encode(&Message::Ping(Ping { timestamp_micros: ts }), false))?;
                if ping_sent.is_none() {
                    ping_sent = Some((ts, now));
                }
                next_ping = now + jitter(ctx.cfg.ping_interval);
            }
        }
    }
}

/// Handles every complete message in `rbuf`: pongs and acks; a goodbye or anything a client
/// may not send ends the connection.
async fn inbound<W: AsyncWrite + Unpin>(
    ctx: &Arc<Ctx>,
    session: &Session,
    dec: &mut FrameDecoder,
    rbuf: &mut BytesMut,
    out: &mut Out<W>,
    last_heard: &mut Instant,
    ping_sent: &mut Option<(u64, Instant)>,
) -> Result<(), ConnError> {
    loop {
        let msg = match dec.decode(rbuf) {
            Ok(Some(msg)) => msg,
            Ok(None) => return Ok(()),
            Err(e) => {
                out.goodbye(GoodbyeReason::ProtocolError, &e.to_string())
                    .await;
                return Err(ConnError::Protocol(e.to_string()));
            }
        };
        if !session.may_receive(msg.message_type()) {
            let why = format!("unexpected {} from a client", msg.message_type());
            out.goodbye(GoodbyeReason::ProtocolError, &why).await;
            return Err(ConnError::Protocol(why));
        }
        match msg {
            Message::Pong(p) => {
                *last_heard = Instant::now();
                if let Some((_, at)) = ping_sent.take_if(|(ts, _)| *ts == p.ping_timestamp_micros) {
                    ctx.cache
                        .metrics
                        .ping_latency
                        .observe(at.elapsed().as_secs_f64());
                }
            }
            Message::Ack(a) => {
                // A client acknowledging what it applied is alive and reading.
                *last_heard = Instant::now();
                if let Some(c) = ctx.cache.get(a.seq) {
                    ctx.cache
                        .metrics
                        .client_ack_lag_secs
                        .observe(c.created.elapsed().as_secs_f64());
                }
            }
            Message::Goodbye(g) => {
                debug!(reason = %g.reason, message = %g.message, "client said goodbye");
                return Err(ConnError::PeerClosed);
            }
            other => {
                let why = format!("unexpected {} from a client", other.message_type());
                out.goodbye(GoodbyeReason::ProtocolError, &why).await;
                return Err(ConnError::Protocol(why));
            }
        }
    }
}

/// Waits for `until`, pinging the client meanwhile (so its read timeout does not fire); a
/// close request ends the wait with a Goodbye.
async fn pinging<W: AsyncWrite + Unpin, T>(
    ctx: &Arc<Ctx>,
    out: &mut Out<W>,
    close: &mut oneshot::Receiver<GoodbyeReason>,
    until: impl std::future::Future<Output = T>,
) -> Result<T, ConnError> {
    tokio::pin!(until);
    loop {
        let ping = Instant::now() + jitter(ctx.cfg.ping_interval);
        tokio::select! {
            v = &mut until => return Ok(v),
            reason = &mut *close => {
                let reason = reason.unwrap_or(GoodbyeReason::Shutdown);
                out.goodbye(reason, "server closing this connection").await;
                return Err(ConnError::Closed(reason));
            }
            () = sleep_until(ping) => {
                let ts = u64::try_from(ping.duration_since(ctx.started).as_micros()).unwrap_or(u64::MAX);
                out.queue(encode(&Message::Ping(Ping { timestamp_micros: ts }), false))?;
                out.flush().await?;
            }
        }
    }
}

/// Waits for a turn to write an initial sync, pinging the client meanwhile; the turn lasts
/// as long as the permit is held.
async fn wait_for_sync_slot<W: AsyncWrite + Unpin>(
    ctx: &Arc<Ctx>,
    out: &mut Out<W>,
    close: &mut oneshot::Receiver<GoodbyeReason>,
) -> Result<Option<tokio::sync::OwnedSemaphorePermit>, ConnError> {
    let Some(slots) = &ctx.sync_slots else {
        return Ok(None);
    };
    if let Ok(p) = slots.clone().try_acquire_owned() {
        return Ok(Some(p));
    }
    ctx.cache.metrics.syncs_waiting.inc();
    let _waiting = scopeguard(|| {
        ctx.cache.metrics.syncs_waiting.dec();
    });
    // The semaphore is never closed.
    let permit = pinging(ctx, out, close, slots.clone().acquire_owned()).await?;
    Ok(permit.ok())
}

/// Waits until the cache has been in sync once, pinging the client meanwhile.
async fn wait_for_first_sync<W: AsyncWrite + Unpin>(
    ctx: &Arc<Ctx>,
    out: &mut Out<W>,
    close: &mut oneshot::Receiver<GoodbyeReason>,
) -> Result<(), ConnError> {
    let mut crumbs = ctx.cache.subscribe();
    let in_sync = async {
        while !ctx.cache.ever_in_sync() {
            if crumbs.changed().await.is_err() {
                return false;
            }
        }
        true
    };
    if pinging(ctx, out, close, in_sync).await? {
        Ok(())
    } else {
        Err(ConnError::Closed(GoodbyeReason::Shutdown))
    }
}

/// Brings a newly connected client to a position in the cache: by deltas, by digest buckets,
/// or by full snapshot. Returns the breadcrumb the client is now at.
async fn initial_sync<W: AsyncWrite + Unpin>(
    ctx: &Arc<Ctx>,
    session: &Session,
    resume: Option<&Resume>,
    out: &mut Out<W>,
) -> Result<Arc<Breadcrumb>, ConnError> {
    let cache = &ctx.cache;
    let m = &cache.metrics;
    let compress = session.peer_decodes_zstd;
    // Same epoch, still in the window: only the missed deltas.
    if session.features.contains(Features::DELTA_RESUME)
        && let Some(at) = resume
            .and_then(|r| r.cursor)
            .filter(|c| c.epoch == cache.epoch())
            .and_then(|c| cache.get(c.seq))
    {
        // Confirms the position and its digest; the catch-up follows from the stream loop.
        let msg = Message::Deltas(Deltas {
            from_seq: at.seq,
            seq: at.seq,
            digest: at.digest,
            updates: vec![],
        });
        out.queue(encode(&msg, compress))?;
        out.queue(fanout::status_frame(at.status))?;
        m.resumed(ResumeKind::deltas);
        return Ok(at);
    }
    // A digest: only the buckets that differ, unless most do.
    if session.features.contains(Features::BUCKET_RESYNC)
        && let Some(theirs) = resume.and_then(|r| r.digest.as_ref())
    {
        let bf = cache.snapshots.buckets(cache, compress).await;
        let diff = theirs.diff(&bf.digest);
        if diff.len() <= BUCKETS / 2 {
            out.queue(bf.begin(&diff, compress))?;
            for b in diff.ids() {
                for f in bf.buckets.get(usize::from(b.0)).into_iter().flatten() {
                    out.queue(f.clone())?;
                }
                if out.pending_len >= ctx.cfg.max_write * 4 {
                    out.flush().await?;
                }
            }
            out.queue(bf.end.clone())?;
            out.queue(fanout::status_frame(bf.crumb.status))?;
            m.resumed(ResumeKind::digest);
            return Ok(bf.crumb.clone());
        }
    }
    let snap = cache.snapshots.full(cache, compress).await;
    for f in &snap.frames {
        out.queue(f.clone())?;
        if out.pending_len >= ctx.cfg.max_write * 4 {
            out.flush().await?;
        }
    }
    out.queue(fanout::status_frame(snap.crumb.status))?;
    m.resumed(ResumeKind::snapshot);
    Ok(snap.crumb.clone())
}

/// Sends what the client has not seen, as few shared frames as the history allows. A client
/// whose position has left the window gets a fresh snapshot in-band.
async fn catch_up<W: AsyncWrite + Unpin>(
    ctx: &Arc<Ctx>,
    cursor: &mut Arc<Breadcrumb>,
    sent_status: &mut SyncStatus,
    compress: bool,
    grace_until: Instant,
    out: &mut Out<W>,
) -> Result<(), ConnError> {
    let cache = &ctx.cache;
    let latest = cache.latest();
    if latest.seq <= cursor.seq {
        return Ok(());
    }
    let Some(next) = cache.get(Seq(cursor.seq.0 + 1)) else {
        // Fell out of the window: resnapshot (the client replaces its state).
        let snap = cache.snapshots.full(cache, compress).await;
        for f in &snap.frames {
            out.queue(f.clone())?;
            if out.pending_len >= ctx.cfg.max_write * 4 {
                out.flush().await?;
            }
        }
        *cursor = snap.crumb.clone();
        out.queue(fanout::status_frame(cursor.status))?;
        *sent_status = cursor.status;
        return Ok(());
    };
    let now = Instant::now();
    let allowance = ctx.cfg.max_fall_behind
        + if now < grace_until {
            ctx.cfg.new_client_grace
        } else {
            Duration::ZERO
        };
    if now.duration_since(next.created) > allowance {
        out.goodbye(GoodbyeReason::FellBehind, "fell too far behind")
            .await;
        return Err(ConnError::Closed(GoodbyeReason::FellBehind));
    }
    let m = &cache.metrics;
    // Bound one round so reads and pings are served between rounds.
    let mut budget = 256;
    for step in plan(cursor.seq, latest.seq) {
        if budget == 0 || out.pending_len >= ctx.cfg.max_write * 8 {
            break;
        }
        budget -= 1;
        let span = match step {
            Step::Crumb(_) => None,
            Step::Span { end, stride } => cache
                .get(end)
                .and_then(|c| fanout::span_frame(cache, &c, stride, compress).map(|f| (f, c))),
        };
        let spanned = span.is_some();
        let (frame, reached) = match span {
            Some(x) => x,
            // A single breadcrumb; also the fallback when part of a span left the window.
            None => match cache.get(Seq(cursor.seq.0 + 1)) {
                Some(c) => (fanout::delta_frame(&c, compress, m), c),
                None => break,
            },
        };
        out.queue(frame)?;
        *cursor = reached;
        send_status(cursor, sent_status, out)?;
        if matches!(step, Step::Span { .. }) && !spanned {
            // The plan assumed a span: re-plan from the new position next round.
            break;
        }
    }
    m.client_latency_secs
        .observe(cursor.created.elapsed().as_secs_f64());
    Ok(())
}

fn send_status<W: AsyncWrite + Unpin>(
    cursor: &Breadcrumb,
    sent: &mut SyncStatus,
    out: &mut Out<W>,
) -> Result<(), ConnError> {
    if cursor.status != *sent {
        out.queue(fanout::status_frame(cursor.status))?;
        *sent = cursor.status;
    }
    Ok(())
}

/// ±10 % jitter, as Typha does, so pings from thousands of connections do not line up.
fn jitter(d: Duration) -> Duration {
    let f = 0.9 + rand::random::<f64>() * 0.2;
    d.mul_f64(f)
}

/// Runs `f` when dropped.
fn scopeguard<F: FnOnce()>(f: F) -> impl Drop {
    struct G<F: FnOnce()>(Option<F>);
    impl<F: FnOnce()> Drop for G<F> {
        fn drop(&mut self) {
            if let Some(f) = self.0.take() {
                f();
            }
        }
    }
    G(Some(f))
}
