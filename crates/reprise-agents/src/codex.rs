//! The `codex` adapter (OpenAI Codex CLI): a pure invocation builder, a pure
//! parser of `codex exec --json` event lines, and the discovery of its
//! rollout files.
//!
//! Checked against `@openai/codex` 0.171.0 offline, with a local server
//! answering the Responses API (new, resume and fork sessions, 401, 429,
//! 500, an unknown session); the recorded outputs are the test vectors in
//! `testdata/codex/`.
//!
//! The invocation, for a prompt P:
//!
//! | mode | arguments |
//! |---|---|
//! | new | `exec --json --skip-git-repo-check -c sandbox_mode=workspace-write -- P` |
//! | warm | `exec resume --json --skip-git-repo-check -c sandbox_mode=workspace-write -- <id> P` |
//! | fork | `exec fork --json --skip-git-repo-check -c sandbox_mode=workspace-write -- <id> P` |
//!
//! Contained by reprise (Landlock), the mode is `sandbox_mode=danger-full-access`
//! instead: Codex's workspace-write sandbox is bubblewrap, which must change
//! mounts, and no process in a Landlock domain may; reprise's sandbox then
//! confines the commands Codex runs (writes to the worktree, its `TMPDIR`
//! and `CODEX_HOME`), but not their network access, which Codex's own
//! sandbox would have cut.
//!
//! `exec resume` takes neither `-s` nor `-C`, so the sandbox mode goes
//! through `-c` in every mode (the same policy for new, warm and fork) and
//! the child is spawned in the session's cwd. Positionals follow `--`: a
//! prompt such as `resume` or `-x` would otherwise be read as a subcommand
//! or an option. Codex picks its own thread ids, so any id the request
//! suggests for a new or forked session is ignored and the id is read from
//! `thread.started`. Stdin is `/dev/null` (else codex waits to read it).
//! Codex reports token usage but no cost, so cost is unknown and a budget
//! cannot be enforced.

use std::path::{Path, PathBuf};

use reprise_core::retry::ResumeStrategy;
use serde_json::Value;

use crate::home::{StateHome, child_var, is_plain_session_id};
use crate::outcome::{
    AttemptOutcome, AttemptReport, InfraKind, Parsed, kind_from_error_text, one_line,
    stderr_summary,
};
use crate::process::{CliSpec, Invocation, Stdin, VersionCache, run_cli};
use crate::request::{Adapter, AttemptRequest, CancelToken, ResumeCache, SessionMode, StatePaths};

const SPEC: CliSpec = CliSpec {
    name: "codex",
    bin_env: "REPRISE_CODEX_BIN",
};

/// Drives `codex exec`; resumes and forks its native threads.
/// Where codex keeps its state.
const CODEX_STATE: StateHome = StateHome {
    env_var: "CODEX_HOME",
    home_dir: ".codex",
    state_dir: "",
    home_files: &[],
};

#[derive(Debug, Default)]
pub struct CodexAdapter {
    versions: VersionCache,
    options: crate::options::CliOptions,
}

impl CodexAdapter {
    /// A codex adapter; the binary comes from each request.
    pub fn new() -> Self {
        Self::default()
    }

    /// The plan's model, extra arguments and environment for Codex.
    #[must_use]
    pub fn with_options(self, options: crate::options::CliOptions) -> Self {
        Self { options, ..self }
    }
}

