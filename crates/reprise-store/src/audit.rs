//! The HMAC audit chain of the whole state directory, and the seals of task
//! journal heads it holds.

use std::sync::Arc;

use reprise_core::TaskId;
use reprise_core::chain::ChainFormat;
use reprise_core::digest::AuditKey;
use reprise_core::record::{Head, SEAL_KIND, SealBody, encode_audit_row};
use reprise_core::verify::{ChainReport, Identity, identity};
use serde_json::Value;

use crate::chainfile::{ChainFile, read_chain};
use crate::error::{Result, StoreError};
use crate::io::{IoSeam, RealIo};
use crate::state::StateDir;

/// The audit chain, open for appending.
#[derive(Debug)]
pub struct AuditLog {
    key: AuditKey,
    file: ChainFile,
}

impl AuditLog {
    pub fn open(state: &StateDir, key: AuditKey) -> Result<Self> {
        Self::open_with(state, key, Arc::new(RealIo))
    }

    pub fn open_with(state: &StateDir, key: AuditKey, io: Arc<dyn IoSeam>) -> Result<Self> {
        let file = ChainFile::open(
            &state.audit_path(),
            ChainFormat::Audit,
            None,
            Some(key.clone()),
            io,
        )?;
        Ok(Self { key, file })
    }

    /// Appends one row durably and returns the new head (its `mac` is the
    /// receipt hash other records cite).
    pub fn append(&mut self, kind: &str, at: &str, body: &Value) -> Result<Head> {
        let key = &self.key;
        self.file
            .append(|previous| Ok(encode_audit_row(previous, key, kind, at, body)?))
    }
}

/// Seals the head of `task`'s journal into the audit chain. The journal must
/// verify in full first: a seal vouches for what it covers.
pub fn seal_journal(
    state: &StateDir,
    audit: &mut AuditLog,
    task: &TaskId,
    at: &str,
) -> Result<SealBody> {
    let prior = read_audit(state, &audit.key)?.seals_of(task);
    seal_journal_after(state, audit, task, at, &prior)
}

/// Seals `task`'s journal given the seals the audit chain already holds for
/// it (`prior`, as `AuditSummary::seals_of` gives them). The journal must
/// verify in full and still hold every sealed row: a new seal never papers
/// over a cut. A run reads the audit chain once and seals each task with this.
pub fn seal_journal_after(
    state: &StateDir,
    audit: &mut AuditLog,
    task: &TaskId,
    at: &str,
    prior: &[Head],
) -> Result<SealBody> {
    let path = state.existing_journal_path(task)?;
    let watch: Vec<u64> = prior.iter().map(|seal| seal.seq).collect();
    let chain = read_chain(
        &path,
        ChainFormat::Journal,
        None,
        Some(task.as_str()),
        &watch,
        |_, _| {},
    )?;
    if let Some(fault) = chain.first_problem() {
        return Err(StoreError::Unsealable {
            path,
            row: fault.row,
            reason: ChainFormat::Journal.reason_name(fault.reason),
        });
    }
    if identity(prior, &chain.watched) == Identity::Mismatched {
        return Err(StoreError::Unsealable {
            path,
            row: chain.head.map_or(0, |head| head.seq),
            reason: "seal_mismatch",
        });
    }
    let Some(head) = chain.head else {
        return Err(StoreError::Unsealable {
            path,
            row: 0,
            reason: "empty",
        });
    };
    let body = SealBody {
        task_id: task.clone(),
        seq: head.seq,
        event_hash: head.digest,
    };
    let value = serde_json::to_value(&body).expect("seal body serialises");
    audit.append(SEAL_KIND, at, &value)?;
    Ok(body)
}

/// The audit chain's verification and the seals in its verified prefix.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AuditSummary {
    pub report: ChainReport,
    pub seals: Vec<SealBody>,
}

impl AuditSummary {
    pub fn seals_of(&self, task: &TaskId) -> Vec<Head> {
        self.seals
            .iter()
            .filter(|seal| &seal.task_id == task)
            .map(|seal| Head {
                seq: seal.seq,
                digest: seal.event_hash,
            })
            .collect()
    }
}

/// Verifies the audit chain and collects the seals it holds.
pub fn read_audit(state: &StateDir, key: &AuditKey) -> Result<AuditSummary> {
    let mut seals = Vec::new();
    let report = read_chain(
        &state.audit_path(),
        ChainFormat::Audit,
        Some(key),
        None,
        &[],
        |row, line| {
            if row.kind == SEAL_KIND
                && let Ok(seal) = serde_json::from_slice::<SealBody>(&line[row.payload.clone()])
            {
                seals.push(seal);
            }
        },
    )?;
    Ok(AuditSummary { report, seals })
}
