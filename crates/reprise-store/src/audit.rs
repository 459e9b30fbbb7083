//! The HMAC audit chain of the whole state directory, the seals of task
//! journal heads and of the ledger it holds, the decisions and approvals it
//! binds, and its witness beside the key.

use std::collections::BTreeMap;
use std::sync::Arc;

use reprise_core::chain::{ChainFormat, LineCheck, check_line};
use reprise_core::digest::Digest;
use reprise_core::record::{Head, SEAL_KIND, SealBody, encode_audit_row};
use reprise_core::rows::{ApprovalBinding, Chain, Kind, RowBody, StateAdopt, StateInit};
use reprise_core::verify::{ChainReport, Identity, identity};
use reprise_core::witness::{
    ChainFacts, LEDGER_SEAL_KIND, LedgerSealBody, STATE_ADOPT_KIND, STATE_INIT_KIND, StateInitBody,
    Witness, WitnessReason, compare, may_append,
};
use reprise_core::{PlanId, TaskId, TaskKey};
use serde_json::Value;

use crate::chainfile::{ChainFile, read_chain};
use crate::error::{IoContext, Result, StoreError};
use crate::io::{IoSeam, RealIo};
use crate::key::KeyFile;
use crate::state::{LAYOUT_VERSION, StateDir};
use crate::witness::{WitnessRead, read_witness, write_witness};

/// Audit row kind binding a retry decision to its journal and spine rows.
pub const DECISION_BINDING_KIND: &str = Kind::RetryCheckpointDecision.as_str();

/// The audit chain, open for appending.
#[derive(Debug)]
pub struct AuditLog {
    key: KeyFile,
    state: StateDir,
    file: ChainFile,
}

impl AuditLog {
    pub fn open(state: &StateDir, key: KeyFile) -> Result<Self> {
        Self::open_with(state, key, Arc::new(RealIo))
    }

    pub fn open_with(state: &StateDir, key: KeyFile, io: Arc<dyn IoSeam>) -> Result<Self> {
        let file = ChainFile::open(
            &state.audit_path(),
            ChainFormat::Audit,
            None,
            Some(key.key.clone()),
            io,
        )?;
        Ok(Self {
            key,
            state: state.clone(),
            file,
        })
    }

    /// Appends one row durably and returns the new head (its `mac` is the
    /// receipt hash other records cite). The row must build on the head the
    /// witness recorded (a cut or restored chain is refused, never extended),
    /// and the witness is replaced with the new head before the lock is let go.
    /// Appends one row of the typed schema (`reprise_core::rows`): the
    /// kind its body type names, the body as that type serialises.
    pub fn append_row<B: RowBody>(&mut self, at: &str, body: &B) -> Result<Head> {
        debug_assert_eq!(B::CHAIN, Chain::Audit, "{} is not an audit row", B::KIND);
        self.append(B::KIND.as_str(), at, &body.to_body())
    }

