//! The run's record (`runs/<run>/state.json`) as the coordinator keeps it:
//! built before anything runs, carried over from an earlier leg, updated as
//! tasks wait, end and park, and saved no more often than it must be.

use std::collections::BTreeMap;

use reprise_core::TaskId;
use reprise_core::plan::{Plan, Task};
use reprise_store::replies::read_kept_reply;
use reprise_store::state::{StateDir, now_rfc3339};

use super::RunOptions;
use crate::error::Result;
use crate::events::{Event, EventSink};
use crate::sandbox::Workspace;
use crate::state::{RunState, TaskRecord, TaskStatus, WaitReason, Waiting};
use crate::task::{Previous, TaskResult};

/// The run's record before anything ran: every task queued, in
/// dependency order.
pub(super) fn new_record(
    plan: &Plan,
    order: &[&Task],
    options: &RunOptions,
    workspace: &Workspace,
) -> RunState {
    RunState {
        v: 1,
        workspace: Some(workspace.clone()),
        run_id: options.run_id.clone(),
        plan: options.plan_path.display().to_string(),
        plan_name: plan.name().to_owned(),
        started_at: now_rfc3339(),
        finished_at: None,
        ok: None,
        retry_of: options.retry_of.as_ref().map(|prior| prior.run_id.clone()),
        tasks: order
            .iter()
            .map(|task| TaskRecord {
                task_id: task.id.clone(),
                state: TaskStatus::Queued,
                agent: task.agent.kind().as_str().to_owned(),
                attempts: Vec::new(),
                spent_micro_usd: 0,
                judged: false,
                reason: None,
                metadata: BTreeMap::new(),
                gaps: Vec::new(),
                base_commit: None,
                cwd: None,
                output: None,
                waiting: None,
                wake: None,
            })
            .collect(),
    }
}

/// A new leg of finished run `prior`: its delivered tasks keep their state
/// and results in `run`; each judged one gets its kept reply to hear once.
/// Also the warnings for replies that could not be carried.
pub(super) fn carry_prior(
    state: &StateDir,
    prior: &RunState,
    run: &mut RunState,
) -> (BTreeMap<TaskId, Previous>, Vec<(TaskId, String)>) {
    let mut carried = BTreeMap::new();
    let mut warnings = Vec::new();
    for record in &mut run.tasks {
        let Some(before) = prior.task(&record.task_id) else {
            continue;
        };
        if before.state.delivered() {
            record.state = before.state;
            record.reason = Some(format!("{} in {}", before.state.as_str(), prior.run_id));
            record.gaps.clone_from(&before.gaps);
            // Its result, committed in that run, is what dependents
            // build on in this one.
            record.base_commit.clone_from(&before.base_commit);
            record.output.clone_from(&before.output);
            record.cwd.clone_from(&before.cwd);
            continue;
        }
        if before.judged {
            match read_kept_reply(state, &prior.run_id, &record.task_id) {
                Ok(Some(reply)) => {
                    carried.insert(record.task_id.clone(), Previous::carried(reply));
                }
                Ok(None) => warnings.push((
                    record.task_id.clone(),
                    format!(
                        "no kept reply in {}: re-running without a quote",
                        prior.run_id
                    ),
                )),
                Err(err) => warnings.push((
                    record.task_id.clone(),
                    format!("kept reply unreadable ({err}): re-running without a quote"),
                )),
            }
        }
    }
    (carried, warnings)
}

/// Rewrites `state.json` at most every `SAVE_EVERY` while a run goes on: a
/// run of a thousand short tasks must not rewrite its whole snapshot a
/// thousand times. The last save of a run is always made, and synced.
pub(super) struct Saver {
    pub(super) last: std::time::Instant,
    /// The snapshot is behind the run: a save was held back by the throttle.
    pub(super) dirty: bool,
}

const SAVE_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

impl Saver {
    pub(super) fn maybe_save(&mut self, run: &RunState, state: &StateDir) -> Result<()> {
        if self.last.elapsed() >= SAVE_EVERY {
            run.save(state, false)?;
            self.last = std::time::Instant::now();
            self.dirty = false;
        } else {
            self.dirty = true;
        }
        Ok(())
    }

    /// How long until a held-back save may be written (`None`: nothing is
    /// held back).
    pub(super) fn due_in(&self) -> Option<std::time::Duration> {
        self.dirty
            .then(|| SAVE_EVERY.saturating_sub(self.last.elapsed()))
    }
}

/// Records why a queued task waits, and says so when that changed.
pub(super) fn wait(
    run: &mut RunState,
    sink: &mut dyn EventSink,
    task: &TaskId,
    reason: WaitReason,
    detail: String,
) {
    let waiting = Waiting { reason, detail };
    let record = run.task_mut(task);
    if record.waiting.as_ref() != Some(&waiting) {
        record.waiting = Some(waiting.clone());
        sink.event(&Event::TaskWaiting {
            task: task.clone(),
            waiting,
        });
    }
}

pub(super) fn apply(run: &mut RunState, id: &TaskId, result: &TaskResult) {
    let record = run.task_mut(id);
    // Gate output lives only in memory, for the next prompt: the run state
    // holds verdicts, never what a gate printed.
    record.attempts = result
        .attempts
        .iter()
        .cloned()
        .map(|mut attempt| {
            for gate in &mut attempt.gates {
                gate.output.clear();
            }
            attempt
        })
        .collect();
    record.spent_micro_usd = result.spent_micro_usd;
    record.judged = result.judged;
    record.metadata = result.metadata.clone();
    record.cwd.clone_from(&result.cwd);
    record.output.clone_from(&result.output);
    record.gaps.clone_from(&result.gaps);
}

pub(super) fn finish(
    run: &mut RunState,
    sink: &mut dyn EventSink,
    id: &TaskId,
    status: TaskStatus,
    reason: Option<String>,
) {
    let record = run.task_mut(id);
    record.state = status;
    record.reason = reason.clone();
    if status != TaskStatus::Suspended {
        record.wake = None;
    }
    sink.event(&Event::TaskFinished {
        task: id.clone(),
        status,
        reason,
    });
}
