//! Every attempt's output, kept: the agent's stdout, stderr and reply, and
//! each gate's output, at `runs/<run>/logs/<task>/<attempt>/` (directories
//! 0700, files 0600: an agent's output may quote secrets it read). Each file
//! is already bounded head-and-tail by whoever produced it; nothing here is
//! part of a chain, so a log may be deleted without breaking verification.

use std::fs;
use std::path::PathBuf;

use reprise_core::TaskId;

use crate::error::{IoContext, Result};
use crate::fsutil::create_dir_all_durable;
use crate::state::StateDir;
use crate::write_atomic;

/// One kept output of an attempt: its name (`agent.stdout`, `agent.stderr`,
/// `reply`, `gate.<name>`) and where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptLog {
    pub attempt: u32,
    pub name: String,
    pub path: PathBuf,
}

impl StateDir {
    /// `runs/<run>/logs/<task>/`.
    pub fn task_logs_dir(&self, run_id: &str, task: &TaskId) -> Result<PathBuf> {
        reprise_core::check_run_id(run_id)?;
        Ok(self
            .runs_dir()
            .join(run_id)
            .join("logs")
            .join(task.as_str()))
    }
}

/// Makes an attempt's log directory (0700, parents too).
pub fn make_log_dir(dir: &std::path::Path) -> Result<()> {
    create_dir_all_durable(dir, 0o700)
}

/// Keeps an attempt's outputs, each `(name, text)`; empty texts are skipped.
pub fn keep_attempt_logs(
    state: &StateDir,
    run_id: &str,
    task: &TaskId,
    attempt: u32,
    outputs: &[(String, &str)],
) -> Result<()> {
    let dir = state.task_logs_dir(run_id, task)?.join(attempt.to_string());
    create_dir_all_durable(&dir, 0o700)?;
    for (name, text) in outputs.iter().filter(|(_, text)| !text.is_empty()) {
        write_atomic(&dir.join(name), text.as_bytes(), 0o600)?;
    }
    Ok(())
}

/// The kept outputs of `task` in `run_id`, by attempt then name.
pub fn attempt_logs(state: &StateDir, run_id: &str, task: &TaskId) -> Result<Vec<KeptLog>> {
    let dir = state.task_logs_dir(run_id, task)?;
    let entries = match fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(err) => return Err(err).at(&dir),
    };
    let mut logs = Vec::new();
    for entry in entries {
        let entry = entry.at(&dir)?;
        let Some(attempt) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let attempt_dir = entry.path();
        for file in fs::read_dir(&attempt_dir).at(&attempt_dir)? {
            let file = file.at(&attempt_dir)?;
            if let Some(name) = file.file_name().to_str() {
                logs.push(KeptLog {
                    attempt,
                    name: name.to_owned(),
                    path: file.path(),
                });
            }
        }
    }
    logs.sort_by(|a, b| {
        (a.attempt, log_order(&a.name), &a.name).cmp(&(b.attempt, log_order(&b.name), &b.name))
    });
    Ok(logs)
}

/// The agent's streams, then its reply, then the gates.
fn log_order(name: &str) -> u8 {
    match name {
        "agent.stdout" => 0,
        "agent.stderr" => 1,
        "reply" => 2,
        _ => 3,
    }
}
