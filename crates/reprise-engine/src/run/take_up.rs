//! What a continued run takes up: each unsettled task's continuation from
//! its ledger state and journal, the parks it wakes at their time, and a
//! resume asked of the live run.

use std::collections::BTreeMap;
use std::time::SystemTime;

use reprise_core::plan::Plan;
use reprise_core::{TaskId, TaskKey};
use reprise_store::state::StateDir;

use super::Continuing;
use super::answers;
use crate::error::Result;
use crate::events::{Event, EventSink};
use crate::state::{RunState, TaskStatus};

/// How a task comes back: its continuation, the ledger state it leaves,
/// and the base it started from.
pub(super) type TakenUp = (crate::task::Continuation, TaskStatus, Option<String>);

/// What a continued run takes up: how each task not yet settled comes back
/// (its continuation, the ledger state it leaves, the base it started
/// from), what each had spent, and the parks it wakes at their time.
#[derive(Debug, Default)]
pub(super) struct TakenUpRun {
    pub(super) continuations: BTreeMap<TaskId, TakenUp>,
    pub(super) spent_before: BTreeMap<TaskId, u64>,
    /// The timed parks and when each wakes.
    pub(super) timed: BTreeMap<TaskId, SystemTime>,
    /// Tasks a stop cancelled, queued again (the ledger hears it first).
    pub(super) requeued: Vec<TaskId>,
}

/// Rebuilds a continued run's record from its ledger (the truth about each
/// task) and its last saved state, and says how each unsettled task is
/// taken up.
pub(super) fn take_up_run(
    state: &StateDir,
    plan: &Plan,
    audit: &reprise_store::audit::AuditSummary,
    run: &mut RunState,
    continuing: &Continuing,
) -> Result<TakenUpRun> {
    let prior = &continuing.prior;
    let ledger = reprise_store::ledger::verify_ledger(state, audit)?;
    run.started_at.clone_from(&prior.started_at);
    run.retry_of.clone_from(&prior.retry_of);
    run.plan.clone_from(&prior.plan);
    let mut taken = TakenUpRun::default();
    let run_id = run.run_id.clone();
    for record in &mut run.tasks {
        if let Some(before) = prior.task(&record.task_id) {
            carry_over(record, before);
        }
        let key = TaskKey::new(plan.id().clone(), record.task_id.clone());
        let ledger_state = ledger.state_of(&run_id, record.task_id.as_str());
        let taking = TakingUp {
            state,
            audit,
            continuing,
            key: &key,
            run_id: &run_id,
        };
        taking.take_up(record, ledger_state, &mut taken);
    }
    Ok(taken)
}

/// What the last saved state knew of a task that the continued run keeps.
fn carry_over(record: &mut crate::state::TaskRecord, before: &crate::state::TaskRecord) {
    record.attempts.clone_from(&before.attempts);
    record.spent_micro_usd = before.spent_micro_usd;
    record.judged = before.judged;
    record.metadata.clone_from(&before.metadata);
    record.gaps.clone_from(&before.gaps);
    record.base_commit.clone_from(&before.base_commit);
    record.cwd.clone_from(&before.cwd);
    record.output.clone_from(&before.output);
    record.reason.clone_from(&before.reason);
    record.wake.clone_from(&before.wake);
}

/// One task of a continued run, being taken up.
struct TakingUp<'a> {
    state: &'a StateDir,
    audit: &'a reprise_store::audit::AuditSummary,
    continuing: &'a Continuing,
    key: &'a TaskKey,
    run_id: &'a str,
}

impl TakingUp<'_> {
    /// Sets the task's state from where the ledger left it, and notes how
    /// it comes back, if it does.
    fn take_up(
        &self,
        record: &mut crate::state::TaskRecord,
        ledger_state: Option<TaskStatus>,
        taken: &mut TakenUpRun,
    ) {
        let id = self.key.task.clone();
        let base = || journal_base(self.state, self.key, self.run_id);
        match ledger_state {
            None | Some(TaskStatus::Queued) => record.state = TaskStatus::Queued,
            Some(TaskStatus::Running) => {
                record.state = TaskStatus::Queued;
                taken.continuations.insert(
                    id,
                    (
                        crate::task::Continuation::Interrupted,
                        TaskStatus::Running,
                        base(),
                    ),
                );
            }
            Some(TaskStatus::Suspended) => {
                record.state = self.parked(taken);
            }
            // Cancelled by the run's stop: taken up where its journal says
            // the stop caught it, or started if it never did.
            Some(TaskStatus::Cancelled) => {
                record.state = TaskStatus::Queued;
                taken.requeued.push(id.clone());
                if !crate::resume::rows_of_run(self.state, self.key, self.run_id).is_empty() {
                    taken.continuations.insert(
                        id,
                        (
                            crate::task::Continuation::Cancelled,
                            TaskStatus::Queued,
                            base(),
                        ),
                    );
                }
            }
            Some(ended) => {
                record.state = ended;
                if record.state.delivered() && record.output.is_none() {
                    record.output = journal_output(self.state, self.key, self.run_id);
                }
            }
        }
    }

    /// A parked task: resumed when the continue asked for it (queued),
    /// else it stays parked, its wake time noted when it has one.
    fn parked(&self, taken: &mut TakenUpRun) -> TaskStatus {
        let id = self.key.task.clone();
        if let Some(resume) = self.continuing.resume.get(&id) {
            let continuation = crate::task::Continuation::Resume {
                point: Box::new(resume.point.clone()),
                mode: resume.mode,
                approval: resume.approval,
            };
            let base = journal_base(self.state, self.key, self.run_id);
            taken
                .continuations
                .insert(id, (continuation, TaskStatus::Suspended, base));
            return TaskStatus::Queued;
        }
        if let Some(point) = crate::resume::latest_park(self.state, self.key, self.audit)
            && let reprise_store::suspension::Wake::Time { at } = &point.body.wake
            && let Ok(at) = humantime::parse_rfc3339_weak(at)
        {
            taken.timed.insert(id, at);
        }
        TaskStatus::Suspended
    }
}

