//! `reprise status [RUN]`, `reprise task list`, `reprise task show TASK`:
//! read back `runs/<run>/state.json`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use reprise_core::TaskId;
use reprise_core::chain::ChainFormat;
use reprise_core::lifecycle::TaskState;
use reprise_core::plan::Spend;
use reprise_core::rows::{AttemptContext, DependencyState};
use reprise_core::verify::Identity;
use reprise_engine::{AttemptSummary, RunState, TaskRecord, latest_run, load_run};
use reprise_store::audit::{AuditSummary, read_audit};
use reprise_store::ledger::{LedgerVerification, verify_ledger};
use serde_json::{Value, json};

use crate::commands::resolve::{latest_run_of, task_key};
use crate::commands::run::run_json;
use crate::commands::spend::{insert_spend, spend_text, with_spend};
use crate::error::CliError;
use crate::output::{Outcome, money};
use crate::settings::Settings;

#[derive(Debug, clap::Args)]
pub(crate) struct StatusArgs {
    /// A run id (`R-...`; default: the latest run).
    run: Option<String>,
}

impl StatusArgs {
    pub(crate) fn run(self, settings: &Settings) -> Result<Outcome, CliError> {
        status(settings, self.run.as_deref())
    }
}

fn engine_error(err: reprise_engine::EngineError) -> CliError {
    CliError::usage(err.to_string())
}

/// One attempt, as the live output and `status` show it.
/// A gate's verdict in a word or a clause: `ok`, `failed`, `timed out after
/// 30s`, or `could not run (exit 127: sh: 1: pytest: not found)` with the
/// first line it printed, while that is still in memory (live output).
fn gate_mark(gate: &reprise_engine::GateVerdict) -> String {
    if let Some(ms) = gate.timed_out_after_ms {
        let after = if ms % 1000 == 0 {
            format!("{}s", ms / 1000)
        } else {
            format!("{ms}ms")
        };
        return format!("timed out after {after}");
    }
    if gate.could_not_run {
        let first = gate
            .output
            .lines()
            .map(str::trim)
            .find(|line| !line.is_empty())
            .map(|line| line.chars().take(200).collect::<String>());
        return match (gate.exit_code, first) {
            (Some(code), Some(first)) => format!("could not run (exit {code}: {first})"),
            (Some(code), None) => format!("could not run (exit {code})"),
            (None, _) => "could not run".to_owned(),
        };
    }
    if gate.passed { "ok" } else { "failed" }.to_owned()
}

/// A session id as the terminal shows it: its first 8 characters, enough
/// for a random id (Claude Code's UUIDv4); whole when its leading digits are
/// a clock (a UUID of version 1, 6 or 7, as Codex's are), where two sessions
/// started close together, a fork and its parent say, share them. `--json`
/// always has the whole id.
fn short_session(id: &str) -> &str {
    let bytes = id.as_bytes();
    let uuid_shaped = bytes.len() == 36
        && [8, 13, 18, 23].iter().all(|&at| bytes[at] == b'-')
        && bytes
            .iter()
            .enumerate()
            .all(|(at, byte)| [8, 13, 18, 23].contains(&at) || byte.is_ascii_hexdigit());
    if uuid_shaped && matches!(bytes[14], b'1' | b'6' | b'7') {
        id
    } else {
        id.get(..8).unwrap_or(id)
    }
}

/// An attempt's line: what it came to, and what its agent said it cost.
pub(crate) fn attempt_line(attempt: &AttemptSummary) -> String {
    let mut line = attempt_line_uncosted(attempt);
    match attempt.cost_micro_usd {
        Some(cost) => line.push_str(&format!("; cost {}", money(cost))),
        None => line.push_str("; cost unknown"),
    }
    line
}

