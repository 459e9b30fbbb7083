//! Where `reprise watch` reads what it shows: the state directory's runs
//! (their `state.json` snapshots, re-read only when one changes), each
//! task's journal (tailed: only the bytes appended since the last look are
//! read), and a park's approval file. Each poll hands the board only the
//! tasks whose files changed, so its cost follows what happened, not how
//! many tasks are watched.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read as _, Seek as _};
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use reprise_core::attention::{Board, Flag, RowKey, TaskView};
use reprise_core::lifecycle::TaskState;
use reprise_core::record::JournalRow;
use reprise_core::rows::{ParkCause, ResumeBody, SuspendBody, Wake, body_of};
use reprise_core::{TaskId, TaskKey};
use reprise_engine::{Liveness, RunState, TaskRecord, TaskStatus};
use reprise_store::state::StateDir;
use reprise_store::suspension::{RESUME_KIND, SUSPEND_KIND};

use crate::error::CliError;

/// How often a run's liveness (its task locks) is looked at again when
/// nothing else about it changed: a run whose process died writes nothing.
const LIVENESS_EVERY: Duration = Duration::from_secs(2);

/// What the watch reads, and what it read last.
#[derive(Debug)]
pub(crate) struct Source {
    state: StateDir,
    /// The one run asked for (`reprise watch RUN`).
    named: Option<String>,
    host: String,
    runs: BTreeMap<String, WatchedRun>,
    /// Runs that were finished when first seen (and not named): not shown.
    passed_over: BTreeSet<String>,
    /// What the last poll cost: files read, and task rows made again.
    pub(crate) last_reads: usize,
    pub(crate) last_rebuilt: usize,
}

#[derive(Debug)]
struct WatchedRun {
    stamp: Option<Stamp>,
    record: RunState,
    liveness: Liveness,
    liveness_at: Instant,
    tasks: BTreeMap<TaskId, WatchedTask>,
    /// Not polled yet: every task's row is made.
    fresh: bool,
}

#[derive(Debug)]
struct WatchedTask {
    key: TaskKey,
    tail: JournalTail,
    /// The approval its open park waits for was written.
    approved: bool,
}

/// A file's length and modification time: changed, it is read again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    len: u64,
    modified: Option<SystemTime>,
}

fn stamp(path: &std::path::Path) -> Option<Stamp> {
    let meta = std::fs::metadata(path).ok()?;
    Some(Stamp {
        len: meta.len(),
        modified: meta.modified().ok(),
    })
}

impl Source {
    pub(crate) fn new(state: StateDir, named: Option<String>) -> Result<Self, CliError> {
        if let Some(run) = &named {
            // A named run must exist: a typo is said now, not as an empty screen.
            reprise_engine::load_run(&state, run)
                .map_err(|err| CliError::usage(err.to_string()))?;
        }
        Ok(Self {
            state,
            named,
            host: local_host(),
            runs: BTreeMap::new(),
            passed_over: BTreeSet::new(),
            last_reads: 0,
            last_rebuilt: 0,
        })
    }

    pub(crate) fn state(&self) -> &StateDir {
        &self.state
    }

    /// The one run asked for, if one was.
    pub(crate) fn named(&self) -> Option<&str> {
        self.named.as_deref()
    }

    /// Brings `board` up to the state directory; returns how many rows
    /// changed.
    pub(crate) fn poll(&mut self, board: &mut Board) -> Result<usize, CliError> {
        self.last_reads = 0;
        self.last_rebuilt = 0;
        self.discover()?;
        let mut changed = 0;
        let ids: Vec<String> = self.runs.keys().cloned().collect();
        for id in ids {
            let dirty = self.refresh_run(&id);
            let Some(run) = self.runs.get(&id) else {
                continue;
            };
            for task_id in dirty {
                let (Some(record), Some(task)) =
                    (run.record.task(&task_id), run.tasks.get(&task_id))
                else {
                    continue;
                };
                let view = task_view(&self.state, &self.host, run, record, task);
                self.last_rebuilt += 1;
                if board.update(view) {
                    changed += 1;
                }
            }
        }
        Ok(changed)
    }

