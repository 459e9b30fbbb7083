//! Progress reports from the run loop to whoever shows them.

use reprise_core::TaskId;
use reprise_core::retry::DecisionRecord;

use crate::state::{AttemptSummary, TaskStatus, Waiting};

/// One thing that happened in a run, in the order it happened. It
/// serialises so a fleet's transport can carry a worker's events.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
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
    /// A task waits before it can go on: to start (a seat, a dependency,
    /// its envelope) or for its next attempt's share of the pool. It ends
    /// with the task's next `AttemptStarted` (or its end).
    TaskWaiting { task: TaskId, waiting: Waiting },
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
    /// What a running attempt is doing now.
    Phase {
        task: TaskId,
        attempt: u32,
        phase: Phase,
    },
    /// Something seen while an attempt ran (DESIGN.md section 8).
    Anomaly {
        task: TaskId,
        attempt: u32,
        anomaly: reprise_core::recovery::Anomaly,
    },
    /// A steering pause took hold: the agent stopped, its worktree, seat
    /// and budget kept until an unpause (or, past `upgrade_after`, a park).
    TaskPaused {
        task: TaskId,
        attempt: u32,
        upgrade_after: Option<std::time::Duration>,
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

/// The phases of an attempt, as progress shows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// The agent is at work.
    Agent,
    /// The gates are judging its work.
    Gates,
    /// Diagnosing the failure and deciding what comes next.
    Deciding,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Agent => "agent",
            Self::Gates => "gates",
            Self::Deciding => "deciding",
        }
    }
}

/// Receives events on the coordinating thread.
pub trait EventSink {
    fn event(&mut self, event: &Event);
}
