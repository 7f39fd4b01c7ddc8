//! Shared by the integration tests: one canonical instance of every message (for golden
//! files) and proptest strategies for keys, values, updates and messages.
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use proptest::collection::{btree_map, vec};
use proptest::option;
use proptest::prelude::*;
use typha_protocol::digest::{BucketId, BucketSet, StateDigest};
use typha_protocol::message::*;
use typha_protocol::model::*;

// ---------------------------------------------------------------------------------------------
// Canonical messages: fixed content, one per message type, exercising every key and value type.

/// Every key type with a value of the matching type.
pub fn canonical_kvs() -> Vec<(Key, Value)> {
    let labels: Labels = [("app", "web"), ("projectcalico.org/namespace", "prod")]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let mut allow = Rule::new(Action::Allow);
    allow.ip_version = Some(4);
    allow.protocol = Some(Protocol::Tcp);
    allow.src = EntityRule {
        nets: vec!["10.0.0.0/8".parse().unwrap()],
        selector: "app == 'frontend'".into(),
        namespace_selector: "team == 'web'".into(),
        ports: vec![Port::Range {
            first: 1024,
            last: 65535,
        }],
        service_account_names: vec!["web".into()],
        service_account_selector: "role == 'x'".into(),
        service: Some(ServiceMatch {
            name: "svc".into(),
            namespace: "prod".into(),
        }),
        not_nets: vec!["10.1.0.0/16".parse().unwrap()],
        not_selector: "quarantine == 'true'".into(),
        not_ports: vec![Port::Named("debug".into())],
    };
    allow.dst.ports = vec![
        Port::Named("http".into()),
        Port::Range {
            first: 443,
            last: 443,
        },
    ];
    allow.http = Some(HttpMatch {
        methods: vec!["GET".into()],
        paths: vec!["/api".into()],
    });
    let mut deny = Rule::new(Action::Deny);
    deny.protocol = Some(Protocol::Icmp);
    deny.icmp = Some(Icmp {
        icmp_type: 8,
        code: Some(0),
    });
    deny.not_protocol = Some(Protocol::Number(99));
    deny.not_icmp = Some(Icmp {
        icmp_type: 0,
        code: None,
    });
    let wep_key = Key::WorkloadEndpoint(WorkloadEndpointKey {
        hostname: "node-1".into(),
        orchestrator: "k8s".into(),
        workload: "prod/web-5d8f7b9c4-x7k2p".into(),
        endpoint: "eth0".into(),
    });
    let wep = Value::WorkloadEndpoint(WorkloadEndpoint {
        state: "active".into(),
        name: "cali1a2b3c4d5e6".into(),
        active_instance_id: "0123456789abcdef".into(),
        mac: Some(Mac([0xee, 0xee, 0xee, 0xee, 0xee, 0x01])),
        profile_ids: vec!["kns.prod".into(), "ksa.prod.web".into()],
        ipv4_nets: vec!["10.65.1.23/32".parse().unwrap()],
        ipv6_nets: vec!["fd00:65::1:17/128".parse().unwrap()],
        ipv4_nat: vec![IpNat {
            int_ip: "10.65.1.23".parse().unwrap(),
            ext_ip: "192.0.2.10".parse().unwrap(),
        }],
        ipv6_nat: vec![],
        labels: labels.clone(),
        ipv4_gateway: Some(Ipv4Addr::new(169, 254, 1, 1)),
        ipv6_gateway: None,
        ports: vec![EndpointPort {
            name: "http".into(),
            protocol: Protocol::Tcp,
            port: 8080,
        }],
        generate_name: "web-5d8f7b9c4-".into(),
        allow_spoofed_source_prefixes: vec!["192.0.2.0/24".parse().unwrap()],
    });
    vec![
        (wep_key, wep),
        (
            Key::HostEndpoint(HostEndpointKey {
                hostname: "node-1".into(),
                endpoint: "eth0".into(),
            }),
            Value::HostEndpoint(HostEndpoint {
                name: "eth0".into(),
                expected_ipv4_addrs: vec![Ipv4Addr::new(192, 0, 2, 1)],
                expected_ipv6_addrs: vec![Ipv6Addr::LOCALHOST],
                labels: labels.clone(),
                profile_ids: vec!["host".into()],
                ports: vec![],
            }),
        ),
        (
            Key::Policy(PolicyKey {
                kind: PolicyKind::NetworkPolicy,
                namespace: Some("prod".into()),
                name: "allow-web".into(),
            }),
            Value::Policy(Policy {
                namespace: "prod".into(),
                tier: "default".into(),
                order: Some(100.5),
                selector: "app == 'web'".into(),
                types: vec![PolicyType::Ingress, PolicyType::Egress],
                inbound_rules: vec![allow.clone(), deny],
                outbound_rules: vec![Rule::new(Action::Pass), Rule::new(Action::Log)],
                untracked: false,
                pre_dnat: false,
                apply_on_forward: true,
                performance_hints: vec!["AssumeNeededOnEveryNode".into()],
                staged_action: None,
            }),
        ),
        (
            Key::ProfileRules(ProfileKey {
                name: "kns.prod".into(),
            }),
            Value::ProfileRules(ProfileRules {
                inbound_rules: vec![Rule::new(Action::Allow)],
                outbound_rules: vec![allow],
            }),
        ),
        (
            Key::ProfileLabels(ProfileKey {
                name: "kns.prod".into(),
            }),
            Value::ProfileLabels(labels.clone().into()),
        ),
        (
            Key::NetworkSet(NetworkSetKey {
                name: "prod/blocked".into(),
            }),
            Value::NetworkSet(NetworkSet {
                nets: vec![
                    "198.51.100.0/24".parse().unwrap(),
                    "2001:db8::/32".parse().unwrap(),
                ],
                labels,
                profile_ids: vec![],
            }),
        ),
        (
            Key::IpPool(IpPoolKey {
                cidr: "10.65.0.0/16".parse().unwrap(),
            }),
            Value::IpPool(IpPool {
                cidr: "10.65.0.0/16".parse().unwrap(),
                ipip_mode: EncapMode::CrossSubnet,
                vxlan_mode: EncapMode::Never,
                masquerade: true,
                ipam: true,
                disabled: false,
                disable_bgp_export: false,
            }),
        ),
        (
            Key::Block(BlockKey {
                cidr: "10.65.1.0/26".parse().unwrap(),
            }),
            Value::Block(Block {
                cidr: "10.65.1.0/26".parse().unwrap(),
                affinity: Some("host:node-1".into()),
                allocated: 23,
                deleted: false,
                table: AllocationTable::default(),
            }),
        ),
        (
            Key::HostIp(HostIpKey {
                hostname: "node-1".into(),
            }),
            Value::HostIp("192.0.2.1".parse().unwrap()),
        ),
        (
            Key::HostConfig(HostConfigKey {
                hostname: "node-1".into(),
                name: "LogSeverityScreen".into(),
            }),
            Value::Config("Debug".into()),
        ),
        (
            Key::GlobalConfig(GlobalConfigKey {
                name: "ClusterGUID".into(),
            }),
            Value::Config("a1b2c3".into()),
        ),
        (Key::ReadyFlag, Value::ReadyFlag(true)),
        (
            Key::Resource(ResourceKey {
                kind: ResourceKind::Node,
                namespace: None,
                name: "node-1".into(),
            }),
            Value::Node(Node {
                ipv4_address: Some("192.0.2.1/24".parse().unwrap()),
                ipv6_address: None,
                ipv4_ipip_tunnel_addr: None,
                ipv4_vxlan_tunnel_addr: Some(Ipv4Addr::new(10, 65, 1, 0)),
                vxlan_tunnel_mac: Some(Mac([0x66, 0x1e, 0x2f, 0x3a, 0x4b, 0x5c])),
                wireguard_public_key: String::new(),
                as_number: Some(64512),
                labels: BTreeMap::new(),
                // Empty: the golden files hold version 1 values, which must keep decoding.
                detail: NodeDetail::default(),
            }),
        ),
        (
            Key::Resource(ResourceKey {
                kind: ResourceKind::KubernetesService,
                namespace: Some("default".into()),
                name: "kubernetes".into(),
            }),
            Value::Resource(Resource {
                labels: BTreeMap::new(),
                spec_json: r#"{"clusterIP":"10.96.0.1"}"#.into(),
                detail: ResourceDetail::default(),
            }),
        ),
    ]
}

