//! What the engine writes into a task's chains, and reads back from them:
//! checkpoints after attempts, and each retry decision in three places
//! (journal row, spine seal, audit row), in that order.

use reprise_core::TaskKey;
use reprise_core::chain::ChainFormat;
use reprise_core::digest::Digest;
use reprise_core::record::{Head, JournalRow};
use reprise_core::retry::{Checkpoint, DecisionRecord};
use reprise_core::rows::{Kind, RetryDecision, RowBody, TaskCheckpoint};
use reprise_core::verify::ChainVerifier;
use reprise_store::journal::Journal;
use reprise_store::read_chain_from;
use reprise_store::state::{StateDir, now_rfc3339};
use serde_json::Value;

use crate::error::Result;
use crate::evidence::Signer;

/// Journal row kind written after every attempt.
pub(crate) const CHECKPOINT_KIND: &str = reprise_core::lifecycle::rows::AGENT_ENDED;
/// Journal (and spine) row kind of a retry decision.
pub(crate) const DECISION_KIND: &str = Kind::RetryDecision.as_str();

/// What a retry may trust from the journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Trusted {
    pub(crate) chain_verified: bool,
    /// The latest checkpoint; always `None` when the chain did not verify.
    pub(crate) checkpoint: Option<Checkpoint>,
}

/// What this process has verified of a task's journal: up to byte `end`,
/// `rows` rows ending at `head`, with the latest checkpoint among them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct VerifiedPrefix {
    end: u64,
    rows: u64,
    head: Head,
    checkpoint: Option<Checkpoint>,
}

/// Verifies the task's journal and finds its latest checkpoint. Any
/// verification failure means there is no checkpoint to trust.
///
/// The first call reads the whole chain. Later calls read only what was
/// appended since, when the journal handle saw nothing but its own appends
/// since the previous verification (same file, and size and timestamps exactly
/// as its last append left them); anything else is read in full again. So a
/// retry costs the same at the thousandth attempt as at the first.
pub(crate) fn trusted_checkpoint(
    state: &StateDir,
    task: &TaskKey,
    journal: &mut Journal,
    verified: &mut Option<VerifiedPrefix>,
) -> Result<Trusted> {
    let resume = match verified.take() {
        Some(prefix) if journal.only_own_appends_since_mark()? => Some(prefix),
        _ => None,
    };
    journal.mark()?;
    let (verifier, offset, mut latest) = match resume {
        Some(prefix) => (
            ChainVerifier::resume(
                ChainFormat::Journal,
                None,
                Some(task.task.as_str()),
                prefix.head,
                prefix.rows,
            ),
            prefix.end,
            prefix.checkpoint,
        ),
        None => (
            ChainVerifier::new(ChainFormat::Journal, None, Some(task.task.as_str())),
            0,
            None,
        ),
    };
    let (report, end) =
        read_chain_from(&state.journal_path(task), offset, verifier, |row, line| {
            if row.kind == CHECKPOINT_KIND
                && let Ok(body) =
                    serde_json::from_slice::<TaskCheckpoint>(&line[row.payload.clone()])
            {
                latest = Some(Checkpoint {
                    session_id: body.session_id,
                    session_saved: body.session_saved != Some(false),
                    workspace_hash: body.workspace_hash,
                    event_hash: row.digest,
                });
            }
        })?;
    let chain_verified = report.first_problem().is_none();
    *verified = match (chain_verified, report.head) {
        (true, Some(head)) => Some(VerifiedPrefix {
            end,
            rows: report.rows,
            head,
            checkpoint: latest.clone(),
        }),
        _ => None,
    };
    Ok(Trusted {
        chain_verified,
        checkpoint: if chain_verified { latest } else { None },
    })
}

/// Records a decision: journal row, then spine seal (at that row's seq), then
/// the audit row binding both (on a fleet worker, the row alone: the
/// coordinator writes the other two from it). Returns the decision hash.
pub(crate) fn record_decision(
    journal: &mut Journal,
    signer: &mut Signer,
    run_id: &str,
    next_attempt: u32,
    record: &DecisionRecord,
    modification: Option<&Value>,
) -> Result<Digest> {
    let decision_hash = record.hash()?;
    // What can be checked before the first row is: the spine file opens and
    // the audit chain would take the binding. A decision is then either in
    // all three places or (with a failure here) in none.
    signer.ready()?;
    let body = RetryDecision {
        run_id: run_id.to_owned(),
        attempt: next_attempt,
        decision: record.clone(),
        decision_hash,
        // What changes for this retry besides its mode (a request for
        // context): bound by the row's hash, as the decision is.
        modification: modification.cloned(),
    };
    let journal_head = journal.append_row(&now_rfc3339(), &body)?;
    let task = journal.task().clone();
    signer.countersign(&task, DECISION_KIND, &body.to_body(), journal_head)?;
    Ok(decision_hash)
}

/// A retry decision as read back from a journal.
#[derive(Debug, Clone, PartialEq)]
pub struct DecisionRow {
    pub seq: u64,
    /// The row's stored `event_hash` (what an audit binding names).
    pub event_hash: Digest,
    pub at: String,
    pub run_id: Option<String>,
    pub attempt: Option<u64>,
    pub record: Option<DecisionRecord>,
    pub decision_hash: Option<Digest>,
}

/// The retry decisions in a task's journal, in order, as parsed: not yet
/// verified (see `reprise lineage show`, which checks each against the
/// verified journal and its audit binding before showing it).
pub fn read_decisions(state: &StateDir, task: &TaskKey) -> Result<Vec<DecisionRow>> {
    let path = state.existing_journal_path(task)?;
    let bytes = reprise_store::read_no_follow(&path)?.unwrap_or_default();
    Ok(bytes
        .split(|&byte| byte == b'\n')
        .filter_map(|line| serde_json::from_slice::<JournalRow>(line).ok())
        .filter(|row| row.kind == DECISION_KIND)
        .map(|row| DecisionRow {
            seq: row.seq,
            event_hash: row.event_hash,
            at: row.at,
            run_id: row.body["run_id"].as_str().map(str::to_owned),
            attempt: row.body["attempt"].as_u64(),
            record: serde_json::from_value(row.body["decision"].clone()).ok(),
            decision_hash: serde_json::from_value(row.body["decision_hash"].clone()).ok(),
        })
        .collect())
}
