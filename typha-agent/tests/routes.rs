//! The route manager against the real kernel, each test in network namespaces of its own.
//!
//! A test runs its body on a thread that has joined the namespace (`setns`), with a
//! current-thread runtime, because netlink sockets and `/proc/sys/net` belong to the namespace
//! of the thread that opens them. It checks the result from outside with `ip -n` and
//! `ip netns exec`, as an operator would. Needs root; namespaces are removed by a guard even
//! when a test fails.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::net::Ipv4Addr;
use std::time::Duration;

use ipnet::Ipv4Net;
use typha_agent::dataplane::RouteTarget;
use typha_agent::dataplane::routes::{RouteConfig, RouteManager};

mod common;

use common::netns::Netns;

/// This file's namespaces (loopback up) and views of their routes and sysctls.
impl Netns {
    fn new() -> Self {
        Self::add("tr").with_lo_up()
    }

    /// A veth pair inside the namespace, both ends up unless `up` is false.
    fn veth(&self, name: &str, peer: &str, up: bool) {
        self.ip(&["link", "add", name, "type", "veth", "peer", "name", peer]);
        if up {
            self.ip(&["link", "set", name, "up"]);
            self.ip(&["link", "set", peer, "up"]);
        }
    }

    /// `ip route show proto 80` in the namespace, one trimmed route a line.
    fn our_routes(&self) -> Vec<String> {
        self.ip(&["route", "show", "proto", "80"])
            .lines()
            .map(|l| l.trim().to_owned())
            .collect()
    }

    /// Every IPv4 route of the main table.
    fn all_routes(&self) -> Vec<String> {
        self.ip(&["route", "show"])
            .lines()
            .map(|l| l.trim().to_owned())
            .collect()
    }

    /// A sysctl file as seen from inside the namespace.
    fn cat(&self, path: &str) -> String {
        self.exec(&["cat", path]).trim().to_owned()
    }

    /// Runs `body` on a thread inside the namespace, with a current-thread runtime.
    fn run_in<F, Fut, T>(&self, body: F) -> T
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = T>,
        T: Send + 'static,
    {
        self.on_thread(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(body())
        })
    }
}

fn net(s: &str) -> Ipv4Net {
    s.parse().unwrap()
}

fn dev(name: &str) -> RouteTarget {
    RouteTarget::Dev(name.to_owned())
}

fn via(gw: &str) -> RouteTarget {
    RouteTarget::Via(gw.parse::<Ipv4Addr>().unwrap())
}

fn manager() -> RouteManager {
    RouteManager::new(RouteConfig::default()).unwrap()
}

fn no_interfaces() -> BTreeSet<String> {
    BTreeSet::new()
}

/// Waits for a link event, bounded so a missing event fails the test instead of hanging it.
async fn link_event(m: &mut RouteManager) {
    tokio::time::timeout(Duration::from_secs(10), m.link_event())
        .await
        .expect("no link event within 10 s");
}

fn has(routes: &[String], line: &str) -> bool {
    routes.iter().any(|r| r == line)
}

#[test]
fn dev_routes_to_an_existing_veth_carry_our_protocol() {
    let ns = Netns::new();
    ns.veth("wa", "wa-p", true);
    let stats = ns.run_in(|| async {
        let mut m = manager();
        let want = BTreeMap::from([
            (net("10.65.0.2/32"), dev("wa")),
            (net("10.65.0.3/32"), dev("wa")),
        ]);
        let first = m.apply(&want, &no_interfaces()).await.unwrap();
        let again = m.apply(&want, &no_interfaces()).await.unwrap();
        (first, again, m.pending())
    });
    let (first, again, pending) = stats;
    assert_eq!(first.routes_added, 2);
    assert_eq!(
        again.routes_added + again.routes_removed,
        0,
        "no-change apply"
    );
    assert_eq!(pending, 0);
    let routes = ns.our_routes();
    assert!(has(&routes, "10.65.0.2 dev wa scope link"), "{routes:?}");
    assert!(has(&routes, "10.65.0.3 dev wa scope link"), "{routes:?}");
    // `show proto 80` filters; make sure the protocol is really ours and not just matched.
    let detail = ns.ip(&["route", "show", "10.65.0.2/32"]);
    assert!(detail.contains("proto 80"), "{detail}");
}

