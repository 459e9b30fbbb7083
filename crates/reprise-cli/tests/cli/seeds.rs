//! Seed requirements the audit table (docs/seed-audit.md) found without a
//! test of their own, each shown through the binary.

use super::recovery::journal_kinds;
use super::worktrees::{git_env, write_plan};
use super::*;

fn kinds(rows: &[Value]) -> Vec<&str> {
    rows.iter().filter_map(|row| row["kind"].as_str()).collect()
}

/// Seed 004: a task that only reads may skip the file checkpoint; one that
/// writes takes it before its attempt.
#[test]
fn a_read_only_task_takes_no_checkpoint_and_a_writing_one_does() {
    let env = git_env();
    let plan = write_plan(
        &env,
        "pair",
        r#"
version: 1
name: pair
defaults: { agent: command, max_retries: 0, timeout: 30s }
tasks:
  - id: look
    prompt: read it
    read_only: true
    command: [sh, -c, "cat shop.py > /dev/null; echo DONE"]
  - id: edit
    prompt: change it
    command: [sh, -c, "echo 'tax = 1' >> shop.py; echo DONE"]
"#,
    );
    let output = env.run(&["run", &plan, "--json"]);
    assert_success(&output);
    let run = json_of(&output)["run_id"].as_str().unwrap().to_owned();
    let look = journal_kinds(&env, "pair", "look");
    let edit = journal_kinds(&env, "pair", "edit");
    assert!(!kinds(&look).contains(&"checkpoint.taken"), "{look:?}");
    assert!(kinds(&edit).contains(&"checkpoint.taken"), "{edit:?}");
    let snapshots = env.project().join(".reprise/snapshots").join(&run);
    assert!(!snapshots.join("look").exists());
    assert!(snapshots.join("edit").is_dir());
}

/// Seed 004: after a success the checkpoint stays for the audit trail, and
/// still restores what it holds.
#[test]
fn a_passing_tasks_checkpoint_is_kept_and_still_restores() {
    let env = git_env();
    let plan = write_plan(
        &env,
        "one",
        r#"
version: 1
name: one
defaults: { agent: command, max_retries: 0, timeout: 30s, sandbox: none }
tasks:
  - id: edit
    prompt: change it
    command: [sh, -c, "echo 'price = 12' > shop.py; echo DONE"]
"#,
    );
    assert_success(&env.run(&["run", &plan, "--json"]));
    assert_eq!(
        fs::read_to_string(env.project().join("shop.py")).unwrap(),
        "price = 12\n"
    );
    let listed = env.run(&["checkpoint", "list", "edit", "--json"]);
    assert_success(&listed);
    let checkpoints = json_of(&listed)["checkpoints"].as_array().unwrap().clone();
    let first = checkpoints
        .first()
        .unwrap_or_else(|| panic!("no checkpoint kept: {}", stdout(&listed)));
    let id = first["id"].as_str().unwrap();
    let restored = env.run(&["checkpoint", "restore", "edit", id]);
    assert_success(&restored);
    assert_eq!(
        fs::read_to_string(env.project().join("shop.py")).unwrap(),
        "price = 10\n",
        "the kept checkpoint restores the tree from before the attempt"
    );
}

/// Seed 002: the suspend row records the journal's head at the park, the
/// row it follows, so the park is anchored where the journal stood.
#[test]
fn the_suspend_row_holds_the_journal_head_it_follows() {
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
      - { reply: "slow", delay: 120s }
      - { reply: "done" }
"#,
    );
    let child = env.spawn(&["run", &plan], std::process::Stdio::null());
    let journal = env
        .project()
        .join(".reprise/plans/inplace/tasks/edit/journal.jsonl");
    let sessions = env.project().join(".reprise/sim");
    let started = std::time::Instant::now();
    while !(fs::read_to_string(&journal).is_ok_and(|text| text.contains("attempt.started"))
        && fs::read_dir(&sessions).is_ok_and(|mut entries| entries.next().is_some()))
    {
        assert!(started.elapsed() < std::time::Duration::from_secs(60));
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_success(&env.run(&["task", "suspend", "edit"]));
    assert_eq!(child.wait_with_output().unwrap().status.code(), Some(3));
    let rows = journal_kinds(&env, "inplace", "edit");
    let at = rows
        .iter()
        .position(|row| row["kind"] == "task.suspend")
        .unwrap_or_else(|| panic!("no task.suspend in {:?}", kinds(&rows)));
    let head = &rows[at]["body"]["journal_head"];
    let before = &rows[at - 1];
    assert_eq!(head["seq"], before["seq"], "{head}");
    assert_eq!(head["event_hash"], before["event_hash"], "{head}");
}

/// Seed 002: a parked task whose journal is torn is not resumed until the
/// journal is repaired; the refusal names the repair and writes nothing.
#[test]
fn a_parked_task_with_a_torn_journal_is_resumed_only_after_its_repair() {
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
      - { reply: "slow", delay: 120s }
      - { reply: "done" }
"#,
    );
    let child = env.spawn(&["run", &plan], std::process::Stdio::null());
    let journal = env
        .project()
        .join(".reprise/plans/inplace/tasks/edit/journal.jsonl");
    let started = std::time::Instant::now();
    while !fs::read_to_string(&journal).is_ok_and(|text| text.contains("attempt.started")) {
        assert!(started.elapsed() < std::time::Duration::from_secs(60));
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_success(&env.run(&["task", "suspend", "edit"]));
    assert_eq!(child.wait_with_output().unwrap().status.code(), Some(3));
    // A crash mid-append: the last row loses its end.
    let whole = fs::read(&journal).unwrap();
    fs::write(&journal, &whole[..whole.len() - 20]).unwrap();
    let before = env.snapshot();
    let refused = env.run(&["task", "resume", "edit"]);
    assert_ne!(code(&refused), Some(0), "{}", stdout(&refused));
    let message = stderr(&refused);
    assert_eq!(message.trim_end().lines().count(), 1, "{message}");
    assert!(message.contains("replay repair"), "{message}");
    assert_eq!(env.snapshot(), before, "the refused resume wrote something");
    assert_success(&env.run(&["replay", "repair", "inplace/edit"]));
    let resumed = env.run(&["task", "resume", "edit"]);
    assert_success(&resumed);
}
