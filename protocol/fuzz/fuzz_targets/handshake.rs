//! libFuzzer target: see `checks/handshake.rs` for what it checks.

#![no_main]

#[path = "../checks/handshake.rs"]
mod check;

libfuzzer_sys::fuzz_target!(|data: &[u8]| check::run(data));
