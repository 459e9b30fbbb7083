//! A state directory an earlier reprise wrote still verifies and reads the
//! same: `tests/fixtures/rows/state.tar.gz` (made by `make.sh` beside it,
//! with the binary `MADE_WITH` names) holds two runs whose journals, spines,
//! audit chain and ledger cover most row kinds. Every reader is run on a
//! copy of it, and what it reads is checked, so a change to how rows are
//! written or parsed that would strand existing state directories fails
//! here.

use super::*;

const ROWS_RUN: &str = "R-01M8W2SC8MYQT14Y0A7K8QEJZS";
const PARKED_RUN: &str = "R-01M8W2SF0WXWMF4MP2SMDMQZM6";
const STATE_ID: &str = "S-6ed75ae09113ea432371df2346dcaa8a";

/// Each task's journal: rows, and the head's seq and event hash.
const JOURNALS: [(&str, u64, &str); 7] = [
    (
        "rows/warm",
        14,
        "fd90f20de393eb2eea8f7c9f66a3fb0528729badf0fcde5e2491fb4309228a56",
    ),
    (
        "rows/cold",
        16,
        "91af7112c653f161d9d733cf2e05a1d83bf56d3288794acc16fbe11673e5be8e",
    ),
    (
        "rows/limited",
        17,
        "3ca0c8e012f2dbcc1faf050ac20f8e919157771f48342dcff6c0dddff8d56289",
    ),
    (
        "rows/asks",
        14,
        "9c23cf4712060d70cef6384ad15e7966b99bd12e9221ac74982cbbd1ce2a487f",
    ),
    (
        "rows/partly",
        8,
        "087b45f9fc12d5b42637056e895fa5c3e6c307a603f787c181096e354a7648c3",
    ),
    (
        "rows/fails",
        16,
        "afe246774eeb9825aed3fc657ab8499629e56a6091315397079b3c12ede31223",
    ),
    (
        "parked/nap",
        17,
        "84a0f785893a1ab92d36cc7420833920c6766586a6b446082eb97232c990adc7",
    ),
];

/// The fixture unpacked into a fresh temp directory: `home/` (the audit
/// key) and `project/` (the repository and its `.reprise/`).
fn unpacked() -> Env {
    let env = Env::new();
    let archive = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/rows/state.tar.gz");
    let output = Command::new("tar")
        .arg("-xzpf")
        .arg(&archive)
        .arg("-C")
        .arg(env.temp.path())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "tar: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    env
}

/// The fixture with its moved audit chain adopted under a new witness, as
/// `reprise init` does for a state directory that moved.
fn adopted() -> Env {
    let env = unpacked();
    let output = env.run(&["init", "--json"]);
    assert_success(&output);
    assert_eq!(json_of(&output)["adopted_rows"], 42, "{}", stdout(&output));
    env
}

fn success_json(env: &Env, args: &[&str]) -> Value {
    let output = env.run(args);
    assert_success(&output);
    json_of(&output)
}

#[test]
fn the_moved_audit_chain_verifies_with_its_key_and_is_adopted() {
    let env = unpacked();
    // Moved: the witness beside the key names the old path, so the chain
    // has none here; every row still verifies with the key.
    let output = env.run(&["audit", "verify", "--json"]);
    assert_eq!(output.status.code(), Some(1), "{}", stdout(&output));
    let report = json_of(&output);
    assert_eq!(report["reason"], "witness_missing", "{report}");
    assert_eq!(report["rows"], 42);
    // The fault is past the last row: none of the 42 is bad.
    assert_eq!(report["first_bad_row"], 42);
    let init = success_json(&env, &["init", "--json"]);
    assert_eq!(init["adopted_rows"], 42, "{init}");
    assert_eq!(init["created"], false);
    let report = success_json(&env, &["audit", "verify", "--json"]);
    assert_eq!(report["ok"], true, "{report}");
    assert_eq!(report["rows"], 43);
    assert_eq!(report["witness"]["state_id"], STATE_ID);
    assert_eq!(report["witness"]["seq"], 42);
}

