//! A task's lifecycle as one pure transition: `(state, event) -> (state,
//! effects)`. The engine performs the effects (take a checkpoint, run the
//! agent, run the gates, diagnose, roll back, decide a retry, commit, finish),
//! records each in the task's journal, and feeds back the event the effect
//! produced. Every branch of recovery (rollbacks, partial results, blocked
//! tasks, retries in place, budgets) is a row of the table below and nowhere
//! else.
//!
//! | state                  | event                       | next state                        | effects |
//! |------------------------|-----------------------------|-----------------------------------|---------|
//! | queued                 | started                     | checkpointing 1                   | take checkpoint |
//! | checkpointing n        | checkpoint taken            | running n                         | spawn agent |
//! | running n (resumed)    | agent ended, session gone   | running n (cold)                  | fall back cold, spawn agent |
//! | running n              | agent ended                 | judging n                         | run gates |
//! | judging n              | judged passed               | closing passed                    | commit result |
//! | judging n              | judged partial              | closing partial                   | record partial, commit result |
//! | judging n              | judged failed               | diagnosing n                      | diagnose |
//! | diagnosing n           | diagnosed: block            | closing blocked                   | keep failed tree, roll back to base, close |
//! | diagnosing n (last)    | diagnosed: retry            | closing failed (attempts)         | keep failed tree, roll back to base, close |
//! | diagnosing n (budget)  | diagnosed: retry            | budgeting n                       | consume budget |
//! | diagnosing / budgeting | (budget granted)            | rolling back n, or retrying n     | roll back to n, or back off + decide |
//! | budgeting n            | budget refused              | closing failed (budget)           | keep failed tree, roll back to base, close |
//! | rolling back n, decide | rolled back                 | retrying n (rolled back)          | decide retry |
//! | retrying n             | decided cold (auto rule)    | rolling back n, then attempt      | roll back to n |
//! | retrying n             | decided                     | checkpointing n+1                 | take checkpoint |
//! | rolling back n, attempt| rolled back                 | checkpointing n+1                 | take checkpoint |
//! | closing t              | rolled back                 | closing t                         | (none) |
//! | closing t              | closed (delivered or not)   | closing t (failed if undelivered) | finish |
//! | closing t              | finished                    | t                                 | (none) |
//! | any open state         | cancel requested            | closing cancelled                 | close |
//! | checkpointing n        | park requested              | suspended (resumes as n)          | park |
//! | running n              | park requested              | suspended (resumes as n+1)        | park |
//! | suspended (as n)       | resumed (warm, fork or cold)| checkpointing n                   | take checkpoint |
//! | running n              | pause requested             | paused (resumes as n+1)           | pause |
//! | paused (as n)          | unpaused (warm or cold)     | checkpointing n                   | take checkpoint |
//! | paused (as n)          | park requested              | suspended (as n)                  | park |
//!
//! A park is not a failure: the attempt it stops is not counted against
//! `max_attempts` (the resume row records the policy with one more attempt).
//!
//! Rollbacks happen only where the task has checkpoints (`snapshots`): a
//! task run in place or `read_only` retries with its files as they are.
//!
//! The journal is the durable side of the machine: [`replay`] folds the same
//! transition over the events its rows record, so a task interrupted between
//! an effect and its record reads back as the state the last record left it
//! in (a task whose agent was running reads back as `running`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::plan::RollbackOnRetry;
use crate::recovery::Strategy;

/// What the machine needs to know of the task's plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    /// `max_retries + 1`.
    pub max_attempts: u32,
    /// Whether a retry budget bounds the task's retries.
    pub budgeted: bool,
    /// The plan's `rollback_on_retry`.
    #[serde(with = "rollback_rule")]
    pub rollback: RollbackOnRetry,
    /// Whether the task has file checkpoints to roll back to.
    pub snapshots: bool,
}

/// How a task ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Terminal {
    Passed,
    Partial,
    Failed(Failure),
    Blocked,
    Cancelled,
}

/// Why a task failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Failure {
    /// Its last allowed attempt was not accepted.
    AttemptsExhausted,
    /// The retry budget refused another attempt.
    BudgetSpent,
    /// The attempt was accepted but its result could not be committed.
    NotDelivered,
}

/// Where a rollback goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RollbackTarget {
    /// The checkpoint taken before attempt n.
    BeforeAttempt(u32),
    /// The checkpoint taken before the task's first attempt.
    Base,
}

/// Why a rollback happens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RollbackReason {
    /// The diagnosis found the tree suspect.
    Diagnosis,
    /// `rollback_on_retry: always`.
    EveryRetry,
    /// A cold retry under `rollback_on_retry: auto`.
    ColdRetry,
    /// The task ended failed or blocked: its tree goes back to its base.
    TaskEnded,
}

/// What happens after a rollback within a retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AfterRollback {
    /// Decide the retry's mode next (the decision sees the restored files).
    Decide,
    /// The mode is decided: take the next attempt's checkpoint.
    NextAttempt,
}

/// The gates' verdict on an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Judgement {
    Passed,
    /// Not every gate passed, but enough weight to keep (`accept_partial`).
    Partial,
    /// Anything else: a judged failure or an infrastructure one.
    Failed,
}

impl Judgement {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Passed => "passed",
            Self::Partial => "partial",
            Self::Failed => "failed",
        }
    }
}

/// Where a task is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskState {
    Queued,
    /// Taking the checkpoint before attempt n; `resumed` when the attempt
    /// continues the agent's session (warm or fork).
    Checkpointing {
        attempt: u32,
        resumed: bool,
    },
    Running {
        attempt: u32,
        resumed: bool,
    },
    Judging {
        attempt: u32,
    },
    Diagnosing {
        attempt: u32,
    },
    Budgeting {
        attempt: u32,
        strategy: Strategy,
    },
    RollingBack {
        attempt: u32,
        strategy: Strategy,
        then: AfterRollback,
    },
    /// Deciding the mode of attempt n+1.
    Retrying {
        attempt: u32,
        strategy: Strategy,
        rolled_back: bool,
    },
    /// Delivering or restoring, then recording the end.
    Closing(Terminal),
    Finished(Terminal),
    /// Parked with nothing held; `attempt` is the one a resume starts.
    Suspended {
        attempt: u32,
    },
    /// Stopped for a moment with its sandbox, seat and reservation kept;
    /// `attempt` is the one an unpause starts.
    Paused {
        attempt: u32,
    },
}

/// What an effect produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskEvent {
    /// The sandbox is ready and `task.started` recorded.
    Started,
    CheckpointTaken,
    /// The attempt's agent ended; `session_gone` when the CLI said the
    /// session it was asked to resume does not exist.
    AgentEnded {
        session_gone: bool,
    },
    Judged(Judgement),
    Diagnosed(Strategy),
    BudgetConsumed {
        granted: bool,
    },
    RolledBack,
    RetryDecided {
        cold: bool,
    },
    /// The result was committed (`delivered`), or there was nothing to deliver.
    Closed {
        delivered: bool,
    },
    /// `task.finished` recorded.
    Finished,
    CancelRequested,
    /// Someone (or the agent's own stop at a limit or a question) asked to
    /// park the task; its agent, if one ran, has been stopped and reaped.
    ParkRequested,
    /// `task.resume` recorded; `cold` when the session does not continue.
    Resumed {
        cold: bool,
    },
    /// Someone asked to halt the running agent for a moment (`task pause`).
    PauseRequested,
    /// `task.unpause` recorded; `cold` when the session does not continue.
    Unpaused {
        cold: bool,
    },
}

