//! Creating a state directory so that neither another command nor a crash
//! ever meets half of one, and finishing one whose creation a crash cut.
//!
//! Creation holds a `flock` on the directory the state directory goes in
//! (the project), so commands started together create it once: the others
//! wait, then find it whole. It is built beside its place under a temporary
//! name (`.<name>.creating-<pid>-<n>`): layout, `.gitignore`, and the audit
//! chain's `state.init` row, synced. Only then, the row being durable, is its
//! witness written beside the key, and last the directory is renamed into
//! place and the parent synced. A crash at any step leaves no state
//! directory, only a temporary one, which the next creation (under the same
//! lock, so no creator is live) removes, or renames into place when it is
//! whole and its witness was written; or it leaves a whole one.
//!
//! A state directory an older reprise created in place may hold what a crash
//! cut there: no first row (with no witness, or with an earlier directory's
//! witness at the same path), or a first row without its witness.
//! [`finish_creation`] completes those, and only in a directory that holds no
//! records yet, so an emptied chain beside records stays a failed check (the
//! pure rule is `reprise_core::witness::unfinished_creation`).

use std::fs::{self, File};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use reprise_core::chain::{ChainFormat, LineCheck, check_line};
use reprise_core::record::{Head, encode_audit_row};
use reprise_core::rows::{RowBody, StateInit};
use reprise_core::witness::{
    ChainFacts, STATE_INIT_KIND, StateInitBody, Unfinished, WITNESS_VERSION, Witness,
    unfinished_creation,
};
use rustix::fs::{FlockOperation, flock};

use crate::audit::{AuditLog, mint_state_id, read_audit};
use crate::chainfile::ChainFile;
use crate::error::{IoContext, Result, StoreError};
use crate::fsutil::{create_dir_all_durable, sync_dir, write_atomic};
use crate::key::KeyFile;
use crate::state::{GITIGNORE, LAYOUT_VERSION, StateDir, write_layout};
use crate::witness::{
    WitnessRead, read_witness, remove_witness_temps, supersede_witness, witness_path,
    witness_path_for, write_witness_at,
};

/// The steps of a creation, in order; a test hook may stop the process
/// after any of them, as a kill would.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreationStep {
    /// The temporary directory holds its layout and `.gitignore`.
    Built,
    /// Its audit chain holds the `state.init` row, synced.
    FirstRow,
    /// The witness beside the key records that row.
    Witnessed,
    /// The directory is in place (the parent not yet synced).
    Renamed,
}

impl CreationStep {
    pub const ALL: [Self; 4] = [Self::Built, Self::FirstRow, Self::Witnessed, Self::Renamed];

    pub fn name(self) -> &'static str {
        match self {
            Self::Built => "built",
            Self::FirstRow => "first-row",
            Self::Witnessed => "witnessed",
            Self::Renamed => "renamed",
        }
    }
}

/// What [`create_state_dir`] found or made.
#[derive(Debug)]
pub struct Creation {
    pub state: StateDir,
    /// This call made it (or finished a temporary one a crash left whole).
    pub created: bool,
    /// Where the witness of an earlier state directory at the same path went.
    pub superseded_witness: Option<PathBuf>,
    /// Older set-aside witnesses removed to keep the newest few.
    pub superseded_removed: usize,
}

/// Holds the creation lock of a state directory until dropped: an exclusive
/// `flock` on the directory it lives in.
struct CreationLock(File);

impl CreationLock {
    fn take(root: &Path) -> Result<Self> {
        let parent = parent_of(root);
        create_dir_all_durable(parent, 0o755)?;
        let dir = File::open(parent).at(parent)?;
        flock(&dir, FlockOperation::LockExclusive)
            .map_err(std::io::Error::from)
            .at(parent)?;
        Ok(Self(dir))
    }
}

impl Drop for CreationLock {
    fn drop(&mut self) {
        let _ = flock(&self.0, FlockOperation::Unlock);
    }
}

