//! A task taken up again in a later process: after the run's process died
//! mid-task (`run --continue`), or when its park is resumed. What the task
//! did before is read back from its journal (the truth about it); the
//! lifecycle starts from the state those rows leave it in, and the row that
//! says so (`task.continued` or `task.resume`) is written before anything
//! else, with the policy it continues under: the attempt an interruption or
//! a park took back is not counted against `max_attempts`.

use reprise_core::TaskKey;
use reprise_core::digest::Digest;
use reprise_core::lifecycle::{Effect, Policy, TaskEvent, TaskState, Terminal, replay, rows};
use reprise_core::outcome::InfraKind;
use reprise_core::record::{Head, JournalRow};
use reprise_core::retry::RetryMode;
use reprise_core::rows::{
    AttemptFinished, AttemptMode, AttemptStarted, CheckpointTaken, ResumeBody, RowBody, SessionUse,
    TaskCheckpoint, TaskContinued, TaskFinished, TaskPartial, TaskStarted, body_of,
};
use reprise_store::journal::Journal;
use reprise_store::snapshot::Checkpoint;
use reprise_store::state::{StateDir, now_rfc3339};

use super::bodies::summary_of;
use super::executor::Executor;
use super::{NextAttempt, TaskResult, TaskRun};
use crate::error::{EngineError, Result};
use crate::resume::ParkPoint;
use crate::state::AttemptSummary;

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

/// The body of `row` if it is a `T` row that parses.
fn body<T: RowBody>(row: &JournalRow) -> Option<T> {
    body_of(&row.kind, &row.body)
}

/// The policy the rows leave the task under: `task.started`'s, as the
/// latest resume or continuation extended it.
fn policy_of(rows: &[JournalRow]) -> Option<Policy> {
    rows.iter()
        .filter_map(|row| match row.kind.as_str() {
            rows::TASK_STARTED => body::<TaskStarted>(row).map(|started| started.lifecycle),
            rows::RESUME => body::<ResumeBody>(row).and_then(|resume| resume.lifecycle),
            rows::CONTINUED => body::<TaskContinued>(row).map(|continued| continued.lifecycle),
            _ => None,
        })
        .next_back()
}

