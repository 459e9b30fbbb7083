//! A task taken up again in a later process: after the run's process died
//! mid-task (`run --continue`), or when its park is resumed. What the task
//! did before is read back from its journal (the truth about it); the
//! lifecycle starts from the state those rows leave it in, and the row that
//! says so (`task.continued` or `task.resume`) is written before anything
//! else, with the policy it continues under: the attempt an interruption or
//! a park took back is not counted against `max_attempts`.

use reprise_agents::SessionMode;
use reprise_core::TaskKey;
use reprise_core::digest::Digest;
use reprise_core::lifecycle::{Effect, Policy, TaskEvent, TaskState, Terminal, replay, rows};
use reprise_core::outcome::InfraKind;
use reprise_core::record::JournalRow;
use reprise_core::retry::{Checkpoint as DecisionCheckpoint, DecisionInput, RetryMode, decide};
use reprise_store::state::{StateDir, now_rfc3339};
use reprise_store::suspension::{RESUME_KIND, RESUME_RECEIPT_KIND, ResumeBody, ResumeReceipt};
use serde_json::{Value, json};

use super::{NextAttempt, TaskResult, TaskRun};
use crate::checkpoints;
use crate::error::{EngineError, Result};
use crate::resume::ParkPoint;
use crate::state::AttemptSummary;

/// The template id a resume's decision records for the prompt a warm or
/// fork resume sends (`reprise_core::prompt::resume_prompt`).
const RESUME_TEMPLATE_ID: &str = "resume/v1";

/// How a task is taken up again.
#[derive(Debug, Clone)]
pub(crate) enum Continuation {
    /// The run's process died while the task ran.
    Interrupted,
    /// The run's stop (Ctrl-C, SIGTERM, SIGHUP) cancelled the task: it goes
    /// on as if the process had died where the stop caught it.
    Cancelled,
    /// Its park, checked by `resume::check_resume`, is resumed.
    Resume {
        point: Box<ParkPoint>,
        mode: Option<RetryMode>,
        approval: Option<Digest>,
    },
}

/// What the journal says of the task's attempts so far in the run.
#[derive(Debug, Default)]
pub(crate) struct TakenUp {
    pub(crate) attempts: Vec<AttemptSummary>,
    /// The latest attempt started.
    pub(crate) attempt: u32,
    pub(crate) budget_consumed: u32,
    /// Checkpoint ids with their workspace hashes.
    pub(crate) base_checkpoint: Option<(String, Digest)>,
    pub(crate) attempt_checkpoint: Option<(String, Digest)>,
    /// Each session's model, as the agent's end rows named it.
    pub(crate) session_models: std::collections::BTreeMap<String, String>,
}

/// The policy the rows leave the task under: `task.started`'s, as the
/// latest resume or continuation extended it.
fn policy_of(rows: &[JournalRow]) -> Option<Policy> {
    rows.iter()
        .filter(|row| {
            matches!(
                row.kind.as_str(),
                rows::TASK_STARTED | rows::RESUME | rows::CONTINUED
            )
        })
        .filter_map(|row| row.body.get("lifecycle"))
        .filter_map(|value| serde_json::from_value(value.clone()).ok())
        .next_back()
}

