//! Getting a run's results back to the user: `apply` (into the current
//! branch, or a new one), `diff` (what a task or a run changed), and `clean`
//! (removing finished runs' worktrees and, when asked, their branches).
//!
//! Each is computed as a plan first, with nothing changed, so a dry run and
//! a refusal are the same code path as the real thing up to the last step.

use std::path::{Path, PathBuf};

use reprise_core::TaskId;
use reprise_store::locks::task_holder;
use reprise_store::state::StateDir;
use serde::Serialize;

use crate::error::{EngineError, Result};
use crate::sandbox::{Folded, Workspace, merge_commits};
use crate::state::{RunState, TaskStatus, run_ids};
use reprise_store::git::{Git, Merged};

/// Why `apply` or `diff` will not go on. Nothing has been changed.
#[derive(Debug, thiserror::Error)]
pub enum DeliveryError {
    #[error("run {run} has not finished; wait for it to end, then apply it")]
    Unfinished { run: String },
    #[error(
        "the tasks of run {run} ran in place ({reason}): their changes are already in the project"
    )]
    InPlace { run: String, reason: String },
    #[error("task {task} is not in run {run}; `reprise status {run}` lists its tasks")]
    UnknownTask { run: String, task: String },
    #[error("task {task} of run {run} has no result to apply ({state})")]
    NoResult {
        run: String,
        task: String,
        state: String,
    },
    #[error(
        "the failed tree {checkpoint} kept for {task} in run {run} is not one its journal recorded ({why}); `reprise journal verify {task}` reports the store"
    )]
    FailedTreeUnbound {
        run: String,
        task: String,
        checkpoint: String,
        why: String,
    },
    #[error("run {run} has no result to apply: no task passed with changes")]
    Nothing { run: String },
    #[error("the results of {tasks} conflict in {files}; apply them one at a time with --task")]
    ResultsConflict { tasks: String, files: String },
    #[error(
        "your uncommitted changes touch {files}, which the result changes too; commit or stash them first"
    )]
    DirtyOverlap { files: String },
    #[error(
        "the result conflicts with {branch} in {files}; apply it to a new branch with --branch NAME"
    )]
    BranchConflict { branch: String, files: String },
    #[error("HEAD is detached; check out a branch, or apply to a new one with --branch NAME")]
    Detached,
    #[error("branch {name} already exists; choose another name for --branch")]
    BranchExists { name: String },
    #[error("{name:?} is not a valid branch name")]
    BadBranch { name: String },
    #[error(transparent)]
    Engine(#[from] EngineError),
}

impl From<reprise_store::git::GitError> for DeliveryError {
    fn from(err: reprise_store::git::GitError) -> Self {
        Self::Engine(err.into())
    }
}

impl DeliveryError {
    /// Whether the user asked for something that cannot be (exit 2), as
    /// opposed to a refusal to change a tree (exit 1).
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            Self::Unfinished { .. }
                | Self::UnknownTask { .. }
                | Self::BadBranch { .. }
                | Self::BranchExists { .. }
                | Self::InPlace { .. }
        )
    }
}

/// Where an apply goes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ApplyTarget {
    /// The checked-out branch, moved forward (a fast-forward, or a merge
    /// commit when the branch moved on since the run's base).
    CurrentBranch { branch: String, fast_forward: bool },
    /// The checked-out branch, moved forward by one new commit holding what
    /// the tasks changed against a base that snapshotted uncommitted changes
    /// (`--include-uncommitted`): the snapshot stays out of the branch, and
    /// the user's uncommitted changes stay uncommitted.
    TasksChangesOnly { branch: String },
    /// A new branch at the result; the checkout is left alone.
    NewBranch { branch: String },
    /// The branch already holds the result.
    AlreadyApplied { branch: String },
}

