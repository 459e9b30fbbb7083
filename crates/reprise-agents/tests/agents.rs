//! The adapters through their public API, end to end: the `command` adapter
//! on real shell commands, and `claude`, `codex` and `gemini` on small fake
//! CLIs (shell scripts given as the binary override) that record their
//! arguments, stdin and environment and print recorded outputs.

use std::fs;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use reprise_agents::{
    Adapter, AttemptOutcome, AttemptReport, AttemptRequest, CancelToken, ClaudeAdapter,
    CodexAdapter, CommandAdapter, GeminiAdapter, InfraKind, SessionMode, SimAdapter, SimStep,
};
use reprise_core::TaskId;
use reprise_core::retry::{Capability, ResumeStrategy};
use reprise_testkit::wait_until;

struct World {
    dir: tempfile::TempDir,
}

impl World {
    fn new() -> Self {
        let world = Self {
            dir: tempfile::tempdir().expect("tempdir"),
        };
        fs::create_dir(world.sandbox()).expect("sandbox");
        fs::create_dir(world.log()).expect("log");
        world
    }

    fn sandbox(&self) -> PathBuf {
        self.dir.path().join("sandbox")
    }

    /// Where fake CLIs write what they saw.
    fn log(&self) -> PathBuf {
        self.dir.path().join("log")
    }

    fn request(&self, session: SessionMode) -> AttemptRequest {
        AttemptRequest {
            task_id: TaskId::parse("add-greeting").expect("task id"),
            attempt: 1,
            prompt: "-Create greeting.txt\ncontaining \"hello\"".into(),
            session,
            cwd: self.sandbox(),
            timeout: Duration::from_secs(30),
            env: vec![("FAKE_LOG".into(), self.log().to_string_lossy().into_owned())],
            bin: None,
            config_home: None,
            budget_micro_usd: None,
            supervision: None,
            watch: Default::default(),
            model: None,
        }
    }

    fn script(&self, name: &str, body: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        reprise_testkit::write_executable(&path, &format!("#!/bin/sh\n{body}"))
            .expect("write script");
        path
    }

    /// A fake agent CLI: answers `--version`, records argv (one per line),
    /// stdin and the named environment variable, prints `output` to stdout
    /// (or stderr) and exits with `exit_code`.
    fn fake_cli(
        &self,
        name: &str,
        config_var: &str,
        output_file: &str,
        to_stderr: bool,
        exit_code: i32,
    ) -> PathBuf {
        let redirect = if to_stderr { " >&2" } else { "" };
        self.script(
            name,
            &format!(
                r#"if [ "$1" = "--version" ]; then echo "{name} 9.9.9"; exit 0; fi
: > "$FAKE_LOG/args"
for arg in "$@"; do printf '%s\n' "$arg" >> "$FAKE_LOG/args"; done
cat > "$FAKE_LOG/stdin"
printf '%s' "{config_var}" > "$FAKE_LOG/config"
cat '{}'{redirect}
exit {exit_code}
"#,
                fixture(output_file).display()
            ),
        )
    }

    fn logged(&self, name: &str) -> String {
        fs::read_to_string(self.log().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    fn logged_args(&self) -> Vec<String> {
        self.logged("args").lines().map(String::from).collect()
    }
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata")
        .join(name)
}

fn replied(report: &AttemptReport) -> (i32, &str) {
    match &report.outcome {
        AttemptOutcome::Replied { exit_code, reply } => (*exit_code, reply),
        other => panic!("expected a reply, got {other:?}"),
    }
}

fn infra(report: &AttemptReport) -> (InfraKind, &str) {
    match &report.outcome {
        AttemptOutcome::Infra { kind, detail } => (*kind, detail),
        other => panic!("expected an infrastructure failure, got {other:?}"),
    }
}

fn is_live(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next());
        !matches!(state, Some('Z' | 'X') | None)
    })
}

fn eventually_dead(pid: u32) -> bool {
    wait_until(Duration::from_secs(10), || !is_live(pid))
}

