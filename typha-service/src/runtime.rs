//! The tokio runtimes the programs run on. A runtime that cannot be built (out of threads or
//! file descriptors) is reported in one line and exit code 1.

use std::process::ExitCode;

use tokio::runtime::{Builder, Runtime};

use crate::exit;

/// A multi-threaded runtime with every driver enabled; `workers` threads, or one per core.
pub fn multi_thread(program: &str, workers: Option<usize>) -> Result<Runtime, ExitCode> {
    let mut b = Builder::new_multi_thread();
    if let Some(n) = workers {
        b.worker_threads(n);
    }
    b.enable_all()
        .build()
        .map_err(|e| exit::failed(program, format_args!("cannot start the runtime: {e}")))
}

/// A runtime on the calling thread, with every driver enabled.
pub fn current_thread() -> std::io::Result<Runtime> {
    Builder::new_current_thread().enable_all().build()
}
