//! Reading the evidence of a task's parks: its journal's `task.suspend` and
//! `task.resume` rows and the audit chain's suspension and approval rows,
//! converted into the core's view types so `reprise_core::suspension`
//! judges them. `verify-suspension`, `approve` and `list-suspended` all read
//! through here, so they agree on what a park is.

use reprise_core::TaskKey;
use reprise_core::chain::ChainFormat;
use reprise_core::digest::Digest;
use reprise_core::record::JournalRow;
use reprise_core::suspension::{
    AuditEntry, AuditFact, ChainFlags, JournalEntry, Park, Problem, RESUME_KIND, SUSPEND_KIND,
    SuspensionReport, latest_unsettled, parks, verify_suspension,
};
use reprise_core::verify::Identity;
use serde_json::Value;

use crate::agent_checkpoint::{AgentCheckpoint, BOUND_KIND, CONTINUATION_KIND, read_checkpoint};
use crate::audit::AuditSummary;
use crate::chainfile::read_chain;
use crate::error::Result;
use crate::journal::{JournalVerification, verify_journal_with};
use crate::state::StateDir;
use crate::suspension::{AuditSuspensionRow, Release, SuspensionAudit};

/// A task's park evidence, read once.
#[derive(Debug, Clone)]
pub struct ParkEvidence {
    pub task: TaskKey,
    /// The journal's `task.suspend` and `task.resume` rows, from its
    /// verified prefix, in order.
    pub journal: Vec<JournalEntry>,
    /// The journal's own verification (chain, seals, spine, decisions) and
    /// the audit chain it was checked against.
    pub verification: JournalVerification,
    /// The task's `checkpoint.json` (the latest park's), or why it cannot
    /// be read; `None` when there is none.
    pub checkpoint: Option<std::result::Result<AgentCheckpoint, String>>,
}

/// Reads `task`'s park evidence against the audit chain `audit` (read once
/// by the caller, who may be reading many tasks).
pub fn read_parks(state: &StateDir, task: &TaskKey, audit: &AuditSummary) -> Result<ParkEvidence> {
    let verification = verify_journal_with(state, task, audit)?;
    let path = state.existing_journal_path(task)?;
    let mut journal = Vec::new();
    read_chain(
        &path,
        ChainFormat::Journal,
        None,
        Some(task.task.as_str()),
        &[],
        |row, line| {
            if [SUSPEND_KIND, RESUME_KIND, BOUND_KIND, CONTINUATION_KIND]
                .contains(&row.kind.as_ref())
                && let Ok(parsed) = serde_json::from_slice::<JournalRow>(line)
            {
                journal.push(JournalEntry {
                    seq: parsed.seq,
                    kind: parsed.kind,
                    at: parsed.at,
                    event_hash: parsed.event_hash,
                    body: parsed.body,
                });
            }
        },
    )?;
    let checkpoint = read_checkpoint(state, task)
        .map_err(|err| err.to_string())
        .transpose();
    Ok(ParkEvidence {
        task: task.clone(),
        journal,
        verification,
        checkpoint,
    })
}

/// One line about a chain's first problem: where it breaks and why.
fn broken_at(format: ChainFormat, report: &reprise_core::verify::ChainReport) -> Option<String> {
    report.first_problem().map(|fault| {
        format!(
            "broken at row {} ({})",
            fault.row,
            format.reason_name(fault.reason)
        )
    })
}

/// The core's view of one suspension row of the audit chain.
fn entry_of(row: &AuditSuspensionRow) -> AuditEntry {
    let (run_id, fact) = match &row.row {
        SuspensionAudit::SuspendReceipt(receipt) => (
            receipt.run_id.clone(),
            AuditFact::SuspendReceipt {
                park: receipt.park,
                journal_seq: receipt.journal_seq,
                session_id: receipt.session_id.clone(),
                workspace_hash: receipt.workspace_hash,
            },
        ),
        SuspensionAudit::Release(release) => (
            release.run_id.clone(),
            AuditFact::Release {
                park: release.park,
                receipt: release.receipt,
                resource: release.resource.as_str().to_owned(),
            },
        ),
        SuspensionAudit::ResumeReceipt(receipt) => (
            receipt.run_id.clone(),
            AuditFact::ResumeReceipt {
                park: receipt.park,
                suspend_receipt: receipt.suspend_receipt,
                resume: receipt.resume,
                mode: receipt.mode.clone(),
                workspace_hash: receipt.workspace_hash,
                approval_digest: receipt.approval_digest,
            },
        ),
        SuspensionAudit::Grant(grant) => (
            grant.run_id.clone(),
            AuditFact::Grant {
                resume_receipt: grant.resume_receipt,
                grant_hash: grant.grant_hash.clone(),
            },
        ),
    };
    AuditEntry {
        seq: row.seq,
        digest: row.digest,
        task: row.row.task(),
        run_id,
        fact,
    }
}

/// Every suspension and approval row of `audit`, as the core's view, in
/// chain order.
pub fn audit_entries(audit: &AuditSummary) -> Vec<AuditEntry> {
    let mut entries: Vec<AuditEntry> = audit.suspensions.iter().map(entry_of).collect();
    entries.extend(audit.approvals.iter().map(|row| AuditEntry {
        seq: row.seq,
        digest: row.digest,
        task: TaskKey::new(row.body.plan.clone(), row.body.task_id.clone()),
        run_id: row.body.run_id.clone(),
        fact: AuditFact::Approval {
            park: row.body.park,
            approval: row.body.approval,
        },
    }));
    entries.sort_by_key(|entry| entry.seq);
    entries
}

