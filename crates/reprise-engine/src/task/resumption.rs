//! A parked task resumed: the park's files restored from its snapshot, the
//! resume's mode decided as a retry's is, and the rows that bind the resume
//! to its park written (`retry.decision`, `task.resume`, the audit chain's
//! receipt and grant continuation, the journal's continuation row) before
//! the `.resumed` marker settles the park.

use reprise_core::digest::Digest;
use reprise_core::lifecycle::TaskState;
use reprise_core::retry::{
    Checkpoint as DecisionCheckpoint, Decision, DecisionInput, DecisionRecord, RetryMode, decide,
};
use reprise_core::rows::{
    AttemptFinished, GrantContinuation, GrantContinued, ResumeBody, ResumeReceipt, body_of,
};
use reprise_store::snapshot::Checkpoint;
use reprise_store::state::now_rfc3339;

use super::continuation::{Found, GoOn, Resumption, extended};
use super::{Materialised, NextAttempt, TaskResult, TaskRun};
use crate::checkpoints;
use crate::error::{EngineError, Result};
use crate::resume::ParkPoint;
use reprise_core::lifecycle::rows;

/// The template id a resume's decision records for the prompt a warm or
/// fork resume sends (`reprise_core::prompt::resume_prompt`).
const RESUME_TEMPLATE_ID: &str = "resume/v1";

/// What a resume decided: the retry decision and its record, the parked
/// session, and the prompt a warm or fork resume sends.
struct Chosen {
    decision: Decision,
    record: DecisionRecord,
    parked_session: Option<String>,
    prompt: String,
}

/// What the resume's rows say besides the decision.
struct ResumeFacts {
    attempt: u32,
    /// The mode the resume asked for, if it asked.
    asked: Option<RetryMode>,
    /// The workspace's hash as the resume finds it.
    live: Digest,
    approval: Option<Digest>,
    policy: reprise_core::lifecycle::Policy,
}

