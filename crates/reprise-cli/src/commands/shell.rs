//! `reprise completions SHELL` and `reprise man`: shell completion scripts
//! and the manual page, both generated from the clap definitions the binary
//! parses with, so they can never describe a flag it does not have.

use serde_json::json;

use crate::cli;
use crate::error::CliError;
use crate::output::Outcome;

/// The completion script for `shell`, on stdout.
pub(crate) fn completions(shell: clap_complete::Shell) -> Outcome {
    let mut command = cli::command();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "reprise", &mut script);
    let script = String::from_utf8_lossy(&script).into_owned();
    Outcome {
        code: None,
        json: json!({"shell": shell.to_string(), "script": script}),
        text: script,
        ok: true,
    }
}

/// The manual page `reprise.1` (roff): name, synopsis, options, the
/// subcommands, and the help's examples, environment and exit codes.
pub(crate) fn man() -> Result<Outcome, CliError> {
    let mut page = Vec::new();
    clap_mangen::Man::new(cli::command())
        .render(&mut page)
        .map_err(|err| CliError::usage(format!("cannot render the manual page: {err}")))?;
    let page = String::from_utf8_lossy(&page).into_owned();
    Ok(Outcome {
        code: None,
        json: json!({"man": page}),
        text: page,
        ok: true,
    })
}