#[test]
fn every_journal_verifies_sealed_with_its_decisions_bound() {
    let env = adopted();
    for (task, rows, head) in JOURNALS {
        let report = success_json(&env, &["journal", "verify", task, "--json"]);
        assert_eq!(report["ok"], true, "{task}: {report}");
        assert_eq!(report["rows"], rows, "{task}");
        assert_eq!(report["head"]["seq"], rows - 1, "{task}");
        assert_eq!(report["head"]["event_hash"], head, "{task}");
        assert_eq!(report["coverage"], "complete", "{task}");
        assert_eq!(report["identity"], "verified", "{task}: sealed");
        // `partly` was kept at its first attempt: no decision to bind.
        let decisions = if task == "rows/partly" {
            "unverifiable"
        } else {
            "verified"
        };
        assert_eq!(report["decisions"], decisions, "{task}");
    }
    let text = env.run(&["journal", "verify", "rows/cold"]);
    assert_success(&text);
    assert!(
        stdout(&text).starts_with("journal rows/cold: ok\n"),
        "{}",
        stdout(&text)
    );
    // The rows read back whole, in the order they were written.
    let shown = success_json(&env, &["journal", "show", "rows/cold", "--json"]);
    let kinds: Vec<&str> = shown["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "task.started",
            "checkpoint.taken",
            "attempt.started",
            "task.checkpoint",
            "attempt.finished",
            "attempt.anomaly",
            "recovery.diagnosis",
            "retry.budget",
            "checkpoint.restored",
            "retry.decision",
            "checkpoint.taken",
            "attempt.started",
            "task.checkpoint",
            "attempt.finished",
            "task.result",
            "task.finished",
        ]
    );
    assert_eq!(
        shown["rows"][5]["body"]["anomaly"],
        json!({"kind": "write_outside_allowed_paths", "paths": ["stray.txt"]})
    );
}

/// `mode` of each attempt of each task in a status or run document.
fn modes(run: &Value) -> Vec<(String, String, Vec<String>)> {
    run["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|task| {
            (
                task["task_id"].as_str().unwrap().to_owned(),
                task["state"].as_str().unwrap().to_owned(),
                task["attempts"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|attempt| attempt["mode"].as_str().unwrap().to_owned())
                    .collect(),
            )
        })
        .collect()
}

