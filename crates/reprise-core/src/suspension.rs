//! Judging the evidence of a task's parks (DESIGN.md section 9) from what the
//! journal and the audit chain hold, and nothing else.
//!
//! A park leaves two trails written by different hands: the task journal
//! (`task.suspend`, later `task.resume`) is plain hash-chained JSON, the audit
//! chain (receipts, releases, grant continuations, approvals) is keyed by the
//! audit key. Each trail cites the other by hash, so a row removed, forged or
//! copied from another task shows up as a citation that does not resolve.
//! This module holds the verdict: the store reads both files and hands their
//! rows here as the small view types below; nothing here touches a file.
//!
//! Only the latest park may be unfinished: a crash between two steps of a
//! park or a resume leaves it half-written, and the next command completes
//! it, so an unfinished latest park is `pending`. An earlier park must be
//! whole, because a later park could only have started after it was settled.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;

use crate::TaskKey;
use crate::digest::Digest;
use crate::verify::Identity;

/// Journal row kind of a park's intent (the store's `suspension::SUSPEND_KIND`).
pub const SUSPEND_KIND: &str = crate::row_kind::Kind::TaskSuspend.as_str();
/// Journal row kind of a park's resume (the store's `suspension::RESUME_KIND`).
pub const RESUME_KIND: &str = crate::row_kind::Kind::TaskResume.as_str();

/// One journal row, as the verified prefix of the journal holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct JournalEntry {
    pub seq: u64,
    pub kind: String,
    pub at: String,
    pub event_hash: Digest,
    pub body: Value,
}

/// One suspension row of the audit chain's verified prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEntry {
    pub seq: u64,
    /// The row's `mac`: what later rows cite.
    pub digest: Digest,
    /// The task the row names.
    pub task: TaskKey,
    pub run_id: String,
    pub fact: AuditFact,
}

/// What a suspension audit row says, reduced to what the verdict compares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuditFact {
    /// `task.suspend_receipt`.
    SuspendReceipt {
        park: Digest,
        journal_seq: u64,
        session_id: Option<String>,
        workspace_hash: Digest,
    },
    /// `task.suspend_resource_release`.
    Release {
        park: Digest,
        receipt: Digest,
        resource: String,
    },
    /// `task.resume_receipt`.
    ResumeReceipt {
        park: Digest,
        suspend_receipt: Digest,
        resume: Digest,
        mode: String,
        workspace_hash: Digest,
        approval_digest: Option<Digest>,
    },
    /// `task.grant_continuation`.
    Grant {
        resume_receipt: Digest,
        grant_hash: String,
    },
    /// `task.approval`: an approval file's digest, bound to a park.
    Approval { park: Digest, approval: Digest },
}

impl AuditFact {
    /// The park the row names outright, if it names one.
    fn park(&self) -> Option<Digest> {
        match self {
            Self::SuspendReceipt { park, .. }
            | Self::Release { park, .. }
            | Self::ResumeReceipt { park, .. }
            | Self::Approval { park, .. } => Some(*park),
            Self::Grant { .. } => None,
        }
    }
}

/// How the two chains themselves verified, from the store's readers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainFlags {
    /// The audit chain verifies with the key and agrees with its witness.
    pub audit_ok: bool,
    /// Where and why it does not, for a person.
    pub audit_problem: Option<String>,
    /// The journal chain verifies whole (and its spine and decisions).
    pub journal_ok: bool,
    pub journal_problem: Option<String>,
    /// The journal against the seals the audit chain holds for it.
    pub identity: Identity,
}

/// The verdict on a task's latest park.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Settled: its resume row exists and its resume receipt binds it.
    Verified,
    /// Live, or a step of it or of its resume not written yet: not an error.
    Pending,
    /// Something does not hold; `errors` says what.
    Failed,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Verified => "verified",
            Self::Pending => "pending",
            Self::Failed => "failed",
        }
    }
}

/// One thing the evidence does not support.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    AuditChainBroken {
        detail: String,
    },
    JournalChainBroken {
        detail: String,
    },
    IdentityMismatched,
    MalformedRow {
        seq: u64,
        kind: String,
    },
    /// An audit row cites a park that is no `task.suspend` row of this journal.
    ForeignPark {
        audit_row: u64,
        park: Digest,
    },
    /// An audit row about another task cites a park of this journal.
    OtherTask {
        audit_row: u64,
        task: String,
    },
    /// An audit row names another run than the park's.
    OtherRun {
        audit_row: u64,
        run: String,
        park_run: String,
    },
    /// A receipt disagrees with the row it binds.
    Inconsistent {
        audit_row: u64,
        field: &'static str,
    },
    /// Two suspend receipts bind one park.
    ReceiptedTwice {
        park_seq: u64,
    },
    /// A park, not the latest, has no receipt.
    NoReceipt {
        park_seq: u64,
    },
    /// A release cites no receipt written before it.
    ReleaseWithoutReceipt {
        audit_row: u64,
    },
    ReleasedTwice {
        audit_row: u64,
        resource: String,
    },
    /// A resume receipt names a `task.resume` row the journal lacks.
    MissingResumeRow {
        audit_row: u64,
        resume: Digest,
    },
    /// A `task.resume` row cites a park this journal does not hold.
    ResumeOfForeignPark {
        seq: u64,
        park: Digest,
    },
    /// A `task.resume` row cites another receipt than its park's.
    ResumeOfOtherReceipt {
        seq: u64,
    },
    /// Two resumes (rows or receipts) for one park.
    SettledTwice {
        park_seq: u64,
    },
    /// A resume row, not of the latest park, that no resume receipt binds.
    ResumeUnbound {
        seq: u64,
    },
    /// A resume receipt binds an approval the audit chain does not hold.
    ApprovalMissing {
        audit_row: u64,
        approval: Digest,
    },
    /// A park waiting for approval was resumed without one.
    ApprovalUnbound {
        park_seq: u64,
    },
    /// A grant continuation cites no resume receipt of this task's parks.
    GrantOfUnknownResume {
        audit_row: u64,
    },
    /// A grant continuation carries another grant than the park bound.
    GrantMismatch {
        audit_row: u64,
    },
    /// A park that bound a grant, not the latest, resumed with no continuation.
    GrantMissing {
        park_seq: u64,
    },
    /// The park's `checkpoint.json` is not the one its chains bound: its
    /// grant is not the one the `task.suspend` row hashed, or its own hash
    /// is not the one the journal recorded (`why` says which).
    CheckpointUnbound {
        park_seq: u64,
        why: String,
    },
}