/// What `rows` (one run's rows of a task's journal) say of its attempts.
pub(crate) fn taken_up(rows: &[JournalRow]) -> TakenUp {
    let mut taken = TakenUp::default();
    for row in rows {
        match row.kind.as_str() {
            rows::ATTEMPT_STARTED => {
                taken.attempt = row
                    .body
                    .get("attempt")
                    .and_then(Value::as_u64)
                    .map_or(taken.attempt, |n| u32::try_from(n).unwrap_or(u32::MAX));
            }
            rows::ATTEMPT_FINISHED => {
                let mut body = row.body.clone();
                if let Some(object) = body.as_object_mut()
                    && let Some(n) = object.remove("attempt")
                {
                    object.insert("n".into(), n);
                    if object.get("accepted").and_then(Value::as_str) == Some("parked") {
                        object.insert("outcome".into(), json!("parked"));
                    }
                }
                if let Ok(summary) = serde_json::from_value::<AttemptSummary>(body) {
                    taken.attempts.push(summary);
                }
            }
            rows::BUDGET => taken.budget_consumed += 1,
            rows::AGENT_ENDED => {
                let text = |key| row.body.get(key).and_then(Value::as_str);
                if let (Some(session), Some(model)) = (text("session_id"), text("session_model")) {
                    taken
                        .session_models
                        .insert(session.to_owned(), model.to_owned());
                }
            }
            rows::CHECKPOINT_TAKEN => {
                let id = row.body.get("checkpoint").and_then(Value::as_str);
                let hash = row
                    .body
                    .get("workspace_hash")
                    .and_then(Value::as_str)
                    .and_then(|hex| Digest::from_hex(hex.as_bytes()));
                let label = row.body.get("label").and_then(Value::as_str).unwrap_or("");
                if let (Some(id), Some(hash)) = (id, hash)
                    && label.starts_with("before attempt")
                {
                    let found = Some((id.to_owned(), hash));
                    if taken.base_checkpoint.is_none() {
                        taken.base_checkpoint.clone_from(&found);
                    }
                    taken.attempt_checkpoint = found;
                }
            }
            _ => {}
        }
    }
    taken
}

/// The event hash of the latest `task.checkpoint` row (the agent's end).
pub(crate) fn last_agent_end(state: &StateDir, key: &TaskKey, run_id: &str) -> Option<Digest> {
    crate::resume::rows_of_run(state, key, run_id)
        .iter()
        .rev()
        .find(|row| row.kind == rows::AGENT_ENDED)
        .map(|row| row.event_hash)
}

/// The mode and session the latest `attempt.started` row named: the new
/// session's chosen id, the resumed one, or a fork's new one.
fn started_session(rows: &[JournalRow]) -> (&'static str, Option<String>) {
    let Some(row) = rows
        .iter()
        .rev()
        .find(|row| row.kind == rows::ATTEMPT_STARTED)
    else {
        return ("new", None);
    };
    let mode = match row.body.get("mode").and_then(Value::as_str) {
        Some("warm") => "warm",
        Some("fork") => "fork",
        Some("cold") => "cold",
        _ => "new",
    };
    let session = row.body.get("session").and_then(|session| {
        ["new", "resume"]
            .iter()
            .find_map(|key| session.get(*key).and_then(Value::as_str))
            .map(str::to_owned)
    });
    (mode, session)
}