    pub fn append(&mut self, kind: &str, at: &str, body: &Value) -> Result<Head> {
        let Self { key, state, file } = self;
        let chain = state.audit_path();
        let witness = std::cell::RefCell::new(None::<Witness>);
        file.append_then(
            |previous| {
                let found = match read_witness(key, state)? {
                    WitnessRead::Valid(found) => {
                        may_append(&found, previous).map_err(|reason| StoreError::Witness {
                            chain: chain.clone(),
                            reason,
                        })?;
                        found
                    }
                    WitnessRead::Missing if kind == STATE_ADOPT_KIND && previous.is_some() => {
                        // `adopt_witness` verified the chain before asking.
                        let adopt: StateInitBody = serde_json::from_value(body.clone())
                            .expect("state.adopt rows carry the state id");
                        Witness {
                            v: reprise_core::witness::WITNESS_VERSION,
                            state_id: adopt.state_id,
                            state_dir: state.root().display().to_string(),
                            audit: previous.expect("checked"),
                            ledger: None,
                        }
                    }
                    WitnessRead::Missing if kind == STATE_INIT_KIND && previous.is_none() => {
                        let init: StateInitBody = serde_json::from_value(body.clone())
                            .expect("state.init rows carry the state id");
                        Witness {
                            v: reprise_core::witness::WITNESS_VERSION,
                            state_id: init.state_id,
                            state_dir: state.root().display().to_string(),
                            audit: Head {
                                seq: 0,
                                digest: Digest::ZERO,
                            },
                            ledger: None,
                        }
                    }
                    WitnessRead::Missing => {
                        return Err(StoreError::Witness {
                            chain: chain.clone(),
                            reason: WitnessReason::WitnessMissing,
                        });
                    }
                    WitnessRead::Invalid(_) => {
                        return Err(StoreError::Witness {
                            chain: chain.clone(),
                            reason: WitnessReason::WitnessInvalid,
                        });
                    }
                };
                *witness.borrow_mut() = Some(found);
                Ok(encode_audit_row(previous, key, kind, at, body)?)
            },
            |head| {
                let mut next = witness.borrow_mut().take().expect("set by encode");
                next.audit = head;
                if kind == LEDGER_SEAL_KIND
                    && let Ok(seal) = serde_json::from_value::<LedgerSealBody>(body.clone())
                {
                    next.ledger = Some(Head {
                        seq: seal.seq,
                        digest: seal.event_hash,
                    });
                }
                write_witness(
                    key,
                    state,
                    &next,
                    kind == STATE_INIT_KIND || kind == STATE_ADOPT_KIND,
                )
            },
        )
    }
}

impl AuditLog {
    /// Checks, without writing, that an append would be accepted now: the
    /// chain's end is whole and the witness verifies and is not ahead of it.
    /// A decision checks this before its journal row, so a chain that cannot
    /// take the binding row leaves no row that nothing binds.
    pub fn ready(&mut self) -> Result<()> {
        let head = self.file.head()?;
        let reason = match read_witness(&self.key, &self.state)? {
            WitnessRead::Valid(witness) => may_append(&witness, head).err(),
            WitnessRead::Missing => Some(WitnessReason::WitnessMissing),
            WitnessRead::Invalid(_) => Some(WitnessReason::WitnessInvalid),
        };
        match reason {
            Some(reason) => Err(StoreError::Witness {
                chain: self.state.audit_path(),
                reason,
            }),
            None => Ok(()),
        }
    }
}

/// What `init_audit` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Initialised {
    /// The id minted for the new state directory.
    pub state_id: String,
    /// Where the witness of an earlier state directory at the same path was
    /// moved (it was removed and is being created anew): kept, never
    /// overwritten, and the caller says so.
    pub superseded_witness: Option<std::path::PathBuf>,
}

/// Writes the audit chain's first row, `state.init`, binding a newly minted
/// state directory id, and the witness beside the key. Call it only for a
/// state directory just created, by a process that no other creates beside
/// (tests and fixtures); the CLI creates through `creation::create_state_dir`.
pub fn init_audit(state: &StateDir, key: KeyFile, at: &str) -> Result<Initialised> {
    let state_id = mint_state_id()?;
    let witness = crate::witness::witness_path(&key, state);
    let superseded_witness = if witness.exists() {
        Some(crate::witness::supersede_witness(&witness)?.0)
    } else {
        None
    };
    let body = StateInit(StateInitBody {
        layout: LAYOUT_VERSION,
        state_id: state_id.clone(),
    });
    AuditLog::open(state, key)?.append_row(at, &body)?;
    Ok(Initialised {
        state_id,
        superseded_witness,
    })
}

/// A new state directory id: `S-` and 32 random hex digits.
pub(crate) fn mint_state_id() -> Result<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|err| StoreError::Random(err.to_string()))?;
    Ok(format!(
        "S-{}",
        bytes
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect::<String>()
    ))
}

/// What an adoption found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Adopted {
    pub state_id: String,
    /// Rows of the chain the new witness vouches for from now on.
    pub rows: u64,
}

