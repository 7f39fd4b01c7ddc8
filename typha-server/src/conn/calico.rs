//! A client speaking Calico's own Typha protocol (calico-node's Felix, confd, tunnel IP
//! allocator, node status reporter), on the same port as ours, told apart by its first bytes
//! ([`admit::sniff`](super::admit::sniff)).
//!
//! ```text
//! MsgClientHello ─▶ preamble, MsgServerHello ─▶ (snappy offered: MsgDecoderRestart, wait
//! for MsgACK, snappy identifier + preamble chunk) ─▶ snapshot MsgKVs, MsgSyncStatus ─▶
//! per breadcrumb: MsgKVs, MsgSyncStatus on change; MsgPing every ping interval, pongs read
//! ```
//!
//! This file holds Calico's handshake, its snapshot and what its clients are sent once in sync
//! (`CalicoFeed`); the stream loop, its timers and the errors are the same as ours
//! (`drive.rs`, `session.rs`, [`ConnError`]). Every stream starts with the server preamble,
//! so the `MsgKVs` of a breadcrumb and of a snapshot are encoded once per syncer type and
//! carriage for every Calico client ([`crate::cache::calico`]). Only the hello, the restart,
//! sync status and pings are encoded per connection (all tiny). Calico's protocol has no
//! goodbye: a connection the server ends (shutdown, limit, refusal) is simply closed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::sync::oneshot;
use tokio::time::{Instant, timeout_at};
use tracing::debug;
use typha_protocol::calico::gob::Limits;
use typha_protocol::calico::messages::{
    COMPRESSION_SNAPPY, ClientHello, DecoderRestart, Message, RESTART_ENABLE_SNAPPY, ServerHello,
    Side,
};
use typha_protocol::calico::snappy::{self, STREAM_IDENTIFIER};
use typha_protocol::calico::{Protocol, StreamDecoder};
use typha_protocol::message::Seq;

use super::calico_sync::{CalicoCursor, calico_catch_up, calico_initial_sync};
use super::drive::{self, Feed, Streaming};
use super::info::{ConnInfo, Phase};
use super::out::{Dialect, Out, calico_token, scopeguard};
use super::session::Follow;
use super::sync::wait_for_sync_slot;
use super::{Close, ConnError, Ctx};
use crate::cache::calico::Carriage;
use crate::calico::libcalico::SyncerType;
use crate::metrics::ResumeKind;

/// Serves one Calico-protocol connection until it ends; logs the outcome once. `prefix`: the
/// bytes [`sniff`](super::admit::sniff) read.
pub async fn serve<S>(
    stream: S,
    accepted: Instant,
    ctx: Arc<Ctx>,
    close: oneshot::Receiver<Close>,
    info: &ConnInfo,
    prefix: BytesMut,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let ended = run(stream, accepted, &ctx, close, info, prefix).await;
    super::ended(&ctx, Protocol::Calico, ended);
}

/// The snappy stream's opening for every connection: the identifier and the preamble's chunks.
fn snappy_opening() -> Bytes {
    static OPENING: OnceLock<Bytes> = OnceLock::new();
    OPENING
        .get_or_init(|| {
            let mut out = STREAM_IDENTIFIER.to_vec();
            out.extend_from_slice(&snappy::encode_chunks(&Side::Server.preamble()));
            Bytes::from(out)
        })
        .clone()
}

/// A connection id for the hello: a random prefix per process and a counter, as Typha's.
fn conn_id() -> u64 {
    static PREFIX: OnceLock<u64> = OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let prefix = *PREFIX.get_or_init(|| u64::from(rand::random::<u32>()) << 32);
    prefix | (NEXT.fetch_add(1, Ordering::Relaxed) & 0xffff_ffff)
}

