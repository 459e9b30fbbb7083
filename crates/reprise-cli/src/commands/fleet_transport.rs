//! The fleet's two halves joined: the engine's `Transport` over the
//! PostgreSQL queue (the coordinator's side), and the engine as the queue's
//! `Executor` (a worker's side). What travels is the engine's own
//! serialised types: an order as a task's payload, each report a worker
//! writes as one shipped row, a task's result as its lease's completion.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use reprise_agents::CancelToken;
use reprise_engine::{Outbox, Report, ShippedResult, TaskOrder, Transport, WorkerHost, run_order};
use reprise_fleet::{
    Affinity, Collected, Execution, Executor, Finish, FleetClient, OutcomeKind, RunSpec,
    ShippedRow, Stop,
};
use serde_json::Value;

/// The coordinator's transport: orders submitted to the queue, and a thread
/// that collects what the workers ship and hands each report to the task it
/// is about.
pub(crate) struct PgTransport {
    client: FleetClient,
    spec: RunSpec,
    opened: Mutex<bool>,
    routes: Arc<Mutex<Routes>>,
    collector: Mutex<Option<JoinHandle<()>>>,
    stop: Arc<AtomicBool>,
}

/// Where each task's reports go, and how far the collector has handed
/// items out (changed together, under one lock, so a task attached late
/// gets every item once: those up to `delivered` from `attach`, the rest
/// from the collector).
#[derive(Default)]
struct Routes {
    to: HashMap<String, Sender<Report>>,
    delivered: i64,
}

impl PgTransport {
    pub(crate) fn new(client: FleetClient, spec: RunSpec) -> Self {
        Self {
            client,
            spec,
            opened: Mutex::new(false),
            routes: Arc::new(Mutex::new(Routes::default())),
            collector: Mutex::new(None),
            stop: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Opens the run in the queue and starts collecting, once.
    fn open(&self, run_id: &str) -> reprise_fleet::Result<()> {
        let mut opened = self
            .opened
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        if *opened {
            return Ok(());
        }
        let spec = RunSpec {
            run_id: run_id.to_owned(),
            ..self.spec.clone()
        };
        self.client.open_run(&spec)?;
        // A run opened again (a continued coordinator) was shipped things
        // before: those are history, which `attach` hands out; the
        // collector starts after them.
        let start = self.client.collect_position(run_id)?;
        lock(&self.routes).delivered = start;
        let client = self.client.clone();
        let routes = Arc::clone(&self.routes);
        let stop = Arc::clone(&self.stop);
        let run = run_id.to_owned();
        let collector = std::thread::spawn(move || collect(&client, &run, start, &routes, &stop));
        *self
            .collector
            .lock()
            .unwrap_or_else(|poison| poison.into_inner()) = Some(collector);
        *opened = true;
        Ok(())
    }
}

impl Transport for PgTransport {
    fn submit(&self, order: TaskOrder, reports: Sender<Report>) -> reprise_engine::Result<()> {
        self.open(&order.run_id).map_err(database_refused)?;
        let task = order.task.to_string();
        let payload = serde_json::to_value(&order)
            .map_err(|err| reprise_engine::EngineError::Lifecycle(err.to_string()))?;
        lock(&self.routes).to.insert(task.clone(), reports);
        self.client
            .submit(&order.run_id, &task, &payload, &Affinity::Any)
            .map_err(database_refused)
    }

    fn attach(&self, order: &TaskOrder, reports: Sender<Report>) -> reprise_engine::Result<bool> {
        self.open(&order.run_id).map_err(database_refused)?;
        let task = order.task.to_string();
        if self
            .client
            .task_status(&order.run_id, &task)
            .map_err(database_refused)?
            .is_none()
        {
            return Ok(false);
        }
        // What was shipped before now, from the first row: rows and the
        // end, not the events of then. The collector hands out the rest.
        let mut routes = lock(&self.routes);
        let delivered = routes.delivered;
        let earlier: Vec<Report> = self
            .client
            .collect_task(&order.run_id, &task, delivered)
            .map_err(database_refused)?
            .into_iter()
            .filter_map(|item| report_of(item).2)
            .filter(|report| !matches!(report, Report::Event(_)))
            .collect();
        // An end the run's stop made is not taken: the task goes on anew,
        // from its rows.
        let stopped = matches!(earlier.last(), Some(Report::Done(result))
            if result.status == reprise_engine::TaskStatus::Cancelled);
        for report in earlier {
            if !(stopped && matches!(report, Report::Done(_))) {
                let _ = reports.send(report);
            }
        }
        if !stopped {
            routes.to.insert(task, reports);
        }
        Ok(!stopped)
    }

    fn stop(&self, run_id: &str) {
        let withdrawn = serde_json::to_value(ShippedResult::withdrawn()).unwrap_or_default();
        let _ = self.client.stop_run(run_id, &withdrawn);
    }

    /// Left in the task's row for the worker holding it, whose heartbeat
    /// takes it (under that lease only).
    fn park(
        &self,
        run_id: &str,
        task: &reprise_core::TaskId,
        park: &reprise_engine::ForwardedPark,
    ) -> reprise_engine::Result<bool> {
        let request = serde_json::to_value(park)
            .map_err(|err| reprise_engine::EngineError::Lifecycle(err.to_string()))?;
        self.client
            .request_control(run_id, task.as_str(), &request)
            .map_err(database_refused)
    }
}

/// The queue's refusal as the engine's error.
fn database_refused(err: reprise_fleet::FleetError) -> reprise_engine::EngineError {
    reprise_engine::EngineError::Lifecycle(format!("the fleet's database refused the task: {err}"))
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poison| poison.into_inner())
}

impl PgTransport {
    /// Once the run has ended here (every task's rows in its journals):
    /// the rows taken so far of tasks no worker holds are deleted from the
    /// database, which otherwise keeps every row, transcripts included. A
    /// failure leaves them (the next run's end deletes nothing of this one;
    /// they cost space only).
    pub(crate) fn prune_taken(&self) {
        let through = lock(&self.routes).delivered;
        let _ = self.client.prune_collected(&self.spec.run_id, through);
    }
}

impl Drop for PgTransport {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(collector) = self
            .collector
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .take()
        {
            let _ = collector.join();
            let _ = self.client.finish_run(&self.spec.run_id);
        }
    }
}

