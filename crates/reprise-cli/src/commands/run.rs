//! `reprise run PLAN`: validate the plan, find or create the state directory,
//! run every task, print each attempt as it ends, and exit 0 only when every
//! task passed.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use reprise_agents::CancelToken;
use reprise_core::TaskId;
use reprise_core::budget::BudgetSpec;
use reprise_core::digest::AuditKey;
use reprise_core::plan::Plan;
use reprise_engine::{
    AgentSetup, Event, EventSink, RunOptions, RunState, load_plan, new_run_id, resolve_budget,
    run_plan,
};
use reprise_store::audit::AuditLog;
use reprise_store::key::{check_key, load_key, load_or_create_key};
use reprise_store::state::{StateDir, now_rfc3339};
use serde_json::{Value, json};

use crate::commands::status::{attempt_line, money};
use crate::error::CliError;
use crate::output::{Outcome, short};
use crate::settings::Settings;

/// Prints each event as a line, as it happens.
struct LivePrinter;

impl EventSink for LivePrinter {
    fn event(&mut self, event: &Event) {
        let line = match event {
            Event::RunStarted {
                run_id,
                plan_name,
                tasks,
                seats,
            } => format!("run {run_id} ({plan_name}): {tasks} tasks, {seats} seats"),
            Event::AttemptStarted {
                task,
                attempt,
                mode,
            } => format!("[{task}] attempt {attempt} ({mode}) started"),
            Event::AttemptFinished { task, summary } => {
                format!("[{task}] {}", attempt_line(summary))
            }
            Event::Decision { task, record } => {
                let reason = record
                    .downgrade_reason
                    .map(|reason| format!(", downgraded: {}", reason.as_str()))
                    .unwrap_or_default();
                format!(
                    "[{task}] retry decision: {} (requested {}{reason}), decision {}",
                    record.retry_mode,
                    record.requested_mode,
                    record
                        .hash()
                        .map(|hash| short(&hash.to_hex()).to_owned())
                        .unwrap_or_default()
                )
            }
            Event::TaskFinished {
                task,
                status,
                reason,
            } => match reason {
                Some(reason) => format!("[{task}] {}: {reason}", status.as_str()),
                None => format!("[{task}] {}", status.as_str()),
            },
            Event::Warning {
                task: Some(task),
                message,
            } => format!("[{task}] warning: {message}"),
            Event::Warning {
                task: None,
                message,
            } => format!("warning: {message}"),
        };
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, "{line}");
    }
}

/// Collects nothing: `--json` prints only the final document.
struct Quiet;

impl EventSink for Quiet {
    fn event(&mut self, _: &Event) {}
}

pub(crate) fn run(
    settings: &Settings,
    plan_path: Option<&std::path::Path>,
    retry_failed: Option<&str>,
    seats: Option<u32>,
    retry_budget: Option<&str>,
) -> Result<Outcome, CliError> {
    let prepared = prepare(settings, plan_path, retry_failed, retry_budget)?;
    let run = execute(settings, prepared, new_run_id(), seats, BTreeMap::new())?;
    let ok = run.ok == Some(true);
    Ok(Outcome {
        json: run_json(&run),
        text: summary_text(&run),
        ok,
    })
}

/// A run that can start: the plan and budget validated, the state directory
/// and key in hand.
pub(crate) struct Prepared {
    pub(crate) plan: Plan,
    pub(crate) plan_path: PathBuf,
    pub(crate) prior: Option<RunState>,
    pub(crate) retry_budget: Option<BudgetSpec>,
    pub(crate) state: StateDir,
    pub(crate) key: AuditKey,
}

/// Validates everything a run needs before anything is written, then finds
/// (or creates, as `reprise init` would) the state directory.
pub(crate) fn prepare(
    settings: &Settings,
    plan_path: Option<&Path>,
    retry_failed: Option<&str>,
    retry_budget: Option<&str>,
) -> Result<Prepared, CliError> {
    prepare_checked(settings, plan_path, retry_failed, retry_budget, |_| Ok(()))
}

