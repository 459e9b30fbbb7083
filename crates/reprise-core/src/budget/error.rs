//! The one error of the retry budget: a spec that does not parse, names a
//! criterion twice or one no gate declares, a ladder that cannot be walked,
//! or a budget asked for more than it holds.

use std::fmt;

/// Why a retry budget cannot be parsed, built or consumed.
///
/// Positions are byte offsets from 0 into `spec`, the text quoted in the
/// message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BudgetError {
    /// The spec does not follow `N retries, degrade: a>b>c`.
    #[error(
        "retry budget {spec:?}: unexpected {} at byte {position}; {hint}",
        describe_token(token)
    )]
    Malformed {
        spec: String,
        /// The offending token; empty when the spec ended too soon.
        token: String,
        position: usize,
        /// What would have been accepted here.
        hint: &'static str,
    },
    /// The spec names a criterion that none of the plan's gates declares.
    #[error(
        "retry budget {spec:?}: unknown criterion {name:?} at byte {position}; {}",
        describe_known(known)
    )]
    UnknownCriterion {
        spec: String,
        name: String,
        position: usize,
        /// The criteria the gates declare, sorted.
        known: Vec<String>,
    },
    /// The spec lists a criterion twice.
    #[error(
        "retry budget {spec:?}: criterion {name:?} at byte {position} is already listed at byte {first_position}; list each criterion once"
    )]
    DuplicateCriterion {
        spec: String,
        name: String,
        position: usize,
        first_position: usize,
    },
    /// Every authorised retry has been consumed.
    #[error("retry budget exhausted: every retry it authorised has been used; the task fails")]
    BudgetExhausted,
    /// A criterion at the last rung of its ladder was asked to go lower.
    #[error("criterion {name:?} is at its lowest level {level} and cannot be lowered")]
    CriterionExhausted { name: String, level: i64 },
    /// A criterion's ladder of levels cannot be walked.
    #[error("criterion {name:?} has levels {levels:?}; {problem}")]
    InvalidLevels {
        name: String,
        levels: Vec<i64>,
        problem: LevelsProblem,
    },
}

/// What is wrong with a criterion's levels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LevelsProblem {
    /// No level at all.
    Empty,
    /// A level is not lower than the one before it.
    NotDescending,
    /// A level cannot be written into a journal row (beyond +-(2^53-1)).
    BeyondSafeRange,
    /// Another gate declares the same criterion with these other levels.
    Conflicting { other: Vec<i64> },
}

impl fmt::Display for LevelsProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => f.write_str("give at least one level"),
            Self::NotDescending => {
                f.write_str("list the levels highest first, each lower than the one before")
            }
            Self::BeyondSafeRange => {
                f.write_str("keep every level within +-9007199254740991 (2^53-1)")
            }
            Self::Conflicting { other } => write!(
                f,
                "another gate declares it with levels {other:?}; give every gate of a criterion the same levels"
            ),
        }
    }
}

/// `">"` for a token, `end of spec` for the empty one.
fn describe_token(token: &str) -> String {
    if token.is_empty() {
        "end of spec".to_owned()
    } else {
        format!("{token:?}")
    }
}

/// The criteria a plan's gates declare, for the unknown-criterion message.
fn describe_known(known: &[String]) -> String {
    if known.is_empty() {
        return "no gate in the plan declares a criterion".to_owned();
    }
    let names: Vec<String> = known.iter().map(|name| format!("{name:?}")).collect();
    format!("the plan's gates declare {}", names.join(", "))
}
