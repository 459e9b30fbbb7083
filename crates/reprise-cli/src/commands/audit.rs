//! `reprise audit verify`.

use reprise_core::chain::ChainFormat;
use reprise_store::audit::read_audit;
use reprise_store::key::load_key;
use serde_json::json;

use crate::commands::journal::problem_json;
use crate::error::CliError;
use crate::output::{Outcome, short};
use crate::settings::Settings;

pub(crate) fn verify(settings: &Settings) -> Result<Outcome, CliError> {
    let state = settings.state()?;
    let key = load_key(settings.key_path()?)?;
    if !state.audit_path().is_file() {
        // `init` writes the first row, so a missing chain was removed.
        let text = format!(
            "audit chain {}: FAILED (missing)\n",
            state.audit_path().display()
        );
        return Ok(Outcome {
            json: json!({"ok": false, "rows": 0, "first_bad_row": 0, "reason": "missing_chain", "head": null}),
            text,
            ok: false,
        });
    }
    let summary = read_audit(&state, &key)?;
    let report = &summary.report;
    let (first_bad_row, reason) = problem_json(ChainFormat::Audit, report);
    let ok = report.first_problem().is_none() && report.rows > 0;
    let (first_bad_row, reason) = if report.rows == 0 && ok {
        (json!(0), json!("missing_chain"))
    } else {
        (first_bad_row, reason)
    };
    let head = report
        .head
        .map(|head| json!({"seq": head.seq, "mac": head.digest.to_hex()}));
    let mut text = format!(
        "audit chain: {} ({} rows",
        if ok { "ok" } else { "FAILED" },
        report.rows
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
    } else if report.rows == 0 {
        text.push_str("  the chain is empty: its rows were removed\n");
    }
    Ok(Outcome {
        json: json!({"ok": ok, "rows": report.rows, "first_bad_row": first_bad_row, "reason": reason, "head": head}),
        text,
        ok,
    })
}
