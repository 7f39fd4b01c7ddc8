//! Protocol messages and their payload encoding (postcard).
//!
//! The message type travels in the frame header, outside the payload (see [`crate::frame`]),
//! so a receiver rejects a type it does not know before reading a byte of payload.
//!
//! Compatibility rules (protocol v1 and every later version):
//! - `ClientHello`, `ServerHello` and `Goodbye` keep their type numbers and field layout
//!   forever, so any two versions can always negotiate, or refuse each other with a reason.
//!   They grow only through their `extensions` list, which receivers skip when unknown.
//! - Every other message is sent only when the peer advertised it: through the negotiated
//!   protocol version, or a feature flag ([`MessageType::required_feature`]).
//! - Values inside updates are opaque bytes whose schema belongs to the negotiated version.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::digest::{BucketSet, StateDigest};
use crate::model::{Revision, SyncStatus, Update};

/// A protocol version number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ProtocolVersion(pub u16);

impl ProtocolVersion {
    /// The first version, described in `docs/protocol.md`.
    pub const V1: ProtocolVersion = ProtocolVersion(1);
    /// Versions this build speaks, highest first.
    pub const SUPPORTED: &'static [ProtocolVersion] = &[ProtocolVersion::V1];
}

impl fmt::Display for ProtocolVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}", self.0)
    }
}

/// Optional capabilities, as a bit set. Unknown bits from a newer peer are kept on the wire
/// and dropped by intersection, so adding a flag never breaks an older peer.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Features(pub u64);

impl Features {
    /// No optional features.
    pub const NONE: Features = Features(0);
    /// The client sends [`Ack`] messages with the last sequence number it applied; the
    /// server uses them for propagation-latency metrics.
    pub const ACK: Features = Features(1 << 0);
    /// The server may resynchronise only the digest buckets that differ
    /// ([`SnapshotScope::Buckets`]) instead of sending a full snapshot.
    pub const BUCKET_RESYNC: Features = Features(1 << 1);
    /// The server may answer a resume cursor with only the missed deltas.
    pub const DELTA_RESUME: Features = Features(1 << 2);
    /// The client understands [`Staleness`]: the server says when its view of the datastore
    /// has not been confirmed current for too long, and when it is again.
    pub const STALENESS: Features = Features(1 << 3);
    /// The client carries keys of kinds added after version 1, and keys of kinds it does not
    /// know at all, without refusing the message: a kind it knows is applied as any other, one
    /// it does not know is kept as an opaque entry that counts in its digest and is never
    /// reported (docs/protocol.md, "Adding a kind"). A client without it is sent the version 1
    /// view: no such keys, and digests without them.
    pub const OPAQUE_KINDS: Features = Features(1 << 4);
    /// Everything this build implements.
    pub const ALL: Features = Features(
        Features::ACK.0
            | Features::BUCKET_RESYNC.0
            | Features::DELTA_RESUME.0
            | Features::STALENESS.0
            | Features::OPAQUE_KINDS.0,
    );

    /// Flags present in both sets.
    pub fn intersect(self, other: Features) -> Features {
        Features(self.0 & other.0)
    }

    /// Whether every flag of `other` is in `self`.
    pub fn contains(self, other: Features) -> bool {
        self.0 & other.0 == other.0
    }

    /// The union of both sets.
    pub fn with(self, other: Features) -> Features {
        Features(self.0 | other.0)
    }
}

impl fmt::Debug for Features {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = [
            (Features::ACK, "ACK"),
            (Features::BUCKET_RESYNC, "BUCKET_RESYNC"),
            (Features::DELTA_RESUME, "DELTA_RESUME"),
            (Features::STALENESS, "STALENESS"),
            (Features::OPAQUE_KINDS, "OPAQUE_KINDS"),
        ];
        let mut set = f.debug_set();
        let mut known = 0;
        for (flag, name) in names {
            if self.contains(flag) {
                set.entry(&format_args!("{name}"));
            }
            known |= flag.0;
        }
        if self.0 & !known != 0 {
            set.entry(&format_args!("{:#x}", self.0 & !known));
        }
        set.finish()
    }
}

/// Compression algorithms a peer can decode, as a bit set. Uncompressed is always allowed.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CompressionSet(pub u8);

impl CompressionSet {
    /// Uncompressed frames only.
    pub const NONE: CompressionSet = CompressionSet(0);
    /// zstd, each frame compressed on its own.
    pub const ZSTD: CompressionSet = CompressionSet(1 << 0);

