//! Parks and durable runs, end to end through the binary: a park frees
//! what the task held (its agent's processes, its worktree, its seat, its
//! unspent budget) and every release is on the audit chain citing the
//! park's receipt; a resume takes the task back warm in its own session
//! when nothing changed, cold when something did; refusals write nothing; a
//! run killed outright is taken up again by `run --continue`.

use std::io::BufRead;

use super::recovery::{journal_kinds, wait_for_an_attempt};
use super::worktrees::{git_env, outside_dir, write_plan};
use super::*;
use reprise_testkit::{wait_for, wait_until};

/// The audit chain's rows of `kind`, bodies only.
fn audit_rows(env: &Env, kind: &str) -> Vec<Value> {
    fs::read_to_string(env.reprise_dir().join("audit/audit.jsonl"))
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|row| row["kind"] == kind)
        .collect()
}

/// Every release cites a receipt the chain holds for the same park.
fn assert_every_release_has_its_receipt(env: &Env) {
    let receipts: Vec<Value> = audit_rows(env, "task.suspend_receipt");
    for release in audit_rows(env, "task.suspend_resource_release") {
        let receipt = receipts
            .iter()
            .find(|receipt| receipt["mac"] == release["body"]["receipt"])
            .unwrap_or_else(|| panic!("a release without its receipt: {release}"));
        assert_eq!(
            receipt["body"]["park"], release["body"]["park"],
            "{release}"
        );
    }
}

fn released(env: &Env, park: &Value) -> Vec<(String, Value)> {
    audit_rows(env, "task.suspend_resource_release")
        .into_iter()
        .filter(|row| &row["body"]["park"] == park)
        .map(|row| {
            (
                row["body"]["resource"].as_str().unwrap().to_owned(),
                row["body"]["detail"].clone(),
            )
        })
        .collect()
}

fn pid_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && !fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|stat| stat.split_whitespace().nth(2) == Some("Z"))
}

/// Waits (a minute at most) until `file` exists and holds something.
fn wait_for_file(file: &Path) -> String {
    wait_for(std::time::Duration::from_secs(60), || {
        fs::read_to_string(file)
            .ok()
            .filter(|text| !text.trim().is_empty())
    })
    .unwrap_or_else(|| panic!("{} never appeared", file.display()))
}

const TWO_ON_ONE_SEAT: &str = r#"
version: 1
name: seats
seats: 1
budget_usd: "1.00"
defaults: { agent: sim }
tasks:
  - id: long
    prompt: do the long thing
    budget_usd: "0.50"
    sim:
      - { reply: "first try", write: { long.txt: bad }, cost_usd: "0.10" }
      - { reply: "slow second try", write: { long.txt: good }, delay: 120s }
      - { reply: "resumed and finished", write: { long.txt: good } }
    gates: [ { name: good, run: "test \"$(cat long.txt)\" = good" } ]
  - id: next
    prompt: do the next thing
    budget_usd: "0.20"
    sim: [ { reply: "ok", write: { next.txt: done } } ]
"#;

