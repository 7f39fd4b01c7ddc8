//! Calico's message types, as Rust types: what `syncproto` (Calico v3.32) puts in an
//! `Envelope`, with Go's field meanings.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;

use crate::calico::gob::Value;

/// The prefix of every registered message name: the pre-monorepo import path of Calico's
/// `syncproto` package, which Calico keeps for compatibility.
pub const REGISTERED_PREFIX: &str = "github.com/projectcalico/typha/pkg/syncproto.";

/// The compression algorithm name Calico v3.32 knows: the snappy framing format.
pub const COMPRESSION_SNAPPY: &str = "snappy";

/// The `MsgDecoderRestart` text Typha sends to switch a client to snappy.
pub const RESTART_ENABLE_SNAPPY: &str = "enable compression: snappy;send binary snapshot";

/// The `MsgDecoderRestart` text Typha sends at the end of a pre-encoded snapshot.
pub const RESTART_END_OF_SNAPSHOT: &str = "End of compressed snapshot.";

/// Which message an envelope holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MessageKind {
    /// `MsgClientHello`, client to server, first.
    ClientHello,
    /// `MsgServerHello`, the server's answer.
    ServerHello,
    /// `MsgDecoderRestart`, server to client: a new gob stream follows after the client's ACK.
    DecoderRestart,
    /// `MsgACK`, client to server: acknowledges a decoder restart.
    Ack,
    /// `MsgSyncStatus`, server to client.
    SyncStatus,
    /// `MsgPing`, server to client.
    Ping,
    /// `MsgPong`, client to server.
    Pong,
    /// `MsgKVs`, server to client: a batch of updates.
    Kvs,
}

impl MessageKind {
    /// Every kind, in the order of the golden README's type table.
    pub const ALL: [MessageKind; 8] = [
        MessageKind::ClientHello,
        MessageKind::ServerHello,
        MessageKind::DecoderRestart,
        MessageKind::Ack,
        MessageKind::SyncStatus,
        MessageKind::Ping,
        MessageKind::Pong,
        MessageKind::Kvs,
    ];

    /// The Go type's name (`MsgClientHello`).
    pub fn go_name(self) -> &'static str {
        match self {
            MessageKind::ClientHello => "MsgClientHello",
            MessageKind::ServerHello => "MsgServerHello",
            MessageKind::DecoderRestart => "MsgDecoderRestart",
            MessageKind::Ack => "MsgACK",
            MessageKind::SyncStatus => "MsgSyncStatus",
            MessageKind::Ping => "MsgPing",
            MessageKind::Pong => "MsgPong",
            MessageKind::Kvs => "MsgKVs",
        }
    }

    /// The kind registered under `name` (the full registered name), if any.
    pub fn from_registered_name(name: &[u8]) -> Option<MessageKind> {
        let short = name.strip_prefix(REGISTERED_PREFIX.as_bytes())?;
        MessageKind::ALL
            .into_iter()
            .find(|k| k.go_name().as_bytes() == short)
    }

    /// The name the type is registered under: [`REGISTERED_PREFIX`] + [`Self::go_name`].
    pub fn registered_name(self) -> String {
        format!("{REGISTERED_PREFIX}{}", self.go_name())
    }
}

impl fmt::Display for MessageKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.go_name())
    }
}

/// One message of Calico's protocol: the content of an `Envelope`.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Message {
    /// `MsgClientHello`.
    ClientHello(ClientHello),
    /// `MsgServerHello`.
    ServerHello(ServerHello),
    /// `MsgDecoderRestart`.
    DecoderRestart(DecoderRestart),
    /// `MsgACK` (no fields).
    Ack,
    /// `MsgSyncStatus`.
    SyncStatus(SyncStatus),
    /// `MsgPing`.
    Ping(Ping),
    /// `MsgPong`.
    Pong(Pong),
    /// `MsgKVs`: the updates, in order.
    Kvs(Vec<SerializedUpdate>),
}

