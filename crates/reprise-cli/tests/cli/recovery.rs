//! Recovery by severity, end to end with `command` agents: transient
//! failures retry with the files as they are, corrupting ones roll back
//! first, fatal ones block the task and its dependents, and a partial
//! attempt is kept.

use super::worktrees::{count_attempt, git_env, outside_dir, task_json, write_plan};
use super::*;
use reprise_testkit::wait_until;

/// Waits (a minute at most) until `task`'s first attempt has started.
pub(crate) fn wait_for_an_attempt(env: &Env, plan: &str, task: &str) {
    wait_for_journal_text(env, plan, task, "attempt.started");
}

/// Waits (a minute at most) until `task`'s journal holds `needle`.
pub(crate) fn wait_for_journal_text(env: &Env, plan: &str, task: &str, needle: &str) {
    let journal = env
        .project()
        .join(format!(".reprise/plans/{plan}/tasks/{task}/journal.jsonl"));
    assert!(
        wait_until(std::time::Duration::from_secs(60), || {
            fs::read_to_string(&journal).is_ok_and(|text| text.contains(needle))
        }),
        "the journal of {task} never held {needle}"
    );
}

pub(crate) fn journal_kinds(env: &Env, plan: &str, task: &str) -> Vec<Value> {
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

fn rows_of<'a>(rows: &'a [Value], kind: &str) -> Vec<&'a Value> {
    rows.iter().filter(|row| row["kind"] == kind).collect()
}