impl Problem {
    /// A stable name for machines.
    pub fn code(&self) -> &'static str {
        match self {
            Self::AuditChainBroken { .. } => "audit_chain_broken",
            Self::JournalChainBroken { .. } => "journal_chain_broken",
            Self::IdentityMismatched => "journal_identity_mismatched",
            Self::MalformedRow { .. } => "malformed_row",
            Self::ForeignPark { .. } => "receipt_cites_another_park",
            Self::OtherTask { .. } => "receipt_names_another_task",
            Self::OtherRun { .. } => "receipt_names_another_run",
            Self::Inconsistent { .. } => "receipt_inconsistent",
            Self::ReceiptedTwice { .. } => "park_receipted_twice",
            Self::NoReceipt { .. } => "park_without_receipt",
            Self::ReleaseWithoutReceipt { .. } => "release_without_receipt",
            Self::ReleasedTwice { .. } => "released_twice",
            Self::MissingResumeRow { .. } => "missing_resume_row",
            Self::ResumeOfForeignPark { .. } => "resume_cites_another_park",
            Self::ResumeOfOtherReceipt { .. } => "resume_cites_another_receipt",
            Self::SettledTwice { .. } => "park_settled_twice",
            Self::ResumeUnbound { .. } => "resume_without_receipt",
            Self::ApprovalMissing { .. } => "approval_not_in_audit_chain",
            Self::ApprovalUnbound { .. } => "approval_not_bound",
            Self::GrantOfUnknownResume { .. } => "grant_cites_unknown_resume",
            Self::GrantMismatch { .. } => "grant_mismatch",
            Self::GrantMissing { .. } => "grant_continuation_missing",
            Self::CheckpointUnbound { .. } => "checkpoint_unbound",
        }
    }
}

fn short(digest: &Digest) -> String {
    digest.to_hex()[..12].to_owned()
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::AuditChainBroken { detail } => write!(f, "audit chain: {detail}"),
            Self::JournalChainBroken { detail } => write!(f, "journal: {detail}"),
            Self::IdentityMismatched => {
                f.write_str("journal: a seal names a row this journal does not hold")
            }
            Self::MalformedRow { seq, kind } => {
                write!(
                    f,
                    "journal row {seq} ({kind}) has a body that does not parse"
                )
            }
            Self::ForeignPark { audit_row, park } => write!(
                f,
                "audit row {audit_row} cites park {} that is no task.suspend row of this journal",
                short(park)
            ),
            Self::OtherTask { audit_row, task } => write!(
                f,
                "audit row {audit_row} names task {task} but cites a park of this task"
            ),
            Self::OtherRun {
                audit_row,
                run,
                park_run,
            } => write!(
                f,
                "audit row {audit_row} names run {run}; the park belongs to run {park_run}"
            ),
            Self::Inconsistent { audit_row, field } => write!(
                f,
                "audit row {audit_row} disagrees with the journal row it binds ({field})"
            ),
            Self::ReceiptedTwice { park_seq } => {
                write!(
                    f,
                    "the park at journal row {park_seq} has two suspend receipts"
                )
            }
            Self::NoReceipt { park_seq } => write!(
                f,
                "the park at journal row {park_seq} has no suspend receipt, and a later park followed it"
            ),
            Self::ReleaseWithoutReceipt { audit_row } => write!(
                f,
                "release at audit row {audit_row} cites no suspend receipt written before it"
            ),
            Self::ReleasedTwice {
                audit_row,
                resource,
            } => write!(
                f,
                "release at audit row {audit_row} gives back {resource} a second time"
            ),
            Self::MissingResumeRow { audit_row, resume } => write!(
                f,
                "resume receipt at audit row {audit_row} names journal row {} that the journal lacks",
                short(resume)
            ),
            Self::ResumeOfForeignPark { seq, park } => write!(
                f,
                "resume at journal row {seq} cites park {} that is no task.suspend row of this journal",
                short(park)
            ),
            Self::ResumeOfOtherReceipt { seq } => write!(
                f,
                "resume at journal row {seq} cites another receipt than its park's"
            ),
            Self::SettledTwice { park_seq } => {
                write!(f, "the park at journal row {park_seq} was settled twice")
            }
            Self::ResumeUnbound { seq } => write!(
                f,
                "resume at journal row {seq} has no resume receipt, and a later park followed it"
            ),
            Self::ApprovalMissing {
                audit_row,
                approval,
            } => write!(
                f,
                "resume receipt at audit row {audit_row} binds approval {} that the audit chain does not hold for the park",
                short(approval)
            ),
            Self::ApprovalUnbound { park_seq } => write!(
                f,
                "the park at journal row {park_seq} waited for approval but its resume binds none"
            ),
            Self::GrantOfUnknownResume { audit_row } => write!(
                f,
                "grant continuation at audit row {audit_row} cites no resume receipt of this task"
            ),
            Self::GrantMismatch { audit_row } => write!(
                f,
                "grant continuation at audit row {audit_row} carries another grant than its park bound"
            ),
            Self::GrantMissing { park_seq } => write!(
                f,
                "the park at journal row {park_seq} bound a grant, was resumed, and has no grant continuation"
            ),
            Self::CheckpointUnbound { park_seq, why } => write!(
                f,
                "the checkpoint.json of the park at journal row {park_seq} is not the one its chains bound: {why}"
            ),
        }
    }
}

impl Serialize for Problem {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(2))?;
        map.serialize_entry("code", self.code())?;
        map.serialize_entry("message", &self.to_string())?;
        map.end()
    }
}

/// The latest park, as the report shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LatestPark {
    /// The `task.suspend` row's seq and event hash (the park's identity).
    pub seq: u64,
    pub park: Digest,
    pub run_id: String,
    /// The suspend receipt's audit row and digest, once written.
    pub receipt_row: Option<u64>,
    pub receipt: Option<Digest>,
    /// Resources released so far, in the order the chain holds them.
    pub released: Vec<String>,
    /// The `task.resume` row's seq, once written.
    pub resume_seq: Option<u64>,
    /// The resume receipt's audit row, once written.
    pub resume_receipt_row: Option<u64>,
}