/// An attempt's line without its cost, for those that say it another way
/// (a rehearsal's: nothing was spent).
pub(crate) fn attempt_line_uncosted(attempt: &AttemptSummary) -> String {
    let mut line = format!("attempt {} ({}): ", attempt.n, attempt.mode);
    match (&attempt.outcome, &attempt.infra_kind) {
        (reprise_engine::Outcome::Infra, Some(kind)) => {
            line.push_str(&format!("infrastructure failure ({kind})"));
        }
        (outcome, _) => line.push_str(match outcome {
            reprise_engine::Outcome::Passed => "passed",
            reprise_engine::Outcome::Judged => "not accepted",
            reprise_engine::Outcome::Infra => "infrastructure failure",
            reprise_engine::Outcome::NeedsContext => "asked for context",
            reprise_engine::Outcome::Parked => "stopped by a park",
        }),
    }
    if !attempt.gates.is_empty() {
        let gates: Vec<String> = attempt
            .gates
            .iter()
            .map(|gate| {
                let mark = gate_mark(gate);
                match gate.level {
                    Some(level) => format!("{}@{level} {mark}", gate.name),
                    None => format!("{} {mark}", gate.name),
                }
            })
            .collect();
        line.push_str(&format!("; gates: {}", gates.join(", ")));
    }
    if let Some(session) = &attempt.session_id {
        line.push_str(&format!("; session {}", short_session(session)));
    }
    line
}

/// An attempt of a rehearsal: what it would have cost at the rehearsal's
/// prices, in place of the agent's own figure for tokens nobody paid.
fn rehearsed_attempt_line(
    attempt: &AttemptSummary,
    priced: &crate::commands::rehearse::Priced<'_>,
    task: &str,
) -> String {
    format!(
        "{}; {}",
        attempt_line_uncosted(attempt),
        priced.attempt_text(task, attempt.n)
    )
}

/// An unfinished run's snapshot brought up to its journals (its tasks'
/// attempts land in `state.json` only when each task ends); returns the
/// attempts started and not finished, whose cost nobody knows yet.
pub(crate) fn caught_up(
    state: &reprise_store::state::StateDir,
    run: &mut RunState,
    liveness: reprise_engine::Liveness,
) -> BTreeMap<TaskId, u32> {
    if liveness == reprise_engine::Liveness::Finished {
        return BTreeMap::new();
    }
    reprise_engine::catch_up(state, run)
}

/// What a task cost, an attempt still running or cut off counted as unknown.
pub(crate) fn task_spend(task: &TaskRecord, unfinished: &BTreeMap<TaskId, u32>) -> Spend {
    let mut spend = task.spend();
    if unfinished.contains_key(&task.task_id) {
        spend.add(None);
    }
    spend
}

/// What a run cost, as [`task_spend`] counts each task.
pub(crate) fn run_spend(run: &RunState, unfinished: &BTreeMap<TaskId, u32>) -> Spend {
    let mut spend = Spend::default();
    for task in &run.tasks {
        spend.merge(task_spend(task, unfinished));
    }
    spend
}

/// ` (attempt 2 of build was cut off when the run stopped: ...)`, naming
/// the attempts whose cost is not in: still running, or never to report.
fn cut_off(unfinished: &BTreeMap<TaskId, u32>, liveness: reprise_engine::Liveness) -> String {
    if unfinished.is_empty() {
        return String::new();
    }
    let attempts: Vec<String> = unfinished
        .iter()
        .map(|(task, attempt)| format!("attempt {attempt} of {task}"))
        .collect();
    let one = attempts.len() == 1;
    let why = if matches!(liveness, reprise_engine::Liveness::Live { .. }) {
        if one {
            "is running and has not reported its cost yet"
        } else {
            "are running and have not reported their cost yet"
        }
    } else if one {
        "was cut off when the run stopped: its cost is unknown"
    } else {
        "were cut off when the run stopped: their cost is unknown"
    };
    format!(" ({} {why})", attempts.join(", "))
}

fn load(settings: &Settings, run: Option<&str>) -> Result<RunState, CliError> {
    let state = settings.state()?;
    match run {
        Some(run) => load_run(&state, run),
        None => latest_run(&state),
    }
    .map_err(engine_error)
}

/// The ledger verified against its seals, with the audit chain that holds
/// them, and the journals it seals that are gone.
struct Checked {
    audit: AuditSummary,
    ledger: LedgerVerification,
    missing_journals: Vec<(reprise_core::TaskKey, u64)>,
}

fn checked(settings: &Settings) -> Result<Checked, CliError> {
    let (state, key) = settings.keyed_state()?;
    let audit = read_audit(&state, &key)?;
    let ledger = verify_ledger(&state, &audit)?;
    let missing_journals = reprise_store::journal::missing_sealed_journals(&state, &audit)?;
    Ok(Checked {
        audit,
        ledger,
        missing_journals,
    })
}