/// The next message in `buf`, reading from `r` into it as needed; `None` at the deadline.
async fn next_message<R: AsyncRead + Unpin>(
    r: &mut R,
    dec: &mut StreamDecoder,
    buf: &mut BytesMut,
    deadline: Instant,
) -> Result<Option<Message>, ConnError> {
    loop {
        if let Some(m) = dec.decode(buf).map_err(ConnError::from)? {
            return Ok(Some(m));
        }
        match timeout_at(deadline, r.read_buf(buf)).await {
            Ok(Ok(0)) => return Err(ConnError::PeerClosed),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(ConnError::Io(e)),
            Err(_) => return Ok(None),
        }
    }
}

/// The hello of a Calico client about to be refused (at the connection limit), to say who it
/// was: `None` if it does not arrive, whole and valid, before `deadline`. `prefix`: the bytes
/// [`sniff`](super::admit::sniff) read.
pub async fn read_hello<S: AsyncRead + Unpin>(
    stream: &mut S,
    prefix: BytesMut,
    deadline: Instant,
) -> Option<ClientHello> {
    let mut dec = StreamDecoder::new(Limits::SERVER_INBOUND);
    let mut buf = prefix;
    match next_message(stream, &mut dec, &mut buf, deadline).await {
        Ok(Some(Message::ClientHello(h))) => Some(h),
        _ => None,
    }
}

/// What a hello asks for, if we serve it.
fn check_hello(h: &ClientHello) -> Result<(SyncerType, Carriage), ConnError> {
    let Some(syncer) = SyncerType::from_hello(&h.syncer_type) else {
        return Err(ConnError::Refused(format!(
            "syncer type {:?} is not served (felix, bgp, tunnel-ip-allocation, node-status)",
            h.syncer_type
        )));
    };
    if !h.supports_modern_policy_keys {
        return Err(ConnError::Refused(
            "SupportsModernPolicyKeys is false (a client older than Calico 3.30; Typha 3.32 refuses it too)".into(),
        ));
    }
    let snappy = h.supports_decoder_restart
        && h.supported_compression_algorithms
            .iter()
            .any(|a| a == COMPRESSION_SNAPPY);
    let carriage = if snappy {
        Carriage::Snappy
    } else {
        Carriage::Plain
    };
    Ok((syncer, carriage))
}

