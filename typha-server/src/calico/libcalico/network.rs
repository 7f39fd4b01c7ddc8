//! Network sets, IP pools, IPAM blocks and block affinities as libcalico-go's
//! `model.NetworkSet` (networkset.go), `model.IPPool` (ippool.go), `model.AllocationBlock`
//! (block.go) and `model.BlockAffinity` (block_affinity.go).

use ipnet::IpNet;
use typha_protocol::model::{Block, EncapMode, IpPool, NetworkSet};

use super::endpoint::labels_or_null;
use super::json::{Escape, Json};
use super::path::{CalicoKey, go_cidr};

/// `model.NetworkSet`: nets (`omitempty`), labels (a `uniquelabels.Map`: `null` for a global
/// set without labels, as Calico makes it from the resource's nil map), profile_ids
/// (`omitempty`).
pub(super) fn network_set(v: &NetworkSet) -> Vec<u8> {
    let mut j = Json::new();
    j.object(|o| {
        if !v.nets.is_empty() {
            let n: Vec<String> = v.nets.iter().map(go_cidr).collect();
            o.field("nets").strings(&n, Escape::Std);
        }
        labels_or_null(o.field("labels"), &v.labels);
        o.strings_ne("profile_ids", &v.profile_ids);
    });
    j.into_bytes()
}

/// `model.IPPool`. Every field is written (no `omitempty`): `ipip` is `tunl0` when IP-in-IP is
/// on, the modes are `encap.Mode` (`""`, `always`, `cross-subnet`). `assignment_mode` is not in
/// our model: Calico defaults it to `Automatic`, which we send; a pool set to `Manual`
/// arrives as `Automatic`.
pub(super) fn ip_pool(p: &IpPool) -> Vec<u8> {
    let mode = |m: EncapMode| match m {
        EncapMode::Never => "",
        EncapMode::Always => "always",
        EncapMode::CrossSubnet => "cross-subnet",
    };
    let mut j = Json::new();
    j.object(|o| {
        o.field("cidr").string(&go_cidr(&p.cidr), Escape::Std);
        o.str(
            "ipip",
            if p.ipip_mode == EncapMode::Never {
                ""
            } else {
                "tunl0"
            },
        );
        o.str("ipip_mode", mode(p.ipip_mode));
        o.str("vxlan_mode", mode(p.vxlan_mode));
        o.bool("masquerade", p.masquerade);
        o.bool("ipam", p.ipam);
        o.bool("disabled", p.disabled);
        o.bool("disableBGPExport", p.disable_bgp_export);
        o.str("assignment_mode", "Automatic");
    });
    j.into_bytes()
}

/// `model.AllocationBlock`: cidr, affinity (`null` when none), `affinity_claim_time`
/// (omitted when unset), then the allocation table as it was stored (`null` where it was
/// `null`): Felix routes the block via its affine host and each address borrowed from it via
/// the `node` of its attribute. A block read without a table (from a server of ours that
/// predates it) has `null`s and zero sequence numbers.
pub(super) fn block(b: &Block) -> Vec<u8> {
    let t = &b.table;
    let mut j = Json::new();
    j.object(|o| {
        o.field("cidr").string(&go_cidr(&b.cidr), Escape::Std);
        match &b.affinity {
            Some(a) => o.str("affinity", a),
            None => o.field("affinity").null(),
        }
        if let Some(time) = &t.affinity_claim_time {
            o.str("affinity_claim_time", time);
        }
        match &t.allocations {
            Some(list) => o.field("allocations").array(list, |j, a| match a {
                Some(i) => j.uint(u64::from(*i)),
                None => j.null(),
            }),
            None => o.field("allocations").null(),
        }
        match &t.unallocated {
            Some(list) => o
                .field("unallocated")
                .array(list, |j, i| j.uint(u64::from(*i))),
            None => o.field("unallocated").null(),
        }
        match &t.attributes {
            Some(list) => o.field("attributes").array(list, |j, a| {
                j.object(|a_o| {
                    if let Some(h) = &a.handle_id {
                        a_o.str("handle_id", h);
                    }
                    if !a.secondary.is_empty() {
                        a_o.field("secondary")
                            .string_map(&a.secondary, Escape::Jsoniter);
                    }
                    if !a.alternate.is_empty() {
                        a_o.field("alternateOwnerAttrs")
                            .string_map(&a.alternate, Escape::Jsoniter);
                    }
                });
            }),
            None => o.field("attributes").null(),
        }
        o.field("sequenceNumber").uint(t.sequence_number);
        match &t.sequence_number_for_allocation {
            Some(m) => o.field("sequenceNumberForAllocation").object(|m_o| {
                for (k, v) in m {
                    m_o.field_escaped(k).uint(*v);
                }
            }),
            None => o.field("sequenceNumberForAllocation").null(),
        }
        o.bool("deleted", b.deleted);
    });
    j.into_bytes()
}

/// What a block affinity resource says, read from its spec (kept as JSON text in our cache).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Affinity {
    pub(super) key: CalicoKey,
    state: String,
    deleted: bool,
}

/// Reads a BlockAffinity spec (`{"state", "node", "cidr", "type", "deleted"}`, `deleted` a bool
/// or Calico's CRD string); `None` when node or CIDR is missing or malformed, which Calico's
/// backend also refuses. The type defaults to `host`, as Calico's does.
pub(super) fn affinity(spec: &serde_json::Value) -> Option<Affinity> {
    let s = |k: &str| spec.get(k).and_then(serde_json::Value::as_str);
    let node = s("node").filter(|n| !n.is_empty())?;
    let cidr: IpNet = s("cidr")?.parse::<IpNet>().ok()?.trunc();
    let deleted = match spec.get("deleted") {
        Some(serde_json::Value::Bool(b)) => *b,
        // strconv.ParseBool's true spellings.
        Some(serde_json::Value::String(v)) => {
            matches!(v.as_str(), "1" | "t" | "T" | "true" | "True" | "TRUE")
        }
        _ => false,
    };
    Some(Affinity {
        key: CalicoKey::BlockAffinity {
            affinity_type: s("type")
                .filter(|t| !t.is_empty())
                .unwrap_or("host")
                .to_owned(),
            host: node.to_owned(),
            cidr,
        },
        state: s("state").unwrap_or_default().to_owned(),
        deleted,
    })
}

/// `model.BlockAffinity`: `{"state", "deleted"}`, neither `omitempty`.
pub(super) fn block_affinity(a: &Affinity) -> Vec<u8> {
    let mut j = Json::new();
    j.object(|o| {
        o.str("state", &a.state);
        o.bool("deleted", a.deleted);
    });
    j.into_bytes()
}
