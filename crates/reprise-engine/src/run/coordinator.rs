//! The coordinator: owns the run's record, ledger and pool, seats the tasks
//! that may start (each decision from `reprise_core::schedule`), and answers
//! each message its tasks and the control socket send. It never runs a task
//! itself: a `SeatSource` does.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender};
use std::time::SystemTime;

use reprise_agents::{Adapter, CancelToken};
use reprise_core::plan::{Plan, Task};
use reprise_core::schedule::{self, Admission, Contender, Idle, Settle, Standing};
use reprise_core::{TaskId, TaskKey};
use reprise_store::audit::{AuditLog, AuditSummary, read_audit, seal_ledger};
use reprise_store::ledger::Ledger;
use reprise_store::replies::drop_kept_reply;
use reprise_store::state::{StateDir, now_rfc3339};

use super::RunOptions;
use super::record::{Saver, apply, carry_prior, finish, new_record, wait};
use super::requests::{ParkEnd, control_answer, finish_park};
use super::seats::{Job, SeatSource};
use super::take_up::{TakenUp, TakenUpRun, resume_in_run, take_up_run, wake_due};
use crate::error::Result;
use crate::events::{Event, EventSink};
use crate::messages::Message;
use crate::park::TaskControl;
use crate::pool::SharedPool;
use crate::sandbox::{TaskBase, Workspace, dependent_base};
use crate::state::{RunState, TaskStatus, WaitReason};
use crate::task::{Previous, TaskResult, TaskRun};

/// Warnings for tasks, said once the run has started.
pub(super) type Warnings = Vec<(TaskId, String)>;

/// What the run's tasks share with the coordinator, fixed once the run
/// starts: the plan, the options, the workspace, the pool and each task's
/// control. The task threads borrow it.
pub(super) struct Shared<'a> {
    pub(super) state: &'a StateDir,
    pub(super) plan: &'a Plan,
    pub(super) options: RunOptions,
    pub(super) cancel: &'a CancelToken,
    /// The plan's tasks in dependency order; `run.tasks` follows it.
    pub(super) order: Vec<&'a Task>,
    /// Where each task's record is in `run.tasks`.
    pub(super) position: BTreeMap<&'a TaskId, usize>,
    pub(super) adapters: BTreeMap<TaskId, Arc<dyn Adapter>>,
    pub(super) workspace: Workspace,
    /// The audit chain, read once per run: each task's seal must respect
    /// the seals its journal already has, and reading the chain per task
    /// would make every task cost more than the one before.
    pub(super) audit: AuditSummary,
    /// For a new leg: each judged task's kept reply, heard once.
    pub(super) carried: BTreeMap<TaskId, Previous>,
    /// The plan's criteria ladders, for the retry budget.
    pub(super) criteria: Vec<(String, Vec<i64>)>,
    pub(super) pool: SharedPool,
    /// Where a pause or park request reaches each task's thread.
    pub(super) controls: BTreeMap<TaskId, TaskControl>,
}

impl<'a> Shared<'a> {
    /// Everything before the run's first record is saved: the workspace
    /// (a continued run works where it worked), stale worktrees pruned, the
    /// run's record with what an earlier leg delivered carried over. Also
    /// the warnings of replies that could not be carried.
    pub(super) fn prepare(
        state: &'a StateDir,
        plan: &'a Plan,
        options: RunOptions,
        cancel: &'a CancelToken,
    ) -> Result<(Self, RunState, Warnings)> {
        let order: Vec<&Task> = plan.dependency_order();
        let adapters = super::adapters::adapters_of(&order, plan, state);
        let workspace = match options
            .continuing
            .as_ref()
            .and_then(|continuing| continuing.prior.workspace.clone())
        {
            Some(workspace) => workspace,
            None => Workspace::detect(state, &options.project, options.include_uncommitted)?,
        };
        let audit = read_audit(state, &options.key)?;
        crate::sandbox::prune_stale(state, &workspace)?;
        let mut run = new_record(plan, &order, &options, &workspace);
        // A new leg of a finished run: what passed stays passed; what failed
        // runs again, a judged task hearing its kept reply once.
        let (carried, warnings) = match &options.retry_of {
            Some(prior) => carry_prior(state, prior, &mut run),
            None => (BTreeMap::new(), Vec::new()),
        };
        let position = order
            .iter()
            .enumerate()
            .map(|(index, task)| (&task.id, index))
            .collect();
        let controls = order
            .iter()
            .map(|task| (task.id.clone(), TaskControl::default()))
            .collect();
        let shared = Self {
            state,
            plan,
            cancel,
            position,
            adapters,
            workspace,
            audit,
            carried,
            criteria: crate::budget::plan_criteria(plan),
            pool: SharedPool::new(plan.budget_micro_usd()),
            controls,
            order,
            options,
        };
        Ok((shared, run, warnings))
    }