#[test]
fn every_adapter_declares_its_strategy() {
    let adapters: Vec<(Box<dyn Adapter>, ResumeStrategy, Capability)> = vec![
        (
            Box::new(ClaudeAdapter::new()),
            ResumeStrategy::NativeForkable,
            Capability::Fork,
        ),
        (
            Box::new(CodexAdapter::new()),
            ResumeStrategy::NativeForkable,
            Capability::Fork,
        ),
        (
            Box::new(GeminiAdapter::new()),
            ResumeStrategy::Native,
            Capability::Resume,
        ),
        (
            Box::new(CommandAdapter::new(vec!["true".into()])),
            ResumeStrategy::Unsupported,
            Capability::None,
        ),
        (
            Box::new(SimAdapter::new(Vec::new(), PathBuf::from("/s"))),
            ResumeStrategy::NativeForkable,
            Capability::Fork,
        ),
    ];
    let names: Vec<_> = adapters
        .iter()
        .map(|(adapter, _, _)| adapter.name())
        .collect();
    assert_eq!(names, ["claude", "codex", "gemini", "command", "sim"]);
    for (adapter, strategy, capability) in adapters {
        assert_eq!(adapter.strategy(), strategy, "{}", adapter.name());
        assert_eq!(
            adapter.strategy().capability(),
            capability,
            "{}",
            adapter.name()
        );
    }
}

#[test]
fn command_gets_the_prompt_on_stdin_and_in_the_environment() {
    let world = World::new();
    let command = CommandAdapter::new(vec![
        "sh".into(),
        "-c".into(),
        r#"cat > "$FAKE_LOG/stdin"; printf '%s' "$REPRISE_PROMPT" > "$FAKE_LOG/env"; echo "$REPRISE_TASK_ID attempt $REPRISE_ATTEMPT in $(pwd)"; echo REPRISE_COST_USD=0.25"#.into(),
    ]);
    let request = AttemptRequest {
        attempt: 2,
        ..world.request(SessionMode::New { session_id: None })
    };
    let report = command.run(&request, &CancelToken::new());
    let expected_reply = format!("add-greeting attempt 2 in {}", world.sandbox().display());
    assert_eq!(replied(&report), (0, expected_reply.as_str()));
    assert_eq!(report.cost_micro_usd, Some(250_000));
    assert_eq!(world.logged("stdin"), request.prompt);
    assert_eq!(world.logged("env"), request.prompt);
    assert_eq!(report.adapter, "command");
    assert_eq!(report.session_id, None);
    assert_eq!(report.cli_version, None);
    assert_eq!(report.argv[..2], ["sh", "-c"]);
    assert_eq!(report.cwd, world.sandbox());
}

#[test]
fn command_exit_codes_are_replies_not_infrastructure() {
    let world = World::new();
    let request = world.request(SessionMode::New { session_id: None });
    let run = |script: &str| {
        CommandAdapter::new(vec!["sh".into(), "-c".into(), script.into()])
            .run(&request, &CancelToken::new())
    };
    assert_eq!(replied(&run("echo oops; exit 3")), (3, "oops"));
    assert_eq!(replied(&run("exit 4")), (4, ""));
    assert_eq!(replied(&run("echo fine")), (0, "fine"));
}

#[test]
fn command_relative_paths_resolve_in_the_sandbox() {
    let world = World::new();
    let agent = world.sandbox().join("agent.sh");
    reprise_testkit::write_executable(&agent, "#!/bin/sh\necho from the sandbox\n").expect("write");
    let report = CommandAdapter::new(vec!["./agent.sh".into()]).run(
        &world.request(SessionMode::New { session_id: None }),
        &CancelToken::new(),
    );
    assert_eq!(replied(&report), (0, "from the sandbox"));
}

#[test]
fn a_missing_binary_is_named_before_spawning() {
    let world = World::new();
    let request = world.request(SessionMode::New { session_id: None });
    let report = CommandAdapter::new(vec!["reprise-no-such-agent".into()])
        .run(&request, &CancelToken::new());
    assert_eq!(
        infra(&report),
        (
            InfraKind::MissingBinary,
            "command 'reprise-no-such-agent' is not an executable file or not on PATH; fix the task's command"
        )
    );
    assert_eq!(
        infra(&CommandAdapter::new(Vec::new()).run(&request, &CancelToken::new())).0,
        InfraKind::MissingBinary
    );
    let claude = ClaudeAdapter::new().run(
        &AttemptRequest {
            bin: Some(PathBuf::from("/nonexistent/claude")),
            ..request.clone()
        },
        &CancelToken::new(),
    );
    let (kind, detail) = infra(&claude);
    assert_eq!(kind, InfraKind::MissingBinary);
    assert!(detail.contains("/nonexistent/claude"), "{detail}");
    assert!(!detail.contains('\n'));
    assert!(claude.cli_version.is_none());
    if std::env::var_os("REPRISE_CODEX_BIN").is_none() {
        let codex = CodexAdapter::new().run(
            &AttemptRequest {
                env: vec![("PATH".into(), "/nonexistent".into())],
                ..request
            },
            &CancelToken::new(),
        );
        assert_eq!(
            infra(&codex),
            (
                InfraKind::MissingBinary,
                "codex binary 'codex' is not on PATH; install it or set REPRISE_CODEX_BIN to its path"
            )
        );
    }
}

