//! A client of Calico's Typha protocol (gob + snappy, as calico-node v3.32 speaks it), for
//! testing and measuring Calico-protocol servers: ours and Calico's own `calico-typha`. It
//! is the differential tester beside our Go reference peer (`peers/calico-peer`) and the
//! node of `loadtest`'s Calico fleet. It behaves as calico-node's Typha client does
//! (`docs/calico-protocol.md`, "The session"): the hello with decoder restart and snappy
//! offered, an ACK for each decoder restart, a pong for each ping, and updates applied in
//! order to a map of Calico keys.
//!
//! [`run`] keeps that map and returns it at the end; [`run_with`] is the same session with
//! nothing kept, each [`Event`] (the server's hello, a decoder restart, a sync status, a
//! message's updates, a ping answered, bytes read) handed to the caller as it happens: the
//! fleet's nodes keep only hashes and time each update on arrival. [`run_skimming`] is the
//! same again with each update's key and value bytes handed over where they lie, nothing
//! built per update: the fleet's cheap nodes.
//!
//! The wire codec is [`typha_protocol::calico`]: what we write is our preamble and plain
//! values, which Go's decoder reads like any gob stream.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use typha_protocol::calico::gob::{Decoded, Limits, Value};
use typha_protocol::calico::messages::{
    self, COMPRESSION_SNAPPY, ClientHello, EncodeError, Message, MessageKind, Pong,
    SerializedUpdate, ServerHello, Side, SyncStatus, UpdateType, from_gob,
};
use typha_protocol::calico::{Compression, StreamDecoder, StreamError};