#[test]
fn parking_the_running_task_lets_the_next_one_take_its_seat_and_returns_its_headroom() {
    let env = git_env();
    let plan = write_plan(&env, "seats", TWO_ON_ONE_SEAT);
    let child = env.spawn(&["run", &plan, "--json"], std::process::Stdio::piped());
    // Wait for the slow second attempt: the first one spent $0.10.
    let journal = env
        .project()
        .join(".reprise/plans/seats/tasks/long/journal.jsonl");
    assert!(
        wait_until(std::time::Duration::from_secs(60), || {
            fs::read_to_string(&journal).is_ok_and(|text| text.contains(r#""attempt":2,"mode""#))
        }),
        "the second attempt never started"
    );
    let worktree = env
        .project()
        .join(".reprise/worktrees")
        .read_dir()
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path()
        .join("long");
    assert!(worktree.is_dir());
    let parked = env.run(&[
        "task",
        "suspend",
        "long",
        "--reason",
        "needs a look",
        "--json",
    ]);
    assert_success(&parked);
    let parked = json_of(&parked);
    assert_eq!(parked["ok"], true, "{parked}");
    // Its worktree is gone (its files are in the park's snapshot).
    assert!(!worktree.exists(), "the parked worktree is still there");
    let output = child.wait_with_output().unwrap();
    // The run ends with the task parked: exit 3; the next task took the seat.
    assert_eq!(output.status.code(), Some(3));
    let run: Value = serde_json::from_slice(&output.stdout).unwrap();
    let states: Vec<(String, String)> = run["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|task| {
            (
                task["task_id"].as_str().unwrap().to_owned(),
                task["state"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        states,
        vec![
            ("long".to_owned(), "suspended".to_owned()),
            ("next".to_owned(), "passed".to_owned())
        ]
    );
    // The releases, in order, each citing the receipt; the budget's is
    // exactly what was reserved less what was spent, back in the pool.
    assert_every_release_has_its_receipt(&env);
    let releases = released(&env, &parked["park"]);
    let names: Vec<&str> = releases.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, ["process", "sandbox", "seat", "budget"]);
    assert_eq!(releases[0].1["stopped"], true);
    assert_eq!(releases[1].1["removed"], true);
    let budget = &releases[3].1;
    assert_eq!(budget["returned_micro_usd"], 400_000, "{budget}");
    assert_eq!(
        budget["pool_free_after"].as_u64().unwrap() - budget["pool_free_before"].as_u64().unwrap(),
        400_000,
        "{budget}"
    );
    let suspend = journal_kinds(&env, "seats", "long")
        .into_iter()
        .find(|row| row["kind"] == "task.suspend")
        .unwrap();
    assert_eq!(
        suspend["body"]["envelope"],
        json!({"reserved_micro_usd": 500_000, "spent_micro_usd": 100_000, "headroom_micro_usd": 400_000})
    );
    // The next task started after the park, not before.
    let next_started = journal_kinds(&env, "seats", "next")
        .into_iter()
        .find(|row| row["kind"] == "task.started")
        .unwrap();
    assert!(next_started["at"].as_str().unwrap() >= suspend["at"].as_str().unwrap());
    // Status and the runs list say parked; the journal and the audit chain verify.
    let status = json_of(&env.run(&["status", "--json"]));
    assert_eq!(status["liveness"], json!({"state": "parked"}), "{status}");
    // The report puts the parked task in its attention list, with the
    // command that wakes it.
    let page = env.temp.path().join("report.html");
    assert_success(&env.run(&["report", "-o", page.to_str().unwrap()]));
    let html = fs::read_to_string(&page).unwrap();
    assert!(
        html.contains("wake it: <code>reprise task resume long</code>"),
        "the report does not list the parked task"
    );
    assert_success(&env.run(&["journal", "verify", "long"]));
    assert_success(&env.run(&["audit", "verify"]));
    // Resumed: the worktree comes back with the parked files, the session
    // continues (the third step answers), and the run passes.
    let resumed = env.run(&["task", "resume", "long", "--json"]);
    assert_success(&resumed);
    let resumed = json_of(&resumed);
    let long = &resumed["tasks"][0];
    assert_eq!(long["state"], "passed", "{resumed}");
    let modes: Vec<&str> = long["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|attempt| attempt["mode"].as_str().unwrap())
        .collect();
    assert_eq!(modes, ["new", "warm", "warm"], "{resumed}");
    let sessions: Vec<&str> = long["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|attempt| attempt["session_id"].as_str())
        .collect();
    assert!(
        sessions.windows(2).all(|pair| pair[0] == pair[1]),
        "{resumed}"
    );
    let resume_row = journal_kinds(&env, "seats", "long")
        .into_iter()
        .find(|row| row["kind"] == "task.resume")
        .unwrap();
    assert_eq!(resume_row["body"]["mode"], "warm");
    assert_eq!(resume_row["body"]["park"], parked["park"]);
    // The tree restored from the park's snapshot hashed as parked: that
    // snapshot is the resumed attempt's checkpoint, not taken again.
    let rows = journal_kinds(&env, "seats", "long");
    let restored = rows
        .iter()
        .find(|row| row["kind"] == "checkpoint.restored")
        .unwrap();
    assert_eq!(restored["body"]["matches_checkpoint"], true);
    let before_resumed = rows
        .iter()
        .rev()
        .find(|row| row["kind"] == "checkpoint.taken")
        .unwrap();
    assert_eq!(before_resumed["body"]["label"], "before attempt 3");
    assert_eq!(before_resumed["body"]["reused"], true, "{before_resumed}");
    assert_eq!(
        before_resumed["body"]["checkpoint"],
        restored["body"]["checkpoint"]
    );
    assert_eq!(
        before_resumed["body"]["workspace_hash"],
        restored["body"]["workspace_hash"]
    );
    let receipts = audit_rows(&env, "task.resume_receipt");
    assert_eq!(receipts.len(), 1);
    assert_eq!(receipts[0]["body"]["suspend_receipt"], parked["receipt"]);
    assert_success(&env.run(&["journal", "verify", "long"]));
    assert_success(&env.run(&["audit", "verify"]));
}

#[test]
fn a_parked_command_agent_s_processes_are_gone_and_its_resume_goes_cold() {
    let env = git_env();
    let pids = outside_dir(&env, "pids");
    // The first attempt starts a child and waits; the retry finds its
    // pid file and finishes at once.
    let plan = write_plan(
        &env,
        "inplace",
        &format!(
            r#"
version: 1
name: inplace
agents: {{ command: {{ env: {{ PARK_MARK: "{mark}" }} }} }}
tasks:
  - id: edit
    prompt: edit shop.py
    agent: command
    sandbox: none
    timeout: 5m
    allowed_paths: ["{dir}"]
    command: [sh, -c, "if [ -e {dir}/agent ]; then echo resumed; exit 0; fi; sleep 300 & echo $! > {dir}/child; echo $$ > {dir}/agent; wait"]
"#,
            dir = pids.display(),
            mark = std::process::id(),
        ),
    );
    let child = env.spawn(&["run", &plan], std::process::Stdio::null());
    wait_for_file(&pids.join("child"));
    wait_for_file(&pids.join("agent"));
    // The pids they wrote are their PID namespace's: found here by the
    // variable both have.
    let mark = format!("PARK_MARK={}", std::process::id());
    let started = reprise_testkit::processes::pids_with_env(&mark);
    // Its supervisor, the agent and the agent's child.
    assert_eq!(started.len(), 3, "{started:?}");
    let parked = env.run(&["task", "suspend", "edit"]);
    assert_success(&parked);
    assert!(stdout(&parked).contains("released process: the agent was stopped and reaped"));
    // The agent and what it started were killed and reaped.
    let left: Vec<u32> = started.into_iter().filter(|pid| pid_alive(*pid)).collect();
    assert!(
        left.is_empty(),
        "the agent or its child outlived its park: {left:?}"
    );
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(3));
    // The command agent cannot resume a session: the resume goes cold,
    // saying why, and the retry finishes.
    let resumed = env.run(&["task", "resume", "edit", "--json"]);
    assert_success(&resumed);
    let rows = journal_kinds(&env, "inplace", "edit");
    let resume_row = rows
        .iter()
        .find(|row| row["kind"] == "task.resume")
        .unwrap();
    assert_eq!(resume_row["body"]["mode"], "cold", "{resume_row}");
    assert_eq!(
        resume_row["body"]["downgrade_reason"], "adapter_capability_none",
        "{resume_row}"
    );
    let task = &json_of(&resumed)["tasks"][0];
    assert_eq!(task["state"], "passed");
    assert_eq!(task["attempts"][1]["mode"], "cold");
    assert_success(&env.run(&["journal", "verify", "edit"]));
}

#[test]
fn an_edit_while_parked_in_place_resumes_cold_and_an_untouched_one_warm() {
    for edit in [true, false] {
        let env = git_env();
        let plan = write_plan(
            &env,
            "inplace",
            r#"
version: 1
name: inplace
tasks:
  - id: edit
    prompt: edit shop.py
    agent: sim
    sandbox: none
    sim:
      - { reply: "slow", write: { notes.txt: x }, delay: 120s }
      - { reply: "done", write: { notes.txt: y } }
"#,
        );
        park_tasks(&env, &plan, &["edit"]);
        if edit {
            // In place, the files stay; a person edits one while it waits.
            fs::write(env.project().join("shop.py"), "price = 11\n").unwrap();
        }
        let resumed = env.run(&["task", "resume", "edit", "--json"]);
        assert_success(&resumed);
        let rows = journal_kinds(&env, "inplace", "edit");
        let resume_row = rows
            .iter()
            .find(|row| row["kind"] == "task.resume")
            .unwrap();
        let (mode, reason) = if edit {
            ("cold", json!("workspace_hash_mismatch"))
        } else {
            ("warm", Value::Null)
        };
        assert_eq!(resume_row["body"]["mode"], mode, "{resume_row}");
        assert_eq!(
            resume_row["body"]["downgrade_reason"], reason,
            "{resume_row}"
        );
        let suspend = rows
            .iter()
            .find(|row| row["kind"] == "task.suspend")
            .unwrap();
        assert_eq!(
            resume_row["body"]["workspace_hash"] == suspend["body"]["workspace_hash"],
            !edit
        );
        assert_eq!(json_of(&resumed)["tasks"][0]["state"], "passed");
    }
}

/// Runs `plan` and parks each of `tasks` once its attempt runs; the run
/// then ends with them parked (exit 3).
fn park_tasks(env: &Env, plan: &str, tasks: &[&str]) {
    let name = Path::new(plan)
        .file_stem()
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    park_in(env, &["run", plan], &name, tasks);
}

/// Waits until the sim agents have opened `count` sessions: a park asked
/// between `attempt.started` and the agent's start stops an attempt that
/// never had a session, which can only resume cold.
fn wait_for_sim_sessions(env: &Env, count: usize) {
    let store = env.project().join(".reprise/sim");
    let opened = || {
        fs::read_dir(&store)
            .map(|entries| {
                entries
                    .flatten()
                    .filter(|entry| entry.path().extension().is_some_and(|ext| ext == "jsonl"))
                    .count()
            })
            .unwrap_or(0)
    };
    assert!(
        wait_until(std::time::Duration::from_secs(60), || opened() >= count),
        "the sim never opened {count} sessions"
    );
}

/// Starts `args` (a run of plan `name`), parks `tasks` one after another as
/// each starts, and returns what the run printed once it ended with them
/// parked (exit 3).
fn park_in(env: &Env, args: &[&str], name: &str, tasks: &[&str]) -> std::process::Output {
    let child = env.spawn(args, std::process::Stdio::piped());
    let sim = args
        .iter()
        .any(|arg| fs::read_to_string(arg).is_ok_and(|plan| plan.contains("sim:")));
    for (started, task) in tasks.iter().enumerate() {
        wait_for_an_attempt(env, name, task);
        if sim {
            wait_for_sim_sessions(env, started + 1);
        }
        assert_success(&env.run(&["task", "suspend", task]));
    }
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(3));
    output
}

/// The resumed attempt's checkpoint is the park's snapshot, reused: a
/// rollback after the resumed attempt fails puts the parked tree back
/// exactly (the failed attempt's stray file gone).
#[test]
fn a_failed_resumed_attempt_rolls_back_to_the_parked_tree() {
    let env = git_env();
    let plan = write_plan(
        &env,
        "rollback",
        r#"
version: 1
name: rollback
defaults: { agent: sim, rollback_on_retry: always }
tasks:
  - id: long
    prompt: write it
    sim:
      - { reply: "slow", write: { one.txt: slow }, delay: 120s }
      - { reply: "wrong", write: { one.txt: bad, stray.txt: x } }
      - { reply: "right", write: { one.txt: good } }
    gates:
      - { name: good, run: 'test "$(cat one.txt)" = good && test ! -e stray.txt' }
"#,
    );
    park_tasks(&env, &plan, &["long"]);
    let resumed = env.run(&["task", "resume", "long", "--json"]);
    assert_success(&resumed);
    let resumed = json_of(&resumed);
    assert_eq!(resumed["tasks"][0]["state"], "passed", "{resumed}");
    let rows = journal_kinds(&env, "rollback", "long");
    let reused = rows
        .iter()
        .find(|row| row["kind"] == "checkpoint.taken" && row["body"]["reused"] == true)
        .expect("the resumed attempt reused the park's snapshot");
    let rollback = rows
        .iter()
        .rev()
        .find(|row| row["kind"] == "checkpoint.restored")
        .unwrap();
    assert_ne!(rollback["body"]["reason"], "resume", "{rollback}");
    assert_eq!(rollback["body"]["checkpoint"], reused["body"]["checkpoint"]);
    assert_eq!(rollback["body"]["matches_checkpoint"], true, "{rollback}");
    assert_success(&env.run(&["journal", "verify", "long"]));
}

/// `reprise clean` leaves a parked task's snapshot (its files until the
/// resume) and the resume puts back exactly the parked files; once the
/// resumed task passes its worktree is reclaimed like any other.
#[test]
fn clean_keeps_a_parked_task_s_snapshot_and_the_resume_restores_its_files() {
    let env = git_env();
    let plan = write_plan(
        &env,
        "keep",
        r#"
version: 1
name: keep
seats: 2
defaults: { agent: sim }
tasks:
  - id: long
    prompt: write it
    max_retries: 3
    sim:
      - { reply: "first", write: { one.txt: parked, sub/two.txt: also } }
      - { reply: "slow", write: { three.txt: slow }, delay: 120s }
      - { reply: "done", write: { three.txt: x } }
    gates:
      - { name: kept, run: 'test "$(cat one.txt)" = parked && test "$(cat sub/two.txt)" = also && test -e three.txt' }
  - id: quick
    prompt: q
    sim: [ { reply: "ok", write: { quick.txt: x } } ]
"#,
    );
    // Parked in its slow second attempt, with the first one's files.
    let child = env.spawn(&["run", &plan], std::process::Stdio::piped());
    let journal = env
        .project()
        .join(".reprise/plans/keep/tasks/long/journal.jsonl");
    assert!(
        wait_until(std::time::Duration::from_secs(60), || {
            fs::read_to_string(&journal)
                .map_or(0, |text| text.matches("\"attempt.started\"").count())
                >= 2
        }),
        "the second attempt never started"
    );
    assert_success(&env.run(&["task", "suspend", "long"]));
    assert_eq!(child.wait_with_output().unwrap().status.code(), Some(3));
    let run_id = json_of(&env.run(&["status", "--json"]))["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let snapshots = env.project().join(".reprise/snapshots").join(&run_id);
    assert!(snapshots.join("long").is_dir());
    let cleaned = env.run(&["clean"]);
    assert_success(&cleaned);
    assert!(
        snapshots.join("long/HEAD").is_file(),
        "the parked task's snapshot is kept: {}",
        stdout(&cleaned)
    );
    assert!(!snapshots.join("quick").exists(), "the passed task's goes");
    let resumed = env.run(&["task", "resume", "long", "--json"]);
    assert_success(&resumed);
    let resumed = json_of(&resumed);
    assert_eq!(resumed["tasks"][0]["state"], "passed", "{resumed}");
    let files = super::worktrees::git(
        &env,
        &[
            "ls-tree",
            "-r",
            "--name-only",
            &format!("reprise/{run_id}/long"),
        ],
    );
    assert_eq!(files, "one.txt\nshop.py\nsub/two.txt\nthree.txt");
    assert!(
        !env.project()
            .join(".reprise/worktrees")
            .join(&run_id)
            .exists()
    );
    assert_eq!(
        super::worktrees::git(&env, &["worktree", "list"])
            .lines()
            .count(),
        1
    );
}

/// A rehearsal's park is resumed only by a rehearsal: `task resume` and
/// `run --continue` refuse it (as plain runs its agents would reach the real
/// services) without a write; `rehearse --continue --resume` resumes it.
#[test]
fn a_parked_rehearsal_is_resumed_only_as_a_rehearsal() {
    let env = git_env();
    let plan = write_plan(&env, "parkable", PARKABLE);
    let scenario = env.temp.path().join("scenario.yaml");
    fs::write(&scenario, "rules:\n  - reply: { text: ok }\n").unwrap();
    let scenario = scenario.to_string_lossy().into_owned();
    let output = park_in(
        &env,
        &["rehearse", &plan, "--scenario", &scenario, "--json"],
        "parkable",
        &["one", "two"],
    );
    let parked: Value = serde_json::from_slice(&output.stdout).unwrap();
    let run_id = parked["run"]["run_id"].as_str().unwrap().to_owned();
    let status = env.run(&["status", &run_id]);
    assert!(
        stdout(&status).contains(&format!(
            "`reprise rehearse --continue {run_id} --scenario FILE` takes the run up"
        )),
        "{}",
        stdout(&status)
    );
    let before = env.snapshot();
    assert_one_line_error(
        &env.run(&["task", "resume", "one"]),
        2,
        &format!("reprise rehearse --continue {run_id} --scenario FILE"),
    );
    assert_one_line_error(
        &env.run(&["run", "--continue", &run_id]),
        2,
        "is a rehearsal",
    );
    assert_eq!(env.snapshot(), before, "a refusal wrote something");
    // One task resumed; the other stays parked, and the run with it.
    let resumed = env.run(&[
        "rehearse",
        "--continue",
        &run_id,
        "--scenario",
        &scenario,
        "--resume",
        "one",
        "--json",
    ]);
    assert_eq!(resumed.status.code(), Some(3), "{}", stderr(&resumed));
    let resumed: Value = serde_json::from_slice(&resumed.stdout).unwrap();
    assert_eq!(resumed["run"]["run_id"], run_id.as_str());
    let one = &resumed["run"]["tasks"][0];
    assert_eq!(one["state"], "passed", "{resumed}");
    assert_eq!(one["attempts"][1]["mode"], "warm", "{resumed}");
    assert_eq!(
        resumed["run"]["tasks"][1]["state"], "suspended",
        "{resumed}"
    );
    let rows = journal_kinds(&env, "parkable", "one");
    assert!(rows.iter().any(|row| row["kind"] == "task.resume"));
    assert_success(&env.run(&["audit", "verify-suspension", "one"]));
}

const PARKABLE: &str = r#"
version: 1
name: parkable
defaults: { agent: sim }
tasks:
  - id: one
    prompt: one
    sim:
      - { reply: "slow", write: { one.txt: x }, delay: 120s }
      - { reply: "done", write: { one.txt: x } }
  - id: two
    prompt: two
    sim:
      - { reply: "slow", write: { two.txt: x }, delay: 120s }
      - { reply: "done", write: { two.txt: x } }
"#;

#[test]
fn resumes_that_cannot_stand_are_refused_before_anything_is_written() {
    let env = git_env();
    let plan = write_plan(&env, "parkable", PARKABLE);
    park_tasks(&env, &plan, &["one", "two"]);
    let journal = env
        .project()
        .join(".reprise/plans/parkable/tasks/one/journal.jsonl");
    let before = fs::read(&journal).unwrap();
    let audit_before = fs::read(env.reprise_dir().join("audit/audit.jsonl")).unwrap();
    for (args, needle) in [
        (vec!["task", "resume", "../one"], "task id"),
        (vec!["task", "resume", "nosuch"], "nosuch"),
        (
            vec!["task", "resume", "one", "--receipt", &"ab".repeat(32)],
            "not in the audit chain",
        ),
    ] {
        let output = env.run(&args);
        assert_one_line_error(&output, 2, needle);
        assert_eq!(
            fs::read(&journal).unwrap(),
            before,
            "{args:?} wrote to the journal"
        );
        assert_eq!(
            fs::read(env.reprise_dir().join("audit/audit.jsonl")).unwrap(),
            audit_before,
            "{args:?} wrote to the audit chain"
        );
    }
    // A receipt that binds another task's park is refused.
    let other = audit_rows(&env, "task.suspend_receipt")
        .into_iter()
        .find(|receipt| receipt["body"]["task_id"] == "two");
    let other = other.expect("two's park has a receipt");
    let output = env.run(&[
        "task",
        "resume",
        "one",
        "--receipt",
        other["mac"].as_str().unwrap(),
    ]);
    assert_one_line_error(&output, 2, "binds a park of task parkable/two");
    assert_eq!(fs::read(&journal).unwrap(), before);
    // One resume settles the park (the run then ends with `two` still
    // parked: exit 3); a second is refused and writes nothing.
    let resumed = env.run(&["task", "resume", "one"]);
    assert_eq!(code(&resumed), Some(3), "{}", stdout(&resumed));
    assert!(
        stdout(&resumed).contains("PARKED  two"),
        "{}",
        stdout(&resumed)
    );
    let settled = fs::read(&journal).unwrap();
    let again = env.run(&["task", "resume", "one"]);
    assert_one_line_error(&again, 2, "already settled");
    assert_eq!(fs::read(&journal).unwrap(), settled);
}

#[test]
fn a_run_killed_mid_attempt_is_continued_and_its_session_resumed_warm() {
    let env = git_env();
    let plan = write_plan(
        &env,
        "durable",
        r#"
version: 1
name: durable
defaults: { agent: sim }
tasks:
  - id: work
    prompt: do the work
    sim:
      - { reply: "slow", write: { w.txt: x }, delay: 120s }
      - { reply: "done after the crash", write: { w.txt: good } }
    gates: [ { name: good, run: "test \"$(cat w.txt)\" = good" } ]
  - id: after
    prompt: after
    depends_on: [work]
    sim: [ { reply: "ok", write: { a.txt: x } } ]
"#,
    );
    let mut child = env.spawn(&["run", &plan], std::process::Stdio::null());
    wait_for_an_attempt(&env, "durable", "work");
    // Killed once the sim has opened the session the engine chose for it
    // (killed before that, there is no session to resume: cold, rightly).
    wait_for_the_new_session(&env, "durable", "work");
    child.kill().unwrap();
    child.wait().unwrap();
    let run_id = json_of(&env.run(&["status", "--json"]))["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    // It is no rehearsal, and a rehearsal's continue says so; nothing is
    // written by any refusal.
    let scenario = env.temp.path().join("scenario.yaml");
    fs::write(&scenario, "rules:\n  - reply: { text: ok }\n").unwrap();
    let scenario = scenario.to_string_lossy().into_owned();
    let before = env.snapshot();
    for (args, code, needle) in [
        (
            vec!["rehearse", "--continue", &run_id, "--scenario", &scenario],
            2,
            "is not a rehearsal: continue it with `reprise run --continue",
        ),
        (
            vec![
                "rehearse",
                "--continue",
                "R-00000000000000000000000000",
                "--scenario",
                &scenario,
            ],
            2,
            "R-00000000000000000000000000",
        ),
        (
            vec![
                "rehearse",
                "--continue",
                &run_id,
                "--scenario",
                &scenario,
                "--resume",
                "../x",
            ],
            2,
            "../x",
        ),
    ] {
        assert_one_line_error(&env.run(&args), code, needle);
    }
    let conflict = env.run(&[
        "rehearse",
        &plan,
        "--continue",
        &run_id,
        "--scenario",
        &scenario,
    ]);
    assert_eq!(conflict.status.code(), Some(2));
    assert_one_line_error(
        &env.run(&[
            "rehearse",
            &plan,
            "--scenario",
            &scenario,
            "--resume",
            "work",
        ]),
        2,
        "--resume TASK resumes a parked task of a rehearsal taken up with --continue RUN",
    );
    assert_eq!(env.snapshot(), before, "a refusal wrote something");
    let continued = env.run(&["run", "--continue", &run_id, "--json"]);
    assert_success(&continued);
    let continued = json_of(&continued);
    assert_eq!(continued["run_id"], run_id.as_str());
    let work = &continued["tasks"][0];
    assert_eq!(work["state"], "passed", "{continued}");
    assert_eq!(continued["tasks"][1]["state"], "passed", "{continued}");
    let attempts = work["attempts"].as_array().unwrap();
    assert_eq!(attempts[0]["infra_kind"], "interrupted", "{continued}");
    assert_eq!(attempts[1]["mode"], "warm", "{continued}");
    assert_eq!(attempts[0]["session_id"], attempts[1]["session_id"]);
    // The sim saw the same session resumed with the retry's prompt.
    let session = attempts[1]["session_id"].as_str().unwrap();
    let transcript =
        fs::read_to_string(env.reprise_dir().join(format!("sim/{session}.jsonl"))).unwrap();
    assert!(transcript.contains("done after the crash"), "{transcript}");
    let rows = journal_kinds(&env, "durable", "work");
    assert!(rows.iter().any(|row| row["kind"] == "task.continued"));
    for task in ["work", "after"] {
        assert_success(&env.run(&["journal", "verify", task]));
    }
    assert_success(&env.run(&["audit", "verify"]));
    // A finished run is not continued again.
    assert_one_line_error(&env.run(&["run", "--continue", &run_id]), 2, "has finished");
}

/// Stopped by Ctrl-C, SIGTERM or SIGHUP, a run is taken up by `run
/// --continue` as a killed one is: its cancelled task goes on warm in its
/// own session, and the task that never started runs. Until then the run
/// is called cancelled wherever it is shown, never failed, and its summary
/// names the command that continues it.
#[test]
fn a_run_stopped_by_a_signal_is_continued_warm_and_called_cancelled_everywhere() {
    for (signal, number) in [("INT", 2), ("TERM", 15), ("HUP", 1)] {
        let env = git_env();
        let plan = write_plan(
            &env,
            "stoppable",
            r#"
version: 1
name: stoppable
defaults: { agent: sim }
tasks:
  - id: work
    prompt: do the work
    sim:
      - { reply: "slow", write: { w.txt: x }, delay: 120s }
      - { reply: "done after the stop", write: { w.txt: good } }
    gates: [ { name: good, run: "test \"$(cat w.txt)\" = good" } ]
  - id: after
    prompt: after
    depends_on: [work]
    sim: [ { reply: "ok", write: { a.txt: x } } ]
"#,
        );
        let child = env.spawn(&["run", &plan], std::process::Stdio::piped());
        wait_for_an_attempt(&env, "stoppable", "work");
        // Stopped once the sim has opened the session the engine chose.
        let session = wait_for_the_new_session(&env, "stoppable", "work");
        let sent = Command::new("kill")
            .args([&format!("-{signal}"), &child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        let output = child.wait_with_output().unwrap();
        assert_eq!(output.status.code(), Some(128 + number), "{signal}");
        let run_id = json_of(&env.run(&["status", "--json"]))["run_id"]
            .as_str()
            .unwrap()
            .to_owned();
        let summary = stdout(&output);
        assert!(
            summary.contains(&format!("run {run_id}: cancelled (")),
            "{signal}: {summary}"
        );
        assert!(
            summary
                .lines()
                .last()
                .unwrap()
                .contains(&format!("`reprise run --continue {run_id}`")),
            "{signal}: {summary}"
        );
        // One name everywhere: status, runs and the report.
        let status = env.run(&["status"]);
        let first = stdout(&status).lines().next().unwrap().to_owned();
        assert!(first.contains(": cancelled"), "{signal}: {first}");
        assert!(
            first.contains(&format!("`reprise run --continue {run_id}`")),
            "{first}"
        );
        let status = json_of(&env.run(&["status", "--json"]));
        assert_eq!(
            status["liveness"],
            json!({"state": "cancelled"}),
            "{status}"
        );
        let runs = json_of(&env.run(&["runs", "--json"]));
        assert_eq!(runs["runs"][0]["state"], "cancelled", "{runs}");
        assert!(stdout(&env.run(&["runs"])).contains("cancelled"));
        let page = env.temp.path().join("report.html");
        assert_success(&env.run(&["report", "-o", page.to_str().unwrap()]));
        let html = fs::read_to_string(&page).unwrap();
        let verdict = html
            .split("<p id=\"verdict\">")
            .nth(1)
            .and_then(|rest| rest.split("</p>").next())
            .unwrap()
            .to_owned();
        assert!(verdict.contains("cancelled"), "{verdict}");
        for text in [stdout(&output), first, verdict] {
            assert!(!text.to_lowercase().contains("failed"), "{signal}: {text}");
        }
        // Continued, the cancelled attempt's session goes on warm.
        let continued = env.run(&["run", "--continue", &run_id, "--json"]);
        assert_success(&continued);
        let continued = json_of(&continued);
        let work = &continued["tasks"][0];
        assert_eq!(work["state"], "passed", "{continued}");
        assert_eq!(continued["tasks"][1]["state"], "passed", "{continued}");
        let attempts = work["attempts"].as_array().unwrap();
        assert_eq!(attempts.len(), 2, "{continued}");
        assert_eq!(attempts[0]["infra_kind"], "cancelled", "{continued}");
        assert_eq!(attempts[1]["mode"], "warm", "{continued}");
        assert_eq!(attempts[1]["session_id"], session.as_str());
        let transcript =
            fs::read_to_string(env.reprise_dir().join(format!("sim/{session}.jsonl"))).unwrap();
        assert!(transcript.contains("done after the stop"), "{transcript}");
        let rows = journal_kinds(&env, "stoppable", "work");
        assert!(rows.iter().any(|row| row["kind"] == "task.continued"));
        for task in ["work", "after"] {
            assert_success(&env.run(&["journal", "verify", task]));
        }
        assert_success(&env.run(&["audit", "verify"]));
        assert_success(&env.run(&["status"]));
        let runs = json_of(&env.run(&["runs", "--json"]));
        assert_eq!(runs["runs"][0]["state"], "ok", "{runs}");
    }
}

#[test]
fn a_direct_park_cut_at_any_step_is_completed_by_the_next_suspend() {
    for step in ["suspend", "receipt", "process", "sandbox", "seat", "budget"] {
        let env = git_env();
        let plan = write_plan(&env, "parkable", PARKABLE);
        let mut child = env.spawn(&["run", &plan], std::process::Stdio::null());
        wait_for_an_attempt(&env, "parkable", "one");
        child.kill().unwrap();
        child.wait().unwrap();
        // No live run: the suspend command parks the task itself, and is
        // killed at the step boundary.
        let mut suspend = env
            .command(&["task", "suspend", "one"])
            .env("REPRISE_TEST_PARK_HOLD", step)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = std::io::BufReader::new(suspend.stderr.take().unwrap()).lines();
        let held = lines.next().unwrap().unwrap();
        assert!(
            held.contains(&format!("test hold at park step {step}")),
            "{held}"
        );
        suspend.kill().unwrap();
        suspend.wait().unwrap();
        assert_every_release_has_its_receipt(&env);
        // The next suspend completes the park; then it resumes.
        let completed = env.run(&["task", "suspend", "one", "--json"]);
        assert_success(&completed);
        let completed = json_of(&completed);
        let names: Vec<String> = released(&env, &completed["park"])
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        assert_eq!(names, ["process", "sandbox", "seat", "budget"], "{step}");
        assert_every_release_has_its_receipt(&env);
        assert_eq!(audit_rows(&env, "task.suspend_receipt").len(), 1, "{step}");
        let again = env.run(&["task", "suspend", "one"]);
        assert_one_line_error(&again, 2, "already parked");
        assert_success(&env.run(&["audit", "verify"]));
    }
}

#[test]
fn a_park_until_a_time_wakes_by_itself_in_the_live_run() {
    let env = git_env();
    let plan = write_plan(
        &env,
        "timed",
        r#"
version: 1
name: timed
defaults: { agent: sim }
tasks:
  - id: nap
    prompt: nap
    sim:
      - { reply: "slow", write: { n.txt: x }, delay: 120s }
      - { reply: "woke and finished", write: { n.txt: x } }
"#,
    );
    let child = env.spawn(&["run", &plan, "--json"], std::process::Stdio::piped());
    wait_for_an_attempt(&env, "timed", "nap");
    let parked = env.run(&["task", "suspend", "nap", "--until", "2s", "--json"]);
    assert_success(&parked);
    assert_eq!(json_of(&parked)["wake"]["on"], "time");
    // The run waits for the wake time, resumes the task, and passes.
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0));
    let run: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(run["tasks"][0]["state"], "passed", "{run}");
    let rows = journal_kinds(&env, "timed", "nap");
    let suspend = rows
        .iter()
        .find(|row| row["kind"] == "task.suspend")
        .unwrap();
    let resume = rows
        .iter()
        .find(|row| row["kind"] == "task.resume")
        .unwrap();
    // To the second (RFC 3339, UTC): the resume came at or after the time.
    assert!(
        resume["at"].as_str().unwrap()[..19]
            >= suspend["body"]["wake"]["at"].as_str().unwrap()[..19]
    );
    assert_eq!(resume["body"]["mode"], "warm");
}

const STEERED: &str = r#"
version: 1
name: steered
seats: 1
defaults: { agent: sim }
tasks:
  - id: steer
    prompt: write it
    sim:
      - { reply: "slow", write: { s.txt: one }, delay: 120s }
      - { reply: "after the pause", write: { s.txt: two } }
  - id: queued
    prompt: wait for the seat
    sim: [ { reply: "ok", write: { q.txt: q } } ]
"#;

#[test]
fn a_pause_keeps_the_seat_and_worktree_and_an_unpause_goes_on_warm() {
    let env = git_env();
    let plan = write_plan(&env, "steered", STEERED);
    let child = env.spawn(&["run", &plan, "--json"], std::process::Stdio::piped());
    wait_for_an_attempt(&env, "steered", "steer");
    wait_for_sim_sessions(&env, 1);
    assert_success(&env.run(&["task", "pause", "steer"]));
    // Paused: the journal says so, the worktree stays, the seat is still
    // held (the queued task has not started).
    let rows = journal_kinds(&env, "steered", "steer");
    assert!(rows.iter().any(|row| row["kind"] == "task.pause"));
    let status = json_of(&env.run(&["status", "--json"]));
    assert_eq!(
        status["lifecycle"]["steer"],
        json!({"paused": {"attempt": 2}}),
        "{status}"
    );
    let worktrees = env.project().join(".reprise/worktrees");
    let run_dir = worktrees
        .read_dir()
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    assert!(run_dir.join("steer").is_dir());
    assert!(
        !env.project()
            .join(".reprise/plans/steered/tasks/queued/journal.jsonl")
            .exists()
    );
    // A second pause is refused; an unpause goes on in the same session.
    assert_one_line_error(&env.run(&["task", "pause", "steer"]), 2, "already");
    let unpaused = json_of(&env.run(&["task", "unpause", "steer", "--json"]));
    assert_eq!(unpaused["mode"], "warm", "{unpaused}");
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0));
    let run: Value = serde_json::from_slice(&output.stdout).unwrap();
    let steer = &run["tasks"][0];
    assert_eq!(steer["state"], "passed", "{run}");
    assert_eq!(
        steer["attempts"][0]["session_id"],
        steer["attempts"][1]["session_id"]
    );
    assert_eq!(steer["attempts"][1]["mode"], "warm");
    assert_eq!(run["tasks"][1]["state"], "passed");
    assert_success(&env.run(&["journal", "verify", "steer"]));
    // No live run: there is nothing to pause.
    assert_one_line_error(&env.run(&["task", "pause", "steer"]), 2, "no live run");
}

#[test]
fn a_pause_past_its_upgrade_time_becomes_a_park_that_frees_everything() {
    pause_upgrades(STEERED, &["--upgrade-after", "1s"]);
}

#[test]
fn the_plans_pause_upgrade_after_upgrades_a_pause_given_no_flag() {
    // The key on the task, a longer one in defaults: the task's acts.
    let plan = STEERED
        .replace(
            "defaults: { agent: sim }",
            "defaults: { agent: sim, pause_upgrade_after: 1h }",
        )
        .replace(
            "    prompt: write it\n",
            "    prompt: write it\n    pause_upgrade_after: 1s\n",
        );
    assert_ne!(plan, STEERED);
    pause_upgrades(&plan, &[]);
}

/// A pause is shown as it takes hold: a line in the run's text output with
/// the unpause command and the upgrade time, and a `task.paused` event.
#[test]
fn a_pause_is_shown_live_in_text_and_events() {
    let text = STEERED.replace(
        "defaults: { agent: sim }",
        "defaults: { agent: sim, pause_upgrade_after: 1s }",
    );
    for output in ["text", "events"] {
        let env = git_env();
        let plan = write_plan(&env, "steered", &text);
        let mut args = vec!["run", plan.as_str()];
        if output == "events" {
            args.push("--events");
        }
        let child = env.spawn(&args, std::process::Stdio::piped());
        wait_for_an_attempt(&env, "steered", "steer");
        wait_for_sim_sessions(&env, 1);
        assert_success(&env.run(&["task", "pause", "steer"]));
        let ran = child.wait_with_output().unwrap();
        assert_eq!(ran.status.code(), Some(3));
        let printed = String::from_utf8_lossy(&ran.stdout).into_owned();
        if output == "text" {
            assert!(
                printed.contains(
                    "[steer] attempt 1 paused: its worktree, seat and budget kept; a park after 1s; go on: reprise task unpause steer"
                ),
                "{printed}"
            );
        } else {
            let paused: Vec<Value> = printed
                .lines()
                .map(|line| serde_json::from_str::<Value>(line).unwrap())
                .filter(|event| event["event"] == "task.paused")
                .collect();
            assert_eq!(paused.len(), 1, "{printed}");
            assert_eq!(paused[0]["task"], "steer");
            assert_eq!(paused[0]["upgrade_after_ms"], 1000);
        }
    }
}

/// Pauses the running `steer` task of `text` (a STEERED plan) with `flags`
/// and shows the pause turn into a park that frees everything.
fn pause_upgrades(text: &str, flags: &[&str]) {
    let env = git_env();
    let plan = write_plan(&env, "steered", text);
    let child = env.spawn(&["run", &plan, "--json"], std::process::Stdio::piped());
    wait_for_an_attempt(&env, "steered", "steer");
    wait_for_sim_sessions(&env, 1);
    let mut pause = vec!["task", "pause", "steer"];
    pause.extend_from_slice(flags);
    assert_success(&env.run(&pause));
    let output = child.wait_with_output().unwrap();
    // The pause became a park: the seat went to the queued task, the run
    // ends with `steer` parked.
    assert_eq!(output.status.code(), Some(3));
    let run: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(run["tasks"][0]["state"], "suspended", "{run}");
    assert_eq!(run["tasks"][1]["state"], "passed", "{run}");
    let rows = journal_kinds(&env, "steered", "steer");
    let suspend = rows
        .iter()
        .find(|row| row["kind"] == "task.suspend")
        .unwrap();
    assert_eq!(suspend["body"]["cause"], "pause_upgrade");
    let pause = rows.iter().find(|row| row["kind"] == "task.pause").unwrap();
    assert_eq!(pause["body"]["upgrade_after_ms"], 1000, "{pause}");
    assert_every_release_has_its_receipt(&env);
    let releases = released(&env, &suspend["event_hash"]);
    assert_eq!(releases.len(), 4);
    assert_eq!(releases[1].1["removed"], true);
    // And it resumes like any park.
    assert_success(&env.run(&["task", "resume", "steer"]));
}

#[test]
fn permissions_narrowed_while_parked_refuse_the_resume_and_restored_ones_allow_it() {
    let env = git_env();
    let aside = outside_dir(&env, "aside");
    let text = |paths: &str| {
        format!(
            r#"
version: 1
name: granted
defaults: {{ agent: sim }}
tasks:
  - id: one
    prompt: one
    allowed_paths: [{paths}]
    sim:
      - {{ reply: "slow", write: {{ one.txt: x }}, delay: 120s }}
      - {{ reply: "done", write: {{ one.txt: x }} }}
"#
        )
    };
    let wide = text(&format!("\"{}\", \"*.txt\"", aside.display()));
    let plan = write_plan(&env, "granted", &wide);
    park_tasks(&env, &plan, &["one"]);
    // The park bound the task's grant; its checkpoint names the park.
    let checkpoint: Value = serde_json::from_slice(
        &fs::read(
            env.reprise_dir()
                .join("plans/granted/tasks/one/checkpoint.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let rows = journal_kinds(&env, "granted", "one");
    let suspend = rows
        .iter()
        .find(|row| row["kind"] == "task.suspend")
        .unwrap();
    assert_eq!(checkpoint["park"], suspend["event_hash"]);
    assert!(!suspend["body"]["grant_hash"].as_str().unwrap().is_empty());
    // An allowed path taken away while it waited: refused, nothing written.
    write_plan(&env, "granted", &text("\"*.txt\""));
    let journal = env
        .project()
        .join(".reprise/plans/granted/tasks/one/journal.jsonl");
    let before = fs::read(&journal).unwrap();
    assert_one_line_error(&env.run(&["task", "resume", "one"]), 2, "narrowed");
    assert_eq!(fs::read(&journal).unwrap(), before);
    // Given back, the resume goes on and carries the grant.
    write_plan(&env, "granted", &wide);
    assert_success(&env.run(&["task", "resume", "one"]));
    let grants = audit_rows(&env, "task.grant_continuation");
    assert_eq!(grants.len(), 1);
    assert_eq!(
        grants[0]["body"]["grant_hash"],
        suspend["body"]["grant_hash"]
    );
    let verified = json_of(&env.run(&["audit", "verify-suspension", "one", "--json"]));
    assert_eq!(verified["status"], "verified", "{verified}");
}

/// The session the engine chose for `task`'s first attempt, once the sim
/// has opened its transcript (bounded wait).
fn wait_for_the_new_session(env: &Env, plan: &str, task: &str) -> String {
    let session = journal_kinds(env, plan, task)
        .into_iter()
        .find(|row| row["kind"] == "attempt.started")
        .and_then(|row| row["body"]["session"]["new"].as_str().map(str::to_owned))
        .expect("the engine chose the session id");
    let transcript = env.reprise_dir().join(format!("sim/{session}.jsonl"));
    assert!(
        wait_until(std::time::Duration::from_secs(60), || transcript.is_file()),
        "the sim never opened its session"
    );
    session
}

/// A command agent that, when it is told to stop, copies the journal and
/// the audit chain as they are at that moment, so a test sees what was
/// recorded before the agent was halted.
fn halt_witness_plan(env: &Env, dir: &Path) -> String {
    let state = env.reprise_dir();
    write_plan(
        env,
        "halted",
        &format!(
            r#"
version: 1
name: halted
tasks:
  - id: edit
    prompt: edit shop.py
    # It reads the state directory, which a contained agent cannot see.
    containment: off
    agent: command
    sandbox: none
    timeout: 5m
    allowed_paths: ["{dir}"]
    command: [sh, -c, "if [ -e {dir}/agent ]; then echo resumed; exit 0; fi; trap 'cat {state}/audit/audit.jsonl > {dir}/audit.at_halt; cat {state}/plans/halted/tasks/edit/journal.jsonl > {dir}/journal.at_halt; exit 1' TERM; echo $$ > {dir}/agent; sleep 300 & wait"]
"#,
            dir = dir.display(),
            state = state.display()
        ),
    )
}

fn kinds_in(text: &str) -> Vec<String> {
    text.lines()
        .map(|line| {
            serde_json::from_str::<Value>(line).unwrap()["kind"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

#[test]
fn a_park_s_row_and_receipt_are_written_before_its_agent_is_halted() {
    let env = git_env();
    let dir = outside_dir(&env, "halt");
    let plan = halt_witness_plan(&env, &dir);
    let child = env.spawn(&["run", &plan], std::process::Stdio::null());
    wait_for_file(&dir.join("agent"));
    assert_success(&env.run(&["task", "suspend", "edit"]));
    assert_eq!(child.wait_with_output().unwrap().status.code(), Some(3));
    // When the agent was told to stop, the journal held the park's row and
    // the audit chain its receipt; no release was recorded yet.
    let journal = wait_for_file(&dir.join("journal.at_halt"));
    let audit = wait_for_file(&dir.join("audit.at_halt"));
    let journal = kinds_in(&journal);
    assert!(
        journal.iter().any(|kind| kind == "task.suspend"),
        "{journal:?}"
    );
    assert!(
        !journal.iter().any(|kind| kind == "attempt.finished"),
        "{journal:?}"
    );
    let audit = kinds_in(&audit);
    assert_eq!(audit.last().unwrap(), "task.suspend_receipt", "{audit:?}");
    assert!(
        !audit
            .iter()
            .any(|kind| kind == "task.suspend_resource_release")
    );
    // The journal: the park, then the attempt it stopped.
    let rows: Vec<String> = journal_kinds(&env, "halted", "edit")
        .iter()
        .map(|row| row["kind"].as_str().unwrap().to_owned())
        .collect();
    let suspend = rows.iter().position(|kind| kind == "task.suspend").unwrap();
    let finished = rows
        .iter()
        .rposition(|kind| kind == "attempt.finished")
        .unwrap();
    assert!(suspend < finished, "{rows:?}");
    assert_every_release_has_its_receipt(&env);
    assert_success(&env.run(&["journal", "verify", "edit"]));
    assert_success(&env.run(&["audit", "verify-suspension", "edit"]));
    // It resumes and finishes.
    let resumed = json_of(&env.run(&["task", "resume", "edit", "--json"]));
    assert_eq!(resumed["tasks"][0]["state"], "passed", "{resumed}");
    let verdict = json_of(&env.run(&["audit", "verify-suspension", "edit", "--json"]));
    assert_eq!(verdict["status"], "verified", "{verdict}");
}

#[test]
fn a_pause_s_row_is_written_before_its_agent_is_halted() {
    let env = git_env();
    let dir = outside_dir(&env, "halt");
    let plan = halt_witness_plan(&env, &dir);
    let child = env.spawn(&["run", &plan], std::process::Stdio::null());
    wait_for_file(&dir.join("agent"));
    assert_success(&env.run(&["task", "pause", "edit"]));
    let journal = wait_for_file(&dir.join("journal.at_halt"));
    assert_eq!(
        kinds_in(&journal).last().unwrap(),
        "task.pause",
        "{journal}"
    );
    assert_success(&env.run(&["task", "unpause", "edit"]));
    assert_eq!(child.wait_with_output().unwrap().status.code(), Some(0));
    assert_success(&env.run(&["journal", "verify", "edit"]));
}

#[test]
fn a_checkpoint_rewritten_to_match_narrowed_permissions_is_refused_and_seen() {
    use reprise_store::agent_checkpoint::AgentCheckpoint;
    let env = git_env();
    let aside = outside_dir(&env, "aside");
    let text = |paths: &str| {
        format!(
            r#"
version: 1
name: granted
defaults: {{ agent: sim }}
tasks:
  - id: one
    prompt: one
    allowed_paths: [{paths}]
    sim:
      - {{ reply: "slow", write: {{ one.txt: x }}, delay: 120s }}
      - {{ reply: "done", write: {{ one.txt: x }} }}
"#
        )
    };
    let wide = text(&format!("\"{}\", \"*.txt\"", aside.display()));
    let plan = write_plan(&env, "granted", &wide);
    park_tasks(&env, &plan, &["one"]);
    let file = env
        .reprise_dir()
        .join("plans/granted/tasks/one/checkpoint.json");
    let original = fs::read(&file).unwrap();
    // The permissions narrowed while it waited, and checkpoint.json is
    // rewritten to the narrowed grant, its grant hash recomputed (no key
    // needed): the narrowing check alone would pass.
    write_plan(&env, "granted", &text("\"*.txt\""));
    let parked: AgentCheckpoint = serde_json::from_slice(&original).unwrap();
    let mut grant = parked.grant.clone();
    grant.allowed_paths.retain(|path| path == "*.txt");
    let forged = AgentCheckpoint::new(
        grant,
        parked.task_id.clone(),
        parked.run_id.clone(),
        parked.park,
    )
    .unwrap();
    let mut bytes = reprise_core::canonical::to_canonical_vec(&forged).unwrap();
    bytes.push(b'\n');
    fs::write(&file, &bytes).unwrap();
    let journal = env
        .project()
        .join(".reprise/plans/granted/tasks/one/journal.jsonl");
    let before = fs::read(&journal).unwrap();
    assert_one_line_error(
        &env.run(&["task", "resume", "one"]),
        2,
        "is not the one its park bound",
    );
    assert_eq!(
        fs::read(&journal).unwrap(),
        before,
        "a refused resume wrote"
    );
    let verdict = env.run(&["audit", "verify-suspension", "one", "--json"]);
    assert_eq!(verdict.status.code(), Some(1));
    let verdict = json_of(&verdict);
    assert_eq!(verdict["status"], "failed", "{verdict}");
    assert_eq!(
        verdict["errors"][0]["code"], "checkpoint_unbound",
        "{verdict}"
    );
    // Put back as parked, the resume goes on, and the journal binds the
    // checkpoint's own hash, its grant and both rows.
    fs::write(&file, &original).unwrap();
    write_plan(&env, "granted", &wide);
    assert_success(&env.run(&["task", "resume", "one"]));
    let rows = journal_kinds(&env, "granted", "one");
    let find = |kind: &str| rows.iter().find(|row| row["kind"] == kind).unwrap().clone();
    let (suspend, bound, resume, continued) = (
        find("task.suspend"),
        find("task.agent_checkpoint"),
        find("task.resume"),
        find("task.grant_continuation"),
    );
    let own = AgentCheckpoint::own_hash(&parked).unwrap().to_hex();
    assert_eq!(bound["body"]["checkpoint"], own.as_str());
    assert_eq!(continued["body"]["checkpoint"], own.as_str());
    assert_eq!(continued["body"]["park"], suspend["event_hash"]);
    assert_eq!(continued["body"]["resume"], resume["event_hash"]);
    assert_eq!(
        continued["body"]["grant_hash"],
        suspend["body"]["grant_hash"]
    );
    let verified = json_of(&env.run(&["audit", "verify-suspension", "one", "--json"]));
    assert_eq!(verified["status"], "verified", "{verified}");
}

/// Every file under the state directory but the snapshot stores, with its
/// bytes: what a refused resume must leave as it was.
fn state_files(env: &Env) -> Vec<(PathBuf, Vec<u8>)> {
    fn walk(dir: &Path, out: &mut Vec<(PathBuf, Vec<u8>)>) {
        for entry in fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                if !path.ends_with("snapshots") && !path.ends_with("locks") {
                    walk(&path, out);
                }
            } else if let Ok(bytes) = fs::read(&path) {
                out.push((path, bytes));
            }
        }
    }
    let mut out = Vec::new();
    walk(&env.reprise_dir(), &mut out);
    out.sort();
    out
}

fn park_row(env: &Env, plan: &str, task: &str) -> Value {
    journal_kinds(env, plan, task)
        .into_iter()
        .rfind(|row| row["kind"] == "task.suspend")
        .unwrap()
}

#[test]
fn an_approval_file_the_audit_chain_does_not_bind_lets_no_resume_run() {
    let env = git_env();
    let plan = write_plan(&env, "parkable", PARKABLE);
    let child = env.spawn(&["run", &plan], std::process::Stdio::null());
    wait_for_an_attempt(&env, "parkable", "one");
    wait_for_sim_sessions(&env, 1);
    assert_success(&env.run(&["task", "suspend", "one", "--until", "approval"]));
    wait_for_an_attempt(&env, "parkable", "two");
    wait_for_sim_sessions(&env, 2);
    assert_success(&env.run(&["task", "suspend", "two"]));
    assert_eq!(child.wait_with_output().unwrap().status.code(), Some(3));
    // A copy of the project (a backup), adopted and approved there: its
    // approval file is signed with the same key, but this state
    // directory's audit chain holds no task.approval row for it.
    let copy = env.temp.path().join("copy");
    let copied = std::process::Command::new("cp")
        .args(["-a"])
        .arg(env.project())
        .arg(&copy)
        .status()
        .unwrap();
    assert!(copied.success());
    let in_copy = |args: &[&str]| {
        let mut command = env.command(args);
        command.current_dir(&copy);
        command.output().unwrap()
    };
    assert_success(&in_copy(&["init"]));
    assert_success(&in_copy(&["approve", "one"]));
    let park = park_row(&env, "parkable", "one")["event_hash"]
        .as_str()
        .unwrap()
        .to_owned();
    let relative = format!("approvals/parkable/one/{park}.json");
    let target = env.reprise_dir().join(&relative);
    fs::create_dir_all(target.parent().unwrap()).unwrap();
    fs::copy(copy.join(".reprise").join(&relative), &target).unwrap();
    let before = state_files(&env);
    assert_one_line_error(
        &env.run(&["task", "resume", "one"]),
        2,
        "not bound by the audit chain",
    );
    assert!(state_files(&env) == before, "a refused resume wrote");
    // Approved here, it resumes.
    fs::remove_file(&target).unwrap();
    assert_success(&env.run(&["approve", "one"]));
    let resumed = env.run(&["task", "resume", "one"]);
    assert_eq!(code(&resumed), Some(3), "{}", stderr(&resumed));
    let verdict = json_of(&env.run(&["audit", "verify-suspension", "one", "--json"]));
    assert_eq!(verdict["status"], "verified", "{verdict}");
}

#[test]
fn a_tampered_park_snapshot_is_refused_before_anything_is_written() {
    let env = git_env();
    let plan = write_plan(&env, "parkable", PARKABLE);
    park_tasks(&env, &plan, &["one", "two"]);
    // The park snapshot of `one` is changed: its commit object no longer
    // holds the commit. The resume refuses and writes nothing at all.
    let park = park_row(&env, "parkable", "one");
    let releases = released(&env, &park["event_hash"]);
    let sandbox = &releases
        .iter()
        .find(|(name, _)| name == "sandbox")
        .unwrap()
        .1;
    let checkpoint = sandbox["checkpoint"].as_str().unwrap();
    let run_id = park["body"]["run_id"].as_str().unwrap();
    let object = env.reprise_dir().join(format!(
        "snapshots/{run_id}/one/objects/{}/{}",
        &checkpoint[..2],
        &checkpoint[2..]
    ));
    assert!(object.is_file(), "{}", object.display());
    fs::set_permissions(&object, fs::Permissions::from_mode(0o644)).unwrap();
    fs::write(&object, b"not a commit").unwrap();
    let before = state_files(&env);
    assert_one_line_error(&env.run(&["task", "resume", "one"]), 2, "snapshot");
    assert!(state_files(&env) == before, "a refused resume wrote");
}

#[test]
fn a_planted_resumed_marker_settles_nothing() {
    let env = git_env();
    let plan = write_plan(&env, "parkable", PARKABLE);
    park_tasks(&env, &plan, &["one", "two"]);
    // A `.resumed` marker planted for `two`'s park names a receipt the
    // audit chain does not hold: it settles nothing, the resume runs, and
    // the marker then names the real receipt.
    let park = park_row(&env, "parkable", "two");
    let hex = park["event_hash"].as_str().unwrap();
    let marker = env
        .reprise_dir()
        .join(format!("approvals/parkable/two/{hex}.resumed"));
    fs::create_dir_all(marker.parent().unwrap()).unwrap();
    fs::write(
        &marker,
        format!(
            "{{\"park\":\"{hex}\",\"resume_receipt\":\"{}\",\"v\":1}}\n",
            "ab".repeat(32)
        ),
    )
    .unwrap();
    let pending = json_of(&env.run(&["audit", "verify-suspension", "two", "--json"]));
    assert_eq!(pending["status"], "pending", "{pending}");
    let resumed = env.run(&["task", "resume", "two"]);
    assert_eq!(code(&resumed), Some(3), "{}", stderr(&resumed));
    let receipt = audit_rows(&env, "task.resume_receipt")
        .into_iter()
        .find(|row| row["body"]["park"] == hex)
        .unwrap();
    let written: Value = serde_json::from_slice(&fs::read(&marker).unwrap()).unwrap();
    assert_eq!(written["resume_receipt"], receipt["mac"]);
    let verdict = json_of(&env.run(&["audit", "verify-suspension", "two", "--json"]));
    assert_eq!(verdict["status"], "verified", "{verdict}");
}

#[test]
fn a_resume_is_a_decision_sealed_bound_and_stamped_with_its_reason() {
    let env = git_env();
    let plan = write_plan(&env, "parkable", PARKABLE);
    park_tasks(&env, &plan, &["one", "two"]);
    // `one` resumes warm (the policy's mode), `two` cold because asked.
    assert_eq!(code(&env.run(&["task", "resume", "one"])), Some(3));
    assert_success(&env.run(&["task", "resume", "two", "--mode", "cold"]));
    let spine = |task: &str| -> Vec<Value> {
        fs::read_to_string(
            env.reprise_dir()
                .join(format!("plans/parkable/tasks/{task}/spine.jsonl")),
        )
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
    };
    let bindings = audit_rows(&env, "retry.checkpoint_decision");
    for (task, mode, reason) in [("one", "warm", None), ("two", "cold", Some("requested"))] {
        let rows = journal_kinds(&env, "parkable", task);
        let at = rows
            .iter()
            .position(|row| row["kind"] == "task.resume")
            .unwrap();
        let resume = &rows[at];
        let decision = rows[..at]
            .iter()
            .rfind(|row| row["kind"] == "retry.decision")
            .unwrap_or_else(|| panic!("{task}'s resume has no decision row"));
        let hash = &resume["body"]["decision_hash"];
        assert!(hash.is_string(), "{resume}");
        assert_eq!(&decision["body"]["decision_hash"], hash);
        assert_eq!(decision["body"]["decision"]["retry_mode"], mode);
        assert_eq!(resume["body"]["mode"], mode);
        assert_eq!(
            resume["body"].get("mode_reason").and_then(Value::as_str),
            reason,
            "{resume}"
        );
        // Sealed in the spine, bound in the audit chain.
        assert!(
            spine(task).iter().any(|row| &row["decision_hash"] == hash),
            "{task}"
        );
        assert!(
            bindings
                .iter()
                .any(|row| &row["body"]["decision_hash"] == hash),
            "{task}: no audit binding"
        );
        // Stamped on the task as a retry's decision is.
        let shown = json_of(&env.run(&["task", "show", task, "--json"]));
        assert_eq!(&shown["metadata"]["retry_decision_hash"], hash, "{shown}");
        assert_eq!(shown["metadata"]["retry_mode"], mode, "{shown}");
        assert_success(&env.run(&["journal", "verify", task]));
    }
    assert_success(&env.run(&["audit", "verify"]));
}

#[test]
fn a_resume_queued_in_a_live_run_is_checked_again_when_it_starts() {
    let env = git_env();
    let plan = write_plan(
        &env,
        "queued",
        r#"
version: 1
name: queued
seats: 1
defaults: { agent: sim }
tasks:
  - id: one
    prompt: one
    sim:
      - { reply: "slow", write: { one.txt: x }, delay: 120s }
      - { reply: "done", write: { one.txt: x } }
  - id: two
    prompt: two
    sim:
      - { reply: "slow", write: { two.txt: x }, delay: 120s }
      - { reply: "done", write: { two.txt: x } }
"#,
    );
    let child = env.spawn(&["run", &plan], std::process::Stdio::null());
    wait_for_an_attempt(&env, "queued", "one");
    wait_for_sim_sessions(&env, 1);
    assert_success(&env.run(&["task", "suspend", "one", "--until", "approval"]));
    wait_for_an_attempt(&env, "queued", "two");
    wait_for_sim_sessions(&env, 2);
    assert_success(&env.run(&["approve", "one"]));
    // The live run takes the resume (the checks pass now) and queues it:
    // `two` holds the only seat.
    assert_success(&env.run(&["task", "resume", "one"]));
    // The approval is withdrawn while it waits for the seat.
    let park = park_row(&env, "queued", "one");
    let approval = env.reprise_dir().join(format!(
        "approvals/queued/one/{}.json",
        park["event_hash"].as_str().unwrap()
    ));
    fs::remove_file(&approval).unwrap();
    // The seat comes free; the resume is checked again where it would
    // write, refused, and the task stays parked.
    assert_success(&env.run(&["task", "suspend", "two"]));
    assert_eq!(child.wait_with_output().unwrap().status.code(), Some(3));
    let rows = journal_kinds(&env, "queued", "one");
    assert!(
        !rows.iter().any(|row| row["kind"] == "task.resume"),
        "a resume ran without its approval"
    );
    let verdict = json_of(&env.run(&["audit", "verify-suspension", "one", "--json"]));
    assert_eq!(verdict["status"], "pending", "{verdict}");
    // Approved again, it resumes.
    assert_success(&env.run(&["approve", "one"]));
    let resumed = env.run(&["task", "resume", "one"]);
    assert_eq!(code(&resumed), Some(3), "{}", stderr(&resumed));
    let verdict = json_of(&env.run(&["audit", "verify-suspension", "one", "--json"]));
    assert_eq!(verdict["status"], "verified", "{verdict}");
}
