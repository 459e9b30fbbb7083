//! Taking a parked task back (DESIGN.md section 9): the checks a resume
//! must pass before it writes anything, and where the task's latest park
//! stands. Every refusal here happens before a byte is written: the journal
//! stays as it was.

use std::fs;

use reprise_core::TaskKey;
use reprise_core::digest::Digest;
use reprise_core::record::JournalRow;
use reprise_core::rows::{ResumeBody, SandboxReleased, TaskStatus, body_of};
use reprise_store::audit::{AuditSummary, read_audit};
use reprise_store::journal::verify_journal_with;
use reprise_store::key::KeyFile;
use reprise_store::state::StateDir;
use reprise_store::suspension::{Release, Resource, SUSPEND_KIND, SuspendBody, SuspensionAudit};

/// A task's latest park, as its journal and the audit chain record it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParkPoint {
    pub key: TaskKey,
    pub run_id: String,
    /// The `task.suspend` row's event hash and seq.
    pub park: Digest,
    pub seq: u64,
    pub at: String,
    pub body: SuspendBody,
    /// The receipt binding it, when the chain has one.
    pub receipt: Option<Digest>,
    /// What its releases gave back, in the order recorded.
    pub released: Vec<Release>,
    /// The park was settled by a resume.
    pub settled: bool,
    /// The approval a resume binds (its digest and note), once checked.
    pub approval: Option<(Digest, Option<String>)>,
    /// The own hash of the park's `checkpoint.json`, once checked against
    /// the chain (a park that bound a grant).
    pub checkpoint: Option<Digest>,
}

impl ParkPoint {
    /// The resources the park has not (yet) recorded as released.
    pub fn missing_releases(&self) -> Vec<Resource> {
        Resource::ALL
            .into_iter()
            .filter(|resource| !self.released.iter().any(|r| r.resource == *resource))
            .collect()
    }

    /// The snapshot to restore on resume: the one the park took of a
    /// worktree it removed. A task run in place kept its directory (the
    /// user's), and whatever happened there while it was parked stands.
    pub fn snapshot(&self) -> Option<String> {
        let release = self
            .released
            .iter()
            .find(|release| release.resource == Resource::Sandbox)?;
        let sandbox = <SandboxReleased as serde::Deserialize>::deserialize(&release.detail).ok()?;
        sandbox.restorable().map(str::to_owned)
    }

    /// Whether every step of the park is recorded: its receipt, each
    /// release, and the ledger's `suspended`.
    pub fn is_complete(&self, ledger_state: Option<TaskStatus>) -> bool {
        self.receipt.is_some()
            && self.missing_releases().is_empty()
            && ledger_state == Some(TaskStatus::Suspended)
    }
}

