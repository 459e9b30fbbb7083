//! `reprise run PLAN`: validate the plan, find or create the state directory,
//! run every task, print each attempt as it ends, and exit 0 only when every
//! task passed.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use reprise_agents::CancelToken;
use reprise_core::TaskId;
use reprise_core::budget::BudgetSpec;
use reprise_core::plan::Plan;
use reprise_core::rows::Kind;
use reprise_engine::{
    AgentSetup, Event, EventSink, RunOptions, RunState, Supervisor, Workspace, load_plan,
    lock_tasks, new_run_id, resolve_budget, run_plan,
};
use reprise_store::StoreError;
use reprise_store::audit::{check_key_binding_at, migrate_state_dir};
use reprise_store::creation::create_state_dir;
use reprise_store::key::{KeyFile, check_key, load_key, load_or_create_key};
use reprise_store::state::{StateDir, now_rfc3339};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicI32, Ordering};

use crate::commands::fleet_transport::PgTransport;
use crate::commands::rehearse::Priced;
use crate::commands::spend::{cost_text, insert_spend, spend_text};
use crate::error::CliError;
use crate::output::{Outcome, count, short_commit};
use crate::settings::Settings;

#[derive(Debug, clap::Args)]
pub(crate) struct RunArgs {
    /// The plan file (YAML). Not needed with --retry-failed, which
    /// re-reads the run's own plan.
    #[arg(required_unless_present_any = ["retry_failed", "continue_run"])]
    plan: Option<PathBuf>,
    /// Take up run RUN, interrupted or parked, in this process: what
    /// passed stays passed, what was queued runs, an attempt the dead
    /// process was running is retried (warm when its session and files
    /// allow), and parks whose wake time has passed are resumed.
    #[arg(long = "continue", value_name = "RUN", conflicts_with_all = ["retry_failed", "check", "plan", "include_uncommitted", "retry_budget"])]
    continue_run: Option<String>,
    /// Start a new leg of finished run RUN: its failed tasks run again,
    /// each judged one starting cold with its kept reply quoted once.
    #[arg(long, value_name = "RUN")]
    retry_failed: Option<String>,
    /// Tasks running at once (overrides the plan's `seats`).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    seats: Option<u32>,
    /// A retry budget, e.g. "3 retries, degrade: coverage>tests"
    /// (overrides the plan's `retry_budget`).
    #[arg(long, value_name = "SPEC")]
    retry_budget: Option<String>,
    /// Start the tasks' worktrees from the project's working tree as it
    /// is, uncommitted and untracked changes included (snapshotted into a
    /// commit that your index, refs and stash never see).
    #[arg(long)]
    include_uncommitted: bool,
    /// Keep every task's worktree when the task ends. By default a task
    /// whose result is committed on its branch (or that changed nothing)
    /// has its worktree removed and unregistered; failed tasks keep
    /// theirs until `reprise clean`.
    #[arg(long, conflicts_with = "check")]
    keep_worktrees: bool,
    /// Check only: validate the plan, resolve every task's agent binary
    /// (and its version) and find each gate's command; run nothing,
    /// write nothing.
    #[arg(long, conflicts_with = "retry_failed")]
    check: bool,
    /// Write one JSON object a line to stdout as things happen (run,
    /// attempts, gates, decisions, anomalies, tasks), the last one
    /// `run.finished` with the whole run document.
    #[arg(long, conflicts_with = "check")]
    pub(crate) events: bool,
    /// Run the tasks on the workers of the fleet whose PostgreSQL database
    /// this names (`reprise worker` on each host); this process coordinates
    /// and signs. Needs --remote.
    /// With --continue, the database of the fleet the run ran on, when the
    /// recorded one (kept without its password) is not enough.
    #[arg(long, value_name = "URL", conflicts_with = "check")]
    fleet: Option<String>,
    /// The git remote the fleet's workers fetch each task's base from and
    /// push its result to (a URL or a path every host can reach).
    #[arg(
        long,
        value_name = "GIT-URL",
        requires = "fleet",
        conflicts_with = "continue_run"
    )]
    remote: Option<String>,
}

impl RunArgs {
    /// `run PLAN --check` checks only; `run --continue RUN` takes a run
    /// up; anything else starts a run (or a new leg of one).
    pub(crate) fn run(self, settings: &Settings) -> Result<Outcome, CliError> {
        if self.check
            && let Some(plan) = &self.plan
        {
            return crate::commands::check::check(settings, plan, self.retry_budget.as_deref());
        }
        let settings = settings.with_events(self.events);
        if let Some(run_id) = &self.continue_run {
            return continue_run(
                &settings,
                run_id,
                (self.seats, self.fleet),
                BTreeMap::new(),
                self.keep_worktrees,
            );
        }
        if self.fleet.is_some() && self.remote.is_none() {
            return Err(CliError::usage(
                "--fleet needs --remote GIT-URL: the git remote every worker fetches each task's base from and pushes its result to",
            ));
        }
        // A fleet that does not answer is refused before anything is written.
        if let Some(url) = &self.fleet {
            crate::commands::fleet::check_reachable(url)?;
        }
        run(
            &settings,
            self.plan.as_deref(),
            self.retry_failed.as_deref(),
            self.seats,
            self.retry_budget.as_deref(),
            WorktreeOptions {
                include_uncommitted: self.include_uncommitted,
                keep_worktrees: self.keep_worktrees,
                fleet: self.fleet.map(|url| FleetTarget {
                    url,
                    remote: self.remote.unwrap_or_default(),
                }),
            },
        )
    }
}

