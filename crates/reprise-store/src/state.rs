//! Finding, creating and naming the paths of the state directory.

use std::fs;
use std::path::{Path, PathBuf};

use reprise_core::TaskId;
use serde::{Deserialize, Serialize};

use crate::error::{IoContext, Result, StoreError};
use crate::fsutil::{create_dir_all_durable, write_atomic};

/// Name of the state directory inside a project.
pub const STATE_DIR_NAME: &str = ".reprise";
/// Layout version this build reads and writes.
pub const LAYOUT_VERSION: u64 = 1;

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
        let layout_path = root.join("layout.json");
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

    /// Creates the state directory at `root` (idempotent). Returns the
    /// directory and whether it was newly created.
    pub fn create(root: &Path) -> Result<(Self, bool)> {
        if root.join("layout.json").exists() {
            return Ok((Self::open(root)?, false));
        }
        create_dir_all_durable(root, 0o755)?;
        for sub in ["tasks", "audit", "runs"] {
            create_dir_all_durable(&root.join(sub), 0o755)?;
        }
        let layout = serde_json::to_vec(&Layout { v: LAYOUT_VERSION }).expect("layout serialises");
        write_atomic(&root.join("layout.json"), &layout, 0o644)?;
        Ok((
            Self {
                root: root.to_path_buf(),
            },
            true,
        ))
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn task_dir(&self, task: &TaskId) -> PathBuf {
        self.root.join("tasks").join(task.as_str())
    }

    pub fn journal_path(&self, task: &TaskId) -> PathBuf {
        self.task_dir(task).join("journal.jsonl")
    }

    /// The journal's path, or `NoJournal` when the task has none.
    pub fn existing_journal_path(&self, task: &TaskId) -> Result<PathBuf> {
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

    pub fn spine_path(&self, task: &TaskId) -> PathBuf {
        self.task_dir(task).join("spine.jsonl")
    }

    pub fn audit_path(&self) -> PathBuf {
        self.root.join("audit").join("audit.jsonl")
    }

    /// `ledger.jsonl`: task state transitions.
    pub fn ledger_path(&self) -> PathBuf {
        self.root.join("ledger.jsonl")
    }

    /// `runs/`, one directory per run.
    pub fn runs_dir(&self) -> PathBuf {
        self.root.join("runs")
    }

    /// `runs/<run>/state.json`.
    pub fn run_state_path(&self, run_id: &str) -> PathBuf {
        self.runs_dir().join(run_id).join("state.json")
    }

    /// `worktrees/<task>`: the task's sandbox when the project is a git repository.
    pub fn worktree_dir(&self, task: &TaskId) -> PathBuf {
        self.root.join("worktrees").join(task.as_str())
    }

    /// `sessions/<adapter>/`: preserved copies of native transcripts.
    pub fn sessions_dir(&self, adapter: &str) -> PathBuf {
        self.root.join("sessions").join(adapter)
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
}

/// The current time as an RFC 3339 UTC string with milliseconds.
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}
