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
    queues: Vec<Sender<Queued>>,
    threads: Vec<JoinHandle<()>>,
    next: AtomicUsize,
}

impl InProcessTransport {
    /// Starts a thread for each host; `cancel` stops their attempts.
    pub fn start(hosts: Vec<WorkerHost>, cancel: &CancelToken) -> Self {
        let mut queues = Vec::new();
        let mut threads = Vec::new();
        for host in hosts {
            let (sender, orders) = channel::<Queued>();
            let cancel = cancel.clone();
            queues.push(sender);
            threads.push(std::thread::spawn(move || serve(&host, &orders, &cancel)));
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
        let host = self.next.fetch_add(1, Ordering::Relaxed) % self.queues.len();
        self.queues[host]
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
fn serve(host: &WorkerHost, orders: &Receiver<Queued>, cancel: &CancelToken) {
    for (order, reports) in orders {
        let (ship, shipped) = channel();
        let (events, event_reports) = channel();
        let outcome = std::thread::scope(|scope| {
            let rows_to = reports.clone();
            scope.spawn(move || {
                for shipment in shipped {
                    let _ = rows_to.send(Report::Shipped(vec![shipment]));
                }
            });
            let events_to = reports.clone();
            scope.spawn(move || {
                for event in event_reports {
                    let _ = events_to.send(Report::Event(event));
                }
            });
            let outcome = run_order(host, &order, Outbox::new(ship), &events, cancel);
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
        let _ = reports.send(last);
    }
}