/// What an apply would do, computed without changing anything.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ApplyPlan {
    pub run_id: String,
    /// The tasks whose results are brought in (leaves, or the one asked for).
    pub tasks: Vec<TaskId>,
    /// Those of them (or their dependencies) kept as partial, with their gaps.
    pub partial: Vec<(TaskId, Vec<String>)>,
    pub target: ApplyTarget,
    /// The commit the target ends at.
    pub commit: String,
    /// Commits brought in: `(hash, subject)`, oldest first.
    pub commits: Vec<(String, String)>,
    /// Paths the apply changes.
    pub files: Vec<String>,
    #[serde(skip)]
    repo: PathBuf,
}

/// The results a whole-run apply brings in: the tips of passed tasks that
/// no other passed task's tip contains (a dependent's result holds its
/// dependencies' work, since its base is theirs), one task per tip.
pub fn leaf_results(run: &RunState) -> Vec<(TaskId, String)> {
    let results: Vec<(TaskId, String)> = run
        .tasks
        .iter()
        .filter(|task| task.state.delivered())
        .filter_map(|task| Some((task.task_id.clone(), task.output.as_ref()?.tip().to_owned())))
        .collect();
    let Ok(repo) = repo_of(run) else {
        return results;
    };
    let git = Git::new(&repo);
    let mut leaves: Vec<(TaskId, String)> = Vec::new();
    for (task, tip) in &results {
        let contained = results
            .iter()
            .any(|(_, other)| other != tip && git.is_ancestor(tip, other));
        if !contained && !leaves.iter().any(|(_, kept)| kept == tip) {
            leaves.push((task.clone(), tip.clone()));
        }
    }
    leaves
}

fn repo_of(run: &RunState) -> std::result::Result<PathBuf, DeliveryError> {
    match &run.workspace {
        Some(Workspace::Worktrees { repo, .. }) => Ok(repo.clone()),
        Some(Workspace::InPlace { reason }) => Err(DeliveryError::InPlace {
            run: run.run_id.clone(),
            reason: reason.clone(),
        }),
        None => Err(DeliveryError::InPlace {
            run: run.run_id.clone(),
            reason: "run recorded by an older reprise".to_owned(),
        }),
    }
}

/// The results `apply` or `diff` of `run` (or of its `task`) combine.
fn chosen_results(
    run: &RunState,
    task: Option<&TaskId>,
) -> std::result::Result<Vec<(TaskId, String)>, DeliveryError> {
    match task {
        Some(id) => {
            let record = run.task(id).ok_or_else(|| DeliveryError::UnknownTask {
                run: run.run_id.clone(),
                task: id.to_string(),
            })?;
            match (&record.output, record.state.delivered()) {
                (Some(output), true) => Ok(vec![(id.clone(), output.tip().to_owned())]),
                _ => Err(DeliveryError::NoResult {
                    run: run.run_id.clone(),
                    task: id.to_string(),
                    state: record.state.as_str().to_owned(),
                }),
            }
        }
        None => Ok(leaf_results(run)),
    }
}

/// Merges `results` into one commit, in memory.
fn combine(git: &Git, results: &[(TaskId, String)], run_id: &str) -> Result<Folded> {
    let labelled: Vec<(String, String)> = results
        .iter()
        .map(|(task, commit)| (task.to_string(), commit.clone()))
        .collect();
    merge_commits(
        git,
        &labelled,
        &format!("reprise: results of run {run_id}, merged\n"),
    )
}

/// The run's base commit (`""` for a run recorded without one).
fn run_base(run: &RunState) -> String {
    run.workspace
        .as_ref()
        .map(Workspace::base_or_empty)
        .unwrap_or_default()
}

