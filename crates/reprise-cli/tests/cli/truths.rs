//! Smaller truths a user meets (issue 25, items 6 to 8): a failed task's
//! work found by `diff`, a restore's dry run said from the restore's side,
//! plan errors that point and suggest, and labels that say what happened.

use super::recovery::journal_kinds;
use super::worktrees::{count_attempt, git_env, outside_dir, task_json, write_plan};
use super::*;

/// The run id on the first line of a run's text summary (`run R-...: ...`).
fn run_id_of_summary(text: &str) -> String {
    text.lines()
        .find_map(|line| line.strip_prefix("run "))
        .and_then(|rest| rest.split([':', ' ']).next())
        .unwrap_or_else(|| panic!("no run line in {text}"))
        .to_owned()
}

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
fn diff_of_a_failed_task_shows_its_failed_tree_and_the_summary_says_how_to_get_it_back() {
    let env = git_env();
    let plan = write_plan(&env, "doom", DOOMED);
    let output = env.run(&["run", &plan]);
    assert_eq!(code(&output), Some(1), "{}", stderr(&output));
    let summary = stdout(&output);
    let run = run_id_of_summary(&summary);
    let next = summary
        .lines()
        .find(|line| line.starts_with("next: "))
        .unwrap_or_else(|| panic!("no next: in {summary}"));
    assert!(
        next.contains(&format!("reprise diff {run} doomed")),
        "{next}"
    );
    assert!(next.contains("reprise checkpoint restore doomed"), "{next}");
    let listed = env.run(&["checkpoint", "list", "doomed", "--json"]);
    assert_success(&listed);
    let checkpoints = json_of(&listed)["checkpoints"].as_array().unwrap().clone();
    let failed = checkpoints
        .iter()
        .find(|checkpoint| checkpoint["label"] == "failed tree")
        .unwrap_or_else(|| panic!("{checkpoints:?}"))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let before = env.snapshot();
    let diff = env.run(&["diff", &run, "doomed"]);
    assert_success(&diff);
    let text = stdout(&diff);
    let first = text.lines().next().unwrap_or_default();
    assert!(first.contains("failed attempt"), "{text}");
    assert!(text.contains("+half-done"), "{text}");
    assert!(text.contains("-price = 10"), "{text}");
    assert!(
        text.contains(&format!(
            "reprise checkpoint restore doomed {} --run {run}",
            &failed[..12]
        )),
        "{text}"
    );
    let json = env.run(&["diff", &run, "doomed", "--json"]);
    assert_success(&json);
    let report = json_of(&json);
    assert_eq!(report["work"], "failed_attempt", "{report}");
    assert_eq!(report["checkpoint"], failed.as_str(), "{report}");
    let files = report["files"].to_string();
    assert!(
        files.contains("work.txt") && files.contains("shop.py"),
        "{files}"
    );
    assert_eq!(env.snapshot(), before, "a diff changes nothing");
}

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

/// A stand-in `codex` that names a new thread on each call: `ids[n-1]` on
/// its n-th, and replies DONE.
fn fake_codex(dir: &Path, ids: &[&str]) -> PathBuf {
    let count = dir.join("count");
    let mut cases = String::new();
    for (index, id) in ids.iter().enumerate() {
        cases.push_str(&format!("{}) id={id};; ", index + 1));
    }
    let script = dir.join("codex");
    reprise_testkit::write_executable(&script, &format!(
            "#!/bin/sh\ncase \"$1\" in --version) echo 'codex-cli 0.50.0'; exit 0;; esac\n{counting}\ncase $n in {cases}esac\n\
             printf '%s\\n' '{{\"type\":\"thread.started\",\"thread_id\":\"'$id'\"}}' '{{\"type\":\"turn.started\"}}' \
             '{{\"type\":\"item.completed\",\"item\":{{\"id\":\"item_0\",\"type\":\"agent_message\",\"text\":\"DONE\"}}}}' \
             '{{\"type\":\"turn.completed\",\"usage\":{{\"input_tokens\":10,\"cached_input_tokens\":0,\"output_tokens\":1}}}}'\n",
            counting = count_attempt(&count),
        )).unwrap();
    script
}

