//! A transport whose workers are threads of this process: one thread per
//! "host", each with its own state directory (and no audit key) and its own
//! project clone, taking orders one at a time from its queue. For tests,
//! and as the reference a database's transport must behave like.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::JoinHandle;

use reprise_agents::CancelToken;

use super::worker::{WorkerHost, run_order};
use super::{Report, TaskOrder, Transport};
use crate::error::{EngineError, Result};
use crate::evidence::Outbox;

type Queued = (TaskOrder, Sender<Report>);

/// Worker hosts on threads of this process.
#[derive(Debug)]
pub struct InProcessTransport {
    /// Each host's id and order queue.
    queues: Vec<(String, Sender<Queued>)>,
    threads: Vec<JoinHandle<()>>,
    next: AtomicUsize,
}

/// A host of an in-process fleet, and when (if ever) it is lost: after
/// shipping that many rows of its first order, it reports the order lost
/// and nothing more of it reaches the coordinator (its agent runs on, as a
/// partitioned worker's would).
#[derive(Debug, Clone)]
pub struct InProcessHost {
    pub host: WorkerHost,
    pub lost_after_rows: Option<usize>,
}

impl From<WorkerHost> for InProcessHost {
    fn from(host: WorkerHost) -> Self {
        Self {
            host,
            lost_after_rows: None,
        }
    }
}

impl InProcessTransport {
    /// Starts a thread for each host; `cancel` stops their attempts.
    pub fn start(hosts: Vec<impl Into<InProcessHost>>, cancel: &CancelToken) -> Self {
        let mut queues = Vec::new();
        let mut threads = Vec::new();
        for host in hosts {
            let host: InProcessHost = host.into();
            let (sender, orders) = channel::<Queued>();
            let cancel = cancel.clone();
            queues.push((host.host.host_id.clone(), sender));
            threads.push(std::thread::spawn(move || serve(host, &orders, &cancel)));
        }
        Self {
            queues,
            threads,
            next: AtomicUsize::new(0),
        }
    }
}

impl Transport for InProcessTransport {
    fn submit(&self, order: TaskOrder, reports: Sender<Report>) -> Result<()> {
        if self.queues.is_empty() {
            return Err(EngineError::Lifecycle(
                "the fleet has no worker hosts; start one".to_owned(),
            ));
        }
        // Round robin, never back to the host that lost the task.
        let lost = order.taken_over_from.as_deref();
        let open: Vec<&Sender<Queued>> = self
            .queues
            .iter()
            .filter(|(host, _)| Some(host.as_str()) != lost)
            .map(|(_, queue)| queue)
            .collect();
        if open.is_empty() {
            return Err(EngineError::Lifecycle(
                "no other worker host can take the task over; start another".to_owned(),
            ));
        }
        let pick = self.next.fetch_add(1, Ordering::Relaxed) % open.len();
        open[pick]
            .send((order, reports))
            .map_err(|_| EngineError::Lifecycle("a worker host has stopped".to_owned()))
    }
}

impl Drop for InProcessTransport {
    fn drop(&mut self) {
        self.queues.clear();
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// One host's loop: each order run to its end, its rows and events
/// reported as they come, then its result.
fn serve(host: InProcessHost, orders: &Receiver<Queued>, cancel: &CancelToken) {
    let mut lost_after_rows = host.lost_after_rows;
    let host = host.host;
    for (order, reports) in orders {
        let (ship, shipped) = channel();
        let (events, event_reports) = channel();
        let partition = Partition::new(lost_after_rows.take(), &host.host_id);
        let outcome = std::thread::scope(|scope| {
            let rows_to = reports.clone();
            let partition = &partition;
            scope.spawn(move || {
                for shipment in shipped {
                    partition.pass(&rows_to, Report::Shipped(vec![shipment]));
                }
            });
            let events_to = reports.clone();
            scope.spawn(move || {
                for event in event_reports {
                    partition.pass(&events_to, Report::Event(event));
                }
            });
            let control = crate::run::fleet::WorkerControl::default();
            let outcome = run_order(
                &host,
                &order,
                Outbox::new(ship),
                (&events, &control),
                cancel,
            );
            drop(events);
            outcome
        });
        let last = match outcome {
            Ok(result) => Report::Done(Box::new(result)),
            Err(err) => Report::Lost {
                host: host.host_id.clone(),
                reason: err.to_string(),
            },
        };
        partition.pass(&reports, last);
    }
}

/// Cuts a host off from the coordinator after some rows: the order is
/// reported lost, and nothing of it passes after that.
struct Partition {
    rows_left: Option<std::sync::Mutex<usize>>,
    host: String,
}

impl Partition {
    fn new(rows: Option<usize>, host: &str) -> Self {
        Self {
            rows_left: rows.map(std::sync::Mutex::new),
            host: host.to_owned(),
        }
    }

    /// Sends `report` unless the host is cut off; the row that uses up its
    /// allowance is followed by `Lost`.
    fn pass(&self, to: &Sender<Report>, report: Report) {
        let Some(rows_left) = &self.rows_left else {
            let _ = to.send(report);
            return;
        };
        let mut left = rows_left.lock().expect("a partition's count");
        if *left == 0 {
            return;
        }
        if matches!(report, Report::Shipped(_)) {
            *left -= 1;
        }
        let _ = to.send(report);
        if *left == 0 {
            let _ = to.send(Report::Lost {
                host: self.host.clone(),
                reason: "its lease expired (partitioned in a test)".to_owned(),
            });
        }
    }
}
