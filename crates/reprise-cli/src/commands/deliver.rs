//! `reprise apply`, `reprise diff` and `reprise clean`: a run's results back
//! to the user, and the worktrees of finished runs out of the way.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use reprise_core::TaskId;
use reprise_engine::{
    ApplyTarget, CleanItem, CleanScope, DeliveryError, RunState, latest_run, load_run,
};
use reprise_store::state::StateDir;
use serde_json::json;

use crate::error::{CliError, ErrorKind};
use crate::output::Outcome;
use crate::output::short_commit;
use crate::settings::Settings;

#[derive(Debug, clap::Args)]
pub(crate) struct ApplyArgs {
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
}

impl ApplyArgs {
    pub(crate) fn run(self, settings: &Settings) -> Result<Outcome, CliError> {
        apply(
            settings,
            self.run.as_deref(),
            self.task.as_deref(),
            self.branch.as_deref(),
            self.dry_run,
        )
    }
}

#[derive(Debug, clap::Args)]
pub(crate) struct DiffArgs {
    /// A run id (default: the latest run).
    run: Option<String>,
    /// One task of the run (default: the run's combined leaf results).
    task: Option<String>,
}

impl DiffArgs {
    pub(crate) fn run(self, settings: &Settings) -> Result<Outcome, CliError> {
        diff(settings, self.run.as_deref(), self.task.as_deref())
    }
}

#[derive(Debug, clap::Args)]
pub(crate) struct CleanArgs {
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
}

impl CleanArgs {
    /// `--finished` is the default scope, so it changes nothing.
    pub(crate) fn run(self, settings: &Settings) -> Result<Outcome, CliError> {
        clean(
            settings,
            self.run.as_deref(),
            self.all,
            BranchCleaning {
                branches: self.branches,
                force: self.force,
            },
            self.dry_run,
        )
    }
}

fn delivery_error(err: DeliveryError) -> CliError {
    let kind = if err.is_bad_input() {
        ErrorKind::Usage
    } else {
        ErrorKind::Failed
    };
    CliError::from_source(kind, err)
}

fn load(state: &StateDir, run: Option<&str>) -> Result<RunState, CliError> {
    match run {
        Some(run) => load_run(state, run),
        None => latest_run(state),
    }
    .map_err(|err| CliError::usage(err.to_string()))
}

fn project_of(state: &StateDir, settings: &Settings) -> PathBuf {
    state
        .root()
        .parent()
        .map_or_else(|| settings.cwd.clone(), Path::to_path_buf)
}

fn apply(
    settings: &Settings,
    run: Option<&str>,
    task: Option<&str>,
    branch: Option<&str>,
    dry_run: bool,
) -> Result<Outcome, CliError> {
    let state = settings.state()?;
    let run = load(&state, run)?;
    let task = task.map(TaskId::parse).transpose()?;
    let plan = reprise_engine::plan_apply(&run, task.as_ref(), branch).map_err(delivery_error)?;
    if !dry_run {
        reprise_engine::apply(&plan)
            .map_err(|err| CliError::failed(format!("apply failed, nothing was changed: {err}")))?;
    }
    let tasks: Vec<&str> = plan.tasks.iter().map(TaskId::as_str).collect();
    let mut text = String::new();
    let verb = if dry_run { "would apply" } else { "applied" };
    match &plan.target {
        ApplyTarget::AlreadyApplied { branch } => {
            let _ = writeln!(
                text,
                "{branch} already holds the results of run {} ({})",
                run.run_id,
                tasks.join(", ")
            );
        }
        ApplyTarget::CurrentBranch {
            branch,
            fast_forward,
        } => {
            let _ = writeln!(
                text,
                "{verb} run {} ({}) to {branch}{}: {} file{} changed",
                run.run_id,
                tasks.join(", "),
                if *fast_forward {
                    ", fast-forward"
                } else {
                    " with a merge commit"
                },
                plan.files.len(),
                if plan.files.len() == 1 { "" } else { "s" },
            );
        }
        ApplyTarget::TasksChangesOnly { branch } => {
            let _ = writeln!(
                text,
                "{verb} run {} ({}) to {branch} as one commit of what its tasks changed: {} file{} changed; your uncommitted changes stay as they were",
                run.run_id,
                tasks.join(", "),
                plan.files.len(),
                if plan.files.len() == 1 { "" } else { "s" },
            );
        }
        ApplyTarget::NewBranch { branch } => {
            let _ = writeln!(
                text,
                "{} branch {branch} at the results of run {} ({}); your checkout is unchanged",
                if dry_run { "would create" } else { "created" },
                run.run_id,
                tasks.join(", ")
            );
        }
    }
    for (task, gaps) in &plan.partial {
        let _ = writeln!(
            text,
            "  partial: {task} was kept without passing {}",
            gaps.join(", ")
        );
    }
    if dry_run || settings.json {
        for (hash, subject) in &plan.commits {
            let _ = writeln!(text, "  commit {} {subject}", short_commit(hash));
        }
        for file in &plan.files {
            let _ = writeln!(text, "  file   {file}");
        }
    }
    Ok(Outcome {
        exit: None,
        json: json!({
            "run_id": run.run_id,
            "dry_run": dry_run,
            "applied": !dry_run,
            "tasks": tasks,
            "target": plan.target,
            "commit": plan.commit,
            "commits": plan.commits.iter().map(|(hash, subject)| json!({"commit": hash, "subject": subject})).collect::<Vec<_>>(),
            "files": plan.files,
            "partial": plan.partial.iter().map(|(task, gaps)| json!({"task_id": task.as_str(), "gaps": gaps})).collect::<Vec<_>>(),
        }),
        text,
        ok: true,
    })
}

