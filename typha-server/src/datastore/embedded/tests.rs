use std::time::Duration;

use futures_util::StreamExt;

use super::*;
use crate::calico::v3::Kind;

fn netset(name: &str, net: &str) -> Resource {
    Resource::from_json(serde_json::json!({
        "apiVersion": "projectcalico.org/v3", "kind": "GlobalNetworkSet",
        "metadata": {"name": name}, "spec": {"nets": [net]}
    }))
    .unwrap()
}

fn id(name: &str) -> ResourceId {
    ResourceId::global(Kind::GlobalNetworkSet, name)
}

#[tokio::test]
async fn revisions_list_and_watch() {
    let s = Embedded::new();
    assert_eq!(s.put(netset("a", "10.0.0.0/8")), Revision(1));
    assert_eq!(
        s.put(netset("a", "10.0.0.0/8")),
        Revision(1),
        "no-op put keeps the revision"
    );
    assert_eq!(s.put(netset("b", "10.1.0.0/16")), Revision(2));
    let listing = s.list().await.unwrap();
    assert_eq!(listing.revision, Revision(2));
    assert_eq!(listing.items.len(), 2);
    assert_eq!(
        listing
            .items
            .iter()
            .next()
            .unwrap()
            .unwrap()
            .metadata
            .resource_version
            .as_deref(),
        Some("1")
    );

    let mut w = s.watch(Revision(2)).await.unwrap();
    let ev = w.next().await.unwrap().unwrap();
    assert!(
        matches!(
            ev,
            WatchEvent::Put {
                revision: Revision(2),
                ..
            }
        ),
        "{ev:?}"
    );
    s.delete(&id("a"));
    let ev = tokio::time::timeout(Duration::from_secs(5), w.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        ev,
        WatchEvent::Delete {
            revision: Revision(3),
            id: id("a")
        }
    );
    assert_eq!(
        s.delete(&id("a")),
        Revision(3),
        "deleting nothing keeps the revision"
    );
}

#[tokio::test]
async fn compaction_makes_old_watches_too_old() {
    let s = Embedded::with_history(2);
    for i in 0..5 {
        s.put(netset(&format!("n{i}"), "10.0.0.0/8"));
    }
    assert!(matches!(
        s.watch(Revision(1)).await,
        Err(DatastoreError::TooOld { .. })
    ));
    // A watcher that has not read revisions 4 and 5 yet when they are compacted away.
    let mut w = s.watch(Revision(4)).await.unwrap();
    s.compact();
    let got = tokio::time::timeout(Duration::from_secs(5), w.next())
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(got, Err(DatastoreError::TooOld { .. })), "{got:?}");
}

const POLICY: &str = "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata: {name: p1}\nspec: {selector: all(), ingress: [{action: Allow}]}\n";

