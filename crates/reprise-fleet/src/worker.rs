//! The worker loop: claim up to capacity, run each lease on its own thread
//! through an `Executor`, heartbeat from a thread of its own, stop an
//! execution whose lease was lost, and drain on SIGTERM.
//!
//! A lease is lost when a heartbeat says so (taken or expired), or when no
//! heartbeat has gone through for a whole lease timeout (the worker cannot
//! tell, so it assumes the worst). Either way the execution is told to
//! stop; whatever it writes afterwards is fenced by the database, which is
//! the authority: a late write is refused and counted, never accepted.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::Instant;

use serde_json::Value;

use crate::client::{FleetClient, Waker};
use crate::error::{FleetError, Result};
use crate::types::{Lease, LeaseKey, ShippedRow};

/// Runs one claimed task. The engine implements it; tests use their own.
pub trait Executor: Send + Sync + 'static {
    /// Runs `execution`'s lease to an end. It should look at
    /// `Execution::stop` between steps and end early when told.
    fn execute(&self, execution: &Execution) -> Finish;
}

/// How an execution ended, which the worker writes (fenced).
#[derive(Debug, Clone, PartialEq)]
#[must_use]
pub enum Finish {
    Complete(Value),
    Park(Value),
    /// Give the task back unfinished (a drain).
    Release,
}

/// Why an execution should stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// The lease is no longer this worker's: stop the agent, write nothing.
    LeaseLost,
    /// The worker drains: finish soon or release.
    Draining,
    /// The run's coordinator stopped the run: stop the agent and end the
    /// task as stopped, writing its end as usual (the lease still holds).
    RunStopped,
}

const RUNNING: u8 = 0;
const LEASE_LOST: u8 = 1;
const RUN_STOPPED: u8 = 2;

/// One running lease, as its executor sees it.
#[derive(Debug)]
pub struct Execution {
    lease: Lease,
    client: FleetClient,
    state: AtomicU8,
    /// Set once the executor returned: a lease its end is being written
    /// for is not lost when a heartbeat no longer finds it running.
    ended: AtomicBool,
    draining: Arc<AtomicBool>,
    counters: Arc<Counters>,
    /// Requests the coordinator left for this lease, not yet taken.
    controls: Mutex<Vec<Value>>,
}

impl Execution {
    /// The requests the coordinator left for this lease since the last call
    /// (a park asked of the task), oldest first.
    pub fn take_controls(&self) -> Vec<Value> {
        std::mem::take(&mut *lock(&self.controls))
    }

    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// Whether, and why, the execution should stop now.
    pub fn stop(&self) -> Option<Stop> {
        let state = self.state.load(Ordering::SeqCst);
        if state == LEASE_LOST {
            Some(Stop::LeaseLost)
        } else if state == RUN_STOPPED {
            Some(Stop::RunStopped)
        } else if self.draining.load(Ordering::SeqCst) {
            Some(Stop::Draining)
        } else {
            None
        }
    }

    /// Ships `rows` under this lease, fenced: `Fenced` means the lease is
    /// lost, and the execution is marked to stop.
    pub fn ship(&self, rows: &[ShippedRow]) -> Result<()> {
        let shipped = self.client.ship(&self.lease.key, rows);
        if let Err(FleetError::Fenced { .. }) = &shipped {
            self.counters.refused.fetch_add(1, Ordering::SeqCst);
            self.lose();
        }
        shipped
    }

    /// Marks the execution's run stopped, unless its lease is lost.
    fn run_stopped(&self) {
        let _ =
            self.state
                .compare_exchange(RUNNING, RUN_STOPPED, Ordering::SeqCst, Ordering::SeqCst);
    }

