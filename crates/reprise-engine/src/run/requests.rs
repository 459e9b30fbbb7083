//! The coordinator's side of the control socket: binding it, answering
//! what it can at once (a ping, a pause, a park request filed with the
//! task's thread), and finishing a park the task's thread recorded.

use std::collections::BTreeMap;

use reprise_core::{TaskId, TaskKey};
use reprise_store::audit::{AuditLog, seal_ledger};
use reprise_store::ledger::Ledger;
use reprise_store::state::{StateDir, now_rfc3339};

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
    use serde_json::json;
    let reply = &request.reply;
    let requested_by = Some(request.requester.clone());
    match op {
        ControlOp::Ping => {
            Some(json!({"ok": true, "run_id": run.run_id, "pid": std::process::id()}))
        }
        ControlOp::Resume { .. } => {
            Some(json!({"ok": false, "error": "a resume is the coordinator's to answer"}))
        }
        ControlOp::Pause {
            task,
            upgrade_after_ms,
        } => {
            let Some(&index) = position.get(task) else {
                return Some(
                    json!({"ok": false, "error": format!("run {} has no task {task}", run.run_id)}),
                );
            };
            let status = run.tasks[index].state;
            if status != TaskStatus::Running {
                return Some(json!({"ok": false, "error": format!(
                    "task {task} is {} in run {}: only a running task can be paused", status.as_str(), run.run_id)}));
            }
            let stop = crate::park::Stop::Pause {
                upgrade_after: upgrade_after_ms.map(std::time::Duration::from_millis),
                requested_by,
            };
            match controls[task].stop(stop, Some(reply.clone())) {
                Ok(()) => None,
                Err(err) => Some(json!({"ok": false, "error": err})),
            }
        }
        ControlOp::Unpause { task } => {
            let Some(control) = controls.get(task) else {
                return Some(
                    json!({"ok": false, "error": format!("run {} has no task {task}", run.run_id)}),
                );
            };
            match control.unpause(Some(reply.clone()), requested_by) {
                Ok(()) => None,
                Err(err) => Some(json!({"ok": false, "error": format!("task {task}: {err}")})),
            }
        }
        ControlOp::Suspend { task, wake, reason } => {
            let Some(&index) = position.get(task) else {
                return Some(
                    json!({"ok": false, "error": format!("run {} has no task {task}", run.run_id)}),
                );
            };
            let status = run.tasks[index].state;
            if status != TaskStatus::Running {
                return Some(json!({"ok": false, "error": format!(
                    "task {task} is {} in run {}: only a running task can be parked", status.as_str(), run.run_id)}));
            }
            let request = crate::control::ControlOp::park_request(wake, reason, &request.requester);
            match controls[task].request(request, Some(reply.clone())) {
                Ok(()) => None,
                Err(err) => Some(json!({"ok": false, "error": err})),
            }
        }
    }
}

fn parked_json(parked: &Parked) -> serde_json::Value {
    serde_json::json!({
        "ok": true,
        "run_id": parked.run_id,
        "task": parked.task.task,
        "plan": parked.task.plan,
        "park": parked.park,
        "receipt": parked.receipt,
        "wake": parked.wake,
        "released": parked.released.iter().map(|(resource, detail)| serde_json::json!({"resource": resource, "detail": detail})).collect::<Vec<_>>(),
    })
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
    let mut released = parked.released.clone();
    let seat = serde_json::json!({"seats": seats, "running_after": running});
    crate::park::write_release(
        audit,
        key,
        run_id,
        parked.park,
        parked.receipt,
        Resource::Seat,
        seat.clone(),
    )?;
    released.push((Resource::Seat, seat));
    let budget = serde_json::json!({"returned_micro_usd": parked.headroom_micro_usd,
        "pool_free_before": pool_free.0, "pool_free_after": pool_free.1});
    crate::park::write_release(
        audit,
        key,
        run_id,
        parked.park,
        parked.receipt,
        Resource::Budget,
        budget.clone(),
    )?;
    released.push((Resource::Budget, budget));
    let head = ledger.transition(
        &now_rfc3339(),
        run_id,
        &key.task,
        "running",
        "suspended",
        Some(&format!("parked until {}", parked.wake.describe())),
    )?;
    seal_ledger(audit, head, &now_rfc3339())?;
    if let Some(reply) = parked.reply {
        let _ = reply.send(parked_json(&Parked {
            run_id: run_id.to_owned(),
            task: key.clone(),
            park: parked.park,
            receipt: parked.receipt,
            released,
            wake: parked.wake,
        }));
    }
    Ok(())
}
