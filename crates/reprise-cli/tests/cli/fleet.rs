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
