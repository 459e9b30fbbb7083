//! Where a task's agent works, and what becomes of its work.
//!
//! In a git repository with a commit, every task of a run gets a fresh
//! worktree at `.reprise/worktrees/<run>/<task>`, detached at the task's
//! base: the run's base commit (the project's HEAD when the run started, or
//! a snapshot of the user's uncommitted work with `--include-uncommitted`)
//! for a task with no dependencies, else its dependencies' result commits
//! (one: that commit; several: a merge reprise makes in memory). When a task
//! passes, its tree is committed on `reprise/<run>/<task>`, a branch name in
//! reprise's own namespace that no earlier run and no user branch can hold.
//!
//! None of this touches the user's index, refs (other than creating a
//! reprise branch), stash or config: trees are written through a temporary
//! index, merges happen in memory (`git merge-tree`), and every git command
//! runs with hooks off (see `git.rs`). Outside git, or with `sandbox: none`,
//! a task runs in the project directory itself and nothing is committed.

use std::path::{Path, PathBuf};

use reprise_core::plan::{Sandbox, Task};
use reprise_core::{PlanId, TaskId};
use reprise_store::locks::worktree_lock;
use reprise_store::state::StateDir;
use serde::{Deserialize, Serialize};

use crate::error::{EngineError, Result};
use reprise_store::git::{Git, Merged};

/// Where a run's tasks work, decided once when the run starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Workspace {
    /// Each task in its own worktree of the repository at `repo`.
    Worktrees {
        /// The top of the user's working tree.
        repo: PathBuf,
        /// The project's HEAD when the run started.
        head: String,
        /// What tasks without dependencies start from: `head`, or a snapshot
        /// of the working tree on top of it (`--include-uncommitted`).
        base: String,
        /// Paths with uncommitted or untracked changes when the run started.
        uncommitted: u64,
        /// Whether those changes are in `base`.
        included: bool,
        /// Where the project is inside the repository (empty at its top):
        /// tasks work in the same place inside their worktrees.
        #[serde(default)]
        subdir: PathBuf,
    },
    /// Every task in the project directory.
    InPlace { reason: String },
}

impl Workspace {
    /// Looks at `project` once, at run start. With `include_uncommitted`,
    /// the user's working tree is snapshotted into a commit that no ref,
    /// index or stash of theirs ever sees.
    pub fn detect(state: &StateDir, project: &Path, include_uncommitted: bool) -> Result<Self> {
        let git = Git::new(project);
        if !git.succeeds(&["rev-parse", "--is-inside-work-tree"]) {
            return Ok(Self::InPlace {
                reason: "not a git repository".to_owned(),
            });
        }
        if !git.has_commit() {
            return Ok(Self::InPlace {
                reason: "the repository has no commit yet".to_owned(),
            });
        }
        let repo = git.toplevel()?;
        let subdir = project
            .canonicalize()
            .ok()
            .and_then(|project| {
                let top = repo.canonicalize().ok()?;
                project.strip_prefix(&top).ok().map(Path::to_path_buf)
            })
            .unwrap_or_default();
        let git = Git::new(&repo);
        let head = git.commit_of("HEAD")?;
        let dirty = git.dirty_files()?;
        let uncommitted = dirty.len() as u64;
        let base = if include_uncommitted && uncommitted > 0 {
            let scratch = state.scratch_dir()?;
            let tree = git.snapshot_tree(&head, &scratch)?;
            git.commit_tree(
                &tree,
                &[&head],
                "reprise: the working tree's uncommitted changes, as a run's base\n",
            )?
        } else {
            head.clone()
        };
        Ok(Self::Worktrees {
            repo,
            head,
            base,
            uncommitted,
            included: include_uncommitted && uncommitted > 0,
            subdir,
        })
    }

    /// The run's base commit, or `""` when tasks run in place.
    pub(crate) fn base_or_empty(&self) -> String {
        self.base().unwrap_or_default().to_owned()
    }

    /// The run's base commit, when tasks work in worktrees.
    pub fn base(&self) -> Option<&str> {
        match self {
            Self::Worktrees { base, .. } => Some(base),
            Self::InPlace { .. } => None,
        }
    }

