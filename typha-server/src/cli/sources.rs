//! Where the settings come from, read as Calico's Typha reads them: flags, then the
//! environment, then the config file (`-c`, `/etc/calico/typha.cfg` by default), then the
//! defaults.
//!
//! - Names are case-insensitive, as Typha's: `typha_logseverityscreen`, `TYPHA_LogSeverityScreen`
//!   and, in the file, `LogSeverityScreen` or `logseverityscreen` all name
//!   `TYPHA_LOGSEVERITYSCREEN`. Where two spellings of one name are in the environment, the
//!   upper-case one wins (Typha would take either).
//! - The file is Typha's format (what its INI reader takes): `Name = value` or `Name: value`
//!   lines, names without the `TYPHA_` prefix, `[sections]` ignored, `#` and `;` comments
//!   (also after a value), values optionally in quotes. An absent file is ignored, as Typha
//!   ignores it.
//! - An empty value is ignored, as Typha ignores it. `none` (any case), Typha's zero value,
//!   turns a switch off, logs nothing (`TYPHA_LOGSEVERITYSCREEN`), balances nothing
//!   (`TYPHA_CONNECTIONREBALANCINGMODE`) and leaves any other setting at its default.
//! - A `TYPHA_*` name that is no setting of this program is either a Typha setting it does not
//!   implement ([`super::typha_settings`]: a note, or a refusal) or unknown.
//!
//! Clap parses the flags given; what the environment and the file set is then handed to clap
//! as flags too, for the settings the command line left alone. Clap never reads the
//! environment itself, so this is a pure function of its inputs.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::builder::ValueParser;
use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches};

use super::flags::Cli;
use super::typha_settings;

/// The settings as read, with what the program is to say about them.
#[derive(Debug)]
pub struct Loaded {
    /// The flags, filled from every source.
    pub cli: Cli,
    /// The config file read, if there was one.
    pub file: Option<PathBuf>,
    /// Typha settings given that this program does not implement: one line each, saying what
    /// it does instead.
    pub notes: Vec<String>,
    /// `TYPHA_*` names (in upper case) that are settings neither of this program nor of
    /// Typha's, with where they were found.
    pub unknown: Vec<String>,
}

/// Why the settings cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// Clap could not parse a flag, or a value from the environment or the file (or was
    /// asked for help or the version: [`clap::Error::kind`]).
    #[error("{}", typha_service::cli::describe::<Cli>(.0))]
    Flags(clap::Error),
    /// A value from the config file that clap could not parse.
    #[error("{} (from {})", typha_service::cli::describe::<Cli>(.0), .1.display())]
    FileValue(clap::Error, PathBuf),
    /// The config file could not be read, or a line of it is not a setting.
    #[error("{path}: {reason}")]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A Typha setting this program does not implement, with a value it cannot go on with.
    #[error("{name}: {reason}")]
    Refused {
        /// Its environment name.
        name: String,
        /// Why.
        reason: String,
    },
}

/// Settings whose own parser gives `none` its meaning (no log lines; no balancing).
const TAKES_NONE: [&str; 2] = ["TYPHA_LOGSEVERITYSCREEN", "TYPHA_CONNECTIONREBALANCINGMODE"];

const FILE: &str = "the config file";
const ENV: &str = "the environment";

/// A setting's value and where it came from.
#[derive(Debug, Clone)]
struct Found {
    value: OsString,
    from: &'static str,
}

