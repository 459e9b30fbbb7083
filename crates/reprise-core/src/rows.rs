//! One typed schema for the rows of every chain: each row kind's name is
//! defined once (`crate::row_kind`), and each kind's body here, declared
//! with the chain it goes in (`row_bodies!` at the end); writers serialise the
//! body type (`RowBody::to_body`) and readers parse it (`body_of`).
//!
//! The chains are hashed over the JCS bytes of each row, so a body type must
//! serialise to exactly the JSON the row has always held: the same keys, a
//! key written as `null` kept as `null` (a plain `Option`), a key left out
//! left out (`skip_serializing_if`), the same number types. The tests pin
//! every kind against rows real runs wrote. Readers stay lenient: a body
//! type accepts rows older writers left without a later member.

use std::path::PathBuf;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::digest::Digest;
pub use crate::row_kind::{Chain, Kind};
use crate::{PlanId, TaskId};

/// A body type of one row kind in one chain.
pub trait RowBody: Serialize + DeserializeOwned {
    const KIND: Kind;
    const CHAIN: Chain;

    /// The body as the JSON value a chain encodes.
    fn to_body(&self) -> Value {
        serde_json::to_value(self).expect("row bodies serialise")
    }

    /// The body of a row of this kind, if it parses as one.
    fn from_body(body: &Value) -> Option<Self> {
        Self::deserialize(body).ok()
    }
}

/// The body of a row whose kind is `kind`, if the kind is `T`'s and the
/// body parses as it.
pub fn body_of<T: RowBody>(kind: &str, body: &Value) -> Option<T> {
    (kind == T::KIND.as_str())
        .then(|| T::from_body(body))
        .flatten()
}

/// Declares that `$body` is the body of `$kind` rows in `$chain`.
macro_rules! row_bodies {
    ($($body:ty => $kind:ident in $chain:ident;)*) => {
        $(impl RowBody for $body {
            const KIND: Kind = Kind::$kind;
            const CHAIN: Chain = Chain::$chain;
        })*
    };
}

/// How an attempt runs: the first of a task `new`, a retry in its mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptMode {
    New,
    Warm,
    Fork,
    Cold,
}

impl AttemptMode {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::New => "new",
            Self::Warm => "warm",
            Self::Fork => "fork",
            Self::Cold => "cold",
        }
    }

    /// The mode a name stands for, if any.
    pub fn parse(name: &str) -> Option<Self> {
        [Self::New, Self::Warm, Self::Fork, Self::Cold]
            .into_iter()
            .find(|mode| mode.as_str() == name)
    }
}

impl From<crate::retry::RetryMode> for AttemptMode {
    fn from(mode: crate::retry::RetryMode) -> Self {
        match mode {
            crate::retry::RetryMode::Warm => Self::Warm,
            crate::retry::RetryMode::Fork => Self::Fork,
            crate::retry::RetryMode::Cold => Self::Cold,
        }
    }
}

/// A task's state in a run, as the ledger's transitions name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    Queued,
    Running,
    Passed,
    Partial,
    Failed,
    Blocked,
    Cancelled,
    Suspended,
}

impl TaskStatus {
    pub const ALL: [Self; 8] = [
        Self::Queued,
        Self::Running,
        Self::Passed,
        Self::Partial,
        Self::Failed,
        Self::Blocked,
        Self::Cancelled,
        Self::Suspended,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Running => "running",
            Self::Passed => "passed",
            Self::Partial => "partial",
            Self::Failed => "failed",
            Self::Blocked => "blocked",
            Self::Cancelled => "cancelled",
            Self::Suspended => "suspended",
        }
    }

    /// The state a name stands for, if any.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|state| state.as_str() == name)
    }
}

/// What became of a judged (or stopped) attempt: `attempt.finished`'s
/// `accepted`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Accepted {
    Passed,
    Partial,
    Failed,
    /// Stopped by a park.
    Parked,
    /// Stopped by a steering pause.
    Paused,
}

impl Accepted {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Passed => "passed",
            Self::Partial => "partial",
            Self::Failed => "failed",
            Self::Parked => "parked",
            Self::Paused => "paused",
        }
    }
}

