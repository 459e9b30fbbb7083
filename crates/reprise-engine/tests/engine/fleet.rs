//! A run's tasks on fleet workers: rows a worker ships are appended byte
//! for byte and signed on the coordinator; a plan run through the remote
//! seats ends as a local run does; the workspace travels through a git
//! remote.

use std::sync::mpsc::channel;

use reprise_engine::{
    Fleet, InProcessHost, InProcessTransport, Outbox, Shipment, TaskOrder, WorkerHost, ingest,
    run_order, run_plan_on_fleet,
};
use reprise_store::state::StateDir;

use super::*;

/// A worker host of `world`: its own state directory (no audit key) and
/// its own project directory, under the world's temporary directory.
fn host(world: &World, name: &str) -> WorkerHost {
    let root = world
        .aside
        .parent()
        .expect("temp")
        .join(format!("host-{name}"));
    fs::create_dir_all(root.join("project")).expect("host project");
    let (state, _) = StateDir::create(&root.join(".reprise")).expect("host state");
    WorkerHost {
        host_id: name.to_owned(),
        state,
        project: root.join("project"),
        supervisor: None,
    }
}

/// The order for `task` of `plan_text` as a fresh run's coordinator
/// would send it, in place (no base, no remote).
fn order(world: &World, plan_text: &str, task: &str) -> TaskOrder {
    let text = world.expand(plan_text);
    let plan = parse_plan(&text, "plan.yaml").expect("plan");
    *world.plan.borrow_mut() = Some(plan.id().clone());
    TaskOrder {
        run_id: new_run_id(),
        plan_hash: TaskOrder::plan_hash(&text),
        plan_text: text,
        plan_file: "plan.yaml".to_owned(),
        task: World::id(task),
        base: None,
        remote: None,
        subdir: PathBuf::new(),
        journal: String::new(),
        envelope_micro_usd: None,
        carried_reply: None,
        retry_budget: None,
        setup: Default::default(),
        dependencies: Vec::new(),
        keep_worktree: false,
        taken_over_from: None,
        sessions: Vec::new(),
        resume: None,
    }
}

/// Runs `order` on `host` and returns what it shipped, with the result.
fn run_on(host: &WorkerHost, order: &TaskOrder) -> (Vec<Shipment>, reprise_engine::ShippedResult) {
    let (ship, shipped) = channel();
    let (events, _heard) = channel();
    let control = reprise_engine::WorkerControl::default();
    let result = run_order(
        host,
        order,
        Outbox::new(ship),
        (&events, &control),
        &CancelToken::new(),
    )
    .expect("the worker runs the order");
    (shipped.try_iter().collect(), result)
}

#[test]
fn a_worker_s_shipped_rows_make_the_coordinator_s_journal_byte_for_byte_and_it_verifies() {
    let world = World::new();
    let worker = host(&world, "one");
    let order = order(&world, WARM_PLAN, "greet");
    let (shipped, result) = run_on(&worker, &order);
    assert_eq!(result.status, TaskStatus::Passed);
    assert_eq!(
        result
            .attempts
            .iter()
            .map(|a| a.mode.as_str())
            .collect::<Vec<_>>(),
        ["new", "warm"]
    );
    // The worker wrote its journal and nothing it would need the key for.
    let key = world.key("greet");
    assert!(
        !worker.state.audit_path().exists(),
        "a worker has no audit chain"
    );
    assert!(
        !worker.state.spine_path(&key).exists(),
        "a worker writes no spine"
    );
    assert_eq!(
        shipped.last(),
        Some(&Shipment::Intent {
            intent: reprise_engine::AuditIntent::Seal
        })
    );

    let ingested = ingest(
        &world.fixture.state,
        &world.fixture.key,
        &key,
        &[],
        &shipped,
    )
    .expect("ingest");
    assert!(ingested.sealed);
    let worker_journal = fs::read(worker.state.journal_path(&key)).expect("worker journal");
    assert_eq!(
        ingested.rows,
        worker_journal
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .count() as u64
    );
    assert_eq!(
        fs::read(world.fixture.state.journal_path(&key)).expect("coordinator journal"),
        worker_journal,
        "the coordinator's journal is the worker's, byte for byte"
    );
    // The decision is in all three chains on the coordinator, bound as a
    // local run binds it, and everything verifies and is sealed.
    let records = world.assert_recorded("greet");
    assert_eq!(records.len(), 1);
    world.assert_verified("greet");
}