#[test]
fn dev_route_waits_for_its_interface_and_follows_it() {
    let ns = Netns::new();
    let inner = ns.handle();
    ns.run_in(move || async move {
        let ns = inner;
        let mut m = manager();
        let want = BTreeMap::from([(net("10.65.1.2/32"), dev("wb"))]);

        let s = m.apply(&want, &no_interfaces()).await.unwrap();
        assert_eq!(
            (s.routes_added, m.pending()),
            (0, 1),
            "missing interface is pending"
        );
        assert!(ns.our_routes().is_empty());

        // Created down: the kernel refuses a route through it, still pending.
        ns.veth("wb", "wb-p", false);
        link_event(&mut m).await;
        let s = m.apply(&want, &no_interfaces()).await.unwrap();
        assert_eq!(
            (s.routes_added, m.pending()),
            (0, 1),
            "down interface is pending"
        );

        // Up, but its peer is still down (no carrier): the kernel takes the route.
        ns.ip(&["link", "set", "wb", "up"]);
        link_event(&mut m).await;
        let s = m.apply(&want, &no_interfaces()).await.unwrap();
        assert_eq!((s.routes_added, m.pending()), (1, 0));
        let routes = ns.our_routes();
        assert!(
            has(&routes, "10.65.1.2 dev wb scope link linkdown"),
            "{routes:?}"
        );

        // The interface goes away (the kernel drops its routes) and comes back with a new
        // index: the route follows without a resync.
        ns.ip(&["link", "del", "wb"]);
        link_event(&mut m).await;
        let s = m.apply(&want, &no_interfaces()).await.unwrap();
        assert_eq!((s.routes_added, m.pending()), (0, 1));
        ns.veth("wb", "wb-p", true);
        link_event(&mut m).await;
        let s = m.apply(&want, &no_interfaces()).await.unwrap();
        assert_eq!((s.routes_added, m.pending()), (1, 0));
        assert!(has(&ns.our_routes(), "10.65.1.2 dev wb scope link"));
    });
}

#[test]
fn link_events_coalesce_and_the_wait_is_cancel_safe() {
    let ns = Netns::new();
    let inner = ns.handle();
    ns.run_in(move || async move {
        let ns = inner;
        let mut m = manager();
        // Nothing happened: the wait does not complete, and giving up on it loses nothing.
        let quiet = tokio::time::timeout(Duration::from_millis(200), m.link_event()).await;
        assert!(quiet.is_err(), "link event without a link change");
        ns.veth("wc", "wc-p", true);
        link_event(&mut m).await;
        while tokio::time::timeout(Duration::from_millis(300), m.link_event())
            .await
            .is_ok()
        {}

        // A burst: five veth pairs created and set up are at least 20 RTM_NEWLINK messages
        // (one per end created, one per end set up). They complete only a few waits: what is
        // queued when a wait completes is drained with it; the kernel's link watcher may
        // still report carrier changes a moment later.
        for i in 0..5 {
            ns.veth(&format!("wc{i}"), &format!("wc{i}-p"), true);
        }
        let mut completions = 0;
        while tokio::time::timeout(Duration::from_millis(300), m.link_event())
            .await
            .is_ok()
        {
            completions += 1;
            assert!(completions < 20, "link events never stop");
        }
        assert!((1..=4).contains(&completions), "{completions} completions");
    });
}

#[test]
fn via_route_to_a_gateway_on_a_connected_subnet() {
    let ns = Netns::new();
    ns.veth("wd", "wd-p", true);
    ns.ip(&["addr", "add", "10.70.0.1/24", "dev", "wd"]);
    let (s, pending) = ns.run_in(|| async {
        let mut m = manager();
        let want = BTreeMap::from([(net("10.66.0.0/26"), via("10.70.0.2"))]);
        let s = m.apply(&want, &no_interfaces()).await.unwrap();
        // Read back from the kernel, the route is recognised as what was asked for.
        m.invalidate();
        let again = m.apply(&want, &no_interfaces()).await.unwrap();
        assert_eq!((again.routes_added, again.routes_removed), (0, 0));
        (s, m.pending())
    });
    assert_eq!((s.routes_added, pending), (1, 0));
    let routes = ns.our_routes();
    assert!(
        has(&routes, "10.66.0.0/26 via 10.70.0.2 dev wd"),
        "{routes:?}"
    );
}