    fn key(&self, task: &TaskId) -> TaskKey {
        TaskKey::new(self.plan.id().clone(), task.clone())
    }
}

/// The coordinator's own state: what changes as the run goes on.
pub(super) struct Coordinator<'a, 'k> {
    shared: &'a Shared<'a>,
    sink: &'k mut dyn EventSink,
    run: RunState,
    ledger: Ledger,
    /// The coordinator's handle on the audit chain: it seals the ledger's
    /// head at each task's terminal transition and at the run's end.
    ledger_audit: AuditLog,
    envelopes: BTreeMap<TaskId, Option<u64>>,
    taken_up: TakenUpRun,
    saver: Saver,
    running: usize,
    /// Handed to each task a seat runs, for its events and its result.
    to_coordinator: Sender<Message>,
}

impl<'a, 'k> Coordinator<'a, 'k> {
    /// Takes up a continued run, saves the first record, says the run
    /// started, and opens the ledger (recording the run's start, or the
    /// tasks a stop cancelled queued again).
    pub(super) fn open(
        shared: &'a Shared<'a>,
        sink: &'k mut dyn EventSink,
        mut run: RunState,
        warnings: Warnings,
        to_coordinator: Sender<Message>,
    ) -> Result<Self> {
        let (state, plan, options) = (shared.state, shared.plan, &shared.options);
        let taken_up = match &options.continuing {
            Some(continuing) => take_up_run(state, plan, &shared.audit, &mut run, continuing)?,
            None => TakenUpRun::default(),
        };
        run.save(state, false)?;
        let saver = Saver {
            last: std::time::Instant::now(),
            dirty: false,
        };
        announce(shared, &run, sink, warnings);
        let ledger_audit = AuditLog::open(state, options.key.clone())?;
        let mut ledger = Ledger::open(state)?;
        if options.continuing.is_none() {
            ledger.run_started(
                &now_rfc3339(),
                &run.run_id,
                plan.id(),
                shared.workspace.base(),
            )?;
        }
        for task in &taken_up.requeued {
            ledger.transition(
                &now_rfc3339(),
                &run.run_id,
                task,
                TaskStatus::Cancelled,
                TaskStatus::Queued,
                Some("taken up again by run --continue"),
            )?;
        }
        Ok(Self {
            shared,
            sink,
            run,
            ledger,
            ledger_audit,
            envelopes: BTreeMap::new(),
            taken_up,
            saver,
            running: 0,
            to_coordinator,
        })
    }

    /// The run's control socket, or a warning that parks and pauses cannot
    /// reach this run.
    pub(super) fn bind_control(&mut self) -> Option<crate::control::ControlServer> {
        let shared = self.shared;
        super::requests::bind_control(shared.state, &shared.options.run_id, self.sink)
    }

    /// The run loop: seat what may start, then wait for and handle the next
    /// message, until nothing runs and no park waits for its time.
    pub(super) fn drive(
        &mut self,
        seats: &dyn SeatSource<'a>,
        messages: &Receiver<Message>,
    ) -> Result<()> {
        loop {
            self.settle_queued()?;
            self.share_pool(seats.seats());
            self.start_ready(seats)?;
            if self.idle() == Idle::Finished {
                return Ok(());
            }
            self.saver.maybe_save(&self.run, self.shared.state)?;
            match self.idle() {
                Idle::Finished => return Ok(()),
                Idle::ForgetTimedParks => self.taken_up.timed.clear(),
                Idle::AwaitWake(wait) => match messages.recv_timeout(wait) {
                    Ok(message) => self.handle(message, seats)?,
                    Err(_) => self.wake_due(),
                },
                // A snapshot held back by the throttle is written once its
                // time comes, so a live run's state.json is never left behind.
                Idle::AwaitMessage => match self.saver.due_in() {
                    Some(wait) => {
                        if let Ok(message) = messages.recv_timeout(wait) {
                            self.handle(message, seats)?;
                        }
                    }
                    None => {
                        let message = messages.recv().expect("the coordinator holds a sender");
                        self.handle(message, seats)?;
                    }
                },
            }
        }
    }

