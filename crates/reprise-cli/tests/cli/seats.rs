//! Seats under a pool: tasks without envelopes run side by side up to the
//! run's seats, each attempt bounded by its share; a task that waits (for a
//! seat, a dependency or money) says so and why, in `--events` and in a
//! live run's `status`, and is never shown as started or running.
//!
//! Concurrency is shown without timing: each agent leaves a mark and waits,
//! bounded, for its partner's, so it says `TOGETHER` only if both ran at once.

use std::io::BufRead;

use super::worktrees::{git_env, task_json, write_plan};
use super::*;
use reprise_testkit::wait_for;

/// A stand-in for Claude Code (an agent held to a budget, so it holds a
/// share of the pool): it keeps the `--max-budget-usd` it was given, marks
/// that it runs in `$MEET`, and waits up to 30 s for its partner's mark.
const MEETING_CLAUDE: &str = r#"#!/bin/sh
if [ "$1" = "--version" ]; then echo "2.1.197 (Claude Code)"; exit 0; fi
me=$(basename "$PWD")
budget=""; sid=""; prev=""
for arg in "$@"; do
  [ "$prev" = "--max-budget-usd" ] && budget="$arg"
  [ "$prev" = "--session-id" ] && sid="$arg"
  prev="$arg"
done
echo "$budget" > "$MEET/$me.budget"
touch "$MEET/$me"
other=a; [ "$me" = a ] && other=b
i=0
while [ ! -e "$MEET/$other" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
word=ALONE; [ -e "$MEET/$other" ] && word=TOGETHER
printf '{"type":"result","subtype":"success","is_error":false,"result":"%s","session_id":"%s","total_cost_usd":0.01}\n' "$word" "$sid"
"#;

fn meeting_dir(env: &Env) -> PathBuf {
    let meet = env.temp.path().join("meet");
    fs::create_dir_all(&meet).unwrap();
    meet
}

#[test]
fn two_agents_held_to_a_budget_run_at_once_under_a_pool_each_on_its_share() {
    let env = git_env();
    env.init();
    let meet = meeting_dir(&env);
    let fake = env.temp.path().join("fake-claude");
    reprise_testkit::write_executable(&fake, MEETING_CLAUDE).unwrap();
    let plan = write_plan(
        &env,
        "pooled",
        &format!(
            r#"
version: 1
name: pooled
seats: 2
budget_usd: "1.00"
agents: {{ claude: {{ bin: {fake}, env: {{ MEET: {meet} }} }} }}
defaults: {{ agent: claude, max_retries: 0, containment: "off", timeout: 60s }}
tasks:
  - {{ id: a, prompt: "meet b", gates: [ {{ name: met, result_matches: "^TOGETHER" }} ] }}
  - {{ id: b, prompt: "meet a", gates: [ {{ name: met, result_matches: "^TOGETHER" }} ] }}
"#,
            fake = fake.display(),
            meet = meet.display(),
        ),
    );
    let output = env.run(&["run", &plan, "--json"]);
    let run = json_of(&output);
    assert_success(&output);
    for task in ["a", "b"] {
        assert_eq!(task_json(&run, task)["state"], "passed", "{run}");
        // Each was bounded by its half of the pool, not by all of it.
        let budget = fs::read_to_string(meet.join(format!("{task}.budget"))).unwrap();
        assert_eq!(budget.trim(), "0.5", "{task}'s --max-budget-usd");
    }
    // Together they spent what they reported, within the pool.
    let spent: u64 = ["a", "b"]
        .iter()
        .map(|task| task_json(&run, task)["spent_micro_usd"].as_u64().unwrap())
        .sum();
    assert_eq!(spent, 20_000);
}

#[test]
fn command_agents_under_a_pool_run_at_once() {
    let env = git_env();
    env.init();
    let meet = meeting_dir(&env);
    // A command cannot be held to a budget: it holds nothing of the pool.
    let command = format!(
        "touch {meet}/$REPRISE_TASK_ID; other=a; [ $REPRISE_TASK_ID = a ] && other=b; \
         i=0; while [ ! -e {meet}/$other ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; \
         [ -e {meet}/$other ] && echo TOGETHER || echo ALONE",
        meet = meet.display()
    );
    let plan = write_plan(
        &env,
        "pooled",
        &format!(
            r#"
version: 1
name: pooled
seats: 2
budget_usd: "1.00"
defaults: {{ agent: command, max_retries: 0, containment: "off", timeout: 60s }}
tasks:
  - {{ id: a, prompt: "meet b", command: {command:?}, gates: [ {{ name: met, result_matches: "^TOGETHER" }} ] }}
  - {{ id: b, prompt: "meet a", command: {command:?}, gates: [ {{ name: met, result_matches: "^TOGETHER" }} ] }}
"#
        ),
    );
    let output = env.run(&["run", &plan, "--json"]);
    let run = json_of(&output);
    assert_success(&output);
    for task in ["a", "b"] {
        assert_eq!(task_json(&run, task)["state"], "passed", "{run}");
    }
}

#[test]
fn an_attempt_stopped_at_its_share_retries_with_all_that_is_free() {
    let env = git_env();
    env.init();
    // `big` needs more than half of the pool; `small` little of it.
    let plan = write_plan(
        &env,
        "shares",
        r#"
version: 1
name: shares
seats: 2
budget_usd: "1.00"
defaults: { agent: sim, max_retries: 1 }
tasks:
  - { id: big, prompt: p, sim: [ { reply: DONE, cost_usd: "0.70" }, { reply: DONE, cost_usd: "0.70" } ] }
  - { id: small, prompt: p, sim: [ { reply: DONE, cost_usd: "0.10" } ] }
"#,
    );
    let output = env.run(&["run", &plan, "--json"]);
    let run = json_of(&output);
    assert_success(&output);
    let big = task_json(&run, "big");
    assert_eq!(big["state"], "passed", "{run}");
    let attempts = big["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{big}");
    assert_eq!(attempts[0]["infra_kind"], "share_exhausted", "{big}");
    assert_eq!(attempts[1]["cost_micro_usd"], 700_000);
    assert_eq!(task_json(&run, "small")["state"], "passed");
}

/// `reprise run --events` in the background, its lines sent on as they come.
fn spawn_events(env: &Env, plan: &str) -> (std::process::Child, std::sync::mpsc::Receiver<Value>) {
    let mut child = env.spawn(&["run", plan, "--events"], std::process::Stdio::piped());
    let stdout = child.stdout.take().unwrap();
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Ok(event) = serde_json::from_str::<Value>(&line) {
                let _ = sender.send(event);
            }
        }
    });
    (child, receiver)
}