/// Where the run's tasks work, in one line.
pub(crate) fn workspace_line(workspace: &Workspace) -> String {
    match workspace {
        Workspace::Worktrees {
            head,
            base,
            uncommitted,
            included,
            ..
        } => {
            let mut line = format!("worktrees from HEAD {}", short_commit(head));
            match (*uncommitted, *included) {
                (0, _) => {}
                (count, true) => line.push_str(&format!(
                    ", with {count} uncommitted change{} included (base {})",
                    plural(count),
                    short_commit(base)
                )),
                (count, false) => line.push_str(&format!(
                    "; {count} uncommitted change{} not included (--include-uncommitted includes them)",
                    plural(count)
                )),
            }
            line
        }
        Workspace::InPlace { reason } => {
            format!("tasks run in place in the project directory ({reason})")
        }
    }
}

fn plural(count: u64) -> &'static str {
    if count == 1 { "" } else { "s" }
}

/// `--events`: one JSON object a line, flushed as each event happens.
/// Version 1 of the stream: every object has `v`, `at` (RFC 3339) and
/// `event`; the rest depends on the event (see the README).
pub(crate) const EVENTS_VERSION: u64 = 1;

struct EventStream;

// An event that stands for a chain row carries the row's kind as its name;
// the stream's own events (`run.workspace`, `task.waiting`, ...) are named
// here.
impl EventSink for EventStream {
    fn event(&mut self, event: &Event) {
        let (kind, mut body) = match event {
            Event::RunStarted {
                run_id,
                plan_name,
                tasks,
                seats,
            } => (
                Kind::RunStarted.as_str(),
                json!({"run_id": run_id, "plan": plan_name, "tasks": tasks, "seats": seats}),
            ),
            Event::Workspace { workspace } => ("run.workspace", json!({"workspace": workspace})),
            Event::TaskWaiting { task, waiting } => (
                "task.waiting",
                json!({"task": task, "reason": waiting.reason, "detail": waiting.detail}),
            ),
            Event::AttemptStarted {
                task,
                attempt,
                mode,
            } => (
                Kind::AttemptStarted.as_str(),
                json!({"task": task, "attempt": attempt, "mode": mode}),
            ),
            Event::AttemptFinished { task, summary } => (
                Kind::AttemptFinished.as_str(),
                json!({"task": task, "attempt": summary}),
            ),
            Event::Decision { task, record } => (
                Kind::RetryDecision.as_str(),
                json!({"task": task, "decision": record.to_value()}),
            ),
            Event::Phase {
                task,
                attempt,
                phase,
            } => (
                "attempt.phase",
                json!({"task": task, "attempt": attempt, "phase": phase}),
            ),
            Event::Anomaly {
                task,
                attempt,
                anomaly,
            } => (
                Kind::AttemptAnomaly.as_str(),
                json!({"task": task, "attempt": attempt, "anomaly": anomaly}),
            ),
            Event::TaskPaused {
                task,
                attempt,
                upgrade_after,
            } => (
                "task.paused",
                json!({"task": task, "attempt": attempt,
                       "upgrade_after_ms": upgrade_after.map(|after| u64::try_from(after.as_millis()).unwrap_or(u64::MAX))}),
            ),
            Event::TaskFinished {
                task,
                status,
                reason,
            } => (
                Kind::TaskFinished.as_str(),
                json!({"task": task, "state": status, "reason": reason}),
            ),
            Event::Warning { task, message } => {
                ("warning", json!({"task": task, "message": message}))
            }
        };
        emit_event(kind, &mut body);
    }
}

/// Writes one event line: `v`, `at` and `event` with the body's fields.
fn emit_event(kind: &str, body: &mut Value) {
    if let Some(object) = body.as_object_mut() {
        object.insert("v".into(), json!(EVENTS_VERSION));
        object.insert("at".into(), json!(now_rfc3339()));
        object.insert("event".into(), json!(kind));
    }
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{body}");
    let _ = stdout.flush();
}

/// Collects nothing: `--json` prints only the final document.
struct Quiet;

impl EventSink for Quiet {
    fn event(&mut self, _: &Event) {}
}

/// What a run's worktrees start from and whether they outlive their tasks.
#[derive(Debug, Clone, Default)]
pub(crate) struct WorktreeOptions {
    /// `--include-uncommitted`: the base holds the working tree's changes.
    pub(crate) include_uncommitted: bool,
    /// `--keep-worktrees`: no task's worktree is reclaimed when it ends.
    pub(crate) keep_worktrees: bool,
    /// `--fleet URL --remote GIT-URL`: the tasks run on the fleet's workers.
    pub(crate) fleet: Option<FleetTarget>,
}

/// Where a fleet run's tasks go: the fleet's database and the git remote
/// its workers fetch bases from and push results to.
#[derive(Debug, Clone)]
pub(crate) struct FleetTarget {
    pub(crate) url: String,
    pub(crate) remote: String,
}

pub(crate) fn run(
    settings: &Settings,
    plan_path: Option<&std::path::Path>,
    retry_failed: Option<&str>,
    seats: Option<u32>,
    retry_budget: Option<&str>,
    worktrees: WorktreeOptions,
) -> Result<Outcome, CliError> {
    let prepared = prepare(settings, plan_path, retry_failed, retry_budget)?;
    let run = execute(
        settings,
        prepared,
        new_run_id(),
        seats,
        BTreeMap::new(),
        worktrees,
    )?;
    Ok(finished(settings, &run))
}

