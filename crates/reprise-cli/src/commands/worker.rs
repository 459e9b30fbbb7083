//! `reprise worker`: one host of a fleet. It claims tasks from the fleet's
//! database up to its capacity and runs each with the engine, in a state
//! directory and a project clone of its own, holding no audit key.

use std::path::PathBuf;
use std::sync::Arc;

use reprise_engine::WorkerHost;
use reprise_fleet::{FleetClient, Timings, Worker, WorkerConfig};
use reprise_store::state::StateDir;
use serde_json::json;

use crate::commands::fleet_transport::EngineExecutor;
use crate::error::CliError;
use crate::output::Outcome;
use crate::settings::Settings;

#[derive(Debug, clap::Args)]
pub(crate) struct WorkerArgs {
    /// The fleet's PostgreSQL database, as a postgres:// URL (default:
    /// REPRISE_DATABASE_URL).
    #[arg(long = "db", value_name = "URL")]
    db: Option<String>,
    /// Tasks this host runs at once.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    capacity: u32,
    /// This host's name in the fleet (default: the machine's host name).
    #[arg(long, value_name = "ID")]
    host_id: Option<String>,
    /// Where this worker keeps its state directory and its clone of each
    /// run's project (default: reprise-worker in the current directory).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

impl WorkerArgs {
    pub(crate) fn run(self, settings: &Settings) -> Result<Outcome, CliError> {
        let url = crate::commands::fleet::database_url(settings, self.db)?;
        let host_id = self.host_id.unwrap_or_else(host_name);
        let dir = self
            .dir
            .unwrap_or_else(|| settings.cwd.join("reprise-worker"));
        let project = dir.join("project");
        std::fs::create_dir_all(&project)
            .map_err(|err| CliError::failed(format!("cannot make {}: {err}", project.display())))?;
        let (state, _) = StateDir::create(&dir.join(".reprise")).map_err(|err| {
            CliError::failed(format!("cannot make the worker's state directory: {err}"))
        })?;
        let supervisor = crate::commands::run::supervisor(settings)?;
        let client = FleetClient::connect(&url, Timings::default())
            .map_err(crate::commands::fleet::fleet_error)?;
        client
            .check_schema()
            .map_err(crate::commands::fleet::fleet_error)?;
        let host = WorkerHost {
            host_id: host_id.clone(),
            state,
            project,
            supervisor: Some(supervisor),
        };
        let _ = reprise_agents::supervise::become_subreaper();
        let worker = Worker::new(
            client.clone(),
            WorkerConfig {
                host_id: host_id.clone(),
                capacity: self.capacity,
                drain_on_signal: true,
            },
        );
        let counters = worker
            .run(Arc::new(EngineExecutor { host, client }))
            .map_err(crate::commands::fleet::fleet_error)?;
        reprise_agents::supervise::reap_adopted();
        Ok(Outcome {
            text: format!(
                "worker {host_id} drained: {} claimed, {} completed, {} lost, {} refused\n",
                counters.claimed, counters.completed, counters.lost, counters.refused
            ),
            json: json!({
                "host_id": host_id,
                "claimed": counters.claimed,
                "completed": counters.completed,
                "lost": counters.lost,
                "refused": counters.refused,
            }),
            ok: true,
            exit: None,
        })
    }
}

/// This machine's host name, or "localhost" when it cannot be read.
pub(crate) fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .ok()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}
