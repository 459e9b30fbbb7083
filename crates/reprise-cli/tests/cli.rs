//! The `reprise` binary as a user runs it: a temp directory, a cleared
//! environment, and checks of stdout, stderr and the exit code.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use reprise_store::journal::Journal;
use reprise_store::state::StateDir;
use reprise_testkit::{wait_for, wait_until};
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_reprise");

struct Env {
    temp: tempfile::TempDir,
}

impl Env {
    fn new() -> Self {
        let temp = tempfile::tempdir().unwrap();
        fs::create_dir(temp.path().join("home")).unwrap();
        fs::create_dir(temp.path().join("project")).unwrap();
        Self { temp }
    }

    fn project(&self) -> PathBuf {
        self.temp.path().join("project")
    }

    fn key_path(&self) -> PathBuf {
        self.temp.path().join("home/.local/state/reprise/audit.key")
    }

    /// `reprise ARGS` in the project, with a cleared environment but for
    /// `HOME` (the test's own) and `PATH`: to run, or to spawn and watch.
    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(BIN);
        command
            .args(args)
            .current_dir(self.project())
            .env_clear()
            .env("HOME", self.temp.path().join("home"))
            .env("PATH", std::env::var_os("PATH").unwrap_or_default());
        command
    }

    /// `reprise ARGS` started in the background with its stderr dropped,
    /// for a test that acts on it while it runs; `stdout` piped to read
    /// once it ends, or dropped.
    fn spawn(&self, args: &[&str], stdout: std::process::Stdio) -> std::process::Child {
        self.command(args)
            .stdout(stdout)
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    /// As `run`, with extra environment variables.
    fn run_env(&self, args: &[&str], extra: &[(&str, &Path)]) -> Output {
        let mut command = self.command(args);
        for (name, value) in extra {
            command.env(name, value);
        }
        command.output().unwrap()
    }

    fn reprise_dir(&self) -> PathBuf {
        self.project().join(".reprise")
    }

    /// Runs `plan` (written to `plan.yaml`) and returns its run id.
    fn run_plan(&self, plan: &str) -> String {
        fs::write(self.project().join("plan.yaml"), plan).unwrap();
        let output = self.run(&["run", "plan.yaml", "--json"]);
        assert!(
            output.status.code() == Some(0) || output.status.code() == Some(1),
            "stderr: {}",
            stderr(&output)
        );
        json_of(&output)["run_id"].as_str().unwrap().to_owned()
    }

    /// The run directories under `runs/`.
    fn runs(&self) -> Vec<PathBuf> {
        let mut runs: Vec<PathBuf> = fs::read_dir(self.reprise_dir().join("runs"))
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .collect();
        runs.sort();
        runs
    }

    fn init(&self) {
        let output = self.run(&["init"]);
        assert_success(&output);
    }

    fn state(&self) -> StateDir {
        StateDir::open(&self.project().join(".reprise")).unwrap()
    }

    fn journal(&self, task: &str, rows: u64) -> PathBuf {
        let state = self.state();
        let id = reprise_testkit::fixture_key(task).unwrap();
        let mut journal = Journal::open(&state, &id).unwrap();
        for n in 0..rows {
            journal
                .append("step", "2026-01-01T00:00:00.000Z", &json!({"n": n}))
                .unwrap();
        }
        state.journal_path(&id)
    }

    /// Every path and its bytes under the temp directory.
    fn snapshot(&self) -> Vec<(PathBuf, Vec<u8>)> {
        let mut entries = Vec::new();
        snapshot_into(self.temp.path(), &mut entries);
        entries.sort();
        entries
    }
}

fn snapshot_into(dir: &Path, entries: &mut Vec<(PathBuf, Vec<u8>)>) {
    // A live run may rename or remove its own temporary files while this
    // walks: what vanishes between the listing and the read is left out.
    let gone = |error: &std::io::Error| error.kind() == std::io::ErrorKind::NotFound;
    let listing = match fs::read_dir(dir) {
        Ok(listing) => listing,
        Err(error) if gone(&error) => return,
        Err(error) => panic!("{}: {error}", dir.display()),
    };
    for entry in listing {
        let path = entry.unwrap().path();
        let kind = match fs::symlink_metadata(&path) {
            Ok(metadata) => metadata.file_type(),
            Err(error) if gone(&error) => continue,
            Err(error) => panic!("{}: {error}", path.display()),
        };
        if kind.is_dir() {
            entries.push((path.clone(), Vec::new()));
            snapshot_into(&path, entries);
        } else if kind.is_symlink() {
            let target = fs::read_link(&path).unwrap_or_default();
            entries.push((path.clone(), target.into_os_string().into_encoded_bytes()));
        } else if std::os::unix::fs::FileTypeExt::is_socket(&kind) {
            // A live run's control socket: there, with nothing to read.
            entries.push((path.clone(), b"socket".to_vec()));
        } else {
            match fs::read(&path) {
                Ok(bytes) => entries.push((path.clone(), bytes)),
                Err(error) if gone(&error) => {}
                Err(error) => panic!("{}: {error}", path.display()),
            }
        }
    }
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8(output.stderr.clone()).unwrap()
}

fn json_of(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|err| panic!("{err}: {}", stdout(output)))
}

fn assert_success(output: &Output) {
    assert!(
        output.status.success(),
        "stdout: {}\nstderr: {}",
        stdout(output),
        stderr(output)
    );
}

/// A user error: exit 2, one line on stderr, nothing on stdout.
fn assert_one_line_error(output: &Output, code: i32, needle: &str) {
    assert_eq!(
        output.status.code(),
        Some(code),
        "stderr: {}",
        stderr(output)
    );
    let err = stderr(output);
    assert_eq!(err.lines().count(), 1, "not one line: {err:?}");
    assert!(err.starts_with("error: "), "{err}");
    assert!(err.contains(needle), "{err:?} does not mention {needle:?}");
    assert!(stdout(output).is_empty(), "{}", stdout(output));
}

#[test]
fn init_creates_the_state_and_a_private_key_once() {
    let env = Env::new();
    let output = env.run(&["init", "--json"]);
    assert_success(&output);
    let report = json_of(&output);
    assert_eq!(report["created"], true);
    assert_eq!(report["key_created"], true);
    assert!(env.project().join(".reprise/layout.json").is_file());
    assert_eq!(
        fs::metadata(env.key_path()).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let before = env.snapshot();
    let again = env.run(&["init", "--json"]);
    assert_success(&again);
    assert_eq!(json_of(&again)["created"], false);
    assert_eq!(env.snapshot(), before, "a second init writes nothing");
    let audit = env.run(&["audit", "verify", "--json"]);
    assert_success(&audit);
    assert_eq!(json_of(&audit)["rows"], 1);
}

#[test]
fn a_loose_key_stops_init_before_anything_is_written() {
    let env = Env::new();
    let key = env.key_path();
    fs::create_dir_all(key.parent().unwrap()).unwrap();
    fs::set_permissions(key.parent().unwrap(), fs::Permissions::from_mode(0o700)).unwrap();
    fs::write(&key, [7u8; 32]).unwrap();
    fs::set_permissions(&key, fs::Permissions::from_mode(0o644)).unwrap();
    let before = env.snapshot();
    let output = env.run(&["init"]);
    assert_one_line_error(&output, 2, "chmod 600");
    assert_eq!(env.snapshot(), before);
    assert!(!env.project().join(".reprise").exists());
}

#[test]
fn unsafe_task_ids_are_refused_and_nothing_changes() {
    let env = Env::new();
    env.init();
    env.journal("good", 2);
    let before = env.snapshot();
    let too_long = "a".repeat(65);
    for bad in ["../x", "", too_long.as_str(), "a/b/c", ".hidden", "../a/b"] {
        for command in [
            &["journal", "verify"][..],
            &["journal", "show"],
            &["replay", "repair"],
        ] {
            let mut args = command.to_vec();
            args.push(bad);
            let output = env.run(&args);
            assert_one_line_error(&output, 2, "task id");
        }
    }
    assert_eq!(env.snapshot(), before);
}

#[test]
fn a_missing_state_directory_is_one_line() {
    let env = Env::new();
    for args in [
        &["journal", "verify", "t"][..],
        &["audit", "verify"],
        &["replay", "repair", "t"],
    ] {
        let output = env.run(args);
        assert_one_line_error(&output, 2, "reprise init");
    }
    assert!(!env.project().join(".reprise").exists());
}

#[test]
fn bad_flags_are_one_line_usage_errors() {
    let env = Env::new();
    let output = env.run(&["journal", "verify", "t", "--frobnicate"]);
    assert_one_line_error(&output, 2, "--frobnicate");
    let output = env.run(&["workspace", "hash", "--threads", "many"]);
    assert_one_line_error(&output, 2, "many");
}

#[test]
fn journal_verify_reports_ok_and_tampering() {
    let env = Env::new();
    env.init();
    let path = env.journal("t1", 10);
    let output = env.run(&["journal", "verify", "t1", "--json"]);
    assert_success(&output);
    let report = json_of(&output);
    for key in [
        "task_id",
        "ok",
        "rows",
        "head",
        "first_bad_row",
        "reason",
        "discarded_lines",
        "coverage",
        "identity",
    ] {
        assert!(report.get(key).is_some(), "missing {key} in {report}");
    }
    assert_eq!(report["ok"], true);
    assert_eq!(report["rows"], 10);
    assert_eq!(report["head"]["seq"], 9);
    assert_eq!(report["first_bad_row"], Value::Null);
    assert_eq!(report["reason"], Value::Null);
    assert_eq!(report["coverage"], "complete");
    assert_eq!(report["identity"], "unverifiable");
    let text = env.run(&["journal", "verify", "t1"]);
    assert_success(&text);
    assert!(
        stdout(&text).starts_with("journal fixture/t1: ok\n"),
        "{}",
        stdout(&text)
    );

    let mut bytes = fs::read(&path).unwrap();
    let lines: Vec<usize> = bytes
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b'\n')
        .map(|(i, _)| i)
        .collect();
    // Flip a digit inside row 4's body.
    let row4 = &bytes[lines[3] + 1..lines[4]];
    let offset = lines[3] + 1 + row4.windows(5).position(|w| w == b"\"n\":4").unwrap() + 4;
    bytes[offset] = b'5';
    fs::write(&path, &bytes).unwrap();
    let output = env.run(&["journal", "verify", "t1", "--json"]);
    assert_eq!(output.status.code(), Some(1));
    let report = json_of(&output);
    assert_eq!(report["ok"], false);
    assert_eq!(report["first_bad_row"], 4);
    assert_eq!(report["reason"], "event_hash_mismatch");
    let text = env.run(&["journal", "verify", "t1"]);
    assert_eq!(text.status.code(), Some(1));
    assert!(
        stdout(&text).contains("broken at row 4 (event_hash_mismatch)"),
        "{}",
        stdout(&text)
    );
}