#[test]
fn via_route_to_an_unreachable_gateway_is_pending_until_reachable() {
    let ns = Netns::new();
    ns.veth("we", "we-p", true);
    let inner = ns.handle();
    ns.run_in(move || async move {
        let ns = inner;
        let mut m = manager();
        let want = BTreeMap::from([
            (net("10.66.1.0/26"), via("10.71.0.2")),
            (net("10.66.2.0/26"), RouteTarget::Blackhole),
        ]);
        let s = m.apply(&want, &no_interfaces()).await.unwrap();
        assert_eq!(
            (s.routes_added, m.pending()),
            (1, 1),
            "the rest is programmed"
        );
        assert_eq!(ns.our_routes(), vec!["blackhole 10.66.2.0/26".to_owned()]);

        // Retried on the next apply; an address change is no link event, none is needed.
        ns.ip(&["addr", "add", "10.71.0.1/24", "dev", "we"]);
        let s = m.apply(&want, &no_interfaces()).await.unwrap();
        assert_eq!((s.routes_added, m.pending()), (1, 0));
        assert!(has(&ns.our_routes(), "10.66.1.0/26 via 10.71.0.2 dev we"));
    });
}

#[test]
fn blackhole_routes() {
    let ns = Netns::new();
    let s = ns.run_in(|| async {
        let mut m = manager();
        let want = BTreeMap::from([(net("10.67.0.0/26"), RouteTarget::Blackhole)]);
        m.apply(&want, &no_interfaces()).await.unwrap()
    });
    assert_eq!(s.routes_added, 1);
    assert_eq!(ns.our_routes(), vec!["blackhole 10.67.0.0/26".to_owned()]);
}

#[test]
fn routes_no_longer_wanted_are_deleted() {
    let ns = Netns::new();
    ns.veth("wf", "wf-p", true);
    let inner = ns.handle();
    ns.run_in(move || async move {
        let ns = inner;
        let mut m = manager();
        let all = BTreeMap::from([
            (net("10.68.0.2/32"), dev("wf")),
            (net("10.68.1.0/26"), RouteTarget::Blackhole),
            (net("10.68.2.0/26"), RouteTarget::Blackhole),
        ]);
        assert_eq!(
            m.apply(&all, &no_interfaces()).await.unwrap().routes_added,
            3
        );
        assert_eq!(ns.our_routes().len(), 3);
        let one = BTreeMap::from([(net("10.68.1.0/26"), RouteTarget::Blackhole)]);
        let s = m.apply(&one, &no_interfaces()).await.unwrap();
        assert_eq!((s.routes_added, s.routes_removed), (0, 2));
        assert_eq!(ns.our_routes(), vec!["blackhole 10.68.1.0/26".to_owned()]);
        let s = m.apply(&BTreeMap::new(), &no_interfaces()).await.unwrap();
        assert_eq!(s.routes_removed, 1);
        assert!(ns.our_routes().is_empty());
    });
}

