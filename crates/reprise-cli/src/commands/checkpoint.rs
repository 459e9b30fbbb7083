//! `reprise checkpoint list TASK` and `reprise checkpoint restore TASK ID`:
//! a task's file checkpoints in a run, and rolling its tree back to one.

use std::fmt::Write as _;

use reprise_core::rows::{CheckpointTaken, body_of};
use reprise_engine::{
    Restored, RunState, bind_checkpoint, load_run, object_intact, recorded_checkpoints,
    restore_checkpoint, task_snapshots,
};
use reprise_store::journal::Journal;
use reprise_store::key::load_key;
use reprise_store::locks::task_holder;
use reprise_store::snapshot::SnapshotStore;
use reprise_store::state::StateDir;
use reprise_store::workspace::hash_workspace_cached;
use serde_json::json;

use crate::commands::PlanArg;
use crate::commands::resolve::{latest_run_of, task_key};
use crate::error::CliError;
use crate::output::Outcome;
use crate::settings::Settings;

#[derive(Debug, clap::Subcommand)]
pub(crate) enum CheckpointCommand {
    /// List a task's file checkpoints in a run (default: the latest run of its plan).
    #[command(after_help = help!("\
  reprise checkpoint list add-greeting
  reprise checkpoint list quickstart/add-greeting --run R-01J..."))]
    List(CheckpointListArgs),
    /// Restore a task's tree to one of its checkpoints exactly (into a new
    /// directory when its worktree is gone, or with --to).
    #[command(after_help = help!("\
  reprise checkpoint restore add-greeting 1a2b3c4 --dry-run
  reprise checkpoint restore add-greeting 1a2b3c4
  reprise checkpoint restore add-greeting 1a2b3c4 --to ../greeting-at-1a2b3c4"))]
    Restore(RestoreArgs),
}

#[derive(Debug, clap::Args)]
pub(crate) struct CheckpointListArgs {
    /// The task (or PLAN/TASK).
    task: String,
    /// The run (default: the latest run of the task's plan).
    #[arg(long, value_name = "RUN")]
    run: Option<String>,
    #[command(flatten)]
    plan: PlanArg,
}

#[derive(Debug, clap::Args)]
pub(crate) struct RestoreArgs {
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
    /// Write the checkpoint into this new (or empty) directory instead of
    /// the task's tree, which stays as it is; the default once the task's
    /// worktree is gone is `.reprise/restored/<run>/<task>-<checkpoint>`.
    #[arg(long, value_name = "DIR")]
    to: Option<std::path::PathBuf>,
    #[command(flatten)]
    plan: PlanArg,
}

impl CheckpointCommand {
    pub(crate) fn run(self, settings: &Settings) -> Result<Outcome, CliError> {
        match self {
            Self::List(args) => list(
                &settings.with_plan(args.plan.name),
                &args.task,
                args.run.as_deref(),
            ),
            Self::Restore(args) => restore(
                &settings.with_plan(args.plan.name),
                &args.task,
                &args.checkpoint,
                args.run.as_deref(),
                (args.dry_run, args.to),
            ),
        }
    }
}

fn engine_error(err: reprise_engine::EngineError) -> CliError {
    CliError::usage(err.to_string())
}

/// The run, the task's key and its shadow store.
fn open(
    settings: &Settings,
    task: &str,
    run: Option<&str>,
) -> Result<(StateDir, RunState, reprise_core::TaskKey, SnapshotStore), CliError> {
    let state = settings.state()?;
    let key = task_key(settings, &state, task)?;
    let run = match run {
        Some(run) => load_run(&state, run).map_err(engine_error)?,
        None => latest_run_of(&state, Some(&key.plan))?,
    };
    let store = task_snapshots(&state, &run, &key.task)
        .map_err(engine_error)?
        .ok_or_else(|| {
            CliError::usage(format!(
                "task {key} took no file checkpoint in run {}; it may be read-only, or may not have started",
                run.run_id
            ))
        })?;
    Ok((state, run, key, store))
}

