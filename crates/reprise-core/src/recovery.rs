//! What a failed attempt means for the task, and what to do about it
//! (DESIGN.md section 7): one pure diagnosis from the attempt's outcome, the
//! anomalies seen while it ran, and how often the same judged failure has
//! now been seen in a row.
//!
//! | severity   | examples                                              | recovery                           |
//! |------------|-------------------------------------------------------|------------------------------------|
//! | transient  | timeout, rate limit, network, session gone, a gate that could not run | retry, files as they are |
//! | corrupting | writes outside the allowed paths, a gate that crashed, a gate's own file changed | roll back to the checkpoint, retry |
//! | fatal      | auth, missing binary, budget exhausted, the same judged failure N times | roll back, block the task |
//!
//! A judged failure is none of these: it retries by the task's retry policy
//! (and its rollback rule).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::outcome::{AttemptOutcome, InfraKind};

/// The same judged failure this many times in a row blocks the task.
pub const REPEATED_FAILURE_LIMIT: u32 = 3;

/// How bad a failed attempt is for the task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// A verdict on the work: retried by the retry policy.
    Judged,
    /// The machinery failed; the next attempt may work as things are.
    Transient,
    /// The tree may be left inconsistent: roll it back first.
    Corrupting,
    /// Retrying cannot help: roll back and block the task.
    Fatal,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Judged => "judged",
            Self::Transient => "transient",
            Self::Corrupting => "corrupting",
            Self::Fatal => "fatal",
        }
    }
}

/// Something seen while an attempt ran that makes its tree suspect.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Anomaly {
    /// Paths changed outside the task's `allowed_paths`.
    WriteOutsideAllowedPaths { paths: Vec<String> },
    /// A gate ended by a signal, midway through its work.
    GateCrashed { gate: String },
    /// A gate ran past its `timeout` and was stopped midway through its work.
    GateTimedOut { gate: String, timeout_ms: u64 },
    /// The agent printed more than `max_output_bytes` and was killed midway.
    OutputLimit { limit_bytes: u64 },
    /// The agent printed nothing for `idle_timeout` and was killed.
    IdleTimeout { idle_ms: u64 },
    /// The agent changed a file a gate is judged by (its program, or what
    /// its `protect` names): the gates ran on the base's copy, and their
    /// verdict does not count.
    ProtectedFileChanged {
        gates: Vec<String>,
        paths: Vec<String>,
    },
}

impl Anomaly {
    pub fn kind(&self) -> &'static str {
        match self {
            Self::WriteOutsideAllowedPaths { .. } => "write_outside_allowed_paths",
            Self::GateCrashed { .. } => "gate_crashed",
            Self::GateTimedOut { .. } => "gate_timed_out",
            Self::OutputLimit { .. } => "output_limit",
            Self::IdleTimeout { .. } => "idle_timeout",
            Self::ProtectedFileChanged { .. } => "protected_file_changed",
        }
    }

    /// Whether the tree is suspect after it: a process killed while it
    /// poured out output may have been writing too. An idle one was not
    /// doing anything: like a timeout, its files are kept for the retry.
    pub fn is_corrupting(&self) -> bool {
        !matches!(self, Self::IdleTimeout { .. })
    }
}

/// What recovery does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// Retry by the task's retry policy and rollback rule.
    RetryByPolicy,
    /// Retry with the files as they are (never rolled back).
    RetryInPlace,
    /// Roll the tree back to the attempt's checkpoint, then retry.
    RollBackThenRetry,
    /// Roll the tree back and block the task; do not retry.
    RollBackAndBlock,
    /// The agent asked for context: retry by the policy, changed as the
    /// task's `on_needs_context` says.
    RetryWithContext,
}

impl Strategy {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RetryByPolicy => "retry_by_policy",
            Self::RetryInPlace => "retry_in_place",
            Self::RollBackThenRetry => "roll_back_then_retry",
            Self::RollBackAndBlock => "roll_back_and_block",
            Self::RetryWithContext => "retry_with_context",
        }
    }

    /// Whether the retry follows the task's retry policy and rollback rule
    /// (a verdict on the work, or a request for context).
    pub fn follows_policy(self) -> bool {
        matches!(self, Self::RetryByPolicy | Self::RetryWithContext)
    }
}