#[test]
fn journal_verify_of_a_missing_journal_is_bad_input() {
    let env = Env::new();
    env.init();
    let output = env.run(&["journal", "verify", "nobody"]);
    assert_one_line_error(&output, 2, "no journal for task nobody");
}

#[test]
fn journal_show_lists_rows() {
    let env = Env::new();
    env.init();
    env.journal("shown", 3);
    let output = env.run(&["journal", "show", "shown", "--json"]);
    assert_success(&output);
    let report = json_of(&output);
    assert_eq!(report["rows"].as_array().unwrap().len(), 3);
    assert_eq!(report["rows"][2]["body"]["n"], 2);
    let text = stdout(&env.run(&["journal", "show", "shown"]));
    assert_eq!(text.lines().count(), 3);
    assert!(text.lines().next().unwrap().contains("step"), "{text}");
}

#[test]
fn audit_verify_finds_a_flipped_byte() {
    let env = Env::new();
    env.init();
    let output = env.run(&["audit", "verify", "--json"]);
    assert_success(&output);
    assert_eq!(
        json_of(&output),
        json!({"ok": true, "rows": 1, "first_bad_row": null, "reason": null,
        "head": json_of(&output)["head"].clone(), "witness": json_of(&output)["witness"].clone(),
        "checkpoints": {"ok": true, "stores": []}})
    );
    let path = env.project().join(".reprise/audit/audit.jsonl");
    let mut bytes = fs::read(&path).unwrap();
    let position = bytes.windows(6).position(|w| w == b"layout").unwrap();
    bytes[position] = b'L';
    fs::write(&path, &bytes).unwrap();
    let output = env.run(&["audit", "verify", "--json"]);
    assert_eq!(output.status.code(), Some(1));
    let report = json_of(&output);
    assert_eq!(
        (report["ok"].clone(), report["first_bad_row"].clone()),
        (json!(false), json!(0))
    );
    assert_eq!(report["reason"], "mac_mismatch");
}

#[test]
fn replay_repair_cuts_a_torn_tail_then_is_a_no_op() {
    let env = Env::new();
    env.init();
    let path = env.journal("crashy", 4);
    let clean = fs::read(&path).unwrap();
    let verify_before = json_of(&env.run(&["journal", "verify", "crashy", "--json"]));
    fs::write(&path, [&clean[..], b"{\"at\":\"2026-01-01T00:0"].concat()).unwrap();

    let torn = env.run(&["journal", "verify", "crashy", "--json"]);
    assert_eq!(torn.status.code(), Some(1));
    let report = json_of(&torn);
    assert_eq!(
        (report["coverage"].clone(), report["reason"].clone()),
        (json!("partial"), json!("torn_tail"))
    );
    assert_eq!(report["discarded_lines"], json!([4]));

    let output = env.run(&["replay", "repair", "crashy", "--json"]);
    assert_success(&output);
    let repaired = json_of(&output);
    assert_eq!(repaired["repaired"], true);
    assert_eq!(repaired["removed_bytes"], 22);
    assert_eq!(repaired["rows"], 4);
    assert_eq!(repaired["head"], verify_before["head"]);
    assert!(
        repaired["backup"]
            .as_str()
            .unwrap()
            .ends_with("journal.jsonl.broken")
    );
    assert_eq!(fs::read(&path).unwrap(), clean);

    let again = env.run(&["replay", "repair", "crashy", "--json"]);
    assert_success(&again);
    assert_eq!(json_of(&again)["repaired"], false);
    assert_success(&env.run(&["journal", "verify", "crashy"]));
    // The repair itself is on the audit chain.
    let audit = env.run(&["audit", "verify", "--json"]);
    assert_eq!(json_of(&audit)["rows"], 2);
}

