//! `typha-agent`: the node agent. See [`typha_agent::cli`].

fn main() -> std::process::ExitCode {
    typha_agent::cli::main()
}
