//! The label values of our metrics: each label takes its values from one of these fixed sets
//! (never a node name, an address or a connection id).

/// Kinds of frames the server encodes.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum FrameKind {
    /// One breadcrumb's deltas.
    delta,
    /// A coalesced span of breadcrumbs for lagging clients.
    span,
    /// A chunk (or marker) of a full snapshot.
    snapshot,
    /// A chunk of a digest bucket.
    bucket,
    /// One breadcrumb's `MsgKVs` for Calico clients of one syncer type (plain or snappy).
    calico_delta,
    /// A `MsgKVs` of a Calico snapshot of one syncer type (plain or snappy).
    calico_snapshot,
}

impl FrameKind {
    pub(super) const ALL: [FrameKind; 6] = [
        Self::delta,
        Self::span,
        Self::snapshot,
        Self::bucket,
        Self::calico_delta,
        Self::calico_snapshot,
    ];

    pub(super) fn label(self) -> &'static str {
        match self {
            Self::delta => "delta",
            Self::span => "span",
            Self::snapshot => "snapshot",
            Self::bucket => "bucket",
            Self::calico_delta => "calico_delta",
            Self::calico_snapshot => "calico_snapshot",
        }
    }
}

/// How a connecting client was brought up to date.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum ResumeKind {
    /// Only the missed deltas (same epoch, inside the history window).
    deltas,
    /// Only the digest buckets that differ.
    digest,
    /// A full snapshot.
    snapshot,
}

impl ResumeKind {
    pub(super) const ALL: [ResumeKind; 3] = [Self::deltas, Self::digest, Self::snapshot];

    /// The label value (also its name on `/status`).
    pub fn label(self) -> &'static str {
        match self {
            Self::deltas => "deltas",
            Self::digest => "digest",
            Self::snapshot => "snapshot",
        }
    }
}

/// Why a connection was closed by the server.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum DropReason {
    /// Over the connection limit.
    too_many_connections,
    /// Handshake failed or timed out.
    handshake,
    /// Client certificate not allowed.
    tls_identity,
    /// No pong in time.
    ping_timeout,
    /// A write stalled past the write timeout.
    write_timeout,
    /// Past the fall-behind limit.
    fell_behind,
    /// Malformed or unexpected input.
    protocol_error,
    /// Shutting down.
    shutdown,
    /// Moved to a less loaded replica (connection balancing).
    rebalance,
    /// A frame it needed could not be encoded (a bug, logged at error where it happened):
    /// the client must resync rather than miss a change.
    encode_error,
}

impl DropReason {
    pub(super) const ALL: [DropReason; 10] = [
        Self::too_many_connections,
        Self::handshake,
        Self::tls_identity,
        Self::ping_timeout,
        Self::write_timeout,
        Self::fell_behind,
        Self::protocol_error,
        Self::shutdown,
        Self::rebalance,
        Self::encode_error,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Self::too_many_connections => "too_many_connections",
            Self::handshake => "handshake",
            Self::tls_identity => "tls_identity",
            Self::ping_timeout => "ping_timeout",
            Self::write_timeout => "write_timeout",
            Self::fell_behind => "fell_behind",
            Self::protocol_error => "protocol_error",
            Self::shutdown => "shutdown",
            Self::rebalance => "rebalance",
            Self::encode_error => "encode_error",
        }
    }
}