fn parent_of(root: &Path) -> &Path {
    root.parent()
        .filter(|parent| !parent.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// Creates the state directory at `root` with its first audit row and its
/// witness, or finds the one there. `after` is called after each step (a
/// test hook; the CLI passes one that does nothing outside tests).
pub fn create_state_dir(
    root: &Path,
    key: &KeyFile,
    at: &str,
    after: impl Fn(CreationStep),
) -> Result<Creation> {
    let name = root
        .file_name()
        .ok_or_else(|| StoreError::NotAStateDir {
            path: root.to_path_buf(),
        })?
        .to_string_lossy()
        .into_owned();
    let _lock = CreationLock::take(root)?;
    let found = |created| -> Result<Creation> {
        let state = StateDir::open(root)?;
        state.ensure_gitignore()?;
        Ok(Creation {
            state,
            created,
            superseded_witness: None,
            superseded_removed: 0,
        })
    };
    if crate::state::layout_path_in(root).exists() {
        return found(false);
    }
    clear_cut_skeleton(root)?;
    let parent = parent_of(root);
    let canonical = parent.canonicalize().at(parent)?.join(&name);
    let witness = witness_path_for(key, &canonical);
    for temp in stale_temps(parent, &name)? {
        if whole_and_witnessed(&temp, key, &witness)? {
            fs::rename(&temp, root).at(root)?;
            sync_dir(parent)?;
            return found(true);
        }
        fs::remove_dir_all(&temp).at(&temp)?;
    }

    let temp = build_skeleton(parent, &name)?;
    after(CreationStep::Built);
    let (state_id, head) = write_first_row(&temp, key, at)?;
    after(CreationStep::FirstRow);
    // The row is durable: now the witness may record it.
    let superseded = witness_first_row(key, &witness, root, state_id, head)?;
    after(CreationStep::Witnessed);

    fs::rename(&temp, root).at(root)?;
    after(CreationStep::Renamed);
    sync_dir(parent)?;
    let mut creation = found(true)?;
    (creation.superseded_witness, creation.superseded_removed) = superseded;
    Ok(creation)
}

/// Removes what stands at `root` when it is empty, or the skeleton an older
/// reprise's cut creation left; anything holding data refuses.
fn clear_cut_skeleton(root: &Path) -> Result<()> {
    match fs::symlink_metadata(root) {
        Ok(meta) => {
            crate::state::check_root_entry(root, &meta)?;
            if !holds_no_data(root)? {
                return Err(StoreError::UnknownContent {
                    path: root.to_path_buf(),
                });
            }
            fs::remove_dir_all(root).at(root)
        }
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(err).at(root),
    }
}

/// A new temporary directory beside `root` (named after it) holding the
/// skeleton of a state directory: its directories, `.gitignore` and layout.
fn build_skeleton(parent: &Path, name: &str) -> Result<PathBuf> {
    let temp = parent.join(format!(
        ".{name}.creating-{}-{}",
        std::process::id(),
        mint_state_id()?.trim_start_matches("S-")
    ));
    fs::create_dir(&temp).at(&temp)?;
    fs::set_permissions(&temp, fs::Permissions::from_mode(0o755)).at(&temp)?;
    for sub in crate::state::SKELETON {
        create_dir_all_durable(&temp.join(sub), 0o755)?;
    }
    write_atomic(&crate::state::gitignore_path_in(&temp), GITIGNORE, 0o644)?;
    write_layout(&temp, LAYOUT_VERSION)?;
    Ok(temp)
}

/// The audit chain's first row (`state.init`, a new state id) in `temp`.
fn write_first_row(temp: &Path, key: &KeyFile, at: &str) -> Result<(String, Head)> {
    let state_id = mint_state_id()?;
    let body = first_row(&state_id).to_body();
    let mut chain = ChainFile::open_real(
        &crate::state::audit_path_in(temp),
        ChainFormat::Audit,
        None,
        Some(key.key.clone()),
    )?;
    let head = chain
        .append(|previous| Ok(encode_audit_row(previous, key, STATE_INIT_KIND, at, &body)?))?;
    Ok((state_id, head))
}

/// Writes the witness of the new chain's first row, setting aside the
/// witness of an earlier state directory at the same path: where it went,
/// and how many older set-aside witnesses were removed.
fn witness_first_row(
    key: &KeyFile,
    witness: &Path,
    root: &Path,
    state_id: String,
    head: Head,
) -> Result<(Option<PathBuf>, usize)> {
    let superseded = if witness.exists() {
        let (aside, removed) = supersede_witness(witness)?;
        (Some(aside), removed)
    } else {
        (None, 0)
    };
    remove_witness_temps(witness)?;
    let record = Witness {
        v: WITNESS_VERSION,
        state_id,
        state_dir: root.display().to_string(),
        audit: head,
        ledger: None,
    };
    write_witness_at(key, witness, &record, true)?;
    Ok(superseded)
}

/// The temporary directories earlier creations of `name` left in `parent`.
fn stale_temps(parent: &Path, name: &str) -> Result<Vec<PathBuf>> {
    let prefix = format!(".{name}.creating-");
    let entries = match fs::read_dir(parent) {
        Ok(entries) => entries,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(err) => return Err(err).at(parent),
    };
    let mut temps: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok())
        .filter(|entry| {
            entry.file_name().to_string_lossy().starts_with(&prefix)
                && entry.file_type().is_ok_and(|kind| kind.is_dir())
        })
        .map(|entry| entry.path())
        .collect();
    temps.sort();
    Ok(temps)
}

/// Whether a temporary directory a crash left is whole (its `state.init`
/// row verifies with the key) and the witness at `witness` records exactly
/// that row: all that was left was the rename.
fn whole_and_witnessed(temp: &Path, key: &KeyFile, witness: &Path) -> Result<bool> {
    let Ok(bytes) = fs::read(witness) else {
        return Ok(false);
    };
    let Ok(recorded) = reprise_core::witness::decode_witness(key, &bytes) else {
        return Ok(false);
    };
    if !crate::state::layout_path_in(temp).is_file()
        || !crate::state::gitignore_path_in(temp).is_file()
    {
        return Ok(false);
    }
    let Ok(chain) = fs::read(crate::state::audit_path_in(temp)) else {
        return Ok(false);
    };
    let Some(line) = chain
        .strip_suffix(b"\n")
        .filter(|line| !line.contains(&b'\n'))
    else {
        return Ok(false);
    };
    let LineCheck::Row(row) = check_line(ChainFormat::Audit, Some(key), line) else {
        return Ok(false);
    };
    let state_id = serde_json::from_slice::<StateInitBody>(&line[row.payload.clone()])
        .ok()
        .map(|body| body.state_id);
    Ok(row.digest_ok
        && row.seq == 0
        && row.kind == STATE_INIT_KIND
        && state_id.as_deref() == Some(recorded.state_id.as_str())
        && recorded.audit
            == Head {
                seq: 0,
                digest: row.digest,
            })
}

/// Whether the directory at `root` holds nothing but directories, empty
/// files, reprise's `.gitignore` and `layout.json`'s or `.gitignore`'s
/// temporary files: what an older reprise's creation cut before its layout
/// was written leaves.
fn holds_no_data(root: &Path) -> Result<bool> {
    for entry in fs::read_dir(root).at(root)? {
        let entry = entry.at(root)?;
        let path = entry.path();
        let kind = entry.file_type().at(&path)?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let allowed = if kind.is_dir() {
            holds_no_data(&path)?
        } else if kind.is_file() {
            fs::metadata(&path).at(&path)?.len() == 0
                || (path.parent() == Some(root)
                    && (name == ".gitignore"
                        || name.starts_with(".gitignore.tmp-")
                        || name.starts_with(".layout.json.tmp-")))
        } else {
            false
        };
        if !allowed {
            return Ok(false);
        }
    }
    Ok(true)
}

/// What [`finish_creation`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finished {
    /// Wrote the `state.init` row and its witness; an earlier state
    /// directory's witness found at this path was set aside here.
    FirstRow {
        state_id: String,
        superseded_witness: Option<PathBuf>,
    },
    /// Wrote the witness of the `state.init` row the chain held alone.
    Witness { state_id: String },
}