    /// Whether zstd is in the set.
    pub fn zstd(self) -> bool {
        self.0 & Self::ZSTD.0 != 0
    }

    /// Algorithms in both sets.
    pub fn intersect(self, other: CompressionSet) -> CompressionSet {
        CompressionSet(self.0 & other.0)
    }
}

impl fmt::Debug for CompressionSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.zstd() {
            write!(f, "CompressionSet(zstd)")
        } else {
            write!(f, "CompressionSet(none)")
        }
    }
}

/// Which syncer a connection feeds, as in Calico: one pipeline per type.
/// Travels as its name, so an unknown name from a newer peer is refused with a clear reason
/// instead of failing to decode.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SyncerType {
    /// Everything Felix needs (`felix`).
    Felix,
    /// BGP data for confd/BIRD (`bgp`).
    Bgp,
    /// Tunnel IP allocation (`tunnel-ip-allocation`).
    TunnelIpAllocation,
    /// Node status (`node-status`).
    NodeStatus,
    /// A name this build does not know.
    Unknown(String),
}

impl SyncerType {
    /// The wire name.
    pub fn as_str(&self) -> &str {
        match self {
            SyncerType::Felix => "felix",
            SyncerType::Bgp => "bgp",
            SyncerType::TunnelIpAllocation => "tunnel-ip-allocation",
            SyncerType::NodeStatus => "node-status",
            SyncerType::Unknown(s) => s,
        }
    }

    /// Parses a wire name; unknown names become [`SyncerType::Unknown`].
    pub fn from_name(s: &str) -> Self {
        match s {
            "felix" => SyncerType::Felix,
            "bgp" => SyncerType::Bgp,
            "tunnel-ip-allocation" => SyncerType::TunnelIpAllocation,
            "node-status" => SyncerType::NodeStatus,
            other => SyncerType::Unknown(other.chars().take(64).collect()),
        }
    }
}

impl fmt::Display for SyncerType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for SyncerType {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for SyncerType {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s: &str = Deserialize::deserialize(d)?;
        Ok(SyncerType::from_name(s))
    }
}

/// A server's identity for one run: random at start, so sequence numbers from an earlier run
/// or another replica are never mistaken for this one's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Epoch(pub u64);

impl fmt::Display for Epoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// A breadcrumb sequence number within one epoch; increases by one per breadcrumb.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Seq(pub u64);

impl fmt::Display for Seq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Where a client was: the last state it fully applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Cursor {
    /// The epoch of the server that sent it.
    pub epoch: Epoch,
    /// The last sequence number applied.
    pub seq: Seq,
}

/// What a reconnecting client offers so the server can send less than a full snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resume {
    /// Last position applied, if the client tracks it.
    pub cursor: Option<Cursor>,
    /// Digest of the client's current state, if it keeps one.
    pub digest: Option<StateDigest>,
}

/// A hello extension: skipped by receivers that do not know its id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Extension {
    /// Extension id.
    pub id: u16,
    /// Extension payload, meaning defined by the id.
    #[serde(with = "byte_vec")]
    pub data: Vec<u8>,
}

impl Extension {
    /// A resuming client's revision floor (client hello; 8 bytes, a `u64` little-endian):
    /// the highest datastore revision among the changes it has applied. Replicas watch the
    /// datastore independently, so the one a client moves to may be behind the one it left
    /// (a restarted replica reports in sync once its listing is loaded, before its watch has
    /// replayed what was written meanwhile); resumed from such a replica the client would be
    /// sent older values than it has. A server whose replicas share the datastore's revisions
    /// (etcd, Kubernetes) holds such a client until its cache has reached the floor, for a
    /// bounded time.
    pub const REVISION_FLOOR: u16 = 1;

    /// The revision floor extension.
    pub fn revision_floor(r: Revision) -> Extension {
        Extension {
            id: Self::REVISION_FLOOR,
            data: r.0.to_le_bytes().to_vec(),
        }
    }

    /// The revision floor among `extensions`, if one is there and well formed (a malformed
    /// one is ignored, as an unknown extension is).
    pub fn find_revision_floor(extensions: &[Extension]) -> Option<Revision> {
        extensions
            .iter()
            .filter(|e| e.id == Self::REVISION_FLOOR)
            .find_map(|e| <[u8; 8]>::try_from(e.data.as_slice()).ok())
            .map(|b| Revision(u64::from_le_bytes(b)))
    }
}

