//! typha-agent (being written).
fn main() {}
