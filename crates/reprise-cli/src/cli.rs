//! Command-line grammar. Parsing only: values are resolved in `settings` and
//! interpreted by the commands.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// Run coding-agent tasks, check them with gates, and recover provably.
#[derive(Debug, Parser)]
#[command(name = "reprise", version, about, propagate_version = true)]
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
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Create the state directory (and the audit key if there is none).
    Init,
    /// Run a plan: every task through its agent, gates, and checkpointed retries.
    Run {
        /// The plan file (YAML). Not needed with --retry-failed, which
        /// re-reads the run's own plan.
        #[arg(required_unless_present = "retry_failed")]
        plan: Option<PathBuf>,
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
    },
    /// Bring a finished run's results into your checkout: the results of its
    /// leaf tasks merged into the current branch (fast-forward when possible).
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
    Diff {
        /// A run id (default: the latest run).
        run: Option<String>,
        /// One task of the run (default: the run's combined leaf results).
        task: Option<String>,
    },
    /// Remove finished runs' worktrees (and, with --branches, their branches).
    Clean {
        /// One run to clean (default: every finished run).
        run: Option<String>,
        /// Every finished run (the default).
        #[arg(long, conflicts_with_all = ["run", "all"])]
        finished: bool,
        /// Every run that is not running now, finished or not.
        #[arg(long, conflicts_with = "run")]
        all: bool,
        /// Also delete the runs' result branches (`reprise/<run>/<task>`).
        #[arg(long)]
        branches: bool,
        /// List what would be removed, and remove nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Rehearse a plan: the real agent CLIs against a scripted model server
    /// on loopback, no tokens spent; or `rehearse serve`, the server alone.
    Rehearse(RehearseArgs),
    /// Explain a retry budget spec.
    #[command(subcommand)]
    Budget(BudgetCommand),
    /// Show a run's tasks and attempts (default: the latest run).
    Status {
        /// A run id (`R-...`).
        run: Option<String>,
    },
    /// List or show tasks of the latest run.
    #[command(subcommand)]
    Task(TaskCommand),
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
    List {
        task: String,
        /// The run (default: the latest run of the task's plan).
        #[arg(long, value_name = "RUN")]
        run: Option<String>,
        #[command(flatten)]
        plan: PlanArg,
    },
    /// Restore a task's tree to one of its checkpoints exactly.
    Restore {
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
    /// The plan file (YAML).
    #[arg(required = true)]
    pub(crate) plan: Option<PathBuf>,
    /// What the server answers (YAML rules; see the README).
    #[arg(long, value_name = "FILE", required = true)]
    pub(crate) scenario: Option<PathBuf>,
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
    Check {
        spec: String,
        /// Check the spec against this plan's gate criteria and their levels.
        #[arg(long, value_name = "PLAN")]
        plan: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum TaskCommand {
    /// List the tasks of the latest run.
    List,
    /// Show one task: state, attempts and its retry metadata.
    Show {
        task: String,
        #[command(flatten)]
        plan: PlanArg,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum LineageCommand {
    /// Show a task's retry decisions, from its journal and spine.
    Show {
        task: String,
        #[command(flatten)]
        plan: PlanArg,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum JournalCommand {
    /// Print a task's journal rows.
    Show {
        task: String,
        #[command(flatten)]
        plan: PlanArg,
    },
    /// Verify a task's journal chain, coverage and seals.
    Verify {
        task: String,
        #[command(flatten)]
        plan: PlanArg,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum AuditCommand {
    /// Verify the HMAC audit chain.
    Verify,
}

#[derive(Debug, Subcommand)]
pub(crate) enum ReplayCommand {
    /// Cut a torn final line (and nothing else) off a task's journal and
    /// spine (TASK), the ledger (`ledger`) or the audit chain (`audit`).
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
