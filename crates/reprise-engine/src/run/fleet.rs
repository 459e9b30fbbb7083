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
pub use order::{ShippedResult, TaskOrder};
pub(crate) use remote_seats::{PlanText, RemoteSeats};
pub use worker::{WorkerHost, run_order};

use std::sync::mpsc::Sender;

use crate::error::Result;
use crate::events::Event;
use crate::evidence::Shipment;

/// What comes back from a worker about one order, in the order it happened.
#[derive(Debug, Clone)]
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
}