#[test]
fn foreign_routes_are_never_removed_or_replaced() {
    let ns = Netns::new();
    ns.veth("wg", "wg-p", true);
    ns.ip(&["addr", "add", "10.72.0.1/24", "dev", "wg"]);
    // One foreign route nobody wants, one on a destination the agent wants.
    ns.ip(&[
        "route",
        "add",
        "10.99.0.0/24",
        "dev",
        "wg",
        "proto",
        "static",
    ]);
    ns.ip(&[
        "route",
        "add",
        "10.98.0.0/24",
        "dev",
        "wg",
        "proto",
        "static",
    ]);
    let foreign = |ns: &Netns| {
        let all = ns.all_routes();
        assert!(
            has(&all, "10.99.0.0/24 dev wg proto static scope link"),
            "{all:?}"
        );
        assert!(
            has(&all, "10.98.0.0/24 dev wg proto static scope link"),
            "{all:?}"
        );
    };
    let inner = ns.handle();
    ns.run_in(move || async move {
        let ns = inner;
        let mut m = manager();
        let want = BTreeMap::from([
            (net("10.98.0.0/24"), via("10.72.0.2")),
            (net("10.97.0.0/24"), dev("wg")),
        ]);
        let s = m.apply(&want, &no_interfaces()).await.unwrap();
        assert_eq!((s.routes_added, s.routes_removed, m.pending()), (1, 0, 1));
        foreign(&ns);
        assert_eq!(
            ns.our_routes(),
            vec!["10.97.0.0/24 dev wg scope link".to_owned()]
        );

        // Still there after a resync, and after the agent stops wanting anything.
        m.invalidate();
        let s = m.apply(&want, &no_interfaces()).await.unwrap();
        assert_eq!((s.routes_added, s.routes_removed, m.pending()), (0, 0, 1));
        foreign(&ns);
        let s = m.apply(&BTreeMap::new(), &no_interfaces()).await.unwrap();
        assert_eq!((s.routes_added, s.routes_removed, m.pending()), (0, 1, 0));
        foreign(&ns);
        assert!(ns.our_routes().is_empty());

        // Once the foreign route is gone (and the kernel is re-read), ours takes its place.
        ns.ip(&["route", "del", "10.98.0.0/24", "proto", "static"]);
        m.invalidate();
        let s = m.apply(&want, &no_interfaces()).await.unwrap();
        assert_eq!((s.routes_added, m.pending()), (2, 0));
        assert!(has(&ns.our_routes(), "10.98.0.0/24 via 10.72.0.2 dev wg"));
    });
}

#[test]
fn a_route_deleted_by_hand_comes_back_after_invalidate() {
    let ns = Netns::new();
    let inner = ns.handle();
    ns.run_in(move || async move {
        let ns = inner;
        let mut m = manager();
        let want = BTreeMap::from([
            (net("10.69.0.0/26"), RouteTarget::Blackhole),
            (net("10.69.1.0/26"), RouteTarget::Blackhole),
        ]);
        m.apply(&want, &no_interfaces()).await.unwrap();
        ns.ip(&["route", "del", "blackhole", "10.69.0.0/26", "proto", "80"]);

        // The cache says all is well: nothing is asked of the kernel.
        let s = m.apply(&want, &no_interfaces()).await.unwrap();
        assert_eq!(s.routes_added, 0);
        assert_eq!(ns.our_routes().len(), 1);

        m.invalidate();
        let s = m.apply(&want, &no_interfaces()).await.unwrap();
        assert_eq!((s.routes_added, s.routes_removed), (1, 0));
        assert_eq!(ns.our_routes().len(), 2);
    });
}

#[test]
fn a_changed_gateway_replaces_the_route() {
    let ns = Netns::new();
    ns.veth("wh", "wh-p", true);
    ns.ip(&["addr", "add", "10.73.0.1/24", "dev", "wh"]);
    let inner = ns.handle();
    ns.run_in(move || async move {
        let ns = inner;
        let mut m = manager();
        let dst = net("10.66.3.0/26");
        m.apply(&BTreeMap::from([(dst, via("10.73.0.2"))]), &no_interfaces())
            .await
            .unwrap();
        assert_eq!(
            ns.our_routes(),
            vec!["10.66.3.0/26 via 10.73.0.2 dev wh".to_owned()]
        );

        let s = m
            .apply(&BTreeMap::from([(dst, via("10.73.0.3"))]), &no_interfaces())
            .await
            .unwrap();
        assert_eq!(
            (s.routes_added, s.routes_removed),
            (1, 0),
            "replaced in place"
        );
        assert_eq!(
            ns.our_routes(),
            vec!["10.66.3.0/26 via 10.73.0.3 dev wh".to_owned()]
        );

        // To a gateway that cannot be reached: the old, wrong route goes; the new one waits.
        let s = m
            .apply(&BTreeMap::from([(dst, via("10.74.0.3"))]), &no_interfaces())
            .await
            .unwrap();
        assert_eq!((s.routes_added, s.routes_removed, m.pending()), (0, 1, 1));
        assert!(ns.our_routes().is_empty());

        // And from a gateway to an interface.
        let s = m
            .apply(&BTreeMap::from([(dst, dev("wh"))]), &no_interfaces())
            .await
            .unwrap();
        assert_eq!((s.routes_added, m.pending()), (1, 0));
        assert_eq!(
            ns.our_routes(),
            vec!["10.66.3.0/26 dev wh scope link".to_owned()]
        );
    });
}

