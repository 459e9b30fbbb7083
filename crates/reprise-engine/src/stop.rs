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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Outcome;

    fn attempt(n: u32, judged: bool, infra_kind: Option<&str>) -> AttemptSummary {
        AttemptSummary {
            n,
            mode: "new".into(),
            session_id: None,
            outcome: if judged {
                Outcome::Judged
            } else {
                Outcome::Infra
            },
            judged,
            infra_kind: infra_kind.map(str::to_owned),
            exit_code: None,
            gates: Vec::new(),
            cost_micro_usd: None,
            elapsed_ms: 0,
            agent_us: 0,
            gates_us: 0,
        }
    }

    #[test]
    fn only_judged_attempts_are_called_not_accepted() {
        assert_eq!(
            out_of_attempts(&[attempt(1, true, None)]),
            "not accepted after 1 attempt"
        );
        assert_eq!(
            out_of_attempts(&[attempt(1, true, None), attempt(2, true, None)]),
            "not accepted after 2 attempts"
        );
        assert_eq!(
            out_of_attempts(&[
                attempt(1, false, Some("timeout")),
                attempt(2, false, Some("gate_could_not_run"))
            ]),
            "stopped after 2 attempts, none judged: each ended in gate_could_not_run, timeout (infrastructure, not the agent's work); fix that and run it again"
        );
        assert_eq!(
            out_of_attempts(&[attempt(1, true, None), attempt(2, false, Some("timeout"))]),
            "not accepted after 2 attempts; the unjudged ones ended in timeout"
        );
    }
}