/// As [`prepare`], with the caller's own check of the plan made before
/// anything is written.
pub(crate) fn prepare_checked(
    settings: &Settings,
    plan_path: Option<&Path>,
    retry_failed: Option<&str>,
    retry_budget: Option<&str>,
    check: impl FnOnce(&Plan) -> Result<(), CliError>,
) -> Result<Prepared, CliError> {
    // A new leg needs the finished run it continues, from an existing state
    // directory; its plan is the one that run recorded unless one is given.
    let prior = match retry_failed {
        Some(run_id) => {
            let state = settings.state()?;
            let prior = reprise_engine::load_run(&state, run_id)
                .map_err(|err| CliError::usage(err.to_string()))?;
            if prior.finished_at.is_none() {
                return Err(CliError::usage(format!(
                    "run {run_id} has not finished; wait for it, or retry a finished run"
                )));
            }
            Some(prior)
        }
        None => None,
    };
    let plan_path = match (plan_path, &prior) {
        (Some(path), _) => path.to_path_buf(),
        (None, Some(prior)) => PathBuf::from(&prior.plan),
        (None, None) => return Err(CliError::usage("give a plan file, or --retry-failed RUN")),
    };
    // A bad plan stops here, before anything is written.
    let plan = load_plan(&plan_path).map_err(|err| CliError::usage(err.to_string()))?;
    check(&plan)?;
    // So does a retry budget that the plan's gates cannot honour.
    let retry_budget =
        resolve_budget(&plan, retry_budget).map_err(|err| CliError::usage(err.to_string()))?;
    let (state, key) = open_or_create_state(settings)?;
    Ok(Prepared {
        plan,
        plan_path,
        prior,
        retry_budget,
        state,
        key,
    })
}

/// The state directory and audit key, creating both when there is no state
/// directory yet (as `reprise init` would).
pub(crate) fn open_or_create_state(settings: &Settings) -> Result<(StateDir, AuditKey), CliError> {
    let key_path = settings.key_path()?;
    match settings.state() {
        Ok(state) => Ok((state, load_key(key_path)?)),
        Err(_) if settings.state_dir.is_none() => {
            check_key(key_path)?;
            let (state, created) = StateDir::create(&settings.init_target())?;
            let key = load_or_create_key(key_path)?;
            if created {
                AuditLog::open(&state, key.clone())?.append(
                    "state.init",
                    &now_rfc3339(),
                    &json!({"layout": 1}),
                )?;
            }
            Ok((state, key))
        }
        Err(err) => Err(err),
    }
}

/// Runs a prepared plan to its end, printing events unless `--json`.
pub(crate) fn execute(
    settings: &Settings,
    prepared: Prepared,
    run_id: String,
    seats: Option<u32>,
    agent_setup: BTreeMap<TaskId, AgentSetup>,
) -> Result<RunState, CliError> {
    let Prepared {
        plan,
        plan_path,
        prior,
        retry_budget,
        state,
        key,
    } = prepared;
    let project = state
        .root()
        .parent()
        .map_or_else(|| settings.cwd.clone(), Path::to_path_buf);
    let cancel = CancelToken::new();
    let handler_token = cancel.clone();
    // A second Ctrl-C while tasks wind down does nothing more: children are
    // being reaped and the state written.
    let _ = ctrlc::set_handler(move || handler_token.cancel());
    let options = RunOptions {
        run_id,
        plan_path,
        project,
        seats,
        retry_of: prior,
        retry_budget,
        agent_setup,
        key,
    };
    if settings.json {
        run_plan(&state, &plan, options, &cancel, &mut Quiet)
    } else {
        run_plan(&state, &plan, options, &cancel, &mut LivePrinter)
    }
    .map_err(|err| CliError {
        message: err.to_string(),
        code: crate::error::EXIT_FAILED,
    })
}

/// `{"run_id","ok","tasks":[{"task_id","state","attempts":[{"n","mode","session_id","outcome","judged"}]}]}`
pub(crate) fn run_json(run: &RunState) -> Value {
    json!({
        "run_id": run.run_id,
        "ok": run.ok == Some(true),
        "plan": run.plan,
        "tasks": run.tasks.iter().map(|task| json!({
            "task_id": task.task_id.as_str(),
            "state": task.state,
            "reason": task.reason,
            "spent_micro_usd": task.spent_micro_usd,
            "attempts": task.attempts.iter().map(|attempt| json!({
                "n": attempt.n,
                "mode": attempt.mode,
                "session_id": attempt.session_id,
                "outcome": attempt.outcome,
                "judged": attempt.judged,
                "infra_kind": attempt.infra_kind,
                "cost_micro_usd": attempt.cost_micro_usd,
                "gates": attempt.gates,
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}

pub(crate) fn summary_text(run: &RunState) -> String {
    let passed = run
        .tasks
        .iter()
        .filter(|task| task.state == reprise_engine::TaskStatus::Passed)
        .count();
    let spent: u64 = run.tasks.iter().map(|task| task.spent_micro_usd).sum();
    let mut text = format!(
        "run {}: {} ({passed} of {} tasks passed, spent {})\n",
        run.run_id,
        if run.ok == Some(true) { "ok" } else { "FAILED" },
        run.tasks.len(),
        money(spent),
    );
    let first = run
        .tasks
        .first()
        .map(|task| task.task_id.as_str())
        .unwrap_or("TASK");
    let _ = writeln!(
        text,
        "next: `reprise status {}`, `reprise journal verify {first}`, `reprise lineage show {first}`",
        run.run_id
    );
    text
}
