#![allow(clippy::unwrap_used)]
use super::*;

/// `ipset save` in a network namespace on this machine (ipset 7.17): two sets of ours, a
/// foreign one and a leftover temporary set.
const SAVE: &str = "\
create cali40s:abc hash:net family inet hashsize 1024 maxelem 1048576 bucketsize 12 initval 0x3a94bdcc
add cali40s:abc 10.1.0.0/16
add cali40s:abc 10.0.0.1
create cali40p:web hash:ip,port family inet hashsize 1024 maxelem 1048576 bucketsize 12 initval 0x162b8b1d
add cali40p:web 10.0.0.1,tcp:8080
add cali40p:web 10.0.0.2,udp:53
create foreign hash:ip family inet hashsize 1024 maxelem 65536 bucketsize 12 initval 0xc7119cb1
add foreign 1.2.3.4
create cali4ts:abc hash:net family inet hashsize 1024 maxelem 1048576 bucketsize 12 initval 0x16670090
";

fn members(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|m| (*m).to_owned()).collect()
}

fn net_set(list: &[&str]) -> IpSet {
    IpSet {
        kind: Some(IpSetKind::HashNet),
        members: members(list),
    }
}

fn dirty(names: &[&str]) -> Dirty {
    Dirty {
        ipsets: names.iter().map(|n| (*n).to_owned()).collect(),
        ..Dirty::default()
    }
}

#[test]
fn parses_real_save_output() {
    let sets = parse_save(SAVE);
    assert_eq!(
        sets.keys().collect::<Vec<_>>(),
        ["cali40p:web", "cali40s:abc", "cali4ts:abc"]
    );
    assert_eq!(
        sets["cali40s:abc"],
        KernelSet {
            kind: "hash:net".to_owned(),
            members: members(&["10.0.0.1", "10.1.0.0/16"]),
        }
    );
    assert_eq!(
        sets["cali40p:web"].members,
        members(&["10.0.0.1,tcp:8080", "10.0.0.2,udp:53"])
    );
    assert!(sets["cali4ts:abc"].members.is_empty());
    assert!(parse_save("add cali40x 1.2.3.4\ncreate\ncreate cali40y\n").is_empty());
}

#[test]
fn normalises_members() {
    use IpSetKind::{HashIpPort, HashNet};
    assert_eq!(
        canonical_member(HashNet, "10.0.0.1/32").as_deref(),
        Some("10.0.0.1")
    );
    assert_eq!(
        canonical_member(HashNet, "10.0.0.1").as_deref(),
        Some("10.0.0.1")
    );
    assert_eq!(
        canonical_member(HashNet, "10.1.2.3/16").as_deref(),
        Some("10.1.0.0/16")
    );
    assert_eq!(canonical_member(HashNet, "10.0.0.1,tcp:80"), None);
    assert_eq!(canonical_member(HashNet, "10.0.0.1\ndestroy foreign"), None);
    assert_eq!(
        canonical_member(HashIpPort, "10.0.0.1,TCP:80").as_deref(),
        Some("10.0.0.1,tcp:80")
    );
    assert_eq!(
        canonical_member(HashIpPort, "10.0.0.1,8080").as_deref(),
        Some("10.0.0.1,tcp:8080")
    );
    assert_eq!(
        canonical_member(HashIpPort, "10.0.0.1,udp:053").as_deref(),
        Some("10.0.0.1,udp:53")
    );
    assert_eq!(canonical_member(HashIpPort, "10.0.0.1,tcp:70000"), None);
    assert_eq!(canonical_member(HashIpPort, "10.0.0.1,icmp:ping"), None);
    assert_eq!(canonical_member(HashIpPort, "10.0.0.1"), None);
    assert_eq!(
        desired_members(
            "s",
            HashNet,
            &members(&["0.0.0.0/0", "bogus", "10.0.0.1/32"])
        ),
        members(&["0.0.0.0/1", "128.0.0.0/1", "10.0.0.1"])
    );
    // The kernel's own odd members are kept as printed, so they can be deleted.
    let odd = parse_save(
        "create cali40p:x hash:ip,port family inet\nadd cali40p:x 10.0.0.5,icmp:echo-request\n",
    );
    assert_eq!(
        odd["cali40p:x"].members,
        members(&["10.0.0.5,icmp:echo-request"])
    );
}

#[test]
fn new_set_is_created_and_filled() {
    let sets = BTreeMap::from([(
        "cali40n".to_owned(),
        net_set(&["10.0.0.1/32", "10.2.0.0/16"]),
    )]);
    let plan = plan_updates(&BTreeMap::new(), &sets, sets.keys().collect()).unwrap();
    assert_eq!(
        plan.text,
        "create cali40n hash:net family inet maxelem 1048576\nadd cali40n 10.0.0.1\nadd cali40n 10.2.0.0/16\n"
    );
    assert_eq!(plan.members_changed, 2);
}

#[test]
fn small_change_is_del_and_add_lines() {
    let kernel = parse_save(SAVE);
    let sets = BTreeMap::from([(
        "cali40s:abc".to_owned(),
        net_set(&["10.0.0.1", "10.1.0.0/16", "10.3.0.0/16"]),
    )]);
    let plan = plan_updates(&kernel, &sets, sets.keys().collect()).unwrap();
    assert_eq!(plan.text, "add cali40s:abc 10.3.0.0/16\n");
    let sets = BTreeMap::from([(
        "cali40s:abc".to_owned(),
        net_set(&["10.0.0.1", "10.3.0.0/16"]),
    )]);
    let plan = plan_updates(&kernel, &sets, sets.keys().collect()).unwrap();
    assert_eq!(
        plan.text,
        "del cali40s:abc 10.1.0.0/16\nadd cali40s:abc 10.3.0.0/16\n"
    );
    assert_eq!(plan.members_changed, 2);
}

