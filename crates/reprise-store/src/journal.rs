//! Task journals and spines: appending rows, and verifying a journal against
//! the seals the audit chain holds for it.

use std::path::Path;
use std::sync::Arc;

use reprise_core::TaskKey;
use reprise_core::chain::ChainFormat;
use reprise_core::digest::Digest;
use reprise_core::record::{Head, encode_journal_row, encode_spine_row};
use reprise_core::rows::{Chain, Kind, RowBody};
use reprise_core::verify::{ChainReport, Identity, identity};
use serde_json::Value;

use crate::audit::{AuditSummary, read_audit};
use crate::chainfile::{ChainFile, read_chain};
use crate::error::{Result, StoreError};
use crate::io::{IoSeam, RealIo};
use crate::key::KeyFile;
use crate::state::StateDir;

/// A task's journal, open for appending.
#[derive(Debug)]
pub struct Journal {
    task: TaskKey,
    file: ChainFile,
    /// Told each appended row's exact bytes once it is durable (a fleet
    /// worker ships them to the coordinator).
    tap: Option<RowTap>,
}

/// What hears each row a journal appends, as the bytes stored (the line
/// with its newline).
pub struct RowTap(Box<dyn Hear>);

/// A row tap's function: hears a row's stored bytes.
trait Hear: FnMut(&[u8]) + Send {}

impl<F: FnMut(&[u8]) + Send> Hear for F {}

impl RowTap {
    pub fn new(tap: impl FnMut(&[u8]) + Send + 'static) -> Self {
        Self(Box::new(tap))
    }
}

impl std::fmt::Debug for RowTap {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("RowTap")
    }
}

impl Journal {
    pub fn open(state: &StateDir, task: &TaskKey) -> Result<Self> {
        Self::open_with(state, task, Arc::new(RealIo))
    }

    /// Opens through a given I/O seam (tests inject faults here).
    pub fn open_with(state: &StateDir, task: &TaskKey, io: Arc<dyn IoSeam>) -> Result<Self> {
        state.check_task_dir(task)?;
        let file = ChainFile::open(
            &state.journal_path(task),
            ChainFormat::Journal,
            Some(task.task.as_str()),
            None,
            io,
        )?;
        Ok(Self {
            task: task.clone(),
            file,
            tap: None,
        })
    }

    /// From now on, `tap` hears every row this handle appends.
    pub fn tap(&mut self, tap: RowTap) {
        self.tap = Some(tap);
    }

    /// Appends one row durably and returns the new head. The tap hears the
    /// row once it is durable, while the journal's lock is still held: rows
    /// several handles append (a task's threads) reach it in the journal's
    /// own order.
    pub fn append(&mut self, kind: &str, at: &str, body: &Value) -> Result<Head> {
        let task = &self.task;
        let written = std::cell::RefCell::new(None);
        let tap = self.tap.as_mut();
        let head = self.file.append_then(
            |previous| {
                let row = encode_journal_row(previous, &task.task, kind, at, body)?;
                *written.borrow_mut() = Some(row.line.clone());
                Ok(row)
            },
            |_| {
                if let (Some(tap), Some(line)) = (tap, written.borrow().as_ref()) {
                    (tap.0)(line);
                }
                Ok(())
            },
        )?;
        crate::io::crash_point(task.task.as_str(), kind);
        Ok(head)
    }

    /// Appends a row another host wrote to its copy of this journal, byte
    /// for byte: refused (nothing written) unless it is a whole row of this
    /// task whose digest matches its bytes and which links to this
    /// journal's head. `line` ends with its newline.
    pub fn append_shipped(&mut self, line: &[u8]) -> Result<Head> {
        let task = self.task.task.as_str().to_owned();
        let path = self.file.path().to_path_buf();
        self.file.append(|previous| {
            let head = shipped_row_head(&task, previous, line)
                .map_err(|reason| StoreError::ShippedRowRefused { path, reason })?;
            Ok(reprise_core::record::EncodedRow {
                line: line.to_vec(),
                head,
            })
        })
    }

