//! Parking a task (DESIGN.md section 9): the request that stops a running
//! task's agent, and the steps that record the park and give back what the
//! task holds, each durable before the next: the `task.suspend` journal row,
//! its audit receipt, then one release row per resource, each written after
//! the release it records really happened.
//!
//! Who performs the steps: a live run's task thread writes the journal row,
//! the receipt and the process and sandbox releases (it owns the task's
//! journal and worktree); its coordinator returns the seat and the budget
//! and moves the ledger. With no live run, `reprise task suspend` does all
//! of it, and a park cut short by a crash is completed
//! by the next command that finds it.

use std::path::Path;
use std::sync::{Mutex, PoisonError, mpsc};

use reprise_agents::CancelToken;
use reprise_core::TaskKey;
use reprise_core::digest::Digest;
use reprise_core::lifecycle::TaskState;
use reprise_core::record::Head;
use reprise_core::record::JournalRow;
use reprise_core::rows::{
    AgentCheckpointBound, AttemptFinished, AttemptStarted, BudgetReleased, CheckpointTaken,
    EnvelopeBalance, JournalHead, ParkCause, ProcessReleased, Release, Requester, Resource,
    SandboxReleased, SeatReleased, SessionUse, SuspendBody, SuspendReceipt, TaskStarted,
    TaskStatus, Wake, body_of,
};
use reprise_store::audit::AuditLog;
use reprise_store::locks::HeldLock;
use reprise_store::state::{StateDir, now_rfc3339};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{EngineError, Result};

/// What a park request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParkRequest {
    pub wake: Wake,
    pub cause: ParkCause,
    pub reason: Option<String>,
    /// What the agent asked, for a park that waits on a person.
    pub question: Option<String>,
    /// The process that asked, when a command did.
    pub requested_by: Option<Requester>,
}

/// What a finished park reports to whoever asked for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parked {
    pub run_id: String,
    pub task: TaskKey,
    /// The `task.suspend` row's event hash.
    pub park: Digest,
    /// The receipt's hash in the audit chain.
    pub receipt: Digest,
    pub released: Vec<(Resource, Value)>,
    pub wake: Wake,
}

impl Parked {
    /// What whoever asked for the park is told (the control socket's
    /// answer, and `task suspend --json`).
    pub fn answer(&self) -> ParkedAnswer {
        ParkedAnswer {
            ok: true,
            run_id: self.run_id.clone(),
            task: self.task.task.clone(),
            plan: self.task.plan.clone(),
            park: self.park,
            receipt: self.receipt,
            wake: self.wake.clone(),
            released: self
                .released
                .iter()
                .map(|(resource, detail)| ReleasedResource {
                    resource: *resource,
                    detail: detail.clone(),
                })
                .collect(),
        }
    }
}

/// A finished park, as its answer says it: the park, its receipt, what
/// wakes it and what it gave back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParkedAnswer {
    /// Always `true`: a refusal is `{"ok": false, "error": ...}`.
    pub ok: bool,
    pub run_id: String,
    pub task: reprise_core::TaskId,
    pub plan: reprise_core::PlanId,
    pub park: Digest,
    pub receipt: Digest,
    pub wake: Wake,
    pub released: Vec<ReleasedResource>,
}

/// One resource a park gave back, and its release's detail (one of core's
/// `*Released` types, by resource).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleasedResource {
    pub resource: Resource,
    pub detail: Value,
}

/// Where the answer to a park request goes (the control socket's reply).
pub(crate) type ParkReply = mpsc::Sender<Value>;

/// What a request asks of a running task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Stop {
    /// Park it: release everything.
    Park(ParkRequest),
    /// Halt its agent for a moment, keeping its sandbox, seat and
    /// reservation; a pause older than `upgrade_after` becomes a park.
    Pause {
        upgrade_after: Option<std::time::Duration>,
        requested_by: Option<Requester>,
    },
}

/// How a pause ended.
#[derive(Debug)]
pub(crate) enum PauseEnd {
    Unpause(Option<ParkReply>, Option<Requester>),
    Park(ParkRequest, Option<ParkReply>),
    /// It outlived `upgrade_after`.
    Upgrade,
    Cancelled,
}

