//! `reprise task suspend` and `reprise task resume`: parking a task so it
//! holds nothing while it waits, and taking it back. A live run owns its
//! tasks' processes, journals and seats, so it is asked over its control
//! socket; with no live run the command does the work itself (a resume then
//! continues the run in this process).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use reprise_core::TaskKey;
use reprise_core::retry::RetryMode;
use reprise_engine::{ControlOp, ParkRequest, Parked};
use reprise_store::locks::task_holder;
use reprise_store::suspension::{ParkCause, Wake};
use serde_json::{Value, json};

use crate::cli::ResumeMode;
use crate::commands::resolve::{latest_run_of, task_key};
use crate::error::CliError;
use crate::output::Outcome;
use crate::settings::Settings;

/// What `--until` says: `approval`, an RFC 3339 time, or a duration from now.
pub(crate) fn parse_until(until: Option<&str>) -> Result<Wake, CliError> {
    let Some(until) = until else {
        return Ok(Wake::Resume);
    };
    if until == "approval" {
        return Ok(Wake::Approval);
    }
    let at = match humantime::parse_rfc3339_weak(until) {
        Ok(at) => at,
        Err(_) => match humantime::parse_duration(until) {
            Ok(after) => std::time::SystemTime::now() + after,
            Err(_) => {
                return Err(CliError::usage(format!(
                    "--until {until:?} is not `approval`, a time (2026-12-01T18:00:00Z) or a duration (30m)"
                )));
            }
        },
    };
    if at <= std::time::SystemTime::now() {
        return Err(CliError::usage(format!(
            "--until {until} is in the past; give a later time, or leave --until out to wake it by hand"
        )));
    }
    Ok(Wake::Time {
        at: humantime::format_rfc3339_seconds(at).to_string(),
    })
}

pub(crate) fn suspend(
    settings: &Settings,
    task: &str,
    until: Option<&str>,
    reason: Option<String>,
) -> Result<Outcome, CliError> {
    let wake = parse_until(until)?;
    let (state, key) = settings.keyed_state()?;
    let task = task_key(settings, &state, task)?;
    let parked = match task_holder(&state, &task) {
        // A live run owns the task: it parks it.
        Some(holder) => ask_holder(
            &state,
            &task,
            &holder,
            &ControlOp::Suspend {
                task: task.task.clone(),
                wake,
                reason,
            },
        )?,
        None => {
            let run = latest_run_of(&state, Some(&task.plan))?;
            let request = ParkRequest {
                wake,
                cause: ParkCause::Request,
                reason,
                question: None,
                requested_by: Some(reprise_engine::requester_of(std::process::id())),
            };
            let parked = reprise_engine::park_directly(&state, &key, &task, &run.run_id, &request)
                .map_err(|err| CliError::usage(err.to_string()))?;
            parked_json(&parked)
        }
    };
    Ok(Outcome {
        exit: None,
        text: parked_text(&task, &parked),
        json: parked,
        ok: true,
    })
}

fn parked_json(parked: &Parked) -> Value {
    json!({
        "ok": true,
        "run_id": parked.run_id,
        "task": parked.task.task,
        "plan": parked.task.plan,
        "park": parked.park,
        "receipt": parked.receipt,
        "wake": parked.wake,
        "released": parked.released.iter().map(|(resource, detail)| json!({"resource": resource, "detail": detail})).collect::<Vec<_>>(),
    })
}

fn parked_text(task: &TaskKey, parked: &Value) -> String {
    let mut text = format!(
        "parked {task} in run {} (park {}, receipt {})\n",
        parked["run_id"].as_str().unwrap_or("?"),
        crate::output::short(parked["park"].as_str().unwrap_or("")),
        crate::output::short(parked["receipt"].as_str().unwrap_or("")),
    );
    for release in parked["released"].as_array().into_iter().flatten() {
        let detail = &release["detail"];
        let said = match release["resource"].as_str().unwrap_or("") {
            "process" if detail["stopped"] == json!(true) => {
                "the agent was stopped and reaped".to_owned()
            }
            "process" => "no agent process was running".to_owned(),
            "sandbox" if detail["removed"] == json!(true) => format!(
                "worktree snapshotted ({} files) and removed",
                detail["files"].as_u64().unwrap_or(0)
            ),
            "sandbox" => "the task works in place: its files stay".to_owned(),
            "seat" => "its seat is free".to_owned(),
            "budget" => format!(
                "{} returned to the run's budget",
                crate::commands::status::money(detail["returned_micro_usd"].as_u64().unwrap_or(0))
            ),
            other => other.to_owned(),
        };
        let _ = writeln!(
            text,
            "  released {}: {said}",
            release["resource"].as_str().unwrap_or("?")
        );
    }
    let wake = serde_json::from_value::<Wake>(parked["wake"].clone()).unwrap_or(Wake::Resume);
    let _ = match wake {
        Wake::Approval => writeln!(
            text,
            "wake it: reprise approve {0}, then reprise task resume {0}",
            task.task
        ),
        Wake::Time { at } => writeln!(
            text,
            "it wakes at {at} (in this run, or with `reprise run --continue`); sooner: reprise task resume {}",
            task.task
        ),
        Wake::Resume => writeln!(text, "wake it: reprise task resume {}", task.task),
    };
    text
}