/// Works out what `reprise apply` would do. Changes nothing.
pub fn plan_apply(
    run: &RunState,
    task: Option<&TaskId>,
    new_branch: Option<&str>,
) -> std::result::Result<ApplyPlan, DeliveryError> {
    if run.finished_at.is_none() {
        return Err(DeliveryError::Unfinished {
            run: run.run_id.clone(),
        });
    }
    let repo = repo_of(run)?;
    let git = Git::new(&repo);
    let results = chosen_results(run, task)?;
    let base = run_base(run);
    let results: Vec<_> = results
        .into_iter()
        .filter(|(_, tip)| tip != &base)
        .collect();
    let combined = combined_results(&git, &results, &run.run_id)?;
    let tasks = results.iter().map(|(task, _)| task.clone()).collect();
    let partial = partial_results(run, &git, &results);
    let landing = match new_branch {
        Some(name) => onto_new_branch(&git, name, &base, combined)?,
        None => onto_current_branch(&git, run, &base, combined, &results)?,
    };
    Ok(ApplyPlan {
        run_id: run.run_id.clone(),
        tasks,
        partial,
        target: landing.target,
        commit: landing.commit,
        commits: landing.commits,
        files: landing.files,
        repo,
    })
}

/// Where an apply lands and what it brings: the part of an `ApplyPlan`
/// that depends on its target.
struct Landing {
    target: ApplyTarget,
    commit: String,
    commits: Vec<(String, String)>,
    files: Vec<String>,
}

/// An apply to a new branch at the combined result.
fn onto_new_branch(
    git: &Git,
    name: &str,
    base: &str,
    combined: String,
) -> std::result::Result<Landing, DeliveryError> {
    check_new_branch(git, name)?;
    Ok(Landing {
        target: ApplyTarget::NewBranch {
            branch: name.to_owned(),
        },
        commits: commits_between(git, base, &combined)?,
        files: git.changed_files(base, &combined)?,
        commit: combined,
    })
}

/// An apply to the checked-out branch: only the tasks' changes over a
/// snapshot base, nothing when the branch holds the result already, else
/// a fast-forward or a merge commit that touches none of the user's
/// uncommitted files.
fn onto_current_branch(
    git: &Git,
    run: &RunState,
    base: &str,
    combined: String,
    results: &[(TaskId, String)],
) -> std::result::Result<Landing, DeliveryError> {
    let branch = git.current_branch().ok_or(DeliveryError::Detached)?;
    let short_branch = branch
        .strip_prefix("refs/heads/")
        .unwrap_or(&branch)
        .to_owned();
    let head = git.commit_of("HEAD")?;
    if let Some(Workspace::Worktrees {
        head: run_head,
        included: true,
        ..
    }) = &run.workspace
        && *run_head != base
    {
        let onto = Onto {
            git,
            branch: short_branch,
            head,
        };
        return apply_over_snapshot(&onto, base, &combined, &run.run_id, results);
    }
    if git.is_ancestor(&combined, &head) {
        return Ok(Landing {
            target: ApplyTarget::AlreadyApplied {
                branch: short_branch,
            },
            commit: head,
            commits: Vec::new(),
            files: Vec::new(),
        });
    }
    let (commit, fast_forward) = if git.is_ancestor(&head, &combined) {
        (combined, true)
    } else {
        (
            merge_onto(git, &head, &combined, &short_branch, &run.run_id)?,
            false,
        )
    };
    let files = git.changed_files(&head, &commit)?;
    refuse_dirty_overlap(git, &files)?;
    Ok(Landing {
        target: ApplyTarget::CurrentBranch {
            branch: short_branch,
            fast_forward,
        },
        commits: commits_between(git, &head, &commit)?,
        files,
        commit,
    })
}

/// The merge commit of the branch's `head` and the combined result; a
/// conflict refuses.
fn merge_onto(
    git: &Git,
    head: &str,
    combined: &str,
    branch: &str,
    run_id: &str,
) -> std::result::Result<String, DeliveryError> {
    match git.merge_trees(head, combined)? {
        Merged::Clean(tree) => Ok(git.commit_tree(
            &tree,
            &[head, combined],
            &format!("reprise: apply run {run_id}\n"),
        )?),
        Merged::Conflict(files) => Err(DeliveryError::BranchConflict {
            branch: branch.to_owned(),
            files: files.join(", "),
        }),
    }
}

