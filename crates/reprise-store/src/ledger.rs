//! The ledger: every task state transition of every run, one hash chain for
//! the state directory (`ledger.jsonl`). `runs/<run>/state.json` is a
//! snapshot for reading; the ledger is the record it can be checked against.

use std::sync::Arc;

use reprise_core::chain::ChainFormat;
use reprise_core::record::{Head, encode_ledger_row};
use reprise_core::verify::ChainReport;
use reprise_core::{PlanId, TaskId};
use serde_json::json;

use crate::chainfile::{ChainFile, read_chain};
use crate::error::Result;
use crate::io::RealIo;
use crate::state::StateDir;

/// Ledger row kind of a task state transition.
pub const TRANSITION_KIND: &str = "task.transition";
/// Ledger row kind of a run's start: its plan and where its tasks work.
pub const RUN_STARTED_KIND: &str = "run.started";

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
        from: &str,
        to: &str,
        reason: Option<&str>,
    ) -> Result<Head> {
        let body = json!({"run_id": run_id, "task_id": task.as_str(), "from": from, "to": to, "reason": reason});
        self.file
            .append(|previous| Ok(encode_ledger_row(previous, TRANSITION_KIND, at, &body)?))
    }
}

impl Ledger {
    /// Records that run `run_id` of `plan` started, and its base commit
    /// (`None` when tasks run in place).
    pub fn run_started(
        &mut self,
        at: &str,
        run_id: &str,
        plan: &PlanId,
        base_commit: Option<&str>,
    ) -> Result<Head> {
        let body = json!({"run_id": run_id, "plan": plan.as_str(), "base_commit": base_commit});
        self.file
            .append(|previous| Ok(encode_ledger_row(previous, RUN_STARTED_KIND, at, &body)?))
    }
}

/// Verifies the ledger; `None` when the state directory has none yet.
pub fn verify_ledger(state: &StateDir) -> Result<Option<ChainReport>> {
    let path = state.ledger_path();
    if !path.is_file() {
        return Ok(None);
    }
    Ok(Some(read_chain(
        &path,
        ChainFormat::Ledger,
        None,
        None,
        &[],
        |_, _| {},
    )?))
}