/// A coordinator continued after a crash reads again what was shipped
/// while it was down: rows it already holds (the same bytes at the same
/// `seq`) and a seal it already made are taken once; a row that differs
/// from the one held at its `seq` is refused.
#[test]
fn shipments_taken_again_change_nothing_and_a_different_row_at_a_held_seq_is_refused() {
    let world = World::new();
    let worker = host(&world, "one");
    let order = order(&world, WARM_PLAN, "greet");
    let (shipped, _) = run_on(&worker, &order);
    let (state, key_file) = (&world.fixture.state, &world.fixture.key);
    let key = world.key("greet");
    let first = ingest(state, key_file, &key, &[], &shipped).expect("ingest");
    let journal = fs::read(state.journal_path(&key)).expect("journal");
    let audit = fs::read(state.audit_path()).expect("audit");
    let seals = reprise_store::audit::read_audit(state, key_file)
        .expect("audit summary")
        .seals_of(&key);
    assert_eq!(seals.len(), 1);

    let again = ingest(state, key_file, &key, &seals, &shipped).expect("taken again");
    assert_eq!(again.rows, 0);
    assert_eq!(again.already_held, first.rows);
    assert!(!again.sealed);
    assert_eq!(
        fs::read(state.journal_path(&key)).expect("journal"),
        journal
    );
    assert_eq!(fs::read(state.audit_path()).expect("audit"), audit);
    world.assert_verified("greet");

    let Some(Shipment::Row { line }) = shipped.first() else {
        panic!("the first shipment is a row");
    };
    let altered = Shipment::Row {
        line: line.replacen("\"seq\":0", "\"seq\":0 ", 1),
    };
    assert_ne!(&altered, &shipped[0]);
    let refused = ingest(state, key_file, &key, &seals, &[altered]).expect_err("refused");
    assert!(refused.to_string().contains("differs"), "{refused}");
    assert_eq!(
        fs::read(state.journal_path(&key)).expect("journal"),
        journal
    );
}

#[test]
fn a_tampered_or_unlinked_shipped_row_is_refused_and_nothing_after_it_is_taken() {
    let world = World::new();
    let worker = host(&world, "one");
    let order = order(&world, WARM_PLAN, "greet");
    let (shipped, _) = run_on(&worker, &order);
    let key = world.key("greet");
    let line = |shipment: &Shipment| match shipment {
        Shipment::Row { line } => line.clone(),
        _ => panic!("a row"),
    };

    // A body changed in transit: its hash no longer matches.
    let mut tampered = shipped.clone();
    tampered[1] = Shipment::Row {
        line: line(&shipped[1]).replacen("\"run_id\":\"R-", "\"run_id\":\"X-", 1),
    };
    assert_ne!(tampered[1], shipped[1], "the row was changed");
    let err = ingest(
        &world.fixture.state,
        &world.fixture.key,
        &key,
        &[],
        &tampered,
    )
    .expect_err("a tampered row is refused");
    assert!(err.to_string().contains("event_hash_mismatch"), "{err}");
    let kept = fs::read_to_string(world.fixture.state.journal_path(&key)).expect("journal");
    assert_eq!(kept, line(&shipped[0]), "only the row before it was taken");

    // A row that skips one does not link to the coordinator's head.
    let err = ingest(
        &world.fixture.state,
        &world.fixture.key,
        &key,
        &[],
        &shipped[2..3],
    )
    .expect_err("an unlinked row is refused");
    assert!(err.to_string().contains("seq_gap"), "{err}");
    assert_eq!(
        fs::read_to_string(world.fixture.state.journal_path(&key)).expect("journal"),
        line(&shipped[0])
    );
}

/// Three tasks, one failing its gate once and retried warm. One seat: in
/// place, tasks running together would change each other's workspace (and
/// a warm retry would go cold), here as in a local run.
const FLEET_PLAN: &str = r#"
version: 1
name: fleet
defaults: { agent: sim, timeout: 30s }
seats: 1
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
  - id: after
    prompt: "Create after.txt"
    depends_on: [greet, count]
    sim:
      - { reply: "DONE", write: { after.txt: "after\n" } }
    gates:
      - { name: there, run: "test -e after.txt", timeout: 10s }
