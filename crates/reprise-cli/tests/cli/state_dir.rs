//! The state directory and its evidence as a whole (issue 27): created once
//! and whole by commands started together, finished after a crash at any
//! step of its creation, a sealed journal that is missing seen everywhere,
//! and a copy verified where it lies.

use super::*;

/// A plan named `name` whose one task passes at once, touching no file.
fn quiet_plan(name: &str) -> String {
    format!(
        r#"
version: 1
name: {name}
defaults: {{ agent: sim, timeout: 30s }}
tasks:
  - id: hello
    prompt: "Say DONE"
    sim: [ {{ reply: "DONE" }} ]
    gates: [ {{ name: answer, result_matches: "^DONE" }} ]
"#
    )
}

fn witness_dir(env: &Env) -> PathBuf {
    env.temp.path().join("home/.local/state/reprise/witness")
}

/// The names in `dir`, sorted (none when it does not exist).
fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .map(|entries| {
            entries
                .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// The state directory verifies, its witness dir holds one witness and
/// nothing else, and no temporary state directory is left in the project.
fn assert_one_whole_state_dir(env: &Env) {
    let verify = env.run(&["audit", "verify", "--json"]);
    assert_eq!(code(&verify), Some(0), "{}", stdout(&verify));
    let witnesses = names_in(&witness_dir(env));
    assert_eq!(witnesses.len(), 1, "{witnesses:?}");
    assert!(witnesses[0].ends_with(".json"), "{witnesses:?}");
    let leftovers: Vec<String> = names_in(&env.project())
        .into_iter()
        .filter(|name| name.starts_with(".reprise."))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn commands_started_together_in_a_new_project_create_one_whole_state_directory() {
    for round in 0..6 {
        let env = Env::new();
        // In odd rounds the key exists, as for a user's second project, and
        // only the state directory is raced for; in even ones the key too.
        let key_first = round % 2 == 1;
        let other = env.temp.path().join("other");
        fs::create_dir(&other).unwrap();
        if key_first {
            assert_success(&env.command(&["init"]).current_dir(&other).output().unwrap());
        }
        for name in ["one", "two", "three"] {
            fs::write(env.project().join(format!("{name}.yaml")), quiet_plan(name)).unwrap();
        }
        let mut children: Vec<(String, std::process::Child)> = Vec::new();
        for args in [
            &["run", "one.yaml"][..],
            &["init"],
            &["run", "two.yaml"],
            &["init"],
            &["run", "three.yaml"],
        ] {
            let child = env
                .command(args)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            children.push((args.join(" "), child));
        }
        for (what, child) in children {
            let output = child.wait_with_output().unwrap();
            assert!(
                output.status.success(),
                "round {round}: `reprise {what}` failed: {}",
                stderr(&output)
            );
        }
        // The other project's witness (if any) beside this one's.
        fs::remove_dir_all(&other).unwrap();
        let witnesses = names_in(&witness_dir(&env));
        assert_eq!(
            witnesses.len(),
            1 + usize::from(key_first),
            "round {round}: {witnesses:?}"
        );
        let key_dir = names_in(env.key_path().parent().unwrap());
        assert_eq!(key_dir, ["audit.key", "witness"], "round {round}");
        let verify = env.run(&["audit", "verify", "--json"]);
        assert_eq!(code(&verify), Some(0), "round {round}: {}", stdout(&verify));
        assert_eq!(
            json_of(&env.run(&["status", "--json"]))["ok"],
            true,
            "round {round}"
        );
    }
}

#[test]
fn a_crash_at_each_step_of_creation_leaves_nothing_the_next_command_cannot_finish() {
    for step in ["built", "first-row", "witnessed", "renamed"] {
        let env = Env::new();
        fs::write(env.project().join("plan.yaml"), quiet_plan("crashy")).unwrap();
        let killed = env
            .command(&["init"])
            .env("REPRISE_TEST_KILL_AT", format!("creation:{step}"))
            .output()
            .unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&killed.status),
            Some(9),
            "{step}: init was not killed: {}",
            stderr(&killed)
        );
        // Before the rename there is no state directory at all.
        assert_eq!(
            env.reprise_dir().exists(),
            step == "renamed",
            "{step}: a half-made state directory is visible"
        );
        let run = env.run(&["run", "plan.yaml"]);
        assert_success(&run);
        assert!(
            !stderr(&run).contains("superseded"),
            "{step}: {}",
            stderr(&run)
        );
        assert_one_whole_state_dir(&env);
        let repair = env.run(&["replay", "repair", "--all", "--json"]);
        assert_success(&repair);
        assert!(
            !stdout(&repair).contains("\"finished_creation\":true"),
            "{step}: {}",
            stdout(&repair)
        );
    }
}

/// A state directory as an older reprise left it when a crash cut its
/// creation after `layout.json`: the skeleton, no audit row.
fn older_cut_creation(env: &Env) {
    let root = env.reprise_dir();
    for sub in ["plans", "audit", "runs"] {
        fs::create_dir_all(root.join(sub)).unwrap();
    }
    fs::write(root.join(".gitignore"), "*\n").unwrap();
    fs::write(root.join("layout.json"), r#"{"v":2}"#).unwrap();
    fs::write(root.join("audit/audit.jsonl"), "").unwrap();
}

#[test]
fn what_an_older_reprise_left_when_a_crash_cut_its_creation_is_finished() {
    // No row and no witness: a run names the fix, the fix finishes it.
    let env = Env::new();
    env.init();
    fs::remove_dir_all(env.reprise_dir()).unwrap();
    fs::remove_dir_all(witness_dir(&env)).unwrap();
    older_cut_creation(&env);
    fs::write(env.project().join("plan.yaml"), quiet_plan("later")).unwrap();
    assert_run_refused(&env, "reprise replay repair audit");
    let repair = env.run(&["replay", "repair", "--all", "--json"]);
    assert_success(&repair);
    assert_eq!(json_of(&repair)["repairs"][0]["finished_creation"], true);
    assert_success(&env.run(&["run", "plan.yaml"]));
    assert_one_whole_state_dir(&env);

    // No row, and the witness of an earlier state directory at this path
    // that recorded rows: `init` finishes it (it said "found existing"
    // before) and keeps that witness aside.
    let env = Env::new();
    env.init();
    env.run_plan(SIM_PLAN);
    fs::remove_dir_all(env.reprise_dir()).unwrap();
    older_cut_creation(&env);
    assert_eq!(audit_reason(&env), "audit_missing");
    let init = env.run(&["init", "--json"]);
    assert_success(&init);
    assert_eq!(json_of(&init)["finished_creation"], true);
    assert_eq!(
        code(&env.run(&["audit", "verify"])),
        Some(0),
        "finished by init"
    );
    let witnesses = names_in(&witness_dir(&env));
    assert_eq!(witnesses.len(), 2, "{witnesses:?}");
    assert!(witnesses[1].ends_with(".superseded.1"), "{witnesses:?}");

    // The first row alone, its witness never written.
    let env = Env::new();
    env.init();
    fs::remove_dir_all(witness_dir(&env)).unwrap();
    assert_eq!(audit_reason(&env), "witness_missing");
    let repair = env.run(&["replay", "repair", "audit"]);
    assert_success(&repair);
    assert!(
        stdout(&repair).contains("wrote the witness"),
        "{}",
        stdout(&repair)
    );
    assert_one_whole_state_dir(&env);

    // An emptied chain beside records is no unfinished creation: nothing
    // finishes it, and it stays a failed check.
    let env = Env::new();
    env.init();
    env.run_plan(SIM_PLAN);
    fs::write(env.reprise_dir().join("audit/audit.jsonl"), "").unwrap();
    let repair = env.run(&["replay", "repair", "--all", "--json"]);
    assert_eq!(json_of(&repair)["repairs"][0]["finished_creation"], false);
    assert_eq!(
        code(&env.run(&["init"])),
        Some(0),
        "init still finds the directory"
    );
    assert_eq!(audit_reason(&env), "audit_missing");
}

#[test]
fn a_sealed_journal_that_is_missing_is_a_failed_check_everywhere() {
    let env = Env::new();
    env.init();
    env.run_plan(SIM_PLAN);
    assert_success(&env.run(&["journal", "verify", "greet"]));
    fs::remove_file(
        env.reprise_dir()
            .join("plans/cli/tasks/greet/journal.jsonl"),
    )
    .unwrap();

    let verify = env.run(&["journal", "verify", "greet", "--json"]);
    assert_eq!(code(&verify), Some(1), "{}", stderr(&verify));
    let report = json_of(&verify);
    assert_eq!(report["missing"], true);
    assert_eq!(report["reason"], "journal_missing");
    let text = env.run(&["journal", "verify", "greet"]);
    assert_eq!(code(&text), Some(1));
    assert!(stdout(&text).contains("MISSING"), "{}", stdout(&text));

    let status = env.run(&["status", "--json"]);
    assert_eq!(code(&status), Some(1), "{}", stdout(&status));
    assert_eq!(json_of(&status)["missing_journals"][0]["task_id"], "greet");
    let status = env.run(&["status"]);
    assert!(
        stdout(&status).contains("journal cli/greet: MISSING"),
        "{}",
        stdout(&status)
    );
    let show = env.run(&["task", "show", "greet"]);
    assert_eq!(code(&show), Some(1), "{}", stdout(&show));
    assert!(stdout(&show).contains("MISSING"), "{}", stdout(&show));

    let page = env.temp.path().join("report.html");
    env.run(&["report", "-o", page.to_str().unwrap()]);
    let html = fs::read_to_string(&page).unwrap();
    assert!(!html.contains("Nothing needs attention"), "{html}");
    assert!(
        html.contains("data-task=\"greet\" data-missing=\"journal\""),
        "{html}"
    );

    // A task that never ran still has no journal: bad input, as before.
    let never = env.run(&["journal", "verify", "cli/nobody"]);
    assert_one_line_error(&never, 2, "no journal");
}

/// `audit verify-suspension TASK --json` in the state directory at `root`.
fn verify_suspension_at(env: &Env, root: &Path, task: &str) -> (Option<i32>, Value, String) {
    let json = env.run(&[
        "--state-dir",
        root.to_str().unwrap(),
        "audit",
        "verify-suspension",
        task,
        "--json",
    ]);
    let text = env.run(&[
        "--state-dir",
        root.to_str().unwrap(),
        "audit",
        "verify-suspension",
        task,
    ]);
    (code(&json), json_of(&json), stdout(&text))
}

#[test]
fn a_copied_state_directory_verifies_its_parks_as_the_original_does_and_writes_nothing() {
    use reprise_testkit::parks::ParkWriter;
    let env = Env::new();
    env.init();
    let key = reprise_store::key::load_key(&env.key_path()).unwrap();
    let task = reprise_testkit::fixture_key("t").unwrap();
    let writer = ParkWriter::new(&env.state(), &key, &task);
    writer.row("attempt.started").unwrap();
    let parked = writer.park().unwrap();

    let copies = env.temp.path().join("copies");
    fs::create_dir(&copies).unwrap();
    let pending_copy = copies.join("pending");
    copy_dir(&env.reprise_dir(), &pending_copy);
    writer
        .resume(&parked, "warm", parked.workspace_hash, None)
        .unwrap();
    let settled_copy = copies.join("settled");
    copy_dir(&env.reprise_dir(), &settled_copy);

    for (copy, status) in [(&pending_copy, "pending"), (&settled_copy, "verified")] {
        let (original_code, original, _) =
            verify_suspension_at(&env, &env.reprise_dir(), "fixture/t");
        assert_eq!(original_code, Some(0), "{original}");
        assert_eq!(original["witness"], "checked");
        let before = env.snapshot();
        let (code, report, text) = verify_suspension_at(&env, copy, "fixture/t");
        assert_eq!(code, Some(0), "{report}");
        assert_eq!(report["status"], status, "{report}");
        assert_eq!(report["ok"], true);
        assert_eq!(report["witness"], "absent");
        assert!(text.contains("not this machine's"), "{text}");
        assert_eq!(env.snapshot(), before, "verifying a copy wrote to it");
    }
    // The settled original, as the copy said.
    let (_, original, _) = verify_suspension_at(&env, &env.reprise_dir(), "fixture/t");
    assert_eq!(original["status"], "verified");

    // A real break in a copy is still a failure.
    let audit = settled_copy.join("audit/audit.jsonl");
    let bytes = fs::read(&audit).unwrap();
    let at = bytes
        .windows(b"task.resume_receipt".len())
        .position(|window| window == b"task.resume_receipt")
        .unwrap();
    let mut bytes = bytes;
    bytes[at + 5] = b'R';
    fs::write(&audit, &bytes).unwrap();
    let (code, report, _) = verify_suspension_at(&env, &settled_copy, "fixture/t");
    assert_eq!(code, Some(1), "{report}");
    assert_eq!(report["status"], "failed");
}

#[test]
fn a_nul_byte_in_a_judged_reply_does_not_stop_the_next_attempt() {
    let env = Env::new();
    // The retry's prompt quotes the reply, its NUL shown as a symbol: the
    // agent answers DONE once it reads that quote.
    let plan = r#"
version: 1
name: nul
defaults: { agent: command, timeout: 30s }
tasks:
  - id: speak
    prompt: "Say DONE"
    max_retries: 1
    command: [sh, -c, "case \"$REPRISE_PROMPT\" in *no␀way*) echo DONE;; *) printf 'no\\000way\\n';; esac"]
    gates: [ { name: answer, result_matches: "^DONE" } ]
"#;
    fs::write(env.project().join("plan.yaml"), plan).unwrap();
    let output = env.run(&["run", "plan.yaml", "--json"]);
    assert_eq!(
        code(&output),
        Some(0),
        "{}\n{}",
        stdout(&output),
        stderr(&output)
    );
    let task = &json_of(&output)["tasks"][0];
    assert_eq!(task["state"], "passed", "{task}");
    assert_eq!(task["attempts"].as_array().unwrap().len(), 2, "{task}");
}

#[test]
fn a_long_dependency_cycle_is_refused_in_one_short_line_naming_its_first_tasks() {
    let env = Env::new();
    let tasks = 37_000;
    let mut plan = String::from("version: 1\nname: ring\ndefaults: { agent: sim }\ntasks:\n");
    for n in 0..tasks {
        let next = (n + 1) % tasks;
        plan.push_str(&format!(
            "  - {{ id: t{n}, prompt: p, depends_on: [t{next}] }}\n"
        ));
    }
    fs::write(env.project().join("plan.yaml"), plan).unwrap();
    let output = env.run(&["run", "plan.yaml"]);
    assert_one_line_error(&output, 2, "is a cycle of 37,000 tasks");
    let line = stderr(&output);
    assert!(line.len() < 400, "{} bytes: {line}", line.len());
    assert!(line.contains("\"t0\" -> \"t1\" -> \"t2\""), "{line}");
    assert!(!env.reprise_dir().exists(), "a refused plan wrote state");
}

#[test]
fn a_state_directory_created_again_and_again_keeps_a_few_witnesses_aside() {
    let env = Env::new();
    let mut notes = Vec::new();
    for _ in 0..6 {
        let init = env.run(&["init"]);
        assert_success(&init);
        notes.push(stderr(&init));
        fs::remove_dir_all(env.reprise_dir()).unwrap();
    }
    env.init();
    let names = names_in(&witness_dir(&env));
    let aside: Vec<&String> = names
        .iter()
        .filter(|name| name.contains(".superseded."))
        .collect();
    assert_eq!(aside.len(), 3, "{names:?}");
    assert_eq!(names.len(), 4, "{names:?}");
    let last = stderr(&env.run(&["init"]));
    assert!(last.is_empty(), "{last}");
    assert!(
        notes[4].contains("only the newest 3"),
        "the note says older ones go: {notes:?}"
    );
}

#[test]
fn a_damaged_last_ledger_line_is_refused_as_the_last_line_it_is() {
    let env = Env::new();
    env.init();
    env.run_plan(SIM_PLAN);
    let ledger = env.reprise_dir().join("ledger.jsonl");
    let text = fs::read_to_string(&ledger).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    let last = lines.pop().unwrap();
    let cut = format!("{}\n{}\n", lines.join("\n"), &last[..last.len() / 2]);
    fs::write(&ledger, &cut).unwrap();
    let output = env.run(&["replay", "repair", "ledger"]);
    assert_eq!(code(&output), Some(1), "{}", stderr(&output));
    let said = stdout(&output);
    assert!(!said.contains("is not the last line"), "{said}");
    assert!(
        said.contains(&format!("the last line (row {})", lines.len())),
        "{said}"
    );
    assert_eq!(
        fs::read_to_string(&ledger).unwrap(),
        cut,
        "the ledger was changed"
    );
}
