//! What this binary was built from (`build.rs` finds it): printed by `--version`, logged at
//! start, and exported as `typha_build_info` (a gauge of 1 whose labels say it, Prometheus'
//! convention for build information).

use prometheus::Registry;

/// The version (the crate's).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The commit (`git rev-parse HEAD` at build time, or `TYPHA_GIT_COMMIT`), or `unknown`.
pub const COMMIT: &str = env!("TYPHA_BUILD_COMMIT");
/// The build date (RFC 3339, UTC): `SOURCE_DATE_EPOCH` or `TYPHA_BUILD_DATE` if the build
/// set one, else the commit's date; or `unknown`.
pub const BUILD_DATE: &str = env!("TYPHA_BUILD_DATE");
/// The compiler's version.
pub const RUSTC: &str = env!("TYPHA_BUILD_RUSTC");
/// The target triple.
pub const TARGET: &str = env!("TYPHA_BUILD_TARGET");

/// The memory allocator the binary's features chose (see `main.rs`).
pub const ALLOCATOR: &str = if cfg!(feature = "mimalloc") {
    "mimalloc"
} else if cfg!(feature = "jemalloc") {
    "jemalloc"
} else {
    "system"
};

/// `--version`: the version, then one line each for the commit, the build date, the compiler
/// and the target (after the program's name, which clap prints).
pub const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    "\ncommit:     ",
    env!("TYPHA_BUILD_COMMIT"),
    "\nbuild date: ",
    env!("TYPHA_BUILD_DATE"),
    "\nrustc:      ",
    env!("TYPHA_BUILD_RUSTC"),
    "\ntarget:     ",
    env!("TYPHA_BUILD_TARGET"),
);

/// `-V`: the version, the commit and the build date on one line.
pub const SHORT_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("TYPHA_BUILD_COMMIT"),
    ", built ",
    env!("TYPHA_BUILD_DATE"),
    ")"
);

/// Registers `typha_build_info` in `r`: always 1, its labels the build's.
pub fn register(r: &Registry) {
    let g = typha_service::metrics::gauge_vec(
        r,
        "typha_build_info",
        "A metric with a constant '1' value labeled by the version, revision (commit), build date, compiler version, target and allocator typha-server was built with.",
        &[
            "version",
            "revision",
            "build_date",
            "rustc_version",
            "target",
            "allocator",
        ],
    );
    g.with_label_values(&[VERSION, COMMIT, BUILD_DATE, RUSTC, TARGET, ALLOCATOR])
        .set(1);
}

/// Logs the build at `info`, first thing when the server starts.
pub fn log_start() {
    tracing::info!(
        version = VERSION,
        commit = COMMIT,
        build_date = BUILD_DATE,
        rustc = RUSTC,
        target = TARGET,
        allocator = ALLOCATOR,
        "typha-server starting"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_build_info_metric_carries_the_build_and_is_one() {
        let r = Registry::new();
        register(&r);
        let text = typha_service::metrics::encode(&r).unwrap();
        let line = format!(
            "typha_build_info{{allocator=\"{ALLOCATOR}\",build_date=\"{BUILD_DATE}\",revision=\"{COMMIT}\",rustc_version=\"{RUSTC}\",target=\"{TARGET}\",version=\"{VERSION}\"}} 1\n"
        );
        assert!(text.contains(&line), "{line} in\n{text}");
        assert!(LONG_VERSION.starts_with(VERSION) && LONG_VERSION.contains(COMMIT));
        assert!(!COMMIT.is_empty() && !BUILD_DATE.is_empty());
    }
}
