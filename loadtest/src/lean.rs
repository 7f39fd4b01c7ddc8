//! Lean nodes: the swarm's cheap simulated nodes. Each one is a real connection to the server
//! (TCP, mutual TLS, our handshake through `typha_protocol::handshake`, pongs for pings, acks
//! as often as a typha-client sends them, reconnects with its cursor) that proves it received
//! every update without paying to decode it: it splits frames off its stream in place, takes
//! each Deltas and snapshot-chunk frame's header facts from the swarm-wide cache (`facts`:
//! decoded in full once per distinct frame per swarm process, hashed by every other node), and
//! checks its own sequence chain, snapshot count and final digest (`chain`).
//!
//! What a lean node does not do: measure latency (the sample nodes, real typha-clients, do),
//! keep values, or recompute a digest from them (the full-store sample nodes do). Small
//! messages (pings, status, snapshot markers) are decoded in place without a copy.

pub(crate) mod chain;
pub(crate) mod facts;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::{Instant, timeout};
use typha_client::ResumeKind;
use typha_client::metrics::{ClientMetrics, EndCause};
use typha_protocol::frame::{FLAG_ZSTD, FrameDecoder, FrameEncoder, HEADER_LEN, Limits};
use typha_protocol::handshake::{ClientHandshake, ClientOffer, Session};
use typha_protocol::message::{Ack, Message, MessageType, Pong, SnapshotScope};
use typha_protocol::sample::Rng;

use self::chain::{Chain, ChainError, Resumed};
use self::facts::{FactCache, Facts};
use crate::raw::Io;
use crate::tally::Shared;

/// What every lean node of a swarm shares.
pub(crate) struct Ctx {
    /// Servers: the name to dial (for TLS) and its address.
    pub(crate) servers: Vec<(String, SocketAddr)>,
    pub(crate) tls: Option<Arc<rustls::ClientConfig>>,
    pub(crate) facts: FactCache,
    pub(crate) shared: Arc<Shared>,
    pub(crate) metrics: Arc<ClientMetrics>,
}

/// As a typha-client's defaults.
const READ_TIMEOUT: Duration = Duration::from_secs(30);
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
const DIAL_TIMEOUT: Duration = Duration::from_secs(10);
const ACK_INTERVAL: Duration = Duration::from_secs(1);
const BACKOFF_MIN: Duration = Duration::from_millis(200);
const BACKOFF_MAX: Duration = Duration::from_secs(10);

/// A lean node's digest while it runs (the server's at its position; see
/// [`Chain::digest`]), updated after every frame and session, for the swarm's `digests`.
#[derive(Debug, Default)]
pub(crate) struct Live {
    digest: AtomicU64,
    known: AtomicBool,
}

impl Live {
    fn set(&self, d: Option<u64>) {
        if let Some(d) = d {
            self.digest.store(d, Ordering::Relaxed);
        }
        self.known.store(d.is_some(), Ordering::Release);
    }

    /// The digest now; `None` while the node has no position.
    pub(crate) fn digest(&self) -> Option<u64> {
        self.known
            .load(Ordering::Acquire)
            .then(|| self.digest.load(Ordering::Relaxed))
    }
}

/// How a lean node ended: its chain (digest and position) and how many of its sessions found
/// the stream inconsistent.
pub(crate) struct LeanEnd {
    pub(crate) chain: Chain,
    pub(crate) inconsistent: u64,
}

/// Why a session ended.
enum End {
    /// The stream disagreed with the chain.
    Inconsistent(ChainError),
    /// The server said goodbye and named other servers to try, best first (balancing
    /// moving the node, or a drain): the node goes to the first it knows, as a typha-client
    /// follows the suggestion.
    Redirected(Vec<String>),
    /// Anything else (lost connection, goodbye without a suggestion, timeout, bad frame).
    Other(anyhow::Error),
}

impl From<anyhow::Error> for End {
    fn from(e: anyhow::Error) -> Self {
        End::Other(e)
    }
}

impl From<ChainError> for End {
    fn from(e: ChainError) -> Self {
        End::Inconsistent(e)
    }
}

impl From<std::io::Error> for End {
    fn from(e: std::io::Error) -> Self {
        End::Other(e.into())
    }
}

