//! The coordinator: schedules a plan's tasks in dependency order onto seats,
//! reserves each task's budget envelope from the run's pool (returning the
//! unspent headroom when it ends), runs each task on its own thread, and
//! keeps `runs/<run>/state.json` current.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc;

use reprise_agents::{
    Adapter, CancelToken, ClaudeAdapter, CliOptions, CodexAdapter, CommandAdapter, GeminiAdapter,
    SimAdapter, SimStep,
};
use reprise_core::plan::{AgentKind, Plan, Task, TaskAgent};
use reprise_core::{TaskId, TaskKey};
use reprise_store::audit::{AuditLog, read_audit, seal_ledger};
use reprise_store::ledger::Ledger;
use reprise_store::locks::{HeldLock, Holder, try_task_lock};
use reprise_store::replies::{drop_kept_reply, read_kept_reply};
use reprise_store::state::{StateDir, now_rfc3339};

use crate::error::{EngineError, Result};
use crate::events::{Event, EventSink, Message};
use crate::pool::SharedPool;
use crate::sandbox::{TaskBase, Workspace, dependent_base};
use crate::state::{RunState, TaskRecord, TaskStatus};
use crate::task::{Previous, TaskResult, TaskRun};

/// What a run needs besides the plan.
#[derive(Debug)]
pub struct RunOptions {
    pub run_id: String,
    /// The plan file, as given (recorded in the run state).
    pub plan_path: PathBuf,
    /// The project the tasks work on: the sandboxes' origin.
    pub project: PathBuf,
    /// Overrides the plan's `seats`.
    pub seats: Option<u32>,
    /// For `--retry-failed`: the finished run whose failed tasks this leg
    /// re-runs (its passed tasks are carried over as passed).
    pub retry_of: Option<RunState>,
    /// The validated retry budget (`resolve_budget`), if the run has one.
    pub retry_budget: Option<reprise_core::budget::BudgetSpec>,
    /// What each task's agent process gets besides the plan's settings;
    /// tasks not named get nothing extra.
    pub agent_setup: BTreeMap<TaskId, AgentSetup>,
    pub key: reprise_store::key::KeyFile,
    /// Snapshot the project's uncommitted changes into the run's base.
    pub include_uncommitted: bool,
    /// How agent and gate processes are supervised and contained; `None`
    /// starts them directly (library tests that have no reprise binary).
    pub supervisor: Option<Supervisor>,
}

/// What the engine needs to supervise and contain each attempt's processes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Supervisor {
    /// The reprise binary, which runs the hidden supervisor subcommands.
    pub program: PathBuf,
    /// The audit key: its directory is hidden from every contained process.
    pub key_path: Option<PathBuf>,
    /// Whether the kernel enforces Landlock (probed once by the caller).
    pub landlock: bool,
    /// Whether children get a parent-death signal.
    pub parent_death: bool,
}

/// Extra environment and a config home for one task's agent process, as
/// `reprise rehearse` sets them to point a CLI at its model server. The
/// environment is the child's only; the config home is the CLI's
/// (`CLAUDE_CONFIG_DIR`, `CODEX_HOME`, `GEMINI_CLI_HOME`) and is where the
/// engine looks for the CLI's transcripts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentSetup {
    pub env: Vec<(String, String)>,
    pub config_home: Option<PathBuf>,
}

/// A new run id: `R-` and a ULID, so ids sort by start time.
pub fn new_run_id() -> String {
    format!("R-{}", ulid::Ulid::new())
}

/// Reads and validates a plan file. Nothing is written.
pub fn load_plan(path: &Path) -> Result<Plan> {
    let text = std::fs::read_to_string(path).map_err(|source| EngineError::ReadPlan {
        path: path.to_path_buf(),
        source,
    })?;
    let name = path.display().to_string();
    Ok(reprise_core::plan::parse_plan(&text, &name)?)
}

/// The tasks a run of `plan` will run: all of them, or for a new leg of
/// `prior`, those that did not pass there.
fn tasks_to_run<'p>(plan: &'p Plan, prior: Option<&RunState>) -> Vec<&'p Task> {
    plan.tasks()
        .iter()
        .filter(|task| {
            prior
                .and_then(|prior| prior.task(&task.id))
                .is_none_or(|before| !before.state.delivered())
        })
        .collect()
}