#[test]
fn a_command_past_its_timeout_is_killed_with_its_group() {
    let world = World::new();
    let command = CommandAdapter::new(vec![
        "sh".into(),
        "-c".into(),
        r#"sleep 60 & echo $! > "$FAKE_LOG/grandchild"; echo $$ > "$FAKE_LOG/child"; sleep 60"#
            .into(),
    ]);
    let request = AttemptRequest {
        timeout: Duration::from_millis(300),
        ..world.request(SessionMode::New { session_id: None })
    };
    let started = Instant::now();
    let report = command.run(&request, &CancelToken::new());
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_eq!(
        infra(&report),
        (
            InfraKind::Timeout,
            "command 'sh' did not finish within 300ms; its process group was killed"
        )
    );
    let child: u32 = world.logged("child").trim().parse().expect("child pid");
    let grandchild: u32 = world
        .logged("grandchild")
        .trim()
        .parse()
        .expect("grandchild pid");
    assert!(
        !Path::new(&format!("/proc/{child}")).exists(),
        "child {child} not reaped"
    );
    assert!(
        eventually_dead(grandchild),
        "grandchild {grandchild} survived"
    );
}

#[test]
fn cancel_stops_a_command() {
    let world = World::new();
    let command = CommandAdapter::new(vec![
        "sh".into(),
        "-c".into(),
        r#"echo $$ > "$FAKE_LOG/child"; exec sleep 60"#.into(),
    ]);
    let cancel = CancelToken::new();
    // Cancelled once the command runs (it has written its pid).
    let canceller = {
        let cancel = cancel.clone();
        let child = world.log().join("child");
        thread::spawn(move || {
            let started = wait_until(Duration::from_secs(60), || {
                fs::read_to_string(&child).is_ok_and(|pid| !pid.trim().is_empty())
            });
            cancel.cancel();
            assert!(started, "the command never started");
        })
    };
    let request = AttemptRequest {
        timeout: Duration::from_secs(120),
        ..world.request(SessionMode::New { session_id: None })
    };
    let started = Instant::now();
    let report = command.run(&request, &cancel);
    canceller.join().expect("canceller");
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_eq!(infra(&report).0, InfraKind::Cancelled);
    // A cancelled run starts nothing more.
    assert_eq!(
        infra(&command.run(&request, &cancel)).0,
        InfraKind::Cancelled
    );
}

#[test]
fn command_spend_beyond_the_budget_stops_the_attempt() {
    let world = World::new();
    let command = CommandAdapter::new(vec![
        "sh".into(),
        "-c".into(),
        "echo done; echo REPRISE_COST_USD=1.5".into(),
    ]);
    let request = AttemptRequest {
        budget_micro_usd: Some(1_000_000),
        ..world.request(SessionMode::New { session_id: None })
    };
    let report = command.run(&request, &CancelToken::new());
    assert_eq!(infra(&report).0, InfraKind::BudgetExhausted);
    assert_eq!(report.cost_micro_usd, Some(1_500_000));
}

#[test]
fn a_missing_sandbox_is_a_spawn_failure_naming_it() {
    let world = World::new();
    let request = AttemptRequest {
        cwd: world.dir.path().join("gone"),
        ..world.request(SessionMode::New { session_id: None })
    };
    let report = CommandAdapter::new(vec!["/bin/true".into()]).run(&request, &CancelToken::new());
    let (kind, detail) = infra(&report);
    assert_eq!(kind, InfraKind::SpawnFailed);
    assert!(detail.contains("gone"), "{detail}");
}