/// `reprise run --continue RUN`: takes up an interrupted or parked run in
/// this process.
/// A run that ran on a fleet goes on there: its tasks still out are
/// followed where the workers hold them (`fleet`: the fleet's database,
/// when the recorded one will not do).
pub(crate) fn continue_run(
    settings: &Settings,
    run_id: &str,
    (seats, fleet): (Option<u32>, Option<String>),
    resume: BTreeMap<TaskId, reprise_engine::Resume>,
    keep_worktrees: bool,
) -> Result<Outcome, CliError> {
    reprise_core::check_run_id(run_id).map_err(|err| CliError::usage(err.to_string()))?;
    let given = fleet.is_some();
    let url = fleet.or_else(|| settings.database_url.clone());
    let fleet = match settings.state() {
        Ok(state) => crate::commands::fleet::recorded_fleet(&state, run_id, url)?,
        Err(_) => None,
    };
    match &fleet {
        // A fleet that does not answer is refused before anything is written.
        Some(target) => crate::commands::fleet::check_reachable(&target.url)?,
        // REPRISE_DATABASE_URL set for other commands does not matter here.
        None if given => {
            return Err(CliError::usage(format!(
                "run {run_id} did not run on a fleet; continue it without --fleet"
            )));
        }
        None => {}
    }
    let prepared = prepare_continue(settings, run_id, resume, None)?;
    let run = execute(
        settings,
        prepared,
        run_id.to_owned(),
        seats,
        BTreeMap::new(),
        WorktreeOptions {
            include_uncommitted: false,
            keep_worktrees,
            fleet,
        },
    )?;
    Ok(finished(settings, &run))
}

/// Whether run `run_id` is a rehearsal (its agents talk to a scripted
/// model server, whose log and homes are under `rehearsal/`).
fn is_rehearsal(state: &StateDir, run_id: &str) -> bool {
    state.runs_dir().join(run_id).join("rehearsal").is_dir()
}

/// The command that takes run `run_id` up: a rehearsal only as one.
pub(crate) fn continue_command(state: &StateDir, run_id: &str) -> String {
    if is_rehearsal(state, run_id) {
        format!("reprise rehearse --continue {run_id} --scenario FILE")
    } else {
        format!("reprise run --continue {run_id}")
    }
}

/// A check of a plan before anything is written (a rehearsal's scenario
/// against it).
pub(crate) type PlanCheck<'a> = dyn Fn(&Plan) -> Result<(), CliError> + 'a;

/// What a continued run needs, checked before anything is written: the run
/// exists, no process drives it, and it has something left to do. A
/// rehearsal is continued only as one (`rehearsal` checks the scenario
/// against its plan): continued as a plain run, its agents would call the
/// real services.
pub(crate) fn prepare_continue(
    settings: &Settings,
    run_id: &str,
    resume: BTreeMap<TaskId, reprise_engine::Resume>,
    rehearsal: Option<&PlanCheck<'_>>,
) -> Result<Prepared, CliError> {
    reprise_core::check_run_id(run_id).map_err(|err| CliError::usage(err.to_string()))?;
    let state = settings.state()?;
    let prior =
        reprise_engine::load_run(&state, run_id).map_err(|err| CliError::usage(err.to_string()))?;
    refuse_uncontinuable(&state, run_id, &prior, rehearsal.is_some())?;
    let plan_path = PathBuf::from(&prior.plan);
    let plan = load_plan(&plan_path).map_err(|err| CliError::usage(err.to_string()))?;
    if prior.plan_id().as_ref() != Some(plan.id()) {
        return Err(CliError::usage(format!(
            "the plan file {} is no longer plan {} of run {run_id}; restore it to continue the run",
            plan_path.display(),
            prior.plan_name
        )));
    }
    if let Some(check) = rehearsal {
        check(&plan)?;
    }
    check_containment(&plan)?;
    crate::commands::check::refuse_hidden_paths(settings, &plan_path, &plan)?;
    let retry_budget =
        resolve_budget(&plan, None).map_err(|err| CliError::usage(err.to_string()))?;
    let (state, key) = open_or_create_state(settings)?;
    reprise_engine::preflight::check_sealed_journals(&state, &key, &plan)
        .and_then(|()| reprise_engine::preflight::check_journal_tails(&state, &plan))
        .map_err(preflight_error)?;
    // A park a crash cut short is completed before the run goes on.
    complete_cut_parks(&state, &key, &plan)?;
    let prior =
        reprise_engine::load_run(&state, run_id).map_err(|err| CliError::usage(err.to_string()))?;
    Ok(Prepared {
        plan,
        plan_path,
        prior: None,
        retry_budget,
        state,
        key,
        continuing: Some(reprise_engine::Continuing { prior, resume }),
    })
}

/// Refuses to continue a run a process drives, a run that finished, or a
/// rehearsal as a plain run (and a plain run as a rehearsal).
fn refuse_uncontinuable(
    state: &StateDir,
    run_id: &str,
    prior: &RunState,
    as_rehearsal: bool,
) -> Result<(), CliError> {
    match reprise_engine::liveness(state, prior) {
        reprise_engine::Liveness::Live { pid } => {
            return Err(CliError::usage(format!(
                "run {run_id} is live (pid {pid}): it goes on by itself; `reprise status {run_id}` shows it"
            )));
        }
        reprise_engine::Liveness::Finished => {
            return Err(CliError::usage(format!(
                "run {run_id} has finished; nothing to continue (`reprise run --retry-failed {run_id}` re-runs its failed tasks)"
            )));
        }
        reprise_engine::Liveness::Interrupted
        | reprise_engine::Liveness::Parked
        | reprise_engine::Liveness::Cancelled => {}
    }
    match (is_rehearsal(state, run_id), as_rehearsal) {
        (true, false) => Err(CliError::usage(format!(
            "run {run_id} is a rehearsal (its agents talk to a scripted model server): continue it with `reprise rehearse --continue {run_id} --scenario FILE` (`--resume TASK` resumes a parked task)"
        ))),
        (false, true) => Err(CliError::usage(format!(
            "run {run_id} is not a rehearsal: continue it with `reprise run --continue {run_id}`"
        ))),
        _ => Ok(()),
    }
}