/// Takes the lock of every task the run will run, for the run's whole life:
/// a second run that would run one of them at the same time is refused
/// (`TaskBusy`, naming the run and pid that hold it) before it writes
/// anything. Other plans, and other tasks of the same plan, are not held.
pub fn lock_tasks(
    state: &StateDir,
    plan: &Plan,
    prior: Option<&RunState>,
    run_id: &str,
) -> Result<Vec<HeldLock>> {
    let holder = Holder {
        run_id: run_id.to_owned(),
        pid: std::process::id(),
    };
    let mut held = Vec::new();
    for task in tasks_to_run(plan, prior) {
        let key = TaskKey::new(plan.id().clone(), task.id.clone());
        match try_task_lock(state, &key, &holder)? {
            Ok(lock) => held.push(lock),
            Err(other) => {
                return Err(EngineError::TaskBusy {
                    task: key.to_string(),
                    run: other.run_id,
                    pid: other.pid,
                });
            }
        }
    }
    Ok(held)
}

/// The binary a plan names for an adapter (`agents: {claude: {bin: ...}}`);
/// otherwise the adapter looks at `REPRISE_<NAME>_BIN`, then PATH.
fn bin_for(plan: &Plan, kind: AgentKind) -> Option<PathBuf> {
    plan.agent_settings(kind)
        .and_then(|settings| settings.bin.clone())
        .map(PathBuf::from)
}

fn adapter_for(task: &Task, plan: &Plan, state: &StateDir) -> Arc<dyn Adapter> {
    match &task.agent {
        TaskAgent::Command { argv } => Arc::new(CommandAdapter::new(argv.clone())),
        TaskAgent::Sim { script } => {
            let steps = script
                .iter()
                .map(|step| SimStep {
                    reply: step.reply.clone(),
                    write: step
                        .write
                        .iter()
                        .map(|(path, text)| (path.clone(), text.clone()))
                        .collect(),
                    exit_code: i32::from(step.exit_code),
                    cost_micro_usd: step.cost_micro_usd,
                    delay: step.delay,
                })
                .collect();
            Arc::new(SimAdapter::new(steps, state.sim_store()))
        }
        TaskAgent::Claude => Arc::new(
            ClaudeAdapter::with_allowed_tools(
                plan.agent_settings(AgentKind::Claude)
                    .map(|settings| settings.allowed_tools.clone())
                    .unwrap_or_default(),
            )
            .with_options(cli_options(plan, AgentKind::Claude)),
        ),
        TaskAgent::Codex => {
            Arc::new(CodexAdapter::new().with_options(cli_options(plan, AgentKind::Codex)))
        }
        TaskAgent::Gemini => {
            Arc::new(GeminiAdapter::new().with_options(cli_options(plan, AgentKind::Gemini)))
        }
    }
}

/// The plan's `agents.<cli>.model`, `.args` and `.env` for an adapter.
fn cli_options(plan: &Plan, kind: AgentKind) -> CliOptions {
    plan.agent_settings(kind)
        .map(|settings| CliOptions {
            model: settings.model.clone(),
            args: settings.args.clone(),
            env: settings
                .env
                .iter()
                .map(|(name, value)| (name.clone(), value.clone()))
                .collect(),
        })
        .unwrap_or_default()
}