    /// Appends one row of the typed schema (`reprise_core::rows`): the
    /// kind its body type names, the body as that type serialises.
    pub fn append_row<B: RowBody>(&mut self, at: &str, body: &B) -> Result<Head> {
        debug_assert_eq!(B::CHAIN, Chain::Journal, "{} is not a journal row", B::KIND);
        self.append(B::KIND.as_str(), at, &body.to_body())
    }

    /// The journal's last row, if it has one.
    pub fn head(&mut self) -> Result<Option<Head>> {
        self.file.head()
    }

    /// The plan's task this journal belongs to.
    pub fn task(&self) -> &TaskKey {
        &self.task
    }

    pub fn path(&self) -> &Path {
        self.file.path()
    }

    /// See `ChainFile::mark`.
    pub fn mark(&mut self) -> Result<crate::Fingerprint> {
        self.file.mark()
    }

    /// See `ChainFile::foreign_writes_seen`.
    pub fn foreign_writes_seen(&self) -> Result<bool> {
        self.file.foreign_writes_seen()
    }

    /// See `ChainFile::only_own_appends_since_mark`.
    pub fn only_own_appends_since_mark(&self) -> Result<bool> {
        self.file.only_own_appends_since_mark()
    }
}

/// The head a shipped journal row of `task` makes on top of `previous`, or
/// why it is refused.
fn shipped_row_head(
    task: &str,
    previous: Option<Head>,
    line: &[u8],
) -> std::result::Result<Head, &'static str> {
    use reprise_core::chain::{LineCheck, check_line};
    let Some(stored) = line.strip_suffix(b"\n").filter(|row| !row.contains(&b'\n')) else {
        return Err("not one whole line");
    };
    let row = match check_line(ChainFormat::Journal, None, stored) {
        LineCheck::Row(row) => row,
        LineCheck::NotObject => return Err("not a journal row"),
        LineCheck::Fault(reason) => return Err(ChainFormat::Journal.reason_name(reason)),
    };
    use reprise_core::chain::Reason;
    let (seq, prev) = previous.map_or((0, Digest::ZERO), |head| (head.seq + 1, head.digest));
    let refused = if !row.digest_ok {
        Some(Reason::DigestMismatch)
    } else if row.task_id.as_deref() != Some(task) {
        Some(Reason::ForeignTask)
    } else if row.seq != seq {
        Some(Reason::SeqGap)
    } else if row.prev != prev {
        Some(Reason::PrevLinkBreak)
    } else {
        None
    };
    match refused {
        Some(reason) => Err(ChainFormat::Journal.reason_name(reason)),
        None => Ok(Head {
            seq: row.seq,
            digest: row.digest,
        }),
    }
}

/// A task's spine of sealed decisions. The file is created by the first
/// decision, so a task that never retries has none.
#[derive(Debug)]
pub struct Spine {
    path: std::path::PathBuf,
    task: TaskKey,
    file: Option<ChainFile>,
}

impl Spine {
    pub fn open(state: &StateDir, task: &TaskKey) -> Result<Self> {
        state.check_task_dir(task)?;
        Ok(Self {
            path: state.spine_path(task),
            task: task.clone(),
            file: None,
        })
    }

    /// Seals `decision`, recorded by journal row `sealed_at`.
    pub fn append(&mut self, kind: &str, decision: &Value, sealed_at: u64) -> Result<Head> {
        let file = match &mut self.file {
            Some(file) => file,
            empty => empty.insert(ChainFile::open(
                &self.path,
                ChainFormat::Spine,
                Some(self.task.task.as_str()),
                None,
                Arc::new(RealIo),
            )?),
        };
        file.append(|previous| Ok(encode_spine_row(previous, kind, decision, sealed_at)?))
    }

