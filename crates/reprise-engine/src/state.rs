//! The run's state: a snapshot of every task and attempt, rewritten
//! atomically (temp file, fsync, rename) at every transition, so a reader
//! never sees half of one.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use reprise_core::TaskId;
use reprise_core::plan::Spend;
use reprise_store::state::StateDir;
use reprise_store::{replace_file, write_atomic};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{EngineError, Result};
use crate::sandbox::{TaskOutput, Workspace};

// A task's place in the run and how an attempt ended are the chains'
// own words: one definition, in core's schema.
pub use reprise_core::rows::{Outcome, TaskStatus};

/// One gate's verdict on an attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GateVerdict {
    pub name: String,
    pub passed: bool,
    /// The gate could not run (spawn failure, timeout, exit 126 or 127):
    /// not a verdict.
    pub could_not_run: bool,
    /// The gate was stopped midway (its timeout) and may have left the tree
    /// half-written.
    #[serde(default)]
    pub crashed: bool,
    pub exit_code: Option<i32>,
    /// The retry-budget level the gate ran at, for a gate graded on a criterion.
    pub level: Option<i64>,
    /// The gate's own timeout, when it was stopped by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timed_out_after_ms: Option<u64>,
    /// What the gate printed: kept in memory for the next prompt only, never
    /// written into a chain or the run state.
    #[serde(skip)]
    pub output: String,
}

/// One attempt of a task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptSummary {
    pub n: u32,
    /// `new` for the first attempt, else the retry mode it ran in.
    pub mode: String,
    pub session_id: Option<String>,
    pub outcome: Outcome,
    pub judged: bool,
    pub infra_kind: Option<String>,
    pub exit_code: Option<i32>,
    pub gates: Vec<GateVerdict>,
    pub cost_micro_usd: Option<u64>,
    pub elapsed_ms: u64,
    /// Time inside the agent's own run, as the process driver measured it.
    pub agent_us: u64,
    /// Time inside the gates' own runs.
    pub gates_us: u64,
}

/// A task's record in a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskRecord {
    pub task_id: TaskId,
    pub state: TaskStatus,
    pub agent: String,
    pub attempts: Vec<AttemptSummary>,
    pub spent_micro_usd: u64,
    /// The last attempt was judged: its reply is kept for `--retry-failed`.
    #[serde(default)]
    pub judged: bool,
    pub reason: Option<String>,
    /// The `retry_*` stamp of the latest retry decision.
    pub metadata: BTreeMap<String, Value>,
    /// For a partial task: the gates its kept attempt did not pass.
    #[serde(default)]
    pub gaps: Vec<String>,
    /// The commit the task's worktree started from (none in place).
    #[serde(default)]
    pub base_commit: Option<String>,
    /// Where the task worked.
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// The task's committed result, once it passed in a worktree.
    #[serde(default)]
    pub output: Option<TaskOutput>,
    /// Why the task is not at work now, while it waits to start or for its
    /// next attempt's budget (a live run's snapshot; gone once it goes on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<Waiting>,
    /// What wakes the task while it is parked (a resume, an approval, a
    /// time), for the summary to name the command that does it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake: Option<reprise_store::suspension::Wake>,
}

/// Why a task waits, and the words for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Waiting {
    pub reason: WaitReason,
    /// What it waits for, in words: `dependency build (running)`.
    pub detail: String,
}

/// What a task can wait for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitReason {
    /// Every seat is taken.
    Seat,
    /// A task it depends on has not delivered yet.
    Dependency,
    /// The run's pool has nothing free for it now (its envelope, or its
    /// attempt's share), and what is held may come back.
    Budget,
}

impl WaitReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Seat => "seat",
            Self::Dependency => "dependency",
            Self::Budget => "budget",
        }
    }
}

/// The snapshot of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunState {
    pub v: u64,
    pub run_id: String,
    pub plan: String,
    pub plan_name: String,
    pub started_at: String,
    pub finished_at: Option<String>,
    pub ok: Option<bool>,
    /// The run whose failed tasks this leg re-runs (`--retry-failed`).
    #[serde(default)]
    pub retry_of: Option<String>,
    /// Where the run's tasks work: worktrees from a base commit, or in place.
    #[serde(default)]
    pub workspace: Option<Workspace>,
    pub tasks: Vec<TaskRecord>,
}