// ---- The ledger.

/// `run.started`: a run of `plan` starts; `base_commit` is `null` when its
/// tasks run in place.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunStarted {
    pub run_id: String,
    pub plan: PlanId,
    pub base_commit: Option<String>,
}

/// `task.transition`: a task of a run moves `from` one state `to` another.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskTransition {
    pub run_id: String,
    pub task_id: String,
    pub from: TaskStatus,
    pub to: TaskStatus,
    #[serde(default)]
    pub reason: Option<String>,
}

// ---- The audit chain.

/// `state.init`: the first row of a state directory's audit chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct StateInit(pub crate::witness::StateInitBody);

/// `state.adopt`: a witness written for a chain that had none (a state
/// directory made before witnesses, or moved).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct StateAdopt(pub crate::witness::StateInitBody);

/// `state.migrate`: which plan each layout-1 journal went to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigrateBody {
    pub from: u64,
    pub to: u64,
    pub tasks: Vec<MigratedTask>,
}

/// One journal a migration moved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigratedTask {
    pub task_id: TaskId,
    pub plan: PlanId,
}

/// `journal.repair`, `spine.repair`, `ledger.repair`, `audit.repair`: what
/// a repair cut, and the head the file kept; a task's chains name it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepairBody {
    pub removed_bytes: u64,
    pub head_seq: Option<u64>,
    pub head_hash: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<PlanId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<TaskId>,
}

/// `retry.checkpoint_decision`: a decision bound to the journal and spine
/// rows that recorded it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecisionBinding {
    /// The plan of the task (rows written before layout 2 have none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<PlanId>,
    pub task_id: TaskId,
    pub retry_mode: crate::retry::RetryMode,
    pub requested_mode: crate::retry::RetryMode,
    pub capability: crate::retry::Capability,
    pub checkpoint_event_hash: Option<Digest>,
    pub workspace_match: Option<bool>,
    pub downgrade_reason: Option<crate::retry::DowngradeReason>,
    pub decision_hash: Digest,
    pub journal_event_hash: Digest,
    pub spine_entry_hash: Digest,
}

impl DecisionBinding {
    /// The binding of `record`, a decision of a task of `plan`, to the
    /// journal and spine rows that recorded it.
    pub fn of(
        plan: &PlanId,
        record: &crate::retry::DecisionRecord,
        journal_event_hash: Digest,
        spine_entry_hash: Digest,
    ) -> Result<Self, crate::canonical::EncodeError> {
        Ok(Self {
            plan: Some(plan.clone()),
            task_id: record.task_id.clone(),
            retry_mode: record.retry_mode,
            requested_mode: record.requested_mode,
            capability: record.capability,
            checkpoint_event_hash: record.checkpoint_event_hash,
            workspace_match: record.workspace_match,
            downgrade_reason: record.downgrade_reason,
            decision_hash: record.hash()?,
            journal_event_hash,
            spine_entry_hash,
        })
    }
}

/// `checkpoint.restored` in the audit chain: binds the journal row of a
/// rollback.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoredBinding {
    pub plan: PlanId,
    pub task_id: TaskId,
    pub checkpoint: String,
    pub journal_seq: u64,
    pub journal_hash: Digest,
    pub workspace_hash: Digest,
}

// ---- A task's journal.

/// `checkpoint.restored` in a journal: a rollback, and the workspace hash
/// after it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointRestored {
    pub run_id: String,
    pub checkpoint: String,
    pub reason: String,
    pub workspace_hash: Digest,
    pub matches_checkpoint: bool,
    /// Files the checkpoint left out (past its size limit).
    pub not_restored: Vec<String>,
}

/// A file a checkpoint left out, and its size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkippedFile {
    pub path: String,
    pub bytes: u64,
}

/// `retry.decision` in a journal: the decision record and its hash, for
/// the attempt it starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryDecision {
    pub run_id: String,
    pub attempt: u32,
    pub decision: crate::retry::DecisionRecord,
    pub decision_hash: Digest,
    /// What changes for this retry besides its mode (a request for
    /// context), bound by the row's hash as the decision is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modification: Option<Value>,
}