/// Runs `plan` to the end (or until `cancel`), reporting to `sink`.
pub fn run_plan(
    state: &StateDir,
    plan: &Plan,
    options: RunOptions,
    cancel: &CancelToken,
    sink: &mut dyn EventSink,
) -> Result<RunState> {
    let seats = options.seats.unwrap_or(plan.seats()).max(1) as usize;
    let order: Vec<&Task> = plan.dependency_order();
    let adapters: BTreeMap<TaskId, Arc<dyn Adapter>> = order
        .iter()
        .map(|task| (task.id.clone(), adapter_for(task, plan, state)))
        .collect();
    let workspace = Workspace::detect(state, &options.project, options.include_uncommitted)?;
    let mut run = RunState {
        v: 1,
        workspace: Some(workspace.clone()),
        run_id: options.run_id.clone(),
        plan: options.plan_path.display().to_string(),
        plan_name: plan.name().to_owned(),
        started_at: now_rfc3339(),
        finished_at: None,
        ok: None,
        retry_of: options.retry_of.as_ref().map(|prior| prior.run_id.clone()),
        tasks: order
            .iter()
            .map(|task| TaskRecord {
                task_id: task.id.clone(),
                state: TaskStatus::Queued,
                agent: task.agent.kind().as_str().to_owned(),
                attempts: Vec::new(),
                spent_micro_usd: 0,
                judged: false,
                reason: None,
                metadata: BTreeMap::new(),
                gaps: Vec::new(),
                base_commit: None,
                cwd: None,
                output: None,
            })
            .collect(),
    };
    // A new leg of a finished run: what passed stays passed; what failed
    // runs again, a judged task hearing its kept reply once.
    let mut carried: BTreeMap<TaskId, Previous> = BTreeMap::new();
    let mut warnings = Vec::new();
    if let Some(prior) = &options.retry_of {
        for record in &mut run.tasks {
            let Some(before) = prior.task(&record.task_id) else {
                continue;
            };
            if before.state.delivered() {
                record.state = before.state;
                record.reason = Some(format!("{} in {}", before.state.as_str(), prior.run_id));
                record.gaps.clone_from(&before.gaps);
                // Its result, committed in that run, is what dependents
                // build on in this one.
                record.base_commit.clone_from(&before.base_commit);
                record.output.clone_from(&before.output);
                record.cwd.clone_from(&before.cwd);
                continue;
            }
            if before.judged {
                match read_kept_reply(state, &prior.run_id, &record.task_id) {
                    Ok(Some(reply)) => {
                        carried.insert(record.task_id.clone(), Previous::carried(reply));
                    }
                    Ok(None) => warnings.push((
                        record.task_id.clone(),
                        format!(
                            "no kept reply in {}: re-running without a quote",
                            prior.run_id
                        ),
                    )),
                    Err(err) => warnings.push((
                        record.task_id.clone(),
                        format!("kept reply unreadable ({err}): re-running without a quote"),
                    )),
                }
            }
        }
    }
    // Where each task's record is: `run.tasks` follows `order`.
    let position: BTreeMap<&TaskId, usize> = order
        .iter()
        .enumerate()
        .map(|(index, task)| (&task.id, index))
        .collect();
    run.save(state, false)?;
    let mut saver = Saver {
        last: std::time::Instant::now(),
    };
    sink.event(&Event::RunStarted {
        run_id: run.run_id.clone(),
        plan_name: run.plan_name.clone(),
        tasks: order.len(),
        seats: seats as u32,
    });
    sink.event(&Event::Workspace {
        workspace: workspace.clone(),
    });
    if let Some(supervisor) = &options.supervisor
        && !supervisor.landlock
        && order.iter().any(|task| task.containment.confines())
    {
        sink.event(&Event::Warning {
            task: None,
            message: "this kernel has no Landlock: agents and gates run NOT contained (they can read the audit key and write anywhere you can); set containment: required to refuse such runs".to_owned(),
        });
    }
    for (task, message) in warnings {
        sink.event(&Event::Warning {
            task: Some(task),
            message,
        });
    }

    // The audit chain is read once per run: each task's seal must respect the
    // seals its journal already has, and reading the chain per task would
    // make every task cost more than the one before.
    let audit = read_audit(state, &options.key)?;
    // The coordinator's own handle on the audit chain: it seals the ledger's
    // head at each task's terminal transition and at the run's end.
    let mut ledger_audit = AuditLog::open(state, options.key.clone())?;
    let criteria = crate::budget::plan_criteria(plan);
    let budget = options
        .retry_budget
        .as_ref()
        .map(|spec| (spec, criteria.as_slice()));
    let mut ledger = Ledger::open(state)?;
    ledger.run_started(&now_rfc3339(), &run.run_id, plan.id(), workspace.base())?;
    let pool = SharedPool::new(plan.budget_micro_usd());
    let mut envelopes: BTreeMap<TaskId, Option<u64>> = BTreeMap::new();
    let (sender, receiver) = mpsc::channel::<Message>();
    std::thread::scope(|scope| -> Result<()> {
        let mut running = 0usize;
        loop {
            // Settle what can be settled without running anything.
            for task in &order {
                if run.tasks[position[&task.id]].state != TaskStatus::Queued {
                    continue;
                }
                let failed_dependency = task.depends_on.iter().find(|dependency| {
                    let status = run.tasks[position[dependency]].state;
                    status.is_terminal() && !status.delivered()
                });
                let reason = if let Some(dependency) = failed_dependency {
                    let status = run.tasks[position[dependency]].state;
                    Some(if status == TaskStatus::Blocked {
                        format!("dependency {dependency} blocked")
                    } else {
                        format!("dependency {dependency} did not pass")
                    })
                } else if cancel.is_cancelled() {
                    Some("cancelled before it started".to_owned())
                } else {
                    None
                };
                if let Some(reason) = reason {
                    block_queued(
                        &mut ledger,
                        &mut ledger_audit,
                        &mut run,
                        sink,
                        &task.id,
                        reason,
                    )?;
                }
            }
            // Start what may start.
            for task in &order {
                if running >= seats {
                    break;
                }
                if run.tasks[position[&task.id]].state != TaskStatus::Queued
                    || !task
                        .depends_on
                        .iter()
                        .all(|dependency| run.tasks[position[dependency]].state.delivered())
                {
                    continue;
                }
                // Its base: the run's, or its dependencies' results merged.
                let base = match task_base(&workspace, &run, &position, task)? {
                    Ok(base) => base,
                    Err(reason) => {
                        block_queued(
                            &mut ledger,
                            &mut ledger_audit,
                            &mut run,
                            sink,
                            &task.id,
                            reason,
                        )?;
                        continue;
                    }
                };
                let envelope = match pool.reserve(task) {
                    Ok(Some(envelope)) => envelope,
                    Ok(None) => continue,
                    Err(reason) => {
                        block_queued(
                            &mut ledger,
                            &mut ledger_audit,
                            &mut run,
                            sink,
                            &task.id,
                            reason,
                        )?;
                        continue;
                    }
                };
                envelopes.insert(task.id.clone(), envelope);
                run.tasks[position[&task.id]].state = TaskStatus::Running;
                ledger.transition(
                    &now_rfc3339(),
                    &run.run_id,
                    &task.id,
                    "queued",
                    "running",
                    None,
                )?;
                saver.maybe_save(&run, state)?;
                running += 1;
                let sender = sender.clone();
                run.tasks[position[&task.id]].base_commit.clone_from(&base);
                let prior_seals = audit.seals_of(&TaskKey::new(plan.id().clone(), task.id.clone()));
                let workspace = &workspace;
                let carried_reply = carried.get(&task.id).cloned();
                let adapter = Arc::clone(&adapters[&task.id]);
                let key = options.key.clone();
                let setup = options
                    .agent_setup
                    .get(&task.id)
                    .cloned()
                    .unwrap_or_default();
                let project = options.project.as_path();
                let run_id = options.run_id.as_str();
                let supervisor = options.supervisor.as_ref();
                let pool = &pool;
                scope.spawn(move || {
                    let result = TaskRun {
                        state,
                        key,
                        run_id,
                        plan: plan.id(),
                        task,
                        workspace,
                        base,
                        adapter: adapter.as_ref(),
                        project,
                        envelope_micro_usd: envelope,
                        pool,
                        bin: bin_for(plan, task.agent.kind()),
                        setup,
                        prior_seals,
                        budget,
                        carried: carried_reply,
                        cancel,
                        supervisor,
                        events: sender.clone(),
                    }
                    .execute();
                    let _ = sender.send(Message::Done(task.id.clone(), result));
                });
            }
            if running == 0 {
                break;
            }
            match receiver.recv().expect("a running task holds a sender") {
                Message::Event(event) => sink.event(&event),
                Message::Done(id, result) => {
                    running -= 1;
                    pool.settle(
                        envelopes.get(&id).copied().flatten(),
                        result.spent_micro_usd,
                    );
                    apply(&mut run, &id, &result);
                    if let (Some(prior), TaskStatus::Passed) = (&options.retry_of, result.status) {
                        // A pass also retires the earlier leg's kept reply.
                        let _ = drop_kept_reply(state, &prior.run_id, &id);
                    }
                    let head = ledger.transition(
                        &now_rfc3339(),
                        &run.run_id,
                        &id,
                        "running",
                        result.status.as_str(),
                        result.reason.as_deref(),
                    )?;
                    seal_ledger(&mut ledger_audit, head, &now_rfc3339())?;
                    finish(&mut run, sink, &id, result.status, result.reason.clone());
                    saver.maybe_save(&run, state)?;
                }
            }
        }
        Ok(())
    })?;
    // Events sent after the last task ended are still worth showing.
    while let Ok(Message::Event(event)) = receiver.try_recv() {
        sink.event(&event);
    }
    run.finished_at = Some(now_rfc3339());
    run.ok = Some(run.tasks.iter().all(|task| task.state.delivered()));
    run.save(state, true)?;
    Ok(run)
}

