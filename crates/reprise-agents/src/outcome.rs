//! What an attempt produced: the outcome (a reply, or an infrastructure
//! failure of a named kind), the report the engine records, and the small
//! pure helpers every parser shares (HTTP status mapping, exact decimal
//! dollars to micro-dollars, one-line details).
//!
//! Money never passes through a float: a CLI's `0.0123456` is read as decimal
//! text and rounded half up to the micro-dollar.

use std::path::PathBuf;
use std::time::Duration;

use reprise_core::reset::ResetSource;

/// How an attempt ended, before any gate ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttemptOutcome {
    /// The agent ran to the end and said something: exit code and the reply
    /// text. A non-zero exit is still a reply (a verdict on the work, for the
    /// engine to judge), as is an empty reply.
    Replied { exit_code: i32, reply: String },
    /// Infrastructure failure: never a verdict on the work.
    Infra { kind: InfraKind, detail: String },
}

/// The kinds of infrastructure failure: the core's taxonomy, one list for
/// adapters, engine and prompts alike.
pub use reprise_core::outcome::InfraKind;

/// Everything the engine records about one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptReport {
    /// How the attempt ended.
    pub outcome: AttemptOutcome,
    /// The session this attempt ran in (chosen in advance, or parsed from the
    /// CLI's output); `None` when neither is known.
    pub session_id: Option<String>,
    /// From the CLI's own report (e.g. `total_cost_usd`); `None` is unknown,
    /// never guessed.
    pub cost_micro_usd: Option<u64>,
    /// The model the session ran on, exactly as the CLI named it (Claude
    /// Code's `claude-opus-4-8[1m]`), when the CLI said. A resume asks for
    /// exactly this: the CLI's own default on resume can differ, and with it
    /// the system prompt, which would throw away the provider's prompt cache.
    pub session_model: Option<String>,
    /// The adapter's name.
    pub adapter: &'static str,
    /// The first line of `<bin> --version`, probed once per binary per
    /// adapter instance.
    pub cli_version: Option<String>,
    /// Where the attempt ran.
    pub cwd: PathBuf,
    /// The CLI home given to the child, if any.
    pub config_home: Option<PathBuf>,
    /// What was run, the prompt elided to `<prompt>` so logs stay small.
    pub argv: Vec<String>,
    /// Wall-clock time of the attempt itself (the version probe excluded).
    pub elapsed: Duration,
    /// What the process printed, bounded head and tail
    /// ([`STREAM_KEEP_BYTES`] each); empty for the in-process `sim`.
    pub streams: Streams,
    /// Set with an outcome of kind `usage_limit` or `awaiting_permission`:
    /// the task should be parked until this, not failed or retried.
    pub park: Option<ParkSignal>,
}

/// Why an attempt's task should be parked rather than failed or retried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParkSignal {
    /// The plan's usage limit was hit; it resets at `unix` (seconds).
    Until { unix: u64, source: ResetSource },
    /// The agent waits on someone: what it asked, or the permission it was
    /// denied (at most [`QUESTION_MAX_BYTES`]).
    Approval { question: String },
}

/// Most bytes of a question kept for the park record.
pub const QUESTION_MAX_BYTES: usize = 2048;

/// Most bytes of each output stream an attempt's report keeps.
pub const STREAM_KEEP_BYTES: usize = 256 * 1024;

/// An attempt's stdout and stderr, as kept.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Streams {
    pub stdout: String,
    pub stderr: String,
}

impl Streams {
    /// Both streams, each cut to its head and tail past [`STREAM_KEEP_BYTES`].
    pub(crate) fn kept(stdout: &[u8], stderr: &[u8]) -> Self {
        let keep = |bytes: &[u8]| {
            reprise_core::prompt::excerpt(&String::from_utf8_lossy(bytes), STREAM_KEEP_BYTES)
        };
        Self {
            stdout: keep(stdout),
            stderr: keep(stderr),
        }
    }
}

/// What a pure output parser read from one finished CLI process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Parsed {
    pub(crate) outcome: AttemptOutcome,
    pub(crate) session_id: Option<String>,
    pub(crate) cost_micro_usd: Option<u64>,
    pub(crate) session_model: Option<String>,
    /// Why the task should be parked, when the output says so outright (a
    /// denied permission).
    pub(crate) park: Option<ParkSignal>,
    /// The CLI's own error words, whole, where a usage limit's reset time
    /// would be (the park module's `settle_usage_limit` reads them).
    pub(crate) limit_text: Option<String>,
}