impl TaskRecord {
    /// What the task's attempts cost: the figures reported, and how many
    /// attempts reported none (a command, Codex or Gemini agent, or an
    /// attempt cut off by the death of its process).
    pub fn spend(&self) -> Spend {
        self.attempts
            .iter()
            .map(|attempt| attempt.cost_micro_usd)
            .collect()
    }
}

impl RunState {
    /// What every task's attempts cost (see [`TaskRecord::spend`]).
    pub fn spend(&self) -> Spend {
        let mut spend = Spend::default();
        for task in &self.tasks {
            spend.merge(task.spend());
        }
        spend
    }

    pub fn task(&self, id: &TaskId) -> Option<&TaskRecord> {
        self.tasks.iter().find(|task| &task.task_id == id)
    }

    pub(crate) fn task_mut(&mut self, id: &TaskId) -> &mut TaskRecord {
        self.tasks
            .iter_mut()
            .find(|task| &task.task_id == id)
            .expect("every plan task has a record")
    }

    /// Writes the snapshot. Only a `durable` save (the last of a run) is
    /// synced: the journals are the record, and a snapshot that lags them
    /// after a crash is rebuilt from them, so the run does not pay two fsyncs
    /// per transition.
    pub(crate) fn save(&self, state: &StateDir, durable: bool) -> Result<()> {
        let path = state.run_state_path(&self.run_id)?;
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir).map_err(|source| reprise_store::StoreError::Io {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        let mut bytes = serde_json::to_vec(self).expect("run state serialises");
        bytes.push(b'\n');
        if durable {
            write_atomic(&path, &bytes, 0o644)?;
        } else {
            replace_file(&path, &bytes, 0o644)?;
        }
        Ok(())
    }
}

impl RunState {
    /// Whether a stop (Ctrl-C, SIGTERM, SIGHUP) cancelled tasks of the run:
    /// `run --continue` takes those up where they stopped.
    pub fn cancelled(&self) -> bool {
        self.tasks
            .iter()
            .any(|task| task.state == TaskStatus::Cancelled)
    }

    /// The plan's name as an id, as the state directory files it.
    pub fn plan_id(&self) -> Option<reprise_core::PlanId> {
        reprise_core::PlanId::parse(&self.plan_name).ok()
    }
}

/// Reads the state of run `run_id`.
pub fn load_run(state: &StateDir, run_id: &str) -> Result<RunState> {
    let path = state.run_state_path(run_id)?;
    if let Some(dir) = path.parent()
        && fs::symlink_metadata(dir).is_ok_and(|meta| meta.file_type().is_symlink())
    {
        return Err(reprise_store::StoreError::Symlink {
            path: dir.to_path_buf(),
        }
        .into());
    }
    let bytes = match reprise_store::read_no_follow(&path)? {
        Some(bytes) => bytes,
        None => {
            return Err(EngineError::NoRun {
                run: run_id.to_owned(),
                dir: state.runs_dir(),
            });
        }
    };
    serde_json::from_slice(&bytes).map_err(|err| EngineError::BadRunState {
        path,
        detail: err.to_string(),
    })
}

/// The most recent run: run ids are ULIDs, so the greatest sorts last.
pub fn latest_run(state: &StateDir) -> Result<RunState> {
    let runs = state.runs_dir();
    let latest = list_runs(&runs)?
        .into_iter()
        .max()
        .ok_or_else(|| EngineError::NoRuns { dir: runs.clone() })?;
    load_run(state, &latest)
}

/// The ids of every run recorded in the state directory, oldest first.
pub fn run_ids(state: &StateDir) -> Result<Vec<String>> {
    let mut ids = list_runs(&state.runs_dir())?;
    ids.sort();
    Ok(ids)
}

fn list_runs(dir: &Path) -> Result<Vec<String>> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(reprise_store::StoreError::Io {
                path: dir.to_path_buf(),
                source,
            }
            .into());
        }
    };
    Ok(entries
        .filter_map(|entry| entry.ok())
        .filter(|entry| entry.path().join("state.json").is_file())
        .filter_map(|entry| entry.file_name().into_string().ok())
        .filter(|name| reprise_core::check_run_id(name).is_ok())
        .collect())
}