#[test]
fn directory_edits_propagate_and_bad_files_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Embedded::new();
    let mut src = DirSource::new(dir.path(), store.clone());
    std::fs::write(dir.path().join("sets.yaml"), "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata: {name: a}\nspec: {nets: [10.0.0.0/8]}\n---\napiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata: {name: b}\nspec: {nets: [10.1.0.0/16]}\n").unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    std::fs::write(dir.path().join("sub/policy.yml"), POLICY).unwrap();
    std::fs::write(dir.path().join("README.txt"), "not a manifest").unwrap();
    let r = src.scan();
    assert_eq!((r.puts, r.deletes), (3, 0));
    assert!(r.new_warnings.is_empty(), "{:?}", r.new_warnings);

    // An invalid file: logged once, changes nothing.
    std::fs::write(dir.path().join("sub/policy.yml"), "kind: [unclosed").unwrap();
    let r = src.scan();
    assert_eq!((r.puts, r.deletes), (0, 0));
    assert_eq!(r.new_warnings.len(), 1);
    assert!(
        r.new_warnings[0].contains("policy.yml") && r.new_warnings[0].contains("invalid YAML"),
        "{:?}",
        r.new_warnings
    );
    assert_eq!(store.resources().len(), 3);
    // Touching it again with the same bad content does not warn again.
    std::fs::write(dir.path().join("sub/policy.yml"), "kind: [unclosed ").unwrap();
    std::fs::write(dir.path().join("sub/policy.yml"), "kind: [unclosed").unwrap();
    assert!(src.scan().new_warnings.is_empty());

    // An invalid resource among valid ones: it keeps its old version, the others update.
    std::fs::write(dir.path().join("sets.yaml"), "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata: {name: a}\nspec: {nets: [not-a-cidr]}\n---\napiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata: {name: b}\nspec: {nets: [10.2.0.0/16]}\n").unwrap();
    let r = src.scan();
    assert_eq!((r.puts, r.deletes), (1, 0), "{r:?}");
    assert_eq!(r.new_warnings.len(), 1);
    let w = &r.new_warnings[0];
    assert!(
        w.contains("sets.yaml") && w.contains("GlobalNetworkSet a") && w.contains("not-a-cidr"),
        "{w}"
    );
    let a = store
        .resources()
        .into_iter()
        .find(|r| r.metadata.name == "a")
        .unwrap();
    assert_eq!(a.to_json()["spec"]["nets"][0], "10.0.0.0/8");

    // Fixing the policy file brings it back; removing a resource from a file deletes it.
    std::fs::write(
        dir.path().join("sub/policy.yml"),
        POLICY.replace("all()", "has(app)"),
    )
    .unwrap();
    std::fs::write(dir.path().join("sets.yaml"), "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata: {name: b}\nspec: {nets: [10.2.0.0/16]}\n").unwrap();
    let r = src.scan();
    assert_eq!((r.puts, r.deletes), (1, 1), "{r:?}");

    // Removing a file deletes what it defined.
    std::fs::remove_file(dir.path().join("sub/policy.yml")).unwrap();
    let r = src.scan();
    assert_eq!((r.puts, r.deletes), (0, 1));
    assert_eq!(store.resources().len(), 1);
}

#[test]
fn duplicate_definitions_are_warned_and_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let store = Embedded::new();
    let mut src = DirSource::new(dir.path(), store.clone());
    std::fs::write(dir.path().join("1.yaml"), POLICY).unwrap();
    std::fs::write(dir.path().join("2.yaml"), POLICY.replace("all()", "has(x)")).unwrap();
    let r = src.scan();
    assert_eq!(r.puts, 1);
    assert!(
        r.new_warnings[0].contains("already defined"),
        "{:?}",
        r.new_warnings
    );
}

#[test]
fn a_renamed_file_keeps_its_resources_and_only_their_file_deletes_them() {
    let dir = tempfile::tempdir().unwrap();
    let store = Embedded::new();
    let mut src = DirSource::new(dir.path(), store.clone());
    std::fs::write(dir.path().join("a.yaml"), POLICY).unwrap();
    assert_eq!(src.scan().puts, 1);
    let rev = store.revision();

    // Renamed: the same resource, now from b.yaml; the store does not change.
    std::fs::rename(dir.path().join("a.yaml"), dir.path().join("b.yaml")).unwrap();
    let r = src.scan();
    assert_eq!((r.puts, r.deletes), (0, 0), "{r:?}");
    assert!(r.new_warnings.is_empty(), "{:?}", r.new_warnings);
    assert_eq!(store.revision(), rev);

    // Another file defining it is refused, naming b.yaml.
    std::fs::write(dir.path().join("c.yaml"), POLICY.replace("all()", "has(x)")).unwrap();
    let r = src.scan();
    assert_eq!((r.puts, r.deletes), (0, 0), "{r:?}");
    assert!(
        r.new_warnings.len() == 1
            && r.new_warnings[0].contains("c.yaml")
            && r.new_warnings[0].contains("already defined in")
            && r.new_warnings[0].contains("b.yaml"),
        "{:?}",
        r.new_warnings
    );

    // A write through the API changes it but not where it comes from: removing b.yaml
    // deletes it.
    let mut edited = store.resources().pop().unwrap();
    edited.metadata.labels.insert("edited".into(), "yes".into());
    assert!(store.put(edited) > rev);
    std::fs::remove_file(dir.path().join("b.yaml")).unwrap();
    let r = src.scan();
    assert_eq!((r.puts, r.deletes), (0, 1), "{r:?}");
    assert!(store.is_empty());
}