#[test]
fn large_change_is_built_aside_and_swapped() {
    let kernel = parse_save(SAVE);
    let sets = BTreeMap::from([("cali40s:abc".to_owned(), net_set(&["10.9.0.0/16"]))]);
    let plan = plan_updates(&kernel, &sets, sets.keys().collect()).unwrap();
    // The leftover temporary set goes first.
    assert_eq!(
        plan.text,
        "destroy cali4ts:abc\ncreate cali4ts:abc hash:net family inet maxelem 1048576\n\
         add cali4ts:abc 10.9.0.0/16\nswap cali4ts:abc cali40s:abc\ndestroy cali4ts:abc\n"
    );
    assert_eq!(plan.members_changed, 1);
    assert_eq!(plan.gone, ["cali4ts:abc"]);
    // Emptying a set swaps in an empty one.
    let sets = BTreeMap::from([("cali40s:abc".to_owned(), net_set(&[]))]);
    let plan = plan_updates(&kernel, &sets, sets.keys().collect()).unwrap();
    assert!(plan.text.contains("swap cali4ts:abc cali40s:abc\n"));
}

#[test]
fn type_change_recreates() {
    let kernel = parse_save(SAVE);
    let sets = BTreeMap::from([(
        "cali40s:abc".to_owned(),
        IpSet {
            kind: Some(IpSetKind::HashIpPort),
            members: members(&["10.0.0.1,tcp:80"]),
        },
    )]);
    let plan = plan_updates(&kernel, &sets, sets.keys().collect()).unwrap();
    assert_eq!(
        plan.text,
        "destroy cali40s:abc\ncreate cali40s:abc hash:ip,port family inet maxelem 1048576\n\
         add cali40s:abc 10.0.0.1,tcp:80\n"
    );
}

#[test]
fn kind_none_follows_the_kernel_or_the_members() {
    let kernel = parse_save(SAVE);
    let sets = BTreeMap::from([
        (
            "cali40p:web".to_owned(),
            IpSet {
                kind: None,
                members: members(&["10.0.0.1,tcp:8080", "10.0.0.2,udp:53"]),
            },
        ),
        (
            "cali40p:new".to_owned(),
            IpSet {
                kind: None,
                members: members(&["10.0.0.1,tcp:80"]),
            },
        ),
    ]);
    let plan = plan_updates(&kernel, &sets, sets.keys().collect()).unwrap();
    assert_eq!(
        plan.text,
        "create cali40p:new hash:ip,port family inet maxelem 1048576\nadd cali40p:new 10.0.0.1,tcp:80\n"
    );
}

#[test]
fn unchanged_sets_and_unmarked_sets_plan_nothing() {
    let kernel = parse_save(SAVE);
    let sets = BTreeMap::from([
        (
            "cali40s:abc".to_owned(),
            net_set(&["10.0.0.1/32", "10.1.0.0/16"]),
        ),
        (
            "cali40p:web".to_owned(),
            IpSet {
                kind: Some(IpSetKind::HashIpPort),
                members: members(&["10.0.0.1,tcp:8080", "10.0.0.2,udp:53"]),
            },
        ),
    ]);
    assert_eq!(
        plan_updates(&kernel, &sets, sets.keys().collect())
            .unwrap()
            .text,
        ""
    );
    let changed = BTreeMap::from([("cali40s:abc".to_owned(), net_set(&["10.0.0.1"]))]);
    let d = dirty(&["cali40p:web"]);
    let names = d
        .ipsets
        .iter()
        .filter(|n| changed.contains_key(*n))
        .collect();
    assert_eq!(plan_updates(&kernel, &changed, names).unwrap().text, "");
}

#[test]
fn deletions_take_ours_only_and_leftover_temps() {
    let kernel = parse_save(SAVE);
    let sets = BTreeMap::from([("cali40s:abc".to_owned(), net_set(&[]))]);
    let plan = plan_deletions(&kernel, &sets);
    assert_eq!(plan.text, "destroy cali40p:web\ndestroy cali4ts:abc\n");
    assert_eq!(plan_deletions(&kernel, &BTreeMap::new()).gone.len(), 3);
}

#[test]
fn bad_names_are_refused_and_plan_says_so() {
    for (name, ours) in [
        ("foreign", false),
        ("cali40-0123456789012345678901234567", true),
        ("cali40 x", true),
        ("cali40\nx", true),
    ] {
        let sets = BTreeMap::from([(name.to_owned(), net_set(&[]))]);
        let err = plan_updates(&BTreeMap::new(), &sets, sets.keys().collect()).err();
        if ours {
            assert_eq!(err, Some(InvalidIpset::Name(name.to_owned())), "{name}");
        } else {
            assert_eq!(err, Some(InvalidIpset::NotOurs(name.to_owned())), "{name}");
        }
        let manager = IpsetManager::new(IpsetConfig::default());
        assert!(manager.plan(&sets).starts_with("# invalid desired state"));
    }
}

#[test]
fn plan_without_cache_creates_everything() {
    let manager = IpsetManager::new(IpsetConfig::default());
    let sets = BTreeMap::from([("cali40a".to_owned(), net_set(&["10.0.0.1"]))]);
    assert_eq!(
        manager.plan(&sets),
        "create cali40a hash:net family inet maxelem 1048576\nadd cali40a 10.0.0.1\n"
    );
    assert_eq!(manager.plan(&BTreeMap::new()), "");
}

#[test]
fn temp_names_keep_the_length() {
    assert_eq!(temp_name("cali40s:abc"), "cali4ts:abc");
    assert_eq!(temp_name("cali40s:abc").len(), "cali40s:abc".len());
}
