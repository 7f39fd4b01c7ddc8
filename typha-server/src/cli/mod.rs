//! The `typha-server` program, in three steps a reader can take one at a time:
//!
//! - [`flags`]: the flags and `TYPHA_*` environment variables (Calico Typha's names where the
//!   meaning is the same), as clap parses them;
//! - [`settings`]: flags to a [`crate::config::Config`], a pure, tested function that names the
//!   setting that is wrong;
//! - [`program`]: the whole program (the binary is one call to [`main`], so loadtest and the
//!   tests can run the very same program in a process of their own);
//! - [`gen_certs`]: the operator command that makes the TLS material.

pub mod flags;
pub mod gen_certs;
pub mod program;
pub mod settings;

pub use flags::Cli;
pub use program::{main, main_from};

#[cfg(test)]
mod tests;
