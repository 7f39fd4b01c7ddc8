//! The shipped sample cluster (`examples/cluster`) loads without a single warning and converts
//! to the KVs a Calico user would expect.

// In tests a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use typha_server::calico::convert::convert;
use typha_server::datastore::embedded::{DirSource, Embedded};

#[test]
fn sample_cluster_loads_cleanly() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/cluster");
    let store = Embedded::new();
    let report = DirSource::new(dir, store.clone()).scan();
    assert!(report.new_warnings.is_empty(), "{:#?}", report.new_warnings);
    let resources = store.resources();
    assert!(resources.len() >= 30, "{}", resources.len());
    let mut keys = Vec::new();
    for r in &resources {
        keys.extend(convert(r).unwrap().into_iter().map(|(k, _)| k.to_string()));
    }
    for want in [
        "/calico/v1/Ready",
        "/calico/v1/ipam/v4/pool/10.244.0.0-16",
        "/calico/v1/host/worker-1/bird_ip",
        "/calico/ipam/v2/assignment/ipv4/block/10.244.1.0-26",
        "/calico/v1/policy/profile/kns.shop/rules",
        "/calico/v1/policy/NetworkPolicy/shop/payments",
        "/calico/v1/policy/GlobalNetworkPolicy/deny-known-bad",
        "/calico/v1/netset/known-bad",
        "/calico/v1/host/worker-1/workload/k8s/shop%2ffrontend-7d4b9c6f5d-x2k9p/endpoint/eth0",
        "/calico/v1/config/LogSeverityScreen",
    ] {
        assert!(keys.iter().any(|k| k == want), "missing {want}");
    }
}