impl Message {
    /// Which message this is.
    pub fn kind(&self) -> MessageKind {
        match self {
            Message::ClientHello(_) => MessageKind::ClientHello,
            Message::ServerHello(_) => MessageKind::ServerHello,
            Message::DecoderRestart(_) => MessageKind::DecoderRestart,
            Message::Ack => MessageKind::Ack,
            Message::SyncStatus(_) => MessageKind::SyncStatus,
            Message::Ping(_) => MessageKind::Ping,
            Message::Pong(_) => MessageKind::Pong,
            Message::Kvs(_) => MessageKind::Kvs,
        }
    }
}

/// `MsgClientHello`: what the client wants and can do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientHello {
    /// The node's name.
    pub hostname: String,
    /// Free text about the client's build.
    pub info: String,
    /// The client's version (`v3.32.0`).
    pub version: String,
    /// `felix`, `bgp`, `tunnel-ip-allocation` or `node-status`; empty means felix.
    pub syncer_type: String,
    /// Whether the client handles `MsgDecoderRestart`.
    pub supports_decoder_restart: bool,
    /// Compression algorithms the client can restart into (`["snappy"]`).
    pub supported_compression_algorithms: Vec<String>,
    /// Whether the client understands the v3.32 policy keys. Typha refuses clients without.
    pub supports_modern_policy_keys: bool,
    /// The client's connection id, for logs.
    pub client_conn_id: u64,
}

/// `MsgServerHello`: the server's answer to the hello.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServerHello {
    /// The server's version.
    pub version: String,
    /// The syncer type served (the client's, echoed).
    pub syncer_type: String,
    /// Must be true: calico-node v3.32 disconnects otherwise.
    pub supports_node_resource_updates: bool,
    /// The server's connection id, for logs.
    pub server_conn_id: u64,
}

/// `MsgDecoderRestart`: after the client's `MsgACK`, a new gob stream starts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DecoderRestart {
    /// Free text: why.
    pub message: String,
    /// `""` for plain gob, [`COMPRESSION_SNAPPY`] for the snappy framing format.
    pub compression_algorithm: String,
}

/// `MsgSyncStatus`: where the server's datastore view stands (a `uint8` on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SyncStatus {
    /// 0: the datastore is not ready.
    WaitForDatastore,
    /// 1: the initial listing is being sent.
    ResyncInProgress,
    /// 2: in sync.
    InSync,
    /// Any other value: Go accepts every `uint8`.
    Other(u8),
}

impl SyncStatus {
    /// Calico's number for it.
    pub fn as_u8(self) -> u8 {
        match self {
            SyncStatus::WaitForDatastore => 0,
            SyncStatus::ResyncInProgress => 1,
            SyncStatus::InSync => 2,
            SyncStatus::Other(n) => n,
        }
    }

    /// The status numbered `n`.
    pub fn from_u8(n: u8) -> Self {
        match n {
            0 => SyncStatus::WaitForDatastore,
            1 => SyncStatus::ResyncInProgress,
            2 => SyncStatus::InSync,
            n => SyncStatus::Other(n),
        }
    }
}

impl From<crate::model::SyncStatus> for SyncStatus {
    fn from(s: crate::model::SyncStatus) -> Self {
        match s {
            crate::model::SyncStatus::WaitForDatastore => SyncStatus::WaitForDatastore,
            crate::model::SyncStatus::ResyncInProgress => SyncStatus::ResyncInProgress,
            crate::model::SyncStatus::InSync => SyncStatus::InSync,
        }
    }
}

impl SyncStatus {
    /// Our model's status, if this is one of Calico's three.
    pub fn to_model(self) -> Option<crate::model::SyncStatus> {
        match self {
            SyncStatus::WaitForDatastore => Some(crate::model::SyncStatus::WaitForDatastore),
            SyncStatus::ResyncInProgress => Some(crate::model::SyncStatus::ResyncInProgress),
            SyncStatus::InSync => Some(crate::model::SyncStatus::InSync),
            SyncStatus::Other(_) => None,
        }
    }
}

/// `MsgPing`, sent every ~10 s by the server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ping {
    /// When the server sent it.
    pub timestamp: GoTime,
}