    /// The run's end: events sent after the last task ended are still
    /// shown, and the final record is saved and synced.
    pub(super) fn close(mut self, messages: &Receiver<Message>) -> Result<RunState> {
        while let Ok(Message::Event(event)) = messages.try_recv() {
            self.sink.event(&event);
        }
        self.run.finished_at = Some(now_rfc3339());
        self.run.ok = Some(self.run.tasks.iter().all(|task| task.state.delivered()));
        self.run.save(self.shared.state, true)?;
        Ok(self.run)
    }

    /// One message from a task, the control socket or a seat.
    fn handle(&mut self, message: Message, seats: &dyn SeatSource<'a>) -> Result<()> {
        match message {
            Message::Event(event) => {
                self.relay(event);
                Ok(())
            }
            Message::Control(request) => {
                self.answer(request, seats);
                Ok(())
            }
            Message::Done(id, result) => self.task_ended(&id, result, seats.seats()),
        }
    }

    fn status(&self, task: &TaskId) -> TaskStatus {
        self.run.tasks[self.shared.position[task]].state
    }

    /// Each of `task`'s dependencies and where it stands.
    fn dependencies<'t>(
        &'t self,
        task: &'a Task,
    ) -> impl Iterator<Item = (&'a TaskId, Standing)> + 't {
        task.depends_on
            .iter()
            .map(|dependency| (dependency, self.status(dependency).standing()))
    }

    /// What waits now: the run is over, or the coordinator waits for a
    /// message, a park's wake time, or forgets its timed parks.
    fn idle(&self) -> Idle {
        let now = SystemTime::now();
        let next_wake_in = self
            .taken_up
            .timed
            .values()
            .min()
            .map(|at| at.duration_since(now).unwrap_or_default());
        schedule::idle(
            self.running,
            next_wake_in,
            self.shared.cancel.is_cancelled(),
        )
    }

    /// Settles what can be settled without running anything: a stop
    /// cancels what has not started (`run --continue` starts it then), a
    /// dependency that ended without a result blocks its dependents.
    fn settle_queued(&mut self) -> Result<()> {
        let shared = self.shared;
        for task in &shared.order {
            if self.status(&task.id) != TaskStatus::Queued {
                continue;
            }
            let stopped = shared.cancel.is_cancelled();
            let settled = schedule::settle(stopped, self.dependencies(task));
            match settled {
                None => {}
                Some(Settle::Cancel) => self.cancel_queued(&task.id)?,
                Some(Settle::Block {
                    dependency,
                    blocked,
                }) => {
                    let reason = if blocked {
                        format!("dependency {dependency} blocked")
                    } else {
                        format!("dependency {dependency} did not pass")
                    };
                    self.block_queued(&task.id, reason)?;
                }
            }
        }
        Ok(())
    }

    /// How many tasks drawing on the pool could hold a share this round,
    /// set before any of them starts: the first to ask leaves the others
    /// theirs. (Counted only under a pool: without one nothing is shared.)
    fn share_pool(&self, seats: usize) {
        let shared = self.shared;
        if shared.pool.free().is_none() {
            return;
        }
        let tasks = shared
            .order
            .iter()
            .zip(&self.run.tasks)
            .map(|(task, record)| Contender {
                draws_on_pool: task.budget_micro_usd.is_none()
                    && shared.adapters[&task.id].bounds_spend(),
                standing: record.state.standing(),
                dependencies_delivered: self
                    .dependencies(task)
                    .all(|(_, standing)| standing == Standing::Delivered),
            });
        shared
            .pool
            .set_contenders(schedule::contenders(tasks, seats, self.running));
    }

    /// Starts what may start; says why the rest waits.
    fn start_ready(&mut self, seats: &dyn SeatSource<'a>) -> Result<()> {
        let shared = self.shared;
        let count = seats.seats();
        for task in &shared.order {
            if self.status(&task.id) != TaskStatus::Queued {
                continue;
            }
            let admission = schedule::admit(self.dependencies(task), count, self.running);
            match admission {
                Admission::AwaitDependency(dependency) => {
                    let detail = format!("dependency {dependency}");
                    wait(
                        &mut self.run,
                        self.sink,
                        &task.id,
                        WaitReason::Dependency,
                        detail,
                    );
                }
                Admission::AwaitSeat => {
                    let detail = format!("a seat (all {count} busy)");
                    wait(&mut self.run, self.sink, &task.id, WaitReason::Seat, detail);
                }
                Admission::Seat => {
                    if let Some(job) = self.seat(task)? {
                        seats.start(job);
                    }
                }
            }
        }
        Ok(())
    }

    /// Gives `task` a seat: its base, its envelope from the pool, the
    /// ledger's `running`. `None` when it cannot start after all: it waits
    /// for its envelope or is blocked.
    fn seat(&mut self, task: &'a Task) -> Result<Option<Job<'a>>> {
        let continuation = self.taken_up.continuations.remove(&task.id);
        let Some(base) = self.base(task, continuation.as_ref())? else {
            return Ok(None);
        };
        let envelope = match self.reserve(task, continuation.as_ref()) {
            Ok(Some(envelope)) => envelope,
            Ok(None) => {
                if let Some(continuation) = continuation {
                    self.taken_up
                        .continuations
                        .insert(task.id.clone(), continuation);
                }
                let detail = format!(
                    "headroom in the pool for its envelope (${} free)",
                    reprise_core::plan::format_micro_usd(self.shared.pool.free().unwrap_or(0))
                );
                wait(
                    &mut self.run,
                    self.sink,
                    &task.id,
                    WaitReason::Budget,
                    detail,
                );
                return Ok(None);
            }
            Err(reason) => {
                self.block_queued(&task.id, reason)?;
                return Ok(None);
            }
        };
        self.envelopes.insert(task.id.clone(), envelope);
        let record = &mut self.run.tasks[self.shared.position[&task.id]];
        record.state = TaskStatus::Running;
        record.waiting = None;
        let from = continuation
            .as_ref()
            .map_or(TaskStatus::Queued, |(_, from, _)| *from);
        // A task interrupted while running is still running in the ledger.
        if from != TaskStatus::Running {
            let run_id = &self.run.run_id;
            self.ledger.transition(
                &now_rfc3339(),
                run_id,
                &task.id,
                from,
                TaskStatus::Running,
                None,
            )?;
        }
        let spent_before = match continuation.as_ref() {
            Some((crate::task::Continuation::Resume { point, .. }, _, _)) => {
                point.body.envelope.spent_micro_usd
            }
            _ => 0,
        };
        self.taken_up
            .spent_before
            .insert(task.id.clone(), spent_before);
        self.saver.maybe_save(&self.run, self.shared.state)?;
        self.running += 1;
        self.run.tasks[self.shared.position[&task.id]]
            .base_commit
            .clone_from(&base);
        let continuation = continuation.map(|(continuation, _, _)| continuation);
        Ok(Some(self.job(
            task,
            base,
            envelope,
            spent_before,
            continuation,
        )))
    }

    /// The commit `task` starts from: the run's, or its dependencies'
    /// results merged; a task taken up again keeps the base it started
    /// from. `None` when those results conflict: the task is blocked.
    fn base(
        &mut self,
        task: &Task,
        continuation: Option<&TakenUp>,
    ) -> Result<Option<Option<String>>> {
        if let Some(base) = continuation.and_then(|(_, _, base)| base.clone()) {
            return Ok(Some(Some(base)));
        }
        match task_base(
            &self.shared.workspace,
            &self.run,
            &self.shared.position,
            task,
        )? {
            Ok(base) => Ok(Some(base)),
            Err(reason) => {
                self.block_queued(&task.id, reason)?;
                Ok(None)
            }
        }
    }

    /// The task's envelope from the pool: a resumed park gets back what it
    /// had left, any other task its own reservation.
    fn reserve(
        &self,
        task: &Task,
        continuation: Option<&TakenUp>,
    ) -> std::result::Result<Option<Option<u64>>, String> {
        let pool = &self.shared.pool;
        match continuation {
            Some((crate::task::Continuation::Resume { point, .. }, _, _)) => {
                let envelope = &point.body.envelope;
                Ok(pool.reserve_left(
                    envelope
                        .reserved_micro_usd
                        .map(|_| envelope.headroom_micro_usd),
                ))
            }
            _ => pool.reserve(task),
        }
    }

    /// The seated task's run, as its seat will execute it.
    fn job(
        &self,
        task: &'a Task,
        base: Option<String>,
        envelope: Option<u64>,
        spent_before: u64,
        continuation: Option<crate::task::Continuation>,
    ) -> Job<'a> {
        let shared = self.shared;
        let (plan, options) = (shared.plan, &shared.options);
        let run = TaskRun {
            state: shared.state,
            signing: crate::evidence::Signing::Key(options.key.clone()),
            run_id: options.run_id.as_str(),
            plan: plan.id(),
            task,
            workspace: &shared.workspace,
            base,
            adapter: shared.adapters[&task.id].as_ref(),
            project: options.project.as_path(),
            envelope_micro_usd: envelope,
            pool: &shared.pool,
            bin: super::adapters::bin_for(plan, task.agent.kind()),
            setup: options
                .agent_setup
                .get(&task.id)
                .cloned()
                .unwrap_or_default(),
            prior_seals: shared.audit.seals_of(&shared.key(&task.id)),
            budget: options
                .retry_budget
                .as_ref()
                .map(|spec| (spec, shared.criteria.as_slice())),
            carried: shared.carried.get(&task.id).cloned(),
            cancel: shared.cancel,
            supervisor: options.supervisor.as_ref(),
            events: self.to_coordinator.clone(),
            control: &shared.controls[&task.id],
            spent_before,
            continuation,
            grant: reprise_core::grant::grant_of(task, plan),
            context: self.held_context(task),
            lost_sessions: None,
        };
        Job {
            run,
            keep_worktree: options.keep_worktrees,
        }
    }

    /// The plan's model and agent variables for the task's CLI, and its
    /// dependencies' states and results as it starts.
    fn held_context(&self, task: &Task) -> crate::task::HeldContext {
        let options_of_cli = super::adapters::cli_options(self.shared.plan, task.agent.kind());
        crate::task::HeldContext {
            model: options_of_cli.model,
            agent_env: options_of_cli
                .env
                .into_iter()
                .map(|(name, _)| name)
                .collect(),
            dependencies: task
                .depends_on
                .iter()
                .map(|dependency| {
                    let record = &self.run.tasks[self.shared.position[dependency]];
                    serde_json::to_value(reprise_core::rows::DependencyState {
                        task: dependency.clone(),
                        state: record.state,
                        commit: record.output.as_ref().map(|output| output.tip().to_owned()),
                    })
                    .expect("a dependency's state serialises")
                })
                .collect(),
        }
    }

    /// An event from a task, shown; the snapshot says what a task waits
    /// for while it does.
    fn relay(&mut self, event: Event) {
        match &event {
            Event::TaskWaiting { task, waiting } => {
                self.run.task_mut(task).waiting = Some(waiting.clone());
                self.saver.dirty = true;
            }
            Event::AttemptStarted { task, .. }
                if self.run.task_mut(task).waiting.take().is_some() =>
            {
                self.saver.dirty = true;
            }
            _ => {}
        }
        self.sink.event(&event);
    }

    /// A control request: a resume is the coordinator's own; the rest are
    /// answered now or filed with the task's thread, which answers later.
    fn answer(&mut self, request: crate::control::ControlRequest, seats: &dyn SeatSource<'a>) {
        let shared = self.shared;
        let answer = match &request.op {
            crate::control::ControlOp::Suspend { task, wake, reason } if !seats.runs_here() => {
                self.forward_park(&request, (task, wake, reason), seats)
            }
            crate::control::ControlOp::Pause { task, .. }
            | crate::control::ControlOp::Unpause { task }
                if !seats.runs_here() =>
            {
                Some(super::answers::refused(format!(
                    "task {task} runs on a fleet worker, which a pause does not reach; `reprise task suspend {task}` parks it there"
                )))
            }
            crate::control::ControlOp::Resume {
                task,
                mode,
                receipt,
            } => Some(resume_in_run(
                (shared.state, &shared.options.key),
                &mut self.run,
                &mut self.taken_up,
                &shared.key(task),
                mode.as_deref(),
                *receipt,
            )),
            op => control_answer(&request, op, &self.run, &shared.position, &shared.controls),
        };
        if let Some(answer) = answer {
            let _ = request.reply.send(answer);
        }
    }

    /// A park asked for a task on a fleet worker: filed here as for a local
    /// task (so the asker is answered when the park comes back, or refused
    /// when the task ends first), then passed on to the worker that holds
    /// it. A task no worker holds now is refused at once.
    fn forward_park(
        &mut self,
        request: &crate::control::ControlRequest,
        (task, wake, reason): (&TaskId, &reprise_store::suspension::Wake, &Option<String>),
        seats: &dyn SeatSource<'a>,
    ) -> Option<serde_json::Value> {
        let shared = self.shared;
        let filed = control_answer(
            request,
            &request.op,
            &self.run,
            &shared.position,
            &shared.controls,
        );
        if filed.is_some() {
            return filed;
        }
        let park = crate::run::fleet::ForwardedPark {
            wake: wake.clone(),
            reason: reason.clone(),
            requested_by: request.requester.clone(),
        };
        match seats.forward_park(&self.run.run_id, task, &park) {
            Ok(true) => None,
            passed => {
                let _ = shared.controls[task].take_any();
                let why = match passed {
                    Err(err) => format!("the fleet could not pass it on: {err}"),
                    Ok(_) => "no worker holds it right now (it is queued, or between leases); ask again once it runs".to_owned(),
                };
                Some(super::answers::refused(format!(
                    "task {task} was not parked: {why}"
                )))
            }
        }
    }

    /// Wakes the timed parks whose time has come, unless the run was
    /// stopped.
    fn wake_due(&mut self) {
        let shared = self.shared;
        if !shared.cancel.is_cancelled() {
            let plan_key = |task: &TaskId| shared.key(task);
            wake_due(
                shared.state,
                &shared.options.key,
                &mut self.run,
                &mut self.taken_up,
                &plan_key,
                self.sink,
            );
        }
    }

    /// A task's seat came back: its spend is settled with the pool, then
    /// it is parked or ended.
    fn task_ended(&mut self, id: &TaskId, mut result: TaskResult, seats: usize) -> Result<()> {
        self.running -= 1;
        let pool = &self.shared.pool;
        let free_before = pool.free();
        let spent_before = self.taken_up.spent_before.remove(id).unwrap_or(0);
        pool.settle(
            self.envelopes.get(id).copied().flatten(),
            result.spent_micro_usd.saturating_sub(spent_before),
        );
        match result.parked.take() {
            Some(mut parked) => {
                // A park a worker made for a request filed here answers
                // whoever asked.
                if parked.reply.is_none() {
                    parked.reply = self.shared.controls[id]
                        .take_any()
                        .and_then(|(_, reply)| reply);
                }
                self.task_parked(id, &result, parked, (seats, free_before))
            }
            None => self.task_finished(id, &result),
        }
    }

    /// The coordinator's steps of a park: the seat and the budget released,
    /// the ledger's `suspended`, a timed park's wake noted.
    fn task_parked(
        &mut self,
        id: &TaskId,
        result: &TaskResult,
        parked: crate::task::ParkedTask,
        (seats, free_before): (usize, Option<u64>),
    ) -> Result<()> {
        if let reprise_store::suspension::Wake::Time { at } = &parked.wake
            && let Ok(at) = humantime::parse_rfc3339_weak(at)
        {
            self.taken_up.timed.insert(id.clone(), at);
        }
        apply(&mut self.run, id, result);
        self.run.task_mut(id).wake = Some(parked.wake.clone());
        finish_park(
            ParkEnd {
                ledger: &mut self.ledger,
                audit: &mut self.ledger_audit,
                key: &self.shared.key(id),
                run_id: &self.run.run_id,
                seats,
                running: self.running,
                pool_free: (free_before, self.shared.pool.free()),
            },
            parked,
        )?;
        finish(
            &mut self.run,
            self.sink,
            id,
            result.status,
            result.reason.clone(),
        );
        self.saver.maybe_save(&self.run, self.shared.state)
    }

    /// A task that ended: a park asked of it too late is refused, the
    /// ledger records its end (sealed), and a pass retires the earlier
    /// leg's kept reply.
    fn task_finished(&mut self, id: &TaskId, result: &TaskResult) -> Result<()> {
        let shared = self.shared;
        if let Some((_, Some(reply))) = shared.controls[id].take_any() {
            let _ = reply.send(super::answers::refused(format!(
                "task {id} {} before it could be parked",
                result.status.as_str()
            )));
        }
        apply(&mut self.run, id, result);
        if let (Some(prior), TaskStatus::Passed) = (&shared.options.retry_of, result.status) {
            let _ = drop_kept_reply(shared.state, &prior.run_id, id);
        }
        let head = self.ledger.transition(
            &now_rfc3339(),
            &self.run.run_id,
            id,
            TaskStatus::Running,
            result.status,
            result.reason.as_deref(),
        )?;
        seal_ledger(&mut self.ledger_audit, head, &now_rfc3339())?;
        finish(
            &mut self.run,
            self.sink,
            id,
            result.status,
            result.reason.clone(),
        );
        self.saver.maybe_save(&self.run, shared.state)
    }

    /// A queued task a stop cancelled before it started.
    fn cancel_queued(&mut self, task: &TaskId) -> Result<()> {
        let reason = "cancelled before it started";
        self.end_queued(task, TaskStatus::Cancelled, reason.to_owned())
    }

    /// A queued task that will not run.
    fn block_queued(&mut self, task: &TaskId, reason: String) -> Result<()> {
        self.end_queued(task, TaskStatus::Blocked, reason)
    }

    /// A queued task ends without running: the ledger moves it (and the new
    /// head is sealed), then the run state and the sink hear of it.
    fn end_queued(&mut self, task: &TaskId, end: TaskStatus, reason: String) -> Result<()> {
        let head = self.ledger.transition(
            &now_rfc3339(),
            &self.run.run_id,
            task,
            TaskStatus::Queued,
            end,
            Some(&reason),
        )?;
        seal_ledger(&mut self.ledger_audit, head, &now_rfc3339())?;
        finish(&mut self.run, self.sink, task, end, Some(reason));
        Ok(())
    }
}

