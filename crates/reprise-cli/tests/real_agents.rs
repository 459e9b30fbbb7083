//! The real Claude Code, Codex and Gemini CLIs, driven by `reprise rehearse` against
//! the scripted model server on loopback: real sessions, real tool loops,
//! real transcripts, no network.
//!
//! The CLIs are the pinned npm packages `scripts/install-agent-clis` puts in
//! `.tools/` (`./scripts/test` runs it first); `REPRISE_AGENT_CLIS_BIN` names
//! another directory holding `claude`, `codex` and `gemini`. A missing CLI fails the
//! test: it is never skipped.
//!
//! Things that must happen between two attempts (a transcript deleted, the
//! workspace edited) are done by a gate that acts once and fails, as the
//! engine runs gates between an attempt and the next.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use reprise_core::outcome::InfraKind;
use reprise_testkit::wait_until;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_reprise");

/// The agent CLIs under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cli {
    Claude,
    Codex,
    Gemini,
}

impl Cli {
    fn name(self) -> &'static str {
        match self {
            Cli::Claude => "claude",
            Cli::Codex => "codex",
            Cli::Gemini => "gemini",
        }
    }

    fn binary(self) -> PathBuf {
        let dir = std::env::var_os("REPRISE_AGENT_CLIS_BIN").map_or_else(
            || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.tools/node_modules/.bin"),
            PathBuf::from,
        );
        let path = dir.join(self.name());
        assert!(
            path.is_file(),
            "{} is not installed at {}: run ./scripts/test or scripts/install-agent-clis, which install the pinned CLIs",
            self.name(),
            path.display()
        );
        path
    }

    /// A scenario reply that makes the CLI write `content` to `file` (in its
    /// cwd) with its own tool: Claude's `Write` for a new file (Claude lets a
    /// session overwrite only a file it has read, so an existing one is
    /// rewritten through `Bash`, which the plan allows), Codex's `exec_command`.
    fn write_reply(self, file: &str, content: &str, new_file: bool) -> String {
        // printf interprets the \n that Debug formatting leaves in the string.
        let command = format!("printf {content:?} > {file}");
        match self {
            Cli::Claude if new_file => format!(
                "{{ text: \"Writing {file}.\", tool: Write, input: {{ file_path: {file}, content: {content:?} }} }}"
            ),
            Cli::Claude => format!(
                "{{ tool: Bash, input: {{ command: {command:?}, description: \"rewrite {file}\" }} }}"
            ),
            Cli::Codex => {
                format!("{{ tool: exec_command, input: {{ cmd: {command:?} }} }}")
            }
            // Gemini's write_file creates or overwrites.
            Cli::Gemini => format!(
                "{{ text: \"Writing {file}.\", tool: write_file, input: {{ file_path: {file}, content: {content:?} }} }}"
            ),
        }
    }

    /// Where the CLI keeps its transcripts under a rehearsal task's home.
    fn transcripts_glob(self) -> &'static str {
        match self {
            Cli::Claude => ".claude/projects/*/*.jsonl",
            Cli::Codex => ".codex/sessions/*/*/*/rollout-*.jsonl",
            Cli::Gemini => ".gemini/tmp/*/chats/*.jsonl",
        }
    }
}

/// A scratch git project to rehearse in, and a directory for gates to leave
/// marks and copies in.
struct Project {
    temp: tempfile::TempDir,
}

/// One `reprise rehearse --json` run.
struct Rehearsal {
    output: Output,
    json: Value,
}

impl Project {
    fn new() -> Self {
        let temp = tempfile::tempdir().unwrap();
        for dir in ["project", "aside", "home"] {
            fs::create_dir(temp.path().join(dir)).unwrap();
        }
        let project = Self { temp };
        project.git(&["init", "-q"]);
        fs::write(project.root().join("README.md"), "scratch project\n").unwrap();
        project.git(&["add", "-A"]);
        project.git(&[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-qm",
            "init",
        ]);
        project
    }

    fn root(&self) -> PathBuf {
        self.temp.path().join("project")
    }

    fn aside(&self) -> PathBuf {
        self.temp.path().join("aside")
    }

    fn git(&self, args: &[&str]) {
        let status = Command::new("git")
            .args(args)
            .current_dir(self.root())
            .status()
            .unwrap();
        assert!(status.success(), "git {args:?}");
    }

    /// Writes the plan and scenario (`@ASIDE@` and `@STATE@` replaced by
    /// absolute paths) and runs `reprise rehearse` on them.
    fn rehearse(&self, cli: Cli, plan: &str, scenario: &str) -> Rehearsal {
        self.write_rehearsal(plan, scenario);
        let output = self
            .rehearse_command(cli, &["../plan.yaml"])
            .output()
            .unwrap();
        Rehearsal::of(output)
    }

    /// `reprise rehearse --continue RUN` of the scenario already written.
    fn rehearse_continue(&self, cli: Cli, run: &str) -> Rehearsal {
        let output = self
            .rehearse_command(cli, &["--continue", run])
            .output()
            .unwrap();
        Rehearsal::of(output)
    }