pub fn canonical_updates() -> Vec<Update> {
    let mut out: Vec<Update> = canonical_kvs()
        .iter()
        .enumerate()
        .map(|(i, (k, v))| {
            Update::put(
                KeyPath::from(k),
                EncodedValue::encode(v),
                Revision(1000 + i as u64),
                if i % 2 == 0 {
                    UpdateKind::New
                } else {
                    UpdateKind::Updated
                },
            )
        })
        .collect();
    out.push(Update::delete(
        KeyPath::new("/calico/v1/host/node-2/bird_ip").unwrap(),
        Revision(2000),
    ));
    out
}

pub fn canonical_digest() -> StateDigest {
    let mut d = StateDigest::new();
    for u in canonical_updates() {
        if let Some(v) = &u.value {
            d.insert(u.key.as_str(), v.as_bytes());
        }
    }
    d
}

/// One canonical message per type, with the golden file name.
pub fn canonical_messages() -> Vec<(&'static str, Message)> {
    vec![
        (
            "client_hello",
            Message::ClientHello(ClientHello {
                hostname: "node-1".into(),
                info: "typha-agent/0.1.0".into(),
                versions: vec![ProtocolVersion::V1],
                syncer_type: SyncerType::Felix,
                compression: CompressionSet::ZSTD,
                // The v1 feature set as first pinned (new features get golden files of their own).
                features: Features(0x07),
                resume: Some(Resume {
                    cursor: Some(Cursor {
                        epoch: Epoch(0x0123_4567_89ab_cdef),
                        seq: Seq(42),
                    }),
                    digest: Some(canonical_digest()),
                }),
                extensions: vec![Extension {
                    id: 7,
                    data: vec![1, 2, 3],
                }],
            }),
        ),
        (
            "server_hello",
            Message::ServerHello(ServerHello {
                version: ProtocolVersion::V1,
                syncer_type: SyncerType::Felix,
                epoch: Epoch(0x0123_4567_89ab_cdef),
                features: Features::ACK.with(Features::BUCKET_RESYNC),
                compression: CompressionSet::ZSTD,
                info: "typha-server/0.1.0".into(),
                extensions: vec![],
            }),
        ),
        (
            "goodbye",
            Message::Goodbye(Goodbye {
                reason: GoodbyeReason::TooManyConnections,
                message: "at the limit of 10000 connections".into(),
                redirect: vec!["10.0.0.2:5473".into(), "[fd00::3]:5473".into()],
            }),
        ),
        (
            "ping",
            Message::Ping(Ping {
                timestamp_micros: 1_700_000_000_000_000,
            }),
        ),
        (
            "pong",
            Message::Pong(Pong {
                ping_timestamp_micros: 1_700_000_000_000_000,
            }),
        ),
        ("sync_status", Message::SyncStatus(SyncStatus::InSync)),
        (
            "snapshot_begin",
            Message::SnapshotBegin(SnapshotBegin {
                seq: Seq(42),
                scope: SnapshotScope::Buckets(
                    BucketSet::new(vec![BucketId(3), BucketId(700), BucketId(1023)]).unwrap(),
                ),
                kvs: 14,
            }),
        ),
        (
            "snapshot_chunk",
            Message::SnapshotChunk(SnapshotChunk {
                updates: canonical_updates()
                    .into_iter()
                    .filter(|u| u.value.is_some())
                    .collect(),
            }),
        ),
        (
            "snapshot_end",
            Message::SnapshotEnd(SnapshotEnd {
                seq: Seq(42),
                digest: canonical_digest().combined(),
            }),
        ),
        (
            "deltas",
            Message::Deltas(Deltas {
                from_seq: Seq(42),
                seq: Seq(43),
                digest: canonical_digest().combined(),
                updates: canonical_updates(),
            }),
        ),
        ("ack", Message::Ack(Ack { seq: Seq(43) })),
        (
            "staleness",
            Message::Staleness(Staleness {
                stale: true,
                age_millis: 12_345,
                reason: "datastore unavailable: etcd watch: connection refused".into(),
            }),
        ),
    ]
}

