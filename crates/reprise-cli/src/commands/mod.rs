//! The commands: each module holds its commands' arguments (clap's derive)
//! and a `run` taking them with the resolved settings and returning an
//! `Outcome`. Dispatch is one line per command; printing happens here, once.

mod approve;
mod audit;
mod audit_suspension;
mod budget;
mod check;
mod checkpoint;
mod deliver;
mod fleet;
mod fleet_transport;
mod init;
mod journal;
mod lineage;
mod logs;
pub(crate) mod progress;
mod rehearse;
mod replay;
mod report;
mod resolve;
mod run;
mod shell;
mod spend;
mod status;
mod suspended;
mod task;
mod watch;
mod worker;
mod workspace;

use clap::Subcommand;

use crate::error::CliError;
use crate::output::Outcome;
use crate::settings::Settings;

pub(crate) use run::stopped_by;

/// Every command, in the order `--help` lists them. A command's doc comment
/// and examples are here; its arguments are in its own module.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Create the state directory (and the audit key if there is none).
    #[command(after_help = help!("\
  reprise init              .reprise/ here, and the audit key if there is none
  reprise init --plan       the same, and a commented starter plan.yaml that runs on sim"))]
    Init(init::InitArgs),
    /// Run a plan: every task through its agent, gates, and checkpointed retries.
    #[command(after_help = help!("\
  reprise run plan.yaml
  reprise run plan.yaml --check         check the plan, agent binaries and gate tools; run nothing
  reprise run plan.yaml --seats 4 --retry-budget \"3 retries, degrade: coverage>tests\"
  reprise run --retry-failed R-01J...   run a finished run's failed tasks again

  Agent binaries: the plan's agents.<cli>.bin, else REPRISE_CLAUDE_BIN,
  REPRISE_CODEX_BIN or REPRISE_GEMINI_BIN, else PATH."))]
    Run(run::RunArgs),
    /// Check a plan without running it.
    #[command(subcommand)]
    Plan(check::PlanCommand),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    #[command(after_help = help!("\
  reprise completions bash > ~/.local/share/bash-completion/completions/reprise
  reprise completions zsh > ~/.zfunc/_reprise
  reprise completions fish > ~/.config/fish/completions/reprise.fish"))]
    Completions(shell::CompletionsArgs),
    /// Print the manual page (roff), generated from this command's own help.
    #[command(after_help = help!("\
  reprise man > reprise.1 && man ./reprise.1"))]
    Man,
    /// Bring a finished run's results into your checkout: the results of its
    /// leaf tasks merged into the current branch (fast-forward when possible).
    #[command(after_help = help!("\
  reprise apply --dry-run            the commits and files the latest run would bring in
  reprise apply R-01J...             merge that run's results into your branch
  reprise apply --branch results     put them on a new branch instead"))]
    Apply(deliver::ApplyArgs),
    /// Show what a run's results (or one task's) change against their base.
    #[command(after_help = help!("\
  reprise diff                      the latest run's combined results
  reprise diff R-01J... add-greeting   one task's result"))]
    Diff(deliver::DiffArgs),
    /// Remove finished runs' worktrees (and, with --branches, their branches).
    #[command(after_help = help!("\
  reprise clean --dry-run           what cleaning every finished run would free
  reprise clean R-01J... --branches one run's worktrees and result branches"))]
    Clean(deliver::CleanArgs),
    /// Rehearse a plan: the real agent CLIs against a scripted model server
    /// on loopback, no tokens spent; or `rehearse serve`, the server alone.
    #[command(after_help = help!("\
  reprise rehearse plan.yaml --scenario scenario.yaml
  reprise rehearse plan.yaml --scenario scenario.yaml --price 3/15 --keep-requests
  reprise rehearse --continue R-01J... --scenario scenario.yaml"))]
    Rehearse(rehearse::RehearseArgs),
    /// Explain a retry budget spec.
    #[command(subcommand)]
    Budget(budget::BudgetCommand),
    /// Print what a task's attempts printed: the agent's stdout, stderr and
    /// reply, each gate's output, and where the CLI's own transcript is.
    #[command(after_help = help!("\
  reprise logs add-greeting
  reprise logs add-greeting --attempt 2 --gate tests
  reprise logs quickstart/add-greeting --run R-01J... --json"))]
    Logs(logs::LogsArgs),
    /// Write one self-contained HTML report of a run (default: the latest).
    #[command(after_help = help!("\
  reprise report
  reprise report R-01J... -o run.html --open"))]
    Report(report::ReportArgs),
    /// List every run: plan, start, duration, state, tasks passed, cost.
    #[command(after_help = help!("\
  reprise runs
  reprise runs --json"))]
    Runs,
    /// Show a run's tasks and attempts (default: the latest run).
    #[command(after_help = help!("\
  reprise status
  reprise status R-01J... --json"))]
    Status(status::StatusArgs),
    /// List or show tasks of the latest run, and the parked ones.
    #[command(subcommand)]
    Task(task::TaskCommand),
    /// Watch every unfinished run in one screen, what waits on you first.
    ///
    /// The attention list (parks until approval, permission questions,
    /// parks, usage limits with their reset, failed and blocked tasks) on
    /// top, each with what wakes it; then every task's phase, attempt,
    /// elapsed time, cost and host. Keys act on the selected task through
    /// the commands' own code: `a` approves, `r` resumes, `p` pauses or
    /// unpauses, `s` suspends, `l` follows its output, `d` its diff,
    /// Enter its details, `?` help, `q` quits.
    #[command(after_help = help!("\
  reprise watch                     every unfinished run of this state directory
  reprise watch R-01J...            one run
  reprise watch --fleet postgres://user@db.internal/reprise   with the fleet's hosts
  reprise watch --once [--json]     one frame as text (or the board as JSON)"))]
    Watch(watch::WatchArgs),
    /// Approve a task's park that waits for approval (`--until approval`):
    /// a decision signed with the audit key, which its resume binds.
    #[command(after_help = help!("\
  reprise approve add-greeting
  reprise approve quickstart/add-greeting --note \"the migration looks right\""))]
    Approve(approve::ApproveArgs),
    /// Show a task's retry lineage: every decision and how it was sealed.
    #[command(subcommand)]
    Lineage(lineage::LineageCommand),
    /// Read or verify a task's journal.
    #[command(subcommand)]
    Journal(journal::JournalCommand),
    /// Verify the audit chain.
    #[command(subcommand)]
    Audit(audit::AuditCommand),
    /// Repair damage a crash left behind.
    #[command(subcommand)]
    Replay(replay::ReplayCommand),
    /// Hash a working tree.
    #[command(subcommand)]
    Workspace(workspace::WorkspaceCommand),
    /// List a task's file checkpoints, or roll its tree back to one.
    #[command(subcommand)]
    Checkpoint(checkpoint::CheckpointCommand),
    /// Set up or inspect a fleet: many hosts running one plan through a
    /// PostgreSQL database.
    #[command(subcommand)]
    Fleet(fleet::FleetCommand),
    /// Run a fleet's tasks on this host.
    ///
    /// Claims up to --capacity tasks at a time from the fleet's database,
    /// runs each as a local run would (in a state directory and project
    /// clone of its own, with no audit key), and ships its rows to the
    /// coordinator, which signs them. SIGTERM drains.
    #[command(after_help = help!("\
  reprise worker --db postgres://user@db.internal/reprise --capacity 4
  REPRISE_DATABASE_URL=postgres://user@db.internal/reprise reprise worker --host-id build-2"))]
    Worker(worker::WorkerArgs),
}

