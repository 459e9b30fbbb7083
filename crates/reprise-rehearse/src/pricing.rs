//! What a rehearsed request would have cost: a price table per model, the
//! shipped list prices (with where and when they were taken), prices a
//! scenario's `prices:` section or `--price` set over them, and the sum over
//! a request's token classes. Pure.
//!
//! Prices are micro-dollars per million tokens, so a table entry of `3_000_000`
//! is $3 per million. A request is priced from the usage the server reported
//! for it: fresh input, cache writes (five-minute and one-hour), cache reads
//! and output, each at its own rate, as the providers bill them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_saphyr::{Location, Spanned};

/// When and from where [`LIST_PRICES`] were taken.
pub const LIST_PRICES_TAKEN: &str = "2026-12-02: Anthropic models from the price table bundled in Claude Code 2.1.197 (taken 2026-12-01); OpenAI gpt-5 family from OpenAI's published list prices (August 2025); gpt-5.5, gemini-3.1-pro-preview and gemini-3.5-flash-lite as copies of the providers' pricing pages gave them (looked up 2026-12-02, no provider page itself at hand)";

/// One model's rates, micro-dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelPrice {
    pub input: u64,
    pub output: u64,
    /// A cache write with the five-minute lifetime.
    pub cache_write: u64,
    /// A cache write with the one-hour lifetime.
    pub cache_write_1h: u64,
    pub cache_read: u64,
}

const fn anthropic(input: u64, output: u64) -> ModelPrice {
    // Anthropic's ratios: writes 1.25x (5 min) and 2x (1 h), reads 0.1x.
    ModelPrice {
        input,
        output,
        cache_write: input * 5 / 4,
        cache_write_1h: input * 2,
        cache_read: input / 10,
    }
}

const fn openai(input: u64, output: u64, cache_read: u64) -> ModelPrice {
    // OpenAI (and Google, for the implicit caching the Gemini API does) bills
    // no cache writes: the first sight of a prefix is input.
    ModelPrice {
        input,
        output,
        cache_write: input,
        cache_write_1h: input,
        cache_read,
    }
}

/// The shipped list: a model id matches an entry equal to it or starting
/// with it and a `-` (a dated or suffixed id).
pub const LIST_PRICES: &[(&str, ModelPrice)] = &[
    ("claude-3-5-haiku", anthropic(800_000, 4_000_000)),
    ("claude-haiku-4-5", anthropic(1_000_000, 5_000_000)),
    ("claude-3-5-sonnet", anthropic(3_000_000, 15_000_000)),
    ("claude-3-7-sonnet", anthropic(3_000_000, 15_000_000)),
    ("claude-sonnet-4", anthropic(3_000_000, 15_000_000)),
    ("claude-sonnet-5", anthropic(3_000_000, 15_000_000)),
    ("claude-opus-4-20250514", anthropic(15_000_000, 75_000_000)),
    ("claude-opus-4-0", anthropic(15_000_000, 75_000_000)),
    ("claude-opus-4-1", anthropic(15_000_000, 75_000_000)),
    ("claude-opus-4-5", anthropic(5_000_000, 25_000_000)),
    ("claude-opus-4-6", anthropic(5_000_000, 25_000_000)),
    ("claude-opus-4-7", anthropic(5_000_000, 25_000_000)),
    ("claude-opus-4-8", anthropic(5_000_000, 25_000_000)),
    ("claude-fable-5", anthropic(10_000_000, 50_000_000)),
    ("claude-mythos-5", anthropic(10_000_000, 50_000_000)),
    ("gpt-5", openai(1_250_000, 10_000_000, 125_000)),
    ("gpt-5-codex", openai(1_250_000, 10_000_000, 125_000)),
    ("gpt-5.1", openai(1_250_000, 10_000_000, 125_000)),
    ("gpt-5.1-codex", openai(1_250_000, 10_000_000, 125_000)),
    ("gpt-5-mini", openai(250_000, 2_000_000, 25_000)),
    ("gpt-5-nano", openai(50_000, 400_000, 5_000)),
    // Codex's pinned default. $5 in, $0.50 cached, $30 out, for prompts up
    // to 272K tokens (longer ones are billed at about twice the input rate,
    // not modelled), as several copies of OpenAI's pricing page agreed in
    // 2026; one page said $2/$8, taken as wrong.
    ("gpt-5.5", openai(5_000_000, 30_000_000, 500_000)),
    // Gemini CLI's pinned default. $2 in, $0.20 cached, $12 out, for prompts
    // up to 200K tokens ($4/$18 above, not modelled), as listings copying
    // Google's Gemini API pricing page gave it.
    (
        "gemini-3.1-pro-preview",
        openai(2_000_000, 12_000_000, 200_000),
    ),
    // Gemini CLI's pinned router and utility model. $0.30 in, $0.03 cached,
    // $2.50 out: one reseller's list, which says it matches Google's own
    // (stable since July 2026); no second source was found.
    ("gemini-3.5-flash-lite", openai(300_000, 2_500_000, 30_000)),
];