/// What the attempt after a checkpoint runs with (seed 004): the agent, the
/// model asked for (`null`: the CLI's default), the mode, the task's grant
/// and the names, never the values, of the variables it gets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptContext {
    pub agent: String,
    pub model: Option<String>,
    pub mode: AttemptMode,
    pub grant: crate::grant::GrantSet,
    pub env: Vec<String>,
}

/// A dependency's state and result commit when the task started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DependencyState {
    pub task: TaskId,
    pub state: TaskStatus,
    pub commit: Option<String>,
}

/// `checkpoint.taken`: a file checkpoint, before an attempt or of a tree a
/// task or a park left.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointTaken {
    pub run_id: String,
    pub attempt: u32,
    pub label: String,
    pub checkpoint: String,
    pub tree: String,
    pub files: u64,
    pub bytes: u64,
    /// Files left out for their size (a park's snapshot names none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<Vec<SkippedFile>>,
    pub workspace_hash: Digest,
    /// The tree was just restored to this checkpoint and hashed as it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reused: bool,
    /// Before an attempt: what it runs with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<AttemptContext>,
    /// Before an attempt: its dependencies' state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dependencies: Option<Vec<DependencyState>>,
}

/// The session an attempt opens: a new one, a resumed one, or a fork.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SessionUse {
    Fork { fork: String, new: Option<String> },
    Resume { resume: String },
    New { new: Option<String> },
}

/// `attempt.started`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptStarted {
    pub run_id: String,
    pub attempt: u32,
    pub mode: AttemptMode,
    pub session: SessionUse,
    pub prompt_bytes: u64,
}

/// `task.checkpoint`: the agent of an attempt returned (or the process
/// running it died: `interrupted`), before any gate ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskCheckpoint {
    pub run_id: String,
    pub attempt: u32,
    pub session_id: Option<String>,
    pub workspace_hash: Digest,
    /// The model the CLI named for the session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_model: Option<String>,
    /// Written (as `false`) only when the CLI did not save the session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_saved: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupted: Option<bool>,
}

/// `attempt.anomaly`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptAnomaly {
    pub run_id: String,
    pub attempt: u32,
    pub anomaly: crate::recovery::Anomaly,
}

/// `task.partial`: an attempt kept as partial, the gates it missed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskPartial {
    pub run_id: String,
    pub attempt: u32,
    pub gaps: Vec<String>,
}

/// `journal.tail_repaired`: the journal's torn last line was cut while the
/// task ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalTailRepaired {
    pub run_id: String,
    pub attempt: u32,
    /// Always `torn_tail`.
    pub verification: String,
    pub removed_bytes: u64,
    pub head_seq: Option<u64>,
    pub kept_at: PathBuf,
}

/// `task.agent_checkpoint`: a park's `checkpoint.json` bound by its hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentCheckpointBound {
    pub run_id: String,
    pub park: Digest,
    /// The file's own hash.
    pub checkpoint: Digest,
    pub grant_hash: String,
}

// ---- Parks and resumes (DESIGN.md section 9).

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
    /// The policy the resumed task goes on under (absent from rows
    /// written before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<crate::lifecycle::Policy>,
    /// The hash of the resume's `retry.decision`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision_hash: Option<Digest>,
    /// Why the mode was chosen, when it is worth saying.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode_reason: Option<String>,
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

/// `task.approval`: an approval's digest bound to its park.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalBinding {
    pub plan: PlanId,
    pub task_id: TaskId,
    pub run_id: String,
    pub park: Digest,
    /// The approval's digest.
    pub approval: Digest,
}

/// `task.grant_continuation` in a journal: a resume that continues a bound
/// grant, tying the park's and the resume's rows together.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantContinued {
    pub run_id: String,
    pub park: Digest,
    pub resume: Digest,
    /// The park's `checkpoint.json` own hash.
    pub checkpoint: Digest,
    pub grant_hash: String,
}