impl Checked {
    /// The ledger and the audit chain verify and no sealed journal is gone.
    fn ok(&self) -> bool {
        self.ledger.ok() && self.audit.ok() && self.missing_journals.is_empty()
    }
}

/// One line per journal the audit chain seals that is not there.
fn missing_journal_lines(checked: &Checked, text: &mut String) {
    for (task, seq) in &checked.missing_journals {
        let _ = writeln!(
            text,
            "journal {task}: MISSING: the audit chain seals it through seq {seq}, but it is not in the state directory (deleted or moved)"
        );
    }
}

fn missing_journals_json(checked: &Checked) -> Value {
    json!(
        checked
            .missing_journals
            .iter()
            .map(|(task, seq)| json!({"plan": task.plan.as_str(), "task_id": task.task.as_str(), "sealed_through": seq}))
            .collect::<Vec<_>>()
    )
}

/// Where `state.json` and the ledger disagree about a task: the ledger's
/// state (it wins).
fn ledger_state(checked: &Checked, run: &RunState, task: &TaskRecord) -> Option<&'static str> {
    checked
        .ledger
        .state_of(&run.run_id, task.task_id.as_str())
        .filter(|state| *state != task.state)
        .map(|state| state.as_str())
}

/// Whether `state.json` is only behind the ledger: a run that stopped before
/// its last snapshot (snapshots are written at most every 100 ms and synced
/// only at the end) shows a task at an earlier stage than the ledger has.
/// Anything else, or any disagreement in a finished run, is a contradiction.
fn only_lagging(run: &RunState, snapshot: &str, ledger: &str) -> bool {
    let stage = |state: &str| match state {
        "queued" => 0,
        "running" => 1,
        _ => 2,
    };
    run.finished_at.is_none() && stage(snapshot) < stage(ledger)
}

fn ledger_lines(checked: &Checked, text: &mut String) {
    let ledger = &checked.ledger;
    match ledger
        .report
        .as_ref()
        .and_then(|report| report.first_problem())
    {
        Some(fault) => {
            let hint = if ledger
                .report
                .as_ref()
                .is_some_and(|report| report.fault.is_none())
            {
                ": run `reprise replay repair ledger`"
            } else {
                ""
            };
            let _ = writeln!(
                text,
                "ledger: BROKEN at row {} ({}){hint}",
                fault.row,
                ChainFormat::Ledger.reason_name(fault.reason)
            );
        }
        None if ledger.identity == Identity::Mismatched => {
            let _ = writeln!(
                text,
                "ledger: MISMATCHED: a seal in the audit chain names a row the ledger does not hold (deleted, cut, rolled back or rewritten)"
            );
        }
        None => {
            let rows = ledger.report.as_ref().map_or(0, |report| report.rows);
            let sealed = match ledger.sealed_through {
                Some(seq) => format!("sealed through seq {seq}"),
                None => "not sealed yet".to_owned(),
            };
            let _ = writeln!(
                text,
                "ledger: intact ({}, {sealed})",
                crate::output::count(rows, "transition")
            );
        }
    }
    if let Some(line) = crate::commands::audit::audit_problem_line(&checked.audit) {
        let _ = writeln!(text, "{line}");
    }
    missing_journal_lines(checked, text);
}

fn status(settings: &Settings, run: Option<&str>) -> Result<Outcome, CliError> {
    let mut run = load(settings, run)?;
    let checked = checked(settings)?;
    let state = settings.state()?;
    let liveness = reprise_engine::liveness(&state, &run);
    let unfinished = caught_up(&state, &mut run, liveness);
    let priced = crate::commands::rehearse::priced(&state, &run)?;
    let mut text = status_headline(&state, &run, liveness);
    let mut shown = ShownTasks::default();
    for task in &run.tasks {
        shown.task(
            &state,
            &run,
            &checked,
            liveness,
            priced.as_ref(),
            task,
            &mut text,
        );
    }
    let spend = run_spend(&run, &unfinished);
    match &priced {
        Some(priced) => {
            let _ = writeln!(
                text,
                "a rehearsal: nothing spent; {} ({})",
                priced.would_cost_text(),
                priced.prices_text()
            );
        }
        None => {
            let _ = writeln!(
                text,
                "spent: {}{}",
                spend_text(spend),
                cut_off(&unfinished, liveness)
            );
        }
    }
    ledger_lines(&checked, &mut text);
    let ok = checked.ok() && shown.disagreements.is_empty();
    let json = status_json(
        &run,
        &checked,
        &unfinished,
        priced.as_ref(),
        liveness,
        shown,
        ok,
    );
    Ok(Outcome {
        json,
        text,
        ok,
        exit: None,
    })
}