/// A failed attempt's diagnosis.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[must_use]
pub struct Diagnosis {
    pub severity: Severity,
    /// What it was: an infrastructure kind, an anomaly kind, `judged`, or
    /// `repeated_failure`.
    pub kind: String,
    pub strategy: Strategy,
}

/// What the diagnosis looks at.
#[derive(Debug, Clone, Copy)]
pub struct Symptoms<'a> {
    pub outcome: &'a AttemptOutcome,
    pub anomalies: &'a [Anomaly],
    /// How many attempts in a row, this one included, were judged with the
    /// same reply and the same gate outputs.
    pub same_judged_in_a_row: u32,
}

/// Diagnoses a failed attempt. First match wins: an anomaly makes the tree
/// suspect whatever else happened; then the fatal infrastructure kinds; then
/// the same judged failure seen `REPEATED_FAILURE_LIMIT` times; then the
/// remaining infrastructure (transient) and judged failures.
pub fn diagnose(symptoms: Symptoms<'_>) -> Diagnosis {
    if let Some(anomaly) = symptoms
        .anomalies
        .iter()
        .find(|anomaly| anomaly.is_corrupting())
    {
        return Diagnosis {
            severity: Severity::Corrupting,
            kind: anomaly.kind().to_owned(),
            strategy: Strategy::RollBackThenRetry,
        };
    }
    match symptoms.outcome {
        AttemptOutcome::Infra(kind) if is_fatal(*kind) => Diagnosis {
            severity: Severity::Fatal,
            kind: kind.as_str().to_owned(),
            strategy: Strategy::RollBackAndBlock,
        },
        AttemptOutcome::Infra(kind) => Diagnosis {
            severity: Severity::Transient,
            kind: kind.as_str().to_owned(),
            strategy: Strategy::RetryInPlace,
        },
        AttemptOutcome::Judged(_) if symptoms.same_judged_in_a_row >= REPEATED_FAILURE_LIMIT => {
            Diagnosis {
                severity: Severity::Fatal,
                kind: "repeated_failure".to_owned(),
                strategy: Strategy::RollBackAndBlock,
            }
        }
        AttemptOutcome::NeedsContext(_) => Diagnosis {
            severity: Severity::Judged,
            kind: "needs_context".to_owned(),
            strategy: Strategy::RetryWithContext,
        },
        AttemptOutcome::Judged(_) | AttemptOutcome::Passed => Diagnosis {
            severity: Severity::Judged,
            kind: "judged".to_owned(),
            strategy: Strategy::RetryByPolicy,
        },
    }
}

/// The infrastructure failures no retry can get past. `Cancelled` is not
/// among them: a cancelled run stops, it does not block.
fn is_fatal(kind: InfraKind) -> bool {
    matches!(
        kind,
        InfraKind::MissingBinary
            | InfraKind::AuthFailed
            | InfraKind::BudgetExhausted
            | InfraKind::InterpolationError
    )
}

/// Whether an attempt that did not pass every gate is kept as partial: the
/// passing gates' weight reaches `threshold_basis_points` of all the gates'
/// weight. Each gate is `(weight, passed)`; with no threshold, never.
pub fn accepts_partially(threshold_basis_points: Option<u32>, gates: &[(u32, bool)]) -> bool {
    let Some(threshold) = threshold_basis_points else {
        return false;
    };
    let total: u64 = gates.iter().map(|(weight, _)| u64::from(*weight)).sum();
    let passing: u64 = gates
        .iter()
        .filter(|(_, passed)| *passed)
        .map(|(weight, _)| u64::from(*weight))
        .sum();
    total > 0 && passing < total && passing * 10_000 >= u64::from(threshold) * total
}

