//! The run's retry budget (DESIGN.md section 10): the spec comes from
//! `--retry-budget` or the plan's `retry_budget`, is validated against the
//! criteria the plan's gates declare before anything runs, and each task
//! consumes its own copy, one step per retry; gates run at the level it says.

use reprise_core::budget::{BudgetError, BudgetSpec, RetryBudget, parse_budget_against};
use reprise_core::plan::Plan;

/// Every criterion the plan's gates declare, with its level ladder (the
/// first declaration of a name wins; `RetryBudget::new` refuses conflicts).
pub fn plan_criteria(plan: &Plan) -> Vec<(String, Vec<i64>)> {
    let mut criteria: Vec<(String, Vec<i64>)> = Vec::new();
    for gate in plan.tasks().iter().flat_map(|task| &task.gates) {
        if let Some(criterion) = &gate.criterion {
            criteria.push((criterion.name.clone(), criterion.levels.clone()));
        }
    }
    criteria
}

/// Parses and validates the budget for `plan`: `flag` (from the command line)
/// wins over the plan's own `retry_budget`. Also builds one budget, so a
/// level ladder that cannot be honoured is refused now, not mid-run.
pub fn resolve_budget(plan: &Plan, flag: Option<&str>) -> Result<Option<BudgetSpec>, BudgetError> {
    let Some(text) = flag.or(plan.retry_budget()) else {
        return Ok(None);
    };
    let criteria = plan_criteria(plan);
    let known: Vec<&str> = criteria.iter().map(|(name, _)| name.as_str()).collect();
    let spec = parse_budget_against(text, &known)?;
    RetryBudget::new(&spec, &criteria)?;
    Ok(Some(spec))
}

/// A level ladder's starting level when no budget governs the run.
pub(crate) fn first_level(levels: &[i64]) -> Option<i64> {
    levels.first().copied()
}
