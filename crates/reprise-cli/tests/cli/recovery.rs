//! Recovery by severity, end to end with `command` agents: transient
//! failures retry with the files as they are, corrupting ones roll back
//! first, fatal ones block the task and its dependents, and a partial
//! attempt is kept.

use super::worktrees::{count_attempt, git_env, outside_dir, task_json, write_plan};
use super::*;

fn journal_kinds(env: &Env, plan: &str, task: &str) -> Vec<Value> {
    let path = env
        .project()
        .join(".reprise/plans")
        .join(plan)
        .join("tasks")
        .join(task)
        .join("journal.jsonl");
    fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

fn diagnoses(rows: &[Value]) -> Vec<(String, String)> {
    rows.iter()
        .filter(|row| row["kind"] == "recovery.diagnosis")
        .map(|row| {
            (
                row["body"]["severity"].as_str().unwrap().to_owned(),
                row["body"]["kind"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[test]
fn a_timeout_retries_with_the_half_written_file_still_there() {
    let env = git_env();
    // The agent counts its attempts outside its worktree, in a directory the
    // plan lets it write (agents are contained).
    let counter = outside_dir(&env, "counter");
    let count = counter.join("count");
    let plan = write_plan(
        &env,
        "slow",
        &format!(
            r#"
version: 1
name: slow
defaults: {{ agent: command, max_retries: 1, timeout: 1s, retry_policy: cold }}
tasks:
  - id: write
    prompt: w
    allowed_paths: ['{counter}']
    command: [sh, -c, "{counting}; if [ $n = 1 ]; then echo half > half.txt; sleep 30; fi; test -e half.txt && echo whole > whole.txt; echo DONE"]
    gates: [ {{ name: whole, run: "test -e whole.txt" }} ]
"#,
            counting = count_attempt(&count),
            counter = counter.display()
        ),
    );
    let output = env.run(&["run", &plan, "--json"]);
    assert_success(&output);
    let rows = journal_kinds(&env, "slow", "write");
    assert_eq!(diagnoses(&rows), [("transient".into(), "timeout".into())]);
    assert!(
        !rows.iter().any(|row| row["kind"] == "checkpoint.restored"),
        "a transient failure never rolls back, even for a cold retry"
    );
}

#[test]
fn a_write_outside_the_allowed_paths_rolls_back_then_retries() {
    let env = git_env();
    // The agent counts its attempts outside its worktree, in a directory the
    // plan lets it write (agents are contained).
    let counter = outside_dir(&env, "counter");
    let count = counter.join("count");
    let plan = write_plan(
        &env,
        "fence",
        &format!(
            r#"
version: 1
name: fence
defaults: {{ agent: command, max_retries: 1, timeout: 30s }}
tasks:
  - id: stay
    prompt: s
    allowed_paths: ["src/**", '{counter}']
    command: [sh, -c, "{counting}; mkdir -p src; echo ok > src/a.py; if [ $n = 1 ]; then echo stray > stray.txt; fi; echo DONE"]
    gates: [ {{ name: never-first, run: "test $(cat '{count}') = 2" }} ]
"#,
            count = count.display(),
            counting = count_attempt(&count),
            counter = counter.display()
        ),
    );
    let output = env.run(&["run", &plan, "--json"]);
    assert_success(&output);
    let run = json_of(&output);
    let rows = journal_kinds(&env, "fence", "stay");
    assert_eq!(
        diagnoses(&rows),
        [("corrupting".into(), "write_outside_allowed_paths".into())]
    );
    let anomaly = rows
        .iter()
        .find(|row| row["kind"] == "attempt.anomaly")
        .unwrap();
    assert_eq!(anomaly["body"]["anomaly"]["paths"], json!(["stray.txt"]));
    // Rolled back before the decision, so the decision saw the rollback.
    let kinds: Vec<&str> = rows
        .iter()
        .map(|row| row["kind"].as_str().unwrap())
        .collect();
    let restored = kinds
        .iter()
        .position(|kind| *kind == "checkpoint.restored")
        .unwrap();
    let decided = kinds
        .iter()
        .position(|kind| *kind == "retry.decision")
        .unwrap();
    assert!(restored < decided, "{kinds:?}");
    let tree = PathBuf::from(task_json(&run, "stay")["cwd"].as_str().unwrap());
    assert!(!tree.join("stray.txt").exists());
}

#[test]
fn a_fatal_failure_blocks_the_task_and_its_dependents_while_others_pass() {
    let env = git_env();
    let plan = write_plan(
        &env,
        "fatal",
        r#"
version: 1
name: fatal
seats: 2
defaults: { agent: command, max_retries: 3, timeout: 30s }
tasks:
  - { id: broken, prompt: b, command: ["./nonexistent/agent-binary"] }
  - { id: after, prompt: a, depends_on: [broken], command: [sh, -c, "echo DONE"] }
  - { id: independent, prompt: i, command: [sh, -c, "echo fine > fine.txt; echo DONE"] }
"#,
    );
    let output = env.run(&["run", &plan, "--json"]);
    assert_eq!(output.status.code(), Some(1));
    let run = json_of(&output);
    let broken = task_json(&run, "broken");
    assert_eq!(broken["state"], "blocked", "{run}");
    assert_eq!(
        broken["attempts"].as_array().unwrap().len(),
        1,
        "never retried"
    );
    assert!(
        broken["reason"]
            .as_str()
            .unwrap()
            .starts_with("missing_binary")
    );
    let after = task_json(&run, "after");
    assert_eq!(after["state"], "blocked");
    assert_eq!(after["reason"], "dependency broken blocked");
    assert_eq!(task_json(&run, "independent")["state"], "passed");
    let rows = journal_kinds(&env, "fatal", "broken");
    assert_eq!(
        diagnoses(&rows),
        [("fatal".into(), "missing_binary".into())]
    );
    // The human summary lists the blocked tasks first.
    let human = env.run(&["run", &plan]);
    let out = stdout(&human);
    let summary: Vec<&str> = out
        .lines()
        .skip_while(|line| !line.contains(": FAILED ("))
        .collect();
    assert!(summary[1].starts_with("  BLOCKED broken"), "{out}");
}

#[test]
fn three_identical_judged_failures_are_a_repeated_failure() {
    let env = git_env();
    let plan = write_plan(
        &env,
        "same",
        r#"
version: 1
name: same
defaults: { agent: command, max_retries: 5, timeout: 30s }
tasks:
  - id: stuck
    prompt: s
    command: [sh, -c, "echo the same answer"]
    gates: [ { name: never, run: "echo no; false" } ]
"#,
    );
    let output = env.run(&["run", &plan, "--json"]);
    assert_eq!(output.status.code(), Some(1));
    let run = json_of(&output);
    let stuck = task_json(&run, "stuck");
    assert_eq!(stuck["state"], "blocked");
    assert_eq!(stuck["reason"], "repeated_failure");
    assert_eq!(
        stuck["attempts"].as_array().unwrap().len(),
        3,
        "not the 6 allowed"
    );
    let rows = journal_kinds(&env, "same", "stuck");
    assert_eq!(
        diagnoses(&rows),
        [
            ("judged".into(), "judged".into()),
            ("judged".into(), "judged".into()),
            ("fatal".into(), "repeated_failure".into())
        ]
    );
}

#[test]
fn a_heavy_gate_passing_keeps_the_attempt_as_partial_with_the_other_as_a_gap() {
    let env = git_env();
    let plan = write_plan(
        &env,
        "part",
        r#"
version: 1
name: part
defaults: { agent: command, max_retries: 2, timeout: 30s }
tasks:
  - id: most
    prompt: m
    accept_partial: 0.5
    command: [sh, -c, "echo core > core.txt; echo DONE"]
    gates:
      - { name: core, run: "test -e core.txt", weight: 2 }
      - { name: docs, run: "test -e docs.txt", weight: 1 }
  - { id: next, prompt: n, depends_on: [most], command: [sh, -c, "test -e core.txt && echo DONE"], gates: [ { name: sees, run: "test -e core.txt" } ] }
"#,
    );
    let output = env.run(&["run", &plan, "--json"]);
    assert_success(&output);
    let run = json_of(&output);
    let most = task_json(&run, "most");
    assert_eq!(most["state"], "partial", "{run}");
    assert_eq!(most["gaps"], json!(["docs"]));
    assert_eq!(
        most["attempts"].as_array().unwrap().len(),
        1,
        "kept, not retried"
    );
    assert!(
        most["result"]["commit"].is_string(),
        "a partial result is committed"
    );
    assert_eq!(task_json(&run, "next")["state"], "passed");
    let applied = env.run(&["apply", "--json"]);
    assert_success(&applied);
    assert_eq!(json_of(&applied)["partial"][0]["task_id"], "most");
    assert!(env.project().join("core.txt").is_file());
}

#[test]
fn a_gate_whose_tool_is_missing_could_not_run_and_judges_nothing() {
    let env = git_env();
    let plan = write_plan(
        &env,
        "tool",
        r#"
version: 1
name: tool
defaults: { agent: command, max_retries: 0, timeout: 30s }
tasks:
  - id: check
    prompt: c
    command: [sh, -c, "echo DONE"]
    gates: [ { name: lint, run: "./no-such-tool --check" } ]
"#,
    );
    let output = env.run(&["run", &plan, "--json"]);
    assert_eq!(output.status.code(), Some(1));
    let run = json_of(&output);
    let attempt = &task_json(&run, "check")["attempts"][0];
    assert_eq!(attempt["outcome"], "infra");
    assert_eq!(attempt["infra_kind"], "gate_could_not_run");
    assert_eq!(attempt["judged"], false);
    assert_eq!(attempt["gates"][0]["exit_code"], 127);
    assert_eq!(attempt["gates"][0]["could_not_run"], true);
}
