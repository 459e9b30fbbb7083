//! A task's file checkpoints in the run: one before every attempt of a task
//! that may write, rollback before a retry that should start from the files
//! as they were, and the failed tree kept aside when a task ends without
//! passing while its tree goes back to its base.
//!
//! Every checkpoint is a `checkpoint.taken` journal row written before the
//! agent starts; every rollback is a `checkpoint.restored` journal row with
//! the workspace hash after it, and a `checkpoint.restored` audit row binding
//! that journal row.

use std::path::{Path, PathBuf};

use reprise_core::TaskKey;
use reprise_core::digest::Digest;
use reprise_core::plan::Task;
use reprise_core::rows::{
    AttemptContext, CheckpointRestored, CheckpointTaken, DependencyState, Kind, SkippedFile,
};
use reprise_store::audit::AuditLog;
use reprise_store::journal::Journal;
use reprise_store::snapshot::{Checkpoint, SnapshotError, SnapshotStore};
use reprise_store::state::{StateDir, now_rfc3339};
use serde::{Deserialize, Serialize};

use crate::error::{EngineError, Result};

/// Journal row kind of a checkpoint taken.
pub const TAKEN_KIND: &str = Kind::CheckpointTaken.as_str();
/// Journal and audit row kind of a rollback.
pub const RESTORED_KIND: &str = Kind::CheckpointRestored.as_str();
/// The label of the checkpoint that keeps the tree a task's last attempt
/// left when the task ends without passing.
pub const FAILED_TREE_LABEL: &str = "failed tree";

impl From<SnapshotError> for EngineError {
    fn from(err: SnapshotError) -> Self {
        EngineError::Checkpoint(err.to_string())
    }
}

/// The tree a task's checkpoints cover: the whole worktree (or project),
/// even when the task works in a subdirectory of it. A worktree's top is
/// known from its path (`worktrees/<run>/<task>`), never asked of the git
/// the agent could have re-pointed; a project's is the repository's top.
pub(crate) fn tree_of(state: &StateDir, cwd: &Path) -> PathBuf {
    let worktrees = state.worktrees_dir();
    if let Ok(inside) = cwd.strip_prefix(&worktrees) {
        let top: PathBuf = inside.components().take(2).collect();
        if top.components().count() == 2 {
            return worktrees.join(top);
        }
    }
    // In place: the top of the repository the directory is in, the
    // nearest directory up that holds a `.git`, as git looks for it.
    cwd.ancestors()
        .find(|dir| dir.join(".git").exists())
        .unwrap_or(cwd)
        .to_path_buf()
}

/// The shadow store of `task` in `run_id`, opened only to send or take its
/// checkpoints through a fleet's remote: its tree (a worktree that may not
/// exist on this host) is not touched, so git runs beside the store.
pub(crate) fn store_for_transfer(
    state: &StateDir,
    run_id: &str,
    task: &Task,
    repo: Option<&Path>,
) -> Result<SnapshotStore> {
    let shadow = state.snapshot_dir(run_id, &task.id);
    let beside = shadow.parent().unwrap_or(&shadow).to_path_buf();
    std::fs::create_dir_all(&beside).map_err(|source| reprise_store::StoreError::Io {
        path: beside.clone(),
        source,
    })?;
    Ok(SnapshotStore::open(
        &shadow,
        &beside,
        repo,
        task.checkpoint_max_file_bytes,
    )?)
}

/// Opens the shadow store of `task`'s tree in `run_id`, or `None` for a
/// read-only task.
pub(crate) fn open_store(
    state: &StateDir,
    run_id: &str,
    task: &Task,
    cwd: &Path,
    repo: Option<&Path>,
) -> Result<Option<SnapshotStore>> {
    if task.read_only {
        return Ok(None);
    }
    let tree = tree_of(state, cwd);
    let store = SnapshotStore::open(
        &state.snapshot_dir(run_id, &task.id),
        &tree,
        repo,
        task.checkpoint_max_file_bytes,
    )?;
    // The task's lock is this run's: a git lock in its store is a killed
    // process's (a run cut by kill -9 mid-checkpoint).
    store.clear_stale_lock()?;
    Ok(Some(store))
}

/// The shadow store of a task of a recorded run, for `reprise checkpoint`:
/// `None` when the task took no checkpoint in that run.
pub fn task_snapshots(
    state: &StateDir,
    run: &crate::state::RunState,
    task: &reprise_core::TaskId,
) -> Result<Option<SnapshotStore>> {
    let dir = state.snapshot_dir(&run.run_id, task);
    let Some(cwd) = run.task(task).and_then(|record| record.cwd.clone()) else {
        return Ok(None);
    };
    if !dir.join("HEAD").is_file() {
        return Ok(None);
    }
    Ok(Some(SnapshotStore::open(
        &dir,
        &tree_of(state, &cwd),
        None,
        u64::MAX,
    )?))
}

/// Takes a checkpoint and records it (`checkpoint.taken`).
pub(crate) fn take(
    store: &SnapshotStore,
    journal: &mut Journal,
    run_id: &str,
    attempt: u32,
    label: &str,
    workspace_hash: Digest,
) -> Result<Checkpoint> {
    take_with(store, journal, run_id, attempt, label, workspace_hash, None)
}

/// As `take`, with `held` (an object) added to the row: what the attempt
/// after it runs with and the state of its dependencies (see `Executor`).
pub(crate) fn take_with(
    store: &SnapshotStore,
    journal: &mut Journal,
    run_id: &str,
    attempt: u32,
    label: &str,
    workspace_hash: Digest,
    held: Option<&serde_json::Value>,
) -> Result<Checkpoint> {
    let checkpoint = store.take(label)?;
    record(
        journal,
        (run_id, attempt, label),
        &checkpoint,
        workspace_hash,
        false,
        held,
    )?;
    Ok(checkpoint)
}

