//! The `claude` adapter (Claude Code): a pure invocation builder, a pure
//! parser of its `--output-format json` result object, and where it keeps
//! session transcripts.
//!
//! Checked against `@anthropic-ai/claude-code` 2.1.197 offline, with a local
//! server answering the Messages API (success, 401, 403, 429, 500, 529, an
//! exceeded `--max-budget-usd`, an unknown and a reused session id); the
//! recorded outputs are the test vectors in `testdata/claude/`.
//!
//! The invocation, for a prompt P:
//!
//! | mode | arguments |
//! |---|---|
//! | new | `-p --output-format json --permission-mode acceptEdits --session-id <uuid> -- P` |
//! | warm | `-p --output-format json --permission-mode acceptEdits --resume <id> -- P` |
//! | fork | `-p --output-format json --permission-mode acceptEdits --resume <id> --fork-session --session-id <uuid> -- P` |
//!
//! plus `--max-budget-usd <usd>` when the attempt has a budget and
//! `--allowedTools T...` when the plan names tools (`agents.claude.allowed_tools`),
//! both before `--`.
//! The prompt goes last, after `--`, because `-p` is a flag and the prompt a
//! positional: a prompt that starts with `-` would otherwise be read as an
//! option. `acceptEdits` lets Write and Edit run headless (the bypass modes
//! are refused as root). Stdin is `/dev/null`.
//!
//! Two results ask for the task to be parked rather than failed: a plan's
//! usage limit, which the CLI words with its reset (`Claude AI usage limit
//! reached|<unix>`; 2.1.197 signed in to a plan says `You've hit your
//! session limit · resets 1:33pm (UTC)`, with an API key only `Request
//! rejected (429)`), ends as `usage_limit` with the reset; a finished turn
//! whose `permission_denials` is not empty (a tool the CLI would not let the
//! agent use, headless, with nobody to ask) ends as `awaiting_permission`,
//! the denied tools and their input the question.

use std::path::{Path, PathBuf};

use reprise_core::retry::ResumeStrategy;
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::home::{StateHome, child_var, is_plain_session_id};
use crate::outcome::ParkSignal;
use crate::outcome::{
    AttemptOutcome, AttemptReport, InfraKind, Parsed, format_micro_usd, kind_for_http_status,
    kind_from_error_text, one_line, parse_usd_micro, stderr_summary,
};
use crate::park::bounded_question;
use crate::process::{CliSpec, Invocation, Stdin, VersionCache, run_cli};
use crate::request::{
    Adapter, AttemptRequest, CancelToken, ResumeCache, SessionMode, StatePaths,
    with_chosen_session_ids,
};

const SPEC: CliSpec = CliSpec {
    name: "claude",
    bin_env: "REPRISE_CLAUDE_BIN",
};

/// Set to 1, Claude Code leaves the git status snapshot and its git
/// instructions out of the system prompt (2.1.197, read from its bundle).
const GIT_INSTRUCTIONS_VAR: &str = "CLAUDE_CODE_DISABLE_GIT_INSTRUCTIONS";

/// Claude Code's session-gone message (stderr, exit 1).
const NO_CONVERSATION: &str = "No conversation found with session ID";

/// Drives Claude Code headless; resumes and forks its native sessions.
/// Where claude keeps its state.
const CLAUDE_STATE: StateHome = StateHome {
    env_var: "CLAUDE_CONFIG_DIR",
    home_dir: ".claude",
    state_dir: "",
    // Claude Code reads an empty one as corrupt.
    home_files: &[(".claude.json", "{}\n")],
};

#[derive(Debug, Default)]
pub struct ClaudeAdapter {
    versions: VersionCache,
    allowed_tools: Vec<String>,
    options: crate::options::CliOptions,
}

impl ClaudeAdapter {
    /// A claude adapter; the binary comes from each request.
    pub fn new() -> Self {
        Self::default()
    }

    /// Lets the CLI use `tools` without asking (`--allowedTools`): headless,
    /// nobody can answer a permission prompt, and edits alone are allowed by
    /// the permission mode.
    pub fn with_allowed_tools(tools: Vec<String>) -> Self {
        Self {
            allowed_tools: tools,
            ..Self::default()
        }
    }

    /// The plan's model, extra arguments and environment for Claude Code.
    #[must_use]
    pub fn with_options(self, options: crate::options::CliOptions) -> Self {
        Self { options, ..self }
    }
}

