#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
use typha_protocol::model::Protocol;

use super::*;

fn sel(s: &str) -> Selector {
    Selector::parse(s).unwrap()
}

fn ep(labels: &[(&str, &str)], ip: &str) -> EpData {
    EpData {
        labels: labels
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect(),
        profiles: vec![],
        nets: vec![format!("{ip}/32").parse().unwrap()],
        ports: vec![EndpointPort {
            name: "http".into(),
            protocol: Protocol::Tcp,
            port: 8080,
        }],
    }
}

struct Out {
    sets: BTreeMap<String, IpSet>,
    dirty: BTreeSet<String>,
}

impl Out {
    fn new() -> Self {
        Self {
            sets: BTreeMap::new(),
            dirty: BTreeSet::new(),
        }
    }
    fn sink(&mut self) -> SetSink<'_> {
        SetSink {
            sets: &mut self.sets,
            dirty: &mut self.dirty,
        }
    }
    fn members(&self, name: &str) -> Vec<&str> {
        self.sets[name].members.iter().map(String::as_str).collect()
    }
}

#[test]
fn names_fit_ipset_and_differ_by_definition() {
    let a = SetDef::Selector(sel("app == 'a'")).name();
    let b = SetDef::Selector(sel("app == 'b'")).name();
    let n = SetDef::NamedPort(sel("app == 'a'"), 6, "http".into()).name();
    assert_ne!(a, b);
    assert!(a.starts_with("cali40s:") && n.starts_with("cali40n:"));
    assert!(a.len() <= 31 && n.len() <= 31);
    // The same selector written differently is the same set.
    assert_eq!(a, SetDef::Selector(sel("app==\"a\"")).name());
}

#[test]
fn index_terms_prefer_a_label_other_than_the_namespace() {
    assert_eq!(
        index_term(&sel("projectcalico.org/namespace == 'ns' && app == 'db'")),
        Some(("app".into(), "db".into()))
    );
    assert_eq!(
        index_term(&sel("projectcalico.org/namespace == 'ns' && has(app)")),
        Some((NAMESPACE_LABEL.into(), "ns".into()))
    );
    assert_eq!(
        index_term(&sel("app in {'x'}")),
        Some(("app".into(), "x".into()))
    );
    assert_eq!(index_term(&sel("app == 'a' || app == 'b'")), None);
    assert_eq!(index_term(&sel("!has(x)")), None);
}

#[test]
fn new_sets_fill_on_scan_and_then_follow_endpoints() {
    let mut idx = IpSetIndex::default();
    let mut out = Out::new();
    idx.set_endpoint(
        &EpId::from("a"),
        Some(ep(&[("app", "db")], "10.0.0.1")),
        &mut out.sink(),
    );
    idx.set_endpoint(
        &EpId::from("b"),
        Some(ep(&[("app", "web")], "10.0.0.2")),
        &mut out.sink(),
    );
    let name = idx.add_ref(&SetDef::Selector(sel("app == 'db'")), &mut out.sink());
    let any = idx.add_ref(
        &SetDef::Selector(sel("app == 'db' || app == 'web'")),
        &mut out.sink(),
    );
    assert!(out.members(&name).is_empty(), "filled at the scan");
    assert!(idx.scan_pending());
    idx.scan(&mut out.sink());
    assert_eq!(out.members(&name), ["10.0.0.1"]);
    assert_eq!(out.members(&any), ["10.0.0.1", "10.0.0.2"]);
    // Two endpoints with the same address: the member stays until both are gone.
    idx.set_endpoint(
        &EpId::from("c"),
        Some(ep(&[("app", "db")], "10.0.0.1")),
        &mut out.sink(),
    );
    idx.set_endpoint(&EpId::from("a"), None, &mut out.sink());
    assert_eq!(out.members(&name), ["10.0.0.1"]);
    idx.set_endpoint(&EpId::from("c"), None, &mut out.sink());
    assert!(out.members(&name).is_empty());
    // References are counted.
    out.dirty.clear();
    idx.add_ref(&SetDef::Selector(sel("app == 'db'")), &mut out.sink());
    idx.remove_ref(&name, &mut out.sink());
    assert!(out.sets.contains_key(&name));
    idx.remove_ref(&name, &mut out.sink());
    assert!(!out.sets.contains_key(&name));
    assert!(out.dirty.contains(&name));
}

#[test]
fn named_port_sets_hold_ip_and_port() {
    let mut idx = IpSetIndex::default();
    let mut out = Out::new();
    let def = SetDef::NamedPort(sel("app == 'web'"), 6, "http".into());
    let name = idx.add_ref(&def, &mut out.sink());
    idx.set_endpoint(
        &EpId::from("w"),
        Some(ep(&[("app", "web")], "10.0.0.2")),
        &mut out.sink(),
    );
    assert_eq!(out.sets[&name].kind, Some(IpSetKind::HashIpPort));
    assert_eq!(out.members(&name), ["10.0.0.2,tcp:8080"]);
    let udp = idx.add_ref(
        &SetDef::NamedPort(sel("all()"), 17, "http".into()),
        &mut out.sink(),
    );
    idx.scan(&mut out.sink());
    assert!(out.members(&udp).is_empty(), "the port is TCP");
    // Protocol 0: the name's port of any protocol.
    let any = idx.add_ref(
        &SetDef::NamedPort(sel("all()"), 0, "http".into()),
        &mut out.sink(),
    );
    idx.scan(&mut out.sink());
    assert_eq!(out.members(&any), ["10.0.0.2,tcp:8080"]);
}

#[test]
fn inherited_labels_count_and_own_labels_win() {
    let mut idx = IpSetIndex::default();
    let mut out = Out::new();
    let name = idx.add_ref(
        &SetDef::Selector(sel("pcns.team == 'web'")),
        &mut out.sink(),
    );
    let mut data = ep(&[], "10.0.0.3");
    data.profiles = vec!["kns.a".into()];
    idx.set_endpoint(&EpId::from("e"), Some(data), &mut out.sink());
    assert!(out.members(&name).is_empty());
    let team = |t: &str| {
        Some(
            [("pcns.team".to_string(), t.to_string())]
                .into_iter()
                .collect(),
        )
    };
    idx.set_profile_labels("kns.a", team("web"), &mut out.sink());
    assert_eq!(out.members(&name), ["10.0.0.3"]);
    idx.set_profile_labels("kns.a", team("ops"), &mut out.sink());
    assert!(out.members(&name).is_empty());
    let mut own = ep(&[("pcns.team", "ops")], "10.0.0.3");
    own.profiles = vec!["kns.a".into()];
    idx.set_profile_labels("kns.a", team("web"), &mut out.sink());
    assert_eq!(out.members(&name), ["10.0.0.3"]);
    idx.set_endpoint(&EpId::from("e"), Some(own), &mut out.sink());
    assert!(
        out.members(&name).is_empty(),
        "the endpoint's own label wins"
    );
}