/// Writes a witness for a state directory whose audit chain has none (made
/// before witnesses, or moved), after verifying the whole chain with the
/// key: a `state.adopt` row records it. `Ok(None)` when there is nothing to
/// adopt (a witness exists, or there is no chain). What was removed before
/// the adoption cannot be detected by it; the caller says so.
pub fn adopt_witness(state: &StateDir, key: &KeyFile, at: &str) -> Result<Option<Adopted>> {
    if !matches!(read_witness(key, state)?, WitnessRead::Missing) || !state.audit_path().is_file() {
        return Ok(None);
    }
    let summary = read_audit(state, key)?;
    if let Some(fault) = summary.report.first_problem() {
        return Err(StoreError::Unsealable {
            path: state.audit_path(),
            row: fault.row,
            reason: ChainFormat::Audit.reason_name(fault.reason),
        });
    }
    let Some(head) = summary.report.head else {
        return Ok(None);
    };
    let state_id = match first_state_id(state, key)? {
        Some(id) => id,
        None => mint_state_id()?,
    };
    let body = StateAdopt(StateInitBody {
        layout: LAYOUT_VERSION,
        state_id: state_id.clone(),
    });
    AuditLog::open(state, key.clone())?.append_row(at, &body)?;
    Ok(Some(Adopted {
        state_id,
        rows: head.seq + 1,
    }))
}

/// The state id the chain's first row (or an adoption) names, if any.
pub(crate) fn first_state_id(state: &StateDir, key: &KeyFile) -> Result<Option<String>> {
    let mut found = None;
    if !state.audit_path().is_file() {
        return Ok(None);
    }
    read_chain(
        &state.audit_path(),
        ChainFormat::Audit,
        Some(key),
        None,
        &[],
        |row, line| {
            if found.is_none()
                && ((row.kind == STATE_INIT_KIND && row.seq == 0) || row.kind == STATE_ADOPT_KIND)
            {
                found = serde_json::from_slice::<StateInitBody>(&line[row.payload.clone()])
                    .ok()
                    .map(|body| body.state_id);
            }
        },
    )?;
    Ok(found)
}

/// Refuses a key that does not sign this state directory: the first row of
/// its audit chain does not verify with it, and no witness made with it
/// exists. (A first row damaged under the right key is left to
/// verification, which reports it at its row.)
pub fn check_key_binding(state: &StateDir, key: &KeyFile) -> Result<()> {
    check_key_binding_at(state.root(), key)
}

/// As [`check_key_binding`], for the state directory at `root` whatever its
/// layout (an older one is checked before it is migrated).
pub fn check_key_binding_at(root: &std::path::Path, key: &KeyFile) -> Result<()> {
    let state = StateDir::at(root);
    let state = &state;
    let path = state.audit_path();
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(err) => return Err(err).at(path),
    };
    let Some(first) = bytes
        .split(|&byte| byte == b'\n')
        .next()
        .filter(|line| !line.is_empty())
    else {
        return Ok(());
    };
    let signed = matches!(
        check_line(ChainFormat::Audit, Some(key), first),
        LineCheck::Row(row) if row.digest_ok
    );
    if signed || matches!(read_witness(key, state)?, WitnessRead::Valid(_)) {
        return Ok(());
    }
    Err(StoreError::KeyMismatch {
        path: key.path.clone(),
        state: state.root().to_path_buf(),
    })
}

/// Seals the head of `task`'s journal into the audit chain. The journal must
/// verify in full first: a seal vouches for what it covers.
pub fn seal_journal(
    state: &StateDir,
    audit: &mut AuditLog,
    task: &TaskKey,
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
    task: &TaskKey,
    at: &str,
    prior: &[Head],
) -> Result<SealBody> {
    let path = state.existing_journal_path(task)?;
    let watch: Vec<u64> = prior.iter().map(|seal| seal.seq).collect();
    let chain = read_chain(
        &path,
        ChainFormat::Journal,
        None,
        Some(task.task.as_str()),
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
        plan: Some(task.plan.clone()),
        task_id: task.task.clone(),
        seq: head.seq,
        event_hash: head.digest,
    };
    audit.append_row(at, &body)?;
    Ok(body)
}

/// Audit row kind recording a layout migration: which plan each task's
/// journal went to, so seals written before task ids were per plan (they
/// name no plan) still vouch for the journal they sealed.
pub const MIGRATE_KIND: &str = Kind::StateMigrate.as_str();

pub use reprise_core::rows::DecisionBinding;

