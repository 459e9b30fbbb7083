//! The fleet's queue on PostgreSQL: workers and their heartbeats, tasks
//! claimed under leases fenced by a per-task `lease_epoch`, and the rows
//! and outcomes workers ship to the coordinator, in transit. The engine
//! plugs in through `Executor`; payloads are JSON and shipped rows are
//! opaque bytes, so this crate knows nothing of tasks beyond their ids.
//! docs/fleet.md has the schema, the fencing rule and the timings.

#![forbid(unsafe_code)]

mod client;
mod error;
mod queue;
mod retry;
mod schema;
mod types;
mod worker;

pub use client::{FleetClient, Waiter, Waker};
pub use error::{FleetError, Result};
pub use queue::{Fleet, redact};
pub use schema::{LATEST_VERSION, Migrated, SCHEMA};
pub use types::{
    Affinity, Collected, FleetStatus, Lease, LeaseKey, OutcomeKind, RunSpec, ShippedRow,
    TaskStatus, Timings, WorkerStatus,
};
pub use worker::{CountersSnapshot, Execution, Executor, Finish, Stop, Worker, WorkerConfig};