/// What the engine does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    TakeCheckpoint {
        attempt: u32,
    },
    SpawnAgent {
        attempt: u32,
    },
    /// Record that the session is gone and send attempt n cold instead.
    FallBackCold {
        attempt: u32,
    },
    RunGates {
        attempt: u32,
    },
    Diagnose {
        attempt: u32,
    },
    ConsumeBudget {
        attempt: u32,
    },
    RollBack {
        to: RollbackTarget,
        reason: RollbackReason,
    },
    /// Wait before a retry in place (provider trouble backs off).
    BackOff {
        attempt: u32,
    },
    /// Decide attempt `next`'s mode; `rolled_back` when the files were just
    /// restored to the failed attempt's checkpoint (a resumed session is told).
    DecideRetry {
        next: u32,
        rolled_back: bool,
    },
    RecordPartial {
        attempt: u32,
    },
    /// Keep the failed attempt's tree as a checkpoint before the rollback.
    KeepFailedTree,
    CommitResult {
        attempt: u32,
    },
    /// Nothing to deliver: close as the state says.
    Close,
    Finish(Terminal),
    /// Record the park and release what the task holds; a resume starts
    /// attempt `next`.
    Park {
        next: u32,
    },
    /// Record the pause and wait (holding everything) for an unpause, a
    /// park, or the pause's upgrade to a park; an unpause starts `next`.
    Pause {
        next: u32,
    },
}

/// A state and what to do to leave it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct Step {
    pub state: TaskState,
    pub effects: Vec<Effect>,
}

/// An event the state cannot take: a bug in the executor, never a user error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("task lifecycle: {event:?} cannot happen in {state:?}")]
pub struct InvalidTransition {
    pub state: TaskState,
    pub event: TaskEvent,
}

impl TaskState {
    /// Whether the task has ended.
    pub fn is_finished(self) -> bool {
        matches!(self, Self::Finished(_))
    }

    /// The state's name as the journal and status show it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Checkpointing { .. } | Self::Running { .. } => "running",
            Self::Judging { .. } => "judging",
            Self::Diagnosing { .. } | Self::Budgeting { .. } => "diagnosing",
            Self::RollingBack { .. } => "rolling_back",
            Self::Retrying { .. } => "retrying",
            Self::Closing(_) => "closing",
            Self::Finished(terminal) => terminal.as_str(),
            Self::Suspended { .. } => "suspended",
            Self::Paused { .. } => "paused",
        }
    }
}

impl Terminal {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Passed => "passed",
            Self::Partial => "partial",
            Self::Failed(_) => "failed",
            Self::Blocked => "blocked",
            Self::Cancelled => "cancelled",
        }
    }
}

fn step(state: TaskState, effects: Vec<Effect>) -> Step {
    Step { state, effects }
}

/// The task ends without a delivery: a failed or blocked task's tree is kept
/// as a checkpoint and restored to its base.
fn close_undelivered(policy: &Policy, terminal: Terminal) -> Step {
    let mut effects = Vec::new();
    if policy.snapshots && matches!(terminal, Terminal::Failed(_) | Terminal::Blocked) {
        effects.push(Effect::KeepFailedTree);
        effects.push(Effect::RollBack {
            to: RollbackTarget::Base,
            reason: RollbackReason::TaskEnded,
        });
    }
    effects.push(Effect::Close);
    step(TaskState::Closing(terminal), effects)
}

/// A retry that the attempt count and the budget allow: roll back first
/// when the diagnosis or the `always` rule says so, else decide.
fn retry(policy: &Policy, attempt: u32, strategy: Strategy) -> Step {
    let reason = match strategy {
        Strategy::RollBackThenRetry => Some(RollbackReason::Diagnosis),
        strategy if strategy.follows_policy() && policy.rollback == RollbackOnRetry::Always => {
            Some(RollbackReason::EveryRetry)
        }
        _ => None,
    };
    match reason {
        Some(reason) if policy.snapshots => step(
            TaskState::RollingBack {
                attempt,
                strategy,
                then: AfterRollback::Decide,
            },
            vec![Effect::RollBack {
                to: RollbackTarget::BeforeAttempt(attempt),
                reason,
            }],
        ),
        _ => {
            let mut effects = Vec::new();
            if strategy == Strategy::RetryInPlace {
                effects.push(Effect::BackOff { attempt });
            }
            effects.push(Effect::DecideRetry {
                next: attempt + 1,
                rolled_back: false,
            });
            step(
                TaskState::Retrying {
                    attempt,
                    strategy,
                    rolled_back: false,
                },
                effects,
            )
        }
    }
}

fn park(next: u32) -> Step {
    step(
        TaskState::Suspended { attempt: next },
        vec![Effect::Park { next }],
    )
}

fn checkpoint(attempt: u32, resumed: bool) -> Step {
    step(
        TaskState::Checkpointing { attempt, resumed },
        vec![Effect::TakeCheckpoint { attempt }],
    )
}