/// What `reprise audit verify-suspension` reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SuspensionReport {
    pub status: Status,
    pub ok: bool,
    pub chain_ok: bool,
    pub journal_ok: bool,
    pub journal_identity: Identity,
    /// The latest park's resume row exists and its resume receipt binds it.
    pub resumed: bool,
    /// The mode the latest resume ran in.
    pub effective_mode: Option<String>,
    /// The resume's workspace hash is the park's.
    pub workspace_match: Option<bool>,
    pub downgrade_reason: Option<String>,
    pub errors: Vec<Problem>,
    /// How many parks the journal holds.
    pub parks: usize,
    pub latest: Option<LatestPark>,
}

impl SuspensionReport {
    /// A problem found beside the chains (in a file they bind): the
    /// verdict is failed.
    pub fn fail_with(&mut self, problem: Problem) {
        self.errors.push(problem);
        self.status = Status::Failed;
        self.ok = false;
    }
}

/// The facts of a `task.suspend` body this module reads.
#[derive(Debug, Clone, Deserialize)]
struct SuspendFacts {
    run_id: String,
    #[serde(default)]
    session_id: Option<String>,
    workspace_hash: Digest,
    wake: Value,
    #[serde(default)]
    grant_hash: String,
}

/// The facts of a `task.resume` body this module reads.
#[derive(Debug, Clone, Deserialize)]
struct ResumeFacts {
    park: Digest,
    receipt: Digest,
    mode: String,
    #[serde(default)]
    downgrade_reason: Option<String>,
    workspace_hash: Digest,
    #[serde(default)]
    approval_digest: Option<Digest>,
}

/// One park of the journal, whether or not it was resumed.
#[derive(Debug, Clone, PartialEq)]
pub struct Park {
    pub seq: u64,
    /// The `task.suspend` row's event hash: the park's identity.
    pub park: Digest,
    pub at: String,
    /// The row's body (the store's `SuspendBody`).
    pub body: Value,
    /// A later `task.resume` row cites it.
    pub settled: bool,
}

/// Every `task.suspend` row of `journal`, oldest first, each marked settled
/// when a later `task.resume` row cites it.
pub fn parks(journal: &[JournalEntry]) -> Vec<Park> {
    let resumed: BTreeSet<Digest> = journal
        .iter()
        .filter(|row| row.kind == RESUME_KIND)
        .filter_map(|row| row.body.get("park").cloned())
        .filter_map(|park| serde_json::from_value::<Digest>(park).ok())
        .collect();
    journal
        .iter()
        .filter(|row| row.kind == SUSPEND_KIND)
        .map(|row| Park {
            seq: row.seq,
            park: row.event_hash,
            at: row.at.clone(),
            body: row.body.clone(),
            settled: resumed.contains(&row.event_hash),
        })
        .collect()
}

/// The latest park when no resume settles it yet: what `approve` approves
/// and `list-suspended` lists.
pub fn latest_unsettled(journal: &[JournalEntry]) -> Option<Park> {
    parks(journal).pop().filter(|park| !park.settled)
}

/// What one park's evidence came to, while it is being gathered.
#[derive(Debug, Default)]
struct Trail {
    receipts: Vec<(u64, Digest)>,
    released: Vec<String>,
    resumes: Vec<(u64, Digest, ResumeFacts)>,
    resume_receipts: Vec<(u64, Digest, Option<Digest>)>,
    grants: Vec<(u64, String)>,
    approvals: BTreeSet<Digest>,
}

/// Judges `task`'s latest park from its journal rows (`journal`: the
/// verified prefix, any kinds) and the audit chain's suspension rows
/// (`audit`: every task's, in chain order, so a row about another task that
/// cites this task's park is seen). `None` when there is nothing to judge:
/// both chains verify and neither holds a park of the task.
pub fn verify_suspension(
    task: &TaskKey,
    journal: &[JournalEntry],
    audit: &[AuditEntry],
    flags: &ChainFlags,
) -> Option<SuspensionReport> {
    let mut judgement = Judgement::of_journal(journal, chain_problems(flags));
    // In chain order: a receipt is known before anything that cites it can
    // be judged.
    for row in audit {
        judgement.audit_row(task, row);
    }
    judgement.file_grants();
    if judgement.parks.is_empty() && !judgement.any_row_of_task && judgement.errors.is_empty() {
        return None;
    }
    let complete = judgement.check_trails();
    Some(judgement.report(flags, complete))
}

/// What the chains' own verification found wrong, before any row is read.
fn chain_problems(flags: &ChainFlags) -> Vec<Problem> {
    let mut errors = Vec::new();
    if !flags.audit_ok {
        errors.push(Problem::AuditChainBroken {
            detail: flags
                .audit_problem
                .clone()
                .unwrap_or_else(|| "does not verify".to_owned()),
        });
    }
    if !flags.journal_ok {
        errors.push(Problem::JournalChainBroken {
            detail: flags
                .journal_problem
                .clone()
                .unwrap_or_else(|| "does not verify".to_owned()),
        });
    }
    if flags.identity == Identity::Mismatched {
        errors.push(Problem::IdentityMismatched);
    }
    errors
}

/// A `task.suspend` row: its seq, its event hash (the park's identity) and
/// what it says.
type ParkRow = (u64, Digest, SuspendFacts);
/// A `task.resume` row: its seq, its event hash and what it says.
type ResumeRow = (u64, Digest, ResumeFacts);

/// The verdict while it is being reached: the journal's parks and resumes,
/// what the audit chain has said about each park so far, and the problems
/// found, in the order they were found (the report lists them so).
struct Judgement {
    parks: Vec<ParkRow>,
    resumes: Vec<ResumeRow>,
    /// A park's index in `parks`, by its identity.
    by_park: BTreeMap<Digest, usize>,
    /// A resume's index in `resumes`, by its event hash.
    resume_rows: BTreeMap<Digest, usize>,
    /// One per park, in the same order.
    trails: Vec<Trail>,
    /// The park each suspend receipt read so far binds, by its digest.
    receipts: BTreeMap<Digest, usize>,
    /// The park each resume receipt read so far binds, by its digest.
    resume_receipts: BTreeMap<Digest, usize>,
    /// Grant continuations (audit row, resume receipt, grant): judged once
    /// every resume receipt is known.
    grants_pending: Vec<(u64, Digest, String)>,
    /// The audit chain holds a suspension row of the task.
    any_row_of_task: bool,
    errors: Vec<Problem>,
}