/// Refuses an apply that changes a file the user has uncommitted changes in.
fn refuse_dirty_overlap(git: &Git, files: &[String]) -> std::result::Result<(), DeliveryError> {
    let dirty = git.dirty_files()?;
    let overlap: Vec<&str> = files
        .iter()
        .filter(|file| dirty.contains(file))
        .map(String::as_str)
        .collect();
    if overlap.is_empty() {
        return Ok(());
    }
    Err(DeliveryError::DirtyOverlap {
        files: overlap.join(", "),
    })
}

/// The chosen results folded into one commit; nothing to apply, or
/// results that conflict, refuse.
fn combined_results(
    git: &Git,
    results: &[(TaskId, String)],
    run_id: &str,
) -> std::result::Result<String, DeliveryError> {
    match combine(git, results, run_id)? {
        Folded::Nothing => Err(DeliveryError::Nothing {
            run: run_id.to_owned(),
        }),
        Folded::Conflict { labels, files } => Err(DeliveryError::ResultsConflict {
            tasks: labels.join(", "),
            files: files.join(", "),
        }),
        Folded::Commit(commit) => Ok(commit),
    }
}

/// The partial results the apply carries: they ride along with whatever
/// holds them, so say which, with their gaps.
fn partial_results(
    run: &RunState,
    git: &Git,
    results: &[(TaskId, String)],
) -> Vec<(TaskId, Vec<String>)> {
    run.tasks
        .iter()
        .filter(|task| task.state == TaskStatus::Partial)
        .filter(|task| {
            task.output.as_ref().is_some_and(|output| {
                results
                    .iter()
                    .any(|(_, tip)| git.is_ancestor(output.tip(), tip))
            })
        })
        .map(|task| (task.task_id.clone(), task.gaps.clone()))
        .collect()
}

/// A new branch's name must be valid and not taken.
fn check_new_branch(git: &Git, name: &str) -> std::result::Result<(), DeliveryError> {
    if !git.succeeds(&["check-ref-format", "--branch", name]) {
        return Err(DeliveryError::BadBranch {
            name: name.to_owned(),
        });
    }
    if git.ref_exists(&format!("refs/heads/{name}")) {
        return Err(DeliveryError::BranchExists {
            name: name.to_owned(),
        });
    }
    Ok(())
}

/// The checked-out branch an apply goes onto, and its commit.
struct Onto<'a> {
    git: &'a Git,
    branch: String,
    head: String,
}

/// Plans an apply of a run whose base is a snapshot of the user's
/// uncommitted and untracked files: only what the tasks changed against
/// that base goes onto the branch, as one commit on its head, so the
/// snapshot (the user's own work) never lands in a commit and stays
/// uncommitted in the working tree. Refused when a task changed a file the
/// user still has uncommitted changes in.
fn apply_over_snapshot(
    onto: &Onto<'_>,
    base: &str,
    combined: &str,
    run_id: &str,
    results: &[(TaskId, String)],
) -> std::result::Result<Landing, DeliveryError> {
    let Onto { git, branch, head } = onto;
    refuse_dirty_overlap(git, &git.changed_files(base, combined)?)?;
    let tree = match git.merge_trees_from(base, head, combined)? {
        Merged::Clean(tree) => tree,
        Merged::Conflict(files) => {
            return Err(DeliveryError::BranchConflict {
                branch: branch.clone(),
                files: files.join(", "),
            });
        }
    };
    let plan = |target, commit: String, commits, files| Landing {
        target,
        commit,
        commits,
        files,
    };
    if tree == git.tree_of(head)? {
        let target = ApplyTarget::AlreadyApplied {
            branch: branch.clone(),
        };
        return Ok(plan(target, head.clone(), Vec::new(), Vec::new()));
    }
    let mut message = format!(
        "reprise: apply run {run_id}\n\nWhat its tasks changed against the run's base, which held\nuncommitted changes that stay uncommitted:\n\n"
    );
    for (task, tip) in results {
        message.push_str(&format!("  {task} at {tip}\n"));
    }
    let commit = git.commit_tree(&tree, &[head], &message)?;
    let target = ApplyTarget::TasksChangesOnly {
        branch: branch.clone(),
    };
    Ok(plan(
        target,
        commit.clone(),
        commits_between(git, head, &commit)?,
        git.changed_files(head, &commit)?,
    ))
}