#[test]
fn replay_repair_refuses_corruption() {
    let env = Env::new();
    env.init();
    let path = env.journal("bad", 4);
    let mut bytes = fs::read(&path).unwrap();
    bytes[3] = b'!';
    bytes.extend_from_slice(b"{\"torn");
    fs::write(&path, &bytes).unwrap();
    let before = env.snapshot();
    let output = env.run(&["replay", "repair", "bad", "--json"]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(json_of(&output)["refused"], "corruption");
    assert_eq!(env.snapshot(), before);
}

#[test]
fn workspace_hash_prints_hash_files_and_bytes() {
    let env = Env::new();
    let tree = env.project().join("tree");
    fs::create_dir_all(tree.join("src")).unwrap();
    fs::write(tree.join("src/main.rs"), "fn main() {}\n").unwrap();
    fs::write(tree.join("README"), "hello\n").unwrap();
    let output = env.run(&["workspace", "hash", "tree", "--json"]);
    assert_success(&output);
    let report = json_of(&output);
    assert_eq!(report["files"], 2);
    assert_eq!(report["bytes"], 19);
    assert_eq!(report["hash"].as_str().unwrap().len(), 64);
    let same = json_of(&env.run(&[
        "workspace",
        "hash",
        tree.to_str().unwrap(),
        "--json",
        "--threads",
        "1",
    ]));
    assert_eq!(same, report);
    fs::write(tree.join("README"), "hello!\n").unwrap();
    let changed = json_of(&env.run(&["workspace", "hash", "tree", "--json"]));
    assert_ne!(changed["hash"], report["hash"]);
    let missing = env.run(&["workspace", "hash", "nowhere"]);
    assert_one_line_error(&missing, 2, "nowhere");
}

#[test]
fn workspace_hash_uses_a_stat_cache_in_the_state_directory() {
    let env = Env::new();
    env.init();
    for n in 0..20 {
        fs::write(
            env.project().join(format!("f{n}.txt")),
            format!("file {n}\n"),
        )
        .unwrap();
    }
    let uncached = json_of(&env.run(&["workspace", "hash", "--json", "--no-cache"]));
    let cache_dir = env.project().join(".reprise/cache/workspace");
    assert!(!cache_dir.exists(), "--no-cache writes no cache");
    let cold = json_of(&env.run(&["workspace", "hash", "--json"]));
    let warm = json_of(&env.run(&["workspace", "hash", "--json"]));
    assert_eq!(cold, uncached);
    assert_eq!(warm, uncached);
    assert!(
        cache_dir.read_dir().unwrap().next().is_some(),
        "a cache was written"
    );
    fs::write(env.project().join("f3.txt"), "changed\n").unwrap();
    let changed = json_of(&env.run(&["workspace", "hash", "--json"]));
    assert_ne!(changed["hash"], uncached["hash"]);
    assert_eq!(
        changed,
        json_of(&env.run(&["workspace", "hash", "--json", "--no-cache"]))
    );
}

/// A plan with one problem, the line it is on, and what the error says.
const BAD_PLANS: [(&str, &str, u32, &str); 8] = [
    (
        "unknown key",
        "version: 1\nname: bad\ntasks:\n  - id: a\n    prompt: p\n    agent: sim\n    sim: [ { reply: x } ]\n    colour: blue\n",
        8,
        "unknown key \"colour\"",
    ),
    (
        "cycle",
        "version: 1\nname: bad\ndefaults: { agent: sim }\ntasks:\n  - id: a\n    prompt: p\n    depends_on: [b]\n    sim: [ { reply: x } ]\n  - id: b\n    prompt: p\n    depends_on: [a]\n    sim: [ { reply: x } ]\n",
        11,
        "is a cycle",
    ),
    (
        "unknown agent",
        "version: 1\nname: bad\ntasks:\n  - id: a\n    prompt: p\n    agent: gpt\n",
        6,
        "unknown agent \"gpt\"",
    ),
    (
        "duplicate task id",
        "version: 1\nname: bad\ndefaults: { agent: sim }\ntasks:\n  - id: a\n    prompt: p\n    sim: [ { reply: x } ]\n  - id: a\n    prompt: q\n    sim: [ { reply: y } ]\n",
        8,
        "already the id of tasks[0]",
    ),
    (
        "malformed duration",
        "version: 1\nname: bad\ndefaults: { agent: sim }\ntasks:\n  - id: a\n    prompt: p\n    timeout: 10 minutes\n    sim: [ { reply: x } ]\n",
        7,
        "tasks[0].timeout: \"10 minutes\" is not a duration",
    ),
    (
        "malformed money",
        "version: 1\nname: bad\nbudget_usd: \"1.2.3\"\ndefaults: { agent: sim }\ntasks:\n  - id: a\n    prompt: p\n    sim: [ { reply: x } ]\n",
        3,
        "budget_usd: \"1.2.3\" is not an amount of money",
    ),
    (
        "invalid regex",
        "version: 1\nname: bad\ndefaults: { agent: sim }\ntasks:\n  - id: a\n    prompt: p\n    sim: [ { reply: x } ]\n    gates:\n      - { name: g, result_matches: \"(unclosed\" }\n",
        9,
        "invalid regex",
    ),
    (
        "envelope above the pool",
        "version: 1\nname: bad\nbudget_usd: \"1.00\"\ndefaults: { agent: sim }\ntasks:\n  - id: a\n    prompt: p\n    budget_usd: \"1.50\"\n    sim: [ { reply: x } ]\n",
        8,
        "more than the run's budget_usd",
    ),
];

#[test]
fn run_refuses_bad_plans_with_one_line_and_writes_nothing() {
    let env = Env::new();
    for initialised in [false, true] {
        if initialised {
            env.init();
        }
        for (what, plan, line, needle) in BAD_PLANS {
            fs::write(env.project().join("plan.yaml"), plan).unwrap();
            let before = env.snapshot();
            for json in [false, true] {
                let mut args = vec!["run", "plan.yaml"];
                if json {
                    args.push("--json");
                }
                let output = env.run(&args);
                assert_one_line_error(&output, 2, &format!("plan.yaml:{line}:"));
                assert!(
                    stderr(&output).contains(needle),
                    "{what}: {}",
                    stderr(&output)
                );
                assert_eq!(env.snapshot(), before, "{what}: a bad plan changed files");
            }
            assert_eq!(
                env.project().join(".reprise").exists(),
                initialised,
                "{what}"
            );
        }
    }
}

const SIM_PLAN: &str = r#"
version: 1
name: cli
defaults: { agent: sim, timeout: 30s }
tasks:
  - id: greet
    prompt: "Create greeting.txt containing hello"
    sim:
      - { reply: "I wrote greeting.txt.", write: { greeting.txt: "hi\n" }, cost_usd: "0.01" }
      - { reply: "DONE", write: { greeting.txt: "hello\n" }, cost_usd: "0.002" }
    gates:
      - { name: content, run: "grep -qx hello greeting.txt", disclose: output, timeout: 10s }
"#;

const FAILING_PLAN: &str = r#"
version: 1
name: cli-fails
defaults: { agent: sim, timeout: 30s }
tasks:
  - id: stubborn
    prompt: "Say DONE"
    max_retries: 1
    sim: [ { reply: "no" } ]
    gates: [ { name: answer, result_matches: "^DONE" } ]
"#;

#[test]
fn run_json_reports_each_attempt_and_the_exit_code_says_whether_all_passed() {
    let env = Env::new();
    fs::write(env.project().join("plan.yaml"), SIM_PLAN).unwrap();
    let output = env.run(&["run", "plan.yaml", "--json"]);
    assert_success(&output);
    // Only the note that a key was created (the first run made it).
    let notes = stderr(&output);
    assert_eq!(notes.lines().count(), 1, "{notes}");
    assert!(notes.starts_with("created the audit key "), "{notes}");
    let report = json_of(&output);
    let run_id = report["run_id"].as_str().unwrap().to_owned();
    assert!(run_id.starts_with("R-"), "{run_id}");
    assert_eq!(report["ok"], true);
    let tasks = report["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 1);
    assert_eq!(tasks[0]["task_id"], "greet");
    assert_eq!(tasks[0]["state"], "passed");
    let attempts = tasks[0]["attempts"].as_array().unwrap();
    let summary: Vec<Value> = attempts
        .iter()
        .map(|attempt| {
            json!([
                attempt["n"],
                attempt["mode"],
                attempt["outcome"],
                attempt["judged"]
            ])
        })
        .collect();
    assert_eq!(
        summary,
        [
            json!([1, "new", "judged", true]),
            json!([2, "warm", "passed", false])
        ]
    );
    let session = attempts[0]["session_id"].as_str().unwrap();
    assert_eq!(attempts[1]["session_id"], session, "warm keeps the session");
    assert_eq!(
        fs::read_to_string(env.project().join("greeting.txt")).unwrap(),
        "hello\n"
    );

    // task show: the retry metadata.
    let output = env.run(&["task", "show", "greet", "--json"]);
    assert_success(&output);
    let shown = json_of(&output);
    assert_eq!(shown["run_id"], run_id.as_str());
    let metadata = shown["metadata"].as_object().unwrap();
    let keys: Vec<&str> = metadata.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "retry_checkpoint_event_hash",
            "retry_checkpoint_session_id",
            "retry_corrective_instruction",
            "retry_decision_hash",
            "retry_mode",
            "retry_requested_mode",
        ]
    );
    assert_eq!(metadata["retry_mode"], "warm");
    assert_eq!(metadata["retry_checkpoint_session_id"], session);

    // lineage show: the decision, as the journal and spine hold it.
    let output = env.run(&["lineage", "show", "greet", "--json"]);
    assert_success(&output);
    let lineage = json_of(&output);
    assert_eq!(lineage["spine_rows"], 1);
    assert_eq!(lineage["spine_ok"], true);
    let decisions = lineage["decisions"].as_array().unwrap();
    assert_eq!(decisions.len(), 1);
    assert_eq!(decisions[0]["attempt"], 2);
    assert_eq!(decisions[0]["run_id"], run_id.as_str());
    assert_eq!(decisions[0]["decision"]["retry_mode"], "warm");
    assert_eq!(decisions[0]["decision"]["checkpoint_session_id"], session);
    assert_eq!(
        decisions[0]["decision_hash"],
        metadata["retry_decision_hash"]
    );

    // status: the latest run, as run --json printed it.
    // (plus the ledger's verification).
    for args in [&["status", "--json"][..], &["status", &run_id, "--json"]] {
        let output = env.run(args);
        assert_success(&output);
        let mut status = json_of(&output);
        assert_eq!(status["ledger"]["ok"], true, "{status}");
        // The run's start (with where its tasks work) and two transitions.
        assert_eq!(status["ledger"]["rows"], 3, "{status}");
        assert_eq!(status["ledger"]["identity"], "verified", "{status}");
        assert_eq!(status["audit"]["ok"], true, "{status}");
        assert_eq!(status["state_disagrees"], json!([]), "{status}");
        assert_eq!(status["state_lags"], json!([]), "{status}");
        assert_eq!(status["liveness"], json!({"state": "finished"}), "{status}");
        assert_eq!(status["lifecycle"], json!({}), "{status}");
        assert_eq!(status["attempt_elapsed_ms"], json!({}), "{status}");
        for extra in [
            "ledger",
            "audit",
            "missing_journals",
            "state_disagrees",
            "state_lags",
            "liveness",
            "lifecycle",
            "attempt_elapsed_ms",
        ] {
            status.as_object_mut().unwrap().remove(extra);
        }
        assert_eq!(status, report);
    }

    // Everything verifies, and the finished journal is sealed.
    let output = env.run(&["journal", "verify", "greet", "--json"]);
    assert_success(&output);
    assert_eq!(json_of(&output)["identity"], "verified");
    assert_success(&env.run(&["audit", "verify"]));

    // A run with a failed task exits 1, and says so.
    fs::write(env.project().join("fails.yaml"), FAILING_PLAN).unwrap();
    let output = env.run(&["run", "fails.yaml", "--json"]);
    assert_eq!(output.status.code(), Some(1), "stderr: {}", stderr(&output));
    let failed = json_of(&output);
    assert_eq!(failed["ok"], false);
    assert_eq!(failed["tasks"][0]["task_id"], "stubborn");
    assert_eq!(failed["tasks"][0]["state"], "failed");
    assert_eq!(failed["tasks"][0]["attempts"].as_array().unwrap().len(), 2);
    let output = env.run(&["status", "--json"]);
    assert_success(&output);
    let mut status = json_of(&output);
    for extra in [
        "ledger",
        "audit",
        "missing_journals",
        "state_disagrees",
        "state_lags",
        "liveness",
        "lifecycle",
        "attempt_elapsed_ms",
    ] {
        status.as_object_mut().unwrap().remove(extra);
    }
    assert_eq!(status, failed, "status shows the latest run");
}