"#;

impl World {
    /// Runs `plan` on `fleet`'s workers, as `run` runs it here.
    fn run_on_fleet(&self, plan: &str, fleet: &Fleet<'_>) -> Ran {
        let text = self.expand(plan);
        let parsed = parse_plan(&text, "plan.yaml").unwrap_or_else(|err| panic!("{err}"));
        *self.plan.borrow_mut() = Some(parsed.id().clone());
        // On disk, outside the project: a park's wake reads it again.
        let plan_path = self.aside.parent().expect("temp").join("plan.yaml");
        fs::write(&plan_path, &text).expect("plan file");
        let mut recorder = Recorder::default();
        let state = run_plan_on_fleet(
            &self.fixture.state,
            &parsed,
            RunOptions {
                run_id: new_run_id(),
                plan_path,
                project: self.project.clone(),
                seats: None,
                retry_of: None,
                retry_budget: None,
                agent_setup: Default::default(),
                key: self.fixture.key.clone(),
                include_uncommitted: false,
                supervisor: None,
                continuing: None,
                keep_worktrees: false,
            },
            &CancelToken::new(),
            &mut recorder,
            fleet,
        )
        .expect("fleet run");
        assert_eq!(
            load_run(&self.fixture.state, &state.run_id).expect("state.json"),
            state
        );
        Ran {
            state,
            events: recorder.0,
        }
    }
}

/// A task's id, state, and its attempts' modes and outcomes.
type TaskSummary = (String, TaskStatus, Vec<(String, Outcome)>);

/// What a run's summary says of each task: its state, its attempts'
/// modes and outcomes.
fn summary(ran: &Ran) -> Vec<TaskSummary> {
    ran.state
        .tasks
        .iter()
        .map(|task| {
            (
                task.task_id.to_string(),
                task.state,
                task.attempts
                    .iter()
                    .map(|attempt| (attempt.mode.clone(), attempt.outcome))
                    .collect(),
            )
        })
        .collect()
}

#[test]
fn a_plan_on_two_in_process_workers_ends_as_a_local_run_with_chains_that_verify() {
    let local = World::new();
    let here = local.run(FLEET_PLAN);

    let world = World::new();
    let transport = InProcessTransport::start(
        vec![host(&world, "one"), host(&world, "two")],
        &CancelToken::new(),
    );
    let fleet = Fleet {
        transport: &transport,
        remote: None,
        plan_text: world.expand(FLEET_PLAN),
    };
    let there = world.run_on_fleet(FLEET_PLAN, &fleet);

    assert_eq!(there.state.ok, Some(true));
    assert_eq!(there.state.ok, here.state.ok);
    assert_eq!(summary(&there), summary(&here));
    let greet = task(&there, "greet");
    assert_eq!(
        session(&greet.attempts[1]),
        session(&greet.attempts[0]),
        "the warm retry resumed its session on the host that held it"
    );
    // Every task's evidence is on the coordinator, signed there, and whole:
    // each journal is the one its worker wrote, byte for byte.
    assert_eq!(world.assert_recorded("greet").len(), 1);
    for id in ["greet", "count", "after"] {
        let key = world.key(id);
        let here = fs::read(world.fixture.state.journal_path(&key)).expect("journal");
        let on_a_host = ["one", "two"].iter().any(|name| {
            let path = world
                .aside
                .parent()
                .expect("temp")
                .join(format!("host-{name}/.reprise"));
            StateDir::open(&path)
                .ok()
                .and_then(|state| fs::read(state.journal_path(&key)).ok())
                .is_some_and(|there| there == here)
        });
        assert!(on_a_host, "{id}'s journal is a worker's, byte for byte");
    }
    for id in ["greet", "count", "after"] {
        world.assert_verified(id);
    }
    // The events a local run reports were relayed.
    let finished = |ran: &Ran| {
        ran.events
            .iter()
            .filter(|event| matches!(event, Event::TaskFinished { .. }))
            .count()
    };
    assert_eq!(finished(&there), 3);
    assert_eq!(finished(&there), finished(&here));
}

