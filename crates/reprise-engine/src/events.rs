//! Progress reports from the run loop to whoever shows them.

use reprise_core::TaskId;
use reprise_core::retry::DecisionRecord;

use crate::state::{AttemptSummary, TaskStatus};

/// One thing that happened in a run, in the order it happened.
#[derive(Debug, Clone)]
pub enum Event {
    RunStarted {
        run_id: String,
        plan_name: String,
        tasks: usize,
        seats: u32,
    },
    /// Where the run's tasks work (worktrees from a base commit, or in place).
    Workspace {
        workspace: crate::sandbox::Workspace,
    },
    AttemptStarted {
        task: TaskId,
        attempt: u32,
        mode: String,
    },
    AttemptFinished {
        task: TaskId,
        summary: AttemptSummary,
    },
    Decision {
        task: TaskId,
        record: Box<DecisionRecord>,
    },
    /// Something seen while an attempt ran (DESIGN.md section 8).
    Anomaly {
        task: TaskId,
        attempt: u32,
        anomaly: reprise_core::recovery::Anomaly,
    },
    TaskFinished {
        task: TaskId,
        status: TaskStatus,
        reason: Option<String>,
    },
    Warning {
        task: Option<TaskId>,
        message: String,
    },
}

/// What task threads send the coordinator.
#[derive(Debug)]
pub(crate) enum Message {
    Event(Event),
    Done(TaskId, crate::task::TaskResult),
}

/// Receives events on the coordinating thread.
pub trait EventSink {
    fn event(&mut self, event: &Event);
}
