//! Seats on other hosts: each seated task goes to the transport as an
//! order, and what comes back becomes the coordinator's own messages. The
//! rows a worker ships are ingested into the coordinator's chains before
//! any later report is relayed, so when `Message::Done` arrives the task's
//! journal, spine and audit rows (and its seal) are already there, as
//! after a local task.

use std::sync::mpsc::{Receiver, channel};
use std::thread::Scope;

use reprise_core::TaskKey;
use reprise_store::key::KeyFile;

use super::order::{ShippedResult, TaskOrder};
use super::{Report, Transport};
use crate::error::Result;
use crate::evidence::ingest;
use crate::messages::Message;
use crate::run::seats::{Job, SeatSource};
use crate::sandbox::Workspace;

/// The plan as orders carry it.
#[derive(Debug, Clone)]
pub(crate) struct PlanText {
    pub(crate) text: String,
    pub(crate) file: String,
}

/// Seats a transport's workers hold.
pub(crate) struct RemoteSeats<'scope, 'env> {
    scope: &'scope Scope<'scope, 'env>,
    seats: usize,
    transport: &'env dyn Transport,
    plan: PlanText,
    /// The git remote bases and results travel through.
    remote: Option<String>,
    key: KeyFile,
}

impl<'scope, 'env> RemoteSeats<'scope, 'env> {
    pub(crate) fn new(
        scope: &'scope Scope<'scope, 'env>,
        seats: usize,
        transport: &'env dyn Transport,
        (plan, remote): (PlanText, Option<String>),
        key: KeyFile,
    ) -> Self {
        Self {
            scope,
            seats,
            transport,
            plan,
            remote,
            key,
        }
    }

    /// Everything a worker needs to run the job's task; its base is
    /// published to the remote first.
    fn order_of(&self, job: &Job<'env>) -> Result<TaskOrder> {
        let run = &job.run;
        let key = TaskKey::new(run.plan.clone(), run.task.id.clone());
        if let (Some(remote), Some(base)) = (&self.remote, &run.base) {
            super::remote_git::publish_base(run.workspace, remote, run.run_id, &run.task.id, base)?;
        }
        let journal =
            reprise_store::read_no_follow(&run.state.journal_path(&key))?.unwrap_or_default();
        let subdir = match run.workspace {
            Workspace::Worktrees { subdir, .. } => subdir.clone(),
            Workspace::InPlace { .. } => std::path::PathBuf::new(),
        };
        Ok(TaskOrder {
            run_id: run.run_id.to_owned(),
            plan_text: self.plan.text.clone(),
            plan_file: self.plan.file.clone(),
            plan_hash: TaskOrder::plan_hash(&self.plan.text),
            task: run.task.id.clone(),
            base: run.base.clone(),
            remote: self.remote.clone(),
            subdir,
            journal: String::from_utf8_lossy(&journal).into_owned(),
            envelope_micro_usd: run.envelope_micro_usd,
            carried_reply: run
                .carried
                .as_ref()
                .and_then(|previous| previous.carried_reply())
                .map(str::to_owned),
            retry_budget: run.budget.map(|(spec, _)| spec.to_string()),
            setup: run.setup.clone(),
            dependencies: run.context.dependencies.clone(),
            keep_worktree: job.keep_worktree,
        })
    }
}

impl<'env> SeatSource<'env> for RemoteSeats<'_, 'env> {
    fn seats(&self) -> usize {
        self.seats
    }

    fn start(&self, job: Job<'env>) {
        // A task taken up again from its journal (after a crash, a stop or
        // a park) goes on here, where the key that checks its park is.
        if job.run.continuation.is_some() {
            self.scope
                .spawn(move || crate::run::seats::run_on_this_host(job));
            return;
        }
        let (sender, reports) = channel();
        let submitted = self
            .order_of(&job)
            .and_then(|order| self.transport.submit(order, sender));
        if let Err(err) = submitted {
            let result = ShippedResult::failed(format!("its order could not be sent: {err}"));
            let _ = job
                .run
                .events
                .send(Message::Done(job.run.task.id.clone(), result.into_result()));
            return;
        }
        let (key, remote) = (self.key.clone(), self.remote.clone());
        self.scope
            .spawn(move || follow(&job, &reports, &key, remote.as_deref()));
    }
}

/// Relays what a worker reports about `job` until its end: rows ingested,
/// events passed on, then the result (its branch fetched) as `Done`.
fn follow(job: &Job<'_>, reports: &Receiver<Report>, key: &KeyFile, remote: Option<&str>) {
    let run = &job.run;
    let task_key = TaskKey::new(run.plan.clone(), run.task.id.clone());
    let mut refused: Option<String> = None;
    let shipped = loop {
        match reports.recv() {
            Ok(Report::Shipped(batch)) => {
                if refused.is_none()
                    && let Err(err) = ingest(run.state, key, &task_key, &run.prior_seals, &batch)
                {
                    refused = Some(format!("its worker's rows were refused: {err}"));
                }
            }
            Ok(Report::Event(event)) => {
                let _ = run.events.send(Message::Event(event));
            }
            Ok(Report::Done(result)) => break *result,
            Ok(Report::Lost { host, reason }) => {
                break ShippedResult::failed(format!("lost on host {host}: {reason}"));
            }
            Err(_) => break ShippedResult::failed("its worker stopped reporting".to_owned()),
        }
    };
    let mut result = shipped.into_result();
    if let Some(reason) = refused {
        result.status = crate::state::TaskStatus::Failed;
        result.reason = Some(reason);
        result.output = None;
    }
    if let (Some(remote), Some(branch)) = (
        remote,
        result
            .output
            .as_ref()
            .and_then(|output| output.branch.clone()),
    ) && let Err(err) =
        super::remote_git::fetch_result(run.workspace, remote, &run.task.id, &branch)
    {
        result.status = crate::state::TaskStatus::Failed;
        result.reason = Some(err.to_string());
        result.output = None;
    }
    let _ = run.events.send(Message::Done(run.task.id.clone(), result));
}
