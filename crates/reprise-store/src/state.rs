//! Finding, creating and naming the paths of the state directory.
//!
//! Layout 2 keeps task journals per plan (`plans/<plan>/tasks/<task>/`), so
//! two plans that both have a task `tests` never share a journal, and task
//! sandboxes per run (`worktrees/<run>/<task>/`), so no run ever works in a
//! tree an earlier run left. A layout-1 directory (`tasks/<task>/`) is
//! migrated by `migrate_layout_1`, which `reprise init` and `reprise run` call;
//! every other command refuses it and names `reprise init`.

use std::fs;
use std::path::{Path, PathBuf};

use reprise_core::{PlanId, TaskId, TaskKey};
use serde::{Deserialize, Serialize};

use crate::error::{IoContext, Result, StoreError};
use crate::fsutil::{create_dir_all_durable, write_atomic};

/// Name of the state directory inside a project.
pub const STATE_DIR_NAME: &str = ".reprise";
/// Layout version this build reads and writes.
pub const LAYOUT_VERSION: u64 = 2;
/// What `.reprise/.gitignore` holds: the state directory is never committed,
/// not even by an agent's `git add -A` in the project itself.
pub(crate) const GITIGNORE: &[u8] =
    b"# written by reprise: the state directory is never committed\n*\n";

#[derive(Debug, Serialize, Deserialize)]
struct Layout {
    v: u64,
}

/// An existing state directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateDir {
    root: PathBuf,
}

impl StateDir {
    /// Finds `.reprise/` in `start` or the nearest parent that has one.
    pub fn discover(start: &Path) -> Result<Self> {
        let mut dir = Some(start);
        while let Some(current) = dir {
            let candidate = current.join(STATE_DIR_NAME);
            if candidate.is_dir() {
                return Self::open(&candidate);
            }
            dir = current.parent();
        }
        Err(StoreError::NoStateDir {
            start: start.to_path_buf(),
        })
    }