/// A bare repository beside `world`'s project: the remote every host reaches.
fn bare_remote(world: &World) -> String {
    let remote = world.aside.parent().expect("temp").join("remote.git");
    let status = Command::new("git")
        .args(["init", "-q", "--bare"])
        .arg(&remote)
        .status()
        .expect("git");
    assert!(status.success());
    remote.display().to_string()
}

/// The order for `task` as a fleet run's coordinator sends it through a
/// remote: its base (the project's HEAD) published there first.
fn order_through_remote(world: &World, plan_text: &str, task: &str) -> TaskOrder {
    let remote = bare_remote(world);
    let mut order = order(world, plan_text, task);
    let head = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(&world.project)
        .output()
        .expect("git");
    let head = String::from_utf8_lossy(&head.stdout).trim().to_owned();
    let status = Command::new("git")
        .args(["push", "-q", &remote])
        .arg(format!("HEAD:refs/reprise/{}/bases/{task}", order.run_id))
        .current_dir(&world.project)
        .status()
        .expect("git");
    assert!(status.success());
    order.base = Some(head);
    order.remote = Some(remote);
    order
}

/// `path` as `rev` holds it in the project's repository.
fn shown(world: &World, rev: &str, path: &str) -> String {
    let output = Command::new("git")
        .args(["show", &format!("{rev}:{path}")])
        .current_dir(&world.project)
        .output()
        .expect("git");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

const WORKTREE_PLAN: &str = r#"
version: 1
name: travel
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
  - id: after
    prompt: "Create after.txt, beside greeting.txt and count.txt"
    depends_on: [greet, count]
    sim:
      - { reply: "DONE", write: { after.txt: "after\n" } }
    gates:
      - { name: both, run: "grep -qx hello greeting.txt && grep -qx 3 count.txt", timeout: 10s }
"#;

#[test]
fn the_workspace_travels_through_a_git_remote_and_results_apply_as_after_a_local_run() {
    let local = World::git();
    let here = local.run(WORKTREE_PLAN);

    let world = World::git();
    let remote = bare_remote(&world);
    let transport = InProcessTransport::start(
        vec![host(&world, "one"), host(&world, "two")],
        &CancelToken::new(),
    );
    let fleet = Fleet {
        transport: &transport,
        remote: Some(remote),
        plan_text: world.expand(WORKTREE_PLAN),
    };
    let there = world.run_on_fleet(WORKTREE_PLAN, &fleet);
    assert_eq!(there.state.ok, Some(true), "{:?}", summary(&there));
    assert_eq!(summary(&there), summary(&here));

    // Each result branch was fetched into the project's repository, named
    // as a local run names it; the dependent started from both results.
    let run_id = &there.state.run_id;
    let after = task(&there, "after").output.clone().expect("a result");
    assert_eq!(
        after.branch.as_deref(),
        Some(format!("reprise/{run_id}/after").as_str())
    );
    assert_eq!(
        shown(&world, &format!("reprise/{run_id}/greet"), "greeting.txt"),
        "hello\n"
    );
    assert_eq!(
        shown(&world, &format!("reprise/{run_id}/after"), "count.txt"),
        "3\n"
    );
    for id in ["greet", "count", "after"] {
        world.assert_verified(id);
    }

    // `diff` and `apply` work on them as after a local run.
    let report = reprise_engine::diff(
        &world.fixture.state,
        &there.state,
        Some(&World::id("after")),
    )
    .expect("diff");
    assert!(format!("{report:?}").contains("after.txt"), "{report:?}");
    let plan = reprise_engine::plan_apply(&there.state, None, None).expect("plan apply");
    reprise_engine::apply(&plan).expect("apply");
    assert_eq!(shown(&world, "HEAD", "after.txt"), "after\n");
    assert_eq!(shown(&world, "HEAD", "greeting.txt"), "hello\n");
}

/// The kind of a shipped row.
fn kind_of(shipment: &Shipment) -> Option<String> {
    match shipment {
        Shipment::Row { line } => serde_json::from_str::<JournalRow>(line)
            .ok()
            .map(|row| row.kind),
        _ => None,
    }
}

#[test]
fn a_task_whose_host_is_lost_goes_on_from_its_journal_on_another_and_resumes_its_shipped_session_warm()
 {
    // How many shipments the task makes before its first retry decision
    // (the first attempt's transcript among them).
    let probe = World::git();
    let (shipped, _) = run_on(
        &host(&probe, "probe"),
        &order_through_remote(&probe, WARM_PLAN, "greet"),
    );
    let before_decision = shipped
        .iter()
        .position(|shipment| kind_of(shipment).as_deref() == Some("retry.decision"))
        .expect("a decision");
    assert!(
        shipped[..before_decision]
            .iter()
            .any(|shipment| matches!(shipment, Shipment::Session(_))),
        "the first attempt's transcript ships before the decision"
    );

    // Host one is lost just before it would ship that decision; the tree
    // its attempt left and the session's transcript travel (the first
    // through the git remote, the second with its rows).
    let world = World::git();
    let remote = bare_remote(&world);
    let one = InProcessHost {
        host: host(&world, "one"),
        lost_after_rows: Some(before_decision),
    };
    let two_host = host(&world, "two");
    let two_store = two_host.state.sim_store();
    let two = InProcessHost::from(two_host);
    let transport = InProcessTransport::start(vec![one, two], &CancelToken::new());
    let fleet = Fleet {
        transport: &transport,
        remote: Some(remote),
        plan_text: world.expand(WARM_PLAN),
    };
    let ran = world.run_on_fleet(WARM_PLAN, &fleet);

    let greet = task(&ran, "greet");
    assert_eq!(greet.state, TaskStatus::Passed, "{greet:?}");
    // The session host one started travelled with the task: host two
    // resumed it warm, with only the instruction as the new turn.
    let records = world.assert_recorded("greet");
    assert_eq!(modes(greet), ["new", "warm"], "{records:?}");
    assert_eq!(session(&greet.attempts[1]), session(&greet.attempts[0]));
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0].retry_mode, RetryMode::Warm);
    assert_eq!(records[0].downgrade_reason, None);
    let turns = reprise_agents::sim_transcript(&two_store, session(&greet.attempts[0]))
        .expect("host two holds the session");
    assert_eq!(turns.len(), 2, "{turns:?}");
    assert!(
        turns[0]
            .prompt
            .contains("Create greeting.txt containing hello"),
        "{turns:?}"
    );
    // Host two went on from the rows host one shipped: one journal, whole
    // and sealed on the coordinator.
    world.assert_verified("greet");
}

