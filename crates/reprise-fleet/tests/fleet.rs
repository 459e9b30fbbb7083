//! The fleet on a real PostgreSQL, each test in a database of its own:
//! claims and the epoch fence, stale writes refused, two workers never
//! holding one task, a worker killed with SIGKILL, a partitioned worker, a
//! server restarted under shipping workers, and a drain on SIGTERM.
//!
//! The kill -9 and SIGTERM tests run a worker in a child process: this
//! test binary started again on its `worker_child` entry point, which reads
//! what to do from `CHILD_URL` and `CHILD_HOST`.

use std::collections::BTreeSet;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use anyhow::Result;
use reprise_fleet::{
    Affinity, Collected, Execution, Executor, Finish, FleetClient, FleetError, LeaseKey,
    OutcomeKind, RunSpec, ShippedRow, Stop, Timings, Worker, WorkerConfig,
};
use reprise_testkit::pg::{PgServer, TcpProxy, TestDatabase, address, rehost};
use reprise_testkit::{wait_for, wait_until};
use serde_json::{Value, json};

const RUN: &str = "R-01JF1EET00000000000000000A";
const CHILD_URL: &str = "REPRISE_FLEET_CHILD_URL";
const CHILD_HOST: &str = "REPRISE_FLEET_CHILD_HOST";
/// How long a test waits for something that should come within seconds.
const PATIENCE: Duration = Duration::from_secs(60);

/// Quick beats and a short lease, so expiry tests are quick; a lease still
/// lives several beats, so a loaded machine does not lose one by accident.
fn quick() -> Timings {
    Timings {
        heartbeat: Duration::from_millis(200),
        lease_timeout: Duration::from_secs(3),
        retry_for: Duration::from_secs(60),
        poll: Duration::from_millis(200),
    }
}

/// A database with the schema and one open run.
fn fleet(timings: Timings) -> Result<(TestDatabase, FleetClient)> {
    let database = TestDatabase::create()?;
    let client = FleetClient::connect(&database.url, timings)?;
    client.init()?;
    client.open_run(&run_spec())?;
    Ok((database, client))
}

fn run_spec() -> RunSpec {
    RunSpec {
        run_id: RUN.to_owned(),
        plan_id: "plan".to_owned(),
        coordinator_host: "coordinator".to_owned(),
        remote: "/tmp/remote.git".to_owned(),
    }
}

fn row(seq: i64) -> ShippedRow {
    ShippedRow {
        seq,
        bytes: format!("row {seq}\n").into_bytes(),
    }
}

/// Everything the run has collected so far.
fn collected(client: &FleetClient) -> Result<Vec<Collected>> {
    let mut all = Vec::new();
    let mut after = 0;
    loop {
        let items = client.collect(RUN, after, 500)?;
        let Some(last) = items.last() else {
            return Ok(all);
        };
        after = last.position();
        all.extend(items);
    }
}

/// The run's outcomes as (task, epoch, kind, holder).
fn outcomes(client: &FleetClient) -> Result<Vec<(String, i64, OutcomeKind, String)>> {
    Ok(collected(client)?
        .into_iter()
        .filter_map(|item| match item {
            Collected::Outcome {
                task_id,
                epoch,
                kind,
                holder,
                ..
            } => Some((task_id, epoch, kind, holder)),
            Collected::Row { .. } => None,
        })
        .collect())
}

fn task_state(client: &FleetClient, task: &str) -> Option<(String, Option<String>, i64)> {
    let status = client.status().ok()?;
    status
        .tasks
        .into_iter()
        .find(|entry| entry.task_id == task)
        .map(|entry| (entry.state, entry.holder, entry.lease_epoch))
}

fn held_by(client: &FleetClient, task: &str, host: &str) -> bool {
    task_state(client, task)
        .is_some_and(|(state, holder, _)| state == "running" && holder.as_deref() == Some(host))
}

/// An executor made of a function.
struct FnExecutor<F>(F);

impl<F: Fn(&Execution) -> Finish + Send + Sync + 'static> Executor for FnExecutor<F> {
    fn execute(&self, execution: &Execution) -> Finish {
        (self.0)(execution)
    }
}

fn executor(run: impl Fn(&Execution) -> Finish + Send + Sync + 'static) -> Arc<dyn Executor> {
    Arc::new(FnExecutor(run))
}

