//! Calico's IPAM data in etcd. In etcd mode Calico's IPAM does not store v3 resources: it
//! stores libcalico-go's own model (`lib/backend/model/block.go`, `block_affinity.go`,
//! `ipam_handle.go`), one JSON value per key under [`IPAM_PREFIX`]:
//!
//! | key (after the prefix) | value | read as |
//! |---|---|---|
//! | `assignment/ipv4/block/<cidr>` (`ipv6`) | the allocation block | IPAMBlock `<cidr name>` |
//! | `host/<node>/ipv4/block/<cidr>` (`ipv6`; `virtual/` for virtual affinities) | `{"state": …, "deleted": bool}`, or empty (before Calico 3.0.7) | BlockAffinity `<node>-<cidr name>` |
//! | `handle/<id>` | a handle's allocations per block | skipped |
//! | `config`, `host/<node>` | IPAM settings, a node's (empty) IPAM entry | skipped |
//!
//! `<cidr>` is the block's network with `-` for `/` (`10.0.1.0-26`, `fd00::-122`). A block's
//! value: `cidr` (`"10.0.1.0/26"`), `affinity` (`"host:<node>"`, `"virtual:<name>"` or null),
//! `allocations` (one entry per address: null when free, else an index into `attributes`),
//! `unallocated`, `attributes` (`handle_id`, `secondary`), `sequenceNumber`,
//! `sequenceNumberForAllocation`, `deleted`; all of it is read and sent on to Calico's clients
//! as it was (Felix routes an address borrowed from another host's block by its attribute's
//! `node`).
//!
//! Blocks and affinities become the v3 resources Calico's Kubernetes backend stores for the
//! same data (its IPAMBlock and BlockAffinity CRDs, named as it names them, an affinity's
//! `deleted` written as the string `"true"`/`"false"` as in those CRDs), so both backends
//! feed the same resources to the one conversion. The felix syncer reads neither handles nor
//! IPAM settings, so they are skipped. A block or affinity marked `deleted` is passed on with
//! the flag, as Calico's syncers do; in etcd mode Calico deletes them outright anyway (the
//! flag exists for the Kubernetes API, which has no compare-and-delete).

use std::collections::BTreeMap;

use ipnet::IpNet;
use serde::Deserialize;
use serde_json::json;

use crate::calico::v3::{
    AllocationAttributeSpec, BlockAffinitySpec, IpamBlockSpec, Kind, ObjectMeta, Resource,
    ResourceId, Spec,
};
use crate::datastore::{Invalid, Item};

/// Where Calico's IPAM keeps its data in etcd.
pub const IPAM_PREFIX: &str = "/calico/ipam/v2/";

/// Handles: one per allocation, never read by the felix syncer (the listing leaves them out).
pub(super) const HANDLE_PREFIX: &str = "/calico/ipam/v2/handle/";

/// What a key under [`IPAM_PREFIX`] holds, when it is something we serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum IpamKey {
    /// An allocation block.
    Block(IpNet),
    /// A node's affinity to a block.
    Affinity {
        /// The node (or, for a virtual affinity, its name).
        node: String,
        /// The block.
        cidr: IpNet,
    },
}

impl IpamKey {
    /// The resource this key is read as.
    pub(super) fn id(&self) -> ResourceId {
        match self {
            IpamKey::Block(cidr) => ResourceId::global(Kind::IpamBlock, cidr_to_name(cidr)),
            IpamKey::Affinity { node, cidr } => {
                ResourceId::global(Kind::BlockAffinity, affinity_name(node, cidr))
            }
        }
    }
}

/// A block or affinity that cannot be written in Calico's IPAM layout.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IpamError {
    /// Its CIDR is not a network.
    #[error("{id}: spec.cidr {cidr:?} is not a CIDR: {source}")]
    Cidr {
        /// Which resource.
        id: ResourceId,
        /// As written.
        cidr: String,
        /// Why.
        #[source]
        source: ipnet::AddrParseError,
    },
    /// An affinity without a node.
    #[error("{id}: spec.node is empty")]
    NoNode {
        /// Which resource.
        id: ResourceId,
    },
}

/// Calico's resource name for a CIDR (`names.CIDRToName`): `.`, `:` and `/` become `-`.
pub(super) fn cidr_to_name(cidr: &IpNet) -> String {
    cidr.to_string().replace(['.', ':', '/'], "-")
}

