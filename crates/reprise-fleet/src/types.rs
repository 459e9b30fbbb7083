//! The values the fleet's operations take and give: timings, leases,
//! affinities, what the coordinator collects and what `status` shows.

use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

/// How often a worker beats and how long a lease lives without one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timings {
    /// The pause between two heartbeats of a worker.
    pub heartbeat: Duration,
    /// How long a lease lives past its last renewal: a few heartbeats.
    pub lease_timeout: Duration,
    /// How long a call retries a transient connection error before it
    /// gives up with `Unavailable`.
    pub retry_for: Duration,
    /// The longest a waiting worker or coordinator goes without looking,
    /// when no notification comes (the polling fallback).
    pub poll: Duration,
}

impl Default for Timings {
    /// Beat every 2 s, expire after 8 s (four missed beats), retry a lost
    /// connection for a minute, poll every second.
    fn default() -> Self {
        Self {
            heartbeat: Duration::from_secs(2),
            lease_timeout: Duration::from_secs(8),
            retry_for: Duration::from_secs(60),
            poll: Duration::from_secs(1),
        }
    }
}

/// A run the coordinator opens before it submits the run's tasks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunSpec {
    pub run_id: String,
    pub plan_id: String,
    pub coordinator_host: String,
    /// The git remote workers fetch bases from and push results to.
    pub remote: String,
}

/// Where a submitted task should run.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Affinity {
    /// Any worker.
    #[default]
    Any,
    /// Only `host` until `hard_for` has passed since the submit, then any
    /// worker, `host` still first.
    Host { host: String, hard_for: Duration },
}

/// The identity of one lease: a task at one epoch.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct LeaseKey {
    pub run_id: String,
    pub task_id: String,
    pub epoch: i64,
}

/// A claimed task: its lease and the payload the coordinator submitted.
#[derive(Debug, Clone, PartialEq)]
pub struct Lease {
    pub key: LeaseKey,
    pub payload: Value,
}

/// A row a worker ships: its journal sequence number and its bytes, opaque
/// to the fleet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShippedRow {
    pub seq: i64,
    pub bytes: Vec<u8>,
}

/// How a lease ended, as the coordinator collects it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OutcomeKind {
    /// The holder completed the task.
    Completed,
    /// The holder parked it with a snapshot any host can resume from.
    Parked,
    /// The holder gave it back unfinished (drain).
    Released,
    /// The lease expired: the attempt that was running is lost.
    Lost,
}

impl OutcomeKind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Parked => "parked",
            Self::Released => "released",
            Self::Lost => "lost",
        }
    }

    pub(crate) fn parse(raw: &str) -> Option<Self> {
        [Self::Completed, Self::Parked, Self::Released, Self::Lost]
            .into_iter()
            .find(|kind| kind.as_str() == raw)
    }
}

/// One thing the coordinator collects, in the order the fleet took them.
#[derive(Debug, Clone, PartialEq)]
pub enum Collected {
    Row {
        position: i64,
        task_id: String,
        epoch: i64,
        row: ShippedRow,
    },
    Outcome {
        position: i64,
        task_id: String,
        epoch: i64,
        kind: OutcomeKind,
        holder: String,
        body: Option<Value>,
    },
}

impl Collected {
    /// The position a cursor moves to past this item.
    pub fn position(&self) -> i64 {
        match self {
            Self::Row { position, .. } | Self::Outcome { position, .. } => *position,
        }
    }
}

/// A worker as `status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WorkerStatus {
    pub host_id: String,
    pub capacity: i32,
    /// RFC 3339, UTC, milliseconds.
    pub heartbeat_at: String,
    pub draining: bool,
}

/// A task as `status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TaskStatus {
    pub run_id: String,
    pub task_id: String,
    pub state: String,
    pub holder: Option<String>,
    pub lease_epoch: i64,
    /// RFC 3339, UTC, milliseconds: when the task entered its state.
    pub since: String,
}

/// What `status` shows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct FleetStatus {
    pub workers: Vec<WorkerStatus>,
    pub tasks: Vec<TaskStatus>,
}