#[test]
fn workload_interface_sysctls_are_set_once_per_interface_index() {
    let ns = Netns::new();
    ns.veth("wi", "wi-p", true);
    let conf = |ns: &Netns| {
        (
            ns.cat("/proc/sys/net/ipv4/conf/wi/proxy_arp"),
            ns.cat("/proc/sys/net/ipv4/conf/wi/forwarding"),
            ns.cat("/proc/sys/net/ipv4/neigh/wi/proxy_delay"),
        )
    };
    let fresh = conf(&ns);
    assert_eq!(fresh.0, "0", "a new veth starts without proxy_arp");
    assert_ne!(fresh.2, "0", "and with a proxy_delay");
    let inner = ns.handle();
    let conf2 = conf;
    ns.run_in(move || async move {
        let ns = inner;
        let mut m = manager();
        let ifaces = BTreeSet::from(["wi".to_owned(), "not-yet".to_owned()]);
        m.apply(&BTreeMap::new(), &ifaces).await.unwrap();
        assert_eq!(conf2(&ns), ("1".into(), "1".into(), "0".into()));

        // Once per index: set by hand, it stays as it is...
        ns.exec(&["sysctl", "-qw", "net.ipv4.conf.wi.proxy_arp=0"]);
        m.apply(&BTreeMap::new(), &ifaces).await.unwrap();
        assert_eq!(conf2(&ns).0, "0");
        // ...until the interface is recreated (a new index) ...
        ns.ip(&["link", "del", "wi"]);
        ns.veth("wi", "wi-p", true);
        link_event(&mut m).await;
        m.apply(&BTreeMap::new(), &ifaces).await.unwrap();
        assert_eq!(conf2(&ns), ("1".into(), "1".into(), "0".into()));
        // ...or a resync.
        ns.exec(&["sysctl", "-qw", "net.ipv4.conf.wi.proxy_arp=0"]);
        m.invalidate();
        m.apply(&BTreeMap::new(), &ifaces).await.unwrap();
        assert_eq!(conf2(&ns).0, "1");
    });
}

#[test]
fn an_unwritable_sysctl_tree_is_an_error_for_an_existing_interface() {
    let ns = Netns::new();
    ns.veth("wj", "wj-p", true);
    let err = ns.run_in(|| async {
        let dir = tempfile::tempdir().unwrap();
        let mut m = RouteManager::new(RouteConfig {
            sysctl_root: dir.path().join("missing"),
            ..RouteConfig::default()
        })
        .unwrap();
        let ifaces = BTreeSet::from(["wj".to_owned()]);
        m.apply(&BTreeMap::new(), &ifaces)
            .await
            .unwrap_err()
            .to_string()
    });
    assert!(err.contains("missing/net/ipv4/conf/wj/proxy_arp"), "{err}");
}

/// What the setns'd test threads rely on: `/proc/sys/net` shows the namespace of the thread
/// that opens the file, not that of the process, so the default `sysctl_root` is right for a
/// manager running on a thread inside a namespace.
#[test]
fn proc_sys_net_follows_the_threads_namespace() {
    let ns = Netns::new();
    ns.veth("wk", "wk-p", true);
    let path = "/proc/sys/net/ipv4/conf/wk/proxy_arp";
    assert!(
        !std::path::Path::new(path).exists(),
        "host namespace sees the veth"
    );
    ns.on_thread(move || {
        assert!(std::path::Path::new(path).exists());
        std::fs::write(path, "1").unwrap();
    });
    assert_eq!(ns.cat(path), "1");
    assert!(!std::path::Path::new(path).exists());
}
