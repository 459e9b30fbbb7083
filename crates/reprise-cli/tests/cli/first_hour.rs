//! The first hour with reprise, as issue 16 tried it: a starter plan that
//! runs, checks that find a missing agent or tool before anything is
//! spent or written, a pool that caps the run's spend, and messages that
//! say what happened (and nothing worse).

use std::os::unix::process::ExitStatusExt as _;

use super::worktrees::{git_env, task_json};
use super::*;
use reprise_testkit::wait_until;

/// The first line of stderr.
fn first_err_line(output: &Output) -> String {
    stderr(output).lines().next().unwrap_or_default().to_owned()
}

fn write(env: &Env, name: &str, text: &str) {
    fs::write(env.project().join(name), text).unwrap();
}

#[test]
fn init_plan_writes_a_starter_plan_that_runs_as_it_is() {
    // A fresh git repository, with no commit yet, as a new user has.
    let env = Env::new();
    let init = Command::new("git")
        .args(["init", "-q"])
        .current_dir(env.project())
        .env("HOME", env.temp.path().join("home"))
        .status()
        .unwrap();
    assert!(init.success());
    let output = env.run(&["init", "--plan"]);
    assert_success(&output);
    let plan = fs::read_to_string(env.project().join("plan.yaml")).unwrap();
    assert!(plan.starts_with("# "), "the starter plan is commented");
    let run = env.run(&["run", "plan.yaml"]);
    assert_success(&run);
    assert!(stdout(&run).contains("[hello] passed"), "{}", stdout(&run));
    assert_eq!(
        fs::read_to_string(env.project().join("hello.txt")).unwrap(),
        "hello\n"
    );
    // A second `init --plan` leaves the existing plan alone.
    let again = env.run(&["init", "--plan"]);
    assert_one_line_error(&again, 2, "plan.yaml already exists");
    assert_eq!(
        fs::read_to_string(env.project().join("plan.yaml")).unwrap(),
        plan
    );
}

#[test]
fn the_starter_plan_also_passes_in_a_repository_with_commits() {
    let env = git_env();
    assert_success(&env.run(&["init", "--plan"]));
    let run = env.run(&["run", "plan.yaml", "--json"]);
    assert_success(&run);
    assert_eq!(json_of(&run)["tasks"][0]["state"], "passed");
}

const MISSING_AGENT: &str = r#"
version: 1
name: missing
agents: { claude: { bin: ./no-such-claude } }
tasks:
  - { id: fix, prompt: "fix it", agent: claude }
"#;

const MISSING_TOOL: &str = r#"
version: 1
name: tool
defaults: { agent: sim, sandbox: none }
tasks:
  - id: test
    prompt: "make the tests pass"
    gates:
      - { name: tests, run: "no-such-tool-h16 -q" }
"#;

#[test]
fn a_missing_agent_binary_stops_check_and_run_before_anything_is_written() {
    let env = Env::new();
    write(&env, "plan.yaml", MISSING_AGENT);
    for args in [
        &["run", "plan.yaml", "--check"][..],
        &["plan", "check", "plan.yaml"],
        &["run", "plan.yaml"],
    ] {
        let before = env.snapshot();
        let output = env.run(args);
        assert_one_line_error(&output, 2, "claude binary './no-such-claude'");
        assert_eq!(env.snapshot(), before, "{args:?} wrote something");
    }
    let output = env.run(&["run", "plan.yaml"]);
    assert_eq!(
        first_err_line(&output),
        "error: plan.yaml: 1 problem before anything ran (nothing was written): task fix: claude binary './no-such-claude' (the plan's bin) is not an executable file; fix the plan's bin key"
    );
    assert!(!env.reprise_dir().exists());
}

#[test]
fn a_gate_whose_tool_is_missing_stops_check_and_run_before_anything_is_written() {
    let env = Env::new();
    env.init();
    write(&env, "plan.yaml", MISSING_TOOL);
    for args in [&["run", "plan.yaml", "--check"][..], &["run", "plan.yaml"]] {
        let before = env.snapshot();
        let output = env.run(args);
        assert_one_line_error(&output, 2, "no-such-tool-h16");
        assert_eq!(env.snapshot(), before, "{args:?} wrote something");
    }
    let output = env.run(&["run", "plan.yaml", "--check"]);
    assert_eq!(
        first_err_line(&output),
        "error: plan.yaml: 1 problem before anything ran (nothing was run): task test: gate tests runs `no-such-tool-h16`, which is not on PATH; install it, or fix the gate's run:"
    );
}

