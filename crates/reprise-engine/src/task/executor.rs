//! The executor of a task's lifecycle: the core's transition says what to
//! do next ([`reprise_core::lifecycle`]); this performs each effect, records
//! it in the task's journal, and hands back the event it produced. Nothing
//! here decides what comes next.

use std::collections::VecDeque;
use std::fs;
use std::path::PathBuf;
use std::time::Instant;

use reprise_agents::{
    AttemptOutcome, AttemptReport, AttemptRequest, CancelToken, InfraKind, STREAM_KEEP_BYTES,
    SessionMode, Watch,
};
use reprise_core::TaskKey;
use reprise_core::budget::RetryBudget;
use reprise_core::digest::Digest;
use reprise_core::lifecycle::{
    Effect, Failure, Judgement, Policy, RollbackReason, RollbackTarget, TaskEvent, TaskState,
    Terminal, rows, transition,
};
use reprise_core::outcome::AttemptOutcome as Classified;
use reprise_core::pool::Claim;
use reprise_core::record::Head;
use reprise_core::recovery::{Diagnosis, Strategy, Symptoms, diagnose};
use reprise_core::retry::{DecisionRecord, RetryMode, failed_decision_metadata};
use reprise_store::audit::{AuditLog, seal_journal_after};
use reprise_store::journal::{Journal, Spine};
use reprise_store::logs::keep_attempt_logs;
use reprise_store::snapshot::{Checkpoint, SnapshotStore};
use reprise_store::state::now_rfc3339;
use serde_json::{Value, json};

use super::{
    Chains, NextAttempt, Previous, RetryBasis, TaskResult, TaskRun, attempt_body, session_json,
};
use crate::checkpoints;
use crate::error::{EngineError, Result};
use crate::events::{Event, Phase};
use crate::gates::GateRun;
use crate::pool::AttemptHold;
use crate::records::{VerifiedPrefix, record_decision};
use crate::recovery;
use crate::state::{AttemptSummary, TaskStatus, WaitReason, Waiting};

/// Journal row kind of a retry the budget refused.
pub(crate) const BUDGET_REFUSED_KIND: &str = "retry.budget_refused";

/// A stop recorded before the running agent was halted.
enum Halted {
    /// The park's `task.suspend` row and its receipt.
    Park(Box<RecordedPark>),
    /// The pause's `task.pause` row, and the answer to whoever asked.
    Pause(RecordedPause, Option<crate::park::ParkReply>),
}

/// A park's first steps, durable: its `task.suspend` row, its agent
/// checkpoint and its receipt in the audit chain.
struct RecordedPark {
    body: reprise_store::suspension::SuspendBody,
    head: Head,
    receipt: Digest,
    reply: Option<crate::park::ParkReply>,
}

/// A pause's row, durable.
struct RecordedPause {
    head: Head,
    workspace_hash: Digest,
    session_id: Option<String>,
    upgrade_after: Option<std::time::Duration>,
}

/// What one task's effects work on, from its first attempt to its end.
pub(super) struct Executor<'r, 'a> {
    pub(super) run: &'r TaskRun<'a>,
    pub(super) key: TaskKey,
    pub(super) cwd: PathBuf,
    pub(super) isolated: bool,
    pub(super) journal: Journal,
    pub(super) spine: Spine,
    pub(super) audit: AuditLog,
    pub(super) snapshots: Option<SnapshotStore>,
    pub(super) env: Vec<(String, String)>,
    pub(super) budget: Option<RetryBudget>,
    /// What the next attempt sends.
    pub(super) next: NextAttempt,
    /// What the latest judged (or carried) attempt said.
    pub(super) previous: Option<Previous>,
    pub(super) result: &'r mut TaskResult,
    /// The checkpoint before the first attempt (the task's base) and the
    /// one before the latest, each with its workspace hash.
    base_checkpoint: Option<(Checkpoint, Digest)>,
    attempt_checkpoint: Option<(Checkpoint, Digest)>,
    /// The checkpoint the tree was just restored to (its hash checked), for
    /// the next attempt's checkpoint to reuse instead of taking it again.
    restored: Option<(Checkpoint, Digest)>,
    /// The attempt under way: its number, report, start and scratch dir.
    attempt: u32,
    report: Option<AttemptReport>,
    started: Option<Instant>,
    tmp: Option<PathBuf>,
    sandboxed: bool,
    /// The event hash of the row written when the latest attempt's agent ended.
    agent_ended: Option<Digest>,
    summary: Option<AttemptSummary>,
    classified: Option<Classified>,
    diagnosis: Option<Diagnosis>,
    /// The latest judged attempt's evidence, and how many judged attempts in
    /// a row have had it.
    last_evidence: Option<recovery::Evidence>,
    same_in_a_row: u32,
    /// When the latest attempt's agent ended (its last request went out).
    agent_ended_at: Option<Instant>,
    /// The journal's head after the latest attempt: a result commit names it.
    last_head: Option<Head>,
    /// How much of the journal this run has verified already.
    verified: Option<VerifiedPrefix>,
    /// The warm or fork decision the running attempt was sent under, for the
    /// fall-back when the CLI says the session is gone.
    last_decision: Option<DecisionRecord>,
    /// The last attempt was stopped at its share of the pool while the
    /// pool had more: the next claims all that is free, in its turn.
    share_ran_out: bool,
    /// The next attempt's wall-clock limit when it is not the task's.
    next_timeout: Option<std::time::Duration>,
    /// The model the next attempt asks for, when it is not the plan's.
    next_model: Option<String>,
    /// Each session's model as its CLI named it (the journal's
    /// `task.checkpoint` rows say it): a resume asks for exactly that one.
    session_models: std::collections::BTreeMap<String, String>,
    /// What the latest decision changed besides the mode.
    modification: Option<Value>,
    /// A park stopped the running agent; its session, if it had one.
    agent_stopped: bool,
    parked_session: Option<String>,
    /// The stop recorded while the agent still ran, before it was halted:
    /// a park's row and receipt, or a pause's row.
    halted: Option<Halted>,
    /// The policy the lifecycle is driven under, and the attempts unpauses
    /// added to it.
    policy: Option<Policy>,
    extra_attempts: u32,
    /// The files the gates are judged by, as the base has them, and the
    /// top of the tree they are in.
    pub(super) gate_files: Option<(crate::gate_files::GateFiles, PathBuf)>,
    /// What the latest attempt changed of them.
    protected_changed: Option<reprise_core::recovery::Anomaly>,
    /// What the latest attempt's agent wrote outside `allowed_paths`, once
    /// looked for (before its gates ran).
    outside: Option<Option<reprise_core::recovery::Anomaly>>,
    /// The journal failed verification (its torn tail was cut) since the
    /// last retry decision: the next one trusts no checkpoint.
    chain_broken: bool,
    /// The commit a crash left on the result branch before the result was
    /// recorded, which the commit replaces (a continued task's).
    pub(super) orphan: Option<String>,
}

impl<'r, 'a> Executor<'r, 'a> {
    #[expect(clippy::too_many_arguments)]
    pub(super) fn new(
        run: &'r TaskRun<'a>,
        key: TaskKey,
        cwd: PathBuf,
        isolated: bool,
        (journal, spine, audit): (Journal, Spine, AuditLog),
        snapshots: Option<SnapshotStore>,
        env: Vec<(String, String)>,
        budget: Option<RetryBudget>,
        next: NextAttempt,
        previous: Option<Previous>,
        result: &'r mut TaskResult,
    ) -> Self {
        Self {
            run,
            key,
            cwd,
            isolated,
            journal,
            spine,
            audit,
            snapshots,
            env,
            budget,
            next,
            previous,
            result,
            base_checkpoint: None,
            attempt_checkpoint: None,
            restored: None,
            attempt: 0,
            report: None,
            started: None,
            tmp: None,
            sandboxed: false,
            agent_ended: None,
            summary: None,
            classified: None,
            diagnosis: None,
            last_evidence: None,
            same_in_a_row: 0,
            agent_ended_at: None,
            last_head: None,
            verified: None,
            last_decision: None,
            share_ran_out: false,
            next_timeout: None,
            next_model: None,
            session_models: std::collections::BTreeMap::new(),
            modification: None,
            agent_stopped: false,
            parked_session: None,
            halted: None,
            policy: None,
            extra_attempts: 0,
            gate_files: None,
            protected_changed: None,
            outside: None,
            chain_broken: false,
            orphan: None,
        }
    }

    /// Drives the lifecycle from `task.started` to `task.finished`.
    pub(super) fn drive(&mut self, policy: &Policy) -> Result<()> {
        self.drive_from(policy, TaskState::Queued, vec![TaskEvent::Started])
    }

    /// Drives the lifecycle from `state` whose `effects` are still to do.
    pub(super) fn drive_with(
        &mut self,
        policy: &Policy,
        state: TaskState,
        effects: Vec<Effect>,
    ) -> Result<()> {
        let mut first = Vec::new();
        for effect in effects {
            first.extend(self.perform(state, effect)?);
        }
        self.drive_from(policy, state, first)
    }

