//! The checks a run must pass before it writes anything: the audit chain and
//! the ledger whole and matching their witness and seals, and every task's
//! containment one this machine can give. Each refusal is its own error
//! variant, naming the file and the fix.

use reprise_core::chain::ChainFormat;
use reprise_core::plan::{Containment, Plan};
use reprise_store::audit::read_audit;
use reprise_store::key::KeyFile;
use reprise_store::ledger::verify_ledger;
use reprise_store::state::StateDir;

use crate::error::{EngineError, Result};

/// Refuses to run on an audit chain or ledger that is torn, broken, or does
/// not match its witness and seals: a run appends to both, and appending to
/// a damaged chain would bury the damage.
pub fn check_chains(state: &StateDir, key: &KeyFile) -> Result<()> {
    let audit = read_audit(state, key)?;
    if let Some(fault) = audit.report.first_problem() {
        return Err(EngineError::AuditDamaged {
            path: state.audit_path(),
            reason: ChainFormat::Audit.reason_name(fault.reason),
            row: fault.row,
            torn_tail: audit.report.fault.is_none(),
        });
    }
    if let Some(reason) = audit.witness_problem {
        if reprise_store::creation::unfinished(state, key)?.is_some() {
            return Err(EngineError::CreationCut {
                root: state.root().to_path_buf(),
                reason,
            });
        }
        return Err(EngineError::WitnessMismatch {
            path: state.audit_path(),
            reason,
        });
    }
    let ledger = verify_ledger(state, &audit)?;
    if let Some(report) = &ledger.report
        && let Some(fault) = report.first_problem()
    {
        return Err(EngineError::LedgerDamaged {
            path: state.ledger_path(),
            reason: ChainFormat::Ledger.reason_name(fault.reason),
            row: fault.row,
            torn_tail: report.fault.is_none(),
        });
    }
    if !ledger.ok() {
        return Err(EngineError::LedgerUnsealed {
            path: state.ledger_path(),
        });
    }
    Ok(())
}

/// Refuses to run a plan one of whose task journals ends in a torn line: a
/// task taken up over it would fail on its first append (and a run once
/// finished so, its task failed for a crash and its journal never sealed).
/// Repairing is the user's call (`reprise replay repair`), never a run's.
pub fn check_journal_tails(state: &StateDir, plan: &Plan) -> Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    for task in plan.tasks() {
        let task_key = reprise_core::TaskKey::new(plan.id().clone(), task.id.clone());
        let path = state.journal_path(&task_key);
        let Ok(mut file) = std::fs::File::open(&path) else {
            continue;
        };
        let mut last = [0u8; 1];
        let torn = file.seek(SeekFrom::End(-1)).is_ok()
            && file.read_exact(&mut last).is_ok()
            && last[0] != b'\n';
        if torn {
            return Err(EngineError::JournalTorn {
                task: task_key.to_string(),
                path,
            });
        }
    }
    Ok(())
}

/// Refuses to run a plan one of whose task journals the audit chain sealed
/// but which is gone or empty: a run would start a fresh chain over it, and
/// the seal would then vouch for rows no one can read.
pub fn check_sealed_journals(state: &StateDir, key: &KeyFile, plan: &Plan) -> Result<()> {
    let audit = read_audit(state, key)?;
    for task in plan.tasks() {
        let task_key = reprise_core::TaskKey::new(plan.id().clone(), task.id.clone());
        let Some(sealed) = audit.seals_of(&task_key).iter().map(|head| head.seq).max() else {
            continue;
        };
        let path = state.journal_path(&task_key);
        let empty = std::fs::metadata(&path).map_or(true, |meta| meta.len() == 0);
        if empty {
            return Err(EngineError::SealedJournalMissing {
                task: task_key.to_string(),
                path,
                rows: sealed + 1,
            });
        }
    }
    Ok(())
}

/// The walls this machine can put around an attempt, probed once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Walls {
    /// The kernel enforces Landlock.
    pub landlock: bool,
    /// Attempts can have namespaces of their own (a private view of
    /// processes, a network of their own).
    pub namespaces: bool,
}

/// Refuses a plan with a `containment: required` task when this machine
/// cannot wall it in whole: Landlock for the file system, and namespaces of
/// its own for processes and the network (Landlock's TCP rules hold ports,
/// not hosts, and hide no process).
pub fn check_containment(plan: &Plan, walls: Walls) -> Result<()> {
    let Some(task) = plan
        .tasks()
        .iter()
        .find(|task| task.containment == Containment::Required)
    else {
        return Ok(());
    };
    let task = task.id.to_string();
    match walls {
        Walls {
            landlock: false, ..
        } => Err(EngineError::ContainmentUnavailable { task }),
        Walls {
            namespaces: false, ..
        } => Err(EngineError::NamespacesUnavailable { task }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::{Walls, check_containment};
    use crate::error::EngineError;

    fn plan(containment: &str) -> reprise_core::plan::Plan {
        let text = format!(
            "version: 1\nname: c\ndefaults: {{ agent: sim }}\ntasks:\n  - id: a\n    prompt: p\n  - id: b\n    prompt: p\n    containment: {containment}\n"
        );
        reprise_core::plan::parse_plan(&text, "plan.yaml").expect("the plan parses")
    }

    #[test]
    fn a_required_task_is_refused_without_landlock_or_namespaces() {
        let all = Walls {
            landlock: true,
            namespaces: true,
        };
        let no_landlock = Walls {
            landlock: false,
            ..all
        };
        let no_namespaces = Walls {
            namespaces: false,
            ..all
        };
        assert!(check_containment(&plan("required"), all).is_ok());
        match check_containment(&plan("required"), no_landlock) {
            Err(EngineError::ContainmentUnavailable { task }) => assert_eq!(task, "b"),
            other => panic!("expected the containment refusal, got {other:?}"),
        }
        match check_containment(&plan("required"), no_namespaces) {
            Err(EngineError::NamespacesUnavailable { task }) => assert_eq!(task, "b"),
            other => panic!("expected the namespaces refusal, got {other:?}"),
        }
        assert!(check_containment(&plan("strict"), no_landlock).is_ok());
        assert!(check_containment(&plan("strict"), no_namespaces).is_ok());
    }
}
