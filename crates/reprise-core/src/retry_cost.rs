//! What each retry mode is predicted to cost, and the mode
//! `retry_policy: auto` asks for: a pure function of the CLI's caching, the
//! session's size, the time since its last request and the diagnosis.
//!
//! Costs are in fresh-input-token equivalents: one token sent uncached is
//! 1, one read from the provider's cache its read price over the input
//! price (0.1 for all three providers' list prices), one written to the
//! cache its write price over the input price (1.25 for Anthropic; OpenAI
//! and Gemini charge no more than fresh input). A price table turns them
//! into dollars; the choice needs only their order.
//!
//! With `P` the CLI's own prefix (system prompt and tools), `H` the
//! session's history, `read` and `write` the factors above:
//!
//! | mode | the session's prompt is cached | only the CLI's prefix is | nothing is |
//! |---|---|---|---|
//! | warm, fork | `(P + H) * read` | `P * read + H * write` | `(P + H) * write` |
//! | cold | — | `P * read + H * write` | `(P + H) * write` |
//!
//! The session's prompt is cached for a resume (or a fork) when the CLI sends
//! it as the provider cached it (the mode's column of [`ResumeCache`]) and the
//! last request went out less than the cache's lifetime ago; the prefix is,
//! within the lifetime, when a new session starts with the same system
//! prompt and tools under the same cache key. So a resume never costs more
//! than a cold retry, and costs the same when its CLI cannot keep the cache. A cold retry must learn again what the failed attempt had learned
//! (re-read its files), so its `H` is the same history built afresh, which
//! is the least it can cost: the real cold retry costs more, since it reads
//! its growing conversation once per request.
//!
//! `auto` never asks for more than the adapter can do (the decision table
//! in the retry module's `decide` then applies as to any request), and:
//!
//! | # | condition | mode | reason |
//! |---|---|---|---|
//! | 1 | capability none | cold | `no_resume` |
//! | 2 | the same judged failure twice or more in a row | cold | `fresh_start` |
//! | 3 | the session's size is unknown | warm | `size_unknown` |
//! | 4 | otherwise | the cheapest; a tie goes to warm, then fork | `cheapest` |

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::retry_mode::{Capability, RetryMode};

/// How a CLI's resumed sessions meet the provider's prompt cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResumeCache {
    /// A resumed session's first request starts with the prompt the
    /// session's last request sent, byte for byte.
    pub warm_keeps: bool,
    /// The same for a forked session.
    pub fork_keeps: bool,
    /// A new session's first request starts with the same system prompt
    /// and tools as the failed attempt's (and is cached under the same key).
    pub cold_keeps_prefix: bool,
    /// The CLI's own prefix (system prompt and tools), in tokens.
    pub prefix_tokens: u64,
    /// Cache read and write prices over the fresh input price, per mille.
    pub read_per_mille: u64,
    pub write_per_mille: u64,
    /// How long the provider keeps an unused prefix.
    pub lifetime: Duration,
}

/// Everything `choose` looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CostInput {
    pub capability: Capability,
    /// `None` for an agent that reports no caching (a command).
    pub cache: Option<ResumeCache>,
    /// The session's history in tokens, when it can be measured.
    pub history_tokens: Option<u64>,
    /// Since the failed attempt's last request (its end).
    pub since_last_request: Duration,
    /// The same judged failure this many times in a row, the latest included.
    pub same_failure_in_a_row: u32,
}

/// Each mode's predicted cost, in fresh-input-token equivalents; `None` for
/// a mode the adapter cannot run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Predicted {
    pub warm: Option<u64>,
    pub fork: Option<u64>,
    pub cold: u64,
}

impl Predicted {
    /// The predicted cost of `mode`, when it can run.
    pub fn of(&self, mode: RetryMode) -> Option<u64> {
        match mode {
            RetryMode::Warm => self.warm,
            RetryMode::Fork => self.fork,
            RetryMode::Cold => Some(self.cold),
        }
    }

