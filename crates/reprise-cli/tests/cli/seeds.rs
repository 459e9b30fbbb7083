//! Seed requirements the audit table (docs/seed-audit.md) found without a
//! test of their own, each shown through the binary.

use super::recovery::{journal_kinds, wait_for_an_attempt, wait_for_journal_text};
use super::worktrees::{git_env, write_plan};
use super::*;
use reprise_testkit::{holds_for, wait_until};

/// One sim task `edit`, run in place, whose first attempt takes two
/// minutes (long enough to be parked) and whose second answers at once.
pub(crate) const SLOW_IN_PLACE: &str = r#"
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
"#;

fn kinds(rows: &[Value]) -> Vec<&str> {
    rows.iter().filter_map(|row| row["kind"].as_str()).collect()
}

/// A project whose sim task `edit` (plan `inplace`, no sandbox) was parked
/// by `task suspend` while its first attempt ran, once that attempt had
/// opened its session; with the task's journal.
fn parked_in_place() -> (Env, PathBuf) {
    let env = git_env();
    let plan = write_plan(&env, "inplace", SLOW_IN_PLACE);
    let child = env.spawn(&["run", &plan], std::process::Stdio::null());
    let journal = env
        .project()
        .join(".reprise/plans/inplace/tasks/edit/journal.jsonl");
    let sessions = env.project().join(".reprise/sim");
    assert!(
        wait_until(std::time::Duration::from_secs(60), || {
            fs::read_to_string(&journal).is_ok_and(|text| text.contains("attempt.started"))
                && fs::read_dir(&sessions).is_ok_and(|mut entries| entries.next().is_some())
        }),
        "the attempt never started with a session"
    );
    assert_success(&env.run(&["task", "suspend", "edit"]));
    assert_eq!(child.wait_with_output().unwrap().status.code(), Some(3));
    (env, journal)
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

/// Issue 44: a passed task's worktree is reclaimed, and its checkpoint
/// still restores: into a new directory reprise names (or `--to DIR`),
/// exactly (its workspace hash is the checkpoint's), recording nothing of
/// the task, whose tree it does not touch; `--dry-run` says so and writes
/// nothing; an occupied target is refused.
#[test]
fn a_checkpoint_of_a_task_whose_worktree_is_gone_restores_into_a_new_directory() {
    let env = git_env();
    let plan = write_plan(
        &env,
        "gone",
        r#"
version: 1
name: gone
defaults: { agent: command, max_retries: 0, timeout: 30s }
tasks:
  - id: edit
    prompt: change it
    command: [sh, -c, "echo 'price = 12' > shop.py; mkdir -p new; echo x > new/file; chmod 700 new; echo DONE"]
"#,
    );
    let run = json_of(&env.run(&["run", &plan, "--json"]))["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let worktree = env
        .project()
        .join(".reprise/worktrees")
        .join(&run)
        .join("edit");
    assert!(!worktree.exists(), "the passed task's worktree was kept");
    let listed = env.run(&["checkpoint", "list", "edit", "--json"]);
    assert_success(&listed);
    let id = json_of(&listed)["checkpoints"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let journal = fs::read(
        env.project()
            .join(".reprise/plans/gone/tasks/edit/journal.jsonl"),
    )
    .unwrap();

    let dry = env.run(&["checkpoint", "restore", "edit", &id, "--dry-run"]);
    assert_success(&dry);
    assert!(
        stdout(&dry).contains("(its worktree is gone)"),
        "{}",
        stdout(&dry)
    );
    assert!(stdout(&dry).contains("restore shop.py"), "{}", stdout(&dry));
    let into = env
        .project()
        .join(".reprise/restored")
        .join(&run)
        .join(format!("edit-{}", &id[..12]));
    assert!(!into.exists(), "a dry run wrote {}", into.display());

    let restored = env.run(&["checkpoint", "restore", "edit", &id, "--json"]);
    assert_success(&restored);
    let report = json_of(&restored);
    assert_eq!(report["matches_checkpoint"], true, "{report}");
    assert_eq!(report["into"], into.display().to_string());
    assert_eq!(
        fs::read_to_string(into.join("shop.py")).unwrap(),
        "price = 10\n"
    );
    assert!(!into.join("new").exists(), "the attempt's files came along");
    // Nothing of the task changed, so nothing is recorded.
    assert_eq!(
        fs::read(
            env.project()
                .join(".reprise/plans/gone/tasks/edit/journal.jsonl")
        )
        .unwrap(),
        journal
    );
    // Again into the same place: refused, nothing changed.
    let again = env.run(&["checkpoint", "restore", "edit", &id]);
    assert_eq!(again.status.code(), Some(2), "{}", stderr(&again));
    assert!(
        stderr(&again).contains("is not an empty directory"),
        "{}",
        stderr(&again)
    );
    // Elsewhere, as asked.
    let elsewhere = env.temp.path().join("at-checkpoint");
    let to = env.run(&[
        "checkpoint",
        "restore",
        "edit",
        &id,
        "--to",
        elsewhere.to_str().unwrap(),
    ]);
    assert_success(&to);
    assert_eq!(
        fs::read_to_string(elsewhere.join("shop.py")).unwrap(),
        "price = 10\n"
    );
}

/// Seed 002: the suspend row records the journal's head at the park, the
/// row it follows, so the park is anchored where the journal stood.
#[test]
fn the_suspend_row_holds_the_journal_head_it_follows() {
    let (env, _journal) = parked_in_place();
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
    let (env, journal) = parked_in_place();
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

/// A plan whose `judged` task fails its gate with its leg's word in its
/// reply (seed 001's legs): `DONE` passes. Each attempt's prompt is kept
/// in `aside` as `judged-<run>-<n>`.
fn legs_plan(aside: &Path, leg: &str, retries: u32) -> String {
    format!(
        r#"
version: 1
name: legs
defaults: {{ agent: command, sandbox: none, max_retries: {retries}, timeout: 10s }}
tasks:
  - id: judged
    prompt: "Say DONE"
    command: ["sh", "-c", "n=$(ls '{aside}' | grep -c \"judged-$REPRISE_RUN_ID\"); cat > '{aside}/judged-'$REPRISE_RUN_ID-$n; echo {leg}-$n"]
    allowed_paths: ["{aside}"]
    gates: [ {{ name: answer, result_matches: "^DONE" }} ]
"#,
        aside = aside.display()
    )
}

/// A project whose first leg (`plan.yaml`, `judged` replying LEG-ONE-0)
/// failed its gate once: the env, the prompts' directory and the run id.
fn first_leg() -> (Env, PathBuf, String) {
    let env = Env::new();
    env.init();
    let aside = env.temp.path().join("aside");
    fs::create_dir(&aside).unwrap();
    fs::write(
        env.project().join("plan.yaml"),
        legs_plan(&aside, "LEG-ONE", 0),
    )
    .unwrap();
    let first = env.run(&["run", "plan.yaml", "--json"]);
    assert_eq!(code(&first), Some(1), "{}", stderr(&first));
    let run_one = json_of(&first)["run_id"].as_str().unwrap().to_owned();
    (env, aside, run_one)
}

/// Seed 001: a kept reply that cannot be read is a warning, and the task
/// runs again with its plain prompt, not a broken quote.
#[test]
fn an_unreadable_kept_reply_is_a_warning_and_the_task_reruns_without_a_quote() {
    let (env, aside, run_one) = first_leg();
    let project = env.project();
    let kept = project.join(format!(".reprise/runs/{run_one}/failed/judged.out"));
    assert!(kept.is_file());
    // Unreadable: a directory where the reply was.
    fs::remove_file(&kept).unwrap();
    fs::create_dir(&kept).unwrap();
    fs::write(project.join("plan.yaml"), legs_plan(&aside, "DONE", 0)).unwrap();
    let second = env.run(&["run", "--retry-failed", &run_one]);
    assert_success(&second);
    let text = format!("{}{}", stdout(&second), stderr(&second));
    assert!(
        text.contains("kept reply unreadable") && text.contains("without a quote"),
        "{text}"
    );
    let prompts: Vec<String> = fs::read_dir(&aside)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| !name.contains(&run_one))
        .collect();
    assert_eq!(prompts.len(), 1, "{prompts:?}");
    let prompt = fs::read_to_string(aside.join(&prompts[0])).unwrap();
    assert_eq!(prompt, "Say DONE", "re-run with the plain prompt");
}

/// Seed 001: across processes the kept reply goes to the new leg's first
/// attempt only; a later retry in that leg hears its own attempt, not the
/// earlier leg's reply again.
#[test]
fn a_kept_reply_reaches_the_new_legs_first_attempt_only() {
    let (env, aside, run_one) = first_leg();
    let project = env.project();
    // Leg two fails twice more (one retry), with another word.
    fs::write(project.join("plan.yaml"), legs_plan(&aside, "LEG-TWO", 1)).unwrap();
    let second = env.run(&["run", "--retry-failed", &run_one, "--json"]);
    assert_eq!(code(&second), Some(1), "{}", stderr(&second));
    let run_two = json_of(&second)["run_id"].as_str().unwrap().to_owned();
    let prompt = |n: u32| fs::read_to_string(aside.join(format!("judged-{run_two}-{n}"))).unwrap();
    let (first_attempt, retry) = (prompt(0), prompt(1));
    assert!(first_attempt.contains("LEG-ONE-0"), "{first_attempt}");
    assert!(
        !retry.contains("LEG-ONE"),
        "the earlier leg's reply again: {retry}"
    );
    assert!(retry.contains("LEG-TWO-0"), "{retry}");
}

/// Seed 002: a resume reads the park's rows fail-closed: a suspend row
/// changed after the fact stops it, and nothing is written.
#[test]
fn a_resume_of_a_park_whose_row_was_changed_is_refused_and_writes_nothing() {
    let (env, journal) = parked_in_place();
    // The park's row says another session: the JSON stays valid, its hash
    // no longer matches.
    let text = fs::read_to_string(&journal).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let at = lines
        .iter()
        .position(|line| line.contains("\"kind\":\"task.suspend\""))
        .unwrap();
    let mut row: Value = serde_json::from_str(&lines[at]).unwrap();
    row["body"]["attempt"] = json!(99);
    lines[at] = serde_json::to_string(&row).unwrap();
    fs::write(&journal, lines.join("\n") + "\n").unwrap();
    let before = env.snapshot();
    let refused = env.run(&["task", "resume", "edit"]);
    assert_ne!(code(&refused), Some(0), "{}", stdout(&refused));
    let message = stderr(&refused);
    assert_eq!(message.trim_end().lines().count(), 1, "{message}");
    assert!(message.contains("does not verify"), "{message}");
    assert_eq!(env.snapshot(), before, "the refused resume wrote something");
}

/// Every production source file of the workspace, with its code (no
/// comments) up to its first test module (unit tests may build nonces and
/// markers freely).
fn production_sources() -> Vec<(PathBuf, String)> {
    fn walk(dir: &Path, found: &mut Vec<(PathBuf, String)>) {
        for entry in fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, found);
            } else if path.extension().is_some_and(|ext| ext == "rs")
                && path.file_name().is_some_and(|name| name != "tests.rs")
            {
                let text = fs::read_to_string(&path).unwrap();
                // Code only: comments may show a marker, as the fence's own
                // module documentation does.
                let production = text
                    .split("#[cfg(test)]")
                    .next()
                    .unwrap_or("")
                    .lines()
                    .filter(|line| !line.trim_start().starts_with("//"))
                    .collect::<Vec<_>>()
                    .join("\n");
                found.push((path, production));
            }
        }
    }
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut found = Vec::new();
    for entry in fs::read_dir(&crates).unwrap() {
        let src = entry.unwrap().path().join("src");
        if src.is_dir() {
            walk(&src, &mut found);
        }
    }
    assert!(
        found.len() > 50,
        "the walk found the sources: {}",
        found.len()
    );
    found
}

