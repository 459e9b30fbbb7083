//! The `gemini` adapter (Gemini CLI): a pure invocation builder, a pure
//! parser of its `-o json` result object, and the discovery of its chat
//! files. Gemini resumes sessions but cannot fork them headlessly, so its
//! strategy is `Native`.
//!
//! Checked against `@google/gemini-cli` 0.61.0 offline (`--help`, an auth
//! failure, an unknown session, an untrusted folder); the recorded outputs
//! are the test vectors in `testdata/gemini/`. The real CLI is also driven
//! through rehearsal's scripted Gemini API (`GOOGLE_GEMINI_BASE_URL`): a new
//! session, a warm `--resume` of it that carries the earlier turns, and a
//! cold retry (`reprise-cli/tests/real_agents.rs`).
//!
//! The invocation, for a prompt P:
//!
//! | mode | arguments |
//! |---|---|
//! | new | `--prompt=P -o json --skip-trust --approval-mode auto_edit --session-id <uuid>` |
//! | warm | `--prompt=P -o json --skip-trust --approval-mode auto_edit --resume <id>` |
//! | fork | not run: `api_error` "fork unsupported" |
//!
//! `--prompt=P` in one argument keeps a prompt that starts with `-` from
//! being read as options. `--skip-trust` is needed headless (an untrusted
//! folder exits 55) and `auto_edit` lets edit tools run, as `acceptEdits`
//! does for claude. Stdin is `/dev/null` (gemini appends stdin to the
//! prompt). `config_home` becomes `GEMINI_CLI_HOME`, the directory that holds
//! `.gemini/`.
//!
//! Exit codes: 0 success, 1 general error, 41 authentication, 42 input
//! (including an unknown session to resume), 44 sandbox, 52 config, 53 turn
//! limit, 54 tool execution, 55 untrusted folder, 130 cancelled; an API error
//! exits with its HTTP status modulo 256, so the JSON `error.code` (written
//! to stderr on failure) is read first. Gemini reports no cost.

use std::path::{Path, PathBuf};

use reprise_core::retry::ResumeStrategy;
use serde_json::Value;

use crate::home::{StateHome, child_var, is_plain_session_id};
use crate::outcome::{
    AttemptOutcome, AttemptReport, InfraKind, Parsed, infra, kind_for_http_status,
    kind_from_error_text, one_line, stderr_summary,
};
use crate::process::{CliSpec, Invocation, Stdin, VersionCache, run_cli};
use crate::request::{
    Adapter, AttemptRequest, CancelToken, ResumeCache, SessionMode, StatePaths,
    with_chosen_session_ids,
};

const SPEC: CliSpec = CliSpec {
    name: "gemini",
    bin_env: "REPRISE_GEMINI_BIN",
};

/// Drives Gemini CLI headless; resumes its native sessions (no fork).
/// Where gemini keeps its state.
pub(crate) const GEMINI_STATE: StateHome = StateHome {
    env_var: "GEMINI_CLI_HOME",
    home_dir: "",
    state_dir: ".gemini",
    home_files: &[],
};

#[derive(Debug, Default)]
pub struct GeminiAdapter {
    versions: VersionCache,
    options: crate::options::CliOptions,
}

impl GeminiAdapter {
    /// A gemini adapter; the binary comes from each request.
    pub fn new() -> Self {
        Self::default()
    }

    /// The plan's model, extra arguments and environment for Gemini CLI.
    #[must_use]
    pub fn with_options(self, options: crate::options::CliOptions) -> Self {
        Self { options, ..self }
    }
}