    /// The modes that can run and their costs, cheapest first (a tie in
    /// the order warm, fork, cold).
    pub fn ranked(&self) -> Vec<(RetryMode, u64)> {
        let mut ranked: Vec<(RetryMode, u64)> = [RetryMode::Warm, RetryMode::Fork, RetryMode::Cold]
            .into_iter()
            .filter_map(|mode| self.of(mode).map(|cost| (mode, cost)))
            .collect();
        ranked.sort_by_key(|(_, cost)| *cost);
        ranked
    }

    /// `warm 5.0k, fork 5.0k, cold 51.0k input-token equivalents`.
    pub fn describe(&self) -> String {
        let listed: Vec<String> = self
            .ranked()
            .into_iter()
            .map(|(mode, cost)| format!("{mode} {}", thousands(cost)))
            .collect();
        format!("{} input-token equivalents", listed.join(", "))
    }

    /// As a map from mode name to cost, for records.
    pub fn to_map(&self) -> BTreeMap<String, u64> {
        self.ranked()
            .into_iter()
            .map(|(mode, cost)| (mode.as_str().to_owned(), cost))
            .collect()
    }
}

/// Why `auto` asked for the mode it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AutoReason {
    NoResume,
    FreshStart,
    SizeUnknown,
    Cheapest,
}

impl AutoReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoResume => "no_resume",
            Self::FreshStart => "fresh_start",
            Self::SizeUnknown => "size_unknown",
            Self::Cheapest => "cheapest",
        }
    }
}

/// What `auto` asks for, why, and what every mode was predicted to cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AutoChoice {
    pub mode: RetryMode,
    pub reason: AutoReason,
    /// `None` when the session's size is unknown.
    pub predicted: Option<Predicted>,
    /// Whether the provider still holds the session's prompt (by its lifetime).
    pub cache_alive: bool,
}

impl AutoChoice {
    /// One line for people: `auto chose cold (cheapest: cold 41.0k, warm
    /// 50.0k input-token equivalents; the cache expired)`.
    pub fn describe(&self) -> String {
        let why = match self.reason {
            AutoReason::NoResume => "the agent cannot resume a session".to_owned(),
            AutoReason::FreshStart => "the same failure twice in a row: a fresh session".to_owned(),
            AutoReason::SizeUnknown => "the session's size is unknown".to_owned(),
            AutoReason::Cheapest => "cheapest".to_owned(),
        };
        let costs = self
            .predicted
            .map(|predicted| {
                format!(
                    ": {}; {}",
                    predicted.describe(),
                    if self.cache_alive {
                        "the cache holds the session"
                    } else {
                        "the cache expired"
                    }
                )
            })
            .unwrap_or_default();
        format!("auto chose {} ({why}{costs})", self.mode)
    }
}

fn thousands(tokens: u64) -> String {
    if tokens < 1000 {
        tokens.to_string()
    } else {
        format!("{:.1}k", tokens as f64 / 1000.0)
    }
}

/// The same judged failure this many times in a row calls for a fresh start.
pub const FRESH_START_AFTER: u32 = 2;

fn times(tokens: u64, per_mille: u64) -> u64 {
    let product = u128::from(tokens) * u128::from(per_mille);
    u64::try_from(product.div_ceil(1000)).unwrap_or(u64::MAX)
}

/// Each mode's predicted cost for a session of `history` tokens.
pub fn predict(input: &CostInput, history: u64) -> Predicted {
    let cache = input.cache.unwrap_or(ResumeCache {
        warm_keeps: false,
        fork_keeps: false,
        cold_keeps_prefix: false,
        prefix_tokens: 0,
        read_per_mille: 1000,
        write_per_mille: 1000,
        lifetime: Duration::ZERO,
    });
    let alive = input.cache.is_some() && input.since_last_request < cache.lifetime;
    let whole = cache.prefix_tokens.saturating_add(history);
    let cold = if cache.cold_keeps_prefix && alive {
        times(cache.prefix_tokens, cache.read_per_mille)
            .saturating_add(times(history, cache.write_per_mille))
    } else {
        times(whole, cache.write_per_mille)
    };
    let resumed = |keeps: bool| {
        if keeps && alive {
            times(whole, cache.read_per_mille)
        } else {
            cold
        }
    };
    Predicted {
        warm: (input.capability != Capability::None).then(|| resumed(cache.warm_keeps)),
        fork: (input.capability == Capability::Fork).then(|| resumed(cache.fork_keeps)),
        cold,
    }
}