/// What a resume receipt says about the `task.resume` row it binds.
struct ResumeClaim<'a> {
    park: Digest,
    resume: Digest,
    mode: &'a str,
    workspace_hash: Digest,
    approval_digest: Option<Digest>,
}

impl ResumeClaim<'_> {
    /// The first field where the journal's resume row says otherwise.
    fn disagreement(&self, resumed: &ResumeFacts) -> Option<&'static str> {
        if resumed.park != self.park {
            Some("park")
        } else if resumed.mode != self.mode {
            Some("mode")
        } else if resumed.workspace_hash != self.workspace_hash {
            Some("workspace_hash")
        } else if resumed.approval_digest != self.approval_digest {
            Some("approval_digest")
        } else {
            None
        }
    }
}

impl Judgement {
    /// The journal's parks and resumes, each resume filed under the park it
    /// cites; `errors` are the problems already found.
    fn of_journal(journal: &[JournalEntry], mut errors: Vec<Problem>) -> Self {
        let mut parks: Vec<ParkRow> = Vec::new();
        let mut resumes: Vec<ResumeRow> = Vec::new();
        for row in journal {
            let malformed = || Problem::MalformedRow {
                seq: row.seq,
                kind: row.kind.clone(),
            };
            match row.kind.as_str() {
                SUSPEND_KIND => match serde_json::from_value::<SuspendFacts>(row.body.clone()) {
                    Ok(facts) => parks.push((row.seq, row.event_hash, facts)),
                    Err(_) => errors.push(malformed()),
                },
                RESUME_KIND => match serde_json::from_value::<ResumeFacts>(row.body.clone()) {
                    Ok(facts) => resumes.push((row.seq, row.event_hash, facts)),
                    Err(_) => errors.push(malformed()),
                },
                _ => {}
            }
        }
        let by_park: BTreeMap<Digest, usize> = parks
            .iter()
            .enumerate()
            .map(|(index, (_, park, _))| (*park, index))
            .collect();
        let resume_rows: BTreeMap<Digest, usize> = resumes
            .iter()
            .enumerate()
            .map(|(index, (_, hash, _))| (*hash, index))
            .collect();
        let mut trails: Vec<Trail> = parks.iter().map(|_| Trail::default()).collect();
        for (seq, hash, facts) in &resumes {
            match by_park.get(&facts.park) {
                Some(&index) => trails[index].resumes.push((*seq, *hash, facts.clone())),
                None => errors.push(Problem::ResumeOfForeignPark {
                    seq: *seq,
                    park: facts.park,
                }),
            }
        }
        Self {
            parks,
            resumes,
            by_park,
            resume_rows,
            trails,
            receipts: BTreeMap::new(),
            resume_receipts: BTreeMap::new(),
            grants_pending: Vec::new(),
            any_row_of_task: false,
            errors,
        }
    }

    /// One suspension row of the audit chain: set aside when it is another
    /// task's (unless it cites this task's park), kept for later when it is
    /// a grant continuation, else filed on the trail of the park it cites.
    fn audit_row(&mut self, task: &TaskKey, row: &AuditEntry) {
        let cited = row.fact.park();
        if &row.task != task {
            if cited.is_some_and(|park| self.by_park.contains_key(&park)) {
                self.errors.push(Problem::OtherTask {
                    audit_row: row.seq,
                    task: row.task.to_string(),
                });
            }
            return;
        }
        self.any_row_of_task = true;
        if let AuditFact::Grant {
            resume_receipt,
            grant_hash,
        } = &row.fact
        {
            self.grants_pending
                .push((row.seq, *resume_receipt, grant_hash.clone()));
            return;
        }
        let park = cited.expect("every fact but a grant names its park");
        let Some(&index) = self.by_park.get(&park) else {
            self.errors.push(Problem::ForeignPark {
                audit_row: row.seq,
                park,
            });
            return;
        };
        let park_run = &self.parks[index].2.run_id;
        if &row.run_id != park_run {
            self.errors.push(Problem::OtherRun {
                audit_row: row.seq,
                run: row.run_id.clone(),
                park_run: park_run.clone(),
            });
            return;
        }
        match &row.fact {
            AuditFact::SuspendReceipt {
                journal_seq,
                session_id,
                workspace_hash,
                ..
            } => self.suspend_receipt(row, index, *journal_seq, session_id, workspace_hash),
            AuditFact::Release {
                receipt, resource, ..
            } => self.release(row.seq, index, receipt, resource),
            AuditFact::ResumeReceipt {
                suspend_receipt,
                resume,
                mode,
                workspace_hash,
                approval_digest,
                ..
            } => {
                let claim = ResumeClaim {
                    park,
                    resume: *resume,
                    mode,
                    workspace_hash: *workspace_hash,
                    approval_digest: *approval_digest,
                };
                self.resume_receipt(row, index, suspend_receipt, &claim);
            }
            AuditFact::Approval { approval, .. } => {
                self.trails[index].approvals.insert(*approval);
            }
            AuditFact::Grant { .. } => unreachable!("handled above"),
        }
    }

    /// A suspend receipt: it must repeat what its park's row says, and be
    /// the park's only one.
    fn suspend_receipt(
        &mut self,
        row: &AuditEntry,
        index: usize,
        journal_seq: u64,
        session_id: &Option<String>,
        workspace_hash: &Digest,
    ) {
        let (park_seq, _, facts) = &self.parks[index];
        let field = if journal_seq != *park_seq {
            Some("journal_seq")
        } else if workspace_hash != &facts.workspace_hash {
            Some("workspace_hash")
        } else if session_id != &facts.session_id {
            Some("session_id")
        } else {
            None
        };
        if let Some(field) = field {
            self.errors.push(Problem::Inconsistent {
                audit_row: row.seq,
                field,
            });
        }
        let trail = &mut self.trails[index];
        if !trail.receipts.is_empty() {
            self.errors.push(Problem::ReceiptedTwice {
                park_seq: *park_seq,
            });
        }
        trail.receipts.push((row.seq, row.digest));
        self.receipts.insert(row.digest, index);
    }

    /// A release: it must cite the park's receipt, read before it, and give
    /// a resource back once.
    fn release(&mut self, audit_row: u64, index: usize, receipt: &Digest, resource: &str) {
        let trail = &mut self.trails[index];
        if self.receipts.get(receipt) != Some(&index) {
            self.errors
                .push(Problem::ReleaseWithoutReceipt { audit_row });
        } else if trail.released.iter().any(|done| done == resource) {
            self.errors.push(Problem::ReleasedTwice {
                audit_row,
                resource: resource.to_owned(),
            });
        } else {
            trail.released.push(resource.to_owned());
        }
    }