#[test]
fn run_prints_each_attempt_and_decision_as_it_happens() {
    let env = Env::new();
    fs::write(env.project().join("plan.yaml"), SIM_PLAN).unwrap();
    let output = env.run(&["run", "plan.yaml"]);
    assert_success(&output);
    let text = stdout(&output);
    let lines: Vec<&str> = text.lines().collect();
    let position = |needle: &str| {
        lines
            .iter()
            .position(|line| line.contains(needle))
            .unwrap_or_else(|| panic!("no line with {needle:?} in:\n{text}"))
    };
    let first = position("[greet] attempt 1 (new): not accepted; gates: content failed");
    let decision = position("[greet] retry decision: warm (requested warm)");
    let second = position("[greet] attempt 2 (warm): passed; gates: content ok");
    assert!(first < decision && decision < second, "{text}");
    assert!(lines.last().unwrap().starts_with("next: "), "{text}");
}

#[test]
fn ctrl_c_stops_the_run_reaps_the_agent_and_leaves_consistent_state() {
    let env = Env::new();
    env.init();
    let project = env.project();
    fs::write(
        project.join("plan.yaml"),
        r#"
version: 1
name: interrupted
defaults: { agent: command, sandbox: none, timeout: 5m }
tasks:
  - id: slow
    prompt: "take your time"
    command: ["sh", "-c", "export CTRL_C_MARK=slow; echo $$ > agent.pid; exec sleep 120"]
"#,
    )
    .unwrap();
    let child = Command::new(BIN)
        .args(["run", "plan.yaml", "--json"])
        .current_dir(&project)
        .env_clear()
        .env("HOME", env.temp.path().join("home"))
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid_file = project.join("agent.pid");
    assert!(
        wait_until(std::time::Duration::from_secs(30), || {
            fs::read_to_string(&pid_file).is_ok_and(|pid| !pid.trim().is_empty())
        }),
        "the agent never started"
    );
    // The pid it wrote is its PID namespace's: found here by its variable.
    let agents = wait_for(std::time::Duration::from_secs(30), || {
        Some(reprise_testkit::processes::pids_with_env(
            "CTRL_C_MARK=slow",
        ))
        .filter(|pids| !pids.is_empty())
    })
    .expect("the agent's process is not to be found");
    assert_eq!(agents.len(), 1, "{agents:?}");
    let agent_pid = agents[0].to_string();
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let output = child.wait_with_output().unwrap();
    // 128 + SIGINT, as a shell reports it.
    assert_eq!(
        output.status.code(),
        Some(130),
        "stderr: {}",
        stderr(&output)
    );
    assert!(
        !Path::new(&format!("/proc/{agent_pid}")).exists(),
        "the agent process {agent_pid} was left behind"
    );
    let report = json_of(&output);
    assert_eq!(report["ok"], false);
    assert_eq!(report["tasks"][0]["state"], "cancelled");
    // The state on disk says the same, and the journal is whole and sealed.
    let status = json_of(&env.run(&["status", "--json"]));
    assert_eq!(status["tasks"][0]["state"], "cancelled");
    assert_eq!(status["ledger"]["ok"], true);
    let verify = env.run(&["journal", "verify", "slow", "--json"]);
    assert_success(&verify);
    assert_eq!(json_of(&verify)["identity"], "verified");
}

const GRADED: &str = r#"
version: 1
name: graded
defaults: { agent: sim, sandbox: none, max_retries: 3, timeout: 30s }
tasks:
  - id: cover
    prompt: "raise coverage"
    sim: [ { reply: "one" }, { reply: "two" } ]
    gates:
      - { name: coverage, run: "test {{ level }} -le 70", criterion: coverage, levels: [80, 70, 60] }
"#;

#[test]
fn a_bad_retry_budget_stops_the_run_before_anything_starts() {
    let env = Env::new();
    fs::write(env.project().join("plan.yaml"), GRADED).unwrap();
    let before = env.snapshot();
    for (spec, needle) in [
        ("2 retries, degrade: coverage>>x", "\">\" at byte"),
        (
            "2 retries, degrade: coverge",
            "unknown criterion \"coverge\"",
        ),
        ("two retries", "\"two\""),
        ("2 retries, degrade: coverage>coverage", "coverage"),
    ] {
        let output = env.run(&["run", "plan.yaml", "--retry-budget", spec]);
        assert_one_line_error(&output, 2, needle);
    }
    // The plan's own key is checked the same way.
    fs::write(
        env.project().join("plan.yaml"),
        GRADED.replace(
            "name: graded",
            "name: graded\nretry_budget: \"1 retry, degrade: speed\"",
        ),
    )
    .unwrap();
    let before_plan_key = env.snapshot();
    assert_one_line_error(
        &env.run(&["run", "plan.yaml"]),
        2,
        "unknown criterion \"speed\"",
    );
    assert_eq!(env.snapshot(), before_plan_key);
    assert!(!env.project().join(".reprise").exists());
    assert_ne!(before, before_plan_key);
}

#[test]
fn the_retry_budget_lowers_the_gate_level_in_a_real_run() {
    let env = Env::new();
    fs::write(env.project().join("plan.yaml"), GRADED).unwrap();
    let output = env.run(&[
        "run",
        "plan.yaml",
        "--retry-budget",
        "2 retries, degrade: coverage",
        "--json",
    ]);
    assert_success(&output);
    let report = json_of(&output);
    let attempts = report["tasks"][0]["attempts"].as_array().unwrap();
    let levels: Vec<&Value> = attempts
        .iter()
        .map(|attempt| &attempt["gates"][0]["level"])
        .collect();
    assert_eq!(levels, [&json!(80), &json!(70)]);
}

