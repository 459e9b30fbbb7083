//! The fleet's figures on a real PostgreSQL (`REPRISE_TEST_PG_URL`, else
//! 127.0.0.1:5432), each in a database of its own, printed beside the
//! anchors of FLEET.md:
//!
//! - idle pickup: submit to a waiting worker's execution start, p50/p95;
//! - kill -9 of a worker (a child process: this binary started again with
//!   `BENCH_CHILD_URL`) to another worker's claim, at the default timings
//!   (beat 2 s, lease 8 s);
//! - stale completions accepted: leases taken over, then completed late by
//!   their first holder;
//! - 1,000 no-op tasks over 3 workers (the queue alone; the engine is not
//!   wired to it yet, so there is no local run to set beside it here).
//!
//! Usage: `scripts/bench-fleet [PICKUPS] [KILLS]` (default 200 and 3).

#![allow(clippy::print_stdout)]

use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::Result;
use reprise_fleet::{
    Affinity, Execution, Executor, Finish, FleetClient, FleetError, RunSpec, Timings, Worker,
    WorkerConfig,
};
use reprise_testkit::pg::TestDatabase;
use reprise_testkit::wait_until;
use serde_json::json;

const RUN: &str = "R-01JF1EET00000000000000000B";
const CHILD_URL: &str = "BENCH_CHILD_URL";
const PATIENCE: Duration = Duration::from_secs(120);

/// Notes when each execution starts, by task id, then completes it.
struct Stamping(Arc<Mutex<Vec<(String, Instant)>>>);

impl Executor for Stamping {
    fn execute(&self, execution: &Execution) -> Finish {
        let started = Instant::now();
        let task = execution.lease().key.task_id.clone();
        self.0.lock().unwrap().push((task, started));
        Finish::Complete(json!(null))
    }
}

/// Holds its lease until the process is killed.
struct Holding;

impl Executor for Holding {
    fn execute(&self, execution: &Execution) -> Finish {
        while execution.stop().is_none() {
            thread::sleep(Duration::from_millis(50));
        }
        Finish::Release
    }
}

fn main() -> Result<()> {
    if let Ok(url) = std::env::var(CHILD_URL) {
        return child_worker(&url);
    }
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|arg| !arg.starts_with('-'))
        .collect();
    let pickups: usize = args.first().and_then(|n| n.parse().ok()).unwrap_or(200);
    let kills: usize = args.get(1).and_then(|n| n.parse().ok()).unwrap_or(3);
    println!(
        "bench-fleet: {} cores, load {}",
        thread::available_parallelism().map_or(0, usize::from),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split(' ')
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    idle_pickup(pickups)?;
    kill_to_claim(kills)?;
    stale_completions(50)?;
    no_op_tasks(1_000, 3)?;
    Ok(())
}

fn fleet(timings: Timings) -> Result<(TestDatabase, FleetClient)> {
    let database = TestDatabase::create()?;
    let client = FleetClient::connect(&database.url, timings)?;
    client.init()?;
    client.open_run(&RunSpec {
        run_id: RUN.to_owned(),
        plan_id: "bench".to_owned(),
        coordinator_host: "bench".to_owned(),
        remote: "origin".to_owned(),
    })?;
    Ok((database, client))
}

fn start_worker(
    client: &FleetClient,
    host: &str,
    capacity: u32,
    executor: Arc<dyn Executor>,
) -> (Arc<Worker>, thread::JoinHandle<()>) {
    let worker = Arc::new(Worker::new(
        client.clone(),
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
    (worker, thread)
}

fn stop_worker((worker, thread): (Arc<Worker>, thread::JoinHandle<()>)) {
    worker.drain_flag().store(true, Ordering::SeqCst);
    let _ = thread.join();
}

fn percentile(sorted: &[Duration], fraction: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * fraction).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1_000.0
}

/// Submits one task at a time to an idle worker (it waits on LISTEN) and
/// times submit to execution start.
fn idle_pickup(count: usize) -> Result<()> {
    let (_database, client) = fleet(Timings {
        poll: Duration::from_secs(5),
        ..Timings::default()
    })?;
    let starts: Arc<Mutex<Vec<(String, Instant)>>> = Arc::default();
    let worker = start_worker(&client, "idle", 1, Arc::new(Stamping(starts.clone())));
    let mut latencies = Vec::with_capacity(count);
    for index in 0..count {
        let task = format!("p{index}");
        // Let the worker go back to waiting before the next submit.
        thread::sleep(Duration::from_millis(20));
        let submitted = Instant::now();
        client.submit(RUN, &task, &json!({}), &Affinity::Any)?;
        let picked = wait_for_start(&starts, &task)?;
        latencies.push(picked - submitted);
    }
    stop_worker(worker);
    latencies.sort();
    println!(
        "idle pickup (submit -> a waiting worker's execution), {count} tasks: p50 {:.1} ms, p95 {:.1} ms, max {:.1} ms   [goal <= 20 ms p95; Hatchet ~25 ms, awa 22 ms]",
        ms(percentile(&latencies, 0.5)),
        ms(percentile(&latencies, 0.95)),
        ms(percentile(&latencies, 1.0)),
    );
    Ok(())
}

fn wait_for_start(starts: &Mutex<Vec<(String, Instant)>>, task: &str) -> Result<Instant> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some((_, at)) = starts.lock().unwrap().iter().find(|(id, _)| id == task) {
            return Ok(*at);
        }
        anyhow::ensure!(Instant::now() < deadline, "task {task} was never picked up");
        thread::sleep(Duration::from_micros(200));
    }
}