// ---------------------------------------------------------------------------------------------
// Strategies.

/// Names that need escaping now and then.
fn name() -> impl Strategy<Value = String> {
    "[a-z0-9%/._-]{1,16}"
}

/// Host names: no '/', not empty.
fn host() -> impl Strategy<Value = String> {
    "[a-z0-9][a-z0-9.-]{0,20}"
}

fn config_name() -> impl Strategy<Value = String> {
    "[A-Za-z0-9_]{1,12}(/[A-Za-z0-9_]{1,6}){0,2}"
}

pub fn ipnet() -> impl Strategy<Value = IpNet> {
    prop_oneof![
        (any::<u32>(), 0u8..=32)
            .prop_map(|(a, l)| IpNet::V4(Ipv4Net::new(Ipv4Addr::from(a), l).unwrap())),
        (any::<u128>(), 0u8..=128)
            .prop_map(|(a, l)| IpNet::V6(Ipv6Net::new(Ipv6Addr::from(a), l).unwrap())),
    ]
}

pub fn key() -> impl Strategy<Value = Key> {
    prop_oneof![
        (host(), name(), name(), name()).prop_map(|(h, o, w, e)| Key::WorkloadEndpoint(
            WorkloadEndpointKey {
                hostname: h,
                orchestrator: o,
                workload: w,
                endpoint: e
            }
        )),
        (host(), name()).prop_map(|(h, e)| Key::HostEndpoint(HostEndpointKey {
            hostname: h,
            endpoint: e
        })),
        (
            prop::sample::select(PolicyKind::ALL.to_vec()),
            name(),
            name()
        )
            .prop_map(|(kind, ns, n)| {
                Key::Policy(PolicyKey {
                    kind,
                    namespace: kind.is_namespaced().then_some(ns),
                    name: n,
                })
            }),
        name().prop_map(|n| Key::ProfileRules(ProfileKey { name: n })),
        name().prop_map(|n| Key::ProfileLabels(ProfileKey { name: n })),
        name().prop_map(|n| Key::NetworkSet(NetworkSetKey { name: n })),
        ipnet().prop_map(|cidr| Key::IpPool(IpPoolKey { cidr })),
        ipnet().prop_map(|cidr| Key::Block(BlockKey { cidr })),
        host().prop_map(|h| Key::HostIp(HostIpKey { hostname: h })),
        (host(), config_name()).prop_map(|(h, n)| Key::HostConfig(HostConfigKey {
            hostname: h,
            name: n
        })),
        config_name().prop_map(|n| Key::GlobalConfig(GlobalConfigKey { name: n })),
        Just(Key::ReadyFlag),
        (
            prop::sample::select(ResourceKind::ALL.to_vec()),
            name(),
            name()
        )
            .prop_map(|(kind, ns, n)| {
                Key::Resource(ResourceKey {
                    kind,
                    namespace: kind.is_namespaced().then_some(ns),
                    name: n,
                })
            }),
    ]
}

