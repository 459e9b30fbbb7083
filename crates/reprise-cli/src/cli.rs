//! Command-line grammar. Parsing only: values are resolved in `settings` and
//! interpreted by the commands.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// What every command's help ends with: the environment that affects it and
/// the exit codes.
macro_rules! common_help {
    () => {
        "\
Environment:
  REPRISE_STATE_DIR       the state directory (as --state-dir; default: .reprise here or in a parent)
  REPRISE_AUDIT_KEY_FILE  the audit key (default: $XDG_STATE_HOME/reprise/audit.key,
                          else $HOME/.local/state/reprise/audit.key)

Exit codes:
  0    success
  1    a task failed, a verification failed, or a refusal
  2    usage or bad input (nothing was written)
  3    a run ended with tasks parked
  130  stopped by SIGINT (Ctrl-C), 143 by SIGTERM: tasks cancelled, agents stopped"
    };
}

/// A command's examples followed by the common environment and exit codes.
macro_rules! help {
    ($examples:literal) => {
        // A literal's first line loses its indent to the `\` line
        // continuation; the others keep theirs.
        concat!("Examples:\n  ", $examples, "\n\n", common_help!())
    };
}

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
    ];
    groups
        .into_iter()
        .fold(Cli::command(), |command, (name, help)| {
            command.mut_subcommand(name, |sub| sub.after_help(help))
        })
}

const GROUP_COUNT: usize = 9;

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

#[derive(Debug, Args)]
pub(crate) struct GlobalArgs {
    /// Print machine-readable JSON instead of text.
    #[arg(long, global = true)]
    pub(crate) json: bool,
    /// The state directory to use (default: `.reprise` here or in a parent;
    /// also REPRISE_STATE_DIR).
    #[arg(long, global = true, value_name = "DIR")]
    pub(crate) state_dir: Option<PathBuf>,
    /// Colour: on a terminal unless NO_COLOR is set (auto), always, or never.
    #[arg(long, global = true, value_enum, default_value_t = ColorChoice::Auto)]
    pub(crate) color: ColorChoice,
    /// Print less: a run shows only warnings and its summary.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub(crate) quiet: bool,
    /// Print more: a run also shows each attempt's phases as lines.
    #[arg(short, long, global = true)]
    pub(crate) verbose: bool,
}

