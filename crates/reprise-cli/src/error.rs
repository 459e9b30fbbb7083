//! The CLI's error: what went wrong, of which kind, from which error, and
//! what to do about it. The exit code comes from the kind alone; nothing
//! decides by reading a message's text.

use std::fmt;

use reprise_core::TaskIdError;
use reprise_store::StoreError;

/// How a command ended, as the process's exit code says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExitKind {
    /// Everything asked for was done (0).
    Success,
    /// A task failed, a verification failed, or a refusal (1).
    Failed,
    /// Usage or bad input; nothing was written (2).
    Usage,
    /// A run ended with tasks parked, waiting for a resume, an approval or
    /// a time (3).
    Parked,
}

impl ExitKind {
    /// The process exit code of this kind.
    pub(crate) fn code(self) -> u8 {
        match self {
            Self::Success => 0,
            Self::Failed => 1,
            Self::Usage => 2,
            Self::Parked => 3,
        }
    }
}

/// What kind of error stopped a command: the kind alone gives its exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ErrorKind {
    /// Usage, bad input or a refusal before anything was written (exit 2).
    Usage,
    /// Damage found, or a failure while doing the work (exit 1).
    Failed,
}

impl ErrorKind {
    pub(crate) fn exit(self) -> ExitKind {
        match self {
            Self::Usage => ExitKind::Usage,
            Self::Failed => ExitKind::Failed,
        }
    }
}

type Source = Box<dyn std::error::Error + Send + Sync + 'static>;

/// An error on its way to the user: one line, the kind that gives the exit
/// code, the error it came from (when there was one), and hints: what to
/// do, appended to the line.
#[derive(Debug)]
pub(crate) struct CliError {
    kind: ErrorKind,
    message: String,
    source: Option<Source>,
    hints: Vec<String>,
}

impl CliError {
    pub(crate) fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            source: None,
            hints: Vec::new(),
        }
    }

    /// Usage or bad input (exit 2).
    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Usage, message)
    }

    /// A failure while doing the work (exit 1).
    pub(crate) fn failed(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Failed, message)
    }

    /// An error of `kind` whose message is `source`'s own.
    pub(crate) fn from_source(
        kind: ErrorKind,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self {
            kind,
            message: source.to_string(),
            source: Some(Box::new(source)),
            hints: Vec::new(),
        }
    }

    /// The same error with `hint`, what to do, added after its message.
    pub(crate) fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hints.push(hint.into());
        self
    }

    /// The exit code this error ends the process with.
    pub(crate) fn exit_code(&self) -> u8 {
        self.kind.exit().code()
    }
}

/// The one line the user sees (after `error: `): the message, then each
/// hint after a semicolon.
impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        for hint in &self.hints {
            write!(f, "; {hint}")?;
        }
        Ok(())
    }
}

impl std::error::Error for CliError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|source| source as &(dyn std::error::Error + 'static))
    }
}

impl From<TaskIdError> for CliError {
    fn from(err: TaskIdError) -> Self {
        Self::from_source(ErrorKind::Usage, err)
    }
}

/// Missing or misconfigured inputs are bad input (2); damage found while
/// doing the work is a failure (1).
pub(crate) fn store_error_kind(err: &StoreError) -> ErrorKind {
    match err {
        StoreError::TornTail { .. }
        | StoreError::DamagedTail { .. }
        | StoreError::Unsealable { .. }
        | StoreError::Poisoned { .. }
        | StoreError::ShippedRowRefused { .. }
        | StoreError::Io { .. }
        | StoreError::Encode(_)
        | StoreError::Random(_)
        | StoreError::Witness { .. }
        | StoreError::LedgerMismatch { .. } => ErrorKind::Failed,
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
        | StoreError::RunId(_) => ErrorKind::Usage,
    }
}

impl From<StoreError> for CliError {
    fn from(err: StoreError) -> Self {
        Self::from_source(store_error_kind(&err), err)
    }
}

impl From<reprise_store::workspace::WorkspaceError> for CliError {
    fn from(err: reprise_store::workspace::WorkspaceError) -> Self {
        Self::from_source(ErrorKind::Usage, err)
    }
}

#[cfg(test)]
mod tests {
    use super::{CliError, ErrorKind, ExitKind};

    #[test]
    fn the_exit_code_comes_from_the_kind() {
        assert_eq!(CliError::usage("bad").exit_code(), 2);
        assert_eq!(CliError::failed("broke").exit_code(), 1);
        assert_eq!(ErrorKind::Usage.exit(), ExitKind::Usage);
        assert_eq!(ExitKind::Success.code(), 0);
        assert_eq!(ExitKind::Parked.code(), 3);
    }

    #[test]
    fn hints_follow_the_message_on_its_one_line() {
        let err = CliError::usage("no such flag").with_hint("run `reprise --help` for usage");
        assert_eq!(
            err.to_string(),
            "no such flag; run `reprise --help` for usage"
        );
    }
}
