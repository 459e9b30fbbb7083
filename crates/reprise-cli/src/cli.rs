//! The command-line grammar's top: the program's own help, its global flags
//! and its commands, each of which holds its own arguments
//! (`commands::Command`). Parsing only: values are resolved in `settings`
//! and interpreted by the commands.

use clap::Parser;

use crate::commands::Command;
use crate::settings::GlobalArgs;

/// The command-line grammar with every help text: the derive gives the
/// commands; the groups of subcommands (`task`, `journal`, ...) get their
/// examples here, where clap's derive cannot put them.
pub(crate) fn command() -> clap::Command {
    use clap::CommandFactory;
    let groups: [(&str, &'static str); GROUP_COUNT] = [
        ("checkpoint", help!("reprise checkpoint list add-greeting")),
        (
            "budget",
            help!("reprise budget check \"3 retries, degrade: coverage>tests\""),
        ),
        (
            "task",
            help!(
                "reprise task list\n  reprise task show add-greeting\n  reprise task list-suspended"
            ),
        ),
        ("lineage", help!("reprise lineage show add-greeting")),
        ("journal", help!("reprise journal verify add-greeting")),
        (
            "audit",
            help!("reprise audit verify\n  reprise audit verify-suspension add-greeting"),
        ),
        ("replay", help!("reprise replay repair --all")),
        ("workspace", help!("reprise workspace hash")),
        ("plan", help!("reprise plan check plan.yaml")),
        (
            "fleet",
            help!(
                "reprise fleet init --db postgres://user@db.internal/reprise\n  reprise fleet status --db postgres://user@db.internal/reprise"
            ),
        ),
    ];
    groups
        .into_iter()
        .fold(Cli::command(), |command, (name, help)| {
            command.mut_subcommand(name, |sub| sub.after_help(help))
        })
}

const GROUP_COUNT: usize = 10;

/// Run coding-agent tasks, check them with gates, and recover provably.
#[derive(Debug, Parser)]
#[command(
    name = "reprise",
    version,
    about = "Run coding-agent tasks, check their work with gates, and recover cheaply and provably.",
    propagate_version = true,
    after_help = help!("\
  reprise init --plan            write a starter plan.yaml (it runs on the built-in sim agent)
  reprise run plan.yaml --check  check the plan, its agent binaries and gate tools; run nothing
  reprise run plan.yaml          run it
  reprise status                 the latest run, checked against the ledger

Run `reprise COMMAND --help` for a command's own help; every plan key is in docs/plan.md.")
)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) global: GlobalArgs,
    #[command(subcommand)]
    pub(crate) command: Command,
}