impl Adapter for CodexAdapter {
    fn name(&self) -> &'static str {
        SPEC.name
    }

    fn strategy(&self) -> ResumeStrategy {
        ResumeStrategy::NativeForkable
    }

    fn run(&self, request: &AttemptRequest, cancel: &CancelToken) -> AttemptReport {
        run_cli(
            SPEC,
            &self.versions,
            request,
            cancel,
            |request, program| {
                self.options
                    .apply(invocation(request, program), request.model.as_deref())
            },
            parse,
        )
    }

    fn state_paths(&self, config_home: Option<&Path>, home: Option<&Path>) -> StatePaths {
        CODEX_STATE.paths(config_home, &child_var(&self.options.env, home))
    }

    /// 0.171 resumes a thread with its prompt byte for byte under the same
    /// `prompt_cache_key` (the thread id); a fork or a new session is a new
    /// thread with a new key, which the provider routes apart, so neither
    /// shares the cache.
    fn resume_cache(&self) -> Option<ResumeCache> {
        Some(ResumeCache {
            warm_keeps: true,
            fork_keeps: false,
            cold_keeps_prefix: false,
            prefix_tokens: 9_000,
            read_per_mille: 100,
            write_per_mille: 1000,
            lifetime: std::time::Duration::from_secs(5 * 60),
        })
    }

    /// The rollout's last `token_count`: `last_token_usage.input_tokens`.
    fn last_prompt_tokens(&self, transcript: &[u8]) -> Option<u64> {
        crate::request::last_object_after(transcript, "last_token_usage")?
            .get("input_tokens")?
            .as_u64()
    }

    fn keeps_transcripts(&self) -> bool {
        true
    }

    /// Discovered, not computed: `<root>/sessions/YYYY/MM/DD/rollout-<ts>-<id>.jsonl`
    /// where the root is `config_home`, else `$CODEX_HOME`, else
    /// `$HOME/.codex`, and the date is the session's start, which only the
    /// file system knows. `None` when no such file exists (rollouts are keyed
    /// by id, not cwd).
    fn transcript_path(
        &self,
        session_id: &str,
        _cwd: &Path,
        config_home: Option<&Path>,
    ) -> Option<PathBuf> {
        if !is_plain_session_id(session_id) {
            return None;
        }
        let root = CODEX_STATE.root(config_home, &child_var(&self.options.env, None))?;
        let suffix = format!("-{session_id}.jsonl");
        find_rollout(&root.join("sessions"), &suffix, 4)
    }
}

/// Depth-bounded search for `rollout-*<suffix>`, in sorted order so the
/// answer does not depend on directory order.
fn find_rollout(dir: &Path, suffix: &str, depth: u32) -> Option<PathBuf> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .collect();
    entries.sort_by_key(|entry| entry.file_name());
    entries.into_iter().find_map(|entry| {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let kind = entry.file_type().ok()?;
        if kind.is_file() && name.starts_with("rollout-") && name.ends_with(suffix) {
            Some(entry.path())
        } else if kind.is_dir() && depth > 0 {
            find_rollout(&entry.path(), suffix, depth - 1)
        } else {
            None
        }
    })
}

