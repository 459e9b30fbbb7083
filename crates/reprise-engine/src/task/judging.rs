//! An attempt judged and diagnosed: its gates run on the base's copy of
//! their files, the verdict recorded (`attempt.finished`, `task.partial`),
//! its anomalies and diagnosis, the retry budget it consumes, and the wait
//! provider trouble asks for.

use std::time::Instant;

use reprise_agents::{AttemptOutcome, AttemptReport};
use reprise_core::lifecycle::{Judgement, TaskEvent};
use reprise_core::outcome::AttemptOutcome as Classified;
use reprise_core::recovery::{Symptoms, diagnose};
use reprise_core::rows::{
    self, AttemptAnomaly, RecoveryBackOff, RecoveryDiagnosis, RetryBudgetRefused, RetryBudgetUsed,
    TaskPartial,
};
use reprise_store::state::now_rfc3339;

use super::Previous;
use super::bodies::{accepted_of, attempt_finished};
use super::executor::Executor;
use crate::error::Result;
use crate::events::{Event, Phase};
use crate::gates::GateRun;
use crate::recovery;
use crate::state::{AttemptSummary, Outcome};

impl Executor<'_, '_> {
    /// Judges the attempt that just ended and records its verdict.
    pub(super) fn run_gates(&mut self, attempt: u32) -> Result<TaskEvent> {
        let run = self.run;
        let task = run.task;
        let report = self
            .attempt
            .report
            .take()
            .expect("the agent ran before its gates");
        let (summary, classified, wrote_outside) = self.judge_attempt(attempt, &report)?;
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
        let judgement = self.judgement_of(&summary, wrote_outside);
        let body = attempt_finished(
            run.run_id,
            (self.next.mode, accepted_of(judgement)),
            &summary,
            &report,
            &run.containment(&report, self.attempt.sandboxed),
        );
        // The journal may have been torn while the gates ran.
        self.mend_journal()?;
        self.attempt.finished_head = Some(self.journal.append_row(&now_rfc3339(), &body)?);
        // Only an attempt that did not pass can be followed by a retry on
        // another host: its tree goes to the remote now.
        if let (Some(store), Some(tree)) = (&self.snapshots, self.attempt.left_tree.take())
            && summary.outcome != Outcome::Passed
        {
            run.send_tree(store, &tree, attempt);
        }
        run.emit(Event::AttemptFinished {
            task: task.id.clone(),
            summary: summary.clone(),
        });
        self.attempt.report = Some(report);
        self.attempt.summary = Some(summary);
        self.attempt.classified = Some(classified);
        Ok(TaskEvent::Judged(judgement))
    }

    /// Runs the gates on the attempt's reply (when it is one they judge)
    /// and classifies it. What the agent wrote outside `allowed_paths` is
    /// looked for first, before any gate can add to the tree: whatever the
    /// gates say, such an attempt is not accepted (the last value says
    /// so), and its tree is rolled back.
    fn judge_attempt(
        &mut self,
        attempt: u32,
        report: &AttemptReport,
    ) -> Result<(AttemptSummary, Classified, bool)> {
        let run = self.run;
        let task = run.task;
        // The gates run only on a reply `judge` does not settle without them.
        let judged_by_gates = matches!(
            &report.outcome,
            AttemptOutcome::Replied { exit_code, reply }
                if super::unjudged_reply(*exit_code, reply).is_none()
        );
        if judged_by_gates && !task.gates.is_empty() {
            run.emit(Event::Phase {
                task: task.id.clone(),
                attempt,
                phase: Phase::Gates,
            });
        }
        let outside = self.outside_writes()?;
        let wrote_outside = outside.is_some();
        self.attempt.outside = Some(outside);
        // The gates run on the base's copy of their own files, whatever the
        // agent did to them; what it did is an anomaly.
        let changed = match &self.gate_files {
            Some((files, tree)) => files.restore(tree)?,
            None => Vec::new(),
        };
        // What the gates leave in a worktree is theirs, not the agent's: it
        // goes after them (`crate::leftovers`). Never in place, where the
        // user may be working beside the task.
        let worktree = self
            .snapshots
            .as_ref()
            .filter(|_| run.workspace.isolates(task))
            .map(|store| store.tree().to_path_buf());
        let before_gates = match &worktree {
            Some(tree) => Some(crate::leftovers::Listing::of(tree)?),
            None => None,
        };
        let (mut summary, mut classified) = self.gates_verdict(attempt, report);
        if let (Some(tree), Some(listing)) = (&worktree, &before_gates) {
            listing.remove_new(tree)?;
        }
        self.void_protected(&changed, &mut summary, &mut classified)?;
        if wrote_outside && summary.outcome == Outcome::Passed {
            // Its gates passed, but the work went where it may not: a
            // verdict on the work, whatever they said.
            summary.outcome = Outcome::Judged;
            summary.judged = true;
        }
        Ok((summary, classified, wrote_outside))
    }

