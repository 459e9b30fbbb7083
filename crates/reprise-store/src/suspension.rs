//! The records of a park and of its resume (DESIGN.md section 9): the
//! journal rows that are the park's identity and its end, and the audit rows
//! that bind them (receipts), each release of a resource, and a grant's
//! continuation. The shapes live here so the engine that writes them and the
//! verifier that reads them agree; the order they are written in is the
//! engine's.

use reprise_core::digest::Digest;
use reprise_core::{PlanId, TaskId, TaskKey};
use serde::{Deserialize, Serialize};

/// Journal row: a park's intent, written before anything is released. Its
/// event hash is the park's identity.
pub const SUSPEND_KIND: &str = "task.suspend";
/// Journal row: a park settled by a resume.
pub const RESUME_KIND: &str = "task.resume";
/// Audit row binding a `task.suspend` row.
pub const SUSPEND_RECEIPT_KIND: &str = "task.suspend_receipt";
/// Audit row: one resource a park gave back, citing the park's receipt.
pub const RELEASE_KIND: &str = "task.suspend_resource_release";
/// Audit row binding a `task.resume` row to the receipt it continues.
pub const RESUME_RECEIPT_KIND: &str = "task.resume_receipt";
/// Audit row: the park's grant carried into the resumed task.
pub const GRANT_CONTINUATION_KIND: &str = "task.grant_continuation";

/// What wakes a park.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "on")]
pub enum Wake {
    /// Only `reprise task resume`.
    Resume,
    /// `reprise approve`, then a resume.
    Approval,
    /// The time (RFC 3339, UTC): the live orchestrator resumes it then, or
    /// the next `run --continue` / `task resume` after it.
    Time { at: String },
}

impl Wake {
    pub fn describe(&self) -> String {
        match self {
            Self::Resume => "a resume".to_owned(),
            Self::Approval => "approval".to_owned(),
            Self::Time { at } => format!("time {at}"),
        }
    }
}

/// Why the task was parked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ParkCause {
    /// `reprise task suspend`.
    Request,
    /// The agent hit a usage or rate limit that said when it resets.
    UsageLimit,
    /// The agent waited on a permission or a question.
    Permission,
    /// A steering pause that outlived `pause_upgrade_after`.
    PauseUpgrade,
}

impl ParkCause {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Request => "request",
            Self::UsageLimit => "usage_limit",
            Self::Permission => "permission",
            Self::PauseUpgrade => "pause_upgrade",
        }
    }
}

/// A journal head: the row a park was taken after.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalHead {
    pub seq: u64,
    pub event_hash: Digest,
}

/// The task's budget envelope when it was parked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct EnvelopeBalance {
    /// What the task reserved from the run's pool (`None`: no envelope).
    pub reserved_micro_usd: Option<u64>,
    pub spent_micro_usd: u64,
    /// `max(reserved - spent, 0)`: what the park returns to the pool.
    pub headroom_micro_usd: u64,
}

/// The body of a `task.suspend` journal row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SuspendBody {
    pub run_id: String,
    /// The attempt the park interrupted (or the last one, between attempts).
    pub attempt: u32,
    /// The agent's session, resumable when the workspace is unchanged.
    pub session_id: Option<String>,
    /// The workspace's hash when it was parked.
    pub workspace_hash: Digest,
    /// The journal's head before this row.
    pub journal_head: Option<JournalHead>,
    pub envelope: EnvelopeBalance,
    pub wake: Wake,
    pub cause: ParkCause,
    pub reason: Option<String>,
    /// What the agent asked, for a permission park, in parks recorded
    /// before the text was kept beside the chain; now always `None`.
    pub question: Option<String>,
    /// The hash of what the agent asked (`replies::agent_text_hash`); the
    /// text itself is kept beside the chain (`replies::keep_agent_text`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question_hash: Option<Digest>,
    /// The grant this park binds (hex), empty when none is bound.
    pub grant_hash: String,
    /// Who asked for the park, when a person's command did (absent from
    /// parks recorded before it was kept, and from the agent's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_by: Option<Requester>,
}

/// The process that asked a run to park, pause or unpause a task: over
/// the control socket, the peer the kernel names (`SO_PEERCRED`) and its
/// command line then; for a direct park, the command itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Requester {
    pub pid: u32,
    pub uid: u32,
    /// Its arguments joined by spaces, bounded; empty when unreadable.
    pub command: String,
}

