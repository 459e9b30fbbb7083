//! Smaller truths a user meets (issue 25, items 6 to 8): a failed task's
//! work found by `diff`, a restore's dry run said from the restore's side,
//! plan errors that point and suggest, and labels that say what happened.

use super::worktrees::{git_env, write_plan};
use super::*;

/// A task that changes the tree, then fails its only gate.
const DOOMED: &str = r#"
version: 1
name: doom
defaults: { agent: command, timeout: 30s, max_retries: 0 }
tasks:
  - id: doomed
    prompt: d
    command: [sh, -c, "echo half-done > work.txt; rm shop.py; echo DONE"]
    gates: [ { name: never, run: "false" } ]
"#;

#[test]
fn checkpoint_restore_dry_run_says_what_the_restore_will_do() {
    let env = git_env();
    let plan = write_plan(&env, "doom", DOOMED);
    let output = env.run(&["run", &plan, "--json"]);
    assert_eq!(code(&output), Some(1), "{}", stderr(&output));
    let listed = env.run(&["checkpoint", "list", "doomed", "--json"]);
    let checkpoints = json_of(&listed)["checkpoints"].as_array().unwrap().clone();
    let failed = checkpoints
        .iter()
        .find(|checkpoint| checkpoint["label"] == "failed tree")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // The tree is back at its base: restoring the failed tree brings the
    // agent's new file back and deletes the file it removed.
    let dry = env.run(&["checkpoint", "restore", "doomed", &failed, "--dry-run"]);
    assert_success(&dry);
    let text = stdout(&dry);
    let lines: Vec<String> = text
        .lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    assert!(lines.contains(&"restore work.txt".to_owned()), "{text}");
    assert!(lines.contains(&"delete shop.py".to_owned()), "{text}");
    let json = env.run(&[
        "checkpoint",
        "restore",
        "doomed",
        &failed,
        "--dry-run",
        "--json",
    ]);
    let files = json_of(&json)["changes"]["files"].clone();
    assert!(
        files
            .as_array()
            .unwrap()
            .contains(&json!(["A", "work.txt"])),
        "{files}"
    );
    assert!(
        files.as_array().unwrap().contains(&json!(["D", "shop.py"])),
        "{files}"
    );
}
