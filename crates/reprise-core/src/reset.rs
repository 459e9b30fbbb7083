//! When a plan's usage limit resets, read from what an agent CLI printed on
//! hitting it (DESIGN.md sections 7 and 9: a usage limit with a reset time is
//! parked until then, not failed or retried in a loop).
//!
//! A usage limit is a quota of the user's plan (a five-hour window, a week, a
//! day of free-tier requests): it resets minutes to days away. It is not the
//! short `retry-after` of a rate limit, which [`crate::recovery::retry_after`]
//! reads and a back-off waits out. So the text must say it is about a quota
//! ([`QUOTA_MARKERS`]) before a reset time in it is read at all.
//!
//! The wordings read, and where they were seen (public issue threads of each
//! CLI; the real Claude Code output against the rehearsal's model server is
//! in the agents crate's `real_agents` test):
//!
//! | form | example | seen |
//! |---|---|---|
//! | unix time | `Claude AI usage limit reached\|1749924000` | Claude Code's result text (anthropics/claude-code#2087, #9046, #11429) |
//! | wall clock | `Claude usage limit reached. Your limit will reset at 1pm (Etc/GMT+5).` | Claude Code 1.0 (anthropics/claude-code#2087, #15064) |
//! | wall clock | `5-hour limit reached ∙ resets 9pm` | Claude Code 1.0.1xx (anthropics/claude-code#7892) |
//! | wall clock | `You've hit your session limit · resets 11:20am (Europe/Budapest)` | Claude Code 2.1.185 (anthropics/claude-code#69995) |
//! | relative | `You've hit your usage limit. Upgrade to Pro (...) or try again in 5 days 22 hours 11 minutes.` | Codex CLI 0.39 (openai/codex#3899, #3124) |
//! | date and time | `You've hit your usage limit. Upgrade to Plus ..., or try again at Jul 5th, 2026 8:19 PM.` | Codex (openai/codex#26668) |
//! | relative | `RESOURCE_EXHAUSTED (code 429): Individual quota reached. ... Resets in 2h39m52s.` | a Gemini-backed CLI (google-antigravity/antigravity-cli#1018) |
//! | relative | `You exceeded your current quota ... Please retry in 27.5s.` | the Gemini API's quota error, as Gemini CLI relays it |
//! | unix time | `{"type":"usage_limit_reached", ..., "resets_at":1775317531, "resets_in_seconds":602705}` | the Codex backend's 429 body (james-6-23/codex2api#9) |
//! | RFC 3339 | `usage limit reached; reset at 2026-12-01T15:00:00Z` | generic, for `command` agents |
//! | relative | `quota exhausted, resets in 90 minutes` | generic, for `command` agents |
//!
//! A time without a zone is the caller's local zone (the CLIs print local
//! time); a zone in parentheses wins. Zones come from the time zone database
//! bundled into the binary, so nothing here reads the file system. A reset
//! that is not after `now`, or more than [`MAX_RESET_AHEAD_SECS`] ahead, is
//! not trusted: `None`.

use std::sync::LazyLock;

use jiff::civil::{Date, DateTime};
use jiff::tz::{TimeZone, TimeZoneDatabase};
use jiff::{Timestamp, ToSpan};
use regex::Regex;
use serde::{Deserialize, Serialize};

/// The furthest ahead a reset is believed: a week, the longest window the
/// CLIs' plans have.
pub const MAX_RESET_AHEAD_SECS: u64 = 7 * 24 * 3600;

/// Words that say a text is about a plan's quota, not a short rate limit
/// (lowercase). `rate limit` alone is not among them.
pub const QUOTA_MARKERS: &[&str] = &[
    "usage limit",
    "usage_limit",
    "session limit",
    "weekly limit",
    "hour limit",
    "daily limit",
    "limit reached",
    "hit your limit",
    "quota",
    "resource_exhausted",
];

