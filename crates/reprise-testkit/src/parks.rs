//! Parks and resumes written the way the engine writes them (DESIGN.md
//! section 9), through the store's own `Journal::append` and
//! `AuditLog::append`: for tests of what reads them (verify-suspension,
//! approve, list-suspended) before and apart from the engine.

use anyhow::Result;
use reprise_core::TaskKey;
use reprise_core::digest::Digest;
use reprise_store::audit::AuditLog;
use reprise_store::journal::Journal;
use reprise_store::key::KeyFile;
use reprise_store::state::StateDir;
use reprise_store::suspension::{
    EnvelopeBalance, GRANT_CONTINUATION_KIND, GrantContinuation, ParkCause, RELEASE_KIND,
    RESUME_RECEIPT_KIND, Release, Resource, ResumeBody, ResumeReceipt, SUSPEND_KIND,
    SUSPEND_RECEIPT_KIND, SuspendBody, SuspendReceipt, Wake,
};
use serde_json::json;

use crate::FIXED_AT;

/// A run id for fixtures.
pub const FIXTURE_RUN: &str = "R-01JFXXXXXXXXXXXXXXXXXXXXXX";

/// What a park wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parked {
    /// The `task.suspend` row's seq and event hash.
    pub seq: u64,
    pub park: Digest,
    /// The receipt row's mac.
    pub receipt: Digest,
    pub workspace_hash: Digest,
}

/// What a resume wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resumed {
    /// The `task.resume` row's event hash.
    pub resume: Digest,
    /// The resume receipt row's mac.
    pub receipt: Digest,
}

/// Writes for one task of one run.
#[derive(Debug)]
pub struct ParkWriter {
    pub state: StateDir,
    pub key: KeyFile,
    pub task: TaskKey,
    pub run_id: String,
}

/// A workspace hash named by `label`.
pub fn tree_hash(label: &str) -> Digest {
    reprise_core::digest::tagged_sha256(b"fixture tree\n", &[label.as_bytes()])
}

impl ParkWriter {
    pub fn new(state: &StateDir, key: &KeyFile, task: &TaskKey) -> Self {
        Self {
            state: state.clone(),
            key: key.clone(),
            task: task.clone(),
            run_id: FIXTURE_RUN.to_owned(),
        }
    }

    fn journal(&self) -> Result<Journal> {
        Ok(Journal::open(&self.state, &self.task)?)
    }

    fn audit(&self) -> Result<AuditLog> {
        Ok(AuditLog::open(&self.state, self.key.clone())?)
    }

    /// A journal row of another kind (an attempt's start, say).
    pub fn row(&self, kind: &str) -> Result<()> {
        self.journal()?
            .append(kind, FIXED_AT, &json!({"run_id": self.run_id}))?;
        Ok(())
    }

    /// The `task.suspend` row and its receipt, then `releases` of the
    /// releases in `Resource::ALL` order.
    pub fn park_partly(&self, wake: Wake, grant_hash: &str, releases: usize) -> Result<Parked> {
        let workspace_hash = tree_hash("parked");
        let body = SuspendBody {
            run_id: self.run_id.clone(),
            attempt: 1,
            session_id: Some("session-1".to_owned()),
            workspace_hash,
            journal_head: None,
            envelope: EnvelopeBalance {
                reserved_micro_usd: Some(100_000),
                spent_micro_usd: 40_000,
                headroom_micro_usd: 60_000,
            },
            wake: wake.clone(),
            cause: ParkCause::Request,
            reason: Some("lunch".to_owned()),
            question: None,
            question_hash: None,
            grant_hash: grant_hash.to_owned(),
            requested_by: None,
        };
        let head = self
            .journal()?
            .append(SUSPEND_KIND, FIXED_AT, &serde_json::to_value(&body)?)?;
        let receipt = SuspendReceipt {
            plan: self.task.plan.clone(),
            task_id: self.task.task.clone(),
            run_id: self.run_id.clone(),
            park: head.digest,
            journal_seq: head.seq,
            session_id: body.session_id,
            workspace_hash,
            wake,
        };
        let mut audit = self.audit()?;
        let receipt_head = audit.append(
            SUSPEND_RECEIPT_KIND,
            FIXED_AT,
            &serde_json::to_value(&receipt)?,
        )?;
        for resource in Resource::ALL.into_iter().take(releases) {
            let release = Release {
                plan: self.task.plan.clone(),
                task_id: self.task.task.clone(),
                run_id: self.run_id.clone(),
                park: head.digest,
                receipt: receipt_head.digest,
                resource,
                detail: json!({"resource": resource.as_str()}),
            };
            audit.append(RELEASE_KIND, FIXED_AT, &serde_json::to_value(&release)?)?;
        }
        Ok(Parked {
            seq: head.seq,
            park: head.digest,
            receipt: receipt_head.digest,
            workspace_hash,
        })
    }