impl TaskRun<'_> {
    /// Resumes the park `point`: its files back, its mode decided and
    /// recorded, the resume bound to the park.
    pub(super) fn resume_park(
        &self,
        found: &Found,
        materialised: &mut Materialised,
        point: &ParkPoint,
        asked: Option<RetryMode>,
        approval: Option<Digest>,
        result: &mut TaskResult,
    ) -> Result<Resumption> {
        let approval = point
            .approval
            .as_ref()
            .map(|(digest, _)| *digest)
            .or(approval);
        let note = point.approval.as_ref().and_then(|(_, note)| note.clone());
        let TaskState::Suspended { attempt } = found.state_now else {
            return Err(EngineError::Lifecycle(format!(
                "task {}'s journal leaves it {}, not parked: nothing to resume",
                found.key,
                found.state_now.name()
            )));
        };
        let snapshot = self.restore_parked(found, materialised, point)?;
        let live = match &snapshot {
            Some((_, restored)) => restored.workspace_hash,
            None => self.workspace_hash(&materialised.cwd)?,
        };
        let chosen = self.choose_resume(found, point, asked, live, &materialised.cwd, note);
        let parked_running = attempt > point.body.attempt;
        let facts = ResumeFacts {
            attempt,
            asked,
            live,
            approval,
            policy: extended(found.policy, u32::from(parked_running)),
        };
        self.record_resume(found, materialised, point, &facts, &chosen, result)?;
        let next =
            NextAttempt::continuing(chosen.decision.mode, chosen.parked_session, chosen.prompt)
                .unwrap_or_else(|| self.cold(attempt, None));
        let reused = snapshot
            .filter(|(_, restored)| restored.matches)
            .map(|(checkpoint, restored)| (checkpoint, restored.workspace_hash));
        Ok(Resumption {
            policy: facts.policy,
            go_on: GoOn::Resumed { attempt },
            next: Some(next),
            reused,
        })
    }

    /// The files come back from the park's snapshot; when they hash as
    /// parked, that snapshot is the next attempt's checkpoint too.
    fn restore_parked(
        &self,
        found: &Found,
        materialised: &mut Materialised,
        point: &ParkPoint,
    ) -> Result<Option<(Checkpoint, checkpoints::Restored)>> {
        let (Some(store), Some(id)) = (&materialised.snapshots, point.snapshot()) else {
            return Ok(None);
        };
        let key = &found.key;
        // On a fleet worker the park's checkpoints come from the remote.
        if store.find(&id).is_err() {
            self.fetch_park_checkpoints(store)?;
        }
        let checkpoint = store.find(&id)?;
        // The store is bound to nothing: only a checkpoint the journal
        // recorded in this run comes back.
        let recorded = crate::checkpoint_binding::recorded_checkpoints(self.state, key)?;
        if let Err(why) = crate::checkpoint_binding::bind(self.run_id, &checkpoint, &recorded) {
            return Err(EngineError::Checkpoint(format!(
                "the park's checkpoint {} of {key} is not one its journal recorded ({}); nothing was restored",
                checkpoint.id,
                why.explain()
            )));
        }
        let cwd = &materialised.cwd;
        let restored = checkpoints::restore(
            store,
            &checkpoint,
            &mut materialised.journal,
            // A worker's rollback is bound by the coordinator, from its row.
            materialised.signer.local_audit(),
            key,
            self.run_id,
            "resume",
            Some(point.body.workspace_hash),
            || self.workspace_hash(cwd),
        )?;
        self.warn_unless_matched(restored);
        Ok(Some((checkpoint, restored)))
    }

    /// The resume's mode, a retry's decision made by the same pure
    /// function from the park's row and the adapter; a session that cannot
    /// be had makes it cold.
    fn choose_resume(
        &self,
        found: &Found,
        point: &ParkPoint,
        asked: Option<RetryMode>,
        live: Digest,
        cwd: &std::path::Path,
        note: Option<String>,
    ) -> Chosen {
        // The park's session; one its row could not name yet (the CLI
        // names a new session when it ends) is the one the stopped
        // attempt's `attempt.finished`, after the park, names.
        let parked_session = point.body.session_id.clone().or_else(|| {
            found
                .rows
                .iter()
                .skip_while(|row| row.event_hash != point.park)
                .find(|row| row.kind == rows::ATTEMPT_FINISHED)
                .and_then(|row| body_of::<AttemptFinished>(&row.kind, &row.body))
                .and_then(|finished| finished.session_id)
        });
        let requested =
            asked.unwrap_or_else(|| self.requested_mode_only(parked_session.as_deref()));
        let park_checkpoint = DecisionCheckpoint {
            session_id: parked_session.clone(),
            // A park's session is checked on the way back (below).
            session_saved: true,
            workspace_hash: point.body.workspace_hash,
            event_hash: point.park,
        };
        let input = DecisionInput {
            requested,
            capability: self.adapter.strategy().capability(),
            checkpoint: Some(&park_checkpoint),
            live_workspace_hash: live,
            fresh_pinned: asked.is_none() && self.task.agent_restart_between_retries,
            chain_verified: true,
            session_elsewhere: false,
        };
        let mut decision = decide(input);
        let session_ok = parked_session
            .as_deref()
            .is_some_and(|id| self.ensure_session(id, cwd));
        if decision.mode != RetryMode::Cold && !session_ok {
            decision = reprise_core::retry::session_unavailable(decision);
        }
        let prompt =
            reprise_core::prompt::resume_prompt(point.body.reason.as_deref(), note.as_deref());
        let record = DecisionRecord::new(
            &self.task.id,
            self.adapter.name(),
            &input,
            decision,
            Some((
                RESUME_TEMPLATE_ID,
                reprise_core::digest::tagged_sha256(
                    reprise_core::prompt::INSTRUCTION_TAG,
                    &[prompt.as_bytes()],
                ),
            )),
        );
        Chosen {
            decision,
            record,
            parked_session,
            prompt,
        }
    }

    /// Records the resume: checked again, its decision as a retry's is (a
    /// `retry.decision` row, sealed in the spine, bound in the audit
    /// chain), then the `task.resume` row naming the decision's hash, then
    /// what binds it to its park.
    fn record_resume(
        &self,
        found: &Found,
        materialised: &mut Materialised,
        point: &ParkPoint,
        facts: &ResumeFacts,
        chosen: &Chosen,
        result: &mut TaskResult,
    ) -> Result<()> {
        let decision = chosen.decision;
        let receipt = point.receipt.expect("a checked park has its receipt");
        // Why it is not warm, whether asked for or forced.
        let mode_reason = match (decision.downgrade_reason, decision.mode) {
            (Some(reason), _) => Some(reason.as_str()),
            (None, RetryMode::Warm) => None,
            (None, _) if facts.asked.is_some() => Some("requested"),
            (None, _) => Some("retry_policy"),
        };
        // The append checks again what it relies on: the park unsettled,
        // its approval there and bound by the chain.
        self.recheck_resume(&found.key, point)
            .map_err(|refusal| EngineError::Park(refusal.to_string()))?;
        let Materialised {
            journal, signer, ..
        } = materialised;
        let decision_hash = crate::records::record_decision(
            journal,
            signer,
            self.run_id,
            facts.attempt,
            &chosen.record,
            None,
        )?;
        result.metadata = chosen
            .record
            .metadata(None)
            .map_err(|err| EngineError::Park(err.to_string()))?;
        let body = ResumeBody {
            run_id: self.run_id.to_owned(),
            park: point.park,
            receipt,
            attempt: facts.attempt,
            requested: facts.asked.map(|mode| mode.as_str().to_owned()),
            mode: decision.mode.as_str().to_owned(),
            downgrade_reason: decision
                .downgrade_reason
                .map(|reason| reason.as_str().to_owned()),
            workspace_hash: facts.live,
            approval_digest: facts.approval,
            grant_hash: point.body.grant_hash.clone(),
            lifecycle: Some(facts.policy),
            decision_hash: Some(decision_hash),
            mode_reason: mode_reason.map(str::to_owned),
        };
        let head = journal.append_row(&now_rfc3339(), &body)?;
        crate::park::hold_at("resume");
        self.bind_resume(found, materialised, point, body, head.digest)
    }

    /// What binds the resume (its `task.resume` row at `resume`) to its
    /// park: the audit chain's receipt, the grant going on with the task and
    /// the `.resumed` marker (written here, or by the coordinator when it
    /// takes the row from a worker), and the journal's continuation row.
    fn bind_resume(
        &self,
        found: &Found,
        materialised: &mut Materialised,
        point: &ParkPoint,
        body: ResumeBody,
        resume: Digest,
    ) -> Result<()> {
        let receipt = match materialised.signer.local_audit() {
            Some(audit) => Some(bind_resume_in_audit(audit, &found.key, &body, resume)?),
            None => None,
        };
        // The journal ties the two halves together itself: the checkpoint
        // the resume checked, its grant, the park's row and the resume's.
        if let Some(checkpoint) = point.checkpoint {
            materialised.journal.append_row(
                &now_rfc3339(),
                &GrantContinued {
                    run_id: self.run_id.to_owned(),
                    park: point.park,
                    resume,
                    checkpoint,
                    grant_hash: point.body.grant_hash.clone(),
                },
            )?;
        }
        match receipt {
            Some(receipt) => mark_resumed(self.state, &found.key, point.park, receipt),
            None => Ok(()),
        }
    }
}

