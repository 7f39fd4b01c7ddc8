//! `--report DIR`: a Markdown report with SVG plots.

use std::path::{Path, PathBuf};

use crate::harness::Outcome;

/// Writes the report; returns the Markdown file's path.
pub(crate) fn write(dir: &Path, o: &Outcome) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join(format!("{}.md", o.name));
    std::fs::write(&path, &o.table)?;
    Ok(path)
}