    /// Takes in runs not seen before: every unfinished one, or the one named.
    fn discover(&mut self) -> Result<(), CliError> {
        let ids =
            reprise_engine::run_ids(&self.state).map_err(|err| CliError::usage(err.to_string()))?;
        for id in ids {
            if self.runs.contains_key(&id) || self.passed_over.contains(&id) {
                continue;
            }
            if self.named.as_ref().is_some_and(|named| *named != id) {
                self.passed_over.insert(id);
                continue;
            }
            let Ok(record) = reprise_engine::load_run(&self.state, &id) else {
                continue;
            };
            self.last_reads += 1;
            let liveness = reprise_engine::liveness(&self.state, &record);
            if liveness == Liveness::Finished && self.named.is_none() {
                self.passed_over.insert(id);
                continue;
            }
            let Some(plan) = record.plan_id() else {
                continue;
            };
            let tasks = record
                .tasks
                .iter()
                .map(|task| {
                    let key = TaskKey::new(plan.clone(), task.task_id.clone());
                    let tail = JournalTail::new(self.state.journal_path(&key));
                    (
                        task.task_id.clone(),
                        WatchedTask {
                            key,
                            tail,
                            approved: false,
                        },
                    )
                })
                .collect();
            let path = self.state.run_state_path(&id).ok();
            self.runs.insert(
                id,
                WatchedRun {
                    stamp: path.as_deref().and_then(stamp),
                    record,
                    liveness,
                    liveness_at: Instant::now(),
                    tasks,
                    fresh: true,
                },
            );
        }
        Ok(())
    }

    /// Reads what changed in run `id`; returns its tasks whose rows must be
    /// redone (every task, the first time).
    fn refresh_run(&mut self, id: &str) -> BTreeSet<TaskId> {
        let mut dirty = BTreeSet::new();
        let state = &self.state;
        let Some(run) = self.runs.get_mut(id) else {
            return dirty;
        };
        let path = state.run_state_path(id).ok();
        let now_stamp = path.as_deref().and_then(stamp);
        let mut look_at_liveness = run.liveness_at.elapsed() >= LIVENESS_EVERY;
        if now_stamp != run.stamp
            && let Ok(record) = reprise_engine::load_run(state, id)
        {
            self.last_reads += 1;
            for task in &record.tasks {
                if run.record.task(&task.task_id) != Some(task) {
                    dirty.insert(task.task_id.clone());
                }
            }
            run.record = record;
            run.stamp = now_stamp;
            look_at_liveness = true;
        }
        if look_at_liveness {
            let liveness = reprise_engine::liveness(state, &run.record);
            run.liveness_at = Instant::now();
            if liveness != run.liveness {
                run.liveness = liveness;
                dirty.extend(run.tasks.keys().cloned());
            }
        }
        for (task_id, task) in &mut run.tasks {
            if task.tail.read_new(id) {
                self.last_reads += 1;
                dirty.insert(task_id.clone());
            }
            // An approval writes no journal row: its file is looked for
            // while a park waits for one.
            if let Some(park) = open_park(&task.tail.rows)
                && matches!(park.body.wake, Wake::Approval)
                && !task.approved
                && reprise_store::approvals::approval_path(state, &task.key, park.park).is_file()
            {
                task.approved = true;
                dirty.insert(task_id.clone());
            }
        }
        if std::mem::take(&mut run.fresh) {
            dirty.extend(run.tasks.keys().cloned());
        }
        dirty
    }
}

/// A journal read from where the last read stopped: the rows of one run,
/// its latest `task.started` on.
#[derive(Debug)]
struct JournalTail {
    path: PathBuf,
    offset: u64,
    /// A line not yet whole.
    partial: Vec<u8>,
    rows: Vec<JournalRow>,
    started: bool,
}

impl JournalTail {
    fn new(path: PathBuf) -> Self {
        Self {
            path,
            offset: 0,
            partial: Vec::new(),
            rows: Vec::new(),
            started: false,
        }
    }

