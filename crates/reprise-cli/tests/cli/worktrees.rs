//! Where the work lives, as a user sees it: a fresh worktree per run and
//! task, dependents that build on their dependencies' result commits,
//! results delivered by `apply`, and git hygiene.

use super::*;
use reprise_testkit::wait_until;

/// A project that is a git repository with one commit.
pub(crate) fn git_env() -> Env {
    let env = Env::new();
    fs::write(env.project().join("shop.py"), "price = 10\n").unwrap();
    git(&env, &["init", "-q"]);
    git(&env, &["add", "shop.py"]);
    commit(&env, "start");
    env
}

pub(crate) fn git(env: &Env, args: &[&str]) -> String {
    let output = Command::new("git")
        .args(["-c", "user.name=user", "-c", "user.email=user@example.com"])
        .args(args)
        .current_dir(env.project())
        .env("HOME", env.temp.path().join("home"))
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout(&output).trim_end().to_owned()
}

fn commit(env: &Env, message: &str) {
    git(env, &["add", "-A"]);
    git(env, &["commit", "-qm", message]);
}

/// Every ref with the commit it points to, the index's bytes, and the
/// working tree's files (without the state directory): what a refusal must
/// leave byte-identical.
/// Refs, index bytes, and the working tree's files with their bytes.
type RepoState = (String, Vec<u8>, Vec<(PathBuf, Vec<u8>)>);

fn repo_state(env: &Env) -> RepoState {
    let refs = git(env, &["for-each-ref", "--format=%(refname) %(objectname)"]);
    let index = fs::read(env.project().join(".git/index")).unwrap();
    let mut files = Vec::new();
    snapshot_into(&env.project(), &mut files);
    files.retain(|(path, _)| {
        let relative = path.strip_prefix(env.project()).unwrap();
        !relative.starts_with(".reprise") && !relative.starts_with(".git")
    });
    files.sort();
    (refs, index, files)
}

/// A directory outside the project, which a plan may grant its agents
/// (they are contained: everything else outside the worktree is denied).
pub(crate) fn outside_dir(env: &Env, name: &str) -> PathBuf {
    let dir = env.temp.path().join(name);
    fs::create_dir(&dir).unwrap();
    dir
}

/// Shell that counts an agent's attempts in `count` (outside its worktree,
/// so a rollback does not reset it) and leaves the number in `$n`.
pub(crate) fn count_attempt(count: &Path) -> String {
    let count = count.display();
    format!("n=$(cat '{count}' 2>/dev/null || echo 0); n=$((n+1)); echo $n > '{count}'")
}

pub(crate) fn write_plan(env: &Env, name: &str, text: &str) -> String {
    let file = format!("{name}.yaml");
    fs::write(env.temp.path().join(&file), text).unwrap();
    env.temp.path().join(file).display().to_string()
}

/// `fix-discount` -> `add-tax` -> `changelog`: each step needs the one
/// before it in its tree, and a gate checks it.
const CHAIN: &str = r#"
version: 1
name: shop
seats: 2
defaults: { agent: command, max_retries: 0, timeout: 30s }
tasks:
  - id: fix-discount
    prompt: fix the discount
    command: [sh, -c, "echo 'discount = 0.1' >> shop.py; echo DONE"]
  - id: add-tax
    prompt: add the tax
    depends_on: [fix-discount]
    command: [sh, -c, "grep -q discount shop.py && echo 'tax = 0.2' >> shop.py; echo DONE"]
    gates:
      - { name: discount-kept, run: "grep -q discount shop.py && grep -q tax shop.py" }
  - id: changelog
    prompt: write the changelog
    depends_on: [add-tax]
    command: [sh, -c, "grep -q tax shop.py && printf -- '- tax\n' > CHANGELOG.md; echo DONE"]
    gates:
      - { name: written, run: "test -s CHANGELOG.md" }
"#;

fn run_json(env: &Env, plan: &str, extra: &[&str]) -> Value {
    let mut args = vec!["run", plan, "--json"];
    args.extend_from_slice(extra);
    let output = env.run(&args);
    assert_success(&output);
    json_of(&output)
}

pub(crate) fn task_json<'a>(run: &'a Value, id: &str) -> &'a Value {
    run["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|task| task["task_id"] == id)
        .unwrap_or_else(|| panic!("no task {id} in {run}"))
}

