//! The agent's iptables and ipset managers against the real kernel: each test makes a network
//! namespace of its own (`tp-<pid>-<n>`, removed on drop even when the test fails) and runs
//! the real `iptables-restore`/`iptables-save`/`ipset` in it through
//! `ip netns exec`. Tests run in parallel: iptables state and ipsets are per namespace.
//!
//! Needs root (network namespaces); as another user each test says so on stderr and passes
//! without checking anything.

// In tests a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::collections::{BTreeMap, BTreeSet};

use typha_agent::dataplane::ipsets::{IpsetConfig, IpsetManager};
use typha_agent::dataplane::iptables::{IptablesConfig, IptablesManager};
use typha_agent::dataplane::{ApplyStats, DataplaneError, Desired, Dirty, Hook, IpSet, IpSetKind};

mod common;

use common::netns::{Netns, run};

/// This file's views of a namespace's iptables and ipset state.
impl Netns {
    /// A fresh namespace; when not root, a failure naming the requirement, or `None` (after
    /// saying so) if skipping is explicitly allowed (`TYPHA_TEST_ALLOW_SKIP`).
    fn new() -> Option<Self> {
        common::requirements::root().then(|| Self::add("tp"))
    }

    fn save(&self) -> String {
        self.exec(&["iptables-save", "-t", "filter"])
    }

    /// `-A <chain>` lines of iptables-save, in order, without the `-A <chain> ` part.
    fn rules(&self, chain: &str) -> Vec<String> {
        let head = format!("-A {chain} ");
        self.save()
            .lines()
            .filter_map(|l| l.strip_prefix(&head).map(str::to_owned))
            .collect()
    }

    fn chains(&self) -> BTreeSet<String> {
        self.save()
            .lines()
            .filter_map(|l| l.strip_prefix(':'))
            .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
            .collect()
    }

    fn set_names(&self) -> BTreeSet<String> {
        self.exec(&["ipset", "list", "-n"])
            .lines()
            .map(str::to_owned)
            .collect()
    }

    fn members(&self, set: &str) -> BTreeSet<String> {
        self.exec(&["ipset", "save", set])
            .lines()
            .filter_map(|l| l.strip_prefix("add "))
            .filter_map(|l| l.split_whitespace().nth(1).map(str::to_owned))
            .collect()
    }

    /// A chain, a rule in FORWARD and an ipset that belong to someone else.
    fn add_foreign_state(&self) {
        self.exec(&["iptables", "-N", "FOO-chain"]);
        self.exec(&[
            "iptables",
            "-A",
            "FOO-chain",
            "-s",
            "10.9.0.0/16",
            "-j",
            "ACCEPT",
        ]);
        self.exec(&[
            "iptables",
            "-A",
            "FORWARD",
            "-s",
            "1.2.3.4",
            "-j",
            "FOO-chain",
        ]);
        self.exec(&["ipset", "create", "foreign", "hash:ip"]);
        self.exec(&["ipset", "add", "foreign", "1.2.3.4"]);
    }

    fn assert_foreign_state(&self) {
        assert!(self.chains().contains("FOO-chain"), "{}", self.save());
        assert_eq!(self.rules("FOO-chain"), ["-s 10.9.0.0/16 -j ACCEPT"]);
        assert!(
            self.rules("FORWARD")
                .contains(&"-s 1.2.3.4/32 -j FOO-chain".to_owned()),
            "{}",
            self.save()
        );
        assert_eq!(self.members("foreign"), set(&["1.2.3.4"]));
    }
}

