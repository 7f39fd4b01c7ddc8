//! libFuzzer target: `typha_test_support::fuzzing::manifests` says what the input is and what it checks.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| typha_test_support::fuzzing::manifests(data));