fn anomaly_kinds(rows: &[Value]) -> Vec<String> {
    rows_of(rows, "attempt.anomaly")
        .iter()
        .map(|row| row["body"]["anomaly"]["kind"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn output_past_max_output_bytes_stops_the_agent_and_rolls_back_before_the_retry() {
    let env = git_env();
    let counter = outside_dir(&env, "counter");
    let count = counter.join("count");
    let plan = write_plan(
        &env,
        "flood",
        &format!(
            r#"
version: 1
name: flood
defaults: {{ agent: command, max_retries: 1, timeout: 60s, retry_policy: cold }}
tasks:
  - id: chatty
    prompt: c
    max_output_bytes: 100000
    allowed_paths: ['{counter}']
    command: [sh, -c, "{counting}; if [ $n = 1 ]; then echo junk > junk.txt; yes flood; fi; test -e junk.txt && echo leftover > seen.txt; echo ok > out.txt; echo DONE"]
    gates: [ {{ name: out, run: "test -e out.txt" }} ]
"#,
            counting = count_attempt(&count),
            counter = counter.display()
        ),
    );
    let output = env.run(&["run", &plan, "--json"]);
    assert_success(&output);
    let run = json_of(&output);
    let rows = journal_kinds(&env, "flood", "chatty");
    let finished = rows_of(&rows, "attempt.finished");
    assert_eq!(finished[0]["body"]["infra_kind"], "output_limit");
    assert_eq!(anomaly_kinds(&rows), ["output_limit"]);
    let anomaly = rows_of(&rows, "attempt.anomaly")[0];
    assert_eq!(anomaly["body"]["anomaly"]["limit_bytes"], 100000);
    assert_eq!(
        diagnoses(&rows),
        [("corrupting".into(), "output_limit".into())]
    );
    // The flood's file was rolled back before the retry ran.
    let tree = PathBuf::from(task_json(&run, "chatty")["cwd"].as_str().unwrap());
    assert!(!tree.join("junk.txt").exists());
    assert!(!tree.join("seen.txt").exists());
    assert_eq!(rows_of(&rows, "checkpoint.restored").len(), 1);
}

#[test]
fn an_agent_silent_past_idle_timeout_is_stopped_and_retried_with_its_files() {
    let env = git_env();
    let counter = outside_dir(&env, "counter");
    let count = counter.join("count");
    let plan = write_plan(
        &env,
        "quiet",
        &format!(
            r#"
version: 1
name: quiet
defaults: {{ agent: command, max_retries: 1, timeout: 60s, retry_policy: cold }}
tasks:
  - id: hush
    prompt: h
    idle_timeout: 500ms
    allowed_paths: ['{counter}']
    command: [sh, -c, "{counting}; if [ $n = 1 ]; then echo half > half.txt; echo thinking; exec sleep 30; fi; test -e half.txt && echo whole > whole.txt; echo DONE"]
    gates: [ {{ name: whole, run: "test -e whole.txt" }} ]
"#,
            counting = count_attempt(&count),
            counter = counter.display()
        ),
    );
    let output = env.run(&["run", &plan, "--json"]);
    assert_success(&output);
    let rows = journal_kinds(&env, "quiet", "hush");
    assert_eq!(
        rows_of(&rows, "attempt.finished")[0]["body"]["infra_kind"],
        "idle_timeout"
    );
    assert_eq!(anomaly_kinds(&rows), ["idle_timeout"]);
    assert_eq!(
        rows_of(&rows, "attempt.anomaly")[0]["body"]["anomaly"]["idle_ms"],
        500
    );
    // Idle is transient: the half-written file is still there for the retry.
    assert_eq!(
        diagnoses(&rows),
        [("transient".into(), "idle_timeout".into())]
    );
    assert!(rows_of(&rows, "checkpoint.restored").is_empty());
}

#[test]
fn an_agent_silent_past_park_when_idle_parks_until_approval_and_wakes_on_approve() {
    let env = git_env();
    let plan = write_plan(
        &env,
        "ask",
        r#"
version: 1
name: ask
defaults: { agent: sim, max_retries: 1, timeout: 60s, retry_policy: warm }
tasks:
  - id: deploy
    prompt: d
    park_when_idle: 200ms
    idle_timeout: 30s
    sim:
      - { reply: "May I run make deploy?", delay: 30s }
      - { reply: "DONE", write: { done.txt: "yes\n" } }
    gates: [ { name: done, run: "test -e done.txt" } ]
"#,
    );
    // The agent waits on a person: the task is parked until approval (not
    // retried, not left hanging), and the run ends saying so.
    let output = env.run(&["run", &plan, "--json"]);
    assert_eq!(code(&output), Some(3), "{}", stdout(&output));
    let rows = journal_kinds(&env, "ask", "deploy");
    let suspend = rows_of(&rows, "task.suspend")[0].clone();
    assert_eq!(suspend["body"]["cause"], "permission");
    assert_eq!(suspend["body"]["wake"], json!({"on": "approval"}));
    // The question is kept beside the chain; the row holds its hash, and
    // list-suspended reads the text from the kept file.
    assert_eq!(suspend["body"]["question"], Value::Null);
    let hash = suspend["body"]["question_hash"].as_str().unwrap();
    let journal_text = fs::read_to_string(
        env.project()
            .join(".reprise/plans/ask/tasks/deploy/journal.jsonl"),
    )
    .unwrap();
    let audit_text = fs::read_to_string(env.reprise_dir().join("audit/audit.jsonl")).unwrap();
    assert!(!journal_text.contains("make deploy") && !audit_text.contains("make deploy"));
    let run_id = suspend["body"]["run_id"].as_str().unwrap();
    let kept = env
        .reprise_dir()
        .join(format!("runs/{run_id}/private/deploy/{hash}.txt"));
    assert_eq!(fs::read_to_string(&kept).unwrap(), "May I run make deploy?");
    assert_eq!(
        fs::metadata(&kept).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let listed = json_of(&env.run(&["task", "list-suspended", "--json"]));
    assert_eq!(
        listed["suspended"][0]["question"], "May I run make deploy?",
        "{listed}"
    );
    assert!(diagnoses(&rows).is_empty(), "a park is not a failure");
    // No resume without the approval; nothing is written by the refusal.
    let journal = env
        .project()
        .join(".reprise/plans/ask/tasks/deploy/journal.jsonl");
    let before = fs::read(&journal).unwrap();
    assert_one_line_error(&env.run(&["task", "resume", "deploy"]), 2, "approv");
    assert_eq!(fs::read(&journal).unwrap(), before);
    assert_success(&env.run(&["approve", "deploy", "--note", "yes, deploy to staging"]));
    let resumed = env.run(&["task", "resume", "deploy", "--json"]);
    assert_success(&resumed);
    assert_eq!(json_of(&resumed)["tasks"][0]["state"], "passed");
    let rows = journal_kinds(&env, "ask", "deploy");
    let resume = rows_of(&rows, "task.resume")[0].clone();
    assert_eq!(resume["body"]["mode"], "warm", "{resume}");
    assert!(resume["body"]["approval_digest"].is_string(), "{resume}");
    // The session heard the approval's note.
    let session = json_of(&resumed)["tasks"][0]["attempts"][1]["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let transcript =
        fs::read_to_string(env.reprise_dir().join(format!("sim/{session}.jsonl"))).unwrap();
    assert!(
        transcript.contains("yes, deploy to staging"),
        "{transcript}"
    );
    let verified = env.run(&["audit", "verify-suspension", "deploy", "--json"]);
    assert_success(&verified);
    assert_eq!(
        json_of(&verified)["status"],
        "verified",
        "{}",
        stdout(&verified)
    );
    // The park is settled: a second resume, or a second approval, is refused.
    let settled = fs::read(&journal).unwrap();
    assert_one_line_error(&env.run(&["task", "resume", "deploy"]), 2, "settled");
    assert_eq!(fs::read(&journal).unwrap(), settled);
}

#[test]
fn a_usage_limit_with_its_reset_parks_until_then_and_the_run_wakes_it() {
    let env = git_env();
    let plan = write_plan(
        &env,
        "quota",
        r#"
version: 1
name: quota
defaults: { agent: sim, max_retries: 1, timeout: 60s, retry_policy: warm }
tasks:
  - id: busy
    prompt: b
    sim:
      - { reply: "usage limit reached; resets in 2 seconds", exit_code: 1 }
      - { reply: "DONE", write: { done.txt: "yes\n" } }
    gates: [ { name: done, run: "test -e done.txt" } ]
"#,
    );
    // Parked until the reset (not retried in a loop), woken by the live run
    // at that time, and passed: one run, exit 0.
    let output = env.run(&["run", &plan, "--json"]);
    assert_success(&output);
    let rows = journal_kinds(&env, "quota", "busy");
    let suspend = rows_of(&rows, "task.suspend")[0].clone();
    assert_eq!(suspend["body"]["cause"], "usage_limit");
    assert_eq!(suspend["body"]["wake"]["on"], "time");
    let resume = rows_of(&rows, "task.resume")[0].clone();
    assert!(
        resume["at"].as_str().unwrap()[..19]
            >= suspend["body"]["wake"]["at"].as_str().unwrap()[..19],
        "woken before its reset: {resume}"
    );
    assert!(diagnoses(&rows).is_empty(), "a park is not a failure");
    assert!(rows_of(&rows, "recovery.back_off").is_empty());
    assert_success(&env.run(&["audit", "verify-suspension", "busy"]));
}

/// A reset given as a wait ("resets in 2 seconds") counts from when the
/// agent said it: the park's wake is never before that, to the millisecond
/// (a wake read from the clock's whole second was up to a second early).
#[test]
fn a_relative_reset_never_wakes_before_the_time_the_agent_stated() {
    let env = git_env();
    let said = outside_dir(&env, "said");
    let plan = write_plan(
        &env,
        "wait",
        &format!(
            r#"
version: 1
name: wait
defaults: {{ agent: command, max_retries: 1, timeout: 60s, retry_policy: warm }}
tasks:
  - id: busy
    prompt: b
    allowed_paths: ['{said}']
    command: [sh, -c, "if [ -e '{said}/first' ]; then echo DONE; exit 0; fi; date +%s.%N > '{said}/first'; echo 'usage limit reached; resets in 2 seconds'; exit 1"]
"#,
            said = said.display()
        ),
    );
    let output = env.run(&["run", &plan, "--json"]);
    assert_success(&output);
    let stated: f64 = fs::read_to_string(said.join("first"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let stated = stated + 2.0;
    let rows = journal_kinds(&env, "wait", "busy");
    let suspend = rows_of(&rows, "task.suspend")[0].clone();
    let wake: jiff::Timestamp = suspend["body"]["wake"]["at"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let resume = rows_of(&rows, "task.resume")[0].clone();
    let resumed: jiff::Timestamp = resume["at"].as_str().unwrap().parse().unwrap();
    let seconds = |stamp: jiff::Timestamp| stamp.as_millisecond() as f64 / 1000.0;
    assert!(seconds(wake) >= stated, "wake {wake} before {stated}");
    assert!(
        seconds(resumed) >= stated,
        "resumed {resumed} before {stated}"
    );
}

#[test]
fn a_needs_context_reply_is_retried_with_the_plan_s_answer_and_a_longer_timeout() {
    let env = git_env();
    let counter = outside_dir(&env, "counter");
    let count = counter.join("count");
    let prompts = counter.join("prompt");
    let plan = write_plan(
        &env,
        "ask",
        &format!(
            r#"
version: 1
name: ask
defaults: {{ agent: command, max_retries: 1, timeout: 30s, retry_policy: cold }}
tasks:
  - id: keys
    prompt: Write the key parser.
    allowed_paths: ['{counter}']
    on_needs_context: {{ timeout: 2m, prompt: "Keys look like abc-123." }}
    command: [sh, -c, "{counting}; cat > '{prompts}'.$n; if [ $n = 1 ]; then echo 'I looked around.'; echo 'NEEDS_CONTEXT: the format of an API key'; exit 0; fi; echo ok > parser.txt; echo DONE"]
    gates: [ {{ name: parser, run: "test -e parser.txt" }} ]
"#,
            counting = count_attempt(&count),
            counter = counter.display(),
            prompts = prompts.display()
        ),
    );
    let output = env.run(&["run", &plan, "--json"]);
    assert_success(&output);
    let rows = journal_kinds(&env, "ask", "keys");
    let first = rows_of(&rows, "attempt.finished")[0];
    assert_eq!(first["body"]["outcome"], "needs_context");
    assert_eq!(first["body"]["judged"], false);
    assert_eq!(first["body"]["gates"], json!([]), "no gate judged it");
    assert_eq!(
        diagnoses(&rows),
        [("judged".into(), "needs_context".into())]
    );
    let decision = rows_of(&rows, "retry.decision")[0];
    // The request is kept beside the chain; the decision binds its hash.
    let hash = decision["body"]["modification"]["needs_context_hash"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        decision["body"]["modification"],
        json!({"needs_context_hash": hash, "timeout_ms": 120000, "prompt_added": true, "model": null})
    );
    for chain in [
        ".reprise/plans/ask/tasks/keys/journal.jsonl",
        ".reprise/plans/ask/tasks/keys/spine.jsonl",
        ".reprise/audit/audit.jsonl",
    ] {
        let text = fs::read_to_string(env.project().join(chain)).unwrap();
        assert!(
            !text.contains("format of an API key"),
            "{chain} holds the agent's text"
        );
    }
    let run_id = decision["body"]["run_id"].as_str().unwrap();
    assert_eq!(
        fs::read_to_string(
            env.reprise_dir()
                .join(format!("runs/{run_id}/private/keys/{hash}.txt"))
        )
        .unwrap(),
        "the format of an API key"
    );
    let retry_prompt = fs::read_to_string(counter.join("prompt.2")).unwrap();
    assert!(
        retry_prompt.contains("Write the key parser."),
        "{retry_prompt}"
    );
    assert!(
        retry_prompt.contains("the format of an API key"),
        "{retry_prompt}"
    );
    assert!(
        retry_prompt.contains("Keys look like abc-123."),
        "{retry_prompt}"
    );
}

#[test]
fn rollback_always_tells_a_warm_session_its_files_were_restored() {
    let env = git_env();
    let plan = write_plan(
        &env,
        "always",
        r#"
version: 1
name: always
tasks:
  - id: fix
    prompt: make a.txt good
    agent: sim
    retry_policy: warm
    max_retries: 1
    rollback_on_retry: always
    sim:
      - { reply: "done", write: { a.txt: bad, extra.txt: stray } }
      - { reply: "done again", write: { a.txt: good } }
    gates: [ { name: good, run: "test \"$(cat a.txt)\" = good && test ! -e extra.txt" } ]
"#,
    );
    let output = env.run(&["run", &plan, "--json"]);
    assert_success(&output);
    let rows = journal_kinds(&env, "always", "fix");
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
    assert!(
        restored < decided,
        "rolled back before the decision: {kinds:?}"
    );
    // The decision compared the tree with the checkpoint it restored: warm stands.
    let decision = &rows[decided]["body"]["decision"];
    assert_eq!(decision["retry_mode"], "warm", "{decision}");
    assert_eq!(decision["workspace_match"], true);
    // And the resumed session was told its changes are gone.
    let store = env.reprise_dir().join("sim");
    let turns: Vec<Value> = fs::read_dir(&store)
        .unwrap()
        .flat_map(|entry| {
            fs::read_to_string(entry.unwrap().path())
                .unwrap()
                .lines()
                .map(|line| serde_json::from_str::<Value>(line).unwrap())
                .collect::<Vec<_>>()
        })
        .collect();
    let second = turns
        .iter()
        .find(|turn| turn["turn"] == 2)
        .expect("a resumed turn");
    let instruction = second["prompt"].as_str().unwrap();
    assert!(
        instruction.contains("The files have been restored to how they were before that attempt"),
        "{instruction}"
    );
    assert!(
        !instruction.contains("Fix the work in place"),
        "{instruction}"
    );
}

/// A stand-in `claude` that prints a recorded result object: `first` on its
/// first call, `then` on every later one (counted in `count`), and keeps
/// each call's arguments in `args.<n>`.
fn fake_claude(env: &Env, dir: &Path, first: &str, then: &str) -> PathBuf {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../reprise-agents/testdata/claude");
    let first_file = dir.join("first.json");
    let then_file = dir.join("then.json");
    let fixture = |name: &str| fs::read_to_string(fixtures.join(name)).unwrap();
    fs::write(&first_file, fixture(first)).unwrap();
    fs::write(&then_file, fixture(then)).unwrap();
    let _ = env;
    let script = dir.join("claude");
    let count = dir.join("count");
    reprise_testkit::write_executable(&script, &format!(
            "#!/bin/sh\ncase \"$1\" in --version) echo '2.0.0 (Claude Code)'; exit 0;; esac\n{counting}\nprintf '%s\\n' \"$@\" > '{dir}/args.'$n\nif [ $n = 1 ]; then cat '{first}'; else cat '{then}'; fi\n",
            counting = count_attempt(&count),
            dir = dir.display(),
            first = first_file.display(),
            then = then_file.display()
        )).unwrap();
    script
}

#[test]
fn an_auth_failure_blocks_the_task_and_its_dependent_while_an_independent_task_passes() {
    let env = git_env();
    let fake = outside_dir(&env, "fake");
    let claude = fake_claude(&env, &fake, "http_401.json", "http_401.json");
    let plan = write_plan(
        &env,
        "auth",
        &format!(
            r#"
version: 1
name: auth
seats: 2
agents: {{ claude: {{ bin: '{claude}' }} }}
defaults: {{ max_retries: 3, timeout: 30s }}
tasks:
  - id: login
    prompt: l
    agent: claude
    allowed_paths: ['{fake}']
  - id: after
    prompt: a
    agent: command
    command: [sh, -c, "echo DONE"]
    depends_on: [login]
  - id: other
    prompt: o
    agent: command
    command: [sh, -c, "echo DONE"]
"#,
            claude = claude.display(),
            fake = fake.display()
        ),
    );
    let output = env.run(&["run", &plan, "--json"]);
    assert_eq!(code(&output), Some(1), "{output:?}");
    let run = json_of(&output);
    let login = task_json(&run, "login");
    assert_eq!(login["state"], "blocked", "{login}");
    assert!(
        login["reason"].as_str().unwrap().starts_with("auth_failed"),
        "{login}"
    );
    assert_eq!(task_json(&run, "after")["state"], "blocked");
    assert_eq!(task_json(&run, "other")["state"], "passed");
    // One attempt: an auth failure is never retried.
    assert_eq!(fs::read_to_string(fake.join("count")).unwrap().trim(), "1");
    let rows = journal_kinds(&env, "auth", "login");
    assert_eq!(diagnoses(&rows), [("fatal".into(), "auth_failed".into())]);
}

#[test]
fn a_rate_limit_s_retry_after_is_waited_for_and_recorded() {
    let env = git_env();
    let fake = outside_dir(&env, "fake");
    let claude = fake_claude(&env, &fake, "http_429.json", "success.json");
    // The recorded 429 with the provider's word on when to come back.
    let first = fake.join("first.json");
    let text = fs::read_to_string(&first)
        .unwrap()
        .replace("scripted 429", "scripted 429, retry-after: 1");
    fs::write(&first, text).unwrap();
    let plan = write_plan(
        &env,
        "limit",
        &format!(
            r#"
version: 1
name: limit
agents: {{ claude: {{ bin: '{claude}' }} }}
tasks:
  - id: busy
    prompt: b
    agent: claude
    max_retries: 1
    retry_policy: cold
    allowed_paths: ['{fake}']
"#,
            claude = claude.display(),
            fake = fake.display()
        ),
    );
    let output = env.run(&["run", &plan, "--json"]);
    assert_success(&output);
    let rows = journal_kinds(&env, "limit", "busy");
    assert_eq!(
        diagnoses(&rows),
        [("transient".into(), "rate_limited".into())]
    );
    let waited = rows_of(&rows, "recovery.back_off");
    assert_eq!(waited.len(), 1);
    assert_eq!(waited[0]["body"]["wait_ms"], 1000);
    assert_eq!(waited[0]["body"]["source"], "retry_after");
}

/// Reads the journal the engine wrote back through the core's lifecycle,
/// cut after every row as a crash would cut it.
fn replayed(rows: &[Value], upto: usize) -> reprise_core::lifecycle::TaskState {
    reprise_core::lifecycle::replay(
        rows[..upto]
            .iter()
            .map(|row| (row["kind"].as_str().unwrap(), &row["body"])),
    )
}

#[test]
fn a_journal_cut_anywhere_reads_back_as_where_the_task_was() {
    use reprise_core::lifecycle::{TaskState, Terminal};
    let env = git_env();
    let counter = outside_dir(&env, "counter");
    let count = counter.join("count");
    let plan = write_plan(
        &env,
        "cut",
        &format!(
            r#"
version: 1
name: cut
defaults: {{ agent: command, max_retries: 2, timeout: 30s, retry_policy: cold }}
tasks:
  - id: t
    prompt: p
    allowed_paths: ['{counter}']
    command: [sh, -c, "{counting}; echo $n > n.txt; echo DONE"]
    gates: [ {{ name: third, run: "test $(cat n.txt) = 3" }} ]
"#,
            counting = count_attempt(&count),
            counter = counter.display()
        ),
    );
    assert_success(&env.run(&["run", &plan, "--json"]));
    let rows = journal_kinds(&env, "cut", "t");
    assert_eq!(
        replayed(&rows, rows.len()),
        TaskState::Finished(Terminal::Passed)
    );
    let mut running = Vec::new();
    for upto in 1..=rows.len() {
        let state = replayed(&rows, upto);
        assert_ne!(state, TaskState::Queued, "after {}", rows[upto - 1]["kind"]);
        match rows[upto - 1]["kind"].as_str().unwrap() {
            // A crash while the agent ran reads back as that attempt running.
            "attempt.started" => running.push(state),
            "task.checkpoint" => assert!(matches!(state, TaskState::Judging { .. }), "{state:?}"),
            "recovery.diagnosis" => assert!(
                matches!(
                    state,
                    TaskState::Retrying { .. } | TaskState::RollingBack { .. }
                ),
                "{state:?}"
            ),
            _ => {}
        }
    }
    assert_eq!(
        running,
        (1..=3)
            .map(|attempt| TaskState::Running {
                attempt,
                resumed: false
            })
            .collect::<Vec<_>>()
    );
}

#[test]
fn a_needs_context_retry_can_ask_the_cli_for_another_model() {
    let env = git_env();
    let fake = outside_dir(&env, "fake");
    let claude = fake_claude(&env, &fake, "success.json", "success.json");
    let first = fake.join("first.json");
    let text = fs::read_to_string(&first).unwrap().replace(
        "DONE: created greeting.txt",
        "Looked.\\nNEEDS_CONTEXT: the schema",
    );
    fs::write(&first, text).unwrap();
    let plan = write_plan(
        &env,
        "model",
        &format!(
            r#"
version: 1
name: model
agents: {{ claude: {{ bin: '{claude}', model: sonnet }} }}
tasks:
  - id: schema
    prompt: s
    agent: claude
    max_retries: 1
    retry_policy: cold
    allowed_paths: ['{fake}']
    on_needs_context: {{ model: opus }}
"#,
            claude = claude.display(),
            fake = fake.display()
        ),
    );
    let output = env.run(&["run", &plan, "--json"]);
    assert_success(&output);
    let args = |n: u32| -> Vec<String> {
        fs::read_to_string(fake.join(format!("args.{n}")))
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect()
    };
    let model_of = |args: &[String]| {
        let at = args
            .iter()
            .position(|arg| arg == "--model")
            .expect("--model");
        args[at + 1].clone()
    };
    assert_eq!(model_of(&args(1)), "sonnet");
    assert_eq!(model_of(&args(2)), "opus");
    let rows = journal_kinds(&env, "model", "schema");
    let decision = rows_of(&rows, "retry.decision")[0];
    assert_eq!(decision["body"]["modification"]["model"], "opus");
    // The request itself is kept beside the chain, by its hash.
    assert_eq!(
        decision["body"]["modification"]["needs_context_hash"],
        json!(reprise_store::replies::agent_text_hash("the schema"))
    );
}

#[test]
fn status_tells_a_live_run_from_an_interrupted_one_and_where_its_task_was() {
    let env = git_env();
    let plan = write_plan(
        &env,
        "long",
        r#"
version: 1
name: long
tasks:
  - id: slow
    prompt: s
    agent: command
    timeout: 5m
    command: [sh, -c, "sleep 300; echo DONE"]
"#,
    );
    let mut child = env.spawn(&["run", &plan], std::process::Stdio::null());
    wait_for_an_attempt(&env, "long", "slow");
    let live = json_of(&env.run(&["status", "--json"]));
    assert_eq!(
        live["liveness"],
        json!({"state": "live", "pid": child.id()}),
        "{live}"
    );
    assert_eq!(live["ok"], Value::Null, "no verdict before the run ends");
    assert!(live["attempt_elapsed_ms"]["slow"].is_u64(), "{live}");
    let listed = json_of(&env.run(&["runs", "--json"]));
    assert_eq!(listed["runs"][0]["state"], "live", "{listed}");
    let shown = String::from_utf8_lossy(&env.run(&["status"]).stdout).into_owned();
    assert!(
        shown
            .lines()
            .next()
            .unwrap()
            .ends_with(&format!("running (live, pid {})", child.id())),
        "{shown}"
    );
    assert_eq!(
        live["lifecycle"]["slow"],
        json!({"running": {"attempt": 1, "resumed": false}})
    );
    // Killed outright: nothing of reprise's gets to clean up.
    child.kill().unwrap();
    child.wait().unwrap();
    let after = env.run(&["status"]);
    let text = String::from_utf8_lossy(&after.stdout);
    assert!(
        text.lines().next().unwrap().contains("INTERRUPTED"),
        "{text}"
    );
    assert!(
        text.contains("journal: attempt 1's agent running when the run stopped"),
        "{text}"
    );
    let stopped = json_of(&env.run(&["status", "--json"]));
    assert_eq!(stopped["liveness"], json!({"state": "interrupted"}));
    assert_eq!(stopped["ok"], Value::Null);
    // A finished run beside it: `runs` lists both, oldest first.
    let quick = write_plan(
        &env,
        "quick",
        "version: 1\nname: quick\ntasks:\n  - id: q\n    prompt: q\n    agent: command\n    command: [sh, -c, \"echo DONE\"]\n",
    );
    assert_success(&env.run(&["run", &quick]));
    let listed = json_of(&env.run(&["runs", "--json"]));
    let runs = listed["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "{listed}");
    assert_eq!(
        (
            runs[0]["plan"].clone(),
            runs[0]["state"].clone(),
            runs[0]["duration_ms"].clone()
        ),
        (json!("long"), json!("interrupted"), Value::Null)
    );
    assert_eq!(
        (
            runs[1]["plan"].clone(),
            runs[1]["state"].clone(),
            runs[1]["tasks_passed"].clone()
        ),
        (json!("quick"), json!("ok"), json!(1))
    );
    let text = String::from_utf8_lossy(&env.run(&["runs"]).stdout).into_owned();
    assert!(text.lines().nth(1).unwrap().contains("ok"), "{text}");
    assert!(
        text.lines().next().unwrap().contains("interrupted"),
        "{text}"
    );
}

#[test]
fn every_attempt_s_output_is_kept_and_logs_prints_it() {
    use std::os::unix::fs::PermissionsExt;
    let env = git_env();
    let counter = outside_dir(&env, "counter");
    let count = counter.join("count");
    let plan = write_plan(
        &env,
        "talk",
        &format!(
            r#"
version: 1
name: talk
defaults: {{ agent: command, max_retries: 1, timeout: 30s, retry_policy: cold }}
tasks:
  - id: t
    prompt: p
    allowed_paths: ['{counter}']
    command: [sh, -c, "{counting}; echo out-$n; echo err-$n >&2; echo $n > n.txt; echo DONE"]
    gates: [ {{ name: second, run: "echo checked-$(cat n.txt); test $(cat n.txt) = 2" }} ]
"#,
            counting = count_attempt(&count),
            counter = counter.display()
        ),
    );
    assert_success(&env.run(&["run", &plan]));
    let output = env.run(&["logs", "t"]);
    assert_success(&output);
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    for line in ["out-1", "err-1", "checked-1", "out-2", "err-2", "checked-2"] {
        assert!(
            text.lines().any(|shown| shown == line),
            "{line} missing: {text}"
        );
    }
    assert!(text.contains("== attempt 1 (new) agent.stderr"), "{text}");
    assert!(text.contains("== attempt 2 (cold) gate.second"), "{text}");
    // One attempt's one gate, as JSON, and kept private.
    let one = json_of(&env.run(&["logs", "t", "--attempt", "2", "--gate", "second", "--json"]));
    let logs = one["logs"].as_array().unwrap();
    assert_eq!(logs.len(), 1, "{one}");
    assert_eq!(logs[0]["text"], "checked-2");
    let path = PathBuf::from(logs[0]["path"].as_str().unwrap());
    assert_eq!(
        fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(
        fs::metadata(path.parent().unwrap())
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o700
    );
    let missing = env.run(&["logs", "t", "--gate", "nope"]);
    assert_eq!(code(&missing), Some(2));
    assert!(
        String::from_utf8_lossy(&missing.stderr)
            .contains("no attempt of talk/t kept output of gate nope"),
        "{}",
        String::from_utf8_lossy(&missing.stderr)
    );
    // journal show --full prints whole bodies; the default cuts them.
    let full =
        String::from_utf8_lossy(&env.run(&["journal", "show", "t", "--full"]).stdout).into_owned();
    let cut = String::from_utf8_lossy(&env.run(&["journal", "show", "t"]).stdout).into_owned();
    assert!(full.contains("\"retry_policy\": \"cold\""), "{full}");
    assert!(!cut.contains("\"retry_policy\":\"cold\""), "{cut}");
}

#[test]
fn run_events_streams_one_json_object_a_line_as_things_happen() {
    let env = git_env();
    let counter = outside_dir(&env, "counter");
    let count = counter.join("count");
    let plan = write_plan(
        &env,
        "stream",
        &format!(
            r#"
version: 1
name: stream
defaults: {{ agent: command, max_retries: 1, timeout: 30s }}
tasks:
  - id: stay
    prompt: s
    allowed_paths: ["src/**", '{counter}']
    command: [sh, -c, "{counting}; mkdir -p src; echo ok > src/a.py; if [ $n = 1 ]; then echo stray > stray.txt; fi; echo DONE"]
    gates: [ {{ name: second, run: "test $(cat '{count}') = 2" }} ]
"#,
            count = count.display(),
            counting = count_attempt(&count),
            counter = counter.display()
        ),
    );
    let output = env.run(&["run", &plan, "--events"]);
    assert_success(&output);
    let events: Vec<Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|err| panic!("{line}: {err}")))
        .collect();
    for event in &events {
        assert_eq!(event["v"], 1, "{event}");
        assert!(
            event["at"].as_str().is_some_and(|at| at.ends_with('Z')),
            "{event}"
        );
    }
    let kinds: Vec<&str> = events
        .iter()
        .map(|event| event["event"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "run.started",
            "run.workspace",
            "attempt.started",
            "attempt.phase",
            "attempt.phase",
            "attempt.finished",
            "attempt.phase",
            "attempt.anomaly",
            "retry.decision",
            "attempt.started",
            "attempt.phase",
            "attempt.phase",
            "attempt.finished",
            "task.finished",
            "run.finished"
        ]
    );
    let phases: Vec<&str> = events
        .iter()
        .filter(|event| event["event"] == "attempt.phase")
        .map(|event| event["phase"].as_str().unwrap())
        .collect();
    assert_eq!(phases, ["agent", "gates", "deciding", "agent", "gates"]);
    assert_eq!(events[7]["anomaly"]["kind"], "write_outside_allowed_paths");
    assert_eq!(events[5]["attempt"]["outcome"], "judged");
    let last = events.last().unwrap();
    assert_eq!(last["ok"], true);
    assert_eq!(last["run"]["tasks"][0]["state"], "passed");
}

#[test]
fn the_next_hint_names_the_task_that_failed() {
    let env = git_env();
    let plan = write_plan(
        &env,
        "hint",
        r#"
version: 1
name: hint
defaults: { agent: command, max_retries: 0, timeout: 30s }
tasks:
  - id: fine
    prompt: f
    command: [sh, -c, "echo DONE"]
  - id: broken
    prompt: b
    command: [sh, -c, "echo DONE"]
    gates: [ { name: never, run: "false" } ]
"#,
    );
    let output = env.run(&["run", &plan]);
    assert_eq!(code(&output), Some(1));
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let next = text.lines().find(|line| line.starts_with("next:")).unwrap();
    assert!(next.starts_with("next: `reprise logs broken`"), "{text}");
}

#[test]
fn the_event_stream_arrives_while_the_agent_runs_and_a_warm_retry_has_its_exact_sequence() {
    use std::io::{BufRead, BufReader};
    let env = git_env();
    let plan = write_plan(
        &env,
        "live",
        r#"
version: 1
name: live
tasks:
  - id: fix
    prompt: make a.txt good
    agent: sim
    retry_policy: warm
    max_retries: 1
    sim:
      - { reply: "done", write: { a.txt: bad }, delay: 3s }
      - { reply: "done again", write: { a.txt: good } }
    gates: [ { name: good, run: "test \"$(cat a.txt)\" = good" } ]
"#,
    );
    let mut child = env.spawn(&["run", &plan, "--events"], std::process::Stdio::piped());
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(first["event"], "run.started");
    // The first attempt's agent is still at work: the run has not ended.
    assert_eq!(
        child.try_wait().unwrap(),
        None,
        "the stream came only at the end"
    );
    let mut kinds = vec![first["event"].as_str().unwrap().to_owned()];
    let mut modes = Vec::new();
    for line in lines {
        let event: Value = serde_json::from_str(&line.unwrap()).unwrap();
        if event["event"] == "attempt.started" {
            modes.push(event["mode"].as_str().unwrap().to_owned());
        }
        kinds.push(event["event"].as_str().unwrap().to_owned());
    }
    assert!(child.wait().unwrap().success());
    assert_eq!(
        kinds,
        [
            "run.started",
            "run.workspace",
            "attempt.started",
            "attempt.phase",
            "attempt.phase",
            "attempt.finished",
            "attempt.phase",
            "retry.decision",
            "attempt.started",
            "attempt.phase",
            "attempt.phase",
            "attempt.finished",
            "task.finished",
            "run.finished"
        ]
    );
    assert_eq!(modes, ["new", "warm"]);
}

#[test]
fn logs_keep_a_long_stream_s_head_and_tail_within_the_bound() {
    let env = git_env();
    let plan = write_plan(
        &env,
        "loud",
        r#"
version: 1
name: loud
tasks:
  - id: loud
    prompt: l
    agent: command
    max_retries: 0
    command: [sh, -c, "echo FIRST-LINE >&2; yes filler | head -c 400000 >&2; echo; echo LAST-LINE >&2; echo DONE"]
    gates: [ { name: never, run: "echo gate-said-no; false" } ]
"#,
    );
    assert_eq!(code(&env.run(&["run", &plan])), Some(1));
    let logs = json_of(&env.run(&["logs", "loud", "--json"]));
    let stderr = logs["logs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|log| log["name"] == "agent.stderr")
        .unwrap()["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(stderr.len() <= 256 * 1024, "{}", stderr.len());
    assert!(stderr.starts_with("FIRST-LINE\n"));
    assert!(stderr.trim_end().ends_with("LAST-LINE"));
    assert!(stderr.contains("bytes omitted"));
    // The last (only) attempt's gate output is kept too.
    let gate = env.run(&["logs", "loud", "--gate", "never"]);
    assert!(String::from_utf8_lossy(&gate.stdout).contains("gate-said-no"));
}

/// Runs `reprise ARGS` on a pseudo-terminal (util-linux `script`), with
/// `extra` in its environment, and returns every byte it wrote.
fn on_a_terminal(env: &Env, args: &str, extra: &[(&str, &str)]) -> String {
    let mut command = Command::new("script");
    command
        .args(["-qfec", &format!("{BIN} {args}"), "/dev/null"])
        .current_dir(env.project())
        .env_clear()
        .env("HOME", env.temp.path().join("home"))
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("TERM", "xterm-256color");
    for (name, value) in extra {
        command.env(name, value);
    }
    let output = command.output().unwrap();
    String::from_utf8_lossy(&output.stdout).into_owned()
}

const SLOW_PLAN: &str = r#"
version: 1
name: slow
tasks:
  - id: think
    prompt: t
    agent: sim
    max_retries: 0
    sim: [ { reply: "done", write: { t.txt: x }, delay: 2500ms } ]
    gates: [ { name: check, run: "sleep 2.5; true" } ]
"#;

#[test]
fn a_terminal_shows_each_running_task_s_phase_and_growing_elapsed_time_and_pipes_get_plain_lines() {
    let env = git_env();
    let plan = write_plan(&env, "slow", SLOW_PLAN);
    let shown = on_a_terminal(&env, &format!("run {plan}"), &[]);
    // Status lines are redrawn in place: the phase and the elapsed time.
    let elapsed = |phase: &str| -> Vec<u64> {
        shown
            .split(&format!("[think] attempt 1 (new) · {phase} · "))
            .skip(1)
            .filter_map(|rest| rest.split('s').next()?.parse().ok())
            .collect()
    };
    let agent = elapsed("agent");
    let gates = elapsed("gates");
    assert!(!agent.is_empty() && !gates.is_empty(), "{shown:?}");
    let all: Vec<u64> = agent.iter().chain(&gates).copied().collect();
    assert!(
        all.iter().max() > all.iter().min(),
        "elapsed never grew: {all:?}"
    );
    assert!(
        shown.contains("\u{1b}[32mPASS"),
        "colour on a terminal: {shown:?}"
    );
    // NO_COLOR: not one escape code, and no redraws.
    let plain = on_a_terminal(&env, &format!("run {plan}"), &[("NO_COLOR", "1")]);
    assert!(!plain.contains('\u{1b}'), "{plain:?}");
    assert!(plain.contains("PASS  ["), "{plain:?}");
    // Piped: plain lines only.
    let piped = env.run(&["run", &plan]);
    let text = String::from_utf8_lossy(&piped.stdout);
    assert!(!text.contains('\u{1b}') && !text.contains('\r'), "{text:?}");
    assert!(text.contains("PASS  [  "), "{text}");
    for line in text.lines() {
        assert!(
            line.chars().count() <= 100,
            "wider than 100 columns: {line}"
        );
    }
}

/// Loads `page` in headless Chromium (Debian's `chromium`, installed by
/// `./scripts/test`) and returns the DOM after its script ran; saves a
/// screenshot beside the test's other artifacts.
fn rendered_in_chromium(page: &Path, screenshot: &Path) -> String {
    let profile = tempfile::tempdir().unwrap();
    let flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
    ];
    let run = |extra: &[String]| {
        Command::new("chromium")
            .args(flags)
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .args(extra)
            .arg(format!("file://{}", page.display()))
            .output()
            .unwrap_or_else(|err| {
                panic!("chromium could not run ({err}); ./scripts/test installs Debian's chromium")
            })
    };
    let shot = run(&[
        format!("--screenshot={}", screenshot.display()),
        "--window-size=1280,1800".to_owned(),
    ]);
    assert!(
        screenshot.is_file(),
        "no screenshot: {}",
        String::from_utf8_lossy(&shot.stderr)
    );
    let dom = run(&["--dump-dom".to_owned()]);
    assert!(
        dom.status.success(),
        "{}",
        String::from_utf8_lossy(&dom.stderr)
    );
    String::from_utf8_lossy(&dom.stdout).into_owned()
}

#[test]
fn the_report_renders_in_a_real_browser_with_attention_retries_and_a_broken_chain() {
    let env = git_env();
    let plan = write_plan(
        &env,
        "shown",
        r#"
version: 1
name: shown
seats: 3
defaults: { agent: sim, max_retries: 1 }
tasks:
  - id: warmed
    prompt: w
    retry_policy: warm
    sim:
      - { reply: "first", write: { w.txt: bad } }
      - { reply: "second", write: { w.txt: good } }
    gates: [ { name: good, run: "test \"$(cat w.txt)\" = good" } ]
  - id: forked
    prompt: f
    retry_policy: fork
    sim:
      - { reply: "first", write: { f.txt: bad } }
      - { reply: "second", write: { f.txt: good } }
    gates: [ { name: good, run: "test \"$(cat f.txt)\" = good" } ]
  - id: stuck
    prompt: s
    max_retries: 0
    sim: [ { reply: "no" } ]
    gates: [ { name: never, run: "false" } ]
"#,
    );
    assert_eq!(code(&env.run(&["run", &plan])), Some(1));
    // Tamper with one journal: one byte of a row's body.
    let journal = env
        .project()
        .join(".reprise/plans/shown/tasks/forked/journal.jsonl");
    let text = fs::read_to_string(&journal).unwrap();
    fs::write(&journal, text.replacen("\"attempt\":1", "\"attempt\":7", 1)).unwrap();
    let page = env.temp.path().join("report.html");
    let written = env.run(&["report", "-o", page.to_str().unwrap()]);
    assert_success(&written);
    let html = fs::read_to_string(&page).unwrap();
    assert!(
        !html.contains("http://") && !html.contains("https://"),
        "nothing fetched"
    );
    let artifacts = Path::new(env!("CARGO_TARGET_TMPDIR")).join("report");
    fs::create_dir_all(&artifacts).unwrap();
    let dom = rendered_in_chromium(&page, &artifacts.join("report.png"));
    assert!(
        dom.contains("data-rendered=\"yes\""),
        "its script ran: {dom}"
    );
    let attention = dom.split("id=\"attention\"").nth(1).unwrap();
    let attention = attention.split("</div>").next().unwrap();
    assert!(attention.contains("data-task=\"stuck\""), "{attention}");
    assert!(!attention.contains("data-task=\"warmed\""), "{attention}");
    assert!(dom.contains("data-mode=\"warm\""), "{dom}");
    assert!(dom.contains("data-mode=\"fork\""), "{dom}");
    assert!(
        dom.contains("class=\"broken\" data-chain=\"journal and spine of forked\""),
        "{dom}"
    );
    assert!(
        !dom.contains("data-chain=\"journal and spine of warmed\""),
        "{dom}"
    );
}

#[test]
fn logs_follow_prints_a_running_agent_s_output_as_it_comes_and_ends_with_the_task() {
    use std::io::{BufRead, BufReader};
    let env = git_env();
    let plan = write_plan(
        &env,
        "ticks",
        r#"
version: 1
name: ticks
tasks:
  - id: tick
    prompt: t
    agent: command
    max_retries: 0
    command: [sh, -c, "i=1; while [ $i -le 8 ]; do echo tick $i; sleep 0.4; i=$((i+1)); done; echo DONE"]
"#,
    );
    let mut run = env.spawn(&["run", &plan], std::process::Stdio::null());
    wait_for_an_attempt(&env, "ticks", "tick");
    let mut follow = env.spawn(&["logs", "tick", "--follow"], std::process::Stdio::piped());
    let mut lines = BufReader::new(follow.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        if line.starts_with("tick ") {
            // The first tick comes while the agent is still at work.
            if seen.is_empty() {
                assert_eq!(run.try_wait().unwrap(), None, "output came only at the end");
            }
            seen.push(line);
        }
        if seen.len() == 8 {
            break;
        }
    }
    let rest: Vec<String> = lines.map(Result::unwrap).collect();
    assert!(
        follow.wait().unwrap().success(),
        "follow ends when the task does"
    );
    assert!(run.wait().unwrap().success());
    assert_eq!(seen.first().map(String::as_str), Some("tick 1"));
    assert_eq!(seen.last().map(String::as_str), Some("tick 8"));
    assert!(
        rest.iter().any(|line| line.contains("no longer running")),
        "{rest:?}"
    );
}