/// `MsgPong`, the client's answer to a ping.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pong {
    /// The ping's timestamp, echoed.
    pub ping_timestamp: GoTime,
    /// Unused by Calico (left zero, so absent on the wire).
    pub pong_timestamp: GoTime,
}

/// `UpdateType`: a `uint8` on the wire. Whether an update is a deletion is decided by its
/// value being empty, not by this.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum UpdateType {
    /// 0.
    #[default]
    Unknown,
    /// 1: a new key.
    New,
    /// 2: a changed key.
    Updated,
    /// 3: a deleted key.
    Deleted,
    /// Any other value.
    Other(u8),
}

impl UpdateType {
    /// Calico's number for it.
    pub fn as_u8(self) -> u8 {
        match self {
            UpdateType::Unknown => 0,
            UpdateType::New => 1,
            UpdateType::Updated => 2,
            UpdateType::Deleted => 3,
            UpdateType::Other(n) => n,
        }
    }

    /// The update type numbered `n`.
    pub fn from_u8(n: u8) -> Self {
        match n {
            0 => UpdateType::Unknown,
            1 => UpdateType::New,
            2 => UpdateType::Updated,
            3 => UpdateType::Deleted,
            n => UpdateType::Other(n),
        }
    }
}

/// `SerializedUpdate.Revision`, a Go `interface{}`. Calico always sends a string.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub enum Revision {
    /// nil.
    #[default]
    None,
    /// A string (registered name `"string"`), what Calico sends.
    String(String),
    /// An `int64` (registered name `"int64"`).
    Int64(i64),
    /// Any other basic value, with the name it was registered under (`"int"`, `"uint64"`,
    /// ...). Encodable only if the value is of a basic gob type.
    Other {
        /// The registered name.
        name: String,
        /// The value.
        value: Value,
    },
}

impl fmt::Display for Revision {
    /// As Go's `%v` would print it, near enough for logs (Calico's client does this).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Revision::None => f.write_str("<nil>"),
            Revision::String(s) => f.write_str(s),
            Revision::Int64(i) => write!(f, "{i}"),
            Revision::Other { value, .. } => match value {
                Value::Bool(b) => write!(f, "{b}"),
                Value::Int(i) => write!(f, "{i}"),
                Value::Uint(u) => write!(f, "{u}"),
                Value::Float(x) => write!(f, "{x}"),
                Value::String(s) | Value::Bytes(s) => f.write_str(&String::from_utf8_lossy(s)),
                other => write!(f, "{other:?}"),
            },
        }
    }
}

/// One update in a `MsgKVs`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SerializedUpdate {
    /// libcalico-go's default path of the key.
    pub key: String,
    /// The value's serialization; empty means a deletion.
    pub value: Bytes,
    /// The datastore revision; Calico sends a string.
    pub revision: Revision,
    /// For v3 resources, the resource version (moved out of the value by Typha).
    pub v3_resource_version: String,
    /// Time to live in nanoseconds (a Go `time.Duration`); 0 in practice.
    pub ttl: i64,
    /// New, updated or deleted.
    pub update_type: UpdateType,
}

/// Why a time could not be read from its `GobEncode` bytes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TimeError {
    /// Not version 1 or 2 (Go: "unsupported version").
    #[error("time encoding version {0} is not supported")]
    Version(u8),
    /// Not 15 bytes for version 1, 16 for version 2 (Go: "invalid length").
    #[error("time encoding of {0} bytes has the wrong length")]
    Length(usize),
}

/// A Go `time.Time` as its `GobEncode` (`MarshalBinary`) puts it on the wire, kept as sent so
/// that a pong echoes a ping's timestamp bit for bit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GoTime {
    /// Seconds since January 1 of year 1, UTC.
    pub seconds: i64,
    /// Nanoseconds within the second (Go does not check the range).
    pub nanos: i32,
    /// Zone offset in minutes east of UTC; -1 means UTC itself.
    pub offset_minutes: i16,
    /// Version 2's extra offset seconds, if the zone's offset is not whole minutes.
    pub offset_seconds: Option<u8>,
}

impl Default for GoTime {
    fn default() -> Self {
        GoTime::ZERO
    }
}

