//! Durations as plans write them: `500ms`, `30s`, `10m`, `2h`, `1h30m`.
//!
//! Whole numbers and units only, largest unit first and each unit once, so a
//! duration has one obvious spelling and never depends on float rounding.

use std::time::Duration;

/// Why a string is not a duration.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("it is empty; write a number with a unit, like \"10m\"")]
    Empty,
    #[error("{found:?} is not allowed; write whole numbers with units, like \"1h30m\"")]
    UnexpectedChar { found: char },
    #[error("a number has no unit; add one of ms, s, m or h, like \"10m\"")]
    MissingUnit,
    #[error("unit {unit:?} has no number before it; write it like \"10{unit}\"")]
    MissingNumber { unit: String },
    #[error("unknown unit {unit:?}; use ms, s, m or h")]
    UnknownUnit { unit: String },
    #[error("unit {unit:?} is out of order; write each unit once, largest first, like \"1h30m\"")]
    UnitOrder { unit: String },
    #[error("it is too long; the limit is about 584 million years")]
    Overflow,
}

/// Units from largest to smallest, with their length in milliseconds.
const UNITS: [(&str, u64); 4] = [("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1)];

/// Parses `1h30m`-style text; zero (`0s`) is accepted, callers that need a
/// positive duration check for it.
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    if text.is_empty() {
        return Err(DurationError::Empty);
    }
    let mut total_millis: u64 = 0;
    // Index into UNITS of the last unit seen; the next one must come after it.
    let mut previous_unit: Option<usize> = None;
    let mut rest = text;
    while !rest.is_empty() {
        let digits_len = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let (digits, after_digits) = rest.split_at(digits_len);
        let unit_len = after_digits
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(after_digits.len());
        let (unit, after_unit) = after_digits.split_at(unit_len);
        if digits.is_empty() {
            return Err(match after_digits.chars().next() {
                Some(_) if !unit.is_empty() => DurationError::MissingNumber {
                    unit: unit.to_owned(),
                },
                Some(found) => DurationError::UnexpectedChar { found },
                None => DurationError::Empty,
            });
        }
        if unit.is_empty() {
            return Err(match after_digits.chars().next() {
                Some(found) => DurationError::UnexpectedChar { found },
                None => DurationError::MissingUnit,
            });
        }
        let Some(unit_index) = UNITS.iter().position(|(name, _)| *name == unit) else {
            return Err(DurationError::UnknownUnit {
                unit: unit.to_owned(),
            });
        };
        if previous_unit.is_some_and(|previous| unit_index <= previous) {
            return Err(DurationError::UnitOrder {
                unit: unit.to_owned(),
            });
        }
        previous_unit = Some(unit_index);
        let count: u64 = digits.parse().map_err(|_| DurationError::Overflow)?;
        total_millis = count
            .checked_mul(UNITS[unit_index].1)
            .and_then(|millis| total_millis.checked_add(millis))
            .ok_or(DurationError::Overflow)?;
        rest = after_unit;
    }
    Ok(Duration::from_millis(total_millis))
}

/// Formats a duration the way [`parse_duration`] reads it, in whole
/// milliseconds (anything finer is dropped): `1h30m`, `1s500ms`, `0s`.
pub fn format_duration(duration: Duration) -> String {
    let mut millis = duration.as_millis();
    if millis == 0 {
        return "0s".to_owned();
    }
    let mut text = String::new();
    for (unit, unit_millis) in UNITS {
        let unit_millis = u128::from(unit_millis);
        let count = millis / unit_millis;
        if count > 0 {
            text.push_str(&count.to_string());
            text.push_str(unit);
            millis %= unit_millis;
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn plan_durations_parse() {
        let cases: &[(&str, Duration)] = &[
            ("500ms", Duration::from_millis(500)),
            ("30s", Duration::from_secs(30)),
            ("10m", Duration::from_secs(600)),
            ("2h", Duration::from_secs(7_200)),
            ("1h30m", Duration::from_secs(5_400)),
            ("1h1m1s1ms", Duration::from_millis(3_661_001)),
            ("0s", Duration::ZERO),
            ("0ms", Duration::ZERO),
            ("90m", Duration::from_secs(5_400)),
            ("007s", Duration::from_secs(7)),
            ("2h500ms", Duration::from_millis(7_200_500)),
        ];
        for (text, expected) in cases {
            assert_eq!(parse_duration(text), Ok(*expected), "{text}");
        }
    }

    #[test]
    fn plan_durations_refuse_malformed_text() {
        use DurationError::*;
        let cases: &[(&str, DurationError)] = &[
            ("", Empty),
            ("10", MissingUnit),
            ("1h30", MissingUnit),
            ("1.5m", UnexpectedChar { found: '.' }),
            ("-1s", UnexpectedChar { found: '-' }),
            ("+1s", UnexpectedChar { found: '+' }),
            ("10 m", UnexpectedChar { found: ' ' }),
            (" 10m", UnexpectedChar { found: ' ' }),
            ("10m ", UnexpectedChar { found: ' ' }),
            ("1h-30m", UnexpectedChar { found: '-' }),
            ("m", MissingNumber { unit: "m".into() }),
            ("1hm", UnknownUnit { unit: "hm".into() }),
            ("10d", UnknownUnit { unit: "d".into() }),
            ("10M", UnknownUnit { unit: "M".into() }),
            ("10sec", UnknownUnit { unit: "sec".into() }),
            ("30m1h", UnitOrder { unit: "h".into() }),
            ("1m1m", UnitOrder { unit: "m".into() }),
            ("99999999999999999999h", Overflow),
            ("5124095576030432h", Overflow),
            ("١s", UnexpectedChar { found: '١' }),
        ];
        for (text, expected) in cases {
            assert_eq!(parse_duration(text).as_ref(), Err(expected), "{text:?}");
        }
    }

    #[test]
    fn plan_durations_format_canonically() {
        assert_eq!(format_duration(Duration::ZERO), "0s");
        assert_eq!(format_duration(Duration::from_secs(5_400)), "1h30m");
        assert_eq!(format_duration(Duration::from_millis(1_500)), "1s500ms");
        assert_eq!(format_duration(Duration::from_secs(600)), "10m");
        assert_eq!(format_duration(Duration::from_micros(1_999)), "1ms");
    }

    proptest! {
        #[test]
        fn plan_duration_format_parse_round_trips(millis in any::<u64>()) {
            let duration = Duration::from_millis(millis);
            prop_assert_eq!(parse_duration(&format_duration(duration)), Ok(duration));
        }

        #[test]
        fn plan_duration_parse_is_total(text in "[0-9hms .+-]{0,12}") {
            // Never panics; and anything accepted formats back to the same value.
            if let Ok(duration) = parse_duration(&text) {
                prop_assert_eq!(parse_duration(&format_duration(duration)), Ok(duration));
            }
        }
    }
}