/// The handshake (the hello, the switch to snappy when the client offers it), a turn to
/// sync, the snapshot, then the stream loop with [`CalicoFeed`].
pub(super) async fn run<S>(
    stream: S,
    accepted: Instant,
    ctx: &Arc<Ctx>,
    mut close: oneshot::Receiver<Close>,
    info: &ConnInfo,
    prefix: BytesMut,
) -> Result<(), ConnError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    // One stream, read and written in turn, as ours.
    let mut out = Out::new(stream, ctx.clone());
    out.dialect = Dialect::Calico(Carriage::Plain);
    let mut dec = StreamDecoder::new(Limits::SERVER_INBOUND);
    let mut rbuf = prefix;

    // Hello, within the handshake deadline (counted from accept, so TLS shares it).
    let deadline = accepted + ctx.cfg.handshake_timeout;
    let hello = match next_message(out.io(), &mut dec, &mut rbuf, deadline).await? {
        Some(Message::ClientHello(h)) => h,
        Some(other) => return Err(ConnError::Unexpected(other.kind().to_string())),
        None => return Err(ConnError::HandshakeTimeout("MsgClientHello")),
    };
    let (syncer, carriage) = check_hello(&hello)?;
    info.calico_hello(
        &hello.hostname,
        &hello.info,
        format!("calico {}", hello.version),
        syncer,
    );
    // Every per-syncer metric of this connection counts under its syncer type, as Typha's.
    out.syncer = syncer;
    let by_type = ctx.cache.metrics.calico_connections(syncer).clone();
    by_type.inc();
    let _by_type = scopeguard(move || by_type.dec());
    debug!(version = %hello.version, ?carriage, client_conn_id = hello.client_conn_id, "Calico client hello");

    out.queue(Side::Server.preamble())?;
    let reply = Message::ServerHello(ServerHello {
        version: concat!("typha-server ", env!("CARGO_PKG_VERSION")).into(),
        syncer_type: syncer.as_str().into(),
        supports_node_resource_updates: true,
        server_conn_id: conn_id(),
    });
    out.queue(Carriage::Plain.encode(&reply)?)?;
    if carriage == Carriage::Snappy {
        let restart = Message::DecoderRestart(DecoderRestart {
            message: RESTART_ENABLE_SNAPPY.into(),
            compression_algorithm: COMPRESSION_SNAPPY.into(),
        });
        out.queue(Carriage::Plain.encode(&restart)?)?;
        out.flush().await?;
        // Nothing more may be written until the ACK: the client's old decoder could read
        // ahead and swallow it.
        let by = Instant::now() + ctx.cfg.pong_timeout;
        match next_message(out.io(), &mut dec, &mut rbuf, by).await? {
            Some(Message::Ack) => {}
            Some(other) => return Err(ConnError::Unexpected(other.kind().to_string())),
            None => return Err(ConnError::HandshakeTimeout("MsgACK")),
        }
        out.queue(snappy_opening())?;
        out.dialect = Dialect::Calico(carriage);
    }

    // Initial syncs take turns with ours; the client is pinged while it waits.
    let slot = wait_for_sync_slot(ctx, &mut out, &mut close).await?;
    info.set_phase(Phase::Syncing);
    let sync_started = Instant::now();
    let m = &ctx.cache.metrics;
    let at = calico_initial_sync(ctx, syncer, carriage, &mut out).await?;
    drop(slot);
    info.synced(ResumeKind::snapshot, at.seq);
    m.client_snapshot_send_secs
        .of(syncer)
        .observe(sync_started.elapsed().as_secs_f64());

    let feed = CalicoFeed { dec, at };
    let streaming = Streaming {
        out,
        close,
        feed,
        rbuf,
        // Calico's protocol does not tell staleness: never read.
        staleness: ctx.freshness.subscribe(),
        tells_staleness: false,
        syncer,
    };
    drive::stream(ctx, info, std::future::ready(Ok(streaming))).await
}

/// What a Calico client is sent once in sync (each breadcrumb as its shared `MsgKVs`, a
/// `MsgSyncStatus` on change: `calico_sync.rs`), and what it may say (pongs only, as Typha).
struct CalicoFeed {
    dec: StreamDecoder,
    at: CalicoCursor,
}

impl Feed for CalicoFeed {
    fn position(&self) -> Seq {
        self.at.seq
    }

    fn wakes_on(&self) -> Option<SyncerType> {
        Some(self.at.syncer)
    }

    fn catch_up<S: AsyncRead + AsyncWrite + Unpin>(
        &mut self,
        ctx: &Arc<Ctx>,
        follow: &mut Follow<'_>,
        out: &mut Out<S>,
    ) -> impl Future<Output = Result<bool, ConnError>> {
        calico_catch_up(ctx, &mut self.at, follow, out)
    }

    fn inbound(
        &mut self,
        ctx: &Ctx,
        rbuf: &mut BytesMut,
        follow: &mut Follow<'_>,
        _info: &ConnInfo,
    ) -> Result<(), ConnError> {
        while let Some(msg) = self.dec.decode(rbuf).map_err(ConnError::from)? {
            match msg {
                Message::Pong(p) => {
                    let token = calico_token(p.ping_timestamp);
                    if let Some(took) = follow.pong(token, Instant::now()) {
                        ctx.cache
                            .metrics
                            .ping_latency
                            .of(self.at.syncer)
                            .observe(took.as_secs_f64());
                    }
                }
                // As in Typha: anything but a pong ends the connection.
                other => return Err(ConnError::Unexpected(other.kind().to_string())),
            }
        }
        // Nothing left over (the usual case, between pongs): an idle connection keeps no
        // read buffer.
        if rbuf.is_empty() {
            *rbuf = BytesMut::new();
        }
        Ok(())
    }
}
