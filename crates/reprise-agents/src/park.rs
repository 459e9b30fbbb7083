//! What an attempt says about parking its task (DESIGN.md section 9, "parks
//! that happen by themselves"): a usage limit that names its reset time, or
//! an agent that waits on a permission or an answer. The adapters only say
//! so, as a [`ParkSignal`] beside an infrastructure outcome of kind
//! `usage_limit` or `awaiting_permission`; the engine does the parking.
//!
//! Reading the reset time is the core's pure
//! [`reprise_core::reset::usage_reset`]; what it needs from the world (the
//! time now and the local zone the CLIs print times in) is read here, at the
//! edge, once per attempt.

use std::time::{SystemTime, UNIX_EPOCH};

use reprise_core::reset::{known_zone, usage_reset};

use crate::outcome::{AttemptOutcome, InfraKind, ParkSignal, Parsed, QUESTION_MAX_BYTES, one_line};

/// The time now and the zone local times are printed in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Clock {
    pub(crate) now_unix: u64,
    /// An IANA zone name (`UTC` when the machine's cannot be told).
    pub(crate) zone: String,
}

impl Clock {
    /// The system's clock and zone: `TZ` when it names a zone, else the
    /// zone `/etc/localtime` links to, else `/etc/timezone`, else UTC.
    pub(crate) fn system() -> Self {
        // Rounded up: a reset stated as a wait ("in 2 seconds") counts
        // from now, and a wake from the whole second before now would be up
        // to a second early.
        let now_unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| {
                since.as_secs() + u64::from(since.subsec_nanos() > 0)
            });
        Self {
            now_unix,
            zone: system_zone(),
        }
    }
}

fn system_zone() -> String {
    let from_tz = std::env::var("TZ")
        .ok()
        .map(|tz| tz.trim_start_matches(':').to_owned());
    let from_link = std::fs::read_link("/etc/localtime")
        .ok()
        .and_then(|target| {
            let target = target.to_string_lossy().into_owned();
            target
                .split_once("zoneinfo/")
                .map(|(_, zone)| zone.to_owned())
        });
    let from_file = std::fs::read_to_string("/etc/timezone")
        .ok()
        .map(|text| text.trim().to_owned());
    [from_tz, from_link, from_file]
        .into_iter()
        .flatten()
        .find(|zone| !zone.is_empty() && known_zone(zone))
        .unwrap_or_else(|| "UTC".to_owned())
}

/// Turns a provider failure whose own words name a usage limit's reset into
/// `usage_limit` with a [`ParkSignal::Until`]; anything else is returned as
/// it is. A limit without a reset time stays what it was (a rate limit).
pub(crate) fn settle_usage_limit(mut parsed: Parsed, clock: &Clock) -> Parsed {
    let could_be_limit = match &parsed.outcome {
        AttemptOutcome::Infra { kind, .. } => matches!(
            kind,
            InfraKind::RateLimited
                | InfraKind::ApiError
                | InfraKind::Overloaded
                | InfraKind::AgentExitWithoutReply
        ),
        AttemptOutcome::Replied { exit_code, .. } => *exit_code != 0,
    };
    if !could_be_limit || parsed.park.is_some() {
        return parsed;
    }
    let Some(text) = parsed.limit_text.as_deref() else {
        return parsed;
    };
    let Some(reset) = usage_reset(text, clock.now_unix, &clock.zone) else {
        return parsed;
    };
    let at = jiff::Timestamp::from_second(i64::try_from(reset.unix_secs).unwrap_or(i64::MAX))
        .map_or_else(|_| reset.unix_secs.to_string(), |stamp| stamp.to_string());
    parsed.outcome = AttemptOutcome::Infra {
        kind: InfraKind::UsageLimit,
        detail: format!("usage limit, resets at {at}: {}", one_line(text, 240)),
    };
    parsed.park = Some(ParkSignal::Until {
        unix: reset.unix_secs,
        source: reset.source,
    });
    parsed
}

/// The last non-empty lines of what the agent printed, stdout then stderr,
/// at most [`QUESTION_MAX_BYTES`]: what it was asking when it went quiet.
pub(crate) fn last_words(stdout: &str, stderr: &str) -> String {
    let lines: Vec<&str> = stdout
        .lines()
        .chain(stderr.lines())
        .map(str::trim_end)
        .filter(|line| !line.trim().is_empty())
        .collect();
    let mut kept: Vec<&str> = Vec::new();
    let mut bytes = 0;
    for line in lines.iter().rev() {
        let cost = line.len() + usize::from(!kept.is_empty());
        if bytes + cost > QUESTION_MAX_BYTES {
            if kept.is_empty() {
                // One long line: keep its tail.
                let mut start = line.len().saturating_sub(QUESTION_MAX_BYTES);
                while !line.is_char_boundary(start) {
                    start += 1;
                }
                kept.push(&line[start..]);
            }
            break;
        }
        bytes += cost;
        kept.push(line);
    }
    kept.reverse();
    kept.join("\n")
}

