//! `reprise lineage show TASK`: every retry decision of a task, shown only
//! where it verifies. The journal, the spine and the audit chain (with its
//! witness) are verified first; a decision is printed as fact only when its
//! journal row is in the verified prefix and bound by an audit row, and the
//! spine matches its bindings. Anything else is printed as broken, and the
//! exit status is 1.

use std::fmt::Write as _;

use reprise_core::chain::ChainFormat;
use reprise_core::verify::Identity;
use reprise_engine::read_decisions;
use reprise_store::journal::verify_journal;
use serde_json::json;

use crate::commands::resolve::task_key;
use crate::commands::task::TaskArgs;
use crate::error::CliError;
use crate::output::{Outcome, short};
use crate::settings::Settings;

#[derive(Debug, clap::Subcommand)]
pub(crate) enum LineageCommand {
    /// Show a task's retry decisions, from its journal and spine.
    #[command(after_help = help!("\
  reprise lineage show add-greeting"))]
    Show(TaskArgs),
}

impl LineageCommand {
    pub(crate) fn run(self, settings: &Settings) -> Result<Outcome, CliError> {
        match self {
            Self::Show(args) => show(&args.settings(settings), &args.task),
        }
    }
}

fn show(settings: &Settings, task: &str) -> Result<Outcome, CliError> {
    let (state, key) = settings.keyed_state()?;
    let id = task_key(settings, &state, task)?;
    let verification = verify_journal(&state, &id, || Ok(key))?;
    let decisions = read_decisions(&state, &id).map_err(|err| CliError::usage(err.to_string()))?;
    let spine_ok = verification
        .spine
        .as_ref()
        .is_none_or(|report| report.first_problem().is_none())
        && verification.decisions != Identity::Mismatched;
    let sealed = verification.spine.as_ref().map_or(0, |report| report.rows);
    let audit_ok = verification.audit.ok();
    let journal_ok =
        verification.chain.fault.is_none() && verification.identity != Identity::Mismatched;
    let mut text = format!(
        "lineage of {id}: {}, {sealed} sealed in the spine ({})\n",
        crate::output::count(decisions.len() as u64, "decision"),
        if spine_ok {
            "spine matches its audit bindings"
        } else {
            "SPINE BROKEN: it does not match the decisions the audit chain binds"
        }
    );
    if let Some(fault) = verification.chain.fault {
        let _ = writeln!(
            text,
            "  journal: BROKEN at row {} ({}); decisions from there on are not shown",
            fault.row,
            ChainFormat::Journal.reason_name(fault.reason)
        );
    }
    if let Some(line) = crate::commands::audit::audit_problem_line(&verification.audit) {
        let _ = writeln!(text, "  {line}; no decision is shown as fact");
    }
    let mut rows = Vec::new();
    let mut all_shown = spine_ok && audit_ok && journal_ok;
    for row in &decisions {
        let bound = verification.bound_decision_rows.contains(&row.event_hash);
        let record = row
            .record
            .as_ref()
            .filter(|_| bound && spine_ok && audit_ok && journal_ok);
        let Some(record) = record else {
            all_shown = false;
            let why = if !bound {
                "not in the verified journal, or no audit row binds it"
            } else {
                "its spine or audit chain does not verify"
            };
            let _ = writeln!(text, "  seq {}: BROKEN ({why})", row.seq);
            rows.push(json!({"seq": row.seq, "verified": false}));
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
            "verified": true,
            "at": row.at,
            "run_id": row.run_id,
            "attempt": row.attempt,
            "decision": record,
            "decision_hash": row.decision_hash,
        }));
    }
    Ok(Outcome {
        exit: None,
        json: json!({"plan": id.plan.as_str(), "task_id": id.task.as_str(), "ok": all_shown, "decisions": rows, "spine_rows": sealed, "spine_ok": spine_ok,
                     "audit": crate::commands::audit::audit_json(&verification.audit)}),
        text,
        ok: all_shown,
    })
}
