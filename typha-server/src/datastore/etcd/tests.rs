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
    // Kinds we do not serve share the prefix: skipped, not invalid.
    assert_eq!(parse_key(&key("bgppeers/peer-1")), KeyMeaning::Other);
    for bad in [
        key("networkpolicies/no-namespace"),
        key("globalnetworkpolicies/ns/extra"),
        key("nodes/"),
        key("workloadendpoints/ns/"),
        b"/calico/v1/config/foo".to_vec(),
        [PREFIX.as_bytes(), b"nodes/\xff"].concat(),
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
    assert!(item_from_kv(&key("bgpconfigurations/default"), ok, 1).is_none());
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
