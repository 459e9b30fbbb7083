//! The executor of a task's lifecycle: the core's transition says what to
//! do next ([`reprise_core::lifecycle`]); this performs each effect, records
//! it in the task's journal, and hands back the event it produced. Nothing
//! here decides what comes next. This file drives the lifecycle and runs
//! the agent; `judging` judges and diagnoses an attempt, `retrying` and
//! `closing` do what follows, `steering` parks and pauses.

use std::collections::{BTreeMap, VecDeque};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

use reprise_agents::{
    AttemptOutcome, AttemptReport, AttemptRequest, CancelToken, InfraKind, STREAM_KEEP_BYTES,
    SessionMode, Watch,
};
use reprise_core::TaskKey;
use reprise_core::budget::RetryBudget;
use reprise_core::digest::Digest;
use reprise_core::lifecycle::{Effect, Policy, TaskEvent, TaskState, transition};
use reprise_core::outcome::AttemptOutcome as Classified;
use reprise_core::pool::Claim;
use reprise_core::record::Head;
use reprise_core::retry::DecisionRecord;
use reprise_core::rows::{
    AttemptContext, AttemptMode, AttemptStarted, JournalTailRepaired, TaskCheckpoint,
};
use reprise_store::journal::Journal;
use reprise_store::logs::keep_attempt_logs;
use reprise_store::snapshot::{Checkpoint, SnapshotStore};
use reprise_store::state::now_rfc3339;
use serde::Serialize;
use serde_json::Value;

use super::attempt::{Attempt, Checkpoints, FailureStreak, Halted, RetryChanges, StoppedAgent};
use super::bodies::session_use;
use super::{Chains, Materialised, NextAttempt, Previous, TaskResult, TaskRun};
use crate::checkpoints;
use crate::error::{EngineError, Result};
use crate::events::{Event, Phase};
use crate::pool::AttemptHold;
use crate::records::VerifiedPrefix;
use crate::recovery;
use crate::state::{AttemptSummary, WaitReason, Waiting};

/// What one task's effects work on, from its first attempt to its end.
pub(super) struct Executor<'r, 'a> {
    pub(super) run: &'r TaskRun<'a>,
    pub(super) key: TaskKey,
    pub(super) cwd: PathBuf,
    pub(super) isolated: bool,
    pub(super) journal: Journal,
    pub(super) signer: crate::evidence::Signer,
    pub(super) snapshots: Option<SnapshotStore>,
    pub(super) env: Vec<(String, String)>,
    pub(super) budget: Option<RetryBudget>,
    pub(super) result: &'r mut TaskResult,
    /// The attempt under way, or the latest.
    pub(super) attempt: Attempt,
    /// What the next attempt sends.
    pub(super) next: NextAttempt,
    /// What the latest judged (or carried) attempt said.
    pub(super) previous: Option<Previous>,
    pub(super) checkpoints: Checkpoints,
    pub(super) streak: FailureStreak,
    /// How much of the journal this run has verified already.
    pub(super) verified: Option<VerifiedPrefix>,
    /// The warm or fork decision the running attempt was sent under, for the
    /// fall-back when the CLI says the session is gone.
    pub(super) last_decision: Option<DecisionRecord>,
    /// What the latest decision changed besides the mode.
    pub(super) changes: RetryChanges,
    /// The last attempt was stopped at its share of the pool while the
    /// pool had more: the next claims all that is free, in its turn.
    share_ran_out: bool,
    /// Each session's model as its CLI named it (the journal's
    /// `task.checkpoint` rows say it): a resume asks for exactly that one.
    session_models: BTreeMap<String, String>,
    /// The agent a park or pause stopped, if one did.
    pub(super) stopped_agent: Option<StoppedAgent>,
    /// The policy the lifecycle is driven under, and the attempts unpauses
    /// added to it.
    policy: Option<Policy>,
    pub(super) extra_attempts: u32,
    /// The files the gates are judged by, as the base has them, and the
    /// top of the tree they are in.
    pub(super) gate_files: Option<(crate::gate_files::GateFiles, PathBuf)>,
    /// The journal failed verification (its torn tail was cut) since the
    /// last retry decision: the next one trusts no checkpoint.
    pub(super) chain_broken: bool,
    /// The commit a crash left on the result branch before the result was
    /// recorded, which the commit replaces (a continued task's).
    pub(super) orphan: Option<String>,
}

