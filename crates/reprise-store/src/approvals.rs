//! Approvals of parks that wait for a person (`--until approval`), and the
//! markers that say which resume used them (DESIGN.md section 9).
//!
//! An approval is a small file, `approvals/<plan>/<task>/<park-hex>.json`
//! (0600), signed with the audit key: under containment the agent cannot
//! read the key, so it cannot approve its own park. Its digest (over the
//! whole signed file) is bound twice: by a `task.approval` audit row written
//! before the file, and by the resume receipt that uses it. The
//! `<park-hex>.resumed` marker beside it names the resume receipt, so one
//! approval settles one park once.

use std::path::PathBuf;

use reprise_core::canonical::{EncodeError, to_canonical_vec};
use reprise_core::digest::{Digest, tagged_hmac, tagged_sha256};
use reprise_core::rows::Kind;
use reprise_core::{PlanId, TaskId, TaskKey};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::audit::{AuditLog, read_audit};
use crate::error::StoreError;
use crate::fsutil::{create_dir_all_durable, read_no_follow, write_atomic};
use crate::key::KeyFile;
use crate::parks::read_parks;
use crate::state::StateDir;

/// Audit row kind binding an approval's digest to its park.
pub const APPROVAL_KIND: &str = Kind::TaskApproval.as_str();
/// Version of the approval file and of the marker.
pub const APPROVAL_VERSION: u64 = 1;
/// Domain tag of an approval's `mac`.
pub const APPROVAL_MAC_TAG: &[u8] = b"reprise/approval/v1\n";
/// Domain tag of an approval's digest (over the whole signed file).
pub const APPROVAL_DIGEST_TAG: &[u8] = b"reprise/approval-digest/v1\n";

pub type Result<T, E = ApprovalError> = std::result::Result<T, E>;

/// Why an approval could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum ApprovalError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Encode(#[from] EncodeError),
    #[error(
        "task {task} has no park waiting to be settled; nothing was written: `reprise task list-suspended` lists the parks"
    )]
    NoPark { task: String },
    #[error("the park {park} of task {task} is already settled by a resume; nothing was written")]
    Settled { task: String, park: String },
    #[error(
        "the park {park} of task {task} is already approved ({path}); nothing was written: resume it with `reprise task resume {task}`"
    )]
    AlreadyApproved {
        task: String,
        park: String,
        path: PathBuf,
    },
    #[error(
        "the park evidence of task {task} does not verify ({code}); nothing was written: run `reprise audit verify-suspension {task}`"
    )]
    Unverified { task: String, code: &'static str },
    #[error(
        "approval {path} does not verify ({reason}); it was changed or made without the audit key: remove it and approve again"
    )]
    Tampered { path: PathBuf, reason: &'static str },
    #[error(
        "{path} has version {found}; this reprise reads version {APPROVAL_VERSION}: upgrade reprise"
    )]
    NewerVersion { path: PathBuf, found: u64 },
    #[error(
        "the park of task {task} waits for approval; nothing was resumed: run `reprise approve {task}` first"
    )]
    NotApproved { task: String },
    #[error(
        "{path} names another resume receipt ({found}); the park was settled by another resume"
    )]
    ResumedElsewhere { path: PathBuf, found: String },
}

/// What the approval signs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Unsigned {
    v: u64,
    plan: PlanId,
    task: TaskId,
    run: String,
    park: Digest,
    note: Option<String>,
    approved_at: String,
    approver: String,
}

/// A signed approval, as the file holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Approval {
    pub v: u64,
    pub plan: PlanId,
    pub task: TaskId,
    pub run: String,
    /// The park's identity: its `task.suspend` row's event hash.
    pub park: Digest,
    pub note: Option<String>,
    pub approved_at: String,
    /// `$USER`, else the uid.
    pub approver: String,
    /// HMAC-SHA256 with the audit key over the JCS bytes of the rest.
    pub mac: Digest,
}

impl Approval {
    fn unsigned(&self) -> Unsigned {
        Unsigned {
            v: self.v,
            plan: self.plan.clone(),
            task: self.task.clone(),
            run: self.run.clone(),
            park: self.park,
            note: self.note.clone(),
            approved_at: self.approved_at.clone(),
            approver: self.approver.clone(),
        }
    }

    fn mac_of(key: &KeyFile, unsigned: &Unsigned) -> Result<Digest> {
        Ok(tagged_hmac(
            key,
            APPROVAL_MAC_TAG,
            &[&to_canonical_vec(unsigned)?],
        ))
    }

    /// The file's bytes: its JCS encoding and a newline.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut bytes =
            to_canonical_vec(self).expect("an approval holds only strings and small integers");
        bytes.push(b'\n');
        bytes
    }

    /// The digest the audit chain and the resume receipt bind: SHA-256 over
    /// the whole signed file's JCS bytes, the mac included.
    pub fn digest(&self) -> Digest {
        let bytes =
            to_canonical_vec(self).expect("an approval holds only strings and small integers");
        tagged_sha256(APPROVAL_DIGEST_TAG, &[&bytes])
    }

    /// The task it approves.
    pub fn task_key(&self) -> TaskKey {
        TaskKey::new(self.plan.clone(), self.task.clone())
    }
}