    /// Reads the lines appended since the last call; whether any row of
    /// the run came.
    fn read_new(&mut self, run_id: &str) -> bool {
        let path = self.path.clone();
        let Some(now) = stamp(&path) else {
            return false;
        };
        if now.len < self.offset + self.partial.len() as u64 {
            // Cut (a torn tail repaired): read it again from the start.
            *self = Self::new(path.clone());
        }
        let from = self.offset + self.partial.len() as u64;
        if now.len <= from {
            return false;
        }
        let Ok(mut file) = std::fs::File::open(&path) else {
            return false;
        };
        let mut fresh = Vec::new();
        if file.seek(std::io::SeekFrom::Start(from)).is_err()
            || file.read_to_end(&mut fresh).is_err()
        {
            return false;
        }
        let mut bytes = std::mem::take(&mut self.partial);
        bytes.extend_from_slice(&fresh);
        let whole = bytes
            .iter()
            .rposition(|byte| *byte == b'\n')
            .map_or(0, |at| at + 1);
        self.partial = bytes.split_off(whole);
        self.offset += whole as u64;
        let mut came = false;
        for line in bytes
            .split(|byte| *byte == b'\n')
            .filter(|line| !line.is_empty())
        {
            let Ok(row) = serde_json::from_slice::<JournalRow>(line) else {
                continue;
            };
            let row_run = row.body.get("run_id").and_then(serde_json::Value::as_str);
            if row.kind == reprise_core::lifecycle::rows::TASK_STARTED && row_run == Some(run_id) {
                self.rows.clear();
                self.started = true;
            } else if !self.started || row_run.is_some_and(|id| id != run_id) {
                continue;
            }
            self.rows.push(row);
            came = true;
        }
        came
    }
}

/// A park that no resume settled.
struct OpenPark {
    park: reprise_core::digest::Digest,
    body: SuspendBody,
}

/// The latest park of `rows` that no later row resumed.
fn open_park(rows: &[JournalRow]) -> Option<OpenPark> {
    let index = rows.iter().rposition(|row| row.kind == SUSPEND_KIND)?;
    let park = rows[index].event_hash;
    let settled = rows[index + 1..].iter().any(|later| {
        later.kind == RESUME_KIND
            && body_of::<ResumeBody>(&later.kind, &later.body)
                .is_some_and(|resume| resume.park == park)
    });
    if settled {
        return None;
    }
    let body = body_of::<SuspendBody>(&rows[index].kind, &rows[index].body)?;
    Some(OpenPark { park, body })
}

/// One task's row on the board.
fn task_view(
    state: &StateDir,
    host: &str,
    run: &WatchedRun,
    record: &TaskRecord,
    task: &WatchedTask,
) -> TaskView {
    let rows = &task.tail.rows;
    let live = matches!(run.liveness, Liveness::Live { .. });
    let progress = (!rows.is_empty()).then(|| reprise_engine::progress_of(rows));
    let (journal_attempts, started) = reprise_engine::attempts_of(rows);
    let attempts = if journal_attempts.len() > record.attempts.len() {
        &journal_attempts
    } else {
        &record.attempts
    };
    let mut spend: reprise_core::plan::Spend = attempts.iter().map(|a| a.cost_micro_usd).collect();
    let last_finished = attempts.last().map_or(0, |attempt| attempt.n);
    let lifecycle = progress.as_ref().map(|progress| progress.state);
    let at_work = lifecycle.is_some_and(|state| {
        !matches!(
            state,
            TaskState::Queued
                | TaskState::Finished(_)
                | TaskState::Suspended { .. }
                | TaskState::Paused { .. }
        )
    });
    if started > last_finished && !record.state.is_terminal() {
        // An attempt under way has not said what it cost.
        spend.add(None);
    }
    let phase = phase_of(record, lifecycle, live);
    let attempt_started_ms = progress
        .as_ref()
        .and_then(|progress| progress.attempt_started_at.as_deref())
        .filter(|_| live && at_work)
        .and_then(unix_ms);
    TaskView {
        run_id: run.record.run_id.clone(),
        plan: task.key.plan.to_string(),
        task_id: record.task_id.to_string(),
        phase,
        attempt: started.max(last_finished),
        attempt_started_ms,
        spent_known_micro_usd: spend.known_micro_usd,
        costs_unknown: spend.unknown,
        host: host.to_owned(),
        flag: flag_of(state, record, task, lifecycle),
        live,
    }
}