#[derive(Debug, Default)]
struct Inner {
    /// The attempt's stop token, from before it waits for its budget until
    /// its agent ends.
    agent: Option<CancelToken>,
    /// Its agent was handed to the adapter: a stop no longer cancels the
    /// token at once, the task thread does once the stop is recorded.
    agent_running: bool,
    /// The running attempt's agent returned (set by the thread that ran it).
    agent_returned: bool,
    request: Option<(Stop, Option<ParkReply>)>,
    /// Set while the task is paused; an unpause leaves its reply and who
    /// asked here.
    paused: bool,
    unpause: Option<(Option<ParkReply>, Option<Requester>)>,
}

/// One running task's handle for parks and pauses: the coordinator (asked
/// over the control socket, or by the agent's own stop) files a request;
/// the task thread records it (the `task.suspend` row and its receipt, or
/// the `task.pause` row) and only then stops its agent, if one runs: the
/// receipt comes before any effect.
#[derive(Debug, Default)]
pub(crate) struct TaskControl {
    inner: Mutex<Inner>,
    changed: std::sync::Condvar,
}

impl TaskControl {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Files a park request; a running agent is stopped at once. `Err` says
    /// why when another request is pending.
    pub(crate) fn request(
        &self,
        request: ParkRequest,
        reply: Option<ParkReply>,
    ) -> std::result::Result<(), String> {
        self.stop(Stop::Park(request), reply)
    }

    /// Files a park or a pause; the task thread, waiting on its running
    /// agent ([`TaskControl::wait_agent`]), records it and then stops the agent.
    pub(crate) fn stop(
        &self,
        stop: Stop,
        reply: Option<ParkReply>,
    ) -> std::result::Result<(), String> {
        let mut inner = self.lock();
        if inner.request.is_some() {
            return Err("a park or pause of this task is already under way".to_owned());
        }
        if inner.paused && matches!(stop, Stop::Pause { .. }) {
            return Err("the task is already paused; `reprise task unpause` goes on".to_owned());
        }
        // Before its agent runs (waiting for its budget), nothing is halted:
        // the wait ends at once.
        if !inner.agent_running
            && let Some(agent) = &inner.agent
        {
            agent.cancel();
        }
        inner.request = Some((stop, reply));
        drop(inner);
        self.changed.notify_all();
        Ok(())
    }

    /// Ends a pause; `Err` when the task is not paused.
    pub(crate) fn unpause(
        &self,
        reply: Option<ParkReply>,
        requested_by: Option<Requester>,
    ) -> std::result::Result<(), String> {
        let mut inner = self.lock();
        if !inner.paused {
            return Err("the task is not paused".to_owned());
        }
        inner.unpause = Some((reply, requested_by));
        drop(inner);
        self.changed.notify_all();
        Ok(())
    }

    /// The token the attempt watches: the run's, plus a stop's (at once
    /// while it waits for its budget; once recorded while its agent runs).
    pub(crate) fn begin_agent(&self, run: &CancelToken) -> CancelToken {
        let token = run.child();
        let mut inner = self.lock();
        if inner.request.is_some() {
            token.cancel();
        }
        inner.agent = Some(token.clone());
        inner.agent_running = false;
        inner.agent_returned = false;
        token
    }

    /// The agent is handed to its adapter: from now on a stop is recorded
    /// before the token is cancelled.
    pub(crate) fn agent_starts(&self) {
        self.lock().agent_running = true;
    }

    /// The thread running the agent says it returned.
    pub(crate) fn agent_returned(&self) {
        self.lock().agent_returned = true;
        self.changed.notify_all();
    }

