//! The fleet's one error type. A fenced write is its own variant: the
//! writer is stale and must stop, which is a decision, not a failure to
//! retry. Transient connection errors are retried inside the client; one
//! that outlasts the retry window surfaces as `Unavailable`.

/// A result of the fleet's operations.
pub type Result<T, E = FleetError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// The lease's epoch is no longer the task's: another holder has it, or
    /// it expired. The writer stops its agent and writes nothing more.
    #[error(
        "the lease on task {task} of run {run} at epoch {epoch} is no longer held: stop its agent and write nothing more"
    )]
    Fenced {
        run: String,
        task: String,
        epoch: i64,
    },
    /// `--db` or `REPRISE_DATABASE_URL` is not a PostgreSQL URL.
    #[error(
        "database url {url:?} is not a PostgreSQL url: give one like postgres://user@host:5432/db ({reason})"
    )]
    BadUrl { url: String, reason: String },
    /// The server did not answer within the retry window.
    #[error(
        "the fleet database at {target} did not answer ({reason}): check that PostgreSQL runs there and accepts this user"
    )]
    Unavailable { target: String, reason: String },
    /// The database has no fleet schema yet.
    #[error("the database has no fleet schema: run `reprise fleet init --db URL` first")]
    NotInitialised,
    /// The schema is at a version this build does not know.
    #[error(
        "the fleet schema is at version {found}, newer than this reprise knows ({known}): upgrade reprise on this host"
    )]
    NewerSchema { found: i32, known: i32 },
    /// The schema is behind this build.
    #[error(
        "the fleet schema is at version {found}, older than this reprise needs ({known}): run `reprise fleet init --db URL`"
    )]
    OlderSchema { found: i32, known: i32 },
    /// A submit named a run the fleet does not have.
    #[error("run {run} is not in the fleet database: open it before submitting its tasks")]
    UnknownRun { run: String },
    /// A submit named a task that a worker holds now.
    #[error(
        "task {task} of run {run} is held by a worker: wait for its outcome before submitting it again"
    )]
    Held { run: String, task: String },
    /// An id that cannot name a run, task or host.
    #[error("{0}")]
    BadId(String),
    /// The worker could not watch for the signals that drain it.
    #[error("cannot watch for SIGTERM to drain this worker: {0}")]
    Signal(std::io::Error),
    /// Any other database error.
    #[error("fleet database error: {0}")]
    Database(#[from] sqlx::Error),
}

impl FleetError {
    /// Whether retrying the same call later may succeed: the connection was
    /// lost, refused or timed out, or the server is shutting down or
    /// starting.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Database(error) => transient(error),
            Self::Unavailable { .. } => true,
            _ => false,
        }
    }
}

/// Connection-level failures and the server's own "going away / not ready"
/// states (SQLSTATE classes 08 and 57P0x), plus a serialization or deadlock
/// failure, which a retry resolves.
fn transient(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Protocol(_) => true,
        sqlx::Error::Database(database) => database.code().is_some_and(|code| {
            code.starts_with("08") || code.starts_with("57P") || code == "40001" || code == "40P01"
        }),
        _ => false,
    }
}