/// Seed 001: one fence implementation and one nonce minter. A second place
/// that builds quote markers, or makes a nonce from anything but the OS's
/// random source, would escape the fence's rules; this guard fails when one
/// appears.
#[test]
fn one_fence_and_one_nonce_minter_in_the_whole_workspace() {
    let sources = production_sources();
    let holding = |needle: &str| -> Vec<String> {
        sources
            .iter()
            .filter(|(_, text)| text.contains(needle))
            .map(|(path, text)| {
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                format!("{name} x{}", text.matches(needle).count())
            })
            .collect()
    };
    // The markers are written in one place: the fence.
    assert_eq!(holding("<<<QUOTE "), ["fence.rs x1"]);
    assert_eq!(holding("<<<END "), ["fence.rs x1"]);
    // A nonce is made in one place, from the OS's random source.
    assert_eq!(holding("Nonce::new("), ["task.rs x1"]);
    let minter = &sources
        .iter()
        .find(|(path, text)| {
            path.ends_with("reprise-engine/src/task.rs") && text.contains("Nonce::new(")
        })
        .expect("the engine's minter")
        .1;
    let at = minter.find("Nonce::new(").unwrap();
    let body = &minter[minter[..at].rfind("fn ").unwrap()..at];
    assert!(body.contains("getrandom::fill"), "{body}");
}

