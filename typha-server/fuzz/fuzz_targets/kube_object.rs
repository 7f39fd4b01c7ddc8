//! libFuzzer target: `typha_server::fuzzing::kube_object` says what the input is and what it checks.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| typha_server::fuzzing::kube_object(data));
