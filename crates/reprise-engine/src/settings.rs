//! What a run is given besides the plan and its options, shared by the
//! modules below the coordinator: how attempts are supervised, what each
//! agent's process gets, and the plan file read and validated.

use std::path::{Path, PathBuf};

use reprise_core::plan::Plan;

use crate::error::{EngineError, Result};

/// What the engine needs to supervise and contain each attempt's processes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Supervisor {
    /// The supervisor binary (`reprise-supervisor`, beside `reprise`).
    pub program: PathBuf,
    /// The audit key: its directory is hidden from every contained process.
    pub key_path: Option<PathBuf>,
    /// Whether the kernel enforces Landlock (probed once by the caller).
    pub landlock: bool,
    /// Whether Landlock also holds TCP connections (ABI 4): the network's
    /// wall where there are no namespaces.
    pub landlock_network: bool,
    /// Whether attempts can have namespaces of their own: a private view of
    /// processes and a network of their own (probed once by the caller).
    pub namespaces: bool,
    /// Whether children get a parent-death signal.
    pub parent_death: bool,
}

/// Extra environment and a config home for one task's agent process, as
/// `reprise rehearse` sets them to point a CLI at its model server. The
/// environment is the child's only; the config home is the CLI's
/// (`CLAUDE_CONFIG_DIR`, `CODEX_HOME`, `GEMINI_CLI_HOME`) and is where the
/// engine looks for the CLI's transcripts.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AgentSetup {
    pub env: Vec<(String, String)>,
    pub config_home: Option<PathBuf>,
    /// Where the agent's model is served (a rehearsal's model server):
    /// what its network policy's `model` grants besides its CLI's own
    /// base URL.
    #[serde(default)]
    pub endpoints: Vec<reprise_core::plan::Endpoint>,
}

/// Reads and validates a plan file. Nothing is written.
pub fn load_plan(path: &Path) -> Result<Plan> {
    let text = std::fs::read_to_string(path).map_err(|source| EngineError::ReadPlan {
        path: path.to_path_buf(),
        source,
    })?;
    let name = path.display().to_string();
    Ok(reprise_core::plan::parse_plan(&text, &name)?)
}
