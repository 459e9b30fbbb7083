//! Repair of a journal whose final line was torn by a crash.
//!
//! A torn final line is not covered by any `event_hash`, so cutting it off
//! restores exactly the bytes the surviving head already commits to. Nothing
//! else is ever cut: damage before the end is corruption and is refused with
//! the file untouched, as is a cut that a seal would not match. The removed
//! bytes are kept beside the journal first. Nothing runs this automatically.

use std::fs::OpenOptions;
use std::io::Read;
use std::path::PathBuf;

use reprise_core::TaskKey;
use reprise_core::chain::{ChainFormat, Reason};
use reprise_core::digest::AuditKey;
use reprise_core::record::Head;
use reprise_core::verify::{ChainVerifier, Identity, identity, split_tail};
use serde_json::json;

use crate::audit::{AuditLog, read_audit};
use crate::chainfile::LockGuard;
use crate::error::{IoContext, Result};
use crate::fsutil::write_atomic;
use crate::state::{StateDir, now_rfc3339};

/// Why a repair was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The journal is damaged before its final line.
    Corruption { row: u64, reason: Reason },
    /// The cut journal would not match a seal in the audit chain.
    SealMismatch,
}

/// What `repair_journal` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RepairOutcome {
    /// A torn tail was copied aside and cut off.
    Repaired {
        removed_bytes: u64,
        rows: u64,
        head: Option<Head>,
        backup: PathBuf,
    },
    /// Nothing to cut.
    NoOp { rows: u64, head: Option<Head> },
    /// Refused; the journal is untouched.
    Refused { refusal: Refusal, rows: u64 },
}

/// Cuts a torn final line off `task`'s journal, if that is all that is wrong.
pub fn repair_journal(
    state: &StateDir,
    task: &TaskKey,
    key: impl FnOnce() -> Result<AuditKey>,
) -> Result<RepairOutcome> {
    let path = state.existing_journal_path(task)?;
    let key = if state.audit_path().is_file() {
        Some(key()?)
    } else {
        None
    };
    let seals = match &key {
        Some(key) => read_audit(state, key)?.seals_of(task),
        None => Vec::new(),
    };
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .at(&path)?;
    // Hold the appenders' lock so no row lands while the tail is cut.
    let _lock = LockGuard::take(&file, &path)?;
    let mut bytes = Vec::new();
    (&file).read_to_end(&mut bytes).at(&path)?;

    let (lines, tail) = split_tail(&bytes);
    let mut verifier = ChainVerifier::new(ChainFormat::Journal, None, Some(task.task.as_str()));
    for seal in &seals {
        verifier.watch(seal.seq);
    }
    verifier.feed(lines);
    let report = verifier.finish(tail);
    if let Some(fault) = report.fault {
        return Ok(RepairOutcome::Refused {
            refusal: Refusal::Corruption {
                row: fault.row,
                reason: fault.reason,
            },
            rows: report.rows,
        });
    }
    if report.torn_tail.is_none() {
        return Ok(RepairOutcome::NoOp {
            rows: report.rows,
            head: report.head,
        });
    }
    if identity(&seals, &report.watched) == Identity::Mismatched {
        return Ok(RepairOutcome::Refused {
            refusal: Refusal::SealMismatch,
            rows: report.rows,
        });
    }
    // The torn line is the unterminated tail, or else the final zero-filled line.
    let cut = if tail.is_empty() {
        memchr::memrchr(b'\n', &bytes[..bytes.len() - 1]).map_or(0, |newline| newline + 1)
    } else {
        lines.len()
    };
    let backup = free_backup_path(&path);
    write_atomic(&backup, &bytes[cut..], 0o644)?;
    file.set_len(cut as u64).at(&path)?;
    file.sync_all().at(&path)?;
    let removed_bytes = (bytes.len() - cut) as u64;
    if let Some(key) = key {
        let mut audit = AuditLog::open(state, key)?;
        audit.append(
            "journal.repair",
            &now_rfc3339(),
            &json!({
                "plan": task.plan.as_str(),
                "task_id": task.task.as_str(),
                "removed_bytes": removed_bytes,
                "head_seq": report.head.map(|head| head.seq),
                "head_event_hash": report.head.map(|head| head.digest.to_hex()),
            }),
        )?;
    }
    Ok(RepairOutcome::Repaired {
        removed_bytes,
        rows: report.rows,
        head: report.head,
        backup,
    })
}

/// `journal.jsonl.broken`, or the first `journal.jsonl.broken.N` not taken.
fn free_backup_path(journal: &std::path::Path) -> PathBuf {
    let base = journal.with_extension("jsonl.broken");
    if !base.exists() {
        return base;
    }
    (1..)
        .map(|n| journal.with_extension(format!("jsonl.broken.{n}")))
        .find(|candidate| !candidate.exists())
        .expect("some backup name is free")
}