#[test]
fn status_reads_both_runs_and_the_ledger() {
    let env = adopted();
    let owned = |rows: &[(&str, &str, &[&str])]| -> Vec<(String, String, Vec<String>)> {
        rows.iter()
            .map(|(task, state, modes)| {
                (
                    (*task).to_owned(),
                    (*state).to_owned(),
                    modes.iter().map(|mode| (*mode).to_owned()).collect(),
                )
            })
            .collect()
    };
    let rows = success_json(&env, &["status", ROWS_RUN, "--json"]);
    assert_eq!(rows["run_id"], ROWS_RUN);
    assert_eq!(
        modes(&rows),
        owned(&[
            ("warm", "passed", &["new", "warm"]),
            ("cold", "passed", &["new", "cold"]),
            ("limited", "passed", &["new", "warm"]),
            ("asks", "passed", &["new", "warm"]),
            ("partly", "partial", &["new"]),
            ("fails", "failed", &["new", "warm"]),
        ])
    );
    assert_eq!(rows["spent_micro_usd"], 30_000);
    assert_eq!(rows["ledger"]["ok"], true, "{}", rows["ledger"]);
    assert_eq!(rows["ledger"]["rows"], 20);
    assert_eq!(rows["ledger"]["sealed_through"], 19);
    assert_eq!(rows["ledger"]["identity"], "verified");
    let outcomes: Vec<&Value> = rows["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|task| task["attempts"].as_array().unwrap())
        .map(|attempt| &attempt["outcome"])
        .collect();
    assert_eq!(
        outcomes,
        [
            "judged",
            "passed",
            "judged",
            "passed",
            "parked",
            "passed",
            "needs_context",
            "passed",
            "judged",
            "judged",
            "judged"
        ]
    );
    let partly = &rows["tasks"][4];
    assert_eq!(partly["gaps"], json!(["docs"]));
    let warm = &rows["tasks"][0];
    let levels: Vec<&Value> = warm["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|attempt| &attempt["gates"][1]["level"])
        .collect();
    assert_eq!(levels, [&json!(80), &json!(70)]);

    // The latest run is the parked one, resumed warm in its own session.
    let parked = success_json(&env, &["status", "--json"]);
    assert_eq!(parked["run_id"], PARKED_RUN);
    assert_eq!(parked["ok"], true, "{parked}");
    assert_eq!(parked["liveness"], json!({"state": "finished"}));
    assert_eq!(
        modes(&parked),
        owned(&[("nap", "passed", &["new", "warm"])])
    );
    let text = stdout(&env.run(&["status", ROWS_RUN]));
    assert!(
        text.contains("fails: failed (not accepted after 2 attempts)"),
        "{text}"
    );
    assert!(
        text.contains("attempt 1 (new): stopped by a park"),
        "{text}"
    );
    let runs = stdout(&env.run(&["runs"]));
    assert_eq!(runs.lines().count(), 2, "{runs}");
    assert!(runs.contains("5/6 tasks passed"), "{runs}");
}

#[test]
fn task_show_and_lineage_read_the_decisions_and_checkpoints() {
    let env = adopted();
    let cold = success_json(&env, &["task", "show", "rows/cold", "--json"]);
    assert_eq!(cold["state"], "passed");
    assert_eq!(cold["run_id"], ROWS_RUN);
    assert_eq!(cold["metadata"]["retry_mode"], "cold");
    assert_eq!(cold["metadata"]["retry_requested_mode"], "cold");
    assert_eq!(
        cold["metadata"]["retry_decision_hash"],
        "483e9562c4a4b1c79f995ddc7038412875271b89a92ba2b83f288ce389810221"
    );
    let checkpoints = cold["checkpoints"].as_array().unwrap();
    assert_eq!(checkpoints.len(), 2, "{cold}");
    let context_modes: Vec<&Value> = checkpoints
        .iter()
        .map(|checkpoint| &checkpoint["context"]["mode"])
        .collect();
    assert_eq!(context_modes, ["new", "cold"]);
    assert_eq!(
        checkpoints[0]["context"]["grant"]["allowed_paths"],
        json!(["c.txt"])
    );
    assert_eq!(checkpoints[0]["dependencies"], json!([]));
    let limited = success_json(&env, &["task", "show", "rows/limited", "--json"]);
    assert_eq!(
        limited["checkpoints"][0]["dependencies"][0]["task"], "warm",
        "{limited}"
    );
    assert_eq!(
        limited["checkpoints"][0]["dependencies"][0]["state"],
        "passed"
    );

    let lineage = success_json(&env, &["lineage", "show", "parked/nap", "--json"]);
    assert_eq!(lineage["ok"], true, "{lineage}");
    assert_eq!(lineage["spine_rows"], 1);
    let decision = &lineage["decisions"][0];
    assert_eq!(decision["verified"], true);
    assert_eq!(decision["attempt"], 2);
    assert_eq!(decision["decision"]["retry_mode"], "warm");
    assert_eq!(decision["decision"]["workspace_match"], true);
    assert_eq!(
        decision["decision_hash"],
        "83aa2b617fd70e24cc5001ef8158dae6b19177498c1c645fb1cb6ef75a97f28a"
    );
    let text = stdout(&env.run(&["lineage", "show", "rows/warm"]));
    assert!(
        text.starts_with("lineage of rows/warm: 1 decision, 1 sealed in the spine"),
        "{text}"
    );
}

#[test]
fn the_parks_verify_offline_with_their_receipts_and_approval() {
    let env = adopted();
    for (task, run) in [("rows/limited", ROWS_RUN), ("parked/nap", PARKED_RUN)] {
        let report = success_json(&env, &["audit", "verify-suspension", task, "--json"]);
        assert_eq!(report["status"], "verified", "{task}: {report}");
        assert_eq!(report["resumed"], true, "{task}");
        assert_eq!(report["effective_mode"], "warm", "{task}");
        assert_eq!(report["workspace_match"], true, "{task}");
        assert_eq!(report["latest"]["run_id"], run, "{task}");
        assert_eq!(
            report["latest"]["released"],
            json!(["process", "sandbox", "seat", "budget"]),
            "{task}"
        );
    }
    let listed = env.run(&["task", "list-suspended"]);
    assert_success(&listed);
    assert_eq!(stdout(&listed), "no task is suspended\n");
}

#[test]
fn the_report_and_replay_repair_read_every_chain_and_change_nothing() {
    let env = adopted();
    let page = env.temp.path().join("report.html");
    assert_success(&env.run(&["report", ROWS_RUN, "-o", page.to_str().unwrap()]));
    let html = fs::read_to_string(&page).unwrap();
    for needle in [
        "journal and spine of cold",
        "parked (usage_limit)",
        "needs_context",
        "coverage@70",
        "fails</",
    ] {
        assert!(html.contains(needle), "the report lacks {needle:?}");
    }
    // The audit chain, the ledger and the six journals with their spines.
    assert_eq!(html.matches(r#"<td class="ok">verifies</td>"#).count(), 8);
    assert!(
        !html.contains(r#"class="broken""#),
        "a chain reads as broken"
    );
    let before = env.snapshot();
    for target in ["rows/cold", "parked/nap", "ledger", "audit"] {
        let output = env.run(&["replay", "repair", target]);
        assert_success(&output);
        assert!(
            stdout(&output).contains("no torn tail: nothing to repair"),
            "{target}: {}",
            stdout(&output)
        );
    }
    assert_eq!(env.snapshot(), before, "a repair with nothing to cut wrote");
}
