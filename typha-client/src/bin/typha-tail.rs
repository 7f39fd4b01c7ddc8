//! `typha-tail`: print what a typha server streams. See [`typha_client::tail`].

fn main() -> std::process::ExitCode {
    typha_client::tail::main()
}