/// The first message of a connection, client to server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientHello {
    /// Node name of the client.
    pub hostname: String,
    /// Free-form description (program, version, build), for logs.
    pub info: String,
    /// Protocol versions the client speaks.
    pub versions: Vec<ProtocolVersion>,
    /// Which syncer the client wants.
    pub syncer_type: SyncerType,
    /// Compression the client can decode.
    pub compression: CompressionSet,
    /// Features the client supports.
    pub features: Features,
    /// Where the client was, for resume.
    pub resume: Option<Resume>,
    /// Extensions; unknown ids are ignored.
    pub extensions: Vec<Extension>,
}

/// The server's answer to an acceptable hello.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerHello {
    /// The version both sides now speak.
    pub version: ProtocolVersion,
    /// The syncer this connection feeds.
    pub syncer_type: SyncerType,
    /// The server's epoch.
    pub epoch: Epoch,
    /// Features both sides support.
    pub features: Features,
    /// Compression the server can decode (for client-to-server frames).
    pub compression: CompressionSet,
    /// Free-form description of the server, for logs.
    pub info: String,
    /// Extensions; unknown ids are ignored.
    pub extensions: Vec<Extension>,
}

/// Why a peer is closing the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum GoodbyeReason {
    /// The server is shutting down or draining.
    Shutdown,
    /// The server is at its connection limit.
    TooManyConnections,
    /// The server is moving connections to balance load.
    Rebalance,
    /// No protocol version in common.
    NoCommonVersion,
    /// The server does not serve the requested syncer type.
    WrongSyncerType,
    /// No hello within the handshake timeout.
    HandshakeTimeout,
    /// No pong within the pong timeout.
    PingTimeout,
    /// The client fell too far behind.
    FellBehind,
    /// The peer broke the protocol.
    ProtocolError,
    /// A code this build does not know.
    Other(u16),
}

impl GoodbyeReason {
    /// The wire code.
    pub fn code(self) -> u16 {
        match self {
            GoodbyeReason::Shutdown => 1,
            GoodbyeReason::TooManyConnections => 2,
            GoodbyeReason::Rebalance => 3,
            GoodbyeReason::NoCommonVersion => 4,
            GoodbyeReason::WrongSyncerType => 5,
            GoodbyeReason::HandshakeTimeout => 6,
            GoodbyeReason::PingTimeout => 7,
            GoodbyeReason::FellBehind => 8,
            GoodbyeReason::ProtocolError => 9,
            GoodbyeReason::Other(c) => c,
        }
    }

    /// From a wire code.
    pub fn from_code(c: u16) -> Self {
        match c {
            1 => GoodbyeReason::Shutdown,
            2 => GoodbyeReason::TooManyConnections,
            3 => GoodbyeReason::Rebalance,
            4 => GoodbyeReason::NoCommonVersion,
            5 => GoodbyeReason::WrongSyncerType,
            6 => GoodbyeReason::HandshakeTimeout,
            7 => GoodbyeReason::PingTimeout,
            8 => GoodbyeReason::FellBehind,
            9 => GoodbyeReason::ProtocolError,
            c => GoodbyeReason::Other(c),
        }
    }

    /// Whether the client should reconnect (elsewhere) rather than give up.
    pub fn should_reconnect(self) -> bool {
        !matches!(
            self,
            GoodbyeReason::NoCommonVersion | GoodbyeReason::WrongSyncerType
        )
    }
}

impl fmt::Display for GoodbyeReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GoodbyeReason::Shutdown => f.write_str("server shutting down"),
            GoodbyeReason::TooManyConnections => f.write_str("server at its connection limit"),
            GoodbyeReason::Rebalance => f.write_str("rebalancing connections"),
            GoodbyeReason::NoCommonVersion => f.write_str("no protocol version in common"),
            GoodbyeReason::WrongSyncerType => f.write_str("syncer type not served"),
            GoodbyeReason::HandshakeTimeout => f.write_str("handshake timed out"),
            GoodbyeReason::PingTimeout => f.write_str("no pong in time"),
            GoodbyeReason::FellBehind => f.write_str("client fell too far behind"),
            GoodbyeReason::ProtocolError => f.write_str("protocol error"),
            GoodbyeReason::Other(c) => write!(f, "reason code {c}"),
        }
    }
}

impl Serialize for GoodbyeReason {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.code().serialize(s)
    }
}

impl<'de> Deserialize<'de> for GoodbyeReason {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(GoodbyeReason::from_code(u16::deserialize(d)?))
    }
}