#[test]
fn a_chain_builds_on_each_result_and_apply_delivers_all_three() {
    let env = git_env();
    let plan = write_plan(&env, "chain", CHAIN);
    let head = git(&env, &["rev-parse", "HEAD"]);
    let run = run_json(&env, &plan, &[]);
    assert_eq!(run["ok"], true, "{run}");
    assert_eq!(run["workspace"]["kind"], "worktrees");
    assert_eq!(run["workspace"]["head"], head.as_str());
    let run_id = run["run_id"].as_str().unwrap();
    // add-tax's worktree holds fix-discount's change, in its own tree.
    let fix = task_json(&run, "fix-discount");
    let tax = task_json(&run, "add-tax");
    assert_eq!(fix["base_commit"], head.as_str());
    assert_eq!(tax["base_commit"], fix["result"]["commit"]);
    assert_eq!(
        git(
            &env,
            &["show", &format!("reprise/{run_id}/add-tax:shop.py")]
        ),
        "price = 10\ndiscount = 0.1\ntax = 0.2"
    );
    // Results are commits on reprise's own branches, with trailers.
    let branch = format!("reprise/{run_id}/add-tax");
    assert_eq!(tax["result"]["branch"], branch.as_str());
    let message = git(&env, &["log", "-1", "--format=%B", &branch]);
    for trailer in [
        format!("Reprise-Run: {run_id}"),
        "Reprise-Plan: shop".to_owned(),
        "Reprise-Task: add-tax".to_owned(),
        "Reprise-Attempt: 1".to_owned(),
        "Reprise-Journal-Head: ".to_owned(),
    ] {
        assert!(message.contains(&trailer), "{trailer} missing in {message}");
    }
    // The user's checkout is untouched until apply.
    assert_eq!(
        fs::read_to_string(env.project().join("shop.py")).unwrap(),
        "price = 10\n"
    );
    let dry = env.run(&["apply", "--dry-run", "--json"]);
    assert_success(&dry);
    assert_eq!(json_of(&dry)["applied"], false);
    assert_eq!(
        git(&env, &["rev-parse", "HEAD"]),
        head,
        "a dry run moves nothing"
    );
    let applied = env.run(&["apply", run_id]);
    assert_success(&applied);
    assert!(
        stdout(&applied).contains("fast-forward"),
        "{}",
        stdout(&applied)
    );
    assert_eq!(
        fs::read_to_string(env.project().join("shop.py")).unwrap(),
        "price = 10\ndiscount = 0.1\ntax = 0.2\n"
    );
    assert_eq!(
        fs::read_to_string(env.project().join("CHANGELOG.md")).unwrap(),
        "- tax\n"
    );
    assert_eq!(git(&env, &["status", "--porcelain"]), "", "a clean tree");
    let subjects = git(&env, &["log", "--format=%s"]);
    assert_eq!(subjects.lines().count(), 4, "{subjects}");
    // Applying again changes nothing.
    let again = env.run(&["apply", run_id]);
    assert_success(&again);
    assert!(stdout(&again).contains("already holds"));
}

