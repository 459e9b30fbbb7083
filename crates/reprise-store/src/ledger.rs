//! The ledger: every task state transition of every run, one hash chain for
//! the state directory (`ledger.jsonl`). `runs/<run>/state.json` is a
//! snapshot for reading; the ledger is the record it can be checked against.

use std::sync::Arc;

use reprise_core::chain::ChainFormat;
use reprise_core::record::{Head, encode_ledger_row};
use reprise_core::rows::{Chain, Kind, RowBody, RunStarted, TaskStatus, TaskTransition};
use reprise_core::verify::{ChainReport, Identity, identity};
use reprise_core::{PlanId, TaskId};

use crate::audit::AuditSummary;
use crate::chainfile::{ChainFile, read_chain};
use crate::error::Result;
use crate::io::RealIo;
use crate::state::StateDir;

/// Ledger row kind of a task state transition.
pub const TRANSITION_KIND: &str = Kind::TaskTransition.as_str();
/// Ledger row kind of a run's start: its plan and where its tasks work.
pub const RUN_STARTED_KIND: &str = Kind::RunStarted.as_str();

/// The ledger, open for appending.
#[derive(Debug)]
pub struct Ledger {
    file: ChainFile,
}

impl Ledger {
    pub fn open(state: &StateDir) -> Result<Self> {
        let file = ChainFile::open(
            &state.ledger_path(),
            ChainFormat::Ledger,
            None,
            None,
            Arc::new(RealIo),
        )?;
        Ok(Self { file })
    }

    /// Records that `task` of `run_id` moved `from` one state `to` another.
    pub fn transition(
        &mut self,
        at: &str,
        run_id: &str,
        task: &TaskId,
        from: TaskStatus,
        to: TaskStatus,
        reason: Option<&str>,
    ) -> Result<Head> {
        let body = TaskTransition {
            run_id: run_id.to_owned(),
            task_id: task.as_str().to_owned(),
            from,
            to,
            reason: reason.map(str::to_owned),
        };
        let head = self.append_row(at, &body)?;
        crate::io::crash_point(task.as_str(), &format!("ledger.{}", to.as_str()));
        Ok(head)
    }
}

impl Ledger {
    /// Appends one ledger row of the typed schema (`reprise_core::rows`).
    fn append_row<B: RowBody>(&mut self, at: &str, body: &B) -> Result<Head> {
        debug_assert_eq!(B::CHAIN, Chain::Ledger, "{} is not a ledger row", B::KIND);
        let body = body.to_body();
        self.file
            .append(|previous| Ok(encode_ledger_row(previous, B::KIND.as_str(), at, &body)?))
    }

    /// Records that run `run_id` of `plan` started, and its base commit
    /// (`None` when tasks run in place).
    pub fn run_started(
        &mut self,
        at: &str,
        run_id: &str,
        plan: &PlanId,
        base_commit: Option<&str>,
    ) -> Result<Head> {
        let body = RunStarted {
            run_id: run_id.to_owned(),
            plan: plan.clone(),
            base_commit: base_commit.map(str::to_owned),
        };
        self.append_row(at, &body)
    }
}

/// One transition as the verified ledger holds it.
pub type Transition = TaskTransition;

/// The ledger's chain and its agreement with the seals of it in the audit
/// chain (and the witness).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerVerification {
    /// `None` when there is no ledger file.
    pub report: Option<ChainReport>,
    pub identity: Identity,
    /// The highest sealed row, if any seal exists.
    pub sealed_through: Option<u64>,
    /// The transitions of the verified prefix, in order, with their seq.
    pub transitions: Vec<(u64, Transition)>,
}

impl LedgerVerification {
    /// The chain verifies and is whole, and no seal names a row it lacks.
    pub fn ok(&self) -> bool {
        self.identity != Identity::Mismatched
            && self
                .report
                .as_ref()
                .is_none_or(|report| report.first_problem().is_none())
    }

    /// Rows after the last seal.
    pub fn unsealed_rows(&self) -> u64 {
        let rows = self.report.as_ref().map_or(0, |report| report.rows);
        match self.sealed_through {
            Some(sealed) => rows.saturating_sub(sealed + 1),
            None => rows,
        }
    }

    /// The state the ledger last moved `task` of `run_id` to.
    pub fn state_of(&self, run_id: &str, task: &str) -> Option<TaskStatus> {
        self.transitions
            .iter()
            .rev()
            .find(|(_, row)| row.run_id == run_id && row.task_id == task)
            .map(|(_, row)| row.to)
    }
}

/// Verifies the ledger against the seals `audit` holds for it: a ledger
/// deleted, cut, rolled back or rewritten after a seal is `mismatched`.
pub fn verify_ledger(state: &StateDir, audit: &AuditSummary) -> Result<LedgerVerification> {
    let seals = audit.ledger_heads();
    let sealed_through = seals.iter().map(|seal| seal.seq).max();
    let path = state.ledger_path();
    if !path.exists() {
        return Ok(LedgerVerification {
            report: None,
            identity: if seals.is_empty() {
                Identity::Unverifiable
            } else {
                Identity::Mismatched
            },
            sealed_through,
            transitions: Vec::new(),
        });
    }
    let watch: Vec<u64> = seals.iter().map(|seal| seal.seq).collect();
    let mut transitions = Vec::new();
    let report = read_chain(
        &path,
        ChainFormat::Ledger,
        None,
        None,
        &watch,
        |row, line| {
            if row.kind == TRANSITION_KIND
                && let Ok(body) = serde_json::from_slice::<Transition>(&line[row.payload.clone()])
            {
                transitions.push((row.seq, body));
            }
        },
    )?;
    Ok(LedgerVerification {
        identity: identity(&seals, &report.watched),
        report: Some(report),
        sealed_through,
        transitions,
    })
}