    /// Opens the state directory at `root`, checking its layout version.
    pub fn open(root: &Path) -> Result<Self> {
        if let Ok(meta) = fs::symlink_metadata(root) {
            check_root_entry(root, &meta)?;
        }
        let layout_path = layout_path_in(root);
        let bytes = match fs::read(&layout_path) {
            Ok(bytes) => bytes,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                return Err(if root.exists() {
                    StoreError::NotAStateDir {
                        path: root.to_path_buf(),
                    }
                } else {
                    StoreError::NoStateDir {
                        start: root.to_path_buf(),
                    }
                });
            }
            Err(err) => return Err(err).at(&layout_path),
        };
        let layout: Layout =
            serde_json::from_slice(&bytes).map_err(|_| StoreError::NotAStateDir {
                path: root.to_path_buf(),
            })?;
        if layout.v == 1 {
            return Err(StoreError::OldLayout {
                path: root.to_path_buf(),
            });
        }
        if layout.v != LAYOUT_VERSION {
            return Err(StoreError::UnsupportedLayout {
                path: root.to_path_buf(),
                found: layout.v,
                supported: LAYOUT_VERSION,
            });
        }
        Ok(Self {
            root: root.to_path_buf(),
        })
    }

    /// Creates the state directory at `root` (idempotent), in place and
    /// without a lock or an audit chain: for tests and fixtures. The CLI
    /// creates through `creation::create_state_dir`. Returns the directory
    /// and whether it was newly created.
    /// A directory of an older layout is not opened here: migrate it first.
    pub fn create(root: &Path) -> Result<(Self, bool)> {
        if layout_path_in(root).exists() {
            let state = Self::open(root)?;
            state.ensure_gitignore()?;
            return Ok((state, false));
        }
        create_dir_all_durable(root, 0o755)?;
        for sub in SKELETON {
            create_dir_all_durable(&root.join(sub), 0o755)?;
        }
        write_atomic(&gitignore_path_in(root), GITIGNORE, 0o644)?;
        write_layout(root, LAYOUT_VERSION)?;
        Ok((
            Self {
                root: root.to_path_buf(),
            },
            true,
        ))
    }

    /// Writes `.gitignore` if an older reprise made the directory without it.
    pub(crate) fn ensure_gitignore(&self) -> Result<()> {
        let path = gitignore_path_in(&self.root);
        if !path.exists() {
            write_atomic(&path, GITIGNORE, 0o644)?;
        }
        Ok(())
    }

    /// The state directory at `root`, unchecked: for reading what an older
    /// layout holds before it is migrated.
    pub(crate) fn at(root: &Path) -> Self {
        Self {
            root: root.to_path_buf(),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `plans/`, one directory per plan name.
    pub fn plans_dir(&self) -> PathBuf {
        self.root.join("plans")
    }

    /// `plans/<plan>/tasks/<task>/`: a task's journal and spine.
    pub fn task_dir(&self, task: &TaskKey) -> PathBuf {
        self.plans_dir()
            .join(task.plan.as_str())
            .join("tasks")
            .join(task.task.as_str())
    }

    pub fn journal_path(&self, task: &TaskKey) -> PathBuf {
        self.task_dir(task).join("journal.jsonl")
    }

    /// Every plan's tasks that have a directory here, in name order (names
    /// that are not ids are skipped: reprise never made them).
    pub fn task_keys(&self) -> Result<Vec<TaskKey>> {
        let names = |dir: &Path| -> Result<Vec<String>> {
            match fs::read_dir(dir) {
                Ok(entries) => Ok(entries
                    .filter_map(|entry| entry.ok())
                    .filter_map(|entry| entry.file_name().into_string().ok())
                    .collect()),
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
                Err(err) => Err(err).at(dir),
            }
        };
        let mut keys = Vec::new();
        for plan in names(&self.plans_dir())? {
            let Ok(plan) = PlanId::parse(&plan) else {
                continue;
            };
            for task in names(&self.plans_dir().join(plan.as_str()).join("tasks"))? {
                if let Ok(task) = TaskId::parse(&task) {
                    keys.push(TaskKey::new(plan.clone(), task));
                }
            }
        }
        keys.sort();
        Ok(keys)
    }

    /// Refuses a task directory that is a symlink: the journal must be the
    /// file in this state directory, not one a link points at.
    pub fn check_task_dir(&self, task: &TaskKey) -> Result<()> {
        let task_dir = self.task_dir(task);
        let plan_dir = self.plans_dir().join(task.plan.as_str());
        for dir in [plan_dir.clone(), plan_dir.join("tasks"), task_dir] {
            if fs::symlink_metadata(&dir).is_ok_and(|meta| meta.file_type().is_symlink()) {
                return Err(StoreError::Symlink { path: dir });
            }
        }
        Ok(())
    }

    /// The journal's path, or `NoJournal` when the task has none.
    pub fn existing_journal_path(&self, task: &TaskKey) -> Result<PathBuf> {
        self.check_task_dir(task)?;
        let path = self.journal_path(task);
        if path.is_file() {
            Ok(path)
        } else {
            Err(StoreError::NoJournal {
                task: task.to_string(),
                path,
            })
        }
    }

    pub fn spine_path(&self, task: &TaskKey) -> PathBuf {
        self.task_dir(task).join("spine.jsonl")
    }

    /// The plans that have a journal for `task`, in name order.
    pub fn plans_with_task(&self, task: &TaskId) -> Result<Vec<PlanId>> {
        let dir = self.plans_dir();
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(err) => return Err(err).at(&dir),
        };
        let mut plans: Vec<PlanId> = entries
            .filter_map(|entry| entry.ok())
            .filter_map(|entry| PlanId::parse(&entry.file_name().to_string_lossy()).ok())
            .filter(|plan| {
                self.journal_path(&TaskKey::new(plan.clone(), task.clone()))
                    .is_file()
            })
            .collect();
        plans.sort();
        Ok(plans)
    }

    /// `tmp/scratch/`, created if needed: where reprise's own temporary
    /// git indexes live while a tree is written or compared.
    pub fn scratch_dir(&self) -> Result<PathBuf> {
        let dir = self.root.join("tmp").join("scratch");
        fs::create_dir_all(&dir).at(&dir)?;
        Ok(dir)
    }

    /// `locks/`: advisory locks (worktree creation, tasks held by a run).
    pub fn locks_dir(&self) -> PathBuf {
        self.root.join("locks")
    }

    pub fn audit_path(&self) -> PathBuf {
        audit_path_in(&self.root)
    }

    /// `ledger.jsonl`: task state transitions.
    pub fn ledger_path(&self) -> PathBuf {
        self.root.join("ledger.jsonl")
    }

    /// `runs/`, one directory per run.
    pub fn runs_dir(&self) -> PathBuf {
        self.root.join("runs")
    }

    /// `runs/<run>/state.json`. The run id must be `R-<ulid>`: it is checked
    /// here, before it becomes part of a path.
    pub fn run_state_path(&self, run_id: &str) -> Result<PathBuf> {
        reprise_core::check_run_id(run_id)?;
        Ok(self.runs_dir().join(run_id).join("state.json"))
    }

    /// `worktrees/`: every run's task sandboxes.
    pub fn worktrees_dir(&self) -> PathBuf {
        self.root.join("worktrees")
    }

    /// `worktrees/<run>/<task>`: the task's sandbox in one run, when the
    /// project is a git repository. Stable for the run's whole life (the
    /// CLIs key resume by cwd) and never used by another run.
    pub fn worktree_dir(&self, run_id: &str, task: &TaskId) -> PathBuf {
        self.worktrees_dir().join(run_id).join(task.as_str())
    }

    /// `snapshots/<run>/<task>/`: the shadow git store of a task's file
    /// checkpoints in one run.
    pub fn snapshot_dir(&self, run_id: &str, task: &TaskId) -> PathBuf {
        self.snapshots_dir().join(run_id).join(task.as_str())
    }

    /// `snapshots/`: every run's checkpoint stores.
    pub fn snapshots_dir(&self) -> PathBuf {
        self.root.join("snapshots")
    }

    /// `sessions/<adapter>/`: preserved copies of native transcripts.
    pub fn sessions_dir(&self, adapter: &str) -> PathBuf {
        self.root.join("sessions").join(adapter)
    }

    /// `supervised/`: one record per running attempt supervisor, so the next
    /// command can stop what a dead run left.
    pub fn supervision_dir(&self) -> PathBuf {
        self.root.join("supervised")
    }

    /// `tmp/<run>/<task>-<attempt>/`: the attempt's `TMPDIR`, removed after it.
    pub fn attempt_tmp_dir(&self, run_id: &str, task: &TaskId, attempt: u32) -> PathBuf {
        self.root
            .join("tmp")
            .join(run_id)
            .join(format!("{}-{attempt}", task.as_str()))
    }

    /// `sim/`: the built-in sim agent's own session store.
    pub fn sim_store(&self) -> PathBuf {
        self.root.join("sim")
    }

    /// `cache/workspace/<name>.bin`: the stat cache of the tree at `dir`,
    /// named by a hash of its canonical path, so every user of one tree (the
    /// CLI, each task in place or in its worktree) shares one cache.
    pub fn workspace_cache_path(&self, dir: &Path) -> PathBuf {
        let canonical = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
        let name = reprise_core::digest::tagged_sha256(
            b"reprise/workspace-cache-name/v1\n",
            &[canonical.as_os_str().as_encoded_bytes()],
        )
        .to_hex();
        self.root
            .join("cache")
            .join("workspace")
            .join(format!("{}.bin", &name[..32]))
    }

    /// `cache/blob-digests.bin`: the content digest of each git blob a
    /// checkout's files were last seen to hold, which seeds a fresh
    /// worktree's stat cache (`workspace::seed_stat_cache`).
    pub fn blob_digests_path(&self) -> PathBuf {
        self.root.join("cache").join("blob-digests.bin")
    }
}

