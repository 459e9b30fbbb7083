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
    assert_eq!(json_of(&first)["version"], 1);
    // The second init through REPRISE_DATABASE_URL: nothing to do.
    let second = env
        .command(&["fleet", "init"])
        .env("REPRISE_DATABASE_URL", &database.url)
        .output()
        .unwrap();
    assert_eq!(code(&second), Some(0), "stderr: {}", stderr(&second));
    assert!(
        stdout(&second).contains("is at version 1: nothing to do"),
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
    let dir = env.temp.path().join(format!("worker-{host}"));
    env.command(&[
        "worker",
        "--db",
        database,
        "--capacity",
        "2",
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