/// Runs until told to stop: a lost lease ends with a (late) completion,
/// which the fence must refuse; a drain releases the task; a stopped run
/// completes it as stopped.
fn until_stopped(execution: &Execution) -> Finish {
    let stop = wait_for(Duration::from_secs(600), || execution.stop());
    match stop {
        Some(Stop::Draining) => Finish::Release,
        Some(Stop::RunStopped) => Finish::Complete(json!({"stopped": true})),
        Some(Stop::LeaseLost) | None => Finish::Complete(json!({"late": true})),
    }
}

/// A worker on its own thread, drained and joined on drop.
struct RunningWorker {
    worker: Arc<Worker>,
    thread: Option<thread::JoinHandle<()>>,
}

impl RunningWorker {
    fn start(client: FleetClient, host: &str, capacity: u32, executor: Arc<dyn Executor>) -> Self {
        let worker = Arc::new(Worker::new(
            client,
            WorkerConfig {
                host_id: host.to_owned(),
                capacity,
                drain_on_signal: false,
            },
        ));
        let running = worker.clone();
        let thread = thread::spawn(move || {
            running.run(executor).expect("the worker runs");
        });
        Self {
            worker,
            thread: Some(thread),
        }
    }
}

impl Drop for RunningWorker {
    fn drop(&mut self) {
        self.worker.drain_flag().store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[test]
fn init_twice_is_a_no_op_at_the_latest_version() -> Result<()> {
    let database = TestDatabase::create()?;
    let client = FleetClient::connect(&database.url, quick())?;
    assert!(matches!(client.status(), Err(FleetError::NotInitialised)));
    let first = client.init()?;
    assert_eq!((first.from, first.to), (0, reprise_fleet::LATEST_VERSION));
    let second = client.init()?;
    assert_eq!((second.from, second.to), (first.to, first.to));
    assert!(client.status()?.tasks.is_empty());
    Ok(())
}

#[test]
fn a_claim_bumps_the_epoch_and_a_stale_holder_s_writes_are_refused() -> Result<()> {
    let timings = Timings {
        lease_timeout: Duration::from_millis(300),
        ..quick()
    };
    let (_database, client) = fleet(timings)?;
    client.submit(RUN, "t1", &json!({"n": 1}), &Affinity::Any)?;
    let first = client.claim("a", 4)?;
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].key.epoch, 1);
    assert_eq!(first[0].payload, json!({"n": 1}));
    assert!(
        client.claim("b", 4)?.is_empty(),
        "a held task is not claimable"
    );
    client.ship(&first[0].key, &[row(0)])?;

    // a stops beating: its lease expires and b takes the task at epoch 2.
    let second = wait_for(PATIENCE, || {
        client.claim("b", 4).ok().filter(|l| !l.is_empty())
    })
    .expect("b claims the expired task");
    assert_eq!(second[0].key.epoch, 2);

    let stale = &first[0].key;
    assert!(matches!(
        client.ship(stale, &[row(1)]),
        Err(FleetError::Fenced { .. })
    ));
    assert!(matches!(
        client.complete(stale, &json!("late")),
        Err(FleetError::Fenced { .. })
    ));
    assert!(matches!(
        client.park(stale, &json!("late")),
        Err(FleetError::Fenced { .. })
    ));
    assert!(matches!(
        client.release(stale),
        Err(FleetError::Fenced { .. })
    ));
    assert_eq!(
        client.heartbeat("a", std::slice::from_ref(stale))?,
        vec![stale.clone()]
    );

    client.complete(&second[0].key, &json!("by b"))?;
    let outcomes = outcomes(&client)?;
    assert_eq!(
        outcomes,
        vec![
            ("t1".to_owned(), 1, OutcomeKind::Lost, "a".to_owned()),
            ("t1".to_owned(), 2, OutcomeKind::Completed, "b".to_owned()),
        ],
        "the lost attempt is reported and no stale completion is accepted"
    );
    let rows: Vec<i64> = collected(&client)?
        .into_iter()
        .filter_map(|item| match item {
            Collected::Row { row, .. } => Some(row.seq),
            Collected::Outcome { .. } => None,
        })
        .collect();
    assert_eq!(rows, vec![0], "the stale ship left nothing");
    Ok(())
}