pub use reprise_core::rows::ApprovalBinding;

/// `approvals/<plan>/<task>/`.
pub fn approvals_dir(state: &StateDir, task: &TaskKey) -> PathBuf {
    state
        .root()
        .join("approvals")
        .join(task.plan.as_str())
        .join(task.task.as_str())
}

/// `approvals/<plan>/<task>/<park-hex>.json`.
pub fn approval_path(state: &StateDir, task: &TaskKey, park: Digest) -> PathBuf {
    approvals_dir(state, task).join(format!("{}.json", park.to_hex()))
}

/// `approvals/<plan>/<task>/<park-hex>.resumed`.
pub fn resumed_path(state: &StateDir, task: &TaskKey, park: Digest) -> PathBuf {
    approvals_dir(state, task).join(format!("{}.resumed", park.to_hex()))
}

/// The version a JSON file declares, refused when newer than this build's.
fn check_version(path: &std::path::Path, value: &Value) -> Result<()> {
    match value.get("v").and_then(Value::as_u64) {
        Some(found) if found > APPROVAL_VERSION => Err(ApprovalError::NewerVersion {
            path: path.to_path_buf(),
            found,
        }),
        _ => Ok(()),
    }
}

/// Reads and verifies the approval of `task`'s park `park`. `None` when
/// there is none; a file that does not verify is an error, never `None`.
pub fn read_approval(
    state: &StateDir,
    key: &KeyFile,
    task: &TaskKey,
    park: Digest,
) -> Result<Option<Approval>> {
    let path = approval_path(state, task, park);
    let Some(bytes) = read_no_follow(&path)? else {
        return Ok(None);
    };
    let tampered = |reason| ApprovalError::Tampered {
        path: path.clone(),
        reason,
    };
    let value: Value = serde_json::from_slice(&bytes).map_err(|_| tampered("not json"))?;
    check_version(&path, &value)?;
    let approval: Approval =
        serde_json::from_value(value).map_err(|_| tampered("not an approval"))?;
    if approval.v != APPROVAL_VERSION {
        return Err(tampered("unknown version"));
    }
    if Approval::mac_of(key, &approval.unsigned())? != approval.mac {
        return Err(tampered("mac_mismatch"));
    }
    if approval.park != park || &approval.task_key() != task {
        return Err(tampered("names another park"));
    }
    Ok(Some(approval))
}

/// The approval digest a resume of `park` binds: the verified approval's
/// when there is one; refused when the park waits for approval
/// (`waits_for_approval`) and has none, or when its marker says another
/// resume settled it. For the engine's resume, before it writes anything.
pub fn approval_for_resume(
    state: &StateDir,
    key: &KeyFile,
    task: &TaskKey,
    park: Digest,
    waits_for_approval: bool,
) -> Result<Option<Digest>> {
    let audit = read_audit(state, key)?;
    if settled_marker(state, task, park, &audit)?.is_some() {
        return Err(ApprovalError::Settled {
            task: task.to_string(),
            park: park.to_hex(),
        });
    }
    match read_approval(state, key, task, park)? {
        Some(approval) => Ok(Some(approval.digest())),
        None if waits_for_approval => Err(ApprovalError::NotApproved {
            task: task.to_string(),
        }),
        None => Ok(None),
    }
}

/// Who approves: `$USER`, else `uid <n>`.
pub fn approver(user: Option<String>) -> String {
    user.filter(|user| !user.is_empty())
        .unwrap_or_else(|| format!("uid {}", rustix::process::getuid().as_raw()))
}