fn commits_between(git: &Git, from: &str, to: &str) -> Result<Vec<(String, String)>> {
    let out = git.run([
        "log",
        "--reverse",
        "--format=%H %s",
        &format!("{from}..{to}"),
    ])?;
    Ok(out
        .lines()
        .filter_map(|line| line.split_once(' '))
        .map(|(hash, subject)| (hash.to_owned(), subject.to_owned()))
        .collect())
}

/// Carries out an apply plan: creates the new branch, or fast-forwards the
/// checked-out branch to the plan's commit (`git merge --ff-only`, hooks off),
/// which updates only the files the result changes.
pub fn apply(plan: &ApplyPlan) -> Result<()> {
    let git = Git::new(&plan.repo);
    match &plan.target {
        ApplyTarget::AlreadyApplied { .. } => Ok(()),
        ApplyTarget::NewBranch { branch } => {
            git.run([
                "update-ref",
                "-m",
                "reprise apply",
                &format!("refs/heads/{branch}"),
                &plan.commit,
                "0000000000000000000000000000000000000000",
            ])?;
            Ok(())
        }
        ApplyTarget::CurrentBranch { .. } | ApplyTarget::TasksChangesOnly { .. } => {
            git.run(["merge", "--ff-only", "--quiet", "--no-stat", &plan.commit])?;
            Ok(())
        }
    }
}

/// What a task (or a whole run) changed against its base.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DiffReport {
    pub from: String,
    pub to: String,
    /// `(status letter, path)` as `git diff --name-status` gives them.
    pub files: Vec<(String, String)>,
    /// The patch.
    pub patch: String,
    /// For a task that ended without a result: the checkpoint of the tree
    /// its last attempt left (`to` is that checkpoint's tree), which
    /// `reprise checkpoint restore` puts back.
    pub failed_tree: Option<FailedTree>,
}

/// The tree a task's last attempt left, kept as a checkpoint when the task
/// ended without passing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FailedTree {
    /// The checkpoint's id (its shadow commit).
    pub checkpoint: String,
    /// How the task ended: `failed`, `blocked`, ...
    pub state: String,
    /// Files the checkpoint left out for their size: not in the diff.
    pub skipped: Vec<String>,
}

/// The diff of `task`'s result against its base (for a task that ended
/// without one, of the tree its last attempt left, kept as a checkpoint),
/// or of the run's combined leaf results against the run's base.
pub fn diff(
    state: &StateDir,
    run: &RunState,
    task: Option<&TaskId>,
) -> std::result::Result<DiffReport, DeliveryError> {
    let repo = repo_of(run)?;
    let git = Git::new(&repo);
    let (from, to) = match task {
        Some(id) => {
            let record = run.task(id).ok_or_else(|| DeliveryError::UnknownTask {
                run: run.run_id.clone(),
                task: id.to_string(),
            })?;
            let Some(output) = &record.output else {
                return match failed_tree_diff(state, run, id)? {
                    Some(report) => Ok(report),
                    None => Err(DeliveryError::NoResult {
                        run: run.run_id.clone(),
                        task: id.to_string(),
                        state: record.state.as_str().to_owned(),
                    }),
                };
            };
            (output.base.clone(), output.tip().to_owned())
        }
        None => {
            let base = run_base(run);
            match combine(&git, &leaf_results(run), &run.run_id)? {
                Folded::Nothing => (base.clone(), base),
                Folded::Commit(commit) => (base, commit),
                Folded::Conflict { labels, files } => {
                    return Err(DeliveryError::ResultsConflict {
                        tasks: labels.join(", "),
                        files: files.join(", "),
                    });
                }
            }
        }
    };
    let status = git
        .run(["diff", "--name-status", "--no-renames", &from, &to])
        .map_err(DeliveryError::from)?;
    let files = status
        .lines()
        .filter_map(|line| line.split_once('\t'))
        .map(|(status, path)| (status.to_owned(), path.to_owned()))
        .collect();
    let patch = git
        .run(["diff", "--no-renames", "--no-color", &from, &to])
        .map_err(DeliveryError::from)?;
    Ok(DiffReport {
        from,
        to,
        files,
        patch,
        failed_tree: None,
    })
}