/// Completes a state directory whose creation a crash cut (see the module
/// comment); `Ok(None)` when there is nothing to finish.
pub fn finish_creation(state: &StateDir, key: &KeyFile, at: &str) -> Result<Option<Finished>> {
    let _lock = CreationLock::take(state.root())?;
    let Some((verdict, head, state_id)) = judge(state, key)? else {
        return Ok(None);
    };
    let path = witness_path(key, state);
    Ok(match verdict {
        Unfinished::NoFirstRow { stale_witness } => {
            let superseded_witness = if stale_witness {
                Some(supersede_witness(&path)?.0)
            } else {
                None
            };
            remove_witness_temps(&path)?;
            let state_id = mint_state_id()?;
            AuditLog::open(state, key.clone())?.append_row(at, &first_row(&state_id))?;
            Some(Finished::FirstRow {
                state_id,
                superseded_witness,
            })
        }
        Unfinished::NoWitness => {
            let (Some(head), Some(state_id)) = (head, state_id) else {
                return Ok(None);
            };
            remove_witness_temps(&path)?;
            let record = Witness {
                v: WITNESS_VERSION,
                state_id: state_id.clone(),
                state_dir: state.root().display().to_string(),
                audit: head,
                ledger: None,
            };
            write_witness_at(key, &path, &record, true)?;
            Some(Finished::Witness { state_id })
        }
    })
}

