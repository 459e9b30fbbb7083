//! A scripted model server on loopback: speaks the Anthropic Messages API,
//! the OpenAI Responses API and the Gemini API (as Claude Code, Codex and the
//! Gemini CLI call them) and answers
//! from a YAML scenario, so the real agent CLIs can be driven offline and
//! deterministically. Every request is recorded as one JSON line, with the
//! usage (fresh input, cache writes and reads, output) the server reported.

mod cache;
mod error;
mod gemini;
mod http;
mod messages;
mod responses;
mod scenario;
mod server;

#[cfg(test)]
mod tests;

pub use error::{ScenarioError, ScenarioResult};
pub use scenario::{
    DEFAULT_MAX_REQUESTS_PER_ATTEMPT, ErrorReply, Match, Position, Reply, Rule, Scenario, Step,
    ToolCall,
};
pub use server::{LOG_FORMAT, ManualClock, ModelServer, ServerOptions};
