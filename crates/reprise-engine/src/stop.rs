//! Why a task that ran out of attempts stopped, in words that do not claim
//! more than happened: "not accepted" only when a gate or the agent's exit
//! judged the work; attempts that no gate judged are named by what ended
//! them (a gate that could not run, a timeout, ...).

use std::collections::BTreeSet;

use crate::state::AttemptSummary;

/// The reason of a task that used all `attempts` it was allowed.
pub(crate) fn out_of_attempts(attempts: &[AttemptSummary]) -> String {
    let count = attempts.len();
    let noun = if count == 1 { "attempt" } else { "attempts" };
    let unjudged: BTreeSet<&str> = attempts
        .iter()
        .filter(|attempt| !attempt.judged)
        .map(|attempt| {
            attempt
                .infra_kind
                .as_deref()
                .unwrap_or("infrastructure failure")
        })
        .collect();
    let last_judged = attempts.last().is_none_or(|attempt| attempt.judged);
    if attempts.iter().all(|attempt| !attempt.judged) && !attempts.is_empty() {
        let kinds: Vec<&str> = unjudged.into_iter().collect();
        format!(
            "stopped after {count} {noun}, none judged: each ended in {} (infrastructure, not the agent's work); fix that and run it again",
            kinds.join(", ")
        )
    } else if last_judged {
        format!("not accepted after {count} {noun}")
    } else {
        let kinds: Vec<&str> = unjudged.into_iter().collect();
        format!(
            "not accepted after {count} {noun}; the unjudged ones ended in {}",
            kinds.join(", ")
        )
    }
}