/// Records `checkpoint`, already in the store, as the one taken before
/// `attempt`: the tree was just restored to it and hashed, so taking it
/// again would store the same snapshot. The row says `reused`.
pub(crate) fn reuse(
    journal: &mut Journal,
    run_id: &str,
    attempt: u32,
    label: &str,
    checkpoint: &Checkpoint,
    workspace_hash: Digest,
    held: Option<&serde_json::Value>,
) -> Result<()> {
    record(
        journal,
        (run_id, attempt, label),
        checkpoint,
        workspace_hash,
        true,
        held,
    )
}

fn record(
    journal: &mut Journal,
    (run_id, attempt, label): (&str, u32, &str),
    checkpoint: &Checkpoint,
    workspace_hash: Digest,
    reused: bool,
    held: Option<&serde_json::Value>,
) -> Result<()> {
    let held: Held = match held {
        Some(held) => serde_json::from_value(held.clone()).map_err(|err| {
            EngineError::Checkpoint(format!("what an attempt runs with does not record: {err}"))
        })?,
        None => Held::default(),
    };
    let body = CheckpointTaken {
        run_id: run_id.to_owned(),
        attempt,
        label: label.to_owned(),
        checkpoint: checkpoint.id.clone(),
        tree: checkpoint.tree.clone(),
        files: checkpoint.manifest.files,
        bytes: checkpoint.manifest.bytes,
        skipped: Some(
            checkpoint
                .manifest
                .skipped
                .iter()
                .map(|(path, bytes)| SkippedFile {
                    path: path.clone(),
                    bytes: *bytes,
                })
                .collect(),
        ),
        workspace_hash,
        reused,
        context: held.context,
        dependencies: held.dependencies,
    };
    journal.append_row(&now_rfc3339(), &body)?;
    Ok(())
}

/// What a checkpoint before an attempt holds besides the files (see
/// `Executor::held`).
#[derive(Default, Deserialize)]
struct Held {
    context: Option<AttemptContext>,
    dependencies: Option<Vec<DependencyState>>,
}

/// What a rollback left: the workspace hash after it, and whether it is the
/// one recorded when the checkpoint was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Restored {
    pub workspace_hash: Digest,
    pub matches: bool,
}

/// Restores `checkpoint` and records it in the journal and the audit chain
/// (`None` on a fleet worker: the coordinator binds the shipped row).
/// `hash_now` hashes the workspace after the restore; `expected` is the hash
/// recorded with the checkpoint.
#[expect(clippy::too_many_arguments)]
pub fn restore(
    store: &SnapshotStore,
    checkpoint: &Checkpoint,
    journal: &mut Journal,
    audit: Option<&mut AuditLog>,
    key: &TaskKey,
    run_id: &str,
    reason: &str,
    expected: Option<Digest>,
    hash_now: impl FnOnce() -> Result<Digest>,
) -> Result<Restored> {
    if !crate::checkpoint_binding::object_intact(store, checkpoint)? {
        return Err(EngineError::Checkpoint(format!(
            "checkpoint {} of {key} is not the one recorded (its commit object does not hash to its id); nothing was restored",
            checkpoint.id
        )));
    }
    store.restore(checkpoint)?;
    let workspace_hash = hash_now()?;
    let matches = expected.is_none_or(|expected| expected == workspace_hash);
    let body = CheckpointRestored {
        run_id: run_id.to_owned(),
        checkpoint: checkpoint.id.clone(),
        reason: reason.to_owned(),
        workspace_hash,
        matches_checkpoint: matches,
        not_restored: checkpoint
            .manifest
            .skipped
            .iter()
            .map(|(path, _)| path.clone())
            .collect(),
    };
    let head = journal.append_row(&now_rfc3339(), &body)?;
    if let Some(audit) = audit {
        crate::evidence::bind_restored(audit, key, &body, head)?;
    }
    Ok(Restored {
        workspace_hash,
        matches,
    })
}

/// The checkpoints taken before the attempts of `key` in `run_id`, as its
/// journal recorded them: each attempt's checkpoint and workspace hash,
/// with what the attempt ran with and its dependencies' state (`context`,
/// `dependencies`; absent from checkpoints recorded before they were).
pub fn held_checkpoints(state: &StateDir, key: &TaskKey, run_id: &str) -> Vec<serde_json::Value> {
    crate::resume::rows_of_run(state, key, run_id)
        .into_iter()
        .filter(|row| {
            row.kind == TAKEN_KIND
                && row
                    .body
                    .get("label")
                    .and_then(serde_json::Value::as_str)
                    .is_some_and(|label| label.starts_with("before attempt"))
        })
        .map(|row| {
            let field = |name: &str| row.body.get(name).cloned().unwrap_or_default();
            serde_json::to_value(HeldCheckpoint {
                seq: row.seq,
                attempt: field("attempt"),
                checkpoint: field("checkpoint"),
                workspace_hash: field("workspace_hash"),
                context: field("context"),
                dependencies: field("dependencies"),
            })
            .expect("a checkpoint's fields serialise")
        })
        .collect()
}

/// One checkpoint before an attempt, as `held_checkpoints` lists it: the
/// row's members as they were recorded (`null` where a row has none).
#[derive(Serialize)]
struct HeldCheckpoint {
    seq: u64,
    attempt: serde_json::Value,
    checkpoint: serde_json::Value,
    workspace_hash: serde_json::Value,
    context: serde_json::Value,
    dependencies: serde_json::Value,
}