/// Completes every park of the plan's tasks a crash cut short, saying so.
fn complete_cut_parks(state: &StateDir, key: &KeyFile, plan: &Plan) -> Result<(), CliError> {
    let tasks: Vec<reprise_core::TaskKey> = plan
        .tasks()
        .iter()
        .map(|task| reprise_core::TaskKey::new(plan.id().clone(), task.id.clone()))
        .collect();
    for parked in reprise_engine::complete_cut_parks(state, key, &tasks)
        .map_err(|err| CliError::usage(err.to_string()))?
    {
        let mut stderr = std::io::stderr().lock();
        let _ = writeln!(
            stderr,
            "completed the park of {} that was cut short (until {})",
            parked.task,
            parked.wake.describe()
        );
    }
    Ok(())
}

/// The outcome of a run that ended: exit 0 when every task passed, 3 when
/// some are parked (each with the command that wakes it), else 1.
fn finished(settings: &Settings, run: &RunState) -> Outcome {
    let ok = run.ok == Some(true);
    if settings.events {
        emit_event("run.finished", &mut json!({"ok": ok, "run": run_json(run)}));
    }
    Outcome {
        exit: parked_code(run),
        json: run_json(run),
        text: summary_text(run, &format!("reprise run --continue {}", run.run_id)),
        ok,
    }
}

/// Exit 3 for a run that ended with tasks parked.
pub(crate) fn parked_code(run: &RunState) -> Option<crate::error::ExitKind> {
    run.tasks
        .iter()
        .any(|task| task.state == reprise_engine::TaskStatus::Suspended)
        .then_some(crate::error::ExitKind::Parked)
}

/// A run that can start: the plan and budget validated, the state directory
/// and key in hand.
pub(crate) struct Prepared {
    pub(crate) plan: Plan,
    pub(crate) plan_path: PathBuf,
    pub(crate) prior: Option<RunState>,
    pub(crate) retry_budget: Option<BudgetSpec>,
    pub(crate) state: StateDir,
    pub(crate) key: KeyFile,
    /// For `run --continue` and a resume with no live run.
    pub(crate) continuing: Option<reprise_engine::Continuing>,
}

/// Validates everything a run needs before anything is written, then finds
/// (or creates, as `reprise init` would) the state directory.
pub(crate) fn prepare(
    settings: &Settings,
    plan_path: Option<&Path>,
    retry_failed: Option<&str>,
    retry_budget: Option<&str>,
) -> Result<Prepared, CliError> {
    prepare_checked(
        settings,
        plan_path,
        retry_failed,
        retry_budget,
        |plan, path| crate::commands::check::before_run(settings, path, plan),
    )
}

/// As [`prepare`], with the caller's own check of the plan made before
/// anything is written.
pub(crate) fn prepare_checked(
    settings: &Settings,
    plan_path: Option<&Path>,
    retry_failed: Option<&str>,
    retry_budget: Option<&str>,
    check: impl FnOnce(&Plan, &Path) -> Result<(), CliError>,
) -> Result<Prepared, CliError> {
    // A new leg needs the finished run it continues, from an existing state
    // directory; its plan is the one that run recorded unless one is given.
    let prior = match retry_failed {
        Some(run_id) => {
            reprise_core::check_run_id(run_id).map_err(|err| CliError::usage(err.to_string()))?;
            let state = settings.state()?;
            let prior = reprise_engine::load_run(&state, run_id)
                .map_err(|err| CliError::usage(err.to_string()))?;
            if prior.finished_at.is_none() {
                return Err(CliError::usage(format!(
                    "run {run_id} has not finished; wait for it, or retry a finished run"
                )));
            }
            if reprise_engine::liveness(&state, &prior) == reprise_engine::Liveness::Cancelled {
                return Err(CliError::usage(format!(
                    "run {run_id} was cancelled, not finished: `{}` takes its cancelled tasks up where they stopped",
                    continue_command(&state, run_id)
                )));
            }
            Some(prior)
        }
        None => None,
    };
    let plan_path = match (plan_path, &prior) {
        (Some(path), _) => path.to_path_buf(),
        (None, Some(prior)) => PathBuf::from(&prior.plan),
        (None, None) => return Err(CliError::usage("give a plan file, or --retry-failed RUN")),
    };
    // A bad plan stops here, before anything is written.
    let plan = load_plan(&plan_path).map_err(|err| CliError::usage(err.to_string()))?;
    // A new leg is of the same plan: its tasks are matched by id, and a
    // file of another plan would run other work under the old run's name.
    if let Some(prior) = &prior
        && plan.name() != prior.plan_name
    {
        return Err(CliError::usage(format!(
            "{} is plan {}, but run {} ran plan {}; give that plan's file, or no file to re-read the one it ran ({})",
            plan_path.display(),
            plan.name(),
            prior.run_id,
            prior.plan_name,
            prior.plan
        )));
    }
    check_containment(&plan)?;
    crate::commands::check::refuse_hidden_paths(settings, &plan_path, &plan)?;
    check(&plan, &plan_path)?;
    // So does a retry budget that the plan's gates cannot honour.
    let retry_budget =
        resolve_budget(&plan, retry_budget).map_err(|err| CliError::usage(err.to_string()))?;
    let (state, key) = open_or_create_state(settings)?;
    reprise_engine::preflight::check_sealed_journals(&state, &key, &plan)
        .and_then(|()| reprise_engine::preflight::check_journal_tails(&state, &plan))
        .map_err(preflight_error)?;
    Ok(Prepared {
        plan,
        plan_path,
        prior,
        retry_budget,
        state,
        key,
        continuing: None,
    })
}