    pub(crate) fn repo(&self) -> Option<&Path> {
        match self {
            Self::Worktrees { repo, .. } => Some(repo),
            Self::InPlace { .. } => None,
        }
    }

    /// Whether `task` gets a worktree in this run.
    pub(crate) fn isolates(&self, task: &Task) -> bool {
        task.sandbox != Sandbox::None && self.repo().is_some()
    }
}

/// What a dependent task starts from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TaskBase {
    Ready(String),
    /// Two dependencies changed the same lines: these paths conflict.
    Conflict(Vec<String>),
}

/// The base of a task whose dependencies produced `inputs` (each a result
/// commit, or the dependency's base when it changed nothing), in plan order.
/// One input is the base itself; several are merged in memory.
pub(crate) fn dependent_base(
    workspace: &Workspace,
    task: &TaskId,
    inputs: &[String],
) -> Result<Option<TaskBase>> {
    let Some(repo) = workspace.repo() else {
        return Ok(None);
    };
    if inputs.is_empty() {
        return Ok(workspace
            .base()
            .map(|base| TaskBase::Ready(base.to_owned())));
    }
    let labelled: Vec<(String, String)> = inputs
        .iter()
        .map(|commit| (String::new(), commit.clone()))
        .collect();
    let message = format!("reprise: the dependencies of {task}, merged\n");
    Ok(Some(
        match merge_commits(&Git::new(repo), &labelled, &message)? {
            Folded::Commit(commit) => TaskBase::Ready(commit),
            Folded::Conflict { files, .. } => TaskBase::Conflict(files),
            Folded::Nothing => unreachable!("inputs is not empty"),
        },
    ))
}

/// What folding several commits into one gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Folded {
    Nothing,
    Commit(String),
    /// The labels of the commits merged so far (the last one conflicting),
    /// and the conflicting paths.
    Conflict {
        labels: Vec<String>,
        files: Vec<String>,
    },
}

/// Folds `commits` (each with a label for messages) into one commit, in
/// order: a commit already contained is skipped, one that contains the fold
/// so far replaces it, any other is merged in memory (`git merge-tree`) into
/// a commit with both as parents. Nothing touches a working tree or index.
pub(crate) fn merge_commits(
    git: &Git,
    commits: &[(String, String)],
    message: &str,
) -> Result<Folded> {
    let Some(((first_label, first), rest)) = commits.split_first() else {
        return Ok(Folded::Nothing);
    };
    let mut merged = first.clone();
    let mut labels = vec![first_label.clone()];
    for (label, next) in rest {
        labels.push(label.clone());
        if git.is_ancestor(next, &merged) {
            continue;
        }
        if git.is_ancestor(&merged, next) {
            merged = next.clone();
            continue;
        }
        match git.merge_trees(&merged, next)? {
            Merged::Clean(tree) => merged = git.commit_tree(&tree, &[&merged, next], message)?,
            Merged::Conflict(files) => return Ok(Folded::Conflict { labels, files }),
        }
    }
    Ok(Folded::Commit(merged))
}

/// Forgets worktrees whose directories are gone (`rm -rf .reprise`, a
/// reclaim a crash cut short), once per run, under the worktree lock: git's
/// `worktree add` and `remove` read every registered entry, so stale ones
/// would cost every task of every later run.
pub(crate) fn prune_stale(state: &StateDir, workspace: &Workspace) -> Result<()> {
    let Some(repo) = workspace.repo() else {
        return Ok(());
    };
    let _lock = worktree_lock(state)?;
    Git::new(repo).run(["worktree", "prune"])?;
    Ok(())
}

/// Where a task runs, and whether its tree was checked out just now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Prepared {
    pub(crate) cwd: PathBuf,
    /// A fresh worktree: its files are exactly its base, its index fresh.
    pub(crate) fresh: bool,
}