    /// Drives the lifecycle from `state`, fed `first`: a continued task
    /// picks up where its journal left it.
    pub(super) fn drive_from(
        &mut self,
        policy: &Policy,
        mut state: TaskState,
        first: Vec<TaskEvent>,
    ) -> Result<()> {
        self.policy = Some(*policy);
        let mut pending = VecDeque::from(first);
        while let Some(event) = pending.pop_front() {
            let step = transition(&self.effective_policy(), state, event)
                .map_err(|err| EngineError::Lifecycle(err.to_string()))?;
            state = step.state;
            for effect in step.effects {
                pending.extend(self.perform(state, effect)?);
            }
        }
        Ok(())
    }

    fn perform(&mut self, state: TaskState, effect: Effect) -> Result<Option<TaskEvent>> {
        self.mend_journal()?;
        Ok(match effect {
            Effect::TakeCheckpoint { attempt } => self.take_checkpoint(attempt)?,
            Effect::SpawnAgent { attempt } => Some(self.spawn_agent(attempt)?),
            Effect::FallBackCold { attempt } => {
                self.fall_back_cold(attempt)?;
                None
            }
            Effect::RunGates { attempt } => Some(self.run_gates(attempt)?),
            Effect::Diagnose { attempt } => Some(self.diagnose(attempt)?),
            Effect::ConsumeBudget { attempt } => Some(self.consume_budget(attempt)?),
            Effect::RollBack { to, reason } => {
                self.roll_back(state, to, reason)?;
                Some(TaskEvent::RolledBack)
            }
            Effect::BackOff { attempt } => {
                self.back_off(attempt)?;
                None
            }
            Effect::DecideRetry { next, rolled_back } => Some(self.decide(next, rolled_back)?),
            Effect::RecordPartial { attempt } => {
                self.record_partial(attempt)?;
                None
            }
            Effect::KeepFailedTree => {
                self.keep_failed_tree()?;
                None
            }
            Effect::CommitResult { attempt } => Some(self.commit(state, attempt)?),
            Effect::Close => Some(TaskEvent::Closed { delivered: false }),
            Effect::Finish(terminal) => {
                self.finish(terminal)?;
                Some(TaskEvent::Finished)
            }
            Effect::Park { next } => {
                self.park(next)?;
                None
            }
            Effect::Pause { next } => Some(self.pause(next)?),
        })
    }

    /// Records the pause, unless its row was written before the agent was
    /// halted (the agent is stopped and reaped by now; sandbox, seat and
    /// reservation kept), and waits for what ends it: an unpause (the next
    /// attempt continues the session when nothing changed), a park, the
    /// pause's upgrade to a park, or the run's cancel.
    fn pause(&mut self, next: u32) -> Result<TaskEvent> {
        use crate::park::{PauseEnd, Stop};
        use reprise_store::suspension::{ParkCause, Wake};
        let run = self.run;
        let (recorded, reply) = match self.halted.take() {
            Some(Halted::Pause(recorded, reply)) => (recorded, reply),
            other => {
                self.halted = other;
                let (upgrade_after, requested_by, reply) = match run.control.take_any() {
                    Some((
                        Stop::Pause {
                            upgrade_after,
                            requested_by,
                        },
                        reply,
                    )) => (upgrade_after, requested_by, reply),
                    Some((Stop::Park(request), reply)) => {
                        // A park came first: it is what happens.
                        let _ = run.control.request(request, reply);
                        return Ok(TaskEvent::ParkRequested);
                    }
                    None => (None, None, None),
                };
                let session_id = self.parked_session.clone().or_else(|| self.last_session());
                let recorded =
                    self.record_pause(next, session_id, upgrade_after, requested_by.as_ref())?;
                (recorded, reply)
            }
        };
        let RecordedPause {
            head,
            workspace_hash,
            session_id,
            upgrade_after,
        } = recorded;
        // A session the pause's row could not name yet (the CLI names it
        // when it ends) is the stopped attempt's.
        let session_id = session_id.or_else(|| self.parked_session.clone());
        if let Some(reply) = reply {
            let _ = reply.send(json!({"ok": true, "paused": true, "run_id": run.run_id,
                                      "task": run.task.id, "attempt": next.saturating_sub(1)}));
        }
        run.emit(Event::TaskPaused {
            task: run.task.id.clone(),
            attempt: next.saturating_sub(1),
            upgrade_after,
        });
        Ok(match run.control.wait_paused(upgrade_after, run.cancel) {
            PauseEnd::Unpause(reply, requested_by) => {
                let event = self.unpause(
                    next,
                    (head.digest, workspace_hash, session_id),
                    requested_by.as_ref(),
                )?;
                if let Some(reply) = reply {
                    let _ = reply.send(json!({"ok": true, "unpaused": true, "run_id": run.run_id,
                                              "task": run.task.id, "mode": self.next.mode}));
                }
                event
            }
            PauseEnd::Park(request, reply) => {
                let _ = run.control.request(request, reply);
                TaskEvent::ParkRequested
            }
            PauseEnd::Upgrade => {
                let after = upgrade_after.unwrap_or_default();
                let _ = run.control.request(
                    crate::park::ParkRequest {
                        wake: Wake::Resume,
                        cause: ParkCause::PauseUpgrade,
                        reason: Some(format!(
                            "paused for longer than {}s (pause_upgrade_after)",
                            after.as_secs()
                        )),
                        question: None,
                        requested_by: None,
                    },
                    None,
                );
                TaskEvent::ParkRequested
            }
            PauseEnd::Cancelled => TaskEvent::CancelRequested,
        })
    }

    /// Writes a pause's `task.pause` row (attempt `next - 1` paused).
    fn record_pause(
        &mut self,
        next: u32,
        session_id: Option<String>,
        upgrade_after: Option<std::time::Duration>,
        requested_by: Option<&reprise_store::suspension::Requester>,
    ) -> Result<RecordedPause> {
        let run = self.run;
        // The command's --upgrade-after first, then the plan's key.
        let upgrade_after = upgrade_after.or(run.task.pause_upgrade_after);
        let workspace_hash = run.workspace_hash(&self.cwd)?;
        let mut body = json!({"run_id": run.run_id, "attempt": next.saturating_sub(1), "session_id": session_id,
                "workspace_hash": workspace_hash,
                "upgrade_after_ms": upgrade_after.map(|after| u64::try_from(after.as_millis()).unwrap_or(u64::MAX))});
        with_requester(&mut body, requested_by);
        let head = self.journal.append(rows::PAUSE, &now_rfc3339(), &body)?;
        Ok(RecordedPause {
            head,
            workspace_hash,
            session_id,
            upgrade_after,
        })
    }

    /// Ends a pause: the next attempt's mode decided as a retry's is,
    /// against the workspace and session the pause recorded.
    fn unpause(
        &mut self,
        next: u32,
        (pause, paused_hash, session_id): (Digest, Digest, Option<String>),
        requested_by: Option<&reprise_store::suspension::Requester>,
    ) -> Result<TaskEvent> {
        use reprise_core::retry::{Checkpoint as DecisionCheckpoint, DecisionInput, decide};
        let run = self.run;
        let task = run.task;
        let live = run.workspace_hash(&self.cwd)?;
        let checkpoint = DecisionCheckpoint {
            session_id: session_id.clone(),
            // Checked on the way back (below).
            session_saved: true,
            workspace_hash: paused_hash,
            event_hash: pause,
        };
        let mut decision = decide(DecisionInput {
            requested: run.requested_mode_only(session_id.as_deref()),
            capability: run.adapter.strategy().capability(),
            checkpoint: Some(&checkpoint),
            live_workspace_hash: live,
            fresh_pinned: task.agent_restart_between_retries,
            chain_verified: true,
        });
        let session_ok = session_id
            .as_deref()
            .is_some_and(|id| run.ensure_session(id, &self.cwd));
        if decision.mode != RetryMode::Cold && !session_ok {
            decision = reprise_core::retry::session_unavailable(decision);
        }
        // The attempt the pause stopped does not count.
        self.extra_attempts += 1;
        let policy = self.effective_policy();
        let mut body = json!({"run_id": run.run_id, "attempt": next, "pause": pause,
                "mode": decision.mode.as_str(),
                "downgrade_reason": decision.downgrade_reason.map(|reason| reason.as_str()),
                "workspace_hash": live, "lifecycle": policy});
        with_requester(&mut body, requested_by);
        self.journal.append(rows::UNPAUSE, &now_rfc3339(), &body)?;
        self.next = match (decision.mode, session_id) {
            (RetryMode::Warm, Some(session_id)) => NextAttempt {
                mode: "warm",
                session: reprise_agents::SessionMode::Resume { session_id },
                prompt: reprise_core::prompt::resume_prompt(
                    Some("a person paused it to look"),
                    None,
                ),
            },
            _ => run.cold(next, self.previous.as_ref()),
        };
        Ok(TaskEvent::Unpaused {
            cold: self.next.mode == "cold",
        })
    }