/// How the reset time was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResetSource {
    /// Unix seconds (`...limit reached|<seconds>`, `"resets_at": <seconds>`).
    UnixTime,
    /// An RFC 3339 timestamp.
    Rfc3339,
    /// A time from now (`try again in 2 hours 13 minutes`, `retry in 27.5s`).
    Relative,
    /// A time of day, maybe with a date and a zone (`resets 3pm`,
    /// `try again at Jul 5th, 2026 8:19 PM`).
    WallClock,
}

impl ResetSource {
    /// Every source.
    pub const ALL: [Self; 4] = [
        Self::UnixTime,
        Self::Rfc3339,
        Self::Relative,
        Self::WallClock,
    ];

    /// The stable snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::UnixTime => "unix_time",
            Self::Rfc3339 => "rfc3339",
            Self::Relative => "relative",
            Self::WallClock => "wall_clock",
        }
    }
}

/// A usage limit's reset, as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[must_use]
pub struct UsageReset {
    /// When the limit resets, in unix seconds.
    pub unix_secs: u64,
    pub source: ResetSource,
}

/// Whether `text` speaks of a plan's quota ([`QUOTA_MARKERS`]). Claude
/// Code's `Server is temporarily limiting requests (not your usage limit)`
/// says the opposite, and does not count.
pub fn mentions_quota(text: &str) -> bool {
    let lower = text.to_lowercase().replace("not your usage limit", "");
    QUOTA_MARKERS.iter().any(|marker| lower.contains(marker))
}

/// When the usage limit `text` reports resets, as unix seconds: `None` when
/// the text is not about a quota, names no reset time, or names one that is
/// not after `now_unix` or is more than a week ahead. `local_zone` is the
/// IANA name of the zone a time printed without one is in (an unknown name
/// reads as UTC).
pub fn usage_reset(text: &str, now_unix: u64, local_zone: &str) -> Option<UsageReset> {
    if !mentions_quota(text) {
        return None;
    }
    let now = i64::try_from(now_unix).ok()?;
    let found = unix_time(text)
        .map(|unix| (unix, ResetSource::UnixTime))
        .or_else(|| rfc3339(text).map(|unix| (unix, ResetSource::Rfc3339)))
        .or_else(|| relative(text).map(|secs| (now.saturating_add(secs), ResetSource::Relative)))
        .or_else(|| wall_clock(text, now, local_zone).map(|unix| (unix, ResetSource::WallClock)))?;
    let (unix, source) = found;
    let ahead = unix.checked_sub(now)?;
    if ahead <= 0 || ahead.unsigned_abs() > MAX_RESET_AHEAD_SECS {
        return None;
    }
    Some(UsageReset {
        unix_secs: unix.unsigned_abs(),
        source,
    })
}

fn regex(pattern: &str) -> Regex {
    Regex::new(pattern).unwrap_or_else(|error| panic!("reset pattern {pattern:?}: {error}"))
}

