//! The audit key: 32 random bytes kept outside the state directory, so that a
//! copy of `.reprise/` alone cannot be re-signed after tampering.
//!
//! The file must be private (no group or other bits) and its directory must
//! not be writable by others; anything looser is an error, never a warning,
//! because a key others can read or replace signs nothing.

use std::fs::{self, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use reprise_core::digest::AuditKey;

use crate::error::{IoContext, Result, StoreError};
use crate::fsutil::{create_dir_all_durable, sync_dir};

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
/// there is no key yet.
pub fn check_key(path: &Path) -> Result<bool> {
    let meta = match fs::metadata(path) {
        Ok(meta) => meta,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(err) => return Err(err).at(path),
    };
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(StoreError::KeyPermissions {
            path: path.to_path_buf(),
            mode,
        });
    }
    if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
        let dir_mode = fs::metadata(dir).at(dir)?.permissions().mode() & 0o777;
        if dir_mode & 0o022 != 0 {
            return Err(StoreError::KeyDirPermissions {
                path: dir.to_path_buf(),
                mode: dir_mode,
            });
        }
    }
    if meta.len() != 32 {
        return Err(StoreError::KeyLength {
            path: path.to_path_buf(),
            len: meta.len(),
        });
    }
    Ok(true)
}

/// Reads the key, refusing loose permissions or a wrong length.
pub fn load_key(path: &Path) -> Result<AuditKey> {
    if !check_key(path)? {
        return Err(StoreError::KeyMissing {
            path: path.to_path_buf(),
        });
    }
    let mut bytes = [0u8; 32];
    fs::File::open(path)
        .and_then(|mut file| file.read_exact(&mut bytes))
        .at(path)?;
    Ok(AuditKey(bytes))
}

/// Loads the key, creating it (0600 in a 0700 directory) if there is none.
pub fn load_or_create_key(path: &Path) -> Result<AuditKey> {
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
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .at(path)?;
    file.write_all(&bytes).at(path)?;
    file.sync_all().at(path)?;
    sync_dir(dir)?;
    // The directory check applies to keys we create as much as to found ones.
    check_key(path)?;
    Ok(AuditKey(bytes))
}