    /// Waits while the agent runs: `true` when a park or pause was asked
    /// for first (the agent still runs, for the task thread to record the
    /// request and then stop it), `false` when the agent returned.
    pub(crate) fn wait_agent(&self) -> bool {
        let mut inner = self.lock();
        loop {
            if inner.agent_returned {
                return false;
            }
            if inner.request.is_some() {
                return true;
            }
            inner = self
                .changed
                .wait(inner)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// The agent ended; what stopped it, if a request did (or is pending).
    pub(crate) fn end_agent(&self) -> Option<bool> {
        let mut inner = self.lock();
        inner.agent = None;
        inner.agent_running = false;
        inner
            .request
            .as_ref()
            .map(|(stop, _)| matches!(stop, Stop::Pause { .. }))
    }

    /// A park is pending.
    pub(crate) fn pending(&self) -> bool {
        matches!(self.lock().request, Some((Stop::Park(_), _)))
    }

    /// Takes a pending park request.
    pub(crate) fn take(&self) -> Option<(ParkRequest, Option<ParkReply>)> {
        let mut inner = self.lock();
        match inner.request.take() {
            Some((Stop::Park(request), reply)) => Some((request, reply)),
            other => {
                inner.request = other;
                None
            }
        }
    }

    /// Takes any pending request.
    pub(crate) fn take_any(&self) -> Option<(Stop, Option<ParkReply>)> {
        self.lock().request.take()
    }

    /// Waits, paused, until an unpause, a park, the upgrade time or the run's
    /// cancel.
    pub(crate) fn wait_paused(
        &self,
        upgrade_after: Option<std::time::Duration>,
        cancel: &CancelToken,
    ) -> PauseEnd {
        let until = upgrade_after.map(|after| std::time::Instant::now() + after);
        let mut inner = self.lock();
        inner.paused = true;
        let end = loop {
            if let Some((reply, requested_by)) = inner.unpause.take() {
                break PauseEnd::Unpause(reply, requested_by);
            }
            if let Some((Stop::Park(request), reply)) = inner.request.take() {
                break PauseEnd::Park(request, reply);
            }
            if cancel.is_cancelled() {
                break PauseEnd::Cancelled;
            }
            let now = std::time::Instant::now();
            if until.is_some_and(|until| now >= until) {
                break PauseEnd::Upgrade;
            }
            let slice = until.map_or(std::time::Duration::from_millis(100), |until| {
                (until - now).min(std::time::Duration::from_millis(100))
            });
            inner = self
                .changed
                .wait_timeout(inner, slice)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        };
        inner.paused = false;
        end
    }
}

/// A test-only hold: with `REPRISE_TEST_PARK_HOLD=<step>` the process says
/// so on stderr and waits there for ever (to be killed with SIGKILL), so a
/// test can cut a park at every step boundary.
// The engine never prints, but this hook exists for tests alone, which
// wait for this very line before they kill the process.
#[expect(clippy::print_stderr)]
pub(crate) fn hold_at(step: &str) {
    if cfg!(debug_assertions)
        && std::env::var("REPRISE_TEST_PARK_HOLD").is_ok_and(|held| held == step)
    {
        eprintln!("reprise: test hold at park step {step}");
        loop {
            std::thread::sleep(std::time::Duration::from_secs(3600));
        }
    }
}

/// Writes the park's receipt: the audit row binding its `task.suspend` row.
pub(crate) fn write_receipt(
    audit: &mut AuditLog,
    key: &TaskKey,
    body: &SuspendBody,
    suspend: Head,
) -> Result<Digest> {
    let receipt = SuspendReceipt {
        plan: key.plan.clone(),
        task_id: key.task.clone(),
        run_id: body.run_id.clone(),
        park: suspend.digest,
        journal_seq: suspend.seq,
        session_id: body.session_id.clone(),
        workspace_hash: body.workspace_hash,
        wake: body.wake.clone(),
    };
    let head = audit.append_row(&now_rfc3339(), &receipt)?;
    hold_at("receipt");
    Ok(head.digest)
}

/// Records one release (already done) against the park's receipt.
pub(crate) fn write_release(
    audit: &mut AuditLog,
    key: &TaskKey,
    run_id: &str,
    park: Digest,
    receipt: Digest,
    resource: Resource,
    detail: Value,
) -> Result<()> {
    let release = Release {
        plan: key.plan.clone(),
        task_id: key.task.clone(),
        run_id: run_id.to_owned(),
        park,
        receipt,
        resource,
        detail,
    };
    audit.append_row(&now_rfc3339(), &release)?;
    hold_at(resource.as_str());
    Ok(())
}

/// A release's detail (one of core's `*Released` types) as the row holds it.
pub(crate) fn detail(released: &impl serde::Serialize) -> Value {
    serde_json::to_value(released).expect("release details serialise")
}

/// The release detail of a worktree snapshotted and removed.
pub(crate) fn sandbox_detail(
    checkpoint: Option<&str>,
    path: &Path,
    removed: bool,
    files: Option<u64>,
) -> Value {
    detail(&SandboxReleased {
        checkpoint: checkpoint.map(str::to_owned),
        path: path.to_path_buf(),
        removed,
        files,
    })
}

/// A park with no live run: `reprise task suspend` parks an interrupted
/// task itself, or completes a park a crash cut short. The task's lock is
/// taken first, so no run can start it meanwhile.
pub fn park_directly(
    state: &StateDir,
    key_file: &reprise_store::key::KeyFile,
    task: &TaskKey,
    run_id: &str,
    request: &ParkRequest,
) -> Result<Parked> {
    let _lock = lock_task(state, task, run_id)?;
    if let Some(point) = unfinished_park(state, key_file, task)? {
        return complete_park(state, key_file, &point);
    }
    let rows_of_run = crate::resume::rows_of_run(state, task, run_id);
    let attempt = interrupted_attempt(&rows_of_run, task, run_id)?;
    let mut journal = reprise_store::journal::Journal::open(state, task)?;
    let head = journal.head()?;
    let grant = run_grant(state, run_id, task);
    let body = SuspendBody {
        run_id: run_id.to_owned(),
        attempt,
        session_id: last_session(&rows_of_run),
        workspace_hash: workspace_left(state, &rows_of_run)?,
        journal_head: head.map(|head| JournalHead {
            seq: head.seq,
            event_hash: head.digest,
        }),
        envelope: envelope_left(&rows_of_run),
        wake: request.wake.clone(),
        cause: request.cause,
        reason: request.reason.clone(),
        // What the agent asked is kept beside the chain.
        question: None,
        question_hash: request
            .question
            .as_deref()
            .map(|question| {
                reprise_store::replies::keep_agent_text(state, run_id, &task.task, question)
            })
            .transpose()?,
        requested_by: request.requested_by.clone(),
        grant_hash: grant.as_ref().map_or_else(String::new, |grant| {
            bound_grant(grant, task, run_id, head.map(|head| head.digest))
        }),
    };
    let suspend = journal.append_row(&now_rfc3339(), &body)?;
    if let Some(grant) = &grant
        && !body.grant_hash.is_empty()
    {
        write_agent_checkpoint(
            state,
            &mut journal,
            task,
            grant,
            (run_id, suspend.digest, &body.grant_hash),
        )?;
    }
    drop(journal);
    hold_at("suspend");
    let audit_summary = reprise_store::audit::read_audit(state, key_file)?;
    let point = crate::resume::latest_park(state, task, &audit_summary).ok_or_else(|| {
        EngineError::Park(format!(
            "the park of {task} was written but cannot be read back"
        ))
    })?;
    complete_park(state, key_file, &point)
}

/// The task's lock, for a park with no live run: refused while a run holds it.
fn lock_task(state: &StateDir, task: &TaskKey, run_id: &str) -> Result<HeldLock> {
    let holder = reprise_store::locks::Holder {
        run_id: run_id.to_owned(),
        pid: std::process::id(),
    };
    match reprise_store::locks::try_task_lock(state, task, &holder)? {
        Ok(lock) => Ok(lock),
        Err(other) => Err(EngineError::TaskBusy {
            task: task.to_string(),
            run: other.run_id,
            pid: other.pid,
        }),
    }
}

/// The task's latest park when a crash cut it short (to complete rather
/// than park again); a park already whole is refused.
fn unfinished_park(
    state: &StateDir,
    key_file: &reprise_store::key::KeyFile,
    task: &TaskKey,
) -> Result<Option<crate::resume::ParkPoint>> {
    let audit_summary = reprise_store::audit::read_audit(state, key_file)?;
    let Some(point) = crate::resume::latest_park(state, task, &audit_summary) else {
        return Ok(None);
    };
    if point.settled {
        return Ok(None);
    }
    let ledger = reprise_store::ledger::verify_ledger(state, &audit_summary)?;
    if point.is_complete(ledger.state_of(&point.run_id, task.task.as_str())) {
        return Err(EngineError::Park(format!(
            "task {task} is already parked (since {}); `reprise task resume {}` wakes it",
            point.at, task.task
        )));
    }
    Ok(Some(point))
}

/// The attempt the task's journal leaves it at in the run; a task not at
/// an attempt is taken up by `run --continue`, not parked.
fn interrupted_attempt(rows_of_run: &[JournalRow], task: &TaskKey, run_id: &str) -> Result<u32> {
    let parked_state = reprise_core::lifecycle::replay(
        rows_of_run.iter().map(|row| (row.kind.as_str(), &row.body)),
    );
    match parked_state {
        TaskState::Running { attempt, .. } | TaskState::Checkpointing { attempt, .. } => {
            Ok(attempt)
        }
        other => Err(EngineError::Park(format!(
            "task {task}'s journal leaves it {} in run {run_id}, not at an attempt: `reprise run --continue {run_id}` takes it up",
            other.name()
        ))),
    }
}

/// The run's `task.started` body, if its first row is one.
fn task_started(rows_of_run: &[JournalRow]) -> Option<TaskStarted> {
    rows_of_run
        .first()
        .and_then(|row| body_of::<TaskStarted>(&row.kind, &row.body))
}

/// The session of the run's last attempt: the one it opened or resumed.
fn last_session(rows_of_run: &[JournalRow]) -> Option<String> {
    let started = rows_of_run
        .iter()
        .rev()
        .find_map(|row| body_of::<AttemptStarted>(&row.kind, &row.body))?;
    match started.session {
        SessionUse::New { new } => new,
        SessionUse::Resume { resume } => Some(resume),
        SessionUse::Fork { new, .. } => new,
    }
}

/// The hash of the tree the task left (zero when its directory is gone).
fn workspace_left(state: &StateDir, rows_of_run: &[JournalRow]) -> Result<Digest> {
    match task_started(rows_of_run).map(|started| started.cwd) {
        Some(cwd) if cwd.is_dir() => Ok(reprise_store::workspace::hash_workspace_cached(
            &cwd,
            0,
            &state.workspace_cache_path(&cwd),
        )?
        .hash),
        _ => Ok(Digest::default()),
    }
}

/// The task's envelope as its journal records it: the process that held
/// the reservation is gone, so nothing is held and no headroom returns.
fn envelope_left(rows_of_run: &[JournalRow]) -> EnvelopeBalance {
    EnvelopeBalance {
        reserved_micro_usd: task_started(rows_of_run).and_then(|s| s.envelope_micro_usd),
        spent_micro_usd: rows_of_run
            .iter()
            .filter_map(|row| body_of::<AttemptFinished>(&row.kind, &row.body))
            .filter_map(|finished| finished.cost_micro_usd)
            .sum(),
        headroom_micro_usd: 0,
    }
}

/// The grant of `task` in the plan `run_id` ran (none when it cannot be read).
fn run_grant(
    state: &StateDir,
    run_id: &str,
    task: &TaskKey,
) -> Option<reprise_core::grant::GrantSet> {
    let run = crate::state::load_run(state, run_id).ok()?;
    let plan = crate::settings::load_plan(Path::new(&run.plan)).ok()?;
    plan.tasks()
        .iter()
        .find(|candidate| candidate.id == task.task)
        .map(|found| reprise_core::grant::grant_of(found, &plan))
}

/// Completes every park of `tasks` that a crash cut short (a live run's or
/// a direct one's), and says which it completed.
pub fn complete_cut_parks(
    state: &StateDir,
    key_file: &reprise_store::key::KeyFile,
    tasks: &[TaskKey],
) -> Result<Vec<Parked>> {
    let audit = reprise_store::audit::read_audit(state, key_file)?;
    let ledger = reprise_store::ledger::verify_ledger(state, &audit)?;
    let mut completed = Vec::new();
    for task in tasks {
        if let Some(point) = crate::resume::latest_park(state, task, &audit)
            && !point.settled
            && !point.is_complete(ledger.state_of(&point.run_id, task.task.as_str()))
        {
            completed.push(complete_park(state, key_file, &point)?);
        }
    }
    Ok(completed)
}

/// Finishes a park that has no live run to finish it: its receipt if it has
/// none, then every release not yet recorded (each done before it is
/// recorded), then the ledger's `suspended` and the run's record.
pub fn complete_park(
    state: &StateDir,
    key_file: &reprise_store::key::KeyFile,
    point: &crate::resume::ParkPoint,
) -> Result<Parked> {
    let task = &point.key;
    bind_cut_agent_checkpoint(state, point)?;
    let mut audit = AuditLog::open(state, key_file.clone())?;
    let suspend = Head {
        seq: point.seq,
        digest: point.park,
    };
    let receipt = match point.receipt {
        Some(receipt) => receipt,
        None => write_receipt(&mut audit, task, &point.body, suspend)?,
    };
    let released = release_the_rest(state, &mut audit, point, receipt)?;
    ledger_suspended(state, key_file, &mut audit, point)?;
    if let Ok(mut run) = crate::state::load_run(state, &point.run_id)
        && run.task(&task.task).is_some()
    {
        let record = run.task_mut(&task.task);
        record.state = TaskStatus::Suspended;
        record.reason = Some(format!("parked until {}", point.body.wake.describe()));
        record.wake = Some(point.body.wake.clone());
        run.save(state, true)?;
    }
    Ok(Parked {
        run_id: point.run_id.clone(),
        task: task.clone(),
        park: point.park,
        receipt,
        released,
        wake: point.body.wake.clone(),
    })
}

/// Gives back what the park has not yet recorded as given back, with no
/// live run: each release done, then recorded. Every release, in order.
fn release_the_rest(
    state: &StateDir,
    audit: &mut AuditLog,
    point: &crate::resume::ParkPoint,
    receipt: Digest,
) -> Result<Vec<(Resource, Value)>> {
    let mut released: Vec<(Resource, Value)> = point
        .released
        .iter()
        .map(|release| (release.resource, release.detail.clone()))
        .collect();
    for resource in point.missing_releases() {
        let detail = match resource {
            Resource::Process => detail(&ProcessReleased::gone(point.body.attempt)),
            Resource::Sandbox => release_parked_sandbox(state, point)?,
            Resource::Seat => detail(&SeatReleased::not_held()),
            Resource::Budget => detail(&BudgetReleased::not_held()),
        };
        write_release(
            audit,
            &point.key,
            &point.run_id,
            point.park,
            receipt,
            resource,
            detail.clone(),
        )?;
        released.push((resource, detail));
    }
    Ok(released)
}

/// The ledger's `suspended` for the parked task, once (and its seal).
fn ledger_suspended(
    state: &StateDir,
    key_file: &reprise_store::key::KeyFile,
    audit: &mut AuditLog,
    point: &crate::resume::ParkPoint,
) -> Result<()> {
    let task = &point.key.task;
    let verification = reprise_store::ledger::verify_ledger(
        state,
        &reprise_store::audit::read_audit(state, key_file)?,
    )?;
    let current = verification.state_of(&point.run_id, task.as_str());
    if current == Some(TaskStatus::Suspended) {
        return Ok(());
    }
    let mut ledger = reprise_store::ledger::Ledger::open(state)?;
    let head = ledger.transition(
        &now_rfc3339(),
        &point.run_id,
        task,
        current.unwrap_or(TaskStatus::Running),
        TaskStatus::Suspended,
        Some(&format!("parked until {}", point.body.wake.describe())),
    )?;
    reprise_store::audit::seal_ledger(audit, head, &now_rfc3339())?;
    Ok(())
}

/// Writes the agent checkpoint of a park a crash cut between its
/// `task.suspend` row and its `checkpoint.json`: the grant is read again
/// from the run's plan and written only when it binds to the hash the row
/// already holds (a plan changed since cannot produce it, and the resume
/// then refuses, as it must). Nothing for a park with no grant, or one
/// whose checkpoint is already bound.
fn bind_cut_agent_checkpoint(state: &StateDir, point: &crate::resume::ParkPoint) -> Result<()> {
    let body = &point.body;
    if body.grant_hash.is_empty() {
        return Ok(());
    }
    let rows = crate::resume::rows_of_run(state, &point.key, &point.run_id);
    let bound = rows.iter().any(|row| {
        body_of::<AgentCheckpointBound>(&row.kind, &row.body)
            .is_some_and(|bound| bound.park == point.park)
    });
    if bound {
        return Ok(());
    }
    let Some(grant) = run_grant(state, &point.run_id, &point.key) else {
        return Ok(());
    };
    let after = body.journal_head.as_ref().map(|head| head.event_hash);
    if bound_grant(&grant, &point.key, &point.run_id, after) != body.grant_hash {
        return Ok(());
    }
    let mut journal = reprise_store::journal::Journal::open(state, &point.key)?;
    write_agent_checkpoint(
        state,
        &mut journal,
        &point.key,
        &grant,
        (&point.run_id, point.park, &body.grant_hash),
    )
}

/// Snapshots a parked task's worktree (if it is still there) and removes it.
fn release_parked_sandbox(state: &StateDir, point: &crate::resume::ParkPoint) -> Result<Value> {
    let dir = state.worktree_dir(&point.run_id, &point.key.task);
    if !dir.exists() {
        return Ok(sandbox_detail(None, &dir, false, None));
    }
    let store = reprise_store::snapshot::SnapshotStore::open(
        &state.snapshot_dir(&point.run_id, &point.key.task),
        &dir,
        None,
        u64::MAX,
    )?;
    let checkpoint = store.take("parked")?;
    let mut journal = reprise_store::journal::Journal::open(state, &point.key)?;
    journal.append_row(
        &now_rfc3339(),
        &CheckpointTaken {
            run_id: point.run_id.clone(),
            attempt: point.body.attempt,
            label: "parked".to_owned(),
            checkpoint: checkpoint.id.clone(),
            tree: checkpoint.tree.clone(),
            files: checkpoint.manifest.files,
            bytes: checkpoint.manifest.bytes,
            // A park's snapshot names no files left out.
            skipped: None,
            workspace_hash: point.body.workspace_hash,
            reused: false,
            context: None,
            dependencies: None,
        },
    )?;
    // The repository as reprise recorded it, never as the worktree's own
    // `.git` (the agent's to rewrite) says.
    let repo = crate::linkage::Linkage::recorded(state, &dir)?
        .and_then(|linkage| linkage.common.parent().map(Path::to_path_buf));
    match repo {
        Some(repo) => crate::sandbox::remove_worktree(state, &repo, &dir)?,
        None => std::fs::remove_dir_all(&dir).map_err(|err| EngineError::Sandbox {
            task: point.key.to_string(),
            detail: format!("cannot remove the parked worktree: {err}"),
        })?,
    }
    Ok(sandbox_detail(
        Some(&checkpoint.id),
        &dir,
        true,
        Some(checkpoint.manifest.files),
    ))
}

/// The grant hash a park's `task.suspend` row carries: the task's
/// permissions bound to the task, the run and the journal row the park
/// follows (the row's own hash cannot be in it; `checkpoint.json` binds that).
pub(crate) fn bound_grant(
    grant: &reprise_core::grant::GrantSet,
    task: &TaskKey,
    run_id: &str,
    after: Option<Digest>,
) -> String {
    reprise_core::grant::grant_hash(grant, task.task.as_str(), run_id, after.unwrap_or_default())
        .map(|hash| hash.to_hex())
        .unwrap_or_default()
}

/// Writes the park's agent checkpoint (`checkpoint.json`): the grant bound
/// to the task, the run and the `task.suspend` row; then binds the file's
/// own hash into the journal (`task.agent_checkpoint`), so a file rewritten
/// later, even with its grant hash recomputed, is seen.
pub(crate) fn write_agent_checkpoint(
    state: &StateDir,
    journal: &mut reprise_store::journal::Journal,
    task: &TaskKey,
    grant: &reprise_core::grant::GrantSet,
    (run_id, park, grant_hash): (&str, Digest, &str),
) -> Result<()> {
    use reprise_store::agent_checkpoint::{AgentCheckpoint, write_checkpoint};
    let checkpoint =
        AgentCheckpoint::new(grant.clone(), task.task.clone(), run_id.to_owned(), park)
            .map_err(|err| EngineError::Park(err.to_string()))?;
    let own = checkpoint
        .own_hash()
        .map_err(|err| EngineError::Park(err.to_string()))?;
    write_checkpoint(state, task, &checkpoint).map_err(|err| EngineError::Park(err.to_string()))?;
    journal.append_row(
        &now_rfc3339(),
        &AgentCheckpointBound {
            run_id: run_id.to_owned(),
            park,
            checkpoint: own,
            grant_hash: grant_hash.to_owned(),
        },
    )?;
    Ok(())
}
