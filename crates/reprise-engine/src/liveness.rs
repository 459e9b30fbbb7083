//! Whether a run that has not finished is still being driven, and where its
//! tasks were: a live run holds the locks of the tasks it runs (naming its
//! pid); an unfinished run whose locks nobody holds was interrupted, and each
//! task's journal, read back through the core's lifecycle, says where it was
//! when its process died. An unfinished run's snapshot is brought up to its
//! journals here too: a task's attempts land in `state.json` only when the
//! task ends, so the journal is where the attempts of a task still at work
//! (or cut off) are read back, with what each cost.

use std::fs;

use reprise_core::TaskKey;
use reprise_core::lifecycle::{TaskState, replay, rows};
use reprise_core::record::JournalRow;
use reprise_store::locks::task_holder;
use reprise_store::state::StateDir;
use serde::Serialize;
use serde_json::Value;

use std::collections::BTreeMap;

use reprise_core::TaskId;

use crate::state::RunState;

/// Whether anything drives a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Liveness {
    /// Its result is in: nothing to drive.
    Finished,
    /// A process holds its tasks' locks.
    Live { pid: u32 },
    /// It did not finish and no process drives it.
    Interrupted,
    /// No process drives it and tasks of it are parked: it goes on when
    /// they are resumed (or their wake time comes and it is continued).
    Parked,
    /// A stop (Ctrl-C, SIGTERM, SIGHUP) ended it with tasks cancelled:
    /// `run --continue` takes those up where they stopped, as after a crash.
    Cancelled,
}

/// How `run` stands now.
pub fn liveness(state: &StateDir, run: &RunState) -> Liveness {
    let parked = run
        .tasks
        .iter()
        .any(|task| task.state == crate::state::TaskStatus::Suspended);
    let cancelled = run.cancelled();
    if run.ok.is_some() && !parked && !cancelled {
        return Liveness::Finished;
    }
    let Some(plan) = run.plan_id() else {
        return Liveness::Interrupted;
    };
    let holder = run.tasks.iter().find_map(|task| {
        let key = TaskKey::new(plan.clone(), task.task_id.clone());
        task_holder(state, &key).filter(|holder| holder.run_id == run.run_id)
    });
    match holder {
        Some(holder) => Liveness::Live { pid: holder.pid },
        None if parked => Liveness::Parked,
        None if run.ok.is_some() => Liveness::Cancelled,
        None => Liveness::Interrupted,
    }
}

/// Where a task's journal leaves it in a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskProgress {
    pub state: TaskState,
    /// When its latest attempt started (RFC 3339), if one did.
    pub attempt_started_at: Option<String>,
}

/// Where `task`'s journal leaves it in `run_id`: the lifecycle replayed over
/// its rows from that run's `task.started` on; `None` when the task never
/// started in that run or its journal cannot be read. Rows are read as
/// recorded: `journal verify` is what vouches for them.
pub fn task_lifecycle(state: &StateDir, key: &TaskKey, run_id: &str) -> Option<TaskProgress> {
    let path = state.existing_journal_path(key).ok()?;
    let text = fs::read_to_string(path).ok()?;
    let rows: Vec<JournalRow> = text
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect();
    let start = rows.iter().rposition(|row| {
        row.kind == rows::TASK_STARTED
            && row.body.get("run_id").and_then(Value::as_str) == Some(run_id)
    })?;
    let own: Vec<&JournalRow> = rows[start..]
        .iter()
        .take_while(|row| {
            row.body
                .get("run_id")
                .and_then(Value::as_str)
                .is_none_or(|id| id == run_id)
        })
        .collect();
    Some(progress_of(own))
}

/// Where a task's rows of one run (its `task.started` on, as
/// [`task_lifecycle`] picks them) leave it; for a reader that keeps the rows
/// itself, a watcher tailing the journal.
pub fn progress_of<'a>(rows: impl IntoIterator<Item = &'a JournalRow>) -> TaskProgress {
    let rows: Vec<&JournalRow> = rows.into_iter().collect();
    TaskProgress {
        state: replay(rows.iter().map(|row| (row.kind.as_str(), &row.body))),
        attempt_started_at: rows
            .iter()
            .rev()
            .find(|row| row.kind == rows::ATTEMPT_STARTED)
            .map(|row| row.at.clone()),
    }
}

/// The attempts a task's rows of one run finished, with what each cost, and
/// the latest attempt started (0: none), as [`catch_up`] reads them.
pub fn attempts_of(rows: &[JournalRow]) -> (Vec<crate::state::AttemptSummary>, u32) {
    let taken = crate::task::journal_attempts(rows);
    (taken.attempts, taken.attempt)
}

/// Brings the attempts of an unfinished `run` up to its journals: each task
/// whose journal holds more finished attempts in this run than the snapshot
/// gets the journal's (and their cost). Returns, per task, the attempt that
/// started and has not finished: running in a live run, cut off in an
/// interrupted one; either way, its cost is not known. Rows are read as
/// recorded, unverified, as [`task_lifecycle`] reads them.
pub fn catch_up(state: &StateDir, run: &mut RunState) -> BTreeMap<TaskId, u32> {
    let mut unfinished = BTreeMap::new();
    let Some(plan) = run.plan_id() else {
        return unfinished;
    };
    for task in &mut run.tasks {
        let key = TaskKey::new(plan.clone(), task.task_id.clone());
        let rows = crate::resume::rows_of_run(state, &key, &run.run_id);
        if rows.is_empty() {
            continue;
        }
        let taken = crate::task::journal_attempts(&rows);
        let last_finished = taken.attempts.last().map_or(0, |attempt| attempt.n);
        if taken.attempt > last_finished {
            unfinished.insert(task.task_id.clone(), taken.attempt);
        }
        if taken.attempts.len() > task.attempts.len() {
            task.spent_micro_usd = taken
                .attempts
                .iter()
                .filter_map(|attempt| attempt.cost_micro_usd)
                .sum();
            task.attempts = taken.attempts;
        }
    }
    unfinished
}
