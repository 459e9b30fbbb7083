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
use crate::park::Parked;
use crate::pool::SharedPool;
use crate::sandbox::{TaskBase, Workspace, dependent_base};
use crate::state::{RunState, TaskRecord, TaskStatus, WaitReason, Waiting};
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
    /// For `run --continue` and a resume with no live run: the run to take
    /// up again (its id is `run_id`).
    pub continuing: Option<Continuing>,
    /// Keep each task's worktree after the task ends (`--keep-worktrees`);
    /// by default a task whose result is committed (or that changed
    /// nothing) has its worktree removed and unregistered.
    pub keep_worktrees: bool,
}

/// A run taken up again in a new process: what its ledger says of each
/// task stands, a task that was running is taken up where its journal left
/// it, and the parks named here (each checked by [`crate::check_resume`])
/// are resumed. A park whose wake time has passed is resumed too; any other
/// park stays parked.
#[derive(Debug, Clone)]
pub struct Continuing {
    pub prior: RunState,
    pub resume: BTreeMap<TaskId, Resume>,
}

/// A checked park to resume, the mode asked for, and the approval's digest.
#[derive(Debug, Clone)]
pub struct Resume {
    pub point: crate::resume::ParkPoint,
    pub mode: Option<reprise_core::retry::RetryMode>,
    pub approval: Option<reprise_core::digest::Digest>,
}

/// What the engine needs to supervise and contain each attempt's processes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Supervisor {
    /// The supervisor binary (`reprise-supervisor`, beside `reprise`).
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
        TaskAgent::Command { argv } => Arc::new(
            CommandAdapter::new(argv.clone()).with_env(agent_env(plan, AgentKind::Command)),
        ),
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
            env: agent_env(plan, kind),
        })
        .unwrap_or_default()
}

/// The variables the plan gives one agent's process (never its gates):
/// what `agents.<kind>.pass_env` names, from reprise's environment, then
/// `agents.<kind>.env`, which wins.
fn agent_env(plan: &Plan, kind: AgentKind) -> Vec<(String, String)> {
    let Some(settings) = plan.agent_settings(kind) else {
        return Vec::new();
    };
    let mut env = reprise_agents::passed_env(&settings.pass_env);
    env.extend(
        settings
            .env
            .iter()
            .map(|(name, value)| (name.clone(), value.clone())),
    );
    env
}

/// The run's record before anything ran: every task queued, in
/// dependency order.
fn new_record(
    plan: &Plan,
    order: &[&Task],
    options: &RunOptions,
    workspace: &Workspace,
) -> RunState {
    RunState {
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
                waiting: None,
                wake: None,
            })
            .collect(),
    }
}

/// A new leg of finished run `prior`: its delivered tasks keep their state
/// and results in `run`; each judged one gets its kept reply to hear once.
/// Also the warnings for replies that could not be carried.
fn carry_prior(
    state: &StateDir,
    prior: &RunState,
    run: &mut RunState,
) -> (BTreeMap<TaskId, Previous>, Vec<(TaskId, String)>) {
    let mut carried = BTreeMap::new();
    let mut warnings = Vec::new();
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
    (carried, warnings)
}