/// Calico's name for a node's affinity to a block (its Kubernetes backend's): `<node>-<cidr
/// name>`, and past Kubernetes' 253 characters the node cut short plus 11 hex digits of
/// SHA-256 of `<node>+<cidr name>`.
pub(super) fn affinity_name(node: &str, cidr: &IpNet) -> String {
    let cidr_name = cidr_to_name(cidr);
    let name = format!("{node}-{cidr_name}");
    if name.len() < 253 {
        return name;
    }
    let keep = 252usize.saturating_sub(cidr_name.len() + 13);
    let cut = String::from_utf8_lossy(node.as_bytes().get(..keep).unwrap_or(node.as_bytes()));
    let digest = ring::digest::digest(
        &ring::digest::SHA256,
        format!("{node}+{cidr_name}").as_bytes(),
    );
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("{cut}-{cidr_name}-{}", hex.get(..11).unwrap_or(&hex))
}

/// The CIDR in a key: `10.0.1.0-26` under `ipv4`, `fd00::-122` under `ipv6`. Like Calico, a
/// network with host bits set is read as its network.
fn key_cidr(version: &str, s: &str) -> Option<IpNet> {
    let (addr, len) = s.split_once('-')?;
    let net: IpNet = format!("{addr}/{len}").parse().ok()?;
    match (version, net) {
        ("ipv4", IpNet::V4(_)) | ("ipv6", IpNet::V6(_)) => Some(net.trunc()),
        _ => None,
    }
}

/// What the key `full` (which is `IPAM_PREFIX` + `rest`) holds: `Ok(Some(_))` a block or an
/// affinity, `Ok(None)` something the felix syncer does not read, `Err(reason)` a key outside
/// Calico's IPAM layout.
pub(super) fn parse_key(full: &str, rest: &str) -> Result<Option<IpamKey>, String> {
    let parts: Vec<&str> = rest.split('/').collect();
    let bad_cidr = || {
        format!("key {full:?}: the last part is not a CIDR of the key's IP version (10.0.1.0-26)")
    };
    match parts.as_slice() {
        ["assignment", version, "block", cidr] => key_cidr(version, cidr)
            .map(|c| Some(IpamKey::Block(c)))
            .ok_or_else(bad_cidr),
        ["host" | "virtual", node, version, "block", cidr] if !node.is_empty() => {
            key_cidr(version, cidr)
                .map(|c| {
                    Some(IpamKey::Affinity {
                        node: (*node).to_owned(),
                        cidr: c,
                    })
                })
                .ok_or_else(bad_cidr)
        }
        // Everything under `handle/` is left out of listings: skipped alike in a watch.
        ["handle", ..] => Ok(None),
        ["host", node] if !node.is_empty() => Ok(None),
        ["config"] => Ok(None),
        _ => Err(format!(
            "key {full:?} is not in Calico's IPAM layout ({IPAM_PREFIX}assignment/ipv4/block/<cidr>, \
             host/<node>/ipv4/block/<cidr>, handle/<id>, config)"
        )),
    }
}

/// A block as Calico stores it (`model.AllocationBlock`): every field its syncers send on.
#[derive(Debug, Deserialize)]
struct StoredBlock {
    #[serde(default)]
    cidr: Option<String>,
    #[serde(default)]
    affinity: Option<String>,
    #[serde(default)]
    affinity_claim_time: Option<String>,
    #[serde(default)]
    allocations: Option<Vec<Option<u32>>>,
    #[serde(default)]
    unallocated: Option<Vec<u32>>,
    #[serde(default)]
    attributes: Option<Vec<AllocationAttributeSpec>>,
    #[serde(default, rename = "sequenceNumber")]
    sequence_number: Option<u64>,
    #[serde(default, rename = "sequenceNumberForAllocation")]
    sequence_number_for_allocation: Option<BTreeMap<String, u64>>,
    #[serde(default)]
    deleted: Option<bool>,
}

/// An affinity as Calico stores it (`model.BlockAffinity`).
#[derive(Debug, Deserialize)]
struct StoredAffinity {
    #[serde(default)]
    state: Option<String>,
    #[serde(default)]
    deleted: Option<bool>,
}