/// The last message before a close, in either direction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Goodbye {
    /// Why.
    pub reason: GoodbyeReason,
    /// Human-readable detail.
    pub message: String,
    /// Other servers the client may try (`host:port`), best first.
    pub redirect: Vec<String>,
}

/// A liveness probe, server to client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ping {
    /// The sender's clock, microseconds; opaque to the receiver, echoed in the pong.
    pub timestamp_micros: u64,
}

/// The answer to a [`Ping`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pong {
    /// The ping's timestamp, echoed.
    pub ping_timestamp_micros: u64,
}

/// Which keys a snapshot covers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SnapshotScope {
    /// Every key.
    Full,
    /// Only keys in these digest buckets (needs [`Features::BUCKET_RESYNC`]).
    Buckets(BucketSet),
}

/// Starts a snapshot: until [`SnapshotEnd`], chunks carry every key in `scope` as of `seq`.
/// On the end marker the client drops its keys in `scope` that were not sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotBegin {
    /// The state the snapshot describes.
    pub seq: Seq,
    /// Which keys it covers.
    pub scope: SnapshotScope,
    /// Number of KVs the chunks will carry (for progress and a sanity check).
    pub kvs: u64,
}

/// Part of a snapshot: KVs present at the snapshot's `seq` (never deletions).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotChunk {
    /// The KVs.
    pub updates: Vec<Update>,
}

/// Ends a snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotEnd {
    /// The state now reached.
    pub seq: Seq,
    /// [`StateDigest::combined`] of the server's whole state at `seq`, for the client to
    /// check its own against.
    pub digest: u64,
}

/// Changes that take the client from `from_seq` to `seq`. Consecutive breadcrumbs have
/// `seq = from_seq + 1`; a coalesced catch-up spans many and carries only the latest value of
/// each changed key. A client whose position is not `from_seq` has missed something and must
/// resynchronise.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deltas {
    /// The position these deltas apply on top of.
    pub from_seq: Seq,
    /// The position reached after applying them.
    pub seq: Seq,
    /// [`StateDigest::combined`] of the state at `seq`.
    pub digest: u64,
    /// The changes, in order.
    pub updates: Vec<Update>,
}

/// The client has applied everything up to `seq` (needs [`Features::ACK`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ack {
    /// Last sequence number applied.
    pub seq: Seq,
}

/// Whether the server's view of the datastore is current (needs [`Features::STALENESS`]).
///
/// A server confirms its view with every watch event, bookmark or progress notification,
/// successful listing or probe; when that has not happened for longer than its threshold
/// (the datastore is down, unreachable or refusing it), it is stale: the state it serves is
/// consistent but may be old. Sent right after the [`ServerHello`] (before any data), then
/// whenever it changes. The sync status is separate: a stale server stays InSync, and agents
/// keep what they have.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Staleness {
    /// Whether the view is stale.
    pub stale: bool,
    /// How long ago the view was last confirmed current, when the message was sent (0 if
    /// never confirmed). The receiver adds the time since it received it.
    pub age_millis: u64,
    /// The last failure talking to the datastore (empty if none); at most
    /// [`Staleness::MAX_REASON`] bytes.
    pub reason: String,
}

impl Staleness {
    /// The longest reason sent.
    pub const MAX_REASON: usize = 512;

    /// A report, its reason cut to [`Staleness::MAX_REASON`] bytes on a character boundary.
    pub fn new(stale: bool, age: std::time::Duration, reason: &str) -> Self {
        let mut end = reason.len().min(Self::MAX_REASON);
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        Staleness {
            stale,
            age_millis: u64::try_from(age.as_millis()).unwrap_or(u64::MAX),
            reason: reason.get(..end).unwrap_or_default().to_owned(),
        }
    }

    /// [`Staleness::age_millis`] as a duration.
    pub fn age(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.age_millis)
    }
}

/// Which way a message may travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Only from client to server.
    ClientToServer,
    /// Only from server to client.
    ServerToClient,
    /// Either way.
    Both,
}

/// A message type number, as carried in the frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
#[non_exhaustive]
pub enum MessageType {
    /// [`ClientHello`]
    ClientHello = 1,
    /// [`ServerHello`]
    ServerHello = 2,
    /// [`Goodbye`]
    Goodbye = 3,
    /// [`Ping`]
    Ping = 4,
    /// [`Pong`]
    Pong = 5,
    /// [`SyncStatus`]
    SyncStatus = 6,
    /// [`SnapshotBegin`]
    SnapshotBegin = 7,
    /// [`SnapshotChunk`]
    SnapshotChunk = 8,
    /// [`SnapshotEnd`]
    SnapshotEnd = 9,
    /// [`Deltas`]
    Deltas = 10,
    /// [`Ack`]
    Ack = 11,
    /// [`Staleness`]
    Staleness = 12,
}

