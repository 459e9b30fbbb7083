//! The budget's state machine: which retry comes next, what it lowers, and
//! the level every criterion stands at.
//!
//! Retry k (counted from 1) lowers the k-th criterion of the policy one rung
//! of its ladder. A criterion already on its last rung stays there
//! ([`DegradationKind::AtFloor`]). Past the end of the policy, retries go on
//! with every level held ([`DegradationKind::PastPolicy`]); nothing ever
//! rises. When the retries are spent, nothing retries.

use serde::{Deserialize, Serialize};

use crate::canonical::MAX_SAFE_INTEGER;

use super::error::{BudgetError, LevelsProblem};
use super::spec::{BudgetSpec, validate_against};

/// One criterion and its ladder of levels, strictest first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CriterionLevels {
    name: String,
    /// Never empty, strictly decreasing, within +-(2^53-1).
    levels: Vec<i64>,
    /// The rung the criterion stands on.
    rung: usize,
}

impl CriterionLevels {
    /// A criterion standing on the first (highest) of `levels`.
    pub fn new(name: impl Into<String>, levels: Vec<i64>) -> Result<Self, BudgetError> {
        let name = name.into();
        let problem = if levels.is_empty() {
            Some(LevelsProblem::Empty)
        } else if levels
            .iter()
            .any(|level| level.unsigned_abs() > MAX_SAFE_INTEGER)
        {
            Some(LevelsProblem::BeyondSafeRange)
        } else if levels.windows(2).any(|pair| pair[1] >= pair[0]) {
            Some(LevelsProblem::NotDescending)
        } else {
            None
        };
        match problem {
            Some(problem) => Err(BudgetError::InvalidLevels {
                name,
                levels,
                problem,
            }),
            None => Ok(Self {
                name,
                levels,
                rung: 0,
            }),
        }
    }

    /// The criterion's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The level a gate of this criterion runs at now.
    pub fn level(&self) -> i64 {
        self.levels[self.rung]
    }

    /// The last rung: the lowest level the criterion can reach.
    pub fn min_level(&self) -> i64 {
        self.levels[self.levels.len() - 1]
    }

    /// The first rung: the level before any retry.
    pub fn max_level(&self) -> i64 {
        self.levels[0]
    }

    /// Whether the criterion stands on its last rung.
    pub fn is_at_floor(&self) -> bool {
        self.rung + 1 == self.levels.len()
    }

    /// Steps one rung down and returns the new level; refused on the last rung.
    pub fn lower(&mut self) -> Result<i64, BudgetError> {
        if self.is_at_floor() {
            return Err(BudgetError::CriterionExhausted {
                name: self.name.clone(),
                level: self.level(),
            });
        }
        self.rung += 1;
        Ok(self.level())
    }

    /// The criterion as a decision records it.
    pub fn snapshot(&self) -> CriterionSnapshot {
        CriterionSnapshot {
            name: self.name.clone(),
            level: self.level(),
            min_level: self.min_level(),
            max_level: self.max_level(),
        }
    }
}

/// A criterion's level as one decision saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CriterionSnapshot {
    pub name: String,
    /// The level after the decision's step.
    pub level: i64,
    /// The last rung of the ladder.
    pub min_level: i64,
    /// The first rung of the ladder.
    pub max_level: i64,
}

/// What a retry did to the criteria.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DegradationKind {
    /// The policy's criterion for this retry went one rung down.
    Lowered,
    /// The policy's criterion for this retry was already on its last rung.
    AtFloor,
    /// The retry is past the end of the policy: every level is held.
    PastPolicy,
    /// No retry: the budget is spent.
    None,
}

/// One retry decision, as consumed and as written into the `retry.budget`
/// journal row (integers only).
#[must_use]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetDecision {
    /// Whether a retry is authorised.
    pub should_retry: bool,
    /// Which retry this is, from 1; 0 when `should_retry` is false.
    pub retry_number: u32,
    /// The criterion the policy names for this retry: lowered with
    /// `Lowered`, held on its last rung with `AtFloor`; `None` otherwise.
    pub degraded_criterion: Option<String>,
    pub degradation_kind: DegradationKind,
    /// Every declared criterion after the step: the policy's in policy
    /// order, then the others in the order declared.
    pub criteria: Vec<CriterionSnapshot>,
    /// Retries consumed, counting this one.
    pub retries_used: u32,
    /// Retries still authorised after this one.
    pub retries_left: u32,
    /// One lowercase line for logs.
    pub reason: String,
}

/// A retry budget in progress: the spec, the criteria's ladders and how many
/// retries are used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryBudget {
    spec: BudgetSpec,
    /// The policy's criteria first, in policy order, then the other declared
    /// ones: the k-th retry lowers `criteria[k - 1]` while k is within the
    /// policy.
    criteria: Vec<CriterionLevels>,
    used: u32,
}