impl Adapter for GeminiAdapter {
    fn name(&self) -> &'static str {
        SPEC.name
    }

    fn strategy(&self) -> ResumeStrategy {
        ResumeStrategy::Native
    }

    fn chooses_session_ids(&self) -> bool {
        true
    }

    fn run(&self, request: &AttemptRequest, cancel: &CancelToken) -> AttemptReport {
        if let SessionMode::Fork { from, .. } = &request.session {
            // The engine never asks (the strategy says resume only); refuse
            // rather than silently resuming the original.
            return AttemptReport {
                outcome: infra(
                    InfraKind::ApiError,
                    format!(
                        "gemini cannot fork session {from} headlessly (fork unsupported); retry warm or cold"
                    ),
                ),
                session_id: None,
                cost_micro_usd: None,
                session_model: None,
                adapter: SPEC.name,
                cli_version: None,
                cwd: request.cwd.clone(),
                config_home: request.config_home.clone(),
                argv: Vec::new(),
                elapsed: std::time::Duration::ZERO,
                streams: Default::default(),
                park: None,
            };
        }
        let request = with_chosen_session_ids(request);
        run_cli(
            SPEC,
            &self.versions,
            &request,
            cancel,
            |request, program| {
                self.options
                    .apply(invocation(request, program), request.model.as_deref())
            },
            parse,
        )
    }

    fn state_paths(&self, config_home: Option<&Path>, home: Option<&Path>) -> StatePaths {
        GEMINI_STATE.paths(config_home, &child_var(&self.options.env, home))
    }

    /// 0.61 rebuilds a resumed session's history unlike the one it sent
    /// (each call without its thought signature, each tool result twice), so
    /// a resume shares only the system prompt and tools with the cache, as a
    /// new session does. It cannot fork.
    fn resume_cache(&self) -> Option<ResumeCache> {
        Some(ResumeCache {
            warm_keeps: false,
            fork_keeps: false,
            cold_keeps_prefix: true,
            prefix_tokens: 11_000,
            read_per_mille: 100,
            write_per_mille: 1000,
            lifetime: std::time::Duration::from_secs(5 * 60),
        })
    }

    /// The chat's last message `tokens.input` (cached tokens included).
    fn last_prompt_tokens(&self, transcript: &[u8]) -> Option<u64> {
        crate::request::last_object_after(transcript, "tokens")?
            .get("input")?
            .as_u64()
    }

    fn keeps_transcripts(&self) -> bool {
        true
    }

    /// Discovered: `<root>/.gemini/tmp/<project>/chats/session-<ts>-<first 8
    /// characters of the id>.jsonl` whose first line names the session,
    /// where the root is `config_home`, else `$GEMINI_CLI_HOME`, else
    /// `$HOME`. The project directory is a per-cwd name the CLI assigns (in
    /// `.gemini/projects.json`), so every project is searched. `None` when no
    /// chat file names the session.
    fn transcript_path(
        &self,
        session_id: &str,
        _cwd: &Path,
        config_home: Option<&Path>,
    ) -> Option<PathBuf> {
        if session_id.len() < 8 || !is_plain_session_id(session_id) {
            return None;
        }
        let root = GEMINI_STATE.root(config_home, &child_var(&self.options.env, None))?;
        let suffix = format!("-{}.jsonl", &session_id[..8]);
        let mut projects: Vec<PathBuf> = std::fs::read_dir(root.join(".gemini/tmp"))
            .ok()?
            .filter_map(Result::ok)
            .map(|entry| entry.path().join("chats"))
            .collect();
        projects.sort();
        projects.into_iter().find_map(|chats| {
            let mut files: Vec<PathBuf> = std::fs::read_dir(&chats)
                .ok()?
                .filter_map(Result::ok)
                .map(|entry| entry.path())
                .filter(|path| {
                    path.file_name()
                        .map(|name| name.to_string_lossy())
                        .is_some_and(|name| name.starts_with("session-") && name.ends_with(&suffix))
                })
                .collect();
            files.sort();
            files
                .into_iter()
                .find(|path| chat_names_session(path, session_id))
        })
    }
}