    /// A whole park until a resume.
    pub fn park(&self) -> Result<Parked> {
        self.park_partly(Wake::Resume, "", Resource::ALL.len())
    }

    /// The `task.resume` row alone.
    pub fn resume_row(
        &self,
        parked: &Parked,
        mode: &str,
        workspace_hash: Digest,
        approval_digest: Option<Digest>,
    ) -> Result<Digest> {
        let body = ResumeBody {
            run_id: self.run_id.clone(),
            park: parked.park,
            receipt: parked.receipt,
            attempt: 2,
            requested: None,
            mode: mode.to_owned(),
            downgrade_reason: (workspace_hash != parked.workspace_hash)
                .then(|| "workspace_hash_mismatch".to_owned()),
            workspace_hash,
            approval_digest,
            grant_hash: String::new(),
            // A resume row as written before these were recorded.
            lifecycle: None,
            decision_hash: None,
            mode_reason: None,
        };
        let head = self.journal()?.append_row(FIXED_AT, &body)?;
        Ok(head.digest)
    }

    /// The resume receipt of the resume row `resume`.
    pub fn resume_receipt(
        &self,
        parked: &Parked,
        resume: Digest,
        mode: &str,
        workspace_hash: Digest,
        approval_digest: Option<Digest>,
    ) -> Result<Digest> {
        let receipt = ResumeReceipt {
            plan: self.task.plan.clone(),
            task_id: self.task.task.clone(),
            run_id: self.run_id.clone(),
            park: parked.park,
            suspend_receipt: parked.receipt,
            resume,
            mode: mode.to_owned(),
            workspace_hash,
            approval_digest,
        };
        let head = self.audit()?.append(
            RESUME_RECEIPT_KIND,
            FIXED_AT,
            &serde_json::to_value(&receipt)?,
        )?;
        Ok(head.digest)
    }

    /// A whole resume: its row, then its receipt.
    pub fn resume(
        &self,
        parked: &Parked,
        mode: &str,
        workspace_hash: Digest,
        approval_digest: Option<Digest>,
    ) -> Result<Resumed> {
        let resume = self.resume_row(parked, mode, workspace_hash, approval_digest)?;
        let receipt = self.resume_receipt(parked, resume, mode, workspace_hash, approval_digest)?;
        Ok(Resumed { resume, receipt })
    }

    /// The grant continuation of a resume.
    pub fn grant(&self, resumed: &Resumed, grant_hash: &str) -> Result<()> {
        let body = GrantContinuation {
            plan: self.task.plan.clone(),
            task_id: self.task.task.clone(),
            run_id: self.run_id.clone(),
            resume_receipt: resumed.receipt,
            grant_hash: grant_hash.to_owned(),
        };
        self.audit()?.append(
            GRANT_CONTINUATION_KIND,
            FIXED_AT,
            &serde_json::to_value(&body)?,
        )?;
        Ok(())
    }
}
