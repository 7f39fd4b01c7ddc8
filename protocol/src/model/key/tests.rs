use super::*;

fn rt(path: &str) -> Key {
    let key: Key = path.parse().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(key.to_string(), path, "round trip of {path}");
    assert_eq!(Key::validate(path).unwrap(), key.key_type());
    key
}

#[test]
fn calico_default_paths_round_trip() {
    let k = rt("/calico/v1/host/node-1/workload/k8s/default%2fnginx-7d9b/endpoint/eth0");
    assert_eq!(
        k,
        Key::WorkloadEndpoint(WorkloadEndpointKey {
            hostname: "node-1".into(),
            orchestrator: "k8s".into(),
            workload: "default/nginx-7d9b".into(),
            endpoint: "eth0".into(),
        })
    );
    rt("/calico/v1/host/node-1/endpoint/eth0-hep");
    rt("/calico/v1/policy/NetworkPolicy/prod/allow-web");
    rt("/calico/v1/policy/GlobalNetworkPolicy/default-deny");
    rt("/calico/v1/policy/KubernetesNetworkPolicy/prod/knp.default.web");
    rt("/calico/v1/policy/profile/kns.default/rules");
    rt("/calico/v1/policy/profile/ksa.default.default/labels");
    rt("/calico/v1/netset/prod%2fblocked");
    rt("/calico/v1/ipam/v4/pool/10.65.0.0-16");
    rt("/calico/v1/ipam/v6/pool/fd00:65::-48");
    rt("/calico/ipam/v2/assignment/ipv4/block/10.65.3.64-26");
    rt("/calico/ipam/v2/assignment/ipv6/block/fd00:65::1:0-122");
    rt("/calico/v1/host/node-1/bird_ip");
    rt("/calico/v1/host/node-1/config/LogSeverityScreen");
    rt("/calico/v1/host/node-1/config/some/nested/name");
    rt("/calico/v1/config/ReportingIntervalSecs");
    rt("/calico/v1/config/a/b");
    assert_eq!(rt("/calico/v1/Ready"), Key::ReadyFlag);
    rt("/calico/resources/v3/projectcalico.org/nodes/node-1");
    rt("/calico/resources/v3/projectcalico.org/kubernetesservice/default/kubernetes");
}

#[test]
fn escapes_round_trip_exactly() {
    let k = Key::NetworkSet(NetworkSetKey {
        name: "a/b%c%2fd".into(),
    });
    let p = k.to_string();
    assert_eq!(p, "/calico/v1/netset/a%2fb%25c%252fd");
    assert_eq!(rt(&p), k);
}

#[test]
fn malformed_paths_are_errors_that_name_the_path() {
    for bad in [
        "",
        "/",
        "calico/v1/Ready",
        "/calico/v1/Ready/",
        "/calico/v1/host//endpoint/x",
        "/calico/v1/host/h/workload/k8s/w/endpoint",
        "/calico/v1/host/h/workload/k8s/w/endpoint/e/extra",
        "/calico/v1/netset/bad%41escape",
        "/calico/v1/netset/trailing%2",
        "/calico/v1/policy/Bogus/x",
        "/calico/v1/policy/NetworkPolicy/no-namespace",
        "/calico/v1/policy/GlobalNetworkPolicy/ns/extra",
        "/calico/v1/ipam/v4/pool/10.0.0.0-33",
        "/calico/v1/ipam/v4/pool/10.0.0.0/16",
        "/calico/v1/ipam/v4/pool/fd00::-64",
        "/calico/v1/ipam/v6/pool/FD00::-64",
        "/calico/v1/ipam/v4/pool/10.0.0.0-016",
        "/calico/v1/config/",
        "/calico/v1/config/a//b",
        "/calico/v1/host/h/config/",
        "/calico/resources/v3/projectcalico.org/widgets/x",
        "/calico/resources/v3/projectcalico.org/nodes/ns/x",
        "/calico/a/b/c/d/e/f/g/h/i/j/k",
    ] {
        let e = Key::parse(bad).unwrap_err();
        assert_eq!(e.path, bad);
        assert!(e.to_string().contains("malformed key path"), "{e}");
        assert!(Key::validate(bad).is_err());
    }
}

#[test]
fn long_bad_paths_are_truncated_in_errors() {
    let bad = format!("/x{}", "é".repeat(400));
    let e = Key::parse(&bad).unwrap_err();
    assert!(e.path.len() <= 256);
}