    /// A resume receipt: it must cite the park's suspend receipt, bind a
    /// `task.resume` row that says what it says, and bind only an approval
    /// the audit chain holds for the park.
    fn resume_receipt(
        &mut self,
        row: &AuditEntry,
        index: usize,
        suspend_receipt: &Digest,
        claim: &ResumeClaim<'_>,
    ) {
        if self.receipts.get(suspend_receipt) != Some(&index) {
            self.errors.push(Problem::Inconsistent {
                audit_row: row.seq,
                field: "suspend_receipt",
            });
        }
        match self.resume_rows.get(&claim.resume) {
            None => self.errors.push(Problem::MissingResumeRow {
                audit_row: row.seq,
                resume: claim.resume,
            }),
            Some(&at) => {
                if let Some(field) = claim.disagreement(&self.resumes[at].2) {
                    self.errors.push(Problem::Inconsistent {
                        audit_row: row.seq,
                        field,
                    });
                }
            }
        }
        let trail = &mut self.trails[index];
        if let Some(approval) = claim.approval_digest
            && !trail.approvals.contains(&approval)
        {
            self.errors.push(Problem::ApprovalMissing {
                audit_row: row.seq,
                approval,
            });
        }
        trail
            .resume_receipts
            .push((row.seq, claim.resume, claim.approval_digest));
        self.resume_receipts.insert(row.digest, index);
    }

    /// The grant continuations, now that every resume receipt is known: each
    /// must cite one and carry the grant its park bound.
    fn file_grants(&mut self) {
        for (audit_row, resume_receipt, grant_hash) in std::mem::take(&mut self.grants_pending) {
            match self.resume_receipts.get(&resume_receipt) {
                None => self
                    .errors
                    .push(Problem::GrantOfUnknownResume { audit_row }),
                Some(&index) if self.parks[index].2.grant_hash != grant_hash => {
                    self.errors.push(Problem::GrantMismatch { audit_row });
                }
                Some(&index) => self.trails[index].grants.push((audit_row, grant_hash)),
            }
        }
    }

    /// Each park's trail: whole for every park but the latest. Whether the
    /// latest is whole too (it may be pending).
    fn check_trails(&mut self) -> bool {
        let mut complete = true;
        for (index, ((park_seq, _, facts), trail)) in
            self.parks.iter().zip(&self.trails).enumerate()
        {
            let ends = trail_ends(*park_seq, facts, trail, &mut self.errors);
            if index + 1 == self.parks.len() {
                complete = ends.whole();
            } else {
                ends.require_whole(*park_seq, trail, &mut self.errors);
            }
        }
        complete
    }

    /// The report on the latest park; `complete`: its trail is whole.
    fn report(self, flags: &ChainFlags, complete: bool) -> SuspensionReport {
        let latest = self.parks.last().zip(self.trails.last());
        let resume = latest.and_then(|(_, trail)| trail.resumes.first());
        let resumed = latest.is_some_and(|(_, trail)| {
            trail.resumes.first().is_some_and(|(_, hash, _)| {
                trail
                    .resume_receipts
                    .iter()
                    .any(|(_, resume, _)| resume == hash)
            })
        });
        let status = if !self.errors.is_empty() {
            Status::Failed
        } else if complete {
            Status::Verified
        } else {
            Status::Pending
        };
        SuspensionReport {
            status,
            ok: status != Status::Failed,
            chain_ok: flags.audit_ok,
            journal_ok: flags.journal_ok,
            journal_identity: flags.identity,
            resumed,
            effective_mode: resume.map(|(_, _, facts)| facts.mode.clone()),
            workspace_match: latest
                .zip(resume)
                .map(|(((_, _, park), _), (_, _, facts))| {
                    park.workspace_hash == facts.workspace_hash
                }),
            downgrade_reason: resume.and_then(|(_, _, facts)| facts.downgrade_reason.clone()),
            parks: self.parks.len(),
            latest: latest.map(|((seq, park, facts), trail)| LatestPark {
                seq: *seq,
                park: *park,
                run_id: facts.run_id.clone(),
                receipt_row: trail.receipts.first().map(|(row, _)| *row),
                receipt: trail.receipts.first().map(|(_, digest)| *digest),
                released: trail.released.clone(),
                resume_seq: trail.resumes.first().map(|(seq, _, _)| *seq),
                resume_receipt_row: trail.resume_receipts.first().map(|(row, _, _)| *row),
            }),
            errors: self.errors,
        }
    }
}

/// How far one park's trail got.
#[derive(Debug, Clone, Copy)]
struct TrailEnds {
    receipted: bool,
    resumed: bool,
    /// A resume receipt binds its resume row.
    bound: bool,
    /// It bound no grant, or a continuation carries it.
    granted: bool,
}

impl TrailEnds {
    fn whole(self) -> bool {
        self.receipted && self.resumed && self.bound && self.granted
    }

    /// The problems of a park, not the latest, whose trail stopped short: a
    /// later park could only have started once this one was settled.
    fn require_whole(self, park_seq: u64, trail: &Trail, errors: &mut Vec<Problem>) {
        if !self.receipted {
            errors.push(Problem::NoReceipt { park_seq });
        }
        if let Some((seq, _, _)) = trail.resumes.first()
            && !self.bound
        {
            errors.push(Problem::ResumeUnbound { seq: *seq });
        }
        if self.bound && !self.granted {
            errors.push(Problem::GrantMissing { park_seq });
        }
    }
}

