//! Advisory locks in the state directory (`locks/`), held with `flock` so a
//! crashed holder never leaves a lock behind: the kernel drops it with the
//! process.
//!
//! - `worktree.lock` serialises git's worktree administration: parallel
//!   seats and concurrent runs never race in `.git/worktrees/`.
//! - `plans/<plan>/<task>.lock` is held by the run that runs a task, for the
//!   run's whole life, and names that run and its pid, so a second run that
//!   would run the same task is refused before it writes anything.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use reprise_core::TaskKey;
use rustix::fs::{FlockOperation, flock};
use serde::{Deserialize, Serialize};

use crate::error::{IoContext, Result};
use crate::fsutil::create_dir_all_durable;
use crate::state::StateDir;

/// An exclusive lock, released when dropped (or when the process dies).
#[derive(Debug)]
pub struct HeldLock {
    file: File,
    path: PathBuf,
}

impl HeldLock {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for HeldLock {
    fn drop(&mut self) {
        let _ = flock(&self.file, FlockOperation::Unlock);
    }
}

/// Who holds a task: written into its lock file by the holder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    pub run_id: String,
    pub pid: u32,
}

fn open_lock_file(path: &Path) -> Result<File> {
    if let Some(dir) = path.parent() {
        create_dir_all_durable(dir, 0o755)?;
    }
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .custom_flags(rustix::fs::OFlags::CLOEXEC.bits() as i32)
        .open(path)
        .at(path)
}

/// Waits for the worktree lock.
pub fn worktree_lock(state: &StateDir) -> Result<HeldLock> {
    let path = state.locks_dir().join("worktree.lock");
    let file = open_lock_file(&path)?;
    flock(&file, FlockOperation::LockExclusive)
        .map_err(std::io::Error::from)
        .at(&path)?;
    Ok(HeldLock { file, path })
}

/// The lock file of one plan's task.
pub fn task_lock_path(state: &StateDir, task: &TaskKey) -> PathBuf {
    state
        .locks_dir()
        .join("plans")
        .join(task.plan.as_str())
        .join(format!("{}.lock", task.task))
}

/// Takes `task`'s lock for `holder` without waiting: `Ok(Err(other))` names
/// the run that holds it now. The lock file is written only once the lock is
/// held, so a refused caller changes nothing.
pub fn try_task_lock(
    state: &StateDir,
    task: &TaskKey,
    holder: &Holder,
) -> Result<std::result::Result<HeldLock, Holder>> {
    let path = task_lock_path(state, task);
    let mut file = open_lock_file(&path)?;
    match flock(&file, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {}
        Err(rustix::io::Errno::WOULDBLOCK) => {
            let mut text = String::new();
            let _ = file.read_to_string(&mut text);
            let other = serde_json::from_str(&text).unwrap_or(Holder {
                run_id: "an unknown run".to_owned(),
                pid: 0,
            });
            return Ok(Err(other));
        }
        Err(err) => return Err(std::io::Error::from(err)).at(&path),
    }
    let bytes = serde_json::to_vec(holder).expect("a holder serialises");
    file.set_len(0).at(&path)?;
    file.seek(SeekFrom::Start(0)).at(&path)?;
    file.write_all(&bytes).at(&path)?;
    Ok(Ok(HeldLock { file, path }))
}

/// Whether some live process holds `task`'s lock now, and who.
pub fn task_holder(state: &StateDir, task: &TaskKey) -> Option<Holder> {
    let path = task_lock_path(state, task);
    let mut file = File::open(&path).ok()?;
    match flock(&file, FlockOperation::NonBlockingLockShared) {
        Ok(()) => {
            let _ = flock(&file, FlockOperation::Unlock);
            None
        }
        Err(_) => {
            let mut text = String::new();
            let _ = file.read_to_string(&mut text);
            serde_json::from_str(&text).ok()
        }
    }
}