/// `task.started`: a task starts in a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskStarted {
    pub run_id: String,
    pub plan: PlanId,
    /// The commit its worktree starts from; `null` in place.
    pub base_commit: Option<String>,
    pub adapter: String,
    pub cwd: PathBuf,
    pub sandbox_us: u64,
    pub retry_policy: crate::plan::RetryPolicy,
    pub max_retries: u32,
    pub envelope_micro_usd: Option<u64>,
    /// The policy its lifecycle runs under.
    pub lifecycle: crate::lifecycle::Policy,
    /// The retry capability its adapter had when the task started: what
    /// the adapter declares, or for an ACP agent what the agent declared
    /// at `initialize`. Absent in rows written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capability: Option<crate::retry::Capability>,
}

/// How an attempt ended (DESIGN.md section 7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Passed,
    /// A verdict on the work: a gate said no, or the agent exited non-zero
    /// with a reply.
    Judged,
    /// Not a verdict: the attempt could not be judged.
    Infra,
    /// The agent asked for more context (`NEEDS_CONTEXT: ...`).
    NeedsContext,
    /// The task was parked while this attempt ran: stopped, not judged.
    Parked,
}

/// One gate's verdict on an attempt, as `attempt.finished` holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GateVerdict {
    pub name: String,
    pub passed: bool,
    /// The gate could not run (spawn failure, timeout, exit 126 or 127).
    pub could_not_run: bool,
    /// The gate was stopped midway (its timeout).
    #[serde(default)]
    pub crashed: bool,
    pub exit_code: Option<i32>,
    /// The retry-budget level the gate ran at, for a graded gate.
    pub level: Option<i64>,
    /// The gate's own timeout, when it was stopped by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timed_out_after_ms: Option<u64>,
}

/// `attempt.finished`: an attempt judged, or stopped by a park or pause.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttemptFinished {
    pub run_id: String,
    pub attempt: u32,
    pub mode: AttemptMode,
    pub outcome: Outcome,
    pub accepted: Accepted,
    pub judged: bool,
    pub infra_kind: Option<crate::outcome::InfraKind>,
    pub exit_code: Option<i32>,
    pub gates: Vec<GateVerdict>,
    pub cost_micro_usd: Option<u64>,
    pub session_id: Option<String>,
    pub adapter: String,
    pub cli_version: Option<String>,
    pub cwd: PathBuf,
    pub config_home: Option<PathBuf>,
    pub elapsed_ms: u64,
    pub agent_us: u64,
    pub gates_us: u64,
    /// How the agent was contained (mode, whether sandboxed, what was denied).
    pub containment: Value,
}

/// What tells one judged failure from another: the reply and each gate's
/// output, hashed (`[name, passed, output hash]`); never the text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evidence {
    pub reply_hash: String,
    pub gates: Vec<(String, bool, String)>,
}

/// `recovery.diagnosis`: the severity of a failed attempt and what comes next.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecoveryDiagnosis {
    pub run_id: String,
    pub attempt: u32,
    pub severity: crate::recovery::Severity,
    /// An infrastructure kind, an anomaly kind, `judged`, or `repeated_failure`.
    pub kind: String,
    pub strategy: crate::recovery::Strategy,
    pub evidence: Evidence,
    pub anomalies: Vec<crate::recovery::Anomaly>,
}

/// `recovery.back_off`: provider trouble waited out before a retry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecoveryBackOff {
    pub run_id: String,
    pub attempt: u32,
    pub wait_ms: u64,
    pub source: crate::recovery::WaitSource,
}

/// `retry.budget`: the retry budget consumed for a retry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryBudgetUsed {
    pub run_id: String,
    pub attempt: u32,
    pub decision: crate::budget::BudgetDecision,
}

/// `retry.budget_refused`: the budget's refusal, or why it could not decide.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryBudgetRefused {
    pub run_id: String,
    pub attempt: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<crate::budget::BudgetDecision>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `task.result`: the commit of a task's result, or why it failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum TaskResult {
    Committed {
        run_id: String,
        base_commit: String,
        /// `null` when nothing changed.
        commit: Option<String>,
        /// `null` when nothing changed (no commit, no branch).
        branch: Option<String>,
        files_changed: u64,
        commit_us: u64,
        /// The unrecorded commit a crash left on the branch, replaced.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        replaced: Option<String>,
    },
    Failed {
        run_id: String,
        base_commit: Option<String>,
        error: String,
    },
}

