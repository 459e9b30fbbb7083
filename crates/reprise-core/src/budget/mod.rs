//! The retry budget: how many retries a task gets, and which gate criteria
//! each retry lowers (DESIGN.md section 10).
//!
//! An identical retry tends to fail the way the attempt before it did. A
//! budget such as `3 retries, degrade: coverage>tests>style` instead holds
//! each retry to a slightly easier bar, in an order the user chose: retry k
//! lowers the k-th criterion one rung of its ladder, and past the end of the
//! list retries go on with every level held. The budget is consumed by the
//! gates themselves: a gate that declares `criterion: coverage` and
//! `levels: [80, 70, 60]` runs at the level [`RetryBudget::level`] reports,
//! so a spec that parsed but was never read cannot happen silently.
//!
//! [`parse_budget`] checks a spec before anything runs and
//! [`validate_against`] checks it against the criteria a plan's gates
//! declare; [`RetryBudget`] is the state machine, whose
//! [`consume`](RetryBudget::consume) advances and whose
//! [`peek`](RetryBudget::peek) does not. Everything here is pure.

mod error;
mod spec;
mod state;
#[cfg(test)]
mod tests;

pub use error::{BudgetError, LevelsProblem};
pub use spec::{BudgetSpec, parse_budget, parse_budget_against, validate_against};
pub use state::{BudgetDecision, CriterionLevels, CriterionSnapshot, DegradationKind, RetryBudget};

/// The environment variable that carries the canonical spec to every child.
pub const ENV_VAR: &str = "REPRISE_RETRY_BUDGET_SPEC";