fn text() -> impl Strategy<Value = String> {
    "\\PC{0,10}"
}

fn labels() -> impl Strategy<Value = Labels> {
    btree_map(text(), text(), 0..4)
}

fn ipaddr() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        any::<u32>().prop_map(|a| IpAddr::V4(a.into())),
        any::<u128>().prop_map(|a| IpAddr::V6(a.into())),
    ]
}

fn protocol_() -> impl Strategy<Value = Protocol> {
    prop_oneof![
        Just(Protocol::Tcp),
        Just(Protocol::Udp),
        Just(Protocol::Icmp),
        Just(Protocol::IcmpV6),
        Just(Protocol::Sctp),
        Just(Protocol::UdpLite),
        any::<u8>().prop_map(Protocol::Number),
    ]
}

fn port() -> impl Strategy<Value = Port> {
    prop_oneof![
        (any::<u16>(), any::<u16>()).prop_map(|(a, b)| Port::Range {
            first: a.min(b),
            last: a.max(b)
        }),
        text().prop_map(Port::Named),
    ]
}

fn icmp() -> impl Strategy<Value = Icmp> {
    (0u8..=254, option::of(any::<u8>())).prop_map(|(t, c)| Icmp {
        icmp_type: t,
        code: c,
    })
}

fn entity() -> impl Strategy<Value = EntityRule> {
    (
        vec(ipnet(), 0..3),
        text(),
        text(),
        vec(port(), 0..3),
        vec(text(), 0..2),
        text(),
        option::of((text(), text()).prop_map(|(name, namespace)| ServiceMatch { name, namespace })),
        vec(ipnet(), 0..2),
        text(),
        vec(port(), 0..2),
    )
        .prop_map(
            |(
                nets,
                selector,
                namespace_selector,
                ports,
                sans,
                sas,
                service,
                not_nets,
                not_selector,
                not_ports,
            )| {
                EntityRule {
                    nets,
                    selector,
                    namespace_selector,
                    ports,
                    service_account_names: sans,
                    service_account_selector: sas,
                    service,
                    not_nets,
                    not_selector,
                    not_ports,
                }
            },
        )
}