/// `task.finished`: how a task ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskFinished {
    pub run_id: String,
    pub state: TaskStatus,
    pub reason: Option<String>,
    pub attempts: u32,
    pub spent_micro_usd: u64,
    pub lifecycle: crate::lifecycle::Terminal,
}

/// `task.continued`: `run --continue` takes up an interrupted task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskContinued {
    pub run_id: String,
    pub from: crate::lifecycle::TaskState,
    pub lifecycle: crate::lifecycle::Policy,
    pub interrupted_attempt: Option<u32>,
    /// The task was cancelled, not cut short.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancelled: Option<bool>,
}

/// `task.pause`: a steering pause, its agent halted, its seat kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskPause {
    pub run_id: String,
    pub attempt: u32,
    pub session_id: Option<String>,
    pub workspace_hash: Digest,
    pub upgrade_after_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_by: Option<Requester>,
}

/// `task.unpause`: the pause ends; the next attempt's mode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskUnpause {
    pub run_id: String,
    pub attempt: u32,
    /// The `task.pause` row's event hash.
    pub pause: Digest,
    pub mode: crate::retry::RetryMode,
    pub downgrade_reason: Option<crate::retry::DowngradeReason>,
    pub workspace_hash: Digest,
    pub lifecycle: crate::lifecycle::Policy,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_by: Option<Requester>,
}

// ---- task and attempt rows (engine task code) ----

/// How an attempt's agent was contained (`attempt.finished`'s
/// `containment`): the plan's mode, whether a sandbox was applied, and the
/// lines of its output that report a denied access.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Containment {
    pub mode: String,
    pub sandboxed: bool,
    pub denied: Vec<String>,
}

/// What a retry after a request for context changes besides its mode
/// (`retry.decision`'s `modification`): the hash of what the agent asked
/// (the text is kept beside the chain), and the plan's `on_needs_context`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryModification {
    pub needs_context_hash: Option<Digest>,
    pub timeout_ms: Option<u64>,
    pub prompt_added: bool,
    pub model: Option<String>,
}

row_bodies! {
    TaskStarted => TaskStarted in Journal;
    CheckpointTaken => CheckpointTaken in Journal;
    AttemptStarted => AttemptStarted in Journal;
    TaskCheckpoint => TaskCheckpoint in Journal;
    AttemptFinished => AttemptFinished in Journal;
    AttemptAnomaly => AttemptAnomaly in Journal;
    RecoveryDiagnosis => RecoveryDiagnosis in Journal;
    RecoveryBackOff => RecoveryBackOff in Journal;
    RetryBudgetUsed => RetryBudget in Journal;
    RetryBudgetRefused => RetryBudgetRefused in Journal;
    RetryDecision => RetryDecision in Journal;
    crate::retry::DecisionRecord => RetryDecision in Spine;
    CheckpointRestored => CheckpointRestored in Journal;
    TaskPartial => TaskPartial in Journal;
    TaskResult => TaskResult in Journal;
    JournalTailRepaired => JournalTailRepaired in Journal;
    TaskFinished => TaskFinished in Journal;
    SuspendBody => TaskSuspend in Journal;
    ResumeBody => TaskResume in Journal;
    TaskContinued => TaskContinued in Journal;
    TaskPause => TaskPause in Journal;
    TaskUnpause => TaskUnpause in Journal;
    AgentCheckpointBound => TaskAgentCheckpoint in Journal;
    GrantContinued => TaskGrantContinuation in Journal;
    StateInit => StateInit in Audit;
    StateAdopt => StateAdopt in Audit;
    MigrateBody => StateMigrate in Audit;
    crate::record::SealBody => JournalSeal in Audit;
    crate::witness::LedgerSealBody => LedgerSeal in Audit;
    DecisionBinding => RetryCheckpointDecision in Audit;
    RestoredBinding => CheckpointRestored in Audit;
    SuspendReceipt => TaskSuspendReceipt in Audit;
    Release => TaskSuspendResourceRelease in Audit;
    ResumeReceipt => TaskResumeReceipt in Audit;
    GrantContinuation => TaskGrantContinuation in Audit;
    ApprovalBinding => TaskApproval in Audit;
    RunStarted => RunStarted in Ledger;
    TaskTransition => TaskTransition in Ledger;
}