/// The state directory and audit key, creating both when there is no state
/// directory yet (as `reprise init` would), and migrating one of an older
/// layout (as `reprise init` would, saying so). An existing one must be
/// signed by the key and its audit chain and ledger must be whole: a run
/// refuses to start on a torn or broken chain (exit 2, nothing written),
/// naming the fix.
pub(crate) fn open_or_create_state(settings: &Settings) -> Result<(StateDir, KeyFile), CliError> {
    let key_path = settings.key_path()?;
    let found = match settings.open_state() {
        Err(StoreError::OldLayout { .. }) => {
            let root = match &settings.state_dir {
                Some(dir) => dir.clone(),
                None => discover_root(&settings.cwd).unwrap_or_else(|| settings.init_target()),
            };
            let key = load_key(key_path)?;
            check_key_binding_at(&root, &key).map_err(|err| settings.binding_error(err))?;
            if let Some(migration) = migrate_state_dir(&root, &key, &now_rfc3339())? {
                let mut stderr = std::io::stderr().lock();
                let _ = write!(
                    stderr,
                    "{}",
                    crate::commands::init::migration_line(&migration)
                );
            }
            Ok(StateDir::open(&root)?)
        }
        other => other.map_err(CliError::from),
    };
    match found {
        Ok(_) => {
            let (state, key) = settings.keyed_state()?;
            preflight(&state, &key)?;
            Ok((state, key))
        }
        Err(_) if settings.state_dir.is_none() => {
            let key_existed = check_key(key_path)?;
            let key = load_or_create_key(key_path)?;
            if !key_existed {
                // A secret now exists that the user must keep: said once, on
                // stderr, so `--json` output stays one document.
                let mut stderr = std::io::stderr().lock();
                let _ = writeln!(
                    stderr,
                    "{}",
                    crate::commands::init::key_created_line(key_path)
                );
            }
            let creation = create_state_dir(
                &settings.init_target(),
                &key,
                &now_rfc3339(),
                crate::commands::init::creation_hook,
            )?;
            if let Some(aside) = &creation.superseded_witness {
                crate::commands::init::superseded_note(aside, creation.superseded_removed);
            }
            if !creation.created {
                // Another command created it meanwhile: it is checked as
                // any found one is.
                settings.check_binding(&creation.state, &key)?;
                preflight(&creation.state, &key)?;
            }
            Ok((creation.state, key))
        }
        Err(err) => Err(err),
    }
}

/// The nearest `.reprise` from `start`, as discovery finds it.
fn discover_root(start: &Path) -> Option<PathBuf> {
    start
        .ancestors()
        .map(|dir| dir.join(reprise_store::state::STATE_DIR_NAME))
        .find(|candidate| candidate.is_dir())
}

/// Refuses to run on an audit chain or ledger that is torn, broken, or does
/// not match its witness and seals (the engine's check; exit 2).
pub(crate) fn preflight(state: &StateDir, key: &KeyFile) -> Result<(), CliError> {
    reprise_engine::preflight::check_chains(state, key).map_err(preflight_error)
}

/// A refusal before a run is bad input (exit 2); an error reading the
/// chains keeps the store's own kind.
fn preflight_error(err: reprise_engine::EngineError) -> CliError {
    match err {
        reprise_engine::EngineError::Store(err) => err.into(),
        err => CliError::from_source(crate::error::ErrorKind::Usage, err),
    }
}

/// Runs a prepared plan to its end, printing events unless `--json`.
pub(crate) fn execute(
    settings: &Settings,
    prepared: Prepared,
    run_id: String,
    seats: Option<u32>,
    agent_setup: BTreeMap<TaskId, AgentSetup>,
    worktrees: WorktreeOptions,
) -> Result<RunState, CliError> {
    let Prepared {
        plan,
        plan_path,
        prior,
        retry_budget,
        state,
        key,
        continuing,
    } = prepared;
    let supervisor = supervisor(settings)?;
    let project = state
        .root()
        .parent()
        .map_or_else(|| settings.cwd.clone(), Path::to_path_buf);
    // Another live run of the same tasks: refused before anything is written.
    let _held = lock_tasks(&state, &plan, prior.as_ref(), &run_id)
        .map_err(|err| CliError::usage(err.to_string()))?;
    let cancel = CancelToken::new();
    watch_stop_signals(&cancel)?;
    // Orphans among the agents' descendants come to reprise, not init: a
    // supervisor that dies before its sweep leaves nothing behind.
    let _ = reprise_agents::supervise::become_subreaper();
    let options = RunOptions {
        run_id,
        plan_path,
        project,
        seats,
        retry_of: prior,
        retry_budget,
        agent_setup,
        key,
        include_uncommitted: worktrees.include_uncommitted,
        supervisor: Some(supervisor),
        continuing,
        keep_worktrees: worktrees.keep_worktrees,
    };
    let rehearsal = is_rehearsal(&state, &options.run_id);
    let fleet = match &worktrees.fleet {
        Some(target) => {
            let fleet = fleet_of(target, &plan, &options)?;
            crate::commands::fleet::record_fleet_run(&state, &options.run_id, target)?;
            Some(fleet)
        }
        None => None,
    };
    let go = |sink: &mut dyn reprise_engine::EventSink| match &fleet {
        Some((transport, text, target)) => reprise_engine::run_plan_on_fleet(
            &state,
            &plan,
            options,
            &cancel,
            sink,
            &reprise_engine::Fleet {
                transport,
                remote: Some(target.remote.clone()),
                plan_text: text.clone(),
            },
        ),
        None => run_plan(&state, &plan, options, &cancel, sink),
    };
    let ran = if settings.events {
        go(&mut EventStream)
    } else if settings.json {
        go(&mut Quiet)
    } else {
        go(
            &mut crate::commands::progress::Progress::new(settings.display)
                .for_rehearsal(rehearsal),
        )
    };
    reprise_agents::supervise::reap_adopted();
    if let (Ok(_), Some((transport, ..))) = (&ran, &fleet) {
        transport.prune_taken();
    }
    ran.map_err(|err| CliError::from_source(crate::error::ErrorKind::Failed, err))
}

