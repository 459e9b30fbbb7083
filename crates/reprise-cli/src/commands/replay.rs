//! `reprise replay repair TASK|ledger|audit` and `--all`: cut a torn final
//! line off a chained file, and nothing else; with `audit` (and `--all`),
//! also finish a state directory whose creation a crash cut.

use reprise_core::TaskKey;
use reprise_core::chain::ChainFormat;
use reprise_core::record::Head;
use reprise_store::repair::{Refusal, RepairOutcome, Target, repair as repair_chain};
use serde_json::{Value, json};

use crate::commands::PlanArg;
use crate::commands::resolve::task_key;
use crate::error::CliError;
use crate::output::{Outcome, short};
use crate::settings::Settings;

#[derive(Debug, clap::Subcommand)]
pub(crate) enum ReplayCommand {
    /// Cut a torn final line (and nothing else) off a task's journal and
    /// spine (TASK), the ledger (`ledger`) or the audit chain (`audit`).
    #[command(after_help = help!("\
  reprise replay repair audit
  reprise replay repair add-greeting
  reprise replay repair --all"))]
    Repair(RepairArgs),
}

#[derive(Debug, clap::Args)]
pub(crate) struct RepairArgs {
    /// A task id (or PLAN/TASK), `ledger` or `audit`.
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    target: Option<String>,
    /// Every chain: the audit chain, the ledger, then every plan's tasks.
    #[arg(long)]
    all: bool,
    #[command(flatten)]
    plan: PlanArg,
}

impl ReplayCommand {
    pub(crate) fn run(self, settings: &Settings) -> Result<Outcome, CliError> {
        match self {
            Self::Repair(args) => repair(
                &settings.with_plan(args.plan.name),
                args.target.as_deref(),
                args.all,
            ),
        }
    }
}

fn head_json(target: &Target, head: Option<Head>) -> Value {
    let mut value = json!({});
    match head {
        Some(head) => {
            value["seq"] = json!(head.seq);
            value[format_of(target).digest_key()] = json!(head.digest.to_hex());
            value
        }
        None => Value::Null,
    }
}

fn format_of(target: &Target) -> ChainFormat {
    match target {
        Target::Journal(_) => ChainFormat::Journal,
        Target::Spine(_) => ChainFormat::Spine,
        Target::Ledger => ChainFormat::Ledger,
        Target::Audit => ChainFormat::Audit,
    }
}

fn repair_targets(
    target: Option<&str>,
    all: bool,
    tasks: impl FnOnce() -> Result<Vec<TaskKey>, CliError>,
    resolve: impl FnOnce(&str) -> Result<TaskKey, CliError>,
) -> Result<Vec<Target>, CliError> {
    Ok(match (target, all) {
        (_, true) => {
            let mut targets = vec![Target::Audit, Target::Ledger];
            for task in tasks()? {
                targets.push(Target::Journal(task.clone()));
                targets.push(Target::Spine(task));
            }
            targets
        }
        (Some("audit"), false) => vec![Target::Audit],
        (Some("ledger"), false) => vec![Target::Ledger],
        (Some(task), false) => {
            let task = resolve(task)?;
            vec![Target::Journal(task.clone()), Target::Spine(task)]
        }
        (None, false) => {
            return Err(CliError::usage(
                "name what to repair: a task id, `ledger`, `audit`, or --all",
            ));
        }
    })
}

/// A repair's line of text, its JSON report, and whether it was refused.
fn outcome_report(name: &str, target: &Target, outcome: RepairOutcome) -> (String, Value, bool) {
    match outcome {
        RepairOutcome::Repaired {
            removed_bytes,
            rows,
            head,
            backup,
        } => (
            format!(
                "repaired {name}: cut {removed_bytes} torn bytes (kept in {})\n  rows: {rows}{}\n",
                backup.display(),
                head.map(|h| format!(", head: seq {} {}", h.seq, short(&h.digest.to_hex())))
                    .unwrap_or_default()
            ),
            json!({"target": name, "repaired": true, "removed_bytes": removed_bytes, "rows": rows,
                   "head": head_json(target, head), "backup": backup, "refused": null}),
            false,
        ),
        RepairOutcome::NoOp { rows, head } => (
            format!(
                "{name} has no torn tail: nothing to repair ({})\n",
                crate::output::count(rows, "row")
            ),
            json!({"target": name, "repaired": false, "removed_bytes": 0, "rows": rows,
                   "head": head_json(target, head), "backup": null, "refused": null}),
            false,
        ),
        RepairOutcome::Refused { refusal, rows } => {
            let (reason, detail) = refusal_text(refusal, target);
            (
                format!("refused to repair {name}: {detail}; the file is untouched\n"),
                json!({"target": name, "repaired": false, "removed_bytes": 0, "rows": rows,
                       "head": null, "backup": null, "refused": reason}),
                true,
            )
        }
    }
}