#[test]
fn claude_new_session_runs_the_documented_command() {
    let world = World::new();
    let bin = world.fake_cli(
        "claude",
        "$CLAUDE_CONFIG_DIR",
        "claude/success.json",
        false,
        0,
    );
    let home = world.dir.path().join("claude-home");
    let request = AttemptRequest {
        bin: Some(bin.clone()),
        config_home: Some(home.clone()),
        ..world.request(SessionMode::New { session_id: None })
    };
    let report = ClaudeAdapter::new().run(&request, &CancelToken::new());
    assert_eq!(replied(&report), (0, "DONE: created greeting.txt"));
    assert_eq!(report.cost_micro_usd, Some(7_595));
    assert_eq!(report.cli_version.as_deref(), Some("claude 9.9.9"));
    assert_eq!(report.config_home, Some(home.clone()));
    // The CLI's own answer names the session.
    assert_eq!(
        report.session_id.as_deref(),
        Some("33333333-3333-4333-8333-333333333333")
    );
    let args = world.logged_args();
    assert_eq!(
        args[..6],
        [
            "-p",
            "--output-format",
            "json",
            "--permission-mode",
            "acceptEdits",
            "--session-id"
        ]
    );
    assert_eq!(uuid_version(&args[6]), 4);
    assert_eq!(args[7], "--");
    // The prompt spans two lines, so the recorded argv ends with both.
    assert_eq!(args[8..], ["-Create greeting.txt", "containing \"hello\""]);
    assert_eq!(world.logged("stdin"), "");
    assert_eq!(world.logged("config"), home.to_string_lossy());
    let mut expected_argv: Vec<String> = vec![bin.to_string_lossy().into_owned()];
    expected_argv.extend(args[..8].iter().cloned());
    expected_argv.push("<prompt>".into());
    assert_eq!(report.argv, expected_argv);
}

fn uuid_version(text: &str) -> usize {
    let parts: Vec<&str> = text.split('-').collect();
    assert_eq!(
        parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
        [8, 4, 4, 4, 12],
        "{text}"
    );
    usize::from_str_radix(&parts[2][..1], 16).expect("hex")
}

#[test]
fn claude_fork_and_resume_pass_the_session_flags() {
    let world = World::new();
    let bin = world.fake_cli(
        "claude",
        "$CLAUDE_CONFIG_DIR",
        "claude/success.json",
        false,
        0,
    );
    let adapter = ClaudeAdapter::new();
    let run = |session| {
        adapter.run(
            &AttemptRequest {
                bin: Some(bin.clone()),
                ..world.request(session)
            },
            &CancelToken::new(),
        )
    };
    run(SessionMode::Fork {
        from: "11111111-1111-4111-8111-111111111111".into(),
        new_session_id: Some("22222222-2222-4222-8222-222222222222".into()),
    });
    assert_eq!(
        world.logged_args()[5..10],
        [
            "--resume",
            "11111111-1111-4111-8111-111111111111",
            "--fork-session",
            "--session-id",
            "22222222-2222-4222-8222-222222222222"
        ]
    );
    run(SessionMode::Resume {
        session_id: "11111111-1111-4111-8111-111111111111".into(),
    });
    assert_eq!(
        world.logged_args()[5..8],
        ["--resume", "11111111-1111-4111-8111-111111111111", "--"]
    );
}