impl Adapter for ClaudeAdapter {
    fn name(&self) -> &'static str {
        SPEC.name
    }

    fn strategy(&self) -> ResumeStrategy {
        ResumeStrategy::NativeForkable
    }

    /// `--max-budget-usd`: Claude Code stops itself once a turn takes its
    /// reported cost past the budget, so it overshoots by at most one turn.
    fn bounds_spend(&self) -> bool {
        true
    }

    fn chooses_session_ids(&self) -> bool {
        true
    }

    fn run(&self, request: &AttemptRequest, cancel: &CancelToken) -> AttemptReport {
        let request = with_chosen_session_ids(request);
        let tools = &self.allowed_tools;
        run_cli(
            SPEC,
            &self.versions,
            &request,
            cancel,
            |request, program| {
                self.options.apply(
                    invocation(request, program, tools),
                    request.model.as_deref(),
                )
            },
            parse,
        )
    }

    fn state_paths(&self, config_home: Option<&Path>, home: Option<&Path>) -> StatePaths {
        CLAUDE_STATE.paths(config_home, &child_var(&self.options.env, home))
    }

    /// 2.1.197 resumes and forks with the session's prompt byte for byte
    /// (with the session's model asked for and the git snapshot left out),
    /// and a new session starts with the same system prompt and tools.
    fn resume_cache(&self) -> Option<ResumeCache> {
        Some(ResumeCache {
            warm_keeps: true,
            fork_keeps: true,
            cold_keeps_prefix: true,
            prefix_tokens: 17_000,
            read_per_mille: 100,
            write_per_mille: 1250,
            lifetime: std::time::Duration::from_secs(5 * 60),
        })
    }

    /// The last assistant message's `usage`: fresh, written and read input.
    fn last_prompt_tokens(&self, transcript: &[u8]) -> Option<u64> {
        let usage = crate::request::last_object_after(transcript, "usage")?;
        let tokens = [
            "input_tokens",
            "cache_creation_input_tokens",
            "cache_read_input_tokens",
        ]
        .iter()
        .filter_map(|key| usage.get(*key).and_then(Value::as_u64))
        .sum::<u64>();
        (tokens > 0).then_some(tokens)
    }

    fn keeps_transcripts(&self) -> bool {
        true
    }

    fn ends_in_a_tool_call(&self, transcript: &Path) -> bool {
        std::fs::read(transcript).is_ok_and(|bytes| dangling_tool_calls(&bytes) > 0)
    }

    /// `<root>/projects/<cwd, each character but ASCII letters and digits
    /// made '-'>/<id>.jsonl`, where the root is `config_home`, else
    /// `$CLAUDE_CONFIG_DIR`, else `$HOME/.claude`, and the cwd is the real
    /// path (symlinks resolved, as the CLI's own `process.cwd()` sees it).
    /// The path is returned whether or not the file exists, so a lost
    /// transcript can be restored to it.
    ///
    /// Claude shortens project directory names beyond 200 characters with a
    /// hash suffix; for those the directory is discovered (one whose name
    /// starts with the first 200 characters and holds the transcript), and
    /// `None` is returned if there is none.
    fn transcript_path(
        &self,
        session_id: &str,
        cwd: &Path,
        config_home: Option<&Path>,
    ) -> Option<PathBuf> {
        if !is_plain_session_id(session_id) {
            return None;
        }
        let root = CLAUDE_STATE.root(config_home, &child_var(&self.options.env, None))?;
        let cwd = cwd.canonicalize().unwrap_or_else(|_| cwd.to_path_buf());
        let projects = root.join("projects");
        let file_name = format!("{session_id}.jsonl");
        let name = project_dir_name(&cwd);
        if name.len() <= PROJECT_NAME_MAX {
            return Some(projects.join(name).join(file_name));
        }
        let prefix = &name[..PROJECT_NAME_MAX];
        std::fs::read_dir(&projects)
            .ok()?
            .filter_map(Result::ok)
            .filter(|entry| entry.file_name().to_string_lossy().starts_with(prefix))
            .map(|entry| entry.path().join(&file_name))
            .find(|path| path.is_file())
    }
}

/// Longest project directory name Claude Code uses unshortened.
const PROJECT_NAME_MAX: usize = 200;

/// The directory name Claude Code gives a project: every character other
/// than an ASCII letter or digit becomes `-` (one per UTF-16 unit, as the
/// CLI's JavaScript replace counts them). Observed: `/tmp/clis/w.x_y z` ->
/// `-tmp-clis-w-x-y-z`.
pub(crate) fn project_dir_name(cwd: &Path) -> String {
    cwd.to_string_lossy()
        .chars()
        .flat_map(|c| {
            let (keep, units) = if c.is_ascii_alphanumeric() {
                (Some(c), 1)
            } else {
                (None, c.len_utf16())
            };
            std::iter::repeat_n(keep.unwrap_or('-'), units)
        })
        .collect()
}

