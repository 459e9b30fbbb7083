//! Where the coordinator's tasks run: a source of seats. A local run's
//! seats are threads of this process; a fleet's will be leases held by
//! workers on other hosts. Either way a task's result comes back to the
//! coordinator as a `Message::Done` on the channel its job carries.

use std::thread::Scope;

use crate::events::Event;
use crate::messages::Message;
use crate::task::TaskRun;

/// A task the coordinator gave a seat, ready to run.
pub(crate) struct Job<'a> {
    pub(crate) run: TaskRun<'a>,
    /// Keep the task's worktree after it ends (`--keep-worktrees`).
    pub(crate) keep_worktree: bool,
}

/// Runs the tasks the coordinator seats.
pub(crate) trait SeatSource<'a> {
    /// How many tasks may hold a seat at once.
    fn seats(&self) -> usize;
    /// Runs `job` on a seat. Its result is sent to the coordinator as
    /// `Message::Done` on `job.run.events`, after which the seat is free.
    fn start(&self, job: Job<'a>);
    /// Whether tasks run in this process (the coordinator's own control
    /// reaches them), not on other hosts.
    fn runs_here(&self) -> bool {
        true
    }
    /// Passes a park asked of the coordinator on to the host running task
    /// `task`: whether it reached the task's holder (never, here).
    fn forward_park(
        &self,
        run_id: &str,
        task: &reprise_core::TaskId,
        park: &crate::run::fleet::ForwardedPark,
    ) -> crate::error::Result<bool> {
        let _ = (run_id, task, park);
        Ok(false)
    }
}

/// Seats on threads of this process, within the run's thread scope.
pub(crate) struct LocalSeats<'scope, 'env> {
    scope: &'scope Scope<'scope, 'env>,
    seats: usize,
}

impl<'scope, 'env> LocalSeats<'scope, 'env> {
    pub(crate) fn new(scope: &'scope Scope<'scope, 'env>, seats: usize) -> Self {
        Self { scope, seats }
    }
}

impl<'env> SeatSource<'env> for LocalSeats<'_, 'env> {
    fn seats(&self) -> usize {
        self.seats
    }

    fn start(&self, job: Job<'env>) {
        self.scope.spawn(move || run_on_this_host(job));
    }
}

/// Runs a task here; then, once its seat is given back, removes the
/// worktree of a task that delivered (removing a big tree should not hold
/// up the next task).
pub(crate) fn run_on_this_host(job: Job<'_>) {
    let Job { run, keep_worktree } = job;
    let (state, workspace, run_id) = (run.state, run.workspace, run.run_id);
    let task = run.task.id.clone();
    let sender = run.events.clone();
    let result = run.execute();
    let reclaim = !keep_worktree && result.parked.is_none() && result.status.delivered();
    let _ = sender.send(Message::Done(task.clone(), result));
    if reclaim && let Err(err) = crate::sandbox::reclaim(state, workspace, run_id, &task) {
        let _ = sender.send(Message::Event(Event::Warning {
            task: Some(task),
            message: format!(
                "its worktree could not be reclaimed ({err}); `reprise clean` removes it"
            ),
        }));
    }
}