/// Reads the settings from `args` (the first is the program's name), the environment `env`
/// and the config file, read with `read` (`Ok(None)`: absent).
pub fn load(
    args: Vec<OsString>,
    env: impl IntoIterator<Item = (OsString, OsString)>,
    read: impl Fn(&Path) -> std::io::Result<Option<String>>,
) -> Result<Loaded, LoadError> {
    // The command without environment names: clap reads only the arguments.
    let cmd = || Cli::command().mut_args(|a| a.env(None::<&'static str>));
    let matches = match cmd().try_get_matches_from(&args) {
        Ok(m) => m,
        // Help and version from the command that names the variables.
        Err(e) if is_display(&e) => {
            return Err(LoadError::Flags(
                Cli::command()
                    .try_get_matches_from(&args)
                    .err()
                    .unwrap_or(e),
            ));
        }
        Err(e) => return Err(LoadError::Flags(e)),
    };
    let given = Cli::from_arg_matches(&matches).map_err(LoadError::Flags)?;

    // The file first, so that the environment overrides it.
    let mut found: BTreeMap<String, Found> = BTreeMap::new();
    let path = given.config_file.clone();
    let file = match read(&path) {
        Ok(Some(text)) => {
            for (name, value) in parse_file(&text).map_err(|reason| LoadError::File {
                path: path.clone(),
                reason,
            })? {
                found.insert(
                    canonical(&name),
                    Found {
                        value: value.into(),
                        from: FILE,
                    },
                );
            }
            Some(path)
        }
        Ok(None) => None,
        Err(e) => {
            return Err(LoadError::File {
                path,
                reason: e.to_string(),
            });
        }
    };
    // Settings named outside Typha's prefix (`USE_POD_CIDR`) are read as they are spelt.
    let full = Cli::command();
    let others: Vec<String> = full
        .get_arguments()
        .filter_map(|a| a.get_env()?.to_str().map(str::to_owned))
        .filter(|e| !e.starts_with("TYPHA_"))
        .collect();
    let mut exact = BTreeMap::new();
    for (name, value) in env {
        let Some(name) = name.to_str() else { continue };
        if others.iter().any(|o| o == name) {
            found.insert(name.to_owned(), Found { value, from: ENV });
            continue;
        }
        let Some(rest) = name
            .get(.."typha_".len())
            .filter(|p| p.eq_ignore_ascii_case("typha_"))
            .and_then(|_| name.get("typha_".len()..))
        else {
            continue;
        };
        let key = canonical(rest);
        let is_exact = key == name;
        // The upper-case spelling wins over any other.
        if is_exact || !exact.contains_key(&key) {
            exact.insert(key.clone(), is_exact);
            found.insert(key, Found { value, from: ENV });
        }
    }
    found.retain(|_, f| !f.value.is_empty());

    // Flags for what the command line left alone.
    let mut extra: Vec<OsString> = Vec::new();
    let mut used = Vec::new();
    for arg in full.get_arguments() {
        let (Some(env), Some(long)) = (arg.get_env().and_then(|e| e.to_str()), arg.get_long())
        else {
            continue;
        };
        let Some(f) = found.get(env) else { continue };
        used.push(env.to_owned());
        if matches.value_source(arg.get_id().as_str()) == Some(ValueSource::CommandLine) {
            continue;
        }
        let none = f
            .value
            .to_str()
            .is_some_and(|v| v.eq_ignore_ascii_case("none"));
        let value = if none && !TAKES_NONE.contains(&env) {
            if !is_bool(arg.get_value_parser()) {
                // Typha's zero value: here, the default.
                continue;
            }
            OsString::from("false")
        } else {
            f.value.clone()
        };
        let mut flag = OsString::from(format!("--{long}="));
        flag.push(value);
        extra.push(flag);
    }
    let cli = if extra.is_empty() {
        given
    } else {
        let mut all = args.into_iter();
        let program: Vec<OsString> = all.next().into_iter().collect();
        let argv: Vec<OsString> = program.into_iter().chain(extra).chain(all).collect();
        let m =
            cmd()
                .try_get_matches_from(argv)
                .map_err(|e| match (from_file(&e, &found), &file) {
                    (true, Some(path)) => LoadError::FileValue(e, path.clone()),
                    _ => LoadError::Flags(e),
                })?;
        Cli::from_arg_matches(&m).map_err(LoadError::Flags)?
    };

    let mut notes = Vec::new();
    let mut unknown = Vec::new();
    for (name, f) in &found {
        if used.contains(name) {
            continue;
        }
        match typha_settings::find(name) {
            Some(u) => match u.judge(&f.value.to_string_lossy()) {
                Ok(note) => notes.push(note),
                Err(reason) => {
                    return Err(LoadError::Refused {
                        name: name.clone(),
                        reason,
                    });
                }
            },
            None => unknown.push(format!("{name} (in {})", f.from)),
        }
    }
    Ok(Loaded {
        cli,
        file,
        notes,
        unknown,
    })
}

/// Help or version asked for: printed, and the program ends with 0.
pub fn is_display(e: &clap::Error) -> bool {
    use clap::error::ErrorKind;
    matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion)
}

/// The environment name of a Typha setting named `name` (without the prefix), any case.
fn canonical(name: &str) -> String {
    format!("TYPHA_{}", name.trim().to_ascii_uppercase())
}

fn is_bool(p: &ValueParser) -> bool {
    p.type_id() == clap::builder::ValueParser::bool().type_id()
}

/// Whether the value clap could not parse came from the config file.
fn from_file(e: &clap::Error, found: &BTreeMap<String, Found>) -> bool {
    use clap::error::{ContextKind, ContextValue};
    let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg) else {
        return false;
    };
    Cli::command()
        .get_arguments()
        .find(|a| {
            a.get_long()
                .is_some_and(|l| arg == &format!("--{l}") || arg.starts_with(&format!("--{l} ")))
        })
        .and_then(|a| a.get_env())
        .and_then(|env| found.get(env.to_str()?))
        .is_some_and(|f| f.from == FILE)
}

/// Typha's config file: `(name, value)` in the order written; a line that is no setting is
/// an error naming it.
pub fn parse_file(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if line.starts_with('[') {
            if !line.ends_with(']') {
                return Err(format!("line {}: an unclosed section header", i + 1));
            }
            continue;
        }
        let Some(at) = line.find(['=', ':']) else {
            return Err(format!("line {}: not `Name = value`: {line:?}", i + 1));
        };
        let (name, rest) = line.split_at(at);
        let name = name.trim();
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!("line {}: {name:?} is not a setting's name", i + 1));
        }
        let value = rest.get(1..).unwrap_or_default().trim();
        let value = match value.chars().next() {
            Some(q @ ('"' | '\'' | '`')) => {
                let inner = value.get(1..).unwrap_or_default();
                match inner.find(q) {
                    Some(end) => inner.get(..end).unwrap_or_default(),
                    None => return Err(format!("line {}: an unclosed {q}", i + 1)),
                }
            }
            // A comment may follow a value.
            _ => value.split(['#', ';']).next().unwrap_or_default().trim(),
        };
        out.push((name.to_owned(), value.to_owned()));
    }
    Ok(out)
}

/// Reads `path` for [`load`]: `None` if it does not exist.
pub fn read_file(path: &Path) -> std::io::Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}