/// What a run's results (or one task's) change: `reprise diff`, and `d` in
/// `reprise watch`.
pub(crate) fn diff(
    settings: &Settings,
    run: Option<&str>,
    task: Option<&str>,
) -> Result<Outcome, CliError> {
    let state = settings.state()?;
    let run = load(&state, run)?;
    let task = task.map(TaskId::parse).transpose()?;
    let report = reprise_engine::diff(&state, &run, task.as_ref()).map_err(delivery_error)?;
    let mut text = String::new();
    if let (Some(kept), Some(task)) = (&report.failed_tree, &task) {
        // Said before the patch, so the output still applies as one.
        let short = &kept.checkpoint[..kept.checkpoint.len().min(12)];
        let _ = writeln!(
            text,
            "the failed attempt's work of {task} in run {} ({}, no result to apply): the tree its last attempt left, kept as checkpoint {short}, against its base {}",
            run.run_id,
            kept.state,
            &report.from[..report.from.len().min(12)],
        );
        let _ = writeln!(
            text,
            "get it back into its worktree: reprise checkpoint restore {task} {short} --run {}",
            run.run_id
        );
        if !kept.skipped.is_empty() {
            let _ = writeln!(
                text,
                "left out of the checkpoint for their size (not shown, not restored): {}",
                kept.skipped.join(", ")
            );
        }
    }
    if report.files.is_empty() {
        let _ = writeln!(text, "no changes");
    } else {
        text.push_str(&report.patch);
        if !text.ends_with('\n') {
            text.push('\n');
        }
    }
    Ok(Outcome {
        exit: None,
        json: json!({
            "run_id": run.run_id,
            "task_id": task.as_ref().map(TaskId::as_str),
            "from": report.from,
            "to": report.to,
            "work": if report.failed_tree.is_some() { "failed_attempt" } else { "result" },
            "checkpoint": report.failed_tree.as_ref().map(|kept| &kept.checkpoint),
            "skipped": report.failed_tree.as_ref().map(|kept| &kept.skipped),
            "files": report.files.iter().map(|(status, path)| json!({"status": status, "path": path})).collect::<Vec<_>>(),
        }),
        text,
        ok: true,
    })
}

/// `--branches` and `--force`: which result branches `clean` deletes.
#[derive(Debug, Clone, Copy)]
struct BranchCleaning {
    branches: bool,
    force: bool,
}

fn clean(
    settings: &Settings,
    run: Option<&str>,
    all: bool,
    BranchCleaning { branches, force }: BranchCleaning,
    dry_run: bool,
) -> Result<Outcome, CliError> {
    let state = settings.state()?;
    let scope = match (run, all) {
        (Some(run), _) => {
            // An unknown run is bad input, named before anything is looked at.
            load_run(&state, run).map_err(|err| CliError::usage(err.to_string()))?;
            CleanScope::Run(run.to_owned())
        }
        (None, true) => CleanScope::All,
        (None, false) => CleanScope::Finished,
    };
    let project = project_of(&state, settings);
    let plan = reprise_engine::plan_clean(&state, &project, &scope, branches, force)
        .map_err(|err| CliError::usage(err.to_string()))?;
    if !dry_run {
        reprise_engine::clean(&state, &project, &plan)
            .map_err(|err| CliError::failed(format!("clean stopped: {err}")))?;
    }
    let worktrees = plan
        .items
        .iter()
        .filter(|item| matches!(item, CleanItem::Worktree { .. }))
        .count();
    let branch_count = plan
        .items
        .iter()
        .filter(|item| matches!(item, CleanItem::Branch { .. }))
        .count();
    let mut text = String::new();
    for item in &plan.items {
        match item {
            CleanItem::Worktree { path, bytes, .. } => {
                let _ = writeln!(text, "  worktree {} ({})", path.display(), size(*bytes));
            }
            CleanItem::Branch { name, .. } => {
                let _ = writeln!(text, "  branch   {name}");
            }
            CleanItem::Checkpoints { path, bytes, .. } => {
                let _ = writeln!(text, "  checkpoints {} ({})", path.display(), size(*bytes));
            }
        }
    }
    for kept in &plan.kept_branches {
        let _ = writeln!(
            text,
            "  kept     {}: no other local branch holds its commits (--force deletes it)",
            kept.name
        );
    }
    for live in &plan.skipped_live {
        let _ = writeln!(text, "  skipped {live}: it is running now");
    }
    for cancelled in &plan.skipped_cancelled {
        let _ = writeln!(
            text,
            "  skipped {cancelled}: cancelled; `reprise run --continue {cancelled}` takes it up (`reprise clean {cancelled}` removes it)"
        );
    }
    let _ = write!(
        text,
        "{} {worktrees} worktree{} ({}) and {branch_count} branch{}",
        if dry_run { "would remove" } else { "removed" },
        if worktrees == 1 { "" } else { "s" },
        size(plan.bytes()),
        if branch_count == 1 { "" } else { "es" },
    );
    match plan.kept_branches.len() {
        0 => text.push('\n'),
        kept => {
            let _ = writeln!(
                text,
                "; kept {kept} branch{} no other branch holds (--force deletes {})",
                if kept == 1 { "" } else { "es" },
                if kept == 1 { "it" } else { "them" }
            );
        }
    }
    Ok(Outcome {
        exit: None,
        json: json!({
            "dry_run": dry_run,
            "items": plan.items,
            "skipped_live": plan.skipped_live,
            "kept_branches": plan.kept_branches,
            "skipped_cancelled": plan.skipped_cancelled,
            "bytes": plan.bytes(),
        }),
        text,
        ok: true,
    })
}

fn size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}