/// Collects run `run`'s shipped rows and ends of leases until told to stop,
/// each handed to its task's reports.
fn collect(
    client: &FleetClient,
    run: &str,
    mut cursor: i64,
    routes: &Mutex<Routes>,
    stop: &AtomicBool,
) {
    let mut waiter = client.collect_waiter();
    while !stop.load(Ordering::SeqCst) {
        let Ok(items) = client.collect_wait(&mut waiter, run, cursor, Duration::from_millis(500))
        else {
            std::thread::sleep(Duration::from_millis(200));
            continue;
        };
        for item in items {
            let (position, task, report) = report_of(item);
            cursor = cursor.max(position);
            let mut routes = lock(routes);
            if let (Some(report), Some(to)) = (report, routes.to.get(&task)) {
                let _ = to.send(report);
            }
            routes.delivered = cursor;
        }
    }
}

/// What a collected item says to the coordinator: its position, its task
/// and its report (none for a row that is not one).
fn report_of(item: Collected) -> (i64, String, Option<Report>) {
    match item {
        Collected::Row {
            position,
            task_id,
            row,
            ..
        } => (position, task_id, serde_json::from_slice(&row.bytes).ok()),
        Collected::Outcome {
            position,
            task_id,
            kind,
            holder,
            body,
            ..
        } => {
            let report = match (kind, body) {
                (OutcomeKind::Completed, Some(body)) => {
                    match serde_json::from_value::<ShippedResult>(body.clone()) {
                        Ok(result) => Report::Done(Box::new(result)),
                        Err(_) => Report::Lost {
                            host: holder,
                            reason: body
                                .get("error")
                                .and_then(Value::as_str)
                                .unwrap_or("its result could not be read")
                                .to_owned(),
                        },
                    }
                }
                // A lease that expired or was given back: the queue hands
                // the task to the next worker that claims it, which goes on
                // from the rows this one shipped (`EngineExecutor`), so the
                // coordinator only waits.
                (OutcomeKind::Lost | OutcomeKind::Released | OutcomeKind::Parked, _) => {
                    return (position, task_id, None);
                }
                (OutcomeKind::Completed, None) => Report::Lost {
                    host: holder,
                    reason: "it completed the task with no result".to_owned(),
                },
            };
            (position, task_id, Some(report))
        }
    }
}

/// A worker's executor: each lease's order run by the engine on this host,
/// its rows and events shipped under the lease as they come.
pub(crate) struct EngineExecutor {
    pub(crate) host: WorkerHost,
    pub(crate) client: FleetClient,
}