pub fn rule() -> impl Strategy<Value = Rule> {
    (
        prop::sample::select(vec![Action::Allow, Action::Deny, Action::Log, Action::Pass]),
        option::of(prop::sample::select(vec![4u8, 6])),
        option::of(protocol_()),
        option::of(protocol_()),
        option::of(icmp()),
        option::of(icmp()),
        entity(),
        entity(),
        option::of(
            (vec(text(), 0..2), vec(text(), 0..2))
                .prop_map(|(methods, paths)| HttpMatch { methods, paths }),
        ),
        rule_detail(),
    )
        .prop_map(
            |(
                action,
                ip_version,
                protocol,
                not_protocol,
                icmp,
                not_icmp,
                src,
                dst,
                http,
                detail,
            )| {
                Rule {
                    action,
                    ip_version,
                    protocol,
                    not_protocol,
                    icmp,
                    not_icmp,
                    src,
                    dst,
                    http,
                    detail,
                }
            },
        )
}

/// Mostly empty (the common case: no tail), sometimes every field set.
fn rule_detail() -> impl Strategy<Value = RuleDetail> {
    prop_oneof![
        3 => Just(RuleDetail::default()),
        1 => (text(), text(), any::<bool>(), any::<bool>(), prop::collection::btree_map(text(), text(), 0..2))
            .prop_map(|(s, d, p, np, annotations)| RuleDetail {
                orig_src_selector: s,
                orig_dst_selector: d,
                protocol_number: p,
                not_protocol_number: np,
                annotations,
            }),
    ]
}

fn mac() -> impl Strategy<Value = Mac> {
    any::<[u8; 6]>().prop_map(Mac)
}

fn encap() -> impl Strategy<Value = EncapMode> {
    prop::sample::select(vec![
        EncapMode::Never,
        EncapMode::Always,
        EncapMode::CrossSubnet,
    ])
}