/// The first line of `status`: the run, its plan, and where it stands.
fn status_headline(
    state: &reprise_store::state::StateDir,
    run: &RunState,
    liveness: reprise_engine::Liveness,
) -> String {
    let take_up = crate::commands::run::continue_command(state, &run.run_id);
    format!(
        "run {} ({}): {}\n",
        run.run_id,
        run.plan_name,
        match (run.ok, liveness) {
            (_, reprise_engine::Liveness::Live { pid }) => format!("running (live, pid {pid})"),
            (_, reprise_engine::Liveness::Parked) => format!(
                "PARKED: tasks wait for a resume, an approval or a time; `reprise task list-suspended` lists them, `{take_up}` takes the run up"
            ),
            (_, reprise_engine::Liveness::Cancelled) => format!(
                "cancelled: a stop signal ended it before its tasks did; `{take_up}` takes them up where they stopped"
            ),
            (Some(true), _) => "ok".to_owned(),
            (Some(false), _) => "FAILED".to_owned(),
            (None, _) => format!(
                "INTERRUPTED: it stopped before it finished and no process drives it; \
                 `{take_up}` takes it up where it stopped"
            ),
        }
    )
}

/// What `status` found about the run's tasks beyond their text lines: where
/// each unfinished task's journal leaves it, and where the snapshot and the
/// ledger differ.
#[derive(Default)]
struct ShownTasks {
    lifecycles: serde_json::Map<String, Value>,
    elapsed_of: serde_json::Map<String, Value>,
    disagreements: Vec<Value>,
    lagging: Vec<Value>,
    current_states: Vec<Value>,
}

impl ShownTasks {
    /// One task's lines of `status`, its current state noted.
    #[allow(clippy::too_many_arguments)]
    fn task(
        &mut self,
        state: &reprise_store::state::StateDir,
        run: &RunState,
        checked: &Checked,
        liveness: reprise_engine::Liveness,
        priced: Option<&crate::commands::rehearse::Priced<'_>>,
        task: &TaskRecord,
        text: &mut String,
    ) {
        let ledger = ledger_state(checked, run, task);
        let live = matches!(liveness, reprise_engine::Liveness::Live { .. });
        // A live run's snapshot may lag its ledger by a moment: the ledger
        // says where each task is, and the snapshot what a task waits for.
        let waiting = task.waiting.as_ref().filter(|_| {
            live && matches!(ledger.unwrap_or(task.state.as_str()), "queued" | "running")
        });
        self.current_states.push(match (waiting, ledger) {
            (Some(waiting), _) => json!({"state": "waiting", "waiting": waiting}),
            (None, Some(ledger)) => json!({"state": ledger, "waiting": null}),
            (None, None) => json!({"state": task.state, "waiting": null}),
        });
        let shown = self.shown_state(run, task, ledger, waiting, live);
        let _ = writeln!(
            text,
            "  {}: {shown}{}",
            task.task_id,
            task.reason
                .as_ref()
                .map(|reason| format!(" ({reason})"))
                .unwrap_or_default()
        );
        for attempt in &task.attempts {
            let line = match priced {
                Some(priced) => rehearsed_attempt_line(attempt, priced, task.task_id.as_str()),
                None => attempt_line(attempt),
            };
            let _ = writeln!(text, "    {line}");
        }
        if let Some(line) = crate::commands::run::retry_prediction(&task.metadata) {
            let _ = writeln!(text, "    {line}");
        }
        if run.ok.is_none() && waiting.is_none() && !task.state.is_terminal() {
            self.journal_line(state, run, liveness, task, text);
        }
    }

