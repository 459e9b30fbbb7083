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
use reprise_core::record::Head;
use reprise_store::audit::AuditLog;
use reprise_store::state::{StateDir, now_rfc3339};
use reprise_store::suspension::{
    ParkCause, RELEASE_KIND, Release, Requester, Resource, SUSPEND_RECEIPT_KIND, SuspendBody,
    SuspendReceipt, Wake,
};
use serde_json::{Value, json};

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
    let head = audit.append(SUSPEND_RECEIPT_KIND, &now_rfc3339(), &to_value(&receipt))?;
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
    audit.append(RELEASE_KIND, &now_rfc3339(), &to_value(&release))?;
    hold_at(resource.as_str());
    Ok(())
}

fn to_value(value: &impl serde::Serialize) -> Value {
    serde_json::to_value(value).expect("park records serialise")
}

/// The release detail of a worktree snapshotted and removed.
pub(crate) fn sandbox_detail(
    checkpoint: Option<&str>,
    path: &Path,
    removed: bool,
    files: Option<u64>,
) -> Value {
    json!({"checkpoint": checkpoint, "path": path, "removed": removed, "files": files})
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
    use reprise_core::lifecycle::{TaskState, replay, rows};
    use reprise_store::suspension::{EnvelopeBalance, JournalHead, SUSPEND_KIND};
    let holder = reprise_store::locks::Holder {
        run_id: run_id.to_owned(),
        pid: std::process::id(),
    };
    let _lock = match reprise_store::locks::try_task_lock(state, task, &holder)? {
        Ok(lock) => lock,
        Err(other) => {
            return Err(EngineError::TaskBusy {
                task: task.to_string(),
                run: other.run_id,
                pid: other.pid,
            });
        }
    };
    let audit_summary = reprise_store::audit::read_audit(state, key_file)?;
    if let Some(point) = crate::resume::latest_park(state, task, &audit_summary)
        && !point.settled
    {
        let ledger = reprise_store::ledger::verify_ledger(state, &audit_summary)?;
        if point.is_complete(ledger.state_of(&point.run_id, task.task.as_str())) {
            return Err(EngineError::Park(format!(
                "task {task} is already parked (since {}); `reprise task resume {}` wakes it",
                point.at, task.task
            )));
        }
        return complete_park(state, key_file, &point);
    }
    let rows_of_run = crate::resume::rows_of_run(state, task, run_id);
    let parked_state = replay(rows_of_run.iter().map(|row| (row.kind.as_str(), &row.body)));
    let attempt = match parked_state {
        TaskState::Running { attempt, .. } | TaskState::Checkpointing { attempt, .. } => attempt,
        other => {
            return Err(EngineError::Park(format!(
                "task {task}'s journal leaves it {} in run {run_id}, not at an attempt: `reprise run --continue {run_id}` takes it up",
                other.name()
            )));
        }
    };
    let started = rows_of_run.first();
    let cwd = started
        .and_then(|row| row.body.get("cwd"))
        .and_then(Value::as_str)
        .map(std::path::PathBuf::from);
    let session_id = rows_of_run
        .iter()
        .rev()
        .find(|row| row.kind == rows::ATTEMPT_STARTED)
        .and_then(|row| row.body.get("session"))
        .and_then(|session| {
            ["new", "resume"]
                .iter()
                .find_map(|key| session.get(*key).and_then(Value::as_str))
        })
        .map(str::to_owned);
    let workspace_hash = match &cwd {
        Some(cwd) if cwd.is_dir() => {
            reprise_store::workspace::hash_workspace_cached(
                cwd,
                0,
                &state.workspace_cache_path(cwd),
            )?
            .hash
        }
        _ => Digest::default(),
    };
    let spent: u64 = rows_of_run
        .iter()
        .filter(|row| row.kind == rows::ATTEMPT_FINISHED)
        .filter_map(|row| row.body.get("cost_micro_usd").and_then(Value::as_u64))
        .sum();
    let reserved = started
        .and_then(|row| row.body.get("envelope_micro_usd"))
        .and_then(Value::as_u64);
    let mut journal = reprise_store::journal::Journal::open(state, task)?;
    let head = journal.head()?;
    // The grant, from the plan the run ran (none when it cannot be read).
    let grant = crate::state::load_run(state, run_id)
        .ok()
        .and_then(|run| crate::settings::load_plan(Path::new(&run.plan)).ok())
        .and_then(|plan| {
            plan.tasks()
                .iter()
                .find(|candidate| candidate.id == task.task)
                .map(|found| reprise_core::grant::grant_of(found, &plan))
        });
    let body = SuspendBody {
        run_id: run_id.to_owned(),
        attempt,
        session_id,
        workspace_hash,
        journal_head: head.map(|head| JournalHead {
            seq: head.seq,
            event_hash: head.digest,
        }),
        // The process that held the reservation is gone: nothing is held.
        envelope: EnvelopeBalance {
            reserved_micro_usd: reserved,
            spent_micro_usd: spent,
            headroom_micro_usd: 0,
        },
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
    let suspend = journal.append(SUSPEND_KIND, &now_rfc3339(), &to_value(&body))?;
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
    let mut released: Vec<(Resource, Value)> = point
        .released
        .iter()
        .map(|release| (release.resource, release.detail.clone()))
        .collect();
    for resource in point.missing_releases() {
        let detail = match resource {
            Resource::Process => {
                json!({"stopped": false, "reaped": true, "attempt": point.body.attempt,
                       "note": "no live process: the run that drove it had ended"})
            }
            Resource::Sandbox => release_parked_sandbox(state, point)?,
            Resource::Seat => json!({"held": false, "note": "no live run held a seat for it"}),
            Resource::Budget => json!({"returned_micro_usd": 0,
                                       "note": "no live run held a reservation for it"}),
        };
        write_release(
            &mut audit,
            task,
            &point.run_id,
            point.park,
            receipt,
            resource,
            detail.clone(),
        )?;
        released.push((resource, detail));
    }
    // The ledger's `suspended`, once.
    let verification = reprise_store::ledger::verify_ledger(
        state,
        &reprise_store::audit::read_audit(state, key_file)?,
    )?;
    let current = verification
        .state_of(&point.run_id, task.task.as_str())
        .map(str::to_owned);
    if current.as_deref() != Some("suspended") {
        let mut ledger = reprise_store::ledger::Ledger::open(state)?;
        let head = ledger.transition(
            &now_rfc3339(),
            &point.run_id,
            &task.task,
            current.as_deref().unwrap_or("running"),
            "suspended",
            Some(&format!("parked until {}", point.body.wake.describe())),
        )?;
        reprise_store::audit::seal_ledger(&mut audit, head, &now_rfc3339())?;
    }
    if let Ok(mut run) = crate::state::load_run(state, &point.run_id)
        && run.task(&task.task).is_some()
    {
        let record = run.task_mut(&task.task);
        record.state = crate::state::TaskStatus::Suspended;
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
        row.kind == reprise_store::agent_checkpoint::BOUND_KIND
            && row.body.get("park").and_then(Value::as_str) == Some(point.park.to_hex().as_str())
    });
    if bound {
        return Ok(());
    }
    let Some(grant) = crate::state::load_run(state, &point.run_id)
        .ok()
        .and_then(|run| crate::settings::load_plan(Path::new(&run.plan)).ok())
        .and_then(|plan| {
            plan.tasks()
                .iter()
                .find(|candidate| candidate.id == point.key.task)
                .map(|found| reprise_core::grant::grant_of(found, &plan))
        })
    else {
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
    journal.append(
        crate::checkpoints::TAKEN_KIND,
        &now_rfc3339(),
        &json!({"run_id": point.run_id, "attempt": point.body.attempt, "label": "parked",
                "checkpoint": checkpoint.id, "tree": checkpoint.tree,
                "files": checkpoint.manifest.files, "bytes": checkpoint.manifest.bytes,
                "workspace_hash": point.body.workspace_hash}),
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
    use reprise_store::agent_checkpoint::{AgentCheckpoint, BOUND_KIND, write_checkpoint};
    let checkpoint =
        AgentCheckpoint::new(grant.clone(), task.task.clone(), run_id.to_owned(), park)
            .map_err(|err| EngineError::Park(err.to_string()))?;
    let own = checkpoint
        .own_hash()
        .map_err(|err| EngineError::Park(err.to_string()))?;
    write_checkpoint(state, task, &checkpoint).map_err(|err| EngineError::Park(err.to_string()))?;
    journal.append(
        BOUND_KIND,
        &now_rfc3339(),
        &json!({"run_id": run_id, "park": park, "checkpoint": own, "grant_hash": grant_hash}),
    )?;
    Ok(())
}