impl Parsed {
    pub(crate) fn infra(kind: InfraKind, detail: impl Into<String>) -> Self {
        Self::of(AttemptOutcome::Infra {
            kind,
            detail: detail.into(),
        })
    }

    /// Just an outcome: no session, cost or park known.
    pub(crate) fn of(outcome: AttemptOutcome) -> Self {
        Self {
            outcome,
            session_id: None,
            cost_micro_usd: None,
            session_model: None,
            park: None,
            limit_text: None,
        }
    }
}

/// Infra outcome shorthand.
pub(crate) fn infra(kind: InfraKind, detail: impl Into<String>) -> AttemptOutcome {
    AttemptOutcome::Infra {
        kind,
        detail: detail.into(),
    }
}

/// Reported spend beyond the budget stops the attempt, whatever the CLI
/// said: the envelope is the user's limit, so the engine sees one rule for
/// every adapter that reports cost.
pub(crate) fn enforce_budget(
    outcome: AttemptOutcome,
    cost_micro_usd: Option<u64>,
    budget_micro_usd: Option<u64>,
) -> AttemptOutcome {
    match (cost_micro_usd, budget_micro_usd) {
        (Some(cost), Some(budget)) if cost > budget => infra(
            InfraKind::BudgetExhausted,
            format!(
                "spent {} usd, beyond the attempt's budget of {} usd",
                format_micro_usd(cost),
                format_micro_usd(budget)
            ),
        ),
        _ => outcome,
    }
}

/// Maps a provider's HTTP status to the infrastructure kind it means.
pub(crate) fn kind_for_http_status(status: u64) -> InfraKind {
    match status {
        401 | 403 => InfraKind::AuthFailed,
        429 => InfraKind::RateLimited,
        529 => InfraKind::Overloaded,
        _ => InfraKind::ApiError,
    }
}

/// Reads an infrastructure kind out of a CLI's error text: an HTTP status it
/// names (`status 401`, `status: 429`, `API Error: 500`), else well-known
/// phrases. `None` when nothing is recognised.
pub(crate) fn kind_from_error_text(text: &str) -> Option<InfraKind> {
    let lower = text.to_ascii_lowercase();
    const SESSION_GONE: &[&str] = &[
        "no conversation found with session id",
        "no rollout found",
        "invalid session identifier",
        "error resuming session",
    ];
    if SESSION_GONE.iter().any(|phrase| lower.contains(phrase)) {
        return Some(InfraKind::SessionUnavailable);
    }
    if let Some(status) = http_status_in(&lower) {
        return Some(kind_for_http_status(status));
    }
    const PHRASES: &[(&[&str], InfraKind)] = &[
        (
            &[
                "invalid api key",
                "please run /login",
                "failed to authenticate",
                "unauthorized",
                "not logged in",
                "authentication",
            ],
            InfraKind::AuthFailed,
        ),
        (
            &["rate limit", "too many requests", "usage limit"],
            InfraKind::RateLimited,
        ),
        (&["overloaded", "high demand"], InfraKind::Overloaded),
        (
            &[
                "connection error",
                "connection refused",
                "connection reset",
                "error sending request",
                "stream disconnected",
                "fetch failed",
                "econnrefused",
                "enotfound",
                "network",
            ],
            InfraKind::Network,
        ),
    ];
    PHRASES
        .iter()
        .find(|(phrases, _)| phrases.iter().any(|phrase| lower.contains(phrase)))
        .map(|(_, kind)| *kind)
}

/// The first HTTP status (100..=599) written right after `status` or
/// `api error` in lowercase text.
fn http_status_in(lower: &str) -> Option<u64> {
    ["status", "api error"].iter().find_map(|marker| {
        lower.match_indices(marker).find_map(|(at, _)| {
            let rest = lower[at + marker.len()..].trim_start_matches([' ', ':', '=', '(']);
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            let status: u64 = digits.parse().ok()?;
            (digits.len() == 3 && (100..=599).contains(&status)).then_some(status)
        })
    })
}

