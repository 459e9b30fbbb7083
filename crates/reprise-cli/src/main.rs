//! The `reprise` binary: parse, resolve settings, run one command, render,
//! and map the outcome to an exit code. Only this crate prints.

#![forbid(unsafe_code)]

mod cli;
mod commands;
mod error;
mod output;
mod settings;

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

use crate::cli::Cli;
use crate::error::CliError;
use crate::settings::Settings;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => return usage_error(&err),
    };
    let settings = Settings::from_env(&cli.global, |name| std::env::var(name).ok());
    match commands::run(cli.command, &settings) {
        Ok(outcome) => ExitCode::from(outcome.exit_code()),
        Err(err) => report(&err),
    }
}

/// Prints clap's help and version as clap does; reduces its errors to one
/// line with a pointer to `--help`.
fn usage_error(err: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(
        err.kind(),
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
    ) || err.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    {
        let _ = err.print();
        return if err.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
            ExitCode::from(error::EXIT_USAGE)
        } else {
            ExitCode::SUCCESS
        };
    }
    let rendered = err.to_string();
    let mut lines = rendered.lines();
    let first = lines.next().unwrap_or("invalid arguments");
    let first = first.strip_prefix("error: ").unwrap_or(first);
    // "the following required arguments were not provided:" lists them on
    // the indented lines after it: keep them on the one line.
    let listed: Vec<&str> = lines
        .take_while(|line| line.starts_with("  "))
        .map(str::trim)
        .collect();
    let first = if first.ends_with(':') && !listed.is_empty() {
        format!("{first} {}", listed.join(", "))
    } else {
        first.to_owned()
    };
    report(&CliError::usage(format!(
        "{first}; run `reprise --help` for usage"
    )))
}

fn report(err: &CliError) -> ExitCode {
    let mut stderr = std::io::stderr().lock();
    let _ = writeln!(stderr, "error: {}", err.message);
    ExitCode::from(err.code)
}