    /// The policy the task runs under now: its own, with the attempts pauses
    /// gave back.
    fn effective_policy(&self) -> Policy {
        let base = self.policy.expect("the lifecycle is being driven");
        Policy {
            max_attempts: base.max_attempts + self.extra_attempts,
            ..base
        }
    }

    /// Takes up what the journal says of the task's earlier attempts in
    /// this run: their summaries and cost, the budget they consumed, the
    /// checkpoints before the first and the latest attempt.
    pub(super) fn take_up(&mut self, taken: super::continuation::TakenUp) -> Result<()> {
        self.result.spent_micro_usd = taken
            .attempts
            .iter()
            .filter_map(|attempt| attempt.cost_micro_usd)
            .sum();
        self.result.attempts = taken.attempts;
        self.attempt = taken.attempt;
        self.session_models = taken.session_models;
        if let Some(budget) = self.budget.as_mut() {
            for _ in 0..taken.budget_consumed {
                let _ = budget.consume();
            }
        }
        if let Some(store) = &self.snapshots {
            let find = |found: Option<(String, Digest)>| -> Result<Option<(Checkpoint, Digest)>> {
                Ok(match found {
                    Some((id, hash)) => Some((store.find(&id)?, hash)),
                    None => None,
                })
            };
            self.base_checkpoint = find(taken.base_checkpoint)?;
            self.attempt_checkpoint = find(taken.attempt_checkpoint)?;
        }
        Ok(())
    }

    /// What a checkpoint before an attempt holds besides the files (seed
    /// 004's execution context and dependency state): the agent, the model
    /// asked for (`null`: the CLI's own default), the mode, the task's
    /// grant, the names (never the values) of the variables reprise sets
    /// for it, and each dependency's state and result commit.
    fn held(&self) -> Value {
        let run = self.run;
        let attempt_env = self.attempt_env(std::path::Path::new(""));
        let mut env: Vec<&str> = attempt_env
            .iter()
            .map(|(name, _)| name.as_str())
            .chain(run.context.agent_env.iter().map(String::as_str))
            .collect();
        env.sort_unstable();
        env.dedup();
        json!({
            "context": {
                "agent": run.adapter.name(),
                "model": self.next_model.clone().or_else(|| self.resumed_model()).or_else(|| run.context.model.clone()),
                "mode": self.next.mode,
                "grant": run.grant,
                "env": env,
            },
            "dependencies": run.context.dependencies,
        })
    }

    /// A journal whose last line was torn while the task ran (a write that
    /// was not the engine's, cut short) fails closed, then goes on: the
    /// torn line is cut off by the same repair `replay repair` does (kept
    /// beside the journal, a `journal.repair` row in the audit chain), the
    /// failed verification is logged (a `journal.tail_repaired` row and a
    /// warning), and the next retry trusts no checkpoint: it goes cold.
    /// Damage a repair may not cut stays the task's error.
    fn mend_journal(&mut self) -> Result<()> {
        use reprise_store::repair::{RepairOutcome, Target, repair};
        let torn = match self.journal.head() {
            Ok(_) => return Ok(()),
            Err(err @ reprise_store::StoreError::TornTail { .. }) => err,
            Err(err) => return Err(err.into()),
        };
        let run = self.run;
        let RepairOutcome::Repaired {
            removed_bytes,
            head,
            backup,
            ..
        } = repair(run.state, &Target::Journal(self.key.clone()), &run.key)?
        else {
            return Err(torn.into());
        };
        self.verified = None;
        self.chain_broken = true;
        self.journal.append(
            rows::TAIL_REPAIRED,
            &now_rfc3339(),
            &json!({"run_id": run.run_id, "attempt": self.attempt,
                    "verification": "torn_tail", "removed_bytes": removed_bytes,
                    "head_seq": head.map(|head| head.seq), "kept_at": backup}),
        )?;
        run.emit(Event::Warning {
            task: Some(run.task.id.clone()),
            message: format!(
                "its journal's last line was torn while it ran ({removed_bytes} bytes, kept at {}): cut off, and the next retry goes cold",
                backup.display()
            ),
        });
        Ok(())
    }

    /// The writes of the latest attempt outside the task's `allowed_paths`
    /// (see `recovery::outside_writes`).
    fn outside_writes(&self) -> Result<Option<reprise_core::recovery::Anomaly>> {
        let checkpoint = self.snapshots.as_ref().zip(
            self.attempt_checkpoint
                .as_ref()
                .map(|(checkpoint, _)| checkpoint),
        );
        if checkpoint.is_none() {
            return Ok(None);
        }
        recovery::outside_writes(self.run.task, checkpoint, &self.run.state.scratch_dir()?)
    }

    /// A close the process died in goes on after attempt `attempt`, whose
    /// summary the journal holds: a result commit names the journal's head
    /// `head` (the continuation's row).
    pub(super) fn closing(&mut self, attempt: u32, head: Head) {
        self.attempt = attempt;
        self.summary = self
            .result
            .attempts
            .iter()
            .rfind(|summary| summary.n == attempt)
            .cloned();
        self.last_head = Some(head);
    }

    /// The process that ran attempt `attempt` died with it: the agent's end
    /// is recorded as an interruption (with the session the attempt started,
    /// so the retry can resume it) and the attempt is judged as the
    /// infrastructure failure it was.
    pub(super) fn interrupted(
        &mut self,
        attempt: u32,
        (mode, session_id): (&'static str, Option<String>),
        agent_ended: bool,
    ) -> Result<()> {
        let run = self.run;
        self.attempt = attempt;
        // The summary names the mode the interrupted attempt ran in.
        self.next.mode = mode;
        let tmp = run.state.attempt_tmp_dir(run.run_id, &run.task.id, attempt);
        let _ = fs::create_dir_all(&tmp);
        self.tmp = Some(tmp);
        self.started = Some(Instant::now());
        let report = self.unfinished_report(
            InfraKind::Interrupted,
            "the process driving the run died while the attempt ran",
            session_id.clone(),
        );
        if agent_ended {
            self.agent_ended =
                super::continuation::last_agent_end(run.state, &self.key, run.run_id);
        } else {
            let workspace_hash = run.workspace_hash(&self.cwd)?;
            let head = self.journal.append(
                rows::AGENT_ENDED,
                &now_rfc3339(),
                &json!({"run_id": run.run_id, "attempt": attempt, "session_id": session_id,
                        "workspace_hash": workspace_hash, "interrupted": true}),
            )?;
            self.agent_ended = Some(head.digest);
        }
        self.report = Some(report);
        Ok(())
    }

    /// The report of an attempt whose agent never reported its end: the
    /// infrastructure failure `kind`, with the session it started.
    fn unfinished_report(
        &self,
        kind: InfraKind,
        detail: &str,
        session_id: Option<String>,
    ) -> AttemptReport {
        let run = self.run;
        AttemptReport {
            outcome: AttemptOutcome::Infra {
                kind,
                detail: detail.to_owned(),
            },
            session_id,
            cost_micro_usd: None,
            session_model: None,
            adapter: run.adapter.name(),
            cli_version: None,
            cwd: self.cwd.clone(),
            config_home: run.setup.config_home.clone(),
            argv: Vec::new(),
            elapsed: std::time::Duration::ZERO,
            streams: Default::default(),
            park: None,
        }
    }

    /// Attempt `summary.n` was cut short by the run's stop, which judged it
    /// the infrastructure failure `kind` and closed the task before any
    /// diagnosis: what the diagnosis and the retry decision read of it is set
    /// back from its rows (its `attempt.finished`, and the `task.checkpoint`
    /// its agent's end wrote, which the decision trusts as it would have).
    pub(super) fn stopped(&mut self, summary: AttemptSummary, kind: InfraKind) {
        let run = self.run;
        self.attempt = summary.n;
        // The summary names the mode the stopped attempt ran in.
        self.next.mode = match summary.mode.as_str() {
            "warm" => "warm",
            "fork" => "fork",
            "cold" => "cold",
            _ => "new",
        };
        let report = self.unfinished_report(
            kind,
            "the run was stopped (Ctrl-C, SIGTERM or SIGHUP) while the attempt ran",
            summary.session_id.clone(),
        );
        self.agent_ended = super::continuation::last_agent_end(run.state, &self.key, run.run_id);
        self.previous = Some(Previous::of(run.task, &summary, &report));
        self.classified = Some(Classified::Infra(kind));
        self.report = Some(report);
        self.summary = Some(summary);
    }

    /// What the task spent in this leg of it (a resumed task's envelope is
    /// what was left when it parked).
    fn spent_this_leg(&self) -> u64 {
        self.result
            .spent_micro_usd
            .saturating_sub(self.run.spent_before)
    }

    /// The agent was stopped for a park: what it cost is counted, its
    /// session kept for a warm resume, its output kept, and the attempt
    /// listed as parked (not judged, not a failure).
    fn stopped_for_park(&mut self, attempt: u32, report: AttemptReport, paused: bool) {
        let run = self.run;
        self.result.spent_micro_usd += report.cost_micro_usd.unwrap_or(0);
        if let Some(session_id) = &report.session_id {
            run.preserve_transcript(session_id, &self.cwd);
        }
        // A park the agent's own stop asked for keeps what the attempt was
        // (a usage limit, a question); a requested one is just parked.
        let (outcome, infra_kind) = match &report.outcome {
            AttemptOutcome::Infra { kind, .. } if report.park.is_some() => {
                (crate::state::Outcome::Infra, Some(kind.as_str().to_owned()))
            }
            _ => (crate::state::Outcome::Parked, None),
        };
        let summary = AttemptSummary {
            n: attempt,
            mode: self.next.mode.to_owned(),
            session_id: report.session_id.clone(),
            judged: false,
            outcome,
            infra_kind,
            exit_code: None,
            gates: Vec::new(),
            cost_micro_usd: report.cost_micro_usd,
            elapsed_ms: self.started.map_or(0, |started| {
                u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX)
            }),
            agent_us: u64::try_from(report.elapsed.as_micros()).unwrap_or(u64::MAX),
            gates_us: 0,
        };
        self.keep_logs(attempt, &report, &summary);
        self.remove_tmp();
        let mut body = attempt_body(
            run.run_id,
            &summary,
            &report,
            run.containment_body(&report, self.sandboxed),
        );
        body["accepted"] = json!(if paused { "paused" } else { "parked" });
        // A store failure here surfaces at the park's own first write.
        let _ = self
            .journal
            .append(rows::ATTEMPT_FINISHED, &now_rfc3339(), &body);
        self.parked_session = report.session_id.or_else(|| self.last_session());
        self.agent_stopped = true;
        self.result.attempts.push(summary);
    }