/// Parses a non-negative decimal dollar amount (JSON number syntax: digits,
/// an optional fraction, an optional exponent) into micro-dollars, rounding
/// half up. `None` for anything else, a negative amount or an overflow.
pub(crate) fn parse_usd_micro(text: &str) -> Option<u64> {
    let text = text.trim();
    let (mantissa, exponent) = match text.find(['e', 'E']) {
        Some(at) => {
            let exponent: i64 = text[at + 1..]
                .strip_prefix('+')
                .unwrap_or(&text[at + 1..])
                .parse()
                .ok()?;
            (&text[..at], exponent)
        }
        None => (text, 0),
    };
    let (whole, fraction) = match mantissa.split_once('.') {
        Some((whole, fraction)) if !fraction.is_empty() => (whole, fraction),
        Some(_) => return None,
        None => (mantissa, ""),
    };
    if whole.is_empty()
        || !whole.bytes().all(|b| b.is_ascii_digit())
        || !fraction.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    // The amount is digits * 10^(scale - 6) dollars, so digits * 10^scale micro-dollars.
    let digits: Vec<u8> = whole
        .bytes()
        .chain(fraction.bytes())
        .map(|b| b - b'0')
        .skip_while(|&d| d == 0)
        .collect();
    let scale = exponent
        .checked_sub(i64::try_from(fraction.len()).ok()?)?
        .checked_add(6)?;
    let keep = i64::try_from(digits.len()).ok()? + scale.min(0);
    let mut micro: u64 = 0;
    for &digit in digits.iter().take(usize::try_from(keep.max(0)).ok()?) {
        micro = micro.checked_mul(10)?.checked_add(u64::from(digit))?;
    }
    if scale > 0 {
        micro = micro.checked_mul(10u64.checked_pow(u32::try_from(scale).ok()?)?)?;
    } else if keep >= 0 {
        let first_dropped = usize::try_from(keep).ok()?;
        if digits.get(first_dropped).is_some_and(|&d| d >= 5) {
            micro = micro.checked_add(1)?;
        }
    }
    Some(micro)
}

/// Formats micro-dollars as a plain decimal (`0.0075`, `5`), exact.
pub(crate) fn format_micro_usd(micro: u64) -> String {
    let whole = micro / 1_000_000;
    let fraction = micro % 1_000_000;
    if fraction == 0 {
        return whole.to_string();
    }
    let fraction = format!("{fraction:06}");
    format!("{whole}.{}", fraction.trim_end_matches('0'))
}

/// Cuts `text` to one line of at most `max_chars` characters, for details.
pub(crate) fn one_line(text: &str, max_chars: usize) -> String {
    let joined = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if joined.chars().count() <= max_chars {
        return joined;
    }
    let mut cut: String = joined.chars().take(max_chars.saturating_sub(3)).collect();
    cut.push_str("...");
    cut
}

