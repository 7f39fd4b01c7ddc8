//! Handshake negotiation as pure state machines: no I/O, no clock. The caller passes every
//! received message and the current time in, and sends what comes out.
//!
//! ```text
//! client                                server
//!   ClientHello ───────────────────────▶  ServerHandshake::handle_message
//!                                          ├─ accepted: ServerHello, then the stream
//!   ClientHandshake::handle_message ◀──────┴─ rejected: Goodbye{reason}, then close
//! ```
//!
//! The server picks the highest version both speak and the intersection of features; it
//! refuses, with a [`Goodbye`] naming the reason, when there is no common version, when it
//! does not serve the requested syncer type, when the first message is not a hello, or when
//! no hello arrives before the deadline. The client checks the answer is one it could have
//! asked for.

use std::fmt;
use std::time::{Duration, Instant};

use crate::message::{
    ClientHello, CompressionSet, Direction, Epoch, Extension, Features, Goodbye, GoodbyeReason,
    Message, MessageType, ProtocolVersion, Resume, ServerHello, SyncerType,
};
use crate::model::Revision;

/// Calico Typha's default: TLS and hello must complete within 10 s.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// What was agreed: everything the rest of the connection needs from the handshake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// The version both sides speak.
    pub version: ProtocolVersion,
    /// The syncer this connection feeds.
    pub syncer_type: SyncerType,
    /// The server's epoch.
    pub epoch: Epoch,
    /// Features both sides support.
    pub features: Features,
    /// Whether frames to the peer may be zstd-compressed.
    pub peer_decodes_zstd: bool,
    /// Which side of the connection this session belongs to.
    pub side: Side,
}

/// One end of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The node agent's end.
    Client,
    /// The server's end.
    Server,
}

impl Session {
    /// Whether `msg` may be sent to the peer: it travels in our direction and the peer
    /// agreed to every feature it needs. Senders check this; a receiver that gets a message
    /// failing [`Session::may_receive`] closes the connection.
    pub fn may_send(&self, msg: &Message) -> bool {
        self.direction_ok(msg.message_type(), self.side)
            && self.features.contains(msg.required_features())
    }

    /// Whether a message of type `ty` may arrive from the peer after the handshake.
    pub fn may_receive(&self, ty: MessageType) -> bool {
        let peer = match self.side {
            Side::Client => Side::Server,
            Side::Server => Side::Client,
        };
        !matches!(ty, MessageType::ClientHello | MessageType::ServerHello)
            && self.direction_ok(ty, peer)
            && ty
                .required_feature()
                .is_none_or(|f| self.features.contains(f))
    }

    fn direction_ok(&self, ty: MessageType, sender: Side) -> bool {
        match ty.direction() {
            Direction::Both => true,
            Direction::ClientToServer => sender == Side::Client,
            Direction::ServerToClient => sender == Side::Server,
        }
    }
}

/// Why a handshake failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RejectReason {
    /// No hello (server) or answer (client) before the deadline.
    #[error("handshake not completed within {0:?}")]
    Timeout(Duration),
    /// The two sides share no protocol version.
    #[error("no common protocol version: we speak {ours:?}, the peer offered {theirs:?}")]
    NoCommonVersion {
        /// Versions this side speaks.
        ours: Vec<ProtocolVersion>,
        /// Versions the peer offered.
        theirs: Vec<ProtocolVersion>,
    },
    /// The server does not serve the syncer type the client asked for.
    #[error("syncer type {requested:?} is not served here (serving {served:?})")]
    WrongSyncerType {
        /// What the client asked for.
        requested: String,
        /// What the server serves.
        served: Vec<String>,
    },
    /// A message other than the expected hello arrived.
    #[error("expected {expected} during the handshake, got {got}")]
    UnexpectedMessage {
        /// The expected type.
        expected: MessageType,
        /// What came.
        got: MessageType,
    },
    /// The server's answer is not one the client could have asked for.
    #[error("invalid server hello: {0}")]
    InvalidServerHello(String),
    /// The server said goodbye instead of hello.
    #[error("server refused the connection: {} ({})", .0.reason, .0.message)]
    Refused(Goodbye),
    /// The handshake already finished or failed.
    #[error("handshake already finished")]
    Finished,
}

/// A failed handshake: the reason, and for the server the goodbye to send before closing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    /// Why.
    pub reason: RejectReason,
    /// What to send the peer before closing, if anything.
    pub goodbye: Option<Goodbye>,
}

impl fmt::Display for Rejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.reason.fmt(f)
    }
}

impl std::error::Error for Rejected {}

/// What a server offers to clients.
#[derive(Debug, Clone)]
pub struct ServerOffer {
    /// Versions the server speaks (default: all this build supports).
    pub versions: Vec<ProtocolVersion>,
    /// Syncer types the server serves.
    pub syncer_types: Vec<SyncerType>,
    /// Optional features the server supports.
    pub features: Features,
    /// Compression the server can decode.
    pub compression: CompressionSet,
    /// The server's epoch.
    pub epoch: Epoch,
    /// Free-form description of the server.
    pub info: String,
    /// How long a client has to say hello.
    pub timeout: Duration,
}

