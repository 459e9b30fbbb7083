//! An ACP agent's own state (issue 31): the directories named by
//! `agents.acp.state_dirs` (or inferred for a known agent) are made before
//! a contained attempt and writable in its sandbox, so the session the
//! scripted peer saves there is found by the warm retry; without them the
//! save is denied and the retry goes cold, recorded as such.

use std::os::unix::fs::PermissionsExt;

use super::recovery::journal_kinds;
use super::worktrees::{git_env, write_plan};
use super::*;

/// The scripted ACP peer (`loadSession` declared) with its session store
/// at `~/.peer/sessions`, `state_dirs` as given (a YAML list, or `None`
/// for no key), and one task whose gate passes only in a loaded session.
fn peer_plan(env: &Env, state_dirs: Option<&str>) -> String {
    let peer = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../reprise-agents/testdata/acp/peer.js")
        .canonicalize()
        .unwrap();
    let store = store_of(env);
    let state_dirs = state_dirs
        .map(|dirs| format!("\n    state_dirs: {dirs}"))
        .unwrap_or_default();
    write_plan(
        env,
        "acp",
        &format!(
            r#"
version: 1
name: acp
agents:
  acp:
    command: [node, "{peer}"]
    env: {{ PEER_DECLARE: '{{"loadSession": true}}', PEER_TOOL_KIND: edit, PEER_STORE: "{store}" }}
    allowed_tools: [edit]{state_dirs}
tasks:
  - id: t
    agent: acp
    prompt: p
    retry_policy: warm
    max_retries: 1
    timeout: 60s
    gates: [ {{ name: loaded, result_matches: "opened by session/load" }} ]
"#,
            peer = peer.display(),
            store = store.display(),
        ),
    )
}

/// Where the peer keeps its sessions: `~/.peer/sessions` of the test's home.
fn store_of(env: &Env) -> PathBuf {
    env.temp.path().join("home/.peer/sessions")
}

/// The attempts' modes of the run's only task, and the task.
fn modes_of(run: &Value) -> Vec<String> {
    run["tasks"][0]["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|attempt| attempt["mode"].as_str().unwrap().to_owned())
        .collect()
}

/// Each retry decision's mode and downgrade reason, in order.
fn decisions_of(env: &Env) -> Vec<(String, Value)> {
    journal_kinds(env, "acp", "t")
        .iter()
        .filter(|row| row["kind"] == "retry.decision")
        .map(|row| {
            let decision = &row["body"]["decision"];
            (
                decision["retry_mode"].as_str().unwrap().to_owned(),
                decision["downgrade_reason"].clone(),
            )
        })
        .collect()
}

/// Every attempt ran in a sandbox: what the tests show is containment's.
fn assert_every_attempt_sandboxed(env: &Env) {
    let finished: Vec<Value> = journal_kinds(env, "acp", "t")
        .into_iter()
        .filter(|row| row["kind"] == "attempt.finished")
        .collect();
    assert!(!finished.is_empty());
    for row in &finished {
        assert_eq!(
            row["body"]["containment"]["sandboxed"], true,
            "{}",
            row["body"]["containment"]
        );
    }
}

#[test]
fn a_contained_acp_agent_s_warm_retry_loads_the_session_it_saved_in_its_state_dirs() {
    let env = git_env();
    let plan = peer_plan(&env, Some("[~/.peer/sessions]"));
    let output = env.run(&["run", &plan, "--json"]);
    assert_success(&output);
    let run = json_of(&output);
    assert_eq!(run["tasks"][0]["state"], "passed", "{run}");
    assert_eq!(modes_of(&run), ["new", "warm"], "{run}");
    assert_eq!(
        run["tasks"][0]["attempts"][1]["session_id"], "s-new",
        "the same session: {run}"
    );
    assert_every_attempt_sandboxed(&env);
    let store = store_of(&env);
    assert!(
        store.join("s-new.json").is_file(),
        "the peer saved its session"
    );
    let mode = fs::metadata(&store).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "reprise made the store private");
    let decisions = decisions_of(&env);
    assert_eq!(decisions, [("warm".to_owned(), Value::Null)]);
}