/// Runs one lean node (`index` spreads nodes over the servers) until `stop` turns true.
pub(crate) async fn node(
    ctx: Arc<Ctx>,
    hostname: String,
    index: usize,
    live: Arc<Live>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> LeanEnd {
    let mut st = NodeState {
        chain: Chain::default(),
        in_sync: false,
        live,
    };
    let mut inconsistent = 0;
    let mut rng = Rng::new(index as u64 + 1);
    let mut backoff = BACKOFF_MIN;
    let mut next = index;
    let n = ctx.servers.len().max(1);
    while let Some((name, addr)) = ctx.servers.get(next % n) {
        next += 1;
        let mut connected = false;
        let end = tokio::select! {
            e = session(&ctx, name, *addr, &hostname, &mut st, &mut connected) => Some(e),
            _ = stop.wait_for(|s| *s) => None,
        };
        let Some(end) = end else {
            // Ours to end: not a cause worth counting.
            if connected {
                ctx.metrics.connected.dec();
            }
            st.set_in_sync(&ctx, false);
            break;
        };
        let synced = st.in_sync;
        st.set_in_sync(&ctx, false);
        st.chain.disconnected();
        st.live.set(st.chain.digest());
        if connected {
            let cause = match &end {
                End::Inconsistent(_) => EndCause::Inconsistent,
                End::Redirected(_) | End::Other(_) => EndCause::Lost,
            };
            ctx.metrics.session_ended(cause);
        }
        let redirected = matches!(end, End::Redirected(_));
        match end {
            End::Inconsistent(e) => {
                inconsistent += 1;
                tracing::warn!(node = %hostname, error = %e, "lean node: inconsistent stream; resyncing");
                st.chain.reset();
                st.live.set(None);
            }
            End::Redirected(to) => {
                if let Some(k) = to
                    .iter()
                    .find_map(|t| ctx.servers.iter().position(|(name, _)| name == t))
                {
                    next = k;
                }
            }
            End::Other(e) => {
                tracing::debug!(node = %hostname, error = %e, "lean node: session ended")
            }
        }
        // As a typha-client: at once (with jitter) after a working session or to a server
        // suggested, else back off.
        let d = if synced || redirected {
            backoff = BACKOFF_MIN;
            BACKOFF_MIN
        } else {
            let d = backoff;
            backoff = (backoff * 2).min(BACKOFF_MAX);
            d
        };
        let d = d.mul_f64(0.5 + rng.below(1000) as f64 / 2000.0);
        tokio::select! {
            () = tokio::time::sleep(d) => {}
            _ = stop.wait_for(|s| *s) => break,
        }
    }
    LeanEnd {
        chain: st.chain,
        inconsistent,
    }
}

struct NodeState {
    chain: Chain,
    /// Counted in the swarm's in-sync nodes.
    in_sync: bool,
    live: Arc<Live>,
}

impl NodeState {
    fn set_in_sync(&mut self, ctx: &Ctx, now: bool) {
        ctx.shared.set_in_sync(&mut self.in_sync, now);
    }
}

/// One session: dial, handshake, then frames until something ends it.
async fn session(
    ctx: &Ctx,
    name: &str,
    addr: SocketAddr,
    hostname: &str,
    st: &mut NodeState,
    connected: &mut bool,
) -> End {
    match run(ctx, name, addr, hostname, st, connected).await {
        Ok(never) => match never {},
        Err(e) => e,
    }
}

enum Never {}

async fn run(
    ctx: &Ctx,
    name: &str,
    addr: SocketAddr,
    hostname: &str,
    st: &mut NodeState,
    connected: &mut bool,
) -> Result<Never, End> {
    let mut io = timeout(
        DIAL_TIMEOUT,
        crate::raw::dial_at(addr, name, ctx.tls.as_ref()),
    )
    .await
    .context("dial timed out")??;
    let mut enc = FrameEncoder::uncompressed();
    let mut buf = BytesMut::with_capacity(16 << 10);
    let offer = ClientOffer {
        info: "loadtest lean".into(),
        resume: st.chain.resume(),
        timeout: DIAL_TIMEOUT,
        ..ClientOffer::new(hostname)
    };
    let mut hs = ClientHandshake::new(offer, std::time::Instant::now());
    let hello = enc
        .encode(&Message::ClientHello(hs.hello()))
        .context("encoding the hello")?;
    write(&mut io, &hello).await?;
    let mut dec = FrameDecoder::new(Limits::CLIENT_INBOUND);
    let answer = loop {
        if let Some(m) = dec.decode(&mut buf).context("handshake")? {
            break m;
        }
        read_more(ctx, &mut io, &mut buf, DIAL_TIMEOUT, "during the handshake").await?;
    };
    let session: Session = hs
        .handle_message(answer, std::time::Instant::now())
        .map_err(|r| anyhow::anyhow!("handshake refused: {}", r.reason))?;
    st.chain.connected(session.epoch);
    ctx.metrics.session_started();
    *connected = true;
    let acks = session
        .features
        .contains(typha_protocol::message::Features::ACK);
    let mut last_ack = Instant::now();
    let mut unacked = None;
    loop {
        // Every whole frame in the buffer, in place.
        while let Some((ty, flags, total)) = header(&buf)? {
            if !session.may_receive(ty) {
                return Err(anyhow::anyhow!("unexpected {ty} from the server").into());
            }
            let payload = buf.get(HEADER_LEN..total).unwrap_or_default();
            let reached_before = st.chain.seq();
            match ty {
                MessageType::Deltas | MessageType::SnapshotChunk => {
                    match ctx.facts.facts(ty, flags, payload).context("data frame")? {
                        Facts::Deltas {
                            from,
                            seq,
                            digest,
                            updates,
                            stamped,
                        } => {
                            if let Some(r) = st.chain.deltas(from, seq, digest)? {
                                resumed(ctx, r, &mut last_ack);
                            }
                            ctx.shared.updates.fetch_add(updates, Ordering::Relaxed);
                            if stamped > 0 {
                                ctx.shared
                                    .churn_updates
                                    .fetch_add(stamped, Ordering::Relaxed);
                                ctx.shared.churn_frames.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        Facts::Chunk { kvs } => {
                            st.chain.chunk(kvs)?;
                            ctx.shared.updates.fetch_add(kvs, Ordering::Relaxed);
                        }
                    }
                }
                _ => {
                    let msg = facts::decode(ty, flags & FLAG_ZSTD != 0, payload)
                        .context("control frame")?;
                    match msg {
                        Message::Ping(p) => {
                            let pong = enc
                                .encode(&Message::Pong(Pong {
                                    ping_timestamp_micros: p.timestamp_micros,
                                }))
                                .context("encoding a pong")?;
                            buf.advance(total);
                            write(&mut io, &pong).await?;
                            continue;
                        }
                        Message::Goodbye(g) if !g.redirect.is_empty() => {
                            return Err(End::Redirected(g.redirect));
                        }
                        Message::Goodbye(g) => {
                            return Err(anyhow::anyhow!("goodbye: {}", g.reason).into());
                        }
                        Message::Staleness(_) => {}
                        Message::SyncStatus(s) => st.chain.status(s),
                        Message::SnapshotBegin(b) => {
                            let full = matches!(b.scope, SnapshotScope::Full);
                            st.chain.snapshot_begin(b.seq, full, b.kvs)?;
                        }
                        Message::SnapshotEnd(e) => {
                            if let Some(r) = st.chain.snapshot_end(e.seq, e.digest)? {
                                resumed(ctx, r, &mut last_ack);
                            }
                        }
                        other => {
                            return Err(anyhow::anyhow!(
                                "unexpected {} from the server",
                                other.message_type()
                            )
                            .into());
                        }
                    }
                }
            }
            buf.advance(total);
            if st.chain.seq() != reached_before {
                unacked = st.chain.seq();
            }
            st.set_in_sync(ctx, st.chain.in_sync());
            st.live.set(st.chain.digest());
        }
        if acks
            && last_ack.elapsed() >= ACK_INTERVAL
            && let Some(seq) = unacked.take()
        {
            let ack = enc
                .encode(&Message::Ack(Ack { seq }))
                .context("encoding an ack")?;
            write(&mut io, &ack).await?;
            last_ack = Instant::now();
        }
        read_more(ctx, &mut io, &mut buf, READ_TIMEOUT, "after the handshake").await?;
    }
}

/// Counts how the initial sync went, and acknowledges it at once (as a typha-client does).
fn resumed(ctx: &Ctx, r: Resumed, last_ack: &mut Instant) {
    ctx.metrics.resumed(match r {
        Resumed::Deltas => ResumeKind::Deltas,
        Resumed::Snapshot => ResumeKind::Snapshot,
    });
    *last_ack = Instant::now() - ACK_INTERVAL;
}

/// The next whole frame at the front of `buf`: its type, flags and length on the wire; `None`
/// until it has all arrived (room for it is reserved once its header checked out).
fn header(buf: &BytesMut) -> anyhow::Result<Option<(MessageType, u8, usize)>> {
    let Some(&[a, b, c, d, ty, flags]) = buf.get(..HEADER_LEN) else {
        return Ok(None);
    };
    let len = u32::from_be_bytes([a, b, c, d]) as usize;
    if len > Limits::CLIENT_INBOUND.max_frame_len {
        bail!("frame of {len} bytes exceeds the limit");
    }
    let ty = MessageType::from_u8(ty).with_context(|| format!("unknown message type {ty}"))?;
    if flags & !FLAG_ZSTD != 0 {
        bail!("reserved frame flags set: {flags:#04x}");
    }
    let total = HEADER_LEN + len;
    Ok((buf.len() >= total).then_some((ty, flags, total)))
}

/// Reads what has arrived into `buf` (counted), or fails on `limit` without a byte or on
/// the server closing (`when`, for the error).
async fn read_more(
    ctx: &Ctx,
    io: &mut Box<dyn Io>,
    buf: &mut BytesMut,
    limit: Duration,
    when: &str,
) -> Result<(), End> {
    let n = timeout(limit, io.read_buf(buf))
        .await
        .with_context(|| format!("nothing read for {limit:?} {when}"))??;
    if n == 0 {
        return Err(anyhow::anyhow!("closed by the server {when}").into());
    }
    ctx.metrics.bytes_received.inc_by(n as u64);
    Ok(())
}

async fn write(io: &mut Box<dyn Io>, bytes: &[u8]) -> Result<(), End> {
    timeout(WRITE_TIMEOUT, async {
        io.write_all(bytes).await?;
        io.flush().await
    })
    .await
    .context("write stalled")??;
    Ok(())
}