/// What a checkpoint before an attempt holds besides the files (see
/// `Executor::held`).
#[derive(Serialize)]
struct Held<'h, D: Serialize> {
    context: AttemptContext,
    dependencies: &'h [D],
}

impl<'r, 'a> Executor<'r, 'a> {
    /// The executor of a task in `materialised`, whose next attempt sends
    /// `next`; the gates' files are read now, before any agent runs (in
    /// place, the tree now is their reference).
    pub(super) fn new(
        run: &'r TaskRun<'a>,
        materialised: Materialised,
        (next, previous): (NextAttempt, Option<Previous>),
        result: &'r mut TaskResult,
    ) -> Result<Self> {
        let Materialised {
            key,
            cwd,
            isolated,
            journal,
            signer,
            snapshots,
            budget,
        } = materialised;
        let gate_files = run.gate_files(&cwd, isolated)?;
        Ok(Self {
            run,
            key,
            cwd,
            isolated,
            journal,
            signer,
            snapshots,
            env: run.task_env(),
            budget,
            result,
            attempt: Attempt::default(),
            next,
            previous,
            checkpoints: Checkpoints::default(),
            streak: FailureStreak::default(),
            verified: None,
            last_decision: None,
            changes: RetryChanges::default(),
            share_ran_out: false,
            session_models: BTreeMap::new(),
            stopped_agent: None,
            policy: None,
            extra_attempts: 0,
            gate_files,
            chain_broken: false,
            orphan: None,
        })
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

    /// The policy the task runs under now: its own, with the attempts pauses
    /// gave back.
    pub(super) fn effective_policy(&self) -> Policy {
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
        self.attempt = Attempt::numbered(taken.attempt);
        self.session_models = taken.session_models;
        if let Some(budget) = self.budget.as_mut() {
            for _ in 0..taken.budget_consumed {
                let _ = budget.consume();
            }
        }
        // A task taken over from a lost host finds none of that host's
        // checkpoints here: its next attempt takes its own.
        if let Some(store) = self
            .snapshots
            .as_ref()
            .filter(|_| self.run.lost_sessions.is_none())
        {
            let find = |found: Option<(String, Digest)>| -> Result<Option<(Checkpoint, Digest)>> {
                Ok(match found {
                    Some((id, hash)) => Some((store.find(&id)?, hash)),
                    None => None,
                })
            };
            self.checkpoints.base = find(taken.base_checkpoint)?;
            self.checkpoints.before_latest = find(taken.attempt_checkpoint)?;
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
        let attempt_env = self.attempt_env(Path::new(""));
        let mut env: Vec<String> = attempt_env
            .into_iter()
            .map(|(name, _)| name)
            .chain(run.context.agent_env.iter().cloned())
            .collect();
        env.sort_unstable();
        env.dedup();
        let held = Held {
            context: AttemptContext {
                agent: run.adapter.name().to_owned(),
                model: self.next_model().or_else(|| run.context.model.clone()),
                mode: self.next.mode,
                grant: run.grant.clone(),
                env,
            },
            dependencies: &run.context.dependencies,
        };
        serde_json::to_value(held).expect("what an attempt runs with serialises")
    }

    /// The model the next attempt asks for: a retry's own, else the one
    /// its resumed session ran.
    fn next_model(&self) -> Option<String> {
        self.changes.model.clone().or_else(|| self.resumed_model())
    }

    /// A journal whose last line was torn while the task ran (a write that
    /// was not the engine's, cut short) fails closed, then goes on: the
    /// torn line is cut off by the same repair `replay repair` does (kept
    /// beside the journal, a `journal.repair` row in the audit chain), the
    /// failed verification is logged (a `journal.tail_repaired` row and a
    /// warning), and the next retry trusts no checkpoint: it goes cold.
    /// Damage a repair may not cut stays the task's error.
    pub(super) fn mend_journal(&mut self) -> Result<()> {
        use reprise_store::repair::{RepairOutcome, Target, repair};
        let torn = match self.journal.head() {
            Ok(_) => return Ok(()),
            Err(err @ reprise_store::StoreError::TornTail { .. }) => err,
            Err(err) => return Err(err.into()),
        };
        let run = self.run;
        // A worker holds no key: it cannot check the audit chain a repair
        // consults, so the torn journal stays the task's error.
        let Some(key) = run.signing.key() else {
            return Err(torn.into());
        };
        let RepairOutcome::Repaired {
            removed_bytes,
            head,
            backup,
            ..
        } = repair(run.state, &Target::Journal(self.key.clone()), key)?
        else {
            return Err(torn.into());
        };
        self.verified = None;
        self.chain_broken = true;
        self.journal.append_row(
            &now_rfc3339(),
            &JournalTailRepaired {
                run_id: run.run_id.to_owned(),
                attempt: self.attempt.number,
                verification: "torn_tail".to_owned(),
                removed_bytes,
                head_seq: head.map(|head| head.seq),
                kept_at: backup.clone(),
            },
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
    pub(super) fn outside_writes(&self) -> Result<Option<reprise_core::recovery::Anomaly>> {
        let checkpoint = self.snapshots.as_ref().zip(
            self.checkpoints
                .before_latest
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
        self.attempt = Attempt {
            summary: self
                .result
                .attempts
                .iter()
                .rfind(|summary| summary.n == attempt)
                .cloned(),
            finished_head: Some(head),
            ..Attempt::numbered(attempt)
        };
    }

    /// The process that ran attempt `attempt` died with it: the agent's end
    /// is recorded as an interruption (with the session the attempt started,
    /// so the retry can resume it) and the attempt is judged as the
    /// infrastructure failure it was.
    pub(super) fn interrupted(
        &mut self,
        attempt: u32,
        (mode, session_id): (AttemptMode, Option<String>),
        agent_ended: bool,
    ) -> Result<()> {
        let run = self.run;
        // The summary names the mode the interrupted attempt ran in.
        self.next.mode = mode;
        let tmp = run.state.attempt_tmp_dir(run.run_id, &run.task.id, attempt);
        let _ = fs::create_dir_all(&tmp);
        let report = self.unfinished_report(
            InfraKind::Interrupted,
            "the process driving the run died while the attempt ran",
            session_id.clone(),
        );
        let agent_ended = if agent_ended {
            super::continuation::last_agent_end(run.state, &self.key, run.run_id)
        } else {
            let workspace_hash = run.workspace_hash(&self.cwd)?;
            let head = self.journal.append_row(
                &now_rfc3339(),
                &TaskCheckpoint {
                    run_id: run.run_id.to_owned(),
                    attempt,
                    session_id,
                    workspace_hash,
                    session_model: None,
                    session_saved: None,
                    interrupted: Some(true),
                },
            )?;
            Some(head.digest)
        };
        self.attempt = Attempt {
            started: Some(Instant::now()),
            tmp: Some(tmp),
            report: Some(report),
            agent_ended,
            ..Attempt::numbered(attempt)
        };
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
        // The summary names the mode the stopped attempt ran in.
        self.next.mode = AttemptMode::parse(&summary.mode).unwrap_or(AttemptMode::New);
        let report = self.unfinished_report(
            kind,
            "the run was stopped (Ctrl-C, SIGTERM or SIGHUP) while the attempt ran",
            summary.session_id.clone(),
        );
        self.previous = Some(Previous::of(run.task, &summary, &report));
        self.attempt = Attempt {
            agent_ended: super::continuation::last_agent_end(run.state, &self.key, run.run_id),
            classified: Some(Classified::Infra(kind)),
            report: Some(report),
            ..Attempt::numbered(summary.n)
        };
        self.attempt.summary = Some(summary);
    }

    /// What the task spent in this leg of it (a resumed task's envelope is
    /// what was left when it parked).
    pub(super) fn spent_this_leg(&self) -> u64 {
        self.result
            .spent_micro_usd
            .saturating_sub(self.run.spent_before)
    }

    /// The tree was just restored to `checkpoint` and hashed `hash` (as
    /// the checkpoint recorded): the next attempt's checkpoint is that one.
    pub(super) fn restored_to(&mut self, checkpoint: Checkpoint, hash: Digest) {
        self.checkpoints.restored = Some((checkpoint, hash));
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
            let (checkpoint, hash) = match self.checkpoints.restored.take() {
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
            self.checkpoints
                .base
                .get_or_insert_with(|| (checkpoint.clone(), hash));
            self.checkpoints.before_latest = Some((checkpoint, hash));
        }
        Ok(Some(TaskEvent::CheckpointTaken))
    }

    fn spawn_agent(&mut self, attempt: u32) -> Result<TaskEvent> {
        let run = self.run;
        self.attempt = Attempt::numbered(attempt);
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
        let halted = match &self.attempt.halted {
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
        self.attempt.tmp = Some(tmp);
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
            mode: self.next.mode.as_str().to_owned(),
        });
        run.emit(Event::Phase {
            task: task.id.clone(),
            attempt,
            phase: Phase::Agent,
        });
        self.journal.append_row(
            &now_rfc3339(),
            &AttemptStarted {
                run_id: run.run_id.to_owned(),
                attempt,
                mode: self.next.mode,
                session: session_use(&self.next.session),
                prompt_bytes: u64::try_from(self.next.prompt.len()).unwrap_or(u64::MAX),
            },
        )?;
        self.attempt.started = Some(Instant::now());
        Ok(())
    }

    /// What the adapter is asked to run: the next attempt's prompt and
    /// session, its environment, supervision and watches.
    fn agent_request(
        &mut self,
        attempt: u32,
        tmp: &Path,
        budget_micro_usd: Option<u64>,
    ) -> AttemptRequest {
        let run = self.run;
        let task = run.task;
        let env = self.attempt_env(tmp);
        let supervision = run.supervision(&self.cwd, tmp, true);
        self.attempt.sandboxed = supervision
            .as_ref()
            .is_some_and(|supervision| supervision.sandbox.is_some());
        if self.attempt.sandboxed {
            run.make_agent_state();
        }
        AttemptRequest {
            task_id: task.id.clone(),
            attempt,
            prompt: self.next.prompt.clone(),
            session: self.next.session.clone(),
            cwd: self.cwd.clone(),
            timeout: self.changes.timeout.unwrap_or(task.timeout),
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
            model: self.next_model(),
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
            self.attempt.report = Some(report);
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
        let session_model = report
            .session_id
            .as_ref()
            .zip(report.session_model.as_ref());
        if let Some((session_id, model)) = session_model {
            self.session_models
                .insert(session_id.clone(), model.clone());
        }
        let body = TaskCheckpoint {
            run_id: run.run_id.to_owned(),
            attempt,
            session_id: report.session_id.clone(),
            workspace_hash,
            session_model: session_model.map(|(_, model)| model.clone()),
            // The retry decision reads this: nothing to resume.
            session_saved: (!session_saved).then_some(false),
            interrupted: None,
        };
        // The journal may have been torn while the agent ran.
        self.mend_journal()?;
        let head = self.journal.append_row(&now_rfc3339(), &body)?;
        if let Some(store) = &self.snapshots {
            self.attempt.left_tree = run.snapshot_left_tree(store, attempt);
        }
        self.attempt.agent_ended = Some(head.digest);
        self.attempt.agent_ended_at = Some(Instant::now());
        self.attempt.report = Some(report);
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
    pub(super) fn attempt_env(&self, tmp: &Path) -> Vec<(String, String)> {
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
    pub(super) fn settle_git(&self) -> Result<()> {
        match self.run.linkage() {
            Some(linkage) => linkage.settle(self.run.state),
            None => Ok(()),
        }
    }

    /// Where the driver writes the attempt's output as it comes (the kept,
    /// bounded copy replaces it when the attempt ends); `None` if it cannot
    /// be made, and the attempt runs all the same.
    fn live_log_dir(&self, attempt: u32) -> Option<PathBuf> {
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
    pub(super) fn keep_logs(&self, attempt: u32, report: &AttemptReport, summary: &AttemptSummary) {
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

    pub(super) fn chains(&mut self) -> Chains<'_> {
        Chains {
            journal: &mut self.journal,
            signer: &mut self.signer,
        }
    }

    /// The attempt's scratch dir goes, and the run's with its last attempt
    /// (another task's attempt still in it keeps it).
    pub(super) fn remove_tmp(&mut self) {
        if let Some(tmp) = self.attempt.tmp.take() {
            let _ = fs::remove_dir_all(&tmp);
            if let Some(run_tmp) = tmp.parent() {
                let _ = fs::remove_dir(run_tmp);
            }
        }
    }
}

/// The park an agent's own stop asks for.
fn park_request_of(
    signal: &reprise_agents::ParkSignal,
    report: &AttemptReport,
) -> crate::park::ParkRequest {
    use reprise_core::rows::{ParkCause, Wake};
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