    /// A task's state as `status` shows it: the ledger's word where the
    /// snapshot lags or disagrees, noted for the JSON.
    fn shown_state(
        &mut self,
        run: &RunState,
        task: &TaskRecord,
        ledger: Option<&str>,
        waiting: Option<&reprise_engine::Waiting>,
        live: bool,
    ) -> String {
        match ledger {
            _ if waiting.is_some() => {
                format!(
                    "waiting for {}",
                    waiting.map_or("", |waiting| &waiting.detail)
                )
            }
            Some(ledger) if live && only_lagging(run, task.state.as_str(), ledger) => {
                ledger.to_owned()
            }
            Some(ledger) if only_lagging(run, task.state.as_str(), ledger) => {
                self.lagging.push(json!({"task_id": task.task_id.as_str(), "state_json": task.state, "ledger": ledger}));
                format!(
                    "{ledger} (state.json still says {}: the run stopped before its last snapshot)",
                    task.state.as_str()
                )
            }
            Some(ledger) => {
                self.disagreements.push(json!({"task_id": task.task_id.as_str(), "state_json": task.state, "ledger": ledger}));
                format!(
                    "{ledger} (state.json says {}, which disagrees with the ledger; the ledger wins)",
                    task.state.as_str()
                )
            }
            None => task.state.as_str().to_owned(),
        }
    }

    /// Where an unfinished task's journal leaves it, and for how long its
    /// attempt has been going while the run is live.
    fn journal_line(
        &mut self,
        state: &reprise_store::state::StateDir,
        run: &RunState,
        liveness: reprise_engine::Liveness,
        task: &TaskRecord,
        text: &mut String,
    ) {
        let Some(plan) = run.plan_id() else {
            return;
        };
        let Some(progress) = reprise_engine::task_lifecycle(
            state,
            &reprise_core::TaskKey::new(plan, task.task_id.clone()),
            &run.run_id,
        ) else {
            return;
        };
        let elapsed = progress
            .attempt_started_at
            .as_deref()
            .filter(|_| matches!(liveness, reprise_engine::Liveness::Live { .. }))
            .and_then(|at| humantime::parse_rfc3339(at).ok())
            .and_then(|at| std::time::SystemTime::now().duration_since(at).ok());
        let for_how_long = elapsed
            .map(|since| format!(", for {}s", since.as_secs()))
            .unwrap_or_default();
        let _ = writeln!(
            text,
            "    journal: {}{for_how_long}",
            lifecycle_line(progress.state, liveness)
        );
        self.lifecycles
            .insert(task.task_id.as_str().to_owned(), json!(progress.state));
        if let Some(since) = elapsed {
            self.elapsed_of.insert(
                task.task_id.as_str().to_owned(),
                json!(since.as_millis() as u64),
            );
        }
    }
}

/// `status --json`: the run document with its spend, each task's current
/// state, and the checks of the ledger and the audit chain.
fn status_json(
    run: &RunState,
    checked: &Checked,
    unfinished: &BTreeMap<TaskId, u32>,
    priced: Option<&crate::commands::rehearse::Priced<'_>>,
    liveness: reprise_engine::Liveness,
    shown: ShownTasks,
    ok: bool,
) -> Value {
    let ledger = &checked.ledger;
    let ledger_ok = ledger.ok();
    let mut json = run_json(run);
    if let Some(object) = json.as_object_mut() {
        insert_spend(object, run_spend(run, unfinished));
    }
    if let Some(tasks) = json["tasks"].as_array_mut() {
        for (task, record) in tasks.iter_mut().zip(&run.tasks) {
            if let Some(task) = task.as_object_mut() {
                insert_spend(task, task_spend(record, unfinished));
            }
        }
    }
    if let Some(priced) = priced {
        json = crate::commands::rehearse::nothing_spent(json);
        priced.annotate(&mut json);
    }
    if let Some(tasks) = json["tasks"].as_array_mut() {
        for (task, current) in tasks.iter_mut().zip(shown.current_states) {
            task["state"] = current["state"].clone();
            task["waiting"] = current["waiting"].clone();
        }
    }
    json["ledger"] = match &ledger.report {
        Some(report) => {
            let (first_bad_row, reason) =
                crate::commands::journal::problem_json(ChainFormat::Ledger, report);
            json!({"ok": ledger_ok, "rows": report.rows, "first_bad_row": first_bad_row, "reason": reason,
                   "identity": ledger.identity, "sealed_through": ledger.sealed_through})
        }
        None => json!({"ok": ledger_ok, "rows": 0, "identity": ledger.identity}),
    };
    json["audit"] = crate::commands::audit::audit_json(&checked.audit);
    json["missing_journals"] = missing_journals_json(checked);
    json["state_disagrees"] = json!(shown.disagreements);
    json["state_lags"] = json!(shown.lagging);
    // A run that has not finished has no verdict yet.
    json["ok"] = match run.ok {
        Some(finished) => json!(ok && finished),
        None => Value::Null,
    };
    json["liveness"] = json!(liveness);
    json["lifecycle"] = Value::Object(shown.lifecycles);
    json["attempt_elapsed_ms"] = Value::Object(shown.elapsed_of);
    json
}

