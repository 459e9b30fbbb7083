//! The scenario: rules matched in order against each request, each naming the
//! reply to send.
//!
//! ```yaml
//! version: 1              # optional; a newer version is refused
//! max_requests_per_attempt: 50   # optional; past it the attempt is a loop
//! rules:
//!   - match: { contains: "write hello", turn: 1 }
//!     reply: { tool: Write, input: { file_path: /tmp/x/hello.txt, content: "hi\n" } }
//!   - match: { contains: "fix greet.py", turn: 2 }
//!     reply:
//!       steps:
//!         - { tool: Read, input: { file_path: /tmp/x/greet.py } }
//!         - { tool: Edit, input: { file_path: /tmp/x/greet.py, old_string: hi, new_string: hello } }
//!         - { text: "Fixed." }
//!   - match: { tool_result: true }
//!     reply: { text: "Done." }
//!   - match: { contains: "overload" }
//!     reply: { error: { status: 529, message: "Overloaded" } }
//!   - match: { contains: "limit" }
//!     reply:
//!       error:
//!         status: 429
//!         message: "This request would exceed your account's rate limit."
//!         headers:
//!           retry-after: "3600"
//!           anthropic-ratelimit-unified-status: rejected
//!           anthropic-ratelimit-unified-reset: "1796131992"
//!           anthropic-ratelimit-unified-representative-claim: five_hour
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
//! tool call), `steps` (a list of such messages, played one per request of
//! the same attempt, the last one repeated), `error: { status, message,
//! headers }` (headers optional) or
//! `hang: true`. A tool's `input` is a mapping (a function call's
//! arguments), or a string for a freeform tool such as Codex's `apply_patch`
//! (a `custom_tool_call` in the Responses API; the Messages API has no such
//! tools and gets `{"input": ...}`).
//!
//! Every rule, task name and tool name keeps where it was written, so the
//! checks against a plan ([`Scenario::check`]) point at the line to fix.

use std::fmt;
use std::path::Path;

use serde::Deserialize;
use serde_json::Value;
use serde_saphyr::{Location, Spanned};

use super::error::{ScenarioError, ScenarioResult};
use crate::pricing::{ModelPrice, PriceFile};

/// How many requests one attempt may send before the server calls it a loop.
pub const DEFAULT_MAX_REQUESTS_PER_ATTEMPT: u64 = 50;

/// Where something was written in the scenario file (1-based; 0 unknown).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Position {
    pub line: u64,
    pub column: u64,
}

impl Position {
    fn of(location: &Location) -> Self {
        Self {
            line: location.line(),
            column: location.column(),
        }
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

/// The rules, in the order they are tried.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    pub rules: Vec<Rule>,
    /// Past this many requests in one attempt the server answers with a
    /// `rehearsal_loop` error.
    pub max_requests_per_attempt: u64,
    /// Prices the scenario sets, per model (over the shipped list).
    pub prices: Vec<(String, ModelPrice)>,
    /// Where `rules:` was written (for problems with the list as a whole).
    pub rules_at: Position,
}

/// One rule: when the request matches, send the reply.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    pub matcher: Match,
    pub reply: Reply,
    /// Where the rule starts, and where its `task` was written.
    pub at: Position,
    pub task_at: Position,
}

/// Conditions on a request; an empty match matches every request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Match {
    pub task: Option<String>,
    pub contains: Option<String>,
    pub turn: Option<u64>,
    pub tool_result: Option<bool>,
}

/// What the server answers.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// Assistant messages played one per request within an attempt (one
    /// for a plain `text`/`tool` reply); the last is repeated.
    Steps(Vec<Step>),
    /// An HTTP error with an API-style error body.
    Error(ErrorReply),
    /// Never answer; the socket stays open until the server stops.
    Hang,
}

/// One assistant message: optional text, then an optional tool call.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub text: Option<String>,
    pub tool: Option<ToolCall>,
}

