//! Support shared by this package's integration tests.

// Each test binary includes this as a private module, so its `pub` items are reachable only
// inside that binary (as in the other crates' `tests/common`).
#![allow(unreachable_pub)]

pub mod netns;
// Each test binary uses part of it.
#[allow(dead_code)]
pub mod requirements;