fn list(settings: &Settings, task: &str, run: Option<&str>) -> Result<Outcome, CliError> {
    let (state, run, key, store) = open(settings, task, run)?;
    let checkpoints = store
        .list()
        .map_err(|err| CliError::usage(err.to_string()))?;
    // Only what the task's journal recorded in this run is its checkpoint.
    let recorded = recorded_checkpoints(&state, &key).map_err(engine_error)?;
    let bindings: Vec<Result<(), reprise_engine::Unbound>> = checkpoints
        .iter()
        .map(|checkpoint| bind_checkpoint(&run.run_id, checkpoint, &recorded))
        .collect();
    let unbound = bindings.iter().filter(|binding| binding.is_err()).count();
    let mut text = format!(
        "checkpoints of {key} in run {} ({}):\n",
        run.run_id,
        checkpoints.len() - unbound
    );
    for (checkpoint, binding) in checkpoints.iter().zip(&bindings) {
        if let Err(why) = binding {
            let _ = writeln!(
                text,
                "  {}  UNBOUND: {}; it cannot be restored",
                &checkpoint.id[..12.min(checkpoint.id.len())],
                why.explain()
            );
            continue;
        }
        let manifest = &checkpoint.manifest;
        let _ = write!(
            text,
            "  {}  {:<18} {}, {}",
            &checkpoint.id[..12],
            manifest.label,
            crate::output::count(manifest.files, "file"),
            crate::output::count(manifest.bytes, "byte")
        );
        if !manifest.skipped.is_empty() {
            let _ = write!(text, ", {} skipped by size", manifest.skipped.len());
        }
        text.push('\n');
    }
    if unbound > 0 {
        let _ = writeln!(
            text,
            "{} in the store that the journal of {key} did not record in this run: planted or copied in; `reprise journal verify {key}` reports them, `reprise clean` removes the store",
            crate::output::count(unbound as u64, "checkpoint")
        );
    }
    Ok(Outcome {
        exit: None,
        json: json!({
            "plan": key.plan.as_str(),
            "task_id": key.task.as_str(),
            "run_id": run.run_id,
            "checkpoints": checkpoints.iter().zip(&bindings).map(|(checkpoint, binding)| json!({
                "id": checkpoint.id,
                "tree": checkpoint.tree,
                "label": checkpoint.manifest.label,
                "files": checkpoint.manifest.files,
                "bytes": checkpoint.manifest.bytes,
                "skipped": checkpoint.manifest.skipped,
                "bound": binding.is_ok(),
                "unbound": binding.as_ref().err(),
            })).collect::<Vec<_>>(),
        }),
        text,
        ok: unbound == 0,
    })
}

/// Refuses a restore to a checkpoint its journal did not record in this
/// run (or whose commit is no longer the recorded one), and a restore of a
/// task a live run holds.
fn refuse_unrestorable(
    state: &StateDir,
    run: &reprise_engine::RunState,
    key: &reprise_core::TaskKey,
    store: &SnapshotStore,
    checkpoint: &reprise_store::snapshot::Checkpoint,
) -> Result<(), CliError> {
    // Restored only when the journal recorded it in this run, and its
    // commit is still the one recorded.
    let recorded = recorded_checkpoints(state, key).map_err(engine_error)?;
    let unbound = match bind_checkpoint(&run.run_id, checkpoint, &recorded) {
        Err(why) => Some(why),
        Ok(()) if !object_intact(store, checkpoint).map_err(engine_error)? => {
            Some(reprise_engine::Unbound::ObjectReplaced)
        }
        Ok(()) => None,
    };
    if let Some(why) = unbound {
        return Err(CliError::failed(format!(
            "checkpoint {} of {key} in run {} is not one its journal recorded ({}); nothing was restored: `reprise journal verify {key}` reports the store",
            &checkpoint.id[..12.min(checkpoint.id.len())],
            run.run_id,
            why.explain()
        )));
    }
    if let Some(holder) = task_holder(state, key) {
        return Err(CliError::usage(format!(
            "task {key} is being run by {} (pid {}); restore it once that run ends",
            holder.run_id, holder.pid
        )));
    }
    Ok(())
}

