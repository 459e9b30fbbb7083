//! What travels between the coordinator and a worker for one task: the
//! order (everything a worker needs to run it) and the result (what the
//! coordinator's record of the task needs back). Both serialise, so any
//! transport can carry them.

use std::collections::BTreeMap;
use std::path::PathBuf;

use reprise_core::TaskId;
use reprise_core::digest::{Digest, tagged_sha256};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::messages::TaskResult;
use crate::sandbox::TaskOutput;
use crate::settings::AgentSetup;
use crate::state::{AttemptSummary, TaskStatus};

/// The domain tag a plan's text is hashed under in an order.
const PLAN_TAG: &[u8] = b"reprise/fleet-plan/v1";

/// One task to run on a worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskOrder {
    pub run_id: String,
    /// The plan's text as the coordinator read it, its file name (for
    /// errors) and its hash: a worker refuses text that does not match.
    pub plan_text: String,
    pub plan_file: String,
    pub plan_hash: Digest,
    pub task: TaskId,
    /// The commit the task starts from (`None`: in place) and the git
    /// remote it is fetched from and the result pushed to.
    pub base: Option<String>,
    pub remote: Option<String>,
    /// Where the project is inside the repository.
    pub subdir: PathBuf,
    /// The coordinator's journal of the task as it stands: the worker's
    /// copy starts from exactly these bytes, so the rows it ships link on.
    pub journal: String,
    pub envelope_micro_usd: Option<u64>,
    /// A `--retry-failed` leg's kept reply of the task's judged failure.
    pub carried_reply: Option<String>,
    /// The run's retry budget, as its spec.
    pub retry_budget: Option<String>,
    pub setup: AgentSetup,
    /// `{task, state, commit}` of each dependency, for its checkpoints.
    pub dependencies: Vec<Value>,
    pub keep_worktree: bool,
    /// The host that held the task before it was lost, if it was: the
    /// task goes on from its journal, and no session of that host's can be
    /// resumed here.
    pub taken_over_from: Option<String>,
    /// Transcripts of the sessions the task's journal names, as the hosts
    /// that ran them shipped them: a host taking the task over keeps them
    /// as its own preserved copies, and resumes those sessions warm.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sessions: Vec<crate::evidence::ShippedSession>,
    /// A park the coordinator checked and the worker resumes: the task
    /// goes on from it (its checkpoints come from the remote).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume: Option<ShippedResume>,
}

/// A park asked of the coordinator (`task suspend`) for a task a worker
/// holds, as it travels to that worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForwardedPark {
    pub wake: reprise_store::suspension::Wake,
    pub reason: Option<String>,
    /// Whoever asked the coordinator, as its control socket named them.
    pub requested_by: reprise_core::rows::Requester,
}

impl ForwardedPark {
    pub(crate) fn request(&self) -> crate::park::ParkRequest {
        crate::control::ControlOp::park_request(&self.wake, &self.reason, &self.requested_by)
    }
}

/// A task's park and pause handle on a worker: a park the coordinator
/// passed on is filed here, and the task records and makes it as a park
/// asked of a local run.
#[derive(Debug, Default)]
pub struct WorkerControl(pub(crate) crate::park::TaskControl);

impl WorkerControl {
    /// Files `park` for the task; `false` when another request waits.
    pub fn park(&self, park: &ForwardedPark) -> bool {
        self.0.request(park.request(), None).is_ok()
    }
}

/// A checked park to resume, as it travels (a `ParkPoint` with the mode and
/// approval the resume asked for).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShippedResume {
    pub park: Digest,
    pub seq: u64,
    pub at: String,
    pub body: reprise_core::rows::SuspendBody,
    pub receipt: Option<Digest>,
    pub released: Vec<reprise_core::rows::Release>,
    pub approval: Option<(Digest, Option<String>)>,
    pub checkpoint: Option<Digest>,
    pub mode: Option<reprise_core::retry::RetryMode>,
    pub asked_approval: Option<Digest>,
}

