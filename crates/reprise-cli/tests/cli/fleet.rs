//! `reprise fleet init` and `reprise fleet status` against a real
//! PostgreSQL, each test in a database of its own.

use reprise_testkit::pg::TestDatabase;

use super::*;

#[test]
fn fleet_init_twice_is_a_no_op_and_status_lists_workers_and_tasks() {
    let env = Env::new();
    let database = TestDatabase::create().unwrap();
    let first = env.run(&["fleet", "init", "--db", &database.url, "--json"]);
    assert_eq!(code(&first), Some(0), "stderr: {}", stderr(&first));
    assert_eq!(json_of(&first)["from_version"], 0);
    assert_eq!(json_of(&first)["version"], 3);
    // The second init through REPRISE_DATABASE_URL: nothing to do.
    let second = env
        .command(&["fleet", "init"])
        .env("REPRISE_DATABASE_URL", &database.url)
        .output()
        .unwrap();
    assert_eq!(code(&second), Some(0), "stderr: {}", stderr(&second));
    assert!(
        stdout(&second).contains("is at version 3: nothing to do"),
        "{}",
        stdout(&second)
    );

    let empty = json_of(&env.run(&["fleet", "status", "--db", &database.url, "--json"]));
    assert_eq!(empty, json!({"workers": [], "tasks": []}));

    let client =
        reprise_fleet::FleetClient::connect(&database.url, reprise_fleet::Timings::default())
            .unwrap();
    client.register_worker("host-a", 3).unwrap();
    client
        .open_run(&reprise_fleet::RunSpec {
            run_id: "R-01JF1EET00000000000000000A".into(),
            plan_id: "plan".into(),
            coordinator_host: "coordinator".into(),
            remote: "origin".into(),
        })
        .unwrap();
    client
        .submit(
            "R-01JF1EET00000000000000000A",
            "t1",
            &json!({}),
            &reprise_fleet::Affinity::Any,
        )
        .unwrap();
    client.claim("host-a", 1).unwrap();

    let output = env.run(&["fleet", "status", "--db", &database.url, "--json"]);
    assert_eq!(code(&output), Some(0), "stderr: {}", stderr(&output));
    let status = json_of(&output);
    assert_eq!(status["workers"][0]["host_id"], "host-a");
    assert_eq!(status["workers"][0]["capacity"], 3);
    assert!(
        status["workers"][0]["heartbeat_at"]
            .as_str()
            .unwrap()
            .ends_with('Z')
    );
    let task = &status["tasks"][0];
    assert_eq!(task["task_id"], "t1");
    assert_eq!(task["state"], "running");
    assert_eq!(task["holder"], "host-a");
    assert_eq!(task["lease_epoch"], 1);
    let text = stdout(&env.run(&["fleet", "status", "--db", &database.url]));
    assert!(text.contains("host-a  capacity 3"), "{text}");
    assert!(
        text.contains("t1  running  holder host-a  epoch 1"),
        "{text}"
    );
}

#[test]
fn fleet_commands_refuse_a_bad_url_or_an_unreachable_server_in_one_line() {
    let env = Env::new();
    let bad = env.run(&["fleet", "init", "--db", "mysql://somewhere/x"]);
    assert_eq!(code(&bad), Some(2));
    assert_eq!(stderr(&bad).lines().count(), 1, "{}", stderr(&bad));
    assert!(stderr(&bad).contains("is not a PostgreSQL url"));

    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let url = format!("postgres://postgres@{closed}/x");
    let unreachable = env.run(&["fleet", "status", "--db", &url]);
    assert_eq!(code(&unreachable), Some(1));
    assert_eq!(
        stderr(&unreachable).lines().count(),
        1,
        "{}",
        stderr(&unreachable)
    );
    assert!(stderr(&unreachable).contains("did not answer"));

    let missing = env.run(&["fleet", "status"]);
    assert_eq!(code(&missing), Some(2));
    assert!(stderr(&missing).contains("REPRISE_DATABASE_URL"));

    let database = TestDatabase::create().unwrap();
    let uninitialised = env.run(&["fleet", "status", "--db", &database.url]);
    assert_eq!(code(&uninitialised), Some(1));
    assert!(stderr(&uninitialised).contains("run `reprise fleet init --db URL` first"));
}

/// A plan for the fleet tests: one task whose first attempt fails its gate
/// and whose warm retry passes, and one that passes at once.
const FLEET_PLAN: &str = r#"version: 1
name: fleet
defaults: { agent: sim, timeout: 30s }
seats: 2
tasks:
  - id: greet
    prompt: "Create greeting.txt containing hello"
    retry_policy: warm
    sim:
      - { reply: "I wrote greeting.txt.", write: { greeting.txt: "hi\n" } }
      - { reply: "DONE: it says hello.", write: { greeting.txt: "hello\n" } }
    gates:
      - { name: content, run: "grep -qx hello greeting.txt", disclose: output, timeout: 10s }
  - id: count
    prompt: "Create count.txt containing 3"
    sim:
      - { reply: "DONE", write: { count.txt: "3\n" } }
    gates:
      - { name: content, run: "grep -qx 3 count.txt", timeout: 10s }
"#;

/// `git ARGS` in `dir`, which must succeed.
fn git_in(dir: &Path, args: &[&str]) {
    let status = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args)
        .current_dir(dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "git {args:?} in {}", dir.display());
}

/// The project, committed with `plan` as `plan.yaml` and pushed to a bare
/// remote beside it, its state directory made: the remote's path.
fn project_with_remote(env: &Env, plan: &str) -> PathBuf {
    let remote = env.temp.path().join("remote.git");
    git_in(env.temp.path(), &["init", "-q", "--bare", "remote.git"]);
    let project = env.project();
    git_in(&project, &["init", "-q"]);
    fs::write(project.join("plan.yaml"), plan).unwrap();
    git_in(&project, &["add", "plan.yaml"]);
    git_in(&project, &["commit", "-qm", "plan"]);
    git_in(
        &project,
        &[
            "push",
            "-q",
            remote.to_str().unwrap(),
            "HEAD:refs/heads/main",
        ],
    );
    assert_success(&env.run(&["init"]));
    remote
}

