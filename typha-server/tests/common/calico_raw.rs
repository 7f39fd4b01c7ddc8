//! A Calico client of our own making (plain TCP, our gob encoder), for what the Go peer will
//! not do: ask for a syncer type nobody serves, never answer a ping, connect by the dozen.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use typha_protocol::calico::StreamDecoder;
use typha_protocol::calico::gob::Limits;
use typha_protocol::calico::messages::{ClientHello, Message, Side, encode};

/// A Calico-protocol connection that has sent its hello.
pub struct Raw {
    pub tcp: tokio::net::TcpStream,
    pub dec: StreamDecoder,
    pub buf: bytes::BytesMut,
}

impl Raw {
    /// Connects to `addr` and sends the hello of `hostname` for `syncer` (`modern`:
    /// `SupportsModernPolicyKeys`), no compression offered.
    pub async fn hello(addr: SocketAddr, hostname: &str, syncer: &str, modern: bool) -> Raw {
        let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let hello = Message::ClientHello(ClientHello {
            hostname: hostname.into(),
            version: "v3.32.0".into(),
            syncer_type: syncer.into(),
            supports_modern_policy_keys: modern,
            ..Default::default()
        });
        let mut bytes = Side::Client.preamble().to_vec();
        bytes.extend_from_slice(&encode(Side::Client, &hello).unwrap());
        tcp.write_all(&bytes).await.unwrap();
        Raw {
            tcp,
            dec: StreamDecoder::new(Limits::CLIENT_INBOUND),
            buf: bytes::BytesMut::new(),
        }
    }

    /// Every message until the server closes the connection (within 20 s).
    pub async fn until_closed(&mut self) -> Vec<Message> {
        let mut got = Vec::new();
        let deadline = tokio::time::Instant::now() + super::WAIT;
        loop {
            while let Some(m) = self.dec.decode(&mut self.buf).unwrap() {
                got.push(m);
            }
            let n = tokio::time::timeout_at(deadline, self.tcp.read_buf(&mut self.buf))
                .await
                .expect("the server should have closed the connection")
                .unwrap_or(0);
            if n == 0 {
                return got;
            }
        }
    }
}
