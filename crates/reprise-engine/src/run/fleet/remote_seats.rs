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
    /// published to the remote first when `publish`.
    fn order_of(&self, job: &Job<'env>, publish: bool) -> Result<TaskOrder> {
        let run = &job.run;
        let key = TaskKey::new(run.plan.clone(), run.task.id.clone());
        if publish && let (Some(remote), Some(base)) = (&self.remote, &run.base) {
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
            taken_over_from: None,
            sessions: Vec::new(),
            resume: None,
        })
    }
}

impl<'env> SeatSource<'env> for RemoteSeats<'_, 'env> {
    fn seats(&self) -> usize {
        self.seats
    }

    fn runs_here(&self) -> bool {
        false
    }

    fn forward_park(
        &self,
        run_id: &str,
        task: &reprise_core::TaskId,
        park: &super::order::ForwardedPark,
    ) -> Result<bool> {
        self.transport.park(run_id, task, park)
    }

    fn start(&self, job: Job<'env>) {
        use crate::task::Continuation;
        match &job.run.continuation {
            None => self.submit(job),
            // The coordinator died or was stopped while the task was out:
            // a worker may hold it still, or have finished it meanwhile.
            Some(Continuation::Interrupted | Continuation::Cancelled) => self.attach(job),
            // A park is checked here, where the key is, and resumed on a
            // worker (its checkpoints through the remote, its sessions'
            // transcripts with the order).
            Some(Continuation::Resume { .. }) => self.resume(job),
        }
    }
}

impl<'scope, 'env> RemoteSeats<'scope, 'env> {
    /// Sends the job's task to a worker and follows it.
    fn submit(&self, job: Job<'env>) {
        let (sender, reports) = channel();
        let submitted = self.order_of(&job, true).and_then(|order| {
            self.transport.submit(order.clone(), sender)?;
            Ok(order)
        });
        match submitted {
            Ok(order) => self.follow(job, order, reports),
            Err(err) => not_sent(&job, &err),
        }
    }

    /// Sends a parked task to a worker to resume, once its park is checked
    /// again here (a refusal leaves it parked, as a local resume does).
    fn resume(&self, job: Job<'env>) {
        let run = &job.run;
        let Some(crate::task::Continuation::Resume {
            point,
            mode,
            approval,
        }) = &run.continuation
        else {
            return self.submit(job);
        };
        let key = TaskKey::new(run.plan.clone(), run.task.id.clone());
        if let Err(refusal) =
            crate::resume::recheck_before_resume(run.state, &self.key, &key, point)
        {
            let mut result = ShippedResult::failed(refusal.to_string()).into_result();
            result.status = crate::state::TaskStatus::Suspended;
            let _ = run.events.send(Message::Done(run.task.id.clone(), result));
            return;
        }
        let (sender, reports) = channel();
        let submitted = self.order_of(&job, false).and_then(|mut order| {
            order.resume = Some(super::order::ShippedResume::of(point, *mode, *approval));
            order.sessions = travelling_sessions(run, &key);
            self.transport.submit(order.clone(), sender)?;
            Ok(order)
        });
        match submitted {
            Ok(order) => self.follow(job, order, reports),
            Err(err) => not_sent(&job, &err),
        }
    }

    /// Follows a task of a continued run where the transport has it; any
    /// other is sent again, and a worker takes it up from its journal.
    fn attach(&self, job: Job<'env>) {
        let (sender, reports) = channel();
        let attached = self.order_of(&job, false).and_then(|order| {
            let known = self.transport.attach(&order, sender)?;
            Ok((order, known))
        });
        match attached {
            Ok((order, true)) => self.follow(job, order, reports),
            Ok((_, false)) => {
                // Rows shipped before the task ended as the stop left it.
                let run = &job.run;
                let task = TaskKey::new(run.plan.clone(), run.task.id.clone());
                for report in reports.try_iter() {
                    if let Report::Shipped(batch) = report
                        && let Err(err) =
                            ingest(run.state, &self.key, &task, &run.prior_seals, &batch)
                    {
                        return not_sent(&job, &err);
                    }
                }
                self.submit(job);
            }
            Err(err) => not_sent(&job, &err),
        }
    }

