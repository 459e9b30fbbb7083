//! `reprise journal show|verify TASK`.

use std::fmt::Write;

use reprise_core::TaskKey;
use reprise_core::chain::ChainFormat;
use reprise_core::record::JournalRow;
use reprise_core::verify::{ChainReport, Coverage, Identity};
use reprise_store::StoreError;
use reprise_store::journal::{JournalVerification, verify_journal};
use serde_json::{Value, json};

use crate::commands::PlanArg;
use crate::commands::resolve::task_key;
use crate::commands::task::TaskArgs;
use crate::error::CliError;
use crate::output::{Outcome, short};
use crate::settings::Settings;

#[derive(Debug, clap::Subcommand)]
pub(crate) enum JournalCommand {
    /// Print a task's journal rows.
    #[command(after_help = help!("\
  reprise journal show add-greeting --json
  reprise journal show add-greeting --full"))]
    Show(JournalShowArgs),
    /// Verify a task's journal chain, coverage and seals.
    #[command(after_help = help!("\
  reprise journal verify add-greeting"))]
    Verify(TaskArgs),
}

#[derive(Debug, clap::Args)]
pub(crate) struct JournalShowArgs {
    /// The task (or PLAN/TASK).
    task: String,
    /// Print every row's whole body, not a one-line cut.
    #[arg(long)]
    full: bool,
    #[command(flatten)]
    plan: PlanArg,
}

impl JournalCommand {
    pub(crate) fn run(self, settings: &Settings) -> Result<Outcome, CliError> {
        match self {
            Self::Show(args) => show(&settings.with_plan(args.plan.name), &args.task, args.full),
            Self::Verify(args) => verify(&args.settings(settings), &args.task),
        }
    }
}

fn show(settings: &Settings, task: &str, full: bool) -> Result<Outcome, CliError> {
    let state = settings.state()?;
    let task = task_key(settings, &state, task)?;
    let path = state.existing_journal_path(&task)?;
    let bytes = std::fs::read(&path).map_err(|source| StoreError::Io { path, source })?;
    let mut rows = Vec::new();
    let mut discarded = Vec::new();
    let mut text = String::new();
    let lines: Vec<&[u8]> = bytes.split_inclusive(|&byte| byte == b'\n').collect();
    for (index, line) in lines.iter().enumerate() {
        let whole = line.ends_with(b"\n");
        match serde_json::from_slice::<Value>(line) {
            Ok(value @ Value::Object(_)) if whole => {
                match serde_json::from_value::<JournalRow>(value.clone()) {
                    Ok(row) => {
                        let body = if full {
                            serde_json::to_string_pretty(&row.body).unwrap_or_default()
                        } else {
                            clip(&serde_json::to_string(&row.body).unwrap_or_default(), 96)
                        };
                        let _ =
                            writeln!(text, "{:>5}  {}  {:<24} {body}", row.seq, row.at, row.kind,);
                    }
                    Err(_) => {
                        let _ = writeln!(text, "{index:>5}  (row does not fit the journal format)");
                    }
                }
                rows.push(value);
            }
            _ => {
                discarded.push(index);
                let _ = writeln!(text, "{index:>5}  (discarded: not a whole row)");
            }
        }
    }
    if rows.is_empty() && discarded.is_empty() {
        text.push_str("(empty journal)\n");
    }
    Ok(Outcome {
        exit: None,
        json: json!({"plan": task.plan.as_str(), "task_id": task.task.as_str(), "rows": rows, "discarded_lines": discarded}),
        text,
        ok: true,
    })
}

fn clip(text: &str, limit: usize) -> String {
    if text.chars().count() <= limit {
        return text.to_owned();
    }
    let kept: String = text.chars().take(limit - 1).collect();
    format!("{kept}…")
}

/// The `{first_bad_row, reason}` pair of a chain report.
pub(crate) fn problem_json(format: ChainFormat, report: &ChainReport) -> (Value, Value) {
    match report.first_problem() {
        Some(fault) => (json!(fault.row), json!(format.reason_name(fault.reason))),
        None => (Value::Null, Value::Null),
    }
}

