//! `reprise report [RUN]`: one self-contained HTML file of a run, built from
//! the state directory alone: what needs attention first, then each task's
//! attempts (mode, downgrade, gates with their levels, time, cost (unknown
//! where none was reported; for a rehearsal, what it would cost at the
//! prices it stored), bytes sent), its sessions' lineage, the verification of every chain, and each
//! attempt's kept output folded away. Styles and script are inline, nothing
//! is fetched: the file works opened from disk. A chain that does not
//! verify is shown as broken, and what it holds is marked unverified.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use reprise_core::chain::ChainFormat;
use reprise_core::record::JournalRow;
use reprise_core::rows::{AttemptStarted, RetryDecision, SessionUse, body_of};
use reprise_core::{TaskId, TaskKey};
use reprise_engine::{RunState, TaskRecord, TaskStatus, latest_run, load_run};
use reprise_store::audit::read_audit;
use reprise_store::journal::verify_journal_with;
use reprise_store::ledger::verify_ledger;
use reprise_store::logs::attempt_logs;
use reprise_store::state::StateDir;
use serde_json::{Value, json};

use crate::commands::rehearse::Priced;
use crate::commands::spend::{cost_text, spend_text};
use crate::commands::status::run_spend;
use crate::error::CliError;
use crate::output::Outcome;
use crate::output::seconds;
use crate::settings::Settings;

#[derive(Debug, clap::Args)]
pub(crate) struct ReportArgs {
    /// A run id (`R-...`; default: the latest run).
    run: Option<String>,
    /// Where to write it (default: `.reprise/runs/<run>/report.html`).
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Open it with the desktop's opener (`xdg-open`) once written.
    #[arg(long)]
    open: bool,
}

impl ReportArgs {
    pub(crate) fn run(self, settings: &Settings) -> Result<Outcome, CliError> {
        report(
            settings,
            self.run.as_deref(),
            self.output.as_deref(),
            self.open,
        )
    }
}

const STYLE: &str = "body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:70em;color:#222}\
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:2em;border-bottom:1px solid #ddd}\
.attention{background:#fff4e5;border:1px solid #f0a020;padding:.5em 1em}\
.broken{background:#fde8e8;border:1px solid #d33;padding:.5em 1em;font-weight:bold}\
.ok{color:#180}.bad{color:#c22}table{border-collapse:collapse}td,th{padding:.2em .7em;text-align:left;\
border-bottom:1px solid #eee}pre{background:#f6f6f6;padding:.5em;overflow:auto;max-height:30em}\
details{margin:.2em 0}code{font-size:.95em}";

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for ch in text.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(ch),
        }
    }
    out
}

fn report(
    settings: &Settings,
    run: Option<&str>,
    out: Option<&Path>,
    open: bool,
) -> Result<Outcome, CliError> {
    let (state, key) = settings.keyed_state()?;
    let run = match run {
        Some(run) => load_run(&state, run),
        None => latest_run(&state),
    }
    .map_err(|err| CliError::usage(err.to_string()))?;
    let mut run = run;
    let liveness = reprise_engine::liveness(&state, &run);
    let unfinished = crate::commands::status::caught_up(&state, &mut run, liveness);
    let priced = crate::commands::rehearse::priced(&state, &run)?;
    let money = Money {
        unfinished: &unfinished,
        priced: priced.as_ref(),
    };
    let html = render(&state, &key, &run, &money)?;
    let path = match out {
        Some(path) => path.to_path_buf(),
        None => state.runs_dir().join(&run.run_id).join("report.html"),
    };
    std::fs::write(&path, html.as_bytes()).map_err(|source| {
        CliError::usage(format!(
            "cannot write the report to {}: {source}",
            path.display()
        ))
    })?;
    if open {
        // The desktop's own opener; a machine without one still has the file.
        let _ = std::process::Command::new("xdg-open").arg(&path).spawn();
    }
    Ok(Outcome {
        exit: None,
        json: json!({"run_id": run.run_id, "report": path}),
        text: format!("report of run {}: {}\n", run.run_id, path.display()),
        ok: true,
    })
}

/// What the report says of money: the attempts with no figure yet, and for
/// a rehearsal what it would have cost at the prices it ran with.
struct Money<'a> {
    unfinished: &'a BTreeMap<TaskId, u32>,
    priced: Option<&'a Priced<'a>>,
}

