//! `reprise fleet init` and `reprise fleet status`: the fleet's tables in a
//! PostgreSQL database, and what its workers and tasks are doing. The
//! database comes from `--db`, else `REPRISE_DATABASE_URL`.

use std::fmt::Write as _;
use std::time::Duration;

use reprise_fleet::{FleetClient, FleetError, FleetStatus, Timings};
use serde_json::json;

use crate::error::{CliError, ErrorKind};
use crate::output::Outcome;
use crate::settings::Settings;

/// How long a command waits for an unreachable server before it says so.
const COMMAND_RETRY: Duration = Duration::from_secs(3);

#[derive(Debug, clap::Subcommand)]
pub(crate) enum FleetCommand {
    /// Create the fleet's tables in a PostgreSQL database, or bring them to
    /// this version; at the latest version it changes nothing.
    #[command(after_help = help!("\
  reprise fleet init --db postgres://user@db.internal:5432/reprise
  REPRISE_DATABASE_URL=postgres://user@localhost/reprise reprise fleet init"))]
    Init(DatabaseArgs),
    /// Show the fleet's workers (host, capacity, last heartbeat) and tasks
    /// (state, holder, lease epoch, since).
    #[command(after_help = help!("\
  reprise fleet status --db postgres://user@db.internal:5432/reprise
  reprise fleet status --json"))]
    Status(DatabaseArgs),
}

#[derive(Debug, clap::Args)]
pub(crate) struct DatabaseArgs {
    /// The fleet's PostgreSQL database, as a postgres:// URL (default:
    /// REPRISE_DATABASE_URL).
    #[arg(long = "db", value_name = "URL")]
    db: Option<String>,
}

impl FleetCommand {
    pub(crate) fn run(self, settings: &Settings) -> Result<Outcome, CliError> {
        match self {
            Self::Init(args) => init(&connect(settings, args)?),
            Self::Status(args) => status(&connect(settings, args)?),
        }
    }
}

/// Checks, before a fleet run writes anything, that the fleet's database
/// answers within a few seconds and holds the fleet's tables.
pub(crate) fn check_reachable(url: &str) -> Result<(), CliError> {
    command_client(url)?.check_schema().map_err(fleet_error)
}

/// The fleet database a command names: `--db`, else
/// `REPRISE_DATABASE_URL`.
pub(crate) fn database_url(settings: &Settings, db: Option<String>) -> Result<String, CliError> {
    db.or_else(|| settings.database_url.clone()).ok_or_else(|| {
        CliError::usage("no fleet database given: pass --db postgres://USER@HOST/DB or set REPRISE_DATABASE_URL")
    })
}

/// A client for a command: an unreachable server is said after a few
/// seconds, not after a run's minute of retries.
fn command_client(url: &str) -> Result<FleetClient, CliError> {
    let timings = Timings {
        retry_for: COMMAND_RETRY,
        ..Timings::default()
    };
    FleetClient::connect(url, timings).map_err(fleet_error)
}

/// A client for `reprise watch --fleet URL`: asked for the fleet's status
/// as a command is.
pub(crate) fn status_client(url: &str) -> Result<FleetClient, CliError> {
    command_client(url)
}

fn connect(settings: &Settings, args: DatabaseArgs) -> Result<FleetClient, CliError> {
    command_client(&database_url(settings, args.db)?)
}

fn init(client: &FleetClient) -> Result<Outcome, CliError> {
    let migrated = client.init().map_err(fleet_error)?;
    let text = if migrated.from == migrated.to {
        format!(
            "fleet schema in {} is at version {}: nothing to do\n",
            client.target(),
            migrated.to
        )
    } else {
        format!(
            "fleet schema in {} brought from version {} to {}\n",
            client.target(),
            migrated.from,
            migrated.to
        )
    };
    Ok(Outcome {
        json: json!({"database": client.target(), "from_version": migrated.from, "version": migrated.to}),
        text,
        ok: true,
        exit: None,
    })
}

fn status(client: &FleetClient) -> Result<Outcome, CliError> {
    let status = client.status().map_err(fleet_error)?;
    Ok(Outcome {
        json: serde_json::to_value(&status).map_err(|error| CliError::failed(error.to_string()))?,
        text: status_text(&status),
        ok: true,
        exit: None,
    })
}

fn status_text(status: &FleetStatus) -> String {
    let mut text = format!("workers: {}\n", status.workers.len());
    for worker in &status.workers {
        let draining = if worker.draining { "  draining" } else { "" };
        let _ = writeln!(
            text,
            "  {}  capacity {}  last heartbeat {}{draining}",
            worker.host_id, worker.capacity, worker.heartbeat_at
        );
    }
    let _ = writeln!(text, "tasks: {}", status.tasks.len());
    for task in &status.tasks {
        let holder = task.holder.as_deref().unwrap_or("-");
        let _ = writeln!(
            text,
            "  {} {}  {}  holder {holder}  epoch {}  since {}",
            task.run_id, task.task_id, task.state, task.lease_epoch, task.since
        );
    }
    text
}

/// A bad URL or id is bad input (2); anything the database says or does
/// not say is a failure (1).
pub(crate) fn fleet_error(error: FleetError) -> CliError {
    let kind = match error {
        FleetError::BadUrl { .. } | FleetError::BadId(_) => ErrorKind::Usage,
        _ => ErrorKind::Failed,
    };
    CliError::from_source(kind, error)
}

/// Where a fleet run's tasks went, kept in its run directory so `run
/// --continue` takes the run up on the same fleet. The database's URL is
/// kept without its password: a continue that needs one is given it again
/// (`--fleet URL` or `REPRISE_DATABASE_URL`).
const FLEET_RECORD: &str = "fleet.json";

/// Records that run `run_id` runs on the fleet `target`.
pub(crate) fn record_fleet_run(
    state: &reprise_store::state::StateDir,
    run_id: &str,
    target: &crate::commands::run::FleetTarget,
) -> Result<(), CliError> {
    let dir = state.runs_dir().join(run_id);
    let record = json!({"database": reprise_fleet::redact(&target.url), "remote": target.remote});
    let bytes =
        serde_json::to_vec_pretty(&record).map_err(|err| CliError::failed(err.to_string()))?;
    std::fs::create_dir_all(&dir)
        .map_err(|err| CliError::failed(format!("cannot record the run's fleet: {err}")))?;
    reprise_store::write_atomic(&dir.join(FLEET_RECORD), &bytes, 0o600)?;
    Ok(())
}

/// The fleet run `run_id` ran on, if it did: its database is `url` when
/// one is given (`--fleet`, `REPRISE_DATABASE_URL`), else the recorded one.
pub(crate) fn recorded_fleet(
    state: &reprise_store::state::StateDir,
    run_id: &str,
    url: Option<String>,
) -> Result<Option<crate::commands::run::FleetTarget>, CliError> {
    let path = state.runs_dir().join(run_id).join(FLEET_RECORD);
    let Some(bytes) = reprise_store::read_no_follow(&path)? else {
        return Ok(None);
    };
    let record: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
    let field = |name: &str| {
        record
            .get(name)
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned)
    };
    let (Some(database), Some(remote)) = (field("database"), field("remote")) else {
        return Err(CliError::failed(format!(
            "{} is unreadable; it names the fleet run {run_id} ran on: restore it from a backup",
            path.display()
        )));
    };
    Ok(Some(crate::commands::run::FleetTarget {
        url: url.unwrap_or(database),
        remote,
    }))
}
