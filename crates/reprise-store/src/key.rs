//! The audit key: 32 random bytes kept outside the state directory, so that a
//! copy of `.reprise/` alone cannot be re-signed after tampering.
//!
//! The file must be private (no group or other bits) and its directory must
//! not be writable by others; anything looser is an error, never a warning,
//! because a key others can read or replace signs nothing.

use std::fs::{self, OpenOptions};
use std::io::{Read, Write};
use std::ops::Deref;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use reprise_core::digest::AuditKey;

use crate::error::{IoContext, Result, StoreError};
use crate::fsutil::{create_dir_all_durable, sync_dir};

/// The audit key with the path it was read from: the witness of each state
/// directory lives beside it (see `witness`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyFile {
    pub key: AuditKey,
    /// The key file's real path (symlinks resolved).
    pub path: PathBuf,
}

impl Deref for KeyFile {
    type Target = AuditKey;
    fn deref(&self) -> &AuditKey {
        &self.key
    }
}

/// Where the key lives: `REPRISE_AUDIT_KEY_FILE`, else
/// `$XDG_STATE_HOME/reprise/audit.key`, else `~/.local/state/reprise/audit.key`.
pub fn key_path(env: impl Fn(&str) -> Option<String>) -> Result<PathBuf> {
    let set = |name: &str| env(name).filter(|value| !value.is_empty());
    if let Some(path) = set("REPRISE_AUDIT_KEY_FILE") {
        return Ok(PathBuf::from(path));
    }
    if let Some(state) = set("XDG_STATE_HOME") {
        return Ok(Path::new(&state).join("reprise").join("audit.key"));
    }
    let home = set("HOME").ok_or(StoreError::NoKeyHome)?;
    Ok(Path::new(&home).join(".local/state/reprise/audit.key"))
}

/// Checks the key file's permissions without reading it. `Ok(false)` when
/// there is no key yet. A symlink is judged by its real target and the
/// target's directory, not by the link: a private-looking link into a
/// directory others can write protects nothing.
pub fn check_key(path: &Path) -> Result<bool> {
    let real = match fs::canonicalize(path) {
        Ok(real) => real,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            match fs::symlink_metadata(path) {
                // A dangling link: its target is where a new key would land.
                Ok(meta) if meta.file_type().is_symlink() => {
                    return Err(StoreError::KeyMissing {
                        path: path.to_path_buf(),
                    });
                }
                // A key linked into place between the two looks (another
                // command created it just now): look at it again.
                Ok(_) => return check_key(path),
                Err(_) => {}
            }
            // No key yet: one would be created here, so the directory it
            // would land in must already be private.
            if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty())
                && let Ok(meta) = fs::metadata(dir)
            {
                let dir_mode = meta.permissions().mode() & 0o7777;
                if dir_mode & 0o022 != 0 {
                    return Err(StoreError::KeyDirPermissions {
                        path: dir.to_path_buf(),
                        mode: dir_mode,
                    });
                }
            }
            return Ok(false);
        }
        Err(err) => return Err(err).at(path),
    };
    let meta = fs::metadata(&real).at(&real)?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(StoreError::KeyPermissions { path: real, mode });
    }
    if let Some(dir) = real.parent().filter(|dir| !dir.as_os_str().is_empty()) {
        let dir_mode = fs::metadata(dir).at(dir)?.permissions().mode() & 0o7777;
        if dir_mode & 0o022 != 0 {
            return Err(StoreError::KeyDirPermissions {
                path: dir.to_path_buf(),
                mode: dir_mode,
            });
        }
    }
    if meta.len() != 32 {
        return Err(StoreError::KeyLength {
            path: real,
            len: meta.len(),
        });
    }
    Ok(true)
}

/// Reads the key, refusing loose permissions or a wrong length.
pub fn load_key(path: &Path) -> Result<KeyFile> {
    if !check_key(path)? {
        return Err(StoreError::KeyMissing {
            path: path.to_path_buf(),
        });
    }
    let real = fs::canonicalize(path).at(path)?;
    let mut bytes = [0u8; 32];
    fs::File::open(&real)
        .and_then(|mut file| file.read_exact(&mut bytes))
        .at(&real)?;
    Ok(KeyFile {
        key: AuditKey(bytes),
        path: real,
    })
}

/// Loads the key, creating it (0600 in a 0700 directory) if there is none.
pub fn load_or_create_key(path: &Path) -> Result<KeyFile> {
    if check_key(path)? {
        return load_key(path);
    }
    let dir = path
        .parent()
        .filter(|dir| !dir.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    create_dir_all_durable(dir, 0o700)?;
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|err| StoreError::Random(err.to_string()))?;
    // Written whole under a name of this process's, then linked into place:
    // two commands creating the key together never see a short one, and the
    // one that loses the link uses the winner's.
    let name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temp = dir.join(format!(".{name}.new-{}", std::process::id()));
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temp)
        .at(&temp)?;
    file.write_all(&bytes).at(&temp)?;
    file.sync_all().at(&temp)?;
    drop(file);
    let linked = fs::hard_link(&temp, path);
    let _ = fs::remove_file(&temp);
    match linked {
        Ok(()) => {}
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(err) => return Err(err).at(path),
    }
    sync_dir(dir)?;
    // The directory check applies to keys we create as much as to found ones.
    check_key(path)?;
    load_key(path)
}
