//! What a run shows on a terminal while it goes: one result line per
//! finished attempt (`PASS [  1.2s]`, cargo-nextest's way), and on an
//! interactive terminal one status line per running task, redrawn in place
//! with its attempt, phase and elapsed time. Piped output, `NO_COLOR` and
//! `--color never` get plain lines only: no colour, no redraw.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use reprise_core::TaskId;
use reprise_engine::{Event, EventSink, Outcome as AttemptOutcome, TaskStatus};

use crate::commands::run::workspace_line;
use crate::commands::status::{attempt_line, attempt_line_uncosted};
use crate::output::{Display, count, seconds, short};

/// `text` in an ANSI colour when colour is on (31 red, 32 green, 33 yellow).
fn paint(display: Display, code: u8, text: &str) -> String {
    if display.color {
        format!("\x1b[{code}m{text}\x1b[0m")
    } else {
        text.to_owned()
    }
}

/// Prints a run's events as they happen.
#[derive(Debug)]
pub(crate) struct Progress {
    display: Display,
    multi: Option<MultiProgress>,
    bars: BTreeMap<TaskId, ProgressBar>,
    /// Each task's current attempt and mode, for its status line.
    attempts: BTreeMap<TaskId, (u32, String)>,
    /// The tasks that wait, and for what.
    waiting: BTreeMap<TaskId, String>,
    /// Their one status line, while any waits (live display only).
    waiting_bar: Option<ProgressBar>,
    /// A rehearsal: its agents' cost figures are for tokens nobody paid.
    rehearsal: bool,
}

impl Progress {
    pub(crate) fn new(display: Display) -> Self {
        Self {
            display,
            multi: display
                .live
                .then(|| MultiProgress::with_draw_target(ProgressDrawTarget::stdout())),
            bars: BTreeMap::new(),
            attempts: BTreeMap::new(),
            waiting: BTreeMap::new(),
            waiting_bar: None,
            rehearsal: false,
        }
    }

    /// The lines of a rehearsal: each attempt says nothing was spent in
    /// place of its agent's cost figure (what it would cost is priced when
    /// the rehearsal ends).
    pub(crate) fn for_rehearsal(mut self, rehearsal: bool) -> Self {
        self.rehearsal = rehearsal;
        self
    }

    fn line(&self, text: &str) {
        match &self.multi {
            Some(multi) => {
                let _ = multi.println(text);
            }
            None => {
                let mut stdout = std::io::stdout().lock();
                let _ = writeln!(stdout, "{text}");
            }
        }
    }

    /// A task's status line: `[task] attempt 2 (warm) · gates · 3s`.
    fn status(&mut self, task: &TaskId, phase: &str) {
        if self.multi.is_none() {
            return;
        }
        let (attempt, mode) = self
            .attempts
            .get(task)
            .cloned()
            .unwrap_or((1, "new".into()));
        self.bar(task)
            .set_message(format!("attempt {attempt} ({mode}) · {phase}"));
    }

    /// The task's status line, made on first use (only on a live display).
    fn bar(&mut self, task: &TaskId) -> &ProgressBar {
        let multi = self.multi.as_ref().expect("status lines on a live display");
        self.bars.entry(task.clone()).or_insert_with(|| {
            let bar = multi.add(ProgressBar::new_spinner());
            bar.set_style(
                ProgressStyle::with_template("{spinner} [{prefix}] {msg} · {elapsed}")
                    .expect("a valid template"),
            );
            bar.set_prefix(task.as_str().to_owned());
            bar.enable_steady_tick(Duration::from_millis(100));
            bar
        })
    }

    /// The one status line of the tasks that wait, under the running ones:
    /// `waiting: c for a seat (all 2 busy); d for dependency c; +3 more`.
    fn show_waiting(&mut self) {
        let Some(multi) = &self.multi else {
            return;
        };
        if self.waiting.is_empty() {
            if let Some(bar) = self.waiting_bar.take() {
                bar.finish_and_clear();
            }
            return;
        }
        const NAMED: usize = 3;
        let mut words: Vec<String> = self
            .waiting
            .iter()
            .take(NAMED)
            .map(|(task, detail)| format!("{task} for {detail}"))
            .collect();
        if self.waiting.len() > NAMED {
            words.push(format!("+{} more", self.waiting.len() - NAMED));
        }
        let bar = self.waiting_bar.get_or_insert_with(|| {
            let bar = multi.add(ProgressBar::new_spinner());
            bar.set_style(
                ProgressStyle::with_template("{spinner} waiting: {msg}").expect("a valid template"),
            );
            bar.enable_steady_tick(Duration::from_millis(100));
            bar
        });
        bar.set_message(words.join("; "));
    }

    /// The task waits no more.
    fn attempt_started(&mut self, task: &TaskId, attempt: u32, mode: &str) {
        self.not_waiting(task);
        self.attempts
            .insert(task.clone(), (attempt, mode.to_owned()));
        if let Some(bar) = self.bars.get(task) {
            bar.reset_elapsed();
        }
        if self.multi.is_some() {
            self.status(task, "starting");
        } else if !self.display.quiet {
            self.line(&format!("[{task}] attempt {attempt} ({mode}) started"));
        }
    }

    /// The result line of an attempt that ended.
    fn attempt_finished(&self, task: &TaskId, summary: &reprise_engine::AttemptSummary) {
        let mark = self.result_mark(&summary.outcome);
        let text = if self.rehearsal {
            format!(
                "{}; nothing spent (a rehearsal)",
                attempt_line_uncosted(summary)
            )
        } else {
            attempt_line(summary)
        };
        self.line(&format!(
            "{mark} [{}] [{task}] {text}",
            seconds(summary.elapsed_ms),
        ));
    }

