//! Repair of a chained file (a task journal, its spine, the ledger, the
//! audit chain) whose final line was torn by a crash.
//!
//! A torn final line is not covered by any digest, so cutting it off
//! restores exactly the bytes the surviving head already commits to. Nothing
//! else is ever cut: damage before the end is corruption and is refused with
//! the file untouched; so is a final line whose bytes (or all but its last
//! byte) are a whole row that verifies, because that row was acknowledged and
//! only its newline changed; so is a cut that a seal, a decision binding or
//! the witness would not match. The removed bytes are kept beside the file
//! first, and each repair is an audit row. `reprise replay repair` runs it,
//! and so does a running task whose own journal tears mid-task (seed 000:
//! the tail is cut, logged, and the retry that follows goes cold).

use std::collections::HashSet;
use std::fs::OpenOptions;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use reprise_core::TaskKey;
use reprise_core::chain::{ChainFormat, LineCheck, Reason, check_line};
use reprise_core::digest::{AuditKey, Digest};
use reprise_core::record::Head;
use reprise_core::rows::{Kind, RepairBody};
use reprise_core::verify::{ChainReport, ChainVerifier, Fault, Identity, identity, split_tail};
use reprise_core::witness::may_append;

use crate::audit::{AuditLog, AuditSummary, read_audit};
use crate::chainfile::LockGuard;
use crate::error::{IoContext, Result, StoreError};
use crate::fsutil::{refuse_symlink, write_atomic};
use crate::key::KeyFile;
use crate::state::{StateDir, now_rfc3339};

/// Which chained file to repair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Journal(TaskKey),
    Spine(TaskKey),
    Ledger,
    Audit,
}

impl Target {
    /// The name a person reads, and the audit row kind of its repair.
    pub fn name(&self) -> String {
        match self {
            Self::Journal(task) => format!("journal {task}"),
            Self::Spine(task) => format!("spine {task}"),
            Self::Ledger => "ledger".to_owned(),
            Self::Audit => "audit chain".to_owned(),
        }
    }

    fn format(&self) -> ChainFormat {
        match self {
            Self::Journal(_) => ChainFormat::Journal,
            Self::Spine(_) => ChainFormat::Spine,
            Self::Ledger => ChainFormat::Ledger,
            Self::Audit => ChainFormat::Audit,
        }
    }

    fn path(&self, state: &StateDir) -> Result<PathBuf> {
        Ok(match self {
            Self::Journal(task) => state.existing_journal_path(task)?,
            Self::Spine(task) => {
                state.check_task_dir(task)?;
                state.spine_path(task)
            }
            Self::Ledger => state.ledger_path(),
            Self::Audit => state.audit_path(),
        })
    }

    fn repair_kind(&self) -> Kind {
        match self {
            Self::Journal(_) => Kind::JournalRepair,
            Self::Spine(_) => Kind::SpineRepair,
            Self::Ledger => Kind::LedgerRepair,
            Self::Audit => Kind::AuditRepair,
        }
    }
}

/// Why a repair was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The file is damaged before its final line.
    Corruption { row: u64, reason: Reason },
    /// The final line is damaged but ends with its newline: a crash cuts a
    /// line before its newline, so this one was written or changed whole.
    DamagedLastLine { row: u64, reason: Reason },
    /// The final line is a whole row that verifies, with its newline changed:
    /// an acknowledged row, not a torn append.
    CompleteRow { row: u64 },
    /// The cut file would not match a seal (or, for a spine, a decision
    /// binding) in the audit chain.
    SealMismatch,
    /// The cut audit chain would end before the head its witness recorded.
    WitnessMismatch,
    /// The audit chain itself does not verify: repair it first.
    AuditBroken,
}

/// What a repair did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RepairOutcome {
    /// A torn tail was copied aside and cut off.
    Repaired {
        removed_bytes: u64,
        rows: u64,
        head: Option<Head>,
        backup: PathBuf,
    },
    /// Nothing to cut (or no file at all).
    NoOp { rows: u64, head: Option<Head> },
    /// Refused; the file is untouched.
    Refused { refusal: Refusal, rows: u64 },
}

/// Cuts a torn final line off `task`'s journal, if that is all that is wrong.
pub fn repair_journal(
    state: &StateDir,
    task: &TaskKey,
    key: impl FnOnce() -> Result<KeyFile>,
) -> Result<RepairOutcome> {
    repair(state, &Target::Journal(task.clone()), &key()?)
}