/// The transport to a fleet's workers for this run, the plan's text they
/// parse, and where they are.
fn fleet_of(
    target: &FleetTarget,
    plan: &Plan,
    options: &RunOptions,
) -> Result<(PgTransport, String, FleetTarget), CliError> {
    let text = std::fs::read_to_string(&options.plan_path).map_err(|err| {
        CliError::usage(format!(
            "cannot read the plan {} to send it to the fleet: {err}",
            options.plan_path.display()
        ))
    })?;
    // The workers parse this text; it must be the plan this process runs
    // (the file could have been edited since it was read).
    let name = options.plan_path.display().to_string();
    let same = reprise_core::plan::parse_plan(&text, &name)
        .is_ok_and(|read| format!("{read:?}") == format!("{plan:?}"));
    if !same {
        return Err(CliError::usage(format!(
            "{name} changed while the run was starting: run it again"
        )));
    }
    let client =
        reprise_fleet::FleetClient::connect(&target.url, reprise_fleet::Timings::default())
            .map_err(crate::commands::fleet::fleet_error)?;
    let spec = reprise_fleet::RunSpec {
        run_id: options.run_id.clone(),
        plan_id: plan.id().to_string(),
        coordinator_host: crate::commands::worker::host_name(),
        remote: target.remote.clone(),
    };
    Ok((PgTransport::new(client, spec), text, target.clone()))
}

/// The signal that stopped the run (SIGINT, SIGTERM or SIGHUP), 0 if none.
static STOPPED_BY: AtomicI32 = AtomicI32::new(0);

/// The signal that stopped this run, if one did: the process then exits
/// with 128 + its number (130, 143, 129).
pub(crate) fn stopped_by() -> Option<i32> {
    match STOPPED_BY.load(Ordering::SeqCst) {
        0 => None,
        signal => Some(signal),
    }
}

/// Notes that a stop signal ended this command (`reprise watch`), for its
/// exit code.
pub(crate) fn note_stop_signal(signal: i32) {
    STOPPED_BY.store(signal, Ordering::SeqCst);
}

/// SIGINT, SIGTERM and SIGHUP all stop a run the same way: every task is
/// cancelled, its agents and gates are killed and reaped, journals sealed
/// and the run state written. A second signal while that happens does
/// nothing more.
fn watch_stop_signals(cancel: &CancelToken) -> Result<(), CliError> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])
        .map_err(|err| CliError::usage(format!("cannot watch for stop signals: {err}")))?;
    let token = cancel.clone();
    std::thread::spawn(move || {
        for signal in signals.forever() {
            let _ = STOPPED_BY.compare_exchange(0, signal, Ordering::SeqCst, Ordering::SeqCst);
            token.cancel();
        }
    });
    Ok(())
}

/// Whether this kernel enforces Landlock. Debug builds let tests pretend it
/// does not (`REPRISE_TEST_NO_LANDLOCK=1`).
pub(crate) fn landlock_available() -> bool {
    if cfg!(debug_assertions) && std::env::var_os("REPRISE_TEST_NO_LANDLOCK").is_some() {
        return false;
    }
    reprise_agents::supervise::landlock_available()
}

/// Whether Landlock holds TCP connections here. Debug builds let tests
/// pretend it does not (`REPRISE_TEST_NO_LANDLOCK_NETWORK=1`).
pub(crate) fn landlock_network_available() -> bool {
    if cfg!(debug_assertions) && std::env::var_os("REPRISE_TEST_NO_LANDLOCK_NETWORK").is_some() {
        return false;
    }
    reprise_agents::supervise::landlock_network_available()
}

/// Whether attempts can have namespaces of their own here, asked of the
/// supervisor once per process. Debug builds let tests pretend they cannot
/// (`REPRISE_TEST_NO_NAMESPACES=1`).
pub(crate) fn namespaces_available(supervisor: &Path) -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if cfg!(debug_assertions) && std::env::var_os("REPRISE_TEST_NO_NAMESPACES").is_some() {
        return false;
    }
    *AVAILABLE.get_or_init(|| reprise_agents::supervise::namespaces_available(supervisor))
}