/// Builds the claude command line for `request` (ids already chosen).
pub(crate) fn invocation(
    request: &AttemptRequest,
    program: PathBuf,
    allowed_tools: &[String],
) -> Invocation {
    let mut args: Vec<String> = [
        "-p",
        "--output-format",
        "json",
        "--permission-mode",
        "acceptEdits",
    ]
    .map(String::from)
    .to_vec();
    let session_id = match &request.session {
        SessionMode::New { session_id } => {
            if let Some(id) = session_id {
                args.extend(["--session-id".into(), id.clone()]);
            }
            session_id.clone()
        }
        SessionMode::Resume { session_id } => {
            args.extend(["--resume".into(), session_id.clone()]);
            Some(session_id.clone())
        }
        SessionMode::Fork {
            from,
            new_session_id,
        } => {
            args.extend(["--resume".into(), from.clone(), "--fork-session".into()]);
            if let Some(id) = new_session_id {
                args.extend(["--session-id".into(), id.clone()]);
            }
            new_session_id.clone()
        }
    };
    if let Some(budget) = request.budget_micro_usd {
        args.extend(["--max-budget-usd".into(), format_micro_usd(budget)]);
    }
    if !allowed_tools.is_empty() {
        // A variadic option: each tool its own argument, ended by `--`.
        args.push("--allowedTools".into());
        args.extend(allowed_tools.iter().cloned());
    }
    args.extend(["--".into(), request.prompt.clone()]);
    // The git status goes into the system prompt as a snapshot taken when the
    // CLI starts: an attempt's own edits change it, and a changed system
    // prompt makes the provider's prompt cache miss on everything after it,
    // the whole session included, on every resume. reprise commits the
    // results itself, so the CLI's git snapshot and commit instructions are
    // left out of every attempt alike (a plan's `env` may set it back).
    let mut env = vec![(GIT_INSTRUCTIONS_VAR.to_owned(), "1".to_owned())];
    env.extend(request.env.iter().cloned());
    if let Some(home) = &request.config_home {
        env.push((
            "CLAUDE_CONFIG_DIR".into(),
            home.to_string_lossy().into_owned(),
        ));
    }
    Invocation {
        cli_prefixes: &[],
        provider: crate::network::Provider::Any,
        program,
        prompt_arg: Some(args.len() - 1),
        args,
        env,
        stdin: Stdin::Null,
        session_id,
    }
}

/// The fields of Claude Code's result object that classification reads.
#[derive(Debug, Deserialize)]
struct ResultObject<'a> {
    #[serde(rename = "type")]
    kind: Option<String>,
    subtype: Option<String>,
    is_error: Option<bool>,
    result: Option<String>,
    session_id: Option<String>,
    /// Kept as the raw JSON text so the amount is read exactly.
    #[serde(borrow)]
    total_cost_usd: Option<&'a RawValue>,
    terminal_reason: Option<String>,
    api_error_status: Option<serde_json::Value>,
    #[serde(default)]
    errors: Vec<serde_json::Value>,
    /// What the CLI refused to let the agent do (`{tool_name, tool_use_id,
    /// tool_input}` each): headless, nobody could say yes.
    #[serde(default)]
    permission_denials: Vec<serde_json::Value>,
    /// Tokens by model, keyed by the model as the CLI names it
    /// (`claude-opus-4-8[1m]`).
    #[serde(default, rename = "modelUsage")]
    model_usage: serde_json::Map<String, Value>,
}

/// The model the session ran on: of the models a result reports, the one
/// that read the most input (a CLI may use a small model on the side).
fn session_model(usage: &serde_json::Map<String, Value>) -> Option<String> {
    let input = |tokens: &Value| {
        [
            "inputTokens",
            "cacheReadInputTokens",
            "cacheCreationInputTokens",
        ]
        .iter()
        .filter_map(|key| tokens.get(*key).and_then(Value::as_u64))
        .sum::<u64>()
    };
    usage
        .iter()
        .max_by_key(|(_, tokens)| input(tokens))
        .map(|(model, _)| model.clone())
        .filter(|model| !model.is_empty())
}

fn result_object(stdout: &str) -> Option<ResultObject<'_>> {
    let is_result = |object: &ResultObject<'_>| object.kind.as_deref() == Some("result");
    if let Ok(object) = serde_json::from_str::<ResultObject<'_>>(stdout.trim())
        && is_result(&object)
    {
        return Some(object);
    }
    stdout
        .lines()
        .rev()
        .filter(|line| line.trim_start().starts_with('{'))
        .filter_map(|line| serde_json::from_str::<ResultObject<'_>>(line.trim()).ok())
        .find(is_result)
}

/// Classifies one finished `claude -p --output-format json` run.
///
/// By `is_error`, `api_error_status`, `terminal_reason` and the exit code;
/// the subtype alone never makes a success (Claude reports API failures as
/// subtype `success` with `is_error: true`).
pub(crate) fn parse(exit_code: i32, stdout: &str, stderr: &str) -> Parsed {
    let Some(object) = result_object(stdout) else {
        let said = if stderr.trim().is_empty() {
            one_line(stdout, 300)
        } else {
            stderr_summary(stderr)
        };
        if stderr.contains(NO_CONVERSATION) || stdout.contains(NO_CONVERSATION) {
            return Parsed::infra(InfraKind::SessionUnavailable, format!("claude: {said}"));
        }
        return Parsed::infra(
            InfraKind::ApiError,
            format!("claude exited {exit_code} without a result object: {said}"),
        );
    };
    let cost_micro_usd = object
        .total_cost_usd
        .and_then(|raw| parse_usd_micro(raw.get()));
    let session_id = object.session_id.clone().filter(|id| !id.is_empty());
    let session_model = session_model(&object.model_usage);
    let subtype = object.subtype.as_deref().unwrap_or("");
    let reply = object.result.clone().unwrap_or_default();
    let is_error = object.is_error.unwrap_or(subtype.starts_with("error"));
    let (outcome, limit_text) = if is_error {
        let message = error_message(&object, stderr);
        (
            classify_error(exit_code, &object, &message, stderr),
            Some(message),
        )
    } else {
        (AttemptOutcome::Replied { exit_code, reply }, None)
    };
    // A turn that ended with a permission denied wants someone to grant it:
    // the reply is what the agent could do without it. A failure of the
    // machinery is reported first.
    let denied = denied_question(&object.permission_denials);
    if let (AttemptOutcome::Replied { .. }, Some(question)) = (&outcome, denied) {
        let detail = one_line(&format!("claude was denied a permission: {question}"), 300);
        return Parsed {
            session_id,
            cost_micro_usd,
            session_model,
            park: Some(ParkSignal::Approval { question }),
            ..Parsed::infra(InfraKind::AwaitingPermission, detail)
        };
    }
    Parsed {
        session_id,
        cost_micro_usd,
        session_model,
        limit_text,
        ..Parsed::of(outcome)
    }
}