/// Where the task is, in a word or two: the journal's lifecycle where it
/// has gone further than the snapshot, what it waits for in a live run.
fn phase_of(record: &TaskRecord, lifecycle: Option<TaskState>, live: bool) -> String {
    if let Some(TaskState::Finished(terminal)) = lifecycle {
        return terminal.as_str().to_owned();
    }
    if record.state.is_terminal() && record.state != TaskStatus::Suspended {
        return record.state.as_str().to_owned();
    }
    if let Some(waiting) = record.waiting.as_ref().filter(|_| live)
        && lifecycle.is_none_or(|state| state == TaskState::Queued)
    {
        return format!("waiting ({})", waiting.reason.as_str());
    }
    match lifecycle {
        Some(state) => state.name().replace('_', " "),
        None => record.state.as_str().to_owned(),
    }
}

/// Why the task needs attention, if it does.
fn flag_of(
    state: &StateDir,
    record: &TaskRecord,
    task: &WatchedTask,
    lifecycle: Option<TaskState>,
) -> Option<Flag> {
    let parked = matches!(lifecycle, Some(TaskState::Suspended { .. }))
        || (lifecycle.is_none() && record.state == TaskStatus::Suspended);
    if parked && let Some(park) = open_park(&task.tail.rows) {
        let body = park.body;
        let waits_for_approval = matches!(body.wake, Wake::Approval) && !task.approved;
        if body.cause == ParkCause::Permission && waits_for_approval {
            let question = match body.question_hash {
                Some(hash) => reprise_store::replies::read_agent_text(
                    state,
                    &body.run_id,
                    &task.key.task,
                    hash,
                )
                .ok()
                .flatten(),
                None => body.question,
            };
            return Some(Flag::Permission { question });
        }
        return Some(match body.wake {
            Wake::Approval if waits_for_approval => Flag::Approval,
            Wake::Approval => Flag::Parked {
                approved: true,
                reason: body.reason,
            },
            Wake::Time { at } if body.cause == ParkCause::UsageLimit => {
                Flag::UsageLimit { resets_at: at }
            }
            Wake::Time { at } => Flag::UntilTime { at },
            Wake::Resume => Flag::Parked {
                approved: false,
                reason: body.reason,
            },
        });
    }
    if matches!(lifecycle, Some(TaskState::Finished(_)))
        || lifecycle.is_none()
        || record.state.is_terminal()
    {
        return match record.state {
            TaskStatus::Failed => Some(Flag::Failed {
                reason: record.reason.clone(),
            }),
            TaskStatus::Blocked => Some(Flag::Blocked {
                reason: record.reason.clone(),
            }),
            _ => None,
        };
    }
    None
}

/// An RFC 3339 time as Unix milliseconds.
fn unix_ms(at: &str) -> Option<i64> {
    let at = humantime::parse_rfc3339_weak(at).ok()?;
    let since = at.duration_since(SystemTime::UNIX_EPOCH).ok()?;
    i64::try_from(since.as_millis()).ok()
}

/// Now, as Unix milliseconds.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |since| {
            i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
        })
}

