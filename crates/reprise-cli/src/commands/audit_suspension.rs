//! `reprise audit verify-suspension TASK`: whether the task's latest park
//! is settled and its evidence holds, offline, from the journal and the
//! audit chain alone.

use std::fmt::Write;

use reprise_core::suspension::{Status, SuspensionReport};
use reprise_core::verify::Identity;
use reprise_store::audit::read_audit;
use reprise_store::parks::read_parks;
use serde_json::json;

use crate::commands::resolve::task_key;
use crate::error::CliError;
use crate::output::{Outcome, short};
use crate::settings::Settings;

pub(crate) fn verify(settings: &Settings, task: &str) -> Result<Outcome, CliError> {
    let (state, key) = settings.keyed_state()?;
    let task = task_key(settings, &state, task)?;
    let audit = read_audit(&state, &key)?;
    let evidence = read_parks(&state, &task, &audit)?;
    let Some(report) = evidence.verify() else {
        return Err(CliError::usage(format!(
            "task {task} was never parked: its journal holds no task.suspend row and the audit chain no receipt for it"
        )));
    };
    let mut json = serde_json::to_value(&report).expect("a report serialises");
    json["plan"] = json!(task.plan.as_str());
    json["task_id"] = json!(task.task.as_str());
    Ok(Outcome {
        text: text(&task.to_string(), &report),
        ok: report.ok,
        code: None,
        json,
    })
}

/// One line per fact.
fn text(task: &str, report: &SuspensionReport) -> String {
    let mut text = format!("suspension of {task}: {}\n", report.status.as_str());
    if let Some(latest) = &report.latest {
        let _ = writeln!(
            text,
            "  park: journal row {} ({}) of run {}{}",
            latest.seq,
            short(&latest.park.to_hex()),
            latest.run_id,
            if report.parks > 1 {
                format!(", the latest of {}", report.parks)
            } else {
                String::new()
            }
        );
        match latest.receipt_row {
            Some(row) => {
                let _ = writeln!(text, "  suspend receipt: audit row {row}");
            }
            None => text.push_str("  suspend receipt: not written yet\n"),
        }
        if latest.released.is_empty() {
            text.push_str("  released: nothing yet\n");
        } else {
            let _ = writeln!(text, "  released: {}", latest.released.join(", "));
        }
        match (latest.resume_seq, latest.resume_receipt_row) {
            (Some(seq), Some(row)) => {
                let _ = writeln!(
                    text,
                    "  resumed: {} (journal row {seq}, receipt at audit row {row})",
                    report.effective_mode.as_deref().unwrap_or("?")
                );
            }
            (Some(seq), None) => {
                let _ = writeln!(
                    text,
                    "  resumed: journal row {seq}, its receipt not written yet"
                );
            }
            _ => text.push_str("  resumed: not yet (a live park)\n"),
        }
    }
    match report.workspace_match {
        Some(true) => text.push_str("  workspace: the resume's is the park's\n"),
        Some(false) => {
            let _ = writeln!(
                text,
                "  workspace: changed while parked{}",
                report
                    .downgrade_reason
                    .as_deref()
                    .map(|reason| format!(" ({reason})"))
                    .unwrap_or_default()
            );
        }
        None => {}
    }
    let _ = writeln!(
        text,
        "  audit chain: {}",
        if report.chain_ok { "ok" } else { "FAILED" }
    );
    let identity = match report.journal_identity {
        Identity::Verified => "sealed rows match",
        Identity::Mismatched => "a seal names a row it lacks",
        Identity::Unverifiable => "not sealed yet",
    };
    let _ = writeln!(
        text,
        "  journal: {} ({identity})",
        if report.journal_ok { "ok" } else { "FAILED" }
    );
    for problem in &report.errors {
        let _ = writeln!(text, "  error: {problem}");
    }
    if report.status == Status::Pending {
        text.push_str(
            "  pending is not an error: the park is live or a step of it is still to be written\n",
        );
    }
    text
}
