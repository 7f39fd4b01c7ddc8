//! Admission, in one place: a connection from accept to the end of its task. Registered in
//! the connection registry at accept, with a span naming it; then TLS and the client's
//! identity, telling the protocol from the first bytes, the connection limits and the refusal
//! (a Goodbye for ours, a close for Calico's, which has no goodbye); then the protocol's task
//! (`task.rs` or `calico.rs`). The accept loop (`server.rs`) only takes sockets and slots.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout_at};
use tracing::{Instrument, Span, debug, field, info, info_span, warn};
use typha_protocol::calico::{Protocol, detect};
use typha_protocol::message::GoodbyeReason;

use super::limit::Slot;
use super::stream::Stream;
use super::{Ctx, calico, info, task};
use crate::calico::libcalico::SyncerType;
use crate::metrics::DropReason;
use crate::tls;

/// One connection's task, from accept to close: registered in the registry now, when it is
/// accepted. The slot and the registry entry are held until the task ends, whatever the
/// outcome.
///
/// A task's future is allocated once, for the connection's life, at the size of its largest
/// state. So what only one phase needs is boxed, allocated for that phase alone: TLS with
/// telling the protocol, a Calico client's whole life, and (inside [`task::run`]) our
/// hello with the initial sync. What is left inline is our protocol's stream loop: one
/// allocation per connection for the task and the loop, not a task around a boxed loop.
pub fn connection(
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
            Protocol::Calico => Box::pin(calico::serve(stream, ctx, rx, &info, prefix)).await,
            _ => {
                let ended = task::run(stream, &ctx, rx, &info, prefix).await;
                super::ended(&ctx, Protocol::Ours, ended);
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
    let (protocol, prefix) = match sniff(stream, deadline).await {
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
    let hello = calico::read_hello(stream, prefix, deadline).await;
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.shutdown()).await;
    let syncer = hello
        .as_ref()
        .and_then(|h| SyncerType::from_hello(&h.syncer_type));
    m.calico_refused(syncer);
    let span = Span::current();
    if let Some(h) = &hello {
        span.record("node", field::display(info::bounded(&h.hostname)));
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

/// Why a connection ended before its protocol was told.
#[derive(Debug, thiserror::Error)]
pub enum SniffError {
    /// The socket failed.
    #[error("i/o: {0}")]
    Io(#[source] std::io::Error),
    /// The peer closed before its first message.
    #[error("peer closed the connection before a hello")]
    Closed,
}

/// Reads the first bytes of a connection until they tell its protocol (within `deadline`).
/// Returns the protocol and the bytes read, which belong to its first message. Bytes that are
/// neither protocol's, or none before the deadline, are left to ours, which answers them as it
/// always has (a Goodbye saying what was wrong).
pub async fn sniff<S: AsyncRead + Unpin>(
    stream: &mut S,
    deadline: Instant,
) -> Result<(Protocol, BytesMut), SniffError> {
    let mut buf = BytesMut::with_capacity(1024);
    loop {
        match detect(&buf) {
            Ok(Some(p)) => return Ok((p, buf)),
            Ok(None) => {}
            Err(e) => {
                debug!(error = %e, "first bytes are not Calico's; left to our protocol");
                return Ok((Protocol::Ours, buf));
            }
        }
        match timeout_at(deadline, stream.read_buf(&mut buf)).await {
            Ok(Ok(0)) => return Err(SniffError::Closed),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(SniffError::Io(e)),
            Err(_) => return Ok((Protocol::Ours, buf)),
        }
    }
}

/// A protocol's name in the connection's span (as `/status?nodes` names it).
fn protocol_name(p: Protocol) -> &'static str {
    match p {
        Protocol::Calico => "calico",
        _ => "typha-rs",
    }
}