/// The `.resumed` marker binds the resume's receipt: the park (and its
/// approval) cannot be used again. Another marker there was checked against
/// the chain before the resume and settled nothing: it is replaced.
pub(crate) fn mark_resumed(
    state: &reprise_store::state::StateDir,
    key: &reprise_core::TaskKey,
    park: Digest,
    receipt: Digest,
) -> Result<()> {
    reprise_store::approvals::mark_resumed(state, key, park, receipt, true)
        .map_err(|err| EngineError::Park(err.to_string()))
}

/// The audit chain's half of a resume (its `task.resume` row `body` at
/// `resume`): the resume's receipt (returned), then the grant going on with
/// the task. Used by a local resume and by the coordinator's ingest of a
/// worker's.
pub(crate) fn bind_resume_in_audit(
    audit: &mut reprise_store::audit::AuditLog,
    key: &reprise_core::TaskKey,
    body: &ResumeBody,
    resume: Digest,
) -> Result<Digest> {
    let receipt = audit.append_row(
        &now_rfc3339(),
        &ResumeReceipt {
            plan: key.plan.clone(),
            task_id: key.task.clone(),
            run_id: body.run_id.clone(),
            park: body.park,
            suspend_receipt: body.receipt,
            resume,
            mode: body.mode.clone(),
            workspace_hash: body.workspace_hash,
            approval_digest: body.approval_digest,
        },
    )?;
    if !body.grant_hash.is_empty() {
        audit.append_row(
            &now_rfc3339(),
            &GrantContinuation {
                plan: key.plan.clone(),
                task_id: key.task.clone(),
                run_id: body.run_id.clone(),
                resume_receipt: receipt.digest,
                grant_hash: body.grant_hash.clone(),
            },
        )?;
    }
    Ok(receipt.digest)
}
