//! A task's close: its failed tree kept, its result committed, its end
//! recorded (`task.finished`) and its journal sealed in the audit chain.

use reprise_core::lifecycle::{Failure, TaskEvent, TaskState, Terminal};
use reprise_core::rows::TaskFinished;
use reprise_store::state::now_rfc3339;

use super::executor::Executor;
use crate::checkpoints;
use crate::error::Result;
use crate::events::Event;
use crate::state::TaskStatus;

impl Executor<'_, '_> {
    /// The failed tree is kept as a checkpoint before the tree goes back to
    /// what the task started from.
    pub(super) fn keep_failed_tree(&mut self) -> Result<()> {
        if let Some(store) = &self.snapshots {
            let hash = self.run.workspace_hash(&self.cwd)?;
            checkpoints::take(
                store,
                &mut self.journal,
                self.run.run_id,
                self.attempt.number,
                checkpoints::FAILED_TREE_LABEL,
                hash,
            )?;
        }
        Ok(())
    }

    pub(super) fn commit(&mut self, state: TaskState, attempt: u32) -> Result<TaskEvent> {
        self.result.status = match state {
            TaskState::Closing(Terminal::Partial) => TaskStatus::Partial,
            _ => TaskStatus::Passed,
        };
        let (Some(base), Some(head), true) = (
            self.run.base.clone(),
            self.attempt.finished_head,
            self.isolated,
        ) else {
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

    /// Records how the task ended and seals its journal.
    pub(super) fn finish(&mut self, terminal: Terminal) -> Result<()> {
        let run = self.run;
        let attempts = self.result.attempts.len();
        let (status, reason) = self.ending(terminal);
        self.result.status = status;
        self.result.reason = reason;
        self.journal.append_row(
            &now_rfc3339(),
            &TaskFinished {
                run_id: run.run_id.to_owned(),
                state: self.result.status,
                reason: self.result.reason.clone(),
                attempts: u32::try_from(attempts).unwrap_or(u32::MAX),
                spent_micro_usd: self.result.spent_micro_usd,
                lifecycle: terminal,
            },
        )?;
        self.seal()
    }

    /// The task's state and the reason for it, as `terminal` ends it.
    fn ending(&mut self, terminal: Terminal) -> (TaskStatus, Option<String>) {
        match terminal {
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
        }
    }

    /// Seals the journal in the audit chain, unless rows the engine did not
    /// write are in it (the chain may verify, but a seal would vouch for
    /// them); a seal that cannot be written is a warning.
    fn seal(&mut self) -> Result<()> {
        let run = self.run;
        let task = run.task;
        let foreign = self.journal.foreign_writes_seen()?;
        if foreign {
            run.emit(Event::Warning {
                task: Some(task.id.clone()),
                message:
                    "journal not sealed: it was written to behind the engine's back during the task"
                        .to_owned(),
            });
        } else if let Err(err) = self.signer.seal(run.state, &self.key, &run.prior_seals) {
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
            .attempt
            .diagnosis
            .as_ref()
            .map_or("blocked", |diagnosis| diagnosis.kind.as_str());
        match self.attempt.report.as_ref().map(|report| &report.outcome) {
            Some(reprise_agents::AttemptOutcome::Infra { detail, .. }) if !detail.is_empty() => {
                format!("{kind}: {detail}")
            }
            _ => kind.to_owned(),
        }
    }
}
