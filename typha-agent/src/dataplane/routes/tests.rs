#![allow(clippy::unwrap_used)]
use super::*;

fn route(kind: RouteType, scope: RouteScope, attrs: Vec<RouteAttribute>) -> RouteMessage {
    let mut m = RouteMessageBuilder::<Ipv4Addr>::new()
        .destination_prefix(Ipv4Addr::new(10, 0, 1, 0), 24)
        .protocol(RouteProtocol::from(80))
        .kind(kind)
        .scope(scope)
        .build();
    m.attributes.extend(attrs);
    m
}

#[test]
fn plan_prints_ip_route_lines() {
    let routes = BTreeMap::from([
        (
            "10.0.0.5/32".parse().unwrap(),
            RouteTarget::Dev("cali1".into()),
        ),
        (
            "10.1.0.0/26".parse().unwrap(),
            RouteTarget::Via(Ipv4Addr::new(192, 168, 0, 2)),
        ),
        ("10.2.0.0/26".parse().unwrap(), RouteTarget::Blackhole),
    ]);
    assert_eq!(
        RouteManager::plan(&routes, 80),
        "10.0.0.5/32 dev cali1 scope link proto 80\n\
         10.1.0.0/26 via 192.168.0.2 proto 80\n\
         blackhole 10.2.0.0/26 proto 80\n"
    );
    assert_eq!(RouteManager::plan(&BTreeMap::new(), 80), "");
}

#[test]
fn kernel_routes_are_read_as_the_agent_writes_them() {
    let dst: Ipv4Net = "10.0.1.0/24".parse().unwrap();
    let dev = route(
        RouteType::Unicast,
        RouteScope::Link,
        vec![RouteAttribute::Oif(7)],
    );
    let (d, r) = parse_route(&dev).unwrap();
    assert_eq!((d, r.protocol, r.target), (dst, 80, Target::Dev(7)));
    assert!(r.has_our_key());

    let gw = RouteAttribute::Gateway(RouteAddress::Inet(Ipv4Addr::new(10, 9, 0, 1)));
    let via = route(
        RouteType::Unicast,
        RouteScope::Universe,
        vec![
            gw.clone(),
            RouteAttribute::Oif(7),
            RouteAttribute::Priority(5),
        ],
    );
    let (_, r) = parse_route(&via).unwrap();
    assert_eq!(r.target, Target::Via(Ipv4Addr::new(10, 9, 0, 1)));
    assert!(!r.has_our_key(), "a metric makes it a different route");

    let bh = route(RouteType::BlackHole, RouteScope::Universe, vec![]);
    assert_eq!(parse_route(&bh).unwrap().1.target, Target::Blackhole);
}

#[test]
fn routes_the_agent_never_writes_read_as_other() {
    // A dev route with the wrong scope, an onlink gateway, an unreachable route.
    let wrong_scope = route(
        RouteType::Unicast,
        RouteScope::Universe,
        vec![RouteAttribute::Oif(7)],
    );
    let mut onlink = route(
        RouteType::Unicast,
        RouteScope::Universe,
        vec![RouteAttribute::Gateway(RouteAddress::Inet(Ipv4Addr::new(
            10, 9, 0, 1,
        )))],
    );
    onlink.header.flags.insert(RouteFlags::Onlink);
    let unreachable = route(RouteType::Unreachable, RouteScope::Universe, vec![]);
    for m in [wrong_scope, onlink, unreachable] {
        assert_eq!(parse_route(&m).unwrap().1.target, Target::Other, "{m:?}");
    }
}

#[test]
fn only_the_main_ipv4_table_is_read() {
    let mut local = route(RouteType::Unicast, RouteScope::Link, vec![]);
    local.header.table = 255;
    assert!(parse_route(&local).is_none());
    let big = route(
        RouteType::Unicast,
        RouteScope::Link,
        vec![RouteAttribute::Table(1000)],
    );
    assert!(parse_route(&big).is_none());
    let mut v6 = route(RouteType::Unicast, RouteScope::Link, vec![]);
    v6.header.address_family = AddressFamily::Inet6;
    assert!(parse_route(&v6).is_none());
    // A prefix length the kernel would never send is skipped, not a panic.
    let mut bad = route(RouteType::Unicast, RouteScope::Link, vec![]);
    bad.header.destination_prefix_length = 40;
    assert!(parse_route(&bad).is_none());
}

#[test]
fn forget_removes_one_matching_route_and_empty_entries() {
    let dst: Ipv4Net = "10.0.1.0/24".parse().unwrap();
    let r = KernelRoute {
        protocol: 80,
        target: Target::Blackhole,
        priority: 0,
        tos: 0,
    };
    let mut table = BTreeMap::from([(dst, vec![r.clone(), r.clone()])]);
    forget(&mut table, dst, &r);
    assert_eq!(table.get(&dst).map(Vec::len), Some(1));
    forget(&mut table, dst, &r);
    assert!(table.is_empty());
}
