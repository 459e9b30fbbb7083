//! The scenario: rules matched in order against each request, each naming the
//! reply to send.
//!
//! ```yaml
//! version: 1              # optional; a newer version is refused
//! rules:
//!   - match: { contains: "write hello", turn: 1 }
//!     reply: { tool: Write, input: { file_path: /tmp/x/hello.txt, content: "hi\n" } }
//!   - match: { tool_result: true }
//!     reply: { text: "Done." }
//!   - match: { contains: "overload" }
//!     reply: { error: { status: 529, message: "Overloaded" } }
//!   - match: { contains: "stall" }
//!     reply: { hang: true }
//! ```
//!
//! Matching keys (all optional, all must hold):
//! - `task`: the task the request came for. A client whose base URL is
//!   `http://127.0.0.1:PORT/t/<task>` (how `reprise rehearse` points each
//!   task's agent) sends `/t/<task>/v1/messages`; a plain `/v1/...` request
//!   has no task and never matches a rule that names one.
//! - `contains`: a substring of the prompt text (see [`Observed`]).
//! - `turn`: the 1-based count of prompt-bearing requests the server has seen
//!   for the same task (or without one), this one included. A request whose last user message holds only tool
//!   results (the client answering a tool call) does not start a new turn, so
//!   a tool loop stays in the turn of its prompt; a client's own retry of a
//!   failed request does count (useful to fail once, then succeed).
//! - `tool_result`: `true` matches only such tool-result follow-ups, `false`
//!   only prompt-bearing requests.
//!
//! A reply is `text`, `tool` + `input` (optionally with `text` before the
//! tool call), `error: { status, message }` or `hang: true`. A tool's
//! `input` is a mapping (a function call's arguments), or a string for a
//! freeform tool such as Codex's `apply_patch` (a `custom_tool_call` in the
//! Responses API; the Messages API has no such tools and gets `{"input": ...}`).

use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use super::error::{ScenarioError, ScenarioResult};

/// The rules, in the order they are tried.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    pub rules: Vec<Rule>,
}

/// One rule: when the request matches, send the reply.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    pub matcher: Match,
    pub reply: Reply,
}

/// Conditions on a request; an empty match matches every request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Match {
    pub task: Option<String>,
    pub contains: Option<String>,
    pub turn: Option<u64>,
    pub tool_result: Option<bool>,
}

/// What the server answers.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// An assistant message: optional text, then an optional tool call.
    Message {
        text: Option<String>,
        tool: Option<ToolCall>,
    },
    /// An HTTP error with an API-style error body.
    Error(ErrorReply),
    /// Never answer; the socket stays open until the server stops.
    Hang,
}

/// A tool call (`tool_use` in Messages, `function_call` in Responses).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub name: String,
    pub input: Value,
}

/// An HTTP error status and its message.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorReply {
    pub status: u16,
    pub message: String,
}

/// What the server observed of one request, for matching.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Observed {
    /// The task named by the request path's `/t/<task>` prefix.
    pub(crate) task: Option<String>,
    /// The last prompt text: from the last user message, or, when that holds
    /// only tool results, from the latest earlier user message with text.
    pub(crate) prompt_text: Option<String>,
    /// The last user message holds no prompt text (a tool-result follow-up).
    pub(crate) tool_result: bool,
    pub(crate) turn: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScenarioFile {
    version: Option<u32>,
    #[serde(default)]
    rules: Vec<RuleFile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleFile {
    #[serde(default, rename = "match")]
    matcher: Match,
    reply: ReplyFile,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReplyFile {
    text: Option<String>,
    tool: Option<String>,
    input: Option<Value>,
    error: Option<ErrorReply>,
    hang: Option<bool>,
}

impl Scenario {
    /// Reads a scenario file.
    pub fn load(path: &Path) -> ScenarioResult<Self> {
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_yaml(&text)
    }

    /// Parses a scenario from YAML text.
    pub fn from_yaml(text: &str) -> ScenarioResult<Self> {
        let file: ScenarioFile =
            serde_saphyr::from_str(text).map_err(|error| ScenarioError::Syntax {
                message: error.to_string().lines().next().unwrap_or("").to_owned(),
            })?;
        if let Some(found) = file.version
            && found > 1
        {
            return Err(ScenarioError::NewerVersion { found });
        }
        let rules = file
            .rules
            .into_iter()
            .enumerate()
            .map(|(index, rule)| {
                let reply = rule
                    .reply
                    .resolve()
                    .map_err(|reason| ScenarioError::InvalidRule { index, reason })?;
                Ok(Rule {
                    matcher: rule.matcher,
                    reply,
                })
            })
            .collect::<ScenarioResult<_>>()?;
        Ok(Self { rules })
    }

    /// The index of the first rule that matches, if any.
    pub(crate) fn pick(&self, observed: &Observed) -> Option<usize> {
        self.rules
            .iter()
            .position(|rule| rule.matcher.matches(observed))
    }
}

impl Match {
    fn matches(&self, observed: &Observed) -> bool {
        let contains = match &self.contains {
            None => true,
            Some(needle) => observed
                .prompt_text
                .as_deref()
                .is_some_and(|text| text.contains(needle.as_str())),
        };
        let task = self
            .task
            .as_ref()
            .is_none_or(|task| observed.task.as_ref() == Some(task));
        task && contains
            && self.turn.is_none_or(|turn| turn == observed.turn)
            && self
                .tool_result
                .is_none_or(|tool_result| tool_result == observed.tool_result)
    }
}

impl ReplyFile {
    fn resolve(self) -> Result<Reply, String> {
        let message = self.text.is_some() || self.tool.is_some();
        let kinds = [message, self.error.is_some(), self.hang.is_some()];
        if kinds.iter().filter(|kind| **kind).count() != 1 {
            return Err("a reply needs exactly one of text/tool, error or hang".to_owned());
        }
        if self.input.is_some() && self.tool.is_none() {
            return Err("`input` needs `tool`".to_owned());
        }
        if let Some(error) = self.error {
            if !(400..=599).contains(&error.status) {
                return Err(format!("error status {} is not 4xx or 5xx", error.status));
            }
            return Ok(Reply::Error(error));
        }
        if let Some(hang) = self.hang {
            if !hang {
                return Err("`hang` can only be true".to_owned());
            }
            return Ok(Reply::Hang);
        }
        let tool = self.tool.map(|name| ToolCall {
            name,
            input: self
                .input
                .unwrap_or_else(|| Value::Object(serde_json::Map::new())),
        });
        if let Some(tool) = &tool
            && !(tool.input.is_object() || tool.input.is_string())
        {
            return Err(format!(
                "the input of tool {} must be a mapping or a string",
                tool.name
            ));
        }
        Ok(Reply::Message {
            text: self.text,
            tool,
        })
    }
}
