//! `typha-agent`: the node agent. See [`typha_client::agent`].

fn main() -> std::process::ExitCode {
    typha_client::agent::cli::main()
}