    /// The gates' verdict on the attempt, in its scratch dir and
    /// environment, each graded gate at the retry budget's level.
    fn gates_verdict(&self, attempt: u32, report: &AttemptReport) -> (AttemptSummary, Classified) {
        let run = self.run;
        let tmp = self
            .attempt
            .tmp
            .clone()
            .expect("the attempt has a scratch dir");
        let env = self.attempt_env(&tmp);
        let budget = &self.budget;
        let level_of = |criterion: &str| match budget {
            Some(budget) => budget.level(criterion),
            None => run.budget_free_level(criterion),
        };
        let supervision = run.supervision(&self.cwd, &tmp, false);
        let gate_run = GateRun {
            task: &run.task.id,
            attempt,
            cwd: &self.cwd,
            reply: "",
            cancel: run.cancel,
            env: &env,
            supervision: supervision.as_ref(),
        };
        let started = self.attempt.started.unwrap_or_else(Instant::now);
        run.judge(
            attempt,
            self.next.mode,
            report,
            &gate_run,
            &level_of,
            started,
        )
    }

    /// Puts the gates' own files back as the base has them (what the gates
    /// left there themselves goes too, a `__pycache__`, so the next
    /// attempt's tree holds the base's copy again); the verdicts of gates
    /// whose files the agent `changed` do not count, and the change is an
    /// anomaly.
    fn void_protected(
        &mut self,
        changed: &[String],
        summary: &mut AttemptSummary,
        classified: &mut Classified,
    ) -> Result<()> {
        self.attempt.protected_changed = None;
        let Some((files, tree)) = &self.gate_files else {
            return Ok(());
        };
        files.restore(tree)?;
        if let Some(anomaly) = files.anomaly(changed) {
            crate::gate_files::void_verdicts(
                self.run.task,
                &files.gates_of(changed),
                changed,
                summary,
                classified,
            );
            self.attempt.protected_changed = Some(anomaly);
        }
        Ok(())
    }

    /// What becomes of a judged attempt: one that changed the gates' files
    /// or wrote outside its paths fails, whatever its gates said.
    fn judgement_of(&self, summary: &AttemptSummary, wrote_outside: bool) -> Judgement {
        if self.attempt.protected_changed.is_some() || wrote_outside {
            Judgement::Failed
        } else if summary.outcome == Outcome::Passed {
            Judgement::Passed
        } else if recovery::partial_gaps(self.run.task, summary).is_some() {
            Judgement::Partial
        } else {
            Judgement::Failed
        }
    }

    pub(super) fn record_partial(&mut self, attempt: u32) -> Result<()> {
        let summary = self.attempt.summary.as_ref().expect("a judged attempt");
        let gaps = recovery::partial_gaps(self.run.task, summary).unwrap_or_default();
        // Enough of the work passed to keep: committed like a pass, with the
        // gates it did not pass as its gaps.
        self.journal.append_row(
            &now_rfc3339(),
            &TaskPartial {
                run_id: self.run.run_id.to_owned(),
                attempt,
                gaps: gaps.clone(),
            },
        )?;
        self.result.reason = Some(format!("partial: gaps {}", gaps.join(", ")));
        self.result.gaps = gaps;
        Ok(())
    }