#[test]
fn budget_check_explains_each_retry() {
    let env = Env::new();
    fs::write(env.project().join("plan.yaml"), GRADED).unwrap();
    let output = env.run(&[
        "budget",
        "check",
        "2 retries, degrade: coverage",
        "--plan",
        "plan.yaml",
        "--json",
    ]);
    assert_success(&output);
    let report = json_of(&output);
    assert_eq!(report["spec"], "2 retries, degrade: coverage");
    let steps = report["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 2);
    assert_eq!(steps[0]["criteria"][0]["level"], 70);
    assert_eq!(steps[1]["degradation_kind"], "past_policy");
    let text = stdout(&env.run(&["budget", "check", "3 RETRY; degrade: a>b"]));
    assert!(
        text.starts_with("3 retries, degrade: a>b: 3 retries authorised\n"),
        "{text}"
    );
    // Attempts are not retries: refused, with what to write instead, and
    // refused as a plan's retry_budget before anything runs.
    let attempts = env.run(&["budget", "check", "3 attempts, degrade: a>b"]);
    assert_one_line_error(&attempts, 2, "3 attempts are \"2 retries\"");
    assert_one_line_error(
        &env.run(&["budget", "check", "3 retries, degrade: a>"]),
        2,
        "byte",
    );
}

#[test]
fn retry_failed_starts_a_new_leg_that_quotes_each_judged_reply_once() {
    let env = Env::new();
    env.init();
    let project = env.project();
    let aside = env.temp.path().join("aside");
    fs::create_dir(&aside).unwrap();
    // Leg one: `judged` replies LEG-ONE and its gate says no; `broken` times
    // out (infrastructure); `fine` passes.
    let plan = |leg: &str| {
        format!(
            r#"
version: 1
name: legs
defaults: {{ agent: command, sandbox: none, max_retries: 0, timeout: 2s }}
tasks:
  - id: judged
    prompt: "Say DONE"
    command: ["sh", "-c", "cat > '{aside}/judged-'$REPRISE_RUN_ID; echo {leg}"]
    allowed_paths: ["{aside}"]
    gates: [ {{ name: answer, result_matches: "^DONE" }} ]
  - id: broken
    prompt: "Be quick"
    command: ["sh", "-c", "cat > '{aside}/broken-'$REPRISE_RUN_ID; [ {leg} = DONE ] || sleep 10; echo DONE"]
    allowed_paths: ["{aside}"]
  - id: fine
    prompt: "Say DONE"
    command: ["sh", "-c", "echo DONE"]
    gates: [ {{ name: answer, result_matches: "^DONE" }} ]
"#,
            aside = aside.display()
        )
    };
    fs::write(project.join("plan.yaml"), plan("LEG-ONE")).unwrap();
    let first = env.run(&["run", "plan.yaml", "--json"]);
    assert_eq!(first.status.code(), Some(1));
    let first = json_of(&first);
    let run_one = first["run_id"].as_str().unwrap().to_owned();
    let kept = project.join(format!(".reprise/runs/{run_one}/failed/judged.out"));
    assert_eq!(fs::read_to_string(&kept).unwrap(), "LEG-ONE");
    assert_eq!(
        fs::metadata(&kept).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert!(
        !project
            .join(format!(".reprise/runs/{run_one}/failed/broken.out"))
            .exists()
    );
    let state: Value = serde_json::from_slice(
        &fs::read(project.join(format!(".reprise/runs/{run_one}/state.json"))).unwrap(),
    )
    .unwrap();
    let judged_of = |id: &str| {
        state["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["task_id"] == id)
            .unwrap()["judged"]
            .clone()
    };
    assert_eq!(
        (judged_of("judged"), judged_of("broken")),
        (json!(true), json!(false))
    );

    // Leg two, in another process: the plan now lets both pass.
    fs::write(project.join("plan.yaml"), plan("DONE")).unwrap();
    let second = env.run(&["run", "--retry-failed", &run_one, "--json"]);
    assert_success(&second);
    let second = json_of(&second);
    let run_two = second["run_id"].as_str().unwrap().to_owned();
    let judged_prompt = fs::read_to_string(aside.join(format!("judged-{run_two}"))).unwrap();
    assert!(judged_prompt.starts_with("Say DONE\n"), "{judged_prompt}");
    assert_eq!(
        judged_prompt.matches("<<<QUOTE ").count(),
        1,
        "{judged_prompt}"
    );
    assert!(judged_prompt.contains("LEG-ONE"), "{judged_prompt}");
    assert!(
        !judged_prompt.contains("^DONE"),
        "the predicate is never handed over"
    );
    let broken_prompt = fs::read_to_string(aside.join(format!("broken-{run_two}"))).unwrap();
    assert_eq!(
        broken_prompt, "Be quick",
        "an infra failure re-runs with the plain base prompt"
    );
    let tasks = second["tasks"].as_array().unwrap();
    let fine = tasks.iter().find(|t| t["task_id"] == "fine").unwrap();
    assert_eq!(fine["state"], "passed");
    assert!(
        fine["attempts"].as_array().unwrap().is_empty(),
        "what passed is not run again"
    );
    let judged = tasks.iter().find(|t| t["task_id"] == "judged").unwrap();
    assert_eq!(judged["attempts"][0]["mode"], "cold");
    // The pass retired the kept reply.
    assert!(!kept.exists());
}

#[test]
fn rehearse_refuses_bad_input_with_one_line_and_writes_nothing() {
    let env = Env::new();
    fs::write(env.project().join("plan.yaml"), SIM_PLAN).unwrap();
    fs::write(
        env.project().join("good.yaml"),
        "rules:\n  - reply: { text: hi }\n",
    )
    .unwrap();
    fs::write(
        env.project().join("ambiguous.yaml"),
        "rules:\n  - reply: { text: hi, hang: true }\n",
    )
    .unwrap();
    fs::write(
        env.project().join("gemini.yaml"),
        "version: 1\nname: g\ntasks:\n  - { id: g1, prompt: p, agent: gemini }\n",
    )
    .unwrap();
    fs::write(
        env.project().join("codex.yaml"),
        "version: 1\nname: c\ntasks:\n  - { id: fix, prompt: p, agent: codex }\n  - { id: docs, prompt: p, agent: claude }\n",
    )
    .unwrap();
    for (name, text) in [
        ("empty.yaml", "version: 1\nrules: []\n"),
        (
            "unknown.yaml",
            "rules:\n  - reply: { text: hi }\n    matchh: { turn: 1 }\n",
        ),
        (
            "stranger.yaml",
            "rules:\n  - match: { task: fix }\n    reply: { text: hi }\n  - match: { task: nobody }\n    reply: { text: hi }\n  - reply: { text: hi }\n",
        ),
        (
            "unanswered.yaml",
            "rules:\n  - match: { task: fix }\n    reply: { text: hi }\n",
        ),
        (
            "bash.yaml",
            "rules:\n  - match: { task: docs }\n    reply: { text: hi }\n  - reply: { tool: Bash, input: { command: ls } }\n",
        ),
    ] {
        fs::write(env.project().join(name), text).unwrap();
    }
    let cases: &[(&[&str], &str)] = &[
        (
            &["rehearse", "plan.yaml", "--scenario", "empty.yaml"],
            "empty.yaml:2:8: rules: the list is empty",
        ),
        (
            &["rehearse", "plan.yaml", "--scenario", "unknown.yaml"],
            "unknown.yaml:3:5: yaml: unknown field `matchh`, expected one of match, reply\n",
        ),
        (
            &["rehearse", "codex.yaml", "--scenario", "stranger.yaml"],
            "stranger.yaml:4:20: match.task: the plan has no task nobody",
        ),
        (
            &["rehearse", "codex.yaml", "--scenario", "unanswered.yaml"],
            "unanswered.yaml:2:3: rules: no rule can answer task docs",
        ),
        (
            &["rehearse", "codex.yaml", "--scenario", "bash.yaml"],
            "bash.yaml:4:20: reply.tool: codex (task fix) offers no tool Bash",
        ),
        (
            &["rehearse", "plan.yaml", "--scenario", "missing.yaml"],
            "cannot read scenario",
        ),
        (
            &["rehearse", "plan.yaml", "--scenario", "ambiguous.yaml"],
            "ambiguous.yaml:2:5: reply: a reply needs exactly one of",
        ),
        (
            &[
                "rehearse",
                "plan.yaml",
                "--scenario",
                "good.yaml",
                "--price",
                "3",
            ],
            "--price \"3\"",
        ),
        (
            &["rehearse", "gemini.yaml", "--scenario", "bash.yaml"],
            "bash.yaml:2:20: match.task: the plan has no task docs",
        ),
        (
            &["rehearse", "nothere.yaml", "--scenario", "good.yaml"],
            "nothere.yaml",
        ),
        (&["rehearse", "plan.yaml"], "--scenario"),
        (
            &["rehearse", "serve", "--scenario", "ambiguous.yaml"],
            "ambiguous.yaml:2:5: reply:",
        ),
    ];
    for initialised in [false, true] {
        if initialised {
            env.init();
        }
        let before = env.snapshot();
        for (args, needle) in cases {
            let output = env.run(args);
            assert_one_line_error(&output, 2, needle);
            assert_eq!(env.snapshot(), before, "{args:?} changed files");
        }
    }
}

#[test]
fn rehearse_runs_a_sim_plan_and_reports_traffic_per_task() {
    let env = Env::new();
    fs::write(env.project().join("plan.yaml"), SIM_PLAN).unwrap();
    fs::write(
        env.project().join("scenario.yaml"),
        "rules:\n  - reply: { text: hi }\n",
    )
    .unwrap();
    let output = env.run(&[
        "rehearse",
        "plan.yaml",
        "--scenario",
        "scenario.yaml",
        "--json",
    ]);
    assert_success(&output);
    let json = json_of(&output);
    assert_eq!(json["run"]["ok"], true);
    let report = &json["rehearsal"]["tasks"][0];
    assert_eq!(report["task_id"], "greet");
    // The sim agent talks to no server: nothing sent, the sim's own cost.
    assert_eq!(report["requests"], 0);
    assert_eq!(report["reported_cost_micro_usd"], 12_000);
    let log = json["rehearsal"]["log"].as_str().unwrap();
    assert!(Path::new(log).is_file(), "the request log is kept");
    let text = env.run(&["rehearse", "plan.yaml", "--scenario", "scenario.yaml"]);
    assert_success(&text);
    let printed = stdout(&text);
    assert!(
        printed.contains("rehearsal: model server at http://127.0.0.1:"),
        "{printed}"
    );
    assert!(printed.contains("greet (sim): 0 requests"), "{printed}");
    // The sim's cost figure is no money spent.
    assert!(printed.contains("nothing spent: a rehearsal"), "{printed}");
    assert!(!printed.contains("spent $"), "{printed}");
}

#[test]
fn rehearse_counts_requests_no_rule_matched_and_shows_the_first() {
    let env = Env::new();
    // A command agent that asks the server twice, as a CLI would.
    let ask = r#"for q in 'hello there' 'and again'; do curl -s -X POST "$ANTHROPIC_BASE_URL/v1/messages" -d "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"$q\"}]}"; done; echo asked"#;
    let plan = format!(
        "version: 1\nname: ask\ndefaults: {{ agent: command, sandbox: none, timeout: 30s }}\ntasks:\n  - id: ask\n    prompt: p\n    command: [\"sh\", \"-c\", {ask:?}]\n"
    );
    fs::write(env.project().join("plan.yaml"), plan).unwrap();
    fs::write(
        env.project().join("scenario.yaml"),
        "rules:\n  - match: { turn: 9 }\n    reply: { text: never }\n",
    )
    .unwrap();
    let output = env.run(&["rehearse", "plan.yaml", "--scenario", "scenario.yaml"]);
    let printed = stdout(&output);
    assert!(
        printed.contains("2 requests matched no rule; first: task ask turn 1, \"hello there\""),
        "{printed}\n{}",
        stderr(&output)
    );
    let output = env.run(&[
        "rehearse",
        "plan.yaml",
        "--scenario",
        "scenario.yaml",
        "--json",
    ]);
    let report = &json_of(&output)["rehearsal"]["tasks"][0];
    assert_eq!(report["unmatched_requests"], 2);
    assert_eq!(report["first_unmatched"]["prompt"], "hello there");
}

#[path = "cli/worktrees.rs"]
mod worktrees;

#[path = "cli/recovery.rs"]
mod recovery;

#[path = "cli/first_hour.rs"]
mod first_hour;

#[path = "cli/parks.rs"]
mod parks;

#[path = "cli/suspension.rs"]
mod suspension;

#[path = "cli/seats.rs"]
mod seats;

#[path = "cli/money.rs"]
mod money;

// ---- A hostile agent against reprise's own git (issue 24) ----
#[path = "cli/escapes.rs"]
mod escapes;

// ---- Smaller truths (issue 25, items 6 to 8) ----
#[path = "cli/truths.rs"]
mod truths;

// ---- The state directory as a whole (issue 27, items 4, 5, 12, 14) ----
#[path = "cli/state_dir.rs"]
mod state_dir;

// ---- Seed requirements the seed audit table found untested ----
#[path = "cli/seeds.rs"]
mod seeds;

// ---- Crashes at every step, continued (issue 27) ----
#[path = "cli/crashes.rs"]
mod crashes;

// ---- The fleet's database (issue 29) ----
#[path = "cli/fleet.rs"]
mod fleet;

// ---- `reprise watch` (issue 30) ----
#[path = "cli/watch.rs"]
mod watch;

// ---- An ACP agent's own state (issue 31) ----
#[path = "cli/acp.rs"]
mod acp;

// ---- Evidence nobody can quietly lose (issue 13) ----

fn code(output: &Output) -> Option<i32> {
    output.status.code()
}

/// Keeps the first `rows` lines of the file at `path`.
fn keep_rows(path: &Path, rows: usize) {
    let text = fs::read_to_string(path).unwrap();
    let kept: String = text.split_inclusive('\n').take(rows).collect();
    fs::write(path, kept).unwrap();
}

fn line_count(path: &Path) -> usize {
    fs::read_to_string(path).unwrap().lines().count()
}

fn copy_dir(from: &Path, to: &Path) {
    let status = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(status.success());
}

fn audit_reason(env: &Env) -> Value {
    let output = env.run(&["audit", "verify", "--json"]);
    assert_eq!(code(&output), Some(1), "{}", stdout(&output));
    json_of(&output)["reason"].clone()
}

/// A run that must be refused before anything is written: exit 2, one line
/// naming `needle`, and no new run directory.
fn assert_run_refused(env: &Env, needle: &str) {
    let before = env.runs();
    let output = env.run(&["run", "plan.yaml"]);
    assert_one_line_error(&output, 2, needle);
    assert_eq!(env.runs(), before, "a refused run wrote a run directory");
}

#[test]
fn a_deleted_or_emptied_audit_chain_fails_everywhere_and_stops_runs() {
    for emptied in [false, true] {
        let env = Env::new();
        env.init();
        env.run_plan(SIM_PLAN);
        let audit = env.reprise_dir().join("audit/audit.jsonl");
        if emptied {
            fs::write(&audit, b"").unwrap();
        } else {
            fs::remove_file(&audit).unwrap();
        }
        // Cut the sealed journal too: before, this verified with identity
        // `unverifiable` and exit 0.
        let journal = env
            .reprise_dir()
            .join("plans/cli/tasks/greet/journal.jsonl");
        keep_rows(&journal, 3);
        assert_eq!(audit_reason(&env), "audit_missing");
        let verify = env.run(&["journal", "verify", "greet", "--json"]);
        assert_eq!(code(&verify), Some(1), "{}", stdout(&verify));
        assert_eq!(json_of(&verify)["audit"]["reason"], "audit_missing");
        assert_eq!(code(&env.run(&["status"])), Some(1));
        assert_eq!(code(&env.run(&["lineage", "show", "greet"])), Some(1));
        // And another run does not paper over it.
        assert_run_refused(&env, "audit_missing");
        assert_eq!(audit_reason(&env), "audit_missing");
    }
}

#[test]
fn cutting_the_last_audit_rows_is_audit_truncated() {
    for cut in [1, 5] {
        let env = Env::new();
        env.init();
        env.run_plan(SIM_PLAN);
        env.run_plan(SIM_PLAN);
        let audit = env.reprise_dir().join("audit/audit.jsonl");
        let rows = line_count(&audit);
        assert!(rows > 5, "{rows} audit rows");
        keep_rows(&audit, rows - cut);
        assert_eq!(audit_reason(&env), "audit_truncated");
        let verify = env.run(&["journal", "verify", "greet", "--json"]);
        assert_eq!(code(&verify), Some(1));
        assert_eq!(json_of(&verify)["audit"]["reason"], "audit_truncated");
        assert_run_refused(&env, "audit_truncated");
    }
}

#[test]
fn rolling_back_the_audit_chain_or_the_whole_state_directory_is_detected() {
    let env = Env::new();
    env.init();
    env.run_plan(SIM_PLAN);
    let earlier = env.temp.path().join("earlier");
    copy_dir(&env.reprise_dir(), &earlier);
    env.run_plan(SIM_PLAN);
    assert_success(&env.run(&["audit", "verify"]));

    // The audit chain alone, put back.
    let audit = env.reprise_dir().join("audit/audit.jsonl");
    let current = fs::read(&audit).unwrap();
    fs::copy(earlier.join("audit/audit.jsonl"), &audit).unwrap();
    assert_eq!(audit_reason(&env), "audit_truncated");
    fs::write(&audit, current).unwrap();
    assert_success(&env.run(&["audit", "verify"]));

    // The whole state directory, put back.
    fs::remove_dir_all(env.reprise_dir()).unwrap();
    copy_dir(&earlier, &env.reprise_dir());
    assert_eq!(audit_reason(&env), "audit_truncated");
    assert_eq!(code(&env.run(&["journal", "verify", "greet"])), Some(1));
    assert_eq!(code(&env.run(&["status"])), Some(1));
    assert_run_refused(&env, "audit_truncated");
}

#[test]
fn another_projects_state_directory_is_foreign() {
    let env = Env::new();
    env.init();
    env.run_plan(SIM_PLAN);
    // A second project of the same user, with the same key.
    let other = env.temp.path().join("other");
    fs::create_dir(&other).unwrap();
    let output = Command::new(BIN)
        .args(["init"])
        .current_dir(&other)
        .env_clear()
        .env("HOME", env.temp.path().join("home"))
        .output()
        .unwrap();
    assert_success(&output);
    fs::remove_dir_all(env.reprise_dir()).unwrap();
    copy_dir(&other.join(".reprise"), &env.reprise_dir());
    assert_eq!(audit_reason(&env), "foreign_state_dir");
    assert_eq!(
        code(&env.run(&["status"])),
        Some(2),
        "no run in the swapped dir"
    );
    assert_run_refused(&env, "foreign_state_dir");
}

#[test]
fn a_missing_witness_is_reported_and_not_recreated() {
    let env = Env::new();
    env.init();
    env.run_plan(SIM_PLAN);
    let witness_dir = env.temp.path().join("home/.local/state/reprise/witness");
    fs::remove_dir_all(&witness_dir).unwrap();
    assert_eq!(audit_reason(&env), "witness_missing");
    assert_run_refused(&env, "witness_missing");
    assert!(!witness_dir.exists(), "the witness was silently recreated");
}

/// The spine row with its decision changed from warm to cold, re-chained.
fn rewritten_spine(path: &Path) -> Vec<u8> {
    let text = fs::read_to_string(path).unwrap();
    let mut previous = None;
    let mut out = Vec::new();
    for line in text.lines() {
        let row: reprise_core::record::SpineRow = serde_json::from_str(line).unwrap();
        let mut decision = row.decision.clone();
        decision["retry_mode"] = json!("cold");
        let encoded =
            reprise_core::record::encode_spine_row(previous, &row.kind, &decision, row.sealed_at)
                .unwrap();
        previous = Some(encoded.head);
        out.extend_from_slice(&encoded.line);
    }
    out
}

#[test]
fn a_spine_deleted_cut_or_rewritten_does_not_match_its_bindings() {
    for attack in ["delete", "cut", "rewrite"] {
        let env = Env::new();
        env.init();
        env.run_plan(SIM_PLAN);
        assert_success(&env.run(&["journal", "verify", "greet"]));
        let spine = env.reprise_dir().join("plans/cli/tasks/greet/spine.jsonl");
        match attack {
            "delete" => fs::remove_file(&spine).unwrap(),
            "cut" => keep_rows(&spine, 0),
            _ => {
                let rewritten = rewritten_spine(&spine);
                fs::write(&spine, rewritten).unwrap();
            }
        }
        let verify = env.run(&["journal", "verify", "greet", "--json"]);
        assert_eq!(code(&verify), Some(1), "{attack}: {}", stdout(&verify));
        let report = json_of(&verify);
        assert_eq!(report["decisions"], "mismatched", "{attack}");
        // Re-chained, the spine verifies on its own: only the bindings catch it.
        if attack == "rewrite" {
            assert_eq!(report["spine"]["ok"], true);
        }
        let lineage = env.run(&["lineage", "show", "greet"]);
        assert_eq!(code(&lineage), Some(1), "{attack}: {}", stdout(&lineage));
        assert!(
            stdout(&lineage).contains("SPINE BROKEN"),
            "{}",
            stdout(&lineage)
        );
        assert!(
            !stdout(&lineage).contains("attempt 2: warm"),
            "{}",
            stdout(&lineage)
        );
    }
}

#[test]
fn lineage_show_prints_a_tampered_decision_as_broken_and_exits_1() {
    let env = Env::new();
    env.init();
    env.run_plan(SIM_PLAN);
    let lineage = env.run(&["lineage", "show", "greet"]);
    assert_success(&lineage);
    assert!(
        stdout(&lineage).contains("attempt 2: warm"),
        "{}",
        stdout(&lineage)
    );
    let journal = env
        .reprise_dir()
        .join("plans/cli/tasks/greet/journal.jsonl");
    let clean = fs::read_to_string(&journal).unwrap();
    let edited = clean.replacen("\"retry_mode\":\"warm\"", "\"retry_mode\":\"cold\"", 1);
    assert_ne!(edited, clean);
    fs::write(&journal, edited).unwrap();
    let lineage = env.run(&["lineage", "show", "greet", "--json"]);
    assert_eq!(code(&lineage), Some(1), "{}", stdout(&lineage));
    let report = json_of(&lineage);
    assert_eq!(report["ok"], false);
    assert_eq!(report["decisions"][0]["verified"], false);
    assert!(report["decisions"][0].get("decision").is_none(), "{report}");
    let text = stdout(&env.run(&["lineage", "show", "greet"]));
    assert!(text.contains("BROKEN"), "{text}");
    assert!(
        !text.contains(": cold ("),
        "a tampered decision shown as fact: {text}"
    );
}

/// The ledger with every `failed` rewritten to `passed`, re-chained.
fn rewritten_ledger(path: &Path) -> Vec<u8> {
    let text = fs::read_to_string(path).unwrap();
    let mut previous = None;
    let mut out = Vec::new();
    for line in text.lines() {
        let row: reprise_core::record::LedgerRow = serde_json::from_str(line).unwrap();
        let mut body = row.body.clone();
        if body["to"] == "failed" {
            body["to"] = json!("passed");
        }
        let encoded =
            reprise_core::record::encode_ledger_row(previous, &row.kind, &row.at, &body).unwrap();
        previous = Some(encoded.head);
        out.extend_from_slice(&encoded.line);
    }
    out
}

#[test]
fn a_ledger_deleted_cut_rolled_back_or_rewritten_fails_status_and_stops_runs() {
    for attack in ["delete", "cut", "rollback", "rewrite"] {
        let env = Env::new();
        env.init();
        env.run_plan(FAILING_PLAN);
        let ledger = env.reprise_dir().join("ledger.jsonl");
        let earlier = fs::read(&ledger).unwrap();
        env.run_plan(FAILING_PLAN);
        assert_success(&env.run(&["status"]));
        match attack {
            "delete" => fs::remove_file(&ledger).unwrap(),
            "cut" => keep_rows(&ledger, line_count(&ledger) - 1),
            "rollback" => fs::write(&ledger, &earlier).unwrap(),
            _ => {
                let rewritten = rewritten_ledger(&ledger);
                fs::write(&ledger, rewritten).unwrap();
            }
        }
        let status = env.run(&["status", "--json"]);
        assert_eq!(code(&status), Some(1), "{attack}: {}", stdout(&status));
        assert_eq!(json_of(&status)["ledger"]["ok"], false, "{attack}");
        assert_eq!(
            json_of(&status)["ledger"]["identity"],
            "mismatched",
            "{attack}"
        );
        assert!(
            stdout(&env.run(&["status"])).contains("ledger: MISMATCHED"),
            "{attack}"
        );
        fs::write(env.project().join("plan.yaml"), FAILING_PLAN).unwrap();
        assert_run_refused(&env, "ledger");
    }
}

/// A task journal the audit chain sealed, deleted or emptied: a later run
/// of its plan refuses (a fresh chain over it would leave the seal vouching
/// for rows no one can read), writes nothing, and says how to go on.
#[test]
fn a_sealed_journal_deleted_or_emptied_stops_the_next_run_of_its_plan() {
    for emptied in [false, true] {
        let env = Env::new();
        env.init();
        env.run_plan(FAILING_PLAN);
        let journal = env
            .reprise_dir()
            .join("plans/cli-fails/tasks/stubborn/journal.jsonl");
        assert!(journal.is_file());
        if emptied {
            fs::write(&journal, b"").unwrap();
        } else {
            fs::remove_file(&journal).unwrap();
        }
        fs::write(env.project().join("plan.yaml"), FAILING_PLAN).unwrap();
        let before = env.snapshot();
        let output = env.run(&["run", "plan.yaml"]);
        assert_one_line_error(&output, 2, "the journal of task cli-fails/stubborn is gone");
        assert!(stderr(&output).contains("put the journal back from a backup"));
        assert_eq!(env.snapshot(), before, "a refused run wrote something");
        assert_eq!(journal.exists(), emptied, "the refusal made a journal");
    }
}

/// A run of plan `torn` (one `command` task `t` that waits for
/// `FLAG/go`, then writes `done.txt`) killed with SIGKILL while its agent
/// waits, the agent gone too: the env, the flag directory and the run id.
fn killed_mid_task() -> (Env, PathBuf, String) {
    let env = Env::new();
    env.init();
    let project = env.project();
    let flag = env.temp.path().join("flag");
    fs::create_dir(&flag).unwrap();
    fs::write(
        project.join("plan.yaml"),
        format!(
            r#"
version: 1
name: torn
agents: {{ command: {{ env: {{ TORN_MARK: "{mark}" }} }} }}
defaults: {{ agent: command, timeout: 5m, max_retries: 0 }}
tasks:
  - id: t
    prompt: "wait, then write"
    allowed_paths: ["{flag}"]
    command: ["sh", "-c", "touch {flag}/started; while [ ! -e {flag}/go ]; do sleep 0.05; done; echo ok > done.txt"]
"#,
            flag = flag.display(),
            mark = std::process::id(),
        ),
    )
    .unwrap();
    let mut child = Command::new(BIN)
        .args(["run", "plan.yaml", "--json"])
        .current_dir(&project)
        .env_clear()
        .env("HOME", env.temp.path().join("home"))
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        wait_until(std::time::Duration::from_secs(30), || flag
            .join("started")
            .exists()),
        "the agent never started"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    // Its supervisor ends the agent once reprise is gone.
    let mark = format!("TORN_MARK={}", std::process::id());
    assert!(
        wait_until(std::time::Duration::from_secs(30), || {
            reprise_testkit::processes::pids_with_env(&mark).is_empty()
        }),
        "the killed run's agent lives on"
    );
    let run_id = env.runs()[0]
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    (env, flag, run_id)
}

/// A run killed by SIGKILL mid-checkpoint leaves git's `index.lock` in
/// the task's store: the continued run, which holds the task, clears it
/// and the task passes (it failed on the lock).
#[test]
fn a_stale_index_lock_in_a_killed_run_s_store_does_not_fail_the_continued_task() {
    let (env, flag, run_id) = killed_mid_task();
    let lock = env
        .reprise_dir()
        .join("snapshots")
        .join(&run_id)
        .join("t/index.lock");
    fs::write(&lock, "").unwrap();
    fs::write(flag.join("go"), "").unwrap();
    let continued = env.run(&["run", "--continue", &run_id, "--json"]);
    assert_success(&continued);
    assert_eq!(json_of(&continued)["tasks"][0]["state"], "passed");
    assert!(!lock.exists());
}

/// A run killed mid-task whose journal's last write was cut: continuing it
/// is refused before anything is written (it used to fail the task for the
/// torn line and finish the run, its journal never sealed), and once the
/// user repaired the journal the continued run finishes the task and seals
/// it.
#[test]
fn a_run_cut_with_a_torn_journal_is_refused_until_repaired_then_finishes_sealed() {
    let (env, flag, run_id) = killed_mid_task();
    let journal = env.reprise_dir().join("plans/torn/tasks/t/journal.jsonl");
    let mut torn = fs::read(&journal).unwrap();
    torn.extend_from_slice(br#"{"at":"2026-12-07T17:00:00.000Z","body":{"cut"#);
    fs::write(&journal, &torn).unwrap();
    fs::write(flag.join("go"), "").unwrap();

    // The dead run's supervisor record is the next command's to reap: that
    // is all a refused continue may change.
    let without_records = |snapshot: Vec<(PathBuf, Vec<u8>)>| -> Vec<(PathBuf, Vec<u8>)> {
        snapshot
            .into_iter()
            .filter(|(path, _)| !path.starts_with(env.reprise_dir().join("supervised")))
            .collect()
    };
    let before = without_records(env.snapshot());
    let refused = env.run(&["run", "--continue", &run_id]);
    assert_one_line_error(
        &refused,
        2,
        "the journal of task torn/t ends in a torn line",
    );
    assert!(stderr(&refused).contains("run `reprise replay repair torn/t`"));
    assert_eq!(
        without_records(env.snapshot()),
        before,
        "the refused continue wrote something"
    );
    assert_success(&env.run(&["replay", "repair", "torn/t"]));
    let continued = env.run(&["run", "--continue", &run_id, "--json"]);
    assert_success(&continued);
    assert_eq!(json_of(&continued)["tasks"][0]["state"], "passed");
    let verified = env.run(&["journal", "verify", "t", "--json"]);
    assert_success(&verified);
    assert_eq!(
        json_of(&verified)["identity"],
        "verified",
        "{}",
        stdout(&verified)
    );
}

#[test]
fn an_edited_state_json_is_shown_as_the_ledger_says() {
    let env = Env::new();
    env.init();
    let run_id = env.run_plan(FAILING_PLAN);
    let path = env
        .reprise_dir()
        .join("runs")
        .join(&run_id)
        .join("state.json");
    let text = fs::read_to_string(&path).unwrap();
    fs::write(
        &path,
        text.replace("\"state\":\"failed\"", "\"state\":\"passed\""),
    )
    .unwrap();
    let status = env.run(&["status"]);
    assert_eq!(code(&status), Some(1), "{}", stdout(&status));
    let text = stdout(&status);
    assert!(
        text.contains("stubborn: failed (state.json says passed"),
        "{text}"
    );
    let show = env.run(&["task", "show", "stubborn", "--json"]);
    assert_eq!(code(&show), Some(1));
    assert_eq!(json_of(&show)["ledger_state"], "failed");
}

#[test]
fn a_torn_ledger_or_audit_chain_stops_runs_until_repaired() {
    for (file, target) in [("ledger.jsonl", "ledger"), ("audit/audit.jsonl", "audit")] {
        let env = Env::new();
        env.init();
        env.run_plan(SIM_PLAN);
        let path = env.reprise_dir().join(file);
        let clean = fs::read(&path).unwrap();
        fs::write(&path, [&clean[..], b"{\"at\":\"2026-"].concat()).unwrap();
        assert_run_refused(&env, &format!("run `reprise replay repair {target}`"));
        let output = env.run(&["replay", "repair", target, "--json"]);
        assert_success(&output);
        assert_eq!(json_of(&output)["repaired"], true, "{target}");
        assert_eq!(json_of(&output)["removed_bytes"], 12, "{target}");
        if target == "ledger" {
            assert_eq!(fs::read(&path).unwrap(), clean);
        } else {
            // The repair is the audit chain's newest row.
            assert!(fs::read(&path).unwrap().starts_with(&clean));
            assert!(
                fs::read_to_string(&path)
                    .unwrap()
                    .contains("\"kind\":\"audit.repair\"")
            );
        }
        let again = env.run(&["replay", "repair", target, "--json"]);
        assert_eq!(json_of(&again)["repaired"], false);
        assert_success(&env.run(&["audit", "verify"]));
        assert_success(&env.run(&["run", "plan.yaml"]));
    }
}

#[test]
fn a_torn_spine_is_repaired_by_its_task() {
    let env = Env::new();
    env.init();
    env.run_plan(SIM_PLAN);
    let spine = env.reprise_dir().join("plans/cli/tasks/greet/spine.jsonl");
    let clean = fs::read(&spine).unwrap();
    fs::write(&spine, [&clean[..], b"{\"decision\":{"].concat()).unwrap();
    let verify = env.run(&["journal", "verify", "greet"]);
    assert_eq!(code(&verify), Some(1));
    assert!(
        stdout(&verify).contains("run `reprise replay repair cli/greet`"),
        "{}",
        stdout(&verify)
    );
    let output = env.run(&["replay", "repair", "greet", "--json"]);
    assert_success(&output);
    let report = json_of(&output);
    assert_eq!(report["repaired"], false, "the journal was whole");
    assert_eq!(report["spine"]["repaired"], true);
    assert_eq!(fs::read(&spine).unwrap(), clean);
    assert_success(&env.run(&["journal", "verify", "greet"]));
    assert_success(&env.run(&["lineage", "show", "greet"]));
}

#[test]
fn a_torn_hint_names_the_target_and_repair_all_covers_every_chain() {
    let env = Env::new();
    env.init();
    env.run_plan(SIM_PLAN);
    let ledger = env.reprise_dir().join("ledger.jsonl");
    let clean = fs::read(&ledger).unwrap();
    fs::write(&ledger, [&clean[..], b"{"].concat()).unwrap();
    let status = stdout(&env.run(&["status"]));
    assert!(
        status.contains("run `reprise replay repair ledger`"),
        "{status}"
    );
    let output = env.run(&["replay", "repair", "--all", "--json"]);
    assert_success(&output);
    let repairs = json_of(&output)["repairs"].clone();
    let repaired: Vec<&str> = repairs
        .as_array()
        .unwrap()
        .iter()
        .filter(|repair| repair["repaired"] == true)
        .map(|repair| repair["target"].as_str().unwrap())
        .collect();
    assert_eq!(repaired, ["ledger"]);
    assert_eq!(fs::read(&ledger).unwrap(), clean);
}

#[test]
fn a_changed_final_newline_is_refused_by_repair_not_cut() {
    for replacement in [&b""[..], b"x", b"\0"] {
        let env = Env::new();
        env.init();
        let path = env.journal("acked", 3);
        let mut bytes = fs::read(&path).unwrap();
        assert_eq!(bytes.pop(), Some(b'\n'));
        bytes.extend_from_slice(replacement);
        fs::write(&path, &bytes).unwrap();
        let output = env.run(&["replay", "repair", "acked", "--json"]);
        assert_eq!(code(&output), Some(1), "{}", stdout(&output));
        assert_eq!(json_of(&output)["refused"], "complete_row");
        assert_eq!(fs::read(&path).unwrap(), bytes, "the file was changed");
    }
}

#[test]
fn run_ids_are_checked_before_they_become_paths() {
    let env = Env::new();
    env.init();
    // A planted run state outside the state directory naming its own plan.
    let outside = env.temp.path().join("x");
    fs::create_dir_all(&outside).unwrap();
    fs::write(env.temp.path().join("evil.yaml"), SIM_PLAN).unwrap();
    let planted = json!({"v": 1, "run_id": "../../../x", "plan": env.temp.path().join("evil.yaml"),
        "plan_name": "evil", "started_at": "2026-01-01T00:00:00.000Z",
        "finished_at": "2026-01-01T00:00:01.000Z", "ok": false, "tasks": []});
    fs::write(outside.join("state.json"), planted.to_string()).unwrap();
    let traversal = format!("../../{}", "../x");
    for bad in ["../../../x", traversal.as_str(), "R-nope"] {
        let before = env.snapshot();
        let output = env.run(&["run", "--retry-failed", bad]);
        assert_one_line_error(&output, 2, "is not `R-`");
        assert_eq!(env.snapshot(), before);
        assert_one_line_error(&env.run(&["status", bad]), 2, "is not `R-`");
    }
}

#[test]
fn symlinked_state_paths_are_refused() {
    let env = Env::new();
    env.init();
    let run_id = env.run_plan(SIM_PLAN);
    // A task directory that is a link to a copy elsewhere.
    let task_dir = env.reprise_dir().join("plans/cli/tasks/greet");
    let elsewhere = env.temp.path().join("elsewhere");
    copy_dir(&task_dir, &elsewhere);
    fs::remove_dir_all(&task_dir).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &task_dir).unwrap();
    assert_one_line_error(&env.run(&["journal", "verify", "greet"]), 2, "is a symlink");
    assert_one_line_error(&env.run(&["lineage", "show", "greet"]), 2, "is a symlink");
    // A run state that is a link.
    let state_json = env
        .reprise_dir()
        .join("runs")
        .join(&run_id)
        .join("state.json");
    let aside = env.temp.path().join("state.json");
    fs::rename(&state_json, &aside).unwrap();
    std::os::unix::fs::symlink(&aside, &state_json).unwrap();
    assert_one_line_error(&env.run(&["status", &run_id]), 2, "is a symlink");
}

#[test]
fn a_different_valid_key_is_refused_before_anything_is_written() {
    let env = Env::new();
    env.init();
    fs::write(env.project().join("plan.yaml"), SIM_PLAN).unwrap();
    let keys = env.temp.path().join("keys");
    fs::create_dir(&keys).unwrap();
    fs::set_permissions(&keys, fs::Permissions::from_mode(0o700)).unwrap();
    let other = keys.join("other.key");
    fs::write(&other, [9u8; 32]).unwrap();
    fs::set_permissions(&other, fs::Permissions::from_mode(0o600)).unwrap();
    let before = env.snapshot();
    for args in [&["run", "plan.yaml"][..], &["audit", "verify"], &["init"]] {
        let output = env.run_env(args, &[("REPRISE_AUDIT_KEY_FILE", &other)]);
        assert_one_line_error(&output, 2, "is not the key the audit chain");
        assert!(stderr(&output).contains(&other.display().to_string()));
        assert!(stderr(&output).contains("from REPRISE_AUDIT_KEY_FILE"));
    }
    assert_eq!(env.snapshot(), before);
}

#[test]
fn a_key_linked_into_a_world_writable_directory_is_refused() {
    let env = Env::new();
    let open_dir = env.temp.path().join("open");
    fs::create_dir(&open_dir).unwrap();
    fs::set_permissions(&open_dir, fs::Permissions::from_mode(0o777)).unwrap();
    let real = open_dir.join("audit.key");
    fs::write(&real, [5u8; 32]).unwrap();
    fs::set_permissions(&real, fs::Permissions::from_mode(0o600)).unwrap();
    let private = env.temp.path().join("private");
    fs::create_dir(&private).unwrap();
    fs::set_permissions(&private, fs::Permissions::from_mode(0o700)).unwrap();
    let link = private.join("audit.key");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let output = env.run_env(&["init"], &[("REPRISE_AUDIT_KEY_FILE", &link)]);
    assert_one_line_error(&output, 2, "is writable by others");
    assert!(stderr(&output).contains(&open_dir.display().to_string()));
    assert!(!env.reprise_dir().exists());
}

#[test]
fn a_state_dir_that_names_a_file_is_bad_input() {
    let env = Env::new();
    let file = env.temp.path().join("not-a-dir");
    fs::write(&file, "x").unwrap();
    let output = env.run_env(&["status"], &[("REPRISE_STATE_DIR", &file)]);
    assert_one_line_error(&output, 2, "is not a directory");
}

// A state directory an earlier reprise wrote, read by today's.
#[path = "cli/fixture_state.rs"]
mod fixture_state;
