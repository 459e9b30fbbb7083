//! The coordinator's side of the control socket: binding it, answering
//! what it can at once (a ping, a pause, a park request filed with the
//! task's thread), and finishing a park the task's thread recorded.

use std::collections::BTreeMap;

use reprise_core::{TaskId, TaskKey};
use reprise_store::audit::{AuditLog, seal_ledger};
use reprise_store::ledger::Ledger;
use reprise_store::state::{StateDir, now_rfc3339};

use super::answers;
use crate::error::Result;
use crate::events::{Event, EventSink};
use crate::park::Parked;
use crate::state::{RunState, TaskStatus};

/// The run's control socket, or a warning that parks and pauses cannot
/// reach this run.
pub(super) fn bind_control(
    state: &StateDir,
    run_id: &str,
    sink: &mut dyn EventSink,
) -> Option<crate::control::ControlServer> {
    match crate::control::ControlServer::bind(&crate::control::socket_path(state, run_id)) {
        Ok(server) => Some(server),
        Err(err) => {
            sink.event(&Event::Warning {
                task: None,
                message: format!(
                    "no control socket ({err}): `reprise task suspend` cannot reach this run"
                ),
            });
            None
        }
    }
}

/// Sets the flag when dropped: the control socket's thread stops serving.
pub(super) struct StopOnDrop<'a>(pub(super) &'a std::sync::atomic::AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The coordinator's answer to a control request, or `None` when the
/// answer comes later: a suspend is filed with the task's thread, and the
/// coordinator answers when it has finished the park.
pub(super) fn control_answer(
    request: &crate::control::ControlRequest,
    op: &crate::control::ControlOp,
    run: &RunState,
    position: &BTreeMap<&TaskId, usize>,
    controls: &BTreeMap<TaskId, crate::park::TaskControl>,
) -> Option<serde_json::Value> {
    use crate::control::ControlOp;
    let reply = &request.reply;
    let requested_by = Some(request.requester.clone());
    let filed = |outcome: std::result::Result<(), String>| outcome.err().map(answers::refused);
    match op {
        ControlOp::Ping => Some(answers::pong(&run.run_id)),
        ControlOp::Resume { .. } => {
            Some(answers::refused("a resume is the coordinator's to answer"))
        }
        ControlOp::Pause {
            task,
            upgrade_after_ms,
        } => {
            if let Err(refusal) = running_task(run, position, task, "paused") {
                return Some(refusal);
            }
            let stop = crate::park::Stop::Pause {
                upgrade_after: upgrade_after_ms.map(std::time::Duration::from_millis),
                requested_by,
            };
            filed(controls[task].stop(stop, Some(reply.clone())))
        }
        ControlOp::Unpause { task } => {
            let Some(control) = controls.get(task) else {
                return Some(no_task(run, task));
            };
            filed(
                control
                    .unpause(Some(reply.clone()), requested_by)
                    .map_err(|err| format!("task {task}: {err}")),
            )
        }
        ControlOp::Suspend { task, wake, reason } => {
            if let Err(refusal) = running_task(run, position, task, "parked") {
                return Some(refusal);
            }
            let request = crate::control::ControlOp::park_request(wake, reason, &request.requester);
            filed(controls[task].request(request, Some(reply.clone())))
        }
    }
}

/// A refusal: the run has no such task.
fn no_task(run: &RunState, task: &TaskId) -> serde_json::Value {
    answers::refused(format!("run {} has no task {task}", run.run_id))
}

/// `Ok` when `task` is running in `run`, else the refusal to answer: only a
/// running task can be `done` (paused, parked).
fn running_task(
    run: &RunState,
    position: &BTreeMap<&TaskId, usize>,
    task: &TaskId,
    done: &str,
) -> std::result::Result<(), serde_json::Value> {
    let Some(&index) = position.get(task) else {
        return Err(no_task(run, task));
    };
    let status = run.tasks[index].state;
    if status == TaskStatus::Running {
        return Ok(());
    }
    Err(answers::refused(format!(
        "task {task} is {} in run {}: only a running task can be {done}",
        status.as_str(),
        run.run_id
    )))
}

/// What the coordinator needs to finish a park.
pub(super) struct ParkEnd<'a> {
    pub(super) ledger: &'a mut Ledger,
    pub(super) audit: &'a mut AuditLog,
    pub(super) key: &'a TaskKey,
    pub(super) run_id: &'a str,
    pub(super) seats: usize,
    pub(super) running: usize,
    /// The pool's free amount before and after the headroom came back.
    pub(super) pool_free: (Option<u64>, Option<u64>),
}

/// The coordinator's steps of a park: the seat and the budget, each
/// released and recorded, then the ledger's `suspended`, then the answer to
/// whoever asked.
pub(super) fn finish_park(end: ParkEnd<'_>, parked: crate::task::ParkedTask) -> Result<()> {
    use reprise_core::rows::{BudgetReleased, SeatReleased};
    use reprise_store::suspension::Resource;
    let ParkEnd {
        ledger,
        audit,
        key,
        run_id,
        seats,
        running,
        pool_free,
    } = end;
    let receipt = parked.receipt.ok_or_else(|| {
        crate::error::EngineError::Park(format!(
            "the park of {key} came back without its receipt; nothing was released"
        ))
    })?;
    let mut released = parked.released.clone();
    let seat = SeatReleased::Freed {
        seats,
        running_after: running,
    };
    let budget = BudgetReleased::Returned {
        returned_micro_usd: parked.headroom_micro_usd,
        pool_free_before: pool_free.0,
        pool_free_after: pool_free.1,
    };
    for (resource, detail) in [
        (Resource::Seat, crate::park::detail(&seat)),
        (Resource::Budget, crate::park::detail(&budget)),
    ] {
        crate::park::write_release(
            audit,
            key,
            run_id,
            parked.park,
            receipt,
            resource,
            detail.clone(),
        )?;
        released.push((resource, detail));
    }
    let head = ledger.transition(
        &now_rfc3339(),
        run_id,
        &key.task,
        TaskStatus::Running,
        TaskStatus::Suspended,
        Some(&format!("parked until {}", parked.wake.describe())),
    )?;
    seal_ledger(audit, head, &now_rfc3339())?;
    if let Some(reply) = parked.reply {
        let _ = reply.send(answers::parked(&Parked {
            run_id: run_id.to_owned(),
            task: key.clone(),
            park: parked.park,
            receipt,
            released,
            wake: parked.wake,
        }));
    }
    Ok(())
}