    fn follow(&self, job: Job<'env>, order: TaskOrder, reports: Receiver<Report>) {
        let follow = Follow {
            transport: self.transport,
            key: self.key.clone(),
        };
        self.scope
            .spawn(move || follow.until_done(&job, order, reports));
    }
}

/// Ends a task whose order could not reach the transport.
fn not_sent(job: &Job<'_>, err: &crate::error::EngineError) {
    let result = ShippedResult::failed(format!("its order could not be sent: {err}"));
    let _ = job
        .run
        .events
        .send(Message::Done(job.run.task.id.clone(), result.into_result()));
}

/// How many times a task is handed to another host after its host was lost.
const TAKEOVERS: u32 = 3;

/// What following one task's reports needs.
struct Follow<'env> {
    transport: &'env dyn Transport,
    key: KeyFile,
}

impl Follow<'_> {
    /// Relays what workers report about `job` until its end: rows
    /// ingested, events passed on, a lost host's task handed to another
    /// (from the journal as ingested so far), then the result (its branch
    /// fetched) as `Done`.
    fn until_done(&self, job: &Job<'_>, mut order: TaskOrder, mut reports: Receiver<Report>) {
        let run = &job.run;
        let mut takeovers = 0;
        let (shipped, refused) = loop {
            match self.relay(job, &reports) {
                Ended::Lost { host, reason } if takeovers < TAKEOVERS => {
                    takeovers += 1;
                    match self.take_over(job, &mut order, host) {
                        Ok(next) => reports = next,
                        Err(err) => {
                            let failed = format!("lost ({reason}) and not taken over: {err}");
                            break (ShippedResult::failed(failed), None);
                        }
                    }
                }
                Ended::Lost { host, reason } => {
                    break (
                        ShippedResult::failed(format!("lost on host {host}: {reason}")),
                        None,
                    );
                }
                Ended::Done(result, refused) => break (result, refused),
            }
        };
        let mut result = shipped.into_result();
        if let Some(reason) = refused {
            result.status = crate::state::TaskStatus::Failed;
            result.reason = Some(reason);
            result.output = None;
            result.parked = None;
        }
        if let Err(err) = self.settle_park(job, &order, &mut result) {
            result.status = crate::state::TaskStatus::Failed;
            result.reason = Some(format!(
                "its park on its worker could not be taken up: {err}"
            ));
            result.parked = None;
        }
        // A resumed park ended: the checkpoints its worker took since come
        // beside the ones its park brought, so this host's store stays whole.
        if order.resume.is_some()
            && result.parked.is_none()
            && let Some(remote) = order.remote.as_deref()
            && let Err(err) = take_checkpoints(run, remote)
        {
            let _ = run.events.send(Message::Event(crate::events::Event::Warning {
                task: Some(run.task.id.clone()),
                message: format!(
                    "the checkpoints its worker took after the resume could not be fetched: {err}; `journal verify` will miss them"
                ),
            }));
        }
        let branch = result
            .output
            .as_ref()
            .and_then(|output| output.branch.clone().zip(output.commit.clone()));
        if let (Some(remote), Some((branch, commit))) = (order.remote.as_deref(), branch)
            && let Err(err) = super::remote_git::fetch_result(
                run.workspace,
                remote,
                (run.run_id, &run.task.id),
                &branch,
                &commit,
            )
        {
            result.status = crate::state::TaskStatus::Failed;
            result.reason = Some(err.to_string());
            result.output = None;
        }
        let _ = run.events.send(Message::Done(run.task.id.clone(), result));
    }

    /// A park the worker made, taken up here where its resume is checked:
    /// the receipt this host wrote when it took the park's row named, and
    /// the worker's checkpoints of the task (the park's snapshot among
    /// them) fetched from the remote into this host's store of them, which
    /// the wake's check (`check_resume`) and `journal verify` look in.
    fn settle_park(
        &self,
        job: &Job<'_>,
        order: &TaskOrder,
        result: &mut crate::messages::TaskResult,
    ) -> Result<()> {
        let Some(parked) = result.parked.as_mut() else {
            return Ok(());
        };
        let run = &job.run;
        let key = TaskKey::new(run.plan.clone(), run.task.id.clone());
        let point = crate::resume::latest_park_at(run.state, &self.key, &key, parked.park)?
            .ok_or_else(|| {
                crate::error::EngineError::Park(format!(
                    "the worker parked {key} at {}, a park its journal does not end with",
                    parked.park
                ))
            })?;
        parked.receipt = Some(point.receipt.ok_or_else(|| {
            crate::error::EngineError::Park(format!("the park of {key} has no receipt"))
        })?);
        let (Some(remote), Some(id)) = (order.remote.as_deref(), point.snapshot()) else {
            return Ok(());
        };
        let store = take_checkpoints(run, remote)?;
        if !store.list()?.iter().any(|checkpoint| checkpoint.id == id) {
            return Err(crate::error::EngineError::Park(format!(
                "the remote {remote} does not hold the park's snapshot {id} of {key}"
            )));
        }
        Ok(())
    }

    /// One host's reports, until it ends the task or is lost.
    fn relay(&self, job: &Job<'_>, reports: &Receiver<Report>) -> Ended {
        let run = &job.run;
        let task_key = TaskKey::new(run.plan.clone(), run.task.id.clone());
        let mut refused: Option<String> = None;
        let mut stop_said = false;
        loop {
            // The run's stop reaches the workers through the transport.
            if !stop_said && run.cancel.is_cancelled() {
                self.transport.stop(run.run_id);
                stop_said = true;
            }
            let report = match reports.recv_timeout(std::time::Duration::from_millis(200)) {
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => continue,
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => Err(()),
                Ok(report) => Ok(report),
            };
            match report {
                Ok(Report::Shipped(batch)) => {
                    if refused.is_none()
                        && let Err(err) =
                            ingest(run.state, &self.key, &task_key, &run.prior_seals, &batch)
                    {
                        refused = Some(format!("its worker's rows were refused: {err}"));
                    }
                }
                Ok(Report::Event(event)) => {
                    let _ = run.events.send(Message::Event(event));
                }
                Ok(Report::Done(result)) => return Ended::Done(*result, refused),
                Ok(Report::Lost { host, reason }) => return Ended::Lost { host, reason },
                Err(_) => {
                    let failed = ShippedResult::failed("its worker stopped reporting".to_owned());
                    return Ended::Done(failed, refused);
                }
            }
        }
    }

    /// Hands the task of a lost host to another, from the journal as this
    /// host holds it now.
    fn take_over(
        &self,
        job: &Job<'_>,
        order: &mut TaskOrder,
        lost: String,
    ) -> Result<Receiver<Report>> {
        let run = &job.run;
        let key = TaskKey::new(run.plan.clone(), run.task.id.clone());
        let journal =
            reprise_store::read_no_follow(&run.state.journal_path(&key))?.unwrap_or_default();
        order.journal = String::from_utf8_lossy(&journal).into_owned();
        order.taken_over_from = Some(lost);
        order.sessions = travelling_sessions(run, &key);
        let (sender, reports) = channel();
        self.transport.submit(order.clone(), sender)?;
        Ok(reports)
    }
}

