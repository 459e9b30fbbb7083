//! Prompt caching as the providers do it, and the one token estimator every
//! figure the server reports comes from. Pure: the time is an argument.
//!
//! **Tokens.** A request's prompt is a sequence of blocks in the order the
//! provider caches them: for the Messages API every tool, every system block,
//! then every content block of every message (a string content is one block);
//! for the Responses API the instructions, every tool, then every input item.
//! A block counts `ceil(bytes / 4)` tokens of its compact JSON text (about
//! what the providers' tokenizers give for English and code), and a prompt
//! the sum of its blocks. A reply's output tokens are `ceil(bytes / 4)` of
//! its text and tool input, at least one.
//!
//! **Anthropic.** A block carrying `cache_control` is a breakpoint; the prefix
//! up to and including it is written to the cache (`ttl: "1h"` for an hour,
//! else five minutes) when it holds at least [`MIN_CACHEABLE_TOKENS`]. A
//! later request reads the longest prefix still cached that ends at one of
//! its breakpoints or up to 20 blocks before one (the provider's look-back),
//! is billed a cache write for the rest up to its last breakpoint, and fresh
//! input after it. A read refreshes the entry's lifetime.
//!
//! **OpenAI.** Every prompt of [`MIN_CACHEABLE_TOKENS`] or more is cached
//! automatically at each block boundary, for five minutes (24 hours when
//! the request says `prompt_cache_retention: "24h"`); a later request
//! reports the longest cached prefix, in steps of 128 tokens past the first
//! 1024, as `cached_tokens`, which are part of its `input_tokens`. The
//! request's `prompt_cache_key` is part of the cache's key: the provider
//! routes a request by that key with its prefix, so a request under another
//! key (Codex names it after the thread: a forked thread has a new one) is
//! taken to miss, the pessimistic reading of that routing.
//!
//! **Gemini.** Implicit caching, the same way as OpenAI's (blocks: the system
//! instruction, every tool, then every part of every content), reported as
//! `cachedContentTokenCount` within `promptTokenCount`.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::Value;
use sha2::{Digest, Sha256};

/// Below this a prefix is not cached (both providers' smallest size).
pub(crate) const MIN_CACHEABLE_TOKENS: u64 = 1024;

/// How far before a breakpoint Anthropic looks for an earlier cached prefix.
const LOOKBACK_BLOCKS: usize = 20;

const FIVE_MINUTES: Duration = Duration::from_secs(5 * 60);
const ONE_HOUR: Duration = Duration::from_secs(60 * 60);
const ONE_DAY: Duration = Duration::from_secs(24 * 60 * 60);

/// The token estimate of `bytes` bytes of text.
pub(crate) fn tokens(bytes: usize) -> u64 {
    u64::try_from(bytes.div_ceil(4)).unwrap_or(u64::MAX)
}

/// One block's end: the hash of the prompt up to it and its token count.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Boundary {
    hash: [u8; 32],
    tokens: u64,
}

/// A request's prompt as the cache sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Prompt {
    boundaries: Vec<Boundary>,
    /// Block indexes carrying `cache_control`, and their lifetime.
    breakpoints: Vec<(usize, Duration)>,
    /// The lifetime of automatic (OpenAI) caching.
    retention: Duration,
}

