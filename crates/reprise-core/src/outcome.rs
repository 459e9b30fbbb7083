//! How an attempt ended: passed, judged, or stopped by infrastructure
//! (DESIGN.md section 6).
//!
//! A judged failure is a verdict on the work: a gate ran and said no, or the
//! agent exited non-zero with a reply. Only a judged failure keeps its reply
//! and has it quoted to the next attempt, so the split is a trust boundary: a
//! budget kill quoted back as "a check did not accept this" would be a lie in
//! a paid prompt. `judged` is therefore read from an explicit list of verdict
//! kinds ([`Verdict`]); everything else is an [`InfraKind`], and nothing is
//! judged by default or by elimination.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::plan::Disclose;

/// How one attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttemptOutcome {
    /// Every gate accepted the attempt.
    Passed,
    /// The work was judged and not accepted, for these reasons.
    Judged(Vec<Verdict>),
    /// Nothing judged the work: the machinery stopped the attempt.
    Infra(InfraKind),
    /// The agent said it cannot go on without more context (a reply whose
    /// last line is `NEEDS_CONTEXT: <what>`): not judged, retried with the
    /// task's `on_needs_context`.
    NeedsContext(String),
}

impl AttemptOutcome {
    /// Whether the attempt is a verdict on the work.
    ///
    /// True only for [`AttemptOutcome::Judged`] carrying at least one
    /// [`Verdict`]: an attempt that names no verdict was judged by nothing,
    /// whatever variant it was put in.
    #[must_use]
    pub fn is_judged(&self) -> bool {
        match self {
            Self::Passed | Self::Infra(_) | Self::NeedsContext(_) => false,
            Self::Judged(verdicts) => !verdicts.is_empty(),
        }
    }
}

/// What a reply asks for when its last non-blank line is
/// `NEEDS_CONTEXT: <what>` (the marker in capitals, `<what>` not empty).
pub fn needs_context(reply: &str) -> Option<&str> {
    let last = reply.lines().rev().find(|line| !line.trim().is_empty())?;
    let what = last.trim().strip_prefix("NEEDS_CONTEXT:")?.trim();
    (!what.is_empty()).then_some(what)
}

/// One verdict against an attempt: the explicit list of what counts as judged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// A command gate ran to the end and did not accept the attempt.
    GateRejected {
        gate: String,
        /// `None` when the command was ended by a signal.
        exit_code: Option<i32>,
        disclose: Disclose,
    },
    /// A predicate gate (`result_matches`) did not match the reply.
    PredicateRejected { gate: String, disclose: Disclose },
    /// The agent exited non-zero and still replied.
    AgentExit { exit_code: i32 },
}

impl Verdict {
    /// The kind of this verdict.
    pub fn kind(&self) -> VerdictKind {
        match self {
            Self::GateRejected { .. } => VerdictKind::GateRejected,
            Self::PredicateRejected { .. } => VerdictKind::PredicateRejected,
            Self::AgentExit { .. } => VerdictKind::AgentExit,
        }
    }
}

/// The name of a [`Verdict`]'s kind, as recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VerdictKind {
    GateRejected,
    PredicateRejected,
    AgentExit,
}

impl VerdictKind {
    /// Every verdict kind.
    pub const ALL: [Self; 3] = [Self::GateRejected, Self::PredicateRejected, Self::AgentExit];

    /// The stable snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::GateRejected => "gate_rejected",
            Self::PredicateRejected => "predicate_rejected",
            Self::AgentExit => "agent_exit",
        }
    }
}

