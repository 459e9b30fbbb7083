//! Parks and pauses of a running task (DESIGN.md section 9): the stopped
//! attempt listed as parked, the `task.suspend` or `task.pause` row written
//! (before the agent is halted when it still runs), a pause waited out, and
//! a park's process and sandbox given back, each release citing its receipt.

use reprise_agents::{AttemptOutcome, AttemptReport, SessionMode};
use reprise_core::TaskId;
use reprise_core::digest::Digest;
use reprise_core::lifecycle::TaskEvent;
use reprise_core::retry::{Decision, RetryMode};
use reprise_core::rows::{
    Accepted, AttemptMode, EnvelopeBalance, JournalHead, ParkCause, ProcessReleased, Requester,
    Resource, SuspendBody, TaskPause, TaskUnpause, Wake,
};
use reprise_store::state::now_rfc3339;
use serde::Serialize;
use serde_json::Value;

use super::NextAttempt;
use super::attempt::{Halted, RecordedPark, RecordedPause, StoppedAgent};
use super::bodies::attempt_finished;
use super::executor::Executor;
use crate::error::Result;
use crate::events::Event;
use crate::park::{ParkReply, ParkRequest, PauseEnd, Stop};
use crate::state::{AttemptSummary, Outcome, TaskStatus};

/// The answer to whoever asked for a pause, once the task is paused.
#[derive(Serialize)]
struct PausedAnswer<'p> {
    ok: bool,
    paused: bool,
    run_id: &'p str,
    task: &'p TaskId,
    attempt: u32,
}

/// The answer to whoever asked for an unpause: the next attempt's mode.
#[derive(Serialize)]
struct UnpausedAnswer<'p> {
    ok: bool,
    unpaused: bool,
    run_id: &'p str,
    task: &'p TaskId,
    mode: AttemptMode,
}

/// Answers a control request; one whose asker has gone needs no answer.
fn answer(reply: &ParkReply, answer: impl Serialize) {
    let _ = reply.send(serde_json::to_value(answer).expect("an answer serialises"));
}

impl Executor<'_, '_> {
    /// The agent was stopped for a park: what it cost is counted, its
    /// session kept for a warm resume, its output kept, and the attempt
    /// listed as parked (not judged, not a failure).
    pub(super) fn stopped_for_park(&mut self, attempt: u32, report: AttemptReport, paused: bool) {
        let run = self.run;
        self.result.spent_micro_usd += report.cost_micro_usd.unwrap_or(0);
        if let Some(session_id) = &report.session_id {
            run.preserve_transcript(session_id, &self.cwd);
        }
        let summary = self.stopped_summary(attempt, &report);
        self.keep_logs(attempt, &report, &summary);
        self.remove_tmp();
        let accepted = if paused {
            Accepted::Paused
        } else {
            Accepted::Parked
        };
        let body = attempt_finished(
            run.run_id,
            (self.next.mode, accepted),
            &summary,
            &report,
            &run.containment(&report, self.attempt.sandboxed),
        );
        // A store failure here surfaces at the park's own first write.
        let _ = self.journal.append_row(&now_rfc3339(), &body);
        self.stopped_agent = Some(StoppedAgent {
            session: report.session_id.or_else(|| self.last_session()),
        });
        self.result.attempts.push(summary);
    }