/// `reprise worker` for host `host` of the fleet at `database`, in a
/// directory of its own, its output piped.
fn spawn_worker(env: &Env, database: &str, host: &str) -> std::process::Child {
    spawn_worker_of(env, database, host, 2)
}

/// `spawn_worker` with `capacity` seats.
fn spawn_worker_of(env: &Env, database: &str, host: &str, capacity: u32) -> std::process::Child {
    let dir = env.temp.path().join(format!("worker-{host}"));
    let capacity = capacity.to_string();
    env.command(&[
        "worker",
        "--db",
        database,
        "--capacity",
        &capacity,
        "--host-id",
        host,
        "--dir",
        dir.to_str().unwrap(),
        "--json",
    ])
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap()
}

/// Sends `signal` (`-TERM`, `-INT`) to `child` and waits for its output.
fn signal_and_wait(child: std::process::Child, signal: &str) -> Output {
    let _ = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status();
    child.wait_with_output().unwrap()
}

/// A worker drained by SIGTERM: its counters (`--json`).
fn drain(worker: std::process::Child) -> Value {
    json_of(&signal_and_wait(worker, "-TERM"))
}

/// `output` ended with `expected`, or the test fails showing what it said.
fn assert_exit(output: &Output, expected: i32) {
    assert_eq!(
        code(output),
        Some(expected),
        "{}\n{}",
        stderr(output),
        stdout(output)
    );
}

/// Whether process `pid` is gone (or a zombie no one reaped yet).
fn process_gone(pid: &str) -> bool {
    !Path::new(&format!("/proc/{pid}")).exists()
        || fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| stat.contains(") Z "))
}

/// `reprise run plan.yaml --fleet DATABASE --remote REMOTE --json`.
fn fleet_run(env: &Env, database: &str, remote: &Path) -> Command {
    let mut command = env.command(&[
        "run",
        "plan.yaml",
        "--fleet",
        database,
        "--remote",
        remote.to_str().unwrap(),
        "--json",
    ]);
    command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    command
}

/// A plan run on two `reprise worker`s ends as the same plan run locally:
/// the same statuses, attempt modes (the warm retry on the host that holds
/// the session), exit code and summary; its journals and audit chain verify
/// on the coordinator, and `apply` brings the results home.
#[test]
fn a_plan_run_on_two_workers_ends_as_a_local_run_and_its_chains_verify() {
    let local = Env::new();
    project_with_remote(&local, FLEET_PLAN);
    let local_run = local.run(&["run", "plan.yaml", "--json"]);
    assert_eq!(code(&local_run), Some(0), "{}", stderr(&local_run));

    let env = Env::new();
    let remote = project_with_remote(&env, FLEET_PLAN);
    let database = TestDatabase::create().unwrap();
    assert_success(&env.run(&["fleet", "init", "--db", &database.url]));
    let workers: Vec<std::process::Child> = ["one", "two"]
        .iter()
        .map(|host| spawn_worker(&env, &database.url, host))
        .collect();
    let fleet_run = fleet_run(&env, &database.url, &remote).output().unwrap();
    let drained: Vec<Value> = workers
        .into_iter()
        .map(|worker| {
            let _ = Command::new("kill")
                .args(["-TERM", &worker.id().to_string()])
                .status();
            let output = worker.wait_with_output().unwrap();
            assert_eq!(code(&output), Some(0), "{}", stderr(&output));
            json_of(&output)
        })
        .collect();
    assert_eq!(code(&fleet_run), Some(0), "{}", stderr(&fleet_run));

    let summary = |output: &Output| -> Vec<(String, String, Vec<String>)> {
        json_of(output)["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|task| {
                let modes = task["attempts"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|attempt| attempt["mode"].as_str().unwrap_or_default().to_owned())
                    .collect();
                (
                    task["task_id"].as_str().unwrap().to_owned(),
                    task["state"].as_str().unwrap().to_owned(),
                    modes,
                )
            })
            .collect()
    };
    assert_eq!(
        summary(&fleet_run),
        summary(&local_run),
        "{}",
        stdout(&fleet_run)
    );
    assert_eq!(
        summary(&fleet_run)[0],
        (
            "greet".to_owned(),
            "passed".to_owned(),
            vec!["new".to_owned(), "warm".to_owned()]
        )
    );
    let completed: u64 = drained
        .iter()
        .map(|worker| worker["completed"].as_u64().unwrap())
        .sum();
    assert_eq!(completed, 2, "{drained:?}");
    for task in ["greet", "count"] {
        assert_success(&env.run(&["journal", "verify", task]));
    }
    assert_success(&env.run(&["audit", "verify"]));
    assert_success(&env.run(&["apply"]));
    assert_eq!(
        fs::read_to_string(env.project().join("greeting.txt")).unwrap(),
        "hello\n"
    );
    assert_eq!(
        fs::read_to_string(env.project().join("count.txt")).unwrap(),
        "3\n"
    );
}