/// When output is coloured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ColorChoice {
    Auto,
    Always,
    Never,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Create the state directory (and the audit key if there is none).
    #[command(after_help = help!("\
  reprise init              .reprise/ here, and the audit key if there is none
  reprise init --plan       the same, and a commented starter plan.yaml that runs on sim"))]
    Init {
        /// Also write a commented starter plan.yaml here (refused if one exists).
        #[arg(long)]
        plan: bool,
    },
    /// Run a plan: every task through its agent, gates, and checkpointed retries.
    #[command(after_help = help!("\
  reprise run plan.yaml
  reprise run plan.yaml --check         check the plan, agent binaries and gate tools; run nothing
  reprise run plan.yaml --seats 4 --retry-budget \"3 retries, degrade: coverage>tests\"
  reprise run --retry-failed R-01J...   run a finished run's failed tasks again

  Agent binaries: the plan's agents.<cli>.bin, else REPRISE_CLAUDE_BIN,
  REPRISE_CODEX_BIN or REPRISE_GEMINI_BIN, else PATH."))]
    Run {
        /// The plan file (YAML). Not needed with --retry-failed, which
        /// re-reads the run's own plan.
        #[arg(required_unless_present_any = ["retry_failed", "continue_run"])]
        plan: Option<PathBuf>,
        /// Take up run RUN, interrupted or parked, in this process: what
        /// passed stays passed, what was queued runs, an attempt the dead
        /// process was running is retried (warm when its session and files
        /// allow), and parks whose wake time has passed are resumed.
        #[arg(long = "continue", value_name = "RUN", conflicts_with_all = ["retry_failed", "check", "plan", "include_uncommitted", "retry_budget"])]
        continue_run: Option<String>,
        /// Start a new leg of finished run RUN: its failed tasks run again,
        /// each judged one starting cold with its kept reply quoted once.
        #[arg(long, value_name = "RUN")]
        retry_failed: Option<String>,
        /// Tasks running at once (overrides the plan's `seats`).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
        seats: Option<u32>,
        /// A retry budget, e.g. "3 retries, degrade: coverage>tests"
        /// (overrides the plan's `retry_budget`).
        #[arg(long, value_name = "SPEC")]
        retry_budget: Option<String>,
        /// Start the tasks' worktrees from the project's working tree as it
        /// is, uncommitted and untracked changes included (snapshotted into a
        /// commit that your index, refs and stash never see).
        #[arg(long)]
        include_uncommitted: bool,
        /// Keep every task's worktree when the task ends. By default a task
        /// whose result is committed on its branch (or that changed nothing)
        /// has its worktree removed and unregistered; failed tasks keep
        /// theirs until `reprise clean`.
        #[arg(long, conflicts_with = "check")]
        keep_worktrees: bool,
        /// Check only: validate the plan, resolve every task's agent binary
        /// (and its version) and find each gate's command; run nothing,
        /// write nothing.
        #[arg(long, conflicts_with = "retry_failed")]
        check: bool,
        /// Write one JSON object a line to stdout as things happen (run,
        /// attempts, gates, decisions, anomalies, tasks), the last one
        /// `run.finished` with the whole run document.
        #[arg(long, conflicts_with = "check")]
        events: bool,
    },
    /// Check a plan without running it.
    #[command(subcommand)]
    Plan(PlanCommand),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    #[command(after_help = help!("\
  reprise completions bash > ~/.local/share/bash-completion/completions/reprise
  reprise completions zsh > ~/.zfunc/_reprise
  reprise completions fish > ~/.config/fish/completions/reprise.fish"))]
    Completions {
        /// The shell to complete for.
        shell: clap_complete::Shell,
    },
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
    Apply {
        /// A run id (default: the latest run).
        run: Option<String>,
        /// Only this task's result (it holds its dependencies' work).
        #[arg(long, value_name = "TASK")]
        task: Option<String>,
        /// Create branch NAME at the result instead of moving the current one.
        #[arg(long, value_name = "NAME")]
        branch: Option<String>,
        /// List the commits and files, and change nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Show what a run's results (or one task's) change against their base.
    #[command(after_help = help!("\
  reprise diff                      the latest run's combined results
  reprise diff R-01J... add-greeting   one task's result"))]
    Diff {
        /// A run id (default: the latest run).
        run: Option<String>,
        /// One task of the run (default: the run's combined leaf results).
        task: Option<String>,
    },
    /// Remove finished runs' worktrees (and, with --branches, their branches).
    #[command(after_help = help!("\
  reprise clean --dry-run           what cleaning every finished run would free
  reprise clean R-01J... --branches one run's worktrees and result branches"))]
    Clean {
        /// One run to clean (default: every finished run).
        run: Option<String>,
        /// Every finished run (the default).
        #[arg(long, conflicts_with_all = ["run", "all"])]
        finished: bool,
        /// Every run that is not running now, finished or not.
        #[arg(long, conflicts_with = "run")]
        all: bool,
        /// Also delete the runs' result branches (`reprise/<run>/<task>`)
        /// that another local branch holds (applied ones).
        #[arg(long)]
        branches: bool,
        /// With --branches, delete result branches nothing else holds too
        /// (never applied: their commits become unreachable).
        #[arg(long, requires = "branches")]
        force: bool,
        /// List what would be removed, and remove nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Rehearse a plan: the real agent CLIs against a scripted model server
    /// on loopback, no tokens spent; or `rehearse serve`, the server alone.
    #[command(after_help = help!("\
  reprise rehearse plan.yaml --scenario scenario.yaml
  reprise rehearse plan.yaml --scenario scenario.yaml --price 3/15 --keep-requests
  reprise rehearse --continue R-01J... --scenario scenario.yaml"))]
    Rehearse(RehearseArgs),
    /// Explain a retry budget spec.
    #[command(subcommand)]
    Budget(BudgetCommand),
    /// Print what a task's attempts printed: the agent's stdout, stderr and
    /// reply, each gate's output, and where the CLI's own transcript is.
    #[command(after_help = help!("\
  reprise logs add-greeting
  reprise logs add-greeting --attempt 2 --gate tests
  reprise logs quickstart/add-greeting --run R-01J... --json"))]
    Logs {
        /// The task (or PLAN/TASK).
        task: String,
        /// The run (default: the latest run of the task's plan).
        #[arg(long, value_name = "RUN")]
        run: Option<String>,
        /// Only this attempt.
        #[arg(long, value_name = "N")]
        attempt: Option<u32>,
        /// Only this gate's output.
        #[arg(long, value_name = "NAME")]
        gate: Option<String>,
        /// Follow a live run: print the running attempt's output as it
        /// comes, until the task ends.
        #[arg(long, short = 'f', conflicts_with_all = ["attempt", "gate"])]
        follow: bool,
        #[command(flatten)]
        plan: PlanArg,
    },
    /// Write one self-contained HTML report of a run (default: the latest).
    #[command(after_help = help!("\
  reprise report
  reprise report R-01J... -o run.html --open"))]
    Report {
        /// A run id (`R-...`; default: the latest run).
        run: Option<String>,
        /// Where to write it (default: `.reprise/runs/<run>/report.html`).
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
        /// Open it with the desktop's opener (`xdg-open`) once written.
        #[arg(long)]
        open: bool,
    },
    /// List every run: plan, start, duration, state, tasks passed, cost.
    #[command(after_help = help!("\
  reprise runs
  reprise runs --json"))]
    Runs,
    /// Show a run's tasks and attempts (default: the latest run).
    #[command(after_help = help!("\
  reprise status
  reprise status R-01J... --json"))]
    Status {
        /// A run id (`R-...`; default: the latest run).
        run: Option<String>,
    },
    /// List or show tasks of the latest run, and the parked ones.
    #[command(subcommand)]
    Task(TaskCommand),
    /// Approve a task's park that waits for approval (`--until approval`):
    /// a decision signed with the audit key, which its resume binds.
    #[command(after_help = help!("\
  reprise approve add-greeting
  reprise approve quickstart/add-greeting --note \"the migration looks right\""))]
    Approve {
        /// The task (or PLAN/TASK).
        task: String,
        /// Why, kept in the signed approval.
        #[arg(long, value_name = "TEXT")]
        note: Option<String>,
        #[command(flatten)]
        plan: PlanArg,
    },
    /// Show a task's retry lineage: every decision and how it was sealed.
    #[command(subcommand)]
    Lineage(LineageCommand),
    /// Read or verify a task's journal.
    #[command(subcommand)]
    Journal(JournalCommand),
    /// Verify the audit chain.
    #[command(subcommand)]
    Audit(AuditCommand),
    /// Repair damage a crash left behind.
    #[command(subcommand)]
    Replay(ReplayCommand),
    /// Hash a working tree.
    #[command(subcommand)]
    Workspace(WorkspaceCommand),
    /// List a task's file checkpoints, or roll its tree back to one.
    #[command(subcommand)]
    Checkpoint(CheckpointCommand),
}