impl Prompt {
    fn from_blocks<'a>(
        model: &str,
        blocks: impl Iterator<Item = &'a Value>,
        retention: Duration,
    ) -> Self {
        let mut hasher = Sha256::new();
        // The model is part of the key: caches are per model.
        hasher.update(model.as_bytes());
        hasher.update([0]);
        let mut total = 0;
        let mut boundaries = Vec::new();
        let mut breakpoints = Vec::new();
        for (index, block) in blocks.enumerate() {
            let mut plain = block.clone();
            let control = plain
                .as_object_mut()
                .and_then(|object| object.remove("cache_control"));
            let text = plain.to_string();
            hasher.update(text.as_bytes());
            hasher.update([0]);
            total += tokens(text.len());
            boundaries.push(Boundary {
                hash: hasher.clone().finalize().into(),
                tokens: total,
            });
            if let Some(control) = control {
                let ttl = if control.get("ttl").and_then(Value::as_str) == Some("1h") {
                    ONE_HOUR
                } else {
                    FIVE_MINUTES
                };
                breakpoints.push((index, ttl));
            }
        }
        Self {
            boundaries,
            breakpoints,
            retention,
        }
    }

    /// A Messages request: tools, system, then message content blocks.
    pub(crate) fn messages(body: &Value) -> Self {
        let list = |key: &str| {
            body.get(key)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
        };
        let system: Vec<Value> = match body.get("system") {
            Some(Value::String(text)) => vec![serde_json::json!({"type": "text", "text": text})],
            Some(Value::Array(blocks)) => blocks.clone(),
            _ => Vec::new(),
        };
        let content: Vec<Value> = list("messages")
            .flat_map(|message| match message.get("content") {
                Some(Value::Array(blocks)) => blocks.clone(),
                Some(other) => vec![other.clone()],
                None => Vec::new(),
            })
            .collect();
        let model = body.get("model").and_then(Value::as_str).unwrap_or("");
        Self::from_blocks(
            model,
            list("tools").chain(system.iter()).chain(content.iter()),
            FIVE_MINUTES,
        )
    }

    /// A Responses request: instructions, tools, then input items.
    pub(crate) fn responses(body: &Value) -> Self {
        let instructions = body.get("instructions").cloned().into_iter();
        let tools = body
            .get("tools")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .cloned();
        let input: Vec<Value> = match body.get("input") {
            Some(Value::Array(items)) => items.clone(),
            Some(other) => vec![other.clone()],
            None => Vec::new(),
        };
        let blocks: Vec<Value> = instructions.chain(tools).chain(input).collect();
        let retention = match body.get("prompt_cache_retention").and_then(Value::as_str) {
            Some("24h") => ONE_DAY,
            _ => FIVE_MINUTES,
        };
        let model = body.get("model").and_then(Value::as_str).unwrap_or("");
        let key = match body.get("prompt_cache_key").and_then(Value::as_str) {
            Some(key) => format!("{model}\0{key}"),
            None => model.to_owned(),
        };
        Self::from_blocks(&key, blocks.iter(), retention)
    }

    /// A Gemini `generateContent` request (automatic caching, as OpenAI's).
    pub(crate) fn gemini(body: &Value, model: &str) -> Self {
        let blocks = super::gemini::blocks(body);
        Self::from_blocks(model, blocks.iter(), FIVE_MINUTES)
    }

    /// Every input token of the prompt.
    pub(crate) fn total_tokens(&self) -> u64 {
        self.boundaries.last().map_or(0, |boundary| boundary.tokens)
    }
}

/// The input side of one request's usage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct InputUsage {
    /// Input neither written to nor read from the cache.
    pub(crate) fresh: u64,
    /// Written with the five-minute lifetime.
    pub(crate) cache_write: u64,
    /// Written with the one-hour lifetime.
    pub(crate) cache_write_1h: u64,
    pub(crate) cache_read: u64,
}

/// The cached prefixes and when each expires (time since the server began).
#[derive(Debug, Default)]
pub(crate) struct PromptCache {
    entries: HashMap<[u8; 32], Duration>,
}

impl PromptCache {
    fn live(&self, hash: &[u8; 32], now: Duration) -> bool {
        self.entries.get(hash).is_some_and(|expires| *expires > now)
    }

    fn keep(&mut self, hash: [u8; 32], until: Duration) {
        let entry = self.entries.entry(hash).or_default();
        *entry = (*entry).max(until);
    }