/// A worker killed with SIGKILL mid-attempt: its lease expires, another
/// worker takes the task over from the journal as shipped, and the run
/// ends passed, its chains verifying on the coordinator.
#[test]
fn a_worker_killed_mid_attempt_loses_its_task_to_another_and_the_run_passes() {
    let env = Env::new();
    let started = env.temp.path().join("started");
    let remote = project_with_remote(
        &env,
        &format!(
            r#"version: 1
name: takeover
defaults: {{ agent: command, timeout: 2m, containment: "off" }}
tasks:
  - id: slow
    prompt: "p"
    command: ["sh", "-c", "if [ -e {started} ]; then echo done > out.txt; echo DONE; else touch {started}; sleep 120; fi"]
    gates:
      - {{ name: out, run: "test -e out.txt", timeout: 10s }}
"#,
            started = started.display()
        ),
    );
    let database = TestDatabase::create().unwrap();
    assert_success(&env.run(&["fleet", "init", "--db", &database.url]));
    let mut first = spawn_worker(&env, &database.url, "one");
    let run = fleet_run(&env, &database.url, &remote).spawn().unwrap();
    assert!(
        wait_until(std::time::Duration::from_secs(60), || started.exists()),
        "the first worker never started the agent"
    );
    first.kill().unwrap();
    first.wait().unwrap();
    let mut second = spawn_worker(&env, &database.url, "two");
    let output = run.wait_with_output().unwrap();
    let _ = second.kill();
    let _ = second.wait();
    assert_eq!(
        code(&output),
        Some(0),
        "{}\n{}",
        stderr(&output),
        stdout(&output)
    );
    let ran = json_of(&output);
    assert_eq!(ran["tasks"][0]["state"], "passed", "{ran}");
    // The attempt the killed worker ran is on record, then the one that
    // passed on the other host.
    let attempts = ran["tasks"][0]["attempts"].as_array().unwrap();
    assert!(attempts.len() >= 2, "{ran}");
    assert_success(&env.run(&["journal", "verify", "slow"]));
    assert_success(&env.run(&["audit", "verify"]));
    let status = json_of(&env.run(&["fleet", "status", "--db", &database.url, "--json"]));
    let task = &status["tasks"][0];
    assert!(task["lease_epoch"].as_i64().unwrap() >= 2, "{status}");
}

/// A worker killed with SIGKILL in the middle of a warm retry: the tree its
/// first attempt left (through the git remote) and the session's
/// transcript (shipped with its rows) travel, so the worker that takes the
/// task over resumes the same session warm, with only the corrective
/// instruction, where it would otherwise go cold (`session_on_other_host`).
#[test]
fn a_worker_killed_in_a_warm_retry_leaves_its_session_to_the_next_host_which_resumes_it_warm() {
    let env = Env::new();
    let remote = project_with_remote(
        &env,
        r#"version: 1
name: takeover
defaults: { agent: sim, timeout: 2m }
tasks:
  - id: greet
    prompt: "Create greeting.txt containing hello"
    retry_policy: warm
    max_retries: 2
    sim:
      - { reply: "I wrote greeting.txt.", write: { greeting.txt: "hi\n" } }
      - { reply: "still at it", delay: 100s }
      - { reply: "DONE: it says hello.", write: { greeting.txt: "hello\n" } }
    gates:
      - { name: content, run: "grep -qx hello greeting.txt", disclose: output, timeout: 10s }
"#,
    );
    let database = TestDatabase::create().unwrap();
    assert_success(&env.run(&["fleet", "init", "--db", &database.url]));
    let mut first = spawn_worker(&env, &database.url, "one");
    let run = fleet_run(&env, &database.url, &remote).spawn().unwrap();
    let state = env.project().join(".reprise");
    let second_attempt_started = || {
        let journal = String::from_utf8_lossy(&journal_of_if_any(&state, "greet")).into_owned();
        journal.matches("\"kind\":\"attempt.started\"").count() >= 2
    };
    assert!(
        wait_until(std::time::Duration::from_secs(60), second_attempt_started),
        "the first worker never started the warm retry"
    );
    first.kill().unwrap();
    first.wait().unwrap();
    let mut second = spawn_worker(&env, &database.url, "two");
    let output = run.wait_with_output().unwrap();
    let _ = second.kill();
    let _ = second.wait();
    let (ran, modes) = only_task_passed(&output);
    let attempts = ran["tasks"][0]["attempts"].as_array().unwrap();
    // The retry killed with its worker, then the same session resumed warm
    // on the other worker.
    assert_eq!(modes.first().map(String::as_str), Some("new"), "{ran}");
    assert_eq!(modes.last().map(String::as_str), Some("warm"), "{ran}");
    let first_session = &attempts[0]["session_id"];
    assert_eq!(
        &attempts.last().unwrap()["session_id"],
        first_session,
        "{ran}"
    );
    // Host two's copy of the session holds the first attempt's turn, then
    // its own: the resume carried the earlier turn.
    let session = first_session.as_str().unwrap();
    let transcript = fs::read_to_string(
        env.temp
            .path()
            .join(format!("worker-two/.reprise/sim/{session}.jsonl")),
    )
    .unwrap_or_else(|err| panic!("worker two's copy of session {session}: {err}"));
    let turns: Vec<&str> = transcript.lines().collect();
    assert_eq!(turns.len(), 2, "{transcript}");
    assert!(
        turns[0].contains("Create greeting.txt containing hello"),
        "{transcript}"
    );
    // The takeover's decision was recorded warm, not `session_on_other_host`.
    let journal = String::from_utf8_lossy(&journal_of(&state, "greet")).into_owned();
    assert!(!journal.contains("session_on_other_host"), "{journal}");
    assert_success(&env.run(&["journal", "verify", "greet"]));
    assert_success(&env.run(&["audit", "verify"]));
}

