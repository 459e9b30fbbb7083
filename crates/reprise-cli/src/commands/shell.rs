//! `reprise completions SHELL` and `reprise man`: shell completion scripts
//! and the manual page, both generated from the clap definitions the binary
//! parses with, so they can never describe a flag it does not have.

use serde_json::json;

use crate::error::CliError;
use crate::output::Outcome;

#[derive(Debug, clap::Args)]
pub(crate) struct CompletionsArgs {
    /// The shell to complete for.
    shell: clap_complete::Shell,
}

impl CompletionsArgs {
    pub(crate) fn run(self, app: fn() -> clap::Command) -> Outcome {
        completions(self.shell, app)
    }
}

/// The completion script for `shell`, on stdout.
fn completions(shell: clap_complete::Shell, app: fn() -> clap::Command) -> Outcome {
    let mut command = app();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "reprise", &mut script);
    let script = String::from_utf8_lossy(&script).into_owned();
    Outcome {
        exit: None,
        json: json!({"shell": shell.to_string(), "script": script}),
        text: script,
        ok: true,
    }
}

/// The manual page `reprise.1` (roff): name, synopsis, options, the
/// commands, and the help's examples, environment and exit codes.
pub(crate) fn man(app: fn() -> clap::Command) -> Result<Outcome, CliError> {
    let mut page = Vec::new();
    clap_mangen::Man::new(app())
        .render(&mut page)
        .map_err(|err| CliError::usage(format!("cannot render the manual page: {err}")))?;
    let page = with_own_commands(&String::from_utf8_lossy(&page), &app());
    Ok(Outcome {
        exit: None,
        json: json!({"man": page}),
        text: page,
        ok: true,
    })
}

/// `page` with clap_mangen's SUBCOMMANDS section, which refers to a page per
/// subcommand (`reprise-init(1)`, ...) that nothing installs, replaced by a
/// COMMANDS section that lists every command, nested ones too, by the words
/// a user types, with what it does.
fn with_own_commands(page: &str, app: &clap::Command) -> String {
    let Some(start) = page.find(".SH SUBCOMMANDS\n") else {
        return page.to_owned();
    };
    let end = page[start + 1..]
        .find("\n.SH ")
        .map_or(page.len(), |offset| start + 1 + offset + 1);
    let mut section = roff::Roff::new();
    section.control("SH", ["COMMANDS"]);
    list_commands(&mut section, app, "reprise");
    section.control("PP", []);
    section.text([roff::roman(
        "Run reprise COMMAND --help for a command's arguments, options and examples.",
    )]);
    // The page already opens with the apostrophe preamble `render` writes.
    let preamble = roff::Roff::new().render();
    let rendered = section.render();
    let body = rendered.strip_prefix(&preamble).unwrap_or(&rendered);
    format!("{}{body}{}", &page[..start], &page[end..])
}

/// One entry per command under `command`, depth first, skipping hidden
/// ones and `help`.
fn list_commands(section: &mut roff::Roff, command: &clap::Command, prefix: &str) {
    for sub in command
        .get_subcommands()
        .filter(|sub| !sub.is_hide_set() && sub.get_name() != "help")
    {
        let name = format!("{prefix} {}", sub.get_name());
        section.control("TP", []);
        section.text([roff::bold(name.as_str())]);
        if let Some(about) = sub.get_about() {
            section.text([roff::roman(about.to_string())]);
        }
        list_commands(section, sub, &name);
    }
}