/// This machine's name, for the host column of local runs.
fn local_host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// Sets the host of the board's rows that a fleet's worker holds, and adds
/// the fleet's unfinished tasks this state directory does not show (of
/// `named` only, when one run was asked for).
pub(crate) fn apply_fleet(
    board: &mut Board,
    status: &reprise_fleet::FleetStatus,
    named: Option<&str>,
) -> usize {
    let mut changed = 0;
    let mut by_run_task: BTreeMap<(&str, &str), Vec<RowKey>> = BTreeMap::new();
    for view in board.tasks() {
        by_run_task
            .entry((view.run_id.as_str(), view.task_id.as_str()))
            .or_default()
            .push(view.key());
    }
    let by_run_task: BTreeMap<(String, String), Vec<RowKey>> = by_run_task
        .into_iter()
        .map(|((run, task), keys)| ((run.to_owned(), task.to_owned()), keys))
        .collect();
    for task in &status.tasks {
        if named.is_some_and(|named| named != task.run_id) {
            continue;
        }
        let host = task.holder.clone().unwrap_or_else(|| "-".to_owned());
        match by_run_task.get(&(task.run_id.clone(), task.task_id.clone())) {
            Some(keys) => {
                for key in keys {
                    if let Some(view) = board.get(key).filter(|view| view.host != host).cloned() {
                        changed += usize::from(board.update(TaskView {
                            host: host.clone(),
                            ..view
                        }));
                    }
                }
            }
            None if task.state == "finished" => {}
            None => {
                let view = TaskView {
                    run_id: task.run_id.clone(),
                    plan: "-".to_owned(),
                    task_id: task.task_id.clone(),
                    phase: format!("{} (fleet)", task.state),
                    attempt: 0,
                    attempt_started_ms: None,
                    spent_known_micro_usd: 0,
                    // The fleet's tables hold no cost: the coordinator's
                    // state directory does.
                    costs_unknown: 1,
                    host,
                    flag: (task.state == "failed").then_some(Flag::Failed { reason: None }),
                    live: task.state == "running",
                };
                changed += usize::from(board.update(view));
            }
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const RUN: &str = "R-01J00000000000000000000000";

    fn row(seq: u64, kind: &str) -> String {
        let row = JournalRow {
            v: 1,
            seq,
            kind: kind.to_owned(),
            task_id: "t".to_owned(),
            at: "2026-12-01T18:00:00Z".to_owned(),
            body: json!({"run_id": RUN}),
            prev_hash: reprise_core::digest::Digest::ZERO,
            event_hash: reprise_core::digest::Digest::ZERO,
        };
        format!("{}\n", serde_json::to_string(&row).unwrap())
    }

    /// A state directory with one unfinished run of `count` tasks, each
    /// with a journal of two rows.
    fn big_run(count: usize) -> (tempfile::TempDir, StateDir) {
        let dir = tempfile::tempdir().unwrap();
        let (state, _) = StateDir::create(&dir.path().join(".reprise")).unwrap();
        let tasks: Vec<serde_json::Value> = (0..count)
            .map(|n| {
                json!({"task_id": format!("t{n:03}"), "state": "running", "agent": "sim",
                       "attempts": [], "spent_micro_usd": 0, "reason": null, "metadata": {}})
            })
            .collect();
        let run = json!({"v": 1, "run_id": RUN, "plan": "big.yaml", "plan_name": "big",
                         "started_at": "2026-12-01T18:00:00Z", "finished_at": null, "ok": null,
                         "tasks": tasks});
        let path = state.run_state_path(RUN).unwrap();
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, serde_json::to_vec(&run).unwrap()).unwrap();
        for n in 0..count {
            let key = TaskKey::new(
                reprise_core::PlanId::parse("big").unwrap(),
                TaskId::parse(&format!("t{n:03}")).unwrap(),
            );
            let journal = state.journal_path(&key);
            std::fs::create_dir_all(journal.parent().unwrap()).unwrap();
            std::fs::write(
                &journal,
                row(1, "task.started") + &row(2, "attempt.started"),
            )
            .unwrap();
        }
        (dir, state)
    }

    /// A `task.suspend` row of `wake` and `cause`.
    fn park_row(wake: Wake, cause: ParkCause, question: Option<&str>) -> JournalRow {
        let body = SuspendBody {
            run_id: RUN.to_owned(),
            attempt: 1,
            session_id: None,
            workspace_hash: reprise_core::digest::Digest::ZERO,
            journal_head: None,
            envelope: Default::default(),
            wake,
            cause,
            reason: Some("look first".to_owned()),
            question: question.map(str::to_owned),
            question_hash: None,
            grant_hash: String::new(),
            requested_by: None,
        };
        JournalRow {
            v: 1,
            seq: 3,
            kind: SUSPEND_KIND.to_owned(),
            task_id: "t".to_owned(),
            at: "2026-12-01T18:00:00Z".to_owned(),
            body: serde_json::to_value(body).unwrap(),
            prev_hash: reprise_core::digest::Digest::ZERO,
            event_hash: reprise_core::digest::Digest::ZERO,
        }
    }

    #[test]
    fn each_park_is_flagged_by_what_wakes_it() {
        let (_dir, state) = big_run(1);
        let record: TaskRecord = serde_json::from_value(json!({
            "task_id": "t000", "state": "suspended", "agent": "sim", "attempts": [],
            "spent_micro_usd": 0, "reason": null, "metadata": {}}))
        .unwrap();
        let key = TaskKey::new(
            reprise_core::PlanId::parse("big").unwrap(),
            TaskId::parse("t000").unwrap(),
        );
        let flag = |rows: Vec<JournalRow>, approved: bool| {
            let mut tail = JournalTail::new(state.journal_path(&key));
            tail.rows = rows;
            let task = WatchedTask {
                key: key.clone(),
                tail,
                approved,
            };
            flag_of(
                &state,
                &record,
                &task,
                Some(TaskState::Suspended { attempt: 1 }),
            )
        };
        let at = "2026-12-01T19:00:00Z".to_owned();
        assert_eq!(
            flag(
                vec![park_row(Wake::Approval, ParkCause::Request, None)],
                false
            ),
            Some(Flag::Approval)
        );
        assert_eq!(
            flag(
                vec![park_row(Wake::Approval, ParkCause::Request, None)],
                true
            ),
            Some(Flag::Parked {
                approved: true,
                reason: Some("look first".to_owned())
            })
        );
        assert_eq!(
            flag(
                vec![park_row(
                    Wake::Approval,
                    ParkCause::Permission,
                    Some("may I push?")
                )],
                false
            ),
            Some(Flag::Permission {
                question: Some("may I push?".to_owned())
            })
        );
        assert_eq!(
            flag(
                vec![park_row(
                    Wake::Time { at: at.clone() },
                    ParkCause::UsageLimit,
                    None
                )],
                false
            ),
            Some(Flag::UsageLimit {
                resets_at: at.clone()
            })
        );
        assert_eq!(
            flag(
                vec![park_row(
                    Wake::Time { at: at.clone() },
                    ParkCause::Request,
                    None
                )],
                false
            ),
            Some(Flag::UntilTime { at })
        );
        assert_eq!(
            flag(
                vec![park_row(Wake::Resume, ParkCause::Request, None)],
                false
            ),
            Some(Flag::Parked {
                approved: false,
                reason: Some("look first".to_owned())
            })
        );
        // A failed task of a finished journal is flagged with its reason.
        let failed: TaskRecord = serde_json::from_value(json!({
            "task_id": "t000", "state": "failed", "agent": "sim", "attempts": [],
            "spent_micro_usd": 0, "reason": "out of attempts", "metadata": {}}))
        .unwrap();
        let task = WatchedTask {
            key: key.clone(),
            tail: JournalTail::new(state.journal_path(&key)),
            approved: false,
        };
        assert_eq!(
            flag_of(&state, &failed, &task, None),
            Some(Flag::Failed {
                reason: Some("out of attempts".to_owned())
            })
        );
    }

    #[test]
    fn a_poll_reads_only_the_files_that_changed_and_remakes_only_their_tasks() {
        let (_dir, state) = big_run(200);
        let journal = state.journal_path(&TaskKey::new(
            reprise_core::PlanId::parse("big").unwrap(),
            TaskId::parse("t007").unwrap(),
        ));
        let mut source = Source::new(state, None).unwrap();
        let mut board = Board::new();
        assert_eq!(source.poll(&mut board).unwrap(), 200);
        assert_eq!(board.len(), 200);
        // The run's snapshot and every journal, once.
        assert_eq!(source.last_reads, 201);
        assert_eq!(source.last_rebuilt, 200);
        // Nothing changed: nothing read, nothing made again.
        source.poll(&mut board).unwrap();
        assert_eq!((source.last_reads, source.last_rebuilt), (0, 0));
        // One journal grew: its new line is read, its one task made again.
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&journal)
            .unwrap();
        std::io::Write::write_all(&mut file, row(3, "task.checkpoint").as_bytes()).unwrap();
        source.poll(&mut board).unwrap();
        assert_eq!((source.last_reads, source.last_rebuilt), (1, 1));
        // Half a line is not a row: it waits for the rest.
        std::io::Write::write_all(&mut file, b"{\"v\":1").unwrap();
        source.poll(&mut board).unwrap();
        assert_eq!(source.last_rebuilt, 0);
    }
}