#[derive(Debug, Subcommand)]
pub(crate) enum CheckpointCommand {
    /// List a task's file checkpoints in a run (default: the latest run of its plan).
    #[command(after_help = help!("\
  reprise checkpoint list add-greeting
  reprise checkpoint list quickstart/add-greeting --run R-01J..."))]
    List {
        /// The task (or PLAN/TASK).
        task: String,
        /// The run (default: the latest run of the task's plan).
        #[arg(long, value_name = "RUN")]
        run: Option<String>,
        #[command(flatten)]
        plan: PlanArg,
    },
    /// Restore a task's tree to one of its checkpoints exactly.
    #[command(after_help = help!("\
  reprise checkpoint restore add-greeting 1a2b3c4 --dry-run
  reprise checkpoint restore add-greeting 1a2b3c4"))]
    Restore {
        /// The task (or PLAN/TASK).
        task: String,
        /// A checkpoint id (at least 7 characters of it), as `checkpoint list` shows.
        checkpoint: String,
        /// The run (default: the latest run of the task's plan).
        #[arg(long, value_name = "RUN")]
        run: Option<String>,
        /// List what would change, file by file, and change nothing.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        plan: PlanArg,
    },
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub(crate) struct RehearseArgs {
    #[command(subcommand)]
    pub(crate) command: Option<RehearseCommand>,
    /// The plan file (YAML). Not needed with --continue, which re-reads
    /// the run's own plan.
    #[arg(required_unless_present = "continue_run")]
    pub(crate) plan: Option<PathBuf>,
    /// What the server answers (YAML rules; see the README).
    #[arg(long, value_name = "FILE", required = true)]
    pub(crate) scenario: Option<PathBuf>,
    /// Take up rehearsal RUN, interrupted or parked, in this process, as
    /// `run --continue` does, with a new server that goes on from the
    /// run's request log and the agents' homes (their sessions) kept.
    #[arg(long = "continue", value_name = "RUN", conflicts_with_all = ["plan", "retry_budget"])]
    pub(crate) continue_run: Option<String>,
    /// With --continue: resume this parked task first, as `task resume`
    /// would (repeatable).
    #[arg(long, value_name = "TASK", requires = "continue_run")]
    pub(crate) resume: Vec<String>,
    /// Tasks running at once (overrides the plan's `seats`).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) seats: Option<u32>,
    /// A retry budget (overrides the plan's `retry_budget`).
    #[arg(long, value_name = "SPEC")]
    pub(crate) retry_budget: Option<String>,
    /// Dollars per million tokens for the would-cost figures, over the
    /// shipped list and the scenario's `prices:`: `IN/OUT[/WRITE/READ]` for
    /// every model, or `MODEL=IN/OUT[/WRITE/READ]` for one (repeatable).
    #[arg(long, value_name = "[MODEL=]IN/OUT")]
    pub(crate) price: Vec<String>,
    /// Keep every request body the agents sent, beside the request log.
    #[arg(long)]
    pub(crate) keep_requests: bool,
}

/// Which plan a TASK argument belongs to: task ids are unique only within a
/// plan.
#[derive(Debug, Args, Clone, Default)]
pub(crate) struct PlanArg {
    /// The plan TASK belongs to (default: the latest run's plan, or the one
    /// plan that has the task; `PLAN/TASK` says the same).
    #[arg(long = "plan", value_name = "NAME")]
    pub(crate) name: Option<String>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum RehearseCommand {
    /// Serve a scenario on loopback until Ctrl-C, logging every request.
    #[command(after_help = help!("\
  reprise rehearse serve --scenario scenario.yaml --port 8080"))]
    Serve {
        /// What the server answers (YAML rules).
        #[arg(long, value_name = "FILE")]
        scenario: PathBuf,
        /// The request log, one JSON line per request (default: ./requests.jsonl).
        #[arg(long, value_name = "FILE")]
        log: Option<PathBuf>,
        /// The port on 127.0.0.1 (default: any free port).
        #[arg(long, default_value_t = 0)]
        port: u16,
        /// Keep every request body in DIR, one file per request.
        #[arg(long, value_name = "DIR")]
        keep_requests: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum BudgetCommand {
    /// Show what each retry of SPEC would do, or why SPEC is refused.
    #[command(after_help = help!("\
  reprise budget check \"3 retries, degrade: coverage>tests>style\"
  reprise budget check \"2 retries, degrade: coverage\" --plan plan.yaml"))]
    Check {
        /// The retry budget, e.g. \"3 retries, degrade: coverage>tests\".
        spec: String,
        /// Check the spec against this plan's gate criteria and their levels.
        #[arg(long, value_name = "PLAN")]
        plan: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum TaskCommand {
    /// List the tasks of the latest run.
    #[command(after_help = help!("\
  reprise task list"))]
    List,
    /// Show one task: state, attempts and its retry metadata.
    #[command(after_help = help!("\
  reprise task show add-greeting
  reprise task show quickstart/add-greeting --json"))]
    Show {
        /// The task (or PLAN/TASK).
        task: String,
        #[command(flatten)]
        plan: PlanArg,
    },
    /// Park a running task: stop its agent, snapshot and remove its
    /// worktree, give back its seat and unspent budget, until a resume.
    #[command(after_help = help!("\
  reprise task suspend add-greeting
  reprise task suspend add-greeting --until approval --reason \"check the schema first\"
  reprise task suspend add-greeting --until 2026-12-01T18:00:00Z
  reprise task suspend add-greeting --until 30m --json"))]
    Suspend {
        /// The task (or PLAN/TASK).
        task: String,
        #[command(flatten)]
        plan: PlanArg,
        /// What wakes it: `approval` (`reprise approve` first), a time
        /// (RFC 3339) or a duration from now (`30m`); default: a resume.
        #[arg(long, value_name = "approval|TIME")]
        until: Option<String>,
        /// Why, for the record and `reprise task list-suspended`.
        #[arg(long, value_name = "TEXT")]
        reason: Option<String>,
    },
    /// Resume a parked task: its worktree comes back from the park's
    /// snapshot, and its agent continues its own session when nothing
    /// changed (warm), else starts over (cold, recorded).
    #[command(after_help = help!("\
  reprise task resume add-greeting
  reprise task resume add-greeting --mode cold --json"))]
    Resume {
        /// The task (or PLAN/TASK).
        task: String,
        #[command(flatten)]
        plan: PlanArg,
        /// The mode to ask for (default: the task's retry policy); a
        /// drifted workspace still goes cold.
        #[arg(long, value_enum)]
        mode: Option<ResumeMode>,
        /// The park's receipt (from `task suspend --json`): refused unless
        /// it binds the task's latest park.
        #[arg(long, value_name = "HEX")]
        receipt: Option<String>,
    },
    /// Halt a running task's agent at once, keeping its worktree, seat and
    /// budget (a moment's steering); past --upgrade-after it becomes a park.
    #[command(after_help = help!("\
  reprise task pause add-greeting
  reprise task pause add-greeting --upgrade-after 10m"))]
    Pause {
        /// The task (or PLAN/TASK).
        task: String,
        #[command(flatten)]
        plan: PlanArg,
        /// Park the task (releasing everything) if it is still paused after
        /// this long (`30s`, `10m`); default: the task's
        /// `pause_upgrade_after` plan key, else never.
        #[arg(long, value_name = "DURATION")]
        upgrade_after: Option<String>,
    },
    /// Let a paused task go on: its agent continues its own session when
    /// nothing changed, else starts over (cold, recorded).
    #[command(after_help = help!("\
  reprise task unpause add-greeting"))]
    Unpause {
        /// The task (or PLAN/TASK).
        task: String,
        #[command(flatten)]
        plan: PlanArg,
    },
    /// List every task whose latest park is not settled: what wakes it,
    /// how long it has waited, its parked workspace, what it freed.
    #[command(after_help = help!("\
  reprise task list-suspended
  reprise task list-suspended --json"))]
    ListSuspended,
}

/// A resume's mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ResumeMode {
    Warm,
    Fork,
    Cold,
}

#[derive(Debug, Subcommand)]
pub(crate) enum LineageCommand {
    /// Show a task's retry decisions, from its journal and spine.
    #[command(after_help = help!("\
  reprise lineage show add-greeting"))]
    Show {
        /// The task (or PLAN/TASK).
        task: String,
        #[command(flatten)]
        plan: PlanArg,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum JournalCommand {
    /// Print a task's journal rows.
    #[command(after_help = help!("\
  reprise journal show add-greeting --json
  reprise journal show add-greeting --full"))]
    Show {
        /// The task (or PLAN/TASK).
        task: String,
        /// Print every row's whole body, not a one-line cut.
        #[arg(long)]
        full: bool,
        #[command(flatten)]
        plan: PlanArg,
    },
    /// Verify a task's journal chain, coverage and seals.
    #[command(after_help = help!("\
  reprise journal verify add-greeting"))]
    Verify {
        /// The task (or PLAN/TASK).
        task: String,
        #[command(flatten)]
        plan: PlanArg,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum AuditCommand {
    /// Verify the HMAC audit chain.
    #[command(after_help = help!("\
  reprise audit verify --json"))]
    Verify,
    /// Verify a task's latest park offline, from its journal and the audit
    /// chain: verified (settled), pending (live) or failed.
    #[command(after_help = help!("\
  reprise audit verify-suspension add-greeting
  reprise audit verify-suspension quickstart/add-greeting --json

  Exit 0 for verified and pending, 1 for failed."))]
    VerifySuspension {
        /// The task (or PLAN/TASK).
        task: String,
        #[command(flatten)]
        plan: PlanArg,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum ReplayCommand {
    /// Cut a torn final line (and nothing else) off a task's journal and
    /// spine (TASK), the ledger (`ledger`) or the audit chain (`audit`).
    #[command(after_help = help!("\
  reprise replay repair audit
  reprise replay repair add-greeting
  reprise replay repair --all"))]
    Repair {
        /// A task id (or PLAN/TASK), `ledger` or `audit`.
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        target: Option<String>,
        /// Every chain: the audit chain, the ledger, then every plan's tasks.
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        plan: PlanArg,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum WorkspaceCommand {
    /// Hash every file not ignored by the tree's .gitignore rules.
    #[command(after_help = help!("\
  reprise workspace hash
  reprise workspace hash path/to/tree --no-cache"))]
    Hash {
        /// The tree to hash (default: the current directory).
        dir: Option<PathBuf>,
        /// Walker threads (default: one per core).
        #[arg(long, default_value_t = 0)]
        threads: usize,
        /// Re-read every file instead of trusting the stat cache.
        #[arg(long)]
        no_cache: bool,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum PlanCommand {
    /// Check a plan as `run --check` does: the plan, every task's agent
    /// binary (and version), each gate's command; nothing runs or is written.
    #[command(after_help = help!("\
  reprise plan check plan.yaml"))]
    Check {
        /// The plan file (YAML).
        plan: PathBuf,
    },
}