/// The lifecycle's one transition.
pub fn transition(
    policy: &Policy,
    state: TaskState,
    event: TaskEvent,
) -> Result<Step, InvalidTransition> {
    use TaskEvent as E;
    use TaskState as S;
    let invalid = InvalidTransition { state, event };
    Ok(match (state, event) {
        (S::Suspended { attempt }, E::Resumed { cold }) => checkpoint(attempt, !cold),
        (S::Paused { attempt }, E::Unpaused { cold }) => checkpoint(attempt, !cold),
        (S::Paused { attempt }, E::ParkRequested) => park(attempt),
        (S::Finished(_) | S::Suspended { .. }, _) => return Err(invalid),
        (S::Closing(_), E::CancelRequested) => return Err(invalid),
        (S::Checkpointing { attempt, .. }, E::ParkRequested) => park(attempt),
        (S::Running { attempt, .. }, E::ParkRequested) => park(attempt + 1),
        (S::Running { attempt, .. }, E::PauseRequested) => step(
            S::Paused {
                attempt: attempt + 1,
            },
            vec![Effect::Pause { next: attempt + 1 }],
        ),
        (_, E::ParkRequested | E::Resumed { .. } | E::PauseRequested | E::Unpaused { .. }) => {
            return Err(invalid);
        }
        (_, E::CancelRequested) => close_undelivered(policy, Terminal::Cancelled),

        (S::Queued, E::Started) => checkpoint(1, false),
        (S::Checkpointing { attempt, resumed }, E::CheckpointTaken) => step(
            S::Running { attempt, resumed },
            vec![Effect::SpawnAgent { attempt }],
        ),
        (
            S::Running {
                attempt,
                resumed: true,
            },
            E::AgentEnded { session_gone: true },
        ) => step(
            S::Running {
                attempt,
                resumed: false,
            },
            vec![
                Effect::FallBackCold { attempt },
                Effect::SpawnAgent { attempt },
            ],
        ),
        (S::Running { attempt, .. }, E::AgentEnded { .. }) => {
            step(S::Judging { attempt }, vec![Effect::RunGates { attempt }])
        }
        (S::Judging { attempt }, E::Judged(Judgement::Passed)) => step(
            S::Closing(Terminal::Passed),
            vec![Effect::CommitResult { attempt }],
        ),
        (S::Judging { attempt }, E::Judged(Judgement::Partial)) => step(
            S::Closing(Terminal::Partial),
            vec![
                Effect::RecordPartial { attempt },
                Effect::CommitResult { attempt },
            ],
        ),
        (S::Judging { attempt }, E::Judged(Judgement::Failed)) => step(
            S::Diagnosing { attempt },
            vec![Effect::Diagnose { attempt }],
        ),
        (S::Diagnosing { .. }, E::Diagnosed(Strategy::RollBackAndBlock)) => {
            close_undelivered(policy, Terminal::Blocked)
        }
        (S::Diagnosing { attempt }, E::Diagnosed(_)) if attempt >= policy.max_attempts => {
            close_undelivered(policy, Terminal::Failed(Failure::AttemptsExhausted))
        }
        (S::Diagnosing { attempt }, E::Diagnosed(strategy)) if policy.budgeted => step(
            S::Budgeting { attempt, strategy },
            vec![Effect::ConsumeBudget {
                attempt: attempt + 1,
            }],
        ),
        (S::Diagnosing { attempt }, E::Diagnosed(strategy)) => retry(policy, attempt, strategy),
        (S::Budgeting { attempt, strategy }, E::BudgetConsumed { granted: true }) => {
            retry(policy, attempt, strategy)
        }
        (S::Budgeting { .. }, E::BudgetConsumed { granted: false }) => {
            close_undelivered(policy, Terminal::Failed(Failure::BudgetSpent))
        }
        (
            S::RollingBack {
                attempt,
                strategy,
                then: AfterRollback::Decide,
            },
            E::RolledBack,
        ) => step(
            S::Retrying {
                attempt,
                strategy,
                rolled_back: true,
            },
            vec![Effect::DecideRetry {
                next: attempt + 1,
                rolled_back: true,
            }],
        ),
        (
            S::RollingBack {
                attempt,
                then: AfterRollback::NextAttempt,
                ..
            },
            E::RolledBack,
        ) => checkpoint(attempt + 1, false),
        (
            S::Retrying {
                attempt,
                strategy,
                rolled_back,
            },
            E::RetryDecided { cold },
        ) => {
            let rolls_back = policy.snapshots
                && cold
                && !rolled_back
                && strategy.follows_policy()
                && policy.rollback == RollbackOnRetry::Auto;
            if rolls_back {
                step(
                    S::RollingBack {
                        attempt,
                        strategy,
                        then: AfterRollback::NextAttempt,
                    },
                    vec![Effect::RollBack {
                        to: RollbackTarget::BeforeAttempt(attempt),
                        reason: RollbackReason::ColdRetry,
                    }],
                )
            } else {
                checkpoint(attempt + 1, !cold)
            }
        }
        (S::Closing(terminal), E::RolledBack) => step(S::Closing(terminal), Vec::new()),
        (S::Closing(terminal), E::Closed { delivered }) => {
            let terminal = match terminal {
                Terminal::Passed | Terminal::Partial if !delivered => {
                    Terminal::Failed(Failure::NotDelivered)
                }
                other => other,
            };
            step(S::Closing(terminal), vec![Effect::Finish(terminal)])
        }
        (S::Closing(terminal), E::Finished) => step(S::Finished(terminal), Vec::new()),
        _ => return Err(invalid),
    })
}

/// What is left to do of closing the task as `terminal` (after attempt
/// `attempt`) when the process closing it died: `done` holds the kinds of
/// the journal rows written since the task began to close. Every effect a
/// row shows done is not done again: a recorded result is only finished, a
/// partial recorded once is not recorded again, a failed tree kept or
/// restored is not kept again (the tree may already be the base).
pub fn closing_left(
    policy: &Policy,
    terminal: Terminal,
    attempt: u32,
    done: &[&str],
) -> Vec<Effect> {
    let has = |kind: &str| done.contains(&kind);
    if has(rows::RESULT) {
        return vec![Effect::Finish(terminal)];
    }
    match terminal {
        Terminal::Passed => vec![Effect::CommitResult { attempt }],
        Terminal::Partial if has(rows::PARTIAL) => vec![Effect::CommitResult { attempt }],
        Terminal::Partial => vec![
            Effect::RecordPartial { attempt },
            Effect::CommitResult { attempt },
        ],
        // Only a recorded result that failed leaves a task here.
        Terminal::Failed(Failure::NotDelivered) => vec![Effect::Finish(terminal)],
        _ => close_undelivered(policy, terminal)
            .effects
            .into_iter()
            .filter(|effect| match effect {
                Effect::KeepFailedTree => !has(rows::CHECKPOINT_TAKEN) && !has(rows::RESTORED),
                Effect::RollBack { .. } => !has(rows::RESTORED),
                _ => true,
            })
            .collect(),
    }
}

/// Journal row kinds the lifecycle reads back (named in `crate::row_kind`).
pub mod rows {
    use crate::row_kind::Kind;

    pub const TASK_STARTED: &str = Kind::TaskStarted.as_str();
    pub const CHECKPOINT_TAKEN: &str = Kind::CheckpointTaken.as_str();
    pub const ATTEMPT_STARTED: &str = Kind::AttemptStarted.as_str();
    /// The row written when the agent ends: its session and workspace hash.
    pub const AGENT_ENDED: &str = Kind::TaskCheckpoint.as_str();
    pub const ATTEMPT_FINISHED: &str = Kind::AttemptFinished.as_str();
    pub const DIAGNOSIS: &str = Kind::RecoveryDiagnosis.as_str();
    pub const BUDGET: &str = Kind::RetryBudget.as_str();
    pub const RESTORED: &str = Kind::CheckpointRestored.as_str();
    pub const DECISION: &str = Kind::RetryDecision.as_str();
    pub const RESULT: &str = Kind::TaskResult.as_str();
    /// An attempt kept as partial, with its gaps.
    pub const PARTIAL: &str = Kind::TaskPartial.as_str();
    /// The journal's torn last line, cut off while the task ran: the
    /// verification failure, logged.
    pub const TAIL_REPAIRED: &str = Kind::JournalTailRepaired.as_str();
    pub const TASK_FINISHED: &str = Kind::TaskFinished.as_str();
    /// A park (the `task.suspend` journal row).
    pub const SUSPEND: &str = Kind::TaskSuspend.as_str();
    /// A park's resume (`task.resume`), with the policy it continues under.
    pub const RESUME: &str = Kind::TaskResume.as_str();
    /// A `run --continue` taking over an interrupted task, with the policy
    /// it continues under.
    pub const CONTINUED: &str = Kind::TaskContinued.as_str();
    /// A steering pause (`task pause`), and its end, with the policy the
    /// task continues under.
    pub const PAUSE: &str = Kind::TaskPause.as_str();
    pub const UNPAUSE: &str = Kind::TaskUnpause.as_str();
}

