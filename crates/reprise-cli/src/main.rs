//! The `reprise` binary: parse, resolve settings, run one command, render,
//! and map the outcome to an exit code. Only this crate prints.

#![forbid(unsafe_code)]

#[macro_use]
mod help;
mod cli;
mod commands;
mod error;
mod output;
mod settings;

use std::io::Write;
use std::process::ExitCode;

use crate::cli::Cli;
use crate::error::CliError;
use crate::settings::Settings;

fn main() -> ExitCode {
    let parsed = cli::command()
        .try_get_matches()
        .and_then(|matches| <Cli as clap::FromArgMatches>::from_arg_matches(&matches));
    let cli = match parsed {
        Ok(cli) => cli,
        Err(err) => return usage_error(&err),
    };
    let settings = Settings::from_env(&cli.global, |name| std::env::var(name).ok());
    let result = commands::run(cli.command, &settings, cli::command);
    // A run stopped by SIGINT, SIGTERM or SIGHUP exits as the shell would
    // report the signal: 130, 143, 129.
    if let Some(signal) = commands::stopped_by() {
        if let Err(err) = &result {
            report(err);
        }
        return ExitCode::from(u8::try_from(128 + signal).unwrap_or(1));
    }
    match result {
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
            ExitCode::from(error::ExitKind::Usage.code())
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
    report(
        &CliError::usage(format!("{first}{}", suggestion(err))).with_hint(format!(
            "run `{} --help` for usage",
            command_path(&std::env::args().skip(1).collect::<Vec<_>>())
        )),
    )
}

/// clap's "did you mean" for a misspelt subcommand, flag or value, as a
/// clause of the one-line error.
fn suggestion(err: &clap::Error) -> String {
    use clap::error::{ContextKind, ContextValue};
    let suggested = [
        ContextKind::SuggestedSubcommand,
        ContextKind::SuggestedArg,
        ContextKind::SuggestedValue,
    ]
    .into_iter()
    .find_map(|kind| match err.get(kind) {
        Some(ContextValue::String(value)) => Some(vec![value.clone()]),
        Some(ContextValue::Strings(values)) if !values.is_empty() => Some(values.clone()),
        _ => None,
    });
    // clap orders its suggestions by likeness, the likeliest last.
    match suggested.as_ref().and_then(|values| values.last()) {
        Some(value) => format!(" (did you mean '{value}'?)"),
        None => String::new(),
    }
}

/// `reprise` followed by the subcommands `args` names, as far as they are
/// real subcommands: the command whose own `--help` fits the error.
fn command_path(args: &[String]) -> String {
    let mut command = cli::command();
    let mut path = String::from("reprise");
    for arg in args {
        if arg.starts_with('-') {
            continue;
        }
        let Some(sub) = command.find_subcommand(arg).cloned() else {
            break;
        };
        path.push(' ');
        path.push_str(sub.get_name());
        command = sub;
    }
    path
}

fn report(err: &CliError) -> ExitCode {
    let mut stderr = std::io::stderr().lock();
    let _ = writeln!(stderr, "error: {err}");
    ExitCode::from(err.exit_code())
}