    /// The session of the latest attempt that had one.
    fn last_session(&self) -> Option<String> {
        self.result
            .attempts
            .iter()
            .rev()
            .find_map(|attempt| attempt.session_id.clone())
    }

    /// Records the park (unless its row and receipt were written before
    /// the agent was halted) and gives back the process and the sandbox,
    /// each release citing the receipt; the coordinator gives back the seat
    /// and the budget and moves the ledger.
    fn park(&mut self, next: u32) -> Result<()> {
        use reprise_store::suspension::{ParkCause, Resource, Wake};
        let run = self.run;
        let recorded = match self.halted.take() {
            Some(Halted::Park(recorded)) => *recorded,
            other => {
                self.halted = other;
                let (request, reply) = run.control.take().unwrap_or((
                    crate::park::ParkRequest {
                        wake: Wake::Resume,
                        cause: ParkCause::Request,
                        reason: None,
                        question: None,
                        requested_by: None,
                    },
                    None,
                ));
                let attempt = next.saturating_sub(u32::from(self.agent_stopped)).max(1);
                let session_id = self.parked_session.clone().or_else(|| self.last_session());
                self.record_park(attempt, session_id, &request, reply)?
            }
        };
        let RecordedPark {
            body,
            head,
            receipt,
            reply,
        } = recorded;
        let mut released = Vec::new();
        // The agent's process group was killed and reaped by its driver
        // before the attempt returned.
        let process = json!({"stopped": self.agent_stopped, "reaped": true,
                             "attempt": body.attempt});
        crate::park::write_release(
            &mut self.audit,
            &self.key,
            run.run_id,
            head.digest,
            receipt,
            Resource::Process,
            process.clone(),
        )?;
        released.push((Resource::Process, process));
        let sandbox = self.release_sandbox(next)?;
        crate::park::write_release(
            &mut self.audit,
            &self.key,
            run.run_id,
            head.digest,
            receipt,
            Resource::Sandbox,
            sandbox.clone(),
        )?;
        released.push((Resource::Sandbox, sandbox));
        self.result.status = TaskStatus::Suspended;
        self.result.reason = Some(format!("parked until {}", body.wake.describe()));
        // What the stopped attempt spent after the row was written counts:
        // the headroom returned is what is left now.
        let headroom_micro_usd = run
            .envelope_micro_usd
            .map_or(0, |reserved| reserved.saturating_sub(self.spent_this_leg()));
        self.result.parked = Some(super::ParkedTask {
            park: head.digest,
            receipt,
            wake: body.wake,
            released,
            reply,
            headroom_micro_usd,
        });
        Ok(())
    }

    /// A park's first steps, each durable before the next and all before
    /// anything is released: the `task.suspend` row (attempt `attempt`,
    /// session `session_id`), the agent checkpoint, the receipt.
    fn record_park(
        &mut self,
        attempt: u32,
        session_id: Option<String>,
        request: &crate::park::ParkRequest,
        reply: Option<crate::park::ParkReply>,
    ) -> Result<RecordedPark> {
        use reprise_store::suspension::{EnvelopeBalance, JournalHead, SUSPEND_KIND, SuspendBody};
        let run = self.run;
        let workspace_hash = run.workspace_hash(&self.cwd)?;
        let spent = self.result.spent_micro_usd;
        let reserved = run.envelope_micro_usd;
        let head_before = self.journal.head()?;
        let body = SuspendBody {
            run_id: run.run_id.to_owned(),
            attempt,
            session_id,
            workspace_hash,
            journal_head: head_before.map(|head| JournalHead {
                seq: head.seq,
                event_hash: head.digest,
            }),
            envelope: EnvelopeBalance {
                reserved_micro_usd: reserved,
                spent_micro_usd: spent,
                headroom_micro_usd: reserved
                    .map_or(0, |reserved| reserved.saturating_sub(self.spent_this_leg())),
            },
            wake: request.wake.clone(),
            cause: request.cause,
            reason: request.reason.clone(),
            // What the agent asked is kept beside the chain: the row holds
            // its hash.
            question: None,
            question_hash: request
                .question
                .as_deref()
                .map(|question| {
                    reprise_store::replies::keep_agent_text(
                        run.state,
                        run.run_id,
                        &run.task.id,
                        question,
                    )
                })
                .transpose()?,
            requested_by: request.requested_by.clone(),
            grant_hash: crate::park::bound_grant(
                &run.grant,
                &self.key,
                run.run_id,
                head_before.map(|head| head.digest),
            ),
        };
        let head = self.journal.append(
            SUSPEND_KIND,
            &now_rfc3339(),
            &serde_json::to_value(&body).expect("a suspend body serialises"),
        )?;
        if !body.grant_hash.is_empty() {
            crate::park::write_agent_checkpoint(
                run.state,
                &mut self.journal,
                &self.key,
                &run.grant,
                (run.run_id, head.digest, &body.grant_hash),
            )?;
        }
        crate::park::hold_at("suspend");
        let receipt = crate::park::write_receipt(&mut self.audit, &self.key, &body, head)?;
        Ok(RecordedPark {
            body,
            head,
            receipt,
            reply,
        })
    }

    /// A park or pause was asked for while attempt `attempt`'s agent runs:
    /// its row (a park's receipt too) is written now, before the agent is
    /// halted.
    fn record_before_halt(&mut self, attempt: u32) -> Result<()> {
        use crate::park::Stop;
        // The session the running agent works in, when it is known before
        // it ends.
        let session_id = match &self.next.session {
            SessionMode::Resume { session_id } => Some(session_id.clone()),
            SessionMode::New { session_id } => session_id.clone(),
            SessionMode::Fork { new_session_id, .. } => new_session_id.clone(),
        };
        match self.run.control.take_any() {
            Some((Stop::Park(request), reply)) => {
                let recorded = self.record_park(attempt, session_id, &request, reply)?;
                self.halted = Some(Halted::Park(Box::new(recorded)));
            }
            Some((
                Stop::Pause {
                    upgrade_after,
                    requested_by,
                },
                reply,
            )) => {
                let recorded = self.record_pause(
                    attempt + 1,
                    session_id,
                    upgrade_after,
                    requested_by.as_ref(),
                )?;
                self.halted = Some(Halted::Pause(recorded, reply));
            }
            None => {}
        }
        Ok(())
    }

    /// Snapshots the worktree and removes it; a task run in place keeps its
    /// directory (it is the user's), with a checkpoint of it when it has
    /// checkpoints.
    fn release_sandbox(&mut self, next: u32) -> Result<Value> {
        let run = self.run;
        let checkpoint = match &self.snapshots {
            Some(store) => {
                let hash = run.workspace_hash(&self.cwd)?;
                Some(checkpoints::take(
                    store,
                    &mut self.journal,
                    run.run_id,
                    next,
                    "parked",
                    hash,
                )?)
            }
            None => None,
        };
        let files = checkpoint
            .as_ref()
            .map(|checkpoint| checkpoint.manifest.files);
        let id = checkpoint.as_ref().map(|checkpoint| checkpoint.id.clone());
        match (self.isolated, run.workspace.repo()) {
            (true, Some(repo)) => {
                let dir = run.state.worktree_dir(run.run_id, &run.task.id);
                crate::sandbox::remove_worktree(run.state, repo, &dir)?;
                Ok(crate::park::sandbox_detail(
                    id.as_deref(),
                    &dir,
                    true,
                    files,
                ))
            }
            _ => Ok(crate::park::sandbox_detail(
                id.as_deref(),
                &self.cwd,
                false,
                files,
            )),
        }
    }