/// The token classes of one request (or a sum of them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenUsage {
    /// Input billed at the full rate: neither written to nor read from a cache.
    pub fresh_input: u64,
    pub cache_write: u64,
    pub cache_write_1h: u64,
    pub cache_read: u64,
    pub output: u64,
}

impl TokenUsage {
    pub fn add(&mut self, other: &Self) {
        self.fresh_input += other.fresh_input;
        self.cache_write += other.cache_write;
        self.cache_write_1h += other.cache_write_1h;
        self.cache_read += other.cache_read;
        self.output += other.output;
    }

    /// Every input token, however billed.
    pub fn input(&self) -> u64 {
        self.fresh_input + self.cache_write + self.cache_write_1h + self.cache_read
    }
}

impl ModelPrice {
    /// The cost of `usage` in millionths of a micro-dollar (exact; divide by
    /// a million, rounding up, once a sum is complete).
    pub fn cost_pico_usd(&self, usage: &TokenUsage) -> u128 {
        let class = |tokens: u64, rate: u64| u128::from(tokens) * u128::from(rate);
        class(usage.fresh_input, self.input)
            + class(usage.cache_write, self.cache_write)
            + class(usage.cache_write_1h, self.cache_write_1h)
            + class(usage.cache_read, self.cache_read)
            + class(usage.output, self.output)
    }
}

/// Rounds a sum of [`ModelPrice::cost_pico_usd`] up to micro-dollars.
pub fn micro_usd(pico: u128) -> u64 {
    u64::try_from(pico.div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

/// The table a rehearsal prices with: overrides first, then the list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PriceTable {
    /// Set for every model (`--price IN/OUT`).
    pub all: Option<ModelPrice>,
    /// Per model, from `--price MODEL=...` and the scenario's `prices:`,
    /// tried before the list.
    pub models: Vec<(String, ModelPrice)>,
    /// The shipped list ([`LIST_PRICES`]), or the one a stored table was
    /// written with.
    pub list: Vec<(String, ModelPrice)>,
    /// When and from where `list` was taken ([`LIST_PRICES_TAKEN`]).
    pub list_taken: String,
}

impl Default for PriceTable {
    /// The shipped list and no overrides.
    fn default() -> Self {
        Self {
            all: None,
            models: Vec::new(),
            list: LIST_PRICES
                .iter()
                .map(|(model, price)| ((*model).to_owned(), *price))
                .collect(),
            list_taken: LIST_PRICES_TAKEN.to_owned(),
        }
    }
}

/// The version of the stored price table ([`PriceTable::to_stored`]).
pub const STORED_PRICES_FORMAT: u32 = 1;

/// Why a stored price table could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoredPricesError {
    #[error(
        "it is format {found}, newer than this reprise reads ({STORED_PRICES_FORMAT}): upgrade reprise"
    )]
    Newer { found: u32 },
    #[error("it is not a stored price table: {0}")]
    Malformed(String),
}

/// A price table as a rehearsal stores it beside its request log, so a
/// later report prices the run as the rehearsal did.
#[derive(Serialize, Deserialize)]
struct StoredPrices {
    format: u32,
    #[serde(flatten)]
    table: PriceTable,
}

#[derive(Deserialize)]
struct StoredFormat {
    format: u32,
}

fn model_matches(model: &str, key: &str) -> bool {
    model == key
        || model
            .strip_prefix(key)
            .is_some_and(|rest| rest.starts_with('-'))
}

