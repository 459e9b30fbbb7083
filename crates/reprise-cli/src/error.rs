//! The CLI's error: one line for the user and the exit code it maps to.

use reprise_core::TaskIdError;
use reprise_store::StoreError;

/// Success.
pub(crate) const EXIT_OK: u8 = 0;
/// A task failed, a verification failed, or a refusal.
pub(crate) const EXIT_FAILED: u8 = 1;
/// Usage or bad input.
pub(crate) const EXIT_USAGE: u8 = 2;
/// A run ended with tasks parked (waiting for a resume, an approval or a time).
pub(crate) const EXIT_PARKED: u8 = 3;

#[derive(Debug)]
pub(crate) struct CliError {
    pub(crate) message: String,
    pub(crate) code: u8,
}

impl CliError {
    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            code: EXIT_USAGE,
        }
    }
}

impl From<TaskIdError> for CliError {
    fn from(err: TaskIdError) -> Self {
        Self::usage(err.to_string())
    }
}

impl From<StoreError> for CliError {
    fn from(err: StoreError) -> Self {
        // Missing or misconfigured inputs are bad input (2); damage found
        // while doing the work is a failure (1).
        let code = match &err {
            StoreError::TornTail { .. }
            | StoreError::DamagedTail { .. }
            | StoreError::Unsealable { .. }
            | StoreError::Poisoned { .. }
            | StoreError::Io { .. }
            | StoreError::Encode(_)
            | StoreError::Random(_)
            | StoreError::Witness { .. }
            | StoreError::LedgerMismatch { .. } => EXIT_FAILED,
            StoreError::NoStateDir { .. }
            | StoreError::NotAStateDir { .. }
            | StoreError::UnsupportedLayout { .. }
            | StoreError::OldLayout { .. }
            | StoreError::KeyPermissions { .. }
            | StoreError::KeyDirPermissions { .. }
            | StoreError::KeyLength { .. }
            | StoreError::KeyMissing { .. }
            | StoreError::NoKeyHome
            | StoreError::NoJournal { .. }
            | StoreError::Symlink { .. }
            | StoreError::StateDirIsFile { .. }
            | StoreError::UnknownContent { .. }
            | StoreError::KeyMismatch { .. }
            | StoreError::RunId(_) => EXIT_USAGE,
        };
        Self {
            message: err.to_string(),
            code,
        }
    }
}

impl From<reprise_store::workspace::WorkspaceError> for CliError {
    fn from(err: reprise_store::workspace::WorkspaceError) -> Self {
        Self::usage(err.to_string())
    }
}