/// Builds the codex command line for `request`.
pub(crate) fn invocation(request: &AttemptRequest, program: PathBuf) -> Invocation {
    let mut args: Vec<String> = vec!["exec".into()];
    let (subcommand, session) = match &request.session {
        SessionMode::New { .. } => (None, None),
        SessionMode::Resume { session_id } => (Some("resume"), Some(session_id)),
        SessionMode::Fork { from, .. } => (Some("fork"), Some(from)),
    };
    args.extend(subcommand.map(String::from));
    args.extend(
        [
            "--json",
            "--skip-git-repo-check",
            "-c",
            "sandbox_mode=workspace-write",
            "--",
        ]
        .map(String::from),
    );
    if request
        .supervision
        .as_ref()
        .is_some_and(|supervision| supervision.sandbox.is_some())
    {
        // Codex's workspace-write sandbox is bubblewrap, which changes
        // mounts, which no process inside a Landlock domain may do (and its
        // legacy Landlock backend refuses workspace-write). reprise's sandbox
        // takes its place.
        for arg in &mut args {
            if arg == "sandbox_mode=workspace-write" {
                *arg = "sandbox_mode=danger-full-access".to_owned();
            }
        }
    }
    args.extend(session.cloned());
    args.push(request.prompt.clone());
    let mut env = request.env.clone();
    if let Some(home) = &request.config_home {
        env.push(("CODEX_HOME".into(), home.to_string_lossy().into_owned()));
    }
    let session_id = match &request.session {
        SessionMode::Resume { session_id } => Some(session_id.clone()),
        SessionMode::New { .. } | SessionMode::Fork { .. } => None,
    };
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

/// Classifies one finished `codex exec --json` run from its event lines.
///
/// `turn.failed` is a failure whatever else was printed; a completed turn is
/// a reply (the last `agent_message`); a top-level `error` counts only when
/// no turn completed (codex also prints one for each retry it then survives).
pub(crate) fn parse(exit_code: i32, stdout: &str, stderr: &str) -> Parsed {
    let mut session_id = None;
    let mut reply = None;
    let mut turn_completed = false;
    let mut turn_failed = None;
    let mut last_error = None;
    for line in stdout.lines() {
        let Ok(event) = serde_json::from_str::<Value>(line.trim()) else {
            continue;
        };
        match event.get("type").and_then(Value::as_str) {
            // The first thread is the session; later ones would be sub-agents.
            Some("thread.started") if session_id.is_none() => {
                session_id = event
                    .get("thread_id")
                    .and_then(Value::as_str)
                    .filter(|id| !id.is_empty())
                    .map(String::from);
            }
            Some("item.completed") => {
                let item = event.get("item");
                if item.and_then(|i| i.get("type")).and_then(Value::as_str) == Some("agent_message")
                {
                    reply = item
                        .and_then(|i| i.get("text"))
                        .and_then(Value::as_str)
                        .map(String::from);
                }
            }
            Some("turn.completed") => turn_completed = true,
            Some("turn.failed") => {
                turn_failed = Some(error_message(event.get("error")));
            }
            Some("error") => last_error = Some(error_message(Some(&event))),
            _ => {}
        }
    }
    // The words a usage limit's reset would be in: codex says it in the
    // failure's message ("You've hit your usage limit ... try again in ...").
    let limit_text = turn_failed
        .clone()
        .or_else(|| last_error.clone())
        .or_else(|| (!stderr.trim().is_empty()).then(|| stderr.to_owned()));
    let outcome = if let Some(message) = turn_failed {
        infra_from_message("codex turn failed", &message)
    } else if turn_completed {
        AttemptOutcome::Replied {
            exit_code,
            reply: reply.unwrap_or_default(),
        }
    } else if let Some(message) = last_error {
        infra_from_message("codex error", &message)
    } else if let (0, Some(reply)) = (exit_code, reply) {
        AttemptOutcome::Replied { exit_code, reply }
    } else {
        let said = stderr_summary(stderr);
        match kind_from_error_text(stderr) {
            Some(InfraKind::SessionUnavailable) => {
                crate::outcome::infra(InfraKind::SessionUnavailable, format!("codex: {said}"))
            }
            _ => crate::outcome::infra(
                InfraKind::ApiError,
                format!("codex exited {exit_code} without finishing a turn: {said}"),
            ),
        }
    };
    Parsed {
        session_id,
        limit_text,
        ..Parsed::of(outcome)
    }
}

fn error_message(error: Option<&Value>) -> String {
    match error {
        Some(Value::String(text)) => text.clone(),
        Some(object) => object
            .get("message")
            .and_then(Value::as_str)
            .map_or_else(|| object.to_string(), String::from),
        None => String::new(),
    }
}

fn infra_from_message(what: &str, message: &str) -> AttemptOutcome {
    crate::outcome::infra(
        kind_from_error_text(message).unwrap_or(InfraKind::ApiError),
        one_line(&format!("{what}: {message}"), 300),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::tests::request;

    const ID: &str = "01a2294e-0d50-7100-ab0d-a8d633fb43ad";

    fn built(session: SessionMode) -> Invocation {
        invocation(
            &request(session, Path::new("/work/sandbox")),
            PathBuf::from("codex"),
        )
    }

    #[test]
    fn a_contained_codex_leaves_the_sandbox_to_reprise() {
        let mut contained = request(
            SessionMode::New { session_id: None },
            Path::new("/work/sandbox"),
        );
        contained.supervision = Some(crate::Supervision {
            supervisor: PathBuf::from("/bin/reprise"),
            sandbox: Some(crate::SandboxRules {
                writable: Vec::new(),
                granted: Vec::new(),
                hidden: Vec::new(),
                writable_shm: false,
                connect_ports: None,
                hidden_by_mounts: false,
            }),
            records: None,
            parent_death: true,
            walls: crate::Walls::default(),
        });
        let args = invocation(&contained, PathBuf::from("codex")).args;
        assert_eq!(
            args,
            [
                "exec",
                "--json",
                "--skip-git-repo-check",
                "-c",
                "sandbox_mode=danger-full-access",
                "--",
                "Create greeting.txt containing hello"
            ]
        );
    }

    #[test]
    fn invocations_match_the_golden_vectors() {
        let prompt = "Create greeting.txt containing hello";
        let common = [
            "--json",
            "--skip-git-repo-check",
            "-c",
            "sandbox_mode=workspace-write",
            "--",
        ];
        let new = built(SessionMode::New {
            session_id: Some("ignored".into()),
        });
        assert_eq!(new.args, [&["exec"][..], &common, &[prompt]].concat());
        assert_eq!(new.session_id, None);
        let resume = built(SessionMode::Resume {
            session_id: ID.into(),
        });
        assert_eq!(
            resume.args,
            [&["exec", "resume"][..], &common, &[ID, prompt]].concat()
        );
        assert_eq!(resume.session_id.as_deref(), Some(ID));
        let fork = built(SessionMode::Fork {
            from: ID.into(),
            new_session_id: Some("ignored".into()),
        });
        assert_eq!(
            fork.args,
            [&["exec", "fork"][..], &common, &[ID, prompt]].concat()
        );
        assert_eq!(fork.session_id, None);
        for invocation in [new, resume, fork] {
            assert_eq!(invocation.stdin, Stdin::Null);
            assert_eq!(invocation.prompt_arg, Some(invocation.args.len() - 1));
        }
    }

    #[test]
    fn the_config_home_becomes_codex_home() {
        let mut request = request(SessionMode::New { session_id: None }, Path::new("/w"));
        request.config_home = Some(PathBuf::from("/homes/codex"));
        let built = invocation(&request, PathBuf::from("codex"));
        assert_eq!(
            built.env,
            [("CODEX_HOME".to_string(), "/homes/codex".to_string())]
        );
    }

    fn fixture(name: &str) -> String {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("testdata/codex")
            .join(name);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    fn outcome_kind(parsed: &Parsed) -> Option<InfraKind> {
        match &parsed.outcome {
            AttemptOutcome::Infra { kind, .. } => Some(*kind),
            AttemptOutcome::Replied { .. } => None,
        }
    }

    #[test]
    fn a_recorded_success_is_a_reply_with_the_thread_id() {
        let parsed = parse(
            0,
            &fixture("success.jsonl"),
            "Reading additional input from stdin...\n",
        );
        assert_eq!(
            parsed.outcome,
            AttemptOutcome::Replied {
                exit_code: 0,
                reply: "DONE: codex reply".into()
            }
        );
        assert_eq!(parsed.session_id.as_deref(), Some(ID));
        assert_eq!(parsed.cost_micro_usd, None);
    }

    #[test]
    fn recorded_turn_failures_are_classified() {
        let cases = [
            ("http_401.jsonl", InfraKind::AuthFailed),
            ("http_429.jsonl", InfraKind::RateLimited),
            ("http_500.jsonl", InfraKind::Overloaded),
        ];
        for (name, kind) in cases {
            let parsed = parse(1, &fixture(name), "");
            assert_eq!(outcome_kind(&parsed), Some(kind), "{name}");
            assert!(parsed.session_id.is_some(), "{name}");
        }
        assert_eq!(
            parse(1, &fixture("http_401.jsonl"), "").outcome,
            AttemptOutcome::Infra {
                kind: InfraKind::AuthFailed,
                detail: "codex turn failed: unexpected status 401 Unauthorized: scripted 401, url: http://127.0.0.1:18401/v1/responses".into()
            }
        );
    }

    #[test]
    fn turn_failed_wins_over_a_message() {
        let stdout = [
            r#"{"type":"thread.started","thread_id":"t1"}"#,
            r#"{"type":"item.completed","item":{"id":"item_0","type":"agent_message","text":"partial"}}"#,
            r#"{"type":"turn.failed","error":{"message":"stream disconnected before completion"}}"#,
        ]
        .join("\n");
        let parsed = parse(1, &stdout, "");
        assert_eq!(outcome_kind(&parsed), Some(InfraKind::Network));
        assert_eq!(parsed.session_id.as_deref(), Some("t1"));
    }

    #[test]
    fn a_top_level_error_without_a_turn_is_infra() {
        let stdout = [
            r#"{"type":"thread.started","thread_id":"t1"}"#,
            r#"{"type":"error","message":"something broke upstream"}"#,
        ]
        .join("\n");
        assert_eq!(
            parse(1, &stdout, "").outcome,
            AttemptOutcome::Infra {
                kind: InfraKind::ApiError,
                detail: "codex error: something broke upstream".into()
            }
        );
    }

    #[test]
    fn an_error_that_a_completed_turn_survived_is_ignored() {
        let stdout = [
            r#"{"type":"thread.started","thread_id":"t1"}"#,
            r#"{"type":"error","message":"Reconnecting... 1/5"}"#,
            r#"{"type":"item.completed","item":{"id":"item_0","type":"agent_message","text":"first"}}"#,
            r#"{"type":"item.completed","item":{"id":"item_1","type":"command_execution","text":"ls"}}"#,
            r#"{"type":"item.completed","item":{"id":"item_2","type":"agent_message","text":"DONE"}}"#,
            r#"{"type":"turn.completed","usage":{"input_tokens":1}}"#,
        ]
        .join("\n");
        assert_eq!(
            parse(0, &stdout, "").outcome,
            AttemptOutcome::Replied {
                exit_code: 0,
                reply: "DONE".into()
            }
        );
    }

    #[test]
    fn a_completed_turn_with_a_nonzero_exit_is_still_a_reply() {
        let stdout = r#"{"type":"turn.completed","usage":{}}"#;
        assert_eq!(
            parse(2, stdout, "").outcome,
            AttemptOutcome::Replied {
                exit_code: 2,
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
                detail: "codex: Error: thread/fork: thread/fork failed: no rollout found for thread id 55555555-5555-4555-8555-555555555555 (code -32600)".into()
            }
        );
    }

    #[test]
    fn garbage_is_an_api_error() {
        for (exit, stdout) in [
            (0, ""),
            (1, "garbage\n{not json"),
            (0, r#"{"type":"turn.started"}"#),
        ] {
            let parsed = parse(exit, stdout, "boom");
            assert_eq!(
                outcome_kind(&parsed),
                Some(InfraKind::ApiError),
                "{stdout:?}"
            );
        }
    }

    #[test]
    fn rollouts_are_discovered_under_the_config_home() {
        let dir = tempfile::tempdir().expect("tempdir");
        let day = dir.path().join("sessions/2026/11/29");
        std::fs::create_dir_all(&day).expect("mkdir");
        let rollout = day.join(format!("rollout-2026-11-29T21-55-10-{ID}.jsonl"));
        std::fs::write(&rollout, "{}\n").expect("write");
        std::fs::write(day.join("rollout-2026-11-29T21-55-10-other.jsonl"), "{}\n").expect("write");
        let adapter = CodexAdapter::new();
        assert_eq!(
            adapter.transcript_path(ID, Path::new("/anywhere"), Some(dir.path())),
            Some(rollout)
        );
        assert_eq!(
            adapter.transcript_path("missing", Path::new("/"), Some(dir.path())),
            None
        );
        assert_eq!(
            adapter.transcript_path("../x", Path::new("/"), Some(dir.path())),
            None
        );
    }

    #[test]
    fn the_strategy_is_fork() {
        let adapter = CodexAdapter::new();
        assert_eq!(adapter.name(), "codex");
        assert_eq!(adapter.strategy(), ResumeStrategy::NativeForkable);
        assert_eq!(
            adapter.strategy().capability(),
            reprise_core::retry::Capability::Fork
        );
    }

    fn settled(stdout: &str) -> Parsed {
        let clock = crate::park::Clock {
            now_unix: 1_796_126_400,
            zone: "UTC".into(),
        };
        crate::park::settle_usage_limit(parse(1, stdout, ""), &clock)
    }

    #[test]
    fn a_usage_limit_with_its_reset_is_to_be_parked_until_then() {
        use crate::outcome::ParkSignal;
        use reprise_core::reset::ResetSource;
        let recorded = fixture("http_429.jsonl");
        for (text, unix, source) in [
            (
                "You've hit your usage limit. Upgrade to Pro (https://openai.com/chatgpt/pricing) or try again in 2 hours 13 minutes.",
                1_796_126_400 + 2 * 3600 + 13 * 60,
                ResetSource::Relative,
            ),
            (
                "You've hit your usage limit. Upgrade to Plus to continue using Codex, or try again at Dec 2nd, 2026 9:00 AM.",
                1_796_126_400 + 21 * 3600,
                ResetSource::WallClock,
            ),
        ] {
            let stdout = recorded.replace(
                "exceeded retry limit, last status: 429 Too Many Requests",
                text,
            );
            assert_ne!(stdout, recorded);
            let parsed = settled(&stdout);
            let AttemptOutcome::Infra { kind, .. } = &parsed.outcome else {
                panic!("{parsed:?}")
            };
            assert_eq!(*kind, InfraKind::UsageLimit, "{text}");
            assert_eq!(
                parsed.park,
                Some(ParkSignal::Until { unix, source }),
                "{text}"
            );
        }
        // The recorded 429 names no reset: a rate limit, as before.
        let parsed = settled(&recorded);
        assert!(
            matches!(
                parsed.outcome,
                AttemptOutcome::Infra {
                    kind: InfraKind::RateLimited,
                    ..
                }
            ),
            "{parsed:?}"
        );
        assert_eq!(parsed.park, None);
    }
}