    pub(super) fn diagnose(&mut self, attempt: u32) -> Result<TaskEvent> {
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
        let anomalies = self.record_anomalies(attempt)?;
        let summary = self.attempt.summary.as_ref().expect("a judged attempt");
        let report = self.attempt.report.as_ref().expect("an attempt that ran");
        let classified = self
            .attempt
            .classified
            .as_ref()
            .expect("a classified attempt");
        let evidence = recovery::Evidence::of(report, summary);
        let diagnosis = diagnose(Symptoms {
            outcome: classified,
            anomalies: &anomalies,
            same_judged_in_a_row: self.streak.see(&evidence, summary.judged),
        });
        self.journal.append_row(
            &now_rfc3339(),
            &RecoveryDiagnosis {
                run_id: run.run_id.to_owned(),
                attempt,
                severity: diagnosis.severity,
                kind: diagnosis.kind.clone(),
                strategy: diagnosis.strategy,
                evidence: rows::Evidence {
                    reply_hash: evidence.reply_hash,
                    gates: evidence.gates,
                },
                anomalies,
            },
        )?;
        let strategy = diagnosis.strategy;
        self.attempt.diagnosis = Some(diagnosis);
        Ok(TaskEvent::Diagnosed(strategy))
    }

    /// The attempt's anomalies, each recorded (`attempt.anomaly`) and said:
    /// what it changed of the gates' files, what it wrote outside its paths
    /// (found before its gates ran; an attempt a stop cut short had none
    /// run), and what its summary shows.
    fn record_anomalies(&mut self, attempt: u32) -> Result<Vec<reprise_core::recovery::Anomaly>> {
        let run = self.run;
        let mut anomalies: Vec<_> = self.attempt.protected_changed.take().into_iter().collect();
        let outside = match self.attempt.outside.take() {
            Some(outside) => outside,
            None => self.outside_writes()?,
        };
        let summary = self.attempt.summary.as_ref().expect("a judged attempt");
        anomalies.extend(recovery::anomalies(run.task, summary, outside));
        for anomaly in &anomalies {
            self.journal.append_row(
                &now_rfc3339(),
                &AttemptAnomaly {
                    run_id: run.run_id.to_owned(),
                    attempt,
                    anomaly: anomaly.clone(),
                },
            )?;
            run.emit(Event::Anomaly {
                task: run.task.id.clone(),
                attempt,
                anomaly: anomaly.clone(),
            });
        }
        Ok(anomalies)
    }

    /// The budget bounds retries together with max_retries: the smaller
    /// wins. Each consumption is on the record, and so is a refusal.
    pub(super) fn consume_budget(&mut self, attempt: u32) -> Result<TaskEvent> {
        let run_id = self.run.run_id.to_owned();
        let Some(budget) = self.budget.as_mut() else {
            return Ok(TaskEvent::BudgetConsumed { granted: true });
        };
        let at = now_rfc3339();
        let granted = match budget.consume() {
            Ok(decision) if decision.should_retry => {
                let body = RetryBudgetUsed {
                    run_id,
                    attempt,
                    decision,
                };
                self.journal.append_row(&at, &body)?;
                true
            }
            refused => {
                let (decision, reason) = match refused {
                    Ok(decision) => (Some(decision), None),
                    Err(err) => (None, Some(err.to_string())),
                };
                let body = RetryBudgetRefused {
                    run_id,
                    attempt,
                    decision,
                    reason,
                };
                self.journal.append_row(&at, &body)?;
                false
            }
        };
        Ok(TaskEvent::BudgetConsumed { granted })
    }

    /// Waits out provider trouble before a retry in place, and records how
    /// long and why.
    pub(super) fn back_off(&mut self, attempt: u32) -> Result<()> {
        let Some(classified) = &self.attempt.classified else {
            return Ok(());
        };
        if let Some((wait, source)) = recovery::back_off(
            classified,
            self.attempt.report.as_ref(),
            attempt,
            self.run.cancel,
        ) {
            self.journal.append_row(
                &now_rfc3339(),
                &RecoveryBackOff {
                    run_id: self.run.run_id.to_owned(),
                    attempt,
                    wait_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                    source,
                },
            )?;
        }
        Ok(())
    }
}