/// The diff of the failed tree `task` left in `run` against the base its
/// worktree started from, when the task ended without passing and kept
/// one; `None` when there is none to show. Only a checkpoint the task's
/// journal recorded in this run counts.
fn failed_tree_diff(
    state: &StateDir,
    run: &RunState,
    task: &TaskId,
) -> std::result::Result<Option<DiffReport>, DeliveryError> {
    let Some(record) = run.task(task) else {
        return Ok(None);
    };
    let (Some(base), Some(plan)) = (record.base_commit.as_ref(), run.plan_id()) else {
        return Ok(None);
    };
    if record.state.delivered() {
        return Ok(None);
    }
    let Some(store) = crate::checkpoints::task_snapshots(state, run, task)? else {
        return Ok(None);
    };
    let Some(checkpoint) = store
        .list()
        .map_err(EngineError::from)?
        .into_iter()
        .rev()
        .find(|checkpoint| checkpoint.manifest.label == crate::checkpoints::FAILED_TREE_LABEL)
    else {
        return Ok(None);
    };
    let key = reprise_core::TaskKey::new(plan, task.clone());
    let recorded = crate::checkpoint_binding::recorded_checkpoints(state, &key)?;
    let unbound = match crate::checkpoint_binding::bind(&run.run_id, &checkpoint, &recorded) {
        Err(why) => Some(why),
        Ok(()) if !crate::checkpoint_binding::object_intact(&store, &checkpoint)? => {
            Some(crate::checkpoint_binding::Unbound::ObjectReplaced)
        }
        Ok(()) => None,
    };
    if let Some(why) = unbound {
        return Err(DeliveryError::FailedTreeUnbound {
            run: run.run_id.clone(),
            task: key.to_string(),
            checkpoint: checkpoint.id,
            why: why.explain(),
        });
    }
    let (files, patch) = store
        .diff_from(base, &checkpoint)
        .map_err(EngineError::from)?;
    Ok(Some(DiffReport {
        from: base.clone(),
        to: checkpoint.tree.clone(),
        files,
        patch,
        failed_tree: Some(FailedTree {
            checkpoint: checkpoint.id.clone(),
            state: record.state.as_str().to_owned(),
            skipped: checkpoint
                .manifest
                .skipped
                .iter()
                .map(|(path, _)| path.clone())
                .collect(),
        }),
    }))
}

/// Which runs `clean` takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CleanScope {
    Run(String),
    Finished,
    All,
}

/// One thing `clean` removes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum CleanItem {
    Worktree {
        run_id: String,
        path: PathBuf,
        bytes: u64,
    },
    Branch {
        run_id: String,
        name: String,
    },
    /// The run's file checkpoints (its shadow stores).
    Checkpoints {
        run_id: String,
        path: PathBuf,
        bytes: u64,
    },
}

/// What `clean` would remove, the runs it leaves because they are live, and
/// the result branches it keeps because nothing else holds their commits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct CleanPlan {
    pub items: Vec<CleanItem>,
    pub skipped_live: Vec<String>,
    /// Runs a stop cancelled, left for `run --continue` (their worktrees
    /// hold the cancelled tasks' work) unless named or `--all`.
    pub skipped_cancelled: Vec<String>,
    /// Result branches whose commits no other local branch holds (never
    /// applied): deleting them would leave those commits unreachable, so
    /// they stay unless forced.
    pub kept_branches: Vec<KeptBranch>,
}