/// A task that runs into its usage limit on a worker parks there: the
/// worker kills the agent, sends the task's checkpoints through the remote
/// and frees its seat; the coordinator writes the park's receipt and every
/// release, wakes it at the reset, checks it, and sends it to a worker,
/// which resumes it warm in the same session on the files the park kept;
/// `audit verify-suspension` accepts the park.
#[test]
fn a_usage_limit_on_a_worker_parks_the_task_and_a_worker_resumes_it_warm() {
    let env = Env::new();
    let remote = project_with_remote(
        &env,
        r#"version: 1
name: quota
defaults: { agent: sim, max_retries: 1, timeout: 60s, retry_policy: warm }
tasks:
  - id: busy
    prompt: "Create done.txt"
    sim:
      - { reply: "usage limit reached; resets in 2 seconds", exit_code: 1, write: { started.txt: "half\n" } }
      - { reply: "DONE", write: { done.txt: "yes\n" } }
    gates: [ { name: done, run: "test -e done.txt && test -e started.txt" } ]
"#,
    );
    let database = TestDatabase::create().unwrap();
    assert_success(&env.run(&["fleet", "init", "--db", &database.url]));
    let worker = spawn_worker(&env, &database.url, "one");
    let output = fleet_run(&env, &database.url, &remote).output().unwrap();
    let drained = drain(worker);
    let (ran, modes) = only_task_passed(&output);
    let attempts = ran["tasks"][0]["attempts"].as_array().unwrap();
    assert_eq!(modes, ["new", "warm"], "{ran}");
    assert_eq!(
        attempts[1]["session_id"], attempts[0]["session_id"],
        "{ran}"
    );
    // The worker ran the attempt that parked (its lease ended with the
    // park) and, in a second lease, the resumed one; nothing ran on the
    // coordinator, and no worktree is left on the worker.
    assert_eq!(drained["completed"], 2, "{drained}");
    assert!(
        !env.project()
            .join(".reprise/worktrees")
            .join(ran["run_id"].as_str().unwrap())
            .join("busy")
            .exists(),
        "the resume ran on the coordinator"
    );
    let worktrees = env.temp.path().join("worker-one/.reprise/worktrees");
    let left: Vec<_> = fs::read_dir(&worktrees)
        .map(|dirs| {
            dirs.flatten()
                .flat_map(|run| fs::read_dir(run.path()).into_iter().flatten().flatten())
                .collect()
        })
        .unwrap_or_default();
    assert!(
        left.is_empty(),
        "the parked worktree is released on the worker: {left:?}"
    );
    assert_parked_resumed_and_verified(&env, "busy");
    // Its rows, taken into the journal here, are gone from the database.
    let client =
        reprise_fleet::FleetClient::connect(&database.url, reprise_fleet::Timings::default())
            .unwrap();
    let left = client
        .collect(ran["run_id"].as_str().unwrap(), 0, 10_000)
        .unwrap()
        .into_iter()
        .filter(|item| matches!(item, reprise_fleet::Collected::Row { .. }))
        .count();
    assert_eq!(left, 0, "rows the coordinator took were kept");
}

/// A park resumed on a worker that fails its gate once more before it
/// passes: the checkpoints that worker took after the resume come to the
/// coordinator too, so `journal verify` finds every one its journal records.
#[test]
fn a_resumed_park_s_later_checkpoints_reach_the_coordinator() {
    let env = Env::new();
    let remote = project_with_remote(
        &env,
        r#"version: 1
name: quota
defaults: { agent: sim, max_retries: 2, timeout: 60s, retry_policy: warm }
tasks:
  - id: busy
    prompt: "Create done.txt"
    sim:
      - { reply: "usage limit reached; resets in 2 seconds", exit_code: 1 }
      - { reply: "not yet", write: { half.txt: "x\n" } }
      - { reply: "DONE", write: { done.txt: "yes\n" } }
    gates: [ { name: done, run: "test -e done.txt" } ]
"#,
    );
    let database = TestDatabase::create().unwrap();
    assert_success(&env.run(&["fleet", "init", "--db", &database.url]));
    let worker = spawn_worker(&env, &database.url, "one");
    let output = fleet_run(&env, &database.url, &remote).output().unwrap();
    drain(worker);
    let (ran, modes) = only_task_passed(&output);
    assert_eq!(modes, ["new", "warm", "warm"], "{ran}");
    assert_parked_resumed_and_verified(&env, "busy");
}

/// Checks that `task`'s journal on the coordinator holds its park and its
/// resume, and that the park, the journal (its checkpoints too) and the
/// audit chain verify; returns the park's `task.suspend` row.
fn assert_parked_resumed_and_verified(env: &Env, task: &str) -> String {
    let journal =
        String::from_utf8_lossy(&journal_of(&env.project().join(".reprise"), task)).into_owned();
    let suspend = journal
        .lines()
        .find(|line| line.contains("\"kind\":\"task.suspend\""))
        .unwrap_or_else(|| panic!("no park: {journal}"))
        .to_owned();
    assert!(journal.contains("\"kind\":\"task.resume\""), "{journal}");
    assert_success(&env.run(&["audit", "verify-suspension", task]));
    assert_success(&env.run(&["journal", "verify", task]));
    assert_success(&env.run(&["audit", "verify"]));
    suspend
}

/// `task suspend` asked of the coordinator for a task a worker runs: passed
/// on to that worker through the queue, which parks the task as a local
/// run would (its agent stopped, its checkpoints sent, its seat freed); the
/// asker is answered once the park is recorded, and the timed wake resumes
/// it on a worker. A pause, which a worker cannot be reached with, is
/// refused in one line.
#[test]
fn a_suspend_asked_of_the_coordinator_parks_the_task_on_its_worker() {
    let env = Env::new();
    let remote = project_with_remote(
        &env,
        r#"version: 1
name: asked
defaults: { agent: sim, timeout: 2m, retry_policy: warm }
tasks:
  - id: slow
    prompt: "Create done.txt"
    sim:
      - { reply: "working", delay: 100s }
      - { reply: "DONE", write: { done.txt: "yes\n" } }
    gates: [ { name: done, run: "test -e done.txt" } ]
"#,
    );
    let database = TestDatabase::create().unwrap();
    assert_success(&env.run(&["fleet", "init", "--db", &database.url]));
    let worker = spawn_worker(&env, &database.url, "one");
    let run = fleet_run(&env, &database.url, &remote).spawn().unwrap();
    let state = env.project().join(".reprise");
    assert!(
        wait_until(std::time::Duration::from_secs(60), || {
            String::from_utf8_lossy(&journal_of_if_any(&state, "slow"))
                .contains("\"kind\":\"attempt.started\"")
        }),
        "the worker never started the agent"
    );
    let paused = env.run(&["task", "pause", "slow"]);
    assert_ne!(code(&paused), Some(0), "{}", stdout(&paused));
    assert!(
        stderr(&paused).contains("fleet worker"),
        "{}",
        stderr(&paused)
    );
    let parked = env.run(&[
        "task", "suspend", "slow", "--until", "3s", "--reason", "lunch",
    ]);
    assert_success(&parked);
    let (ran, modes) = only_task_passed(&run.wait_with_output().unwrap());
    let drained = drain(worker);
    // Parked in its first attempt (stopped long before its 100 s), then
    // resumed warm in the same session by a second lease.
    assert_eq!(modes, ["new", "warm"], "{ran}");
    assert_eq!(drained["completed"], 2, "{drained}");
    let suspend = assert_parked_resumed_and_verified(&env, "slow");
    assert!(suspend.contains("\"cause\":\"request\""), "{suspend}");
    assert!(suspend.contains("lunch"), "{suspend}");
    assert!(suspend.contains("\"requested_by\""), "{suspend}");
}