/// Whether the chat file's first line is `{"sessionId": session_id, ...}`.
fn chat_names_session(path: &Path, session_id: &str) -> bool {
    let Ok(text) = std::fs::read_to_string(path) else {
        return false;
    };
    let first = text.lines().next().unwrap_or("");
    serde_json::from_str::<Value>(first)
        .ok()
        .and_then(|head| {
            head.get("sessionId")
                .and_then(Value::as_str)
                .map(|id| id == session_id)
        })
        .unwrap_or(false)
}

/// Builds the gemini command line for `request` (new or warm, ids chosen).
pub(crate) fn invocation(request: &AttemptRequest, program: PathBuf) -> Invocation {
    let mut args: Vec<String> = vec![
        format!("--prompt={}", request.prompt),
        "-o".into(),
        "json".into(),
        "--skip-trust".into(),
        "--approval-mode".into(),
        "auto_edit".into(),
    ];
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
        // Refused before building; built as a resume of nothing if it ever
        // gets here, which the CLI rejects.
        SessionMode::Fork { .. } => None,
    };
    let mut env = request.env.clone();
    if let Some(home) = &request.config_home {
        env.push((
            "GEMINI_CLI_HOME".into(),
            home.to_string_lossy().into_owned(),
        ));
    }
    Invocation {
        cli_prefixes: &[],
        provider: crate::network::Provider::Any,
        program,
        args,
        env,
        stdin: Stdin::Null,
        prompt_arg: Some(0),
        session_id,
    }
}

/// The first JSON object in `text` that looks like gemini's result (has a
/// `session_id`, `response` or `error` member): the whole text, or one
/// starting at a line that begins with `{` (stderr carries logs before it).
fn result_object(text: &str) -> Option<Value> {
    let looks_right = |value: &Value| {
        value.is_object()
            && ["session_id", "response", "error"]
                .iter()
                .any(|key| value.get(key).is_some())
    };
    if let Ok(value) = serde_json::from_str::<Value>(text.trim())
        && looks_right(&value)
    {
        return Some(value);
    }
    let mut starts: Vec<usize> = Vec::new();
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        if line.starts_with('{') {
            starts.push(offset);
        }
        offset += line.len();
    }
    starts.into_iter().rev().find_map(|start| {
        serde_json::Deserializer::from_str(&text[start..])
            .into_iter::<Value>()
            .next()?
            .ok()
            .filter(looks_right)
    })
}

/// Classifies one finished `gemini -o json` run.
pub(crate) fn parse(exit_code: i32, stdout: &str, stderr: &str) -> Parsed {
    let object = result_object(stdout).or_else(|| result_object(stderr));
    let Some(object) = object else {
        let said = stderr_summary(stderr);
        let outcome = match exit_code {
            _ if kind_from_error_text(stderr) == Some(InfraKind::SessionUnavailable) => {
                infra(InfraKind::SessionUnavailable, format!("gemini: {said}"))
            }
            53 => AttemptOutcome::Replied {
                exit_code,
                reply: String::new(),
            },
            _ => infra(
                kind_for_exit_code(exit_code).unwrap_or(InfraKind::ApiError),
                format!("gemini exited {exit_code} without a result object: {said}"),
            ),
        };
        return Parsed {
            limit_text: Some(stderr.to_owned()),
            ..Parsed::of(outcome)
        };
    };
    let session_id = object
        .get("session_id")
        .and_then(Value::as_str)
        .filter(|id| !id.is_empty())
        .map(String::from);
    let response = object
        .get("response")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let error = object.get("error").filter(|error| !error.is_null());
    // The whole error (its message and details), where a quota's reset is.
    let limit_text = error
        .map(|error| match error.get("message").and_then(Value::as_str) {
            Some(message) => format!("{message} {error}"),
            None => error.to_string(),
        })
        .or_else(|| (!stderr.trim().is_empty()).then(|| stderr.to_owned()));
    let outcome = match error {
        None => AttemptOutcome::Replied {
            exit_code,
            reply: response,
        },
        Some(error) => classify_error(exit_code, error, response),
    };
    Parsed {
        session_id,
        limit_text,
        ..Parsed::of(outcome)
    }
}