/// Seed 002: no cost is recorded while a task is parked, so its envelope's
/// rollup gives the parked window nothing: the spend before the park, the
/// park's own row and the resumed attempt's are all there is.
#[test]
fn the_parked_window_is_attributed_no_spend() {
    let env = git_env();
    let plan = write_plan(
        &env,
        "spend",
        r#"
version: 1
name: spend
budget_usd: "1.00"
tasks:
  - id: long
    prompt: do the long thing
    agent: sim
    budget_usd: "0.50"
    sim:
      - { reply: "first try", write: { long.txt: bad }, cost_usd: "0.10" }
      - { reply: "slow second try", write: { long.txt: good }, delay: 120s, cost_usd: "0.20" }
      - { reply: "resumed and finished", write: { long.txt: good }, cost_usd: "0.05" }
    gates: [ { name: good, run: "test \"$(cat long.txt)\" = good" } ]
"#,
    );
    let child = env.spawn(&["run", &plan, "--json"], std::process::Stdio::null());
    wait_for_journal_text(&env, "spend", "long", r#""attempt":2,"mode""#);
    assert_success(&env.run(&["task", "suspend", "long"]));
    assert_eq!(child.wait_with_output().unwrap().status.code(), Some(3));
    // Time passes while it is parked, and nothing writes to its journal
    // meanwhile; then it is resumed and passes.
    let journal = env
        .project()
        .join(".reprise/plans/spend/tasks/long/journal.jsonl");
    let parked = fs::read(&journal).unwrap();
    assert!(
        holds_for(std::time::Duration::from_millis(300), || {
            fs::read(&journal).is_ok_and(|now| now == parked)
        }),
        "the parked task's journal changed"
    );
    let resumed = env.run(&["task", "resume", "long", "--json"]);
    assert_success(&resumed);
    let resumed = json_of(&resumed);
    let rows = journal_kinds(&env, "spend", "long");
    let suspend = rows
        .iter()
        .position(|row| row["kind"] == "task.suspend")
        .unwrap();
    let resume = rows
        .iter()
        .position(|row| row["kind"] == "task.resume")
        .unwrap();
    let costs = |rows: &[Value]| -> Vec<u64> {
        rows.iter()
            .filter(|row| row["kind"] == "attempt.finished")
            .filter_map(|row| row["body"]["cost_micro_usd"].as_u64())
            .collect()
    };
    // The park's envelope holds what was spent before it: the first try.
    assert_eq!(
        rows[suspend]["body"]["envelope"]["spent_micro_usd"], 100_000,
        "{}",
        rows[suspend]
    );
    // Nothing between the park and the resume costs anything: the cut
    // second try reported no cost, and nothing ran while it was parked.
    assert_eq!(
        costs(&rows[suspend..resume]).iter().sum::<u64>(),
        0,
        "{:?}",
        &rows[suspend..resume]
    );
    // Every cost on record is an attempt's own: $0.10 before, nothing for
    // the attempt the park cut (the sim spends at the end of its step),
    // $0.05 after; the task's total is their sum.
    assert_eq!(costs(&rows), [100_000, 0, 50_000], "{rows:?}");
    let finished = rows.last().unwrap();
    assert_eq!(finished["kind"], "task.finished");
    assert_eq!(finished["body"]["spent_micro_usd"], 150_000, "{finished}");
    let long = &resumed["tasks"][0];
    assert_eq!(long["state"], "passed", "{resumed}");
}

/// Seed 002: a park with no grant to bind records an empty grant hash and
/// writes no agent checkpoint. A live run's park always has its plan; a
/// direct park of a task whose run died, once the run's plan file is gone,
/// does not.
#[test]
fn a_park_with_no_grant_to_bind_records_an_empty_grant_hash() {
    let env = git_env();
    let plan = write_plan(&env, "inplace", SLOW_IN_PLACE);
    let mut child = env.spawn(&["run", &plan], std::process::Stdio::null());
    let task_dir = env.project().join(".reprise/plans/inplace/tasks/edit");
    wait_for_an_attempt(&env, "inplace", "edit");
    child.kill().unwrap();
    child.wait().unwrap();
    fs::remove_file(&plan).unwrap();
    assert_success(&env.run(&["task", "suspend", "edit"]));
    let rows = journal_kinds(&env, "inplace", "edit");
    let suspend = rows
        .iter()
        .find(|row| row["kind"] == "task.suspend")
        .unwrap_or_else(|| panic!("no task.suspend in {:?}", kinds(&rows)));
    assert_eq!(suspend["body"]["grant_hash"], "", "{suspend}");
    assert!(!task_dir.join("checkpoint.json").exists());
    assert!(
        !kinds(&rows).contains(&"task.agent_checkpoint"),
        "{:?}",
        kinds(&rows)
    );
    // Its park still verifies, as one not bound to a grant.
    let verified = env.run(&["audit", "verify-suspension", "edit", "--json"]);
    assert_eq!(code(&verified), Some(0), "{}", stdout(&verified));
    assert_eq!(json_of(&verified)["status"], "pending");
}