// The state directory's own files under a root, each named here once: its
// creation builds the directory in a temporary place, before a `StateDir`
// stands for it.

/// `layout.json` under `root`: the layout version.
pub fn layout_path_in(root: &Path) -> PathBuf {
    root.join("layout.json")
}

/// `.gitignore` under `root`: keeps the state directory out of git.
pub fn gitignore_path_in(root: &Path) -> PathBuf {
    root.join(".gitignore")
}

/// `audit/audit.jsonl` under `root`: the keyed audit chain.
pub fn audit_path_in(root: &Path) -> PathBuf {
    root.join("audit").join("audit.jsonl")
}

/// The directories a new state directory starts with.
pub(crate) const SKELETON: [&str; 3] = ["plans", "audit", "runs"];

pub(crate) fn write_layout(root: &Path, version: u64) -> Result<()> {
    let layout = serde_json::to_vec(&Layout { v: version }).expect("layout serialises");
    write_atomic(&layout_path_in(root), &layout, 0o644)
}

/// What a layout-1 migration moved: each task journal and the plan it now
/// belongs to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Migration {
    pub tasks: Vec<TaskKey>,
}

/// Moves a layout-1 state directory at `root` to layout 2, or does nothing
/// (`Ok(None)`) when it is not layout 1.
///
/// Layout 1 kept one journal per task id (`tasks/<task>/`). Each moves to
/// the plan of the latest run that ran it (`plans/<plan>/tasks/<task>/`); a
/// task no run names goes to the plan `unnamed`. The caller records the
/// mapping in the audit chain, so seals written before it (which name no
/// plan) keep vouching for the journals they sealed. Each step is a rename,
/// and the layout version is written last: an interrupted migration is
/// finished by the next one.
pub fn migrate_layout_1(root: &Path) -> Result<Option<Migration>> {
    let layout_path = layout_path_in(root);
    let Ok(bytes) = fs::read(&layout_path) else {
        return Ok(None);
    };
    match serde_json::from_slice::<Layout>(&bytes) {
        Ok(Layout { v: 1 }) => {}
        _ => return Ok(None),
    }
    let owners = layout_1_owners(&root.join("runs"));
    let old_tasks = root.join("tasks");
    let mut migration = Migration::default();
    create_dir_all_durable(&root.join("plans"), 0o755)?;
    if let Ok(entries) = fs::read_dir(&old_tasks) {
        let mut names: Vec<String> = entries
            .filter_map(|entry| entry.ok())
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        for name in names {
            let Ok(task) = TaskId::parse(&name) else {
                continue;
            };
            let plan = owners
                .get(&task)
                .cloned()
                .unwrap_or_else(|| PlanId::parse("unnamed").expect("a valid plan name"));
            let key = TaskKey::new(plan, task);
            let target = root
                .join("plans")
                .join(key.plan.as_str())
                .join("tasks")
                .join(key.task.as_str());
            if let Some(parent) = target.parent() {
                create_dir_all_durable(parent, 0o755)?;
            }
            let source = old_tasks.join(&name);
            fs::rename(&source, &target).at(&source)?;
            migration.tasks.push(key);
        }
        let _ = fs::remove_dir(&old_tasks);
    }
    if !gitignore_path_in(root).exists() {
        write_atomic(&gitignore_path_in(root), GITIGNORE, 0o644)?;
    }
    write_layout(root, LAYOUT_VERSION)?;
    Ok(Some(migration))
}