/// The audit chain's verification, its agreement with the witness, and what
/// its verified prefix holds: seals, ledger seals, decision bindings.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AuditSummary {
    pub report: ChainReport,
    /// The chain file exists.
    pub present: bool,
    /// Why the chain disagrees with its witness, if it does.
    pub witness_problem: Option<WitnessReason>,
    /// The witness, when it verified with the key.
    pub witness: Option<Witness>,
    pub seals: Vec<SealBody>,
    pub ledger_seals: Vec<LedgerSealBody>,
    pub decisions: Vec<DecisionBinding>,
    /// From `state.migrate` rows: the plan each layout-1 task journal went to.
    pub migrated: BTreeMap<TaskId, PlanId>,
    /// Park receipts, releases, resume receipts and grant continuations.
    pub suspensions: Vec<crate::suspension::AuditSuspensionRow>,
    /// `task.approval` rows: each approval's digest bound to its park.
    pub approvals: Vec<ApprovalRow>,
}

/// One `task.approval` row of the audit chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalRow {
    pub seq: u64,
    pub digest: Digest,
    pub body: ApprovalBinding,
}

impl AuditSummary {
    /// The chain verifies, is whole, and agrees with its witness.
    pub fn ok(&self) -> bool {
        self.report.first_problem().is_none() && self.witness_problem.is_none()
    }

    /// Whether a row naming `task_id` and `plan` (or no plan, before layout
    /// 2) belongs to `task`.
    fn names(&self, task: &TaskKey, task_id: &TaskId, plan: Option<&PlanId>) -> bool {
        task_id == &task.task
            && match plan {
                Some(plan) => plan == &task.plan,
                None => self.migrated.get(&task.task) == Some(&task.plan),
            }
    }

    /// The decisions bound for `task`.
    pub fn decisions_of(&self, task: &TaskKey) -> Vec<&DecisionBinding> {
        self.decisions
            .iter()
            .filter(|binding| self.names(task, &binding.task_id, binding.plan.as_ref()))
            .collect()
    }

    /// The suspension rows about `task`, in chain order.
    pub fn suspensions_of(&self, task: &TaskKey) -> Vec<&crate::suspension::AuditSuspensionRow> {
        self.suspensions
            .iter()
            .filter(|row| &row.row.task() == task)
            .collect()
    }

    /// The ledger heads sealed, the witness's last among them.
    pub fn ledger_heads(&self) -> Vec<Head> {
        let mut heads: Vec<Head> = self
            .ledger_seals
            .iter()
            .map(|seal| Head {
                seq: seal.seq,
                digest: seal.event_hash,
            })
            .collect();
        if let Some(ledger) = self.witness.as_ref().and_then(|witness| witness.ledger) {
            heads.push(ledger);
        }
        heads
    }

    /// The seals of one plan's task: those naming the plan, and those written
    /// before seals named plans, for the plan the migration gave the task.
    pub fn seals_of(&self, task: &TaskKey) -> Vec<Head> {
        self.seals
            .iter()
            .filter(|seal| self.names(task, &seal.task_id, seal.plan.as_ref()))
            .map(|seal| Head {
                seq: seal.seq,
                digest: seal.event_hash,
            })
            .collect()
    }
}