impl PriceTable {
    /// The price for `model`: an override for every model, else the longest
    /// matching entry of the overrides, else of the shipped list.
    pub fn price(&self, model: &str) -> Option<ModelPrice> {
        if let Some(all) = self.all {
            return Some(all);
        }
        let longest = |entries: &mut dyn Iterator<Item = (&str, ModelPrice)>| {
            entries
                .filter(|(key, _)| model_matches(model, key))
                .max_by_key(|(key, _)| key.len())
                .map(|(_, price)| price)
        };
        longest(
            &mut self
                .models
                .iter()
                .map(|(key, price)| (key.as_str(), *price)),
        )
        .or_else(|| longest(&mut self.list.iter().map(|(key, price)| (key.as_str(), *price))))
    }

    /// Whether anything is set over the list.
    pub fn overridden(&self) -> bool {
        self.all.is_some() || !self.models.is_empty()
    }

    /// The table as JSON, with its format.
    pub fn to_stored(&self) -> String {
        serde_json::to_string(&StoredPrices {
            format: STORED_PRICES_FORMAT,
            table: self.clone(),
        })
        .expect("a price table serialises")
    }

    /// Reads a table [`Self::to_stored`] wrote.
    pub fn from_stored(text: &str) -> Result<Self, StoredPricesError> {
        let malformed = |err: serde_json::Error| StoredPricesError::Malformed(err.to_string());
        let StoredFormat { format } = serde_json::from_str(text).map_err(malformed)?;
        if format > STORED_PRICES_FORMAT {
            return Err(StoredPricesError::Newer { found: format });
        }
        let stored: StoredPrices = serde_json::from_str(text).map_err(malformed)?;
        Ok(stored.table)
    }
}

/// Why a price could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PriceError(pub String);

fn dollars(text: &str) -> Option<u64> {
    let text = text.trim();
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    if whole.is_empty() && fraction.is_empty()
        || fraction.len() > 6
        || !whole
            .chars()
            .chain(fraction.chars())
            .all(|c| c.is_ascii_digit())
    {
        return None;
    }
    let whole: u64 = if whole.is_empty() {
        0
    } else {
        whole.parse().ok()?
    };
    let fraction: u64 = format!("{fraction:0<6}").parse().ok()?;
    whole.checked_mul(1_000_000)?.checked_add(fraction)
}

/// Reads `IN/OUT[/WRITE/READ]`, dollars per million tokens; without the
/// cache rates, writes cost 1.25x input (2x for the one-hour lifetime) and
/// reads 0.1x, Anthropic's ratios.
pub fn parse_price(text: &str) -> Result<ModelPrice, PriceError> {
    let bad = || {
        PriceError(format!(
            "price {text:?} is not IN/OUT or IN/OUT/CACHE_WRITE/CACHE_READ dollars per million tokens; write e.g. 3/15 or 3/15/3.75/0.3"
        ))
    };
    let parts: Vec<u64> = text
        .split('/')
        .map(|part| dollars(part).ok_or_else(bad))
        .collect::<Result<_, _>>()?;
    match parts.as_slice() {
        [input, output] => Ok(anthropic(*input, *output)),
        [input, output, write, read] => Ok(ModelPrice {
            input: *input,
            output: *output,
            cache_write: *write,
            cache_write_1h: input * 2,
            cache_read: *read,
        }),
        _ => Err(bad()),
    }
}

/// A scenario's `prices:` section: per model, dollars per million tokens.
///
/// ```yaml
/// prices:
///   claude-sonnet-4-5: { input: 3, output: 15, cache_write: 3.75, cache_write_1h: 6, cache_read: 0.3 }
///   gpt-5.5: { input: 1.25, output: 10, cache_read: 0.125 }
/// ```
#[derive(Debug, Deserialize)]
#[serde(transparent)]
pub(crate) struct PriceFile(BTreeMap<String, Spanned<PriceEntry>>);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PriceEntry {
    input: Spanned<f64>,
    output: Spanned<f64>,
    cache_write: Option<Spanned<f64>>,
    cache_write_1h: Option<Spanned<f64>>,
    cache_read: Option<Spanned<f64>>,
}