/// The directory `task` runs in: a fresh worktree at `base`, or the project.
/// Worktree creation holds the state directory's worktree lock, so parallel
/// seats and concurrent runs never race in git's admin directory.
pub(crate) fn prepare(
    state: &StateDir,
    workspace: &Workspace,
    project: &Path,
    run_id: &str,
    task: &Task,
    base: Option<&str>,
) -> Result<Prepared> {
    let in_place = Prepared {
        cwd: project.to_path_buf(),
        fresh: false,
    };
    let (Some(repo), Some(base)) = (workspace.repo(), base) else {
        return Ok(in_place);
    };
    if !workspace.isolates(task) {
        return Ok(in_place);
    }
    let dir = state.worktree_dir(run_id, &task.id);
    let subdir = match workspace {
        Workspace::Worktrees { subdir, .. } => subdir.clone(),
        Workspace::InPlace { .. } => PathBuf::new(),
    };
    if std::fs::symlink_metadata(dir.join(".git")).is_ok() {
        // The same run, come back to its task (its path is stable for the
        // run's life because the CLIs key resume by cwd).
        return Ok(Prepared {
            cwd: dir.join(subdir),
            fresh: false,
        });
    }
    let sandbox_error = |err: reprise_store::git::GitError| EngineError::Sandbox {
        task: task.id.to_string(),
        detail: err.detail,
    };
    let git = Git::new(repo);
    {
        // Only git's admin directory needs the lock: registering the
        // worktree. Checking its files out runs outside it, so six seats
        // populate six trees at once. The run's directory is made under it
        // too: a reclaim removes that directory, under the lock, when its
        // last worktree goes, and must not remove it between its making
        // and git's `add`.
        let _lock = worktree_lock(state)?;
        if let Some(parent) = dir.parent() {
            std::fs::create_dir_all(parent).map_err(|err| EngineError::Sandbox {
                task: task.id.to_string(),
                detail: format!("cannot create {}: {err}", parent.display()),
            })?;
        }
        let mut add = git.command();
        add.args(["worktree", "add", "--quiet", "--detach", "--no-checkout"])
            .arg(&dir)
            .arg(base);
        git.output(add).map_err(sandbox_error)?;
    }
    reprise_store::io::crash_point(task.id.as_str(), "worktree.added");
    // Its linkage recorded before any agent runs in it, and its files
    // checked out at the base.
    crate::linkage::Linkage::create(state, repo, &dir, base)?;
    reprise_store::io::crash_point(task.id.as_str(), "worktree.linked");
    let cwd = dir.join(&subdir);
    std::fs::create_dir_all(&cwd).map_err(|err| EngineError::Sandbox {
        task: task.id.to_string(),
        detail: format!("cannot create {}: {err}", cwd.display()),
    })?;
    Ok(Prepared { cwd, fresh: true })
}

/// Removes a finished task's worktree, once its result is on its branch
/// (or it changed nothing): its files, then git's registration of it, so
/// the registered worktrees stay as few as the tasks running. Nothing of
/// the result is lost: `diff` and `apply` read the result commit.
pub(crate) fn reclaim(
    state: &StateDir,
    workspace: &Workspace,
    run_id: &str,
    task: &TaskId,
) -> Result<()> {
    let Some(repo) = workspace.repo() else {
        return Ok(());
    };
    let dir = state.worktree_dir(run_id, task);
    if !dir.exists() {
        return Ok(());
    }
    remove_worktree(state, repo, &dir)?;
    // The run's directory goes with its last worktree, under the lock that
    // a new worktree of the run is made under.
    if let Some(parent) = dir.parent() {
        let _lock = worktree_lock(state)?;
        let _ = std::fs::remove_dir(parent);
    }
    Ok(())
}

/// Removes the worktree at `dir` of `repo`: its files first, outside the
/// worktree lock (seats remove and create trees at once), then, under the
/// lock, git's entry for it (`worktree remove` of a tree holding only its
/// `.git` link). A directory git no longer knows is removed as a directory.
pub(crate) fn remove_worktree(state: &StateDir, repo: &Path, dir: &Path) -> Result<()> {
    let removal_error = |err: std::io::Error| EngineError::Sandbox {
        task: dir.display().to_string(),
        detail: format!("cannot remove the worktree: {err}"),
    };
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_name() == ".git" {
                continue;
            }
            let path = entry.path();
            let removed = match entry.file_type() {
                Ok(kind) if kind.is_dir() => std::fs::remove_dir_all(&path),
                _ => std::fs::remove_file(&path),
            };
            removed.map_err(removal_error)?;
        }
    }
    let _lock = worktree_lock(state)?;
    unregister_worktree(state, repo, dir)
}

