//! File-system helpers with the fsync discipline: a created file or renamed
//! file is durable only once its directory is synced too. Reads that must not
//! follow a symlink say so as `StoreError::Symlink`.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use crate::error::{IoContext, Result, StoreError};

/// Syncs a directory so entries created or renamed in it survive a crash.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|handle| handle.sync_all()).at(dir)
}

/// Creates `dir` and any missing parents, syncing each parent that gained an
/// entry. `mode` applies to the directories created.
pub(crate) fn create_dir_all_durable(dir: &Path, mode: u32) -> Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent().filter(|parent| !parent.as_os_str().is_empty()) {
        create_dir_all_durable(parent, mode)?;
    }
    match fs::create_dir(dir) {
        Ok(()) => {}
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => return Ok(()),
        Err(err) => return Err(err).at(dir),
    }
    fs::set_permissions(dir, fs::Permissions::from_mode(mode)).at(dir)?;
    if let Some(parent) = dir.parent().filter(|parent| !parent.as_os_str().is_empty()) {
        sync_dir(parent)?;
    }
    Ok(())
}

/// Publishes `bytes` at `path`: temp file, fsync, rename, directory fsync.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    replace(path, bytes, mode, true)
}

/// Replaces `path` with `bytes` through the temporary file `temp`, which
/// only one writer at a time may use (the caller holds a lock): written,
/// fsynced, renamed; the directory is synced too when `sync_directory`.
/// Without it, after a crash the file is whole, either the new version or
/// the one before; for the witness, where an older version is harmless (a
/// chain longer than its witness agrees with it) and a torn one would not be.
pub(crate) fn replace_via(
    path: &Path,
    temp: &Path,
    bytes: &[u8],
    mode: u32,
    sync_directory: bool,
) -> Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(temp)
        .at(temp)?;
    file.write_all(bytes).at(temp)?;
    file.sync_all().at(temp)?;
    drop(file);
    fs::rename(temp, path).at(path)?;
    if sync_directory {
        let dir = path
            .parent()
            .expect("an atomic write targets a file in a directory");
        sync_dir(dir)?;
    }
    Ok(())
}

/// Replaces `path` with `bytes` atomically (temp file, rename) without
/// syncing: readers never see half a file, but after a crash the previous
/// version may come back. For snapshots whose truth is kept elsewhere.
pub fn replace_file(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    replace(path, bytes, mode, false)
}

fn replace(path: &Path, bytes: &[u8], mode: u32, durable: bool) -> Result<()> {
    replace_with(path, bytes, mode, durable, durable)
}

fn replace_with(
    path: &Path,
    bytes: &[u8],
    mode: u32,
    sync_file: bool,
    sync_directory: bool,
) -> Result<()> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let dir = path
        .parent()
        .expect("an atomic write targets a file in a directory");
    let name = path
        .file_name()
        .expect("an atomic write targets a named file");
    // Unique per process and per write, so concurrent writers never share one.
    let temp = dir.join(format!(
        ".{}.tmp-{}-{}",
        name.to_string_lossy(),
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&temp)
        .at(&temp)?;
    file.write_all(bytes).at(&temp)?;
    if sync_file {
        file.sync_all().at(&temp)?;
    }
    drop(file);
    fs::rename(&temp, path).at(path)?;
    if sync_directory {
        sync_dir(dir)?;
    }
    Ok(())
}

/// Reads a file without following a symlink in its place: `Ok(None)` when
/// there is no file, `Symlink` when a link is there.
pub fn read_no_follow(path: &Path) -> Result<Option<Vec<u8>>> {
    use std::io::Read;
    let mut file = match OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
    {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(refuse_symlink(err, path)),
    };
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).at(path)?;
    Ok(Some(bytes))
}

/// `O_NOFOLLOW` on a symlink fails with `ELOOP`: name it for what it is.
pub(crate) fn refuse_symlink(err: std::io::Error, path: &Path) -> StoreError {
    if err.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) {
        StoreError::Symlink {
            path: path.to_path_buf(),
        }
    } else {
        StoreError::Io {
            path: path.to_path_buf(),
            source: err,
        }
    }
}