/// `run --fleet` to a database that does not answer, or holds no fleet, is
/// one line and exit 1 before anything is written; without --remote it is
/// a usage error.
#[test]
fn a_fleet_run_to_a_database_that_cannot_take_it_is_refused_before_any_write() {
    let env = Env::new();
    let remote = project_with_remote(&env, FLEET_PLAN);
    let before = env.snapshot();
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let unreachable = format!("postgres://postgres@{closed}/x");
    let database = TestDatabase::create().unwrap();
    for (url, says) in [
        (unreachable.as_str(), "did not answer"),
        (database.url.as_str(), "reprise fleet init"),
    ] {
        let output = fleet_run(&env, url, &remote).output().unwrap();
        assert_eq!(code(&output), Some(1), "{}", stderr(&output));
        assert_eq!(stderr(&output).lines().count(), 1, "{}", stderr(&output));
        assert!(stderr(&output).contains(says), "{}", stderr(&output));
    }
    let no_remote = env.run(&["run", "plan.yaml", "--fleet", &database.url]);
    assert_eq!(code(&no_remote), Some(2), "{}", stderr(&no_remote));
    assert!(stderr(&no_remote).contains("--remote"));
    assert_eq!(
        env.snapshot(),
        before,
        "a refused fleet run wrote something"
    );
}

/// The run id of the only run in `env`'s state directory.
fn only_run_id(env: &Env) -> String {
    let runs = env.project().join(".reprise").join("runs");
    let ids: Vec<String> = fs::read_dir(&runs)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("R-"))
        .collect();
    assert_eq!(ids.len(), 1, "{ids:?}");
    ids[0].clone()
}

/// The fleet's state of task `task`, as `fleet status --json` shows it.
fn fleet_task_state(env: &Env, database: &str, task: &str) -> Option<String> {
    let status = json_of(&env.run(&["fleet", "status", "--db", database, "--json"]));
    status["tasks"]
        .as_array()?
        .iter()
        .find(|row| row["task_id"] == task)
        .and_then(|row| row["state"].as_str().map(str::to_owned))
}

/// The coordinator killed with SIGKILL while both its tasks run on a
/// worker: one finishes while no coordinator is there, the other after
/// `run --continue` has taken the run up. The continued run follows both
/// where the worker holds them (it runs nothing itself), takes every row
/// the worker shipped once, and ends passed with chains that verify.
#[test]
fn a_killed_coordinator_s_fleet_run_is_continued_where_its_worker_holds_the_tasks() {
    let env = Env::new();
    let dir = env.temp.path().to_path_buf();
    let agent = |task: &str| {
        format!(
            r#"["sh", "-c", "touch {dir}/started-{task}; while [ ! -e {dir}/go-{task} ]; do sleep 0.1; done; echo {task} > {task}.txt; echo DONE"]"#,
            dir = dir.display()
        )
    };
    let remote = project_with_remote(
        &env,
        &format!(
            r#"version: 1
name: continued
defaults: {{ agent: command, timeout: 2m, containment: "off" }}
seats: 2
tasks:
  - id: early
    prompt: "p"
    command: {early}
    gates:
      - {{ name: out, run: "test -e early.txt", timeout: 10s }}
  - id: late
    prompt: "p"
    command: {late}
    gates:
      - {{ name: out, run: "test -e late.txt", timeout: 10s }}
"#,
            early = agent("early"),
            late = agent("late"),
        ),
    );
    let database = TestDatabase::create().unwrap();
    assert_success(&env.run(&["fleet", "init", "--db", &database.url]));
    let worker = spawn_worker(&env, &database.url, "one");
    let mut coordinator = fleet_run(&env, &database.url, &remote).spawn().unwrap();
    let started = |task: &str| dir.join(format!("started-{task}")).exists();
    assert!(
        wait_until(std::time::Duration::from_secs(60), || started("early")
            && started("late")),
        "the worker never started both agents"
    );
    coordinator.kill().unwrap();
    coordinator.wait().unwrap();
    let run_id = only_run_id(&env);

    // One task ends on the worker while no coordinator listens.
    fs::write(dir.join("go-early"), "").unwrap();
    assert!(
        wait_until(std::time::Duration::from_secs(60), || {
            fleet_task_state(&env, &database.url, "early").as_deref() == Some("done")
        }),
        "the worker never finished the first task"
    );
    let continued = env
        .command(&["run", "--continue", &run_id, "--json"])
        .env("REPRISE_DATABASE_URL", &database.url)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The other ends once the continued run is (most likely) following it.
    std::thread::sleep(std::time::Duration::from_secs(2));
    fs::write(dir.join("go-late"), "").unwrap();
    let output = continued.wait_with_output().unwrap();
    let drained = drain(worker);
    assert_exit(&output, 0);
    let ran = json_of(&output);
    for task in ran["tasks"].as_array().unwrap() {
        assert_eq!(task["state"], "passed", "{ran}");
        // The worker's one attempt: nothing ran again on the coordinator.
        assert_eq!(task["attempts"].as_array().unwrap().len(), 1, "{ran}");
    }
    assert_eq!(drained["completed"], 2, "{drained}");
    for task in ["early", "late"] {
        assert_success(&env.run(&["journal", "verify", task]));
    }
    assert_success(&env.run(&["audit", "verify"]));
    assert_success(&env.run(&["apply"]));
    for task in ["early", "late"] {
        assert_eq!(
            fs::read_to_string(env.project().join(format!("{task}.txt"))).unwrap(),
            format!("{task}\n")
        );
    }
}

