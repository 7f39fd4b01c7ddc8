//! Connections that are not typha-clients, run inside a swarm:
//!
//! - stalled nodes (`slow`): dial, say hello like a real client, then never read again, so the
//!   server's writes to them back up into the kernel's buffers and then its own;
//! - bare readers (`ceiling`): dial the built-in broadcaster and decode every frame it sends,
//!   counting frames and bytes, the same frame work a light node does for its deltas.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Context;
use bytes::BytesMut;
use rustls_pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use typha_protocol::frame::{FrameDecoder, FrameEncoder, Limits};
use typha_protocol::handshake::{ClientHandshake, ClientOffer};
use typha_protocol::message::Message;

/// A byte stream, TLS or not.
pub(crate) trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// Counters of the raw connections of one swarm.
#[derive(Debug, Default)]
pub(crate) struct RawCounters {
    /// Connections established (and, for stalled nodes, hello sent).
    pub(crate) connected: AtomicU64,
    /// Frames decoded.
    pub(crate) frames: AtomicU64,
    /// Bytes read.
    pub(crate) bytes: AtomicU64,
}

/// Dials `addr` (`host:port`), with TLS if configured (the server name is the host part).
pub(crate) async fn dial(
    addr: &str,
    tls: Option<&Arc<rustls::ClientConfig>>,
) -> anyhow::Result<Box<dyn Io>> {
    dial_at(resolve(addr).await?, addr, tls).await
}

/// The IPv4 address of `addr` (`host:port`).
pub(crate) async fn resolve(addr: &str) -> anyhow::Result<SocketAddr> {
    tokio::net::lookup_host(addr)
        .await?
        .find(SocketAddr::is_ipv4)
        .with_context(|| format!("{addr}: no IPv4 address"))
}

/// Dials `sock`, with TLS if configured (the server name is the host part of `addr`).
pub(crate) async fn dial_at(
    sock: SocketAddr,
    addr: &str,
    tls: Option<&Arc<rustls::ClientConfig>>,
) -> anyhow::Result<Box<dyn Io>> {
    let (host, _) = addr.rsplit_once(':').context("address without a port")?;
    let tcp = TcpStream::connect(sock).await?;
    tcp.set_nodelay(true)?;
    match tls {
        None => Ok(Box::new(tcp)),
        Some(cfg) => {
            let name = ServerName::try_from(host.to_owned())?;
            let s = tokio_rustls::TlsConnector::from(cfg.clone())
                .connect(name, tcp)
                .await?;
            Ok(Box::new(s))
        }
    }
}

/// A node that says hello and then never reads: holds the connection until `stop` resolves.
pub(crate) async fn stalled(
    addr: String,
    tls: Option<Arc<rustls::ClientConfig>>,
    hostname: String,
    counters: Arc<RawCounters>,
    stop: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    let mut io = dial(&addr, tls.as_ref()).await?;
    let hs = ClientHandshake::new(ClientOffer::new(hostname), std::time::Instant::now());
    let hello = FrameEncoder::uncompressed().encode(&Message::ClientHello(hs.hello()))?;
    io.write_all(&hello).await?;
    io.flush().await?;
    counters.connected.fetch_add(1, Ordering::Relaxed);
    stop.await;
    Ok(())
}

/// A bare reader: decodes every frame until the connection ends or `stop` resolves.
pub(crate) async fn reader(
    addr: String,
    tls: Option<Arc<rustls::ClientConfig>>,
    counters: Arc<RawCounters>,
    stop: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    let mut io = dial(&addr, tls.as_ref()).await?;
    counters.connected.fetch_add(1, Ordering::Relaxed);
    let mut dec = FrameDecoder::new(Limits::CLIENT_INBOUND);
    let mut buf = BytesMut::with_capacity(64 << 10);
    let read = async {
        loop {
            while let Some(frame) = dec.decode_frame(&mut buf)? {
                dec.decode_message(&frame)?;
                counters.frames.fetch_add(1, Ordering::Relaxed);
            }
            let n = io.read_buf(&mut buf).await?;
            if n == 0 {
                return Ok::<(), anyhow::Error>(());
            }
            counters.bytes.fetch_add(n as u64, Ordering::Relaxed);
        }
    };
    tokio::select! {
        r = read => r,
        () = stop => Ok(()),
    }
}