/// Which plan a TASK argument belongs to: task ids are unique only within a
/// plan.
#[derive(Debug, clap::Args, Clone, Default)]
pub(crate) struct PlanArg {
    /// The plan TASK belongs to (default: the latest run's plan, or the one
    /// plan that has the task; `PLAN/TASK` says the same).
    #[arg(long = "plan", value_name = "NAME")]
    pub(crate) name: Option<String>,
}

/// Runs `command` and prints its outcome. `app` gives the whole grammar, for
/// the commands that print it (completions, the manual page).
pub(crate) fn run(
    command: Command,
    settings: &Settings,
    app: fn() -> clap::Command,
) -> Result<Outcome, CliError> {
    // An event stream's last line carries the outcome: nothing more is printed.
    let streamed = matches!(&command, Command::Run(args) if args.events);
    let outcome = match command {
        Command::Init(args) => args.run(settings)?,
        Command::Run(args) => args.run(settings)?,
        Command::Plan(command) => command.run(settings)?,
        Command::Completions(args) => args.run(app),
        Command::Man => shell::man(app)?,
        Command::Apply(args) => args.run(settings)?,
        Command::Diff(args) => args.run(settings)?,
        Command::Clean(args) => args.run(settings)?,
        Command::Rehearse(args) => args.run(settings)?,
        Command::Budget(command) => command.run(settings)?,
        Command::Logs(args) => args.run(settings)?,
        Command::Report(args) => args.run(settings)?,
        Command::Runs => status::runs(settings)?,
        Command::Status(args) => args.run(settings)?,
        Command::Task(command) => command.run(settings)?,
        Command::Watch(args) => args.run(settings)?,
        Command::Approve(args) => args.run(settings)?,
        Command::Lineage(command) => command.run(settings)?,
        Command::Journal(command) => command.run(settings)?,
        Command::Audit(command) => command.run(settings)?,
        Command::Replay(command) => command.run(settings)?,
        Command::Workspace(command) => command.run(settings)?,
        Command::Checkpoint(command) => command.run(settings)?,
        Command::Fleet(command) => command.run(settings)?,
        Command::Worker(args) => args.run(settings)?,
    };
    if !streamed {
        outcome.print(settings.json);
    }
    Ok(outcome)
}
