//! `reprise status [RUN]`, `reprise task list`, `reprise task show TASK`:
//! read back `runs/<run>/state.json`.

use std::fmt::Write as _;

use reprise_core::plan::format_micro_usd;
use reprise_engine::{AttemptSummary, RunState, latest_run, load_run};
use serde_json::json;

use crate::commands::resolve::{latest_run_of, task_key};
use crate::commands::run::run_json;
use crate::error::CliError;
use crate::output::Outcome;
use crate::settings::Settings;

fn engine_error(err: reprise_engine::EngineError) -> CliError {
    CliError::usage(err.to_string())
}

pub(crate) fn money(micro_usd: u64) -> String {
    format!("${}", format_micro_usd(micro_usd))
}

/// One attempt, as the live output and `status` show it.
pub(crate) fn attempt_line(attempt: &AttemptSummary) -> String {
    let mut line = format!("attempt {} ({}): ", attempt.n, attempt.mode);
    match (&attempt.outcome, &attempt.infra_kind) {
        (reprise_engine::Outcome::Infra, Some(kind)) => {
            line.push_str(&format!("infrastructure failure ({kind})"));
        }
        (outcome, _) => line.push_str(match outcome {
            reprise_engine::Outcome::Passed => "passed",
            reprise_engine::Outcome::Judged => "not accepted",
            reprise_engine::Outcome::Infra => "infrastructure failure",
        }),
    }
    if !attempt.gates.is_empty() {
        let gates: Vec<String> = attempt
            .gates
            .iter()
            .map(|gate| {
                let mark = if gate.could_not_run {
                    "could not run"
                } else if gate.passed {
                    "ok"
                } else {
                    "failed"
                };
                match gate.level {
                    Some(level) => format!("{}@{level} {mark}", gate.name),
                    None => format!("{} {mark}", gate.name),
                }
            })
            .collect();
        line.push_str(&format!("; gates: {}", gates.join(", ")));
    }
    if let Some(session) = &attempt.session_id {
        line.push_str(&format!("; session {session}"));
    }
    match attempt.cost_micro_usd {
        Some(cost) => line.push_str(&format!("; cost {}", money(cost))),
        None => line.push_str("; cost unknown"),
    }
    line
}

fn load(settings: &Settings, run: Option<&str>) -> Result<RunState, CliError> {
    let state = settings.state()?;
    match run {
        Some(run) => load_run(&state, run),
        None => latest_run(&state),
    }
    .map_err(engine_error)
}

pub(crate) fn status(settings: &Settings, run: Option<&str>) -> Result<Outcome, CliError> {
    let run = load(settings, run)?;
    let ledger = reprise_store::ledger::verify_ledger(&settings.state()?)?;
    let mut text = format!(
        "run {} ({}): {}\n",
        run.run_id,
        run.plan_name,
        match run.ok {
            Some(true) => "ok",
            Some(false) => "FAILED",
            None => "running (or stopped before it finished)",
        }
    );
    for task in &run.tasks {
        let _ = writeln!(
            text,
            "  {}: {}{}",
            task.task_id,
            task.state.as_str(),
            task.reason
                .as_ref()
                .map(|reason| format!(" ({reason})"))
                .unwrap_or_default()
        );
        for attempt in &task.attempts {
            let _ = writeln!(text, "    {}", attempt_line(attempt));
        }
    }
    let ledger_ok = ledger
        .as_ref()
        .is_none_or(|report| report.first_problem().is_none());
    match ledger.as_ref().and_then(|report| report.first_problem()) {
        Some(fault) => {
            let _ = writeln!(
                text,
                "ledger: BROKEN at row {} ({})",
                fault.row,
                reprise_core::chain::ChainFormat::Ledger.reason_name(fault.reason)
            );
        }
        None => {
            let rows = ledger.as_ref().map_or(0, |report| report.rows);
            let _ = writeln!(text, "ledger: intact ({rows} transitions)");
        }
    }
    let mut json = run_json(&run);
    json["ledger"] = match &ledger {
        Some(report) => {
            let (first_bad_row, reason) = crate::commands::journal::problem_json(
                reprise_core::chain::ChainFormat::Ledger,
                report,
            );
            json!({"ok": ledger_ok, "rows": report.rows, "first_bad_row": first_bad_row, "reason": reason})
        }
        None => serde_json::Value::Null,
    };
    Ok(Outcome {
        json,
        text,
        ok: ledger_ok,
    })
}

pub(crate) fn list(settings: &Settings) -> Result<Outcome, CliError> {
    let run = load(settings, None)?;
    let mut text = String::new();
    for task in &run.tasks {
        let _ = writeln!(
            text,
            "{:<24} {:<9} {} attempts  spent {}",
            task.task_id.as_str(),
            task.state.as_str(),
            task.attempts.len(),
            money(task.spent_micro_usd)
        );
    }
    let tasks: Vec<_> = run
        .tasks
        .iter()
        .map(|task| json!({"task_id": task.task_id.as_str(), "state": task.state, "attempts": task.attempts.len(),
                           "spent_micro_usd": task.spent_micro_usd}))
        .collect();
    Ok(Outcome {
        json: json!({"run_id": run.run_id, "tasks": tasks}),
        text,
        ok: true,
    })
}

pub(crate) fn show(settings: &Settings, task: &str) -> Result<Outcome, CliError> {
    let state = settings.state()?;
    let key = task_key(settings, &state, task)?;
    let run = latest_run_of(&state, Some(&key.plan))?;
    let id = key.task.clone();
    let record = run.task(&id).ok_or_else(|| {
        CliError::usage(format!(
            "task {id} is not in run {} of plan {}; `reprise task list` lists its tasks",
            run.run_id, key.plan
        ))
    })?;
    let mut text = format!(
        "task {} ({}): {}\n",
        id,
        record.agent,
        record.state.as_str()
    );
    if let Some(reason) = &record.reason {
        let _ = writeln!(text, "  reason: {reason}");
    }
    let _ = writeln!(
        text,
        "  run: {}  spent: {}",
        run.run_id,
        money(record.spent_micro_usd)
    );
    for attempt in &record.attempts {
        let _ = writeln!(text, "  {}", attempt_line(attempt));
    }
    for (key, value) in &record.metadata {
        let value = value
            .as_str()
            .map_or_else(|| value.to_string(), str::to_owned);
        let value = value.replace('\n', "\\n");
        let _ = writeln!(text, "  {key}: {value}");
    }
    Ok(Outcome {
        json: json!({
            "plan": key.plan.as_str(),
            "task_id": id.as_str(),
            "run_id": run.run_id,
            "agent": record.agent,
            "state": record.state,
            "reason": record.reason,
            "spent_micro_usd": record.spent_micro_usd,
            "attempts": record.attempts,
            "metadata": record.metadata,
        }),
        text,
        ok: true,
    })
}