pub fn value() -> impl Strategy<Value = Value> {
    let wep = (
        (text(), text(), text(), option::of(mac()), vec(text(), 0..3)),
        (
            vec(
                (any::<u32>(), 0u8..=32).prop_map(|(a, l)| Ipv4Net::new(a.into(), l).unwrap()),
                0..3,
            ),
            vec(
                (any::<u128>(), 0u8..=128).prop_map(|(a, l)| Ipv6Net::new(a.into(), l).unwrap()),
                0..2,
            ),
            vec(
                (ipaddr(), ipaddr()).prop_map(|(int_ip, ext_ip)| IpNat { int_ip, ext_ip }),
                0..2,
            ),
        ),
        (
            labels(),
            option::of(any::<u32>()),
            option::of(any::<u128>()),
        ),
        (
            vec(
                (text(), protocol_(), 1u16..).prop_map(|(name, protocol, port)| EndpointPort {
                    name,
                    protocol,
                    port,
                }),
                0..3,
            ),
            text(),
            vec(ipnet(), 0..2),
        ),
    )
        .prop_map(
            |(
                (state, name, iid, mac, profile_ids),
                (v4, v6, nat),
                (labels, gw4, gw6),
                (ports, generate_name, spoof),
            )| {
                Value::WorkloadEndpoint(WorkloadEndpoint {
                    state,
                    name,
                    active_instance_id: iid,
                    mac,
                    profile_ids,
                    ipv4_nets: v4,
                    ipv6_nets: v6,
                    ipv4_nat: nat.clone(),
                    ipv6_nat: nat,
                    labels,
                    ipv4_gateway: gw4.map(Into::into),
                    ipv6_gateway: gw6.map(Into::into),
                    ports,
                    generate_name,
                    allow_spoofed_source_prefixes: spoof,
                })
            },
        );
    let policy = (
        (text(), text(), option::of(-1e9f64..1e9), text()),
        (
            vec(
                prop::sample::select(vec![PolicyType::Ingress, PolicyType::Egress]),
                0..2,
            ),
            vec(rule(), 0..3),
            vec(rule(), 0..2),
        ),
        (any::<[bool; 3]>(), vec(text(), 0..2), option::of(text())),
    )
        .prop_map(
            |(
                (namespace, tier, order, selector),
                (types, inbound_rules, outbound_rules),
                (flags, hints, staged),
            )| {
                Value::Policy(Policy {
                    namespace,
                    tier,
                    order,
                    selector,
                    types,
                    inbound_rules,
                    outbound_rules,
                    untracked: flags[0],
                    pre_dnat: flags[1],
                    apply_on_forward: flags[2],
                    performance_hints: hints,
                    staged_action: staged,
                })
            },
        );
    prop_oneof![
        wep,
        (text(), vec(any::<u32>(), 0..2), labels(), vec(text(), 0..2)).prop_map(
            |(name, v4, labels, profile_ids)| {
                Value::HostEndpoint(HostEndpoint {
                    name,
                    expected_ipv4_addrs: v4.into_iter().map(Into::into).collect(),
                    expected_ipv6_addrs: vec![Ipv6Addr::LOCALHOST],
                    labels,
                    profile_ids,
                    ports: vec![],
                })
            }
        ),
        policy,
        (vec(rule(), 0..3), vec(rule(), 0..3)).prop_map(|(i, o)| Value::ProfileRules(
            ProfileRules {
                inbound_rules: i,
                outbound_rules: o
            }
        )),
        labels().prop_map(|l| Value::ProfileLabels(l.into())),
        (vec(ipnet(), 0..4), labels(), vec(text(), 0..2)).prop_map(
            |(nets, labels, profile_ids)| Value::NetworkSet(NetworkSet {
                nets,
                labels,
                profile_ids
            })
        ),
        (ipnet(), encap(), encap(), any::<[bool; 4]>()).prop_map(|(cidr, ipip, vxlan, f)| {
            Value::IpPool(IpPool {
                cidr,
                ipip_mode: ipip,
                vxlan_mode: vxlan,
                masquerade: f[0],
                ipam: f[1],
                disabled: f[2],
                disable_bgp_export: f[3],
            })
        }),
        (
            ipnet(),
            option::of(text()),
            any::<u32>(),
            any::<bool>(),
            allocation_table()
        )
            .prop_map(
                |(cidr, affinity, allocated, deleted, table)| Value::Block(Block {
                    cidr,
                    affinity,
                    allocated,
                    deleted,
                    table,
                })
            ),
        ipaddr().prop_map(Value::HostIp),
        text().prop_map(Value::Config),
        any::<bool>().prop_map(Value::ReadyFlag),
        (
            option::of(any::<u32>()),
            option::of(mac()),
            text(),
            option::of(any::<u32>()),
            labels(),
            node_detail()
        )
            .prop_map(|(addr, mac, wg, asn, labels, detail)| Value::Node(Node {
                ipv4_address: addr.map(|a| Ipv4Net::new(a.into(), 24).unwrap()),
                ipv6_address: None,
                ipv4_ipip_tunnel_addr: addr.map(Into::into),
                ipv4_vxlan_tunnel_addr: None,
                vxlan_tunnel_mac: mac,
                wireguard_public_key: wg,
                as_number: asn,
                labels,
                detail,
            })),
        (
            labels(),
            text(),
            prop_oneof![Just(0i64), any::<i64>()],
            // The second tail: empty (as before it existed) or set.
            prop_oneof![
                Just((String::new(), String::new(), Labels::new())),
                (text(), text(), labels())
            ]
        )
            .prop_map(
                |(labels, spec_json, generation, (uid, creation_timestamp, annotations))| {
                    Value::Resource(Resource {
                        labels,
                        spec_json,
                        detail: ResourceDetail {
                            generation,
                            uid,
                            creation_timestamp,
                            annotations,
                        },
                    })
                }
            ),
    ]
}

