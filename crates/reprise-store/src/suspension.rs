//! The records of a park and of its resume (DESIGN.md section 9): the
//! journal rows that are the park's identity and its end, and the audit rows
//! that bind them (receipts), each release of a resource, and a grant's
//! continuation. The shapes live here so the engine that writes them and the
//! verifier that reads them agree; the order they are written in is the
//! engine's.

use reprise_core::TaskKey;
use reprise_core::digest::Digest;
use reprise_core::rows::Kind;

pub use reprise_core::rows::{
    EnvelopeBalance, GrantContinuation, JournalHead, ParkCause, Release, Requester, Resource,
    ResumeBody, ResumeReceipt, SuspendBody, SuspendReceipt, Wake,
};

/// Journal row: a park's intent, written before anything is released. Its
/// event hash is the park's identity.
pub const SUSPEND_KIND: &str = Kind::TaskSuspend.as_str();
/// Journal row: a park settled by a resume.
pub const RESUME_KIND: &str = Kind::TaskResume.as_str();
/// Audit row binding a `task.suspend` row.
pub const SUSPEND_RECEIPT_KIND: &str = Kind::TaskSuspendReceipt.as_str();
/// Audit row: one resource a park gave back, citing the park's receipt.
pub const RELEASE_KIND: &str = Kind::TaskSuspendResourceRelease.as_str();
/// Audit row binding a `task.resume` row to the receipt it continues.
pub const RESUME_RECEIPT_KIND: &str = Kind::TaskResumeReceipt.as_str();
/// Audit row: the park's grant carried into the resumed task.
pub const GRANT_CONTINUATION_KIND: &str = Kind::TaskGrantContinuation.as_str();

/// One suspension row of the audit chain, with its place and hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditSuspensionRow {
    pub seq: u64,
    /// The row's hash (its `mac`): what later rows cite.
    pub digest: Digest,
    pub row: SuspensionAudit,
}

/// The suspension rows the audit chain can hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SuspensionAudit {
    SuspendReceipt(SuspendReceipt),
    Release(Release),
    ResumeReceipt(ResumeReceipt),
    Grant(GrantContinuation),
}

impl SuspensionAudit {
    /// Parses an audit row of one of the suspension kinds; `None` for any
    /// other kind, and for a body that does not parse.
    pub fn parse(kind: &str, payload: &[u8]) -> Option<Self> {
        Some(match Kind::parse(kind)? {
            Kind::TaskSuspendReceipt => Self::SuspendReceipt(serde_json::from_slice(payload).ok()?),
            Kind::TaskSuspendResourceRelease => {
                Self::Release(serde_json::from_slice(payload).ok()?)
            }
            Kind::TaskResumeReceipt => Self::ResumeReceipt(serde_json::from_slice(payload).ok()?),
            Kind::TaskGrantContinuation => Self::Grant(serde_json::from_slice(payload).ok()?),
            _ => return None,
        })
    }

    /// The task the row is about.
    pub fn task(&self) -> TaskKey {
        let (plan, task) = match self {
            Self::SuspendReceipt(row) => (&row.plan, &row.task_id),
            Self::Release(row) => (&row.plan, &row.task_id),
            Self::ResumeReceipt(row) => (&row.plan, &row.task_id),
            Self::Grant(row) => (&row.plan, &row.task_id),
        };
        TaskKey::new(plan.clone(), task.clone())
    }
}
