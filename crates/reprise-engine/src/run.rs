//! The run: a plan's tasks scheduled in dependency order onto seats, each
//! task's budget envelope reserved from the run's pool (the unspent headroom
//! returned when it ends), each task run on a seat, and `runs/<run>/state.json`
//! kept current. The coordinator (`coordinator.rs`) decides and records; a
//! seat source (`seats.rs`) runs the tasks.

pub(crate) mod adapters;
mod answers;
mod coordinator;
pub(crate) mod fleet;
mod record;
mod requests;
pub(crate) mod seats;
mod take_up;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::mpsc;

use reprise_agents::CancelToken;
use reprise_core::plan::{Plan, Task};
use reprise_core::{TaskId, TaskKey};
use reprise_store::locks::{HeldLock, Holder, try_task_lock};
use reprise_store::state::StateDir;

use crate::error::{EngineError, Result};
use crate::events::EventSink;
use crate::messages::Message;
pub use crate::settings::{AgentSetup, Supervisor, load_plan};
use crate::state::RunState;
use coordinator::{Coordinator, Shared};
use requests::StopOnDrop;
use seats::LocalSeats;

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

/// A new run id: `R-` and a ULID, so ids sort by start time.
pub fn new_run_id() -> String {
    format!("R-{}", ulid::Ulid::new())
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

/// Runs `plan` to the end (or until `cancel`), reporting to `sink`.
pub fn run_plan(
    state: &StateDir,
    plan: &Plan,
    options: RunOptions,
    cancel: &CancelToken,
    sink: &mut dyn EventSink,
) -> Result<RunState> {
    run_on(state, plan, options, cancel, sink, None)
}

/// Where a fleet run's tasks go: the transport to its workers and the git
/// remote every host reaches (`None`: tasks run in place on their workers).
#[expect(
    missing_debug_implementations,
    reason = "a transport need not be Debug"
)]
pub struct Fleet<'t> {
    pub transport: &'t dyn fleet::Transport,
    pub remote: Option<String>,
    /// The plan's text, as the workers parse it (the plan run here is its
    /// parse).
    pub plan_text: String,
}

/// Runs `plan` as `run_plan` does, each task on a worker `fleet` reaches:
/// the same records, events, summary and statuses, with every task's
/// evidence ingested into this state directory's chains and signed here.
pub fn run_plan_on_fleet(
    state: &StateDir,
    plan: &Plan,
    options: RunOptions,
    cancel: &CancelToken,
    sink: &mut dyn EventSink,
    fleet: &Fleet<'_>,
) -> Result<RunState> {
    run_on(state, plan, options, cancel, sink, Some(fleet))
}

fn run_on(
    state: &StateDir,
    plan: &Plan,
    options: RunOptions,
    cancel: &CancelToken,
    sink: &mut dyn EventSink,
    fleet: Option<&Fleet<'_>>,
) -> Result<RunState> {
    let seats = options.seats.unwrap_or(plan.seats()).max(1) as usize;
    let remote_plan = fleet.map(|fleet| {
        let text = fleet::PlanText {
            text: fleet.plan_text.clone(),
            file: options.plan_path.display().to_string(),
        };
        (text, fleet)
    });
    let key = options.key.clone();
    let (shared, run, warnings) = Shared::prepare(state, plan, options, cancel)?;
    let (sender, receiver) = mpsc::channel::<Message>();
    let mut coordinator = Coordinator::open(&shared, sink, run, warnings, sender.clone())?;
    // The control socket: `reprise task suspend` reaches the run here.
    let server = coordinator.bind_control();
    let serving = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| -> Result<()> {
        if let Some(server) = &server {
            let serving = &serving;
            scope.spawn(move || server.serve(&sender, serving));
        }
        // The socket's thread ends when the run's loop does, however it ends.
        let _stop_serving = StopOnDrop(&serving);
        match remote_plan {
            Some((text, fleet)) => coordinator.drive(
                &fleet::RemoteSeats::new(
                    scope,
                    seats,
                    fleet.transport,
                    (text, fleet.remote.clone()),
                    key,
                ),
                &receiver,
            ),
            None => coordinator.drive(&LocalSeats::new(scope, seats), &receiver),
        }
    })?;
    coordinator.close(&receiver)
}