fn set(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

fn net_set(list: &[&str]) -> IpSet {
    IpSet {
        kind: Some(IpSetKind::HashNet),
        members: set(list),
    }
}

fn hook(chain: &str, rule: &str) -> Hook {
    Hook {
        chain: chain.to_owned(),
        rule: rule.to_owned(),
    }
}

fn chain(rules: &[&str]) -> Vec<String> {
    rules.iter().map(|r| (*r).to_owned()).collect()
}

/// Both managers on one namespace, applied in the order the Linux dataplane uses.
struct Managers {
    iptables: IptablesManager,
    ipsets: IpsetManager,
}

impl Managers {
    fn new(ns: &Netns) -> Self {
        Self {
            iptables: IptablesManager::new(IptablesConfig {
                command_prefix: ns.exec_prefix(),
                ..IptablesConfig::default()
            }),
            ipsets: IpsetManager::new(IpsetConfig {
                command_prefix: ns.exec_prefix(),
                ..IpsetConfig::default()
            }),
        }
    }

    /// Sets updated, then iptables, then sets destroyed.
    async fn apply(
        &mut self,
        desired: &Desired,
        dirty: &Dirty,
    ) -> Result<ApplyStats, DataplaneError> {
        let mut stats = self.ipsets.apply_updates(&desired.ipsets, dirty).await?;
        stats.add(&self.iptables.apply(&desired.chains, &desired.hooks).await?);
        stats.add(&self.ipsets.apply_deletions(&desired.ipsets).await?);
        Ok(stats)
    }

    fn invalidate(&mut self) {
        self.iptables.invalidate();
        self.ipsets.invalidate();
    }
}

/// Two chains (one jumping to the other and matching on a set), two hooks, two sets.
fn sample() -> Desired {
    Desired {
        ipsets: BTreeMap::from([
            (
                "cali40s:abc".to_owned(),
                net_set(&["10.0.0.1", "10.1.0.0/16"]),
            ),
            (
                "cali40p:web".to_owned(),
                IpSet {
                    kind: Some(IpSetKind::HashIpPort),
                    members: set(&["10.0.0.1,tcp:8080", "10.0.0.2,udp:53"]),
                },
            ),
        ]),
        chains: BTreeMap::from([
            (
                "cali-FORWARD".to_owned(),
                chain(&[
                    "-m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
                    "-j cali-pi-web",
                    "-j DROP",
                ]),
            ),
            (
                "cali-pi-web".to_owned(),
                chain(&[
                    "-m set --match-set cali40s:abc src -j ACCEPT",
                    "-m set --match-set cali40p:web dst,dst -j ACCEPT",
                ]),
            ),
        ]),
        hooks: vec![
            hook("FORWARD", "-j cali-FORWARD"),
            hook("OUTPUT", "-o cali+ -j cali-FORWARD"),
        ],
        ..Desired::default()
    }
}

fn is_zero(stats: &ApplyStats) -> bool {
    *stats == ApplyStats::default()
}

#[tokio::test]
async fn apply_creates_everything_and_a_repeat_writes_nothing() {
    let Some(ns) = Netns::new() else { return };
    ns.add_foreign_state();
    let mut m = Managers::new(&ns);
    let desired = sample();

    let stats = m.apply(&desired, &Dirty::all()).await.unwrap();
    assert_eq!((stats.chains_written, stats.chains_deleted), (2, 0));
    assert!(stats.iptables_bytes > 0 && stats.ipset_bytes > 0);
    assert_eq!(stats.ipset_members_changed, 4);

    assert!(
        ns.chains()
            .is_superset(&set(&["cali-FORWARD", "cali-pi-web"]))
    );
    let fwd = ns.rules("FORWARD");
    assert!(
        fwd[0].contains("-j cali-FORWARD") && fwd[0].contains("cali:"),
        "{fwd:?}"
    );
    assert!(ns.rules("OUTPUT")[0].contains("-o cali+"));
    assert_eq!(ns.rules("cali-FORWARD").len(), 3);
    assert!(ns.rules("cali-pi-web")[0].contains("--match-set cali40s:abc src"));
    assert_eq!(ns.members("cali40s:abc"), set(&["10.0.0.1", "10.1.0.0/16"]));
    assert_eq!(
        ns.members("cali40p:web"),
        set(&["10.0.0.1,tcp:8080", "10.0.0.2,udp:53"])
    );
    ns.assert_foreign_state();

    // Again, from the cache: nothing written.
    assert!(is_zero(&m.apply(&desired, &Dirty::all()).await.unwrap()));
    // Again, from the kernel as iptables-save and ipset save print it: still nothing.
    m.invalidate();
    assert!(is_zero(&m.apply(&desired, &Dirty::all()).await.unwrap()));
    ns.assert_foreign_state();

    // ipsets are per namespace: none of this one's is visible outside it.
    let host = run(&["ipset", "list", "-n"]);
    assert!(!host.lines().any(|l| l == "cali40s:abc"), "{host}");
}

#[tokio::test]
async fn changing_one_chain_rewrites_only_that_chain() {
    let Some(ns) = Netns::new() else { return };
    let mut m = Managers::new(&ns);
    let mut desired = sample();
    m.apply(&desired, &Dirty::all()).await.unwrap();
    let before_fwd = ns.rules("cali-FORWARD");

    desired.chains.insert(
        "cali-pi-web".to_owned(),
        chain(&["-p tcp --dport 80 -j ACCEPT"]),
    );
    let plan = m.iptables.plan(&desired.chains, &desired.hooks);
    assert!(plan.contains(":cali-pi-web - [0:0]\n"), "{plan}");
    assert!(!plan.contains("cali-FORWARD"), "{plan}");
    let dirty = Dirty {
        chains: true,
        ..Dirty::default()
    };
    let stats = m.apply(&desired, &dirty).await.unwrap();
    assert_eq!((stats.chains_written, stats.chains_deleted), (1, 0));
    assert_eq!(stats.iptables_bytes, plan.len() as u64);

    let web = ns.rules("cali-pi-web");
    assert_eq!(web.len(), 1, "{web:?}");
    assert!(web[0].starts_with("-p tcp -m tcp --dport 80"), "{web:?}");
    assert_eq!(ns.rules("cali-FORWARD"), before_fwd);

    // Reordering two rules is a change too: hashes pin positions.
    desired.chains.insert(
        "cali-FORWARD".to_owned(),
        chain(&[
            "-j cali-pi-web",
            "-m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
            "-j DROP",
        ]),
    );
    let stats = m.apply(&desired, &dirty).await.unwrap();
    assert_eq!(stats.chains_written, 1);
    assert!(ns.rules("cali-FORWARD")[0].contains("-j cali-pi-web"));
    m.invalidate();
    assert!(is_zero(&m.apply(&desired, &Dirty::all()).await.unwrap()));
}

#[tokio::test]
async fn removed_chains_hooks_and_sets_go_and_foreign_state_stays() {
    let Some(ns) = Netns::new() else { return };
    ns.add_foreign_state();
    let mut m = Managers::new(&ns);
    let mut desired = sample();
    m.apply(&desired, &Dirty::all()).await.unwrap();
    ns.assert_foreign_state();

    // Drop cali-pi-web (cali-FORWARD, which jumps to it, is rewritten in the same transaction)
    // and the OUTPUT hook and the sets it used.
    desired
        .chains
        .insert("cali-FORWARD".to_owned(), chain(&["-j DROP"]));
    desired.chains.remove("cali-pi-web");
    desired.hooks.truncate(1);
    desired.ipsets.remove("cali40p:web");
    let dirty = Dirty {
        ipsets: set(&["cali40p:web"]),
        chains: true,
        ..Dirty::default()
    };
    let stats = m.apply(&desired, &dirty).await.unwrap();
    assert_eq!((stats.chains_written, stats.chains_deleted), (1, 1));
    assert!(!ns.chains().contains("cali-pi-web"));
    assert!(ns.rules("OUTPUT").is_empty());
    assert!(!ns.set_names().contains("cali40p:web"));
    ns.assert_foreign_state();

    // Everything gone: no chains, no hooks, no sets.
    let stats = m.apply(&Desired::default(), &Dirty::all()).await.unwrap();
    assert_eq!(stats.chains_deleted, 1);
    assert!(
        ns.chains().iter().all(|c| !c.starts_with("cali-")),
        "{}",
        ns.save()
    );
    assert!(ns.rules("FORWARD").iter().all(|r| !r.contains("cali:")));
    assert_eq!(ns.set_names(), set(&["foreign"]));
    ns.assert_foreign_state();

    m.invalidate();
    assert!(is_zero(
        &m.apply(&Desired::default(), &Dirty::all()).await.unwrap()
    ));
    ns.assert_foreign_state();
}

#[tokio::test]
async fn drift_is_repaired_after_invalidate() {
    let Some(ns) = Netns::new() else { return };
    ns.add_foreign_state();
    let mut m = Managers::new(&ns);
    let desired = sample();
    m.apply(&desired, &Dirty::all()).await.unwrap();
    let good = ns.save();

    // By hand: the FORWARD hook deleted, cali-pi-web emptied of references and deleted, a
    // member removed, a foreign rule put above the OUTPUT hook.
    ns.exec(&["iptables", "-D", "FORWARD", "1"]);
    ns.exec(&["iptables", "-F", "cali-FORWARD"]);
    ns.exec(&["iptables", "-F", "cali-pi-web"]);
    ns.exec(&["iptables", "-X", "cali-pi-web"]);
    ns.exec(&["iptables", "-I", "OUTPUT", "1", "-o", "lo", "-j", "ACCEPT"]);
    ns.exec(&["ipset", "del", "cali40s:abc", "10.0.0.1"]);

    // The cache does not know.
    assert!(is_zero(&m.apply(&desired, &Dirty::all()).await.unwrap()));

    m.invalidate();
    let stats = m.apply(&desired, &Dirty::all()).await.unwrap();
    assert_eq!(stats.chains_written, 2);
    assert_eq!(stats.ipset_members_changed, 1);
    let strip = |s: &str| {
        s.lines()
            .filter(|l| !l.starts_with('#'))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let mut want = strip(&good);
    // The foreign rule stays, below our hook.
    let out = want
        .iter()
        .position(|l| l.starts_with("-A OUTPUT"))
        .unwrap();
    want.insert(out + 1, "-A OUTPUT -o lo -j ACCEPT".to_owned());
    assert_eq!(strip(&ns.save()), want);
    assert_eq!(ns.members("cali40s:abc"), set(&["10.0.0.1", "10.1.0.0/16"]));
    ns.assert_foreign_state();
}

#[tokio::test]
async fn large_set_change_swaps_and_the_rule_keeps_matching_it() {
    let Some(ns) = Netns::new() else { return };
    let mut m = Managers::new(&ns);
    let mut desired = sample();
    m.apply(&desired, &Dirty::all()).await.unwrap();

    // A leftover temporary set, as a crash mid-swap would leave.
    ns.exec(&["ipset", "create", "cali4ts:abc", "hash:net"]);
    m.invalidate();

    let new: Vec<String> = (0..50).map(|i| format!("10.7.{i}.0/24")).collect();
    desired.ipsets.insert(
        "cali40s:abc".to_owned(),
        net_set(&new.iter().map(String::as_str).collect::<Vec<_>>()),
    );
    let plan = m.ipsets.plan(&desired.ipsets);
    assert!(plan.starts_with("create"), "no cache: {plan}");

    let dirty = Dirty {
        ipsets: set(&["cali40s:abc"]),
        ..Dirty::default()
    };
    let stats = m.apply(&desired, &dirty).await.unwrap();
    assert_eq!(stats.ipset_members_changed, 50);
    assert_eq!(ns.members("cali40s:abc"), new.iter().cloned().collect());
    assert!(!ns.set_names().contains("cali4ts:abc"));
    // The rule still refers to the set by name, and the kernel to the new contents.
    assert!(ns.rules("cali-pi-web")[0].contains("--match-set cali40s:abc src"));
    let list = ns.exec(&["ipset", "list", "cali40s:abc"]);
    assert!(list.contains("References: 1"), "{list}");

    // The swap path, seen in its plan: the live set is never flushed or deleted from.
    let back = net_set(&["10.0.0.1"]);
    let mut again = desired.ipsets.clone();
    again.insert("cali40s:abc".to_owned(), back);
    let plan = m.ipsets.plan(&again);
    assert!(plan.contains("swap cali4ts:abc cali40s:abc\n"), "{plan}");
    assert!(
        !plan.contains("del cali40s:abc") && !plan.contains("flush"),
        "{plan}"
    );
    desired.ipsets = again;
    m.apply(&desired, &dirty).await.unwrap();
    assert_eq!(ns.members("cali40s:abc"), set(&["10.0.0.1"]));
}

#[tokio::test]
async fn a_set_moves_under_a_rule_in_the_safe_order() {
    let Some(ns) = Netns::new() else { return };
    let mut m = Managers::new(&ns);
    let mut desired = sample();
    m.apply(&desired, &Dirty::all()).await.unwrap();

    // The rule moves from cali40s:abc to a new set; a stale set of ours sits unreferenced.
    ns.exec(&["ipset", "create", "cali40s:stale", "hash:net"]);
    desired.ipsets.remove("cali40s:abc");
    desired
        .ipsets
        .insert("cali40s:def".to_owned(), net_set(&["10.5.0.0/16"]));
    desired.chains.insert(
        "cali-pi-web".to_owned(),
        chain(&["-m set --match-set cali40s:def src -j ACCEPT"]),
    );
    m.invalidate();

    // Deleting first would pull the set from under the rule: refused by the kernel, named in
    // the error, and the unreferenced stale set still goes.
    let err = m.ipsets.apply_deletions(&desired.ipsets).await.unwrap_err();
    let DataplaneError::Command { program, message } = err else {
        panic!("unexpected {err:?}")
    };
    assert_eq!(program, "ipset");
    assert!(
        message.contains("in use") && message.contains("cali40s:abc"),
        "{message}"
    );
    assert!(ns.set_names().contains("cali40s:abc"));
    assert!(!ns.set_names().contains("cali40s:stale"));

    // Updates, iptables, deletions: fine.
    m.apply(&desired, &Dirty::all()).await.unwrap();
    assert!(ns.rules("cali-pi-web")[0].contains("cali40s:def"));
    assert_eq!(ns.set_names(), set(&["cali40s:def", "cali40p:web"]));
}

#[tokio::test]
async fn a_failing_transaction_changes_nothing_and_the_next_apply_rereads() {
    let Some(ns) = Netns::new() else { return };
    let mut m = Managers::new(&ns);
    let mut desired = sample();
    m.apply(&desired, &Dirty::all()).await.unwrap();
    let good = ns.save();

    let mut broken = desired.clone();
    broken
        .chains
        .insert("cali-FORWARD".to_owned(), chain(&["-j cali-missing"]));
    broken.chains.remove("cali-pi-web");
    let err = m
        .iptables
        .apply(&broken.chains, &broken.hooks)
        .await
        .unwrap_err();
    let DataplaneError::Command { program, message } = err else {
        panic!("unexpected {err:?}")
    };
    assert_eq!(program, "iptables-restore");
    assert!(message.contains("input line"), "{message}");
    let strip = |s: &str| {
        s.lines()
            .filter(|l| !l.starts_with('#'))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    assert_eq!(strip(&ns.save()), strip(&good), "all or nothing");

    // Meanwhile someone deletes a rule; the failure dropped the cache, so this is seen.
    ns.exec(&["iptables", "-D", "cali-FORWARD", "3"]);
    desired.hooks.push(hook("INPUT", "-j cali-FORWARD"));
    let stats = m
        .iptables
        .apply(&desired.chains, &desired.hooks)
        .await
        .unwrap();
    assert_eq!(stats.chains_written, 1);
    assert_eq!(ns.rules("cali-FORWARD").len(), 3);
    assert_eq!(ns.rules("INPUT").len(), 1);
}

#[tokio::test]
async fn set_type_change_recreates_unless_referenced() {
    let Some(ns) = Netns::new() else { return };
    let mut m = Managers::new(&ns);
    let mut desired = sample();
    desired
        .ipsets
        .insert("cali40s:free".to_owned(), net_set(&["10.0.0.1"]));
    m.apply(&desired, &Dirty::all()).await.unwrap();

    let port_set = |m: &str| IpSet {
        kind: Some(IpSetKind::HashIpPort),
        members: set(&[m]),
    };
    desired
        .ipsets
        .insert("cali40s:free".to_owned(), port_set("10.0.0.1,tcp:80"));
    m.apply(&desired, &Dirty::all()).await.unwrap();
    let saved = ns.exec(&["ipset", "save", "cali40s:free"]);
    assert!(
        saved.contains("hash:ip,port") && saved.contains("add cali40s:free 10.0.0.1,tcp:80"),
        "{saved}"
    );

    // cali40s:abc is matched on by cali-pi-web: it cannot be destroyed.
    desired
        .ipsets
        .insert("cali40s:abc".to_owned(), port_set("10.0.0.1,tcp:80"));
    let err = m.apply(&desired, &Dirty::all()).await.unwrap_err();
    assert!(err.to_string().contains("cali40s:abc"), "{err}");
    assert!(
        ns.exec(&["ipset", "save", "cali40s:abc"])
            .contains("hash:net")
    );
}

#[tokio::test]
async fn missing_binary_is_an_error_naming_it() {
    let Some(ns) = Netns::new() else { return };
    let mut ipsets = IpsetManager::new(IpsetConfig {
        command_prefix: ns.exec_prefix(),
        ipset: "no-such-ipset".to_owned(),
    });
    let err = ipsets
        .apply_updates(&sample().ipsets, &Dirty::all())
        .await
        .unwrap_err();
    let DataplaneError::Command { program, message } = err else {
        panic!("unexpected {err:?}")
    };
    assert_eq!(program, "no-such-ipset");
    assert!(message.contains("no-such-ipset"), "{message}");
}

/// Not a test: run by the test below, in a child process without root.
#[test]
fn needs_root_probe() {
    if std::env::var_os("TYPHA_TEST_NOT_ROOT_PROBE").is_none() {
        return;
    }
    let Some(_ns) = Netns::new() else { return };
    panic!("ran without root");
}

#[test]
fn without_root_a_test_fails_unless_skipping_is_allowed() {
    use common::requirements::{ALLOW_SKIP, Missing, decide_root};
    assert_eq!(decide_root(0, false), Missing::Run);
    assert!(matches!(decide_root(1000, true), Missing::Skip(_)));
    assert!(matches!(decide_root(1000, false), Missing::Fail(m) if m.contains(ALLOW_SKIP)));
    // And for real: this test binary as an unprivileged user (`setpriv`, util-linux).
    let probe = |allow: bool| {
        let mut cmd = std::process::Command::new("setpriv");
        cmd.args(["--reuid", "65534", "--regid", "65534", "--clear-groups"])
            .arg(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "needs_root_probe",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env("TYPHA_TEST_NOT_ROOT_PROBE", "1")
            .env_remove(ALLOW_SKIP);
        if allow {
            cmd.env(ALLOW_SKIP, "1");
        }
        let out = cmd.output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (passed, stderr) = probe(false);
    assert!(
        !passed,
        "passed without root and without {ALLOW_SKIP}: {stderr}"
    );
    assert!(stderr.contains("needs root"), "{stderr}");
    let (passed, stderr) = probe(true);
    assert!(passed, "{stderr}");
    assert!(stderr.contains("skipped: needs root"), "{stderr}");
}