/// Whether a gate's exit status says its command could not run at all: 126
/// (found but not executable) or 127 (not found), as the shell reports them.
/// Such a gate said nothing about the work.
pub fn gate_could_not_run(exit_code: i32) -> bool {
    matches!(exit_code, 126 | 127)
}

/// Whether `path` (relative to the tree, `/`-separated) is matched by one of
/// `globs`: `*` within a path segment, `**` across segments, `?` one
/// character; a glob that ends in `/` matches everything under it.
pub fn path_allowed(path: &str, globs: &[String]) -> bool {
    globs.iter().any(|glob| {
        let glob = glob.strip_prefix("./").unwrap_or(glob);
        match glob.strip_suffix('/') {
            Some(dir) => path == dir || path.starts_with(&format!("{dir}/")),
            None => glob_match(glob.as_bytes(), path.as_bytes()),
        }
    })
}

fn glob_match(glob: &[u8], path: &[u8]) -> bool {
    match glob.split_first() {
        None => path.is_empty(),
        Some((b'*', rest)) if rest.first() == Some(&b'*') => {
            let rest = &rest[1..];
            let rest = rest.strip_prefix(b"/").unwrap_or(rest);
            (0..=path.len()).any(|cut| glob_match(rest, &path[cut..]))
        }
        Some((b'*', rest)) => (0..=path.len())
            .take_while(|&cut| !path[..cut].contains(&b'/'))
            .any(|cut| glob_match(rest, &path[cut..])),
        Some((b'?', rest)) => {
            path.first().is_some_and(|&c| c != b'/') && glob_match(rest, &path[1..])
        }
        Some((&c, rest)) => path.first() == Some(&c) && glob_match(rest, &path[1..]),
    }
}

/// The longest a retry waits on a provider's word: a limit that resets
/// later than this is waited for only this long (the retry then meets the
/// limit again and is diagnosed again).
pub const MAX_BACK_OFF: Duration = Duration::from_secs(15 * 60);

/// Why a retry waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitSource {
    /// The provider said when to come back.
    RetryAfter,
    /// The default exponential back-off: 1, 2, 4 ... 30 s.
    Exponential,
}

/// How long to wait before retrying after `kind`, and why: a provider
/// failure (rate limit, usage limit, overload, network, API error) waits as long as the
/// provider asked (`retry_after`, bounded by [`MAX_BACK_OFF`]) or else 1 s,
/// 2, 4 ... up to 30 s by attempt; anything else does not wait.
pub fn back_off(
    kind: InfraKind,
    attempt: u32,
    retry_after: Option<Duration>,
) -> Option<(Duration, WaitSource)> {
    if !matches!(
        kind,
        InfraKind::RateLimited
            | InfraKind::UsageLimit
            | InfraKind::Overloaded
            | InfraKind::Network
            | InfraKind::ApiError
    ) {
        return None;
    }
    if let Some(wait) = retry_after {
        return Some((wait.min(MAX_BACK_OFF), WaitSource::RetryAfter));
    }
    let exponential =
        Duration::from_secs(1u64 << attempt.saturating_sub(1).min(5)).min(Duration::from_secs(30));
    Some((exponential, WaitSource::Exponential))
}