/// What `rows` (one run's rows of a task's journal) say of its attempts.
pub(crate) fn taken_up(rows: &[JournalRow]) -> TakenUp {
    let mut taken = TakenUp::default();
    for row in rows {
        match row.kind.as_str() {
            rows::ATTEMPT_STARTED => {
                if let Some(started) = body::<AttemptStarted>(row) {
                    taken.attempt = started.attempt;
                }
            }
            rows::ATTEMPT_FINISHED => {
                if let Some(finished) = body::<AttemptFinished>(row) {
                    taken.attempts.push(summary_of(finished));
                }
            }
            rows::BUDGET => taken.budget_consumed += 1,
            rows::AGENT_ENDED => {
                if let Some(TaskCheckpoint {
                    session_id: Some(session),
                    session_model: Some(model),
                    ..
                }) = body(row)
                {
                    taken.session_models.insert(session, model);
                }
            }
            rows::CHECKPOINT_TAKEN => {
                if let Some(taken_before) = body::<CheckpointTaken>(row)
                    .filter(|checkpoint| checkpoint.label.starts_with("before attempt"))
                {
                    let found = Some((taken_before.checkpoint, taken_before.workspace_hash));
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

/// Every session `rows` name: started, resumed or forked by an attempt, or
/// reported at an agent's end.
pub(crate) fn sessions_named(rows: &[JournalRow]) -> std::collections::BTreeSet<String> {
    let mut sessions = std::collections::BTreeSet::new();
    for row in rows {
        if let Some(started) = body::<AttemptStarted>(row) {
            match started.session {
                SessionUse::New { new } => sessions.extend(new),
                SessionUse::Fork { fork, new } => sessions.extend(new.into_iter().chain([fork])),
                SessionUse::Resume { resume } => {
                    sessions.insert(resume);
                }
            }
        } else if let Some(ended) = body::<TaskCheckpoint>(row) {
            sessions.extend(ended.session_id);
        }
    }
    sessions
}

/// The mode and session the latest `attempt.started` row named: the new
/// session's chosen id, the resumed one, or a fork's new one.
fn started_session(rows: &[JournalRow]) -> (AttemptMode, Option<String>) {
    let Some(started) = rows
        .iter()
        .rev()
        .find(|row| row.kind == rows::ATTEMPT_STARTED)
        .and_then(body::<AttemptStarted>)
    else {
        return (AttemptMode::New, None);
    };
    let session = match started.session {
        SessionUse::New { new } | SessionUse::Fork { new, .. } => new,
        SessionUse::Resume { resume } => Some(resume),
    };
    (started.mode, session)
}

/// What a task's journal says of it in this run, read before its worktree
/// is made again.
pub(super) struct Found {
    pub(super) key: TaskKey,
    pub(super) rows: Vec<JournalRow>,
    /// The policy its rows leave it under.
    pub(super) policy: Policy,
    /// Where its rows leave it (a stop's close set aside).
    pub(super) state_now: TaskState,
    /// The run's stop closed it.
    pub(super) cancelled: bool,
    pub(super) taken: TakenUp,
}

/// Where a continued task's lifecycle goes on from.
pub(super) enum GoOn {
    /// An attempt the stop cut short: diagnosed as the infrastructure
    /// failure it was, and not counted.
    Stopped(AttemptSummary, InfraKind),
    /// A close the kill cut short: the effects it has left, after the
    /// `task.continued` row at `head`.
    Closing {
        terminal: Terminal,
        effects: Vec<Effect>,
        head: Head,
    },
    /// An attempt whose agent ran or whose gates judged when the process
    /// died.
    Interrupted {
        from: TaskState,
        attempt: u32,
        session: (AttemptMode, Option<String>),
        agent_ended: bool,
    },
    /// Between attempts or before the first: a checkpoint, then the next
    /// attempt.
    Checkpointing { from: TaskState, attempt: u32 },
    /// A park resumed.
    Resumed { attempt: u32 },
}

/// How a continued task goes on: its policy, where from, its next attempt,
/// and the park's snapshot when that is the attempt's checkpoint too.
pub(super) struct Resumption {
    pub(super) policy: Policy,
    pub(super) go_on: GoOn,
    pub(super) next: Option<NextAttempt>,
    pub(super) reused: Option<(Checkpoint, Digest)>,
}

/// The policy extended by `by` attempts: an attempt an interruption or a
/// park took back is not counted.
pub(super) fn extended(policy: Policy, by: u32) -> Policy {
    Policy {
        max_attempts: policy.max_attempts + by,
        ..policy
    }
}

/// The state the rows leave the task in, and whether the run's stop closed
/// it: a task the stop closed goes on from where the stop caught it, which
/// the rows before its `task.finished` (cancelled) say.
fn state_left(rows: &[JournalRow]) -> (TaskState, bool) {
    let state_now = replay(rows.iter().map(|row| (row.kind.as_str(), &row.body)));
    let cancelled = state_now == TaskState::Finished(Terminal::Cancelled);
    if !cancelled {
        return (state_now, false);
    }
    let end = rows
        .iter()
        .rposition(|row| row.kind == rows::TASK_FINISHED)
        .unwrap_or(rows.len());
    let before = replay(rows[..end].iter().map(|row| (row.kind.as_str(), &row.body)));
    (before, true)
}

/// An attempt the stop cut short (its agent or gates killed, judged as the
/// infrastructure failure that was), with that failure's kind.
fn stopped_attempt(found: &Found) -> Option<(AttemptSummary, InfraKind)> {
    let TaskState::Diagnosing { attempt } = found.state_now else {
        return None;
    };
    if !found.cancelled {
        return None;
    }
    let summary = found
        .taken
        .attempts
        .iter()
        .rfind(|summary| summary.n == attempt && !summary.judged)?;
    let kind = summary
        .infra_kind
        .as_deref()
        .and_then(InfraKind::from_name)?;
    Some((summary.clone(), kind))
}

impl TaskRun<'_> {
    /// Takes the task up where its journal left it in this run.
    pub(super) fn continue_task(
        &self,
        result: &mut TaskResult,
        continuation: &Continuation,
    ) -> Result<()> {
        let key = TaskKey::new(self.plan.clone(), self.task.id.clone());
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
            && let Err(refusal) = self.recheck_resume(&key, point)
        {
            result.status = crate::state::TaskStatus::Suspended;
            result.reason = Some(refusal.to_string());
            return Ok(());
        }
        let (state_now, cancelled) = state_left(&rows);
        // Ended in its journal, killed before the ledger heard it: it ends
        // as its journal says, with nothing run again.
        if let TaskState::Finished(_) = state_now {
            return self.ended(result, &key, &rows);
        }
        // The worktree comes back at its own path (the CLIs key sessions by
        // directory): as it was, or from the task's base when a park
        // removed it (the park's snapshot then restores its files).
        let mut materialised = self.materialise(result)?;
        // An adapter that learns its strategy from its agent (ACP) has not
        // heard it in this process yet: before any retry is decided.
        self.learn_strategy(&materialised.cwd);
        // Taken over from a lost fleet host: the tree it last sent.
        self.take_sent_tree(materialised.snapshots.as_ref(), &rows);
        let found = Found {
            key,
            taken: taken_up(&rows),
            rows,
            policy,
            state_now,
            cancelled,
        };
        let resumption = match continuation {
            Continuation::Interrupted | Continuation::Cancelled => {
                let resumption =
                    self.after_interruption(&found, &mut materialised.journal, result)?;
                if let GoOn::Checkpointing { attempt, .. } = resumption.go_on
                    && self.lost_sessions.is_some()
                    && attempt > 1
                {
                    let next = self.record_takeover(&found, &mut materialised, attempt, result)?;
                    Resumption {
                        next: Some(next),
                        ..resumption
                    }
                } else {
                    resumption
                }
            }
            Continuation::Resume {
                point,
                mode,
                approval,
            } => self.resume_park(&found, &mut materialised, point, *mode, *approval, result)?,
        };
        self.go_on(found, materialised, resumption, result)
    }

    /// A fleet task taken over from a lost host between attempts: its retry
    /// is decided here by the same pure decision, from the journal's last
    /// checkpoint and the tree and session that travelled with the task (a
    /// session whose transcript did not, or that this host's CLI cannot be
    /// given, makes it cold, `session_on_other_host`), recorded before the
    /// attempt runs, and the attempt runs as recorded: warm or fork with
    /// the corrective instruction built from the failed attempt's gates.
    fn record_takeover(
        &self,
        found: &Found,
        materialised: &mut super::Materialised,
        attempt: u32,
        result: &mut TaskResult,
    ) -> Result<super::NextAttempt> {
        use reprise_core::retry::{DecisionInput, decide};
        let mut verified = None;
        let trusted = crate::records::trusted_checkpoint(
            self.state,
            &materialised.key,
            &mut materialised.journal,
            &mut verified,
        )?;
        let session = trusted
            .checkpoint
            .as_ref()
            .and_then(|checkpoint| checkpoint.session_id.clone());
        let input = DecisionInput {
            requested: self.requested_mode_only(session.as_deref()),
            capability: self.adapter.strategy().capability(),
            checkpoint: trusted.checkpoint.as_ref(),
            live_workspace_hash: self.workspace_hash(&materialised.cwd)?,
            fresh_pinned: self.task.agent_restart_between_retries,
            chain_verified: trusted.chain_verified,
            session_elsewhere: self.on_lost_host(trusted.checkpoint.as_ref(), &materialised.cwd),
        };
        let mut decision = decide(input);
        let session_ok = session
            .as_deref()
            .is_some_and(|id| self.ensure_session(id, &materialised.cwd));
        if decision.mode != reprise_core::retry::RetryMode::Cold && !session_ok {
            decision = reprise_core::retry::session_unavailable(decision);
        }
        let previous = found
            .taken
            .attempts
            .last()
            .map(|summary| super::Previous::of_summary(self.task, summary));
        let (next, record) =
            self.taken_over_attempt((&input, decision), session, attempt, previous.as_ref());
        let sent =
            (next.mode != reprise_core::rows::AttemptMode::Cold).then_some(next.prompt.as_str());
        crate::records::record_decision(
            &mut materialised.journal,
            &mut materialised.signer,
            self.run_id,
            attempt,
            &record,
            None,
        )?;
        result.metadata = record.metadata(sent)?;
        self.emit(crate::events::Event::Decision {
            task: self.task.id.clone(),
            record: Box::new(record),
        });
        Ok(next)
    }

    /// How a task the process's death or the run's stop cut short goes on;
    /// the `task.continued` row saying so is written first.
    fn after_interruption(
        &self,
        found: &Found,
        journal: &mut Journal,
        result: &mut TaskResult,
    ) -> Result<Resumption> {
        if let Some((summary, kind)) = stopped_attempt(found) {
            let policy = extended(found.policy, 1);
            let mut continued = self.continued(found.state_now, policy, found.taken.attempt);
            continued.cancelled = Some(true);
            journal.append_row(&now_rfc3339(), &continued)?;
            return Ok(Resumption {
                policy,
                go_on: GoOn::Stopped(summary, kind),
                next: None,
                reused: None,
            });
        }
        match found.state_now {
            // A close the kill cut short (not a stop's: that goes on as any
            // interruption does).
            TaskState::Closing(terminal) if terminal != Terminal::Cancelled => {
                self.close_again(found, terminal, journal, result)
            }
            TaskState::Running { .. } | TaskState::Judging { .. } => {
                self.attempt_again(found, journal)
            }
            _ => self.between_attempts(found, journal),
        }
    }

    /// Killed while it closed (committing its result, keeping its failed
    /// tree, restoring its base): the close goes on from what its rows show
    /// done.
    fn close_again(
        &self,
        found: &Found,
        terminal: Terminal,
        journal: &mut Journal,
        result: &mut TaskResult,
    ) -> Result<Resumption> {
        let rows = &found.rows;
        let latest = found.taken.attempt;
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
            result.output = crate::sandbox::result_output(&row.body);
            result.reason = match body::<reprise_core::rows::TaskResult>(row) {
                Some(reprise_core::rows::TaskResult::Failed { error, .. }) => Some(error),
                _ => None,
            };
        }
        if let Some(partial) = rows[since..]
            .iter()
            .rfind(|row| row.kind == rows::PARTIAL)
            .and_then(body::<TaskPartial>)
        {
            result.gaps = partial.gaps;
        }
        let policy = found.policy;
        let effects = reprise_core::lifecycle::closing_left(&policy, terminal, latest, &done);
        let head = journal.append_row(
            &now_rfc3339(),
            &self.continued(found.state_now, policy, latest),
        )?;
        Ok(Resumption {
            policy,
            go_on: GoOn::Closing {
                terminal,
                effects,
                head,
            },
            next: None,
            reused: None,
        })
    }

    /// An attempt whose agent ran (or whose gates judged) when the process
    /// died: taken up from its report, not counted.
    fn attempt_again(&self, found: &Found, journal: &mut Journal) -> Result<Resumption> {
        let (from, agent_ended) = match found.state_now {
            TaskState::Running { attempt, resumed } => {
                (TaskState::Running { attempt, resumed }, false)
            }
            TaskState::Judging { attempt } => (TaskState::Judging { attempt }, true),
            _ => unreachable!("only a running or judging attempt is taken up again"),
        };
        let latest = found.taken.attempt;
        let policy = extended(found.policy, 1);
        journal.append_row(&now_rfc3339(), &self.continued(from, policy, latest))?;
        Ok(Resumption {
            policy,
            go_on: GoOn::Interrupted {
                from,
                attempt: latest,
                session: started_session(&found.rows),
                agent_ended,
            },
            next: None,
            reused: None,
        })
    }

    /// Between attempts, or before the first: the next attempt starts over,
    /// cold (its decision, if any, was lost with the process).
    fn between_attempts(&self, found: &Found, journal: &mut Journal) -> Result<Resumption> {
        let latest = found.taken.attempt;
        let attempt = match found.state_now {
            TaskState::Checkpointing { attempt, .. } => attempt,
            TaskState::Queued => 1,
            _ => latest + 1,
        };
        let from = TaskState::Checkpointing {
            attempt,
            resumed: false,
        };
        let policy = extended(found.policy, u32::from(attempt > found.policy.max_attempts));
        journal.append_row(&now_rfc3339(), &self.continued(from, policy, latest))?;
        let next = if attempt == 1 {
            NextAttempt {
                mode: AttemptMode::New,
                session: self.new_session(),
                prompt: self.task.prompt.clone(),
            }
        } else {
            self.cold(attempt, None)
        };
        Ok(Resumption {
            policy,
            go_on: GoOn::Checkpointing { from, attempt },
            next: Some(next),
            reused: None,
        })
    }

    /// The `task.continued` row of a task taken up `from` a state, under
    /// `policy`, its latest attempt `interrupted_attempt`.
    fn continued(
        &self,
        from: TaskState,
        policy: Policy,
        interrupted_attempt: u32,
    ) -> TaskContinued {
        TaskContinued {
            run_id: self.run_id.to_owned(),
            from,
            lifecycle: policy,
            interrupted_attempt: Some(interrupted_attempt),
            cancelled: None,
        }
    }

    /// Drives the task's lifecycle on from where `resumption` says.
    fn go_on(
        &self,
        found: Found,
        materialised: super::Materialised,
        resumption: Resumption,
        result: &mut TaskResult,
    ) -> Result<()> {
        let Resumption {
            policy,
            go_on,
            next,
            reused,
        } = resumption;
        let latest = found.taken.attempt;
        let cold = next
            .as_ref()
            .is_some_and(|next| next.mode == AttemptMode::Cold);
        let next = next.unwrap_or_else(|| self.cold(latest + 1, None));
        let mut executor = Executor::new(self, materialised, (next, None), result)?;
        executor.take_up(found.taken)?;
        if let Some((checkpoint, hash)) = reused {
            executor.restored_to(checkpoint, hash);
        }
        executor.drive_on(&policy, go_on, latest, cold)
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
        let finished = body::<TaskFinished>(finished);
        result.status = finished
            .as_ref()
            .map_or(crate::state::TaskStatus::Failed, |finished| finished.state);
        result.reason = finished.and_then(|finished| finished.reason);
        result.judged = taken.attempts.last().is_some_and(|attempt| attempt.judged);
        result.spent_micro_usd = taken
            .attempts
            .iter()
            .filter_map(|attempt| attempt.cost_micro_usd)
            .sum();
        result.attempts = taken.attempts;
        result.output = last(rows::RESULT).and_then(|row| crate::sandbox::result_output(&row.body));
        result.gaps = last(rows::PARTIAL)
            .and_then(body::<TaskPartial>)
            .map(|partial| partial.gaps)
            .unwrap_or_default();
        result.cwd = last(rows::TASK_STARTED)
            .and_then(body::<TaskStarted>)
            .map(|started| started.cwd);
        let head = reprise_store::journal::Journal::open(self.state, key)?.head()?;
        let sealed = head.is_some_and(|head| {
            self.prior_seals
                .iter()
                .any(|seal| seal.seq == head.seq && seal.digest == head.digest)
        });
        if !sealed {
            let key_file = self.key_file("sealing a journal taken up again")?.clone();
            let mut audit = reprise_store::audit::AuditLog::open(self.state, key_file)?;
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

impl Executor<'_, '_> {
    /// Drives the lifecycle on from where `go_on` says, under `policy`;
    /// `latest` is the last attempt the journal holds, `cold` whether the
    /// next one goes cold.
    fn drive_on(&mut self, policy: &Policy, go_on: GoOn, latest: u32, cold: bool) -> Result<()> {
        match go_on {
            GoOn::Closing {
                terminal,
                effects,
                head,
            } => {
                if effects.contains(&Effect::CommitResult { attempt: latest })
                    && let Some(base) = self.run.base.as_deref().filter(|_| self.isolated)
                {
                    self.orphan = crate::sandbox::orphaned_result(
                        self.run.workspace,
                        self.run.run_id,
                        &self.run.task.id,
                        base,
                    )?;
                }
                self.closing(latest, head);
                self.drive_with(policy, TaskState::Closing(terminal), effects)
            }
            GoOn::Stopped(summary, kind) => {
                let attempt = summary.n;
                self.stopped(summary, kind);
                self.drive_with(
                    policy,
                    TaskState::Diagnosing { attempt },
                    vec![Effect::Diagnose { attempt }],
                )
            }
            GoOn::Interrupted {
                from,
                attempt,
                session,
                agent_ended,
            } => {
                self.interrupted(attempt, session, agent_ended)?;
                match from {
                    TaskState::Running { .. } => self.drive_from(
                        policy,
                        from,
                        vec![TaskEvent::AgentEnded {
                            session_gone: false,
                        }],
                    ),
                    // Its gates run again, on the interrupted attempt's report.
                    _ => self.drive_with(policy, from, vec![Effect::RunGates { attempt }]),
                }
            }
            GoOn::Checkpointing { from, attempt } => {
                self.drive_with(policy, from, vec![Effect::TakeCheckpoint { attempt }])
            }
            GoOn::Resumed { attempt } => self.drive_from(
                policy,
                TaskState::Suspended { attempt },
                vec![TaskEvent::Resumed { cold }],
            ),
        }
    }
}