impl RetryBudget {
    /// Builds a fresh budget from a spec and the criteria the gates declare,
    /// each with its levels highest first (a gate's `levels: [80, 70, 60]`).
    ///
    /// A criterion declared twice with the same levels counts once. Refused:
    /// a spec criterion not declared, a criterion listed twice, and levels
    /// that are empty, not strictly decreasing, beyond +-(2^53-1), or
    /// different for two declarations of one criterion.
    pub fn new(spec: &BudgetSpec, criteria: &[(String, Vec<i64>)]) -> Result<Self, BudgetError> {
        let mut declared: Vec<CriterionLevels> = Vec::with_capacity(criteria.len());
        for (name, levels) in criteria {
            let ladder = CriterionLevels::new(name.clone(), levels.clone())?;
            match declared.iter().find(|known| known.name == *name) {
                Some(known) if known.levels == ladder.levels => {}
                Some(known) => {
                    return Err(BudgetError::InvalidLevels {
                        name: ladder.name,
                        levels: ladder.levels,
                        problem: LevelsProblem::Conflicting {
                            other: known.levels.clone(),
                        },
                    });
                }
                None => declared.push(ladder),
            }
        }
        let known: Vec<&str> = declared.iter().map(CriterionLevels::name).collect();
        validate_against(spec, &known)?;
        let mut ordered = Vec::with_capacity(declared.len());
        for name in &spec.criteria {
            if let Some(index) = declared.iter().position(|ladder| ladder.name == *name) {
                ordered.push(declared.remove(index));
            }
        }
        ordered.append(&mut declared);
        Ok(Self {
            spec: spec.clone(),
            criteria: ordered,
            used: 0,
        })
    }

    /// The spec the budget follows.
    pub fn spec(&self) -> &BudgetSpec {
        &self.spec
    }

    /// Retries still authorised.
    pub fn retries_left(&self) -> u32 {
        self.spec.retries - self.used
    }

    /// The level a gate of `criterion` runs at now; `None` if undeclared.
    pub fn level(&self, criterion: &str) -> Option<i64> {
        self.criteria
            .iter()
            .find(|ladder| ladder.name == criterion)
            .map(CriterionLevels::level)
    }

    /// The decision the next [`consume`](Self::consume) will return, without
    /// advancing; with the budget spent, a decision not to retry.
    pub fn peek(&self) -> BudgetDecision {
        self.plan().0
    }

    /// Takes the next retry: returns its decision and applies its step.
    pub fn consume(&mut self) -> Result<BudgetDecision, BudgetError> {
        if self.retries_left() == 0 {
            return Err(BudgetError::BudgetExhausted);
        }
        let (decision, lowered) = self.plan();
        if let Some(index) = lowered {
            self.criteria[index].lower()?;
        }
        self.used += 1;
        Ok(decision)
    }

    /// The next decision, and the index of the criterion it lowers.
    fn plan(&self) -> (BudgetDecision, Option<usize>) {
        let total = self.spec.retries;
        let snapshots = || -> Vec<CriterionSnapshot> {
            self.criteria
                .iter()
                .map(CriterionLevels::snapshot)
                .collect()
        };
        if self.retries_left() == 0 {
            let reason = if total == 0 {
                "the retry budget authorises no retries".to_owned()
            } else {
                format!("all {total} retries of the budget are used")
            };
            let decision = BudgetDecision {
                should_retry: false,
                retry_number: 0,
                degraded_criterion: None,
                degradation_kind: DegradationKind::None,
                criteria: snapshots(),
                retries_used: self.used,
                retries_left: 0,
                reason,
            };
            return (decision, None);
        }
        let retry = self.used + 1;
        let index = usize::try_from(self.used).unwrap_or(usize::MAX);
        let policy_len = self.spec.criteria.len();
        let mut criteria = snapshots();
        let (kind, criterion, lowered, reason) = if index >= policy_len {
            let reason = if policy_len == 0 {
                format!("retry {retry} of {total}: the budget names no criteria; levels held")
            } else {
                format!(
                    "retry {retry} of {total} is past the policy's {policy_len} criteria; levels held"
                )
            };
            (DegradationKind::PastPolicy, None, None, reason)
        } else {
            let ladder = &self.criteria[index];
            let name = ladder.name.clone();
            if ladder.is_at_floor() {
                let reason = format!(
                    "retry {retry} of {total}: {name:?} is already at its lowest level {}; levels held",
                    ladder.level()
                );
                (DegradationKind::AtFloor, Some(name), None, reason)
            } else {
                let next = ladder.levels[ladder.rung + 1];
                let reason = format!(
                    "retry {retry} of {total} lowers {name:?} from {} to {next}",
                    ladder.level()
                );
                criteria[index].level = next;
                (DegradationKind::Lowered, Some(name), Some(index), reason)
            }
        };
        let decision = BudgetDecision {
            should_retry: true,
            retry_number: retry,
            degraded_criterion: criterion,
            degradation_kind: kind,
            criteria,
            retries_used: retry,
            retries_left: total - retry,
            reason,
        };
        (decision, lowered)
    }
}
