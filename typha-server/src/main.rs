//! `typha-server`: the whole program is [`typha_server::cli::main`].

fn main() -> std::process::ExitCode {
    typha_server::cli::main()
}