/// `text` cut to at most [`QUESTION_MAX_BYTES`] on a character boundary.
pub(crate) fn bounded_question(text: &str) -> String {
    if text.len() <= QUESTION_MAX_BYTES {
        return text.to_owned();
    }
    let mut end = QUESTION_MAX_BYTES - 3;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

#[cfg(test)]
mod tests {
    use reprise_core::reset::ResetSource;

    use super::*;

    fn clock() -> Clock {
        Clock {
            now_unix: 1_796_126_400,
            zone: "UTC".into(),
        }
    }

    fn parsed(outcome: AttemptOutcome, text: &str) -> Parsed {
        Parsed {
            limit_text: Some(text.into()),
            ..Parsed::of(outcome)
        }
    }

    #[test]
    fn a_provider_failure_naming_its_reset_becomes_a_usage_limit() {
        let text = "Claude AI usage limit reached|1796130000";
        let settled = settle_usage_limit(
            parsed(crate::outcome::infra(InfraKind::RateLimited, "x"), text),
            &clock(),
        );
        assert_eq!(
            settled.park,
            Some(ParkSignal::Until {
                unix: 1_796_130_000,
                source: ResetSource::UnixTime
            })
        );
        let AttemptOutcome::Infra { kind, detail } = settled.outcome else {
            panic!("not infra")
        };
        assert_eq!(kind, InfraKind::UsageLimit);
        assert_eq!(
            detail,
            "usage limit, resets at 2026-12-01T13:00:00Z: Claude AI usage limit reached|1796130000"
        );
    }

    #[test]
    fn what_is_not_a_provider_failure_or_names_no_reset_is_left_alone() {
        let text = "Claude AI usage limit reached|1796130000";
        for outcome in [
            crate::outcome::infra(InfraKind::AuthFailed, "x"),
            crate::outcome::infra(InfraKind::Timeout, "x"),
            AttemptOutcome::Replied {
                exit_code: 0,
                reply: text.into(),
            },
        ] {
            let settled = settle_usage_limit(parsed(outcome.clone(), text), &clock());
            assert_eq!((settled.outcome, settled.park), (outcome, None));
        }
        let limited = crate::outcome::infra(InfraKind::RateLimited, "x");
        let settled = settle_usage_limit(
            parsed(limited.clone(), "usage limit reached, try later"),
            &clock(),
        );
        assert_eq!((settled.outcome, settled.park), (limited, None));
        // A command that failed with the words is a usage limit too.
        let failed = AttemptOutcome::Replied {
            exit_code: 1,
            reply: String::new(),
        };
        let settled = settle_usage_limit(
            parsed(failed, "quota exhausted, resets in 90 seconds"),
            &clock(),
        );
        assert_eq!(
            settled.park,
            Some(ParkSignal::Until {
                unix: 1_796_126_490,
                source: ResetSource::Relative
            })
        );
    }

    #[test]
    fn the_last_words_are_the_last_non_empty_lines_bounded() {
        assert_eq!(
            last_words("working\n\nAllow Bash(rm -rf build)? [y/N]\n  \n", ""),
            "working\nAllow Bash(rm -rf build)? [y/N]"
        );
        assert_eq!(
            last_words("out\n", "err: need approval\n"),
            "out\nerr: need approval"
        );
        let many: String = (0..1000).map(|i| format!("line {i}\n")).collect();
        let words = last_words(&many, "");
        assert!(words.len() <= QUESTION_MAX_BYTES, "{}", words.len());
        assert!(words.ends_with("line 999"), "{words}");
        assert!(!words.starts_with("line 0\n"));
        let long = "é".repeat(QUESTION_MAX_BYTES);
        let words = last_words(&long, "");
        assert!(words.len() <= QUESTION_MAX_BYTES && !words.is_empty());
        assert_eq!(last_words("", " \n"), "");
        assert_eq!(bounded_question("short"), "short");
        let cut = bounded_question(&long);
        assert!(cut.len() <= QUESTION_MAX_BYTES && cut.ends_with("..."));
    }

    #[test]
    fn the_system_zone_is_a_known_one() {
        assert!(known_zone(&Clock::system().zone));
    }
}
