//! The executor's state, by how long it lives: one [`Attempt`] from its
//! agent's spawn until the next attempt's (what its effects hand each
//! other: report, judgement, diagnosis), and the few things a task's
//! attempts pass on to the ones after them.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use reprise_agents::AttemptReport;
use reprise_core::digest::Digest;
use reprise_core::outcome::AttemptOutcome as Classified;
use reprise_core::record::Head;
use reprise_core::recovery::{Anomaly, Diagnosis};
use reprise_core::rows::RetryModification;
use reprise_store::snapshot::Checkpoint;
use serde_json::Value;

use crate::recovery::Evidence;
use crate::state::AttemptSummary;

/// The attempt under way, or the latest one: replaced when the next one's
/// agent is spawned. A task taken up again sets it up from its journal.
#[derive(Default)]
pub(super) struct Attempt {
    /// Its number (0 before the first).
    pub(super) number: u32,
    /// When it started, and its scratch dir until it is judged.
    pub(super) started: Option<Instant>,
    pub(super) tmp: Option<PathBuf>,
    /// Its agent ran in a sandbox.
    pub(super) sandboxed: bool,
    /// A park or pause recorded while its agent ran, before it was halted.
    pub(super) halted: Option<Halted>,
    /// What its agent's driver reported.
    pub(super) report: Option<AttemptReport>,
    /// The event hash of the row written when its agent ended, and when.
    pub(super) agent_ended: Option<Digest>,
    pub(super) agent_ended_at: Option<Instant>,
    /// What its agent wrote outside `allowed_paths`, once looked for
    /// (before its gates ran), and what it changed of the gates' files.
    pub(super) outside: Option<Option<Anomaly>>,
    pub(super) protected_changed: Option<Anomaly>,
    /// Its judgement, in the run's terms and in the core's taxonomy.
    pub(super) summary: Option<AttemptSummary>,
    pub(super) classified: Option<Classified>,
    /// The journal's head after its `attempt.finished`: a result commit
    /// names it.
    pub(super) finished_head: Option<Head>,
    pub(super) diagnosis: Option<Diagnosis>,
    /// On a fleet worker: the tree its agent left, snapshotted, sent to the
    /// remote only if the attempt does not pass (a retry may then go on
    /// elsewhere).
    pub(super) left_tree: Option<reprise_store::snapshot::Checkpoint>,
}

impl Attempt {
    pub(super) fn numbered(number: u32) -> Self {
        Self {
            number,
            ..Self::default()
        }
    }
}

/// A stop recorded before the running agent was halted.
pub(super) enum Halted {
    /// The park's `task.suspend` row and its receipt.
    Park(Box<RecordedPark>),
    /// The pause's `task.pause` row, and the answer to whoever asked.
    Pause(RecordedPause, Option<crate::park::ParkReply>),
}

/// A park's first steps, durable: its `task.suspend` row, its agent
/// checkpoint and its receipt in the audit chain.
pub(super) struct RecordedPark {
    pub(super) body: reprise_core::rows::SuspendBody,
    pub(super) head: Head,
    /// `None` on a fleet worker: the coordinator writes it from the row.
    pub(super) receipt: Option<Digest>,
    pub(super) reply: Option<crate::park::ParkReply>,
}

/// A pause's row, durable.
pub(super) struct RecordedPause {
    pub(super) head: Head,
    pub(super) workspace_hash: Digest,
    pub(super) session_id: Option<String>,
    pub(super) upgrade_after: Option<Duration>,
}

/// The task's file checkpoints, each with its workspace hash.
#[derive(Default)]
pub(super) struct Checkpoints {
    /// Before the first attempt: the task's base.
    pub(super) base: Option<(Checkpoint, Digest)>,
    /// Before the latest attempt.
    pub(super) before_latest: Option<(Checkpoint, Digest)>,
    /// The one the tree was just restored to (its hash checked), for the
    /// next attempt's checkpoint to reuse instead of taking it again.
    pub(super) restored: Option<(Checkpoint, Digest)>,
}

/// How many judged attempts in a row have failed the same way (the same
/// evidence), for the diagnosis and for `retry_policy: auto`.
#[derive(Default)]
pub(super) struct FailureStreak {
    last: Option<Evidence>,
    in_a_row: u32,
}

impl FailureStreak {
    /// Counts an attempt's evidence: a judged attempt extends the streak
    /// or starts one, any other breaks it. Returns the streak's length.
    pub(super) fn see(&mut self, evidence: &Evidence, judged: bool) -> u32 {
        self.in_a_row = match (&self.last, judged) {
            (Some(last), true) if last == evidence => self.in_a_row + 1,
            (_, true) => 1,
            (_, false) => 0,
        };
        self.last = judged.then(|| evidence.clone());
        self.in_a_row
    }

    pub(super) fn in_a_row(&self) -> u32 {
        self.in_a_row
    }
}

/// What the latest retry decision changed besides the mode, after a request
/// for context (the plan's `on_needs_context`): it holds for the attempts
/// after it until the next decision.
#[derive(Default)]
pub(super) struct RetryChanges {
    pub(super) timeout: Option<Duration>,
    pub(super) model: Option<String>,
    /// As the decision's row records it.
    pub(super) modification: Option<RetryModification>,
}

impl RetryChanges {
    /// The modification as the decision's row binds it.
    pub(super) fn modification(&self) -> Option<Value> {
        self.modification.as_ref().map(|modification| {
            serde_json::to_value(modification).expect("a modification serialises")
        })
    }
}

/// The agent a park or pause stopped, and its session: kept after an
/// unpause, as a later park between attempts names it.
pub(super) struct StoppedAgent {
    pub(super) session: Option<String>,
}
