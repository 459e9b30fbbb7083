//! `reprise audit verify`: the audit chain, row by row, and against its
//! witness beside the key.

use reprise_core::chain::ChainFormat;
use reprise_store::audit::{AuditSummary, read_audit};
use reprise_store::witness::witness_path;
use serde_json::{Value, json};

use crate::commands::journal::problem_json;
use crate::commands::task::TaskArgs;
use crate::error::CliError;
use crate::output::{Outcome, short};
use crate::settings::Settings;

#[derive(Debug, clap::Subcommand)]
pub(crate) enum AuditCommand {
    /// Verify the HMAC audit chain.
    #[command(after_help = help!("\
  reprise audit verify --json"))]
    Verify,
    /// Verify a task's latest park offline, from its journal and the audit
    /// chain: verified (settled), pending (live) or failed.
    #[command(after_help = help!("\
  reprise audit verify-suspension add-greeting
  reprise audit verify-suspension quickstart/add-greeting --json

  Exit 0 for verified and pending, 1 for failed."))]
    VerifySuspension(TaskArgs),
}

impl AuditCommand {
    pub(crate) fn run(self, settings: &Settings) -> Result<Outcome, CliError> {
        match self {
            Self::Verify => verify(settings),
            Self::VerifySuspension(args) => {
                crate::commands::audit_suspension::verify(&args.settings(settings), &args.task)
            }
        }
    }
}

/// `{ok, rows, first_bad_row, reason, witness}` of an audit summary: a chain
/// fault wins; else the witness's reason; an empty chain is `audit_missing`.
pub(crate) fn audit_json(summary: &AuditSummary) -> Value {
    let report = &summary.report;
    let (mut first_bad_row, mut reason) = problem_json(ChainFormat::Audit, report);
    if reason.is_null()
        && let Some(problem) = summary.witness_problem
    {
        first_bad_row = json!(report.head.map_or(0, |head| head.seq + 1));
        reason = json!(problem.as_str());
    }
    json!({
        "ok": summary.ok(),
        "rows": report.rows,
        "first_bad_row": first_bad_row,
        "reason": reason,
        "witness": summary.witness.as_ref().map(|witness| json!({
            "state_id": witness.state_id,
            "seq": witness.audit.seq,
            "mac": witness.audit.digest.to_hex(),
        })),
    })
}

/// One line for a person about an audit summary's problem, if it has one.
pub(crate) fn audit_problem_line(summary: &AuditSummary) -> Option<String> {
    if let Some(fault) = summary.report.first_problem() {
        let hint = if summary.report.fault.is_none() {
            ": run `reprise replay repair audit`"
        } else {
            ""
        };
        return Some(format!(
            "audit chain: broken at row {} ({}){hint}; seals after it are not trusted",
            fault.row,
            ChainFormat::Audit.reason_name(fault.reason)
        ));
    }
    summary.witness_problem.map(|reason| {
        format!(
            "audit chain: FAILED ({}): {}",
            reason.as_str(),
            reason.explain()
        )
    })
}

fn verify(settings: &Settings) -> Result<Outcome, CliError> {
    let (state, key) = settings.keyed_state()?;
    let summary = read_audit(&state, &key)?;
    let report = &summary.report;
    // Every file checkpoint store, against its task's journal.
    let stores = reprise_engine::check_stores(&state, None)
        .map_err(|err| CliError::usage(err.to_string()))?;
    let ok = summary.ok() && stores.iter().all(reprise_engine::StoreCheck::ok);
    let mut json = audit_json(&summary);
    json["ok"] = json!(ok);
    json["checkpoints"] = crate::commands::journal::checkpoints_json(&stores);
    json["head"] = report.head.map_or(
        Value::Null,
        |head| json!({"seq": head.seq, "mac": head.digest.to_hex()}),
    );
    let mut text = format!(
        "audit chain: {} ({}",
        if summary.ok() { "ok" } else { "FAILED" },
        crate::output::count(report.rows, "row")
    );
    if let Some(head) = report.head {
        text.push_str(&format!(
            ", head seq {} {}",
            head.seq,
            short(&head.digest.to_hex())
        ));
    }
    text.push_str(")\n");
    if let Some(fault) = report.first_problem() {
        text.push_str(&format!(
            "  broken at row {} ({})\n",
            fault.row,
            ChainFormat::Audit.reason_name(fault.reason)
        ));
        if report.fault.is_none() {
            text.push_str(
                "  the last line was torn by a crash: run `reprise replay repair audit`\n",
            );
        }
    }
    match (&summary.witness, summary.witness_problem) {
        (_, Some(reason)) => text.push_str(&format!(
            "  witness: {} ({}) at {}\n",
            reason.explain(),
            reason.as_str(),
            witness_path(&key, &state).display()
        )),
        (Some(witness), None) => text.push_str(&format!(
            "  witness: agrees (state {}, head seq {})\n",
            witness.state_id, witness.audit.seq
        )),
        (None, None) => {}
    }
    text.push_str(&crate::commands::journal::checkpoints_text(&stores));
    Ok(Outcome {
        json,
        text,
        ok,
        exit: None,
    })
}