/// The question a result's `permission_denials` ask, one line per denial
/// (`Bash {"command":"make deploy"}`), bounded; `None` when nothing was denied.
fn denied_question(denials: &[serde_json::Value]) -> Option<String> {
    let lines: Vec<String> = denials
        .iter()
        .map(|denial| {
            let tool = denial
                .get("tool_name")
                .and_then(serde_json::Value::as_str)
                .unwrap_or("a tool");
            match denial.get("tool_input") {
                Some(input) if !input.is_null() => format!("{tool} {input}"),
                _ => tool.to_owned(),
            }
        })
        .collect();
    (!lines.is_empty())
        .then(|| bounded_question(&format!("allow claude to use: {}", lines.join("\n"))))
}

/// What a failed result says went wrong: its text, else its errors, else
/// stderr's telling line.
fn error_message(object: &ResultObject<'_>, stderr: &str) -> String {
    let errors: Vec<String> = object
        .errors
        .iter()
        .map(|error| match error {
            serde_json::Value::String(text) => text.clone(),
            other => other.to_string(),
        })
        .collect();
    match object.result.as_deref() {
        Some(text) if !text.trim().is_empty() => text.to_string(),
        _ if !errors.is_empty() => errors.join("; "),
        _ => stderr_summary(stderr),
    }
}

fn classify_error(
    exit_code: i32,
    object: &ResultObject<'_>,
    message: &str,
    stderr: &str,
) -> AttemptOutcome {
    let subtype = object.subtype.as_deref().unwrap_or("");
    let terminal_reason = object.terminal_reason.as_deref().unwrap_or("");
    let detail = |what: &str| one_line(&format!("claude {what}: {message}"), 300);
    if let Some(status) = object
        .api_error_status
        .as_ref()
        .and_then(serde_json::Value::as_u64)
    {
        return crate::outcome::infra(
            kind_for_http_status(status),
            detail(&format!("api error {status}")),
        );
    }
    if message.contains(NO_CONVERSATION) || stderr.contains(NO_CONVERSATION) {
        return crate::outcome::infra(InfraKind::SessionUnavailable, detail("session unavailable"));
    }
    if subtype == "error_max_budget_usd" {
        return crate::outcome::infra(InfraKind::BudgetExhausted, detail("stopped at its budget"));
    }
    // The agent worked until the turn limit: a verdict on the work, for the
    // gates to judge, not an infrastructure failure.
    if terminal_reason == "max_turns" || subtype == "error_max_turns" {
        return AttemptOutcome::Replied {
            exit_code,
            reply: object.result.clone().unwrap_or_default(),
        };
    }
    let kind = kind_from_error_text(message).unwrap_or(InfraKind::ApiError);
    let reason = match (subtype, terminal_reason) {
        ("", "") => "reported an error".to_string(),
        (subtype, "") => format!("reported an error ({subtype})"),
        ("", reason) => format!("reported an error (terminal_reason {reason})"),
        (subtype, reason) => format!("reported an error ({subtype}, terminal_reason {reason})"),
    };
    crate::outcome::infra(kind, detail(&reason))
}

