//! `reprise lineage show TASK`: every retry decision of a task, from its
//! journal, with the spine that seals them verified alongside.

use std::fmt::Write as _;

use reprise_engine::read_decisions;
use reprise_store::journal::verify_spine;
use serde_json::json;

use crate::commands::resolve::task_key;
use crate::error::CliError;
use crate::output::{Outcome, short};
use crate::settings::Settings;

pub(crate) fn show(settings: &Settings, task: &str) -> Result<Outcome, CliError> {
    let state = settings.state()?;
    let id = task_key(settings, &state, task)?;
    let decisions = read_decisions(&state, &id).map_err(|err| CliError::usage(err.to_string()))?;
    let spine = verify_spine(&state, &id)?;
    let spine_ok = spine
        .as_ref()
        .is_none_or(|report| report.first_problem().is_none());
    let sealed = spine.as_ref().map_or(0, |report| report.rows);
    let mut text = format!(
        "lineage of {id}: {} decisions, {sealed} sealed in the spine ({})\n",
        decisions.len(),
        if spine_ok {
            "spine intact"
        } else {
            "SPINE BROKEN"
        }
    );
    let mut rows = Vec::new();
    for row in &decisions {
        let Some(record) = &row.record else {
            let _ = writeln!(text, "  seq {}: unreadable decision", row.seq);
            continue;
        };
        let reason = record
            .downgrade_reason
            .map(|reason| reason.as_str())
            .unwrap_or("-");
        let _ = writeln!(
            text,
            "  attempt {}: {} (requested {}, downgrade {reason}); checkpoint session {}; workspace {}; decision {} (journal seq {})",
            row.attempt
                .map_or_else(|| "?".to_owned(), |n| n.to_string()),
            record.retry_mode,
            record.requested_mode,
            record.checkpoint_session_id.as_deref().unwrap_or("-"),
            match record.workspace_match {
                Some(true) => "unchanged",
                Some(false) => "changed",
                None => "-",
            },
            row.decision_hash
                .map(|hash| short(&hash.to_hex()).to_owned())
                .unwrap_or_default(),
            row.seq,
        );
        rows.push(json!({
            "seq": row.seq,
            "at": row.at,
            "run_id": row.run_id,
            "attempt": row.attempt,
            "decision": record,
            "decision_hash": row.decision_hash,
        }));
    }
    Ok(Outcome {
        json: json!({"plan": id.plan.as_str(), "task_id": id.task.as_str(), "decisions": rows, "spine_rows": sealed, "spine_ok": spine_ok}),
        text,
        ok: spine_ok,
    })
}