/// A block's table: empty (a version 1 value) or filled.
fn allocation_table() -> impl Strategy<Value = AllocationTable> {
    let attribute =
        (option::of(text()), labels(), labels()).prop_map(|(handle_id, secondary, alternate)| {
            AllocationAttribute {
                handle_id,
                secondary,
                alternate,
            }
        });
    prop_oneof![
        Just(AllocationTable::default()),
        (
            option::of(text()),
            option::of(vec(option::of(0u32..64), 0..64)),
            option::of(vec(0u32..64, 0..64)),
            option::of(vec(attribute, 0..4)),
            any::<u64>(),
            option::of(btree_map(text(), any::<u64>(), 0..4)),
        )
            .prop_map(|(t, allocations, unallocated, attributes, n, per)| {
                AllocationTable {
                    affinity_claim_time: t,
                    allocations,
                    unallocated,
                    attributes,
                    sequence_number: n,
                    sequence_number_for_allocation: per,
                }
            }),
    ]
}

/// A node's detail: empty (a version 1 value) or filled, with its second tail or without.
fn node_detail() -> impl Strategy<Value = NodeDetail> {
    prop_oneof![
        Just(NodeDetail::default()),
        (
            vec((text(), text()), 0..3),
            text(),
            option::of((text(), text())),
            vec((text(), vec(text(), 0..2)), 0..2),
            vec(text(), 0..2),
            any::<bool>(),
        )
            .prop_map(
                |(addresses, rr, wireguard, interfaces, pod_cidrs, invalid_as_v3)| NodeDetail {
                    addresses: addresses
                        .into_iter()
                        .map(|(address, kind)| NodeAddress { address, kind })
                        .collect(),
                    route_reflector_cluster_id: rr,
                    orch_refs: vec![OrchRef {
                        node_name: String::new(),
                        orchestrator: "k8s".into(),
                    }],
                    wireguard,
                    interfaces: interfaces
                        .into_iter()
                        .map(|(name, addresses)| NodeInterface { name, addresses })
                        .collect(),
                    pod_cidrs,
                    meta: NodeMeta {
                        invalid_as_v3,
                        ..NodeMeta::default()
                    },
                    ..NodeDetail::default()
                }
            ),
    ]
}

pub fn update() -> impl Strategy<Value = Update> {
    (key(), option::of(value()), any::<u64>(), any::<bool>()).prop_map(|(k, v, rev, new)| match v {
        Some(v) => Update::put(
            KeyPath::from(&k),
            EncodedValue::encode(&v),
            Revision(rev),
            if new {
                UpdateKind::New
            } else {
                UpdateKind::Updated
            },
        ),
        None => Update::delete(KeyPath::from(&k), Revision(rev)),
    })
}

fn digest() -> impl Strategy<Value = StateDigest> {
    vec((config_name(), text()), 0..20).prop_map(|kvs| {
        let mut d = StateDigest::new();
        for (k, v) in kvs {
            d.insert(&k, v.as_bytes());
        }
        d
    })
}

fn features() -> impl Strategy<Value = Features> {
    any::<u64>().prop_map(Features)
}