    /// Anthropic's explicit breakpoints.
    pub(crate) fn anthropic(&mut self, prompt: &Prompt, now: Duration) -> InputUsage {
        let total = prompt.total_tokens();
        let Some(&(last, _)) = prompt.breakpoints.iter().max_by_key(|(index, _)| *index) else {
            return InputUsage {
                fresh: total,
                ..InputUsage::default()
            };
        };
        // The longest live prefix within the look-back of any breakpoint.
        let mut read: Option<usize> = None;
        for &(breakpoint, _) in &prompt.breakpoints {
            let earliest = breakpoint.saturating_sub(LOOKBACK_BLOCKS - 1);
            let hit = (earliest..=breakpoint)
                .rev()
                .find(|index| self.live(&prompt.boundaries[*index].hash, now));
            read = read.max(hit);
        }
        let tokens_at =
            |index: Option<usize>| index.map_or(0, |index| prompt.boundaries[index].tokens);
        let read_tokens = tokens_at(read);
        let mut usage = InputUsage {
            fresh: total - tokens_at(Some(last)),
            cache_read: read_tokens,
            ..InputUsage::default()
        };
        // Each stretch up to a breakpoint is written with that breakpoint's
        // lifetime, past what was read.
        let mut sorted = prompt.breakpoints.clone();
        sorted.sort_by_key(|(index, _)| *index);
        let mut covered = read_tokens;
        for &(index, ttl) in &sorted {
            let end = prompt.boundaries[index].tokens;
            if end > covered {
                let written = end - covered;
                if ttl == ONE_HOUR {
                    usage.cache_write_1h += written;
                } else {
                    usage.cache_write += written;
                }
                covered = end;
            }
        }
        if tokens_at(Some(last)) < MIN_CACHEABLE_TOKENS {
            // Too short to cache: all of it is plain input.
            return InputUsage {
                fresh: total,
                ..InputUsage::default()
            };
        }
        if let Some(read) = read {
            // A read refreshes the lifetime of what it read.
            let ttl = sorted
                .iter()
                .find(|(index, _)| *index >= read)
                .map_or(FIVE_MINUTES, |(_, ttl)| *ttl);
            self.keep(prompt.boundaries[read].hash, now + ttl);
        }
        for &(index, ttl) in &sorted {
            if prompt.boundaries[index].tokens >= MIN_CACHEABLE_TOKENS {
                self.keep(prompt.boundaries[index].hash, now + ttl);
            }
        }
        usage
    }

