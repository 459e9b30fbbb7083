//! A scripted model server on loopback: speaks the Anthropic Messages API and
//! the OpenAI Responses API (as Claude Code and Codex call them) and answers
//! from a YAML scenario, so the real agent CLIs can be driven offline and
//! deterministically. Every request is recorded as one JSON line.

mod error;
mod http;
mod messages;
mod responses;
mod scenario;
mod server;

#[cfg(test)]
mod tests;

pub use error::{ScenarioError, ScenarioResult};
pub use scenario::{ErrorReply, Match, Reply, Rule, Scenario, ToolCall};
pub use server::{ModelServer, ServerOptions};
