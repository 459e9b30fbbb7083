//! `reprise task list-suspended`: every task whose latest park is not
//! settled, what wakes it, what it freed, and the command that wakes it.

use std::fmt::Write;
use std::time::{Duration, SystemTime};

use reprise_core::TaskKey;
use reprise_core::suspension::Park;
use reprise_store::audit::read_audit;
use reprise_store::parks::{ParkEvidence, read_parks};
use reprise_store::suspension::{Release, SuspendBody, Wake};
use serde_json::{Value, json};

use crate::error::CliError;
use crate::output::{Outcome, short};
use crate::settings::Settings;

/// How long ago `at` (RFC 3339) was, to the second.
fn age_of(at: &str, now: SystemTime) -> Option<Duration> {
    let then = humantime::parse_rfc3339(at).ok()?;
    let age = now.duration_since(then).unwrap_or_default();
    Some(Duration::from_secs(age.as_secs()))
}

/// The commands that wake a park, in order.
fn wake_commands(task: &str, wake: &Wake, approved: bool) -> Vec<String> {
    let resume = format!("reprise task resume {task}");
    match wake {
        Wake::Approval if !approved => vec![format!("reprise approve {task}"), resume],
        _ => vec![resume],
    }
}

pub(crate) fn list(settings: &Settings) -> Result<Outcome, CliError> {
    let (state, key) = settings.keyed_state()?;
    let audit = read_audit(&state, &key)?;
    let now = SystemTime::now();
    let mut parks = Vec::new();
    let mut text = String::new();
    for task in state.task_keys()? {
        if !state.journal_path(&task).is_file() {
            continue;
        }
        let evidence = read_parks(&state, &task, &audit)?;
        let Some(park) = evidence.latest_unsettled() else {
            continue;
        };
        let Ok(body) = serde_json::from_value::<SuspendBody>(park.body.clone()) else {
            let _ = writeln!(
                text,
                "{task}: the park at journal row {} does not parse; run `reprise audit verify-suspension {task}`",
                park.seq
            );
            continue;
        };
        parks.push(show_park(
            &state, &task, &evidence, &park, &body, now, &mut text,
        )?);
    }
    if parks.is_empty() {
        text.push_str("no task is suspended\n");
    }
    Ok(Outcome {
        json: json!({"suspended": parks}),
        text,
        ok: true,
        exit: None,
    })
}

/// One unsettled park: its lines of the listing, and its JSON.
fn show_park(
    state: &reprise_store::state::StateDir,
    task: &TaskKey,
    evidence: &ParkEvidence,
    park: &Park,
    body: &SuspendBody,
    now: SystemTime,
    text: &mut String,
) -> Result<Value, CliError> {
    // What the agent asked is kept beside the chain, which holds its
    // hash (older parks held the text itself).
    let question = match body.question_hash {
        Some(hash) => {
            reprise_store::replies::read_agent_text(state, &body.run_id, &task.task, hash)?
                .or_else(|| Some("(kept text missing or changed)".to_owned()))
        }
        None => body.question.clone(),
    };
    let name = display_name(state, task)?;
    let approved = evidence.approved(park.park);
    let commands = wake_commands(&name, &body.wake, approved);
    let age = age_of(&park.at, now);
    let releases = evidence.releases_of(park.park);
    let freed: Vec<Value> = releases
        .iter()
        .map(|release| json!({"resource": release.resource.as_str(), "detail": release.detail}))
        .collect();
    let _ = writeln!(
        text,
        "{task}  run {}  parked {}  waits for {}{}",
        body.run_id,
        age.map_or_else(
            || "at an unreadable time".to_owned(),
            |age| format!("{} ago", humantime::format_duration(age))
        ),
        body.wake.describe(),
        if matches!(body.wake, Wake::Approval) && approved {
            " (approved)"
        } else {
            ""
        }
    );
    let mut why = format!("  cause: {}", body.cause.as_str());
    if let Some(reason) = &body.reason {
        let _ = write!(why, "; reason: {reason}");
    }
    if let Some(question) = &question {
        let _ = write!(why, "; asked: {question}");
    }
    let _ = writeln!(text, "{why}");
    let _ = writeln!(
        text,
        "  workspace: {}",
        short(&body.workspace_hash.to_hex())
    );
    let _ = writeln!(text, "  freed: {}", freed_text(&releases, body));
    let _ = writeln!(text, "  wake: {}", commands.join(", then "));
    Ok(json!({
        "plan": task.plan.as_str(),
        "task_id": task.task.as_str(),
        "run_id": body.run_id,
        "park": park.park,
        "journal_seq": park.seq,
        "receipt": evidence.receipt_of(park.park),
        "parked_at": park.at,
        "age_secs": age.map(|age| age.as_secs()),
        "wake": body.wake,
        "wake_condition": body.wake.describe(),
        "approved": approved,
        "cause": body.cause.as_str(),
        "reason": body.reason,
        "question": question,
        "question_hash": body.question_hash,
        "workspace_hash": body.workspace_hash,
        "session_id": body.session_id,
        "envelope": body.envelope,
        "freed": freed,
        "wake_commands": commands,
    }))
}

/// What a park gave back: its resources, and the budget returned to the
/// pool.
fn freed_text(releases: &[&Release], body: &SuspendBody) -> String {
    let resources = if releases.is_empty() {
        "nothing yet (the park is not complete)".to_owned()
    } else {
        releases
            .iter()
            .map(|release| release.resource.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let budget = if releases
        .iter()
        .any(|release| release.resource.as_str() == "budget")
    {
        format!(
            " ({} back in the pool)",
            crate::output::money(body.envelope.headroom_micro_usd)
        )
    } else {
        String::new()
    };
    format!("{resources}{budget}")
}

/// The shortest name that resolves to `task`: its id when only its plan has
/// it, else `PLAN/TASK`.
fn display_name(
    state: &reprise_store::state::StateDir,
    task: &TaskKey,
) -> Result<String, CliError> {
    Ok(if state.plans_with_task(&task.task)?.len() == 1 {
        task.task.to_string()
    } else {
        task.to_string()
    })
}
