//! Which Calico KVs each of our keys stands for, and which syncer types receive them: the one
//! table of this module (`docs/calico-conversion.md`, "What each Calico syncer type receives",
//! is its prose form).

use std::sync::Arc;

use bytes::Bytes;
use typha_protocol::model::{Key, ResourceKey, ResourceKind, Value};

use super::endpoint::{host_endpoint, host_endpoint_key, workload_endpoint, workload_endpoint_key};
use super::host::{config, host_ip, ready, v3_node, wireguard};
use super::json::{Escape, Json};
use super::kv::{DEFAULT_ALLOW_PROFILE, SyncerSet, SyncerType};
use super::network::{affinity, block, block_affinity, ip_pool, network_set};
use super::path::CalicoKey;
use super::policy::{legacy_policy_key, policy, policy_key, profile_labels, profile_rules, tier};
use super::profile::v3_profile;
use super::resource::{Ordered, json_text, k8s_object, v3_object_with};

const FELIX: &[SyncerType] = &[SyncerType::Felix];
const POOLS: &[SyncerType] = &[
    SyncerType::Felix,
    SyncerType::Bgp,
    SyncerType::TunnelIpAllocation,
];
const BGP_CONFIG: &[SyncerType] = &[SyncerType::Felix, SyncerType::Bgp];
const BGP: &[SyncerType] = &[SyncerType::Bgp];

/// One Calico KV before it is shared: the key, the legacy policy key, the value (`None`: the
/// key exists only as a deletion, e.g. a node's WireGuard key when it has none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Entry {
    pub(super) syncers: SyncerSet,
    pub(super) key: CalicoKey,
    pub(super) legacy: Option<CalicoKey>,
    pub(super) value: Option<Vec<u8>>,
}

impl Entry {
    fn new(syncers: &[SyncerType], key: CalicoKey, value: Option<Vec<u8>>) -> Self {
        Entry {
            syncers: SyncerSet::of(syncers),
            key,
            legacy: None,
            value,
        }
    }
}

/// The syncer types that receive anything for keys of this kind: what a server needs to decide
/// whether a change concerns a pipeline at all, without translating it.
pub fn receivers(key: &Key) -> SyncerSet {
    match key {
        Key::IpPool(_) => SyncerSet::of(POOLS),
        Key::Resource(r) => match r.kind {
            ResourceKind::Node => SyncerSet::of(POOLS),
            ResourceKind::BlockAffinity => SyncerSet::of(BGP),
            ResourceKind::BgpConfiguration | ResourceKind::BgpPeer => SyncerSet::of(BGP_CONFIG),
            // Calico's bgp syncer watches BGPFilters; its felix syncer does not.
            ResourceKind::BgpFilter => SyncerSet::of(BGP),
            ResourceKind::FelixConfiguration | ResourceKind::Tier => SyncerSet::of(FELIX),
            ResourceKind::CalicoNodeStatus => SyncerSet::of(&[SyncerType::NodeStatus]),
            // Calico's felix syncer watches LiveMigrations (in every datastore mode); no other
            // syncer type does.
            ResourceKind::LiveMigration => SyncerSet::of(FELIX),
            ResourceKind::KubernetesService | ResourceKind::KubernetesEndpointSlice => {
                SyncerSet::of(FELIX)
            }
            _ => SyncerSet::NONE,
        },
        // A kind this build does not know (relayed by a tier) has no Calico form here.
        Key::Opaque(_) => SyncerSet::NONE,
        _ => SyncerSet::of(FELIX),
    }
}