/// A result branch `clean --branches` keeps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeptBranch {
    pub run_id: String,
    pub name: String,
}

impl CleanPlan {
    pub fn bytes(&self) -> u64 {
        self.items
            .iter()
            .map(|item| match item {
                CleanItem::Worktree { bytes, .. } | CleanItem::Checkpoints { bytes, .. } => *bytes,
                CleanItem::Branch { .. } => 0,
            })
            .sum()
    }
}

/// Works out what `clean` would remove. Changes nothing. A run with a live
/// process holding its tasks is never cleaned. A result branch goes only
/// when a local branch it does not delete holds its commit, or `force`.
pub fn plan_clean(
    state: &StateDir,
    project: &Path,
    scope: &CleanScope,
    branches: bool,
    force: bool,
) -> Result<CleanPlan> {
    let mut plan = CleanPlan::default();
    let runs = runs_in_scope(state, scope, &mut plan)?;
    let git = Git::new(project);
    let in_git = git.has_commit();
    for run in runs {
        if held_by_live_run(state, &run) {
            plan.skipped_live.push(run.run_id.clone());
            continue;
        }
        tree_items(state, &run, &mut plan);
        if branches && in_git {
            branch_items(&git, &run, &mut plan)?;
        }
    }
    if !force {
        keep_unheld_branches(&git, &mut plan)?;
    }
    Ok(plan)
}

/// The runs `scope` names; a cancelled run is left out of `finished`
/// (noted in `plan`: `run --continue` takes it up).
fn runs_in_scope(
    state: &StateDir,
    scope: &CleanScope,
    plan: &mut CleanPlan,
) -> Result<Vec<RunState>> {
    let mut runs = Vec::new();
    match scope {
        CleanScope::Run(id) => runs.push(crate::state::load_run(state, id)?),
        CleanScope::Finished | CleanScope::All => {
            for id in run_ids(state)? {
                let run = crate::state::load_run(state, &id)?;
                if *scope == CleanScope::Finished && run.cancelled() {
                    plan.skipped_cancelled.push(run.run_id.clone());
                } else if *scope == CleanScope::All || run.finished_at.is_some() {
                    runs.push(run);
                }
            }
        }
    }
    Ok(runs)
}

/// Whether a live process of the run still holds one of its tasks.
fn held_by_live_run(state: &StateDir, run: &RunState) -> bool {
    run.plan_id().is_some_and(|plan| {
        run.tasks.iter().any(|task| {
            task_holder(
                state,
                &reprise_core::TaskKey::new(plan.clone(), task.task_id.clone()),
            )
            .is_some_and(|holder| holder.run_id == run.run_id)
        })
    })
}

/// The run's worktrees and checkpoint stores, but a parked task's: its
/// snapshot is its files until its resume.
fn tree_items(state: &StateDir, run: &RunState, plan: &mut CleanPlan) {
    let parked: Vec<std::ffi::OsString> = run
        .tasks
        .iter()
        .filter(|task| task.state == TaskStatus::Suspended)
        .map(|task| task.task_id.as_str().into())
        .collect();
    let unparked = |path: &PathBuf| {
        path.file_name()
            .is_none_or(|name| !parked.iter().any(|task| task == name))
    };
    for path in children(&state.worktrees_dir().join(&run.run_id))
        .into_iter()
        .filter(unparked)
    {
        plan.items.push(CleanItem::Worktree {
            run_id: run.run_id.clone(),
            bytes: tree_bytes(&path),
            path,
        });
    }
    let snapshots = state.snapshots_dir().join(&run.run_id);
    let snapshots: Vec<PathBuf> = if parked.is_empty() {
        Some(snapshots)
            .filter(|dir| dir.is_dir())
            .into_iter()
            .collect()
    } else {
        children(&snapshots).into_iter().filter(unparked).collect()
    };
    for path in snapshots {
        plan.items.push(CleanItem::Checkpoints {
            run_id: run.run_id.clone(),
            bytes: tree_bytes(&path),
            path,
        });
    }
}