/// Whether a crash cut the creation of the state directory (read only): what
/// `reprise replay repair audit` would finish.
pub fn unfinished(state: &StateDir, key: &KeyFile) -> Result<Option<Unfinished>> {
    Ok(judge(state, key)?.map(|(verdict, _, _)| verdict))
}

/// The verdict on a state directory's creation, with the chain's head and
/// the id its first row binds.
type Judged = (Unfinished, Option<Head>, Option<String>);

/// The verdict on the state directory's creation, with the chain's head and
/// the id its first row binds.
fn judge(state: &StateDir, key: &KeyFile) -> Result<Option<Judged>> {
    if holds_records(state)? {
        return Ok(None);
    }
    let witness = read_witness(key, state)?;
    let summary = read_audit(state, key)?;
    let state_id = crate::audit::first_state_id(state, key)?;
    let facts = ChainFacts {
        rows: summary.report.head.map_or(0, |head| head.seq + 1),
        head: summary.report.head,
        state_id: state_id.clone(),
        at_witnessed_seq: None,
    };
    let found = match &witness {
        WitnessRead::Valid(found) => Some(found),
        _ => None,
    };
    let verdict = unfinished_creation(
        found,
        matches!(witness, WitnessRead::Invalid(_)),
        &facts,
        summary.report.first_problem().is_none(),
        false,
    );
    Ok(verdict.map(|verdict| (verdict, summary.report.head, state_id)))
}

/// Whether the state directory holds any record beside its audit chain:
/// ledger rows, or anything under `plans/`, `runs/`, `worktrees/`,
/// `snapshots/`, `approvals/` or `sessions/`.
fn holds_records(state: &StateDir) -> Result<bool> {
    if fs::metadata(state.ledger_path()).is_ok_and(|meta| meta.len() > 0) {
        return Ok(true);
    }
    for sub in [
        "plans",
        "runs",
        "worktrees",
        "snapshots",
        "approvals",
        "sessions",
    ] {
        let dir = state.root().join(sub);
        match fs::read_dir(&dir) {
            Ok(mut entries) => {
                if entries.next().is_some() {
                    return Ok(true);
                }
            }
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => return Err(err).at(dir),
        }
    }
    Ok(false)
}

/// The chain's first row: the new state directory's id, under this layout.
fn first_row(state_id: &str) -> StateInit {
    StateInit(StateInitBody {
        layout: LAYOUT_VERSION,
        state_id: state_id.to_owned(),
    })
}