/// Unregisters the worktree at `dir` (its files removed but for `.git`)
/// through git, with the linkage reprise recorded for it (never what the
/// agent left in its `.git` file or admin directory); a directory git does
/// not know by that linkage is removed as a directory. The caller holds the
/// worktree lock.
pub(crate) fn unregister_worktree(state: &StateDir, repo: &Path, dir: &Path) -> Result<()> {
    let removed = match crate::linkage::Linkage::of(state, repo, dir)? {
        Some(linkage) => linkage.unregister(state)?,
        None => false,
    };
    crate::linkage::forget(state, dir);
    if !removed && std::fs::symlink_metadata(dir).is_ok() {
        std::fs::remove_dir_all(dir).map_err(|err| EngineError::Sandbox {
            task: dir.display().to_string(),
            detail: format!("cannot remove the worktree: {err}"),
        })?;
    }
    Ok(())
}

/// A task's committed result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskOutput {
    /// The commit the task's base was.
    pub base: String,
    /// The result commit; `None` when the task changed nothing.
    pub commit: Option<String>,
    /// `reprise/<run>/<task>`, when there is a commit.
    pub branch: Option<String>,
    /// Paths the result changes against its base.
    pub files_changed: u64,
}

impl TaskOutput {
    /// What a dependent builds on: the result, or the base it left as it was.
    pub fn tip(&self) -> &str {
        self.commit.as_deref().unwrap_or(&self.base)
    }
}

/// What a result commit says about where it came from, as git trailers.
pub(crate) struct Provenance<'a> {
    pub(crate) run_id: &'a str,
    pub(crate) plan: &'a PlanId,
    pub(crate) task: &'a TaskId,
    pub(crate) attempt: u32,
    pub(crate) journal_seq: u64,
    pub(crate) journal_hash: String,
}

/// The branch a task's result goes on.
pub fn result_branch(run_id: &str, task: &TaskId) -> String {
    format!("reprise/{run_id}/{task}")
}

/// The commit a crash left on the task's result branch: a branch that
/// exists although the task's journal recorded no result for the run
/// (checked by the caller), whose commit reprise made for this run and task
/// on `base` (its trailers and its one parent say so). `None` when there is
/// no branch; an error when a branch of that name holds anything else.
pub(crate) fn orphaned_result(
    workspace: &Workspace,
    run_id: &str,
    task: &TaskId,
    base: &str,
) -> Result<Option<String>> {
    let Some(repo) = workspace.repo() else {
        return Ok(None);
    };
    let git = Git::new(repo);
    let branch = result_branch(run_id, task);
    let full = format!("refs/heads/{branch}");
    if !git.ref_exists(&full) {
        return Ok(None);
    }
    let commit = git.commit_of(&full)?;
    let parents = git.run(["rev-list", "--parents", "-n", "1", &commit])?;
    let message = git.run(["log", "-1", "--format=%B", &commit])?;
    let trailer = |name: &str| {
        message
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .map(str::trim)
    };
    let ours = parents.split_whitespace().skip(1).eq([base])
        && trailer("Reprise-Run:") == Some(run_id)
        && trailer("Reprise-Task:") == Some(task.as_str());
    if !ours {
        return Err(EngineError::Sandbox {
            task: task.to_string(),
            detail: format!(
                "branch {branch} exists and is not a result reprise left for this run; nothing was committed (rename or delete the branch, then continue the run)"
            ),
        });
    }
    Ok(Some(commit))
}

