use super::*;

fn key(rest: &str) -> Vec<u8> {
    format!("{PREFIX}{rest}").into_bytes()
}

#[test]
fn keys_follow_calicos_layout_both_ways() {
    for id in [
        ResourceId::namespaced(Kind::WorkloadEndpoint, "prod", "node1-k8s-pod-eth0"),
        ResourceId::global(Kind::GlobalNetworkPolicy, "default.deny"),
        ResourceId::global(Kind::IpPool, "default-ipv4-ippool"),
    ] {
        assert_eq!(parse_key(key_of(&id).as_bytes()), KeyMeaning::Resource(id));
    }
    assert_eq!(
        key_of(&ResourceId::namespaced(Kind::NetworkPolicy, "ns", "p")),
        "/calico/resources/v3/projectcalico.org/networkpolicies/ns/p"
    );
    // Kinds we do not serve share the prefix: skipped, not invalid. So do IPAM blocks, which
    // Calico never stores as v3 resources in etcd; it does store BlockAffinity resources there.
    assert_eq!(parse_key(&key("ipamconfigs/default")), KeyMeaning::Other);
    assert_eq!(
        parse_key(&key("kubernetesservice/ns/web")),
        KeyMeaning::Other
    );
    let id = ResourceId::global(Kind::BgpPeer, "peer-1");
    assert_eq!(parse_key(&key("bgppeers/peer-1")), KeyMeaning::Resource(id));
    let id = ResourceId::global(Kind::BgpFilter, "export-only");
    assert_eq!(
        key_of(&id).as_bytes(),
        key("bgpfilters/export-only").as_slice()
    );
    assert_eq!(
        parse_key(&key("bgpfilters/export-only")),
        KeyMeaning::Resource(id)
    );
    // Where OpenStack's ML2 driver (and Calico's v3 client) store LiveMigrations, which
    // Calico's felix syncer reads in etcd mode too.
    let id = ResourceId::namespaced(Kind::LiveMigration, "openstack", "dest-openstack-vm-port");
    assert_eq!(
        key_of(&id).as_bytes(),
        key("livemigrations/openstack/dest-openstack-vm-port").as_slice()
    );
    assert_eq!(
        parse_key(&key("livemigrations/openstack/dest-openstack-vm-port")),
        KeyMeaning::Resource(id)
    );
    assert_eq!(parse_key(&key("ipamblocks/10-0-1-0-26")), KeyMeaning::Other);
    let id = ResourceId::global(Kind::BlockAffinity, "node-1-10-0-1-0-26");
    assert_eq!(parse_key(key_of(&id).as_bytes()), KeyMeaning::Resource(id));
    // Keys in the watched range but under neither prefix are not Calico data we serve.
    assert_eq!(parse_key(b"/calico/rejectcidrs/x"), KeyMeaning::Other);
    for bad in [
        key("networkpolicies/no-namespace"),
        key("globalnetworkpolicies/ns/extra"),
        key("nodes/"),
        key("workloadendpoints/ns/"),
        [PREFIX.as_bytes(), b"nodes/\xff"].concat(),
        b"/calico/ipam/v2/assignment/ipv4/block/10.0.1.0".to_vec(),
        b"/calico/ipam/v2/elsewhere".to_vec(),
    ] {
        assert!(
            matches!(parse_key(&bad), KeyMeaning::Bad(_)),
            "{}",
            String::from_utf8_lossy(&bad)
        );
    }
}