/// The run's result branches (`reprise/<run>/...`).
fn branch_items(git: &Git, run: &RunState, plan: &mut CleanPlan) -> Result<()> {
    let prefix = format!("refs/heads/reprise/{}/", run.run_id);
    let refs = git.run(["for-each-ref", "--format=%(refname)", &prefix])?;
    for name in refs.lines().filter(|line| !line.is_empty()) {
        plan.items.push(CleanItem::Branch {
            run_id: run.run_id.clone(),
            name: name.strip_prefix("refs/heads/").unwrap_or(name).to_owned(),
        });
    }
    Ok(())
}

/// Moves out of `plan` each result branch whose commit no local branch
/// outside the plan holds: deleted, its commits would be unreachable.
fn keep_unheld_branches(git: &Git, plan: &mut CleanPlan) -> Result<()> {
    let deleted: Vec<String> = plan
        .items
        .iter()
        .filter_map(|item| match item {
            CleanItem::Branch { name, .. } => Some(format!("refs/heads/{name}")),
            _ => None,
        })
        .collect();
    let mut items = Vec::with_capacity(plan.items.len());
    for item in std::mem::take(&mut plan.items) {
        let CleanItem::Branch { run_id, name } = &item else {
            items.push(item);
            continue;
        };
        let holders = git.run([
            "for-each-ref",
            "--format=%(refname)",
            &format!("--contains=refs/heads/{name}"),
            "refs/heads/",
        ])?;
        let held = holders
            .lines()
            .any(|holder| !holder.is_empty() && !deleted.iter().any(|gone| gone == holder));
        if held {
            items.push(item);
        } else {
            plan.kept_branches.push(KeptBranch {
                run_id: run_id.clone(),
                name: name.clone(),
            });
        }
    }
    plan.items = items;
    Ok(())
}

/// Removes what `plan` lists: each worktree through git (so its admin entry
/// goes too; a directory git no longer knows is removed as a directory),
/// each run's empty worktrees directory, its file checkpoints, and the
/// branches asked for.
pub fn clean(state: &StateDir, project: &Path, plan: &CleanPlan) -> Result<()> {
    let git = Git::new(project);
    let in_git = git.has_commit();
    let _lock = reprise_store::locks::worktree_lock(state)?;
    for item in &plan.items {
        match item {
            CleanItem::Worktree { path, run_id, .. } => {
                if in_git {
                    crate::sandbox::unregister_worktree(state, project, path)?;
                }
                if std::fs::symlink_metadata(path).is_ok() {
                    std::fs::remove_dir_all(path).map_err(|source| {
                        reprise_store::StoreError::Io {
                            path: path.clone(),
                            source,
                        }
                    })?;
                }
                let _ = std::fs::remove_dir(state.worktrees_dir().join(run_id));
            }
            CleanItem::Branch { name, .. } => {
                git.run(["update-ref", "-d", &format!("refs/heads/{name}")])?;
            }
            CleanItem::Checkpoints { path, run_id, .. } => {
                std::fs::remove_dir_all(path).map_err(|source| reprise_store::StoreError::Io {
                    path: path.clone(),
                    source,
                })?;
                let _ = std::fs::remove_dir(state.snapshots_dir().join(run_id));
            }
        }
    }
    if in_git {
        let _ = git.run(["worktree", "prune"]);
    }
    Ok(())
}

/// The entries of directory `dir`, sorted; none when it cannot be read.
fn children(dir: &Path) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|entry| entry.ok())
                .map(|entry| entry.path())
                .collect()
        })
        .unwrap_or_default();
    paths.sort();
    paths
}

/// Bytes of the files under `path` (not following symlinks).
fn tree_bytes(path: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    if !meta.is_dir() {
        return meta.len();
    }
    std::fs::read_dir(path)
        .map(|entries| {
            entries
                .filter_map(|entry| entry.ok())
                .map(|entry| tree_bytes(&entry.path()))
                .sum()
        })
        .unwrap_or(0)
}
