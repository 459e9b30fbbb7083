//! A run killed outright at any step of a task's life is finished by `run
//! --continue`: the debug build's crash points (`REPRISE_TEST_CRASH_AT`)
//! have the process kill itself with SIGKILL right after a step, as `kill
//! -9` would at that moment, and the continued run must end with every task
//! passed, its chains verifying and its results on their branches.

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;

use super::recovery::journal_kinds;
use super::seeds::SLOW_IN_PLACE;
use super::worktrees::{count_attempt, git, git_env, outside_dir, write_plan};
use super::*;

/// `first` fails its first attempt (rolled back, then retried cold) and
/// passes its second; `second` builds on its result.
fn crash_plan(env: &Env) -> String {
    let counter = outside_dir(env, "counter");
    write_plan(
        env,
        "crash",
        &format!(
            r#"
version: 1
name: crash
defaults: {{ agent: command, max_retries: 2, timeout: 30s, retry_policy: cold, rollback_on_retry: always }}
tasks:
  - id: first
    prompt: p
    allowed_paths: ['{counter}']
    command: [sh, -c, "{counting}; if [ $n -ge 2 ]; then echo good > f.txt; else echo bad > f.txt; fi; echo DONE"]
    gates: [ {{ name: good, run: "test \"$(cat f.txt)\" = good" }} ]
  - id: second
    prompt: p
    depends_on: [first]
    command: [sh, -c, "cat f.txt > g.txt; echo DONE"]
    gates: [ {{ name: built, run: "test \"$(cat g.txt)\" = good" }} ]
"#,
            counting = count_attempt(&counter.join("count")),
            counter = counter.display()
        ),
    )
}

/// Every step of each task's life in an uncut run: each journal row (by
/// kind and how many times it came), and the steps that write no journal
/// row (the ledger's moves, the worktree's making, the result branch, the
/// seal).
fn every_step() -> Vec<String> {
    let env = git_env();
    let plan = crash_plan(&env);
    let output = env.run(&["run", &plan, "--json"]);
    assert_success(&output);
    let mut steps = Vec::new();
    for task in ["first", "second"] {
        steps.push(format!("{task}/ledger.running"));
        steps.push(format!("{task}/worktree.added"));
        steps.push(format!("{task}/worktree.linked"));
        let mut seen: BTreeMap<String, u32> = BTreeMap::new();
        for row in journal_kinds(&env, "crash", task) {
            let kind = row["kind"].as_str().unwrap().to_owned();
            if kind == "task.result" {
                steps.push(format!("{task}/result.branch"));
            }
            let nth = seen.entry(kind.clone()).or_default();
            *nth += 1;
            steps.push(format!("{task}/{kind}#{nth}"));
        }
        steps.push(format!("{task}/journal.sealed"));
        steps.push(format!("{task}/ledger.passed"));
    }
    steps
}

#[test]
fn a_run_killed_at_any_step_of_a_task_s_life_is_finished_by_run_continue() {
    let steps = every_step();
    assert!(steps.len() > 25, "{steps:?}");
    for step in &steps {
        let env = git_env();
        let plan = crash_plan(&env);
        let cut = env
            .command(&["run", &plan, "--json"])
            .env("REPRISE_TEST_CRASH_AT", step)
            .output()
            .unwrap();
        assert_eq!(
            cut.status.signal(),
            Some(9),
            "{step}: the run was not cut: {}",
            stderr(&cut)
        );
        let run_id = json_of(&env.run(&["status", "--json"]))["run_id"]
            .as_str()
            .unwrap()
            .to_owned();
        let continued = env.run(&["run", "--continue", &run_id, "--json"]);
        assert_eq!(
            continued.status.code(),
            Some(0),
            "{step}: {}{}",
            stdout(&continued),
            stderr(&continued)
        );
        let continued = json_of(&continued);
        for task in continued["tasks"].as_array().unwrap() {
            assert_eq!(task["state"], "passed", "{step}: {continued}");
        }
        // The dependent's result holds its dependency's, on its branch.
        let built = git(&env, &["show", &format!("reprise/{run_id}/second:g.txt")]);
        assert_eq!(built, "good", "{step}");
        for task in ["first", "second"] {
            let verified = env.run(&["journal", "verify", task]);
            assert_eq!(
                verified.status.code(),
                Some(0),
                "{step}: {}{}",
                stdout(&verified),
                stderr(&verified)
            );
        }
        assert_success(&env.run(&["audit", "verify"]));
    }
}

