//! What the binary was built from, for `--version`, the start-up log line and
//! `typha_build_info` (`src/build_info.rs`): the commit and its date, the compiler and the
//! target. Never a path of the build machine (`scripts/build-release`, `.ci/check-structure`).
//!
//! The commit: `TYPHA_GIT_COMMIT` if the build sets it (the image build does: its context has
//! no `.git`), else `git rev-parse HEAD` when git is installed and this crate is inside the
//! repository's own checkout, else `unknown`. The date: `SOURCE_DATE_EPOCH` (the
//! reproducible-builds convention) or `TYPHA_BUILD_DATE` (RFC 3339) if set, else the commit's
//! date (so two builds of one commit carry the same), else `unknown`. No network is needed.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    for var in ["TYPHA_GIT_COMMIT", "TYPHA_BUILD_DATE", "SOURCE_DATE_EPOCH"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let in_checkout = checkout_root(&manifest).is_some_and(|root| {
        // git walks up from here: a tree unpacked inside some other repository must not
        // report that repository's commit.
        manifest.parent().and_then(|p| p.canonicalize().ok()) == root.canonicalize().ok()
    });
    if in_checkout {
        watch_head(&manifest);
    }
    let commit = given("TYPHA_GIT_COMMIT")
        .or_else(|| {
            in_checkout
                .then(|| git(&manifest, &["rev-parse", "HEAD"]))
                .flatten()
        })
        .unwrap_or_else(|| "unknown".into());
    let date = given("SOURCE_DATE_EPOCH")
        .and_then(|s| s.parse::<i64>().ok())
        .map(rfc3339)
        .or_else(|| given("TYPHA_BUILD_DATE"))
        .or_else(|| {
            in_checkout
                .then(|| {
                    let mut cmd = git_command(&manifest);
                    cmd.args(["log", "-1", "--format=%ct", "HEAD"]);
                    output(cmd)
                })
                .flatten()
                .and_then(|s| s.parse::<i64>().ok())
                .map(rfc3339)
        })
        .unwrap_or_else(|| "unknown".into());
    let rustc = std::env::var_os("RUSTC")
        .and_then(|r| {
            let mut cmd = Command::new(r);
            cmd.arg("--version");
            output(cmd)
        })
        // "rustc 1.95.0 (hash date)": the version.
        .and_then(|v| v.split_whitespace().nth(1).map(str::to_owned))
        .unwrap_or_else(|| "unknown".into());
    let target = std::env::var("TARGET").unwrap_or_else(|_| "unknown".into());
    println!("cargo:rustc-env=TYPHA_BUILD_COMMIT={}", clean(&commit));
    println!("cargo:rustc-env=TYPHA_BUILD_DATE={}", clean(&date));
    println!("cargo:rustc-env=TYPHA_BUILD_RUSTC={}", clean(&rustc));
    println!("cargo:rustc-env=TYPHA_BUILD_TARGET={}", clean(&target));
}

/// A variable the build set, unless empty or `unknown` (an image built without its argument).
fn given(var: &str) -> Option<String> {
    std::env::var(var)
        .ok()
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty() && v != "unknown")
}

/// Only characters that belong in a version string and a metric label: no newline could end
/// the `cargo:` line early, no quote or backslash needs escaping.
fn clean(s: &str) -> String {
    s.chars()
        .filter(|c| c.is_ascii_alphanumeric() || "-_.:+".contains(*c))
        .take(64)
        .collect()
}

fn git_command(dir: &Path) -> Command {
    let mut cmd = Command::new("git");
    cmd.current_dir(dir).env("GIT_OPTIONAL_LOCKS", "0");
    cmd
}

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let mut cmd = git_command(dir);
    cmd.args(args);
    output(cmd)
}

/// The command's standard output, trimmed, if it ran and succeeded with some.
fn output(mut cmd: Command) -> Option<String> {
    let out = cmd.output().ok().filter(|o| o.status.success())?;
    let s = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (!s.is_empty()).then_some(s)
}

/// The root of the git checkout holding `dir`, if git is installed and there is one.
fn checkout_root(dir: &Path) -> Option<PathBuf> {
    git(dir, &["rev-parse", "--show-toplevel"]).map(PathBuf::from)
}

/// Builds again when HEAD moves: a commit, a checkout, a worktree's own HEAD.
fn watch_head(dir: &Path) {
    let (Some(git_dir), Some(common)) = (
        git(dir, &["rev-parse", "--absolute-git-dir"]),
        git(dir, &["rev-parse", "--git-common-dir"]),
    ) else {
        return;
    };
    let git_dir = PathBuf::from(git_dir);
    // Relative to the working directory git ran in.
    let common = dir.join(common);
    let mut watched = vec![git_dir.join("HEAD"), common.join("packed-refs")];
    if let Some(head_ref) = git(dir, &["symbolic-ref", "-q", "HEAD"]) {
        watched.push(common.join(head_ref));
    }
    // Only files that exist: cargo runs a script again on every build for one that does not.
    for f in watched.iter().filter(|f| f.is_file()) {
        println!("cargo:rerun-if-changed={}", f.display());
    }
}

/// Unix seconds as `YYYY-MM-DDTHH:MM:SSZ`.
fn rfc3339(secs: i64) -> String {
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3_600,
        rem % 3_600 / 60,
        rem % 60
    )
}
