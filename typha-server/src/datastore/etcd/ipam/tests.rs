use super::*;

fn net(s: &str) -> IpNet {
    s.parse().unwrap()
}

fn parse(rest: &str) -> Result<Option<IpamKey>, String> {
    parse_key(&format!("{IPAM_PREFIX}{rest}"), rest)
}

#[test]
fn keys_follow_calicos_ipam_layout() {
    assert_eq!(
        parse("assignment/ipv4/block/10.0.1.0-26"),
        Ok(Some(IpamKey::Block(net("10.0.1.0/26"))))
    );
    assert_eq!(
        parse("assignment/ipv6/block/fd00:10:244::-122"),
        Ok(Some(IpamKey::Block(net("fd00:10:244::/122"))))
    );
    // As Calico parses it: host bits are dropped.
    assert_eq!(
        parse("assignment/ipv4/block/10.0.1.7-26"),
        Ok(Some(IpamKey::Block(net("10.0.1.0/26"))))
    );
    let affinity = |node: &str, cidr: &str| {
        Ok(Some(IpamKey::Affinity {
            node: node.into(),
            cidr: net(cidr),
        }))
    };
    assert_eq!(
        parse("host/kube-master/ipv4/block/192.168.221.64-26"),
        affinity("kube-master", "192.168.221.64/26")
    );
    assert_eq!(
        parse("virtual/vm-1/ipv6/block/fd00::-122"),
        affinity("vm-1", "fd00::/122")
    );
    // Known, and not for Felix.
    for skipped in [
        "handle/k8s-pod-network.5f1c9a0e3b",
        "handle/a/b",
        "config",
        "host/kube-master",
    ] {
        assert_eq!(parse(skipped), Ok(None), "{skipped}");
    }
    for bad in [
        "assignment/ipv4/block/10.0.1.0/26",
        "assignment/ipv4/block/10.0.1.0",
        "assignment/ipv6/block/10.0.1.0-26",
        "assignment/ipv4/block/fd00::-122",
        "assignment/ipv4/block/not-a-cidr",
        "assignment/ipv5/block/10.0.1.0-26",
        "assignment/ipv4/blocks/10.0.1.0-26",
        "host//ipv4/block/10.0.1.0-26",
        "host/node/ipv4/block/10.0.1.0-33",
        "other/node/ipv4/block/10.0.1.0-26",
        "config/extra",
        "",
    ] {
        assert!(parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn names_are_the_kubernetes_backends() {
    assert_eq!(cidr_to_name(&net("10.0.1.0/26")), "10-0-1-0-26");
    assert_eq!(cidr_to_name(&net("fd00:10:244::/122")), "fd00-10-244---122");
    assert_eq!(
        affinity_name("node-1", &net("10.0.1.0/26")),
        "node-1-10-0-1-0-26"
    );
    assert_eq!(
        IpamKey::Block(net("10.0.1.0/26")).id(),
        ResourceId::global(Kind::IpamBlock, "10-0-1-0-26")
    );
    // Past 253 characters: the node cut short, then 11 hex digits of SHA-256 of
    // "<node>+<cidr name>".
    let node = "n".repeat(260);
    let name = affinity_name(&node, &net("10.0.1.0/26"));
    assert!(name.len() < 253, "{}", name.len());
    let (head, hash) = name.rsplit_once('-').unwrap();
    assert_eq!(head, format!("{}-10-0-1-0-26", "n".repeat(252 - 11 - 13)));
    let digest = ring::digest::digest(
        &ring::digest::SHA256,
        format!("{node}+10-0-1-0-26").as_bytes(),
    );
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(hash, &hex[..11]);
    // A node name with multi-byte characters is cut without a panic.
    assert!(affinity_name(&"é".repeat(200), &net("10.0.1.0/26")).len() < 260);
}

/// A block as Calico's IPAM stores it: the shape of libcalico-go's `AllocationBlock` (its
/// data-model notes show one), here a /29 with three addresses given to two pods.
const BLOCK: &str = r#"{
    "cidr": "10.0.1.0/29",
    "affinity": "host:node-1",
    "allocations": [0, null, 1, 1, null, null, null, null],
    "unallocated": [1, 4, 5, 6, 7],
    "attributes": [
        {"handle_id": "k8s-pod-network.0cd47986", "secondary": {"namespace": "prod", "node": "node-1", "pod": "web-0", "timestamp": "2026-01-05 10:12:01.5 +0000 UTC"}},
        {"handle_id": "k8s-pod-network.3465987a", "secondary": {"namespace": "prod", "node": "node-1", "pod": "web-1"}}
    ],
    "sequenceNumber": 7,
    "sequenceNumberForAllocation": {"0": 3, "2": 6, "3": 6},
    "deleted": false
}"#;

#[test]
fn a_calico_block_becomes_the_ipamblock_crd_of_the_same_block() {
    let key = IpamKey::Block(net("10.0.1.0/29"));
    let r = item(&key, BLOCK.as_bytes(), 42).unwrap();
    assert_eq!(r.id(), ResourceId::global(Kind::IpamBlock, "10-0-1-0-29"));
    assert_eq!(r.metadata.resource_version.as_deref(), Some("42"));
    // What Calico's Kubernetes backend stores for the same block, as our Kubernetes backend
    // reads it: the same resource (apart from the version).
    let crd = Resource::from_json(json!({
        "apiVersion": "crd.projectcalico.org/v1", "kind": "IPAMBlock",
        "metadata": {"name": "10-0-1-0-29", "resourceVersion": "42"},
        "spec": serde_json::from_str::<serde_json::Value>(BLOCK).unwrap()}))
    .unwrap();
    assert_eq!(*r, crd);

    // No affinity (null), no allocations array (a Go nil slice), marked deleted: passed on.
    let r = item(
        &key,
        br#"{"cidr":"10.0.1.0/29","affinity":null,"allocations":null,"deleted":true}"#,
        1,
    )
    .unwrap();
    let Spec::IpamBlock(s) = &r.spec else {
        panic!("{r:?}")
    };
    assert_eq!(
        (s.affinity.as_deref(), &s.allocations, s.deleted),
        (None, &None, true)
    );
}

#[test]
fn calico_affinities_become_the_blockaffinity_crd_of_the_same_affinity() {
    let key = IpamKey::Affinity {
        node: "node-1".into(),
        cidr: net("10.0.1.0/26"),
    };
    let crd = |state: &str, deleted: &str| {
        Resource::from_json(json!({
            "apiVersion": "crd.projectcalico.org/v1", "kind": "BlockAffinity",
            "metadata": {"name": "node-1-10-0-1-0-26", "resourceVersion": "9"},
            "spec": {"state": state, "node": "node-1", "type": "host", "cidr": "10.0.1.0/26",
                     "deleted": deleted}}))
        .unwrap()
    };
    // Values as Calico writes them (and as its confd test data holds them): with and
    // without `deleted`, and empty from releases before 3.0.7.
    for (value, want) in [
        (
            &br#"{"state":"confirmed","deleted":false}"#[..],
            crd("confirmed", "false"),
        ),
        (br#"{"state":"pending"}"#, crd("pending", "false")),
        (
            br#"{"state":"pendingDeletion","deleted":true}"#,
            crd("pendingDeletion", "true"),
        ),
        (b"{}", crd("", "false")),
        (b"", crd("", "false")),
    ] {
        assert_eq!(
            *item(&key, value, 9).unwrap(),
            want,
            "{}",
            String::from_utf8_lossy(value)
        );
    }
}

#[test]
fn values_of_the_wrong_shape_are_invalid_naming_the_resource() {
    let block = IpamKey::Block(net("10.0.1.0/26"));
    for bad in [
        &b"{not json"[..],
        b"",
        b"[1,2]",
        b"null",
        br#"{"cidr":"10.0.2.0/26"}"#,
        br#"{"cidr":"banana"}"#,
        br#"{"cidr":"10.0.1.0/26","allocations":[-1]}"#,
        br#"{"cidr":"10.0.1.0/26","allocations":"all"}"#,
        br#"{"cidr":"10.0.1.0/26","deleted":"yes"}"#,
    ] {
        let inv = item(&block, bad, 1).unwrap_err();
        assert_eq!(inv.id, Some(block.id()), "{}", String::from_utf8_lossy(bad));
    }
    let affinity = IpamKey::Affinity {
        node: "n".into(),
        cidr: net("10.0.1.0/26"),
    };
    for bad in [
        &b"{"[..],
        b"7",
        br#"{"state":1}"#,
        br#"{"deleted":"false"}"#,
    ] {
        let inv = item(&affinity, bad, 1).unwrap_err();
        assert_eq!(
            inv.id,
            Some(affinity.id()),
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
}

#[test]
fn what_is_written_reads_back_as_the_same_resource() {
    let block = Resource::from_json(json!({
        "apiVersion": "crd.projectcalico.org/v1", "kind": "IPAMBlock",
        "metadata": {"name": "fd00-10-244---122"},
        "spec": {"cidr": "fd00:10:244::/122", "affinity": "host:node-2",
                 "allocations": [null, 0, 1]}}))
    .unwrap();
    let affinity = Resource::from_json(json!({
        "apiVersion": "projectcalico.org/v3", "kind": "BlockAffinity",
        "metadata": {"name": "node-2-10-0-1-0-26"},
        "spec": {"state": "confirmed", "node": "node-2", "cidr": "10.0.1.0/26",
                 "deleted": "false"}}))
    .unwrap();
    // A manifest that gives only the allocations is written with what Calico's IPAM keeps
    // beside them, and reads back with it.
    let mut filled = block.clone();
    if let Spec::IpamBlock(s) = &mut filled.spec {
        s.unallocated = Some(vec![0]);
        s.attributes = Some(vec![Default::default(), Default::default()]);
        s.sequence_number_for_allocation = Some(Default::default());
    }
    let (k, v) = key_value(&block).unwrap().unwrap();
    let key = parse_key(&k, k.strip_prefix(IPAM_PREFIX).unwrap())
        .unwrap()
        .unwrap();
    let mut back = Resource::clone(&item(&key, &v, 5).unwrap());
    back.metadata.resource_version = None;
    assert_eq!(back, filled);
    let cases = [
        (
            &filled,
            "/calico/ipam/v2/assignment/ipv6/block/fd00:10:244::-122",
        ),
        (
            &affinity,
            "/calico/ipam/v2/host/node-2/ipv4/block/10.0.1.0-26",
        ),
    ];
    for (r, want_key) in cases {
        let (k, v) = key_value(r).unwrap().unwrap();
        assert_eq!(k, want_key);
        let rest = k.strip_prefix(IPAM_PREFIX).unwrap();
        let key = parse_key(&k, rest).unwrap().unwrap();
        let mut back = Resource::clone(&item(&key, &v, 5).unwrap());
        back.metadata.resource_version = None;
        assert_eq!(&back, r);
    }
    let stored: serde_json::Value =
        serde_json::from_slice(&key_value(&block).unwrap().unwrap().1).unwrap();
    assert_eq!(stored["unallocated"], json!([0]));
    assert_eq!(stored["attributes"].as_array().map(Vec::len), Some(2));

    let mut no_cidr = affinity.clone();
    if let Spec::BlockAffinity(s) = &mut no_cidr.spec {
        s.cidr = "10.0.1.0".into();
    }
    assert!(matches!(
        key_value(&no_cidr),
        Some(Err(IpamError::Cidr { .. }))
    ));
    let other = Resource::from_json(json!({
        "apiVersion": "projectcalico.org/v3", "kind": "GlobalNetworkSet",
        "metadata": {"name": "s"}, "spec": {}}))
    .unwrap();
    assert!(key_value(&other).is_none());
}
