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
use reprise_agents::supervise;

use crate::cli::Cli;
use crate::error::CliError;
use crate::settings::Settings;

fn main() -> ExitCode {
    // The hidden subcommands that supervise and contain each agent and gate
    // process (reprise_agents::supervise): not for users, never in --help.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    match args.get(1).and_then(|arg| arg.to_str()) {
        Some(supervise::SUPERVISE_COMMAND) => {
            return match supervise::supervise_main(&args[2..]) {
                Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
                Err(err) => hop_failed(&err),
            };
        }
        Some(supervise::CONTAIN_COMMAND) => {
            return hop_failed(&supervise::contain_main(&args[2..]));
        }
        _ => {}
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => return usage_error(&err),
    };
    let settings = Settings::from_env(&cli.global, |name| std::env::var(name).ok());
    let result = commands::run(cli.command, &settings);
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

/// A supervisor or containment hop that could not run the program: one
/// line on the attempt's stderr and the shell's exit codes (127: not found,
/// 126: could not run).
fn hop_failed(err: &supervise::SuperviseError) -> ExitCode {
    let mut stderr = std::io::stderr().lock();
    let _ = writeln!(stderr, "reprise: {err}");
    let not_found = matches!(err, supervise::SuperviseError::Exec { source, .. } if source.kind() == std::io::ErrorKind::NotFound);
    ExitCode::from(if not_found { 127 } else { 126 })
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