/// The journal file of task `task` under state directory `state`.
fn journal_of(state: &Path, task: &str) -> Vec<u8> {
    let path =
        journal_path(state, task).unwrap_or_else(|| panic!("no journal of {task} under {state:?}"));
    fs::read(path).unwrap()
}

/// A fleet run's `--json` output, after checking it exited 0 and its only
/// task passed, with that task's attempts' modes.
fn only_task_passed(output: &Output) -> (Value, Vec<String>) {
    assert_exit(output, 0);
    let ran = json_of(output);
    assert_eq!(ran["tasks"][0]["state"], "passed", "{ran}");
    let modes = ran["tasks"][0]["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|attempt| attempt["mode"].as_str().unwrap().to_owned())
        .collect();
    (ran, modes)
}

/// `journal_of`, or nothing while the journal is not there yet.
fn journal_of_if_any(state: &Path, task: &str) -> Vec<u8> {
    journal_path(state, task)
        .and_then(|path| fs::read(path).ok())
        .unwrap_or_default()
}

/// Where the journal of `task` is under the state directory `state`.
fn journal_path(state: &Path, task: &str) -> Option<PathBuf> {
    for entry in fs::read_dir(state).ok()?.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if path.file_name().is_some_and(|name| name == task)
                && path.join("journal.jsonl").is_file()
            {
                return Some(path.join("journal.jsonl"));
            }
            if let Some(found) = journal_path(&path, task) {
                return Some(found);
            }
        }
    }
    None
}

/// A shell script that waits for `go` (a file) before it writes
/// `out.txt`, noting its pid in `pid` and that it started in `started`.
fn waiting_script(started: &Path, pid: &Path, go: &Path) -> String {
    format!(
        "echo $$ > {pid}; touch {started}; while [ ! -e {go} ]; do sleep 0.1; done; echo done > out.txt; echo DONE",
        pid = pid.display(),
        started = started.display(),
        go = go.display()
    )
}