/// The Calico KVs for `key` holding `value`, or, with `None`, the keys a deletion of `key`
/// removes as far as the key alone tells (a block affinity's Calico key is in its value, so
/// deleting one needs the value it had).
pub(super) fn entries(key: &Key, value: Option<&Value>) -> Vec<Entry> {
    let one = |syncers, k, v: Option<Vec<u8>>| vec![Entry::new(syncers, k, v)];
    match (key, value) {
        (Key::WorkloadEndpoint(k), v) => match v {
            Some(Value::WorkloadEndpoint(w)) => {
                one(FELIX, workload_endpoint_key(k), Some(workload_endpoint(w)))
            }
            None => one(FELIX, workload_endpoint_key(k), None),
            Some(_) => vec![],
        },
        (Key::HostEndpoint(k), v) => match v {
            Some(Value::HostEndpoint(h)) => {
                one(FELIX, host_endpoint_key(k), Some(host_endpoint(h)))
            }
            None => one(FELIX, host_endpoint_key(k), None),
            Some(_) => vec![],
        },
        (Key::Policy(k), v) => {
            let (tier_name, bytes) = match v {
                Some(Value::Policy(p)) => (p.tier.clone(), Some(policy(p))),
                // Without the value the tier is unknown: `default`, the common case, names the
                // legacy key.
                None => (String::from("default"), None),
                Some(_) => return vec![],
            };
            let mut e = Entry::new(FELIX, policy_key(k), bytes);
            e.legacy = Some(legacy_policy_key(k, &tier_name));
            vec![e]
        }
        // Calico's datastore drivers always list a built-in profile of this name and ignore a
        // stored one; the built-in is in every felix snapshot ([`super::builtin_kvs`]).
        (Key::ProfileRules(k), _) | (Key::ProfileLabels(k), _)
            if k.name == DEFAULT_ALLOW_PROFILE =>
        {
            vec![]
        }
        (Key::ProfileRules(k), v) => match v {
            Some(Value::ProfileRules(r)) => one(
                FELIX,
                CalicoKey::ProfileRules(k.name.clone()),
                Some(profile_rules(r)),
            ),
            None => one(FELIX, CalicoKey::ProfileRules(k.name.clone()), None),
            Some(_) => vec![],
        },
        (Key::ProfileLabels(k), v) => {
            let v3 = CalicoKey::Resource {
                plural: "profiles".into(),
                namespace: None,
                name: k.name.clone(),
            };
            match v {
                // Calico sends the v1 labels only when there are some (a deletion when the
                // profile applies none), the v3 Profile always.
                Some(Value::ProfileLabels(l)) => vec![
                    Entry::new(
                        FELIX,
                        CalicoKey::ProfileLabels(k.name.clone()),
                        (!l.labels.is_empty()).then(|| profile_labels(&l.labels)),
                    ),
                    Entry::new(FELIX, v3, Some(v3_profile(&k.name, l))),
                ],
                None => vec![
                    Entry::new(FELIX, CalicoKey::ProfileLabels(k.name.clone()), None),
                    Entry::new(FELIX, v3, None),
                ],
                Some(_) => vec![],
            }
        }
        (Key::NetworkSet(k), v) => match v {
            Some(Value::NetworkSet(n)) => one(
                FELIX,
                CalicoKey::NetworkSet(k.name.clone()),
                Some(network_set(n)),
            ),
            None => one(FELIX, CalicoKey::NetworkSet(k.name.clone()), None),
            Some(_) => vec![],
        },
        (Key::IpPool(k), v) => match v {
            Some(Value::IpPool(p)) => one(POOLS, CalicoKey::IpPool(k.cidr), Some(ip_pool(p))),
            None => one(POOLS, CalicoKey::IpPool(k.cidr), None),
            Some(_) => vec![],
        },
        (Key::Block(k), v) => match v {
            Some(Value::Block(b)) => one(FELIX, CalicoKey::Block(k.cidr), Some(block(b))),
            None => one(FELIX, CalicoKey::Block(k.cidr), None),
            Some(_) => vec![],
        },
        (Key::HostIp(k), v) => match v {
            Some(Value::HostIp(ip)) => one(
                FELIX,
                CalicoKey::HostIp(k.hostname.clone()),
                Some(host_ip(*ip)),
            ),
            None => one(FELIX, CalicoKey::HostIp(k.hostname.clone()), None),
            Some(_) => vec![],
        },
        (Key::HostConfig(k), v) => {
            let ck = CalicoKey::HostConfig {
                host: k.hostname.clone(),
                name: k.name.clone(),
            };
            match v {
                Some(Value::Config(c)) => one(FELIX, ck, Some(config(c))),
                None => one(FELIX, ck, None),
                Some(_) => vec![],
            }
        }
        (Key::GlobalConfig(k), v) => match v {
            Some(Value::Config(c)) => one(
                FELIX,
                CalicoKey::GlobalConfig(k.name.clone()),
                Some(config(c)),
            ),
            None => one(FELIX, CalicoKey::GlobalConfig(k.name.clone()), None),
            Some(_) => vec![],
        },
        (Key::ReadyFlag, v) => match v {
            Some(Value::ReadyFlag(r)) => one(FELIX, CalicoKey::Ready, Some(ready(*r))),
            None => one(FELIX, CalicoKey::Ready, None),
            Some(_) => vec![],
        },
        (Key::Resource(k), v) => resource(k, v),
        // Key kinds added to the model later have no Calico form until this table says so.
        _ => vec![],
    }
}

fn v3_key(k: &ResourceKey) -> CalicoKey {
    CalicoKey::Resource {
        plural: k.kind.plural().to_owned(),
        namespace: k.namespace.clone(),
        name: k.name.clone(),
    }
}