pub(crate) fn resume(
    settings: &Settings,
    task: &str,
    mode: Option<ResumeMode>,
    receipt: Option<&str>,
) -> Result<Outcome, CliError> {
    let receipt = receipt
        .map(|hex| {
            reprise_core::digest::Digest::from_hex(hex.as_bytes()).ok_or_else(|| {
                CliError::usage(format!(
                    "--receipt {hex:?} is not a 64-digit hex digest; copy it from `reprise task suspend --json`"
                ))
            })
        })
        .transpose()?;
    let (state, key) = settings.keyed_state()?;
    let task = task_key(settings, &state, task)?;
    let mode = mode.map(|mode| match mode {
        ResumeMode::Warm => RetryMode::Warm,
        ResumeMode::Fork => RetryMode::Fork,
        ResumeMode::Cold => RetryMode::Cold,
    });
    if let Some(holder) = task_holder(&state, &task) {
        // The live run that parked it takes it back into one of its seats.
        let answer = ask_holder(
            &state,
            &task,
            &holder,
            &ControlOp::Resume {
                task: task.task.clone(),
                mode: mode.map(|mode| mode.as_str().to_owned()),
                receipt,
            },
        )?;
        return Ok(Outcome {
            exit: None,
            text: format!(
                "resumed {task} in live run {}: it runs again when a seat is free\n",
                holder.run_id
            ),
            json: answer,
            ok: true,
        });
    }
    let point = reprise_engine::check_resume(&state, &key, &task, receipt)
        .map_err(|refusal| CliError::usage(refusal.to_string()))?;
    let run_id = point.run_id.clone();
    let mut resumes = BTreeMap::new();
    resumes.insert(
        task.task,
        reprise_engine::Resume {
            point,
            mode,
            approval: None,
        },
    );
    // No live run: this command continues the run, the task first.
    crate::commands::run::continue_run(settings, &run_id, None, resumes, false)
}

/// Asks the live run that holds `task` to do `op`; its answer, or why there
/// is none.
fn ask_live(
    state: &reprise_store::state::StateDir,
    task: &TaskKey,
    op: &ControlOp,
    what: &str,
) -> Result<Value, CliError> {
    let Some(holder) = task_holder(state, task) else {
        return Err(CliError::usage(format!(
            "no live run holds task {task}: only a running task can be {what} (`reprise task suspend` parks an interrupted one)"
        )));
    };
    ask_holder(state, task, &holder, op)
}

/// Sends `op` to the run `holder` names over its control socket; its `ok`
/// answer, or its refusal as a one-line error.
fn ask_holder(
    state: &reprise_store::state::StateDir,
    task: &TaskKey,
    holder: &reprise_store::locks::Holder,
    op: &ControlOp,
) -> Result<Value, CliError> {
    let socket = reprise_engine::socket_path(state, &holder.run_id);
    let answer = reprise_engine::ask_run(&socket, op).map_err(|err| {
        CliError::usage(format!(
            "run {} (pid {}) holds task {task} but its control socket {} does not answer ({err}); stop that run or wait for it",
            holder.run_id,
            holder.pid,
            socket.display()
        ))
    })?;
    if answer.get("ok").and_then(Value::as_bool) != Some(true) {
        return Err(CliError::usage(
            answer
                .get("error")
                .and_then(Value::as_str)
                .unwrap_or("the run refused")
                .to_owned(),
        ));
    }
    Ok(answer)
}

pub(crate) fn pause(
    settings: &Settings,
    task: &str,
    upgrade_after: Option<&str>,
) -> Result<Outcome, CliError> {
    let upgrade_after_ms = upgrade_after
        .map(|text| {
            humantime::parse_duration(text)
                .map(|after| u64::try_from(after.as_millis()).unwrap_or(u64::MAX))
                .map_err(|_| {
                    CliError::usage(format!(
                        "--upgrade-after {text:?} is not a duration (30s, 10m, 1h)"
                    ))
                })
        })
        .transpose()?;
    let state = settings.state()?;
    let task = task_key(settings, &state, task)?;
    let answer = ask_live(
        &state,
        &task,
        &ControlOp::Pause {
            task: task.task.clone(),
            upgrade_after_ms,
        },
        "paused",
    )?;
    Ok(Outcome {
        exit: None,
        text: format!(
            "paused {task} (its worktree, seat and budget kept); go on: reprise task unpause {}\n",
            task.task
        ),
        json: answer,
        ok: true,
    })
}

pub(crate) fn unpause(settings: &Settings, task: &str) -> Result<Outcome, CliError> {
    let state = settings.state()?;
    let task = task_key(settings, &state, task)?;
    let answer = ask_live(
        &state,
        &task,
        &ControlOp::Unpause {
            task: task.task.clone(),
        },
        "unpaused",
    )?;
    Ok(Outcome {
        exit: None,
        text: format!(
            "unpaused {task}: attempt continues {}\n",
            answer["mode"].as_str().unwrap_or("")
        ),
        json: answer,
        ok: true,
    })
}
