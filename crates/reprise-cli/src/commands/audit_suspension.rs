//! `reprise audit verify-suspension TASK`: whether the task's latest park
//! is settled and its evidence holds, offline, from the journal and the
//! audit chain alone.
//!
//! A copy of a state directory (another path, another machine) has no
//! witness where it lies: the witness is named by the state directory's
//! path and kept beside the key. So a missing witness does not fail the
//! proof when the chain itself verifies with the key: the verdict is the one
//! the original gives, said to rest on the chain alone (rows cut from its
//! end cannot be seen without the witness). Nothing is written; a witness
//! that is there and disagrees is still a failure.

use std::fmt::Write;

use reprise_core::suspension::{Status, SuspensionReport};
use reprise_core::verify::Identity;
use reprise_core::witness::WitnessReason;
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
    let mut audit = read_audit(&state, &key)?;
    let witness_absent = audit.witness_problem == Some(WitnessReason::WitnessMissing)
        && audit.report.first_problem().is_none();
    if witness_absent {
        audit.witness_problem = None;
    }
    let evidence = read_parks(&state, &task, &audit)?;
    let Some(report) = evidence.verify() else {
        return Err(CliError::usage(format!(
            "task {task} was never parked: its journal holds no task.suspend row and the audit chain no receipt for it"
        )));
    };
    let mut json = serde_json::to_value(&report).expect("a report serialises");
    json["plan"] = json!(task.plan.as_str());
    json["task_id"] = json!(task.task.as_str());
    json["witness"] = json!(if witness_absent { "absent" } else { "checked" });
    let mut text = text(&task.to_string(), &report);
    if witness_absent {
        let _ = writeln!(
            text,
            "  witness: none here for {}: the witness is not this machine's (or this path's), as for a copy; the verdict rests on the audit chain verified with the key, and rows cut from its end could not be seen (`reprise init` there adopts the copy under a new witness)",
            state.root().display()
        );
    }
    Ok(Outcome {
        text,
        ok: report.ok,
        exit: None,
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