    /// `reprise rehearse` started in the background, for a test that acts
    /// on the live run (a park, a kill) while it goes on.
    fn rehearse_spawn(&self, cli: Cli, plan: &str, scenario: &str) -> std::process::Child {
        self.write_rehearsal(plan, scenario);
        self.rehearse_command(cli, &["../plan.yaml"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// The plan and scenario beside the project, their placeholders filled.
    fn write_rehearsal(&self, plan: &str, scenario: &str) {
        let fill = |text: &str| {
            text.replace("@ASIDE@", &self.aside().to_string_lossy())
                .replace("@STATE@", &self.root().join(".reprise").to_string_lossy())
        };
        fs::create_dir_all(self.aside()).unwrap();
        fs::write(self.temp.path().join("plan.yaml"), fill(plan)).unwrap();
        fs::write(self.temp.path().join("scenario.yaml"), fill(scenario)).unwrap();
    }

    /// `reprise rehearse WHAT --scenario ../scenario.yaml`, as its user
    /// would run it, with only the CLI's binary named.
    fn rehearse_command(&self, cli: Cli, what: &[&str]) -> Command {
        let mut command = Command::new(BIN);
        command
            .arg("rehearse")
            .args(what)
            .args([
                "--scenario",
                "../scenario.yaml",
                "--keep-requests",
                "--json",
            ])
            .current_dir(self.root())
            .env_clear()
            .env("HOME", self.temp.path().join("home"))
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env(
                format!("REPRISE_{}_BIN", cli.name().to_uppercase()),
                cli.binary(),
            );
        command
    }

    /// `reprise ARGS` in the project, as its user would run it.
    fn reprise(&self, args: &[&str]) -> Output {
        Command::new(BIN)
            .args(args)
            .current_dir(self.root())
            .env_clear()
            .env("HOME", self.temp.path().join("home"))
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .output()
            .unwrap()
    }

    /// `reprise ARGS --json` in the project, as its user would run it.
    fn reprise_json(&self, args: &[&str]) -> Value {
        let mut args = args.to_vec();
        args.push("--json");
        let output = self.reprise(&args);
        serde_json::from_slice(&output.stdout).unwrap_or_else(|err| {
            panic!(
                "{args:?} printed no json ({err}): {}",
                String::from_utf8_lossy(&output.stderr)
            )
        })
    }

    /// Every transcript file of `task`'s rehearsal home.
    fn transcripts(&self, cli: Cli, task: &str) -> Vec<PathBuf> {
        let pattern = format!(
            "{}/.reprise/runs/*/rehearsal/homes/{task}/{}",
            self.root().display(),
            cli.transcripts_glob()
        );
        let listed = Command::new("sh")
            .args(["-c", &format!("ls -1 {pattern} 2>/dev/null || true")])
            .output()
            .unwrap();
        String::from_utf8_lossy(&listed.stdout)
            .lines()
            .map(PathBuf::from)
            .collect()
    }

    /// A gate command that, the first time it runs, does `first` and fails;
    /// every later time runs `then`.
    fn once(&self, name: &str, first: &str, then: &str) -> String {
        let mark = self.aside().join(format!("{name}.done"));
        let mark = mark.display();
        format!("if [ -e '{mark}' ]; then {then}; else touch '{mark}' && {first}; false; fi")
    }
}

impl Rehearsal {
    fn of(output: Output) -> Self {
        let json = serde_json::from_slice(&output.stdout).unwrap_or_else(|err| {
            panic!(
                "rehearse printed no json ({err}); exit {:?}\nstdout: {}\nstderr: {}",
                output.status.code(),
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            )
        });
        Self { output, json }
    }

    fn ok(&self) -> bool {
        self.json["run"]["ok"] == Value::Bool(true)
    }

    fn describe(&self) -> String {
        format!(
            "exit {:?}\n{}\nstderr: {}",
            self.output.status.code(),
            serde_json::to_string_pretty(&self.json).unwrap(),
            String::from_utf8_lossy(&self.output.stderr)
        )
    }

    fn assert_ok(&self) {
        assert!(self.ok(), "the run failed:\n{}", self.describe());
        assert_eq!(self.output.status.code(), Some(0), "{}", self.describe());
    }

    fn task(&self, id: &str) -> &Value {
        self.json["run"]["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|task| task["task_id"] == id)
            .unwrap_or_else(|| panic!("no task {id}: {}", self.describe()))
    }

    fn attempts(&self, task: &str) -> Vec<Value> {
        self.task(task)["attempts"].as_array().unwrap().clone()
    }

    fn modes(&self, task: &str) -> Vec<String> {
        self.attempts(task)
            .iter()
            .map(|attempt| attempt["mode"].as_str().unwrap().to_owned())
            .collect()
    }

    fn sessions(&self, task: &str) -> Vec<String> {
        self.attempts(task)
            .iter()
            .map(|attempt| attempt["session_id"].as_str().unwrap_or("").to_owned())
            .collect()
    }

    /// The server's log lines for `task`'s API requests.
    fn requests(&self, task: &str) -> Vec<Value> {
        let log = self.json["rehearsal"]["log"].as_str().unwrap();
        fs::read_to_string(log)
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str::<Value>(line).unwrap())
            // Gemini's side calls (its model router) are not the conversation.
            .filter(|line| line["task"] == task && !line["api"].is_null() && line["side"] != true)
            .collect()
    }

    /// The body of a logged request.
    fn body(&self, line: &Value) -> Value {
        let dir = self.json["rehearsal"]["requests"].as_str().unwrap();
        let number = line["request"].as_u64().unwrap();
        let bytes = fs::read(Path::new(dir).join(format!("{number:06}.json"))).unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    /// The request that opened `turn` (the attempt's prompt) for `task`.
    fn turn_opener(&self, task: &str, turn: u64) -> Value {
        self.requests(task)
            .into_iter()
            .find(|line| line["turn"] == turn && line["tool_result"] == false)
            .unwrap_or_else(|| panic!("no turn {turn} for {task}: {}", self.describe()))
    }

    /// The task's state directory metadata (`reprise task show`).
    fn metadata(&self, project: &Project, task: &str) -> Value {
        let output = Command::new(BIN)
            .args(["task", "show", task, "--json"])
            .current_dir(project.root())
            .env("HOME", project.temp.path().join("home"))
            .output()
            .unwrap();
        let shown: Value = serde_json::from_slice(&output.stdout).unwrap();
        shown["metadata"].clone()
    }
}

/// The texts of the new user turn a request carries: the text blocks of its
/// last user message that are neither system reminders nor tool results.
fn new_user_texts(cli: Cli, body: &Value) -> Vec<String> {
    match cli {
        Cli::Claude => {
            let last_user = body["messages"]
                .as_array()
                .unwrap()
                .iter()
                .rev()
                .find(|message| message["role"] == "user")
                .unwrap();
            match &last_user["content"] {
                Value::String(text) => vec![text.clone()],
                Value::Array(blocks) => blocks
                    .iter()
                    .filter(|block| block["type"] == "text")
                    .filter_map(|block| block["text"].as_str())
                    .filter(|text| !text.trim_start().starts_with("<system-reminder>"))
                    .map(str::to_owned)
                    .collect(),
                _ => Vec::new(),
            }
        }
        Cli::Codex => {
            let last_user = body["input"]
                .as_array()
                .unwrap()
                .iter()
                .rev()
                .find(|item| item["role"] == "user")
                .unwrap();
            last_user["content"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|part| part["type"] == "input_text")
                .filter_map(|part| part["text"].as_str())
                .map(str::to_owned)
                .collect()
        }
        Cli::Gemini => {
            let last_user = body["contents"]
                .as_array()
                .unwrap()
                .iter()
                .rev()
                .find(|content| content["role"] == "user")
                .unwrap();
            last_user["parts"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|part| part["text"].as_str())
                .filter(|text| !text.trim_start().starts_with("<session_context>"))
                .map(str::to_owned)
                .collect()
        }
    }
}

/// The conversation items a request carries (Messages `messages`, Responses `input`).
fn items(cli: Cli, body: &Value) -> Vec<Value> {
    let key = match cli {
        Cli::Claude => "messages",
        Cli::Codex => "input",
        Cli::Gemini => "contents",
    };
    body[key].as_array().unwrap().clone()
}

/// Claude Code runs `Bash` headless only when the plan allows it.
const AGENTS: &str = "agents: { claude: { allowed_tools: [Bash] } }\n";

const PROMPT: &str =
    "Create greeting.txt at the repository root holding the word hello. Reply DONE when finished.";

/// A one-task plan for `cli` with `policy` and the given gates (YAML flow
/// mappings, one per line).
fn plan(cli: Cli, task: &str, policy: &str, max_retries: u32, gates: &[String]) -> String {
    // Containment stays strict (the default). Gates that copy a transcript
    // aside write the aside directory, so the plan grants it, as a user
    // grants a test runner its cache. A gate that plays the outside world
    // inside the state directory (a lost transcript in the rehearsal's
    // homes or reprise's preserved sessions) cannot be granted that: no
    // allowed path may reach the state directory (the plan is refused), so
    // such a task runs uncontained. Its agent is then uncontained too; the
    // other tests drive each CLI contained.
    let allowed = ["@ASIDE@"];
    let containment = if gates.iter().any(|gate| gate.contains("@STATE@")) {
        ", containment: off"
    } else {
        ""
    };
    let gates: String = gates
        .iter()
        .map(|gate| format!("      - {gate}\n"))
        .collect();
    format!(
        "version: 1\nname: real-{cli}\n{AGENTS}\
         defaults: {{ agent: {cli}, max_retries: {max_retries}, timeout: 60s{containment} }}\n\
         tasks:\n  - id: {task}\n    prompt: {PROMPT:?}\n    retry_policy: {policy}\n    allowed_paths: [{allowed}]\n    gates:\n{gates}",
        cli = cli.name(),
        allowed = allowed.join(", ")
    )
}

/// Two attempts: the first writes `hi`, the second `hello`, each through
/// the CLI's own tool, then says DONE.
fn two_attempt_scenario(cli: Cli, task: &str) -> String {
    format!(
        "rules:\n\
         \x20 - match: {{ task: {task}, turn: 1, tool_result: false }}\n    reply: {first}\n\
         \x20 - match: {{ task: {task}, turn: 2, tool_result: false }}\n    reply: {second}\n\
         \x20 - match: {{ task: {task}, turn: 1, tool_result: true }}\n    reply: {{ text: \"DONE: wrote greeting.txt\" }}\n\
         \x20 - match: {{ task: {task}, turn: 2, tool_result: true }}\n    reply: {{ text: \"DONE: fixed greeting.txt\" }}\n",
        first = cli.write_reply("greeting.txt", "hi\n", true),
        second = cli.write_reply("greeting.txt", "hello\n", false),
    )
}

fn content_gate() -> String {
    "{ name: content, run: \"grep -qx hello greeting.txt\", disclose: output, timeout: 30s }"
        .to_owned()
}

/// A file of `task`'s result in the run `ran` reported (its worktree is
/// reclaimed once the result is on its branch): empty when there is none.
fn worktree_file(project: &Project, ran: &Rehearsal, task: &str, file: &str) -> String {
    let run_id = ran.json["run"]["run_id"].as_str().unwrap();
    let shown = Command::new("git")
        .args(["show", &format!("reprise/{run_id}/{task}:{file}")])
        .current_dir(project.root())
        .output()
        .unwrap();
    String::from_utf8_lossy(&shown.stdout).into_owned()
}

fn warm_retry_resumes_the_same_session_with_only_the_instruction(cli: Cli) {
    let project = Project::new();
    let ran = project.rehearse(
        cli,
        &plan(cli, "greet", "warm", 1, &[content_gate()]),
        &two_attempt_scenario(cli, "greet"),
    );
    ran.assert_ok();
    assert_eq!(ran.modes("greet"), ["new", "warm"], "{}", ran.describe());
    let sessions = ran.sessions("greet");
    assert!(!sessions[0].is_empty());
    assert_eq!(
        sessions[0], sessions[1],
        "the warm retry resumed the same session"
    );
    // The file was written by the CLI's own tool call, answered by a
    // tool-result follow-up in each attempt.
    assert_eq!(
        worktree_file(&project, &ran, "greet", "greeting.txt"),
        "hello\n"
    );
    let requests = ran.requests("greet");
    assert_eq!(
        requests
            .iter()
            .filter(|line| line["tool_result"] == true)
            .count(),
        2,
        "one tool round trip per attempt"
    );
    // The retry's request carries the first attempt's turns, and only the
    // corrective instruction as the new user turn.
    let first = ran.body(&ran.turn_opener("greet", 1));
    let retry = ran.body(&ran.turn_opener("greet", 2));
    let instruction = ran.metadata(&project, "greet")["retry_corrective_instruction"]
        .as_str()
        .expect("the instruction is in the task's metadata")
        .to_owned();
    assert_eq!(
        new_user_texts(cli, &retry),
        std::slice::from_ref(&instruction)
    );
    assert!(items(cli, &retry).len() > items(cli, &first).len() + 1);
    let history = serde_json::to_string(&items(cli, &retry)).unwrap();
    assert!(
        history.contains(PROMPT),
        "the first prompt is in the history"
    );
    assert!(
        history.contains("DONE: wrote greeting.txt"),
        "so is the first reply"
    );
    assert!(
        !new_user_texts(cli, &retry)[0].contains(PROMPT),
        "the prompt is not re-sent"
    );
    assert_eq!(instruction.matches("content").count(), 1);
    // `reprise logs` has both attempts' output and names the session's
    // transcript where the CLI keeps it (Claude Code and Codex keep one).
    let logs = project.reprise_json(&["logs", "greet"]);
    let attempts: Vec<u64> = logs["logs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|log| log["name"] == "agent.stdout")
        .map(|log| log["attempt"].as_u64().unwrap())
        .collect();
    assert_eq!(attempts, [1, 2], "{logs}");
    if cli != Cli::Gemini {
        let transcripts = logs["transcripts"].as_array().unwrap();
        assert_eq!(transcripts.len(), 1, "one session: {logs}");
        assert_eq!(transcripts[0]["session_id"], sessions[0].as_str());
        let native = transcripts[0]["native"]
            .as_str()
            .expect("the native path is noted");
        assert!(Path::new(native).is_file(), "{native}");
    }
}

#[test]
fn claude_warm_retry_resumes_the_same_session_with_only_the_instruction() {
    warm_retry_resumes_the_same_session_with_only_the_instruction(Cli::Claude);
}

#[test]
fn codex_warm_retry_resumes_the_same_session_with_only_the_instruction() {
    warm_retry_resumes_the_same_session_with_only_the_instruction(Cli::Codex);
}

#[test]
fn gemini_warm_retry_resumes_the_same_session_with_only_the_instruction() {
    warm_retry_resumes_the_same_session_with_only_the_instruction(Cli::Gemini);
}

fn fork_leaves_the_original_transcript_byte_identical(cli: Cli) {
    let project = Project::new();
    // Between the attempts a gate copies every transcript aside.
    let aside = project.aside().join("before");
    let copy = format!(
        "mkdir -p '{}' && cp @STATE@/runs/*/rehearsal/homes/greet/{} '{}'/",
        aside.display(),
        cli.transcripts_glob(),
        aside.display()
    );
    let gate = format!(
        "{{ name: snapshot, run: {:?}, timeout: 30s }}",
        project.once("snapshot", &copy, "true")
    );
    let ran = project.rehearse(
        cli,
        &plan(cli, "greet", "fork", 1, &[gate, content_gate()]),
        &two_attempt_scenario(cli, "greet"),
    );
    ran.assert_ok();
    assert_eq!(ran.modes("greet"), ["new", "fork"], "{}", ran.describe());
    let sessions = ran.sessions("greet");
    assert_ne!(sessions[0], sessions[1], "a fork is a new session");
    let saved: Vec<PathBuf> = fs::read_dir(&aside)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    assert_eq!(saved.len(), 1, "one transcript after the first attempt");
    let original = project
        .transcripts(cli, "greet")
        .into_iter()
        .find(|path| path.file_name() == saved[0].file_name())
        .expect("the original transcript is still there");
    assert_eq!(
        fs::read(&original).unwrap(),
        fs::read(&saved[0]).unwrap(),
        "the fork left the original transcript byte-identical"
    );
    assert!(
        original.to_string_lossy().contains(&sessions[0]),
        "{} is the first session's",
        original.display()
    );
    assert_eq!(
        project.transcripts(cli, "greet").len(),
        2,
        "the fork has its own"
    );
    // The fork's request carries the first attempt's history.
    let retry = ran.body(&ran.turn_opener("greet", 2));
    assert!(
        serde_json::to_string(&items(cli, &retry))
            .unwrap()
            .contains(PROMPT)
    );
    assert_eq!(
        worktree_file(&project, &ran, "greet", "greeting.txt"),
        "hello\n"
    );
}

#[test]
fn claude_fork_leaves_the_original_transcript_byte_identical() {
    fork_leaves_the_original_transcript_byte_identical(Cli::Claude);
}

#[test]
fn codex_fork_leaves_the_original_transcript_byte_identical() {
    fork_leaves_the_original_transcript_byte_identical(Cli::Codex);
}

/// A resumed (or forked) Claude Code session sends the system prompt and
/// tools of the session's last request byte for byte, and its history as
/// that request had it: the provider's cache then holds all of it, and the
/// retry writes only what is new. Two things used to change them on every
/// resume: the model (created as `claude-opus-4-8[1m]`, resumed as
/// `claude-opus-4-8`) and the git status snapshot, which shows the first
/// attempt's own edit.
fn claude_resume_keeps_the_prompt_cache(policy: &str) {
    let cli = Cli::Claude;
    let project = Project::new();
    let ran = project.rehearse(
        cli,
        &plan(cli, "greet", policy, 1, &[content_gate()]),
        &two_attempt_scenario(cli, "greet"),
    );
    ran.assert_ok();
    assert_eq!(ran.modes("greet"), ["new", policy], "{}", ran.describe());
    let requests = ran.requests("greet");
    let last_of_first = requests
        .iter()
        .rfind(|line| line["turn"] == 1)
        .expect("the first attempt's last request");
    let opener = ran.turn_opener("greet", 2);
    let (before, after) = (ran.body(last_of_first), ran.body(&opener));
    assert_eq!(after["system"], before["system"], "the same system prompt");
    assert_eq!(after["tools"], before["tools"], "the same tools");
    assert_eq!(after["model"], before["model"]);
    let plain = |message: &Value| {
        let mut message = message.clone();
        if let Some(blocks) = message["content"].as_array_mut() {
            for block in blocks {
                if let Some(block) = block.as_object_mut() {
                    block.remove("cache_control");
                }
            }
        }
        message
    };
    let earlier = before["messages"].as_array().unwrap();
    let history = after["messages"].as_array().unwrap();
    assert!(history.len() > earlier.len());
    for (n, (was, is)) in earlier.iter().zip(history).enumerate() {
        assert_eq!(plain(is), plain(was), "message {n} of the history");
    }
    // A fixed policy's decision still carries every mode's predicted cost,
    // shown with the retry (`task show`, the run's lines and summary).
    let metadata = ran.metadata(&project, "greet");
    let predicted = metadata["retry_predicted"].as_str().unwrap_or_default();
    assert!(
        predicted.contains(&format!("{policy} ")) && predicted.contains("cold "),
        "{metadata}"
    );
    assert!(metadata.get("retry_auto").is_none(), "{metadata}");
    let status = project.reprise(&["status"]);
    let status = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.contains(&format!("retried {policy}; predicted {predicted}")),
        "{status}"
    );
    // So the server's cache reads everything the first attempt sent: the
    // retry writes only the reply and the instruction.
    let usage = &opener["usage"];
    let read = usage["cache_read"].as_u64().unwrap();
    let written = usage["cache_write"].as_u64().unwrap() + usage["fresh_input"].as_u64().unwrap();
    assert!(
        read >= last_of_first["tokens"].as_u64().unwrap() && written < read / 10,
        "the retry read {read} tokens from the cache and wrote {written}: {usage}"
    );
}

#[test]
fn claude_warm_retry_keeps_the_prompt_cache() {
    claude_resume_keeps_the_prompt_cache("warm");
}

#[test]
fn claude_fork_keeps_the_prompt_cache() {
    claude_resume_keeps_the_prompt_cache("fork");
}

/// Under `retry_policy: auto` the retry runs in the mode predicted to cost
/// least, from the size of the session's last prompt (read from its
/// transcript) and how the CLI's resumes meet the prompt cache: Claude Code
/// and Codex resume with the cache (warm is far cheaper); Gemini CLI's resume
/// loses it, so a resume costs what a new session does, and the tie keeps
/// the session (`scripts/bench-retry-cost` measured warm at 0.98 of cold).
fn auto_picks_the_cheapest_mode(cli: Cli, cheapest: &str) {
    let project = Project::new();
    let ran = project.rehearse(
        cli,
        &plan(cli, "greet", "auto", 1, &[content_gate()]),
        &two_attempt_scenario(cli, "greet"),
    );
    ran.assert_ok();
    assert_eq!(ran.modes("greet"), ["new", cheapest], "{}", ran.describe());
    let auto = ran.metadata(&project, "greet")["retry_auto"].clone();
    assert_eq!(auto["mode"], cheapest, "{auto}");
    assert_eq!(auto["reason"], "cheapest", "{auto}");
    assert_eq!(auto["cache_alive"], true, "{auto}");
    let predicted = auto["predicted"].as_object().expect("every mode priced");
    let chosen = predicted[cheapest].as_u64().unwrap();
    for (mode, cost) in predicted {
        if let Some(cost) = cost.as_u64() {
            assert!(
                chosen <= cost,
                "{cheapest} {chosen} against {mode} {cost}: {auto}"
            );
        }
    }
    // The session's size came from its transcript: more than the CLI's own
    // prefix, which every mode pays at least a tenth of.
    assert!(predicted["cold"].as_u64().unwrap() > 1_000, "{auto}");
}

#[test]
fn claude_auto_picks_the_cheapest_mode() {
    auto_picks_the_cheapest_mode(Cli::Claude, "warm");
}

#[test]
fn codex_auto_picks_the_cheapest_mode() {
    auto_picks_the_cheapest_mode(Cli::Codex, "warm");
}

#[test]
fn gemini_auto_picks_the_cheapest_mode() {
    auto_picks_the_cheapest_mode(Cli::Gemini, "warm");
}

/// `run --check` says when a task's fixed retry policy is predicted to cost
/// more than another mode its CLI could retry in, and stays quiet for the
/// cheapest and for `auto`; it is a warning, not a refusal.
#[test]
fn run_check_warns_of_a_retry_policy_predicted_to_cost_more() {
    let project = Project::new();
    let plan = "version: 1\nname: costs\ntasks:\n\
        \x20 - { id: gemini-warm, agent: gemini, prompt: p, retry_policy: warm }\n\
        \x20 - { id: claude-warm, agent: claude, prompt: p, retry_policy: warm }\n\
        \x20 - { id: claude-cold, agent: claude, prompt: p, retry_policy: cold }\n\
        \x20 - { id: codex-fork, agent: codex, prompt: p, retry_policy: fork }\n\
        \x20 - { id: codex-auto, agent: codex, prompt: p, retry_policy: auto }\n";
    fs::write(project.root().join("plan.yaml"), plan).unwrap();
    let output = Command::new(BIN)
        .args(["run", "--check", "plan.yaml", "--json"])
        .current_dir(project.root())
        .env("HOME", project.temp.path().join("home"))
        .env("REPRISE_CLAUDE_BIN", Cli::Claude.binary())
        .env("REPRISE_CODEX_BIN", Cli::Codex.binary())
        .env("REPRISE_GEMINI_BIN", Cli::Gemini.binary())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let checked: Value = serde_json::from_slice(&output.stdout).unwrap();
    let warnings: Vec<&str> = checked["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|warning| warning.as_str().unwrap())
        .collect();
    let warned: Vec<&str> = warnings
        .iter()
        .map(|warning| &warning[1..warning.find(']').unwrap()])
        .collect();
    assert_eq!(warned, ["claude-cold", "codex-fork"], "{warnings:?}");
    // Gemini CLI's resume loses the cache: its warm retry costs what a cold
    // one does, so `retry_policy: warm` there is not warned of.
    assert!(warnings[0].contains("a warm retry"), "{}", warnings[0]);
    assert!(warnings[1].contains("a warm retry"), "{}", warnings[1]);
    assert!(
        warnings[1].contains("retry_policy: auto"),
        "{}",
        warnings[1]
    );
}

fn cold_retry_quotes_the_judged_reply_and_not_the_predicate(cli: Cli) {
    let project = Project::new();
    let scenario = "rules:\n\
        \x20 - match: { task: quote, turn: 1 }\n    reply: { text: \"I stopped early: MARKER-PINEAPPLE-42\" }\n\
        \x20 - match: { task: quote, turn: 2 }\n    reply: { text: \"DONE: all finished\" }\n";
    let gate = "{ name: shape-check-qz, result_matches: \"^DONE: all\" }".to_owned();
    let ran = project.rehearse(cli, &plan(cli, "quote", "cold", 1, &[gate]), scenario);
    ran.assert_ok();
    assert_eq!(ran.modes("quote"), ["new", "cold"]);
    let sessions = ran.sessions("quote");
    assert_ne!(sessions[0], sessions[1], "a cold retry is a fresh session");
    let first = ran.body(&ran.turn_opener("quote", 1));
    let retry = ran.body(&ran.turn_opener("quote", 2));
    // A fresh session: no more conversation than the first attempt had.
    assert_eq!(items(cli, &retry).len(), items(cli, &first).len());
    let texts = new_user_texts(cli, &retry);
    let prompt = texts.last().unwrap();
    assert!(
        prompt.starts_with(PROMPT),
        "the base prompt comes first: {prompt}"
    );
    assert_eq!(
        prompt.matches("MARKER-PINEAPPLE-42").count(),
        1,
        "quoted once: {prompt}"
    );
    let raw = serde_json::to_string(&retry).unwrap();
    assert!(!raw.contains("^DONE: all"), "the predicate is never shown");
    assert!(!raw.contains("shape-check-qz"), "nor the gate's name");
    assert!(
        !serde_json::to_string(&first)
            .unwrap()
            .contains("MARKER-PINEAPPLE-42")
    );
}

#[test]
fn claude_cold_retry_quotes_the_judged_reply_and_not_the_predicate() {
    cold_retry_quotes_the_judged_reply_and_not_the_predicate(Cli::Claude);
}

#[test]
fn codex_cold_retry_quotes_the_judged_reply_and_not_the_predicate() {
    cold_retry_quotes_the_judged_reply_and_not_the_predicate(Cli::Codex);
}

#[test]
fn gemini_cold_retry_quotes_the_judged_reply_and_not_the_predicate() {
    cold_retry_quotes_the_judged_reply_and_not_the_predicate(Cli::Gemini);
}

/// A gate that deletes the task's transcripts from the CLI's store once (and
/// with `preserved`, reprise's preserved copies too), then checks the file.
fn losing_gate(project: &Project, cli: Cli, preserved: bool) -> String {
    let mut remove = format!(
        "rm -f @STATE@/runs/*/rehearsal/homes/greet/{}",
        cli.transcripts_glob()
    );
    if preserved {
        remove.push_str(&format!(" && rm -f @STATE@/sessions/{}/*", cli.name()));
    }
    format!(
        "{{ name: lose, run: {:?}, timeout: 30s }}",
        project.once("lose", &remove, "grep -qx hello greeting.txt")
    )
}

fn a_deleted_session_is_restored_and_resumed_warm(cli: Cli) {
    let project = Project::new();
    let ran = project.rehearse(
        cli,
        &plan(
            cli,
            "greet",
            "warm",
            1,
            &[losing_gate(&project, cli, false)],
        ),
        &two_attempt_scenario(cli, "greet"),
    );
    ran.assert_ok();
    assert_eq!(ran.modes("greet"), ["new", "warm"], "{}", ran.describe());
    let sessions = ran.sessions("greet");
    assert_eq!(sessions[0], sessions[1]);
    // The CLI resumed the restored transcript: its history is in the request.
    let retry = ran.body(&ran.turn_opener("greet", 2));
    let history = serde_json::to_string(&items(cli, &retry)).unwrap();
    assert!(history.contains("DONE: wrote greeting.txt"), "{history}");
    assert_eq!(
        ran.metadata(&project, "greet")["retry_mode"],
        "warm",
        "no downgrade"
    );
}

#[test]
fn claude_deleted_session_is_restored_and_resumed_warm() {
    a_deleted_session_is_restored_and_resumed_warm(Cli::Claude);
}

#[test]
fn codex_deleted_session_is_restored_and_resumed_warm() {
    a_deleted_session_is_restored_and_resumed_warm(Cli::Codex);
}

fn a_session_gone_everywhere_falls_back_to_cold(cli: Cli) {
    let project = Project::new();
    let ran = project.rehearse(
        cli,
        &plan(cli, "greet", "warm", 1, &[losing_gate(&project, cli, true)]),
        &two_attempt_scenario(cli, "greet"),
    );
    ran.assert_ok();
    assert_eq!(ran.modes("greet"), ["new", "cold"], "{}", ran.describe());
    let sessions = ran.sessions("greet");
    assert_ne!(sessions[0], sessions[1]);
    let metadata = ran.metadata(&project, "greet");
    assert_eq!(metadata["retry_mode"], "cold", "{metadata}");
    assert_eq!(metadata["retry_requested_mode"], "warm");
    assert_eq!(metadata["retry_downgrade_reason"], "session_unavailable");
    let retry = ran.body(&ran.turn_opener("greet", 2));
    assert!(
        new_user_texts(cli, &retry)
            .last()
            .unwrap()
            .starts_with(PROMPT)
    );
}

#[test]
fn claude_session_gone_everywhere_falls_back_to_cold() {
    a_session_gone_everywhere_falls_back_to_cold(Cli::Claude);
}

#[test]
fn codex_session_gone_everywhere_falls_back_to_cold() {
    a_session_gone_everywhere_falls_back_to_cold(Cli::Codex);
}

fn a_workspace_changed_between_attempts_goes_cold(cli: Cli) {
    let project = Project::new();
    let gate = format!(
        "{{ name: edit, run: {:?}, timeout: 30s }}",
        project.once(
            "edit",
            "echo 'edited by someone else' >> README.md",
            "grep -qx hello greeting.txt"
        )
    );
    let ran = project.rehearse(
        cli,
        &plan(cli, "greet", "warm", 1, &[gate]),
        &two_attempt_scenario(cli, "greet"),
    );
    ran.assert_ok();
    assert_eq!(ran.modes("greet"), ["new", "cold"], "{}", ran.describe());
    let metadata = ran.metadata(&project, "greet");
    assert_eq!(
        metadata["retry_downgrade_reason"],
        "workspace_hash_mismatch"
    );
    let sessions = ran.sessions("greet");
    assert_ne!(sessions[0], sessions[1]);
}

#[test]
fn claude_workspace_changed_between_attempts_goes_cold() {
    a_workspace_changed_between_attempts_goes_cold(Cli::Claude);
}

#[test]
fn codex_workspace_changed_between_attempts_goes_cold() {
    a_workspace_changed_between_attempts_goes_cold(Cli::Codex);
}

/// Processes whose environment mentions `needle` (the rehearsal's homes).
fn processes_mentioning(needle: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(environ) = fs::read(entry.path().join("environ"))
            && String::from_utf8_lossy(&environ).contains(needle)
        {
            found.push(pid);
        }
    }
    found
}

fn a_hanging_server_is_a_timeout_and_the_child_is_reaped(cli: Cli) {
    let project = Project::new();
    let scenario = "rules:\n  - match: { task: stall }\n    reply: { hang: true }\n";
    // Long enough for a CLI on a loaded machine to send its first request
    // (4 s was not, once): the request must be the thing that hangs.
    let plan = format!(
        "version: 1\nname: hang\ndefaults: {{ agent: {}, max_retries: 0, timeout: 10s }}\n\
         tasks:\n  - id: stall\n    prompt: {PROMPT:?}\n    gates:\n      - {}\n",
        cli.name(),
        content_gate()
    );
    let ran = project.rehearse(cli, &plan, scenario);
    assert!(!ran.ok());
    assert_eq!(ran.output.status.code(), Some(1));
    let attempts = ran.attempts("stall");
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0]["outcome"], "infra", "{}", ran.describe());
    assert_eq!(attempts[0]["infra_kind"], "timeout");
    assert_eq!(attempts[0]["judged"], false);
    assert_eq!(ran.requests("stall").len(), 1, "the one request hung");
    let homes = project.root().join(".reprise/runs");
    assert_eq!(
        processes_mentioning(&homes.to_string_lossy()),
        Vec::<u32>::new(),
        "no agent process outlives its attempt"
    );
}

/// Claude Code signed in to a plan (an OAuth token, the API key emptied)
/// turns an HTTP 429 that carries the plan's unified reset into its own
/// words, `You've hit your session limit · resets <time> (<zone>)` (2.1.197;
/// with an API key it says only `Request rejected (429)`): the adapter reads
/// the reset from them and ends the attempt as `usage_limit`.
#[test]
fn claude_usage_limit_reset_is_read_from_the_real_cli_s_words() {
    let project = Project::new();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    // On a whole minute, as the CLI shows it, about two hours ahead.
    let reset = (now / 60 + 125) * 60;
    let scenario = format!(
        "rules:\n  - match: {{ task: limited }}\n    reply:\n      error:\n        status: 429\n        \
         message: \"This request would exceed your account's rate limit. Please try again later.\"\n        \
         headers:\n          retry-after: \"{wait}\"\n          anthropic-ratelimit-unified-status: rejected\n          \
         anthropic-ratelimit-unified-reset: \"{reset}\"\n          \
         anthropic-ratelimit-unified-representative-claim: five_hour\n",
        wait = reset - now
    );
    let plan = format!(
        "version: 1\nname: limit\n\
         agents: {{ claude: {{ env: {{ ANTHROPIC_API_KEY: \"\", CLAUDE_CODE_OAUTH_TOKEN: sk-ant-oat01-rehearsal }} }} }}\n\
         defaults: {{ agent: claude, max_retries: 0, timeout: 60s }}\n\
         tasks:\n  - id: limited\n    prompt: {PROMPT:?}\n    gates:\n      - {}\n",
        content_gate()
    );
    // The limit parks the task until its reset, two hours away, and the
    // live run waits for it; stopped (SIGTERM), the task stays parked.
    let child = project.rehearse_spawn(Cli::Claude, &plan, &scenario);
    let journal = project
        .root()
        .join(".reprise/plans/limit/tasks/limited/journal.jsonl");
    assert!(
        wait_until(std::time::Duration::from_secs(120), || {
            fs::read_to_string(&journal).is_ok_and(|text| text.contains("\"task.suspend\""))
        }),
        "no park"
    );
    let suspend: Value = fs::read_to_string(&journal)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .find(|row| row["kind"] == "task.suspend")
        .unwrap();
    assert_eq!(suspend["body"]["cause"], "usage_limit", "{suspend}");
    let woken_at =
        humantime::parse_rfc3339(suspend["body"]["wake"]["at"].as_str().unwrap()).unwrap();
    assert_eq!(
        woken_at
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs(),
        reset,
        "the park wakes at the reset the CLI printed"
    );
    let terminated = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(terminated.success());
    let output = child.wait_with_output().unwrap();
    let json: Value = serde_json::from_slice(&output.stdout).unwrap_or_default();
    let ran = Rehearsal { output, json };
    assert_eq!(ran.output.status.code(), Some(143), "{}", ran.describe());
    assert_eq!(
        ran.task("limited")["state"],
        "suspended",
        "{}",
        ran.describe()
    );
    let attempts = ran.attempts("limited");
    assert_eq!(attempts.len(), 1, "{}", ran.describe());
    assert_eq!(attempts[0]["outcome"], "infra", "{}", ran.describe());
    assert_eq!(
        attempts[0]["infra_kind"],
        "usage_limit",
        "{}",
        ran.describe()
    );
    assert_eq!(ran.requests("limited").len(), 1);
    let stamp = jiff::Timestamp::from_second(i64::try_from(reset).unwrap())
        .unwrap()
        .to_string();
    // The CLI's words, as the agent printed them, and the reset read from
    // them in the attempt's detail (kept as its reply log).
    let logs = project.reprise_json(&["logs", "limited"]);
    let text = |name: &str| -> String {
        logs["logs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|log| log["name"] == name)
            .and_then(|log| log["text"].as_str())
            .unwrap_or_else(|| panic!("no {name} log: {logs}"))
            .to_owned()
    };
    let stdout = text("agent.stdout");
    assert!(
        stdout.contains("You've hit your session limit · resets "),
        "{stdout}"
    );
    let detail = text("reply");
    assert!(
        detail.starts_with(&format!("usage limit, resets at {stamp}: ")),
        "{detail}"
    );
}

#[test]
fn claude_hanging_server_is_a_timeout_and_the_child_is_reaped() {
    a_hanging_server_is_a_timeout_and_the_child_is_reaped(Cli::Claude);
}

#[test]
fn codex_hanging_server_is_a_timeout_and_the_child_is_reaped() {
    a_hanging_server_is_a_timeout_and_the_child_is_reaped(Cli::Codex);
}

fn api_errors_are_classified_never_judged_and_quote_nothing(cli: Cli) {
    let project = Project::new();
    // e500 fails once, then its retry succeeds; e529 and e401 fail for good.
    let scenario = format!(
        "rules:\n\
         \x20 - match: {{ task: e500, turn: 1 }}\n    reply: {{ error: {{ status: 500, message: \"internal trouble\" }} }}\n\
         \x20 - match: {{ task: e500, turn: 2, tool_result: false }}\n    reply: {}\n\
         \x20 - match: {{ task: e500, turn: 2, tool_result: true }}\n    reply: {{ text: DONE }}\n\
         \x20 - match: {{ task: e529 }}\n    reply: {{ error: {{ status: 529, message: \"Overloaded\" }} }}\n\
         \x20 - match: {{ task: e401 }}\n    reply: {{ error: {{ status: 401, message: \"invalid x-api-key\" }} }}\n",
        cli.write_reply("greeting.txt", "hello\n", true)
    );
    let task = |id: &str, retries: u32| {
        format!(
            "  - {{ id: {id}, prompt: {PROMPT:?}, max_retries: {retries}, retry_policy: warm, gates: [{}] }}\n",
            content_gate()
        )
    };
    let plan = format!(
        "version: 1\nname: errors\nseats: 3\n{AGENTS}defaults: {{ agent: {}, timeout: 60s }}\ntasks:\n{}{}{}",
        cli.name(),
        task("e500", 1),
        task("e529", 0),
        task("e401", 0)
    );
    let ran = project.rehearse(cli, &plan, &scenario);
    assert_eq!(ran.output.status.code(), Some(1), "{}", ran.describe());
    let kind = |task: &str| {
        let attempt = &ran.attempts(task)[0];
        assert_eq!(attempt["outcome"], "infra", "{task}: {}", ran.describe());
        assert_eq!(attempt["judged"], false, "{task}");
        let name = attempt["infra_kind"].as_str().unwrap().to_owned();
        InfraKind::ALL
            .into_iter()
            .find(|kind| kind.as_str() == name)
            .unwrap_or_else(|| panic!("unknown kind {name}"))
    };
    let e500 = kind("e500");
    assert!(e500.is_transient(), "500 is {e500:?}");
    let e529 = kind("e529");
    assert!(e529.is_transient(), "529 is {e529:?}");
    assert_eq!(kind("e401"), InfraKind::AuthFailed);
    assert!(!InfraKind::AuthFailed.is_transient());
    // The retry after an infrastructure failure resumes the session (the
    // prompt is in it) and quotes nothing: not the error, not a fence.
    assert_eq!(ran.task("e500")["state"], "passed", "{}", ran.describe());
    assert_eq!(ran.modes("e500"), ["new", "warm"]);
    let sessions = ran.sessions("e500");
    assert_eq!(sessions[0], sessions[1]);
    let instruction = ran.metadata(&project, "e500")["retry_corrective_instruction"]
        .as_str()
        .unwrap()
        .to_owned();
    let retry = ran.body(&ran.turn_opener("e500", 2));
    assert_eq!(
        new_user_texts(cli, &retry),
        std::slice::from_ref(&instruction)
    );
    assert!(!instruction.contains("internal trouble"), "{instruction}");
    assert!(
        !instruction.contains("BEGIN") && !instruction.contains("```"),
        "{instruction}"
    );
    let history = serde_json::to_string(&items(cli, &retry)).unwrap();
    assert!(
        history.contains(PROMPT),
        "the resumed session holds the prompt"
    );
    let failed = project
        .root()
        .join(".reprise/runs")
        .join(ran.json["run"]["run_id"].as_str().unwrap())
        .join("failed");
    assert!(
        !failed.exists() || fs::read_dir(&failed).unwrap().next().is_none(),
        "no reply is kept for an infrastructure failure"
    );
}

#[test]
fn claude_api_errors_are_classified_never_judged_and_quote_nothing() {
    api_errors_are_classified_never_judged_and_quote_nothing(Cli::Claude);
}

#[test]
fn codex_api_errors_are_classified_never_judged_and_quote_nothing() {
    api_errors_are_classified_never_judged_and_quote_nothing(Cli::Codex);
}

/// The example the README points at stays true with the real Claude Code.
#[test]
fn the_rehearsal_example_passes_with_a_warm_retry() {
    let project = Project::new();
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/rehearsal");
    let plan = fs::read_to_string(examples.join("plan.yaml")).unwrap();
    let scenario = fs::read_to_string(examples.join("scenario.yaml")).unwrap();
    let ran = project.rehearse(Cli::Claude, &plan, &scenario);
    ran.assert_ok();
    assert_eq!(
        ran.modes("add-greeting"),
        ["new", "warm"],
        "{}",
        ran.describe()
    );
    let report = &ran.json["rehearsal"]["tasks"][0];
    assert_eq!(
        report["requests"], 4,
        "a prompt and a tool result per attempt"
    );
    let reported = report["reported_cost_micro_usd"].as_u64().unwrap();
    assert!(reported > 0, "Claude prices it");
    // reprise's would-cost, from the server's usage and the shipped list,
    // agrees with Claude Code's own total_cost_usd within 5%.
    let would = report["would_cost_micro_usd"].as_u64().unwrap();
    let gap = would.abs_diff(reported);
    assert!(
        gap * 20 <= reported,
        "would cost {would} µ$, Claude Code says {reported} µ$: {}",
        ran.describe()
    );
    // Per attempt too, and the cache was used: Claude Code marks
    // breakpoints and its second request of an attempt reads the first.
    for attempt in report["attempts"].as_array().unwrap() {
        let would = attempt["would_cost_micro_usd"].as_u64().unwrap();
        let reported = attempt["reported_cost_micro_usd"].as_u64().unwrap();
        assert!(would.abs_diff(reported) * 20 <= reported, "{attempt}");
        assert!(
            attempt["usage"]["cache_read_tokens"].as_u64().unwrap() > 0,
            "{attempt}"
        );
    }
}

/// A three-step rule (Read, Edit, reply) fixes a file the repository
/// already has: Claude Code edits only a file its session has read.
#[test]
fn claude_fixes_an_existing_file_with_read_edit_reply_steps() {
    let project = Project::new();
    fs::write(project.root().join("greet.sh"), "echo hi\n").unwrap();
    project.git(&["add", "-A"]);
    project.git(&[
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@t",
        "commit",
        "-qm",
        "greet",
    ]);
    let plan = "version: 1\nname: steps\ndefaults: { agent: claude, max_retries: 0, timeout: 60s }\n\
         tasks:\n  - id: fix\n    prompt: \"greet.sh must print hello\"\n    gates:\n\
         \x20     - { name: says-hello, run: \"grep -qx 'echo hello' greet.sh\", timeout: 30s }\n";
    let scenario = "rules:\n\
        \x20 - match: { task: fix }\n\
        \x20   reply:\n\
        \x20     steps:\n\
        \x20       - { tool: Read, input: { file_path: greet.sh } }\n\
        \x20       - { tool: Edit, input: { file_path: greet.sh, old_string: \"echo hi\", new_string: \"echo hello\" } }\n\
        \x20       - { text: \"DONE: greet.sh prints hello\" }\n";
    let ran = project.rehearse(Cli::Claude, plan, scenario);
    ran.assert_ok();
    assert_eq!(
        worktree_file(&project, &ran, "fix", "greet.sh"),
        "echo hello\n"
    );
    let steps: Vec<Value> = ran
        .requests("fix")
        .iter()
        .map(|line| line["step"].clone())
        .collect();
    assert_eq!(
        steps,
        [
            serde_json::json!(0),
            serde_json::json!(1),
            serde_json::json!(2)
        ],
        "{}",
        ran.describe()
    );
    // Each tool ran: its result came back in the next request.
    let results = ran
        .requests("fix")
        .iter()
        .filter(|line| line["tool_result"] == true)
        .count();
    assert_eq!(results, 2);
}

/// A scenario that answers every Codex request with a tool call never lets
/// the attempt end; the server's request cap does, as `rehearsal_loop`.
#[test]
fn codex_endless_tool_loop_ends_at_the_request_cap_as_a_rehearsal_loop() {
    let project = Project::new();
    let plan = format!(
        "version: 1\nname: spin\ndefaults: {{ agent: codex, max_retries: 0, timeout: 120s }}\n\
         tasks:\n  - id: spin\n    prompt: {PROMPT:?}\n    gates:\n      - {}\n",
        content_gate()
    );
    let scenario = "rules:\n  - reply: { tool: exec_command, input: { cmd: \"true\" } }\n";
    let ran = project.rehearse(Cli::Codex, &plan, scenario);
    assert!(!ran.ok());
    let requests = ran.requests("spin");
    assert_eq!(
        requests.len(),
        51,
        "50 answered, the 51st refused: {}",
        ran.describe()
    );
    assert_eq!(requests.last().unwrap()["loop"], true);
    let report = &ran.json["rehearsal"]["tasks"][0];
    assert_eq!(report["rehearsal_loops"], 1);
    assert_eq!(
        report["attempts"][0]["outcome"],
        "rehearsal_loop",
        "{}",
        ran.describe()
    );
}

/// A Claude Code task parked while a request hangs (after its first tool
/// call, so its transcript holds a turn), and woken by the live run at its
/// time: Claude Code is stopped (its process gone), then resumed in the same
/// session, and the model server sees the first prompt and tool call in the
/// history and the resume's words as the new turn.
#[test]
fn claude_parked_mid_request_wakes_warm_in_its_own_session() {
    let cli = Cli::Claude;
    let project = Project::new();
    let scenario = hang_then_write(cli);
    let child = project.rehearse_spawn(
        cli,
        &plan(cli, "nap", "warm", 0, &[content_gate()]),
        &scenario,
    );
    let runs = project.root().join(".reprise/runs");
    wait_for_a_hung_request_and_its_transcript(&runs, "nap");
    let parked = project.reprise_json(&["task", "suspend", "nap", "--until", "3s"]);
    assert_eq!(parked["ok"], true, "{parked}");
    assert_eq!(parked["released"][0]["detail"]["stopped"], true, "{parked}");
    assert_eq!(
        processes_mentioning(&runs.to_string_lossy()),
        Vec::<u32>::new(),
        "Claude Code outlived its park"
    );
    let output = child.wait_with_output().unwrap();
    let json: Value = serde_json::from_slice(&output.stdout).unwrap();
    let ran = Rehearsal { output, json };
    ran.assert_ok();
    assert_eq!(ran.modes("nap"), ["new", "warm"], "{}", ran.describe());
    let sessions = ran.sessions("nap");
    assert!(
        !sessions[0].is_empty(),
        "the session id was chosen before Claude Code started"
    );
    assert_eq!(sessions[0], sessions[1], "{}", ran.describe());
    let resumed = ran.body(&ran.turn_opener("nap", 2));
    let said = new_user_texts(cli, &resumed);
    assert!(
        said.iter()
            .any(|text| text.contains("paused and is now resumed")),
        "{said:?}"
    );
    let history = serde_json::to_string(&items(cli, &resumed)).unwrap();
    assert!(
        history.contains(PROMPT),
        "the first prompt is in the resumed session's history"
    );
    assert_eq!(
        worktree_file(&project, &ran, "nap", "greeting.txt"),
        "hello\n"
    );
}

/// Task `nap`'s first request hangs; the next turn (a resume or a retry)
/// writes greeting.txt and says DONE.
fn hang_then_write(cli: Cli) -> String {
    format!(
        "rules:\n\
         \x20 - match: {{ task: nap, turn: 1 }}\n    reply: {{ hang: true }}\n\
         \x20 - match: {{ task: nap, turn: 2, tool_result: false }}\n    reply: {write}\n\
         \x20 - match: {{ task: nap, turn: 2, tool_result: true }}\n    reply: {{ text: \"DONE: wrote greeting.txt\" }}\n",
        write = cli.write_reply("greeting.txt", "hello\n", true),
    )
}

/// `kill -9` of the rehearsal `child`: the agent and everything it started
/// go with it (nothing mentioning `runs` is left). The killed run's id.
fn kill_the_rehearsal(mut child: std::process::Child, runs: &Path) -> String {
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        wait_until(std::time::Duration::from_secs(20), || {
            processes_mentioning(&runs.to_string_lossy()).is_empty()
        }),
        "the agent outlived its killed run: {:?}",
        processes_mentioning(&runs.to_string_lossy())
    );
    fs::read_dir(runs)
        .unwrap()
        .flatten()
        .map(|run| run.file_name().to_string_lossy().into_owned())
        .find(|name| name.starts_with("R-"))
        .expect("the killed run")
}

/// Waits until `task`'s first request reached the server and hangs there,
/// and Claude Code has written the session's transcript. It writes it a
/// moment after a turn, not as it goes: a park or kill before that finds no
/// session to resume and goes cold (`session_unavailable`). A user stopping
/// a long task would find it written.
fn wait_for_a_hung_request_and_its_transcript(runs: &Path, task: &str) {
    // Both waits together have 90 s.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    let left = || deadline.saturating_duration_since(std::time::Instant::now());
    let rehearsals = || {
        fs::read_dir(runs)
            .into_iter()
            .flatten()
            .flatten()
            .map(|run| run.path().join("rehearsal"))
            .collect::<Vec<_>>()
    };
    let hung = || {
        rehearsals().iter().any(|rehearsal| {
            fs::read_to_string(rehearsal.join("requests.jsonl"))
                .is_ok_and(|log| !log.trim().is_empty())
        })
    };
    assert!(wait_until(left(), hung), "no request arrived");
    let transcript_written = || {
        rehearsals().iter().any(|rehearsal| {
            let projects = rehearsal.join(format!("homes/{task}/.claude/projects"));
            fs::read_dir(projects)
                .into_iter()
                .flatten()
                .flatten()
                .any(|dir| {
                    fs::read_dir(dir.path())
                        .into_iter()
                        .flatten()
                        .flatten()
                        .any(|file| file.path().extension().is_some_and(|ext| ext == "jsonl"))
                })
        })
    };
    assert!(wait_until(left(), transcript_written), "no transcript");
}

/// `kill -9` of the rehearsal while Claude Code's request hangs, then
/// `rehearse --continue`: Claude Code went with the dead run, the
/// interrupted attempt is judged `interrupted`, and the next resumes the
/// same session warm. A new model server takes up the old one's log, so
/// the resumed request opens turn 2 and is answered as such; it carries the
/// first prompt and tool call in its history.
#[test]
fn claude_killed_with_its_run_is_continued_warm_in_its_own_session() {
    let cli = Cli::Claude;
    let project = Project::new();
    let scenario = hang_then_write(cli);
    let child = project.rehearse_spawn(
        cli,
        &plan(cli, "nap", "warm", 0, &[content_gate()]),
        &scenario,
    );
    let runs = project.root().join(".reprise/runs");
    wait_for_a_hung_request_and_its_transcript(&runs, "nap");
    let run_id = kill_the_rehearsal(child, &runs);
    let status = project.reprise_json(&["status", &run_id]);
    assert_eq!(status["liveness"]["state"], "interrupted", "{status}");
    // A rehearsal is continued only as one: as a plain run its agent would
    // call the real service.
    let plain = project.reprise(&["run", "--continue", &run_id]);
    assert_eq!(plain.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&plain.stderr).contains("rehearse --continue"),
        "{}",
        String::from_utf8_lossy(&plain.stderr)
    );
    let ran = project.rehearse_continue(cli, &run_id);
    ran.assert_ok();
    assert_eq!(ran.json["run"]["run_id"], run_id.as_str());
    let attempts = ran.attempts("nap");
    assert_eq!(
        attempts[0]["infra_kind"],
        "interrupted",
        "{}",
        ran.describe()
    );
    assert_eq!(ran.modes("nap"), ["new", "warm"], "{}", ran.describe());
    let sessions = ran.sessions("nap");
    assert!(!sessions[0].is_empty());
    assert_eq!(sessions[0], sessions[1], "{}", ran.describe());
    // The server went on from the dead one's log: the resumed request
    // opened turn 2, its number after the hung one's.
    let first = ran.turn_opener("nap", 1);
    let resumed = ran.turn_opener("nap", 2);
    assert!(
        resumed["request"].as_u64() > first["request"].as_u64(),
        "{first} {resumed}"
    );
    let history = serde_json::to_string(&items(cli, &ran.body(&resumed))).unwrap();
    assert!(
        history.contains(PROMPT),
        "the first prompt is in the resumed session's history"
    );
    assert_eq!(
        worktree_file(&project, &ran, "nap", "greeting.txt"),
        "hello\n"
    );
    for check in [vec!["journal", "verify", "nap"], vec!["audit", "verify"]] {
        let verified = project.reprise_json(&check);
        assert_eq!(verified["ok"], true, "{check:?}: {verified}");
    }
}

/// Claude Code writes a tool call to its transcript before it runs the
/// tool. Killed with its run while the tool runs, the session ends inside
/// that call: `rehearse --continue` does not resume it but starts cold,
/// recorded as `session_unavailable`, and the task passes.
#[test]
fn claude_killed_inside_a_tool_call_is_continued_cold() {
    let cli = Cli::Claude;
    let project = Project::new();
    let scenario = format!(
        "rules:\n\
         \x20 - match: {{ task: nap, turn: 1, tool_result: false }}\n    reply: {{ tool: Bash, input: {{ command: \"sleep 300\", description: \"wait\" }} }}\n\
         \x20 - match: {{ task: nap, turn: 2, tool_result: false }}\n    reply: {write}\n\
         \x20 - match: {{ task: nap, turn: 2, tool_result: true }}\n    reply: {{ text: \"DONE: wrote greeting.txt\" }}\n",
        write = cli.write_reply("greeting.txt", "hello\n", true),
    );
    let child = project.rehearse_spawn(
        cli,
        &plan(cli, "nap", "warm", 0, &[content_gate()]),
        &scenario,
    );
    let runs = project.root().join(".reprise/runs");
    // The call is in the transcript once the tool runs.
    assert!(
        wait_until(std::time::Duration::from_secs(90), || {
            project
                .transcripts(cli, "nap")
                .iter()
                .any(|path| fs::read_to_string(path).is_ok_and(|text| text.contains("sleep 300")))
        }),
        "the tool call never reached the transcript"
    );
    let run_id = kill_the_rehearsal(child, &runs);
    let ran = project.rehearse_continue(cli, &run_id);
    ran.assert_ok();
    let attempts = ran.attempts("nap");
    assert_eq!(
        attempts[0]["infra_kind"],
        "interrupted",
        "{}",
        ran.describe()
    );
    assert_eq!(ran.modes("nap"), ["new", "cold"], "{}", ran.describe());
    let sessions = ran.sessions("nap");
    assert_ne!(sessions[0], sessions[1], "{}", ran.describe());
    let metadata = ran.metadata(&project, "nap");
    assert_eq!(
        metadata["retry_downgrade_reason"], "session_unavailable",
        "{metadata}"
    );
    assert_eq!(
        worktree_file(&project, &ran, "nap", "greeting.txt"),
        "hello\n"
    );
}

/// The plan's `agents.<cli>` settings that point the CLI at the model server
/// at `base` (`…/t/<task>`) with no file in its home: base URL, dummy key and
/// no retries through `env`, Codex's provider through `-c` arguments, Gemini's
/// API-key auth through a system settings file (`system_settings`, outside
/// the home: with the base URL alone Gemini CLI picks an auth type it then
/// refuses headless).
fn server_settings(cli: Cli, base: &str, system_settings: &Path) -> String {
    const KEY: &str = "not-a-real-key";
    match cli {
        Cli::Claude => format!(
            "claude: {{ allowed_tools: [Bash], env: {{ ANTHROPIC_BASE_URL: {base:?}, ANTHROPIC_API_KEY: {KEY}, \
             CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: \"1\", CLAUDE_CODE_MAX_RETRIES: \"0\" }} }}"
        ),
        Cli::Codex => {
            let provider = [
                "model_provider=fake".to_owned(),
                "model_providers.fake.name=fake".to_owned(),
                format!("model_providers.fake.base_url={base}/v1"),
                "model_providers.fake.wire_api=responses".to_owned(),
                "model_providers.fake.env_key=FAKE_MODEL_KEY".to_owned(),
                "model_providers.fake.request_max_retries=0".to_owned(),
                "model_providers.fake.stream_max_retries=0".to_owned(),
            ];
            let args: Vec<String> = provider
                .iter()
                .flat_map(|setting| ["\"-c\"".to_owned(), format!("{setting:?}")])
                .collect();
            format!(
                "codex: {{ model: gpt-5.5, args: [{}], env: {{ FAKE_MODEL_KEY: {KEY} }} }}",
                args.join(", ")
            )
        }
        Cli::Gemini => format!(
            "gemini: {{ env: {{ GOOGLE_GEMINI_BASE_URL: {base:?}, GEMINI_API_KEY: {KEY}, \
             GEMINI_CLI_SYSTEM_SETTINGS_PATH: {:?} }} }}",
            system_settings.display()
        ),
    }
}

/// A directory no other user may write into, nor into any directory above
/// it: the build's temporary directory where it is so, else `$HOME`.
fn private_base() -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let private = |dir: &Path| {
        !dir.starts_with(std::env::temp_dir())
            && dir.ancestors().all(|ancestor| {
                fs::metadata(ancestor).is_ok_and(|meta| meta.permissions().mode() & 0o002 == 0)
            })
    };
    [
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")),
        PathBuf::from(std::env::var_os("HOME").expect("HOME is set")),
    ]
    .into_iter()
    .find(|dir| private(dir))
    .expect("neither the build's temporary directory nor $HOME is private to this user")
}

