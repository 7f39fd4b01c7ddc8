//! libFuzzer target: see `checks/decode_frame.rs` for what it checks.

#![no_main]

#[path = "../checks/decode_frame.rs"]
mod check;

libfuzzer_sys::fuzz_target!(|data: &[u8]| check::run(data));