/// Where a task's journal leaves it, in words.
fn lifecycle_line(lifecycle: TaskState, liveness: reprise_engine::Liveness) -> String {
    let stopped = !matches!(liveness, reprise_engine::Liveness::Live { .. });
    let at = match lifecycle {
        TaskState::Checkpointing { attempt, .. } => {
            format!("taking the checkpoint before attempt {attempt}")
        }
        TaskState::Running { attempt, .. } => format!("attempt {attempt}'s agent running"),
        TaskState::Judging { attempt } => format!("attempt {attempt}'s gates running"),
        TaskState::Diagnosing { attempt } | TaskState::Budgeting { attempt, .. } => {
            format!("diagnosing attempt {attempt}")
        }
        TaskState::RollingBack { attempt, .. } => format!("rolling back attempt {attempt}"),
        TaskState::Retrying { attempt, .. } => format!("deciding attempt {}'s mode", attempt + 1),
        TaskState::Closing(terminal) => format!("closing as {}", terminal.as_str()),
        other => other.name().to_owned(),
    };
    if stopped {
        format!("{at} when the run stopped")
    } else {
        at
    }
}

/// Every run in the state directory, oldest first.
pub(crate) fn runs(settings: &Settings) -> Result<Outcome, CliError> {
    let state = settings.state()?;
    let ids = reprise_engine::run_ids(&state).map_err(engine_error)?;
    let mut text = String::new();
    let mut rows = Vec::new();
    for id in &ids {
        let mut run = load_run(&state, id).map_err(engine_error)?;
        let liveness = reprise_engine::liveness(&state, &run);
        let unfinished = caught_up(&state, &mut run, liveness);
        let priced = crate::commands::rehearse::priced(&state, &run)?;
        let listed = ListedRun {
            run: &run,
            liveness,
            standing: run_standing(&run, liveness),
            duration: run_duration(&run),
            spend: run_spend(&run, &unfinished),
            passed: run
                .tasks
                .iter()
                .filter(|task| task.state.delivered())
                .count(),
        };
        let shown_spend = match &priced {
            Some(priced) => format!("rehearsal, {}", priced.would_cost_text()),
            None => spend_text(listed.spend),
        };
        listed.line(&shown_spend, &mut text);
        rows.push(listed.json(priced.as_ref()));
    }
    if ids.is_empty() {
        text.push_str("no runs yet: start one with `reprise run PLAN`\n");
    }
    Ok(Outcome {
        exit: None,
        json: json!({"runs": rows}),
        text,
        ok: true,
    })
}

/// Where a run stands, in a word.
fn run_standing(run: &RunState, liveness: reprise_engine::Liveness) -> &'static str {
    match (run.ok, liveness) {
        (_, reprise_engine::Liveness::Live { .. }) => "live",
        (_, reprise_engine::Liveness::Parked) => "parked",
        (_, reprise_engine::Liveness::Cancelled) => "cancelled",
        (Some(true), _) => "ok",
        (Some(false), _) => "failed",
        (None, _) => "interrupted",
    }
}

/// How long a finished run took.
fn run_duration(run: &RunState) -> Option<std::time::Duration> {
    let end = run.finished_at.as_deref()?;
    let start = humantime::parse_rfc3339(&run.started_at).ok()?;
    let end = humantime::parse_rfc3339(end).ok()?;
    end.duration_since(start).ok()
}