impl Money<'_> {
    /// `spent $0.06`, `spent $0.06 + 1 unknown`, or for a rehearsal
    /// `a rehearsal: nothing spent; would cost $0.21 (prices: ...)`.
    fn run_text(&self, run: &RunState) -> String {
        match self.priced {
            Some(priced) => format!(
                "<span id=\"rehearsal\">a rehearsal: nothing spent; {} ({})</span>",
                escape(&priced.would_cost_text()),
                escape(&priced.prices_text())
            ),
            None => format!(
                "spent {}",
                escape(&spend_text(run_spend(run, self.unfinished)))
            ),
        }
    }

    fn attempt_text(&self, task: &TaskRecord, attempt: &reprise_engine::AttemptSummary) -> String {
        match self.priced {
            Some(priced) => priced.attempt_text(task.task_id.as_str(), attempt.n),
            None => cost_text(attempt.cost_micro_usd),
        }
    }
}

/// Every chain of a run verified: the audit chain, the ledger, and each
/// task's journal and spine.
struct ChainChecks {
    /// Each chain's name, whether it verifies, and where it breaks.
    chains: Vec<(String, bool, String)>,
    broken_tasks: std::collections::BTreeSet<reprise_core::TaskId>,
    missing_journals: Vec<reprise_core::TaskId>,
}

fn chain_checks(
    state: &StateDir,
    key: &reprise_store::key::KeyFile,
    run: &RunState,
) -> Result<ChainChecks, CliError> {
    let audit = read_audit(state, key)?;
    let ledger = verify_ledger(state, &audit)?;
    let mut chains = Vec::new();
    chains.push(("audit chain".to_owned(), audit.ok(), String::new()));
    chains.push(("ledger".to_owned(), ledger.ok(), String::new()));
    let plan = run.plan_id();
    let mut broken_tasks = std::collections::BTreeSet::new();
    let mut missing_journals = Vec::new();
    for task in &run.tasks {
        let Some(plan) = plan.clone() else { continue };
        let task_key = TaskKey::new(plan, task.task_id.clone());
        // A task that never started has no journal (one the audit chain
        // seals and that is gone is reported as missing).
        if let Ok(verification) = verify_journal_with(state, &task_key, &audit) {
            let at = verification.chain.fault.map(|fault| {
                format!(
                    " at row {} ({})",
                    fault.row,
                    ChainFormat::Journal.reason_name(fault.reason)
                )
            });
            let at = if verification.missing {
                missing_journals.push(task.task_id.clone());
                Some(": it is missing, though the audit chain seals it".to_owned())
            } else {
                at
            };
            if !verification.ok() {
                broken_tasks.insert(task.task_id.clone());
            }
            chains.push((
                format!("journal and spine of {}", task.task_id),
                verification.ok(),
                at.unwrap_or_default(),
            ));
        }
    }
    Ok(ChainChecks {
        chains,
        broken_tasks,
        missing_journals,
    })
}

fn render(
    state: &StateDir,
    key: &reprise_store::key::KeyFile,
    run: &RunState,
    money: &Money<'_>,
) -> Result<String, CliError> {
    let mut html = String::new();
    let _ = write!(
        html,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>reprise run {id}</title>\
         <style>{STYLE}</style></head><body><h1>Run <code>{id}</code> ({plan})</h1>",
        id = escape(&run.run_id),
        plan = escape(&run.plan_name)
    );
    let cancelled = reprise_engine::liveness(state, run) == reprise_engine::Liveness::Cancelled;
    let verdict = match run.ok {
        _ if cancelled => format!(
            "<span class=\"bad\">cancelled</span> (a stop signal ended it; <code>{}</code> takes it up)",
            escape(&crate::commands::run::continue_command(state, &run.run_id))
        ),
        Some(true) => "<span class=\"ok\">ok</span>".to_owned(),
        Some(false) => "<span class=\"bad\">failed</span>".to_owned(),
        None => "not finished".to_owned(),
    };
    let _ = write!(
        html,
        "<p id=\"verdict\">{verdict} · started {} · {}</p>",
        escape(&run.started_at),
        money.run_text(run)
    );
    // Every chain's verification; a broken one is said first and loudly.
    let ChainChecks {
        chains,
        broken_tasks,
        missing_journals,
    } = chain_checks(state, key, run)?;
    attention(&mut html, run, &missing_journals);
    for (name, _, at) in chains.iter().filter(|(_, ok, _)| !ok) {
        let _ = write!(
            html,
            "<p class=\"broken\" data-chain=\"{}\">BROKEN: the {} does not verify{}; what it holds below is unverified, not fact.</p>",
            escape(name),
            escape(name),
            escape(at)
        );
    }
    html.push_str("<h2>Chains</h2><table id=\"chains\">");
    for (name, ok, at) in &chains {
        let _ = write!(
            html,
            "<tr><td>{}</td><td class=\"{}\">{}{}</td></tr>",
            escape(name),
            if *ok { "ok" } else { "bad" },
            if *ok { "verifies" } else { "BROKEN" },
            escape(at)
        );
    }
    html.push_str("</table>");
    for task in &run.tasks {
        task_section(
            &mut html,
            state,
            run,
            task,
            broken_tasks.contains(&task.task_id),
            money,
        );
    }
    html.push_str(
        "<script>document.body.dataset.rendered='yes';\
         document.querySelectorAll('details').forEach(function(d){d.open=false;});</script></body></html>",
    );
    Ok(html)
}