/// `waiting_script` as a plan's agent command.
fn waiting_agent(started: &Path, pid: &Path, go: &Path) -> String {
    format!(r#"["sh", "-c", "{}"]"#, waiting_script(started, pid, go))
}

/// A worker cut off from the database mid-attempt (a proxy of the test's
/// own drops its connections): it stops its agent once it cannot renew its
/// lease, another worker takes the task over, and when the first one's
/// connection comes back its late rows and completion are refused by the
/// lease's epoch; the run passes on the second worker with chains that
/// verify.
#[test]
fn a_partitioned_worker_s_late_completion_is_refused_and_its_agent_stopped() {
    let env = Env::new();
    let dir = env.temp.path().to_path_buf();
    let (started, pid, go) = (dir.join("started"), dir.join("pid"), dir.join("go"));
    // The first attempt waits for `go`, which only the test writes, after
    // the takeover: the second attempt finds `started` and ends at once.
    let remote = project_with_remote(
        &env,
        &format!(
            r#"version: 1
name: partition
defaults: {{ agent: command, timeout: 2m, containment: "off" }}
tasks:
  - id: cut
    prompt: "p"
    command: ["sh", "-c", "if [ -e {started} ]; then echo done > out.txt; echo DONE; else {first}; fi"]
    gates:
      - {{ name: out, run: "test -e out.txt", timeout: 10s }}
"#,
            started = started.display(),
            first = waiting_script(&started, &pid, &go),
        ),
    );
    let database = TestDatabase::create().unwrap();
    assert_success(&env.run(&["fleet", "init", "--db", &database.url]));
    let proxy =
        reprise_testkit::pg::TcpProxy::start(reprise_testkit::pg::address(&database.url).unwrap())
            .unwrap();
    let through_proxy = reprise_testkit::pg::rehost(&database.url, proxy.addr());
    let cut_off = spawn_worker(&env, &through_proxy, "cut-off");
    let run = fleet_run(&env, &database.url, &remote).spawn().unwrap();
    assert!(
        wait_until(std::time::Duration::from_secs(60), || pid.exists()),
        "the first worker never started the agent"
    );
    let agent_pid = fs::read_to_string(&pid).unwrap().trim().to_owned();
    proxy.cut();
    let other = spawn_worker(&env, &database.url, "other");
    let epoch = || -> i64 {
        let status = json_of(&env.run(&["fleet", "status", "--db", &database.url, "--json"]));
        status["tasks"][0]["lease_epoch"].as_i64().unwrap_or(0)
    };
    assert!(
        wait_until(std::time::Duration::from_secs(60), || epoch() >= 2),
        "no other worker took the task over"
    );
    // The cut-off worker stopped its agent when it could not renew.
    assert!(
        wait_until(std::time::Duration::from_secs(30), || process_gone(
            &agent_pid
        )),
        "the cut-off worker's agent still runs"
    );
    // Its connection comes back: what it still holds to write is late.
    proxy.restore();
    let output = run.wait_with_output().unwrap();
    let drained: Vec<Value> = [cut_off, other].into_iter().map(drain).collect();
    assert_exit(&output, 0);
    assert_eq!(json_of(&output)["tasks"][0]["state"], "passed");
    assert_eq!(drained[0]["completed"], 0, "{drained:?}");
    assert!(
        drained[0]["refused"].as_u64().unwrap() >= 1,
        "the late completion was not refused: {drained:?}"
    );
    assert_eq!(drained[1]["completed"], 1, "{drained:?}");
    assert_success(&env.run(&["journal", "verify", "cut"]));
    assert_success(&env.run(&["audit", "verify"]));
    // Nothing of the cut-off worker after the takeover reached the
    // coordinator: its journal is the one the other worker holds.
    assert_eq!(
        journal_of(&env.project().join(".reprise"), "cut"),
        journal_of(&dir.join("worker-other").join(".reprise"), "cut")
    );
}

/// PostgreSQL (a server of the test's own) stopped mid-run while the
/// worker's agent finishes, and started again: coordinator and worker wait
/// and retry, the run passes, and the coordinator's journal is the
/// worker's byte for byte (no row it shipped was lost).
#[test]
fn a_fleet_run_survives_its_database_restarted_mid_run_with_no_row_lost() {
    let env = Env::new();
    let dir = env.temp.path().to_path_buf();
    let (started, pid, go) = (dir.join("started"), dir.join("pid"), dir.join("go"));
    let remote = project_with_remote(
        &env,
        &format!(
            r#"version: 1
name: restart
defaults: {{ agent: command, timeout: 2m, containment: "off" }}
tasks:
  - id: steady
    prompt: "p"
    command: {agent}
    gates:
      - {{ name: out, run: "test -e out.txt", timeout: 10s }}
"#,
            agent = waiting_agent(&started, &pid, &go)
        ),
    );
    let server = reprise_testkit::pg::PgServer::start().unwrap();
    let database = TestDatabase::create_on(&server.url("postgres")).unwrap();
    assert_success(&env.run(&["fleet", "init", "--db", &database.url]));
    let worker = spawn_worker(&env, &database.url, "one");
    let run = fleet_run(&env, &database.url, &remote).spawn().unwrap();
    assert!(
        wait_until(std::time::Duration::from_secs(60), || started.exists()),
        "the worker never started the agent"
    );
    server.stop().unwrap();
    // The agent ends, and its rows are written, while the server is down.
    fs::write(&go, "").unwrap();
    std::thread::sleep(std::time::Duration::from_secs(3));
    server.start_again().unwrap();
    let output = run.wait_with_output().unwrap();
    let drained = drain(worker);
    assert_exit(&output, 0);
    let ran = json_of(&output);
    assert_eq!(ran["tasks"][0]["state"], "passed", "{ran}");
    assert_eq!(ran["tasks"][0]["attempts"].as_array().unwrap().len(), 1);
    assert_eq!(drained["completed"], 1, "{drained}");
    assert_success(&env.run(&["journal", "verify", "steady"]));
    assert_success(&env.run(&["audit", "verify"]));
    assert_eq!(
        journal_of(&env.project().join(".reprise"), "steady"),
        journal_of(&dir.join("worker-one").join(".reprise"), "steady")
    );
    drop(database);
}

/// Ctrl-C of a fleet run stops it on the workers as a local run stops: the
/// task a worker runs has its agent stopped and ends cancelled, the task
/// no worker took yet is withdrawn, the coordinator exits 130 naming `run
/// --continue`; continued, both run again on the fleet and pass.
#[test]
fn a_stopped_fleet_run_stops_its_workers_tasks_and_is_continued_on_the_fleet() {
    let env = Env::new();
    let dir = env.temp.path().to_path_buf();
    let task = |id: &str| {
        let (started, pid, go) = (
            dir.join(format!("started-{id}")),
            dir.join(format!("pid-{id}")),
            dir.join("go"),
        );
        format!(
            "  - id: {id}\n    prompt: p\n    command: {}\n    gates:\n      - {{ name: out, run: \"test -e out.txt\", timeout: 10s }}\n",
            waiting_agent(&started, &pid, &go)
        )
    };
    let remote = project_with_remote(
        &env,
        &format!(
            "version: 1\nname: stopped\ndefaults: {{ agent: command, timeout: 2m, containment: \"off\" }}\nseats: 2\ntasks:\n{}{}",
            task("first"),
            task("second")
        ),
    );
    let database = TestDatabase::create().unwrap();
    assert_success(&env.run(&["fleet", "init", "--db", &database.url]));
    // One seat on the fleet: one task runs, the other waits in the queue.
    let worker = spawn_worker_of(&env, &database.url, "one", 1);
    let run = fleet_run(&env, &database.url, &remote).spawn().unwrap();
    let pid_file = || {
        ["first", "second"]
            .iter()
            .map(|id| dir.join(format!("pid-{id}")))
            .find(|path| path.exists())
    };
    assert!(
        wait_until(std::time::Duration::from_secs(60), || pid_file().is_some()),
        "the worker never started an agent"
    );
    let agent_pid = fs::read_to_string(pid_file().unwrap())
        .unwrap()
        .trim()
        .to_owned();
    let stopped = signal_and_wait(run, "-INT");
    assert_exit(&stopped, 130);
    let ran = json_of(&stopped);
    for task in ran["tasks"].as_array().unwrap() {
        assert_eq!(task["state"], "cancelled", "{ran}");
    }
    assert!(
        process_gone(&agent_pid),
        "the worker's agent still runs after the stop"
    );
    let run_id = only_run_id(&env);
    fs::write(dir.join("go"), "").unwrap();
    let continued = env
        .command(&["run", "--continue", &run_id, "--json"])
        .env("REPRISE_DATABASE_URL", &database.url)
        .output()
        .unwrap();
    let drained = drain(worker);
    assert_exit(&continued, 0);
    let ran = json_of(&continued);
    for task in ran["tasks"].as_array().unwrap() {
        assert_eq!(task["state"], "passed", "{ran}");
    }
    // Every task ran on the worker: the stopped one, then both again.
    assert_eq!(drained["completed"], 3, "{drained}");
    for task in ["first", "second"] {
        assert_success(&env.run(&["journal", "verify", task]));
    }
    assert_success(&env.run(&["audit", "verify"]));
}

/// `run --continue` of a run that never ran on a fleet: `--fleet` is
/// refused in one line with nothing written, and `REPRISE_DATABASE_URL`
/// set for other commands changes nothing: the run goes on locally.
#[test]
fn a_local_run_is_continued_locally_whatever_the_environment_names() {
    let env = Env::new();
    let dir = env.temp.path().to_path_buf();
    let (started, pid, go) = (dir.join("started"), dir.join("pid"), dir.join("go"));
    project_with_remote(
        &env,
        &format!(
            "version: 1\nname: local\ndefaults: {{ agent: command, timeout: 2m, containment: \"off\" }}\ntasks:\n  - {{ id: only, prompt: p, command: {} }}\n",
            waiting_agent(&started, &pid, &go)
        ),
    );
    let run = env
        .command(&["run", "plan.yaml", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    assert!(
        wait_until(std::time::Duration::from_secs(60), || started.exists()),
        "the agent never started"
    );
    assert_exit(&signal_and_wait(run, "-INT"), 130);
    let run_id = only_run_id(&env);
    let before = env.snapshot();
    let refused = env.run(&[
        "run",
        "--continue",
        &run_id,
        "--fleet",
        "postgres://postgres@127.0.0.1:1/none",
    ]);
    assert_exit(&refused, 2);
    assert_eq!(stderr(&refused).lines().count(), 1, "{}", stderr(&refused));
    assert!(stderr(&refused).contains("did not run on a fleet"));
    assert_eq!(env.snapshot(), before, "a refused continue wrote something");
    fs::write(&go, "").unwrap();
    let continued = env
        .command(&["run", "--continue", &run_id, "--json"])
        .env(
            "REPRISE_DATABASE_URL",
            "postgres://postgres@127.0.0.1:1/none",
        )
        .output()
        .unwrap();
    assert_exit(&continued, 0);
    assert_eq!(json_of(&continued)["tasks"][0]["state"], "passed");
}

/// What a hostile agent runs to reach the fleet's database: it speaks
/// PostgreSQL's protocol (trust auth, as the test server allows) and
/// creates a table named after its task, printing what it got.
const DATABASE_ATTACK: &str = r#"
import socket, struct, sys
host, port, user, database, mark = sys.argv[1:6]
def message(kind, body):
    return kind + struct.pack("!I", len(body) + 4) + body
def until_ready(sock):
    errors = []
    while True:
        head = b""
        while len(head) < 5:
            more = sock.recv(5 - len(head))
            if not more:
                return errors + ["closed"]
            head += more
        kind, size = head[:1], struct.unpack("!I", head[1:])[0] - 4
        body = b""
        while len(body) < size:
            body += sock.recv(size - len(body))
        if kind == b"E":
            errors.append(body.decode(errors="replace"))
        if kind == b"Z":
            return errors
try:
    sock = socket.create_connection((host, int(port)), timeout=5)
except OSError as err:
    print(f"refused: {err}")
    sys.exit(0)
params = b"user\0" + user.encode() + b"\0database\0" + database.encode() + b"\0\0"
startup = struct.pack("!II", len(params) + 8, 196608) + params
sock.sendall(startup)
errors = until_ready(sock)
sock.sendall(message(b"Q", f"create table attacked_{mark} (x int)".encode() + b"\0"))
errors += until_ready(sock)
print("connected", errors)
"#;

/// The attack of issue 42: a contained agent on a worker connects to the
/// fleet's PostgreSQL and writes to it. Under the default policy
/// (`network: none` for a `command` agent) it reaches nothing and its
/// failing task stays failed; the same agent with `network: all` (the
/// control) does reach the database and write, so the wall is what stops
/// the first.
#[test]
fn a_contained_agent_on_a_worker_cannot_reach_the_fleet_s_database() {
    let env = Env::new();
    let database = TestDatabase::create().unwrap();
    let address = reprise_testkit::pg::address(&database.url).unwrap();
    let attack = |mark: &str| {
        serde_json::to_string(&[
            "python3",
            "-c",
            DATABASE_ATTACK,
            &address.ip().to_string(),
            &address.port().to_string(),
            "postgres",
            &database.name,
            mark,
        ])
        .unwrap()
    };
    let remote = project_with_remote(
        &env,
        &format!(
            r#"version: 1
name: reach
defaults: {{ agent: command, timeout: 1m, max_retries: 0 }}
tasks:
  - id: closed
    prompt: "set your own verdict"
    command: {closed}
    gates:
      - {{ name: never, run: "false", timeout: 10s }}
  - id: open
    prompt: "the same, with the network granted"
    network: all
    command: {open}
    gates:
      - {{ name: always, run: "true", timeout: 10s }}
"#,
            closed = attack("closed"),
            open = attack("open"),
        ),
    );
    assert_success(&env.run(&["fleet", "init", "--db", &database.url]));
    let worker = spawn_worker(&env, &database.url, "one");
    let output = fleet_run(&env, &database.url, &remote).output().unwrap();
    drain(worker);
    assert_exit(&output, 1);
    let states: Vec<(String, String)> = json_of(&output)["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|task| {
            (
                task["task_id"].as_str().unwrap().to_owned(),
                task["state"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert!(
        states.contains(&("closed".to_owned(), "failed".to_owned())),
        "{states:?}"
    );
    let tables = reprise_testkit::pg::query_column(
        &database.url,
        "select table_name::text from information_schema.tables where table_name like 'attacked_%'",
    )
    .unwrap();
    assert_eq!(tables, ["attacked_open"], "{}", stdout(&output));
}