fn restore(
    settings: &Settings,
    task: &str,
    id: &str,
    run: Option<&str>,
    (dry_run, to): (bool, Option<std::path::PathBuf>),
) -> Result<Outcome, CliError> {
    let (state, run, key, store) = open(settings, task, run)?;
    let checkpoint = store
        .find(id)
        .map_err(|err| CliError::usage(err.to_string()))?;
    refuse_unrestorable(&state, &run, &key, &store, &checkpoint)?;
    // The task's tree, or a new directory: where it was asked for, or
    // where reprise puts it once the worktree was reclaimed.
    let elsewhere = match to {
        Some(dir) => Some(dir),
        None if !store.tree().is_dir() => Some(
            state
                .root()
                .join("restored")
                .join(run.run_id.as_str())
                .join(format!("{}-{}", key.task, &checkpoint.id[..12])),
        ),
        None => None,
    };
    if let Some(dir) = elsewhere {
        return restore_elsewhere(&state, (&run, &key), &store, &checkpoint, &dir, dry_run);
    }
    let changes = store
        .changes(&checkpoint, &state.scratch_dir()?)
        .map_err(|err| CliError::usage(err.to_string()))?;
    let mut text = change_lines(&changes);
    if dry_run {
        let _ = writeln!(
            text,
            "would restore {} of {key} to checkpoint {}: {} change{}",
            store_tree(&store),
            &checkpoint.id[..12],
            changes.files.len(),
            if changes.files.len() == 1 { "" } else { "s" }
        );
        return Ok(Outcome {
            exit: None,
            json: json!({"dry_run": true, "checkpoint": checkpoint.id, "changes": changes}),
            text,
            ok: true,
        });
    }
    let restored = restore_recorded(settings, (&state, &run, &key), &store, &checkpoint)?;
    let _ = writeln!(
        text,
        "restored {} to checkpoint {}: {} change{}; workspace hash {}{}",
        store_tree(&store),
        &checkpoint.id[..12],
        changes.files.len(),
        if changes.files.len() == 1 { "" } else { "s" },
        &restored.workspace_hash.to_hex()[..12],
        if restored.matches {
            " (the checkpoint's)"
        } else {
            " (NOT the checkpoint's)"
        }
    );
    Ok(Outcome {
        exit: None,
        json: json!({
            "dry_run": false,
            "checkpoint": checkpoint.id,
            "changes": changes,
            "workspace_hash": restored.workspace_hash,
            "matches_checkpoint": restored.matches,
        }),
        text,
        ok: restored.matches,
    })
}

/// Writes `checkpoint` into `dir`, a new or empty directory: the task's
/// tree and its records stay as they are (nothing of the task changed, so
/// nothing is recorded). The result is hashed as the workspace was when the
/// checkpoint was taken, and said to match or not.
fn restore_elsewhere(
    state: &StateDir,
    (run, key): (&RunState, &reprise_core::TaskKey),
    store: &SnapshotStore,
    checkpoint: &reprise_store::snapshot::Checkpoint,
    dir: &std::path::Path,
    dry_run: bool,
) -> Result<Outcome, CliError> {
    let short = &checkpoint.id[..12];
    let occupied = std::fs::read_dir(dir).is_ok_and(|mut entries| entries.next().is_some());
    if occupied || (dir.exists() && !dir.is_dir()) {
        return Err(CliError::usage(format!(
            "{} is not an empty directory; nothing was restored: name a new one with --to",
            dir.display()
        )));
    }
    let files = store
        .files(checkpoint)
        .map_err(|err| CliError::usage(err.to_string()))?;
    let mut text = String::new();
    for path in &files {
        let _ = writeln!(text, "  {:<7} {path}", "restore");
    }
    for (path, _) in &checkpoint.manifest.skipped {
        let _ = writeln!(
            text,
            "  left out {path} (skipped by size: not in the checkpoint)"
        );
    }
    let count = |n: usize| format!("{n} file{}", if n == 1 { "" } else { "s" });
    let gone = if store.tree().is_dir() {
        ""
    } else {
        " (its worktree is gone)"
    };
    if dry_run {
        let _ = writeln!(
            text,
            "would write checkpoint {short} of {key}{gone} into {}: {}",
            dir.display(),
            count(files.len())
        );
        return Ok(Outcome {
            exit: None,
            json: json!({"dry_run": true, "checkpoint": checkpoint.id, "into": dir, "files": files}),
            text,
            ok: true,
        });
    }
    std::fs::create_dir_all(dir).map_err(|err| {
        CliError::usage(format!(
            "cannot create {} ({err}); nothing was restored: name another directory with --to",
            dir.display()
        ))
    })?;
    store
        .restore_into(checkpoint, dir, &state.scratch_dir()?)
        .map_err(|err| CliError::from_source(crate::error::ErrorKind::Failed, err))?;
    let cache = state.workspace_cache_path(dir);
    let hash = hash_workspace_cached(dir, 0, &cache)
        .map_err(|err| CliError::from_source(crate::error::ErrorKind::Failed, err))?
        .hash;
    let expected = recorded_hash(state, key, &checkpoint.id);
    let matches = expected == Some(hash);
    let _ = writeln!(
        text,
        "wrote checkpoint {short} of {key} in run {}{gone} into {}: {}; workspace hash {}{}",
        run.run_id,
        dir.display(),
        count(files.len()),
        &hash.to_hex()[..12],
        if matches {
            " (the checkpoint's)"
        } else {
            " (NOT the checkpoint's)"
        }
    );
    Ok(Outcome {
        exit: None,
        json: json!({
            "dry_run": false,
            "checkpoint": checkpoint.id,
            "into": dir,
            "files": files,
            "workspace_hash": hash,
            "matches_checkpoint": matches,
        }),
        text,
        ok: matches,
    })
}