/// The most telling line of a CLI's stderr: the first that mentions an
/// error, else the last non-empty one.
pub(crate) fn stderr_summary(stderr: &str) -> String {
    let lines: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let chosen = lines
        .iter()
        .find(|line| line.to_ascii_lowercase().contains("error"))
        .or_else(|| lines.last())
        .copied()
        .unwrap_or("");
    one_line(chosen, 300)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usd_parses_exactly_and_rounds_half_up() {
        let cases = [
            ("0", Some(0)),
            ("0.0", Some(0)),
            ("0.12", Some(120_000)),
            ("0.007595", Some(7_595)),
            ("0.0123456", Some(12_346)),
            ("0.0123454", Some(12_345)),
            ("0.0000005", Some(1)),
            ("0.00000049999", Some(0)),
            ("1.9999995", Some(2_000_000)),
            ("12", Some(12_000_000)),
            ("5.00", Some(5_000_000)),
            ("1e-7", Some(0)),
            ("5e-7", Some(1)),
            ("1.5E-6", Some(2)),
            ("2e+1", Some(20_000_000)),
            ("3e2", Some(300_000_000)),
            ("000.5", Some(500_000)),
            (" 0.25\n", Some(250_000)),
            ("18446744073709.551615", Some(u64::MAX)),
            ("18446744073709.5516155", None),
            ("1e400", None),
            ("1e-400", Some(0)),
            ("-0.5", None),
            ("", None),
            (".5", None),
            ("5.", None),
            ("1.2.3", None),
            ("0x10", None),
            ("abc", None),
            ("NaN", None),
            ("1e", None),
            ("1e9223372036854775807", None),
            ("1e-9223372036854775808", Some(0)),
        ];
        for (text, expected) in cases {
            assert_eq!(parse_usd_micro(text), expected, "{text:?}");
        }
    }

    #[test]
    fn micro_usd_formats_exactly() {
        assert_eq!(format_micro_usd(0), "0");
        assert_eq!(format_micro_usd(5_000_000), "5");
        assert_eq!(format_micro_usd(7_595), "0.007595");
        assert_eq!(format_micro_usd(1_250_000), "1.25");
        assert_eq!(format_micro_usd(1), "0.000001");
        for micro in [0, 1, 7_595, 1_250_000, 123_456_789] {
            assert_eq!(parse_usd_micro(&format_micro_usd(micro)), Some(micro));
        }
    }

    #[test]
    fn infra_kinds_have_distinct_names_and_the_documented_severity() {
        let all = [
            InfraKind::SpawnFailed,
            InfraKind::MissingBinary,
            InfraKind::Timeout,
            InfraKind::AuthFailed,
            InfraKind::RateLimited,
            InfraKind::Overloaded,
            InfraKind::ApiError,
            InfraKind::Network,
            InfraKind::SessionUnavailable,
            InfraKind::BudgetExhausted,
            InfraKind::Cancelled,
        ];
        let names: std::collections::BTreeSet<_> = all.iter().map(|k| k.as_str()).collect();
        assert_eq!(names.len(), all.len());
        let transient: Vec<_> = all
            .iter()
            .filter(|k| k.is_transient())
            .map(|k| k.as_str())
            .collect();
        assert_eq!(
            transient,
            [
                "spawn_failed",
                "timeout",
                "rate_limited",
                "overloaded",
                "api_error",
                "network",
                "session_unavailable"
            ]
        );
        assert_eq!(InfraKind::BudgetExhausted.to_string(), "budget_exhausted");
    }

    #[test]
    fn http_statuses_map_to_kinds() {
        assert_eq!(kind_for_http_status(401), InfraKind::AuthFailed);
        assert_eq!(kind_for_http_status(403), InfraKind::AuthFailed);
        assert_eq!(kind_for_http_status(429), InfraKind::RateLimited);
        assert_eq!(kind_for_http_status(529), InfraKind::Overloaded);
        assert_eq!(kind_for_http_status(500), InfraKind::ApiError);
        assert_eq!(kind_for_http_status(400), InfraKind::ApiError);
    }

    #[test]
    fn error_text_is_classified() {
        let cases = [
            (
                "unexpected status 401 Unauthorized: x",
                Some(InfraKind::AuthFailed),
            ),
            (
                "exceeded retry limit, last status: 429 Too Many Requests",
                Some(InfraKind::RateLimited),
            ),
            ("API Error: 529 overloaded", Some(InfraKind::Overloaded)),
            ("API Error: 500 boom", Some(InfraKind::ApiError)),
            (
                "We’re currently experiencing high demand",
                Some(InfraKind::Overloaded),
            ),
            (
                "No conversation found with session ID: abc",
                Some(InfraKind::SessionUnavailable),
            ),
            (
                "thread/resume failed: no rollout found for thread id x",
                Some(InfraKind::SessionUnavailable),
            ),
            (
                "Invalid API key · Please run /login",
                Some(InfraKind::AuthFailed),
            ),
            ("API Error: Connection error.", Some(InfraKind::Network)),
            (
                "stream disconnected before completion",
                Some(InfraKind::Network),
            ),
            ("status 12345", None),
            ("the model said no", None),
        ];
        for (text, expected) in cases {
            assert_eq!(kind_from_error_text(text), expected, "{text:?}");
        }
    }

    #[test]
    fn budget_overrides_only_when_spend_exceeds_it() {
        let replied = AttemptOutcome::Replied {
            exit_code: 0,
            reply: "ok".into(),
        };
        assert_eq!(enforce_budget(replied.clone(), Some(10), Some(10)), replied);
        assert_eq!(enforce_budget(replied.clone(), None, Some(10)), replied);
        assert_eq!(enforce_budget(replied.clone(), Some(11), None), replied);
        match enforce_budget(replied, Some(11), Some(10)) {
            AttemptOutcome::Infra { kind, detail } => {
                assert_eq!(kind, InfraKind::BudgetExhausted);
                assert_eq!(
                    detail,
                    "spent 0.000011 usd, beyond the attempt's budget of 0.00001 usd"
                );
            }
            other => panic!("expected budget_exhausted, got {other:?}"),
        }
    }

    #[test]
    fn details_are_one_bounded_line() {
        assert_eq!(one_line("a\n  b\tc", 100), "a b c");
        assert_eq!(one_line("abcdefghij", 6), "abc...");
        assert_eq!(
            stderr_summary("WARNING: x\nError: thread/resume failed\n   0: <unknown>\n"),
            "Error: thread/resume failed"
        );
        assert_eq!(stderr_summary("first\nlast\n\n"), "last");
        assert_eq!(stderr_summary(""), "");
    }
}
