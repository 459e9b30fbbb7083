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

/// Refuses a plan with a `containment: required` task when this machine
/// cannot contain it (`landlock`: whether the kernel enforces Landlock).
pub fn check_containment(plan: &Plan, landlock: bool) -> Result<()> {
    let Some(task) = plan
        .tasks()
        .iter()
        .find(|task| task.containment == Containment::Required)
    else {
        return Ok(());
    };
    if landlock {
        return Ok(());
    }
    Err(EngineError::ContainmentUnavailable {
        task: task.id.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::check_containment;
    use crate::error::EngineError;

    fn plan(containment: &str) -> reprise_core::plan::Plan {
        let text = format!(
            "version: 1\nname: c\ndefaults: {{ agent: sim }}\ntasks:\n  - id: a\n    prompt: p\n  - id: b\n    prompt: p\n    containment: {containment}\n"
        );
        reprise_core::plan::parse_plan(&text, "plan.yaml").expect("the plan parses")
    }

    #[test]
    fn a_required_task_is_refused_only_without_landlock() {
        assert!(check_containment(&plan("required"), true).is_ok());
        match check_containment(&plan("required"), false) {
            Err(EngineError::ContainmentUnavailable { task }) => assert_eq!(task, "b"),
            other => panic!("expected the containment refusal, got {other:?}"),
        }
        assert!(check_containment(&plan("strict"), false).is_ok());
    }
}