/// Seed 004: a write outside `allowed_paths` is a corrupting anomaly
/// whatever the gates say. The first attempt passes its gate but leaves a
/// stray file: it is not accepted, its tree is rolled back, and the stray
/// file never reaches the result branch.
#[test]
fn a_passing_attempt_that_wrote_outside_its_allowed_paths_is_not_accepted() {
    let env = git_env();
    let counter = outside_dir(&env, "counter");
    let plan = write_plan(
        &env,
        "fenced",
        &format!(
            r#"
version: 1
name: fenced
defaults: {{ agent: command, max_retries: 1, timeout: 30s }}
tasks:
  - id: stay
    prompt: s
    allowed_paths: ["src/**", '{counter}']
    command: [sh, -c, "{counting}; mkdir -p src; echo ok > src/a.py; if [ $n = 1 ]; then echo stray > stray.txt; fi; echo DONE"]
    gates: [ {{ name: made, run: "test -f src/a.py" }} ]
"#,
            counting = count_attempt(&counter.join("count")),
            counter = counter.display()
        ),
    );
    let output = env.run(&["run", &plan, "--json"]);
    assert_success(&output);
    let run = json_of(&output);
    let run_id = run["run_id"].as_str().unwrap();
    let task = &run["tasks"][0];
    assert_eq!(task["state"], "passed", "{run}");
    assert_eq!(task["attempts"].as_array().unwrap().len(), 2, "{run}");
    // Its gate passed, yet it is a verdict against the work.
    assert_eq!(task["attempts"][0]["gates"][0]["passed"], true, "{run}");
    assert_eq!(task["attempts"][0]["outcome"], "judged", "{run}");
    let rows = journal_kinds(&env, "fenced", "stay");
    let finished: Vec<&Value> = rows
        .iter()
        .filter(|row| row["kind"] == "attempt.finished")
        .collect();
    assert_eq!(finished[0]["body"]["accepted"], "failed");
    assert_eq!(finished[1]["body"]["accepted"], "passed");
    let anomaly = rows
        .iter()
        .find(|row| row["kind"] == "attempt.anomaly")
        .unwrap();
    assert_eq!(anomaly["body"]["anomaly"]["paths"], json!(["stray.txt"]));
    let diagnosis = rows
        .iter()
        .find(|row| row["kind"] == "recovery.diagnosis")
        .unwrap();
    assert_eq!(diagnosis["body"]["severity"], "corrupting");
    let files = git(
        &env,
        &[
            "ls-tree",
            "-r",
            "--name-only",
            &format!("reprise/{run_id}/stay"),
        ],
    );
    assert_eq!(files, "shop.py\nsrc/a.py", "{files}");
}

