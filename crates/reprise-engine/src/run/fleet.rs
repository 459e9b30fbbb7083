//! A run whose tasks execute on other hosts: the coordinator hands each
//! seated task to a `Transport` as a `TaskOrder`, a worker runs it whole
//! (every attempt, so a warm or fork retry stays with the session it
//! resumes) and ships back its journal rows, its events and its result; the
//! coordinator ingests the rows into its own chains (`crate::evidence`)
//! before it hears the task ended. The transport is a seam: an in-process
//! one here for tests, a database's in a fleet.

mod in_process;
mod order;
mod remote_git;
mod remote_seats;
mod worker;

pub use in_process::{InProcessHost, InProcessTransport};
pub use order::{ForwardedPark, ShippedResult, TaskOrder, WorkerControl};
pub(crate) use remote_seats::{PlanText, RemoteSeats};
pub use worker::{WorkerHost, run_order};

use std::sync::mpsc::Sender;

use reprise_core::TaskId;

use crate::error::Result;
use crate::events::Event;
use crate::evidence::Shipment;

/// What comes back from a worker about one order, in the order it happened.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(tag = "report", content = "body", rename_all = "snake_case")]
pub enum Report {
    /// Rows (and intents) the worker wrote, to be ingested in order.
    Shipped(Vec<Shipment>),
    Event(Event),
    /// The task ended on the worker; nothing more comes for this order.
    Done(Box<ShippedResult>),
    /// The worker that held the order is gone (its lease expired); nothing
    /// more comes from it.
    Lost {
        host: String,
        reason: String,
    },
}

/// Where orders go and reports come from: the coordinator's only view of
/// its workers.
pub trait Transport: Sync {
    /// Hands `order` to a worker; everything about it comes back on
    /// `reports`, ending with `Done` or `Lost`.
    fn submit(&self, order: TaskOrder, reports: Sender<Report>) -> Result<()>;

    /// Follows `order`'s task where a worker may already hold it: a
    /// coordinator that died and was continued takes its fleet run up
    /// again. When the transport knows the task in this run, everything
    /// workers shipped for it comes on `reports` again from the first row
    /// (rows and its end, not past events), then what comes next, and the
    /// answer is `true`; `false` when it never had the task, or when the
    /// task ended there as the run's stop left it (`cancelled`): such a
    /// task goes on anew, as a local run's cancelled task does, once the
    /// rows sent on `reports` are taken.
    fn attach(&self, order: &TaskOrder, reports: Sender<Report>) -> Result<bool> {
        let _ = (order, reports);
        Ok(false)
    }

    /// The run `run_id` is stopping (Ctrl-C, SIGTERM, SIGHUP): its workers
    /// should stop its tasks, each ending as a local task the stop caught
    /// (`cancelled`), and a task no worker took yet ends with
    /// `ShippedResult::withdrawn`. Said once or more; reports go on.
    fn stop(&self, run_id: &str) {
        let _ = run_id;
    }

    /// Passes a park asked of the coordinator to the worker holding task
    /// `task` of run `run_id`; `false` when no worker can be reached with
    /// it (the task is not held now, or the transport cannot pass it).
    fn park(&self, run_id: &str, task: &TaskId, park: &order::ForwardedPark) -> Result<bool> {
        let _ = (run_id, task, park);
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::AuditIntent;

    /// Every report a worker sends survives a trip through JSON, as a
    /// database's transport carries it.
    #[test]
    fn reports_travel_as_json() {
        let task = reprise_core::TaskId::parse("greet").expect("id");
        let reports = vec![
            Report::Shipped(vec![
                Shipment::Row {
                    line: "{\"seq\":0}\n".to_owned(),
                },
                Shipment::Intent {
                    intent: AuditIntent::Seal,
                },
            ]),
            Report::Event(Event::Warning {
                task: Some(task),
                message: "hello".to_owned(),
            }),
            Report::Done(Box::new(ShippedResult::failed("gone".to_owned()))),
            Report::Lost {
                host: "one".to_owned(),
                reason: "lease expired".to_owned(),
            },
        ];
        for report in reports {
            let text = serde_json::to_string(&report).expect("serialises");
            let back: Report = serde_json::from_str(&text).expect("parses");
            assert_eq!(format!("{back:?}"), format!("{report:?}"), "{text}");
        }
    }
}
