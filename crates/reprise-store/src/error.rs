//! The store's one error type. Integrity failures are their own variants so
//! callers can tell a damaged file from a missing one without parsing text.

use std::io;
use std::path::PathBuf;

use reprise_core::canonical::EncodeError;
use reprise_core::witness::WitnessReason;

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// What went wrong in the state directory. Messages are one lowercase line
/// that names the path and says what to do.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(
        "no reprise state directory found from {start}; run `reprise init` or pass --state-dir"
    )]
    NoStateDir { start: PathBuf },
    #[error(
        "{path} is not a reprise state directory (no layout.json); run `reprise init` there or pass another --state-dir"
    )]
    NotAStateDir { path: PathBuf },
    #[error(
        "{path} has layout version {found}; this reprise reads version {supported}: upgrade reprise"
    )]
    UnsupportedLayout {
        path: PathBuf,
        found: u64,
        supported: u64,
    },
    #[error(
        "{path} uses layout 1 (task journals not yet kept per plan); run `reprise init` to migrate it"
    )]
    OldLayout { path: PathBuf },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "audit key {path} is readable or writable by others (mode {mode:o}); run `chmod 600 {path}`"
    )]
    KeyPermissions { path: PathBuf, mode: u32 },
    #[error(
        "directory {path} of the audit key is writable by others (mode {mode:o}); keep the key in a private directory instead, e.g. REPRISE_AUDIT_KEY_FILE=$HOME/.local/state/reprise/audit.key"
    )]
    KeyDirPermissions { path: PathBuf, mode: u32 },
    #[error(
        "audit key {path} holds {len} bytes, not 32; restore the key file or move it aside and run `reprise init`"
    )]
    KeyLength { path: PathBuf, len: u64 },
    #[error(
        "audit key {path} does not exist (or is a link to nothing); restore the key file there, or point REPRISE_AUDIT_KEY_FILE at it"
    )]
    KeyMissing { path: PathBuf },
    #[error(
        "no home directory to keep the audit key in; set REPRISE_AUDIT_KEY_FILE or XDG_STATE_HOME"
    )]
    NoKeyHome,
    #[error("cannot draw random bytes for the audit key: {0}")]
    Random(String),
    #[error("{path} ends in a torn line; run `reprise replay repair {task}`")]
    TornTail { path: PathBuf, task: String },
    #[error(
        "the last row of {path} does not verify; nothing was appended: inspect it with `reprise journal verify` or `reprise audit verify`"
    )]
    DamagedTail { path: PathBuf },
    #[error(
        "cannot seal {path}: {reason} at row {row}; run `reprise journal verify` to inspect it"
    )]
    Unsealable {
        path: PathBuf,
        row: u64,
        reason: &'static str,
    },
    #[error(
        "a shipped row was refused for {path} ({reason}); nothing was appended: the worker's copy of the journal is not this one's, so run the task again"
    )]
    ShippedRowRefused { path: PathBuf, reason: &'static str },
    #[error("{path} has an earlier failed write; reopen it to continue")]
    Poisoned { path: PathBuf },
    #[error("no journal for task {task} at {path}")]
    NoJournal { task: String, path: PathBuf },
    #[error(transparent)]
    Encode(#[from] EncodeError),
    #[error(transparent)]
    RunId(#[from] reprise_core::RunIdError),
    #[error(
        "{path} is a symlink; reprise does not follow links in its state directory: replace it with the real file or directory"
    )]
    Symlink { path: PathBuf },
    #[error(
        "{path} is not a directory; point --state-dir or REPRISE_STATE_DIR at a state directory"
    )]
    StateDirIsFile { path: PathBuf },
    #[error(
        "{path} exists without a layout.json and holds files reprise did not write; nothing was written: move it aside, or pass --state-dir DIR"
    )]
    UnknownContent { path: PathBuf },
    #[error("{chain}: {}; nothing was appended: run `reprise audit verify`", reason.explain())]
    Witness {
        chain: PathBuf,
        reason: WitnessReason,
    },
    #[error(
        "audit key {path} does not sign the audit chain of {state} (its state.init row does not verify with it); use the key this state directory was initialised with"
    )]
    KeyMismatch { path: PathBuf, state: PathBuf },
    #[error(
        "the ledger {path} does not match its seals in the audit chain ({reason}); nothing was appended: run `reprise status` to inspect it"
    )]
    LedgerMismatch { path: PathBuf, reason: &'static str },
}

/// Attaches the path to an I/O error.
pub(crate) trait IoContext<T> {
    fn at(self, path: impl Into<PathBuf>) -> Result<T>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn at(self, path: impl Into<PathBuf>) -> Result<T> {
        self.map_err(|source| StoreError::Io {
            path: path.into(),
            source,
        })
    }
}
