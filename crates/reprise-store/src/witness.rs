//! The witness file of a state directory, kept beside the audit key.
//!
//! `<key dir>/witness/<name>.json`, where `<name>` is a hash of the state
//! directory's canonical path, mode 0600 in a 0700 directory. It is replaced
//! atomically (temp file, fsync, rename) after every audit append, while the
//! audit chain's lock is held, so two appenders never write it out of order.
//! That lock (or, while a state directory is being created, the creation
//! lock) is also why its temporary file has one fixed name: only one writer
//! uses it at a time, and what a crash leaves there is overwritten by the
//! next write instead of piling up. The format and the comparison with the
//! chain are in `reprise_core::witness`.

use std::fs;
use std::path::PathBuf;

use reprise_core::digest::tagged_sha256;
use reprise_core::witness::{Witness, WitnessFault, decode_witness, encode_witness};

use crate::error::{IoContext, Result};
use crate::fsutil::{create_dir_all_durable, replace_via};
use crate::key::KeyFile;
use crate::state::StateDir;

/// What was found where the witness should be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WitnessRead {
    Missing,
    Invalid(WitnessFault),
    Valid(Witness),
}

/// Where the witness of `state` lives for this key.
pub fn witness_path(key: &KeyFile, state: &StateDir) -> PathBuf {
    let root = state
        .root()
        .canonicalize()
        .unwrap_or_else(|_| state.root().to_path_buf());
    witness_path_for(key, &root)
}

/// Where the witness of the state directory whose canonical path is `root`
/// lives for this key (`root` need not exist yet: a state directory being
/// created gets its witness before it appears).
pub fn witness_path_for(key: &KeyFile, root: &std::path::Path) -> PathBuf {
    let name = tagged_sha256(
        b"reprise/witness-name/v1\n",
        &[root.as_os_str().as_encoded_bytes()],
    )
    .to_hex();
    key.path
        .parent()
        .map_or_else(|| PathBuf::from("."), PathBuf::from)
        .join("witness")
        .join(format!("{}.json", &name[..32]))
}

/// Reads and checks the witness of `state`.
pub fn read_witness(key: &KeyFile, state: &StateDir) -> Result<WitnessRead> {
    let path = witness_path(key, state);
    match fs::read(&path) {
        Ok(bytes) => Ok(match decode_witness(key, &bytes) {
            Ok(witness) => WitnessRead::Valid(witness),
            Err(fault) => WitnessRead::Invalid(fault),
        }),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(WitnessRead::Missing),
        Err(err) => Err(err).at(path),
    }
}

/// Replaces the witness of `state`: the file is synced before the rename,
/// the directory is not. A crash may bring back the previous witness, which
/// is behind the chain and so still agrees with it; it never leaves a torn
/// one. (One fsync per audit append instead of two.)
/// The first witness of a state directory (`first`) is published with its
/// directory synced too, so a crash cannot lose it altogether.
pub fn write_witness(
    key: &KeyFile,
    state: &StateDir,
    witness: &Witness,
    first: bool,
) -> Result<()> {
    let path = witness_path(key, state);
    if let Some(dir) = path.parent() {
        create_dir_all_durable(dir, 0o700)?;
    }
    write_witness_at(key, &path, witness, first)
}

/// As [`write_witness`], at `path`.
pub(crate) fn write_witness_at(
    key: &KeyFile,
    path: &std::path::Path,
    witness: &Witness,
    first: bool,
) -> Result<()> {
    if let Some(dir) = path.parent() {
        create_dir_all_durable(dir, 0o700)?;
    }
    let bytes = encode_witness(key, witness)?;
    replace_via(path, &temp_path(path), &bytes, 0o600, first)
}

/// The witness's one temporary file: `.<name>.tmp` beside it.
fn temp_path(path: &std::path::Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.tmp"))
}

/// Removes the temporary files an older reprise left beside the witness at
/// `path` when a crash cut a write (`.<name>.tmp-<pid>-<n>`), and the fixed
/// one. Call it only while holding the lock that serialises witness writes.
pub(crate) fn remove_witness_temps(path: &std::path::Path) -> Result<()> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Ok(());
    };
    let prefix = format!(".{}.tmp", name.to_string_lossy());
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(err) => return Err(err).at(dir),
    };
    for entry in entries.filter_map(|entry| entry.ok()) {
        let file = entry.file_name();
        let file = file.to_string_lossy();
        if file == prefix || file.starts_with(&format!("{prefix}-")) {
            let stale = entry.path();
            match fs::remove_file(&stale) {
                Ok(()) => {}
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
                Err(err) => return Err(err).at(stale),
            }
        }
    }
    Ok(())
}

/// How many witnesses of earlier state directories at one path are kept
/// (`<name>.json.superseded.N`, the newest ones); older ones are removed.
pub const SUPERSEDED_KEPT: usize = 3;

/// Moves the witness at `path` aside as `<name>.json.superseded.N` (N one
/// past the highest there), then removes all but the newest
/// [`SUPERSEDED_KEPT`]. Returns where it went and how many were removed.
pub(crate) fn supersede_witness(path: &std::path::Path) -> Result<(PathBuf, usize)> {
    let superseded = superseded_copies(path)?;
    let next = superseded.last().map_or(1, |(n, _)| n + 1);
    let aside = path.with_extension(format!("json.superseded.{next}"));
    fs::rename(path, &aside).at(path)?;
    let mut removed = 0;
    let keep_from = (superseded.len() + 1).saturating_sub(SUPERSEDED_KEPT);
    for (_, old) in superseded.iter().take(keep_from) {
        match fs::remove_file(old) {
            Ok(()) => removed += 1,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => return Err(err).at(old),
        }
    }
    if let Some(dir) = path.parent() {
        crate::fsutil::sync_dir(dir)?;
    }
    Ok((aside, removed))
}

/// The `.superseded.N` copies of the witness at `path`, by N.
fn superseded_copies(path: &std::path::Path) -> Result<Vec<(u64, PathBuf)>> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Ok(Vec::new());
    };
    let prefix = format!("{}.superseded.", name.to_string_lossy());
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(err) => return Err(err).at(dir),
    };
    let mut copies: Vec<(u64, PathBuf)> = entries
        .filter_map(|entry| entry.ok())
        .filter_map(|entry| {
            let file = entry.file_name().to_string_lossy().into_owned();
            let n = file.strip_prefix(&prefix)?.parse::<u64>().ok()?;
            Some((n, entry.path()))
        })
        .collect();
    copies.sort();
    Ok(copies)
}