/// The state a task's journal rows (from its latest `task.started`) leave
/// it in: the transition folded over the events the rows record, under the
/// policy `task.started` recorded. Rows this function does not know, and
/// rows a state cannot take, are passed over: the journal's own verification
/// is what vouches for its rows. Journals written before the policy was
/// recorded read back as `queued` until their first `task.started` carries one.
pub fn replay<'a>(rows: impl IntoIterator<Item = (&'a str, &'a Value)>) -> TaskState {
    let rows: Vec<(&str, &Value)> = rows.into_iter().collect();
    let mut policy: Option<Policy> = None;
    let mut state = TaskState::Queued;
    for (index, (kind, body)) in rows.iter().enumerate() {
        match *kind {
            rows::TASK_STARTED => {
                policy = body
                    .get("lifecycle")
                    .and_then(|value| serde_json::from_value(value.clone()).ok());
                state = TaskState::Queued;
            }
            // A resume or a continuation may grant the attempt a park or an
            // interruption took back.
            rows::RESUME | rows::CONTINUED | rows::UNPAUSE => {
                if let Some(extended) = body
                    .get("lifecycle")
                    .and_then(|value| serde_json::from_value(value.clone()).ok())
                {
                    policy = Some(extended);
                }
                // A continuation goes on from the state it names: after a
                // run's stop closed the task (`task.finished` cancelled), or
                // between attempts, that is not where the rows before left it.
                if *kind == rows::CONTINUED
                    && let Some(from) = body
                        .get("from")
                        .and_then(|value| serde_json::from_value(value.clone()).ok())
                {
                    state = from;
                }
            }
            // The end is recorded as what it was, whatever came before it.
            rows::TASK_FINISHED => {
                if let Some(terminal) = body
                    .get("lifecycle")
                    .and_then(|value| serde_json::from_value(value.clone()).ok())
                {
                    state = TaskState::Finished(terminal);
                }
                continue;
            }
            _ => {}
        }
        let Some(policy) = policy.as_ref() else {
            continue;
        };
        let superseded = rows.get(index + 1).is_some_and(|(next, next_body)| {
            *kind == rows::DECISION
                && *next == rows::DECISION
                && next_body.get("attempt") == body.get("attempt")
        });
        let Some(event) = event_of(state, kind, body, superseded) else {
            continue;
        };
        if let Ok(next) = transition(policy, state, event) {
            state = next.state;
        }
    }
    state
}

/// The event a row records, in `state`.
fn event_of(state: TaskState, kind: &str, body: &Value, superseded: bool) -> Option<TaskEvent> {
    Some(match kind {
        rows::TASK_STARTED => TaskEvent::Started,
        // Without file checkpoints the attempt's start is the first row.
        rows::CHECKPOINT_TAKEN | rows::ATTEMPT_STARTED
            if matches!(state, TaskState::Checkpointing { .. }) =>
        {
            TaskEvent::CheckpointTaken
        }
        rows::AGENT_ENDED => TaskEvent::AgentEnded {
            session_gone: false,
        },
        rows::DECISION if matches!(state, TaskState::Running { resumed: true, .. }) => {
            TaskEvent::AgentEnded { session_gone: true }
        }
        // A decision superseded by a second one (the session was gone)
        // counts once, as the second.
        rows::DECISION if superseded => return None,
        rows::DECISION => TaskEvent::RetryDecided {
            cold: body.pointer("/decision/retry_mode").and_then(Value::as_str) == Some("cold"),
        },
        rows::ATTEMPT_FINISHED => {
            TaskEvent::Judged(match body.get("accepted").and_then(Value::as_str) {
                Some("passed") => Judgement::Passed,
                Some("partial") => Judgement::Partial,
                _ => Judgement::Failed,
            })
        }
        rows::DIAGNOSIS => {
            TaskEvent::Diagnosed(serde_json::from_value(body.get("strategy")?.clone()).ok()?)
        }
        rows::BUDGET => TaskEvent::BudgetConsumed {
            granted: body
                .pointer("/decision/should_retry")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        },
        rows::RESTORED => TaskEvent::RolledBack,
        rows::RESULT => TaskEvent::Closed {
            delivered: body.get("error").is_none(),
        },
        rows::SUSPEND => TaskEvent::ParkRequested,
        rows::PAUSE => TaskEvent::PauseRequested,
        rows::UNPAUSE => TaskEvent::Unpaused {
            cold: body.get("mode").and_then(Value::as_str) == Some("cold"),
        },
        rows::RESUME => TaskEvent::Resumed {
            cold: body.get("mode").and_then(Value::as_str) == Some("cold"),
        },
        _ => return None,
    })
}

mod rollback_rule {
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::plan::RollbackOnRetry;