impl ShippedResume {
    pub(crate) fn of(
        point: &crate::resume::ParkPoint,
        mode: Option<reprise_core::retry::RetryMode>,
        asked_approval: Option<Digest>,
    ) -> Self {
        Self {
            park: point.park,
            seq: point.seq,
            at: point.at.clone(),
            body: point.body.clone(),
            receipt: point.receipt,
            released: point.released.clone(),
            approval: point.approval.clone(),
            checkpoint: point.checkpoint,
            mode,
            asked_approval,
        }
    }

    /// The continuation that resumes it on this host.
    pub(crate) fn continuation(
        self,
        key: reprise_core::TaskKey,
        run_id: &str,
    ) -> crate::task::Continuation {
        crate::task::Continuation::Resume {
            point: Box::new(crate::resume::ParkPoint {
                key,
                run_id: run_id.to_owned(),
                park: self.park,
                seq: self.seq,
                at: self.at,
                body: self.body,
                receipt: self.receipt,
                released: self.released,
                settled: false,
                approval: self.approval,
                checkpoint: self.checkpoint,
            }),
            mode: self.mode,
            approval: self.asked_approval,
        }
    }
}

impl TaskOrder {
    /// The hash an order names its plan's text by.
    pub fn plan_hash(text: &str) -> Digest {
        tagged_sha256(PLAN_TAG, &[text.as_bytes()])
    }
}

/// How a task's run on a worker ended: a `TaskResult`, its park (if it
/// parked) without the receipt, which the coordinator wrote from the park's
/// row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShippedResult {
    pub status: TaskStatus,
    pub judged: bool,
    pub reason: Option<String>,
    pub attempts: Vec<AttemptSummary>,
    pub spent_micro_usd: u64,
    pub metadata: BTreeMap<String, Value>,
    /// Where the task worked, on its worker.
    pub cwd: Option<PathBuf>,
    pub output: Option<TaskOutput>,
    pub gaps: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parked: Option<ShippedPark>,
}

/// A park a worker made: what the coordinator needs to give back the seat
/// and the budget and to wake it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShippedPark {
    /// The `task.suspend` row's event hash.
    pub park: Digest,
    pub wake: reprise_store::suspension::Wake,
    /// What the worker gave back (the process, the sandbox), as recorded.
    pub released: Vec<(reprise_store::suspension::Resource, Value)>,
    pub headroom_micro_usd: u64,
}

impl ShippedResult {
    pub(crate) fn of(result: TaskResult) -> Self {
        Self {
            status: result.status,
            judged: result.judged,
            reason: result.reason,
            attempts: result.attempts,
            spent_micro_usd: result.spent_micro_usd,
            metadata: result.metadata,
            cwd: result.cwd,
            output: result.output,
            gaps: result.gaps,
            parked: result.parked.map(|parked| ShippedPark {
                park: parked.park,
                wake: parked.wake,
                released: parked.released,
                headroom_micro_usd: parked.headroom_micro_usd,
            }),
        }
    }

    /// The coordinator's `TaskResult`; a park comes back with no receipt
    /// named (`Follow` names the one it wrote).
    pub(crate) fn into_result(self) -> TaskResult {
        TaskResult {
            status: self.status,
            judged: self.judged,
            reason: self.reason,
            attempts: self.attempts,
            spent_micro_usd: self.spent_micro_usd,
            metadata: self.metadata,
            cwd: self.cwd,
            output: self.output,
            gaps: self.gaps,
            parked: self.parked.map(|parked| crate::task::ParkedTask {
                park: parked.park,
                receipt: None,
                wake: parked.wake,
                released: parked.released,
                reply: None,
                headroom_micro_usd: parked.headroom_micro_usd,
            }),
        }
    }

    /// A task the run's stop ended before any worker took it.
    pub fn withdrawn() -> Self {
        Self {
            status: TaskStatus::Cancelled,
            ..Self::failed("cancelled before a worker took it".to_owned())
        }
    }

    /// A task that ended without a result from its worker.
    pub(crate) fn failed(reason: String) -> Self {
        Self {
            status: TaskStatus::Failed,
            judged: false,
            reason: Some(reason),
            attempts: Vec::new(),
            spent_micro_usd: 0,
            metadata: BTreeMap::new(),
            cwd: None,
            output: None,
            gaps: Vec::new(),
            parked: None,
        }
    }
}