/// Wakes the timed parks whose time has come: each is checked as any
/// resume is and queued to run; a park that fails the checks stays parked,
/// with a warning.
pub(super) fn wake_due(
    state: &StateDir,
    key: &reprise_store::key::KeyFile,
    run: &mut RunState,
    taken: &mut TakenUpRun,
    plan_key: &dyn Fn(&TaskId) -> TaskKey,
    sink: &mut dyn EventSink,
) {
    let now = SystemTime::now();
    let due =
        reprise_core::schedule::due(taken.timed.iter().map(|(id, at)| (id.clone(), *at)), now);
    for id in due {
        taken.timed.remove(&id);
        let task_key = plan_key(&id);
        match crate::resume::check_resume(state, key, &task_key, None) {
            Ok(point) => {
                run.task_mut(&id).state = TaskStatus::Queued;
                let base = journal_base(state, &task_key, &run.run_id);
                taken.continuations.insert(
                    id,
                    (
                        crate::task::Continuation::Resume {
                            point: Box::new(point),
                            mode: None,
                            approval: None,
                        },
                        TaskStatus::Suspended,
                        base,
                    ),
                );
            }
            Err(refusal) => sink.event(&Event::Warning {
                task: Some(id),
                message: format!("its wake time came but it stays parked: {refusal}"),
            }),
        }
    }
}

/// A resume asked of the live run: checked as any resume is, then the task
/// is queued to run again in a free seat.
pub(super) fn resume_in_run(
    (state, key): (&StateDir, &reprise_store::key::KeyFile),
    run: &mut RunState,
    taken: &mut TakenUpRun,
    task: &TaskKey,
    mode: Option<&str>,
    receipt: Option<reprise_core::digest::Digest>,
) -> serde_json::Value {
    let Some(record) = run.task(&task.task) else {
        return answers::refused(format!("run {} has no task {}", run.run_id, task.task));
    };
    if record.state != TaskStatus::Suspended {
        return answers::refused(format!(
            "task {task} is {} in run {}, not parked",
            record.state.as_str(),
            run.run_id
        ));
    }
    let mode = match mode {
        None => None,
        Some(name) => match reprise_core::retry::RetryMode::from_name(name) {
            Some(mode) => Some(mode),
            None => return answers::refused(format!("{name:?} is not warm, fork or cold")),
        },
    };
    match crate::resume::check_resume(state, key, task, receipt) {
        Ok(point) => {
            run.task_mut(&task.task).state = TaskStatus::Queued;
            taken.timed.remove(&task.task);
            let base = journal_base(state, task, &run.run_id);
            taken.continuations.insert(
                task.task.clone(),
                (
                    crate::task::Continuation::Resume {
                        point: Box::new(point),
                        mode,
                        approval: None,
                    },
                    TaskStatus::Suspended,
                    base,
                ),
            );
            answers::queued(&run.run_id, &task.task)
        }
        Err(refusal) => answers::refused(refusal.to_string()),
    }
}

/// A journal row of `run_id` of the given kind, the latest.
fn journal_row(
    state: &StateDir,
    key: &TaskKey,
    run_id: &str,
    kind: &str,
) -> Option<serde_json::Value> {
    crate::resume::journal_rows(state, key)
        .into_iter()
        .rev()
        .find(|row| {
            row.kind == kind
                && row.body.get("run_id").and_then(serde_json::Value::as_str) == Some(run_id)
        })
        .map(|row| row.body)
}

/// The base commit the task's `task.started` recorded in `run_id`.
pub(super) fn journal_base(state: &StateDir, key: &TaskKey, run_id: &str) -> Option<String> {
    journal_row(
        state,
        key,
        run_id,
        reprise_core::lifecycle::rows::TASK_STARTED,
    )?
    .get("base_commit")?
    .as_str()
    .map(str::to_owned)
}

/// The result the task committed in `run_id`, from its `task.result` row.
fn journal_output(
    state: &StateDir,
    key: &TaskKey,
    run_id: &str,
) -> Option<crate::sandbox::TaskOutput> {
    crate::sandbox::result_output(&journal_row(
        state,
        key,
        run_id,
        reprise_core::lifecycle::rows::RESULT,
    )?)
}