/// The read buffer a session starts with.
const READ_BUFFER: usize = 64 * 1024;
/// Above this, an empty buffer is given back between messages.
const IDLE_BUFFER: usize = 256 * 1024;

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

    /// Takes one event into the state, as [`run`] does with each: updates applied in order
    /// (an empty value deletes the key), statuses, restarts and pongs counted. A caller of
    /// [`run_with`] that also wants the end state passes its events on here.
    pub fn apply(&mut self, event: Event) {
        match event {
            Event::ServerHello(h) => self.server_version = h.version,
            Event::DecoderRestart(_) => self.decoder_restarts += 1,
            Event::SyncStatus(s) => self.statuses.push(s),
            Event::PingAnswered => self.pongs += 1,
            Event::Kvs(updates) => {
                for u in updates {
                    self.updates += 1;
                    if u.value.is_empty() {
                        self.deletions += 1;
                        self.kvs.remove(&u.key);
                    } else {
                        self.kvs.insert(
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
            Event::Received(_) => {}
        }
    }
}

/// What a session sees, given to [`run_with`]'s observer as it happens, in the order of the
/// stream. The session has already done its part when the observer hears of it: the hello
/// was checked, the ACK or pong written.
#[derive(Debug)]
#[non_exhaustive]
pub enum Event {
    /// Bytes read from the connection, as read (before decoding): its traffic.
    Received(usize),
    /// The server's hello, checked: the syncer type asked for, node resource updates.
    ServerHello(ServerHello),
    /// The server restarted its stream into this compression; the ACK has been sent.
    DecoderRestart(Compression),
    /// A sync status.
    SyncStatus(SyncStatus),
    /// One `MsgKVs`: its updates in order (key, value, revision, update type; an empty value
    /// is a deletion). Given as one event so that an observer sees which updates arrived
    /// together (one message, one read).
    Kvs(Vec<SerializedUpdate>),
    /// A ping arrived and its pong has been sent.
    PingAnswered,
}

/// When [`run`] or [`run_with`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Until {
    /// As soon as the server says InSync.
    InSync,
    /// When the server closes the connection (or after this long, whichever is first).
    ClosedOr(Duration),
    /// When the server closes the connection, however long that takes: a node that lives
    /// until its session fails (or until the caller drops the future).
    Closed,
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
/// until `until`, and returns what it left. With [`Until::ClosedOr`] and [`Until::Closed`]
/// the state so far is returned when the server closes the connection (or the time is up).
/// It is [`run_with`] with [`CalicoState::apply`] as the observer.
///
/// # Errors
///
/// As [`run_with`].
pub async fn run<S>(
    conn: S,
    hello: &CalicoHello,
    until: Until,
    read_timeout: Duration,
) -> Result<CalicoState, CalicoError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut st = CalicoState::default();
    run_with(conn, hello, until, read_timeout, |e| st.apply(e)).await?;
    Ok(st)
}

/// Runs one session as [`run`] does, keeping nothing: each [`Event`] goes to `observe` as it
/// happens, so a caller keeps what it needs (a fleet node: hashes, latencies, counts) and
/// sees a status or an update when it arrives rather than at the end. `observe` runs between
/// reads of the connection: it should be quick.
///
/// Returns `Ok` when `until` is reached (InSync; the connection closed or the time up with
/// [`Until::ClosedOr`] or [`Until::Closed`]).
///
/// # Errors
///
/// [`CalicoError::Io`] when the connection failed, [`CalicoError::ReadTimeout`] when nothing
/// arrived for `read_timeout`, [`CalicoError::Stream`] when the stream is invalid,
/// [`CalicoError::Protocol`] when the server broke the protocol (a second hello, a syncer
/// type other than the one asked for, no node resource updates, a decoder restart that was
/// not offered or into an unknown compression, updates before the hello), and
/// [`CalicoError::Closed`] when it closed before InSync with [`Until::InSync`].
pub async fn run_with<S, F>(
    conn: S,
    hello: &CalicoHello,
    until: Until,
    read_timeout: Duration,
    mut observe: F,
) -> Result<(), CalicoError>
where
    S: AsyncRead + AsyncWrite + Unpin,
    F: FnMut(Event),
{
    session(
        conn,
        hello,
        until,
        read_timeout,
        &mut observe,
        None::<&mut NoHook>,
    )
    .await
}

/// The same session as [`run_with`], for a caller that needs each update's key and value
/// bytes and nothing else: a `MsgKVs` is not made into [`SerializedUpdate`]s (no strings,
/// revisions or vectors built per update) but each update's key and value are handed to
/// `each_kv` as soon as the update has arrived, before the rest of its message (an empty
/// value is a deletion), and no [`Event::Kvs`] is given to `observe`. Everything else is as
/// in [`run_with`]: the hello, ACKs, pongs, statuses, the checks and errors; the key is not
/// checked for UTF-8, and an update that is not a `SerializedUpdate` at all fails the session.
///
/// It is what a simulated node that only hashes what it receives needs: snappy and gob are
/// still read in full, as they must be to find the messages, but a `MsgKVs` is streamed
/// (`StreamDecoder::decode_gob_streaming`), so the session never holds a whole message.
///
/// # Errors
///
/// As [`run_with`], and [`CalicoError::Protocol`] for an update that is not a `SerializedUpdate`.
pub async fn run_skimming<S, F, K>(
    conn: S,
    hello: &CalicoHello,
    until: Until,
    read_timeout: Duration,
    mut observe: F,
    mut each_kv: K,
) -> Result<(), CalicoError>
where
    S: AsyncRead + AsyncWrite + Unpin,
    F: FnMut(Event),
    K: FnMut(&[u8], &[u8]),
{
    session(
        conn,
        hello,
        until,
        read_timeout,
        &mut observe,
        Some(&mut each_kv),
    )
    .await
}

/// No per-update hook ([`run_with`]): a `fn` pointer names the type of the `None`.
type NoHook = fn(&[u8], &[u8]);

/// The updates of a decoded `MsgKVs` envelope, where they lie, or `None` if it is another
/// message (or not shaped as one: [`from_gob`] then says what is wrong with it).
fn kvs_in(d: &Decoded) -> Option<&[Value]> {
    let Value::Struct(envelope) = &d.value else {
        return None;
    };
    let Some(Value::Interface(Some(c))) = envelope.get("Message") else {
        return None;
    };
    if MessageKind::from_registered_name(&c.name) != Some(MessageKind::Kvs) {
        return None;
    }
    let Value::Struct(s) = &c.value else {
        return None;
    };
    match s.get("KVs") {
        None => Some(&[]),
        Some(Value::Slice(items)) => Some(items),
        Some(_) => None,
    }
}

/// An update's key and value bytes (absent fields are empty, as Go's zero values), or `None`
/// if it is not shaped as a `SerializedUpdate`.
fn key_value(v: &Value) -> Option<(&[u8], &[u8])> {
    let Value::Struct(u) = v else { return None };
    let key = match u.get("Key") {
        None => &[][..],
        Some(Value::String(b)) => &b[..],
        Some(_) => return None,
    };
    let value = match u.get("Value") {
        None => &[][..],
        Some(Value::Bytes(b)) => &b[..],
        Some(_) => return None,
    };
    Some((key, value))
}

async fn session<S, F, K>(
    conn: S,
    hello: &CalicoHello,
    until: Until,
    read_timeout: Duration,
    observe: &mut F,
    mut each_kv: Option<&mut K>,
) -> Result<(), CalicoError>
where
    S: AsyncRead + AsyncWrite + Unpin,
    F: FnMut(Event),
    K: FnMut(&[u8], &[u8]),
{
    let (mut rd, mut wr) = tokio::io::split(conn);
    let mut out = BytesMut::new();
    out.extend_from_slice(&Side::Client.preamble());
    out.extend_from_slice(&messages::encode(Side::Client, &hello.message())?);
    wr.write_all(&out).await?;
    wr.flush().await?;

    let deadline = match until {
        Until::ClosedOr(d) => Some(tokio::time::Instant::now() + d),
        Until::InSync | Until::Closed => None,
    };
    let mut dec = StreamDecoder::new(Limits::CLIENT_INBOUND);
    let mut buf = BytesMut::with_capacity(READ_BUFFER);
    let mut hello_seen = false;
    let kvs_name = MessageKind::Kvs.registered_name();
    loop {
        // Every complete message in the buffer first. A skimming session streams each
        // `MsgKVs`: its updates are handed over as they arrive, the message never held whole.
        let mut refused: Option<&'static str> = None;
        while let Some(decoded) = match each_kv.as_mut() {
            None => dec.decode_gob(&mut buf)?,
            Some(each) => {
                let mut each_update = |item: &Value| match key_value(item) {
                    _ if !hello_seen => refused = Some("updates before the ServerHello"),
                    Some((k, v)) => each(k, v),
                    None => refused = Some("a MsgKVs update that is not a SerializedUpdate"),
                };
                dec.decode_gob_streaming(&mut buf, kvs_name.as_bytes(), b"KVs", &mut each_update)?
            }
        } {
            if let Some(why) = refused {
                return Err(CalicoError::Protocol(why.into()));
            }
            if each_kv.is_some() && kvs_in(&decoded).is_some() {
                // Its updates were handed over as they arrived.
                continue;
            }
            let msg = from_gob(&decoded).map_err(StreamError::from)?;
            match msg {
                Message::ServerHello(h) => {
                    if hello_seen {
                        return Err(CalicoError::Protocol("a second ServerHello".into()));
                    }
                    hello_seen = true;
                    check_server_hello(hello, &h)?;
                    observe(Event::ServerHello(h));
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
                    wr.write_all(&messages::encode(Side::Client, &Message::Ack)?)
                        .await?;
                    wr.flush().await?;
                    observe(Event::DecoderRestart(c));
                }
                Message::SyncStatus(s) => {
                    observe(Event::SyncStatus(s));
                    if until == Until::InSync && s == SyncStatus::InSync {
                        return Ok(());
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
                    observe(Event::PingAnswered);
                }
                Message::Kvs(updates) => {
                    if !hello_seen {
                        return Err(CalicoError::Protocol(
                            "updates before the ServerHello".into(),
                        ));
                    }
                    observe(Event::Kvs(updates));
                }
                // calico-node ignores what it does not handle.
                _ => {}
            }
        }
        // An update refused in a message still arriving.
        if let Some(why) = refused {
            return Err(CalicoError::Protocol(why.into()));
        }
        // Everything decoded: give back what a large message grew the buffers to, so an idle
        // session holds kilobytes, not the largest batch it ever read (thousands of sessions
        // in one process keep theirs for hours).
        if buf.is_empty() && buf.capacity() > IDLE_BUFFER {
            buf = BytesMut::with_capacity(READ_BUFFER);
        }
        dec.release_idle(IDLE_BUFFER);
        let read = rd.read_buf(&mut buf);
        let n = match deadline {
            Some(d) => {
                match tokio::time::timeout_at(d, tokio::time::timeout(read_timeout, read)).await {
                    Err(_) => return Ok(()),
                    Ok(r) => r.map_err(|_| CalicoError::ReadTimeout(read_timeout))??,
                }
            }
            None => tokio::time::timeout(read_timeout, read)
                .await
                .map_err(|_| CalicoError::ReadTimeout(read_timeout))??,
        };
        if n == 0 {
            return match until {
                Until::ClosedOr(_) | Until::Closed => Ok(()),
                Until::InSync => Err(CalicoError::Closed("before InSync")),
            };
        }
        observe(Event::Received(n));
    }
}

/// The checks calico-node makes of the server's hello.
fn check_server_hello(hello: &CalicoHello, h: &ServerHello) -> Result<(), CalicoError> {
    fn or_felix(t: &str) -> &str {
        if t.is_empty() { "felix" } else { t }
    }
    let (asked, got) = (or_felix(&hello.syncer_type), or_felix(&h.syncer_type));
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
    Ok(())
}