    fn lose(&self) {
        if self.ended.load(Ordering::SeqCst) {
            return;
        }
        if self.state.swap(LEASE_LOST, Ordering::SeqCst) != LEASE_LOST {
            self.counters.lost.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// What a worker has done so far, counted as it goes.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    claimed: AtomicU64,
    completed: AtomicU64,
    parked: AtomicU64,
    released: AtomicU64,
    /// Leases this worker was told (or decided) it lost.
    lost: AtomicU64,
    /// Writes the database refused as stale (ships and ends of leases).
    refused: AtomicU64,
    /// Ends of leases that failed for another reason.
    failed: AtomicU64,
}

/// A copy of the counters at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CountersSnapshot {
    pub claimed: u64,
    pub completed: u64,
    pub parked: u64,
    pub released: u64,
    pub lost: u64,
    pub refused: u64,
    pub failed: u64,
}

impl Counters {
    fn snapshot(&self) -> CountersSnapshot {
        let get = |counter: &AtomicU64| counter.load(Ordering::SeqCst);
        CountersSnapshot {
            claimed: get(&self.claimed),
            completed: get(&self.completed),
            parked: get(&self.parked),
            released: get(&self.released),
            lost: get(&self.lost),
            refused: get(&self.refused),
            failed: get(&self.failed),
        }
    }
}

/// A worker's identity and seats.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    pub host_id: String,
    pub capacity: u32,
    /// Whether SIGTERM (and SIGINT) drain this worker.
    pub drain_on_signal: bool,
}

type Executions = Mutex<HashMap<LeaseKey, Arc<Execution>>>;

/// A worker: `run` blocks until the worker has drained.
#[derive(Debug)]
pub struct Worker {
    client: FleetClient,
    config: WorkerConfig,
    draining: Arc<AtomicBool>,
    counters: Arc<Counters>,
    executions: Arc<Executions>,
}