fn classify_error(exit_code: i32, error: &Value, response: String) -> AttemptOutcome {
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .map_or_else(|| error.to_string(), String::from);
    let error_type = error.get("type").and_then(Value::as_str).unwrap_or("Error");
    let code = error.get("code").and_then(Value::as_u64);
    let detail = one_line(&format!("gemini {error_type}: {message}"), 300);
    if code == Some(53) || error_type == "FatalTurnLimitedError" {
        // The agent worked until the turn limit: a verdict for the gates.
        return AttemptOutcome::Replied {
            exit_code,
            reply: response,
        };
    }
    if kind_from_error_text(&message) == Some(InfraKind::SessionUnavailable) {
        return infra(InfraKind::SessionUnavailable, detail);
    }
    let kind = match code {
        Some(status @ 100..=599) => kind_for_http_status(status),
        Some(code) => i32::try_from(code)
            .ok()
            .and_then(kind_for_exit_code)
            .unwrap_or(InfraKind::ApiError),
        None => kind_from_error_text(&message).unwrap_or(InfraKind::ApiError),
    };
    infra(kind, detail)
}

/// The infrastructure kinds gemini's own exit codes name.
fn kind_for_exit_code(exit_code: i32) -> Option<InfraKind> {
    match exit_code {
        41 => Some(InfraKind::AuthFailed),
        130 => Some(InfraKind::Cancelled),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::tests::request;

    const U1: &str = "99999999-9999-4999-8999-999999999999";

    fn built(session: SessionMode) -> Invocation {
        invocation(
            &request(session, Path::new("/work/sandbox")),
            PathBuf::from("gemini"),
        )
    }

    #[test]
    fn invocations_match_the_golden_vectors() {
        let prompt = "--prompt=Create greeting.txt containing hello";
        let common = [
            prompt,
            "-o",
            "json",
            "--skip-trust",
            "--approval-mode",
            "auto_edit",
        ];
        let new = built(SessionMode::New {
            session_id: Some(U1.into()),
        });
        assert_eq!(new.args, [&common[..], &["--session-id", U1]].concat());
        assert_eq!(new.session_id.as_deref(), Some(U1));
        let resume = built(SessionMode::Resume {
            session_id: U1.into(),
        });
        assert_eq!(resume.args, [&common[..], &["--resume", U1]].concat());
        assert_eq!(resume.session_id.as_deref(), Some(U1));
        for invocation in [new, resume] {
            assert_eq!(invocation.stdin, Stdin::Null);
            assert_eq!(
                invocation.logged_argv("Create greeting.txt containing hello")[1],
                "--prompt=<prompt>"
            );
        }
    }

    #[test]
    fn the_config_home_becomes_gemini_cli_home() {
        let mut request = request(SessionMode::New { session_id: None }, Path::new("/w"));
        request.config_home = Some(PathBuf::from("/homes/gemini"));
        let built = invocation(&request, PathBuf::from("gemini"));
        assert_eq!(
            built.env,
            [("GEMINI_CLI_HOME".to_string(), "/homes/gemini".to_string())]
        );
    }

    #[test]
    fn fork_is_refused_without_running_anything() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut request = request(
            SessionMode::Fork {
                from: U1.into(),
                new_session_id: None,
            },
            dir.path(),
        );
        request.bin = Some(PathBuf::from("/nonexistent/gemini"));
        let report = GeminiAdapter::new().run(&request, &CancelToken::new());
        let AttemptOutcome::Infra { kind, detail } = report.outcome else {
            panic!("expected infra")
        };
        assert_eq!(kind, InfraKind::ApiError);
        assert!(detail.contains("fork unsupported"), "{detail}");
        assert!(report.argv.is_empty());
    }

    fn fixture(name: &str) -> String {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("testdata/gemini")
            .join(name);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    #[test]
    fn a_success_is_a_reply_with_the_session_id() {
        let stdout = format!(
            "{{\n  \"session_id\": \"{U1}\",\n  \"response\": \"DONE: greeting written\",\n  \"stats\": {{\"models\": {{}}, \"tools\": {{\"totalCalls\": 1}}, \"files\": {{\"totalLinesAdded\": 1}}}}\n}}"
        );
        let parsed = parse(
            0,
            &stdout,
            "Ripgrep is not available. Falling back to GrepTool.\n",
        );
        assert_eq!(
            parsed.outcome,
            AttemptOutcome::Replied {
                exit_code: 0,
                reply: "DONE: greeting written".into()
            }
        );
        assert_eq!(parsed.session_id.as_deref(), Some(U1));
        assert_eq!(parsed.cost_micro_usd, None);
    }

    #[test]
    fn a_recorded_auth_failure_on_stderr_is_auth_failed() {
        // The CLI exited 145 (401 modulo 256) and wrote the JSON to stderr.
        let parsed = parse(145, "", &fixture("http_401.stderr"));
        assert_eq!(parsed.session_id.as_deref(), Some(U1));
        let AttemptOutcome::Infra { kind, .. } = parsed.outcome else {
            panic!("expected infra: {parsed:?}")
        };
        assert_eq!(kind, InfraKind::AuthFailed);
    }

    #[test]
    fn error_codes_are_classified() {
        let cases = [
            (
                41,
                "FatalAuthenticationError",
                "Invalid auth method selected.",
                Some(InfraKind::AuthFailed),
            ),
            (
                173,
                "ApiError",
                "rate limited",
                Some(InfraKind::RateLimited),
            ),
            (17, "ApiError", "overloaded", Some(InfraKind::Overloaded)),
            (244, "ApiError", "internal", Some(InfraKind::ApiError)),
            (
                42,
                "FatalInputError",
                "No input provided via stdin.",
                Some(InfraKind::ApiError),
            ),
            (
                53,
                "FatalTurnLimitedError",
                "Reached max session turns",
                None,
            ),
            (
                52,
                "FatalConfigError",
                "bad settings",
                Some(InfraKind::ApiError),
            ),
        ];
        let codes = [41, 429, 529, 500, 42, 53, 52];
        for ((exit, error_type, message, expected), code) in cases.into_iter().zip(codes) {
            let stderr = format!(
                "log line\n{{\n  \"session_id\": \"{U1}\",\n  \"error\": {{\"type\": \"{error_type}\", \"message\": \"{message}\", \"code\": {code}}}\n}}\n"
            );
            let parsed = parse(exit, "", &stderr);
            match (expected, &parsed.outcome) {
                (Some(kind), AttemptOutcome::Infra { kind: got, .. }) => {
                    assert_eq!(*got, kind, "{code}");
                }
                (None, AttemptOutcome::Replied { exit_code, reply }) => {
                    assert_eq!((*exit_code, reply.as_str()), (53, ""), "{code}");
                }
                (_, outcome) => panic!("code {code}: unexpected {outcome:?}"),
            }
        }
    }

    #[test]
    fn exit_42_and_53_without_json_are_classified() {
        let parsed = parse(42, "", &fixture("unknown_session.stderr"));
        assert_eq!(
            parsed.outcome,
            AttemptOutcome::Infra {
                kind: InfraKind::SessionUnavailable,
                detail: "gemini: Error resuming session: Invalid session identifier \"88888888-8888-4888-8888-888888888888\".".into()
            }
        );
        let parsed = parse(42, "", "No input provided via stdin.\n");
        assert_eq!(
            parsed.outcome,
            AttemptOutcome::Infra {
                kind: InfraKind::ApiError,
                detail: "gemini exited 42 without a result object: No input provided via stdin."
                    .into()
            }
        );
        assert_eq!(
            parse(53, "", "").outcome,
            AttemptOutcome::Replied {
                exit_code: 53,
                reply: String::new()
            }
        );
        let AttemptOutcome::Infra { kind, .. } = parse(41, "", "no auth").outcome else {
            panic!("expected infra")
        };
        assert_eq!(kind, InfraKind::AuthFailed);
    }

    #[test]
    fn garbage_is_an_api_error() {
        for (exit, stdout) in [(0, ""), (1, "{\"unrelated\": true}"), (0, "not json")] {
            let AttemptOutcome::Infra { kind, .. } = parse(exit, stdout, "").outcome else {
                panic!("expected infra for {stdout:?}")
            };
            assert_eq!(kind, InfraKind::ApiError, "{stdout:?}");
        }
    }

    #[test]
    fn chats_are_discovered_by_their_first_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let chats = dir.path().join(".gemini/tmp/w3/chats");
        std::fs::create_dir_all(&chats).expect("mkdir");
        let other = "99999999-9999-4999-8999-000000000000";
        std::fs::write(
            chats.join("session-2026-11-29T21-56-99999999.jsonl"),
            format!("{{\"sessionId\":\"{other}\",\"kind\":\"main\"}}\n"),
        )
        .expect("write");
        let ours = chats.join("session-2026-11-29T21-58-99999999.jsonl");
        std::fs::write(
            &ours,
            format!("{{\"sessionId\":\"{U1}\",\"kind\":\"main\"}}\n{{}}\n"),
        )
        .expect("write");
        let adapter = GeminiAdapter::new();
        assert_eq!(
            adapter.transcript_path(U1, Path::new("/w3"), Some(dir.path())),
            Some(ours)
        );
        assert_eq!(
            adapter.transcript_path(
                "99999999-9999-4999-8999-111111111111",
                Path::new("/w3"),
                Some(dir.path())
            ),
            None
        );
        assert_eq!(
            adapter.transcript_path("../../x", Path::new("/"), Some(dir.path())),
            None
        );
    }

    #[test]
    fn the_strategy_is_resume() {
        let adapter = GeminiAdapter::new();
        assert_eq!(adapter.name(), "gemini");
        assert_eq!(adapter.strategy(), ResumeStrategy::Native);
        assert_eq!(
            adapter.strategy().capability(),
            reprise_core::retry::Capability::Resume
        );
    }

    #[test]
    fn a_quota_error_with_its_reset_is_to_be_parked_until_then() {
        use crate::outcome::ParkSignal;
        use reprise_core::reset::ResetSource;
        let clock = crate::park::Clock {
            now_unix: 1_796_126_400,
            zone: "UTC".into(),
        };
        let stderr = format!(
            "log line\n{{\n  \"session_id\": \"{U1}\",\n  \"error\": {{\"type\": \"ApiError\", \"message\": \"You exceeded your current quota, please check your plan and billing details. Please retry in 27.5s.\", \"code\": 429}}\n}}\n"
        );
        let parsed = crate::park::settle_usage_limit(parse(1, "", &stderr), &clock);
        let AttemptOutcome::Infra { kind, .. } = &parsed.outcome else {
            panic!("{parsed:?}")
        };
        assert_eq!(*kind, InfraKind::UsageLimit);
        assert_eq!(
            parsed.park,
            Some(ParkSignal::Until {
                unix: 1_796_126_428,
                source: ResetSource::Relative
            })
        );
        // A 429 that is no quota, or names no time, stays a rate limit.
        for message in ["Too Many Requests", "Quota exceeded for quota metric"] {
            let stderr = stderr.replace(
                "You exceeded your current quota, please check your plan and billing details. Please retry in 27.5s.",
                message,
            );
            let parsed = crate::park::settle_usage_limit(parse(1, "", &stderr), &clock);
            let AttemptOutcome::Infra { kind, .. } = &parsed.outcome else {
                panic!("{parsed:?}")
            };
            assert_eq!(*kind, InfraKind::RateLimited, "{message}");
            assert_eq!(parsed.park, None);
        }
    }
}