    pub(super) fn serialize<S: Serializer>(
        rule: &RollbackOnRetry,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(rule.as_str())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<RollbackOnRetry, D::Error> {
        match String::deserialize(deserializer)?.as_str() {
            "auto" => Ok(RollbackOnRetry::Auto),
            "always" => Ok(RollbackOnRetry::Always),
            "never" => Ok(RollbackOnRetry::Never),
            other => Err(serde::de::Error::custom(format!(
                "unknown rollback rule {other}"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_close_cut_short_does_only_what_its_rows_do_not_show_done() {
        let policy = Policy {
            max_attempts: 2,
            budgeted: false,
            rollback: RollbackOnRetry::Auto,
            snapshots: true,
        };
        let left = |terminal, done: &[&str]| closing_left(&policy, terminal, 2, done);
        let commit = Effect::CommitResult { attempt: 2 };
        assert_eq!(left(Terminal::Passed, &[]), [commit]);
        assert_eq!(
            left(Terminal::Passed, &[rows::RESULT]),
            [Effect::Finish(Terminal::Passed)]
        );
        assert_eq!(
            left(Terminal::Partial, &[]),
            [Effect::RecordPartial { attempt: 2 }, commit]
        );
        assert_eq!(left(Terminal::Partial, &[rows::PARTIAL]), [commit]);
        let exhausted = Terminal::Failed(Failure::AttemptsExhausted);
        assert_eq!(
            left(exhausted, &[]),
            close_undelivered(&policy, exhausted).effects
        );
        let base = Effect::RollBack {
            to: RollbackTarget::Base,
            reason: RollbackReason::TaskEnded,
        };
        assert_eq!(
            left(exhausted, &[rows::CHECKPOINT_TAKEN]),
            [base, Effect::Close]
        );
        assert_eq!(
            left(Terminal::Blocked, &[rows::CHECKPOINT_TAKEN, rows::RESTORED]),
            [Effect::Close]
        );
    }

    const STRATEGIES: [Strategy; 5] = [
        Strategy::RetryByPolicy,
        Strategy::RetryInPlace,
        Strategy::RollBackThenRetry,
        Strategy::RollBackAndBlock,
        Strategy::RetryWithContext,
    ];
    const TERMINALS: [Terminal; 7] = [
        Terminal::Passed,
        Terminal::Partial,
        Terminal::Failed(Failure::AttemptsExhausted),
        Terminal::Failed(Failure::BudgetSpent),
        Terminal::Failed(Failure::NotDelivered),
        Terminal::Blocked,
        Terminal::Cancelled,
    ];
    const MAX: u32 = 3;

    fn policies() -> Vec<Policy> {
        let mut all = Vec::new();
        for budgeted in [false, true] {
            for rollback in [
                RollbackOnRetry::Auto,
                RollbackOnRetry::Always,
                RollbackOnRetry::Never,
            ] {
                for snapshots in [false, true] {
                    all.push(Policy {
                        max_attempts: MAX,
                        budgeted,
                        rollback,
                        snapshots,
                    });
                }
            }
        }
        all
    }

    fn states() -> Vec<TaskState> {
        use TaskState as S;
        let mut all = vec![S::Queued];
        for attempt in [1, MAX] {
            for resumed in [false, true] {
                all.push(S::Checkpointing { attempt, resumed });
                all.push(S::Running { attempt, resumed });
            }
            all.push(S::Judging { attempt });
            all.push(S::Diagnosing { attempt });
            all.push(S::Suspended { attempt });
            all.push(S::Paused { attempt });
            for strategy in STRATEGIES {
                all.push(S::Budgeting { attempt, strategy });
                for then in [AfterRollback::Decide, AfterRollback::NextAttempt] {
                    all.push(S::RollingBack {
                        attempt,
                        strategy,
                        then,
                    });
                }
                for rolled_back in [false, true] {
                    all.push(S::Retrying {
                        attempt,
                        strategy,
                        rolled_back,
                    });
                }
            }
        }
        for terminal in TERMINALS {
            all.push(S::Closing(terminal));
            all.push(S::Finished(terminal));
        }
        all
    }

    fn events() -> Vec<TaskEvent> {
        use TaskEvent as E;
        let mut all = vec![E::Started, E::CheckpointTaken, E::RolledBack, E::Finished];
        all.push(E::CancelRequested);
        all.push(E::ParkRequested);
        all.push(E::PauseRequested);
        for flag in [false, true] {
            all.push(E::Resumed { cold: flag });
            all.push(E::Unpaused { cold: flag });
            all.push(E::AgentEnded { session_gone: flag });
            all.push(E::BudgetConsumed { granted: flag });
            all.push(E::RetryDecided { cold: flag });
            all.push(E::Closed { delivered: flag });
        }
        for judgement in [Judgement::Passed, Judgement::Partial, Judgement::Failed] {
            all.push(E::Judged(judgement));
        }
        all.extend(STRATEGIES.map(E::Diagnosed));
        all
    }

    /// The table, written out row by row independently of `transition`:
    /// what each (policy, state, event) must give, or `None` where the
    /// event cannot happen.
    fn expected(p: &Policy, state: TaskState, event: TaskEvent) -> Option<Step> {
        use Effect as F;
        use TaskEvent as E;
        use TaskState as S;
        let end = |terminal: Terminal| {
            let restores =
                p.snapshots && matches!(terminal, Terminal::Failed(_) | Terminal::Blocked);
            let effects = if restores {
                vec![
                    F::KeepFailedTree,
                    F::RollBack {
                        to: RollbackTarget::Base,
                        reason: RollbackReason::TaskEnded,
                    },
                    F::Close,
                ]
            } else {
                vec![F::Close]
            };
            Some(step(S::Closing(terminal), effects))
        };
        let take = |attempt: u32, resumed: bool| {
            Some(step(
                S::Checkpointing { attempt, resumed },
                vec![F::TakeCheckpoint { attempt }],
            ))
        };
        let retry_step = |attempt: u32, strategy: Strategy| {
            let roll = p.snapshots
                && (strategy == Strategy::RollBackThenRetry
                    || (matches!(
                        strategy,
                        Strategy::RetryByPolicy | Strategy::RetryWithContext
                    ) && p.rollback == RollbackOnRetry::Always));
            if roll {
                let reason = if strategy == Strategy::RollBackThenRetry {
                    RollbackReason::Diagnosis
                } else {
                    RollbackReason::EveryRetry
                };
                return Some(step(
                    S::RollingBack {
                        attempt,
                        strategy,
                        then: AfterRollback::Decide,
                    },
                    vec![F::RollBack {
                        to: RollbackTarget::BeforeAttempt(attempt),
                        reason,
                    }],
                ));
            }
            let decide = F::DecideRetry {
                next: attempt + 1,
                rolled_back: false,
            };
            let effects = if strategy == Strategy::RetryInPlace {
                vec![F::BackOff { attempt }, decide]
            } else {
                vec![decide]
            };
            Some(step(
                S::Retrying {
                    attempt,
                    strategy,
                    rolled_back: false,
                },
                effects,
            ))
        };
        // A parked task wakes only by a resume, into the attempt it was
        // parked before, warm unless the resume went cold.
        if let (S::Suspended { attempt }, E::Resumed { cold }) = (state, event) {
            return take(attempt, !cold);
        }
        // A pause holds everything: an unpause goes on from it, a park
        // (asked for, or the pause's upgrade) releases it all, a cancel ends it.
        if let S::Paused { attempt } = state {
            return match event {
                E::Unpaused { cold } => take(attempt, !cold),
                E::ParkRequested => Some(step(
                    S::Suspended { attempt },
                    vec![F::Park { next: attempt }],
                )),
                E::CancelRequested => end(Terminal::Cancelled),
                _ => None,
            };
        }
        if let (S::Running { attempt, .. }, E::PauseRequested) = (state, event) {
            return Some(step(
                S::Paused {
                    attempt: attempt + 1,
                },
                vec![F::Pause { next: attempt + 1 }],
            ));
        }
        if matches!(state, S::Finished(_) | S::Suspended { .. }) {
            return None;
        }
        // A park stops the task where an agent is about to run or runs; the
        // stopped attempt is not the one a resume starts.
        if event == E::ParkRequested {
            let next = match state {
                S::Checkpointing { attempt, .. } => attempt,
                S::Running { attempt, .. } => attempt + 1,
                _ => return None,
            };
            return Some(step(S::Suspended { attempt: next }, vec![F::Park { next }]));
        }
        if matches!(
            event,
            E::Resumed { .. } | E::PauseRequested | E::Unpaused { .. }
        ) {
            return None;
        }
        if event == E::CancelRequested {
            return if matches!(state, S::Closing(_)) {
                None
            } else {
                end(Terminal::Cancelled)
            };
        }
        match state {
            S::Queued if event == E::Started => take(1, false),
            S::Checkpointing { attempt, resumed } if event == E::CheckpointTaken => Some(step(
                S::Running { attempt, resumed },
                vec![F::SpawnAgent { attempt }],
            )),
            S::Running { attempt, resumed } => match event {
                E::AgentEnded { session_gone } if session_gone && resumed => Some(step(
                    S::Running {
                        attempt,
                        resumed: false,
                    },
                    vec![F::FallBackCold { attempt }, F::SpawnAgent { attempt }],
                )),
                E::AgentEnded { .. } => {
                    Some(step(S::Judging { attempt }, vec![F::RunGates { attempt }]))
                }
                _ => None,
            },
            S::Judging { attempt } => match event {
                E::Judged(Judgement::Passed) => Some(step(
                    S::Closing(Terminal::Passed),
                    vec![F::CommitResult { attempt }],
                )),
                E::Judged(Judgement::Partial) => Some(step(
                    S::Closing(Terminal::Partial),
                    vec![F::RecordPartial { attempt }, F::CommitResult { attempt }],
                )),
                E::Judged(Judgement::Failed) => Some(step(
                    S::Diagnosing { attempt },
                    vec![F::Diagnose { attempt }],
                )),
                _ => None,
            },
            S::Diagnosing { attempt } => match event {
                E::Diagnosed(Strategy::RollBackAndBlock) => end(Terminal::Blocked),
                E::Diagnosed(_) if attempt >= p.max_attempts => {
                    end(Terminal::Failed(Failure::AttemptsExhausted))
                }
                E::Diagnosed(strategy) if p.budgeted => Some(step(
                    S::Budgeting { attempt, strategy },
                    vec![F::ConsumeBudget {
                        attempt: attempt + 1,
                    }],
                )),
                E::Diagnosed(strategy) => retry_step(attempt, strategy),
                _ => None,
            },
            S::Budgeting { attempt, strategy } => match event {
                E::BudgetConsumed { granted: true } => retry_step(attempt, strategy),
                E::BudgetConsumed { granted: false } => end(Terminal::Failed(Failure::BudgetSpent)),
                _ => None,
            },
            S::RollingBack {
                attempt,
                strategy,
                then,
            } if event == E::RolledBack => match then {
                AfterRollback::Decide => Some(step(
                    S::Retrying {
                        attempt,
                        strategy,
                        rolled_back: true,
                    },
                    vec![F::DecideRetry {
                        next: attempt + 1,
                        rolled_back: true,
                    }],
                )),
                AfterRollback::NextAttempt => take(attempt + 1, false),
            },
            S::Retrying {
                attempt,
                strategy,
                rolled_back,
            } => match event {
                E::RetryDecided { cold: true }
                    if p.snapshots
                        && !rolled_back
                        && matches!(
                            strategy,
                            Strategy::RetryByPolicy | Strategy::RetryWithContext
                        )
                        && p.rollback == RollbackOnRetry::Auto =>
                {
                    Some(step(
                        S::RollingBack {
                            attempt,
                            strategy,
                            then: AfterRollback::NextAttempt,
                        },
                        vec![F::RollBack {
                            to: RollbackTarget::BeforeAttempt(attempt),
                            reason: RollbackReason::ColdRetry,
                        }],
                    ))
                }
                E::RetryDecided { cold } => take(attempt + 1, !cold),
                _ => None,
            },
            S::Closing(terminal) => match event {
                E::RolledBack => Some(step(S::Closing(terminal), vec![])),
                E::Closed { delivered } => {
                    let undelivered =
                        !delivered && matches!(terminal, Terminal::Passed | Terminal::Partial);
                    let terminal = if undelivered {
                        Terminal::Failed(Failure::NotDelivered)
                    } else {
                        terminal
                    };
                    Some(step(S::Closing(terminal), vec![F::Finish(terminal)]))
                }
                E::Finished => Some(step(S::Finished(terminal), vec![])),
                _ => None,
            },
            _ => None,
        }
    }

    #[test]
    fn every_state_and_event_follows_the_table() {
        let (policies, states, events) = (policies(), states(), events());
        let mut valid = 0;
        let mut reached = std::collections::BTreeSet::new();
        for policy in &policies {
            for &state in &states {
                for &event in &events {
                    let got = transition(policy, state, event);
                    let want = expected(policy, state, event);
                    match (&got, &want) {
                        (Ok(got), Some(want)) => {
                            assert_eq!(got, want, "{policy:?} {state:?} {event:?}");
                            valid += 1;
                            reached.insert(format!("{:?}", std::mem::discriminant(&got.state)));
                        }
                        (Err(err), None) => {
                            assert_eq!((err.state, err.event), (state, event));
                        }
                        _ => panic!("{policy:?} {state:?} {event:?}: got {got:?}, want {want:?}"),
                    }
                }
            }
        }
        assert_eq!(policies.len() * states.len() * events.len(), 12 * 81 * 27);
        // Every state but `queued` can be entered.
        assert_eq!(reached.len(), 11, "{reached:?}");
        assert!(valid > 1000, "{valid}");
    }

    /// What each attempt of a scripted task does.
    #[derive(Clone, Copy)]
    struct Script {
        session_gone: bool,
        judgement: Judgement,
        strategy: Strategy,
        budget: bool,
        /// The retry's decision: cold, or warm (and, if the session turns
        /// out to be gone, a second decision, cold).
        cold: bool,
        second_decision: bool,
        delivered: bool,
    }

    /// Runs the machine to its end as the engine does, writing the rows the
    /// engine writes, and after every effect checks that the rows so far
    /// read back as the machine's state.
    fn run(policy: Policy, scripts: &[Script]) -> (TaskState, Vec<(String, Value)>) {
        let mut rows: Vec<(String, Value)> =
            vec![(rows::TASK_STARTED.into(), json!({"lifecycle": policy}))];
        let mut state = TaskState::Queued;
        let mut pending = std::collections::VecDeque::from([TaskEvent::Started]);
        let mut steps = 0;
        while let Some(event) = pending.pop_front() {
            steps += 1;
            assert!(steps < 200, "the task never ends");
            let next = transition(&policy, state, event).expect("a valid transition");
            state = next.state;
            let read_back = |rows: &[(String, Value)]| {
                replay(rows.iter().map(|(kind, body)| (kind.as_str(), body)))
            };
            for effect in next.effects {
                let before = rows.len();
                let attempt_of =
                    |attempt: u32| scripts[(attempt as usize - 1).min(scripts.len() - 1)];
                let mut row = |kind: &str, body: Value| rows.push((kind.to_owned(), body));
                let produced = match effect {
                    Effect::Park { .. } | Effect::Pause { .. } => {
                        unreachable!("the scripts never park or pause")
                    }
                    Effect::TakeCheckpoint { attempt } => {
                        if policy.snapshots {
                            row(rows::CHECKPOINT_TAKEN, json!({"attempt": attempt}));
                        }
                        Some(TaskEvent::CheckpointTaken)
                    }
                    Effect::SpawnAgent { attempt } => {
                        row(rows::ATTEMPT_STARTED, json!({"attempt": attempt}));
                        let gone = attempt_of(attempt).session_gone
                            && matches!(state, TaskState::Running { resumed: true, .. });
                        if !gone {
                            row(rows::AGENT_ENDED, json!({"attempt": attempt}));
                        }
                        Some(TaskEvent::AgentEnded { session_gone: gone })
                    }
                    Effect::FallBackCold { attempt } => {
                        row(
                            rows::DECISION,
                            json!({"attempt": attempt, "decision": {"retry_mode": "cold"}}),
                        );
                        None
                    }
                    Effect::RunGates { attempt } => {
                        let judgement = attempt_of(attempt).judgement;
                        row(
                            rows::ATTEMPT_FINISHED,
                            json!({"attempt": attempt, "accepted": judgement.as_str()}),
                        );
                        Some(TaskEvent::Judged(judgement))
                    }
                    Effect::Diagnose { attempt } => {
                        let strategy = attempt_of(attempt).strategy;
                        row(
                            rows::DIAGNOSIS,
                            json!({"attempt": attempt, "strategy": strategy}),
                        );
                        Some(TaskEvent::Diagnosed(strategy))
                    }
                    Effect::ConsumeBudget { attempt } => {
                        let granted = attempt_of(attempt - 1).budget;
                        row(
                            rows::BUDGET,
                            json!({"attempt": attempt, "decision": {"should_retry": granted}}),
                        );
                        Some(TaskEvent::BudgetConsumed { granted })
                    }
                    Effect::RollBack { .. } => {
                        row(rows::RESTORED, json!({}));
                        Some(TaskEvent::RolledBack)
                    }
                    Effect::DecideRetry { next, .. } => {
                        let script = attempt_of(next - 1);
                        let mode = if script.cold { "cold" } else { "warm" };
                        row(
                            rows::DECISION,
                            json!({"attempt": next, "decision": {"retry_mode": mode}}),
                        );
                        let cold = script.cold || script.second_decision;
                        if !script.cold && script.second_decision {
                            row(
                                rows::DECISION,
                                json!({"attempt": next, "decision": {"retry_mode": "cold"}}),
                            );
                        }
                        Some(TaskEvent::RetryDecided { cold })
                    }
                    Effect::BackOff { .. } => None,
                    Effect::RecordPartial { attempt } => {
                        row("task.partial", json!({"attempt": attempt}));
                        None
                    }
                    Effect::KeepFailedTree => {
                        row(rows::CHECKPOINT_TAKEN, json!({"label": "failed tree"}));
                        None
                    }
                    Effect::CommitResult { attempt } => {
                        let delivered = attempt_of(attempt).delivered;
                        if policy.snapshots {
                            let body = if delivered {
                                json!({})
                            } else {
                                json!({"error": "refused"})
                            };
                            row(rows::RESULT, body);
                        }
                        Some(TaskEvent::Closed {
                            delivered: delivered || !policy.snapshots,
                        })
                    }
                    Effect::Close => Some(TaskEvent::Closed { delivered: false }),
                    Effect::Finish(terminal) => {
                        row(rows::TASK_FINISHED, json!({"lifecycle": terminal}));
                        Some(TaskEvent::Finished)
                    }
                };
                // Each effect's last row records the event it produced; an
                // effect with no row leaves the state its rows had (a
                // session found gone is recorded by the fall-back's row).
                let settled = match produced {
                    _ if rows.len() == before => Some(state),
                    Some(TaskEvent::AgentEnded { session_gone: true }) => None,
                    Some(event) => Some(transition(&policy, state, event).expect("valid").state),
                    None => Some(state),
                };
                if let Some(settled) = settled {
                    assert_eq!(
                        read_back(&rows),
                        settled,
                        "after {effect:?} under {policy:?}"
                    );
                }
                pending.extend(produced);
            }
        }
        assert!(state.is_finished());
        (state, rows)
    }

    fn scripts() -> Vec<Script> {
        let mut all = Vec::new();
        for session_gone in [false, true] {
            for judgement in [Judgement::Passed, Judgement::Partial, Judgement::Failed] {
                for strategy in STRATEGIES {
                    for budget in [false, true] {
                        for cold in [false, true] {
                            for second_decision in [false, true] {
                                for delivered in [false, true] {
                                    all.push(Script {
                                        session_gone,
                                        judgement,
                                        strategy,
                                        budget,
                                        cold,
                                        second_decision,
                                        delivered,
                                    });
                                }
                            }
                        }
                    }
                }
            }
        }
        all
    }

    fn count(rows: &[(String, Value)], kind: &str) -> usize {
        rows.iter().filter(|(k, _)| k == kind).count()
    }

    #[test]
    fn every_scripted_task_ends_and_its_rows_read_back_as_its_state() {
        let scripts = scripts();
        assert_eq!(scripts.len(), 480);
        for policy in policies() {
            for script in &scripts {
                // The same script every attempt, and a first failure
                // followed by the script.
                let failing = Script {
                    judgement: Judgement::Failed,
                    strategy: Strategy::RetryByPolicy,
                    budget: true,
                    ..*script
                };
                for sequence in [vec![*script], vec![failing, *script]] {
                    let (end, rows) = run(policy, &sequence);
                    let attempts = count(&rows, rows::ATTEMPT_FINISHED);
                    assert!(attempts as u32 <= policy.max_attempts, "{rows:?}");
                    // Never a rollback without checkpoints.
                    if !policy.snapshots {
                        assert_eq!(count(&rows, rows::RESTORED), 0);
                    }
                    assert!(end.is_finished());
                }
            }
        }
    }

    fn script(judgement: Judgement, strategy: Strategy) -> Script {
        Script {
            session_gone: false,
            judgement,
            strategy,
            budget: true,
            cold: true,
            second_decision: false,
            delivered: true,
        }
    }

    fn isolated(rollback: RollbackOnRetry) -> Policy {
        Policy {
            max_attempts: MAX,
            budgeted: false,
            rollback,
            snapshots: true,
        }
    }

    #[test]
    fn judged_failures_run_out_of_attempts_and_restore_the_base() {
        let failed = script(Judgement::Failed, Strategy::RetryByPolicy);
        let (end, rows) = run(isolated(RollbackOnRetry::Auto), &[failed]);
        assert_eq!(
            end,
            TaskState::Finished(Terminal::Failed(Failure::AttemptsExhausted))
        );
        assert_eq!(count(&rows, rows::ATTEMPT_STARTED), 3);
        // Two cold retries roll back, and the end restores the base.
        assert_eq!(count(&rows, rows::RESTORED), 3);
        let never = run(isolated(RollbackOnRetry::Never), &[failed]).1;
        assert_eq!(count(&never, rows::RESTORED), 1);
        let warm = Script {
            cold: false,
            ..failed
        };
        let auto_warm = run(isolated(RollbackOnRetry::Auto), &[warm]).1;
        assert_eq!(
            count(&auto_warm, rows::RESTORED),
            1,
            "warm retries keep the files"
        );
        let always_warm = run(isolated(RollbackOnRetry::Always), &[warm]).1;
        assert_eq!(count(&always_warm, rows::RESTORED), 3);
    }

    #[test]
    fn a_fatal_diagnosis_blocks_after_one_attempt() {
        let fatal = script(Judgement::Failed, Strategy::RollBackAndBlock);
        let (end, rows) = run(isolated(RollbackOnRetry::Auto), &[fatal]);
        assert_eq!(end, TaskState::Finished(Terminal::Blocked));
        assert_eq!(count(&rows, rows::ATTEMPT_STARTED), 1);
        assert_eq!(count(&rows, rows::RESTORED), 1);
    }

    #[test]
    fn a_refused_budget_fails_the_task_and_an_undelivered_pass_fails_too() {
        let policy = Policy {
            budgeted: true,
            ..isolated(RollbackOnRetry::Auto)
        };
        let refused = Script {
            budget: false,
            ..script(Judgement::Failed, Strategy::RetryInPlace)
        };
        assert_eq!(
            run(policy, &[refused]).0,
            TaskState::Finished(Terminal::Failed(Failure::BudgetSpent))
        );
        let undelivered = Script {
            delivered: false,
            ..script(Judgement::Passed, Strategy::RetryByPolicy)
        };
        assert_eq!(
            run(policy, &[undelivered]).0,
            TaskState::Finished(Terminal::Failed(Failure::NotDelivered))
        );
    }

    #[test]
    fn an_interrupted_task_reads_back_as_where_it_stopped() {
        let policy = isolated(RollbackOnRetry::Auto);
        let started = json!({"lifecycle": policy});
        let attempt = json!({"attempt": 1});
        let rows = [
            (rows::TASK_STARTED, &started),
            (rows::CHECKPOINT_TAKEN, &attempt),
            (rows::ATTEMPT_STARTED, &attempt),
        ];
        // The agent was running when the process died.
        assert_eq!(
            replay(rows.iter().copied()),
            TaskState::Running {
                attempt: 1,
                resumed: false
            }
        );
        // A journal from before the lifecycle was recorded stays queued.
        let old = json!({});
        assert_eq!(replay([(rows::TASK_STARTED, &old)]), TaskState::Queued);
    }

    /// A one-attempt policy and the same extended by one attempt (what a
    /// resume or a continuation grants), without budget or snapshots.
    fn one_attempt_then_two() -> (Policy, Policy) {
        let policy = Policy {
            max_attempts: 1,
            budgeted: false,
            rollback: RollbackOnRetry::Auto,
            snapshots: false,
        };
        (
            policy,
            Policy {
                max_attempts: 2,
                ..policy
            },
        )
    }

    #[test]
    fn a_park_and_its_resume_read_back_from_their_rows() {
        let (policy, extended) = one_attempt_then_two();
        let mut rows = vec![
            (rows::TASK_STARTED, json!({"lifecycle": policy})),
            (rows::ATTEMPT_STARTED, json!({"attempt": 1})),
            (rows::SUSPEND, json!({"attempt": 1})),
        ];
        let read = |rows: &[(&str, Value)]| replay(rows.iter().map(|(kind, body)| (*kind, body)));
        assert_eq!(read(&rows), TaskState::Suspended { attempt: 2 });
        rows.push((rows::RESUME, json!({"mode": "warm", "lifecycle": extended})));
        assert_eq!(
            read(&rows),
            TaskState::Checkpointing {
                attempt: 2,
                resumed: true
            }
        );
        // Attempt 2 runs under the extended policy: its failure retries no
        // further, and the task fails with its attempts spent.
        rows.push((rows::ATTEMPT_STARTED, json!({"attempt": 2})));
        rows.push((rows::AGENT_ENDED, json!({"attempt": 2})));
        assert_eq!(read(&rows), TaskState::Judging { attempt: 2 });
        assert_eq!(
            transition(
                &extended,
                TaskState::Diagnosing { attempt: 2 },
                TaskEvent::Diagnosed(Strategy::RetryByPolicy)
            )
            .map(|step| step.state),
            Ok(TaskState::Closing(Terminal::Failed(
                Failure::AttemptsExhausted
            )))
        );
        assert!(
            transition(
                &policy,
                TaskState::Suspended { attempt: 2 },
                TaskEvent::CancelRequested
            )
            .is_err()
        );
        // A pause reads back as paused, its end as the next attempt.
        let mut paused = vec![
            (rows::TASK_STARTED, json!({"lifecycle": policy})),
            (rows::ATTEMPT_STARTED, json!({"attempt": 1})),
            (rows::PAUSE, json!({"attempt": 1})),
        ];
        assert_eq!(read(&paused), TaskState::Paused { attempt: 2 });
        paused.push((
            rows::UNPAUSE,
            json!({"mode": "cold", "lifecycle": extended}),
        ));
        assert_eq!(
            read(&paused),
            TaskState::Checkpointing {
                attempt: 2,
                resumed: false
            }
        );
        // Or it is upgraded to a park.
        paused.truncate(3);
        paused.push((rows::SUSPEND, json!({"attempt": 2})));
        assert_eq!(read(&paused), TaskState::Suspended { attempt: 2 });
    }

    #[test]
    fn a_task_a_stop_cancelled_goes_on_from_the_state_its_continuation_names() {
        let (policy, extended) = one_attempt_then_two();
        let read = |rows: &[(&str, Value)]| replay(rows.iter().map(|(kind, body)| (*kind, body)));
        let mut rows = vec![
            (rows::TASK_STARTED, json!({"lifecycle": policy})),
            (rows::ATTEMPT_STARTED, json!({"attempt": 1})),
            (rows::AGENT_ENDED, json!({"attempt": 1})),
            (
                rows::ATTEMPT_FINISHED,
                json!({"attempt": 1, "accepted": "failed"}),
            ),
        ];
        let stopped = read(&rows);
        assert_eq!(stopped, TaskState::Diagnosing { attempt: 1 });
        rows.push((
            rows::TASK_FINISHED,
            json!({"lifecycle": Terminal::Cancelled}),
        ));
        assert_eq!(read(&rows), TaskState::Finished(Terminal::Cancelled));
        // Continued from where the stop caught it, with the attempt it cut
        // short not counted: its diagnosis leads to a retry, not an end.
        rows.push((
            rows::CONTINUED,
            json!({"from": stopped, "lifecycle": extended}),
        ));
        assert_eq!(read(&rows), stopped);
        rows.push((rows::DIAGNOSIS, json!({"strategy": Strategy::RetryInPlace})));
        assert_eq!(
            read(&rows),
            TaskState::Retrying {
                attempt: 1,
                strategy: Strategy::RetryInPlace,
                rolled_back: false
            }
        );
    }
}
