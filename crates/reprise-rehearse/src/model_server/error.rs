//! Errors of the scenario reader.

use std::path::PathBuf;

/// Why a scenario could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("cannot read scenario {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("scenario is not valid yaml: {message}")]
    Syntax { message: String },
    #[error("scenario version {found} is newer than this server reads (1): upgrade reprise")]
    NewerVersion { found: u32 },
    #[error("scenario rule {index}: {reason}")]
    InvalidRule { index: usize, reason: String },
}

pub type ScenarioResult<T> = Result<T, ScenarioError>;
