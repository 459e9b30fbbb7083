//! A worker's side of one order: the plan checked against its hash, the
//! task's journal taken from the order, the workspace fetched, and the
//! task run exactly as a local run runs it, with one difference: its
//! evidence is shipped, never signed (`Signing::Worker`).

use std::path::PathBuf;
use std::sync::mpsc::{self, Sender};

use reprise_agents::CancelToken;
use reprise_core::TaskKey;
use reprise_core::plan::{Plan, Task};
use reprise_store::state::StateDir;

use super::order::{ShippedResult, TaskOrder};
use crate::error::{EngineError, Result};
use crate::events::Event;
use crate::evidence::{Outbox, Signing};
use crate::messages::Message;
use crate::park::TaskControl;
use crate::pool::SharedPool;
use crate::sandbox::Workspace;
use crate::settings::Supervisor;
use crate::task::{HeldContext, Previous, TaskRun};

/// A host that runs orders: its own state directory (no audit key), the
/// directory its project clone (or in-place project) is in, and how its
/// processes are supervised.
#[derive(Debug, Clone)]
pub struct WorkerHost {
    pub host_id: String,
    pub state: StateDir,
    pub project: PathBuf,
    pub supervisor: Option<Supervisor>,
}

/// Runs `order` on `host`: its rows go to `outbox` as they are written,
/// its events to `events`; a park the coordinator passes on is filed with
/// `control`. Returns how the task ended; an error is an order this host
/// could not take up (bad plan, no workspace).
pub fn run_order(
    host: &WorkerHost,
    order: &TaskOrder,
    outbox: Outbox,
    (events, control): (&Sender<Event>, &super::order::WorkerControl),
    cancel: &CancelToken,
) -> Result<ShippedResult> {
    let plan = plan_of(order)?;
    let task = plan.task(&order.task).ok_or_else(|| {
        EngineError::Lifecycle(format!(
            "the order names task {}, which its plan does not have; check the coordinator's plan",
            order.task
        ))
    })?;
    let key = TaskKey::new(plan.id().clone(), task.id.clone());
    adopt_journal(&host.state, &key, &order.journal)?;
    for session in &order.sessions {
        session.keep(&host.state)?;
    }
    let workspace = super::remote_git::worker_workspace(host, order)?;
    let result = run_task(
        host,
        order,
        (&plan, task),
        &workspace,
        outbox,
        (events, &control.0),
        cancel,
    );
    if let (Some(remote), Some(output)) = (&order.remote, &result.output)
        && let (Some(_), Some(commit)) = (&output.branch, &output.commit)
    {
        super::remote_git::push_result(&workspace, remote, (&order.run_id, &task.id), commit)?;
    }
    // A resumed park's coordinator holds the task's checkpoints up to the
    // park: the ones taken since follow (a park again sent them all).
    if let (Some(_), None, Some(remote)) = (&order.resume, &result.parked, &order.remote) {
        let store = crate::checkpoints::store_for_transfer(
            &host.state,
            &order.run_id,
            task,
            workspace.repo(),
        )?;
        store.push_all(
            remote,
            &crate::task::TaskRun::park_checkpoints_prefix(&order.run_id, &task.id),
        )?;
    }
    let delivered = result.parked.is_none() && result.status.delivered();
    if delivered && !order.keep_worktree {
        let _ = crate::sandbox::reclaim(&host.state, &workspace, &order.run_id, &task.id);
    }
    Ok(ShippedResult::of(result))
}

/// The order's plan, parsed, once its text is the one it names.
fn plan_of(order: &TaskOrder) -> Result<Plan> {
    if TaskOrder::plan_hash(&order.plan_text) != order.plan_hash {
        return Err(EngineError::Lifecycle(format!(
            "the plan sent for task {} does not match its hash; nothing was run: send the order again",
            order.task
        )));
    }
    Ok(reprise_core::plan::parse_plan(
        &order.plan_text,
        &order.plan_file,
    )?)
}