/// The tool calls of a Claude Code transcript (JSON lines) with no result
/// after them: an assistant entry's `tool_use` blocks, answered by a later
/// user entry's `tool_result` with the same `tool_use_id`. Claude Code
/// writes the call before it runs the tool, so a process killed mid-tool
/// leaves one. Subagent entries (`isSidechain`) and lines that do not
/// parse (a torn last line) are not the session's own turns.
fn dangling_tool_calls(transcript: &[u8]) -> usize {
    let mut open = std::collections::BTreeSet::new();
    for line in transcript.split(|&byte| byte == b'\n') {
        let Ok(entry) = serde_json::from_slice::<Value>(line) else {
            continue;
        };
        if entry.get("isSidechain").and_then(Value::as_bool) == Some(true) {
            continue;
        }
        let Some(blocks) = entry.pointer("/message/content").and_then(Value::as_array) else {
            continue;
        };
        for block in blocks {
            match (
                entry.get("type").and_then(Value::as_str),
                block.get("type").and_then(Value::as_str),
            ) {
                (Some("assistant"), Some("tool_use")) => {
                    if let Some(id) = block.get("id").and_then(Value::as_str) {
                        open.insert(id.to_owned());
                    }
                }
                (Some("user"), Some("tool_result")) => {
                    if let Some(id) = block.get("tool_use_id").and_then(Value::as_str) {
                        open.remove(id);
                    }
                }
                _ => {}
            }
        }
    }
    open.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines shaped as Claude Code 2.1.197 writes them (trimmed).
    const PROMPT: &str =
        r#"{"type":"user","isSidechain":false,"message":{"role":"user","content":"make it"}}"#;
    const CALL: &str = r#"{"type":"assistant","isSidechain":false,"message":{"role":"assistant","content":[{"id":"toolu_1","input":{"command":"sleep 300"},"name":"Bash","type":"tool_use"}],"stop_reason":"tool_use"}}"#;
    const RESULT: &str = r#"{"type":"user","isSidechain":false,"message":{"role":"user","content":[{"tool_use_id":"toolu_1","type":"tool_result","content":"ok"}]}}"#;
    const REPLY: &str = r#"{"type":"assistant","isSidechain":false,"message":{"role":"assistant","content":[{"type":"text","text":"DONE"}]}}"#;

    fn transcript(lines: &[&str]) -> Vec<u8> {
        let mut text = lines.join("\n");
        text.push('\n');
        text.into_bytes()
    }

    #[test]
    fn a_transcript_ends_in_a_tool_call_only_when_a_call_has_no_result() {
        let ends = |transcript: &[u8]| dangling_tool_calls(transcript) > 0;
        // The adapter reads the file it is given; a missing one holds no call.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("session.jsonl");
        std::fs::write(&path, transcript(&[PROMPT, CALL])).unwrap();
        let adapter = ClaudeAdapter::new();
        assert!(adapter.ends_in_a_tool_call(&path));
        assert!(!adapter.ends_in_a_tool_call(&dir.path().join("gone.jsonl")));
        assert!(ends(&transcript(&[PROMPT, CALL])));
        // A torn line after the call changes nothing.
        let mut torn = transcript(&[PROMPT, CALL]);
        torn.extend_from_slice(br#"{"type":"user","mess"#);
        assert!(ends(&torn));
        assert!(!ends(&transcript(&[PROMPT, CALL, RESULT])));
        assert!(!ends(&transcript(&[PROMPT, CALL, RESULT, REPLY])));
        assert!(!ends(&transcript(&[PROMPT])));
        assert!(!ends(b""));
        // A subagent's unanswered call is not the session's own.
        let side = CALL.replace(r#""isSidechain":false"#, r#""isSidechain":true"#);
        assert!(!ends(&transcript(&[PROMPT, &side])));
        // A second call left open after the first was answered.
        let second = CALL.replace("toolu_1", "toolu_2");
        assert!(ends(&transcript(&[PROMPT, CALL, RESULT, &second])));
    }
    use crate::request::tests::request;

    const U1: &str = "11111111-1111-4111-8111-111111111111";
    const U2: &str = "22222222-2222-4222-8222-222222222222";

    fn argv(session: SessionMode) -> Vec<String> {
        let request = request(session, Path::new("/work/sandbox"));
        invocation(&request, PathBuf::from("/usr/bin/claude"), &[]).args
    }

    #[test]
    fn invocations_match_the_golden_vectors() {
        let prompt = "Create greeting.txt containing hello";
        assert_eq!(
            argv(SessionMode::New {
                session_id: Some(U1.into())
            }),
            [
                "-p",
                "--output-format",
                "json",
                "--permission-mode",
                "acceptEdits",
                "--session-id",
                U1,
                "--",
                prompt
            ]
        );
        assert_eq!(
            argv(SessionMode::Resume {
                session_id: U1.into()
            }),
            [
                "-p",
                "--output-format",
                "json",
                "--permission-mode",
                "acceptEdits",
                "--resume",
                U1,
                "--",
                prompt
            ]
        );
        assert_eq!(
            argv(SessionMode::Fork {
                from: U1.into(),
                new_session_id: Some(U2.into())
            }),
            [
                "-p",
                "--output-format",
                "json",
                "--permission-mode",
                "acceptEdits",
                "--resume",
                U1,
                "--fork-session",
                "--session-id",
                U2,
                "--",
                prompt
            ]
        );
    }

    #[test]
    fn invocation_carries_stdin_env_budget_and_the_expected_session() {
        let mut request = request(
            SessionMode::Fork {
                from: U1.into(),
                new_session_id: Some(U2.into()),
            },
            Path::new("/work/sandbox"),
        );
        request.prompt = "-starts with a dash".into();
        request.budget_micro_usd = Some(1_250_000);
        request.config_home = Some(PathBuf::from("/homes/claude"));
        request.env = vec![("ANTHROPIC_BASE_URL".into(), "http://127.0.0.1:1".into())];
        let tools = ["Bash".to_owned(), "Bash(git log:*)".to_owned()];
        let built = invocation(&request, PathBuf::from("/usr/bin/claude"), &tools);
        assert_eq!(built.stdin, Stdin::Null);
        assert_eq!(built.session_id.as_deref(), Some(U2));
        assert_eq!(
            built.args[built.args.len() - 7..],
            [
                "--max-budget-usd",
                "1.25",
                "--allowedTools",
                "Bash",
                "Bash(git log:*)",
                "--",
                "-starts with a dash"
            ]
        );
        assert_eq!(
            built.env,
            [
                (GIT_INSTRUCTIONS_VAR.to_string(), "1".to_string()),
                (
                    "ANTHROPIC_BASE_URL".to_string(),
                    "http://127.0.0.1:1".to_string()
                ),
                ("CLAUDE_CONFIG_DIR".to_string(), "/homes/claude".to_string())
            ]
        );
        assert_eq!(
            built
                .logged_argv(&request.prompt)
                .last()
                .map(String::as_str),
            Some("<prompt>")
        );
        let resume = invocation(
            &crate::request::tests::request(
                SessionMode::Resume {
                    session_id: U1.into(),
                },
                Path::new("/w"),
            ),
            PathBuf::from("claude"),
            &[],
        );
        assert_eq!(resume.session_id.as_deref(), Some(U1));
    }

    fn fixture(name: &str) -> String {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("testdata/claude")
            .join(name);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    fn infra_kind(parsed: &Parsed) -> InfraKind {
        match &parsed.outcome {
            AttemptOutcome::Infra { kind, .. } => *kind,
            other => panic!("expected infra, got {other:?}"),
        }
    }

    #[test]
    fn a_recorded_success_is_a_reply_with_exact_cost() {
        let parsed = parse(0, &fixture("success.json"), "");
        assert_eq!(
            parsed.outcome,
            AttemptOutcome::Replied {
                exit_code: 0,
                reply: "DONE: created greeting.txt".into()
            }
        );
        assert_eq!(
            parsed.session_id.as_deref(),
            Some("33333333-3333-4333-8333-333333333333")
        );
        // total_cost_usd 0.007595
        assert_eq!(parsed.cost_micro_usd, Some(7_595));
    }

    #[test]
    fn the_session_model_is_the_one_that_read_the_most_named_as_the_cli_names_it() {
        let parsed = parse(0, &fixture("success.json"), "");
        assert_eq!(parsed.session_model.as_deref(), Some("claude-opus-4-8[1m]"));
        let two = r#"{"type":"result","subtype":"success","is_error":false,"result":"ok","session_id":"s",
            "modelUsage":{"claude-haiku-4-5":{"inputTokens":900,"cacheReadInputTokens":0},
                          "claude-sonnet-4-6":{"inputTokens":10,"cacheReadInputTokens":5000,"cacheCreationInputTokens":40}}}"#;
        let two = two.replace('\n', " ");
        assert_eq!(
            parse(0, &two, "").session_model.as_deref(),
            Some("claude-sonnet-4-6")
        );
        let none = r#"{"type":"result","subtype":"success","is_error":false,"result":"ok"}"#;
        assert_eq!(parse(0, none, "").session_model, None);
    }

    #[test]
    fn cost_is_read_from_the_decimal_text_and_rounded_half_up() {
        for (cost, micro) in [
            ("0.0123456", 12_346),
            ("0.0123454", 12_345),
            ("1e-7", 0),
            ("0.0000015", 2),
        ] {
            let stdout = format!(
                r#"{{"type":"result","subtype":"success","is_error":false,"result":"ok","session_id":"s","total_cost_usd":{cost}}}"#
            );
            assert_eq!(parse(0, &stdout, "").cost_micro_usd, Some(micro), "{cost}");
        }
        let no_cost = r#"{"type":"result","subtype":"success","is_error":false,"result":"ok","total_cost_usd":null}"#;
        assert_eq!(parse(0, no_cost, "").cost_micro_usd, None);
    }

    #[test]
    fn recorded_api_errors_are_infra_despite_subtype_success() {
        let cases = [
            ("http_401.json", InfraKind::AuthFailed),
            ("http_403.json", InfraKind::AuthFailed),
            ("http_429.json", InfraKind::RateLimited),
            ("http_529.json", InfraKind::Overloaded),
            ("http_500.json", InfraKind::ApiError),
        ];
        for (name, kind) in cases {
            let stdout = fixture(name);
            assert!(stdout.contains(r#""subtype":"success""#), "{name}");
            let parsed = parse(1, &stdout, "");
            assert_eq!(infra_kind(&parsed), kind, "{name}");
            assert!(parsed.session_id.is_some(), "{name}");
            assert_eq!(parsed.cost_micro_usd, Some(0), "{name}");
        }
        let AttemptOutcome::Infra { detail, .. } = parse(1, &fixture("http_401.json"), "").outcome
        else {
            unreachable!()
        };
        assert_eq!(
            detail,
            "claude api error 401: Failed to authenticate. API Error: 401 scripted 401"
        );
    }

    #[test]
    fn is_error_with_subtype_success_and_no_status_is_infra() {
        let stdout = r#"{"type":"result","subtype":"success","is_error":true,"api_error_status":null,"result":"API Error: Connection error.","session_id":"s","total_cost_usd":0,"terminal_reason":"completed"}"#;
        assert_eq!(infra_kind(&parse(1, stdout, "")), InfraKind::Network);
        let stdout = r#"{"type":"result","subtype":"success","is_error":true,"result":"something odd","terminal_reason":"model_error"}"#;
        let parsed = parse(0, stdout, "");
        assert_eq!(
            parsed.outcome,
            AttemptOutcome::Infra {
                kind: InfraKind::ApiError,
                detail:
                    "claude reported an error (success, terminal_reason model_error): something odd"
                        .into()
            }
        );
    }

    #[test]
    fn an_exceeded_budget_is_budget_exhausted() {
        let parsed = parse(1, &fixture("max_budget.json"), "");
        assert_eq!(infra_kind(&parsed), InfraKind::BudgetExhausted);
        assert_eq!(parsed.cost_micro_usd, Some(7_595));
    }

    #[test]
    fn the_turn_limit_is_a_reply_for_the_gates() {
        let stdout = r#"{"type":"result","subtype":"error_max_turns","is_error":true,"session_id":"s","total_cost_usd":0.5,"terminal_reason":"max_turns","errors":["Reached maximum number of turns (3)"]}"#;
        assert_eq!(
            parse(1, stdout, "").outcome,
            AttemptOutcome::Replied {
                exit_code: 1,
                reply: String::new()
            }
        );
    }

    #[test]
    fn an_unknown_session_is_session_unavailable() {
        let parsed = parse(1, "", &fixture("unknown_session.stderr"));
        assert_eq!(
            parsed.outcome,
            AttemptOutcome::Infra {
                kind: InfraKind::SessionUnavailable,
                detail: "claude: No conversation found with session ID: 22222222-2222-4222-8222-222222222222".into()
            }
        );
    }

    #[test]
    fn garbage_and_refusals_without_a_result_object_are_api_errors() {
        let parsed = parse(1, "", &fixture("session_in_use.stderr"));
        assert_eq!(
            parsed.outcome,
            AttemptOutcome::Infra {
                kind: InfraKind::ApiError,
                detail: "claude exited 1 without a result object: Error: Session ID 11111111-1111-4111-8111-111111111500 is already in use.".into()
            }
        );
        for stdout in [
            "",
            "not json at all",
            r#"{"type":"assistant","result":"x"}"#,
            "{\"type\":\"result\",\"result\":",
        ] {
            assert_eq!(
                infra_kind(&parse(0, stdout, "")),
                InfraKind::ApiError,
                "{stdout:?}"
            );
        }
    }

    #[test]
    fn a_result_line_after_other_output_is_found() {
        let stdout = "some banner\n{\"type\":\"system\"}\n{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"result\":\"hi\",\"session_id\":\"abc\"}\n";
        let parsed = parse(0, stdout, "");
        assert_eq!(
            parsed.outcome,
            AttemptOutcome::Replied {
                exit_code: 0,
                reply: "hi".into()
            }
        );
        assert_eq!(parsed.session_id.as_deref(), Some("abc"));
    }

    #[test]
    fn project_directory_names_follow_the_cli() {
        assert_eq!(project_dir_name(Path::new("/tmp/clis/w1")), "-tmp-clis-w1");
        assert_eq!(
            project_dir_name(Path::new("/tmp/clis/w.x_y z")),
            "-tmp-clis-w-x-y-z"
        );
        assert_eq!(project_dir_name(Path::new("/a/é/😀")), "-a-----");
    }

    #[test]
    fn transcript_path_uses_the_config_home_and_the_real_cwd() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cwd = dir.path().join("sand.box");
        std::fs::create_dir(&cwd).expect("mkdir");
        let home = dir.path().join("home");
        let adapter = ClaudeAdapter::new();
        let path = adapter
            .transcript_path(U1, &cwd, Some(&home))
            .expect("a path");
        let real = cwd.canonicalize().expect("canonical");
        assert_eq!(
            path,
            home.join("projects")
                .join(project_dir_name(&real))
                .join(format!("{U1}.jsonl"))
        );
        assert!(
            path.to_string_lossy()
                .ends_with(&format!("-sand-box/{U1}.jsonl"))
        );
        assert_eq!(adapter.transcript_path("../x", &cwd, Some(&home)), None);
    }

    #[test]
    fn long_project_names_are_discovered() {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = dir.path().join("home");
        let cwd = PathBuf::from(format!("/{}", "a".repeat(250)));
        let name = project_dir_name(&cwd);
        let adapter = ClaudeAdapter::new();
        assert_eq!(adapter.transcript_path(U1, &cwd, Some(&home)), None);
        let shortened = home
            .join("projects")
            .join(format!("{}-1x2y3z", &name[..200]));
        std::fs::create_dir_all(&shortened).expect("mkdir");
        std::fs::write(shortened.join(format!("{U1}.jsonl")), "{}\n").expect("write");
        assert_eq!(
            adapter.transcript_path(U1, &cwd, Some(&home)),
            Some(shortened.join(format!("{U1}.jsonl")))
        );
    }

    #[test]
    fn the_strategy_is_fork() {
        let adapter = ClaudeAdapter::new();
        assert_eq!(adapter.name(), "claude");
        assert_eq!(adapter.strategy(), ResumeStrategy::NativeForkable);
        assert_eq!(
            adapter.strategy().capability(),
            reprise_core::retry::Capability::Fork
        );
    }

    /// 2026-12-01T12:00:00Z.
    const NOW: u64 = 1_796_126_400;

    fn settled(stdout: &str) -> Parsed {
        let clock = crate::park::Clock {
            now_unix: NOW,
            zone: "UTC".into(),
        };
        crate::park::settle_usage_limit(parse(1, stdout, ""), &clock)
    }

    /// The recorded 429 result with `text` as what the CLI said.
    fn limit_result(text: &str) -> String {
        fixture("http_429.json").replace("API Error: Request rejected (429) · scripted 429", text)
    }

    #[test]
    fn a_usage_limit_result_with_its_reset_is_to_be_parked_until_then() {
        use reprise_core::reset::ResetSource;
        for (text, unix, source) in [
            (
                "Claude AI usage limit reached|1796130000".to_owned(),
                1_796_130_000,
                ResetSource::UnixTime,
            ),
            (
                "You've hit your session limit · resets 3pm (UTC)".to_owned(),
                NOW + 3 * 3600,
                ResetSource::WallClock,
            ),
            (
                "5-hour limit reached ∙ resets 1:30pm".to_owned(),
                NOW + 5400,
                ResetSource::WallClock,
            ),
        ] {
            let parsed = settled(&limit_result(&text));
            assert_eq!(infra_kind(&parsed), InfraKind::UsageLimit, "{text}");
            assert_eq!(
                parsed.park,
                Some(ParkSignal::Until { unix, source }),
                "{text}"
            );
            assert_eq!(
                parsed.session_id.as_deref(),
                Some("11111111-1111-4111-8111-111111111429")
            );
        }
        // A plain 429, and a limit that names no reset, stay rate limits.
        for stdout in [
            fixture("http_429.json"),
            limit_result("Claude AI usage limit reached"),
            limit_result(&format!("Claude AI usage limit reached|{}", NOW - 60)),
        ] {
            let parsed = settled(&stdout);
            assert_eq!(infra_kind(&parsed), InfraKind::RateLimited);
            assert_eq!(parsed.park, None);
        }
    }

    /// Recorded from Claude Code 2.1.197 (OAuth login, so it speaks of the
    /// plan's limits) against a local server answering HTTP 429 with a
    /// `rate_limit_error` body, `retry-after: 3600` and
    /// `anthropic-ratelimit-unified-{status: rejected, reset: 1796131992,
    /// representative-claim: five_hour}`, at 1796128467 (12:34:27 UTC). It
    /// shows the reset to the minute only, in the machine's zone.
    #[test]
    fn the_recorded_session_limit_result_is_parked_until_its_reset() {
        let clock = crate::park::Clock {
            now_unix: 1_796_128_467,
            zone: "UTC".into(),
        };
        let recorded = fixture("usage_limit.json");
        assert!(recorded.contains("You've hit your session limit · resets 1:33pm (UTC)"));
        let parsed = crate::park::settle_usage_limit(parse(1, &recorded, ""), &clock);
        assert_eq!(infra_kind(&parsed), InfraKind::UsageLimit);
        assert_eq!(
            parsed.park,
            Some(ParkSignal::Until {
                // 13:33:00 UTC: the server's 13:33:12 as the CLI rounds it.
                unix: 1_796_131_980,
                source: reprise_core::reset::ResetSource::WallClock
            })
        );
        assert_eq!(
            parsed.session_id.as_deref(),
            Some("11111111-1111-4111-8111-111111111430")
        );
    }

    #[test]
    fn a_result_with_permission_denials_awaits_permission_with_the_denied_tool() {
        let denied = fixture("success.json").replace(
            r#""permission_denials":[]"#,
            r#""permission_denials":[{"tool_name":"Bash","tool_use_id":"toolu_01","tool_input":{"command":"make deploy","description":"Deploy"}}]"#,
        );
        assert_ne!(
            denied,
            fixture("success.json"),
            "the fixture has no permission_denials"
        );
        let parsed = parse(0, &denied, "");
        assert_eq!(infra_kind(&parsed), InfraKind::AwaitingPermission);
        assert_eq!(
            parsed.park,
            Some(ParkSignal::Approval {
                question:
                    r#"allow claude to use: Bash {"command":"make deploy","description":"Deploy"}"#
                        .into()
            })
        );
        // The session and spend are still known, for the resume.
        assert!(parsed.session_id.is_some());
        assert_eq!(
            parsed.cost_micro_usd,
            parse(0, &fixture("success.json"), "").cost_micro_usd
        );
        // Nothing denied: a reply, as before.
        assert_eq!(parse(0, &fixture("success.json"), "").park, None);
        // A failure of the machinery is reported first.
        let failed = fixture("http_429.json").replace(
            r#""permission_denials":[]"#,
            r#""permission_denials":[{"tool_name":"Write","tool_input":{"file_path":"/etc/x"}}]"#,
        );
        let parsed = parse(1, &failed, "");
        assert_eq!(infra_kind(&parsed), InfraKind::RateLimited);
        assert_eq!(parsed.park, None);
    }
}