#[test]
fn values_become_items_and_bad_ones_are_invalid_not_errors() {
    let k = key("globalnetworksets/blocked");
    let ok = br#"{"apiVersion":"projectcalico.org/v3","kind":"GlobalNetworkSet",
        "metadata":{"name":"blocked"},"spec":{"nets":["192.0.2.0/24"]}}"#;
    let r = item_from_kv(&k, ok, 42).unwrap().unwrap();
    assert_eq!(
        r.id(),
        ResourceId::global(Kind::GlobalNetworkSet, "blocked")
    );
    assert_eq!(r.metadata.resource_version.as_deref(), Some("42"));

    // Identity comes from the key when the value leaves it out.
    let bare = br#"{"spec":{"nets":["192.0.2.0/24"]}}"#;
    let r = item_from_kv(&key("networksets/prod/lb"), bare, 7)
        .unwrap()
        .unwrap();
    assert_eq!(
        r.id(),
        ResourceId::namespaced(Kind::NetworkSet, "prod", "lb")
    );

    let want_id = Some(ResourceId::global(Kind::GlobalNetworkSet, "blocked"));
    for bad in [
        &b"{not json"[..],
        b"[1,2]",
        b"\xff\xfe",
        br#"{"kind":"GlobalNetworkSet","metadata":{"name":"other"},"spec":{}}"#,
        br#"{"kind":"Node","metadata":{"name":"blocked"},"spec":{}}"#,
        br#"{"apiVersion":"v1","kind":"GlobalNetworkSet","metadata":{"name":"blocked"}}"#,
        br#"{"spec":{"nets":"not a list"}}"#,
    ] {
        let Some(Err(inv)) = item_from_kv(&k, bad, 1) else {
            panic!("{} should be invalid", String::from_utf8_lossy(bad));
        };
        assert_eq!(inv.id, want_id, "{}", inv.reason);
    }
    let Some(Err(inv)) = item_from_kv(&key("nodes/a/b"), ok, 1) else {
        panic!("bad key");
    };
    assert_eq!(inv.id, None);
    assert!(item_from_kv(&key("ipreservations/default"), ok, 1).is_none());
}

#[test]
fn ipam_keys_are_read_in_calicos_ipam_model() {
    let block = b"/calico/ipam/v2/assignment/ipv4/block/10.0.1.0-26";
    let meaning = parse_key(block);
    assert_eq!(
        meaning.id(),
        Some(ResourceId::global(Kind::IpamBlock, "10-0-1-0-26"))
    );
    let value = br#"{"cidr":"10.0.1.0/26","affinity":"host:node-1","allocations":[0,null],
        "unallocated":[1],"attributes":[{"handle_id":"h"}],"sequenceNumber":1,"deleted":false}"#;
    let r = item_from_kv(block, value, 3).unwrap().unwrap();
    assert_eq!(r.id(), meaning.id().unwrap());
    let affinity = b"/calico/ipam/v2/host/node-1/ipv4/block/10.0.1.0-26";
    let r = item_from_kv(affinity, br#"{"state":"confirmed","deleted":false}"#, 3)
        .unwrap()
        .unwrap();
    assert_eq!(
        r.id(),
        ResourceId::global(Kind::BlockAffinity, "node-1-10-0-1-0-26")
    );
    // Handles and IPAM settings: skipped, not invalid.
    assert!(item_from_kv(b"/calico/ipam/v2/handle/k8s-pod-network.1", b"{}", 3).is_none());
    assert!(item_from_kv(b"/calico/ipam/v2/config", b"{}", 3).is_none());
    // A value of the wrong shape names the block; a key outside the layout names nothing.
    let Some(Err(inv)) = item_from_kv(block, b"{\"cidr\":7}", 3) else {
        panic!("a bad block value is invalid");
    };
    assert_eq!(inv.id, meaning.id());
    let Some(Err(inv)) = item_from_kv(b"/calico/ipam/v2/assignment/ipv4/block/x", value, 3) else {
        panic!("a bad IPAM key is invalid");
    };
    assert_eq!(inv.id, None);
}

#[test]
fn one_range_covers_both_layouts_and_the_listing_leaves_out_handles() {
    let (start, end) = watched_range();
    let inside = |k: &[u8]| start.as_slice() <= k && k < end.as_slice();
    for k in [
        &b"/calico/ipam/v2/assignment/ipv4/block/10.0.1.0-26"[..],
        b"/calico/ipam/v2/host/n/ipv4/block/10.0.1.0-26",
        b"/calico/ipam/v2/handle/h",
        b"/calico/resources/v3/projectcalico.org/zzzz/zz",
    ] {
        assert!(inside(k), "{}", String::from_utf8_lossy(k));
    }
    // What else Calico keeps in etcd sorts outside.
    for k in [
        &b"/calico/bgp/v1/global/as_num"[..],
        b"/calico/felix/v2/r/host/h/status",
        b"/calico/v1/Ready",
        b"/calico/staticroutes/x",
    ] {
        assert!(!inside(k), "{}", String::from_utf8_lossy(k));
    }
    let [(a0, a1), (b0, b1)] = listed_ranges();
    assert_eq!(
        (a0.as_slice(), b1.as_slice()),
        (start.as_slice(), end.as_slice())
    );
    assert!(a1 < b0);
    let listed = |k: &[u8]| {
        (a0.as_slice() <= k && k < a1.as_slice()) || (b0.as_slice() <= k && k < b1.as_slice())
    };
    assert!(!listed(b"/calico/ipam/v2/handle/h"));
    assert!(listed(b"/calico/ipam/v2/host/n/ipv4/block/10.0.1.0-26"));
    assert!(listed(b"/calico/ipam/v2/config"));
    assert!(listed(b"/calico/resources/v3/projectcalico.org/nodes/n"));
}