/// Which resource a release gave back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Resource {
    /// The agent's process group, terminated and reaped.
    Process,
    /// The worktree, snapshotted and removed.
    Sandbox,
    /// The seat the task held.
    Seat,
    /// The envelope's unspent headroom, back in the run's pool.
    Budget,
}

impl Resource {
    /// The order a park releases in.
    pub const ALL: [Self; 4] = [Self::Process, Self::Sandbox, Self::Seat, Self::Budget];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Process => "process",
            Self::Sandbox => "sandbox",
            Self::Seat => "seat",
            Self::Budget => "budget",
        }
    }
}

/// The body of a `task.suspend_receipt` audit row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SuspendReceipt {
    pub plan: PlanId,
    pub task_id: TaskId,
    pub run_id: String,
    /// The `task.suspend` row's event hash.
    pub park: Digest,
    /// The `task.suspend` row's seq in the task's journal.
    pub journal_seq: u64,
    pub session_id: Option<String>,
    pub workspace_hash: Digest,
    pub wake: Wake,
}

/// The body of a `task.suspend_resource_release` audit row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Release {
    pub plan: PlanId,
    pub task_id: TaskId,
    pub run_id: String,
    pub park: Digest,
    /// The receipt row's hash (its `mac`).
    pub receipt: Digest,
    pub resource: Resource,
    /// What was released: the pid, the snapshot and path, the seat, the
    /// amount returned and the pool's balance after.
    pub detail: serde_json::Value,
}

/// The body of a `task.resume` journal row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResumeBody {
    pub run_id: String,
    pub park: Digest,
    /// The suspend receipt it continues.
    pub receipt: Digest,
    /// The attempt the resume starts.
    pub attempt: u32,
    /// The mode asked for with `--mode`, if any.
    pub requested: Option<String>,
    /// The mode decided: warm, fork or cold.
    pub mode: String,
    /// Why the mode is not the one asked for or the policy's.
    pub downgrade_reason: Option<String>,
    /// The workspace's hash once re-materialised.
    pub workspace_hash: Digest,
    /// The approval's digest, for a park `--until approval`.
    pub approval_digest: Option<Digest>,
    pub grant_hash: String,
}

/// The body of a `task.resume_receipt` audit row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResumeReceipt {
    pub plan: PlanId,
    pub task_id: TaskId,
    pub run_id: String,
    pub park: Digest,
    pub suspend_receipt: Digest,
    /// The `task.resume` row's event hash.
    pub resume: Digest,
    pub mode: String,
    pub workspace_hash: Digest,
    pub approval_digest: Option<Digest>,
}

/// The body of a `task.grant_continuation` audit row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantContinuation {
    pub plan: PlanId,
    pub task_id: TaskId,
    pub run_id: String,
    pub resume_receipt: Digest,
    pub grant_hash: String,
}

/// One suspension row of the audit chain, with its place and hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditSuspensionRow {
    pub seq: u64,
    /// The row's hash (its `mac`): what later rows cite.
    pub digest: Digest,
    pub row: SuspensionAudit,
}

/// The suspension rows the audit chain can hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SuspensionAudit {
    SuspendReceipt(SuspendReceipt),
    Release(Release),
    ResumeReceipt(ResumeReceipt),
    Grant(GrantContinuation),
}

impl SuspensionAudit {
    /// Parses an audit row of one of the suspension kinds; `None` for any
    /// other kind, and for a body that does not parse.
    pub fn parse(kind: &str, payload: &[u8]) -> Option<Self> {
        Some(match kind {
            SUSPEND_RECEIPT_KIND => Self::SuspendReceipt(serde_json::from_slice(payload).ok()?),
            RELEASE_KIND => Self::Release(serde_json::from_slice(payload).ok()?),
            RESUME_RECEIPT_KIND => Self::ResumeReceipt(serde_json::from_slice(payload).ok()?),
            GRANT_CONTINUATION_KIND => Self::Grant(serde_json::from_slice(payload).ok()?),
            _ => return None,
        })
    }

    /// The task the row is about.
    pub fn task(&self) -> TaskKey {
        let (plan, task) = match self {
            Self::SuspendReceipt(row) => (&row.plan, &row.task_id),
            Self::Release(row) => (&row.plan, &row.task_id),
            Self::ResumeReceipt(row) => (&row.plan, &row.task_id),
            Self::Grant(row) => (&row.plan, &row.task_id),
        };
        TaskKey::new(plan.clone(), task.clone())
    }
}