#[cfg(test)]
mod tests;

// ---- run, park and delivery rows (engine run code) ----

impl TaskStatus {
    /// The task has ended in this run (a parked task has not).
    pub const fn is_terminal(self) -> bool {
        !matches!(self, Self::Queued | Self::Running | Self::Suspended)
    }

    /// The task left a result its dependents build on.
    pub const fn delivered(self) -> bool {
        matches!(self, Self::Passed | Self::Partial)
    }

    /// Where the task stands for the coordinator's scheduling decisions.
    pub const fn standing(self) -> crate::schedule::Standing {
        use crate::schedule::Standing;
        match self {
            Self::Queued => Standing::Queued,
            Self::Running => Standing::Running,
            Self::Suspended => Standing::Parked,
            Self::Passed | Self::Partial => Standing::Delivered,
            Self::Blocked => Standing::Blocked,
            Self::Failed | Self::Cancelled => Standing::Undelivered,
        }
    }
}

/// The `detail` of a `process` release: the agent's process group, stopped
/// (or already gone) and reaped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessReleased {
    /// The park stopped a live agent (`false`: none was running).
    pub stopped: bool,
    pub reaped: bool,
    pub attempt: u32,
    /// Why nothing was stopped, for a park completed with no live run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// The `detail` of a `sandbox` release: the worktree's snapshot and
/// whether it was removed (a task run in place keeps its directory).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxReleased {
    /// The snapshot taken before the worktree went (`null`: none taken).
    pub checkpoint: Option<String>,
    pub path: PathBuf,
    pub removed: bool,
    pub files: Option<u64>,
}

impl SandboxReleased {
    /// The snapshot a resume restores: one taken of a worktree removed.
    pub fn restorable(&self) -> Option<&str> {
        self.checkpoint.as_deref().filter(|_| self.removed)
    }
}

/// The `detail` of a `seat` release.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SeatReleased {
    /// A live run gave the seat back: its seats, and how many still run.
    Freed { seats: usize, running_after: usize },
    /// No live run held a seat for the task (`held` is always `false`).
    NotHeld { held: bool, note: String },
}

/// The `detail` of a `budget` release.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum BudgetReleased {
    /// A live run took the headroom back into its pool (`null`: the pool
    /// is unlimited).
    Returned {
        returned_micro_usd: u64,
        pool_free_before: Option<u64>,
        pool_free_after: Option<u64>,
    },
    /// No live run held a reservation (`returned_micro_usd` is 0).
    NotHeld {
        returned_micro_usd: u64,
        note: String,
    },
}

impl SeatReleased {
    /// A seat no live run held.
    pub fn not_held() -> Self {
        Self::NotHeld {
            held: false,
            note: "no live run held a seat for it".to_owned(),
        }
    }
}

impl BudgetReleased {
    /// What went back to the run's pool.
    pub fn returned_micro_usd(&self) -> u64 {
        match self {
            Self::Returned {
                returned_micro_usd, ..
            }
            | Self::NotHeld {
                returned_micro_usd, ..
            } => *returned_micro_usd,
        }
    }

    /// A reservation no live run held.
    pub fn not_held() -> Self {
        Self::NotHeld {
            returned_micro_usd: 0,
            note: "no live run held a reservation for it".to_owned(),
        }
    }
}

impl ProcessReleased {
    /// The process of a park completed with no live run: nothing to stop.
    pub fn gone(attempt: u32) -> Self {
        Self {
            stopped: false,
            reaped: true,
            attempt,
            note: Some("no live process: the run that drove it had ended".to_owned()),
        }
    }
}