/// The resource a block or affinity value is read as (or why it is invalid).
pub(super) fn item(key: &IpamKey, value: &[u8], mod_revision: i64) -> Item {
    let id = key.id();
    let invalid = |reason: String| {
        Err(Invalid {
            id: Some(id.clone()),
            reason,
        })
    };
    let spec = match key {
        IpamKey::Block(cidr) => {
            let b: StoredBlock = match serde_json::from_slice(value) {
                Ok(b) => b,
                Err(e) => return invalid(format!("value is not an IPAM block: {e}")),
            };
            if let Some(c) = &b.cidr {
                // Calico reads a bare address as a CIDR too.
                let net = c
                    .parse::<IpNet>()
                    .or_else(|_| c.parse::<std::net::IpAddr>().map(IpNet::from));
                match net {
                    Ok(n) if n.trunc() == *cidr => {}
                    Ok(_) => return invalid(format!("the value's cidr {c:?} is not its key's")),
                    Err(e) => return invalid(format!("cidr {c:?} is not a CIDR: {e}")),
                }
            }
            Spec::IpamBlock(IpamBlockSpec {
                cidr: cidr.to_string(),
                affinity: b.affinity,
                affinity_claim_time: b.affinity_claim_time,
                allocations: b.allocations,
                unallocated: b.unallocated,
                attributes: b.attributes,
                sequence_number: b.sequence_number.unwrap_or(0),
                sequence_number_for_allocation: b.sequence_number_for_allocation,
                deleted: b.deleted.unwrap_or(false),
            })
        }
        IpamKey::Affinity { node, cidr } => {
            // Calico wrote affinities without a value before 3.0.7: read as `{}`.
            let value = if value.is_empty() { b"{}" } else { value };
            let a: StoredAffinity = match serde_json::from_slice(value) {
                Ok(a) => a,
                Err(e) => return invalid(format!("value is not a block affinity: {e}")),
            };
            Spec::BlockAffinity(BlockAffinitySpec {
                state: a.state.unwrap_or_default(),
                node: node.clone(),
                cidr: cidr.to_string(),
                deleted: Some(a.deleted.unwrap_or(false).to_string().into()),
            })
        }
    };
    Ok(std::sync::Arc::new(Resource {
        metadata: ObjectMeta {
            name: id.name.clone(),
            resource_version: Some(mod_revision.to_string()),
            ..ObjectMeta::default()
        },
        spec,
    }))
}

/// The key and value Calico's IPAM writes for a block or an affinity, `None` for other kinds.
/// The resource's name is not stored: a reader derives it from the key, as Calico does.
pub(super) fn key_value(r: &Resource) -> Option<Result<(String, Vec<u8>), IpamError>> {
    let cidr = |s: &str| {
        s.parse::<IpNet>()
            .map(|n| n.trunc())
            .map_err(|source| IpamError::Cidr {
                id: r.id(),
                cidr: s.to_owned(),
                source,
            })
    };
    let version = |n: &IpNet| match n {
        IpNet::V4(_) => "ipv4",
        IpNet::V6(_) => "ipv6",
    };
    let in_key = |n: &IpNet| n.to_string().replacen('/', "-", 1);
    Some(match &r.spec {
        Spec::IpamBlock(s) => cidr(&s.cidr).map(|n| {
            let s = s.as_written();
            let mut value = json!({
                "cidr": n.to_string(),
                "affinity": s.affinity,
                "allocations": s.allocations,
                "unallocated": s.unallocated,
                "attributes": s.attributes,
                "sequenceNumber": s.sequence_number,
                "sequenceNumberForAllocation": s.sequence_number_for_allocation,
                "deleted": s.deleted,
            });
            if let (Some(t), Some(o)) = (&s.affinity_claim_time, value.as_object_mut()) {
                o.insert("affinity_claim_time".into(), t.clone().into());
            }
            (
                format!(
                    "{IPAM_PREFIX}assignment/{}/block/{}",
                    version(&n),
                    in_key(&n)
                ),
                value.to_string().into_bytes(),
            )
        }),
        Spec::BlockAffinity(s) => cidr(&s.cidr).and_then(|n| {
            if s.node.is_empty() {
                return Err(IpamError::NoNode { id: r.id() });
            }
            let deleted = match &s.deleted {
                Some(serde_json::Value::Bool(b)) => *b,
                Some(serde_json::Value::String(v)) => v == "true",
                _ => false,
            };
            let value = json!({"state": s.state, "deleted": deleted});
            Ok((
                format!(
                    "{IPAM_PREFIX}host/{}/{}/block/{}",
                    s.node,
                    version(&n),
                    in_key(&n)
                ),
                value.to_string().into_bytes(),
            ))
        }),
        _ => return None,
    })
}

#[cfg(test)]
mod tests;