fn chain_json(format: ChainFormat, report: &ChainReport) -> Value {
    let (first_bad_row, reason) = problem_json(format, report);
    json!({
        "ok": report.first_problem().is_none(),
        "rows": report.rows,
        "first_bad_row": first_bad_row,
        "reason": reason,
    })
}

fn verify(settings: &Settings, task: &str) -> Result<Outcome, CliError> {
    let (state, key) = settings.keyed_state()?;
    let task = task_key(settings, &state, task)?;
    let verification = verify_journal(&state, &task, || Ok(key))?;
    let chain = &verification.chain;
    let (first_bad_row, reason) = match problem_json(ChainFormat::Journal, chain) {
        (_, Value::Null) if verification.missing => (Value::Null, json!("journal_missing")),
        found => found,
    };
    // The task's file checkpoints, store by store, against the journal.
    let stores = reprise_engine::check_stores(&state, Some(&task))
        .map_err(|err| CliError::usage(err.to_string()))?;
    let ok = verification.ok() && stores.iter().all(reprise_engine::StoreCheck::ok);
    let json = verify_json(&task, &verification, &stores, ok, first_bad_row, reason);
    let mut text = format!("journal {task}: {}\n", if ok { "ok" } else { "FAILED" });
    if verification.missing {
        let _ = writeln!(
            text,
            "  MISSING: the audit chain seals this journal through seq {}, but {} is not there (deleted or moved)",
            verification.sealed_through.unwrap_or_default(),
            state.journal_path(&task).display()
        );
        if let Some(line) = crate::commands::audit::audit_problem_line(&verification.audit) {
            let _ = writeln!(text, "  {line}");
        }
        return Ok(Outcome {
            json,
            text,
            ok,
            exit: None,
        });
    }
    verification_lines(&task, &verification, &stores, &mut text);
    Ok(Outcome {
        json,
        text,
        ok,
        exit: None,
    })
}

/// `journal verify --json`.
fn verify_json(
    task: &TaskKey,
    verification: &JournalVerification,
    stores: &[reprise_engine::StoreCheck],
    ok: bool,
    first_bad_row: Value,
    reason: Value,
) -> Value {
    let chain = &verification.chain;
    let head = chain
        .head
        .map(|head| json!({"seq": head.seq, "event_hash": head.digest.to_hex()}));
    json!({
        "plan": task.plan.as_str(),
        "task_id": task.task.as_str(),
        "ok": ok,
        "rows": chain.rows,
        "head": head,
        "first_bad_row": first_bad_row,
        "reason": reason,
        "missing": verification.missing,
        "discarded_lines": chain.discarded_lines,
        "coverage": chain.coverage(),
        "identity": verification.identity,
        "sealed_through": verification.sealed_through,
        "unsealed_rows": verification.unsealed_rows,
        "spine": verification.spine.as_ref().map(|spine| chain_json(ChainFormat::Spine, spine)),
        "decisions": verification.decisions,
        "audit": crate::commands::audit::audit_json(&verification.audit),
        "checkpoints": checkpoints_json(stores),
    })
}