/// Tasks that need a person: failed or blocked, with how long ago the run
/// ended, and those whose sealed journal is missing.
fn attention(html: &mut String, run: &RunState, missing_journals: &[TaskId]) {
    let needing: Vec<&TaskRecord> = run
        .tasks
        .iter()
        .filter(|task| {
            matches!(
                task.state,
                TaskStatus::Failed | TaskStatus::Blocked | TaskStatus::Suspended
            )
        })
        .collect();
    if needing.is_empty() && missing_journals.is_empty() {
        html.push_str("<p id=\"attention\" class=\"ok\">Nothing needs attention.</p>");
        return;
    }
    let age = run
        .finished_at
        .as_deref()
        .and_then(|end| humantime::parse_rfc3339(end).ok())
        .and_then(|end| std::time::SystemTime::now().duration_since(end).ok())
        .map(|since| {
            format!(
                ", {} ago",
                humantime::format_duration(std::time::Duration::from_secs(since.as_secs()))
            )
        })
        .unwrap_or_default();
    html.push_str("<div id=\"attention\" class=\"attention\"><strong>Needs attention</strong><ul>");
    for task in missing_journals {
        let _ = write!(
            html,
            "<li data-task=\"{id}\" data-missing=\"journal\"><a href=\"#task-{id}\">{id}</a>: its journal is missing, though the audit chain seals it (deleted or moved); <code>reprise journal verify {id}</code> says more</li>",
            id = escape(task.as_str())
        );
    }
    for task in needing {
        // A parked task waits for someone: the command that wakes it.
        let wake = if task.state == TaskStatus::Suspended {
            format!(
                "; wake it: <code>reprise task resume {}</code>",
                escape(task.task_id.as_str())
            )
        } else {
            String::new()
        };
        let _ = write!(
            html,
            "<li data-task=\"{id}\"><a href=\"#task-{id}\">{id}</a>: {} ({}){age}{wake}</li>",
            task.state.as_str(),
            escape(task.reason.as_deref().unwrap_or("")),
            id = escape(task.task_id.as_str())
        );
    }
    html.push_str("</ul></div>");
}

/// Each gate of an attempt in a few words: its name, level and verdict.
fn gate_marks(attempt: &reprise_engine::AttemptSummary) -> Vec<String> {
    attempt
        .gates
        .iter()
        .map(|gate| {
            let level = gate
                .level
                .map(|level| format!("@{level}"))
                .unwrap_or_default();
            let mark = if gate.passed {
                "ok"
            } else if gate.could_not_run {
                "could not run"
            } else {
                "failed"
            };
            format!("{}{level} {mark}", escape(&gate.name))
        })
        .collect()
}

/// How many bytes of prompt an attempt sent, as its journal recorded.
fn prompt_sent(journal: &[JournalRow], attempt: &reprise_engine::AttemptSummary) -> String {
    journal
        .iter()
        .filter_map(|row| body_of::<AttemptStarted>(&row.kind, &row.body))
        .find(|started| started.attempt == attempt.n)
        .map(|started| format!("{} B", started.prompt_bytes))
        .unwrap_or_else(|| "-".to_owned())
}

/// The retry decision after an attempt: the mode, what was asked, why it
/// was downgraded, and what was predicted.
fn decision_text(journal: &[JournalRow], attempt: &reprise_engine::AttemptSummary) -> String {
    journal
        .iter()
        .rev()
        .filter_map(|row| body_of::<RetryDecision>(&row.kind, &row.body))
        .find(|row| row.attempt == attempt.n)
        .map(|row| {
            let decision = row.decision;
            let auto = match (&decision.auto, &decision.predicted) {
                (Some(choice), _) => format!("; {}", choice.describe()),
                (None, Some(predicted)) => format!("; predicted {}", predicted.describe()),
                (None, None) => String::new(),
            };
            let mode = match decision.downgrade_reason {
                Some(reason) => format!(
                    "{} (asked {}, downgraded: {})",
                    decision.retry_mode.as_str(),
                    decision.requested_mode.as_str(),
                    reason.as_str()
                ),
                None => decision.retry_mode.as_str().to_owned(),
            };
            format!("{mode}{auto}")
        })
        .unwrap_or_default()
}

