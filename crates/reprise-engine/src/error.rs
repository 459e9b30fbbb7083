//! The engine's error type: what stops a run before or outside a task. A
//! task's own failure is not an error; it is a task state.

use std::path::PathBuf;

use reprise_core::plan::PlanError;
use reprise_core::witness::WitnessReason;
use reprise_store::StoreError;

pub type Result<T, E = EngineError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("cannot read plan {path}: {source}")]
    ReadPlan {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Plan(#[from] PlanError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}")]
    Budget(#[from] reprise_core::budget::BudgetError),
    #[error(transparent)]
    Encode(#[from] reprise_core::canonical::EncodeError),
    #[error(transparent)]
    Workspace(#[from] reprise_store::workspace::WorkspaceError),
    #[error(transparent)]
    Git(#[from] reprise_store::git::GitError),
    #[error(
        "task {task} is being run by {run} (pid {pid}); wait for that run to end, or run another plan"
    )]
    TaskBusy { task: String, run: String, pid: u32 },
    /// A fleet worker was asked to write what only the audit key's holder
    /// writes.
    #[error(
        "{what} needs the audit key, which a fleet worker does not hold; run the task where the key is (the coordinator)"
    )]
    NeedsKey { what: &'static str },
    /// A worker's outbox has no coordinator behind it any more.
    #[error(
        "the task's outbox is closed: its coordinator no longer takes its rows; the task is lost"
    )]
    OutboxClosed,
    /// A row a worker shipped is not a journal row.
    #[error("a row shipped for task {task} does not parse ({reason}); nothing after it was taken")]
    ShippedRow { task: String, reason: String },
    #[error("file checkpoint: {0}")]
    Checkpoint(String),
    /// A file a gate is judged by could not be checked or put back.
    #[error("cannot check or restore {path}, a file a gate is judged by: {detail}")]
    GateFile {
        path: std::path::PathBuf,
        detail: String,
    },
    #[error("{0}")]
    Lifecycle(String),
    /// A park that cannot be made or completed.
    #[error("{0}")]
    Park(String),
    #[error("cannot create the sandbox for task {task}: {detail}")]
    Sandbox { task: String, detail: String },
    #[error("run {run} not found under {dir}; `reprise status` lists the latest run")]
    NoRun { run: String, dir: PathBuf },
    #[error("no run has been recorded in {dir} yet; start one with `reprise run PLAN`")]
    NoRuns { dir: PathBuf },
    #[error("run state {path} is unreadable: {detail}")]
    BadRunState { path: PathBuf, detail: String },
    /// Before a run: the audit chain is torn (`torn_tail`, which a repair
    /// cuts) or broken at `row`.
    #[error(
        "the audit chain {} is {reason} at row {row}; nothing was run: {}",
        .path.display(),
        if *.torn_tail { "run `reprise replay repair audit`" } else { "inspect it with `reprise audit verify`" }
    )]
    AuditDamaged {
        path: PathBuf,
        reason: &'static str,
        row: u64,
        torn_tail: bool,
    },
    /// Before a run: the state directory's creation was cut by a crash
    /// before its first record.
    #[error(
        "the creation of the state directory {} was cut by a crash ({}: it holds no records yet); nothing was run: run `reprise replay repair audit` to finish it",
        .root.display(),
        .reason.as_str()
    )]
    CreationCut {
        root: PathBuf,
        reason: WitnessReason,
    },
    /// Before a run: the audit chain does not match its witness.
    #[error(
        "the audit chain {} does not match its witness ({}: {}); nothing was run: inspect it with `reprise audit verify`",
        .path.display(),
        .reason.as_str(),
        .reason.explain()
    )]
    WitnessMismatch {
        path: PathBuf,
        reason: WitnessReason,
    },
    /// Before a run: the ledger is torn (`torn_tail`) or broken at `row`.
    #[error(
        "the ledger {} is {reason} at row {row}; nothing was run: {}",
        .path.display(),
        if *.torn_tail { "run `reprise replay repair ledger`" } else { "inspect it with `reprise status`" }
    )]
    LedgerDamaged {
        path: PathBuf,
        reason: &'static str,
        row: u64,
        torn_tail: bool,
    },
    /// Before a run: the ledger does not match its seals in the audit chain.
    #[error(
        "the ledger {} does not match its seals in the audit chain (deleted, cut, rolled back or rewritten); nothing was run: inspect it with `reprise status`",
        .path.display()
    )]
    LedgerUnsealed { path: PathBuf },
    /// Before a run: a task journal the audit chain sealed is gone.
    #[error(
        "the journal of task {task} is gone ({}) but the audit chain sealed {rows} of its rows; nothing was run: put the journal back from a backup (`reprise journal verify {task}` checks it), or run the plan under another name",
        .path.display()
    )]
    SealedJournalMissing {
        task: String,
        path: PathBuf,
        rows: u64,
    },
    /// Before a run: a task journal ends in a torn line.
    #[error(
        "the journal of task {task} ends in a torn line (a crash cut its last write): {}; nothing was run: run `reprise replay repair {task}`, then this command again",
        .path.display()
    )]
    JournalTorn { task: String, path: PathBuf },
    /// Before a run: a task must be contained and this kernel cannot.
    #[error(
        "task {task} has containment: required but this kernel has no Landlock; run it on a kernel with Landlock, or set containment: strict to run uncontained with a warning"
    )]
    ContainmentUnavailable { task: String },
    #[error(
        "task {task} has containment: required but this machine gives attempts no namespaces of their own (unprivileged user namespaces are off, or a fresh /proc is refused), so its agent could see other processes and reach the network by port; allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, or the AppArmor profile that restricts them), or set containment: strict to run with a warning"
    )]
    NamespacesUnavailable { task: String },
}