#[test]
fn heartbeats_keep_a_lease_and_report_the_ones_lost() -> Result<()> {
    let timings = Timings {
        lease_timeout: Duration::from_secs(1),
        ..quick()
    };
    let (_database, client) = fleet(timings)?;
    client.register_worker("a", 2)?;
    client.submit(RUN, "kept", &json!({}), &Affinity::Any)?;
    let kept = client.claim("a", 1)?.remove(0).key;
    client.submit(RUN, "dropped", &json!({}), &Affinity::Any)?;
    let dropped = client.claim("a", 1)?.remove(0).key;
    // "kept" is renewed, "dropped" is not: it expires and b takes it.
    let taken = wait_for(PATIENCE, || {
        assert!(
            client
                .heartbeat("a", std::slice::from_ref(&kept))
                .ok()?
                .is_empty()
        );
        client
            .claim("b", 4)
            .ok()
            .filter(|leases| !leases.is_empty())
    })
    .expect("the unrenewed lease expires");
    assert_eq!(taken[0].key.task_id, "dropped");
    let lost = client.heartbeat("a", &[kept.clone(), dropped.clone()])?;
    assert_eq!(lost, vec![dropped]);
    client.complete(&kept, &json!("done"))?;
    Ok(())
}

#[test]
fn a_completion_sent_twice_is_recorded_once() -> Result<()> {
    let (_database, client) = fleet(quick())?;
    client.submit(RUN, "t1", &json!({}), &Affinity::Any)?;
    let lease = client.claim("a", 1)?.remove(0).key;
    client.complete(&lease, &json!("r"))?;
    client.complete(&lease, &json!("r"))?;
    assert!(matches!(
        client.park(&lease, &json!("p")),
        Err(FleetError::Fenced { .. })
    ));
    assert_eq!(outcomes(&client)?.len(), 1);
    Ok(())
}