fn resource(k: &ResourceKey, v: Option<&Value>) -> Vec<Entry> {
    match (k.kind, v) {
        (ResourceKind::Node, Some(Value::Node(n))) => vec![
            // Calico's Typha sends a node its v3 validator refuses as a deletion.
            Entry::new(
                POOLS,
                v3_key(k),
                (!n.detail.meta.invalid_as_v3).then(|| v3_node(&k.name, n)),
            ),
            // Calico's felix processor always emits the WireGuard key, as a deletion when the
            // node has none.
            Entry::new(FELIX, CalicoKey::Wireguard(k.name.clone()), wireguard(n)),
        ],
        (ResourceKind::Node, None) => vec![
            Entry::new(POOLS, v3_key(k), None),
            Entry::new(FELIX, CalicoKey::Wireguard(k.name.clone()), None),
        ],
        (ResourceKind::BlockAffinity, Some(Value::Resource(r))) => {
            let spec = serde_json::from_str(&r.spec_json).unwrap_or(serde_json::Value::Null);
            match affinity(&spec) {
                Some(a) => vec![Entry::new(
                    &[SyncerType::Bgp],
                    a.key.clone(),
                    Some(block_affinity(&a)),
                )],
                None => vec![],
            }
        }
        (ResourceKind::Tier, Some(Value::Resource(r))) => {
            let spec = serde_json::from_str(&r.spec_json).unwrap_or(serde_json::Value::Null);
            vec![Entry::new(
                FELIX,
                CalicoKey::Tier(k.name.clone()),
                Some(tier(&spec)),
            )]
        }
        (ResourceKind::Tier, None) => {
            vec![Entry::new(FELIX, CalicoKey::Tier(k.name.clone()), None)]
        }
        (ResourceKind::KubernetesService, v) => match v {
            Some(Value::Resource(r)) => {
                let ns = k.namespace.as_deref().unwrap_or_default();
                let bytes = k8s_object(&k.name, ns, &r.labels, &r.detail, |o| {
                    json_text(o.field("spec"), &r.spec_json);
                    // Not carried (Felix reads only the spec); Go writes the empty struct.
                    o.field("status")
                        .object(|s| s.field("loadBalancer").object(|_| {}));
                });
                vec![Entry::new(FELIX, v3_key(k), Some(bytes))]
            }
            None => vec![Entry::new(FELIX, v3_key(k), None)],
            Some(_) => vec![],
        },
        (ResourceKind::KubernetesEndpointSlice, v) => match v {
            Some(Value::Resource(r)) => {
                let ns = k.namespace.as_deref().unwrap_or_default();
                let fields = match serde_json::from_str::<Ordered>(&r.spec_json) {
                    Ok(Ordered::Object(f)) => f,
                    _ => Vec::new(),
                };
                let get = |name: &str| fields.iter().find(|(f, _)| f == name).map(|(_, v)| v);
                let bytes = k8s_object(&k.name, ns, &r.labels, &r.detail, |o| {
                    // Go's tags: none of the three is `omitempty`.
                    for name in ["addressType", "endpoints", "ports"] {
                        let j = o.field(name);
                        match (name, get(name)) {
                            (_, Some(v)) => v.write(j),
                            ("addressType", None) => j.string("", Escape::Jsoniter),
                            (_, None) => j.null(),
                        }
                    }
                });
                vec![Entry::new(FELIX, v3_key(k), Some(bytes))]
            }
            None => vec![Entry::new(FELIX, v3_key(k), None)],
            Some(_) => vec![],
        },
        (kind, v) => {
            let syncers: &[SyncerType] = match kind {
                ResourceKind::BgpConfiguration | ResourceKind::BgpPeer => BGP_CONFIG,
                ResourceKind::BgpFilter => BGP,
                // `default` and `node.<n>` reach Felix as config keys; other names (selector
                // scoped configurations) as the resource.
                ResourceKind::FelixConfiguration
                    if k.name != "default" && !k.name.starts_with("node.") =>
                {
                    FELIX
                }
                ResourceKind::CalicoNodeStatus => &[SyncerType::NodeStatus],
                ResourceKind::LiveMigration => FELIX,
                _ => return vec![],
            };
            match v {
                Some(Value::Resource(r)) => {
                    let bytes = v3_object_with(
                        k.kind.as_str(),
                        &k.name,
                        k.namespace.as_deref(),
                        &r.labels,
                        &r.detail,
                        |o| {
                            json_text(o.field("spec"), &r.spec_json);
                            if kind == ResourceKind::CalicoNodeStatus {
                                zero_node_status(o.field("status"));
                            }
                        },
                    );
                    vec![Entry::new(syncers, v3_key(k), Some(bytes))]
                }
                None => vec![Entry::new(syncers, v3_key(k), None)],
                Some(_) => vec![],
            }
        }
    }
}

/// A CalicoNodeStatus's `status` as Go writes the zero value (none of its structs is
/// `omitempty`): we carry the request (the spec), not what the node reported.
fn zero_node_status(j: &mut Json) {
    j.object(|s| {
        s.field("lastUpdated").null();
        s.field("agent").object(|a| {
            a.field("birdV4").object(|_| {});
            a.field("birdV6").object(|_| {});
        });
        s.field("bgp").object(|b| {
            for n in [
                "numberEstablishedV4",
                "numberNotEstablishedV4",
                "numberEstablishedV6",
                "numberNotEstablishedV6",
            ] {
                b.field(n).uint(0);
            }
        });
        s.field("routes").object(|_| {});
    });
}

/// Shares an entry's bytes.
pub(super) fn share(e: &Entry) -> (Arc<str>, Option<Bytes>, Option<Arc<str>>) {
    (
        Arc::from(e.key.path()),
        e.value.clone().map(Bytes::from),
        e.legacy.as_ref().map(|l| Arc::from(l.path())),
    )
}
