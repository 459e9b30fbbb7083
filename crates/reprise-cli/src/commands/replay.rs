//! `reprise replay repair TASK`.

use reprise_core::chain::ChainFormat;
use reprise_core::record::Head;
use reprise_store::key::load_key;
use reprise_store::repair::{Refusal, RepairOutcome, repair_journal};
use serde_json::{Value, json};

use crate::commands::resolve::task_key;
use crate::error::CliError;
use crate::output::{Outcome, short};
use crate::settings::Settings;

fn head_json(head: Option<Head>) -> Value {
    head.map_or(
        Value::Null,
        |head| json!({"seq": head.seq, "event_hash": head.digest.to_hex()}),
    )
}

pub(crate) fn repair(settings: &Settings, task: &str) -> Result<Outcome, CliError> {
    let state = settings.state()?;
    let task = task_key(settings, &state, task)?;
    let key_path = settings.key_path()?.to_path_buf();
    let outcome = repair_journal(&state, &task, || load_key(&key_path))?;
    let id = task.to_string();
    let id = id.as_str();
    Ok(match outcome {
        RepairOutcome::Repaired {
            removed_bytes,
            rows,
            head,
            backup,
        } => Outcome {
            text: format!(
                "repaired journal {id}: cut {removed_bytes} torn bytes (kept in {})\n  rows: {rows}{}\n",
                backup.display(),
                head.map(|h| format!(", head: seq {} {}", h.seq, short(&h.digest.to_hex())))
                    .unwrap_or_default()
            ),
            json: json!({"task_id": id, "repaired": true, "removed_bytes": removed_bytes, "rows": rows,
                         "head": head_json(head), "backup": backup, "refused": null}),
            ok: true,
        },
        RepairOutcome::NoOp { rows, head } => Outcome {
            text: format!("journal {id} has no torn tail: nothing to repair ({rows} rows)\n"),
            json: json!({"task_id": id, "repaired": false, "removed_bytes": 0, "rows": rows,
                         "head": head_json(head), "backup": null, "refused": null}),
            ok: true,
        },
        RepairOutcome::Refused { refusal, rows } => {
            let (reason, detail) = match refusal {
                Refusal::Corruption { row, reason } => (
                    "corruption",
                    format!(
                        "row {row} is damaged ({}) and is not the last line: that is corruption, not a torn write",
                        ChainFormat::Journal.reason_name(reason)
                    ),
                ),
                Refusal::SealMismatch => (
                    "seal_mismatch",
                    "the repaired journal would not match its seal in the audit chain".to_owned(),
                ),
            };
            Outcome {
                text: format!("refused to repair journal {id}: {detail}; the file is untouched\n"),
                json: json!({"task_id": id, "repaired": false, "removed_bytes": 0, "rows": rows,
                             "head": null, "backup": null, "refused": reason}),
                ok: false,
            }
        }
    })
}