    /// Opens (creating) the spine file now, so a decision whose spine cannot
    /// be written fails before its journal row is.
    pub fn ready(&mut self) -> Result<()> {
        if self.file.is_none() {
            self.file = Some(ChainFile::open(
                &self.path,
                ChainFormat::Spine,
                Some(self.task.task.as_str()),
                None,
                Arc::new(RealIo),
            )?);
        }
        Ok(())
    }
}

/// Journal (and spine) row kind of a retry decision.
pub const DECISION_KIND: &str = Kind::RetryDecision.as_str();

/// Everything `journal verify` reports about one task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalVerification {
    pub task: TaskKey,
    /// The journal is not there, though the audit chain seals it: a failed
    /// check, never "no journal" (the chain and identity are then empty).
    pub missing: bool,
    pub chain: ChainReport,
    pub identity: Identity,
    /// The highest sealed row, if any seal exists.
    pub sealed_through: Option<u64>,
    /// Rows after the last seal.
    pub unsealed_rows: u64,
    /// The spine's own chain, when the task has one.
    pub spine: Option<ChainReport>,
    /// The spine and the journal's decision rows against the audit chain's
    /// bindings: `mismatched` when a bound row is missing from either.
    pub decisions: Identity,
    /// Journal `retry.decision` rows (their event hashes) that a binding names.
    pub bound_decision_rows: Vec<Digest>,
    /// The audit chain that supplied the seals and bindings.
    pub audit: AuditSummary,
}

impl JournalVerification {
    /// Chain verifies, coverage complete, identity not mismatched, the spine
    /// verifies and matches its bindings, and the audit chain verifies and
    /// agrees with its witness.
    pub fn ok(&self) -> bool {
        !self.missing
            && self.chain.first_problem().is_none()
            && self.identity != Identity::Mismatched
            && self.decisions != Identity::Mismatched
            && self
                .spine
                .as_ref()
                .is_none_or(|spine| spine.first_problem().is_none())
            && self.audit.ok()
    }
}

/// Verifies a task's spine; `None` when the task has made no decision yet.
pub fn verify_spine(state: &StateDir, task: &TaskKey) -> Result<Option<ChainReport>> {
    Ok(read_spine(state, task)?.map(|(report, _)| report))
}

/// The spine's report and the entry hashes of its verified prefix.
fn read_spine(state: &StateDir, task: &TaskKey) -> Result<Option<(ChainReport, Vec<Digest>)>> {
    state.check_task_dir(task)?;
    let path = state.spine_path(task);
    if !path.exists() {
        return Ok(None);
    }
    let mut entries = Vec::new();
    let report = read_chain(&path, ChainFormat::Spine, None, None, &[], |row, _| {
        entries.push(row.digest);
    })?;
    Ok(Some((report, entries)))
}

/// Verifies a task's journal, its spine, its seals and the decisions the
/// audit chain binds. The key is loaded lazily.
pub fn verify_journal(
    state: &StateDir,
    task: &TaskKey,
    key: impl FnOnce() -> Result<KeyFile>,
) -> Result<JournalVerification> {
    let path = match state.existing_journal_path(task) {
        Ok(path) => path,
        Err(err @ StoreError::NoJournal { .. }) => {
            let audit = read_audit(state, &key()?)?;
            return missing_or(err, task, audit);
        }
        Err(err) => return Err(err),
    };
    let audit = read_audit(state, &key()?)?;
    verify_journal_against(state, task, &path, audit)
}

/// The verification of a journal that is not there: failed when the audit
/// chain seals it (it existed, and was deleted or moved), else `err`, the
/// "no journal" of a task that never started.
fn missing_or(err: StoreError, task: &TaskKey, audit: AuditSummary) -> Result<JournalVerification> {
    let seals = audit.seals_of(task);
    let Some(sealed_through) = seals.iter().map(|seal| seal.seq).max() else {
        return Err(err);
    };
    Ok(JournalVerification {
        task: task.clone(),
        missing: true,
        chain: ChainReport::default(),
        identity: Identity::Mismatched,
        sealed_through: Some(sealed_through),
        unsealed_rows: 0,
        spine: None,
        decisions: Identity::Unverifiable,
        bound_decision_rows: Vec::new(),
        audit,
    })
}