#[test]
fn many_files_removed_in_one_scan_delete_exactly_what_each_defined() {
    let dir = tempfile::tempdir().unwrap();
    let store = Embedded::new();
    let mut src = DirSource::new(dir.path(), store.clone());
    let set = |name: String, octet: usize| {
        format!(
            "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata: {{name: {name}}}\nspec: {{nets: [10.{octet}.0.0/16]}}\n"
        )
    };
    for f in 0..40 {
        let doc = [set(format!("s{f}-a"), f), set(format!("s{f}-b"), f)].join("---\n");
        std::fs::write(dir.path().join(format!("{f:02}.yaml")), doc).unwrap();
    }
    assert_eq!(src.scan().puts, 80);
    // One resource moves to a file of its own before its old file goes: it stays.
    std::fs::write(dir.path().join("kept.yaml"), set("s0-a".into(), 0)).unwrap();
    for f in 0..30 {
        std::fs::remove_file(dir.path().join(format!("{f:02}.yaml"))).unwrap();
    }
    let r = src.scan();
    assert_eq!((r.puts, r.deletes), (0, 59), "{r:?}");
    let mut names: Vec<String> = store
        .resources()
        .into_iter()
        .map(|r| r.metadata.name)
        .collect();
    names.sort();
    let mut want: Vec<String> = (30..40)
        .flat_map(|f| [format!("s{f}-a"), format!("s{f}-b")])
        .chain(["s0-a".to_string()])
        .collect();
    want.sort();
    assert_eq!(names, want);
    // The moved resource now belongs to kept.yaml alone.
    std::fs::remove_file(dir.path().join("kept.yaml")).unwrap();
    assert_eq!(src.scan().deletes, 1);
    assert_eq!(store.resources().len(), 20);
}

/// The store keeps resources serialized: what it gives back must be what was put, for every
/// kind the generated cluster has (the conformance tests cover the rest through their KVs).
#[tokio::test]
async fn resources_read_back_exactly_as_they_were_put() {
    let s = read_back(typha_test_support::sample::Spec {
        nodes: 4,
        pods_per_node: 6,
        ..Default::default()
    })
    .await;
    assert!(s.lock().dict.is_none(), "too few resources to train on");
}

/// Past [`form::FIRST_TRAINING`] resources the store compresses them with a dictionary
/// trained on them: they still read back exactly, in listings and in the change log.
#[tokio::test]
async fn a_store_large_enough_trains_a_dictionary_and_reads_back_the_same() {
    let spec = typha_test_support::sample::Spec {
        nodes: 40,
        pods_per_node: 100,
        ..Default::default()
    };
    let s = read_back(spec).await;
    assert!(s.lock().dict.is_some());
    let n = s.len();
    assert!(n >= form::FIRST_TRAINING, "{n} resources");
    let watched: Vec<WatchEvent> = s
        .watch(Revision(1))
        .await
        .unwrap()
        .take(n)
        .map(Result::unwrap)
        .collect()
        .await;
    assert_eq!(watched.len(), n);
    for ev in watched {
        assert!(matches!(ev, WatchEvent::Put { item: Ok(_), .. }), "{ev:?}");
    }
}

/// Loads the cluster of `spec`, checks that a listing gives it back exactly and that loading
/// it again changes nothing.
async fn read_back(spec: typha_test_support::sample::Spec) -> Embedded {
    let put = crate::testing::sample_cluster(&spec);
    let s = Embedded::new();
    let rev = s.bulk_load(put.clone());
    assert_eq!(rev, Revision(put.len() as u64));
    let mut want: BTreeMap<ResourceId, Resource> = put.into_iter().map(|r| (r.id(), r)).collect();
    let listing = s.list().await.unwrap();
    assert_eq!(listing.items.len(), want.len());
    for item in listing.items {
        let got = Arc::unwrap_or_clone(item.unwrap());
        let mut expected = want.remove(&got.id()).unwrap();
        assert!(got.metadata.resource_version.is_some());
        expected.metadata.resource_version = got.metadata.resource_version.clone();
        assert_eq!(got, expected);
    }
    // Writing them again changes nothing: the stored form is the comparison.
    assert_eq!(s.bulk_load(crate::testing::sample_cluster(&spec)), rev);
    s
}