/// Rewrites `state.json` at most every `SAVE_EVERY` while a run goes on: a
/// run of a thousand short tasks must not rewrite its whole snapshot a
/// thousand times. The last save of a run is always made, and synced.
struct Saver {
    last: std::time::Instant,
}

const SAVE_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

impl Saver {
    fn maybe_save(&mut self, run: &RunState, state: &StateDir) -> Result<()> {
        if self.last.elapsed() >= SAVE_EVERY {
            run.save(state, false)?;
            self.last = std::time::Instant::now();
        }
        Ok(())
    }
}

fn apply(run: &mut RunState, id: &TaskId, result: &TaskResult) {
    let record = run.task_mut(id);
    // Gate output lives only in memory, for the next prompt: the run state
    // holds verdicts, never what a gate printed.
    record.attempts = result
        .attempts
        .iter()
        .cloned()
        .map(|mut attempt| {
            for gate in &mut attempt.gates {
                gate.output.clear();
            }
            attempt
        })
        .collect();
    record.spent_micro_usd = result.spent_micro_usd;
    record.judged = result.judged;
    record.metadata = result.metadata.clone();
    record.cwd.clone_from(&result.cwd);
    record.output.clone_from(&result.output);
    record.gaps.clone_from(&result.gaps);
}

/// The commit `task` starts from: `Ok(None)` in place, the run's base, or
/// its dependencies' results merged; `Err(reason)` when those conflict.
fn task_base(
    workspace: &Workspace,
    run: &RunState,
    position: &BTreeMap<&TaskId, usize>,
    task: &Task,
) -> Result<std::result::Result<Option<String>, String>> {
    if !workspace.isolates(task) {
        return Ok(Ok(None));
    }
    let inputs: Vec<String> = task
        .depends_on
        .iter()
        .filter_map(|dependency| {
            run.tasks[position[dependency]]
                .output
                .as_ref()
                .map(|output| output.tip().to_owned())
        })
        .collect();
    Ok(match dependent_base(workspace, &task.id, &inputs)? {
        Some(TaskBase::Ready(commit)) => Ok(Some(commit)),
        Some(TaskBase::Conflict(files)) => Err(format!(
            "dependency_conflict: the results of {} conflict in {}",
            task.depends_on
                .iter()
                .map(TaskId::as_str)
                .collect::<Vec<_>>()
                .join(", "),
            files.join(", ")
        )),
        None => Ok(None),
    })
}

/// A queued task that will not run: the ledger moves it to blocked (and the
/// new head is sealed), then the run state and the sink hear of it.
fn block_queued(
    ledger: &mut Ledger,
    ledger_audit: &mut AuditLog,
    run: &mut RunState,
    sink: &mut dyn EventSink,
    task: &TaskId,
    reason: String,
) -> Result<()> {
    let head = ledger.transition(
        &now_rfc3339(),
        &run.run_id,
        task,
        "queued",
        "blocked",
        Some(&reason),
    )?;
    seal_ledger(ledger_audit, head, &now_rfc3339())?;
    finish(run, sink, task, TaskStatus::Blocked, Some(reason));
    Ok(())
}

fn finish(
    run: &mut RunState,
    sink: &mut dyn EventSink,
    id: &TaskId,
    status: TaskStatus,
    reason: Option<String>,
) {
    let record = run.task_mut(id);
    record.state = status;
    record.reason = reason.clone();
    sink.event(&Event::TaskFinished {
        task: id.clone(),
        status,
        reason,
    });
}
