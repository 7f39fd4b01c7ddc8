//! libFuzzer target: see `checks/calico_decode.rs` for what it checks.

#![no_main]

#[path = "../../tests/calico_streamed/mod.rs"]
mod calico_streamed;
#[path = "../checks/calico_decode.rs"]
mod check;

libfuzzer_sys::fuzz_target!(|data: &[u8]| check::run(data));
