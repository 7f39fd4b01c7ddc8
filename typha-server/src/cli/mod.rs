//! The `typha-server` program, in steps a reader can take one at a time:
//!
//! - [`flags`]: the flags and `TYPHA_*` environment variables (Calico Typha's names where the
//!   meaning is the same), as clap parses them;
//! - [`sources`]: where they are read from, as Typha reads them: the environment (names in any
//!   case) and Typha's config file; [`typha_settings`]: Typha's settings this program does not
//!   implement, and what it does instead;
//! - [`settings`]: flags to a [`crate::config::Config`], a pure, tested function that names the
//!   setting that is wrong;
//! - [`program`]: the whole program (the binary is one call to [`main`], so loadtest and the
//!   tests can run the very same program in a process of their own);
//! - [`gen_certs`]: the operator command that makes the TLS material.

pub mod flags;
pub mod gen_certs;
pub mod program;
pub mod settings;
pub mod sources;
pub mod typha_settings;

pub use flags::Cli;
pub use program::{main, main_from};

#[cfg(test)]
mod tests;
