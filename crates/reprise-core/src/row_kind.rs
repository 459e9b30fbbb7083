//! The name of every chain row kind, each spelled once (issue 28): the
//! table below is the only place a kind's name is written; writers and
//! readers name kinds through `Kind`, and the typed bodies of the kinds are
//! in the `rows` module. This module depends on nothing else in the crate, so
//! every module may name kinds without a dependency circle.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The chain a row kind is written to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Chain {
    /// A task's journal (`plans/<plan>/tasks/<task>/journal.jsonl`).
    Journal,
    /// A task's spine of decision records.
    Spine,
    /// The keyed audit chain (`audit/audit.jsonl`).
    Audit,
    /// The state directory's ledger of task transitions.
    Ledger,
}

macro_rules! row_kinds {
    ($($(#[$doc:meta])* $variant:ident = $name:literal;)*) => {
        /// Every row kind of every chain. `as_str` is the name rows carry.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Kind {
            $($(#[$doc])* $variant,)*
        }

        impl Kind {
            /// Every kind, in the table's order.
            pub const ALL: &'static [Kind] = &[$(Kind::$variant,)*];

            /// The name rows of this kind carry in their `kind` member.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Kind::$variant => $name,)*
                }
            }

            /// The kind a row's `kind` member names, if it is one reprise writes.
            pub fn parse(name: &str) -> Option<Kind> {
                match name {
                    $($name => Some(Kind::$variant),)*
                    _ => None,
                }
            }
        }
    };
}

row_kinds! {
    // The journal of a task.
    /// A task starts in a run: its plan, base and lifecycle policy.
    TaskStarted = "task.started";
    /// A file checkpoint, before an attempt (or of a failed tree).
    CheckpointTaken = "checkpoint.taken";
    /// An attempt starts, in a mode.
    AttemptStarted = "attempt.started";
    /// The agent of an attempt returned: its session and workspace hash.
    TaskCheckpoint = "task.checkpoint";
    /// An attempt was judged (or stopped by a park or pause).
    AttemptFinished = "attempt.finished";
    /// Something an attempt did that it should not have.
    AttemptAnomaly = "attempt.anomaly";
    /// The severity diagnosis of a failed attempt.
    RecoveryDiagnosis = "recovery.diagnosis";
    /// Provider trouble waited out before a retry.
    RecoveryBackOff = "recovery.back_off";
    /// The retry budget consumed for a retry.
    RetryBudget = "retry.budget";
    /// The retry budget refused a retry.
    RetryBudgetRefused = "retry.budget_refused";
    /// A retry decision (journal), or its record (spine).
    RetryDecision = "retry.decision";
    /// A rollback to a checkpoint (journal), or its binding (audit).
    CheckpointRestored = "checkpoint.restored";
    /// An attempt kept as partial, and its gaps.
    TaskPartial = "task.partial";
    /// The commit of a task's result.
    TaskResult = "task.result";
    /// A torn journal tail cut while the task ran.
    JournalTailRepaired = "journal.tail_repaired";
    /// A task ends, and how.
    TaskFinished = "task.finished";
    /// A park's intent: its event hash is the park's identity.
    TaskSuspend = "task.suspend";
    /// A park settled by a resume.
    TaskResume = "task.resume";
    /// A task taken up again by `run --continue`.
    TaskContinued = "task.continued";
    /// A steering pause.
    TaskPause = "task.pause";
    /// The end of a steering pause.
    TaskUnpause = "task.unpause";
    /// A park's `checkpoint.json` bound by its hash.
    TaskAgentCheckpoint = "task.agent_checkpoint";
    /// A park's grant carried into the resumed task (journal and audit).
    TaskGrantContinuation = "task.grant_continuation";

    // The audit chain.
    /// The state directory's first row: its id.
    StateInit = "state.init";
    /// A witness written for a chain that had none.
    StateAdopt = "state.adopt";
    /// A layout migration: where each journal went.
    StateMigrate = "state.migrate";
    /// A verified task journal head.
    JournalSeal = "journal.seal";
    /// The ledger's head.
    LedgerSeal = "ledger.seal";
    /// What a repair of a journal cut.
    JournalRepair = "journal.repair";
    /// What a repair of a spine cut.
    SpineRepair = "spine.repair";
    /// What a repair of the ledger cut.
    LedgerRepair = "ledger.repair";
    /// What a repair of the audit chain cut.
    AuditRepair = "audit.repair";
    /// A retry decision bound to its journal and spine rows.
    RetryCheckpointDecision = "retry.checkpoint_decision";
    /// The receipt of a park.
    TaskSuspendReceipt = "task.suspend_receipt";
    /// One resource a park gave back.
    TaskSuspendResourceRelease = "task.suspend_resource_release";
    /// The receipt of a resume.
    TaskResumeReceipt = "task.resume_receipt";
    /// An approval's digest bound to its park.
    TaskApproval = "task.approval";

    // The ledger.
    /// A run starts.
    RunStarted = "run.started";
    /// A task moves from one state to another.
    TaskTransition = "task.transition";
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Kind {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Kind {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        Kind::parse(&name)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown row kind {name:?}")))
    }
}

impl PartialEq<&str> for Kind {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<Kind> for &str {
    fn eq(&self, other: &Kind) -> bool {
        *self == other.as_str()
    }
}

impl PartialEq<Kind> for String {
    fn eq(&self, other: &Kind) -> bool {
        self.as_str() == other.as_str()
    }
}