/// Verifies the audit chain, compares it with its witness, and collects
/// what its verified prefix holds. A missing chain is a summary, not an error.
pub fn read_audit(state: &StateDir, key: &KeyFile) -> Result<AuditSummary> {
    let witness = match read_witness(key, state)? {
        WitnessRead::Valid(witness) => Ok(Some(witness)),
        WitnessRead::Missing => Ok(None),
        WitnessRead::Invalid(_) => Err(WitnessReason::WitnessInvalid),
    };
    let path = state.audit_path();
    let mut summary = AuditSummary::default();
    let mut state_id = None;
    if path.exists() {
        summary.present = true;
        let watch: Vec<u64> = witness
            .as_ref()
            .ok()
            .and_then(|witness| witness.as_ref().map(|witness| witness.audit.seq))
            .into_iter()
            .collect();
        summary.report = read_chain(
            &path,
            ChainFormat::Audit,
            Some(key),
            None,
            &watch,
            |row, line| {
                let payload = &line[row.payload.clone()];
                match row.kind.as_ref() {
                    kind if kind == SEAL_KIND => {
                        if let Ok(seal) = serde_json::from_slice::<SealBody>(payload) {
                            summary.seals.push(seal);
                        }
                    }
                    kind if kind == LEDGER_SEAL_KIND => {
                        if let Ok(seal) = serde_json::from_slice::<LedgerSealBody>(payload) {
                            summary.ledger_seals.push(seal);
                        }
                    }
                    kind if kind == DECISION_BINDING_KIND => {
                        if let Ok(binding) = serde_json::from_slice::<DecisionBinding>(payload) {
                            summary.decisions.push(binding);
                        }
                    }
                    kind if kind == Kind::TaskApproval.as_str() => {
                        if let Ok(body) = serde_json::from_slice(payload) {
                            summary.approvals.push(ApprovalRow {
                                seq: row.seq,
                                digest: row.digest,
                                body,
                            });
                        }
                    }
                    kind if kind.starts_with("task.") => {
                        if let Some(parsed) =
                            crate::suspension::SuspensionAudit::parse(kind, payload)
                        {
                            summary
                                .suspensions
                                .push(crate::suspension::AuditSuspensionRow {
                                    seq: row.seq,
                                    digest: row.digest,
                                    row: parsed,
                                });
                        }
                    }
                    kind if kind == MIGRATE_KIND => {
                        if let Ok(body) = serde_json::from_slice::<MigrateBody>(payload) {
                            for moved in body.tasks {
                                summary.migrated.insert(moved.task_id, moved.plan);
                            }
                        }
                    }
                    kind if kind == STATE_INIT_KIND && row.seq == 0 => {
                        state_id = serde_json::from_slice::<StateInitBody>(payload)
                            .ok()
                            .map(|init| init.state_id);
                    }
                    // A chain from before witnesses gets its id on adoption.
                    kind if kind == STATE_ADOPT_KIND && state_id.is_none() => {
                        state_id = serde_json::from_slice::<StateInitBody>(payload)
                            .ok()
                            .map(|adopt| adopt.state_id);
                    }
                    _ => {}
                }
            },
        )?;
    }
    summary.witness_problem = match &witness {
        Err(reason) => Some(*reason),
        Ok(found) => {
            let facts = ChainFacts {
                rows: summary.report.head.map_or(0, |head| head.seq + 1),
                head: summary.report.head,
                state_id,
                at_witnessed_seq: found.as_ref().and_then(|witness| {
                    summary
                        .report
                        .watched
                        .get(&witness.audit.seq)
                        .copied()
                        .flatten()
                }),
            };
            compare(found.as_ref(), &facts)
        }
    };
    summary.witness = witness.ok().flatten();
    Ok(summary)
}

/// Seals the ledger's head `head` (a row this process just appended) into
/// the audit chain, and so into the witness.
pub fn seal_ledger(audit: &mut AuditLog, head: Head, at: &str) -> Result<()> {
    let body = LedgerSealBody {
        seq: head.seq,
        event_hash: head.digest,
    };
    audit.append_row(at, &body)?;
    Ok(())
}

pub use reprise_core::rows::{MigrateBody, MigratedTask};

/// Migrates a layout-1 state directory (see `state::migrate_layout_1`) and
/// records what moved in the audit chain. `None` when there was nothing to do.
pub fn migrate_state_dir(
    root: &std::path::Path,
    key: &KeyFile,
    at: &str,
) -> Result<Option<crate::state::Migration>> {
    let Some(migration) = crate::state::migrate_layout_1(root)? else {
        return Ok(None);
    };
    let state = StateDir::open(root)?;
    let body = MigrateBody {
        from: 1,
        to: crate::state::LAYOUT_VERSION,
        tasks: migration
            .tasks
            .iter()
            .map(|key| MigratedTask {
                task_id: key.task.clone(),
                plan: key.plan.clone(),
            })
            .collect(),
    };
    if state.audit_path().is_file() {
        // Layout 1 came before witnesses: adopt the chain first, so the
        // migration row (and every row after it) is witnessed.
        adopt_witness(&state, key, at)?;
        let mut audit = AuditLog::open(&state, key.clone())?;
        audit.append_row(at, &body)?;
    }
    Ok(Some(migration))
}
