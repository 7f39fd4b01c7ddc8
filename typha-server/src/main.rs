//! `typha-server`: the whole program is [`typha_server::cli::main`], with the allocator its
//! features choose.

// jemalloc by default (typha-server's Cargo.toml says why); mimalloc when asked for, even
// beside the default feature.
#[cfg(all(feature = "jemalloc", not(feature = "mimalloc")))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    typha_server::cli::main()
}