impl MessageType {
    /// Every v1 message type.
    pub const ALL: [MessageType; 12] = [
        MessageType::ClientHello,
        MessageType::ServerHello,
        MessageType::Goodbye,
        MessageType::Ping,
        MessageType::Pong,
        MessageType::SyncStatus,
        MessageType::SnapshotBegin,
        MessageType::SnapshotChunk,
        MessageType::SnapshotEnd,
        MessageType::Deltas,
        MessageType::Ack,
        MessageType::Staleness,
    ];

    /// From the header byte; `None` for a type this build does not know.
    pub fn from_u8(b: u8) -> Option<Self> {
        Self::ALL.into_iter().find(|t| *t as u8 == b)
    }

    /// A stable lower-case name, for logs and metric labels.
    pub fn name(self) -> &'static str {
        match self {
            MessageType::ClientHello => "client_hello",
            MessageType::ServerHello => "server_hello",
            MessageType::Goodbye => "goodbye",
            MessageType::Ping => "ping",
            MessageType::Pong => "pong",
            MessageType::SyncStatus => "sync_status",
            MessageType::SnapshotBegin => "snapshot_begin",
            MessageType::SnapshotChunk => "snapshot_chunk",
            MessageType::SnapshotEnd => "snapshot_end",
            MessageType::Deltas => "deltas",
            MessageType::Ack => "ack",
            MessageType::Staleness => "staleness",
        }
    }

    /// Which way it travels.
    pub fn direction(self) -> Direction {
        match self {
            MessageType::ClientHello | MessageType::Pong | MessageType::Ack => {
                Direction::ClientToServer
            }
            MessageType::Goodbye => Direction::Both,
            _ => Direction::ServerToClient,
        }
    }

    /// The feature the receiver must have advertised before this type may be sent to it.
    pub fn required_feature(self) -> Option<Features> {
        match self {
            MessageType::Ack => Some(Features::ACK),
            MessageType::Staleness => Some(Features::STALENESS),
            _ => None,
        }
    }
}

impl fmt::Display for MessageType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Any protocol message.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Message {
    /// See [`ClientHello`].
    ClientHello(ClientHello),
    /// See [`ServerHello`].
    ServerHello(ServerHello),
    /// See [`Goodbye`].
    Goodbye(Goodbye),
    /// See [`Ping`].
    Ping(Ping),
    /// See [`Pong`].
    Pong(Pong),
    /// The server's sync status changed.
    SyncStatus(SyncStatus),
    /// See [`SnapshotBegin`].
    SnapshotBegin(SnapshotBegin),
    /// See [`SnapshotChunk`].
    SnapshotChunk(SnapshotChunk),
    /// See [`SnapshotEnd`].
    SnapshotEnd(SnapshotEnd),
    /// See [`Deltas`].
    Deltas(Deltas),
    /// See [`Ack`].
    Ack(Ack),
    /// See [`Staleness`].
    Staleness(Staleness),
}

/// A payload that does not decode as its message type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PayloadError {
    /// The bytes are not a message of this type.
    #[error("{message_type} payload: {source}")]
    Decode {
        /// The type from the frame header.
        message_type: MessageType,
        /// Why they do not decode.
        source: postcard::Error,
    },
    /// The message ends before the payload does.
    #[error("{message_type} payload: {len} trailing bytes")]
    TrailingBytes {
        /// The type from the frame header.
        message_type: MessageType,
        /// How many bytes follow the message.
        len: usize,
    },
}

impl PayloadError {
    /// The type from the frame header.
    pub fn message_type(&self) -> MessageType {
        match self {
            PayloadError::Decode { message_type, .. }
            | PayloadError::TrailingBytes { message_type, .. } => *message_type,
        }
    }
}