    fn task_paused(&mut self, task: &TaskId, attempt: u32, upgrade_after: Option<Duration>) {
        if self.multi.is_some() {
            self.status(task, "paused");
        }
        if !self.display.quiet {
            let upgrade = upgrade_after
                .map(|after| {
                    format!(
                        "; a park after {}",
                        reprise_core::plan::format_duration(after)
                    )
                })
                .unwrap_or_default();
            self.line(&format!(
                "[{task}] attempt {attempt} paused: its worktree, seat and budget kept{upgrade}; go on: reprise task unpause {task}"
            ));
        }
    }

    fn task_finished(&mut self, task: &TaskId, status: TaskStatus, reason: Option<&str>) {
        self.not_waiting(task);
        if let Some(bar) = self.bars.remove(task) {
            bar.finish_and_clear();
        }
        if self.display.quiet {
            return;
        }
        let state = match status {
            TaskStatus::Passed => paint(self.display, 32, status.as_str()),
            TaskStatus::Partial => paint(self.display, 33, status.as_str()),
            TaskStatus::Failed | TaskStatus::Blocked => paint(self.display, 31, status.as_str()),
            _ => status.as_str().to_owned(),
        };
        match reason {
            Some(reason) => self.line(&format!("[{task}] {state}: {reason}")),
            None => self.line(&format!("[{task}] {state}")),
        }
    }

    fn not_waiting(&mut self, task: &TaskId) {
        if self.waiting.remove(task).is_some() {
            self.show_waiting();
        }
    }

    fn result_mark(&self, outcome: &AttemptOutcome) -> String {
        match outcome {
            AttemptOutcome::Passed => paint(self.display, 32, "PASS "),
            AttemptOutcome::Judged => paint(self.display, 31, "FAIL "),
            AttemptOutcome::Infra => paint(self.display, 33, "INFRA"),
            AttemptOutcome::NeedsContext => paint(self.display, 33, "ASK  "),
            AttemptOutcome::Parked => paint(self.display, 36, "PARK "),
        }
    }
}

/// A retry decision in one line: the mode, what was asked, why it was
/// downgraded, what was predicted, and the decision's hash.
fn decision_line(task: &TaskId, record: &reprise_core::retry::DecisionRecord) -> String {
    let reason = record
        .downgrade_reason
        .map(|reason| format!(", downgraded: {}", reason.as_str()))
        .unwrap_or_default();
    let hash = record
        .hash()
        .map(|hash| short(&hash.to_hex())[..8].to_owned())
        .unwrap_or_default();
    let auto = match (record.auto, record.predicted) {
        (Some(choice), _) => format!("; {}", choice.describe()),
        (None, Some(predicted)) => format!("; predicted {}", predicted.describe()),
        (None, None) => String::new(),
    };
    format!(
        "[{task}] retry decision: {} (requested {}{reason}{auto}), decision {hash}",
        record.retry_mode, record.requested_mode,
    )
}

impl EventSink for Progress {
    fn event(&mut self, event: &Event) {
        let quiet = self.display.quiet;
        match event {
            Event::RunStarted {
                run_id,
                plan_name,
                tasks,
                seats,
            } if !quiet => self.line(&format!(
                "run {run_id} ({plan_name}): {}, {}",
                count(*tasks as u64, "task"),
                count(*seats, "seat")
            )),
            Event::Workspace { workspace } if !quiet => self.line(&workspace_line(workspace)),
            Event::TaskWaiting { task, waiting } => {
                self.waiting.insert(task.clone(), waiting.detail.clone());
                if self.multi.is_some() {
                    self.show_waiting();
                } else if !quiet {
                    self.line(&format!("[{task}] waiting for {}", waiting.detail));
                }
            }
            Event::AttemptStarted {
                task,
                attempt,
                mode,
            } => self.attempt_started(task, *attempt, mode),
            Event::Phase {
                task,
                attempt,
                phase,
            } => {
                if self.multi.is_some() {
                    self.status(task, phase.as_str());
                } else if self.display.verbose {
                    self.line(&format!("[{task}] attempt {attempt}: {}", phase.as_str()));
                }
            }
            Event::AttemptFinished { task, summary } if !quiet => {
                self.attempt_finished(task, summary);
            }
            Event::Decision { task, record } if !quiet => {
                self.line(&decision_line(task, record));
            }
            Event::Anomaly {
                task,
                attempt,
                anomaly,
            } if !quiet => self.line(&format!(
                "[{task}] attempt {attempt}: anomaly {}",
                anomaly.kind()
            )),
            Event::TaskPaused {
                task,
                attempt,
                upgrade_after,
            } => self.task_paused(task, *attempt, *upgrade_after),
            Event::TaskFinished {
                task,
                status,
                reason,
            } => self.task_finished(task, *status, reason.as_deref()),
            Event::Warning {
                task: Some(task),
                message,
            } => self.line(&format!(
                "[{task}] {}: {message}",
                paint(self.display, 33, "warning")
            )),
            Event::Warning {
                task: None,
                message,
            } => self.line(&format!(
                "{}: {message}",
                paint(self.display, 33, "warning")
            )),
            _ => {}
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        for bar in self.bars.values().chain(&self.waiting_bar) {
            bar.finish_and_clear();
        }
    }
}