/// `status --json` polled until `ready` holds of it (bounded: two minutes,
/// each look being a run of `reprise status`).
fn status_when(env: &Env, ready: impl Fn(&Value) -> bool) -> (Value, String) {
    let json = wait_for(std::time::Duration::from_secs(120), || {
        // Until the run has written its state, there is no run to show.
        let output = env.run(&["status", "--json"]);
        let json: Value = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
        (!json.is_null() && ready(&json)).then_some(json)
    })
    .expect("status never showed what was waited for");
    let text = stdout(&env.run(&["status"]));
    (json, text)
}

/// A command that runs until the test writes the file it names (bounded:
/// 60 s), then says DONE: the file and the command.
fn held_until_go(env: &Env) -> (PathBuf, String) {
    let go = env.temp.path().join("go");
    let hold = format!(
        "i=0; while [ ! -e {go} ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; echo DONE",
        go = go.display()
    );
    (go, hold)
}

/// Lets the held task go, waits for the run to pass, and returns its events.
fn let_go_and_collect(
    go: &Path,
    child: &mut std::process::Child,
    events: &std::sync::mpsc::Receiver<Value>,
) -> Vec<Value> {
    fs::write(go, "").unwrap();
    assert!(child.wait().unwrap().success());
    // Every line the run printed, up to its end of output.
    events.iter().collect()
}

/// Where the first `kind` event of `task` is in the stream.
fn position(events: &[Value], kind: &str, task: &str) -> usize {
    events
        .iter()
        .position(|event| event["event"] == kind && event["task"] == task)
        .unwrap_or_else(|| panic!("no {kind} of {task} in {events:?}"))
}

