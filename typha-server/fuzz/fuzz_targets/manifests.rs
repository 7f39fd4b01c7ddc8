//! libFuzzer target: `typha_server::fuzzing::manifests` says what the input is and what it checks.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| typha_server::fuzzing::manifests(data));
