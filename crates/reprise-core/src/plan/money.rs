//! Money as plans write it: a quoted decimal string of dollars, like `"5.00"`,
//! held as integer micro-dollars.
//!
//! A string, because a YAML float would round before reprise saw it; micro-
//! dollars, because integers add up exactly and stay within the 2^53 that
//! canonical JSON records can carry.
//!
//! And money as runs report it: a [`Spend`] keeps what is known apart from
//! what nobody reported, so an unknown cost is never added in as zero.

/// Micro-dollars in a dollar.
pub const MICRO_USD_PER_USD: u64 = 1_000_000;

/// The largest amount in micro-dollars: 2^53 - 1, the largest integer every
/// JSON reader holds exactly.
pub const MAX_MICRO_USD: u64 = (1 << 53) - 1;

/// The most decimal places an amount may have: one micro-dollar.
const MAX_DECIMAL_PLACES: usize = 6;

/// Why a string is not an amount of money.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MoneyError {
    #[error("it is empty; write a decimal like \"5.00\"")]
    Empty,
    #[error("it has a sign; write a non-negative decimal without a sign, like \"5.00\"")]
    Sign,
    #[error("it has an exponent; write the plain decimal, like \"1500.00\"")]
    Exponent,
    #[error("it has {places} decimal places; use at most 6 (0.000001 is the smallest unit)")]
    TooManyDecimals { places: usize },
    #[error("a decimal point needs digits on both sides; write it like \"0.50\"")]
    MissingDigits,
    #[error("{found:?} is not allowed; write digits with one optional '.', like \"5.00\"")]
    UnexpectedChar { found: char },
    #[error("it is too large; the limit is 9007199254.740991")]
    TooLarge,
}

/// Parses a non-negative decimal string of dollars (`"5"`, `"5.00"`,
/// `"0.000001"`) into micro-dollars.
pub fn parse_micro_usd(text: &str) -> Result<u64, MoneyError> {
    let Some(first) = text.chars().next() else {
        return Err(MoneyError::Empty);
    };
    if matches!(first, '+' | '-') {
        return Err(MoneyError::Sign);
    }
    let (whole, fraction) = match text.split_once('.') {
        Some((whole, fraction)) => (whole, Some(fraction)),
        None => (text, None),
    };
    check_digits(whole)?;
    let fraction = fraction.unwrap_or("");
    check_digits(fraction)?;
    if whole.is_empty() || (text.ends_with('.') && fraction.is_empty()) {
        return Err(MoneyError::MissingDigits);
    }
    if fraction.len() > MAX_DECIMAL_PLACES {
        return Err(MoneyError::TooManyDecimals {
            places: fraction.len(),
        });
    }
    let whole: u64 = whole.parse().map_err(|_| MoneyError::TooLarge)?;
    let mut fraction_micro: u64 = 0;
    let mut place_value = MICRO_USD_PER_USD / 10;
    for digit in fraction.bytes() {
        fraction_micro += u64::from(digit - b'0') * place_value;
        place_value /= 10;
    }
    whole
        .checked_mul(MICRO_USD_PER_USD)
        .and_then(|micro| micro.checked_add(fraction_micro))
        .filter(|&micro| micro <= MAX_MICRO_USD)
        .ok_or(MoneyError::TooLarge)
}

/// Refuses anything but ASCII digits, naming the first offender.
fn check_digits(text: &str) -> Result<(), MoneyError> {
    match text.chars().find(|c| !c.is_ascii_digit()) {
        None => Ok(()),
        Some('e' | 'E') => Err(MoneyError::Exponent),
        Some('+' | '-') => Err(MoneyError::Sign),
        Some(found) => Err(MoneyError::UnexpectedChar { found }),
    }
}

/// Formats micro-dollars as dollars with at least two decimals and no
/// trailing zeros beyond them: `5.00`, `1.50`, `0.000001`.
pub fn format_micro_usd(micro_usd: u64) -> String {
    let whole = micro_usd / MICRO_USD_PER_USD;
    let fraction = format!("{:06}", micro_usd % MICRO_USD_PER_USD);
    let kept = fraction.trim_end_matches('0').len().max(2);
    format!("{whole}.{}", &fraction[..kept])
}

/// What some attempts cost, as far as anyone reported it: the sum of the
/// figures that are known and how many attempts reported none. A total with
/// an unknown part is itself unknown; the known part is a floor, never the
/// total.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Spend {
    pub known_micro_usd: u64,
    /// Attempts whose cost nobody reported.
    pub unknown: u64,
}