fn state_of<'a>(status: &'a Value, task: &str) -> &'a Value {
    &task_json(status, task)["state"]
}

#[test]
fn tasks_that_wait_say_why_in_events_and_in_a_live_status() {
    let env = git_env();
    env.init();
    // `a` holds the one seat until the test lets it go; `b` waits for the
    // seat, `c` for `a`, its dependency.
    let (go, hold) = held_until_go(&env);
    let plan = write_plan(
        &env,
        "waits",
        &format!(
            r#"
version: 1
name: waits
seats: 1
defaults: {{ agent: command, max_retries: 0, containment: "off", timeout: 90s }}
tasks:
  - {{ id: a, prompt: p, command: {hold:?} }}
  - {{ id: b, prompt: p, command: "echo DONE" }}
  - {{ id: c, prompt: p, command: "echo DONE", depends_on: [a] }}
"#
        ),
    );
    let (mut child, events) = spawn_events(&env, &plan);
    let (status, text) = status_when(&env, |status| {
        status["liveness"]["state"] == "live"
            && state_of(status, "a") == "running"
            && state_of(status, "b") == "waiting"
    });
    // The live run's states are where the tasks are, not a lagging snapshot.
    assert!(
        status["state_lags"].as_array().unwrap().is_empty(),
        "{status}"
    );
    assert_eq!(state_of(&status, "b"), "waiting", "{status}");
    assert_eq!(task_json(&status, "b")["waiting"]["reason"], "seat");
    assert_eq!(state_of(&status, "c"), "waiting", "{status}");
    assert_eq!(task_json(&status, "c")["waiting"]["reason"], "dependency");
    assert!(text.contains("\n  a: running\n"), "{text}");
    assert!(
        text.contains("\n  b: waiting for a seat (all 1 busy)\n"),
        "{text}"
    );
    assert!(text.contains("\n  c: waiting for dependency a\n"), "{text}");
    assert!(!text.contains("state.json still says"), "{text}");
    let events = let_go_and_collect(&go, &mut child, &events);
    let position = |kind: &str, task: &str| position(&events, kind, task);
    let waiting = &events[position("task.waiting", "b")];
    assert_eq!(waiting["reason"], "seat");
    assert_eq!(waiting["detail"], "a seat (all 1 busy)");
    assert_eq!(
        events[position("task.waiting", "c")]["reason"],
        "dependency"
    );
    // Neither started before the one ahead of it was done.
    assert!(position("attempt.started", "b") > position("task.finished", "a"));
    assert!(position("attempt.started", "c") > position("task.finished", "a"));
}

#[test]
fn a_task_whose_envelope_does_not_fit_yet_waits_for_budget() {
    let env = git_env();
    env.init();
    let (go, hold) = held_until_go(&env);
    let plan = write_plan(
        &env,
        "envelopes",
        &format!(
            r#"
version: 1
name: envelopes
seats: 2
budget_usd: "1.00"
defaults: {{ agent: command, max_retries: 0, containment: "off", timeout: 90s, budget_usd: "0.60" }}
tasks:
  - {{ id: a, prompt: p, command: {hold:?} }}
  - {{ id: b, prompt: p, command: "echo DONE" }}
"#
        ),
    );
    let (mut child, events) = spawn_events(&env, &plan);
    let (status, text) = status_when(&env, |status| {
        status["liveness"]["state"] == "live"
            && state_of(status, "a") == "running"
            && state_of(status, "b") == "waiting"
    });
    assert_eq!(state_of(&status, "b"), "waiting", "{status}");
    assert_eq!(task_json(&status, "b")["waiting"]["reason"], "budget");
    assert!(
        text.contains("\n  b: waiting for headroom in the pool for its envelope ($0.40 free)\n"),
        "{text}"
    );
    let events = let_go_and_collect(&go, &mut child, &events);
    assert_eq!(
        events[position(&events, "task.waiting", "b")]["reason"],
        "budget"
    );
    assert!(
        position(&events, "attempt.started", "b") > position(&events, "task.finished", "a"),
        "{events:?}"
    );
}