/// Commits everything in `worktree` (tracked and untracked files, honouring
/// ignore rules) on top of `base`, on the task's branch. A tree equal to the
/// base's is recorded as no change and commits nothing. The branch must not
/// exist: it is created, never moved or reset, except when `orphan` names
/// the commit a crash left on it before the result was recorded (see
/// `orphaned_result`): that one, and only while the branch still holds it,
/// is replaced.
pub(crate) fn commit_result(
    state: &StateDir,
    workspace: &Workspace,
    worktree: &Path,
    base: &str,
    provenance: &Provenance<'_>,
    orphan: Option<&str>,
) -> Result<TaskOutput> {
    let repo = workspace
        .repo()
        .expect("results are committed only in worktrees");
    let git = Git::new(repo);
    // The task may work in a subdirectory; its result is the whole tree,
    // hashed by reprise's git with the user's repository as it recorded it,
    // from reprise's own copy of the index (see `linkage`).
    let top = state.worktree_dir(provenance.run_id, provenance.task);
    debug_assert!(worktree.starts_with(&top));
    let mut linkage = crate::linkage::Linkage::of(state, repo, &top)?.ok_or_else(|| {
        EngineError::Sandbox {
            task: provenance.task.to_string(),
            detail: format!(
                "{}: the worktree's git linkage was changed and reprise holds no record of it; nothing was committed",
                top.display()
            ),
        }
    })?;
    let scratch = state.scratch_dir()?;
    let stat_cache = linkage.stat_cache(state)?;
    let (tree, index) =
        linkage
            .repository()
            .snapshot_index_from(base, &scratch, Some(&stat_cache))?;
    if tree == git.tree_of(base)? {
        return Ok(TaskOutput {
            base: base.to_owned(),
            commit: None,
            branch: None,
            files_changed: 0,
        });
    }
    let message = format!(
        "reprise: {task} ({plan}, run {run})\n\n\
         Reprise-Run: {run}\n\
         Reprise-Plan: {plan}\n\
         Reprise-Task: {task}\n\
         Reprise-Attempt: {attempt}\n\
         Reprise-Journal-Head: {seq} {hash}\n",
        task = provenance.task,
        plan = provenance.plan,
        run = provenance.run_id,
        attempt = provenance.attempt,
        seq = provenance.journal_seq,
        hash = provenance.journal_hash,
    );
    let commit = git.commit_tree(&tree, &[base], &message)?;
    let branch = result_branch(provenance.run_id, provenance.task);
    let full = format!("refs/heads/{branch}");
    // The all-zero old value: create only, never move an existing branch
    // (but the crash's orphan, compared and swapped at once).
    git.run([
        "update-ref",
        "-m",
        "reprise: task result",
        &full,
        &commit,
        orphan.unwrap_or("0000000000000000000000000000000000000000"),
    ])
    .map_err(|err| EngineError::Sandbox {
        task: provenance.task.to_string(),
        detail: format!("cannot create branch {branch}: {err}"),
    })?;
    reprise_store::io::crash_point(provenance.task.as_str(), "result.branch");
    // Leave the worktree at its result, detached, with its own index
    // matching it: the index the tree was just committed from.
    linkage.advance(state, &commit, index.path())?;
    drop(index);
    let files_changed = git.changed_files(base, &commit)?.len() as u64;
    Ok(TaskOutput {
        base: base.to_owned(),
        commit: Some(commit),
        branch: Some(branch),
        files_changed,
    })
}

/// Makes each of `dirs` (with its missing parents) and `files` that does not
/// exist yet, private to the user: directories 0700, files 0600 holding
/// what a new one holds.
/// What exists is left exactly as it is. The first failure is returned with
/// its path.
pub(crate) fn make_private(
    dirs: &[PathBuf],
    files: &[(PathBuf, &str)],
) -> std::result::Result<(), (PathBuf, std::io::Error)> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    for dir in dirs {
        if !dir.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|err| (dir.clone(), err))?;
        }
    }
    for (file, initial) in files {
        if file.exists() {
            continue;
        }
        let created = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(file);
        match created {
            Ok(mut new) => new
                .write_all(initial.as_bytes())
                .map_err(|err| (file.clone(), err))?,
            // Made by someone else meanwhile: theirs stands.
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(err) => return Err((file.clone(), err)),
        }
    }
    Ok(())
}

/// The result a `task.result` row records, unless it records a failure.
pub(crate) fn result_output(body: &serde_json::Value) -> Option<crate::sandbox::TaskOutput> {
    if body.get("error").is_some() {
        return None;
    }
    Some(crate::sandbox::TaskOutput {
        base: body.get("base_commit")?.as_str()?.to_owned(),
        commit: body
            .get("commit")
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned),
        branch: body
            .get("branch")
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned),
        files_changed: body
            .get("files_changed")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0),
    })
}