/// A line per path a restore changes, and per file it cannot restore.
fn change_lines(changes: &reprise_store::snapshot::Changes) -> String {
    let mut text = String::new();
    for (status, path) in &changes.files {
        let _ = writeln!(text, "  {:<7} {path}", restore_action(status));
    }
    for path in &changes.not_restored {
        let _ = writeln!(text, "  kept {path} (skipped by size: cannot be restored)");
    }
    text
}

/// Restores `checkpoint` into the task's directory and records the
/// rollback in its journal and the audit chain.
fn restore_recorded(
    settings: &Settings,
    (state, run, key): (&StateDir, &RunState, &reprise_core::TaskKey),
    store: &SnapshotStore,
    checkpoint: &reprise_store::snapshot::Checkpoint,
) -> Result<Restored, CliError> {
    let audit_key = load_key(settings.key_path()?)?;
    let mut journal = Journal::open(state, key)?;
    let mut audit = reprise_store::audit::AuditLog::open(state, audit_key)?;
    let cwd = run
        .task(&key.task)
        .and_then(|record| record.cwd.clone())
        .unwrap_or_default();
    let expected = recorded_hash(state, key, &checkpoint.id);
    restore_checkpoint(
        store,
        checkpoint,
        &mut journal,
        Some(&mut audit),
        key,
        &run.run_id,
        "reprise checkpoint restore",
        expected,
        || {
            let cache = state.workspace_cache_path(&cwd);
            Ok(hash_workspace_cached(&cwd, 0, &cache)?.hash)
        },
    )
    .map_err(|err| CliError::from_source(crate::error::ErrorKind::Failed, err))
}

/// What a restore does to a path, in a word, from the store's letter for
/// it (git's, in the restore's direction): `restore` what it brings back,
/// `delete` what it removes.
fn restore_action(letter: &str) -> String {
    match letter {
        "A" => "restore".to_owned(),
        "D" => "delete".to_owned(),
        "M" => "rewrite".to_owned(),
        "T" => "replace".to_owned(),
        "P" => "chmod".to_owned(),
        other => match other.strip_prefix('P') {
            Some(mode) => format!("chmod {mode}"),
            None => other.to_owned(),
        },
    }
}

fn store_tree(store: &SnapshotStore) -> String {
    store.tree().display().to_string()
}

/// The workspace hash the journal recorded when `checkpoint` was taken.
fn recorded_hash(
    state: &StateDir,
    key: &reprise_core::TaskKey,
    checkpoint: &str,
) -> Option<reprise_core::digest::Digest> {
    let bytes = std::fs::read(state.journal_path(key)).ok()?;
    bytes
        .split(|&byte| byte == b'\n')
        .rev()
        .filter_map(|line| serde_json::from_slice::<reprise_core::record::JournalRow>(line).ok())
        .filter_map(|row| body_of::<CheckpointTaken>(&row.kind, &row.body))
        .find(|taken| taken.checkpoint == checkpoint)
        .map(|taken| taken.workspace_hash)
}