impl fmt::Display for VerdictKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why an attempt ended without a verdict on the work.
///
/// The agent-side names are the ones adapters already record (`spawn_failed`,
/// not `spawn_error`), so journals written before this type existed read the
/// same.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InfraKind {
    /// The agent process could not be started.
    SpawnFailed,
    /// The agent's binary does not exist or is not executable.
    MissingBinary,
    /// The attempt's wall-clock limit expired.
    Timeout,
    /// The agent's CLI could not authenticate.
    AuthFailed,
    /// The provider rate-limited the request.
    RateLimited,
    /// The provider was overloaded.
    Overloaded,
    /// Any other provider or CLI error.
    ApiError,
    /// The provider could not be reached.
    Network,
    /// The session to resume or fork is gone.
    SessionUnavailable,
    /// Spend reached the attempt's budget and the agent was killed.
    BudgetExhausted,
    /// The run was cancelled, or a sibling's failure cancelled this task.
    Cancelled,
    /// The task's prompt could not be interpolated.
    InterpolationError,
    /// A gate could not run (not found, not executable, could not be
    /// started, ended by a signal): it said nothing.
    GateCouldNotRun,
    /// The agent exited non-zero with an empty or whitespace-only reply.
    AgentExitWithoutReply,
    /// The agent printed more than the task's `max_output_bytes` and was killed.
    OutputLimit,
    /// The agent printed nothing for the task's `idle_timeout` and was killed.
    IdleTimeout,
    /// The process driving the run died while the attempt ran (recorded by
    /// the `run --continue` that found it).
    Interrupted,
    /// The plan's usage limit (a quota, not a short rate limit) was hit and
    /// the CLI said when it resets: the task is to be parked until then.
    UsageLimit,
    /// The agent waited on a permission or an answer (silent past the task's
    /// `park_when_idle`, or its CLI reported a denied permission): the task
    /// is to be parked until someone approves.
    AwaitingPermission,
    /// Spend reached the attempt's share of the run's pool while the pool
    /// had more: the retry waits its turn and holds all that is free.
    ShareExhausted,
    /// A gate ran past its `timeout` and was stopped: it said nothing, and
    /// may have left the tree half-written.
    GateTimedOut,
}

impl InfraKind {
    /// Every infrastructure kind.
    pub const ALL: [Self; 21] = [
        Self::SpawnFailed,
        Self::MissingBinary,
        Self::Timeout,
        Self::AuthFailed,
        Self::RateLimited,
        Self::Overloaded,
        Self::ApiError,
        Self::Network,
        Self::SessionUnavailable,
        Self::BudgetExhausted,
        Self::Cancelled,
        Self::InterpolationError,
        Self::GateCouldNotRun,
        Self::AgentExitWithoutReply,
        Self::OutputLimit,
        Self::IdleTimeout,
        Self::Interrupted,
        Self::UsageLimit,
        Self::AwaitingPermission,
        Self::ShareExhausted,
        Self::GateTimedOut,
    ];

    /// The stable snake_case name recorded in journals and `state.json`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SpawnFailed => "spawn_failed",
            Self::MissingBinary => "missing_binary",
            Self::Timeout => "timeout",
            Self::AuthFailed => "auth_failed",
            Self::RateLimited => "rate_limited",
            Self::Overloaded => "overloaded",
            Self::ApiError => "api_error",
            Self::Network => "network",
            Self::SessionUnavailable => "session_unavailable",
            Self::BudgetExhausted => "budget_exhausted",
            Self::Cancelled => "cancelled",
            Self::InterpolationError => "interpolation_error",
            Self::GateCouldNotRun => "gate_could_not_run",
            Self::AgentExitWithoutReply => "agent_exit_without_reply",
            Self::OutputLimit => "output_limit",
            Self::IdleTimeout => "idle_timeout",
            Self::Interrupted => "interrupted",
            Self::UsageLimit => "usage_limit",
            Self::AwaitingPermission => "awaiting_permission",
            Self::ShareExhausted => "share_exhausted",
            Self::GateTimedOut => "gate_timed_out",
        }
    }

    /// Whether a retry may succeed without anyone changing anything
    /// (DESIGN.md section 7: retry without rollback). Not transient: the
    /// fatal kinds (auth, missing binary, budget exhausted, a prompt that
    /// cannot be interpolated), which block the task, and `Cancelled`, which
    /// means the run is stopping and no retry should start.
    pub fn is_transient(self) -> bool {
        match self {
            Self::SpawnFailed
            | Self::Timeout
            | Self::RateLimited
            | Self::Overloaded
            | Self::ApiError
            | Self::Network
            | Self::SessionUnavailable
            | Self::GateCouldNotRun
            | Self::AgentExitWithoutReply
            | Self::OutputLimit
            | Self::IdleTimeout
            | Self::Interrupted
            | Self::UsageLimit
            | Self::AwaitingPermission
            | Self::ShareExhausted
            | Self::GateTimedOut => true,
            Self::MissingBinary
            | Self::AuthFailed
            | Self::BudgetExhausted
            | Self::Cancelled
            | Self::InterpolationError => false,
        }
    }

    /// The kind a recorded name stands for, if any.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.as_str() == name)
    }
}

