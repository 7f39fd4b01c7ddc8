//! Parsing a program's flags and environment variables: help and version are printed and end
//! the program with 0; anything else is one line naming the setting (its environment name,
//! as it appears in a manifest) and exit code 64.

use std::ffi::OsString;
use std::process::ExitCode;

use clap::Parser;
use clap::error::{ContextKind, ErrorKind};

use crate::exit;

/// Parses `args` (the first is the program's name) into `C`, or the exit code to end with.
pub fn parse<C: Parser>(
    program: &str,
    args: impl IntoIterator<Item = impl Into<OsString> + Clone>,
) -> Result<C, ExitCode> {
    match C::try_parse_from(args) {
        Ok(c) => Ok(c),
        Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => {
            let _ = e.print();
            Err(ExitCode::SUCCESS)
        }
        Err(e) => Err(exit::invalid_config(program, describe::<C>(&e))),
    }
}

/// One line for a flag or variable clap could not parse, led by the argument's environment
/// name when it has one.
pub fn describe<C: clap::CommandFactory>(e: &clap::Error) -> String {
    let first = e
        .to_string()
        .lines()
        .next()
        .unwrap_or_default()
        .trim_start_matches("error: ")
        .to_owned();
    let arg = e
        .get(ContextKind::InvalidArg)
        .map(|v| v.to_string())
        .unwrap_or_default();
    let cmd = C::command();
    let env = cmd.get_arguments().find_map(|a| {
        let long = a.get_long()?;
        (arg.starts_with(&format!("--{long} ")) || arg == format!("--{long}"))
            .then(|| a.get_env())?
            .map(|e| e.to_string_lossy().into_owned())
    });
    match env {
        Some(env) => format!("{env}: {first}"),
        None => first,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[arg(long, env = "TEST_PORT")]
        port: u16,
    }

    #[test]
    fn a_bad_value_names_its_environment_variable() {
        let e = Cli::try_parse_from(["t", "--port", "x"]).unwrap_err();
        let line = describe::<Cli>(&e);
        assert!(line.starts_with("TEST_PORT: "), "{line}");
        assert!(!line.contains('\n'));
        assert!(parse::<Cli>("t", ["t", "--port", "5473"]).is_ok());
        assert!(parse::<Cli>("t", ["t", "--nope"]).is_err());
    }
}