/// A tool call (`tool_use` in Messages, `function_call` in Responses).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub name: String,
    pub input: Value,
    /// Where the tool's name was written.
    pub at: Position,
}

/// An HTTP error status and its message, with any response headers to send
/// beside it (a usage limit's `retry-after` and
/// `anthropic-ratelimit-unified-reset`, say).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorReply {
    pub status: u16,
    pub message: String,
    #[serde(default)]
    pub headers: std::collections::BTreeMap<String, String>,
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
    max_requests_per_attempt: Option<Spanned<u64>>,
    #[serde(default)]
    prices: Option<PriceFile>,
    rules: Option<Spanned<Vec<Spanned<RuleFile>>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleFile {
    #[serde(default, rename = "match")]
    matcher: MatchFile,
    reply: ReplyFile,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct MatchFile {
    task: Option<Spanned<String>>,
    contains: Option<String>,
    turn: Option<u64>,
    tool_result: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReplyFile {
    text: Option<String>,
    tool: Option<Spanned<String>>,
    input: Option<Value>,
    steps: Option<Vec<Spanned<StepFile>>>,
    error: Option<ErrorReply>,
    hang: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StepFile {
    text: Option<String>,
    tool: Option<Spanned<String>>,
    input: Option<Value>,
}

impl Scenario {
    /// Reads a scenario file; errors name the file, line and column.
    pub fn load(path: &Path) -> ScenarioResult<Self> {
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parses a scenario from YAML text (errors name it `scenario`).
    pub fn from_yaml(text: &str) -> ScenarioResult<Self> {
        Self::parse(text, "scenario")
    }

    fn parse(text: &str, file: &str) -> ScenarioResult<Self> {
        let problem = |at: Position, key: &str, problem: String| ScenarioError::Invalid {
            file: file.to_owned(),
            at,
            key: key.to_owned(),
            problem,
        };
        let parsed: ScenarioFile = serde_saphyr::from_str(text).map_err(|error| {
            let at = error
                .location()
                .map_or_else(Position::default, |location| Position::of(&location));
            let message = error.without_snippet().to_string();
            let message = message.lines().next().unwrap_or("").trim();
            // The position is already in front.
            let message = message
                .rfind(" at line ")
                .filter(|cut| message[*cut..].contains(", column "))
                .map_or(message, |cut| &message[..cut]);
            problem(at, "yaml", message.to_owned())
        })?;
        if let Some(found) = parsed.version
            && found > 1
        {
            return Err(ScenarioError::NewerVersion {
                file: file.to_owned(),
                found,
            });
        }
        let max_requests_per_attempt = match parsed.max_requests_per_attempt {
            None => DEFAULT_MAX_REQUESTS_PER_ATTEMPT,
            Some(max) if max.value == 0 => {
                return Err(problem(
                    Position::of(&max.referenced),
                    "max_requests_per_attempt",
                    "must be at least 1".to_owned(),
                ));
            }
            Some(max) => max.value,
        };
        let prices = match parsed.prices {
            None => Vec::new(),
            Some(prices) => prices
                .resolve()
                .map_err(|(at, model, why)| problem(Position::of(&at), &model, why))?,
        };
        let Some(rules) = parsed.rules else {
            return Err(problem(
                Position { line: 1, column: 1 },
                "rules",
                "missing: a scenario needs at least one rule".to_owned(),
            ));
        };
        let rules_at = Position::of(&rules.referenced);
        if rules.value.is_empty() {
            return Err(problem(
                rules_at,
                "rules",
                "the list is empty: every request would fail; add a rule".to_owned(),
            ));
        }
        let rules = rules
            .value
            .into_iter()
            .map(|rule| {
                let at = Position::of(&rule.referenced);
                let RuleFile { matcher, reply } = rule.value;
                let reply = reply.resolve().map_err(|(key, why)| {
                    let key = if key.is_empty() {
                        "reply".to_owned()
                    } else {
                        format!("reply.{key}")
                    };
                    problem(at, &key, why)
                })?;
                let task_at = matcher
                    .task
                    .as_ref()
                    .map_or(at, |task| Position::of(&task.referenced));
                Ok(Rule {
                    matcher: Match {
                        task: matcher.task.map(|task| task.value),
                        contains: matcher.contains,
                        turn: matcher.turn,
                        tool_result: matcher.tool_result,
                    },
                    reply,
                    at,
                    task_at,
                })
            })
            .collect::<ScenarioResult<_>>()?;
        Ok(Self {
            rules,
            max_requests_per_attempt,
            prices,
            rules_at,
        })
    }

    /// The index of the first rule that matches, if any.
    pub(crate) fn pick(&self, observed: &Observed) -> Option<usize> {
        self.rules
            .iter()
            .position(|rule| rule.matcher.matches(observed))
    }

    /// Every tool call the scenario can send, with the rule it is in.
    pub fn tool_calls(&self) -> impl Iterator<Item = (&Rule, &ToolCall)> {
        self.rules.iter().flat_map(|rule| {
            let steps = match &rule.reply {
                Reply::Steps(steps) => steps.as_slice(),
                _ => &[],
            };
            steps
                .iter()
                .filter_map(move |step| step.tool.as_ref().map(|tool| (rule, tool)))
        })
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

/// A reply's problem: the key under `reply` and what is wrong.
type ReplyProblem = (&'static str, String);

fn step(
    text: Option<String>,
    tool: Option<Spanned<String>>,
    input: Option<Value>,
) -> Result<Step, ReplyProblem> {
    if input.is_some() && tool.is_none() {
        return Err(("input", "`input` needs `tool`".to_owned()));
    }
    let tool = tool.map(|name| ToolCall {
        at: Position::of(&name.referenced),
        name: name.value,
        input: input.unwrap_or_else(|| Value::Object(serde_json::Map::new())),
    });
    if let Some(tool) = &tool
        && !(tool.input.is_object() || tool.input.is_string())
    {
        return Err((
            "input",
            format!(
                "the input of tool {} must be a mapping or a string",
                tool.name
            ),
        ));
    }
    Ok(Step { text, tool })
}

impl ReplyFile {
    fn resolve(self) -> Result<Reply, ReplyProblem> {
        let message = self.text.is_some() || self.tool.is_some() || self.input.is_some();
        let kinds = [
            message,
            self.steps.is_some(),
            self.error.is_some(),
            self.hang.is_some(),
        ];
        if kinds.iter().filter(|kind| **kind).count() != 1 {
            return Err((
                "",
                "a reply needs exactly one of text/tool, steps, error or hang".to_owned(),
            ));
        }
        if let Some(error) = self.error {
            if !(400..=599).contains(&error.status) {
                return Err((
                    "error.status",
                    format!("{} is not 4xx or 5xx", error.status),
                ));
            }
            if let Some((name, value)) = error.headers.iter().find(|(name, value)| {
                hyper::header::HeaderName::from_bytes(name.as_bytes()).is_err()
                    || hyper::header::HeaderValue::from_str(value).is_err()
            }) {
                return Err((
                    "error.headers",
                    format!("{name}: {value:?} is not a valid HTTP header"),
                ));
            }
            return Ok(Reply::Error(error));
        }
        if let Some(hang) = self.hang {
            if !hang {
                return Err(("hang", "`hang` can only be true".to_owned()));
            }
            return Ok(Reply::Hang);
        }
        if let Some(steps) = self.steps {
            if steps.is_empty() {
                return Err(("steps", "the list is empty; give at least one".to_owned()));
            }
            let steps = steps
                .into_iter()
                .map(|spanned| {
                    let StepFile { text, tool, input } = spanned.value;
                    if text.is_none() && tool.is_none() {
                        return Err(("steps", "a step needs text or tool".to_owned()));
                    }
                    step(text, tool, input)
                })
                .collect::<Result<_, _>>()?;
            return Ok(Reply::Steps(steps));
        }
        Ok(Reply::Steps(vec![step(self.text, self.tool, self.input)?]))
    }
}