fn child_worker(url: &str) -> Result<()> {
    let client = FleetClient::connect(url, Timings::default())?;
    let worker = Worker::new(
        client,
        WorkerConfig {
            host_id: "doomed".to_owned(),
            capacity: 1,
            drain_on_signal: true,
        },
    );
    worker.run(Arc::new(Holding))?;
    Ok(())
}

fn spawn_child(url: &str) -> Result<Child> {
    Ok(Command::new(std::env::current_exe()?)
        .env(CHILD_URL, url)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()?)
}

/// kill -9 of a worker holding a task to another worker's execution of it,
/// at the default timings.
fn kill_to_claim(rounds: usize) -> Result<()> {
    let mut takeovers = Vec::with_capacity(rounds);
    for round in 0..rounds {
        let (database, client) = fleet(Timings::default())?;
        let task = format!("k{round}");
        client.submit(RUN, &task, &json!({}), &Affinity::Any)?;
        let mut child = spawn_child(&database.url)?;
        let held = wait_until(PATIENCE, || {
            client.status().is_ok_and(|status| {
                status
                    .tasks
                    .iter()
                    .any(|entry| entry.holder.as_deref() == Some("doomed"))
            })
        });
        anyhow::ensure!(held, "the child worker never claimed {task}");
        let starts: Arc<Mutex<Vec<(String, Instant)>>> = Arc::default();
        let survivor = start_worker(&client, "survivor", 1, Arc::new(Stamping(starts.clone())));
        let killed = Instant::now();
        child.kill()?;
        child.wait()?;
        let taken = wait_for_start(&starts, &task)?;
        takeovers.push(taken - killed);
        stop_worker(survivor);
    }
    takeovers.sort();
    println!(
        "kill -9 of a worker -> another worker's claim, {rounds} rounds (beat 2 s, lease 8 s): median {:.2} s, max {:.2} s   [goal <= 15 s; Hatchet 30 s, awa ~85 s, graphile_worker defaults ~6.5 min]",
        percentile(&takeovers, 0.5).as_secs_f64(),
        percentile(&takeovers, 1.0).as_secs_f64(),
    );
    Ok(())
}

/// Leases taken over after they expired, then completed late by their
/// first holder: how many of those completions were accepted.
fn stale_completions(count: usize) -> Result<()> {
    let (_database, client) = fleet(Timings {
        lease_timeout: Duration::from_millis(50),
        ..Timings::default()
    })?;
    let mut accepted = 0;
    for index in 0..count {
        let task = format!("s{index}");
        client.submit(RUN, &task, &json!({}), &Affinity::Any)?;
        let first = client.claim("first", 1)?.remove(0).key;
        let second = loop {
            if let Some(lease) = client.claim("second", 1)?.pop() {
                break lease.key;
            }
            thread::sleep(Duration::from_millis(10));
        };
        match client.complete(&first, &json!("late")) {
            Ok(()) => accepted += 1,
            Err(FleetError::Fenced { .. }) => {}
            Err(error) => return Err(error.into()),
        }
        client.complete(&second, &json!("on time"))?;
    }
    println!(
        "stale completions accepted, {count} leases taken over then completed late: {accepted}   [goal 0; awa's per-attempt lease guard]"
    );
    Ok(())
}

/// `count` no-op tasks through `workers` workers of 4 seats each.
fn no_op_tasks(count: usize, workers: usize) -> Result<()> {
    let (_database, client) = fleet(Timings::default())?;
    let starts: Arc<Mutex<Vec<(String, Instant)>>> = Arc::default();
    let begun = Instant::now();
    for index in 0..count {
        client.submit(RUN, &format!("n{index}"), &json!({}), &Affinity::Any)?;
    }
    let submitted = begun.elapsed();
    let running: Vec<_> = (0..workers)
        .map(|index| {
            start_worker(
                &client,
                &format!("w{index}"),
                4,
                Arc::new(Stamping(starts.clone())),
            )
        })
        .collect();
    let done = wait_until(PATIENCE, || {
        client.status().is_ok_and(|status| {
            status
                .tasks
                .iter()
                .filter(|task| task.state == "done")
                .count()
                == count
        })
    });
    let elapsed = begun.elapsed();
    anyhow::ensure!(done, "not every no-op task completed");
    for worker in running {
        stop_worker(worker);
    }
    println!(
        "{count} no-op tasks over {workers} workers (4 seats each), queue alone: {:.2} s ({:.2} s of it submitting)   [the whole binary, beside a local run of the same plan: scripts/bench-fleet-run]",
        elapsed.as_secs_f64(),
        submitted.as_secs_f64(),
    );
    Ok(())
}