    /// OpenAI's automatic caching.
    pub(crate) fn openai(&mut self, prompt: &Prompt, now: Duration) -> InputUsage {
        let total = prompt.total_tokens();
        let matched = prompt
            .boundaries
            .iter()
            .rev()
            .find(|boundary| self.live(&boundary.hash, now))
            .map_or(0, |boundary| boundary.tokens);
        let cached = if matched >= MIN_CACHEABLE_TOKENS {
            MIN_CACHEABLE_TOKENS + (matched - MIN_CACHEABLE_TOKENS) / 128 * 128
        } else {
            0
        };
        for boundary in &prompt.boundaries {
            if boundary.tokens >= MIN_CACHEABLE_TOKENS {
                self.keep(boundary.hash, now + prompt.retention);
            }
        }
        InputUsage {
            fresh: total - cached,
            cache_read: cached,
            ..InputUsage::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A text block of about `tokens` tokens.
    fn block(tokens: usize, tag: &str) -> Value {
        json!({"type": "text", "text": format!("{tag}{}", "x".repeat(tokens * 4))})
    }

    fn cached(mut value: Value, ttl: Option<&str>) -> Value {
        value["cache_control"] = match ttl {
            Some(ttl) => json!({"type": "ephemeral", "ttl": ttl}),
            None => json!({"type": "ephemeral"}),
        };
        value
    }

    fn request(system: Value, messages: Vec<Value>) -> Value {
        json!({"model": "claude-test", "system": [system], "messages": messages})
    }

    #[test]
    fn a_shared_prefix_is_read_and_only_the_new_part_is_fresh_or_written() {
        let system = cached(block(3000, "s"), None);
        let first_user = json!({"role": "user", "content": [cached(block(100, "u1"), None)]});
        let first = Prompt::messages(&request(system.clone(), vec![first_user]));
        let mut cache = PromptCache::default();
        let one = cache.anthropic(&first, Duration::ZERO);
        assert_eq!(one.cache_read, 0);
        assert_eq!(one.cache_write, first.total_tokens(), "all written once");
        assert_eq!(one.fresh, 0);

        // The next turn: the old user block loses its breakpoint, a new one
        // carries it; the old prefix is found by the look-back.
        let plain_user = json!({"role": "user", "content": [block(100, "u1")]});
        let reply = json!({"role": "assistant", "content": [block(50, "a1")]});
        let second_user = json!({"role": "user", "content": [cached(block(80, "u2"), None)]});
        let second = Prompt::messages(&request(system, vec![plain_user, reply, second_user]));
        let two = cache.anthropic(&second, Duration::from_secs(60));
        assert_eq!(
            two.cache_read,
            first.total_tokens(),
            "the first prompt is read"
        );
        assert_eq!(
            two.cache_write,
            second.total_tokens() - first.total_tokens(),
            "only the new blocks are written"
        );
        assert_eq!(two.fresh, 0);

        // Six minutes after its last use the five-minute entry is gone:
        // the same prompt is a write again.
        let later = cache.anthropic(&second, Duration::from_secs(60 + 6 * 60));
        assert_eq!(later.cache_read, 0);
        assert_eq!(later.cache_write, second.total_tokens());
    }

    #[test]
    fn a_one_hour_breakpoint_outlives_five_minutes_and_short_prefixes_are_not_cached() {
        let system = cached(block(2000, "s"), Some("1h"));
        let user = json!({"role": "user", "content": [block(10, "u")]});
        let prompt = Prompt::messages(&request(system, vec![user]));
        let mut cache = PromptCache::default();
        let first = cache.anthropic(&prompt, Duration::ZERO);
        assert!(first.cache_write_1h > 2000 && first.cache_write == 0);
        assert!(
            first.fresh > 0 && first.fresh < 20,
            "after the breakpoint: {first:?}"
        );
        let later = cache.anthropic(&prompt, Duration::from_secs(30 * 60));
        assert_eq!(later.cache_read, first.cache_write_1h);
        assert_eq!(later.cache_write_1h, 0);

        let small = Prompt::messages(&request(cached(block(100, "t"), None), vec![]));
        let mut cache = PromptCache::default();
        for _ in 0..2 {
            let usage = cache.anthropic(&small, Duration::ZERO);
            assert_eq!(usage.fresh, small.total_tokens());
            assert_eq!(usage.cache_read + usage.cache_write, 0);
        }
    }

    #[test]
    fn openai_reports_a_repeated_prefix_in_steps_of_128() {
        let items = |count: usize| -> Value {
            let input: Vec<Value> = (0..count)
                .map(|index| json!({"type": "message", "role": "user", "content": "y".repeat(400) + &index.to_string()}))
                .collect();
            json!({"model": "gpt-test", "instructions": "z".repeat(4000), "input": input})
        };
        let mut cache = PromptCache::default();
        let first = Prompt::responses(&items(3));
        let one = cache.openai(&first, Duration::ZERO);
        assert_eq!(one.cache_read, 0);
        assert_eq!(one.fresh, first.total_tokens());
        let second = Prompt::responses(&items(5));
        let two = cache.openai(&second, Duration::from_secs(10));
        assert!(two.cache_read >= MIN_CACHEABLE_TOKENS);
        assert_eq!((two.cache_read - MIN_CACHEABLE_TOKENS) % 128, 0);
        assert!(two.cache_read <= first.total_tokens());
        assert!(first.total_tokens() - two.cache_read < 128);
        assert_eq!(two.fresh + two.cache_read, second.total_tokens());
        let late = cache.openai(&second, Duration::from_secs(10 + 301));
        assert_eq!(late.cache_read, 0);
    }

    #[test]
    fn openai_caches_per_prompt_cache_key() {
        let request = |key: &str| {
            json!({"model": "gpt-test", "instructions": "z".repeat(8000),
                   "input": [{"type": "message", "role": "user", "content": "hi"}],
                   "prompt_cache_key": key})
        };
        let mut cache = PromptCache::default();
        cache.openai(&Prompt::responses(&request("thread-1")), Duration::ZERO);
        let same = cache.openai(
            &Prompt::responses(&request("thread-1")),
            Duration::from_secs(1),
        );
        assert!(same.cache_read >= MIN_CACHEABLE_TOKENS);
        let other = cache.openai(
            &Prompt::responses(&request("thread-2")),
            Duration::from_secs(2),
        );
        assert_eq!(other.cache_read, 0, "another key is routed elsewhere");
    }
}
