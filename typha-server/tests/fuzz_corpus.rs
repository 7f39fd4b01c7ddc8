//! Replays every committed fuzz corpus (`typha-server/fuzz/corpus/<target>/`) through the
//! checks the libFuzzer targets run (`typha_test_support::fuzzing`), once per `cargo test`, so an
//! input that once broke a decoder, added to its corpus when fixed, stays fixed: libFuzzer's
//! `-runs=0` replay without the sanitizer build (docs/fuzzing.md).
//!
//! `cargo test -p typha-server --test fuzz_corpus -- --ignored write_seeds` rewrites the
//! seeds (`seed_*`) from the example cluster and the datastore tests' objects.

// A corpus that cannot be read is a broken checkout: fail loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use typha_server::calico::v3::{Resource, yaml_documents};
use typha_server::datastore::etcd::key_of;
use typha_test_support::fuzzing;

fn corpus(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target)
}

fn replay(target: &str, check: fn(&[u8])) {
    let dir = corpus(target);
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        let outcome = std::panic::catch_unwind(|| check(&data));
        assert!(
            outcome.is_ok(),
            "{target}: {} fails its check",
            path.display()
        );
        n += 1;
    }
    assert!(n > 0, "{target}: no corpus in {}", dir.display());
}

#[test]
fn etcd_kv_corpus() {
    replay("etcd_kv", fuzzing::etcd_kv);
}

#[test]
fn manifests_corpus() {
    replay("manifests", fuzzing::manifests);
}

#[test]
fn kube_object_corpus() {
    replay("kube_object", fuzzing::kube_object);
}

#[test]
#[ignore = "writes the seed corpora"]
fn write_seeds() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/cluster");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&examples)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let write = |target: &str, name: String, data: &[u8]| {
        std::fs::create_dir_all(corpus(target)).unwrap();
        std::fs::write(corpus(target).join(name), data).unwrap();
    };
    let mut kinds = std::collections::BTreeSet::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let stem = f.file_stem().unwrap().to_string_lossy().into_owned();
        write("manifests", format!("seed_{stem}"), text.as_bytes());
        // One etcd KV per kind of resource in the examples.
        for doc in yaml_documents(&text).unwrap() {
            let r = Resource::from_json(doc).unwrap();
            let id = r.id();
            if kinds.insert(format!("{:?}", id.kind)) {
                let mut kv = key_of(&id).into_bytes();
                kv.push(0);
                kv.extend_from_slice(r.to_json().to_string().as_bytes());
                write("etcd_kv", format!("seed_{:?}", id.kind).to_lowercase(), &kv);
            }
        }
    }
    write(
        "etcd_kv",
        "seed_ipam_block".into(),
        b"/calico/ipam/v2/assignment/ipv4/block/10.0.1.0-26\0{\"cidr\":\"10.0.1.0/26\",\
          \"affinity\":\"host:node-1\",\"allocations\":[0,null],\"unallocated\":[1],\
          \"attributes\":[{\"handle_id\":\"h\",\"secondary\":{\"node\":\"node-1\"}}],\
          \"sequenceNumber\":1,\"deleted\":false}",
    );
    write(
        "etcd_kv",
        "seed_ipam_affinity".into(),
        b"/calico/ipam/v2/host/node-1/ipv4/block/10.0.1.0-26\0{\"state\":\"confirmed\",\"deleted\":false}",
    );
    let objects = [
        (
            "gns",
            r#"{"apiVersion": "crd.projectcalico.org/v1", "kind": "GlobalNetworkSet", "metadata": {"name": "set", "labels": {"a": "b"}, "resourceVersion": "7"}, "spec": {"nets": ["10.0.0.0/8"]}}"#,
        ),
        (
            "namespace",
            r#"{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "web", "labels": {"team": "a"}}}"#,
        ),
        (
            "serviceaccount",
            r#"{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "api", "namespace": "web", "labels": {"x": "y"}}}"#,
        ),
        (
            "pod",
            r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "api-7d9f-x2k4q", "namespace": "web", "labels": {"app": "api"}, "annotations": {"cni.projectcalico.org/podIP": "10.0.0.5/32"}}, "spec": {"nodeName": "node-1", "serviceAccountName": "api", "containers": [{"name": "c", "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}, {"containerPort": 9090}]}]}, "status": {"phase": "Running", "podIPs": [{"ip": "10.0.0.5"}, {"ip": "fd00::5"}]}}"#,
        ),
        (
            "node",
            r#"{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1", "labels": {"zone": "a"}, "annotations": {"projectcalico.org/IPv4Address": "172.16.0.5/24", "projectcalico.org/ASNumber": "64512", "projectcalico.org/IPv4VXLANTunnelAddr": "10.244.1.0"}}, "spec": {"podCIDR": "10.244.1.0/24", "podCIDRs": ["10.244.1.0/24"]}, "status": {"addresses": [{"type": "InternalIP", "address": "172.16.0.5"}, {"type": "Hostname", "address": "node-1"}]}}"#,
        ),
        (
            "networkpolicy",
            r#"{"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "allow-web", "namespace": "web"}, "spec": {"podSelector": {"matchLabels": {"app": "api"}, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]}, "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "fe"}}}, {"namespaceSelector": {}}, {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}}], "ports": [{"port": 8080}, {"protocol": "UDP", "port": "dns"}, {"port": 9000, "endPort": 9010}]}], "egress": [{}]}}"#,
        ),
    ];
    for (name, json) in objects {
        let mut data = vec![0u8];
        data.extend_from_slice(json.as_bytes());
        write("kube_object", format!("seed_{name}"), &data);
    }
}