fn syncer() -> impl Strategy<Value = SyncerType> {
    prop_oneof![
        Just(SyncerType::Felix),
        Just(SyncerType::Bgp),
        Just(SyncerType::TunnelIpAllocation),
        Just(SyncerType::NodeStatus),
        "[a-z]{1,10}x".prop_map(|s| SyncerType::from_name(&s)),
    ]
}

fn extensions() -> impl Strategy<Value = Vec<Extension>> {
    vec(
        (any::<u16>(), vec(any::<u8>(), 0..8)).prop_map(|(id, data)| Extension { id, data }),
        0..3,
    )
}

pub fn message() -> impl Strategy<Value = Message> {
    let seq = || any::<u64>().prop_map(Seq);
    prop_oneof![
        (
            (
                text(),
                text(),
                vec(any::<u16>().prop_map(ProtocolVersion), 0..4),
                syncer()
            ),
            (
                any::<u8>().prop_map(CompressionSet),
                features(),
                extensions()
            ),
            option::of((
                option::of((any::<u64>(), any::<u64>()).prop_map(|(e, s)| Cursor {
                    epoch: Epoch(e),
                    seq: Seq(s)
                })),
                option::of(digest()),
            )),
        )
            .prop_map(
                |(
                    (hostname, info, versions, syncer_type),
                    (compression, features, extensions),
                    resume,
                )| {
                    Message::ClientHello(ClientHello {
                        hostname,
                        info,
                        versions,
                        syncer_type,
                        compression,
                        features,
                        resume: resume.map(|(cursor, digest)| Resume { cursor, digest }),
                        extensions,
                    })
                }
            ),
        (
            any::<u16>(),
            syncer(),
            any::<u64>(),
            features(),
            any::<u8>(),
            text(),
            extensions()
        )
            .prop_map(|(v, syncer_type, e, features, c, info, extensions)| {
                Message::ServerHello(ServerHello {
                    version: ProtocolVersion(v),
                    syncer_type,
                    epoch: Epoch(e),
                    features,
                    compression: CompressionSet(c),
                    info,
                    extensions,
                })
            }),
        (any::<u16>(), text(), vec(text(), 0..3)).prop_map(|(code, message, redirect)| {
            Message::Goodbye(Goodbye {
                reason: GoodbyeReason::from_code(code),
                message,
                redirect,
            })
        }),
        any::<u64>().prop_map(|t| Message::Ping(Ping {
            timestamp_micros: t
        })),
        any::<u64>().prop_map(|t| Message::Pong(Pong {
            ping_timestamp_micros: t
        })),
        prop::sample::select(vec![
            SyncStatus::WaitForDatastore,
            SyncStatus::ResyncInProgress,
            SyncStatus::InSync
        ])
        .prop_map(Message::SyncStatus),
        (
            seq(),
            option::of(vec((0u16..1024).prop_map(BucketId), 0..20)),
            any::<u64>()
        )
            .prop_map(|(seq, b, kvs)| {
                Message::SnapshotBegin(SnapshotBegin {
                    seq,
                    scope: match b {
                        None => SnapshotScope::Full,
                        Some(ids) => SnapshotScope::Buckets(BucketSet::new(ids).unwrap()),
                    },
                    kvs,
                })
            }),
        vec(
            update().prop_filter("snapshots carry values", |u| u.value.is_some()),
            0..8
        )
        .prop_map(|updates| Message::SnapshotChunk(SnapshotChunk { updates })),
        (seq(), any::<u64>())
            .prop_map(|(seq, digest)| Message::SnapshotEnd(SnapshotEnd { seq, digest })),
        (seq(), seq(), any::<u64>(), vec(update(), 0..8)).prop_map(
            |(from_seq, seq, digest, updates)| Message::Deltas(Deltas {
                from_seq,
                seq,
                digest,
                updates
            })
        ),
        seq().prop_map(|seq| Message::Ack(Ack { seq })),
        (any::<bool>(), any::<u64>(), ".{0,40}").prop_map(|(stale, age_millis, reason)| {
            Message::Staleness(Staleness {
                stale,
                age_millis,
                reason,
            })
        }),
    ]
}