const THREE_TRIES_PLAN: &str = r#"
version: 1
name: three
defaults: { agent: sim, timeout: 30s }
tasks:
  - id: greet
    prompt: "Create greeting.txt containing hello"
    retry_policy: warm
    max_retries: 2
    sim:
      - { reply: "I wrote greeting.txt.", write: { greeting.txt: "hi\n" } }
      - { reply: "I wrote it again.", write: { greeting.txt: "hey\n" } }
      - { reply: "DONE: it says hello.", write: { greeting.txt: "hello\n" } }
    gates:
      - { name: content, run: "grep -qx hello greeting.txt", disclose: output, timeout: 10s }
"#;

#[test]
fn a_host_lost_mid_attempt_leaves_its_session_behind_and_the_new_host_s_own_session_resumes_warm() {
    // Host one is lost right after its first attempt started.
    let probe = World::new();
    let (shipped, _) = run_on(
        &host(&probe, "probe"),
        &order(&probe, THREE_TRIES_PLAN, "greet"),
    );
    let started = shipped
        .iter()
        .position(|shipment| kind_of(shipment).as_deref() == Some("attempt.started"))
        .expect("an attempt");
    let world = World::new();
    let one = InProcessHost {
        host: host(&world, "one"),
        lost_after_rows: Some(started + 1),
    };
    let two = InProcessHost::from(host(&world, "two"));
    let transport = InProcessTransport::start(vec![one, two], &CancelToken::new());
    let fleet = Fleet {
        transport: &transport,
        remote: None,
        plan_text: world.expand(THREE_TRIES_PLAN),
    };
    let ran = world.run_on_fleet(THREE_TRIES_PLAN, &fleet);

    let greet = task(&ran, "greet");
    assert_eq!(greet.state, TaskStatus::Passed, "{greet:?}");
    // The session host one started stays there: the retry after the
    // attempt it left goes cold; the session host two then started is
    // resumed warm, on host two.
    assert_eq!(modes(greet), ["new", "cold", "warm"]);
    let records = world.assert_recorded("greet");
    let reasons: Vec<_> = records
        .iter()
        .map(|record| (record.retry_mode, record.downgrade_reason))
        .collect();
    assert_eq!(
        reasons,
        [
            (RetryMode::Cold, Some(DowngradeReason::SessionOnOtherHost)),
            (RetryMode::Warm, None)
        ]
    );
    assert_eq!(session(&greet.attempts[2]), session(&greet.attempts[1]));
    world.assert_verified("greet");
}