    /// The summary of an attempt a park or pause stopped. A park the
    /// agent's own stop asked for keeps what the attempt was (a usage
    /// limit, a question); a requested one is just parked.
    fn stopped_summary(&self, attempt: u32, report: &AttemptReport) -> AttemptSummary {
        let (outcome, infra_kind) = match &report.outcome {
            AttemptOutcome::Infra { kind, .. } if report.park.is_some() => {
                (Outcome::Infra, Some(kind.as_str().to_owned()))
            }
            _ => (Outcome::Parked, None),
        };
        AttemptSummary {
            n: attempt,
            mode: self.next.mode.as_str().to_owned(),
            session_id: report.session_id.clone(),
            judged: false,
            outcome,
            infra_kind,
            exit_code: None,
            gates: Vec::new(),
            cost_micro_usd: report.cost_micro_usd,
            elapsed_ms: self.attempt.started.map_or(0, |started| {
                u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX)
            }),
            agent_us: u64::try_from(report.elapsed.as_micros()).unwrap_or(u64::MAX),
            gates_us: 0,
        }
    }

    /// The session of the latest attempt that had one.
    fn last_session(&self) -> Option<String> {
        self.result
            .attempts
            .iter()
            .rev()
            .find_map(|attempt| attempt.session_id.clone())
    }

    /// The session of the agent a park or pause stopped, if it had one.
    fn stopped_session(&self) -> Option<String> {
        self.stopped_agent
            .as_ref()
            .and_then(|stopped| stopped.session.clone())
    }

    /// Records the pause, unless its row was written before the agent was
    /// halted (the agent is stopped and reaped by now; sandbox, seat and
    /// reservation kept), and waits for what ends it: an unpause (the next
    /// attempt continues the session when nothing changed), a park, the
    /// pause's upgrade to a park, or the run's cancel.
    pub(super) fn pause(&mut self, next: u32) -> Result<TaskEvent> {
        let run = self.run;
        let Some((recorded, reply)) = self.pause_recorded(next)? else {
            return Ok(TaskEvent::ParkRequested);
        };
        let RecordedPause {
            head,
            workspace_hash,
            session_id,
            upgrade_after,
        } = recorded;
        // A session the pause's row could not name yet (the CLI names it
        // when it ends) is the stopped attempt's.
        let session_id = session_id.or_else(|| self.stopped_session());
        let attempt = next.saturating_sub(1);
        if let Some(reply) = reply {
            answer(
                &reply,
                PausedAnswer {
                    ok: true,
                    paused: true,
                    run_id: run.run_id,
                    task: &run.task.id,
                    attempt,
                },
            );
        }
        run.emit(Event::TaskPaused {
            task: run.task.id.clone(),
            attempt,
            upgrade_after,
        });
        self.wait_out_pause(
            next,
            (head.digest, workspace_hash, session_id),
            upgrade_after,
        )
    }

    /// The pause's row, and the answer it owes: the one written before the
    /// agent was halted, else written now. `None` when a park came first:
    /// it is what happens.
    fn pause_recorded(&mut self, next: u32) -> Result<Option<(RecordedPause, Option<ParkReply>)>> {
        let run = self.run;
        match self.attempt.halted.take() {
            Some(Halted::Pause(recorded, reply)) => return Ok(Some((recorded, reply))),
            other => self.attempt.halted = other,
        }
        let (upgrade_after, requested_by, reply) = match run.control.take_any() {
            Some((
                Stop::Pause {
                    upgrade_after,
                    requested_by,
                },
                reply,
            )) => (upgrade_after, requested_by, reply),
            Some((Stop::Park(request), reply)) => {
                let _ = run.control.request(request, reply);
                return Ok(None);
            }
            None => (None, None, None),
        };
        let session_id = self.stopped_session().or_else(|| self.last_session());
        let recorded = self.record_pause(next, session_id, upgrade_after, requested_by.as_ref())?;
        Ok(Some((recorded, reply)))
    }

    /// Waits, paused, for what ends the pause of the attempt before `next`
    /// (its row's event hash, the workspace hash and the session it named).
    fn wait_out_pause(
        &mut self,
        next: u32,
        paused: (Digest, Digest, Option<String>),
        upgrade_after: Option<std::time::Duration>,
    ) -> Result<TaskEvent> {
        let run = self.run;
        Ok(match run.control.wait_paused(upgrade_after, run.cancel) {
            PauseEnd::Unpause(reply, requested_by) => {
                let event = self.unpause(next, paused, requested_by.as_ref())?;
                if let Some(reply) = reply {
                    answer(
                        &reply,
                        UnpausedAnswer {
                            ok: true,
                            unpaused: true,
                            run_id: run.run_id,
                            task: &run.task.id,
                            mode: self.next.mode,
                        },
                    );
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
                    ParkRequest {
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
        requested_by: Option<&Requester>,
    ) -> Result<RecordedPause> {
        let run = self.run;
        // The command's --upgrade-after first, then the plan's key.
        let upgrade_after = upgrade_after.or(run.task.pause_upgrade_after);
        let workspace_hash = run.workspace_hash(&self.cwd)?;
        let body = TaskPause {
            run_id: run.run_id.to_owned(),
            attempt: next.saturating_sub(1),
            session_id: session_id.clone(),
            workspace_hash,
            upgrade_after_ms: upgrade_after
                .map(|after| u64::try_from(after.as_millis()).unwrap_or(u64::MAX)),
            requested_by: requested_by.cloned(),
        };
        let head = self.journal.append_row(&now_rfc3339(), &body)?;
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
        requested_by: Option<&Requester>,
    ) -> Result<TaskEvent> {
        let run = self.run;
        let live = run.workspace_hash(&self.cwd)?;
        let decision = self.unpause_decision(live, (pause, paused_hash), session_id.as_deref());
        // The attempt the pause stopped does not count.
        self.extra_attempts += 1;
        let body = TaskUnpause {
            run_id: run.run_id.to_owned(),
            attempt: next,
            pause,
            mode: decision.mode,
            downgrade_reason: decision.downgrade_reason,
            workspace_hash: live,
            lifecycle: self.effective_policy(),
            requested_by: requested_by.cloned(),
        };
        self.journal.append_row(&now_rfc3339(), &body)?;
        self.next = match (decision.mode, session_id) {
            (RetryMode::Warm, Some(session_id)) => NextAttempt {
                mode: AttemptMode::Warm,
                session: SessionMode::Resume { session_id },
                prompt: reprise_core::prompt::resume_prompt(
                    Some("a person paused it to look"),
                    None,
                ),
            },
            _ => run.cold(next, self.previous.as_ref()),
        };
        Ok(TaskEvent::Unpaused {
            cold: self.next.mode == AttemptMode::Cold,
        })
    }

    /// The mode the attempt after a pause runs in, decided as a retry's is
    /// from the pause's row (`pause`, the workspace hash it recorded) and
    /// the workspace now (`live`); a session that cannot be had makes it
    /// cold.
    fn unpause_decision(
        &self,
        live: Digest,
        (pause, paused_hash): (Digest, Digest),
        session_id: Option<&str>,
    ) -> Decision {
        use reprise_core::retry::{Checkpoint as DecisionCheckpoint, DecisionInput, decide};
        let run = self.run;
        let checkpoint = DecisionCheckpoint {
            session_id: session_id.map(str::to_owned),
            // Checked on the way back (below).
            session_saved: true,
            workspace_hash: paused_hash,
            event_hash: pause,
        };
        let decision = decide(DecisionInput {
            requested: run.requested_mode_only(session_id),
            capability: run.adapter.strategy().capability(),
            checkpoint: Some(&checkpoint),
            live_workspace_hash: live,
            fresh_pinned: run.task.agent_restart_between_retries,
            chain_verified: true,
            session_elsewhere: false,
        });
        let session_ok = session_id.is_some_and(|id| run.ensure_session(id, &self.cwd));
        if decision.mode != RetryMode::Cold && !session_ok {
            return reprise_core::retry::session_unavailable(decision);
        }
        decision
    }

    /// Records the park (unless its row and receipt were written before
    /// the agent was halted) and gives back the process and the sandbox,
    /// each release citing the receipt; the coordinator gives back the seat
    /// and the budget and moves the ledger.
    pub(super) fn park(&mut self, next: u32) -> Result<()> {
        let run = self.run;
        let RecordedPark {
            body,
            head,
            receipt,
            reply,
        } = self.park_recorded(next)?;
        let mut released = Vec::new();
        // The agent's process group was killed and reaped by its driver
        // before the attempt returned.
        let process = serde_json::to_value(ProcessReleased {
            stopped: self.stopped_agent.is_some(),
            reaped: true,
            attempt: body.attempt,
            note: None,
        })
        .expect("a release serialises");
        self.write_release((head, receipt), (Resource::Process, &process))?;
        released.push((Resource::Process, process));
        let sandbox = self.release_sandbox(next)?;
        self.write_release((head, receipt), (Resource::Sandbox, &sandbox))?;
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

    /// One release of the park at `head`, citing its receipt.
    fn write_release(
        &mut self,
        (head, receipt): (reprise_core::record::Head, Option<Digest>),
        (resource, detail): (Resource, &Value),
    ) -> Result<()> {
        self.signer.park_release(
            (&self.key, self.run.run_id),
            (head.digest, receipt),
            resource,
            detail.clone(),
        )
    }

    /// The park's row and receipt: the ones written before the agent was
    /// halted, else written now for the request waiting (or a plain one).
    fn park_recorded(&mut self, next: u32) -> Result<RecordedPark> {
        match self.attempt.halted.take() {
            Some(Halted::Park(recorded)) => return Ok(*recorded),
            other => self.attempt.halted = other,
        }
        let (request, reply) = self.run.control.take().unwrap_or((
            ParkRequest {
                wake: Wake::Resume,
                cause: ParkCause::Request,
                reason: None,
                question: None,
                requested_by: None,
            },
            None,
        ));
        let attempt = next
            .saturating_sub(u32::from(self.stopped_agent.is_some()))
            .max(1);
        let session_id = self.stopped_session().or_else(|| self.last_session());
        self.record_park(attempt, session_id, &request, reply)
    }

    /// A park's first steps, each durable before the next and all before
    /// anything is released: the `task.suspend` row (attempt `attempt`,
    /// session `session_id`), the agent checkpoint, the receipt.
    fn record_park(
        &mut self,
        attempt: u32,
        session_id: Option<String>,
        request: &ParkRequest,
        reply: Option<ParkReply>,
    ) -> Result<RecordedPark> {
        let run = self.run;
        let workspace_hash = run.workspace_hash(&self.cwd)?;
        let reserved = run.envelope_micro_usd;
        let head_before = self.journal.head()?;
        // What the agent asked is kept beside the chain: the row holds its
        // hash.
        let question_hash = request
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
            .transpose()?;
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
                spent_micro_usd: self.result.spent_micro_usd,
                headroom_micro_usd: reserved
                    .map_or(0, |reserved| reserved.saturating_sub(self.spent_this_leg())),
            },
            wake: request.wake.clone(),
            cause: request.cause,
            reason: request.reason.clone(),
            question: None,
            question_hash,
            requested_by: request.requested_by.clone(),
            grant_hash: crate::park::bound_grant(
                &run.grant,
                &self.key,
                run.run_id,
                head_before.map(|head| head.digest),
            ),
        };
        let head = self.journal.append_row(&now_rfc3339(), &body)?;
        if !body.grant_hash.is_empty() {
            crate::park::write_agent_checkpoint(
                run.state,
                &mut self.journal,
                &self.key,
                &run.grant,
                (run.run_id, head.digest, &body.grant_hash),
            )?;
            self.ship_agent_checkpoint()?;
        }
        if let (Some(question), Some(_)) = (&request.question, &body.question_hash) {
            self.signer
                .ship_kept(crate::evidence::Shipment::AgentText {
                    run_id: run.run_id.to_owned(),
                    text: question.clone(),
                })?;
        }
        crate::park::hold_at("suspend");
        let receipt = self.signer.park_receipt(&self.key, &body, head)?;
        Ok(RecordedPark {
            body,
            head,
            receipt,
            reply,
        })
    }

    /// On a fleet worker, the park's `checkpoint.json` just written, sent
    /// on to the coordinator (which keeps it once its row binds it).
    fn ship_agent_checkpoint(&mut self) -> Result<()> {
        if self.run.signing.key().is_some() {
            return Ok(());
        }
        let checkpoint =
            reprise_store::agent_checkpoint::read_checkpoint(self.run.state, &self.key)
                .map_err(|err| crate::error::EngineError::Park(err.to_string()))?
                .ok_or_else(|| {
                    crate::error::EngineError::Park(format!(
                        "the park of {} wrote no agent checkpoint",
                        self.key
                    ))
                })?;
        self.signer
            .ship_kept(crate::evidence::Shipment::AgentCheckpoint { checkpoint })
    }

    /// A park or pause was asked for while attempt `attempt`'s agent runs:
    /// its row (a park's receipt too) is written now, before the agent is
    /// halted.
    pub(super) fn record_before_halt(&mut self, attempt: u32) -> Result<()> {
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
                self.attempt.halted = Some(Halted::Park(Box::new(recorded)));
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
                self.attempt.halted = Some(Halted::Pause(recorded, reply));
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
                Some(crate::checkpoints::take(
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
        if let Some(store) = &self.snapshots {
            run.send_park_checkpoints(store)?;
        }
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
}