impl Worker {
    pub fn new(client: FleetClient, config: WorkerConfig) -> Self {
        Self {
            client,
            config,
            draining: Arc::new(AtomicBool::new(false)),
            counters: Arc::new(Counters::default()),
            executions: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// Setting it drains the worker, as SIGTERM does.
    pub fn drain_flag(&self) -> Arc<AtomicBool> {
        self.draining.clone()
    }

    pub fn counters(&self) -> CountersSnapshot {
        self.counters.snapshot()
    }

    /// The leases this worker runs now.
    pub fn held(&self) -> Vec<LeaseKey> {
        lock(&self.executions).keys().cloned().collect()
    }

    /// Registers, then claims and runs leases until drained; returns once
    /// every execution has ended and been written (or refused).
    pub fn run(&self, executor: Arc<dyn Executor>) -> Result<CountersSnapshot> {
        if self.config.drain_on_signal {
            for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
                signal_hook::flag::register(signal, self.draining.clone())
                    .map_err(FleetError::Signal)?;
            }
        }
        self.client
            .register_worker(&self.config.host_id, self.config.capacity)?;
        let beating = Arc::new(AtomicBool::new(true));
        let heart = self.start_heartbeat(beating.clone());
        let claimed = self.claim_loop(&executor);
        let _ = self.client.drain(&self.config.host_id);
        self.wait_for_executions();
        beating.store(false, Ordering::SeqCst);
        let _ = heart.join();
        claimed.map(|()| self.counters())
    }

    fn claim_loop(&self, executor: &Arc<dyn Executor>) -> Result<()> {
        let mut waiter = self.client.work_waiter();
        let waker = waiter.waker();
        let poll = self.client.timings().poll;
        while !self.draining.load(Ordering::SeqCst) {
            let running = lock(&self.executions).len();
            let free = (self.config.capacity as usize).saturating_sub(running);
            let leases = match self.client.claim(&self.config.host_id, free as u32) {
                Ok(leases) => leases,
                Err(error) if error.is_transient() => Vec::new(),
                Err(error) => return Err(error),
            };
            if leases.is_empty() {
                waiter.wait(poll);
                continue;
            }
            for lease in leases {
                self.start_execution(lease, executor.clone(), waker.clone());
            }
        }
        Ok(())
    }

    fn start_execution(&self, lease: Lease, executor: Arc<dyn Executor>, waker: Waker) {
        self.counters.claimed.fetch_add(1, Ordering::SeqCst);
        let key = lease.key.clone();
        let execution = Arc::new(Execution {
            lease,
            client: self.client.clone(),
            state: AtomicU8::new(RUNNING),
            ended: AtomicBool::new(false),
            draining: self.draining.clone(),
            counters: self.counters.clone(),
            controls: Mutex::new(Vec::new()),
        });
        lock(&self.executions).insert(key.clone(), execution.clone());
        let executions = self.executions.clone();
        let client = self.client.clone();
        let counters = self.counters.clone();
        thread::spawn(move || {
            let finish = executor.execute(&execution);
            execution.ended.store(true, Ordering::SeqCst);
            write_finish(&client, &key, &finish, &counters);
            lock(&executions).remove(&key);
            waker.wake();
        });
    }

    /// Beats every `Timings::heartbeat` with the leases held, stops the
    /// executions whose leases it lost, and expires others' dead leases.
    fn start_heartbeat(&self, beating: Arc<AtomicBool>) -> thread::JoinHandle<()> {
        let client = self.client.clone();
        let host = self.config.host_id.clone();
        let executions = self.executions.clone();
        thread::spawn(move || {
            let timings = client.timings();
            let mut last_beat = Instant::now();
            while beating.load(Ordering::SeqCst) {
                let held: Vec<LeaseKey> = lock(&executions).keys().cloned().collect();
                match client.heartbeat(&host, &held) {
                    Ok(lost) => {
                        last_beat = Instant::now();
                        stop_lost(&executions, &lost);
                        if let Ok(stopped) = client.stopping(&held) {
                            stop_runs(&executions, &stopped);
                        }
                        if let Ok(controls) = client.take_controls(&held) {
                            hand_controls(&executions, controls);
                        }
                        let _ = client.expire_leases();
                    }
                    Err(_) if last_beat.elapsed() >= timings.lease_timeout => {
                        stop_lost(&executions, &held);
                    }
                    Err(_) => {}
                }
                sleep_while(&beating, timings.heartbeat);
            }
        })
    }

    fn wait_for_executions(&self) {
        while !lock(&self.executions).is_empty() {
            thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

/// Writes how an execution ended; a refused write is counted, not retried.
fn write_finish(client: &FleetClient, key: &LeaseKey, finish: &Finish, counters: &Counters) {
    let (written, counter) = match finish {
        Finish::Complete(result) => (client.complete(key, result), &counters.completed),
        Finish::Park(snapshot) => (client.park(key, snapshot), &counters.parked),
        Finish::Release => (client.release(key), &counters.released),
    };
    let counter = match written {
        Ok(()) => counter,
        Err(FleetError::Fenced { .. }) => &counters.refused,
        Err(_) => &counters.failed,
    };
    counter.fetch_add(1, Ordering::SeqCst);
}

fn stop_runs(executions: &Executions, stopped: &[LeaseKey]) {
    let executions = lock(executions);
    for key in stopped {
        if let Some(execution) = executions.get(key) {
            execution.run_stopped();
        }
    }
}

/// Hands each request taken from the queue to the execution of its lease.
fn hand_controls(executions: &Executions, controls: Vec<(LeaseKey, Value)>) {
    let executions = lock(executions);
    for (key, control) in controls {
        if let Some(execution) = executions.get(&key) {
            lock(&execution.controls).push(control);
        }
    }
}

fn stop_lost(executions: &Executions, lost: &[LeaseKey]) {
    let executions = lock(executions);
    for key in lost {
        if let Some(execution) = executions.get(key) {
            execution.lose();
        }
    }
}

/// Sleeps `pause` in short steps, ending early when `running` turns false.
fn sleep_while(running: &AtomicBool, pause: std::time::Duration) {
    let step = std::time::Duration::from_millis(20);
    let started = Instant::now();
    while running.load(Ordering::SeqCst) && started.elapsed() < pause {
        thread::sleep(step.min(pause.saturating_sub(started.elapsed())));
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
