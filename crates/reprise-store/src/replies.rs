//! Kept replies: the reply of a task's last judged attempt, at
//! `runs/<run>/failed/<task>.out`, so a retry in another process
//! (`reprise run --retry-failed`) can show the agent what it said. Written
//! atomically with mode 0600 (a reply may hold anything the agent saw),
//! capped head-and-tail, latest wins, removed when the task passes.

use std::path::PathBuf;

use reprise_core::TaskId;
use reprise_core::digest::{Digest, tagged_sha256};

use crate::error::{IoContext, Result};
use crate::fsutil::{create_dir_all_durable, write_atomic};
use crate::state::StateDir;

/// The most of a reply that is kept, in bytes.
pub const KEPT_REPLY_MAX: usize = 256 * 1024;

impl StateDir {
    /// `runs/<run>/failed/<task>.out`.
    pub fn kept_reply_path(&self, run_id: &str, task: &TaskId) -> PathBuf {
        self.runs_dir()
            .join(run_id)
            .join("failed")
            .join(format!("{}.out", task.as_str()))
    }
}

/// Keeps `reply` (cut head-and-tail by `cut` to at most `KEPT_REPLY_MAX`
/// bytes). A reply of only whitespace keeps nothing and returns `None`.
pub fn keep_reply(
    state: &StateDir,
    run_id: &str,
    task: &TaskId,
    reply: &str,
    cut: impl Fn(&str, usize) -> String,
) -> Result<Option<PathBuf>> {
    if reply.trim().is_empty() {
        return Ok(None);
    }
    let path = state.kept_reply_path(run_id, task);
    let dir = path.parent().expect("a kept reply lives in a directory");
    create_dir_all_durable(dir, 0o700)?;
    write_atomic(&path, cut(reply, KEPT_REPLY_MAX).as_bytes(), 0o600)?;
    Ok(Some(path))
}

/// The kept reply of `task` in `run_id`, if there is one.
pub fn read_kept_reply(state: &StateDir, run_id: &str, task: &TaskId) -> Result<Option<String>> {
    let path = state.kept_reply_path(run_id, task);
    match std::fs::read(&path) {
        Ok(bytes) => Ok(Some(String::from_utf8_lossy(&bytes).into_owned())),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(err).at(&path),
    }
}

/// Removes the kept reply of a task that has since passed.
pub fn drop_kept_reply(state: &StateDir, run_id: &str, task: &TaskId) -> Result<()> {
    let path = state.kept_reply_path(run_id, task);
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(err).at(&path),
    }
}

/// Domain tag of the hash the chain holds for a piece of agent text.
pub const AGENT_TEXT_TAG: &[u8] = b"reprise/agent-text/v1\n";

/// The hash a chain row holds in place of `text` the agent wrote (a
/// NEEDS_CONTEXT request, a park's question).
pub fn agent_text_hash(text: &str) -> Digest {
    tagged_sha256(AGENT_TEXT_TAG, &[text.as_bytes()])
}

impl StateDir {
    /// `runs/<run>/private/<task>/<hash>.txt`: agent text kept beside the
    /// chain, which holds only its hash.
    pub fn agent_text_path(&self, run_id: &str, task: &TaskId, hash: Digest) -> PathBuf {
        self.runs_dir()
            .join(run_id)
            .join("private")
            .join(task.as_str())
            .join(format!("{}.txt", hash.to_hex()))
    }
}

/// Keeps `text` the agent wrote beside the chain (0600 in a 0700
/// directory, as kept replies are) and returns the hash a row records.
pub fn keep_agent_text(
    state: &StateDir,
    run_id: &str,
    task: &TaskId,
    text: &str,
) -> Result<Digest> {
    let hash = agent_text_hash(text);
    let path = state.agent_text_path(run_id, task, hash);
    let dir = path.parent().expect("agent text lives in a directory");
    create_dir_all_durable(dir, 0o700)?;
    write_atomic(&path, text.as_bytes(), 0o600)?;
    Ok(hash)
}

/// The text a row's `hash` stands for, when it is kept and still hashes
/// to it (`None` otherwise: removed, or changed after it was written).
pub fn read_agent_text(
    state: &StateDir,
    run_id: &str,
    task: &TaskId,
    hash: Digest,
) -> Result<Option<String>> {
    let path = state.agent_text_path(run_id, task, hash);
    match std::fs::read(&path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes).into_owned();
            Ok((agent_text_hash(&text) == hash).then_some(text))
        }
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(err).at(&path),
    }
}