#[test]
fn status_tells_apart_two_codex_sessions_started_the_same_second() {
    let env = git_env();
    let fake = outside_dir(&env, "fake");
    // UUIDv7: the first 48 bits are the clock, so two sessions started
    // close together share their first 8 (and more) hex digits.
    let first = "019a3c5e-7f21-7a3b-8c4d-1111aaaa1111";
    let second = "019a3c5e-7f21-7e01-9d2c-2222bbbb2222";
    let codex = fake_codex(&fake, &[first, second]);
    let plan = write_plan(
        &env,
        "twins",
        &format!(
            r#"
version: 1
name: twins
agents: {{ codex: {{ bin: '{codex}' }} }}
defaults: {{ agent: codex, timeout: 30s, max_retries: 1, retry_policy: cold }}
tasks:
  - id: pair
    prompt: p
    allowed_paths: ['{fake}']
    gates: [ {{ name: second, run: "test $(cat '{count}') = 2" }} ]
"#,
            codex = codex.display(),
            fake = fake.display(),
            count = fake.join("count").display(),
        ),
    );
    let output = env.run(&["run", &plan, "--json"]);
    assert_success(&output);
    let run = json_of(&output);
    let attempts = task_json(&run, "pair")["attempts"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(attempts.len(), 2, "{run}");
    assert_eq!(attempts[0]["session_id"], first);
    assert_eq!(attempts[1]["session_id"], second);
    let status = env.run(&["status"]);
    let text = stdout(&status);
    let shown: Vec<String> = text
        .lines()
        .filter_map(|line| line.split("; session ").nth(1))
        .map(|rest| rest.split(';').next().unwrap().to_owned())
        .collect();
    assert_eq!(shown.len(), 2, "{text}");
    assert_ne!(shown[0], shown[1], "{text}");
    assert!(first.starts_with(&shown[0]), "{text}");
    assert!(second.starts_with(&shown[1]), "{text}");
}

/// The pattern in backticks of `docs/plan.md`'s row for `key`, anchored.
fn documented_pattern(key: &str) -> regex::Regex {
    let reference = include_str!("../../../../docs/plan.md");
    let row = reference
        .lines()
        .find(|line| line.starts_with(&format!("| `{key}` |")))
        .unwrap_or_else(|| panic!("no row for {key}"));
    let kind = row.split('|').nth(2).unwrap();
    let pattern = kind.split('`').nth(1).unwrap();
    regex::Regex::new(&format!("^(?:{pattern})$")).unwrap()
}

#[test]
fn task_ids_and_plan_names_are_what_the_plan_reference_says() {
    let env = Env::new();
    let ids = documented_pattern("tasks[].id");
    let names = documented_pattern("name");
    for candidate in ["Fix_Bug", "fix-bug", "a.b", "7up", "_fix", "-x", "x y", "é"] {
        fs::write(
            env.project().join("plan.yaml"),
            format!(
                "version: 1\nname: p\ntasks:\n  - {{ id: \"{candidate}\", prompt: x, agent: sim }}\n"
            ),
        )
        .unwrap();
        let task = env.run(&["plan", "check", "plan.yaml"]);
        assert_eq!(
            task.status.success(),
            ids.is_match(candidate),
            "task id {candidate:?}: {}",
            stderr(&task)
        );
        fs::write(
            env.project().join("plan.yaml"),
            format!("version: 1\nname: \"{candidate}\"\ntasks:\n  - {{ id: a, prompt: x, agent: sim }}\n"),
        )
        .unwrap();
        let plan = env.run(&["plan", "check", "plan.yaml"]);
        assert_eq!(
            plan.status.success(),
            names.is_match(candidate),
            "plan name {candidate:?}: {}",
            stderr(&plan)
        );
    }
}

#[test]
fn an_extra_argument_reprise_controls_is_pointed_at_by_line_and_column() {
    let env = Env::new();
    fs::write(
        env.project().join("plan.yaml"),
        "version: 1\nname: clash\nagents:\n  claude:\n    bin: /bin/true\n    args: [--verbose, --resume, abc]\ntasks:\n  - { id: fix, prompt: p, agent: claude }\n",
    )
    .unwrap();
    let before = env.snapshot();
    let output = env.run(&["plan", "check", "plan.yaml"]);
    assert_one_line_error(
        &output,
        2,
        "plan.yaml:6:23: agents.claude.args[1]: \"--resume\"",
    );
    assert_eq!(env.snapshot(), before);
}

#[test]
fn an_unknown_key_or_value_close_to_a_known_one_gets_a_suggestion() {
    let env = Env::new();
    let check = |plan: &str| {
        fs::write(env.project().join("plan.yaml"), plan).unwrap();
        env.run(&["plan", "check", "plan.yaml"])
    };
    let key = check(
        "version: 1\nname: p\ndefaults: { agent: sim }\ntasks:\n  - { id: a, prompt: x }\n  - { id: b, prompt: x, depend_on: [a] }\n",
    );
    assert_one_line_error(&key, 2, "did you mean \"depends_on\"");
    let value = check(
        "version: 1\nname: p\ndefaults: { agent: sim, retry_policy: wram }\ntasks:\n  - { id: a, prompt: x }\n",
    );
    assert_one_line_error(&value, 2, "did you mean \"warm\"");
    let agent = check("version: 1\nname: p\ntasks:\n  - { id: a, prompt: x, agent: cladue }\n");
    assert_one_line_error(&agent, 2, "did you mean \"claude\"");
    // Nothing close: no guess.
    let far = check(
        "version: 1\nname: p\ndefaults: { agent: sim }\ntasks:\n  - { id: a, prompt: x, zzz: 1 }\n",
    );
    assert_one_line_error(&far, 2, "unknown key \"zzz\"");
    assert!(!stderr(&far).contains("did you mean"), "{}", stderr(&far));
}

#[test]
fn the_man_page_names_no_page_that_does_not_exist() {
    let env = Env::new();
    let output = env.run(&["man"]);
    assert_success(&output);
    let page = stdout(&output);
    // clap_mangen's default lists `reprise-init(1)` and the like: pages
    // nothing installs.
    assert!(!page.contains("(1)"), "{page}");
    for command in [
        "reprise init",
        "reprise checkpoint restore",
        "reprise plan check",
        "reprise task resume",
    ] {
        let roff = command.replace('-', "\\-");
        assert!(page.contains(&roff), "no {command} in the page:\n{page}");
    }
}

#[test]
fn retry_failed_with_another_plans_file_is_refused() {
    let env = git_env();
    let plan = write_plan(&env, "doom", DOOMED);
    let output = env.run(&["run", &plan, "--json"]);
    assert_eq!(code(&output), Some(1));
    let run = json_of(&output)["run_id"].as_str().unwrap().to_owned();
    let other = write_plan(
        &env,
        "other",
        "version: 1\nname: other\ndefaults: { agent: sim }\ntasks:\n  - { id: doomed, prompt: x }\n",
    );
    let before = env.snapshot();
    let refused = env.run(&["run", &other, "--retry-failed", &run]);
    assert_one_line_error(&refused, 2, "plan other");
    assert!(
        stderr(&refused).contains("plan doom"),
        "{}",
        stderr(&refused)
    );
    assert_eq!(env.snapshot(), before, "nothing is written");
    // The same plan's file, given again, is still a new leg of the run.
    let again = env.run(&["run", &plan, "--retry-failed", &run, "--json"]);
    assert_eq!(code(&again), Some(1), "{}", stderr(&again));
}

#[test]
fn a_park_until_approval_names_approve_in_the_summary() {
    let env = git_env();
    let plan = write_plan(
        &env,
        "ask",
        r#"
version: 1
name: ask
defaults: { agent: sim, max_retries: 1, timeout: 60s }
tasks:
  - id: deploy
    prompt: d
    park_when_idle: 200ms
    sim:
      - { reply: "May I run make deploy?", delay: 30s }
      - { reply: "DONE" }
"#,
    );
    let output = env.run(&["run", &plan]);
    assert_eq!(code(&output), Some(3), "{}", stdout(&output));
    let text = stdout(&output);
    let parked = text
        .lines()
        .find(|line| line.trim_start().starts_with("PARKED"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(parked.contains("reprise approve deploy"), "{parked}");
    assert!(parked.contains("reprise task resume deploy"), "{parked}");
}

#[test]
fn a_gate_stopped_by_its_timeout_is_recorded_as_timed_out() {
    let env = git_env();
    let plan = write_plan(
        &env,
        "slow",
        r#"
version: 1
name: slow
defaults: { agent: command, timeout: 30s, max_retries: 0 }
tasks:
  - id: a
    prompt: x
    command: [sh, -c, "echo DONE"]
    gates: [ { name: slow, run: "sleep 30", timeout: 1s } ]
"#,
    );
    let output = env.run(&["run", &plan, "--json"]);
    assert_eq!(code(&output), Some(1), "{}", stderr(&output));
    let run = json_of(&output);
    let attempt = &task_json(&run, "a")["attempts"][0];
    assert_eq!(attempt["infra_kind"], "gate_timed_out", "{attempt}");
    let rows = journal_kinds(&env, "slow", "a");
    let text = serde_json::to_string(&rows).unwrap();
    assert!(text.contains("gate_timed_out"), "{text}");
    assert!(!text.contains("gate_crashed"), "{text}");
    assert!(!text.contains("gate_could_not_run"), "{text}");
}

#[test]
fn the_readme_status_names_nothing_built_as_next() {
    let readme = include_str!("../../../../README.md");
    let status = readme
        .split("## Status")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .unwrap();
    let next = status.split("Next:").nth(1).unwrap_or_default();
    // Built: the lifecycle is one pure state machine (reprise-core's
    // lifecycle), and parks are suspended and resumed durably.
    assert!(!next.contains("lifecycle"), "{next}");
    assert!(!next.contains("suspend"), "{next}");
    // Built: the contained spawn's cost (issue 23).
    assert!(!next.contains("spawn"), "{next}");
    // Built: the attention queue in a terminal (issue 30).
    assert!(!next.contains("watch"), "{next}");
}

/// An attack on the checkpoints' exactness: the agent writes a
/// `.gitattributes` that asks git to convert line endings (`text`) and to
/// expand `$Id$` (`ident`), then fails. The failed tree's checkpoint, and
/// its restore, must hold the agent's bytes exactly as they were: git's
/// attributes from the worktree do not apply to reprise's own store.
#[test]
fn a_checkpoint_ignores_the_attributes_an_agent_writes() {
    let env = git_env();
    let plan = write_plan(
        &env,
        "attrs",
        r#"
version: 1
name: attrs
defaults: { agent: command, timeout: 30s, max_retries: 0 }
tasks:
  - id: attrs
    prompt: a
    command: [sh, -c, "printf '* text ident\n' > .gitattributes; printf 'one\r\ntwo $Id$\r\n' > crlf.txt; echo DONE"]
    gates: [ { name: never, run: "false" } ]
"#,
    );
    let output = env.run(&["run", &plan, "--json"]);
    assert_eq!(code(&output), Some(1), "{}", stderr(&output));
    let run = json_of(&output)["run_id"].as_str().unwrap().to_owned();
    let listed = env.run(&["checkpoint", "list", "attrs", "--json"]);
    assert_success(&listed);
    let failed = json_of(&listed)["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .find(|checkpoint| checkpoint["label"] == "failed tree")
        .expect("a failed tree")["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let restored = env.run(&["checkpoint", "restore", "attrs", &failed]);
    assert_success(&restored);
    let tree = env
        .project()
        .join(".reprise/worktrees")
        .join(&run)
        .join("attrs");
    let bytes = std::fs::read(tree.join("crlf.txt")).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&bytes),
        "one\r\ntwo $Id$\r\n",
        "the restored file is the agent's, byte for byte"
    );
}
