//! loadtest: simulates thousands of nodes against a real typha-server. Not implemented yet.

use std::process::ExitCode;

fn main() -> ExitCode {
    eprintln!("loadtest: not implemented yet; there is no server to load (see the README)");
    ExitCode::from(2)
}