#[test]
fn claude_errors_and_timeouts_are_infrastructure() {
    let world = World::new();
    let adapter = ClaudeAdapter::new();
    let bin = world.fake_cli(
        "claude",
        "$CLAUDE_CONFIG_DIR",
        "claude/http_429.json",
        false,
        1,
    );
    let report = adapter.run(
        &AttemptRequest {
            bin: Some(bin),
            ..world.request(SessionMode::New { session_id: None })
        },
        &CancelToken::new(),
    );
    assert_eq!(infra(&report).0, InfraKind::RateLimited);

    let bin = world.fake_cli(
        "claude-gone",
        "$CLAUDE_CONFIG_DIR",
        "claude/unknown_session.stderr",
        true,
        1,
    );
    let report = adapter.run(
        &AttemptRequest {
            bin: Some(bin),
            ..world.request(SessionMode::Resume {
                session_id: "22222222-2222-4222-8222-222222222222".into(),
            })
        },
        &CancelToken::new(),
    );
    assert_eq!(infra(&report).0, InfraKind::SessionUnavailable);
    assert_eq!(
        report.session_id.as_deref(),
        Some("22222222-2222-4222-8222-222222222222")
    );

    let slow = world.script(
        "claude-slow",
        "if [ \"$1\" = --version ]; then echo slow; exit 0; fi\nexec sleep 60\n",
    );
    let started = Instant::now();
    let report = adapter.run(
        &AttemptRequest {
            bin: Some(slow),
            timeout: Duration::from_millis(200),
            ..world.request(SessionMode::New {
                session_id: Some("44444444-4444-4444-8444-444444444444".into()),
            })
        },
        &CancelToken::new(),
    );
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_eq!(
        infra(&report),
        (
            InfraKind::Timeout,
            "claude did not finish within 200ms; its process group was killed"
        )
    );
    // The id chosen in advance is still the attempt's session.
    assert_eq!(
        report.session_id.as_deref(),
        Some("44444444-4444-4444-8444-444444444444")
    );
}

#[test]
fn claude_budget_is_passed_and_enforced() {
    let world = World::new();
    let bin = world.fake_cli(
        "claude",
        "$CLAUDE_CONFIG_DIR",
        "claude/success.json",
        false,
        0,
    );
    let report = ClaudeAdapter::new().run(
        &AttemptRequest {
            bin: Some(bin),
            budget_micro_usd: Some(5_000),
            ..world.request(SessionMode::New { session_id: None })
        },
        &CancelToken::new(),
    );
    let args = world.logged_args();
    let at = args
        .iter()
        .position(|a| a == "--max-budget-usd")
        .expect("budget flag");
    assert_eq!(args[at + 1], "0.005");
    assert_eq!(infra(&report).0, InfraKind::BudgetExhausted);
    assert_eq!(report.cost_micro_usd, Some(7_595));
}

#[test]
fn codex_reports_the_thread_it_ran_in() {
    let world = World::new();
    let bin = world.fake_cli("codex", "$CODEX_HOME", "codex/success.jsonl", false, 0);
    let home = world.dir.path().join("codex-home");
    let report = CodexAdapter::new().run(
        &AttemptRequest {
            bin: Some(bin),
            config_home: Some(home.clone()),
            ..world.request(SessionMode::Resume {
                session_id: "01a2294e-0d50-7100-ab0d-a8d633fb43ad".into(),
            })
        },
        &CancelToken::new(),
    );
    assert_eq!(replied(&report), (0, "DONE: codex reply"));
    assert_eq!(
        report.session_id.as_deref(),
        Some("01a2294e-0d50-7100-ab0d-a8d633fb43ad")
    );
    assert_eq!(report.cost_micro_usd, None);
    assert_eq!(report.cli_version.as_deref(), Some("codex 9.9.9"));
    assert_eq!(
        world.logged_args(),
        [
            "exec",
            "resume",
            "--json",
            "--skip-git-repo-check",
            "-c",
            "sandbox_mode=workspace-write",
            "--",
            "01a2294e-0d50-7100-ab0d-a8d633fb43ad",
            "-Create greeting.txt",
            "containing \"hello\""
        ]
    );
    assert_eq!(world.logged("stdin"), "");
    assert_eq!(world.logged("config"), home.to_string_lossy());
}

#[test]
fn codex_turn_failures_are_infrastructure() {
    let world = World::new();
    let bin = world.fake_cli("codex", "$CODEX_HOME", "codex/http_401.jsonl", false, 1);
    let report = CodexAdapter::new().run(
        &AttemptRequest {
            bin: Some(bin),
            ..world.request(SessionMode::New { session_id: None })
        },
        &CancelToken::new(),
    );
    assert_eq!(infra(&report).0, InfraKind::AuthFailed);
    assert_eq!(
        report.session_id.as_deref(),
        Some("01a2294e-2a43-7cb1-baad-d97f0f9c8779")
    );
}

