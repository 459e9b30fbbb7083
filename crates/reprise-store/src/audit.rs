//! The HMAC audit chain of the whole state directory, and the seals of task
//! journal heads it holds.

use std::collections::BTreeMap;
use std::sync::Arc;

use reprise_core::chain::ChainFormat;
use reprise_core::digest::AuditKey;
use reprise_core::record::{Head, SEAL_KIND, SealBody, encode_audit_row};
use reprise_core::verify::{ChainReport, Identity, identity};
use reprise_core::{PlanId, TaskId, TaskKey};
use serde::{Deserialize, Serialize};
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
    let value = serde_json::to_value(&body).expect("seal body serialises");
    audit.append(SEAL_KIND, at, &value)?;
    Ok(body)
}

/// Audit row kind recording a layout migration: which plan each task's
/// journal went to, so seals written before task ids were per plan (they
/// name no plan) still vouch for the journal they sealed.
pub const MIGRATE_KIND: &str = "state.migrate";

/// The audit chain's verification and the seals in its verified prefix.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AuditSummary {
    pub report: ChainReport,
    pub seals: Vec<SealBody>,
    /// From `state.migrate` rows: the plan each layout-1 task journal went to.
    pub migrated: BTreeMap<TaskId, PlanId>,
}

impl AuditSummary {
    /// The seals of one plan's task: those naming the plan, and those written
    /// before seals named plans, for the plan the migration gave the task.
    pub fn seals_of(&self, task: &TaskKey) -> Vec<Head> {
        self.seals
            .iter()
            .filter(|seal| {
                seal.task_id == task.task
                    && match &seal.plan {
                        Some(plan) => plan == &task.plan,
                        None => self.migrated.get(&task.task) == Some(&task.plan),
                    }
            })
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
    let mut migrated = BTreeMap::new();
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
            if row.kind == MIGRATE_KIND
                && let Ok(body) = serde_json::from_slice::<MigrateBody>(&line[row.payload.clone()])
            {
                for moved in body.tasks {
                    migrated.insert(moved.task_id, moved.plan);
                }
            }
        },
    )?;
    Ok(AuditSummary {
        report,
        seals,
        migrated,
    })
}

/// The body of a `state.migrate` row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigrateBody {
    pub from: u64,
    pub to: u64,
    pub tasks: Vec<MigratedTask>,
}

/// One journal a migration moved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigratedTask {
    pub task_id: TaskId,
    pub plan: PlanId,
}

/// Migrates a layout-1 state directory (see `state::migrate_layout_1`) and
/// records what moved in the audit chain. `None` when there was nothing to do.
pub fn migrate_state_dir(
    root: &std::path::Path,
    key: &AuditKey,
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
        let mut audit = AuditLog::open(&state, key.clone())?;
        audit.append(
            MIGRATE_KIND,
            at,
            &serde_json::to_value(&body).expect("migration body serialises"),
        )?;
    }
    Ok(Some(migration))
}