#[test]
fn two_workers_never_hold_one_task() -> Result<()> {
    let (_database, client) = fleet(quick())?;
    let tasks = 40;
    for index in 0..tasks {
        client.submit(RUN, &format!("t{index}"), &json!({}), &Affinity::Any)?;
    }
    let claims: Arc<Mutex<Vec<(String, LeaseKey)>>> = Arc::default();
    let threads: Vec<_> = (0..4)
        .map(|worker| {
            let (client, claims) = (client.clone(), claims.clone());
            thread::spawn(move || {
                let host = format!("w{worker}");
                while let Ok(leases) = client.claim(&host, 3) {
                    if leases.is_empty() {
                        break;
                    }
                    let mut claims = claims.lock().unwrap();
                    claims.extend(leases.into_iter().map(|lease| (host.clone(), lease.key)));
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let claims = claims.lock().unwrap();
    let distinct: BTreeSet<&str> = claims.iter().map(|(_, key)| key.task_id.as_str()).collect();
    assert_eq!(claims.len(), tasks, "each task claimed once: {claims:?}");
    assert_eq!(distinct.len(), tasks);
    assert!(claims.iter().all(|(_, key)| key.epoch == 1));
    Ok(())
}

#[test]
fn a_hard_affinity_holds_until_its_deadline_then_turns_soft() -> Result<()> {
    let (_database, client) = fleet(quick())?;
    let pinned = Affinity::Host {
        host: "a".to_owned(),
        hard_for: Duration::from_millis(300),
    };
    client.submit(RUN, "pinned", &json!({}), &pinned)?;
    client.submit(RUN, "free", &json!({}), &Affinity::Any)?;
    let first = client.claim("b", 4)?;
    assert_eq!(first.len(), 1, "b may not take a's task yet");
    assert_eq!(first[0].key.task_id, "free");
    let later = wait_for(PATIENCE, || {
        client.claim("b", 4).ok().filter(|l| !l.is_empty())
    })
    .expect("past the deadline any worker may take it");
    assert_eq!(later[0].key.task_id, "pinned");

    // Soft: its host still comes first when both are queued.
    client.submit(RUN, "other", &json!({}), &Affinity::Any)?;
    client.complete(&later[0].key, &json!(null))?;
    let soft = Affinity::Host {
        host: "a".to_owned(),
        hard_for: Duration::ZERO,
    };
    client.submit(RUN, "preferring-a", &json!({}), &soft)?;
    let claimed = client.claim("a", 1)?;
    assert_eq!(claimed[0].key.task_id, "preferring-a");
    Ok(())
}

#[test]
fn collect_gives_rows_and_outcomes_in_order_and_wakes_on_notify() -> Result<()> {
    let (_database, client) = fleet(quick())?;
    let mut waiter = client.collect_waiter();
    client.submit(RUN, "t1", &json!({}), &Affinity::Any)?;
    let lease = client.claim("a", 1)?.remove(0).key;
    let shipper = {
        let (client, lease) = (client.clone(), lease);
        thread::spawn(move || {
            client.ship(&lease, &[row(0), row(1)]).unwrap();
            client.ship(&lease, &[row(2)]).unwrap();
            client.complete(&lease, &json!({"ok": true})).unwrap();
        })
    };
    let mut seen = Vec::new();
    let mut after = 0;
    while !seen
        .iter()
        .any(|item| matches!(item, Collected::Outcome { .. }))
    {
        let items = client.collect_wait(&mut waiter, RUN, after, PATIENCE)?;
        assert!(!items.is_empty(), "something arrives before the deadline");
        after = items.last().map_or(after, Collected::position);
        seen.extend(items);
    }
    shipper.join().unwrap();
    let positions: Vec<i64> = seen.iter().map(Collected::position).collect();
    assert_eq!(positions, vec![1, 2, 3, 4]);
    assert!(matches!(&seen[2], Collected::Row { row, .. } if row.bytes == b"row 2\n"));
    client.prune(RUN, after)?;
    assert!(client.collect(RUN, 0, 10)?.is_empty());
    Ok(())
}

#[test]
fn a_submit_wakes_waiting_workers_and_a_ship_wakes_the_coordinator() -> Result<()> {
    // No polling fallback within the test's patience: only a notification
    // ends these waits with `true`.
    let (_database, client) = fleet(Timings {
        poll: Duration::from_secs(3_600),
        ..quick()
    })?;
    let mut work = client.work_waiter();
    let mut collect = client.collect_waiter();
    let submitter = {
        let client = client.clone();
        thread::spawn(move || client.submit(RUN, "t1", &json!({}), &Affinity::Any))
    };
    assert!(work.wait(PATIENCE), "the submit's NOTIFY woke the worker");
    submitter.join().unwrap()?;
    let lease = client.claim("a", 1)?.remove(0).key;
    let shipper = { thread::spawn(move || client.ship(&lease, &[row(0)])) };
    assert!(
        collect.wait(PATIENCE),
        "the ship's NOTIFY woke the coordinator"
    );
    shipper.join().unwrap()?;
    Ok(())
}

#[test]
fn a_submit_of_a_held_task_or_an_unknown_run_is_refused() -> Result<()> {
    let (_database, client) = fleet(quick())?;
    client.submit(RUN, "t1", &json!({}), &Affinity::Any)?;
    let _lease = client.claim("a", 1)?;
    assert!(matches!(
        client.submit(RUN, "t1", &json!({}), &Affinity::Any),
        Err(FleetError::Held { .. })
    ));
    assert!(matches!(
        client.submit(
            "R-01JF1EET00000000000000000Z",
            "t1",
            &json!({}),
            &Affinity::Any
        ),
        Err(FleetError::UnknownRun { .. })
    ));
    assert!(matches!(
        client.submit(RUN, "../x", &json!({}), &Affinity::Any),
        Err(FleetError::BadId(_))
    ));
    Ok(())
}

#[test]
fn a_worker_runs_claimed_tasks_to_completion() -> Result<()> {
    let (_database, client) = fleet(quick())?;
    for index in 0..6 {
        client.submit(
            RUN,
            &format!("t{index}"),
            &json!({"n": index}),
            &Affinity::Any,
        )?;
    }
    let worker = RunningWorker::start(
        client.clone(),
        "a",
        2,
        executor(|execution| {
            execution.ship(&[row(0)]).expect("ships under its lease");
            Finish::Complete(execution.lease().payload.clone())
        }),
    );
    assert!(wait_until(PATIENCE, || worker.worker.counters().completed == 6));
    let status = client.status()?;
    assert!(status.tasks.iter().all(|task| task.state == "done"));
    assert_eq!(status.workers.len(), 1);
    assert_eq!(status.workers[0].capacity, 2);
    Ok(())
}

/// The entry point of the worker child the process tests start: a worker
/// whose executor runs until told to stop, draining on SIGTERM. In a plain
/// test run (no `CHILD_URL`) it has nothing to do.
#[test]
fn worker_child() -> Result<()> {
    let Ok(url) = std::env::var(CHILD_URL) else {
        return Ok(());
    };
    let host = std::env::var(CHILD_HOST)?;
    let client = FleetClient::connect(&url, quick())?;
    let worker = Worker::new(
        client,
        WorkerConfig {
            host_id: host,
            capacity: 1,
            drain_on_signal: true,
        },
    );
    worker.run(executor(until_stopped))?;
    Ok(())
}

fn spawn_worker_child(url: &str, host: &str) -> Result<Child> {
    Ok(Command::new(std::env::current_exe()?)
        .args(["--exact", "worker_child", "--nocapture", "--test-threads=1"])
        .env(CHILD_URL, url)
        .env(CHILD_HOST, host)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()?)
}

#[test]
fn a_worker_killed_with_sigkill_loses_its_task_to_another_within_the_lease_timeout() -> Result<()> {
    let (database, client) = fleet(quick())?;
    client.submit(RUN, "t1", &json!({}), &Affinity::Any)?;
    let mut child = spawn_worker_child(&database.url, "doomed")?;
    assert!(wait_until(PATIENCE, || held_by(&client, "t1", "doomed")));
    child.kill()?;
    child.wait()?;

    let survivor = RunningWorker::start(
        client.clone(),
        "survivor",
        1,
        executor(|_| Finish::Complete(json!("survived"))),
    );
    assert!(wait_until(PATIENCE, || survivor
        .worker
        .counters()
        .completed
        == 1));
    assert_eq!(
        outcomes(&client)?,
        vec![
            ("t1".to_owned(), 1, OutcomeKind::Lost, "doomed".to_owned()),
            (
                "t1".to_owned(),
                2,
                OutcomeKind::Completed,
                "survivor".to_owned()
            ),
        ]
    );
    Ok(())
}

#[test]
fn sigterm_drains_a_worker_its_running_task_released() -> Result<()> {
    let (database, client) = fleet(quick())?;
    client.submit(RUN, "t1", &json!({}), &Affinity::Any)?;
    let mut child = spawn_worker_child(&database.url, "leaving")?;
    assert!(wait_until(PATIENCE, || held_by(&client, "t1", "leaving")));
    let signalled = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()?;
    assert!(signalled.success());
    assert!(child.wait()?.success(), "the drained worker exits cleanly");
    assert_eq!(
        outcomes(&client)?,
        vec![(
            "t1".to_owned(),
            1,
            OutcomeKind::Released,
            "leaving".to_owned()
        )]
    );
    assert_eq!(
        task_state(&client, "t1"),
        Some(("queued".to_owned(), None, 1))
    );
    let status = client.status()?;
    assert!(status.workers.iter().all(|worker| worker.draining));
    Ok(())
}

#[test]
fn a_partitioned_worker_stops_and_its_late_completion_is_refused() -> Result<()> {
    let (database, client) = fleet(quick())?;
    client.submit(RUN, "t1", &json!({}), &Affinity::Any)?;
    let proxy = TcpProxy::start(address(&database.url)?)?;
    let behind_proxy = FleetClient::connect(&rehost(&database.url, proxy.addr()), quick())?;
    let saw_lost = Arc::new(AtomicBool::new(false));
    let cut_off = {
        let saw_lost = saw_lost.clone();
        RunningWorker::start(
            behind_proxy,
            "cut-off",
            1,
            executor(move |execution| {
                let finish = until_stopped(execution);
                saw_lost.store(execution.stop() == Some(Stop::LeaseLost), Ordering::SeqCst);
                finish
            }),
        )
    };
    assert!(wait_until(PATIENCE, || held_by(&client, "t1", "cut-off")));
    proxy.cut();

    // The other worker takes the expired lease and completes only once the
    // cut-off worker's late completion has been tried, so that completion
    // meets a task another holder runs.
    let cut_off_worker = cut_off.worker.clone();
    let other = RunningWorker::start(
        client.clone(),
        "other",
        1,
        executor(move |_| {
            wait_until(PATIENCE, || cut_off_worker.held().is_empty());
            Finish::Complete(json!("by other"))
        }),
    );
    assert!(wait_until(PATIENCE, || held_by(&client, "t1", "other")));
    proxy.restore();
    assert!(wait_until(PATIENCE, || cut_off.worker.counters().refused == 1));
    assert!(wait_until(PATIENCE, || other.worker.counters().completed == 1));
    assert!(
        saw_lost.load(Ordering::SeqCst),
        "the cut-off worker stopped its execution"
    );
    let accepted: Vec<_> = outcomes(&client)?
        .into_iter()
        .filter(|(_, _, kind, _)| *kind == OutcomeKind::Completed)
        .collect();
    assert_eq!(
        accepted,
        vec![(
            "t1".to_owned(),
            2,
            OutcomeKind::Completed,
            "other".to_owned()
        )],
        "0 stale completions accepted"
    );
    assert_eq!(cut_off.worker.counters().completed, 0);
    Ok(())
}

/// Ships rows one by one, noting each acknowledged one, until `restarted`
/// is set and 20 more were acknowledged after it; a ship that fails parks
/// the task with the error.
fn shipping_executor(
    acknowledged: Arc<Mutex<Vec<i64>>>,
    restarted: Arc<AtomicBool>,
) -> Arc<dyn Executor> {
    executor(move |execution| {
        let mut after_restart = 0;
        for seq in 0.. {
            if let Err(error) = execution.ship(&[row(seq)]) {
                return Finish::Park(json!({"ship_failed": error.to_string()}));
            }
            acknowledged.lock().unwrap().push(seq);
            if restarted.load(Ordering::SeqCst) {
                after_restart += 1;
                if after_restart == 20 {
                    break;
                }
            }
        }
        Finish::Complete(json!("shipped"))
    })
}

#[test]
fn nothing_acknowledged_is_lost_when_postgresql_restarts_mid_run() -> Result<()> {
    let server = PgServer::start()?;
    let database = TestDatabase::create_on(&server.url("postgres"))?;
    let timings = Timings {
        lease_timeout: Duration::from_secs(15),
        heartbeat: Duration::from_millis(300),
        ..quick()
    };
    let client = FleetClient::connect(&database.url, timings)?;
    client.init()?;
    client.open_run(&run_spec())?;
    client.submit(RUN, "t1", &json!({}), &Affinity::Any)?;
    let acknowledged: Arc<Mutex<Vec<i64>>> = Arc::default();
    let restarted = Arc::new(AtomicBool::new(false));
    let worker = RunningWorker::start(
        client.clone(),
        "shipper",
        1,
        shipping_executor(acknowledged.clone(), restarted.clone()),
    );
    assert!(wait_until(PATIENCE, || acknowledged.lock().unwrap().len() >= 20));
    server.stop()?;
    server.start_again()?;
    restarted.store(true, Ordering::SeqCst);
    assert!(wait_until(PATIENCE, || {
        let counters = worker.worker.counters();
        counters.completed + counters.parked == 1
    }));

    let shipped: BTreeSet<i64> = collected(&client)?
        .into_iter()
        .filter_map(|item| match item {
            Collected::Row { row, .. } => Some(row.seq),
            Collected::Outcome { .. } => None,
        })
        .collect();
    assert_eq!(
        outcomes(&client)?,
        vec![(
            "t1".to_owned(),
            1,
            OutcomeKind::Completed,
            "shipper".to_owned()
        )],
        "the worker waited the restart out under its first lease"
    );
    let acknowledged: BTreeSet<i64> = acknowledged.lock().unwrap().iter().copied().collect();
    assert!(acknowledged.len() > 20);
    assert_eq!(
        shipped, acknowledged,
        "every acknowledged row is there, once"
    );
    drop(worker);
    drop(database);
    Ok(())
}

#[test]
fn a_bad_url_and_an_unreachable_server_are_one_line_errors() -> Result<()> {
    let bad = FleetClient::connect("mysql://x", quick()).map(|_| ());
    assert!(matches!(bad, Err(FleetError::BadUrl { .. })));
    let closed = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let timings = Timings {
        retry_for: Duration::from_millis(300),
        ..quick()
    };
    let client = FleetClient::connect(&format!("postgres://postgres@{closed}/x"), timings)?;
    let error = client.init().map(|_| ()).unwrap_err();
    assert!(matches!(error, FleetError::Unavailable { .. }), "{error}");
    assert!(!error.to_string().contains('\n'));
    Ok(())
}

/// A stopped run: the running lease is among those `stopping` reports (its
/// holder still owns it and may write its end), the queued task ends with
/// the withdrawn result as an outcome the coordinator collects, an expired
/// lease of the run is claimed by no one, and the run opened again goes on.
#[test]
fn a_stopped_run_tells_its_holders_withdraws_its_queued_tasks_and_goes_on_when_opened_again()
-> Result<()> {
    let timings = Timings {
        lease_timeout: Duration::from_millis(400),
        ..quick()
    };
    let (_database, client) = fleet(timings)?;
    client.submit(RUN, "held", &json!({}), &Affinity::Any)?;
    let lease = client.claim("a", 1)?.remove(0).key;
    client.submit(RUN, "waiting", &json!({}), &Affinity::Any)?;
    assert!(client.stopping(std::slice::from_ref(&lease))?.is_empty());

    let withdrawn = json!({"status": "cancelled"});
    client.stop_run(RUN, &withdrawn)?;
    assert_eq!(
        client.stopping(std::slice::from_ref(&lease))?,
        vec![lease.clone()]
    );
    let waiting = client.task_status(RUN, "waiting")?.expect("known");
    assert_eq!(waiting.state, "done");
    let ends: Vec<(String, OutcomeKind, Option<Value>)> = client
        .collect(RUN, 0, 100)?
        .into_iter()
        .filter_map(|item| match item {
            Collected::Outcome {
                task_id,
                kind,
                body,
                ..
            } => Some((task_id, kind, body)),
            Collected::Row { .. } => None,
        })
        .collect();
    assert_eq!(
        ends,
        vec![(
            "waiting".to_owned(),
            OutcomeKind::Completed,
            Some(withdrawn)
        )]
    );
    // The holder's lease stands: it writes the task's end.
    client.ship(
        &lease,
        &[ShippedRow {
            seq: 0,
            bytes: b"row".to_vec(),
        }],
    )?;

    client.submit(RUN, "late", &json!({}), &Affinity::Any)?;
    std::thread::sleep(Duration::from_millis(600));
    assert!(
        client.claim("b", 4)?.is_empty(),
        "a stopped run's tasks are claimed by no one"
    );
    client.open_run(&run_spec())?;
    assert!(client.stopping(std::slice::from_ref(&lease))?.is_empty());
    let claimed: Vec<String> = client
        .claim("b", 4)?
        .into_iter()
        .map(|lease| lease.key.task_id)
        .collect();
    assert!(claimed.contains(&"late".to_owned()), "{claimed:?}");
    Ok(())
}

/// A worker hears of its run's stop at its next heartbeat: the execution
/// is told `RunStopped` and its end is written under its lease, not
/// refused.
#[test]
fn a_worker_s_execution_is_told_its_run_stopped_and_its_end_is_written() -> Result<()> {
    let (_database, client) = fleet(quick())?;
    client.submit(RUN, "t1", &json!({}), &Affinity::Any)?;
    let worker = RunningWorker::start(client.clone(), "a", 1, executor(until_stopped));
    assert!(wait_until(PATIENCE, || worker.worker.counters().claimed == 1));
    client.stop_run(RUN, &json!({"status": "cancelled"}))?;
    assert!(wait_until(PATIENCE, || worker.worker.counters().completed == 1));
    assert_eq!(worker.worker.counters().refused, 0);
    let ended = client
        .collect(RUN, 0, 100)?
        .into_iter()
        .find_map(|item| match item {
            Collected::Outcome { body, .. } => body,
            Collected::Row { .. } => None,
        });
    assert_eq!(ended, Some(json!({"stopped": true})));
    Ok(())
}

/// A collector that reads while rows and outcomes commit around it sees
/// every position once, none skipped: the rows and outcomes of one read
/// come from one snapshot.
#[test]
fn a_collector_reading_under_concurrent_writes_never_skips_a_position() -> Result<()> {
    let (_database, client) = fleet(quick())?;
    for task in 0..3 {
        client.submit(RUN, &format!("s{task}"), &json!({}), &Affinity::Any)?;
    }
    let shippers = client.claim("a", 3)?;
    let writing = Arc::new(AtomicBool::new(true));
    let mut writers = Vec::new();
    for lease in shippers {
        let client = client.clone();
        writers.push(thread::spawn(move || -> Result<()> {
            for seq in 0..150 {
                client.ship(&lease.key, &[row(seq)])?;
            }
            Ok(())
        }));
    }
    let churn = {
        let client = client.clone();
        thread::spawn(move || -> Result<()> {
            for index in 0..200 {
                let task = format!("c{index}");
                client.submit(RUN, &task, &json!({}), &Affinity::Any)?;
                for lease in client.claim("b", 1)? {
                    client.complete(&lease.key, &json!({}))?;
                }
            }
            Ok(())
        })
    };
    let collector = {
        let writing = writing.clone();
        thread::spawn(move || -> Result<Vec<i64>> {
            let mut seen = Vec::new();
            let mut cursor = 0;
            loop {
                let done = !writing.load(Ordering::SeqCst);
                let items = client.collect(RUN, cursor, 1000)?;
                if items.is_empty() && done {
                    return Ok(seen);
                }
                for item in items {
                    cursor = item.position();
                    seen.push(cursor);
                }
            }
        })
    };
    for writer in writers {
        writer.join().expect("writer")?;
    }
    churn.join().expect("churn")?;
    writing.store(false, Ordering::SeqCst);
    let seen = collector.join().expect("collector")?;
    let last = *seen.last().expect("something collected");
    let missing: Vec<i64> = (1..=last)
        .filter(|position| !seen.contains(position))
        .collect();
    assert!(missing.is_empty(), "positions skipped: {missing:?}");
    assert_eq!(seen.len() as i64, last, "a position collected twice");
    assert!(last >= 450 + 200, "{last}");
    Ok(())
}

/// One task's history: its rows and outcomes only, up to a position, in
/// order (what a continued coordinator replays for a task it attaches to).
#[test]
fn a_task_s_history_is_its_own_items_up_to_a_position() -> Result<()> {
    let (_database, client) = fleet(quick())?;
    client.submit(RUN, "a", &json!({}), &Affinity::Any)?;
    client.submit(RUN, "b", &json!({}), &Affinity::Any)?;
    let leases = client.claim("w", 2)?;
    for seq in 0..3 {
        for lease in &leases {
            client.ship(&lease.key, &[row(seq)])?;
        }
    }
    let a = leases
        .iter()
        .find(|lease| lease.key.task_id == "a")
        .expect("a");
    client.complete(&a.key, &json!({"done": true}))?;
    let everything = client.collect(RUN, 0, 100)?;
    let of_a: Vec<i64> = everything
        .iter()
        .filter(|item| match item {
            Collected::Row { task_id, .. } | Collected::Outcome { task_id, .. } => task_id == "a",
        })
        .map(Collected::position)
        .collect();
    assert_eq!(of_a.len(), 4);
    let history: Vec<i64> = client
        .collect_task(RUN, "a", i64::MAX)?
        .iter()
        .map(Collected::position)
        .collect();
    assert_eq!(history, of_a);
    let through = of_a[1];
    let early: Vec<i64> = client
        .collect_task(RUN, "a", through)?
        .iter()
        .map(Collected::position)
        .collect();
    assert_eq!(early, of_a[..2].to_vec());
    Ok(())
}

/// A request the coordinator leaves for a task reaches only the lease that
/// holds it, once; a task no one holds takes none, and a second request
/// waits for the first to be taken.
#[test]
fn a_request_left_for_a_task_is_taken_once_by_its_holder_only() -> Result<()> {
    let (_database, client) = fleet(quick())?;
    client.submit(RUN, "queued", &json!({}), &Affinity::Any)?;
    let park = json!({"wake": {"on": "resume"}});
    assert!(
        !client.request_control(RUN, "queued", &park)?,
        "no one holds it"
    );
    let lease = client.claim("a", 1)?.remove(0).key;
    assert!(client.request_control(RUN, &lease.task_id, &park)?);
    assert!(
        !client.request_control(RUN, &lease.task_id, &json!({"second": true}))?,
        "one request waits at a time"
    );
    let stale = LeaseKey {
        epoch: lease.epoch - 1,
        ..lease.clone()
    };
    assert!(
        client
            .take_controls(std::slice::from_ref(&stale))?
            .is_empty()
    );
    assert_eq!(
        client.take_controls(std::slice::from_ref(&lease))?,
        vec![(lease.clone(), park)]
    );
    assert!(
        client
            .take_controls(std::slice::from_ref(&lease))?
            .is_empty()
    );
    Ok(())
}

/// The rows a coordinator has taken go once their task is no worker's: a
/// finished task's are deleted, a running one's (a takeover would read
/// them) and those past what was taken stay.
#[test]
fn taken_rows_of_finished_tasks_are_pruned_and_a_running_task_s_are_kept() -> Result<()> {
    let (_database, client) = fleet(quick())?;
    client.submit(RUN, "ended", &json!({}), &Affinity::Any)?;
    client.submit(RUN, "running", &json!({}), &Affinity::Any)?;
    let leases: Vec<LeaseKey> = client
        .claim("a", 2)?
        .into_iter()
        .map(|lease| lease.key)
        .collect();
    for lease in &leases {
        client.ship(lease, &[row(0), row(1)])?;
    }
    let ended = leases
        .iter()
        .find(|lease| lease.task_id == "ended")
        .expect("claimed");
    client.complete(ended, &json!({"status": "passed"}))?;
    let taken = collected(&client)?
        .last()
        .map(Collected::position)
        .expect("collected");
    let running = leases
        .iter()
        .find(|lease| lease.task_id == "running")
        .expect("claimed");
    client.ship(running, &[row(2)])?;

    assert_eq!(client.prune_collected(RUN, taken)?, 2);
    let rows: Vec<(String, i64)> = collected(&client)?
        .into_iter()
        .filter_map(|item| match item {
            Collected::Row { task_id, row, .. } => Some((task_id, row.seq)),
            Collected::Outcome { .. } => None,
        })
        .collect();
    assert_eq!(
        rows,
        [
            ("running".to_owned(), 0),
            ("running".to_owned(), 1),
            ("running".to_owned(), 2)
        ]
    );
    // The ended task's outcome stays for the coordinator to collect.
    assert_eq!(outcomes(&client)?.len(), 1);
    Ok(())
}