/// Seed 000: a journal torn while the task ran fails closed: the torn
/// line is cut off (kept aside, the repair on the audit chain), the failed
/// verification is logged, the retry goes cold, and the task goes on to
/// pass instead of failing on its next append.
#[test]
fn a_journal_torn_mid_task_is_repaired_and_the_retry_goes_cold() {
    let env = git_env();
    let journal = env
        .project()
        .join(".reprise/plans/torn/tasks/t/journal.jsonl");
    let plan = write_plan(
        &env,
        "torn",
        &format!(
            r#"
version: 1
name: torn
defaults: {{ agent: sim }}
tasks:
  - id: t
    prompt: p
    containment: off
    sim:
      - {{ reply: "first", write: {{ w.txt: bad }} }}
      - {{ reply: "second", write: {{ w.txt: good }} }}
    gates:
      - name: good
        run: "if [ \"$(cat w.txt)\" = bad ]; then printf '{{\"v\":1,\"seq\":' >> '{journal}'; exit 1; fi; test \"$(cat w.txt)\" = good"
"#,
            journal = journal.display()
        ),
    );
    let output = env.run(&["run", &plan, "--json"]);
    assert_success(&output);
    let run = json_of(&output);
    let task = &run["tasks"][0];
    assert_eq!(task["state"], "passed", "{run}");
    let rows = journal_kinds(&env, "torn", "t");
    let logged = rows
        .iter()
        .find(|row| row["kind"] == "journal.tail_repaired")
        .unwrap_or_else(|| panic!("no repair logged: {rows:?}"));
    assert_eq!(logged["body"]["verification"], "torn_tail");
    assert!(logged["body"]["removed_bytes"].as_u64().unwrap() > 0);
    let decision = rows
        .iter()
        .find(|row| row["kind"] == "retry.decision")
        .unwrap();
    assert_eq!(decision["body"]["decision"]["retry_mode"], "cold");
    assert_eq!(
        decision["body"]["decision"]["downgrade_reason"],
        "journal_unverified"
    );
    assert_eq!(task["attempts"][1]["mode"], "cold", "{run}");
    let audit = fs::read_to_string(env.reprise_dir().join("audit/audit.jsonl")).unwrap();
    assert!(audit.contains("\"kind\":\"journal.repair\""), "{audit}");
    assert_success(&env.run(&["audit", "verify"]));
}