    /// The tree was just restored to `checkpoint` and hashed `hash` (as
    /// the checkpoint recorded): the next attempt's checkpoint is that one.
    pub(super) fn restored_to(&mut self, checkpoint: Checkpoint, hash: Digest) {
        self.restored = Some((checkpoint, hash));
    }

    fn take_checkpoint(&mut self, attempt: u32) -> Result<Option<TaskEvent>> {
        if self.run.control.pending() {
            return Ok(Some(TaskEvent::ParkRequested));
        }
        if self.run.cancel.is_cancelled() {
            return Ok(Some(TaskEvent::CancelRequested));
        }
        let held = self.held();
        if let Some(store) = &self.snapshots {
            let label = format!("before attempt {attempt}");
            let (checkpoint, hash) = match self.restored.take() {
                Some((checkpoint, hash)) => {
                    checkpoints::reuse(
                        &mut self.journal,
                        self.run.run_id,
                        attempt,
                        &label,
                        &checkpoint,
                        hash,
                        Some(&held),
                    )?;
                    (checkpoint, hash)
                }
                None => {
                    let hash = self.run.workspace_hash(&self.cwd)?;
                    let checkpoint = checkpoints::take_with(
                        store,
                        &mut self.journal,
                        self.run.run_id,
                        attempt,
                        &label,
                        hash,
                        Some(&held),
                    )?;
                    (checkpoint, hash)
                }
            };
            self.base_checkpoint
                .get_or_insert_with(|| (checkpoint.clone(), hash));
            self.attempt_checkpoint = Some((checkpoint, hash));
        }
        Ok(Some(TaskEvent::CheckpointTaken))
    }

    fn spawn_agent(&mut self, attempt: u32) -> Result<TaskEvent> {
        let run = self.run;
        self.attempt = attempt;
        // The agent watches the run's cancel and the task's park.
        let stop = run.control.begin_agent(run.cancel);
        let mut hold = self.hold_budget(attempt, &stop);
        let remaining = hold.budget();
        self.announce_attempt(attempt)?;
        // A TMPDIR of the attempt's own, inside what the sandbox lets it write.
        let tmp = run.state.attempt_tmp_dir(run.run_id, &run.task.id, attempt);
        let _ = fs::create_dir_all(&tmp);
        let request = self.agent_request(attempt, &tmp, remaining);
        let (report, recorded) = self.run_agent(attempt, &request, &stop);
        let halted = match &self.halted {
            Some(Halted::Park(_)) => Some(false),
            Some(Halted::Pause(..)) => Some(true),
            None => None,
        };
        let pending = run.control.end_agent();
        let mut stopped = halted.or(pending);
        hold.spent(report.cost_micro_usd.unwrap_or(0));
        let mut report = report;
        let held = hold.budget().unwrap_or(0);
        self.settle_hold(held, hold, &mut report);
        if let Some(recorded) = recorded {
            recorded?;
        }
        self.tmp = Some(tmp);
        // The agent itself says the task should wait: a usage limit that
        // resets at a time, or a question for a person. It is parked, never
        // retried in a loop or left hanging.
        if stopped.is_none()
            && let Some(request) = report
                .park
                .as_ref()
                .map(|signal| park_request_of(signal, &report))
            && run.control.request(request, None).is_ok()
        {
            stopped = Some(false);
        }
        if let Some(paused) = stopped {
            self.stopped_for_park(attempt, report, paused);
            return Ok(if paused {
                TaskEvent::PauseRequested
            } else {
                TaskEvent::ParkRequested
            });
        }
        self.agent_ended(attempt, report)
    }

