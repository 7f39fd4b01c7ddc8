//! What the translation produces: Calico's syncer types, sets of them, and one KV in Calico's
//! form tagged with the syncer types that receive it.

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use typha_protocol::model::UpdateKind;

/// One of the four pipelines a Calico client may open (`MsgClientHello.SyncerType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SyncerType {
    /// Felix's policy and routing data.
    Felix,
    /// confd, which writes BIRD's configuration.
    Bgp,
    /// calico-node's tunnel address allocator.
    TunnelIpAllocation,
    /// calico-node's node status reporter.
    NodeStatus,
}

impl SyncerType {
    /// Every syncer type, in the order of [`SyncerSet`]'s bits.
    pub const ALL: [SyncerType; 4] = [
        SyncerType::Felix,
        SyncerType::Bgp,
        SyncerType::TunnelIpAllocation,
        SyncerType::NodeStatus,
    ];

    /// The name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            SyncerType::Felix => "felix",
            SyncerType::Bgp => "bgp",
            SyncerType::TunnelIpAllocation => "tunnel-ip-allocation",
            SyncerType::NodeStatus => "node-status",
        }
    }

    /// The type a client's hello asks for; an empty name means felix, as in Typha. `None` for a
    /// type Calico does not define.
    pub fn from_hello(name: &str) -> Option<SyncerType> {
        if name.is_empty() {
            return Some(SyncerType::Felix);
        }
        SyncerType::ALL.into_iter().find(|s| s.as_str() == name)
    }

    fn bit(self) -> u8 {
        match self {
            SyncerType::Felix => 1,
            SyncerType::Bgp => 2,
            SyncerType::TunnelIpAllocation => 4,
            SyncerType::NodeStatus => 8,
        }
    }
}

impl fmt::Display for SyncerType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A set of syncer types: which pipelines a Calico KV belongs to.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SyncerSet(u8);

impl SyncerSet {
    /// No syncer type.
    pub const NONE: SyncerSet = SyncerSet(0);

    /// Every syncer type.
    pub const ALL: SyncerSet = SyncerSet(15);

    /// The types in either set.
    pub fn union(self, other: SyncerSet) -> SyncerSet {
        SyncerSet(self.0 | other.0)
    }

    /// The set of the given types.
    pub fn of(types: &[SyncerType]) -> SyncerSet {
        SyncerSet(types.iter().fold(0, |acc, t| acc | t.bit()))
    }

    /// Whether `t` is in the set.
    pub fn contains(self, t: SyncerType) -> bool {
        self.0 & t.bit() != 0
    }

    /// Whether the set is empty.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The types in the set.
    pub fn iter(self) -> impl Iterator<Item = SyncerType> {
        SyncerType::ALL
            .into_iter()
            .filter(move |t| self.contains(*t))
    }
}

impl fmt::Debug for SyncerSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

/// One KV as a Calico client receives it, and the syncer types that receive it.
///
/// The value is encoded once and shared (`Bytes`): every syncer type and every client of it
/// get the same bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CalicoKv {
    /// Who receives it.
    pub syncers: SyncerSet,
    /// libcalico-go's default path for the key (`SerializedUpdate.Key`).
    pub key: Arc<str>,
    /// The value as libcalico-go serializes it (`SerializedUpdate.Value`); `None` deletes.
    pub value: Option<Bytes>,
    /// New, updated or deleted, relative to what a client that followed every update holds
    /// (`SerializedUpdate.UpdateType`). Snapshots hold only `New`.
    pub kind: UpdateKind,
    /// For a policy: the pre-3.30 key, `/calico/v1/policy/tier/<tier>/policy/<name>`, for
    /// clients that do not set `SupportsModernPolicyKeys` (Typha 3.32 refuses those; this is
    /// here for a server that chooses to serve them).
    pub legacy_key: Option<Arc<str>>,
}

impl CalicoKv {
    /// Whether the key is a v3 resource, whose resource version goes in
    /// `SerializedUpdate.V3ResourceVersion` rather than in the JSON.
    pub fn is_v3_resource(&self) -> bool {
        self.key.starts_with(super::path::V3_PREFIX)
    }
}

/// Which of Calico's datastore drivers a Calico client expects its KVs' revisions from: they
/// differ in what goes in `SerializedUpdate.Revision` and `V3ResourceVersion`
/// (`cache::calico`). Our datastore backends say which they stand for
/// (`Datastore::calico_driver`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Driver {
    /// libcalico-go's etcd v3 driver: a KV's revision is its key's `mod_revision`, and a v3
    /// resource's `resourceVersion` is left empty (clientv3 stores it cleared and the driver
    /// never sets it on read). Our embedded store and an upstream server of ours are presented
    /// this way too.
    #[default]
    Etcd,
    /// libcalico-go's Kubernetes driver: a KV's revision is its object's `resourceVersion`,
    /// which v3 resources also carry; a profile made from a namespace is `<rv>/`, one made
    /// from a service account `/<rv>`, and those carry no `resourceVersion` of their own.
    Kubernetes,
}

/// The profile Calico's datastore drivers provide whatever the datastore holds: allow
/// everything both ways. kube-controllers' automatic host endpoints name it, so a Felix that
/// lacked it would drop their traffic.
pub const DEFAULT_ALLOW_PROFILE: &str = "projectcalico-default-allow";