/// The worker's copy of the task's journal becomes the coordinator's, byte
/// for byte: the rows this host appends then link to the coordinator's head.
fn adopt_journal(state: &StateDir, key: &TaskKey, journal: &str) -> Result<()> {
    state.check_task_dir(key)?;
    let path = state.journal_path(key);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|source| reprise_store::StoreError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
    }
    reprise_store::write_atomic(&path, journal.as_bytes(), 0o644)?;
    Ok(())
}

/// How a task whose journal already holds rows of this run goes on: as
/// after a crash, from where those rows leave it; and when another host
/// wrote them (it was lost), the sessions they name (of which those whose
/// transcripts came with the order can still be resumed here).
fn taken_over(
    host: &WorkerHost,
    order: &TaskOrder,
    plan: &Plan,
    task: &Task,
) -> (
    Option<crate::task::Continuation>,
    Option<std::collections::BTreeSet<String>>,
) {
    let key = TaskKey::new(plan.id().clone(), task.id.clone());
    let rows = crate::resume::rows_of_run(&host.state, &key, &order.run_id);
    let continuation = (!rows.is_empty()).then_some(crate::task::Continuation::Interrupted);
    let lost = order
        .taken_over_from
        .as_ref()
        .filter(|lost| **lost != host.host_id)
        .map(|_| crate::task::sessions_named(&rows));
    (continuation, lost)
}

/// The task's run on this host, its events forwarded as they come.
fn run_task(
    host: &WorkerHost,
    order: &TaskOrder,
    (plan, task): (&Plan, &Task),
    workspace: &Workspace,
    outbox: Outbox,
    (events, control): (&Sender<Event>, &TaskControl),
    cancel: &CancelToken,
) -> crate::messages::TaskResult {
    let adapters = crate::run::adapters::adapters_of(&[task], plan, &host.state);
    let criteria = crate::budget::plan_criteria(plan);
    let budget = order
        .retry_budget
        .as_deref()
        .and_then(|spec| spec.parse::<reprise_core::budget::BudgetSpec>().ok());
    let pool = SharedPool::new(None);
    let options_of_cli = crate::run::adapters::cli_options(plan, task.agent.kind());
    let (continuation, lost_sessions) = match &order.resume {
        Some(resume) => (
            Some(resume.clone().continuation(
                TaskKey::new(plan.id().clone(), task.id.clone()),
                &order.run_id,
            )),
            None,
        ),
        None => taken_over(host, order, plan, task),
    };
    let (sender, receiver) = mpsc::channel::<Message>();
    std::thread::scope(|scope| {
        scope.spawn(move || {
            for message in receiver {
                if let Message::Event(event) = message {
                    let _ = events.send(event);
                }
            }
        });
        let run = TaskRun {
            state: &host.state,
            signing: Signing::Worker(outbox.with_remote(order.remote.clone())),
            run_id: &order.run_id,
            plan: plan.id(),
            task,
            workspace,
            base: order.base.clone(),
            adapter: adapters[&task.id].as_ref(),
            project: &host.project,
            carried: order.carried_reply.clone().map(Previous::carried),
            envelope_micro_usd: order.envelope_micro_usd,
            pool: &pool,
            bin: crate::run::adapters::bin_for(plan, task.agent.kind()),
            setup: order.setup.clone(),
            prior_seals: Vec::new(),
            budget: budget.as_ref().map(|spec| (spec, criteria.as_slice())),
            cancel,
            supervisor: host.supervisor.as_ref(),
            events: sender,
            control,
            spent_before: 0,
            // Taken over from a lost host: it goes on from its journal, as
            // after a crash.
            continuation,
            grant: reprise_core::grant::grant_of(task, plan),
            context: HeldContext {
                model: options_of_cli.model,
                agent_env: options_of_cli
                    .env
                    .into_iter()
                    .map(|(name, _)| name)
                    .collect(),
                dependencies: order.dependencies.clone(),
            },
            lost_sessions,
        };
        run.execute()
    })
}