/// `limit reached|<seconds>` (Claude Code) or `"resets_at": <seconds>`.
fn unix_time(text: &str) -> Option<i64> {
    static PATTERN: LazyLock<Regex> = LazyLock::new(|| {
        regex(r#"(?i)(?:limit reached\|\s*|"?resets_at"?\s*[:=]\s*)(\d{9,11})\b"#)
    });
    PATTERN.captures(text)?[1].parse().ok()
}

/// `reset(s) at`, `try again at` or `retry at`, then an RFC 3339 timestamp.
fn rfc3339(text: &str) -> Option<i64> {
    static PATTERN: LazyLock<Regex> = LazyLock::new(|| {
        regex(
            r"(?i)\b(?:resets?|try again|retry)\s+(?:at|after|on)?\s*(\d{4}-\d{2}-\d{2}[t ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:z|[+-]\d{2}:?\d{2}))",
        )
    });
    let stamp = PATTERN.captures(text)?[1].replace(' ', "T");
    Some(stamp.parse::<Timestamp>().ok()?.as_second())
}

/// Seconds from now: `try again in`, `retry in`, `reset(s) in` and a
/// duration (`5 days 22 hours 11 minutes`, `2h39m52s`, `27.5s`), or
/// `"resets_in_seconds": N`.
fn relative(text: &str) -> Option<i64> {
    static IN_SECONDS: LazyLock<Regex> =
        LazyLock::new(|| regex(r#"(?i)"?resets_in_seconds"?\s*[:=]\s*(\d{1,9})\b"#));
    static MARKER: LazyLock<Regex> =
        LazyLock::new(|| regex(r"(?i)\b(?:try again in|retry in|resets? in)\s+"));
    if let Some(captures) = IN_SECONDS.captures(text) {
        return captures[1].parse().ok();
    }
    MARKER
        .find_iter(text)
        .find_map(|found| duration_secs(&text[found.end()..]))
}

/// The duration at the start of `text`, in whole seconds rounded up: one or
/// more `<number> <unit>` parts, separated by spaces, commas or `and`.
fn duration_secs(text: &str) -> Option<i64> {
    static PART: LazyLock<Regex> = LazyLock::new(|| {
        regex(
            r"(?i)^(?:\s*(?:,|and)?\s*)(\d{1,9}(?:\.\d{1,9})?)\s*(milliseconds?|ms|days?|d|hours?|hrs?|h|minutes?|mins?|m|seconds?|secs?|s)",
        )
    });
    let mut rest = text;
    let mut millis: u64 = 0;
    let mut parts = 0;
    while let Some(captures) = PART.captures(rest) {
        let end = captures.get(0)?.end();
        // A unit ends at anything but a letter (`2h39m` runs on with digits).
        if rest[end..].starts_with(|c: char| c.is_alphabetic()) {
            break;
        }
        let unit_millis: u64 = match captures[2].to_ascii_lowercase().as_str() {
            "ms" | "millisecond" | "milliseconds" => 1,
            "d" | "day" | "days" => 86_400_000,
            "h" | "hr" | "hrs" | "hour" | "hours" => 3_600_000,
            "m" | "min" | "mins" | "minute" | "minutes" => 60_000,
            _ => 1000,
        };
        millis = millis.checked_add(scaled(&captures[1], unit_millis)?)?;
        parts += 1;
        rest = &rest[end..];
    }
    if parts == 0 {
        return None;
    }
    i64::try_from(millis.div_ceil(1000)).ok()
}

/// `number` (digits, maybe a fraction of up to nine digits) times `unit`,
/// rounded up.
fn scaled(number: &str, unit: u64) -> Option<u64> {
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let whole: u64 = whole.parse().ok()?;
    let fraction_part = if fraction.is_empty() {
        0
    } else {
        let scale = 10u64.checked_pow(u32::try_from(fraction.len()).ok()?)?;
        let digits: u64 = fraction.parse().ok()?;
        digits.checked_mul(unit)?.div_ceil(scale)
    };
    whole.checked_mul(unit)?.checked_add(fraction_part)
}

/// A time of day after `resets`, `reset at` or `try again at`: `3pm`,
/// `11:20am`, `15:00`, maybe after a date (`Jul 5th, 2026`, `Dec 3`) and
/// before a zone in parentheses. Without a date, the next such time after
/// now; without a year, this year's date unless it is past, then next year's.
fn wall_clock(text: &str, now: i64, local_zone: &str) -> Option<i64> {
    static PATTERN: LazyLock<Regex> = LazyLock::new(|| {
        regex(
            r"(?ix)\b(?:resets?|try\ again)\s+(?:at\s+|on\s+)?
            (?:(?P<month>jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?\s+
               (?P<day>\d{1,2})(?:st|nd|rd|th)?,?\s+
               (?:(?P<year>\d{4}),?\s+)?(?:at\s+)?)?
            (?P<hour>\d{1,2})(?::(?P<minute>\d{2}))?\s*(?P<meridiem>[ap]\.?m\b\.?)?
            (?:\s*\((?P<zone>[A-Za-z0-9_+\-/]+)\))?",
        )
    });
    PATTERN.captures_iter(text).find_map(|captures| {
        let meridiem = captures
            .name("meridiem")
            .map(|m| m.as_str().to_ascii_lowercase());
        let minute: i8 = match captures.name("minute") {
            Some(minute) => minute.as_str().parse().ok()?,
            None if meridiem.is_some() => 0,
            // A bare number is not a time (`resets 5`).
            None => return None,
        };
        let hour: i8 = captures["hour"].parse().ok()?;
        let hour = match meridiem.as_deref().map(|m| m.starts_with('p')) {
            Some(_) if !(1..=12).contains(&hour) => return None,
            Some(true) => hour % 12 + 12,
            Some(false) => hour % 12,
            None => hour,
        };
        let zone = match captures.name("zone") {
            Some(zone) => zones().get(zone.as_str()).ok()?,
            None => zones().get(local_zone).unwrap_or(TimeZone::UTC),
        };
        let now = Timestamp::from_second(now).ok()?;
        let today = zone.to_datetime(now).date();
        let at = |date: Date| -> Option<i64> {
            let datetime =
                DateTime::new(date.year(), date.month(), date.day(), hour, minute, 0, 0).ok()?;
            Some(
                zone.to_ambiguous_timestamp(datetime)
                    .compatible()
                    .ok()?
                    .as_second(),
            )
        };
        let now = now.as_second();
        match captures.name("month") {
            Some(month) => {
                let month = month_number(month.as_str())?;
                let day: i8 = captures["day"].parse().ok()?;
                match captures.name("year") {
                    Some(year) => at(Date::new(year.as_str().parse().ok()?, month, day).ok()?),
                    None => {
                        let this_year = at(Date::new(today.year(), month, day).ok()?)?;
                        if this_year > now {
                            Some(this_year)
                        } else {
                            at(Date::new(today.year().checked_add(1)?, month, day).ok()?)
                        }
                    }
                }
            }
            None => {
                let same_day = at(today)?;
                if same_day > now {
                    Some(same_day)
                } else {
                    at(today.checked_add(1.day()).ok()?)
                }
            }
        }
    })
}

fn month_number(name: &str) -> Option<i8> {
    const MONTHS: [&str; 12] = [
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ];
    let lower = name.to_ascii_lowercase();
    let index = MONTHS.iter().position(|month| *month == lower)?;
    i8::try_from(index + 1).ok()
}

/// The time zone database compiled into the binary: the same answers on
/// every machine, and no file read.
fn zones() -> &'static TimeZoneDatabase {
    static ZONES: LazyLock<TimeZoneDatabase> = LazyLock::new(TimeZoneDatabase::bundled);
    &ZONES
}

/// Whether `name` is a zone the bundled database knows.
pub fn known_zone(name: &str) -> bool {
    zones().get(name).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-12-01T12:00:00Z, a Tuesday.
    const NOW: u64 = 1_796_126_400;

    fn reset(text: &str) -> Option<(u64, ResetSource)> {
        usage_reset(text, NOW, "UTC").map(|reset| (reset.unix_secs - NOW, reset.source))
    }

    fn at(stamp: &str) -> u64 {
        u64::try_from(stamp.parse::<Timestamp>().unwrap().as_second()).unwrap() - NOW
    }

    #[test]
    fn the_reference_time_is_what_the_tests_say() {
        assert_eq!(at("2026-12-01T12:00:00Z"), 0);
    }

    #[test]
    fn claude_s_unix_reset_is_read() {
        assert_eq!(
            reset(&format!("Claude AI usage limit reached|{}", NOW + 600)),
            Some((600, ResetSource::UnixTime))
        );
    }

    #[test]
    fn claude_s_human_resets_are_read_in_the_zone_they_name_or_the_local_one() {
        use ResetSource::WallClock;
        assert_eq!(
            reset("5-hour limit reached ∙ resets 3pm"),
            Some((3 * 3600, WallClock))
        );
        assert_eq!(
            reset("You've hit your session limit · resets 11:20am (Europe/Budapest)"),
            // 11:20 in Budapest (UTC+1 in December) is 10:20 UTC: tomorrow's.
            Some((at("2026-12-02T10:20:00Z"), WallClock))
        );
        assert_eq!(
            reset("Claude usage limit reached. Your limit will reset at 1pm (Etc/GMT+5)."),
            // Etc/GMT+5 is five hours behind UTC: 18:00 UTC.
            Some((6 * 3600, WallClock))
        );
        assert_eq!(
            reset("Claude usage limit reached. Your limit will reset at 9am (America/Chicago)."),
            Some((at("2026-12-01T15:00:00Z"), WallClock))
        );
        // No zone: the caller's.
        assert_eq!(
            usage_reset("5-hour limit reached ∙ resets 3pm", NOW, "Asia/Tokyo")
                .map(|reset| reset.unix_secs - NOW),
            // 12:00 UTC is 21:00 in Tokyo: tomorrow's 15:00 there is 06:00 UTC.
            Some(at("2026-12-02T06:00:00Z"))
        );
        assert_eq!(
            reset("usage limit reached, resets at 14:30"),
            Some((2 * 3600 + 1800, WallClock))
        );
        // A time of day already past today is tomorrow's.
        assert_eq!(
            reset("5-hour limit reached ∙ resets 9am"),
            Some((21 * 3600, WallClock))
        );
        assert_eq!(
            reset("You've hit your weekly limit · resets Dec 4, 9am (UTC)"),
            Some((at("2026-12-04T09:00:00Z"), WallClock))
        );
    }

    #[test]
    fn codex_s_resets_are_read() {
        assert_eq!(
            reset(
                "You've hit your usage limit. Upgrade to Pro (https://openai.com/chatgpt/pricing) or try again in 2 hours 13 minutes."
            ),
            Some((2 * 3600 + 13 * 60, ResetSource::Relative))
        );
        assert_eq!(
            reset(
                "■ You've hit your usage limit. Upgrade to Pro or try again in 5 days 22 hours 11\nminutes."
            ),
            Some((5 * 86_400 + 22 * 3600 + 11 * 60, ResetSource::Relative))
        );
        assert_eq!(
            reset(
                "You've hit your usage limit. Upgrade to Plus to continue using Codex, or try again at Dec 5th, 2026 8:19 PM."
            ),
            Some((at("2026-12-05T20:19:00Z"), ResetSource::WallClock))
        );
        assert_eq!(
            reset(
                r#"{"error":{"type":"usage_limit_reached","message":"The usage limit has been reached","resets_at":1796130000,"resets_in_seconds":3600}}"#
            ),
            Some((3600, ResetSource::UnixTime))
        );
        assert_eq!(
            reset(r#"{"type":"usage_limit_reached","resets_in_seconds":120}"#),
            Some((120, ResetSource::Relative))
        );
    }

    #[test]
    fn gemini_s_quota_resets_are_read() {
        assert_eq!(
            reset(
                "You exceeded your current quota, please check your plan and billing details. Please retry in 27.5s."
            ),
            Some((28, ResetSource::Relative))
        );
        assert_eq!(
            reset("RESOURCE_EXHAUSTED (code 429): Individual quota reached. Resets in 2h39m52s."),
            Some((2 * 3600 + 39 * 60 + 52, ResetSource::Relative))
        );
        assert_eq!(
            reset(
                "Quota exceeded for quota metric 'Requests per day'; resets in 1 hour and 30 minutes"
            ),
            Some((5400, ResetSource::Relative))
        );
    }

    #[test]
    fn generic_resets_are_read() {
        assert_eq!(
            reset("usage limit reached; reset at 2026-12-01T15:00:00Z"),
            Some((3 * 3600, ResetSource::Rfc3339))
        );
        assert_eq!(
            reset("quota exhausted: resets at 2026-12-01T13:00:00+01:00"),
            None,
            "13:00+01:00 is noon UTC: now, not after it"
        );
        assert_eq!(
            reset("quota exhausted: resets at 2026-12-01 14:00:00.5+00:00"),
            Some((2 * 3600, ResetSource::Rfc3339))
        );
        for (text, secs) in [
            ("quota exhausted, resets in 90 seconds", 90),
            ("quota exhausted, resets in 90 minutes", 5400),
            ("quota exhausted, resets in 3 hours", 10_800),
            ("quota exhausted, resets in 1500ms", 2),
        ] {
            assert_eq!(reset(text), Some((secs, ResetSource::Relative)), "{text}");
        }
    }

    #[test]
    fn resets_past_too_far_or_unreadable_are_not_trusted() {
        for text in [
            // Past, and now.
            &format!("Claude AI usage limit reached|{}", NOW - 1)[..],
            &format!("Claude AI usage limit reached|{NOW}"),
            "usage limit reached; reset at 2026-11-30T12:00:00Z",
            // More than a week ahead.
            &format!(
                "Claude AI usage limit reached|{}",
                NOW + MAX_RESET_AHEAD_SECS + 1
            ),
            "You've hit your usage limit. try again in 8 days",
            "usage limit reached; reset at 2027-01-01T00:00:00Z",
            "You've hit your usage limit, or try again at Jan 5th, 2026 8:19 PM.",
            // Garbage and no time at all.
            "usage limit reached|soon",
            "usage limit reached, resets at 25pm",
            "usage limit reached, resets at 13pm",
            "usage limit reached, resets 5",
            "usage limit reached; reset at 2026-13-45T99:00:00Z",
            "quota exceeded, try again in a while",
            "usage limit reached, resets 3pm (Mars/Olympus_Mons)",
            "usage limit reached",
            "",
        ] {
            assert_eq!(reset(text), None, "{text:?}");
        }
    }

    #[test]
    fn a_short_rate_limit_is_not_a_usage_limit() {
        for text in [
            "Rate limited. Retry after 30 seconds.",
            "API Error: 429 · retry-after: 2",
            "rate limit exceeded, try again in 20 seconds",
            "the job resets in 5 minutes",
            "API Error: Server is temporarily limiting requests (not your usage limit) · try again in 5 minutes",
        ] {
            assert_eq!(reset(text), None, "{text:?}");
        }
        assert!(!mentions_quota("Rate limited"));
        assert!(mentions_quota("You've hit your usage limit"));
    }

    #[test]
    fn the_limit_is_at_most_a_week_ahead() {
        let week = format!(
            "Claude AI usage limit reached|{}",
            NOW + MAX_RESET_AHEAD_SECS
        );
        assert_eq!(
            reset(&week),
            Some((MAX_RESET_AHEAD_SECS, ResetSource::UnixTime))
        );
    }

    #[test]
    fn source_names_are_stable_and_match_serde() {
        for (index, source) in ResetSource::ALL.into_iter().enumerate() {
            // Exhaustive: a new source fails to compile here until listed.
            let position = match source {
                ResetSource::UnixTime => 0,
                ResetSource::Rfc3339 => 1,
                ResetSource::Relative => 2,
                ResetSource::WallClock => 3,
            };
            assert_eq!(position, index);
            assert_eq!(
                serde_json::to_value(source).unwrap(),
                serde_json::json!(source.as_str())
            );
        }
    }

    #[test]
    fn zones_come_from_the_bundled_database() {
        assert!(known_zone("Europe/Budapest"));
        assert!(known_zone("etc/gmt+5"));
        assert!(!known_zone("Mars/Olympus_Mons"));
    }
}