/// Approves `task`'s latest unsettled park: refuses (writing nothing) when
/// there is none, when it is already settled or approved, or when its
/// evidence does not verify; else appends the `task.approval` audit row
/// (the intent, binding the digest) and then writes the signed file.
pub fn approve(
    state: &StateDir,
    key: &KeyFile,
    task: &TaskKey,
    note: Option<String>,
    approver: String,
    at: &str,
) -> Result<Approval> {
    let audit = read_audit(state, key)?;
    let parks = read_parks(state, task, &audit)?;
    let name = task.to_string();
    let Some(park) = parks.latest_unsettled() else {
        return Err(match parks.latest_park() {
            Some(settled) => ApprovalError::Settled {
                task: name,
                park: settled.park.to_hex(),
            },
            None => ApprovalError::NoPark { task: name },
        });
    };
    if settled_marker(state, task, park.park, &audit)?.is_some() {
        return Err(ApprovalError::Settled {
            task: name,
            park: park.park.to_hex(),
        });
    }
    if let Some(report) = parks.verify()
        && let Some(problem) = report.errors.first()
    {
        return Err(ApprovalError::Unverified {
            task: name,
            code: problem.code(),
        });
    }
    let path = approval_path(state, task, park.park);
    if read_no_follow(&path)?.is_some() {
        return Err(ApprovalError::AlreadyApproved {
            task: name,
            park: park.park.to_hex(),
            path,
        });
    }
    let run = park
        .body
        .get("run_id")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let unsigned = Unsigned {
        v: APPROVAL_VERSION,
        plan: task.plan.clone(),
        task: task.task.clone(),
        run: run.clone(),
        park: park.park,
        note,
        approved_at: at.to_owned(),
        approver,
    };
    let mac = Approval::mac_of(key, &unsigned)?;
    let approval = Approval {
        v: unsigned.v,
        plan: unsigned.plan,
        task: unsigned.task,
        run: unsigned.run,
        park: unsigned.park,
        note: unsigned.note,
        approved_at: unsigned.approved_at,
        approver: unsigned.approver,
        mac,
    };
    let binding = ApprovalBinding {
        plan: task.plan.clone(),
        task_id: task.task.clone(),
        run_id: run,
        park: park.park,
        approval: approval.digest(),
    };
    let mut log = AuditLog::open(state, key.clone())?;
    log.append_row(at, &binding)?;
    create_dir_all_durable(&approvals_dir(state, task), 0o700)?;
    write_atomic(&path, &approval.to_bytes(), 0o600)?;
    Ok(approval)
}

/// The `.resumed` marker's body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Resumed {
    v: u64,
    park: Digest,
    resume_receipt: Digest,
}

/// Writes the marker that `park` was settled by the resume whose receipt is
/// `resume_receipt`. Writing the same marker again is a no-op; a marker
/// naming another receipt is an error, unless `replace_unbound` says the
/// caller checked that the audit chain binds no marker of this park (a
/// planted or unreadable one, which settled nothing, is then replaced).
pub fn mark_resumed(
    state: &StateDir,
    task: &TaskKey,
    park: Digest,
    resume_receipt: Digest,
    replace_unbound: bool,
) -> Result<()> {
    let path = resumed_path(state, task, park);
    // A marker that does not parse, or names a receipt the chain does not
    // hold, settled nothing: it is replaced.
    match resumed_marker(state, task, park) {
        Ok(Some(found)) if found == resume_receipt => return Ok(()),
        Ok(Some(found)) if !replace_unbound => {
            return Err(ApprovalError::ResumedElsewhere {
                path,
                found: found.to_hex(),
            });
        }
        Err(err) if !replace_unbound => return Err(err),
        _ => {}
    }
    let mut bytes = to_canonical_vec(&Resumed {
        v: APPROVAL_VERSION,
        park,
        resume_receipt,
    })?;
    bytes.push(b'\n');
    create_dir_all_durable(&approvals_dir(state, task), 0o700)?;
    write_atomic(&path, &bytes, 0o600)?;
    Ok(())
}

/// The resume receipt the `.resumed` marker of `park` names, when the audit
/// chain holds that receipt for that park: a marker the chain does not bind
/// (planted, or copied from elsewhere) settles nothing.
pub fn settled_marker(
    state: &StateDir,
    task: &TaskKey,
    park: Digest,
    audit: &crate::audit::AuditSummary,
) -> Result<Option<Digest>> {
    let Some(receipt) = resumed_marker(state, task, park)? else {
        return Ok(None);
    };
    Ok(marker_bound(audit, task, park, receipt).then_some(receipt))
}

/// Whether `audit` holds `receipt` as a resume receipt of `task`'s `park`.
fn marker_bound(
    audit: &crate::audit::AuditSummary,
    task: &TaskKey,
    park: Digest,
    receipt: Digest,
) -> bool {
    audit.suspensions_of(task).into_iter().any(|row| {
        row.digest == receipt
            && matches!(&row.row, crate::suspension::SuspensionAudit::ResumeReceipt(bound) if bound.park == park)
    })
}

/// The resume receipt the `.resumed` marker of `park` names, if any.
pub fn resumed_marker(state: &StateDir, task: &TaskKey, park: Digest) -> Result<Option<Digest>> {
    let path = resumed_path(state, task, park);
    let Some(bytes) = read_no_follow(&path)? else {
        return Ok(None);
    };
    let value: Value = serde_json::from_slice(&bytes).map_err(|_| ApprovalError::Tampered {
        path: path.clone(),
        reason: "not json",
    })?;
    check_version(&path, &value)?;
    let marker: Resumed = serde_json::from_value(value).map_err(|_| ApprovalError::Tampered {
        path: path.clone(),
        reason: "not a resume marker",
    })?;
    if marker.park != park {
        return Err(ApprovalError::Tampered {
            path,
            reason: "names another park",
        });
    }
    Ok(Some(marker.resume_receipt))
}