/// The events of a run's start: the run, its workspace, a warning when its
/// tasks cannot be contained, and the warnings of replies not carried.
fn announce(shared: &Shared<'_>, run: &RunState, sink: &mut dyn EventSink, warnings: Warnings) {
    let seats = shared.options.seats.unwrap_or(shared.plan.seats()).max(1);
    sink.event(&Event::RunStarted {
        run_id: run.run_id.clone(),
        plan_name: run.plan_name.clone(),
        tasks: shared.order.len(),
        seats,
    });
    sink.event(&Event::Workspace {
        workspace: shared.workspace.clone(),
    });
    if let Some(supervisor) = &shared.options.supervisor
        && !supervisor.landlock
        && shared.order.iter().any(|task| task.containment.confines())
    {
        sink.event(&Event::Warning {
            task: None,
            message: "this kernel has no Landlock: agents and gates run NOT contained (they can read the audit key and write anywhere you can); set containment: required to refuse such runs".to_owned(),
        });
    }
    if let Some(supervisor) = &shared.options.supervisor
        && supervisor.landlock
        && !supervisor.namespaces
        && shared.order.iter().any(|task| task.containment.confines())
    {
        let network = if supervisor.landlock_network {
            "their connections are held by port only (Landlock), not by host"
        } else {
            "they can connect anywhere you can"
        };
        sink.event(&Event::Warning {
            task: None,
            message: format!("this machine gives attempts no namespaces of their own: agents and gates can see every process (their environments and command lines too) and {network}; allow unprivileged user namespaces, or set containment: required to refuse such runs"),
        });
    }
    for (task, message) in warnings {
        sink.event(&Event::Warning {
            task: Some(task),
            message,
        });
    }
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