const COLD_PLAN: &str = r#"
version: 1
name: cold
defaults: { agent: sim, timeout: 30s }
tasks:
  - id: greet
    prompt: "Create greeting.txt containing hello"
    retry_policy: cold
    sim:
      - { reply: "I wrote greeting.txt.", write: { greeting.txt: "hi\n" } }
      - { reply: "DONE: it says hello.", write: { greeting.txt: "hello\n" } }
    gates:
      - { name: content, run: "grep -qx hello greeting.txt", disclose: output, timeout: 10s }
"#;

#[test]
fn a_rollback_on_a_worker_is_bound_in_the_coordinator_s_audit_chain_as_a_local_one_is() {
    let local = World::new();
    local.run(COLD_PLAN);
    let audit_kinds = |world: &World| -> Vec<String> {
        world
            .audit()
            .into_iter()
            .filter(|row| row.body.get("task_id").and_then(Value::as_str) == Some("greet"))
            .map(|row| row.kind)
            .collect()
    };
    let here = audit_kinds(&local);
    assert!(
        here.iter().any(|kind| kind == "checkpoint.restored"),
        "the local run rolled back: {here:?}"
    );

    let world = World::new();
    let worker = host(&world, "one");
    let (shipped, result) = run_on(&worker, &order(&world, COLD_PLAN, "greet"));
    assert_eq!(result.status, TaskStatus::Passed);
    let key = world.key("greet");
    ingest(
        &world.fixture.state,
        &world.fixture.key,
        &key,
        &[],
        &shipped,
    )
    .expect("ingest");
    assert_eq!(audit_kinds(&world), here);
    world.assert_verified("greet");
}

#[test]
fn a_worker_refuses_an_order_whose_plan_does_not_match_its_hash() {
    let world = World::new();
    let worker = host(&world, "one");
    let mut order = order(&world, WARM_PLAN, "greet");
    order.plan_text = order.plan_text.replace("hello", "goodbye");
    let (ship, shipped) = channel();
    let (events, _heard) = channel();
    let err = run_order(
        &worker,
        &order,
        Outbox::new(ship),
        (&events, &reprise_engine::WorkerControl::default()),
        &CancelToken::new(),
    )
    .expect_err("refused");
    assert!(err.to_string().contains("does not match its hash"), "{err}");
    assert_eq!(shipped.try_iter().count(), 0, "nothing ran");
    assert!(!worker.state.journal_path(&world.key("greet")).exists());
}

const QUOTA_PLAN: &str = r#"
version: 1
name: quota
defaults: { agent: sim, max_retries: 1, timeout: 60s, retry_policy: warm }
tasks:
  - id: busy
    prompt: "Create done.txt"
    sim:
      - { reply: "usage limit reached; resets in 2 seconds", exit_code: 1, write: { started.txt: "half\n" } }
      - { reply: "DONE", write: { done.txt: "yes\n" } }
    gates: [ { name: done, run: "test -e done.txt && test -e started.txt" } ]
"#;