/// How this run supervises its agents: through the small
/// `reprise-supervisor` binary installed beside this one. Debug builds let
/// tests turn the parent-death signal off (`REPRISE_TEST_NO_PARENT_DEATH=1`)
/// to show the records alone clean up.
pub(crate) fn supervisor(settings: &Settings) -> Result<Supervisor, CliError> {
    let program = supervisor_program().map_err(CliError::failed)?;
    let namespaces = namespaces_available(&program);
    Ok(Supervisor {
        program,
        key_path: settings.key_path().ok().map(Path::to_path_buf),
        landlock: landlock_available(),
        landlock_network: landlock_network_available(),
        namespaces,
        parent_death: !(cfg!(debug_assertions)
            && std::env::var_os("REPRISE_TEST_NO_PARENT_DEATH").is_some()),
    })
}

/// `reprise-supervisor` in this binary's directory, or why it is not there.
fn supervisor_program() -> Result<PathBuf, String> {
    let me = std::env::current_exe()
        .map_err(|err| format!("cannot tell where the reprise binary is ({err}), so cannot find reprise-supervisor beside it; nothing was run"))?;
    let program = me.with_file_name(reprise_agents::supervise::SUPERVISOR_BINARY);
    if program.is_file() {
        Ok(program)
    } else {
        Err(format!(
            "cannot find {} beside {}: it starts every agent and gate; nothing was run: install both binaries with `cargo install --locked --path crates/reprise-cli`",
            program.display(),
            me.display()
        ))
    }
}

/// Refuses, before anything is written, a plan with a task that requires
/// containment on a kernel without Landlock.
fn check_containment(plan: &Plan) -> Result<(), CliError> {
    let walls = reprise_engine::preflight::Walls {
        landlock: landlock_available(),
        // Without the supervisor there are no namespaces; the run stops on
        // the missing supervisor itself, with its own message.
        namespaces: supervisor_program().is_ok_and(|program| namespaces_available(&program)),
    };
    reprise_engine::preflight::check_containment(plan, walls).map_err(preflight_error)
}