/// Reads `task`'s journal rows as recorded (verification is separate).
pub(crate) fn journal_rows(state: &StateDir, task: &TaskKey) -> Vec<JournalRow> {
    state
        .existing_journal_path(task)
        .ok()
        .and_then(|path| fs::read_to_string(path).ok())
        .map(|text| {
            text.lines()
                .filter_map(|line| serde_json::from_str(line).ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The task's rows of `run_id`, from its latest `task.started` there (rows
/// naming another run after it are left out).
pub(crate) fn rows_of_run(state: &StateDir, task: &TaskKey, run_id: &str) -> Vec<JournalRow> {
    let rows = journal_rows(state, task);
    let Some(start) = rows.iter().rposition(|row| {
        row.kind == reprise_core::lifecycle::rows::TASK_STARTED
            && row.body.get("run_id").and_then(|id| id.as_str()) == Some(run_id)
    }) else {
        return Vec::new();
    };
    rows[start..]
        .iter()
        .filter(|row| {
            row.body
                .get("run_id")
                .and_then(|id| id.as_str())
                .is_none_or(|id| id == run_id)
        })
        .cloned()
        .collect()
}

/// The latest park of `task` as the journal and the audit chain under `key`
/// record it, when it is the park at `park` (a fleet worker's park, named
/// by what it shipped); `None` when the task's latest park is another.
pub(crate) fn latest_park_at(
    state: &StateDir,
    key: &KeyFile,
    task: &TaskKey,
    park: Digest,
) -> crate::error::Result<Option<ParkPoint>> {
    let audit = read_audit(state, key)?;
    Ok(latest_park(state, task, &audit).filter(|point| point.park == park))
}

/// The latest park of `task`, with its receipt and releases from `audit`;
/// `None` when it was never parked.
pub fn latest_park(state: &StateDir, task: &TaskKey, audit: &AuditSummary) -> Option<ParkPoint> {
    let rows = journal_rows(state, task);
    let index = rows.iter().rposition(|row| row.kind == SUSPEND_KIND)?;
    let row = &rows[index];
    let body: SuspendBody = serde_json::from_value(row.body.clone()).ok()?;
    let park = row.event_hash;
    let settled = rows[index + 1..].iter().any(|later| {
        body_of::<ResumeBody>(&later.kind, &later.body).is_some_and(|resume| resume.park == park)
    });
    let mut receipt = None;
    let mut released = Vec::new();
    for audit_row in audit.suspensions_of(task) {
        match &audit_row.row {
            SuspensionAudit::SuspendReceipt(bound) if bound.park == park => {
                receipt = Some(audit_row.digest);
            }
            SuspensionAudit::Release(release)
                if release.park == park && Some(release.receipt) == receipt =>
            {
                released.push(release.clone());
            }
            _ => {}
        }
    }
    Some(ParkPoint {
        key: task.clone(),
        run_id: body.run_id.clone(),
        park,
        seq: row.seq,
        at: row.at.clone(),
        body,
        receipt,
        released,
        settled,
        approval: None,
        checkpoint: None,
    })
}

/// Why a resume is refused (before anything is written).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refusal(pub String);

/// The checks of a resume: the task's latest park exists, is unsettled and
/// complete, its journal verifies, and its receipt (the one given, or the
/// chain's) binds this very park of this task. Returns the park to resume.
pub fn check_resume(
    state: &StateDir,
    key: &KeyFile,
    task: &TaskKey,
    given_receipt: Option<Digest>,
) -> Result<ParkPoint, Refusal> {
    let refuse = |message: String| Err(Refusal(message));
    let audit = read_audit(state, key).map_err(|err| Refusal(err.to_string()))?;
    if !audit.ok() {
        return refuse(
            "the audit chain does not verify; `reprise audit verify` says why (nothing resumed)"
                .to_owned(),
        );
    }
    let Some(point) = latest_park(state, task, &audit) else {
        return refuse(format!(
            "task {task} was never parked; `reprise task list-suspended` lists parked tasks"
        ));
    };
    if point.settled {
        return refuse(format!(
            "the park of {task} (parked {}) is already settled by a resume; park it again first",
            point.at
        ));
    }
    check_journal(state, task, &audit)?;
    if let Some(given) = given_receipt {
        check_receipt(&audit, task, &point, given)?;
    }
    check_released(state, &audit, task, &point)?;
    let checkpoint_hash = check_grant(state, task, &point)?;
    let digest = check_approval(state, key, &audit, task, &point)?;
    check_snapshot(state, task, &point)?;
    let mut point = point;
    point.checkpoint = checkpoint_hash;
    if let Some(digest) = digest {
        let note = reprise_store::approvals::read_approval(state, key, task, point.park)
            .ok()
            .flatten()
            .and_then(|approval| approval.note);
        point.approval = Some((digest, note));
    }
    Ok(point)
}

/// The task's journal verifies; a torn last row is named as such, with its
/// repair.
fn check_journal(state: &StateDir, task: &TaskKey, audit: &AuditSummary) -> Result<(), Refusal> {
    let refuse = |message: String| Err(Refusal(message));
    let verification =
        verify_journal_with(state, task, audit).map_err(|err| Refusal(err.to_string()))?;
    match verification.chain.first_problem() {
        None => {}
        // A crash cut the last row: the repair removes exactly that.
        Some(fault) if fault.reason == reprise_core::chain::Reason::TornTail => {
            return refuse(format!(
                "the journal of {task} ends in a torn row (a crash mid-write); `reprise replay repair {task}` cuts it, then resume again (nothing resumed)"
            ));
        }
        Some(_) => {
            return refuse(format!(
                "the journal of {task} does not verify; `reprise journal verify {task}` says where (nothing resumed)"
            ));
        }
    }
    Ok(())
}

/// The receipt given binds this very park of this task.
fn check_receipt(
    audit: &AuditSummary,
    task: &TaskKey,
    point: &ParkPoint,
    given: Digest,
) -> Result<(), Refusal> {
    let refuse = |message: String| Err(Refusal(message));
    let found = audit.suspensions.iter().find(|row| row.digest == given);
    match found.map(|row| &row.row) {
        None => {
            return refuse(format!(
                "receipt {} is not in the audit chain; `reprise task list-suspended --json` shows the park's receipt",
                given.to_hex()
            ));
        }
        Some(SuspensionAudit::SuspendReceipt(bound)) => {
            let bound_task = TaskKey::new(bound.plan.clone(), bound.task_id.clone());
            if &bound_task != task {
                return refuse(format!(
                    "receipt {} binds a park of task {bound_task}, not of {task}",
                    given.to_hex()
                ));
            }
            if bound.park != point.park {
                return refuse(format!(
                    "receipt {} binds another park of {task} (journal row {}), not its latest",
                    given.to_hex(),
                    bound.journal_seq
                ));
            }
        }
        Some(_) => {
            return refuse(format!(
                "{} is not a suspend receipt in the audit chain",
                given.to_hex()
            ));
        }
    }
    Ok(())
}

/// The park is complete: its receipt in the audit chain, the seat and the
/// budget released, the ledger saying suspended.
fn check_released(
    state: &StateDir,
    audit: &AuditSummary,
    task: &TaskKey,
    point: &ParkPoint,
) -> Result<(), Refusal> {
    let refuse = |message: String| Err(Refusal(message));
    if point.receipt.is_none() {
        return refuse(format!(
            "the park of {task} has no receipt in the audit chain: it was cut short; `reprise task suspend {}` completes it",
            task.task
        ));
    }
    let ledger = reprise_store::ledger::verify_ledger(state, audit)
        .map_err(|err| Refusal(err.to_string()))?;
    let missing = point.missing_releases();
    let ledger_state = ledger.state_of(&point.run_id, task.task.as_str());
    if missing.is_empty() && ledger_state != Some(TaskStatus::Suspended) {
        return refuse(format!(
            "the park of {task} is incomplete (the ledger does not say suspended yet); `reprise task suspend {}` completes it",
            task.task
        ));
    }
    if !missing.is_empty() {
        return refuse(format!(
            "the park of {task} is incomplete (not yet released: {}); `reprise task suspend {}` completes it",
            missing
                .iter()
                .map(|resource| resource.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            task.task
        ));
    }
    Ok(())
}

/// The checkpoint must be the one the chain bound: its grant the one the
/// `task.suspend` row hashed, its own hash the one the journal recorded at
/// the park (a file rewritten without the key, its grant hash recomputed,
/// is refused here). Then the permissions may not have narrowed while it
/// was parked: the plan the run ran, now, against it. Returns the
/// checkpoint's own hash, when the park bound a grant.
fn check_grant(
    state: &StateDir,
    task: &TaskKey,
    point: &ParkPoint,
) -> Result<Option<Digest>, Refusal> {
    let refuse = |message: String| Err(Refusal(message));
    let mut checkpoint_hash = None;
    if !point.body.grant_hash.is_empty() {
        let checkpoint = reprise_store::agent_checkpoint::read_checkpoint(state, task)
            .map_err(|err| Refusal(format!("{err}; nothing resumed")))?
            .filter(|checkpoint| checkpoint.park == point.park)
            .ok_or_else(|| {
                Refusal(format!(
                    "the park of {task} bound a grant but its checkpoint.json is missing or names another park; nothing resumed"
                ))
            })?;
        let after = point.body.journal_head.as_ref().map(|head| head.event_hash);
        let own = checkpoint
            .own_hash()
            .map_err(|err| Refusal(err.to_string()))?;
        let bound_own = journal_rows(state, task)
            .iter()
            .filter(|row| row.kind == reprise_store::agent_checkpoint::BOUND_KIND)
            .filter(|row| {
                row.body.get("park").and_then(|park| park.as_str())
                    == Some(point.park.to_hex().as_str())
            })
            .filter_map(|row| row.body.get("checkpoint").and_then(|hash| hash.as_str()))
            .all(|hex| hex == own.to_hex());
        if !checkpoint
            .matches_suspend_row(&point.body.grant_hash, after)
            .unwrap_or(false)
            || !bound_own
        {
            return refuse(format!(
                "the checkpoint.json of {task} is not the one its park bound (it was changed after the park; `reprise audit verify-suspension {}` says so); nothing resumed",
                task.task
            ));
        }
        checkpoint_hash = Some(own);
        let run =
            crate::state::load_run(state, &point.run_id).map_err(|err| Refusal(err.to_string()))?;
        let plan = crate::settings::load_plan(std::path::Path::new(&run.plan))
            .map_err(|err| Refusal(err.to_string()))?;
        let now = plan
            .tasks()
            .iter()
            .find(|candidate| candidate.id == task.task)
            .map(|found| reprise_core::grant::grant_of(found, &plan))
            .ok_or_else(|| {
                Refusal(format!(
                    "the plan {} no longer has task {}",
                    run.plan, task.task
                ))
            })?;
        if let Some(why) = reprise_core::grant::narrowed(&checkpoint.grant, &now) {
            return refuse(format!(
                "the permissions of {task} narrowed while it was parked ({why}); restore them in {} to resume it",
                run.plan
            ));
        }
    }
    Ok(checkpoint_hash)
}

/// A park until approval needs its signed approval; any other binds one
/// that exists. A `.resumed` marker means another resume settled it.
/// Returns the approval's digest, if there is one.
fn check_approval(
    state: &StateDir,
    key: &KeyFile,
    audit: &AuditSummary,
    task: &TaskKey,
    point: &ParkPoint,
) -> Result<Option<Digest>, Refusal> {
    let refuse = |message: String| Err(Refusal(message));
    let waits = point.body.wake == reprise_store::suspension::Wake::Approval;
    let digest = reprise_store::approvals::approval_for_resume(state, key, task, point.park, waits)
        .map_err(|err| Refusal(err.to_string()))?;
    // The approval file is beside the chain: the one the resume binds must
    // be the one a `task.approval` row of the audit chain names for this
    // park (a file copied from a backup, or from a copy of this state
    // directory, is not).
    if let Some(digest) = digest
        && !approval_bound(audit, task, point.park, digest)
    {
        return refuse(format!(
            "the approval of {task}'s park is not bound by the audit chain (no task.approval row names it): it was copied here, not written by `reprise approve`; remove {} and approve again (nothing resumed)",
            reprise_store::approvals::approval_path(state, task, point.park).display()
        ));
    }
    Ok(digest)
}

/// Whether the audit chain holds a `task.approval` row binding `digest` to
/// `task`'s park `park`.
fn approval_bound(audit: &AuditSummary, task: &TaskKey, park: Digest, digest: Digest) -> bool {
    audit.approvals.iter().any(|row| {
        row.body.park == park
            && row.body.approval == digest
            && row.body.plan == task.plan
            && row.body.task_id == task.task
    })
}

/// The park's snapshot (of the worktree it removed), checked before
/// anything is written: in its store, recorded by the journal in the park's
/// run with the same tree and manifest, its commit intact. A snapshot that
/// fails here would fail the restore after the resume had written.
fn check_snapshot(state: &StateDir, task: &TaskKey, point: &ParkPoint) -> Result<(), Refusal> {
    let Some(id) = point.snapshot() else {
        return Ok(());
    };
    let refuse = |why: String| {
        Err(Refusal(format!(
            "the park's snapshot {} of {task} {why}; its files cannot be restored as parked (nothing resumed)",
            &id[..id.len().min(12)]
        )))
    };
    let dir = state.snapshot_dir(&point.run_id, &task.task);
    if !dir.join("HEAD").is_file() {
        return refuse(format!("is gone (no store at {})", dir.display()));
    }
    let store =
        match reprise_store::snapshot::SnapshotStore::open(&dir, state.root(), None, u64::MAX) {
            Ok(store) => store,
            Err(err) => return refuse(format!("cannot be read ({err})")),
        };
    let checkpoint = match store.find(&id) {
        Ok(checkpoint) => checkpoint,
        Err(err) => return refuse(format!("cannot be read ({err})")),
    };
    let recorded = crate::checkpoint_binding::recorded_checkpoints(state, task)
        .map_err(|err| Refusal(err.to_string()))?;
    if let Err(why) = crate::checkpoint_binding::bind(&point.run_id, &checkpoint, &recorded) {
        return refuse(format!(
            "is not the one its journal recorded ({})",
            why.explain()
        ));
    }
    match crate::checkpoint_binding::object_intact(&store, &checkpoint) {
        Ok(true) => Ok(()),
        Ok(false) => refuse("has a commit object that does not hash to its id".to_owned()),
        Err(err) => refuse(format!("cannot be read ({err})")),
    }
}

/// The checks the `task.resume` append itself relies on, made again where
/// it happens (the task's own thread, which may run long after the command
/// that asked): the park is still the task's latest and unsettled (in the
/// journal, and by no marker the chain binds), and the approval it binds is
/// still there, signed and bound by the audit chain.
pub(crate) fn recheck_before_resume(
    state: &StateDir,
    key: &KeyFile,
    task: &TaskKey,
    point: &ParkPoint,
) -> Result<(), Refusal> {
    let refuse = |why: String| {
        Err(Refusal(format!(
            "the resume of {task} was refused where it writes: {why} (nothing resumed)"
        )))
    };
    let audit = read_audit(state, key).map_err(|err| Refusal(err.to_string()))?;
    if !audit.ok() {
        return refuse("the audit chain does not verify".to_owned());
    }
    match latest_park(state, task, &audit) {
        Some(latest) if latest.park == point.park && !latest.settled => {}
        Some(latest) if latest.park == point.park => {
            return refuse("its park is already settled by a resume".to_owned());
        }
        _ => return refuse("its park is no longer the task's latest".to_owned()),
    }
    let waits = point.body.wake == reprise_store::suspension::Wake::Approval;
    let digest = reprise_store::approvals::approval_for_resume(state, key, task, point.park, waits)
        .map_err(|err| Refusal(format!("{err}")))?;
    if let Some(digest) = digest
        && !approval_bound(&audit, task, point.park, digest)
    {
        return refuse("its approval is not bound by the audit chain".to_owned());
    }
    let expected = point.approval.as_ref().map(|(digest, _)| *digest);
    if digest != expected {
        return refuse("its approval changed since the resume was asked for".to_owned());
    }
    Ok(())
}
