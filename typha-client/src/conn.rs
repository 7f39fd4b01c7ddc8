//! One session with one server: dial, TLS, handshake, then read frames into the store until
//! something ends it. Pings are answered; the applied position is acknowledged (at most once
//! per `ack_interval`); no message for `read_timeout` means the server or the path is dead
//! (this is what catches a half-open TCP connection); a write that takes longer than
//! `write_timeout` fails the session.

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout};
use typha_protocol::frame::{EncodeError, FrameDecoder, FrameEncoder, FrameError, Limits};
use typha_protocol::handshake::{ClientHandshake, ClientOffer, RejectReason, Session};
use typha_protocol::message::{Ack, Features, Goodbye, Message, MessageType, Pong};

use crate::config::ClientConfig;
use crate::discovery::Target;
use crate::metrics::{ClientMetrics, EndCause};
use crate::store::{Store, StoreError, SyncerCallbacks};

/// Why a session ended.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// TCP connect failed.
    #[error("cannot connect to {addr}: {source}")]
    Dial {
        /// Address.
        addr: std::net::SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// TCP connect did not finish within the dial timeout.
    #[error("cannot connect to {addr}: timed out after {limit:?}")]
    DialTimeout {
        /// Address.
        addr: std::net::SocketAddr,
        /// The dial timeout.
        limit: Duration,
    },
    /// The TLS handshake failed (wrong CA, certificate refused, server identity mismatch).
    #[error("TLS with {addr} failed: {source}")]
    Tls {
        /// Address.
        addr: std::net::SocketAddr,
        /// Why.
        source: TlsFailure,
    },
    /// The TLS handshake was cut short by an EOF or a reset (an overloaded server, a restart):
    /// worth retrying, unlike [`SessionError::Tls`].
    #[error("connection lost: TLS handshake with {addr} interrupted: {source}")]
    TlsInterrupted {
        /// Address.
        addr: std::net::SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The TLS handshake did not finish within the dial timeout.
    #[error("connection lost: TLS handshake with {addr} timed out")]
    TlsTimeout {
        /// Address.
        addr: std::net::SocketAddr,
    },
    /// The protocol handshake failed (version mismatch, wrong syncer, refused).
    #[error("handshake with {addr} failed: {reason}")]
    Handshake {
        /// Address.
        addr: std::net::SocketAddr,
        /// Why.
        reason: RejectReason,
    },
    /// The server said goodbye.
    #[error("server said goodbye: {} ({})", .0.reason, .0.message)]
    Goodbye(Goodbye),
    /// Nothing heard for the read timeout.
    #[error("no message from the server for {0:?} (dead server or half-open connection)")]
    ReadTimeout(Duration),
    /// A write stalled.
    #[error("write stalled for {0:?}")]
    WriteTimeout(Duration),
    /// Reading from or writing to the connection failed.
    #[error("connection lost: {0}")]
    Io(#[source] std::io::Error),
    /// The server closed the connection.
    #[error("connection lost: closed by the server")]
    Closed,
    /// The server closed the connection before answering the handshake (without TLS; with
    /// TLS that is a [`TlsFailure::ClosedAfterHandshake`]).
    #[error("connection lost: closed by the server during the handshake")]
    ClosedDuringHandshake,
    /// The server sent something undecodable.
    #[error("protocol error: {0}")]
    Protocol(#[source] FrameError),
    /// The server sent a message the session does not allow.
    #[error("protocol error: unexpected {0} from the server")]
    UnexpectedMessage(MessageType),
    /// A message of ours could not be encoded.
    #[error("protocol error: {0}")]
    Encode(#[source] EncodeError),
    /// The server's stream disagreed with the store (gap, digest mismatch).
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why the TLS handshake with a server failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsFailure {
    /// The name to verify the server against is not a valid DNS name or IP address.
    #[error("bad server name {name:?}: {source}")]
    ServerName {
        /// The name.
        name: String,
        /// Why it is not valid.
        source: rustls_pki_types::InvalidDnsNameError,
    },
    /// rustls refused the handshake (certificate not trusted, identity mismatch, protocol).
    #[error("{0}")]
    Handshake(#[source] std::io::Error),
    /// With TLS 1.3 the server checks this client's certificate after the client's side of
    /// the handshake has finished; a refusal then shows up as a close.
    #[error(
        "the server closed the connection after TLS: this client's certificate CN/URI SAN is probably not allowed there (TYPHA_CLIENTCN / TYPHA_CLIENTURISAN)"
    )]
    ClosedAfterHandshake,
    /// Like [`TlsFailure::ClosedAfterHandshake`], as an alert or a reset.
    #[error("the server refused this client: {0}")]
    Refused(#[source] std::io::Error),
}

impl SessionError {
    /// Goodbye's suggested servers, if any.
    pub fn redirect(&self) -> &[String] {
        match self {
            SessionError::Goodbye(g) => &g.redirect,
            SessionError::Handshake {
                reason: RejectReason::Refused(g),
                ..
            } => &g.redirect,
            _ => &[],
        }
    }

    /// Why the session ended, as `typha_client_sessions_ended_total` counts it.
    pub fn cause(&self) -> EndCause {
        match self {
            SessionError::Goodbye(_) => EndCause::Goodbye,
            SessionError::Store(_) => EndCause::Inconsistent,
            SessionError::Dial { .. }
            | SessionError::DialTimeout { .. }
            | SessionError::TlsInterrupted { .. }
            | SessionError::TlsTimeout { .. }
            | SessionError::ReadTimeout(_)
            | SessionError::WriteTimeout(_)
            | SessionError::Io(_)
            | SessionError::Closed
            | SessionError::ClosedDuringHandshake => EndCause::Lost,
            SessionError::Tls { .. }
            | SessionError::Handshake { .. }
            | SessionError::Protocol(_)
            | SessionError::UnexpectedMessage(_)
            | SessionError::Encode(_) => EndCause::Other,
        }
    }

    /// Whether this is the kind of failure an operator must fix (TLS, version mismatch).
    pub fn is_misconfiguration(&self) -> bool {
        match self {
            SessionError::Tls { .. } => true,
            SessionError::Handshake {
                reason: RejectReason::Refused(g),
                ..
            } => !g.reason.should_reconnect(),
            SessionError::Handshake { reason, .. } => {
                matches!(
                    reason,
                    RejectReason::NoCommonVersion { .. } | RejectReason::InvalidServerHello(_)
                )
            }
            _ => false,
        }
    }
}

/// How a session went.
#[derive(Debug)]
pub struct SessionEnd {
    /// Whether the store caught up with the server during it.
    pub synced: bool,
    /// Why it ended.
    pub error: SessionError,
}

/// Any byte stream.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// Dials `target` and runs a session until it ends.
pub async fn session(
    target: &Target,
    cfg: &ClientConfig,
    tls: Option<&Arc<rustls::ClientConfig>>,
    store: &mut Store,
    cb: &mut dyn SyncerCallbacks,
    m: &ClientMetrics,
) -> SessionEnd {
    let mut synced = false;
    let error = match run(target, cfg, tls, store, cb, m, &mut synced).await {
        Ok(never) => match never {},
        Err(e) => e,
    };
    SessionEnd { synced, error }
}

enum Never {}

#[allow(clippy::too_many_arguments)]
async fn run(
    target: &Target,
    cfg: &ClientConfig,
    tls: Option<&Arc<rustls::ClientConfig>>,
    store: &mut Store,
    cb: &mut dyn SyncerCallbacks,
    m: &ClientMetrics,
    synced: &mut bool,
) -> Result<Never, SessionError> {
    let addr = target.addr;
    let deadline = Instant::now() + cfg.dial_timeout;
    let tcp = match tokio::time::timeout_at(deadline, TcpStream::connect(addr)).await {
        Ok(Ok(s)) => s,
        Ok(Err(source)) => return Err(SessionError::Dial { addr, source }),
        Err(_) => {
            return Err(SessionError::DialTimeout {
                addr,
                limit: cfg.dial_timeout,
            });
        }
    };
    let _ = tcp.set_nodelay(true);
    let stream: Box<dyn Io> = match tls {
        None => Box::new(tcp),
        Some(tls) => {
            let name = rustls_pki_types::ServerName::try_from(target.server_name.clone()).map_err(
                |source| SessionError::Tls {
                    addr,
                    source: TlsFailure::ServerName {
                        name: target.server_name.clone(),
                        source,
                    },
                },
            )?;
            let conn = tokio_rustls::TlsConnector::from(tls.clone()).connect(name, tcp);
            match tokio::time::timeout_at(deadline, conn).await {
                Ok(Ok(s)) => Box::new(s),
                // A certificate or protocol problem (rustls says so) needs an operator; an EOF or
                // a reset (an overloaded server, a restart) is worth retrying.
                Ok(Err(e)) if e.get_ref().is_some_and(|inner| inner.is::<rustls::Error>()) => {
                    return Err(SessionError::Tls {
                        addr,
                        source: TlsFailure::Handshake(e),
                    });
                }
                Ok(Err(source)) => return Err(SessionError::TlsInterrupted { addr, source }),
                Err(_) => return Err(SessionError::TlsTimeout { addr }),
            }
        }
    };
    let (mut r, mut w) = tokio::io::split(stream);
    let mut enc = FrameEncoder::uncompressed();
    let mut dec = FrameDecoder::new(Limits::CLIENT_INBOUND);
    let mut buf = BytesMut::with_capacity(16 << 10);

    let offer = ClientOffer {
        info: cfg.info.clone(),
        syncer_type: cfg.syncer_type.clone(),
        resume: store.resume(),
        revision_floor: store.revision_floor(),
        timeout: cfg.dial_timeout,
        ..ClientOffer::new(cfg.hostname.clone())
    };
    let mut hs = ClientHandshake::new(offer, std::time::Instant::now());
    let hello = enc
        .encode(&Message::ClientHello(hs.hello()))
        .map_err(SessionError::Encode)?;
    write(&mut w, &hello, cfg.write_timeout).await?;
    let answer = loop {
        if let Some(msg) = dec.decode(&mut buf).map_err(SessionError::Protocol)? {
            break msg;
        }
        match tokio::time::timeout_at(deadline, r.read_buf(&mut buf)).await {
            // With TLS 1.3 the server checks our certificate after our side of the handshake has
            // finished: a refusal shows up here, as an alert or a close.
            Ok(Ok(0)) if tls.is_some() => {
                return Err(SessionError::Tls {
                    addr,
                    source: TlsFailure::ClosedAfterHandshake,
                });
            }
            Ok(Ok(0)) => return Err(SessionError::ClosedDuringHandshake),
            Ok(Ok(n)) => {
                m.bytes_received.inc_by(n as u64);
            }
            Ok(Err(e)) if tls.is_some() => {
                return Err(SessionError::Tls {
                    addr,
                    source: TlsFailure::Refused(e),
                });
            }
            Ok(Err(e)) => return Err(SessionError::Io(e)),
            Err(_) => {
                return Err(SessionError::Handshake {
                    addr,
                    reason: RejectReason::Timeout(cfg.dial_timeout),
                });
            }
        }
    };
    m.heard();
    let session: Session = hs
        .handle_message(answer, std::time::Instant::now())
        .map_err(|rej| SessionError::Handshake {
            addr,
            reason: rej.reason,
        })?;
    store.connected(&session, cb);
    m.session_started();
    let acks = session.features.contains(Features::ACK);
    let mut last_ack = Instant::now();
    let mut unacked = None;

    let light = store.is_light();
    loop {
        while let Some(frame) = dec.decode_frame(&mut buf).map_err(SessionError::Protocol)? {
            if light && frame.message_type == MessageType::SnapshotChunk {
                // A light store keeps nothing from snapshots: skip the decompression and
                // decoding that would dominate a simulated node's cost.
                store.skip_chunk()?;
                continue;
            }
            let msg = dec.decode_message(&frame).map_err(SessionError::Protocol)?;
            if !session.may_receive(msg.message_type()) {
                return Err(SessionError::UnexpectedMessage(msg.message_type()));
            }
            match msg {
                Message::Ping(p) => {
                    let pong = enc
                        .encode(&Message::Pong(Pong {
                            ping_timestamp_micros: p.timestamp_micros,
                        }))
                        .map_err(SessionError::Encode)?;
                    write(&mut w, &pong, cfg.write_timeout).await?;
                }
                Message::Goodbye(g) => return Err(SessionError::Goodbye(g)),
                Message::Staleness(st) => {
                    if st.stale != m.server_stale() {
                        if st.stale {
                            tracing::warn!(server = %addr, age = ?st.age(), reason = %st.reason, "the server's view of its datastore is stale");
                        } else {
                            tracing::info!(server = %addr, "the server's view of its datastore is current again");
                        }
                    }
                    m.server_staleness(&st);
                    cb.on_staleness(&st);
                }
                other => {
                    let applied = store.apply(other, cb)?;
                    if let Some(kind) = applied.resumed {
                        *synced = true;
                        m.resumed(kind);
                        tracing::info!(server = %addr, resume = kind.as_str(), keys = store.len(), "in sync with the server");
                        // Acknowledge the initial sync at once.
                        last_ack = Instant::now() - cfg.ack_interval;
                    }
                    if applied.reached.is_some() {
                        unacked = applied.reached;
                    }
                }
            }
        }
        if acks
            && last_ack.elapsed() >= cfg.ack_interval
            && let Some(seq) = unacked.take()
        {
            let ack = enc
                .encode(&Message::Ack(Ack { seq }))
                .map_err(SessionError::Encode)?;
            write(&mut w, &ack, cfg.write_timeout).await?;
            last_ack = Instant::now();
        }
        match timeout(cfg.read_timeout, r.read_buf(&mut buf)).await {
            Err(_) => return Err(SessionError::ReadTimeout(cfg.read_timeout)),
            Ok(Ok(0)) => return Err(SessionError::Closed),
            Ok(Ok(n)) => {
                m.bytes_received.inc_by(n as u64);
                m.heard();
            }
            Ok(Err(e)) => return Err(SessionError::Io(e)),
        }
    }
}

async fn write<W: AsyncWrite + Unpin>(
    w: &mut W,
    bytes: &[u8],
    limit: Duration,
) -> Result<(), SessionError> {
    match timeout(limit, async {
        w.write_all(bytes).await?;
        w.flush().await
    })
    .await
    {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(SessionError::Io(e)),
        Err(_) => Err(SessionError::WriteTimeout(limit)),
    }
}
