//! Where the task code's own types meet the rows' typed bodies
//! (`reprise_core::rows`): an attempt's summary and report become its
//! `attempt.finished` row and come back from it, a session becomes what
//! `attempt.started` says of it. The run's state (`crate::state`) names
//! the same outcomes and states as the rows do; these are the one place
//! one is turned into the other.

use reprise_agents::{AttemptReport, SessionMode};
use reprise_core::lifecycle::Judgement;
use reprise_core::outcome::InfraKind;
use reprise_core::rows::{self, Accepted, AttemptFinished, AttemptMode, Containment, SessionUse};

use crate::state::{AttemptSummary, GateVerdict, Outcome, TaskStatus};

/// The session an attempt opens, as its `attempt.started` row names it.
pub(super) fn session_use(session: &SessionMode) -> SessionUse {
    match session {
        SessionMode::New { session_id } => SessionUse::New {
            new: session_id.clone(),
        },
        SessionMode::Resume { session_id } => SessionUse::Resume {
            resume: session_id.clone(),
        },
        SessionMode::Fork {
            from,
            new_session_id,
        } => SessionUse::Fork {
            fork: from.clone(),
            new: new_session_id.clone(),
        },
    }
}

/// The `attempt.finished` row of an attempt that ran in `mode`: its
/// summary, what its agent's driver reported, how it was contained, and
/// what became of it.
pub(super) fn attempt_finished(
    run_id: &str,
    (mode, accepted): (AttemptMode, Accepted),
    summary: &AttemptSummary,
    report: &AttemptReport,
    containment: &Containment,
) -> AttemptFinished {
    AttemptFinished {
        run_id: run_id.to_owned(),
        attempt: summary.n,
        mode,
        outcome: outcome_row(&summary.outcome),
        accepted,
        judged: summary.judged,
        infra_kind: summary.infra_kind.as_deref().and_then(InfraKind::from_name),
        exit_code: summary.exit_code,
        gates: summary.gates.iter().map(gate_row).collect(),
        cost_micro_usd: summary.cost_micro_usd,
        session_id: summary.session_id.clone(),
        adapter: report.adapter.to_owned(),
        cli_version: report.cli_version.clone(),
        cwd: report.cwd.clone(),
        config_home: report.config_home.clone(),
        elapsed_ms: summary.elapsed_ms,
        agent_us: summary.agent_us,
        gates_us: summary.gates_us,
        containment: serde_json::to_value(containment).expect("a containment serialises"),
    }
}

/// The summary an `attempt.finished` row holds; an attempt a park stopped
/// reads back as parked, whatever its agent's stop said.
pub(super) fn summary_of(row: AttemptFinished) -> AttemptSummary {
    let outcome = match row.accepted {
        Accepted::Parked => Outcome::Parked,
        _ => outcome_of(row.outcome),
    };
    AttemptSummary {
        n: row.attempt,
        mode: row.mode.as_str().to_owned(),
        session_id: row.session_id,
        outcome,
        judged: row.judged,
        infra_kind: row.infra_kind.map(|kind| kind.as_str().to_owned()),
        exit_code: row.exit_code,
        gates: row.gates.into_iter().map(gate_of).collect(),
        cost_micro_usd: row.cost_micro_usd,
        elapsed_ms: row.elapsed_ms,
        agent_us: row.agent_us,
        gates_us: row.gates_us,
    }
}

/// What `attempt.finished` says of a judged attempt.
pub(super) fn accepted_of(judgement: Judgement) -> Accepted {
    match judgement {
        Judgement::Passed => Accepted::Passed,
        Judgement::Partial => Accepted::Partial,
        Judgement::Failed => Accepted::Failed,
    }
}

/// A task's state as `task.finished` names it.
pub(super) fn status_row(status: TaskStatus) -> rows::TaskStatus {
    match status {
        TaskStatus::Queued => rows::TaskStatus::Queued,
        TaskStatus::Running => rows::TaskStatus::Running,
        TaskStatus::Passed => rows::TaskStatus::Passed,
        TaskStatus::Partial => rows::TaskStatus::Partial,
        TaskStatus::Failed => rows::TaskStatus::Failed,
        TaskStatus::Blocked => rows::TaskStatus::Blocked,
        TaskStatus::Cancelled => rows::TaskStatus::Cancelled,
        TaskStatus::Suspended => rows::TaskStatus::Suspended,
    }
}

/// The state a `task.finished` row names.
pub(super) fn status_of(status: rows::TaskStatus) -> TaskStatus {
    match status {
        rows::TaskStatus::Queued => TaskStatus::Queued,
        rows::TaskStatus::Running => TaskStatus::Running,
        rows::TaskStatus::Passed => TaskStatus::Passed,
        rows::TaskStatus::Partial => TaskStatus::Partial,
        rows::TaskStatus::Failed => TaskStatus::Failed,
        rows::TaskStatus::Blocked => TaskStatus::Blocked,
        rows::TaskStatus::Cancelled => TaskStatus::Cancelled,
        rows::TaskStatus::Suspended => TaskStatus::Suspended,
    }
}

fn outcome_row(outcome: &Outcome) -> rows::Outcome {
    match outcome {
        Outcome::Passed => rows::Outcome::Passed,
        Outcome::Judged => rows::Outcome::Judged,
        Outcome::Infra => rows::Outcome::Infra,
        Outcome::NeedsContext => rows::Outcome::NeedsContext,
        Outcome::Parked => rows::Outcome::Parked,
    }
}

fn outcome_of(outcome: rows::Outcome) -> Outcome {
    match outcome {
        rows::Outcome::Passed => Outcome::Passed,
        rows::Outcome::Judged => Outcome::Judged,
        rows::Outcome::Infra => Outcome::Infra,
        rows::Outcome::NeedsContext => Outcome::NeedsContext,
        rows::Outcome::Parked => Outcome::Parked,
    }
}

/// A gate's verdict as the row holds it: never what the gate printed.
fn gate_row(verdict: &GateVerdict) -> rows::GateVerdict {
    rows::GateVerdict {
        name: verdict.name.clone(),
        passed: verdict.passed,
        could_not_run: verdict.could_not_run,
        crashed: verdict.crashed,
        exit_code: verdict.exit_code,
        level: verdict.level,
        timed_out_after_ms: verdict.timed_out_after_ms,
    }
}

fn gate_of(verdict: rows::GateVerdict) -> GateVerdict {
    GateVerdict {
        name: verdict.name,
        passed: verdict.passed,
        could_not_run: verdict.could_not_run,
        crashed: verdict.crashed,
        exit_code: verdict.exit_code,
        level: verdict.level,
        timed_out_after_ms: verdict.timed_out_after_ms,
        output: String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_and_outcomes_keep_their_names_in_rows() {
        for status in [
            TaskStatus::Queued,
            TaskStatus::Running,
            TaskStatus::Passed,
            TaskStatus::Partial,
            TaskStatus::Failed,
            TaskStatus::Blocked,
            TaskStatus::Cancelled,
            TaskStatus::Suspended,
        ] {
            assert_eq!(status_row(status).as_str(), status.as_str());
            assert_eq!(status_of(status_row(status)), status);
        }
        for outcome in [
            Outcome::Passed,
            Outcome::Judged,
            Outcome::Infra,
            Outcome::NeedsContext,
            Outcome::Parked,
        ] {
            assert_eq!(
                serde_json::to_value(outcome_row(&outcome)).unwrap(),
                serde_json::to_value(outcome).unwrap()
            );
            assert_eq!(outcome_of(outcome_row(&outcome)), outcome);
        }
    }
}