impl ServerOffer {
    /// Everything this build supports, for the felix syncer.
    pub fn new(epoch: Epoch) -> Self {
        Self {
            versions: ProtocolVersion::SUPPORTED.to_vec(),
            syncer_types: vec![SyncerType::Felix],
            features: Features::ALL,
            compression: CompressionSet::ZSTD,
            epoch,
            info: String::new(),
            timeout: DEFAULT_HANDSHAKE_TIMEOUT,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Waiting,
    Done,
}

/// A client's hello, accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    /// What was agreed.
    pub session: Session,
    /// The answer to send.
    pub reply: ServerHello,
    /// The client's node name.
    pub hostname: String,
    /// The client's free-form description.
    pub client_info: String,
    /// The client's resume offer, if any.
    pub resume: Option<Resume>,
    /// The resuming client's revision floor ([`Extension::REVISION_FLOOR`]), if it sent one.
    pub revision_floor: Option<Revision>,
}

/// The server's side of the handshake.
#[derive(Debug)]
pub struct ServerHandshake {
    offer: ServerOffer,
    deadline: Instant,
    state: State,
}

impl ServerHandshake {
    /// Starts waiting for a hello at `now`.
    pub fn new(offer: ServerOffer, now: Instant) -> Self {
        let deadline = now + offer.timeout;
        Self {
            offer,
            deadline,
            state: State::Waiting,
        }
    }

    /// When the client's time runs out.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Call when the deadline may have passed: a rejection if it has and no hello came.
    pub fn handle_timeout(&mut self, now: Instant) -> Option<Rejected> {
        if self.state == State::Waiting && now >= self.deadline {
            self.state = State::Done;
            Some(self.timeout())
        } else {
            None
        }
    }

    /// Handles the first message from the client.
    ///
    /// # Errors
    ///
    /// A [`Rejected`] with the goodbye to send (when there is one) when the deadline has
    /// passed ([`RejectReason::Timeout`]), the message is not a client hello
    /// ([`RejectReason::UnexpectedMessage`]), no version offered is one this side speaks
    /// ([`RejectReason::NoCommonVersion`]), or the syncer type is not the one served
    /// ([`RejectReason::WrongSyncerType`]); [`RejectReason::Finished`] when the handshake was
    /// already over. The handshake is over after this call either way.
    pub fn handle_message(&mut self, msg: Message, now: Instant) -> Result<Accepted, Rejected> {
        if self.state != State::Waiting {
            return Err(Rejected {
                reason: RejectReason::Finished,
                goodbye: None,
            });
        }
        self.state = State::Done;
        if now >= self.deadline {
            return Err(self.timeout());
        }
        let hello = match msg {
            Message::ClientHello(h) => h,
            other => {
                return Err(reject(
                    RejectReason::UnexpectedMessage {
                        expected: MessageType::ClientHello,
                        got: other.message_type(),
                    },
                    GoodbyeReason::ProtocolError,
                ));
            }
        };
        let Some(version) = self
            .offer
            .versions
            .iter()
            .filter(|v| hello.versions.contains(v))
            .max()
            .copied()
        else {
            return Err(reject(
                RejectReason::NoCommonVersion {
                    ours: self.offer.versions.clone(),
                    theirs: hello.versions.iter().take(16).copied().collect(),
                },
                GoodbyeReason::NoCommonVersion,
            ));
        };
        if !self.offer.syncer_types.contains(&hello.syncer_type) {
            return Err(reject(
                RejectReason::WrongSyncerType {
                    requested: hello.syncer_type.to_string(),
                    served: self
                        .offer
                        .syncer_types
                        .iter()
                        .map(|s| s.to_string())
                        .collect(),
                },
                GoodbyeReason::WrongSyncerType,
            ));
        }
        let features = self.offer.features.intersect(hello.features);
        let session = Session {
            version,
            syncer_type: hello.syncer_type.clone(),
            epoch: self.offer.epoch,
            features,
            peer_decodes_zstd: hello.compression.zstd(),
            side: Side::Server,
        };
        let reply = ServerHello {
            version,
            syncer_type: hello.syncer_type,
            epoch: self.offer.epoch,
            features,
            compression: self.offer.compression,
            info: self.offer.info.clone(),
            extensions: Vec::new(),
        };
        Ok(Accepted {
            session,
            reply,
            hostname: hello.hostname,
            client_info: hello.info,
            revision_floor: hello
                .resume
                .as_ref()
                .and(Extension::find_revision_floor(&hello.extensions)),
            resume: hello.resume,
        })
    }