/// Why a repair was refused: its reason's name, and the words.
fn refusal_text(refusal: Refusal, target: &Target) -> (&'static str, String) {
    match refusal {
        Refusal::Corruption { row, reason } => (
            "corruption",
            format!(
                "row {row} is damaged ({}) and is not the last line: that is corruption, not a torn write",
                format_of(target).reason_name(reason)
            ),
        ),
        Refusal::DamagedLastLine { row, reason } => (
            "damaged_last_line",
            format!(
                "the last line (row {row}) is damaged ({}) but ends with its newline: a crash cuts a line before its newline, so this line was written or changed whole, not torn; inspect it with `reprise audit verify` or `reprise status`",
                format_of(target).reason_name(reason)
            ),
        ),
        Refusal::CompleteRow { row } => (
            "complete_row",
            format!(
                "the last line (row {row}) is a whole row that verifies with its final newline changed: an acknowledged row, not a torn write"
            ),
        ),
        Refusal::SealMismatch => (
            "seal_mismatch",
            "the repaired file would not match its seals or decision bindings in the audit chain".to_owned(),
        ),
        Refusal::WitnessMismatch => (
            "witness_mismatch",
            "the repaired audit chain would end before the head its witness recorded".to_owned(),
        ),
        Refusal::AuditBroken => (
            "audit_broken",
            "the audit chain does not verify, so the repair could not be recorded: run `reprise replay repair audit` first, or `reprise audit verify`".to_owned(),
        ),
    }
}

fn repair(settings: &Settings, target: Option<&str>, all: bool) -> Result<Outcome, CliError> {
    let (state, key) = settings.keyed_state()?;
    let targets = repair_targets(
        target,
        all,
        || Ok(state.task_keys()?),
        |raw| task_key(settings, &state, raw),
    )?;
    if let [Target::Journal(task), ..] = targets.as_slice() {
        // A task that has no journal is bad input, as before.
        state.existing_journal_path(task)?;
    }
    let mut text = String::new();
    let mut reports = Vec::new();
    let mut ok = true;
    for target in &targets {
        let name = target.name();
        let outcome = repair_chain(&state, target, &key)?;
        let (line, report, refused) = outcome_report(&name, target, outcome);
        if refused {
            ok = false;
        }
        text.push_str(&line);
        let mut report = report;
        if *target == Target::Audit && ok {
            // What a crash during creation left: finished before the ledger
            // and the journals, whose repairs the audit chain must record.
            let finished = reprise_store::creation::finish_creation(
                &state,
                &key,
                &reprise_store::state::now_rfc3339(),
            )?;
            if let Some(finished) = &finished {
                text.push_str(&crate::commands::init::finished_line(finished));
                text.push('\n');
                report["repaired"] = json!(true);
            }
            report["finished_creation"] = json!(finished.is_some());
        }
        reports.push(report);
    }
    let json = match (reports.as_slice(), target) {
        // One chain named: its report (with the task, for a task's journal).
        ([first, spine], Some(_)) if !all => {
            let mut first = first.clone();
            if let [Target::Journal(task), ..] = targets.as_slice() {
                first["plan"] = json!(task.plan.as_str());
                first["task_id"] = json!(task.task.as_str());
            }
            first["spine"] = spine.clone();
            first
        }
        ([only], _) if !all => only.clone(),
        _ => json!({"ok": ok, "repairs": reports}),
    };
    Ok(Outcome {
        json,
        text,
        ok,
        exit: None,
    })
}