fn task_section(
    html: &mut String,
    state: &StateDir,
    run: &RunState,
    task: &TaskRecord,
    broken: bool,
    money: &Money<'_>,
) {
    let id = escape(task.task_id.as_str());
    let _ = write!(
        html,
        "<h2 id=\"task-{id}\">{id}: {}</h2>",
        escape(task.state.as_str())
    );
    if broken {
        let _ = write!(
            html,
            "<p class=\"broken\">This task's journal does not verify: its attempts below are as state.json says, unverified.</p>"
        );
    }
    let journal = journal_rows(state, run, task);
    let cost = if money.priced.is_some() {
        "would cost"
    } else {
        "cost"
    };
    let _ = write!(
        html,
        "<table class=\"attempts\"><tr><th>attempt</th><th>mode</th><th>outcome</th><th>gates</th><th>time</th><th>{cost}</th><th>sent</th><th>decision</th></tr>"
    );
    for attempt in &task.attempts {
        let gates = gate_marks(attempt);
        let sent = prompt_sent(&journal, attempt);
        let decision = decision_text(&journal, attempt);
        let outcome = serde_json::to_value(attempt.outcome)
            .ok()
            .and_then(|value| value.as_str().map(str::to_owned))
            .unwrap_or_default();
        let _ = write!(
            html,
            "<tr class=\"attempt\" data-mode=\"{mode}\"><td>{}</td><td>{mode}</td><td>{}{}</td><td>{}</td><td>{}</td><td>{}</td><td>{sent}</td><td>{}</td></tr>",
            attempt.n,
            escape(&outcome),
            attempt
                .infra_kind
                .as_deref()
                .map(|kind| format!(" ({})", escape(kind)))
                .unwrap_or_default(),
            gates.join(", "),
            seconds(attempt.elapsed_ms).trim(),
            escape(&money.attempt_text(task, attempt)),
            escape(&decision),
            mode = escape(&attempt.mode),
        );
    }
    html.push_str("</table>");
    lineage(html, &journal);
    if let Ok(logs) = attempt_logs(state, &run.run_id, &task.task_id) {
        for log in logs {
            let text = std::fs::read_to_string(&log.path).unwrap_or_default();
            let _ = write!(
                html,
                "<details class=\"log\"><summary>attempt {} · {}</summary><pre>{}</pre></details>",
                log.attempt,
                escape(&log.name),
                escape(&text)
            );
        }
    }
}

/// Which session each attempt ran in, and which fork came from which.
fn lineage(html: &mut String, journal: &[JournalRow]) {
    let short = |id: &str| escape(&id[..id.len().min(8)]);
    let lines: Vec<String> = journal
        .iter()
        .filter_map(|row| body_of::<AttemptStarted>(&row.kind, &row.body))
        .map(|started| match &started.session {
            SessionUse::Fork { fork, .. } => {
                format!(
                    "attempt {}: fork of session {}",
                    started.attempt,
                    short(fork)
                )
            }
            SessionUse::Resume { resume } => {
                format!(
                    "attempt {}: resumed session {}",
                    started.attempt,
                    short(resume)
                )
            }
            SessionUse::New { .. } => format!("attempt {}: new session", started.attempt),
        })
        .collect();
    if lines.is_empty() {
        return;
    }
    html.push_str("<ul class=\"lineage\">");
    for line in lines {
        let _ = write!(html, "<li>{line}</li>");
    }
    html.push_str("</ul>");
}

/// The task's journal rows of this run, as written (unverified: the chains
/// table says whether they verify).
fn journal_rows(state: &StateDir, run: &RunState, task: &TaskRecord) -> Vec<JournalRow> {
    let Some(plan) = run.plan_id() else {
        return Vec::new();
    };
    let Ok(path) = state.existing_journal_path(&TaskKey::new(plan, task.task_id.clone())) else {
        return Vec::new();
    };
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<JournalRow>(line).ok())
        .filter(|row| {
            row.body
                .get("run_id")
                .and_then(Value::as_str)
                .is_none_or(|id| id == run.run_id)
        })
        .collect()
}