    fn timeout(&self) -> Rejected {
        reject(
            RejectReason::Timeout(self.offer.timeout),
            GoodbyeReason::HandshakeTimeout,
        )
    }
}

fn reject(reason: RejectReason, code: GoodbyeReason) -> Rejected {
    Rejected {
        goodbye: Some(Goodbye {
            reason: code,
            message: reason.to_string(),
            redirect: Vec::new(),
        }),
        reason,
    }
}

/// What a client asks for.
#[derive(Debug, Clone)]
pub struct ClientOffer {
    /// The node's name.
    pub hostname: String,
    /// Free-form description of the client.
    pub info: String,
    /// Versions the client speaks (default: all this build supports).
    pub versions: Vec<ProtocolVersion>,
    /// The syncer wanted.
    pub syncer_type: SyncerType,
    /// Optional features the client supports.
    pub features: Features,
    /// Compression the client can decode.
    pub compression: CompressionSet,
    /// Where the client was, if reconnecting.
    pub resume: Option<Resume>,
    /// With a resume, the highest datastore revision among the changes the client has
    /// applied ([`Extension::REVISION_FLOOR`]).
    pub revision_floor: Option<Revision>,
    /// How long to wait for the server's answer.
    pub timeout: Duration,
}

impl ClientOffer {
    /// Everything this build supports, for the felix syncer.
    pub fn new(hostname: impl Into<String>) -> Self {
        Self {
            hostname: hostname.into(),
            info: String::new(),
            versions: ProtocolVersion::SUPPORTED.to_vec(),
            syncer_type: SyncerType::Felix,
            features: Features::ALL,
            compression: CompressionSet::ZSTD,
            resume: None,
            revision_floor: None,
            timeout: DEFAULT_HANDSHAKE_TIMEOUT,
        }
    }
}

/// The client's side of the handshake.
#[derive(Debug)]
pub struct ClientHandshake {
    offer: ClientOffer,
    deadline: Instant,
    state: State,
}

impl ClientHandshake {
    /// Starts a handshake at `now`; send [`ClientHandshake::hello`] first.
    pub fn new(offer: ClientOffer, now: Instant) -> Self {
        let deadline = now + offer.timeout;
        Self {
            offer,
            deadline,
            state: State::Waiting,
        }
    }

    /// The hello to send.
    pub fn hello(&self) -> ClientHello {
        ClientHello {
            hostname: self.offer.hostname.clone(),
            info: self.offer.info.clone(),
            versions: self.offer.versions.clone(),
            syncer_type: self.offer.syncer_type.clone(),
            compression: self.offer.compression,
            features: self.offer.features,
            resume: self.offer.resume.clone(),
            extensions: self
                .offer
                .resume
                .as_ref()
                .and(self.offer.revision_floor)
                .map(Extension::revision_floor)
                .into_iter()
                .collect(),
        }
    }

    /// When the server's time runs out.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Call when the deadline may have passed.
    pub fn handle_timeout(&mut self, now: Instant) -> Option<Rejected> {
        if self.state == State::Waiting && now >= self.deadline {
            self.state = State::Done;
            Some(Rejected {
                reason: RejectReason::Timeout(self.offer.timeout),
                goodbye: None,
            })
        } else {
            None
        }
    }

    /// Handles the server's answer.
    ///
    /// # Errors
    ///
    /// A [`Rejected`] (never with a goodbye: the client just closes) when the deadline has
    /// passed ([`RejectReason::Timeout`]), the server said goodbye ([`RejectReason::Refused`]),
    /// the message is neither hello nor goodbye ([`RejectReason::UnexpectedMessage`]), or the
    /// hello chose a version, syncer type or feature that was not offered
    /// ([`RejectReason::InvalidServerHello`]); [`RejectReason::Finished`] when the handshake was
    /// already over. The handshake is over after this call either way.
    pub fn handle_message(&mut self, msg: Message, now: Instant) -> Result<Session, Rejected> {
        let fail = |reason| Rejected {
            reason,
            goodbye: None,
        };
        if self.state != State::Waiting {
            return Err(fail(RejectReason::Finished));
        }
        self.state = State::Done;
        if now >= self.deadline {
            return Err(fail(RejectReason::Timeout(self.offer.timeout)));
        }
        let hello = match msg {
            Message::ServerHello(h) => h,
            Message::Goodbye(g) => return Err(fail(RejectReason::Refused(g))),
            other => {
                return Err(fail(RejectReason::UnexpectedMessage {
                    expected: MessageType::ServerHello,
                    got: other.message_type(),
                }));
            }
        };
        if !self.offer.versions.contains(&hello.version) {
            return Err(fail(RejectReason::InvalidServerHello(format!(
                "server chose {} which we did not offer",
                hello.version
            ))));
        }
        if hello.syncer_type != self.offer.syncer_type {
            return Err(fail(RejectReason::InvalidServerHello(format!(
                "server serves syncer {} but we asked for {}",
                hello.syncer_type, self.offer.syncer_type
            ))));
        }
        if !self.offer.features.contains(hello.features) {
            return Err(fail(RejectReason::InvalidServerHello(format!(
                "server enabled features {:?} we did not offer",
                Features(hello.features.0 & !self.offer.features.0)
            ))));
        }
        Ok(Session {
            version: hello.version,
            syncer_type: hello.syncer_type,
            epoch: hello.epoch,
            features: hello.features,
            peer_decodes_zstd: hello.compression.zstd(),
            side: Side::Client,
        })
    }
}

#[cfg(test)]
mod tests;