/// Seed 004: a checkpoint holds the execution context and the dependency
/// state: which dependencies had passed, at which result commit, and what
/// the attempt ran with (agent, model, mode, grant, the names of the
/// variables it was given, never their values). `task show --json` shows it.
#[test]
fn a_checkpoint_holds_what_the_attempt_ran_with_and_its_dependencies_results() {
    let env = git_env();
    let plan = write_plan(
        &env,
        "held",
        r#"
version: 1
name: held
defaults: { agent: command, timeout: 30s }
tasks:
  - id: first
    prompt: p
    command: [sh, -c, "echo one > one.txt; echo DONE"]
  - id: second
    prompt: p
    depends_on: [first]
    pass_env: [HELD_TOKEN]
    allowed_paths: ["*.txt"]
    command: [sh, -c, "echo two > two.txt; echo DONE"]
"#,
    );
    let output = env
        .command(&["run", &plan, "--json"])
        .env("HELD_TOKEN", "s3cret-value")
        .output()
        .unwrap();
    assert_success(&output);
    let run = json_of(&output);
    let first_commit = run["tasks"][0]["result"]["commit"].as_str().unwrap();
    let shown = json_of(&env.run(&["task", "show", "second", "--json"]));
    let checkpoints = shown["checkpoints"].as_array().unwrap();
    assert_eq!(checkpoints.len(), 1, "{shown}");
    let held = &checkpoints[0];
    assert_eq!(held["attempt"], 1);
    assert_eq!(
        held["dependencies"],
        json!([{"task": "first", "state": "passed", "commit": first_commit}]),
        "{held}"
    );
    let context = &held["context"];
    assert_eq!(context["agent"], "command", "{held}");
    assert_eq!(context["mode"], "new", "{held}");
    assert_eq!(
        context["grant"]["allowed_paths"],
        json!(["*.txt"]),
        "{held}"
    );
    let names: Vec<&str> = context["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|name| name.as_str().unwrap())
        .collect();
    assert!(names.contains(&"HELD_TOKEN"), "{names:?}");
    assert!(names.contains(&"REPRISE_RUN_ID"), "{names:?}");
    // Names, never values: the secret is nowhere in the journal.
    let journal = fs::read_to_string(
        env.reprise_dir()
            .join("plans/held/tasks/second/journal.jsonl"),
    )
    .unwrap();
    assert!(!journal.contains("s3cret-value"));
    let text = stdout(&env.run(&["task", "show", "second"]));
    assert!(
        text.contains("checkpoint before attempt 1: command (new, model default), dependencies: first passed at"),
        "{text}"
    );
    let first = json_of(&env.run(&["task", "show", "first", "--json"]));
    assert_eq!(
        first["checkpoints"][0]["dependencies"],
        json!([]),
        "{first}"
    );
}

/// A park a crash cut between its `task.suspend` row and its
/// `checkpoint.json` is completed by the next `task suspend`, agent
/// checkpoint included, and then resumes (before, the resume refused it for
/// good: "bound a grant but its checkpoint.json is missing").
#[test]
fn a_park_cut_before_its_agent_checkpoint_is_completed_and_resumes() {
    let env = git_env();
    // Without a sandbox flag: the task runs in its own worktree here.
    let plan = write_plan(
        &env,
        "inplace",
        &SLOW_IN_PLACE.replace("    sandbox: none\n", ""),
    );
    let mut run = env.command(&["run", &plan]);
    run.env("REPRISE_TEST_CRASH_AT", "edit/task.suspend")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let child = run.spawn().unwrap();
    let task_dir = env.project().join(".reprise/plans/inplace/tasks/edit");
    super::recovery::wait_for_an_attempt(&env, "inplace", "edit");
    // The live park dies right after its row: no checkpoint.json, no receipt.
    let _ = env.run(&["task", "suspend", "edit"]);
    assert_eq!(child.wait_with_output().unwrap().status.code(), None);
    assert!(!task_dir.join("checkpoint.json").exists());
    assert_success(&env.run(&["task", "suspend", "edit"]));
    assert!(task_dir.join("checkpoint.json").is_file());
    let resumed = env.run(&["task", "resume", "edit", "--json"]);
    assert_success(&resumed);
    assert_eq!(json_of(&resumed)["tasks"][0]["state"], "passed");
    let verified = env.run(&["audit", "verify-suspension", "edit", "--json"]);
    assert_eq!(
        json_of(&verified)["status"],
        "verified",
        "{}",
        stdout(&verified)
    );
}

/// An ACP agent's run killed mid-attempt (after its session was recorded)
/// is continued warm in that session, as a CLI adapter's is: the continued
/// process hears what the agent declares (here `loadSession`, from the
/// scripted peer) before it decides the retry, instead of going cold for
/// want of a handshake.
#[test]
fn an_acp_agent_s_run_killed_mid_attempt_is_continued_warm_in_its_session() {
    let env = git_env();
    let peer = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../reprise-agents/testdata/acp/peer.js")
        .canonicalize()
        .unwrap();
    let plan = write_plan(
        &env,
        "acp",
        &format!(
            r#"
version: 1
name: acp
agents:
  acp:
    command: [node, "{peer}"]
    env: {{ PEER_DECLARE: '{{"loadSession": true}}', PEER_TOOL_KIND: edit }}
    allowed_tools: [edit]
tasks:
  - id: t
    agent: acp
    prompt: p
    retry_policy: warm
    max_retries: 2
    gates: [ {{ name: loaded, result_matches: "session/load" }} ]
"#,
            peer = peer.display()
        ),
    );
    let cut = env
        .command(&["run", &plan, "--json"])
        .env("REPRISE_TEST_CRASH_AT", "t/task.checkpoint#1")
        .output()
        .unwrap();
    assert_eq!(cut.status.signal(), Some(9), "{}", stderr(&cut));
    let run_id = json_of(&env.run(&["status", "--json"]))["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let continued = env.run(&["run", "--continue", &run_id, "--json"]);
    assert_success(&continued);
    let continued = json_of(&continued);
    let task = &continued["tasks"][0];
    assert_eq!(task["state"], "passed", "{continued}");
    let modes: Vec<&str> = task["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|attempt| attempt["mode"].as_str().unwrap())
        .collect();
    assert_eq!(modes, ["new", "warm"], "{continued}");
    assert_success(&env.run(&["journal", "verify", "t"]));
}