/// A gate whose first word assigns a substitution's output names no
/// program: check and run take it as it is, and it runs and passes.
#[test]
fn a_gate_that_assigns_a_substitution_first_is_checked_and_runs() {
    let env = git_env();
    write(
        &env,
        "plan.yaml",
        r#"
version: 1
name: assigned
defaults: { agent: sim }
tasks:
  - id: head
    prompt: "p"
    gates:
      - { name: head, run: 'J=$(git rev-parse HEAD) && test -n "$J"' }
"#,
    );
    let check = env.run(&["run", "plan.yaml", "--check"]);
    assert!(check.status.success(), "{}", stderr(&check));
    let run = env.run(&["run", "plan.yaml", "--json"]);
    assert!(run.status.success(), "{}", stderr(&run));
}

#[test]
fn check_reports_what_it_found_and_writes_nothing() {
    let env = Env::new();
    let bin = env.project().join("fake-claude");
    reprise_testkit::write_executable(&bin, "#!/bin/sh\necho '9.9.9 (Claude Code)'\n").unwrap();
    write(
        &env,
        "plan.yaml",
        r#"
version: 1
name: checked
agents: { claude: { bin: ./fake-claude } }
tasks:
  - id: fix
    prompt: "fix it"
    agent: claude
    gates:
      - { name: lint, run: "grep -q x y" }
      - { name: own, run: "./lint.sh" }
      - { name: shell, run: "cd sub && make" }
"#,
    );
    let before = env.snapshot();
    let output = env.run(&["run", "plan.yaml", "--check"]);
    assert_success(&output);
    assert_eq!(env.snapshot(), before);
    let text = stdout(&output);
    assert!(
        text.starts_with("plan plan.yaml: ok (1 task, 3 gates)\n"),
        "{text}"
    );
    let fake = bin.display().to_string();
    assert!(!fake.contains("/./"));
    for line in [
        format!("  [fix] agent claude: {fake} (9.9.9 (Claude Code))"),
        "  [fix] gate own: ./lint.sh is not in the project yet (not checked: the agent may create it)".to_owned(),
        "  [fix] gate shell: not checked (the shell resolves it at run time)".to_owned(),
        "check: ok; nothing was run or written".to_owned(),
    ] {
        assert!(text.lines().any(|got| got == line), "no line {line:?} in\n{text}");
    }
    assert!(
        text.lines()
            .any(|line| line.starts_with("  [fix] gate lint: grep is /")),
        "{text}"
    );
}

#[test]
fn extra_arguments_that_clash_with_reprises_flags_are_refused() {
    let env = Env::new();
    write(
        &env,
        "plan.yaml",
        r#"
version: 1
name: clash
agents: { claude: { bin: /bin/true, args: [--verbose, --resume, abc] } }
tasks:
  - { id: fix, prompt: "fix it", agent: claude }
"#,
    );
    let before = env.snapshot();
    let output = env.run(&["run", "plan.yaml", "--check"]);
    assert_eq!(
        first_err_line(&output),
        "error: plan.yaml: 1 problem before anything ran (nothing was run): plan.yaml:4:55: agents.claude.args[1]: \"--resume\" sets --resume, which reprise controls for claude; remove it"
    );
    assert_eq!(code(&output), Some(2));
    let output = env.run(&["run", "plan.yaml"]);
    assert_eq!(code(&output), Some(2));
    assert_eq!(env.snapshot(), before);
}

