//! What travels to the coordinator: its messages (events, a task's end, a
//! control request) and what they carry. Below the coordinator, the task
//! runner and the control socket, so each can name them without naming the
//! others.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::mpsc;

use reprise_core::TaskId;
use reprise_store::suspension::{Requester, Wake};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::events::Event;
use crate::sandbox::TaskOutput;
use crate::state::{AttemptSummary, TaskStatus};

/// What task threads send the coordinator.
#[derive(Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "one Done per task's end; events are the many, and boxing the result would not make them smaller"
)]
pub(crate) enum Message {
    Event(Event),
    Done(TaskId, TaskResult),
    /// A request that came in over the control socket.
    Control(ControlRequest),
}

/// A request over the socket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum ControlOp {
    Ping,
    Suspend {
        task: TaskId,
        wake: Wake,
        reason: Option<String>,
    },
    Resume {
        task: TaskId,
        /// `warm`, `fork` or `cold`; the policy's when absent.
        mode: Option<String>,
        receipt: Option<reprise_core::digest::Digest>,
    },
    /// Halt the running agent at once, keeping sandbox, seat and
    /// reservation; past `upgrade_after_ms` the pause becomes a park.
    Pause {
        task: TaskId,
        upgrade_after_ms: Option<u64>,
    },
    Unpause {
        task: TaskId,
    },
}

/// A request the coordinator answers, with where the answer goes.
#[derive(Debug)]
pub(crate) struct ControlRequest {
    pub(crate) op: ControlOp,
    pub(crate) reply: mpsc::Sender<Value>,
    /// The admitted peer that sent it.
    pub(crate) requester: Requester,
}

/// A park the task thread recorded; the coordinator finishes it.
#[derive(Debug, Clone)]
pub(crate) struct ParkedTask {
    pub(crate) park: reprise_core::digest::Digest,
    /// `None` from a fleet worker, until the coordinator names the receipt
    /// it wrote.
    pub(crate) receipt: Option<reprise_core::digest::Digest>,
    pub(crate) wake: reprise_store::suspension::Wake,
    pub(crate) released: Vec<(reprise_store::suspension::Resource, Value)>,
    pub(crate) reply: Option<crate::park::ParkReply>,
    pub(crate) headroom_micro_usd: u64,
}

/// How a task's run ended.
#[derive(Debug, Clone)]
pub(crate) struct TaskResult {
    pub(crate) status: TaskStatus,
    /// The last attempt was judged (a verdict on the work).
    pub(crate) judged: bool,
    pub(crate) reason: Option<String>,
    pub(crate) attempts: Vec<AttemptSummary>,
    pub(crate) spent_micro_usd: u64,
    pub(crate) metadata: BTreeMap<String, Value>,
    /// Where the task worked, once its sandbox exists.
    pub(crate) cwd: Option<PathBuf>,
    /// The committed result of a task that passed in a worktree.
    pub(crate) output: Option<TaskOutput>,
    /// For a partial task: the gates its kept attempt did not pass.
    pub(crate) gaps: Vec<String>,
    /// The park, when the task was parked.
    pub(crate) parked: Option<ParkedTask>,
}