impl Message {
    /// The header type of this message.
    pub fn message_type(&self) -> MessageType {
        match self {
            Message::ClientHello(_) => MessageType::ClientHello,
            Message::ServerHello(_) => MessageType::ServerHello,
            Message::Goodbye(_) => MessageType::Goodbye,
            Message::Ping(_) => MessageType::Ping,
            Message::Pong(_) => MessageType::Pong,
            Message::SyncStatus(_) => MessageType::SyncStatus,
            Message::SnapshotBegin(_) => MessageType::SnapshotBegin,
            Message::SnapshotChunk(_) => MessageType::SnapshotChunk,
            Message::SnapshotEnd(_) => MessageType::SnapshotEnd,
            Message::Deltas(_) => MessageType::Deltas,
            Message::Ack(_) => MessageType::Ack,
            Message::Staleness(_) => MessageType::Staleness,
        }
    }

    /// Features the receiver must have agreed to before this message may be sent to it:
    /// the type's own requirement, plus any its content needs.
    pub fn required_features(&self) -> Features {
        let mut f = self
            .message_type()
            .required_feature()
            .unwrap_or(Features::NONE);
        if let Message::SnapshotBegin(SnapshotBegin {
            scope: SnapshotScope::Buckets(_),
            ..
        }) = self
        {
            f = f.with(Features::BUCKET_RESYNC);
        }
        f
    }

    /// Appends the postcard payload to `out`.
    ///
    /// # Errors
    ///
    /// postcard's error, which it does not return for the protocol's types (every field serializes).
    /// `out` is left empty then.
    pub fn encode_payload(&self, out: &mut Vec<u8>) -> Result<(), postcard::Error> {
        let buf = std::mem::take(out);
        *out = match self {
            Message::ClientHello(m) => postcard::to_extend(m, buf),
            Message::ServerHello(m) => postcard::to_extend(m, buf),
            Message::Goodbye(m) => postcard::to_extend(m, buf),
            Message::Ping(m) => postcard::to_extend(m, buf),
            Message::Pong(m) => postcard::to_extend(m, buf),
            Message::SyncStatus(m) => postcard::to_extend(m, buf),
            Message::SnapshotBegin(m) => postcard::to_extend(m, buf),
            Message::SnapshotChunk(m) => postcard::to_extend(m, buf),
            Message::SnapshotEnd(m) => postcard::to_extend(m, buf),
            Message::Deltas(m) => postcard::to_extend(m, buf),
            Message::Ack(m) => postcard::to_extend(m, buf),
            Message::Staleness(m) => postcard::to_extend(m, buf),
        }?;
        Ok(())
    }

    /// Decodes a payload of type `ty`. The whole payload must be consumed.
    ///
    /// # Errors
    ///
    /// [`PayloadError::Decode`] when the bytes are not a message of type `ty` (this includes a key,
    /// value or field the types refuse while they are read); [`PayloadError::TrailingBytes`] when
    /// bytes follow the message.
    pub fn decode_payload(ty: MessageType, payload: &[u8]) -> Result<Message, PayloadError> {
        fn take<'a, T: Deserialize<'a>>(ty: MessageType, p: &'a [u8]) -> Result<T, PayloadError> {
            match postcard::take_from_bytes::<T>(p) {
                Ok((v, [])) => Ok(v),
                Ok((_, rest)) => Err(PayloadError::TrailingBytes {
                    message_type: ty,
                    len: rest.len(),
                }),
                Err(source) => Err(PayloadError::Decode {
                    message_type: ty,
                    source,
                }),
            }
        }
        Ok(match ty {
            MessageType::ClientHello => Message::ClientHello(take(ty, payload)?),
            MessageType::ServerHello => Message::ServerHello(take(ty, payload)?),
            MessageType::Goodbye => Message::Goodbye(take(ty, payload)?),
            MessageType::Ping => Message::Ping(take(ty, payload)?),
            MessageType::Pong => Message::Pong(take(ty, payload)?),
            MessageType::SyncStatus => Message::SyncStatus(take(ty, payload)?),
            MessageType::SnapshotBegin => Message::SnapshotBegin(take(ty, payload)?),
            MessageType::SnapshotChunk => Message::SnapshotChunk(take(ty, payload)?),
            MessageType::SnapshotEnd => Message::SnapshotEnd(take(ty, payload)?),
            MessageType::Deltas => Message::Deltas(take(ty, payload)?),
            MessageType::Ack => Message::Ack(take(ty, payload)?),
            MessageType::Staleness => Message::Staleness(take(ty, payload)?),
        })
    }
}

/// `Vec<u8>` as a byte string (length + raw bytes) rather than a sequence of u8.
mod byte_vec {
    use serde::{Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(v)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Vec<u8>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a byte string")
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
                Ok(v.to_vec())
            }
        }
        d.deserialize_bytes(V)
    }
}