impl ParkEvidence {
    /// The audit chain the evidence was read against.
    pub fn audit(&self) -> &AuditSummary {
        &self.verification.audit
    }

    /// How the journal and the audit chain themselves verified.
    pub fn flags(&self) -> ChainFlags {
        let audit = self.audit();
        let audit_problem = broken_at(ChainFormat::Audit, &audit.report).or_else(|| {
            audit
                .witness_problem
                .map(|reason| format!("{} ({})", reason.explain(), reason.as_str()))
        });
        let verification = &self.verification;
        let journal_problem = broken_at(ChainFormat::Journal, &verification.chain)
            .or_else(|| {
                verification
                    .spine
                    .as_ref()
                    .and_then(|spine| broken_at(ChainFormat::Spine, spine))
                    .map(|spine| format!("spine {spine}"))
            })
            .or_else(|| {
                (verification.decisions == Identity::Mismatched)
                    .then(|| "a bound decision is missing from the journal or spine".to_owned())
            });
        ChainFlags {
            audit_ok: audit.ok(),
            audit_problem,
            journal_ok: journal_problem.is_none(),
            journal_problem,
            identity: verification.identity,
        }
    }

    /// The verdict on the task's latest park; `None` when it was never
    /// parked. Its `checkpoint.json` must be the one the chains bound.
    pub fn verify(&self) -> Option<SuspensionReport> {
        let mut report = verify_suspension(
            &self.task,
            &self.journal,
            &audit_entries(self.audit()),
            &self.flags(),
        )?;
        if let Some(problem) = self.checkpoint_problem() {
            report.fail_with(problem);
        }
        Some(report)
    }

    /// What is wrong with the latest park's `checkpoint.json`, when it bound
    /// a grant: its grant must be the one the `task.suspend` row hashed, and
    /// its own hash the one the journal recorded at the park (and at the
    /// resume). A park from before the journal recorded the hash is judged
    /// by its grant alone.
    pub fn checkpoint_problem(&self) -> Option<Problem> {
        let park = self.latest_park()?;
        let grant_hash = park
            .body
            .get("grant_hash")
            .and_then(Value::as_str)
            .unwrap_or("");
        if grant_hash.is_empty() {
            return None;
        }
        let park_hex = park.park.to_hex();
        let bound: Vec<Digest> = self
            .journal
            .iter()
            .filter(|row| row.kind == BOUND_KIND || row.kind == CONTINUATION_KIND)
            .filter(|row| row.body.get("park").and_then(Value::as_str) == Some(park_hex.as_str()))
            .filter_map(|row| row.body.get("checkpoint").and_then(Value::as_str))
            .filter_map(|hex| Digest::from_hex(hex.as_bytes()))
            .collect();
        let problem = |why: &str| {
            Some(Problem::CheckpointUnbound {
                park_seq: park.seq,
                why: why.to_owned(),
            })
        };
        match &self.checkpoint {
            None if bound.is_empty() => None,
            None => problem("the file is missing"),
            Some(Err(why)) => problem(why),
            Some(Ok(checkpoint)) if checkpoint.park != park.park => {
                if bound.is_empty() {
                    None
                } else {
                    problem("it names another park")
                }
            }
            Some(Ok(checkpoint)) => {
                let after = park
                    .body
                    .pointer("/journal_head/event_hash")
                    .and_then(Value::as_str)
                    .and_then(|hex| Digest::from_hex(hex.as_bytes()));
                if !checkpoint
                    .matches_suspend_row(grant_hash, after)
                    .unwrap_or(false)
                {
                    return problem("its grant is not the one the task.suspend row hashed");
                }
                let own = checkpoint.own_hash().ok()?;
                if bound.iter().any(|hash| *hash != own) {
                    return problem("its own hash is not the one the journal recorded");
                }
                None
            }
        }
    }

    /// The latest park, settled or not.
    pub fn latest_park(&self) -> Option<Park> {
        parks(&self.journal).pop()
    }

    /// The latest park when no resume settles it yet.
    pub fn latest_unsettled(&self) -> Option<Park> {
        latest_unsettled(&self.journal)
    }

    /// The releases of `park` the audit chain holds, in chain order.
    pub fn releases_of(&self, park: Digest) -> Vec<&Release> {
        self.audit()
            .suspensions_of(&self.task)
            .into_iter()
            .filter_map(|row| match &row.row {
                SuspensionAudit::Release(release) if release.park == park => Some(release),
                _ => None,
            })
            .collect()
    }

    /// The digest of `park`'s suspend receipt, once written.
    pub fn receipt_of(&self, park: Digest) -> Option<Digest> {
        self.audit()
            .suspensions_of(&self.task)
            .into_iter()
            .find_map(|row| match &row.row {
                SuspensionAudit::SuspendReceipt(receipt) if receipt.park == park => {
                    Some(row.digest)
                }
                _ => None,
            })
    }

    /// Whether the audit chain holds an approval of `park`.
    pub fn approved(&self, park: Digest) -> bool {
        self.audit().approvals.iter().any(|row| {
            row.body.park == park
                && row.body.task_id == self.task.task
                && row.body.plan == self.task.plan
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_core_and_the_store_name_the_journal_kinds_alike() {
        assert_eq!(
            reprise_core::suspension::SUSPEND_KIND,
            crate::suspension::SUSPEND_KIND
        );
        assert_eq!(
            reprise_core::suspension::RESUME_KIND,
            crate::suspension::RESUME_KIND
        );
    }
}