/// One run as `status --runs` lists it.
struct ListedRun<'a> {
    run: &'a RunState,
    liveness: reprise_engine::Liveness,
    standing: &'static str,
    duration: Option<std::time::Duration>,
    spend: Spend,
    /// Its tasks that delivered a result.
    passed: usize,
}

impl ListedRun<'_> {
    fn line(&self, shown_spend: &str, text: &mut String) {
        let run = self.run;
        let shown_standing = match self.liveness {
            reprise_engine::Liveness::Live { pid } => format!("live (pid {pid})"),
            _ => self.standing.to_owned(),
        };
        let shown_duration = self.duration.map_or_else(
            || "-".to_owned(),
            |duration| format!("{:.1}s", duration.as_secs_f64()),
        );
        let _ = writeln!(
            text,
            "{}  {:<16} {}  {:>8}  {:<16} {}/{} passed  {}",
            run.run_id,
            run.plan_name,
            run.started_at.get(..19).unwrap_or(&run.started_at),
            shown_duration,
            shown_standing,
            self.passed,
            crate::output::count(run.tasks.len() as u64, "task"),
            shown_spend
        );
    }

    fn json(&self, priced: Option<&crate::commands::rehearse::Priced<'_>>) -> Value {
        let run = self.run;
        let mut row = json!({
            "run_id": run.run_id,
            "plan": run.plan_name,
            "started_at": run.started_at,
            "finished_at": run.finished_at,
            "duration_ms": self.duration.map(|duration| u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)),
            "state": self.standing,
            "liveness": self.liveness,
            "tasks_passed": self.passed,
            "tasks": run.tasks.len(),
            "rehearsal": priced.is_some(),
        });
        if let Some(object) = row.as_object_mut() {
            // A rehearsal spent nothing: its figure is what it would cost.
            insert_spend(
                object,
                if priced.is_some() {
                    Spend::default()
                } else {
                    self.spend
                },
            );
            object.insert(
                "would_cost_micro_usd".into(),
                json!(priced.and_then(|priced| priced.would_cost_micro_usd())),
            );
        }
        row
    }
}

pub(crate) fn list(settings: &Settings) -> Result<Outcome, CliError> {
    let mut run = load(settings, None)?;
    let state = settings.state()?;
    let liveness = reprise_engine::liveness(&state, &run);
    let unfinished = caught_up(&state, &mut run, liveness);
    let priced = crate::commands::rehearse::priced(&state, &run)?;
    let mut text = String::new();
    for task in &run.tasks {
        let spend = match &priced {
            Some(priced) => format!(
                "nothing spent (a rehearsal; would cost {})",
                priced
                    .task_micro_usd(task.task_id.as_str())
                    .map_or_else(|| "unknown".to_owned(), money)
            ),
            None => format!("spent {}", spend_text(task_spend(task, &unfinished))),
        };
        let _ = writeln!(
            text,
            "{:<24} {:<9} {}  {spend}",
            task.task_id.as_str(),
            task.state.as_str(),
            crate::output::count(task.attempts.len() as u64, "attempt"),
        );
    }
    let tasks: Vec<_> = run
        .tasks
        .iter()
        .map(|task| {
            let spend = if priced.is_some() {
                Spend::default()
            } else {
                task_spend(task, &unfinished)
            };
            with_spend(
                json!({"task_id": task.task_id.as_str(), "state": task.state, "attempts": task.attempts.len()}),
                spend,
            )
        })
        .collect();
    Ok(Outcome {
        exit: None,
        json: json!({"run_id": run.run_id, "tasks": tasks}),
        text,
        ok: true,
    })
}