    /// The attempt's budget. A task without an envelope draws on the run's
    /// pool: a share held while its attempt runs (an agent held to a
    /// budget), or what is free (one that cannot be). It may have to wait
    /// for that first, and says so: it has not started until it has its
    /// budget.
    fn hold_budget(&self, attempt: u32, stop: &CancelToken) -> AttemptHold<'a> {
        let run = self.run;
        let claim = if !run.adapter.bounds_spend() {
            Claim::Unbounded
        } else if self.share_ran_out {
            Claim::Whole
        } else {
            Claim::Share
        };
        run.pool.attempt_budget(
            run.envelope_micro_usd
                .map(|envelope| envelope.saturating_sub(self.spent_this_leg())),
            claim,
            stop,
            || {
                run.emit(Event::TaskWaiting {
                    task: run.task.id.clone(),
                    waiting: Waiting {
                        reason: WaitReason::Budget,
                        detail: format!(
                            "its share of the pool for attempt {attempt} (other attempts hold the rest)"
                        ),
                    },
                });
            },
        )
    }

    /// Says the attempt started (events, then its `attempt.started` row).
    fn announce_attempt(&mut self, attempt: u32) -> Result<()> {
        let run = self.run;
        let task = run.task;
        run.emit(Event::AttemptStarted {
            task: task.id.clone(),
            attempt,
            mode: self.next.mode.to_owned(),
        });
        run.emit(Event::Phase {
            task: task.id.clone(),
            attempt,
            phase: Phase::Agent,
        });
        self.journal.append(
            rows::ATTEMPT_STARTED,
            &now_rfc3339(),
            &json!({"run_id": run.run_id, "attempt": attempt, "mode": self.next.mode,
                    "session": session_json(&self.next.session),
                    "prompt_bytes": self.next.prompt.len()}),
        )?;
        self.started = Some(Instant::now());
        Ok(())
    }

    /// What the adapter is asked to run: the next attempt's prompt and
    /// session, its environment, supervision and watches.
    fn agent_request(
        &mut self,
        attempt: u32,
        tmp: &std::path::Path,
        budget_micro_usd: Option<u64>,
    ) -> AttemptRequest {
        let run = self.run;
        let task = run.task;
        let env = self.attempt_env(tmp);
        let supervision = run.supervision(&self.cwd, tmp, true);
        self.sandboxed = supervision
            .as_ref()
            .is_some_and(|supervision| supervision.sandbox.is_some());
        if self.sandboxed {
            run.make_agent_state();
        }
        AttemptRequest {
            task_id: task.id.clone(),
            attempt,
            prompt: self.next.prompt.clone(),
            session: self.next.session.clone(),
            cwd: self.cwd.clone(),
            timeout: self.next_timeout.unwrap_or(task.timeout),
            env,
            bin: run.bin.clone(),
            config_home: run.setup.config_home.clone(),
            budget_micro_usd,
            supervision,
            watch: Watch {
                max_output_bytes: task.max_output_bytes,
                idle_timeout: task.idle_timeout,
                park_when_idle: task.park_when_idle,
                live_log: self.live_log_dir(attempt),
            },
            model: self.next_model.clone().or_else(|| self.resumed_model()),
        }
    }

    /// Runs the agent on a thread of its own while this one waits for it or
    /// for a park or pause: a stop is recorded (a park's row and receipt, a
    /// pause's row) before the agent is halted. Also the recording's
    /// outcome, when a stop came.
    fn run_agent(
        &mut self,
        attempt: u32,
        request: &AttemptRequest,
        stop: &CancelToken,
    ) -> (AttemptReport, Option<Result<()>>) {
        let run = self.run;
        run.control.agent_starts();
        std::thread::scope(|scope| {
            let agent = scope.spawn(|| {
                let report = run.adapter.run(request, stop);
                run.control.agent_returned();
                report
            });
            let recorded = if run.control.wait_agent() {
                let recorded = self.record_before_halt(attempt);
                stop.cancel();
                Some(recorded)
            } else {
                None
            };
            let report = agent
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            (report, recorded)
        })
    }

    /// Gives the attempt's hold back to the pool; an attempt stopped at its
    /// share, not at the pool's end, is told so: a retry may have more.
    fn settle_hold(&mut self, held: u64, hold: AttemptHold<'_>, report: &mut AttemptReport) {
        let pool_has_more = hold.release();
        self.share_ran_out = pool_has_more
            && matches!(
                report.outcome,
                AttemptOutcome::Infra {
                    kind: InfraKind::BudgetExhausted,
                    ..
                }
            );
        if self.share_ran_out {
            report.outcome = AttemptOutcome::Infra {
                kind: InfraKind::ShareExhausted,
                detail: format!(
                    "it reached its share of the run's pool (${}) while the pool had more; the retry waits for the other attempts and holds all that is free",
                    reprise_core::plan::format_micro_usd(held)
                ),
            };
        }
    }

    /// The agent ended (not stopped): its session's fate, its spend, git
    /// settled, and its end recorded in `task.checkpoint` before any gate
    /// runs.
    fn agent_ended(&mut self, attempt: u32, report: AttemptReport) -> Result<TaskEvent> {
        let run = self.run;
        let session_gone = matches!(
            report.outcome,
            AttemptOutcome::Infra {
                kind: InfraKind::SessionUnavailable,
                ..
            }
        );
        if session_gone && self.last_decision.is_some() {
            // The fall-back (a second decision) records this end.
            self.report = Some(report);
            return Ok(TaskEvent::AgentEnded { session_gone: true });
        }
        self.last_decision = None;
        self.result.spent_micro_usd += report.cost_micro_usd.unwrap_or(0);
        self.settle_git()?;
        let workspace_hash = run.workspace_hash(&self.cwd)?;
        let session_saved = report
            .session_id
            .as_deref()
            .is_none_or(|session_id| run.preserve_transcript(session_id, &self.cwd));
        let mut body = json!({"run_id": run.run_id, "attempt": attempt, "session_id": report.session_id,
                              "workspace_hash": workspace_hash});
        if let (Some(session_id), Some(model)) = (&report.session_id, &report.session_model) {
            body["session_model"] = json!(model);
            self.session_models
                .insert(session_id.clone(), model.clone());
        }
        if !session_saved {
            // The retry decision reads this: nothing to resume.
            body["session_saved"] = json!(false);
        }
        // The journal may have been torn while the agent ran.
        self.mend_journal()?;
        let head = self
            .journal
            .append(rows::AGENT_ENDED, &now_rfc3339(), &body)?;
        self.agent_ended = Some(head.digest);
        self.agent_ended_at = Some(Instant::now());
        self.report = Some(report);
        Ok(TaskEvent::AgentEnded {
            session_gone: false,
        })
    }

    /// The model of the session the next attempt resumes or forks, when its
    /// CLI named it: asking for it keeps the session's system prompt, and
    /// with it the provider's prompt cache, as the session left them.
    fn resumed_model(&self) -> Option<String> {
        let session = match &self.next.session {
            SessionMode::Resume { session_id } => session_id,
            SessionMode::Fork { from, .. } => from,
            SessionMode::New { .. } => return None,
        };
        self.session_models.get(session).cloned()
    }

    /// The task's environment with the attempt's own TMPDIR, for its agent
    /// and its gates alike.
    fn attempt_env(&self, tmp: &std::path::Path) -> Vec<(String, String)> {
        let mut env = self.env.clone();
        env.push(("TMPDIR".to_owned(), tmp.to_string_lossy().into_owned()));
        // In a worktree, git objects go to the worktree's own quarantine.
        if let Some(linkage) = self.run.linkage() {
            env.extend(linkage.agent_env());
        }
        env
    }

    /// Puts the worktree's git state back to what reprise wrote, once the
    /// agent (or its gates) stopped writing it (see `linkage`).
    fn settle_git(&self) -> Result<()> {
        match self.run.linkage() {
            Some(linkage) => linkage.settle(self.run.state),
            None => Ok(()),
        }
    }

    /// The CLI says the session is gone: a second decision, recorded, and
    /// the same attempt runs again, cold.
    fn fall_back_cold(&mut self, attempt: u32) -> Result<()> {
        let run = self.run;
        if let Some(first) = self.last_decision.take() {
            let second = first.session_unavailable();
            let chains = self.chains();
            record_decision(
                chains.journal,
                chains.spine,
                chains.audit,
                run.run_id,
                attempt,
                &second,
                None,
            )?;
            self.result.metadata = second.metadata(None)?;
            run.emit(Event::Decision {
                task: run.task.id.clone(),
                record: Box::new(second),
            });
        }
        self.next = run.cold(attempt, self.previous.as_ref());
        self.remove_tmp();
        Ok(())
    }

    fn run_gates(&mut self, attempt: u32) -> Result<TaskEvent> {
        let run = self.run;
        let task = run.task;
        let report = self.report.take().expect("the agent ran before its gates");
        // The gates run only on a reply that is not a request for context.
        let judged_by_gates = matches!(
            &report.outcome,
            AttemptOutcome::Replied { exit_code: 0, reply }
                if reprise_core::outcome::needs_context(reply).is_none()
        );
        if judged_by_gates && !task.gates.is_empty() {
            run.emit(Event::Phase {
                task: task.id.clone(),
                attempt,
                phase: Phase::Gates,
            });
        }
        let tmp = self.tmp.clone().expect("the attempt has a scratch dir");
        let env = self.attempt_env(&tmp);
        let budget = &self.budget;
        let level_of = |criterion: &str| match budget {
            Some(budget) => budget.level(criterion),
            None => run.budget_free_level(criterion),
        };
        let supervision = run.supervision(&self.cwd, &tmp, false);
        let gate_run = GateRun {
            task: &task.id,
            attempt,
            cwd: &self.cwd,
            reply: "",
            cancel: run.cancel,
            env: &env,
            supervision: supervision.as_ref(),
        };
        let started = self.started.unwrap_or_else(Instant::now);
        // What the agent wrote outside `allowed_paths`, before any gate can
        // add to the tree: whatever the gates say, such an attempt is not
        // accepted, and its tree is rolled back.
        let outside = self.outside_writes()?;
        let wrote_outside = outside.is_some();
        self.outside = Some(outside);
        // The gates run on the base's copy of their own files, whatever the
        // agent did to them; what it did is an anomaly.
        let changed = match &self.gate_files {
            Some((files, tree)) => files.restore(tree)?,
            None => Vec::new(),
        };
        let (mut summary, mut classified) = run.judge(
            attempt,
            self.next.mode,
            &report,
            &gate_run,
            &level_of,
            started,
        );
        self.protected_changed = None;
        if let Some((files, tree)) = &self.gate_files {
            // What the gates left there themselves goes (a `__pycache__`),
            // so the next attempt's tree holds the base's copy again.
            files.restore(tree)?;
            if let Some(anomaly) = files.anomaly(&changed) {
                crate::gate_files::void_verdicts(
                    task,
                    &files.gates_of(&changed),
                    &changed,
                    &mut summary,
                    &mut classified,
                );
                self.protected_changed = Some(anomaly);
            }
        }
        if wrote_outside && summary.outcome == crate::state::Outcome::Passed {
            // Its gates passed, but the work went where it may not: a
            // verdict on the work, whatever they said.
            summary.outcome = crate::state::Outcome::Judged;
            summary.judged = true;
        }
        self.remove_tmp();
        self.settle_git()?;
        self.keep_logs(attempt, &report, &summary);
        let judged_now = Previous::of(task, &summary, &report);
        run.keep_or_drop_reply(&summary, &judged_now);
        self.previous = Some(judged_now);
        self.result.judged = summary.judged;
        // The attempt ran: the run state shows it even if its row cannot be
        // written (a journal whose last row was tampered with refuses
        // appends, and the task stops with that error).
        self.result.attempts.push(summary.clone());
        let judgement = if self.protected_changed.is_some() || wrote_outside {
            Judgement::Failed
        } else if summary.outcome == crate::state::Outcome::Passed {
            Judgement::Passed
        } else if recovery::partial_gaps(task, &summary).is_some() {
            Judgement::Partial
        } else {
            Judgement::Failed
        };
        let mut body = attempt_body(
            run.run_id,
            &summary,
            &report,
            run.containment_body(&report, self.sandboxed),
        );
        body["accepted"] = json!(judgement.as_str());
        // The journal may have been torn while the gates ran.
        self.mend_journal()?;
        self.last_head = Some(self.journal.append(
            rows::ATTEMPT_FINISHED,
            &now_rfc3339(),
            &body,
        )?);
        run.emit(Event::AttemptFinished {
            task: task.id.clone(),
            summary: summary.clone(),
        });
        self.report = Some(report);
        self.summary = Some(summary);
        self.classified = Some(classified);
        Ok(TaskEvent::Judged(judgement))
    }

    /// Where the driver writes the attempt's output as it comes (the kept,
    /// bounded copy replaces it when the attempt ends); `None` if it cannot
    /// be made, and the attempt runs all the same.
    fn live_log_dir(&self, attempt: u32) -> Option<std::path::PathBuf> {
        let run = self.run;
        let dir = run
            .state
            .task_logs_dir(run.run_id, &run.task.id)
            .ok()?
            .join(attempt.to_string());
        reprise_store::logs::make_log_dir(&dir).ok()?;
        Some(dir)
    }

    /// Keeps what the attempt's agent and gates printed, for `reprise logs`;
    /// a log that cannot be written is a warning, never the task's failure.
    fn keep_logs(&self, attempt: u32, report: &AttemptReport, summary: &AttemptSummary) {
        let run = self.run;
        let reply = match &report.outcome {
            AttemptOutcome::Replied { reply, .. } => reply.as_str(),
            AttemptOutcome::Infra { detail, .. } => detail.as_str(),
        };
        let keep = |text: &str| reprise_core::prompt::excerpt(text, STREAM_KEEP_BYTES);
        let mut kept = vec![
            ("agent.stdout".to_owned(), report.streams.stdout.clone()),
            ("agent.stderr".to_owned(), report.streams.stderr.clone()),
            ("reply".to_owned(), keep(reply)),
        ];
        kept.extend(
            summary
                .gates
                .iter()
                .map(|gate| (format!("gate.{}", gate.name), keep(&gate.output))),
        );
        let outputs: Vec<(String, &str)> = kept
            .iter()
            .map(|(name, text)| (name.clone(), text.as_str()))
            .collect();
        if let Err(err) = keep_attempt_logs(run.state, run.run_id, &run.task.id, attempt, &outputs)
        {
            run.emit(Event::Warning {
                task: Some(run.task.id.clone()),
                message: format!("could not keep attempt {attempt}'s output: {err}"),
            });
        }
    }

    fn record_partial(&mut self, attempt: u32) -> Result<()> {
        let summary = self.summary.as_ref().expect("a judged attempt");
        let gaps = recovery::partial_gaps(self.run.task, summary).unwrap_or_default();
        // Enough of the work passed to keep: committed like a pass, with the
        // gates it did not pass as its gaps.
        self.journal.append(
            rows::PARTIAL,
            &now_rfc3339(),
            &json!({"run_id": self.run.run_id, "attempt": attempt, "gaps": gaps}),
        )?;
        self.result.reason = Some(format!("partial: gaps {}", gaps.join(", ")));
        self.result.gaps = gaps;
        Ok(())
    }

    fn diagnose(&mut self, attempt: u32) -> Result<TaskEvent> {
        let run = self.run;
        if run.cancel.is_cancelled() {
            // Ctrl-C: the child was stopped and reaped; no retry.
            return Ok(TaskEvent::CancelRequested);
        }
        run.emit(Event::Phase {
            task: run.task.id.clone(),
            attempt,
            phase: Phase::Deciding,
        });
        let summary = self.summary.as_ref().expect("a judged attempt");
        let report = self.report.as_ref().expect("an attempt that ran");
        let classified = self.classified.as_ref().expect("a classified attempt");
        let mut anomalies: Vec<_> = self.protected_changed.take().into_iter().collect();
        // Found before the gates ran; an attempt a stop cut short had none run.
        let outside = match self.outside.take() {
            Some(outside) => outside,
            None => self.outside_writes()?,
        };
        anomalies.extend(recovery::anomalies(run.task, summary, outside));
        for anomaly in &anomalies {
            self.journal.append(
                "attempt.anomaly",
                &now_rfc3339(),
                &json!({"run_id": run.run_id, "attempt": attempt, "anomaly": anomaly}),
            )?;
            run.emit(Event::Anomaly {
                task: run.task.id.clone(),
                attempt,
                anomaly: anomaly.clone(),
            });
        }
        let evidence = recovery::Evidence::of(report, summary);
        self.same_in_a_row = match (&self.last_evidence, summary.judged) {
            (Some(last), true) if *last == evidence => self.same_in_a_row + 1,
            (_, true) => 1,
            (_, false) => 0,
        };
        self.last_evidence = summary.judged.then(|| evidence.clone());
        let diagnosis = diagnose(Symptoms {
            outcome: classified,
            anomalies: &anomalies,
            same_judged_in_a_row: self.same_in_a_row,
        });
        self.journal.append(
            rows::DIAGNOSIS,
            &now_rfc3339(),
            &json!({"run_id": run.run_id, "attempt": attempt, "severity": diagnosis.severity,
                    "kind": diagnosis.kind, "strategy": diagnosis.strategy,
                    "evidence": evidence, "anomalies": anomalies}),
        )?;
        let strategy = diagnosis.strategy;
        self.diagnosis = Some(diagnosis);
        Ok(TaskEvent::Diagnosed(strategy))
    }

    /// The budget bounds retries together with max_retries: the smaller
    /// wins. Each consumption is on the record, and so is a refusal.
    fn consume_budget(&mut self, attempt: u32) -> Result<TaskEvent> {
        let run_id = self.run.run_id;
        let Some(budget) = self.budget.as_mut() else {
            return Ok(TaskEvent::BudgetConsumed { granted: true });
        };
        let (kind, body, granted) = match budget.consume() {
            Ok(decision) if decision.should_retry => (
                rows::BUDGET,
                json!({"run_id": run_id, "attempt": attempt, "decision": decision}),
                true,
            ),
            Ok(decision) => (
                BUDGET_REFUSED_KIND,
                json!({"run_id": run_id, "attempt": attempt, "decision": decision}),
                false,
            ),
            Err(err) => (
                BUDGET_REFUSED_KIND,
                json!({"run_id": run_id, "attempt": attempt, "reason": err.to_string()}),
                false,
            ),
        };
        self.journal.append(kind, &now_rfc3339(), &body)?;
        Ok(TaskEvent::BudgetConsumed { granted })
    }

    fn roll_back(
        &mut self,
        state: TaskState,
        to: RollbackTarget,
        reason: RollbackReason,
    ) -> Result<()> {
        let target = match to {
            RollbackTarget::BeforeAttempt(_) => &self.attempt_checkpoint,
            RollbackTarget::Base => &self.base_checkpoint,
        };
        let (Some(store), Some((checkpoint, hash))) = (&self.snapshots, target) else {
            return Ok(());
        };
        let why = match reason {
            RollbackReason::Diagnosis => self
                .diagnosis
                .as_ref()
                .map_or_else(|| "diagnosis".to_owned(), |d| d.kind.clone()),
            RollbackReason::EveryRetry => "every retry (rollback_on_retry: always)".to_owned(),
            RollbackReason::ColdRetry => "cold retry".to_owned(),
            RollbackReason::TaskEnded => match state {
                TaskState::Closing(terminal) => format!("task {}", terminal.as_str()),
                _ => "task ended".to_owned(),
            },
        };
        let (checkpoint, hash) = (checkpoint.clone(), *hash);
        let restored = self.run.roll_back(
            store,
            (&checkpoint, hash),
            &mut self.journal,
            &mut self.audit,
            &self.key,
            &why,
            &self.cwd,
        )?;
        // The tree is that checkpoint again, and hashes as it did: the next
        // attempt's checkpoint is that one, not a second copy of it.
        if restored.matches {
            self.restored_to(checkpoint, hash);
        }
        Ok(())
    }

    /// Waits out provider trouble before a retry in place, and records how
    /// long and why.
    fn back_off(&mut self, attempt: u32) -> Result<()> {
        let Some(classified) = &self.classified else {
            return Ok(());
        };
        if let Some((wait, source)) =
            recovery::back_off(classified, self.report.as_ref(), attempt, self.run.cancel)
        {
            self.journal.append(
                "recovery.back_off",
                &now_rfc3339(),
                &json!({"run_id": self.run.run_id, "attempt": attempt,
                        "wait_ms": u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                        "source": source}),
            )?;
        }
        Ok(())
    }

    fn decide(&mut self, next_attempt: u32, rolled_back: bool) -> Result<TaskEvent> {
        let run = self.run;
        let own_checkpoint = self
            .agent_ended
            .expect("the attempt ended and was recorded");
        // After a rollback the workspace the decision compares with is the
        // checkpoint it restored, not the failed attempt's.
        let restored = rolled_back
            .then(|| self.attempt_checkpoint.as_ref().map(|(_, hash)| *hash))
            .flatten();
        let previous = self
            .previous
            .clone()
            .expect("the attempt just judged is the previous one");
        let cwd = self.cwd.clone();
        // A retry after a request for context runs as the plan's
        // `on_needs_context` says, and the decision row says what changed.
        let asked = self
            .diagnosis
            .as_ref()
            .is_some_and(|diagnosis| diagnosis.strategy == Strategy::RetryWithContext);
        let changes = &run.task.on_needs_context;
        self.next_timeout = changes.timeout.filter(|_| asked);
        self.next_model = changes.model.clone().filter(|_| asked);
        // What the agent asked is kept beside the chain; the row binds
        // its hash.
        let asked_hash = match previous.needs_context.as_ref().filter(|_| asked) {
            Some((what, _)) => Some(reprise_store::replies::keep_agent_text(
                run.state,
                run.run_id,
                &run.task.id,
                what,
            )?),
            None => None,
        };
        self.modification = asked.then(|| {
            json!({"needs_context_hash": asked_hash,
                   "timeout_ms": changes.timeout.map(|timeout| u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX)),
                   "prompt_added": changes.prompt.is_some(), "model": changes.model})
        });
        let mut verified = self.verified.take();
        let modification = self.modification.clone();
        let since_last_request = self
            .agent_ended_at
            .map_or(std::time::Duration::MAX, |ended| ended.elapsed());
        let same_failure_in_a_row = self.same_in_a_row;
        let chain_broken = std::mem::take(&mut self.chain_broken);
        let decided = run.decide_retry(
            self.chains(),
            &mut verified,
            &cwd,
            RetryBasis {
                own_checkpoint,
                restored,
                modification: modification.as_ref(),
                previous: &previous,
                next_attempt,
                since_last_request,
                same_failure_in_a_row,
                chain_broken,
            },
        );
        self.verified = verified;
        self.next = match decided {
            Ok((next, metadata, record)) => {
                self.result.metadata = metadata;
                self.last_decision = (record.retry_mode != RetryMode::Cold).then_some(record);
                next
            }
            Err(err) => {
                self.record_decision_failure(&err.to_string(), next_attempt);
                run.cold(next_attempt, Some(&previous))
            }
        };
        Ok(TaskEvent::RetryDecided {
            cold: self.next.mode == "cold",
        })
    }

    /// The decision path failed: the retry goes cold, and the record says so
    /// (decision_failed) in all three places, or, if even that cannot be
    /// written, in none, with a warning. Never a row for a mode that did not run.
    fn record_decision_failure(&mut self, err: &str, next_attempt: u32) {
        let run = self.run;
        let task = run.task;
        let fallback = DecisionRecord::decision_failed(
            &task.id,
            run.adapter.name(),
            run.adapter.strategy().capability(),
            task.retry_policy.fixed().unwrap_or(RetryMode::Warm),
            run.workspace_hash(&self.cwd).unwrap_or_default(),
        );
        let modification = self.modification.clone();
        let chains = self.chains();
        match record_decision(
            chains.journal,
            chains.spine,
            chains.audit,
            run.run_id,
            next_attempt,
            &fallback,
            modification.as_ref(),
        ) {
            Ok(_) => {
                run.emit(Event::Warning {
                    task: Some(task.id.clone()),
                    message: format!(
                        "retry decision failed ({err}); retrying cold, recorded as decision_failed"
                    ),
                });
                self.result.metadata = fallback
                    .metadata(None)
                    .unwrap_or_else(|_| failed_decision_metadata());
                run.emit(Event::Decision {
                    task: task.id.clone(),
                    record: Box::new(fallback),
                });
            }
            Err(second) => {
                run.emit(Event::Warning {
                    task: Some(task.id.clone()),
                    message: format!(
                        "retry decision failed ({err}) and its cold fallback could not be recorded ({second}); retrying cold with no decision on record"
                    ),
                });
                self.result.metadata = failed_decision_metadata();
            }
        }
    }

    /// The failed tree is kept as a checkpoint before the tree goes back to
    /// what the task started from.
    fn keep_failed_tree(&mut self) -> Result<()> {
        if let Some(store) = &self.snapshots {
            let hash = self.run.workspace_hash(&self.cwd)?;
            checkpoints::take(
                store,
                &mut self.journal,
                self.run.run_id,
                self.attempt,
                checkpoints::FAILED_TREE_LABEL,
                hash,
            )?;
        }
        Ok(())
    }

    fn commit(&mut self, state: TaskState, attempt: u32) -> Result<TaskEvent> {
        self.result.status = match state {
            TaskState::Closing(Terminal::Partial) => TaskStatus::Partial,
            _ => TaskStatus::Passed,
        };
        let (Some(base), Some(head), true) = (self.run.base.clone(), self.last_head, self.isolated)
        else {
            // In place: the work is where the user is.
            return Ok(TaskEvent::Closed { delivered: true });
        };
        let delivered = self.run.commit_output(
            &mut self.journal,
            &self.cwd,
            &base,
            head,
            attempt,
            self.result,
            self.orphan.as_deref(),
        )?;
        Ok(TaskEvent::Closed { delivered })
    }

    fn finish(&mut self, terminal: Terminal) -> Result<()> {
        let run = self.run;
        let task = run.task;
        let attempts = self.result.attempts.len();
        let (status, reason) = match terminal {
            Terminal::Passed => (TaskStatus::Passed, None),
            Terminal::Partial => (TaskStatus::Partial, self.result.reason.take()),
            Terminal::Failed(Failure::AttemptsExhausted) => (
                TaskStatus::Failed,
                Some(crate::stop::out_of_attempts(&self.result.attempts)),
            ),
            Terminal::Failed(Failure::BudgetSpent) => (
                TaskStatus::Failed,
                Some(format!(
                    "{}; the retry budget ({}) is spent",
                    crate::stop::out_of_attempts(&self.result.attempts),
                    self.budget
                        .as_ref()
                        .map(|budget| budget.spec().to_string())
                        .unwrap_or_default()
                )),
            ),
            Terminal::Failed(Failure::NotDelivered) => {
                (TaskStatus::Failed, self.result.reason.take())
            }
            Terminal::Blocked => (TaskStatus::Blocked, Some(self.blocked_reason())),
            Terminal::Cancelled => (TaskStatus::Cancelled, Some("cancelled".to_owned())),
        };
        self.result.status = status;
        self.result.reason = reason;
        self.journal.append(
            rows::TASK_FINISHED,
            &now_rfc3339(),
            &json!({"run_id": run.run_id, "state": self.result.status, "reason": self.result.reason,
                    "attempts": attempts, "spent_micro_usd": self.result.spent_micro_usd,
                    "lifecycle": terminal}),
        )?;
        if self.journal.foreign_writes_seen()? {
            // The chain may verify, but rows the engine did not write are in
            // it: a seal would vouch for them.
            run.emit(Event::Warning {
                task: Some(task.id.clone()),
                message:
                    "journal not sealed: it was written to behind the engine's back during the task"
                        .to_owned(),
            });
        } else if let Err(err) = seal_journal_after(
            run.state,
            &mut self.audit,
            &self.key,
            &now_rfc3339(),
            &run.prior_seals,
        ) {
            run.emit(Event::Warning {
                task: Some(task.id.clone()),
                message: format!("journal not sealed: {err}"),
            });
        } else {
            reprise_store::io::crash_point(task.id.as_str(), "journal.sealed");
        }
        Ok(())
    }

    /// Why retrying cannot help: the diagnosis, with the CLI's own words
    /// when it gave any.
    fn blocked_reason(&self) -> String {
        let kind = self
            .diagnosis
            .as_ref()
            .map_or("blocked", |diagnosis| diagnosis.kind.as_str());
        match self.report.as_ref().map(|report| &report.outcome) {
            Some(AttemptOutcome::Infra { detail, .. }) if !detail.is_empty() => {
                format!("{kind}: {detail}")
            }
            _ => kind.to_owned(),
        }
    }

    fn chains(&mut self) -> Chains<'_> {
        Chains {
            journal: &mut self.journal,
            spine: &mut self.spine,
            audit: &mut self.audit,
        }
    }

    /// The attempt's scratch dir goes, and the run's with its last attempt
    /// (another task's attempt still in it keeps it).
    fn remove_tmp(&mut self) {
        if let Some(tmp) = self.tmp.take() {
            let _ = fs::remove_dir_all(&tmp);
            if let Some(run_tmp) = tmp.parent() {
                let _ = fs::remove_dir(run_tmp);
            }
        }
    }
}