/// The journals the audit chain seals that are not in the state directory
/// (deleted or moved), each with the highest row sealed, in key order.
pub fn missing_sealed_journals(
    state: &StateDir,
    audit: &AuditSummary,
) -> Result<Vec<(TaskKey, u64)>> {
    let mut sealed: std::collections::BTreeMap<TaskKey, u64> = std::collections::BTreeMap::new();
    for seal in &audit.seals {
        let plan = match &seal.plan {
            Some(plan) => plan.clone(),
            None => match audit.migrated.get(&seal.task_id) {
                Some(plan) => plan.clone(),
                None => continue,
            },
        };
        let seq = sealed
            .entry(TaskKey::new(plan, seal.task_id.clone()))
            .or_insert(seal.seq);
        *seq = (*seq).max(seal.seq);
    }
    let mut missing = Vec::new();
    for (task, seq) in sealed {
        let path = state.journal_path(&task);
        match std::fs::symlink_metadata(&path) {
            Ok(_) => {}
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => missing.push((task, seq)),
            Err(err) => return Err(StoreError::Io { path, source: err }),
        }
    }
    Ok(missing)
}

/// As [`verify_journal`], against an audit chain already read (a caller
/// verifying many journals reads and checks the audit chain once).
pub fn verify_journal_with(
    state: &StateDir,
    task: &TaskKey,
    audit: &AuditSummary,
) -> Result<JournalVerification> {
    let path = match state.existing_journal_path(task) {
        Ok(path) => path,
        Err(err @ StoreError::NoJournal { .. }) => return missing_or(err, task, audit.clone()),
        Err(err) => return Err(err),
    };
    verify_journal_against(state, task, &path, audit.clone())
}

fn verify_journal_against(
    state: &StateDir,
    task: &TaskKey,
    path: &std::path::Path,
    audit: AuditSummary,
) -> Result<JournalVerification> {
    let seals: Vec<Head> = audit.seals_of(task);
    let watch: Vec<u64> = seals.iter().map(|seal| seal.seq).collect();
    let mut decision_rows = std::collections::HashSet::new();
    let chain = read_chain(
        path,
        ChainFormat::Journal,
        None,
        Some(task.task.as_str()),
        &watch,
        |row, _| {
            if row.kind == DECISION_KIND {
                decision_rows.insert(row.digest);
            }
        },
    )?;
    let spine_read = read_spine(state, task)?;
    let entries: std::collections::HashSet<Digest> = spine_read
        .as_ref()
        .map(|(_, entries)| entries.iter().copied().collect())
        .unwrap_or_default();
    let bindings = audit.decisions_of(task);
    let decisions = if bindings.is_empty() {
        Identity::Unverifiable
    } else if bindings.iter().all(|binding| {
        entries.contains(&binding.spine_entry_hash)
            && decision_rows.contains(&binding.journal_event_hash)
    }) {
        Identity::Verified
    } else {
        Identity::Mismatched
    };
    let bound_decision_rows = bindings
        .iter()
        .map(|binding| binding.journal_event_hash)
        .filter(|hash| decision_rows.contains(hash))
        .collect();
    let sealed_through = seals.iter().map(|seal| seal.seq).max();
    let last_seq = chain.head.map(|head| head.seq);
    let unsealed_rows = match (last_seq, sealed_through) {
        (Some(last), Some(sealed)) => last.saturating_sub(sealed),
        (Some(last), None) => last + 1,
        (None, _) => 0,
    };
    Ok(JournalVerification {
        task: task.clone(),
        missing: false,
        identity: identity(&seals, &chain.watched),
        chain,
        sealed_through,
        unsealed_rows,
        spine: spine_read.map(|(report, _)| report),
        decisions,
        bound_decision_rows,
        audit,
    })
}