/// One line per checkpoint taken before an attempt: the agent, mode and
/// model it ran with, and each dependency's state and commit.
fn checkpoint_lines(checkpoints: &[Value], text: &mut String) {
    for checkpoint in checkpoints {
        // A checkpoint recorded without what its attempt ran with says nothing here.
        let Ok(context) = serde_json::from_value::<AttemptContext>(checkpoint["context"].clone())
        else {
            continue;
        };
        let dependencies: Vec<String> =
            serde_json::from_value::<Vec<DependencyState>>(checkpoint["dependencies"].clone())
                .unwrap_or_default()
                .iter()
                .map(|dependency| {
                    let commit = dependency.commit.as_deref().unwrap_or("-");
                    format!(
                        "{} {} at {}",
                        dependency.task,
                        dependency.state.as_str(),
                        commit.get(..12).unwrap_or(commit)
                    )
                })
                .collect();
        let _ = writeln!(
            text,
            "  checkpoint before attempt {}: {} ({}, model {}), dependencies: {}",
            checkpoint["attempt"],
            context.agent,
            context.mode.as_str(),
            context.model.as_deref().unwrap_or("default"),
            if dependencies.is_empty() {
                "none".to_owned()
            } else {
                dependencies.join(", ")
            }
        );
    }
}

pub(crate) fn show(settings: &Settings, task: &str) -> Result<Outcome, CliError> {
    let state = settings.state()?;
    let key = task_key(settings, &state, task)?;
    let run = latest_run_of(&state, Some(&key.plan))?;
    let id = key.task.clone();
    let record = run.task(&id).ok_or_else(|| {
        CliError::usage(format!(
            "task {id} is not in run {} of plan {}; `reprise task list` lists its tasks",
            run.run_id, key.plan
        ))
    })?;
    let checked = checked(settings)?;
    let disagreement = ledger_state(&checked, &run, record);
    let mut text = format!(
        "task {} ({}): {}\n",
        id,
        record.agent,
        match disagreement {
            Some(ledger) => format!(
                "{ledger} (state.json says {}, which disagrees with the ledger; the ledger wins)",
                record.state.as_str()
            ),
            None => record.state.as_str().to_owned(),
        }
    );
    if let Some(reason) = &record.reason {
        let _ = writeln!(text, "  reason: {reason}");
    }
    let priced = crate::commands::rehearse::priced(&state, &run)?;
    let (spend, shown) = spend_shown(record, priced.as_ref());
    let _ = writeln!(text, "  run: {}  {shown}", run.run_id);
    attempt_and_metadata_lines(record, priced.as_ref(), &mut text);
    let checkpoints = reprise_engine::held_checkpoints(&state, &key, &run.run_id);
    checkpoint_lines(&checkpoints, &mut text);
    Ok(Outcome {
        exit: None,
        json: with_spend(
            json!({
                "plan": key.plan.as_str(),
                "task_id": id.as_str(),
                "run_id": run.run_id,
                "agent": record.agent,
                "state": record.state,
                "reason": record.reason,
                "attempts": record.attempts,
                "metadata": record.metadata,
                "checkpoints": checkpoints,
                "ledger_state": disagreement,
                "missing_journals": missing_journals_json(&checked),
            }),
            spend,
        ),
        text: {
            let mut text = text;
            let mut lines = String::new();
            ledger_lines(&checked, &mut lines);
            text.push_str(&lines);
            text
        },
        ok: disagreement.is_none() && checked.ok(),
    })
}

/// What a task spent (nothing, for a rehearsal), and the words for it.
fn spend_shown(
    record: &TaskRecord,
    priced: Option<&crate::commands::rehearse::Priced<'_>>,
) -> (Spend, String) {
    match priced {
        Some(priced) => (
            Spend::default(),
            format!(
                "nothing spent (a rehearsal; would cost {})",
                priced
                    .task_micro_usd(record.task_id.as_str())
                    .map_or_else(|| "unknown".to_owned(), money)
            ),
        ),
        None => (
            record.spend(),
            format!("spent: {}", spend_text(record.spend())),
        ),
    }
}

/// A line per attempt, then the task's metadata (one line each).
fn attempt_and_metadata_lines(
    record: &TaskRecord,
    priced: Option<&crate::commands::rehearse::Priced<'_>>,
    text: &mut String,
) {
    for attempt in &record.attempts {
        let line = match priced {
            Some(priced) => rehearsed_attempt_line(attempt, priced, record.task_id.as_str()),
            None => attempt_line(attempt),
        };
        let _ = writeln!(text, "  {line}");
    }
    for (key, value) in &record.metadata {
        let value = value
            .as_str()
            .map_or_else(|| value.to_string(), str::to_owned);
        let value = value.replace('\n', "\\n");
        let _ = writeln!(text, "  {key}: {value}");
    }
}