/// The mode `retry_policy: auto` asks for (the table in the module docs).
pub fn choose(input: &CostInput) -> AutoChoice {
    let alive = input
        .cache
        .is_some_and(|cache| input.since_last_request < cache.lifetime);
    let predicted = input.history_tokens.map(|history| predict(input, history));
    let (mode, reason) = if input.capability == Capability::None {
        (RetryMode::Cold, AutoReason::NoResume)
    } else if input.same_failure_in_a_row >= FRESH_START_AFTER {
        (RetryMode::Cold, AutoReason::FreshStart)
    } else if let Some(predicted) = &predicted {
        let (mode, _) = predicted.ranked()[0];
        (mode, AutoReason::Cheapest)
    } else {
        (RetryMode::Warm, AutoReason::SizeUnknown)
    };
    AutoChoice {
        mode,
        reason,
        predicted,
        cache_alive: alive,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: Duration = Duration::from_secs(60);

    fn cache(warm: bool, fork: bool, cold_prefix: bool, write: u64) -> ResumeCache {
        ResumeCache {
            warm_keeps: warm,
            fork_keeps: fork,
            cold_keeps_prefix: cold_prefix,
            prefix_tokens: 10_000,
            read_per_mille: 100,
            write_per_mille: write,
            lifetime: 5 * MINUTE,
        }
    }

    fn input(capability: Capability, cache: Option<ResumeCache>) -> CostInput {
        CostInput {
            capability,
            cache,
            history_tokens: Some(40_000),
            since_last_request: MINUTE,
            same_failure_in_a_row: 1,
        }
    }

    #[test]
    fn the_costs_follow_the_table() {
        let claude = input(Capability::Fork, Some(cache(true, true, true, 1250)));
        let predicted = predict(&claude, 40_000);
        assert_eq!(predicted.warm, Some(5_000), "(10k + 40k) * 0.1");
        assert_eq!(predicted.fork, Some(5_000));
        assert_eq!(predicted.cold, 1_000 + 50_000, "10k * 0.1 + 40k * 1.25");
        let late = CostInput {
            since_last_request: 6 * MINUTE,
            ..claude
        };
        let predicted = predict(&late, 40_000);
        assert_eq!(predicted.warm, Some(62_500), "everything written again");
        assert_eq!(predicted.cold, 62_500);
        let codex = input(Capability::Fork, Some(cache(true, false, false, 1000)));
        let predicted = predict(&codex, 40_000);
        assert_eq!(predicted.warm, Some(5_000));
        assert_eq!(
            predicted.fork,
            Some(50_000),
            "a new thread, a new cache key"
        );
        assert_eq!(predicted.cold, 50_000);
        let resume_only = input(Capability::Resume, Some(cache(false, false, true, 1000)));
        let predicted = predict(&resume_only, 40_000);
        assert_eq!(predicted.fork, None);
        assert_eq!(predicted.cold, 1_000 + 40_000);
        assert_eq!(
            predicted.warm,
            Some(41_000),
            "a resume that loses the session is a new one"
        );
        let none = predict(&input(Capability::None, None), 40_000);
        assert_eq!((none.warm, none.fork, none.cold), (None, None, 40_000));
    }

    /// Every combination of the inputs that matter: the choice is the table's
    /// first matching row, never a mode the adapter cannot run, and with
    /// `cheapest` never costlier than any mode that can.
    #[test]
    fn every_combination_chooses_by_the_table() {
        let capabilities = [Capability::Fork, Capability::Resume, Capability::None];
        let mut caches = vec![None];
        for warm in [false, true] {
            for fork in [false, true] {
                for prefix in [false, true] {
                    for write in [1000, 1250] {
                        caches.push(Some(cache(warm, fork, prefix, write)));
                    }
                }
            }
        }
        let mut seen = std::collections::HashSet::new();
        for capability in capabilities {
            for cache in &caches {
                for history in [None, Some(0), Some(1), Some(40_000), Some(u64::MAX)] {
                    for since in [Duration::ZERO, 4 * MINUTE, 5 * MINUTE, 60 * MINUTE] {
                        for same in [0, 1, 2, 5] {
                            let input = CostInput {
                                capability,
                                cache: *cache,
                                history_tokens: history,
                                since_last_request: since,
                                same_failure_in_a_row: same,
                            };
                            let choice = choose(&input);
                            seen.insert((choice.mode, choice.reason));
                            let expected_reason = if capability == Capability::None {
                                AutoReason::NoResume
                            } else if same >= FRESH_START_AFTER {
                                AutoReason::FreshStart
                            } else if history.is_none() {
                                AutoReason::SizeUnknown
                            } else {
                                AutoReason::Cheapest
                            };
                            assert_eq!(choice.reason, expected_reason, "{input:?}");
                            match choice.reason {
                                AutoReason::NoResume | AutoReason::FreshStart => {
                                    assert_eq!(choice.mode, RetryMode::Cold);
                                }
                                AutoReason::SizeUnknown => {
                                    assert_eq!(choice.mode, RetryMode::Warm);
                                }
                                AutoReason::Cheapest => {
                                    let predicted = choice.predicted.expect("a size");
                                    let cost = predicted.of(choice.mode).expect("it can run");
                                    for (_, other) in predicted.ranked() {
                                        assert!(cost <= other, "{input:?}: {predicted:?}");
                                    }
                                    let warm = predicted.warm.expect("it can resume");
                                    assert!(warm <= predicted.cold, "{input:?}: {predicted:?}");
                                }
                            }
                            assert_eq!(choice.predicted.is_some(), history.is_some(), "{input:?}");
                            assert!(
                                capability == Capability::Fork || choice.mode != RetryMode::Fork,
                                "never a fork the adapter cannot make: {input:?}"
                            );
                            assert_eq!(
                                choice.cache_alive,
                                cache.is_some_and(|cache| since < cache.lifetime)
                            );
                        }
                    }
                }
            }
        }
        // Every row of the table is reached, and `cheapest` picks each mode.
        for row in [
            (RetryMode::Cold, AutoReason::NoResume),
            (RetryMode::Cold, AutoReason::FreshStart),
            (RetryMode::Warm, AutoReason::SizeUnknown),
            (RetryMode::Warm, AutoReason::Cheapest),
        ] {
            assert!(seen.contains(&row), "{row:?} never chosen");
        }
    }

    #[test]
    fn the_choice_reads_as_one_line() {
        let choice = choose(&input(
            Capability::Fork,
            Some(cache(true, true, true, 1250)),
        ));
        assert_eq!(
            choice.describe(),
            "auto chose warm (cheapest: warm 5.0k, fork 5.0k, cold 51.0k input-token equivalents; the cache holds the session)"
        );
    }

    #[test]
    fn a_tie_keeps_what_the_session_knows() {
        // No cache at all: warm and cold cost the same; warm is kept.
        let plain = input(Capability::Fork, None);
        let choice = choose(&plain);
        assert_eq!(choice.mode, RetryMode::Warm);
        let predicted = choice.predicted.unwrap();
        assert_eq!(predicted.warm, Some(predicted.cold));
        // A fork cheaper than warm cannot happen (same formula, or worse).
        assert_eq!(predicted.fork, predicted.warm);
    }

    #[test]
    fn a_resume_that_loses_the_cache_costs_what_a_new_session_does() {
        let mut gemini = input(Capability::Resume, Some(cache(false, false, true, 1000)));
        let choice = choose(&gemini);
        let predicted = choice.predicted.unwrap();
        assert_eq!(predicted.warm, Some(predicted.cold));
        assert_eq!(choice.mode, RetryMode::Warm, "a tie keeps the session");
        gemini.since_last_request = 10 * MINUTE;
        let choice = choose(&gemini);
        assert!(!choice.cache_alive);
        assert_eq!(choice.predicted.unwrap().cold, 50_000, "nothing is cached");
        assert_eq!(choice.mode, RetryMode::Warm);
    }
}