/// The run's control socket, or a warning that parks and pauses cannot
/// reach this run.
fn bind_control(
    state: &StateDir,
    run_id: &str,
    sink: &mut dyn EventSink,
) -> Option<crate::control::ControlServer> {
    match crate::control::ControlServer::bind(&crate::control::socket_path(state, run_id)) {
        Ok(server) => Some(server),
        Err(err) => {
            sink.event(&Event::Warning {
                task: None,
                message: format!(
                    "no control socket ({err}): `reprise task suspend` cannot reach this run"
                ),
            });
            None
        }
    }
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
    // One adapter per agent CLI for the whole run, so its version cache
    // asks each binary `--version` once however many tasks start together.
    let mut cli_adapters: BTreeMap<AgentKind, Arc<dyn Adapter>> = BTreeMap::new();
    let adapters: BTreeMap<TaskId, Arc<dyn Adapter>> = order
        .iter()
        .map(|task| {
            let adapter = match &task.agent {
                TaskAgent::Claude | TaskAgent::Codex | TaskAgent::Gemini => Arc::clone(
                    cli_adapters
                        .entry(task.agent.kind())
                        .or_insert_with(|| adapter_for(task, plan, state)),
                ),
                TaskAgent::Command { .. } | TaskAgent::Sim { .. } => adapter_for(task, plan, state),
            };
            (task.id.clone(), adapter)
        })
        .collect();
    // A continued run works where it worked: its recorded workspace.
    let workspace = match options
        .continuing
        .as_ref()
        .and_then(|continuing| continuing.prior.workspace.clone())
    {
        Some(workspace) => workspace,
        None => Workspace::detect(state, &options.project, options.include_uncommitted)?,
    };
    // The audit chain is read once per run: each task's seal must respect the
    // seals its journal already has, and reading the chain per task would
    // make every task cost more than the one before.
    let audit = read_audit(state, &options.key)?;
    crate::sandbox::prune_stale(state, &workspace)?;
    let mut run = new_record(plan, &order, &options, &workspace);
    // A new leg of a finished run: what passed stays passed; what failed
    // runs again, a judged task hearing its kept reply once.
    let (carried, warnings) = match &options.retry_of {
        Some(prior) => carry_prior(state, prior, &mut run),
        None => (BTreeMap::new(), Vec::new()),
    };
    // Where each task's record is: `run.tasks` follows `order`.
    let position: BTreeMap<&TaskId, usize> = order
        .iter()
        .enumerate()
        .map(|(index, task)| (&task.id, index))
        .collect();
    let mut taken_up = match &options.continuing {
        Some(continuing) => take_up_run(state, plan, &audit, &mut run, continuing)?,
        None => TakenUpRun::default(),
    };
    run.save(state, false)?;
    let mut saver = Saver {
        last: std::time::Instant::now(),
        dirty: false,
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

    // The coordinator's own handle on the audit chain: it seals the ledger's
    // head at each task's terminal transition and at the run's end.
    let mut ledger_audit = AuditLog::open(state, options.key.clone())?;
    let criteria = crate::budget::plan_criteria(plan);
    let budget = options
        .retry_budget
        .as_ref()
        .map(|spec| (spec, criteria.as_slice()));
    let mut ledger = Ledger::open(state)?;
    if options.continuing.is_none() {
        ledger.run_started(&now_rfc3339(), &run.run_id, plan.id(), workspace.base())?;
    }
    for task in &taken_up.requeued {
        ledger.transition(
            &now_rfc3339(),
            &run.run_id,
            task,
            "cancelled",
            "queued",
            Some("taken up again by run --continue"),
        )?;
    }
    let pool = SharedPool::new(plan.budget_micro_usd());
    let mut envelopes: BTreeMap<TaskId, Option<u64>> = BTreeMap::new();
    let controls: BTreeMap<TaskId, crate::park::TaskControl> = order
        .iter()
        .map(|task| (task.id.clone(), crate::park::TaskControl::default()))
        .collect();
    let (sender, receiver) = mpsc::channel::<Message>();
    // The control socket: `reprise task suspend` reaches the run here.
    let server = bind_control(state, &options.run_id, sink);
    let serving = std::sync::atomic::AtomicBool::new(false);
    let plan_key = |task: &TaskId| TaskKey::new(plan.id().clone(), task.clone());
    std::thread::scope(|scope| -> Result<()> {
        if let Some(server) = &server {
            let to_coordinator = sender.clone();
            let serving = &serving;
            scope.spawn(move || server.serve(&to_coordinator, serving));
        }
        // The socket's thread ends when the run's loop does, however it ends.
        let _stop_serving = StopOnDrop(&serving);
        let mut running = 0usize;
        loop {
            // Settle what can be settled without running anything.
            for task in &order {
                if run.tasks[position[&task.id]].state != TaskStatus::Queued {
                    continue;
                }
                // A stop cancels what has not started: `run --continue`
                // starts it then.
                if cancel.is_cancelled() {
                    let head = ledger.transition(
                        &now_rfc3339(),
                        &run.run_id,
                        &task.id,
                        "queued",
                        "cancelled",
                        Some("cancelled before it started"),
                    )?;
                    seal_ledger(&mut ledger_audit, head, &now_rfc3339())?;
                    let reason = Some("cancelled before it started".to_owned());
                    finish(&mut run, sink, &task.id, TaskStatus::Cancelled, reason);
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
            // How many tasks drawing on the pool could hold a share this
            // round, set before any of them starts: the first to ask leaves
            // the others theirs.
            // (Counted only under a pool: without one nothing is shared.)
            if pool.free().is_some() {
                let seated = (seats, running);
                pool.set_contenders(contenders(&order, &run, &position, &adapters, seated));
            }
            // Start what may start; say why the rest waits.
            for task in &order {
                if run.tasks[position[&task.id]].state != TaskStatus::Queued {
                    continue;
                }
                if let Some(dependency) = task
                    .depends_on
                    .iter()
                    .find(|dependency| !run.tasks[position[dependency]].state.delivered())
                {
                    let detail = format!("dependency {dependency}");
                    wait(&mut run, sink, &task.id, WaitReason::Dependency, detail);
                    continue;
                }
                if running >= seats {
                    let detail = format!("a seat (all {seats} busy)");
                    wait(&mut run, sink, &task.id, WaitReason::Seat, detail);
                    continue;
                }
                let continuation = taken_up.continuations.remove(&task.id);
                // Its base: the run's, or its dependencies' results merged;
                // a task taken up again keeps the base it started from.
                let recorded = continuation
                    .as_ref()
                    .and_then(|(_, _, base)| base.clone())
                    .map(|base| Ok(Some(base)));
                let base = match recorded
                    .map_or_else(|| task_base(&workspace, &run, &position, task), Ok)?
                {
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
                let reserved = match continuation.as_ref() {
                    Some((crate::task::Continuation::Resume { point, .. }, _, _)) => Ok(pool
                        .reserve_left(
                            point
                                .body
                                .envelope
                                .reserved_micro_usd
                                .map(|_| point.body.envelope.headroom_micro_usd),
                        )),
                    _ => pool.reserve(task),
                };
                let envelope = match reserved {
                    Ok(Some(envelope)) => envelope,
                    Ok(None) => {
                        if let Some(continuation) = continuation {
                            taken_up.continuations.insert(task.id.clone(), continuation);
                        }
                        let detail = format!(
                            "headroom in the pool for its envelope (${} free)",
                            reprise_core::plan::format_micro_usd(pool.free().unwrap_or(0))
                        );
                        wait(&mut run, sink, &task.id, WaitReason::Budget, detail);
                        continue;
                    }
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
                run.tasks[position[&task.id]].waiting = None;
                let from = continuation.as_ref().map_or("queued", |(_, from, _)| *from);
                // A task interrupted while running is still running in the ledger.
                if from != "running" {
                    ledger.transition(
                        &now_rfc3339(),
                        &run.run_id,
                        &task.id,
                        from,
                        "running",
                        None,
                    )?;
                }
                let spent_before = match continuation.as_ref() {
                    Some((crate::task::Continuation::Resume { point, .. }, _, _)) => {
                        point.body.envelope.spent_micro_usd
                    }
                    _ => 0,
                };
                taken_up.spent_before.insert(task.id.clone(), spent_before);
                let continuation = continuation.map(|(continuation, _, _)| continuation);
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
                let control = &controls[&task.id];
                let keep_worktrees = options.keep_worktrees;
                let options_of_cli = cli_options(plan, task.agent.kind());
                let context = crate::task::HeldContext {
                    model: options_of_cli.model,
                    agent_env: options_of_cli.env.into_iter().map(|(name, _)| name).collect(),
                    dependencies: task
                        .depends_on
                        .iter()
                        .map(|dependency| {
                            let record = &run.tasks[position[dependency]];
                            serde_json::json!({
                                "task": dependency,
                                "state": record.state,
                                "commit": record.output.as_ref().map(|output| output.tip().to_owned()),
                            })
                        })
                        .collect(),
                };
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
                        control,
                        spent_before,
                        continuation,
                        grant: reprise_core::grant::grant_of(task, plan),
                        context,
                    }
                    .execute();
                    // Reclaimed after the seat is given back: removing a
                    // big tree should not hold up the next task.
                    let reclaim = !keep_worktrees
                        && result.parked.is_none()
                        && result.status.delivered();
                    let _ = sender.send(Message::Done(task.id.clone(), result));
                    if reclaim
                        && let Err(err) =
                            crate::sandbox::reclaim(state, workspace, run_id, &task.id)
                    {
                        let _ = sender.send(Message::Event(Event::Warning {
                            task: Some(task.id.clone()),
                            message: format!(
                                "its worktree could not be reclaimed ({err}); `reprise clean` removes it"
                            ),
                        }));
                    }
                });
            }
            if running == 0 && taken_up.timed.is_empty() {
                break;
            }
            saver.maybe_save(&run, state)?;
            // A park with a wake time is resumed by the run when it comes.
            let next_wake = taken_up.timed.values().map(|(at, _)| *at).min();
            let message = match next_wake {
                // A stopped run does not wait for its timed parks: they stay
                // parked, and `run --continue` wakes them after their time.
                Some(_) if cancel.is_cancelled() && running == 0 => {
                    taken_up.timed.clear();
                    continue;
                }
                Some(at) => {
                    // In slices, so a stop signal is seen while it waits.
                    let wait = at
                        .duration_since(std::time::SystemTime::now())
                        .unwrap_or_default()
                        .min(std::time::Duration::from_millis(200));
                    match receiver.recv_timeout(wait) {
                        Ok(message) => message,
                        Err(_) => {
                            if !cancel.is_cancelled() {
                                wake_due(
                                    state,
                                    &options.key,
                                    &mut run,
                                    &mut taken_up,
                                    &plan_key,
                                    sink,
                                );
                            }
                            continue;
                        }
                    }
                }
                // A snapshot held back by the throttle is written once its
                // time comes, so a live run's state.json is never left behind.
                None => match saver.due_in() {
                    Some(wait) => match receiver.recv_timeout(wait) {
                        Ok(message) => message,
                        Err(_) => continue,
                    },
                    None => receiver.recv().expect("a running task holds a sender"),
                },
            };
            match message {
                Message::Event(event) => {
                    // The snapshot says what a task waits for while it does.
                    match &event {
                        Event::TaskWaiting { task, waiting } => {
                            run.task_mut(task).waiting = Some(waiting.clone());
                            saver.dirty = true;
                        }
                        Event::AttemptStarted { task, .. }
                            if run.task_mut(task).waiting.take().is_some() =>
                        {
                            saver.dirty = true;
                        }
                        _ => {}
                    }
                    sink.event(&event);
                }
                Message::Control(request) => {
                    let answer = match &request.op {
                        crate::control::ControlOp::Resume {
                            task,
                            mode,
                            receipt,
                        } => Some(resume_in_run(
                            (state, &options.key),
                            &mut run,
                            &mut taken_up,
                            &plan_key(task),
                            mode.as_deref(),
                            *receipt,
                        )),
                        op => control_answer(&request, op, &run, &position, &controls),
                    };
                    if let Some(answer) = answer {
                        let _ = request.reply.send(answer);
                    }
                }
                Message::Done(id, mut result) => {
                    running -= 1;
                    let free_before = pool.free();
                    let spent_before = taken_up.spent_before.remove(&id).unwrap_or(0);
                    pool.settle(
                        envelopes.get(&id).copied().flatten(),
                        result.spent_micro_usd.saturating_sub(spent_before),
                    );
                    if let Some(parked) = result.parked.take() {
                        if let reprise_store::suspension::Wake::Time { at } = &parked.wake
                            && let Ok(at) = humantime::parse_rfc3339_weak(at)
                        {
                            taken_up.timed.insert(id.clone(), (at, None));
                        }
                        apply(&mut run, &id, &result);
                        run.task_mut(&id).wake = Some(parked.wake.clone());
                        finish_park(
                            ParkEnd {
                                ledger: &mut ledger,
                                audit: &mut ledger_audit,
                                key: &plan_key(&id),
                                run_id: &run.run_id,
                                seats,
                                running,
                                pool_free: (free_before, pool.free()),
                            },
                            parked,
                        )?;
                        finish(&mut run, sink, &id, result.status, result.reason.clone());
                        saver.maybe_save(&run, state)?;
                        continue;
                    }
                    if let Some((_, Some(reply))) = controls[&id].take_any() {
                        let _ = reply.send(serde_json::json!({"ok": false, "error": format!(
                            "task {id} {} before it could be parked",
                            result.status.as_str()
                        )}));
                    }
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

/// Sets the flag when dropped: the control socket's thread stops serving.
struct StopOnDrop<'a>(&'a std::sync::atomic::AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The coordinator's answer to a control request, or `None` when the
/// answer comes later: a suspend is filed with the task's thread, and the
/// coordinator answers when it has finished the park.
fn control_answer(
    request: &crate::control::ControlRequest,
    op: &crate::control::ControlOp,
    run: &RunState,
    position: &BTreeMap<&TaskId, usize>,
    controls: &BTreeMap<TaskId, crate::park::TaskControl>,
) -> Option<serde_json::Value> {
    use crate::control::ControlOp;
    use serde_json::json;
    let reply = &request.reply;
    let requested_by = Some(request.requester.clone());
    match op {
        ControlOp::Ping => {
            Some(json!({"ok": true, "run_id": run.run_id, "pid": std::process::id()}))
        }
        ControlOp::Resume { .. } => {
            Some(json!({"ok": false, "error": "a resume is the coordinator's to answer"}))
        }
        ControlOp::Pause {
            task,
            upgrade_after_ms,
        } => {
            let Some(&index) = position.get(task) else {
                return Some(
                    json!({"ok": false, "error": format!("run {} has no task {task}", run.run_id)}),
                );
            };
            let status = run.tasks[index].state;
            if status != TaskStatus::Running {
                return Some(json!({"ok": false, "error": format!(
                    "task {task} is {} in run {}: only a running task can be paused", status.as_str(), run.run_id)}));
            }
            let stop = crate::park::Stop::Pause {
                upgrade_after: upgrade_after_ms.map(std::time::Duration::from_millis),
                requested_by,
            };
            match controls[task].stop(stop, Some(reply.clone())) {
                Ok(()) => None,
                Err(err) => Some(json!({"ok": false, "error": err})),
            }
        }
        ControlOp::Unpause { task } => {
            let Some(control) = controls.get(task) else {
                return Some(
                    json!({"ok": false, "error": format!("run {} has no task {task}", run.run_id)}),
                );
            };
            match control.unpause(Some(reply.clone()), requested_by) {
                Ok(()) => None,
                Err(err) => Some(json!({"ok": false, "error": format!("task {task}: {err}")})),
            }
        }
        ControlOp::Suspend { task, wake, reason } => {
            let Some(&index) = position.get(task) else {
                return Some(
                    json!({"ok": false, "error": format!("run {} has no task {task}", run.run_id)}),
                );
            };
            let status = run.tasks[index].state;
            if status != TaskStatus::Running {
                return Some(json!({"ok": false, "error": format!(
                    "task {task} is {} in run {}: only a running task can be parked", status.as_str(), run.run_id)}));
            }
            let request = crate::control::ControlOp::park_request(wake, reason, &request.requester);
            match controls[task].request(request, Some(reply.clone())) {
                Ok(()) => None,
                Err(err) => Some(json!({"ok": false, "error": err})),
            }
        }
    }
}

fn parked_json(parked: &Parked) -> serde_json::Value {
    serde_json::json!({
        "ok": true,
        "run_id": parked.run_id,
        "task": parked.task.task,
        "plan": parked.task.plan,
        "park": parked.park,
        "receipt": parked.receipt,
        "wake": parked.wake,
        "released": parked.released.iter().map(|(resource, detail)| serde_json::json!({"resource": resource, "detail": detail})).collect::<Vec<_>>(),
    })
}

/// What the coordinator needs to finish a park.
struct ParkEnd<'a> {
    ledger: &'a mut Ledger,
    audit: &'a mut AuditLog,
    key: &'a TaskKey,
    run_id: &'a str,
    seats: usize,
    running: usize,
    /// The pool's free amount before and after the headroom came back.
    pool_free: (Option<u64>, Option<u64>),
}

/// The coordinator's steps of a park: the seat and the budget, each
/// released and recorded, then the ledger's `suspended`, then the answer to
/// whoever asked.
fn finish_park(end: ParkEnd<'_>, parked: crate::task::ParkedTask) -> Result<()> {
    use reprise_store::suspension::Resource;
    let ParkEnd {
        ledger,
        audit,
        key,
        run_id,
        seats,
        running,
        pool_free,
    } = end;
    let mut released = parked.released.clone();
    let seat = serde_json::json!({"seats": seats, "running_after": running});
    crate::park::write_release(
        audit,
        key,
        run_id,
        parked.park,
        parked.receipt,
        Resource::Seat,
        seat.clone(),
    )?;
    released.push((Resource::Seat, seat));
    let budget = serde_json::json!({"returned_micro_usd": parked.headroom_micro_usd,
        "pool_free_before": pool_free.0, "pool_free_after": pool_free.1});
    crate::park::write_release(
        audit,
        key,
        run_id,
        parked.park,
        parked.receipt,
        Resource::Budget,
        budget.clone(),
    )?;
    released.push((Resource::Budget, budget));
    let head = ledger.transition(
        &now_rfc3339(),
        run_id,
        &key.task,
        "running",
        "suspended",
        Some(&format!("parked until {}", parked.wake.describe())),
    )?;
    seal_ledger(audit, head, &now_rfc3339())?;
    if let Some(reply) = parked.reply {
        let _ = reply.send(parked_json(&Parked {
            run_id: run_id.to_owned(),
            task: key.clone(),
            park: parked.park,
            receipt: parked.receipt,
            released,
            wake: parked.wake,
        }));
    }
    Ok(())
}

/// Rewrites `state.json` at most every `SAVE_EVERY` while a run goes on: a
/// run of a thousand short tasks must not rewrite its whole snapshot a
/// thousand times. The last save of a run is always made, and synced.
struct Saver {
    last: std::time::Instant,
    /// The snapshot is behind the run: a save was held back by the throttle.
    dirty: bool,
}

const SAVE_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

impl Saver {
    fn maybe_save(&mut self, run: &RunState, state: &StateDir) -> Result<()> {
        if self.last.elapsed() >= SAVE_EVERY {
            run.save(state, false)?;
            self.last = std::time::Instant::now();
            self.dirty = false;
        } else {
            self.dirty = true;
        }
        Ok(())
    }

    /// How long until a held-back save may be written (`None`: nothing is
    /// held back).
    fn due_in(&self) -> Option<std::time::Duration> {
        self.dirty
            .then(|| SAVE_EVERY.saturating_sub(self.last.elapsed()))
    }
}

/// Records why a queued task waits, and says so when that changed.
fn wait(
    run: &mut RunState,
    sink: &mut dyn EventSink,
    task: &TaskId,
    reason: WaitReason,
    detail: String,
) {
    let waiting = Waiting { reason, detail };
    let record = run.task_mut(task);
    if record.waiting.as_ref() != Some(&waiting) {
        record.waiting = Some(waiting.clone());
        sink.event(&Event::TaskWaiting {
            task: task.clone(),
            waiting,
        });
    }
}

/// How many tasks drawing on the pool (no envelope, an agent that can be
/// held to a budget) could hold a share this round: those running, and
/// those ready to start that a free seat will take.
fn contenders(
    order: &[&Task],
    run: &RunState,
    position: &BTreeMap<&TaskId, usize>,
    adapters: &BTreeMap<TaskId, Arc<dyn Adapter>>,
    (seats, running): (usize, usize),
) -> u32 {
    let draws = |task: &Task| task.budget_micro_usd.is_none() && adapters[&task.id].bounds_spend();
    let mut at_work = 0usize;
    let mut ready = 0usize;
    for (task, record) in order.iter().zip(&run.tasks) {
        if !draws(task) {
            continue;
        }
        match record.state {
            TaskStatus::Running => at_work += 1,
            TaskStatus::Queued
                if task
                    .depends_on
                    .iter()
                    .all(|dependency| run.tasks[position[dependency]].state.delivered()) =>
            {
                ready += 1;
            }
            _ => {}
        }
    }
    u32::try_from(at_work + ready.min(seats.saturating_sub(running))).unwrap_or(u32::MAX)
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
    if status != TaskStatus::Suspended {
        record.wake = None;
    }
    sink.event(&Event::TaskFinished {
        task: id.clone(),
        status,
        reason,
    });
}

/// What a continued run takes up: how each task not yet settled comes back
/// (its continuation, the ledger state it leaves, the base it started
/// from), what each had spent, and the parks it wakes at their time.
#[derive(Debug, Default)]
struct TakenUpRun {
    continuations: BTreeMap<TaskId, (crate::task::Continuation, &'static str, Option<String>)>,
    spent_before: BTreeMap<TaskId, u64>,
    timed: BTreeMap<TaskId, (std::time::SystemTime, Option<()>)>,
    /// Tasks a stop cancelled, queued again (the ledger hears it first).
    requeued: Vec<TaskId>,
}

/// Rebuilds a continued run's record from its ledger (the truth about each
/// task) and its last saved state, and says how each unsettled task is
/// taken up.
fn take_up_run(
    state: &StateDir,
    plan: &Plan,
    audit: &reprise_store::audit::AuditSummary,
    run: &mut RunState,
    continuing: &Continuing,
) -> Result<TakenUpRun> {
    let prior = &continuing.prior;
    let ledger = reprise_store::ledger::verify_ledger(state, audit)?;
    run.started_at.clone_from(&prior.started_at);
    run.retry_of.clone_from(&prior.retry_of);
    run.plan.clone_from(&prior.plan);
    let mut taken = TakenUpRun::default();
    for record in &mut run.tasks {
        let id = record.task_id.clone();
        if let Some(before) = prior.task(&id) {
            record.attempts.clone_from(&before.attempts);
            record.spent_micro_usd = before.spent_micro_usd;
            record.judged = before.judged;
            record.metadata.clone_from(&before.metadata);
            record.gaps.clone_from(&before.gaps);
            record.base_commit.clone_from(&before.base_commit);
            record.cwd.clone_from(&before.cwd);
            record.output.clone_from(&before.output);
            record.reason.clone_from(&before.reason);
            record.wake.clone_from(&before.wake);
        }
        let key = TaskKey::new(plan.id().clone(), id.clone());
        let base = || journal_base(state, &key, &run.run_id);
        match ledger.state_of(&run.run_id, id.as_str()) {
            None | Some("queued") => record.state = TaskStatus::Queued,
            Some("running") => {
                record.state = TaskStatus::Queued;
                taken.continuations.insert(
                    id,
                    (crate::task::Continuation::Interrupted, "running", base()),
                );
            }
            Some("suspended") => match continuing.resume.get(&id) {
                Some(resume) => {
                    record.state = TaskStatus::Queued;
                    taken.continuations.insert(
                        id,
                        (
                            crate::task::Continuation::Resume {
                                point: Box::new(resume.point.clone()),
                                mode: resume.mode,
                                approval: resume.approval,
                            },
                            "suspended",
                            base(),
                        ),
                    );
                }
                None => {
                    record.state = TaskStatus::Suspended;
                    if let Some(point) = crate::resume::latest_park(state, &key, audit)
                        && let reprise_store::suspension::Wake::Time { at } = &point.body.wake
                        && let Ok(at) = humantime::parse_rfc3339_weak(at)
                    {
                        taken.timed.insert(id, (at, None));
                    }
                }
            },
            // Cancelled by the run's stop: taken up where its journal says
            // the stop caught it, or started if it never did.
            Some("cancelled") => {
                record.state = TaskStatus::Queued;
                taken.requeued.push(id.clone());
                if !crate::resume::rows_of_run(state, &key, &run.run_id).is_empty() {
                    taken
                        .continuations
                        .insert(id, (crate::task::Continuation::Cancelled, "queued", base()));
                }
            }
            Some(other) => {
                record.state = status_named(other).unwrap_or(TaskStatus::Failed);
                if record.state.delivered() && record.output.is_none() {
                    record.output = journal_output(state, &key, &run.run_id);
                }
            }
        }
    }
    Ok(taken)
}

/// Wakes the timed parks whose time has come: each is checked as any
/// resume is and queued to run; a park that fails the checks stays parked,
/// with a warning.
fn wake_due(
    state: &StateDir,
    key: &reprise_store::key::KeyFile,
    run: &mut RunState,
    taken: &mut TakenUpRun,
    plan_key: &dyn Fn(&TaskId) -> TaskKey,
    sink: &mut dyn EventSink,
) {
    let now = std::time::SystemTime::now();
    let due: Vec<TaskId> = taken
        .timed
        .iter()
        .filter(|(_, (at, _))| *at <= now)
        .map(|(id, _)| id.clone())
        .collect();
    for id in due {
        taken.timed.remove(&id);
        let task_key = plan_key(&id);
        match crate::resume::check_resume(state, key, &task_key, None) {
            Ok(point) => {
                run.task_mut(&id).state = TaskStatus::Queued;
                let base = journal_base(state, &task_key, &run.run_id);
                taken.continuations.insert(
                    id,
                    (
                        crate::task::Continuation::Resume {
                            point: Box::new(point),
                            mode: None,
                            approval: None,
                        },
                        "suspended",
                        base,
                    ),
                );
            }
            Err(refusal) => sink.event(&Event::Warning {
                task: Some(id),
                message: format!("its wake time came but it stays parked: {refusal}"),
            }),
        }
    }
}

/// A resume asked of the live run: checked as any resume is, then the task
/// is queued to run again in a free seat.
fn resume_in_run(
    (state, key): (&StateDir, &reprise_store::key::KeyFile),
    run: &mut RunState,
    taken: &mut TakenUpRun,
    task: &TaskKey,
    mode: Option<&str>,
    receipt: Option<reprise_core::digest::Digest>,
) -> serde_json::Value {
    use serde_json::json;
    let Some(record) = run.task(&task.task) else {
        return json!({"ok": false, "error": format!("run {} has no task {}", run.run_id, task.task)});
    };
    if record.state != TaskStatus::Suspended {
        return json!({"ok": false, "error": format!(
            "task {task} is {} in run {}, not parked", record.state.as_str(), run.run_id)});
    }
    let mode = match mode {
        None => None,
        Some(name) => match reprise_core::retry::RetryMode::from_name(name) {
            Some(mode) => Some(mode),
            None => {
                return json!({"ok": false, "error": format!("{name:?} is not warm, fork or cold")});
            }
        },
    };
    match crate::resume::check_resume(state, key, task, receipt) {
        Ok(point) => {
            run.task_mut(&task.task).state = TaskStatus::Queued;
            taken.timed.remove(&task.task);
            let base = journal_base(state, task, &run.run_id);
            taken.continuations.insert(
                task.task.clone(),
                (
                    crate::task::Continuation::Resume {
                        point: Box::new(point),
                        mode,
                        approval: None,
                    },
                    "suspended",
                    base,
                ),
            );
            json!({"ok": true, "run_id": run.run_id, "task": task.task, "queued": true})
        }
        Err(refusal) => json!({"ok": false, "error": refusal.to_string()}),
    }
}

fn status_named(name: &str) -> Option<TaskStatus> {
    [
        TaskStatus::Queued,
        TaskStatus::Running,
        TaskStatus::Passed,
        TaskStatus::Partial,
        TaskStatus::Failed,
        TaskStatus::Blocked,
        TaskStatus::Cancelled,
        TaskStatus::Suspended,
    ]
    .into_iter()
    .find(|status| status.as_str() == name)
}

/// A journal row of `run_id` of the given kind, the latest.
fn journal_row(
    state: &StateDir,
    key: &TaskKey,
    run_id: &str,
    kind: &str,
) -> Option<serde_json::Value> {
    crate::resume::journal_rows(state, key)
        .into_iter()
        .rev()
        .find(|row| {
            row.kind == kind
                && row.body.get("run_id").and_then(serde_json::Value::as_str) == Some(run_id)
        })
        .map(|row| row.body)
}

/// The base commit the task's `task.started` recorded in `run_id`.
fn journal_base(state: &StateDir, key: &TaskKey, run_id: &str) -> Option<String> {
    journal_row(
        state,
        key,
        run_id,
        reprise_core::lifecycle::rows::TASK_STARTED,
    )?
    .get("base_commit")?
    .as_str()
    .map(str::to_owned)
}

/// The result the task committed in `run_id`, from its `task.result` row.
fn journal_output(
    state: &StateDir,
    key: &TaskKey,
    run_id: &str,
) -> Option<crate::sandbox::TaskOutput> {
    result_output(&journal_row(
        state,
        key,
        run_id,
        reprise_core::lifecycle::rows::RESULT,
    )?)
}

/// The result a `task.result` row records, unless it records a failure.
pub(crate) fn result_output(body: &serde_json::Value) -> Option<crate::sandbox::TaskOutput> {
    if body.get("error").is_some() {
        return None;
    }
    Some(crate::sandbox::TaskOutput {
        base: body.get("base_commit")?.as_str()?.to_owned(),
        commit: body
            .get("commit")
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned),
        branch: body
            .get("branch")
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned),
        files_changed: body
            .get("files_changed")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0),
    })
}
