//! What comes between a failed attempt and the next: the rollback the
//! lifecycle asks for, the retry decision (recorded in journal, spine and
//! audit chain before it is acted on, or its cold fallback recorded as
//! such), and the cold fall-back when the CLI lost the session.

use reprise_core::lifecycle::{RollbackReason, RollbackTarget, TaskEvent, TaskState};
use reprise_core::recovery::Strategy;
use reprise_core::retry::{DecisionRecord, RetryMode, failed_decision_metadata};
use reprise_core::rows::{AttemptMode, RetryModification};

use super::attempt::RetryChanges;
use super::executor::Executor;
use super::{Previous, RetryBasis};
use crate::error::Result;
use crate::events::Event;
use crate::records::record_decision;

impl Executor<'_, '_> {
    pub(super) fn roll_back(
        &mut self,
        state: TaskState,
        to: RollbackTarget,
        reason: RollbackReason,
    ) -> Result<()> {
        let target = match to {
            RollbackTarget::BeforeAttempt(_) => &self.checkpoints.before_latest,
            RollbackTarget::Base => &self.checkpoints.base,
        };
        let (Some(store), Some((checkpoint, hash))) = (&self.snapshots, target) else {
            return Ok(());
        };
        let why = match reason {
            RollbackReason::Diagnosis => self
                .attempt
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
            &mut self.signer,
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

    /// Decides attempt `next_attempt`'s mode and what it sends; a decision
    /// path that fails sends it cold, recorded as such.
    pub(super) fn decide(&mut self, next_attempt: u32, rolled_back: bool) -> Result<TaskEvent> {
        let run = self.run;
        let own_checkpoint = self
            .attempt
            .agent_ended
            .expect("the attempt ended and was recorded");
        // After a rollback the workspace the decision compares with is the
        // checkpoint it restored, not the failed attempt's.
        let restored = rolled_back
            .then(|| {
                self.checkpoints
                    .before_latest
                    .as_ref()
                    .map(|(_, hash)| *hash)
            })
            .flatten();
        let previous = self
            .previous
            .clone()
            .expect("the attempt just judged is the previous one");
        self.changes = self.retry_changes(&previous)?;
        let mut verified = self.verified.take();
        let modification = self.changes.modification();
        let basis = RetryBasis {
            own_checkpoint,
            restored,
            modification: modification.as_ref(),
            previous: &previous,
            next_attempt,
            since_last_request: self
                .attempt
                .agent_ended_at
                .map_or(std::time::Duration::MAX, |ended| ended.elapsed()),
            same_failure_in_a_row: self.streak.in_a_row(),
            chain_broken: std::mem::take(&mut self.chain_broken),
        };
        let cwd = self.cwd.clone();
        let decided = run.decide_retry(self.chains(), &mut verified, &cwd, basis);
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
            cold: self.next.mode == AttemptMode::Cold,
        })
    }

    /// What the retry changes besides its mode: after a request for
    /// context, what the plan's `on_needs_context` says (and the decision's
    /// row says what changed); else nothing. What the agent asked is kept
    /// beside the chain; the row binds its hash.
    fn retry_changes(&self, previous: &Previous) -> Result<RetryChanges> {
        let run = self.run;
        let asked = self
            .attempt
            .diagnosis
            .as_ref()
            .is_some_and(|diagnosis| diagnosis.strategy == Strategy::RetryWithContext);
        if !asked {
            return Ok(RetryChanges::default());
        }
        let on_needs_context = &run.task.on_needs_context;
        let needs_context_hash = match previous.needs_context.as_ref() {
            Some((what, _)) => Some(reprise_store::replies::keep_agent_text(
                run.state,
                run.run_id,
                &run.task.id,
                what,
            )?),
            None => None,
        };
        Ok(RetryChanges {
            timeout: on_needs_context.timeout,
            model: on_needs_context.model.clone(),
            modification: Some(RetryModification {
                needs_context_hash,
                timeout_ms: on_needs_context
                    .timeout
                    .map(|timeout| u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX)),
                prompt_added: on_needs_context.prompt.is_some(),
                model: on_needs_context.model.clone(),
            }),
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
        let modification = self.changes.modification();
        let chains = self.chains();
        match record_decision(
            chains.journal,
            chains.signer,
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

    /// The CLI says the session is gone: a second decision, recorded, and
    /// the same attempt runs again, cold.
    pub(super) fn fall_back_cold(&mut self, attempt: u32) -> Result<()> {
        let run = self.run;
        if let Some(first) = self.last_decision.take() {
            let second = first.session_unavailable();
            let chains = self.chains();
            record_decision(
                chains.journal,
                chains.signer,
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
}