/// From the wire, a well-formed path of a kind this build does not know is carried as an
/// opaque key; a malformed one is still an error; a known one is typed, and says whether a
/// version 1 peer knows it too.
#[test]
fn paths_from_the_wire_are_known_opaque_or_malformed() {
    for unknown in [
        "/calico/v1/policy/AdminNetworkPolicy/x",
        "/calico/resources/v3/projectcalico.org/widgets/x",
        "/calico/resources/v3/projectcalico.org/widgets/ns/x",
        "/calico/v2/something/new",
        "/calico/a/b/c/d/e/f/g/h/i/j/k",
    ] {
        assert_eq!(Key::classify(unknown), Ok(PathClass::Unknown), "{unknown}");
        assert!(
            Key::parse(unknown).is_err(),
            "{unknown}: parse stays strict"
        );
        let p = crate::model::KeyPath::from_wire(unknown).unwrap();
        assert_eq!(p.key_type(), KeyType::Opaque);
        assert!(!p.in_v1());
        let k = p.key();
        assert_eq!(k.to_string(), unknown);
        assert!(!k.in_v1());
        assert!(crate::model::KeyPath::new(unknown).is_err());
    }
    for malformed in [
        "/not/calico",
        "/calico/v1/netset/bad%41escape",
        "/calico/v1/ipam/v4/pool/10.0.0.0-33",
        "/calico/v1/policy/NetworkPolicy/no-namespace",
        "/calico/resources/v3/projectcalico.org/nodes/ns/x",
        "/calico/v2//empty",
        "/calico/v2/trailing/",
    ] {
        assert!(Key::classify(malformed).is_err(), "{malformed}");
        assert!(crate::model::KeyPath::from_wire(malformed).is_err());
    }
    let long = format!("/calico/v2/{}", "x".repeat(MAX_OPAQUE_PATH));
    assert!(
        Key::classify(&long).is_err(),
        "an opaque path has a length bound"
    );

    let filter = "/calico/resources/v3/projectcalico.org/bgpfilters/f1";
    assert_eq!(
        Key::classify(filter),
        Ok(PathClass::Known {
            key_type: KeyType::Resource,
            in_v1: false
        })
    );
    assert!(!Key::parse(filter).unwrap().in_v1());
    let peer = "/calico/resources/v3/projectcalico.org/bgppeers/p1";
    assert_eq!(
        Key::classify(peer),
        Ok(PathClass::Known {
            key_type: KeyType::Resource,
            in_v1: true
        })
    );
    // Namespaced, and of a later kind too.
    let migration = "/calico/resources/v3/projectcalico.org/livemigrations/ns1/vmim-1";
    assert_eq!(
        Key::classify(migration),
        Ok(PathClass::Known {
            key_type: KeyType::Resource,
            in_v1: false
        })
    );
    assert_eq!(
        Key::parse(migration).unwrap(),
        Key::Resource(ResourceKey {
            kind: ResourceKind::LiveMigration,
            namespace: Some("ns1".into()),
            name: "vmim-1".into(),
        })
    );
    for k in ResourceKind::ALL {
        assert_eq!(
            k.in_v1(),
            !matches!(k, ResourceKind::BgpFilter | ResourceKind::LiveMigration),
            "{k:?}"
        );
    }
    for later in [
        "/calico/v1/policy/StagedKubernetesNetworkPolicy/ns/x",
        "/calico/v1/policy/KubernetesClusterNetworkPolicy/x",
    ] {
        assert_eq!(
            Key::classify(later),
            Ok(PathClass::Known {
                key_type: KeyType::Policy,
                in_v1: false
            }),
            "{later}"
        );
        assert!(!Key::parse(later).unwrap().in_v1(), "{later}");
    }
    // Cluster-wide: a namespace segment is malformed, not a kind to carry opaquely.
    assert!(Key::classify("/calico/v1/policy/KubernetesClusterNetworkPolicy/ns/x").is_err());
    for k in PolicyKind::ALL {
        assert_eq!(
            k.in_v1(),
            !matches!(
                k,
                PolicyKind::StagedKubernetesNetworkPolicy
                    | PolicyKind::KubernetesClusterNetworkPolicy
            ),
            "{k:?}"
        );
    }
}
