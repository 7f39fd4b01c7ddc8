//! libFuzzer target: see `checks/selector.rs` for what it checks.

#![no_main]

#[path = "../checks/selector.rs"]
mod check;

libfuzzer_sys::fuzz_target!(|data: &[u8]| check::run(data));
