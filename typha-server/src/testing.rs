//! What this crate's unit tests share: typha-test-support's generated clusters as this crate's
//! resources.
//!
//! typha-test-support links the typha-server library, which is not the crate a unit test
//! compiles (that is this one, with its tests), so its `Resource`s are of another type here:
//! the unit tests take its JSON documents and parse them.

use typha_test_support::sample::{Spec, documents};

use crate::calico::v3::Resource;

/// [`typha_test_support::sample::cluster`] of `spec`, as this crate's resources.
pub(crate) fn sample_cluster(spec: &Spec) -> Vec<Resource> {
    documents(spec)
        .into_iter()
        .map(|d| Resource::from_json(d).unwrap_or_else(|e| panic!("sample resource: {e}")))
        .collect()
}