/// The worker's checkpoints of `run`'s task, fetched from `remote` into this
/// host's store of them (which the wake's check and `journal verify` look
/// in).
fn take_checkpoints(
    run: &crate::task::TaskRun<'_>,
    remote: &str,
) -> Result<reprise_store::snapshot::SnapshotStore> {
    let store = crate::checkpoints::store_for_transfer(
        run.state,
        run.run_id,
        run.task,
        run.workspace.repo(),
    )?;
    let prefix = crate::task::TaskRun::park_checkpoints_prefix(run.run_id, &run.task.id);
    store.fetch_all(remote, &prefix)?;
    Ok(store)
}

/// The transcripts this host keeps of the sessions `key`'s journal names in
/// this run (shipped by the workers that ran them), to go with its order.
fn travelling_sessions(
    run: &crate::task::TaskRun<'_>,
    key: &TaskKey,
) -> Vec<crate::evidence::ShippedSession> {
    let rows = crate::resume::rows_of_run(run.state, key, run.run_id);
    crate::task::sessions_named(&rows)
        .iter()
        .filter_map(|session| {
            crate::evidence::ShippedSession::preserved(run.state, run.adapter.name(), session)
        })
        .collect()
}

/// How one host's part of a task ended.
#[expect(
    clippy::large_enum_variant,
    reason = "one per host's part of a task, moved once"
)]
enum Ended {
    Done(ShippedResult, Option<String>),
    Lost { host: String, reason: String },
}