#[test]
fn gemini_runs_headless_with_a_chosen_session() {
    let world = World::new();
    let output = world.dir.path().join("gemini-out.json");
    fs::write(
        &output,
        "{\n  \"session_id\": \"55555555-5555-4555-8555-555555555555\",\n  \"response\": \"DONE\",\n  \"stats\": {}\n}\n",
    )
    .expect("write");
    let bin = world.script(
        "gemini",
        &format!(
            r#"if [ "$1" = "--version" ]; then echo "0.61.0"; exit 0; fi
: > "$FAKE_LOG/args"
for arg in "$@"; do printf '%s\n' "$arg" >> "$FAKE_LOG/args"; done
printf '%s' "$GEMINI_CLI_HOME" > "$FAKE_LOG/config"
cat '{}'
"#,
            output.display()
        ),
    );
    let home = world.dir.path().join("gemini-home");
    let report = GeminiAdapter::new().run(
        &AttemptRequest {
            bin: Some(bin),
            config_home: Some(home.clone()),
            ..world.request(SessionMode::New {
                session_id: Some("55555555-5555-4555-8555-555555555555".into()),
            })
        },
        &CancelToken::new(),
    );
    assert_eq!(replied(&report), (0, "DONE"));
    assert_eq!(
        report.session_id.as_deref(),
        Some("55555555-5555-4555-8555-555555555555")
    );
    assert_eq!(report.cli_version.as_deref(), Some("0.61.0"));
    assert_eq!(
        world.logged_args(),
        [
            "--prompt=-Create greeting.txt",
            "containing \"hello\"",
            "-o",
            "json",
            "--skip-trust",
            "--approval-mode",
            "auto_edit",
            "--session-id",
            "55555555-5555-4555-8555-555555555555"
        ]
    );
    assert_eq!(world.logged("config"), home.to_string_lossy());
    assert_eq!(report.argv[1], "--prompt=<prompt>");
}

#[test]
fn sim_exercises_warm_fork_and_cold_through_the_trait() {
    let world = World::new();
    let store = world.dir.path().join(".reprise/sim");
    let sim: Box<dyn Adapter> = Box::new(SimAdapter::new(
        vec![
            SimStep {
                reply: "wrote it".into(),
                write: vec![("greeting.txt".into(), "helo\n".into())],
                exit_code: 0,
                cost_micro_usd: 10,
                delay: Duration::ZERO,
            },
            SimStep {
                reply: "DONE".into(),
                write: vec![("greeting.txt".into(), "hello\n".into())],
                ..SimStep::default()
            },
        ],
        store.clone(),
    ));
    let cancel = CancelToken::new();
    let first = sim.run(
        &world.request(SessionMode::New { session_id: None }),
        &cancel,
    );
    let session = first.session_id.expect("session");
    let transcript = sim
        .transcript_path(&session, &world.sandbox(), None)
        .expect("path");
    let before = fs::read(&transcript).expect("transcript");

    let fork = sim.run(
        &AttemptRequest {
            attempt: 2,
            prompt: "the check failed".into(),
            ..world.request(SessionMode::Fork {
                from: session.clone(),
                new_session_id: None,
            })
        },
        &cancel,
    );
    assert_eq!(replied(&fork), (0, "DONE"));
    assert_eq!(fs::read(&transcript).expect("transcript"), before);
    let fork_turns =
        reprise_agents::sim_transcript(&store, fork.session_id.as_deref().expect("fork id"))
            .expect("fork");
    assert_eq!(fork_turns.len(), 2);
    assert_eq!(fork_turns[1].prompt, "the check failed");

    let warm = sim.run(
        &AttemptRequest {
            attempt: 2,
            prompt: "the check failed".into(),
            ..world.request(SessionMode::Resume {
                session_id: session.clone(),
            })
        },
        &cancel,
    );
    assert_eq!(warm.session_id.as_deref(), Some(session.as_str()));
    assert_eq!(
        reprise_agents::sim_transcript(&store, &session)
            .expect("warm")
            .len(),
        2
    );
    assert_eq!(
        fs::read_to_string(world.sandbox().join("greeting.txt")).expect("file"),
        "hello\n"
    );

    fs::remove_file(&transcript).expect("delete session");
    let gone = sim.run(
        &AttemptRequest {
            attempt: 3,
            ..world.request(SessionMode::Resume {
                session_id: session,
            })
        },
        &cancel,
    );
    assert_eq!(infra(&gone).0, InfraKind::SessionUnavailable);
    assert!(InfraKind::SessionUnavailable.is_transient());
}