impl Spend {
    /// Adds one attempt's figure: an amount, or `None` when none was reported.
    pub fn add(&mut self, cost_micro_usd: Option<u64>) {
        match cost_micro_usd {
            Some(micro_usd) => {
                self.known_micro_usd = self.known_micro_usd.saturating_add(micro_usd);
            }
            None => self.unknown += 1,
        }
    }

    /// Adds everything `other` holds.
    pub fn merge(&mut self, other: Self) {
        self.known_micro_usd = self.known_micro_usd.saturating_add(other.known_micro_usd);
        self.unknown += other.unknown;
    }

    /// The whole amount, when every part of it is known.
    #[must_use]
    pub fn total_micro_usd(&self) -> Option<u64> {
        (self.unknown == 0).then_some(self.known_micro_usd)
    }
}

impl FromIterator<Option<u64>> for Spend {
    fn from_iter<I: IntoIterator<Item = Option<u64>>>(costs: I) -> Self {
        let mut spend = Self::default();
        for cost in costs {
            spend.add(cost);
        }
        spend
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_spend_with_an_unknown_part_has_no_total() {
        let known: Spend = [Some(50_000), Some(10_000)].into_iter().collect();
        assert_eq!(known.total_micro_usd(), Some(60_000));
        let mut mixed: Spend = [Some(60_000), None, None].into_iter().collect();
        assert_eq!(
            mixed,
            Spend {
                known_micro_usd: 60_000,
                unknown: 2
            }
        );
        assert_eq!(mixed.total_micro_usd(), None, "the known part is a floor");
        mixed.merge(known);
        assert_eq!((mixed.known_micro_usd, mixed.unknown), (120_000, 2));
        assert_eq!(Spend::default().total_micro_usd(), Some(0), "nothing ran");
    }

    #[test]
    fn plan_money_parses_decimal_strings() {
        let cases: &[(&str, u64)] = &[
            ("5", 5_000_000),
            ("5.00", 5_000_000),
            ("5.5", 5_500_000),
            ("0.000001", 1),
            ("0", 0),
            ("0.0", 0),
            ("00012.340", 12_340_000),
            ("1.234567", 1_234_567),
            ("9007199254.740991", MAX_MICRO_USD),
        ];
        for (text, expected) in cases {
            assert_eq!(parse_micro_usd(text), Ok(*expected), "{text}");
        }
    }

    #[test]
    fn plan_money_refuses_everything_else() {
        use MoneyError::*;
        let cases: &[(&str, MoneyError)] = &[
            ("", Empty),
            ("-1", Sign),
            ("+1", Sign),
            ("1e3", Exponent),
            ("1.5E2", Exponent),
            ("1e-3", Exponent),
            ("0.0000001", TooManyDecimals { places: 7 }),
            ("1.", MissingDigits),
            (".5", MissingDigits),
            (".", MissingDigits),
            ("abc", UnexpectedChar { found: 'a' }),
            ("1.2.3", UnexpectedChar { found: '.' }),
            ("1,5", UnexpectedChar { found: ',' }),
            (" 5", UnexpectedChar { found: ' ' }),
            ("5 ", UnexpectedChar { found: ' ' }),
            ("$5", UnexpectedChar { found: '$' }),
            ("1_000", UnexpectedChar { found: '_' }),
            ("inf", UnexpectedChar { found: 'i' }),
            ("9007199254.740992", TooLarge),
            ("99999999999999999999999", TooLarge),
            ("18446744073709.551615", TooLarge),
        ];
        for (text, expected) in cases {
            assert_eq!(parse_micro_usd(text).as_ref(), Err(expected), "{text:?}");
        }
    }

    #[test]
    fn plan_money_formats_with_two_to_six_decimals() {
        assert_eq!(format_micro_usd(0), "0.00");
        assert_eq!(format_micro_usd(5_000_000), "5.00");
        assert_eq!(format_micro_usd(1_500_000), "1.50");
        assert_eq!(format_micro_usd(1), "0.000001");
        assert_eq!(format_micro_usd(1_234_567), "1.234567");
        assert_eq!(format_micro_usd(MAX_MICRO_USD), "9007199254.740991");
    }

    proptest! {
        #[test]
        fn plan_money_format_parse_round_trips(micro_usd in 0..=MAX_MICRO_USD) {
            prop_assert_eq!(parse_micro_usd(&format_micro_usd(micro_usd)), Ok(micro_usd));
        }

        #[test]
        fn plan_money_parse_is_total(text in "[0-9.eE+ -]{0,24}") {
            if let Ok(micro_usd) = parse_micro_usd(&text) {
                prop_assert!(micro_usd <= MAX_MICRO_USD);
                prop_assert_eq!(parse_micro_usd(&format_micro_usd(micro_usd)), Ok(micro_usd));
            }
        }
    }
}
