//! A client of Calico's Typha protocol (gob + snappy, as calico-node v3.32 speaks it), for
//! testing and measuring Calico-protocol servers: ours and Calico's own `calico-typha`. It
//! is the differential tester beside our Go reference peer (`peers/calico-peer`) and the
//! node of `loadtest`'s Calico fleet. It behaves as calico-node's Typha client does
//! (`docs/calico-protocol.md`, "The session"): the hello with decoder restart and snappy
//! offered, an ACK for each decoder restart, a pong for each ping, and updates applied in
//! order to a map of Calico keys.
//!
//! The wire codec is [`typha_protocol::calico`]: what we write is our preamble and plain
//! values, which Go's decoder reads like any gob stream.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use typha_protocol::calico::gob::Limits;
use typha_protocol::calico::messages::{
    self, COMPRESSION_SNAPPY, ClientHello, EncodeError, Message, Pong, Side, SyncStatus, UpdateType,
};
use typha_protocol::calico::{Compression, StreamDecoder, StreamError};

/// What the client says in its hello.
#[derive(Debug, Clone)]
pub struct CalicoHello {
    /// `Hostname`: the node's name.
    pub hostname: String,
    /// `SyncerType`: felix, bgp, tunnel-ip-allocation or node-status.
    pub syncer_type: String,
    /// Offer decoder restart with snappy, as calico-node does.
    pub snappy: bool,
    /// `SupportsModernPolicyKeys` (Typha v3.32 refuses clients without it).
    pub modern_policy_keys: bool,
    /// `ClientConnID`.
    pub conn_id: u64,
}

impl CalicoHello {
    /// calico-node v3.32's hello for `syncer_type` from node `hostname`.
    pub fn calico_node(hostname: impl Into<String>, syncer_type: impl Into<String>) -> Self {
        Self {
            hostname: hostname.into(),
            syncer_type: syncer_type.into(),
            snappy: true,
            modern_policy_keys: true,
            conn_id: (u64::from(rand::random::<u32>()) << 32) + 1,
        }
    }

    fn message(&self) -> Message {
        Message::ClientHello(ClientHello {
            hostname: self.hostname.clone(),
            info: format!("typha-client calico module {}", env!("CARGO_PKG_VERSION")),
            version: "v3.32.0".to_owned(),
            syncer_type: self.syncer_type.clone(),
            supports_decoder_restart: self.snappy,
            supported_compression_algorithms: if self.snappy {
                vec![COMPRESSION_SNAPPY.to_owned()]
            } else {
                Vec::new()
            },
            supports_modern_policy_keys: self.modern_policy_keys,
            client_conn_id: self.conn_id,
        })
    }
}

/// One key as the client holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CalicoKv {
    /// The value as sent (JSON for most keys, a plain string for config keys).
    pub value: Bytes,
    /// The revision, as Go's `%v` prints it.
    pub revision: String,
    /// For v3 resources, their resource version.
    pub v3_resource_version: String,
    /// How it last arrived.
    pub update_type: UpdateType,
}

/// What a session left: the keys, and what happened on the way.
#[derive(Debug, Clone, Default)]
pub struct CalicoState {
    /// The server's version and syncer type, from its hello.
    pub server_version: String,
    /// Every key present, by Calico key.
    pub kvs: BTreeMap<String, CalicoKv>,
    /// Each sync status received, in order.
    pub statuses: Vec<SyncStatus>,
    /// Decoder restarts done (2 for a pre-encoded snapshot with snappy).
    pub decoder_restarts: u32,
    /// Updates received (deletions included).
    pub updates: u64,
    /// Deletions received.
    pub deletions: u64,
    /// Pings answered.
    pub pongs: u64,
}

impl CalicoState {
    /// Whether the last status received is InSync.
    pub fn in_sync(&self) -> bool {
        self.statuses.last() == Some(&SyncStatus::InSync)
    }
}

/// When [`run`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Until {
    /// As soon as the server says InSync.
    InSync,
    /// When the server closes the connection (or after this long, whichever is first).
    ClosedOr(Duration),
}