/// `{"run_id","ok","tasks":[{"task_id","state","attempts":[{"n","mode","session_id","outcome","judged"}]}]}`
pub(crate) fn run_json(run: &RunState) -> Value {
    let mut json = json!({
        "run_id": run.run_id,
        "ok": run.ok == Some(true),
        "plan": run.plan,
        "plan_name": run.plan_name,
        "workspace": run.workspace,
        "tasks": run.tasks.iter().map(|task| json!({
            "task_id": task.task_id.as_str(),
            "state": task.state,
            "waiting": task.waiting,
            "reason": task.reason,
            "base_commit": task.base_commit,
            "cwd": task.cwd,
            "result": task.output,
            "gaps": task.gaps,
            "attempts": task.attempts.iter().map(|attempt| json!({
                "n": attempt.n,
                "mode": attempt.mode,
                "session_id": attempt.session_id,
                "outcome": attempt.outcome,
                "judged": attempt.judged,
                "infra_kind": attempt.infra_kind,
                "cost_micro_usd": attempt.cost_micro_usd,
                "gates": attempt.gates,
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    });
    // What each task and the run spent, unknown costs kept apart.
    if let Some(tasks) = json["tasks"].as_array_mut() {
        for (shown, task) in tasks.iter_mut().zip(&run.tasks) {
            if let Some(shown) = shown.as_object_mut() {
                insert_spend(shown, task.spend());
            }
        }
    }
    if let Some(shown) = json.as_object_mut() {
        insert_spend(shown, run.spend());
    }
    json
}

/// The run's one-word verdict: `ok`, `cancelled` (a stop signal or Ctrl-C
/// ended it: not a failure of the work), or `FAILED`.
fn run_verdict(run: &RunState) -> &'static str {
    if run.ok == Some(true) {
        "ok"
    } else if run
        .tasks
        .iter()
        .any(|task| task.state == reprise_engine::TaskStatus::Suspended)
    {
        "PARKED"
    } else if stopped_by().is_some() || run.cancelled() {
        "cancelled"
    } else {
        "FAILED"
    }
}

/// The run's summary; `continue_with` is the command that takes it up,
/// named as the next step when a stop cancelled it.
pub(crate) fn summary_text(run: &RunState, continue_with: &str) -> String {
    summary_priced(run, continue_with, None)
}

/// The summary; for a rehearsal (`priced`), what it would have cost in
/// place of what was spent: nothing was.
/// `retried warm; predicted warm 5.0k, cold 51.0k input-token equivalents`:
/// a task's last retry and what every mode was predicted to cost, when its
/// decision recorded the prediction.
pub(crate) fn retry_prediction(
    metadata: &std::collections::BTreeMap<String, Value>,
) -> Option<String> {
    let mode = metadata.get("retry_mode").and_then(Value::as_str)?;
    let predicted = metadata.get("retry_predicted").and_then(Value::as_str)?;
    Some(format!("retried {mode}; predicted {predicted}"))
}

pub(crate) fn summary_priced(
    run: &RunState,
    continue_with: &str,
    priced: Option<&Priced<'_>>,
) -> String {
    let passed = run
        .tasks
        .iter()
        .filter(|task| task.state.delivered())
        .count();
    let spent = match priced {
        Some(priced) => format!("nothing spent: a rehearsal; {}", priced.would_cost_text()),
        None => format!("spent {}", spend_text(run.spend())),
    };
    let mut text = format!(
        "run {}: {} ({passed} of {} passed, {spent})\n",
        run.run_id,
        run_verdict(run),
        count(run.tasks.len() as u64, "task"),
    );
    waiting_lines(run, &mut text);
    task_table(run, priced, &mut text);
    let results = result_lines(run, &mut text);
    next_lines(run, continue_with, results, &mut text);
    text
}

/// The tasks that wait: parked ones first, with what wakes each, then
/// blocked ones, which need a person.
fn waiting_lines(run: &RunState, text: &mut String) {
    for task in run
        .tasks
        .iter()
        .filter(|task| task.state == reprise_engine::TaskStatus::Suspended)
    {
        let id = task.task_id.as_str();
        let wake = match task.wake {
            // The resume is refused until the approval is written.
            Some(reprise_store::suspension::Wake::Approval) => {
                format!("reprise approve {id}, then reprise task resume {id}")
            }
            _ => format!("reprise task resume {id}"),
        };
        let _ = writeln!(
            text,
            "  PARKED  {:<12} {}; wake it: {wake}",
            id,
            task.reason.as_deref().unwrap_or("parked"),
        );
    }
    // Blocked tasks next: they need a person.
    for task in run
        .tasks
        .iter()
        .filter(|task| task.state == reprise_engine::TaskStatus::Blocked)
    {
        let _ = writeln!(
            text,
            "  BLOCKED {:<12} {}",
            task.task_id.as_str(),
            task.reason.as_deref().unwrap_or("")
        );
    }
}

/// One row per task: its result, its attempts' modes, time and spend; then
/// what each task's last retry was predicted to cost in every mode.
fn task_table(run: &RunState, priced: Option<&Priced<'_>>, text: &mut String) {
    // One row per task: its result, its attempts' modes, time and spend.
    let _ = writeln!(
        text,
        "  {:<20} {:<9} {:<20} {:>7} {:>9}",
        "task",
        "result",
        "attempts",
        "time",
        if priced.is_some() {
            "would cost"
        } else {
            "cost"
        }
    );
    for task in &run.tasks {
        let modes: Vec<&str> = task.attempts.iter().map(|a| a.mode.as_str()).collect();
        let ms: u64 = task.attempts.iter().map(|a| a.elapsed_ms).sum();
        let _ = writeln!(
            text,
            "  {:<20} {:<9} {:<20} {:>7} {:>9}",
            task.task_id.as_str(),
            task.state.as_str(),
            if modes.is_empty() {
                "-".to_owned()
            } else {
                modes.join(", ")
            },
            crate::output::seconds(ms).trim_start(),
            match priced {
                Some(priced) => cost_text(priced.task_micro_usd(task.task_id.as_str())),
                None => spend_text(task.spend()),
            }
        );
    }
    // What each task's last retry was predicted to cost in every mode, when
    // its agent's session and caching were known.
    for task in &run.tasks {
        if let Some(line) = retry_prediction(&task.metadata) {
            let _ = writeln!(text, "  {:<20} {line}", task.task_id.as_str());
        }
    }
}

/// Each task's result: its branch and files changed, no changes, or its
/// state. Returns how many tasks left a result branch.
fn result_lines(run: &RunState, text: &mut String) -> usize {
    let mut results = 0;
    for task in &run.tasks {
        match (&task.output, task.state) {
            (Some(output), state) if state.delivered() => match &output.branch {
                Some(branch) => {
                    results += 1;
                    let partial = if state == reprise_engine::TaskStatus::Partial {
                        format!(" (partial: gaps {})", task.gaps.join(", "))
                    } else {
                        String::new()
                    };
                    let _ = writeln!(
                        text,
                        "  {:<20} {branch}  {} file{} changed{partial}",
                        task.task_id.as_str(),
                        output.files_changed,
                        plural(output.files_changed)
                    );
                }
                None => {
                    let _ = writeln!(text, "  {:<20} no changes", task.task_id.as_str());
                }
            },
            (_, reprise_engine::TaskStatus::Blocked) => {}
            _ => {
                let _ = writeln!(
                    text,
                    "  {:<20} {}",
                    task.task_id.as_str(),
                    task.state.as_str()
                );
            }
        }
    }
    results
}

/// What to do next: see and apply the results, and the commands for the
/// task that needs looking at.
fn next_lines(run: &RunState, continue_with: &str, results: usize, text: &mut String) {
    // The hint names the task that needs looking at: the first blocked or
    // failed one, else the first.
    let failed = run.tasks.iter().find(|task| {
        matches!(
            task.state,
            reprise_engine::TaskStatus::Blocked | reprise_engine::TaskStatus::Failed
        )
    });
    let first = failed
        .or(run.tasks.first())
        .map(|task| task.task_id.as_str())
        .unwrap_or("TASK");
    if results > 0 {
        let _ = writeln!(text, "see the results: `reprise diff {}`", run.run_id);
        let _ = writeln!(text, "apply them:      `reprise apply {}`", run.run_id);
    }
    if run.cancelled() {
        let _ = writeln!(
            text,
            "next: `{continue_with}` (takes the cancelled tasks up where they stopped)"
        );
    } else if failed.is_some_and(|task| task.base_commit.is_some()) {
        // A failed task in a worktree kept the tree its last attempt left.
        let _ = writeln!(
            text,
            "next: `reprise logs {first}` (what its attempts printed); `reprise diff {run} {first}` (the work its failed attempt left, kept), then `reprise checkpoint restore {first} ID --run {run}` with the id it names, to get that work back",
            run = run.run_id,
        );
    } else if failed.is_some() {
        let _ = writeln!(
            text,
            "next: `reprise logs {first}` (what its attempts printed), `reprise journal show {first}`"
        );
    } else {
        let _ = writeln!(
            text,
            "next: `reprise status`, `reprise journal verify {first}`, `reprise lineage show {first}`"
        );
    }
}