/// `reprise run` (not a rehearsal: that gives each task a home of its own)
/// of a one-task plan for `cli`, contained (`strict`, the default), with
/// `$HOME` as `project` made it and the CLI pointed at a model server
/// playing `scenario`. Returns `run --json` and the task's journal rows.
fn run_against_the_server(
    project: &Project,
    cli: Cli,
    policy: &str,
    scenario: &str,
) -> (Output, Value, Vec<Value>) {
    use reprise_testkit::model_server::{ModelServer, Scenario};
    let server = ModelServer::start(
        Scenario::from_yaml(scenario).unwrap(),
        project.aside().join("requests.jsonl"),
    )
    .unwrap();
    let base = format!("{}/t/greet", server.base_url().trim_end_matches('/'));
    // Gemini CLI skips a system settings file under a directory others may
    // write (`/tmp`): this one is under the build's own directory, or, for a
    // checkout that lies under such a directory, under the user's home.
    let settings_dir = tempfile::tempdir_in(private_base()).unwrap();
    let system_settings = settings_dir.path().join("gemini-system-settings.json");
    fs::write(
        &system_settings,
        r#"{"security": {"auth": {"selectedType": "gemini-api-key"}}, "general": {"disableAutoUpdate": true}, "privacy": {"usageStatisticsEnabled": false}}"#,
    )
    .unwrap();
    let plan = format!(
        "version: 1\nname: home-{cli}\nagents: {{ {settings} }}\n\
         defaults: {{ agent: {cli}, max_retries: 1, timeout: 60s }}\n\
         tasks:\n  - id: greet\n    prompt: {PROMPT:?}\n    retry_policy: {policy}\n    gates:\n      - {gate}\n",
        cli = cli.name(),
        settings = server_settings(cli, &base, &system_settings),
        gate = content_gate(),
    );
    fs::write(project.temp.path().join("plan.yaml"), plan).unwrap();
    let output = Command::new(BIN)
        .args(["run", "../plan.yaml", "--json"])
        .current_dir(project.root())
        .env_clear()
        .env("HOME", project.temp.path().join("home"))
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env(
            format!("REPRISE_{}_BIN", cli.name().to_uppercase()),
            cli.binary(),
        )
        .output()
        .unwrap();
    server.stop();
    let json: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|err| {
        panic!(
            "run printed no json ({err}): {}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    });
    let shown = project.reprise_json(&["journal", "show", "greet"]);
    let rows = shown["rows"].as_array().unwrap().clone();
    (output, json, rows)
}

/// The retry decisions of a journal: `(retry_mode, downgrade_reason)`.
fn decisions(rows: &[Value]) -> Vec<(String, Value)> {
    rows.iter()
        .filter(|row| row["kind"] == "retry.decision")
        .map(|row| {
            let decision = &row["body"]["decision"];
            (
                decision["retry_mode"].as_str().unwrap().to_owned(),
                decision["downgrade_reason"].clone(),
            )
        })
        .collect()
}

fn describe_run(output: &Output, json: &Value, rows: &[Value]) -> String {
    format!(
        "exit {:?}\n{}\nstderr: {}\njournal: {}",
        output.status.code(),
        serde_json::to_string_pretty(json).unwrap(),
        String::from_utf8_lossy(&output.stderr),
        serde_json::to_string_pretty(rows).unwrap()
    )
}

/// What the CLI's state is under an empty home, and what reprise makes.
fn state_dir_of(cli: Cli, home: &Path) -> PathBuf {
    match cli {
        Cli::Claude => home.join(".claude"),
        Cli::Codex => home.join(".codex"),
        Cli::Gemini => home.join(".gemini"),
    }
}

fn empty_home_contained_warm_retry_resumes_the_same_session(cli: Cli) {
    use std::os::unix::fs::PermissionsExt;
    let project = Project::new();
    let home = project.temp.path().join("home");
    let (output, json, rows) =
        run_against_the_server(&project, cli, "warm", &two_attempt_scenario(cli, "greet"));
    let describe = || describe_run(&output, &json, &rows);
    assert_eq!(json["ok"], true, "{}", describe());
    let task = &json["tasks"][0];
    let attempts = task["attempts"].as_array().unwrap();
    let modes: Vec<&str> = attempts
        .iter()
        .map(|attempt| attempt["mode"].as_str().unwrap())
        .collect();
    assert_eq!(modes, ["new", "warm"], "{}", describe());
    let sessions: Vec<&str> = attempts
        .iter()
        .map(|attempt| attempt["session_id"].as_str().unwrap_or(""))
        .collect();
    assert!(!sessions[0].is_empty(), "{}", describe());
    assert_eq!(sessions[0], sessions[1], "the same session: {}", describe());
    assert_eq!(
        decisions(&rows),
        [("warm".to_owned(), Value::Null)],
        "one decision, warm, no downgrade: {}",
        describe()
    );
    // The attempts ran contained, and what reprise made for the CLI is
    // private to the user.
    for row in rows.iter().filter(|row| row["kind"] == "attempt.finished") {
        assert_eq!(row["body"]["containment"]["sandboxed"], true, "{row}");
    }
    let state = state_dir_of(cli, &home);
    let mode = fs::metadata(&state).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "{}", state.display());
    if cli == Cli::Claude {
        let config = home.join(".claude.json");
        let mode = fs::metadata(&config).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let config: Value = serde_json::from_slice(&fs::read(&config).unwrap()).unwrap();
        assert!(config.is_object(), "the CLI kept its config: {config}");
    }
}

#[test]
fn claude_on_an_empty_home_contained_retries_warm_in_the_same_session() {
    empty_home_contained_warm_retry_resumes_the_same_session(Cli::Claude);
}

#[test]
fn codex_on_an_empty_home_contained_retries_warm_in_the_same_session() {
    empty_home_contained_warm_retry_resumes_the_same_session(Cli::Codex);
}

#[test]
fn gemini_on_an_empty_home_contained_retries_warm_in_the_same_session() {
    empty_home_contained_warm_retry_resumes_the_same_session(Cli::Gemini);
}

#[test]
fn claude_that_cannot_save_its_session_retries_cold_saying_so() {
    // The session store cannot hold a session: `projects` is a file.
    let project = Project::new();
    let home = project.temp.path().join("home");
    fs::create_dir(home.join(".claude")).unwrap();
    fs::write(home.join(".claude/projects"), "not a directory\n").unwrap();
    let (output, json, rows) = run_against_the_server(
        &project,
        Cli::Claude,
        "warm",
        &two_attempt_scenario(Cli::Claude, "greet"),
    );
    let describe = || describe_run(&output, &json, &rows);
    let attempts = json["tasks"][0]["attempts"].as_array().unwrap();
    let modes: Vec<&str> = attempts
        .iter()
        .map(|attempt| attempt["mode"].as_str().unwrap())
        .collect();
    assert_eq!(modes, ["new", "cold"], "{}", describe());
    // One decision, its own reason: not `session_unavailable`.
    assert_eq!(
        decisions(&rows),
        [("cold".to_owned(), Value::from("session_not_saved"))],
        "{}",
        describe()
    );
    let checkpoint = rows
        .iter()
        .find(|row| row["kind"] == "task.checkpoint")
        .unwrap();
    assert_eq!(checkpoint["body"]["session_saved"], false, "{checkpoint}");
}

/// A one-task plan for Gemini CLI as an ACP agent (`gemini --acp`), its
/// permission requests allowed for `allowed` (ACP tool kinds or names).
fn acp_plan(task: &str, policy: &str, max_retries: u32, allowed: &str, gates: &[String]) -> String {
    let gates: String = gates
        .iter()
        .map(|gate| format!("      - {gate}\n"))
        .collect();
    format!(
        "version: 1\nname: real-acp\n\
         agents: {{ acp: {{ command: [{gemini:?}, --acp], allowed_tools: [{allowed}] }} }}\n\
         defaults: {{ agent: acp, max_retries: {max_retries}, timeout: 60s }}\n\
         tasks:\n  - id: {task}\n    prompt: {PROMPT:?}\n    retry_policy: {policy}\n    allowed_paths: [@ASIDE@]\n    gates:\n{gates}",
        gemini = Cli::Gemini.binary().display().to_string(),
    )
}

/// The rows of `task`'s journal.
fn journal_rows(project: &Project, task: &str) -> Vec<Value> {
    project.reprise_json(&["journal", "show", task])["rows"]
        .as_array()
        .unwrap()
        .clone()
}

/// What the agent printed on stderr in `attempt` of `task`, with the
/// permission lines reprise adds.
fn acp_stderr(project: &Project, ran: &Rehearsal, task: &str, attempt: u32) -> String {
    let run_id = ran.json["run"]["run_id"].as_str().unwrap();
    fs::read_to_string(project.root().join(format!(
        ".reprise/runs/{run_id}/logs/{task}/{attempt}/agent.stderr"
    )))
    .unwrap_or_default()
}

/// A failed attempt, then a warm retry that loads the same ACP session
/// (`session/load`, which Gemini CLI declares at `initialize`) and sends
/// only the corrective instruction: its requests carry the earlier turns.
/// Gemini CLI 0.61 in ACP mode starts a chat file for the session it loads
/// named by the minute, emptying one of the same minute: the first
/// attempt's gate waits for the next minute before it fails.
#[test]
fn acp_gemini_warm_retry_loads_the_same_session_with_only_the_instruction() {
    let project = Project::new();
    let next_minute = project.once("minute", "sleep $((61 - $(date +%-S)))", "true");
    let gates = [
        format!("{{ name: minute, run: {next_minute:?}, timeout: 90s }}"),
        content_gate(),
    ];
    let ran = project.rehearse(
        Cli::Gemini,
        &acp_plan("greet", "warm", 1, "edit", &gates),
        &two_attempt_scenario(Cli::Gemini, "greet"),
    );
    ran.assert_ok();
    assert_eq!(ran.modes("greet"), ["new", "warm"], "{}", ran.describe());
    let sessions = ran.sessions("greet");
    assert!(!sessions[0].is_empty(), "{}", ran.describe());
    assert_eq!(
        sessions[0], sessions[1],
        "the warm retry loaded the same session"
    );
    assert_eq!(
        worktree_file(&project, &ran, "greet", "greeting.txt"),
        "hello\n"
    );
    // What the agent declared is the capability, recorded when the task
    // started and in the retry's decision.
    let rows = journal_rows(&project, "greet");
    let started = rows
        .iter()
        .find(|row| row["kind"] == "task.started")
        .unwrap();
    assert_eq!(started["body"]["capability"], "resume", "{started}");
    assert_eq!(started["body"]["adapter"], "acp");
    assert_eq!(decisions(&rows), [("warm".to_owned(), Value::Null)]);
    // The retry's request carries the first attempt's turns, and only the
    // corrective instruction as the new user turn.
    let first = ran.body(&ran.turn_opener("greet", 1));
    let retry = ran.body(&ran.turn_opener("greet", 2));
    let instruction = ran.metadata(&project, "greet")["retry_corrective_instruction"]
        .as_str()
        .expect("the instruction is in the task's metadata")
        .to_owned();
    assert_eq!(
        new_user_texts(Cli::Gemini, &retry),
        std::slice::from_ref(&instruction)
    );
    assert!(items(Cli::Gemini, &retry).len() > items(Cli::Gemini, &first).len() + 1);
    let history = serde_json::to_string(&items(Cli::Gemini, &retry)).unwrap();
    assert!(
        history.contains(PROMPT),
        "the first prompt is in the history"
    );
    assert!(
        history.contains("DONE: wrote greeting.txt"),
        "so is the first reply"
    );
    // Each write was a permission the plan's `edit` allowed, recorded in
    // the attempt's logs beside the streamed updates.
    for attempt in [1, 2] {
        let stderr = acp_stderr(&project, &ran, "greet", attempt);
        assert!(
            stderr.contains("reprise: permission for tool call")
                && stderr
                    .contains("allowed (proceed_once), as agents.acp.allowed_tools lists \"edit\""),
            "attempt {attempt}: {stderr}"
        );
    }
    let logs = project.reprise_json(&["logs", "greet"]);
    assert!(
        logs.to_string().contains("agent.stdout"),
        "the streamed updates are kept: {logs}"
    );
}

/// `retry_policy: cold` starts a new ACP session with the prompt rebuilt.
#[test]
fn acp_gemini_cold_retry_starts_a_new_session() {
    let project = Project::new();
    let ran = project.rehearse(
        Cli::Gemini,
        &acp_plan("greet", "cold", 1, "edit", &[content_gate()]),
        &two_attempt_scenario(Cli::Gemini, "greet"),
    );
    ran.assert_ok();
    assert_eq!(ran.modes("greet"), ["new", "cold"], "{}", ran.describe());
    let sessions = ran.sessions("greet");
    assert!(!sessions[0].is_empty() && !sessions[1].is_empty());
    assert_ne!(sessions[0], sessions[1], "a cold retry is a new session");
    // The retry opens with no model turn: none of the first session's.
    let retry = ran.body(&ran.turn_opener("greet", 2));
    assert!(
        items(Cli::Gemini, &retry)
            .iter()
            .all(|item| item["role"] != "model"),
        "the new session holds none of the first one's turns: {retry}"
    );
    assert_eq!(
        worktree_file(&project, &ran, "greet", "greeting.txt"),
        "hello\n"
    );
}

/// A tool the plan does not list is refused when the agent asks: the write
/// never happens, and the answer is in the attempt's logs. `run --check`
/// shows what the agent declares at `initialize`.
#[test]
fn acp_gemini_permission_not_listed_is_rejected_and_recorded() {
    let project = Project::new();
    let plan = acp_plan("greet", "cold", 0, "execute", &[content_gate()]);
    let ran = project.rehearse(
        Cli::Gemini,
        &plan,
        &two_attempt_scenario(Cli::Gemini, "greet"),
    );
    assert!(!ran.ok(), "{}", ran.describe());
    let stderr = acp_stderr(&project, &ran, "greet", 1);
    assert!(
        stderr.contains("kind \"edit\"")
            && stderr.contains("rejected (")
            && stderr.contains("): agents.acp.allowed_tools does not list it"),
        "{stderr}"
    );
    assert_eq!(worktree_file(&project, &ran, "greet", "greeting.txt"), "");
    let checked = project.reprise(&["run", "--check", "../plan.yaml"]);
    let text = String::from_utf8_lossy(&checked.stdout);
    assert!(
        text.contains("[greet] agent acp: ")
            && text.contains("gemini-cli 0.61.0; retry capability resume (warm by session/load, fork not declared)"),
        "{text}{}",
        String::from_utf8_lossy(&checked.stderr)
    );
}

/// An ACP agent whose model request hangs is sent `session/cancel` at the
/// task's timeout, its process group killed, and nothing of it is left.
#[test]
fn acp_gemini_hanging_agent_is_timed_out_and_reaped() {
    let project = Project::new();
    let scenario = "rules:\n  - match: { task: stall }\n    reply: { hang: true }\n";
    let plan = acp_plan("stall", "cold", 0, "edit", &[content_gate()])
        .replace("timeout: 60s", "timeout: 10s");
    let ran = project.rehearse(Cli::Gemini, &plan, scenario);
    assert!(!ran.ok());
    assert_eq!(ran.output.status.code(), Some(1));
    let attempts = ran.attempts("stall");
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0]["outcome"], "infra", "{}", ran.describe());
    assert_eq!(attempts[0]["infra_kind"], "timeout");
    assert_eq!(attempts[0]["judged"], false);
    assert_eq!(ran.requests("stall").len(), 1, "the one request hung");
    let homes = project.root().join(".reprise/runs");
    assert_eq!(
        processes_mentioning(&homes.to_string_lossy()),
        Vec::<u32>::new(),
        "no agent process outlives its attempt"
    );
}