#[test]
fn without_state_dirs_a_contained_acp_agent_cannot_save_its_session_and_the_retry_is_cold() {
    let env = git_env();
    let plan = peer_plan(&env, None);
    let output = env.run(&["run", &plan, "--json"]);
    let run = json_of(&output);
    assert_eq!(run["tasks"][0]["state"], "failed", "{run}");
    assert_eq!(modes_of(&run), ["new", "cold"], "{run}");
    assert_every_attempt_sandboxed(&env);
    assert!(!store_of(&env).exists(), "nothing of the store was written");
    // Warm was decided, the load found no session, and the attempt ran
    // cold for that recorded reason.
    assert_eq!(
        decisions_of(&env),
        [
            ("warm".to_owned(), Value::Null),
            ("cold".to_owned(), json!("session_unavailable")),
        ]
    );
    // The peer's failed save is among the first attempt's denials.
    let denied = journal_kinds(&env, "acp", "t")
        .into_iter()
        .find(|row| row["kind"] == "attempt.finished")
        .map(|row| row["body"]["containment"]["denied"].to_string())
        .unwrap();
    assert!(
        denied.contains("peer: cannot save session s-new"),
        "{denied}"
    );
}

#[test]
fn run_check_shows_the_state_dirs_an_acp_agent_may_write() {
    let env = git_env();
    let home = env.temp.path().join("home");
    let plan = peer_plan(&env, Some("[~/.peer/sessions, /srv/peer]"));
    let output = env.run(&["run", &plan, "--check"]);
    assert_success(&output);
    assert!(
        stdout(&output).contains(&format!(
            "[t] agent acp state: {}, /srv/peer (agents.acp.state_dirs)\n",
            home.join(".peer/sessions").display()
        )),
        "{}",
        stdout(&output)
    );
    assert!(!stdout(&output).contains("allowed_tools is empty"));
    // Without the key, gemini's store is inferred from the program's name.
    // And with no allowed_tools it can edit nothing: check says so.
    let bin = env.temp.path().join("bin");
    fs::create_dir(&bin).unwrap();
    let gemini = bin.join("gemini");
    fs::write(&gemini, "#!/bin/sh\nexit 0\n").unwrap();
    fs::set_permissions(&gemini, fs::Permissions::from_mode(0o755)).unwrap();
    let plan = write_plan(
        &env,
        "gemini",
        "version: 1\nname: g\nagents:\n  acp: { command: [gemini, --acp] }\ntasks:\n  - { id: g, prompt: p, agent: acp }\n",
    );
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let output = env
        .command(&["run", &plan, "--check"])
        .env("PATH", path)
        .output()
        .unwrap();
    assert!(
        stdout(&output).contains(&format!(
            "[g] agent acp state: {} (inferred for gemini; agents.acp.state_dirs to change)\n",
            home.join(".gemini").display()
        )),
        "stdout: {}\nstderr: {}",
        stdout(&output),
        stderr(&output)
    );
    assert!(
        stdout(&output).contains("warning: [g] agents.acp.allowed_tools is empty: every permission request of the ACP agent is rejected"),
        "{}",
        stdout(&output)
    );
    assert!(
        json_of(
            &env.command(&["run", &plan, "--check", "--json"])
                .env(
                    "PATH",
                    format!(
                        "{}:{}",
                        bin.display(),
                        std::env::var("PATH").unwrap_or_default()
                    )
                )
                .output()
                .unwrap()
        )["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|warning| warning.as_str().unwrap().contains("allowed_tools is empty"))
    );
}

#[test]
fn state_dirs_that_reach_the_audit_key_are_refused_before_anything_runs() {
    let env = git_env();
    let plan = peer_plan(&env, Some("[~/.local/state]"));
    for args in [&["run", &plan, "--check"][..], &["run", &plan]] {
        let output = env.run(args);
        assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
        let key_dir = env.temp.path().join("home/.local/state/reprise");
        assert!(
            stderr(&output).contains(&format!(
                "agents.acp.state_dirs: {} holds the audit key's directory {}, which no agent or gate may reach",
                env.temp.path().join("home/.local/state").display(),
                key_dir.display()
            )),
            "{}",
            stderr(&output)
        );
        assert!(!env.project().join(".reprise").exists(), "nothing written");
    }
}