/// How far a park's trail got, pushing what is wrong with any park's (it was
/// settled twice, a resume cites another receipt, an approval it waited for
/// is not bound).
fn trail_ends(
    park_seq: u64,
    facts: &SuspendFacts,
    trail: &Trail,
    errors: &mut Vec<Problem>,
) -> TrailEnds {
    if trail.resumes.len() > 1 || trail.resume_receipts.len() > 1 {
        errors.push(Problem::SettledTwice { park_seq });
    }
    for (seq, _, resumed) in &trail.resumes {
        if trail
            .receipts
            .first()
            .is_none_or(|(_, digest)| digest != &resumed.receipt)
        {
            errors.push(Problem::ResumeOfOtherReceipt { seq: *seq });
        }
    }
    let waits_for_approval = facts.wake.get("on").and_then(Value::as_str) == Some("approval");
    for (_, _, approval) in &trail.resume_receipts {
        if waits_for_approval && approval.is_none() {
            errors.push(Problem::ApprovalUnbound { park_seq });
        }
    }
    TrailEnds {
        receipted: !trail.receipts.is_empty(),
        resumed: !trail.resumes.is_empty(),
        bound: trail.resumes.iter().any(|(_, hash, _)| {
            trail
                .resume_receipts
                .iter()
                .any(|(_, resume, _)| resume == hash)
        }),
        granted: facts.grant_hash.is_empty() || !trail.grants.is_empty(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::digest::tagged_sha256;
    use crate::{PlanId, TaskId};

    const RUN: &str = "R-01JAAAAAAAAAAAAAAAAAAAAAAA";

    fn hash(name: &str) -> Digest {
        tagged_sha256(b"test\n", &[name.as_bytes()])
    }

    fn key(task: &str) -> TaskKey {
        TaskKey::new(PlanId::parse("p").unwrap(), TaskId::parse(task).unwrap())
    }

    fn clean() -> ChainFlags {
        ChainFlags {
            audit_ok: true,
            audit_problem: None,
            journal_ok: true,
            journal_problem: None,
            identity: Identity::Unverifiable,
        }
    }

    /// A journal and audit chain written in the engine's order.
    struct Build {
        task: TaskKey,
        journal: Vec<JournalEntry>,
        audit: Vec<AuditEntry>,
    }

    /// What one park wrote.
    #[derive(Clone, Copy)]
    struct Parked {
        park: Digest,
        receipt: Digest,
    }

    impl Build {
        fn new() -> Self {
            let mut build = Self {
                task: key("t"),
                journal: Vec::new(),
                audit: Vec::new(),
            };
            build.row("attempt.start", json!({"attempt": 1}));
            build
        }

        fn row(&mut self, kind: &str, body: Value) -> Digest {
            let seq = self.journal.len() as u64;
            let event_hash = hash(&format!("journal {seq} {kind}"));
            self.journal.push(JournalEntry {
                seq,
                kind: kind.to_owned(),
                at: "2026-01-01T00:00:00.000Z".to_owned(),
                event_hash,
                body,
            });
            event_hash
        }

        fn fact(&mut self, fact: AuditFact) -> Digest {
            let seq = self.audit.len() as u64 + 10;
            let digest = hash(&format!("audit {seq}"));
            self.audit.push(AuditEntry {
                seq,
                digest,
                task: self.task.clone(),
                run_id: RUN.to_owned(),
                fact,
            });
            digest
        }

        /// A park's intent and receipt, and `releases` of its releases.
        fn park_partly(&mut self, wake: &str, grant: &str, releases: usize) -> Parked {
            let park = self.row(
                SUSPEND_KIND,
                json!({
                    "run_id": RUN, "attempt": 1, "session_id": "s-1",
                    "workspace_hash": hash("tree"), "journal_head": null,
                    "envelope": {"reserved_micro_usd": 10, "spent_micro_usd": 4, "headroom_micro_usd": 6},
                    "wake": {"on": wake}, "cause": "request", "reason": null,
                    "question": null, "grant_hash": grant,
                }),
            );
            let receipt = self.fact(AuditFact::SuspendReceipt {
                park,
                journal_seq: self.journal.len() as u64 - 1,
                session_id: Some("s-1".to_owned()),
                workspace_hash: hash("tree"),
            });
            for resource in ["process", "sandbox", "seat", "budget"]
                .into_iter()
                .take(releases)
            {
                self.fact(AuditFact::Release {
                    park,
                    receipt,
                    resource: resource.to_owned(),
                });
            }
            Parked { park, receipt }
        }

        fn park(&mut self) -> Parked {
            self.park_partly("resume", "", 4)
        }

        fn resume_row(
            &mut self,
            parked: Parked,
            mode: &str,
            tree: &str,
            approval: Option<Digest>,
        ) -> Digest {
            self.row(
                RESUME_KIND,
                json!({
                    "run_id": RUN, "park": parked.park, "receipt": parked.receipt,
                    "attempt": 2, "requested": null, "mode": mode,
                    "downgrade_reason": (mode == "cold").then_some("workspace_hash_mismatch"),
                    "workspace_hash": hash(tree), "approval_digest": approval, "grant_hash": "",
                }),
            )
        }

        fn resume_receipt(
            &mut self,
            parked: Parked,
            resume: Digest,
            mode: &str,
            tree: &str,
            approval: Option<Digest>,
        ) -> Digest {
            self.fact(AuditFact::ResumeReceipt {
                park: parked.park,
                suspend_receipt: parked.receipt,
                resume,
                mode: mode.to_owned(),
                workspace_hash: hash(tree),
                approval_digest: approval,
            })
        }

        fn resume(&mut self, parked: Parked) -> Digest {
            let resume = self.resume_row(parked, "warm", "tree", None);
            self.resume_receipt(parked, resume, "warm", "tree", None)
        }

        fn approve(&mut self, parked: Parked) -> Digest {
            let approval = hash("approval");
            self.fact(AuditFact::Approval {
                park: parked.park,
                approval,
            });
            approval
        }

        fn verify(&self) -> SuspensionReport {
            self.verify_with(&clean())
        }

        fn verify_with(&self, flags: &ChainFlags) -> SuspensionReport {
            verify_suspension(&self.task, &self.journal, &self.audit, flags).expect("a park")
        }
    }

    fn codes(report: &SuspensionReport) -> Vec<&'static str> {
        report.errors.iter().map(Problem::code).collect()
    }

    #[test]
    fn a_settled_park_verifies_warm_on_the_same_tree() {
        let mut build = Build::new();
        let parked = build.park();
        build.resume(parked);
        let report = build.verify();
        assert_eq!(report.status, Status::Verified, "{:?}", report.errors);
        assert!(report.ok && report.resumed);
        assert_eq!(report.effective_mode.as_deref(), Some("warm"));
        assert_eq!(report.workspace_match, Some(true));
        assert_eq!(report.downgrade_reason, None);
        let latest = report.latest.unwrap();
        assert_eq!(latest.released, ["process", "sandbox", "seat", "budget"]);
        assert_eq!(latest.park, parked.park);
    }

    #[test]
    fn a_cold_resume_after_an_edit_verifies_with_its_reason() {
        let mut build = Build::new();
        let parked = build.park();
        let resume = build.resume_row(parked, "cold", "edited", None);
        build.resume_receipt(parked, resume, "cold", "edited", None);
        let report = build.verify();
        assert_eq!(report.status, Status::Verified, "{:?}", report.errors);
        assert_eq!(report.workspace_match, Some(false));
        assert_eq!(
            report.downgrade_reason.as_deref(),
            Some("workspace_hash_mismatch")
        );
    }

    #[test]
    fn a_live_park_is_pending_at_every_step_before_its_resume_receipt() {
        for releases in 0..=4 {
            let mut build = Build::new();
            build.park_partly("resume", "", releases);
            let report = build.verify();
            assert_eq!(
                report.status,
                Status::Pending,
                "{releases}: {:?}",
                report.errors
            );
            assert!(report.ok && !report.resumed);
            assert_eq!(report.effective_mode, None);
        }
        // The intent alone, its receipt not yet written.
        let mut build = Build::new();
        build.park_partly("resume", "", 0);
        build.audit.clear();
        assert_eq!(build.verify().status, Status::Pending);
        // The resume row written, its receipt not yet.
        let mut build = Build::new();
        let parked = build.park();
        build.resume_row(parked, "warm", "tree", None);
        let report = build.verify();
        assert_eq!(report.status, Status::Pending);
        assert!(!report.resumed);
        assert_eq!(report.effective_mode.as_deref(), Some("warm"));
    }

    #[test]
    fn nothing_to_judge_without_a_park() {
        let build = Build::new();
        assert_eq!(
            verify_suspension(&build.task, &build.journal, &[], &clean()),
            None
        );
        let mut flags = clean();
        flags.audit_ok = false;
        let report = verify_suspension(&build.task, &build.journal, &[], &flags).unwrap();
        assert_eq!(codes(&report), ["audit_chain_broken"]);
    }

    #[test]
    fn a_receipt_citing_a_park_the_journal_lacks_fails() {
        let mut build = Build::new();
        let parked = build.park();
        build.resume(parked);
        build.fact(AuditFact::SuspendReceipt {
            park: hash("another park"),
            journal_seq: 1,
            session_id: None,
            workspace_hash: hash("tree"),
        });
        let report = build.verify();
        assert_eq!(report.status, Status::Failed);
        assert!(!report.ok);
        assert_eq!(codes(&report), ["receipt_cites_another_park"]);
    }

    #[test]
    fn a_receipt_of_another_task_or_run_citing_this_park_fails() {
        let mut build = Build::new();
        let parked = build.park();
        build.task = key("other");
        build.fact(AuditFact::SuspendReceipt {
            park: parked.park,
            journal_seq: 1,
            session_id: Some("s-1".to_owned()),
            workspace_hash: hash("tree"),
        });
        build.task = key("t");
        assert_eq!(codes(&build.verify()), ["receipt_names_another_task"]);

        let mut build = Build::new();
        let parked = build.park();
        let resume = build.resume_row(parked, "warm", "tree", None);
        build.resume_receipt(parked, resume, "warm", "tree", None);
        build.audit.last_mut().unwrap().run_id = "R-01JBBBBBBBBBBBBBBBBBBBBBBB".to_owned();
        assert_eq!(codes(&build.verify()), ["receipt_names_another_run"]);
    }

    #[test]
    fn a_receipt_that_disagrees_with_its_row_fails() {
        let mut build = Build::new();
        let parked = build.park();
        if let AuditFact::SuspendReceipt { workspace_hash, .. } = &mut build.audit[0].fact {
            *workspace_hash = hash("elsewhere");
        }
        build.resume(parked);
        assert_eq!(codes(&build.verify()), ["receipt_inconsistent"]);

        let mut build = Build::new();
        let parked = build.park();
        let resume = build.resume_row(parked, "warm", "tree", None);
        build.resume_receipt(parked, resume, "cold", "tree", None);
        let report = build.verify();
        assert_eq!(codes(&report), ["receipt_inconsistent"]);
        assert!(report.errors[0].to_string().contains("(mode)"));
    }

    #[test]
    fn a_resume_receipt_naming_a_missing_resume_row_fails() {
        let mut build = Build::new();
        let parked = build.park();
        build.resume(parked);
        build.journal.pop();
        let report = build.verify();
        assert_eq!(report.status, Status::Failed);
        assert_eq!(codes(&report), ["missing_resume_row"]);
    }

    #[test]
    fn a_park_settled_twice_fails() {
        let mut build = Build::new();
        let parked = build.park();
        build.resume(parked);
        build.row("attempt.start", json!({"attempt": 2}));
        let again = build.resume_row(parked, "cold", "tree", None);
        build.resume_receipt(parked, again, "cold", "tree", None);
        let report = build.verify();
        assert_eq!(report.status, Status::Failed);
        assert_eq!(codes(&report), ["park_settled_twice"]);
        // Two resume rows alone, the second never receipted, fail too.
        let mut build = Build::new();
        let parked = build.park();
        build.resume(parked);
        build.resume_row(parked, "cold", "tree", None);
        assert_eq!(codes(&build.verify()), ["park_settled_twice"]);
    }

    #[test]
    fn a_release_without_its_receipt_fails() {
        let mut build = Build::new();
        let parked = build.park_partly("resume", "", 0);
        build.audit.clear();
        build.fact(AuditFact::Release {
            park: parked.park,
            receipt: parked.receipt,
            resource: "process".to_owned(),
        });
        assert_eq!(codes(&build.verify()), ["release_without_receipt"]);
        // A release before the receipt it cites.
        let mut build = Build::new();
        let parked = build.park_partly("resume", "", 0);
        let receipt = build.audit.remove(0);
        build.fact(AuditFact::Release {
            park: parked.park,
            receipt: parked.receipt,
            resource: "process".to_owned(),
        });
        build.audit.push(receipt);
        assert_eq!(codes(&build.verify()), ["release_without_receipt"]);
    }

    #[test]
    fn a_resource_released_twice_fails() {
        let mut build = Build::new();
        let parked = build.park();
        build.fact(AuditFact::Release {
            park: parked.park,
            receipt: parked.receipt,
            resource: "seat".to_owned(),
        });
        assert_eq!(codes(&build.verify()), ["released_twice"]);
    }

    #[test]
    fn broken_chains_and_a_mismatched_identity_fail() {
        let mut build = Build::new();
        let parked = build.park();
        build.resume(parked);
        let mut flags = clean();
        flags.audit_ok = false;
        flags.audit_problem = Some("broken at row 3 (mac_mismatch)".to_owned());
        let report = build.verify_with(&flags);
        assert_eq!(codes(&report), ["audit_chain_broken"]);
        assert!(!report.chain_ok && report.journal_ok);
        assert!(report.errors[0].to_string().contains("mac_mismatch"));

        let mut flags = clean();
        flags.journal_ok = false;
        assert_eq!(codes(&build.verify_with(&flags)), ["journal_chain_broken"]);
        let mut flags = clean();
        flags.identity = Identity::Mismatched;
        let report = build.verify_with(&flags);
        assert_eq!(codes(&report), ["journal_identity_mismatched"]);
        assert_eq!(report.journal_identity, Identity::Mismatched);
    }

    #[test]
    fn resumes_citing_another_park_or_receipt_fail() {
        let mut build = Build::new();
        let parked = build.park();
        build.resume_row(
            Parked {
                park: hash("nowhere"),
                receipt: parked.receipt,
            },
            "warm",
            "tree",
            None,
        );
        assert_eq!(codes(&build.verify()), ["resume_cites_another_park"]);

        let mut build = Build::new();
        let parked = build.park();
        let wrong = Parked {
            park: parked.park,
            receipt: hash("another receipt"),
        };
        let resume = build.resume_row(wrong, "warm", "tree", None);
        build.resume_receipt(parked, resume, "warm", "tree", None);
        assert_eq!(codes(&build.verify()), ["resume_cites_another_receipt"]);
    }

    #[test]
    fn an_earlier_park_must_be_whole() {
        // No receipt for the first park, then a second park.
        let mut build = Build::new();
        build.park_partly("resume", "", 0);
        build.audit.clear();
        build.park();
        assert_eq!(codes(&build.verify()), ["park_without_receipt"]);
        // The first park's resume never receipted.
        let mut build = Build::new();
        let parked = build.park();
        build.resume_row(parked, "warm", "tree", None);
        build.park();
        assert_eq!(codes(&build.verify()), ["resume_without_receipt"]);
        // Two suspend receipts for one park.
        let mut build = Build::new();
        let parked = build.park();
        build.fact(AuditFact::SuspendReceipt {
            park: parked.park,
            journal_seq: 1,
            session_id: Some("s-1".to_owned()),
            workspace_hash: hash("tree"),
        });
        assert_eq!(codes(&build.verify()), ["park_receipted_twice"]);
        // Two whole parks verify; the report is about the latest.
        let mut build = Build::new();
        let first = build.park();
        build.resume(first);
        let second = build.park();
        let report = build.verify();
        assert_eq!(report.status, Status::Pending, "{:?}", report.errors);
        assert_eq!(report.parks, 2);
        assert_eq!(report.latest.unwrap().park, second.park);
    }

    #[test]
    fn an_approval_park_needs_a_bound_approval_the_chain_holds() {
        let mut build = Build::new();
        let parked = build.park_partly("approval", "", 4);
        let approval = build.approve(parked);
        let resume = build.resume_row(parked, "warm", "tree", Some(approval));
        build.resume_receipt(parked, resume, "warm", "tree", Some(approval));
        assert_eq!(build.verify().status, Status::Verified);

        let mut build = Build::new();
        let parked = build.park_partly("approval", "", 4);
        let resume = build.resume_row(parked, "warm", "tree", Some(hash("forged")));
        build.resume_receipt(parked, resume, "warm", "tree", Some(hash("forged")));
        assert_eq!(codes(&build.verify()), ["approval_not_in_audit_chain"]);

        let mut build = Build::new();
        let parked = build.park_partly("approval", "", 4);
        build.approve(parked);
        build.resume(parked);
        assert_eq!(codes(&build.verify()), ["approval_not_bound"]);
    }

    #[test]
    fn a_bound_grant_continues_with_the_same_hash() {
        let mut build = Build::new();
        let parked = build.park_partly("resume", "abc", 4);
        let receipt = build.resume(parked);
        assert_eq!(
            build.verify().status,
            Status::Pending,
            "the continuation is the last step"
        );
        build.fact(AuditFact::Grant {
            resume_receipt: receipt,
            grant_hash: "abc".to_owned(),
        });
        assert_eq!(build.verify().status, Status::Verified);

        let mut mismatched = Build::new();
        let parked = mismatched.park_partly("resume", "abc", 4);
        let receipt = mismatched.resume(parked);
        mismatched.fact(AuditFact::Grant {
            resume_receipt: receipt,
            grant_hash: "def".to_owned(),
        });
        assert_eq!(codes(&mismatched.verify()), ["grant_mismatch"]);

        let mut unknown = Build::new();
        let parked = unknown.park();
        unknown.resume(parked);
        unknown.fact(AuditFact::Grant {
            resume_receipt: hash("nothing"),
            grant_hash: String::new(),
        });
        assert_eq!(codes(&unknown.verify()), ["grant_cites_unknown_resume"]);

        let mut missing = Build::new();
        let parked = missing.park_partly("resume", "abc", 4);
        missing.resume(parked);
        missing.park();
        assert_eq!(codes(&missing.verify()), ["grant_continuation_missing"]);
    }

    #[test]
    fn a_body_that_does_not_parse_fails() {
        let mut build = Build::new();
        build.park();
        build.row(RESUME_KIND, json!({"mode": 3}));
        assert_eq!(codes(&build.verify()), ["malformed_row"]);
    }

    #[test]
    fn the_latest_unsettled_park_is_found() {
        let mut build = Build::new();
        assert_eq!(latest_unsettled(&build.journal), None);
        let first = build.park();
        assert_eq!(latest_unsettled(&build.journal).unwrap().park, first.park);
        build.resume(first);
        assert_eq!(latest_unsettled(&build.journal), None);
        let all = parks(&build.journal);
        assert_eq!(all.len(), 1);
        assert!(all[0].settled);
        let second = build.park();
        assert_eq!(latest_unsettled(&build.journal).unwrap().park, second.park);
    }

    #[test]
    fn errors_serialise_with_a_code_and_a_message() {
        let problem = Problem::SettledTwice { park_seq: 4 };
        assert_eq!(
            serde_json::to_value(&problem).unwrap(),
            json!({"code": "park_settled_twice", "message": "the park at journal row 4 was settled twice"})
        );
    }
}
