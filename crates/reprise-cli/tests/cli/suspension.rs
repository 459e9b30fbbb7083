//! The evidence of a park (issue 14 points 4 and 7): `audit
//! verify-suspension`, `approve` and `task list-suspended` over journals and
//! audit chains written in the engine's order by the testkit's park writer.

use reprise_core::digest::Digest;
use reprise_store::approvals::{
    ApprovalError, approval_for_resume, approval_path, mark_resumed, read_approval, resumed_marker,
};
use reprise_store::audit::AuditLog;
use reprise_store::key::{KeyFile, load_key};
use reprise_store::suspension::{SUSPEND_RECEIPT_KIND, SuspendReceipt, Wake};
use reprise_testkit::parks::{ParkWriter, Parked, tree_hash};
use reprise_testkit::{FIXED_AT, wait_until};

use super::*;

const TASK: &str = "fixture/t";

fn key_of(env: &Env) -> KeyFile {
    load_key(&env.key_path()).unwrap()
}

/// An initialised project and a writer of `task`'s parks, its journal
/// begun with an attempt row.
fn writer(env: &Env, task: &str) -> ParkWriter {
    let task = reprise_testkit::fixture_key(task).unwrap();
    let writer = ParkWriter::new(&env.state(), &key_of(env), &task);
    writer.row("attempt.started").unwrap();
    writer
}

fn started() -> (Env, ParkWriter) {
    let env = Env::new();
    env.init();
    let writer = writer(&env, TASK);
    (env, writer)
}

fn verify(env: &Env) -> (Option<i32>, Value) {
    let output = env.run(&["audit", "verify-suspension", TASK, "--json"]);
    assert!(stderr(&output).is_empty(), "{}", stderr(&output));
    (output.status.code(), json_of(&output))
}