impl PriceFile {
    /// The entries, or where one is wrong: its position, the key and why.
    pub(crate) fn resolve(self) -> Result<Vec<(String, ModelPrice)>, (Location, String, String)> {
        self.0
            .into_iter()
            .map(|(model, entry)| {
                let key = |name: &str| format!("prices.{model}.{name}");
                let rate = |value: &Spanned<f64>, name: &str| {
                    let micro = value.value * 1_000_000.0;
                    if !(0.0..1e12).contains(&micro) {
                        return Err((
                            value.referenced,
                            key(name),
                            "must be a number of dollars per million tokens, 0 or more".to_owned(),
                        ));
                    }
                    // Whole micro-dollars: finer rates are not billed.
                    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                    Ok(micro.round() as u64)
                };
                let PriceEntry {
                    input,
                    output,
                    cache_write,
                    cache_write_1h,
                    cache_read,
                } = entry.value;
                let base = anthropic(rate(&input, "input")?, rate(&output, "output")?);
                let or = |value: Option<Spanned<f64>>, name: &str, default: u64| {
                    value.map_or(Ok(default), |value| rate(&value, name))
                };
                let price = ModelPrice {
                    cache_write: or(cache_write, "cache_write", base.cache_write)?,
                    cache_write_1h: or(cache_write_1h, "cache_write_1h", base.cache_write_1h)?,
                    cache_read: or(cache_read, "cache_read", base.cache_read)?,
                    ..base
                };
                Ok((model, price))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dated_ids_find_their_family_and_unknown_models_none() {
        let table = PriceTable::default();
        let sonnet = table.price("claude-sonnet-4-5-20250929").unwrap();
        assert_eq!(sonnet.input, 3_000_000);
        assert_eq!(sonnet.cache_write, 3_750_000);
        assert_eq!(sonnet.cache_write_1h, 6_000_000);
        assert_eq!(sonnet.cache_read, 300_000);
        assert_eq!(
            table.price("claude-opus-4-1-20250805").unwrap().input,
            15_000_000
        );
        assert_eq!(table.price("claude-opus-4-8").unwrap().input, 5_000_000);
        assert_eq!(table.price("gpt-5-codex").unwrap().cache_read, 125_000);
        assert_eq!(
            table.price("gpt-5.5").unwrap().input,
            5_000_000,
            "gpt-5's price is not gpt-5.5's"
        );
        assert_eq!(table.price("gpt-5.4"), None);
        let table = PriceTable {
            models: vec![("gpt-5.5".to_owned(), parse_price("2/8").unwrap())],
            ..PriceTable::default()
        };
        assert_eq!(table.price("gpt-5.5").unwrap().input, 2_000_000);
    }

    #[test]
    fn the_pinned_clis_default_models_have_a_price() {
        let table = PriceTable::default();
        for model in ["gpt-5.5", "gemini-3.1-pro-preview", "gemini-3.5-flash-lite"] {
            assert!(table.price(model).is_some(), "{model}");
        }
    }

    #[test]
    fn a_stored_table_prices_as_it_did_and_a_newer_one_is_refused() {
        let mut table = PriceTable {
            all: None,
            models: vec![("gpt-5.5".to_owned(), parse_price("2/8").unwrap())],
            list: vec![("claude-sonnet-4".to_owned(), parse_price("3/15").unwrap())],
            list_taken: "then".to_owned(),
        };
        let read = PriceTable::from_stored(&table.to_stored()).unwrap();
        assert_eq!(read, table);
        assert_eq!(read.price("claude-haiku-4-5"), None, "only the stored list");
        table.all = Some(parse_price("1/1").unwrap());
        let newer = table.to_stored().replace("\"format\":1", "\"format\":2");
        assert_eq!(
            PriceTable::from_stored(&newer).unwrap_err(),
            StoredPricesError::Newer { found: 2 }
        );
        assert!(matches!(
            PriceTable::from_stored("{}"),
            Err(StoredPricesError::Malformed(_))
        ));
    }

    #[test]
    fn a_request_is_priced_per_token_class() {
        let price = parse_price("3/15").unwrap();
        let usage = TokenUsage {
            fresh_input: 1_000,
            cache_write: 10_000,
            cache_write_1h: 0,
            cache_read: 100_000,
            output: 500,
        };
        // 1000*3 + 10000*3.75 + 100000*0.3 + 500*15 = 3000+37500+30000+7500 = 78000 µ$ per M
        assert_eq!(micro_usd(price.cost_pico_usd(&usage)), 78_000);
        assert_eq!(
            parse_price("1.25/10/1.25/0.125").unwrap().cache_read,
            125_000
        );
        assert!(parse_price("3").is_err());
        assert!(parse_price("3/x").is_err());
        assert!(parse_price("3/15/1").is_err());
    }
}