impl TaskRun<'_> {
    /// Takes the task up where its journal left it in this run.
    pub(super) fn continue_task(
        &self,
        result: &mut TaskResult,
        continuation: &Continuation,
    ) -> Result<()> {
        let task = self.task;
        let key = TaskKey::new(self.plan.clone(), task.id.clone());
        let rows = crate::resume::rows_of_run(self.state, &key, self.run_id);
        let Some(policy) = policy_of(&rows) else {
            // Killed after the ledger had it running but before its
            // `task.started` (its worktree perhaps half made): nothing of
            // it was recorded, and it starts as a first start does.
            if matches!(
                continuation,
                Continuation::Interrupted | Continuation::Cancelled
            ) {
                self.discard_unstarted()?;
                return self.attempts(result);
            }
            return Err(EngineError::Lifecycle(format!(
                "task {key} has no task.started for run {} to continue from",
                self.run_id
            )));
        };
        // A resume queued in a live run may start long after the command
        // that asked was answered: what it relies on is checked again
        // before anything is made or written, and a refusal leaves the
        // task parked as it was.
        if let Continuation::Resume { point, .. } = continuation
            && let Err(refusal) =
                crate::resume::recheck_before_resume(self.state, &self.key, &key, point)
        {
            result.status = crate::state::TaskStatus::Suspended;
            result.reason = Some(refusal.to_string());
            return Ok(());
        }
        let mut state_now = replay(rows.iter().map(|row| (row.kind.as_str(), &row.body)));
        // A task the run's stop closed goes on from where the stop caught
        // it: the rows before its `task.finished` (cancelled) say where.
        let cancelled = state_now == TaskState::Finished(Terminal::Cancelled);
        if cancelled {
            let end = rows
                .iter()
                .rposition(|row| row.kind == rows::TASK_FINISHED)
                .unwrap_or(rows.len());
            state_now = replay(rows[..end].iter().map(|row| (row.kind.as_str(), &row.body)));
        }
        // Ended in its journal, killed before the ledger heard it: it ends
        // as its journal says, with nothing run again.
        if let TaskState::Finished(_) = state_now {
            return self.ended(result, &key, &rows);
        }
        // The worktree comes back at its own path (the CLIs key sessions by
        // directory): as it was, or from the task's base when a park
        // removed it (the park's snapshot then restores its files).
        let super::Materialised {
            cwd,
            isolated,
            mut journal,
            mut spine,
            mut audit,
            snapshots,
            budget,
            ..
        } = self.materialise(result)?;
        let taken = taken_up(&rows);
        let latest = taken.attempt;
        let session = started_session(&rows);
        let extended = |by: u32| Policy {
            max_attempts: policy.max_attempts + by,
            ..policy
        };
        let mut reused = None;
        // A close the kill cut short (not a stop's: that goes on below).
        let closing_as = match state_now {
            TaskState::Closing(terminal) if terminal != Terminal::Cancelled => Some(terminal),
            _ => None,
        };
        let mut closing = None;
        // An attempt the stop cut short (its agent or gates killed, judged
        // as the infrastructure failure that was): it is diagnosed and
        // retried as an interrupted one is, and not counted.
        let stopped_attempt = match state_now {
            TaskState::Diagnosing { attempt } if cancelled => taken
                .attempts
                .iter()
                .rfind(|summary| summary.n == attempt && !summary.judged)
                .and_then(|summary| {
                    let kind = summary
                        .infra_kind
                        .as_deref()
                        .and_then(InfraKind::from_name)?;
                    Some((summary.clone(), kind))
                }),
            _ => None,
        };
        let (policy, start, first, next) = match continuation {
            Continuation::Interrupted | Continuation::Cancelled if stopped_attempt.is_some() => {
                let policy = extended(1);
                journal.append(
                    rows::CONTINUED,
                    &now_rfc3339(),
                    &json!({"run_id": self.run_id, "from": state_now, "lifecycle": policy,
                            "interrupted_attempt": latest, "cancelled": true}),
                )?;
                (policy, None, Vec::new(), None)
            }
            // Killed while it closed (committing its result, keeping its
            // failed tree, restoring its base): the close goes on from what
            // its rows show done.
            Continuation::Interrupted | Continuation::Cancelled if closing_as.is_some() => {
                let terminal = closing_as.expect("the guard saw it");
                let since = rows
                    .iter()
                    .rposition(|row| {
                        matches!(
                            row.kind.as_str(),
                            rows::ATTEMPT_FINISHED | rows::DIAGNOSIS | rows::BUDGET
                        )
                    })
                    .map_or(0, |at| at + 1);
                let done: Vec<&str> = rows[since..].iter().map(|row| row.kind.as_str()).collect();
                // A result recorded already is the task's, as recorded.
                if let Some(row) = rows[since..].iter().rfind(|row| row.kind == rows::RESULT) {
                    result.output = crate::run::result_output(&row.body);
                    result.reason = row
                        .body
                        .get("error")
                        .and_then(Value::as_str)
                        .map(str::to_owned);
                }
                if let Some(gaps) = rows[since..]
                    .iter()
                    .rfind(|row| row.kind == rows::PARTIAL)
                    .and_then(|row| serde_json::from_value(row.body["gaps"].clone()).ok())
                {
                    result.gaps = gaps;
                }
                let effects =
                    reprise_core::lifecycle::closing_left(&policy, terminal, latest, &done);
                let head = journal.append(
                    rows::CONTINUED,
                    &now_rfc3339(),
                    &json!({"run_id": self.run_id, "from": state_now, "lifecycle": policy,
                            "interrupted_attempt": latest}),
                )?;
                closing = Some((terminal, effects, head));
                (policy, None, vec![(state_now, latest)], None)
            }
            Continuation::Interrupted | Continuation::Cancelled => {
                let (from, agent_ended) = match state_now {
                    TaskState::Running { attempt, resumed } => {
                        (Some(TaskState::Running { attempt, resumed }), false)
                    }
                    TaskState::Judging { attempt } => (Some(TaskState::Judging { attempt }), true),
                    _ => (None, false),
                };
                match from {
                    Some(from) => {
                        let policy = extended(1);
                        journal.append(
                            rows::CONTINUED,
                            &now_rfc3339(),
                            &json!({"run_id": self.run_id, "from": from, "lifecycle": policy,
                                    "interrupted_attempt": latest}),
                        )?;
                        (
                            policy,
                            Some((from, latest, session.clone(), agent_ended)),
                            Vec::new(),
                            None,
                        )
                    }
                    None => {
                        // Between attempts, or before the first: the next
                        // attempt starts over, cold (its decision, if any,
                        // was lost with the process).
                        let attempt = match state_now {
                            TaskState::Checkpointing { attempt, .. } => attempt,
                            TaskState::Queued => 1,
                            _ => latest + 1,
                        };
                        let from = TaskState::Checkpointing {
                            attempt,
                            resumed: false,
                        };
                        let policy = extended(u32::from(attempt > policy.max_attempts));
                        journal.append(
                            rows::CONTINUED,
                            &now_rfc3339(),
                            &json!({"run_id": self.run_id, "from": from, "lifecycle": policy,
                                    "interrupted_attempt": latest}),
                        )?;
                        let next = if attempt == 1 {
                            NextAttempt {
                                mode: "new",
                                session: self.new_session(),
                                prompt: task.prompt.clone(),
                            }
                        } else {
                            self.cold(attempt, None)
                        };
                        (policy, None, vec![(from, attempt)], Some(next))
                    }
                }
            }
            Continuation::Resume {
                point,
                mode,
                approval,
            } => {
                let approval = point
                    .approval
                    .as_ref()
                    .map(|(digest, _)| *digest)
                    .or(*approval);
                let note = point.approval.as_ref().and_then(|(_, note)| note.clone());
                let TaskState::Suspended { attempt } = state_now else {
                    return Err(EngineError::Lifecycle(format!(
                        "task {key}'s journal leaves it {}, not parked: nothing to resume",
                        state_now.name()
                    )));
                };
                // The files come back from the park's snapshot; when they
                // hash as parked, that snapshot is the next attempt's
                // checkpoint too.
                let mut snapshot = None;
                if let (Some(store), Some(id)) = (&snapshots, point.snapshot()) {
                    let checkpoint = store.find(&id)?;
                    // The store is bound to nothing: only a checkpoint the
                    // journal recorded in this run comes back.
                    let recorded =
                        crate::checkpoint_binding::recorded_checkpoints(self.state, &key)?;
                    if let Err(why) =
                        crate::checkpoint_binding::bind(self.run_id, &checkpoint, &recorded)
                    {
                        return Err(EngineError::Checkpoint(format!(
                            "the park's checkpoint {} of {key} is not one its journal recorded ({}); nothing was restored",
                            checkpoint.id,
                            why.explain()
                        )));
                    }
                    let restored = checkpoints::restore(
                        store,
                        &checkpoint,
                        &mut journal,
                        &mut audit,
                        &key,
                        self.run_id,
                        "resume",
                        Some(point.body.workspace_hash),
                        || self.workspace_hash(&cwd),
                    )?;
                    self.warn_unless_matched(restored);
                    snapshot = Some((checkpoint, restored));
                }
                let live = match &snapshot {
                    Some((_, restored)) => restored.workspace_hash,
                    None => self.workspace_hash(&cwd)?,
                };
                // The park's session; one its row could not name yet (the
                // CLI names a new session when it ends) is the one the
                // stopped attempt's `attempt.finished`, after the park, names.
                let parked_session = point.body.session_id.clone().or_else(|| {
                    rows.iter()
                        .skip_while(|row| row.event_hash != point.park)
                        .find(|row| row.kind == rows::ATTEMPT_FINISHED)
                        .and_then(|row| row.body.get("session_id"))
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                });
                let requested =
                    mode.unwrap_or_else(|| self.requested_mode_only(parked_session.as_deref()));
                let park_checkpoint = DecisionCheckpoint {
                    session_id: parked_session.clone(),
                    // A park's session is checked on the way back (below).
                    session_saved: true,
                    workspace_hash: point.body.workspace_hash,
                    event_hash: point.park,
                };
                // The resume's mode is a retry's decision, made by the same
                // pure function from the park's row and the adapter.
                let input = DecisionInput {
                    requested,
                    capability: self.adapter.strategy().capability(),
                    checkpoint: Some(&park_checkpoint),
                    live_workspace_hash: live,
                    fresh_pinned: mode.is_none() && task.agent_restart_between_retries,
                    chain_verified: true,
                };
                let mut decision = decide(input);
                let session_ok = parked_session
                    .as_deref()
                    .is_some_and(|id| self.ensure_session(id, &cwd));
                if decision.mode != RetryMode::Cold && !session_ok {
                    decision = reprise_core::retry::session_unavailable(decision);
                }
                let resume_prompt = reprise_core::prompt::resume_prompt(
                    point.body.reason.as_deref(),
                    note.as_deref(),
                );
                let record = reprise_core::retry::DecisionRecord::new(
                    &task.id,
                    self.adapter.name(),
                    &input,
                    decision,
                    Some((
                        RESUME_TEMPLATE_ID,
                        reprise_core::digest::tagged_sha256(
                            reprise_core::prompt::INSTRUCTION_TAG,
                            &[resume_prompt.as_bytes()],
                        ),
                    )),
                );
                // Why it is not warm, whether asked for or forced.
                let mode_reason = match (decision.downgrade_reason, decision.mode) {
                    (Some(reason), _) => Some(reason.as_str()),
                    (None, RetryMode::Warm) => None,
                    (None, _) if mode.is_some() => Some("requested"),
                    (None, _) => Some("retry_policy"),
                };
                let parked_running = attempt > point.body.attempt;
                let policy = extended(u32::from(parked_running));
                let body = ResumeBody {
                    run_id: self.run_id.to_owned(),
                    park: point.park,
                    receipt: point.receipt.expect("a checked park has its receipt"),
                    attempt,
                    requested: mode.map(|mode| mode.as_str().to_owned()),
                    mode: decision.mode.as_str().to_owned(),
                    downgrade_reason: decision
                        .downgrade_reason
                        .map(|reason| reason.as_str().to_owned()),
                    workspace_hash: live,
                    approval_digest: approval,
                    grant_hash: point.body.grant_hash.clone(),
                };
                // The append checks again what it relies on: the park
                // unsettled, its approval there and bound by the chain.
                crate::resume::recheck_before_resume(self.state, &self.key, &key, point)
                    .map_err(|refusal| EngineError::Park(refusal.to_string()))?;
                // The decision is recorded as a retry's is: a
                // `retry.decision` row, sealed in the spine, bound in the
                // audit chain; the resume row and the task's metadata name
                // its hash.
                let decision_hash = crate::records::record_decision(
                    &mut journal,
                    &mut spine,
                    &mut audit,
                    self.run_id,
                    attempt,
                    &record,
                    None,
                )?;
                result.metadata = record
                    .metadata(None)
                    .map_err(|err| EngineError::Park(err.to_string()))?;
                let mut row = serde_json::to_value(&body).expect("a resume body serialises");
                row["lifecycle"] = serde_json::to_value(policy).expect("a policy serialises");
                row["decision_hash"] = json!(decision_hash);
                if let Some(reason) = mode_reason {
                    row["mode_reason"] = json!(reason);
                }
                let head = journal.append(RESUME_KIND, &now_rfc3339(), &row)?;
                crate::park::hold_at("resume");
                let receipt = audit.append(
                    RESUME_RECEIPT_KIND,
                    &now_rfc3339(),
                    &serde_json::to_value(ResumeReceipt {
                        plan: key.plan.clone(),
                        task_id: key.task.clone(),
                        run_id: self.run_id.to_owned(),
                        park: point.park,
                        suspend_receipt: body.receipt,
                        resume: head.digest,
                        mode: body.mode,
                        workspace_hash: live,
                        approval_digest: approval,
                    })
                    .expect("a resume receipt serialises"),
                )?;
                // The grant the park bound goes on with the task.
                if !point.body.grant_hash.is_empty() {
                    audit.append(
                        reprise_store::suspension::GRANT_CONTINUATION_KIND,
                        &now_rfc3339(),
                        &serde_json::to_value(reprise_store::suspension::GrantContinuation {
                            plan: key.plan.clone(),
                            task_id: key.task.clone(),
                            run_id: self.run_id.to_owned(),
                            resume_receipt: receipt.digest,
                            grant_hash: point.body.grant_hash.clone(),
                        })
                        .expect("a grant continuation serialises"),
                    )?;
                }
                // The journal ties the two halves together itself: the
                // checkpoint the resume checked, its grant, the park's row
                // and the resume's.
                if let Some(checkpoint) = point.checkpoint {
                    journal.append(
                        reprise_store::agent_checkpoint::CONTINUATION_KIND,
                        &now_rfc3339(),
                        &json!({"run_id": self.run_id, "park": point.park, "resume": head.digest,
                                "checkpoint": checkpoint, "grant_hash": point.body.grant_hash}),
                    )?;
                }
                // The `.resumed` marker binds the resume receipt: the park
                // (and its approval) cannot be used again.
                // Another marker there was checked against the chain before
                // the resume and settled nothing: it is replaced.
                reprise_store::approvals::mark_resumed(
                    self.state,
                    &key,
                    point.park,
                    receipt.digest,
                    true,
                )
                .map_err(|err| EngineError::Park(err.to_string()))?;
                let next = match (decision.mode, parked_session) {
                    (RetryMode::Warm, Some(session_id)) => NextAttempt {
                        mode: "warm",
                        session: SessionMode::Resume { session_id },
                        prompt: resume_prompt,
                    },
                    (RetryMode::Fork, Some(from)) => NextAttempt {
                        mode: "fork",
                        session: SessionMode::Fork {
                            from,
                            new_session_id: None,
                        },
                        prompt: resume_prompt,
                    },
                    _ => self.cold(attempt, None),
                };
                reused = snapshot
                    .filter(|(_, restored)| restored.matches)
                    .map(|(checkpoint, restored)| (checkpoint, restored.workspace_hash));
                (
                    policy,
                    None,
                    vec![(TaskState::Suspended { attempt }, attempt)],
                    Some(next),
                )
            }
        };
        let env = self.task_env();
        let cold = next.as_ref().is_some_and(|next| next.mode == "cold");
        let next = next.unwrap_or_else(|| self.cold(latest + 1, None));
        let gate_files = self.gate_files(&cwd, isolated)?;
        let mut executor = super::Executor::new(
            self,
            key,
            cwd,
            isolated,
            (journal, spine, audit),
            snapshots,
            env,
            budget,
            next,
            None,
            result,
        );
        executor.gate_files = gate_files;
        executor.take_up(taken)?;
        if let Some((checkpoint, hash)) = reused {
            executor.restored_to(checkpoint, hash);
        }
        if let Some((terminal, effects, head)) = closing {
            if effects.contains(&Effect::CommitResult { attempt: latest })
                && let Some(base) = self.base.as_deref().filter(|_| isolated)
            {
                executor.orphan =
                    crate::sandbox::orphaned_result(self.workspace, self.run_id, &task.id, base)?;
            }
            executor.closing(latest, head);
            return executor.drive_with(&policy, TaskState::Closing(terminal), effects);
        }
        if let Some((summary, kind)) = stopped_attempt {
            let attempt = summary.n;
            executor.stopped(summary, kind);
            return executor.drive_with(
                &policy,
                TaskState::Diagnosing { attempt },
                vec![Effect::Diagnose { attempt }],
            );
        }
        if let Some((from, attempt, session, agent_ended)) = start {
            executor.interrupted(attempt, session, agent_ended)?;
            return match from {
                TaskState::Running { .. } => executor.drive_from(
                    &policy,
                    from,
                    vec![TaskEvent::AgentEnded {
                        session_gone: false,
                    }],
                ),
                // Its gates run again, on the interrupted attempt's report.
                _ => executor.drive_with(&policy, from, vec![Effect::RunGates { attempt }]),
            };
        }
        let (from, attempt) = first[0];
        match from {
            TaskState::Suspended { .. } => {
                executor.drive_from(&policy, from, vec![TaskEvent::Resumed { cold }])
            }
            _ => executor.drive_with(&policy, from, vec![Effect::TakeCheckpoint { attempt }]),
        }
    }

    /// Clears what a first start left before its `task.started`: a
    /// worktree git registered (its files perhaps never checked out).
    fn discard_unstarted(&self) -> Result<()> {
        let Some(repo) = self.workspace.repo() else {
            return Ok(());
        };
        if !self.workspace.isolates(self.task) {
            return Ok(());
        }
        let dir = self.state.worktree_dir(self.run_id, &self.task.id);
        if std::fs::symlink_metadata(&dir).is_err() {
            return Ok(());
        }
        if crate::linkage::Linkage::recorded(self.state, &dir)?.is_some() {
            crate::sandbox::remove_worktree(self.state, repo, &dir)?;
        } else {
            // Registered by git, never recorded by reprise: its directory
            // goes, and git forgets it below.
            std::fs::remove_dir_all(&dir).map_err(|err| EngineError::Sandbox {
                task: self.task.id.to_string(),
                detail: format!("cannot remove {}: {err}", dir.display()),
            })?;
        }
        crate::sandbox::prune_stale(self.state, self.workspace)?;
        Ok(())
    }

    /// A task whose journal recorded its end in this run: its result as the
    /// rows say, and its journal sealed if the kill came before the seal.
    fn ended(&self, result: &mut TaskResult, key: &TaskKey, rows: &[JournalRow]) -> Result<()> {
        let last = |kind: &str| rows.iter().rev().find(|row| row.kind == kind);
        let finished = last(rows::TASK_FINISHED).expect("a finished task has its row");
        let taken = taken_up(rows);
        result.status = finished
            .body
            .get("state")
            .and_then(|state| serde_json::from_value(state.clone()).ok())
            .unwrap_or(crate::state::TaskStatus::Failed);
        result.reason = finished
            .body
            .get("reason")
            .and_then(Value::as_str)
            .map(str::to_owned);
        result.judged = taken.attempts.last().is_some_and(|attempt| attempt.judged);
        result.spent_micro_usd = taken
            .attempts
            .iter()
            .filter_map(|attempt| attempt.cost_micro_usd)
            .sum();
        result.attempts = taken.attempts;
        result.output = last(rows::RESULT).and_then(|row| crate::run::result_output(&row.body));
        result.gaps = last(rows::PARTIAL)
            .and_then(|row| row.body.get("gaps"))
            .and_then(|gaps| serde_json::from_value(gaps.clone()).ok())
            .unwrap_or_default();
        result.cwd = last(rows::TASK_STARTED)
            .and_then(|row| row.body.get("cwd"))
            .and_then(Value::as_str)
            .map(std::path::PathBuf::from);
        let head = reprise_store::journal::Journal::open(self.state, key)?.head()?;
        let sealed = head.is_some_and(|head| {
            self.prior_seals
                .iter()
                .any(|seal| seal.seq == head.seq && seal.digest == head.digest)
        });
        if !sealed {
            let mut audit = reprise_store::audit::AuditLog::open(self.state, self.key.clone())?;
            reprise_store::audit::seal_journal_after(
                self.state,
                &mut audit,
                key,
                &now_rfc3339(),
                &self.prior_seals,
            )?;
        }
        Ok(())
    }
}