#[test]
fn a_gate_that_exits_127_could_not_run_and_judges_nothing() {
    let env = Env::new();
    env.init();
    // `./missing-tool` is a relative path the agent might have created, so
    // the check lets it through; at run time the shell cannot find it.
    write(
        &env,
        "plan.yaml",
        r#"
version: 1
name: unjudged
defaults: { agent: sim, sandbox: none, max_retries: 1 }
tasks:
  - id: test
    prompt: "make the tests pass"
    gates:
      - { name: tests, run: "./missing-tool" }
"#,
    );
    let output = env.run(&["run", "plan.yaml"]);
    assert_eq!(code(&output), Some(1), "{}", stderr(&output));
    let text = stdout(&output);
    let attempt = text
        .lines()
        .find(|line| line.contains("] [test] attempt 1 (new): "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        attempt.contains("gates: tests could not run (exit 127: ")
            && attempt.contains("missing-tool"),
        "{attempt}"
    );
    assert!(
        text.lines().any(|line| line
            == "[test] failed: stopped after 2 attempts, none judged: each ended in gate_could_not_run (infrastructure, not the agent's work); fix that and run it again"),
        "{text}"
    );
    let status = json_of(&env.run(&["status", "--json"]));
    for attempt in status["tasks"][0]["attempts"].as_array().unwrap() {
        assert_eq!(attempt["judged"], false);
        assert_eq!(attempt["infra_kind"], "gate_could_not_run");
    }
}

#[test]
fn the_pool_caps_a_task_without_an_envelope() {
    let env = Env::new();
    env.init();
    write(
        &env,
        "plan.yaml",
        r#"
version: 1
name: pooled
budget_usd: "0.05"
defaults: { agent: sim, sandbox: none, max_retries: 5 }
tasks:
  - id: spend
    prompt: "spend"
    sim: [ { reply: "not yet", cost_usd: "0.03" } ]
    gates:
      - { name: answer, result_matches: "^DONE" }
"#,
    );
    let output = env.run(&["run", "plan.yaml", "--json"]);
    assert_eq!(code(&output), Some(1), "{}", stderr(&output));
    let run = json_of(&output);
    let task = task_json(&run, "spend");
    assert_eq!(task["state"], "blocked");
    let reason = task["reason"].as_str().unwrap();
    assert!(reason.starts_with("budget_exhausted"), "{reason}");
    let spent: u64 = run["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|task| task["spent_micro_usd"].as_u64().unwrap())
        .sum();
    assert!(
        spent <= 50_000,
        "the run spent {spent} micro-dollars of a 50000 pool"
    );
    assert_eq!(spent, 30_000);
}

#[test]
fn the_pool_caps_tasks_without_envelopes_running_side_by_side() {
    let env = Env::new();
    env.init();
    write(
        &env,
        "plan.yaml",
        r#"
version: 1
name: shared
seats: 3
budget_usd: "0.05"
defaults: { agent: sim, sandbox: none, max_retries: 3 }
tasks:
  - { id: a, prompt: p, sim: [ { reply: "no", cost_usd: "0.02", delay: 50ms } ], gates: [ { name: g, result_matches: "^DONE" } ] }
  - { id: b, prompt: p, sim: [ { reply: "no", cost_usd: "0.02", delay: 50ms } ], gates: [ { name: g, result_matches: "^DONE" } ] }
  - { id: c, prompt: p, sim: [ { reply: "no", cost_usd: "0.02", delay: 50ms } ], gates: [ { name: g, result_matches: "^DONE" } ] }
"#,
    );
    let output = env.run(&["run", "plan.yaml", "--json"]);
    let run = json_of(&output);
    let spent: u64 = run["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|task| task["spent_micro_usd"].as_u64().unwrap())
        .sum();
    assert!(spent <= 50_000, "the run spent {spent} of a 50000 pool");
    assert!(
        run["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|task| task["reason"]
                .as_str()
                .is_some_and(|reason| reason.starts_with("budget_exhausted"))),
        "{run}"
    );
}

#[test]
fn a_key_in_a_directory_others_can_write_gets_advice_to_move_it() {
    let env = Env::new();
    let shared = env.temp.path().join("shared");
    fs::create_dir(&shared).unwrap();
    fs::set_permissions(&shared, fs::Permissions::from_mode(0o1777)).unwrap();
    let key = shared.join("audit.key");
    let before = env.snapshot();
    let output = env.run_env(&["init"], &[("REPRISE_AUDIT_KEY_FILE", &key)]);
    assert_eq!(
        first_err_line(&output),
        format!(
            "error: directory {} of the audit key is writable by others (mode 1777); keep the key in a private directory instead, e.g. REPRISE_AUDIT_KEY_FILE=$HOME/.local/state/reprise/audit.key",
            shared.display()
        )
    );
    assert!(!stderr(&output).contains("chmod"));
    assert_eq!(code(&output), Some(2));
    assert_eq!(env.snapshot(), before, "nothing is written");
}

#[test]
fn a_missing_key_names_where_it_was_looked_for_and_how_to_go_on() {
    let env = Env::new();
    env.init();
    fs::rename(env.key_path(), env.temp.path().join("saved.key")).unwrap();
    let expected = format!(
        "error: the audit chain of {} was made with a key that is not at {} (the default under HOME): restore that key file there (or point REPRISE_AUDIT_KEY_FILE at it), or start a new state directory with --state-dir DIR",
        env.reprise_dir().display(),
        env.key_path().display()
    );
    write(
        &env,
        "plan.yaml",
        "version: 1\nname: p\ndefaults: { agent: sim, sandbox: none }\ntasks:\n  - { id: a, prompt: x }\n",
    );
    for args in [&["init"][..], &["audit", "verify"], &["run", "plan.yaml"]] {
        let before = env.snapshot();
        let output = env.run(args);
        assert_eq!(first_err_line(&output), expected, "{args:?}");
        assert_eq!(code(&output), Some(2));
        assert_eq!(env.snapshot(), before, "{args:?} wrote something");
    }
}

#[test]
fn a_wrong_key_is_called_a_wrong_key_not_tampering() {
    let env = Env::new();
    env.init();
    fs::write(env.key_path(), [9u8; 32]).unwrap();
    let output = env.run(&["audit", "verify"]);
    assert_eq!(
        first_err_line(&output),
        format!(
            "error: wrong audit key: {} (the default under HOME) is not the key the audit chain of {} was made with (its state.init row does not verify with it; nothing suggests tampering); point REPRISE_AUDIT_KEY_FILE at the key this state directory was initialised with",
            env.key_path().display(),
            env.reprise_dir().display()
        )
    );
    assert!(!stderr(&output).contains("mac_mismatch"));
    assert!(stdout(&output).is_empty());
}

#[test]
fn init_and_the_first_run_say_where_the_new_key_is_and_to_keep_it() {
    let expected = |env: &Env| {
        format!(
            "created the audit key {}: keep it, and its witness/ directory beside it (back them up together); without it this state directory's audit chain can neither be verified nor extended",
            env.key_path().display()
        )
    };
    let env = Env::new();
    let output = env.run(&["init"]);
    assert_success(&output);
    assert_eq!(
        stdout(&output).lines().nth(1),
        Some(expected(&env).as_str())
    );
    // An existing key is not announced again.
    assert!(!stdout(&env.run(&["init"])).contains("created the audit key"));

    let env = Env::new();
    write(
        &env,
        "plan.yaml",
        "version: 1\nname: p\ndefaults: { agent: sim, sandbox: none }\ntasks:\n  - { id: a, prompt: x }\n",
    );
    let output = env.run(&["run", "plan.yaml", "--json"]);
    assert_success(&output);
    assert_eq!(first_err_line(&output), expected(&env));
    let again = env.run(&["run", "plan.yaml", "--json"]);
    assert!(!stderr(&again).contains("created the audit key"));
}

#[test]
fn counts_are_singular_for_one() {
    let env = Env::new();
    env.init();
    write(
        &env,
        "plan.yaml",
        r#"
version: 1
name: one
defaults: { agent: sim, sandbox: none, max_retries: 1 }
tasks:
  - id: a
    prompt: x
    sim: [ { reply: "no" }, { reply: "DONE" } ]
    gates: [ { name: g, result_matches: "^DONE" } ]
"#,
    );
    let output = env.run(&["run", "plan.yaml"]);
    assert_success(&output);
    let text = stdout(&output);
    let first = text.lines().next().unwrap();
    assert!(first.ends_with(" (one): 1 task, 1 seat"), "{first}");
    assert!(
        text.contains(": ok (1 of 1 task passed, spent $0.00)"),
        "{text}"
    );
    let lineage = stdout(&env.run(&["lineage", "show", "a"]));
    assert!(
        lineage.starts_with("lineage of one/a: 1 decision, 1 sealed"),
        "{lineage}"
    );
}

#[test]
fn a_gate_timeout_says_it_timed_out_after_its_limit() {
    let env = Env::new();
    env.init();
    write(
        &env,
        "plan.yaml",
        r#"
version: 1
name: slow
defaults: { agent: sim, sandbox: none, max_retries: 0 }
tasks:
  - id: a
    prompt: x
    gates: [ { name: slow, run: "sleep 30", timeout: 1s } ]
"#,
    );
    let output = env.run(&["run", "plan.yaml"]);
    let text = stdout(&output);
    let attempt = text
        .lines()
        .find(|line| line.contains("] [a] attempt 1 (new): "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        attempt.contains("gates: slow timed out after 1s;"),
        "{attempt}"
    );
    assert!(!attempt.contains("could not run"), "{attempt}");
}

#[test]
fn ctrl_c_exits_130_and_says_cancelled() {
    let env = Env::new();
    env.init();
    write(
        &env,
        "plan.yaml",
        r#"
version: 1
name: stopped
defaults: { agent: command, sandbox: none, timeout: 5m }
tasks:
  - id: slow
    prompt: "take your time"
    command: "echo $$ > agent.pid; exec sleep 120"
"#,
    );
    let child = Command::new(BIN)
        .args(["run", "plan.yaml"])
        .current_dir(env.project())
        .env_clear()
        .env("HOME", env.temp.path().join("home"))
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid_file = env.project().join("agent.pid");
    assert!(
        wait_until(std::time::Duration::from_secs(30), || {
            fs::read_to_string(&pid_file).is_ok_and(|pid| !pid.trim().is_empty())
        }),
        "the agent never started"
    );
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let output = child.wait_with_output().unwrap();
    assert_eq!(
        output.status.code(),
        Some(130),
        "{:?}",
        output.status.signal()
    );
    let text = stdout(&output);
    let summary = text
        .lines()
        .find(|line| line.starts_with("run R-") && line.contains(" passed, spent "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        summary.contains(": cancelled (0 of 1 task passed"),
        "{summary}"
    );
    assert!(!text.contains("FAILED"), "{text}");
}

#[test]
fn a_misspelt_command_suggests_the_right_one_and_its_help() {
    let env = Env::new();
    let output = env.run(&["stauts"]);
    assert_eq!(
        stderr(&output),
        "error: unrecognized subcommand 'stauts' (did you mean 'status'?); run `reprise --help` for usage\n"
    );
    assert_eq!(code(&output), Some(2));
    let output = env.run(&["run", "plan.yaml", "--seatz", "2"]);
    assert_eq!(
        stderr(&output),
        "error: unexpected argument '--seatz' found (did you mean '--seats'?); run `reprise run --help` for usage\n"
    );
    let output = env.run(&["journal", "verify"]);
    assert!(
        stderr(&output).ends_with("; run `reprise journal verify --help` for usage\n"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn a_command_given_as_a_string_runs_through_the_shell() {
    let env = Env::new();
    env.init();
    write(
        &env,
        "plan.yaml",
        r#"
version: 1
name: shell
defaults: { agent: command, sandbox: none, max_retries: 0 }
tasks:
  - { id: arithmetic, prompt: x, command: "echo DONE-$((1+2)) > out.txt; cat out.txt", gates: [ { name: g, result_matches: "^DONE-3" } ] }
  - { id: exits, prompt: x, command: "echo hi; exit 3" }
"#,
    );
    let output = env.run(&["run", "plan.yaml", "--json"]);
    assert_eq!(code(&output), Some(1), "{}", stderr(&output));
    let run = json_of(&output);
    // `$((...))`, `>` and `;` only mean something to a shell.
    assert_eq!(task_json(&run, "arithmetic")["state"], "passed", "{run}");
    assert_eq!(
        fs::read_to_string(env.project().join("out.txt")).unwrap(),
        "DONE-3\n"
    );
    let exits = task_json(&run, "exits");
    assert_eq!(exits["state"], "failed", "{run}");
    assert_eq!(exits["attempts"][0]["outcome"], "judged", "{run}");
}

#[test]
fn completions_are_valid_shell_and_the_man_page_is_roff() {
    let env = Env::new();
    let output = env.run(&["completions", "bash"]);
    assert_success(&output);
    let script = env.temp.path().join("reprise.bash");
    fs::write(&script, &output.stdout).unwrap();
    let check = Command::new("bash")
        .arg("-n")
        .arg(&script)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "bash -n: {}",
        String::from_utf8_lossy(&check.stderr)
    );
    assert!(stdout(&output).contains("reprise"));
    for shell in ["zsh", "fish"] {
        let output = env.run(&["completions", shell]);
        assert_success(&output);
        assert!(stdout(&output).contains("status"), "{shell}");
    }
    let man = env.run(&["man"]);
    assert_success(&man);
    let page = stdout(&man);
    assert!(
        page.starts_with(".ie") || page.contains(".TH reprise"),
        "{page}"
    );
    assert!(page.contains("completions"));
}

#[test]
fn every_help_has_a_summary_examples_environment_and_exit_codes() {
    let env = Env::new();
    let commands: &[&[&str]] = &[
        &[],
        &["init"],
        &["run"],
        &["plan"],
        &["plan", "check"],
        &["completions"],
        &["man"],
        &["apply"],
        &["diff"],
        &["clean"],
        &["rehearse"],
        &["rehearse", "serve"],
        &["budget"],
        &["budget", "check"],
        &["status"],
        &["task"],
        &["task", "list"],
        &["task", "show"],
        &["lineage"],
        &["lineage", "show"],
        &["journal"],
        &["journal", "show"],
        &["journal", "verify"],
        &["audit"],
        &["audit", "verify"],
        &["replay"],
        &["replay", "repair"],
        &["workspace"],
        &["workspace", "hash"],
        &["checkpoint"],
        &["checkpoint", "list"],
        &["checkpoint", "restore"],
        &["fleet"],
        &["fleet", "init"],
        &["fleet", "status"],
    ];
    for command in commands {
        let mut args = command.to_vec();
        args.push("--help");
        let output = env.run(&args);
        assert_success(&output);
        let help = stdout(&output);
        let summary = help.lines().next().unwrap_or_default();
        assert!(!summary.trim().is_empty(), "{command:?} has no summary");
        for needle in [
            "Examples:\n  reprise",
            "Environment:",
            "REPRISE_STATE_DIR",
            "Exit codes:",
            "130",
        ] {
            assert!(
                help.contains(needle),
                "{command:?} --help lacks {needle:?}:\n{help}"
            );
        }
        // Every positional argument says what it is.
        let mut in_arguments = false;
        for line in help.lines() {
            if line == "Arguments:" {
                in_arguments = true;
                continue;
            }
            if in_arguments {
                if line.is_empty() {
                    break;
                }
                let described = line
                    .trim()
                    .split_once("  ")
                    .is_some_and(|(_, text)| !text.trim().is_empty());
                assert!(
                    described,
                    "{command:?}: positional without a description: {line:?}"
                );
            }
        }
    }
}

#[test]
fn agent_settings_reach_the_cli_as_its_own_flags_and_environment() {
    let env = Env::new();
    env.init();
    // A stand-in for Claude Code that keeps what it was given.
    let fake = env.project().join("fake-claude");
    reprise_testkit::write_executable(&fake, r#"#!/bin/sh
if [ "$1" = "--version" ]; then echo "2.1.197 (Claude Code)"; exit 0; fi
printf '%s\n' "$@" > args.txt
printf '%s\n' "$H16_SETTING" > env.txt
sid=""; prev=""
for arg in "$@"; do [ "$prev" = "--session-id" ] && sid="$arg"; prev="$arg"; done
printf '{"type":"result","subtype":"success","is_error":false,"result":"DONE","session_id":"%s","total_cost_usd":0}\n' "$sid"
"#).unwrap();
    write(
        &env,
        "plan.yaml",
        r#"
version: 1
name: settings
agents:
  claude: { bin: ./fake-claude, model: sonnet, args: [--verbose], env: { H16_SETTING: from-the-plan } }
defaults: { agent: claude, sandbox: none, containment: off, max_retries: 0 }
tasks:
  - id: a
    prompt: "the prompt"
    # The agent's variables are the agent's: its gates never see them.
    gates: [ { name: clean, run: "test -z \"$H16_SETTING\"" } ]
"#,
    );
    let output = env.run(&["run", "plan.yaml", "--json"]);
    assert_success(&output);
    let args: Vec<String> = fs::read_to_string(env.project().join("args.txt"))
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    let separator = args.iter().position(|arg| arg == "--").unwrap();
    assert_eq!(
        &args[separator - 3..],
        ["--model", "sonnet", "--verbose", "--", "the prompt"],
        "{args:?}"
    );
    assert_eq!(
        args[0], "-p",
        "reprise's own arguments come first: {args:?}"
    );
    assert_eq!(
        fs::read_to_string(env.project().join("env.txt")).unwrap(),
        "from-the-plan\n"
    );
}

/// A plan of `tasks` one-line sim tasks, each of ten YAML nodes (a mapping,
/// two keys with their values, and a key with a list of one mapping of one
/// key and value).
fn many_tasks_plan(tasks: usize) -> String {
    let mut plan = String::from("version: 1\nname: many\ndefaults: { agent: sim }\ntasks:\n");
    for index in 0..tasks {
        plan.push_str(&format!(
            "  - {{ id: t{index}, prompt: p, sim: [{{ reply: a }}] }}\n"
        ));
    }
    plan
}

#[test]
fn a_plan_of_25000_tasks_is_checked_and_one_over_the_node_limit_is_refused_plainly() {
    let env = Env::new();
    write(&env, "plan.yaml", &many_tasks_plan(25_000));
    let output = env.run(&["run", "plan.yaml", "--check"]);
    assert_success(&output);
    assert!(
        stdout(&output).starts_with("plan plan.yaml: ok (25000 tasks"),
        "{}",
        stdout(&output).lines().next().unwrap_or_default()
    );

    // 2,000,000 nodes is the limit: 200,001 tasks of ten nodes are over it.
    write(&env, "plan.yaml", &many_tasks_plan(200_001));
    let before = env.snapshot();
    let output = env.run(&["run", "plan.yaml", "--check"]);
    assert_one_line_error(
        &output,
        2,
        "the plan has more than 2,000,000 yaml nodes (about 100,000 tasks), the most reprise reads; split it into smaller plans",
    );
    assert!(first_err_line(&output).starts_with("error: plan.yaml:"));
    assert_eq!(env.snapshot(), before);
}

#[test]
fn four_claude_tasks_starting_together_ask_the_binary_its_version_once() {
    let env = Env::new();
    env.init();
    let probes = env.project().join("probes.txt");
    // Each probe notes itself, then waits (bounded) for a second probe to
    // show up, so probes that overlap are all counted, whatever the timing.
    let fake = env.project().join("fake-claude");
    reprise_testkit::write_executable(&fake, &format!(
            r#"#!/bin/sh
if [ "$1" = "--version" ]; then
  echo probe >> '{probes}'
  i=0
  while [ "$(wc -l < '{probes}')" -lt 2 ] && [ $i -lt 20 ]; do sleep 0.1; i=$((i + 1)); done
  echo "2.1.197 (Claude Code)"; exit 0
fi
sid=""; prev=""
for arg in "$@"; do [ "$prev" = "--session-id" ] && sid="$arg"; prev="$arg"; done
printf '{{"type":"result","subtype":"success","is_error":false,"result":"DONE","session_id":"%s","total_cost_usd":0}}\n' "$sid"
"#,
            probes = probes.display()
        )).unwrap();
    write(
        &env,
        "plan.yaml",
        r#"
version: 1
name: probes
seats: 4
agents: { claude: { bin: ./fake-claude } }
defaults: { agent: claude, sandbox: none, containment: off, max_retries: 0 }
tasks:
  - { id: a, prompt: p }
  - { id: b, prompt: p }
  - { id: c, prompt: p }
  - { id: d, prompt: p }
"#,
    );
    let output = env.run(&["run", "plan.yaml", "--json"]);
    assert_success(&output);
    let run = json_of(&output);
    for task in run["tasks"].as_array().unwrap() {
        assert_eq!(task["state"], "passed", "{task}");
    }
    assert_eq!(fs::read_to_string(&probes).unwrap(), "probe\n");
}