/// The lines of `journal verify` for a journal that is there: rows and
/// head, chain, coverage, identity, spine, decisions, checkpoints, and the
/// fix for a torn last line.
fn verification_lines(
    task: &TaskKey,
    verification: &JournalVerification,
    stores: &[reprise_engine::StoreCheck],
    text: &mut String,
) {
    let chain = &verification.chain;
    let _ = write!(text, "  rows: {}", chain.rows);
    if let Some(head) = chain.head {
        let _ = write!(
            text,
            ", head: seq {} {}",
            head.seq,
            short(&head.digest.to_hex())
        );
    }
    text.push('\n');
    match chain.first_problem() {
        Some(fault) => {
            let _ = writeln!(
                text,
                "  chain: broken at row {} ({})",
                fault.row,
                ChainFormat::Journal.reason_name(fault.reason)
            );
        }
        None => text.push_str("  chain: intact\n"),
    }
    let coverage = match chain.coverage() {
        Coverage::Complete => "complete".to_owned(),
        Coverage::Partial => format!("partial (discarded lines {:?})", chain.discarded_lines),
    };
    let _ = writeln!(text, "  coverage: {coverage}");
    let _ = writeln!(text, "  identity: {}", identity_text(verification));
    if let Some(spine) = &verification.spine
        && let Some(fault) = spine.first_problem()
    {
        let _ = writeln!(
            text,
            "  spine: broken at row {} ({})",
            fault.row,
            ChainFormat::Spine.reason_name(fault.reason)
        );
    }
    match verification.decisions {
        Identity::Mismatched => text.push_str(
            "  decisions: MISMATCHED: the audit chain binds a decision the spine or journal does not hold (deleted, cut or rewritten)\n",
        ),
        Identity::Verified => text.push_str("  decisions: every bound decision is in the journal and spine\n"),
        Identity::Unverifiable => {}
    }
    if let Some(line) = crate::commands::audit::audit_problem_line(&verification.audit) {
        let _ = writeln!(text, "  {line}");
    }
    text.push_str(&checkpoints_text(stores));
    let spine_torn = verification
        .spine
        .as_ref()
        .is_some_and(|spine| spine.fault.is_none() && spine.torn_tail.is_some());
    if (chain.torn_tail.is_some() && chain.fault.is_none()) || spine_torn {
        let _ = writeln!(
            text,
            "  the last line was torn by a crash: run `reprise replay repair {task}`"
        );
    }
}

/// Whether the journal is the one the audit chain sealed, in words.
fn identity_text(verification: &JournalVerification) -> String {
    match (verification.identity, verification.sealed_through) {
        (Identity::Verified, Some(sealed)) if verification.unsealed_rows > 0 => format!(
            "verified through seq {sealed}; {} after it {} not sealed yet",
            crate::output::count(verification.unsealed_rows, "row"),
            if verification.unsealed_rows == 1 {
                "is"
            } else {
                "are"
            }
        ),
        (Identity::Verified, Some(sealed)) => format!("verified (sealed at seq {sealed})"),
        (Identity::Mismatched, _) => {
            "MISMATCHED: a seal names a row this journal does not hold".to_owned()
        }
        _ => "unverifiable (not sealed yet: the task has not finished)".to_owned(),
    }
}

/// Every checked store as JSON: its run, task, and what is not bound.
pub(crate) fn checkpoints_json(stores: &[reprise_engine::StoreCheck]) -> Value {
    json!({
        "ok": stores.iter().all(reprise_engine::StoreCheck::ok),
        "stores": stores,
    })
}

/// Lines for a person about the checked stores: one summary line when all
/// is bound, else a line per unbound or missing checkpoint.
pub(crate) fn checkpoints_text(stores: &[reprise_engine::StoreCheck]) -> String {
    let bound: u64 = stores.iter().map(|store| store.bound).sum();
    let mut text = String::new();
    if stores.iter().all(reprise_engine::StoreCheck::ok) {
        if !stores.is_empty() {
            let _ = writeln!(
                text,
                "  checkpoints: {} in {}, each recorded by its journal",
                crate::output::count(bound, "checkpoint"),
                crate::output::count(stores.len() as u64, "store")
            );
        }
        return text;
    }
    for store in stores {
        let task = match &store.plan {
            Some(plan) => format!("{plan}/{}", store.task),
            None => format!(
                "{} (a run this state directory has no record of)",
                store.task
            ),
        };
        for (id, why) in &store.unbound {
            let _ = writeln!(
                text,
                "  checkpoints: UNBOUND {} of {task} in run {}: {}",
                short(id),
                store.run_id,
                why.explain()
            );
        }
        for id in &store.missing {
            let _ = writeln!(
                text,
                "  checkpoints: MISSING {} of {task} in run {}: the journal recorded it, the store does not hold it",
                short(id),
                store.run_id
            );
        }
    }
    text.push_str("  a planted or copied-in store cannot be restored from; `reprise clean` removes a run's stores\n");
    text
}