#[test]
fn writers_store_ipam_where_calico_does_and_the_rest_as_v3_json() {
    let block = Resource::from_json(serde_json::json!({
        "apiVersion": "crd.projectcalico.org/v1", "kind": "IPAMBlock",
        "metadata": {"name": "10-0-1-0-26", "resourceVersion": "12"},
        "spec": {"cidr": "10.0.1.0/26", "affinity": "host:node-1", "allocations": [0],
                 "unallocated": [], "attributes": [{}], "sequenceNumberForAllocation": {}}}))
    .unwrap();
    let (k, v) = key_value_of(&block).unwrap();
    assert_eq!(k, "/calico/ipam/v2/assignment/ipv4/block/10.0.1.0-26");
    let mut back = Resource::clone(&item_from_kv(k.as_bytes(), &v, 12).unwrap().unwrap());
    assert_eq!(back, block);
    back.metadata.resource_version = None;

    let set = Resource::from_json(serde_json::json!({
        "apiVersion": "projectcalico.org/v3", "kind": "GlobalNetworkSet",
        "metadata": {"name": "s", "resourceVersion": "3"}, "spec": {"nets": ["192.0.2.0/24"]}}))
    .unwrap();
    let (k, v) = key_value_of(&set).unwrap();
    assert_eq!(k, key_of(&set.id()));
    let stored: serde_json::Value = serde_json::from_slice(&v).unwrap();
    assert_eq!(stored["metadata"].get("resourceVersion"), None);
}

#[test]
fn the_range_of_a_prefix_ends_after_its_last_key() {
    assert_eq!(range_end("/a/"), b"/a0".to_vec());
    assert_eq!(range_end("a\u{7f}"), b"a\x80".to_vec());
    let end = range_end(PREFIX);
    assert!(key("zzzz/zz").as_slice() < end.as_slice());
    assert!(b"/calico/resources/v3/projectcalico.org0".as_slice() >= end.as_slice());
}

#[test]
fn endpoints_and_tls_must_agree() {
    let eps = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    assert!(check_endpoints(&eps(&["http://127.0.0.1:2379"]), false).is_ok());
    assert!(check_endpoints(&eps(&["https://a:2379", "https://b:2379"]), true).is_ok());
    for (e, tls) in [
        (eps(&[]), false),
        (eps(&["https://a:2379"]), false),
        (eps(&["http://a:2379"]), true),
        (eps(&["http://a:2379", "https://b:2379"]), true),
        (eps(&["a:2379"]), false),
        (eps(&["unix://a"]), false),
        (eps(&["http://"]), false),
    ] {
        assert!(check_endpoints(&e, tls).is_err(), "{e:?} tls={tls}");
    }
}

#[tokio::test]
async fn connecting_checks_the_configuration_but_not_that_etcd_is_up() {
    // Nothing listens on port 1: still fine, it is waited for later.
    let e = Etcd::connect(&["http://127.0.0.1:1".to_owned()], None)
        .await
        .unwrap();
    assert!(matches!(
        e.list().await,
        Err(DatastoreError::Unavailable { .. })
    ));
    let missing = EtcdTls {
        ca_file: "/nonexistent/ca.crt".into(),
        client: None,
    };
    assert!(matches!(
        Etcd::connect(&["https://127.0.0.1:1".to_owned()], Some(&missing)).await,
        Err(EtcdError::File { .. })
    ));
}