impl fmt::Display for InfraKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use serde_json::json;

    use super::*;

    /// One verdict of each kind, built by an exhaustive match so a new kind
    /// cannot be added without being classified here.
    fn example(kind: VerdictKind) -> Verdict {
        match kind {
            VerdictKind::GateRejected => Verdict::GateRejected {
                gate: "tests".into(),
                exit_code: Some(1),
                disclose: Disclose::Output,
            },
            VerdictKind::PredicateRejected => Verdict::PredicateRejected {
                gate: "answer".into(),
                disclose: Disclose::Verdict,
            },
            VerdictKind::AgentExit => Verdict::AgentExit { exit_code: 2 },
        }
    }

    /// The position of `kind` in [`InfraKind::ALL`], by an exhaustive match:
    /// a new variant fails to compile here until it is listed.
    fn infra_index(kind: InfraKind) -> usize {
        match kind {
            InfraKind::SpawnFailed => 0,
            InfraKind::MissingBinary => 1,
            InfraKind::Timeout => 2,
            InfraKind::AuthFailed => 3,
            InfraKind::RateLimited => 4,
            InfraKind::Overloaded => 5,
            InfraKind::ApiError => 6,
            InfraKind::Network => 7,
            InfraKind::SessionUnavailable => 8,
            InfraKind::BudgetExhausted => 9,
            InfraKind::Cancelled => 10,
            InfraKind::InterpolationError => 11,
            InfraKind::GateCouldNotRun => 12,
            InfraKind::AgentExitWithoutReply => 13,
            InfraKind::OutputLimit => 14,
            InfraKind::IdleTimeout => 15,
            InfraKind::Interrupted => 16,
            InfraKind::UsageLimit => 17,
            InfraKind::AwaitingPermission => 18,
            InfraKind::ShareExhausted => 19,
            InfraKind::GateTimedOut => 20,
        }
    }

    #[test]
    fn every_infra_kind_is_not_judged() {
        for kind in InfraKind::ALL {
            assert!(!AttemptOutcome::Infra(kind).is_judged(), "{kind}");
        }
    }

    #[test]
    fn every_verdict_kind_is_judged() {
        for kind in VerdictKind::ALL {
            let verdict = example(kind);
            assert_eq!(verdict.kind(), kind);
            assert!(AttemptOutcome::Judged(vec![verdict]).is_judged(), "{kind}");
        }
        let all = VerdictKind::ALL.map(example).to_vec();
        assert!(AttemptOutcome::Judged(all).is_judged());
    }

    #[test]
    fn an_attempt_with_no_verdicts_is_not_judged() {
        assert!(!AttemptOutcome::Judged(Vec::new()).is_judged());
        assert!(!AttemptOutcome::Passed.is_judged());
    }

    #[test]
    fn infra_names_are_stable_unique_and_round_trip() {
        let mut names = BTreeSet::new();
        for (index, kind) in InfraKind::ALL.into_iter().enumerate() {
            assert_eq!(infra_index(kind), index, "{kind} is out of place in ALL");
            assert!(names.insert(kind.as_str()), "{kind} is named twice");
            assert_eq!(InfraKind::from_name(kind.as_str()), Some(kind));
            assert_eq!(
                serde_json::to_value(kind).expect("encode"),
                json!(kind.as_str())
            );
            let decoded: InfraKind = serde_json::from_value(json!(kind.as_str())).expect("decode");
            assert_eq!(decoded, kind);
        }
        assert_eq!(InfraKind::from_name("spawn_error"), None);
        assert_eq!(
            [
                InfraKind::SpawnFailed,
                InfraKind::BudgetExhausted,
                InfraKind::GateCouldNotRun,
                InfraKind::AgentExitWithoutReply,
                InfraKind::UsageLimit,
                InfraKind::AwaitingPermission,
            ]
            .map(InfraKind::as_str),
            [
                "spawn_failed",
                "budget_exhausted",
                "gate_could_not_run",
                "agent_exit_without_reply",
                "usage_limit",
                "awaiting_permission",
            ]
        );
    }

    #[test]
    fn verdict_names_are_stable_and_match_serde() {
        for (index, kind) in VerdictKind::ALL.into_iter().enumerate() {
            // Exhaustive: a new kind fails to compile here until it is listed.
            let position = match kind {
                VerdictKind::GateRejected => 0,
                VerdictKind::PredicateRejected => 1,
                VerdictKind::AgentExit => 2,
            };
            assert_eq!(position, index, "{kind} is out of place in ALL");
        }
        assert_eq!(
            VerdictKind::ALL.map(VerdictKind::as_str),
            ["gate_rejected", "predicate_rejected", "agent_exit"]
        );
        for kind in VerdictKind::ALL {
            assert_eq!(
                serde_json::to_value(kind).expect("encode"),
                json!(kind.as_str())
            );
        }
    }
}
