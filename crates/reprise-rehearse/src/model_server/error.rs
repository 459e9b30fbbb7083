//! Errors of the scenario reader and of the scenario's checks against a plan.

use std::path::PathBuf;

use super::scenario::Position;

/// Why a scenario could not be loaded, or cannot serve a plan.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("cannot read scenario {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{file}: scenario version {found} is newer than this server reads (1): upgrade reprise"
    )]
    NewerVersion { file: String, found: u32 },
    /// A mistake at a place in the file: `file:line:col: key: problem`.
    #[error("{file}:{at}: {key}: {problem}")]
    Invalid {
        file: String,
        at: Position,
        key: String,
        problem: String,
    },
}

pub type ScenarioResult<T> = Result<T, ScenarioError>;