/// Why a session failed.
#[derive(Debug, thiserror::Error)]
pub enum CalicoError {
    /// Reading or writing the connection failed.
    #[error("connection: {0}")]
    Io(#[from] std::io::Error),
    /// Nothing arrived for the read timeout.
    #[error("nothing from the server for {0:?}")]
    ReadTimeout(Duration),
    /// The server's bytes are not a valid Calico stream.
    #[error("server stream: {0}")]
    Stream(#[from] StreamError),
    /// A message could not be encoded (a bug of ours).
    #[error("encoding: {0}")]
    Encode(#[from] EncodeError),
    /// The server broke the protocol as calico-node checks it.
    #[error("protocol: {0}")]
    Protocol(String),
    /// The server closed the connection before the session ended as asked.
    #[error("the server closed the connection ({0})")]
    Closed(&'static str),
}

/// Runs one session on `conn` (TCP or TLS, already connected): the hello, then messages
/// until `until`. The state so far is returned with a closed connection when `until` is
/// [`Until::ClosedOr`].
pub async fn run<S>(
    conn: S,
    hello: &CalicoHello,
    until: Until,
    read_timeout: Duration,
) -> Result<CalicoState, CalicoError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (mut rd, mut wr) = tokio::io::split(conn);
    let mut out = BytesMut::new();
    out.extend_from_slice(&Side::Client.preamble());
    out.extend_from_slice(&messages::encode(Side::Client, &hello.message())?);
    wr.write_all(&out).await?;
    wr.flush().await?;

    let deadline = match until {
        Until::ClosedOr(d) => Some(tokio::time::Instant::now() + d),
        Until::InSync => None,
    };
    let mut dec = StreamDecoder::new(Limits::CLIENT_INBOUND);
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let mut st = CalicoState::default();
    let mut hello_seen = false;
    loop {
        // Every complete message in the buffer first.
        while let Some(msg) = dec.decode(&mut buf)? {
            match msg {
                Message::ServerHello(h) => {
                    if hello_seen {
                        return Err(CalicoError::Protocol("a second ServerHello".into()));
                    }
                    hello_seen = true;
                    let asked = if hello.syncer_type.is_empty() {
                        "felix"
                    } else {
                        &hello.syncer_type
                    };
                    let got = if h.syncer_type.is_empty() {
                        "felix"
                    } else {
                        &h.syncer_type
                    };
                    if asked != got {
                        return Err(CalicoError::Protocol(format!(
                            "asked for syncer {asked}, the server serves {got}"
                        )));
                    }
                    if !h.supports_node_resource_updates {
                        return Err(CalicoError::Protocol(
                            "the server does not support node resource updates".into(),
                        ));
                    }
                    st.server_version = h.version;
                }
                Message::DecoderRestart(r) => {
                    if !hello.snappy {
                        return Err(CalicoError::Protocol(
                            "a decoder restart the client did not offer".into(),
                        ));
                    }
                    let c = Compression::from_name(&r.compression_algorithm).ok_or_else(|| {
                        CalicoError::Protocol(format!(
                            "decoder restart into unknown compression {:?}",
                            r.compression_algorithm
                        ))
                    })?;
                    dec.restart(c)?;
                    st.decoder_restarts += 1;
                    wr.write_all(&messages::encode(Side::Client, &Message::Ack)?)
                        .await?;
                    wr.flush().await?;
                }
                Message::SyncStatus(s) => {
                    st.statuses.push(s);
                    if until == Until::InSync && s == SyncStatus::InSync {
                        return Ok(st);
                    }
                }
                Message::Ping(p) => {
                    let pong = Message::Pong(Pong {
                        ping_timestamp: p.timestamp,
                        ..Pong::default()
                    });
                    wr.write_all(&messages::encode(Side::Client, &pong)?)
                        .await?;
                    wr.flush().await?;
                    st.pongs += 1;
                }
                Message::Kvs(updates) => {
                    if !hello_seen {
                        return Err(CalicoError::Protocol(
                            "updates before the ServerHello".into(),
                        ));
                    }
                    for u in updates {
                        st.updates += 1;
                        if u.value.is_empty() {
                            st.deletions += 1;
                            st.kvs.remove(&u.key);
                        } else {
                            st.kvs.insert(
                                u.key,
                                CalicoKv {
                                    value: u.value,
                                    revision: u.revision.to_string(),
                                    v3_resource_version: u.v3_resource_version,
                                    update_type: u.update_type,
                                },
                            );
                        }
                    }
                }
                // calico-node ignores what it does not handle.
                _ => {}
            }
        }
        let read = rd.read_buf(&mut buf);
        let n = match deadline {
            Some(d) => {
                match tokio::time::timeout_at(d, tokio::time::timeout(read_timeout, read)).await {
                    Err(_) => return Ok(st),
                    Ok(r) => r.map_err(|_| CalicoError::ReadTimeout(read_timeout))??,
                }
            }
            None => tokio::time::timeout(read_timeout, read)
                .await
                .map_err(|_| CalicoError::ReadTimeout(read_timeout))??,
        };
        if n == 0 {
            return match until {
                Until::ClosedOr(_) => Ok(st),
                Until::InSync => Err(CalicoError::Closed("before InSync")),
            };
        }
    }
}