impl EngineExecutor {
    /// A task taken over from a lost lease (the queue gave it to this host
    /// with the order it was first submitted with): it goes on from the
    /// journal as the coordinator holds it, the order's journal and every
    /// row the earlier holders shipped, and resumes a session of theirs
    /// only where its shipped transcript came with them.
    fn take_over(&self, order: &mut TaskOrder, epoch: i64) -> reprise_fleet::Result<()> {
        let task = order.task.to_string();
        let items = self.client.collect_task(&order.run_id, &task, i64::MAX)?;
        // Rows the order's journal already holds are not added again (an
        // order submitted anew after a takeover carries them).
        let mut next = order.journal.lines().count() as u64;
        for item in items {
            match item {
                Collected::Row {
                    epoch: shipped_in,
                    row,
                    ..
                } if shipped_in < epoch => {
                    if let Ok(Report::Shipped(shipments)) = serde_json::from_slice(&row.bytes) {
                        for shipment in shipments {
                            match shipment {
                                reprise_engine::Shipment::Row { line }
                                    if row_seq(&line) == Some(next) =>
                                {
                                    order.journal.push_str(&line);
                                    next += 1;
                                }
                                // The latest transcript of each session goes
                                // with the order.
                                reprise_engine::Shipment::Session(session) => {
                                    order.sessions.retain(|held| {
                                        held.session_id != session.session_id
                                            || held.adapter != session.adapter
                                    });
                                    order.sessions.push(session);
                                }
                                _ => {}
                            }
                        }
                    }
                }
                Collected::Outcome {
                    epoch: ended_in,
                    holder,
                    ..
                } if ended_in < epoch => {
                    order.taken_over_from = Some(holder);
                }
                _ => {}
            }
        }
        Ok(())
    }
}

impl Executor for EngineExecutor {
    fn execute(&self, execution: &Execution) -> Finish {
        let mut order: TaskOrder = match serde_json::from_value(execution.lease().payload.clone()) {
            Ok(order) => order,
            Err(err) => return refused(&format!("the order could not be read: {err}")),
        };
        let epoch = execution.lease().key.epoch;
        if epoch > 1
            && let Err(err) = self.take_over(&mut order, epoch)
        {
            return refused(&format!(
                "the earlier holder's rows could not be read: {err}"
            ));
        }
        let cancel = CancelToken::new();
        let seq = AtomicI64::new(0);
        let ship = |report: Report| {
            let Ok(bytes) = serde_json::to_vec(&report) else {
                return;
            };
            let row = ShippedRow {
                seq: seq.fetch_add(1, Ordering::SeqCst),
                bytes,
            };
            if execution.ship(&[row]).is_err() {
                cancel.cancel();
            }
        };
        let (rows, shipped) = channel();
        let (events, happened) = channel();
        let done = AtomicBool::new(false);
        let control = reprise_engine::WorkerControl::default();
        let outcome = std::thread::scope(|scope| {
            scope.spawn(|| {
                for shipment in shipped {
                    ship(Report::Shipped(vec![shipment]));
                }
            });
            scope.spawn(|| {
                for event in happened {
                    ship(Report::Event(event));
                }
            });
            scope.spawn(|| {
                while !done.load(Ordering::SeqCst) {
                    if matches!(execution.stop(), Some(Stop::LeaseLost | Stop::RunStopped)) {
                        cancel.cancel();
                    }
                    // A park the coordinator passed on: filed as a local
                    // one is; one that does not read is dropped.
                    for request in execution.take_controls() {
                        if let Ok(park) =
                            serde_json::from_value::<reprise_engine::ForwardedPark>(request)
                        {
                            control.park(&park);
                        }
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            });
            let outcome = run_order(
                &self.host,
                &order,
                Outbox::new(rows),
                (&events, &control),
                &cancel,
            );
            drop(events);
            done.store(true, Ordering::SeqCst);
            outcome
        });
        match outcome {
            Ok(result) => match serde_json::to_value(&result) {
                Ok(body) => Finish::Complete(body),
                Err(err) => refused(&err.to_string()),
            },
            Err(err) => refused(&err.to_string()),
        }
    }
}

/// The sequence number a journal row holds.
fn row_seq(line: &str) -> Option<u64> {
    serde_json::from_str::<Value>(line)
        .ok()?
        .get("seq")?
        .as_u64()
}

/// The end of a lease whose order this host could not run.
fn refused(reason: &str) -> Finish {
    Finish::Complete(serde_json::json!({ "error": reason }))
}