fn error_codes(report: &Value) -> Vec<String> {
    report["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|error| error["code"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn verify_suspension_reports_every_key_and_pending_for_a_live_park() {
    let (env, writer) = started();
    writer.park().unwrap();
    let (code, report) = verify(&env);
    assert_eq!(code, Some(0));
    for key in [
        "status",
        "ok",
        "chain_ok",
        "journal_ok",
        "journal_identity",
        "resumed",
        "effective_mode",
        "workspace_match",
        "downgrade_reason",
        "errors",
    ] {
        assert!(report.get(key).is_some(), "no {key} in {report}");
    }
    assert_eq!(report["status"], "pending");
    assert_eq!(report["ok"], true);
    assert_eq!(report["resumed"], false);
    assert_eq!(report["chain_ok"], true);
    assert_eq!(report["journal_ok"], true);
    assert_eq!(report["journal_identity"], "unverifiable");
    assert_eq!(
        report["latest"]["released"],
        json!(["process", "sandbox", "seat", "budget"])
    );
    // Mid-release is pending too.
    let (env, writer) = started();
    writer.park_partly(Wake::Resume, "", 2).unwrap();
    let (code, report) = verify(&env);
    assert_eq!((code, &report["status"]), (Some(0), &json!("pending")));
}

#[test]
fn verify_suspension_verifies_warm_and_cold_resumes() {
    let (env, writer) = started();
    let parked = writer.park().unwrap();
    writer
        .resume(&parked, "warm", parked.workspace_hash, None)
        .unwrap();
    let (code, report) = verify(&env);
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(report["status"], "verified");
    assert_eq!(report["resumed"], true);
    assert_eq!(report["effective_mode"], "warm");
    assert_eq!(report["workspace_match"], true);
    assert_eq!(report["downgrade_reason"], Value::Null);
    let text = env.run(&["audit", "verify-suspension", TASK]);
    assert_success(&text);
    let text = stdout(&text);
    assert!(
        text.starts_with("suspension of fixture/t: verified\n"),
        "{text}"
    );
    assert!(text.contains("  resumed: warm (journal row 2"), "{text}");
    assert!(
        text.contains("  workspace: the resume's is the park's\n"),
        "{text}"
    );

    let (env, writer) = started();
    let parked = writer.park().unwrap();
    writer
        .resume(&parked, "cold", tree_hash("edited"), None)
        .unwrap();
    let (code, report) = verify(&env);
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(report["status"], "verified");
    assert_eq!(report["workspace_match"], false);
    assert_eq!(report["downgrade_reason"], "workspace_hash_mismatch");
}

/// Appends a suspend receipt for `writer`'s task that cites a park of
/// another task, `fixture/other`, parked for the purpose.
fn cite_another_tasks_park(env: &Env, writer: &ParkWriter) {
    let other = super::suspension::writer(env, "fixture/other");
    let theirs = other.park().unwrap();
    let receipt = SuspendReceipt {
        plan: writer.task.plan.clone(),
        task_id: writer.task.task.clone(),
        run_id: writer.run_id.clone(),
        park: theirs.park,
        journal_seq: theirs.seq,
        session_id: None,
        workspace_hash: theirs.workspace_hash,
        wake: Wake::Resume,
    };
    AuditLog::open(&env.state(), key_of(env))
        .unwrap()
        .append(
            SUSPEND_RECEIPT_KIND,
            FIXED_AT,
            &serde_json::to_value(&receipt).unwrap(),
        )
        .unwrap();
}

#[test]
fn a_receipt_citing_another_tasks_park_fails() {
    let (env, writer) = started();
    writer.park().unwrap();
    cite_another_tasks_park(&env, &writer);
    let (code, report) = verify(&env);
    assert_eq!(code, Some(1));
    assert_eq!(report["status"], "failed");
    assert_eq!(report["ok"], false);
    assert_eq!(error_codes(&report), ["receipt_cites_another_park"]);
    let text = stdout(&env.run(&["audit", "verify-suspension", TASK]));
    assert!(text.contains("  error: audit row "), "{text}");
}

#[test]
fn a_resume_receipt_whose_resume_row_is_missing_fails() {
    let (env, writer) = started();
    let parked = writer.park().unwrap();
    let absent = reprise_core::digest::tagged_sha256(b"no such row\n", &[]);
    writer
        .resume_receipt(&parked, absent, "warm", parked.workspace_hash, None)
        .unwrap();
    let (code, report) = verify(&env);
    assert_eq!(code, Some(1));
    assert_eq!(error_codes(&report), ["missing_resume_row"]);
}

#[test]
fn a_park_settled_twice_fails() {
    let (env, writer) = started();
    let parked = writer.park().unwrap();
    writer
        .resume(&parked, "warm", parked.workspace_hash, None)
        .unwrap();
    writer
        .resume(&parked, "cold", parked.workspace_hash, None)
        .unwrap();
    let (code, report) = verify(&env);
    assert_eq!(code, Some(1));
    assert_eq!(error_codes(&report), ["park_settled_twice"]);
}

#[test]
fn a_tampered_audit_byte_fails() {
    let (env, writer) = started();
    let parked = writer.park().unwrap();
    writer
        .resume(&parked, "warm", parked.workspace_hash, None)
        .unwrap();
    let path = env.reprise_dir().join("audit/audit.jsonl");
    let text = fs::read_to_string(&path).unwrap();
    let tampered = text.replacen("\"lunch\"", "\"lurch\"", 1);
    let tampered = if tampered == text {
        // The reason is in the journal; change the receipt's session instead.
        text.replacen("session-1", "session-2", 1)
    } else {
        tampered
    };
    assert_ne!(tampered, text);
    fs::write(&path, tampered).unwrap();
    let (code, report) = verify(&env);
    assert_eq!(code, Some(1), "{report}");
    assert_eq!(report["status"], "failed");
    assert_eq!(report["chain_ok"], false);
    assert_eq!(error_codes(&report)[0], "audit_chain_broken");
}

#[test]
fn a_tampered_journal_byte_fails() {
    let (env, writer) = started();
    writer.park().unwrap();
    let path = env.state().journal_path(&writer.task);
    let text = fs::read_to_string(&path).unwrap();
    fs::write(&path, text.replacen("lunch", "lurch", 1)).unwrap();
    let (code, report) = verify(&env);
    assert_eq!(code, Some(1), "{report}");
    assert_eq!(report["journal_ok"], false);
    assert!(error_codes(&report).contains(&"journal_chain_broken".to_owned()));
}

#[test]
fn verify_suspension_refuses_unknown_unsafe_and_never_parked_tasks() {
    let (env, _writer) = started();
    assert_one_line_error(
        &env.run(&["audit", "verify-suspension", "fixture/nothing"]),
        2,
        "no journal",
    );
    assert_one_line_error(
        &env.run(&["audit", "verify-suspension", "../escape"]),
        2,
        "escape",
    );
    assert_one_line_error(
        &env.run(&["audit", "verify-suspension", TASK]),
        2,
        "never parked",
    );
}

/// Runs `reprise approve ARGS --json` and the approval it wrote.
fn approve(env: &Env, args: &[&str]) -> Output {
    let mut all = vec!["approve"];
    all.extend_from_slice(args);
    env.run(&all)
}

#[test]
fn approve_writes_a_signed_file_that_the_resume_binds() {
    let (env, writer) = started();
    let parked = writer.park_partly(Wake::Approval, "", 4).unwrap();
    let (state, key) = (env.state(), key_of(&env));
    assert!(matches!(
        approval_for_resume(&state, &key, &writer.task, parked.park, true),
        Err(ApprovalError::NotApproved { .. })
    ));
    assert_eq!(
        approval_for_resume(&state, &key, &writer.task, parked.park, false).unwrap(),
        None
    );
    let output = approve(&env, &[TASK, "--note", "looks right", "--json"]);
    assert_success(&output);
    let answer = json_of(&output);
    let state = env.state();
    let path = approval_path(&state, &writer.task, parked.park);
    assert_eq!(answer["path"], json!(path));
    assert_eq!(
        fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let approval = read_approval(&state, &key_of(&env), &writer.task, parked.park)
        .unwrap()
        .expect("an approval");
    assert_eq!(approval.note.as_deref(), Some("looks right"));
    assert_eq!(approval.run, writer.run_id);
    assert!(!approval.approver.is_empty());
    assert_eq!(answer["approval_digest"], json!(approval.digest()));
    assert_eq!(
        approval_for_resume(&state, &key, &writer.task, parked.park, true).unwrap(),
        Some(approval.digest())
    );
    assert_success(&env.run(&["audit", "verify"]));
    // Still a live park; the resume binds the approval and verifies.
    assert_eq!(verify(&env).1["status"], "pending");
    writer
        .resume(
            &parked,
            "warm",
            parked.workspace_hash,
            Some(approval.digest()),
        )
        .unwrap();
    let (code, report) = verify(&env);
    assert_eq!(
        (code, &report["status"]),
        (Some(0), &json!("verified")),
        "{report}"
    );
    // A resume that binds a digest no approval row holds fails.
    let (env, writer) = started();
    let parked = writer.park_partly(Wake::Approval, "", 4).unwrap();
    let forged = reprise_core::digest::tagged_sha256(b"forged\n", &[]);
    writer
        .resume(&parked, "warm", parked.workspace_hash, Some(forged))
        .unwrap();
    assert_eq!(
        error_codes(&verify(&env).1),
        ["approval_not_in_audit_chain"]
    );
}

#[test]
fn approve_refuses_without_a_park_a_settled_park_or_a_second_time_and_writes_nothing() {
    let (env, writer) = started();
    let before = env.snapshot();
    assert_one_line_error(&approve(&env, &[TASK]), 2, "no park waiting");
    assert_eq!(env.snapshot(), before);

    let parked = writer.park_partly(Wake::Approval, "", 4).unwrap();
    assert_success(&approve(&env, &[TASK]));
    let before = env.snapshot();
    assert_one_line_error(&approve(&env, &[TASK]), 2, "already approved");
    assert_eq!(env.snapshot(), before);

    writer
        .resume(&parked, "warm", parked.workspace_hash, None)
        .unwrap();
    let before = env.snapshot();
    assert_one_line_error(&approve(&env, &[TASK]), 2, "already settled");
    assert_eq!(env.snapshot(), before);

    assert_one_line_error(&approve(&env, &["../escape"]), 2, "escape");
    assert_one_line_error(&approve(&env, &["fixture/nothing"]), 2, "no journal");
}

#[test]
fn approve_refuses_a_park_whose_evidence_fails() {
    let (env, writer) = started();
    writer.park_partly(Wake::Approval, "", 4).unwrap();
    // A release citing a receipt that does not exist.
    cite_another_tasks_park(&env, &writer);
    let before = env.snapshot();
    assert_one_line_error(&approve(&env, &[TASK]), 1, "does not verify");
    assert_eq!(env.snapshot(), before);
}

#[test]
fn a_tampered_approval_is_an_error_and_the_marker_binds_one_resume() {
    let (env, writer) = started();
    let parked = writer.park_partly(Wake::Approval, "", 4).unwrap();
    assert_success(&approve(&env, &[TASK]));
    let state = env.state();
    let key = key_of(&env);
    let path = approval_path(&state, &writer.task, parked.park);
    let text = fs::read_to_string(&path).unwrap();
    fs::write(&path, text.replacen("\"note\":null", "\"note\":\"x\"", 1)).unwrap();
    assert!(matches!(
        read_approval(&state, &key, &writer.task, parked.park),
        Err(ApprovalError::Tampered { .. })
    ));
    fs::write(&path, text.replacen("\"v\":1", "\"v\":9", 1)).unwrap();
    assert!(matches!(
        read_approval(&state, &key, &writer.task, parked.park),
        Err(ApprovalError::NewerVersion { found: 9, .. })
    ));
    // Another park's approval under this park's name is refused.
    let elsewhere = approval_path(&state, &writer.task, Digest::ZERO);
    fs::write(&elsewhere, &text).unwrap();
    assert!(matches!(
        read_approval(&state, &key, &writer.task, Digest::ZERO),
        Err(ApprovalError::Tampered { .. })
    ));
    assert!(
        read_approval(&state, &key, &writer.task, tree_hash("none"))
            .unwrap()
            .is_none()
    );

    let receipt = tree_hash("resume receipt");
    assert_eq!(
        resumed_marker(&state, &writer.task, parked.park).unwrap(),
        None
    );
    mark_resumed(&state, &writer.task, parked.park, receipt, false).unwrap();
    mark_resumed(&state, &writer.task, parked.park, receipt, false).unwrap();
    assert_eq!(
        resumed_marker(&state, &writer.task, parked.park).unwrap(),
        Some(receipt)
    );
    assert!(matches!(
        mark_resumed(
            &state,
            &writer.task,
            parked.park,
            tree_hash("another"),
            false
        ),
        Err(ApprovalError::ResumedElsewhere { .. })
    ));
    // A marker whose receipt the audit chain does not hold for the park
    // settles nothing: the approval (put back) still stands, and it is
    // replaced.
    fs::write(&path, &text).unwrap();
    assert!(
        approval_for_resume(&state, &key, &writer.task, parked.park, true)
            .unwrap()
            .is_some()
    );
    mark_resumed(
        &state,
        &writer.task,
        parked.park,
        tree_hash("another"),
        true,
    )
    .unwrap();
    assert_eq!(
        resumed_marker(&state, &writer.task, parked.park).unwrap(),
        Some(tree_hash("another"))
    );
}

fn parked_listing(env: &Env) -> Vec<Value> {
    let output = env.run(&["task", "list-suspended", "--json"]);
    assert_success(&output);
    json_of(&output)["suspended"].as_array().unwrap().clone()
}

#[test]
fn list_suspended_shows_each_live_park_and_how_to_wake_it() {
    let env = Env::new();
    env.init();
    assert_eq!(parked_listing(&env), Vec::<Value>::new());
    assert_eq!(
        stdout(&env.run(&["task", "list-suspended"])),
        "no task is suspended\n"
    );
    let waiting = writer(&env, "fixture/waiting");
    let parked: Parked = waiting.park_partly(Wake::Approval, "", 4).unwrap();
    let settled = writer(&env, "fixture/settled");
    let done = settled.park().unwrap();
    settled
        .resume(&done, "warm", done.workspace_hash, None)
        .unwrap();
    let timed = writer(&env, "fixture/timed");
    timed
        .park_partly(
            Wake::Time {
                at: "2030-01-01T00:00:00Z".to_owned(),
            },
            "",
            1,
        )
        .unwrap();

    // A task directory without a journal is not a park.
    fs::create_dir_all(env.reprise_dir().join("plans/fixture/tasks/empty")).unwrap();
    let listing = parked_listing(&env);
    let tasks: Vec<&str> = listing
        .iter()
        .map(|park| park["task_id"].as_str().unwrap())
        .collect();
    assert_eq!(tasks, ["timed", "waiting"]);
    let entry = &listing[1];
    assert_eq!(entry["run_id"], waiting.run_id);
    assert_eq!(entry["wake_condition"], "approval");
    assert_eq!(entry["approved"], false);
    assert_eq!(entry["cause"], "request");
    assert_eq!(entry["reason"], "lunch");
    assert_eq!(entry["park"], json!(parked.park));
    assert_eq!(entry["receipt"], json!(parked.receipt));
    assert_eq!(entry["workspace_hash"], json!(parked.workspace_hash));
    assert!(entry["age_secs"].as_u64().is_some(), "{entry}");
    let freed: Vec<&str> = entry["freed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|release| release["resource"].as_str().unwrap())
        .collect();
    assert_eq!(freed, ["process", "sandbox", "seat", "budget"]);
    assert_eq!(
        entry["wake_commands"],
        json!(["reprise approve waiting", "reprise task resume waiting"])
    );
    assert_eq!(listing[0]["wake_condition"], "time 2030-01-01T00:00:00Z");
    assert_eq!(listing[0]["freed"].as_array().unwrap().len(), 1);

    let text = stdout(&env.run(&["task", "list-suspended"]));
    let short = &parked.workspace_hash.to_hex()[..12];
    assert!(text.contains(&format!("  workspace: {short}\n")), "{text}");
    assert!(
        text.contains("  freed: process, sandbox, seat, budget ($0.06 back in the pool)\n"),
        "{text}"
    );
    assert!(
        text.contains("  wake: reprise approve waiting, then reprise task resume waiting\n"),
        "{text}"
    );
    assert!(!text.contains("settled"), "{text}");

    assert_success(&approve(&env, &["waiting"]));
    let listing = parked_listing(&env);
    assert_eq!(listing[1]["approved"], true);
    assert_eq!(
        listing[1]["wake_commands"],
        json!(["reprise task resume waiting"])
    );
}

/// Runs `plan` and parks its task `edit` through `reprise task suspend`
/// once its first attempt runs: the engine's own park.
fn park_through_the_engine(env: &Env, plan: &str) {
    let child = env.spawn(&["run", plan], std::process::Stdio::null());
    let journal = env
        .project()
        .join(".reprise/plans/inplace/tasks/edit/journal.jsonl");
    // The sim agent opens its session just after `attempt.started`: a
    // park before that has no session to resume warm (under load it came
    // first), so the test waits for the session's file as well.
    let sessions = env.project().join(".reprise/sim");
    let has_session = || fs::read_dir(&sessions).is_ok_and(|mut entries| entries.next().is_some());
    assert!(
        wait_until(std::time::Duration::from_secs(60), || {
            fs::read_to_string(&journal).is_ok_and(|text| text.contains("attempt.started"))
                && has_session()
        }),
        "the attempt never started"
    );
    assert_success(&env.run(&["task", "suspend", "edit"]));
    assert_eq!(child.wait_with_output().unwrap().status.code(), Some(3));
}

#[test]
fn the_engines_own_park_lists_verifies_pending_and_after_its_resume_verified() {
    for edit in [false, true] {
        let env = super::worktrees::git_env();
        let plan = super::worktrees::write_plan(
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
        park_through_the_engine(&env, &plan);
        let output = env.run(&["audit", "verify-suspension", "edit", "--json"]);
        assert_eq!(code(&output), Some(0), "{}", stdout(&output));
        let report = json_of(&output);
        assert_eq!(report["status"], "pending", "{report}");
        assert_eq!(
            report["latest"]["released"],
            json!(["process", "sandbox", "seat", "budget"])
        );
        let listing = parked_listing(&env);
        assert_eq!(listing.len(), 1);
        assert_eq!(listing[0]["task_id"], "edit");
        assert_eq!(listing[0]["wake_condition"], "a resume");
        assert_eq!(
            listing[0]["wake_commands"],
            json!(["reprise task resume edit"])
        );
        assert_eq!(listing[0]["receipt"], report["latest"]["receipt"]);
        if edit {
            fs::write(env.project().join("shop.py"), "price = 11\n").unwrap();
        }
        let resumed = env.run(&["task", "resume", "edit"]);
        assert_success(&resumed);
        let output = env.run(&["audit", "verify-suspension", "edit", "--json"]);
        let report = json_of(&output);
        assert_eq!(code(&output), Some(0), "{report}");
        assert_eq!(report["status"], "verified", "{report}");
        assert_eq!(report["resumed"], true);
        assert_eq!(report["workspace_match"], !edit);
        assert_eq!(report["effective_mode"], if edit { "cold" } else { "warm" });
        assert_eq!(parked_listing(&env), Vec::<Value>::new());
    }
}