#[test]
fn two_dependencies_merge_and_a_conflict_blocks_only_its_dependent() {
    let env = git_env();
    fs::write(env.project().join("notes.txt"), "one\n").unwrap();
    commit(&env, "notes");
    let plan = write_plan(
        &env,
        "fan",
        r#"
version: 1
name: fan
seats: 2
defaults: { agent: command, max_retries: 0, timeout: 30s }
tasks:
  - { id: left, prompt: l, command: [sh, -c, "echo left > left.txt; echo DONE"] }
  - { id: right, prompt: r, command: [sh, -c, "echo right > right.txt; echo DONE"] }
  - id: both
    prompt: b
    depends_on: [left, right]
    command: [sh, -c, "echo DONE"]
    gates: [ { name: sees-both, run: "test -e left.txt && test -e right.txt" } ]
  - { id: edit-a, prompt: a, command: [sh, -c, "echo alpha > notes.txt; echo DONE"] }
  - { id: edit-b, prompt: b, command: [sh, -c, "echo beta > notes.txt; echo DONE"] }
  - { id: after-both, prompt: x, depends_on: [edit-a, edit-b], command: [sh, -c, "echo DONE"] }
"#,
    );
    let output = env.run(&["run", &plan, "--json"]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let run = json_of(&output);
    assert_eq!(task_json(&run, "both")["state"], "passed", "{run}");
    let blocked = task_json(&run, "after-both");
    assert_eq!(blocked["state"], "blocked");
    let reason = blocked["reason"].as_str().unwrap();
    assert!(reason.starts_with("dependency_conflict"), "{reason}");
    assert!(reason.contains("notes.txt"), "{reason}");
    for id in ["left", "right", "edit-a", "edit-b"] {
        assert_eq!(task_json(&run, id)["state"], "passed", "{id}");
    }
}

#[test]
fn a_second_run_never_sees_the_first_runs_files_and_starts_at_the_new_head() {
    let env = git_env();
    let plan = write_plan(
        &env,
        "twice",
        r#"
version: 1
name: twice
defaults: { agent: command, max_retries: 0, timeout: 30s }
tasks:
  - id: greet
    prompt: greet
    command: [sh, -c, "if [ -e made.txt ]; then echo seen > seen.txt; fi; echo made > made.txt; echo DONE"]
    gates: [ { name: fresh, run: "test ! -e seen.txt" } ]
"#,
    );
    let first = run_json(&env, &plan, &[]);
    assert_eq!(first["ok"], true);
    fs::write(env.project().join("NEWS"), "news\n").unwrap();
    commit(&env, "news");
    let head = git(&env, &["rev-parse", "HEAD"]);
    let second = run_json(&env, &plan, &[]);
    assert_eq!(
        second["ok"], true,
        "the second run saw the first run's files"
    );
    let greet = task_json(&second, "greet");
    assert_eq!(greet["base_commit"], head.as_str());
    let result = greet["result"]["commit"].as_str().unwrap();
    assert_eq!(
        git(&env, &["show", &format!("{result}:NEWS")]),
        "news",
        "the worktree was at the new HEAD"
    );
    assert_ne!(greet["cwd"], task_json(&first, "greet")["cwd"]);
}

#[test]
fn user_branches_survive_byte_identical_and_hooks_never_run() {
    let env = git_env();
    // A branch named like the old scheme, one of the user's own, and a hook
    // that would leave a mark if git ran it for reprise.
    git(&env, &["branch", "reprise/greet"]);
    fs::write(env.project().join("extra"), "x\n").unwrap();
    commit(&env, "extra");
    git(&env, &["branch", "mine"]);
    let marker = env.temp.path().join("hook-ran");
    for hook in [
        "post-checkout",
        "pre-commit",
        "post-commit",
        "reference-transaction",
    ] {
        let path = env.project().join(".git/hooks").join(hook);
        reprise_testkit::write_executable(
            &path,
            &format!("#!/bin/sh\necho {hook} >> '{}'\n", marker.display()),
        )
        .unwrap();
    }
    let before = git(
        &env,
        &[
            "for-each-ref",
            "--format=%(refname) %(objectname)",
            "refs/heads/",
        ],
    );
    let plan = write_plan(
        &env,
        "hooks",
        r#"
version: 1
name: hooks
defaults: { agent: command, max_retries: 0, timeout: 30s }
tasks:
  - { id: greet, prompt: g, command: [sh, -c, "echo hi > greeting.txt; echo DONE"] }
"#,
    );
    let run = run_json(&env, &plan, &[]);
    assert_eq!(run["ok"], true);
    let after = git(
        &env,
        &[
            "for-each-ref",
            "--format=%(refname) %(objectname)",
            "refs/heads/",
        ],
    );
    let kept: Vec<&str> = after
        .lines()
        .filter(|line| !line.contains(run["run_id"].as_str().unwrap()))
        .collect();
    assert_eq!(kept, before.lines().collect::<Vec<_>>());
    assert!(
        !marker.exists(),
        "a hook ran: {:?}",
        fs::read_to_string(&marker)
    );
}

#[test]
fn two_plans_with_the_same_task_id_keep_separate_journals_and_lineages() {
    let env = git_env();
    let plan = |name: &str, text: &str| {
        write_plan(
            &env,
            name,
            &format!(
                "version: 1\nname: {name}\ndefaults: {{ agent: command, max_retries: 0, timeout: 30s }}\ntasks:\n  - {{ id: tests, prompt: t, command: [sh, -c, \"echo {text} > out.txt; echo DONE\"] }}\n"
            ),
        )
    };
    let alpha = plan("alpha", "a");
    let beta = plan("beta", "b");
    run_json(&env, &alpha, &[]);
    run_json(&env, &beta, &[]);
    let root = env.project().join(".reprise/plans");
    let journal_a = fs::read_to_string(root.join("alpha/tasks/tests/journal.jsonl")).unwrap();
    let journal_b = fs::read_to_string(root.join("beta/tasks/tests/journal.jsonl")).unwrap();
    assert_ne!(journal_a, journal_b);
    assert_eq!(
        journal_a
            .lines()
            .filter(|l| l.contains("task.started"))
            .count(),
        1
    );
    assert_eq!(
        journal_b
            .lines()
            .filter(|l| l.contains("task.started"))
            .count(),
        1
    );
    // A bare id is ambiguous outside the latest run's plan; each form works.
    for (args, plan) in [
        (&["journal", "verify", "tests", "--json"][..], "beta"),
        (&["journal", "verify", "alpha/tests", "--json"], "alpha"),
        (
            &["journal", "verify", "tests", "--plan", "alpha", "--json"],
            "alpha",
        ),
        (&["lineage", "show", "alpha/tests", "--json"], "alpha"),
    ] {
        let output = env.run(args);
        assert_success(&output);
        assert_eq!(json_of(&output)["plan"], plan, "{args:?}");
    }
    // Once the latest run is neither's, the bare id lists both.
    let other = write_plan(
        &env,
        "gamma",
        "version: 1\nname: gamma\ndefaults: { agent: command, max_retries: 0, timeout: 30s }\ntasks:\n  - { id: lint, prompt: l, command: [sh, -c, \"echo DONE\"] }\n",
    );
    run_json(&env, &other, &[]);
    let ambiguous = env.run(&["journal", "verify", "tests"]);
    assert_one_line_error(&ambiguous, 2, "alpha/tests, beta/tests");
}

/// Six independent tasks that each change a file.
const SIX: &str = r#"
version: 1
name: six
seats: 6
defaults: { agent: command, max_retries: 0, timeout: 30s }
tasks:
  - { id: t1, prompt: p, command: [sh, -c, "echo 1 > f1; echo DONE"] }
  - { id: t2, prompt: p, command: [sh, -c, "echo 2 > f2; echo DONE"] }
  - { id: t3, prompt: p, command: [sh, -c, "echo 3 > f3; echo DONE"] }
  - { id: t4, prompt: p, command: [sh, -c, "echo 4 > f4; echo DONE"] }
  - { id: t5, prompt: p, command: [sh, -c, "echo 5 > f5; echo DONE"] }
  - { id: t6, prompt: p, command: [sh, -c, "echo 6 > f6; echo DONE"] }
"#;

#[test]
fn fifty_fresh_runs_at_six_seats_never_race_in_git() {
    let env = git_env();
    let plan = write_plan(&env, "six", SIX);
    for round in 0..50 {
        // A fresh state directory each round, as a new user would have.
        let _ = fs::remove_dir_all(env.project().join(".reprise"));
        let output = env.run(&["run", &plan, "--seats", "6", "--json"]);
        assert!(
            output.status.success(),
            "round {round}: {}\n{}",
            stdout(&output),
            stderr(&output)
        );
        assert_eq!(json_of(&output)["ok"], true, "round {round}");
    }
}

#[test]
fn a_second_run_of_the_same_tasks_is_refused_while_the_first_runs() {
    let env = git_env();
    // The agent signals through a directory outside its worktree, which
    // the plan lets it write (agents are contained).
    let signals = outside_dir(&env, "signals");
    let gate = signals.join("release");
    let started = signals.join("started");
    let plan = write_plan(
        &env,
        "slow",
        &format!(
            r#"
version: 1
name: slow
defaults: {{ agent: command, max_retries: 0, timeout: 60s }}
tasks:
  - id: wait
    prompt: w
    command: [sh, -c, "touch '{}'; while [ ! -e '{}' ]; do sleep 0.05; done; echo DONE"]
    allowed_paths: ['{}']
"#,
            started.display(),
            gate.display(),
            signals.display()
        ),
    );
    let mut first = Command::new(BIN)
        .args(["run", &plan, "--json"])
        .current_dir(env.project())
        .env_clear()
        .env("HOME", env.temp.path().join("home"))
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the first run's agent is running (the run holds its task).
    assert!(
        wait_until(std::time::Duration::from_secs(60), || started.exists()),
        "the first run's agent never started"
    );
    // The first run goes on writing its own directory meanwhile (its logs
    // as they open, its throttled state.json): not the refused run's doing.
    let first_run = env.runs();
    assert_eq!(first_run.len(), 1, "{first_run:?}");
    let first_run = first_run[0].clone();
    let before = env.snapshot();
    let second = env.run(&["run", &plan]);
    assert_one_line_error(&second, 2, "is being run by R-");
    assert!(stderr(&second).contains(&format!("(pid {})", first.id())));
    let after = env.snapshot();
    let changed: Vec<_> = after
        .iter()
        .filter(|entry| !before.contains(entry))
        .map(|(path, _)| path)
        .filter(|path| !path.starts_with(&first_run))
        .collect();
    assert!(changed.is_empty(), "the refused run wrote {changed:?}");
    // Nothing outside the first run's directory disappeared either (the
    // first run may add files of its own meanwhile, so count the rest).
    let outside = |entries: &[(std::path::PathBuf, Vec<u8>)]| {
        entries
            .iter()
            .filter(|(path, _)| !path.starts_with(&first_run))
            .count()
    };
    assert_eq!(outside(&after), outside(&before));
    fs::write(&gate, "").unwrap();
    let status = first.wait().unwrap();
    assert!(status.success());
}

#[test]
fn a_removed_state_directory_does_not_break_the_next_run() {
    let env = git_env();
    let plan = write_plan(&env, "chain", CHAIN);
    run_json(&env, &plan, &[]);
    fs::remove_dir_all(env.project().join(".reprise")).unwrap();
    let again = run_json(&env, &plan, &[]);
    assert_eq!(again["ok"], true);
}

#[test]
fn apply_refuses_without_changing_the_tree_index_or_refs() {
    let env = git_env();
    let plan = write_plan(&env, "chain", CHAIN);
    let run = run_json(&env, &plan, &[]);
    let run_id = run["run_id"].as_str().unwrap().to_owned();
    // Uncommitted work in a file the result changes.
    fs::write(env.project().join("shop.py"), "price = 11\n").unwrap();
    let before = repo_state(&env);
    let refused = env.run(&["apply", &run_id]);
    assert_one_line_error(&refused, 1, "shop.py");
    assert_eq!(repo_state(&env), before);
    // A branch name that exists is refused too, as bad input.
    let taken = env.run(&["apply", &run_id, "--branch", "master"]);
    assert_one_line_error(&taken, 2, "already exists");
    assert_eq!(repo_state(&env), before);
    // A conflicting commit on the user's branch: refused, nothing moved.
    git(&env, &["commit", "-qam", "my own price"]);
    let committed = repo_state(&env);
    let conflict = env.run(&["apply", &run_id]);
    assert_one_line_error(&conflict, 1, "--branch");
    assert_eq!(repo_state(&env), committed);
    // --branch delivers it without touching the checkout.
    let branched = env.run(&["apply", &run_id, "--branch", "shop-work"]);
    assert_success(&branched);
    let (_, index, files) = repo_state(&env);
    assert_eq!((index, files), (committed.1, committed.2));
    let tip = git(&env, &["show", "shop-work:CHANGELOG.md"]);
    assert_eq!(tip, "- tax");
}

#[test]
fn uncommitted_changes_are_left_out_unless_asked_for() {
    let env = git_env();
    fs::write(env.project().join("draft.txt"), "mine\n").unwrap();
    let plan = write_plan(
        &env,
        "draft",
        r#"
version: 1
name: draft
defaults: { agent: command, max_retries: 0, timeout: 30s }
tasks:
  - id: look
    prompt: l
    command: [sh, -c, "echo DONE"]
    gates: [ { name: has-draft, run: "test -e draft.txt" } ]
"#,
    );
    let index_before = fs::read(env.project().join(".git/index")).unwrap();
    let without = env.run(&["run", &plan]);
    assert_eq!(without.status.code(), Some(1));
    assert!(
        stdout(&without).contains("1 uncommitted change not included (--include-uncommitted"),
        "{}",
        stdout(&without)
    );
    let with = env.run(&["run", &plan, "--include-uncommitted"]);
    assert_success(&with);
    assert!(stdout(&with).contains("with 1 uncommitted change included"));
    assert_eq!(
        fs::read(env.project().join(".git/index")).unwrap(),
        index_before
    );
    assert_eq!(git(&env, &["stash", "list"]), "");
    // A task that changed nothing records that, and commits nothing.
    let run = json_of(&env.run(&["status", "--json"]));
    assert_eq!(task_json(&run, "look")["result"]["commit"], Value::Null);
    assert_eq!(task_json(&run, "look")["result"]["files_changed"], 0);
}

/// After `--include-uncommitted`, `apply` brings onto the branch only what
/// the tasks changed: the user's uncommitted and untracked files stay as
/// they were, still uncommitted, and none of them lands in a commit. A task
/// that changed one of those files is refused by name, and nothing moves.
#[test]
fn apply_after_include_uncommitted_leaves_the_users_changes_uncommitted() {
    let env = git_env();
    fs::write(env.project().join("shop.py"), "price = 12\n").unwrap();
    fs::write(env.project().join("draft.txt"), "mine\n").unwrap();
    let plan = write_plan(
        &env,
        "tax",
        r#"
version: 1
name: tax
defaults: { agent: command, max_retries: 0, timeout: 30s }
tasks:
  - id: tax
    prompt: t
    command: [sh, -c, "echo 'tax = 0.2' > tax.py; echo DONE"]
    gates: [ { name: sees-draft, run: "test -e draft.txt && grep -q 12 shop.py" } ]
"#,
    );
    let run = run_json(&env, &plan, &["--include-uncommitted"]);
    let run_id = run["run_id"].as_str().unwrap();
    let head = git(&env, &["rev-parse", "HEAD"]);
    let dirty = git(&env, &["status", "--porcelain"]);
    let applied = env.run(&["apply", run_id]);
    assert_success(&applied);
    assert_eq!(git(&env, &["rev-parse", "HEAD~1"]), head);
    assert_eq!(git(&env, &["diff", "--name-only", &head, "HEAD"]), "tax.py");
    assert_eq!(git(&env, &["show", "HEAD:shop.py"]), "price = 10");
    assert_eq!(
        git(&env, &["status", "--porcelain"]),
        dirty,
        "the user's changes are still uncommitted"
    );
    for (file, text) in [
        ("shop.py", "price = 12\n"),
        ("draft.txt", "mine\n"),
        ("tax.py", "tax = 0.2\n"),
    ] {
        assert_eq!(fs::read_to_string(env.project().join(file)).unwrap(), text);
    }
    // Applied once, it is not applied again.
    let again = env.run(&["apply", run_id]);
    assert_success(&again);
    assert!(
        stdout(&again).contains("already holds"),
        "{}",
        stdout(&again)
    );
    assert_eq!(git(&env, &["rev-parse", "HEAD~1"]), head);
    // A task that edits files the user has uncommitted changes in (one
    // tracked, one untracked) is refused, naming them; nothing changes.
    let plan = write_plan(
        &env,
        "edit",
        r#"
version: 1
name: edit
defaults: { agent: command, max_retries: 0, timeout: 30s }
tasks:
  - id: edit
    prompt: e
    command: [sh, -c, "echo 'discount = 1' >> shop.py; echo more >> draft.txt; echo DONE"]
"#,
    );
    let run = run_json(&env, &plan, &["--include-uncommitted"]);
    let before = repo_state(&env);
    let refused = env.run(&["apply", run["run_id"].as_str().unwrap()]);
    assert_one_line_error(&refused, 1, "draft.txt, shop.py");
    assert_eq!(repo_state(&env), before);
}

/// `clean --branches` deletes a result branch only when its commits are on
/// another local branch (applied): the rest are kept and listed, unless
/// `--force`; `--dry-run` says which would go and which stay.
#[test]
fn clean_keeps_result_branches_never_applied_unless_forced() {
    let env = git_env();
    // Each run changes both files anew, so each has both branches.
    let plan = write_plan(
        &env,
        "notes",
        r#"
version: 1
name: notes
defaults: { agent: command, max_retries: 0, timeout: 30s }
tasks:
  - { id: one, prompt: o, command: [sh, -c, "date +%s%N > one.txt; echo DONE"] }
  - { id: two, prompt: t, command: [sh, -c, "date +%s%N > two.txt; echo DONE"] }
"#,
    );
    let applied = run_json(&env, &plan, &[])["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_success(&env.run(&["apply", &applied]));
    let unapplied = run_json(&env, &plan, &[])["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let branches = |run: &str| git(&env, &["branch", "--list", &format!("reprise/{run}/*")]);
    let kept = branches(&unapplied);
    assert_eq!(kept.lines().count(), 2, "{kept}");
    let before = env.snapshot();
    let dry = env.run(&["clean", "--dry-run", "--branches"]);
    assert_success(&dry);
    let text = stdout(&dry);
    assert_eq!(env.snapshot(), before, "a dry run removes nothing");
    for task in ["one", "two"] {
        assert!(
            text.contains(&format!("  branch   reprise/{applied}/{task}\n")),
            "{text}"
        );
        assert!(
            text.contains(&format!("  kept     reprise/{unapplied}/{task}:")),
            "{text}"
        );
    }
    assert!(text.contains("would remove 0 worktrees"), "{text}");
    assert!(text.contains(" and 2 branches; kept 2 "), "{text}");
    let cleaned = env.run(&["clean", "--branches"]);
    assert_success(&cleaned);
    assert!(stdout(&cleaned).contains("kept 2 "), "{}", stdout(&cleaned));
    assert_eq!(branches(&applied), "");
    assert_eq!(branches(&unapplied), kept);
    let forced = env.run(&["clean", "--branches", "--force"]);
    assert_success(&forced);
    assert_eq!(git(&env, &["branch", "--list", "reprise/*"]), "");
}

/// Run after run, a delivered task's worktree is removed and unregistered
/// when it ends: `git worktree list` holds the main checkout alone, while
/// `diff` and `apply` still deliver from the result branches. With
/// `--keep-worktrees` they stay.
#[test]
fn finished_tasks_worktrees_are_reclaimed_and_their_results_still_deliver() {
    let env = git_env();
    let plan = write_plan(
        &env,
        "reclaim",
        r#"
version: 1
name: reclaim
seats: 2
defaults: { agent: command, max_retries: 0, timeout: 30s }
tasks:
  - { id: edit, prompt: e, command: [sh, -c, "echo 'tax = 0.2' >> shop.py; echo DONE"] }
  - { id: look, prompt: l, command: [sh, -c, "cat shop.py; echo DONE"] }
"#,
    );
    let mut runs = Vec::new();
    for _ in 0..3 {
        let run = run_json(&env, &plan, &[]);
        assert_eq!(run["ok"], true, "{run}");
        let run_id = run["run_id"].as_str().unwrap().to_owned();
        assert!(
            !env.project()
                .join(".reprise/worktrees")
                .join(&run_id)
                .exists(),
            "the run's worktrees are gone"
        );
        assert_eq!(
            git(&env, &["worktree", "list"]).lines().count(),
            1,
            "{}",
            git(&env, &["worktree", "list"])
        );
        runs.push(run_id);
    }
    let diff = env.run(&["diff", &runs[0], "edit"]);
    assert_success(&diff);
    assert!(stdout(&diff).contains("+tax = 0.2"), "{}", stdout(&diff));
    assert_success(&env.run(&["apply", &runs[2]]));
    assert_eq!(
        fs::read_to_string(env.project().join("shop.py")).unwrap(),
        "price = 10\ntax = 0.2\n"
    );
    let kept = run_json(&env, &plan, &["--keep-worktrees"]);
    let kept_dir = env
        .project()
        .join(".reprise/worktrees")
        .join(kept["run_id"].as_str().unwrap());
    assert!(kept_dir.join("edit/shop.py").is_file());
    assert!(kept_dir.join("look/shop.py").is_file());
    // A kept worktree is left at its result, its own index matching it.
    let edit_dir = kept_dir.join("edit").display().to_string();
    assert_eq!(git(&env, &["-C", &edit_dir, "status", "--porcelain"]), "");
    assert_eq!(
        git(&env, &["-C", &edit_dir, "rev-parse", "HEAD"]),
        task_json(&kept, "edit")["result"]["commit"]
            .as_str()
            .unwrap()
    );
    assert_eq!(git(&env, &["worktree", "list"]).lines().count(), 3);
}

#[test]
fn clean_removes_finished_worktrees_and_asked_for_branches() {
    let env = git_env();
    let plan = write_plan(&env, "chain", CHAIN);
    let run = run_json(&env, &plan, &["--keep-worktrees"]);
    let run_id = run["run_id"].as_str().unwrap();
    let dir = env.project().join(".reprise/worktrees").join(run_id);
    let before = env.snapshot();
    let dry = env.run(&["clean", "--dry-run", "--branches"]);
    assert_success(&dry);
    assert!(
        stdout(&dry).contains("would remove 3 worktrees"),
        "{}",
        stdout(&dry)
    );
    assert_eq!(env.snapshot(), before, "a dry run removes nothing");
    // Never applied, its branches go only when forced.
    let cleaned = env.run(&["clean", "--branches", "--force"]);
    assert_success(&cleaned);
    assert!(stdout(&cleaned).contains("removed 3 worktrees"));
    assert!(!dir.exists());
    assert!(
        !env.project()
            .join(".reprise/snapshots")
            .join(run_id)
            .exists(),
        "its checkpoints go too"
    );
    assert_eq!(git(&env, &["branch", "--list", "reprise/*"]), "");
    assert_eq!(git(&env, &["worktree", "list"]).lines().count(), 1);
}

#[test]
fn outside_git_tasks_run_in_place_and_say_so() {
    let env = Env::new();
    let plan = write_plan(
        &env,
        "plain",
        "version: 1\nname: plain\ndefaults: { agent: command, max_retries: 0, timeout: 30s }\ntasks:\n  - { id: t, prompt: p, command: [sh, -c, \"echo hi > out.txt; echo DONE\"] }\n",
    );
    let output = env.run(&["run", &plan]);
    assert_success(&output);
    assert!(
        stdout(&output)
            .contains("tasks run in place in the project directory (not a git repository)"),
        "{}",
        stdout(&output)
    );
    assert!(env.project().join("out.txt").is_file());
    let apply = env.run(&["apply"]);
    assert_one_line_error(&apply, 2, "ran in place");
}

#[test]
fn a_layout_1_state_directory_is_refused_then_migrated_by_init() {
    let env = Env::new();
    env.init();
    let root = env.project().join(".reprise");
    fs::write(root.join("layout.json"), br#"{"v":1}"#).unwrap();
    fs::remove_dir_all(root.join("plans")).unwrap();
    fs::create_dir_all(root.join("tasks/old")).unwrap();
    fs::write(root.join("tasks/old/journal.jsonl"), "").unwrap();
    // Layout 1 came before witnesses: there is none beside the key.
    let witnesses = env.key_path().parent().unwrap().join("witness");
    fs::remove_dir_all(&witnesses).unwrap();
    let refused = env.run(&["journal", "verify", "old"]);
    assert_one_line_error(&refused, 2, "run `reprise init` to migrate it");
    let migrated = env.run(&["init"]);
    assert_success(&migrated);
    assert!(stdout(&migrated).contains("migrated the state directory to layout 2"));
    assert!(root.join("plans/unnamed/tasks/old/journal.jsonl").is_file());
    // The chain was adopted under a new witness before the migration row.
    let audit = env.run(&["audit", "verify", "--json"]);
    assert_success(&audit);
    assert!(witnesses.is_dir());
}

#[test]
fn a_chain_without_a_witness_is_refused_until_init_adopts_it() {
    let env = Env::new();
    env.init();
    let witnesses = env.key_path().parent().unwrap().join("witness");
    fs::remove_dir_all(&witnesses).unwrap();
    let missing = env.run(&["audit", "verify", "--json"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        stdout(&missing).contains("witness_missing"),
        "{}",
        stdout(&missing)
    );
    let adopted = env.run(&["init"]);
    assert_success(&adopted);
    assert!(
        stdout(&adopted).contains("adopted the audit chain (1 row,"),
        "{}",
        stdout(&adopted)
    );
    let verified = env.run(&["audit", "verify"]);
    assert_success(&verified);
    // A second init adopts nothing more.
    let again = env.run(&["init", "--json"]);
    assert_success(&again);
    assert_eq!(json_of(&again)["adopted_rows"], Value::Null);
}

#[test]
fn a_project_in_a_subdirectory_works_in_the_same_place_in_its_worktree() {
    let env = git_env();
    let sub = env.project().join("pkg");
    fs::create_dir(&sub).unwrap();
    fs::write(sub.join("lib.py"), "x = 1\n").unwrap();
    commit(&env, "pkg");
    let plan = write_plan(
        &env,
        "sub",
        "version: 1\nname: sub\ndefaults: { agent: command, max_retries: 0, timeout: 30s }\ntasks:\n  - id: edit\n    prompt: e\n    command: [sh, -c, \"test -e lib.py && echo 'y = 2' >> lib.py; echo DONE\"]\n    gates: [ { name: here, run: \"grep -q y lib.py\" } ]\n",
    );
    let output = Command::new(BIN)
        .args(["run", &plan, "--json"])
        .current_dir(&sub)
        .env_clear()
        .env("HOME", env.temp.path().join("home"))
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .output()
        .unwrap();
    assert_success(&output);
    let run = json_of(&output);
    let cwd = task_json(&run, "edit")["cwd"].as_str().unwrap().to_owned();
    assert!(cwd.ends_with("/edit/pkg"), "{cwd}");
    let branch = task_json(&run, "edit")["result"]["branch"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        git(&env, &["show", &format!("{branch}:pkg/lib.py")]),
        "x = 1\ny = 2"
    );
}

#[test]
fn a_retry_leg_builds_on_the_results_the_first_leg_kept() {
    let env = git_env();
    let flag = env.temp.path().join("second-leg");
    let plan = write_plan(
        &env,
        "legs",
        &format!(
            r#"
version: 1
name: legs
defaults: {{ agent: command, max_retries: 0, timeout: 30s }}
tasks:
  - {{ id: base, prompt: b, command: [sh, -c, "echo base > base.txt; echo DONE"] }}
  - id: top
    prompt: t
    depends_on: [base]
    command: [sh, -c, "echo top > top.txt; echo DONE"]
    gates: [ {{ name: later, run: "test -e base.txt && test -e '{}'" }} ]
"#,
            flag.display()
        ),
    );
    let first = env.run(&["run", &plan, "--json"]);
    assert_eq!(first.status.code(), Some(1));
    let first = json_of(&first);
    let run_id = first["run_id"].as_str().unwrap();
    fs::write(&flag, "").unwrap();
    let second = env.run(&["run", "--retry-failed", run_id, "--json"]);
    assert_success(&second);
    let second = json_of(&second);
    assert_eq!(
        task_json(&second, "top")["base_commit"],
        task_json(&first, "base")["result"]["commit"]
    );
    let applied = env.run(&["apply"]);
    assert_success(&applied);
    assert!(env.project().join("base.txt").is_file());
    assert!(env.project().join("top.txt").is_file());
}

#[test]
fn a_cold_retry_starts_from_the_checkpoint_and_a_failed_task_goes_back_to_its_base() {
    let env = git_env();
    // The agent counts its attempts in a directory outside its worktree,
    // which the plan lets it write (agents are contained).
    let counter = outside_dir(&env, "counter");
    let count = counter.join("count");
    let plan = write_plan(
        &env,
        "roll",
        &format!(
            r#"
version: 1
name: roll
defaults: {{ agent: command, timeout: 30s }}
tasks:
  - id: mend
    prompt: m
    max_retries: 1
    command: [sh, -c, "{counting}; if [ $n = 1 ]; then echo junk > junk.txt; echo broken >> shop.py; else [ -e junk.txt ] && echo seen > seen.txt; echo ok > done.txt; fi; echo DONE"]
    allowed_paths: ['{counter}']
    gates: [ {{ name: done, run: "test -e done.txt && test ! -e seen.txt && ! grep -q broken shop.py" }} ]
  - id: doomed
    prompt: d
    max_retries: 0
    command: [sh, -c, "echo junk > junk.txt; mkdir -p made; echo x > made/f; echo DONE"]
    gates: [ {{ name: never, run: "false" }} ]
"#,
            counting = count_attempt(&count),
            counter = counter.display()
        ),
    );
    let output = env.run(&["run", &plan, "--json"]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let run = json_of(&output);
    assert_eq!(task_json(&run, "mend")["state"], "passed", "{run}");
    let journal = fs::read_to_string(
        env.project()
            .join(".reprise/plans/roll/tasks/mend/journal.jsonl"),
    )
    .unwrap();
    assert!(journal.contains(r#""kind":"checkpoint.restored""#));
    assert!(journal.contains(r#""matches_checkpoint":true"#));
    // The rollback put back attempt 1's checkpoint exactly: attempt 2's
    // checkpoint is that one, recorded as reused, not a second copy.
    let rows: Vec<serde_json::Value> = journal
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let taken: Vec<&serde_json::Value> = rows
        .iter()
        .filter(|row| row["kind"] == "checkpoint.taken")
        .collect();
    let restored = rows
        .iter()
        .find(|row| row["kind"] == "checkpoint.restored")
        .unwrap();
    assert_eq!(taken.len(), 2, "{journal}");
    assert_eq!(taken[1]["body"]["attempt"], 2);
    assert_eq!(taken[1]["body"]["reused"], true, "{journal}");
    assert_eq!(
        taken[1]["body"]["checkpoint"],
        taken[0]["body"]["checkpoint"]
    );
    assert_eq!(
        restored["body"]["checkpoint"],
        taken[0]["body"]["checkpoint"]
    );
    let shadow = env.project().join(format!(
        ".reprise/snapshots/{}/mend/refs/checkpoints",
        run["run_id"].as_str().unwrap()
    ));
    assert_eq!(
        fs::read_dir(&shadow).unwrap().count(),
        1,
        "one snapshot in the store"
    );
    // The failed task's tree is back at its base; the failed tree is kept.
    let doomed = PathBuf::from(task_json(&run, "doomed")["cwd"].as_str().unwrap());
    assert!(!doomed.join("junk.txt").exists());
    assert!(!doomed.join("made").exists());
    let listed = env.run(&["checkpoint", "list", "doomed", "--json"]);
    assert_success(&listed);
    let checkpoints = json_of(&listed)["checkpoints"].as_array().unwrap().clone();
    let labels: Vec<&str> = checkpoints
        .iter()
        .map(|c| c["label"].as_str().unwrap())
        .collect();
    assert_eq!(labels, ["before attempt 1", "failed tree"]);
    let failed = checkpoints[1]["id"].as_str().unwrap();
    let before = env.snapshot();
    let dry = env.run(&[
        "checkpoint",
        "restore",
        "doomed",
        &failed[..12],
        "--dry-run",
        "--json",
    ]);
    assert_success(&dry);
    let changes = json_of(&dry)["changes"]["files"].to_string();
    assert!(
        changes.contains("junk.txt") && changes.contains("made/"),
        "{changes}"
    );
    assert_eq!(env.snapshot(), before, "a dry run changes nothing");
    let restored = env.run(&["checkpoint", "restore", "doomed", failed, "--json"]);
    assert_success(&restored);
    assert_eq!(json_of(&restored)["matches_checkpoint"], true);
    assert_eq!(
        fs::read_to_string(doomed.join("junk.txt")).unwrap(),
        "junk\n"
    );
    assert_eq!(fs::read_to_string(doomed.join("made/f")).unwrap(), "x\n");
    let audit = env.run(&["audit", "verify", "--json"]);
    assert_success(&audit);
    // Unknown checkpoints are bad input and change nothing.
    let before = env.snapshot();
    let unknown = env.run(&["checkpoint", "restore", "doomed", "0000000"]);
    assert_one_line_error(&unknown, 2, "no checkpoint 0000000");
    assert_eq!(env.snapshot(), before);
}

/// Issue 44: a real Python project whose gate imports its modules, so
/// Python writes `__pycache__` into the worktree. What the gates wrote is
/// taken out after them: the results hold only the agents' files, two
/// tasks that ran the same suite apply together (their byte-compiled
/// `shop.py` differed, each worktree's own mtime in it, and conflicted),
/// and a warm retry stays warm (the tree it resumes in is the one the
/// failed attempt left, not that plus the gates' caches).
#[test]
fn what_the_gates_write_is_not_the_agents_work() {
    let env = git_env();
    let plan = write_plan(
        &env,
        "pyc",
        r#"
version: 1
name: pyc
seats: 2
defaults: { agent: sim, max_retries: 1, retry_policy: warm }
tasks:
  - id: one
    prompt: p
    sim:
      - { reply: "DONE", write: { one.py: "ok = False\n" } }
      - { reply: "DONE", write: { one.py: "ok = True\n" } }
    gates: [ { name: imports, run: "python3 -c 'import shop, one; assert one.ok'" } ]
  - id: two
    prompt: p
    sim: [ { reply: "DONE", write: { two.py: "ok = True\n" } } ]
    gates: [ { name: imports, run: "python3 -c 'import shop, two; assert two.ok'" } ]
"#,
    );
    let run = run_json(&env, &plan, &[]);
    let run_id = run["run_id"].as_str().unwrap().to_owned();
    for (task, file) in [("one", "one.py"), ("two", "two.py")] {
        assert_eq!(task_json(&run, task)["state"], "passed", "{run}");
        let changed = git(
            &env,
            &[
                "diff",
                "--name-only",
                "HEAD",
                &format!("reprise/{run_id}/{task}"),
            ],
        );
        assert_eq!(
            changed.trim(),
            file,
            "{task}'s result holds more than its work"
        );
    }
    let one = task_json(&run, "one");
    let modes: Vec<&str> = one["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|attempt| attempt["mode"].as_str().unwrap())
        .collect();
    assert_eq!(modes, ["new", "warm"], "{one}");
    let applied = env.run(&["apply", &run_id]);
    assert_success(&applied);
    assert!(env.project().join("one.py").exists() && env.project().join("two.py").exists());
    assert!(!env.project().join("__pycache__").exists());
}