/// Adds who asked (a command over the control socket) to a pause or unpause
/// row; a row nobody asked for keeps its earlier shape.
fn with_requester(body: &mut Value, requested_by: Option<&reprise_store::suspension::Requester>) {
    if let (Some(requested_by), Some(object)) = (requested_by, body.as_object_mut()) {
        object.insert(
            "requested_by".to_owned(),
            serde_json::to_value(requested_by).expect("a requester serialises"),
        );
    }
}

/// The park an agent's own stop asks for.
fn park_request_of(
    signal: &reprise_agents::ParkSignal,
    report: &AttemptReport,
) -> crate::park::ParkRequest {
    use reprise_store::suspension::{ParkCause, Wake};
    let detail = match &report.outcome {
        AttemptOutcome::Infra { detail, .. } => Some(detail.clone()),
        AttemptOutcome::Replied { .. } => None,
    };
    match signal {
        reprise_agents::ParkSignal::Until { unix, .. } => crate::park::ParkRequest {
            wake: Wake::Time {
                at: humantime::format_rfc3339_seconds(
                    std::time::UNIX_EPOCH + std::time::Duration::from_secs(*unix),
                )
                .to_string(),
            },
            cause: ParkCause::UsageLimit,
            reason: detail.or_else(|| Some("a usage limit".to_owned())),
            question: None,
            requested_by: None,
        },
        reprise_agents::ParkSignal::Approval { question } => crate::park::ParkRequest {
            wake: Wake::Approval,
            cause: ParkCause::Permission,
            reason: Some("the agent waits on a permission or an answer".to_owned()),
            question: Some(question.clone()),
            requested_by: None,
        },
    }
}

/// What `task.started` records of the lifecycle's policy.
pub(super) fn policy_json(policy: &Policy) -> Value {
    serde_json::to_value(policy).expect("a policy serialises")
}