/// Cuts a torn final line off `target`, if that is all that is wrong.
pub fn repair(state: &StateDir, target: &Target, key: &KeyFile) -> Result<RepairOutcome> {
    let path = target.path(state)?;
    if !path.exists() {
        return Ok(RepairOutcome::NoOp {
            rows: 0,
            head: None,
        });
    }
    let audit = read_audit(state, key)?;
    if *target != Target::Audit && !audit.ok() {
        return Ok(RepairOutcome::Refused {
            refusal: Refusal::AuditBroken,
            rows: 0,
        });
    }
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(&path)
        .map_err(|err| refuse_symlink(err, &path))?;
    // Hold the appenders' lock so no row lands while the tail is cut.
    let _lock = LockGuard::take(&file, &path)?;
    let mut bytes = Vec::new();
    (&file).read_to_end(&mut bytes).at(&path)?;

    let format = target.format();
    let audit_key: Option<&AuditKey> = (format == ChainFormat::Audit).then_some(&key.key);
    let task = match target {
        Target::Journal(task) => Some(task.task.as_str()),
        _ => None,
    };
    let seals = expected_heads(target, &audit);
    let (lines, tail) = split_tail(&bytes);
    let mut verifier = ChainVerifier::new(format, audit_key, task);
    for seal in &seals {
        verifier.watch(seal.seq);
    }
    let mut entries = HashSet::new();
    verifier.feed_observed(lines, |row, _| {
        entries.insert(row.digest);
    });
    let report = verifier.finish(tail);
    if let Some(fault) = &report.fault {
        return Ok(RepairOutcome::Refused {
            refusal: fault_refusal(fault, lines, tail),
            rows: report.rows,
        });
    }
    let Some(torn_index) = report.torn_tail else {
        return Ok(RepairOutcome::NoOp {
            rows: report.rows,
            head: report.head,
        });
    };
    // The torn line is the unterminated tail, or else the final zero-filled line.
    let cut = if tail.is_empty() {
        memchr::memrchr(b'\n', &bytes[..bytes.len() - 1]).map_or(0, |newline| newline + 1)
    } else {
        lines.len()
    };
    if is_complete_row(format, audit_key, &bytes[cut..], report.head) {
        return Ok(RepairOutcome::Refused {
            refusal: Refusal::CompleteRow { row: torn_index },
            rows: report.rows,
        });
    }
    if let Some(refusal) = mismatch(target, &audit, &seals, &report, &entries) {
        return Ok(RepairOutcome::Refused {
            refusal,
            rows: report.rows,
        });
    }
    let backup = free_backup_path(&path);
    write_atomic(&backup, &bytes[cut..], 0o644)?;
    file.set_len(cut as u64).at(&path)?;
    file.sync_all().at(&path)?;
    drop(_lock);
    let removed_bytes = (bytes.len() - cut) as u64;
    if *target != Target::Audit || report.head.is_some() {
        record_repair(state, key, target, removed_bytes, report.head)?;
    }
    Ok(RepairOutcome::Repaired {
        removed_bytes,
        rows: report.rows,
        head: report.head,
        backup,
    })
}

/// Why a chain that breaks is not repaired: a damaged last line, or
/// corruption further up.
fn fault_refusal(fault: &Fault, lines: &[u8], tail: &[u8]) -> Refusal {
    let last_line =
        tail.is_empty() && memchr::memchr_iter(b'\n', lines).count() as u64 == fault.row + 1;
    if last_line {
        Refusal::DamagedLastLine {
            row: fault.row,
            reason: fault.reason,
        }
    } else {
        Refusal::Corruption {
            row: fault.row,
            reason: fault.reason,
        }
    }
}

/// The audit row that records a repair: what was cut, and the head left.
fn record_repair(
    state: &StateDir,
    key: &KeyFile,
    target: &Target,
    removed_bytes: u64,
    head: Option<Head>,
) -> Result<()> {
    let task = match target {
        Target::Journal(task) | Target::Spine(task) => Some(task),
        Target::Ledger | Target::Audit => None,
    };
    let body = RepairBody {
        removed_bytes,
        head_seq: head.map(|head| head.seq),
        head_hash: head.map(|head| head.digest.to_hex()),
        plan: task.map(|task| task.plan.clone()),
        task_id: task.map(|task| task.task.clone()),
    };
    let body = serde_json::to_value(&body).expect("a repair body serialises");
    AuditLog::open(state, key.clone())?.append(
        target.repair_kind().as_str(),
        &now_rfc3339(),
        &body,
    )?;
    Ok(())
}

/// The heads the audit chain says the file must still hold.
fn expected_heads(target: &Target, audit: &AuditSummary) -> Vec<Head> {
    match target {
        Target::Journal(task) => audit.seals_of(task),
        Target::Ledger => audit.ledger_heads(),
        Target::Spine(_) | Target::Audit => Vec::new(),
    }
}

fn mismatch(
    target: &Target,
    audit: &AuditSummary,
    seals: &[Head],
    report: &ChainReport,
    entries: &HashSet<Digest>,
) -> Option<Refusal> {
    match target {
        Target::Journal(_) | Target::Ledger => (identity(seals, &report.watched)
            == Identity::Mismatched)
            .then_some(Refusal::SealMismatch),
        Target::Spine(task) => (!audit
            .decisions_of(task)
            .iter()
            .all(|binding| entries.contains(&binding.spine_entry_hash)))
        .then_some(Refusal::SealMismatch),
        Target::Audit => audit
            .witness
            .as_ref()
            .and_then(|witness| may_append(witness, report.head).err())
            .map(|_| Refusal::WitnessMismatch),
    }
}

/// Whether `line` (the bytes to be cut), or all of it but its last byte, is
/// a whole row that follows `head` and verifies.
fn is_complete_row(
    format: ChainFormat,
    key: Option<&AuditKey>,
    line: &[u8],
    head: Option<Head>,
) -> bool {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let (expected_seq, expected_prev) = match head {
        Some(head) => (head.seq + 1, head.digest),
        None => (0, Digest::ZERO),
    };
    let candidates = [
        Some(line),
        line.len().checked_sub(1).map(|end| &line[..end]),
    ];
    candidates.into_iter().flatten().any(|candidate| {
        matches!(check_line(format, key, candidate), LineCheck::Row(row)
            if row.digest_ok && row.decision_ok && row.seq == expected_seq && row.prev == expected_prev)
    })
}

/// `<file>.broken`, or the first `<file>.broken.N` not taken.
fn free_backup_path(file: &Path) -> PathBuf {
    let name = file
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let base = file.with_file_name(format!("{name}.broken"));
    if !base.exists() {
        return base;
    }
    (1..)
        .map(|n| file.with_file_name(format!("{name}.broken.{n}")))
        .find(|candidate| !candidate.exists())
        .expect("some backup name is free")
}

/// The error a run or an append reports when `target` needs a repair.
pub fn needs_repair(path: PathBuf, target: &str) -> StoreError {
    StoreError::TornTail {
        path,
        task: target.to_owned(),
    }
}
