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
//! This file holds Calico's handshake and encodings, and how its clients are fed once in sync
//! (`CalicoFeed`; what they are sent: `calico_sync.rs`); the driver, the session's timers and
//! the errors are the same as ours (`drive.rs`, `session.rs`, [`ConnError`]). Every stream
//! starts with the server preamble, so the `MsgKVs` of a breadcrumb and of a snapshot are
//! encoded once per syncer type and carriage for every Calico client
//! ([`crate::cache::calico`]). Only the hello, the restart,
//! sync status and pings are encoded per connection (all tiny). Calico's protocol has no
//! goodbye: a connection the server ends (shutdown, limit, refusal) is simply closed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use bytes::{Bytes, BytesMut};
use prometheus::IntGauge;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::oneshot;
use tokio::time::Instant;
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
use super::drive::{self, Feed, Start, Synced, read_message};
use super::info::ConnInfo;
use super::out::{Dialect, Out, calico_token};
use super::session::{Due, Session};
use super::{Close, ConnError, Ctx};
use crate::cache::calico::Carriage;
use crate::calico::libcalico::SyncerType;
use crate::metrics::ResumeKind;

/// Serves one Calico-protocol connection until it ends; logs the outcome once. `prefix`: the
/// bytes [`sniff`](super::admit::sniff) read.
pub async fn serve<S>(
    stream: S,
    ctx: Arc<Ctx>,
    close: oneshot::Receiver<Close>,
    info: &ConnInfo,
    prefix: BytesMut,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let ended = run(stream, &ctx, close, info, prefix).await;
    super::ended(&ctx, Protocol::Calico, ended);
}

/// Serves one Calico-protocol connection until it ends; returns why.
pub(super) fn run<'a, S>(
    stream: S,
    ctx: &'a Arc<Ctx>,
    close: oneshot::Receiver<Close>,
    info: &'a ConnInfo,
    prefix: BytesMut,
) -> impl Future<Output = Result<(), ConnError>> + Send + 'a
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    drive::run::<Calico, S>(stream, ctx, close, info, prefix)
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
    let decode = |b: &mut BytesMut| dec.decode(b).map_err(ConnError::from);
    match read_message(stream, &mut buf, deadline, decode).await {
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

/// Calico's protocol's start.
struct Calico;

/// What a Calico handshake learnt.
struct CalicoHello {
    dec: StreamDecoder,
    syncer: SyncerType,
    carriage: Carriage,
    counted: Counted,
}

/// A connection counted in `typha_calico_connections{syncer}` for as long as it is kept.
struct Counted(IntGauge);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.dec();
    }
}

impl Start for Calico {
    type Hello = CalicoHello;
    type Feed = CalicoFeed;
    const DIALECT: Dialect = Dialect::Calico(Carriage::Plain);

    /// The hello (by the session's deadline, counted from accept, so TLS shares it), the
    /// server's preamble and hello, and the switch to snappy when the client offers it.
    async fn handshake<S: AsyncRead + AsyncWrite + Unpin>(
        ctx: &Arc<Ctx>,
        session: &mut Session<'_>,
        out: &mut Out<S>,
        rbuf: &mut BytesMut,
        info: &ConnInfo,
    ) -> Result<CalicoHello, ConnError> {
        let mut dec = StreamDecoder::new(Limits::SERVER_INBOUND);
        let hello = match next_message(session, out, rbuf, &mut dec).await? {
            Message::ClientHello(h) => h,
            other => return Err(ConnError::Unexpected(other.kind().to_string())),
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
        let counted = Counted(by_type);
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
            session.expect_reply("MsgACK", Instant::now());
            match next_message(session, out, rbuf, &mut dec).await? {
                Message::Ack => {}
                other => return Err(ConnError::Unexpected(other.kind().to_string())),
            }
            out.queue(snappy_opening())?;
            out.dialect = Dialect::Calico(carriage);
        }
        Ok(CalicoHello {
            dec,
            syncer,
            carriage,
            counted,
        })
    }

    /// The snapshot of the client's syncer type (`calico_sync.rs`).
    async fn initial_sync<S: AsyncRead + AsyncWrite + Unpin>(
        ctx: &Arc<Ctx>,
        hello: CalicoHello,
        out: &mut Out<S>,
    ) -> Result<Synced<CalicoFeed>, ConnError> {
        let at = calico_initial_sync(ctx, hello.syncer, hello.carriage, out).await?;
        Ok(Synced {
            feed: CalicoFeed {
                dec: hello.dec,
                at,
                _counted: hello.counted,
            },
            resumed: ResumeKind::snapshot,
            // Calico's protocol does not tell staleness.
            staleness: None,
        })
    }
}

/// The next message of the handshake, by the session's deadline.
async fn next_message<S: AsyncRead + AsyncWrite + Unpin>(
    session: &mut Session<'_>,
    out: &mut Out<S>,
    rbuf: &mut BytesMut,
    dec: &mut StreamDecoder,
) -> Result<Message, ConnError> {
    let deadline = session.poll_timeout().unwrap_or_else(Instant::now);
    let decode = |b: &mut BytesMut| dec.decode(b).map_err(ConnError::from);
    match read_message(out.io(), rbuf, deadline, decode).await? {
        Some(m) => Ok(m),
        None => Err(match session.handle_timeout(Instant::now(), out.writing) {
            Some(Due::HandshakeExpired(what)) => ConnError::HandshakeTimeout(what),
            _ => ConnError::HandshakeTimeout("MsgClientHello"),
        }),
    }
}

/// What a Calico client is sent once in sync (each breadcrumb as its shared `MsgKVs`, a
/// `MsgSyncStatus` on change: `calico_sync.rs`), and what it may say (pongs only, as Typha).
struct CalicoFeed {
    dec: StreamDecoder,
    at: CalicoCursor,
    _counted: Counted,
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
        session: &mut Session<'_>,
        out: &mut Out<S>,
    ) -> impl Future<Output = Result<bool, ConnError>> {
        calico_catch_up(ctx, &mut self.at, session, out)
    }

    fn inbound(
        &mut self,
        ctx: &Ctx,
        rbuf: &mut BytesMut,
        session: &mut Session<'_>,
        _info: &ConnInfo,
    ) -> Result<(), ConnError> {
        while let Some(msg) = self.dec.decode(rbuf).map_err(ConnError::from)? {
            match msg {
                Message::Pong(p) => {
                    let token = calico_token(p.ping_timestamp);
                    if let Some(took) = session.pong(token, Instant::now()) {
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