#[test]
fn a_park_on_a_worker_is_received_and_released_on_the_coordinator_and_resumed_on_a_worker_warm() {
    let world = World::git();
    let remote = bare_remote(&world);
    let transport = InProcessTransport::start(
        vec![host(&world, "one"), host(&world, "two")],
        &CancelToken::new(),
    );
    let fleet = Fleet {
        transport: &transport,
        remote: Some(remote),
        plan_text: world.expand(QUOTA_PLAN),
    };
    let ran = world.run_on_fleet(QUOTA_PLAN, &fleet);

    // Parked on its worker until the reset, woken and checked by the
    // coordinator, and resumed on a worker: the same session, warm, on the
    // files the park kept.
    let busy = task(&ran, "busy");
    assert_eq!(
        busy.state,
        TaskStatus::Passed,
        "{busy:?}: {:?}",
        warnings(&ran, "busy")
    );
    assert_eq!(modes(busy), ["new", "warm"]);
    assert_eq!(session(&busy.attempts[1]), session(&busy.attempts[0]));
    let cwd = busy
        .cwd
        .as_ref()
        .expect("where it worked")
        .display()
        .to_string();
    assert!(
        cwd.contains("/host-"),
        "resumed on a worker, not here: {cwd}"
    );
    let key = world.key("busy");
    let audit = read_audit(&world.fixture.state, &world.fixture.key).expect("audit");
    let point = reprise_engine::latest_park(&world.fixture.state, &key, &audit).expect("a park");
    assert!(point.settled, "the park was resumed");
    assert!(point.receipt.is_some(), "the coordinator wrote its receipt");
    let mut released: Vec<String> = point
        .released
        .iter()
        .map(|release| release.resource.as_str().to_owned())
        .collect();
    released.sort();
    assert_eq!(released, ["budget", "process", "sandbox", "seat"]);
    // The snapshot the worker sent came back: the resumed attempt found the
    // file the parked one wrote (its gate asks for both).
    assert!(point.snapshot().is_some(), "{point:?}");
    // The coordinator wrote the resume's receipt and marker from the
    // worker's row: the park cannot be resumed again.
    let again = reprise_engine::check_resume(&world.fixture.state, &world.fixture.key, &key, None);
    assert!(again.is_err(), "{again:?}");
    world.assert_verified("busy");
}

/// A hostile worker's second resume of a park already resumed: a row it
/// could write (the journal's chain is unkeyed), linked to the
/// coordinator's head, naming the park and its receipt. The coordinator
/// refuses it before it takes the row, and writes no second receipt.
#[test]
fn a_shipped_resume_of_a_park_already_resumed_is_refused_before_its_row_is_taken() {
    let world = World::git();
    let remote = bare_remote(&world);
    let transport = InProcessTransport::start(vec![host(&world, "one")], &CancelToken::new());
    let fleet = Fleet {
        transport: &transport,
        remote: Some(remote),
        plan_text: world.expand(QUOTA_PLAN),
    };
    let ran = world.run_on_fleet(QUOTA_PLAN, &fleet);
    assert_eq!(task(&ran, "busy").state, TaskStatus::Passed);
    let key = world.key("busy");
    let state = &world.fixture.state;
    let audit = read_audit(state, &world.fixture.key).expect("audit");
    let point = reprise_engine::latest_park(state, &key, &audit).expect("a park");
    let resumed: reprise_core::rows::ResumeBody = world
        .journal("busy")
        .iter()
        .rev()
        .find(|row| row.kind == "task.resume")
        .map(|row| serde_json::from_value(row.body.clone()).expect("a resume body"))
        .expect("a resume row");

    // The forged row, made as the worker would make it: appended to a copy
    // of the journal as it stands.
    let scratch = world.aside.parent().expect("temp").join("forger");
    let (forger, _) = StateDir::create(&scratch.join(".reprise")).expect("scratch state");
    let journal_path = state.journal_path(&key);
    let copy = forger.journal_path(&key);
    fs::create_dir_all(copy.parent().expect("dir")).expect("dir");
    fs::copy(&journal_path, &copy).expect("copy");
    let mut journal = reprise_store::journal::Journal::open(&forger, &key).expect("journal");
    journal
        .append_row(
            "2026-12-04T00:00:00Z",
            &reprise_core::rows::ResumeBody {
                attempt: resumed.attempt + 1,
                ..resumed
            },
        )
        .expect("append");
    let forged = fs::read_to_string(&copy).expect("copy");
    let line = forged.lines().last().expect("a line").to_owned() + "\n";
    let before_journal = fs::read(&journal_path).expect("journal");
    let before_audit = fs::read(state.audit_path()).expect("audit");

    let refused = ingest(
        state,
        &world.fixture.key,
        &key,
        &[],
        &[Shipment::Row { line }],
    )
    .expect_err("a second resume of the park");
    assert!(refused.to_string().contains("settled"), "{refused}");
    assert_eq!(fs::read(&journal_path).expect("journal"), before_journal);
    assert_eq!(fs::read(state.audit_path()).expect("audit"), before_audit);
    assert!(point.settled);
}