/// For each task id, the plan of the latest layout-1 run that named it (run
/// ids are ULIDs: the greatest is the latest).
fn layout_1_owners(runs: &Path) -> std::collections::BTreeMap<TaskId, PlanId> {
    let mut owners = std::collections::BTreeMap::new();
    let Ok(entries) = fs::read_dir(runs) else {
        return owners;
    };
    let mut run_dirs: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.path())
        .collect();
    run_dirs.sort();
    for dir in run_dirs {
        let Ok(bytes) = fs::read(dir.join("state.json")) else {
            continue;
        };
        let Ok(value) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
            continue;
        };
        let Some(plan) = value
            .get("plan_name")
            .and_then(|name| name.as_str())
            .and_then(|name| PlanId::parse(name).ok())
        else {
            continue;
        };
        for task in value
            .get("tasks")
            .and_then(|tasks| tasks.as_array())
            .into_iter()
            .flatten()
        {
            if let Some(id) = task
                .get("task_id")
                .and_then(|id| id.as_str())
                .and_then(|id| TaskId::parse(id).ok())
            {
                owners.insert(id, plan.clone());
            }
        }
    }
    owners
}

/// The current time as an RFC 3339 UTC string with milliseconds.
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

/// Refuses a state directory whose own entry is a symlink (a linked state
/// directory could be swapped for another behind the witness's back; use
/// its real path instead) or is not a directory.
pub(crate) fn check_root_entry(root: &Path, meta: &fs::Metadata) -> Result<()> {
    if meta.file_type().is_symlink() {
        return Err(StoreError::Symlink {
            path: root.to_path_buf(),
        });
    }
    if !meta.is_dir() {
        return Err(StoreError::StateDirIsFile {
            path: root.to_path_buf(),
        });
    }
    Ok(())
}