/// When a provider's error text says to come back: `retry-after: N`
/// (seconds, as the HTTP header), `retry after N seconds`, `try again in N
/// seconds|minutes|hours`, or a limit message ending `|<unix time>` (the
/// reset time Claude Code appends to `usage limit reached`). `now_unix` is
/// the current time in seconds; a reset in the past is no wait.
pub fn retry_after(text: &str, now_unix: u64) -> Option<Duration> {
    let lower = text.to_ascii_lowercase();
    if let Some((head, tail)) = lower.rsplit_once('|')
        && head.contains("limit")
        && let Ok(reset) = tail.trim().parse::<u64>()
    {
        return Some(Duration::from_secs(reset.saturating_sub(now_unix)));
    }
    for marker in ["retry-after:", "retry-after", "retry after", "try again in"] {
        let Some(at) = lower.find(marker) else {
            continue;
        };
        let rest = lower[at + marker.len()..].trim_start();
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let Ok(count) = digits.parse::<u64>() else {
            continue;
        };
        let unit = rest[digits.len()..].trim_start();
        let seconds = if unit.starts_with("ms") || unit.starts_with("millisecond") {
            return Some(Duration::from_millis(count));
        } else if unit.starts_with("min") || unit.starts_with('m') && !unit.starts_with("ms") {
            count.saturating_mul(60)
        } else if unit.starts_with("hour") || unit.starts_with('h') {
            count.saturating_mul(3600)
        } else {
            count
        };
        return Some(Duration::from_secs(seconds));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::Verdict;
    use crate::plan::Disclose;

    fn judged() -> AttemptOutcome {
        AttemptOutcome::Judged(vec![Verdict::GateRejected {
            gate: "tests".into(),
            exit_code: Some(1),
            disclose: Disclose::Output,
        }])
    }

    fn diagnosis(
        outcome: &AttemptOutcome,
        anomalies: &[Anomaly],
        row: u32,
    ) -> (Severity, String, Strategy) {
        let d = diagnose(Symptoms {
            outcome,
            anomalies,
            same_judged_in_a_row: row,
        });
        (d.severity, d.kind, d.strategy)
    }

    #[test]
    fn every_infrastructure_kind_is_transient_or_fatal_as_the_table_says() {
        for kind in InfraKind::ALL {
            let (severity, name, strategy) = diagnosis(&AttemptOutcome::Infra(kind), &[], 1);
            assert_eq!(name, kind.as_str());
            let fatal = matches!(
                kind,
                InfraKind::MissingBinary
                    | InfraKind::AuthFailed
                    | InfraKind::BudgetExhausted
                    | InfraKind::InterpolationError
            );
            if fatal {
                assert_eq!(
                    (severity, strategy),
                    (Severity::Fatal, Strategy::RollBackAndBlock),
                    "{kind:?}"
                );
            } else {
                assert_eq!(
                    (severity, strategy),
                    (Severity::Transient, Strategy::RetryInPlace),
                    "{kind:?}"
                );
            }
        }
    }

    #[test]
    fn an_anomaly_wins_over_everything_and_rolls_back() {
        let anomaly = Anomaly::WriteOutsideAllowedPaths {
            paths: vec!["../x".into()],
        };
        for outcome in [
            judged(),
            AttemptOutcome::Infra(InfraKind::AuthFailed),
            AttemptOutcome::Infra(InfraKind::Timeout),
        ] {
            assert_eq!(
                diagnosis(&outcome, std::slice::from_ref(&anomaly), 5),
                (
                    Severity::Corrupting,
                    "write_outside_allowed_paths".into(),
                    Strategy::RollBackThenRetry
                )
            );
        }
    }

    #[test]
    fn a_changed_gate_file_is_corrupting_even_when_the_gates_passed() {
        let anomaly = Anomaly::ProtectedFileChanged {
            gates: vec!["tests".into()],
            paths: vec!["gate.sh".into()],
        };
        assert_eq!(
            diagnosis(&AttemptOutcome::Passed, std::slice::from_ref(&anomaly), 1),
            (
                Severity::Corrupting,
                "protected_file_changed".into(),
                Strategy::RollBackThenRetry
            )
        );
    }

    #[test]
    fn the_same_judged_failure_three_times_is_fatal() {
        for (row, expected) in [
            (1, Severity::Judged),
            (2, Severity::Judged),
            (3, Severity::Fatal),
            (4, Severity::Fatal),
        ] {
            let (severity, kind, _) = diagnosis(&judged(), &[], row);
            assert_eq!(severity, expected, "{row}");
            if expected == Severity::Fatal {
                assert_eq!(kind, "repeated_failure");
            }
        }
    }

    #[test]
    fn a_partial_attempt_needs_the_passing_weight_to_reach_the_threshold() {
        // Weighted 2 and 1: the heavy one alone is 2/3.
        assert!(accepts_partially(Some(5_000), &[(2, true), (1, false)]));
        assert!(!accepts_partially(Some(5_000), &[(2, false), (1, true)]));
        assert!(accepts_partially(Some(6_667), &[(2, true), (1, false)]) == (20_000 >= 6_667 * 3));
        assert!(!accepts_partially(None, &[(2, true), (1, false)]));
        // Everything passing is a pass, not a partial; nothing to weigh is neither.
        assert!(!accepts_partially(Some(0), &[(1, true)]));
        assert!(!accepts_partially(Some(0), &[]));
        assert!(accepts_partially(Some(0), &[(1, false)]));
    }

    #[test]
    fn exits_126_and_127_mean_the_gate_could_not_run() {
        for code in [0, 1, 2, 125, 128, 137] {
            assert!(!gate_could_not_run(code), "{code}");
        }
        assert!(gate_could_not_run(126));
        assert!(gate_could_not_run(127));
    }

    #[test]
    fn allowed_paths_are_globs_relative_to_the_tree() {
        let globs: Vec<String> = ["src/**", "docs/", "*.md", "tests/test_?.py"]
            .iter()
            .map(|glob| (*glob).to_owned())
            .collect();
        for ok in [
            "src/a.rs",
            "src/deep/b.rs",
            "docs/x/y",
            "README.md",
            "tests/test_a.py",
        ] {
            assert!(path_allowed(ok, &globs), "{ok}");
        }
        for bad in [
            "lib/a.rs",
            "sub/README.md",
            "tests/test_ab.py",
            "docsx",
            ".git/config",
        ] {
            assert!(!path_allowed(bad, &globs), "{bad}");
        }
    }

    #[test]
    fn a_provider_s_retry_after_is_read_from_its_words() {
        let secs = Duration::from_secs;
        assert_eq!(
            retry_after("API Error: 429 · retry-after: 2", 0),
            Some(secs(2))
        );
        assert_eq!(
            retry_after("Rate limited. Retry after 30 seconds.", 0),
            Some(secs(30))
        );
        assert_eq!(
            retry_after("please try again in 5 minutes", 0),
            Some(secs(300))
        );
        assert_eq!(retry_after("try again in 1 hour", 0), Some(secs(3600)));
        assert_eq!(
            retry_after("retry after 250ms", 0),
            Some(Duration::from_millis(250))
        );
        assert_eq!(
            retry_after("Claude AI usage limit reached|1700000600", 1_700_000_000),
            Some(secs(600))
        );
        // A reset already past is no wait; words without a figure are none.
        assert_eq!(retry_after("usage limit reached|100", 200), Some(secs(0)));
        assert_eq!(retry_after("429 Too Many Requests", 0), None);
        assert_eq!(retry_after("retry after a while", 0), None);
    }

    #[test]
    fn back_off_waits_only_for_provider_trouble_and_honours_the_provider() {
        let secs = Duration::from_secs;
        assert_eq!(back_off(InfraKind::Timeout, 1, Some(secs(5))), None);
        assert_eq!(back_off(InfraKind::MissingBinary, 1, None), None);
        assert_eq!(back_off(InfraKind::AwaitingPermission, 1, None), None);
        // Until it is parked, a usage limit waits out its reset, bounded.
        assert_eq!(
            back_off(InfraKind::UsageLimit, 1, Some(secs(3600))),
            Some((MAX_BACK_OFF, WaitSource::RetryAfter))
        );
        assert_eq!(
            back_off(InfraKind::RateLimited, 1, Some(secs(7))),
            Some((secs(7), WaitSource::RetryAfter))
        );
        assert_eq!(
            back_off(InfraKind::RateLimited, 1, Some(secs(86_400))),
            Some((MAX_BACK_OFF, WaitSource::RetryAfter))
        );
        let waits: Vec<u64> = (1..=8)
            .map(|attempt| {
                back_off(InfraKind::Overloaded, attempt, None)
                    .unwrap()
                    .0
                    .as_secs()
            })
            .collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30, 30]);
    }
}
