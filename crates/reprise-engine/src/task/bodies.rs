//! Where the task code's own types meet the rows' typed bodies
//! (`reprise_core::rows`): an attempt's summary and report become its
//! `attempt.finished` row and come back from it, a session becomes what
//! `attempt.started` says of it. The run's state (`crate::state`) uses the
//! rows' own `TaskStatus` and `Outcome`; its gate verdicts also carry what
//! each gate printed, which no row holds.

use reprise_agents::{AttemptReport, SessionMode};
use reprise_core::lifecycle::Judgement;
use reprise_core::outcome::InfraKind;
use reprise_core::rows::{self, Accepted, AttemptFinished, AttemptMode, Containment, SessionUse};

use crate::state::{AttemptSummary, GateVerdict, Outcome};

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
        outcome: summary.outcome,
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
        _ => row.outcome,
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