impl GoTime {
    /// Go's zero time (January 1, year 1, UTC): left out of a struct on the wire.
    pub const ZERO: GoTime = GoTime {
        seconds: 0,
        nanos: 0,
        offset_minutes: -1,
        offset_seconds: None,
    };

    /// Seconds from January 1 of year 1 to the Unix epoch.
    pub const UNIX_TO_INTERNAL: i64 = 62_135_596_800;

    /// A UTC time `secs` and `nanos` after the Unix epoch.
    pub fn from_unix(secs: i64, nanos: u32) -> Self {
        GoTime {
            seconds: secs.saturating_add(Self::UNIX_TO_INTERNAL),
            nanos: nanos.min(999_999_999) as i32,
            offset_minutes: -1,
            offset_seconds: None,
        }
    }

    /// A UTC time from the system clock's reading (the caller reads the clock).
    pub fn from_system_time(t: SystemTime) -> Self {
        match t.duration_since(UNIX_EPOCH) {
            Ok(d) => GoTime::from_unix(d.as_secs() as i64, d.subsec_nanos()),
            Err(e) => {
                let d = e.duration();
                let (mut secs, mut nanos) = (-(d.as_secs() as i64), d.subsec_nanos());
                if nanos > 0 {
                    secs -= 1;
                    nanos = 1_000_000_000 - nanos;
                }
                GoTime::from_unix(secs, nanos)
            }
        }
    }

    /// The instant as a `SystemTime`, if it is one (`None` for times before the epoch).
    pub fn to_system_time(&self) -> Option<SystemTime> {
        let secs = self.seconds.checked_sub(Self::UNIX_TO_INTERNAL)?;
        let secs = u64::try_from(secs).ok()?;
        let nanos = u32::try_from(self.nanos).ok()?;
        UNIX_EPOCH
            .checked_add(Duration::new(secs, 0))?
            .checked_add(Duration::from_nanos(u64::from(nanos)))
    }

    /// Whether this is Go's zero time (then a struct field holding it is left out).
    pub fn is_zero(&self) -> bool {
        let offset =
            i32::from(self.offset_minutes) * 60 + i32::from(self.offset_seconds.unwrap_or(0));
        self.seconds == 0 && self.nanos == 0 && offset == -60
    }

    /// The `GobEncode` bytes: version, seconds, nanoseconds, offset (and offset seconds).
    pub fn to_gob_bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(16);
        b.push(if self.offset_seconds.is_some() { 2 } else { 1 });
        b.extend_from_slice(&self.seconds.to_be_bytes());
        b.extend_from_slice(&self.nanos.to_be_bytes());
        b.extend_from_slice(&self.offset_minutes.to_be_bytes());
        if let Some(s) = self.offset_seconds {
            b.push(s);
        }
        b
    }

    /// Reads `GobEncode` bytes, as Go's `UnmarshalBinary` accepts them.
    ///
    /// # Errors
    ///
    /// [`TimeError::Version`] for a version byte other than 1 or 2; [`TimeError::Length`] when the
    /// length is not 15 bytes (version 1) or 16 (version 2).
    pub fn from_gob_bytes(b: &[u8]) -> Result<Self, TimeError> {
        let version = *b.first().ok_or(TimeError::Length(0))?;
        let want = match version {
            1 => 15,
            2 => 16,
            v => return Err(TimeError::Version(v)),
        };
        if b.len() != want {
            return Err(TimeError::Length(b.len()));
        }
        let mut seconds = [0u8; 8];
        let mut nanos = [0u8; 4];
        let mut offset = [0u8; 2];
        seconds.copy_from_slice(b.get(1..9).ok_or(TimeError::Length(b.len()))?);
        nanos.copy_from_slice(b.get(9..13).ok_or(TimeError::Length(b.len()))?);
        offset.copy_from_slice(b.get(13..15).ok_or(TimeError::Length(b.len()))?);
        Ok(GoTime {
            seconds: i64::from_be_bytes(seconds),
            nanos: i32::from_be_bytes(nanos),
            offset_minutes: i16::from_be_bytes(offset),
            offset_seconds: if version == 2 {
                b.get(15).copied()
            } else {
                None
            },
        })
    }
}
